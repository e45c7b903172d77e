//! Rebuilding a resumed run's session: restored from the snapshot kept after
//! the transcript's last finished script, when a snapshot directory holds one
//! the runtime accepts; otherwise the finished scripts run again with their
//! recorded tool results, so the session holds their variables again.

use std::sync::Arc;

use tracing::Instrument;

use super::{Agent, AgentError};
use crate::agent::events::{Event, ResumedSession};
use crate::agent::host_tools::HostTools;
use crate::agent::resume::ResumePoint;
use crate::agent::snapshots::{Fallback, SnapshotDir, off_the_reactor};
use crate::exec::session::ScriptSession;

impl Agent {
    /// The session `point`'s run goes on in: restored from `snapshots` when one
    /// fits (see [`restored`](Self::restored)), else a fresh one in which the
    /// finished scripts run again with their recorded tool results (their
    /// outputs are already in the conversation and are dropped). Then queues the
    /// recorded calls of the step that was cut short and reports the resumption,
    /// saying which way the session was rebuilt. What comes next is the
    /// conversation's to decide
    /// ([`Conversation::resume`](crate::agent::decide::Conversation::resume)).
    pub(super) async fn rebuild(
        &self,
        point: &ResumePoint,
        tools: &Arc<HostTools>,
        snapshots: Option<&SnapshotDir>,
    ) -> Result<ScriptSession, AgentError> {
        let (session, how) = match self.restored(point, tools, snapshots) {
            Ok((session, step, file)) => {
                let calls = point.finished_scripts.iter().map(|s| s.calls.len()).sum();
                tools.count_restored(calls);
                (session, ResumedSession::Snapshot { step, file })
            }
            Err(fallback) => {
                if let Some(why) = &fallback {
                    tracing::warn!("resume replays the scripts: {why}");
                }
                let session = self.replayed(point, tools).await?;
                (session, ResumedSession::Replay { fallback })
            }
        };
        if point.pending_approval.is_some() {
            tools.serve_recorded_strictly(point.pending_calls.clone());
        } else {
            tools.serve_recorded(point.pending_calls.clone(), false);
        }
        self.emit(|| Event::Resumed {
            steps: point.steps,
            replayed_scripts: match how {
                ResumedSession::Snapshot { .. } => 0,
                _ => point.finished_scripts.len(),
            },
            replayed_tool_calls: tools.replayed(),
            session: how,
        });
        Ok(session)
    }

    /// The session restored from the snapshot of the run's last finished step,
    /// with that step and the file's name; otherwise why not, or `None` when
    /// there was nothing to look for (no snapshot directory, or no script
    /// finished).
    fn restored(
        &self,
        point: &ResumePoint,
        tools: &Arc<HostTools>,
        snapshots: Option<&SnapshotDir>,
    ) -> Result<(ScriptSession, usize, String), Option<Fallback>> {
        let (Some(dir), Some(step)) = (snapshots, point.last_finished_step()) else {
            return Err(None);
        };
        let Some(run_id) = &point.snapshot_run_id else {
            return Err(Some(
                "the transcript records no snapshot kept for this run".into(),
            ));
        };
        let (file, snapshot) = dir.find(run_id, step).map_err(Some)?;
        let session =
            off_the_reactor(|| ScriptSession::restore(&*self.runtime, &snapshot, tools.clone()))
                .map_err(|e| Some(format!("the snapshot {file} was not restored: {e}")))?;
        Ok((session, step, file))
    }

    /// A fresh session in which `point`'s finished scripts ran again, each with
    /// its recorded tool results only.
    async fn replayed(
        &self,
        point: &ResumePoint,
        tools: &Arc<HostTools>,
    ) -> Result<ScriptSession, AgentError> {
        let mut session = ScriptSession::start_with_files(
            &*self.runtime,
            tools.clone(),
            self.files.as_ref().map(|area| area.view()).as_ref(),
        )?;
        for script in &point.finished_scripts {
            tools.set_step(script.step);
            tools.serve_recorded(script.calls.clone(), true);
            let span = crate::agent::spans::replay(&self.name, script.step);
            let _parent = tools.parent_span(span.clone());
            let run = session.run(script.code.as_str()).instrument(span).await?;
            tracing::debug!(step = script.step, output = %run.output, "replayed a script");
        }
        Ok(session)
    }
}
