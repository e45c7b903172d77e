//! Compiled guests cached on disk, each file bound to its key and authenticated, so
//! that `Module::deserialize` only ever sees bytes this user's codeact wrote for
//! exactly this guest and this engine.
//!
//! Compiling a guest takes 0.6 to 12 s here; loading a compiled one takes
//! milliseconds. `Module::deserialize` trusts its input completely (it maps the
//! bytes in as native code), so a checksum is not enough: anyone who can put a file
//! under a guest's (predictable) cache name, including a valid compiled module of
//! *another* WASI module, would have it run. So:
//!
//! - **Authenticated.** A cache file is `MAGIC`, then an HMAC-SHA256 tag, then the
//!   payload (`Module::serialize` output). The tag is computed under a per-user
//!   secret (32 random bytes in the file `secret`, mode 0600, in the cache
//!   directory) over the entry's key and the payload. Without the secret no one can
//!   make a file that loads.
//! - **Bound to its key.** The key is the guest's sha256, the wasmtime version and
//!   the sha256 of the engine's compile settings (as wasmtime hashes them), so
//!   a file written for another guest or another engine fails the check even when
//!   copied under this one's name.
//! - **In a directory only this user controls.** The directory is created 0700 and
//!   opened once; it is used only if it is owned by this process's effective user
//!   and not writable by group or others, and every file is then read, written and
//!   renamed relative to that open directory, so the directory cannot be swapped for
//!   another between the check and the use. The secret must be owned by the same
//!   user and readable by no one else. Otherwise the cache is refused with a
//!   warning and guests are compiled in memory.
//! - **Never a shared directory.** The cache lives in `CODEACT_CACHE_DIR`, else
//!   `$XDG_CACHE_HOME/codeact/compiled`, else `$HOME/.cache/codeact/compiled`. With
//!   none of those set there is no disk cache (each process compiles its guests
//!   once), never a directory under the system-wide temporary directory.
//!
//! Any mismatch (magic, tag, a file not owned by this user) costs a compile, and the
//! fresh module replaces the file: written under a temporary name (0600) and renamed
//! into place, so two processes racing to fill the same entry each write a whole
//! file and the last rename wins.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use wasmtime::{Engine, Module};

const MAGIC: &[u8] = b"codeact-cwasm-2\n";

/// The wasmtime this crate is built against (pinned in `Cargo.toml`), part of every
/// cache key: wasmtime's own compatibility hash leaves its version out.
const WASMTIME_VERSION: &str = "48.0.8";

/// Where compiled guests go: `CODEACT_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/codeact/compiled`, else `$HOME/.cache/codeact/compiled`; `None`
/// (no disk cache: guests are compiled in memory, once per process) when none is
/// set. `XDG_CACHE_HOME` and `HOME` count only when absolute, as the XDG spec says.
pub fn default_cache_dir() -> Option<PathBuf> {
    cache_dir_from(|name| std::env::var_os(name))
}

fn cache_dir_from(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    if let Some(dir) = var("CODEACT_CACHE_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    crate::guests::user_cache_root(var).map(|root| root.join("compiled"))
}

/// How a module was obtained, for benchmarks and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Already loaded by this process.
    Memory,
    /// Loaded from an authenticated cache file.
    Disk,
    /// Compiled now (and written to the cache, when there is one).
    Compiled,
}

/// The sha256 of `bytes` as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Modules this process already has, by cache directory and entry: each guest is
/// compiled or loaded once.
fn loaded() -> &'static Mutex<HashMap<String, Module>> {
    static LOADED: OnceLock<Mutex<HashMap<String, Module>>> = OnceLock::new();
    LOADED.get_or_init(Mutex::default)
}

/// What a cache entry is for: the guest and the engine. Its file name, and the text
/// its tag covers.
struct Key {
    guest_sha256: String,
    engine: String,
}

impl Key {
    fn new(engine: &Engine, guest_sha256: &str) -> Key {
        Key {
            guest_sha256: guest_sha256.to_string(),
            engine: crate::engine::fingerprint(engine),
        }
    }

