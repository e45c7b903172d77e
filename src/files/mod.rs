//! A working directory per run, with host files mounted into it, that scripts reach
//! only through file helpers the host serves.
//!
//! Scripts never open files themselves. A host that wants them to read inputs and
//! write reports opens a [`FileArea`]: a fresh temporary directory (removed when the
//! last handle to it is dropped, unless kept) or one it names, plus mounts of host
//! files and folders at chosen paths, read-only unless said otherwise. Its
//! [`tools`](FileArea::tools) are `read_text`, `write_text`, `write_bytes`,
//! `list_dir`, `exists` and `show_image`, the same functions in every runtime; every path a script gives is
//! resolved beneath the area's root (or a mount's) by the kernel
//! (`openat2(RESOLVE_BENEATH)`), so neither `..` nor a link can lead out, and only
//! regular files are read or written (a FIFO or a device would hang or leak).
//! What a run writes is counted against [`max_disk_bytes`](FileAreaBuilder::max_disk_bytes):
//! the bytes of every file it writes (an overwrite counts the difference) plus a
//! block for every file or folder it creates; a write that would pass the limit is
//! refused before anything changes.
//!
//! The area is also where `final_result(value, ["out/report.md"])` artifacts are
//! looked up: give the agent its [`root`](FileArea::root) as its working directory
//! (the builder's `files` does both).

#[cfg(target_os = "linux")]
mod beneath;
#[cfg(not(target_os = "linux"))]
#[path = "beneath_unsupported.rs"]
mod beneath;
mod images;
mod tools;

pub use images::MAX_SIDE as MAX_IMAGE_SIDE;

pub use tools::{
    EXISTS_TOOL, LIST_DIR_TOOL, READ_TEXT_TOOL, SHOW_IMAGE_TOOL, WRITE_BYTES_TOOL, WRITE_TEXT_TOOL,
};

use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

pub use codeact_runtime::{DiskMeter, FileView, SharedDir};

use crate::tools::toolbox::Tool;

/// Bytes a run may write into its file area. Default: 64 MiB.
pub const DEFAULT_MAX_DISK_BYTES: u64 = 64 << 20;
/// Bytes of one file `read_text` returns or `write_text` writes. Default: 4 MiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 4 << 20;
/// What creating a file or a folder costs against the disk limit, whatever it holds:
/// one block, so a script cannot fill the disk with empty files. 4 KiB.
pub const ENTRY_COST_BYTES: u64 = 4096;
/// Names `list_dir` returns at most. 1,000.
pub const MAX_LISTED_NAMES: usize = 1000;
/// Bytes of one image `show_image` accepts: 5 MiB, the most Anthropic's API takes.
pub const MAX_IMAGE_BYTES: u64 = 5 << 20;
/// Images one script may show: 4.
pub const MAX_IMAGES_PER_SCRIPT: usize = 4;

/// An image a script showed, waiting to go to the model with the step's feedback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownImage {
    /// Its path in the working directory.
    pub path: String,
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub media_type: &'static str,
    /// Its bytes.
    pub data: Vec<u8>,
}

/// How a mount may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountMode {
    /// Scripts read it; every write is refused. The default.
    ReadOnly,
    /// Scripts read and write it; writes count against the disk limit.
    ReadWrite,
}

/// A host file or folder shown to scripts at a path of the area.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Where it is on the host.
    pub host: PathBuf,
    /// Where scripts see it: a path relative to the area's root (`data`,
    /// `in/logs`); a leading `/` is the root too.
    pub guest: String,
    /// Read-only or writable.
    pub mode: MountMode,
}

impl Mount {
    /// Parses `HOST:GUEST[:ro|rw]` (read-only when the mode is left out), as the
    /// command line's `--mount` takes it.
    pub fn parse(spec: &str) -> Result<Self, FileAreaError> {
        let bad = |why: &str| FileAreaError::BadMount {
            spec: spec.to_string(),
            why: why.to_string(),
        };
        let (rest, mode) = match spec.rsplit_once(':') {
            Some((rest, "ro")) => (rest, MountMode::ReadOnly),
            Some((rest, "rw")) => (rest, MountMode::ReadWrite),
            _ => (spec, MountMode::ReadOnly),
        };
        let (host, guest) = rest
            .rsplit_once(':')
            .ok_or_else(|| bad("write it as HOST:GUEST, HOST:GUEST:ro or HOST:GUEST:rw"))?;
        if host.is_empty() {
            return Err(bad("the host path is empty"));
        }
        Ok(Self {
            host: PathBuf::from(host),
            guest: guest.to_string(),
            mode,
        })
    }
}

