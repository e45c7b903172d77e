//! Whether an answer is right: one set of rules for every host's records.

use serde_json::Value;

use super::tasks::{EvalTask, Match};

/// The tolerance of [`Match::Number`] when the task gives none.
const DEFAULT_TOLERANCE: f64 = 1e-6;

/// Whether `answer` (a final result, `None` when the run ended without one) is
/// right for `task`.
pub fn is_right(task: &EvalTask, answer: Option<&Value>) -> bool {
    let Some(answer) = answer else {
        return false;
    };
    let expected = &task.answer;
    match task.match_ {
        Match::Exact => exact(answer, expected),
        Match::Number => match (number(answer), number(expected)) {
            (Some(got), Some(want)) => {
                (got - want).abs() <= task.tolerance.unwrap_or(DEFAULT_TOLERANCE)
            }
            _ => false,
        },
        Match::Text => match (text(answer), text(expected)) {
            (Some(got), Some(want)) => got.to_lowercase() == want.to_lowercase(),
            _ => false,
        },
        Match::Unordered => match (answer, expected) {
            (Value::Array(got), Value::Array(want)) if got.len() == want.len() => {
                let mut left: Vec<&Value> = want.iter().collect();
                got.iter().all(|item| {
                    match left.iter().position(|candidate| exact(item, candidate)) {
                        Some(found) => {
                            left.swap_remove(found);
                            true
                        }
                        None => false,
                    }
                })
            }
            _ => false,
        },
    }
}

fn exact(answer: &Value, expected: &Value) -> bool {
    match (answer, expected) {
        (Value::Number(_), Value::Number(_)) | (Value::String(_), Value::Number(_)) => {
            number(answer) == number(expected)
        }
        (Value::String(got), Value::String(want)) => got.trim() == want.trim(),
        _ => answer == expected,
    }
}

/// A number, or a string holding one.
fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A string, or a number's shortest form (so `"13"` and `13` compare as text).
fn text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.trim().to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn task(answer: Value, match_: Match) -> EvalTask {
        EvalTask {
            id: "t".into(),
            category: String::new(),
            task: String::new(),
            tools: Vec::new(),
            answer,
            match_,
            tolerance: Some(0.01),
        }
    }

    #[test]
    fn exact_answers_compare_numbers_by_value_and_accept_a_numeric_string() {
        let t = task(json!(391), Match::Exact);
        assert!(is_right(&t, Some(&json!(391.0))));
        assert!(is_right(&t, Some(&json!(" 391 "))));
        assert!(!is_right(&t, Some(&json!(392))));
        assert!(!is_right(&t, Some(&json!([391]))));
        assert!(!is_right(&t, None));
    }

    #[test]
    fn a_boolean_is_not_taken_for_a_number_or_a_string() {
        assert!(!is_right(&task(json!(1), Match::Exact), Some(&json!(true))));
        assert!(is_right(
            &task(json!(true), Match::Exact),
            Some(&json!(true))
        ));
        assert!(!is_right(
            &task(json!(true), Match::Exact),
            Some(&json!("true"))
        ));
    }

    #[test]
    fn numbers_within_the_tolerance_are_right_and_beyond_it_wrong() {
        let t = task(json!(8.58), Match::Number);
        assert!(is_right(&t, Some(&json!(8.580000001))));
        assert!(is_right(&t, Some(&json!("8.585"))));
        assert!(!is_right(&t, Some(&json!(8.6))));
        assert!(!is_right(&t, Some(&json!("about 8.58"))));
    }

    #[test]
    fn text_ignores_case_and_surrounding_space_but_not_extra_words() {
        let t = task(json!("Paris"), Match::Text);
        assert!(is_right(&t, Some(&json!(" paris\n"))));
        assert!(!is_right(&t, Some(&json!("Paris is warmer"))));
    }

    #[test]
    fn unordered_lists_match_as_multisets() {
        let t = task(json!(["desk", "pen"]), Match::Unordered);
        assert!(is_right(&t, Some(&json!(["pen", "desk"]))));
        assert!(!is_right(&t, Some(&json!(["pen", "pen"]))));
        assert!(!is_right(&t, Some(&json!(["pen"]))));
        assert!(!is_right(&t, Some(&json!("desk, pen"))));
    }
}
