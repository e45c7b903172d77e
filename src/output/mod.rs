//! What a script's run produces and how the host judges it: the [`ScriptOutput`]
//! wire contract, output specs and their checks, the record of an accepted final
//! result, and typed final answers.

pub(crate) mod answer;
pub(crate) mod final_output;
pub(crate) mod schema_budget;
pub(crate) mod script_output;
pub(crate) mod spec;

pub use answer::{AnswerField, FinalAnswer};
pub use final_output::{
    Artifact, ArtifactError, DEFAULT_CONTENT_CAP, FinalOutput, Validation, artifact_path,
    open_regular_beneath, rfc3339_utc,
};
pub use script_output::{Malformed, NotAnOutput, ScriptOutput};

pub use codeact_rhai::{RhaiValidator, ValidatorLoadError, Verdict};
pub use spec::{
    Check, ExtraCheck, OnValidatorError, OutputContract, OutputSpec, OutputSpecError, RefusedBy,
    content_text,
};
