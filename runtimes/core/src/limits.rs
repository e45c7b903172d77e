//! One struct of limits with finite defaults, and names for each limit so that an
//! error can say which one a script hit.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What one script run may use. Every backend enforces these inside its engine; see
/// each runtime's [`RuntimeInfo::enforcement`](crate::RuntimeInfo) for how.
///
/// `Limits::default()` is finite everywhere; [`Limits::unlimited`] exists for
/// benchmarks and says so in its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// The script's own time one run may take: wall-clock time while the script
    /// runs, not counting the time it waits on host tools (a call, or a batch of
    /// calls made together), so a script that waits on slow tools is not stopped
    /// for their slowness. Engines check it cooperatively (Rhai on every
    /// operation, against a flag a timer raises), so a run can overrun by one
    /// operation's work. Default: 5 s.
    #[serde(with = "duration_ms")]
    pub wall_time: Duration,
    /// Wall-clock time one run may take in all, waits on tools included: what
    /// ends a script whose tool never answers, and bounds how long each of its
    /// calls may wait ([`call_deadline`](crate::call_deadline)). A run stops at
    /// whichever of this and [`wall_time`](Self::wall_time) comes first.
    /// Default: 60 s.
    #[serde(with = "duration_ms")]
    pub max_total_time: Duration,
    /// Interpreter operations one run may execute (Rhai counts expressions and
    /// statements). Default: 10,000,000, about 1.5 s of plain Rhai arithmetic here.
    pub max_operations: u64,
    /// Memory a run's values may hold, in bytes. How strictly this holds differs by
    /// engine: see the runtime's enforcement table. Default: 64 MiB.
    pub max_memory_bytes: usize,
    /// Nested function calls. Default: 64.
    pub max_call_depth: usize,
    /// Nesting depth of expressions in the source, and of values crossing the
    /// boundary as JSON. Default: 64.
    pub max_nesting_depth: usize,
    /// Variables one session may hold at once, across all its runs. Default: 1,024.
    pub max_variables: usize,
    /// Script-defined functions one session may hold, across all its runs.
    /// Default: 256.
    pub max_functions: usize,
    /// Bytes of printed output kept per run; the rest is counted and dropped, so a
    /// print flood costs time but not memory. Default: 64 KiB.
    pub max_output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            wall_time: Duration::from_secs(5),
            max_total_time: Duration::from_secs(60),
            max_operations: 10_000_000,
            max_memory_bytes: 64 * 1024 * 1024,
            max_call_depth: 64,
            max_nesting_depth: 64,
            max_variables: 1_024,
            max_functions: 256,
            max_output_bytes: 64 * 1024,
        }
    }
}

impl Limits {
    /// Limits so large they never trigger, for benchmarks that measure the engine
    /// rather than the sandbox. Never hand these to model-written code.
    ///
    /// Call and nesting depth stay finite (the native stack is finite either way).
    pub fn unlimited() -> Self {
        Self {
            wall_time: Duration::from_secs(60 * 60 * 24 * 365),
            max_total_time: Duration::from_secs(60 * 60 * 24 * 365),
            max_operations: u64::MAX,
            max_memory_bytes: usize::MAX / 2,
            max_call_depth: 64,
            max_nesting_depth: 64,
            max_variables: usize::MAX / 2,
            max_functions: usize::MAX / 2,
            max_output_bytes: usize::MAX / 2,
        }
    }
}

/// Names one field of [`Limits`], so an error can say which limit a script hit and
/// what its value was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LimitKind {
    /// [`Limits::wall_time`].
    WallTime,
    /// [`Limits::max_total_time`].
    TotalTime,
    /// [`Limits::max_operations`].
    Operations,
    /// [`Limits::max_memory_bytes`].
    Memory,
    /// [`Limits::max_call_depth`].
    CallDepth,
    /// [`Limits::max_nesting_depth`].
    NestingDepth,
    /// [`Limits::max_variables`].
    Variables,
    /// [`Limits::max_functions`].
    Functions,
    /// [`Limits::max_output_bytes`].
    Output,
}

