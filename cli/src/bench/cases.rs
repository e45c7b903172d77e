//! The cases every backend runs. Each case runs its script once and checks
//! the result before anything is timed, then times it under a budget that suits
//! how long one run took.

use std::sync::Arc;
use std::time::{Duration, Instant};

use codeact_runtime::{Limits, Runtime, ToolDispatch};
use serde_json::{Value, json};

use super::machine::wait_until_idle;
use super::report::{CaseId, CaseResult, Measured};
use super::sampler::{Budget, measure, measure_spans};
use super::scripts::{Lang, sample_value};
use super::stats::Summary;
use codeact::agent::Agent;
use codeact::agent::Outcome;
use codeact::exec::runtime_by_name;
use codeact::exec::{ScriptRun, ScriptSession};
use codeact::model::ReplayModel;
use codeact::output::ScriptOutput;
use codeact::tools::{Tool, ToolBox};

/// Runs over this long, measured once, get the slow budget (fewer, longer runs).
const SLOW_RUN: Duration = Duration::from_millis(5);

/// The time limit of the infinite-loop case.
pub const STOP_LIMIT: Duration = Duration::from_millis(200);

/// The longest wait for a backend's abandoned runs to end after the
/// infinite-loop case.
const SETTLE_MAX: Duration = Duration::from_secs(60);

/// The size of the JSON case's value, as compact JSON.
pub const JSON_BYTES: usize = 10 * 1024;

/// Agent steps in the agent case (nine observations, then a final result).
pub const AGENT_STEPS: usize = 10;

/// What the cases share on one backend.
pub struct Backend {
    /// The runtime's name, as `runtime_by_name` takes it.
    pub name: String,
    /// The runtime under default limits.
    pub runtime: Arc<dyn Runtime>,
    /// Its language.
    pub lang: Lang,
    /// Tools `add` and `data` (the JSON case's value).
    pub tools: Arc<dyn ToolDispatch>,
    /// Fewer samples.
    pub quick: bool,
}

impl Backend {
    /// The backend called `name`, or why it cannot run.
    pub fn start(name: &str, quick: bool) -> Result<Self, String> {
        let runtime = runtime_by_name(name, Limits::default()).map_err(|e| e.to_string())?;
        let language = runtime.info().language;
        let lang = Lang::from_language(language)
            .ok_or_else(|| format!("the benchmark has no {language} scripts"))?;
        Ok(Self {
            name: name.to_string(),
            runtime,
            lang,
            tools: bench_tools().map_err(|e| e.to_string())?,
            quick,
        })
    }

    /// The same runtime under other limits.
    pub fn with_limits(&self, limits: Limits) -> Result<Arc<dyn Runtime>, String> {
        runtime_by_name(&self.name, limits).map_err(|e| e.to_string())
    }

    /// A new session of `runtime` with the benchmark's tools.
    pub fn session_of(&self, runtime: &dyn Runtime) -> Result<ScriptSession, String> {
        ScriptSession::start(runtime, self.tools.clone()).map_err(|e| e.to_string())
    }

    /// A new session that has run one trivial step, checked.
    pub fn warm_session(&self) -> Result<ScriptSession, String> {
        let mut session = self.session_of(&*self.runtime)?;
        step(
            &mut session,
            self.lang.trivial(),
            &ScriptOutput::final_result(json!(42)),
        )?;
        Ok(session)
    }

    /// The budget for runs that take about `took` each.
    pub fn budget_for(&self, took: Duration) -> Budget {
        if took >= SLOW_RUN {
            Budget::slow(self.quick)
        } else {
            Budget::fast(self.quick)
        }
    }

    /// Checks `script` once in `session`, then times it.
    pub fn time_step(
        &self,
        session: &mut ScriptSession,
        script: &str,
        expected: &ScriptOutput,
    ) -> Result<Summary, String> {
        let started = Instant::now();
        step(session, script, expected)?;
        let budget = self.budget_for(started.elapsed());
        measure(
            budget,
            || session.run_blocking(script).map_err(|e| e.to_string()),
            |run| check(run, expected),
        )
    }
}

/// How long the `slow` tool takes to answer.
pub const SLOW_TOOL: Duration = Duration::from_millis(200);

