//! QuickJS's allocations, counted against the session's memory limit: an
//! allocation past it is refused and remembered, so a run that fails after one
//! is reported as the memory limit however QuickJS said it (out of memory,
//! QuickJS throws an `InternalError` when it can still make one, else `null`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rquickjs::allocator::{Allocator, RustAllocator};

/// Bytes QuickJS may hold; `usize::MAX` until the session starts.
static LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);
/// Bytes QuickJS holds now.
static HELD: AtomicUsize = AtomicUsize::new(0);
/// Whether an allocation was refused since [`take_refused`] last looked.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// Sets the most QuickJS may hold.
pub fn set_limit(bytes: usize) {
    LIMIT.store(bytes, Ordering::Relaxed);
}

/// The bytes QuickJS holds.
pub fn held() -> usize {
    HELD.load(Ordering::Relaxed)
}

/// Whether an allocation was refused since the last call.
pub fn take_refused() -> bool {
    REFUSED.swap(false, Ordering::Relaxed)
}

/// Whether `more` bytes fit beside the `less` about to be given back; a refusal
/// is remembered.
fn fits(more: usize, less: usize) -> bool {
    let after = held().saturating_sub(less).saturating_add(more);
    let fits = after <= LIMIT.load(Ordering::Relaxed);
    if !fits {
        REFUSED.store(true, Ordering::Relaxed);
    }
    fits
}

/// Rust's allocator (through rquickjs's wrapper), counted.
pub struct Metered;

// SAFETY: every call goes to `RustAllocator`, which upholds the contract; this
// only counts and refuses.
unsafe impl Allocator for Metered {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        if !fits(size, 0) {
            return std::ptr::null_mut();
        }
        let ptr = RustAllocator.alloc(size);
        if !ptr.is_null() {
            // SAFETY: `ptr` was just allocated by `RustAllocator`.
            HELD.fetch_add(
                unsafe { RustAllocator::usable_size(ptr) },
                Ordering::Relaxed,
            );
        }
        ptr
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        if !fits(count.saturating_mul(size), 0) {
            return std::ptr::null_mut();
        }
        let ptr = RustAllocator.calloc(count, size);
        if !ptr.is_null() {
            // SAFETY: `ptr` was just allocated by `RustAllocator`.
            HELD.fetch_add(
                unsafe { RustAllocator::usable_size(ptr) },
                Ordering::Relaxed,
            );
        }
        ptr
    }

    unsafe fn dealloc(&mut self, ptr: *mut u8) {
        if ptr.is_null() {
            return;
        }
        // SAFETY: QuickJS frees only what this allocator gave it.
        let size = unsafe { RustAllocator::usable_size(ptr) };
        HELD.fetch_sub(size.min(held()), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { RustAllocator.dealloc(ptr) }
    }

    unsafe fn realloc(&mut self, ptr: *mut u8, new_size: usize) -> *mut u8 {
        // QuickJS's own layer turns these into an allocation and a free.
        if ptr.is_null() {
            return self.alloc(new_size);
        }
        if new_size == 0 {
            // SAFETY: as in `dealloc`.
            unsafe { self.dealloc(ptr) };
            return std::ptr::null_mut();
        }
        // SAFETY: QuickJS reallocates only what this allocator gave it.
        let old = unsafe { RustAllocator::usable_size(ptr) };
        if new_size > old && !fits(new_size, old) {
            return std::ptr::null_mut();
        }
        // SAFETY: as above.
        let moved = unsafe { RustAllocator.realloc(ptr, new_size) };
        if !moved.is_null() {
            // SAFETY: `moved` was just allocated by `RustAllocator`.
            let new = unsafe { RustAllocator::usable_size(moved) };
            HELD.fetch_sub(old.min(held()), Ordering::Relaxed);
            HELD.fetch_add(new, Ordering::Relaxed);
        }
        moved
    }

    unsafe fn usable_size(ptr: *mut u8) -> usize {
        // SAFETY: QuickJS asks only about what this allocator gave it.
        unsafe { RustAllocator::usable_size(ptr) }
    }
}
