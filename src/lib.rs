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
//! The crate root holds what an app that embeds an agent uses; everything else is
//! public in the module it belongs to:
//!
//! - **The loop:** [`Agent`], [`AgentBuilder`], [`LoopConfig`], [`Chat`] (many
//!   turns), [`RunRequest`] and [`CancellationToken`], [`RunResult`], [`TypedRun`],
//!   [`Outcome`], [`Event`], [`Transcript`], [`AgentError`]; approvals:
//!   [`Approver`], [`ApprovalRequest`], [`ApprovalDecision`]; teams: [`Team`].
//!   The rest of the loop (resume, snapshots of sessions, team files, policies,
//!   the loop's decisions and spans) is in [`agent`].
//! - **Runtimes:** [`RhaiRuntime`], `JsRuntime` and `run_worker_if_requested`
//!   (feature `js`), `WasmRuntime` (feature `wasm`), [`runtime_by_name`], the
//!   [`Runtime`] trait, [`Limits`], and [`MeteredAllocator`] (the global allocator
//!   that holds Rhai runs to their memory limit). Scripts without the loop:
//!   [`ScriptSession`], [`ScriptOutput`]. Runtime names, running-script slots,
//!   sessions, errors and snapshots are in [`exec`].
//! - **Tools:** [`Tool`], [`ToolBox`], [`ToolError`], [`command_tool`],
//!   [`fetch_tool`] and [`FetchPolicy`], `McpServer` (feature `mcp`); manifests,
//!   tool search over a large catalog and the defaults are in [`tools`].
//! - **Files:** [`FileArea`]; mounts, the file helpers' names and images shown to
//!   the model are in [`files`].
//! - **Final answers:** [`OutputSpec`], [`FinalOutput`], [`FinalAnswer`] (derive
//!   and trait); checks, artifacts and Rhai validators are in [`output`].
//! - **Untrusted text:** [`UntrustedText`]; [`fence`](untrusted::fence) and its
//!   rule are in [`untrusted`], the host's words as templates in [`prompts`].
//! - **Models:** clients and chat types are in [`model`] and [`chat`].

// The derive macro names `::codeact::…`, which must resolve inside this crate too.
extern crate self as codeact;

pub mod agent;
pub mod chat;
pub mod exec;
pub mod files;
pub mod model;
pub mod output;
pub mod prompts;
pub mod tools;
pub mod untrusted;

pub use agent::{
    Agent, AgentBuilder, AgentError, ApprovalDecision, ApprovalRequest, Approver, CellLimits,
    CellState, Chat, Event, LoopConfig, Outcome, RunRequest, RunResult, SmallModelCoach, Team,
    Transcript, TypedRun,
};
pub use codeact_alloc_meter::MeteredAllocator;
#[cfg(feature = "js")]
pub use codeact_js::{JsRuntime, run_worker_if_requested};
pub use codeact_macros::FinalAnswer;
pub use codeact_rhai::RhaiRuntime;
pub use codeact_runtime::{Limits, Runtime, ToolError};
#[cfg(feature = "wasm")]
pub use codeact_wasm::WasmRuntime;
pub use exec::{ScriptSession, runtime_by_name};
pub use files::FileArea;
#[doc(hidden)]
pub use output::answer::__assert_answer_field;
pub use output::{FinalAnswer, FinalOutput, OutputSpec, ScriptOutput};
/// The token that cancels a run ([`RunRequest::cancel_on`]), from `tokio-util`.
pub use tokio_util::sync::CancellationToken;
#[cfg(feature = "mcp")]
pub use tools::McpServer;
pub use tools::{FetchPolicy, Tool, ToolBox, command_tool, fetch_tool};
pub use untrusted::UntrustedText;

/// The README's and the manual's Rust blocks, compiled (and run, unless marked
/// `no_run`) by `cargo test --doc`, so the documentation cannot drift from the
/// code. A page whose blocks need a feature is compiled only with it.
#[cfg(doctest)]
mod manual {
    #[doc = include_str!("../README.md")]
    struct Readme;
    #[doc = include_str!("../docs/embedding.md")]
    struct Embedding;
    #[doc = include_str!("../docs/cli.md")]
    struct CommandLine;
    #[doc = include_str!("../docs/loop.md")]
    struct Loop;
    #[doc = include_str!("../docs/cells.md")]
    struct Cells;
    #[doc = include_str!("../docs/teams.md")]
    struct Teams;
    #[cfg(feature = "js")]
    #[doc = include_str!("../docs/runtimes.md")]
    struct Runtimes;
    #[doc = include_str!("../docs/files-and-network.md")]
    struct FilesAndNetwork;
    #[cfg(feature = "mcp")]
    #[doc = include_str!("../docs/mcp.md")]
    struct Mcp;
    #[doc = include_str!("../docs/serve.md")]
    struct Serve;
    #[doc = include_str!("../docs/output-specs.md")]
    struct OutputSpecs;
    #[doc = include_str!("../docs/snapshots-and-resume.md")]
    struct SnapshotsAndResume;
    #[doc = include_str!("../docs/security.md")]
    struct Security;
    #[doc = include_str!("../docs/benchmarks.md")]
    struct Benchmarks;
    #[doc = include_str!("../docs/evaluation.md")]
    struct Evaluation;
    #[doc = include_str!("../docs/layout.md")]
    struct Layout;
}
