//! Rebuilding a resumed run's session: the finished scripts run again with
//! their recorded tool results, so the session holds their variables again.

use tracing::Instrument;

use super::{Agent, AgentError};
use crate::agent::events::Event;
use crate::agent::resume::{HostTools, ResumePoint};
use crate::exec::session::ScriptSession;

impl Agent {
    /// Re-runs the finished scripts of `point` with their recorded tool results
    /// (their outputs are already in the conversation and are dropped), queues
    /// the recorded calls of the step that was cut short, and reports the
    /// resumption. What comes next is the conversation's to decide
    /// ([`Conversation::resume`](crate::agent::decide::Conversation::resume)).
    pub(super) async fn rebuild(
        &self,
        point: &ResumePoint,
        session: &mut ScriptSession,
        tools: &HostTools,
    ) -> Result<(), AgentError> {
        for script in &point.finished_scripts {
            tools.set_step(script.step);
            tools.serve_recorded(script.calls.clone(), true);
            let span = crate::agent::spans::replay(&self.name, script.step);
            let _parent = tools.parent_span(span.clone());
            let run = session.run(script.code.as_str()).instrument(span).await?;
            tracing::debug!(step = script.step, output = %run.output, "replayed a script");
        }
        if point.pending_approval.is_some() {
            tools.serve_recorded_strictly(point.pending_calls.clone());
        } else {
            tools.serve_recorded(point.pending_calls.clone(), false);
        }
        self.emit(|| Event::Resumed {
            steps: point.steps,
            replayed_scripts: point.finished_scripts.len(),
            replayed_tool_calls: tools.replayed(),
        });
        Ok(())
    }
}
