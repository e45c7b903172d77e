// A typed final answer may hold free text only as `UntrustedText`: a plain
// `String` field must not compile.
use codeact::{FinalAnswer, UntrustedText};

#[derive(serde::Deserialize, schemars::JsonSchema, FinalAnswer)]
struct Review {
    approved: bool,
    summary: String,
    notes: Vec<UntrustedText>,
}

#[derive(serde::Deserialize, schemars::JsonSchema, FinalAnswer)]
struct Nested {
    tags: Option<Vec<String>>,
}

fn main() {}
