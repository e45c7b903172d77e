//! What a script's run produces and how the host judges it: the [`ScriptOutput`]
//! wire contract, output specs and their checks, the record of an accepted final
//! result, and typed final answers.

pub(crate) mod answer;
pub(crate) mod final_output;
pub(crate) mod schema_budget;
pub(crate) mod script_output;
pub(crate) mod spec;
