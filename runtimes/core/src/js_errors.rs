//! What a JavaScript engine's error text says in structure, for the engines
//! that give only text (QuickJS's error objects reach the host as text; Boa
//! keeps an error's stack positions to itself): the error's name, the name
//! of an undefined variable, and the innermost position in the script.

use crate::{ErrorFacts, ErrorKind};

/// The facts of a JavaScript error whose text is `message`: its first line
/// `Name: text`, then stack frames `at f (script:L:C)`, innermost first, or a
/// parser's `at line L, col C`. `name` is the error's name where the engine
/// gave it apart from the text (`"ReferenceError"`); else it is read from the
/// first line. Positions in another source than `source` (a prelude, a
/// nameless `eval`) are not the script's and are left out.
pub fn facts(name: Option<&str>, message: &str, source: &str) -> ErrorFacts {
    let first = message.lines().next().unwrap_or_default();
    let (named, text) = match first.split_once(": ") {
        Some((head, text)) if is_error_name(head) => (Some(head), text),
        _ => (None, first),
    };
    let name = name.or(named).unwrap_or_default();
    let kind = match name {
        "SyntaxError" => ErrorKind::Syntax,
        "ReferenceError" => match undefined(text) {
            Some(undefined) if undefined == "require" => ErrorKind::ImportUnavailable,
            Some(undefined) => ErrorKind::UndefinedName { name: undefined },
            None => other(name),
        },
        "TypeError"
            if text.contains("not a function")
                || text.contains("not a callable")
                || text.contains("not callable") =>
        {
            ErrorKind::NotCallable
        }
        "TypeError" => ErrorKind::TypeMismatch,
        _ if text.starts_with("could not load module") => ErrorKind::ImportUnavailable,
        // The runtimes' own words for a tool's failure, thrown as an `Error`.
        "Error" if text.starts_with("tool '") && text.contains("' failed") => ErrorKind::ToolError,
        _ => other(name),
    };
    let (line, column) = frame(message, source)
        .or_else(|| {
            // Only a parser's own words: a thrown text may say `line 3` too.
            (kind == ErrorKind::Syntax)
                .then(|| parser_position(message))
                .flatten()
        })
        .unzip();
    ErrorFacts::of(kind)
        .at_line(line)
        .at_column(column.flatten())
}

fn other(name: &str) -> ErrorKind {
    ErrorKind::Other {
        engine_kind: name.to_string(),
    }
}

/// Whether `head` is an error's name: `Error`, or a word ending in `Error`.
fn is_error_name(head: &str) -> bool {
    head.ends_with("Error") && head.chars().all(|c| c.is_ascii_alphanumeric())
}

/// The name in `X is not defined` (`'X' is not defined` in QuickJS's older
/// wording).
fn undefined(text: &str) -> Option<String> {
    let name = text.strip_suffix(" is not defined")?.trim_matches('\'');
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '$');
    plain.then(|| name.to_string())
}

/// The innermost stack frame's position in `source`: `(script:L:C)` or
/// `script:L:C` at a frame's end, on the lines after the first (the frames,
/// innermost first), else on the first line (where Boa puts the outermost
/// call's position).
fn frame(message: &str, source: &str) -> Option<(u32, Option<u32>)> {
    let marker = format!("{source}:");
    let mut lines = message.lines();
    let first = lines.next();
    lines.chain(first).find_map(|line| {
        let line = line.trim().trim_end_matches(')');
        let at = line.rfind(&marker)?;
        let before = line[..at].chars().next_back();
        if before.is_some_and(|c| c != '(' && c != ' ') {
            return None;
        }
        let mut numbers = line[at + marker.len()..].split(':');
        let number = numbers.next()?.parse().ok()?;
        let column = numbers.next().and_then(|c| c.parse().ok());
        Some((number, column))
    })
}

/// A parser's `at line L, col C` (Boa), or `line L` alone.
fn parser_position(message: &str) -> Option<(u32, Option<u32>)> {
    let first = message.lines().next()?;
    let at = first.rfind("line ")?;
    let rest = &first[at + 5..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let number = digits.parse().ok()?;
    let column = rest[digits.len()..].strip_prefix(", col ").and_then(|c| {
        c.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .ok()
    });
    Some((number, column))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_undefined_name_is_named_and_placed_at_the_innermost_frame() {
        let found = facts(
            None,
            "ReferenceError: total is not defined\n    at f (script:3:7)\n    at <main> (script:5:1)",
            "script",
        );
        assert_eq!(
            found.kind,
            ErrorKind::UndefinedName {
                name: "total".into()
            }
        );
        assert_eq!((found.line, found.column), (Some(3), Some(7)));
    }

    #[test]
    fn the_frames_below_the_first_line_are_the_innermost() {
        let found = facts(
            None,
            "ReferenceError: gone is not defined (script:4:1)\n    at f (script:2:10)\n    at <main> (script:4:1)",
            "script",
        );
        assert_eq!(found.line, Some(2));
        let top = facts(
            None,
            "ReferenceError: gone is not defined (script:3:5)",
            "script",
        );
        assert_eq!((top.line, top.column), (Some(3), Some(5)));
    }

    #[test]
    fn a_call_of_something_not_a_function_is_not_callable() {
        let found = facts(
            Some("TypeError"),
            "TypeError: not a callable function\n    at <main> (script:2:9)",
            "script",
        );
        assert_eq!(found.kind, ErrorKind::NotCallable);
        assert_eq!(found.line, Some(2));
        let quickjs = facts(
            None,
            "TypeError: x.foo is not a function\n    at <eval> (script:4)",
            "script",
        );
        assert_eq!(
            (quickjs.kind, quickjs.line, quickjs.column),
            (ErrorKind::NotCallable, Some(4), None)
        );
    }

    #[test]
    fn a_parser_position_is_read_when_no_frame_gives_one() {
        let found = facts(
            Some("SyntaxError"),
            "SyntaxError: expected token ';', got 'x' at line 2, col 10",
            "script",
        );
        assert_eq!(found.kind, ErrorKind::Syntax);
        assert_eq!((found.line, found.column), (Some(2), Some(10)));
    }

    #[test]
    fn positions_in_another_source_are_not_the_scripts() {
        let found = facts(
            None,
            "Error: boom\n    at hostCall (prelude:192:19)",
            "script",
        );
        assert_eq!(found.line, None);
        let nameless = facts(
            None,
            "ReferenceError: w is not defined (unknown at :4:14)",
            "script",
        );
        assert_eq!(nameless.line, None);
        let prefixed = facts(None, "Error: boom\n    at f (myscript:2:1)", "script");
        assert_eq!(prefixed.line, None);
    }

    #[test]
    fn require_and_thrown_values_have_their_own_kinds() {
        assert_eq!(
            facts(None, "ReferenceError: require is not defined", "script").kind,
            ErrorKind::ImportUnavailable
        );
        assert_eq!(
            facts(None, "RangeError: invalid array length", "script").kind,
            ErrorKind::Other {
                engine_kind: "RangeError".into()
            }
        );
        assert_eq!(
            facts(None, "Uncaught no", "script").kind,
            ErrorKind::default()
        );
        assert_eq!(
            facts(
                None,
                "Error: tool 'weather' failed: down\n    at <main> (script:1:9)",
                "script"
            )
            .kind,
            ErrorKind::ToolError
        );
        assert_eq!(facts(None, "", "script"), ErrorFacts::default());
    }
}
