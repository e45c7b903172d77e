//! Load: many sessions at once in one process, each cycling through runaway loops,
//! memory bombs, tool calls and trivial steps, for a while. Counts how every step
//! ended against what its script should do: a runaway must be stopped by a limit,
//! anything else must return its own result. Used by `cli/examples/load.rs` (the
//! 500-session probe) and the test suite (a small one).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use super::scripts::Lang;
use codeact::exec::{ScriptRun, ScriptSession};
use codeact::output::ScriptOutput;
use codeact::tools::{Tool, ToolBox};
use codeact_runtime::{HostError, Runtime};

/// Runtimes for each tenth of a mixed load, in session order: five Rhai, one
/// JavaScript worker, two QuickJS, one MicroPython, one CPython.
pub const MIXED: [&str; 10] = [
    "rhai",
    "rhai",
    "rhai",
    "rhai",
    "rhai",
    "js",
    "wasm:js",
    "wasm:js",
    "wasm:micropython",
    "wasm:python",
];

/// Kept of the unexpected outcomes, per runtime, to show what went wrong.
const SAMPLES_KEPT: usize = 10;

/// What a session's step runs: one in ten steps is a runaway loop, one a memory
/// bomb, three make 100 tool calls, five are trivial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// Loops forever: must be stopped by the time limit.
    RunawayLoop,
    /// Allocates forever: must be stopped by the memory or the time limit.
    MemoryBomb,
    /// Calls the `add` tool 100 times, then returns the step number.
    ToolCalls,
    /// Returns the step number.
    Trivial,
}

impl StepKind {
    /// The kind of step `step` of session `session`, spread so that sessions are
    /// not all in the same kind at once.
    pub fn of(session: usize, step: u64) -> Self {
        match (session as u64).wrapping_add(step) % 10 {
            0 => StepKind::RunawayLoop,
            1 => StepKind::MemoryBomb,
            2..=4 => StepKind::ToolCalls,
            _ => StepKind::Trivial,
        }
    }

    /// The script, in `lang`, for step number `n`.
    pub fn script(self, lang: Lang, n: u64) -> String {
        let template = match (self, lang) {
            (StepKind::RunawayLoop, Lang::Rhai) => "let x = 0; loop { x += 1; }",
            (StepKind::RunawayLoop, Lang::Js) => "while (true) {}",
            (StepKind::RunawayLoop, Lang::Python) => "while True:\n    pass",
            (StepKind::MemoryBomb, Lang::Rhai) => "let s = \"x\"; loop { s += s; }",
            (StepKind::MemoryBomb, Lang::Js) => {
                "let a = []; while (true) a.push(new Array(10000).fill(1));"
            }
            (StepKind::MemoryBomb, Lang::Python) => {
                "a = []\nwhile True:\n    a.append([1] * 10000)"
            }
            (StepKind::ToolCalls, Lang::Rhai) => {
                "let t = 0; for i in 0..100 { t += add(i); } final_result({n})"
            }
            (StepKind::ToolCalls, Lang::Js) => {
                "let t = 0; for (let i = 0; i < 100; i++) t += tools.add({a: i}); final_result({n})"
            }
            (StepKind::ToolCalls, Lang::Python) => {
                "t = 0\nfor i in range(100):\n    t += add(a=i)\nfinal_result({n})"
            }
            (StepKind::Trivial, _) => "final_result({n})",
        };
        template.replace("{n}", &n.to_string())
    }

    fn runaway(self) -> bool {
        matches!(self, StepKind::RunawayLoop | StepKind::MemoryBomb)
    }
}

/// How one step ended, against what its script should do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A script that should return did, with its own value.
    Result,
    /// A runaway script was stopped by a limit.
    RunawayStopped,
    /// A script that should return was stopped by the time limit: the machine was
    /// too busy for it to finish in time. Not a failure of the host, but counted.
    StoppedByTheClock,
    /// Anything else: a wrong value, another error, a runaway that returned, a
    /// host error. Must not happen.
    Unexpected(String),
}

/// Judges step `n` of kind `kind` by its outcome.
pub fn judge(kind: StepKind, n: u64, outcome: &Result<ScriptRun, HostError>) -> Verdict {
    let run = match outcome {
        Ok(run) => run,
        Err(e) => return Verdict::Unexpected(format!("host error: {e}")),
    };
    match &run.output {
        ScriptOutput::FinalResult { value, .. } if !kind.runaway() && *value == json!(n) => {
            Verdict::Result
        }
        ScriptOutput::Error { message } if message.contains("exceeded the") => {
            if kind.runaway() {
                Verdict::RunawayStopped
            } else if message.contains("time limit") {
                Verdict::StoppedByTheClock
            } else {
                Verdict::Unexpected(message.clone())
            }
        }
        other => Verdict::Unexpected(other.to_string()),
    }
}

