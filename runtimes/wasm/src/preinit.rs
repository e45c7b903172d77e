//! Pre-initialisation of the guests built here, with wasmtime-wizer: the guest's
//! `codeact_preinit` export runs once (Rhai builds its standard library, Boa its
//! context and prelude), and the instance's memory and globals are written out as
//! a new module whose data segments hold that state. A new session then
//! instantiates the snapshot (copy-on-write) instead of building it again.
//!
//! The snapshot is made once per guest and engine and kept in the compile cache
//! like any compiled module. A guest that cannot be pre-initialised (no such
//! export, an instruction wizer cannot snapshot, a trap) is used as it is, with a
//! warning: slower sessions, never a failure. Random bytes a guest draws while
//! pre-initialising (Rust's hash-map keys: the Rhai guest draws them) are made on
//! this machine when the snapshot is, never shipped, and shared by the sessions
//! that start from it, as an in-process runtime's sessions share their thread's.

use std::sync::Arc;

use wasmtime::{Engine, Instance, Store, Val};
use wasmtime_wizer::{InstanceState, SnapshotVal, ValType, Wizer};

use crate::abi::{self, AbiState};

/// The export that pre-initialises a guest.
pub(crate) const PREINIT_EXPORT: &str = "codeact_preinit";

/// How long a guest's pre-initialisation may run.
const PREINIT_TIME: std::time::Duration = std::time::Duration::from_secs(60);

/// What the snapshot's cache entry is called: the guest's sha256 and this step's
/// version, so a change here never reuses an old snapshot.
pub(crate) fn snapshot_id(guest_sha256: &str) -> String {
    format!("{guest_sha256}-preinit1")
}

/// The pre-initialised form of `wasm`, or why there is none.
pub(crate) fn preinitialise(engine: &Engine, wasm: &[u8]) -> Result<Vec<u8>, String> {
    let mut wizer = Wizer::new();
    wizer.init_func(PREINIT_EXPORT);
    let (context, instrumented) = wizer.instrument(wasm).map_err(|e| format!("{e:#}"))?;
    let module = wasmtime::Module::new(engine, &instrumented).map_err(|e| format!("{e:#}"))?;
    let pre = abi::link(engine, &module).map_err(|e| format!("{e:#}"))?;
    let limits = codeact_runtime::Limits::default();
    let mut store = Store::new(
        engine,
        AbiState::new(Arc::new(codeact_runtime::NoTools), &limits),
    );
    // Epoch interruption is on in this engine: give the initialiser a minute.
    let until = std::time::Instant::now() + PREINIT_TIME;
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        Ok(if std::time::Instant::now() >= until {
            wasmtime::UpdateDeadline::Interrupt
        } else {
            wasmtime::UpdateDeadline::Continue(1)
        })
    });
    let _ticking = crate::engine::Ticking::start()?;
    abi::block_on(async {
        let instance = pre
            .instantiate_async(&mut store)
            .await
            .map_err(|e| format!("{e:#}"))?;
        let init = instance
            .get_typed_func::<(), ()>(&mut store, PREINIT_EXPORT)
            .map_err(|e| format!("{e:#}"))?;
        init.call_async(&mut store, ())
            .await
            .map_err(|e| format!("{PREINIT_EXPORT} trapped: {e:#}"))?;
        let mut state = Snapshotted {
            store: &mut store,
            instance,
            missing: Vec::new(),
        };
        let snapshot = wizer
            .snapshot(&context, &mut state)
            .await
            .map_err(|e| format!("{e:#}"))?;
        if !state.missing.is_empty() {
            return Err(format!(
                "the instrumented module lacks {}",
                state.missing.join(", ")
            ));
        }
        Ok(snapshot)
    })
}

/// The instance wizer reads its state from. A global or memory wizer asks for
/// and the instance lacks is noted (and the snapshot refused) rather than a panic.
struct Snapshotted<'a> {
    store: &'a mut Store<AbiState>,
    instance: Instance,
    missing: Vec<String>,
}

impl InstanceState for Snapshotted<'_> {
    async fn global_get(&mut self, name: &str, _type_hint: ValType) -> SnapshotVal {
        let value = self
            .instance
            .get_global(&mut *self.store, name)
            .map(|global| global.get(&mut *self.store));
        match value {
            Some(Val::I32(x)) => SnapshotVal::I32(x),
            Some(Val::I64(x)) => SnapshotVal::I64(x),
            Some(Val::F32(x)) => SnapshotVal::F32(x),
            Some(Val::F64(x)) => SnapshotVal::F64(x),
            Some(Val::V128(x)) => SnapshotVal::V128(x.as_u128()),
            _ => {
                self.missing.push(format!("the global {name}"));
                SnapshotVal::I32(0)
            }
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        match self.instance.get_memory(&mut *self.store, name) {
            Some(memory) => contents(memory.data(&*self.store)),
            None => {
                self.missing.push(format!("the memory {name}"));
                contents(&[]);
            }
        }
    }
}
