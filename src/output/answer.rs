//! Typed final answers: a Rust type whose JSON Schema is generated, enforced on the
//! model's result, and which may hold free text only as [`UntrustedText`].
//!
//! ```
//! use codeact::{FinalAnswer, UntrustedText};
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema, FinalAnswer)]
//! struct Review {
//!     approved: bool,
//!     score: u8,
//!     summary: UntrustedText,
//!     notes: Vec<UntrustedText>,
//! }
//! ```
//!
//! A `summary: String` field does not compile: the text came from a model, and the
//! type system keeps it marked as such wherever the answer goes (see
//! `tests/ui/plain_string_field.rs`).

use std::collections::{BTreeMap, HashMap};

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::untrusted::UntrustedText;

/// A type that can be a field of a [`FinalAnswer`]: anything that cannot smuggle
/// unmarked free text. Implemented for numbers, booleans, `char`, `()`,
/// [`UntrustedText`], other `FinalAnswer` types (by the derive), and `Option`,
/// `Vec`, `Box`, arrays and maps of those (maps keyed by `UntrustedText`). Not for
/// `String`, `&str` or `serde_json::Value`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a field of a FinalAnswer: it could hold unmarked free text from a model",
    label = "free text here must be `codeact::UntrustedText`",
    note = "use `UntrustedText` for text the model writes, or a type that derives `FinalAnswer`"
)]
pub trait AnswerField {}

/// A final answer of a known Rust type: deserializable, with a generated JSON
/// Schema, and holding free text only as [`UntrustedText`]. Derive it with
/// `#[derive(FinalAnswer)]` next to `Deserialize` and `schemars::JsonSchema`; run
/// an agent for one with [`Agent::run_typed`](crate::Agent::run_typed).
pub trait FinalAnswer: DeserializeOwned + schemars::JsonSchema + AnswerField {
    /// The JSON Schema of this type, as enforced on the model's result.
    fn answer_schema() -> Value {
        serde_json::to_value(schemars::schema_for!(Self)).unwrap_or(Value::Bool(true))
    }
}

macro_rules! answer_fields {
    ($($ty:ty),* $(,)?) => { $(impl AnswerField for $ty {})* };
}

answer_fields!(
    bool,
    char,
    (),
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    f32,
    f64,
    UntrustedText,
);

impl<T: AnswerField> AnswerField for Option<T> {}
impl<T: AnswerField> AnswerField for Vec<T> {}
impl<T: AnswerField + ?Sized> AnswerField for Box<T> {}
impl<T: AnswerField, const N: usize> AnswerField for [T; N] {}
impl<T: AnswerField> AnswerField for BTreeMap<UntrustedText, T> {}
impl<T: AnswerField, S> AnswerField for HashMap<UntrustedText, T, S> {}

/// Called by the code `#[derive(FinalAnswer)]` generates, once per field: it
/// compiles only when the field's type is an [`AnswerField`].
#[doc(hidden)]
pub fn __assert_answer_field<T: AnswerField + ?Sized>() {}
