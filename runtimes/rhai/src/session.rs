//! One conversation's Rhai state: a scope of variables and a library of functions.

use std::sync::Arc;

use codeact_runtime::{
    HostError, Interrupt, LimitKind, Limits, LogBuffer, RunClock, RunOutcome, ScriptError, Session,
    Snapshot, SnapshotError, ToolDispatch,
};
use rhai::{AST, Dynamic, Engine, Scope};

use crate::run_state::{self, MeterSchedule, RunGuard, RunState};
use crate::{
    alarm, big_stack, convert, errors, memory_meter, semicolons, snapshot, tool_functions,
};

/// A Rhai session: variables (`let x = …`) and functions (`fn f() {…}`) defined by one
/// run are visible to the next. Built by [`RhaiRuntime`](crate::RhaiRuntime).
pub struct RhaiSession {
    engine: Arc<Engine>,
    limits: Arc<Limits>,
    tools: Arc<dyn ToolDispatch>,
    scope: Scope<'static>,
    functions: AST,
    /// The scripts whose functions `functions` holds, in order: what a snapshot
    /// keeps of them, compiled again on restore.
    function_sources: Vec<String>,
    /// Tool wrapper functions in `functions`, once compiled (on the first run);
    /// they do not count toward `max_functions`.
    tool_functions: Option<usize>,
    /// The tool wrappers alone, put back over anything a script defined by a
    /// tool's name.
    wrappers: AST,
    /// The namespace objects (`github.create_issue(…)`), put back in the scope
    /// before a run whenever a script shadowed one.
    namespaces: Vec<(String, Dynamic)>,
    meter: MeterSchedule,
}

impl std::fmt::Debug for RhaiSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RhaiSession")
            .field("variables", &self.scope.len())
            .field("functions", &self.functions.iter_functions().count())
            .finish_non_exhaustive()
    }
}

impl RhaiSession {
    pub(crate) fn new(
        engine: Arc<Engine>,
        limits: Arc<Limits>,
        tools: Arc<dyn ToolDispatch>,
    ) -> Self {
        Self {
            engine,
            limits,
            tools,
            scope: Scope::new(),
            functions: AST::empty(),
            function_sources: Vec::new(),
            tool_functions: None,
            wrappers: AST::empty(),
            namespaces: Vec::new(),
            meter: MeterSchedule::default(),
        }
    }

    /// Compiles the tool wrappers into the session's functions, once.
    fn ensure_tool_functions(&mut self) -> Result<usize, ScriptError> {
        if let Some(count) = self.tool_functions {
            return Ok(count);
        }
        let (source, count) = tool_functions::wrapper_source(self.tools.specs());
        if count > 0 {
            // A bare engine: the wrappers must not count toward the script limits
            // (`max_functions` is checked while parsing) and call nothing at parse time.
            let wrappers = Engine::new_raw().compile(&source).map_err(|e| {
                ScriptError::thrown(format!("the host could not define the tool functions: {e}"))
            })?;
            self.functions = wrappers.merge(&self.functions);
            self.wrappers = wrappers;
            self.namespaces = tool_functions::namespace_objects(self.tools.specs());
        }
        self.tool_functions = Some(count);
        Ok(count)
    }

    /// Adds the functions `ast` defines to the session's, within
    /// `max_functions`; returns `ast` with every function of the session, to run.
    fn keep_functions(&mut self, ast: &AST, wrappers: usize) -> Result<AST, ScriptError> {
        let limits = &*self.limits;
        let merged = self.functions.merge(ast);
        let defined = merged.iter_functions().count().saturating_sub(wrappers);
        if defined > limits.max_functions {
            return Err(ScriptError::limit(
                LimitKind::Functions,
                limits,
                Some(format!("the session would hold {defined} functions")),
            ));
        }
        // Kept for the next script: the script's functions, except those that
        // take a helper's or a tool's name; the tool wrappers over them.
        let tools = self.tools.specs();
        // (`clone_functions_only_filtered` does not filter into an empty
        // library in rhai 1.x: `retain_functions` does.)
        let mut kept = merged.clone_functions_only();
        kept.retain_functions(|_, _, name, _| {
            !codeact_runtime::HELPER_NAMES.contains(&name)
                && !tools.iter().any(|spec| spec.name == name)
        });
        self.functions = kept.merge(&self.wrappers);
        Ok(merged)
    }

