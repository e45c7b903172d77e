//! How Python writes a tool's parameter names as keyword arguments.

use codeact_runtime::{Spelling, Written};

/// Python's spelling of parameter names, shared by the CPython and MicroPython
/// guests: an identifier as it is; a keyword with a trailing `_`, as PEP 8 has
/// it (`from` → `from_`, `class` → `class_`); any other name with each
/// character an identifier cannot hold as `_`, and a leading `_` before a
/// digit (`max-results` → `max_results`, `2fa` → `_2fa`). The host maps such a
/// name back to the schema's before the call reaches the tool.
pub const PYTHON_SPELLING: Spelling = Spelling {
    language: "Python",
    rule: python_rule,
};

/// Python's keywords (`keyword.kwlist`). Its soft keywords (`match`, `case`,
/// `type`, `_`) are identifiers in a call and need no other spelling.
#[rustfmt::skip]
pub const PYTHON_KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
    "continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global",
    "if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return",
    "try", "while", "with", "yield",
];

fn python_rule(name: &str) -> Written {
    if codeact_runtime::is_identifier(name) {
        return if PYTHON_KEYWORDS.contains(&name) {
            Written::Respelled(format!("{name}_"))
        } else {
            Written::AsIs
        };
    }
    let mut spelled: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if spelled.starts_with(|c: char| c.is_ascii_digit()) {
        spelled.insert(0, '_');
    }
    Written::Respelled(spelled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_gain_an_underscore_and_other_names_become_identifiers() {
        assert_eq!(PYTHON_SPELLING.write("city"), Written::AsIs);
        assert_eq!(PYTHON_SPELLING.write("match"), Written::AsIs);
        assert_eq!(
            PYTHON_SPELLING.write("from"),
            Written::Respelled("from_".into())
        );
        assert_eq!(
            PYTHON_SPELLING.write("max-results"),
            Written::Respelled("max_results".into())
        );
        assert_eq!(
            PYTHON_SPELLING.write("2fa"),
            Written::Respelled("_2fa".into())
        );
        assert_eq!(
            PYTHON_SPELLING.write("a b.c"),
            Written::Respelled("a_b_c".into())
        );
        assert_eq!(PYTHON_SPELLING.write(&"x".repeat(65)), Written::Quoted);
    }
}
