//! Coaching: advice a host may add to the loop for models that need it.
//!
//! The loop ([`Conversation`](super::Conversation)) decides: it extracts the
//! code, runs it, reads its value, routes observations and errors, keeps the
//! budgets and runs the app's output checks. A [`Coach`] only advises, at four
//! points: a script about to run (it may propose a rewrite), an error (it may
//! add to the feedback), an observation (likewise) and a final result (it may
//! hold it back). Every piece of advice taken is an [`Event::Coached`] naming
//! its rule, so a resumed run knows what the first one decided; a hold is a
//! refusal ([`RefusedBy::Coach`](crate::output::spec::RefusedBy::Coach)),
//! counted against [`LoopConfig::max_refusals`](super::LoopConfig::max_refusals),
//! never as an error; a rewrite runs only after it is recorded with both
//! scripts, and the model is told.
//!
//! [`PlainCoach`] (the default) gives no advice: the loop's own feedback is the
//! engine's error with its failing line quoted, what the script's tool calls
//! returned when it failed, a hint when the same script fails twice, and bare
//! values shown as observations. It never refuses a final result the app's
//! checks accept and never runs code the model did not send. Fits any model
//! that writes working code most of the time.
//!
//! [`SmallModelCoach`] turns on the host's built-in [`Rule`]s, each with its own
//! switch: feedback that names a misread tool result or a language pitfall, a
//! few holds on final results the run's own data shows to be wrong, and
//! rewrites of a script the model sent back unchanged after a failure. Fits
//! small local models (a few billion parameters), which repeat a failing script
//! or answer from data they never looked at; each rule costs at most a step
//! where it is wrong, and a hold fires at most once a run.
//!
//! [`Event::Coached`]: super::Event::Coached

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::chat::Message;

/// One of the host's built-in coaching rules, each turned on by
/// [`SmallModelCoach`] and off with [`SmallModelCoach::without`]. Named in the
/// [`Event::Coached`](super::Event::Coached) of each decision it makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Rule {
    /// A script that defines a function or an object named like a host tool
    /// (`def get_weather(city): …`, `const tools = {…}`) is told to call the
    /// tool, and its final result is held back once: its data is made up. A
    /// variable holding what the tool returned (`const weather =
    /// tools.weather({…})`) is not a stand-in. Costs a step when a script
    /// wraps a tool in a function of the same name on purpose.
    FakedTools,
    /// A Python script's own stub of a host tool (`def read_file(name): …`,
    /// `def final_result(x): …`) is taken out before the script runs, so its
    /// calls reach the host's tool; the rewrite is recorded with both scripts
    /// and the model is told. Costs nothing on correct code, which has no
    /// reason to shadow a tool.
    PythonStubs,
    /// After a feedback proposed a rewrite of a failed script (a tool error
    /// caught, a map's number taken, a JavaScript fallback moved into its
    /// `catch`), the same failed script sent again runs as that rewrite, with
    /// a note; a script that took part of it is shown what it left out. Costs
    /// nothing on a script that changed.
    RewriteRepeatedScripts,
    /// After a Python script failed on a tool's `ToolError` it meant to test
    /// for `None`, the feedback writes the line catching it.
    CatchToolErrors,
    /// After a script failed doing arithmetic on a tool's maps of one number,
    /// the feedback writes the line taking that number.
    MapsAsNumbers,
    /// After a JavaScript script reported a tool's failure from its `catch`
    /// while its fallback sat in the `else` of a test of the tool's value, the
    /// feedback writes the script with the fallback in the `catch`.
    FallbackInCatch,
    /// After Python's `open` found no file while a tool reads files, the
    /// feedback names that tool and writes the `with open` block over it.
    FilesThroughTools,
    /// After a script failed reading a tool's result along a path that leads
    /// nowhere, character by character, or with its header taken as data, the
    /// feedback says so with the result's real shape.
    MisreadData,
    /// After a script failed, a text it looked for or split on that occurs
    /// nowhere in what its tools returned is quoted with a line of the data
    /// that holds its word. Feedback only: an empty answer is never held.
    AbsentPatterns,
    /// After a parse error at a line that gives a variable two words
    /// (`let total price = …`), the feedback writes it with one name.
    TwoWordNames,
    /// After a Rhai script called an array method as a function
    /// (`len(list)`), the feedback writes the line as a method call.
    BareArrayMethods,
    /// After a failed tool call, the feedback names the required arguments
    /// it left out, or says its values appear nowhere in the conversation.
    FailedCallArguments,
    /// Error hints by kind: a name not defined, a method called on `()`, an
    /// index past the end (with the indexes that exist), a condition on a
    /// unit value.
    ErrorHints,
    /// A script that only defined functions is handed the line calling the
    /// one it never called (`final_result(f())`), fenced.
    UncalledFunctions,
    /// The same script showing the same value twice is told to finish from
    /// it, with the task quoted and, for a map of one number, the script
    /// that finishes with that number.
    RepeatedObservations,
    /// A tool call that returned nothing (`[]`, `null`) for its one optional
    /// argument, whose value appears nowhere in what the model read (a
    /// customer it made up), is said under the observation; a final result
    /// from such a script is held back once with the line without it. Costs
    /// a step when the empty answer was right for a value the task implied.
    MadeUpFilters,
    /// A final result that is a tool's number in another unit than the task
    /// asks for ("in euros" returned, "in US dollars" asked) is held back
    /// once, naming the tools that convert. Costs a step when the task's unit
    /// was the tool's after all.
    OtherUnits,
    /// A final result that is the ids a tool said it returns is held back
    /// once when the task asks for no id and another tool takes one. Costs a
    /// step when the ids were the answer under another word.
    IdsAsResults,
    /// A final result that is a whole record a tool returned is held back
    /// once when the task names exactly one of its keys and asks for no
    /// record. Costs a step when the whole record was wanted.
    WholeMaps,
    /// A Rhai final result resting on `A^B` between literals (exclusive or,
    /// meant as a power) is held back once. Costs a step where the exclusive
    /// or was meant.
    RhaiPowers,
}

