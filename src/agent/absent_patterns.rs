//! Text a script searches for, or splits on, that occurs nowhere in the text it
//! works on: `line.startsWith('ERROR:')` over a log whose lines read `… ERROR
//! E42 disk full`, `re.findall(r"ERROR (\d+)", log)` over the same log,
//! `text.split(",")` over words without a comma. Found by reading the script's
//! string literals and regular expressions and trying them on the step's tool
//! texts (and the script's own other strings); no script code runs.
//!
//! Why: on "Which error code occurs most often in server.log?" a small model
//! filtered lines on a prefix of its own in every runtime, and answered its
//! empty count's error or `null` four times over: the tool's text was shown
//! each time, yet it never compared the two.

use regex::RegexBuilder;
use serde_json::Value;

use super::feedback::ToolResultSeen;

/// Strings kept from a step's tool results to search, and their bytes in all:
/// past them the rest is not read (a pattern found nowhere in a part is then
/// not reported, since it may be in the rest).
const TEXTS_READ: usize = 10_000;
const TEXT_BYTES_READ: usize = 1 << 20;

/// The longest literal this module reports: a longer one is a message, not a
/// pattern.
const LITERAL_CHARS: usize = 40;

/// The longest word of a pattern the feedback names outside a fence (letters
/// and digits only): a longer one is not looked for in the data.
const NEAR_WORD_CHARS: usize = 24;

/// Methods whose first argument is text to look for, in JavaScript, Python and
/// Rhai, and those that split on it.
const SEARCHING: &[&str] = &[
    "startsWith",
    "endsWith",
    "includes",
    "indexOf",
    "starts_with",
    "ends_with",
    "contains",
    "index_of",
    "startswith",
    "endswith",
    "find",
    "count",
];
const SPLITTING: &[&str] = &["split", "rsplit", "partition"];

/// Python's `re` functions whose first argument is a pattern, and JavaScript's
/// string methods that take a regex literal.
const PYTHON_REGEX: &[&str] = &["findall", "search", "match", "finditer", "fullmatch"];
const JS_REGEX: &[&str] = &["match", "matchAll", "test", "exec"];

/// How a script used a pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternUse {
    /// Looked for it (`startsWith`, `in`, a regular expression).
    Search,
    /// Split on it.
    Split,
}

/// A pattern of the script found nowhere in the text it works on.
#[derive(Debug, Clone, PartialEq)]
pub struct AbsentPattern {
    /// The pattern as the script wrote it, between its quotes or slashes.
    pub written: String,
    pub usage: PatternUse,
    /// The script's line with the pattern (1-based).
    pub line: usize,
    /// The tool whose text the script searched, when it called one tool that
    /// returned text; `None` when the text is elsewhere (its own strings).
    pub tool: Option<String>,
    /// The pattern's longest run of letters and digits (`ERROR` of `ERROR:`),
    /// when a line of the text holds it, with that line: what the data holds
    /// instead.
    pub near: Option<(String, String)>,
    /// For a regular expression, where it stops matching the near line: its
    /// longest start that matches there, the rest of it, and what the line
    /// holds after that start's match ([`where_it_stops`]).
    pub stops: Option<Stop>,
}

/// Where a regular expression stops matching a line: `ERROR (\d+)` over
/// `… ERROR E42 disk full` matches up to `ERROR `, and then `(\d+)` meets
/// `E42 disk full`.
#[derive(Debug, Clone, PartialEq)]
pub struct Stop {
    pub matched: String,
    pub rest: String,
    pub then: String,
    /// The pattern mended where it stops, when one edit makes it match the
    /// line: the rest's first element (a group, a class, an escape, a
    /// character, with its quantifier) taken as the line's next word
    /// (`ERROR (\d+)` → `ERROR (\S+)`), or left out (`ERROR: (E\d+)` →
    /// `ERROR (E\d+)`). Model code: quoted only fenced.
    pub mended: Option<String>,
}

