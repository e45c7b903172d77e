//! Each tool as a Rhai function, so `list_orders(#{customer: "ada"})` and
//! `list_orders("ada")` work as well as `call_tool("list_orders", …)`. Models reach
//! for a plain function call first; a small one never recovered from "Function
//! not found: list_orders" here.
//!
//! The wrappers are script functions compiled once per session, on its first run:
//! `name()` sends `#{}`, `name(map)` sends the map, and `name(a, b, …)` sends the
//! arguments positionally under the schema's property names, in schema order (up to
//! [`MAX_POSITIONAL`]). A function the script defines with the same name and arity
//! replaces the wrapper. Tools named like a codeact helper get no wrapper.
//!
//! An MCP server's tools are also methods of a constant named after the server,
//! a map of function pointers to the wrappers: `github.create_issue(#{…})` calls
//! `github_create_issue`, as in JavaScript and Python.

use std::fmt::Write as _;

use codeact_runtime::{ToolSpec, is_identifier};
use rhai::{Dynamic, FnPtr, Map, Scope};

/// Positional arguments a wrapper accepts at most.
const MAX_POSITIONAL: usize = 8;

/// Names a wrapper must never shadow.
const RESERVED: &[&str] = &[
    "observation",
    "final_result",
    "error",
    "transfer_to_agent",
    "call_tool",
    "print",
    "debug",
    "type_of",
];

/// The Rhai source of the wrappers for `tools`, and how many functions it defines.
pub(crate) fn wrapper_source(tools: &[ToolSpec]) -> (String, usize) {
    let mut source = String::new();
    let mut count = 0;
    for tool in tools {
        let name = tool.name.as_str();
        if !is_identifier(name) || RESERVED.contains(&name) {
            continue;
        }
        let properties: Vec<String> = tool.argument_names().into_iter().map(|(p, _)| p).collect();
        let _ = writeln!(source, "fn {name}() {{ call_tool(\"{name}\", #{{}}) }}");
        match properties.first() {
            Some(first) => {
                let _ = writeln!(
                    source,
                    "fn {name}(a1) {{ if type_of(a1) == \"map\" {{ call_tool(\"{name}\", a1) }} else {{ call_tool(\"{name}\", #{{{}: a1}}) }} }}",
                    key(first)
                );
            }
            None => {
                let _ = writeln!(source, "fn {name}(a1) {{ call_tool(\"{name}\", a1) }}");
            }
        }
        count += 2;
        for arity in 2..=properties.len().min(MAX_POSITIONAL) {
            let params: Vec<String> = (1..=arity).map(|i| format!("a{i}")).collect();
            let fields: Vec<String> = properties[..arity]
                .iter()
                .zip(&params)
                .map(|(property, param)| format!("{}: {param}", key(property)))
                .collect();
            let _ = writeln!(
                source,
                "fn {name}({}) {{ call_tool(\"{name}\", #{{{}}}) }}",
                params.join(", "),
                fields.join(", ")
            );
            count += 1;
        }
    }
    (source, count)
}

/// The namespace objects of `tools` (see [`codeact_runtime::namespaces`]): each
/// a map from member to a function pointer at the tool's wrapper, without the
/// members Rhai would take for a map method ([`codeact_runtime::rhai_member`]).
pub(crate) fn namespace_objects(tools: &[ToolSpec]) -> Vec<(String, Dynamic)> {
    codeact_runtime::namespaces(tools)
        .into_iter()
        .filter_map(|(namespace, members)| {
            let map: Map = members
                .into_iter()
                .filter(|(member, _)| codeact_runtime::rhai_member(member))
                .filter_map(|(member, tool)| {
                    let pointer = FnPtr::new(tool).ok()?;
                    Some((member.into(), Dynamic::from(pointer)))
                })
                .collect();
            (!map.is_empty()).then(|| (namespace, Dynamic::from_map(map)))
        })
        .collect()
}

/// Whether the variable `name` that a script sees in `scope` is `object`: a
/// constant map pointing at the same functions.
pub(crate) fn is_namespace_object(scope: &Scope, name: &str, object: &Dynamic) -> bool {
    if scope.is_constant(name) != Some(true) {
        return false;
    }
    let (Some(seen), Some(made)) = (
        scope.get(name).and_then(|value| value.read_lock::<Map>()),
        object.read_lock::<Map>(),
    ) else {
        return false;
    };
    seen.len() == made.len()
        && made.iter().all(|(member, pointer)| {
            // A curried pointer calls the same function with other arguments.
            let target = |value: &Dynamic| {
                value
                    .read_lock::<FnPtr>()
                    .filter(|pointer| pointer.curry().is_empty())
                    .map(|pointer| pointer.fn_name().to_string())
            };
            seen.get(member).and_then(target) == target(pointer)
        })
}

/// A map-literal key: bare where Rhai takes it so ([`crate::SPELLING`]), as a
/// string otherwise (a keyword, a reserved word, a name that is no identifier).
fn key(property: &str) -> String {
    if crate::SPELLING.write(property) == codeact_runtime::Written::AsIs {
        property.to_string()
    } else {
        serde_json::to_string(property).unwrap_or_else(|_| "\"\"".into())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn wrappers_cover_no_arguments_a_map_and_positional_arguments() {
        let tool = ToolSpec::new("add", "").with_parameters(json!({
            "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}
        }));
        let (source, count) = wrapper_source(&[tool]);
        assert_eq!(count, 3);
        assert!(source.contains("fn add() { call_tool(\"add\", #{}) }"));
        assert!(source.contains("fn add(a1, a2) { call_tool(\"add\", #{a: a1, b: a2}) }"));
    }

    #[test]
    fn helpers_and_odd_names_get_no_wrapper_and_odd_keys_are_quoted() {
        let tools = [
            ToolSpec::new("final_result", ""),
            ToolSpec::new("my-tool", ""),
            ToolSpec::new("get", "").with_parameters(json!({"properties": {"the key": {}}})),
        ];
        let (source, count) = wrapper_source(&tools);
        assert_eq!(count, 2);
        assert!(source.contains("#{\"the key\": a1}"), "{source}");
    }
}
