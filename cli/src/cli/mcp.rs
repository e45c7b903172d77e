//! `codeact mcp`: codeact's sandboxes served to MCP clients over stdio, or over
//! streamable HTTP with `--listen`, through `rmcp`'s server side. A client gets four tools: `run_script {runtime, code,
//! session?}`, `new_session {runtime}`, `close_session {session}` and
//! `list_runtimes`. Everything else is the operator's, fixed on the command line:
//! the limits of every run (a client cannot pass any), the runtimes a client may
//! pick (built-in ones only, never a guest file's path), the tools scripts may call,
//! how many sessions may be open and how long an idle one lives.
//!
//! Over HTTP every client has its own MCP session (rmcp's, opened by `initialize`)
//! and a handler of its own ([`Sandboxes`]); the script sessions a client opens
//! are that client's. How many clients may be connected, how many connections
//! are served and how long a request may take to arrive are capped too
//! (`--max-clients`, and [`crate::serve::connections`] as for `codeact serve`).

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use clap::Args;
use codeact_runtime::{Limits, Runtime};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
    Implementation, InitializeRequestParams, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};
use tokio::sync::Mutex;

use super::{EXIT_HOST_FAILURE, LimitArgs, ToolArgs, host_runtime, usage_error};
use crate::serve::connections::{self, ConnectionLimits};
use codeact::exec::ScriptSession;
use codeact::exec::{OPT_IN_RUNTIMES, RUNTIME_NAMES, runtime_by_name};
use codeact::tools::ToolBox;

/// The longest script a client may send. Default: 256 KiB.
const MAX_SCRIPT_BYTES: usize = 256 << 10;

#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// The runtimes a client may pick, comma-separated [default: every built-in
    /// runtime but the opt-in ones (js-in-process, wasm:micropython,
    /// wasm:python-sci)].
    #[arg(long = "runtimes", value_name = "NAMES", value_delimiter = ',')]
    runtimes: Vec<String>,
    /// The most script sessions open at once, all clients together; a client
    /// asking for more is told to close one.
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..))]
    max_sessions: u64,
    /// Close a script session nobody used for this many seconds. With --listen,
    /// a client's MCP session that carried no message for this long plus a run's
    /// time limit (so a run in progress is not cut) is closed too, with its
    /// script sessions, freeing its place under --max-clients.
    #[arg(long, value_name = "SECONDS", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    idle_timeout: u64,
    /// Serve streamable HTTP at http://ADDR/mcp instead of stdio. Every request
    /// must carry `Authorization: Bearer $CODEACT_MCP_TOKEN` when that variable is
    /// set, and it must be set for an address that is not loopback.
    #[arg(long, value_name = "ADDR")]
    listen: Option<std::net::SocketAddr>,
    /// With --listen: the most clients connected at once, each an MCP session
    /// (one per `initialize`, until the client deletes it or it idles out, see
    /// --idle-timeout). Past it `initialize` is refused with an error saying so.
    /// Every client holds the one token, so this is also the cap per token.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    max_clients: u64,
    /// With --listen: the most connections served at once; more wait, not
    /// accepted, until one closes.
    #[arg(long, value_name = "N", default_value_t = connections::DEFAULT_MAX_CONNECTIONS, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
    /// With --listen: how long a client may take to send a request's headers, in
    /// milliseconds, from when it connects or its previous answer ended (so also
    /// how long an idle connection stays open); past it the connection is closed.
    #[arg(long, value_name = "MS", default_value_t = connections::DEFAULT_HEADER_TIMEOUT.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..))]
    header_timeout_ms: u64,
    /// With --listen: how long a client may take to send a request's body, in
    /// milliseconds from its headers; past it the request is answered 408.
    #[arg(long, value_name = "MS", default_value_t = connections::DEFAULT_BODY_TIMEOUT.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..))]
    body_timeout_ms: u64,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    tools: ToolArgs,
    /// Who decides on calls of tools that need approval ("approval": true in a
    /// tools manifest): ask (a prompt on the operator's terminal), allow or deny
    /// [default: deny]. A denied call throws a tool error the client's script
    /// can catch.
    #[arg(long, value_name = "MODE", value_parser = ["ask", "allow", "deny"], default_value = "deny")]
    approve: String,
}

/// The environment variable holding the bearer token of `--listen`.
const TOKEN_VARIABLE: &str = "CODEACT_MCP_TOKEN";