/// The longest characters of a line's text after the part that matched that
/// [`Stop::then`] keeps.
const THEN_CHARS: usize = 30;

/// A pattern written in a script, before it is tried.
#[derive(Debug, Clone, PartialEq)]
struct Written {
    text: String,
    regex: bool,
    usage: PatternUse,
    line: usize,
    /// Where the literal begins in the script (byte offset), so the script's
    /// other strings exclude it.
    at: usize,
}

/// The first pattern of `script` found nowhere in the texts it works on: the
/// strings of the step's tool `results`, and, unless `tools_only`, the
/// script's own other string literals. `None` when there is no such text, or
/// every pattern occurs in it.
pub fn absent_pattern(
    script: &str,
    results: &[ToolResultSeen],
    tools_only: bool,
) -> Option<AbsentPattern> {
    let patterns = patterns_of(script);
    if patterns.is_empty() {
        return None;
    }
    let mut texts: Vec<&str> = Vec::new();
    let mut bytes = 0;
    for result in results {
        strings_of(&result.value, &mut texts, &mut bytes);
    }
    let literals = if tools_only {
        Vec::new()
    } else {
        literals_of(script)
    };
    let folds_case = [
        "lower",
        "upper",
        "LowerCase",
        "UpperCase",
        "IGNORECASE",
        "re.I",
    ]
    .iter()
    .any(|word| script.contains(word));
    patterns.into_iter().find_map(|pattern| {
        let others: Vec<&str> = literals
            .iter()
            .filter(|(at, _)| *at != pattern.at)
            .map(|(_, text)| text.as_str())
            .collect();
        let subjects: Vec<&str> = texts.iter().copied().chain(others).collect();
        if !subjects
            .iter()
            .any(|text| text.chars().count() > pattern.text.chars().count())
        {
            return None;
        }
        if occurs(&pattern, &subjects, folds_case)? {
            return None;
        }
        let tool = one_text_tool(results);
        let near = near_line(&pattern.text, &subjects);
        let stops = near
            .as_ref()
            .filter(|_| pattern.regex)
            .and_then(|(_, line)| where_it_stops(&pattern.text, line, folds_case));
        Some(AbsentPattern {
            written: pattern.text,
            usage: pattern.usage,
            line: pattern.line,
            tool,
            near,
            stops,
        })
    })
}

/// Whether `pattern` occurs in one of `texts`; `None` when it cannot be told
/// (a regular expression this crate does not read).
fn occurs(pattern: &Written, texts: &[&str], folds_case: bool) -> Option<bool> {
    if pattern.regex {
        let regex = RegexBuilder::new(&pattern.text)
            .case_insensitive(folds_case)
            .size_limit(1 << 20)
            .build()
            .ok()?;
        return Some(texts.iter().any(|text| regex.is_match(text)));
    }
    if folds_case {
        let wanted = pattern.text.to_lowercase();
        return Some(
            texts
                .iter()
                .any(|text| text.to_lowercase().contains(&wanted)),
        );
    }
    Some(
        texts
            .iter()
            .any(|text| text.contains(pattern.text.as_str())),
    )
}

