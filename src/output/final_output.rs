//! The record of an accepted final result: what was submitted, in what format, by
//! which agent, when, with which artifacts, and how it was checked.

use std::io::Read as _;
use std::path::{Component, Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use codeact_runtime::text::prefix_within;
use serde::{Deserialize, Serialize};

use crate::untrusted::UntrustedText;

/// Bytes of submitted content a [`FinalOutput`] keeps by default: 256 KiB.
pub const DEFAULT_CONTENT_CAP: usize = 256 * 1024;

/// How an accepted result was checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Validation {
    /// No spec asked for a check.
    NotRequired,
    /// Every check the spec asked for passed.
    Passed,
    /// The validator failed and the spec said `on_validator_error = "accept"`: the
    /// result stands unchecked by it. The run is flagged: fix the validator.
    BrokenValidator {
        /// The validator's error.
        reason: String,
    },
}

/// An accepted final result, as kept after the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalOutput {
    /// The content verbatim (a string result is the string; any other value its
    /// JSON text), cut at a character boundary when longer than the cap.
    pub content: UntrustedText,
    /// True when `content` was cut.
    pub truncated: bool,
    /// Bytes the content had before any cut.
    pub content_bytes: usize,
    /// The format label of the spec that governed it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// The agent that produced it.
    pub agent: String,
    /// When it was accepted, RFC 3339 in UTC with milliseconds.
    pub produced_at: String,
    /// Files the result points to, relative to the run's working directory, with
    /// the size and sha256 of those that existed when it was accepted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    /// How it was checked.
    pub validation: Validation,
}

impl FinalOutput {
    /// Records `content`, keeping at most `cap` bytes of it.
    pub fn new(
        content: &str,
        cap: usize,
        format: Option<String>,
        agent: impl Into<String>,
        artifacts: Vec<Artifact>,
        validation: Validation,
    ) -> Self {
        let kept = prefix_within(content, cap);
        Self {
            truncated: kept.len() < content.len(),
            content_bytes: content.len(),
            content: UntrustedText::new(kept),
            format,
            agent: agent.into(),
            produced_at: rfc3339_utc(SystemTime::now()),
            artifacts,
            validation,
        }
    }
}

/// A file a final result points to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Artifact {
    /// Relative to the run's working directory, normalised.
    pub path: PathBuf,
    /// Its size when the result was accepted; `None` when it did not exist (a
    /// result may name a file still to be written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Its sha256 in hex when the result was accepted, beside `bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

impl Artifact {
    /// Describes `path` (already checked by [`artifact_path`]) as it is now in
    /// `workdir`: its size and digest when it is a regular file reached beneath
    /// `workdir`, nothing more otherwise. A file longer than `max_bytes` (the
    /// run's disk limit) is not read: its size alone is recorded.
    pub fn describe(workdir: &Path, path: PathBuf, max_bytes: u64) -> Self {
        use sha2::Digest;
        let mut found = (None, None);
        if let Some(mut file) = beneath::open_regular(workdir, &path) {
            let length = file.metadata().map_or(u64::MAX, |meta| meta.len());
            if length > max_bytes {
                return Self {
                    path,
                    bytes: Some(length),
                    sha256: None,
                };
            }
            let mut hasher = sha2::Sha256::new();
            if let Ok(bytes) = std::io::copy(&mut (&mut file).take(max_bytes), &mut hasher) {
                let hex: String = hasher
                    .finalize()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                found = (Some(bytes), Some(hex));
            }
        }
        Self {
            path,
            bytes: found.0,
            sha256: found.1,
        }
    }
}

/// Reads both an artifact record and a bare path (how records before sizes and
/// digests kept them), so older transcripts still load.
impl<'de> Deserialize<'de> for Artifact {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Record {
            path: PathBuf,
            #[serde(default)]
            bytes: Option<u64>,
            #[serde(default)]
            sha256: Option<String>,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Path(PathBuf),
            Record(Record),
        }
        Ok(match Either::deserialize(deserializer)? {
            Either::Path(path) => Artifact {
                path,
                bytes: None,
                sha256: None,
            },
            Either::Record(record) => Artifact {
                path: record.path,
                bytes: record.bytes,
                sha256: record.sha256,
            },
        })
    }
}

/// Opens the regular file `relative` (checked by [`artifact_path`]) beneath
/// `workdir` for reading; `None` when it is missing or not a regular file.
pub fn open_regular_beneath(workdir: &Path, relative: &Path) -> Option<std::fs::File> {
    beneath::open_regular(workdir, relative)
}

