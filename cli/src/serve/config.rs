//! The server's config file: who may call it (bearer tokens), which agents it
//! offers (team files, read with [`load_team`]), and the limits every run gets.
//! Clients choose among these names; nothing in a request can add a tool, a
//! command, a mount, a host or a higher limit.
//!
//! ```toml
//! [server]
//! max_body_kib = 64          # a request body past this is refused (413); default 64
//! max_task_chars = 16000     # a task or message past this is refused (400); default 16,000
//! max_queued = 1000          # runs queued or running at once, all tokens; default 1,000
//! max_queued_per_token = 100 # the same, per token; default 100 (past either: 429)
//! max_connections = 512      # connections served at once; more wait to be accepted; default 512
//! header_timeout_ms = 10000  # a request's headers (or an idle keep-alive's next) within this, else closed; default 10,000
//! body_timeout_ms = 30000    # a request's body within this of its headers, else 408; default 30,000
//!
//! [worker]                   # `codeact worker` and `serve --work` on PostgreSQL
//! concurrency = 4            # runs one process works on at once; default 4
//! lease_ms = 30000           # a run's lease, renewed every third of it; default 30,000 (at least 300)
//! poll_ms = 1000             # how often an idle worker looks without a notice; default 1,000
//! shutdown_grace_ms = 10000  # at SIGTERM, how long runs may finish before being handed back; default 10,000
//!
//! [telemetry]                # OTLP/HTTP export of traces and metrics; see `telemetry`
//! endpoint = "http://127.0.0.1:4318" # default: none (then OTEL_EXPORTER_OTLP_ENDPOINT, else no export)
//! service_name = "codeact"   # default: codeact (then OTEL_SERVICE_NAME)
//!
//! [limits]                   # every script of every run; default: `Limits::default()`
//! timeout_ms = 5000         # the script's own time; waits on tools do not count
//! total_timeout_ms = 60000   # all of a run, waits on tools included; default 60,000
//! max_operations = 10000000
//! max_memory_mb = 64
//! tool_timeout_ms = 30000    # a command tool is killed after this; default 30,000
//!
//! [[token]]
//! name = "alice"             # runs are attributed to this name
//! token_env = "ALICE_TOKEN"  # the secret, from the environment (or `token = "…"`)
//! admin = false              # an admin sees every tenant's runs; default false
//!
//! [[agent]]
//! name = "demo"              # what a client names in `POST /runs`
//! team = "serve/demo.toml"   # a team file, as `codeact run --agents` reads it
//! entry = "triage"           # the agent that starts; default: the file's entry, else its first
//! description = "Answers."   # shown by `GET /agents`; default: the entry agent's
//! shared_workdir = false     # every run in the team file's `[files] workdir` itself,
//!                            # rather than in a folder of its own there; default false
//! ```
//!
//! Relative paths are read from the config file's folder.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use codeact_runtime::Limits;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::connections::ConnectionLimits;
use super::store::QueueLimits;
use codeact::agent::load_team;

