//! Tool manifests: a JSON file describing command-backed tools, so the model knows
//! what each one does and what arguments it takes.
//!
//! ```json
//! [{"name": "add", "description": "Adds a and b.",
//!   "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
//!   "command": ["python3", "add.py"]}]
//! ```
//!
//! Or, to name MCP servers as well, an object (either key may be left out):
//!
//! ```json
//! {"tools": [...],
//!  "mcp": {"files": {"command": ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/data"]},
//!          "docs": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer $DOCS_TOKEN"}}}}
//! ```
//!
//! `$VAR` or `${VAR}` in a header's value is read from the environment, so the
//! secret stays out of the file. A command tool with `"approval": true`, and an
//! MCP server with `"approval": true` (all its tools) or `"approval": ["write_file"]`
//! (its names for some), wait for approval on each call (`codeact run --approve`).

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
    /// Each call waits for approval (`codeact run --approve`).
    #[serde(default)]
    approval: bool,
}

fn any_object() -> Value {
    serde_json::json!({"type": "object"})
}

/// A manifest's two parts: command tools and MCP servers.
struct Parts {
    tools: Option<Vec<Value>>,
    mcp: Option<serde_json::Map<String, Value>>,
}

fn parts_of(path: &Path) -> Result<Parts, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read '{}': {e}", path.display()))?;
    let shape = || {
        format!(
            "'{}' must be a JSON array of tools, or an object with \"tools\" (that array) and \"mcp\" (servers by name)",
            path.display()
        )
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Array(tools)) => Ok(Parts {
            tools: Some(tools),
            mcp: None,
        }),
        Ok(Value::Object(mut object)) => {
            if let Some(key) = object.keys().find(|key| *key != "tools" && *key != "mcp") {
                return Err(format!("{}; it has \"{key}\"", shape()));
            }
            let tools = match object.remove("tools") {
                None => None,
                Some(Value::Array(tools)) => Some(tools),
                Some(_) => return Err(shape()),
            };
            let mcp = match object.remove("mcp") {
                None => None,
                Some(Value::Object(servers)) => Some(servers),
                Some(_) => return Err(format!("{}: \"mcp\" must be an object", shape())),
            };
            Ok(Parts { tools, mcp })
        }
        Ok(_) => Err(shape()),
        Err(e) => Err(format!("{}: {e}", shape())),
    }
}

/// Refuses a manifest with an `mcp` section where `place` cannot start its
/// servers, rather than leaving them out without a word.
pub fn refuse_mcp_servers(path: &Path, place: &str) -> Result<(), String> {
    match parts_of(path)?.mcp {
        Some(servers) if !servers.is_empty() => Err(format!(
            "'{}' names MCP servers, which {place} cannot start yet: give them to `codeact run` or `exec`",
            path.display()
        )),
        _ => Ok(()),
    }
}

/// Loads a manifest's command tools and connects its MCP servers, from sync code
/// (a team file): each server is started on the process's shared tool runtime,
/// which keeps its connection, from a thread of its own, so this works inside
/// an async runtime as well as outside one.
#[cfg(feature = "mcp")]
pub(crate) fn load_manifest_with_mcp(path: &Path, timeout: Duration) -> Result<Vec<Tool>, String> {
    let mut tools = load_tool_manifest(path, timeout)?;
    let servers = load_mcp_servers(path)?;
    if servers.is_empty() {
        return Ok(tools);
    }
    let handle = crate::tools::toolbox::fallback_runtime()
        .ok_or("the host could not start a thread for the MCP servers")?
        .clone();
    let connected = std::thread::spawn(move || {
        handle.block_on(async {
            let mut tools = Vec::new();
            for server in servers {
                tools.extend(server.tools().await.map_err(|e| e.to_string())?);
            }
            Ok::<_, String>(tools)
        })
    })
    .join()
    .map_err(|_| "connecting the MCP servers panicked".to_string())??;
    tools.extend(connected);
    Ok(tools)
}

/// One server of a manifest's `mcp` object.
#[cfg(feature = "mcp")]
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct McpEntry {
    command: Option<Vec<String>>,
    url: Option<String>,
    #[serde(default)]
    headers: std::collections::BTreeMap<String, String>,
    /// `true` (every tool) or the server's names of the tools whose calls wait
    /// for approval.
    #[serde(default)]
    approval: Option<McpApproval>,
}

#[cfg(feature = "mcp")]
#[derive(Deserialize)]
#[serde(untagged)]
enum McpApproval {
    All(bool),
    Tools(Vec<String>),
}

