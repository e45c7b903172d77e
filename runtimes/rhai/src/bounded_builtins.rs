//! Replacements for standard-library builtins whose cost one operation does not
//! bound. The deadline is checked between operations, so a builtin call must end
//! quickly on its own, and Rhai checks a builtin's result against the per-value
//! caps only after building it. These versions compute the result's size first,
//! refuse past the string cap before allocating, and build the result with bulk
//! copies. Registered on the engine, they take precedence over the package's.
//!
//! - `pad(len, padding)`: Rhai's loops forever on an empty padding string (no
//!   operation is counted inside, so nothing could stop it), and pushes one
//!   character at a time, several seconds for a string at the cap in debug builds.
//! - `replace(find, substitute)`: Rhai's builds the whole result before the size
//!   check, so a million matches each replaced by a megabyte allocate a terabyte.
//! - `split`, `split_rev`, `to_chars` (and `chars`, an array here): Rhai's build an array of one item per
//!   piece before the array cap is checked: `split("")` of a string at the cap made
//!   16 million strings (about 1 GB) before being refused. These count the pieces
//!   first (one pass over the string) and refuse past the array cap.

use rhai::{
    Array, Dynamic, Engine, EvalAltResult, INT, ImmutableString, NativeCallContext, Position,
};

type Outcome = Result<(), Box<EvalAltResult>>;
type Splits = Result<Array, Box<EvalAltResult>>;

/// Registers the replacements on `engine`.
pub(crate) fn register(engine: &mut Engine) {
    register_splits(engine);
    engine.register_fn(
        "pad",
        |ctx: NativeCallContext, text: &mut ImmutableString, len: INT, padding: char| {
            let mut buffer = [0; 4];
            pad(&ctx, text, len, padding.encode_utf8(&mut buffer))
        },
    );
    engine.register_fn(
        "pad",
        |ctx: NativeCallContext, text: &mut ImmutableString, len: INT, padding: &str| {
            pad(&ctx, text, len, padding)
        },
    );
    engine.register_fn(
        "replace",
        |ctx: NativeCallContext, text: &mut ImmutableString, find: &str, substitute: &str| {
            replace(&ctx, text, find, substitute)
        },
    );
    engine.register_fn(
        "replace",
        |ctx: NativeCallContext, text: &mut ImmutableString, find: &str, substitute: char| {
            let mut buffer = [0; 4];
            replace(&ctx, text, find, substitute.encode_utf8(&mut buffer))
        },
    );
    engine.register_fn(
        "replace",
        |ctx: NativeCallContext, text: &mut ImmutableString, find: char, substitute: &str| {
            let mut buffer = [0; 4];
            replace(&ctx, text, find.encode_utf8(&mut buffer), substitute)
        },
    );
    engine.register_fn(
        "replace",
        |ctx: NativeCallContext, text: &mut ImmutableString, find: char, substitute: char| {
            let (mut find_buffer, mut substitute_buffer) = ([0; 4], [0; 4]);
            replace(
                &ctx,
                text,
                find.encode_utf8(&mut find_buffer),
                substitute.encode_utf8(&mut substitute_buffer),
            )
        },
    );
}

