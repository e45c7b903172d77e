//! The `tracing` spans a run's steps open, for whoever collects spans
//! (`codeact serve` and `codeact worker` export them over OTLP when an endpoint
//! is configured; see the `codeact-cli` package's `serve::telemetry`):
//!
//! - `model`: one model call (`codeact.agent`, `codeact.step`,
//!   `gen_ai.request.model`, and once the reply is in, `gen_ai.usage.*` and
//!   `codeact.stop_reason`);
//! - `script`: one script (`codeact.runtime`, the code, and once it ended,
//!   `codeact.outcome` with the value or error and what it printed);
//! - `tool`: one tool call the script made, a child of its `script` span
//!   whichever thread the script runs on (`codeact.tool.name`, its arguments,
//!   `codeact.tool.outcome`, the result or error, `codeact.tool.replayed` when a
//!   resumed run served it from its journal);
//! - `replay`: one finished script re-run to rebuild a resumed run's session.
//!
//! Each opens inside whatever span is current (the run's, in a server), so the
//! caller decides what a run is. Field names are OpenTelemetry attribute names;
//! a failure sets `otel.status_code = "ERROR"` and `error.message`.
//!
//! Code, arguments, values and printed output are cut to [`ATTRIBUTE_CAP`]
//! bytes (1 KiB), ending in `…` when cut, with the full size beside them in a
//! `….bytes` field: a span is an index into the run, whose journal holds the
//! whole text, and collectors refuse or cut large attributes anyway. Without a
//! subscriber that wants them the spans are disabled, and nothing is copied or
//! formatted for them.

use serde_json::Value;
use tracing::Span;
use tracing::field::Empty;

use crate::output::script_output::ScriptOutput;

/// The most bytes of code, arguments, values or output one span field holds:
/// 1 KiB, the `…` that marks a cut included.
pub const ATTRIBUTE_CAP: usize = 1024;

