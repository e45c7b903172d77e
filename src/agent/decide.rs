//! The loop's decisions, without I/O: what to send next, what a reply means, when to
//! stop, and what happened in deciding. The driver feeds it "the model replied"
//! and "the script finished", does what it says and reports the events it returns;
//! every rule here is tested without a model or an engine.

use std::collections::BTreeSet;
use std::sync::Arc;

use codeact_runtime::{ErrorFacts, ErrorKind, LogBuffer};
use minijinja::context;
use serde_json::Value;

use super::coach::{Coach, PlainCoach, Rule, Seen};
use super::data_paths;
use super::events::{CoachDecision, Event};
use super::extract::{self, Extraction, extract_code};
use super::feedback;
use super::map_as_number;
pub use super::outcome::Outcome;
use super::script_notes;
use crate::chat::{ContentBlock, Message, ModelResponse, Role, StopReason, Usage};
use crate::output::script_output::{Malformed, NotAnOutput, ScriptOutput};
use crate::output::spec::{Check, refusal_text};
use crate::prompts::Prompts;
use codeact_runtime::ScriptError;

mod accounts;
mod coaching;
mod config;
mod holds;
mod mend;
mod progress;
mod stubs;

use coaching::Coaching;
pub use config::{BareValues, LoopConfig};
use mend::ProposedMend;
pub use progress::Progress;
use progress::compaction;
#[cfg(test)]
pub(crate) use progress::compaction_marker;

/// What the driver does next.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Send the conversation to the model.
    CallModel,
    /// Run this script in the session.
    RunScript {
        /// The script.
        code: String,
    },
    /// Check this submitted final result against the output spec and the
    /// artifact rules, then report with [`Conversation::on_check`].
    CheckResult {
        /// The result.
        value: Value,
        /// The artifact paths it declared.
        artifacts: Vec<String>,
    },
    /// Stop with this outcome.
    Finish(Outcome),
}

/// What the conversation decided: the next step, the step it belongs to, and
/// what happened in deciding, for the driver to report as it is. The driver adds
/// only what it did itself (a model request, streamed text, a script starting, a
/// tool call, an accepted result's record).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// What the driver does next.
    pub next: Next,
    /// The step `next` belongs to: the model call it makes (one past the replies
    /// so far), or the reply whose script or result it handles.
    pub step: usize,
    /// What happened, in order: messages that joined the conversation, the
    /// reply and its usage, the step's observation, error or refusal.
    pub events: Vec<Event>,
}

/// The object JavaScript scripts call tools through (`tools.get_weather({…})`).
const TOOLS_OBJECT: &str = "tools";

/// [`LoopConfig::max_journal_bytes`]'s default: 64 MiB, the default disk limit.
pub const DEFAULT_MAX_JOURNAL_BYTES: u64 = 64 << 20;

/// The loop's state: the conversation, its counters and what the next
/// decision needs; the built-in coaching rules keep theirs apart
/// (`decide::coaching`), and the coach advises through [`Coach`].
#[derive(Debug, Clone)]
pub struct Conversation {
    config: LoopConfig,
    /// Agents a script may transfer to; empty means transfers are unavailable.
    transfer_targets: Vec<String>,
    /// This agent's own name, so a transfer to itself is refused by name.
    agent_name: String,
    fence_tags: Vec<String>,
    /// The session's language, as its runtime names it
    /// ([`with_language`](Self::with_language)).
    language: String,
    /// The messages and counters, changed only through [`Self::record`].
    progress: Progress,
    /// What happened since the last decision, handed over with the next one.
    happened: Vec<Event>,
    /// The feedback of the step in progress, when the reply itself was the error.
    last_error: Option<String>,
    /// Notes to prepend to the next feedback (a truncated reply that still ran,
    /// a helper the script redefined).
    pending_notes: Vec<String>,
    /// Characters of feedback shown so far in the run, against
    /// [`LoopConfig::max_feedback_chars`].
    feedback_shown: usize,
    /// Images the running step's script showed, for its feedback.
    shown_images: Vec<ContentBlock>,
    /// Names the host provides to scripts (helpers and tools): a script that
    /// defines one is told so.
    provided_names: Vec<String>,
    /// The tools' signatures, in the order of their names in `provided_names`
    /// (after the helpers).
    tool_signatures: Vec<String>,
    /// The script of the step in progress.
    current_script: Option<String>,
    /// The script of the previous step, when it failed.
    failed_script: Option<String>,
    /// The feedback of the previous error, so the same text is never sent twice
    /// in a row.
    last_error_feedback: Option<String>,
    /// Whether the last reply repeated a failure word for word, so the next
    /// model call should sample more freely.
    repeated: bool,
    /// The script of the previous step and the value it showed, when it
    /// ended with an observation: the same script showing the same value
    /// again gets `hints/same_observation`.
    last_observation: Option<(String, Value)>,
    /// What the tool calls of the step in progress returned, for its error's
    /// feedback ([`note_tool_results`](Self::note_tool_results)).
    step_tool_results: Vec<feedback::ToolResultSeen>,
    /// The calls the tools of the step in progress failed
    /// ([`note_failed_calls`](Self::note_failed_calls)).
    step_failed_calls: Vec<feedback::FailedCall>,
    /// The tools' descriptions, by name, for the units they name.
    tool_descriptions: Vec<(String, String)>,
    /// The templates of everything fed back.
    prompts: Prompts,
    /// The coach that advises this run. Default: [`PlainCoach`].
    coach: Arc<dyn Coach>,
    /// The built-in rules the coach turns on.
    rules: BTreeSet<Rule>,
    /// What the built-in coaching rules keep between the steps of a run (see
    /// [`Coaching`]).
    coaching: Coaching,
}

/// How a reply was read: a step to take, or an error of the reply itself (its
/// feedback already added).
enum Reading {
    Next(Next),
    Failed(String),
}

