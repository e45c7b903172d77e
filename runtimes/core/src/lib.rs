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

mod limits;
mod logs;
mod runtime;
mod tools;

pub mod js_hoist;
pub mod text;

pub use limits::{Enforcement, LimitKind, Limits};
pub use logs::LogBuffer;
pub use runtime::{HostError, RunOutcome, Runtime, RuntimeInfo, ScriptError, Session};
pub use tools::{NoTools, ToolDispatch, ToolError, ToolSpec, is_identifier};
