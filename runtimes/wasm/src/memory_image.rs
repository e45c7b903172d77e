//! A guest's linear memory as the pages that differ from a fresh instance's
//! ([`MemoryTemplate`]): what a start by turns keeps of its prelude's turn, and
//! what a snapshot keeps of a session ([`SessionImage`]).

use std::sync::Arc;

use wasmtime::{Memory, Store};

/// A wasm page of linear memory is 64 KiB; templates are kept in 4 KiB pages,
/// the host's, so that a turn that changed a few bytes costs one page.
const PAGE: usize = 4096;
const WASM_PAGE: usize = 65536;

/// The pages of linear memory that the prelude's turn changed, and the memory's
/// size after it.
pub(crate) struct MemoryTemplate {
    size: usize,
    /// The index (in 4 KiB pages) of each page kept, in order.
    pages: Vec<u32>,
    /// Their bytes, `PAGE` per entry of `pages`.
    bytes: PageBytes,
}

/// A template's pages: its own, or a range of a snapshot's bytes, shared rather
/// than copied (a restore's).
enum PageBytes {
    Own(Vec<u8>),
    Shared(Arc<Vec<u8>>, std::ops::Range<usize>),
}

impl std::ops::Deref for PageBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            PageBytes::Own(bytes) => bytes,
            PageBytes::Shared(bytes, range) => &bytes[range.clone()],
        }
    }
}

impl MemoryTemplate {
    /// The pages of `after` that differ from `before` (the fresh instance's
    /// memory), and those past `before`'s end that are not all zeros.
    pub(crate) fn between(before: &[u8], after: &[u8]) -> MemoryTemplate {
        let mut pages = Vec::new();
        let mut bytes = Vec::new();
        for (index, page) in after.chunks(PAGE).enumerate() {
            let start = index * PAGE;
            let changed = match before.get(start..start + page.len()) {
                Some(old) => old != page,
                None => page.iter().any(|&b| b != 0),
            };
            if changed {
                pages.push(u32::try_from(index).unwrap_or(u32::MAX));
                bytes.extend_from_slice(page);
                bytes.resize(bytes.len().next_multiple_of(PAGE), 0);
            }
        }
        MemoryTemplate {
            size: after.len(),
            pages,
            bytes: PageBytes::Own(bytes),
        }
    }

    /// The template as bytes: the memory's size (`u64`), the number of pages
    /// kept (`u32`), each page's index (`u32`), then the pages; all
    /// little-endian. In parts, so that sealing copies the pages once.
    pub(crate) fn to_parts(&self) -> (Vec<u8>, &[u8]) {
        let mut head = Vec::with_capacity(12 + self.pages.len() * 4);
        head.extend_from_slice(&(self.size as u64).to_le_bytes());
        head.extend_from_slice(&(self.pages.len() as u32).to_le_bytes());
        for page in &self.pages {
            head.extend_from_slice(&page.to_le_bytes());
        }
        (head, &self.bytes)
    }

    /// A template from [`to_parts`](Self::to_parts)' bytes, the `range` of
    /// `shared` (its pages stay there, not copied); why not, when they are not a
    /// whole one: a size that is not whole wasm pages or is over `most`, pages
    /// out of order, repeated or past the end, or bytes that are not one page per
    /// index.
    pub(crate) fn read(
        shared: Arc<Vec<u8>>,
        range: std::ops::Range<usize>,
        most: usize,
    ) -> Result<MemoryTemplate, String> {
        let bytes = shared
            .get(range.clone())
            .ok_or("its memory image lies outside the snapshot")?;
        let (size, rest) = bytes
            .split_first_chunk::<8>()
            .ok_or("its memory image has no size")?;
        let size = usize::try_from(u64::from_le_bytes(*size))
            .map_err(|_| "its memory image's size does not fit this machine")?;
        if !size.is_multiple_of(WASM_PAGE) {
            return Err(format!(
                "its memory image of {size} bytes is not whole wasm pages"
            ));
        }
        if size > most {
            return Err(format!(
                "its memory image of {size} bytes is over what this runtime's sessions may hold ({most})"
            ));
        }
        let (count, rest) = rest
            .split_first_chunk::<4>()
            .ok_or("its memory image has no page count")?;
        let count = u32::from_le_bytes(*count) as usize;
        let index_bytes = count
            .checked_mul(4)
            .filter(|n| *n <= rest.len())
            .ok_or("its memory image ends inside its page list")?;
        let (indices, stored) = rest.split_at(index_bytes);
        let mut pages = Vec::with_capacity(count);
        for index in indices.chunks_exact(4) {
            let page = u32::from_le_bytes([index[0], index[1], index[2], index[3]]);
            if pages.last().is_some_and(|last| *last >= page) {
                return Err("its memory image lists its pages out of order".into());
            }
            if (page as usize + 1) * PAGE > size {
                return Err(format!(
                    "its memory image has a page ({page}) past its end ({size} bytes)"
                ));
            }
            pages.push(page);
        }
        if stored.len() != count * PAGE {
            return Err(format!(
                "its memory image lists {count} pages and holds {} bytes of them",
                stored.len()
            ));
        }
        let start = range.end - stored.len();
        Ok(MemoryTemplate {
            size,
            pages,
            bytes: PageBytes::Shared(shared, start..range.end),
        })
    }