/// Serves until the client closes stdin.
pub(crate) fn serve(args: &McpArgs) -> ExitCode {
    let runtimes: Vec<String> = if args.runtimes.is_empty() {
        RUNTIME_NAMES
            .iter()
            .filter(|name| {
                // In-process JavaScript has no memory cap: not for clients by default.
                **name != "js-in-process"
                    && !OPT_IN_RUNTIMES.iter().any(|(opt_in, _)| opt_in == *name)
            })
            .map(|name| (*name).to_string())
            .collect()
    } else {
        args.runtimes.clone()
    };
    let limits = args.limits.limits();
    let mut built: HashMap<String, Arc<dyn Runtime>> = HashMap::new();
    for name in &runtimes {
        if !RUNTIME_NAMES.contains(&name.as_str()) {
            return usage_error(&format!(
                "--runtimes: '{name}' is not a built-in runtime ({})",
                RUNTIME_NAMES.join(", ")
            ));
        }
        match runtime_by_name(name, limits.clone()) {
            Ok(runtime) => built.insert(name.clone(), runtime),
            Err(e) => return usage_error(&format!("--runtimes: {e}")),
        };
    }
    let host = match host_runtime() {
        Ok(host) => host,
        Err(code) => return code,
    };
    let tools = match args
        .tools
        .tools(&host)
        .and_then(|tools| ToolBox::new(tools).map_err(|e| format!("--tool: {e}")))
    {
        Ok(tools) => Arc::new(tools.approved_by(super::approve::approver(Some(&args.approve)))),
        Err(e) => return usage_error(&e),
    };
    let shared = Arc::new(Shared {
        runtimes: built,
        order: runtimes,
        limits,
        tools,
        sessions: std::sync::Mutex::new(HashMap::new()),
        starting: Mutex::new(()),
        next_id: AtomicU64::new(1),
        max_sessions: usize::try_from(args.max_sessions).unwrap_or(usize::MAX),
        idle_timeout: Duration::from_secs(args.idle_timeout),
        next_client: AtomicU64::new(1),
        clients: AtomicUsize::new(0),
        max_clients: usize::try_from(args.max_clients).unwrap_or(usize::MAX),
    });
    let served = match args.listen {
        None => host.block_on(async {
            let running = Sandboxes::new(shared)
                .serve(rmcp::transport::stdio())
                .await?;
            running.waiting().await?;
            Ok::<(), Box<dyn std::error::Error>>(())
        }),
        Some(address) => {
            let token = std::env::var(TOKEN_VARIABLE).ok().filter(|t| !t.is_empty());
            if token.is_none() && !address.ip().is_loopback() {
                return usage_error(&format!(
                    "--listen {address} is not a loopback address: set {TOKEN_VARIABLE} so clients must present it"
                ));
            }
            let limits = ConnectionLimits {
                max_connections: args.max_connections,
                header_timeout: Duration::from_millis(args.header_timeout_ms),
                body_timeout: Duration::from_millis(args.body_timeout_ms),
            };
            host.block_on(serve_http(shared, address, token, limits))
        }
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("codeact mcp: {e}");
            ExitCode::from(EXIT_HOST_FAILURE)
        }
    }
}

/// Serves over streamable HTTP at `address`, path `/mcp`, a handler of its own
/// to each client, until the process ends; with a `token`, a request without it
/// gets 401. A client's MCP session is closed once idle past the idle timeout
/// plus a run's time limit (rmcp counts a run in progress as idle).
async fn serve_http(
    shared: Arc<Shared>,
    address: std::net::SocketAddr,
    token: Option<String>,
    limits: ConnectionLimits,
) -> Result<(), Box<dyn std::error::Error>> {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let mut config = StreamableHttpServerConfig::default();
    if !address.ip().is_loopback() {
        // rmcp accepts only loopback `Host`s by default (against DNS rebinding);
        // an operator who listens beyond loopback protects it with the token.
        config.allowed_hosts.clear();
    }
    let mut sessions = LocalSessionManager::default();
    // A run may last its total time (its own time stops while it waits on tools).
    sessions.session_config.keep_alive = Some(shared.idle_timeout + shared.limits.max_total_time);
    let service = StreamableHttpService::new(
        move || Ok(Sandboxes::new(Arc::clone(&shared))),
        sessions.into(),
        config,
    );
    let expected = token.map(|token| format!("Bearer {token}"));
    let router =
        axum::Router::new()
            .nest_service("/mcp", service)
            .layer(axum::middleware::from_fn(
                move |request: axum::extract::Request, next: axum::middleware::Next| {
                    let allowed = match &expected {
                        None => true,
                        Some(expected) => request
                            .headers()
                            .get(axum::http::header::AUTHORIZATION)
                            .is_some_and(|value| {
                                same_secret(value.as_bytes(), expected.as_bytes())
                            }),
                    };
                    async move {
                        if allowed {
                            next.run(request).await
                        } else {
                            axum::response::IntoResponse::into_response(
                                axum::http::StatusCode::UNAUTHORIZED,
                            )
                        }
                    }
                },
            ));
    let listener = tokio::net::TcpListener::bind(address).await?;
    eprintln!("codeact mcp: serving http://{}/mcp", listener.local_addr()?);
    connections::serve(
        listener,
        router,
        limits,
        tokio_util::sync::CancellationToken::new(),
    )
    .await;
    Ok(())
}

