//! Final results a [`SmallModelCoach`](crate::agent::coach::SmallModelCoach)
//! holds back once, when the run's own data shows the answer is not what the
//! task asked: a tool's number in another unit, a tool's ids, an empty answer
//! to a made-up filter, a whole record where the task names one of its keys, a
//! Rhai `^` meant as a power, a result resting on a faked tool. A hold is a
//! refusal ([`RefusedBy::Coach`]) counted against the refusal budget, recorded
//! as an [`Event::Coached`] naming its rule; each rule holds at most once a run
//! (or a chat turn), so a result sent again is accepted.

use codeact_runtime::LogBuffer;
use minijinja::context;
use serde_json::Value;

use super::{Conversation, Decision, Next};
use crate::agent::coach::{Rule, Seen};
use crate::agent::events::{CoachDecision, Event};
use crate::agent::{answer_shape, feedback, made_up_filters, script_notes, units};
use crate::chat::Message;
use crate::output::script_output::ScriptOutput;
use crate::output::spec::RefusedBy;

/// Numbers from the run's tool results kept for
/// `Rule::OtherUnits` (and ids for
/// `Rule::IdsAsResults`): a run past it is not checked against the later
/// ones.
pub(super) const NUMBERS_KEPT: usize = 1_000;

/// Maps from the run's tool results kept for `Rule::WholeMaps`,
/// and the size (as JSON) past which one is not kept.
pub(super) const RECORDS_KEPT: usize = 200;
pub(super) const RECORD_BYTES: usize = 4_096;

/// A list of more integers than this is not read as ids by
/// `Rule::IdsAsResults`.
pub(super) const IDS_LISTED: usize = 10;

/// The integers of a value that may be ids: an integer, or a list of 1 to
/// [`IDS_LISTED`] integers.
fn ids_in(value: &Value) -> Option<Vec<i64>> {
    match value {
        Value::Number(number) => number.as_i64().map(|id| vec![id]),
        Value::Array(items) if (1..=IDS_LISTED).contains(&items.len()) => {
            items.iter().map(Value::as_i64).collect()
        }
        _ => None,
    }
}

/// A final result's value as JSON writes it when it is a number or a boolean
/// (nothing a script can word), else none: for feedback that names it.
fn number_or_bool(value: &Value) -> Option<String> {
    (value.is_number() || value.is_boolean()).then(|| value.to_string())
}

/// A held result's feedback and the error message the run records.
struct Held {
    rule: String,
    text: String,
    message: String,
}

impl Conversation {
    /// The decision for a script whose `completion` value is a final result
    /// to hold back, checked in the order of the module's list; `None` lets
    /// it through.
    pub(super) fn held_back(
        &mut self,
        script: &str,
        completion: &Value,
        logs: &LogBuffer,
    ) -> Option<(Decision, ScriptOutput)> {
        let Ok(ScriptOutput::FinalResult { value, .. }) = ScriptOutput::read(completion.clone())
        else {
            return None;
        };
        let held = self
            .hold_for_faked_tool()
            .or_else(|| self.hold_for_rhai_power(script))
            .or_else(|| self.hold_for_other_unit(&value))
            .or_else(|| self.hold_as_ids(&value))
            .or_else(|| self.hold_for_made_up_filter(script, &value))
            .or_else(|| self.hold_as_whole_map(&value))
            .or_else(|| self.coach_hold(script, &value))?;
        let _ = logs;
        Some((
            self.hold(held),
            ScriptOutput::FinalResult {
                value,
                artifacts: Vec::new(),
            },
        ))
    }

    /// Whether the built-in `rule` is on and has not held a result back in
    /// this run (or chat turn) yet.
    fn may_hold(&self, rule: Rule) -> bool {
        self.rule_on(rule)
            && !self
                .progress
                .held_rules
                .iter()
                .any(|held| held == rule.name())
    }

    /// The run's coach's own hold, when it has one.
    fn coach_hold(&mut self, script: &str, value: &Value) -> Option<Held> {
        let language = self.language.clone();
        let seen = Seen {
            messages: &self.progress.messages,
            script,
            language: &language,
        };
        let hold = self
            .coach
            .on_final_result(&seen, value, &self.progress.held_rules)?;
        let text = if hold.text.is_empty() {
            hold.reason.clone()
        } else {
            hold.text
        };
        Some(Held {
            rule: hold.rule,
            text,
            message: hold.reason,
        })
    }