/// How long the `slower` tool takes to answer.
pub const SLOWER_TOOL: Duration = Duration::from_secs(1);

/// The time limit of the slow-tool case: far below the time its script waits.
pub const SHORT_BUDGET: Duration = Duration::from_millis(100);

/// The tools every case may call: `add(a, b)`, `data()` (a 10 KB value) and
/// `slow(n)` (answers `n` after [`SLOW_TOOL`], waiting as a network tool does),
/// `slower(n)` (the same after [`SLOWER_TOOL`]).
fn bench_tools() -> Result<Arc<dyn ToolDispatch>, codeact::tools::ToolBoxError> {
    let slow = Tool::new(
        "slow",
        "Answers n after 200 ms.",
        |args: Value| async move {
            tokio::time::sleep(SLOW_TOOL).await;
            Ok(args["n"].clone())
        },
    )
    .with_parameters(json!({"type": "object", "properties": {"n": {"type": "integer"}}}));
    let add = Tool::from_fn("add", "Adds a and b.", |args| {
        Ok(json!(
            args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)
        ))
    });
    let value = Arc::new(sample_value(JSON_BYTES));
    let data = Tool::from_fn("data", "Returns a 10 KB JSON value.", move |_| {
        Ok(Value::clone(&value))
    });
    let slower = Tool::new("slower", "Answers n after 1 s.", |args: Value| async move {
        tokio::time::sleep(SLOWER_TOOL).await;
        Ok(args["n"].clone())
    })
    .with_parameters(json!({"type": "object", "properties": {"n": {"type": "integer"}}}));
    Ok(Arc::new(ToolBox::new([add, data, slow, slower])?))
}

/// Runs `script` once and checks its output.
pub fn step(
    session: &mut ScriptSession,
    script: &str,
    expected: &ScriptOutput,
) -> Result<(), String> {
    let run = session.run_blocking(script).map_err(|e| e.to_string())?;
    check(&run, expected)
}

/// Whether a run's output is `expected`.
pub fn check(run: &ScriptRun, expected: &ScriptOutput) -> Result<(), String> {
    if &run.output == expected {
        Ok(())
    } else {
        Err(format!(
            "expected {}, got {}",
            shorten(&expected.to_string()),
            shorten(&run.output.to_string())
        ))
    }
}

fn shorten(text: &str) -> String {
    codeact_runtime::text::shorten(text, 200)
}

/// Runs every case on `backend`, calling `progress` before each.
pub fn run_cases(
    backend: &Backend,
    host: &tokio::runtime::Runtime,
    progress: &mut dyn FnMut(&str),
) -> Vec<CaseResult> {
    CaseId::ALL
        .into_iter()
        .map(|case| {
            progress(case.name());
            let result = match case {
                CaseId::NewSession => new_session(backend),
                CaseId::WarmStep => warm_step(backend),
                CaseId::ToolCalls => tool_calls(backend),
                CaseId::McpToolCalls => mcp_tool_calls(backend, host),
                CaseId::Sum => sum(backend),
                CaseId::StopInfiniteLoop => stop_infinite_loop(backend),
                CaseId::Json10Kb => json_round_trip(backend),
                CaseId::AgentRun => agent_run(backend, host),
                CaseId::Snapshot10Mb => snapshot_ten_megabytes(backend),
                CaseId::Restore10Mb => restore_ten_megabytes(backend),
                CaseId::NewSessionRestored => new_session_restored(backend),
                CaseId::ParallelCalls => parallel_calls(backend),
                CaseId::RestorePandas => restore_pandas(backend),
                CaseId::SlowToolShortBudget => slow_tool_short_budget(backend),
            };
            if case == CaseId::StopInfiniteLoop {
                progress("waiting for abandoned runs to end");
                wait_until_idle(SETTLE_MAX);
            }
            CaseResult {
                case,
                result: match result {
                    Err(error) if error.starts_with(NOT_APPLICABLE) => Measured::NotApplicable {
                        not_applicable: error[NOT_APPLICABLE.len()..].to_string(),
                    },
                    other => Measured::from(other),
                },
            }
        })
        .collect()
}

/// How a case says it does not apply to a backend (the rest is why).
const NOT_APPLICABLE: &str = "not applicable: ";