/// Whether `given` is `expected`, in time that does not depend on where they
/// first differ (a client cannot find the token byte by byte by timing).
fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    let mut difference = given.len() ^ expected.len();
    for (i, byte) in expected.iter().enumerate() {
        difference |= usize::from(byte ^ given.get(i).copied().unwrap_or(0));
    }
    difference == 0
}

/// One open session: its runtime's name, the session, when it was last used.
struct Open {
    runtime: String,
    session: ScriptSession,
    used: Instant,
}

/// An open script session and the client that opened it, the only one that may
/// use or close it.
struct Owned {
    client: u64,
    open: Arc<Mutex<Open>>,
}

/// What every client of this server shares: the operator's runtimes, limits and
/// tools, and all clients' script sessions under one cap.
struct Shared {
    runtimes: HashMap<String, Arc<dyn Runtime>>,
    /// The runtimes' names in the operator's order.
    order: Vec<String>,
    limits: Limits,
    tools: Arc<ToolBox>,
    /// Every client's open script sessions, by id. Held only for lookups and
    /// bookkeeping, never across a run or a session's start.
    sessions: std::sync::Mutex<HashMap<String, Owned>>,
    /// Taken while a session starts, so the cap is checked and taken at once
    /// (only starting a session adds one).
    starting: Mutex<()>,
    next_id: AtomicU64,
    max_sessions: usize,
    idle_timeout: Duration,
    next_client: AtomicU64,
    /// Clients whose `initialize` was answered and that are still connected.
    clients: AtomicUsize,
    max_clients: usize,
}

impl Shared {
    fn sessions(&self) -> MutexGuard<'_, HashMap<String, Owned>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new session's id, `s<n>-<64 random bits>`: unique, and not worth
    /// guessing (a session answers only the client that opened it anyway).
    fn session_id(&self) -> String {
        use std::hash::BuildHasher;
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let random = std::collections::hash_map::RandomState::new().hash_one((n, Instant::now()));
        format!("s{n}-{random:016x}")
    }

    /// Closes sessions idle past the timeout, any client's; a session in use is
    /// never closed.
    fn expire(&self) {
        self.close_where(|owned| {
            owned
                .open
                .try_lock()
                .is_ok_and(|open| open.used.elapsed() > self.idle_timeout)
        });
    }

    /// Closes every session `closing` picks; they end after the map's lock is
    /// given back.
    fn close_where(&self, closing: impl Fn(&Owned) -> bool) {
        let closed: Vec<Owned> = self
            .sessions()
            .extract_if(|_, owned| closing(owned))
            .map(|(_, owned)| owned)
            .collect();
        drop(closed);
    }
}

/// The MCP error code of an `initialize` refused because the server serves as
/// many clients as it allows (in JSON-RPC's range for server errors).
const TOO_MANY_CLIENTS: ErrorCode = ErrorCode(-32000);

/// codeact's tools as one client sees them. Over stdio there is one; over HTTP
/// rmcp makes one for each MCP session (each `initialize`), and drops it when the
/// session ends, deleted by the client or idle past its time. The script
/// sessions it opens are its client's own: another client naming one is told
/// there is no such session, as if it did not exist. When it goes, its script
/// sessions close and its place under `--max-clients` frees.
struct Sandboxes {
    shared: Arc<Shared>,
    /// Which client, for the sessions it owns.
    client: u64,
    /// Whether its `initialize` was answered, taking a place among the clients.
    /// A request of the stateless protocol (2026-07-28) gets a handler of its
    /// own, never initialized, that lives for that request only.
    admitted: AtomicBool,
}