/// Why an artifact path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactError {
    /// The path is absolute, or climbs out with `..`, or (when it exists) resolves
    /// through a link to a place outside the working directory.
    #[error(
        "artifact '{path}' escapes the working directory: give a path inside it, relative to it"
    )]
    Escapes {
        /// The path as declared.
        path: String,
    },
    /// The path is empty.
    #[error("an artifact path is empty")]
    Empty,
    /// Where the path leads cannot be shown to lie inside the working directory:
    /// a dangling link on the way, an unreadable or missing directory, a working
    /// directory that does not exist, or a system without `openat2`.
    #[error(
        "artifact '{path}' cannot be shown to stay inside the working directory (a link that leads nowhere, or a directory that cannot be read): give a path inside it, relative to it"
    )]
    Unproven {
        /// The path as declared.
        path: String,
    },
}

impl ArtifactError {
    /// What went wrong in the host's words, without the declared path (which a
    /// model wrote): what a prompt may carry unfenced.
    pub fn host_words(&self) -> &'static str {
        match self {
            ArtifactError::Escapes { .. } => {
                "an artifact path escapes the working directory: give a path inside it, relative to it"
            }
            ArtifactError::Empty => "an artifact path is empty",
            ArtifactError::Unproven { .. } => {
                "an artifact path cannot be shown to stay inside the working directory (a link that leads nowhere, or a directory that cannot be read): give a path inside it, relative to it"
            }
        }
    }

    /// The declared path, when the error is about one: model text, for a fence.
    pub fn quoted(&self) -> Option<UntrustedText> {
        match self {
            ArtifactError::Escapes { path } | ArtifactError::Unproven { path } => {
                Some(UntrustedText::new(path.as_str()))
            }
            ArtifactError::Empty => None,
        }
    }
}

/// Checks a declared artifact path against `workdir` and returns it normalised
/// (no `.`, no `..`), relative to `workdir`.
///
/// Refused when it is absolute or climbs out, and unless the file system proves it
/// inside: the longest part of it that exists is resolved beneath `workdir` with
/// `openat2(RESOLVE_BENEATH)`, links followed only while they stay inside, and the
/// first missing name after it must not exist even as a link (a dangling link is
/// refused: where a write through it lands is outside any check). A path that
/// does not exist yet is accepted when it would be created in a directory proven
/// inside. A link holding an absolute path is refused even when it points inside
/// (`RESOLVE_BENEATH` cannot tell). Costs one `openat2` per missing trailing name
/// plus one, and a `stat`.
pub fn artifact_path(workdir: &Path, declared: &str) -> Result<PathBuf, ArtifactError> {
    let escapes = || ArtifactError::Escapes {
        path: declared.to_string(),
    };
    if declared.trim().is_empty() {
        return Err(ArtifactError::Empty);
    }
    let mut normal = PathBuf::new();
    for component in Path::new(declared).components() {
        match component {
            Component::Normal(part) => normal.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if !normal.pop() {
                    return Err(escapes());
                }
            }
            Component::RootDir | Component::Prefix(_) => return Err(escapes()),
        }
    }
    if normal.as_os_str().is_empty() {
        return Err(escapes());
    }
    match beneath::resolve(workdir, &normal) {
        beneath::Verdict::Inside => Ok(normal),
        beneath::Verdict::Escapes => Err(escapes()),
        beneath::Verdict::Unproven => Err(ArtifactError::Unproven {
            path: declared.to_string(),
        }),
    }
}

#[cfg(target_os = "linux")]
mod beneath {
    use std::path::{Path, PathBuf};

