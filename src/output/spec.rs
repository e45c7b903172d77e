//! Output specs: what a final result must look like, the text the model reads about
//! it, and the checks a submitted result goes through.
//!
//! A spec is declared at up to three levels, most general first: the **agent** (its
//! habit, e.g. "answer in Markdown"), the **stage** (the workflow the agent is put to
//! work in: a team's `[output]` table, or [`TeamBuilder::output`](crate::TeamBuilder::output)),
//! and the **request** (one run: `codeact run --format/--schema/--validator`, or
//! [`Agent::run_with_output`](crate::Agent::run_with_output)). They cascade field by
//! field, the more specific level winning, except that a level naming a
//! *different* format retires the schema and validator declared above it unless it
//! brings its own (a JSON Schema says nothing about a CSV answer).
//!
//! ```
//! use codeact::OutputSpec;
//! use codeact::output::Check;
//! use serde_json::json;
//!
//! let agent = OutputSpec { format: Some("json".into()), schema: Some(json!({"type": "object"})), ..OutputSpec::default() };
//! let request = OutputSpec { format: Some("csv".into()), ..OutputSpec::default() };
//! let spec = OutputSpec::cascade(&agent, &OutputSpec::default(), &request);
//! assert_eq!(spec.format.as_deref(), Some("csv"));
//! assert_eq!(spec.schema, None);
//!
//! let contract = agent.load().unwrap();
//! assert_eq!(contract.check(&json!({"total": 3})), Check::Passed);
//! assert!(matches!(contract.check(&json!([3])), Check::Refused { .. }));
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use codeact_rhai::{RhaiValidator, ValidatorLoadError, Verdict};
use codeact_runtime::Limits;
use minijinja::context;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::schema_budget::{BudgetedSchema, SchemaBudget, SchemaCheck};
use crate::prompts::{PromptError, Prompts};
use crate::untrusted::UntrustedText;

/// What to do when the validator itself fails (throws, runs past a limit, returns
/// something other than `()` or a string).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnValidatorError {
    /// Refuse the result, with the validator's error as the reason. The default:
    /// a check that cannot run has not passed.
    #[default]
    Reject,
    /// Accept the result unchecked and flag the run as having a broken validator.
    Accept,
}

/// What a final result must look like. Every field is optional, so specs declared
/// at several levels cascade field by field (see the module docs). Default: empty,
/// which checks nothing and renders nothing.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSpec {
    /// A label for the format (`json`, `markdown`, `csv` …), shown to the model. Never
    /// interpreted, except that `json` (any case) means the content must parse as
    /// JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// Free-form instructions about the result, shown to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// An example result, shown to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub example: Option<String>,
    /// A JSON Schema the result must match (any draft the `jsonschema` crate knows;
    /// remote `$ref`s are not fetched). Shown to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    /// A Rhai file defining `fn validate(content)`; relative paths are read from
    /// the working directory (team files: from the file's folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validator: Option<PathBuf>,
    /// What a failing validator means. Default (when no level sets it): reject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_validator_error: Option<OnValidatorError>,
}

impl OutputSpec {
    /// True when no field is set.
    pub fn is_empty(&self) -> bool {
        *self == OutputSpec::default()
    }

    /// This spec with `over`'s fields taking precedence, field by field. When both
    /// name a format and the formats differ (compared ignoring case and spaces
    /// around), this spec's schema and validator are dropped: `over` keeps only
    /// those it brings.
    pub fn overlaid_with(&self, over: &OutputSpec) -> OutputSpec {
        let format_changes = match (&self.format, &over.format) {
            (Some(mine), Some(theirs)) => !same_format(mine, theirs),
            _ => false,
        };
        let (schema, validator) = if format_changes {
            (None, None)
        } else {
            (self.schema.clone(), self.validator.clone())
        };
        OutputSpec {
            format: over.format.clone().or_else(|| self.format.clone()),
            instructions: over
                .instructions
                .clone()
                .or_else(|| self.instructions.clone()),
            example: over.example.clone().or_else(|| self.example.clone()),
            schema: over.schema.clone().or(schema),
            validator: over.validator.clone().or(validator),
            on_validator_error: over.on_validator_error.or(self.on_validator_error),
        }
    }