/// Where `pattern`, a regular expression that matches nowhere in `line`, stops
/// matching it: its longest start (cut at a character) that is a regular
/// expression of its own, holds a letter or a digit, and matches in `line`.
/// None when no start does, or the pattern reads as no regular expression this
/// crate knows.
///
/// Why: told that `ERROR (\d+)` occurs nowhere in a log of `ERROR E42` lines,
/// shown such a line, a small model sent the same pattern back in every
/// runtime: it never saw that the codes start with a letter.
pub fn where_it_stops(pattern: &str, line: &str, folds_case: bool) -> Option<Stop> {
    let build = |text: &str| {
        RegexBuilder::new(text)
            .case_insensitive(folds_case)
            .size_limit(1 << 20)
            .build()
            .ok()
    };
    if build(pattern)?.is_match(line) {
        return None;
    }
    let mut cuts: Vec<usize> = pattern.char_indices().map(|(at, _)| at).skip(1).collect();
    cuts.reverse();
    cuts.into_iter().find_map(|cut| {
        let (start, rest) = pattern.split_at(cut);
        if !start.chars().any(char::is_alphanumeric) {
            return None;
        }
        let found = build(start)?.find(line)?;
        let then: String = line[found.end()..].chars().take(THEN_CHARS).collect();
        // A group with a name or flags (`(?P<code>…)`) is the script's to
        // keep: left alone.
        let mended = first_element(rest).filter(|(element, _)| !element.starts_with("(?"));
        let mended = mended.and_then(|(element, after)| {
            let as_word = if element.starts_with('(') {
                r"(\S+)"
            } else {
                r"\S+"
            };
            [
                format!("{start}{as_word}{after}"),
                format!("{start}{after}"),
            ]
            .into_iter()
            .find(|mended| build(mended).is_some_and(|regex| regex.is_match(line)))
        });
        Some(Stop {
            matched: start.to_string(),
            rest: rest.to_string(),
            then,
            mended,
        })
    })
}

/// The first element of a regular expression's `rest` and what follows it:
/// a group (to its closing parenthesis), a class (`[…]`), an escape (`\d`),
/// or one plain character, each with its quantifier (`+`, `*`, `?`, `{2,3}`,
/// and a lazy `?` after one). None for an anchor, an alternation, a closing
/// parenthesis, or an escape of more than one character (`\x41`, `\p{L}`).
fn first_element(rest: &str) -> Option<(&str, &str)> {
    let mut chars = rest.char_indices().peekable();
    let (_, first) = chars.next()?;
    let mut end = match first {
        '(' => {
            let mut depth = 0usize;
            let mut escaped = false;
            let mut in_class = false;
            let mut close = None;
            for (at, c) in rest.char_indices() {
                match c {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '[' => in_class = true,
                    ']' => in_class = false,
                    '(' if !in_class => depth += 1,
                    ')' if !in_class => {
                        depth -= 1;
                        if depth == 0 {
                            close = Some(at + 1);
                            break;
                        }
                    }
                    _ => {}
                }
            }
            close?
        }
        '[' => {
            let mut escaped = false;
            let close = rest.char_indices().skip(1).find(|&(at, c)| {
                let closes = c == ']' && !escaped && at > 1;
                escaped = c == '\\' && !escaped;
                closes
            })?;
            close.0 + 1
        }
        '\\' => {
            let (at, escaped) = chars.next()?;
            if "xupPkN".contains(escaped) {
                return None;
            }
            at + escaped.len_utf8()
        }
        '^' | '$' | '|' | ')' | '+' | '*' | '?' | '{' => return None,
        other => other.len_utf8(),
    };
    let after = &rest[end..];
    if let Some(quantifier) = after.chars().next().filter(|c| "+*?".contains(*c)) {
        end += quantifier.len_utf8();
    } else if after.starts_with('{') {
        end += after.find('}')? + 1;
    }
    if rest[end..].starts_with(['?', '+']) {
        end += 1;
    }
    Some((&rest[..end], &rest[end..]))
}

/// The name of the one tool that returned text, if one did.
fn one_text_tool(results: &[ToolResultSeen]) -> Option<String> {
    let mut tools = results
        .iter()
        .filter(|result| result.value.is_string())
        .map(|result| result.tool.as_str());
    let first = tools.next()?;
    tools.all(|tool| tool == first).then(|| first.to_string())
}

/// The pattern's longest run of letters and digits and the first line of
/// `texts` that holds it (as a word's start), when there is one.
fn near_line(pattern: &str, texts: &[&str]) -> Option<(String, String)> {
    let core = pattern
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| word.chars().any(char::is_alphabetic))
        .max_by_key(|word| word.len())?;
    if !(2..=NEAR_WORD_CHARS).contains(&core.chars().count()) {
        return None;
    }
    texts.iter().find_map(|text| {
        text.lines()
            .find(|line| line.contains(core))
            .map(|line| (core.to_string(), line.trim().to_string()))
    })
}

