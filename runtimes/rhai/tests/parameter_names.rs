//! A tool's parameter named like a Rhai keyword or reserved word, or not an
//! identifier at all, is shown as a string key of the arguments' map, which
//! Rhai parses and which reaches the tool under the schema's name.

use std::sync::Arc;

use codeact_rhai::{KEYWORDS, RhaiRuntime, SPELLING};
use codeact_runtime::{Limits, Runtime, ToolDispatch, ToolError, ToolSpec, Written};
use serde_json::{Value, json};

/// One tool per name, `t0`, `t1`, …, each with that one required parameter;
/// a call returns its arguments as the tool received them.
struct Echo(Vec<ToolSpec>);

impl Echo {
    fn new(names: &[&str]) -> Self {
        Self(
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
        )
    }
}

impl ToolDispatch for Echo {
    fn specs(&self) -> &[ToolSpec] {
        &self.0
    }

    fn call(&self, _name: &str, args: Value) -> Result<Value, ToolError> {
        Ok(args)
    }
}

/// Names that are no identifier in Rhai.
const NOT_IDENTIFIERS: &[&str] = &["max-results", "2fa", "_1", "__", "a b", "é"];

#[test]
fn every_rhai_keyword_as_a_parameter_is_shown_as_a_string_key_that_parses_and_reaches_the_tool() {
    let runtime = RhaiRuntime::new(Limits::default());
    let names: Vec<&str> = KEYWORDS.iter().chain(NOT_IDENTIFIERS).copied().collect();
    let tools = Arc::new(Echo::new(&names));
    let mut session = runtime.new_session(tools.clone()).expect("starts");
    let engine = rhai::Engine::new();
    for (i, name) in names.iter().enumerate() {
        let signature = runtime.tool_signature(&tools.0[i]);
        let key = serde_json::to_string(name).expect("a JSON string");
        assert_eq!(signature, format!("t{i}(#{{{key}: int}})"), "{name}");
        // As shown, with a value where the type is: valid Rhai.
        let call = format!("t{i}(#{{{key}: {i}}})");
        engine
            .compile(&call)
            .unwrap_or_else(|e| panic!("{call} does not parse: {e}"));
        let got = session.run(&call).expect("runs").completion;
        assert_eq!(got, Ok(json!({*name: i})), "{call}");
        // Positionally, through the wrapper that names the argument.
        let positional = format!("t{i}({i})");
        let got = session.run(&positional).expect("runs").completion;
        assert_eq!(got, Ok(json!({*name: i})), "{positional}");
    }
}

/// The keyword list holds every word Rhai refuses as a bare map key, among the
/// keywords and reserved words of the languages scripts are written in.
#[test]
fn every_word_rhai_refuses_as_a_bare_key_is_in_the_keyword_list() {
    #[rustfmt::skip]
    const CANDIDATES: &[&str] = &[
        "False", "None", "True", "and", "as", "assert", "async", "await", "break", "call",
        "case", "catch", "class", "const", "continue", "curry", "debug", "debugger", "def",
        "default", "del", "delete", "do", "elif", "else", "enum", "eval", "except", "exit",
        "export", "extends", "false", "finally", "fn", "Fn", "for", "from", "function", "global",
        "go", "goto", "if", "implements", "import", "in", "instanceof", "interface", "is",
        "is_def_fn", "is_def_var", "is_shared", "lambda", "let", "loop", "match", "module",
        "new", "nil", "nonlocal", "not", "null", "of", "or", "package", "pass", "print",
        "private", "protected", "public", "raise", "return", "shared", "spawn", "static",
        "super", "switch", "sync", "this", "thread", "throw", "true", "try", "type", "type_of",
        "typeof", "until", "use", "var", "void", "while", "with", "yield",
    ];
    let engine = rhai::Engine::new();
    for word in CANDIDATES {
        let bare = format!("#{{{word}: 1}}");
        if engine.compile(&bare).is_err() {
            assert!(KEYWORDS.contains(word), "{word} is refused as a bare key");
        }
        let expected = if KEYWORDS.contains(word) {
            Written::Quoted
        } else {
            Written::AsIs
        };
        assert_eq!(SPELLING.write(word), expected, "{word}");
    }
}

#[test]
fn a_plain_parameter_name_is_shown_as_it_is() {
    let runtime = RhaiRuntime::new(Limits::default());
    let tools = Echo::new(&["city"]);
    assert_eq!(runtime.tool_signature(&tools.0[0]), "t0(#{city: int})");
}
