//! Running scripts from async code: sessions on blocking threads, the process-wide
//! cap on scripts running at once, and runtimes chosen by name.

pub(crate) mod registry;
pub(crate) mod run_slots;
pub(crate) mod session;

pub use registry::{OPT_IN_RUNTIMES, RUNTIME_NAMES, RuntimeByNameError, runtime_by_name};
pub use run_slots::{max_running_scripts, set_max_running_scripts};
pub use session::{ScriptRun, ScriptSession};
