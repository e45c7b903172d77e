//! Teams declared in a TOML file, for `codeact run --agents FILE`.
//!
//! ```toml
//! entry = "triage"            # the agent that starts; --agent overrides
//! max_transfers = 8           # defaults as in TeamBuilder
//! max_carry = 5
//! allow_transfer_back = true
//!
//! [[agent]]
//! name = "triage"
//! description = "Sorts requests."
//! instructions = "Hand billing questions to billing."
//! model = "openai:qwen"       # or anthropic:NAME, replay:FILE
//! runtime = "rhai"            # default
//! tools = "tools.json"        # a tool manifest (command tools, MCP servers), optional
//! policy = "policy.rhai"      # check_call / check_code, optional (see AgentBuilder::policy)
//! targets = ["billing"]
//! max_steps = 12              # default
//! max_refusals = 3            # default
//! coach = "plain"             # default; "small-model" for a small local model (see agent::coach)
//!
//! [agent.output]              # the agent level of the output spec
//! format = "json"
//! schema = "answer.schema.json"  # a file, or an inline table
//! validator = "answer.rhai"
//! on_validator_error = "reject"  # default; or "accept"
//!
//! [output]                    # the stage level: overrides every agent's
//! instructions = "Answer in one JSON object."
//!
//! [files]                     # one working directory the agents share, optional
//! workdir = "work"            # default: a fresh temporary one, removed at the end
//! keep = false                # keep a temporary one
//! mounts = ["data:in:ro"]     # HOST:GUEST[:ro|rw], as --mount
//! max_disk_mb = 64            # default
//! ```
//!
//! With `[files]`, every agent gets the file helpers unless it says `files =
//! false`; without it, an agent saying `files = true` gets them in a fresh
//! temporary directory.
//!
//! Relative paths (tool manifests, replay files, schemas, validators) are read
//! from the file's folder. Output specs are loaded with the team: a broken schema
//! or validator is an error naming the file before any model is called.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::agent::decide::LoopConfig;
use crate::agent::driver::Agent;
use crate::agent::team::{Team, TeamBuilder};
use crate::exec::registry::runtime_by_name;
use crate::files::{FileArea, Mount};
use crate::model::{ModelSpecError, model_from_spec};
use crate::output::spec::{OnValidatorError, OutputSpec};
use crate::prompts::TransferTarget;
#[cfg(feature = "mcp")]
use crate::tools::manifest::load_manifest_with_mcp;
#[cfg(not(feature = "mcp"))]
use crate::tools::manifest::{load_tool_manifest, refuse_mcp_servers};
use codeact_runtime::Limits;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TeamFile {
    entry: Option<String>,
    max_transfers: Option<usize>,
    max_carry: Option<usize>,
    allow_transfer_back: Option<bool>,
    output: Option<OutputEntry>,
    files: Option<FilesEntry>,
    #[serde(rename = "agent", default)]
    agents: Vec<AgentEntry>,
}

/// `[files]`: the working directory the team's agents share.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilesEntry {
    workdir: Option<PathBuf>,
    #[serde(default)]
    keep: bool,
    #[serde(default)]
    mounts: Vec<String>,
    max_disk_mb: Option<u64>,
}

impl FilesEntry {
    /// Opens the area; with `run`, a `workdir` holds one folder per run, named
    /// by it, and the run works in that.
    fn open(
        &self,
        resolve: &dyn Fn(&Path) -> PathBuf,
        run: Option<&str>,
    ) -> Result<FileArea, String> {
        let mut builder = FileArea::builder().keep(self.keep);
        if let Some(dir) = &self.workdir {
            let dir = resolve(dir);
            builder = builder.workdir(match run {
                Some(run) => dir.join(run),
                None => dir,
            });
        }
        if let Some(mb) = self.max_disk_mb {
            builder = builder.max_disk_bytes(mb.saturating_mul(1 << 20));
        }
        for spec in &self.mounts {
            let mut mount = Mount::parse(spec).map_err(|e| e.to_string())?;
            mount.host = resolve(&mount.host);
            builder = builder.mount(mount);
        }
        builder.open().map_err(|e| e.to_string())
    }
}

