//! `codeact run`: a CodeAct agent on a task.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;

use super::files::{FileArgs, copy_artifacts};
use super::printer::{Printer, terminal_safe};
use super::{
    EXIT_AWAITING_APPROVAL, EXIT_BUDGET, EXIT_CANCELLED, EXIT_HOST_FAILURE, EXIT_OK, LimitArgs,
    ToolArgs, host_runtime, usage_error,
};
use codeact::model::{ModelSpecError, model_from_spec};
use std::time::Duration;

use super::validate::{load_contract, read_schema};
use codeact::agent::AgentBuilder;
use codeact::agent::Listener;
use codeact::agent::LoopConfig;
use codeact::agent::Outcome;
use codeact::agent::ResumePoint;
use codeact::agent::SnapshotDir;
use codeact::agent::TeamOutcome;
use codeact::agent::read_transcript;
use codeact::agent::{Agent, AgentError};
use codeact::agent::{ApprovalDecision, PendingApproval};
use codeact::agent::{Event, Transcript};
use codeact::agent::{TeamConfigError, load_team};
use codeact::exec::runtime_by_name;
use codeact::files::FileArea;
use codeact::output::FinalOutput;
use codeact::output::{OnValidatorError, OutputSpec};
use codeact::prompts::TransferTarget;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The model: openai:NAME (OPENAI_BASE_URL, OPENAI_API_KEY), ollama:NAME (a
    /// local Ollama on its default port), anthropic:NAME (ANTHROPIC_API_KEY,
    /// ANTHROPIC_BASE_URL) or replay:FILE ({"replies": […]}).
    #[arg(
        long,
        value_name = "PROVIDER:NAME",
        required_unless_present_any = ["agents", "resume"],
        conflicts_with = "agents"
    )]
    model: Option<String>,
    /// A team of agents declared in a TOML file (each with its model, runtime,
    /// tools and transfer targets); the run goes on across handovers.
    #[arg(long, value_name = "FILE")]
    agents: Option<PathBuf>,
    /// The agent that starts, with --agents [default: the file's entry, else its
    /// first agent].
    #[arg(long, value_name = "NAME", requires = "agents")]
    agent: Option<String>,
    /// Overrides OPENAI_BASE_URL / ANTHROPIC_BASE_URL and the ollama preset.
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// A field for every request body, as KEY=VALUE (VALUE as JSON when it
    /// parses, else a string), e.g. reasoning_effort=low. Repeatable.
    #[arg(long = "model-option", value_name = "KEY=VALUE")]
    model_options: Vec<String>,
    /// The runtime the model's scripts run in: rhai, js, js-in-process, wasm:js,
    /// wasm:js-stdio, wasm:micropython, wasm:python, wasm:python-sci, wasm:rhai, wasm:boa, or wasm:PATH for a
    /// WASI guest file.
    /// [default: rhai, or the resumed transcript's runtime]
    #[arg(long)]
    runtime: Option<String>,
    /// Model calls before the run stops.
    #[arg(long, value_name = "N", default_value_t = 12, value_parser = clap::value_parser!(u64).range(1..=1000))]
    max_steps: u64,
    /// Errors in a row before the run stops.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=1000))]
    max_errors: u64,
    /// Tool calls the whole run may make; the run stops (exit 3) after the script
    /// that tried one more. [default: no limit]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_tool_calls: Option<u64>,
    /// Tool calls one script may make; the next is refused with a tool error
    /// listing the script's calls, and the run goes on. [default: no limit]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_tool_calls_per_script: Option<u64>,
    /// Input tokens the run may use; it stops (exit 3) after the reply that
    /// passes them. [default: no limit]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_input_tokens: Option<u64>,
    /// Output tokens the run may use; likewise. [default: no limit]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_output_tokens: Option<u64>,
    /// Characters of feedback (script values, errors, printed output) the model
    /// is shown over the run; past it each piece is cut to 400 characters and
    /// the model is told. 0: no cap. [default: 100000]
    #[arg(long, value_name = "N")]
    max_feedback_chars: Option<u64>,
    /// Wall-clock seconds for the whole run; it stops (exit 3) at the deadline,
    /// abandoning a model call or script still going. [default: no limit]
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..))]
    max_run_seconds: Option<u64>,
    /// Write every message and event to this JSONL file (replacing it) as they happen.
    #[arg(long, value_name = "FILE", conflicts_with = "resume")]
    transcript: Option<PathBuf>,
    /// Also write every event to stdout as it happens, one JSON line each (the
    /// transcript's lines), for another program to consume; the final ScriptOutput
    /// stays the last line. The only format is `jsonl`.
    #[arg(long, value_name = "FORMAT", value_parser = ["jsonl"])]
    events: Option<String>,
    /// Continue the interrupted run this transcript recorded (killed, or failed on
    /// a model error), appending to it: its finished scripts run again with their
    /// recorded tool results (the tools are not called again), then the loop goes
    /// on from where it stopped. --model and --runtime default to the
    /// transcript's; tools and limits must be given again. Not for --agents.
    #[arg(long, value_name = "TRANSCRIPT", conflicts_with_all = ["agents", "task"])]
    resume: Option<PathBuf>,
    /// Keep the session's snapshot in DIR after each step whose script
    /// finished (made if missing), as RUN.step-N.snapshot, only the latest per
    /// run: written beside its name and renamed into place, recorded in the
    /// transcript. With --resume, the session is restored from the snapshot of
    /// the transcript's last finished step instead of re-running the scripts;
    /// when there is none, or the runtime refuses it (another runtime, guest or
    /// codeact version, a damaged file), the scripts run again and one line says
    /// why. For runtimes that can snapshot (rhai, wasm:js, wasm:rhai, wasm:boa); a step
    /// costs a copy of the session's state and a file. Not for --agents or
    /// --chat. [default: no snapshots]
    #[arg(long, value_name = "DIR", conflicts_with_all = ["agents", "chat"])]
    snapshot_dir: Option<PathBuf>,
    /// An agent the script may hand over to; the run ends on the transfer. Repeatable.
    #[arg(long = "transfer-target", value_name = "NAME")]
    transfer_targets: Vec<String>,
    /// Output token limit per reply.
    #[arg(long, value_name = "N", default_value_t = 2_048)]
    max_tokens: u32,
    /// Sampling temperature [default: none sent, the server's own; reasoning
    /// models accept no other].
    #[arg(long, value_name = "T")]
    temperature: Option<f32>,
    /// Wait for whole replies instead of streaming them.
    #[arg(long)]
    no_stream: bool,
    /// The final result's format label, shown to the model; json means it must
    /// parse as JSON. Like --schema and --validator, this is the request level of
    /// the output spec: it overrides what an agent or team file declares, and a
    /// different format drops their schema and validator.
    #[arg(long, value_name = "NAME")]
    format: Option<String>,
    /// A JSON Schema file the final result must match; shown to the model.
    #[arg(long, value_name = "FILE.json")]
    schema: Option<PathBuf>,
    /// A Rhai file defining `fn validate(content)`, which returns () or "" when
    /// the final result is fine and a reason when it is not.
    #[arg(long, value_name = "FILE.rhai")]
    validator: Option<PathBuf>,
    /// When the validator itself fails: reject the result, or accept it unchecked
    /// and flag the run [default: reject].
    #[arg(long, value_name = "MODE", value_parser = ["reject", "accept"])]
    on_validator_error: Option<String>,
    /// Final results refused by the checks before the run stops.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=1000))]
    max_refusals: u64,
    /// Who advises the loop: plain (the engine's errors and the tool results,
    /// never a refused correct answer) or small-model (the host's rules for a
    /// small local model: pitfalls named, failed scripts rewritten, a few
    /// holds on results the data shows wrong). Team files name theirs.
    #[arg(long, value_name = "COACH", default_value = "plain", value_parser = ["plain", "small-model"])]
    coach: String,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    tools: ToolArgs,
    #[command(flatten)]
    files: FileArgs,
    /// Each call of TOOL waits for approval (see --approve). Repeatable; a tools
    /// manifest marks a tool with "approval": true.
    #[arg(long = "needs-approval", value_name = "TOOL")]
    needs_approval: Vec<String>,
    /// Send the images scripts show (show_image) to the model as pictures, for a
    /// model that accepts images; without it, each is described in a line of text.
    #[arg(long)]
    see_images: bool,
    /// Let scripts start cells: scripts that go on between steps
    /// (start_cell, poll_cell, wait_cell, cancel_cell, notify), at most N
    /// running at once, each under the runtime's limits; they end with the run
    /// [default: off; N defaults to 4].
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "4", value_parser = clap::value_parser!(u64).range(1..=64))]
    cells: Option<u64>,
    /// Who decides on calls that need approval (marked tools, and calls the
    /// policy answers "ask" for): ask (a prompt on the terminal), allow or deny
    /// [default: ask when stdin is a terminal, else deny]. A denied call throws a
    /// tool error the script can catch.
    /// defer stops the run instead, with exit status 4, the call's id on stderr
    /// and in the transcript, to be resumed later with --approve-call or
    /// --deny-call.
    #[arg(long, value_name = "MODE", value_parser = ["ask", "allow", "deny", "defer"])]
    approve: Option<String>,
    /// With --resume: approve the call the transcript's run stopped for (its id,
    /// e.g. s2c1). The grant holds for exactly that tool and those arguments.
    #[arg(
        long,
        value_name = "ID",
        requires = "resume",
        conflicts_with_all = ["deny_call", "chat"]
    )]
    approve_call: Option<String>,
    /// With --resume: deny the call the transcript's run stopped for; the script
    /// gets a tool error with --reason.
    #[arg(long, value_name = "ID", requires = "resume", conflicts_with = "chat")]
    deny_call: Option<String>,
    /// Why the call is denied (with --deny-call).
    #[arg(long, value_name = "TEXT", requires = "deny_call")]
    reason: Option<String>,
    /// Copy the files the final result names (its artifacts) into DIR, at the
    /// same relative paths.
    #[arg(long, value_name = "DIR", conflicts_with = "chat")]
    artifacts: Option<PathBuf>,
    /// Chat: read one user message per line from stdin (a `> ` prompt on stderr
    /// at a terminal), run each to its answer and print that answer's
    /// ScriptOutput line; the session and the history carry over from turn to
    /// turn. Ctrl-D ends the chat. TASK, when given, is the first message.
    #[arg(long, conflicts_with_all = ["agents", "events"])]
    chat: bool,
    /// The history a chat carries into a new turn, in KiB of message text: past
    /// it, the oldest whole turns are dropped (the model is told) [default: 256].
    #[arg(long, value_name = "KIB", requires = "chat", value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    max_history_kib: Option<u64>,
    /// A Rhai policy file put to what scripts do: `fn check_call(tool, args)`
    /// before every tool call, `fn check_code(code, language)` before every
    /// script; `()` or "" allows, a string refuses with that reason, and "ask",
    /// a throw or a runaway rule refuse too (fail closed).
    #[arg(long, value_name = "FILE.rhai", conflicts_with = "agents")]
    policy: Option<PathBuf>,
    /// The task, in words.
    #[arg(value_name = "TASK", required_unless_present_any = ["resume", "chat"])]
    task: Option<String>,
}

