//! The loop, in one sitting: do what the conversation decided (call the model,
//! run a script, check a result), hand it what came back, and report the events
//! it returns, until it decides to finish.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::RequestOutput;
use super::{Agent, AgentError};
use crate::agent::approval::Grant;
use crate::agent::decide::{Conversation, Decision, Next};
use crate::agent::events::Event;
use crate::agent::host_tools::{CallBudgets, HostTools};
use crate::agent::outcome::Outcome;
use crate::agent::resume::ResumePoint;
use crate::agent::snapshots::{Keeper, new_run_id};
use crate::agent::spans;
use crate::chat::{ModelRequest, StreamEvent};
use crate::exec::session::ScriptSession;
use crate::output::final_output::{Artifact, FinalOutput, Validation, artifact_path};
use crate::output::spec::{Check, OutputContract, RefusedBy, content_text};

/// What one stretch of the loop works with: the session and its tools (a chat
/// keeps them from turn to turn), the prompt and contract, and the cancel token.
pub(super) struct Turn<'a> {
    pub session: &'a mut ScriptSession,
    pub tools: &'a Arc<HostTools>,
    /// The run's cells, whose news joins each step's feedback.
    pub cells: &'a crate::agent::cells::CellsGuard,
    pub system_prompt: &'a str,
    pub contract: &'a OutputContract,
    pub working_dir: &'a Path,
    pub cancel: Option<&'a CancellationToken>,
    /// Keeps the session's snapshot after each finished script; `None`: no
    /// snapshots.
    pub snapshots: Option<&'a mut Keeper>,
}

impl Agent {
    /// Runs the loop on `conversation` in a fresh session (for a resumed run,
    /// restored from its snapshot or rebuilt from its scripts) until the
    /// conversation decides to finish; returns how, with the record of an
    /// accepted result. With a snapshot directory, the session's snapshot is kept
    /// there after each finished script, under the resumed run's id or a new
    /// one.
    pub(super) async fn drive(
        &self,
        conversation: &mut Conversation,
        system_prompt: &str,
        contract: &OutputContract,
        working_dir: &Path,
        resume: Option<&ResumePoint>,
        request: &RequestOutput,
    ) -> Result<(Outcome, Option<FinalOutput>), AgentError> {
        let cancel = request.cancel.as_ref();
        let (tools, cells) = self.host_tools(cancel, request.grants.clone());
        let snapshots = request.snapshots.as_ref();
        let (mut session, decision) = match resume {
            None => (
                ScriptSession::start_with_files(
                    &*self.runtime,
                    tools.clone(),
                    self.files.as_ref().map(|area| area.view()).as_ref(),
                )?,
                conversation.start(),
            ),
            Some(point) => (
                self.rebuild(point, &tools, snapshots).await?,
                conversation.resume(point.pending_reply.as_ref()),
            ),
        };
        let mut keeper = snapshots.map(|dir| {
            let run_id = resume
                .and_then(|point| point.snapshot_run_id.clone())
                .unwrap_or_else(new_run_id);
            Keeper::new(dir.clone(), run_id)
        });
        let turn = Turn {
            session: &mut session,
            tools: &tools,
            cells: &cells,
            system_prompt,
            contract,
            working_dir,
            cancel,
            snapshots: keeper.as_mut(),
        };
        self.drive_turn(conversation, decision, turn).await
    }

    /// Why the policy's `check_code` refuses `code`, if it does (failing closed
    /// as for calls), in words for the model.
    fn code_refusal(&self, step: usize, code: &str) -> Option<String> {
        use codeact_rhai::Verdict;
        let language = self.runtime.info().language;
        let verdict = self.policy.as_ref()?.check_code(code, language)?;
        self.emit(|| Event::PolicyVerdict {
            step,
            tool: None,
            allowed: verdict == Verdict::Valid,
            reason: verdict.reason().map(str::to_string),
        });
        match verdict {
            Verdict::Valid => None,
            Verdict::Invalid { reason } if reason.trim() == "ask" => {
                Some(self.prompts.render("policy/ask", minijinja::context! {}))
            }
            Verdict::Invalid { reason } => Some(
                self.prompts
                    .render("policy/refused", minijinja::context! { reason => reason }),
            ),
            Verdict::Unusable { reason } => Some(
                self.prompts
                    .render("policy/undecided", minijinja::context! { reason => reason }),
            ),
        }
    }

    /// Shown images as the model gets them: pictures when it sees images, else a
    /// line of text each.
    fn image_blocks(&self, shown: Vec<crate::files::ShownImage>) -> Vec<crate::chat::ContentBlock> {
        use crate::chat::{ContentBlock, ImageBytes};
        use sha2::Digest;
        shown
            .into_iter()
            .map(|image| {
                let sha256: String = sha2::Sha256::digest(&image.data)
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                let bytes = image.data.len() as u64;
                if self.see_images {
                    ContentBlock::Image {
                        media_type: image.media_type.to_string(),
                        source: image.path,
                        bytes,
                        sha256,
                        data: Some(ImageBytes(Arc::new(image.data))),
                    }
                } else {
                    ContentBlock::text(ContentBlock::image_note(
                        image.media_type,
                        &image.path,
                        bytes,
                        &sha256,
                    ))
                }
            })
            .collect()
    }

