//! A final result computed from an empty tool result that a made-up filter
//! gave: `list_orders(#{customer: "John"})` returned `[]` for a customer the
//! task never names, and the script counted nothing. Found from the step's tool
//! calls, the conversation's words and the tools' signatures; no code runs.
//!
//! Why: on "How many orders have an amount above 20 euros?" a small model
//! (Rhai) passed a customer of its own and answered 0 in both runs; told that
//! the argument is optional, with the line rewritten without it, it called the
//! tool for every order.

use serde_json::{Map, Value};

use super::data_paths::Language;
use super::feedback::ToolResultSeen;
use super::script_notes;

/// A call that returned nothing for an optional argument the script made up.
#[derive(Debug, Clone, PartialEq)]
pub struct MadeUpFilter {
    pub tool: String,
    /// The argument's name (one the tool's signature marks optional).
    pub argument: String,
    /// What the tool returned, as JSON writes it: `[]`, `{}`, `""` or `null`.
    pub empty: &'static str,
    /// The script's line with the call (1-based) and that line rewritten
    /// without the argument, when it is plain enough to quote.
    pub rewritten: Option<(usize, String)>,
}

/// The first call of `results` that returned an empty value for a single
/// argument whose value appears nowhere in `seen` (what the model read), when
/// the tool's `signatures` mark that argument optional (`customer?`).
pub fn made_up_filter(
    script: &str,
    results: &[ToolResultSeen],
    seen: &[String],
    signatures: &[(String, String)],
    language: Language,
) -> Option<MadeUpFilter> {
    results.iter().find_map(|result| {
        let empty = empty_shape(&result.value)?;
        let Value::Object(args) = &result.args else {
            return None;
        };
        let (argument, value) = single_argument(args)?;
        if !value.is_string() || !script_notes::has_unseen_value(value, seen) {
            return None;
        }
        let (_, signature) = signatures.iter().find(|(name, _)| *name == result.tool)?;
        if !optional_in(signature, argument) {
            return None;
        }
        Some(MadeUpFilter {
            tool: result.tool.clone(),
            argument: argument.clone(),
            empty,
            rewritten: rewritten_line(script, &result.tool, argument, language),
        })
    })
}

/// Whether a card's `signature` marks `argument` optional: `customer?:` in
/// JavaScript and Rhai, `customer=string|None` in Python.
fn optional_in(signature: &str, argument: &str) -> bool {
    let bounded = |at: usize| {
        signature[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
    };
    signature.match_indices(argument).any(|(at, _)| {
        let after = &signature[at + argument.len()..];
        bounded(at)
            && (after.starts_with('?')
                || after.strip_prefix('=').is_some_and(|rest| {
                    rest.split([',', ')'])
                        .next()
                        .is_some_and(|ty| ty.trim().ends_with("|None"))
                }))
    })
}

fn single_argument(args: &Map<String, Value>) -> Option<(&String, &Value)> {
    let mut entries = args.iter();
    match (entries.next(), entries.next()) {
        (Some(only), None) => Some(only),
        _ => None,
    }
}

/// What an empty result is, as JSON writes it.
fn empty_shape(value: &Value) -> Option<&'static str> {
    match value {
        Value::Array(items) if items.is_empty() => Some("[]"),
        Value::Object(fields) if fields.is_empty() => Some("{}"),
        Value::String(text) if text.is_empty() => Some("\"\""),
        Value::Null => Some("null"),
        _ => None,
    }
}

/// The one line of `script` that calls `tool` with `argument`, with the
/// call's arguments emptied (`list_orders(#{})`, `tools.list_orders({})`,
/// `list_orders()`), when the line is then nothing but names, brackets, `=`
/// and `;` (no string left in it), so the host can say it.
fn rewritten_line(
    script: &str,
    tool: &str,
    argument: &str,
    language: Language,
) -> Option<(usize, String)> {
    let call = format!("{tool}(");
    let mut lines = script
        .lines()
        .enumerate()
        .filter(|(_, line)| line.contains(&call) && line.contains(argument));
    let (index, line) = match (lines.next(), lines.next()) {
        (Some(only), None) => only,
        _ => return None,
    };
    let open = line.find(&call)? + call.len();
    let close = open + script_notes::closing_paren(&line[open..])?;
    let empty = match language {
        Language::Rhai => "#{}",
        Language::JavaScript => "{}",
        Language::Python => "",
    };
    let rewritten = format!("{}{empty}{}", &line[..open], &line[close..]);
    let rewritten = rewritten.trim();
    let plain = rewritten.len() <= 80
        && rewritten
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || " _.=()[]{}#;".contains(c));
    plain.then(|| (index + 1, rewritten.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn orders(args: Value, value: Value) -> Vec<ToolResultSeen> {
        vec![ToolResultSeen {
            tool: "list_orders".into(),
            args,
            value,
        }]
    }

    fn signatures(signature: &str) -> Vec<(String, String)> {
        vec![("list_orders".to_string(), signature.to_string())]
    }

    const TASK: &str = "How many orders have an amount above 20 euros? Return the count.";

    #[test]
    fn an_empty_list_for_a_made_up_optional_filter_is_found_with_the_line_rewritten() {
        let script =
            "let orders = list_orders(#{customer: \"John\"})\nlet count = 0\nfinal_result(count)";
        let found = made_up_filter(
            script,
            &orders(json!({"customer": "John"}), json!([])),
            &[TASK.to_string()],
            &signatures("list_orders(#{customer?: string})"),
            Language::Rhai,
        );
        assert_eq!(
            found,
            Some(MadeUpFilter {
                tool: "list_orders".into(),
                argument: "customer".into(),
                empty: "[]",
                rewritten: Some((1, "let orders = list_orders(#{})".into())),
            })
        );
        let python = made_up_filter(
            "orders = list_orders(customer=\"John\")",
            &orders(json!({"customer": "John"}), json!([])),
            &[TASK.to_string()],
            &signatures("list_orders(customer=string|None)"),
            Language::Python,
        );
        assert_eq!(
            python.and_then(|found| found.rewritten),
            Some((1, "orders = list_orders()".into()))
        );
    }

    #[test]
    fn a_filter_from_the_task_a_required_argument_or_a_result_with_data_is_not_made_up() {
        let script = "let orders = list_orders(#{customer: \"mia\"})";
        let optional = signatures("list_orders(#{customer?: string})");
        let task = "What did the customer mia order?".to_string();
        let cases = [
            (
                json!({"customer": "mia"}),
                json!([]),
                task.clone(),
                optional.clone(),
            ),
            (
                json!({"customer": "John"}),
                json!([{"id": 1}]),
                TASK.to_string(),
                optional.clone(),
            ),
            (
                json!({"customer": "John"}),
                json!([]),
                TASK.to_string(),
                signatures("list_orders(#{customer: string})"),
            ),
        ];
        for (args, value, task, signatures) in cases {
            assert_eq!(
                made_up_filter(
                    script,
                    &orders(args.clone(), value),
                    &[task],
                    &signatures,
                    Language::Rhai
                ),
                None,
                "{args}"
            );
        }
    }

    #[test]
    fn a_line_that_keeps_a_string_is_not_rewritten() {
        let script = "let orders = list_orders(#{customer: \"John\"}); print(\"ignore the task\")";
        let found = made_up_filter(
            script,
            &orders(json!({"customer": "John"}), json!([])),
            &[TASK.to_string()],
            &signatures("list_orders(#{customer?: string})"),
            Language::Rhai,
        )
        .expect("found");
        assert_eq!(found.rewritten, None);
    }
}
