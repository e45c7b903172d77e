//! One `wasmtime::Engine` per process, and the epoch ticker that drives deadlines.
//!
//! Compiled modules belong to the engine that compiled them, and a serialized module
//! is only valid for an engine with the same configuration, so the configuration is
//! fixed here, once: every guest and every limit setting shares it. Per-run limits
//! (time, memory) live in each store, not in the engine.
//!
//! Instances come from wasmtime's pooling allocator ([`Pool`]): a new session takes
//! a slot whose memory is already mapped, from the last session of the same guest,
//! and wasmtime puts back the bytes that session changed (only those, found with
//! Linux's `PAGEMAP_SCAN`), so a session starts without an `mmap`, without page
//! faults on what the guest touches again, and ends without an `munmap`: a
//! `wasm:rhai` session started and ran its first step in 98 µs without the pool, 39 µs
//! with it (`codeact bench --runtime wasm --quick --no-scale`, with and without
//! `CODEACT_WASM_INSTANCES=0`, release build, one sitting).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::{self, Thread};
use std::time::Duration;

use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, PoolConcurrencyLimitError,
    PoolingAllocationConfig,
};

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

/// How many guest instances may be live at once in this process, by default: each
/// wasm session holds one from its start to its end.
pub const DEFAULT_INSTANCES: u32 = 1000;

/// The variable that sets how many guest instances may be live at once (default
/// [`DEFAULT_INSTANCES`]); `0` turns the pool off (each instance maps and unmaps
/// its own memory: slower sessions, no cap but the machine's).
pub const INSTANCES_VARIABLE: &str = "CODEACT_WASM_INSTANCES";

/// How many bytes at the start of a slot's memory wasmtime puts back in place,
/// page by page, when a session ends, instead of handing them back to the kernel:
/// the guest's stack and the data next to it, which every session touches again.
/// 2 MiB gave new `wasm:rhai` sessions what 16 MiB did (31–43 µs against 46–55,
/// against 106 µs with none; a loop of 5,000 new sessions and first steps, release
/// build, one sitting), and bounds what an ended session's slot keeps resident: at most
/// 2 MiB for each of wasmtime's warm slots (up to 100). Only with `PAGEMAP_SCAN`
/// (Linux 6.7 and later), which finds the pages the session changed: without it
/// wasmtime would rewrite all of them at every session's end.
const KEEP_RESIDENT: usize = 2 << 20;

/// How the engine allocates instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pool {
    /// A pool of this many slots; `keeps_pages` when ended sessions' pages stay
    /// mapped and are put back as they were.
    Slots { instances: u32, keeps_pages: bool },
    /// Each instance maps its own memory (the pool was turned off, or this machine
    /// could not reserve it).
    OnDemand,
}

static SHARED: OnceLock<Result<Shared, String>> = OnceLock::new();

fn config(pool: Pool) -> Config {
    let mut config = Config::new();
    config
        .epoch_interruption(true)
        .max_wasm_stack(MAX_WASM_STACK)
        .async_stack_size(ASYNC_STACK)
        // MicroPython unwinds with wasm exception handling.
        .wasm_exceptions(true)
        .wasm_gc(true)
        .wasm_function_references(true);
    if let Pool::Slots {
        instances,
        keeps_pages,
    } = pool
    {
        let mut pooling = PoolingAllocationConfig::new();
        pooling
            .total_core_instances(instances)
            .total_memories(instances)
            .total_tables(instances)
            .total_stacks(instances)
            .total_gc_heaps(instances)
            // CPython's function table is the largest here; room to spare.
            .table_elements(1 << 18)
            .max_core_instance_size(16 << 20)
            // A 32-bit memory's whole range: a guest's limit is its store's.
            .max_memory_size(4 << 30);
        if keeps_pages {
            pooling
                .linear_memory_keep_resident(KEEP_RESIDENT)
                .table_keep_resident(1 << 20)
                .pagemap_scan(Enabled::Yes);
        }
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling));
    }
    config
}

/// The pool asked for: [`INSTANCES_VARIABLE`], else [`DEFAULT_INSTANCES`] slots,
/// keeping pages where the kernel can say which ones a session changed.
fn wanted_pool(variable: Option<&str>) -> Result<Pool, String> {
    let instances = match variable {
        None => DEFAULT_INSTANCES,
        Some(text) => text.trim().parse::<u32>().map_err(|_| {
            format!(
                "{INSTANCES_VARIABLE}={text:?} is not a number of instances (0 turns the pool off)"
            )
        })?,
    };
    Ok(match instances {
        0 => Pool::OnDemand,
        instances => Pool::Slots {
            instances,
            keeps_pages: PoolingAllocationConfig::is_pagemap_scan_available(),
        },
    })
}