    /// The tools as a run's scripts see them: counted against the run's budgets,
    /// recorded as events, ended by `cancel`; with the guard that ends the run's
    /// cells when the run (or chat) that holds it ends.
    pub(super) fn host_tools(
        &self,
        cancel: Option<&CancellationToken>,
        grants: Vec<Grant>,
    ) -> (Arc<HostTools>, crate::agent::cells::CellsGuard) {
        let toolbox: Arc<dyn codeact_runtime::ToolDispatch> = match cancel {
            Some(token) => Arc::new((*self.tools).clone().cancelled_by(token.clone())),
            None => self.tools.clone(),
        };
        // Cells sit between the run's tools and the toolbox: their functions
        // are checked and recorded like any call, and a cell calls through the
        // run's tools.
        let cells = self.cells.map(|limits| {
            Arc::new(crate::agent::cells::Cells::new(
                toolbox.clone(),
                self.runtime.clone(),
                self.files.as_ref().map(|area| area.view()),
                limits,
                self.name.clone(),
                self.listeners.clone(),
            ))
        });
        let toolbox = match &cells {
            Some(cells) => cells.clone(),
            None => toolbox,
        };
        let tools = Arc::new(
            HostTools::new(toolbox, self.name.clone(), self.listeners.clone())
                .with_budgets(CallBudgets {
                    per_run: self.config.max_tool_calls,
                    per_script: self.config.max_tool_calls_per_script,
                    journal_bytes: self.config.max_journal_bytes,
                })
                .with_results_kept(self.config.tool_results_on_error > 0)
                .written_as(self.runtime.spelling())
                .with_policy(self.policy.clone())
                .with_approvals(self.approvals.clone(), cancel.cloned())
                .with_grants(grants),
        );
        if let Some(cells) = &cells {
            cells.attach(&tools);
        }
        (tools, crate::agent::cells::CellsGuard::new(cells))
    }

