//! Tools a script can call: the [`ToolBox`](toolbox::ToolBox) that serves a
//! session's calls, tools backed by external commands, and the JSON manifests that
//! describe them.

pub(crate) mod command;
pub(crate) mod discovery;
pub(crate) mod fetch;
pub(crate) mod manifest;
#[cfg(feature = "mcp")]
pub(crate) mod mcp;
pub(crate) mod pid_namespace;
pub(crate) mod toolbox;
