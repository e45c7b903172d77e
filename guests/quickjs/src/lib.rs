//! The `wasm:js` guest: QuickJS-NG (through `rquickjs`, whose C sources
//! `guests/Cargo.lock` pins) compiled to WASI with codeact's JavaScript helpers
//! and encoder, driven by the host through codeact's import ABI (see
//! `codeact-guest-abi`).
//!
//! Why a guest of our own rather than the prebuilt QuickJS reactor: the reactor
//! starts its interpreter inside `qjs_init_argv` and exports no way to run code
//! after it, so it cannot be pre-initialised, and every new session paid QuickJS's
//! start (1.9 ms); its scripts spoke a text protocol over stdio. Here
//! `codeact_preinit` builds the runtime, the context and the prelude once, the
//! host snapshots that, and a session is an instantiation; a tool call is a
//! function call.
//!
//! Limits inside the guest: QuickJS's allocations counted against the memory
//! limit (`metered`: an `out of memory` error the script sees; the session goes
//! on, unless its variables still fill the limit) and the host's alarm flag, which QuickJS's
//! interrupt handler reads (the script stops; the session goes on). wasmtime
//! holds the rest: the epoch deadline after a grace, the cap on linear memory,
//! and the end of the guest's stack (QuickJS compiles its own stack check out
//! for WASI, so deep recursion runs into it: a trap, and the session restarts).

mod encode;
mod metered;

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};

use codeact_guest_abi as abi;
use codeact_runtime::{LimitKind, Limits, LogBuffer, RunOutcome, ScriptError, ToolSpec};
use rquickjs::context::EvalOptions;
use rquickjs::{Context, Ctx, Function, Object, Persistent, Runtime, Value as JsValue};
use serde_json::Value;

/// The prelude, with the encoder in place of its placeholder.
fn prelude() -> String {
    include_str!("prelude.js").replace("__CODEACT_ENCODER__", codeact_runtime::JS_ENCODER)
}

/// Memory QuickJS itself may hold beyond a run's limit: its runtime, the
/// context and the prelude, which a session holds before its first script
/// (a margin, not a measurement).
const ENGINE_MEMORY: usize = 4 << 20;

/// Raised by the host when a run's time is up; QuickJS's interrupt handler
/// reads it, and `codeact_run` lowers it before each run.
static ALARM: AtomicBool = AtomicBool::new(false);

/// One engine: the runtime, its context and the prelude's own functions.
struct Engine {
    // Dropped in this order: the functions, the context, then the runtime.
    start: Persistent<Function<'static>>,
    step: Persistent<Function<'static>>,
    context: Context,
    runtime: Runtime,
    limits: Limits,
    /// The session's tools, to start a fresh engine with (see
    /// [`Engine::still_full`]).
    tools: Vec<ToolSpec>,
}

thread_local! {
    static ENGINE: RefCell<Option<Engine>> = const { RefCell::new(None) };
    /// An engine made by `codeact_preinit`, before any session: the host
    /// snapshots the guest after it, so every session starts with it made.
    static READY: RefCell<Option<Engine>> = const { RefCell::new(None) };
    /// What the run in progress printed.
    static PRINTED: RefCell<LogBuffer> = RefCell::new(LogBuffer::new(0));
}