/// The request level of the output spec, from the flags; loaded once here so a
/// broken validator or schema is a usage error before any model call.
fn request_spec(args: &RunArgs) -> Result<OutputSpec, String> {
    let schema = args.schema.as_deref().map(read_schema).transpose()?;
    let spec = OutputSpec {
        format: args.format.clone(),
        schema,
        validator: args.validator.clone(),
        on_validator_error: args.on_validator_error.as_deref().map(|mode| match mode {
            "accept" => OnValidatorError::Accept,
            _ => OnValidatorError::Reject,
        }),
        ..OutputSpec::default()
    };
    load_contract(&spec, args.schema.as_deref())?;
    Ok(spec)
}

pub(crate) fn run(args: &RunArgs) -> ExitCode {
    let request = match request_spec(args) {
        Ok(request) => request,
        Err(e) => return usage_error(&e),
    };
    let host = match host_runtime() {
        Ok(host) => host,
        Err(code) => return code,
    };
    let printer = Arc::new(Printer::default());
    let mut listeners: Vec<Listener> = vec![Arc::new(move |agent: &str, event: &Event| {
        printer.print(agent, event)
    })];
    let resume = match &args.resume {
        Some(path) => match read_transcript(path)
            .map_err(|e| e.to_string())
            .and_then(|events| {
                if args.chat {
                    ResumePoint::from_chat_events(&events)
                } else {
                    ResumePoint::from_events(&events)
                }
                .map_err(|e| e.to_string())
            }) {
            Ok(point) => Some(point),
            Err(e) => {
                return usage_error(&format!("cannot resume '{}': {e}", path.display()));
            }
        },
        None => None,
    };
    // --resume and --transcript conflict: a resumed run appends to its own.
    let transcript = match (&args.resume, &args.transcript) {
        (Some(path), _) => Some((path, Transcript::append(path), "append to")),
        (None, Some(path)) => Some((path, Transcript::create(path), "create")),
        (None, None) => None,
    };
    if let Some((path, opened, verb)) = transcript {
        match opened {
            Ok(transcript) => listeners.push(transcript.listener()),
            Err(e) => {
                return usage_error(&format!(
                    "cannot {verb} the transcript '{}': {e}",
                    path.display()
                ));
            }
        }
    }
    if args.events.is_some() {
        listeners.push(Transcript::to_writer(std::io::stdout()).listener());
    }
    let model = args
        .model
        .clone()
        .or_else(|| resume.as_ref().and_then(|point| point.model.clone()));
    let area = match args.files.area() {
        Ok(area) => area,
        Err(e) => return usage_error(&e),
    };
    let area = area.as_ref();
    match (&args.agents, model) {
        (Some(file), _) => run_team(args, file, &host, listeners, &request, area),
        (None, Some(model)) => run_agent(args, &model, &host, listeners, &request, resume, area),
        (None, None) => usage_error("--model or --agents is required"),
    }
}