/// Registers the splitting functions, each counting its pieces before it builds them.
/// They take the text by value (a reference count), so they stay callable on
/// constants, as Rhai's pure originals are.
fn register_splits(engine: &mut Engine) {
    engine.register_fn("to_chars", |ctx: NativeCallContext, text: &str| -> Splits {
        fits_array(&ctx, text.chars().count())?;
        Ok(text.chars().map(Dynamic::from).collect::<Array>())
    });
    // `text.chars()` and `text.chars` as models write them (Rust's spelling): the
    // characters as an array, so `filter`, `map`, `rev` and `join` work on them
    // (Rhai's own `chars` is a stream with none of these), bounded as `to_chars`.
    let chars = |ctx: NativeCallContext, text: &mut ImmutableString| -> Splits {
        fits_array(&ctx, text.chars().count())?;
        Ok(text.chars().map(Dynamic::from).collect::<Array>())
    };
    engine.register_fn("chars", chars);
    engine.register_fn("get$chars", chars);
    engine.register_fn(
        "split",
        |ctx: NativeCallContext, text: ImmutableString| -> Splits {
            if text.is_empty() {
                return Ok(vec![Dynamic::from(text.clone())]);
            }
            fits_array(&ctx, text.split_whitespace().count())?;
            Ok(text.split_whitespace().map(piece).collect::<Array>())
        },
    );
    engine.register_fn(
        "split",
        |ctx: NativeCallContext, text: ImmutableString, delimiter: &str| -> Splits {
            split(&ctx, &text, delimiter, None, false)
        },
    );
    engine.register_fn(
        "split",
        |ctx: NativeCallContext, text: ImmutableString, delimiter: char| -> Splits {
            let mut buffer = [0; 4];
            split(&ctx, &text, delimiter.encode_utf8(&mut buffer), None, false)
        },
    );
    engine.register_fn(
        "split",
        |ctx: NativeCallContext, text: ImmutableString, delimiter: &str, segments: INT| -> Splits {
            split(&ctx, &text, delimiter, Some(segments), false)
        },
    );
    engine.register_fn(
        "split",
        |ctx: NativeCallContext, text: ImmutableString, delimiter: char, segments: INT| -> Splits {
            let mut buffer = [0; 4];
            split(
                &ctx,
                &text,
                delimiter.encode_utf8(&mut buffer),
                Some(segments),
                false,
            )
        },
    );
    engine.register_fn(
        "split_rev",
        |ctx: NativeCallContext, text: ImmutableString, delimiter: &str| -> Splits {
            split(&ctx, &text, delimiter, None, true)
        },
    );
    engine.register_fn(
        "split_rev",
        |ctx: NativeCallContext, text: ImmutableString, delimiter: char| -> Splits {
            let mut buffer = [0; 4];
            split(&ctx, &text, delimiter.encode_utf8(&mut buffer), None, true)
        },
    );
    engine.register_fn(
        "split_rev",
        |ctx: NativeCallContext, text: ImmutableString, delimiter: &str, segments: INT| -> Splits {
            split(&ctx, &text, delimiter, Some(segments), true)
        },
    );
    engine.register_fn(
        "split_rev",
        |ctx: NativeCallContext, text: ImmutableString, delimiter: char, segments: INT| -> Splits {
            let mut buffer = [0; 4];
            split(
                &ctx,
                &text,
                delimiter.encode_utf8(&mut buffer),
                Some(segments),
                true,
            )
        },
    );
}

/// Rhai's `split`/`split_rev` with and without a segment count, refusing more
/// pieces than the array cap before building them.
fn split(
    ctx: &NativeCallContext,
    text: &ImmutableString,
    delimiter: &str,
    segments: Option<INT>,
    reverse: bool,
) -> Result<Array, Box<EvalAltResult>> {
    let whole = || vec![Dynamic::from(text.clone())];
    let segments = match segments {
        Some(segments) if segments < 1 => return Ok(whole()),
        Some(segments) => Some(usize::try_from(segments).unwrap_or(usize::MAX)),
        None => None,
    };
    if text.is_empty() || (!delimiter.is_empty() && !text.contains(delimiter)) {
        return Ok(whole());
    }
    let pieces = text.split(delimiter).count();
    fits_array(
        ctx,
        segments.map_or(pieces, |segments| segments.min(pieces)),
    )?;
    let items: Array = match (segments, reverse) {
        (None, false) => text.split(delimiter).map(piece).collect(),
        (None, true) => text.rsplit(delimiter).map(piece).collect(),
        (Some(n), false) => text.splitn(n, delimiter).map(piece).collect(),
        (Some(n), true) => text.rsplitn(n, delimiter).map(piece).collect(),
    };
    Ok(items)
}

/// One piece of a split, as a script value.
fn piece(text: &str) -> Dynamic {
    Dynamic::from(ImmutableString::from(text))
}

