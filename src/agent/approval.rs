//! Approvals: a sensitive tool call waits, inside the running script, until
//! someone says yes or no.
//!
//! A call needs approval when its tool is marked ([`AgentBuilder::needs_approval`]
//! and [`needs_approval_when`]), or when the policy's `check_call` answers
//! `"ask"`. The call then blocks where the script made it while the [`Approver`]
//! decides (an async callback: a person behind a UI, a terminal prompt, a fixed
//! rule); approved, the tool runs; denied, the call throws the runtime's catchable
//! tool error saying it was denied and why, and the script goes on. With no
//! approver, such a call is denied (fail closed). Every decision is an
//! [`Event::ApprovalDecided`](crate::Event::ApprovalDecided), so a transcript
//! records who decided what and when.
//!
//! [`AgentBuilder::needs_approval`]: crate::AgentBuilder::needs_approval
//! [`needs_approval_when`]: crate::AgentBuilder::needs_approval_when

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

/// What the approver is asked.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRequest {
    /// The agent whose script made the call.
    pub agent: String,
    /// The step of that script.
    pub step: usize,
    /// The tool called.
    pub tool: String,
    /// The arguments, exactly as the tool would get them.
    pub args: Value,
    /// The whole script that made the call.
    pub script: String,
    /// Why approval is needed.
    pub reason: ApprovalReason,
}

/// Why a call needs approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalReason {
    /// The tool is marked as needing it (by name or by a rule on its arguments).
    Marked,
    /// The policy's `check_call` answered `"ask"`.
    Policy,
}

/// The answer to an [`ApprovalRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalDecision {
    /// Whether the call may run.
    pub approved: bool,
    /// Why (shown to the script when denied).
    pub reason: Option<String>,
    /// Who or what decided, for the record: `"terminal"`, `"policy: allow"`, a
    /// user's name. Default: `"callback"`.
    pub decided_by: String,
    /// No decision yet: the run stops with
    /// [`Outcome::AwaitingApproval`](crate::Outcome::AwaitingApproval) and is
    /// resumed once someone decides (`approved` is false meanwhile).
    pub deferred: bool,
}

impl ApprovalDecision {
    /// The call may run.
    pub fn approve() -> Self {
        Self {
            approved: true,
            reason: None,
            decided_by: "callback".into(),
            deferred: false,
        }
    }

    /// The call is refused, with the reason the script is told.
    pub fn deny(reason: impl Into<String>) -> Self {
        Self {
            approved: false,
            reason: Some(reason.into()),
            decided_by: "callback".into(),
            deferred: false,
        }
    }

    /// No decision now: the run stops, awaiting it, and its transcript is resumed
    /// with one later (for approvals that take hours).
    pub fn defer() -> Self {
        Self {
            approved: false,
            reason: Some("awaiting approval".into()),
            decided_by: "callback".into(),
            deferred: true,
        }
    }

    /// The same decision, recorded as made by `who`.
    pub fn by(mut self, who: impl Into<String>) -> Self {
        self.decided_by = who.into();
        self
    }
}

/// The future an approver returns.
pub type ApprovalFuture = Pin<Box<dyn Future<Output = ApprovalDecision> + Send>>;

/// Decides on calls that need approval: an async callback.
///
/// ```
/// use codeact::{ApprovalDecision, Approver};
///
/// let approver = Approver::new(|request| async move {
///     if request.tool == "send_email" && request.args["to"].as_str().is_some_and(|to| to.ends_with("@example.com")) {
///         ApprovalDecision::approve()
///     } else {
///         ApprovalDecision::deny("only mail to example.com is approved")
///     }
/// });
/// # let _ = approver;
/// ```
#[derive(Clone)]
pub struct Approver(Arc<dyn Fn(ApprovalRequest) -> ApprovalFuture + Send + Sync>);

impl fmt::Debug for Approver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Approver")
    }
}

impl Approver {
    /// An approver calling `decide` for each request.
    pub fn new<F, Fut>(decide: F) -> Self
    where
        F: Fn(ApprovalRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ApprovalDecision> + Send + 'static,
    {
        Self(Arc::new(move |request| Box::pin(decide(request))))
    }

    /// Approves every call (recorded as `policy: allow`).
    pub fn allow_all() -> Self {
        Self::new(|_| async { ApprovalDecision::approve().by("policy: allow") })
    }

    /// Denies every call with `reason` (recorded as `policy: deny`).
    pub fn deny_all(reason: impl Into<String>) -> Self {
        let reason: String = reason.into();
        Self::new(move |_| {
            let reason = reason.clone();
            async move { ApprovalDecision::deny(reason).by("policy: deny") }
        })
    }

    /// Defers every call: the run stops awaiting approval (recorded as
    /// `policy: defer`).
    pub fn defer_all() -> Self {
        Self::new(|_| async { ApprovalDecision::defer().by("policy: defer") })
    }

    pub(crate) fn decide(&self, request: ApprovalRequest) -> ApprovalFuture {
        (self.0)(request)
    }
}

/// A decision made ahead for a call of `tool` with exactly `args` (a resumed run
/// awaiting approval takes it instead of asking).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Grant {
    pub tool: String,
    pub args: Value,
    pub decision: ApprovalDecision,
}

/// The call a run stopped for, as the transcript records it.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingApproval {
    /// Its id, e.g. `s2c1`.
    pub id: String,
    /// The tool.
    pub tool: String,
    /// The arguments.
    pub args: Value,
}

type Predicate = Arc<dyn Fn(&str, &Value) -> bool + Send + Sync>;

/// Which calls need approval, and who decides.
#[derive(Clone, Default)]
pub(crate) struct Approvals {
    tools: BTreeSet<String>,
    predicates: Vec<Predicate>,
    pub(crate) approver: Option<Approver>,
}

impl fmt::Debug for Approvals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Approvals")
            .field("tools", &self.tools)
            .field("predicates", &self.predicates.len())
            .field("approver", &self.approver.is_some())
            .finish()
    }
}

impl Approvals {
    pub(crate) fn mark(&mut self, tool: impl Into<String>) {
        self.tools.insert(tool.into());
    }

    pub(crate) fn mark_when(&mut self, predicate: Predicate) {
        self.predicates.push(predicate);
    }

    /// Whether a call of `tool` with `args` is marked as needing approval.
    pub(crate) fn marks(&self, tool: &str, args: &Value) -> bool {
        self.tools.contains(tool) || self.predicates.iter().any(|p| p(tool, args))
    }

    /// True when nothing is marked and no approver is set: calls skip the check.
    pub(crate) fn is_empty(&self) -> bool {
        self.tools.is_empty() && self.predicates.is_empty() && self.approver.is_none()
    }
}