    /// The spec that governs a run: `agent`, then `stage`, then `request`.
    pub fn cascade(agent: &OutputSpec, stage: &OutputSpec, request: &OutputSpec) -> OutputSpec {
        agent.overlaid_with(stage).overlaid_with(request)
    }

    /// True when the format label is `json`, whose content must parse.
    pub fn wants_json(&self) -> bool {
        self.format
            .as_deref()
            .is_some_and(|f| same_format(f, "json"))
    }

    /// The text the model reads about the final result (from
    /// `prompts/output.md`): the format, instructions, schema and example, and a
    /// closing sentence saying these govern presentation over anything else it was
    /// told. Blank fields are left out; an empty spec renders an empty string.
    pub fn render(&self) -> Result<String, PromptError> {
        self.render_with(&Prompts::default())
    }

    /// [`render`](Self::render) with the `output` template of `prompts`.
    pub(crate) fn render_with(&self, prompts: &Prompts) -> Result<String, PromptError> {
        let blank = |field: &Option<String>| field.as_deref().is_none_or(|t| t.trim().is_empty());
        if blank(&self.format)
            && blank(&self.instructions)
            && blank(&self.example)
            && self.schema.is_none()
            && self.validator.is_none()
        {
            return Ok(String::new());
        }
        let schema = match &self.schema {
            Some(schema) => serde_json::to_string_pretty(schema).unwrap_or_default(),
            None => String::new(),
        };
        let text = |field: &Option<String>| field.as_deref().unwrap_or("").trim().to_string();
        let rendered = prompts.try_render(
            "output",
            &context! {
                format => text(&self.format),
                instructions => text(&self.instructions),
                example => text(&self.example),
                schema => schema,
                checked => self.schema.is_some() || self.validator.is_some() || self.wants_json(),
            },
        )?;
        Ok(rendered.trim_end().to_string())
    }

    /// Compiles the schema and the validator (read from disk now, not at the end of
    /// a run), giving the contract that checks results.
    pub fn load(&self) -> Result<OutputContract, OutputSpecError> {
        OutputContract::load(self.clone())
    }
}

fn same_format(a: &str, b: &str) -> bool {
    a.trim().eq_ignore_ascii_case(b.trim())
}

/// An output spec that cannot be used: the caller fixes the spec.
#[derive(Debug, thiserror::Error)]
pub enum OutputSpecError {
    /// The validator file is unreadable, does not parse, or has no usable
    /// `validate`.
    #[error(transparent)]
    Validator(#[from] ValidatorLoadError),
    /// The schema is not a valid JSON Schema.
    #[error("the JSON Schema is invalid: {0}")]
    Schema(String),
}

/// Which check refused a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusedBy {
    /// The content does not parse in the declared format.
    Format,
    /// The content does not match the schema.
    Schema,
    /// The validator said what is wrong.
    Validator,
    /// The validator failed, under `on_validator_error = "reject"`.
    BrokenValidator,
    /// The content does not fit the caller's Rust type.
    Type,
    /// An artifact path escapes the working directory.
    Artifact,
    /// The run's coach held the result back
    /// ([`Event::Coached`](crate::agent::Event::Coached) names the rule).
    Coach,
}

/// The result of checking one final result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// Every check passed (or there were none).
    Passed,
    /// A check failed; the reason goes back to the model.
    Refused {
        /// Which check.
        by: RefusedBy,
        /// Why, in the host's words (or a validator's, verbatim): fed back as it is.
        reason: String,
        /// What of the model's result the reason points at, when it quotes it (a
        /// schema error's values and keys, a type error, an artifact path): fed back
        /// only through [`fence`](crate::untrusted::fence), never among the host's words.
        quoted: Option<UntrustedText>,
    },
    /// The validator failed under `on_validator_error = "accept"`: the result
    /// stands unchecked by it, and the run is flagged.
    Unchecked {
        /// The validator's error.
        reason: String,
    },
}

