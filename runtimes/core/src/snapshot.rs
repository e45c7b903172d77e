//! A session's state as bytes, to restore later, many times (a fork), or in
//! another process: the envelope every backend's snapshot travels in.
//!
//! A backend writes what it needs (a Rhai scope and its functions' sources, a
//! guest's linear memory) as a payload; the envelope adds what a restore must
//! check before trusting it: the runtime's name, the backend's identity (the
//! guest's sha256, the engine's version), this crate's version and a checksum of
//! all of it. A snapshot of another runtime, guest or version, or one corrupted
//! or cut short, is refused with an error naming what differs, never loaded.
//!
//! The checksum (CRC-32, ~10 GB/s here, where SHA-256 cost 25 ms on a 40 MB guest
//! memory) catches damage, not forgery: a snapshot is the session's state, as
//! trusted as the session itself, so keep snapshots where only the host writes.
//!
//! The layout (integers little-endian): `CODEACT-SNAPSHOT\n`, a `u32` format
//! version (`FORMAT`), then the runtime's name, the identity and the crate version each as a
//! `u32` length and UTF-8, the payload as a `u64` length and bytes, and the CRC-32
//! of everything before it.

const MAGIC: &[u8] = b"CODEACT-SNAPSHOT\n";
/// The format this build writes and reads; a snapshot of any other is refused
/// (as [`SnapshotError::Foreign`], naming both), never read as this one. Bumped
/// whenever a backend's payload changes its layout, since the crate version
/// alone does not change between builds. 1: the first; 2: an ABI guest's linear
/// memory kept sparse (a page map and the pages that are not all zeros).
const FORMAT: u32 = 2;
const DIGEST_BYTES: usize = 4;

fn checksum(bytes: &[u8]) -> [u8; DIGEST_BYTES] {
    crc32fast::hash(bytes).to_le_bytes()
}

/// A session's state, sealed for one runtime and backend identity.
#[derive(Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Shared, so that a backend can keep its payload past a restore without a
    /// copy ([`open_shared`](Self::open_shared)).
    bytes: std::sync::Arc<Vec<u8>>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("bytes", &self.bytes.len())
            .finish_non_exhaustive()
    }
}

/// Why a session could not be snapshotted or restored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// This runtime's sessions cannot be snapshotted (see its capability table).
    #[error("{runtime} sessions cannot be snapshotted: {why}")]
    Unsupported {
        /// The runtime's name.
        runtime: String,
        /// Why not.
        why: String,
    },
    /// The bytes are not a whole snapshot: cut short, changed, or something else.
    #[error("not a usable snapshot: {0}")]
    Corrupt(String),
    /// A snapshot of another runtime, guest or version.
    #[error("the snapshot is of {found}, and this is {expected}: it cannot be restored here")]
    Foreign {
        /// What the snapshot was made by.
        found: String,
        /// What would restore it.
        expected: String,
    },
    /// A variable holds a value a snapshot cannot keep.
    #[error("the variable '{variable}' cannot be kept in a snapshot: {why}")]
    Value {
        /// The variable's name.
        variable: String,
        /// What it holds and why that cannot be kept.
        why: String,
    },
    /// The session could not be read or set up.
    #[error("{0}")]
    Session(String),
}

impl Snapshot {
    /// Seals `payload` as a snapshot of a `runtime` session made by a backend that
    /// is `identity` (a guest's sha256, an engine's version).
    pub fn seal(runtime: &str, identity: &str, payload: &[u8]) -> Self {
        Self::seal_parts(runtime, identity, &[payload])
    }

    /// [`seal`](Self::seal) with the payload in `parts`, joined: a large state is
    /// copied once, into the snapshot.
    pub fn seal_parts(runtime: &str, identity: &str, parts: &[&[u8]]) -> Self {
        let len: usize = parts.iter().map(|part| part.len()).sum();
        let mut bytes = Vec::with_capacity(len + 256);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&FORMAT.to_le_bytes());
        for text in [runtime, identity, env!("CARGO_PKG_VERSION")] {
            put_text(&mut bytes, text);
        }
        bytes.extend_from_slice(&(len as u64).to_le_bytes());
        for part in parts {
            bytes.extend_from_slice(part);
        }
        let digest = checksum(&bytes);
        bytes.extend_from_slice(&digest);
        Self {
            bytes: std::sync::Arc::new(bytes),
        }
    }

    /// The payload, once the snapshot is whole and was made for `runtime` by a
    /// backend that is `identity`, with this crate's version.
    pub fn open(&self, runtime: &str, identity: &str) -> Result<&[u8], SnapshotError> {
        let header = self.header()?;
        let mine = env!("CARGO_PKG_VERSION");
        if header.runtime != runtime || header.identity != identity || header.version != mine {
            return Err(SnapshotError::Foreign {
                found: describe(header.runtime, header.identity, header.version),
                expected: describe(runtime, identity, mine),
            });
        }
        Ok(header.payload)
    }

    /// [`open`](Self::open)'s payload as the snapshot's bytes, shared, and where
    /// in them it lies: for a backend that uses the payload after the call
    /// returns (a guest's memory, written into an instance that starts later)
    /// without copying it.
    pub fn open_shared(
        &self,
        runtime: &str,
        identity: &str,
    ) -> Result<(std::sync::Arc<Vec<u8>>, std::ops::Range<usize>), SnapshotError> {
        let payload = self.open(runtime, identity)?;
        let start = payload.as_ptr() as usize - self.bytes.as_ptr() as usize;
        Ok((self.bytes.clone(), start..start + payload.len()))
    }

    /// The runtime the snapshot is of, once it is whole: to pick the runtime that
    /// restores it.
    pub fn runtime(&self) -> Result<&str, SnapshotError> {
        Ok(self.header()?.runtime)
    }

    /// The bytes, to store or send.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// A snapshot from stored bytes; checked when it is opened.
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        Self {
            bytes: std::sync::Arc::new(bytes),
        }
    }

    fn header(&self) -> Result<Header<'_>, SnapshotError> {
        let corrupt = |why: &str| SnapshotError::Corrupt(why.to_string());
        let bytes = &self.bytes;
        let body_len = bytes
            .len()
            .checked_sub(DIGEST_BYTES)
            .ok_or_else(|| corrupt("it is shorter than any snapshot"))?;
        if !bytes.starts_with(MAGIC) {
            return Err(corrupt("it does not start as a codeact snapshot"));
        }
        let (body, digest) = bytes.split_at(body_len);
        if checksum(body).as_slice() != digest {
            return Err(corrupt(
                "its checksum does not match: it was cut short or changed",
            ));
        }
        let mut reader = Reader {
            rest: &body[MAGIC.len()..],
        };
        let format = u32::from_le_bytes(reader.take_array()?);
        if format != FORMAT {
            return Err(SnapshotError::Foreign {
                found: format!("snapshot format {format}"),
                expected: format!("format {FORMAT}"),
            });
        }
        let runtime = reader.text()?;
        let identity = reader.text()?;
        let version = reader.text()?;
        let len = u64::from_le_bytes(reader.take_array()?);
        let len = usize::try_from(len).map_err(|_| corrupt("its payload is too long"))?;
        let payload = reader.take(len)?;
        if !reader.rest.is_empty() {
            return Err(corrupt("bytes follow its payload"));
        }
        Ok(Header {
            runtime,
            identity,
            version,
            payload,
        })
    }
}