impl Rule {
    /// Every built-in rule, in the order the loop consults them.
    pub const ALL: [Rule; 20] = [
        Rule::FakedTools,
        Rule::PythonStubs,
        Rule::RewriteRepeatedScripts,
        Rule::CatchToolErrors,
        Rule::MapsAsNumbers,
        Rule::FallbackInCatch,
        Rule::FilesThroughTools,
        Rule::MisreadData,
        Rule::AbsentPatterns,
        Rule::TwoWordNames,
        Rule::BareArrayMethods,
        Rule::FailedCallArguments,
        Rule::ErrorHints,
        Rule::UncalledFunctions,
        Rule::RepeatedObservations,
        Rule::MadeUpFilters,
        Rule::OtherUnits,
        Rule::IdsAsResults,
        Rule::WholeMaps,
        Rule::RhaiPowers,
    ];

    /// The rule's name in events and settings (`faked_tools`).
    pub fn name(self) -> &'static str {
        match self {
            Rule::FakedTools => "faked_tools",
            Rule::PythonStubs => "python_stubs",
            Rule::RewriteRepeatedScripts => "rewrite_repeated_scripts",
            Rule::CatchToolErrors => "catch_tool_errors",
            Rule::MapsAsNumbers => "maps_as_numbers",
            Rule::FallbackInCatch => "fallback_in_catch",
            Rule::FilesThroughTools => "files_through_tools",
            Rule::MisreadData => "misread_data",
            Rule::AbsentPatterns => "absent_patterns",
            Rule::TwoWordNames => "two_word_names",
            Rule::BareArrayMethods => "bare_array_methods",
            Rule::FailedCallArguments => "failed_call_arguments",
            Rule::ErrorHints => "error_hints",
            Rule::UncalledFunctions => "uncalled_functions",
            Rule::RepeatedObservations => "repeated_observations",
            Rule::MadeUpFilters => "made_up_filters",
            Rule::OtherUnits => "other_units",
            Rule::IdsAsResults => "ids_as_results",
            Rule::WholeMaps => "whole_maps",
            Rule::RhaiPowers => "rhai_powers",
        }
    }

    /// The rule named `name` ([`Rule::name`]).
    pub fn from_name(name: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|rule| rule.name() == name)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a coach's hook is shown: the conversation so far, the script of the
/// step, and the session's language.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// The conversation so far, task first.
    pub messages: &'a [Message],
    /// The script of the step (as the model sent it, for
    /// [`Coach::before_script`]).
    pub script: &'a str,
    /// The session's language, as its runtime names it (`Rhai`,
    /// `JavaScript`, `Python`).
    pub language: &'a str,
}

/// A coach's advice for the model: added to the step's feedback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advice {
    /// The rule, as events name it.
    pub rule: String,
    /// What the model is told, in the host's words (model or tool text only
    /// fenced, see [`fence`](crate::fence)).
    pub text: String,
}

/// A final result a coach holds back: refused like an output check's refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The rule, as events name it.
    pub rule: String,
    /// Why, in the host's words: the refusal's reason.
    pub reason: String,
    /// What the model is told (defaults to the reason when empty).
    pub text: String,
}

