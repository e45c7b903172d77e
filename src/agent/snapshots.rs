//! A directory of session snapshots kept beside a run's transcript, so that a
//! resumed run restores its session instead of re-running its scripts
//! (`codeact run --snapshot-dir DIR`).
//!
//! After each step whose script finished, the driver takes the session's
//! [`Snapshot`] and writes it here as `RUN.step-N.snapshot`, where `RUN` is the
//! run's id (random, 16 hex digits, kept by a resumed run) and `N` the step. The
//! file is written beside its final name and renamed into place, so a reader
//! never sees half of one; the transcript then records it
//! ([`Event::SnapshotKept`](crate::Event::SnapshotKept)), and the run's older
//! files are removed: a run keeps only its latest snapshot. The file is not
//! fsynced (a 40 MB guest memory every step would cost more than the step): after
//! a power loss it may be torn, which its checksum catches, and resume then
//! replays the scripts as it would without a snapshot.
//!
//! Resume looks for the file of the run's id and the transcript's last finished
//! step, and nothing else: a snapshot of an earlier step would miss the later
//! steps' variables, and one of a later step would hold effects of a step the
//! transcript does not count as done.

use std::path::{Path, PathBuf};

use codeact_runtime::{Snapshot, SnapshotError};

use crate::agent::events::Event;
use crate::exec::session::ScriptSession;

/// The file name's ending.
const SUFFIX: &str = ".snapshot";

/// Where a run's session snapshots are kept. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotDir {
    path: PathBuf,
}

/// Why a resumed run did not restore its session from a snapshot, in words for
/// the transcript and the terminal.
pub(crate) type Fallback = String;

impl SnapshotDir {
    /// The directory at `path`, made if it does not exist.
    pub fn new(path: impl Into<PathBuf>) -> std::io::Result<Self> {
        let path = path.into();
        std::fs::create_dir_all(&path)?;
        Ok(Self { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `snapshot` as the run's snapshot of `step` (beside its name, then
    /// renamed into place) and removes the run's other snapshots; returns the
    /// file's name in the directory.
    pub(crate) fn keep(
        &self,
        run_id: &str,
        step: usize,
        snapshot: &Snapshot,
    ) -> std::io::Result<String> {
        use std::io::Write;
        let name = file_name(run_id, step);
        let mut file = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .tempfile_in(&self.path)?;
        file.write_all(snapshot.as_bytes())?;
        file.persist(self.path.join(&name)).map_err(|e| e.error)?;
        Ok(name)
    }

    /// Removes the run's snapshots other than `kept` (a file left by a run killed
    /// between writing a snapshot and removing the one before it included). A
    /// file that cannot be removed is left; the next step tries again.
    pub(crate) fn remove_older(&self, run_id: &str, kept: &str) {
        let Ok(entries) = std::fs::read_dir(&self.path) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let older = parse_file_name(name).is_some_and(|(id, _)| id == run_id);
            // A temporary file of the run's, left by a crash while it was written.
            let torn = name.starts_with(&format!(".{run_id}.step-"));
            if name != kept
                && (older || torn)
                && let Err(e) = std::fs::remove_file(entry.path())
            {
                tracing::debug!("cannot remove the older snapshot {name}: {e}");
            }
        }
    }

    /// The run's snapshot of `step`, read whole; why not, in words, when there
    /// is none or it cannot be read. Whether it is a usable snapshot is for the
    /// runtime's restore to say.
    pub(crate) fn find(&self, run_id: &str, step: usize) -> Result<(String, Snapshot), Fallback> {
        let name = file_name(run_id, step);
        let path = self.path.join(&name);
        match std::fs::read(&path) {
            Ok(bytes) => Ok((name, Snapshot::from_bytes(bytes))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
                "there is no snapshot of step {step} ({}) in {}",
                name,
                self.path.display()
            )),
            Err(e) => Err(format!("cannot read the snapshot {}: {e}", path.display())),
        }
    }
}

/// Keeps a run's snapshots as it goes: told when a script finished, it takes
/// the session's snapshot before the next model call (once the step's events
/// are in the transcript), so a kept snapshot always follows a step the
/// transcript counts as finished.
pub(crate) struct Keeper {
    dir: SnapshotDir,
    run_id: String,
    /// The step whose script finished since the last snapshot.
    due: Option<usize>,
    /// Set when the runtime cannot snapshot its sessions: no step tries again.
    unsupported: bool,
}

impl Keeper {
    /// Keeps `run_id`'s snapshots in `dir`.
    pub(crate) fn new(dir: SnapshotDir, run_id: String) -> Self {
        Self {
            dir,
            run_id,
            due: None,
            unsupported: false,
        }
    }

    /// `step`'s script finished: the session is to be kept.
    pub(crate) fn script_finished(&mut self, step: usize) {
        if !self.unsupported {
            self.due = Some(step);
        }
    }