    /// Refuses a held final result: the same path as an output check's
    /// refusal, counted against the refusal budget, never as an error.
    fn hold(&mut self, held: Held) -> Decision {
        let refusals = self.progress.refusals + 1;
        let step = self.progress.steps;
        self.current_script = None;
        self.step_tool_results.clear();
        self.step_failed_calls.clear();
        self.last_error = Some(held.message.clone());
        let next = if refusals >= self.config.max_refusals {
            Next::Finish(crate::agent::Outcome::RefusalBudget {
                refusals,
                last_reason: held.message.clone(),
            })
        } else {
            self.note_proposal();
            self.push_feedback(held.text);
            self.continue_or_stop()
        };
        self.record(Event::Coached {
            step,
            rule: held.rule,
            decision: CoachDecision::Held {
                reason: held.message.clone(),
            },
        });
        self.record(Event::ResultRefused {
            step,
            by: RefusedBy::Coach,
            reason: held.message,
            refusals,
        });
        self.decide(next)
    }

    /// Keeps from a script's tool results what the checks compare a final
    /// result with: numbers, ids and maps.
    pub(super) fn remember_results(&mut self, results: &[feedback::ToolResultSeen]) {
        for result in results {
            let maps: Vec<&Value> = match &result.value {
                Value::Object(_) => vec![&result.value],
                Value::Array(items) => items.iter().filter(|item| item.is_object()).collect(),
                _ => Vec::new(),
            };
            for map in maps {
                if self.coaching.records_seen.len() < RECORDS_KEPT
                    && map.to_string().len() <= RECORD_BYTES
                    && !self.coaching.records_seen.contains(map)
                {
                    self.coaching.records_seen.push(map.clone());
                }
            }
            if ids_in(&result.value).is_some() && self.coaching.ids_seen.len() < NUMBERS_KEPT {
                self.coaching
                    .ids_seen
                    .push((result.tool.clone(), result.value.clone()));
            }
            let room = NUMBERS_KEPT.saturating_sub(self.coaching.numbers_seen.len());
            self.coaching.numbers_seen.extend(
                units::numbers_of(&result.tool, &result.value)
                    .into_iter()
                    .take(room),
            );
        }
    }

    /// A final result of a script that defines its own stand-in for a host
    /// tool ([`Rule::FakedTools`]): its data is made up.
    fn hold_for_faked_tool(&mut self) -> Option<Held> {
        if self.coaching.faked_tools.is_empty() || !self.may_hold(Rule::FakedTools) {
            return None;
        }
        let names = self.coaching.faked_tools.join("`, `");
        let message = format!(
            "the final result was held back: the script defined its own `{names}` instead of calling the host's tool, so its data is made up"
        );
        let text = self.prompts.render(
            "feedback/faked_tool",
            context! { names => &self.coaching.faked_tools },
        );
        Some(Held {
            rule: Rule::FakedTools.name().to_string(),
            text,
            message,
        })
    }

    fn hold_for_rhai_power(&mut self, script: &str) -> Option<Held> {
        let pitfall = self.pitfall_to_hold(script)?;
        let text = self.prompts.render(
            "feedback/pitfall",
            context! { line_number => pitfall.line, account => &pitfall.account },
        );
        let message = format!("the final result was held back: {}", pitfall.account);
        Some(Held {
            rule: Rule::RhaiPowers.name().to_string(),
            text,
            message,
        })
    }

    fn hold_for_other_unit(&mut self, value: &Value) -> Option<Held> {
        let found = self.other_unit_to_hold(value)?;
        let converters: Vec<&str> = self
            .tool_descriptions
            .iter()
            .filter(|(name, description)| {
                *name != found.tool
                    && (name.to_lowercase().contains("convert")
                        || description.to_lowercase().contains("convert"))
            })
            .filter_map(|(name, _)| self.signature_of(name))
            .collect();
        let text = self.prompts.render(
            "feedback/other_unit",
            context! {
                value => value.to_string(),
                tool => &found.tool,
                given => found.given.name,
                asked => found.asked.name,
                from_code => found.given.code.unwrap_or_default(),
                to_code => found.asked.code.unwrap_or_default(),
                converters => converters,
            },
        );
        let message = format!(
            "the final result was held back: it is what `{}` returned, in {}, and the task asks for {}",
            found.tool, found.given.name, found.asked.name
        );
        // The tools' data is not in question here: only its unit.
        self.step_tool_results.clear();
        Some(Held {
            rule: Rule::OtherUnits.name().to_string(),
            text,
            message,
        })
    }