    /// `<guest sha256>-<first 16 hex digits of the engine fingerprint>.cwasm`.
    fn file_name(&self) -> String {
        let short = self.engine.get(..16).unwrap_or(&self.engine);
        format!("{}-{short}.cwasm", self.guest_sha256)
    }

    /// Everything the entry is for, as the tag covers it.
    fn bound(&self) -> String {
        format!(
            "guest-sha256 {}\nwasmtime {WASMTIME_VERSION}\nengine-sha256 {}\n",
            self.guest_sha256, self.engine
        )
    }
}

/// The module for `wasm` (whose sha256 is `sha256`), from this process, the disk
/// cache in `dir` (when there is one and it is safe to use), or a fresh compile, in
/// that order. A cache that cannot be used, read or written costs a compile, never
/// an error.
pub(crate) fn load_or_compile(
    engine: &Engine,
    dir: Option<&Path>,
    wasm: &[u8],
    sha256: &str,
) -> Result<(Module, Source), String> {
    load_or_build(engine, dir, sha256, || Ok(wasm.to_vec()))
}

/// The module cached under `id` (a guest's sha256, or a name derived from it such
/// as its pre-initialised form's), from this process, the disk cache in `dir`, or
/// compiled from what `build` makes, in that order. `build` runs only on a miss.
pub(crate) fn load_or_build(
    engine: &Engine,
    dir: Option<&Path>,
    id: &str,
    build: impl FnOnce() -> Result<Vec<u8>, String>,
) -> Result<(Module, Source), String> {
    let sha256 = id;
    let key = Key::new(engine, sha256);
    let memo_key = match dir {
        Some(dir) => dir.join(key.file_name()).to_string_lossy().into_owned(),
        None => format!("<no disk cache>/{}", key.file_name()),
    };
    if let Some(module) = loaded().lock().map_err(|e| e.to_string())?.get(&memo_key) {
        return Ok((module.clone(), Source::Memory));
    }
    let disk = dir.and_then(|dir| match disk::CacheDir::open(dir) {
        Ok(cache) => Some(cache),
        Err(reason) => {
            tracing::warn!(
                "not using the compile cache {}: {reason}; compiling in memory",
                dir.display()
            );
            None
        }
    });
    let cached = disk.as_ref().and_then(|cache| {
        let payload = cache.read(&key)?;
        deserialize(engine, &payload)
    });
    let (module, source) = match cached {
        Some(module) => (module, Source::Disk),
        None => {
            let started = std::time::Instant::now();
            tracing::info!(
                target: "codeact::progress",
                "compiling the guest {} once (seconds; about 10 s for CPython 3.12, minutes for the scientific CPython); later starts load it from the compile cache",
                &sha256[..sha256.len().min(12)]
            );
            let wasm = build()?;
            let module = {
                let _ticking = CompileProgress::start(wasm.len());
                Module::new(engine, &wasm).map_err(|e| format!("{e:#}"))?
            };
            tracing::info!(
                target: "codeact::progress",
                "compiled the guest in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            if let Some(cache) = &disk
                && let Err(e) = cache.write(&key, &module)
            {
                tracing::warn!(
                    "could not write {} to the compile cache: {e}",
                    key.file_name()
                );
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

/// How often a compile that is still going says so.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// While alive, says every [`PROGRESS_EVERY`] that a compile is still going,
/// how long it has taken and how large the module is, on the progress log
/// (`codeact::progress`): compiling the 100 MB scientific CPython takes minutes,
/// which would otherwise look hung. Stops when dropped.
struct CompileProgress {
    done: Option<std::sync::mpsc::Sender<()>>,
}

impl CompileProgress {
    fn start(bytes: usize) -> CompileProgress {
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let started = std::time::Instant::now();
        let spawned = std::thread::Builder::new()
            .name("codeact-compile-progress".into())
            .spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    finished.recv_timeout(PROGRESS_EVERY)
                {
                    tracing::info!(
                        target: "codeact::progress",
                        "still compiling the guest ({} MB): {} s so far",
                        bytes >> 20,
                        started.elapsed().as_secs()
                    );
                }
            });
        CompileProgress {
            done: spawned.is_ok().then_some(done),
        }
    }
}

impl Drop for CompileProgress {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            let _ = done.send(());
        }
    }
}

/// Forgets the modules this process has loaded, so the next load reads the disk
/// cache (or compiles): for benchmarks and tests of the cache itself.
pub fn forget_loaded() {
    if let Ok(mut loaded) = loaded().lock() {
        loaded.clear();
    }
}

type HmacSha256 = Hmac<Sha256>;

/// The tag of an entry: HMAC-SHA256 under `secret` of the key's text (length first,
/// so key and payload cannot be re-split) and the payload. `None` only if the HMAC
/// refused the key, which it does for no length.
fn tag_of(secret: &[u8; 32], key: &Key, payload: &[u8]) -> Option<HmacSha256> {
    let mut mac = HmacSha256::new_from_slice(secret).ok()?;
    let bound = key.bound();
    mac.update(MAGIC);
    mac.update(&(bound.len() as u64).to_be_bytes());
    mac.update(bound.as_bytes());
    mac.update(payload);
    Some(mac)
}

/// A whole cache file for `payload`.
fn seal(secret: &[u8; 32], key: &Key, payload: &[u8]) -> Option<Vec<u8>> {
    let tag = tag_of(secret, key, payload)?.finalize().into_bytes();
    let mut file = Vec::with_capacity(MAGIC.len() + tag.len() + payload.len());
    file.extend_from_slice(MAGIC);
    file.extend_from_slice(&tag);
    file.extend_from_slice(payload);
    Some(file)
}

/// The payload of a cache file whose magic and tag check out for `key` under
/// `secret` (the tag compared in constant time).
fn opened<'a>(secret: &[u8; 32], key: &Key, file: &'a [u8]) -> Option<&'a [u8]> {
    let rest = file.strip_prefix(MAGIC)?;
    if rest.len() < 32 {
        return None;
    }
    let (tag, payload) = rest.split_at(32);
    tag_of(secret, key, payload)?
        .verify_slice(tag)
        .ok()
        .map(|()| payload)
}