/// `--approve-call ID` / `--deny-call ID`: the call the resumed transcript waits
/// on, and the decision for it; an id that is not the one awaited is an error.
fn decided_call(
    args: &RunArgs,
    resume: Option<&ResumePoint>,
) -> Result<Option<(PendingApproval, ApprovalDecision)>, String> {
    let (id, decision) = match (&args.approve_call, &args.deny_call) {
        (Some(id), _) => (
            id,
            ApprovalDecision::approve().by(format!("--approve-call {id}")),
        ),
        (None, Some(id)) => (
            id,
            ApprovalDecision::deny(args.reason.clone().unwrap_or_else(|| "denied".into()))
                .by(format!("--deny-call {id}")),
        ),
        (None, None) => return Ok(None),
    };
    match resume.and_then(|point| point.pending_approval.clone()) {
        Some(pending) if &pending.id == id => Ok(Some((pending, decision))),
        Some(pending) => Err(format!(
            "the transcript waits for approval of call {} ({}), not {id}",
            pending.id, pending.tool
        )),
        None => Err("the transcript's run does not wait for any approval".into()),
    }
}

/// `--artifacts DIR`: copies the accepted result's files out of the working
/// directory; a failure to copy makes the run a host failure.
fn copy_out(
    args: &RunArgs,
    area: Option<&FileArea>,
    output: Option<&FinalOutput>,
    code: ExitCode,
) -> ExitCode {
    let (Some(dest), Some(output)) = (&args.artifacts, output) else {
        return code;
    };
    let (workdir, max_bytes) = match area {
        Some(area) => (area.root().to_path_buf(), area.max_disk_bytes()),
        None => (
            std::env::current_dir().unwrap_or_default(),
            codeact::files::DEFAULT_MAX_DISK_BYTES,
        ),
    };
    match copy_artifacts(output, &workdir, dest, max_bytes) {
        Ok(copied) => {
            if copied > 0 {
                eprintln!("── {copied} artifact(s) copied to {}", dest.display());
            }
            code
        }
        Err(e) => {
            eprintln!("codeact: --artifacts: {}", terminal_safe(&e));
            ExitCode::from(EXIT_HOST_FAILURE)
        }
    }
}

