//! The text fed back to the model after each step.

use codeact_runtime::LogBuffer;
use serde_json::Value;

/// The feedback for an observation: the value, then what the script printed.
pub fn observation(value: &Value, logs: &LogBuffer, limit: usize) -> String {
    let shown = match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    with_logs(
        &format!("Observation:\n{}", cut_middle(&shown, limit)),
        logs,
        limit,
    )
}

/// The feedback for an error: the message, what the script printed, and what to do.
pub fn error(message: &str, logs: &LogBuffer, limit: usize) -> String {
    let text = with_logs(
        &format!("Error:\n{}", cut_middle(message, limit)),
        logs,
        limit,
    );
    format!("{text}\n\n{FIX_IT}")
}

/// Closes every error: small models otherwise tend to echo the error back.
pub const FIX_IT: &str = "Fix the script and reply with a corrected one.";

fn with_logs(head: &str, logs: &LogBuffer, limit: usize) -> String {
    if logs.is_empty() {
        return head.to_string();
    }
    let printed = logs.render();
    format!(
        "{head}\n\nPrinted output:\n{}",
        cut_middle(printed.trim_end(), limit)
    )
}

/// `text` cut to about `limit` characters by removing its middle, with a marker
/// saying how much went. The start and the end are what a model needs most: the
/// first lines of a result and the last lines of a trace.
pub fn cut_middle(text: &str, limit: usize) -> String {
    let total = text.chars().count();
    if total <= limit {
        return text.to_string();
    }
    let keep = limit / 2;
    let head: String = text.chars().take(keep).collect();
    let tail: String = text.chars().skip(total - keep).collect();
    format!("{head}\n… [{} characters cut] …\n{tail}", total - 2 * keep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn long_feedback_is_cut_in_the_middle_with_a_marker() {
        let text: String = (0..1000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let cut = cut_middle(&text, 100);
        assert!(cut.starts_with(&text[..50]));
        assert!(cut.ends_with(&text[950..]));
        assert!(cut.contains("… [900 characters cut] …"));
    }

    #[test]
    fn an_observation_shows_strings_raw_and_other_values_as_json_then_logs() {
        let mut logs = LogBuffer::new(100);
        logs.push_line("step 1");
        assert_eq!(
            observation(&json!("plain"), &LogBuffer::new(10), 100),
            "Observation:\nplain"
        );
        assert_eq!(
            observation(&json!({"a": [1]}), &logs, 100),
            "Observation:\n{\"a\":[1]}\n\nPrinted output:\nstep 1"
        );
    }

    #[test]
    fn an_error_carries_its_message_and_the_logs() {
        let mut logs = LogBuffer::new(100);
        logs.push_line("before the crash");
        assert_eq!(
            error("boom (line 2)", &logs, 100),
            format!("Error:\nboom (line 2)\n\nPrinted output:\nbefore the crash\n\n{FIX_IT}")
        );
    }
}