impl Conversation {
    /// A conversation that starts with `task`, for a runtime accepting
    /// `fence_tags` (its first tag is the one suggested to the model). The task
    /// is reported with the first decision, [`start`](Self::start)'s.
    pub fn new(task: &str, fence_tags: &[&str], config: LoopConfig) -> Self {
        let mut conversation = Self::resumed(Progress::default(), fence_tags, config);
        conversation.record(Event::Message {
            message: Message::user(task),
        });
        conversation
    }

    /// Declares the tools, by name and by the signature the runtime shows, so a
    /// script that redefines one is told to call the tool instead, and how (the
    /// helpers' names are always known).
    pub fn with_tools(mut self, tools: impl IntoIterator<Item = (String, String)>) -> Self {
        for (name, signature) in tools {
            if !self.provided_names.contains(&name) {
                self.provided_names.push(name);
                self.tool_signatures.push(signature);
            }
        }
        self
    }

    /// Declares the tools' descriptions, by name, for the units they name (a
    /// price "in euros"): see [`Rule::OtherUnits`].
    /// Give them in the order of [`with_tools`](Self::with_tools), after it.
    pub fn with_tool_descriptions(
        mut self,
        descriptions: impl IntoIterator<Item = (String, String)>,
    ) -> Self {
        self.tool_descriptions = descriptions.into_iter().collect();
        self
    }

    /// A conversation picked up where a recorded run left it: its messages (task
    /// first) and counters, as replaying its events gave them (see
    /// [`ResumePoint`](super::ResumePoint)). Go on with [`resume`](Self::resume).
    pub fn resumed(progress: Progress, fence_tags: &[&str], config: LoopConfig) -> Self {
        // A rewrite proposed by the feedback the run stopped after.
        let proposed_mend = match &progress.proposed_rewrite {
            Some((
                step,
                CoachDecision::Proposed {
                    failed,
                    run,
                    lines,
                    carried,
                },
            )) if *step == progress.steps => Some(ProposedMend {
                failed: failed.clone(),
                mended: run.clone(),
                lines: *lines,
                carried: *carried,
            }),
            _ => None,
        };
        Self {
            config,
            transfer_targets: Vec::new(),
            agent_name: String::new(),
            fence_tags: fence_tags.iter().map(|t| t.to_string()).collect(),
            language: data_paths::Language::from_fence_tag(
                fence_tags.first().copied().unwrap_or("js"),
            )
            .name()
            .to_string(),
            progress,
            happened: Vec::new(),
            last_error: None,
            pending_notes: Vec::new(),
            feedback_shown: 0,
            shown_images: Vec::new(),
            provided_names: script_notes::HELPERS
                .iter()
                .map(|h| h.to_string())
                .collect(),
            tool_signatures: Vec::new(),
            current_script: None,
            failed_script: None,
            last_error_feedback: None,
            repeated: false,
            last_observation: None,
            step_tool_results: Vec::new(),
            step_failed_calls: Vec::new(),
            tool_descriptions: Vec::new(),
            prompts: Prompts::default(),
            coaching: Coaching {
                proposed_mend,
                ..Coaching::default()
            },
            coach: Arc::new(PlainCoach),
            rules: BTreeSet::new(),
        }
    }

    /// The templates the feedback is rendered from. Default:
    /// [`Prompts::default`].
    pub fn with_prompts(mut self, prompts: Prompts) -> Self {
        self.prompts = prompts;
        self
    }

    /// The coach that advises this run ([`coach`](super::coach)). Default:
    /// [`PlainCoach`], which gives no advice.
    pub fn with_coach(mut self, coach: Arc<dyn Coach>) -> Self {
        self.rules = coach.rules();
        self.coach = coach;
        self
    }

    /// The session's language, as its runtime names it
    /// (`RuntimeInfo::language`: `Rhai`, `JavaScript`, `Python`): what the
    /// feedback and the coach know of the language comes from here. Default:
    /// the language of the first fence tag, for a conversation built without a
    /// runtime.
    pub fn with_language(mut self, language: &str) -> Self {
        self.language = data_paths::Language::from_name(language).name().to_string();
        self
    }

    /// Whether the coach turns the built-in `rule` on.
    fn rule_on(&self, rule: Rule) -> bool {
        self.rules.contains(&rule)
    }

    /// Declares the agents a script may transfer to, and this agent's own name.
    pub fn with_transfer_targets(
        mut self,
        targets: Vec<String>,
        agent_name: impl Into<String>,
    ) -> Self {
        self.transfer_targets = targets;
        self.agent_name = agent_name.into();
        self
    }

    /// The model's replies dropped with a chat's oldest turns.
    pub fn dropped_replies(&self) -> usize {
        self.progress.dropped_replies
    }

    /// The messages so far, task first (a chat's dropped turns left out).
    pub fn messages(&self) -> &[Message] {
        &self.progress.messages
    }

    /// Model calls so far.
    pub fn steps(&self) -> usize {
        self.progress.steps
    }

    /// Tokens used so far.
    pub fn usage(&self) -> Usage {
        self.progress.usage
    }

    /// The messages and counters so far.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// The first decision of a fresh run: call the model (the task is reported).
    pub fn start(&mut self) -> Decision {
        self.decide(Next::CallModel)
    }

    /// The first decision of a resumed run: handle again the reply whose step
    /// was cut short, if there is one, or go on with the next step. The reply,
    /// its step and its usage are in the transcript already, so only the
    /// messages it now adds are reported (an error it makes is not reported as
    /// an error event, so a second resume counts one error fewer).
    pub fn resume(&mut self, pending_reply: Option<&ModelResponse>) -> Decision {
        let Some(reply) = pending_reply else {
            let next = self.continue_or_stop();
            return self.decide(next);
        };
        let mut decision = self.on_reply(reply);
        decision.events = decision
            .events
            .into_iter()
            .filter(|event| matches!(event, Event::Message { .. }))
            .skip(1)
            .collect();
        decision
    }