/// A warm session holding 10 MB (`Lang::ten_megabytes`), checked.
fn holding_ten_megabytes(backend: &Backend) -> Result<ScriptSession, String> {
    let mut session = backend.warm_session()?;
    step(
        &mut session,
        backend.lang.ten_megabytes(),
        &ScriptOutput::final_result(json!(10_485_760)),
    )?;
    Ok(session)
}

/// A snapshot of `session`, or why the case does not apply.
fn snapshot_of(session: &mut ScriptSession) -> Result<codeact_runtime::Snapshot, String> {
    session.snapshot().map_err(|e| match e {
        codeact_runtime::SnapshotError::Unsupported { why, .. } => format!("{NOT_APPLICABLE}{why}"),
        other => other.to_string(),
    })
}

fn snapshot_ten_megabytes(backend: &Backend) -> Result<Summary, String> {
    let mut session = holding_ten_megabytes(backend)?;
    let started = Instant::now();
    snapshot_of(&mut session)?;
    measure(
        backend.budget_for(started.elapsed()),
        || snapshot_of(&mut session),
        |snapshot| {
            if snapshot.as_bytes().len() >= 10_485_760 {
                Ok(())
            } else {
                Err(format!("a snapshot of {} bytes", snapshot.as_bytes().len()))
            }
        },
    )
}

fn restore_ten_megabytes(backend: &Backend) -> Result<Summary, String> {
    let snapshot = snapshot_of(&mut holding_ten_megabytes(backend)?)?;
    let restore = || {
        ScriptSession::restore(&*backend.runtime, &snapshot, backend.tools.clone())
            .map_err(|e| e.to_string())
    };
    let mut first = restore()?;
    step(
        &mut first,
        backend.lang.length_of_big(),
        &ScriptOutput::final_result(json!(10_485_760)),
    )?;
    let started = Instant::now();
    drop(restore()?);
    measure(backend.budget_for(started.elapsed()), restore, |_| Ok(()))
}

fn new_session_restored(backend: &Backend) -> Result<Summary, String> {
    let expected = ScriptOutput::final_result(json!(42));
    let snapshot = snapshot_of(&mut backend.warm_session()?)?;
    let run_restored = || {
        let mut session =
            ScriptSession::restore(&*backend.runtime, &snapshot, backend.tools.clone())
                .map_err(|e| e.to_string())?;
        let run = session
            .run_blocking(backend.lang.trivial())
            .map_err(|e| e.to_string())?;
        Ok((session, run))
    };
    let started = Instant::now();
    drop(run_restored()?);
    measure(
        backend.budget_for(started.elapsed()),
        run_restored,
        |(_, run)| check(run, &expected),
    )
}

/// The runtime whose sessions have pandas.
const PANDAS_RUNTIME: &str = "wasm:python-sci";

/// A `wasm:python-sci` session that imported pandas and made a data frame,
/// snapshotted, then restored: the restore is timed, its first restored session
/// checked. Under 512 MiB and 60 s (the scientific stack's imports need more
/// than the defaults); on any other runtime not applicable, saying why.
fn restore_pandas(backend: &Backend) -> Result<Summary, String> {
    if backend.runtime.info().name != PANDAS_RUNTIME {
        return Err(format!(
            "{NOT_APPLICABLE}pandas is in {PANDAS_RUNTIME} only (skipped; guests/fetch-guests.sh --python-sci fetches it)"
        ));
    }
    let runtime = backend.with_limits(Limits {
        max_memory_bytes: 512 << 20,
        wall_time: Duration::from_secs(60),
        ..Limits::default()
    })?;
    let mut session = backend.session_of(&*runtime)?;
    let six = ScriptOutput::final_result(json!(6));
    step(
        &mut session,
        "import pandas as pd
frame = pd.DataFrame({'a': [1, 2, 3]})
final_result(int(frame['a'].sum()))",
        &six,
    )?;
    let snapshot = snapshot_of(&mut session)?;
    drop(session);
    let restore = || {
        ScriptSession::restore(&*runtime, &snapshot, backend.tools.clone())
            .map_err(|e| e.to_string())
    };
    let mut first = restore()?;
    step(
        &mut first,
        "final_result(int(pd.DataFrame({'b': frame['a']})['b'].sum()))",
        &six,
    )?;
    let started = Instant::now();
    drop(restore()?);
    measure(backend.budget_for(started.elapsed()), restore, |_| Ok(()))
}

