//! What `codeact bench` found, as data (serialised to JSON with `--json`) and as a
//! plain-text table.

use std::fmt::Write as _;

use serde::Serialize;

use super::machine::Machine;
use super::stats::Summary;

/// The cases every backend runs, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CaseId {
    /// A new session plus its first trivial step (a JavaScript worker starts here).
    NewSession,
    /// A trivial step in a warm session: compile, run, decode.
    WarmStep,
    /// One script calling a host tool 1,000 times.
    #[serde(rename = "tool_calls_1000")]
    ToolCalls,
    /// One script calling a tool of an MCP server over stdio 100 times (the
    /// scripted test server, on `python3`): against `tool_calls_1000`, what a call
    /// through MCP costs over an in-process Rust tool.
    #[serde(rename = "mcp_tool_calls_100")]
    McpToolCalls,
    /// Summing 1..=1,000,000 in a plain loop.
    #[serde(rename = "sum_1m")]
    Sum,
    /// How long an infinite loop runs under a 200 ms time limit before the host has
    /// control back.
    #[serde(rename = "stop_infinite_loop_200ms")]
    StopInfiniteLoop,
    /// A 10 KB JSON value from a tool into the script and back out as its result.
    #[serde(rename = "json_10kb")]
    Json10Kb,
    /// A 10-step agent run against a replay model: host time only.
    #[serde(rename = "agent_10_steps")]
    AgentRun,
    /// A snapshot of a session holding a 10 MB string (issue 19).
    #[serde(rename = "snapshot_10mb")]
    Snapshot10Mb,
    /// A session restored from that snapshot.
    #[serde(rename = "restore_10mb")]
    Restore10Mb,
    /// A new session restored from a snapshot of a fresh one, plus its first
    /// trivial step: against `new_session`, what starting from a snapshot costs.
    #[serde(rename = "new_session_restored")]
    NewSessionRestored,
    /// One script waiting on ten calls of a tool that answers after 200 ms,
    /// all at once: about 200 ms where the host makes them together, 2 s where
    /// it makes them one at a time.
    #[serde(rename = "parallel_calls_10x200ms")]
    ParallelCalls,
    /// A `wasm:python-sci` session restored from a snapshot taken after it
    /// imported pandas and made a data frame; not applicable to other runtimes,
    /// which have no pandas.
    #[serde(rename = "restore_pandas")]
    RestorePandas,
    /// One script calling a tool that answers after 1 s, three times, under a
    /// 100 ms time limit: about 3 s, since waits on tools do not count against
    /// the script's own time.
    #[serde(rename = "slow_tool_short_budget")]
    SlowToolShortBudget,
}

impl CaseId {
    /// Every case, in report order.
    pub const ALL: [CaseId; 14] = [
        CaseId::NewSession,
        CaseId::WarmStep,
        CaseId::ToolCalls,
        CaseId::McpToolCalls,
        CaseId::Sum,
        CaseId::StopInfiniteLoop,
        CaseId::Json10Kb,
        CaseId::AgentRun,
        CaseId::Snapshot10Mb,
        CaseId::Restore10Mb,
        CaseId::NewSessionRestored,
        CaseId::ParallelCalls,
        CaseId::RestorePandas,
        CaseId::SlowToolShortBudget,
    ];

