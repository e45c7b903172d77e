//! Prompt text rendered from the templates under `prompts/`, in strict mode: a
//! variable the template uses but the host did not supply is an error, not a blank.
//! The runtime's card comes from the runtime crate; everything else the host says
//! to the model is a [`Prompts`] template.

mod templates;

pub use templates::{Prompts, TemplateError};

use std::borrow::Cow;

use codeact_runtime::{Runtime, ToolSpec};
use minijinja::{Environment, UndefinedBehavior, context};
use serde::Serialize;

/// A template failed to render (a bug in a template, caught by the snapshot tests).
#[derive(Debug, thiserror::Error)]
#[error("prompt template '{template}' failed: {source}")]
pub struct PromptError {
    template: String,
    #[source]
    source: minijinja::Error,
}

/// An agent a script may hand over to, as the model is told about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct TransferTarget {
    /// The name `transfer_to_agent` takes.
    pub name: String,
    /// What that agent does. Default: empty (only the name is shown).
    #[serde(default)]
    pub description: String,
}

impl TransferTarget {
    /// A target with a description.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
        }
    }
}

#[derive(Serialize)]
struct ToolView<'a> {
    name: &'a str,
    /// The operator's description as it is; a third party's fenced.
    description: Cow<'a, str>,
    signature: String,
    /// What a script writes before the parenthesis: `tools.add`, `add`,
    /// `github.create_issue`.
    call: String,
}

#[derive(Serialize)]
struct LimitsView {
    wall_time_ms: u128,
    max_operations: u64,
    max_memory_mb: usize,
    max_call_depth: usize,
    max_output_bytes: usize,
}

/// Renders `runtime`'s prompt card: how to return results, call `tools`, what
/// persists, what is unavailable, and the limits. `transfer_targets` are the agents
/// the script may hand over to; with none, transfers are not mentioned.
pub fn render_card(
    runtime: &dyn Runtime,
    tools: &[ToolSpec],
    transfer_targets: &[TransferTarget],
) -> Result<String, PromptError> {
    let info = runtime.info();
    let limits = runtime.limits();
    let tools: Vec<ToolView<'_>> = tools
        .iter()
        .map(|tool| {
            let signature = runtime.tool_signature(tool);
            // Names are identifiers, so the signature's first `(` ends the call.
            let call = signature
                .split_once('(')
                .map_or(tool.name.as_str(), |(call, _)| call)
                .to_string();
            ToolView {
                name: &tool.name,
                description: if tool.untrusted_description && !tool.description.trim().is_empty() {
                    Cow::Owned(format!(
                        "\n{}",
                        crate::untrusted::fence_stable(&tool.description)
                    ))
                } else {
                    Cow::Borrowed(&tool.description)
                },
                signature,
                call,
            }
        })
        .collect();
    // Whether a server's tools are methods of its object here (`github.create_issue`,
    // not JavaScript's `tools.add`): the card then says so.
    let namespaced = tools
        .iter()
        .any(|tool| tool.call.contains('.') && !tool.call.starts_with("tools."));
    // The card's "no file access" gives way to the file tools when a host gave them.
    let has_file_tools = tools
        .iter()
        .any(|tool| tool.name == crate::files::READ_TEXT_TOOL);
    let limits = LimitsView {
        wall_time_ms: limits.wall_time.as_millis(),
        max_operations: limits.max_operations,
        max_memory_mb: limits.max_memory_bytes / (1024 * 1024),
        max_call_depth: limits.max_call_depth,
        max_output_bytes: limits.max_output_bytes,
    };
    render_strict(
        info.name,
        info.card_template,
        context! {
            language => info.language,
            fence => info.fence_tags.first().copied().unwrap_or(info.name),
            tools => tools,
            files => has_file_tools,
            namespaced => namespaced,
            limits => limits,
            transfer_targets => transfer_targets,
        },
    )
}

/// Renders the system prompt: the CodeAct instructions, the rule for fenced
/// untrusted text, the agent's own `instructions` (omitted when blank), the
/// runtime's card with `tools` and `transfer_targets`, and last the output spec's
/// text (`output`, from [`OutputSpec::render`](crate::OutputSpec::render); omitted
/// when blank). Uses the default templates; an agent renders its own
/// [`Prompts`].
pub fn render_system_prompt(
    runtime: &dyn Runtime,
    tools: &[ToolSpec],
    transfer_targets: &[TransferTarget],
    instructions: &str,
    output: &str,
) -> Result<String, PromptError> {
    render_system_prompt_with(
        &Prompts::default(),
        runtime,
        tools,
        transfer_targets,
        instructions,
        output,
        None,
    )
}

/// [`render_system_prompt`] with the `system` and `fence_rule` templates of
/// `prompts`; with `cells` (scripts may start cells, and `cell_specs` holds
/// the cell functions), also the `cells` template after the card.
pub(crate) fn render_system_prompt_with(
    prompts: &Prompts,
    runtime: &dyn Runtime,
    tools: &[ToolSpec],
    transfer_targets: &[TransferTarget],
    instructions: &str,
    output: &str,
    cells: Option<(&crate::agent::CellLimits, &[ToolSpec])>,
) -> Result<String, PromptError> {
    let card = render_card(runtime, tools, transfer_targets)?;
    let info = runtime.info();
    let cells = match cells {
        None => String::new(),
        Some((limits, specs)) => {
            use crate::agent::cell_news::{
                CANCEL_CELL_TOOL, NOTIFY_TOOL, POLL_CELL_TOOL, START_CELL_TOOL, WAIT_CELL_TOOL,
            };
            // What a script writes before the parenthesis (`tools.start_cell`):
            // the card lists the whole signatures.
            let signature = |name: &str| {
                specs
                    .iter()
                    .find(|spec| spec.name == name)
                    .and_then(|spec| {
                        let signature = runtime.tool_signature(spec);
                        signature.split_once('(').map(|(call, _)| call.to_string())
                    })
                    .unwrap_or_else(|| name.to_string())
            };
            prompts.try_render(
                "cells",
                &context! {
                    language => info.language,
                    start => signature(START_CELL_TOOL),
                    poll => signature(POLL_CELL_TOOL),
                    wait => signature(WAIT_CELL_TOOL),
                    cancel => signature(CANCEL_CELL_TOOL),
                    notify => signature(NOTIFY_TOOL),
                    max_live => limits.max_live,
                    wall_time_ms => runtime.limits().wall_time.as_millis(),
                },
            )?
        }
    };
    prompts.try_render(
        "system",
        &context! {
            language => info.language,
            fence => info.fence_tags.first().copied().unwrap_or(info.name),
            instructions => instructions.trim(),
            card => card,
            fence_rule => prompts.try_render("fence_rule", &context! {})?,
            cells => cells,
            output => output.trim(),
        },
    )
}

/// Renders `source` with `values` in strict mode (an undefined variable is an
/// error), trimming the line breaks around block tags.
pub(crate) fn render_strict(
    name: &str,
    source: &str,
    values: minijinja::Value,
) -> Result<String, PromptError> {
    let error = |source| PromptError {
        template: name.to_string(),
        source,
    };
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.add_template(name, source).map_err(error)?;
    env.get_template(name)
        .map_err(error)?
        .render(values)
        .map_err(error)
}
