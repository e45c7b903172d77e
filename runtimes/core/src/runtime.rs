//! The backend trait: a factory per engine configuration, a session per conversation.

use std::sync::Arc;

use serde_json::Value;

use crate::{
    Enforcement, FileView, Interrupt, LimitKind, Limits, LogBuffer, Snapshot, SnapshotError,
    ToolDispatch,
};

/// What a runtime says about itself: enough for the host to pick it by fence tag and
/// to tell a model how to write for it.
#[derive(Debug, Clone)]
pub struct RuntimeInfo {
    /// The runtime's name as users select it, e.g. `"rhai"`.
    pub name: &'static str,
    /// The language as a model knows it, e.g. `"Rhai"`.
    pub language: &'static str,
    /// Code-fence tags this runtime accepts, preferred tag first.
    pub fence_tags: &'static [&'static str],
    /// The prompt card template (a minijinja template, kept in the runtime crate's
    /// own `prompts/` so each crate packages on its own). The host
    /// renders it with `tools` (each with `name`, `description`, `signature`),
    /// `limits` and `transfer_targets`.
    pub card_template: &'static str,
    /// How each limit is enforced, one row per [`LimitKind`].
    pub enforcement: &'static [Enforcement],
    /// Whether a script can wait on several tool calls at once, and whether
    /// the host then makes them together.
    pub parallel_calls: ParallelCalls,
}

/// What a runtime does with tool calls a script waits on together
/// (JavaScript's `Promise.all`, Python's `asyncio.gather`, Rhai's `parallel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParallelCalls {
    /// The host makes them together ([`ToolDispatch::call_many`](crate::ToolDispatch::call_many)).
    Together,
    /// The script may say it, but the calls are made one after another (a
    /// guest that hands the host one call at a time).
    OneAtATime,
    /// The language as this runtime runs it has no way to say it.
    Unavailable,
}

impl ParallelCalls {
    /// A word for tables: `together`, `one at a time`, `no`.
    pub fn label(self) -> &'static str {
        match self {
            ParallelCalls::Together => "together",
            ParallelCalls::OneAtATime => "one at a time",
            ParallelCalls::Unavailable => "no",
        }
    }
}

/// A script engine configured once: the expensive, shared part.
pub trait Runtime: Send + Sync {
    /// Describes the runtime.
    fn info(&self) -> &RuntimeInfo;

    /// The limits every session of this runtime runs under.
    fn limits(&self) -> &Limits;

    /// How a model calls `tool` in this language, e.g. `call_tool("add", #{a: INT, b: INT})`.
    fn tool_signature(&self, tool: &crate::ToolSpec) -> String;

    /// How this language writes a tool's parameter names in a call (a keyword
    /// respelled, a name that is no identifier quoted), which its signatures use;
    /// the host names parameters this way in its messages. A runtime whose
    /// spelling changes a name (Python's `from_`) maps a call's arguments back to
    /// the schema's names itself ([`SpelledTools`](crate::SpelledTools)) before
    /// they reach its tools. Default: [`Spelling::JSON`](crate::Spelling::JSON).
    fn spelling(&self) -> crate::Spelling {
        crate::Spelling::JSON
    }

    /// Starts a session whose scripts can call `tools`.
    fn new_session(&self, tools: Arc<dyn ToolDispatch>) -> Result<Box<dyn Session>, HostError>;

    /// [`new_session`](Self::new_session) for a run with a working directory: an
    /// engine with a file API of its own (a WASI guest: Python's `open`) sees
    /// `files`' folders and charges what it writes to `files.disk`. The default
    /// ignores `files`: an engine without a file API reaches the same folders
    /// through the host's file helpers, which are among `tools`.
    fn new_session_with_files(
        &self,
        tools: Arc<dyn ToolDispatch>,
        files: &FileView,
    ) -> Result<Box<dyn Session>, HostError> {
        let _ = files;
        self.new_session(tools)
    }

