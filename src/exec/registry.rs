//! Runtimes by name, as users select them (`--runtime rhai`).

use std::path::Path;
use std::sync::Arc;

use codeact_js::JsRuntime;
use codeact_rhai::RhaiRuntime;
use codeact_runtime::{Limits, Runtime};
use codeact_wasm::{Guest, LoadError, WasmRuntime};

/// The runtime names this build knows, for help texts and errors. Besides these,
/// `wasm:PATH` runs any WASI guest file that speaks the guest protocol.
pub const RUNTIME_NAMES: &[&str] = &[
    "rhai",
    "js",
    "js-in-process",
    "wasm:js",
    "wasm:micropython",
    "wasm:python",
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
    #[error(transparent)]
    Wasm(#[from] LoadError),
}

/// Builds the runtime called `name` with `limits`.
///
/// `wasm:js`, `wasm:micropython` and `wasm:python` (aliases `wasm:quickjs`,
/// `wasm:cpython`) load a pinned guest fetched by `scripts/fetch-guests.sh`;
/// `wasm:PATH` with a path ending in `.wasm` or `.wat` loads that file as a custom
/// guest, its language named after the file.
pub fn runtime_by_name(name: &str, limits: Limits) -> Result<Arc<dyn Runtime>, RuntimeByNameError> {
    match name {
        "rhai" => Ok(Arc::new(RhaiRuntime::new(limits))),
        // Workers are this executable, which must call `run_worker_if_requested`
        // first thing (the codeact binary does).
        "js" | "javascript" => Ok(Arc::new(JsRuntime::new(limits))),
        // Opt-in, without the worker's guarantees: see JsMode::InProcess.
        "js-in-process" => Ok(Arc::new(JsRuntime::in_process(limits))),
        _ => match name.strip_prefix("wasm:") {
            Some(path) if path.ends_with(".wasm") || path.ends_with(".wat") => {
                let stem = Path::new(path)
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
        },
    }
}
