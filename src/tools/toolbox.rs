//! Tools: a name, a description, a JSON Schema for the arguments, and an async
//! handler. A [`ToolBox`] holds a session's tools and serves a script's calls.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};

use codeact_runtime::{Spelling, ToolCall, ToolDispatch, ToolError, ToolSpec, is_identifier};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::runtime::Handle;

use crate::agent::approval::{
    ApprovalDecision, ApprovalFuture, ApprovalReason, ApprovalRequest, Approver,
};

/// How long past its script's deadline a call is waited for before the host
/// stops it: 250 ms, for a tool that bounds itself by the same deadline (an
/// MCP server's call) to end first and say why.
const DEADLINE_GRACE: std::time::Duration = std::time::Duration::from_millis(250);

/// The future a tool handler returns.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send>>;

type Handler = Arc<dyn Fn(Value) -> ToolFuture + Send + Sync>;

/// A synchronous tool's handler, called as it is: no future, no runtime.
type Immediate = Arc<dyn Fn(Value) -> Result<Value, ToolError> + Send + Sync>;

/// A host function a script calls by name with a JSON arguments object.
///
/// ```
/// use codeact::Tool;
/// use serde_json::json;
///
/// let add = Tool::new("add", "Adds a and b.", |args| async move {
///     Ok(json!(args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)))
/// })
/// .with_parameters(json!({"type": "object", "properties": {
///     "a": {"type": "integer"}, "b": {"type": "integer"}}}));
/// assert_eq!(add.spec().name, "add");
/// ```
#[derive(Clone)]
pub struct Tool {
    spec: ToolSpec,
    handler: Handler,
    /// Set for a tool made by [`Tool::from_fn`]: its calls skip the future.
    immediate: Option<Immediate>,
    needs_approval: bool,
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl Tool {
    /// A tool with an async handler; its arguments are any object until
    /// [`with_parameters`](Self::with_parameters) says otherwise.
    pub fn new<F, Fut>(name: impl Into<String>, description: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        Self {
            spec: ToolSpec::new(name, description),
            handler: Arc::new(move |args| Box::pin(handler(args))),
            immediate: None,
            needs_approval: false,
        }
    }

    /// A tool with a synchronous handler, for work that never waits. Its calls
    /// are made as plain function calls, on whichever thread the script runs
    /// (see [`ToolDispatch::is_immediate`]), so it must not block for long.
    pub fn from_fn<F>(name: impl Into<String>, description: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Value) -> Result<Value, ToolError> + Send + Sync + 'static,
    {
        let handler: Immediate = Arc::new(handler);
        let immediate = handler.clone();
        let mut tool = Self::new(name, description, move |args| {
            std::future::ready(handler(args))
        });
        tool.immediate = Some(immediate);
        tool
    }

    /// The same tool with this JSON Schema for its arguments object.
    pub fn with_parameters(mut self, parameters: Value) -> Self {
        self.spec.parameters = parameters;
        self
    }

    /// The same tool with this JSON Schema for its result, shown as its
    /// signature's return type (`-> {sum: integer}`).
    pub fn with_returns(mut self, returns: Value) -> Self {
        self.spec.returns = Some(returns);
        self
    }

    /// A tool whose arguments and result are Rust types: their JSON Schemas are
    /// generated (schemars) and shown to the model as the signature, the arguments
    /// are checked against theirs before the handler runs (a bad call is a tool
    /// error naming the field, e.g. `/b`) and parsed into `A`.
    ///
    /// ```
    /// use codeact::{Tool, ToolBox};
    /// use codeact::tools::ToolDispatch;
    /// use serde_json::json;
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Add { a: i64, b: i64 }
    /// #[derive(serde::Serialize, schemars::JsonSchema)]
    /// struct Sum { sum: i64 }
    ///
    /// let add = Tool::typed("add", "Adds a and b.", |args: Add| async move {
    ///     Ok(Sum { sum: args.a + args.b })
    /// });
    /// let toolbox = ToolBox::new([add]).unwrap();
    /// assert_eq!(toolbox.call("add", json!({"a": 2, "b": 40})), Ok(json!({"sum": 42})));
    /// let err = toolbox.call("add", json!({"a": 2, "b": "forty"})).unwrap_err();
    /// assert!(err.message.contains("/b"), "{}", err.message);
    /// ```
    pub fn typed<A, R, F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        handler: F,
    ) -> Self
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        R: Serialize + JsonSchema + 'static,
        F: Fn(A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
    {
        let parameters = generated_schema::<A>();
        let returns = generated_schema::<R>();
        let validator = jsonschema::validator_for(&parameters).ok();
        let handler = Arc::new(handler);
        Self::new(name, description, move |args: Value| {
            let checked = match &validator {
                Some(validator) => first_schema_error(validator, &args),
                None => Ok(()),
            };
            let parsed = checked.and_then(|()| {
                serde_json::from_value::<A>(args)
                    .map_err(|e| ToolError::new(format!("the arguments do not fit: {e}")))
            });
            let call = parsed.map(|args| handler(args));
            async move {
                let result = call?.await?;
                serde_json::to_value(result)
                    .map_err(|e| ToolError::new(format!("the tool's result has no JSON form: {e}")))
            }
        })
        .with_parameters(parameters)
        .with_returns(returns)
    }

    /// The same tool with its description marked as a third party's (an MCP
    /// server's): the prompt quotes it as untrusted text.
    pub fn with_untrusted_description(mut self) -> Self {
        self.spec.untrusted_description = true;
        self
    }

    /// The same tool, also a method of the object `namespace` when its name is
    /// `NAMESPACE_MEMBER` (`github.create_issue` for `github_create_issue`) and
    /// both parts can be written in every language (see
    /// [`ToolSpec::in_namespace`]). MCP servers' tools come this way.
    pub fn in_namespace(mut self, namespace: &str) -> Self {
        self.spec = self.spec.in_namespace(namespace);
        self
    }

    /// The same tool, each call of which waits for approval when an agent runs
    /// it (see [`AgentBuilder::on_approval`](crate::AgentBuilder::on_approval)).
    pub fn needing_approval(mut self) -> Self {
        self.needs_approval = true;
        self
    }

    /// Whether each call waits for approval.
    pub fn needs_approval(&self) -> bool {
        self.needs_approval
    }

    /// What the model is told about the tool.
    pub fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    /// Calls the handler.
    pub fn call(&self, args: Value) -> ToolFuture {
        (self.handler)(args)
    }
}

/// `T`'s JSON Schema, without the `$schema` and `title` keys a model need not read.
fn generated_schema<T: JsonSchema>() -> Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Bool(true));
    if let Value::Object(object) = &mut schema {
        object.remove("$schema");
        object.remove("title");
    }
    schema
}

