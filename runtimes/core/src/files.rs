//! What of the host's files a session's engine may reach by itself, and the disk
//! limit it shares with the host's file helpers.
//!
//! Most engines have no file API: their scripts read and write the run's working
//! directory only through the helpers the host serves (`read_text`, `write_text`…).
//! An engine that has one (a WASI guest: Python's `open`, `os.listdir`, `pathlib`)
//! is given the same folders as a [`FileView`] and must charge what it writes to the
//! same [`DiskMeter`], so the two ways to write share one limit.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

/// The bytes a run has written into its working directory, against its limit.
/// Clones share the count. Whoever writes holds [`lock`](Self::lock) from the check
/// to the write, so two writers cannot both pass the check.
#[derive(Debug, Clone)]
pub struct DiskMeter {
    written: Arc<Mutex<u64>>,
    max: u64,
}

/// A write refused because it would pass the disk limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "disk limit of {max} bytes exceeded: the write needs {wanted} more and the run has written {written}"
)]
pub struct DiskFull {
    /// The limit.
    pub max: u64,
    /// Bytes charged before this write.
    pub written: u64,
    /// What this write would have charged.
    pub wanted: u64,
}

impl DiskMeter {
    /// A meter with nothing written and `max` bytes allowed.
    pub fn new(max: u64) -> Self {
        Self {
            written: Arc::new(Mutex::new(0)),
            max,
        }
    }

    /// The limit in bytes.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Bytes charged so far.
    pub fn written(&self) -> u64 {
        *self.lock()
    }

    /// The count, held while a writer checks and writes.
    pub fn lock(&self) -> MutexGuard<'_, u64> {
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `bytes` more fit under the limit: the check alone, for a writer that
    /// charges what it actually wrote afterwards ([`charge`](Self::charge)).
    pub fn check(&self, bytes: u64) -> Result<(), DiskFull> {
        let written = *self.lock();
        Self::fits(written, bytes, self.max)
    }

    /// Charges `bytes`, or refuses without charging when they would pass the limit.
    pub fn charge(&self, bytes: u64) -> Result<(), DiskFull> {
        let mut written = self.lock();
        Self::fits(*written, bytes, self.max)?;
        *written = written.saturating_add(bytes);
        Ok(())
    }

    /// Gives back `bytes` charged for a write that did not happen (a failed call,
    /// a short write).
    pub fn refund(&self, bytes: u64) {
        let mut written = self.lock();
        *written = written.saturating_sub(bytes);
    }

    fn fits(written: u64, wanted: u64, max: u64) -> Result<(), DiskFull> {
        if written.saturating_add(wanted) > max {
            Err(DiskFull {
                max,
                written,
                wanted,
            })
        } else {
            Ok(())
        }
    }
}

/// A host folder an engine sees at a path of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedDir {
    /// Where it is on the host.
    pub host: PathBuf,
    /// Where the engine sees it: `/` for the working directory, `/data` for a
    /// mount at `data`.
    pub guest: String,
    /// Whether the engine may change it; what it writes is charged to the meter.
    pub writable: bool,
}

/// The folders of a run's working directory as an engine with a file API sees
/// them, and the meter its writes are charged to.
#[derive(Debug, Clone)]
pub struct FileView {
    /// The working directory first (at `/`), then each folder mount.
    pub dirs: Vec<SharedDir>,
    /// The run's disk limit, shared with the host's file helpers.
    pub disk: DiskMeter,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_that_would_pass_the_limit_is_refused_and_charges_nothing() {
        let meter = DiskMeter::new(100);
        meter.charge(60).expect("fits");
        let refused = meter.charge(41).expect_err("past the limit");
        assert_eq!(
            refused,
            DiskFull {
                max: 100,
                written: 60,
                wanted: 41
            }
        );
        assert_eq!(meter.written(), 60);
        meter.charge(40).expect("exactly at the limit fits");
        assert!(meter.check(1).is_err());
    }

    #[test]
    fn clones_share_one_count() {
        let meter = DiskMeter::new(10);
        let other = meter.clone();
        other.charge(7).expect("fits");
        assert_eq!(meter.written(), 7);
        assert!(meter.charge(4).is_err());
    }

    #[test]
    fn a_huge_charge_saturates_instead_of_wrapping() {
        let meter = DiskMeter::new(u64::MAX - 1);
        meter.charge(u64::MAX - 2).expect("fits");
        assert!(meter.charge(u64::MAX).is_err());
    }
}
