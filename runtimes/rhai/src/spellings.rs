//! Methods models bring from JavaScript and Python that Rhai spells otherwise or
//! lacks, so a small model's first script runs instead of costing a step on
//! "Function not found" (`(1..n).filter(…)`, `text.slice(i, j)`).
//!
//! - `slice(start)` and `slice(start, end)` on strings (by character) and arrays,
//!   as JavaScript's: `end` excluded, a negative index counts from the end, and
//!   indexes past either end are clamped.
//! - `rev()` on arrays, and Rust's character predicates (`is_alphanumeric`,
//!   `is_alphabetic`, `is_numeric`, `is_digit`, `is_whitespace`, `is_uppercase`,
//!   `is_lowercase`); `chars` is an array (`bounded_builtins`).
//! - `includes(text)` on strings, JavaScript's `contains`.
//! - `filter`, `map` and `reduce` on ranges (`0..n`, `0..=n`), as on arrays. The
//!   range is walked, never collected first, and each element is a call of the
//!   script's closure, so the operation limit and the deadline hold as in a loop.
//! - `for key in map` walks the map's keys (in Rhai's order, sorted), as Python's
//!   `for key in d` and JavaScript's `for (key in o)` do; Rhai alone refuses it
//!   ("For loop expects iterable type"). Models write it to count words and total
//!   products.
//! - `array.reverse()` still reverses the array in place, and also returns it, so
//!   `let backwards = words.reverse()` holds the reversed words as in JavaScript
//!   (Rhai's own returns nothing, and the next line failed on `()`).

use std::ops::{Range, RangeInclusive};

use std::any::TypeId;

use rhai::{
    Array, Dynamic, Engine, EvalAltResult, FnPtr, INT, ImmutableString, Map, Module,
    NativeCallContext,
};

type Called<T> = Result<T, Box<EvalAltResult>>;

/// Registers the methods on `engine`.
pub(crate) fn register(engine: &mut Engine) {
    engine.register_fn("includes", |text: &mut ImmutableString, part: &str| {
        text.contains(part)
    });
    engine.register_fn("includes", |text: &mut ImmutableString, c: char| {
        text.contains(c)
    });
    engine.register_fn("slice", |text: &mut ImmutableString, start: INT| {
        let chars: Vec<char> = text.chars().collect();
        let (from, to) = bounds(chars.len(), start, None);
        chars[from..to].iter().collect::<String>()
    });
    engine.register_fn(
        "slice",
        |text: &mut ImmutableString, start: INT, end: INT| {
            let chars: Vec<char> = text.chars().collect();
            let (from, to) = bounds(chars.len(), start, Some(end));
            chars[from..to].iter().collect::<String>()
        },
    );
    engine.register_fn("slice", |array: &mut Array, start: INT| {
        let (from, to) = bounds(array.len(), start, None);
        array[from..to].to_vec()
    });
    engine.register_fn("slice", |array: &mut Array, start: INT, end: INT| {
        let (from, to) = bounds(array.len(), start, Some(end));
        array[from..to].to_vec()
    });
    // Rust's iterator spelling, on arrays: a reversed copy.
    engine.register_fn("rev", |array: &mut Array| {
        array.iter().rev().cloned().collect::<Array>()
    });
    // In place, as Rhai's own, and the array too, as JavaScript's.
    engine.register_fn("reverse", |array: &mut Array| {
        array.reverse();
        array.clone()
    });
    let mut map_keys = Module::new();
    map_keys.set_iter(TypeId::of::<Map>(), |map: Dynamic| {
        let keys: Vec<Dynamic> = map
            .cast::<Map>()
            .into_keys()
            .map(|key| Dynamic::from(ImmutableString::from(key.as_str())))
            .collect();
        Box::new(keys.into_iter())
    });
    engine.register_global_module(map_keys.into());
    // Rust's predicates on characters.
    engine.register_fn("is_alphanumeric", |c: char| c.is_alphanumeric());
    engine.register_fn("is_alphabetic", |c: char| c.is_alphabetic());
    engine.register_fn("is_numeric", |c: char| c.is_numeric());
    engine.register_fn("is_digit", |c: char| c.is_ascii_digit());
    engine.register_fn("is_whitespace", |c: char| c.is_whitespace());
    engine.register_fn("is_uppercase", |c: char| c.is_uppercase());
    engine.register_fn("is_lowercase", |c: char| c.is_lowercase());
    register_range_methods::<Range<INT>>(engine);
    register_range_methods::<RangeInclusive<INT>>(engine);
}