/// The first place `value` breaks `validator`'s schema, as a tool error naming it.
pub(crate) fn first_schema_error(
    validator: &jsonschema::Validator,
    value: &Value,
) -> Result<(), ToolError> {
    match validator.iter_errors(value).next() {
        None => Ok(()),
        Some(error) => {
            let at = error.instance_path().to_string();
            let at = if at.is_empty() { "/".to_string() } else { at };
            Err(ToolError::new(format!(
                "the arguments do not match the tool's schema at {at}: {error}"
            )))
        }
    }
}

/// Clears the namespace of every spec whose namespace is another tool's name: the
/// object would hide that tool where tools are globals (Python), so such tools
/// keep their flat names only. A toolbox does this to its specs; whatever lists
/// tools before one is made (tool discovery) must too, to show the same names.
pub(crate) fn settle_namespaces(specs: &mut [ToolSpec]) {
    let names: std::collections::BTreeSet<String> =
        specs.iter().map(|spec| spec.name.clone()).collect();
    for spec in specs {
        if spec
            .namespace
            .as_ref()
            .is_some_and(|namespace| names.contains(namespace))
        {
            spec.namespace = None;
        }
    }
}

/// Why a set of tools was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolBoxError {
    /// Two tools share a name.
    #[error("two tools are named '{0}'")]
    Duplicate(String),
    /// A name that is not an identifier in every language (letters, digits, `_`,
    /// not starting with a digit).
    #[error("tool name '{0}' must be letters, digits and '_', not starting with a digit")]
    InvalidName(String),
}

