//! The `wasm:rhai` guest: codeact's own Rhai backend (`codeact-rhai`, the same engine,
//! prelude, error messages and limits as the in-process `rhai` runtime) compiled to
//! WASI and driven by the host through codeact's import ABI (see
//! `codeact-guest-abi`), with the optional `codeact_alarm` export: Rhai checks the
//! flag on every operation.
//!
//! Time and memory are bounded twice: by Rhai's own checks inside, which end a
//! script with a clear error and keep the session, and by wasmtime outside (an
//! epoch deadline and a cap on linear memory), which hold when a builtin runs long
//! or an allocation escapes Rhai's meter, at the cost of the session's state.

use std::cell::RefCell;
use std::sync::Arc;

use codeact_guest_abi as abi;
use codeact_rhai::{RhaiRuntime, RhaiSession};
use codeact_runtime::{Limits, Runtime, Session, ToolDispatch, ToolError, ToolSpec};
use serde_json::Value;

/// Every allocation is counted, so Rhai's meter sees what a script holds wherever
/// the engine keeps it (closures, curried arguments, call frames), as in the
/// `codeact` binary.
#[global_allocator]
static ALLOCATOR: codeact_alloc_meter::MeteredAllocator = codeact_alloc_meter::MeteredAllocator;

thread_local! {
    static SESSION: RefCell<Option<RhaiSession>> = const { RefCell::new(None) };
    /// The engine `codeact_preinit` built for the default limits, which most
    /// sessions use: such a session starts on it instead of building its own.
    static READY: RefCell<Option<RhaiRuntime>> = const { RefCell::new(None) };
}

/// The tools the host configured, called through the ABI's imports.
struct HostTools {
    specs: Vec<ToolSpec>,
}

impl ToolDispatch for HostTools {
    fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    fn call(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        abi::call_tool(name, args).map_err(ToolError::new)
    }

    /// The host makes the batch together (`codeact.call_tools`).
    fn call_many(&self, calls: Vec<codeact_runtime::ToolCall>) -> Vec<Result<Value, ToolError>> {
        let calls: Vec<(String, Value)> = calls
            .into_iter()
            .map(|call| (call.name, call.args))
            .collect();
        abi::call_tools(&calls)
            .into_iter()
            .map(|result| result.map_err(ToolError::new))
            .collect()
    }
}

/// Builds the engine ahead of time (the standard library package, and the engine
/// for the default limits): the host runs this once and snapshots the result
/// (wasmtime-wizer).
#[unsafe(no_mangle)]
pub extern "C" fn codeact_preinit() {
    READY.set(Some(RhaiRuntime::new(Limits::default())));
}

#[unsafe(no_mangle)]
pub extern "C" fn codeact_input(len: usize) -> *mut u8 {
    abi::input(len)
}

/// The address of the run's deadline flag.
#[unsafe(no_mangle)]
pub extern "C" fn codeact_alarm() -> *const u8 {
    let flag: &std::sync::atomic::AtomicBool = codeact_rhai::host_alarm();
    (flag as *const std::sync::atomic::AtomicBool).cast()
}

/// Starts the session from its configuration.
#[unsafe(no_mangle)]
pub extern "C" fn codeact_start(len: usize) -> i64 {
    abi::answer_start(
        abi::with_input(len, abi::read_config).map(|(limits, specs)| {
            let tools = Arc::new(HostTools { specs });
            let ready = READY.take().filter(|ready| ready.limits() == &limits);
            let session = match ready {
                Some(ready) => ready.session(tools),
                None => RhaiRuntime::new(limits).session(tools),
            };
            SESSION.set(Some(session));
        }),
    )
}

/// Runs one script.
#[unsafe(no_mangle)]
pub extern "C" fn codeact_run(len: usize) -> i64 {
    abi::answer_run(abi::with_input(len, |script| {
        let script = String::from_utf8_lossy(script);
        SESSION.with_borrow_mut(|session| match session.as_mut() {
            Some(session) => session.run(&script).map_err(|e| e.to_string()),
            None => Err("the session was not started".into()),
        })
    }))
}