struct Header<'a> {
    runtime: &'a str,
    identity: &'a str,
    version: &'a str,
    payload: &'a [u8],
}

fn describe(runtime: &str, identity: &str, version: &str) -> String {
    let short: String = identity.chars().take(16).collect();
    format!("{runtime} ({short}, codeact {version})")
}

fn put_text(bytes: &mut Vec<u8>, text: &str) {
    bytes.extend_from_slice(&(text.len() as u32).to_le_bytes());
    bytes.extend_from_slice(text.as_bytes());
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], SnapshotError> {
        if self.rest.len() < len {
            return Err(SnapshotError::Corrupt("it ends inside its header".into()));
        }
        let (taken, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(taken)
    }

    fn take_array<const N: usize>(&mut self) -> Result<[u8; N], SnapshotError> {
        let mut array = [0; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }

    fn text(&mut self) -> Result<&'a str, SnapshotError> {
        let len = u32::from_le_bytes(self.take_array()?) as usize;
        std::str::from_utf8(self.take(len)?)
            .map_err(|_| SnapshotError::Corrupt("a name in its header is not UTF-8".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_payload_opens_for_the_same_runtime_and_identity() {
        let snapshot = Snapshot::seal("rhai", "rhai 1.23", b"state");
        assert_eq!(snapshot.runtime(), Ok("rhai"));
        assert_eq!(snapshot.open("rhai", "rhai 1.23"), Ok(b"state".as_slice()));
        let again = Snapshot::from_bytes(snapshot.as_bytes().to_vec());
        assert_eq!(again.open("rhai", "rhai 1.23"), Ok(b"state".as_slice()));
    }

    #[test]
    fn another_runtime_or_identity_is_refused_naming_both() {
        let snapshot = Snapshot::seal("wasm:rhai", "abc123", b"state");
        for (runtime, identity) in [("wasm:boa", "abc123"), ("wasm:rhai", "def456")] {
            let refused = snapshot.open(runtime, identity).expect_err("foreign");
            let text = refused.to_string();
            assert!(matches!(refused, SnapshotError::Foreign { .. }), "{text}");
            assert!(text.contains("wasm:rhai (abc123"), "{text}");
        }
    }

    /// Fails if a snapshot written by a later codeact, in a format this one does
    /// not know, is read as if it were this format.
    #[test]
    fn a_snapshot_of_a_future_format_is_refused_naming_its_format() {
        let snapshot = Snapshot::seal("rhai", "v1", b"state");
        let mut bytes = snapshot.as_bytes().to_vec();
        bytes.truncate(bytes.len() - DIGEST_BYTES);
        let at = MAGIC.len();
        bytes[at..at + 4].copy_from_slice(&(FORMAT + 1).to_le_bytes());
        let digest = checksum(&bytes);
        bytes.extend_from_slice(&digest);
        let refused = Snapshot::from_bytes(bytes)
            .open("rhai", "v1")
            .expect_err("a future format");
        assert!(
            matches!(refused, SnapshotError::Foreign { .. }),
            "{refused}"
        );
        assert!(
            refused
                .to_string()
                .contains(&format!("snapshot format {}", FORMAT + 1)),
            "{refused}"
        );
    }

    #[test]
    fn every_cut_and_every_flipped_byte_is_refused() {
        let snapshot = Snapshot::seal("rhai", "v1", b"some state to keep");
        let bytes = snapshot.as_bytes();
        for cut in 0..bytes.len() {
            let short = Snapshot::from_bytes(bytes[..cut].to_vec());
            assert!(
                matches!(short.open("rhai", "v1"), Err(SnapshotError::Corrupt(_))),
                "cut at {cut}"
            );
        }
        for at in 0..bytes.len() {
            let mut changed = bytes.to_vec();
            changed[at] ^= 0x40;
            let changed = Snapshot::from_bytes(changed);
            assert!(
                matches!(changed.open("rhai", "v1"), Err(SnapshotError::Corrupt(_))),
                "byte {at} flipped"
            );
        }
    }
}
