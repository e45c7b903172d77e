//! The guest side of codeact's import ABI (the host side is `codeact-wasm`'s `abi`
//! module), shared by the guests built here. Each guest defines the exports as
//! thin wrappers over these functions:
//!
//! - `codeact_alloc(len) -> ptr`: a buffer of `len` bytes the host fills and then
//!   hands to one of the calls below, which take ownership of it ([`alloc`]);
//! - `codeact_start(ptr, len) -> len`: starts the session from a JSON configuration
//!   `{"limits": Limits, "tools": [ToolSpec]}` ([`read_config`]); answers
//!   `{"ok": true}` or `{"error": message}`;
//! - `codeact_run(ptr, len) -> len`: runs one script (UTF-8) and answers with
//!   [`answer_run`];
//! - `codeact_output() -> ptr`: where the last answer lies (`len` bytes of JSON,
//!   valid until the next call) ([`output`]);
//! - optionally `codeact_alarm() -> ptr`: the address of a byte the host sets to 1
//!   when a run's deadline passes, for an engine that checks it as it runs.
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
        /// Copies the held reply into `dest` (as long as `call_tool` said).
        pub fn take_reply(dest: *mut u8);
    }
}

thread_local! {
    static OUTPUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Asks the host to run tool `name`: its value, or the host's error message.
pub fn call_tool(name: &str, args: Value) -> Result<Value, String> {
    let request = json!({"name": name, "args": args}).to_string();
    // SAFETY: the host reads `len` bytes at `request`, which this borrow keeps alive.
    let len = unsafe { host::call_tool(request.as_ptr(), request.len()) };
    let mut reply = vec![0u8; len];
    // SAFETY: the host writes exactly the `len` bytes it announced into `reply`.
    unsafe { host::take_reply(reply.as_mut_ptr()) };
    let mut reply: Value = serde_json::from_slice(&reply)
        .map_err(|e| format!("the host's reply was not JSON: {e}"))?;
    if let Some(error) = reply.get("error") {
        return Err(error.as_str().unwrap_or("the tool failed").to_string());
    }
    Ok(reply.get_mut("ok").map(Value::take).unwrap_or(Value::Null))
}

/// A buffer of `len` bytes for the host to fill (`codeact_alloc`).
pub fn alloc(len: usize) -> *mut u8 {
    let mut buffer = std::mem::ManuallyDrop::new(Vec::<u8>::with_capacity(len.max(1)));
    buffer.as_mut_ptr()
}

/// Takes back a buffer from [`alloc`] that the host filled with `len` bytes.
///
/// # Safety
///
/// `ptr` must come from `alloc(len)` with this `len`, filled by the host, and be
/// taken back once: what the ABI promises of the buffers the host hands over.
pub unsafe fn take_input(ptr: *mut u8, len: usize) -> Vec<u8> {
    // SAFETY: the caller's promise: `ptr` came from `alloc(len)` (capacity
    // `len.max(1)`) and holds `len` initialised bytes.
    unsafe { Vec::from_raw_parts(ptr, len, len.max(1)) }
}

/// Keeps `value` as the answer and returns its length.
pub fn answer(value: Value) -> usize {
    OUTPUT.with_borrow_mut(|output| {
        *output = value.to_string().into_bytes();
        output.len()
    })
}

/// Where the last answer lies (`codeact_output`).
pub fn output() -> *const u8 {
    OUTPUT.with_borrow(|output| output.as_ptr())
}

/// The session's configuration from `codeact_start`'s input.
pub fn read_config(input: &[u8]) -> Result<(Limits, Vec<ToolSpec>), String> {
    let mut config: Value = serde_json::from_slice(input).map_err(|e| e.to_string())?;
    let limits = serde_json::from_value(config["limits"].take()).map_err(|e| e.to_string())?;
    let tools = serde_json::from_value(config["tools"].take()).map_err(|e| e.to_string())?;
    Ok((limits, tools))
}

/// Answers `codeact_start`: the session started, or why not.
pub fn answer_start(started: Result<(), String>) -> usize {
    match started {
        Ok(()) => answer(json!({"ok": true})),
        Err(reason) => answer(json!({"error": reason})),
    }
}

/// Answers `codeact_run`: `{"completion": {"ok": value} | {"error": …}, "logs":
/// {"kept": text, "dropped": bytes}}`, or `{"host_error": reason}` when the
/// session could not run it.
pub fn answer_run(outcome: Result<RunOutcome, String>) -> usize {
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
        ScriptError::Syntax { message } => json!({"kind": "syntax", "message": message}),
        ScriptError::Thrown { message } => json!({"kind": "thrown", "message": message}),
        ScriptError::LimitExceeded {
            limit,
            described,
            detail,
        } => json!({"kind": "limit", "limit": limit, "described": described, "detail": detail}),
        ScriptError::NoValue { message } => json!({"kind": "no_value", "message": message}),
        ScriptError::Unrepresentable { message } => {
            json!({"kind": "unrepresentable", "message": message})
        }
        other => json!({"kind": "thrown", "message": other.to_string()}),
    }
}
