//! `codeact run`: a CodeAct agent on a task.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;

use super::printer::Printer;
use super::{EXIT_BUDGET, EXIT_HOST_FAILURE, EXIT_OK, LimitArgs, ToolArgs, usage_error};
use crate::model::{
    AnthropicClient, AnthropicConfig, ModelClient, ModelError, OpenAiClient, OpenAiConfig,
    ReplayModel,
};
use crate::{Agent, LoopConfig, Outcome, Transcript, runtime_by_name};

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The model: openai:NAME (OPENAI_BASE_URL, OPENAI_API_KEY), anthropic:NAME
    /// (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL) or replay:FILE ({"replies": […]}).
    #[arg(long, value_name = "PROVIDER:NAME")]
    model: String,
    /// Overrides OPENAI_BASE_URL / ANTHROPIC_BASE_URL.
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// The runtime the model's scripts run in.
    #[arg(long, default_value = "rhai")]
    runtime: String,
    /// Model calls before the run stops [default: 12].
    #[arg(long, value_name = "N", default_value_t = 12, value_parser = clap::value_parser!(u64).range(1..=1000))]
    max_steps: u64,
    /// Errors in a row before the run stops [default: 4].
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=1000))]
    max_errors: u64,
    /// Append every message and event to this JSONL file as it happens.
    #[arg(long, value_name = "FILE")]
    transcript: Option<PathBuf>,
    /// An agent the script may hand over to; the run ends on the transfer. Repeatable.
    #[arg(long = "transfer-target", value_name = "NAME")]
    transfer_targets: Vec<String>,
    /// Output token limit per reply [default: 2048].
    #[arg(long, value_name = "N", default_value_t = 2_048)]
    max_tokens: u32,
    /// Sampling temperature [default: 0].
    #[arg(long, value_name = "T", default_value_t = 0.0)]
    temperature: f32,
    /// Wait for whole replies instead of streaming them.
    #[arg(long)]
    no_stream: bool,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    tools: ToolArgs,
    /// The task, in words.
    #[arg(value_name = "TASK")]
    task: String,
}

/// Builds the model client a `--model` spec names.
fn model_client(
    spec: &str,
    base_url: Option<&str>,
) -> Result<Arc<dyn ModelClient>, Result<String, ModelError>> {
    let (provider, name) = spec.split_once(':').ok_or_else(|| {
        Ok(format!(
            "--model '{spec}' must be openai:NAME, anthropic:NAME or replay:FILE"
        ))
    })?;
    if name.trim().is_empty() {
        return Err(Ok(format!("--model '{spec}' names no model")));
    }
    match provider {
        "openai" => {
            let mut config = OpenAiConfig::from_env(name);
            if let Some(url) = base_url {
                config = config.with_base_url(url);
            }
            Ok(Arc::new(OpenAiClient::new(config).map_err(Err)?))
        }
        "anthropic" => {
            let mut config = AnthropicConfig::from_env(name);
            if let Some(url) = base_url {
                config = config.with_base_url(url);
            }
            Ok(Arc::new(AnthropicClient::new(config).map_err(Err)?))
        }
        "replay" => Ok(Arc::new(
            ReplayModel::from_file(name).map_err(|e| Ok(e.to_string()))?,
        )),
        other => Err(Ok(format!(
            "unknown model provider '{other}'; use openai, anthropic or replay"
        ))),
    }
}

pub(crate) fn run(args: &RunArgs) -> ExitCode {
    let model = match model_client(&args.model, args.base_url.as_deref()) {
        Ok(model) => model,
        Err(Ok(usage)) => return usage_error(&usage),
        Err(Err(model_error)) => {
            eprintln!("codeact: {model_error}");
            return ExitCode::from(EXIT_HOST_FAILURE);
        }
    };
    let runtime = match runtime_by_name(&args.runtime, args.limits.limits()) {
        Ok(runtime) => runtime,
        Err(e) => return usage_error(&e.to_string()),
    };
    let tools = match args.tools.tools() {
        Ok(tools) => tools,
        Err(e) => return usage_error(&e),
    };
    let printer = Arc::new(Printer::default());
    let mut builder = Agent::builder(model, runtime)
        .tools(tools)
        .config(LoopConfig {
            max_steps: args.max_steps as usize,
            max_consecutive_errors: args.max_errors as usize,
            transfer_targets: args.transfer_targets.clone(),
            ..LoopConfig::default()
        })
        .max_tokens(args.max_tokens)
        .temperature(args.temperature)
        .stream(!args.no_stream)
        .listener(Arc::new(move |agent: &str, event: &crate::Event| printer.print(agent, event)));
    if let Some(path) = &args.transcript {
        match Transcript::create(path) {
            Ok(transcript) => builder = builder.listener(transcript.listener()),
            Err(e) => {
                return usage_error(&format!(
                    "cannot create the transcript '{}': {e}",
                    path.display()
                ));
            }
        }
    }
    let agent = match builder.build() {
        Ok(agent) => agent,
        Err(e) => return usage_error(&e.to_string()),
    };
    let host = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(host) => host,
        Err(e) => {
            eprintln!("codeact: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_HOST_FAILURE);
        }
    };
    match host.block_on(agent.run(&args.task)) {
        Ok(result) => {
            if let Some(output) = result.outcome.script_output() {
                println!("{output}");
            }
            ExitCode::from(match result.outcome {
                Outcome::FinalResult { .. } | Outcome::Transfer { .. } => EXIT_OK,
                Outcome::StepLimit { .. } | Outcome::ErrorBudget { .. } => EXIT_BUDGET,
                Outcome::Refused { .. } | Outcome::ContextWindowExceeded => EXIT_HOST_FAILURE,
            })
        }
        Err(e) => {
            eprintln!("codeact: {e}");
            ExitCode::from(EXIT_HOST_FAILURE)
        }
    }
}
