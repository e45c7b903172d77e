//! A Rhai session as bytes: its variables, each value with its Rhai type (an
//! integer stays an integer, a character a character, a blob a blob, a float its
//! exact bits), and the source of every script that defined functions, compiled
//! again on restore (Rhai cannot write out a compiled function). A value that
//! cannot be kept (an anonymous function or a closure, whose compiled body has no
//! name to find it by again; a timestamp; a host type) is an error naming its
//! variable.

use codeact_runtime::SnapshotError;
use rhai::{Array, Blob, Dynamic, FnPtr, ImmutableString, Map};

/// What a snapshot keeps of a session.
#[derive(Debug)]
pub(crate) struct SavedSession {
    /// The variables, oldest first, as the scope held them.
    pub(crate) variables: Vec<SavedVariable>,
    /// The scripts that defined the session's functions, in order.
    pub(crate) function_sources: Vec<String>,
}

/// One variable of the scope.
#[derive(Debug)]
pub(crate) struct SavedVariable {
    pub(crate) name: String,
    pub(crate) constant: bool,
    pub(crate) value: Saved,
}

/// A Rhai value with its type.
#[derive(Debug)]
pub(crate) enum Saved {
    Unit,
    Bool(bool),
    Int(i64),
    /// The float's bits: NaN and the infinities survive.
    Float(u64),
    Char(char),
    Str(String),
    Blob(Vec<u8>),
    Array(Vec<Saved>),
    Map(Vec<(String, Saved)>),
    /// A function pointer by name, with nothing curried or captured.
    Fn(String),
}

/// The deepest value kept, past which a snapshot refuses (the nesting limit of
/// the session's own values is far below).
const MAX_DEPTH: usize = 10_000;

/// `value` with its type, or why it cannot be kept (`variable` names it).
pub(crate) fn save(variable: &str, value: &Dynamic) -> Result<Saved, SnapshotError> {
    save_at(value, 0).map_err(|why| SnapshotError::Value {
        variable: variable.to_string(),
        why,
    })
}

fn save_at(value: &Dynamic, depth: usize) -> Result<Saved, String> {
    if depth > MAX_DEPTH {
        return Err(format!("it is nested deeper than {MAX_DEPTH}"));
    }
    let value = value.flatten_clone();
    if value.is_unit() {
        return Ok(Saved::Unit);
    }
    if let Ok(b) = value.as_bool() {
        return Ok(Saved::Bool(b));
    }
    if let Ok(i) = value.as_int() {
        return Ok(Saved::Int(i));
    }
    if let Ok(f) = value.as_float() {
        return Ok(Saved::Float(f.to_bits()));
    }
    if let Ok(c) = value.as_char() {
        return Ok(Saved::Char(c));
    }
    if value.is_string() {
        let text = value.cast::<ImmutableString>();
        return Ok(Saved::Str(text.to_string()));
    }
    if value.is_blob() {
        return Ok(Saved::Blob(value.cast::<Blob>()));
    }
    if value.is_array() {
        let items = value.cast::<Array>();
        return items
            .iter()
            .map(|item| save_at(item, depth + 1))
            .collect::<Result<_, _>>()
            .map(Saved::Array);
    }
    if value.is_map() {
        let map = value.cast::<Map>();
        return map
            .iter()
            .map(|(key, item)| Ok((key.to_string(), save_at(item, depth + 1)?)))
            .collect::<Result<_, String>>()
            .map(Saved::Map);
    }
    if value.is_fnptr() {
        let pointer = value.cast::<FnPtr>();
        if pointer.is_anonymous() {
            return Err(
                "it is an anonymous function, which cannot be found again by name; define it with `fn name(…)` to keep it"
                    .into(),
            );
        }
        if !pointer.curry().is_empty() {
            return Err(format!(
                "it is a closure over {} captured value(s), which live outside the script's source",
                pointer.curry().len()
            ));
        }
        return Ok(Saved::Fn(pointer.fn_name().to_string()));
    }
    Err(format!(
        "it holds a {}, which has no form outside this process",
        value.type_name()
    ))
}

/// The Rhai value `saved` describes.
pub(crate) fn load(saved: Saved) -> Result<Dynamic, SnapshotError> {
    Ok(match saved {
        Saved::Unit => Dynamic::UNIT,
        Saved::Bool(b) => Dynamic::from_bool(b),
        Saved::Int(i) => Dynamic::from_int(i),
        Saved::Float(bits) => Dynamic::from_float(f64::from_bits(bits)),
        Saved::Char(c) => Dynamic::from_char(c),
        Saved::Str(text) => Dynamic::from(text),
        Saved::Blob(bytes) => Dynamic::from_blob(bytes),
        Saved::Array(items) => {
            Dynamic::from_array(items.into_iter().map(load).collect::<Result<Array, _>>()?)
        }
        Saved::Map(entries) => {
            let mut map = Map::new();
            for (key, item) in entries {
                map.insert(key.into(), load(item)?);
            }
            Dynamic::from_map(map)
        }
        Saved::Fn(name) => Dynamic::from(FnPtr::new(name.as_str()).map_err(|e| {
            SnapshotError::Corrupt(format!("a function pointer to '{name}' is not valid: {e}"))
        })?),
    })
}
