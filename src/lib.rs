//! codeact hosts code-executing ("CodeAct") agents: a language model writes a small
//! script each turn, the host runs it in a sandboxed engine, and the script's
//! completion value, decoded into a [`ScriptOutput`], decides what happens next.
//!
//! An agent from a model client, a runtime and a tool (an async closure), run on a
//! task (the model here is a replay of recorded replies; see
//! `examples/embed.rs` for a real server):
//!
//! ```
//! use std::sync::Arc;
//! use codeact::model::ReplayModel;
//! use codeact::{Agent, Event, Limits, Outcome, RhaiRuntime, Tool, ToolError};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let model = ReplayModel::new([
//!     "```rhai\nlet p = call_tool(\"prices\", #{});\nobservation(p)\n```",
//!     "```rhai\nfinal_result(p.apple + p.milk)\n```",
//! ]);
//! let prices = Tool::new("prices", "Prices in euros.", |_args| async {
//!     Ok::<_, ToolError>(json!({"apple": 0.5, "milk": 1.25}))
//! });
//! let agent = Agent::builder(Arc::new(model), Arc::new(RhaiRuntime::new(Limits::default())))
//!     .tool(prices)
//!     .on_event(|event| if let Event::Observation { value, .. } = event { println!("saw {value}") })
//!     .build()?;
//!
//! let run = agent.run("What do an apple and milk cost together?").await?;
//! assert_eq!(run.outcome, Outcome::FinalResult { value: json!(1.75) });
//! # Ok(())
//! # }
//! ```
//!
//! Below the loop, a [`ScriptSession`] runs scripts directly, keeping variables
//! between runs:
//!
//! ```
//! use std::sync::Arc;
//! use codeact::{Limits, RhaiRuntime, ScriptOutput, ScriptSession, Tool, ToolBox};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let add = Tool::from_fn("add", "Adds a and b.", |args| {
//!     Ok(json!(args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)))
//! });
//! let runtime = RhaiRuntime::new(Limits::default());
//! let mut session = ScriptSession::start(&runtime, Arc::new(ToolBox::new([add])?))?;
//!
//! session.run("let x = call_tool(\"add\", #{a: 40, b: 2});").await?;
//! let run = session.run("final_result(x)").await?;
//! assert_eq!(run.output, ScriptOutput::final_result(json!(42)));
//! # Ok(())
//! # }
//! ```