/// The tools of a session, callable from a script's thread.
///
/// A call first polls the handler once; a handler that is ready at once (any
/// synchronous tool) costs no runtime round trip. Otherwise the call blocks this
/// thread on the ambient tokio runtime, or on a small shared one when there is none.
/// So sessions must run on a thread that may block: in tokio, `spawn_blocking`.
#[derive(Debug, Clone, Default)]
pub struct ToolBox {
    specs: Vec<ToolSpec>,
    tools: BTreeMap<String, Tool>,
    /// Once cancelled, no call starts and a waiting one ends at once (its future
    /// dropped: a command tool's process group is killed).
    cancel: Option<tokio_util::sync::CancellationToken>,
    /// Who decides on calls of tools that need approval. Default: nobody, so
    /// such a call is denied (fail closed).
    approver: Option<Approver>,
    /// Set by an agent, whose own tool layer asks its approver before a call
    /// reaches this toolbox. Default: false.
    approved_upstream: bool,
    /// How the scripts' language writes parameter names, which a refused call's
    /// message uses (`from (written from_)`). Default: JSON's, the schemas' own.
    spelling: Spelling,
}

impl ToolBox {
    /// A toolbox holding `tools`. Names must be unique identifiers.
    pub fn new(tools: impl IntoIterator<Item = Tool>) -> Result<Self, ToolBoxError> {
        let mut toolbox = Self::default();
        for tool in tools {
            let name = tool.spec.name.clone();
            if !is_identifier(&name) {
                return Err(ToolBoxError::InvalidName(name));
            }
            if toolbox.tools.contains_key(&name) {
                return Err(ToolBoxError::Duplicate(name));
            }
            toolbox.specs.push(tool.spec.clone());
            toolbox.tools.insert(name, tool);
        }
        settle_namespaces(&mut toolbox.specs);
        Ok(toolbox)
    }

    /// The same tools, whose calls end when `token` is cancelled: a call then
    /// fails with a tool error saying so, without waiting for the tool.
    pub fn cancelled_by(mut self, token: tokio_util::sync::CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// The same tools, whose calls that need approval
    /// ([`Tool::needing_approval`]) ask `approver` first; a denied call fails
    /// with a tool error giving the approver's reason. Without an approver such
    /// calls are denied: a tool that needs approval never runs unapproved,
    /// whatever runs the script (an agent asks its own approver, see
    /// [`AgentBuilder::on_approval`](crate::AgentBuilder::on_approval)).
    pub fn approved_by(mut self, approver: Approver) -> Self {
        self.approver = Some(approver);
        self
    }

    /// The same tools, whose refusals of a call's argument names (see
    /// [`ToolDispatch::call`]) name each parameter also as `spelling` writes it:
    /// the spelling of the runtime whose scripts call them
    /// ([`Runtime::spelling`](codeact_runtime::Runtime::spelling)). An agent sets
    /// its runtime's.
    pub fn written_as(mut self, spelling: Spelling) -> Self {
        self.spelling = spelling;
        self
    }

    /// The same tools for an agent, whose tool layer has asked for approval
    /// before a call reaches them.
    pub(crate) fn approved_upstream(mut self) -> Self {
        self.approved_upstream = true;
        self
    }

    /// `None` when the call of `name` may run; otherwise the tool error that
    /// refuses it, after asking the approver if there is one.
    fn approval_refusal(&self, name: &str, args: &Value) -> Option<ToolError> {
        let Some(approver) = &self.approver else {
            return Some(ToolError::new(format!(
                "'{name}' was not called: it needs approval and nothing here can ask for it \
                 (the operator can choose who decides, e.g. `--approve ask`)"
            )));
        };
        let request = ApprovalRequest {
            agent: String::new(),
            step: 0,
            tool: name.to_string(),
            args: args.clone(),
            script: String::new(),
            reason: ApprovalReason::Marked,
        };
        let decision = wait_for_decision(approver.decide(request), self.cancel.as_ref());
        if decision.approved {
            return None;
        }
        let reason = if decision.deferred {
            "a decision cannot be deferred outside an agent's run".to_string()
        } else {
            decision
                .reason
                .unwrap_or_else(|| "no reason given".to_string())
        };
        Some(ToolError::new(format!(
            "'{name}' was not called: approval was denied ({reason})"
        )))
    }

    /// Checks a call (its tool, its argument names, cancellation, approval)
    /// and starts it: a synchronous tool, or an async one that answers at its
    /// first poll, is answered at once; any other is a future to wait on.
    fn start(&self, handle: &Handle, name: &str, args: Value) -> Started {
        let tool = match self.tools.get(name) {
            Some(tool) => tool,
            None => return Started::Answered(Err(self.unknown(name))),
        };
        if let Err(e) = tool.spec.check_argument_names(&args, &self.spelling) {
            return Started::Answered(Err(e));
        }
        if self
            .cancel
            .as_ref()
            .is_some_and(|token| token.is_cancelled())
        {
            return Started::Answered(Err(cancelled()));
        }
        if tool.needs_approval
            && !self.approved_upstream
            && let Some(refusal) = self.approval_refusal(name, &args)
        {
            return Started::Answered(Err(refusal));
        }
        if let Some(immediate) = &tool.immediate {
            return Started::Answered(immediate(args));
        }
        let _context = handle.enter();
        let mut future = tool.call(args);
        let mut cx = Context::from_waker(Waker::noop());
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(result) => Started::Answered(result),
            Poll::Pending => Started::Waiting(future),
        }
    }

