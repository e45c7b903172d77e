// codeact's JavaScript prelude: the helpers every script sees. Evaluated once per
// worker, before any script; the native hooks it wraps are removed from globalThis.
(() => {
  const g = globalThis;
  const callTool = g.__codeact_call_tool;
  const log = g.__codeact_log;
  delete g.__codeact_call_tool;
  delete g.__codeact_log;
  const define = (name, value) =>
    Object.defineProperty(g, name, { value, writable: true, configurable: true, enumerable: false });
  const show = (v) => {
    if (typeof v === "string") return v;
    try {
      const text = JSON.stringify(v);
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
  define("call_tool", (name, args) =>
    JSON.parse(callTool(String(name), JSON.stringify(args === undefined ? {} : args))));
  define("tools", new Proxy({}, {
    get: (_, name) => (typeof name === "string" ? (args) => g.call_tool(name, args) : undefined),
  }));
  const console = {};
  for (const level of ["log", "info", "debug", "warn", "error"]) {
    const tag = level === "warn" || level === "error" ? `[${level}] ` : "";
    console[level] = (...parts) => log(tag + parts.map(show).join(" "));
  }
  define("console", console);
  // The completion value as JSON text, or a TypeError naming what JSON cannot hold.
  define("__codeact_encode", (value, maxDepth) => {
    const ancestors = [];
    const check = (v, path, depth) => {
      if (depth > maxDepth) throw new TypeError(`${path} is nested deeper than the nesting depth limit of ${maxDepth}`);
      switch (typeof v) {
        case "undefined": throw new TypeError(`${path} is undefined, which JSON cannot hold; use null`);
        case "number":
          if (!Number.isFinite(v)) throw new TypeError(`${path} is ${v}, which JSON cannot hold`);
          return;
        case "bigint": throw new TypeError(`${path} is a BigInt (${v}n), which JSON cannot hold; use Number(...) or a string`);
        case "function": throw new TypeError(`${path} is a function, which JSON cannot hold`);
        case "symbol": throw new TypeError(`${path} is a symbol, which JSON cannot hold`);
        case "object":
          if (v === null) return;
          if (ancestors.includes(v)) throw new TypeError(`${path} refers back to itself (a cycle), which JSON cannot hold`);
          ancestors.push(v);
          if (Array.isArray(v)) v.forEach((item, i) => check(item, `${path}[${i}]`, depth + 1));
          else for (const key of Object.keys(v)) check(v[key], `${path}.${key}`, depth + 1);
          ancestors.pop();
          return;
        default: return;
      }
    };
    check(value, "output", 0);
    return JSON.stringify(value);
  });
})();