//! # The public API
//!
//! Everything is exported from the crate root but the model clients and chat types
//! (`codeact::model`, `codeact::chat`), the loop's building blocks
//! (`codeact::agent`), and with their features the command line (`cli`), the
//! evaluation (`eval`) and the benchmark harness (`bench`).
//!
//! - **The loop:** [`Agent`], [`AgentBuilder`], [`LoopConfig`], [`BareValues`],
//!   [`Chat`] (many turns),
//!   [`RunRequest`], [`RunItem`] and [`CancellationToken`], [`RunResult`], [`TypedRun`],
//!   [`Outcome`], [`Event`], [`ToolCallOutcome`], [`AgentError`]; resume: [`Transcript`], [`ResumePoint`], [`ResumeError`],
//!   [`ResumedSession`], [`SnapshotDir`];
//!   teams: [`Team`], [`TeamBuilder`], [`TeamRequest`], [`TeamRun`], [`TeamOutcome`], [`Handover`],
//!   [`load_team`], [`LoadedTeam`], [`TeamConfigError`].
//! - **Scripts without the loop:** [`ScriptSession`], [`ScriptRun`],
//!   [`ScriptOutput`], [`NotAnOutput`] and [`Malformed`] (the wire contract), [`runtime_by_name`],
//!   [`RUNTIME_NAMES`], [`OPT_IN_RUNTIMES`], [`RuntimeByNameError`], running-script
//!   slots ([`max_running_scripts`], [`set_max_running_scripts`]).
//! - **Runtimes:** [`RhaiRuntime`], `JsRuntime` and [`run_worker_if_requested`]
//!   (feature `js`), `WasmRuntime` and `Guest` (feature `wasm`); the traits and
//!   limits they share: [`Runtime`], [`Session`], [`Interrupt`], [`RuntimeInfo`], [`Enforcement`],
//!   [`Limits`], [`LimitKind`], [`ScriptError`], [`SESSION_RESTARTED`], [`HostError`],
//!   [`RunOutcome`], [`LogBuffer`]; snapshots of sessions ([`Snapshot`],
//!   [`SnapshotError`]); [`MeteredAllocator`] and [`metered_allocator_installed`] (the
//!   global allocator that holds Rhai runs to their memory limit).
//! - **Tools:** [`Tool`], [`ToolBox`], [`ToolBoxError`], [`ToolFuture`],
//!   [`ToolSpec`], [`ToolError`], [`ToolDispatch`], [`NoTools`]; command tools
//!   ([`command_tool`], [`CommandSpec`], [`DEFAULT_COMMAND_TIMEOUT`],
//!   [`load_tool_manifest`]); the network ([`fetch_tool`], [`FetchPolicy`],
//!   [`HostPattern`], [`IpNetwork`], [`SecretHeader`], [`FETCH_TOOL`] and its
//!   defaults); search over a large catalog ([`ToolDiscovery`], [`SEARCH_TOOLS`],
//!   [`DESCRIBE_TOOL`]); MCP servers' tools (feature `mcp`: `McpServer`, `McpError` and
//!   their defaults).
//! - **Files:** a run's working directory and mounts, reached through file helpers
//!   ([`FileArea`], [`FileAreaBuilder`], [`Mount`], [`MountMode`], [`FileAreaError`],
//!   [`DEFAULT_MAX_DISK_BYTES`], [`DEFAULT_MAX_FILE_BYTES`], the helpers' names
//!   [`READ_TEXT_TOOL`], [`WRITE_TEXT_TOOL`], [`WRITE_BYTES_TOOL`], [`LIST_DIR_TOOL`],
//!   [`EXISTS_TOOL`], [`SHOW_IMAGE_TOOL`]; images shown to the model: [`ShownImage`],
//!   [`MAX_IMAGE_BYTES`], [`MAX_IMAGES_PER_SCRIPT`], [`MAX_IMAGE_SIDE`]); the view an
//!   engine with a file API of its own gets ([`FileView`], [`SharedDir`],
//!   [`DiskMeter`]).
//! - **Final answers:** [`OutputSpec`], [`OutputContract`], [`Check`],
//!   [`ExtraCheck`], [`OnValidatorError`], [`RefusedBy`], [`OutputSpecError`],
//!   [`content_text`]; [`FinalOutput`], [`Validation`], [`artifact_path`],
//!   [`Artifact`], [`ArtifactError`], [`DEFAULT_CONTENT_CAP`]; typed answers: [`FinalAnswer`]
//!   (derive and trait), [`AnswerField`]; Rhai validators: [`RhaiValidator`],
//!   [`Verdict`], [`ValidatorLoadError`]; Rhai policies: [`RhaiPolicy`].
//! - **Prompts and untrusted text:** [`render_system_prompt`], [`render_card`],
//!   [`TransferTarget`], [`PromptError`]; the host's words as replaceable
//!   templates: [`Prompts`], [`TemplateError`]; [`UntrustedText`], [`fence`],
//!   [`FENCE_RULE`].

// The derive macro names `::codeact::…`, which must resolve inside this crate too.
extern crate self as codeact;

pub mod agent;
#[cfg(feature = "bench")]
pub mod bench;
pub mod chat;
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "cli")]
pub mod eval;
mod exec;
mod files;
pub mod model;
mod output;
mod prompts;
#[cfg(feature = "serve")]
mod serve;
mod tools;
mod untrusted;

