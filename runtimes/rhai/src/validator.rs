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

use codeact_runtime::{Limits, LogBuffer, NoTools};
use rhai::{AST, CallFnOptions, Dynamic, Engine, ImmutableString, Scope};

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

impl Verdict {
    /// Why not: the reason of an invalid or unusable verdict, `None` when valid.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Verdict::Valid => None,
            Verdict::Invalid { reason } | Verdict::Unusable { reason } => Some(reason),
        }
    }
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
    /// A policy file defines neither `check_call` nor `check_code`.
    #[error("policy '{}': defines neither `fn check_call(tool, args)` nor `fn check_code(code, language)`", path.display())]
    NoRule {
        /// The file.
        path: PathBuf,
    },
    /// A policy rule does not take exactly two parameters.
    #[error("policy '{}': `{function}` takes {found} parameter(s); it must take two", path.display())]
    RuleArity {
        /// The file.
        path: PathBuf,
        /// `check_call` or `check_code`.
        function: &'static str,
        /// The parameter count found.
        found: usize,
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
        Self::compile(path, &read_source(path)?, limits)
    }

    /// Compiles validator `source`; `path` names it in errors.
    pub fn compile(
        path: impl AsRef<Path>,
        source: &str,
        limits: Limits,
    ) -> Result<Self, ValidatorLoadError> {
        let rules = Self::compile_rules(path, source, limits)?;
        let path = rules.path.clone();
        let arities: Vec<usize> = rules
            .ast
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
        Ok(rules)
    }

    /// Compiles `source` on the validator engine, whatever functions it defines.
    fn compile_rules(
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
        self.call_rule("validate", (content.to_string(),), content.len())
    }

    /// Runs `function(args…)` of the file under the limits (what the arguments
    /// take, `extra_bytes`, is not held against the rule's memory) and sorts
    /// what it returned.
    fn call_rule(&self, function: &str, args: impl rhai::FuncArgs, extra_bytes: usize) -> Verdict {
        let clock = codeact_runtime::RunClock::start(&self.limits);
        let guard = RunGuard::install(RunState {
            clock,
            alarm: crate::alarm::arm(clock.deadline()),
            interrupt: None,
            tools: Arc::new(NoTools),
            logs: LogBuffer::new(self.limits.max_output_bytes),
            meter: MeterSchedule::default(),
            // The arguments' own copies are allocated inside the run; they are
            // not the rule's doing.
            allocation_budget: isize::try_from(
                self.limits.max_memory_bytes.saturating_add(extra_bytes),
            )
            .unwrap_or(isize::MAX),
        });
        let result = big_stack::run(|| {
            let mut scope = Scope::new();
            self.engine.call_fn_with_options::<Dynamic>(
                CallFnOptions::new().eval_ast(false).rewind_scope(true),
                &mut scope,
                &self.ast,
                function,
                args,
            )
        });
        drop(guard.finish());
        match result {
            Ok(value) => verdict(function, &value),
            Err(error) => Verdict::Unusable {
                reason: errors::from_eval(&error, &self.limits).to_string(),
            },
        }
    }
}

/// A policy file: Rhai rules run before what a script does, on the validator's
/// engine and under its limits. `fn check_call(tool, args)` runs before every
/// tool call (`args` is the arguments map), `fn check_code(code, language)`
/// before every script; each returns `()` or `""` to allow, `"ask"` to route the
/// call to an approval, or a string saying why not. A file defines one or both.
///
/// ```
/// use codeact_rhai::{RhaiPolicy, Verdict};
/// use codeact_runtime::Limits;
///
/// let policy = RhaiPolicy::compile(
///     "policy.rhai",
///     r#"fn check_call(tool, args) { if tool == "delete_file" { "deleting is not allowed" } }"#,
///     Limits::default(),
/// ).unwrap();
/// assert_eq!(policy.check_call("read_file", &serde_json::json!({"name": "a"})), Some(Verdict::Valid));
/// assert!(matches!(policy.check_call("delete_file", &serde_json::json!({})), Some(Verdict::Invalid { .. })));
/// assert_eq!(policy.check_code("1 + 1", "Rhai"), None, "no check_code: nothing to say");
/// ```
#[derive(Clone)]
pub struct RhaiPolicy {
    rules: RhaiValidator,
    has_check_call: bool,
    has_check_code: bool,
}

impl std::fmt::Debug for RhaiPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RhaiPolicy")
            .field("path", &self.rules.path)
            .finish_non_exhaustive()
    }
}

impl RhaiPolicy {
    /// Reads and compiles the policy at `path`, as [`RhaiValidator::load`].
    pub fn load(path: &Path, limits: Limits) -> Result<Self, ValidatorLoadError> {
        Self::compile(path, &read_source(path)?, limits)
    }

    /// Compiles policy `source`; `path` names it in errors.
    pub fn compile(
        path: impl AsRef<Path>,
        source: &str,
        limits: Limits,
    ) -> Result<Self, ValidatorLoadError> {
        let rules = RhaiValidator::compile_rules(path, source, limits)?;
        let arity = |name: &str| -> Option<usize> {
            rules
                .ast
                .iter_functions()
                .find(|f| f.name == name)
                .map(|f| f.params.len())
        };
        let (check_call, check_code) = (arity("check_call"), arity("check_code"));
        if check_call.is_none() && check_code.is_none() {
            return Err(ValidatorLoadError::NoRule {
                path: rules.path.clone(),
            });
        }
        for (function, found) in [("check_call", check_call), ("check_code", check_code)] {
            if let Some(found) = found.filter(|n| *n != 2) {
                return Err(ValidatorLoadError::RuleArity {
                    path: rules.path.clone(),
                    function,
                    found,
                });
            }
        }
        Ok(Self {
            rules,
            has_check_call: check_call.is_some(),
            has_check_code: check_code.is_some(),
        })
    }

