//! Running scripts from async code: sessions on blocking threads, the process-wide
//! cap on scripts running at once, and runtimes chosen by name; with them, what
//! every runtime shares (the [`Runtime`] and [`Session`] traits, [`Limits`], the
//! errors and snapshots of sessions) and the metered allocator that holds Rhai
//! runs to their memory limit.

pub(crate) mod registry;
pub(crate) mod run_slots;
pub(crate) mod session;

pub use registry::{OPT_IN_RUNTIMES, RUNTIME_NAMES, RuntimeByNameError, runtime_by_name};
pub use run_slots::{max_running_scripts, set_max_running_scripts};
pub use session::{ScriptRun, ScriptSession};

pub use codeact_alloc_meter::{MeteredAllocator, is_installed as metered_allocator_installed};
pub use codeact_runtime::{
    Enforcement, HostError, Interrupt, LimitKind, Limits, LogBuffer, ParallelCalls, RunOutcome,
    Runtime, RuntimeInfo, SESSION_RESTARTED, ScriptError, Session, Snapshot, SnapshotError,
};
#[cfg(feature = "wasm")]
pub use codeact_wasm::Guest;
