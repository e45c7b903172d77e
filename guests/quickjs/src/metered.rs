//! QuickJS's allocations, counted against the session's memory limit: an
//! allocation past it is refused and remembered, so a run that fails after one
//! is reported as the memory limit however QuickJS said it (out of memory,
//! QuickJS throws an `InternalError` when it can still make one, else `null`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rquickjs::allocator::Allocator;

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

// wasi-libc's allocator (dlmalloc), as QuickJS's own default allocator uses
// it. Rust's global allocator, through rquickjs's `RustAllocator`, aligns to 16
// bytes, which on wasm32 turns every `realloc` into a new block and a copy:
// growing arrays to the memory limit took twice as long as on the reactor.
unsafe extern "C" {
    fn malloc(size: usize) -> *mut u8;
    fn calloc(count: usize, size: usize) -> *mut u8;
    fn realloc(ptr: *mut u8, size: usize) -> *mut u8;
    fn free(ptr: *mut u8);
    fn malloc_usable_size(ptr: *const u8) -> usize;
}

/// wasi-libc's `malloc`, counted.
pub struct Metered;

// SAFETY: every call goes to wasi-libc's allocator, which upholds the contract
// (what `malloc` returns is aligned for any C type, as QuickJS needs); this
// only counts and refuses.
unsafe impl Allocator for Metered {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        if !fits(size, 0) {
            return std::ptr::null_mut();
        }
        // SAFETY: a plain C allocation.
        let ptr = unsafe { malloc(size) };
        count_new(ptr);
        ptr
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        if !fits(count.saturating_mul(size), 0) {
            return std::ptr::null_mut();
        }
        // SAFETY: a plain C allocation.
        let ptr = unsafe { calloc(count, size) };
        count_new(ptr);
        ptr
    }

    unsafe fn dealloc(&mut self, ptr: *mut u8) {
        if ptr.is_null() {
            return;
        }
        // SAFETY: QuickJS frees only what this allocator gave it.
        let size = unsafe { malloc_usable_size(ptr) };
        HELD.fetch_sub(size.min(held()), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { free(ptr) }
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
        let old = unsafe { malloc_usable_size(ptr) };
        if new_size > old && !fits(new_size, old) {
            return std::ptr::null_mut();
        }
        // SAFETY: as above.
        let moved = unsafe { realloc(ptr, new_size) };
        if !moved.is_null() {
            // SAFETY: `moved` was just allocated by wasi-libc.
            let new = unsafe { malloc_usable_size(moved) };
            HELD.fetch_sub(old.min(held()), Ordering::Relaxed);
            HELD.fetch_add(new, Ordering::Relaxed);
        }
        moved
    }

    unsafe fn usable_size(ptr: *mut u8) -> usize {
        // SAFETY: QuickJS asks only about what this allocator gave it.
        unsafe { malloc_usable_size(ptr) }
    }
}

/// Counts a block just allocated, if it was.
fn count_new(ptr: *mut u8) {
    if !ptr.is_null() {
        // SAFETY: `ptr` was just allocated by wasi-libc.
        HELD.fetch_add(unsafe { malloc_usable_size(ptr) }, Ordering::Relaxed);
    }
}