    use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags, ResolveFlags};
    use rustix::io::Errno;

    pub(super) enum Verdict {
        Inside,
        Escapes,
        Unproven,
    }

    /// Opens the regular file `relative` beneath `workdir` for reading, without
    /// blocking on a FIFO; `None` when it is anything else or cannot be opened.
    pub(super) fn open_regular(workdir: &Path, relative: &Path) -> Option<std::fs::File> {
        let root = rustix::fs::openat(
            CWD,
            workdir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let fd = rustix::fs::openat2(
            &root,
            relative,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        )
        .ok()?;
        let regular = rustix::fs::fstat(&fd)
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile);
        regular.then(|| std::fs::File::from(fd))
    }

    /// Resolves `relative` (normal components only) beneath `workdir`.
    pub(super) fn resolve(workdir: &Path, relative: &Path) -> Verdict {
        let Ok(root) = rustix::fs::openat(
            CWD,
            workdir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            return Verdict::Unproven;
        };
        let names: Vec<_> = relative.components().collect();
        // The longest prefix that exists, resolved beneath the root.
        for kept in (0..=names.len()).rev() {
            let prefix: PathBuf = names[..kept].iter().collect();
            let prefix = if kept == 0 {
                PathBuf::from(".")
            } else {
                prefix
            };
            match rustix::fs::openat2(
                &root,
                &prefix,
                OFlags::PATH | OFlags::CLOEXEC,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
            ) {
                Ok(_) if kept == names.len() => return Verdict::Inside,
                Ok(found) => {
                    // `names[kept]` is missing: it must be missing even as a link
                    // (a dangling one leads somewhere unchecked), in a directory.
                    let is_dir = rustix::fs::fstat(&found)
                        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
                    if !is_dir {
                        return Verdict::Unproven;
                    }
                    return match rustix::fs::statat(
                        &found,
                        names[kept].as_os_str(),
                        AtFlags::SYMLINK_NOFOLLOW,
                    ) {
                        Err(Errno::NOENT) => Verdict::Inside,
                        _ => Verdict::Unproven,
                    };
                }
                Err(Errno::NOENT) => continue,
                // EXDEV: a link or `..` led out of the working directory.
                Err(Errno::XDEV) => return Verdict::Escapes,
                Err(_) => return Verdict::Unproven,
            }
        }
        Verdict::Unproven
    }
}

/// Without `openat2`: the real path of the whole declared path must exist and lie
/// inside the real working directory; anything else is unproven.
#[cfg(not(target_os = "linux"))]
mod beneath {
    use std::path::Path;

    pub(super) enum Verdict {
        Inside,
        Escapes,
        Unproven,
    }

    pub(super) fn open_regular(workdir: &Path, relative: &Path) -> Option<std::fs::File> {
        let (Ok(real), Ok(root)) = (
            workdir.join(relative).canonicalize(),
            workdir.canonicalize(),
        ) else {
            return None;
        };
        let file = std::fs::File::open(&real).ok()?;
        (real.starts_with(&root) && file.metadata().ok()?.is_file()).then_some(file)
    }

    pub(super) fn resolve(workdir: &Path, relative: &Path) -> Verdict {
        match (
            workdir.join(relative).canonicalize(),
            workdir.canonicalize(),
        ) {
            (Ok(real), Ok(root)) if real.starts_with(&root) => Verdict::Inside,
            (Ok(_), Ok(_)) => Verdict::Escapes,
            _ => Verdict::Unproven,
        }
    }
}