fn new_session(backend: &Backend) -> Result<Summary, String> {
    let expected = ScriptOutput::final_result(json!(42));
    let started = Instant::now();
    drop(backend.warm_session()?);
    let budget = backend.budget_for(started.elapsed());
    measure(
        budget,
        || {
            let mut session = backend.session_of(&*backend.runtime)?;
            let run = session
                .run_blocking(backend.lang.trivial())
                .map_err(|e| e.to_string())?;
            // Dropped untimed with the run: ending a session can mean ending a process.
            Ok((session, run))
        },
        |(_, run)| check(run, &expected),
    )
}

fn warm_step(backend: &Backend) -> Result<Summary, String> {
    let mut session = backend.warm_session()?;
    backend.time_step(
        &mut session,
        backend.lang.trivial(),
        &ScriptOutput::final_result(json!(42)),
    )
}

fn parallel_calls(backend: &Backend) -> Result<Summary, String> {
    if backend.runtime.info().parallel_calls == codeact::exec::ParallelCalls::Unavailable {
        return Err(format!(
            "{NOT_APPLICABLE}{} has no way to wait on several tool calls at once",
            backend.name
        ));
    }
    let mut session = backend.warm_session()?;
    backend.time_step(
        &mut session,
        backend.lang.parallel_calls(),
        &ScriptOutput::final_result(json!(10)),
    )
}

/// Three calls of a 1 s tool under a 100 ms time limit: the run must finish
/// (about 3 s), since waits on tools do not count against its own time.
fn slow_tool_short_budget(backend: &Backend) -> Result<Summary, String> {
    let runtime = backend.with_limits(Limits {
        wall_time: SHORT_BUDGET,
        ..Limits::default()
    })?;
    let mut session = backend.session_of(&*runtime)?;
    step(
        &mut session,
        backend.lang.trivial(),
        &ScriptOutput::final_result(json!(42)),
    )?;
    let expected = ScriptOutput::final_result(json!(3));
    measure(
        Budget::waiting(backend.quick),
        || {
            session
                .run_blocking(backend.lang.slow_calls())
                .map_err(|e| e.to_string())
        },
        |run| check(run, &expected),
    )
}

fn tool_calls(backend: &Backend) -> Result<Summary, String> {
    let mut session = backend.warm_session()?;
    backend.time_step(
        &mut session,
        backend.lang.tool_calls(),
        &ScriptOutput::final_result(json!(500_500)),
    )
}

/// The scripted MCP server of the tests, written out for `python3` to run.
const MCP_SERVER: &str = include_str!("../../tests/mcp/scripted_server.py");

fn mcp_tool_calls(backend: &Backend, host: &tokio::runtime::Runtime) -> Result<Summary, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("no temporary directory: {e}"))?;
    let path = dir.path().join("scripted_server.py");
    std::fs::write(&path, MCP_SERVER).map_err(|e| format!("cannot write the server: {e}"))?;
    let server =
        codeact::tools::McpServer::stdio("bench", "python3", [path.to_string_lossy().into_owned()]);
    // The connection lives on `host`, whose workers serve it while a script's
    // calls block this thread.
    let tools = host.block_on(server.tools()).map_err(|e| e.to_string())?;
    let toolbox = ToolBox::new(tools).map_err(|e| e.to_string())?;
    let mut session =
        ScriptSession::start(&*backend.runtime, Arc::new(toolbox)).map_err(|e| e.to_string())?;
    backend.time_step(
        &mut session,
        backend.lang.mcp_tool_calls(),
        &ScriptOutput::final_result(json!(5_050)),
    )
}

fn sum(backend: &Backend) -> Result<Summary, String> {
    // The default operation limit (10 million) would stop Rhai first: this case
    // measures the interpreter, not the limit.
    let runtime = backend.with_limits(Limits {
        max_operations: u64::MAX,
        wall_time: Duration::from_secs(60),
        ..Limits::default()
    })?;
    let mut session = backend.session_of(&*runtime)?;
    backend.time_step(
        &mut session,
        backend.lang.sum(),
        &ScriptOutput::final_result(json!(500_000_500_000_i64)),
    )
}

