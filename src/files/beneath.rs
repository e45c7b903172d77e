//! File operations that cannot leave a directory: every path is opened by the
//! kernel beneath an open directory (`openat2` with `RESOLVE_BENEATH`, no magic
//! links), so `..`, an absolute link or a link to a link outside all fail with
//! `EXDEV` instead of leading out; only regular files are read or written, and
//! opened without blocking, so a FIFO or a device in a mounted folder can neither
//! hang the host nor be read.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// These operations exist here (Linux, with `openat2`).
pub(super) const SUPPORTED: bool = true;

/// Why an operation failed, in terms a script's author can act on.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum FileError {
    NotFound,
    /// `..` or a link led out of the directory.
    Escapes,
    /// The last name is a link (writes do not follow links).
    IsALink,
    IsADirectory,
    NotADirectory,
    /// A FIFO, a device or a socket.
    NotARegularFile,
    TooBig {
        bytes: u64,
        max: u64,
    },
    /// The disk limit would be passed.
    DiskLimit {
        max: u64,
        written: u64,
        wanted: u64,
    },
    Other(String),
}

impl FileError {
    fn from_errno(errno: Errno) -> Self {
        match errno {
            Errno::NOENT => FileError::NotFound,
            Errno::XDEV => FileError::Escapes,
            Errno::LOOP => FileError::IsALink,
            Errno::ISDIR => FileError::IsADirectory,
            Errno::NOTDIR => FileError::NotADirectory,
            Errno::NXIO => FileError::NotARegularFile,
            other => FileError::Other(std::io::Error::from(other).to_string()),
        }
    }
}

/// What a mount or the root opens to: a folder, or one file (named in its folder).
#[derive(Debug)]
pub(super) enum Root {
    Dir(OwnedFd),
    File { parent: OwnedFd, name: OsString },
}

impl Root {
    /// Opens the folder `path` (an `O_PATH` descriptor: later renames of the host
    /// path do not move the area).
    pub(super) fn open_dir(path: &Path) -> std::io::Result<Self> {
        let fd = rustix::fs::open(
            path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Root::Dir(fd))
    }

    /// Opens a mount's host path: a folder, or a regular file.
    pub(super) fn open_mount(path: &Path) -> std::io::Result<Self> {
        let meta = std::fs::metadata(path)?;
        if meta.is_dir() {
            return Self::open_dir(path);
        }
        if !meta.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "neither a regular file nor a folder",
            ));
        }
        let name = path
            .file_name()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"))?
            .to_os_string();
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let Root::Dir(parent) = Self::open_dir(parent)? else {
            unreachable!("open_dir opens a folder")
        };
        Ok(Root::File { parent, name })
    }

    /// True for a mount of one file.
    pub(super) fn is_file(&self) -> bool {
        matches!(self, Root::File { .. })
    }

    /// The folder and the path beneath it that `rest` names: a file mount has no
    /// path beneath it but its own name.
    fn locate<'a>(&'a self, rest: &Path) -> Result<(&'a OwnedFd, PathBuf), FileError> {
        match self {
            Root::Dir(fd) => Ok((fd, rest.to_path_buf())),
            Root::File { parent, name } if rest.as_os_str().is_empty() => {
                Ok((parent, PathBuf::from(name)))
            }
            Root::File { .. } => Err(FileError::NotADirectory),
        }
    }
}

/// Opens `rest` beneath `dir` (`.` when empty), retrying the rare `EAGAIN` the
/// kernel returns when a rename races the lookup.
fn open_beneath(dir: &OwnedFd, rest: &Path, flags: OFlags, mode: Mode) -> Result<OwnedFd, Errno> {
    let path = if rest.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rest
    };
    let mut last = Errno::AGAIN;
    for _ in 0..8 {
        match rustix::fs::openat2(
            dir,
            path,
            flags | OFlags::CLOEXEC,
            mode,
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        ) {
            Err(Errno::AGAIN) => last = Errno::AGAIN,
            other => return other,
        }
    }
    Err(last)
}

fn file_type(fd: &OwnedFd) -> Result<(FileType, u64), FileError> {
    let stat = rustix::fs::fstat(fd).map_err(FileError::from_errno)?;
    Ok((
        FileType::from_raw_mode(stat.st_mode),
        u64::try_from(stat.st_size).unwrap_or(0),
    ))
}

/// Reads the regular file `rest`, at most `max` bytes.
pub(super) fn read(root: &Root, rest: &Path, max: u64) -> Result<Vec<u8>, FileError> {
    let (dir, rest) = root.locate(rest)?;
    let fd = open_beneath(
        dir,
        &rest,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(FileError::from_errno)?;
    match file_type(&fd)? {
        (FileType::RegularFile, size) if size > max => Err(FileError::TooBig { bytes: size, max }),
        (FileType::RegularFile, _) => {
            let mut bytes = Vec::new();
            std::fs::File::from(fd)
                .take(max + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| FileError::Other(e.to_string()))?;
            let got = bytes.len() as u64;
            if got > max {
                return Err(FileError::TooBig { bytes: got, max });
            }
            Ok(bytes)
        }
        (FileType::Directory, _) => Err(FileError::IsADirectory),
        _ => Err(FileError::NotARegularFile),
    }
}

/// What a write may still charge against the disk limit.
pub(super) struct DiskBudget<'a> {
    pub(super) written: &'a mut u64,
    pub(super) max: u64,
}