/// JavaScript's `slice` bounds over `len` items: negative from the end, clamped,
/// and an end before the start gives nothing.
fn bounds(len: usize, start: INT, end: Option<INT>) -> (usize, usize) {
    let len = INT::try_from(len).unwrap_or(INT::MAX);
    let at = |index: INT| {
        let index = if index < 0 {
            len.saturating_add(index)
        } else {
            index
        };
        usize::try_from(index.clamp(0, len)).unwrap_or(0)
    };
    let from = at(start);
    let to = end.map_or(usize::try_from(len).unwrap_or(0), at);
    (from, to.max(from))
}

fn register_range_methods<R>(engine: &mut Engine)
where
    R: IntoIterator<Item = INT> + Clone + Send + Sync + 'static,
{
    engine.register_fn(
        "filter",
        |ctx: NativeCallContext, range: &mut R, keep: FnPtr| -> Called<Array> {
            let mut kept = Array::new();
            for x in range.clone() {
                let item = Dynamic::from(x);
                let verdict: Dynamic = keep.call_within_context(&ctx, (item.clone(),))?;
                if verdict.as_bool().unwrap_or(false) {
                    kept.push(item);
                }
            }
            Ok(kept)
        },
    );
    engine.register_fn(
        "map",
        |ctx: NativeCallContext, range: &mut R, change: FnPtr| -> Called<Array> {
            let mut mapped = Array::new();
            for x in range.clone() {
                mapped.push(change.call_within_context(&ctx, (Dynamic::from(x),))?);
            }
            Ok(mapped)
        },
    );
    engine.register_fn(
        "reduce",
        |ctx: NativeCallContext, range: &mut R, fold: FnPtr, initial: Dynamic| -> Called<Dynamic> {
            let mut total = initial;
            for x in range.clone() {
                total = fold.call_within_context(&ctx, (total, Dynamic::from(x)))?;
            }
            Ok(total)
        },
    );
}

#[cfg(test)]
mod tests {
    use super::bounds;

    #[test]
    fn slice_bounds_follow_javascript() {
        assert_eq!(bounds(5, 1, Some(3)), (1, 3));
        assert_eq!(bounds(5, -2, None), (3, 5));
        assert_eq!(bounds(5, 0, Some(-1)), (0, 4));
        assert_eq!(bounds(5, 4, Some(2)), (4, 4), "an end before the start");
        assert_eq!(bounds(5, -99, Some(99)), (0, 5), "clamped");
    }

    #[test]
    fn a_for_loop_over_a_map_walks_its_keys() {
        let mut engine = rhai::Engine::new();
        super::register(&mut engine);
        let walked: String = engine
            .eval(
                r#"let counts = #{b: 2, a: 1, c: 3}; let seen = ""; let total = 0;
                   for key in counts { seen += key; total += counts[key]; }
                   `${seen} ${total}`"#,
            )
            .expect("runs");
        assert_eq!(walked, "abc 6");
    }

    #[test]
    fn reverse_reverses_an_array_in_place_and_returns_it() {
        let mut engine = rhai::Engine::new();
        super::register(&mut engine);
        let got: String = engine
            .eval(
                r#"let words = [1, 2, 3]; let backwards = words.reverse();
                   `${backwards} ${words}`"#,
            )
            .expect("runs");
        assert_eq!(got, "[3, 2, 1] [3, 2, 1]");
    }

    #[test]
    fn strings_answer_includes_as_contains() {
        let mut engine = rhai::Engine::new();
        super::register(&mut engine);
        let found: bool = engine
            .eval(r#""2024 ERROR E42".includes("ERROR") && !"ok".includes('x')"#)
            .expect("runs");
        assert!(found);
    }
}
