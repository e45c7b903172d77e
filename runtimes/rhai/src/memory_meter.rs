//! A session-wide memory cap on top of Rhai's per-value caps.
//!
//! Rhai checks a value's size when an operation returns it, but not every path: an
//! indexed assignment (`m[key] = v`) checks the new item, not the map it grows, so a
//! loop can grow one map past every cap until the operation limit stops it. And
//! values in different variables add up unchecked. So every variable read counts
//! toward a scan of the scope in view (the session's variables, or a function's own
//! while it runs); the scan totals the bytes held and stops the run past
//! [`Limits::max_memory_bytes`](codeact_runtime::Limits).
//!
//! Scans are amortised: the next one is due after as many reads as the last one
//! visited values (at least [`MIN_READS_BETWEEN_SCANS`]), so scanning costs about
//! one value visit per read however large the data, and a run overshoots the cap by
//! at most what it can add in that many reads: for a map grown one key per read,
//! about the size it had; for new variables, at most 16 reads' worth of values, each
//! within Rhai's per-value caps. The schedule carries over from run to run.

use rhai::{Dynamic, EvalAltResult, EvalContext, Position, Scope};

use crate::run_state;

/// Reads between two scans when the scope is small.
const MIN_READS_BETWEEN_SCANS: u64 = 16;

/// Approximate bytes of one `Dynamic` slot.
const SLOT_BYTES: usize = 16;
/// Approximate bookkeeping bytes of one map entry (key and tree node).
const MAP_ENTRY_BYTES: usize = 48;

/// Called by `on_var` on every variable read.
pub(crate) fn on_variable_read(
    context: &EvalContext,
    max_bytes: usize,
) -> Result<Option<Dynamic>, Box<EvalAltResult>> {
    if !run_state::count_variable_read() {
        return Ok(None);
    }
    let mut meter = Meter {
        bytes: 0,
        visited: 0,
        max_bytes,
    };
    for (_, _, value) in context.scope().iter_raw() {
        if !meter.add(value) {
            break;
        }
    }
    run_state::schedule_next_scan(meter.visited.max(MIN_READS_BETWEEN_SCANS));
    if meter.bytes > max_bytes {
        return Err(Box::new(EvalAltResult::ErrorDataTooLarge(
            format!("Total size of the variables ({} bytes)", meter.bytes),
            Position::NONE,
        )));
    }
    Ok(None)
}

struct Meter {
    bytes: usize,
    visited: u64,
    max_bytes: usize,
}

impl Meter {
    /// Adds `value`'s size; false once the total is past the cap (stop counting).
    fn add(&mut self, value: &Dynamic) -> bool {
        self.visited += 1;
        self.bytes += SLOT_BYTES;
        if value.is_shared() {
            return match value.read_lock::<Dynamic>() {
                Some(inner) => self.add(&inner),
                None => true,
            };
        }
        if let Ok(text) = value.as_immutable_string_ref() {
            self.bytes += text.len();
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
        }
        self.bytes <= self.max_bytes
    }
}

/// Brings the session's variables back under `max_bytes` by removing the largest,
/// so a session that hit the memory limit stays usable. Returns the names removed
/// (largest first), or `None` when the variables were within the limit.
pub(crate) fn relieve(scope: &mut Scope<'static>, max_bytes: usize) -> Option<Vec<String>> {
    let mut sizes: Vec<(String, usize)> = scope
        .iter_raw()
        .map(|(name, _, value)| {
            let mut meter = Meter {
                bytes: 0,
                visited: 0,
                max_bytes,
            };
            meter.add(value);
            (name.to_string(), meter.bytes)
        })
        .collect();
    let mut total: usize = sizes.iter().map(|(_, bytes)| bytes).sum();
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