impl DiskBudget<'_> {
    fn charge(&mut self, bytes: u64) -> Result<(), FileError> {
        let total = self.written.saturating_add(bytes);
        if total > self.max {
            return Err(FileError::DiskLimit {
                max: self.max,
                written: *self.written,
                wanted: bytes,
            });
        }
        *self.written = total;
        Ok(())
    }
}

/// Writes `bytes` to the regular file `rest`, making missing folders on the way.
/// Charged: a block per folder or file made, and the bytes by which the file grows
/// (an overwrite that shrinks a file gives nothing back, so rewriting cannot buy
/// room). Nothing is written when the charge would pass the limit.
pub(super) fn write(
    root: &Root,
    rest: &Path,
    bytes: &[u8],
    budget: &mut DiskBudget<'_>,
) -> Result<(), FileError> {
    let (dir, rest) = root.locate(rest)?;
    let (Some(name), parent) = (rest.file_name(), rest.parent()) else {
        return Err(FileError::IsADirectory);
    };
    let parent = parent.unwrap_or(Path::new(""));
    let folder = make_folders(dir, parent, budget)?;
    let name = Path::new(name);
    let file = match open_beneath(
        &folder,
        name,
        OFlags::WRONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::NOCTTY,
        Mode::empty(),
    ) {
        Ok(fd) => {
            let (kind, old_len) = file_type(&fd)?;
            if kind != FileType::RegularFile {
                return Err(FileError::NotARegularFile);
            }
            budget.charge((bytes.len() as u64).saturating_sub(old_len))?;
            rustix::fs::ftruncate(&fd, 0).map_err(FileError::from_errno)?;
            fd
        }
        Err(Errno::NOENT) => {
            budget.charge(super::ENTRY_COST_BYTES + bytes.len() as u64)?;
            open_beneath(
                &folder,
                name,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW,
                Mode::from_raw_mode(0o644),
            )
            .map_err(FileError::from_errno)?
        }
        Err(errno) => return Err(FileError::from_errno(errno)),
    };
    std::fs::File::from(file)
        .write_all(bytes)
        .map_err(|e| FileError::Other(e.to_string()))
}

/// Opens the folder `path` beneath `dir`, making each missing one (a block each).
fn make_folders(
    dir: &OwnedFd,
    path: &Path,
    budget: &mut DiskBudget<'_>,
) -> Result<OwnedFd, FileError> {
    let flags = OFlags::PATH | OFlags::DIRECTORY;
    let mut current =
        open_beneath(dir, Path::new(""), flags, Mode::empty()).map_err(FileError::from_errno)?;
    for part in path.components() {
        let part = Path::new(part.as_os_str());
        current = match open_beneath(&current, part, flags, Mode::empty()) {
            Ok(next) => next,
            Err(Errno::NOENT) => {
                budget.charge(super::ENTRY_COST_BYTES)?;
                match rustix::fs::mkdirat(&current, part, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(errno) => return Err(FileError::from_errno(errno)),
                }
                open_beneath(&current, part, flags, Mode::empty()).map_err(FileError::from_errno)?
            }
            Err(errno) => return Err(FileError::from_errno(errno)),
        };
    }
    Ok(current)
}

/// The names in the folder `rest`, sorted, a folder's with a trailing `/`.
pub(super) fn list(root: &Root, rest: &Path) -> Result<Vec<String>, FileError> {
    let Root::Dir(dir) = root else {
        return Err(FileError::NotADirectory);
    };
    let fd = open_beneath(dir, rest, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
        .map_err(FileError::from_errno)?;
    let mut names = Vec::new();
    let entries = rustix::fs::Dir::read_from(&fd).map_err(FileError::from_errno)?;
    for entry in entries {
        let entry = entry.map_err(FileError::from_errno)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "." || name == ".." {
            continue;
        }
        let is_dir = match entry.file_type() {
            FileType::Directory => true,
            FileType::Unknown => rustix::fs::statat(
                &fd,
                entry.file_name(),
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            )
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory),
            _ => false,
        };
        names.push(if is_dir { format!("{name}/") } else { name });
    }
    Ok(names)
}

/// Whether `rest` exists (a link counts when it leads somewhere inside).
pub(super) fn exists(root: &Root, rest: &Path) -> Result<bool, FileError> {
    let (dir, rest) = root.locate(rest)?;
    match open_beneath(dir, &rest, OFlags::PATH, Mode::empty()) {
        Ok(_) => Ok(true),
        Err(Errno::NOENT | Errno::NOTDIR) => Ok(false),
        Err(errno) => Err(FileError::from_errno(errno)),
    }
}
