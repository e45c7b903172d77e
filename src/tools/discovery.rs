//! Tool discovery from inside code: a catalog too large for the prompt (hundreds of
//! MCP tools) is not pasted there. The prompt lists two tools instead,
//! `search_tools(query, limit)` and `describe_tool(name)`, with a summary of the
//! catalog's families (`github_` 120 tools, …); a script searches, reads a
//! signature, and calls the tool it found by name, as any other.
//!
//! Search ranks with BM25 (the `bm25` crate: English stemming and stop words) over
//! each tool's name, split at `_`, and description; ties go by name, so the same
//! query always gives the same list. The summary is rendered in name order: the
//! prompt is the same text on every run, so providers' prompt caches hit.

use std::collections::BTreeMap;
use std::sync::Arc;

use bm25::{Document, Language, SearchEngine, SearchEngineBuilder};
use codeact_runtime::{Runtime, ToolError, ToolSpec};
use serde_json::{Value, json};

use crate::tools::toolbox::Tool;

/// The longest query `search_tools` reads, in characters; the rest is ignored.
const MAX_QUERY_CHARS: usize = 1_000;

/// The name of the search tool scripts get when a catalog is searched.
pub const SEARCH_TOOLS: &str = "search_tools";
/// The name of the tool that shows one tool's full signature and schemas.
pub const DESCRIBE_TOOL: &str = "describe_tool";

/// When a catalog is searched rather than listed in the prompt: past either limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolDiscovery {
    /// The most tools the prompt lists. Default: 40.
    pub max_listed_tools: usize,
    /// The most bytes of signatures and descriptions the prompt lists. Default:
    /// 12,000 (about 3,000 tokens).
    pub max_listed_bytes: usize,
}

impl Default for ToolDiscovery {
    fn default() -> Self {
        Self {
            max_listed_tools: 40,
            max_listed_bytes: 12_000,
        }
    }
}

impl ToolDiscovery {
    /// Never search: every tool is listed, however many.
    pub fn off() -> Self {
        Self {
            max_listed_tools: usize::MAX,
            max_listed_bytes: usize::MAX,
        }
    }

    /// Whether `specs`, with their signatures in `runtime`'s language, are too many
    /// or too long to list.
    pub fn applies(&self, specs: &[ToolSpec], runtime: &dyn Runtime) -> bool {
        if specs.len() > self.max_listed_tools {
            return true;
        }
        let bytes: usize = specs
            .iter()
            .map(|spec| runtime.tool_signature(spec).len() + spec.description.len())
            .sum();
        bytes > self.max_listed_bytes
    }
}

/// A tool as search shows it.
struct Entry {
    spec: ToolSpec,
    signature: String,
}

/// The searchable catalog behind the two discovery tools.
struct Catalog {
    entries: BTreeMap<String, Entry>,
    engine: SearchEngine<String>,
}

impl Catalog {
    fn new(specs: &[ToolSpec], runtime: &dyn Runtime) -> Self {
        let entries: BTreeMap<String, Entry> = specs
            .iter()
            .map(|spec| {
                let entry = Entry {
                    spec: spec.clone(),
                    signature: runtime.tool_signature(spec),
                };
                (spec.name.clone(), entry)
            })
            .collect();
        let documents: Vec<Document<String>> = entries
            .values()
            .map(|entry| {
                let words = entry.spec.name.replace('_', " ");
                Document::new(
                    entry.spec.name.clone(),
                    format!("{words} {words} {}", entry.spec.description),
                )
            })
            .collect();
        let engine =
            SearchEngineBuilder::<String>::with_documents(Language::English, documents).build();
        Self { entries, engine }
    }

