//! The guest side of codeact's import ABI (the host side is `codeact-wasm`'s `abi`
//! module), shared by the guests built here. Each guest defines the exports as
//! thin wrappers over these functions:
//!
//! - `codeact_input(len) -> ptr`: a buffer of at least `len` bytes for the host to
//!   write the next input into ([`input`]); up to [`KEPT_INPUT_BYTES`] it stays
//!   where it is, and the host reuses it, until the host asks for more room; a
//!   larger one is freed after the call that reads it, and the host asks again;
//! - `codeact_start(len) -> i64`: starts the session from the first `len` bytes of
//!   the input buffer, a JSON configuration `{"limits": Limits, "tools":
//!   [ToolSpec]}` ([`read_config`]); answers `{"ok": true}` or `{"error": message}`
//!   ([`answer_start`]);
//! - `codeact_run(len) -> i64`: runs the script in the first `len` bytes of the
//!   input buffer and answers with [`answer_run`];
//! - optionally `codeact_alarm() -> ptr`: the address of a byte the host sets to 1
//!   when a run's deadline passes, for an engine that checks it as it runs.
//!
//! An answer is JSON kept in the guest until the next call; the `i64` says where:
//! its address in the high 32 bits, its length in the low 32.
//!
//! The guest imports `codeact.call_tool(ptr, len) -> len`, which runs a tool
//! (`{"name", "args"}`) and keeps its reply (`{"ok": value}` or `{"error":
//! message}`), and `codeact.take_reply(ptr)`, which copies that reply into a
//! buffer of that length ([`call_tool`]).
//!
//! Nothing a script does can forge a host message: there is no text channel to
//! forge.

use std::cell::RefCell;

use codeact_runtime::{Limits, RunOutcome, ScriptError, ToolSpec};
use serde_json::{Value, json};

mod host {
    #[link(wasm_import_module = "codeact")]
    unsafe extern "C" {
        /// Runs a tool; returns the length of the reply the host now holds.
        pub fn call_tool(request: *const u8, len: usize) -> usize;
        /// Runs a batch of tool calls together; returns the length of the
        /// reply the host now holds.
        pub fn call_tools(request: *const u8, len: usize) -> usize;
        /// Copies the held reply into `dest` (as long as `call_tool` said).
        pub fn take_reply(dest: *mut u8);
    }
}

