//! One `wasmtime::Engine` per process, and the epoch ticker that drives deadlines.
//!
//! Compiled modules belong to the engine that compiled them, and a serialized module
//! is only valid for an engine with the same configuration, so the configuration is
//! fixed here, once: every guest and every limit setting shares it. Per-run limits
//! (time, memory) live in each store, not in the engine.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::{self, Thread};
use std::time::Duration;

use wasmtime::{Config, Engine};

/// How often the ticker advances the engine's epoch. A store checks its deadline at
/// every tick, so a runaway guest stops at most this long after its deadline.
pub(crate) const TICK: Duration = Duration::from_millis(5);

/// Wasm stack a guest may use (`Config::max_wasm_stack`). Deep recursion in an
/// interpreter traps here, as a call depth limit, before any native stack runs out.
pub(crate) const MAX_WASM_STACK: usize = 4 << 20;

/// The native stack each guest runs on (async fibers must fit the wasm stack and
/// the host calls it makes).
const ASYNC_STACK: usize = MAX_WASM_STACK + (2 << 20);

struct Shared {
    engine: Engine,
    ticker: Thread,
    running: AtomicUsize,
}

static SHARED: OnceLock<Result<Shared, String>> = OnceLock::new();

fn config() -> Config {
    let mut config = Config::new();
    config
        .epoch_interruption(true)
        .max_wasm_stack(MAX_WASM_STACK)
        .async_stack_size(ASYNC_STACK)
        // MicroPython unwinds with wasm exception handling.
        .wasm_exceptions(true)
        .wasm_gc(true)
        .wasm_function_references(true);
    config
}

fn shared() -> Result<&'static Shared, String> {
    SHARED
        .get_or_init(|| {
            let engine = Engine::new(&config()).map_err(|e| format!("{e:#}"))?;
            let ticking = engine.clone();
            let ticker = thread::Builder::new()
                .name("codeact-wasm-epoch".into())
                .spawn(move || tick_forever(ticking))
                .map_err(|e| format!("could not start the epoch ticker: {e}"))?;
            Ok(Shared {
                engine,
                ticker: ticker.thread().clone(),
                running: AtomicUsize::new(0),
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Advances the epoch every [`TICK`] while some guest runs, and sleeps otherwise,
/// so an idle process does not wake up 200 times a second.
fn tick_forever(engine: Engine) {
    loop {
        let busy = SHARED
            .get()
            .and_then(|s| s.as_ref().ok())
            .is_some_and(|s| s.running.load(Ordering::Acquire) > 0);
        if busy {
            thread::sleep(TICK);
            engine.increment_epoch();
        } else {
            thread::park();
        }
    }
}

/// The process's engine. Fails only if wasmtime cannot start on this machine.
pub(crate) fn engine() -> Result<&'static Engine, String> {
    shared().map(|s| &s.engine)
}

/// Keeps the ticker running while it lives: hold one for every guest call.
pub(crate) struct Ticking(());

impl Ticking {
    pub(crate) fn start() -> Result<Ticking, String> {
        let shared = shared()?;
        if shared.running.fetch_add(1, Ordering::AcqRel) == 0 {
            shared.ticker.unpark();
        }
        Ok(Ticking(()))
    }
}

impl Drop for Ticking {
    fn drop(&mut self) {
        if let Ok(shared) = shared() {
            shared.running.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// The sha256 (lowercase hex) of everything wasmtime says a compiled module depends
/// on in the engine: target, compiler flags, tunables, wasm features. Part of every
/// cache key, so a module compiled under other settings is never loaded. The full
/// hash stream is fed to sha256 (not a 64-bit `Hasher`), so two settings cannot
/// collide by chance.
pub(crate) fn fingerprint(engine: &Engine) -> String {
    use std::hash::{Hash, Hasher};

    use sha2::{Digest, Sha256};

    struct Feed(Sha256);
    impl Hasher for Feed {
        fn write(&mut self, bytes: &[u8]) {
            self.0.update(bytes);
        }
        fn finish(&self) -> u64 {
            0
        }
    }
    let mut feed = Feed(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut feed);
    feed.0
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
