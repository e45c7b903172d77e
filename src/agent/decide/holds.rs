//! Final results held back once, as an error that says why, when the host can
//! tell from the run's own data that the answer is not what the task asked:
//! a Rhai pitfall, words found nowhere, a tool's number in another unit, a
//! tool's ids, an empty answer to a made-up filter, an empty answer from a
//! text the data does not hold, a whole record where the task names one of
//! its keys, a number written by hand after an observation of the data it
//! comes from. Each is on by default, off with its
//! `LoopConfig::hold_…` switch, and holds a run's result at most once: sent
//! again, the result is accepted, so an answer that meant it costs one step.

use codeact_runtime::LogBuffer;
use minijinja::context;
use serde_json::Value;

use super::{Conversation, Decision};
use crate::agent::{absent_patterns, answer_shape, feedback, made_up_filters, script_notes, units};
use crate::chat::Message;
use crate::output::script_output::ScriptOutput;

/// Numbers from the run's tool results kept for
/// `LoopConfig::hold_results_in_other_units` (and ids for
/// `hold_ids_as_results`): a run past it is not checked against the later
/// ones.
pub(super) const NUMBERS_KEPT: usize = 1_000;

/// Maps from the run's tool results kept for `LoopConfig::hold_whole_maps`,
/// and the size (as JSON) past which one is not kept.
pub(super) const RECORDS_KEPT: usize = 200;
pub(super) const RECORD_BYTES: usize = 4_096;

/// The bytes of the run's tool results kept as text for
/// `LoopConfig::hold_unfounded_results`: past them, a run's results are not
/// all known, and its answers are not checked for words found nowhere.
pub(super) const TOOL_TEXT_KEPT: usize = 256 * 1024;

/// A list of more integers than this is not read as ids by
/// `LoopConfig::hold_ids_as_results`.
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

/// The most numbers of an observation compared with a hand-written result.
const NUMBERS_COMPARED: usize = 10_000;

/// The number a script is nothing but a call of `final_result` on (its one
/// line, comments and blank lines aside): `final_result(40.8)`.
pub(super) fn written_number(script: &str) -> Option<f64> {
    let mut lines = script
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#') && !line.starts_with("//"));
    let line = lines.next()?;
    if lines.next().is_some() {
        return None;
    }
    let line = line.strip_suffix(';').unwrap_or(line).trim_end();
    let inner = line
        .strip_prefix("final_result(")?
        .strip_suffix(')')?
        .trim();
    let plain = !inner.is_empty()
        && inner
            .chars()
            .all(|c| c.is_ascii_digit() || ".-_eE+".contains(c));
    plain.then(|| inner.replace('_', "").parse().ok()).flatten()
}

/// The numbers of `value`, depth first, up to [`NUMBERS_COMPARED`].
fn numbers_in(value: &Value, numbers: &mut Vec<f64>) {
    if numbers.len() >= NUMBERS_COMPARED {
        return;
    }
    match value {
        Value::Number(number) => numbers.extend(number.as_f64()),
        Value::Array(items) => items.iter().for_each(|item| numbers_in(item, numbers)),
        Value::Object(map) => map.values().for_each(|item| numbers_in(item, numbers)),
        _ => {}
    }
}