/// What every agent of the run shares: limits, replies, streaming, listeners.
fn configure(
    args: &RunArgs,
    listeners: &[Listener],
    area: Option<&FileArea>,
) -> impl Fn(AgentBuilder) -> AgentBuilder {
    let listeners = listeners.to_vec();
    let area = area.cloned();
    let marked = args.needs_approval.clone();
    let see_images = args.see_images;
    let cells = args.cells.map(|max_live| codeact::CellLimits {
        max_live: usize::try_from(max_live).unwrap_or(4),
        ..codeact::CellLimits::default()
    });
    let approver = super::approve::approver(args.approve.as_deref());
    let (max_tokens, temperature, stream) = (args.max_tokens, args.temperature, !args.no_stream);
    move |mut builder: AgentBuilder| {
        builder = builder.max_tokens(max_tokens).stream(stream);
        if let Some(temperature) = temperature {
            builder = builder.temperature(temperature);
        }
        for listener in &listeners {
            builder = builder.listener(listener.clone());
        }
        if let Some(area) = &area {
            builder = builder.files(area);
        }
        for tool in &marked {
            builder = builder.needs_approval(tool.clone());
        }
        builder = builder.see_images(see_images);
        if let Some(cells) = cells {
            builder = builder.cells(cells);
        }
        builder.on_approval(approver.clone())
    }
}

