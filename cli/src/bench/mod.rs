//! The benchmark harness behind `codeact bench`: the same cases on every backend
//! (a new session, a warm trivial step, 1,000 tool calls, 100 calls of an MCP
//! server's tool over stdio, a 1..1,000,000 loop,
//! stopping an infinite loop, a 10 KB JSON round trip, a 10-step agent run), then
//! scale (memory per idle session, throughput with concurrent sessions, step cost
//! by script size and by session history).
//!
//! Every case checks its result before it is timed, and each run's result after,
//! so a backend that starts failing is reported as failing, not as fast. Figures
//! are medians with the 10th and 90th percentiles: compare backends within one
//! report, since absolute times move with the machine's load.
//!
//! ```no_run
//! use codeact_cli::bench::{BenchOptions, run};
//!
//! let options = BenchOptions { runtimes: vec!["rhai".into()], quick: true, scale: false };
//! let report = run(&options, &mut |what| eprintln!("{what}"));
//! print!("{}", report.to_table());
//! ```
//!
//! The JavaScript worker backend (`js`) starts this executable again as its worker:
//! a binary that benchmarks it calls [`codeact::run_worker_if_requested`] first thing
//! in `main` (the `codeact` binary does).

mod cases;
mod load;
mod machine;
mod report;
mod sampler;
mod scale;
mod scripts;
mod stats;

pub use cases::{AGENT_STEPS, JSON_BYTES, STOP_LIMIT, agent_replies};
pub use load::{
    LoadPlan, LoadProgress, LoadTally, MIXED, StepKind, StepVerdict, add_tool, judge, run_load,
};
pub use machine::{Machine, format_utc, now_utc, rss_bytes};
pub use report::{
    BackendReport, BenchReport, CaseId, CaseResult, History, IdleMemory, Measured, ScaleReport,
    ScriptSize, Throughput, format_bytes, format_us,
};
pub use sampler::{Budget, measure, measure_spans};
pub use scale::{CONCURRENCY, HISTORY_STEPS, SCRIPT_SIZES, idle_sessions};
pub use scripts::{Lang, sample_value};
pub use stats::{Summary, ratio};

use codeact::exec::{OPT_IN_RUNTIMES, RUNTIME_NAMES};

/// The version of the JSON report's format.
pub const REPORT_FORMAT: u32 = 1;

/// What to measure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchOptions {
    /// Runtimes by name, as `runtime_by_name` takes them. See [`expand_runtimes`].
    /// Default: `all` (every built-in runtime but the opt-in ones).
    pub runtimes: Vec<String>,
    /// Fewer samples, shorter windows and fewer idle sessions (about a tenth): a
    /// smoke test of the harness, not figures to quote. Default: false.
    pub quick: bool,
    /// Also run the scale measurements. Default: true.
    pub scale: bool,
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self {
            runtimes: expand_runtimes("all"),
            quick: false,
            scale: true,
        }
    }
}

