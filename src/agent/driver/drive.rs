//! The loop, in one sitting: do what the conversation decided (call the model,
//! run a script, check a result), hand it what came back, and report the events
//! it returns, until it decides to finish.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use tracing::Instrument;

use super::{Agent, AgentError};
use crate::agent::decide::{Conversation, Decision, Next};
use crate::agent::events::Event;
use crate::agent::outcome::Outcome;
use crate::agent::resume::{HostTools, ResumePoint};
use crate::chat::{ModelRequest, StreamEvent};
use crate::exec::session::ScriptSession;
use crate::output::final_output::{FinalOutput, Validation, artifact_path};
use crate::output::spec::{Check, OutputContract, RefusedBy, content_text};

impl Agent {
    /// Runs the loop on `conversation` in a fresh session (rebuilt first from
    /// `resume`'s scripts, for a resumed run) until the conversation decides to
    /// finish; returns how, with the record of an accepted result.
    pub(super) async fn drive(
        &self,
        conversation: &mut Conversation,
        system_prompt: &str,
        contract: &OutputContract,
        working_dir: &Path,
        resume: Option<&ResumePoint>,
    ) -> Result<(Outcome, Option<FinalOutput>), AgentError> {
        let tools = Arc::new(HostTools::new(
            self.tools.clone(),
            self.name.clone(),
            self.listeners.clone(),
        ));
        let mut session = ScriptSession::start(&*self.runtime, tools.clone())?;
        let mut decision = match resume {
            None => conversation.start(),
            Some(point) => {
                self.rebuild(point, &mut session, &tools).await?;
                conversation.resume(point.pending_reply.as_ref())
            }
        };
        let mut final_output = None;
        loop {
            self.report(&decision.events);
            let step = decision.step;
            decision = match decision.next {
                Next::Finish(outcome) => return Ok((outcome, final_output)),
                Next::CallModel => {
                    self.call_model(conversation, system_prompt, step)
                        .instrument(tracing::info_span!("model", step))
                        .await?
                }
                Next::RunScript { code } => {
                    self.emit(|| Event::ScriptStarted {
                        step,
                        code: code.clone(),
                    });
                    tools.set_step(step);
                    let run = session
                        .run(code)
                        .instrument(tracing::info_span!("script", step))
                        .await?;
                    conversation.on_completion(&run.completion, &run.logs).0
                }
                Next::CheckResult { value, artifacts } => {
                    let (check, artifacts) =
                        check_result(contract, working_dir, &value, &artifacts).await;
                    let mut decision = conversation.on_check(value.clone(), &check);
                    if let Next::Finish(Outcome::FinalResult { .. }) = &decision.next {
                        let output = self.final_output(contract, &check, &value, artifacts);
                        decision.events.push(Event::FinalOutput {
                            output: output.clone(),
                        });
                        final_output = Some(output);
                    }
                    decision
                }
            };
        }
    }

    /// Sends the conversation to the model (streaming its text as events when
    /// the agent streams) and hands the reply to the conversation.
    async fn call_model(
        &self,
        conversation: &mut Conversation,
        system_prompt: &str,
        step: usize,
    ) -> Result<Decision, AgentError> {
        let mut request = ModelRequest::new(system_prompt, conversation.messages().to_vec());
        request.max_tokens = self.max_tokens;
        request.temperature = conversation.temperature(self.temperature);
        self.emit(|| Event::ModelRequest {
            step,
            messages: request.messages.len(),
        });
        let response = if self.stream {
            let mut on_event = |event: StreamEvent| {
                if let StreamEvent::TextDelta { text } = event {
                    self.emit(|| Event::TextDelta { step, text });
                }
            };
            self.model.stream(&request, &mut on_event).await?
        } else {
            self.model.complete(&request).await?
        };
        Ok(conversation.on_reply(&response))
    }

    /// The record of an accepted result: its content (cut to the configured
    /// size), format, artifacts, and how it was validated (flagged when a broken
    /// validator let it through unchecked).
    fn final_output(
        &self,
        contract: &OutputContract,
        check: &Check,
        value: &Value,
        artifacts: Vec<PathBuf>,
    ) -> FinalOutput {
        let validation = match check {
            Check::Unchecked { reason } => Validation::BrokenValidator {
                reason: reason.clone(),
            },
            _ if contract.is_empty() => Validation::NotRequired,
            _ => Validation::Passed,
        };
        FinalOutput::new(
            &content_text(value),
            self.config.max_output_content_bytes,
            contract.spec().format.clone(),
            &self.name,
            artifacts,
            validation,
        )
    }
}

