//! The steps of a run as a person reads them on stderr.
//!
//! Everything written there passes through [`terminal_safe`]: a script, a tool or
//! a model choose much of that text, and a control character reaching a terminal
//! is a command to it (retitle the window, clear the screen, move the cursor,
//! rewrite what was printed before).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::Write;
use std::sync::Mutex;

use codeact::agent::Outcome;
use codeact::agent::{Event, ResumedSession, ToolCallOutcome};
use codeact::chat::Role;
use codeact::output::Validation;

/// Prints events to stderr. Streamed text is printed as it arrives; a reply that
/// was not streamed is printed whole when it joins the conversation.
#[derive(Default)]
pub(crate) struct Printer {
    /// True while the current reply's text has been streamed to the terminal.
    streamed: Mutex<bool>,
}

impl Printer {
    pub fn print(&self, agent: &str, event: &Event) {
        // Formatted whole, then made terminal-safe, then written.
        let mut err: Vec<u8> = Vec::new();
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
            Event::TurnStarted { turn } => writeln!(err, "\n── turn {turn}"),
            Event::ImagesShown { blocks, .. } => {
                writeln!(err, "  {} image(s) shown to the model", blocks.len())
            }
            Event::HistoryCompacted { dropped_turns, .. } => writeln!(
                err,
                "── the history outgrew its budget: the oldest {dropped_turns} turn(s) were dropped"
            ),
            Event::PolicyVerdict {
                tool,
                allowed: false,
                reason,
                ..
            } => writeln!(
                err,
                "  policy refused {}: {}",
                tool.as_deref()
                    .map_or("the script".to_string(), |t| format!("a call of {t}")),
                reason.as_deref().unwrap_or("no reason")
            ),
            Event::PolicyVerdict { .. } => Ok(()),
            Event::ApprovalAwaited { id, tool, args, .. } => writeln!(
                err,
                "  a call of {tool}({}) waits for approval: {id}",
                shorten(&args.to_string())
            ),
            Event::ApprovalDecided {
                tool,
                approved,
                reason,
                decided_by,
                ..
            } => writeln!(
                err,
                "  {} a call of {tool} ({decided_by}){}",
                if *approved { "approved" } else { "denied" },
                reason
                    .as_deref()
                    .map(|r| format!(": {}", shorten(r)))
                    .unwrap_or_default()
            ),
            Event::Resumed {
                steps,
                replayed_scripts,
                replayed_tool_calls,
                session,
            } => match session {
                ResumedSession::Snapshot { step, file } => writeln!(
                    err,
                    "── resumed after step {steps}: the session restored from the snapshot of step {step} ({file}), no script re-run"
                ),
                ResumedSession::Replay { fallback } => {
                    // One line saying why the snapshot was not used, first.
                    let why = fallback
                        .as_deref()
                        .map(|why| {
                            format!(
                                "── no snapshot restored, so the scripts run again: {}\n",
                                shorten(why)
                            )
                        })
                        .unwrap_or_default();
                    writeln!(
                        err,
                        "{why}── resumed after step {steps}: {replayed_scripts} script(s) re-run with {replayed_tool_calls} recorded tool result(s)"
                    )
                }
                _ => Ok(()),
            },
            Event::SnapshotKept { .. } => Ok(()),
            Event::CellStarted { id, .. } => writeln!(err, "  {id} started"),
            Event::CellProgress { id, message, .. } => {
                writeln!(err, "  {id}: {}", shorten(message))
            }
            Event::CellEnded {
                id, state, error, ..
            } => writeln!(
                err,
                "  {id} ended: {}{}",
                serde_json::to_value(state)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                error
                    .as_deref()
                    .map(|e| format!(": {}", shorten(e)))
                    .unwrap_or_default()
            ),
            Event::SnapshotFailed { step, reason } => {
                writeln!(
                    err,
                    "  no snapshot kept after step {step}: {}",
                    shorten(reason)
                )
            }
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
                    Outcome::ToolCallBudget { calls } => {
                        format!("stopped: the tool-call budget ran out after {calls} call(s)")
                    }
                    Outcome::JournalBudget { bytes, limit } => format!(
                        "stopped: the tool calls' results ({bytes} bytes) passed the run's journal budget of {limit}"
                    ),
                    Outcome::TokenBudget { .. } => "stopped: the token budget ran out".to_string(),
                    Outcome::DeadlineExceeded { limit_ms } => {
                        format!("stopped: the run's {limit_ms} ms ran out")
                    }
                    Outcome::Cancelled => {
                        "cancelled (resume it with --resume and the transcript)".to_string()
                    }
                    Outcome::AwaitingApproval { id, tool, .. } => format!(
                        "stopped: the call of {tool} waits for approval (resume the transcript with --approve-call {id} or --deny-call {id})"
                    ),
                    _ => "stopped".to_string(),
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
            Event::Coached { rule, decision, .. } => match decision {
                codeact::agent::CoachDecision::Rewrote { .. } => {
                    writeln!(err, "coach ({rule}): ran a rewrite of the script")
                }
                codeact::agent::CoachDecision::Held { .. } => {
                    writeln!(err, "coach ({rule}): held the final result back")
                }
                _ => Ok(()),
            },
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
                for artifact in &output.artifacts {
                    notes.push(match artifact.bytes {
                        Some(bytes) => {
                            format!("artifact: {} ({bytes} bytes)", artifact.path.display())
                        }
                        None => format!("artifact: {} (not written)", artifact.path.display()),
                    });
                }
                notes.iter().try_for_each(|note| writeln!(err, "{note}"))
            }
            Event::Message { .. } | Event::ModelReply { .. } | Event::Usage { .. } => Ok(()),
            // Events the library adds later are in the transcript, not on the terminal.
            _ => Ok(()),
        };
        if err.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&err);
        let mut stderr = std::io::stderr().lock();
        let _ = stderr.write_all(terminal_safe(&text).as_bytes());
        let _ = stderr.flush();
    }
}

/// `text` with every control character but newline and tab shown as a visible
/// escape (`\x1b`, `\r`, `\u{9b}`), so what a script printed, a model wrote or
/// a tool returned cannot drive the operator's terminal. Applied always, not only
/// on a terminal: logs get the same text. C0 controls, DEL and the C1 range
/// (U+0080–U+009F, which some terminals read as ESC sequences) are escaped; other
/// text is kept as it is. Costs one scan; no copy when nothing needs escaping.
pub(crate) fn terminal_safe(text: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !unsafe_char(c) {
            out.push(c);
            continue;
        }
        let _ = match c {
            '\r' => out.write_str("\\r"),
            c if (c as u32) < 0x80 => write!(out, "\\x{:02x}", c as u32),
            c => write!(out, "\\u{{{:x}}}", c as u32),
        };
    }
    Cow::Owned(out)
}

fn print_logs(err: &mut impl Write, logs: &str) -> std::io::Result<()> {
    for line in logs.lines() {
        writeln!(err, "  │ {line}")?;
    }
    Ok(())
}

fn shorten(text: &str) -> String {
    codeact::agent::cut_middle(text, 2_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// If this fails, a script's print can retitle or clear the operator's terminal.
    #[test]
    fn control_characters_are_shown_as_escapes_but_newlines_and_tabs_stay() {
        assert_eq!(
            terminal_safe("\x1b]0;title\x07\x1b[2Jok\r\n\tnext \u{9b}1m \x7f é"),
            "\\x1b]0;title\\x07\\x1b[2Jok\\r\n\tnext \\u{9b}1m \\x7f é"
        );
        assert!(matches!(terminal_safe("plain\ttext\n"), Cow::Borrowed(_)));
    }
}