    /// The loop from `decision` on, in `turn`'s session, until the conversation
    /// decides to finish (the end of a run, or of one turn of a chat).
    pub(super) async fn drive_turn(
        &self,
        conversation: &mut Conversation,
        mut decision: Decision,
        turn: Turn<'_>,
    ) -> Result<(Outcome, Option<FinalOutput>), AgentError> {
        let Turn {
            session,
            tools,
            cells,
            system_prompt,
            contract,
            working_dir,
            cancel,
            mut snapshots,
        } = turn;
        let deadline = self
            .config
            .max_run_time
            .map(|time| (Instant::now() + time, time));
        let mut final_output = None;
        loop {
            self.report(&decision.events);
            // The step's events are in: a finished script's session is kept
            // before the model is asked for the next one.
            if matches!(decision.next, Next::CallModel)
                && let Some(keeper) = snapshots.as_deref_mut()
                && let Some(kept) = keeper.keep_due(session)
            {
                self.emit(|| kept);
            }
            let step = decision.step;
            // A cancelled run stops before anything else happens: a result the
            // script made meanwhile may rest on calls the cancel cut short.
            if !matches!(decision.next, Next::Finish(_))
                && let Some(stopped) = cancelled(cancel)
            {
                decision = conversation.stop(stopped);
                continue;
            }
            // The host's budgets end the run before it goes on (a result already
            // made is still checked).
            if !matches!(decision.next, Next::Finish(_) | Next::CheckResult { .. })
                && let Some(spent) = past(deadline)
                    .or_else(|| {
                        tools
                            .run_budget_spent()
                            .map(|calls| Outcome::ToolCallBudget { calls })
                    })
                    .or_else(|| {
                        tools
                            .journal_budget_spent()
                            .map(|(bytes, limit)| Outcome::JournalBudget { bytes, limit })
                    })
            {
                decision = conversation.stop(spent);
                continue;
            }
            decision = match decision.next {
                Next::Finish(outcome) => return Ok((outcome, final_output)),
                Next::CallModel => {
                    let span = spans::model(&self.name, step, &self.model.label());
                    let call = self
                        .call_model(conversation, system_prompt, step, &span)
                        .instrument(span.clone());
                    match until(deadline, cancel, call).await {
                        Ok(Ok(decision)) => decision,
                        Ok(Err(error)) => {
                            spans::record_error(&span, &error.to_string());
                            return Err(error);
                        }
                        Err(stopped) => conversation.stop(stopped),
                    }
                }
                Next::RunScript { code } => {
                    if let Some(refusal) = self.code_refusal(step, &code) {
                        let refused = Err(codeact_runtime::ScriptError::thrown(refusal));
                        decision = conversation
                            .on_completion(&refused, &codeact_runtime::LogBuffer::new(0))
                            .0;
                        continue;
                    }
                    self.emit(|| Event::ScriptStarted {
                        step,
                        code: code.clone(),
                    });
                    tools.set_step(step);
                    tools.set_script(&code);
                    let span = spans::script(&self.name, step, self.runtime.info().name, &code);
                    // The script's tool calls are children of its span, on
                    // whichever thread it runs; cleared when the script ends.
                    let _parent = tools.parent_span(span.clone());
                    // A cancel or the run's deadline stops the script itself, as
                    // its time limit would; `until` stops waiting for it.
                    let interrupt = codeact_runtime::Interrupt::new();
                    let _stopper = Stopper::spawn(interrupt.clone(), deadline, cancel);
                    let run = session
                        .run_interruptible(code, interrupt)
                        .instrument(span.clone());
                    let run = match until(deadline, cancel, run).await {
                        Ok(run) => run,
                        Err(stopped) => {
                            spans::record_error(
                                &span,
                                "stopped: the run was cancelled or ran out of time",
                            );
                            decision = conversation.stop(stopped);
                            continue;
                        }
                    };
                    let run = match run {
                        Ok(run) => run,
                        Err(error) => {
                            spans::record_error(&span, &error.to_string());
                            return Err(error.into());
                        }
                    };
                    spans::script_ended(&span, &run.output, run.logs.kept());
                    // Interrupted by the cancel or the deadline, the script ended
                    // with a time-limit error of the host's making: not fed back.
                    if let Some(stopped) = cancelled(cancel).or_else(|| past(deadline)) {
                        decision = conversation.stop(stopped);
                        continue;
                    }
                    // A deferred approval stops the run inside this step: what
                    // the script went on to do rests on a call not made.
                    if let Some(pending) = tools.awaited() {
                        decision = conversation.stop(Outcome::AwaitingApproval {
                            id: pending.id,
                            tool: pending.tool,
                            args: pending.args,
                        });
                        continue;
                    }
                    if let Some(area) = &self.files {
                        let shown = area.take_shown_images();
                        if !shown.is_empty() {
                            conversation.show_images(self.image_blocks(shown));
                        }
                    }
                    if let Some(keeper) = snapshots.as_deref_mut() {
                        keeper.script_finished(step);
                    }
                    conversation.note_tool_results(tools.take_script_results());
                    conversation.note_failed_calls(tools.take_failed_calls());
                    conversation.note_cells(&cells.news());
                    conversation.on_completion(&run.completion, &run.logs).0
                }
                Next::CheckResult { value, artifacts } => {
                    let (check, artifacts) =
                        check_result(contract, working_dir, &value, &artifacts, cancel).await;
                    let mut decision = conversation.on_check(value.clone(), &check);
                    if let Next::Finish(Outcome::FinalResult { .. }) = &decision.next {
                        let output =
                            self.final_output(contract, &check, &value, working_dir, artifacts);
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
        span: &tracing::Span,
    ) -> Result<Decision, AgentError> {
        let mut request = ModelRequest::new(system_prompt, conversation.messages().to_vec());
        request.max_tokens = self.max_tokens;
        request.temperature = conversation.temperature(self.temperature);
        request.earlier_replies = conversation.dropped_replies();
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
        spans::model_replied(span, &response);
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
        working_dir: &Path,
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
            artifacts
                .into_iter()
                .map(|path| Artifact::describe(working_dir, path, self.artifact_cap()))
                .collect(),
            validation,
        )
    }
}

/// Checks a submitted result: its artifact paths first (relative to
/// `working_dir`, normalised), then the output contract, on a thread allowed to
/// block (a validator may run up to its time limit; a schema check stops at its
/// budget or at `cancel`).
async fn check_result(
    contract: &OutputContract,
    working_dir: &Path,
    value: &Value,
    declared: &[String],
    cancel: Option<&CancellationToken>,
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
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                contract.check_cancellable(value, cancel)
            }))
        })
        .unwrap_or_else(|_| panicked("it panicked".into()))
    } else {
        let (contract, value, cancel) = (contract.clone(), value.clone(), cancel.cloned());
        tokio::task::spawn_blocking(move || contract.check_cancellable(&value, cancel.as_ref()))
            .await
            .unwrap_or_else(|e| panicked(e.to_string()))
    };
    (check, artifacts)
}

/// The run's deadline (when it has one) and the time it was given.
type Deadline = Option<(Instant, Duration)>;

/// The outcome of a run whose deadline has passed; `None` before it, or without one.
fn past(deadline: Deadline) -> Option<Outcome> {
    deadline
        .filter(|(at, _)| Instant::now() >= *at)
        .map(|_| out_of_time(deadline))
}