    /// Up to `limit` tools for `query`, best first, ties by name.
    fn search(&self, query: &str, limit: usize) -> Vec<&Entry> {
        let mut found: Vec<(f32, &Entry)> = self
            .engine
            .search(query, self.entries.len())
            .into_iter()
            .filter_map(|result| {
                let entry = self.entries.get(&result.document.id)?;
                Some((result.score, entry))
            })
            .collect();
        found.sort_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then_with(|| a.1.spec.name.cmp(&b.1.spec.name))
        });
        found
            .into_iter()
            .take(limit)
            .map(|(_, entry)| entry)
            .collect()
    }

    /// Families of tools, with counts, in name order: a namespace's tools as
    /// `github.… (120)`, other tools by their prefix up to the first `_` as
    /// `files_… (14)`.
    fn families(&self) -> String {
        let mut families: BTreeMap<(&str, char), usize> = BTreeMap::new();
        for entry in self.entries.values() {
            let name = entry.spec.name.as_str();
            let family = match entry.spec.namespaced() {
                Some((namespace, _)) => (namespace, '.'),
                None => (name.split_once('_').map_or(name, |(prefix, _)| prefix), '_'),
            };
            *families.entry(family).or_default() += 1;
        }
        families
            .iter()
            .map(|((family, separator), count)| {
                if *count == 1 && self.entries.contains_key(*family) {
                    (*family).to_string()
                } else {
                    format!("{family}{separator}… ({count})")
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The first line of a description, at most 200 characters.
fn summary(description: &str) -> String {
    let line = description.lines().next().unwrap_or_default().trim();
    match line.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}

/// The two tools that stand for `specs` in the prompt: `search_tools` (whose
/// description summarises the catalog) and `describe_tool`. The catalog's own
/// tools stay callable by name; only the prompt leaves them out.
pub fn discovery_tools(specs: &[ToolSpec], runtime: &dyn Runtime) -> [Tool; 2] {
    let catalog = Arc::new(Catalog::new(specs, runtime));
    let search_description = format!(
        "Finds tools by what they do, among the {} tools of this session that are not listed here: returns up to `limit` (default 10) of them as {{name, signature, description}}, best match first. Families: {}. Call a tool you found directly by its name, like any other.",
        catalog.entries.len(),
        catalog.families()
    );
    let searcher = Arc::clone(&catalog);
    let search = Tool::from_fn(SEARCH_TOOLS, search_description, move |args: Value| {
        let query = args
            .get("query")
            .and_then(Value::as_str)
            .ok_or_else(|| ToolError::new("search_tools needs a query (a string)"))?;
        // A query is a few words; a longer one is cut (a script could pass
        // megabytes for the host to tokenize).
        let query: String = query.chars().take(MAX_QUERY_CHARS).collect();
        let query = query.as_str();
        let limit = args
            .get("limit")
            .and_then(Value::as_u64)
            .map_or(10, |limit| limit.clamp(1, 50) as usize);
        let found: Vec<Value> = searcher
            .search(query, limit)
            .into_iter()
            .map(|entry| {
                json!({
                    "name": entry.spec.name,
                    "signature": entry.signature,
                    "description": summary(&entry.spec.description),
                })
            })
            .collect();
        Ok(Value::Array(found))
    })
    .with_parameters(json!({
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["query"],
    }));
    let describer = catalog;
    let describe = Tool::from_fn(
        DESCRIBE_TOOL,
        "The full signature, description and JSON Schemas (parameters, returns) of one tool, by name.",
        move |args: Value| {
            let name = args
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| ToolError::new("describe_tool needs a name (a string)"))?;
            // `github.create_issue`, as the signature shows it, names `github_create_issue`.
            let name = name.replacen('.', "_", 1);
            let name = name.as_str();
            match describer.entries.get(name) {
                Some(entry) => Ok(json!({
                    "name": entry.spec.name,
                    "signature": entry.signature,
                    "description": entry.spec.description,
                    "parameters": entry.spec.parameters,
                    "returns": entry.spec.returns,
                })),
                None => {
                    let near: Vec<&str> = describer
                        .search(&name.replace('_', " "), 5)
                        .into_iter()
                        .map(|entry| entry.spec.name.as_str())
                        .collect();
                    Err(ToolError::new(if near.is_empty() {
                        format!("no tool '{name}'; find one with search_tools(query)")
                    } else {
                        format!("no tool '{name}'; similar: {}", near.join(", "))
                    }))
                }
            }
        },
    )
    .with_parameters(json!({
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
    }));
    [search, describe]
}

#[cfg(test)]
mod tests {
    use super::*;
    use codeact_rhai::RhaiRuntime;
    use codeact_runtime::{Limits, ToolDispatch};

    use crate::tools::toolbox::ToolBox;

    fn catalog() -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = (0..300)
            .map(|i| {
                ToolSpec::new(
                    format!("filler_tool_{i:03}"),
                    format!("Does filler task number {i}."),
                )
            })
            .collect();
        specs.push(
            ToolSpec::new("github_create_issue", "Opens an issue in a repository.")
                .with_parameters(
                    json!({"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}),
                )
                .in_namespace("github"),
        );
        specs.push(
            ToolSpec::new(
                "github_list_issues",
                "Lists the open issues of a repository.",
            )
            .in_namespace("github"),
        );
        specs.push(ToolSpec::new(
            "weather_forecast",
            "The weather forecast for a city.",
        ));
        specs
    }

    #[test]
    fn a_large_catalog_is_searched_and_a_small_one_listed() {
        let runtime = RhaiRuntime::new(Limits::default());
        let discovery = ToolDiscovery::default();
        assert!(discovery.applies(&catalog(), &runtime));
        assert!(!discovery.applies(&catalog()[..5], &runtime));
        let long = vec![ToolSpec::new("one", "x".repeat(20_000))];
        assert!(discovery.applies(&long, &runtime), "by size too");
        assert!(!ToolDiscovery::off().applies(&catalog(), &runtime));
    }

    #[test]
    fn search_ranks_by_name_and_description_and_is_stable() {
        let runtime = RhaiRuntime::new(Limits::default());
        let [search, describe] = discovery_tools(&catalog(), &runtime);
        let toolbox = ToolBox::new([search, describe]).expect("valid");
        let found = toolbox
            .call(
                SEARCH_TOOLS,
                json!({"query": "open an issue on github", "limit": 2}),
            )
            .expect("found");
        assert_eq!(found[0]["name"], "github_create_issue", "{found}");
        assert_eq!(
            found[0]["signature"],
            "github.create_issue(#{title: string})"
        );
        assert_eq!(found.as_array().map(Vec::len), Some(2));
        let again = toolbox
            .call(
                SEARCH_TOOLS,
                json!({"query": "open an issue on github", "limit": 2}),
            )
            .expect("found");
        assert_eq!(found, again);
        let weather = toolbox
            .call(SEARCH_TOOLS, json!({"query": "forecast"}))
            .expect("found");
        assert_eq!(weather[0]["name"], "weather_forecast");
        assert!(toolbox.call(SEARCH_TOOLS, json!({})).is_err());
        let long = format!("forecast {}", "x".repeat(10_000_000));
        let found = toolbox
            .call(SEARCH_TOOLS, json!({"query": long}))
            .expect("a long query is cut, not refused");
        assert_eq!(found[0]["name"], "weather_forecast");
    }

    #[test]
    fn describe_gives_the_schema_or_names_similar_tools() {
        let runtime = RhaiRuntime::new(Limits::default());
        let [search, describe] = discovery_tools(&catalog(), &runtime);
        let toolbox = ToolBox::new([search, describe]).expect("valid");
        let issue = toolbox
            .call(DESCRIBE_TOOL, json!({"name": "github_create_issue"}))
            .expect("described");
        assert_eq!(issue["parameters"]["required"], json!(["title"]));
        let dotted = toolbox
            .call(DESCRIBE_TOOL, json!({"name": "github.create_issue"}))
            .expect("described by the name its signature shows");
        assert_eq!(dotted, issue);
        let err = toolbox
            .call(DESCRIBE_TOOL, json!({"name": "github_create_issues"}))
            .expect_err("no such tool");
        assert!(err.message.contains("similar: github_"), "{}", err.message);
    }

    #[test]
    fn the_summary_lists_families_in_name_order() {
        let runtime = RhaiRuntime::new(Limits::default());
        let [search, _] = discovery_tools(&catalog(), &runtime);
        assert!(
            search
                .spec()
                .description
                .contains("Families: filler_… (300), github.… (2), weather_… (1)."),
            "{}",
            search.spec().description
        );
    }
}