    fn hold_as_ids(&mut self, value: &Value) -> Option<Held> {
        let (tool, calls) = self.ids_to_hold(value)?;
        let many = ids_in(value).is_some_and(|ids| ids.len() > 1);
        let text = self.prompts.render(
            "feedback/ids_as_result",
            context! { value => value.to_string(), tool => &tool, many, calls },
        );
        let message = format!(
            "the final result was held back: it is the ids `{tool}` returned, and the task does not ask for an id"
        );
        self.step_tool_results.clear();
        Some(Held {
            rule: Rule::IdsAsResults.name().to_string(),
            text,
            message,
        })
    }

    fn hold_for_made_up_filter(&mut self, script: &str, value: &Value) -> Option<Held> {
        let found = self.made_up_filter_to_hold(script)?;
        let text = self.prompts.render(
            "feedback/made_up_filter",
            context! {
                value => number_or_bool(value),
                tool => &found.tool,
                argument => &found.argument,
                empty => found.empty,
                empty_word => match found.empty {
                    "[]" => "an empty list",
                    "{}" => "an empty map",
                    "\"\"" => "an empty text",
                    _ => "`null`",
                },
                line_number => found.rewritten.as_ref().map(|(n, _)| *n),
                line => found.rewritten.as_ref().map(|(_, line)| line.as_str()),
            },
        );
        let message = format!(
            "the final result was held back: `{}` returned {} for a `{}` found nowhere in the task",
            found.tool, found.empty, found.argument
        );
        self.step_tool_results.clear();
        Some(Held {
            rule: Rule::MadeUpFilters.name().to_string(),
            text,
            message,
        })
    }

    fn hold_as_whole_map(&mut self, value: &Value) -> Option<Held> {
        let (key, part) = self.asked_key_to_hold(value)?;
        let text = self
            .prompts
            .render("feedback/whole_map", context! { key => &key, part => part });
        let what = if part {
            "a map of a record's keys"
        } else {
            "a whole map"
        };
        let message = format!(
            "the final result was held back: it is {what}, and the task asks only for its `{key}`"
        );
        self.step_tool_results.clear();
        Some(Held {
            rule: Rule::WholeMaps.name().to_string(),
            text,
            message,
        })
    }

    /// The first Rhai pitfall of a Rhai script that ended with a final result,
    /// unless a result was held back for it already (then it is taken to be
    /// meant): the result is held back once, as an error naming it, since a
    /// small model repeats its script after any gentler note.
    fn pitfall_to_hold(&mut self, script: &str) -> Option<script_notes::RhaiPitfall> {
        if !self.may_hold(Rule::RhaiPowers)
            || self.language() != crate::agent::data_paths::Language::Rhai
        {
            return None;
        }
        // Only `A^B`: a range between literals (`1..100`) is as often meant
        // to exclude its end as not.
        script_notes::rhai_pitfalls(script)
            .into_iter()
            .find(|p| p.written.contains('^'))
    }

    /// A final result (with its number) to hold back once as a tool's number
    /// in another unit than the task asks for: see
    /// `Rule::OtherUnits`. The task is the message
    /// that started the run, or the chat turn.
    fn other_unit_to_hold(&mut self, value: &Value) -> Option<units::OtherUnit> {
        if !self.may_hold(Rule::OtherUnits) {
            return None;
        }
        let task = self.turn_task()?;
        let found = units::other_unit(
            &task,
            value,
            &self.coaching.numbers_seen,
            &self.tool_descriptions,
        )?;
        Some(found)
    }

