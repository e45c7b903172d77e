// codeact's JSON encoder for the JavaScript preludes (the Boa worker and the
// QuickJS guest), one copy for both. A function expression: called once, as the
// prelude loads and before any script, with `fail(message)`, which must throw. It
// returns `encode(value, maxDepth, lenient, root, parts)`: the value as JSON text
// (`root` names it in errors; with `parts`, an array of pieces to write in order).
//
// Every intrinsic it uses is taken here, at load, and called through a captured
// Reflect.apply, so a script that later replaces JSON.stringify, Object.keys,
// Array methods or Function.prototype.call, or sets a toJSON on a prototype,
// changes nothing it encodes in later steps. It never calls toJSON (a Date
// becomes its ISO string, as JSON.stringify would) and never writes an index of
// an array (an inherited setter on Array.prototype would see it). What a value
// does itself (its own getters, a Proxy's traps) still runs: that is the value.
//
// Strict (`lenient` false, completion values): undefined, functions, symbols,
// BigInts, NaN and the infinities fail naming their path. Lenient (tool
// arguments): they are dropped from objects and become null in arrays, as
// JSON.stringify does; a BigInt still fails.
((fail) => {
  const apply = Reflect.apply;
  const stringify = JSON.stringify;
  const keysOf = Object.keys;
  const isArray = Array.isArray;
  const isFinite = Number.isFinite;
  const defineProperty = Object.defineProperty;
  const join = Array.prototype.join;
  const hasOwn = Object.prototype.hasOwnProperty;
  const hasInstance = Function.prototype[Symbol.hasInstance];
  const DateC = Date;
  const getTime = Date.prototype.getTime;
  const toISOString = Date.prototype.toISOString;
  const SetC = Set;
  const setHas = Set.prototype.has;
  const setAdd = Set.prototype.add;
  const setDelete = Set.prototype.delete;
  // Pieces of text are gathered into chunks of about this many characters, so an
  // encoding costs one property definition per chunk, not per piece.
  const CHUNK = 8192;

  // A Date's time, or undefined for anything else. Checked by prototype chain
  // first (no user code runs for an ordinary object), then by the Date's own slot.
  const timeOf = (v) => {
    if (!apply(hasInstance, DateC, [v])) return undefined;
    try {
      return apply(getTime, v, []);
    } catch (e) {
      return undefined;
    }
  };
  // v[key] if v has it itself; never a prototype's value (or getter).
  const own = (v, key) => (apply(hasOwn, v, [key]) ? v[key] : undefined);

  return (value, maxDepth, lenient, root = "output", parts = false) => {
    const chunks = [];
    let count = 0;
    let text = "";
    const keep = (chunk) =>
      defineProperty(chunks, count++, { __proto__: null, value: chunk, writable: true, enumerable: true, configurable: true });
    const put = (piece) => {
      if (piece.length >= CHUNK) {
        // A long piece (a long string) is a chunk of its own, never copied.
        if (text !== "") keep(text);
        keep(piece);
        text = "";
        return;
      }
      text += piece;
      if (text.length >= CHUNK) {
        keep(text);
        text = "";
      }
    };
    const open = new SetC();
    // Whether `v` is left out of an object (lenient mode only); `null` in an array.
    const omitted = (v) => lenient && (v === undefined || typeof v === "function" || typeof v === "symbol");
    const walk = (v, path, depth) => {
      if (depth > maxDepth) fail(`${path} is nested deeper than the nesting depth limit of ${maxDepth}`);
      switch (typeof v) {
        case "string":
          put(stringify(v));
          return;
        case "boolean":
          put(v ? "true" : "false");
          return;
        case "number":
          if (isFinite(v)) put(stringify(v));
          else if (lenient) put("null");
          else fail(`${path} is ${v}, which JSON cannot hold`);
          return;
        case "undefined":
          if (lenient) put("null");
          else fail(`${path} is undefined, which JSON cannot hold; use null`);
          return;
        case "bigint":
          fail(`${path} is a BigInt (${v}n), which JSON cannot hold; use Number(...) or a string`);
          return;
        case "function":
          if (lenient) put("null");
          else fail(`${path} is a function, which JSON cannot hold`);
          return;
        case "symbol":
          if (lenient) put("null");
          else fail(`${path} is a symbol, which JSON cannot hold`);
          return;
        default:
          break;
      }
      if (v === null) {
        put("null");
        return;
      }
      const time = timeOf(v);
      if (time !== undefined) {
        put(isFinite(time) ? stringify(apply(toISOString, v, [])) : "null");
        return;
      }
      if (apply(setHas, open, [v])) fail(`${path} refers back to itself (a cycle), which JSON cannot hold`);
      apply(setAdd, open, [v]);
      if (isArray(v)) {
        put("[");
        const length = v.length;
        for (let i = 0; i < length; i++) {
          if (i > 0) put(",");
          const item = own(v, i);
          if (omitted(item)) put("null");
          else walk(item, `${path}[${i}]`, depth + 1);
        }
        put("]");
      } else {
        put("{");
        const keys = keysOf(v);
        let first = true;
        for (let i = 0; i < keys.length; i++) {
          const key = keys[i];
          if (!apply(hasOwn, v, [key])) continue;
          const item = v[key];
          if (omitted(item)) continue;
          if (!first) put(",");
          first = false;
          put(stringify(key));
          put(":");
          walk(item, `${path}.${key}`, depth + 1);
        }
        put("}");
      }
      apply(setDelete, open, [v]);
    };
    walk(value, root, 0);
    if (text !== "") keep(text);
    // As pieces, for a caller that writes them one by one (no joined copy).
    if (parts) return chunks;
    if (count === 0) return "";
    if (count === 1) return chunks[0];
    return apply(join, chunks, [""]);
  };
})
