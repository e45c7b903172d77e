//! Rhai's errors sorted into what the model should read.

use codeact_runtime::{LimitKind, Limits, ScriptError};
use rhai::{EvalAltResult, ParseError, ParseErrorType};

use crate::engine::{ALLOCATION_TOKEN, DEADLINE_TOKEN};

/// After a line `{key: …}`: the JavaScript habit models bring most often.
const MAP_LITERAL_HINT: &str = "a Rhai map literal starts with `#{`, as in `#{name: \"x\", n: 1}`.";
/// After a line that starts with `#`.
const COMMENT_HINT: &str = "Rhai comments start with `//`, not `#`.";
/// After indexing `()`, most often an empty `{}` meant as a map.
const UNIT_INDEXED_HINT: &str = "the value indexed is `()`. In Rhai `{}` is an empty block, whose value is `()`: an empty map is `#{}`.";
/// After `for` over something it cannot walk.
const FOR_HINT: &str = "`for` walks arrays, ranges, strings and maps (a map's keys); to count to a number `n`, walk `0..n`.";

/// Every hint this crate appends to an error's message, each after a line
/// break and `Hint: `. They are the host's words, not the script's: the agent
/// loop moves a message's trailing hints that are exactly one of these out of
/// the fence its message is quoted in (a script that throws the same text
/// only gets the host's own words said).
pub const ERROR_HINTS: &[&str] = &[MAP_LITERAL_HINT, COMMENT_HINT, UNIT_INDEXED_HINT, FOR_HINT];

/// Sorts a parse error: limits by kind, anything else is a syntax error quoting the
/// lines around the position, since a model fixes what it can see.
pub(crate) fn from_parse_in(err: &ParseError, limits: &Limits, script: &str) -> ScriptError {
    match from_parse(err, limits) {
        ScriptError::Syntax { message } => {
            let mut message = match excerpt(script, err.position()) {
                Some(lines) => format!("{message}\n{lines}"),
                None => message,
            };
            let line = err
                .position()
                .line()
                .and_then(|n| script.lines().nth(n - 1));
            if line.is_some_and(has_bare_map_literal) {
                message.push_str(&format!("\nHint: {MAP_LITERAL_HINT}"));
            }
            if matches!(err.err_type(), ParseErrorType::Reserved(symbol) if symbol == "#")
                && line.is_some_and(|l| l.trim_start().starts_with('#'))
            {
                message.push_str(&format!("\nHint: {COMMENT_HINT}"));
            }
            ScriptError::Syntax { message }
        }
        other => other,
    }
}

/// True when `line` holds `{key:` without the `#` Rhai map literals need: the
/// JavaScript habit models bring most often.
fn has_bare_map_literal(line: &str) -> bool {
    let chars: Vec<char> = line.chars().collect();
    chars.iter().enumerate().any(|(i, &c)| {
        if c != '{' || (i > 0 && chars[i - 1] == '#') {
            return false;
        }
        let rest: String = chars[i + 1..].iter().collect();
        let rest = rest.trim_start();
        // A byte offset, not a count of characters: keys may be non-ASCII.
        let key_end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '"'))
            .unwrap_or(rest.len());
        key_end > 0 && rest[key_end..].trim_start().starts_with(':')
    })
}

/// The line at `position` and the one before, numbered, with a caret under the
/// column.
fn excerpt(script: &str, position: rhai::Position) -> Option<String> {
    let line = position.line()?;
    let column = position.position().unwrap_or(1);
    let lines: Vec<&str> = script.lines().collect();
    let mut out = String::new();
    for number in line.saturating_sub(1).max(1)..=line.min(lines.len()) {
        let text = lines.get(number - 1)?;
        let text: String = text.chars().take(200).collect();
        out.push_str(&format!("{number:>4} | {text}\n"));
    }
    if line <= lines.len() {
        out.push_str(&format!(
            "     | {}^",
            " ".repeat(column.saturating_sub(1).min(200))
        ));
    }
    (!out.is_empty()).then_some(out)
}

/// Sorts a parse error: limits by kind, anything else is a syntax error.
pub(crate) fn from_parse(err: &ParseError, limits: &Limits) -> ScriptError {
    match err.err_type() {
        ParseErrorType::ExprTooDeep => {
            ScriptError::limit(LimitKind::NestingDepth, limits, Some(err.to_string()))
        }
        ParseErrorType::TooManyFunctions => {
            ScriptError::limit(LimitKind::Functions, limits, Some(err.to_string()))
        }
        ParseErrorType::LiteralTooLarge(..) => {
            ScriptError::limit(LimitKind::Memory, limits, Some(err.to_string()))
        }
        _ => ScriptError::Syntax {
            message: format!("Syntax error: {err}"),
        },
    }
}

