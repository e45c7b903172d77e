//! Findings 4 and 5 of the audit: a script that speaks for the host (a stolen
//! protocol nonce, a message the host buffers without bound) or that changes what
//! the host's helpers do in the session's later steps (`toJSON`, a replaced
//! `JSON`/`json`, replaced builtins).

use std::sync::Arc;

use codeact::exec::ScriptRun;
use codeact::{Limits, ScriptOutput, ScriptSession, Tool, ToolBox};
use serde_json::{Value, json};

use super::attack::Attack;
use crate::support;

/// The audit's attacks on the guest protocol and the preludes.
pub const ATTACKS: &[Attack] = &[
    Attack {
        name: "to_json_set_in_one_step_changes_no_later_step",
        run: to_json_set_in_one_step_changes_no_later_step,
    },
    Attack {
        name: "replaced_json_and_builtins_change_no_later_step",
        run: replaced_json_and_builtins_change_no_later_step,
    },
    Attack {
        name: "a_stolen_nonce_cannot_answer_a_later_step",
        run: a_stolen_nonce_cannot_answer_a_later_step,
    },
    Attack {
        name: "the_guest_offers_no_bytecode_loader_or_stdio_module",
        run: the_guest_offers_no_bytecode_loader_or_stdio_module,
    },
    Attack {
        name: "a_script_cannot_bring_back_the_raw_memory_modules",
        run: a_script_cannot_bring_back_the_raw_memory_modules,
    },
    Attack {
        name: "a_script_cannot_replace_the_loop_that_serves_later_steps",
        run: a_script_cannot_replace_the_loop_that_serves_later_steps,
    },
    Attack {
        name: "crafted_bytecode_cannot_be_loaded",
        run: crafted_bytecode_cannot_be_loaded,
    },
    Attack {
        name: "library_code_a_script_rewires_neither_unmarshals_its_bytes_nor_hands_it_a_frame",
        run: library_code_a_script_rewires_gives_it_nothing,
    },
    Attack {
        name: "a_dynamic_import_reaches_no_host_module",
        run: a_dynamic_import_reaches_no_host_module,
    },
    Attack {
        name: "an_oversized_message_is_refused_under_a_64_mib_limit",
        run: an_oversized_message_is_refused_under_a_64_mib_limit,
    },
];

fn tools() -> Arc<ToolBox> {
    let add = Tool::from_fn("add", "Adds a and b.", |args| {
        Ok(json!(
            args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)
        ))
    });
    Arc::new(ToolBox::new([add]).expect("valid tools"))
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(future)
}

/// Runs `scripts` in order in one session of `column`; every run's result, after
/// checking that the session still runs a trivial script.
fn session_runs(column: &str, limits: Limits, scripts: &[&str]) -> Result<Vec<ScriptRun>, String> {
    let runtime = support::runtimes::runtime(column, limits)?;
    block_on(async {
        let mut session = ScriptSession::start(&*runtime, tools()).map_err(|e| e.to_string())?;
        let mut runs = Vec::new();
        for script in scripts {
            runs.push(
                session
                    .run(*script)
                    .await
                    .map_err(|e| format!("host failed: {e}"))?,
            );
        }
        support::runtimes::still_runs(&mut session).await?;
        Ok(runs)
    })
}

fn shown(output: &ScriptOutput) -> String {
    let text = output.to_string();
    let cut: String = text.chars().take(160).collect();
    cut
}

/// Checks that runs `from..` gave `expected` final results in order.
fn later_steps_gave(runs: &[ScriptRun], from: usize, expected: &[Value]) -> Result<(), String> {
    for (i, want) in expected.iter().enumerate() {
        let step = from + i;
        let got = runs
            .get(step)
            .ok_or_else(|| format!("step {} did not run", step + 1))?;
        if got.output != ScriptOutput::final_result(want.clone()) {
            return Err(format!(
                "step {} gave {} instead of final_result({want})",
                step + 1,
                shown(&got.output)
            ));
        }
    }
    Ok(())
}

