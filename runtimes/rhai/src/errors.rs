//! Rhai's errors sorted into what the model should read.

use codeact_runtime::{LimitKind, Limits, ScriptError};
use rhai::{EvalAltResult, ParseError, ParseErrorType};

use crate::engine::DEADLINE_TOKEN;

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
        EvalAltResult::ErrorTooManyOperations(_) => limit(LimitKind::Operations, None),
        EvalAltResult::ErrorStackOverflow(_) => limit(LimitKind::CallDepth, None),
        EvalAltResult::ErrorTooManyVariables(_) => limit(LimitKind::Variables, None),
        EvalAltResult::ErrorDataTooLarge(what, position) => limit(
            LimitKind::Memory,
            Some(format!(
                "{what} grew past its share of the limit at {position}"
            )),
        ),
        EvalAltResult::ErrorParsing(parse, position) => {
            from_parse(&ParseError(Box::new(parse.clone()), *position), limits)
        }
        _ => ScriptError::Thrown {
            message: err.to_string(),
        },
    }
}
