//! MCP servers' tools as tools of a session ("code mode"): each tool a server
//! lists becomes a [`Tool`] named `SERVER_TOOL`, callable from every runtime like
//! any other and also as a method of an object named after the server
//! (`github.create_issue(…)`, where the server's name is not a keyword or a
//! global of some language: see [`codeact_runtime::is_namespace_name`]), through
//! the official Rust SDK's client (`rmcp`).
//!
//! A server is reached over stdio (a command the host starts, in its own process
//! group and, where the system allows, its own PID namespace, killed when the
//! tools are dropped) or streamable HTTP (a URL, with headers such as a token that
//! scripts never see). One connection serves all of a server's tools. A server
//! that dies, hangs past the call timeout or answers garbage fails that call with
//! a catchable tool error naming the server; the connection is dropped (a stdio
//! server's process killed) and made again on the next call.
//!
//! What a script gets back: the result's `structuredContent` when the server sends
//! it (checked against the tool's output schema when it has one), else the text
//! content parsed as JSON when it parses, else the text; several content blocks
//! come as a list. Content a script cannot use (an image, audio, a resource) is
//! described (its kind, MIME type and size), never dropped silently. A result
//! with `isError` is a tool error carrying the server's message. Arguments are
//! checked against the tool's input schema before the call, so a bad call is an
//! error naming the field, not a round trip.

use std::borrow::Cow;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use codeact_runtime::{ToolError, is_identifier};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::{
    StreamableHttpClientTransport, TokioChildProcess,
    streamable_http_client::StreamableHttpClientTransportConfig,
};
use rmcp::{ServiceError, ServiceExt};
use serde_json::{Value, json};
use tokio::process::Command;
use tokio::sync::Mutex;

use crate::output::schema_budget::BudgetedSchema;
use crate::tools::pid_namespace;
use crate::tools::toolbox::Tool;

/// The longest tool name a server's tool may have to be offered to scripts:
/// 128 characters. A longer one is left out, with a warning.
const MAX_TOOL_NAME_CHARS: usize = 128;

/// How long a call may take before the host gives up on the server. Default: 30 s,
/// as command tools.
pub const DEFAULT_MCP_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How long starting a server and listing its tools may take. Default: 60 s: a
/// server started through `npx` may first be downloaded.
pub const DEFAULT_MCP_CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// The most a server's result may hold, as JSON. Default: 16 MiB, `rmcp`'s own
/// cap on an HTTP response.
pub const MAX_MCP_RESULT_BYTES: usize = 16 << 20;

/// An MCP server whose tools a session gets: where it is and how long it may take.
///
/// ```
/// use codeact::McpServer;
///
/// let files = McpServer::stdio("files", "npx", ["-y", "@modelcontextprotocol/server-filesystem", "/data"]);
/// let github = McpServer::http("github", "https://api.example.com/mcp")
///     .header("Authorization", "Bearer secret");
/// assert_eq!(files.name(), "files");
/// assert_eq!(McpServer::parse("time=uvx mcp-server-time").unwrap().name(), "time");
/// # let _ = github;
/// ```
#[derive(Debug, Clone)]
pub struct McpServer {
    name: String,
    transport: Transport,
    call_timeout: Duration,
    connect_timeout: Duration,
    /// The server's tools (by its own names) whose calls wait for approval;
    /// `None`: all of them.
    needs_approval: Option<Option<std::collections::BTreeSet<String>>>,
}

#[derive(Clone)]
enum Transport {
    Stdio {
        program: String,
        args: Vec<String>,
    },
    Http {
        url: String,
        headers: Vec<(String, String)>,
    },
}

impl std::fmt::Debug for Transport {
    /// Header values are secrets: only their names are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transport::Stdio { program, args } => f
                .debug_struct("Stdio")
                .field("program", program)
                .field("args", args)
                .finish(),
            Transport::Http { url, headers } => {
                let names: Vec<&str> = headers.iter().map(|(name, _)| name.as_str()).collect();
                f.debug_struct("Http")
                    .field("url", url)
                    .field("headers", &names)
                    .finish()
            }
        }
    }
}

