//! A stdio guest's failure in structure: the kind of error and its line, from
//! what the guest's prelude sends beside its message ([`GuestFacts`]), read in
//! the terms of the guest's language.

use codeact_runtime::{ErrorFacts, ErrorKind};

use crate::protocol::GuestFacts;

/// The facts of a failure the guest of `runtime` reported with `message`;
/// `syntax` when it reported a syntax error. The Python guests send the
/// exception's type, its line and, for a name error, the name; the JavaScript
/// guest sends only text, read as JavaScript's errors read.
pub(crate) fn from_guest(
    runtime: &str,
    sent: &GuestFacts,
    message: &str,
    syntax: bool,
) -> ErrorFacts {
    if runtime.starts_with("wasm:js") {
        let name = sent.error.as_deref().or(syntax.then_some("SyntaxError"));
        // The stdio guest's QuickJS names the script's source `<evalScript>`.
        let source = if runtime == "wasm:js-stdio" {
            "<evalScript>"
        } else {
            "script"
        };
        let mut facts = codeact_runtime::js_errors::facts(name, message, source);
        if sent.line.is_some() {
            facts = facts.at_line(sent.line).at_column(sent.column);
        }
        return facts;
    }
    let kind = if syntax {
        ErrorKind::Syntax
    } else {
        python_kind(sent.error.as_deref().unwrap_or_default(), sent, message)
    };
    ErrorFacts::of(kind)
        .at_line(sent.line)
        .at_column(sent.column)
}

/// The kind of a Python exception named `error` (its type's name, with its
/// module when not a built-in one).
fn python_kind(error: &str, sent: &GuestFacts, message: &str) -> ErrorKind {
    match error {
        "SyntaxError" | "IndentationError" | "TabError" => ErrorKind::Syntax,
        "NameError" | "UnboundLocalError" => match &sent.name {
            Some(name) if !name.is_empty() => ErrorKind::UndefinedName { name: name.clone() },
            _ => other(error),
        },
        "ModuleNotFoundError" | "ImportError" => ErrorKind::ImportUnavailable,
        // The prelude's exception for a tool's failure.
        "ToolError" => ErrorKind::ToolError,
        "IndexError" => ErrorKind::IndexOutOfBounds {
            index: None,
            length: None,
        },
        // Python says a value is not callable only in the message's words.
        "TypeError"
            if last_line(message).contains("not callable")
                || last_line(message).contains("isn't callable") =>
        {
            ErrorKind::NotCallable
        }
        "TypeError" => ErrorKind::TypeMismatch,
        _ => other(error),
    }
}

/// The message's last line: a traceback ends with the exception's own.
fn last_line(message: &str) -> &str {
    message.lines().last().unwrap_or_default()
}

fn other(error: &str) -> ErrorKind {
    ErrorKind::Other {
        engine_kind: error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(error: &str, line: u32, name: Option<&str>) -> GuestFacts {
        GuestFacts {
            error: Some(error.into()),
            line: Some(line),
            column: None,
            name: name.map(str::to_string),
        }
    }

    #[test]
    fn a_python_name_error_names_the_name_at_its_line() {
        let facts = from_guest(
            "wasm:python",
            &sent("NameError", 4, Some("total")),
            "NameError: name 'total' is not defined",
            false,
        );
        assert_eq!(
            facts.kind,
            ErrorKind::UndefinedName {
                name: "total".into()
            }
        );
        assert_eq!(facts.line, Some(4));
    }

    #[test]
    fn python_exceptions_map_to_their_kinds() {
        let kind = |error: &str, message: &str| {
            from_guest("wasm:python", &sent(error, 1, None), message, false).kind
        };
        assert_eq!(
            kind("IndexError", "IndexError: list index out of range"),
            ErrorKind::IndexOutOfBounds {
                index: None,
                length: None
            }
        );
        assert_eq!(kind("ToolError", "ToolError: no"), ErrorKind::ToolError);
        assert_eq!(
            kind("ModuleNotFoundError", "x"),
            ErrorKind::ImportUnavailable
        );
        assert_eq!(
            kind("TypeError", "TypeError: 'int' object is not callable"),
            ErrorKind::NotCallable
        );
        assert_eq!(
            kind("TypeError", "TypeError: unsupported"),
            ErrorKind::TypeMismatch
        );
        assert_eq!(
            kind("NameError", "no name sent"),
            ErrorKind::Other {
                engine_kind: "NameError".into()
            }
        );
        assert_eq!(
            kind("ValueError", "ValueError: bad"),
            ErrorKind::Other {
                engine_kind: "ValueError".into()
            }
        );
    }

    #[test]
    fn a_guest_that_sends_nothing_is_known_by_its_message_alone() {
        let facts = from_guest(
            "wasm:python",
            &GuestFacts::default(),
            "NameError: name 'x' is not defined",
            false,
        );
        assert_eq!(facts, ErrorFacts::default());
        let js = from_guest(
            "wasm:js-stdio",
            &GuestFacts::default(),
            "ReferenceError: x is not defined\n    at <eval> (<evalScript>:2:5)",
            false,
        );
        assert_eq!(js.kind, ErrorKind::UndefinedName { name: "x".into() });
        assert_eq!(js.line, Some(2));
        let syntax = from_guest("wasm:micropython", &GuestFacts::default(), "bad", true);
        assert_eq!(syntax.kind, ErrorKind::Syntax);
    }
}