/// What the steps of one runtime's sessions did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadTally {
    /// Steps run.
    pub steps: u64,
    /// Steps that returned their own result.
    pub results: u64,
    /// Runaway steps stopped by a limit.
    pub runaways_stopped: u64,
    /// The longest a runaway loop ran before it was stopped
    /// ([`ScriptRun::ran_for`]: the wait for a running slot is not counted).
    pub slowest_loop_stop: Duration,
    /// The same for memory bombs.
    pub slowest_bomb_stop: Duration,
    /// Steps that should have returned but were stopped by the time limit.
    pub stopped_by_the_clock: u64,
    /// Steps that ended any other way, sessions that did not start included.
    pub unexpected: u64,
    /// Up to ten of those, as text.
    pub unexpected_samples: Vec<String>,
}

#[derive(Default)]
struct Counters {
    steps: AtomicU64,
    results: AtomicU64,
    runaways_stopped: AtomicU64,
    slowest_loop_stop_us: AtomicU64,
    slowest_bomb_stop_us: AtomicU64,
    stopped_by_the_clock: AtomicU64,
    unexpected: AtomicU64,
    samples: Mutex<Vec<String>>,
}

impl Counters {
    fn count(&self, kind: StepKind, verdict: Verdict, ran_for: Duration) {
        self.steps.fetch_add(1, Ordering::Relaxed);
        match verdict {
            Verdict::Result => self.results.fetch_add(1, Ordering::Relaxed),
            Verdict::RunawayStopped => {
                let slowest = if kind == StepKind::RunawayLoop {
                    &self.slowest_loop_stop_us
                } else {
                    &self.slowest_bomb_stop_us
                };
                let micros = u64::try_from(ran_for.as_micros()).unwrap_or(u64::MAX);
                slowest.fetch_max(micros, Ordering::Relaxed);
                self.runaways_stopped.fetch_add(1, Ordering::Relaxed)
            }
            Verdict::StoppedByTheClock => self.stopped_by_the_clock.fetch_add(1, Ordering::Relaxed),
            Verdict::Unexpected(what) => {
                self.unexpected_outcome(what);
                0
            }
        };
    }

    fn unexpected_outcome(&self, what: String) {
        self.unexpected.fetch_add(1, Ordering::Relaxed);
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        if samples.len() < SAMPLES_KEPT {
            samples.push(what.chars().take(300).collect());
        }
    }

    fn tally(&self) -> LoadTally {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        LoadTally {
            steps: get(&self.steps),
            results: get(&self.results),
            runaways_stopped: get(&self.runaways_stopped),
            slowest_loop_stop: Duration::from_micros(get(&self.slowest_loop_stop_us)),
            slowest_bomb_stop: Duration::from_micros(get(&self.slowest_bomb_stop_us)),
            stopped_by_the_clock: get(&self.stopped_by_the_clock),
            unexpected: get(&self.unexpected),
            unexpected_samples: self
                .samples
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }
}

/// Steps done so far, across runtimes, while a load runs.
#[derive(Debug, Clone, Default)]
pub struct LoadProgress {
    counters: Arc<BTreeMap<String, Counters>>,
}

impl LoadProgress {
    /// Steps done so far.
    pub fn steps(&self) -> u64 {
        self.counters
            .values()
            .map(|c| c.steps.load(Ordering::Relaxed))
            .sum()
    }
}

impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counters").finish_non_exhaustive()
    }
}

/// The `add` tool the load's scripts call: `a + 1`.
pub fn add_tool() -> Arc<ToolBox> {
    let add = Tool::from_fn("add", "Adds one to a.", |args| {
        Ok(json!(args["a"].as_i64().unwrap_or(0) + 1))
    });
    Arc::new(ToolBox::new([add]).expect("one tool has a unique name"))
}

/// How much load to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadPlan {
    /// Sessions open at once.
    pub sessions: usize,
    /// How long sessions keep starting steps.
    pub duration: Duration,
    /// Steps after which a session stops early; `None`: no cap. Ten steps run each
    /// kind of [`StepKind`] in its proportion.
    pub steps_per_session: Option<u64>,
}

