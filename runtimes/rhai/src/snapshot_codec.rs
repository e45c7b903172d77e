//! The bytes of a [`SavedSession`]: a small binary form, because a session may
//! hold megabytes of text, which JSON would scan and escape byte by byte (a 10 MB
//! string took 25 ms to write as JSON; copied as bytes it takes a memcpy).
//!
//! Every value is a tag byte and its data; lengths and integers are
//! little-endian `u64`, text is UTF-8 checked on reading.

use codeact_runtime::SnapshotError;

use crate::snapshot::{Saved, SavedSession, SavedVariable};

/// This form's version: a reader refuses another.
const VERSION: u8 = 1;

/// `session` as bytes.
pub(crate) fn encode(session: &SavedSession) -> Vec<u8> {
    let mut out = vec![VERSION];
    put_len(&mut out, session.function_sources.len());
    for source in &session.function_sources {
        put_text(&mut out, source);
    }
    put_len(&mut out, session.variables.len());
    for variable in &session.variables {
        put_text(&mut out, &variable.name);
        out.push(u8::from(variable.constant));
        put_value(&mut out, &variable.value);
    }
    out
}

/// The session `bytes` hold, or why they are not one.
pub(crate) fn decode(bytes: &[u8]) -> Result<SavedSession, SnapshotError> {
    let mut reader = Reader { rest: bytes };
    if reader.byte()? != VERSION {
        return Err(corrupt("its Rhai state is of another version"));
    }
    let sources = reader.len()?;
    let mut function_sources = Vec::new();
    for _ in 0..sources {
        function_sources.push(reader.text()?);
    }
    let count = reader.len()?;
    let mut variables = Vec::new();
    for _ in 0..count {
        let name = reader.text()?;
        let constant = reader.byte()? != 0;
        let value = reader.value(0)?;
        variables.push(SavedVariable {
            name,
            constant,
            value,
        });
    }
    if !reader.rest.is_empty() {
        return Err(corrupt("bytes follow its Rhai state"));
    }
    Ok(SavedSession {
        variables,
        function_sources,
    })
}

fn corrupt(why: &str) -> SnapshotError {
    SnapshotError::Corrupt(why.to_string())
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&(len as u64).to_le_bytes());
}

fn put_text(out: &mut Vec<u8>, text: &str) {
    put_len(out, text.len());
    out.extend_from_slice(text.as_bytes());
}

fn put_value(out: &mut Vec<u8>, value: &Saved) {
    match value {
        Saved::Unit => out.push(0),
        Saved::Bool(b) => out.extend_from_slice(&[1, u8::from(*b)]),
        Saved::Int(i) => {
            out.push(2);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Saved::Float(bits) => {
            out.push(3);
            out.extend_from_slice(&bits.to_le_bytes());
        }
        Saved::Char(c) => {
            out.push(4);
            out.extend_from_slice(&u32::from(*c).to_le_bytes());
        }
        Saved::Str(text) => {
            out.push(5);
            put_text(out, text);
        }
        Saved::Blob(bytes) => {
            out.push(6);
            put_len(out, bytes.len());
            out.extend_from_slice(bytes);
        }
        Saved::Array(items) => {
            out.push(7);
            put_len(out, items.len());
            for item in items {
                put_value(out, item);
            }
        }
        Saved::Map(entries) => {
            out.push(8);
            put_len(out, entries.len());
            for (key, item) in entries {
                put_text(out, key);
                put_value(out, item);
            }
        }
        Saved::Fn(name) => {
            out.push(9);
            put_text(out, name);
        }
    }
}

/// Values nest at most this deep when read back (what `save` allows).
const MAX_DEPTH: usize = 10_000;

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], SnapshotError> {
        if self.rest.len() < len {
            return Err(corrupt("its Rhai state ends early"));
        }
        let (taken, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(taken)
    }

    fn byte(&mut self) -> Result<u8, SnapshotError> {
        Ok(self.take(1)?[0])
    }

    fn u64(&mut self) -> Result<u64, SnapshotError> {
        let mut bytes = [0; 8];
        bytes.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(bytes))
    }

    /// A length, no longer than what is left to read (so a damaged length cannot
    /// make the reader reserve memory it will never fill).
    fn len(&mut self) -> Result<usize, SnapshotError> {
        let len = usize::try_from(self.u64()?).map_err(|_| corrupt("a length is too large"))?;
        if len > self.rest.len() {
            return Err(corrupt("a length runs past its Rhai state"));
        }
        Ok(len)
    }

    fn text(&mut self) -> Result<String, SnapshotError> {
        let len = self.len()?;
        String::from_utf8(self.take(len)?.to_vec())
            .map_err(|_| corrupt("a text in its Rhai state is not UTF-8"))
    }

    fn value(&mut self, depth: usize) -> Result<Saved, SnapshotError> {
        if depth > MAX_DEPTH {
            return Err(corrupt("its values nest too deep"));
        }
        Ok(match self.byte()? {
            0 => Saved::Unit,
            1 => Saved::Bool(self.byte()? != 0),
            2 => Saved::Int(self.u64()? as i64),
            3 => Saved::Float(self.u64()?),
            4 => {
                let mut bytes = [0; 4];
                bytes.copy_from_slice(self.take(4)?);
                let code = u32::from_le_bytes(bytes);
                Saved::Char(char::from_u32(code).ok_or_else(|| corrupt("a character is not one"))?)
            }
            5 => Saved::Str(self.text()?),
            6 => {
                let len = self.len()?;
                Saved::Blob(self.take(len)?.to_vec())
            }
            7 => {
                let count = self.len()?;
                let mut items = Vec::new();
                for _ in 0..count {
                    items.push(self.value(depth + 1)?);
                }
                Saved::Array(items)
            }
            8 => {
                let count = self.len()?;
                let mut entries = Vec::new();
                for _ in 0..count {
                    let key = self.text()?;
                    entries.push((key, self.value(depth + 1)?));
                }
                Saved::Map(entries)
            }
            9 => Saved::Fn(self.text()?),
            other => return Err(corrupt(&format!("an unknown value tag {other}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SavedSession {
        SavedSession {
            function_sources: vec!["fn f() { 1 }".into()],
            variables: vec![SavedVariable {
                name: "v".into(),
                constant: true,
                value: Saved::Array(vec![
                    Saved::Unit,
                    Saved::Bool(true),
                    Saved::Int(-7),
                    Saved::Float(f64::NAN.to_bits()),
                    Saved::Char('é'),
                    Saved::Str("text".into()),
                    Saved::Blob(vec![0, 255]),
                    Saved::Map(vec![("k".into(), Saved::Fn("f".into()))]),
                ]),
            }],
        }
    }

    #[test]
    fn a_session_survives_its_bytes() {
        let bytes = encode(&sample());
        let back = decode(&bytes).expect("decodes");
        assert_eq!(encode(&back), bytes);
    }

    #[test]
    fn every_truncation_is_refused_without_a_panic() {
        let bytes = encode(&sample());
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn a_huge_length_is_refused_before_anything_is_reserved() {
        let mut bytes = vec![VERSION];
        bytes.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode(&bytes).is_err());
    }
}
