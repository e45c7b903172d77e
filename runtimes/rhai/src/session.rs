//! One conversation's Rhai state: a scope of variables and a library of functions.

use std::sync::Arc;
use std::time::Instant;

use codeact_runtime::{
    HostError, LimitKind, Limits, LogBuffer, RunOutcome, ScriptError, Session, ToolDispatch,
};
use rhai::{AST, Dynamic, Engine, Scope};

use crate::run_state::{MeterSchedule, RunGuard, RunState};
use crate::{big_stack, convert, errors, memory_meter};

/// A Rhai session: variables (`let x = …`) and functions (`fn f() {…}`) defined by one
/// run are visible to the next. Built by [`RhaiRuntime`](crate::RhaiRuntime).
pub struct RhaiSession {
    engine: Arc<Engine>,
    limits: Arc<Limits>,
    tools: Arc<dyn ToolDispatch>,
    scope: Scope<'static>,
    functions: AST,
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
            meter: MeterSchedule::default(),
        }
    }

    fn evaluate(&mut self, script: &str) -> Result<serde_json::Value, ScriptError> {
        let limits = &*self.limits;
        let mut ast = self
            .engine
            .compile(script)
            .map_err(|e| errors::from_parse(&e, limits))?;
        if ast.has_functions() {
            let merged = self.functions.merge(&ast);
            let defined = merged.iter_functions().count();
            if defined > limits.max_functions {
                return Err(ScriptError::limit(
                    LimitKind::Functions,
                    limits,
                    Some(format!("the session would hold {defined} functions")),
                ));
            }
            self.functions = merged.clone_functions_only();
            ast = merged;
        } else if self.functions.has_functions() {
            ast = self.functions.merge(&ast);
        }
        let variables_before = self.scope.len();
        let result = self
            .engine
            .eval_ast_with_scope::<Dynamic>(&mut self.scope, &ast)
            .map_err(|e| errors::from_eval(&e, limits));
        // The meter checks during a run; this check covers the variables a run
        // defined after its last scan, and frees memory after a hit so the session
        // stays usable.
        let hit_memory = matches!(
            &result,
            Err(ScriptError::LimitExceeded {
                limit: LimitKind::Memory,
                ..
            })
        );
        if hit_memory || self.scope.len() > variables_before {
            if let Some(removed) = memory_meter::relieve(&mut self.scope, limits.max_memory_bytes) {
                return Err(ScriptError::limit(
                    LimitKind::Memory,
                    limits,
                    Some(format!(
                        "the values held in variables grew too large; removed to free memory: {}",
                        removed.join(", ")
                    )),
                ));
            }
        }
        let value = result?;
        convert::to_json(&value, limits.max_nesting_depth)
            .map_err(|message| ScriptError::Unrepresentable { message })
    }
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
        let guard = RunGuard::install(RunState {
            deadline: Instant::now() + self.limits.wall_time,
            tools: self.tools.clone(),
            logs: LogBuffer::new(self.limits.max_output_bytes),
            meter: self.meter,
        });
        let completion = big_stack::run(|| self.evaluate(script));
        let logs = match guard.finish() {
            Some(state) => {
                self.meter = state.meter;
                state.logs
            }
            None => LogBuffer::default(),
        };
        Ok(RunOutcome { completion, logs })
    }
}
