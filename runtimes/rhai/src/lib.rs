//! The Rhai backend of codeact: one hardened [`rhai::Engine`] shared by every session,
//! one [`rhai::Scope`] per session.
//!
//! ```
//! use std::sync::Arc;
//! use codeact_rhai::RhaiRuntime;
//! use codeact_runtime::{Limits, NoTools, Runtime};
//!
//! let runtime = RhaiRuntime::new(Limits::default());
//! let mut session = runtime.new_session(Arc::new(NoTools)).unwrap();
//! session.run("let x = 40;").unwrap();
//! let outcome = session.run("final_result(x + 2)").unwrap();
//! assert_eq!(outcome.completion.unwrap()["value"], 42);
//! ```

mod alarm;
mod big_stack;
mod bounded_builtins;
mod convert;
mod engine;
mod errors;
mod memory_meter;
mod parallel;
mod run_state;
mod semicolons;
mod session;
mod snapshot;
mod snapshot_codec;
mod spellings;
mod stops;
mod tool_functions;
mod validator;

use std::sync::Arc;

use codeact_runtime::{
    HostError, Limits, Runtime, RuntimeInfo, Session, Snapshot, SnapshotError, Spelling,
    ToolDispatch, ToolSpec, Written,
};
use rhai::Engine;

#[cfg(target_family = "wasm")]
pub use alarm::host_alarm;
pub use convert::{from_json, to_json};
pub use errors::ERROR_HINTS;
pub use session::RhaiSession;
pub use validator::{RhaiPolicy, RhaiValidator, ValidatorLoadError, Verdict};

/// The Rhai runtime: building one costs a few microseconds (the standard library is
/// built once per process and shared); a session costs an empty `Scope`.
pub struct RhaiRuntime {
    engine: Arc<Engine>,
    limits: Arc<Limits>,
}

impl std::fmt::Debug for RhaiRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RhaiRuntime")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// The Rhai prompt card template, shared with the `wasm:rhai` guest (the same
/// engine and prelude compiled to WASI).
pub const CARD_TEMPLATE: &str = include_str!("../prompts/rhai.md");

static INFO: RuntimeInfo = RuntimeInfo {
    name: "rhai",
    language: "Rhai",
    fence_tags: &["rhai"],
    card_template: CARD_TEMPLATE,
    enforcement: engine::ENFORCEMENT,
    parallel_calls: codeact_runtime::ParallelCalls::Together,
};

impl RhaiRuntime {
    /// A runtime whose sessions run under `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            engine: Arc::new(engine::build(&limits)),
            limits: Arc::new(limits),
        }
    }

    /// Starts a session with concrete type, for callers that want [`RhaiSession`]
    /// rather than a boxed [`Session`].
    pub fn session(&self, tools: Arc<dyn ToolDispatch>) -> RhaiSession {
        RhaiSession::new(self.engine.clone(), self.limits.clone(), tools)
    }
}

impl Runtime for RhaiRuntime {
    fn info(&self) -> &RuntimeInfo {
        &INFO
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }

    fn tool_signature(&self, tool: &ToolSpec) -> String {
        tool_signature(tool)
    }

    fn spelling(&self) -> Spelling {
        SPELLING
    }

    fn new_session(&self, tools: Arc<dyn ToolDispatch>) -> Result<Box<dyn Session>, HostError> {
        Ok(Box::new(self.session(tools)))
    }

    /// A new session with the snapshot's variables and its functions compiled
    /// again; the limits are this runtime's, whatever the snapshotted one's were.
    fn restore(
        &self,
        snapshot: &Snapshot,
        tools: Arc<dyn ToolDispatch>,
    ) -> Result<Box<dyn Session>, SnapshotError> {
        let payload = snapshot.open(INFO.name, SNAPSHOT_IDENTITY)?;
        let saved = snapshot_codec::decode(payload)?;
        let mut session = self.session(tools);
        session.load(saved)?;
        Ok(Box::new(session))
    }
}

/// What a Rhai snapshot is bound to besides the runtime's name: this crate's
/// version, which pins the Rhai it compiles the functions' sources with.
pub(crate) const SNAPSHOT_IDENTITY: &str = concat!("codeact-rhai ", env!("CARGO_PKG_VERSION"));

/// How a Rhai script calls `tool`: `name(#{field: type, …}) -> returns` (an
/// optional field as `field?: type`), or
/// `github.create_issue(#{…})` for a namespaced tool whose member Rhai can call
/// as a method of the server's map.
pub fn tool_signature(tool: &ToolSpec) -> String {
    let fields: Vec<String> = tool
        .signature_fields(&SPELLING)
        .into_iter()
        .map(|f| {
            let optional = if f.required { "" } else { "?" };
            format!("{}{optional}: {}", f.name, rhai_type(&f.ty))
        })
        .collect();
    let call = match tool.namespaced() {
        Some((namespace, member)) if codeact_runtime::rhai_member(member) => {
            format!("{namespace}.{member}")
        }
        _ => tool.name.clone(),
    };
    format!(
        "{call}(#{{{}}}){}",
        tool.join_signature_fields(&fields),
        tool.return_suffix()
    )
}

