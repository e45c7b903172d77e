//! Counts what a section of code allocates on its thread, for memory limits that
//! hold whatever an engine counts itself.
//!
//! An in-process interpreter (Rhai) can only be asked to count the values it knows
//! about; what it holds elsewhere (the array a `map` builds, call arguments being
//! evaluated, a closure's captures) escapes such a meter. The allocator sees every
//! byte: [`MeteredAllocator`] passes each request to the system allocator and, on a
//! thread inside a [`Metering`] section, adds the bytes allocated and subtracts the
//! bytes freed. The interpreter polls [`Metering::net_bytes`] as it runs (Rhai:
//! on every operation) and stops the script past its limit.
//!
//! It works only where it is the global allocator, which a library cannot choose:
//! the binary does.
//!
//! ```
//! #[global_allocator]
//! static ALLOCATOR: codeact_alloc_meter::MeteredAllocator =
//!     codeact_alloc_meter::MeteredAllocator;
//!
//! fn main() {
//!     let section = codeact_alloc_meter::Metering::start();
//!     let held = vec![0u8; 1 << 20];
//!     assert!(codeact_alloc_meter::is_installed());
//!     assert!(codeact_alloc_meter::Metering::net_bytes() >= 1 << 20);
//!     drop((held, section));
//! }
//! ```
//!
//! (`codeact` re-exports it as `codeact::MeteredAllocator`.)
//!
//! [`is_installed`] says whether it is; without it a section counts nothing and
//! the interpreter's own meter is all there is. Cost: two thread-local reads per
//! allocation and free, plus an add inside a section.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

thread_local! {
    /// Whether this thread is inside a metering section.
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    /// Bytes allocated minus bytes freed on this thread since its section began.
    static NET: Cell<isize> = const { Cell::new(0) };
    /// The highest `NET` reached in the section.
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

/// Set by the first allocation through [`MeteredAllocator`].
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The system allocator, counting the bytes of metered sections (see the crate
/// docs). Install it with `#[global_allocator]` in a binary.
#[derive(Debug, Default, Clone, Copy)]
pub struct MeteredAllocator;

/// Adds `delta` to this thread's count when a section is active. `try_with`: an
/// allocation during thread teardown, after the thread-locals are gone, is not
/// counted rather than a panic.
#[inline]
fn note(delta: isize) {
    let _ = ACTIVE.try_with(|active| {
        if active.get() {
            let _ = NET.try_with(|net| {
                let now = net.get().saturating_add(delta);
                net.set(now);
                if delta > 0 {
                    let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
                }
            });
        }
    });
}

#[inline]
fn mark_installed() {
    if !INSTALLED.load(Ordering::Relaxed) {
        INSTALLED.store(true, Ordering::Relaxed);
    }
}

/// Sizes fit `isize`: `Layout` guarantees a size no larger than `isize::MAX`.
#[inline]
fn signed(size: usize) -> isize {
    isize::try_from(size).unwrap_or(isize::MAX)
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged
// and returns its result; the bookkeeping around it touches only thread-local cells
// initialised by constants (no allocation, no reentry).
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for MeteredAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        mark_installed();
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            note(signed(layout.size()));
        }
        pointer
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        mark_installed();
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        let pointer = unsafe { System.alloc_zeroed(layout) };
        if !pointer.is_null() {
            note(signed(layout.size()));
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged; the caller upholds `dealloc`'s contract.
        unsafe { System.dealloc(pointer, layout) };
        note(-signed(layout.size()));
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `realloc`'s contract.
        let moved = unsafe { System.realloc(pointer, layout, new_size) };
        if !moved.is_null() {
            note(signed(new_size) - signed(layout.size()));
        }
        moved
    }
}

/// True once [`MeteredAllocator`] has served an allocation, i.e. it is the global
/// allocator of this process.
pub fn is_installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

/// A metering section on the current thread, from [`Metering::start`] until drop.
///
/// Sections nest (a tool that runs another script on the same thread): an inner
/// section counts from zero, and on drop what it left allocated is added to the
/// section it interrupted, where it was allocated too.
#[derive(Debug)]
pub struct Metering {
    outer_active: bool,
    outer_net: isize,
    outer_peak: isize,
    /// Not `Send`: a section belongs to the thread whose allocations it counts.
    _thread_bound: std::marker::PhantomData<*const ()>,
}

impl Metering {
    /// Starts counting this thread's allocations from zero.
    pub fn start() -> Self {
        let outer_active = ACTIVE.with(|active| active.replace(true));
        let outer_net = NET.with(|net| net.replace(0));
        let outer_peak = PEAK.with(|peak| peak.replace(0));
        Self {
            outer_active,
            outer_net,
            outer_peak,
            _thread_bound: std::marker::PhantomData,
        }
    }

    /// Bytes allocated minus bytes freed on this thread since the innermost active
    /// section began (negative when it freed more than it allocated; zero when the
    /// allocator is not installed).
    pub fn net_bytes() -> isize {
        NET.with(Cell::get)
    }

    /// The highest [`net_bytes`](Self::net_bytes) the innermost active section
    /// reached so far, inner sections included: what it held at most.
    pub fn peak_bytes() -> isize {
        PEAK.with(Cell::get)
    }
}

impl Drop for Metering {
    fn drop(&mut self) {
        let inner = NET.with(Cell::get);
        let inner_peak = PEAK.with(Cell::get);
        NET.with(|net| net.set(self.outer_net.saturating_add(inner)));
        PEAK.with(|peak| {
            peak.set(
                self.outer_peak
                    .max(self.outer_net.saturating_add(inner_peak)),
            );
        });
        ACTIVE.with(|active| active.set(self.outer_active));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[global_allocator]
    static ALLOCATOR: MeteredAllocator = MeteredAllocator;

    #[test]
    fn a_section_counts_what_it_holds_and_not_what_it_freed() {
        let section = Metering::start();
        let kept: Vec<u8> = Vec::with_capacity(1 << 20);
        {
            let _freed: Vec<u8> = Vec::with_capacity(4 << 20);
        }
        let net = Metering::net_bytes();
        assert!(is_installed());
        assert!((1 << 20..(1 << 20) + 4096).contains(&net), "net {net}");
        drop(kept);
        assert!(Metering::net_bytes() < 4096);
        let peak = Metering::peak_bytes();
        assert!((4 << 20..(5 << 20) + 8192).contains(&peak), "peak {peak}");
        drop(section);
    }

    #[test]
    fn an_inner_section_counts_from_zero_and_hands_its_leftovers_to_the_outer_one() {
        let _outer = Metering::start();
        let before = Metering::net_bytes();
        let kept = {
            let _inner = Metering::start();
            let kept: Vec<u8> = Vec::with_capacity(2 << 20);
            assert!(Metering::net_bytes() >= 2 << 20);
            kept
        };
        assert!(Metering::net_bytes() - before >= 2 << 20);
        assert!(Metering::peak_bytes() - before >= 2 << 20);
        drop(kept);
    }

    #[test]
    fn allocations_outside_a_section_are_not_counted() {
        let held: Vec<u8> = Vec::with_capacity(8 << 20);
        let section = Metering::start();
        assert!(Metering::net_bytes().abs() < 4096);
        drop(section);
        drop(held);
    }

    #[test]
    fn growth_in_place_counts_the_difference() {
        let _section = Metering::start();
        let mut grown: Vec<u8> = Vec::with_capacity(1 << 20);
        grown.reserve_exact(3 << 20);
        let net = Metering::net_bytes();
        assert!((3 << 20..(3 << 20) + 4096).contains(&net), "net {net}");
    }
}