fn run_agent(
    args: &RunArgs,
    model: &str,
    host: &tokio::runtime::Runtime,
    listeners: Vec<Listener>,
    request: &OutputSpec,
    resume: Option<ResumePoint>,
    area: Option<&FileArea>,
) -> ExitCode {
    let model = match model_from_spec(model, args.base_url.as_deref(), &args.model_options) {
        Ok(model) => model,
        Err(ModelSpecError::Usage(usage)) => return usage_error(&usage),
        Err(ModelSpecError::Model(model_error)) => {
            eprintln!("codeact: {}", terminal_safe(&model_error.to_string()));
            return ExitCode::from(EXIT_HOST_FAILURE);
        }
    };
    let runtime_name = args
        .runtime
        .clone()
        .or_else(|| resume.as_ref().and_then(|point| point.runtime.clone()))
        .unwrap_or_else(|| "rhai".into());
    let runtime = match runtime_by_name(&runtime_name, args.limits.limits()) {
        Ok(runtime) => runtime,
        Err(e) => return usage_error(&e.to_string()),
    };
    let tools = match args.tools.tools(host) {
        Ok(tools) => tools,
        Err(e) => return usage_error(&e),
    };
    let mut builder = Agent::builder(model, runtime).tools(tools);
    if let Some(path) = &args.policy {
        match codeact_rhai::RhaiPolicy::load(path, codeact_runtime::Limits::default()) {
            Ok(policy) => builder = builder.policy(policy),
            Err(e) => return usage_error(&e.to_string()),
        }
    }
    let mut builder = builder.config(LoopConfig {
        max_steps: args.max_steps as usize,
        max_consecutive_errors: args.max_errors as usize,
        max_refusals: args.max_refusals as usize,
        max_tool_calls: args.max_tool_calls.map(|n| n as usize),
        max_tool_calls_per_script: args.max_tool_calls_per_script.map(|n| n as usize),
        max_input_tokens: args.max_input_tokens,
        max_output_tokens: args.max_output_tokens,
        max_run_time: args.max_run_seconds.map(Duration::from_secs),
        max_feedback_chars: match args.max_feedback_chars {
            Some(0) => None,
            Some(chars) => Some(usize::try_from(chars).unwrap_or(usize::MAX)),
            None => LoopConfig::default().max_feedback_chars,
        },
        max_history_bytes: match args.max_history_kib {
            Some(kib) => Some(usize::try_from(kib << 10).unwrap_or(usize::MAX)),
            None => LoopConfig::default().max_history_bytes,
        },
        ..LoopConfig::default()
    });
    match codeact::agent::coach::by_name(&args.coach) {
        Ok(coach) => builder = builder.shared_coach(coach),
        Err(e) => return usage_error(&e),
    }
    for target in &args.transfer_targets {
        builder = builder.transfer_target(TransferTarget::new(target, ""));
    }
    let agent = match configure(args, &listeners, area)(builder).build() {
        Ok(agent) => agent,
        Err(e) => return usage_error(&e.to_string()),
    };
    if args.chat {
        return chat(&agent, host, args.task.as_deref(), resume.as_ref());
    }
    let cancel = cancel_on_ctrl_c(host);
    let grant = match decided_call(args, resume.as_ref()) {
        Ok(grant) => grant,
        Err(e) => return usage_error(&e),
    };
    let mut started = match &resume {
        Some(point) => agent.resume_request(point),
        None => agent.request(args.task.as_deref().unwrap_or_default()),
    };
    if let Some(dir) = &args.snapshot_dir {
        match SnapshotDir::new(dir) {
            Ok(dir) => started = started.snapshot_dir(dir),
            Err(e) => {
                return usage_error(&format!(
                    "cannot use the snapshot directory '{}': {e}",
                    dir.display()
                ));
            }
        }
    }
    let run_request = match grant {
        Some((pending, decision)) => started.grant(pending.tool, pending.args, decision),
        None => started,
    }
    .output(request.clone())
    .cancel_on(cancel);
    let run = host.block_on(run_request.run());
    match run {
        Ok(result) => copy_out(
            args,
            area,
            result.final_output.as_ref(),
            finish(&result.outcome),
        ),
        Err(AgentError::Output(e)) => usage_error(&e.to_string()),
        Err(e) => {
            eprintln!("codeact: {}", terminal_safe(&e.to_string()));
            ExitCode::from(EXIT_HOST_FAILURE)
        }
    }
}

