//! Rhai values to and from JSON, with a depth cap so a deeply nested value becomes an
//! error instead of overflowing the native stack.

use rhai::{Array, Dynamic, Map};
use serde_json::{Number, Value};

/// Converts a Rhai value to JSON. Unit is `null`, a char is a one-character string,
/// a blob is an array of byte values. Functions, timestamps, non-finite floats and
/// values nested deeper than `max_depth` are errors naming where they were found.
pub fn to_json(value: &Dynamic, max_depth: usize) -> Result<Value, String> {
    let mut path = String::from("value");
    convert_out(value, 0, max_depth, &mut path)
}

fn convert_out(
    value: &Dynamic,
    depth: usize,
    max_depth: usize,
    path: &mut String,
) -> Result<Value, String> {
    if depth > max_depth {
        return Err(format!(
            "{path} is nested deeper than the nesting depth limit of {max_depth}"
        ));
    }
    if value.is_shared() {
        return convert_out(&value.flatten_clone(), depth, max_depth, path);
    }
    if value.is_unit() {
        return Ok(Value::Null);
    }
    if let Ok(b) = value.as_bool() {
        return Ok(Value::Bool(b));
    }
    if let Ok(i) = value.as_int() {
        return Ok(Value::Number(i.into()));
    }
    if let Ok(f) = value.as_float() {
        return Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| format!("{path} is the float {f}, which JSON cannot hold"));
    }
    if let Ok(c) = value.as_char() {
        return Ok(Value::String(c.to_string()));
    }
    if let Ok(s) = value.as_immutable_string_ref() {
        return Ok(Value::String(s.as_str().to_owned()));
    }
    if let Ok(items) = value.as_array_ref() {
        let mut out = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let len = path.len();
            path.push_str(&format!("[{index}]"));
            out.push(convert_out(item, depth + 1, max_depth, path)?);
            path.truncate(len);
        }
        return Ok(Value::Array(out));
    }
    if let Ok(map) = value.as_map_ref() {
        let mut out = serde_json::Map::new();
        for (key, item) in map.iter() {
            let len = path.len();
            path.push('.');
            path.push_str(key);
            out.insert(
                key.to_string(),
                convert_out(item, depth + 1, max_depth, path)?,
            );
            path.truncate(len);
        }
        return Ok(Value::Object(out));
    }
    if let Ok(blob) = value.as_blob_ref() {
        return Ok(Value::Array(blob.iter().map(|b| Value::from(*b)).collect()));
    }
    Err(format!(
        "{path} is a {}, which has no JSON form; return strings, numbers, booleans, arrays, maps or ()",
        value.type_name()
    ))
}

/// Converts JSON to a Rhai value. Integers that fit `i64` stay integers; larger ones
/// become floats. Values nested deeper than `max_depth` are an error.
pub fn from_json(value: &Value, max_depth: usize) -> Result<Dynamic, String> {
    convert_in(value, 0, max_depth)
}

fn convert_in(value: &Value, depth: usize, max_depth: usize) -> Result<Dynamic, String> {
    if depth > max_depth {
        return Err(format!(
            "a JSON value is nested deeper than the nesting depth limit of {max_depth}"
        ));
    }
    Ok(match value {
        Value::Null => Dynamic::UNIT,
        Value::Bool(b) => Dynamic::from_bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Dynamic::from_int(i),
            None => Dynamic::from_float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Dynamic::from(s.clone()),
        Value::Array(items) => {
            let array: Array = items
                .iter()
                .map(|item| convert_in(item, depth + 1, max_depth))
                .collect::<Result<_, _>>()?;
            Dynamic::from_array(array)
        }
        Value::Object(entries) => {
            let mut map = Map::new();
            for (key, item) in entries {
                map.insert(key.as_str().into(), convert_in(item, depth + 1, max_depth)?);
            }
            Dynamic::from_map(map)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_survives_a_round_trip_through_rhai_values() {
        let original = json!({
            "name": "Zoë", "count": 3, "ratio": 0.5, "ok": true, "none": null,
            "items": [1, "two", [3.5], {"four": 4}]
        });
        let dynamic = from_json(&original, 64).expect("converts in");
        assert_eq!(to_json(&dynamic, 64).expect("converts out"), original);
    }

    #[test]
    fn integers_beyond_i64_become_floats() {
        let dynamic = from_json(&json!(u64::MAX), 64).expect("converts in");
        assert!(dynamic.is_float());
    }

    #[test]
    fn a_non_finite_float_is_an_error_naming_its_path() {
        let mut map = Map::new();
        map.insert("x".into(), Dynamic::from_float(f64::NAN));
        let err = to_json(&Dynamic::from_map(map), 64).expect_err("NaN has no JSON form");
        assert!(err.contains("value.x"), "{err}");
    }

    #[test]
    fn values_nested_past_the_limit_are_refused_both_ways() {
        let mut deep = Dynamic::UNIT;
        for _ in 0..10 {
            deep = Dynamic::from_array(vec![deep]);
        }
        assert!(
            to_json(&deep, 5)
                .expect_err("too deep")
                .contains("nesting depth")
        );
        let json = to_json(&deep, 64).expect("within limit");
        assert!(from_json(&json, 5).is_err());
    }
}
