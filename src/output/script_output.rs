//! The `ScriptOutput` wire contract, and the one place a completion value is decoded.

use std::fmt;

use codeact_runtime::ScriptError;
use codeact_runtime::text::shorten;
use minijinja::context;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::prompts::Prompts;

/// What a script's completion value means to the host.
///
/// The wire shape is exact: internally tagged on `type`, snake_case:
///
/// ```
/// use codeact::ScriptOutput;
/// use serde_json::json;
///
/// let output = ScriptOutput::decode(json!({"type": "final_result", "value": 42}));
/// assert_eq!(output, ScriptOutput::final_result(json!(42)));
/// assert_eq!(output.to_string(), r#"{"type":"final_result","value":42}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ScriptOutput {
    /// Fed back to the model; the run goes on.
    Observation {
        /// Any JSON value.
        value: Value,
    },
    /// Fed back to the model; the run goes on.
    Error {
        /// What went wrong, verbatim from the engine where it came from one.
        message: String,
    },
    /// Ends the run with this answer, once it passes the output spec's checks.
    FinalResult {
        /// Any JSON value.
        value: Value,
        /// Files the answer points to, relative to the run's working directory;
        /// a path that escapes it gets the result refused. Optional on the wire
        /// (`"artifacts": ["out/report.md"]`), absent when empty.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        artifacts: Vec<String>,
    },
    /// Ends this agent's turn, handing control to the named agent.
    TransferToAgent {
        /// The agent to hand over to.
        agent_name: String,
    },
}

/// A completion value that [`ScriptOutput::read`] could not read as an output.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum NotAnOutput {
    /// Not tagged: a bare number, a string, a list, a map without `type`, or null
    /// (no value at all). A host may show it to the model as it is.
    Untagged {
        /// The value as the script left it.
        value: Value,
    },
    /// A map with a `type` that is not one of the four, or without the fields its
    /// type needs.
    Malformed(Malformed),
}

/// What is wrong with a tagged map, said twice: whole, for the contract
/// ([`ScriptOutput::decode`]'s error), and split, for a prompt, into the host's
/// words and the part of the script's value they are about, which a prompt may
/// show only fenced.
#[derive(Debug, Clone, PartialEq)]
pub struct Malformed {
    /// The contract's message, quoting the script's value where it helps.
    pub message: String,
    /// The same in the host's words alone: it quotes nothing the script wrote.
    pub problem: String,
    /// What of the script's value `problem` is about (a `type` nobody defined),
    /// or none.
    pub quoted: Option<String>,
}

/// How much of a wrong value an error message quotes.
const PREVIEW_CHARS: usize = 200;

impl ScriptOutput {
    /// A final result without artifacts.
    pub fn final_result(value: Value) -> ScriptOutput {
        ScriptOutput::FinalResult {
            value,
            artifacts: Vec::new(),
        }
    }

    /// Decodes a completion value. Never fails: a value that is not a `ScriptOutput`
    /// becomes an [`ScriptOutput::Error`] saying what was returned and what to return
    /// instead. Fields other than the variant's own are ignored.
    pub fn decode(value: Value) -> ScriptOutput {
        match ScriptOutput::read(value) {
            Ok(output) => output,
            Err(NotAnOutput::Untagged { value }) => not_an_output(&value),
            Err(NotAnOutput::Malformed(malformed)) => ScriptOutput::Error {
                message: malformed.message,
            },
        }
    }

