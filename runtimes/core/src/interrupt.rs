//! Stopping a run from outside it: an app cancels a run, or the run's own
//! wall-clock budget passes, while a script is still going.
//!
//! A script runs on a thread that blocks until the engine returns, so the caller
//! cannot simply drop it: the engine has to be told. Each backend already stops a
//! script at its time limit (an alarm flag checked on every operation, a wasm
//! epoch, a worker killed); an [`Interrupt`] raised by another thread reaches the
//! same mechanism, so an interrupted run ends the way a run past its time limit
//! does, and at the same speed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

type Hook = Box<dyn FnOnce() + Send>;

/// A one-shot signal that stops one run of a session, from any thread. Clones
/// share the signal. A backend that cannot be interrupted ignores it and the run
/// ends at its time limit as before ([`crate::Session::run_interruptible`]).
#[derive(Clone, Default)]
pub struct Interrupt {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    raised: AtomicBool,
    hook: Mutex<Option<Hook>>,
}

impl std::fmt::Debug for Interrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interrupt")
            .field("raised", &self.is_raised())
            .finish_non_exhaustive()
    }
}

impl Interrupt {
    /// A signal not raised yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Raises the signal: the run it was given to stops as soon as its backend
    /// notices (on its next operation, epoch tick or wait), and a run that has not
    /// started yet stops at once. Raising twice does nothing more.
    pub fn raise(&self) {
        if self.inner.raised.swap(true, Ordering::SeqCst) {
            return;
        }
        let hook = self
            .inner
            .hook
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(hook) = hook {
            hook();
        }
    }

    /// Whether the signal was raised: for backends that poll (a wasm epoch tick, a
    /// wait for a worker's reply).
    pub fn is_raised(&self) -> bool {
        self.inner.raised.load(Ordering::SeqCst)
    }

    /// Runs `hook` when the signal is raised, or now if it already was: for
    /// backends that stop a run by raising a flag of their own (Rhai's alarm). A
    /// later hook replaces an earlier one that has not run.
    pub fn on_raise(&self, hook: impl FnOnce() + Send + 'static) {
        let mut slot = self
            .inner
            .hook
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.is_raised() {
            drop(slot);
            hook();
            return;
        }
        *slot = Some(Box::new(hook));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[test]
    fn a_hook_runs_once_when_the_signal_is_raised() {
        let interrupt = Interrupt::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        interrupt.on_raise(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        interrupt.clone().raise();
        interrupt.raise();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(interrupt.is_raised());
    }

    #[test]
    fn a_hook_set_after_the_signal_was_raised_runs_at_once() {
        let interrupt = Interrupt::new();
        interrupt.raise();
        let ran = Arc::new(AtomicBool::new(false));
        let seen = ran.clone();
        interrupt.on_raise(move || seen.store(true, Ordering::SeqCst));
        assert!(ran.load(Ordering::SeqCst));
    }
}
