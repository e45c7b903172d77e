//! A tool's map used as a number: `get_weather("Paris") + get_weather("Oslo")`
//! over a tool that returns `{"city": "Paris", "temp_c": 14.5, …}`. When every
//! map the tool returned in the step has exactly one number, the failing line
//! is rewritten with that number taken out of each call
//! (`get_weather("Paris")["temp_c"] + …`). Found from the error's words, the
//! failing line and the step's tool results; no code runs.
//!
//! Why: with its stub of `get_weather` (which returned a number) taken out, a
//! small model (CPython) added the host's maps and sent the same script back
//! four times, shown the maps each time.

use serde_json::Value;

use super::data_paths::Language;
use super::feedback::ToolResultSeen;
use super::script_notes;

/// The longest key said in the host's words (letters, digits and `_` only).
const KEY_CHARS: usize = 24;

/// The longest failing line rewritten.
const LINE_CHARS: usize = 400;

/// A tool's map used as a number, and the failing line with its number taken.
#[derive(Debug, Clone, PartialEq)]
pub struct MapAsNumber {
    pub tool: String,
    /// The one key of the tool's maps that holds a number.
    pub key: String,
    /// The failing line, every call of the tool followed by the key's access.
    /// Model code: quoted only fenced.
    pub rewritten: String,
}

/// The account of `message`, an error about arithmetic on maps (Python's
/// `unsupported operand type(s) … 'dict'`, Rhai's `Function not found: + (map,
/// …)`), when `line` (the failing line) calls a tool whose every map in
/// `results` holds exactly one number.
pub fn map_as_number(
    message: &str,
    line: &str,
    results: &[ToolResultSeen],
    language: Language,
) -> Option<MapAsNumber> {
    let arithmetic_on_maps = match language {
        Language::Python => {
            message.contains("unsupported operand type(s)") && message.contains("'dict'")
        }
        Language::Rhai => message
            .split_once("Function not found:")
            .is_some_and(|(_, called)| called.contains("map")),
        Language::JavaScript => false,
    };
    if !arithmetic_on_maps || line.len() > LINE_CHARS {
        return None;
    }
    let mut tools: Vec<&str> = results.iter().map(|result| result.tool.as_str()).collect();
    tools.dedup();
    tools.into_iter().find_map(|tool| {
        let call = format!("{tool}(");
        if !line.contains(&call) {
            return None;
        }
        let key = only_number_key(results.iter().filter(|result| result.tool == tool))?;
        let access = key_access(&key, language);
        let rewritten = after_each_call(line.trim(), &call, &access)?;
        Some(MapAsNumber {
            tool: tool.to_string(),
            key,
            rewritten,
        })
    })
}

/// How `language` reads the field `key` of a map: `["temp_c"]` in Python,
/// `.temp_c` in Rhai and JavaScript.
pub fn key_access(key: &str, language: Language) -> String {
    match language {
        Language::Python => format!("[\"{key}\"]"),
        Language::Rhai | Language::JavaScript => format!(".{key}"),
    }
}

/// The one key of `value` that holds a number, when `value` is a map with
/// exactly one and the key is plain enough for the host's words (letters,
/// digits and `_`, at most [`KEY_CHARS`], not starting with a digit).
pub fn the_number_key(value: &Value) -> Option<&str> {
    let Value::Object(map) = value else {
        return None;
    };
    let mut numbers = map.iter().filter(|(_, value)| value.is_number());
    let (key, _) = numbers.next()?;
    let plain = key.len() <= KEY_CHARS
        && !key.starts_with(|c: char| c.is_ascii_digit())
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    (numbers.next().is_none() && plain).then_some(key.as_str())
}

/// The one key that holds a number in every map of `results`, when each
/// result is a map and they agree.
fn only_number_key<'a>(mut results: impl Iterator<Item = &'a ToolResultSeen>) -> Option<String> {
    let first = the_number_key(&results.next()?.value)?;
    results
        .all(|result| the_number_key(&result.value) == Some(first))
        .then(|| first.to_string())
}

/// `line` with `access` written after the closing parenthesis of each call
/// that starts with `call` (not one already followed by an access); None
/// when a call's parentheses do not close on the line.
fn after_each_call(line: &str, call: &str, access: &str) -> Option<String> {
    let mut out = String::with_capacity(line.len() + 4 * access.len());
    let mut rest = line;
    while let Some(at) = rest.find(call) {
        let before = rest[..at].chars().next_back();
        let whole = before.is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '.'));
        let open = at + call.len();
        let close = open + script_notes::closing_paren(&rest[open..])?;
        out.push_str(&rest[..=close]);
        let after = &rest[close + 1..];
        if whole && !after.starts_with(['[', '.']) {
            out.push_str(access);
        }
        rest = after;
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn weather(city: &str, temp: f64) -> ToolResultSeen {
        ToolResultSeen {
            tool: "get_weather".into(),
            args: json!({"city": city}),
            value: json!({"city": city, "condition": "cloudy", "temp_c": temp}),
        }
    }

    const ADDED: &str = "TypeError: unsupported operand type(s) for +: 'dict' and 'dict'";

    #[test]
    fn added_maps_get_their_one_number_taken_after_each_call() {
        let line = "result = get_weather(\"Paris\") + get_weather(\"Oslo\") + get_weather(city=\"Madrid\")";
        let found = map_as_number(
            ADDED,
            line,
            &[weather("Paris", 14.5), weather("Oslo", 3.0)],
            Language::Python,
        )
        .expect("found");
        assert_eq!(found.tool, "get_weather");
        assert_eq!(found.key, "temp_c");
        assert_eq!(
            found.rewritten,
            "result = get_weather(\"Paris\")[\"temp_c\"] + get_weather(\"Oslo\")[\"temp_c\"] + get_weather(city=\"Madrid\")[\"temp_c\"]"
        );
    }

    #[test]
    fn rhai_takes_the_number_as_a_field_and_a_taken_one_is_left_alone() {
        let line = "let t = get_weather(\"Paris\").temp_c + get_weather(\"Oslo\");";
        let found = map_as_number(
            "Function not found: + (f64, map) (line 1, position 9)",
            line,
            &[weather("Paris", 14.5)],
            Language::Rhai,
        )
        .expect("found");
        assert_eq!(
            found.rewritten,
            "let t = get_weather(\"Paris\").temp_c + get_weather(\"Oslo\").temp_c;"
        );
    }

    #[test]
    fn nothing_is_said_unless_every_map_holds_one_number_under_a_plain_key() {
        let line = "x = get_weather(\"Paris\") + 1";
        let two_numbers = ToolResultSeen {
            tool: "get_weather".into(),
            args: json!({}),
            value: json!({"temp_c": 1, "wind": 2}),
        };
        let odd_key = ToolResultSeen {
            tool: "get_weather".into(),
            args: json!({}),
            value: json!({"temp c\n": 1}),
        };
        for results in [vec![two_numbers], vec![odd_key]] {
            assert_eq!(map_as_number(ADDED, line, &results, Language::Python), None);
        }
        // Another error, another tool on the line, a call left open, JavaScript.
        let paris = [weather("Paris", 14.5)];
        assert_eq!(
            map_as_number("NameError: x", line, &paris, Language::Python),
            None
        );
        assert_eq!(
            map_as_number(ADDED, "x = other(1) + 1", &paris, Language::Python),
            None
        );
        assert_eq!(
            map_as_number(
                ADDED,
                "x = get_weather(\"Paris\" + 1",
                &paris,
                Language::Python
            ),
            None
        );
        assert_eq!(
            map_as_number(ADDED, line, &paris, Language::JavaScript),
            None
        );
    }
}
