//! The engine side of a session: one Boa context, driven by the requests of
//! [`protocol`](crate::protocol). In a worker process they travel as JSON lines on
//! stdin/stdout, memory is capped by `RLIMIT_DATA`, the process confines itself
//! (`confine.rs`) and the host kills it at the deadline; on an in-process thread
//! they travel over channels, uncapped; driven in place
//! ([`EmbeddedJs`](crate::EmbeddedJs), the WebAssembly guest), tool calls go to a
//! function and printed text to a buffer.

// Compiled to WebAssembly, only the in-place driver is built.
#![cfg_attr(target_family = "wasm", allow(dead_code, unused_imports))]

use std::cell::RefCell;
use std::io::{BufRead, Write};
use std::path::Path;
#[cfg(not(target_family = "wasm"))]
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::Arc;

use boa_engine::context::{ContextBuilder, HostHooks};
use boa_engine::module::IdleModuleLoader;
use boa_engine::realm::Realm;
use boa_engine::{
    Context, JsError, JsNativeError, JsResult, JsString, JsValue, NativeFunction, Source, js_string,
};
use codeact_runtime::{Limits, ToolDispatch};
use serde_json::{Value, json};

use crate::protocol::{Failure, FailureKind, Namespaces, Reply, Request, WORKER_ARG};
use codeact_runtime::js_await::rewrite_top_level_await;
use codeact_runtime::js_hoist::hoist_top_level;

const PRELUDE: &str = include_str!("prelude.js");

/// Room for the worker's own code and the engine, on top of the script's limit.
const BASELINE_BYTES: u64 = 48 << 20;

/// Runs the worker if this process was started as one (`argv[1]` is
/// [`WORKER_ARG`]); returns `None` otherwise. Call it first thing in `main` of any
/// binary that hosts JavaScript sessions, and return the code it gives:
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     if let Some(code) = codeact_js::run_worker_if_requested() {
///         return code;
///     }
///     // … the app …
///     std::process::ExitCode::SUCCESS
/// }
/// ```
///
/// Without it, a worker is the app's own `main` again: starting a session then
/// fails with a host error naming this fix (the worker's environment carries
/// [`WORKER_ENV`](crate::WORKER_ENV), so it never starts workers of its own).
#[cfg(not(target_family = "wasm"))]
#[must_use = "when it returns Some, this process is a worker that has finished: return the code from main"]
pub fn run_worker_if_requested() -> Option<ExitCode> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() != Some(WORKER_ARG) {
        return None;
    }
    let limits: Limits = args
        .next()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default();
    let Some(host) = args.next().and_then(|pid| pid.parse().ok()) else {
        send(Reply::fatal(
            "the JavaScript worker was not told its host's process id",
        ));
        return Some(ExitCode::FAILURE);
    };
    Some(worker_main(&limits, host))
}