/// Fails unless an array of `items` fits the engine's array cap.
fn fits_array(ctx: &NativeCallContext, items: usize) -> Result<(), Box<EvalAltResult>> {
    let max = ctx.engine().max_array_size();
    if max == 0 || items <= max {
        Ok(())
    } else {
        Err(Box::new(EvalAltResult::ErrorDataTooLarge(
            "Size of array/BLOB".into(),
            Position::NONE,
        )))
    }
}

/// The error Rhai raises for a string past its cap (sorted as the memory limit).
fn too_large() -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorDataTooLarge(
        "Length of string".into(),
        Position::NONE,
    ))
}

/// Fails unless a string of `bytes` fits the engine's string cap.
fn check_fits(ctx: &NativeCallContext, bytes: Option<usize>) -> Result<usize, Box<EvalAltResult>> {
    let max = ctx.engine().max_string_size();
    match bytes {
        Some(bytes) if max == 0 || bytes <= max => Ok(bytes),
        _ => Err(too_large()),
    }
}

/// Pads `text` with repetitions of `padding` (the last one cut short) until it
/// holds `len` characters; Rhai's semantics, except that an empty padding leaves
/// the text as it is.
fn pad(ctx: &NativeCallContext, text: &mut ImmutableString, len: INT, padding: &str) -> Outcome {
    let Ok(len) = usize::try_from(len) else {
        return if len <= 0 { Ok(()) } else { Err(too_large()) };
    };
    let have = text.chars().count();
    if len <= have || padding.is_empty() {
        return Ok(());
    }
    let missing = len - have;
    let unit = padding.chars().count();
    let (whole, rest) = (missing / unit, missing % unit);
    let tail = &padding[..padding
        .char_indices()
        .nth(rest)
        .map_or(padding.len(), |(at, _)| at)];
    let body = whole.checked_mul(padding.len());
    let bytes = body
        .and_then(|body| body.checked_add(text.len()))
        .and_then(|bytes| bytes.checked_add(tail.len()));
    let bytes = check_fits(ctx, bytes)?;
    let mut out: Vec<u8> = Vec::with_capacity(bytes);
    out.extend_from_slice(text.as_bytes());
    repeat_into(&mut out, padding.as_bytes(), whole);
    out.extend_from_slice(tail.as_bytes());
    *text = into_text(out)?;
    Ok(())
}

/// Appends `unit` `count` times, doubling what is already copied.
fn repeat_into(out: &mut Vec<u8>, unit: &[u8], count: usize) {
    if count == 0 || unit.is_empty() {
        return;
    }
    let start = out.len();
    let body = unit.len() * count;
    out.extend_from_slice(unit);
    while out.len() - start < body {
        let copied = out.len() - start;
        out.extend_from_within(start..start + copied.min(body - copied));
    }
}

/// Replaces every `find` in `text` with `substitute` (between characters when
/// `find` is empty, as Rust and Rhai do), refusing results past the string cap.
fn replace(
    ctx: &NativeCallContext,
    text: &mut ImmutableString,
    find: &str,
    substitute: &str,
) -> Outcome {
    if text.is_empty() {
        return Ok(());
    }
    let matches = if find.is_empty() {
        text.chars().count() + 1
    } else {
        text.matches(find).count()
    };
    let bytes = matches
        .checked_mul(substitute.len())
        .and_then(|added| (text.len() - matches * find.len()).checked_add(added));
    check_fits(ctx, bytes)?;
    *text = text.replace(find, substitute).into();
    Ok(())
}

/// Bytes built from whole UTF-8 strings back into text.
fn into_text(bytes: Vec<u8>) -> Result<ImmutableString, Box<EvalAltResult>> {
    String::from_utf8(bytes)
        .map(ImmutableString::from)
        .map_err(|_| {
            Box::new(EvalAltResult::ErrorRuntime(
                "padding produced invalid text".into(),
                Position::NONE,
            ))
        })
}
