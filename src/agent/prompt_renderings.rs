//! Every kind of message the host sends the model after the system prompt, each
//! rendered once through the code that sends it and compared with
//! `fixtures/prompt_renderings/feedback.md` (fences made neutral), so a change of wording
//! shows in review. After an intended change, regenerate it with
//! `UPDATE_RENDERINGS=1 cargo test --lib prompt_renderings` and review the diff.

use std::path::Path;

use codeact_runtime::{ErrorFacts, ErrorKind, LogBuffer, ScriptError};
use minijinja::context;
use serde_json::{Value, json};

use super::data_paths::Language;
use super::decide::{BareValues, Conversation, LoopConfig, python_reading_files};
use super::feedback::{self, without_nonces};
use super::team::{Handover, handover_message};
use super::test_errors::{named, no_function, out_of_bounds, syntax_at, thrown_at, undefined};
use crate::chat::{ContentBlock, Message, ModelResponse, StopReason, Usage};
use crate::output::script_output::ScriptOutput;
use crate::output::spec::RefusedBy;
use crate::prompts::Prompts;
use crate::untrusted::UntrustedText;

const LIMIT: usize = 1_000;

fn printed(line: &str) -> LogBuffer {
    let mut logs = LogBuffer::new(1_000);
    logs.push_line(line);
    logs
}

fn reply(text: &str, stop_reason: StopReason) -> ModelResponse {
    ModelResponse {
        content: vec![ContentBlock::text(text)],
        stop_reason,
        usage: Usage::default(),
        model: "test".into(),
    }
}

/// A conversation coached by `SmallModelCoach`, whose feedback is snapshot
/// here along with the plain loop's (which it includes).
fn coached(task: &str, tags: &[&str], config: LoopConfig) -> Conversation {
    Conversation::new(task, tags, config).with_coach(std::sync::Arc::new(
        crate::agent::coach::SmallModelCoach::default(),
    ))
}

fn conversation() -> Conversation {
    coached("task", &["rhai"], LoopConfig::default())
        .with_tools([("add".to_string(), "add(a, b)".to_string())])
        .with_transfer_targets(vec!["billing".into(), "support".into()], "triage")
}

/// The last message the model would read next.
fn fed_back(conversation: &Conversation) -> String {
    conversation
        .messages()
        .last()
        .expect("a message")
        .joined_text()
}

/// What the loop feeds back for a reply whose script completes with `completion`.
fn after_script(
    mut conversation: Conversation,
    script: &str,
    completion: Result<Value, ScriptError>,
    logs: &LogBuffer,
) -> String {
    conversation.on_reply(&reply(
        &format!("```rhai\n{script}\n```"),
        StopReason::EndTurn,
    ));
    conversation.on_completion(&completion, logs);
    fed_back(&conversation)
}

/// The feedback for `script` (Python, in a ```python block) run as the first
/// step of [`python_reading_files`], ending with `completion`.
fn after_python_stub(script: &str, completion: Result<Value, ScriptError>) -> String {
    let mut python = python_reading_files();
    python.on_reply(&reply(
        &format!("```python\n{script}\n```"),
        StopReason::EndTurn,
    ));
    python.on_completion(&completion, &LogBuffer::new(10));
    fed_back(&python)
}

fn after_reply(text: &str, stop_reason: StopReason) -> String {
    let mut conversation = conversation();
    conversation.on_reply(&reply(text, stop_reason));
    fed_back(&conversation)
}

/// A Python conversation with `get_weather` whose `script` added Paris's
/// and Oslo's weather maps on line 1 and failed there.
fn failed_adding_maps(script: &str) -> Conversation {
    let mut c = coached("task", &["python"], LoopConfig::default()).with_tools([(
        "get_weather".to_string(),
        "get_weather(city=string)".to_string(),
    )]);
    c.on_reply(&reply(
        &format!("```python\n{script}\n```"),
        StopReason::EndTurn,
    ));
    c.note_tool_results(
        ["Paris", "Oslo"]
            .iter()
            .map(|city| crate::agent::feedback::ToolResultSeen {
                tool: "get_weather".to_string(),
                args: json!({"city": city}),
                value: json!({"city": city, "condition": "snow", "temp_c": 3.0}),
            })
            .collect(),
    );
    c.on_completion(
        &Err(named("Traceback (most recent call last):\n  File \"<script>\", line 1, in <module>\nTypeError: unsupported operand type(s) for +: 'dict' and 'dict'", "TypeError", Some(1))),
        &LogBuffer::new(10),
    );
    c
}

/// A Python script that tests `get_weather`'s result for `None` where the tool
/// raises.
const MUNICH: &str = "result = get_weather(\"Munich\")\nif result is None:\n    result = get_weather(\"Berlin\")\nobservation(result)";

