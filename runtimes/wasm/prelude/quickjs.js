// codeact's prelude for the QuickJS-NG guest: the helpers every script sees, and
// the loop that reads scripts from stdin and answers on stdout (the protocol is in
// runtimes/wasm/src/protocol.rs). The host fills in __CODEACT_TOOLS__ (the tool
// names, a JSON array), __CODEACT_NAMESPACES__ (the namespace objects, a JSON
// object {namespace: {member: tool name}} from codeact_runtime::namespaces),
// __CODEACT_MAX_DEPTH__ (the nesting depth limit) and the
// encoder (codeact_runtime::JS_ENCODER, in place of the placeholder below).
//
// What the loop, the helpers and the encoder use is taken now and called through
// a captured Reflect.apply: a script that later replaces JSON.parse, an Array or
// String method or Function.prototype.call, or sets a toJSON on a prototype,
// cannot change how later steps' tool calls and values reach the host. The
// helpers are put back before every script. The run's nonce, stdin and stdout
// live only in this closure, and the modules that reach past it (std, os, bjson)
// are taken from globalThis before any script runs.
(() => {
  const g = globalThis;
  const TOOLS = __CODEACT_TOOLS__;
  const NAMESPACES = __CODEACT_NAMESPACES__;
  const MAX_DEPTH = __CODEACT_MAX_DEPTH__;
  const apply = Reflect.apply;
  const input = std.in;
  const output = std.out;
  const getline = input.getline;
  const clearerr = input.clearerr;
  const puts = output.puts;
  const flushOut = output.flush;
  const evalScript = std.evalScript;
  const parse = JSON.parse;
  const defineProperty = Object.defineProperty;
  const hasOwn = Object.prototype.hasOwnProperty;
  const indexOf = String.prototype.indexOf;
  const slice = String.prototype.slice;
  const StringC = String;
  const ProxyC = Proxy;
  const ErrorC = Error;
  const SyntaxErrorC = SyntaxError;
  // Scripts get no file, environment, process or bytecode access: the host grants
  // none, std and os are not theirs to call, and bjson reads unchecked bytecode.
  for (const name of ["std", "os", "bjson", "gc", "print", "scriptArgs"]) delete g[name];

  class Unrepresentable extends ErrorC {}
  const encode = (__CODEACT_ENCODER__)((message) => {
    throw new Unrepresentable(message);
  });

  let nonce = "";
  const write = (text) => apply(puts, output, [text]);
  // Piece by piece: a long value is not copied again to frame it. `json` is text
  // or the encoder's pieces.
  const send = (json, before = "", after = "") => {
    write("\x1ecodeact:" + nonce + " " + before);
    if (typeof json === "string") write(json);
    else for (let i = 0; i < json.length; i++) write(json[i]);
    write(after + "\n");
    apply(flushOut, output, []);
  };
  const show = (v) => {
    if (typeof v === "string") return v;
    try {
      return encode(v, 100, true);
    } catch (e) {
      return StringC(v);
    }
  };

  const callTool = (name, args) => {
    name = StringC(name);
    const json = encode(args === undefined ? {} : args, MAX_DEPTH, true, "args");
    send('{"tool":' + encode(name, 1, false) + ',"args":' + json + "}");
    const line = apply(getline, input, []);
    if (line === null) {
      apply(clearerr, input, []);
      throw new ErrorC(`tool '${name}' got no answer from the host`);
    }
    const answer = parse(line);
    if (apply(hasOwn, answer, ["error"])) throw new ErrorC(answer.error);
    return apply(hasOwn, answer, ["ok"]) ? answer.ok : null;
  };
  const tools = {};
  for (const name of TOOLS) tools[name] = (args) => callTool(name, args);
  const toolsProxy = new ProxyC(tools, {
    get: (known, name) =>
      typeof name !== "string"
        ? undefined
        : apply(hasOwn, known, [name]) ? known[name] : (args) => callTool(name, args),
  });
  const console = {};
  for (const level of ["log", "info", "debug", "warn", "error"]) {
    const tag = level === "warn" || level === "error" ? `[${level}] ` : "";
    console[level] = (...parts) => {
      let line = tag;
      for (let i = 0; i < parts.length; i++) line += (i > 0 ? " " : "") + show(parts[i]);
      write(line + "\n");
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
    tools: toolsProxy,
    console,
  };
  const names = ["observation", "final_result", "error", "transfer_to_agent", "call_tool", "tools", "console"];
  // An MCP server's tools as methods of an object named after it
  // (`github.create_issue({...})`), frozen, put back with the helpers.
  for (const namespace of Object.keys(NAMESPACES)) {
    if (namespace in helpers) continue;
    const object = { __proto__: null };
    const members = NAMESPACES[namespace];
    for (const member of Object.keys(members)) {
      const tool = members[member];
      object[member] = (args) => callTool(tool, args);
    }
    helpers[namespace] = Object.freeze(object);
    names.push(namespace);
  }
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

  // The lines of a stack that are the script's, not the prelude's (evalScript and
  // the <cmdline> code).
  const scriptStack = (stack) => {
    let kept = "";
    let at = 0;
    while (at <= stack.length) {
      let end = apply(indexOf, stack, ["\n", at]);
      if (end < 0) end = stack.length;
      const line = apply(slice, stack, [at, end]);
      let blank = true;
      for (let k = 0; k < line.length && blank; k++) blank = line[k] === " " || line[k] === "\t";
      if (!blank && line !== "" && apply(indexOf, line, ["<cmdline>"]) < 0 && apply(indexOf, line, ["evalScript (native)"]) < 0) {
        kept += (kept === "" ? "" : "\n") + line;
      }
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

  for (;;) {
    const line = apply(getline, input, []);
    if (line === null) break;
    let request;
    try {
      request = parse(line);
    } catch (e) {
      continue;
    }
    nonce = request.nonce;
    let json;
    let done = false;
    try {
      install();
      const value = evalScript(request.code);
      if (value === undefined) {
        json = encode({ fail: "no_value", message: "the script's completion value was undefined: end the script with an expression such as final_result(value), not with a declaration" }, 4, false);
      } else {
        json = encode(value, MAX_DEPTH, false, "output", true);
        done = true;
      }
    } catch (e) {
      try {
        json = encode(failure(e), 4, false);
      } catch (inner) {
        json = '{"fail":"thrown","message":"the script threw a value that cannot be shown"}';
      }
    }
    if (done) send(json, '{"done":', "}");
    else send(json);
  }
})();