impl Drop for Sandboxes {
    fn drop(&mut self) {
        if self.admitted.load(Ordering::Acquire) {
            self.shared.clients.fetch_sub(1, Ordering::AcqRel);
        }
        self.shared.close_where(|owned| owned.client == self.client);
    }
}

/// A refusal the client reads: a tool result with `isError`.
fn refused(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

fn answer(value: Value) -> CallToolResult {
    let mut result = CallToolResult::structured(value);
    result.is_error = Some(false);
    result
}

impl Sandboxes {
    /// A handler for a new client.
    fn new(shared: Arc<Shared>) -> Self {
        let client = shared.next_client.fetch_add(1, Ordering::Relaxed);
        Self {
            shared,
            client,
            admitted: AtomicBool::new(false),
        }
    }

    /// Takes a place among the connected clients, or says there is none left.
    fn admit(&self) -> Result<(), ErrorData> {
        if self.admitted.load(Ordering::Acquire) {
            return Ok(());
        }
        let max = self.shared.max_clients;
        self.shared
            .clients
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .map_err(|n| {
                ErrorData::new(
                    TOO_MANY_CLIENTS,
                    format!(
                        "{n} clients are connected, the most this server serves (--max-clients): \
                         close a session you no longer use (HTTP DELETE with its Mcp-Session-Id) \
                         or try again once an idle one has expired"
                    ),
                    None,
                )
            })?;
        self.admitted.store(true, Ordering::Release);
        Ok(())
    }

    fn runtime(&self, name: Option<&str>) -> Result<(String, Arc<dyn Runtime>), String> {
        let name = name.unwrap_or("rhai");
        self.shared
            .runtimes
            .get(name)
            .map(|runtime| (name.to_string(), Arc::clone(runtime)))
            .ok_or_else(|| {
                format!(
                    "runtime '{name}' is not served here; available: {}",
                    self.shared.order.join(", ")
                )
            })
    }

    /// This client's open session `id`; another client's is as good as absent.
    fn own_session(&self, id: &str) -> Option<Arc<Mutex<Open>>> {
        self.shared
            .sessions()
            .get(id)
            .filter(|owned| owned.client == self.client)
            .map(|owned| Arc::clone(&owned.open))
    }

    async fn new_session(&self, args: &Map<String, Value>) -> CallToolResult {
        if !self.admitted.load(Ordering::Acquire) {
            return refused(
                "sessions live in an MCP session, and this request came without one \
                 (initialize first); run_script without a session still runs a script once",
            );
        }
        let (name, runtime) = match self.runtime(args.get("runtime").and_then(Value::as_str)) {
            Ok(found) => found,
            Err(message) => return refused(message),
        };
        let _starting = self.shared.starting.lock().await;
        self.shared.expire();
        let open = self.shared.sessions().len();
        if open >= self.shared.max_sessions {
            return refused(format!(
                "{open} sessions are open, the most this server allows: close one with close_session"
            ));
        }
        let session = match ScriptSession::start(&*runtime, self.shared.tools.clone()) {
            Ok(session) => session,
            Err(e) => return refused(format!("the session could not start: {e}")),
        };
        let id = self.shared.session_id();
        self.shared.sessions().insert(
            id.clone(),
            Owned {
                client: self.client,
                open: Arc::new(Mutex::new(Open {
                    runtime: name.clone(),
                    session,
                    used: Instant::now(),
                })),
            },
        );
        answer(json!({"session": id, "runtime": name}))
    }

    async fn close_session(&self, args: &Map<String, Value>) -> CallToolResult {
        let Some(id) = args.get("session").and_then(Value::as_str) else {
            return refused("close_session needs a session (the id new_session returned)");
        };
        let closed = {
            let mut sessions = self.shared.sessions();
            match sessions.get(id) {
                Some(owned) if owned.client == self.client => sessions.remove(id),
                _ => None,
            }
        };
        match closed {
            Some(_) => answer(json!({"closed": id})),
            None => refused(format!("no open session '{id}' (it may have expired)")),
        }
    }

    async fn run_script(&self, args: &Map<String, Value>) -> CallToolResult {
        self.shared.expire();
        let Some(code) = args.get("code").and_then(Value::as_str) else {
            return refused("run_script needs code (a string)");
        };
        if code.len() > MAX_SCRIPT_BYTES {
            return refused(format!(
                "the script is {} bytes, more than the {MAX_SCRIPT_BYTES} this server takes",
                code.len()
            ));
        }
        let runtime_name = args.get("runtime").and_then(Value::as_str);
        let run = match args.get("session").and_then(Value::as_str) {
            Some(id) => {
                let Some(open) = self.own_session(id) else {
                    return refused(format!(
                        "no open session '{id}' (it may have expired): start one with new_session"
                    ));
                };
                let mut open = open.lock().await;
                if let Some(name) = runtime_name.filter(|name| *name != open.runtime) {
                    return refused(format!("session '{id}' runs {}, not {name}", open.runtime));
                }
                open.used = Instant::now();
                let run = open.session.run(code).await;
                open.used = Instant::now();
                run
            }
            None => {
                let (_, runtime) = match self.runtime(runtime_name) {
                    Ok(found) => found,
                    Err(message) => return refused(message),
                };
                match ScriptSession::start(&*runtime, self.shared.tools.clone()) {
                    Ok(mut session) => session.run(code).await,
                    Err(e) => return refused(format!("the session could not start: {e}")),
                }
            }
        };
        match run {
            Ok(run) => answer(json!({
                "output": run.output,
                "printed": run.logs.render(),
            })),
            Err(e) => refused(format!("the host could not run the script: {e}")),
        }
    }

    fn list_runtimes(&self) -> CallToolResult {
        let runtimes: Vec<Value> = self
            .shared
            .order
            .iter()
            .filter_map(|name| {
                let info = self.shared.runtimes.get(name)?.info();
                Some(json!({"name": name, "language": info.language}))
            })
            .collect();
        let limits = &self.shared.limits;
        answer(json!({
            "runtimes": runtimes,
            "limits": {
                "wall_time_ms": limits.wall_time.as_millis(),
                "max_total_time_ms": limits.max_total_time.as_millis(),
                "max_operations": limits.max_operations,
                "max_memory_bytes": limits.max_memory_bytes,
            },
        }))
    }

    fn catalog(&self) -> Vec<Tool> {
        let object = |value: Value| match value {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        let runtime =
            json!({"type": "string", "enum": self.shared.order, "description": "default: rhai"});
        vec![
            Tool::new(
                "run_script",
                "Runs a script in a sandbox and returns its output ({type: final_result|observation|error|…}) and what it printed. With a session (from new_session) its variables and functions persist from call to call; without one, a fresh session runs it once.",
                object(json!({
                    "type": "object",
                    "properties": {
                        "code": {"type": "string"},
                        "runtime": runtime,
                        "session": {"type": "string"},
                    },
                    "required": ["code"],
                })),
            ),
            Tool::new(
                "new_session",
                "Starts a session whose variables and functions persist across run_script calls; returns its id. Idle sessions expire.",
                object(json!({"type": "object", "properties": {"runtime": runtime}})),
            ),
            Tool::new(
                "close_session",
                "Closes a session started with new_session.",
                object(json!({
                    "type": "object",
                    "properties": {"session": {"type": "string"}},
                    "required": ["session"],
                })),
            ),
            Tool::new(
                "list_runtimes",
                "The runtimes this server runs scripts in, and the limits every run has.",
                object(json!({"type": "object", "properties": {}})),
            ),
        ]
    }
}

impl ServerHandler for Sandboxes {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("codeact", env!("CARGO_PKG_VERSION")))
    }

    /// Answers as rmcp does, once the client has a place among the connected
    /// ones (`--max-clients`).
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        self.admit()?;
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.catalog()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let result = match request.name.as_ref() {
            "run_script" => self.run_script(&args).await,
            "new_session" => self.new_session(&args).await,
            "close_session" => self.close_session(&args).await,
            "list_runtimes" => self.list_runtimes(),
            other => refused(format!(
                "no tool '{other}'; tools: run_script, new_session, close_session, list_runtimes"
            )),
        };
        Ok(result.into())
    }
}

#[cfg(test)]
mod tests {
    use super::same_secret;

    #[test]
    fn the_token_matches_only_itself() {
        assert!(same_secret(b"Bearer abc", b"Bearer abc"));
        for other in [
            &b"Bearer abd"[..],
            b"Bearer ab",
            b"Bearer abcd",
            b"",
            b"bearer abc",
        ] {
            assert!(!same_secret(other, b"Bearer abc"), "{other:?}");
        }
    }
}