const JS_TO_JSON: &str = r#"
const pwn = function () { return "pwned"; };
Object.prototype.toJSON = pwn;
Array.prototype.toJSON = pwn;
Number.prototype.toJSON = pwn;
String.prototype.toJSON = pwn;
Boolean.prototype.toJSON = pwn;
observation("set")
"#;

fn to_json_set_in_one_step_changes_no_later_step(column: &str) -> Option<Result<String, String>> {
    if !matches!(column, "js" | "wasm:js" | "wasm:js-stdio" | "wasm:boa") {
        return None;
    }
    let scripts = [
        JS_TO_JSON,
        r#"final_result(call_tool("add", {a: 1, b: 2}))"#,
        "final_result([40, 2])",
    ];
    Some(
        session_runs(column, Limits::default(), &scripts).and_then(|runs| {
            later_steps_gave(&runs, 1, &[json!(3), json!([40, 2])])?;
            Ok("later tool arguments and results are encoded as written".into())
        }),
    )
}

const JS_REPLACE: &str = r#"
JSON.stringify = () => '{"type":"final_result","value":"pwned"}';
JSON.parse = () => ({ ok: 1000 });
Object.keys = () => [];
Array.isArray = () => false;
Number.isFinite = () => false;
Array.prototype.forEach = function () {};
Array.prototype.includes = () => false;
Array.prototype.push = () => 0;
Array.prototype.join = () => "pwned";
Array.prototype.map = () => ["pwned"];
String.prototype.split = () => ["pwned"];
Reflect.apply = () => "pwned";
Function.prototype.call = () => "pwned";
Function.prototype.apply = () => "pwned";
observation("set")
"#;

const PYTHON_REPLACE: &str = r#"
import json
json.loads = lambda *a, **k: {"ok": 1000}
json.dumps = lambda *a, **k: '{"done":{"type":"final_result","value":"pwned"}}'
try:
    import builtins
    _compile = compile
    builtins.compile = lambda source, name, mode, *a, **k: _compile("final_result('pwned')" if mode == "eval" else "", name, mode)
    builtins.isinstance = lambda *a: False
    builtins.len = lambda *a: 0
    builtins.str = lambda *a: "pwned"
except Exception:
    pass
observation("set")
"#;

fn replaced_json_and_builtins_change_no_later_step(column: &str) -> Option<Result<String, String>> {
    let (first, second, third) = match column {
        "js" | "wasm:js" | "wasm:js-stdio" | "wasm:boa" => (
            JS_REPLACE,
            r#"final_result(call_tool("add", {a: 1, b: 2}))"#,
            "final_result([40, 2])",
        ),
        "wasm:micropython" | "wasm:python" => (
            PYTHON_REPLACE,
            r#"final_result(call_tool("add", {"a": 1, "b": 2}))"#,
            "final_result([40, 2])",
        ),
        _ => return None,
    };
    Some(
        session_runs(column, Limits::default(), &[first, second, third]).and_then(|runs| {
            later_steps_gave(&runs, 1, &[json!(3), json!([40, 2])])?;
            Ok("later tool calls and results go through the prelude's own encoder".into())
        }),
    )
}

/// Finds the run's nonce by every route the audit used, then ends step 1 with a
/// forged `done`, keeps running, reads each later request from stdin and answers
/// it with `"pwned"`.
const MICROPYTHON_STEAL: &str = r#"
import sys
nonce = None
try:
    for way in (lambda: sys.modules.pop("uctypes"), lambda: __import__("usys").modules.pop("uctypes")):
        try:
            way()
        except Exception:
            pass
    import uctypes
    base = id(globals())
    low = base - (1 << 20)
    if low < 0:
        low = 0
    memory = bytes(uctypes.bytearray_at(low, 4 << 20))
    pattern = b'{"non' + b'ce":"'
    at = 0
    while nonce is None:
        at = memory.find(pattern, at)
        if at < 0:
            break
        candidate = memory[at + 10:at + 26].decode()
        if memory[at + 26:at + 36] == b'","code":"' and all(c in "0123456789abcdef" for c in candidate):
            nonce = candidate
        at += 1
