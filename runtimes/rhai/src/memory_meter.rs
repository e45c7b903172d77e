//! A run-wide memory cap on top of Rhai's per-value caps.
//!
//! Rhai checks a value's size when an operation returns it, but not every path: an
//! indexed assignment (`m[key] = v`) checks the new item, not the map it grows, and
//! its size count skips values held inside function pointers. And values in
//! different variables, or in the frames of a recursion, add up unchecked. So the
//! meter totals the bytes held wherever a script can keep a value by name:
//!
//! - the variables in view (the session's, or a function's own while it runs),
//!   walked through arrays, maps, blobs, the values curried into function pointers
//!   (`Fn("f").curry(big)`) and the shared cells closures capture;
//! - every suspended caller's frame: each call level keeps the total of its last
//!   scan, so a recursion in which every frame holds a value counts them all.
//!
//! A value reachable twice (a shared cell, or one string buffer held by several
//! variables or frames) is counted once. Past [`Limits::max_memory_bytes`]
//! (codeact_runtime::Limits) the run stops with the memory limit.
//!
//! When it scans: on a variable read or definition, when a scan is due. Scans are
//! amortised (the next one is due after as many reads as the last one visited
//! values, at least [`MIN_READS_BETWEEN_SCANS`]), so scanning costs about one value
//! visit per read however large the data; a frame is also scanned at its first read
//! or definition after a call or return, and at its first read after it defined a
//! variable; and a function's frame holding few values is scanned on every access,
//! so its record covers what it holds when it calls deeper.
//!
//! What it does not see: values in flight that no variable names yet (call
//! arguments being evaluated, the array a `map` builds); what a frame holding many
//! values (a large array) added since its last scan, or defined and never read
//! again, before it calls deeper; and growth of a caller's variable through `this`
//! until the caller scans again. Those are caught by the allocation budget
//! (`run_state::over_allocation_budget`) where the process installed
//! `codeact_alloc_meter::MeteredAllocator`; this meter still bounds what the
//! session's variables keep from one run to the next, which the allocation budget
//! (counting each run's allocations from zero) does not.

use std::collections::HashSet;

use rhai::{Dynamic, EvalAltResult, EvalContext, FnPtr, Position, Scope};

use crate::run_state::{self, FrameRecord};

/// Reads between two scans when the scope is small.
const MIN_READS_BETWEEN_SCANS: u64 = 16;

/// Approximate bytes of one `Dynamic` slot.
const SLOT_BYTES: usize = 16;
/// Approximate bookkeeping bytes of one map entry (key and tree node).
const MAP_ENTRY_BYTES: usize = 48;
/// Strings at least this long are counted once per buffer (by address), so one
/// string passed down a recursion is not counted once per frame. Shorter strings
/// are counted per holder: remembering them would cost more than they weigh.
const SHARED_STRING_BYTES: usize = 4_096;

/// What triggered a hook call.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// A variable is read (`on_var`).
    Read,
    /// A variable is about to be defined (`on_def_var`, before its value exists).
    Define,
}

/// Called by `on_var` and `on_def_var`: scans the frame in view when a scan is due
/// and stops the run when the frames together hold more than `max_bytes`.
pub(crate) fn on_access(
    context: &EvalContext,
    event: Event,
    max_bytes: usize,
) -> Result<(), Box<EvalAltResult>> {
    let level = context.call_level();
    if !run_state::scan_due(level, event == Event::Define) {
        return Ok(());
    }
    let (visited, frame_bytes, addresses) = run_state::with_frames_below(level, |below| {
        let mut meter = Meter::new(max_bytes, below);
        for (_, _, value) in context.scope().iter_raw() {
            if !meter.add(value) {
                break;
            }
        }
        (meter.visited, meter.bytes, meter.seen)
    });
    let total = run_state::record_frame(level, frame_bytes, visited, addresses);
    run_state::schedule_next_scan(visited.max(MIN_READS_BETWEEN_SCANS));
    if total > max_bytes {
        return Err(Box::new(EvalAltResult::ErrorDataTooLarge(
            format!("Total size of the values held ({total} bytes)"),
            Position::NONE,
        )));
    }
    Ok(())
}

