//! Rhai validators: a file defining `fn validate(content)` that checks a final
//! result no JSON Schema can describe, run on the same hardened engine as agent
//! scripts.
//!
//! ```
//! use codeact_rhai::{RhaiValidator, Verdict};
//! use codeact_runtime::Limits;
//!
//! let validator = RhaiValidator::compile(
//!     "words.rhai",
//!     r#"fn validate(content) { if content.split(" ").len() > 3 { "at most 3 words" } }"#,
//!     Limits::default(),
//! ).unwrap();
//! assert_eq!(validator.validate("two words"), Verdict::Valid);
//! assert_eq!(validator.validate("one two three four"), Verdict::Invalid { reason: "at most 3 words".into() });
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use codeact_runtime::{Limits, LogBuffer, NoTools};
use rhai::{AST, CallFnOptions, Dynamic, Engine, EvalAltResult, ImmutableString, Scope};

use crate::run_state::{MeterSchedule, RunGuard, RunState};
use crate::{big_stack, convert, engine, errors};

/// What a validator said about one piece of content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// `validate` returned `()` or a blank string.
    Valid,
    /// `validate` returned a non-blank string: the reason, verbatim.
    Invalid {
        /// What is wrong, in the validator's words.
        reason: String,
    },
    /// The validator could not give a verdict: it threw, ran past a limit, or
    /// returned something other than `()` or a string.
    Unusable {
        /// The script's own error, or what it returned instead.
        reason: String,
    },
}

/// A validator file that cannot be used; each names the file and the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidatorLoadError {
    /// The file could not be read.
    #[error("validator '{}': cannot read it: {reason}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        reason: String,
    },
    /// The file does not parse (or breaks a parse-time limit, or uses `import`
    /// or `eval`, which are disabled).
    #[error("validator '{}': {message}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's message with the lines around the position.
        message: String,
    },
    /// The file defines no `validate` function.
    #[error("validator '{}': defines no `fn validate(content)`", path.display())]
    NoValidate {
        /// The file.
        path: PathBuf,
    },
    /// `validate` exists but does not take exactly one parameter.
    #[error("validator '{}': `validate` takes {found} parameter(s); it must take exactly one, the content: `fn validate(content)`", path.display())]
    WrongArity {
        /// The file.
        path: PathBuf,
        /// The parameter counts found (the first one, when overloaded).
        found: usize,
    },
}

/// A compiled validator: the hardened engine (operation, time, size and depth
/// limits; no `eval`, no `import`, no file or network access) plus the file's
/// functions. Its top-level statements never run: put everything in functions.
/// Cheap to share: calls take `&self` and keep no state between them.
#[derive(Clone)]
pub struct RhaiValidator {
    engine: Arc<Engine>,
    ast: Arc<AST>,
    limits: Arc<Limits>,
    path: PathBuf,
}