    /// Waits on started calls together on this (blocking) thread, at most
    /// [`PARALLEL_CALLS`](codeact_runtime::PARALLEL_CALLS) at a time, and
    /// returns their results in order. The script's running slot is free
    /// meanwhile. Each waits no longer than the script may run (a little
    /// longer, so a tool that bounds itself by the same deadline says why
    /// first); a cancelled run stops them all.
    fn wait_all(
        &self,
        handle: &Handle,
        futures: Vec<(String, ToolFuture)>,
    ) -> Vec<Result<Value, ToolError>> {
        use futures_util::StreamExt;
        if futures.is_empty() {
            return Vec::new();
        }
        let deadline = codeact_runtime::call_deadline::current()
            .and_then(|deadline| deadline.checked_add(DEADLINE_GRACE))
            .map(tokio::time::Instant::from_std);
        let count = futures.len();
        let timed = futures.into_iter().map(move |(name, future)| async move {
            match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, future)
                    .await
                    .unwrap_or_else(|_| Err(out_of_time(&name))),
                None => future.await,
            }
        });
        let all = futures_util::stream::iter(timed)
            .buffered(codeact_runtime::PARALLEL_CALLS)
            .collect::<Vec<_>>();
        crate::exec::run_slots::released_during(|| {
            handle.block_on(async {
                match &self.cancel {
                    None => all.await,
                    Some(token) => tokio::select! {
                        biased;
                        () = token.cancelled() => (0..count).map(|_| Err(cancelled())).collect(),
                        results = all => results,
                    },
                }
            })
        })
    }

    fn unknown(&self, name: &str) -> ToolError {
        if self.tools.is_empty() {
            return ToolError::new(format!("unknown tool '{name}': no tools are available"));
        }
        let known: Vec<&str> = self.tools.keys().map(String::as_str).collect();
        ToolError::new(format!(
            "unknown tool '{name}'; available tools: {}",
            known.join(", ")
        ))
    }
}

impl ToolDispatch for ToolBox {
    fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    /// Calls tool `name`. Its argument names are checked against its schema
    /// first ([`ToolSpec::check_argument_names`]), whatever kind of tool it is (a
    /// closure, a typed tool, a command, an MCP server's): a required argument
    /// left out or a name the schema does not list is a tool error naming the
    /// wrong and the expected names, and the tool does not run.
    fn call(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        let handle = tools_runtime()?;
        match self.start(&handle, name, args) {
            Started::Answered(result) => result,
            Started::Waiting(future) => self
                .wait_all(&handle, vec![(name.to_string(), future)])
                .pop()
                .unwrap_or_else(|| Err(ToolError::new("the host lost this call's result"))),
        }
    }

