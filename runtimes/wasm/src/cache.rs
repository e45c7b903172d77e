//! Compiled guests cached on disk, keyed by the guest's sha256 and the engine's
//! configuration, checked before they are loaded.
//!
//! Compiling a guest takes 0.6 to 12 s here; loading a compiled one takes
//! milliseconds. A cache file is `MAGIC`, then the sha256 of the payload, then the
//! payload (`Module::serialize` output). Loading checks the magic and the hash
//! first, because `Module::deserialize` trusts its input: a truncated or corrupt
//! file is compiled again and replaced, never loaded. Files are written to a
//! temporary name and renamed into place, so two processes racing to fill the same
//! entry each write a whole file and the last rename wins.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use sha2::{Digest, Sha256};
use wasmtime::{Engine, Module};

use crate::engine::compatibility_key;

const MAGIC: &[u8] = b"codeact-cwasm-1\n";

/// Where compiled guests go: `CODEACT_CACHE_DIR`, else `$XDG_CACHE_HOME/codeact/compiled`,
/// else `~/.cache/codeact/compiled`.
pub fn default_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CODEACT_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    crate::guests::cache_root().join("compiled")
}

/// How a module was obtained, for benchmarks and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Already loaded by this process.
    Memory,
    /// Loaded from a checked cache file.
    Disk,
    /// Compiled now (and written to the cache).
    Compiled,
}

/// The sha256 of `bytes` as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Modules this process already has, by cache file: each guest is loaded once.
fn loaded() -> &'static Mutex<HashMap<String, Module>> {
    static LOADED: OnceLock<Mutex<HashMap<String, Module>>> = OnceLock::new();
    LOADED.get_or_init(Mutex::default)
}

/// The module for `wasm` (whose sha256 is `sha256`), from this process, the disk
/// cache in `dir`, or a fresh compile, in that order. A cache that cannot be read or
/// written costs a compile, never an error.
pub(crate) fn load_or_compile(
    engine: &Engine,
    dir: &Path,
    wasm: &[u8],
    sha256: &str,
) -> Result<(Module, Source), String> {
    let key = format!("{sha256}-{}", compatibility_key(engine));
    let path = dir.join(format!("{key}.cwasm"));
    let memo_key = path.to_string_lossy().into_owned();
    if let Some(module) = loaded().lock().map_err(|e| e.to_string())?.get(&memo_key) {
        return Ok((module.clone(), Source::Memory));
    }
    let (module, source) = match load(engine, &path) {
        Some(module) => (module, Source::Disk),
        None => {
            let module = Module::new(engine, wasm).map_err(|e| format!("{e:#}"))?;
            if let Err(e) = store(&module, dir, &path) {
                tracing::warn!("could not write the compile cache {}: {e}", path.display());
            }
            (module, Source::Compiled)
        }
    };
    loaded()
        .lock()
        .map_err(|e| e.to_string())?
        .insert(memo_key, module.clone());
    Ok((module, source))
}

/// Forgets the modules this process has loaded, so the next load reads the disk
/// cache (or compiles): for benchmarks and tests of the cache itself.
pub fn forget_loaded() {
    if let Ok(mut loaded) = loaded().lock() {
        loaded.clear();
    }
}

fn load(engine: &Engine, path: &Path) -> Option<Module> {
    let bytes = std::fs::read(path).ok()?;
    let payload = checked_payload(&bytes)?;
    deserialize(engine, payload)
}

/// The payload of a cache file whose magic and hash check out.
fn checked_payload(bytes: &[u8]) -> Option<&[u8]> {
    let rest = bytes.strip_prefix(MAGIC)?;
    if rest.len() < 32 {
        return None;
    }
    let (digest, payload) = rest.split_at(32);
    (Sha256::digest(payload).as_slice() == digest).then_some(payload)
}

#[allow(unsafe_code)]
fn deserialize(engine: &Engine, payload: &[u8]) -> Option<Module> {
    // SAFETY: `payload` is exactly what `Module::serialize` wrote for an engine with
    // this compatibility key (the key is in the file name, and wasmtime checks its
    // own version and configuration header again); its sha256 was checked above,
    // so neither truncation nor corruption reaches this call.
    unsafe { Module::deserialize(engine, payload) }.ok()
}

fn store(module: &Module, dir: &Path, path: &Path) -> std::io::Result<()> {
    let payload = module.serialize().map_err(std::io::Error::other)?;
    std::fs::create_dir_all(dir)?;
    let mut file = Vec::with_capacity(MAGIC.len() + 32 + payload.len());
    file.extend_from_slice(MAGIC);
    file.extend_from_slice(&Sha256::digest(&payload));
    file.extend_from_slice(&payload);
    let temp = dir.join(format!(
        ".{}.{}.{}.tmp",
        path.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        std::process::id(),
        unique()
    ));
    std::fs::write(&temp, &file)?;
    std::fs::rename(&temp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temp);
    })
}

fn unique() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_file_with_a_changed_byte_or_cut_short_is_refused() {
        let payload = b"not really a module".to_vec();
        let mut file = MAGIC.to_vec();
        file.extend_from_slice(&Sha256::digest(&payload));
        file.extend_from_slice(&payload);
        assert_eq!(checked_payload(&file), Some(&payload[..]));

        let mut flipped = file.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(checked_payload(&flipped), None);
        assert_eq!(checked_payload(&file[..file.len() - 3]), None);
        assert_eq!(checked_payload(&file[..10]), None);
        assert_eq!(checked_payload(b""), None);
    }

    #[test]
    fn sha256_is_lowercase_hex() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