/// The strings of `value` and its maps' keys, up to [`TEXTS_READ`] and [`TEXT_BYTES_READ`].
fn strings_of<'a>(value: &'a Value, texts: &mut Vec<&'a str>, bytes: &mut usize) {
    if texts.len() >= TEXTS_READ || *bytes >= TEXT_BYTES_READ {
        return;
    }
    match value {
        Value::String(text) => {
            *bytes += text.len();
            texts.push(text);
        }
        Value::Array(items) => items.iter().for_each(|item| strings_of(item, texts, bytes)),
        // Keys count as text: `"total" in order` asks a map for its key.
        Value::Object(entries) => entries.iter().for_each(|(key, item)| {
            texts.push(key);
            strings_of(item, texts, bytes);
        }),
        _ => {}
    }
}

/// The patterns a script searches for or splits on, in the order written.
fn patterns_of(script: &str) -> Vec<Written> {
    let mut found = Vec::new();
    for (at, _) in script.match_indices('(') {
        let before = &script[..at];
        let name_start = before
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let name = &before[name_start..];
        let after_dot = before[..name_start].ends_with('.');
        let receiver = before[..name_start].trim_end_matches('.');
        let rest = &script[at + 1..];
        let usage = if after_dot && SEARCHING.contains(&name) {
            Some((PatternUse::Search, false))
        } else if after_dot && SPLITTING.contains(&name) {
            Some((PatternUse::Split, false))
        } else if after_dot && receiver.ends_with("re") && PYTHON_REGEX.contains(&name) {
            Some((PatternUse::Search, true))
        } else {
            None
        };
        if let Some((usage, regex)) = usage {
            if let Some((offset, text)) = string_argument(rest) {
                found.push(written(script, at + 1 + offset, text, regex, usage));
            } else if !regex && let Some((offset, text)) = regex_literal(rest) {
                found.push(written(script, at + 1 + offset, text, true, usage));
            }
        } else if after_dot
            && JS_REGEX.contains(&name)
            && let Some((offset, text)) = regex_literal(rest)
        {
            found.push(written(
                script,
                at + 1 + offset,
                text,
                true,
                PatternUse::Search,
            ));
        }
    }
    found.extend(in_tests(script));
    found.sort_by_key(|pattern| pattern.at);
    found.retain(|pattern| {
        !pattern.text.is_empty()
            && pattern.text.chars().count() <= LITERAL_CHARS
            && !pattern.text.chars().all(char::is_whitespace)
    });
    found
}

fn written(script: &str, at: usize, text: String, regex: bool, usage: PatternUse) -> Written {
    let line = script[..at].matches('\n').count() + 1;
    Written {
        text,
        regex,
        usage,
        line,
        at,
    }
}

/// `"X" in name` (Python, Rhai): the literals tested for membership.
fn in_tests(script: &str) -> Vec<Written> {
    literal_spans(script)
        .into_iter()
        .filter(|(_, end, _)| {
            let after = &script[*end..];
            after.starts_with(" in ") && !after[4..].trim_start().starts_with('[')
        })
        .map(|(at, _, text)| written(script, at, text, false, PatternUse::Search))
        .collect()
}

/// Every string literal of `script`: where it begins, where it ends (after its
/// closing quote) and its text.
fn literal_spans(script: &str) -> Vec<(usize, usize, String)> {
    let mut spans = Vec::new();
    let mut at = 0;
    while let Some(offset) = script[at..].find(['"', '\'']) {
        let start = at + offset;
        match quoted(&script[start..], raw_prefix(script, start)) {
            Some((len, text)) => {
                spans.push((start, start + len, text));
                at = start + len;
            }
            None => at = start + 1,
        }
    }
    spans
}