    /// A session as `snapshot` left it (its variables and functions), whose
    /// scripts call `tools`; any number of times, each restore independent of the
    /// others. A snapshot of another runtime, guest or version, or a damaged one,
    /// is refused. The default: this runtime cannot restore snapshots.
    fn restore(
        &self,
        snapshot: &Snapshot,
        tools: Arc<dyn ToolDispatch>,
    ) -> Result<Box<dyn Session>, SnapshotError> {
        let _ = (snapshot, tools);
        Err(SnapshotError::Unsupported {
            runtime: self.info().name.to_string(),
            why: "the backend keeps its state where it cannot be copied".into(),
        })
    }
}

/// One conversation's state: variables and functions persist from run to run.
///
/// `run` blocks; call it from a thread that may block (in tokio, `spawn_blocking`),
/// because tool calls made by the script run to completion on this thread.
pub trait Session: Send {
    /// Runs one script and returns its completion value and what it printed. A script
    /// that fails, or hits a limit, is a [`ScriptError`] inside the outcome; the
    /// session stays usable afterwards.
    fn run(&mut self, script: &str) -> Result<RunOutcome, HostError>;

    /// [`run`](Self::run), stopped early when `interrupt` is raised (by another
    /// thread: an app's cancel, a run's budget): the run ends as a run past its time
    /// limit does, with that limit's error, and the session is left as that limit
    /// leaves it. The default ignores `interrupt`: the run ends at its time limit.
    fn run_interruptible(
        &mut self,
        script: &str,
        interrupt: &Interrupt,
    ) -> Result<RunOutcome, HostError> {
        let _ = interrupt;
        self.run(script)
    }

    /// The session's state (variables and functions) as a [`Snapshot`], for
    /// [`Runtime::restore`]; the session goes on unchanged. The default: this
    /// backend cannot snapshot its sessions.
    fn snapshot(&mut self) -> Result<Snapshot, SnapshotError> {
        Err(SnapshotError::Unsupported {
            runtime: "this runtime's".into(),
            why: "the backend keeps its state where it cannot be copied".into(),
        })
    }
}

impl<S: Session + ?Sized> Session for Box<S> {
    fn run(&mut self, script: &str) -> Result<RunOutcome, HostError> {
        (**self).run(script)
    }

    fn run_interruptible(
        &mut self,
        script: &str,
        interrupt: &Interrupt,
    ) -> Result<RunOutcome, HostError> {
        (**self).run_interruptible(script, interrupt)
    }

    fn snapshot(&mut self) -> Result<Snapshot, SnapshotError> {
        (**self).snapshot()
    }
}

/// What one run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// The completion value as JSON, or why there is none.
    pub completion: Result<Value, ScriptError>,
    /// What the script printed.
    pub logs: LogBuffer,
}

/// A script failed: the model should read this and fix its script. Messages from the
/// engine are passed through verbatim (positions, stack traces), since that is what a
/// model reads best.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptError {
    /// The script did not parse.
    #[error("{message}")]
    Syntax {
        /// The engine's message, with the position.
        message: String,
        /// What the engine said in structure: the kind and where. Make a
        /// syntax error with [`syntax`](ScriptError::syntax).
        facts: ErrorFacts,
    },
    /// The script threw, or an operation failed, and nothing caught it. Make
    /// one with [`thrown`](ScriptError::thrown).
    #[error("{message}")]
    Thrown {
        /// The engine's message, with the position.
        message: String,
        /// What the names on the failing line held when it failed, as (name,
        /// short text) pairs, where the engine can tell (the CPython guests);
        /// empty otherwise. Text the script shaped: a loop shows it fenced.
        values: Vec<(String, String)>,
        /// What the engine said in structure: the kind and where, as far as
        /// the runtime knows (unknown for [`thrown`](ScriptError::thrown)).
        facts: ErrorFacts,
    },
    /// The script hit one of its [`Limits`] and was stopped.
    #[error("the script was stopped: it exceeded the {described}{}{}", detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default(), if *restarted { format!("; {SESSION_RESTARTED}") } else { String::new() })]
    LimitExceeded {
        /// Which limit.
        limit: LimitKind,
        /// The limit and its value, e.g. "time limit of 5000 ms".
        described: String,
        /// What the engine said, where it adds something (e.g. which value grew).
        detail: Option<String>,
        /// Whether the backend had to start the session again, losing its
        /// variables and functions (a guest trapped, a worker killed): a fact of the
        /// host's, which a loop tells the model in its own words, outside the
        /// fence that holds `detail`. Set with [`restarting`](ScriptError::restarting).
        restarted: bool,
    },
    /// The script ended, crashed or broke its engine (an exit, a trap, a write to
    /// the host's channel, a worker that died), and the backend started the
    /// session again: variables and functions from earlier scripts are gone.
    #[error("{message}{}; {SESSION_RESTARTED}", detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default())]
    EngineLost {
        /// What happened, in the host's words, which a loop may show outside any
        /// fence.
        message: String,
        /// What the engine or the guest said about it (a trap, its last stderr
        /// lines), where there is something: text a script may have shaped.
        detail: Option<String>,
    },
    /// The script ended without a value (its last line is a declaration or a
    /// statement, and no result helper ran); the message says so in the host's
    /// words, which a loop may show outside any fence.
    #[error("{message}")]
    NoValue {
        /// What the host says about it.
        message: String,
    },
    /// The completion value has no JSON form (a function, NaN, a cycle, too deep).
    #[error("the script's value cannot be returned as JSON: {message}")]
    Unrepresentable {
        /// What could not be converted, and where.
        message: String,
    },
}