    /// A final result to hold back once as ids (see
    /// `Rule::IdsAsResults`): the result, the tool that returned
    /// it, and the calls of the tools that take an id, with the first id put
    /// in where the tool has no other argument.
    fn ids_to_hold(&mut self, value: &Value) -> Option<(String, Vec<String>)> {
        if !self.may_hold(Rule::IdsAsResults) {
            return None;
        }
        let first_id = *ids_in(value)?.first()?;
        let (tool, _) = self
            .coaching
            .ids_seen
            .iter()
            .find(|(_, seen)| seen == value)?;
        let names_ids = |text: &str| {
            text.to_lowercase()
                .split(|c: char| !c.is_alphanumeric())
                .any(|word| matches!(word, "id" | "ids" | "identifier" | "identifiers"))
        };
        // The tool must say it returns ids: a count or a price is no id.
        let described = self
            .tool_descriptions
            .iter()
            .any(|(name, description)| name == tool && names_ids(description));
        let task = self.turn_task()?;
        if !described || names_ids(&task) {
            return None;
        }
        let calls: Vec<String> = self
            .tools()
            .filter(|(name, signature)| name != tool && script_notes::takes_an_id(signature))
            .map(|(_, signature)| {
                script_notes::call_with_id(signature, first_id)
                    .unwrap_or_else(|| signature.to_string())
            })
            .collect();
        if calls.is_empty() {
            return None;
        }
        Some((tool.clone(), calls))
    }

    /// The made-up filter a final result is held back once for: see
    /// `Rule::MadeUpFilters`.
    fn made_up_filter_to_hold(&mut self, script: &str) -> Option<made_up_filters::MadeUpFilter> {
        if !self.may_hold(Rule::MadeUpFilters)
            || self
                .progress
                .noted_rules
                .iter()
                .any(|rule| rule == Rule::MadeUpFilters.name())
            || self.step_tool_results.is_empty()
        {
            return None;
        }
        let seen: Vec<String> = self.texts_the_model_read().collect();
        let signatures: Vec<(String, String)> = self
            .tools()
            .map(|(name, signature)| (name.to_string(), signature.to_string()))
            .collect();
        let found = made_up_filters::made_up_filter(
            script,
            &self.step_tool_results,
            &seen,
            &signatures,
            self.language(),
        )?;
        Some(found)
    }

    /// What to say under an observation whose script got an empty value for
    /// a filter it made up (`list_orders(customer="Alice")` returned `[]`):
    /// the same account as a held result's, said where the empty value is
    /// first seen, once a run (`Rule::MadeUpFilters`).
    pub(super) fn made_up_filter_note(&mut self) -> Option<String> {
        let script = self.current_script.clone()?;
        let found = self.made_up_filter_to_hold(&script)?;
        self.record(Event::Coached {
            step: self.progress.steps,
            rule: Rule::MadeUpFilters.name().to_string(),
            decision: CoachDecision::Advised,
        });
        Some(self.prompts.render(
            "feedback/made_up_filter_seen",
            context! {
                tool => &found.tool,
                argument => &found.argument,
                empty => found.empty,
                line_number => found.rewritten.as_ref().map(|(n, _)| *n),
                line => found.rewritten.as_ref().map(|(_, line)| line.as_str()),
            },
        ))
    }

    /// The key a whole-map final result is held back once for: see
    /// `Rule::WholeMaps`. The key the task asks for of a final
    /// result that is a map a tool returned, whole, or two or more of one such
    /// map's entries as they were, and whether it was such a part.
    fn asked_key_to_hold(&mut self, value: &Value) -> Option<(String, bool)> {
        if !self.may_hold(Rule::WholeMaps) {
            return None;
        }
        // Only a record as a tool returned it: a map the script built, even of
        // a record's entries, is its own answer ("the city and its
        // temperature").
        if !self.coaching.records_seen.contains(value) {
            return None;
        }
        let key = answer_shape::asked_key(&self.turn_task()?, value)?;
        Some((key, false))
    }

    /// The message that started the run, or the chat turn: the task the
    /// result answers.
    pub(super) fn turn_task(&self) -> Option<String> {
        let at = self.progress.turn_starts.last().copied().unwrap_or(0);
        self.progress.messages.get(at).map(Message::joined_text)
    }

    /// The signature the card shows for the tool `name`.
    pub(super) fn signature_of(&self, name: &str) -> Option<&str> {
        self.tools()
            .find(|(tool, _)| *tool == name)
            .map(|(_, signature)| signature)
    }
}
