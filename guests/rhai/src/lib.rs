//! The `wasm:rhai` guest: codeact's own Rhai backend (`codeact-rhai`, the same engine,
//! prelude, error messages and limits as the in-process `rhai` runtime) compiled to
//! WASI and driven by the host through function calls instead of a text protocol.
//!
//! The ABI (the host side is `codeact-wasm`'s `abi` module):
//!
//! - exports `codeact_alloc(len) -> ptr`: a buffer of `len` bytes the host fills
//!   and then hands to one of the calls below, which take ownership of it;
//! - exports `codeact_start(ptr, len) -> len`: starts the session from a JSON
//!   configuration `{"limits": Limits, "tools": [ToolSpec]}`;
//! - exports `codeact_run(ptr, len) -> len`: runs one script (UTF-8) in the session;
//! - exports `codeact_output() -> ptr`: where the answer of the last start or run
//!   lies (`len` bytes of JSON, valid until the next call);
//! - exports `codeact_alarm() -> ptr`: the address of a byte the host sets to 1
//!   when a run's deadline passes; the engine checks it on every operation;
//! - imports `codeact.call_tool(ptr, len) -> len`: asks the host to run a tool
//!   (`{"name", "args"}`); the host keeps the reply (`{"ok": value}` or
//!   `{"error": message}`) and copies it with `codeact.take_reply(ptr)` into a buffer
//!   of that length.
//!
//! Nothing a script does can forge a host message: there is no text channel to
//! forge. Time and memory are bounded twice: by Rhai's own checks inside, which end
//! a script with a clear error and keep the session, and by wasmtime outside (an
//! epoch deadline and a cap on linear memory), which hold when a builtin runs long
//! or an allocation escapes Rhai's meter, at the cost of the session's state.

use std::cell::RefCell;
use std::sync::Arc;

use codeact_rhai::{RhaiRuntime, RhaiSession};
use codeact_runtime::{Limits, ScriptError, Session, ToolDispatch, ToolError, ToolSpec};
use serde_json::{Value, json};

/// Every allocation is counted, so Rhai's meter sees what a script holds wherever
/// the engine keeps it (closures, curried arguments, call frames), as in the
/// `codeact` binary.
#[global_allocator]
static ALLOCATOR: codeact_alloc_meter::MeteredAllocator = codeact_alloc_meter::MeteredAllocator;

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
    static SESSION: RefCell<Option<RhaiSession>> = const { RefCell::new(None) };
    static OUTPUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The tools the host configured, called through the `codeact` imports.
struct HostTools {
    specs: Vec<ToolSpec>,
}

impl ToolDispatch for HostTools {
    fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    fn call(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        let request = json!({"name": name, "args": args}).to_string();
        // SAFETY: the host reads `len` bytes at `request`, which this borrow keeps alive.
        let len = unsafe { host::call_tool(request.as_ptr(), request.len()) };
        let mut reply = vec![0u8; len];
        // SAFETY: the host writes exactly the `len` bytes it announced into `reply`.
        unsafe { host::take_reply(reply.as_mut_ptr()) };
        let mut reply: Value = serde_json::from_slice(&reply)
            .map_err(|e| ToolError::new(format!("the host's reply was not JSON: {e}")))?;
        if let Some(error) = reply.get("error") {
            return Err(ToolError::new(error.as_str().unwrap_or("the tool failed")));
        }
        Ok(reply.get_mut("ok").map(Value::take).unwrap_or(Value::Null))
    }
}

/// A buffer of `len` bytes for the host to fill; ownership passes back to the guest
/// with the call that receives it.
#[unsafe(no_mangle)]
pub extern "C" fn codeact_alloc(len: usize) -> *mut u8 {
    let mut buffer = std::mem::ManuallyDrop::new(Vec::<u8>::with_capacity(len.max(1)));
    buffer.as_mut_ptr()
}

/// Takes back a buffer from [`codeact_alloc`] that the host filled with `len` bytes.
fn take_input(ptr: *mut u8, len: usize) -> Vec<u8> {
    // SAFETY: `ptr` came from `codeact_alloc(len)` (capacity `len.max(1)`), and the
    // host wrote `len` bytes into it before this call.
    unsafe { Vec::from_raw_parts(ptr, len, len.max(1)) }
}

fn answer(value: Value) -> usize {
    OUTPUT.with_borrow_mut(|output| {
        *output = value.to_string().into_bytes();
        output.len()
    })
}

/// Where the last answer lies.
#[unsafe(no_mangle)]
pub extern "C" fn codeact_output() -> *const u8 {
    OUTPUT.with_borrow(|output| output.as_ptr())
}

/// The address of the run's deadline flag (see the crate docs).
#[unsafe(no_mangle)]
pub extern "C" fn codeact_alarm() -> *const u8 {
    let flag: &std::sync::atomic::AtomicBool = codeact_rhai::host_alarm();
    (flag as *const std::sync::atomic::AtomicBool).cast()
}

/// Starts the session; answers `{"ok": true}` or `{"error": message}`.
#[unsafe(no_mangle)]
pub extern "C" fn codeact_start(ptr: *mut u8, len: usize) -> usize {
    let config = take_input(ptr, len);
    let parsed: Result<(Limits, Vec<ToolSpec>), String> = serde_json::from_slice::<Value>(&config)
        .map_err(|e| e.to_string())
        .and_then(|mut config| {
            let limits =
                serde_json::from_value(config["limits"].take()).map_err(|e| e.to_string())?;
            let tools =
                serde_json::from_value(config["tools"].take()).map_err(|e| e.to_string())?;
            Ok((limits, tools))
        });
    match parsed {
        Ok((limits, specs)) => {
            let session = RhaiRuntime::new(limits).session(Arc::new(HostTools { specs }));
            SESSION.set(Some(session));
            answer(json!({"ok": true}))
        }
        Err(reason) => answer(json!({"error": format!("bad configuration: {reason}")})),
    }
}

/// Runs one script; answers `{"completion": {"ok": value} | {"error": …}, "logs":
/// {"kept": text, "dropped": bytes}}`.
#[unsafe(no_mangle)]
pub extern "C" fn codeact_run(ptr: *mut u8, len: usize) -> usize {
    let script = take_input(ptr, len);
    let script = String::from_utf8_lossy(&script);
    let outcome = SESSION.with_borrow_mut(|session| {
        session
            .as_mut()
            .map(|session| session.run(&script).map_err(|e| e.to_string()))
    });
    let reply = match outcome {
        None => json!({"host_error": "the session was not started"}),
        Some(Err(reason)) => json!({"host_error": reason}),
        Some(Ok(outcome)) => json!({
            "completion": match outcome.completion {
                Ok(value) => json!({"ok": value}),
                Err(error) => json!({"error": script_error(&error)}),
            },
            "logs": {"kept": outcome.logs.kept(), "dropped": outcome.logs.dropped_bytes()},
        }),
    };
    answer(reply)
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