/// Sorts an evaluation error: a limit hit anywhere in the call chain is that limit;
/// anything else keeps Rhai's full message (call chain and position included).
pub(crate) fn from_eval(err: &EvalAltResult, limits: &Limits) -> ScriptError {
    let limit = |kind, detail: Option<String>| ScriptError::limit(kind, limits, detail);
    match err.unwrap_inner() {
        EvalAltResult::ErrorTerminated(token, _)
            if token
                .clone()
                .into_string()
                .is_ok_and(|t| t == DEADLINE_TOKEN) =>
        {
            limit(LimitKind::WallTime, None)
        }
        EvalAltResult::ErrorTerminated(token, position)
            if token
                .clone()
                .into_string()
                .is_ok_and(|t| t == ALLOCATION_TOKEN) =>
        {
            limit(
                LimitKind::Memory,
                Some(format!(
                    "the run allocated more than the limit allows at {position}"
                )),
            )
        }
        EvalAltResult::ErrorTooManyOperations(_) => limit(LimitKind::Operations, None),
        EvalAltResult::ErrorStackOverflow(_) => limit(LimitKind::CallDepth, None),
        EvalAltResult::ErrorTooManyVariables(_) => limit(LimitKind::Variables, None),
        EvalAltResult::ErrorDataTooLarge(what, position) => limit(
            LimitKind::Memory,
            Some(format!("{what} is too large at {position}")),
        ),
        EvalAltResult::ErrorParsing(parse, position) => {
            from_parse(&ParseError(Box::new(parse.clone()), *position), limits)
        }
        other => ScriptError::thrown(match hint(other) {
            Some(hint) => format!("{err}\nHint: {hint}"),
            None => err.to_string(),
        }),
    }
}

/// A hint for runtime errors that models trip over with habits from other
/// languages, chosen by the error's kind and types, never by its text.
fn hint(err: &EvalAltResult) -> Option<&'static str> {
    match err {
        EvalAltResult::ErrorIndexingType(type_name, _) if type_name.starts_with("()") => {
            Some(UNIT_INDEXED_HINT)
        }
        EvalAltResult::ErrorFor(_) => Some(FOR_HINT),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_error(script: &str) -> String {
        let engine = rhai::Engine::new();
        let err = engine.run(script).expect_err("fails");
        from_eval(&err, &Limits::default()).to_string()
    }

    #[test]
    fn runtime_errors_from_other_languages_habits_get_hints() {
        assert!(run_error("let m = {}; m[\"k\"] = 1;").contains("an empty map is `#{}`"));
        assert!(run_error("let n = 5; for x in n {}").contains("walk `0..n`"));
        assert!(!run_error("throw 1").contains("Hint"));
    }

    #[test]
    fn a_python_comment_gets_a_hint() {
        let script = "# sum them\n1";
        let err = rhai::Engine::new_raw()
            .compile(script)
            .expect_err("not a comment");
        assert!(
            from_parse_in(&err, &Limits::default(), script)
                .to_string()
                .contains("comments start with `//`")
        );
    }

    /// Found by fuzzing (cli/tests/fuzz/fuzz_targets/rhai_script.rs): a non-ASCII character
    /// after `{` sliced a string inside a character and panicked the host.
    #[test]
    fn the_map_literal_hint_survives_non_ascii_keys() {
        assert!(!has_bare_map_literal("fn`add(c, b) {\u{69e} * b }"));
        assert!(has_bare_map_literal("final_result({ключ: 1})"));
        let script = "fn`add(c, b) {\u{69e} * b }\nfinal_result(1)";
        let err = rhai::Engine::new_raw().compile(script).expect_err("broken");
        let _ = from_parse_in(&err, &Limits::default(), script);
    }

    #[test]
    fn a_javascript_style_map_gets_a_hint() {
        assert!(has_bare_map_literal("final_result({a: a})"));
        assert!(has_bare_map_literal("let m = { \"k\": 1 };"));
        assert!(!has_bare_map_literal("let m = #{a: 1};"));
        assert!(!has_bare_map_literal("if x { y }"));
    }

    #[test]
    fn a_syntax_error_quotes_the_lines_around_its_position() {
        let script = "let sum = 0\nfor i in 1..10 { sum += i; }\nsum";
        let engine = rhai::Engine::new_raw();
        let err = engine.compile(script).expect_err("missing semicolon");
        let ScriptError::Syntax { message } = from_parse_in(&err, &Limits::default(), script)
        else {
            panic!("a syntax error");
        };
        assert!(
            message.ends_with("   1 | let sum = 0\n   2 | for i in 1..10 { sum += i; }\n     | ^"),
            "{message}"
        );
    }
}