    /// Starts every call in order (checks and approvals one after another, as
    /// for single calls), then waits on those that have to wait all together,
    /// at most [`PARALLEL_CALLS`](codeact_runtime::PARALLEL_CALLS) at a time.
    fn call_many(&self, calls: Vec<ToolCall>) -> Vec<Result<Value, ToolError>> {
        let handle = match tools_runtime() {
            Ok(handle) => handle,
            Err(e) => return calls.iter().map(|_| Err(e.clone())).collect(),
        };
        let mut results: Vec<Option<Result<Value, ToolError>>> = Vec::with_capacity(calls.len());
        let mut waiting = Vec::new();
        for (at, call) in calls.into_iter().enumerate() {
            match self.start(&handle, &call.name, call.args) {
                Started::Answered(result) => results.push(Some(result)),
                Started::Waiting(future) => {
                    results.push(None);
                    waiting.push((at, call.name, future));
                }
            }
        }
        let (places, futures): (Vec<usize>, Vec<(String, ToolFuture)>) = waiting
            .into_iter()
            .map(|(at, name, future)| (at, (name, future)))
            .unzip();
        for (at, result) in places.into_iter().zip(self.wait_all(&handle, futures)) {
            results[at] = Some(result);
        }
        results
            .into_iter()
            .map(|result| {
                result.unwrap_or_else(|| Err(ToolError::new("the host lost this call's result")))
            })
            .collect()
    }

    /// A tool made by [`Tool::from_fn`] whose calls need no approval.
    fn is_immediate(&self, name: &str) -> bool {
        self.tools
            .get(name)
            .is_some_and(|tool| tool.immediate.is_some() && !tool.needs_approval)
    }
}

/// A call as [`ToolBox`] started it.
enum Started {
    /// Answered without waiting (or refused).
    Answered(Result<Value, ToolError>),
    /// To wait on.
    Waiting(ToolFuture),
}

/// The error of a call stopped because its run was cancelled.
fn cancelled() -> ToolError {
    ToolError::new("the run was cancelled, so the host stopped this call")
}

/// The error of a call stopped at its script's time limit.
fn out_of_time(name: &str) -> ToolError {
    ToolError::new(format!(
        "'{name}' had not answered when the script's time limit passed, so the host stopped the call"
    ))
}

/// The tokio runtime the calling thread is in, else the fallback one.
fn tools_runtime() -> Result<Handle, ToolError> {
    match Handle::try_current() {
        Ok(handle) => Ok(handle),
        Err(_) => fallback_runtime()
            .cloned()
            .ok_or_else(|| ToolError::new("the host could not start a thread to run this tool")),
    }
}

/// Waits on this (blocking) thread for an approver's decision; a cancelled run
/// denies at once.
pub(crate) fn wait_for_decision(
    decision: ApprovalFuture,
    cancel: Option<&tokio_util::sync::CancellationToken>,
) -> ApprovalDecision {
    let cancelled = || ApprovalDecision::deny("the run was cancelled").by("cancellation");
    if cancel.is_some_and(|token| token.is_cancelled()) {
        return cancelled();
    }
    let handle = match tokio::runtime::Handle::try_current() {
        Ok(handle) => handle,
        Err(_) => match fallback_runtime() {
            Some(handle) => handle.clone(),
            None => {
                return ApprovalDecision::deny("the host could not wait for a decision").by("host");
            }
        },
    };
    crate::exec::run_slots::released_during(|| match cancel {
        None => handle.block_on(decision),
        Some(token) => handle.block_on(async {
            tokio::select! {
                biased;
                () = token.cancelled() => cancelled(),
                decision = decision => decision,
            }
        }),
    })
}