except Exception:
    pass
"#;

const CPYTHON_STEAL: &str = r#"
import sys
nonce = None
def holds(value):
    return type(value) is dict and type(value.get("nonce")) is str and len(value["nonce"]) == 16
def walk(function, seen):
    if id(function) in seen:
        return None
    seen.add(id(function))
    for cell in getattr(function, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if holds(value):
            return value["nonce"]
        if callable(value):
            found = walk(value, seen)
            if found:
                return found
    return None
try:
    nonce = walk(call_tool, set())
except Exception:
    pass
try:
    import __main__
    for value in list(vars(__main__).values()):
        if nonce is None and callable(value):
            nonce = walk(value, set())
except Exception:
    pass
try:
    frame = sys._getframe()
    while nonce is None and frame is not None:
        for value in list(frame.f_locals.values()):
            if holds(value):
                nonce = value["nonce"]
            elif type(value) is str and len(value) == 16 and all(c in "0123456789abcdef" for c in value):
                nonce = value
        frame = frame.f_back
except Exception:
    pass
try:
    import gc
    for value in gc.get_objects():
        if nonce is None and holds(value):
            nonce = value["nonce"]
except Exception:
    pass
"#;

const PYTHON_TAKE_OVER: &str = r#"
def say(text):
    sys.stdout.write(text)
    try:
        sys.stdout.flush()
    except Exception:
        pass
if nonce is None:
    observation("no nonce")
else:
    say("\x1ecodeact:" + nonce + ' {"done":{"type":"final_result","value":"step1"}}\n')
    source = getattr(sys.stdin, "buffer", sys.stdin)
    for _ in range(4):
        line = source.readline()
        if not line:
            break
        if type(line) is bytes:
            line = line.decode()
        say("\x1ecodeact:" + line[10:26] + ' {"done":{"type":"final_result","value":"pwned"}}\n')
    observation("gave up")
"#;

fn a_stolen_nonce_cannot_answer_a_later_step(column: &str) -> Option<Result<String, String>> {
    let steal = match column {
        "wasm:micropython" => MICROPYTHON_STEAL,
        "wasm:python" => CPYTHON_STEAL,
        _ => return None,
    };
    let first = format!("{steal}\n{PYTHON_TAKE_OVER}");
    Some(
        session_runs(column, Limits::default(), &[&first, "final_result(42)"]).and_then(|runs| {
            later_steps_gave(&runs, 1, &[json!(42)])?;
            Ok("the nonce is out of the script's reach; the next step runs its own code".into())
        }),
    )
}

fn the_guest_offers_no_bytecode_loader_or_stdio_module(
    column: &str,
) -> Option<Result<String, String>> {
    let script = match column {
        "wasm:js" | "wasm:js-stdio" => {
            r#"final_result(["bjson", "std", "os", "gc", "scriptArgs", "print"].filter((name) => typeof globalThis[name] !== "undefined"))"#
        }
        "wasm:micropython" => {
            r#"
reachable = []
for name in ["uctypes", "machine", "gc"]:
    try:
        if __import__(name) is not None:
            reachable.append(name)
    except ImportError:
        pass
final_result(reachable)
"#
        }
        _ => return None,
    };
    Some(
        session_runs(column, Limits::default(), &[script]).and_then(|runs| {
            later_steps_gave(&runs, 0, &[json!([])])?;
            Ok("none is reachable".into())
        }),
    )
}

/// 5 MB: over the 4 MiB a message may be under a 64 MiB limit, under the 16 MiB
/// that was the cap for every limit (the audit sent 16 MB). Not on MicroPython,
/// whose JSON encoder takes longer than the time limit to write megabytes; the
/// cap is the host's, the same for every guest.
fn an_oversized_message_is_refused_under_a_64_mib_limit(
    column: &str,
) -> Option<Result<String, String>> {
    let script = match column {
        "wasm:js-stdio" => r#"final_result("x".repeat(5000000))"#,
        "wasm:python" => r#"final_result("x" * 5000000)"#,
        _ => return None,
    };
    let limits = Limits {
        max_memory_bytes: 64 << 20,
        ..Limits::default()
    };
    Some(
        session_runs(column, limits, &[script]).and_then(|runs| match &runs[0].output {
            ScriptOutput::Error { message } if message.contains("memory limit") => {
                Ok("refused as the memory limit".into())
            }
            other => Err(format!("the message was taken: {}", shown(other))),
        }),
    )
}

/// Every route back to MicroPython's raw-memory modules (`uctypes`, `machine`) and
/// its collector that a script could take: dropping the import system's entries
/// through `sys`, `usys` or a helper's globals, the u-prefixed names, `__import__`.
fn a_script_cannot_bring_back_the_raw_memory_modules(
    column: &str,
) -> Option<Result<String, String>> {
    if column != "wasm:micropython" {
        return None;
    }
    let script = r#"
names = ["uctypes", "machine", "gc", "host", "uuctypes", "umachine", "ugc"]
def drop(modules):
    for name in names:
        try:
            modules.pop(name)
        except Exception:
            pass
for way in [
    lambda: drop(__import__("sys").modules),
    lambda: drop(__import__("usys").modules),
    lambda: drop(call_tool.__globals__["__builtins__"].__import__("sys").modules),
    lambda: [drop(v.modules) for v in call_tool.__globals__.values() if hasattr(v, "modules")],
]:
    try:
        way()
    except Exception:
        pass
reachable = []
for name in names:
    try:
        module = __import__(name)
        if module is not None and (hasattr(module, "bytearray_at") or hasattr(module, "mem8") or hasattr(module, "collect") or hasattr(module, "call")):
            reachable.append(name)
    except Exception:
        pass
final_result(reachable)
"#;
    Some(
        session_runs(column, Limits::default(), &[script]).and_then(|runs| {
            later_steps_gave(&runs, 0, &[json!([])])?;
            Ok("none came back".into())
        }),
    )
}

/// A helper's `__globals__` is the prelude's module: a script that rebinds every
/// function there to one that reads the next request (nonce included) from stdin
/// and answers it must still leave the next step to the host's own loop.
const REPLACE_THE_LOOP: &str = r#"
import sys
def evil(*args, **kwargs):
    source = getattr(sys.stdin, "buffer", sys.stdin)
    line = source.readline()
    if type(line) is bytes:
        line = line.decode()
    if not line:
        return False
    sys.stdout.write("\x1ecodeact:" + line[10:26] + ' {"done":{"type":"final_result","value":"pwned"}}\n')
    try:
        sys.stdout.flush()
    except Exception:
        pass
    return True
replaced = []
space = call_tool.__globals__
for name in list(space.keys()):
    if callable(space[name]) and not name.startswith("__b"):
        space[name] = evil
        replaced.append(name)
observation(replaced)
"#;

fn a_script_cannot_replace_the_loop_that_serves_later_steps(
    column: &str,
) -> Option<Result<String, String>> {
    if !matches!(column, "wasm:micropython" | "wasm:python") {
        return None;
    }
    Some(
        session_runs(
            column,
            Limits::default(),
            &[REPLACE_THE_LOOP, "final_result(42)", "final_result(43)"],
        )
        .and_then(|runs| {
            later_steps_gave(&runs, 1, &[json!(42), json!(43)])?;
            Ok("the host's own loop served the later steps".into())
        }),
    )
}

/// CPython runs whatever bytecode it is given, and bytecode no compiler wrote reads
/// memory at will: every way a script could hand it some is refused.
fn crafted_bytecode_cannot_be_loaded(column: &str) -> Option<Result<String, String>> {
    if column != "wasm:python" {
        return None;
    }
    let script = r#"
import marshal, io, zipimport
payload = marshal.dumps(compile("final_result('pwned')", "<x>", "exec"))
header = b"\xcb\x0d\x0d\x0a" + bytes(12)
loaded = []
for name, way in [
    ("marshal.loads", lambda: marshal.loads(payload)),
    ("marshal.load", lambda: marshal.load(io.BytesIO(payload))),
    ("zipimport._unmarshal_code", lambda: zipimport._unmarshal_code(None, "x.pyc", "x.pyc", "x", header + payload)),
    ("code.replace", lambda: (lambda: 0).__code__.replace(co_code=(lambda: 1).__code__.co_code)),
    ("types.CodeType", lambda: type((lambda: 0).__code__)(*([0] * 18))),
]:
    try:
        code = way()
        loaded.append(name)
    except Exception:
        pass
final_result(loaded)
"#;
    Some(
        session_runs(column, Limits::default(), &[script]).and_then(|runs| {
            later_steps_gave(&runs, 0, &[json!([])])?;
            Ok("marshal, the zip importer's unmarshaller and code constructors refused".into())
        }),
    )
}

/// Two ways a script can borrow library code the guard trusts, found in review of
/// the `wasm:python-sci` work: the frozen importer unmarshals whatever its
/// module's `_imp.get_frozen_object` returns (a script replaces `_imp`), and
/// `traceback.extract_stack` passes the frame it takes to `walk_stack`, looked up
/// in its module (a script replaces it to keep the frame). Both must give the
/// script nothing.
fn library_code_a_script_rewires_gives_it_nothing(column: &str) -> Option<Result<String, String>> {
    if column != "wasm:python" {
        return None;
    }
    let script = r#"
got = []
try:
    import _frozen_importlib, marshal, types
    class FakeImp:
        get_frozen_object = staticmethod(marshal.loads)
    real = _frozen_importlib._imp
    _frozen_importlib._imp = FakeImp()
    module = types.ModuleType("x")
    module.__spec__ = types.SimpleNamespace(name=marshal.dumps(compile("1", "x", "eval")))
    try:
        _frozen_importlib.FrozenImporter.exec_module(module)
        got.append("bytecode loaded")
    finally:
        _frozen_importlib._imp = real
except Exception:
    pass
try:
    import traceback
    kept = []
    traceback.walk_stack = lambda f: (kept.append(f), iter(()))[1]
    traceback.extract_stack()
    if [f for f in kept if f is not None]:
        got.append("a frame")
except Exception:
    pass
final_result(got)
"#;
    Some(
        session_runs(column, Limits::default(), &[script]).and_then(|runs| {
            later_steps_gave(&runs, 0, &[json!([])])?;
            Ok("the frozen importer with a script's `_imp` and `traceback.extract_stack` with a script's `walk_stack`: no bytecode loaded, no frame given".into())
        }),
    )
}

/// QuickJS's host modules (`std`, `os`, `bjson`) under every name its loader knows,
/// asked for with a dynamic `import()` in one step and looked for in the next two
/// (in case a later step runs the promise jobs the first one queued).
fn a_dynamic_import_reaches_no_host_module(column: &str) -> Option<Result<String, String>> {
    if !matches!(column, "wasm:js" | "wasm:js-stdio") {
        return None;
    }
    let start = r#"
globalThis.reached = [];
for (const name of ["std", "os", "bjson", "qjs:std", "qjs:os", "qjs:bjson"]) {
  try {
    import(name).then((m) => { globalThis.reached.push(name); }, () => {});
  } catch (e) {}
}
observation("asked")
"#;
    let look = "final_result(globalThis.reached)";
    Some(
        session_runs(column, Limits::default(), &[start, look, look]).and_then(|runs| {
            later_steps_gave(&runs, 1, &[json!([]), json!([])])?;
            Ok("no import resolved".into())
        }),
    )
}