/// Why a file area could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum FileAreaError {
    /// The working directory could not be made or opened.
    #[error("cannot use '{path}' as the working directory: {source}")]
    Workdir {
        /// The directory.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A mount's host path could not be opened.
    #[error("cannot mount '{path}': {source}")]
    MountHost {
        /// The host path.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A mount is written wrongly, or its guest path is unusable.
    #[error("mount '{spec}': {why}")]
    BadMount {
        /// The mount as given.
        spec: String,
        /// What is wrong.
        why: String,
    },
    /// File helpers need Linux's `openat2`, which this system lacks.
    #[error("file helpers need Linux (openat2 with RESOLVE_BENEATH); this system has none")]
    Unsupported,
}

/// How to open a [`FileArea`]: where its root is, what is mounted, its limits.
#[derive(Debug, Clone)]
pub struct FileAreaBuilder {
    workdir: Option<PathBuf>,
    keep: bool,
    mounts: Vec<Mount>,
    max_disk_bytes: u64,
    max_file_bytes: u64,
}

impl Default for FileAreaBuilder {
    fn default() -> Self {
        Self {
            workdir: None,
            keep: false,
            mounts: Vec::new(),
            max_disk_bytes: DEFAULT_MAX_DISK_BYTES,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
        }
    }
}

impl FileAreaBuilder {
    /// Uses `dir` (made if missing, never removed) as the root instead of a fresh
    /// temporary directory.
    pub fn workdir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.workdir = Some(dir.into());
        self
    }

    /// Keeps a temporary root after the run instead of removing it; its path is
    /// [`FileArea::root`]. Default: removed.
    pub fn keep(mut self, keep: bool) -> Self {
        self.keep = keep;
        self
    }

    /// Adds a mount.
    pub fn mount(mut self, mount: Mount) -> Self {
        self.mounts.push(mount);
        self
    }

    /// Bytes the run may write. Default: [`DEFAULT_MAX_DISK_BYTES`].
    pub fn max_disk_bytes(mut self, bytes: u64) -> Self {
        self.max_disk_bytes = bytes;
        self
    }

    /// Bytes of one file read or written. Default: [`DEFAULT_MAX_FILE_BYTES`].
    pub fn max_file_bytes(mut self, bytes: u64) -> Self {
        self.max_file_bytes = bytes;
        self
    }

    /// Makes or opens the root and opens every mount.
    pub fn open(self) -> Result<FileArea, FileAreaError> {
        if !beneath::SUPPORTED {
            return Err(FileAreaError::Unsupported);
        }
        let (root_path, temporary) = match &self.workdir {
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(|source| FileAreaError::Workdir {
                    path: dir.clone(),
                    source,
                })?;
                (dir.clone(), None)
            }
            None => {
                let made = tempfile::Builder::new()
                    .prefix("codeact-work-")
                    .tempdir()
                    .map_err(|source| FileAreaError::Workdir {
                        path: std::env::temp_dir(),
                        source,
                    })?;
                if self.keep {
                    (made.keep(), None)
                } else {
                    (made.path().to_path_buf(), Some(made))
                }
            }
        };
        let root =
            beneath::Root::open_dir(&root_path).map_err(|source| FileAreaError::Workdir {
                path: root_path.clone(),
                source,
            })?;
        let mut mounts: Vec<OpenMount> = Vec::new();
        for mount in &self.mounts {
            let spec = || format!("{}:{}", mount.host.display(), mount.guest);
            let guest = normalise(&mount.guest).map_err(|why| FileAreaError::BadMount {
                spec: spec(),
                why: format!("the guest path {why}"),
            })?;
            if guest.as_os_str().is_empty() {
                return Err(FileAreaError::BadMount {
                    spec: spec(),
                    why: "the guest path is the root; mount at a name such as data".into(),
                });
            }
            if mounts.iter().any(|m| m.guest == guest) {
                return Err(FileAreaError::BadMount {
                    spec: spec(),
                    why: "another mount has this guest path".into(),
                });
            }
            let target = beneath::Root::open_mount(&mount.host).map_err(|source| {
                FileAreaError::MountHost {
                    path: mount.host.clone(),
                    source,
                }
            })?;
            mounts.push(OpenMount {
                host: mount.host.clone(),
                guest,
                target,
                writable: mount.mode == MountMode::ReadWrite,
            });
        }
        Ok(FileArea {
            inner: Arc::new(AreaInner {
                root_path,
                root,
                mounts,
                max_file_bytes: self.max_file_bytes,
                disk: DiskMeter::new(self.max_disk_bytes),
                shown: Mutex::new(Vec::new()),
                _temporary: temporary,
            }),
        })
    }
}