/// A one-worker runtime for tool calls made outside any tokio runtime, started on
/// first use. `None` only when the OS refuses a thread.
pub(crate) fn fallback_runtime() -> Option<&'static Handle> {
    static RUNTIME: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("codeact-tools")
                .enable_all()
                .build()
                .ok()
        })
        .as_ref()
        .map(tokio::runtime::Runtime::handle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn add() -> Tool {
        Tool::from_fn("add", "Adds a and b.", |args| {
            Ok(json!(
                args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)
            ))
        })
    }

    #[test]
    fn a_ready_tool_is_served_without_any_runtime() {
        let toolbox = ToolBox::new([add()]).expect("valid tools");
        assert_eq!(toolbox.call("add", json!({"a": 2, "b": 3})), Ok(json!(5)));
    }

    #[test]
    fn only_a_synchronous_tool_that_needs_no_approval_may_be_called_from_any_thread() {
        let waits = Tool::new("waits", "", |_| async { Ok(json!(1)) });
        let guarded = Tool::from_fn("guarded", "", |_| Ok(json!(1))).needing_approval();
        let toolbox = ToolBox::new([add(), waits, guarded]).expect("valid tools");
        assert!(toolbox.is_immediate("add"));
        assert!(!toolbox.is_immediate("waits"));
        assert!(!toolbox.is_immediate("guarded"));
        assert!(!toolbox.is_immediate("missing"));
    }

    #[test]
    fn a_cancelled_toolbox_refuses_even_a_synchronous_tool() {
        let token = tokio_util::sync::CancellationToken::new();
        let toolbox = ToolBox::new([add()])
            .expect("valid tools")
            .cancelled_by(token.clone());
        token.cancel();
        let error = toolbox
            .call("add", json!({"a": 1, "b": 2}))
            .expect_err("a cancelled toolbox refuses");
        assert!(error.message.contains("cancelled"), "{}", error.message);
    }

    #[test]
    fn a_waiting_tool_is_driven_to_completion_outside_a_runtime() {
        let slow = Tool::new("slow", "Sleeps, then answers.", |_| async {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            Ok(json!("awake"))
        });
        let toolbox = ToolBox::new([slow]).expect("valid tools");
        assert_eq!(toolbox.call("slow", json!({})), Ok(json!("awake")));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_waiting_tool_runs_on_the_ambient_runtime_from_a_blocking_thread() {
        let slow = Tool::new("slow", "Sleeps, then answers.", |_| async {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            Ok(json!("awake"))
        });
        let toolbox = ToolBox::new([slow]).expect("valid tools");
        let result = tokio::task::spawn_blocking(move || toolbox.call("slow", json!({})))
            .await
            .expect("blocking task finishes");
        assert_eq!(result, Ok(json!("awake")));
    }

    #[test]
    fn an_unknown_tool_error_lists_the_available_ones() {
        let toolbox = ToolBox::new([add()]).expect("valid tools");
        let err = toolbox.call("mul", json!({})).expect_err("no such tool");
        assert_eq!(err.message, "unknown tool 'mul'; available tools: add");
    }

    /// If this fails, a Python script's `clock` is an object that hides the tool
    /// named `clock`, or the card shows a method no runtime defines.
    #[test]
    fn a_namespace_named_like_another_tool_leaves_its_tools_flat() {
        let tool = |name: &str| Tool::from_fn(name, "", |_| Ok(Value::Null));
        let toolbox =
            ToolBox::new([tool("clock_now").in_namespace("clock"), tool("clock")]).expect("valid");
        assert_eq!(toolbox.specs()[0].namespace, None);
        let toolbox = ToolBox::new([tool("clock_now").in_namespace("clock")]).expect("valid");
        assert_eq!(toolbox.specs()[0].namespaced(), Some(("clock", "now")));
    }

    #[test]
    fn duplicate_and_invalid_names_are_refused() {
        assert_eq!(
            ToolBox::new([add(), add()]).err(),
            Some(ToolBoxError::Duplicate("add".into()))
        );
        let bad = Tool::from_fn("my-tool", "", |_| Ok(Value::Null));
        assert_eq!(
            ToolBox::new([bad]).err(),
            Some(ToolBoxError::InvalidName("my-tool".into()))
        );
    }

    fn convert_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "amount": {"type": "number"},
                "from": {"type": "string"},
                "to": {"type": "string"},
            },
            "required": ["amount", "from", "to"],
        })
    }

    /// A made-up spelling that writes `from` as `from_`, as Python's does.
    const TRAILING: Spelling = Spelling {
        language: "Test",
        rule: |name| match name {
            "from" => codeact_runtime::Written::Respelled("from_".into()),
            _ => codeact_runtime::Written::AsIs,
        },
    };

    const WRONG: &str = "unknown argument `to_`; missing required `to`; the parameters are amount, from (written from_), to";

    #[test]
    fn a_closure_tool_is_not_run_for_a_call_with_a_wrong_argument_name() {
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = ran.clone();
        let convert = Tool::from_fn("convert", "", move |_| {
            seen.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(json!(1))
        })
        .with_parameters(convert_schema());
        let toolbox = ToolBox::new([convert]).expect("valid").written_as(TRAILING);
        let err = toolbox
            .call(
                "convert",
                json!({"amount": 50, "from": "EUR", "to_": "USD"}),
            )
            .expect_err("refused");
        assert_eq!(err.message, WRONG);
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
        let ok = toolbox.call("convert", json!({"amount": 50, "from": "EUR", "to": "USD"}));
        assert_eq!(ok, Ok(json!(1)));
    }

    #[test]
    fn a_typed_tool_names_the_wrong_and_the_expected_argument_before_its_schema_check() {
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        struct Convert {
            amount: f64,
            from: String,
            to: String,
        }
        let convert = Tool::typed("convert", "", |args: Convert| async move {
            Ok(format!("{} {} {}", args.amount, args.from, args.to))
        });
        let toolbox = ToolBox::new([convert]).expect("valid").written_as(TRAILING);
        let err = toolbox
            .call(
                "convert",
                json!({"amount": 50, "from": "EUR", "to_": "USD"}),
            )
            .expect_err("refused");
        assert_eq!(err.message, WRONG);
        assert_eq!(
            toolbox.call("convert", json!({"amount": 5, "from": "EUR", "to": "USD"})),
            Ok(json!("5 EUR USD"))
        );
    }

    #[test]
    fn a_command_tool_is_not_started_for_a_call_with_a_wrong_argument_name() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let marker = dir.path().join("ran");
        let command =
            crate::tools::command::CommandSpec::parse(&format!("touch {}", marker.display()))
                .expect("parses");
        let convert = crate::tools::command::command_tool("convert", "", command)
            .with_parameters(convert_schema());
        let toolbox = ToolBox::new([convert]).expect("valid");
        let err = toolbox
            .call(
                "convert",
                json!({"amount": 50, "from_": "EUR", "to": "USD"}),
            )
            .expect_err("refused");
        assert_eq!(
            err.message,
            "unknown argument `from_`; missing required `from`; the parameters are amount, from, to"
        );
        assert!(!marker.exists(), "the command ran");
    }

    #[test]
    fn a_tool_without_a_schema_or_admitting_other_names_takes_any_argument() {
        let free = Tool::from_fn("free", "", Ok);
        let open = Tool::from_fn("open", "", Ok).with_parameters(json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "additionalProperties": true,
        }));
        let toolbox = ToolBox::new([free, open]).expect("valid");
        for name in ["free", "open"] {
            assert_eq!(
                toolbox.call(name, json!({"anything": 1})),
                Ok(json!({"anything": 1}))
            );
        }
    }

    /// A schema of thousands of properties, all required, called with thousands
    /// of huge names: refused quickly, with a short message on one line.
    #[test]
    fn a_huge_schema_and_a_call_of_huge_names_are_refused_quickly_and_briefly() {
        let properties: serde_json::Map<String, Value> = (0..10_000)
            .map(|i| (format!("p{i}"), json!({"type": "string"})))
            .collect();
        let required: Vec<String> = (0..10_000).map(|i| format!("p{i}")).collect();
        let wide = Tool::from_fn("wide", "", |_| Ok(json!(null))).with_parameters(json!({
            "type": "object", "properties": properties, "required": required,
        }));
        let toolbox = ToolBox::new([wide]).expect("valid");
        let args: serde_json::Map<String, Value> = (0..10_000)
            .map(|i| (format!("{}\n```{i}", "y".repeat(500)), json!(i)))
            .collect();
        let started = std::time::Instant::now();
        for _ in 0..10 {
            let err = toolbox
                .call("wide", Value::Object(args.clone()))
                .expect_err("refused");
            assert!(err.message.len() < 2_000, "{} bytes", err.message.len());
            assert!(!err.message.contains('\n'), "{}", err.message);
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
}