#[allow(unsafe_code)]
fn deserialize(engine: &Engine, payload: &[u8]) -> Option<Module> {
    // SAFETY: `payload` comes from a file whose HMAC, under this user's secret,
    // covers this guest's sha256, this wasmtime version and this engine's compile
    // settings: only this user's codeact could have written it, and it wrote it with
    // `Module::serialize` for exactly this guest and engine (wasmtime checks its own
    // version and configuration header again).
    unsafe { Module::deserialize(engine, payload) }.ok()
}

/// Whether a guest file without a pinned hash may be loaded: it, and the directory
/// it is in, must belong to this user and be writable by no one else, so no other
/// user can have put code there. `Err` says why not. (Off Unix there are no such
/// modes to check.)
pub(crate) fn check_private_file(path: &Path) -> Result<(), String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let me = rustix::process::geteuid().as_raw();
        let parent = path
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        for (what, place) in [("its directory", parent), ("the file", path)] {
            let meta = match std::fs::metadata(place) {
                Ok(meta) => meta,
                // A missing file is reported as missing by the caller.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(format!("cannot check {what}: {e}")),
            };
            if let Some(why) = distrust(meta.uid(), meta.mode(), me, false) {
                return Err(format!("{what} {}: {why}", place.display()));
            }
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Why a directory or file may not be trusted, if it may not: it must belong to
/// `me` and must not be writable by group or others (`private` files must not be
/// readable by them either).
fn distrust(owner: u32, mode: u32, me: u32, private: bool) -> Option<String> {
    let forbidden = if private { 0o077 } else { 0o022 };
    if owner != me {
        Some(format!(
            "it belongs to uid {owner}, not to this user (uid {me})"
        ))
    } else if mode & forbidden != 0 {
        Some(format!(
            "its mode {:o} lets group or others {}",
            mode & 0o777,
            if private {
                "read or write it"
            } else {
                "write it"
            }
        ))
    } else {
        None
    }
}

#[cfg(unix)]
mod disk {
    //! The cache directory, opened once and used only through that handle.

    use std::fs::File;
    use std::io::{ErrorKind, Read, Write};
    use std::os::fd::OwnedFd;
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    use std::path::Path;

    use rustix::fs::{AtFlags, Mode, OFlags};
    use wasmtime::Module;

    use super::{Key, distrust, opened, seal};

    const SECRET: &str = "secret";

    /// A cache directory checked to be this user's, with its secret.
    pub(super) struct CacheDir {
        dir: OwnedFd,
        secret: [u8; 32],
    }

    fn me() -> u32 {
        rustix::process::geteuid().as_raw()
    }

    impl CacheDir {
        /// Creates `path` (0700) if needed, opens it, checks it, and reads or makes
        /// its secret. `Err` says why the cache may not be used.
        pub(super) fn open(path: &Path) -> Result<CacheDir, String> {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(path)
                .map_err(|e| format!("cannot create it: {e}"))?;
            let dir = rustix::fs::open(
                path,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| format!("cannot open it: {e}"))?;
            let meta = File::from(dir.try_clone().map_err(|e| e.to_string())?)
                .metadata()
                .map_err(|e| e.to_string())?;
            if let Some(why) = distrust(meta.uid(), meta.mode(), me(), false) {
                return Err(why);
            }
            let secret = secret(&dir)?;
            Ok(CacheDir { dir, secret })
        }

        /// The payload of `key`'s file, if there is one and it checks out.
        pub(super) fn read(&self, key: &Key) -> Option<Vec<u8>> {
            let mut file = self.open_own(&key.file_name()).ok()??;
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).ok()?;
            let payload = opened(&self.secret, key, &bytes);
            if payload.is_none() {
                tracing::warn!(
                    "the compile cache file {} failed its check; compiling again",
                    key.file_name()
                );
            }
            payload.map(<[u8]>::to_vec)
        }

        /// Writes `module` as `key`'s file: a temporary file (0600), renamed over it.
        pub(super) fn write(&self, key: &Key, module: &Module) -> std::io::Result<()> {
            let payload = module.serialize().map_err(std::io::Error::other)?;
            let name = key.file_name();
            let file = seal(&self.secret, key, &payload)
                .ok_or_else(|| std::io::Error::other("HMAC refused the secret"))?;
            let temp = self.write_temp(&name, &file)?;
            rustix::fs::renameat(&self.dir, &temp, &self.dir, &name).map_err(|e| {
                let _ = rustix::fs::unlinkat(&self.dir, &temp, AtFlags::empty());
                std::io::Error::from(e)
            })
        }

        /// `name` in the directory, without following a link, if it is a regular
        /// file of this user that no one else may write; `Ok(None)` if it is not.
        fn open_own(&self, name: &str) -> std::io::Result<Option<File>> {
            let fd = rustix::fs::openat(
                &self.dir,
                name,
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY,
                Mode::empty(),
            )?;
            let file = File::from(fd);
            let meta = file.metadata()?;
            if !meta.is_file() || distrust(meta.uid(), meta.mode(), me(), false).is_some() {
                return Ok(None);
            }
            Ok(Some(file))
        }

        /// Writes `bytes` to a new file named after `name` (0600); returns its name.
        fn write_temp(&self, name: &str, bytes: &[u8]) -> std::io::Result<String> {
            write_temp(&self.dir, name, bytes)
        }
    }

    fn write_temp(dir: &OwnedFd, name: &str, bytes: &[u8]) -> std::io::Result<String> {
        let temp = format!(".{name}.{}.{}.tmp", std::process::id(), unique());
        let fd = rustix::fs::openat(
            dir,
            &temp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let written = File::from(fd).write_all(bytes);
        if let Err(e) = written {
            let _ = rustix::fs::unlinkat(dir, &temp, AtFlags::empty());
            return Err(e);
        }
        Ok(temp)
    }

    /// The directory's secret, made (32 bytes from the OS's random source, 0600) if
    /// there is none yet. A secret that is not this user's alone refuses the cache.
    fn secret(dir: &OwnedFd) -> Result<[u8; 32], String> {
        for _ in 0..2 {
            match read_secret(dir) {
                Ok(secret) => return secret,
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(format!("cannot read its secret: {e}")),
            }
            let mut fresh = [0u8; 32];
            File::open("/dev/urandom")
                .and_then(|mut random| random.read_exact(&mut fresh))
                .map_err(|e| format!("cannot make a secret: {e}"))?;
            let temp = write_temp(dir, SECRET, &fresh)
                .map_err(|e| format!("cannot write its secret: {e}"))?;
            // A link, not a rename: if another process made the secret meanwhile,
            // theirs stays (and is read on the next turn), so files they wrote
            // still check out.
            let linked = rustix::fs::linkat(dir, &temp, dir, SECRET, AtFlags::empty());
            let _ = rustix::fs::unlinkat(dir, &temp, AtFlags::empty());
            match linked {
                Ok(()) => return Ok(fresh),
                Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(format!("cannot write its secret: {e}")),
            }
        }
        Err("its secret appeared and vanished while being read".into())
    }

    /// `Err` when there is no secret (or it cannot be opened); `Ok(Err)` when there
    /// is one that may not be trusted.
    fn read_secret(dir: &OwnedFd) -> std::io::Result<Result<[u8; 32], String>> {
        let fd = rustix::fs::openat(
            dir,
            SECRET,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
        )?;
        let mut file = File::from(fd);
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Ok(Err("its secret is not a regular file".into()));
        }
        if let Some(why) = distrust(meta.uid(), meta.mode(), me(), true) {
            return Ok(Err(format!("its secret is not private: {why}")));
        }
        let mut secret = [0u8; 32];
        let mut rest = Vec::new();
        if file.read_exact(&mut secret).is_err() || file.read_to_end(&mut rest)? > 0 {
            return Ok(Err(
                "its secret is not 32 bytes long (delete the file `secret` to start the cache afresh)"
                    .into(),
            ));
        }
        Ok(Ok(secret))
    }

    fn unique() -> u64 {
        use std::hash::{BuildHasher, RandomState};
        RandomState::new().hash_one(std::time::SystemTime::now())
    }
}

