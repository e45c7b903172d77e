//! Where `openat2` does not exist, no file helpers: [`SUPPORTED`] is false and
//! [`FileAreaBuilder::open`](super::FileAreaBuilder::open) refuses before any of
//! these is reached.

use std::path::Path;

pub(super) const SUPPORTED: bool = false;

#[derive(Debug, PartialEq, Eq)]
pub(super) enum FileError {
    NotFound,
    Escapes,
    IsALink,
    IsADirectory,
    NotADirectory,
    NotARegularFile,
    TooBig { bytes: u64, max: u64 },
    DiskLimit { max: u64, written: u64, wanted: u64 },
    Other(String),
}

#[derive(Debug)]
pub(super) enum Root {}

fn unsupported() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::Unsupported, "no openat2 here")
}

impl Root {
    pub(super) fn open_dir(_: &Path) -> std::io::Result<Self> {
        Err(unsupported())
    }
    pub(super) fn open_mount(_: &Path) -> std::io::Result<Self> {
        Err(unsupported())
    }
    pub(super) fn is_file(&self) -> bool {
        match *self {}
    }
}

pub(super) struct DiskBudget<'a> {
    pub(super) written: &'a mut u64,
    pub(super) max: u64,
}

pub(super) fn read(root: &Root, _: &Path, _: u64) -> Result<Vec<u8>, FileError> {
    match *root {}
}
pub(super) fn write(
    root: &Root,
    _: &Path,
    _: &[u8],
    _: &mut DiskBudget<'_>,
) -> Result<(), FileError> {
    match *root {}
}
pub(super) fn list(root: &Root, _: &Path) -> Result<Vec<String>, FileError> {
    match *root {}
}
pub(super) fn exists(root: &Root, _: &Path) -> Result<bool, FileError> {
    match *root {}
}