    /// Decodes a completion value that is tagged (a map with a `type`). Any other
    /// value comes back as it was, for a host that shows it, and a tagged map
    /// that is not an output comes back as what is wrong with it (see
    /// [`decode`](Self::decode) for the errors the contract makes of both).
    pub fn read(value: Value) -> Result<ScriptOutput, NotAnOutput> {
        let Value::Object(mut map) = value else {
            return Err(NotAnOutput::Untagged { value });
        };
        let kind = match map.get("type") {
            Some(Value::String(kind)) => kind.clone(),
            _ => {
                return Err(NotAnOutput::Untagged {
                    value: Value::Object(map),
                });
            }
        };
        Ok(match kind.as_str() {
            "observation" => match map.remove("value") {
                Some(value) => ScriptOutput::Observation { value },
                None => return Err(missing_field("observation", "value")),
            },
            "final_result" => match (map.remove("value"), map.remove("artifacts")) {
                (None, _) => return Err(missing_field("final_result", "value")),
                (Some(value), None | Some(Value::Null)) => ScriptOutput::FinalResult {
                    value,
                    artifacts: Vec::new(),
                },
                (Some(value), Some(artifacts)) => match artifact_list(artifacts) {
                    Some(artifacts) => ScriptOutput::FinalResult { value, artifacts },
                    None => return Err(malformed("decode/bad_artifacts", context! {})),
                },
            },
            "error" => match map.remove("message") {
                Some(Value::String(message)) => ScriptOutput::Error { message },
                Some(other) => ScriptOutput::Error {
                    message: other.to_string(),
                },
                None => return Err(missing_field("error", "message")),
            },
            "transfer_to_agent" => match map.remove("agent_name") {
                Some(Value::String(name)) if !name.trim().is_empty() => {
                    ScriptOutput::TransferToAgent { agent_name: name }
                }
                _ => return Err(malformed("decode/bad_transfer", context! {})),
            },
            other => {
                let quoted = format!("{:?}", preview(other));
                return Err(NotAnOutput::Malformed(Malformed {
                    message: decode_message(
                        "decode/unknown_type",
                        context! { quoted_type => &quoted },
                    ),
                    problem: decode_message(
                        "decode/unknown_type",
                        context! { quoted_type => None::<&str> },
                    ),
                    quoted: Some(quoted),
                }));
            }
        })
    }

    /// The output of one run: the decoded completion value, or the script's error.
    pub fn from_completion(completion: Result<Value, ScriptError>) -> ScriptOutput {
        match completion {
            Ok(value) => ScriptOutput::decode(value),
            Err(error) => ScriptOutput::Error {
                message: error.to_string(),
            },
        }
    }
}

impl fmt::Display for ScriptOutput {
    /// The wire JSON, on one line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&serde_json::to_string(self).map_err(|_| fmt::Error)?)
    }
}

/// The messages of a value that is not an output: fixed templates under
/// `prompts/decode/`, each ending with `decode/how_to_end` (how to end a script:
/// the helpers have the same names in every language). They are not an agent's
/// [`Prompts`] to replace: `codeact exec` and every host decode the same value to
/// the same message.
fn decode_message(name: &str, values: minijinja::Value) -> String {
    Prompts::render_builtin(name, values)
}

fn not_an_output(value: &Value) -> ScriptOutput {
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "map",
    };
    // Null has nothing to show: the sentence names what it was instead.
    let preview = match value {
        Value::Null => String::new(),
        other => preview(&other.to_string()),
    };
    ScriptOutput::Error {
        message: decode_message(
            "decode/not_an_output",
            context! { kind => kind, preview => preview },
        ),
    }
}

fn artifact_list(value: Value) -> Option<Vec<String>> {
    let Value::Array(items) = value else {
        return None;
    };
    items
        .into_iter()
        .map(|item| match item {
            Value::String(path) => Some(path),
            _ => None,
        })
        .collect()
}

/// A tagged map whose message quotes nothing of the script's: the host's words
/// whole.
fn malformed(name: &str, values: minijinja::Value) -> NotAnOutput {
    let message = decode_message(name, values);
    NotAnOutput::Malformed(Malformed {
        problem: message.clone(),
        message,
        quoted: None,
    })
}

fn missing_field(kind: &str, field: &str) -> NotAnOutput {
    malformed(
        "decode/missing_field",
        context! { kind => kind, field => field },
    )
}