    /// Keeps the session's snapshot, if one is due, and says how that went.
    pub(crate) fn keep_due(&mut self, session: &mut ScriptSession) -> Option<Event> {
        let step = self.due.take()?;
        let kept = off_the_reactor(|| {
            let snapshot = session.snapshot().map_err(|e| {
                self.unsupported = matches!(e, SnapshotError::Unsupported { .. });
                e.to_string()
            })?;
            let file = self
                .dir
                .keep(&self.run_id, step, &snapshot)
                .map_err(|e| format!("cannot write in {}: {e}", self.dir.path.display()))?;
            self.dir.remove_older(&self.run_id, &file);
            Ok::<_, String>(file)
        });
        Some(match kept {
            Ok(file) => Event::SnapshotKept { step, file },
            Err(reason) => {
                tracing::warn!(step, "no snapshot kept: {reason}");
                Event::SnapshotFailed { step, reason }
            }
        })
    }
}

/// Runs `work`, which blocks for a while (a snapshot's copy, its file), without
/// stalling the other tasks of a multi-threaded tokio runtime
/// (`block_in_place`); elsewhere in place.
pub(crate) fn off_the_reactor<T>(work: impl FnOnce() -> T) -> T {
    let multi_threaded = tokio::runtime::Handle::try_current()
        .is_ok_and(|handle| handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_threaded {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

/// A new run's id: 16 hex digits from the clock, the process and the standard
/// library's per-process random hash keys. Unique enough to keep runs that share
/// a directory apart; not a secret.
pub(crate) fn new_run_id() -> String {
    use sha2::Digest;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNT.fetch_add(1, Ordering::Relaxed));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let mut digest = sha2::Sha256::new();
    digest.update(nanos.to_le_bytes());
    digest.update(std::process::id().to_le_bytes());
    digest.update(hasher.finish().to_le_bytes());
    digest.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `RUN.step-N.snapshot`.
fn file_name(run_id: &str, step: usize) -> String {
    format!("{run_id}.step-{step}{SUFFIX}")
}

/// The run id and step of a snapshot's file name; `None` for any other name (a
/// name read from a transcript included: it must be one this module writes, so
/// it cannot lead outside the directory).
pub(crate) fn parse_file_name(name: &str) -> Option<(&str, usize)> {
    let stem = name.strip_suffix(SUFFIX)?;
    let (run_id, step) = stem.split_once(".step-")?;
    let valid_id =
        (1..=64).contains(&run_id.len()) && run_id.bytes().all(|b| b.is_ascii_alphanumeric());
    let valid_step = !step.is_empty() && step.bytes().all(|b| b.is_ascii_digit());
    (valid_id && valid_step)
        .then(|| step.parse().ok().map(|step| (run_id, step)))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> SnapshotDir {
        let path = std::env::temp_dir()
            .join(format!("codeact-snapshots-{}", std::process::id()))
            .join(name);
        let _ = std::fs::remove_dir_all(&path);
        SnapshotDir::new(path).expect("the directory is made")
    }

    #[test]
    fn a_kept_snapshot_is_found_by_run_and_step_and_replaces_the_runs_older_one() {
        let dir = dir("keep");
        let first = Snapshot::seal("rhai", "v", b"one");
        let second = Snapshot::seal("rhai", "v", b"two");
        let other_run = Snapshot::seal("rhai", "v", b"other");
        let old = dir.keep("aaaa", 1, &first).expect("written");
        dir.keep("bbbb", 1, &other_run).expect("written");
        let new = dir.keep("aaaa", 2, &second).expect("written");
        dir.remove_older("aaaa", &new);
        assert_eq!(new, "aaaa.step-2.snapshot");
        assert_eq!(dir.find("aaaa", 2).map(|(_, s)| s), Ok(second));
        assert!(!dir.path().join(old).exists(), "the older one is removed");
        assert!(dir.find("bbbb", 1).is_ok(), "another run's is left alone");
        let missing = dir.find("aaaa", 1).expect_err("removed");
        assert!(missing.contains("no snapshot of step 1"), "{missing}");
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .expect("listed")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "no temporary file is left: {names:?}");
    }

    /// Fails if a transcript edited to name another file could make resume read
    /// outside the directory.
    #[test]
    fn only_names_this_module_writes_are_read_as_snapshot_names() {
        assert_eq!(
            parse_file_name("0123abcd.step-12.snapshot"),
            Some(("0123abcd", 12))
        );
        for bad in [
            "../x.step-1.snapshot",
            "a/b.step-1.snapshot",
            ".step-1.snapshot",
            "a.step-.snapshot",
            "a.step-1x.snapshot",
            "a.step-1.snapshot.tmp",
            "a.step-99999999999999999999999.snapshot",
        ] {
            assert_eq!(parse_file_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn run_ids_differ_and_are_valid_file_name_parts() {
        let (a, b) = (new_run_id(), new_run_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), 16);
        assert!(parse_file_name(&file_name(&a, 3)).is_some());
    }
}
