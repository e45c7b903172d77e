//! `parallel([|| a(1), || b(2)])`: several tool calls made at once. Rhai has no
//! promises, so each item is a closure holding one tool call; `parallel` runs
//! each closure while calls are only recorded (the tool function returns a
//! placeholder), checks that each made exactly one call and returned it, then
//! hands the calls to the host together ([`ToolDispatch::call_many`]), which
//! runs them concurrently. `parallel` returns the results in order and throws
//! the first failure as a tool call would; `parallel_settled` returns each
//! call's `#{ok: value}` or `#{error: message}` instead, so one failure does
//! not cost the others' results.
//!
//! [`ToolDispatch::call_many`]: codeact_runtime::ToolDispatch::call_many

use std::cell::RefCell;

use codeact_runtime::{ToolCall, ToolError};
use rhai::{Array, Dynamic, Engine, EvalAltResult, FnPtr, Map, NativeCallContext};

use crate::{convert, run_state};

/// What a tool function returns while `parallel` records its closures: the
/// call's place in the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordedCall(usize);

thread_local! {
    /// The calls recorded so far, while `parallel` runs its closures.
    static RECORDING: RefCell<Option<Vec<ToolCall>>> = const { RefCell::new(None) };
}

/// Whether `parallel` is recording its closures' calls on this thread.
pub(crate) fn recording() -> bool {
    RECORDING.with(|recording| recording.borrow().is_some())
}

/// Records a call while `parallel` records, and returns its placeholder.
pub(crate) fn record(name: &str, args: serde_json::Value) -> Dynamic {
    RECORDING.with(|recording| {
        let mut recording = recording.borrow_mut();
        let calls = recording.get_or_insert_with(Vec::new);
        calls.push(ToolCall::new(name, args));
        Dynamic::from(RecordedCall(calls.len() - 1))
    })
}

/// Registers `parallel` and `parallel_settled`.
pub(crate) fn register(engine: &mut Engine, max_depth: usize) {
    engine.register_fn(
        "parallel",
        move |ctx: NativeCallContext, items: Array| -> Result<Array, Box<EvalAltResult>> {
            let results = run(&ctx, items, max_depth)?;
            let count = results.len();
            let mut values = Array::with_capacity(count);
            for (at, (name, result)) in results.into_iter().enumerate() {
                match result {
                    Ok(value) => values.push(value),
                    Err(ToolError { message }) => {
                        return Err(thrown(
                            &ctx,
                            format!(
                                "tool '{name}' failed: {message} (call {} of {count} in parallel; the others were made: parallel_settled keeps their results)",
                                at + 1
                            ),
                        ));
                    }
                }
            }
            Ok(values)
        },
    );
    engine.register_fn(
        "parallel_settled",
        move |ctx: NativeCallContext, items: Array| -> Result<Array, Box<EvalAltResult>> {
            let results = run(&ctx, items, max_depth)?;
            Ok(results
                .into_iter()
                .map(|(_, result)| {
                    let mut settled = Map::new();
                    match result {
                        Ok(value) => settled.insert("ok".into(), value),
                        Err(ToolError { message }) => {
                            settled.insert("error".into(), Dynamic::from(message))
                        }
                    };
                    Dynamic::from_map(settled)
                })
                .collect())
        },
    );
}

/// A call of a batch: its tool's name, and what it returned (converted).
type Answered = (String, Result<Dynamic, ToolError>);

/// Records the calls of `items`, makes them together, and returns each
/// call's tool name and result (converted), in order.
fn run(
    ctx: &NativeCallContext,
    items: Array,
    max_depth: usize,
) -> Result<Vec<Answered>, Box<EvalAltResult>> {
    let usage = "parallel takes a list of closures, each making one tool call, like parallel([|| price(\"tea\"), || price(\"milk\")])";
    let tools = run_state::tools()
        .ok_or_else(|| thrown(ctx, "parallel is only available while a script runs".into()))?;
    if recording() {
        return Err(thrown(
            ctx,
            format!("parallel cannot run inside another parallel's closure: {usage}"),
        ));
    }
    let mut pointers = Vec::with_capacity(items.len());
    for (at, item) in items.into_iter().enumerate() {
        match item.try_cast::<FnPtr>() {
            Some(pointer) => pointers.push(pointer),
            None => {
                return Err(thrown(
                    ctx,
                    format!("item {} of parallel is not a closure: {usage}", at + 1),
                ));
            }
        }
    }
    RECORDING.with(|recording| *recording.borrow_mut() = Some(Vec::new()));
    let recorded = record_each(ctx, &pointers, usage);
    let calls = RECORDING
        .with(|recording| recording.borrow_mut().take())
        .unwrap_or_default();
    recorded?;
    let names: Vec<String> = calls.iter().map(|call| call.name.clone()).collect();
    let started = std::time::Instant::now();
    let results = tools.call_many(calls);
    run_state::waited(started.elapsed());
    crate::stops::out_of_time(ctx)?;
    Ok(names
        .into_iter()
        .zip(results)
        .map(|(name, result)| {
            let result = result.and_then(|value| {
                convert::from_json(&value, max_depth)
                    .map_err(|e| ToolError::new(format!("its result cannot be used: {e}")))
            });
            (name, result)
        })
        .collect())
}

/// Runs each closure while calls are recorded; each must make one call and
/// return its placeholder.
fn record_each(
    ctx: &NativeCallContext,
    pointers: &[FnPtr],
    usage: &str,
) -> Result<(), Box<EvalAltResult>> {
    for (at, pointer) in pointers.iter().enumerate() {
        let before = RECORDING.with(|r| r.borrow().as_ref().map_or(0, Vec::len));
        let returned: Dynamic = pointer.call_within_context(ctx, ()).map_err(|e| {
            thrown(
                ctx,
                format!(
                    "closure {} of parallel failed before its call was made ({}): {usage}; use the results after parallel returns",
                    at + 1,
                    first_line(&e.to_string())
                ),
            )
        })?;
        let after = RECORDING.with(|r| r.borrow().as_ref().map_or(0, Vec::len));
        let made_one = after == before + 1;
        let returned_it = returned
            .read_lock::<RecordedCall>()
            .is_some_and(|call| *call == RecordedCall(before));
        if !made_one || !returned_it {
            return Err(thrown(
                ctx,
                format!(
                    "closure {} of parallel made {} tool calls and returned {}: each closure must make exactly one call and return it; {usage}",
                    at + 1,
                    after - before,
                    if returned_it { "it" } else { "something else" }
                ),
            ));
        }
    }
    Ok(())
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

fn thrown(ctx: &NativeCallContext, message: String) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorRuntime(
        message.into(),
        ctx.call_position(),
    ))
}