impl ScriptError {
    /// A [`Thrown`](ScriptError::Thrown) error with the engine's `message` and
    /// no values.
    pub fn thrown(message: impl Into<String>) -> Self {
        Self::Thrown {
            message: message.into(),
            values: Vec::new(),
            facts: ErrorFacts::default(),
        }
    }

    /// A [`Syntax`](ScriptError::Syntax) error with the engine's `message`,
    /// of kind [`ErrorKind::Syntax`] at no known position.
    pub fn syntax(message: impl Into<String>) -> Self {
        Self::Syntax {
            message: message.into(),
            facts: ErrorFacts::of(ErrorKind::Syntax),
        }
    }

    /// The same error with `facts` for a [`Syntax`](ScriptError::Syntax) or
    /// [`Thrown`](ScriptError::Thrown) error; other errors are returned as
    /// they are.
    pub fn with_facts(mut self, new: ErrorFacts) -> Self {
        if let ScriptError::Syntax { facts, .. } | ScriptError::Thrown { facts, .. } = &mut self {
            *facts = new;
        }
        self
    }

    /// What the engine said about a [`Syntax`](ScriptError::Syntax) or
    /// [`Thrown`](ScriptError::Thrown) error in structure; `None` for the
    /// host's own errors (limits, a lost engine, no value).
    pub fn facts(&self) -> Option<&ErrorFacts> {
        match self {
            ScriptError::Syntax { facts, .. } | ScriptError::Thrown { facts, .. } => Some(facts),
            _ => None,
        }
    }
}

/// What a runtime knows about a script's error beyond its message: the kind,
/// in terms common to every language, and the 1-based line and column in the
/// script where the engine places it. Each runtime fills these from its
/// engine's structured error where it has one, so that a loop or a coach never
/// reads an engine's message text. The default knows nothing: kind
/// [`ErrorKind::Other`] with no engine kind, no line, no column.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ErrorFacts {
    /// What went wrong.
    pub kind: ErrorKind,
    /// The 1-based line of the script the error is on, innermost frame first;
    /// `None` when the engine gave none, or gave one outside the script (a
    /// helper's source, a prelude).
    pub line: Option<u32>,
    /// The 1-based column on that line, where the engine gives one.
    pub column: Option<u32>,
}

impl ErrorFacts {
    /// Facts of `kind` at no known position.
    pub fn of(kind: ErrorKind) -> Self {
        Self {
            kind,
            line: None,
            column: None,
        }
    }

    /// The same facts placed at `line` (1-based; 0 counts as unknown).
    pub fn at_line(mut self, line: Option<u32>) -> Self {
        self.line = line.filter(|&n| n > 0);
        self
    }

    /// The same facts placed at `column` (1-based; 0 counts as unknown).
    pub fn at_column(mut self, column: Option<u32>) -> Self {
        self.column = column.filter(|&n| n > 0);
        self
    }
}