impl Engine {
    /// The runtime, a context with every intrinsic, the native hooks and the
    /// prelude. `Err` says why not.
    fn new() -> Result<Engine, String> {
        let runtime = Runtime::new_with_alloc(metered::Metered)
            .map_err(|e| format!("QuickJS did not start: {e}"))?;
        runtime.set_interrupt_handler(Some(Box::new(|| ALARM.load(Ordering::Relaxed))));
        let context = Context::full(&runtime).map_err(|e| format!("QuickJS did not start: {e}"))?;
        let (start, step) = context.with(|ctx| -> Result<_, String> {
            let globals = ctx.globals();
            let hooks = || -> rquickjs::Result<()> {
                globals.set(
                    "__codeact_call_tool",
                    Function::new(ctx.clone(), call_tool)?,
                )?;
                globals.set(
                    "__codeact_call_tools",
                    Function::new(ctx.clone(), call_tools)?,
                )?;
                globals.set("__codeact_settle", Function::new(ctx.clone(), settle)?)?;
                globals.set("__codeact_log", Function::new(ctx.clone(), print)?)?;
                globals.set("__codeact_eval", Function::new(ctx.clone(), eval_script)?)?;
                globals.set(
                    "__codeact_encode",
                    Function::new(ctx.clone(), encode_natively)?,
                )?;
                Ok(())
            };
            hooks().map_err(|e| format!("the native hooks: {e}"))?;
            let own: Object = ctx
                .eval(prelude())
                .map_err(|e| format!("the prelude failed: {}", exception(&ctx, e)))?;
            let function = |name: &str| -> Result<Persistent<Function<'static>>, String> {
                let function: Function = own
                    .get(name)
                    .map_err(|e| format!("the prelude has no {name}: {e}"))?;
                Ok(Persistent::save(&ctx, function))
            };
            Ok((function("start")?, function("step")?))
        })?;
        Ok(Engine {
            start,
            step,
            context,
            runtime,
            limits: Limits::default(),
            tools: Vec::new(),
        })
    }

    /// Starts a session: its limits, and its tools' namespace objects.
    fn started(mut self, limits: Limits, tools: Vec<ToolSpec>) -> Result<Engine, String> {
        metered::set_limit(limits.max_memory_bytes.saturating_add(ENGINE_MEMORY));
        let namespaces = serde_json::to_string(&codeact_runtime::namespaces(&tools))
            .map_err(|e| e.to_string())?;
        let depth = u32::try_from(limits.max_nesting_depth).unwrap_or(u32::MAX);
        self.context.with(|ctx| -> Result<(), String> {
            let start = self
                .start
                .clone()
                .restore(&ctx)
                .map_err(|e| e.to_string())?;
            start
                .call::<_, ()>((depth, namespaces))
                .map_err(|e| exception(&ctx, e))
        })?;
        self.limits = limits;
        self.tools = tools;
        Ok(self)
    }

    /// Whether what the session holds, garbage collected, still fills its
    /// memory limit: after a script stopped there, every later one would stop
    /// there too (its variables hold the memory), so the session starts afresh.
    fn still_full(&self) -> bool {
        self.runtime.run_gc();
        metered::held() >= self.limits.max_memory_bytes / 10 * 9
    }

    /// Runs one script; its variables and functions stay for the next.
    fn run(&mut self, script: &str) -> RunOutcome {
        ALARM.store(false, Ordering::Relaxed);
        metered::take_refused();
        PRINTED.set(LogBuffer::new(self.limits.max_output_bytes));
        let answer = self.context.with(|ctx| {
            let step = self.step.clone().restore(&ctx).map_err(|e| e.to_string())?;
            // Top-level `let` and `const` as `var`: a later script may declare
            // the same name again.
            // `await` outside a function settled on the spot (see
            // codeact_runtime::js_await).
            let rewrite = codeact_runtime::js_await::rewrite_top_level_await(script);
            let script = codeact_runtime::js_hoist::hoist_top_level(&rewrite.script);
            step.call::<_, String>((script, rewrite.asynchronous))
                .map_err(|e| exception(&ctx, e))
        });
        let refused = metered::take_refused();
        let completion = match answer {
            // However QuickJS said it (an `InternalError`, or `null` when it
            // could not make one), a run that failed after an allocation was
            // refused stopped at the memory limit.
            Ok(text) => completion(&text, &self.limits).map_err(|error| match error {
                ScriptError::Thrown { message, .. } if refused => {
                    ScriptError::limit(LimitKind::Memory, &self.limits, Some(message))
                }
                other => other,
            }),
            // Only what the prelude's own `catch` cannot hold gets here: the
            // interrupt at the alarm, which QuickJS makes uncatchable.
            Err(_) if ALARM.load(Ordering::Relaxed) => {
                Err(ScriptError::limit(LimitKind::WallTime, &self.limits, None))
            }
            Err(message) if refused || message.contains("out of memory") => Err(
                ScriptError::limit(LimitKind::Memory, &self.limits, Some(message)),
            ),
            Err(message) => Err(ScriptError::thrown(message)),
        };
        RunOutcome {
            completion,
            logs: PRINTED.replace(LogBuffer::new(0)),
        }
    }
}