/// A script a coach runs in place of the one the model sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    /// The rule, as events name it.
    pub rule: String,
    /// The script to run.
    pub script: String,
    /// What the model is told about the rewrite, in the host's words.
    pub note: String,
}

/// Advice at the loop's four decision points; every hook defaults to none. A
/// coach keeps no state of its own between hooks: what it decided is in the
/// run's events, which a resumed run replays, so the two decide alike.
pub trait Coach: Send + Sync + fmt::Debug {
    /// The coach's name (`plain`, `small-model`), in settings and logs.
    fn name(&self) -> &str;

    /// The host's built-in rules this coach turns on. Default: none.
    fn rules(&self) -> BTreeSet<Rule> {
        BTreeSet::new()
    }

    /// A script about to run: a rewrite to run in its place, if any.
    fn before_script(&self, _seen: &Seen<'_>) -> Option<Rewrite> {
        None
    }

    /// The script failed with `error` (the message as the run records it):
    /// advice for the feedback, if any.
    fn on_error(&self, _seen: &Seen<'_>, _error: &str) -> Option<Advice> {
        None
    }

    /// The script showed `value`: advice for the feedback, if any.
    fn on_observation(&self, _seen: &Seen<'_>, _value: &Value) -> Option<Advice> {
        None
    }

    /// The script submitted `value` as its final result, before the app's
    /// output checks: a hold, if any. `held` names the rules that held a
    /// result back already in this run (a hold fires at most once a run is
    /// the built-in rules' convention).
    fn on_final_result(&self, _seen: &Seen<'_>, _value: &Value, _held: &[String]) -> Option<Hold> {
        None
    }
}

/// The default: no advice. See the [module](self).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlainCoach;

impl Coach for PlainCoach {
    fn name(&self) -> &str {
        "plain"
    }
}

/// The host's built-in rules for small models, every one on unless turned off
/// with [`without`](Self::without). See the [module](self) and [`Rule`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmallModelCoach {
    rules: BTreeSet<Rule>,
}

impl Default for SmallModelCoach {
    fn default() -> Self {
        Self {
            rules: Rule::ALL.into_iter().collect(),
        }
    }
}

impl SmallModelCoach {
    /// This coach with `rule` turned off.
    pub fn without(mut self, rule: Rule) -> Self {
        self.rules.remove(&rule);
        self
    }

    /// This coach with `rule` turned on.
    pub fn with(mut self, rule: Rule) -> Self {
        self.rules.insert(rule);
        self
    }
}

impl Coach for SmallModelCoach {
    fn name(&self) -> &str {
        "small-model"
    }

    fn rules(&self) -> BTreeSet<Rule> {
        self.rules.clone()
    }
}

/// The coach named `name`: `plain` or `small-model`, as the command line and
/// the team and server files name them.
pub fn by_name(name: &str) -> Result<std::sync::Arc<dyn Coach>, String> {
    match name {
        "plain" => Ok(std::sync::Arc::new(PlainCoach)),
        "small-model" => Ok(std::sync::Arc::new(SmallModelCoach::default())),
        other => Err(format!(
            "unknown coach `{other}`: expected `plain` or `small-model`"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_is_named_once_and_found_by_its_name() {
        let names: BTreeSet<&str> = Rule::ALL.iter().map(|rule| rule.name()).collect();
        assert_eq!(names.len(), Rule::ALL.len());
        for rule in Rule::ALL {
            assert_eq!(Rule::from_name(rule.name()), Some(rule));
        }
        assert_eq!(Rule::from_name("nothing"), None);
    }

    #[test]
    fn the_plain_coach_turns_on_no_rule_and_the_small_model_coach_all_but_those_turned_off() {
        assert!(PlainCoach.rules().is_empty());
        let coach = SmallModelCoach::default().without(Rule::WholeMaps);
        assert_eq!(coach.rules().len(), Rule::ALL.len() - 1);
        assert!(!coach.rules().contains(&Rule::WholeMaps));
        assert!(
            coach
                .with(Rule::WholeMaps)
                .rules()
                .contains(&Rule::WholeMaps)
        );
    }

    #[test]
    fn a_coach_is_chosen_by_name_and_an_unknown_name_is_an_error_listing_the_names() {
        assert_eq!(
            by_name("plain").map(|c| c.name().to_string()),
            Ok("plain".into())
        );
        assert_eq!(
            by_name("small-model").map(|c| c.name().to_string()),
            Ok("small-model".into())
        );
        let error = by_name("tiny").expect_err("an unknown coach");
        assert!(
            error.contains("plain") && error.contains("small-model"),
            "{error}"
        );
    }
}