    /// The case's name in JSON and on the progress line.
    pub fn name(self) -> &'static str {
        match self {
            CaseId::NewSession => "new_session",
            CaseId::WarmStep => "warm_step",
            CaseId::ToolCalls => "tool_calls_1000",
            CaseId::McpToolCalls => "mcp_tool_calls_100",
            CaseId::Sum => "sum_1m",
            CaseId::StopInfiniteLoop => "stop_infinite_loop_200ms",
            CaseId::Json10Kb => "json_10kb",
            CaseId::AgentRun => "agent_10_steps",
            CaseId::Snapshot10Mb => "snapshot_10mb",
            CaseId::Restore10Mb => "restore_10mb",
            CaseId::NewSessionRestored => "new_session_restored",
            CaseId::ParallelCalls => "parallel_calls_10x200ms",
            CaseId::RestorePandas => "restore_pandas",
            CaseId::SlowToolShortBudget => "slow_tool_short_budget",
        }
    }

    /// A short human title for the table.
    pub fn title(self) -> &'static str {
        match self {
            CaseId::NewSession => "new session + first step",
            CaseId::WarmStep => "warm trivial step",
            CaseId::ToolCalls => "1,000 tool calls",
            CaseId::McpToolCalls => "100 MCP tool calls (stdio)",
            CaseId::Sum => "sum 1..1,000,000",
            CaseId::StopInfiniteLoop => "stop infinite loop (200 ms limit)",
            CaseId::Json10Kb => "JSON 10 KB in and out",
            CaseId::AgentRun => "10-step agent run (replay)",
            CaseId::Snapshot10Mb => "snapshot, 10 MB held",
            CaseId::Restore10Mb => "restore, 10 MB held",
            CaseId::NewSessionRestored => "new session from a snapshot + first step",
            CaseId::ParallelCalls => "10 calls of a 200 ms tool at once",
            CaseId::RestorePandas => "restore, pandas imported",
            CaseId::SlowToolShortBudget => "3 calls of a 1 s tool under a 100 ms limit",
        }
    }
}

/// A measurement that may have failed or not apply; serialised as its fields,
/// as `{"error": "…"}` or as `{"not_applicable": "…"}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Measured<T> {
    /// Measured.
    Ok(T),
    /// The check or the run failed; nothing was measured.
    Failed {
        /// Why.
        error: String,
    },
    /// The backend does not do what the case measures (a runtime whose sessions
    /// cannot be snapshotted): not a failure.
    NotApplicable {
        /// Why not.
        not_applicable: String,
    },
}

impl<T> Measured<T> {
    /// The measurement, when there is one.
    pub fn ok(&self) -> Option<&T> {
        match self {
            Measured::Ok(value) => Some(value),
            Measured::Failed { .. } | Measured::NotApplicable { .. } => None,
        }
    }

    /// Whether the case failed (one that does not apply to the backend did not).
    pub fn failed(&self) -> bool {
        matches!(self, Measured::Failed { .. })
    }
}

impl<T> From<Result<T, String>> for Measured<T> {
    fn from(result: Result<T, String>) -> Self {
        match result {
            Ok(value) => Measured::Ok(value),
            Err(error) => Measured::Failed { error },
        }
    }
}

/// One case on one backend.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CaseResult {
    /// Which case.
    pub case: CaseId,
    /// Its timings, or why there are none.
    #[serde(flatten)]
    pub result: Measured<Summary>,
}

/// Memory per idle session: resident memory grown while many sessions, each past
/// its first step, are held at once.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IdleMemory {
    /// Sessions held.
    pub sessions: usize,
    /// Growth of this process's `VmRSS`, in bytes (negative when the allocator gave
    /// memory back meanwhile).
    pub host_rss_growth_bytes: i64,
    /// Growth of the private memory (`RssAnon`) of child processes (JavaScript
    /// workers), in bytes; 0 for in-process backends.
    pub worker_private_growth_bytes: i64,
    /// Both growths over the sessions held, in bytes.
    pub per_session_bytes: f64,
}

/// Trivial steps per second with some sessions stepping at once.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Throughput {
    /// Sessions stepping at once, one tokio task each.
    pub concurrent: usize,
    /// Steps completed.
    pub steps: u64,
    /// Seconds they took.
    pub seconds: f64,
    /// Steps per second.
    pub steps_per_second: f64,
    /// Steps per second over the ideal: as many CPUs as there are sessions (at
    /// most all of them) running warm steps back to back at the single-session
    /// warm-step median, with no overhead. `None` without a warm-step figure.
    pub share_of_ideal: Option<f64>,
    /// CPUs this process (and its JavaScript workers) kept busy on average during
    /// the window: on a machine others are using, less than the CPUs it has.
    pub cpus_used: Option<f64>,
    /// Steps per second over the ideal for the CPU time actually obtained
    /// (`cpus_used` CPUs at the warm-step median): the overhead of stepping many
    /// sessions at once, apart from the machine's other load.
    pub share_of_ideal_per_cpu_used: Option<f64>,
}