    /// The model replied.
    pub fn on_reply(&mut self, response: &ModelResponse) -> Decision {
        self.current_script = None;
        self.coaching.faked_tools.clear();
        let step = self.progress.steps + 1;
        self.record(Event::ModelReply {
            step,
            stop_reason: response.stop_reason.clone(),
        });
        let text = response.text();
        // The history keeps a reply cut to the reply limit: a model that writes
        // megabytes would otherwise resend them with every later request. The code
        // is still taken from the whole reply.
        let only_text = matches!(response.content.as_slice(), [ContentBlock::Text { .. }]);
        let kept = if text.chars().count() > self.config.reply_limit {
            vec![crate::chat::ContentBlock::text(feedback::cut_middle(
                &text,
                self.config.reply_limit,
            ))]
        } else if let Some(call) =
            extract::whole_reply_helper_call(&extract::without_fence_markers(&text))
                .filter(|_| only_text)
        {
            // A reply that is only a helper call runs as that script, and the
            // history shows it in the card's fence: a model that sees its own
            // unfenced reply goes on answering without fences, echoing the
            // host's feedback into `error("…")`.
            let tag = self.fence_tags.first().map_or("", String::as_str);
            vec![ContentBlock::text(format!("```{tag}\n{call}\n```"))]
        } else {
            response.content.clone()
        };
        self.record(Event::Message {
            message: Message {
                role: Role::Assistant,
                content: kept,
            },
        });
        let reading = self.read_reply(text, &response.stop_reason);
        self.record(Event::Usage {
            step,
            call: response.usage,
            total: self.progress.usage + response.usage,
        });
        if let Some(spent) = self.token_budget_spent() {
            return self.decide(Next::Finish(spent));
        }
        let next = match reading {
            Reading::Next(next) => next,
            // A reply that could not run (no code, cut off) was answered with
            // feedback at once: that is this step's error.
            Reading::Failed(message) => self.count_error(message, String::new()),
        };
        self.decide(next)
    }

    /// The token budget's outcome, once the run's usage has passed either limit.
    fn token_budget_spent(&self) -> Option<Outcome> {
        let usage = self.progress.usage;
        let over = |limit: Option<u64>, used: u64| limit.is_some_and(|limit| used > limit);
        (over(self.config.max_input_tokens, usage.input_tokens)
            || over(self.config.max_output_tokens, usage.output_tokens))
        .then_some(Outcome::TokenBudget {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
        })
    }

    /// The first decision of a chat's next turn: `message` from the user joins
    /// the conversation after everything before it, and the model is asked.
    /// A rewrite the last turn proposed is not carried into the new task.
    pub fn next_turn(&mut self, turn: usize, message: &str) -> Decision {
        self.coaching.proposed_mend = None;
        self.coaching.first_mend = None;
        self.record(Event::TurnStarted { turn });
        self.record(Event::Message {
            message: Message::user(message),
        });
        if let Some(compacted) = self
            .config
            .max_history_bytes
            .and_then(|budget| compaction(&self.progress, budget))
        {
            self.record(compacted);
        }
        self.start()
    }

    /// Ends the run with `outcome` (a budget or deadline the host enforces).
    pub fn stop(&mut self, outcome: Outcome) -> Decision {
        self.decide(Next::Finish(outcome))
    }

    /// What the reply of this step asks for: its script, the end of the run, or
    /// (fed back at once) the error of a reply that cannot run.
    fn read_reply(&mut self, text: String, stop_reason: &StopReason) -> Reading {
        match stop_reason {
            StopReason::Refused => return Reading::Next(Next::Finish(Outcome::Refused { text })),
            StopReason::ContextWindowExceeded => {
                return Reading::Next(Next::Finish(Outcome::ContextWindowExceeded));
            }
            StopReason::Pause => return Reading::Next(self.continue_or_stop()),
            _ => {}
        }
        let truncated = *stop_reason == StopReason::OutputTruncated;
        let mend = self
            .coaching
            .proposed_mend
            .take()
            .filter(|_| self.rule_on(Rule::RewriteRepeatedScripts));
        self.coaching.applied_mend = None;
        self.coaching.changed_beside_mend = None;
        self.coaching.left_out_of_mend = None;
        // A reasoning model's thinking stays in the history; its code is not
        // taken from there.
        let text = extract::without_fence_markers(&script_notes::without_thinking(&text));
        let fence_tags = self.fence_tags.clone();
        let tags: Vec<&str> = fence_tags.iter().map(String::as_str).collect();
        let fence = tags.first().copied().unwrap_or("code");
        let problem = match extract_code(&text, &tags) {
            // An empty block, most often after an observation that held the
            // answer (a small model, JavaScript): said plainly, with the offer
            // the observation made.
            Extraction::Code { code, closed: true } if code.trim().is_empty() => {
                let call = self
                    .last_observation
                    .as_ref()
                    .and_then(|(script, value)| feedback::offered_call(value, script));
                let message = self.prompts.render(
                    "reply/empty_code",
                    context! { fence => fence, call => call },
                );
                let text = self
                    .prompts
                    .render("feedback/reply_error", context! { problem => &message });
                self.feed_back_error(text, &message, None);
                return Reading::Failed(message);
            }
            Extraction::Code { code, closed } if closed || !truncated => {
                if truncated {
                    let note = self.prompts.render("notes/cut_off_after_code", context! {});
                    self.pending_notes.push(note);
                }
                let code = self.prepare_script(code);
                let sent = code.clone();
                let code = self.mended_if_repeated(code, mend);
                if code != sent {
                    self.rewrote(Rule::RewriteRepeatedScripts.name(), &sent, &code);
                }
                self.current_script = Some(code.clone());
                return Reading::Next(Next::RunScript { code });
            }
            Extraction::Code { .. } => ("reply/cut_off_in_code", None),
            Extraction::OtherLanguage { tag } => ("reply/other_language", Some(tag)),
            Extraction::NoCode if truncated => ("reply/cut_off_without_code", None),
            Extraction::NoCode => ("reply/no_code", None),
        };
        let message = match problem {
            (name, Some(tag)) => self
                .prompts
                .render(name, context! { fence => fence, tag => tag }),
            (name, None) => self.prompts.render(name, context! { fence => fence }),
        };
        let text = self
            .prompts
            .render("feedback/reply_error", context! { problem => &message });
        self.feed_back_error(text, &message, None);
        Reading::Failed(message)
    }