/// The kind of a script's error, in terms common to every language: what a
/// loop or a coach needs to tell one mistake from another. New kinds may be
/// added; match with a fallback.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// The script did not parse.
    Syntax,
    /// A name (a variable or a function) that is not defined where it is used:
    /// JavaScript's `ReferenceError`, Python's `NameError`, Rhai's variable
    /// not found.
    UndefinedName {
        /// The name, as the script wrote it.
        name: String,
    },
    /// A function or method with no match for its name and arguments (Rhai's
    /// function not found): `receiver` is the type name of its first argument
    /// as the engine gives it (`"()"` for a call on nothing, `"Fn"` for a
    /// closure), when it has one.
    FunctionNotFound {
        /// The function's name.
        name: String,
        /// The type of the first argument, as the engine names it.
        receiver: Option<String>,
    },
    /// A value called as a function, or a method looked up on a value that has
    /// none (JavaScript's `x is not a function`, Python's `'NoneType' object
    /// is not callable`).
    NotCallable,
    /// An index past the end of a list or a string: `index` and `length` where
    /// the engine gives them.
    IndexOutOfBounds {
        /// The index the script used.
        index: Option<i64>,
        /// The length of what it indexed.
        length: Option<u64>,
    },
    /// A condition (an `if`, a `while`) that got no value: Rhai's `()` where a
    /// bool is expected.
    UnitCondition,
    /// A value of the wrong type for an operation (JavaScript's and Python's
    /// `TypeError`, Rhai's mismatched data type).
    TypeMismatch,
    /// A module or package the sandbox does not have (`import requests`,
    /// `require('fs')`).
    ImportUnavailable,
    /// A host tool failed and the script did not catch it.
    ToolError,
    /// Anything else: `engine_kind` is the engine's own name for it (`"ValueError"`,
    /// `"RangeError"`, `"ErrorRuntime"`), empty when unknown.
    Other {
        /// The engine's name for the error, where it has one.
        engine_kind: String,
    },
}

impl Default for ErrorKind {
    fn default() -> Self {
        ErrorKind::Other {
            engine_kind: String::new(),
        }
    }
}

/// What a backend's restart costs a session, as the host says it.
pub const SESSION_RESTARTED: &str =
    "the session was restarted: variables and functions from earlier scripts are gone";

impl ScriptError {
    /// A limit error naming `limit` and its value in `limits`.
    pub fn limit(limit: LimitKind, limits: &Limits, detail: Option<String>) -> Self {
        ScriptError::LimitExceeded {
            limit,
            described: limit.describe(limits),
            detail,
            restarted: false,
        }
    }

    /// The same limit error, saying the backend started the session again; other
    /// errors are returned as they are.
    pub fn restarting(self) -> Self {
        match self {
            ScriptError::LimitExceeded {
                limit,
                described,
                detail,
                ..
            } => ScriptError::LimitExceeded {
                limit,
                described,
                detail,
                restarted: true,
            },
            other => other,
        }
    }

    /// Whether the session lost its variables and functions with this error.
    pub fn restarted_the_session(&self) -> bool {
        matches!(
            self,
            ScriptError::LimitExceeded {
                restarted: true,
                ..
            } | ScriptError::EngineLost { .. }
        )
    }
}

/// The host itself failed: the run cannot go on (a guest file is missing, an engine
/// could not start). Never caused by what a script does.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// The runtime could not start a session.
    #[error("could not start a {runtime} session: {reason}")]
    SessionStart {
        /// The runtime's name.
        runtime: &'static str,
        /// Why.
        reason: String,
    },
    /// The session was lost: a previous run panicked inside the engine or a tool.
    #[error("the {runtime} session was lost: {reason}")]
    SessionLost {
        /// The runtime's name.
        runtime: &'static str,
        /// Why.
        reason: String,
    },
    /// The engine failed in a way no script should be able to cause.
    #[error("the {runtime} engine failed: {reason}")]
    Engine {
        /// The runtime's name.
        runtime: &'static str,
        /// Why.
        reason: String,
    },
}
