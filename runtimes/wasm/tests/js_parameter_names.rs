//! The JavaScript guests (QuickJS, Boa) take a tool's parameter named like a
//! JavaScript keyword as it is, and one that is no identifier as a string key,
//! as their signatures show them (the real guests, fetched or built by
//! scripts/fetch-guests.sh).

use std::sync::Arc;

use codeact_runtime::{Limits, Runtime, ToolDispatch, ToolError, ToolSpec};
use codeact_wasm::WasmRuntime;
use serde_json::{Value, json};

/// JavaScript's reserved words, its strict-mode and contextual keywords, and
/// the global names scripts cannot rebind.
#[rustfmt::skip]
const JS_KEYWORDS: &[&str] = &[
    "await", "break", "case", "catch", "class", "const", "continue", "debugger", "default",
    "delete", "do", "else", "enum", "export", "extends", "false", "finally", "for", "function",
    "if", "import", "in", "instanceof", "new", "null", "return", "super", "switch", "this",
    "throw", "true", "try", "typeof", "var", "void", "while", "with", "yield", "let", "static",
    "implements", "interface", "package", "private", "protected", "public", "async", "of",
    "get", "set", "as", "from", "target", "meta", "arguments", "eval", "undefined", "NaN",
    "Infinity",
];

/// Names that are no identifier in JavaScript.
const NOT_IDENTIFIERS: &[&str] = &["max-results", "2fa", "a b"];

/// One tool per name, each with that one required parameter; a call returns its
/// arguments as the tool received them.
struct Echo(Vec<ToolSpec>);

impl ToolDispatch for Echo {
    fn specs(&self) -> &[ToolSpec] {
        &self.0
    }

    fn call(&self, _name: &str, args: Value) -> Result<Value, ToolError> {
        Ok(args)
    }
}

fn every_keyword_reaches_the_tool(guest: &str) {
    let names: Vec<&str> = JS_KEYWORDS.iter().chain(NOT_IDENTIFIERS).copied().collect();
    let tools = Arc::new(Echo(
        names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                ToolSpec::new(format!("t{i}"), "").with_parameters(json!({
                    "type": "object",
                    "properties": {*name: {"type": "integer"}},
                    "required": [name],
                }))
            })
            .collect(),
    ));
    let runtime = WasmRuntime::by_name(guest, Limits::default()).expect("the guest loads");
    let mut session = runtime
        .new_session(tools.clone())
        .expect("the session starts");
    for (i, name) in names.iter().enumerate() {
        let signature = runtime.tool_signature(&tools.0[i]);
        let key = if JS_KEYWORDS.contains(name) {
            name.to_string()
        } else {
            serde_json::to_string(name).expect("a JSON string")
        };
        assert_eq!(
            signature,
            format!("tools.t{i}({{{key}: integer}})"),
            "{name}"
        );
        let call = format!("final_result(tools.t{i}({{{key}: {i}}}))");
        let got = session.run(&call).expect("runs").completion;
        let got = got.unwrap_or_else(|e| panic!("{call}: {e}"));
        assert_eq!(got["value"], json!({*name: i}), "{call}");
    }
}

#[test]
fn quickjs_takes_every_keyword_parameter_as_its_signature_shows_it() {
    every_keyword_reaches_the_tool("wasm:js");
}

#[test]
fn the_boa_guest_takes_every_keyword_parameter_as_its_signature_shows_it() {
    every_keyword_reaches_the_tool("wasm:boa");
}
