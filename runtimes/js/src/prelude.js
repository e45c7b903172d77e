// codeact's JavaScript prelude: the helpers every script sees. Evaluated once per
// worker, before any script; the native hooks it wraps are removed from globalThis.
// The worker puts codeact_runtime::JS_ENCODER in place of the encoder placeholder.
//
// What the helpers and the encoder use is taken now and called through a captured
// Reflect.apply: a script that later replaces JSON.parse, Object.keys, an Array
// method or Function.prototype.call, or sets a toJSON on a prototype (changes
// that outlive it in the session), cannot change how tool arguments are sent,
// how tool answers are read or how later scripts' values are encoded. The helpers
// are put back before every script (`__codeact_begin`), so a script that rebinds
// `final_result` or `call_tool` changes them for itself only.
(() => {
  const g = globalThis;
  const apply = Reflect.apply;
  const parse = JSON.parse;
  const defineProperty = Object.defineProperty;
  const freeze = Object.freeze;
  const keysOf = Object.keys;
  const StringC = String;
  const ProxyC = Proxy;
  const TypeErrorC = TypeError;
  const ErrorC = Error;
  const WeakMapC = WeakMap;
  const weakGet = WeakMap.prototype.get;
  const weakSet = WeakMap.prototype.set;
  const promiseResolve = Promise.resolve;
  const promiseReject = Promise.reject;
  const promiseThen = Promise.prototype.then;
  const promiseFinally = Promise.prototype.finally;
  const PromiseC = Promise;
  const callTool = g.__codeact_call_tool;
  const callMany = g.__codeact_call_many;
  const settle = g.__codeact_settle;
  const log = g.__codeact_log;
  delete g.__codeact_call_tool;
  delete g.__codeact_call_many;
  delete g.__codeact_settle;
  delete g.__codeact_log;
  const encode = (__CODEACT_ENCODER__)((message) => {
    throw new TypeErrorC(message);
  });
  const show = (v) => {
    if (typeof v === "string") return v;
    try {
      return encode(v, 100, true);
    } catch (e) {
      return StringC(v);
    }
  };
  // In a script that waits on promises (codeact_runtime::js_await), a tool
  // call returns a promise-like value and joins the queue; the queue is sent
  // to the host as one batch, whose calls it makes together, as soon as the
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
      text += (i > 0 ? "," : "") + '{"name":' + encode(batch[i].name, 2, true) + ',"args":' + batch[i].args + "}";
    }
    const answers = callMany(text + "]");
    for (let i = 0; i < batch.length; i++) {
      batch[i].done = true;
      batch[i].ok = answers[i][0];
      batch[i].value = answers[i][1];
    }
  };
  const resolveNow = (record) => {
    if (!record.done) flush();
    if (record.ok) return record.value;
    throw new ErrorC(`tool '${record.name}' failed: ${record.value}`);
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
    const shown = name;
    const promise = new ProxyC(methods, {
      __proto__: null,
      get: (target, key) => {
        if (key === "then" || key === "catch" || key === "finally") return target[key];
        if (typeof key === "symbol") return undefined;
        return misuse(shown);
      },
      ownKeys: () => misuse(shown),
      set: () => misuse(shown),
    });
    apply(weakSet, records, [promise, record]);
    return promise;
  };
  const hostCall = (name, args) => {
    const argsText = encode(args === undefined ? {} : args, 100, true, "args");
    if (asynchronous) return pending(StringC(name), argsText);
    return callTool(StringC(name), argsText);
  };
  // `await X` outside any function: X's value now (codeact_runtime::js_await).
  const awaitNow = (value) => {
    const record = apply(weakGet, records, [value]);
    if (record !== undefined) return resolveNow(record);
    if (value === null || (typeof value !== "object" && typeof value !== "function")) return value;
    return settle(apply(promiseResolve, PromiseC, [value]));
  };
  const tools = new ProxyC({}, {
    get: (_, name) => (typeof name === "string" ? (args) => hostCall(name, args) : undefined),
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
    call_tool: hostCall,
    tools,
    console,
  };
  const names = ["observation", "final_result", "error", "transfer_to_agent", "call_tool", "tools", "console"];
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
  const fixed = (name, value) =>
    defineProperty(g, name, { __proto__: null, writable: false, configurable: false, enumerable: false, value });
  // Until the first script begins, the host may define the session's namespace
  // objects (an MCP server's tools as methods: `github.create_issue({...})`), once.
  let open = true;
  // Called by the worker before every script: the helpers as the host made them,
  // and whether the script's tool calls return promises.
  fixed("__codeact_begin", (waitsOnPromises) => {
    open = false;
    asynchronous = waitsOnPromises === true;
    queue = [];
    install();
  });
  // Called by the worker after a script that waits on promises: its calls never
  // waited on are made now, as a promise-returning call would have been.
  fixed("__codeact_end", () => {
    flush();
    asynchronous = false;
  });
  fixed("__codeact_await", awaitNow);
  // `text`: JSON of {namespace: {member: tool name}}, from
  // codeact_runtime::namespaces. Each object is frozen and put back with the helpers.
  fixed("__codeact_namespaces", (text) => {
    if (!open) return;
    open = false;
    const objects = parse(StringC(text));
    const namespaces = keysOf(objects);
    for (let i = 0; i < namespaces.length; i++) {
      const namespace = namespaces[i];
      if (namespace in helpers) continue;
      const members = objects[namespace];
      const object = { __proto__: null };
      const memberNames = keysOf(members);
      for (let k = 0; k < memberNames.length; k++) {
        const tool = StringC(members[memberNames[k]]);
        object[memberNames[k]] = (args) => hostCall(tool, args);
      }
      helpers[namespace] = freeze(object);
      names[names.length] = namespace;
    }
  });
  // The completion value as JSON text, or a TypeError naming what JSON cannot hold.
  fixed("__codeact_encode", (value, maxDepth) => encode(value, maxDepth, false));
})();
