//! One attack of the audit: its name (a sentence saying what is contained) and how
//! to try it on a column (a runtime name, or `host`).

/// An attack and its check.
pub struct Attack {
    /// What must hold, as a sentence: `curried_values_count_against_the_memory_limit`.
    pub name: &'static str,
    /// Tries the attack on `column`: `None` when it does not apply there, else
    /// `Ok(how it was contained)` (deterministic text, no timings) or
    /// `Err(what got through)`.
    pub run: fn(column: &str) -> Option<Result<String, String>>,
}