impl Check {
    /// A refusal's reason for people (events, logs, `codeact validate`): the
    /// host's words, then what they quote of the result, unfenced. `None` unless
    /// refused.
    pub fn refusal_text(&self) -> Option<String> {
        match self {
            Check::Refused { reason, quoted, .. } => Some(refusal_text(reason, quoted.as_ref())),
            _ => None,
        }
    }
}

/// `reason: quoted` as one line of plain text, for people; a prompt gets the
/// quoted part only fenced.
pub(crate) fn refusal_text(reason: &str, quoted: Option<&UntrustedText>) -> String {
    match quoted {
        Some(quoted) => format!("{reason}: {}", quoted.raw()),
        None => reason.to_string(),
    }
}

/// A check added by the caller, e.g. that the result deserializes into its type.
/// Its error says why the result does not fit; it may quote the result, so it is
/// fed back to the model fenced.
pub type ExtraCheck = Arc<dyn Fn(&Value) -> Result<(), String> + Send + Sync>;

/// A loaded [`OutputSpec`]: the schema and validator compiled, ready to check
/// results. Cheap to clone. Default: the empty spec, which checks nothing.
#[derive(Clone, Default)]
pub struct OutputContract {
    spec: OutputSpec,
    schema: Option<Arc<BudgetedSchema>>,
    validator: Option<RhaiValidator>,
    extra: Option<ExtraCheck>,
}

impl std::fmt::Debug for OutputContract {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputContract")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

/// Schema errors quoted in one refusal; the rest are counted.
const MAX_SCHEMA_ERRORS: usize = 5;

impl OutputContract {
    /// Compiles `spec`. Validators run under [`Limits::default`] (5 s, 10 million
    /// operations, 64 MiB).
    pub fn load(spec: OutputSpec) -> Result<Self, OutputSpecError> {
        let schema = match &spec.schema {
            Some(schema) => Some(Arc::new(
                BudgetedSchema::compile(schema).map_err(OutputSpecError::Schema)?,
            )),
            None => None,
        };
        let validator = match &spec.validator {
            Some(path) => Some(RhaiValidator::load(path, Limits::default())?),
            None => None,
        };
        Ok(Self {
            spec,
            schema,
            validator,
            extra: None,
        })
    }

    /// Adds a last check, run after the validator (a typed run checks that the
    /// result deserializes into its type).
    pub fn with_extra_check(mut self, check: ExtraCheck) -> Self {
        self.extra = Some(check);
        self
    }

    /// The spec this contract enforces.
    pub fn spec(&self) -> &OutputSpec {
        &self.spec
    }

    /// True when there is nothing to check.
    pub fn is_empty(&self) -> bool {
        self.schema.is_none()
            && self.validator.is_none()
            && self.extra.is_none()
            && !self.spec.wants_json()
    }

    /// Checks a submitted final result, in order: the format's parser (json), the
    /// schema, the validator, then any extra check. The first failure refuses it.
    ///
    /// The schema sees the result as structured data: a string parsed as JSON when
    /// the format is json, any other value as it is. The validator sees the result
    /// as text: a string is the string itself, any other value its JSON text.
    pub fn check(&self, value: &Value) -> Check {
        self.check_cancellable(value, None)
    }