/// The run's completion from the prelude's step: `{"done": value}` or
/// `{"fail": kind, "message": text}`.
fn completion(text: &str, limits: &Limits) -> Result<Value, ScriptError> {
    let mut answer: Value = serde_json::from_str(text)
        .map_err(|e| ScriptError::thrown(format!("the prelude's answer is not JSON: {e}")))?;
    if let Some(value) = answer.get_mut("done") {
        return Ok(value.take());
    }
    let message = answer["message"].as_str().unwrap_or_default().to_string();
    Err(match answer["fail"].as_str() {
        Some("syntax") => {
            let facts = codeact_runtime::js_errors::facts(Some("SyntaxError"), &message, "script");
            ScriptError::syntax(message).with_facts(facts)
        }
        Some("no_value") => ScriptError::NoValue { message },
        Some("unrepresentable") => ScriptError::Unrepresentable { message },
        Some("memory") => ScriptError::limit(LimitKind::Memory, limits, Some(message)),
        Some("call_depth") => ScriptError::limit(LimitKind::CallDepth, limits, Some(message)),
        _ => {
            let facts = codeact_runtime::js_errors::facts(None, &message, "script");
            ScriptError::thrown(message).with_facts(facts)
        }
    })
}

/// The text of the exception pending in `ctx` when `error` is one, else the
/// error itself.
fn exception(ctx: &Ctx<'_>, error: rquickjs::Error) -> String {
    if !matches!(error, rquickjs::Error::Exception) {
        return error.to_string();
    }
    let thrown = ctx.catch();
    if let Some(object) = thrown.as_object() {
        let name: String = object.get("name").unwrap_or_default();
        let message: String = object.get("message").unwrap_or_default();
        return format!("{name}: {message}");
    }
    thrown
        .as_string()
        .and_then(|text| text.to_string().ok())
        .unwrap_or_else(|| "an exception".into())
}

/// `__codeact_call_tool(request)`: the host's reply to a tool request, both
/// JSON text. Past the deadline, an error no script can catch instead.
///
/// Why here: QuickJS asks its interrupt handler every 10,000 operations, and a
/// loop of tool calls with large replies does few operations a call; the host
/// gives an engine that checks its alarm time to read each reply, so such a
/// loop ran on past its deadline (a test below the guest, `wasm:js`).
fn call_tool<'js>(ctx: Ctx<'js>, request: String) -> rquickjs::Result<String> {
    if ALARM.load(Ordering::Relaxed) {
        return Err(interrupted(&ctx));
    }
    let reply = String::from_utf8_lossy(&abi::call_tool_text(request.as_bytes())).into_owned();
    if ALARM.load(Ordering::Relaxed) {
        return Err(interrupted(&ctx));
    }
    Ok(reply)
}

/// `__codeact_call_tools(request)`: the host's reply to a batch of calls it
/// makes together (`[{"name", "args"}, …]` in, `{"results": […]}` out, both
/// JSON text). Past the deadline, an error no script can catch instead.
fn call_tools<'js>(ctx: Ctx<'js>, request: String) -> rquickjs::Result<String> {
    if ALARM.load(Ordering::Relaxed) {
        return Err(interrupted(&ctx));
    }
    let reply = String::from_utf8_lossy(&abi::call_tools_text(request.as_bytes())).into_owned();
    if ALARM.load(Ordering::Relaxed) {
        return Err(interrupted(&ctx));
    }
    Ok(reply)
}

