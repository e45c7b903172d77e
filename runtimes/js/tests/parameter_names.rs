//! A tool's parameter named like a JavaScript keyword is shown as it is (an
//! object literal's key may be any identifier name), and one that is no
//! identifier as a string key: both parse, and reach the tool under the
//! schema's name.

use std::sync::Arc;

use codeact_js::JsRuntime;
use codeact_runtime::{Limits, Runtime, ToolDispatch, ToolError, ToolSpec};
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
const NOT_IDENTIFIERS: &[&str] = &["max-results", "2fa", "a b", "é", "x\"y"];

/// One tool per name, `t0`, `t1`, …, each with that one required parameter;
/// a call returns its arguments as the tool received them.
struct Echo(Vec<ToolSpec>);

impl ToolDispatch for Echo {
    fn specs(&self) -> &[ToolSpec] {
        &self.0
    }

    fn call(&self, _name: &str, args: Value) -> Result<Value, ToolError> {
        Ok(args)
    }
}

#[test]
fn every_javascript_keyword_as_a_parameter_is_shown_so_that_the_call_parses_and_reaches_the_tool() {
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
    let runtime = JsRuntime::in_process(Limits::default());
    let mut session = runtime.new_session(tools.clone()).expect("starts");
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
        // The signature itself parses (in a function never called).
        let parsed = session
            .run(&format!("(function () {{ return {signature}; }}, 1)"))
            .expect("runs")
            .completion;
        assert_eq!(parsed, Ok(json!(1)), "{signature}");
        let call = format!("tools.t{i}({{{key}: {i}}})");
        let got = session.run(&call).expect("runs").completion;
        assert_eq!(got, Ok(json!({*name: i})), "{call}");
    }
}
