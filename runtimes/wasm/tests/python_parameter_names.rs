//! A tool's parameter named like a Python keyword (`from`), or not an identifier
//! at all (`max-results`), is shown in the spelling Python programmers use
//! (`from_`, `max_results`); the signature parses as Python, and a call written
//! as shown reaches the tool under the schema's name (the real guests, fetched by
//! scripts/fetch-guests.sh).

use std::sync::Arc;

use codeact_runtime::{Limits, Runtime, Session, ToolDispatch, ToolError, ToolSpec};
use codeact_wasm::{PYTHON_KEYWORDS, PYTHON_SPELLING, WasmRuntime};
use serde_json::{Value, json};

/// Names that are no identifier in Python, with their spelling.
const NOT_IDENTIFIERS: &[(&str, &str)] = &[
    ("max-results", "max_results"),
    ("2fa", "_2fa"),
    ("a b", "a_b"),
    ("é", "_"),
];

/// One tool per name, each with that one required parameter, and `convert`; a
/// call is checked as a toolbox checks it, then returns its arguments as the
/// tool received them.
struct Echo(Vec<ToolSpec>);

impl ToolDispatch for Echo {
    fn specs(&self) -> &[ToolSpec] {
        &self.0
    }

    fn call(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        let spec = self.0.iter().find(|spec| spec.name == name).expect("known");
        spec.check_argument_names(&args, &PYTHON_SPELLING)?;
        Ok(args)
    }
}

fn names() -> Vec<(&'static str, String)> {
    PYTHON_KEYWORDS
        .iter()
        .map(|keyword| (*keyword, format!("{keyword}_")))
        .chain(NOT_IDENTIFIERS.iter().map(|(n, s)| (*n, s.to_string())))
        .collect()
}

fn tools() -> Arc<Echo> {
    let mut specs: Vec<ToolSpec> = names()
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            ToolSpec::new(format!("t{i}"), "").with_parameters(json!({
                "type": "object",
                "properties": {*name: {"type": "integer"}},
                "required": [name],
            }))
        })
        .collect();
    specs.push(
        ToolSpec::new("convert", "Converts an amount.").with_parameters(json!({
            "type": "object",
            "properties": {
                "amount": {"type": "number"},
                "from": {"type": "string"},
                "to": {"type": "string"},
            },
            "required": ["amount", "from", "to"],
        })),
    );
    Arc::new(Echo(specs))
}

fn value_of(session: &mut dyn Session, script: &str) -> Value {
    let completion = session.run(script).expect("the run finishes").completion;
    completion.unwrap_or_else(|e| panic!("{script}: {e}"))["value"].clone()
}

fn every_keyword_reaches_the_tool(guest: &str) {
    let runtime = WasmRuntime::by_name(guest, Limits::default()).expect("the guest loads");
    let tools = tools();
    let mut session = runtime
        .new_session(tools.clone())
        .expect("the session starts");
    for (i, (name, spelled)) in names().iter().enumerate() {
        let signature = runtime.tool_signature(&tools.0[i]);
        assert_eq!(signature, format!("t{i}({spelled}=integer)"), "{name}");
        let parsed = value_of(
            &mut *session,
            &format!("compile({signature:?}, 'signature', 'eval')\nfinal_result(1)"),
        );
        assert_eq!(parsed, json!(1), "{signature}");
        let call = format!("final_result(t{i}({spelled}={i}))");
        assert_eq!(value_of(&mut *session, &call), json!({*name: i}), "{call}");
        let positional = format!("final_result(t{i}({i}))");
        assert_eq!(value_of(&mut *session, &positional), json!({*name: i}));
    }
}

#[test]
fn every_python_keyword_as_a_parameter_is_written_with_an_underscore_and_reaches_the_tool() {
    every_keyword_reaches_the_tool("wasm:python");
}

#[test]
fn micropython_writes_and_maps_keyword_parameters_as_cpython_does() {
    every_keyword_reaches_the_tool("wasm:micropython");
}

#[test]
fn a_call_with_a_wrong_name_fails_in_the_script_naming_the_wrong_and_the_expected_names() {
    let runtime = WasmRuntime::by_name("wasm:python", Limits::default()).expect("loads");
    let tools = tools();
    assert_eq!(
        runtime.tool_signature(tools.0.last().expect("convert")),
        "convert(amount=number, from_=string, to=string)"
    );
    let mut session = runtime.new_session(tools).expect("starts");
    let caught = value_of(
        &mut *session,
        "try:\n    convert(amount=50, from_='EUR', to_='USD')\nexcept ToolError as e:\n    final_result(str(e))",
    );
    assert_eq!(
        caught,
        json!(
            "tool 'convert' failed: unknown argument `to_`; missing required `to`; the parameters are amount, from (written from_), to"
        )
    );
    let right = value_of(
        &mut *session,
        "final_result(convert(amount=50, from_='EUR', to='USD'))",
    );
    assert_eq!(right, json!({"amount": 50, "from": "EUR", "to": "USD"}));
}