    /// The script to run from the code of a reply, with notes for the next
    /// feedback: a Python stub of a host tool is taken out, and every helper or
    /// tool the script still defines is named (a tool it fakes is remembered, so
    /// a final result resting on it is not accepted).
    fn prepare_script(&mut self, code: String) -> String {
        self.step_tool_results.clear();
        self.coaching.stub_sections.clear();
        self.coaching.stub_readings.clear();
        self.coaching.kept_reading_observations.clear();
        let sent = code.clone();
        let helpers = script_notes::HELPERS.len();
        // A Python script that writes its own stub of a tool and then calls
        // it meant to call the tool: the stub is taken out (and the model
        // told), so the call reaches the host's tool with real data.
        let (mut code, lines_to_put_back) =
            if self.language() == data_paths::Language::Python && self.rule_on(Rule::PythonStubs) {
                self.take_out_python_stubs(code)
            } else {
                (code, Vec::new())
            };
        if self.rule_on(Rule::FakedTools) {
            for name in script_notes::redefined_names(&code, &self.provided_names) {
                let index = self
                    .provided_names
                    .iter()
                    .position(|provided| provided == name)
                    .unwrap_or(0);
                let signature = index
                    .checked_sub(helpers)
                    .map(|tool| self.tool_signatures[tool].as_str());
                let note = self.prompts.render(
                    "notes/redefined",
                    context! { name => name, signature => signature },
                );
                self.pending_notes.push(note);
                if index >= helpers {
                    self.coaching.faked_tools.push(name.to_string());
                }
            }
            // JavaScript's tools are methods of the host's `tools` object: a
            // script that makes its own (`const tools = { get_weather: … }`)
            // fakes them all.
            if self.language() == data_paths::Language::JavaScript
                && !script_notes::redefined_names(&code, &[TOOLS_OBJECT.to_string()]).is_empty()
            {
                let note = self.prompts.render(
                    "notes/redefined",
                    context! { name => TOOLS_OBJECT, signature => None::<&str> },
                );
                self.pending_notes.push(note);
                self.coaching.faked_tools.push(TOOLS_OBJECT.to_string());
            }
        }
        // Put back after the check for redefined names: these lines are the
        // host's, not the model's.
        if !lines_to_put_back.is_empty() {
            let mut lines: Vec<&str> = code.lines().collect();
            for (line, text) in &lines_to_put_back {
                if let Some(slot) = lines.get_mut(*line) {
                    *slot = text;
                }
            }
            code = lines.join("\n");
        }
        if code != sent {
            self.rewrote(Rule::PythonStubs.name(), &sent, &code);
        }
        let language = self.language.clone();
        let seen = Seen {
            messages: &self.progress.messages,
            script: &code,
            language: &language,
        };
        if let Some(rewrite) = self.coach.before_script(&seen) {
            self.pending_notes.push(rewrite.note);
            self.rewrote(&rewrite.rule, &code, &rewrite.script);
            return rewrite.script;
        }
        code
    }

    /// Records that the host runs `run` in place of the script `sent`.
    fn rewrote(&mut self, rule: &str, sent: &str, run: &str) {
        self.record(Event::Coached {
            step: self.progress.steps,
            rule: rule.to_string(),
            decision: CoachDecision::Rewrote {
                sent: sent.to_string(),
                run: run.to_string(),
            },
        });
    }

    /// Records the rewrite the step's feedback proposed, if any, so a run
    /// resumed from here runs the failed script, sent again, as it.
    fn note_proposal(&mut self) {
        let Some(mend) = self
            .coaching
            .proposed_mend
            .clone()
            .filter(|_| self.rule_on(Rule::RewriteRepeatedScripts))
        else {
            return;
        };
        self.record(Event::Coached {
            step: self.progress.steps,
            rule: Rule::RewriteRepeatedScripts.name().to_string(),
            decision: CoachDecision::Proposed {
                failed: mend.failed,
                run: mend.mended,
                lines: mend.lines,
                carried: mend.carried,
            },
        });
    }

    /// What the tool calls of the script in progress returned, in order (calls
    /// that failed left out): if the script then fails, its feedback shows them
    /// ([`LoopConfig::tool_results_on_error`]). Call before
    /// [`on_completion`](Self::on_completion).
    pub fn note_tool_results(&mut self, results: Vec<feedback::ToolResultSeen>) {
        self.remember_results(&results);
        self.step_tool_results = results;
    }

    /// Cells that ended or sent progress while the model had not heard of them
    /// (see [`AgentBuilder::cells`](crate::AgentBuilder::cells)): a note in the
    /// host's words joins the next feedback, naming them and their states, so
    /// the model knows to poll them. Their own words stay out of it: a poll
    /// returns them, fenced with the script's value.
    pub(crate) fn note_cells(&mut self, news: &[crate::agent::cell_news::CellNews]) {
        if news.is_empty() {
            return;
        }
        let note = self
            .prompts
            .render("notes/cells", minijinja::context! { cells => news });
        self.pending_notes.push(note);
    }

    /// The calls the tools of the script that just ran failed (the first of
    /// each tool): should the script fail, its feedback names the required
    /// arguments they left out, or says that their arguments were made up.
    pub fn note_failed_calls(&mut self, calls: Vec<feedback::FailedCall>) {
        self.step_failed_calls = calls;
    }