    /// What a snapshot keeps: the variables (the host's namespace objects left
    /// out: a restored session gets its own) and the function sources.
    pub(crate) fn save(&self) -> Result<snapshot::SavedSession, SnapshotError> {
        let mut variables = Vec::with_capacity(self.scope.len());
        for (name, constant, value) in self.scope.iter_raw() {
            if constant
                && self.namespaces.iter().any(|(namespace, object)| {
                    namespace == name
                        && tool_functions::is_namespace_object(&self.scope, name, object)
                })
            {
                continue;
            }
            variables.push(snapshot::SavedVariable {
                name: name.to_string(),
                constant,
                value: snapshot::save(name, value)?,
            });
        }
        variables.reverse();
        Ok(snapshot::SavedSession {
            variables,
            function_sources: self.function_sources.clone(),
        })
    }

    /// Sets a new session to what `saved` holds: its functions compiled again from
    /// their sources, then its variables.
    pub(crate) fn load(&mut self, saved: snapshot::SavedSession) -> Result<(), SnapshotError> {
        let failed = |e: ScriptError| SnapshotError::Session(e.to_string());
        let wrappers = self.ensure_tool_functions().map_err(failed)?;
        for source in saved.function_sources {
            let (ast, _) =
                semicolons::compile_lenient(&self.engine, &source).map_err(|broken| {
                    SnapshotError::Session(format!(
                        "a script that defined functions no longer compiles: {}",
                        broken.error
                    ))
                })?;
            self.keep_functions(&ast, wrappers).map_err(failed)?;
            self.function_sources.push(source);
        }
        for variable in saved.variables {
            let value = snapshot::load(variable.value)?;
            if variable.constant {
                self.scope.push_constant_dynamic(variable.name, value);
            } else {
                self.scope.push_dynamic(variable.name, value);
            }
        }
        Ok(())
    }

    fn evaluate(&mut self, script: &str) -> Result<serde_json::Value, ScriptError> {
        let wrappers = self.ensure_tool_functions()?;
        // The namespace objects as the host made them, whatever an earlier script
        // bound to their names: a constant cannot be changed, only shadowed.
        for (name, object) in &self.namespaces {
            if !tool_functions::is_namespace_object(&self.scope, name, object) {
                self.scope
                    .push_constant_dynamic(name.clone(), object.clone());
            }
        }
        let limits = self.limits.clone();
        let limits = &*limits;
        // Inserted semicolons are not reported to the model: told about them, small
        // models took the note for an error and "fixed" working scripts.
        let (mut ast, _patched_lines) = semicolons::compile_lenient(&self.engine, script)
            .map_err(|broken| errors::from_parse_in(&broken.error, limits, &broken.source))?;
        if ast.has_functions() {
            ast = self.keep_functions(&ast, wrappers)?;
            self.function_sources.push(script.to_string());
        } else if self.functions.has_functions() {
            ast = self.functions.merge(&ast);
        }
        let variables_before = self.scope.len();
        let result = self
            .engine
            .eval_ast_with_scope::<Dynamic>(&mut self.scope, &ast)
            .map_err(|e| errors::from_eval(&e, limits));
        let defined_variables = self.scope.len() > variables_before;
        let hit_memory = matches!(
            &result,
            Err(ScriptError::LimitExceeded {
                limit: LimitKind::Memory,
                ..
            })
        );
        if hit_memory {
            // What a run that blew its memory limit defined is partial state, and
            // usually the bomb itself (`let s = "x"; loop { s += s; }` leaves `s` at
            // the cap): it goes, so a thousand such sessions do not hold a thousand
            // bombs.
            self.scope.rewind(variables_before);
        }
        forget_shadowed(&mut self.scope, variables_before);
        // The meter checks during a run; this check covers the variables a run
        // defined after its last scan, and frees memory after a hit so the session
        // stays usable.
        if (hit_memory || defined_variables)
            && let Some(removed) = memory_meter::relieve(&mut self.scope, limits.max_memory_bytes)
        {
            return Err(ScriptError::limit(
                LimitKind::Memory,
                limits,
                Some(format!(
                    "the values held in variables grew too large; removed to free memory: {}",
                    removed.join(", ")
                )),
            ));
        }
        let mut value = result?;
        if value.is_unit()
            && let Some(last) = run_state::take_last_output()
        {
            // A script that ends in a statement (an `if`, a loop) answers with
            // the last result helper it called, as in the other runtimes.
            value = Dynamic::from_map(last);
        }
        convert::to_json(&value, limits.max_nesting_depth)
            .map_err(|message| ScriptError::Unrepresentable { message })
    }
}