/// The script's string literals with where each begins.
fn literals_of(script: &str) -> Vec<(usize, String)> {
    literal_spans(script)
        .into_iter()
        .map(|(at, _, text)| (at, text))
        .collect()
}

/// Whether the literal at `start` has a Python raw prefix (`r"…"`).
fn raw_prefix(script: &str, start: usize) -> bool {
    let before = &script[..start];
    before.ends_with('r') || before.ends_with('R')
}

/// A string literal that is the whole first argument of a call whose
/// arguments begin at `rest`: its offset in `rest` and its text (escapes
/// read, unless it is raw, `r"…"`).
fn string_argument(rest: &str) -> Option<(usize, String)> {
    let trimmed = rest.trim_start();
    let mut offset = rest.len() - trimmed.len();
    let mut body = trimmed;
    let mut raw = false;
    if let Some(stripped) = body.strip_prefix(['r', 'R']) {
        raw = true;
        body = stripped;
        offset += 1;
    }
    let (len, text) = quoted(body, raw)?;
    let after = body[len..].trim_start();
    (after.starts_with(',') || after.starts_with(')')).then_some((offset, text))
}

/// A quoted literal at the start of `text` (`"…"` or `'…'`): its length with
/// the quotes, and its text with escapes read unless `raw`.
fn quoted(text: &str, raw: bool) -> Option<(usize, String)> {
    let quote = text.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let mut value = String::new();
    let mut chars = text.char_indices().skip(1);
    while let Some((i, c)) = chars.next() {
        match c {
            '\n' => return None,
            '\\' => {
                let (_, next) = chars.next()?;
                if raw {
                    value.push('\\');
                    value.push(next);
                } else {
                    match next {
                        'n' => value.push('\n'),
                        't' => value.push('\t'),
                        'r' => value.push('\r'),
                        '\\' | '"' | '\'' => value.push(next),
                        // Python keeps an escape it does not know (`"\d"`), as
                        // a regular expression needs it.
                        other => {
                            value.push('\\');
                            value.push(other);
                        }
                    }
                }
            }
            c if c == quote => return Some((i + 1, value)),
            c => value.push(c),
        }
    }
    None
}