    /// The script finished with this completion (its value, or its error), having
    /// printed `logs`. Returns the decision and the output as the loop read it:
    /// a bare value is an [`ScriptOutput::Observation`] under
    /// [`BareValues::Observe`]. The feedback keeps the host's words outside the
    /// fences and quotes what the script produced inside them.
    pub fn on_completion(
        &mut self,
        completion: &Result<Value, ScriptError>,
        logs: &LogBuffer,
    ) -> (Decision, ScriptOutput) {
        let limit = self.output_limit();
        let script = self.current_script.clone().unwrap_or_default();
        // Proposed afresh by this step's feedback if it fails, else the mend
        // it ran as, if any.
        self.coaching.proposed_mend = self.coaching.applied_mend.take().map(|mend| ProposedMend {
            carried: true,
            ..mend
        });
        if let Ok(value) = completion
            && let Some(held) = self.held_back(&script, value, logs)
        {
            return held;
        }
        let (next, output) = match completion {
            Ok(Value::Null) | Err(ScriptError::NoValue { .. }) => {
                let printed = script_notes::printed_expression(&script);
                let uncalled: Vec<String> = script_notes::uncalled_definitions(&script)
                    .into_iter()
                    .filter(|name| !self.provided_names.contains(name))
                    .collect();
                let call = self
                    .call_of_uncalled(&script, &uncalled)
                    .filter(|_| self.rule_on(Rule::UncalledFunctions))
                    .map(|call| feedback::fenced(&call, limit));
                let observe = self.observation_of_kept_reading(&uncalled);
                if call.is_some() || observe.is_some() {
                    // The call holds the stub's reading: said once, last.
                    self.coaching.stub_sections.clear();
                }
                let text = feedback::no_value(
                    &self.prompts,
                    printed.as_deref(),
                    &uncalled,
                    call.as_deref(),
                    observe.as_deref(),
                    logs,
                    limit,
                );
                let message = "the script ended without a value".to_string();
                let next = self.script_error(text, message.clone(), logs);
                (next, ScriptOutput::Error { message })
            }
            Ok(value) => match ScriptOutput::read(value.clone()) {
                Ok(ScriptOutput::Error { message }) => {
                    let mut text = feedback::reported_error(&self.prompts, &message, logs, limit);
                    if let Some(section) = self.fallback_in_catch(&script, &message) {
                        text.push_str("\n\n");
                        text.push_str(&section);
                    }
                    let next = self.script_error(text, message.clone(), logs);
                    (next, ScriptOutput::Error { message })
                }
                Ok(output) => return (self.on_script(&output, logs), output),
                Err(NotAnOutput::Malformed(Malformed {
                    message,
                    problem,
                    quoted,
                })) => {
                    let text = feedback::host_error(
                        &self.prompts,
                        &problem,
                        quoted.as_deref(),
                        logs,
                        limit,
                    );
                    let next = self.script_error(text, message.clone(), logs);
                    (next, ScriptOutput::Error { message })
                }
                Err(NotAnOutput::Untagged { value }) => match self.config.bare_values {
                    BareValues::Observe => {
                        let text = feedback::bare_value(
                            &self.prompts,
                            &value,
                            logs,
                            limit,
                            self.language(),
                        );
                        self.observed(text, &value, logs);
                        (self.continue_or_stop(), ScriptOutput::Observation { value })
                    }
                    BareValues::Refuse => {
                        let text = feedback::bare_value_refused(&self.prompts, &value, logs, limit);
                        let output = ScriptOutput::decode(value);
                        let message = match &output {
                            ScriptOutput::Error { message } => message.clone(),
                            _ => String::new(),
                        };
                        (self.script_error(text, message, logs), output)
                    }
                },
            },
            Err(
                error @ (ScriptError::Syntax { message, .. } | ScriptError::Thrown { message, .. }),
            ) => {
                let facts = error.facts();
                let kind = facts.map(|facts| facts.kind.clone()).unwrap_or_default();
                let line = script_notes::failing_line(facts, &script);
                let unit_call = script_notes::called_on_unit(&kind);
                let values = match error {
                    ScriptError::Thrown { values, .. } if line.is_some() => values.as_slice(),
                    _ => &[],
                };
                // The scripts' lists are looked for only for a missing
                // function, the one error the bare-method hint answers.
                let coached = self.rule_on(Rule::BareArrayMethods);
                let meant = if coached && matches!(kind, ErrorKind::FunctionNotFound { .. }) {
                    match data_paths::list_names(&script, &self.step_tool_results).as_slice() {
                        [only] => Some(only.clone()),
                        _ => None,
                    }
                } else {
                    None
                };
                let bare_method = line.as_ref().filter(|_| coached).and_then(|(_, text)| {
                    script_notes::bare_array_method(
                        &kind,
                        text,
                        meant.as_deref().unwrap_or("array"),
                    )
                });
                // Said last, just before "Fix the script": placed above the
                // tool results, the model sent the same script again.
                if let Some((method, example, rewritten)) = &bare_method {
                    // The whole line, when the array is known: a small model
                    // copied the line's start with `(...)` no better than the
                    // method's name alone.
                    let whole_line = meant.as_ref().map(|_| {
                        (
                            line.as_ref().map_or(0, |(number, _)| *number),
                            feedback::fenced(rewritten, limit),
                        )
                    });
                    let section = self.prompts.render(
                        "feedback/bare_method",
                        context! {
                            method => method,
                            array => &meant,
                            example => example,
                            line_number => whole_line.as_ref().map(|(number, _)| *number),
                            line => whole_line.as_ref().map(|(_, line)| line.as_str()),
                        },
                    );
                    self.coaching.closing_sections.push(section);
                }
                if matches!(error, ScriptError::Syntax { .. }) {
                    self.account_for_two_word_names(&script, line.as_ref().map(|(n, _)| *n));
                }
                let hinted = self.rule_on(Rule::ErrorHints);
                let hints = feedback::ErrorHints {
                    line: line.as_ref().map(|(n, l)| (*n, l.as_str())),
                    values,
                    undefined_name: hinted
                        && matches!(
                            kind,
                            ErrorKind::UndefinedName { .. } | ErrorKind::FunctionNotFound { .. }
                        )
                        && unit_call.is_none()
                        && bare_method.is_none(),
                    called_on_unit: unit_call.filter(|_| hinted).map(|name| {
                        let method = line
                            .as_ref()
                            .and_then(|(_, text)| script_notes::in_place_method(text));
                        (name, method)
                    }),
                    out_of_bounds: script_notes::index_out_of_bounds(&kind).filter(|_| hinted),
                    unit_condition: script_notes::unit_condition(
                        &kind,
                        line.as_ref().map_or("", |(_, text)| text.as_str()),
                    )
                    .filter(|_| hinted),
                    import: (hinted && kind == ErrorKind::ImportUnavailable)
                        .then(|| &self.provided_names[script_notes::HELPERS.len()..]),
                    import_line: hinted
                        && line
                            .as_ref()
                            .is_some_and(|(_, text)| script_notes::is_import_line(text)),
                };
                let text = feedback::error_at(&self.prompts, message, hints, logs, limit);
                let next = self.script_error_with(text, message.clone(), facts, logs);
                (
                    next,
                    ScriptOutput::Error {
                        message: message.clone(),
                    },
                )
            }
            Err(
                error @ ScriptError::LimitExceeded {
                    described,
                    detail,
                    restarted,
                    ..
                },
            ) => {
                let text = feedback::limit_exceeded(
                    &self.prompts,
                    described,
                    detail.as_deref(),
                    *restarted,
                    logs,
                    limit,
                );
                let message = error.to_string();
                let next = self.script_error(text, message.clone(), logs);
                (next, ScriptOutput::Error { message })
            }
            Err(
                error @ ScriptError::EngineLost {
                    message: what,
                    detail,
                },
            ) => {
                let text =
                    feedback::engine_lost(&self.prompts, what, detail.as_deref(), logs, limit);
                let message = error.to_string();
                let next = self.script_error(text, message.clone(), logs);
                (next, ScriptOutput::Error { message })
            }
            Err(error @ ScriptError::Unrepresentable { message: what }) => {
                let text = feedback::unrepresentable(&self.prompts, what, logs, limit);
                let message = error.to_string();
                let next = self.script_error(text, message.clone(), logs);
                (next, ScriptOutput::Error { message })
            }
            Err(other) => {
                let output = ScriptOutput::Error {
                    message: other.to_string(),
                };
                return (self.on_script(&output, logs), output);
            }
        };
        (self.decide(next), output)
    }