/// Checks a submitted result: its artifact paths first (relative to
/// `working_dir`, normalised), then the output contract, on a thread allowed to
/// block (a validator may run up to its time limit).
async fn check_result(
    contract: &OutputContract,
    working_dir: &Path,
    value: &Value,
    declared: &[String],
) -> (Check, Vec<PathBuf>) {
    let mut artifacts = Vec::with_capacity(declared.len());
    for path in declared {
        match artifact_path(working_dir, path) {
            Ok(path) => artifacts.push(path),
            Err(error) => {
                let refused = Check::Refused {
                    by: RefusedBy::Artifact,
                    reason: error.host_words().to_string(),
                    quoted: error.quoted(),
                };
                return (refused, Vec::new());
            }
        }
    }
    if contract.is_empty() {
        return (Check::Passed, artifacts);
    }
    let panicked = |what: String| Check::Refused {
        by: RefusedBy::BrokenValidator,
        reason: format!("the check failed inside the host: {what}"),
        quoted: None,
    };
    let in_place = tokio::runtime::Handle::try_current()
        .is_ok_and(|handle| handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    let check = if in_place {
        tokio::task::block_in_place(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| contract.check(value)))
        })
        .unwrap_or_else(|_| panicked("it panicked".into()))
    } else {
        let (contract, value) = (contract.clone(), value.clone());
        tokio::task::spawn_blocking(move || contract.check(&value))
            .await
            .unwrap_or_else(|e| panicked(e.to_string()))
    };
    (check, artifacts)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::agent::decide::LoopConfig;
    use crate::chat::Message;
    use crate::model::{ModelError, ReplayModel};
    use codeact_rhai::RhaiRuntime;
    use codeact_runtime::Limits;

    fn recorded(replies: &[&str], config: LoopConfig) -> (Agent, Arc<Mutex<Vec<Event>>>) {
        let events = Arc::new(Mutex::new(Vec::new()));
        let seen = events.clone();
        let agent = Agent::builder(
            Arc::new(ReplayModel::new(replies.iter().copied())),
            Arc::new(RhaiRuntime::new(Limits::default())),
        )
        .config(config)
        .on_event(move |event| seen.lock().expect("not poisoned").push(event.clone()))
        .build()
        .expect("agent builds");
        (agent, events)
    }

    #[tokio::test]
    async fn a_reply_without_code_is_reported_as_an_error_of_its_step() {
        let (agent, events) = recorded(
            &["I think it is 4.", "```rhai\nfinal_result(4)\n```"],
            LoopConfig::default(),
        );
        let run = agent.run("2 + 2?").await.expect("run finishes");
        assert_eq!(run.steps, 2);
        let events = events.lock().expect("not poisoned");
        assert!(events.iter().any(|e| matches!(e, Event::Error { step: 1, message, .. } if message.contains("no code block"))));
    }

    #[tokio::test]
    async fn the_event_stream_records_every_message_once_in_order() {
        let (agent, events) = recorded(
            &[
                "```rhai\nobservation(1)\n```",
                "```rhai\nfinal_result(2)\n```",
            ],
            LoopConfig::default(),
        );
        let run = agent.run("Go.").await.expect("run finishes");
        let events = events.lock().expect("not poisoned");
        let messages: Vec<&Message> = events
            .iter()
            .filter_map(|e| match e {
                Event::Message { message } => Some(message),
                _ => None,
            })
            .collect();
        let expected: Vec<&Message> = run.messages.iter().collect();
        assert_eq!(messages, expected);
        assert!(matches!(events.first(), Some(Event::RunStarted { .. })));
        assert!(matches!(
            events.last(),
            Some(Event::Finished { steps: 2, .. })
        ));
    }

    #[tokio::test]
    async fn a_model_failure_is_reported_before_the_error_returns() {
        let (agent, events) = recorded(&["```rhai\nobservation(1)\n```"], LoopConfig::default());
        let err = agent.run("Go.").await.expect_err("the replay runs out");
        assert!(matches!(
            err,
            AgentError::Model(ModelError::ReplayExhausted {
                replies: 1,
                asked: 2
            })
        ));
        let events = events.lock().expect("not poisoned");
        assert!(matches!(events.last(), Some(Event::Failed { step: 2, .. })));
    }
}