thread_local! {
    /// Set while `__codeact_settle` runs the engine's jobs: a job cannot wait
    /// on a promise this way itself.
    static SETTLING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `__codeact_settle(value)`: a promise's settled value, its reason thrown,
/// after running the engine's jobs; any other value as it is. A promise no
/// job settles (the sandbox has no timers or I/O) is a TypeError.
fn settle<'js>(ctx: Ctx<'js>, value: JsValue<'js>) -> rquickjs::Result<JsValue<'js>> {
    let Some(promise) = value.as_promise().cloned() else {
        return Ok(value);
    };
    if SETTLING.get() {
        return Err(rquickjs::Exception::throw_type(
            &ctx,
            "await outside a function cannot wait inside a promise's callback",
        ));
    }
    SETTLING.set(true);
    let settled = promise.finish::<JsValue>();
    SETTLING.set(false);
    match settled {
        Err(rquickjs::Error::WouldBlock) => Err(rquickjs::Exception::throw_type(
            &ctx,
            "await: this promise never settles: nothing in this sandbox settles it (there are no timers or I/O); await tool calls, or promises made from them",
        )),
        other => other,
    }
}

/// Throws what QuickJS throws when its interrupt handler says stop: an
/// `InternalError` marked uncatchable, so no script's `catch` holds it.
fn interrupted(ctx: &Ctx<'_>) -> rquickjs::Error {
    let _ = rquickjs::Exception::throw_internal(ctx, "interrupted");
    let thrown = ctx.catch();
    // SAFETY: both are live handles of this context; QuickJS only sets a flag
    // on the error object.
    unsafe { rquickjs::qjs::JS_SetUncatchableError(ctx.as_raw().as_ptr(), thrown.as_raw()) };
    ctx.throw(thrown)
}

/// `__codeact_encode(value, maxDepth, lenient, DatePrototype, getTime,
/// toISOString)`: the value as JSON text (by tool arguments' rules when
/// `lenient`, else completion values'), `{refused: message}` for a cycle or a
/// value nested too deep, or `null` for a value it leaves to the prelude's
/// encoder (see `encode`). The `Date` functions are the prelude's, taken at
/// load.
fn encode_natively<'js>(
    ctx: Ctx<'js>,
    value: JsValue<'js>,
    max_depth: u32,
    lenient: bool,
    date_prototype: Object<'js>,
    get_time: Function<'js>,
    to_iso_string: Function<'js>,
) -> rquickjs::Result<JsValue<'js>> {
    let encoder = encode::Encoder {
        date_prototype,
        get_time,
        to_iso_string,
        max_depth: max_depth as usize,
        lenient,
        root: if lenient { "args" } else { "output" },
    };
    Ok(match encoder.encode(&ctx, &value)? {
        encode::Encoded::Json(text) => rquickjs::String::from_str(ctx, &text)?.into_value(),
        encode::Encoded::Refused(message) => {
            let refused = Object::new(ctx.clone())?;
            refused.set("refused", message)?;
            refused.into_value()
        }
        encode::Encoded::Unsure => JsValue::new_null(ctx),
    })
}

/// `__codeact_log(line)`: one printed line, kept up to the output limit.
fn print(line: String) {
    PRINTED.with_borrow_mut(|printed| printed.push_line(&line));
}

/// `__codeact_eval(code)`: the script as global code, named `script` in stacks
/// and error positions.
fn eval_script<'js>(ctx: Ctx<'js>, code: String) -> rquickjs::Result<JsValue<'js>> {
    let mut options = EvalOptions::default();
    options.global = true;
    options.strict = false;
    options.backtrace_barrier = true;
    options.filename = Some("script".into());
    ctx.eval_with_options(code, options)
}

/// Makes an engine ahead of time (the runtime, its context and the prelude):
/// the host runs this once and snapshots the result (wasmtime-wizer).
#[unsafe(no_mangle)]
pub extern "C" fn codeact_preinit() {
    if let Ok(engine) = Engine::new() {
        READY.set(Some(engine));
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn codeact_input(len: usize) -> *mut u8 {
    abi::input(len)
}

/// The address of the run's deadline flag.
#[unsafe(no_mangle)]
pub extern "C" fn codeact_alarm() -> *const u8 {
    (&ALARM as *const AtomicBool).cast()
}

/// Starts the session from its configuration.
#[unsafe(no_mangle)]
pub extern "C" fn codeact_start(len: usize) -> i64 {
    abi::answer_start(
        abi::with_input(len, abi::read_config).and_then(|(limits, tools)| {
            let engine = match READY.take() {
                Some(ready) => ready,
                None => Engine::new()?,
            };
            ENGINE.set(Some(engine.started(limits, tools)?));
            Ok(())
        }),
    )
}

/// Runs one script.
#[unsafe(no_mangle)]
pub extern "C" fn codeact_run(len: usize) -> i64 {
    abi::answer_run(abi::with_input(len, |script| {
        let script = String::from_utf8_lossy(script);
        let mut outcome = ENGINE.with_borrow_mut(|engine| match engine.as_mut() {
            Some(engine) => Ok(engine.run(&script)),
            None => Err(String::from("the session was not started")),
        })?;
        if let Err(
            error @ ScriptError::LimitExceeded {
                limit: LimitKind::Memory,
                ..
            },
        ) = &mut outcome.completion
            && ENGINE.with_borrow(|engine| engine.as_ref().is_some_and(Engine::still_full))
        {
            let Some(full) = ENGINE.take() else {
                return Err("the session was not started".into());
            };
            let (limits, tools) = (full.limits.clone(), full.tools.clone());
            // The full engine goes first: the fresh one takes its memory.
            drop(full);
            ENGINE.set(Some(Engine::new()?.started(limits, tools)?));
            *error = error.clone().restarting();
        }
        Ok(outcome)
    }))
}
