//! JSON -> Rhai -> JSON never panics and keeps every value JSON can hold exactly
//! (integers that fit i64, strings, bools, null, arrays, objects).
//!
//! Shared by the fuzz target of the same name and by `cli/tests/suite/adversarial.rs`,
//! which replays the seeds under `fixtures/fuzz/` on every `cargo test`.

/// Checks one input.
pub fn check(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Ok(dynamic) = codeact_rhai::from_json(&value, 64) else {
        return;
    };
    let back = codeact_rhai::to_json(&dynamic, 64).expect("a value that came from JSON goes back");
    if !has_big_or_float_number(&value) {
        assert_eq!(back, value);
    }
}

fn has_big_or_float_number(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::Number(n) => n.as_i64().is_none(),
        serde_json::Value::Array(items) => items.iter().any(has_big_or_float_number),
        serde_json::Value::Object(map) => map.values().any(has_big_or_float_number),
        _ => false,
    }
}
