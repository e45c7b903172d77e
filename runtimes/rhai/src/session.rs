//! One conversation's Rhai state: a scope of variables and a library of functions.

use std::sync::Arc;
use std::time::Instant;

use codeact_runtime::{
    HostError, LimitKind, Limits, LogBuffer, RunOutcome, ScriptError, Session, ToolDispatch,
};
use rhai::{AST, Dynamic, Engine, Scope};

use crate::run_state::{RunGuard, RunState};
use crate::{big_stack, convert, errors};

/// A Rhai session: variables (`let x = …`) and functions (`fn f() {…}`) defined by one
/// run are visible to the next. Built by [`RhaiRuntime`](crate::RhaiRuntime).
pub struct RhaiSession {
    engine: Arc<Engine>,
    limits: Arc<Limits>,
    tools: Arc<dyn ToolDispatch>,
    scope: Scope<'static>,
    functions: AST,
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
        let value: Dynamic = self
            .engine
            .eval_ast_with_scope(&mut self.scope, &ast)
            .map_err(|e| errors::from_eval(&e, limits))?;
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
        });
        let completion = big_stack::run(|| self.evaluate(script));
        let logs = guard.finish();
        Ok(RunOutcome { completion, logs })
    }
}