/// A step's time for a script of some size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScriptSize {
    /// The script's length in bytes.
    pub bytes: usize,
    /// Its timings, or why there are none.
    #[serde(flatten)]
    pub result: Measured<Summary>,
}

/// A step's time early and late in one long session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct History {
    /// Sessions run (each one sample of each step).
    pub sessions: usize,
    /// Step 1 of a session (after a warm-up step that starts it).
    pub step_1: Summary,
    /// Step 100 of the same sessions, with 99 steps' variables defined.
    pub step_100: Summary,
}

/// What a backend does at scale.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScaleReport {
    /// Memory per idle session.
    pub idle_memory: Measured<IdleMemory>,
    /// The multi-threaded tokio runtime's worker threads.
    pub worker_threads: usize,
    /// Steps per second by concurrency.
    pub throughput: Vec<Measured<Throughput>>,
    /// Step time by script size.
    pub script_size: Vec<ScriptSize>,
    /// Step time by session history.
    pub history: Measured<History>,
}

/// One backend's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BackendReport {
    /// The runtime's name (`rhai`, `js`, `wasm:python` …).
    pub runtime: String,
    /// Its language, when it started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// Why the backend could not run at all (a guest not fetched), if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// The cases, in [`CaseId::ALL`] order.
    pub cases: Vec<CaseResult>,
    /// Scale figures, unless skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<ScaleReport>,
}

impl BackendReport {
    /// The timings of `case`, when it was measured.
    pub fn case(&self, case: CaseId) -> Option<&Summary> {
        self.cases
            .iter()
            .find(|c| c.case == case)
            .and_then(|c| c.result.ok())
    }
}

/// A whole run of `codeact bench`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchReport {
    /// The report format's version; bumped when a field changes meaning.
    pub format: u32,
    /// When the run started, `YYYY-MM-DD HH:MM UTC`.
    pub date_utc: String,
    /// The machine.
    pub machine: Machine,
    /// Whether this was a `--quick` run (fewer samples, fewer sessions).
    pub quick: bool,
    /// Per backend.
    pub backends: Vec<BackendReport>,
}

/// A time in µs, scaled to a readable unit.
pub fn format_us(us: f64) -> String {
    if us < 10.0 {
        format!("{us:.2} µs")
    } else if us < 1_000.0 {
        format!("{us:.1} µs")
    } else if us < 1_000_000.0 {
        format!("{:.2} ms", us / 1_000.0)
    } else {
        format!("{:.2} s", us / 1_000_000.0)
    }
}

/// A byte count, scaled to a readable unit.
pub fn format_bytes(bytes: f64) -> String {
    if bytes.abs() < 1024.0 {
        format!("{bytes:.0} B")
    } else if bytes.abs() < 1024.0 * 1024.0 {
        format!("{:.1} KiB", bytes / 1024.0)
    } else {
        format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
    }
}

fn summary_row(out: &mut String, label: &str, result: &Measured<Summary>) {
    let _ = match result {
        Measured::Ok(s) => writeln!(
            out,
            "  {label:<36} {:>11} {:>11} {:>11} {:>7}",
            format_us(s.median_us),
            format_us(s.p10_us),
            format_us(s.p90_us),
            s.iterations
        ),
        Measured::Failed { error } => writeln!(out, "  {label:<36} FAILED: {error}"),
        Measured::NotApplicable { not_applicable } => {
            writeln!(out, "  {label:<36} n/a: {not_applicable}")
        }
    };
}

impl BenchReport {
    /// The report as a plain-text table, one block per backend.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "codeact bench{}: {}\n{}\n",
            if self.quick { " --quick" } else { "" },
            self.date_utc,
            self.machine.line()
        );
        for backend in &self.backends {
            let _ = writeln!(out, "{}", backend.runtime);
            if let Some(reason) = &backend.unavailable {
                let _ = writeln!(out, "  unavailable: {reason}\n");
                continue;
            }
            let _ = writeln!(
                out,
                "  {:<36} {:>11} {:>11} {:>11} {:>7}",
                "case", "median", "p10", "p90", "runs"
            );
            for case in &backend.cases {
                summary_row(&mut out, case.case.title(), &case.result);
            }
            if let Some(scale) = &backend.scale {
                scale.write_table(&mut out);
            }
            out.push('\n');
        }
        out
    }
}