/// A Python conversation whose [`MUNICH`] script failed on the tool's
/// `ToolError`, then, sent again, ran as the catch its feedback proposed.
fn munich_ran_mended() -> Conversation {
    let mut c = coached("task", &["python"], LoopConfig::default()).with_tools([(
        "get_weather".to_string(),
        "get_weather(city=string)".to_string(),
    )]);
    let script = format!("```python\n{MUNICH}\n```");
    c.on_reply(&reply(&script, StopReason::EndTurn));
    c.on_completion(
        &Err(named("Traceback (most recent call last):\n  File \"<script>\", line 1, in <module>\n    result = get_weather(\"Munich\")\nToolError: tool 'get_weather' failed: no weather data for 'Munich'", "ToolError", Some(1))),
        &LogBuffer::new(10),
    );
    c.on_reply(&reply(&script, StopReason::EndTurn));
    c.on_completion(
        &Ok(json!({"type": "observation", "value": {"city": "Berlin", "temp_c": 9.0}})),
        &LogBuffer::new(10),
    );
    c
}

fn decoded(value: Value) -> String {
    match ScriptOutput::decode(value) {
        ScriptOutput::Error { message } => message,
        other => panic!("not an error: {other:?}"),
    }
}

fn sections() -> Vec<(&'static str, String)> {
    let prompts = Prompts::default();
    let none = LogBuffer::new(10);
    let logs = printed("step 1");
    let thrown = |message: &str| ScriptError::thrown(message);
    let refuse = LoopConfig {
        bare_values: BareValues::Refuse,
        ..LoopConfig::default()
    };
    let quoted = UntrustedText::new("{\"total\": \"three\"}");
    let mut repeated = conversation();
    for _ in 0..2 {
        repeated.on_reply(&reply("```rhai\nlet x = 1 / 0;\n```", StopReason::EndTurn));
        repeated.on_completion(&Err(thrown("Division by zero")), &none);
    }
    vec![
        ("fence_rule", crate::untrusted::FENCE_RULE.to_string()),
        (
            "feedback/observation",
            feedback::observation(
                &prompts,
                &json!({"rows": [1, 2]}),
                "observation(rows)",
                &logs,
                LIMIT,
                true,
            ),
        ),
        (
            "feedback/observation (a short string, offered as the answer)",
            feedback::observation(
                &prompts,
                &json!("lena"),
                "let name = best(rows);\nobservation(name);",
                &none,
                LIMIT,
                true,
            ),
        ),
        (
            "feedback/error",
            feedback::error(&prompts, "the session was restarted", &logs, LIMIT),
        ),
        (
            "feedback/error_at",
            after_script(
                conversation(),
                "let x = 1;\ntotl + x",
                Err(undefined(
                    "Variable not found: totl (line 2, position 1)",
                    "totl",
                    Some(2),
                )),
                &logs,
            ),
        ),
        ("feedback/tool_results", {
            let mut c = conversation();
            c.on_reply(&reply(
                "```rhai\nlet text = read_file(#{name: \"sales.json\"});\ntext.filter(|r| r.qty > 1)\n```",
                StopReason::EndTurn,
            ));
            c.note_tool_results(vec![
                feedback::ToolResultSeen {
                    tool: "read_file".into(),
                    args: json!({"name": "sales.json"}),
                    value: json!("[{\"product\": \"pen\", \"qty\": 3}]"),
                },
                feedback::ToolResultSeen {
                    tool: "add".into(),
                    args: json!({"a": 1, "b": 2}),
                    value: json!(3),
                },
            ]);
            c.on_completion(
                &Err(no_function(
                    "Function not found: filter (string, Fn)",
                    "filter",
                    "string",
                    None,
                )),
                &none,
            );
            fed_back(&c)
        }),
        (
            "feedback/pitfall",
            after_script(
                conversation(),
                "let kb = 2^10;\nfinal_result(kb)",
                Ok(json!({"type": "final_result", "value": 8})),
                &none,
            ),
        ),
        (
            "feedback/error_at (an import, no tools)",
            after_script(
                coached("task", &["rhai"], LoopConfig::default()),
                "import \"requests\";",
                Err(thrown_at(
                    "ModuleNotFoundError: No module named 'requests'",
                    ErrorKind::ImportUnavailable,
                    None,
                )),
                &none,
            ),
        ),
        (
            "feedback/error_at (an import, with tools)",
            after_script(
                conversation(),
                "import requests\nfinal_result(get_weather(city=\"Oslo\"))",
                Err(named(
                    "Traceback (most recent call last):\n  File \"<script>\", line 1, in <module>\n    import requests\nModuleNotFoundError: No module named 'requests'",
                    "ModuleNotFoundError",
                    Some(1),
                )),
                &none,
            ),
        ),
        ("feedback/error_at (what the line's names held)", {
            let mut c = coached("task", &["python"], LoopConfig::default());
            c.on_reply(&reply(
                "```python\ntext = str(2.0 ** 50)\ntotal = sum(int(d) for d in text)\nfinal_result(total)\n```",
                StopReason::EndTurn,
            ));
            c.on_completion(
                &Err(ScriptError::Thrown {
                    message: "Traceback (most recent call last):\n  File \"<script>\", line 2, in <genexpr>\n    total = sum(int(d) for d in text)\nValueError: invalid literal for int() with base 10: '.'".into(),
                    values: vec![
                        ("d".into(), "'.'".into()),
                        ("text".into(), "'1125899906842624.0'".into()),
                        ("not a name".into(), "dropped".into()),
                    ],
                    facts: ErrorFacts::of(ErrorKind::Other {
                        engine_kind: "ValueError".into(),
                    })
                    .at_line(Some(2)),
                }),
                &none,
            );
            fed_back(&c)
        }),
        (
            "feedback/error_at (Rhai: a method called on nothing)",
            after_script(
                conversation(),
                "let parts = \"b a\".split(\" \").sort().join(\" \");\nfinal_result(parts)",
                Err(no_function(
                    "Function not found: join ((), &str | ImmutableString | String) (line 1, position 43)",
                    "join",
                    "()",
                    Some(1),
                )),
                &none,
            ),
        ),
        (
            "feedback/error_at (Rhai: a map's missing key tested with if)",
            after_script(
                conversation(),
                "let counts = #{};\nfor w in words {\n    if counts[w] {\n        counts[w] += 1;\n    } else {\n        counts[w] = 1;\n    }\n}\nfinal_result(counts)",
                Err(thrown_at(
                    "Data type incorrect: () (expecting bool) (line 3, position 8)",
                    ErrorKind::UnitCondition,
                    Some(3),
                )),
                &none,
            ),
        ),
        ("feedback/missing_arguments", {
            let mut c = coached("task", &["python"], LoopConfig::default()).with_tools([(
                "read_file".to_string(),
                "read_file(name=string)".to_string(),
            )]);
            c.on_reply(&reply(
                "```python\nrows = read_file()\nfinal_result(len(rows))\n```",
                StopReason::EndTurn,
            ));
            c.note_failed_calls(vec![feedback::FailedCall {
                tool: "read_file".into(),
                args: json!({}),
                missing: vec![("name".into(), "string".into())],
            }]);
            c.on_completion(
                &Err(named("Traceback (most recent call last):\n  File \"<script>\", line 1, in <module>\n    rows = read_file()\nToolError: tool 'read_file' failed: no file ''", "ToolError", Some(1))),
                &none,
            );
            fed_back(&c)
        }),
        ("feedback/made_up_arguments", {
            let mut c = coached(
                "What is Lena Ortiz's email?",
                &["js"],
                LoopConfig::default(),
            )
            .with_tools([
                (
                    "get_user".to_string(),
                    "tools.get_user({user_id: integer})".to_string(),
                ),
                (
                    "find_user".to_string(),
                    "tools.find_user({name: string})".to_string(),
                ),
            ]);
            c.on_reply(&reply(
                "```js\nconst user = tools.get_user({user_id: 12345});\nfinal_result(user.email);\n```",
                StopReason::EndTurn,
            ));
            c.note_failed_calls(vec![feedback::FailedCall {
                tool: "get_user".into(),
                args: json!({"user_id": 12345}),
                missing: Vec::new(),
            }]);
            c.on_completion(
                &Err(thrown_at("Error: tool 'get_user' failed: no user with id 12345\n    at <main> (script:1:30)", ErrorKind::ToolError, Some(1))),
                &none,
            );
            fed_back(&c)
        }),
        ("feedback/fallback_in_catch", {
            let mut c = coached(
                "What is the temperature in Munich? If there is no data for Munich, Berlin's.",
                &["js"],
                LoopConfig::default(),
            )
            .with_tools([(
                "get_weather".to_string(),
                "tools.get_weather({city: string})".to_string(),
            )]);
            c.on_reply(&reply(
                "```js\ntry {\n  const weather = tools.get_weather({city: \"Munich\"});\n  if (weather) {\n    observation(weather.temp_c);\n  } else {\n    const berlin = tools.get_weather({city: \"Berlin\"});\n    observation(berlin.temp_c);\n  }\n} catch (e) {\n  error(e.message);\n}\n```",
                StopReason::EndTurn,
            ));
            c.on_completion(
                &Ok(json!({"type": "error", "message": "tool 'get_weather' failed: no weather data for 'Munich'"})),
                &none,
            );
            fed_back(&c)
        }),
        ("feedback/other_unit", {
            let mut c = coached(
                "What does a loaf of bread cost in Japanese yen? Return the number.",
                &["js"],
                LoopConfig::default(),
            )
            .with_tools([
                ("get_price".to_string(), "tools.get_price({item: string})".to_string()),
                (
                    "convert_currency".to_string(),
                    "tools.convert_currency({amount: number, from_currency: string, to_currency: string})".to_string(),
                ),
            ])
            .with_tool_descriptions([
                ("get_price".to_string(), "The price of one unit of a shop item, in euros (a number).".to_string()),
                ("convert_currency".to_string(), "Converts an amount between currencies given as three-letter codes.".to_string()),
            ]);
            c.on_reply(&reply(
                "```js\nconst price = tools.get_price({item: \"bread\"});\nfinal_result(price);\n```",
                StopReason::EndTurn,
            ));
            c.note_tool_results(vec![crate::agent::feedback::ToolResultSeen {
                tool: "get_price".to_string(),
                args: json!({"item": "bread"}),
                value: json!(2.2),
            }]);
            c.on_completion(&Ok(json!({"type": "final_result", "value": 2.2})), &none);
            fed_back(&c)
        }),
        ("feedback/ids_as_result", {
            let mut c = coached(
                "What is the email address of Lena Ortiz? Return it as a string.",
                &["python"],
                LoopConfig::default(),
            )
            .with_tools([
                ("find_user".to_string(), "find_user(name=string)".to_string()),
                ("get_user".to_string(), "get_user(user_id=integer)".to_string()),
            ])
            .with_tool_descriptions([
                ("find_user".to_string(), "The ids (an array of integers) of the users whose name contains the given text.".to_string()),
                ("get_user".to_string(), "One user by id: a map with user_id, name, email and country.".to_string()),
            ]);
            c.on_reply(&reply(
                "```python\nfinal_result(find_user(name=\"Lena Ortiz\"))\n```",
                StopReason::EndTurn,
            ));
            c.note_tool_results(vec![crate::agent::feedback::ToolResultSeen {
                tool: "find_user".to_string(),
                args: json!({"name": "Lena Ortiz"}),
                value: json!([42]),
            }]);
            c.on_completion(&Ok(json!({"type": "final_result", "value": [42]})), &none);
            fed_back(&c)
        }),
        ("feedback/whole_map", {
            let mut c = coached(
                "What is the email address of Lena Ortiz? Return it as a string.",
                &["python"],
                LoopConfig::default(),
            );
            c.on_reply(&reply(
                "```python\nfinal_result(get_user(user_id=42))\n```",
                StopReason::EndTurn,
            ));
            c.note_tool_results(vec![crate::agent::feedback::ToolResultSeen {
                tool: "get_user".to_string(),
                args: json!({"user_id": 42}),
                value: json!({"email": "lena@example.com", "name": "Lena Ortiz"}),
            }]);
            c.on_completion(
                &Ok(json!({"type": "final_result", "value": {"email": "lena@example.com", "name": "Lena Ortiz"}})),
                &none,
            );
            fed_back(&c)
        }),
        ("feedback/made_up_filter", {
            let mut c = coached(
                "How many orders have an amount above 20 euros? Return the count.",
                &["rhai"],
                LoopConfig::default(),
            )
            .with_tools([(
                "list_orders".to_string(),
                "list_orders(#{customer?: string})".to_string(),
            )]);
            c.on_reply(&reply(
                "```rhai\nlet orders = list_orders(#{customer: \"John\"})\nfinal_result(orders.len())\n```",
                StopReason::EndTurn,
            ));
            c.note_tool_results(vec![crate::agent::feedback::ToolResultSeen {
                tool: "list_orders".to_string(),
                args: json!({"customer": "John"}),
                value: json!([]),
            }]);
            c.on_completion(&Ok(json!({"type": "final_result", "value": 0})), &none);
            fed_back(&c)
        }),
        ("feedback/catch_tool_error", {
            let mut c = coached("task", &["python"], LoopConfig::default()).with_tools([(
                "get_weather".to_string(),
                "get_weather(city=string)".to_string(),
            )]);
            c.on_reply(&reply(
                "```python\nresult = get_weather(\"Munich\")\nif result is None:\n    result = get_weather(\"Berlin\")\nobservation(result)\n```",
                StopReason::EndTurn,
            ));
            c.on_completion(
                &Err(named("Traceback (most recent call last):\n  File \"<script>\", line 1, in <module>\n    result = get_weather(\"Munich\")\nToolError: tool 'get_weather' failed: no weather data for 'Munich'", "ToolError", Some(1))),
                &none,
            );
            fed_back(&c)
        }),
        ("notes/mend_applied", fed_back(&munich_ran_mended())),
        ("notes/mend_applied (kept the failed lines)", {
            let mut c = munich_ran_mended();
            c.on_reply(&reply(
                &format!(
                    "```python\n{}\n```",
                    MUNICH.replace("observation(result)", "observation(result[\"temp_c\"])")
                ),
                StopReason::EndTurn,
            ));
            c.on_completion(&Ok(json!({"type": "observation", "value": 9.0})), &none);
            fed_back(&c)
        }),
        ("feedback/open_file", {
            let mut c = python_reading_files();
            c.on_reply(&reply(
                "```python\nwith open('server.log') as file:\n    log = file.read()\nfinal_result(len(log))\n```",
                StopReason::EndTurn,
            ));
            c.on_completion(
                &Err(named("Traceback (most recent call last):\n  File \"<script>\", line 1, in <module>\nFileNotFoundError: [Errno 44] No such file or directory: 'server.log'", "FileNotFoundError", Some(1))),
                &none,
            );
            fed_back(&c)
        }),
        ("feedback/map_as_number", {
            let c = failed_adding_maps(
                "result = get_weather(\"Paris\") + get_weather(\"Oslo\")\nfinal_result(result / 2)",
            );
            fed_back(&c)
        }),
        ("notes/changed_beside_mend", {
            let mut c = failed_adding_maps(
                "result = get_weather(\"Paris\") + get_weather(\"Oslo\")\nresult = round(result / 2, 1)\nobservation(result)",
            );
            c.on_reply(&reply(
                "```python\nresult = get_weather(\"Paris\")[\"temp_c\"] + get_weather(\"Oslo\")[\"temp_c\"]\nresult = round(result, 1)\nobservation(result)\n```",
                StopReason::EndTurn,
            ));
            c.on_completion(&Ok(json!({"type": "observation", "value": 6.0})), &none);
            fed_back(&c)
        }),
        ("notes/left_out_of_mend", {
            let mut c = coached(
                "What is the temperature in Munich? If there is no data for Munich, Berlin's.",
                &["js"],
                LoopConfig::default(),
            )
            .with_tools([(
                "get_weather".to_string(),
                "tools.get_weather({city: string})".to_string(),
            )]);
            let script = |catch: &str| {
                format!(
                    "```js\ntry {{\n  const weather = tools.get_weather({{city: \"Munich\"}});\n  if (weather) {{\n    observation(weather.temp_c);\n  }} else {{\n    const berlin = tools.get_weather({{city: \"Berlin\"}});\n    observation(berlin.temp_c);\n  }}\n}} catch (e) {{\n{catch}\n}}\n```"
                )
            };
            c.on_reply(&reply(&script("  error(e.message);"), StopReason::EndTurn));
            c.on_completion(
                &Ok(json!({"type": "error", "message": "tool 'get_weather' failed: no weather data for 'Munich'"})),
                &none,
            );
            c.on_reply(&reply(
                &script("  observation(berlin.temp_c);"),
                StopReason::EndTurn,
            ));
            c.on_completion(
                &Err(undefined(
                    "ReferenceError: berlin is not defined\n    at <main> (script:10:29)",
                    "berlin",
                    Some(10),
                )),
                &none,
            );
            fed_back(&c)
        }),
        (
            "feedback/observation (a string observed as a literal, offered fenced)",
            {
                let mut c = coached("task", &["python"], LoopConfig::default());
                c.on_reply(&reply(
                    "```python\nobservation(\"four three two one\")\n```",
                    StopReason::EndTurn,
                ));
                c.on_completion(
                    &Ok(json!({"type": "observation", "value": "four three two one"})),
                    &none,
                );
                fed_back(&c)
            },
        ),
        ("feedback/made_up_filter_seen", {
            let mut c = coached(
                "How many orders have an amount above 20 euros? Return the count.",
                &["python"],
                LoopConfig::default(),
            )
            .with_tools([(
                "list_orders".to_string(),
                "list_orders(customer=string|None)".to_string(),
            )]);
            c.on_reply(&reply(
                "```python\nresult = list_orders(customer=\"Alice\")\nobservation(result)\n```",
                StopReason::EndTurn,
            ));
            c.note_tool_results(vec![crate::agent::feedback::ToolResultSeen {
                tool: "list_orders".to_string(),
                args: json!({"customer": "Alice"}),
                value: json!([]),
            }]);
            c.on_completion(&Ok(json!({"type": "observation", "value": []})), &none);
            fed_back(&c)
        }),
        (
            "feedback/absent_pattern (a regex mended where it stops, after an error)",
            {
                let mut c = coached(
                    "The ERROR lines of server.log each carry an error code such as E17. Which code occurs most often?",
                    &["python"],
                    LoopConfig::default(),
                );
                c.on_reply(&reply(
                "```python\nimport re\nlog = read_file(name=\"server.log\")\ncodes = re.findall(r\"ERROR (\\d+)\", log)\nfinal_result(max(set(codes), key=codes.count))\n```",
                StopReason::EndTurn,
            ));
                c.note_tool_results(vec![crate::agent::feedback::ToolResultSeen {
                    tool: "read_file".to_string(),
                    args: json!({"name": "server.log"}),
                    value: json!(
                        "2026-11-30 10:00:01 INFO start\n2026-11-30 10:00:05 ERROR E42 disk full\n"
                    ),
                }]);
                c.on_completion(
                &Err(named(
                    "Traceback (most recent call last):\n  File \"<script>\", line 4, in <module>\nValueError: max() iterable argument is empty", "ValueError", Some(4),
                )),
                &none,
            );
                fed_back(&c)
            },
        ),
        ("feedback/two_names", {
            let mut c = coached(
                "What is the average temperature in Paris and Oslo?",
                &["rhai"],
                LoopConfig::default(),
            );
            c.on_reply(&reply(
                "```rhai\nlet weather paris = get_weather(#{city: \"Paris\"})\nlet weather oslo = get_weather(#{city: \"Oslo\"})\nobservation((weather.paris.temp_c + weather.oslo.temp_c) / 2.0)\n```",
                StopReason::EndTurn,
            ));
            c.on_completion(
                &Err(syntax_at(
                    "Syntax error: Expecting ';' to terminate this statement (line 1, position 13)",
                    Some(1),
                )),
                &none,
            );
            fed_back(&c)
        }),
        ("feedback/bare_method", {
            let mut c = coached("Total of mia's orders?", &["rhai"], LoopConfig::default());
            c.on_reply(&reply(
                "```rhai\nlet orders = list_orders(#{customer: \"mia\"})\nlet total = reduce(|sum, order| sum + order.amount, 0)\nfinal_result(total)\n```",
                StopReason::EndTurn,
            ));
            c.note_tool_results(vec![crate::agent::feedback::ToolResultSeen {
                tool: "list_orders".to_string(),
                args: json!({"customer": "mia"}),
                value: json!([{"amount": 23.5}]),
            }]);
            c.on_completion(
                &Err(no_function(
                    "Function not found: reduce (Fn, i64) (line 2, position 13)",
                    "reduce",
                    "Fn",
                    Some(2),
                )),
                &none,
            );
            fed_back(&c)
        }),
        ("feedback/misread_data", {
            let mut c = coached(
                "What is Lena Ortiz's email?",
                &["js"],
                LoopConfig::default(),
            )
            .with_tools([
                (
                    "find_user".to_string(),
                    "tools.find_user({name: string})".to_string(),
                ),
                (
                    "get_user".to_string(),
                    "tools.get_user({user_id: integer})".to_string(),
                ),
            ]);
            c.on_reply(&reply(
                "```js\nconst ids = tools.find_user({name: \"Lena Ortiz\"});\nfinal_result(ids[0].email);\n```",
                StopReason::EndTurn,
            ));
            c.note_tool_results(vec![feedback::ToolResultSeen {
                tool: "find_user".into(),
                args: json!({"name": "Lena Ortiz"}),
                value: json!([42]),
            }]);
            c.on_completion(
                &Err(ScriptError::Unrepresentable {
                    message: "output.value is undefined, which JSON cannot hold; use null".into(),
                }),
                &none,
            );
            fed_back(&c)
        }),
        ("feedback/misread_data (a loop over a tool's text)", {
            let mut c = coached(
                "What is the total revenue in sales.csv?",
                &["python"],
                LoopConfig::default(),
            );
            c.on_reply(&reply(
                "```python\nsales = read_file(name=\"sales.csv\")\ntotal = 0\nfor row in sales:\n    total += float(row[1]) * float(row[2])\nfinal_result(total)\n```",
                StopReason::EndTurn,
            ));
            c.note_tool_results(vec![feedback::ToolResultSeen {
                tool: "read_file".into(),
                args: json!({"name": "sales.csv"}),
                value: json!("product,quantity,unit_price\nlamp,3,19.5\n"),
            }]);
            c.on_completion(
                &Err(out_of_bounds("Traceback (most recent call last):\n  File \"<script>\", line 4, in <module>\nIndexError: string index out of range", None, None, Some(4))),
                &none,
            );
            fed_back(&c)
        }),
        (
            "feedback/reported_error",
            feedback::reported_error(&prompts, "no data", &logs, LIMIT),
        ),
        (
            "feedback/limit_exceeded",
            feedback::limit_exceeded(
                &prompts,
                "time limit of 5000 ms",
                Some("stopped inside a single long operation"),
                true,
                &logs,
                LIMIT,
            ),
        ),
        (
            "feedback/engine_lost",
            feedback::engine_lost(
                &prompts,
                "the interpreter crashed",
                Some("wasm trap: wasm `unreachable` instruction executed"),
                &none,
                LIMIT,
            ),
        ),
        (
            "feedback/unrepresentable",
            feedback::unrepresentable(&prompts, "a function pointer", &none, LIMIT),
        ),
        (
            "feedback/host_error (a tagged map that is not an output)",
            after_script(
                conversation(),
                "#{type: \"answer\", value: 4}",
                Ok(json!({"type": "answer", "value": 4})),
                &none,
            ),
        ),
        (
            "feedback/bare_value (a number)",
            feedback::bare_value(&prompts, &json!(7.8), &none, LIMIT, Language::Rhai),
        ),
        (
            "feedback/bare_value (a boolean, Python)",
            feedback::bare_value(&prompts, &json!(true), &none, LIMIT, Language::Python),
        ),
        (
            "feedback/bare_value (a list)",
            feedback::bare_value(&prompts, &json!([1, 2]), &logs, LIMIT, Language::Rhai),
        ),
        (
            "feedback/bare_value_refused",
            after_script(
                coached("task", &["rhai"], refuse),
                "#{total: 3}",
                Ok(json!({"total": 3})),
                &none,
            ),
        ),
        (
            "feedback/no_value (a plain print)",
            feedback::no_value(&prompts, Some("total"), &[], None, None, &logs, LIMIT),
        ),
        (
            "feedback/no_value (a print that is not plain code)",
            feedback::no_value(
                &prompts,
                Some("\"The answer is \" + total"),
                &[],
                None,
                None,
                &none,
                LIMIT,
            ),
        ),
        (
            "feedback/no_value (no print)",
            feedback::no_value(&prompts, None, &[], None, None, &none, LIMIT),
        ),
        (
            "feedback/no_value (functions defined, none called)",
            feedback::no_value(
                &prompts,
                None,
                &["only_zero".to_string(), "main".to_string()],
                None,
                None,
                &none,
                LIMIT,
            ),
        ),
        (
            "feedback/refusal",
            feedback::refusal(
                &prompts,
                RefusedBy::Schema,
                "\"three\" is not of type \"integer\"",
                Some(&quoted),
                2,
                LIMIT,
            ),
        ),
        (
            "feedback/refusal (the validator)",
            feedback::refusal(
                &prompts,
                RefusedBy::Validator,
                "needs a total",
                None,
                1,
                LIMIT,
            ),
        ),
        (
            "feedback/faked_tool",
            after_script(
                conversation(),
                "fn add(a, b) { 5 }\nfinal_result(add(2, 2))",
                Ok(json!({"type": "final_result", "value": 5})),
                &none,
            ),
        ),
        ("notes/cells", {
            use crate::agent::cells::CellNews;
            let mut c = conversation();
            c.on_reply(&reply("```rhai\nobservation(c)\n```", StopReason::EndTurn));
            c.note_cells(&[
                CellNews {
                    id: "cell-1".into(),
                    state: "done",
                    progress: 0,
                },
                CellNews {
                    id: "cell-2".into(),
                    state: "running",
                    progress: 1,
                },
            ]);
            c.on_completion(
                &Ok(json!({"type": "observation", "value": "cell-2"})),
                &none,
            );
            fed_back(&c)
        }),
        (
            "notes/redefined",
            after_script(
                conversation(),
                "fn add(a, b) { a + b }\nobservation(add(2, 2))",
                Ok(json!({"type": "observation", "value": 4})),
                &none,
            ),
        ),
        ("notes/stub_removed", {
            let mut python = coached("task", &["python"], LoopConfig::default())
                .with_tools([("add".to_string(), "add(a=integer, b=integer)".to_string())]);
            python.on_reply(&reply(
                "```python\ndef add(a, b):\n    return 5\n\nobservation(add(a=2, b=2))\n```",
                StopReason::EndTurn,
            ));
            python.on_completion(&Ok(json!({"type": "observation", "value": 4})), &none);
            fed_back(&python)
        }),
        (
            "feedback/no_value (a stub's reading and one function never called)",
            {
                after_python_stub(
                    "import json\n\ndef read_file(name=\"inventory.json\"):\n    with open(name, \"r\") as file:\n        return json.load(file)\n\ndef only_zero(items):\n    return [item[\"name\"] for item in items if item[\"stock\"] == 0]",
                    Err(ScriptError::NoValue {
                        message: "no value".to_string(),
                    }),
                )
            },
        ),
        (
            "feedback/no_value (only stubs: a reading kept and a result helper taken out)",
            {
                after_python_stub(
                    "import csv\n\ndef read_file(name=\"sales.csv\"):\n    with open(name, newline='') as file:\n        return list(csv.DictReader(file))\n\ndef final_result(product_name, [\"out/report.md\"]):\n    observation(product_name)",
                    Err(ScriptError::NoValue {
                        message: "no value".to_string(),
                    }),
                )
            },
        ),
        (
            "notes/stub_removed (a stub that read a file, kept as its reading)",
            {
                after_python_stub(
                    "import csv\n\ndef read_file(name=\"sales.csv\"):\n    with open(name, newline='') as file:\n        reader = csv.reader(file)\n        return list(reader)\n\nsales = read_file()\nfinal_result(sum(float(row[1]) for row in sales[1:]))",
                    Err(out_of_bounds(
                        "Traceback (most recent call last):\n  File \"<script>\", line 10, in <module>\n    final_result(sum(float(row[1]) for row in sales[1:]))\n  File \"<script>\", line 10, in <genexpr>\nIndexError: string index out of range",
                        None,
                        None,
                        Some(10),
                    )),
                )
            },
        ),
        ("feedback/stub_reading", {
            after_python_stub(
                "import csv\n\nFILE = \"sales.csv\"\ndef read_file(name=FILE):\n    with open(name, newline='') as file:\n        reader = csv.reader(file)\n        return list(reader)\n\nsales = read_file()\nfinal_result(sum(float(row[1]) for row in sales[1:]))",
                Err(out_of_bounds(
                    "Traceback (most recent call last):\n  File \"<script>\", line 10, in <module>\n    final_result(sum(float(row[1]) for row in sales[1:]))\n  File \"<script>\", line 10, in <genexpr>\nIndexError: string index out of range",
                    None,
                    None,
                    Some(10),
                )),
            )
        }),
        (
            "notes/cut_off_after_code",
            after_script(
                {
                    let mut c = conversation();
                    c.on_reply(&reply(
                        "```rhai\nobservation(4)\n```\nAnd then",
                        StopReason::OutputTruncated,
                    ));
                    c
                },
                "observation(5)",
                Ok(json!({"type": "observation", "value": 5})),
                &none,
            ),
        ),
        ("hints/same_script", fed_back(&repeated)),
        ("hints/same_observation", {
            let mut c = conversation();
            for _ in 0..2 {
                c.on_reply(&reply(
                    "```rhai\nobservation(list_orders())\n```",
                    StopReason::EndTurn,
                ));
                c.on_completion(&Ok(json!({"type": "observation", "value": [7]})), &none);
            }
            fed_back(&c)
        }),
        (
            "hints/same_observation (a map with one number, observed by name)",
            {
                let mut c = coached(
                    "What is the temperature in Berlin? Return the number.",
                    &["python"],
                    LoopConfig::default(),
                );
                for _ in 0..2 {
                    c.on_reply(&reply(
                        "```python\nresult = get_weather(\"Berlin\")\nobservation(result)\n```",
                        StopReason::EndTurn,
                    ));
                    c.on_completion(
                    &Ok(json!({"type": "observation", "value": {"city": "Berlin", "temp_c": 9.0}})),
                    &none,
                );
                }
                fed_back(&c)
            },
        ),
        ("hints/same_error", {
            let mut c = conversation();
            for _ in 0..2 {
                c.on_reply(&reply("It is 4.", StopReason::EndTurn));
            }
            fed_back(&c)
        }),
        (
            "reply/no_code",
            after_reply("I think it is 4.", StopReason::EndTurn),
        ),
        ("reply/empty_code (after an observation of a number)", {
            let mut c = conversation();
            c.on_reply(&reply(
                "```rhai\nlet w = get_weather(#{city: \"Berlin\"});\nif w != () { observation(w.temp_c) }\n```",
                StopReason::EndTurn,
            ));
            c.on_completion(&Ok(json!({"type": "observation", "value": 9})), &none);
            c.on_reply(&reply("```rhai\n\n```", StopReason::EndTurn));
            fed_back(&c)
        }),
        (
            "reply/empty_code (first reply)",
            after_reply("```rhai\n```", StopReason::EndTurn),
        ),
        (
            "reply/other_language",
            after_reply("```python\nprint(4)\n```", StopReason::EndTurn),
        ),
        (
            "reply/cut_off_in_code",
            after_reply("```rhai\nlet x = [1, 2,", StopReason::OutputTruncated),
        ),
        (
            "reply/cut_off_without_code",
            after_reply("Let me think about", StopReason::OutputTruncated),
        ),
        ("transfer/unknown", {
            let mut c = conversation();
            c.on_script(
                &ScriptOutput::TransferToAgent {
                    agent_name: "sales".into(),
                },
                &none,
            );
            fed_back(&c)
        }),
        ("transfer/to_itself", {
            let mut c = conversation();
            c.on_script(
                &ScriptOutput::TransferToAgent {
                    agent_name: "triage".into(),
                },
                &none,
            );
            fed_back(&c)
        }),
        ("transfer/valid_names (no targets)", {
            let mut c = coached("task", &["rhai"], LoopConfig::default());
            c.on_script(
                &ScriptOutput::TransferToAgent {
                    agent_name: "sales".into(),
                },
                &none,
            );
            fed_back(&c)
        }),
        // The driver feeds a script the policy stopped back as that script's error.
        (
            "policy/ask",
            feedback::error(
                &prompts,
                &prompts.render("policy/ask", context! {}),
                &none,
                LIMIT,
            ),
        ),
        (
            "policy/refused",
            feedback::error(
                &prompts,
                &prompts.render("policy/refused", context! { reason => "over 100" }),
                &none,
                LIMIT,
            ),
        ),
        (
            "policy/undecided",
            feedback::error(
                &prompts,
                &prompts.render(
                    "policy/undecided",
                    context! { reason => "check_code threw: boom" },
                ),
                &none,
                LIMIT,
            ),
        ),
        (
            "handover",
            handover_message(
                &prompts,
                "Refund order 7.",
                &Handover {
                    from: "triage".into(),
                    to: "billing".into(),
                    carried: vec![
                        Message::user("Refund order 7."),
                        Message::assistant("```rhai\ntransfer_to_agent(\"billing\")\n```"),
                    ],
                },
            ),
        ),
        ("compaction", super::decide::compaction_marker(2)),
        ("decode/not_an_output (null)", decoded(Value::Null)),
        ("decode/not_an_output (a number)", decoded(json!(7))),
        ("decode/not_an_output (a map)", decoded(json!({"total": 3}))),
        (
            "decode/missing_field",
            decoded(json!({"type": "observation"})),
        ),
        (
            "decode/unknown_type",
            decoded(json!({"type": "answer", "value": 3})),
        ),
        (
            "decode/bad_transfer",
            decoded(json!({"type": "transfer_to_agent", "agent_name": ""})),
        ),
        (
            "decode/bad_artifacts",
            decoded(json!({"type": "final_result", "value": 1, "artifacts": [3]})),
        ),
    ]
}

/// If this fails, the words the model reads after a step have changed: review the
/// diff of `fixtures/prompt_renderings/feedback.md`, and regenerate it if intended.
#[test]
fn every_kind_of_feedback_matches_its_rendering() {
    let mut actual =
        String::from("# Feedback the model reads, one of each kind (fences made neutral)\n");
    for (kind, text) in sections() {
        actual.push_str(&format!("\n## {kind}\n\n{}\n", without_nonces(&text)));
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/prompt_renderings/feedback.md");
    if std::env::var_os("UPDATE_RENDERINGS").is_some() {
        std::fs::write(&path, &actual).expect("the rendering is written");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with UPDATE_RENDERINGS=1 to create it",
            path.display()
        )
    });
    assert_eq!(
        actual,
        expected,
        "{} differs; run with UPDATE_RENDERINGS=1 if intended",
        path.display()
    );
}