    /// [`check`](Self::check), stopped by `cancel`: the schema check looks at it
    /// as it goes, and stops at its own budget (1,000,000 references followed
    /// or 1 s), so neither a costly schema nor a cancelled run holds a thread.
    pub fn check_cancellable(&self, value: &Value, cancel: Option<&CancellationToken>) -> Check {
        let structured = match structured(value, self.spec.wants_json()) {
            Ok(structured) => structured,
            Err(reason) => {
                return Check::Refused {
                    by: RefusedBy::Format,
                    reason,
                    quoted: None,
                };
            }
        };
        if let Some(schema) = &self.schema {
            match schema.check(
                &structured,
                SchemaBudget::default(),
                cancel,
                MAX_SCHEMA_ERRORS,
            ) {
                SchemaCheck::Valid => {}
                SchemaCheck::Invalid { shown, total } => {
                    // The errors quote the result's values and keys: model text.
                    let mut reason =
                        "the final result does not match the required JSON Schema".to_string();
                    if total > shown.len() {
                        reason.push_str(&format!(
                            " ({} more errors than shown)",
                            total - shown.len()
                        ));
                    }
                    return Check::Refused {
                        by: RefusedBy::Schema,
                        reason,
                        quoted: Some(UntrustedText::new(shown.join("; "))),
                    };
                }
                SchemaCheck::Stopped(why) => {
                    return Check::Refused {
                        by: RefusedBy::Schema,
                        reason: format!(
                            "the final result could not be checked against the required JSON Schema: {why}"
                        ),
                        quoted: None,
                    };
                }
            }
        }
        if let Some(validator) = &self.validator {
            match validator.validate(&content_text(value)) {
                Verdict::Valid => {}
                Verdict::Invalid { reason } => {
                    return Check::Refused {
                        by: RefusedBy::Validator,
                        reason,
                        quoted: None,
                    };
                }
                Verdict::Unusable { reason } => match self.spec.on_validator_error {
                    Some(OnValidatorError::Accept) => {
                        return self.extra_check(&structured, Check::Unchecked { reason });
                    }
                    Some(OnValidatorError::Reject) | None => {
                        return Check::Refused {
                            by: RefusedBy::BrokenValidator,
                            reason,
                            quoted: None,
                        };
                    }
                },
            }
        }
        self.extra_check(&structured, Check::Passed)
    }