/// `instant` as RFC 3339 in UTC with milliseconds, e.g. `2026-04-14T09:30:00.250Z`.
pub fn rfc3339_utc(instant: SystemTime) -> String {
    let at = time::OffsetDateTime::from(instant.max(UNIX_EPOCH));
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second(),
        at.millisecond()
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn an_artifact_longer_than_the_disk_limit_is_measured_but_not_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        let sparse = std::fs::File::create(dir.path().join("huge")).expect("created");
        sparse.set_len(1 << 40).expect("a sparse 1 TiB file");
        std::fs::write(dir.path().join("small"), b"abc").expect("written");
        let started = std::time::Instant::now();
        let huge = Artifact::describe(dir.path(), PathBuf::from("huge"), 1 << 20);
        assert_eq!((huge.bytes, huge.sha256), (Some(1 << 40), None));
        assert!(started.elapsed() < Duration::from_secs(1));
        let small = Artifact::describe(dir.path(), PathBuf::from("small"), 1 << 20);
        assert_eq!(small.bytes, Some(3));
        assert_eq!(
            small.sha256.as_deref(),
            Some("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        );
    }

    #[test]
    fn content_over_the_cap_is_cut_at_a_character_boundary_and_flagged() {
        // "é" is two bytes: a cap of 5 falls inside the third one.
        let output = FinalOutput::new("ééé", 5, None, "main", Vec::new(), Validation::NotRequired);
        assert_eq!(output.content.raw(), "éé");
        assert!(output.truncated);
        assert_eq!(output.content_bytes, 6);
        let whole = FinalOutput::new("ééé", 6, None, "main", Vec::new(), Validation::Passed);
        assert_eq!(whole.content.raw(), "ééé");
        assert!(!whole.truncated);
    }

    #[test]
    fn a_four_byte_character_is_never_split() {
        for cap in 0..8 {
            let kept = prefix_within("a🦀b", cap);
            assert!("a🦀b".starts_with(kept));
            assert!(kept.len() <= cap);
        }
        assert_eq!(prefix_within("a🦀b", 4), "a");
        assert_eq!(prefix_within("a🦀b", 5), "a🦀");
    }

    #[test]
    fn the_default_cap_is_256_kib() {
        let big = "x".repeat(DEFAULT_CONTENT_CAP + 10);
        let output = FinalOutput::new(
            &big,
            DEFAULT_CONTENT_CAP,
            Some("text".into()),
            "writer",
            Vec::new(),
            Validation::NotRequired,
        );
        assert_eq!(output.content.len(), 262_144);
        assert!(output.truncated);
    }

    /// A fresh directory under the system's temporary directory, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Self {
            let root = std::env::temp_dir()
                .join(format!("codeact-artifacts-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(root.join("work")).expect("creates");
            std::fs::create_dir_all(root.join("outside")).expect("creates");
            Self(root)
        }

        fn work(&self) -> PathBuf {
            self.0.join("work")
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn artifact_paths_inside_the_working_directory_are_normalised() {
        let scratch = Scratch::new("normal");
        std::fs::create_dir_all(scratch.work().join("out")).expect("creates");
        assert_eq!(
            artifact_path(&scratch.work(), "./out/../out/report.md"),
            Ok(PathBuf::from("out/report.md"))
        );
        assert_eq!(
            artifact_path(&scratch.work(), "new/dir/report.md"),
            Ok(PathBuf::from("new/dir/report.md")),
            "a file still to be written, in directories still to be made"
        );
    }

    /// If this fails, a result can name a file that a later write would put
    /// outside the working directory, through a link inside it.
    #[cfg(unix)]
    #[test]
    fn a_missing_file_under_a_link_pointing_outside_is_refused() {
        let scratch = Scratch::new("missing");
        std::os::unix::fs::symlink(scratch.0.join("outside"), scratch.work().join("link"))
            .expect("links");
        let refused = artifact_path(&scratch.work(), "link/not-yet-written.md");
        assert!(
            matches!(refused, Err(ArtifactError::Escapes { .. })),
            "{refused:?}"
        );
    }

    /// If this fails, a dangling link (whose target a write would create, anywhere)
    /// is accepted as an artifact.
    #[cfg(unix)]
    #[test]
    fn a_dangling_link_is_refused() {
        let scratch = Scratch::new("dangling");
        let work = scratch.work();
        std::os::unix::fs::symlink(scratch.0.join("outside/nothing"), work.join("dangling"))
            .expect("links");
        std::os::unix::fs::symlink("nowhere-inside", work.join("dangling-in")).expect("links");
        for path in ["dangling", "dangling-in", "dangling/below"] {
            let refused = artifact_path(&work, path);
            assert!(refused.is_err(), "{path}: {refused:?}");
        }
        let unproven = artifact_path(&scratch.0.join("no-such-workdir"), "a.md");
        assert!(
            matches!(unproven, Err(ArtifactError::Unproven { .. })),
            "{unproven:?}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_link_that_stays_inside_is_followed() {
        let scratch = Scratch::new("inside");
        let work = scratch.work();
        std::fs::create_dir_all(work.join("real")).expect("creates");
        std::os::unix::fs::symlink("real", work.join("alias")).expect("links");
        assert_eq!(
            artifact_path(&work, "alias/report.md"),
            Ok(PathBuf::from("alias/report.md"))
        );
    }

    #[test]
    fn artifact_paths_that_escape_are_refused() {
        let dir = Path::new("/nonexistent-workdir");
        for path in ["../secret", "out/../../x", "/etc/passwd", ".", "a/.."] {
            assert!(
                matches!(artifact_path(dir, path), Err(ArtifactError::Escapes { .. })),
                "{path}"
            );
        }
        assert_eq!(artifact_path(dir, " "), Err(ArtifactError::Empty));
    }

    #[cfg(unix)]
    #[test]
    fn an_artifact_reached_through_a_link_pointing_outside_is_refused() {
        let scratch = Scratch::new("existing");
        std::fs::write(scratch.0.join("outside/secret"), "x").expect("writes");
        std::os::unix::fs::symlink(scratch.0.join("outside"), scratch.work().join("link"))
            .expect("links");
        let refused = artifact_path(&scratch.work(), "link/secret");
        assert!(
            matches!(refused, Err(ArtifactError::Escapes { .. })),
            "{refused:?}"
        );
    }

    #[test]
    fn timestamps_are_rfc3339_utc_with_milliseconds() {
        let time = UNIX_EPOCH + Duration::from_millis(1_776_159_000_250);
        assert_eq!(rfc3339_utc(time), "2026-04-14T09:30:00.250Z");
        assert_eq!(rfc3339_utc(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(rfc3339_utc(leap), "2000-02-29T00:00:00.000Z");
    }
}
