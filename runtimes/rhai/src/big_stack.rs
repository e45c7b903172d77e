//! Runs Rhai evaluation on a large, reused stack.
//!
//! Rhai walks nested values recursively (cloning, size checks, access modes,
//! dropping), and a script can build an array nested 20,000 deep within the default
//! 5 s (`for i in 0..20000 { a = [a]; }`), which overflows a 2 MiB thread stack and
//! aborts the whole process. No Rhai limit bounds value depth. So every run, and
//! every session teardown, happens on a 256 MiB stack. A test walks a value 150,000
//! deep on it; each level of depth costs the script time linear in the depth, so
//! reaching that takes minutes of CPU, far past any sensible time limit (with
//! [`Limits::unlimited`](codeact_runtime::Limits::unlimited) it is reachable).
//!
//! The stack is reserved address space (pages are committed only when touched) and
//! is kept per thread for the next run, so switching to it costs nanoseconds, not an
//! `mmap`. If it cannot be reserved, the run uses the caller's stack.
//!
//! Compiled to WebAssembly (the `wasm:rhai` guest) there is no stack to switch to:
//! the run uses the guest's own stack, and overflowing it traps the instance (the
//! host restarts the session) instead of corrupting anything.

#[cfg(target_family = "wasm")]
pub(crate) fn run<R>(work: impl FnOnce() -> R) -> R {
    work()
}

#[cfg(not(target_family = "wasm"))]
pub(crate) use native::run;

#[cfg(not(target_family = "wasm"))]
mod native {
    use std::cell::Cell;

    use corosensei::stack::DefaultStack;
    use corosensei::{CoroutineResult, ScopedCoroutine, Yielder};

    /// Size of the per-thread evaluation stack.
    const STACK_BYTES: usize = 256 << 20;

    thread_local! {
        static SPARE: Cell<Option<DefaultStack>> = const { Cell::new(None) };
    }

    /// Runs `work` on this thread's large stack and returns its result. Panics in `work`
    /// propagate to the caller as usual.
    pub(crate) fn run<R>(work: impl FnOnce() -> R) -> R {
        // A nested run (a tool that runs a script) finds the slot empty and reserves a
        // stack of its own.
        let mut stack = match SPARE.take() {
            Some(stack) => stack,
            None => match DefaultStack::new(STACK_BYTES) {
                Ok(stack) => stack,
                Err(_) => return work(),
            },
        };
        let coroutine = ScopedCoroutine::with_stack(&mut stack, |_: &Yielder<(), ()>, ()| work());
        let result = coroutine.scope(|mut coroutine| match coroutine.as_mut().resume(()) {
            CoroutineResult::Return(result) => Some(result),
            CoroutineResult::Yield(()) => None,
        });
        SPARE.set(Some(stack));
        match result {
            Some(result) => result,
            // The body never suspends, so resuming always returns.
            None => unreachable!("the evaluation coroutine never yields"),
        }
    }
}