impl LimitKind {
    /// Every limit, in the order of [`Limits`]' fields.
    pub const ALL: [LimitKind; 9] = [
        LimitKind::WallTime,
        LimitKind::TotalTime,
        LimitKind::Operations,
        LimitKind::Memory,
        LimitKind::CallDepth,
        LimitKind::NestingDepth,
        LimitKind::Variables,
        LimitKind::Functions,
        LimitKind::Output,
    ];

    /// The limit's name and value as a model should read it, e.g.
    /// `"time limit of 5000 ms (the script's own time, not counting waits on
    /// tools)"`.
    pub fn describe(self, limits: &Limits) -> String {
        match self {
            LimitKind::WallTime => format!(
                "time limit of {} ms (the script's own time, not counting waits on tools)",
                limits.wall_time.as_millis()
            ),
            LimitKind::TotalTime => format!(
                "total time limit of {} ms, waits on tools included",
                limits.max_total_time.as_millis()
            ),
            LimitKind::Operations => format!("operation limit of {}", limits.max_operations),
            LimitKind::Memory => format!(
                "memory limit of {} MiB",
                limits.max_memory_bytes / (1024 * 1024)
            ),
            LimitKind::CallDepth => format!("call depth limit of {}", limits.max_call_depth),
            LimitKind::NestingDepth => {
                format!("nesting depth limit of {}", limits.max_nesting_depth)
            }
            LimitKind::Variables => format!("variable limit of {}", limits.max_variables),
            LimitKind::Functions => format!("function limit of {}", limits.max_functions),
            LimitKind::Output => format!("output limit of {} bytes", limits.max_output_bytes),
        }
    }
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            LimitKind::WallTime => "wall_time",
            LimitKind::TotalTime => "max_total_time",
            LimitKind::Operations => "max_operations",
            LimitKind::Memory => "max_memory_bytes",
            LimitKind::CallDepth => "max_call_depth",
            LimitKind::NestingDepth => "max_nesting_depth",
            LimitKind::Variables => "max_variables",
            LimitKind::Functions => "max_functions",
            LimitKind::Output => "max_output_bytes",
        };
        f.write_str(name)
    }
}

/// How one backend enforces one limit: a row of its enforcement table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enforcement {
    /// The limit.
    pub limit: LimitKind,
    /// The mechanism, and its gaps where it has any.
    pub how: &'static str,
}

mod duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_limits_are_finite_and_match_the_documented_values() {
        let limits = Limits::default();
        assert_eq!(limits.wall_time, Duration::from_secs(5));
        assert_eq!(limits.max_total_time, Duration::from_secs(60));
        assert_eq!(limits.max_operations, 10_000_000);
        assert_eq!(limits.max_memory_bytes, 64 << 20);
        assert_eq!(limits.max_call_depth, 64);
        assert_eq!(limits.max_output_bytes, 64 << 10);
    }

    #[test]
    fn limits_round_trip_through_json_with_time_in_milliseconds() {
        let limits = Limits::default();
        let json = serde_json::to_value(&limits).expect("limits serialize");
        assert_eq!(json["wall_time"], 5_000);
        assert_eq!(json["max_total_time"], 60_000);
        let back: Limits = serde_json::from_value(json).expect("limits deserialize");
        assert_eq!(back, limits);
    }

    #[test]
    fn a_partial_limits_document_keeps_defaults_for_missing_fields() {
        let limits: Limits =
            serde_json::from_str(r#"{"wall_time": 200}"#).expect("partial limits parse");
        assert_eq!(limits.wall_time, Duration::from_millis(200));
        assert_eq!(limits.max_operations, Limits::default().max_operations);
    }

    #[test]
    fn every_limit_description_names_its_value() {
        let limits = Limits::default();
        for kind in LimitKind::ALL {
            let text = kind.describe(&limits);
            assert!(text.chars().any(|c| c.is_ascii_digit()), "{kind}: {text}");
        }
    }
}