/// Default cap on a request body: 64 KiB.
pub(crate) const DEFAULT_MAX_BODY_BYTES: usize = 64 << 10;
/// Default cap on a task or a chat message: 16,000 characters.
pub(crate) const DEFAULT_MAX_TASK_CHARS: usize = 16_000;
/// Default time a command tool may take: 30 s, as `codeact run`.
const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(30);
/// Default cap on runs queued or running at once, all tokens together: 1,000.
const DEFAULT_MAX_QUEUED: u32 = 1_000;
/// Default cap on runs queued or running at once for one token: 100.
const DEFAULT_MAX_QUEUED_PER_TOKEN: u32 = 100;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    server: ServerEntry,
    #[serde(default)]
    limits: LimitsEntry,
    #[serde(default)]
    worker: WorkerEntry,
    /// Read on its own before the rest ([`super::telemetry::read_entry`]);
    /// here so the file is checked whole.
    #[serde(default)]
    #[allow(dead_code)]
    telemetry: super::telemetry::TelemetryEntry,
    #[serde(rename = "token", default)]
    tokens: Vec<TokenEntry>,
    #[serde(rename = "agent", default)]
    agents: Vec<AgentEntry>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerEntry {
    max_body_kib: Option<usize>,
    max_task_chars: Option<usize>,
    max_queued: Option<u32>,
    max_queued_per_token: Option<u32>,
    max_connections: Option<u32>,
    header_timeout_ms: Option<u64>,
    body_timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkerEntry {
    concurrency: Option<usize>,
    lease_ms: Option<u64>,
    poll_ms: Option<u64>,
    shutdown_grace_ms: Option<u64>,
}

/// How a worker takes and holds runs (PostgreSQL stores).
#[derive(Debug, Clone)]
pub(crate) struct WorkerSettings {
    /// Runs one process works on at once. Default: 4.
    pub concurrency: usize,
    /// How long a claimed run stays a worker's without a heartbeat; a heartbeat
    /// renews it every third of it, so a dead worker's runs are taken over after
    /// at most this long. Default: 30 s.
    pub lease: Duration,
    /// How often an idle worker looks for work when no notice woke it (notices
    /// are hints: a missed one costs this much delay). Default: 1 s.
    pub poll: Duration,
    /// At SIGTERM: how long the runs going on may take to finish before they are
    /// handed back to the queue for another worker. Default: 10 s.
    pub shutdown_grace: Duration,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsEntry {
    timeout_ms: Option<u64>,
    total_timeout_ms: Option<u64>,
    max_operations: Option<u64>,
    max_memory_mb: Option<u64>,
    tool_timeout_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    name: String,
    token: Option<String>,
    token_env: Option<String>,
    #[serde(default)]
    admin: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentEntry {
    name: String,
    team: PathBuf,
    entry: Option<String>,
    description: Option<String>,
    #[serde(default)]
    shared_workdir: bool,
}

/// A caller the config knows: the name its runs carry, and whether it sees all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Caller {
    pub name: String,
    pub admin: bool,
}

/// A token, kept only as its SHA-256 so the comparison takes the same time
/// whatever the guess.
struct Token {
    digest: [u8; 32],
    caller: Caller,
}

/// An agent clients may start: a team file and where it starts.
#[derive(Debug, Clone)]
pub(crate) struct OfferedAgent {
    pub team: PathBuf,
    pub entry: String,
    pub description: String,
    /// The file declares one agent: runs are single-agent runs, which can wait
    /// for approvals and hold conversations. With several, a team run.
    pub single: bool,
    /// Every run works in the team file's `[files] workdir` itself, seeing the
    /// others' files; by default each run has a folder of its own there.
    pub shared_workdir: bool,
}

/// The server's config, checked: every team file loaded once at start, so a
/// broken one is an error before the server listens.
pub(crate) struct ServeConfig {
    tokens: Vec<Token>,
    pub agents: BTreeMap<String, OfferedAgent>,
    pub limits: Limits,
    pub tool_timeout: Duration,
    pub max_body_bytes: usize,
    pub max_task_chars: usize,
    pub queue: QueueLimits,
    pub worker: WorkerSettings,
    /// How many connections are served at once and how long a request may take
    /// to arrive (`[server]`: `max_connections`, `header_timeout_ms`,
    /// `body_timeout_ms`); defaults in [`ConnectionLimits`].
    pub connections: ConnectionLimits,
}

impl std::fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeConfig")
            .field("tokens", &self.tokens.len())
            .field("agents", &self.agents.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl ServeConfig {
    /// Reads and checks the config at `path`; the error names the file and the
    /// problem.
    pub(crate) fn load(path: &Path) -> Result<Self, String> {
        let invalid = |message: String| format!("'{}': {message}", path.display());
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read '{}': {e}", path.display()))?;
        let file: ConfigFile =
            toml::from_str(&text).map_err(|e| invalid(e.to_string().trim().to_string()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut limits = Limits::default();
        if let Some(ms) = file.limits.timeout_ms {
            limits.wall_time = Duration::from_millis(ms.max(1));
        }
        if let Some(ms) = file.limits.total_timeout_ms {
            limits.max_total_time = Duration::from_millis(ms.max(1));
        }
        if let Some(ops) = file.limits.max_operations {
            limits.max_operations = ops.max(1);
        }
        if let Some(mb) = file.limits.max_memory_mb {
            limits.max_memory_bytes = usize::try_from(mb.max(1) << 20).unwrap_or(usize::MAX);
        }
        let tool_timeout = file
            .limits
            .tool_timeout_ms
            .map_or(DEFAULT_TOOL_TIMEOUT, |ms| Duration::from_millis(ms.max(1)));

        if file.tokens.is_empty() {
            return Err(invalid(
                "declares no [[token]]: every request needs one".into(),
            ));
        }
        let mut tokens: Vec<Token> = Vec::new();
        for entry in file.tokens {
            let secret = match (entry.token, entry.token_env) {
                (Some(secret), None) => secret,
                (None, Some(var)) => std::env::var(&var).map_err(|_| {
                    invalid(format!(
                        "token '{}': the environment variable {var} is not set",
                        entry.name
                    ))
                })?,
                _ => {
                    return Err(invalid(format!(
                        "token '{}' needs exactly one of `token` and `token_env`",
                        entry.name
                    )));
                }
            };
            if secret.trim().len() < 8 {
                return Err(invalid(format!(
                    "token '{}' is shorter than 8 characters",
                    entry.name
                )));
            }
            if entry.name.trim().is_empty() {
                return Err(invalid("a token has an empty name".into()));
            }
            let digest = digest(&secret);
            if tokens
                .iter()
                .any(|t| t.digest == digest || t.caller.name == entry.name)
            {
                return Err(invalid(format!(
                    "token '{}' repeats another token's name or secret",
                    entry.name
                )));
            }
            tokens.push(Token {
                digest,
                caller: Caller {
                    name: entry.name,
                    admin: entry.admin,
                },
            });
        }

        if file.agents.is_empty() {
            return Err(invalid("declares no [[agent]]".into()));
        }
        let mut agents = BTreeMap::new();
        for entry in file.agents {
            let team = if entry.team.is_absolute() {
                entry.team.clone()
            } else {
                base.join(&entry.team)
            };
            let loaded = load_team(&team, &limits, tool_timeout, |builder| builder)
                .map_err(|e| invalid(format!("agent '{}': {e}", entry.name)))?;
            let names = loaded.builder.agent_names();
            let start = entry
                .entry
                .clone()
                .or(loaded.entry.clone())
                .unwrap_or(loaded.first.clone());
            if !names.contains(&start) {
                return Err(invalid(format!(
                    "agent '{}': its team has no agent '{start}' (it has: {})",
                    entry.name,
                    names.join(", ")
                )));
            }
            let offered = OfferedAgent {
                team,
                description: entry
                    .description
                    .unwrap_or_else(|| loaded.builder.description_of(&start)),
                single: names.len() == 1,
                shared_workdir: entry.shared_workdir,
                entry: start,
            };
            if agents.insert(entry.name.clone(), offered).is_some() {
                return Err(invalid(format!("two agents are named '{}'", entry.name)));
            }
        }
        let worker = WorkerSettings {
            concurrency: file.worker.concurrency.unwrap_or(4).clamp(1, 1024),
            lease: Duration::from_millis(file.worker.lease_ms.unwrap_or(30_000).max(300)),
            poll: Duration::from_millis(file.worker.poll_ms.unwrap_or(1_000).max(10)),
            shutdown_grace: Duration::from_millis(file.worker.shutdown_grace_ms.unwrap_or(10_000)),
        };
        let queue = QueueLimits {
            total: file.server.max_queued.unwrap_or(DEFAULT_MAX_QUEUED).max(1),
            per_tenant: file
                .server
                .max_queued_per_token
                .unwrap_or(DEFAULT_MAX_QUEUED_PER_TOKEN)
                .max(1),
        };
        let defaults = ConnectionLimits::default();
        let connections = ConnectionLimits {
            max_connections: file
                .server
                .max_connections
                .unwrap_or(defaults.max_connections)
                .max(1),
            header_timeout: file
                .server
                .header_timeout_ms
                .map_or(defaults.header_timeout, |ms| {
                    Duration::from_millis(ms.max(1))
                }),
            body_timeout: file
                .server
                .body_timeout_ms
                .map_or(defaults.body_timeout, |ms| Duration::from_millis(ms.max(1))),
        };
        Ok(Self {
            tokens,
            agents,
            limits,
            tool_timeout,
            queue,
            worker,
            connections,
            max_body_bytes: file
                .server
                .max_body_kib
                .map_or(DEFAULT_MAX_BODY_BYTES, |kib| kib.max(1) << 10),
            max_task_chars: file
                .server
                .max_task_chars
                .unwrap_or(DEFAULT_MAX_TASK_CHARS)
                .max(1),
        })
    }

    /// The caller holding `secret`, if any. Every configured token is compared,
    /// each in constant time, so neither which nor how much of one matched shows
    /// in the time taken.
    pub(crate) fn caller(&self, secret: &str) -> Option<Caller> {
        let presented = digest(secret);
        let mut found = None;
        for token in &self.tokens {
            let differs = token
                .digest
                .iter()
                .zip(presented.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            if differs == 0 {
                found = Some(token.caller.clone());
            }
        }
        found
    }
}

fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}
