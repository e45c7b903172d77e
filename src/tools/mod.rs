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

pub use command::{CommandSpec, DEFAULT_COMMAND_TIMEOUT, command_tool};
pub use discovery::{DESCRIBE_TOOL, SEARCH_TOOLS, ToolDiscovery};
pub use fetch::{
    DEFAULT_FETCH_TIMEOUT, DEFAULT_MAX_REQUESTS, DEFAULT_MAX_RESPONSE_BYTES, FETCH_TOOL,
    FetchPolicy, HostPattern, IpNetwork, SecretHeader, fetch_tool,
};
#[cfg(feature = "mcp")]
pub use manifest::load_mcp_servers;
pub use manifest::{load_tool_manifest, refuse_mcp_servers};
#[cfg(feature = "mcp")]
pub use mcp::{
    DEFAULT_MCP_CALL_TIMEOUT, DEFAULT_MCP_CONNECT_TIMEOUT, MAX_MCP_RESULT_BYTES, McpError,
    McpServer,
};
pub use toolbox::{Tool, ToolBox, ToolBoxError, ToolFuture};

pub use codeact_runtime::{NoTools, ToolDispatch, ToolError, ToolSpec};