/// Totals the bytes of values, each shared cell and large string buffer once.
struct Meter<'a> {
    bytes: usize,
    visited: u64,
    max_bytes: usize,
    /// What the frames below counted (consulted only for shared cells and large
    /// strings, so a scan meeting none costs no lookups).
    below: &'a [FrameRecord],
    /// Addresses this scan counted first: the frame's record, for the frames above.
    seen: HashSet<usize>,
}

impl<'a> Meter<'a> {
    fn new(max_bytes: usize, below: &'a [FrameRecord]) -> Self {
        Self {
            bytes: 0,
            visited: 0,
            max_bytes,
            below,
            seen: HashSet::new(),
        }
    }

    /// True when `address` was not counted yet (and remembers it).
    fn first_sight(&mut self, address: usize) -> bool {
        !self.below.iter().any(|record| record.counted(address)) && self.seen.insert(address)
    }

    /// Adds `value`'s size; false once the total is past the cap (stop counting).
    fn add(&mut self, value: &Dynamic) -> bool {
        self.visited += 1;
        self.bytes += SLOT_BYTES;
        if value.is_shared() {
            // A cell locked for writing is being changed by the run right now (a
            // method on a captured variable); reading it would wait, so it is
            // counted when the change is done.
            if value.is_locked() {
                return true;
            }
            return match value.read_lock::<Dynamic>() {
                Some(inner) => {
                    let address = std::ptr::from_ref::<Dynamic>(&inner) as usize;
                    !self.first_sight(address) || self.add(&inner)
                }
                None => true,
            };
        }
        if let Ok(text) = value.as_immutable_string_ref() {
            if text.len() < SHARED_STRING_BYTES || self.first_sight(text.as_ptr() as usize) {
                self.bytes += text.len();
            }
        } else if let Ok(items) = value.as_array_ref() {
            for item in items.iter() {
                if !self.add(item) {
                    return false;
                }
            }
        } else if let Ok(map) = value.as_map_ref() {
            for (key, item) in map.iter() {
                self.bytes += MAP_ENTRY_BYTES + key.len();
                if !self.add(item) {
                    return false;
                }
            }
        } else if let Ok(blob) = value.as_blob_ref() {
            self.bytes += blob.len();
        } else if let Some(function) = value.read_lock::<FnPtr>() {
            // Curried values and closure captures: invisible to Rhai's own checks.
            for item in function.iter_curry() {
                if !self.add(item) {
                    return false;
                }
            }
        }
        self.bytes <= self.max_bytes
    }
}

/// Brings the session's variables back under `max_bytes` by removing the largest,
/// so a session that hit the memory limit stays usable. Returns the names removed
/// (largest first), or `None` when the variables were within the limit.
pub(crate) fn relieve(scope: &mut Scope<'static>, max_bytes: usize) -> Option<Vec<String>> {
    // One meter for the whole scope, so a value shared by two variables is counted
    // once; it has no cap, so every variable is measured in full.
    let mut meter = Meter::new(usize::MAX, &[]);
    let mut sizes: Vec<(String, usize)> = scope
        .iter_raw()
        .map(|(name, _, value)| {
            let before = meter.bytes;
            meter.add(value);
            (name.to_string(), meter.bytes - before)
        })
        .collect();
    let mut total = meter.bytes;
    if total <= max_bytes {
        return None;
    }
    sizes.sort_by_key(|(_, bytes)| std::cmp::Reverse(*bytes));
    let mut removed = Vec::new();
    for (name, bytes) in sizes {
        if total <= max_bytes {
            break;
        }
        let _ = scope.remove::<Dynamic>(&name);
        total = total.saturating_sub(bytes);
        removed.push(name);
    }
    Some(removed)
}