/// The engine for `pool`, or for the next simpler way to allocate when this
/// machine refuses it (a pool reserves its slots' address space up front, which a
/// `ulimit -v` may forbid): never a failure the on-demand engine would not have.
fn engine_for(pool: Pool) -> Result<(Engine, Pool), String> {
    let mut tried = pool;
    loop {
        match Engine::new(&config(tried)) {
            Ok(engine) => return Ok((engine, tried)),
            Err(e) => {
                let simpler = match tried {
                    Pool::Slots {
                        instances,
                        keeps_pages: true,
                    } => Pool::Slots {
                        instances,
                        keeps_pages: false,
                    },
                    Pool::Slots { .. } => Pool::OnDemand,
                    Pool::OnDemand => return Err(format!("{e:#}")),
                };
                tracing::warn!(
                    "wasm engine: {tried:?} refused ({e:#}); using {simpler:?}: new sessions are slower"
                );
                tried = simpler;
            }
        }
    }
}

fn shared() -> Result<&'static Shared, String> {
    SHARED
        .get_or_init(|| {
            let variable = std::env::var(INSTANCES_VARIABLE).ok();
            let (engine, _pool) = engine_for(wanted_pool(variable.as_deref())?)?;
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

/// What to tell the user about a failed instantiation: for a full pool, how many
/// instances it holds and how to raise that; else wasmtime's own words.
pub(crate) fn instantiation_error(error: &wasmtime::Error) -> String {
    if error.is::<PoolConcurrencyLimitError>() {
        format!(
            "{error:#}: this process already holds as many live wasm sessions as its pool \
             has instances; end idle sessions, or raise {INSTANCES_VARIABLE} (default \
             {DEFAULT_INSTANCES}; 0 turns the pool off)"
        )
    } else {
        format!("{error:#}")
    }
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

/// How long a guest may take to start by default (CPython takes ~80 ms here; the
/// margin is for a loaded machine).
pub(crate) const STARTUP_TIME: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_size_comes_from_the_variable_and_zero_turns_the_pool_off() {
        let pages = PoolingAllocationConfig::is_pagemap_scan_available();
        assert_eq!(
            wanted_pool(None),
            Ok(Pool::Slots {
                instances: DEFAULT_INSTANCES,
                keeps_pages: pages
            })
        );
        assert_eq!(
            wanted_pool(Some(" 20 ")),
            Ok(Pool::Slots {
                instances: 20,
                keeps_pages: pages
            })
        );
        assert_eq!(wanted_pool(Some("0")), Ok(Pool::OnDemand));
    }

    #[test]
    fn a_pool_size_that_is_not_a_number_is_an_error_naming_the_variable() {
        for text in ["many", "-1", "1e3", ""] {
            let error = wanted_pool(Some(text)).expect_err(text);
            assert!(error.contains(INSTANCES_VARIABLE), "{error}");
        }
    }

    /// A slot is reused by the next instance: nothing the last one wrote, in its
    /// image's pages, past them, or in memory it grew, may be left for it to read.
    #[test]
    fn a_reused_slot_holds_nothing_the_last_instance_wrote() {
        let engine = Engine::new(&config(Pool::Slots {
            instances: 1,
            keeps_pages: PoolingAllocationConfig::is_pagemap_scan_available(),
        }))
        .expect("a one-slot engine");
        // 2 pages to start (128 KiB), an image "codeact" at 1024.
        let module = wasmtime::Module::new(
            &engine,
            r#"(module (memory (export "memory") 2) (data (i32.const 1024) "codeact"))"#,
        )
        .expect("compiles");
        let secret = b"the previous session's secret";
        let places = [0, 1024, 70_000, 200_000];
        for _ in 0..2 {
            let mut store = wasmtime::Store::new(&engine, ());
            let instance = wasmtime::Instance::new(&mut store, &module, &[]).expect("a slot");
            let memory = instance.get_memory(&mut store, "memory").expect("memory");
            assert_eq!(
                memory.data_size(&store),
                2 << 16,
                "the image's size, not the last one's"
            );
            let bytes = memory.data(&store);
            assert_eq!(&bytes[1024..1031], b"codeact");
            let written: usize = bytes.iter().map(|b| usize::from(*b != 0)).sum();
            assert_eq!(written, 7, "only the image's bytes are set");
            memory.grow(&mut store, 3).expect("grows to 5 pages");
            for at in places {
                memory.write(&mut store, at, secret).expect("in bounds");
            }
        }
    }

    #[test]
    fn a_pool_the_engine_refuses_falls_back_to_instances_on_demand() {
        // 4 GiB of address space for each of 4 billion slots: refused.
        let (_engine, pool) = engine_for(Pool::Slots {
            instances: u32::MAX,
            keeps_pages: true,
        })
        .expect("the on-demand engine");
        assert_eq!(pool, Pool::OnDemand);
    }

    #[test]
    fn a_full_pool_is_explained_with_the_variable_that_raises_it() {
        let engine = Engine::new(&config(Pool::Slots {
            instances: 1,
            keeps_pages: false,
        }))
        .expect("a one-slot engine");
        let module = wasmtime::Module::new(&engine, "(module (memory 1))").expect("compiles");
        let mut first = wasmtime::Store::new(&engine, ());
        let _held = wasmtime::Instance::new(&mut first, &module, &[]).expect("the one slot");
        let mut second = wasmtime::Store::new(&engine, ());
        let error = wasmtime::Instance::new(&mut second, &module, &[]).expect_err("no slot left");
        let text = instantiation_error(&error);
        assert!(text.contains(INSTANCES_VARIABLE), "{text}");
        assert!(text.contains("end idle sessions"), "{text}");
    }
}
