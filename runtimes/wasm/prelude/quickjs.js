// codeact's prelude for the QuickJS-NG guest: the helpers every script sees, and
// the loop that reads scripts from stdin and answers on stdout (the protocol is in
// runtimes/wasm/src/protocol.rs). The host fills in __CODEACT_TOOLS__ (the tool
// names, a JSON array) and __CODEACT_MAX_DEPTH__ (the nesting depth limit).
(() => {
  const g = globalThis;
  const TOOLS = __CODEACT_TOOLS__;
  const MAX_DEPTH = __CODEACT_MAX_DEPTH__;
  const input = std.in;
  const output = std.out;
  const evalScript = std.evalScript;
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  // Scripts get no file, environment or process access: the host grants none, and
  // the std and os modules are not theirs to call.
  delete g.std;
  delete g.os;
  delete g.print;
  delete g.scriptArgs;

  let nonce = "";
  const send = (json) => {
    output.puts("\x1ecodeact:" + nonce + " " + json + "\n");
    output.flush();
  };
  const define = (name, value) =>
    Object.defineProperty(g, name, { value, writable: true, configurable: true, enumerable: false });
  const show = (v) => {
    if (typeof v === "string") return v;
    try {
      const text = stringify(v);
      return text === undefined ? String(v) : text;
    } catch (e) {
      return String(v);
    }
  };

  define("observation", (value) => ({ type: "observation", value }));
  define("final_result", (value, artifacts) =>
    artifacts === undefined ? { type: "final_result", value } : { type: "final_result", value, artifacts });
  define("error", (message) => ({ type: "error", message: String(message) }));
  define("transfer_to_agent", (agent_name) => ({ type: "transfer_to_agent", agent_name: String(agent_name) }));
  const callTool = (name, args) => {
    name = String(name);
    send(stringify({ tool: name, args: args === undefined ? {} : args }));
    const line = input.getline();
    if (line === null) {
      input.clearerr();
      throw new Error(`tool '${name}' got no answer from the host`);
    }
    const answer = parse(line);
    if ("error" in answer) throw new Error(answer.error);
    return answer.ok;
  };
  define("call_tool", callTool);
  const tools = {};
  for (const name of TOOLS) tools[name] = (args) => callTool(name, args);
  define("tools", new Proxy(tools, {
    get: (known, name) =>
      typeof name !== "string" ? undefined : known[name] || ((args) => callTool(name, args)),
  }));
  const console = {};
  for (const level of ["log", "info", "debug", "warn", "error"]) {
    const tag = level === "warn" || level === "error" ? `[${level}] ` : "";
    console[level] = (...parts) => output.puts(tag + parts.map(show).join(" ") + "\n");
  }
  define("console", console);

  // The completion value as JSON text, or an Unrepresentable naming what JSON
  // cannot hold and where.
  class Unrepresentable extends Error {}
  const encode = (value) => {
    const ancestors = [];
    const fail = (text) => { throw new Unrepresentable(text); };
    const check = (v, path, depth) => {
      if (depth > MAX_DEPTH) fail(`${path} is nested deeper than the nesting depth limit of ${MAX_DEPTH}`);
      switch (typeof v) {
        case "undefined": fail(`${path} is undefined, which JSON cannot hold; use null`);
        case "number":
          if (!Number.isFinite(v)) fail(`${path} is ${v}, which JSON cannot hold`);
          return;
        case "bigint": fail(`${path} is a BigInt (${v}n), which JSON cannot hold; use Number(...) or a string`);
        case "function": fail(`${path} is a function, which JSON cannot hold`);
        case "symbol": fail(`${path} is a symbol, which JSON cannot hold`);
        case "object":
          if (v === null) return;
          if (ancestors.includes(v)) fail(`${path} refers back to itself (a cycle), which JSON cannot hold`);
          ancestors.push(v);
          if (Array.isArray(v)) v.forEach((item, i) => check(item, `${path}[${i}]`, depth + 1));
          else for (const key of Object.keys(v)) check(v[key], `${path}.${key}`, depth + 1);
          ancestors.pop();
          return;
        default: return;
      }
    };
    check(value, "output", 0);
    return stringify(value);
  };

  const describe = (e) => {
    if (e instanceof Error) {
      // The prelude's own frames (evalScript and the <cmdline> code) are noise.
      const stack = typeof e.stack === "string"
        ? e.stack.split("\n").filter((l) => l.trim() && !/<cmdline>|evalScript \(native\)/.test(l)).join("\n")
        : "";
      return stack ? `${e.name}: ${e.message}\n${stack}` : `${e.name}: ${e.message}`;
    }
    return `Uncaught ${show(e)}`;
  };
  const failure = (e) => {
    if (e instanceof Unrepresentable) return { fail: "unrepresentable", message: e.message };
    if (e instanceof SyntaxError) return { fail: "syntax", message: describe(e) };
    const text = describe(e);
    if (e instanceof Error && e.name === "InternalError" && /out of memory/.test(e.message))
      return { fail: "memory", message: text };
    if (e instanceof Error && (e.name === "RangeError" || e.name === "InternalError") && /stack overflow|call stack/i.test(e.message))
      return { fail: "call_depth", message: text };
    return { fail: "thrown", message: text };
  };

  for (;;) {
    const line = input.getline();
    if (line === null) break;
    let request;
    try {
      request = parse(line);
    } catch (e) {
      continue;
    }
    nonce = request.nonce;
    let json;
    try {
      const value = evalScript(request.code);
      json = value === undefined
        ? stringify({ fail: "thrown", message: "the script's completion value was undefined: end the script with an expression such as final_result(value), not with a declaration" })
        : `{"done":${encode(value)}}`;
    } catch (e) {
      try {
        json = stringify(failure(e));
      } catch (inner) {
        json = stringify({ fail: "thrown", message: "the script threw a value that cannot be shown" });
      }
    }
    send(json);
  }
})();
