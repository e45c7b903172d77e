// codeact's prelude for the QuickJS guest built here (`wasm:js`): the helpers
// every script sees, and the step the guest's Rust side calls to run a script.
// The guest puts codeact_runtime::JS_ENCODER in place of the encoder placeholder
// and defines four native hooks on globalThis before evaluating this; the
// prelude takes them and deletes them, and evaluates to an object of its own
// functions that the guest keeps out of every script's reach:
//
// - `__codeact_call_tool(request)`: sends `{"name", "args"}` (JSON text) to the
//   host and returns its reply, `{"ok": value}` or `{"error": message}` (text);
// - `__codeact_log(line)`: one line of printed output;
// - `__codeact_eval(code)`: evaluates a script as global code, its completion
//   value out;
// - `__codeact_encode(value, maxDepth, lenient, Date.prototype, getTime,
//   toISOString)`: a value as JSON text by the encoder's rules, or what it
//   leaves to the encoder (see the guest's `encode.rs`).
//
// What the helpers and the encoder use is taken now and called through a
// captured Reflect.apply: a script that later replaces JSON.parse, an Array or
// String method or Function.prototype.call, or sets a toJSON on a prototype,
// cannot change how later steps' tool calls and values reach the host. The
// helpers are put back before every script.
(() => {
  const g = globalThis;
  const apply = Reflect.apply;
  const parse = JSON.parse;
  const defineProperty = Object.defineProperty;
  const freeze = Object.freeze;
  const keysOf = Object.keys;
  const hasOwn = Object.prototype.hasOwnProperty;
  const indexOf = String.prototype.indexOf;
  const slice = String.prototype.slice;
  const StringC = String;
  const ProxyC = Proxy;
  const TypeErrorC = TypeError;
  const WeakMapC = WeakMap;
  const weakGet = WeakMap.prototype.get;
  const weakSet = WeakMap.prototype.set;
  const PromiseC = Promise;
  const promiseResolve = Promise.resolve;
  const promiseReject = Promise.reject;
  const promiseThen = Promise.prototype.then;
  const promiseFinally = Promise.prototype.finally;
  const ErrorC = Error;
  const SyntaxErrorC = SyntaxError;
  const sendRequest = g.__codeact_call_tool;
  const sendBatch = g.__codeact_call_tools;
  const settle = g.__codeact_settle;
  const log = g.__codeact_log;
  const evalScript = g.__codeact_eval;
  const encodeNatively = g.__codeact_encode;
  delete g.__codeact_call_tool;
  delete g.__codeact_call_tools;
  delete g.__codeact_settle;
  delete g.__codeact_log;
  delete g.__codeact_eval;
  delete g.__codeact_encode;
  const DatePrototype = Date.prototype;
  const getTime = Date.prototype.getTime;
  const toISOString = Date.prototype.toISOString;

  class Unrepresentable extends ErrorC {}
  const encode = (__CODEACT_ENCODER__)((message) => {
    throw new Unrepresentable(message);
  });

  // Set by the session's start: the nesting depth limit.
  let maxDepth = 64;
  const show = (v) => {
    if (typeof v === "string") return v;
    try {
      return encode(v, 100, true);
    } catch (e) {
      return StringC(v);
    }
  };

  // A value as JSON, tool arguments (`lenient`) or a completion value: in
  // Rust for the common values (the guest's `encode`), by the encoder for the
  // rest, with the same rules.
  const encodeFast = (value, lenient) => {
    const native = encodeNatively(value, maxDepth, lenient, DatePrototype, getTime, toISOString);
    if (typeof native === "string") return native;
    if (native !== null) throw new Unrepresentable(native.refused);
    return encode(value, maxDepth, lenient, lenient ? "args" : "output");
  };

  // In a script that waits on promises (codeact_runtime::js_await), a tool
  // call returns a promise-like value and joins the queue; the queue goes to
  // the host as one batch, whose calls it makes together, as soon as the
  // script waits on any of them (or when it ends). Elsewhere a call returns
  // its value.
  let asynchronous = false;
  let queue = [];
  const records = new WeakMapC();
  const flush = () => {
    if (queue.length === 0) return;
    const batch = queue;
    queue = [];
    let text = "[";
    for (let i = 0; i < batch.length; i++) {
      text += (i > 0 ? "," : "") + '{"name":' + encodeFast(batch[i].name, false) + ',"args":' + batch[i].args + "}";
    }
    const answer = parse(sendBatch(text + "]"));
    const results = apply(hasOwn, answer, ["results"]) ? answer.results : null;
    for (let i = 0; i < batch.length; i++) {
      const result = results !== null && i < results.length ? results[i] : null;
      batch[i].done = true;
      if (result === null || typeof result !== "object") {
        batch[i].ok = false;
        batch[i].value = apply(hasOwn, answer, ["error"]) ? answer.error : `tool '${batch[i].name}' got no answer from the host`;
      } else if (apply(hasOwn, result, ["error"])) {
        batch[i].ok = false;
        batch[i].value = result.error;
      } else {
        batch[i].ok = true;
        batch[i].value = apply(hasOwn, result, ["ok"]) ? result.ok : null;
      }
    }
  };
  const resolveNow = (record) => {
    if (!record.done) flush();
    if (record.ok) return record.value;
    throw new ErrorC(record.value);
  };
  const settled = (record) => {
    if (record.promise === undefined) {
      try {
        record.promise = apply(promiseResolve, PromiseC, [resolveNow(record)]);
      } catch (e) {
        record.promise = apply(promiseReject, PromiseC, [e]);
      }
    }
    return record.promise;
  };
  const misuse = (name) => {
    throw new TypeErrorC(
      `${name}(...) gives a promise in a script that uses await: write \`await ${name}(...)\` to use its result`,
    );
  };
  const pending = (name, args) => {
    const record = { __proto__: null, name, args, done: false, ok: false, value: undefined, promise: undefined };
    queue[queue.length] = record;
    const methods = {
      __proto__: null,
      then: (onFulfilled, onRejected) => apply(promiseThen, settled(record), [onFulfilled, onRejected]),
      catch: (onRejected) => apply(promiseThen, settled(record), [undefined, onRejected]),
      finally: (onFinally) => apply(promiseFinally, settled(record), [onFinally]),
    };
    const promise = new ProxyC(methods, {
      __proto__: null,
      get: (target, key) => {
        if (key === "then" || key === "catch" || key === "finally") return target[key];
        if (typeof key === "symbol") return undefined;
        return misuse(name);
      },
      ownKeys: () => misuse(name),
      set: () => misuse(name),
    });
    apply(weakSet, records, [promise, record]);
    return promise;
  };
  const callTool = (name, args) => {
    name = StringC(name);
    const json = encodeFast(args === undefined ? {} : args, true);
    if (asynchronous) return pending(name, json);
    const answer = parse(sendRequest('{"name":' + encodeFast(name, false) + ',"args":' + json + "}"));
    if (apply(hasOwn, answer, ["error"])) throw new ErrorC(answer.error);
    return apply(hasOwn, answer, ["ok"]) ? answer.ok : null;
  };
  // `await X` outside any function: X's value now (codeact_runtime::js_await).
  const awaitNow = (value) => {
    const record = apply(weakGet, records, [value]);
    if (record !== undefined) return resolveNow(record);
    if (value === null || (typeof value !== "object" && typeof value !== "function")) return value;
    return settle(apply(promiseResolve, PromiseC, [value]));
  };
  defineProperty(g, "__codeact_await", { __proto__: null, value: awaitNow, writable: false, configurable: false, enumerable: false });
  // Every name is a tool: the host checks it on each call.
  const tools = new ProxyC({}, {
    get: (_, name) => (typeof name === "string" ? (args) => callTool(name, args) : undefined),
  });
  const console = {};
  for (const level of ["log", "info", "debug", "warn", "error"]) {
    const tag = level === "warn" || level === "error" ? `[${level}] ` : "";
    console[level] = (...parts) => {
      let line = tag;
      for (let i = 0; i < parts.length; i++) line += (i > 0 ? " " : "") + show(parts[i]);
      log(line);
    };
  }
  const helpers = {
    __proto__: null,
    observation: (value) => ({ type: "observation", value }),
    final_result: (value, artifacts) =>
      artifacts === undefined ? { type: "final_result", value } : { type: "final_result", value, artifacts },
    error: (message) => ({ type: "error", message: StringC(message) }),
    transfer_to_agent: (agent_name) => ({ type: "transfer_to_agent", agent_name: StringC(agent_name) }),
    call_tool: callTool,
    tools,
    console,
  };
  const names = ["observation", "final_result", "error", "transfer_to_agent", "call_tool", "tools", "console"];
  // The helpers as the prelude made them, whatever an earlier script rebound.
  const install = () => {
    for (let i = 0; i < names.length; i++) {
      const name = names[i];
      const value = helpers[name];
      try {
        defineProperty(g, name, { __proto__: null, value, writable: true, configurable: true, enumerable: false });
      } catch (e) {
        // A script declared `function final_result` (not configurable): assign.
        try { g[name] = value; } catch (inner) { /* a frozen global: left as is */ }
      }
    }
  };
  install();

  // The lines of a stack that are the script's, not the prelude's.
  const scriptStack = (stack) => {
    let kept = "";
    let at = 0;
    while (at <= stack.length) {
      let end = apply(indexOf, stack, ["\n", at]);
      if (end < 0) end = stack.length;
      const line = apply(slice, stack, [at, end]);
      let blank = true;
      for (let k = 0; k < line.length && blank; k++) blank = line[k] === " " || line[k] === "\t";
      if (!blank && apply(indexOf, line, ["(script:"]) >= 0) kept += (kept === "" ? "" : "\n") + line;
      at = end + 1;
    }
    return kept;
  };
  const describe = (e) => {
    if (e instanceof ErrorC) {
      const stack = typeof e.stack === "string" ? scriptStack(e.stack) : "";
      return stack ? `${e.name}: ${e.message}\n${stack}` : `${e.name}: ${e.message}`;
    }
    return `Uncaught ${show(e)}`;
  };
  const failure = (e) => {
    if (e instanceof Unrepresentable) return { fail: "unrepresentable", message: e.message };
    if (e instanceof SyntaxErrorC) return { fail: "syntax", message: describe(e) };
    const text = describe(e);
    const name = e instanceof ErrorC ? e.name : "";
    const message = e instanceof ErrorC && typeof e.message === "string" ? e.message : "";
    if (name === "InternalError" && apply(indexOf, message, ["out of memory"]) >= 0)
      return { fail: "memory", message: text };
    if ((name === "RangeError" || name === "InternalError") &&
        (apply(indexOf, message, ["stack overflow"]) >= 0 || apply(indexOf, message, ["call stack"]) >= 0 ||
         apply(indexOf, message, ["Maximum call stack"]) >= 0))
      return { fail: "call_depth", message: text };
    return { fail: "thrown", message: text };
  };

  const MEMORY_FAILURE = '{"fail":"memory","message":"InternalError: out of memory"}';
  const UNSHOWN_FAILURE = '{"fail":"thrown","message":"the script threw a value that cannot be shown"}';
  const outOfMemory = (e) => {
    try {
      return e instanceof ErrorC && e.name === "InternalError" && apply(indexOf, e.message, ["out of memory"]) >= 0;
    } catch (inner) {
      return false;
    }
  };

  // The guest's own functions: never on globalThis.
  return {
    // The session's limits, and its namespace objects (an MCP server's tools as
    // methods: `github.create_issue({...})`, frozen, put back with the helpers):
    // `namespaces` is JSON of {namespace: {member: tool name}}.
    start: (depth, namespaces) => {
      maxDepth = depth;
      const objects = parse(namespaces);
      const list = keysOf(objects);
      for (let i = 0; i < list.length; i++) {
        const namespace = list[i];
        if (namespace in helpers) continue;
        const members = objects[namespace];
        const object = { __proto__: null };
        const memberNames = keysOf(members);
        for (let k = 0; k < memberNames.length; k++) {
          const tool = StringC(members[memberNames[k]]);
          object[memberNames[k]] = (args) => callTool(tool, args);
        }
        helpers[namespace] = freeze(object);
        names[names.length] = namespace;
      }
      install();
    },
    // Runs one script: JSON text, `{"done": value}` or `{"fail": kind, "message"}`.
    step: (code, waitsOnPromises) => {
      try {
        install();
        asynchronous = waitsOnPromises === true;
        queue = [];
        let value = evalScript(code);
        if (asynchronous) {
          // A promise as the completion value stands for what it settles
          // to; calls never waited on are made as the script ends.
          value = awaitNow(value);
          flush();
          asynchronous = false;
        }
        if (value === undefined) {
          return '{"fail":"no_value","message":"the script\'s completion value was undefined: end the script with an expression such as final_result(value), not with a declaration"}';
        }
        return '{"done":' + encodeFast(value, false) + "}";
      } catch (e) {
        try {
          return encode(failure(e), 4, false);
        } catch (inner) {
          // Out of memory, the failure cannot be written out either: a
          // constant, which needs no allocation.
          return outOfMemory(e) ? MEMORY_FAILURE : UNSHOWN_FAILURE;
        }
      }
    },
  };
})();