fn preview(text: &str) -> String {
    shorten(text, PREVIEW_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(wire: Value, expected: ScriptOutput) {
        let decoded = ScriptOutput::decode(wire.clone());
        assert_eq!(decoded, expected);
        assert_eq!(serde_json::to_value(&decoded).expect("serializes"), wire);
        let parsed: ScriptOutput = serde_json::from_value(wire).expect("deserializes");
        assert_eq!(parsed, expected);
    }

    #[test]
    fn observation_round_trips_on_the_wire() {
        round_trip(
            json!({"type": "observation", "value": {"rows": [1, 2]}}),
            ScriptOutput::Observation {
                value: json!({"rows": [1, 2]}),
            },
        );
    }

    #[test]
    fn error_round_trips_on_the_wire() {
        round_trip(
            json!({"type": "error", "message": "no such file"}),
            ScriptOutput::Error {
                message: "no such file".into(),
            },
        );
    }

    #[test]
    fn final_result_round_trips_on_the_wire() {
        round_trip(
            json!({"type": "final_result", "value": "done"}),
            ScriptOutput::final_result(json!("done")),
        );
    }

    #[test]
    fn a_final_result_with_artifacts_round_trips_on_the_wire() {
        round_trip(
            json!({"type": "final_result", "value": "see the report", "artifacts": ["out/report.md"]}),
            ScriptOutput::FinalResult {
                value: json!("see the report"),
                artifacts: vec!["out/report.md".into()],
            },
        );
    }

    #[test]
    fn artifacts_that_are_not_path_strings_are_an_error() {
        for artifacts in [json!("out.md"), json!([1]), json!({"a": "b"})] {
            let output = ScriptOutput::decode(
                json!({"type": "final_result", "value": 1, "artifacts": artifacts}),
            );
            assert!(
                matches!(&output, ScriptOutput::Error { message } if message.contains("array of path strings")),
                "{output:?}"
            );
        }
    }

    #[test]
    fn transfer_round_trips_on_the_wire() {
        round_trip(
            json!({"type": "transfer_to_agent", "agent_name": "billing"}),
            ScriptOutput::TransferToAgent {
                agent_name: "billing".into(),
            },
        );
    }

    /// Found by fuzzing (cli/tests/fuzz/fuzz_targets/decode.rs): without serde_json's exact
    /// float parsing, `12e37` read back from the wire line as a different float.
    #[test]
    fn floats_survive_the_wire_line_exactly() {
        let wire: Value =
            serde_json::from_str(r#"{"type":"observation","value":[12e37, 0.1, 5e-324]}"#)
                .expect("valid JSON");
        let output = ScriptOutput::decode(wire);
        let back: Value = serde_json::from_str(&output.to_string()).expect("the wire line is JSON");
        assert_eq!(ScriptOutput::decode(back), output);
    }

    #[test]
    fn display_is_the_exact_wire_line() {
        let output = ScriptOutput::TransferToAgent {
            agent_name: "billing".into(),
        };
        assert_eq!(
            output.to_string(),
            r#"{"type":"transfer_to_agent","agent_name":"billing"}"#
        );
    }

    #[test]
    fn a_plain_value_becomes_an_error_saying_what_to_return() {
        let ScriptOutput::Error { message } = ScriptOutput::decode(json!(42)) else {
            panic!("a number is not an output");
        };
        assert!(message.contains("was 42, which is a number"), "{message}");
        assert!(message.contains("final_result(value)"), "{message}");
    }

    #[test]
    fn null_is_explained_as_a_missing_value() {
        let ScriptOutput::Error { message } = ScriptOutput::decode(Value::Null) else {
            panic!("null is not an output");
        };
        assert!(message.contains("no value"), "{message}");
    }

    #[test]
    fn a_map_with_an_unknown_type_is_an_error() {
        let output = ScriptOutput::decode(json!({"type": "answer", "value": 1}));
        assert!(
            matches!(output, ScriptOutput::Error { message } if message.contains("unknown type \"answer\""))
        );
    }

    #[test]
    fn a_result_missing_its_field_is_an_error() {
        let output = ScriptOutput::decode(json!({"type": "final_result"}));
        assert!(
            matches!(output, ScriptOutput::Error { message } if message.contains("\"value\" field"))
        );
    }

    #[test]
    fn a_transfer_without_a_name_is_an_error() {
        for wire in [
            json!({"type": "transfer_to_agent"}),
            json!({"type": "transfer_to_agent", "agent_name": "  "}),
            json!({"type": "transfer_to_agent", "agent_name": 7}),
        ] {
            assert!(matches!(
                ScriptOutput::decode(wire),
                ScriptOutput::Error { .. }
            ));
        }
    }

    #[test]
    fn an_error_with_a_non_string_message_keeps_its_json_text() {
        let output = ScriptOutput::decode(json!({"type": "error", "message": {"code": 7}}));
        assert_eq!(
            output,
            ScriptOutput::Error {
                message: r#"{"code":7}"#.into()
            }
        );
    }

    #[test]
    fn long_wrong_values_are_quoted_only_in_part() {
        let ScriptOutput::Error { message } = ScriptOutput::decode(json!("x".repeat(10_000)))
        else {
            panic!("a string is not an output");
        };
        assert!(message.len() < 1_000, "{} bytes", message.len());
    }

    #[test]
    fn a_script_error_becomes_an_error_output_with_its_message() {
        let output = ScriptOutput::from_completion(Err(ScriptError::thrown("boom (line 1)")));
        assert_eq!(
            output,
            ScriptOutput::Error {
                message: "boom (line 1)".into()
            }
        );
    }
}
