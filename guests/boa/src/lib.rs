//! The `wasm:boa` guest: codeact's JavaScript engine (boa_engine with the same
//! prelude, helpers, encoder and error messages as the `js` runtime's worker)
//! compiled to WASI and driven by the host through codeact's import ABI (see
//! `codeact-guest-abi`).
//!
//! Boa cannot be interrupted inside a builtin and has no heap cap; here it needs
//! neither. wasmtime stops the guest at the deadline wherever it is (a catastrophic
//! regex included) and caps its linear memory, both at the cost of the session's
//! state, without a worker process or a pipe.

use std::cell::RefCell;

use codeact_guest_abi as abi;
use codeact_js::EmbeddedJs;
use codeact_runtime::Limits;

thread_local! {
    static CONTEXT: RefCell<Option<EmbeddedJs>> = const { RefCell::new(None) };
    /// A context made by `codeact_preinit`, before any session: the host snapshots
    /// the guest after it, so every session starts with it made.
    static READY: RefCell<Option<EmbeddedJs>> = const { RefCell::new(None) };
}

/// Makes a context ahead of time (the engine, its builtins and the prelude): the
/// host runs this once and snapshots the result (wasmtime-wizer).
#[unsafe(no_mangle)]
pub extern "C" fn codeact_preinit() {
    if let Ok(context) = EmbeddedJs::new(Limits::default(), abi::call_tool) {
        READY.set(Some(context.with_batch_caller(abi::call_tools)));
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn codeact_input(len: usize) -> *mut u8 {
    abi::input(len)
}

/// Starts the session from its configuration.
#[unsafe(no_mangle)]
pub extern "C" fn codeact_start(len: usize) -> i64 {
    abi::answer_start(
        abi::with_input(len, abi::read_config).and_then(|(limits, tools)| {
            // Every tool name is a function of the prelude's `tools` proxy, and
            // `call_tool` takes any name: the host checks the name on each call.
            // Namespaced tools are also methods of their server's object.
            let context = match READY.take() {
                Some(ready) => ready.with_limits(limits),
                None => EmbeddedJs::new(limits, abi::call_tool)?.with_batch_caller(abi::call_tools),
            }
            .with_namespaces(&tools)?;
            CONTEXT.set(Some(context));
            Ok(())
        }),
    )
}

/// Runs one script.
#[unsafe(no_mangle)]
pub extern "C" fn codeact_run(len: usize) -> i64 {
    abi::answer_run(abi::with_input(len, |script| {
        let script = String::from_utf8_lossy(script);
        CONTEXT.with_borrow_mut(|context| match context.as_mut() {
            Some(context) => Ok(context.run(&script)),
            None => Err("the session was not started".into()),
        })
    }))
}