/// Why a server's tools could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MCP server '{server}': {message}")]
pub struct McpError {
    server: String,
    message: String,
}

impl McpError {
    fn new(server: &str, message: impl Into<String>) -> Self {
        Self {
            server: server.to_string(),
            message: message.into(),
        }
    }
}

impl McpServer {
    /// A server the host starts as `program args…` and talks to over its stdin and
    /// stdout. It inherits the host's environment (it is the operator's, not a
    /// script's, choice); its stderr is discarded.
    pub fn stdio<I, S>(name: impl Into<String>, program: impl Into<String>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::with_transport(
            name.into(),
            Transport::Stdio {
                program: program.into(),
                args: args.into_iter().map(Into::into).collect(),
            },
        )
    }

    /// A server reached over streamable HTTP at `url`.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self::with_transport(
            name.into(),
            Transport::Http {
                url: url.into(),
                headers: Vec::new(),
            },
        )
    }

    fn with_transport(name: String, transport: Transport) -> Self {
        Self {
            name,
            transport,
            call_timeout: DEFAULT_MCP_CALL_TIMEOUT,
            connect_timeout: DEFAULT_MCP_CONNECT_TIMEOUT,
            needs_approval: None,
        }
    }

    /// `NAME=COMMAND ARGS…` (split like shell words, never run by a shell) or
    /// `NAME=http://…` / `NAME=https://…`, as `--mcp` takes it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (name, target) = text
            .split_once('=')
            .ok_or_else(|| format!("'{text}' must be NAME=COMMAND or NAME=URL"))?;
        let (name, target) = (name.trim(), target.trim());
        let server = if target.starts_with("http://") || target.starts_with("https://") {
            Self::http(name, target)
        } else {
            let mut words = shell_words::split(target)
                .map_err(|e| format!("the command of '{name}' does not parse: {e}"))?;
            if words.is_empty() {
                return Err(format!("'{name}' names no command"));
            }
            let program = words.remove(0);
            Self::stdio(name, program, words)
        };
        server.check_name()?;
        Ok(server)
    }

    fn check_name(&self) -> Result<(), String> {
        if is_identifier(&self.name) {
            Ok(())
        } else {
            Err(format!(
                "MCP server name '{}' must be letters, digits and '_', not starting with a digit: it prefixes its tools' names",
                self.name
            ))
        }
    }

    /// The same server with a header sent on every HTTP request (an authorization
    /// token): the host's secret, never shown to scripts or the model. Ignored for
    /// a stdio server.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Transport::Http { headers, .. } = &mut self.transport {
            headers.push((name.into(), value.into()));
        }
        self
    }

    /// The same server with another call timeout (default
    /// [`DEFAULT_MCP_CALL_TIMEOUT`]).
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The same server with another limit on starting it and listing its tools
    /// (default [`DEFAULT_MCP_CONNECT_TIMEOUT`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The same server with each call of its tool `tool` (the server's own name
    /// for it) waiting for approval; repeatable.
    pub fn needs_approval(mut self, tool: impl Into<String>) -> Self {
        match &mut self.needs_approval {
            Some(None) => {}
            Some(Some(tools)) => {
                tools.insert(tool.into());
            }
            None => self.needs_approval = Some(Some([tool.into()].into())),
        }
        self
    }

    /// The same server with every call of every tool waiting for approval.
    pub fn all_need_approval(mut self) -> Self {
        self.needs_approval = Some(None);
        self
    }

    /// The name its tools' names start with.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Connects, lists the server's tools and returns them as tools of a session,
    /// sharing this one connection. Must run inside a tokio runtime; the
    /// connection lives as long as any of the tools.
    pub async fn tools(&self) -> Result<Vec<Tool>, McpError> {
        self.check_name()
            .map_err(|message| McpError::new(&self.name, message))?;
        let client = self.connect().await?;
        let listed = tokio::time::timeout(self.connect_timeout, client.peer().list_all_tools())
            .await
            .map_err(|_| {
                self.error(format!(
                    "did not list its tools within {:?}",
                    self.connect_timeout
                ))
            })?
            .map_err(|e| self.error(format!("could not list its tools: {e}")))?;
        let connection = Arc::new(Connection {
            server: self.clone(),
            client: Mutex::new(Some(client)),
        });
        let mut tools = Vec::with_capacity(listed.len());
        let mut seen = std::collections::BTreeSet::new();
        for tool in listed {
            let Some(name) = self.local_name(&tool.name) else {
                tracing::warn!(
                    server = %self.name,
                    "an MCP tool whose name cannot be made an identifier was left out ({} characters)",
                    tool.name.chars().count()
                );
                continue;
            };
            if !seen.insert(name.clone()) {
                tracing::warn!(
                    server = %self.name,
                    tool = %name,
                    "an MCP tool was left out: another of the server's tools has the same name here (names are made identifiers)"
                );
                continue;
            }
            let marked = match &self.needs_approval {
                None => false,
                Some(None) => true,
                Some(Some(names)) => names.contains(tool.name.as_ref()),
            };
            let local = remote_tool(&connection, name, tool);
            tools.push(if marked {
                local.needing_approval()
            } else {
                local
            });
        }
        Ok(tools)
    }

    /// `SERVER_TOOL`, with what is not an ASCII letter, digit or `_` made `_`;
    /// `None` for a name that is empty or longer than [`MAX_TOOL_NAME_CHARS`].
    fn local_name(&self, remote: &str) -> Option<String> {
        let length = remote.chars().count();
        if length == 0 || length > MAX_TOOL_NAME_CHARS {
            return None;
        }
        let tail: String = remote
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        Some(format!("{}_{tail}", self.name))
    }

    fn error(&self, message: impl Into<String>) -> McpError {
        McpError::new(&self.name, message)
    }

    async fn connect(&self) -> Result<Client, McpError> {
        let started = async {
            match &self.transport {
                Transport::Stdio { program, args } => {
                    let process = self.spawn(program, args).await?;
                    ().serve(process)
                        .await
                        .map_err(|e| self.error(format!("did not start as an MCP server: {e}")))
                }
                Transport::Http { url, headers } => {
                    // rmcp's HTTP client needs a process-wide TLS provider; ring is
                    // the one the rest of codeact uses. One already installed (by
                    // the embedding app) is kept.
                    let _ = rustls::crypto::ring::default_provider().install_default();
                    let mut custom = std::collections::HashMap::new();
                    for (name, value) in headers {
                        let name = http::HeaderName::from_bytes(name.as_bytes())
                            .map_err(|e| self.error(format!("header name '{name}': {e}")))?;
                        let value = http::HeaderValue::from_str(value).map_err(|e| {
                            self.error(format!("the value of header '{name}': {e}"))
                        })?;
                        custom.insert(name, value);
                    }
                    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                        .custom_headers(custom);
                    ().serve(StreamableHttpClientTransport::from_config(config))
                        .await
                        .map_err(|e| self.error(format!("did not answer at {url}: {e}")))
                }
            }
        };
        tokio::time::timeout(self.connect_timeout, started)
            .await
            .map_err(|_| self.error(format!("did not start within {:?}", self.connect_timeout)))?
    }

    /// Starts a stdio server like a command tool: its own PID namespace where the
    /// system allows one, its own process group, killed when dropped.
    async fn spawn(&self, program: &str, args: &[String]) -> Result<TokioChildProcess, McpError> {
        let launcher = match pid_namespace::on_path(program) {
            Some(_) => pid_namespace::launcher().await.unwrap_or_default(),
            None => &[],
        };
        let mut argv: Vec<String> = launcher.to_vec();
        argv.push(program.to_string());
        argv.extend(args.iter().cloned());
        let mut command = Command::new(&argv[0]);
        command.args(&argv[1..]).process_group(0).kill_on_drop(true);
        TokioChildProcess::builder(command)
            .stderr(Stdio::null())
            .spawn()
            .map(|(process, _stderr)| process)
            .map_err(|e| self.error(format!("could not start '{program}': {e}")))
    }
}

