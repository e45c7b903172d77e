// codeact's JavaScript prelude: the helpers every script sees. Evaluated once per
// worker, before any script; the native hooks it wraps are removed from globalThis.
(() => {
  const g = globalThis;
  // What the helpers and the encoder use is taken now: a script that replaces
  // JSON.stringify, JSON.parse or Object.keys later (a change that would outlive
  // it in the session) cannot change how tool answers are read or how the next
  // scripts' values are encoded.
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const keysOf = Object.keys;
  const isArray = Array.isArray;
  const isFinite = Number.isFinite;
  const callTool = g.__codeact_call_tool;
  const log = g.__codeact_log;
  delete g.__codeact_call_tool;
  delete g.__codeact_log;
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
  const hostCall = (name, args) =>
    parse(callTool(String(name), stringify(args === undefined ? {} : args)));
  define("call_tool", hostCall);
  // tools.name calls the host directly, so a script that rebinds call_tool
  // changes only its own calls of that name.
  define("tools", new Proxy({}, {
    get: (_, name) => (typeof name === "string" ? (args) => hostCall(name, args) : undefined),
  }));
  const console = {};
  for (const level of ["log", "info", "debug", "warn", "error"]) {
    const tag = level === "warn" || level === "error" ? `[${level}] ` : "";
    console[level] = (...parts) => log(tag + parts.map(show).join(" "));
  }
  define("console", console);
  // The completion value as JSON text, or a TypeError naming what JSON cannot hold.
  // Fixed in place (neither writable nor configurable): the worker calls it on
  // every completion value.
  Object.defineProperty(g, "__codeact_encode", { writable: false, configurable: false, enumerable: false, value: (value, maxDepth) => {
    // The values on the path to the current one, as a plain array with its own
    // count: no Array methods (a script may replace them) and no writes to
    // `length` (shrinking it throws in Boa after index writes).
    const ancestors = [];
    let open = 0;
    const check = (v, path, depth) => {
      if (depth > maxDepth) throw new TypeError(`${path} is nested deeper than the nesting depth limit of ${maxDepth}`);
      switch (typeof v) {
        case "undefined": throw new TypeError(`${path} is undefined, which JSON cannot hold; use null`);
        case "number":
          if (!isFinite(v)) throw new TypeError(`${path} is ${v}, which JSON cannot hold`);
          return;
        case "bigint": throw new TypeError(`${path} is a BigInt (${v}n), which JSON cannot hold; use Number(...) or a string`);
        case "function": throw new TypeError(`${path} is a function, which JSON cannot hold`);
        case "symbol": throw new TypeError(`${path} is a symbol, which JSON cannot hold`);
        case "object":
          if (v === null) return;
          for (let i = 0; i < open; i++) {
            if (ancestors[i] === v) throw new TypeError(`${path} refers back to itself (a cycle), which JSON cannot hold`);
          }
          ancestors[open++] = v;
          if (isArray(v)) for (let i = 0; i < v.length; i++) check(v[i], `${path}[${i}]`, depth + 1);
          else {
            const keys = keysOf(v);
            for (let i = 0; i < keys.length; i++) check(v[keys[i]], `${path}.${keys[i]}`, depth + 1);
          }
          ancestors[--open] = undefined;
          return;
        default: return;
      }
    };
    check(value, "output", 0);
    return stringify(value);
  } });
})();