/// `text` cut to at most [`ATTRIBUTE_CAP`] bytes on a character boundary, with
/// `…` at the end when it was cut.
pub fn capped(text: &str) -> String {
    if text.len() <= ATTRIBUTE_CAP {
        return text.to_string();
    }
    let mut end = ATTRIBUTE_CAP - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// `n` as the signed integer OpenTelemetry attributes hold (the `tracing`
/// bridge would send an unsigned one as a string).
pub fn int(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

/// Records `text`, capped, in `field` and its full size in `{field}.bytes`
/// (both declared by the span).
fn record_text(span: &Span, field: &'static str, bytes_field: &'static str, text: &str) {
    span.record(field, capped(text).as_str());
    span.record(bytes_field, int(text.len()));
}

/// Marks `span` failed, saying why.
pub fn record_error(span: &Span, message: &str) {
    if span.is_disabled() {
        return;
    }
    span.record("otel.status_code", "ERROR");
    span.record("error.message", capped(message).as_str());
}

/// The span of one model call.
pub(crate) fn model(agent: &str, step: usize, model: &str) -> Span {
    tracing::info_span!(
        "model",
        codeact.agent = agent,
        codeact.step = int(step),
        gen_ai.request.model = model,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        codeact.stop_reason = Empty,
        otel.status_code = Empty,
        error.message = Empty,
    )
}

/// Records the reply of a model call in its span.
pub(crate) fn model_replied(span: &Span, response: &crate::chat::ModelResponse) {
    if span.is_disabled() {
        return;
    }
    span.record(
        "gen_ai.usage.input_tokens",
        int(response.usage.input_tokens),
    );
    span.record(
        "gen_ai.usage.output_tokens",
        int(response.usage.output_tokens),
    );
    let reason = serde_json::to_value(&response.stop_reason)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    span.record("codeact.stop_reason", reason);
}

/// The span of one script (`name` is `script`, or `replay` for a finished
/// script re-run on resume).
pub(crate) fn script(agent: &str, step: usize, runtime: &str, code: &str) -> Span {
    let span = tracing::info_span!(
        "script",
        codeact.agent = agent,
        codeact.step = int(step),
        codeact.runtime = runtime,
        codeact.code = Empty,
        codeact.code.bytes = Empty,
        codeact.outcome = Empty,
        codeact.output = Empty,
        codeact.output.bytes = Empty,
        codeact.logs = Empty,
        codeact.logs.bytes = Empty,
        otel.status_code = Empty,
        error.message = Empty,
    );
    if !span.is_disabled() {
        record_text(&span, "codeact.code", "codeact.code.bytes", code);
    }
    span
}

/// The span of a finished script re-run to rebuild a resumed run's session.
pub(crate) fn replay(agent: &str, step: usize) -> Span {
    tracing::info_span!("replay", codeact.agent = agent, codeact.step = int(step))
}

/// Records how a script ended in its span: `codeact.outcome` (`observation`,
/// `error`, `final_result`, `transfer`), the value or
/// error as `codeact.output`, what it printed as `codeact.logs`. A script error
/// is the model's to read, not a failure of the run: the span's status stays
/// unset.
pub(crate) fn script_ended(span: &Span, output: &ScriptOutput, logs: &str) {
    if span.is_disabled() {
        return;
    }
    let (outcome, text) = match output {
        ScriptOutput::Observation { value } => ("observation", json_text(value)),
        ScriptOutput::Error { message } => ("error", message.clone()),
        ScriptOutput::FinalResult { value, .. } => ("final_result", json_text(value)),
        ScriptOutput::TransferToAgent { agent_name } => ("transfer", agent_name.clone()),
    };
    span.record("codeact.outcome", outcome);
    record_text(span, "codeact.output", "codeact.output.bytes", &text);
    record_text(span, "codeact.logs", "codeact.logs.bytes", logs);
}

/// The span of one tool call, a child of `parent` (the script that made it)
/// when there is one, else of the current span.
pub(crate) fn tool(parent: &Span, step: usize, name: &str, args: &Value) -> Span {
    let parent = parent.id().or_else(|| Span::current().id());
    let span = tracing::info_span!(
        parent: parent,
        "tool",
        codeact.step = int(step),
        codeact.tool.name = name,
        codeact.tool.args = Empty,
        codeact.tool.args.bytes = Empty,
        codeact.tool.outcome = Empty,
        codeact.tool.result = Empty,
        codeact.tool.result.bytes = Empty,
        codeact.tool.replayed = Empty,
        otel.status_code = Empty,
        error.message = Empty,
    );
    if !span.is_disabled() {
        record_text(
            &span,
            "codeact.tool.args",
            "codeact.tool.args.bytes",
            &json_text(args),
        );
    }
    span
}

/// Records what a tool call gave the script: `codeact.tool.outcome` `ok` with
/// the value, or `error` with the message (and the span's status ERROR).
pub(crate) fn tool_ended(span: &Span, result: &Result<Value, codeact_runtime::ToolError>) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok(value) => {
            span.record("codeact.tool.outcome", "ok");
            record_text(
                span,
                "codeact.tool.result",
                "codeact.tool.result.bytes",
                &json_text(value),
            );
        }
        Err(error) => {
            span.record("codeact.tool.outcome", "error");
            record_error(span, &error.message);
        }
    }
}

fn json_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// If this fails, a span attribute can exceed its documented cap or split a
    /// character (an invalid string the exporter would refuse).
    #[test]
    fn long_text_is_cut_to_the_cap_on_a_character_boundary() {
        let short = "let x = 1;";
        assert_eq!(capped(short), short);
        let exact = "a".repeat(ATTRIBUTE_CAP);
        assert_eq!(capped(&exact), exact);
        let long = "é".repeat(ATTRIBUTE_CAP);
        let cut = capped(&long);
        assert!(cut.len() <= ATTRIBUTE_CAP, "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert!(cut.trim_end_matches('…').chars().all(|c| c == 'é'));
    }
}