    /// The script finished with `output`, having printed `logs`.
    pub fn on_script(&mut self, output: &ScriptOutput, logs: &LogBuffer) -> Decision {
        let limit = self.output_limit();
        let next = match output {
            ScriptOutput::FinalResult { value, artifacts } => Next::CheckResult {
                value: value.clone(),
                artifacts: artifacts.clone(),
            },
            ScriptOutput::TransferToAgent { agent_name }
                if self.transfer_targets.iter().any(|t| t == agent_name) =>
            {
                Next::Finish(Outcome::Transfer {
                    agent_name: agent_name.clone(),
                })
            }
            ScriptOutput::TransferToAgent { agent_name } => {
                let targets = &self.transfer_targets;
                let valid = self
                    .prompts
                    .render("transfer/valid_names", context! { targets => targets });
                // The name is the model's: the model's next message quotes it only
                // fenced. Its own name is the host's (the operator named it).
                let (text, message) = if !self.agent_name.is_empty()
                    && *agent_name == self.agent_name
                {
                    let message = self.prompts.render(
                        "transfer/to_itself",
                        context! { agent => &self.agent_name, targets => targets },
                    );
                    let text = feedback::host_error(&self.prompts, &message, None, logs, limit);
                    (text, message)
                } else {
                    let host = self
                        .prompts
                        .render("transfer/unknown", context! { targets => targets });
                    let text =
                        feedback::host_error(&self.prompts, &host, Some(agent_name), logs, limit);
                    (
                        text,
                        format!("there is no agent '{agent_name}' to transfer to; {valid}"),
                    )
                };
                let next = self.script_error(text, message, logs);
                // A refused transfer that ends the run (it spent the error budget,
                // or it was the last step) has never been reported as an error
                // event, though it counts as one: the event stream is kept as it
                // was. Dropping this `if` reports it like every other error.
                if matches!(next, Next::Finish(_))
                    && matches!(self.happened.last(), Some(Event::Error { .. }))
                {
                    self.happened.pop();
                }
                next
            }
            ScriptOutput::Observation { value } => {
                let script = self.current_script.as_deref().unwrap_or_default();
                // A value from lines changed beside a mend is not offered as
                // the answer: the note after it asks whether they were meant.
                let may_offer = self.coaching.changed_beside_mend.is_none();
                let text =
                    feedback::observation(&self.prompts, value, script, logs, limit, may_offer);
                self.observed(text, value, logs);
                self.continue_or_stop()
            }
            ScriptOutput::Error { message } => {
                let text = feedback::error(&self.prompts, message, logs, limit);
                self.script_error(text, message.clone(), logs)
            }
        };
        self.decide(next)
    }

    /// The submitted final result `value` was checked: accepted (ends the run) or
    /// refused (the reason goes back to the model, until the refusal budget runs
    /// out).
    pub fn on_check(&mut self, value: Value, check: &Check) -> Decision {
        let (by, reason, quoted) = match check {
            Check::Passed | Check::Unchecked { .. } => {
                return self.decide(Next::Finish(Outcome::FinalResult { value }));
            }
            Check::Refused { by, reason, quoted } => (*by, reason, quoted.as_ref()),
        };
        let refusals = self.progress.refusals + 1;
        let plain = refusal_text(reason, quoted);
        self.last_error = Some(plain.clone());
        let next = if refusals >= self.config.max_refusals {
            Next::Finish(Outcome::RefusalBudget {
                refusals,
                last_reason: plain.clone(),
            })
        } else {
            let text = feedback::refusal(
                &self.prompts,
                by,
                reason,
                quoted,
                self.config.max_refusals - refusals,
                self.config.feedback_limit,
            );
            self.push_feedback(text);
            self.continue_or_stop()
        };
        self.record(Event::ResultRefused {
            step: self.progress.steps,
            by,
            reason: plain,
            refusals,
        });
        self.decide(next)
    }

    /// The temperature for the next model call: the agent's own, or
    /// [`LoopConfig::retry_temperature`] when the last reply repeated a failure
    /// and that is higher.
    pub fn temperature(&self, own: Option<f32>) -> Option<f32> {
        match own {
            Some(own) if self.repeated => Some(own.max(self.config.retry_temperature)),
            None if self.repeated => Some(self.config.retry_temperature),
            own => own,
        }
    }