/// Turns a `--runtime` value into runtime names: `all` is every built-in runtime
/// ([`RUNTIME_NAMES`]) but the opt-in ones ([`OPT_IN_RUNTIMES`]), `wasm` every such
/// wasm guest, and a comma-separated list names several (an opt-in runtime runs when
/// named). Unknown names are kept: the report says why they did not run.
pub fn expand_runtimes(spec: &str) -> Vec<String> {
    let shipped = || {
        RUNTIME_NAMES
            .iter()
            .filter(|name| !OPT_IN_RUNTIMES.iter().any(|(opt_in, _)| opt_in == *name))
    };
    let mut names: Vec<String> = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let expanded: Vec<String> = match part {
            "all" => shipped().map(|n| n.to_string()).collect(),
            "wasm" => shipped()
                .filter(|n| n.starts_with("wasm:"))
                .map(|n| n.to_string())
                .collect(),
            other => vec![other.to_string()],
        };
        for name in expanded {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

/// Runs the benchmark. `progress` is told what is about to run (`rhai: warm_step`),
/// for a progress line; the report holds every figure, and a backend or case that
/// could not run holds why instead.
pub fn run(options: &BenchOptions, progress: &mut dyn FnMut(&str)) -> BenchReport {
    let machine = Machine::probe();
    let date_utc = now_utc();
    let host = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(machine.cpus)
        .enable_all()
        .build();
    let backends = options
        .runtimes
        .iter()
        .map(|name| {
            progress(&format!("{name}: starting"));
            let host = match &host {
                Ok(host) => host,
                Err(e) => return unavailable(name, format!("cannot start a tokio runtime: {e}")),
            };
            let backend = match cases::Backend::start(name, options.quick) {
                Ok(backend) => backend,
                Err(reason) => return unavailable(name, reason),
            };
            let cases = cases::run_cases(&backend, host, &mut |case| {
                progress(&format!("{name}: {case}"))
            });
            let scale = options.scale.then(|| {
                let warm = cases
                    .iter()
                    .find(|c| c.case == CaseId::WarmStep)
                    .and_then(|c| c.result.ok())
                    .map(|s| s.median_us);
                scale::run_scale(&backend, warm, &mut |what| {
                    progress(&format!("{name}: {what}"))
                })
            });
            BackendReport {
                runtime: name.clone(),
                language: Some(backend.runtime.info().language.to_string()),
                unavailable: None,
                cases,
                scale,
            }
        })
        .collect();
    BenchReport {
        format: REPORT_FORMAT,
        date_utc,
        machine,
        quick: options.quick,
        backends,
    }
}

fn unavailable(name: &str, reason: String) -> BackendReport {
    BackendReport {
        runtime: name.to_string(),
        language: None,
        unavailable: Some(reason),
        cases: Vec::new(),
        scale: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_expands_to_every_built_in_runtime_but_the_opt_in_ones() {
        let all = expand_runtimes("all");
        assert_eq!(all.len(), RUNTIME_NAMES.len() - OPT_IN_RUNTIMES.len());
        assert!(
            !all.iter().any(|name| name == "wasm:micropython"),
            "{all:?}"
        );
    }

    #[test]
    fn wasm_expands_to_the_shipped_wasm_guests_and_lists_are_deduplicated() {
        let names = expand_runtimes("rhai, wasm,wasm:js");
        assert_eq!(
            names,
            ["rhai", "wasm:js", "wasm:python", "wasm:rhai", "wasm:boa"]
        );
    }

    #[test]
    fn an_opt_in_runtime_runs_when_named() {
        assert_eq!(expand_runtimes("wasm:micropython"), ["wasm:micropython"]);
    }

    #[test]
    fn an_unknown_runtime_is_reported_unavailable_not_a_panic() {
        let options = BenchOptions {
            runtimes: vec!["cobol".into()],
            quick: true,
            scale: false,
        };
        let report = run(&options, &mut |_| {});
        assert_eq!(report.backends.len(), 1);
        let reason = report.backends[0].unavailable.as_deref().unwrap_or("");
        assert!(reason.contains("unknown runtime"), "{reason}");
    }

    #[test]
    fn every_rhai_case_is_measured_and_checked() {
        let options = BenchOptions {
            runtimes: vec!["rhai".into()],
            quick: true,
            scale: false,
        };
        let mut seen = Vec::new();
        let report = run(&options, &mut |what| seen.push(what.to_string()));
        let rhai = &report.backends[0];
        for case in CaseId::ALL {
            if case == CaseId::RestorePandas {
                // Only wasm:python-sci has pandas: the others say so.
                let result = rhai.cases.iter().find(|c| c.case == case);
                assert!(
                    result.is_some_and(|c| matches!(
                        &c.result,
                        report::Measured::NotApplicable { not_applicable }
                            if not_applicable.contains("pandas is in wasm:python-sci only")
                    )),
                    "{result:?}"
                );
                continue;
            }
            let summary = rhai.case(case);
            assert!(summary.is_some(), "{case:?}: {:?}", rhai.cases);
        }
        assert!(seen.iter().any(|s| s == "rhai: warm_step"), "{seen:?}");
        let stop = rhai
            .case(CaseId::StopInfiniteLoop)
            .map_or(0.0, |s| s.median_us);
        assert!(stop >= 200_000.0, "stopped before the limit: {stop} µs");
    }
}
