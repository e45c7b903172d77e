//! `codeact eval`: run a task file against a model on runtimes, and report.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use clap::{Args, Subcommand};

use super::printer::terminal_safe;
use super::{EXIT_HOST_FAILURE, EXIT_OK, LimitArgs, host_runtime, usage_error};
use crate::eval::record::{file_safe, load_records, next_run};
use crate::eval::{EvalRecord, EvalTask, TaskRecord, is_right, load_tasks, render_report};
use codeact::agent::Agent;
use codeact::agent::LoopConfig;
use codeact::agent::Outcome;
use codeact::agent::Transcript;
use codeact::exec::runtime_by_name;
use codeact::model::{ModelSpecError, model_from_spec};
use codeact::output::rfc3339_utc;
use codeact::tools::Tool;
use codeact::tools::{load_tool_manifest, refuse_mcp_servers};

#[derive(Debug, Args)]
pub(crate) struct EvalArgs {
    #[command(subcommand)]
    command: EvalCommand,
}

#[derive(Debug, Subcommand)]
enum EvalCommand {
    /// Run every task of a task file on each runtime, as many times as asked; each
    /// run is written as a record (and each task's transcript) under --out.
    Run(Box<EvalRunArgs>),
    /// Judge every record under --results against the task file and print the
    /// report (Markdown) on stdout.
    Report(EvalReportArgs),
}

#[derive(Debug, Args)]
struct EvalRunArgs {
    /// The task file: JSON Lines of {"id", "task", "answer", "match", "tools"…}.
    #[arg(long, value_name = "FILE", default_value = "cli/eval/tasks.jsonl")]
    tasks: PathBuf,
    /// The command tools the tasks name (a manifest as for `codeact run --tools`).
    #[arg(long, value_name = "FILE", default_value = "cli/eval/tools.json")]
    tools: PathBuf,
    /// The model, as for `codeact run`.
    #[arg(long, value_name = "PROVIDER:NAME")]
    model: String,
    /// Overrides OPENAI_BASE_URL / ANTHROPIC_BASE_URL.
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// A field for every request body, as KEY=VALUE (VALUE as JSON when it
    /// parses, else a string). Repeatable.
    #[arg(long = "model-option", value_name = "KEY=VALUE")]
    model_options: Vec<String>,
    /// A runtime to evaluate; repeatable, in order.
    #[arg(long = "runtime", value_name = "NAME", required = true)]
    runtimes: Vec<String>,
    /// Runs of every task per runtime; each gets the next free run number.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
    /// What these runs measure (e.g. before, after), kept in each record.
    #[arg(long, value_name = "NAME", default_value = "current")]
    label: String,
    /// Only the tasks of these ids (comma-separated).
    #[arg(long, value_name = "IDS", value_delimiter = ',')]
    only: Vec<String>,
    /// Where records and transcripts go.
    #[arg(long, value_name = "DIR", default_value = "cli/eval/results")]
    out: PathBuf,
    /// Model calls per task.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=100))]
    max_steps: u64,
    /// Output token limit per reply.
    #[arg(long, value_name = "N", default_value_t = 1_024)]
    max_tokens: u32,
    /// Who advises the loop: plain or small-model (see `codeact run --coach`).
    #[arg(long, value_name = "COACH", default_value = "plain", value_parser = ["plain", "small-model"])]
    coach: String,
    /// Sampling temperature.
    #[arg(long, value_name = "T", default_value_t = 0.0)]
    temperature: f32,
    #[command(flatten)]
    limits: LimitArgs,
}

#[derive(Debug, Args)]
struct EvalReportArgs {
    /// The task file the records are judged against.
    #[arg(long, value_name = "FILE", default_value = "cli/eval/tasks.jsonl")]
    tasks: PathBuf,
    /// The folder of run records.
    #[arg(long, value_name = "DIR", default_value = "cli/eval/results")]
    results: PathBuf,
}

pub(crate) fn eval(args: &EvalArgs) -> ExitCode {
    match &args.command {
        EvalCommand::Run(run) => eval_run(run),
        EvalCommand::Report(report) => eval_report(report),
    }
}

fn eval_report(args: &EvalReportArgs) -> ExitCode {
    let tasks = match load_tasks(&args.tasks) {
        Ok(tasks) => tasks,
        Err(e) => return usage_error(&e),
    };
    match load_records(&args.results) {
        Ok(records) => {
            let source = format!("`{}`", args.results.display());
            print!("{}", render_report(&tasks, &records, &source));
            ExitCode::from(EXIT_OK)
        }
        Err(e) => usage_error(&e),
    }
}