/// An output spec as a team file writes it: `schema` may name a file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputEntry {
    format: Option<String>,
    instructions: Option<String>,
    example: Option<String>,
    schema: Option<SchemaEntry>,
    validator: Option<PathBuf>,
    on_validator_error: Option<OnValidatorError>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum SchemaEntry {
    File(PathBuf),
    Inline(serde_json::Value),
}

impl OutputEntry {
    fn spec(&self, resolve: &dyn Fn(&Path) -> PathBuf) -> Result<OutputSpec, String> {
        let schema = match &self.schema {
            Some(SchemaEntry::File(path)) => {
                let path = resolve(path);
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("schema '{}': cannot read it: {e}", path.display()))?;
                Some(
                    serde_json::from_str(&text)
                        .map_err(|e| format!("schema '{}': not JSON: {e}", path.display()))?,
                )
            }
            Some(SchemaEntry::Inline(schema)) => Some(schema.clone()),
            None => None,
        };
        Ok(OutputSpec {
            format: self.format.clone(),
            instructions: self.instructions.clone(),
            example: self.example.clone(),
            schema,
            validator: self.validator.as_deref().map(resolve),
            on_validator_error: self.on_validator_error,
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentEntry {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    instructions: String,
    model: String,
    #[serde(default = "default_runtime")]
    runtime: String,
    tools: Option<PathBuf>,
    #[serde(default)]
    policy: Option<PathBuf>,
    #[serde(default)]
    targets: Vec<String>,
    max_steps: Option<usize>,
    max_errors: Option<usize>,
    max_refusals: Option<usize>,
    #[serde(default)]
    coach: Option<String>,
    output: Option<OutputEntry>,
    /// Whether this agent gets the file helpers; default: when the team has `[files]`.
    files: Option<bool>,
}

fn default_runtime() -> String {
    "rhai".into()
}

/// A team read from a file, and the entry agent it names (if any).
pub struct LoadedTeam {
    /// The team, not yet given its listeners.
    pub builder: TeamBuilder,
    /// `entry` from the file.
    pub entry: Option<String>,
    /// The first agent declared, the entry when none is named.
    pub first: String,
    /// The working directory of the agents given files, if any.
    pub files: Option<FileArea>,
}

/// Why a team file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TeamConfigError {
    /// The file is unreadable or malformed, or names something that does not
    /// exist: a usage error naming the file and the problem.
    #[error("{0}")]
    Invalid(String),
    /// A model client could not start (e.g. no API key).
    #[error(transparent)]
    Model(crate::model::ModelError),
}

/// Reads the team in `path`. Every agent gets `limits`, `tool_timeout` for its
/// command tools, and `configure` applied to its builder (listeners, streaming).
pub fn load_team(
    path: &Path,
    limits: &Limits,
    tool_timeout: Duration,
    configure: impl Fn(crate::agent::driver::AgentBuilder) -> crate::agent::driver::AgentBuilder,
) -> Result<LoadedTeam, TeamConfigError> {
    load(path, limits, tool_timeout, None, configure)
}

/// [`load_team`] for one run of many that share the file (a server's): a
/// `[files] workdir` holds a folder per run, named `run` (letters, digits, `_`
/// and `-` only), so no run sees another's files.
pub fn load_team_for_run(
    path: &Path,
    limits: &Limits,
    tool_timeout: Duration,
    run: &str,
    configure: impl Fn(crate::agent::driver::AgentBuilder) -> crate::agent::driver::AgentBuilder,
) -> Result<LoadedTeam, TeamConfigError> {
    let plain = !run.is_empty()
        && run
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !plain {
        return Err(TeamConfigError::Invalid(format!(
            "'{run}' cannot name a run's folder: letters, digits, '_' and '-' only"
        )));
    }
    load(path, limits, tool_timeout, Some(run), configure)
}

fn load(
    path: &Path,
    limits: &Limits,
    tool_timeout: Duration,
    run: Option<&str>,
    configure: impl Fn(crate::agent::driver::AgentBuilder) -> crate::agent::driver::AgentBuilder,
) -> Result<LoadedTeam, TeamConfigError> {
    let invalid =
        |message: String| TeamConfigError::Invalid(format!("'{}': {message}", path.display()));
    let text = std::fs::read_to_string(path)
        .map_err(|e| TeamConfigError::Invalid(format!("cannot read '{}': {e}", path.display())))?;
    let file: TeamFile =
        toml::from_str(&text).map_err(|e| invalid(e.to_string().trim().to_string()))?;
    let first = file
        .agents
        .first()
        .map(|a| a.name.clone())
        .ok_or_else(|| invalid("declares no [[agent]]".into()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let resolve = |relative: &Path| {
        if relative.is_absolute() {
            relative.to_path_buf()
        } else {
            base.join(relative)
        }
    };

    let wants_files = |entry: &AgentEntry| entry.files.unwrap_or(file.files.is_some());
    let area = if file.agents.iter().any(wants_files) {
        let temporary = FilesEntry::default();
        let entry = file.files.as_ref().unwrap_or(&temporary);
        Some(
            entry
                .open(&resolve, run)
                .map_err(|e| invalid(format!("[files]: {e}")))?,
        )
    } else {
        None
    };

    let mut builder = Team::builder();
    if let Some(n) = file.max_transfers {
        builder = builder.max_transfers(n);
    }
    if let Some(n) = file.max_carry {
        builder = builder.max_carry(n);
    }
    if let Some(allow) = file.allow_transfer_back {
        builder = builder.allow_transfer_back(allow);
    }
    if let Some(stage) = &file.output {
        let stage = stage
            .spec(&resolve)
            .map_err(|e| invalid(format!("[output]: {e}")))?;
        builder = builder.output(stage);
    }
    for entry in &file.agents {
        let label = format!("agent '{}'", entry.name);
        let spec = match entry.model.strip_prefix("replay:") {
            Some(replay) => format!("replay:{}", resolve(Path::new(replay)).display()),
            None => entry.model.clone(),
        };
        let model = model_from_spec(&spec, None, &[]).map_err(|e| match e {
            ModelSpecError::Usage(message) => invalid(format!("{label}: {message}")),
            ModelSpecError::Model(error) => TeamConfigError::Model(error),
        })?;
        let runtime = runtime_by_name(&entry.runtime, limits.clone())
            .map_err(|e| invalid(format!("{label}: {e}")))?;
        let tools = match &entry.tools {
            Some(manifest) => {
                let path = resolve(manifest);
                #[cfg(feature = "mcp")]
                let loaded = load_manifest_with_mcp(&path, tool_timeout);
                #[cfg(not(feature = "mcp"))]
                let loaded = refuse_mcp_servers(&path, "a build without the `mcp` feature")
                    .and_then(|()| load_tool_manifest(&path, tool_timeout));
                loaded.map_err(|e| invalid(format!("{label}: {e}")))?
            }
            None => Vec::new(),
        };
        let mut config = LoopConfig::default();
        if let Some(n) = entry.max_steps {
            config.max_steps = n;
        }
        if let Some(n) = entry.max_errors {
            config.max_consecutive_errors = n;
        }
        if let Some(n) = entry.max_refusals {
            config.max_refusals = n;
        }
        let output = match &entry.output {
            Some(output) => output
                .spec(&resolve)
                .map_err(|e| invalid(format!("{label}: {e}")))?,
            None => OutputSpec::default(),
        };
        let mut agent = Agent::builder(model, runtime)
            .name(&entry.name)
            .description(&entry.description)
            .instructions(&entry.instructions)
            .tools(tools)
            .output(output)
            .config(config);
        if let Some(name) = &entry.coach {
            let coach =
                crate::agent::coach::by_name(name).map_err(|e| invalid(format!("{label}: {e}")))?;
            agent = agent.shared_coach(coach);
        }
        if let Some(policy) = &entry.policy {
            let policy = codeact_rhai::RhaiPolicy::load(&resolve(policy), Limits::default())
                .map_err(|e| invalid(format!("{label}: {e}")))?;
            agent = agent.policy(policy);
        }
        if let Some(area) = area.as_ref().filter(|_| wants_files(entry)) {
            agent = agent.files(area);
        }
        for target in &entry.targets {
            let described = file
                .agents
                .iter()
                .find(|a| &a.name == target)
                .ok_or_else(|| {
                    invalid(format!(
                        "{label} names target '{target}', which is not declared"
                    ))
                })?;
            agent = agent.transfer_target(TransferTarget::new(target, &described.description));
        }
        let agent = configure(agent)
            .build()
            .map_err(|e| invalid(format!("{label}: {e}")))?;
        builder = builder.agent(agent);
    }
    Ok(LoadedTeam {
        builder,
        entry: file.entry,
        first,
        files: area,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn team_with_workdir(dir: &Path) -> PathBuf {
        std::fs::write(dir.join("replies.json"), r#"{"replies": []}"#).expect("written");
        let path = dir.join("team.toml");
        std::fs::write(
            &path,
            "[files]\nworkdir = \"work\"\n\n[[agent]]\nname = \"a\"\nmodel = \"replay:replies.json\"\n",
        )
        .expect("written");
        path
    }

    #[test]
    fn runs_of_one_team_file_get_folders_of_their_own_in_its_workdir() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = team_with_workdir(dir.path());
        let limits = Limits::default();
        let timeout = Duration::from_secs(5);
        let root = |loaded: LoadedTeam| loaded.files.expect("files").root().to_path_buf();
        let first =
            root(load_team_for_run(&path, &limits, timeout, "run_1", |b| b).expect("loads"));
        let second =
            root(load_team_for_run(&path, &limits, timeout, "run_2", |b| b).expect("loads"));
        assert_eq!(first, dir.path().join("work").join("run_1"));
        assert_eq!(second, dir.path().join("work").join("run_2"));
        let shared = root(load_team(&path, &limits, timeout, |b| b).expect("loads"));
        assert_eq!(shared, dir.path().join("work"));
        for bad in ["../escape", "a/b", "", ".."] {
            assert!(
                load_team_for_run(&path, &limits, timeout, bad, |b| b).is_err(),
                "{bad}"
            );
        }
    }

    fn team_with_coach(dir: &Path, coach: &str) -> PathBuf {
        std::fs::write(dir.join("replies.json"), r#"{"replies": []}"#).expect("written");
        let path = dir.join("team.toml");
        std::fs::write(
            &path,
            format!(
                "[[agent]]\nname = \"a\"\nmodel = \"replay:replies.json\"\ncoach = \"{coach}\"\n"
            ),
        )
        .expect("written");
        path
    }

    #[test]
    fn an_agent_names_its_coach_and_an_unknown_coach_is_refused_by_name() {
        let dir = tempfile::tempdir().expect("temp dir");
        let limits = Limits::default();
        let timeout = Duration::from_secs(5);
        for coach in ["plain", "small-model"] {
            let path = team_with_coach(dir.path(), coach);
            assert!(load_team(&path, &limits, timeout, |b| b).is_ok(), "{coach}");
        }
        let path = team_with_coach(dir.path(), "tiny");
        let Err(error) = load_team(&path, &limits, timeout, |b| b) else {
            panic!("an unknown coach loads")
        };
        assert!(
            error.to_string().contains("unknown coach `tiny`"),
            "{error}"
        );
    }
}