/// The outcome of a run that ran out of its time.
fn out_of_time(deadline: Deadline) -> Outcome {
    Outcome::DeadlineExceeded {
        limit_ms: deadline.map_or(0, |(_, time)| {
            u64::try_from(time.as_millis()).unwrap_or(u64::MAX)
        }),
    }
}

/// [`Outcome::Cancelled`] once `cancel` is cancelled; `None` before, or without one.
fn cancelled(cancel: Option<&CancellationToken>) -> Option<Outcome> {
    cancel
        .filter(|token| token.is_cancelled())
        .map(|_| Outcome::Cancelled)
}

/// Raises a script's interrupt when the run is cancelled or its deadline passes,
/// until it is dropped (when the script ends).
struct Stopper(tokio::task::JoinHandle<()>);

impl Stopper {
    /// `None` when nothing can stop the run: no deadline and no cancel token.
    fn spawn(
        interrupt: codeact_runtime::Interrupt,
        deadline: Deadline,
        cancel: Option<&CancellationToken>,
    ) -> Option<Self> {
        if deadline.is_none() && cancel.is_none() {
            return None;
        }
        let cancel = cancel.cloned();
        Some(Self(tokio::spawn(async move {
            let _ = until(deadline, cancel.as_ref(), std::future::pending::<()>()).await;
            interrupt.raise();
        })))
    }
}