/// A JavaScript regex literal (`/…/flags`) at the start of `rest`: its offset
/// and its pattern. One with flags other than `g` is left alone (its meaning
/// changes with them).
fn regex_literal(rest: &str) -> Option<(usize, String)> {
    let trimmed = rest.trim_start();
    let offset = rest.len() - trimmed.len();
    let body = trimmed.strip_prefix('/')?;
    let mut escaped = false;
    let mut in_class = false;
    for (i, c) in body.char_indices() {
        match c {
            '\n' => return None,
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '[' => in_class = true,
            ']' => in_class = false,
            '/' if !in_class => {
                let flags: String = body[i + 1..]
                    .chars()
                    .take_while(char::is_ascii_alphabetic)
                    .collect();
                return flags
                    .chars()
                    .all(|flag| flag == 'g')
                    .then(|| (offset, body[..i].to_string()));
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const LOG: &str = "2026-11-30 10:00:01 INFO start\n2026-11-30 10:00:05 ERROR E42 disk full\n2026-11-30 10:02:00 ERROR E17 timeout\n";

    fn read(text: &str) -> Vec<ToolResultSeen> {
        vec![ToolResultSeen {
            tool: "read_file".into(),
            args: json!({"name": "server.log"}),
            value: json!(text),
        }]
    }

    #[test]
    fn a_prefix_the_log_never_holds_is_found_with_the_line_that_holds_its_word() {
        let script = "const data = tools.read_file({name: 'server.log'});\nconst codes = data.split('\\n').filter(line => line.startsWith('ERROR:'));";
        let found = absent_pattern(script, &read(LOG), true).expect("found");
        assert_eq!(found.written, "ERROR:");
        assert_eq!(found.usage, PatternUse::Search);
        assert_eq!(found.line, 2);
        assert_eq!(found.tool.as_deref(), Some("read_file"));
        assert_eq!(
            found.near,
            Some((
                "ERROR".to_string(),
                "2026-11-30 10:00:05 ERROR E42 disk full".to_string()
            ))
        );
    }

    #[test]
    fn a_python_regex_that_matches_nothing_is_found_and_one_that_matches_is_not() {
        let absent =
            "import re\ncodes = re.findall(r\"ERROR (\\d+)\", read_file(name=\"server.log\"))";
        let found = absent_pattern(absent, &read(LOG), true).expect("found");
        assert_eq!(found.written, "ERROR (\\d+)");
        assert_eq!(found.line, 2);
        assert_eq!(
            found.stops,
            Some(Stop {
                matched: "ERROR ".into(),
                rest: "(\\d+)".into(),
                then: "E42 disk full".into(),
                mended: Some("ERROR (\\S+)".into()),
            })
        );
        let present =
            "import re\ncodes = re.findall(r\"ERROR (E\\d+)\", read_file(name=\"server.log\"))";
        assert_eq!(absent_pattern(present, &read(LOG), true), None);
    }

    #[test]
    fn a_regex_stops_where_its_longest_matching_start_ends() {
        let line = "2026-11-30 10:00:05 ERROR E42 disk full";
        let stop = where_it_stops(r"ERROR: (E\d+)", line, false).expect("stops");
        assert_eq!(
            (stop.matched.as_str(), stop.rest.as_str()),
            ("ERROR", r": (E\d+)")
        );
        assert_eq!(stop.then, " E42 disk full");
        // What follows the match is cut, at a character, not a byte.
        let long = format!("ERROR {}", "é".repeat(100));
        let stop = where_it_stops(r"ERROR \d", &long, false).expect("stops");
        assert_eq!(stop.then.chars().count(), THEN_CHARS);
        // A pattern that matches, one whose every start lacks a letter or
        // fails to match, and one that is no regular expression: nothing.
        assert_eq!(where_it_stops(r"E\d+", line, false), None);
        assert_eq!(where_it_stops(r"^WARN", line, false), None);
        assert_eq!(where_it_stops(r"ERROR (?<", line, false), None);
        // Case folded as the script folds it.
        let folded = where_it_stops(r"error (\d+)", line, true).expect("stops");
        assert_eq!(folded.matched, "error ");
    }

    #[test]
    fn a_stopped_regex_is_mended_by_one_edit_only_when_the_edit_matches_the_line() {
        let line = "2026-11-30 10:00:05 ERROR E42 disk full";
        let mended = |pattern: &str| where_it_stops(pattern, line, false).and_then(|s| s.mended);
        // The group meets a word it does not take: it takes the word.
        assert_eq!(mended(r"ERROR (\d+)").as_deref(), Some(r"ERROR (\S+)"));
        assert_eq!(
            mended(r"ERROR (?P<code>\d+)"),
            None,
            "a named group is no plain group"
        );
        assert_eq!(
            mended(r"ERROR [0-9]{2,3} disk").as_deref(),
            Some(r"ERROR \S+ disk")
        );
        // A character the line does not hold there: left out.
        assert_eq!(mended(r"ERROR: (E\d+)").as_deref(), Some(r"ERROR (E\d+)"));
        // Nothing one edit can mend: none.
        assert_eq!(mended(r"ERROR (\d+) (\d+) (\d+) (\d+) x"), None);
        assert_eq!(mended(r"ERROR \x41"), None);
        assert_eq!(mended(r"ERROR$"), None);
    }

    #[test]
    fn a_regexs_first_element_keeps_its_group_class_escape_and_quantifier() {
        assert_eq!(first_element(r"(\d+) x"), Some((r"(\d+)", " x")));
        assert_eq!(first_element(r"(a(b)c)+?d"), Some((r"(a(b)c)+?", "d")));
        assert_eq!(first_element(r"(\)|[)])e"), Some((r"(\)|[)])", "e")));
        assert_eq!(first_element(r"[]a]*b"), Some((r"[]a]*", "b")));
        assert_eq!(first_element(r"[\]]c"), Some((r"[\]]", "c")));
        assert_eq!(first_element(r"\d{2,3}x"), Some((r"\d{2,3}", "x")));
        assert_eq!(first_element("é+z"), Some(("é+", "z")));
        for unreadable in ["", "(unclosed", "[unclosed", r"\", "{2}", "^a", "|a", ")"] {
            assert_eq!(first_element(unreadable), None, "{unreadable}");
        }
    }

    #[test]
    fn a_python_regex_in_a_plain_string_keeps_its_escapes() {
        let script = "import re\ncodes = re.findall(\"ERROR (E\\d+)\", log)";
        assert_eq!(absent_pattern(script, &read(LOG), true), None);
    }

    #[test]
    fn a_javascript_regex_literal_is_tried_and_one_with_flags_is_left_alone() {
        let absent = "const m = log.match(/ERROR: (\\w+)/g);";
        assert_eq!(
            absent_pattern(absent, &read(LOG), true).map(|found| found.written),
            Some("ERROR: (\\w+)".to_string())
        );
        let flagged = "const m = log.match(/ERROR: (\\w+)/i);";
        assert_eq!(absent_pattern(flagged, &read(LOG), true), None);
    }

    #[test]
    fn splitting_words_on_a_comma_they_lack_is_found_from_the_scripts_own_text() {
        let script =
            "let text = \"the cat and the dog and the bird\"\nlet words = text.split(\",\")";
        let found = absent_pattern(script, &[], false).expect("found");
        assert_eq!(found.written, ",");
        assert_eq!(found.usage, PatternUse::Split);
        assert_eq!(found.tool, None);
        assert_eq!(found.near, None);
        assert_eq!(absent_pattern(script, &[], true), None, "tools only");
    }

    #[test]
    fn patterns_the_text_holds_are_not_reported_even_after_a_case_change() {
        let script =
            "lines = [l for l in log.splitlines() if 'ERROR' in l]\nfirst = log.split('\\n')";
        assert_eq!(absent_pattern(script, &read(LOG), true), None);
        let lowered = "lines = [l for l in log.splitlines() if 'error' in l.lower()]";
        assert_eq!(absent_pattern(lowered, &read(LOG), true), None);
    }

    #[test]
    fn asking_a_tools_map_for_a_key_it_has_is_no_absent_pattern() {
        let results = vec![ToolResultSeen {
            tool: "get_order".into(),
            args: json!({"id": 1}),
            value: json!({"total": 12.5, "customer": "Mia Rossi of Milan"}),
        }];
        let script = "order = get_order(id=1)\nfinal_result(order[\"total\"] if \"total\" in order else None)";
        assert_eq!(absent_pattern(script, &results, true), None);
    }

    #[test]
    fn without_any_text_to_search_nothing_is_reported() {
        let script = "let parts = name.split(\",\")";
        assert_eq!(absent_pattern(script, &[], false), None);
        assert_eq!(absent_pattern(script, &read(""), true), None);
    }

    #[test]
    fn a_membership_test_against_a_list_literal_is_no_search_of_text() {
        let script = "ok = 'E99' in ['E42', 'E17']";
        assert_eq!(absent_pattern(script, &read(LOG), true), None);
    }

    #[test]
    fn long_literals_and_regexes_this_crate_cannot_read_are_left_alone() {
        let long = format!("x = log.find('{}')", "word ".repeat(20));
        assert_eq!(absent_pattern(&long, &read(LOG), true), None);
        let lookahead = "import re\nm = re.search(r\"ERROR(?= X)\", log)";
        assert_eq!(absent_pattern(lookahead, &read(LOG), true), None);
    }
}