    /// Final results refused so far.
    pub fn refusals(&self) -> usize {
        self.progress.refusals
    }

    /// The error of the step in progress, when there was one.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// The event of a run that failed with `error` (the model or the host could
    /// not go on), at the step after the last reply.
    pub fn failed(&self, error: String) -> Event {
        Event::Failed {
            step: self.progress.steps + 1,
            error,
        }
    }

    /// The event of a run that ended with `outcome`.
    pub fn finished(&self, outcome: Outcome) -> Event {
        Event::Finished {
            outcome,
            steps: self.progress.steps,
            usage: self.progress.usage,
        }
    }

    /// Applies `event` and keeps it for the next decision.
    fn record(&mut self, event: Event) {
        self.progress.apply(&event);
        self.happened.push(event);
    }

    /// Hands `next` over with the step it belongs to and what happened.
    fn decide(&mut self, next: Next) -> Decision {
        let step = match next {
            Next::RunScript { .. } | Next::CheckResult { .. } => self.progress.steps,
            Next::CallModel | Next::Finish(_) => self.progress.steps + 1,
        };
        Decision {
            next,
            step,
            events: std::mem::take(&mut self.happened),
        }
    }

    fn observed(&mut self, mut text: String, value: &Value, logs: &LogBuffer) {
        if let Some(note) = self.made_up_filter_note() {
            text.push_str("\n\n");
            text.push_str(&note);
        }
        match self.coaching.changed_beside_mend.take() {
            Some(note) => {
                text.push_str("\n\n");
                text.push_str(&note);
            }
            // The chain of mends ends with a value shown as it is.
            None => self.coaching.first_mend = None,
        }
        // The same script showing the same value again: at temperature 0 a
        // small model looked at the same list up to its step limit.
        let script = self.current_script.clone().unwrap_or_default();
        let again = self
            .last_observation
            .as_ref()
            .is_some_and(|(last, shown)| *last == script && shown == value);
        if again && self.rule_on(Rule::RepeatedObservations) {
            self.record(Event::Coached {
                step: self.progress.steps,
                rule: Rule::RepeatedObservations.name().to_string(),
                decision: CoachDecision::Advised,
            });
            text.push_str("\n\n");
            // The task, quoted: after a few observations a small model may
            // list the data again rather than answer it.
            let task = self
                .turn_task()
                .map(|task| feedback::fenced(&task, self.config.feedback_limit));
            // A map with one number, observed by name: where that number is,
            // and the script that finishes with it, fenced (a small model
            // copies a fenced line). Said only after the same look twice:
            // offered at once, a map's number is taken where it is not the
            // answer.
            let number = map_as_number::the_number_key(value).and_then(|key| {
                let name = script_notes::observed_expression(&script)?;
                script_notes::is_sayable_name(&name).then(|| {
                    (
                        key,
                        format!("{name}{}", map_as_number::key_access(key, self.language())),
                    )
                })
            });
            text.push_str(&self.prompts.render(
                "hints/same_observation",
                context! {
                    task => task,
                    key => number.as_ref().map(|(key, _)| *key),
                    // The whole script, ending with that call: offered the
                    // call alone, a small model resends its own script; it
                    // copies a whole script it is handed.
                    call => number.as_ref().map(|(_, access)| {
                        feedback::fenced(
                            &script_notes::with_last_line_as(
                                &script,
                                &format!("final_result({access})"),
                            ),
                            self.config.feedback_limit,
                        )
                    }),
                },
            ));
        }
        let language = self.language.clone();
        let seen = Seen {
            messages: &self.progress.messages,
            script: &script,
            language: &language,
        };
        if let Some(advice) = self.coach.on_observation(&seen, value) {
            text.push_str("\n\n");
            text.push_str(&advice.text);
            self.record(Event::Coached {
                step: self.progress.steps,
                rule: advice.rule,
                decision: CoachDecision::Advised,
            });
        }
        self.repeated = again;
        self.last_observation = Some((script, value.clone()));
        self.step_tool_results.clear();
        self.step_failed_calls.clear();
        self.failed_script = None;
        self.last_error_feedback = None;
        self.note_proposal();
        self.push_feedback(text);
        self.record(Event::Observation {
            step: self.progress.steps,
            value: value.clone(),
            logs: logs.render(),
        });
    }

    /// Characters each piece of a script's feedback keeps:
    /// [`LoopConfig::feedback_limit`], or [`config::FEEDBACK_FLOOR`] once the
    /// run's [`LoopConfig::max_feedback_chars`] is spent.
    fn output_limit(&self) -> usize {
        match self.config.max_feedback_chars {
            Some(cap) if self.feedback_shown >= cap => {
                self.config.feedback_limit.min(config::FEEDBACK_FLOOR)
            }
            _ => self.config.feedback_limit,
        }
    }

    fn push_feedback(&mut self, text: String) {
        let mut notes = std::mem::take(&mut self.pending_notes);
        notes.push(text);
        let before = self.feedback_shown;
        self.feedback_shown = before.saturating_add(notes.iter().map(|n| n.chars().count()).sum());
        if let Some(cap) = self.config.max_feedback_chars
            && before < cap
            && self.feedback_shown >= cap
        {
            notes.push(self.prompts.render(
                "feedback/output_cap",
                context! { cap => cap, floor => config::FEEDBACK_FLOOR },
            ));
        }
        self.record(Event::Message {
            message: Message::user(notes.join("\n\n")),
        });
        let blocks = std::mem::take(&mut self.shown_images);
        if !blocks.is_empty() {
            self.record(Event::ImagesShown {
                step: self.progress.steps,
                blocks,
            });
        }
    }

    /// Images the step's script showed: they join its feedback, if the step has
    /// any (a result that ends the run has none).
    pub fn show_images(&mut self, blocks: Vec<ContentBlock>) {
        self.shown_images = blocks;
    }