/// A top-level `let x` for a name the session already holds adds a second entry that
/// shadows the first. In a notebook that is a redefinition: left alone, every re-run
/// of `let total = 0;` would grow the session until it hit `max_variables`. So the
/// newest value moves into the oldest entry's slot and the extra entries go.
fn forget_shadowed(scope: &mut Scope<'static>, first_new: usize) {
    if scope.len() <= first_new {
        return;
    }
    let mut shadowed: Vec<String> = Vec::new();
    // `iter_raw` goes newest first, so the run's own entries come first.
    for (name, _, _) in scope.iter_raw().take(scope.len() - first_new) {
        let occurrences = scope
            .iter_raw()
            .filter(|(other, _, _)| *other == name)
            .count();
        if occurrences > 1 && !shadowed.iter().any(|seen| seen == name) {
            shadowed.push(name.to_string());
        }
    }
    for name in shadowed {
        while scope
            .iter_raw()
            .filter(|(other, _, _)| *other == name)
            .count()
            > 1
        {
            let Some(newest) = scope.remove::<Dynamic>(&name) else {
                break;
            };
            match scope.get_mut(&name) {
                Some(slot) => *slot = newest,
                // The older entry is a constant: its slot cannot be written, so
                // rebuild the scope from each name's newest entry instead.
                None => {
                    scope.push_dynamic(name.as_str(), newest);
                    keep_newest_entries(scope);
                    return;
                }
            }
        }
    }
}

/// Rebuilds `scope` with only the newest entry of each name, in their order.
fn keep_newest_entries(scope: &mut Scope<'static>) {
    let entries: Vec<(String, Dynamic)> = std::mem::take(scope)
        .into_iter()
        .map(|(name, value, _aliases)| (name, value))
        .collect();
    for (index, (name, value)) in entries.iter().enumerate() {
        let newest = !entries[index + 1..].iter().any(|(later, _)| later == name);
        if newest {
            scope.push_dynamic(name.as_str(), value.clone());
        }
    }
}

/// What a run may allocate beyond what it frees: the memory limit less what the
/// session's variables held at their last scan (what the run starts with), so the
/// session and the run together stay within the limit. The variables are measured
/// by the meter and their allocations are older than the run, so they are not in
/// the run's count. A run that frees old values gains their room.
fn allocation_budget(limits: &Limits, meter: &MeterSchedule) -> isize {
    let room = limits.max_memory_bytes.saturating_sub(meter.session_bytes);
    isize::try_from(room).unwrap_or(isize::MAX)
}

impl Drop for RhaiSession {
    /// Drops the variables on the large stack: a deeply nested value is dropped
    /// recursively and could overflow a small thread stack.
    fn drop(&mut self) {
        let scope = &mut self.scope;
        big_stack::run(|| scope.clear());
    }
}

impl Session for RhaiSession {
    fn run(&mut self, script: &str) -> Result<RunOutcome, HostError> {
        self.run_with(script, None)
    }

    fn snapshot(&mut self) -> Result<Snapshot, SnapshotError> {
        let payload = crate::snapshot_codec::encode(&self.save()?);
        Ok(Snapshot::seal(
            crate::INFO.name,
            crate::SNAPSHOT_IDENTITY,
            &payload,
        ))
    }

    /// An interrupt raises the run's alarm flag, which `on_progress` checks on every
    /// operation: the run stops as at its deadline. Without a timer thread (no
    /// alarm), the run ends at its deadline.
    fn run_interruptible(
        &mut self,
        script: &str,
        interrupt: &Interrupt,
    ) -> Result<RunOutcome, HostError> {
        self.run_with(script, Some(interrupt))
    }
}