/// How Rhai writes a parameter name as a key of the arguments' map: an
/// identifier that is no keyword or reserved word as it is (`#{city: "Oslo"}`),
/// anything else as a string key (`#{"fn": 1, "max-results": 5}`), which Rhai
/// takes for the same key, so nothing is mapped back.
pub const SPELLING: Spelling = Spelling {
    language: "Rhai",
    rule: |name| {
        if is_rhai_identifier(name) && !KEYWORDS.contains(&name) {
            Written::AsIs
        } else {
            Written::Quoted
        }
    },
};

/// Whether Rhai reads `name` as an identifier: ASCII letters, digits and `_`,
/// not starting with a digit, with at least one letter before any digit
/// (`_1` and `__` are not).
fn is_rhai_identifier(name: &str) -> bool {
    let mut letter_seen = false;
    for c in name.chars() {
        match c {
            '_' => {}
            c if c.is_ascii_alphabetic() => letter_seen = true,
            c if c.is_ascii_digit() && letter_seen => {}
            _ => return false,
        }
    }
    letter_seen
}

/// Rhai's keywords, its reserved words and the names of its built-in keyword
/// functions: a map key spelled like one is written as a string.
#[rustfmt::skip]
pub const KEYWORDS: &[&str] = &[
    // Keywords.
    "as", "break", "catch", "const", "continue", "do", "else", "export", "false", "fn", "for",
    "global", "if", "import", "in", "let", "loop", "private", "return", "switch", "this",
    "throw", "true", "try", "until", "while",
    // Keyword functions.
    "call", "curry", "debug", "eval", "Fn", "is_def_fn", "is_def_var", "is_shared", "print",
    "type_of",
    // Reserved for the future.
    "async", "await", "case", "default", "exit", "go", "goto", "is", "match", "module", "new",
    "nil", "null", "package", "protected", "public", "shared", "spawn", "static", "super",
    "sync", "thread", "use", "var", "void", "with", "yield",
];

/// The Rhai spelling of a JSON Schema type.
fn rhai_type(json_type: &str) -> &'static str {
    match json_type {
        "integer" => "int",
        "number" => "float",
        "string" => "string",
        "boolean" => "bool",
        "array" => "array",
        "object" => "map",
        "null" => "()",
        _ => "any",
    }
}

#[cfg(test)]
mod tests {
    use codeact_runtime::{LimitKind, ToolSpec};
    use serde_json::json;

    use super::*;

    #[test]
    fn tool_signatures_use_rhai_map_syntax_with_argument_types() {
        let runtime = RhaiRuntime::new(Limits::default());
        let tool = ToolSpec::new("add", "Adds.").with_parameters(json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "number"}},
            "required": ["a", "b"]
        }));
        assert_eq!(runtime.tool_signature(&tool), "add(#{a: int, b: float})");
        let optional = ToolSpec::new("add", "Adds.").with_parameters(json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "number"}},
            "required": ["a"]
        }));
        assert_eq!(
            runtime.tool_signature(&optional),
            "add(#{a: int, b?: float})"
        );
        assert_eq!(
            runtime.tool_signature(&ToolSpec::new("now", "")),
            "now(#{})"
        );
        let typed = tool.with_returns(json!({"type": "object", "properties": {
            "sum": {"type": "number"}, "parts": {"type": "array", "items": {"type": "integer"}}}}));
        assert_eq!(
            runtime.tool_signature(&typed),
            "add(#{a: int, b: float}) -> {parts: integer[], sum: number}"
        );
    }

    #[test]
    fn a_namespaced_tool_is_a_method_of_its_servers_map_unless_rhai_takes_the_name() {
        let spec = ToolSpec::new("github_create_issue", "").in_namespace("github");
        assert_eq!(tool_signature(&spec), "github.create_issue(#{})");
        let keys = ToolSpec::new("github_keys", "").in_namespace("github");
        assert_eq!(tool_signature(&keys), "github_keys(#{})");
    }

    #[test]
    fn the_enforcement_table_covers_every_limit() {
        let runtime = RhaiRuntime::new(Limits::default());
        for kind in LimitKind::ALL {
            assert!(
                runtime
                    .info()
                    .enforcement
                    .iter()
                    .any(|row| row.limit == kind),
                "{kind} has no enforcement row"
            );
        }
    }
}