    /// The file this policy came from.
    pub fn path(&self) -> &Path {
        &self.rules.path
    }

    /// `check_call(tool, args)`'s verdict on a call, or `None` when the file has
    /// no `check_call`. Arguments that do not convert (too deep) are unusable.
    pub fn check_call(&self, tool: &str, args: &serde_json::Value) -> Option<Verdict> {
        if !self.has_check_call {
            return None;
        }
        let args = match convert::from_json(args, self.rules.limits.max_nesting_depth) {
            Ok(args) => args,
            Err(reason) => return Some(Verdict::Unusable { reason }),
        };
        let size = tool.len();
        Some(
            self.rules
                .call_rule("check_call", (tool.to_string(), args), size),
        )
    }

    /// `check_code(code, language)`'s verdict on a script, or `None` when the
    /// file has no `check_code`.
    pub fn check_code(&self, code: &str, language: &str) -> Option<Verdict> {
        self.has_check_code.then(|| {
            self.rules.call_rule(
                "check_code",
                (code.to_string(), language.to_string()),
                code.len() + language.len(),
            )
        })
    }
}

/// A rule file's text, or the error naming it.
fn read_source(path: &Path) -> Result<String, ValidatorLoadError> {
    std::fs::read_to_string(path).map_err(|e| ValidatorLoadError::Unreadable {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

fn verdict(function: &str, value: &Dynamic) -> Verdict {
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
                "{function} returned a {type_name}; it must return () or \"\" when all is fine, or a string saying what is wrong"
            ),
        },
    }
}

/// The agent engine (with its `parse_json(text)`), plus property reads on `()`
/// that give `()`, so `parse_json(text).a.b` is `()` when `a` is missing instead
/// of an error.
fn validator_engine(limits: &Limits) -> Engine {
    let mut engine = engine::build(limits);
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
    fn agent_scripts_parse_any_json_value_but_not_past_the_nesting_limit() {
        let runtime = crate::RhaiRuntime::new(Limits::default());
        let mut session = runtime.session(Arc::new(NoTools));
        let mut run = |code: &str| {
            codeact_runtime::Session::run(&mut session, code)
                .expect("host ok")
                .completion
        };
        assert_eq!(
            run(r#"parse_json("[{\"stock\": 0}, 2]")"#).expect("a list parses"),
            serde_json::json!([{"stock": 0}, 2])
        );
        assert_eq!(
            run(r#"parse_json("1")"#).expect("a number parses"),
            serde_json::json!(1)
        );
        let deep = format!("parse_json(\"{}{}\")", "[".repeat(500), "]".repeat(500));
        let error = run(&deep).expect_err("past the nesting limit");
        assert!(format!("{error:?}").contains("parse_json"), "{error:?}");
        assert!(run(r#"parse_json("{nope")"#).is_err());
    }

    #[test]
    fn a_policy_needs_a_rule_with_two_parameters() {
        let policy = |source: &str| RhaiPolicy::compile("p.rhai", source, Limits::default());
        assert!(matches!(
            policy("fn other() {}"),
            Err(ValidatorLoadError::NoRule { .. })
        ));
        assert!(matches!(
            policy("fn check_call(tool) {}"),
            Err(ValidatorLoadError::RuleArity {
                function: "check_call",
                found: 1,
                ..
            })
        ));
        assert!(policy("fn check_code(code, language) {}").is_ok());
    }

    #[test]
    fn a_policy_sees_the_tool_its_arguments_and_the_code() {
        let policy = RhaiPolicy::compile(
            "p.rhai",
            r#"
            fn check_call(tool, args) {
                if tool == "pay" && args.amount > 100 { return "over 100: ask a person"; }
                if tool == "pay" && args.amount > 50 { return "ask"; }
            }
            fn check_code(code, language) {
                if code.contains("while") { return `no loops in ${language}`; }
            }
            "#,
            Limits::default(),
        )
        .expect("compiles");
        let pay = |amount: i64| policy.check_call("pay", &serde_json::json!({"amount": amount}));
        assert_eq!(pay(10), Some(Verdict::Valid));
        assert_eq!(
            pay(60),
            Some(Verdict::Invalid {
                reason: "ask".into()
            })
        );
        assert_eq!(
            pay(200),
            Some(Verdict::Invalid {
                reason: "over 100: ask a person".into()
            })
        );
        assert_eq!(
            policy.check_code("while true {}", "Rhai"),
            Some(Verdict::Invalid {
                reason: "no loops in Rhai".into()
            })
        );
        assert_eq!(policy.check_code("1", "Rhai"), Some(Verdict::Valid));
    }

    #[test]
    fn a_policy_that_throws_or_runs_away_is_unusable() {
        let policy = RhaiPolicy::compile(
            "p.rhai",
            "fn check_call(tool, args) { if tool == \"a\" { throw \"boom\" } loop {} }",
            Limits {
                wall_time: std::time::Duration::from_millis(200),
                ..Limits::default()
            },
        )
        .expect("compiles");
        for tool in ["a", "b"] {
            assert!(matches!(
                policy.check_call(tool, &serde_json::json!({})),
                Some(Verdict::Unusable { .. })
            ));
        }
    }
}