    fn extra_check(&self, structured: &Value, otherwise: Check) -> Check {
        match &self.extra {
            Some(extra) => match extra(structured) {
                Ok(()) => otherwise,
                // Why it does not fit (serde's words) quotes the result.
                Err(why) => Check::Refused {
                    by: RefusedBy::Type,
                    reason: "the final result does not fit the expected type".into(),
                    quoted: Some(UntrustedText::new(why)),
                },
            },
            None => otherwise,
        }
    }
}

/// The result as text, as validators and the final output record see it: a string
/// is the string itself; any other value is its JSON text.
pub fn content_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// The result as structured data: with `json`, a string must parse and its parse
/// is the data; otherwise (and for non-strings) the value as it is.
pub fn structured(value: &Value, json: bool) -> Result<Value, String> {
    match value {
        Value::String(text) if json => serde_json::from_str(text).map_err(|e| {
            format!(
                "the final result must be JSON (format json), but the string submitted does not parse: {e}. Submit a map or an array, or a string holding valid JSON."
            )
        }),
        other => Ok(other.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(format: Option<&str>, schema: Option<Value>, validator: Option<&str>) -> OutputSpec {
        OutputSpec {
            format: format.map(String::from),
            schema,
            validator: validator.map(PathBuf::from),
            ..OutputSpec::default()
        }
    }

    #[test]
    fn a_spec_round_trips_through_json_and_toml() {
        let full = OutputSpec {
            format: Some("json".into()),
            instructions: Some("Totals only.".into()),
            example: Some("{\"total\": 3}".into()),
            schema: Some(json!({"type": "object", "required": ["total"]})),
            validator: Some("checks/total.rhai".into()),
            on_validator_error: Some(OnValidatorError::Accept),
        };
        let text = serde_json::to_string(&full).expect("serializes");
        assert_eq!(
            serde_json::from_str::<OutputSpec>(&text).expect("parses"),
            full
        );
        let toml_text = r#"
            format = "json"
            instructions = "Totals only."
            example = '{"total": 3}'
            schema = { type = "object", required = ["total"] }
            validator = "checks/total.rhai"
            on_validator_error = "accept"
        "#;
        assert_eq!(
            toml::from_str::<OutputSpec>(toml_text).expect("parses"),
            full
        );
        assert_eq!(
            serde_json::to_string(&OutputSpec::default()).expect("serializes"),
            "{}"
        );
    }

    #[test]
    fn an_unknown_field_or_on_validator_error_value_is_refused() {
        assert!(serde_json::from_value::<OutputSpec>(json!({"fromat": "json"})).is_err());
        assert!(
            serde_json::from_value::<OutputSpec>(json!({"on_validator_error": "ignore"})).is_err()
        );
        let spec: OutputSpec =
            serde_json::from_value(json!({"on_validator_error": "accept"})).expect("parses");
        assert_eq!(spec.on_validator_error, Some(OnValidatorError::Accept));
    }

    #[test]
    fn the_more_specific_level_wins_field_by_field() {
        let agent = OutputSpec {
            format: Some("json".into()),
            instructions: Some("agent".into()),
            example: Some("{}".into()),
            ..OutputSpec::default()
        };
        let stage = OutputSpec {
            instructions: Some("stage".into()),
            on_validator_error: Some(OnValidatorError::Accept),
            ..OutputSpec::default()
        };
        let request = OutputSpec {
            example: Some("{\"a\": 1}".into()),
            ..OutputSpec::default()
        };
        let spec = OutputSpec::cascade(&agent, &stage, &request);
        assert_eq!(spec.format.as_deref(), Some("json"));
        assert_eq!(spec.instructions.as_deref(), Some("stage"));
        assert_eq!(spec.example.as_deref(), Some("{\"a\": 1}"));
        assert_eq!(spec.on_validator_error, Some(OnValidatorError::Accept));
    }

    #[test]
    fn a_request_naming_another_format_retires_the_schema_and_validator() {
        let agent = spec(
            Some("json"),
            Some(json!({"type": "object"})),
            Some("a.rhai"),
        );
        let request = spec(Some("CSV"), None, None);
        let spec = OutputSpec::cascade(&agent, &OutputSpec::default(), &request);
        assert_eq!(spec.format.as_deref(), Some("CSV"));
        assert_eq!(spec.schema, None);
        assert_eq!(spec.validator, None);
    }

    #[test]
    fn a_request_naming_another_format_keeps_the_schema_and_validator_it_brings() {
        let agent = spec(
            Some("json"),
            Some(json!({"type": "object"})),
            Some("a.rhai"),
        );
        let request = spec(Some("csv"), None, Some("csv.rhai"));
        let spec = OutputSpec::cascade(&agent, &OutputSpec::default(), &request);
        assert_eq!(spec.schema, None);
        assert_eq!(spec.validator, Some(PathBuf::from("csv.rhai")));
    }

    #[test]
    fn the_same_format_in_another_case_or_no_format_keeps_the_schema_and_validator() {
        let agent = spec(
            Some("json"),
            Some(json!({"type": "object"})),
            Some("a.rhai"),
        );
        for request in [spec(Some(" JSON "), None, None), spec(None, None, None)] {
            let spec = OutputSpec::cascade(&agent, &OutputSpec::default(), &request);
            assert!(
                spec.schema.is_some() && spec.validator.is_some(),
                "{request:?}"
            );
        }
    }

    #[test]
    fn a_stage_naming_another_format_retires_the_agents_schema_too() {
        let agent = spec(Some("json"), Some(json!({"type": "object"})), None);
        let stage = spec(Some("markdown"), None, None);
        let spec = OutputSpec::cascade(&agent, &stage, &OutputSpec::default());
        assert_eq!(spec.schema, None);
    }

    #[test]
    fn an_empty_spec_renders_nothing() {
        assert_eq!(OutputSpec::default().render().expect("renders"), "");
        let blank = OutputSpec {
            instructions: Some("  ".into()),
            ..OutputSpec::default()
        };
        assert_eq!(blank.render().expect("renders"), "");
    }

    #[test]
    fn a_spec_renders_every_field_and_closes_with_the_precedence_sentence() {
        let spec = OutputSpec {
            format: Some("json".into()),
            instructions: Some("Give the total.".into()),
            example: Some("{\"total\": 3}".into()),
            schema: Some(json!({"type": "object"})),
            ..OutputSpec::default()
        };
        let text = spec.render().expect("renders");
        assert!(
            text.starts_with("## The final result\n\nFormat: json\n\nGive the total.\n\n"),
            "{text}"
        );
        assert!(
            text.contains("```json\n{\n  \"type\": \"object\"\n}\n```"),
            "{text}"
        );
        assert!(
            text.contains("An example of a final result:\n{\"total\": 3}"),
            "{text}"
        );
        assert!(text.ends_with(
            "submit it again. These requirements govern how you present the final result: they take precedence over anything else you were told about its form."
        ), "{text}");
    }

    #[test]
    fn json_format_requires_a_string_result_to_parse() {
        let contract = spec(Some("json"), None, None).load().expect("loads");
        assert_eq!(contract.check(&json!("{\"a\": 1}")), Check::Passed);
        assert_eq!(contract.check(&json!({"a": 1})), Check::Passed);
        assert!(matches!(
            contract.check(&json!("a: 1")),
            Check::Refused { by: RefusedBy::Format, reason, .. } if reason.contains("does not parse")
        ));
    }

    #[test]
    fn other_format_labels_are_never_interpreted() {
        let contract = spec(Some("yaml"), None, None).load().expect("loads");
        assert!(contract.is_empty());
        assert_eq!(contract.check(&json!("{{{ not yaml either")), Check::Passed);
    }

    #[test]
    fn the_schema_checks_the_parsed_json_and_names_where_it_fails() {
        let schema = json!({
            "type": "object",
            "properties": {"total": {"type": "integer"}},
            "required": ["total"]
        });
        let contract = spec(Some("json"), Some(schema), None)
            .load()
            .expect("loads");
        assert_eq!(contract.check(&json!("{\"total\": 3}")), Check::Passed);
        let Check::Refused { by, quoted, .. } = contract.check(&json!({"total": "three"})) else {
            panic!("a string total is refused");
        };
        assert_eq!(by, RefusedBy::Schema);
        let quoted = quoted.expect("the errors are quoted");
        assert!(quoted.raw().contains("at /total:"), "{}", quoted.raw());
        assert!(matches!(
            contract.check(&json!({})),
            Check::Refused { quoted: Some(quoted), .. } if quoted.raw().contains("at the top level")
        ));
    }

    #[test]
    fn an_invalid_schema_is_a_load_error() {
        let error = spec(None, Some(json!({"type": 5})), None)
            .load()
            .expect_err("not a schema");
        assert!(matches!(error, OutputSpecError::Schema(_)), "{error}");
    }

    #[test]
    fn content_is_the_string_itself_or_the_json_text() {
        assert_eq!(content_text(&json!("héllo \"x\"")), "héllo \"x\"");
        assert_eq!(content_text(&json!({"a": [1, "b"]})), "{\"a\":[1,\"b\"]}");
        assert_eq!(content_text(&json!(null)), "null");
    }

    #[test]
    fn an_extra_check_runs_last_and_refuses_as_a_type_mismatch() {
        let contract = OutputSpec::default()
            .load()
            .expect("loads")
            .with_extra_check(Arc::new(|value: &Value| {
                value
                    .as_i64()
                    .map(|_| ())
                    .ok_or_else(|| "an integer".to_string())
            }));
        assert_eq!(contract.check(&json!(3)), Check::Passed);
        assert_eq!(
            contract.check(&json!("3")),
            Check::Refused {
                by: RefusedBy::Type,
                reason: "the final result does not fit the expected type".into(),
                quoted: Some(UntrustedText::new("an integer")),
            }
        );
    }
}
