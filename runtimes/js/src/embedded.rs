//! One Boa context driven in place by its embedder: the engine side of the
//! `wasm:boa` guest (`guests/boa`), which runs it inside wasmtime.
//!
//! It is the worker's engine (the same prelude, helpers, encoder, hoisting and
//! error messages) without the worker's transport: a run is a function call, tool
//! calls go to a [`ToolCaller`], and printed text comes back with the outcome. It
//! holds no limit Boa cannot hold itself (its loop and recursion limits): time and
//! memory come from whatever runs it, here wasmtime.

use boa_engine::Context;
use codeact_runtime::{Limits, LogBuffer, RunOutcome, ToolSpec};

use crate::worker::{self, InPlace};
pub use crate::worker::{BatchCaller, ToolCaller};

/// A JavaScript context and the limits it was made with.
pub struct EmbeddedJs {
    context: Context,
    limits: Limits,
    call_tool: ToolCaller,
    call_tools: Option<BatchCaller>,
}

impl std::fmt::Debug for EmbeddedJs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedJs")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl EmbeddedJs {
    /// A context with the prelude loaded, whose scripts call tools through
    /// `call_tool`. `Err` says why the engine did not start.
    pub fn new(limits: Limits, call_tool: ToolCaller) -> Result<Self, String> {
        let context = worker::new_context(&limits).map_err(|e| e.to_string())?;
        Ok(Self {
            context,
            limits,
            call_tool,
            call_tools: None,
        })
    }

    /// The same context, handing the calls a script waits on together to
    /// `call_tools` as one batch (without it, they go to `call_tool` one after
    /// another).
    pub fn with_batch_caller(mut self, call_tools: BatchCaller) -> Self {
        self.call_tools = Some(call_tools);
        self
    }

    /// The same context under `limits`: what a context takes from its limits (the
    /// loop and recursion limits, the output cap, the nesting depth) is set again,
    /// so a context made ahead of time (a pre-initialised guest's) serves any
    /// session.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        worker::apply_runtime_limits(&mut self.context, &limits);
        self.limits = limits;
        self
    }

    /// The same context with the namespace objects of `tools` defined
    /// (`github.create_issue(…)`, see `codeact_runtime::namespaces`): call it
    /// before the first script, after which the prelude refuses new ones.
    pub fn with_namespaces(mut self, tools: &[ToolSpec]) -> Result<Self, String> {
        let namespaces = codeact_runtime::namespaces(tools);
        if !namespaces.is_empty() {
            worker::define_namespaces(&mut self.context, &namespaces).map_err(|e| e.to_string())?;
        }
        Ok(self)
    }

    /// Runs one script; variables and functions stay for the next.
    pub fn run(&mut self, script: &str) -> RunOutcome {
        worker::reset_logs(self.limits.max_output_bytes);
        worker::begin_in_place(InPlace {
            call_tool: self.call_tool,
            call_tools: self.call_tools,
            pending: None,
            printed: String::new(),
        });
        let completion = worker::run(&mut self.context, script, self.limits.max_nesting_depth);
        let printed = worker::end_in_place();
        let mut logs = LogBuffer::new(self.limits.max_output_bytes);
        logs.push(&printed);
        logs.count_dropped(worker::dropped_log_bytes());
        RunOutcome {
            completion: completion.map_err(|failure| failure.into_script_error(&self.limits)),
            logs,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn tools(name: &str, args: Value) -> Result<Value, String> {
        match name {
            "add" => Ok(json!(
                args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)
            )),
            _ => Err("the disk is on fire".into()),
        }
    }

    #[test]
    fn a_context_driven_in_place_keeps_state_calls_tools_and_keeps_printed_text() {
        let mut js = EmbeddedJs::new(Limits::default(), tools).expect("starts");
        js.run("let total = call_tool('add', {a: 40, b: 1});");
        let outcome = js.run("console.log('sum', total); final_result(total + 1)");
        assert_eq!(
            outcome.completion,
            Ok(json!({"type": "final_result", "value": 42}))
        );
        assert_eq!(outcome.logs.kept(), "sum 41\n");
        let outcome = js.run("let r; try { call_tool('x', {}) } catch (e) { r = String(e) } r");
        let text = outcome.completion.expect("a value");
        assert!(
            text.as_str()
                .unwrap_or_default()
                .contains("the disk is on fire"),
            "{text}"
        );
    }
}