/// A held result's feedback and the error message the run records.
struct Held {
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
            .hold_for_pitfall(script)
            .or_else(|| self.hold_as_unfounded(script, &value))
            .or_else(|| self.hold_for_other_unit(&value))
            .or_else(|| self.hold_as_ids(&value))
            .or_else(|| self.hold_for_made_up_filter(script, &value))
            .or_else(|| self.hold_for_absent_pattern(script, &value))
            .or_else(|| self.hold_as_whole_map(&value))
            .or_else(|| self.hold_as_hand_computed(script, &value))?;
        let next = self.script_error(held.text, held.message.clone(), logs);
        Some((
            self.decide(next),
            ScriptOutput::Error {
                message: held.message,
            },
        ))
    }

    /// Keeps from a script's tool results what the checks compare a final
    /// result with: numbers, ids and maps.
    pub(super) fn remember_results(&mut self, results: &[feedback::ToolResultSeen]) {
        self.tool_results_noted += results.len();
        for result in results {
            let text = match &result.value {
                Value::String(text) => text.to_lowercase(),
                other => other.to_string().to_lowercase(),
            };
            if self.tool_text_seen.len() + text.len() < TOOL_TEXT_KEPT {
                self.tool_text_seen.push_str(&text);
                self.tool_text_seen.push('\n');
            } else {
                self.tool_text_complete = false;
            }
            let maps: Vec<&Value> = match &result.value {
                Value::Object(_) => vec![&result.value],
                Value::Array(items) => items.iter().filter(|item| item.is_object()).collect(),
                _ => Vec::new(),
            };
            for map in maps {
                if self.records_seen.len() < RECORDS_KEPT
                    && map.to_string().len() <= RECORD_BYTES
                    && !self.records_seen.contains(map)
                {
                    self.records_seen.push(map.clone());
                }
            }
            if ids_in(&result.value).is_some() && self.ids_seen.len() < NUMBERS_KEPT {
                self.ids_seen
                    .push((result.tool.clone(), result.value.clone()));
            }
            let room = NUMBERS_KEPT.saturating_sub(self.numbers_seen.len());
            self.numbers_seen.extend(
                units::numbers_of(&result.tool, &result.value)
                    .into_iter()
                    .take(room),
            );
        }
    }

    fn hold_as_hand_computed(&mut self, script: &str, value: &Value) -> Option<Held> {
        if !self.config.hold_hand_computed_results || self.held_hand_computed {
            return None;
        }
        let written = written_number(script)?;
        let (observed_by, observed) = self.last_observation.as_ref()?;
        let mut numbers = Vec::new();
        numbers_in(observed, &mut numbers);
        let same = |n: &f64| (n - written).abs() <= 1e-9 * n.abs().max(1.0);
        if numbers.len() < 2 || numbers.iter().any(same) || value.as_f64() != Some(written) {
            return None;
        }
        self.held_hand_computed = true;
        // The observed name, when the observation's expression was one: its
        // variable still holds the data.
        let name = script_notes::observed_expression(observed_by)
            .filter(|expression| script_notes::is_sayable_name(expression));
        let text = self.prompts.render(
            "feedback/hand_computed",
            context! { value => value.to_string(), name => name },
        );
        let message = format!(
            "the final result was held back: {value} was written by hand, and it is none of the numbers observed"
        );
        Some(Held { text, message })
    }

    fn hold_for_pitfall(&mut self, script: &str) -> Option<Held> {
        let pitfall = self.pitfall_to_hold(script)?;
        let text = self.prompts.render(
            "feedback/pitfall",
            context! { line_number => pitfall.line, account => &pitfall.account },
        );
        let message = format!("the final result was held back: {}", pitfall.account);
        Some(Held { text, message })
    }

    fn hold_as_unfounded(&mut self, script: &str, value: &Value) -> Option<Held> {
        let words = self.unfounded_words(script, value)?;
        let called = self.tool_calls_made > 0;
        let text = self.prompts.render(
            "feedback/unfounded_result",
            context! { signatures => &self.tool_signatures, called => called },
        );
        let message = if called {
            format!(
                "the final result was held back: it holds words found nowhere in the conversation or in the tools' results ({})",
                words.join(", ")
            )
        } else {
            format!(
                "the final result was held back: no tool was called, and it holds words found nowhere in the conversation ({})",
                words.join(", ")
            )
        };
        Some(Held { text, message })
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
        Some(Held { text, message })
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
        Some(Held { text, message })
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
        Some(Held { text, message })
    }

    fn hold_for_absent_pattern(&mut self, script: &str, value: &Value) -> Option<Held> {
        if !self.config.hold_results_from_absent_patterns
            || self.held_absent_pattern
            || !absent_patterns::looks_like_nothing_found(value, script, &self.step_tool_results)
        {
            return None;
        }
        let found = absent_patterns::absent_pattern(script, &self.step_tool_results, false)?;
        self.held_absent_pattern = true;
        let shown = match value {
            Value::Null => Some("null".to_string()),
            Value::Array(items) if items.is_empty() => Some("[]".to_string()),
            Value::Object(entries) if entries.is_empty() => Some("{}".to_string()),
            other => number_or_bool(other),
        };
        let text = self.absent_pattern_account(&found, script, Some(shown));
        let message = format!(
            "the final result was held back: line {} of its script looks for a text that occurs nowhere in its data",
            found.line
        );
        self.step_tool_results.clear();
        Some(Held { text, message })
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
        Some(Held { text, message })
    }

    /// The first Rhai pitfall of a Rhai script that ended with a final result,
    /// unless a result was held back for it already (then it is taken to be
    /// meant): the result is held back once, as an error naming it, since a
    /// small model repeats its script after any gentler note.
    fn pitfall_to_hold(&mut self, script: &str) -> Option<script_notes::RhaiPitfall> {
        if !self.config.hold_rhai_pitfalls
            || self.fence_tags.first().map(String::as_str) != Some("rhai")
        {
            return None;
        }
        let pitfall = script_notes::rhai_pitfalls(script)
            .into_iter()
            .find(|p| !self.flagged_pitfalls.contains(&p.written))?;
        self.flagged_pitfalls.push(pitfall.written.clone());
        Some(pitfall)
    }

    /// The words of a final result found nowhere in the conversation but typed
    /// into the `script` itself, when the result is to be held back as
    /// unfounded: see `LoopConfig::hold_unfounded_results`. Only words of its
    /// strings count (numbers are computed), and only words the script wrote
    /// (a word it computed, `"tcaedoc"` from `"codeact"`, is not invented
    /// data). After tool calls, the words are looked for in all they returned
    /// too, and not at all when that is not all known (a call failed or was
    /// refused, and its error may be the answer; a result was not kept). Not with the file
    /// tools: Python's `open` reads the working directory without a tool
    /// call. At most five are returned, for the error event.
    fn unfounded_words(&mut self, script: &str, value: &Value) -> Option<Vec<String>> {
        if !self.config.hold_unfounded_results
            || self.held_unfounded
            || self.tool_signatures.is_empty()
            || (self.tool_calls_made > 0
                && !(self.tool_text_complete && self.tool_results_noted == self.tool_calls_made))
            || self
                .provided_names
                .iter()
                .any(|name| name == crate::files::READ_TEXT_TOOL)
        {
            return None;
        }
        let seen: String = self
            .texts_the_model_read()
            .map(|text| text.to_lowercase())
            .chain(std::iter::once(self.tool_text_seen.clone()))
            .collect::<Vec<_>>()
            .join("\n");
        let typed = script.to_lowercase();
        let words: Vec<String> = script_notes::unseen_words(value, &seen)
            .into_iter()
            .filter(|word| typed.contains(word.as_str()))
            .collect();
        if words.is_empty() {
            return None;
        }
        self.held_unfounded = true;
        Some(words.into_iter().take(5).collect())
    }

    /// A final result (with its number) to hold back once as a tool's number
    /// in another unit than the task asks for: see
    /// `LoopConfig::hold_results_in_other_units`. The task is the message
    /// that started the run, or the chat turn.
    fn other_unit_to_hold(&mut self, value: &Value) -> Option<units::OtherUnit> {
        if !self.config.hold_results_in_other_units || self.held_other_unit {
            return None;
        }
        let task = self.turn_task()?;
        let found = units::other_unit(&task, value, &self.numbers_seen, &self.tool_descriptions)?;
        self.held_other_unit = true;
        Some(found)
    }

    /// A final result to hold back once as ids (see
    /// `LoopConfig::hold_ids_as_results`): the result, the tool that returned
    /// it, and the calls of the tools that take an id, with the first id put
    /// in where the tool has no other argument.
    fn ids_to_hold(&mut self, value: &Value) -> Option<(String, Vec<String>)> {
        if !self.config.hold_ids_as_results || self.held_ids {
            return None;
        }
        let first_id = *ids_in(value)?.first()?;
        let (tool, _) = self.ids_seen.iter().find(|(_, seen)| seen == value)?;
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
        self.held_ids = true;
        Some((tool.clone(), calls))
    }

    /// The made-up filter a final result is held back once for: see
    /// `LoopConfig::hold_results_from_made_up_filters`.
    fn made_up_filter_to_hold(&mut self, script: &str) -> Option<made_up_filters::MadeUpFilter> {
        if !self.config.hold_results_from_made_up_filters
            || self.held_made_up_filter
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
        self.held_made_up_filter = true;
        Some(found)
    }

    /// What to say under an observation whose script got an empty value for
    /// a filter it made up (`list_orders(customer="Alice")` returned `[]`):
    /// the same account as a held result's, said where the empty value is
    /// first seen, once a run (`LoopConfig::hold_results_from_made_up_filters`).
    ///
    /// Why: the local 1.5B model (CPython) observed the empty list its own
    /// customer gave, then answered `final_result(0)` in a script that called
    /// no tool, which no hold can check.
    pub(super) fn made_up_filter_note(&mut self) -> Option<String> {
        let script = self.current_script.clone()?;
        let found = self.made_up_filter_to_hold(&script)?;
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
    /// `LoopConfig::hold_whole_maps`.
    /// The key the task asks for of a final result that is a map a tool
    /// returned, whole, or two or more of one such map's entries as they were
    /// (the local model typed `{"email": …, "name": …, "user_id": 42}` from a
    /// user's record of four keys: the evaluation's `email-by-name`, label
    /// `columns`), and whether it was such a part.
    fn asked_key_to_hold(&mut self, value: &Value) -> Option<(String, bool)> {
        if !self.config.hold_whole_maps || self.held_whole_map {
            return None;
        }
        let whole = self.records_seen.contains(value);
        let part = !whole
            && value.as_object().is_some_and(|map| {
                map.len() >= 2
                    && self.records_seen.iter().any(|record| {
                        record
                            .as_object()
                            .is_some_and(|record| map.iter().all(|(k, v)| record.get(k) == Some(v)))
                    })
            });
        if !whole && !part {
            return None;
        }
        let key = answer_shape::asked_key(&self.turn_task()?, value)?;
        self.held_whole_map = true;
        Some((key, part))
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