/// The MCP servers a manifest names (none for the array form), in name order.
#[cfg(feature = "mcp")]
pub fn load_mcp_servers(path: &Path) -> Result<Vec<crate::tools::mcp::McpServer>, String> {
    use crate::tools::mcp::McpServer;
    let servers = parts_of(path)?.mcp.unwrap_or_default();
    servers
        .into_iter()
        .map(|(name, raw)| {
            let label = format!("'{}' MCP server '{name}'", path.display());
            let entry: McpEntry =
                serde_json::from_value(raw).map_err(|e| format!("{label}: {e}"))?;
            let server = match (entry.command, entry.url) {
                (Some(command), None) => {
                    let (program, args) = command
                        .split_first()
                        .ok_or_else(|| format!("{label}: \"command\" is empty"))?;
                    if !entry.headers.is_empty() {
                        return Err(format!("{label}: \"headers\" are for a \"url\""));
                    }
                    McpServer::stdio(name, program.clone(), args.to_vec())
                }
                (None, Some(url)) => {
                    let mut server = McpServer::http(name, url);
                    for (header, value) in entry.headers {
                        let value = crate::tools::fetch::expand_environment(&value)
                            .map_err(|e| format!("{label}: header '{header}': {e}"))?;
                        server = server.header(header, value);
                    }
                    server
                }
                _ => {
                    return Err(format!(
                        "{label}: give either \"command\" (a stdio server) or \"url\" (HTTP)"
                    ));
                }
            };
            Ok(match entry.approval {
                None | Some(McpApproval::All(false)) => server,
                Some(McpApproval::All(true)) => server.all_need_approval(),
                Some(McpApproval::Tools(tools)) => tools
                    .into_iter()
                    .fold(server, |server, tool| server.needs_approval(tool)),
            })
        })
        .collect()
}

/// Loads the tools of a manifest, each killed after `timeout`. A malformed manifest
/// is an error naming the file and the entry.
pub fn load_tool_manifest(path: &Path, timeout: Duration) -> Result<Vec<Tool>, String> {
    let entries = match parts_of(path)? {
        Parts {
            tools: Some(entries),
            ..
        } => entries,
        Parts { tools: None, .. } => Vec::new(),
    };
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
            let tool =
                command_tool(entry.name, entry.description, spec).with_parameters(entry.parameters);
            Ok(if entry.approval {
                tool.needing_approval()
            } else {
                tool
            })
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
        let err = manifest(r#"{"tools": {}}"#).expect_err("tools not an array");
        assert!(err.contains("must be a JSON array"), "{err}");
    }

    #[cfg(feature = "mcp")]
    #[test]
    fn the_object_form_holds_tools_and_mcp_servers() {
        let text = r#"{"tools": [{"name": "add", "description": "", "command": ["true"]}],
            "mcp": {"files": {"command": ["npx", "-y", "server"]},
                    "docs": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer $DOCS_TOKEN"}}}}"#;
        let tools = manifest(text).expect("valid manifest");
        assert_eq!(tools.len(), 1);
        let dir = std::env::temp_dir().join(format!("codeact-manifest-mcp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("servers.json");
        let servers = |text: &str| {
            std::fs::write(&path, text).expect("manifest written");
            load_mcp_servers(&path)
        };
        let plain = r#"{"mcp": {"files": {"command": ["npx", "-y", "server"]},
            "docs": {"url": "https://example.com/mcp"}}}"#;
        let names: Vec<String> = servers(plain)
            .expect("valid")
            .iter()
            .map(|server| server.name().to_string())
            .collect();
        assert_eq!(names, ["docs", "files"]);
        for bad in [
            r#"{"mcp": {"x": {}}}"#,
            r#"{"mcp": {"x": {"command": []}}}"#,
            r#"{"mcp": {"x": {"command": ["a"], "url": "http://b"}}}"#,
            r#"{"mcp": {"x": {"command": ["a"], "headers": {"A": "b"}}}}"#,
            r#"{"mcp": {"x": {"url": "http://b", "token": "t"}}}"#,
            r#"{"mcp": []}"#,
            r#"{"servers": {}}"#,
            r#"{"mcp": {"x": {"url": "http://b", "headers": {"A": "$CODEACT_TEST_UNSET_VARIABLE"}}}}"#,
            r#"{"mcp": {"x": {"url": "http://b", "approval": "yes"}}}"#,
        ] {
            assert!(servers(bad).is_err(), "{bad}");
        }
        let marked = servers(
            r#"{"mcp": {"some": {"url": "http://b", "approval": ["write_file"]}, "every": {"url": "http://c", "approval": true}}}"#,
        )
        .expect("valid");
        let shown: Vec<String> = marked.iter().map(|server| format!("{server:?}")).collect();
        assert!(
            shown[0].contains("needs_approval: Some(None)"),
            "{}",
            shown[0]
        );
        assert!(
            shown[1].contains(r#"needs_approval: Some(Some({"write_file"}))"#),
            "{}",
            shown[1]
        );
    }

    #[test]
    fn a_command_tool_may_need_approval() {
        let tools = manifest(
            r#"[{"name": "rm", "description": "", "command": ["true"], "approval": true},
                {"name": "ls", "description": "", "command": ["true"]}]"#,
        )
        .expect("valid manifest");
        let marked: Vec<bool> = tools.iter().map(Tool::needs_approval).collect();
        assert_eq!(marked, [true, false]);
    }
}
