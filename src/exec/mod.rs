//! Running scripts from async code: sessions on blocking threads, the process-wide
//! cap on scripts running at once, and runtimes chosen by name.

pub(crate) mod registry;
pub(crate) mod run_slots;
pub(crate) mod session;
