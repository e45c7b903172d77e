//! What the feedback of a failed script adds when the host can tell what went
//! wrong from the run's own data: each `account_for_…` puts its section before
//! the closing request to fix the script.

use minijinja::context;
use serde_json::Value;

use codeact_runtime::{ErrorFacts, ErrorKind};

use super::{Conversation, ProposedMend};
use crate::agent::coach::Rule;
use crate::agent::{
    absent_patterns, data_paths, feedback, file_stubs, js_fallback, map_as_number, script_notes,
    two_word_names,
};

/// The script's line with `found`'s regular expression mended where it stops
/// ([`absent_patterns::Stop::mended`]), when the line holds the pattern as
/// written (a raw string or a regex literal; a plain string's escapes differ).
/// A small model, shown where `ERROR (\d+)` stopped on `ERROR E42`, sent the
/// pattern back unchanged; it copies a line.
pub(super) fn mended_line(found: &absent_patterns::AbsentPattern, script: &str) -> Option<String> {
    let mended = found.stops.as_ref()?.mended.as_deref()?;
    let line = script.lines().nth(found.line.checked_sub(1)?)?;
    line.contains(&found.written)
        .then(|| line.trim().replacen(&found.written, mended, 1))
}

/// A failed script's error as the accounts read it: the message as the model
/// reads it, and, for an engine's error, the facts its runtime gave.
pub(super) struct Failure<'a> {
    pub message: &'a str,
    pub facts: Option<&'a ErrorFacts>,
}

impl Failure<'_> {
    /// The engine's name for the error's kind (`FileNotFoundError`), empty when
    /// it gave none.
    fn engine_kind(&self) -> &str {
        match self.facts.map(|facts| &facts.kind) {
            Some(ErrorKind::Other { engine_kind }) => engine_kind,
            _ => "",
        }
    }
}

impl Conversation {
    /// For a JavaScript script that reported a tool's failure with `error(...)`
    /// from its `catch` block while its test of the tool's value had the
    /// fallback (`if (weather) { … } else { … }`), the script written with that
    /// fallback in the `catch` block (template `feedback/fallback_in_catch`,
    /// [`js_fallback`]).
    pub(super) fn fallback_in_catch(&mut self, script: &str, message: &str) -> Option<String> {
        if !self.rule_on(Rule::FallbackInCatch) {
            return None;
        }
        if self.language() != data_paths::Language::JavaScript {
            return None;
        }
        let tool = message
            .trim_start()
            .strip_prefix("tool '")?
            .split_once("' failed")?
            .0;
        self.tools().find(|(name, _)| *name == tool)?;
        let rewritten = js_fallback::fallback_into_catch(script, tool)?;
        self.coaching.proposed_mend = Some(ProposedMend {
            failed: script.to_string(),
            mended: rewritten.clone(),
            lines: None,
            carried: false,
        });
        Some(self.prompts.render(
            "feedback/fallback_in_catch",
            context! {
                tool => tool,
                script => feedback::fenced(&rewritten, self.config.feedback_limit),
            },
        ))
    }