impl RhaiSession {
    fn run_with(
        &mut self,
        script: &str,
        interrupt: Option<&Interrupt>,
    ) -> Result<RunOutcome, HostError> {
        let clock = RunClock::start(&self.limits);
        let alarm = alarm::arm(clock.deadline());
        if let (Some(interrupt), Some(alarm)) = (interrupt, &alarm) {
            let alarm = alarm.clone();
            interrupt.on_raise(move || alarm.store(true, std::sync::atomic::Ordering::Relaxed));
        }
        let guard = RunGuard::install(RunState {
            clock,
            alarm,
            interrupt: interrupt.cloned(),
            tools: self.tools.clone(),
            logs: LogBuffer::new(self.limits.max_output_bytes),
            meter: self.meter,
            allocation_budget: allocation_budget(&self.limits, &self.meter),
        });
        let completion = big_stack::run(|| self.evaluate(script));
        let (logs, mut meter) = guard.finish();
        if matches!(
            completion,
            Err(ScriptError::LimitExceeded {
                limit: LimitKind::Memory,
                ..
            })
        ) {
            // The scope was just brought back under the limit; the next run measures
            // it afresh rather than count what it held at the hit.
            meter.session_bytes = 0;
        }
        self.meter = meter;
        Ok(RunOutcome { completion, logs })
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use codeact_runtime::{NoTools, ToolError, ToolSpec};
    use serde_json::{Value, json};

    use super::*;
    use crate::RhaiRuntime;

    fn session(limits: Limits) -> RhaiSession {
        RhaiRuntime::new(limits).session(Arc::new(NoTools))
    }

    /// Deep enough to overflow a 2 MiB stack many times over.
    const DEPTH: usize = 150_000;

    fn nested(depth: usize) -> Dynamic {
        let mut value = Dynamic::UNIT;
        for _ in 0..depth {
            value = Dynamic::from_array(vec![value]);
        }
        value
    }

    /// Rhai walks nested values recursively; on a 2 MiB thread stack a value 200,000
    /// deep would abort the process unless runs and teardown use the large stack.
    #[test]
    fn a_value_nested_far_deeper_than_a_thread_stack_allows_is_used_and_dropped_safely() {
        let worker = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(|| {
                let mut session = session(Limits::default());
                // Scope::push_dynamic walks the value too, so it needs the large stack.
                let scope = &mut session.scope;
                big_stack::run(|| scope.push_dynamic("deep", nested(DEPTH)));
                let outcome = session
                    .run("let copy = deep; copy = (); deep = (); final_result(1)")
                    .expect("host ok");
                assert_eq!(
                    outcome.completion,
                    Ok(json!({"type": "final_result", "value": 1}))
                );
                let scope = &mut session.scope;
                big_stack::run(|| scope.push_dynamic("another", nested(DEPTH)));
                drop(session);
            })
            .expect("thread starts");
        worker.join().expect("no stack overflow");
    }

    #[test]
    fn a_script_that_ends_in_a_loop_answers_with_the_last_result_helper_it_called() {
        let mut session = session(Limits::default());
        let outcome = session
            .run("let ids = [41, 42];\nfor id in ids {\n    observation(id * 2)\n}")
            .expect("host ok");
        assert_eq!(
            outcome.completion,
            Ok(json!({"type": "observation", "value": 84}))
        );
        let outcome = session
            .run("if true { let x = final_result(\"a\", [\"out.md\"]); }")
            .expect("host ok");
        assert_eq!(
            outcome.completion,
            Ok(json!({"type": "final_result", "value": "a", "artifacts": ["out.md"]}))
        );
        // A value the script ends with wins over a helper called before it.
        let outcome = session.run("observation(1);\n2").expect("host ok");
        assert_eq!(outcome.completion, Ok(json!(2)));
    }

    #[test]
    fn a_script_that_ends_in_a_statement_without_calling_a_helper_has_no_value_even_after_one_that_did()
     {
        let mut session = session(Limits::default());
        session
            .run("for i in 0..2 { observation(i) }")
            .expect("host ok");
        let outcome = session.run("let y = 3;").expect("host ok");
        assert_eq!(outcome.completion, Ok(Value::Null));
        // A helper called inside a function the script defines counts too.
        let outcome = session
            .run("fn look(x) { observation(x); }\nlook(5);\nlet z = 1;")
            .expect("host ok");
        assert_eq!(
            outcome.completion,
            Ok(json!({"type": "observation", "value": 5}))
        );
    }

    #[test]
    fn a_runaway_loop_stops_near_its_time_limit_and_the_session_goes_on() {
        let limits = Limits {
            wall_time: Duration::from_millis(200),
            max_operations: u64::MAX,
            ..Limits::default()
        };
        let mut session = session(limits);
        let started = Instant::now();
        let outcome = session.run("let x = 0; loop { x += 1; }").expect("host ok");
        let elapsed = started.elapsed();
        assert!(
            matches!(
                outcome.completion,
                Err(ScriptError::LimitExceeded {
                    limit: LimitKind::WallTime,
                    ..
                })
            ),
            "{:?}",
            outcome.completion
        );
        // Generous bound: this asserts the mechanism, the benchmark measures precision.
        assert!(
            elapsed < Duration::from_millis(1_000),
            "stopped after {elapsed:?}"
        );
        let outcome = session.run("final_result(x > 0)").expect("host ok");
        assert_eq!(
            outcome.completion,
            Ok(json!({"type": "final_result", "value": true}))
        );
    }

    /// A tool that runs another script on the same thread: the inner run installs its
    /// own state and must hand the outer run's back (its tools, deadline and logs).
    #[test]
    fn a_tool_may_run_another_session_on_the_same_thread() {
        struct Nested(Arc<RhaiRuntime>);
        impl ToolDispatch for Nested {
            fn specs(&self) -> &[ToolSpec] {
                &[]
            }
            fn call(&self, _name: &str, args: Value) -> Result<Value, ToolError> {
                let mut inner = self.0.session(Arc::new(NoTools));
                let script = args["script"].as_str().unwrap_or_default();
                let outcome = inner
                    .run(script)
                    .map_err(|e| ToolError::new(e.to_string()))?;
                outcome
                    .completion
                    .map_err(|e| ToolError::new(e.to_string()))
            }
        }
        let runtime = Arc::new(RhaiRuntime::new(Limits::default()));
        let mut outer = runtime.session(Arc::new(Nested(runtime.clone())));
        let outcome = outer
            .run(r#"print("before"); let r = call_tool("run", #{script: "print(\"inner\"); 7"}); print("after"); call_tool("run", #{script: "8"}) + r"#)
            .expect("host ok");
        assert_eq!(outcome.completion, Ok(json!(15)));
        assert_eq!(outcome.logs.kept(), "before\nafter\n");
    }

    #[test]
    fn a_run_that_hits_the_memory_limit_leaves_no_variables_behind() {
        let mut session = session(Limits::default());
        session.run("let kept = 1;").expect("host ok");
        let outcome = session
            .run("let s = \"x\"; loop { s += s; }")
            .expect("host ok");
        assert!(matches!(
            outcome.completion,
            Err(ScriptError::LimitExceeded {
                limit: LimitKind::Memory,
                ..
            })
        ));
        assert_eq!(session.scope.len(), 1, "only `kept` remains");
        assert!(session.run("s").expect("host ok").completion.is_err());
    }

    #[test]
    fn printed_output_is_kept_per_run_not_accumulated() {
        let mut session = session(Limits::default());
        let first = session.run(r#"print("one"); 1"#).expect("host ok");
        let second = session.run(r#"print("two"); 2"#).expect("host ok");
        assert_eq!(first.logs.kept(), "one\n");
        assert_eq!(second.logs.kept(), "two\n");
    }

    #[test]
    fn redeclaring_a_variable_in_later_runs_replaces_it_instead_of_piling_up() {
        let limits = Limits {
            max_variables: 4,
            ..Limits::default()
        };
        let mut session = session(limits);
        for round in 0..20 {
            let outcome = session
                .run(&format!("let total = {round}; let other = total; total"))
                .expect("host ok");
            assert_eq!(outcome.completion, Ok(json!(round)));
        }
        assert_eq!(session.scope.len(), 2);
    }

    #[test]
    fn redeclaring_a_constant_keeps_the_newest_value_and_its_constness() {
        let mut session = session(Limits::default());
        session
            .run("const limit = 1; let keep = 7;")
            .expect("host ok");
        session.run("let limit = 2;").expect("host ok");
        assert_eq!(
            session.run("limit + keep").expect("host ok").completion,
            Ok(json!(9))
        );
        session.run("const limit = 3;").expect("host ok");
        assert_eq!(session.scope.len(), 2);
        let outcome = session.run("limit = 4;").expect("host ok");
        assert!(outcome.completion.is_err(), "a constant cannot be assigned");
        assert_eq!(
            session.run("limit").expect("host ok").completion,
            Ok(json!(3))
        );
    }

    #[test]
    fn a_function_redefined_in_a_later_run_replaces_the_earlier_one() {
        let mut session = session(Limits::default());
        session.run("fn f() { 1 }").expect("host ok");
        session.run("fn f() { 2 }").expect("host ok");
        let outcome = session.run("f()").expect("host ok");
        assert_eq!(outcome.completion, Ok(json!(2)));
    }
}