    /// The script of the step in progress failed: `text` goes back to the model,
    /// `message` into the error event.
    fn script_error(&mut self, text: String, message: String, logs: &LogBuffer) -> Next {
        self.script_error_with(text, message, None, logs)
    }

    /// The same, for an engine's error whose `facts` the runtime gave (its
    /// kind, its line).
    fn script_error_with(
        &mut self,
        text: String,
        message: String,
        facts: Option<&ErrorFacts>,
        logs: &LogBuffer,
    ) -> Next {
        self.feed_back_error(text, &message, facts);
        self.count_error(message, logs.render())
    }

    /// Feeds back an error of the step in progress, made sharper when the same
    /// script, or the same feedback, failed last time.
    fn feed_back_error(&mut self, mut text: String, message: &str, facts: Option<&ErrorFacts>) {
        // A mend carried from a step that did not fail is not kept for one
        // that did; this step's own proposal (below, or a JavaScript fallback
        // found before) is.
        self.coaching.proposed_mend = self
            .coaching
            .proposed_mend
            .take()
            .filter(|mend| !mend.carried);
        let script = self.current_script.take();
        let results = std::mem::take(&mut self.step_tool_results);
        let failed = std::mem::take(&mut self.step_failed_calls);
        self.show_tool_results(&mut text, &results);
        let error = accounts::Failure { message, facts };
        self.account_for_failed_calls(&mut text, &error, script.as_deref(), &failed, &results);
        if !self.account_for_misread_data(&mut text, &error, script.as_deref(), &results)
            && !self.account_for_map_as_number(&mut text, &error, script.as_deref(), &results)
            && !self.account_for_missing_file(&mut text, &error, script.as_deref())
            && !self.account_for_uncaught_tool_error(&mut text, &error, script.as_deref())
        {
            self.account_for_absent_pattern(&mut text, script.as_deref(), &results);
        }
        let stub_sections = std::mem::take(&mut self.coaching.stub_sections);
        for section in stub_sections
            .iter()
            .chain(&std::mem::take(&mut self.coaching.closing_sections))
        {
            self.insert_before_fix_it(&mut text, section);
        }
        // A script that took part of the proposed rewrite and failed is
        // shown what it left out, and sent again runs as the rewrite, unless
        // this step's feedback proposed a rewrite of its own.
        let left_out = self.coaching.left_out_of_mend.take();
        if let (Some((note, mend)), Some(script), None) =
            (left_out, &script, &self.coaching.proposed_mend)
        {
            text.push_str("\n\n");
            text.push_str(&note);
            self.coaching.proposed_mend = Some(ProposedMend {
                failed: script.clone(),
                carried: false,
                ..mend
            });
        }
        let language = self.language.clone();
        let seen = Seen {
            messages: &self.progress.messages,
            script: script.as_deref().unwrap_or_default(),
            language: &language,
        };
        if let Some(advice) = self.coach.on_error(&seen, message) {
            self.insert_before_fix_it(&mut text, &advice.text);
            self.record(Event::Coached {
                step: self.progress.steps,
                rule: advice.rule,
                decision: CoachDecision::Advised,
            });
        }
        self.repeated = false;
        if let (Some(script), Some(failed)) = (&script, &self.failed_script)
            && script_notes::same_script(script, failed)
        {
            self.repeated = true;
            text.push_str("\n\n");
            text.push_str(&self.prompts.render("hints/same_script", context! {}));
        }
        if self.last_error_feedback.as_deref() == Some(text.as_str()) {
            self.repeated = true;
            text.push_str("\n\n");
            text.push_str(&self.prompts.render("hints/same_error", context! {}));
        }
        self.failed_script = script;
        self.last_observation = None;
        self.last_error_feedback = Some(text.clone());
        self.note_proposal();
        self.push_feedback(text);
        self.last_error = Some(message.to_string());
    }

    /// The host's tools, by name, with the signature the card shows for each.
    fn tools(&self) -> impl Iterator<Item = (&str, &str)> {
        self.provided_names[script_notes::HELPERS.len()..]
            .iter()
            .zip(&self.tool_signatures)
            .map(|(name, signature)| (name.as_str(), signature.as_str()))
    }

    /// The texts of the conversation the model did not write (the task, the
    /// host's feedback with what it quotes): where a value it passes or
    /// answers with could have come from.
    fn texts_the_model_read(&self) -> impl Iterator<Item = String> + '_ {
        self.progress
            .messages
            .iter()
            .filter(|message| message.role != Role::Assistant)
            .map(Message::joined_text)
    }

    /// The language scripts are written in, as the session's runtime names it.
    fn language(&self) -> data_paths::Language {
        data_paths::Language::from_name(&self.language)
    }

    /// Reports the step's error (with what the script printed) and ends the run
    /// when it spends the error budget.
    fn count_error(&mut self, message: String, logs: String) -> Next {
        self.record(Event::Error {
            step: self.progress.steps,
            message: message.clone(),
            logs,
        });
        if self.progress.consecutive_errors >= self.config.max_consecutive_errors {
            return Next::Finish(Outcome::ErrorBudget {
                consecutive_errors: self.progress.consecutive_errors,
                last_error: message,
            });
        }
        self.continue_or_stop()
    }

    fn continue_or_stop(&mut self) -> Next {
        if self.progress.steps - self.progress.turn_start_step >= self.config.max_steps {
            Next::Finish(Outcome::StepLimit {
                steps: self.progress.steps,
            })
        } else {
            Next::CallModel
        }
    }
}

/// A Python conversation whose one tool, `read_file`, says it gives text: the
/// set-up of every test of stubs that read a file.
#[cfg(test)]
pub(super) fn python_reading_files() -> Conversation {
    Conversation::new("task", &["python"], LoopConfig::default())
        .with_coach(Arc::new(super::coach::SmallModelCoach::default()))
        .with_tools([(
            "read_file".to_string(),
            "read_file(name=string)".to_string(),
        )])
        .with_tool_descriptions([(
            "read_file".to_string(),
            "The text of a named file (a string).".to_string(),
        )])
}

#[cfg(test)]
mod coach_tests;
#[cfg(test)]
mod tests;