    /// Writes the template into a fresh instance's memory, growing it first.
    pub(crate) fn apply<T>(&self, store: &mut Store<T>, memory: Memory) -> wasmtime::Result<()> {
        let current = memory.data_size(&*store);
        if self.size > current {
            let grow = (self.size - current).div_ceil(WASM_PAGE);
            memory.grow(&mut *store, u64::try_from(grow)?)?;
        }
        let data = memory.data_mut(&mut *store);
        for (page, bytes) in self.pages.iter().zip(self.bytes.chunks(PAGE)) {
            let start = *page as usize * PAGE;
            let end = (start + PAGE).min(data.len());
            data[start..end].copy_from_slice(&bytes[..end - start]);
        }
        Ok(())
    }
}

/// A session's state at a step boundary: the pages of its memory that differ
/// from a fresh instance's, and the memory it held when its first script
/// started (its memory cap's baseline), if any script had grown it.
pub(crate) struct SessionImage {
    pub(crate) memory: MemoryTemplate,
    pub(crate) baseline: Option<usize>,
}

impl std::fmt::Debug for SessionImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionImage")
            .field("size", &self.memory.size)
            .field("pages", &self.memory.pages.len())
            .field("baseline", &self.baseline)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A memory of two wasm pages with its third 4 KiB page changed.
    fn changed() -> (Vec<u8>, Vec<u8>) {
        let before = vec![0u8; 2 * WASM_PAGE];
        let mut after = before.clone();
        after[2 * PAGE + 5] = 7;
        (before, after)
    }

    fn bytes_of(template: &MemoryTemplate) -> Vec<u8> {
        let (head, pages) = template.to_parts();
        [head.as_slice(), pages].concat()
    }

    /// `bytes` read as a template, behind a byte of something else (as a
    /// snapshot's payload lies inside its envelope).
    fn read(bytes: Vec<u8>, most: usize) -> Result<MemoryTemplate, String> {
        let len = bytes.len();
        let shared = Arc::new([vec![9], bytes].concat());
        MemoryTemplate::read(shared, 1..len + 1, most)
    }

    #[test]
    fn a_memory_image_reads_back_as_it_was_written() {
        let (before, after) = changed();
        let template = MemoryTemplate::between(&before, &after);
        let read = read(bytes_of(&template), usize::MAX).expect("it reads");
        assert_eq!(read.size, after.len());
        assert_eq!(read.pages, vec![2]);
        assert_eq!(*read.bytes, *template.bytes);
    }

    #[test]
    fn a_damaged_memory_image_is_refused_saying_why() {
        let (before, after) = changed();
        let good = bytes_of(&MemoryTemplate::between(&before, &after));
        let with = |edit: &dyn Fn(&mut Vec<u8>)| {
            let mut bytes = good.clone();
            edit(&mut bytes);
            read(bytes, usize::MAX).err().expect("refused")
        };
        assert!(with(&|b| b.truncate(5)).contains("no size"));
        assert!(with(&|b| b[0] = 1).contains("not whole wasm pages"));
        assert!(with(&|b| b.truncate(10)).contains("no page count"));
        assert!(with(&|b| b[11] = 16).contains("ends inside its page list"));
        // The page's index past the memory's end (two wasm pages: 32 of 4 KiB).
        assert!(with(&|b| b[12] = 32).contains("past its end"));
        assert!(with(&|b| b.truncate(b.len() - 1)).contains("holds"));
        let two = MemoryTemplate {
            size: 2 * WASM_PAGE,
            pages: vec![3, 3],
            bytes: PageBytes::Own(vec![0; 2 * PAGE]),
        };
        assert!(
            read(bytes_of(&two), usize::MAX)
                .err()
                .expect("refused")
                .contains("out of order")
        );
        assert!(
            read(good.clone(), WASM_PAGE)
                .err()
                .expect("refused")
                .contains("over what this runtime's sessions may hold")
        );
    }
}