fn run_team(
    args: &RunArgs,
    file: &std::path::Path,
    host: &tokio::runtime::Runtime,
    listeners: Vec<Listener>,
    request: &OutputSpec,
    area: Option<&FileArea>,
) -> ExitCode {
    let timeout = Duration::from_millis(args.tools.tool_timeout_ms);
    let loaded = match load_team(
        file,
        &args.limits.limits(),
        timeout,
        configure(args, &listeners, area),
    ) {
        Ok(loaded) => loaded,
        Err(TeamConfigError::Invalid(message)) => return usage_error(&message),
        Err(TeamConfigError::Model(error)) => {
            eprintln!("codeact: {}", terminal_safe(&error.to_string()));
            return ExitCode::from(EXIT_HOST_FAILURE);
        }
    };
    if area.is_some() && loaded.files.is_some() {
        return usage_error("the team file has [files]; leave out --files, --workdir and --mount");
    }
    let area = area.or(loaded.files.as_ref());
    let mut builder = loaded.builder;
    for listener in &listeners {
        builder = builder.team_listener(listener.clone());
    }
    let team = match builder.build() {
        Ok(team) => team,
        Err(e) => return usage_error(&format!("'{}': {e}", file.display())),
    };
    let entry = args.agent.clone().or(loaded.entry).unwrap_or(loaded.first);
    let task = args.task.as_deref().unwrap_or_default();
    let run = team
        .request(&entry, task)
        .output(request.clone())
        .cancel_on(cancel_on_ctrl_c(host))
        .run();
    match host.block_on(run) {
        Ok(run) => match run.outcome {
            TeamOutcome::Finished { agent, outcome } => {
                eprintln!(
                    "── the result comes from agent '{agent}' after {} handover(s)",
                    run.handovers.len()
                );
                copy_out(args, area, run.final_output.as_ref(), finish(&outcome))
            }
            TeamOutcome::TransferLimit { transfers, agent } => {
                eprintln!(
                    "── stopped: '{agent}' asked for a handover after {transfers}, the most this team allows"
                );
                ExitCode::from(EXIT_BUDGET)
            }
            _ => ExitCode::from(EXIT_HOST_FAILURE),
        },
        Err(AgentError::Setup(message)) => usage_error(&message),
        Err(AgentError::Output(e)) => usage_error(&e.to_string()),
        Err(e) => {
            eprintln!("codeact: {}", terminal_safe(&e.to_string()));
            ExitCode::from(EXIT_HOST_FAILURE)
        }
    }
}