fn stop_infinite_loop(backend: &Backend) -> Result<Summary, String> {
    // Default limits otherwise: the operation limit stays as a backstop, which is
    // what ends an in-process JavaScript run the host gave up on (the check below
    // wants the time limit, so a backend that stops on operations first fails).
    let runtime = backend.with_limits(Limits {
        wall_time: STOP_LIMIT,
        ..Limits::default()
    })?;
    let wanted = format!("time limit of {} ms", STOP_LIMIT.as_millis());
    // A fresh, started session per run, so a restart after the previous stop is
    // never timed: only the run until the host has control back.
    measure_spans(Budget::waiting(backend.quick), || {
        let mut session = backend.session_of(&*runtime)?;
        step(
            &mut session,
            backend.lang.trivial(),
            &ScriptOutput::final_result(json!(42)),
        )?;
        let started = Instant::now();
        let run = session
            .run_blocking(backend.lang.infinite_loop())
            .map_err(|e| e.to_string())?;
        let took = started.elapsed();
        match &run.output {
            ScriptOutput::Error { message } if message.contains(&wanted) => Ok(took),
            other => Err(format!(
                "expected an error naming the {wanted}, got {other}"
            )),
        }
    })
}

fn json_round_trip(backend: &Backend) -> Result<Summary, String> {
    let mut session = backend.warm_session()?;
    backend.time_step(
        &mut session,
        backend.lang.json_round_trip(),
        &ScriptOutput::final_result(sample_value(JSON_BYTES)),
    )
}

/// The replies of the agent case: steps 1 to 9 each define a variable and observe
/// it; step 10 returns the last one plus one, so the run ends with 10.
pub fn agent_replies(lang: Lang, fence: &str) -> Vec<String> {
    let last = AGENT_STEPS - 1;
    let mut replies: Vec<String> = (1..=last)
        .map(|step| format!("Step {step}.\n```{fence}\n{}\n```", lang.agent_step(step)))
        .collect();
    replies.push(format!(
        "Done.\n```{fence}\n{}\n```",
        lang.agent_final(last)
    ));
    replies
}

fn agent_run(backend: &Backend, host: &tokio::runtime::Runtime) -> Result<Summary, String> {
    let fence = backend
        .runtime
        .info()
        .fence_tags
        .first()
        .copied()
        .unwrap_or("code");
    let model = Arc::new(ReplayModel::new(agent_replies(backend.lang, fence)).without_recording());
    let agent = Agent::builder(model, backend.runtime.clone())
        .stream(false)
        .build()
        .map_err(|e| e.to_string())?;
    let expected = Outcome::FinalResult {
        value: json!(AGENT_STEPS),
    };
    let run_once = || {
        host.block_on(agent.run("Count to ten."))
            .map_err(|e| e.to_string())
    };
    let check_run = |run: &codeact::agent::RunResult| {
        if run.outcome == expected && run.steps == AGENT_STEPS {
            Ok(())
        } else {
            Err(format!(
                "expected a final result of {AGENT_STEPS} after {AGENT_STEPS} steps, got {:?} after {}",
                run.outcome, run.steps
            ))
        }
    };
    let started = Instant::now();
    check_run(&run_once()?)?;
    let budget = backend.budget_for(started.elapsed());
    measure(budget, run_once, check_run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_replies_end_with_a_final_result_at_step_ten() {
        let replies = agent_replies(Lang::Rhai, "rhai");
        assert_eq!(replies.len(), AGENT_STEPS);
        assert!(replies[0].contains("```rhai\nlet x1 = 1;"));
        assert!(replies[9].contains("final_result(x9 + 1)"));
    }

    #[test]
    fn a_wrong_output_is_reported_with_both_values() {
        let run = ScriptRun {
            output: ScriptOutput::final_result(json!(41)),
            completion: Ok(json!({"type": "final_result", "value": 41})),
            logs: Default::default(),
            ran_for: Default::default(),
        };
        let err = check(&run, &ScriptOutput::final_result(json!(42))).expect_err("differs");
        assert!(err.contains("42") && err.contains("41"), "{err}");
    }
}