fn eval_run(args: &EvalRunArgs) -> ExitCode {
    let mut tasks = match load_tasks(&args.tasks) {
        Ok(tasks) => tasks,
        Err(e) => return usage_error(&e),
    };
    if !args.only.is_empty() {
        tasks.retain(|task| args.only.contains(&task.id));
        if tasks.is_empty() {
            return usage_error("--only names no task of the task file");
        }
    }
    let tools = match refuse_mcp_servers(&args.tools, "`codeact eval`")
        .and_then(|()| load_tool_manifest(&args.tools, Duration::from_secs(30)))
    {
        Ok(tools) => tools,
        Err(e) => return usage_error(&format!("--tools: {e}")),
    };
    for task in &tasks {
        if let Some(missing) = task
            .tools
            .iter()
            .find(|name| !tools.iter().any(|tool| &tool.spec().name == *name))
        {
            return usage_error(&format!(
                "task '{}' names the tool '{missing}', which '{}' does not define",
                task.id,
                args.tools.display()
            ));
        }
    }
    for runtime in &args.runtimes {
        if let Err(e) = runtime_by_name(runtime, args.limits.limits()) {
            return usage_error(&e.to_string());
        }
    }
    if let Err(e) = model_from_spec(&args.model, args.base_url.as_deref(), &args.model_options) {
        return match e {
            ModelSpecError::Usage(usage) => usage_error(&usage),
            ModelSpecError::Model(e) => {
                eprintln!("codeact: {}", terminal_safe(&e.to_string()));
                ExitCode::from(EXIT_HOST_FAILURE)
            }
        };
    }
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        return usage_error(&format!("cannot create '{}': {e}", args.out.display()));
    }
    let host = match host_runtime() {
        Ok(host) => host,
        Err(code) => return code,
    };
    for runtime in &args.runtimes {
        for _ in 0..args.runs {
            let existing = load_records(&args.out).unwrap_or_default();
            let mut record = EvalRecord {
                label: args.label.clone(),
                runner: "codeact".into(),
                runtime: runtime.clone(),
                model: args.model.clone(),
                coach: Some(args.coach.clone()),
                run: next_run(&existing, &args.label, "codeact", runtime),
                started: rfc3339_utc(SystemTime::now()),
                tasks: Vec::new(),
            };
            let transcripts = args
                .out
                .join("transcripts")
                .join(file_safe(&args.label))
                .join(file_safe(runtime))
                .join(format!("run{}", record.run));
            if let Err(e) = std::fs::create_dir_all(&transcripts) {
                return usage_error(&format!("cannot create '{}': {e}", transcripts.display()));
            }
            for task in &tasks {
                let done = host.block_on(run_task(args, runtime, task, &tools, &transcripts));
                eprintln!(
                    "{} {runtime} run {} {}: {} ({}) in {} step(s), {:.1} s",
                    args.label,
                    record.run,
                    task.id,
                    if is_right(task, done.answer.as_ref()) {
                        "right"
                    } else {
                        "wrong"
                    },
                    done.outcome,
                    done.steps,
                    done.wall_ms as f64 / 1000.0
                );
                record.tasks.push(done);
                if let Err(e) = record.save(&args.out) {
                    eprintln!("codeact: {e}");
                    return ExitCode::from(EXIT_HOST_FAILURE);
                }
            }
        }
    }
    ExitCode::from(EXIT_OK)
}

/// One task, start to end, with a transcript; a host failure is recorded, not fatal.
async fn run_task(
    args: &EvalRunArgs,
    runtime_name: &str,
    task: &EvalTask,
    tools: &[Tool],
    transcripts: &Path,
) -> TaskRecord {
    let started = Instant::now();
    let failed = |error: String| TaskRecord {
        id: task.id.clone(),
        outcome: "host_error".into(),
        answer: None,
        steps: 0,
        input_tokens: 0,
        output_tokens: 0,
        wall_ms: 0,
        error: Some(error),
    };
    let (model, runtime) = match (
        model_from_spec(&args.model, args.base_url.as_deref(), &args.model_options),
        runtime_by_name(runtime_name, args.limits.limits()),
    ) {
        (Ok(model), Ok(runtime)) => (model, runtime),
        (Err(ModelSpecError::Usage(e)), _) => return failed(e),
        (Err(ModelSpecError::Model(e)), _) => return failed(e.to_string()),
        (_, Err(e)) => return failed(e.to_string()),
    };
    let chosen = tools
        .iter()
        .filter(|tool| task.tools.contains(&tool.spec().name))
        .cloned();
    let mut builder = Agent::builder(model, runtime)
        .tools(chosen)
        .config(LoopConfig {
            max_steps: args.max_steps as usize,
            ..LoopConfig::default()
        })
        .max_tokens(args.max_tokens)
        .temperature(args.temperature);
    if let Ok(coach) = codeact::agent::coach::by_name(&args.coach) {
        builder = builder.shared_coach(coach);
    }
    let path = transcripts.join(format!("{}.jsonl", file_safe(&task.id)));
    match Transcript::create(&path) {
        Ok(transcript) => builder = builder.listener(transcript.listener()),
        Err(e) => return failed(format!("cannot create '{}': {e}", path.display())),
    }
    let agent = match builder.build() {
        Ok(agent) => agent,
        Err(e) => return failed(e.to_string()),
    };
    let run = agent.run(&task.task).await;
    let wall_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    match run {
        Ok(run) => {
            let outcome = serde_json::to_value(&run.outcome)
                .ok()
                .and_then(|v| v.get("outcome").and_then(|o| o.as_str().map(String::from)))
                .unwrap_or_else(|| "unknown".into());
            let (answer, error) = match &run.outcome {
                Outcome::FinalResult { value } => (Some(value.clone()), None),
                Outcome::ErrorBudget { last_error, .. } => (None, Some(last_error.clone())),
                Outcome::RefusalBudget { last_reason, .. } => (None, Some(last_reason.clone())),
                _ => (None, None),
            };
            TaskRecord {
                id: task.id.clone(),
                outcome,
                answer,
                steps: run.steps,
                input_tokens: run.usage.input_tokens,
                output_tokens: run.usage.output_tokens,
                wall_ms,
                error,
            }
        }
        Err(e) => TaskRecord {
            wall_ms,
            ..failed(e.to_string())
        },
    }
}
