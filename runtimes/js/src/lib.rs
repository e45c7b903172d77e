//! The JavaScript backend of codeact: boa_engine in a supervised worker process.
//!
//! Boa runs in-process fast, but it cannot be stopped inside native builtins (a
//! catastrophic regex, `join` of a huge array) and has no heap cap. So each
//! session's context lives in a worker process, the host binary started again with
//! [`WORKER_ARG`]. The host kills the worker at the run's deadline, and the worker
//! caps its own memory with `RLIMIT_DATA`; either way the host survives, the model
//! is told which limit stopped the script, and the next run starts a fresh worker
//! (earlier variables are gone, and the model is told so). Starting a worker costs
//! a few milliseconds, once per session and after each such stop. On Linux the
//! worker also confines itself before it serves (`src/confine.rs`): it dies with
//! its host, holds no descriptor but its standard streams, cannot be read by
//! other processes, and may make only the system calls on an allow-list.
//!
//! A binary that hosts JavaScript sessions calls [`run_worker_if_requested`] first
//! thing in `main`; the `codeact` binary does.
//!
//! Compiled to WebAssembly (the `wasm:boa` guest, `guests/boa`), the crate is only
//! the engine side: [`EmbeddedJs`] drives one context in place, with the same
//! prelude, helpers, encoder and messages, and wasmtime supplies the limits Boa
//! cannot hold.

#[cfg(not(target_family = "wasm"))]
mod confine;
mod embedded;
mod encode;
mod protocol;
#[cfg(not(target_family = "wasm"))]
mod runtime;
#[cfg(not(target_family = "wasm"))]
mod session;
mod wait;
mod worker;

pub use embedded::{BatchCaller, EmbeddedJs, ToolCaller};
pub use protocol::{WORKER_ARG, WORKER_ENV};
#[cfg(not(target_family = "wasm"))]
pub use runtime::JsRuntime;
#[cfg(not(target_family = "wasm"))]
pub use session::{JsMode, JsSession};
#[cfg(not(target_family = "wasm"))]
pub use worker::run_worker_if_requested;

/// The JavaScript prompt card template (shared by `js`, `js-in-process`).
pub const CARD_TEMPLATE: &str = include_str!("../prompts/js.md");