impl std::fmt::Debug for RhaiValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RhaiValidator")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl RhaiValidator {
    /// Reads and compiles the validator at `path`; every run of it is bounded by
    /// `limits` (the host uses [`Limits::default`]: 5 s, 10 million operations).
    pub fn load(path: &Path, limits: Limits) -> Result<Self, ValidatorLoadError> {
        let source = std::fs::read_to_string(path).map_err(|e| ValidatorLoadError::Unreadable {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        Self::compile(path, &source, limits)
    }

    /// Compiles validator `source`; `path` names it in errors.
    pub fn compile(
        path: impl AsRef<Path>,
        source: &str,
        limits: Limits,
    ) -> Result<Self, ValidatorLoadError> {
        let path = path.as_ref().to_path_buf();
        let engine = validator_engine(&limits);
        let ast = engine
            .compile(source)
            .map_err(|e| ValidatorLoadError::Syntax {
                message: errors::from_parse_in(&e, &limits, source).to_string(),
                path: path.clone(),
            })?;
        let arities: Vec<usize> = ast
            .iter_functions()
            .filter(|f| f.name == "validate")
            .map(|f| f.params.len())
            .collect();
        if arities.is_empty() {
            return Err(ValidatorLoadError::NoValidate { path });
        }
        if !arities.contains(&1) {
            return Err(ValidatorLoadError::WrongArity {
                path,
                found: arities[0],
            });
        }
        Ok(Self {
            engine: Arc::new(engine),
            ast: Arc::new(ast),
            limits: Arc::new(limits),
            path,
        })
    }

    /// The file this validator came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `validate(content)` under the limits, on the large evaluation stack,
    /// and sorts what it returned. What it prints is dropped.
    pub fn validate(&self, content: &str) -> Verdict {
        let deadline = Instant::now() + self.limits.wall_time;
        let guard = RunGuard::install(RunState {
            deadline,
            alarm: crate::alarm::arm(deadline),
            tools: Arc::new(NoTools),
            logs: LogBuffer::new(self.limits.max_output_bytes),
            meter: MeterSchedule::default(),
            // The content's own copy is allocated inside the run; it is not the
            // validator's doing.
            allocation_budget: isize::try_from(
                self.limits.max_memory_bytes.saturating_add(content.len()),
            )
            .unwrap_or(isize::MAX),
        });
        let result = big_stack::run(|| {
            let mut scope = Scope::new();
            self.engine.call_fn_with_options::<Dynamic>(
                CallFnOptions::new().eval_ast(false).rewind_scope(true),
                &mut scope,
                &self.ast,
                "validate",
                (content.to_string(),),
            )
        });
        drop(guard.finish());
        match result {
            Ok(value) => verdict(&value),
            Err(error) => Verdict::Unusable {
                reason: errors::from_eval(&error, &self.limits).to_string(),
            },
        }
    }
}

fn verdict(value: &Dynamic) -> Verdict {
    if value.is_unit() {
        return Verdict::Valid;
    }
    match value.clone().into_immutable_string() {
        Ok(text) if text.trim().is_empty() => Verdict::Valid,
        Ok(text) => Verdict::Invalid {
            reason: text.to_string(),
        },
        Err(type_name) => Verdict::Unusable {
            reason: format!(
                "validate returned a {type_name}; it must return () or \"\" when the content is fine, or a string saying what is wrong"
            ),
        },
    }
}

/// The agent engine plus `parse_json(text)`, and property reads on `()` that give
/// `()`, so `parse_json(text).a.b` is `()` when `a` is missing instead of an error.
fn validator_engine(limits: &Limits) -> Engine {
    let mut engine = engine::build(limits);
    let max_depth = limits.max_nesting_depth;
    engine.register_fn(
        "parse_json",
        move |text: ImmutableString| -> Result<Dynamic, Box<EvalAltResult>> {
            let value: serde_json::Value = serde_json::from_str(text.as_str())
                .map_err(|e| format!("parse_json: the text is not JSON: {e}"))?;
            convert::from_json(&value, max_depth).map_err(|e| format!("parse_json: {e}").into())
        },
    );
    engine.register_indexer_get(|_unit: &mut (), _property: ImmutableString| ());
    engine
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compile(source: &str) -> RhaiValidator {
        RhaiValidator::compile("test.rhai", source, Limits::default()).expect("compiles")
    }

    #[test]
    fn missing_json_fields_read_as_unit_even_when_nested() {
        let validator = compile(
            r#"fn validate(content) {
                let data = parse_json(content);
                if data.missing != () { return "missing was set"; }
                if data.a.b.c != () { return "nested was set"; }
                if data.name != "x" { return "wrong name"; }
            }"#,
        );
        assert_eq!(validator.validate(r#"{"name": "x"}"#), Verdict::Valid);
    }

    #[test]
    fn parse_json_of_broken_text_makes_the_validator_unusable() {
        let validator = compile("fn validate(content) { parse_json(content); }");
        assert!(matches!(
            validator.validate("{nope"),
            Verdict::Unusable { reason } if reason.contains("not JSON")
        ));
    }

    #[test]
    fn agent_script_helpers_do_not_gain_parse_json() {
        let runtime = crate::RhaiRuntime::new(Limits::default());
        let mut session = runtime.session(Arc::new(NoTools));
        let outcome =
            codeact_runtime::Session::run(&mut session, r#"parse_json("1")"#).expect("host ok");
        assert!(outcome.completion.is_err());
    }
}
