//! The steps of a run as a person reads them on stderr.

use std::io::Write;
use std::sync::Mutex;

use crate::agent::decide::Outcome;
use crate::agent::events::{Event, ToolCallOutcome};
use crate::chat::Role;
use crate::output::final_output::Validation;

/// Prints events to stderr. Streamed text is printed as it arrives; a reply that
/// was not streamed is printed whole when it joins the conversation.
#[derive(Default)]
pub(crate) struct Printer {
    /// True while the current reply's text has been streamed to the terminal.
    streamed: Mutex<bool>,
}

impl Printer {
    pub fn print(&self, agent: &str, event: &Event) {
        let mut err = std::io::stderr().lock();
        let mut streamed = self.streamed.lock().unwrap_or_else(|p| p.into_inner());
        let _ = match event {
            Event::RunStarted { model, runtime, .. } => {
                writeln!(
                    err,
                    "── agent '{agent}' · model {model} · runtime {runtime}"
                )
            }
            Event::ModelRequest { step, .. } => {
                *streamed = false;
                writeln!(err, "\n── step {step} · model")
            }
            Event::TextDelta { text, .. } => {
                *streamed = true;
                write!(err, "{text}").and_then(|()| err.flush())
            }
            Event::Message { message } if message.role == Role::Assistant => {
                if *streamed {
                    writeln!(err)
                } else {
                    writeln!(err, "{}", message.joined_text())
                }
            }
            Event::ScriptStarted { step, .. } => {
                writeln!(err, "── step {step} · running the script")
            }
            Event::ToolCall { name, outcome, .. } => match outcome {
                ToolCallOutcome::Ok(value) => {
                    writeln!(err, "  tool {name} → {}", shorten(&value.to_string()))
                }
                ToolCallOutcome::Error(message) => {
                    writeln!(err, "  tool {name} failed: {}", shorten(message))
                }
            },
            Event::Resumed {
                steps,
                replayed_scripts,
                replayed_tool_calls,
            } => writeln!(
                err,
                "── resumed after step {steps}: {replayed_scripts} script(s) re-run with {replayed_tool_calls} recorded tool result(s)"
            ),
            Event::Observation { value, logs, .. } => print_logs(&mut err, logs)
                .and_then(|()| writeln!(err, "observation: {}", shorten(&value.to_string()))),
            Event::Error { message, logs, .. } => print_logs(&mut err, logs)
                .and_then(|()| writeln!(err, "error: {}", shorten(message))),
            Event::Finished {
                outcome,
                steps,
                usage,
            } => {
                let how = match outcome {
                    Outcome::FinalResult { .. } => "final result".to_string(),
                    Outcome::Transfer { agent_name } => format!("transfer to '{agent_name}'"),
                    Outcome::StepLimit { steps } => {
                        format!("stopped: the step limit of {steps} ran out")
                    }
                    Outcome::ErrorBudget {
                        consecutive_errors, ..
                    } => {
                        format!("stopped: {consecutive_errors} errors in a row")
                    }
                    Outcome::RefusalBudget { refusals, .. } => {
                        format!("stopped: {refusals} final results refused")
                    }
                    Outcome::Refused { .. } => "stopped: the model refused".to_string(),
                    Outcome::ContextWindowExceeded => {
                        "stopped: the conversation outgrew the model's context".to_string()
                    }
                };
                writeln!(
                    err,
                    "\n── agent '{agent}': {how} after {steps} step(s) · {} tokens in, {} out",
                    usage.input_tokens, usage.output_tokens
                )
            }
            Event::Handover { from, to, carried } => writeln!(
                err,
                "\n── '{from}' hands over to '{to}', carrying {} message(s)",
                carried.len()
            ),
            Event::Failed { step, error } => writeln!(err, "\n── failed at step {step}: {error}"),
            Event::ResultRefused {
                reason, refusals, ..
            } => writeln!(
                err,
                "final result refused ({refusals}): {}",
                shorten(reason)
            ),
            Event::FinalOutput { output } => {
                let mut notes = Vec::new();
                if let Validation::BrokenValidator { reason } = &output.validation {
                    notes.push(format!(
                        "warning: the validator is broken, so the result was accepted unchecked: {}",
                        shorten(reason)
                    ));
                }
                if output.truncated {
                    notes.push(format!(
                        "note: the result's record keeps {} of its {} bytes",
                        output.content.len(),
                        output.content_bytes
                    ));
                }
                for path in &output.artifacts {
                    notes.push(format!("artifact: {}", path.display()));
                }
                notes.iter().try_for_each(|note| writeln!(err, "{note}"))
            }
            Event::Message { .. } | Event::ModelReply { .. } | Event::Usage { .. } => Ok(()),
        };
    }
}

fn print_logs(err: &mut impl Write, logs: &str) -> std::io::Result<()> {
    for line in logs.lines() {
        writeln!(err, "  │ {line}")?;
    }
    Ok(())
}

fn shorten(text: &str) -> String {
    crate::agent::cut_middle(text, 2_000)
}