type Client = RunningService<RoleClient, ()>;

/// One server's connection, shared by its tools; `None` after a failure until the
/// next call makes a new one.
struct Connection {
    server: McpServer,
    client: Mutex<Option<Client>>,
}

impl Connection {
    /// Calls `tool`, waiting at most the call timeout, and no longer than the
    /// calling script may run (`codeact_runtime::call_deadline`, read before
    /// the first wait, on the script's thread): past either the connection is
    /// dropped (a stdio server killed), so an answer that never ends is not
    /// read on.
    async fn call(&self, tool: &str, arguments: Value) -> Result<CallToolResult, ToolError> {
        let script_deadline = codeact_runtime::call_deadline::current();
        let server = &self.server;
        let peer = {
            let mut client = self.client.lock().await;
            if client.is_none() {
                *client = Some(
                    server
                        .connect()
                        .await
                        .map_err(|e| ToolError::new(e.to_string()))?,
                );
            }
            client.as_ref().map(|client| client.peer().clone())
        };
        let Some(peer) = peer else {
            return Err(ToolError::new(format!(
                "MCP server '{}' is not connected",
                server.name
            )));
        };
        let mut params = CallToolRequestParams::new(Cow::Owned(tool.to_string()));
        if let Value::Object(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let by_timeout = tokio::time::Instant::now().checked_add(server.call_timeout);
        let by_script = script_deadline.map(tokio::time::Instant::from_std);
        let script_first = match (by_script, by_timeout) {
            (Some(script), Some(timeout)) => script < timeout,
            (script, _) => script.is_some(),
        };
        let until = if script_first { by_script } else { by_timeout };
        let call = peer.call_tool(params);
        let answered = match until {
            Some(until) => tokio::time::timeout_at(until, call).await,
            None => Ok(call.await),
        };
        let failure = match answered {
            Ok(Ok(result)) => return Ok(result),
            Ok(Err(ServiceError::McpError(error))) => {
                // The server answered, with a protocol error: the connection is fine.
                return Err(ToolError::new(format!(
                    "MCP server '{}' refused the call: {}",
                    server.name, error.message
                )));
            }
            Ok(Err(error)) => format!("failed: {error}"),
            Err(_) if script_first => {
                "had not answered when the calling script's time limit passed".to_string()
            }
            Err(_) => format!("did not answer within {:?}", server.call_timeout),
        };
        // Dropping the client ends the connection in the background (a stdio
        // server gets the MCP shutdown: stdin closed, then SIGTERM, then a kill);
        // the call does not wait for it, and the next call starts afresh.
        drop(self.client.lock().await.take());
        Err(ToolError::new(format!(
            "MCP server '{}' {failure}; the host reconnects on the next call",
            server.name
        )))
    }
}

/// A tool of `connection`'s server as a session's tool named `name`.
fn remote_tool(connection: &Arc<Connection>, name: String, tool: rmcp::model::Tool) -> Tool {
    let remote = tool.name.to_string();
    let parameters = Value::Object((*tool.input_schema).clone());
    let output_schema = tool
        .output_schema
        .as_ref()
        .map(|schema| Value::Object((**schema).clone()));
    let description = tool
        .description
        .as_deref()
        .unwrap_or_default()
        .trim()
        .to_string();
    // A schema that does not compile, or is too costly to check (see
    // `schema_budget`), is the server's problem, not the call's: the server
    // checks the arguments itself then.
    let inputs = BudgetedSchema::compile(&parameters).ok().map(Arc::new);
    let outputs = output_schema
        .as_ref()
        .and_then(|schema| BudgetedSchema::compile(schema).ok())
        .map(Arc::new);
    let server = connection.server.name.clone();
    let connection = Arc::clone(connection);
    let tool = Tool::new(name, description, move |args: Value| {
        let connection = Arc::clone(&connection);
        let remote = remote.clone();
        let inputs = inputs.clone();
        let outputs = outputs.clone();
        async move {
            if let Some(inputs) = &inputs {
                inputs.first_error(&args).map_err(|error| {
                    ToolError::new(format!(
                        "the arguments do not match the tool's schema {error}"
                    ))
                })?;
            }
            let result = connection.call(&remote, args).await?;
            script_value(&connection.server.name, result, outputs.as_deref())
        }
    })
    .with_parameters(parameters)
    .with_untrusted_description()
    .in_namespace(&server);
    match output_schema {
        Some(schema) => tool.with_returns(schema),
        None => tool,
    }
}

/// What the script gets from a result (see the module's documentation).
fn script_value(
    server: &str,
    result: CallToolResult,
    outputs: Option<&BudgetedSchema>,
) -> Result<Value, ToolError> {
    let blocks: Vec<Value> = result
        .content
        .iter()
        .map(|block| serde_json::to_value(block).unwrap_or(Value::Null))
        .collect();
    if result.is_error == Some(true) {
        let text: Vec<&str> = blocks
            .iter()
            .filter_map(|block| block.get("text").and_then(Value::as_str))
            .collect();
        let message = if text.is_empty() {
            "the tool failed and said nothing more".to_string()
        } else {
            text.join("\n")
        };
        return Err(ToolError::new(message));
    }
    // `"structuredContent": null` (some servers send it) is no structured content.
    let value = match result.structured_content.filter(|value| !value.is_null()) {
        Some(structured) => {
            if let Some(Err(error)) = outputs.map(|outputs| outputs.first_error(&structured)) {
                return Err(ToolError::new(format!(
                    "MCP server '{server}' answered wrongly: its result does not match the tool's output schema {error}"
                )));
            }
            structured
        }
        None => {
            let mut values: Vec<Value> = blocks.iter().map(block_value).collect();
            match values.len() {
                0 => Value::Null,
                1 => values.remove(0),
                _ => Value::Array(values),
            }
        }
    };
    let size = usize::try_from(codeact_runtime::text::json_len(&value)).unwrap_or(usize::MAX);
    if size > MAX_MCP_RESULT_BYTES {
        return Err(ToolError::new(format!(
            "MCP server '{server}' answered with {size} bytes, more than the {MAX_MCP_RESULT_BYTES} a script may receive"
        )));
    }
    Ok(value)
}

/// One content block as a script sees it: text (parsed when it is JSON), or a
/// description of what it cannot read.
fn block_value(block: &Value) -> Value {
    let kind = block
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    match kind {
        "text" => {
            let text = block
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or_default();
            serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
        }
        "image" | "audio" => {
            let encoded = block
                .get("data")
                .and_then(Value::as_str)
                .unwrap_or_default();
            json!({
                "type": kind,
                "mime_type": block.get("mimeType").cloned().unwrap_or(Value::Null),
                "bytes": encoded.len() / 4 * 3,
                "note": format!("the host received this {kind}; a script cannot read it"),
            })
        }
        "resource" => {
            let resource = block.get("resource").cloned().unwrap_or(Value::Null);
            match resource.get("text").and_then(Value::as_str) {
                Some(text) => json!({
                    "type": "resource",
                    "uri": resource.get("uri").cloned().unwrap_or(Value::Null),
                    "text": text,
                }),
                None => json!({
                    "type": "resource",
                    "uri": resource.get("uri").cloned().unwrap_or(Value::Null),
                    "mime_type": resource.get("mimeType").cloned().unwrap_or(Value::Null),
                    "note": "the host received this binary resource; a script cannot read it",
                }),
            }
        }
        "resource_link" => json!({
            "type": "resource_link",
            "uri": block.get("uri").cloned().unwrap_or(Value::Null),
            "name": block.get("name").cloned().unwrap_or(Value::Null),
        }),
        other => json!({"type": other, "note": "a content type the host does not know"}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_names_a_command_or_a_url() {
        let stdio = McpServer::parse("time = uvx mcp-server-time --local-timezone 'Europe/Paris'")
            .expect("valid");
        assert_eq!(stdio.name(), "time");
        assert!(matches!(
            &stdio.transport,
            Transport::Stdio { program, args } if program == "uvx" && args == &["mcp-server-time", "--local-timezone", "Europe/Paris"]
        ));
        let http = McpServer::parse("docs=https://example.com/mcp").expect("valid");
        assert!(
            matches!(&http.transport, Transport::Http { url, .. } if url == "https://example.com/mcp")
        );
        for bad in [
            "nothing",
            "x=",
            "my-server=cmd",
            "1st=cmd",
            "q=cmd 'unclosed",
        ] {
            assert!(McpServer::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn header_values_never_show_in_debug_output() {
        let server = McpServer::http("api", "https://example.com/mcp")
            .header("Authorization", "Bearer s3cret");
        let shown = format!("{server:?}");
        assert!(shown.contains("Authorization"), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn tool_names_are_prefixed_by_the_server_and_made_identifiers() {
        let server = McpServer::stdio("github", "x", Vec::<String>::new());
        let name = |remote: &str| server.local_name(remote);
        assert_eq!(name("create-issue").as_deref(), Some("github_create_issue"));
        assert_eq!(name("a.b/c").as_deref(), Some("github_a_b_c"));
        assert_eq!(name("café").as_deref(), Some("github_caf_"));
        assert_eq!(name(""), None);
        assert_eq!(name(&"x".repeat(129)), None);
    }

    fn result(content: Vec<Value>, structured: Option<Value>, is_error: bool) -> CallToolResult {
        serde_json::from_value(json!({
            "content": content,
            "structuredContent": structured,
            "isError": is_error,
        }))
        .expect("a CallToolResult")
    }

    #[test]
    fn structured_content_wins_then_json_text_then_text() {
        let both = result(
            vec![json!({"type": "text", "text": "{\"a\": 1}"})],
            Some(json!({"b": 2})),
            false,
        );
        assert_eq!(script_value("s", both, None), Ok(json!({"b": 2})));
        let json_text = result(vec![json!({"type": "text", "text": "[1, 2]"})], None, false);
        assert_eq!(script_value("s", json_text, None), Ok(json!([1, 2])));
        let text = result(vec![json!({"type": "text", "text": "hello"})], None, false);
        assert_eq!(script_value("s", text, None), Ok(json!("hello")));
        let two = result(
            vec![
                json!({"type": "text", "text": "1"}),
                json!({"type": "text", "text": "x"}),
            ],
            None,
            false,
        );
        assert_eq!(script_value("s", two, None), Ok(json!([1, "x"])));
        assert_eq!(
            script_value("s", result(vec![], None, false), None),
            Ok(Value::Null)
        );
    }

    #[test]
    fn an_image_is_described_not_dropped() {
        let image = result(
            vec![json!({"type": "image", "data": "AAAA", "mimeType": "image/png"})],
            None,
            false,
        );
        let value = script_value("s", image, None).expect("a value");
        assert_eq!(value["type"], "image");
        assert_eq!(value["mime_type"], "image/png");
        assert_eq!(value["bytes"], 3);
    }

    #[test]
    fn an_error_result_is_a_tool_error_with_the_servers_message() {
        let failed = result(
            vec![json!({"type": "text", "text": "no such repo"})],
            None,
            true,
        );
        assert_eq!(
            script_value("s", failed, None),
            Err(ToolError::new("no such repo"))
        );
    }

    #[test]
    fn a_result_against_the_output_schema_is_refused() {
        let schema =
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
        let validator = BudgetedSchema::compile(&schema).expect("schema compiles");
        let wrong = result(vec![], Some(json!({"n": "seven"})), false);
        let err = script_value("s", wrong, Some(&validator)).expect_err("refused");
        assert!(
            err.message.contains("MCP server 's' answered wrongly"),
            "{}",
            err.message
        );
        assert!(err.message.contains("/n"), "{}", err.message);
        let right = result(vec![], Some(json!({"n": 7})), false);
        assert_eq!(
            script_value("s", right, Some(&validator)),
            Ok(json!({"n": 7}))
        );
    }
}