/// A worker process: caps its memory, confines itself (`confine.rs`), serves.
#[cfg(not(target_family = "wasm"))]
fn worker_main(limits: &Limits, host: u32) -> ExitCode {
    let cap = (limits.max_memory_bytes as u64).saturating_add(BASELINE_BYTES);
    if rlimit::setrlimit(rlimit::Resource::DATA, cap, cap).is_err() {
        send(Reply::fatal(
            "the JavaScript worker could not cap its memory",
        ));
        return ExitCode::FAILURE;
    }
    if let Err(problem) = crate::confine::confine_worker(host) {
        send(Reply::fatal(&format!(
            "the JavaScript worker could not confine itself: {problem}"
        )));
        return ExitCode::FAILURE;
    }
    if serve(limits, Deadline::HostAndOwn) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Who ends a run that overstays its wall-time limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deadline {
    /// The session alone, which stops waiting (an engine thread of the host).
    Host,
    /// The host, which kills the worker process, and the process's own CPU limit
    /// as a backstop for a host that is stuck or gone (`confine::arm_own_deadline`).
    HostAndOwn,
}

impl Deadline {
    /// Arms this deadline for a run under `limits`; false if it could not be.
    fn arm(self, limits: &Limits) -> bool {
        match self {
            Deadline::Host => true,
            #[cfg(not(target_family = "wasm"))]
            Deadline::HostAndOwn => crate::confine::arm_own_deadline(limits.wall_time).is_ok(),
            // Compiled to WebAssembly there is no worker process to limit.
            #[cfg(target_family = "wasm")]
            Deadline::HostAndOwn => {
                let _ = limits;
                true
            }
        }
    }
}

/// Serves requests until the host goes away; false when the engine did not start.
/// Requests and replies travel over this thread's transport: stdin/stdout in a
/// worker process, channels on an in-process thread.
pub(crate) fn serve(limits: &Limits, deadline: Deadline) -> bool {
    if !deadline.arm(limits) {
        send(Reply::fatal(
            "the JavaScript worker could not arm its own deadline",
        ));
        return false;
    }
    let mut context = match new_context(limits) {
        Ok(context) => context,
        Err(e) => {
            send(Reply::fatal(&format!(
                "the JavaScript engine did not start: {e}"
            )));
            return false;
        }
    };
    loop {
        let Some(request) = read_request() else {
            return true;
        };
        match request {
            Request::Run { script, namespaces } => {
                if !deadline.arm(limits) {
                    send(Reply::fatal(
                        "the JavaScript worker could not arm its own deadline",
                    ));
                    return false;
                }
                if !namespaces.is_empty()
                    && let Err(e) = define_namespaces(&mut context, &namespaces)
                {
                    send(Reply::fatal(&format!(
                        "the JavaScript worker could not define the tool namespaces: {e}"
                    )));
                    return false;
                }
                LOGS.with(|logs| logs.borrow_mut().reset(limits.max_output_bytes));
                let completion = run(&mut context, &script, limits.max_nesting_depth);
                let dropped = LOGS.with(|logs| logs.borrow().dropped);
                send(Reply::Done {
                    completion,
                    dropped_log_bytes: dropped,
                });
            }
            Request::ToolResult { .. } | Request::ToolResults { .. } => {
                send(Reply::fatal(
                    "a tool result arrived while no tool call was waiting",
                ));
            }
        }
    }
}

/// Where this thread's requests come from and replies go. Unset: stdin/stdout.
pub(crate) struct Channels {
    pub requests: std::sync::mpsc::Receiver<Request>,
    pub replies: std::sync::mpsc::Sender<Reply>,
    /// The session's tools: a call of one that answers at once
    /// ([`ToolDispatch::is_immediate`]) is made here, on the engine's thread,
    /// instead of a round trip to the session's.
    pub tools: Arc<dyn ToolDispatch>,
    /// False once the session gave this engine up (its deadline passed, it was
    /// interrupted or dropped): a script still running here makes no more calls.
    pub session_waiting: Arc<std::sync::atomic::AtomicBool>,
}

thread_local! {
    static CHANNELS: RefCell<Option<Channels>> = const { RefCell::new(None) };
    /// Set while a context driven in place runs a script; see [`InPlace`].
    static IN_PLACE: RefCell<Option<InPlace>> = const { RefCell::new(None) };
    /// Bytes of tool replies handed to the engine since its last collection.
    static REPLY_BYTES_UNCOLLECTED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Tool replies the engine may hold uncollected before a tool call collects its
/// garbage first: 4 MiB. Boa starts a collection by the bytes of its own objects
/// only; a reply's text is counted nowhere, so a loop of calls with large replies
/// kept each one (a 64 MiB guest filled after two 4 MB replies) until a collection
/// that never came.
const REPLY_BYTES_BEFORE_COLLECTING: usize = 4 << 20;

/// About how many bytes `value` takes in the engine: its strings and keys, and 8
/// for every other value (the figure only paces collections).
fn reply_bytes(value: &Value) -> usize {
    match value {
        Value::String(text) => text.len(),
        Value::Array(items) => items.iter().map(reply_bytes).sum::<usize>() + 8,
        Value::Object(entries) => entries
            .iter()
            .map(|(key, value)| key.len() + reply_bytes(value))
            .sum::<usize>()
            .saturating_add(8),
        _ => 8,
    }
}

/// Collects the engine's garbage when the replies since the last collection pass
/// [`REPLY_BYTES_BEFORE_COLLECTING`], then counts `reply_bytes`.
fn collect_after_large_replies(reply_bytes: usize) {
    REPLY_BYTES_UNCOLLECTED.with(|uncollected| {
        if uncollected.get() >= REPLY_BYTES_BEFORE_COLLECTING {
            boa_engine::gc::force_collect();
            uncollected.set(0);
        }
        uncollected.set(uncollected.get() + reply_bytes);
    });
}

/// A tool call made by a script driven in place: the tool's name and arguments in,
/// its value or error message out.
pub type ToolCaller = fn(&str, Value) -> Result<Value, String>;

/// The transport of a context driven in place, for one run: tool calls go to
/// `call_tool`, whose answer waits in `pending` for the engine to read; printed
/// text is kept in `printed`.
pub(crate) struct InPlace {
    pub call_tool: ToolCaller,
    pub pending: Option<Request>,
    pub printed: String,
}

/// Makes this thread's transport `in_place` until [`end_in_place`].
pub(crate) fn begin_in_place(in_place: InPlace) {
    IN_PLACE.with(|slot| *slot.borrow_mut() = Some(in_place));
}

/// Ends the in-place transport; what the run printed.
pub(crate) fn end_in_place() -> String {
    IN_PLACE
        .with(|slot| slot.borrow_mut().take())
        .map(|in_place| in_place.printed)
        .unwrap_or_default()
}

/// The run's dropped output bytes, past the cap set by [`reset_logs`].
pub(crate) fn dropped_log_bytes() -> usize {
    LOGS.with(|logs| logs.borrow().dropped)
}

/// Starts a run's console buffer with `cap` bytes.
pub(crate) fn reset_logs(cap: usize) {
    LOGS.with(|logs| logs.borrow_mut().reset(cap));
}

/// Makes this thread talk over `channels` instead of stdin/stdout.
pub(crate) fn use_channels(channels: Channels) {
    CHANNELS.with(|slot| *slot.borrow_mut() = Some(channels));
}

/// Refuses `eval` and `new Function`: scripts run only the code the host was given.
struct NoDynamicCode;

impl HostHooks for NoDynamicCode {
    fn ensure_can_compile_strings(
        &self,
        _realm: Realm,
        _parameters: &[JsString],
        _body: &JsString,
        _direct: bool,
        _context: &mut Context,
    ) -> JsResult<()> {
        Err(JsNativeError::eval()
            .with_message("eval and new Function are disabled in this sandbox")
            .into())
    }
}

pub(crate) fn new_context(limits: &Limits) -> JsResult<Context> {
    // No module loader: scripts import nothing, and Boa's default one looks up
    // the working directory.
    let mut context = ContextBuilder::new()
        .host_hooks(Rc::new(NoDynamicCode))
        .module_loader(Rc::new(IdleModuleLoader))
        .build()?;
    apply_runtime_limits(&mut context, limits);
    context.register_global_builtin_callable(
        js_string!("__codeact_call_tool"),
        2,
        NativeFunction::from_fn_ptr(call_tool),
    )?;
    context.register_global_builtin_callable(
        js_string!("__codeact_call_many"),
        1,
        NativeFunction::from_fn_ptr(call_many),
    )?;
    context.register_global_builtin_callable(
        js_string!("__codeact_settle"),
        1,
        NativeFunction::from_fn_ptr(settle),
    )?;
    context.register_global_builtin_callable(
        js_string!("__codeact_log"),
        1,
        NativeFunction::from_fn_ptr(log),
    )?;
    let prelude = PRELUDE.replace("__CODEACT_ENCODER__", codeact_runtime::JS_ENCODER);
    context.eval(Source::from_bytes(&prelude).with_path(Path::new(PRELUDE_PATH)))?;
    Ok(context)
}

/// Defines the session's namespace objects (`github.create_issue(…)`) through the
/// prelude's one-shot hook; a no-op once a script has begun.
pub(crate) fn define_namespaces(context: &mut Context, namespaces: &Namespaces) -> JsResult<()> {
    let text = serde_json::to_string(namespaces).unwrap_or_else(|_| "{}".into());
    let define = context
        .global_object()
        .get(js_string!("__codeact_namespaces"), context)?;
    if let Some(define) = define.as_callable() {
        define.call(
            &JsValue::undefined(),
            &[JsValue::from(JsString::from(text.as_str()))],
            context,
        )?;
    }
    Ok(())
}

/// Sets Boa's own limits from `limits`: loop iterations and recursion (8 frames
/// per unit of the call depth limit, at most 512).
pub(crate) fn apply_runtime_limits(context: &mut Context, limits: &Limits) {
    let runtime_limits = context.runtime_limits_mut();
    runtime_limits.set_loop_iteration_limit(limits.max_operations);
    runtime_limits.set_recursion_limit(limits.max_call_depth.saturating_mul(8).min(512));
}

/// Runs one script; the completion value as JSON, or what went wrong.
pub(crate) fn run(context: &mut Context, script: &str, max_depth: usize) -> Result<Value, Failure> {
    let rewrite = rewrite_top_level_await(script);
    let script = hoist_top_level(&rewrite.script);
    // The helpers as the prelude made them, whatever an earlier script rebound.
    let begin = context
        .global_object()
        .get(js_string!("__codeact_begin"), context)
        .map_err(|e| classify(&e, context))?;
    if let Some(begin) = begin.as_callable() {
        begin
            .call(
                &JsValue::undefined(),
                &[JsValue::from(rewrite.asynchronous)],
                context,
            )
            .map_err(|e| classify(&e, context))?;
    }
    let mut value = context
        .eval(Source::from_bytes(&script).with_path(Path::new(SCRIPT_PATH)))
        .map_err(|e| classify(&e, context))?;
    if rewrite.asynchronous {
        // A promise as the completion value stands for what it settles to;
        // the script's calls never waited on are made as it ends.
        let await_now = context
            .global_object()
            .get(js_string!("__codeact_await"), context)
            .map_err(|e| classify(&e, context))?;
        if let Some(await_now) = await_now.as_callable() {
            value = await_now
                .call(&JsValue::undefined(), &[value], context)
                .map_err(|e| classify(&e, context))?;
        }
        let end = context
            .global_object()
            .get(js_string!("__codeact_end"), context)
            .map_err(|e| classify(&e, context))?;
        if let Some(end) = end.as_callable() {
            end.call(&JsValue::undefined(), &[], context)
                .map_err(|e| classify(&e, context))?;
        }
    }
    if value.is_undefined() {
        return Err(Failure::new(
            FailureKind::NoValue,
            "the script's completion value was undefined: end the script with an expression such as final_result(value), not with a declaration",
        ));
    }
    let encode = context
        .global_object()
        .get(js_string!("__codeact_encode"), context)
        .map_err(|e| classify(&e, context))?;
    let encode = encode.as_callable().ok_or_else(|| {
        Failure::new(
            FailureKind::Thrown,
            "__codeact_encode was replaced by the script",
        )
    })?;
    let unrepresentable = |message: String| Failure::new(FailureKind::Unrepresentable, message);
    let text = encode
        .call(
            &JsValue::undefined(),
            &[value, JsValue::from(max_depth as f64)],
            context,
        )
        .map_err(|e| {
            // The first line names the problem; the rest is the prelude's stack.
            let message = classify(&e, context).message;
            let first = message.lines().next().unwrap_or_default();
            let first = first.split(" (unknown at").next().unwrap_or(first);
            unrepresentable(first.trim_start_matches("TypeError: ").to_string())
        })?;
    let text = text
        .as_string()
        .map(|s| s.to_std_string_escaped())
        .ok_or_else(|| unrepresentable("the value has no JSON form".to_string()))?;
    serde_json::from_str(&text).map_err(|e| unrepresentable(e.to_string()))
}

/// An engine error as a [`Failure`]: Boa's runtime limits by kind, parse errors as
/// syntax, the rest as thrown.
fn classify(error: &JsError, context: &mut Context) -> Failure {
    use boa_engine::error::{EngineError, RuntimeLimitError};
    if let Some(engine) = error.as_engine() {
        let kind = match engine {
            EngineError::RuntimeLimit(RuntimeLimitError::LoopIteration) => {
                FailureKind::OperationLimit
            }
            EngineError::RuntimeLimit(_) => FailureKind::CallDepthLimit,
            _ => FailureKind::Thrown,
        };
        return Failure::new(kind, engine.to_string());
    }
    use boa_engine::JsNativeErrorKind as Native;
    let native = error.try_native(context).ok();
    let kind = match native.as_ref().map(JsNativeError::kind) {
        Some(Native::Syntax) => FailureKind::Syntax,
        _ => FailureKind::Thrown,
    };
    // The native kind's name: the first line's `Name:` may be a thrown
    // object's own words.
    let name = native.as_ref().map(|native| match native.kind() {
        Native::Aggregate(_) => "AggregateError",
        Native::Error => "Error",
        Native::Eval => "EvalError",
        Native::Range => "RangeError",
        Native::Reference => "ReferenceError",
        Native::Syntax => "SyntaxError",
        Native::Type => "TypeError",
        Native::Uri => "URIError",
        _ => "",
    });
    let raw = error.to_string();
    Failure::new(kind, without_prelude_frames(&raw))
        .named(name.filter(|name| !name.is_empty()), &raw)
}

/// The name Boa gives the script's source in positions: `(script:4:10)`.
const SCRIPT_PATH: &str = "script";
/// The name of the prelude's source, whose frames the model must not see.
const PRELUDE_PATH: &str = "prelude";

/// An error's text with what points into the prelude removed: its frames (`at
/// hostCall (prelude:192:19)`), so a tool's failure reads as the line of the
/// script that called it, not the host's code. The first line's position goes
/// too: Boa puts the outermost call there (`f()`, not the failing line inside
/// `f`), which the frames below it give innermost first.
fn without_prelude_frames(message: &str) -> String {
    let in_prelude = format!("({PRELUDE_PATH}:");
    let mut lines = message.lines();
    let first = lines.next().unwrap_or_default();
    let first = [PRELUDE_PATH, SCRIPT_PATH]
        .iter()
        .find_map(|path| {
            let at = first.rfind(&format!(" ({path}:"))?;
            first.ends_with(')').then(|| &first[..at])
        })
        .unwrap_or(first);
    let mut kept = vec![first];
    kept.extend(lines.filter(|line| !line.contains(&in_prelude)));
    kept.join("\n")
}

/// The per-run console buffer: kept output is streamed to the host as it is
/// printed; past the cap only the count grows.
#[derive(Default)]
struct Logs {
    sent: usize,
    cap: usize,
    dropped: usize,
}

impl Logs {
    fn reset(&mut self, cap: usize) {
        *self = Logs {
            sent: 0,
            cap,
            dropped: 0,
        };
    }
}

thread_local! {
    static LOGS: RefCell<Logs> = RefCell::new(Logs::default());
}

fn log(_this: &JsValue, args: &[JsValue], _context: &mut Context) -> JsResult<JsValue> {
    let text = args
        .first()
        .and_then(JsValue::as_string)
        .map(|s| s.to_std_string_escaped())
        .unwrap_or_default();
    let line = format!("{text}\n");
    let keep = LOGS.with(|logs| {
        let mut logs = logs.borrow_mut();
        let room = logs.cap.saturating_sub(logs.sent);
        let mut cut = room.min(line.len());
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        logs.sent += cut;
        logs.dropped += line.len() - cut;
        line[..cut].to_string()
    });
    if !keep.is_empty() {
        send(Reply::Log { text: keep });
    }
    Ok(JsValue::undefined())
}

/// `__codeact_call_many(text)`: the calls a script waits on together (`text`
/// is JSON of `[{name, args}, …]`), made at once by the host
/// ([`ToolDispatch::call_many`]); `[[true, value] | [false, message], …]` in
/// their order.
fn call_many(_this: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let text = args
        .first()
        .and_then(JsValue::as_string)
        .map(|s| s.to_std_string_escaped())
        .unwrap_or_default();
    let calls: Vec<codeact_runtime::ToolCall> = serde_json::from_str(&text).map_err(|e| {
        JsError::from(JsNativeError::typ().with_message(format!("the calls cannot be sent: {e}")))
    })?;
    let count = calls.len();
    let results: Vec<Result<Value, String>> = match calls_in_place(&calls) {
        Some(results) => results,
        None => match calls_immediately(&calls) {
            Some(results) => results,
            None => {
                send(Reply::ToolCalls { calls });
                match read_request() {
                    Some(Request::ToolResults { results }) if results.len() == count => results
                        .into_iter()
                        .map(|answer| match (answer.ok, answer.err) {
                            (_, Some(message)) => Err(message),
                            (ok, None) => Ok(ok.unwrap_or(Value::Null)),
                        })
                        .collect(),
                    _ => (0..count)
                        .map(|_| Err("the host gave no answer to this call".to_string()))
                        .collect(),
                }
            }
        },
    };
    let answers: Vec<Value> = results
        .into_iter()
        .map(|result| match result {
            Ok(value) => {
                collect_after_large_replies(reply_bytes(&value));
                json!([true, value])
            }
            Err(message) => json!([false, message]),
        })
        .collect();
    JsValue::from_json(&Value::Array(answers), context)
}

/// A batch made one call after another by a context driven in place, whose
/// caller makes one call at a time; `None` when not driven in place.
fn calls_in_place(calls: &[codeact_runtime::ToolCall]) -> Option<Vec<Result<Value, String>>> {
    let call_tool = IN_PLACE.with(|slot| slot.borrow().as_ref().map(|s| s.call_tool))?;
    Some(
        calls
            .iter()
            .map(|call| call_tool(&call.name, call.args.clone()))
            .collect(),
    )
}

/// A batch whose tools all answer at once, made here on the engine's thread
/// (an in-process engine's); `None` when it must go to the session's thread.
fn calls_immediately(calls: &[codeact_runtime::ToolCall]) -> Option<Vec<Result<Value, String>>> {
    let tools = CHANNELS.with(|slot| {
        slot.borrow()
            .as_ref()
            .filter(|channels| {
                channels
                    .session_waiting
                    .load(std::sync::atomic::Ordering::Acquire)
                    && calls
                        .iter()
                        .all(|call| channels.tools.is_immediate(&call.name))
            })
            .map(|channels| channels.tools.clone())
    })?;
    Some(
        tools
            .call_many(calls.to_vec())
            .into_iter()
            .map(|result| result.map_err(|e| e.message))
            .collect(),
    )
}

thread_local! {
    /// Set while `__codeact_settle` runs the engine's jobs: a job cannot wait
    /// on a promise this way itself.
    static SETTLING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `__codeact_settle(promise)`: runs the engine's jobs until `promise`
/// settles; its value, or its reason thrown (another value is its own). A
/// promise nothing will settle (this sandbox has no timers and no I/O of its
/// own) is a TypeError.
fn settle(_this: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let value = args.first().cloned().unwrap_or_default();
    use boa_engine::builtins::promise::PromiseState;
    use boa_engine::object::builtins::JsPromise;
    let Some(promise) = value
        .as_object()
        .and_then(|object| JsPromise::from_object(object.clone()).ok())
    else {
        return Ok(value);
    };
    if SETTLING.with(std::cell::Cell::get) {
        return Err(JsNativeError::typ()
            .with_message("await outside a function cannot wait inside a promise's callback")
            .into());
    }
    SETTLING.with(|settling| settling.set(true));
    let ran = context.run_jobs();
    SETTLING.with(|settling| settling.set(false));
    ran?;
    match promise.state() {
        PromiseState::Fulfilled(value) => Ok(value),
        PromiseState::Rejected(reason) => Err(JsError::from_opaque(reason)),
        PromiseState::Pending => Err(JsNativeError::typ()
            .with_message(
                "await: this promise never settles: nothing in this sandbox settles it (there are no timers or I/O); await tool calls, or promises made from them",
            )
            .into()),
    }
}

fn call_tool(_this: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let text = |i: usize| {
        args.get(i)
            .and_then(JsValue::as_string)
            .map(|s| s.to_std_string_escaped())
            .unwrap_or_default()
    };
    let name = text(0);
    let arguments: Value = serde_json::from_str(&text(1)).unwrap_or(json!({}));
    let answer = match call_immediately(&name, arguments) {
        Ok(answer) => Some(answer),
        Err(arguments) => {
            send(Reply::ToolCall {
                name: name.clone(),
                args: arguments,
            });
            read_request()
        }
    };
    let thrown =
        |message: String| -> JsError { JsNativeError::error().with_message(message).into() };
    match answer {
        Some(Request::ToolResult {
            ok: Some(value), ..
        }) => {
            collect_after_large_replies(reply_bytes(&value));
            // Straight into the engine's values: a reply as JSON text, then a
            // string, then parsed, held three copies of itself at once.
            JsValue::from_json(&value, context)
        }
        Some(Request::ToolResult {
            err: Some(message), ..
        }) => Err(thrown(format!("tool '{name}' failed: {message}"))),
        _ => Err(thrown(format!("tool '{name}' got no answer from the host"))),
    }
}

/// The answer of a tool that answers at once, called on this thread (an in-process
/// engine's); the arguments back when the call must go to the session's thread.
fn call_immediately(name: &str, arguments: Value) -> Result<Request, Value> {
    let tools = CHANNELS.with(|slot| {
        slot.borrow()
            .as_ref()
            .filter(|channels| {
                channels
                    .session_waiting
                    .load(std::sync::atomic::Ordering::Acquire)
                    && channels.tools.is_immediate(name)
            })
            .map(|channels| channels.tools.clone())
    });
    let Some(tools) = tools else {
        return Err(arguments);
    };
    Ok(Request::tool_result(
        tools.call(name, arguments).map_err(|error| error.message),
    ))
}

fn read_request() -> Option<Request> {
    if let Some(pending) = IN_PLACE.with(|slot| {
        slot.borrow_mut()
            .as_mut()
            .map(|in_place| in_place.pending.take())
    }) {
        return pending;
    }
    if let Some(received) =
        CHANNELS.with(|slot| slot.borrow().as_ref().map(|c| c.requests.recv().ok()))
    {
        return received;
    }
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => serde_json::from_str(&line).ok(),
    }
}

fn send(reply: Reply) {
    let Some(reply) = send_in_place(reply) else {
        return;
    };
    let mut reply = Some(reply);
    CHANNELS.with(|slot| {
        if let Some(channels) = slot.borrow().as_ref()
            && let Some(reply) = reply.take()
        {
            let _ = channels.replies.send(reply);
        }
    });
    let Some(reply) = reply else { return };
    let mut stdout = std::io::stdout().lock();
    if let Ok(line) = serde_json::to_string(&reply) {
        let _ = writeln!(stdout, "{line}");
        let _ = stdout.flush();
    }
}

/// Handles `reply` when the context is driven in place (a tool call is made at
/// once, its answer kept for the engine's next read); gives it back otherwise.
fn send_in_place(reply: Reply) -> Option<Reply> {
    let Some(call_tool) = IN_PLACE.with(|slot| slot.borrow().as_ref().map(|s| s.call_tool)) else {
        return Some(reply);
    };
    let answer = match reply {
        Reply::Log { text } => {
            IN_PLACE.with(|slot| {
                if let Some(in_place) = slot.borrow_mut().as_mut() {
                    in_place.printed.push_str(&text);
                }
            });
            return None;
        }
        Reply::ToolCall { name, args } => Request::tool_result(call_tool(&name, args)),
        // `Done` and `Fatal` are not sent in place: the driver returns them.
        _ => return None,
    };
    IN_PLACE.with(|slot| {
        if let Some(in_place) = slot.borrow_mut().as_mut() {
            in_place.pending = Some(answer);
        }
    });
    None
}