impl ScaleReport {
    fn write_table(&self, out: &mut String) {
        let _ = match &self.idle_memory {
            Measured::Ok(m) => writeln!(
                out,
                "  idle session memory: {} per session over {} sessions (host RSS {:+}, workers {:+})",
                format_bytes(m.per_session_bytes),
                m.sessions,
                format_bytes(m.host_rss_growth_bytes as f64),
                format_bytes(m.worker_private_growth_bytes as f64)
            ),
            Measured::Failed { error } => writeln!(out, "  idle session memory: FAILED: {error}"),
            Measured::NotApplicable { not_applicable } => {
                writeln!(out, "  idle session memory: n/a: {not_applicable}")
            }
        };
        let _ = write!(
            out,
            "  trivial steps/s on {} tokio workers:",
            self.worker_threads
        );
        for level in &self.throughput {
            let _ = match level {
                Measured::Ok(t) => write!(
                    out,
                    "\n    {:>3} concurrent: {:>9.0} steps/s{}{}",
                    t.concurrent,
                    t.steps_per_second,
                    t.share_of_ideal
                        .map(|s| format!(", {:.0}% of ideal", s * 100.0))
                        .unwrap_or_default(),
                    match (t.cpus_used, t.share_of_ideal_per_cpu_used) {
                        (Some(cpus), Some(share)) => format!(
                            " ({cpus:.2} CPUs obtained; {:.0}% of ideal for those)",
                            share * 100.0
                        ),
                        _ => String::new(),
                    }
                ),
                Measured::Failed { error } => write!(out, "\n    FAILED: {error}"),
                Measured::NotApplicable { not_applicable } => {
                    write!(out, "\n    n/a: {not_applicable}")
                }
            };
        }
        out.push('\n');
        for size in &self.script_size {
            summary_row(
                out,
                &format!("step, {} KB script", size.bytes / 1024),
                &size.result,
            );
        }
        match &self.history {
            Measured::Ok(h) => {
                summary_row(out, "step 1 of a session", &Measured::Ok(h.step_1));
                summary_row(out, "step 100 of a session", &Measured::Ok(h.step_100));
            }
            Measured::Failed { error } => {
                let _ = writeln!(out, "  session history: FAILED: {error}");
            }
            Measured::NotApplicable { not_applicable } => {
                let _ = writeln!(out, "  session history: n/a: {not_applicable}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_shown_in_a_readable_unit() {
        assert_eq!(format_us(4.56), "4.56 µs");
        assert_eq!(format_us(71.04), "71.0 µs");
        assert_eq!(format_us(3_800.0), "3.80 ms");
        assert_eq!(format_us(2_500_000.0), "2.50 s");
    }

    #[test]
    fn byte_counts_are_shown_in_a_readable_unit() {
        assert_eq!(format_bytes(512.0), "512 B");
        assert_eq!(format_bytes(40.0 * 1024.0), "40.0 KiB");
        assert_eq!(format_bytes(-3.0 * 1024.0 * 1024.0), "-3.0 MiB");
    }

    #[test]
    fn a_failed_case_serialises_as_its_error() {
        let case = CaseResult {
            case: CaseId::Sum,
            result: Measured::Failed {
                error: "wrong sum".into(),
            },
        };
        let json = serde_json::to_value(&case).expect("serialises");
        assert_eq!(
            json,
            serde_json::json!({"case": "sum_1m", "error": "wrong sum"})
        );
    }

    #[test]
    fn a_measured_case_serialises_its_statistics_beside_its_name() {
        let summary = Summary::from_micros(&[1.0, 2.0, 3.0]).expect("samples");
        let case = CaseResult {
            case: CaseId::WarmStep,
            result: Measured::Ok(summary),
        };
        let json = serde_json::to_value(&case).expect("serialises");
        assert_eq!(json["case"], "warm_step");
        assert_eq!(json["median_us"], 2.0);
        assert_eq!(json["iterations"], 3);
    }

    #[test]
    fn case_names_match_their_json_names() {
        for case in CaseId::ALL {
            let json = serde_json::to_value(case).expect("serialises");
            assert_eq!(json, case.name());
        }
    }
}