#[cfg(not(unix))]
mod disk {
    //! No disk cache where the owner and mode of a directory cannot be checked.

    use std::path::Path;

    use wasmtime::Module;

    use super::Key;

    pub(super) struct CacheDir;

    impl CacheDir {
        pub(super) fn open(_path: &Path) -> Result<CacheDir, String> {
            Err("the compile cache is only kept on Unix, where its owner can be checked".into())
        }

        pub(super) fn read(&self, _key: &Key) -> Option<Vec<u8>> {
            None
        }

        pub(super) fn write(&self, _key: &Key, _module: &Module) -> std::io::Result<()> {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(guest: &str, engine: &str) -> Key {
        Key {
            guest_sha256: guest.repeat(64),
            engine: engine.repeat(64),
        }
    }

    /// If this fails, a cache file that was changed, cut short, written for another
    /// guest or engine, or sealed under another user's secret could reach
    /// `Module::deserialize`.
    #[test]
    fn a_cache_file_opens_only_unchanged_for_its_own_key_under_its_own_secret() {
        let secret = [7u8; 32];
        let payload = b"not really a module".to_vec();
        let file = seal(&secret, &key("a", "e"), &payload).expect("sealed");
        assert_eq!(opened(&secret, &key("a", "e"), &file), Some(&payload[..]));

        for i in [MAGIC.len(), MAGIC.len() + 31, file.len() - 1] {
            let mut flipped = file.clone();
            flipped[i] ^= 1;
            assert_eq!(opened(&secret, &key("a", "e"), &flipped), None, "byte {i}");
        }
        assert_eq!(
            opened(&secret, &key("a", "e"), &file[..file.len() - 3]),
            None
        );
        assert_eq!(opened(&secret, &key("a", "e"), &file[..10]), None);
        assert_eq!(opened(&secret, &key("a", "e"), b""), None);
        assert_eq!(
            opened(&secret, &key("b", "e"), &file),
            None,
            "another guest"
        );
        assert_eq!(
            opened(&secret, &key("a", "f"), &file),
            None,
            "another engine"
        );
        assert_eq!(
            opened(&[8u8; 32], &key("a", "e"), &file),
            None,
            "another secret"
        );

        // Today's checksum format is not a tag: sha256 of the payload is refused.
        let mut checksummed = MAGIC.to_vec();
        checksummed.extend_from_slice(&Sha256::digest(&payload));
        checksummed.extend_from_slice(&payload);
        assert_eq!(opened(&secret, &key("a", "e"), &checksummed), None);
    }

    /// If this fails, a cache directory or secret that another user owns or may
    /// write is trusted.
    #[test]
    fn only_this_users_unshared_directories_and_private_secrets_are_trusted() {
        assert_eq!(distrust(1000, 0o40700, 1000, false), None);
        assert_eq!(distrust(1000, 0o40755, 1000, false), None);
        assert!(
            distrust(1001, 0o40700, 1000, false).is_some(),
            "another owner"
        );
        assert!(
            distrust(1000, 0o40770, 1000, false).is_some(),
            "group-writable"
        );
        assert!(
            distrust(1000, 0o40777, 1000, false).is_some(),
            "world-writable"
        );
        assert!(distrust(0, 0o41777, 1000, false).is_some(), "like /tmp");
        assert_eq!(distrust(1000, 0o100600, 1000, true), None);
        assert!(
            distrust(1000, 0o100640, 1000, true).is_some(),
            "group-readable secret"
        );
        assert!(
            distrust(1000, 0o100604, 1000, true).is_some(),
            "world-readable secret"
        );
    }

    /// If this fails, codeact caches compiled code in a directory it does not own
    /// by default (the system-wide temporary directory) when `HOME` is unset.
    #[test]
    fn without_home_or_a_cache_setting_there_is_no_cache_directory() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        assert_eq!(cache_dir_from(env(&[])), None);
        assert_eq!(cache_dir_from(env(&[("HOME", "")])), None);
        assert_eq!(cache_dir_from(env(&[("HOME", "relative")])), None);
        assert_eq!(
            cache_dir_from(env(&[("HOME", "/home/u")])),
            Some(PathBuf::from("/home/u/.cache/codeact/compiled"))
        );
        assert_eq!(
            cache_dir_from(env(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "/c")])),
            Some(PathBuf::from("/c/codeact/compiled"))
        );
        assert_eq!(
            cache_dir_from(env(&[("CODEACT_CACHE_DIR", "/x"), ("HOME", "/home/u")])),
            Some(PathBuf::from("/x"))
        );
    }

    /// If this fails, the cache key no longer names the wasmtime `Cargo.lock`
    /// builds (the manifest takes its patch releases), and a module compiled by
    /// another wasmtime could pass for this one's.
    #[test]
    fn the_cache_key_names_the_locked_wasmtime() {
        let lock = include_str!("../../../Cargo.lock");
        let locked = lock
            .split("[[package]]")
            .find(|package| package.contains("\nname = \"wasmtime\"\n"))
            .and_then(|package| {
                package
                    .lines()
                    .find_map(|line| line.strip_prefix("version = \""))
                    .map(|version| version.trim_end_matches('"'))
            });
        assert_eq!(
            locked,
            Some(WASMTIME_VERSION),
            "update WASMTIME_VERSION to the wasmtime in Cargo.lock"
        );
    }

    #[test]
    fn sha256_is_lowercase_hex() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