/// Runs the plan's sessions at once, session `i` on `runtimes[i % runtimes.len()]`
/// (a name and its runtime), each step judged by [`judge`]. Every session runs on
/// its own task of the current tokio runtime (a multi-threaded one); `progress`
/// can be read meanwhile. Returns each runtime's tally once every session has
/// ended and been dropped.
pub async fn run_load(
    plan: &LoadPlan,
    runtimes: &[(String, Arc<dyn Runtime>)],
    progress: &LoadProgress,
) -> BTreeMap<String, LoadTally> {
    let deadline = Instant::now() + plan.duration;
    let max_steps = plan.steps_per_session.unwrap_or(u64::MAX);
    let tools = add_tool();
    let mut tasks = Vec::with_capacity(plan.sessions);
    for session_index in 0..plan.sessions {
        let Some((name, runtime)) = runtimes.get(session_index % runtimes.len().max(1)) else {
            break;
        };
        let counters = progress.counters.clone();
        let (name, runtime, tools) = (name.clone(), runtime.clone(), tools.clone());
        let task_name = name.clone();
        tasks.push((
            task_name,
            tokio::spawn(async move {
                let Some(count) = counters.get(&name) else {
                    return;
                };
                let lang = Lang::from_language(runtime.info().language).unwrap_or(Lang::Rhai);
                let mut session = match ScriptSession::start(&*runtime, tools) {
                    Ok(session) => session,
                    Err(e) => return count.unexpected_outcome(format!("session start: {e}")),
                };
                let mut n = 0u64;
                while n < max_steps && Instant::now() < deadline {
                    n += 1;
                    let kind = StepKind::of(session_index, n);
                    let outcome = session.run(kind.script(lang, n)).await;
                    let ran_for = outcome.as_ref().map(|run| run.ran_for).unwrap_or_default();
                    count.count(kind, judge(kind, n, &outcome), ran_for);
                }
            }),
        ));
    }
    for (name, task) in tasks {
        if let Err(e) = task.await {
            // A panicking session task is a host failure: counted, not propagated.
            if let Some(count) = progress.counters.get(&name) {
                count.unexpected_outcome(format!("a session task failed: {e}"));
            }
        }
    }
    progress
        .counters
        .iter()
        .map(|(name, counters)| (name.clone(), counters.tally()))
        .collect()
}

impl LoadProgress {
    /// Progress for a load over `runtimes`: give [`run_load`] the same list (a
    /// session whose runtime name is not in it is not counted).
    pub fn new(runtimes: &[(String, Arc<dyn Runtime>)]) -> Self {
        Self {
            counters: Arc::new(
                runtimes
                    .iter()
                    .map(|(name, _)| (name.clone(), Counters::default()))
                    .collect(),
            ),
        }
    }
}

impl LoadTally {
    /// One line: steps, results, runaways stopped (and the slowest stops), steps
    /// stopped by the clock, unexpected outcomes.
    pub fn line(&self) -> String {
        format!(
            "steps {} · results {} · runaways stopped {} (slowest: loop {} ms, memory bomb {} ms) · \
             stopped by the clock {} · unexpected {}",
            self.steps,
            self.results,
            self.runaways_stopped,
            self.slowest_loop_stop.as_millis(),
            self.slowest_bomb_stop.as_millis(),
            self.stopped_by_the_clock,
            self.unexpected
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_of(output: ScriptOutput) -> Result<ScriptRun, HostError> {
        Ok(ScriptRun {
            completion: Ok(serde_json::to_value(&output).unwrap_or_default()),
            output,
            logs: Default::default(),
            ran_for: Duration::ZERO,
        })
    }

    #[test]
    fn a_runaway_that_returns_and_a_wrong_value_are_unexpected() {
        let returned = run_of(ScriptOutput::final_result(json!(7)));
        assert!(matches!(
            judge(StepKind::RunawayLoop, 7, &returned),
            Verdict::Unexpected(_)
        ));
        assert!(matches!(
            judge(StepKind::Trivial, 8, &returned),
            Verdict::Unexpected(_)
        ));
        assert_eq!(judge(StepKind::Trivial, 7, &returned), Verdict::Result);
    }

    #[test]
    fn limits_stop_runaways_and_only_the_clock_may_stop_other_steps() {
        let stopped = |limit: &str| {
            run_of(ScriptOutput::Error {
                message: format!("the script was stopped: it exceeded the {limit} of 1"),
            })
        };
        assert_eq!(
            judge(StepKind::MemoryBomb, 1, &stopped("memory limit")),
            Verdict::RunawayStopped
        );
        assert_eq!(
            judge(StepKind::ToolCalls, 1, &stopped("time limit")),
            Verdict::StoppedByTheClock
        );
        assert!(matches!(
            judge(StepKind::ToolCalls, 1, &stopped("memory limit")),
            Verdict::Unexpected(_)
        ));
    }

    #[test]
    fn one_step_in_ten_is_a_loop_and_one_a_bomb() {
        let kinds: Vec<StepKind> = (0..10).map(|n| StepKind::of(3, n)).collect();
        let count = |kind| kinds.iter().filter(|k| **k == kind).count();
        assert_eq!(
            (
                count(StepKind::RunawayLoop),
                count(StepKind::MemoryBomb),
                count(StepKind::ToolCalls),
                count(StepKind::Trivial)
            ),
            (1, 1, 3, 5)
        );
    }
}