impl Drop for Stopper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `work`'s output, or the outcome that stopped it first: the deadline passing, or
/// the run being cancelled (the work is dropped).
async fn until<T>(
    deadline: Deadline,
    cancel: Option<&CancellationToken>,
    work: impl Future<Output = T>,
) -> Result<T, Outcome> {
    let cancelled = async {
        match cancel {
            Some(token) => token.cancelled().await,
            None => std::future::pending().await,
        }
    };
    let timed = async {
        match deadline {
            None => Ok(work.await),
            Some((at, _)) => tokio::time::timeout_at(at.into(), work)
                .await
                .map_err(|_| out_of_time(deadline)),
        }
    };
    tokio::select! {
        biased;
        () = cancelled => Err(Outcome::Cancelled),
        result = timed => result,
    }
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

    fn with_tools(
        replies: &[&str],
        config: LoopConfig,
        tools: Vec<crate::tools::toolbox::Tool>,
    ) -> (Agent, Arc<Mutex<Vec<Event>>>) {
        let events = Arc::new(Mutex::new(Vec::new()));
        let seen = events.clone();
        let agent = Agent::builder(
            Arc::new(ReplayModel::new(replies.iter().copied())),
            Arc::new(RhaiRuntime::new(Limits::default())),
        )
        .tools(tools)
        .config(config)
        .coach(crate::agent::coach::SmallModelCoach::default())
        .on_event(move |event| seen.lock().expect("not poisoned").push(event.clone()))
        .build()
        .expect("agent builds");
        (agent, events)
    }

    fn add() -> crate::tools::toolbox::Tool {
        crate::tools::toolbox::Tool::from_fn("add", "Adds a and b.", |args| {
            Ok(serde_json::json!(
                args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)
            ))
        })
    }

    /// If this fails, the loop no longer sees the numbers a run's tools
    /// returned or their descriptions' units, and a euro price answered for a
    /// question in dollars is taken as it is.
    #[tokio::test]
    async fn a_price_in_the_tools_currency_is_held_back_until_converted() {
        let price = crate::tools::toolbox::Tool::from_fn(
            "get_price",
            "The price of one unit of a shop item, in euros.",
            |_| Ok(serde_json::json!(7.8)),
        );
        let convert = crate::tools::toolbox::Tool::from_fn(
            "convert_currency",
            "Converts an amount between currencies given as three-letter codes.",
            |args| {
                Ok(serde_json::json!(
                    args["amount"].as_f64().unwrap_or(0.0) * 1.1
                ))
            },
        );
        let (agent, events) = with_tools(
            &[
                "```rhai\nfinal_result(get_price(#{item: \"cheese\"}))\n```",
                "```rhai\nlet p = get_price(#{item: \"cheese\"});\nfinal_result(convert_currency(#{amount: p, from_currency: \"EUR\", to_currency: \"USD\"}))\n```",
            ],
            LoopConfig::default(),
            vec![price, convert],
        );
        let run = agent
            .run("How much does one cheese cost in US dollars?")
            .await
            .expect("run finishes");
        match &run.outcome {
            Outcome::FinalResult { value } => {
                assert!(
                    (value.as_f64().unwrap_or(0.0) - 8.58).abs() < 1e-9,
                    "{value}"
                )
            }
            other => panic!("{other:?}"),
        }
        let events = events.lock().expect("events lock");
        let held = events.iter().any(|event| {
            matches!(event, Event::Message { message }
                if message.joined_text().contains("from EUR to USD, with `convert_currency(#{"))
        });
        assert!(held, "the first result was held back naming the converter");
    }

    /// If this fails, a script can make any number of tool calls, or a refused
    /// one leaves the model without what the script already got.
    #[tokio::test]
    async fn a_call_past_the_scripts_budget_is_refused_with_the_calls_it_made_and_the_run_goes_on()
    {
        let (agent, events) = with_tools(
            &[
                "```rhai\nlet x = add(#{a: 1, b: 1});\nlet y = add(#{a: 2, b: 2});\nlet z = add(#{a: 3, b: 3});\nfinal_result(z)\n```",
                "```rhai\nfinal_result(add(#{a: 3, b: 3}))\n```",
            ],
            LoopConfig {
                max_tool_calls_per_script: Some(2),
                ..LoopConfig::default()
            },
            vec![add()],
        );
        let run = agent.run("Add.").await.expect("run finishes");
        assert_eq!(
            run.outcome,
            Outcome::FinalResult {
                value: serde_json::json!(6)
            }
        );
        let events = events.lock().expect("not poisoned");
        let refusal = events
            .iter()
            .find_map(|e| match e {
                Event::Error {
                    step: 1, message, ..
                } => Some(message.clone()),
                _ => None,
            })
            .expect("the first script's error");
        assert!(
            refusal.contains("one script may make 2 tool calls"),
            "{refusal}"
        );
        assert!(
            refusal.contains(r#"- add({"a":1,"b":1}) -> 2"#),
            "{refusal}"
        );
        assert!(
            refusal.contains(r#"- add({"a":2,"b":2}) -> 4"#),
            "{refusal}"
        );
    }

    /// If this fails, a script that reads the same large result over and over
    /// writes a journal without bound (400 reads of 1 MB made 400 MB).
    #[tokio::test]
    async fn a_run_whose_tool_results_pass_the_journal_budget_ends_with_its_own_outcome() {
        let megabyte = crate::tools::toolbox::Tool::from_fn("read_big", "1 MB.", |_| {
            Ok(serde_json::json!("x".repeat(1 << 20)))
        });
        let (agent, events) = with_tools(
            &[
                "```rhai
let n = 0;
for i in 0..400 { try { read_big(#{}); n += 1; } catch { break; } }
observation(n)
```",
                "```rhai
final_result(1)
```",
            ],
            LoopConfig {
                max_journal_bytes: Some(8 << 20),
                ..LoopConfig::default()
            },
            vec![megabyte],
        );
        let run = agent.run("Read.").await.expect("run finishes");
        let Outcome::JournalBudget { bytes, limit } = run.outcome else {
            panic!("{:?}", run.outcome);
        };
        assert_eq!(limit, 8 << 20);
        assert!(bytes > limit && bytes < limit + (2 << 20), "{bytes}");
        let recorded: usize = events
            .lock()
            .expect("not poisoned")
            .iter()
            .filter(|event| matches!(event, Event::ToolCall { .. }))
            .map(|event| serde_json::to_string(event).map_or(0, |text| text.len()))
            .sum();
        assert!(
            recorded < 12 << 20,
            "{recorded} bytes of tool calls recorded"
        );
    }

    /// If this fails, a run's scripts can make any number of tool calls.
    #[tokio::test]
    async fn the_run_ends_after_the_script_that_passed_the_runs_tool_budget() {
        let (agent, _) = with_tools(
            &[
                "```rhai\nlet x = add(#{a: 1, b: 1});\nobservation(x)\n```",
                "```rhai\nlet y = 0;\ntry { y = add(#{a: 2, b: 2}); } catch { y = -1; }\nobservation(y)\n```",
                "```rhai\nfinal_result(1)\n```",
            ],
            LoopConfig {
                max_tool_calls: Some(1),
                ..LoopConfig::default()
            },
            vec![add()],
        );
        let run = agent.run("Add.").await.expect("run finishes");
        assert_eq!(run.outcome, Outcome::ToolCallBudget { calls: 1 });
        assert_eq!(run.steps, 2);
    }

    /// If this fails, a run with a slow tool or model outlives its deadline.
    #[tokio::test]
    async fn a_run_past_its_deadline_ends_without_waiting_for_a_slow_tool() {
        let slow = crate::tools::toolbox::Tool::new("slow", "Sleeps.", |_args| async {
            tokio::time::sleep(Duration::from_secs(20)).await;
            Ok::<_, codeact_runtime::ToolError>(serde_json::json!(1))
        });
        let (agent, _) = with_tools(
            &["```rhai\nfinal_result(slow())\n```"],
            LoopConfig {
                max_run_time: Some(Duration::from_millis(300)),
                ..LoopConfig::default()
            },
            vec![slow],
        );
        let started = Instant::now();
        let run = agent.run("Wait.").await.expect("run finishes");
        assert_eq!(run.outcome, Outcome::DeadlineExceeded { limit_ms: 300 });
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }

    /// An agent whose model writes one Rhai loop that never ends, under a time
    /// limit of a minute, and the events it reports.
    fn runaway_agent(config: LoopConfig) -> (Agent, Arc<Mutex<Vec<Event>>>) {
        let events = Arc::new(Mutex::new(Vec::new()));
        let seen = events.clone();
        let limits = Limits {
            wall_time: Duration::from_secs(60),
            max_operations: u64::MAX,
            ..Limits::default()
        };
        let agent = Agent::builder(
            Arc::new(ReplayModel::new(["```rhai
loop { }
```"])),
            Arc::new(RhaiRuntime::new(limits)),
        )
        .config(config)
        .on_event(move |event| seen.lock().expect("not poisoned").push(event.clone()))
        .build()
        .expect("agent builds");
        (agent, events)
    }

    /// If this fails, a cancel waits for a runaway script's time limit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_run_stops_a_runaway_script_at_once_and_feeds_nothing_back() {
        let (agent, events) = runaway_agent(LoopConfig::default());
        let started = Instant::now();
        let run = agent
            .request("Loop.")
            .cancel_on(cancelled_after(Duration::from_millis(300)))
            .run()
            .await
            .expect("run finishes");
        assert_eq!(run.outcome, Outcome::Cancelled);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        let events = events.lock().expect("not poisoned");
        assert!(
            !events
                .iter()
                .any(|event| matches!(event, Event::Error { .. })),
            "the interrupted script's time-limit error is the host's doing: {events:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_past_its_deadline_stops_a_runaway_script_at_once() {
        let (agent, _) = runaway_agent(LoopConfig {
            max_run_time: Some(Duration::from_millis(300)),
            ..LoopConfig::default()
        });
        let started = Instant::now();
        let run = agent.run("Loop.").await.expect("run finishes");
        assert_eq!(run.outcome, Outcome::DeadlineExceeded { limit_ms: 300 });
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    /// A token a task cancels after `delay`, as an app (or Ctrl-C) would.
    fn cancelled_after(delay: Duration) -> CancellationToken {
        let token = CancellationToken::new();
        let cancel = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            cancel.cancel();
        });
        token
    }

    /// A model that never answers, as a stalled server.
    struct Stalled;

    #[async_trait::async_trait]
    impl crate::model::ModelClient for Stalled {
        fn label(&self) -> String {
            "stalled".into()
        }
        async fn complete(
            &self,
            _request: &crate::chat::ModelRequest,
        ) -> Result<crate::chat::ModelResponse, ModelError> {
            std::future::pending().await
        }
    }

    /// If this fails, a cancelled run waits for a model that may never answer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_run_stops_while_the_model_is_thinking_and_can_be_resumed() {
        let events = Arc::new(Mutex::new(Vec::new()));
        let seen = events.clone();
        let agent = Agent::builder(
            Arc::new(Stalled),
            Arc::new(RhaiRuntime::new(Limits::default())),
        )
        .on_event(move |event| seen.lock().expect("not poisoned").push(event.clone()))
        .build()
        .expect("agent builds");
        let token = cancelled_after(Duration::from_millis(200));
        let started = Instant::now();
        let run = agent
            .request("Think forever.")
            .cancel_on(token)
            .run()
            .await
            .expect("run finishes");
        assert_eq!(run.outcome, Outcome::Cancelled);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        let events = events.lock().expect("not poisoned").clone();
        assert!(matches!(
            events.last(),
            Some(Event::Finished {
                outcome: Outcome::Cancelled,
                ..
            })
        ));
        let point = ResumePoint::from_events(&events).expect("a cancelled run resumes");
        let resumed = Agent::builder(
            Arc::new(ReplayModel::new(["```rhai\nfinal_result(7)\n```"])),
            Arc::new(RhaiRuntime::new(Limits::default())),
        )
        .build()
        .expect("agent builds")
        .resume_request(&point)
        .run()
        .await
        .expect("resumed");
        assert_eq!(
            resumed.outcome,
            Outcome::FinalResult {
                value: serde_json::json!(7)
            }
        );
    }

    /// On the multi-threaded runtime the command line uses, a script runs in place:
    /// the tool it waits on must end at the cancel, not at its own timeout.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_run_stops_a_slow_tool_at_once_and_starts_no_other_call() {
        let started_calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = started_calls.clone();
        let slow = crate::tools::toolbox::Tool::new("slow", "Sleeps.", move |_args| {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok::<_, codeact_runtime::ToolError>(serde_json::json!(1))
            }
        });
        let (agent, _) = with_tools(
            &[
                "```rhai\nlet a = 0;\ntry { a = slow(); } catch { }\nlet b = 0;\ntry { b = slow(); } catch { }\nfinal_result(a + b)\n```",
            ],
            LoopConfig::default(),
            vec![slow],
        );
        let token = cancelled_after(Duration::from_millis(300));
        let started = Instant::now();
        let run = agent
            .request("Wait.")
            .cancel_on(token)
            .run()
            .await
            .expect("run finishes");
        assert_eq!(run.outcome, Outcome::Cancelled);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(
            started_calls.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "the second call never started"
        );
    }

    /// The stream an app forwards to a UI says what the transcript says, in order,
    /// and ends with the result.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_event_stream_matches_the_listeners_and_ends_with_the_result() {
        use futures_util::StreamExt;
        let (agent, heard) = recorded(
            &[
                "```rhai\nobservation(1)\n```",
                "```rhai\nfinal_result(2)\n```",
            ],
            LoopConfig::default(),
        );
        let items: Vec<super::super::RunItem> = agent.request("Go.").events().collect().await;
        let (last, events) = items.split_last().expect("items");
        let super::super::RunItem::Finished(Ok(run)) = last else {
            panic!("the last item is the result: {last:?}");
        };
        assert_eq!(
            run.outcome,
            Outcome::FinalResult {
                value: serde_json::json!(2)
            }
        );
        let streamed: Vec<&Event> = events
            .iter()
            .map(|item| match item {
                super::super::RunItem::Event { agent, event } => {
                    assert_eq!(agent, "main");
                    event
                }
                other => panic!("only the last item is the result: {other:?}"),
            })
            .collect();
        let heard = heard.lock().expect("not poisoned");
        let heard: Vec<&Event> = heard.iter().collect();
        assert_eq!(streamed, heard);
        assert!(matches!(streamed.last(), Some(Event::Finished { .. })));
    }

    /// If this fails, a long chat is cut silently (or not at all): the oldest
    /// whole turns must go, the model must be told, the session must keep what
    /// they defined, and a transcript's replay must give the same history.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_chat_past_its_history_budget_drops_its_oldest_turns_and_says_so() {
        let model = Arc::new(ReplayModel::new([
            "```rhai\nlet kept = 41;\nfinal_result(\"noted\")\n```",
            "```rhai\nfinal_result(\"second\")\n```",
            "```rhai\nfinal_result(kept + 1)\n```",
        ]));
        let heard = Arc::new(Mutex::new(Vec::new()));
        let seen = heard.clone();
        let agent = Agent::builder(model.clone(), Arc::new(RhaiRuntime::new(Limits::default())))
            .config(LoopConfig {
                max_history_bytes: Some(180),
                ..LoopConfig::default()
            })
            .on_event(move |event| seen.lock().expect("not poisoned").push(event.clone()))
            .build()
            .expect("builds");
        let mut chat = agent.chat().expect("a chat");
        chat.send(&format!("Keep 41. {}", "pad ".repeat(20)))
            .await
            .expect("turn 1");
        chat.send("A second turn.").await.expect("turn 2");
        let third = chat
            .send("Add one to what you kept.")
            .await
            .expect("turn 3");
        assert_eq!(
            third.outcome,
            Outcome::FinalResult {
                value: serde_json::json!(42)
            },
            "the session still holds turn 1's variable"
        );
        let requests = model.requests();
        let last = requests.last().expect("three requests");
        let sent: Vec<String> = last.messages.iter().map(Message::joined_text).collect();
        assert!(!sent.iter().any(|m| m.contains("Keep 41.")), "{sent:?}");
        assert!(
            sent[0].starts_with("(Earlier in this chat: the first 1 turn(s) were dropped"),
            "{sent:?}"
        );
        assert!(sent[0].ends_with("A second turn."), "{sent:?}");
        let heard = heard.lock().expect("not poisoned");
        assert!(heard.iter().any(|e| matches!(
            e,
            Event::HistoryCompacted {
                dropped_turns: 1,
                ..
            }
        )));
        let replayed = crate::agent::decide::Progress::replayed(heard.iter());
        assert_eq!(replayed.messages, chat.messages());
    }

    /// Turn 3 uses what turn 1 defined; each turn ends with its own outcome, and
    /// the step limit counts per turn.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_three_turn_chat_keeps_the_session_and_the_history() {
        let (agent, heard) = recorded(
            &[
                "```rhai\nlet prices = #{apple: 0.5, bread: 2.25};\nfinal_result(prices.len())\n```",
                "```rhai\nobservation(prices.apple)\n```",
                "```rhai\nfinal_result(prices.apple * 2)\n```",
                "```rhai\nfinal_result(prices.bread + prices.apple)\n```",
            ],
            LoopConfig {
                max_steps: 2,
                ..LoopConfig::default()
            },
        );
        let mut chat = agent.chat().expect("a chat");
        let first = chat.send("Remember two prices.").await.expect("turn 1");
        assert_eq!(
            first.outcome,
            Outcome::FinalResult {
                value: serde_json::json!(2)
            }
        );
        let second = chat.send("Two apples?").await.expect("turn 2");
        assert_eq!(
            second.outcome,
            Outcome::FinalResult {
                value: serde_json::json!(1.0)
            }
        );
        // Four steps in all, but two in this turn: the limit (2) holds per turn.
        let third = chat.send("An apple and a bread?").await.expect("turn 3");
        assert_eq!(
            third.outcome,
            Outcome::FinalResult {
                value: serde_json::json!(2.75)
            }
        );
        assert_eq!((third.steps, chat.turns()), (4, 3));
        let users: Vec<String> = chat
            .messages()
            .iter()
            .filter(|m| m.role == crate::chat::Role::User)
            .map(Message::joined_text)
            .collect();
        assert_eq!(users[0], "Remember two prices.");
        assert!(users.contains(&"An apple and a bread?".to_string()));
        let heard = heard.lock().expect("not poisoned");
        let turns = heard
            .iter()
            .filter(|e| matches!(e, Event::TurnStarted { .. }))
            .count();
        let finished = heard
            .iter()
            .filter(|e| matches!(e, Event::Finished { .. }))
            .count();
        let started = heard
            .iter()
            .filter(|e| matches!(e, Event::RunStarted { .. }))
            .count();
        assert_eq!((started, turns, finished), (1, 3, 3));
    }

    /// A policy allows, refuses, routes to an (absent) approval, and fails closed
    /// when it throws; a script it refuses never runs and the model is told why.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_policy_decides_each_call_and_each_script() {
        let paid = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = paid.clone();
        let pay = crate::tools::toolbox::Tool::from_fn("pay", "Pays.", move |args| {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(serde_json::json!(format!("paid {}", args["amount"])))
        });
        let boom = crate::tools::toolbox::Tool::from_fn("boom", "Never called.", |_| {
            Ok(serde_json::json!("called"))
        });
        let policy = codeact_rhai::RhaiPolicy::compile(
            "policy.rhai",
            r#"
            fn check_call(tool, args) {
                if tool == "pay" && args.amount > 100 { return "over 100"; }
                if tool == "pay" && args.amount > 50 { return "ask"; }
                if tool == "boom" { throw "the rule broke"; }
            }
            fn check_code(code, language) {
                if code.contains("forbidden") { return `no forbidden words in ${language}`; }
            }
            "#,
            Limits::default(),
        )
        .expect("compiles");
        let events = Arc::new(Mutex::new(Vec::new()));
        let seen = events.clone();
        let agent = Agent::builder(
            Arc::new(ReplayModel::new([
                "```rhai\nforbidden_thing()\n```",
                "```rhai\nlet out = [];\nout.push(pay(#{amount: 10}));\ntry { pay(#{amount: 60}); } catch (e) { out.push(e); }\ntry { pay(#{amount: 200}); } catch (e) { out.push(e); }\ntry { boom(); } catch (e) { out.push(e); }\nfinal_result(out)\n```",
            ])),
            Arc::new(RhaiRuntime::new(Limits::default())),
        )
        .tools([pay, boom])
        .policy(policy)
        .on_event(move |event| seen.lock().expect("not poisoned").push(event.clone()))
        .build()
        .expect("agent builds");
        let run = agent.run("Pay.").await.expect("run finishes");
        let Outcome::FinalResult { value } = run.outcome else {
            panic!("{:?}", run.outcome);
        };
        let said: Vec<&str> = value
            .as_array()
            .expect("a list")
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        assert_eq!(said[0], "paid 10");
        assert!(said[1].contains("approve"), "{}", said[1]);
        assert!(
            said[2].contains("refused") && said[2].contains("over 100"),
            "{}",
            said[2]
        );
        assert!(
            said[3].contains("could not decide") && said[3].contains("the rule broke"),
            "{}",
            said[3]
        );
        assert_eq!(
            paid.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "only the allowed call ran"
        );
        let events = events.lock().expect("not poisoned");
        let started: Vec<usize> = events
            .iter()
            .filter_map(|e| match e {
                Event::ScriptStarted { step, .. } => Some(*step),
                _ => None,
            })
            .collect();
        assert_eq!(started, [2], "the refused script never ran");
        assert!(events.iter().any(|e| matches!(e, Event::Error { step: 1, message, .. } if message.contains("no forbidden words in Rhai"))));
        let refused_calls = events
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    Event::ToolCall {
                        outcome: crate::agent::events::ToolCallOutcome::Error { .. },
                        ..
                    }
                )
            })
            .count();
        assert_eq!(refused_calls, 3, "each refusal is a tool-call event");
        let verdicts: Vec<(Option<&str>, bool)> = events
            .iter()
            .filter_map(|e| match e {
                Event::PolicyVerdict { tool, allowed, .. } => Some((tool.as_deref(), *allowed)),
                _ => None,
            })
            .collect();
        assert_eq!(
            verdicts,
            [
                (None, false),
                (None, true),
                (Some("pay"), true),
                (Some("pay"), false),
                (Some("pay"), false),
                (Some("boom"), false),
            ],
            "every verdict is an event"
        );
    }
}