pub use agent::coach;
pub use agent::team_config::{LoadedTeam, TeamConfigError, load_team, load_team_for_run};
pub use agent::{
    Agent, AgentBuilder, AgentError, BareValues, Chat, Event, Handover, LoopConfig, Outcome,
    ResumeError, ResumePoint, ResumedSession, RunItem, RunRequest, RunResult, SnapshotDir, Team,
    TeamBuilder, TeamOutcome, TeamRequest, TeamRun, ToolCallOutcome, Transcript, TypedRun,
};
pub use agent::{ApprovalDecision, ApprovalFuture, ApprovalReason, ApprovalRequest, Approver};
pub use agent::{CoachDecision, PlainCoach, SmallModelCoach};
pub use codeact_alloc_meter::{MeteredAllocator, is_installed as metered_allocator_installed};
#[cfg(feature = "js")]
pub use codeact_js::{JsRuntime, run_worker_if_requested};
pub use codeact_macros::FinalAnswer;
pub use codeact_rhai::RhaiRuntime;
pub use codeact_rhai::{RhaiPolicy, RhaiValidator, ValidatorLoadError, Verdict};
pub use codeact_runtime::{
    DiskMeter, Enforcement, FileView, HostError, Interrupt, LimitKind, Limits, LogBuffer, NoTools,
    RunOutcome, Runtime, RuntimeInfo, SESSION_RESTARTED, ScriptError, Session, SharedDir, Snapshot,
    SnapshotError, ToolDispatch, ToolError, ToolSpec,
};
#[cfg(feature = "wasm")]
pub use codeact_wasm::{Guest, WasmRuntime};
pub use exec::registry::{OPT_IN_RUNTIMES, RUNTIME_NAMES, RuntimeByNameError, runtime_by_name};
pub use exec::run_slots::{max_running_scripts, set_max_running_scripts};
pub use exec::session::{ScriptRun, ScriptSession};
pub use files::{
    DEFAULT_MAX_DISK_BYTES, DEFAULT_MAX_FILE_BYTES, EXISTS_TOOL, FileArea, FileAreaBuilder,
    FileAreaError, LIST_DIR_TOOL, MAX_IMAGE_BYTES, MAX_IMAGE_SIDE, MAX_IMAGES_PER_SCRIPT, Mount,
    MountMode, READ_TEXT_TOOL, SHOW_IMAGE_TOOL, ShownImage, WRITE_BYTES_TOOL, WRITE_TEXT_TOOL,
};
#[doc(hidden)]
pub use output::answer::__assert_answer_field;
pub use output::answer::{AnswerField, FinalAnswer};
pub use output::final_output::{
    Artifact, ArtifactError, DEFAULT_CONTENT_CAP, FinalOutput, Validation, artifact_path,
};
pub use output::script_output::{Malformed, NotAnOutput, ScriptOutput};
pub use output::spec::{
    Check, ExtraCheck, OnValidatorError, OutputContract, OutputSpec, OutputSpecError, RefusedBy,
    content_text,
};
pub use prompts::{
    PromptError, Prompts, TemplateError, TransferTarget, render_card, render_system_prompt,
};
/// The token that cancels a run ([`RunRequest::cancel_on`]), from `tokio-util`.
pub use tokio_util::sync::CancellationToken;
pub use tools::command::{CommandSpec, DEFAULT_COMMAND_TIMEOUT, command_tool};
pub use tools::discovery::{DESCRIBE_TOOL, SEARCH_TOOLS, ToolDiscovery};
pub use tools::fetch::{
    DEFAULT_FETCH_TIMEOUT, DEFAULT_MAX_REQUESTS, DEFAULT_MAX_RESPONSE_BYTES, FETCH_TOOL,
    FetchPolicy, HostPattern, IpNetwork, SecretHeader, fetch_tool,
};
pub use tools::manifest::load_tool_manifest;
#[cfg(feature = "mcp")]
pub use tools::mcp::{
    DEFAULT_MCP_CALL_TIMEOUT, DEFAULT_MCP_CONNECT_TIMEOUT, MAX_MCP_RESULT_BYTES, McpError,
    McpServer,
};
pub use tools::toolbox::{Tool, ToolBox, ToolBoxError, ToolFuture};
pub use untrusted::{FENCE_RULE, UntrustedText, fence};
