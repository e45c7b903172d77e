//! The record of an accepted final result: what was submitted, in what format, by
//! which agent, when, with which artifacts, and how it was checked.

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
    /// Files the result points to, relative to the run's working directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<PathBuf>,
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
        artifacts: Vec<PathBuf>,
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
}

/// Checks a declared artifact path against `workdir` and returns it normalised
/// (no `.`, no `..`), relative to `workdir`. Refused when it is absolute or climbs
/// out; when it exists, also when its real path (links followed) lies outside the
/// real `workdir`.
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
    let joined = workdir.join(&normal);
    if let (Ok(real), Ok(real_root)) = (joined.canonicalize(), workdir.canonicalize())
        && !real.starts_with(&real_root)
    {
        return Err(escapes());
    }
    Ok(normal)
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

    #[test]
    fn artifact_paths_inside_the_working_directory_are_normalised() {
        let dir = Path::new("/nonexistent-workdir");
        assert_eq!(
            artifact_path(dir, "./out/../out/report.md"),
            Ok(PathBuf::from("out/report.md"))
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
        let root = std::env::temp_dir().join(format!("codeact-artifacts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("work")).expect("creates");
        std::fs::create_dir_all(root.join("outside")).expect("creates");
        std::fs::write(root.join("outside/secret"), "x").expect("writes");
        std::os::unix::fs::symlink(root.join("outside"), root.join("work/link")).expect("links");
        let refused = artifact_path(&root.join("work"), "link/secret");
        let _ = std::fs::remove_dir_all(&root);
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