/// A run's working directory and mounts, and the file helpers that reach them.
/// Cheap to clone: clones share the area, its disk count and (for a temporary
/// root) its life.
#[derive(Debug, Clone)]
pub struct FileArea {
    inner: Arc<AreaInner>,
}

#[derive(Debug)]
struct AreaInner {
    root_path: PathBuf,
    root: beneath::Root,
    mounts: Vec<OpenMount>,
    max_file_bytes: u64,
    /// Bytes charged so far against the disk limit, shared with the engines that
    /// write by themselves ([`FileArea::view`]); its lock also serialises writes, so
    /// two scripts writing at once cannot both pass the check.
    disk: DiskMeter,
    /// Images shown since the driver last took them.
    shown: Mutex<Vec<ShownImage>>,
    _temporary: Option<tempfile::TempDir>,
}

#[derive(Debug)]
struct OpenMount {
    /// Its host path, for the engines that open folders by path ([`FileArea::view`]).
    host: PathBuf,
    guest: PathBuf,
    target: beneath::Root,
    writable: bool,
}

impl FileArea {
    /// How to open one.
    pub fn builder() -> FileAreaBuilder {
        FileAreaBuilder::default()
    }

    /// A fresh temporary root with the default limits and no mounts.
    pub fn temporary() -> Result<Self, FileAreaError> {
        Self::builder().open()
    }

    /// The root on the host: the run's working directory, where artifacts are
    /// looked up.
    pub fn root(&self) -> &Path {
        &self.inner.root_path
    }

    /// The disk limit in bytes.
    pub fn max_disk_bytes(&self) -> u64 {
        self.inner.disk.max()
    }

    /// Bytes charged against the disk limit so far.
    pub fn written_bytes(&self) -> u64 {
        self.inner.disk.written()
    }

    /// The area's folders as an engine with a file API of its own sees them (the
    /// WASI guests, through preopened directories): the root at `/`, writable, and
    /// each folder mount at `/` and its guest path, as its mode says; one meter for
    /// what they and the file helpers write. A mount of a single file is left out
    /// (such engines open only folders); scripts read it through `read_text`.
    pub fn view(&self) -> FileView {
        let mut dirs = vec![SharedDir {
            host: self.inner.root_path.clone(),
            guest: "/".into(),
            writable: true,
        }];
        for mount in &self.inner.mounts {
            if !mount.target.is_file() {
                dirs.push(SharedDir {
                    host: mount.host.clone(),
                    guest: format!("/{}", mount.guest.display()),
                    writable: mount.writable,
                });
            }
        }
        FileView {
            dirs,
            disk: self.inner.disk.clone(),
        }
    }