    /// Puts before "Fix the script" (after the error, its line and the tool
    /// results) what was wrong with the arguments of the calls the tools failed:
    /// required ones left out, or else values made up (found nowhere in the
    /// conversation's own messages or the script's tool results).
    pub(super) fn account_for_failed_calls(
        &self,
        text: &mut String,
        error: &Failure<'_>,
        script: Option<&str>,
        failed: &[feedback::FailedCall],
        results: &[feedback::ToolResultSeen],
    ) {
        if !self.rule_on(Rule::FailedCallArguments) {
            return;
        }
        if failed.is_empty() {
            return;
        }
        let missing: Vec<&feedback::FailedCall> = failed
            .iter()
            .filter(|call| !call.missing.is_empty())
            .collect();
        if !missing.is_empty() {
            let line = script.and_then(|script| script_notes::failing_line(error.facts, script));
            let section = feedback::missing_arguments(
                &self.prompts,
                &missing,
                line.as_ref().map(|(n, l)| (*n, l.as_str())),
                self.language(),
            );
            self.insert_before_fix_it(text, &section);
            return;
        }
        let seen: Vec<String> = self
            .texts_the_model_read()
            .chain(results.iter().map(|result| match &result.value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            }))
            .collect();
        let made_up: Vec<&str> = failed
            .iter()
            .filter(|call| script_notes::has_unseen_value(&call.args, &seen))
            .map(|call| call.tool.as_str())
            .collect();
        if !made_up.is_empty() {
            let section =
                feedback::made_up_arguments(&self.prompts, &made_up, &self.tool_signatures);
            self.insert_before_fix_it(text, &section);
        }
    }

    /// Adds, for just before "Fix the script", the lines of a script that
    /// failed to parse which give a variable two names, rewritten (see
    /// [`two_word_names`]), when the error is at one of them or at no known
    /// line.
    pub(super) fn account_for_two_word_names(&mut self, script: &str, failing: Option<usize>) {
        if !self.rule_on(Rule::TwoWordNames) {
            return;
        }
        let rhai = self.language() == data_paths::Language::Rhai;
        let Some((line_numbers, rewritten)) = two_word_names::rewritten(script, rhai) else {
            return;
        };
        if failing.is_some_and(|number| !line_numbers.contains(&number)) {
            return;
        }
        let Some(first) = script.lines().nth(line_numbers[0] - 1) else {
            return;
        };
        let names = two_word_names::names(first);
        let fields = rewritten.lines().nth(1).is_some_and(|line| {
            names
                .as_ref()
                .is_some_and(|(a, b)| line.starts_with(&format!("{a}.{b} =")))
        });
        let Some((a, b)) = names else { return };
        let section = self.prompts.render(
            "feedback/two_names",
            context! {
                line_numbers => line_numbers,
                names => format!("{a} {b}"),
                fields => fields,
                rewritten => feedback::fenced(&rewritten, self.config.feedback_limit),
            },
        );
        self.coaching.closing_sections.push(section);
    }

    /// Puts before "Fix the script" a text the failed script looked for or
    /// split on that occurs nowhere in what its tools returned
    /// ([`absent_patterns`]).
    pub(super) fn account_for_absent_pattern(
        &self,
        text: &mut String,
        script: Option<&str>,
        results: &[feedback::ToolResultSeen],
    ) {
        if !self.rule_on(Rule::AbsentPatterns) {
            return;
        }
        let Some(script) = script.filter(|_| !results.is_empty()) else {
            return;
        };
        if let Some(found) = absent_patterns::absent_pattern(script, results, true) {
            let section = self.absent_pattern_account(&found, script, None);
            self.insert_before_fix_it(text, &section);
        }
    }

    /// The `feedback/absent_pattern` text for `found`; `held` is the held
    /// final result's value as it may be shown (see `holds`), or `None` after
    /// an error.
    pub(super) fn absent_pattern_account(
        &self,
        found: &absent_patterns::AbsentPattern,
        script: &str,
        held: Option<Option<String>>,
    ) -> String {
        let fenced = |text: &str| feedback::fenced(text, self.config.feedback_limit);
        self.prompts.render(
            "feedback/absent_pattern",
            context! {
                held => held.is_some(),
                value => held.flatten(),
                split => found.usage == absent_patterns::PatternUse::Split,
                line_number => found.line,
                written => fenced(&found.written),
                tool => &found.tool,
                near_word => found.near.as_ref().map(|(word, _)| word.as_str()),
                near_line => found.near.as_ref().map(|(_, line)| fenced(line)),
                matched => found.stops.as_ref().map(|stop| fenced(&stop.matched)),
                rest => found.stops.as_ref().map(|stop| fenced(&stop.rest)),
                then => found.stops.as_ref().map(|stop| fenced(&stop.then)),
                mended_line => mended_line(found, script).map(|line| fenced(&line)),
            },
        )
    }

    /// Puts before "Fix the script", for a Python script that failed on a
    /// tool's `ToolError` at a line assigning the tool's result, which the
    /// script then tests for `None`, that line written to catch the error
    /// ([`script_notes::catching_tool_error`]); whether it did.
    pub(super) fn account_for_uncaught_tool_error(
        &mut self,
        text: &mut String,
        error: &Failure<'_>,
        script: Option<&str>,
    ) -> bool {
        if !self.rule_on(Rule::CatchToolErrors) {
            return false;
        }
        if self.language() != data_paths::Language::Python
            || !matches!(
                error.facts.map(|facts| &facts.kind),
                Some(ErrorKind::ToolError)
            )
        {
            return false;
        }
        let Some(script) = script else {
            return false;
        };
        // The line as written, indent and all: the catch goes where it was.
        let Some(number) =
            script_notes::failing_line(error.facts, script).map(|(number, _)| number)
        else {
            return false;
        };
        let Some(line) = script.lines().nth(number - 1) else {
            return false;
        };
        let tools: Vec<&str> = self.tools().map(|(name, _)| name).collect();
        let Some((last, caught)) = script_notes::catching_tool_error_at(number, script, &tools)
        else {
            return false;
        };
        let tool = line
            .split_once('=')
            .and_then(|(_, value)| value.split('(').next())
            .map(str::trim)
            .unwrap_or_default();
        self.coaching.proposed_mend = Some(ProposedMend::lines(script, number, last, &caught));
        let section = self.prompts.render(
            "feedback/catch_tool_error",
            context! {
                tool => tool,
                line_number => number,
                last => last,
                caught => feedback::fenced(&caught, self.config.feedback_limit),
            },
        );
        self.insert_before_fix_it(text, &section);
        true
    }

    /// Puts before "Fix the script", for a Python script whose `open` found
    /// no file while a tool reads files (its description names a file and
    /// text, and it takes one argument), that the tool reads them, with the
    /// failing `with open(…)` block written over it when it is one
    /// assignment ([`file_stubs::open_in_place_of`]); whether it did.
    pub(super) fn account_for_missing_file(
        &self,
        text: &mut String,
        error: &Failure<'_>,
        script: Option<&str>,
    ) -> bool {
        if !self.rule_on(Rule::FilesThroughTools) {
            return false;
        }
        if self.language() != data_paths::Language::Python
            || error.engine_kind() != "FileNotFoundError"
        {
            return false;
        }
        let reads_files = |name: &str| {
            self.tool_descriptions.iter().any(|(tool, description)| {
                let description = description.to_lowercase();
                tool == name
                    && description.contains("file")
                    && ["text", "string", "content"]
                        .iter()
                        .any(|word| description.contains(word))
            })
        };
        let mut readers = self
            .tools()
            .filter(|(name, signature)| reads_files(name) && signature.matches('=').count() == 1);
        let (Some((tool, signature)), None) = (readers.next(), readers.next()) else {
            return false;
        };
        let rewritten = script.and_then(|script| {
            let (number, _) = script_notes::failing_line(error.facts, script)?;
            file_stubs::open_in_place_of(script, number, tool, signature)
        });
        let section = self.prompts.render(
            "feedback/open_file",
            context! {
                tool => tool,
                signature => signature,
                first => rewritten.as_ref().map(|(first, _, _)| *first),
                last => rewritten.as_ref().map(|(_, last, _)| *last),
                rewritten => rewritten
                    .as_ref()
                    .map(|(_, _, line)| feedback::fenced(line, self.config.feedback_limit)),
            },
        );
        self.insert_before_fix_it(text, &section);
        true
    }

    /// Puts before "Fix the script" the failing line rewritten with the one
    /// number of a tool's maps taken out of each call, when the script did
    /// arithmetic on the maps ([`map_as_number`]); whether it did.
    pub(super) fn account_for_map_as_number(
        &mut self,
        text: &mut String,
        error: &Failure<'_>,
        script: Option<&str>,
        results: &[feedback::ToolResultSeen],
    ) -> bool {
        let message = error.message;
        if !self.rule_on(Rule::MapsAsNumbers) {
            return false;
        }
        let Some((number, line)) =
            script.and_then(|script| script_notes::failing_line(error.facts, script))
        else {
            return false;
        };
        let Some(found) = map_as_number::map_as_number(message, &line, results, self.language())
        else {
            return false;
        };
        if let Some(script) = script {
            self.coaching.proposed_mend = Some(ProposedMend::lines(
                script,
                number,
                number,
                &found.rewritten,
            ));
        }
        let section = self.prompts.render(
            "feedback/map_as_number",
            context! {
                tool => &found.tool,
                key => &found.key,
                line_number => number,
                line => feedback::fenced(&found.rewritten, self.config.feedback_limit),
            },
        );
        self.insert_before_fix_it(text, &section);
        true
    }

    /// Puts before "Fix the script" how the failed script misread what its
    /// tools returned, when the host can tell ([`data_paths::misreading`]: a
    /// path that leads nowhere in a tool's result, a loop over a tool's text
    /// character by character, its header converted as data); whether it did.
    pub(super) fn account_for_misread_data(
        &self,
        text: &mut String,
        error: &Failure<'_>,
        script: Option<&str>,
        results: &[feedback::ToolResultSeen],
    ) -> bool {
        let message = error.message;
        if !self.rule_on(Rule::MisreadData) {
            return false;
        }
        let Some(script) = script.filter(|_| !results.is_empty()) else {
            return false;
        };
        // A tool the script defines (a Python stub kept as its reading, `def
        // read_file(name="sales.csv", _host_tool=read_file): return
        // list(csv.reader(…))`) gives the script what that definition made of
        // the tool's value, not the value: told that its rows were "the text
        // `read_file` returned", a small model was misled. Only what holds of
        // the text whatever was made of it (its header taken as data) is said
        // of those.
        let all_results = results;
        let results: Vec<feedback::ToolResultSeen> = results
            .iter()
            .filter(|result| {
                script_notes::redefined_names(script, std::slice::from_ref(&result.tool)).is_empty()
            })
            .cloned()
            .collect();
        let language = self.language();
        let line = script_notes::failing_line(error.facts, script).map(|(number, _)| number);
        let found = data_paths::misreading(script, message, line, &results, language)
            .or_else(|| data_paths::header_misreading(script, message, all_results, language));
        if let Some(found) = found {
            let id_tools: Vec<&str> = match &found {
                data_paths::Misreading::BrokenPath {
                    kind: data_paths::Kind::Number(_),
                    ..
                } => self
                    .tool_signatures
                    .iter()
                    .map(String::as_str)
                    .filter(|signature| script_notes::takes_an_id(signature))
                    .collect(),
                _ => Vec::new(),
            };
            let section = feedback::misread_data(
                &self.prompts,
                &found,
                language,
                &id_tools,
                self.config.feedback_limit,
            );
            self.insert_before_fix_it(text, &section);
            return true;
        }
        false
    }

    /// Inserts `section` before the "Fix the script" line of `text`, with a
    /// blank line on both sides, or at its end when it has none.
    pub(super) fn insert_before_fix_it(&self, text: &mut String, section: &str) {
        let fix_it = self.prompts.render("feedback/fix_it", context! {});
        match text.rfind(&fix_it) {
            Some(at) if !fix_it.is_empty() => {
                let before = &text[..at];
                let gap = if before.is_empty() || before.ends_with("\n\n") {
                    ""
                } else if before.ends_with('\n') {
                    "\n"
                } else {
                    "\n\n"
                };
                text.insert_str(at, &format!("{gap}{section}\n\n"));
            }
            _ => {
                text.push_str("\n\n");
                text.push_str(section);
            }
        }
    }

    /// Puts what the failing script's tool calls returned into its feedback,
    /// before the closing request to fix the script (at the end when the
    /// feedback has none).
    pub(super) fn show_tool_results(
        &self,
        text: &mut String,
        results: &[feedback::ToolResultSeen],
    ) {
        let limit = self.config.tool_results_on_error;
        if results.is_empty() || limit == 0 {
            return;
        }
        let parse_call = match self.language() {
            data_paths::Language::Python => "json.loads(text)",
            data_paths::Language::Rhai => "parse_json(text)",
            data_paths::Language::JavaScript => "JSON.parse(text)",
        };
        let section = feedback::tool_results(&self.prompts, results, parse_call, limit);
        self.insert_before_fix_it(text, &section);
    }
}
