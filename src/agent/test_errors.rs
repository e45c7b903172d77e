//! Engine errors for tests, with the facts a runtime gives beside the message
//! (its kind and line), spelled out as each runtime fills them.

use codeact_runtime::{ErrorFacts, ErrorKind, ScriptError};

/// A thrown error with `message`, of `kind`, on `line`.
pub(crate) fn thrown_at(message: &str, kind: ErrorKind, line: Option<u32>) -> ScriptError {
    ScriptError::thrown(message).with_facts(ErrorFacts::of(kind).at_line(line))
}

/// A thrown error whose engine named its kind `engine_kind` (a Python
/// exception's type, a JavaScript error's name), on `line`.
pub(crate) fn named(message: &str, engine_kind: &str, line: Option<u32>) -> ScriptError {
    let kind = match engine_kind {
        "ToolError" => ErrorKind::ToolError,
        "ModuleNotFoundError" => ErrorKind::ImportUnavailable,
        "TypeError" => ErrorKind::TypeMismatch,
        _ => ErrorKind::Other {
            engine_kind: engine_kind.to_string(),
        },
    };
    thrown_at(message, kind, line)
}

/// An undefined name `name` on `line`.
pub(crate) fn undefined(message: &str, name: &str, line: Option<u32>) -> ScriptError {
    thrown_at(
        message,
        ErrorKind::UndefinedName {
            name: name.to_string(),
        },
        line,
    )
}

/// Rhai's missing function `name` whose first argument is a `receiver`, on
/// `line`.
pub(crate) fn no_function(
    message: &str,
    name: &str,
    receiver: &str,
    line: Option<u32>,
) -> ScriptError {
    thrown_at(
        message,
        ErrorKind::FunctionNotFound {
            name: name.to_string(),
            receiver: Some(receiver.to_string()),
        },
        line,
    )
}

/// An index past the end, on `line`.
pub(crate) fn out_of_bounds(
    message: &str,
    index: Option<i64>,
    length: Option<u64>,
    line: Option<u32>,
) -> ScriptError {
    thrown_at(message, ErrorKind::IndexOutOfBounds { index, length }, line)
}

/// A syntax error on `line`.
pub(crate) fn syntax_at(message: &str, line: Option<u32>) -> ScriptError {
    ScriptError::syntax(message).with_facts(ErrorFacts::of(ErrorKind::Syntax).at_line(line))
}
