//! `codeact validate`: check one piece of content against an output spec, as a
//! final result would be checked, and print the verdict as one JSON line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use codeact_rhai::Verdict;
use serde_json::{Value, json};

use super::{EXIT_NOT_VALID, EXIT_OK, usage_error};
use codeact::output::{Check, OnValidatorError, OutputContract, OutputSpec, RefusedBy};

#[derive(Debug, Args)]
pub(crate) struct ValidateArgs {
    /// A Rhai validator file defining `fn validate(content)`.
    #[arg(long, value_name = "FILE.rhai", required_unless_present_any = ["schema", "policy"])]
    validator: Option<PathBuf>,
    /// Instead of content, check one tool call against a policy file's
    /// `fn check_call(tool, args)`, as `codeact run --policy` would: with --call
    /// and --args. Prints {"verdict":"allowed"}, {"verdict":"refused","reason":…},
    /// {"verdict":"ask"} or {"verdict":"unusable","reason":…}; exit 0 when allowed,
    /// 1 otherwise.
    #[arg(long, value_name = "FILE.rhai", conflicts_with_all = ["validator", "schema", "format", "input"], requires = "call")]
    policy: Option<PathBuf>,
    /// The tool of the call --policy checks.
    #[arg(long, value_name = "TOOL", requires = "policy")]
    call: Option<String>,
    /// The call's arguments, a JSON object [default: {}].
    #[arg(long, value_name = "JSON", requires = "policy")]
    args: Option<String>,
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
        (codeact::output::OutputSpecError::Schema(message), Some(path)) => {
            format!(
                "schema '{}': not a valid JSON Schema: {message}",
                path.display()
            )
        }
        _ => e.to_string(),
    })
}

/// `--policy F --call TOOL --args JSON`: one call's verdict, as a JSON line.
fn check_call(policy: &Path, tool: &str, call_args: Option<&str>) -> ExitCode {
    let policy = match codeact_rhai::RhaiPolicy::load(policy, codeact_runtime::Limits::default()) {
        Ok(policy) => policy,
        Err(e) => return usage_error(&e.to_string()),
    };
    let call_args: Value = match serde_json::from_str(call_args.unwrap_or("{}")) {
        Ok(value @ Value::Object(_)) => value,
        Ok(_) => return usage_error("--args must be a JSON object"),
        Err(e) => return usage_error(&format!("--args is not JSON: {e}")),
    };
    let Some(verdict) = policy.check_call(tool, &call_args) else {
        return usage_error(&format!(
            "policy '{}' defines no `fn check_call(tool, args)`",
            policy.path().display()
        ));
    };
    let (line, allowed) = match verdict {
        Verdict::Valid => (json!({"verdict": "allowed"}), true),
        Verdict::Invalid { reason } if reason.trim() == "ask" => (json!({"verdict": "ask"}), false),
        Verdict::Invalid { reason } => (json!({"verdict": "refused", "reason": reason}), false),
        Verdict::Unusable { reason } => (json!({"verdict": "unusable", "reason": reason}), false),
    };
    println!("{line}");
    ExitCode::from(if allowed { EXIT_OK } else { EXIT_NOT_VALID })
}

pub(crate) fn validate(args: &ValidateArgs) -> ExitCode {
    if let Some(policy) = &args.policy {
        return check_call(
            policy,
            args.call.as_deref().unwrap_or_default(),
            args.args.as_deref(),
        );
    }
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
