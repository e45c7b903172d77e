//! Tool manifests: a JSON file describing command-backed tools, so the model knows
//! what each one does and what arguments it takes.
//!
//! ```json
//! [{"name": "add", "description": "Adds a and b.",
//!   "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
//!   "command": ["python3", "add.py"]}]
//! ```

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::tools::command::{CommandSpec, command_tool};
use crate::tools::toolbox::Tool;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    description: String,
    #[serde(default = "any_object")]
    parameters: Value,
    command: Vec<String>,
}

fn any_object() -> Value {
    serde_json::json!({"type": "object"})
}

/// Loads the tools of a manifest, each killed after `timeout`. A malformed manifest
/// is an error naming the file and the entry.
pub fn load_tool_manifest(path: &Path, timeout: Duration) -> Result<Vec<Tool>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read '{}': {e}", path.display()))?;
    let entries: Vec<Value> = serde_json::from_str(&text)
        .map_err(|e| format!("'{}' must be a JSON array of tools: {e}", path.display()))?;
    entries
        .into_iter()
        .enumerate()
        .map(|(index, raw)| {
            let label = raw
                .get("name")
                .and_then(Value::as_str)
                .map(|name| format!("entry {index} ('{name}')"))
                .unwrap_or_else(|| format!("entry {index}"));
            let entry: Entry = serde_json::from_value(raw)
                .map_err(|e| format!("'{}' {label}: {e}", path.display()))?;
            if entry.command.is_empty() {
                return Err(format!(
                    "'{}' {label}: \"command\" is empty",
                    path.display()
                ));
            }
            if !entry.parameters.is_object() {
                return Err(format!(
                    "'{}' {label}: \"parameters\" must be a JSON Schema object",
                    path.display()
                ));
            }
            let spec = CommandSpec {
                argv: entry.command,
                timeout,
            };
            Ok(command_tool(entry.name, entry.description, spec).with_parameters(entry.parameters))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(text: &str) -> Result<Vec<Tool>, String> {
        let dir = std::env::temp_dir().join(format!("codeact-manifest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(format!("{}.json", text.len()));
        std::fs::write(&path, text).expect("manifest written");
        load_tool_manifest(&path, Duration::from_secs(1))
    }

    #[test]
    fn a_manifest_entry_becomes_a_tool_with_its_schema() {
        let tools = manifest(r#"[{"name": "add", "description": "Adds.", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}, "command": ["python3", "add.py"]}]"#)
            .expect("valid manifest");
        assert_eq!(tools[0].spec().name, "add");
        assert_eq!(
            tools[0].spec().parameters["properties"]["a"]["type"],
            "integer"
        );
    }

    #[test]
    fn a_malformed_entry_is_named_in_the_error() {
        let err = manifest(r#"[{"name": "ok", "description": "", "command": ["true"]}, {"name": "bad", "description": ""}]"#).expect_err("missing command");
        assert!(
            err.contains("entry 1 ('bad')") && err.contains("command"),
            "{err}"
        );
        let err = manifest(r#"{"name": "x"}"#).expect_err("not an array");
        assert!(err.contains("must be a JSON array"), "{err}");
    }
}