thread_local! {
    static INPUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static OUTPUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Asks the host to run tool `name`: its value, or the host's error message.
pub fn call_tool(name: &str, args: Value) -> Result<Value, String> {
    let request = json!({"name": name, "args": args}).to_string();
    let reply = call_tool_text(request.as_bytes());
    let mut reply: Value = serde_json::from_slice(&reply)
        .map_err(|e| format!("the host's reply was not JSON: {e}"))?;
    if let Some(error) = reply.get("error") {
        return Err(error.as_str().unwrap_or("the tool failed").to_string());
    }
    Ok(reply.get_mut("ok").map(Value::take).unwrap_or(Value::Null))
}

/// Asks the host to run `calls` (each `(name, args)`) together: each one's
/// value or the host's error message, in order.
pub fn call_tools(calls: &[(String, Value)]) -> Vec<Result<Value, String>> {
    let request: Vec<Value> = calls
        .iter()
        .map(|(name, args)| json!({"name": name, "args": args}))
        .collect();
    let request = Value::Array(request).to_string();
    // SAFETY: the host reads `len` bytes at `request`, which this borrow keeps alive.
    let len = unsafe { host::call_tools(request.as_ptr(), request.len()) };
    let mut reply = vec![0u8; len];
    // SAFETY: the host writes exactly the `len` bytes it announced into `reply`.
    unsafe { host::take_reply(reply.as_mut_ptr()) };
    let failed = |message: String| calls.iter().map(|_| Err(message.clone())).collect();
    let mut reply: Value = match serde_json::from_slice(&reply) {
        Ok(reply) => reply,
        Err(e) => return failed(format!("the host's reply was not JSON: {e}")),
    };
    if let Some(error) = reply.get("error") {
        return failed(error.as_str().unwrap_or("the calls failed").to_string());
    }
    let Some(results) = reply.get_mut("results").and_then(Value::as_array_mut) else {
        return failed("the host's reply held no results".to_string());
    };
    if results.len() != calls.len() {
        return failed("the host answered another number of calls".to_string());
    }
    results
        .iter_mut()
        .map(|result| match result.get("error") {
            Some(error) => Err(error.as_str().unwrap_or("the tool failed").to_string()),
            None => Ok(result.get_mut("ok").map(Value::take).unwrap_or(Value::Null)),
        })
        .collect()
}

/// Sends a tool request already written as JSON text (`{"name", "args"}`)
/// and returns the host's reply as it sent it (`{"ok": value}` or `{"error":
/// message}`): for an engine that writes and reads JSON itself (the QuickJS
/// guest's prelude), no conversion through [`Value`] on either side.
pub fn call_tool_text(request: &[u8]) -> Vec<u8> {
    // SAFETY: the host reads `len` bytes at `request`, which this borrow keeps alive.
    let len = unsafe { host::call_tool(request.as_ptr(), request.len()) };
    let mut reply = vec![0u8; len];
    // SAFETY: the host writes exactly the `len` bytes it announced into `reply`.
    unsafe { host::take_reply(reply.as_mut_ptr()) };
    reply
}

/// The largest input buffer a guest keeps between calls (the host's side of the
/// ABI uses the same figure): a 10 MB script's buffer is not held for the rest of
/// the session.
pub const KEPT_INPUT_BYTES: usize = 64 << 10;

/// The input buffer (`codeact_input`), at least `len` bytes long.
pub fn input(len: usize) -> *mut u8 {
    INPUT.with_borrow_mut(|input| {
        if input.len() < len {
            input.resize(len, 0);
        }
        input.as_mut_ptr()
    })
}

/// Calls `read` with the first `len` bytes of the input buffer, as the host wrote
/// them, then frees the buffer if it is over [`KEPT_INPUT_BYTES`].
pub fn with_input<R>(len: usize, read: impl FnOnce(&[u8]) -> R) -> R {
    let result = INPUT.with_borrow(|input| read(input.get(..len).unwrap_or(input)));
    INPUT.with_borrow_mut(|input| {
        if input.len() > KEPT_INPUT_BYTES {
            *input = Vec::new();
        }
    });
    result
}

/// Keeps `value` as the answer; where it lies, as the exports return it.
pub fn answer(value: Value) -> i64 {
    OUTPUT.with_borrow_mut(|output| {
        *output = value.to_string().into_bytes();
        let address = output.as_ptr() as usize as u64;
        let len = output.len() as u64;
        ((address << 32) | (len & 0xffff_ffff)) as i64
    })
}

/// The session's configuration from `codeact_start`'s input.
pub fn read_config(input: &[u8]) -> Result<(Limits, Vec<ToolSpec>), String> {
    let mut config: Value = serde_json::from_slice(input).map_err(|e| e.to_string())?;
    let limits = serde_json::from_value(config["limits"].take()).map_err(|e| e.to_string())?;
    let tools = serde_json::from_value(config["tools"].take()).map_err(|e| e.to_string())?;
    Ok((limits, tools))
}

/// Answers `codeact_start`: the session started, or why not.
pub fn answer_start(started: Result<(), String>) -> i64 {
    match started {
        Ok(()) => answer(json!({"ok": true})),
        Err(reason) => answer(json!({"error": reason})),
    }
}

/// Answers `codeact_run`: `{"completion": {"ok": value} | {"error": …}, "logs":
/// {"kept": text, "dropped": bytes}}`, or `{"host_error": reason}` when the
/// session could not run it.
pub fn answer_run(outcome: Result<RunOutcome, String>) -> i64 {
    answer(match outcome {
        Err(reason) => json!({"host_error": reason}),
        Ok(outcome) => json!({
            "completion": match outcome.completion {
                Ok(value) => json!({"ok": value}),
                Err(error) => json!({"error": script_error(&error)}),
            },
            "logs": {"kept": outcome.logs.kept(), "dropped": outcome.logs.dropped_bytes()},
        }),
    })
}

fn script_error(error: &ScriptError) -> Value {
    match error {
        ScriptError::Syntax { message, facts } => {
            json!({"kind": "syntax", "message": message, "facts": facts})
        }
        ScriptError::Thrown { message, facts, .. } => {
            json!({"kind": "thrown", "message": message, "facts": facts})
        }
        ScriptError::LimitExceeded {
            limit,
            described,
            detail,
            restarted,
        } => json!({
            "kind": "limit",
            "limit": limit,
            "described": described,
            "detail": detail,
            "restarted": restarted,
        }),
        ScriptError::NoValue { message } => json!({"kind": "no_value", "message": message}),
        ScriptError::Unrepresentable { message } => {
            json!({"kind": "unrepresentable", "message": message})
        }
        other => json!({"kind": "thrown", "message": other.to_string()}),
    }
}