/// `--chat`: one turn per line of stdin until its end; each answer's ScriptOutput
/// line on stdout. Exit 0 at the end of input, 1 when a turn failed.
fn chat(
    agent: &Agent,
    host: &tokio::runtime::Runtime,
    first: Option<&str>,
    resume: Option<&ResumePoint>,
) -> ExitCode {
    use std::io::{BufRead, IsTerminal};
    let started = match resume {
        None => agent.chat().map(|chat| (chat, None)),
        Some(point) => host.block_on(agent.resume_chat(point)),
    };
    let mut chat = match started {
        Ok((chat, cut_short)) => {
            if let Some(output) = cut_short.and_then(|turn| turn.outcome.script_output()) {
                println!("{output}");
            }
            chat
        }
        Err(e) => {
            eprintln!("codeact: {}", terminal_safe(&e.to_string()));
            return ExitCode::from(EXIT_HOST_FAILURE);
        }
    };
    let turn_cancel = TurnCancel::on_ctrl_c(host);
    let prompt = std::io::stdin().is_terminal();
    let mut lines = std::io::stdin().lock().lines();
    let mut pending = first.map(str::to_string);
    let mut failed = false;
    loop {
        let message = match pending.take() {
            Some(message) => message,
            None => {
                if prompt {
                    eprint!("> ");
                }
                match lines.next() {
                    Some(Ok(line)) if line.trim().is_empty() => continue,
                    Some(Ok(line)) => line,
                    Some(Err(_)) | None => break,
                }
            }
        };
        chat.cancel_on(turn_cancel.next_turn());
        match host.block_on(chat.send(&message)) {
            Ok(result) => match result.outcome.script_output() {
                Some(output) => println!("{output}"),
                None => eprintln!("── this turn ended without an answer"),
            },
            Err(e) => {
                failed = true;
                eprintln!("codeact: {}", terminal_safe(&e.to_string()));
            }
        }
    }
    ExitCode::from(if failed { EXIT_HOST_FAILURE } else { EXIT_OK })
}

/// A token cancelled by the first Ctrl-C (the run stops cleanly: the transcript
/// ends with a `cancelled` line and can be resumed); a second Ctrl-C exits at once.
fn cancel_on_ctrl_c(host: &tokio::runtime::Runtime) -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    host.spawn(async move {
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        eprintln!("\ncodeact: cancelling the run (Ctrl-C again to quit at once)");
        cancel.cancel();
        if tokio::signal::ctrl_c().await.is_ok() {
            std::process::exit(i32::from(EXIT_CANCELLED));
        }
    });
    token
}

/// Ctrl-C in a chat: the first cancels the turn under way (the chat goes on with
/// the next line), a second before the next turn starts quits at once.
struct TurnCancel(Arc<std::sync::Mutex<CancellationToken>>);

impl TurnCancel {
    fn on_ctrl_c(host: &tokio::runtime::Runtime) -> Self {
        let current = Arc::new(std::sync::Mutex::new(CancellationToken::new()));
        let watched = current.clone();
        host.spawn(async move {
            while tokio::signal::ctrl_c().await.is_ok() {
                let token = watched.lock().unwrap_or_else(|p| p.into_inner()).clone();
                if token.is_cancelled() {
                    std::process::exit(i32::from(EXIT_CANCELLED));
                }
                eprintln!("\ncodeact: cancelling this turn (Ctrl-C again to quit)");
                token.cancel();
            }
        });
        Self(current)
    }

    /// A fresh token for the turn about to start.
    fn next_turn(&self) -> CancellationToken {
        let token = CancellationToken::new();
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = token.clone();
        token
    }
}

/// Prints a terminal outcome's `ScriptOutput` line and maps it to an exit status.
fn finish(outcome: &Outcome) -> ExitCode {
    if let Some(output) = outcome.script_output() {
        println!("{output}");
    }
    ExitCode::from(match outcome {
        Outcome::FinalResult { .. } | Outcome::Transfer { .. } => EXIT_OK,
        Outcome::StepLimit { .. }
        | Outcome::ErrorBudget { .. }
        | Outcome::RefusalBudget { .. }
        | Outcome::ToolCallBudget { .. }
        | Outcome::JournalBudget { .. }
        | Outcome::TokenBudget { .. }
        | Outcome::DeadlineExceeded { .. } => EXIT_BUDGET,
        Outcome::Cancelled => EXIT_CANCELLED,
        Outcome::AwaitingApproval { .. } => EXIT_AWAITING_APPROVAL,
        Outcome::Refused { .. } | Outcome::ContextWindowExceeded => EXIT_HOST_FAILURE,
        _ => EXIT_HOST_FAILURE,
    })
}
