//! Rhai's errors sorted into what the model should read.

use codeact_runtime::{ErrorFacts, ErrorKind, LimitKind, Limits, ScriptError};
use rhai::{EvalAltResult, ParseError, ParseErrorType};

use crate::stops::{ALLOCATION_TOKEN, DEADLINE_TOKEN};

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
        ScriptError::Syntax { message, facts } => {
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
            ScriptError::Syntax { message, facts }
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
        _ => ScriptError::syntax(format!("Syntax error: {err}"))
            .with_facts(at(ErrorFacts::of(ErrorKind::Syntax), err.position())),
    }
}

/// `facts` placed at Rhai's `position`, when it has one.
fn at(facts: ErrorFacts, position: rhai::Position) -> ErrorFacts {
    let number = |n: Option<usize>| n.and_then(|n| u32::try_from(n).ok());
    facts
        .at_line(number(position.line()))
        .at_column(number(position.position()))
}

/// The kind of an evaluation error, from its variant and the values it holds;
/// `err` is the innermost error of a call chain.
fn kind(err: &EvalAltResult) -> ErrorKind {
    match err {
        EvalAltResult::ErrorVariableNotFound(name, _) => {
            ErrorKind::UndefinedName { name: name.clone() }
        }
        // Rhai gives the signature as one string: the name, then the
        // arguments' types in parentheses (`join ((), &str | String)`).
        EvalAltResult::ErrorFunctionNotFound(signature, _) => {
            let (name, types) = signature
                .split_once(" (")
                .unwrap_or((signature.as_str(), ""));
            let receiver = types
                .strip_suffix(')')
                .unwrap_or(types)
                .split(", ")
                .next()
                .filter(|first| !first.is_empty())
                .map(|first| {
                    // `()` is a type of its own; split only outside it.
                    first.strip_prefix("()").map_or(first, |_| "()").to_string()
                });
            ErrorKind::FunctionNotFound {
                name: name.to_string(),
                receiver,
            }
        }
        EvalAltResult::ErrorArrayBounds(length, index, _)
        | EvalAltResult::ErrorStringBounds(length, index, _) => ErrorKind::IndexOutOfBounds {
            index: Some(*index),
            length: u64::try_from(*length).ok(),
        },
        EvalAltResult::ErrorMismatchDataType(expected, actual, _)
            if actual == "()" && expected == "bool" =>
        {
            ErrorKind::UnitCondition
        }
        EvalAltResult::ErrorMismatchDataType(..)
        | EvalAltResult::ErrorMismatchOutputType(..)
        | EvalAltResult::ErrorIndexingType(..)
        | EvalAltResult::ErrorFor(..) => ErrorKind::TypeMismatch,
        EvalAltResult::ErrorModuleNotFound(..) => ErrorKind::ImportUnavailable,
        EvalAltResult::ErrorParsing(..) => ErrorKind::Syntax,
        // The engine's own words for a tool's failure (`engine::call_tool`).
        EvalAltResult::ErrorRuntime(value, _)
            if value
                .read_lock::<rhai::ImmutableString>()
                .is_some_and(|text| text.starts_with("tool '") && text.contains("' failed")) =>
        {
            ErrorKind::ToolError
        }
        other => ErrorKind::Other {
            engine_kind: variant_name(other),
        },
    }
}

/// The name of `err`'s variant (`ErrorRuntime`), from its debug form.
fn variant_name(err: &EvalAltResult) -> String {
    format!("{err:?}")
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect()
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
            limit(crate::run_state::time_limit(), None)
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
        })
        .with_facts(at(ErrorFacts::of(kind(other)), other.position())),
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

    fn facts(script: &str) -> ErrorFacts {
        let engine = rhai::Engine::new();
        let error = match engine.compile(script) {
            Err(err) => from_parse_in(&err, &Limits::default(), script),
            Ok(ast) => {
                let err = engine.run_ast(&ast).expect_err("fails");
                from_eval(&err, &Limits::default())
            }
        };
        error.facts().expect("a script error").clone()
    }

    #[test]
    fn an_undefined_variable_is_named_with_its_line_and_column() {
        let found = facts("let a = 1;\nlet b = total + a;");
        assert_eq!(
            found.kind,
            ErrorKind::UndefinedName {
                name: "total".into()
            }
        );
        assert_eq!((found.line, found.column), (Some(2), Some(9)));
    }

    #[test]
    fn a_missing_function_is_named_with_the_type_of_its_first_argument() {
        let found = facts("let a = 1;\nlet b = frobnicate(a, \"x\");");
        assert_eq!(
            found.kind,
            ErrorKind::FunctionNotFound {
                name: "frobnicate".into(),
                receiver: Some("i64".into())
            }
        );
        assert_eq!(found.line, Some(2));
        let on_unit = facts("let parts = [\"b\", \"a\"];\nparts.sort().join(\" \")");
        assert_eq!(
            on_unit.kind,
            ErrorKind::FunctionNotFound {
                name: "join".into(),
                receiver: Some("()".into())
            }
        );
        let no_arguments = facts("nothing_here()");
        assert_eq!(
            no_arguments.kind,
            ErrorKind::FunctionNotFound {
                name: "nothing_here".into(),
                receiver: None
            }
        );
    }

    #[test]
    fn an_index_past_the_end_gives_the_index_and_the_length() {
        let found = facts("let xs = [1, 2, 3];\n\nxs[3]");
        assert_eq!(
            found.kind,
            ErrorKind::IndexOutOfBounds {
                index: Some(3),
                length: Some(3)
            }
        );
        assert_eq!(found.line, Some(3));
    }

    #[test]
    fn a_syntax_error_gives_its_line_and_column() {
        let found = facts("let x = 1;\nlet y = (x + ;");
        assert_eq!(found.kind, ErrorKind::Syntax);
        assert_eq!(found.line, Some(2));
        assert!(found.column.is_some());
    }

    #[test]
    fn a_condition_on_nothing_and_a_thrown_value_are_told_apart() {
        let found = facts("let m = #{};\nif m.missing { 1 } else { 2 }");
        assert_eq!(found.kind, ErrorKind::UnitCondition);
        assert_eq!(found.line, Some(2));
        assert_eq!(
            facts("throw \"no\"").kind,
            ErrorKind::Other {
                engine_kind: "ErrorRuntime".into()
            }
        );
    }

    #[test]
    fn an_error_inside_a_function_is_placed_on_the_innermost_line() {
        let found = facts("fn f() {\n  missing_name\n}\nf()");
        assert_eq!(
            found.kind,
            ErrorKind::UndefinedName {
                name: "missing_name".into()
            }
        );
        assert_eq!(found.line, Some(2));
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
        let ScriptError::Syntax { message, .. } = from_parse_in(&err, &Limits::default(), script)
        else {
            panic!("a syntax error");
        };
        assert!(
            message.ends_with("   1 | let sum = 0\n   2 | for i in 1..10 { sum += i; }\n     | ^"),
            "{message}"
        );
    }
}
