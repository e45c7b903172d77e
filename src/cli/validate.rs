//! `codeact validate`: check one piece of content against an output spec, as a
//! final result would be checked, and print the verdict as one JSON line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use serde_json::{Value, json};

use super::{EXIT_NOT_VALID, EXIT_OK, usage_error};
use crate::output::spec::{Check, OnValidatorError, OutputContract, OutputSpec, RefusedBy};

#[derive(Debug, Args)]
pub(crate) struct ValidateArgs {
    /// A Rhai validator file defining `fn validate(content)`.
    #[arg(long, value_name = "FILE.rhai", required_unless_present = "schema")]
    validator: Option<PathBuf>,
    /// A JSON Schema file the content must match. Without --format, the format is
    /// json: the content must parse, and the schema checks what it parses to.
    #[arg(long, value_name = "FILE.json")]
    schema: Option<PathBuf>,
    /// The format label; `json` means the content must parse as JSON.
    #[arg(long, value_name = "NAME")]
    format: Option<String>,
    /// Read the content from this file instead of stdin. One trailing line break
    /// is dropped, as editors and `echo` add one.
    #[arg(long, value_name = "FILE")]
    input: Option<PathBuf>,
}

/// Reads a JSON Schema file, naming the file in any error.
pub(crate) fn read_schema(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("schema '{}': cannot read it: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("schema '{}': not JSON: {e}", path.display()))
}

/// Loads `spec`, naming the schema file in a schema error (validator errors name
/// their file already).
pub(crate) fn load_contract(
    spec: &OutputSpec,
    schema_file: Option<&Path>,
) -> Result<OutputContract, String> {
    spec.load().map_err(|e| match (&e, schema_file) {
        (crate::output::spec::OutputSpecError::Schema(message), Some(path)) => {
            format!(
                "schema '{}': not a valid JSON Schema: {message}",
                path.display()
            )
        }
        _ => e.to_string(),
    })
}

pub(crate) fn validate(args: &ValidateArgs) -> ExitCode {
    let schema = match args.schema.as_deref().map(read_schema).transpose() {
        Ok(schema) => schema,
        Err(e) => return usage_error(&e),
    };
    let format = match (&args.format, &schema) {
        (Some(format), _) => Some(format.clone()),
        (None, Some(_)) => Some("json".to_string()),
        (None, None) => None,
    };
    let spec = OutputSpec {
        format,
        schema,
        validator: args.validator.clone(),
        on_validator_error: Some(OnValidatorError::Reject),
        ..OutputSpec::default()
    };
    let contract = match load_contract(&spec, args.schema.as_deref()) {
        Ok(contract) => contract,
        Err(e) => return usage_error(&e),
    };
    let source = match &args.input {
        Some(path) => path.display().to_string(),
        None => "-".to_string(),
    };
    let mut content = match super::exec::read_script(&source) {
        Ok(content) => content,
        Err(e) => return usage_error(&e.replace("the script", "the content")),
    };
    if content.ends_with('\n') {
        content.pop();
        if content.ends_with('\r') {
            content.pop();
        }
    }
    let check = contract.check(&Value::String(content));
    let reason = check.refusal_text();
    let (line, code) = match check {
        Check::Passed | Check::Unchecked { .. } => (json!({"verdict": "valid"}), EXIT_OK),
        Check::Refused {
            by: RefusedBy::BrokenValidator,
            ..
        } => (
            json!({"verdict": "unusable", "reason": reason}),
            EXIT_NOT_VALID,
        ),
        Check::Refused { .. } => (
            json!({"verdict": "invalid", "reason": reason}),
            EXIT_NOT_VALID,
        ),
    };
    println!("{line}");
    ExitCode::from(code)
}