    /// The images scripts showed since the last call, oldest first.
    pub fn take_shown_images(&self) -> Vec<ShownImage> {
        std::mem::take(&mut *self.inner.shown.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The file helpers as tools: `read_text(path)`, `write_text(path, text)`,
    /// `list_dir(path)`, `exists(path)` and `show_image(path)`.
    pub fn tools(&self) -> Vec<Tool> {
        tools::file_tools(self)
    }

    /// One line for the tools' descriptions: what is mounted where.
    fn layout(&self) -> String {
        let mut parts: Vec<String> = self
            .inner
            .mounts
            .iter()
            .map(|m| {
                let mode = if m.writable { "writable" } else { "read-only" };
                let kind = if m.target.is_file() { "" } else { "/" };
                format!("{}{kind} ({mode})", m.guest.display())
            })
            .collect();
        parts.sort();
        if parts.is_empty() {
            "Paths are relative to the working directory.".to_string()
        } else {
            format!(
                "Paths are relative to the working directory, which also holds {}.",
                parts.join(", ")
            )
        }
    }
}

/// Where a script's path leads: an open directory (the root or a mount's) and the
/// rest of the path beneath it.
struct Resolved<'a> {
    base: &'a beneath::Root,
    rest: PathBuf,
    writable: bool,
    /// The normalised path as the script's view names it.
    shown: PathBuf,
}

impl FileArea {
    /// Resolves a script's path to the directory it lies beneath.
    fn resolve(&self, path: &str) -> Result<Resolved<'_>, String> {
        let shown = normalise(path)?;
        let best = self
            .inner
            .mounts
            .iter()
            .filter(|m| shown.starts_with(&m.guest))
            .max_by_key(|m| m.guest.components().count());
        Ok(match best {
            Some(mount) => Resolved {
                base: &mount.target,
                rest: shown
                    .strip_prefix(&mount.guest)
                    .map(Path::to_path_buf)
                    .unwrap_or_default(),
                writable: mount.writable,
                shown,
            },
            None => Resolved {
                base: &self.inner.root,
                rest: shown.clone(),
                writable: true,
                shown,
            },
        })
    }

    /// The mount points directly inside the view's folder `dir`.
    fn mount_points_in(&self, dir: &Path) -> Vec<String> {
        self.inner
            .mounts
            .iter()
            .filter(|m| m.guest.parent() == Some(dir))
            .filter_map(|m| {
                let name = m.guest.file_name()?.to_string_lossy().into_owned();
                Some(if m.target.is_file() {
                    name
                } else {
                    format!("{name}/")
                })
            })
            .collect()
    }

    /// True when some mount lies beneath the view's folder `dir` (so it exists
    /// in the view even if the root holds no such folder).
    fn holds_mounts(&self, dir: &Path) -> bool {
        self.inner
            .mounts
            .iter()
            .any(|m| m.guest.starts_with(dir) && m.guest != dir)
    }
}

/// A script's path, normalised: relative to the view's root (a leading `/` is that
/// root), without `.` or `..`. Refused when it climbs above the root, is longer
/// than 4,096 bytes, or holds a NUL.
fn normalise(path: &str) -> Result<PathBuf, String> {
    if path.len() > 4096 {
        return Err("is longer than 4096 bytes".into());
    }
    if path.contains('\0') {
        return Err("holds a NUL character".into());
    }
    let mut normal = PathBuf::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(part) => normal.push(part),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir => {
                if !normal.pop() {
                    return Err("climbs out of the working directory with '..'".into());
                }
            }
            Component::Prefix(_) => return Err("is not a path of the working directory".into()),
        }
    }
    Ok(normal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_paths_are_normalised_beneath_the_root() {
        assert_eq!(
            normalise("./out/../out/a.md"),
            Ok(PathBuf::from("out/a.md"))
        );
        assert_eq!(normalise("/data/x.csv"), Ok(PathBuf::from("data/x.csv")));
        assert_eq!(normalise("."), Ok(PathBuf::new()));
        assert!(normalise("../etc/passwd").is_err());
        assert!(normalise("a/../../b").is_err());
        assert!(normalise("a\0b").is_err());
    }

    #[test]
    fn mounts_parse_with_an_optional_mode() {
        let ro = Mount::parse("/srv/in:data").expect("parses");
        assert_eq!(ro.mode, MountMode::ReadOnly);
        assert_eq!(ro.guest, "data");
        let rw = Mount::parse("/srv/out:/out:rw").expect("parses");
        assert_eq!(
            (rw.host.as_path(), rw.guest.as_str()),
            (Path::new("/srv/out"), "/out")
        );
        assert_eq!(rw.mode, MountMode::ReadWrite);
        assert!(Mount::parse("just-a-path").is_err());
    }
}
