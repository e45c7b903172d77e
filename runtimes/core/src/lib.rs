//! The contract between the codeact host and its script engines.
//!
//! A [`Runtime`] is the factory: it holds what is expensive and shared (a configured
//! engine, compiled modules). A [`Session`] is what one conversation owns: variables a
//! script defines stay visible to the next script of the same session, as in a
//! notebook. A session runs one script at a time and returns the script's completion
//! value as [`serde_json::Value`] plus what it printed; the host decodes that value in
//! one place, so every backend obeys the same rules.
//!
//! ```
//! use codeact_runtime::{Limits, LimitKind};
//!
//! let limits = Limits::default();
//! assert_eq!(limits.wall_time.as_millis(), 5_000);
//! assert!(LimitKind::WallTime.describe(&limits).contains("5000 ms"));
//! ```

mod files;
mod interrupt;
mod limits;
mod logs;
mod run_clock;
mod runtime;
mod snapshot;
mod spelling;
mod tools;

pub mod call_deadline;
pub mod js_await;
pub mod js_errors;
pub mod js_hoist;
pub mod text;

/// The JSON encoder both JavaScript preludes use (the Boa worker's and the QuickJS
/// guest's): a JavaScript function expression, called once at load with a
/// `fail(message)` that throws, returning `encode(value, maxDepth, lenient, root)`.
/// It takes every intrinsic it needs at load and never calls `toJSON`, so what a
/// script changes in the language's built-ins does not change what later steps
/// send to the host. See the file for the rules.
pub const JS_ENCODER: &str = include_str!("js_encoder.js");

pub use files::{DiskFull, DiskMeter, FileView, SharedDir};
pub use interrupt::Interrupt;
pub use limits::{Enforcement, LimitKind, Limits};
pub use logs::LogBuffer;
pub use run_clock::RunClock;
pub use runtime::{
    ErrorFacts, ErrorKind, HostError, ParallelCalls, RunOutcome, Runtime, RuntimeInfo,
    SESSION_RESTARTED, ScriptError, Session,
};
pub use snapshot::{Snapshot, SnapshotError};
pub use spelling::{MAX_WRITTEN_NAME, SpelledTools, Spelling, Written, WrittenName};
pub use tools::{
    HELPER_NAMES, NoTools, PARALLEL_CALLS, SignatureField, ToolCall, ToolDispatch, ToolError,
    ToolSpec, call_on_threads, compact_type, is_identifier, is_member_name, is_namespace_name,
    namespaces, rhai_member,
};
