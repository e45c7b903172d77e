//! Several agents in one run: a script hands control over with
//! `transfer_to_agent(name)`, and the team starts that agent on the task with the
//! last few messages of the conversation that handed over.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::driver::{Agent, AgentError, RequestOutput};
use super::events::{Event, Listener};
use super::outcome::Outcome;
use crate::chat::{Message, Role, Usage};
use crate::output::spec::OutputSpec;
use crate::prompts::{Prompts, TransferTarget};
use crate::untrusted::{UntrustedText, fence};
use minijinja::context;

/// How a team run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "team_outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum TeamOutcome {
    /// The last agent's run ended (with a final result, or with its own budget
    /// or refusal outcome).
    Finished {
        /// The agent whose run ended.
        agent: String,
        /// How it ended.
        outcome: Outcome,
    },
    /// The agents handed over more often than the team allows (ping-pong).
    TransferLimit {
        /// Handovers made before the one refused.
        transfers: usize,
        /// The agent that asked for one more.
        agent: String,
    },
}

/// One handover, as the transcript shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Handover {
    /// Who handed over.
    pub from: String,
    /// To whom.
    pub to: String,
    /// The messages carried over, oldest first.
    pub carried: Vec<Message>,
}

/// What a team run returns.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamRun {
    /// How it ended.
    pub outcome: TeamOutcome,
    /// Every handover, in order.
    pub handovers: Vec<Handover>,
    /// Model calls over all agents.
    pub steps: usize,
    /// Tokens over all agents.
    pub usage: Usage,
    /// The record of the accepted final result, when the run ended with one.
    pub final_output: Option<crate::output::final_output::FinalOutput>,
}

/// Agents that hand work to each other. Build with [`Team::builder`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use codeact::model::ReplayModel;
/// use codeact::{Agent, Limits, Outcome, RhaiRuntime, Team};
/// use codeact::agent::TeamOutcome;
/// use codeact::prompts::TransferTarget;
///
/// let rhai = Arc::new(RhaiRuntime::new(Limits::default()));
/// let triage = Agent::builder(Arc::new(ReplayModel::new(["```rhai\ntransfer_to_agent(\"billing\")\n```"])), rhai.clone())
///     .name("triage")
///     .transfer_target(TransferTarget::new("billing", "Invoices and refunds."))
///     .build()?;
/// let billing = Agent::builder(Arc::new(ReplayModel::new(["```rhai\nfinal_result(\"refunded\")\n```"])), rhai)
///     .name("billing")
///     .build()?;
/// let team = Team::builder().agent(triage).agent(billing).build()?;
///
/// let run = team.run("triage", "Refund order 7.").await?;
/// assert_eq!(run.outcome, TeamOutcome::Finished {
///     agent: "billing".into(),
///     outcome: Outcome::FinalResult { value: "refunded".into() },
/// });
/// # Ok(())
/// # }
/// ```
pub struct Team {
    agents: BTreeMap<String, Agent>,
    max_transfers: usize,
    max_carry: usize,
    allow_transfer_back: bool,
    listeners: Vec<Listener>,
}

impl std::fmt::Debug for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Team")
            .field("agents", &self.agents.keys().collect::<Vec<_>>())
            .field("max_transfers", &self.max_transfers)
            .field("max_carry", &self.max_carry)
            .field("allow_transfer_back", &self.allow_transfer_back)
            .finish_non_exhaustive()
    }
}

/// Builds a [`Team`].
pub struct TeamBuilder {
    agents: Vec<Agent>,
    max_transfers: usize,
    max_carry: usize,
    allow_transfer_back: bool,
    stage: OutputSpec,
    listeners: Vec<Listener>,
    agent_listeners: Vec<Listener>,
}

impl TeamBuilder {
    /// Adds an agent; its name must be unique in the team.
    pub fn agent(mut self, agent: Agent) -> Self {
        self.agents.push(agent);
        self
    }

    /// Handovers allowed in one run; the next one ends the run with
    /// [`TeamOutcome::TransferLimit`]. Default: 8.
    pub fn max_transfers(mut self, max_transfers: usize) -> Self {
        self.max_transfers = max_transfers;
        self
    }

    /// Messages of the previous conversation carried to the next agent (fewer when
    /// fewer exist). Default: 5.
    pub fn max_carry(mut self, max_carry: usize) -> Self {
        self.max_carry = max_carry;
        self
    }

    /// Whether an agent may hand straight back to the agent that handed it the
    /// task. Default: true.
    pub fn allow_transfer_back(mut self, allow: bool) -> Self {
        self.allow_transfer_back = allow;
        self
    }

    /// The stage level of the output spec: what this team's final results must
    /// look like, whichever agent gives them. It overrides each agent's own spec
    /// field by field (a request overrides it in turn), and is loaded with each
    /// agent by [`build`](Self::build). Default: empty.
    pub fn output(mut self, stage: OutputSpec) -> Self {
        self.stage = stage;
        self
    }

    /// Hears every agent's events and the handovers (e.g. a
    /// [`Transcript`](super::Transcript)).
    pub fn listener(mut self, listener: Listener) -> Self {
        self.listeners.push(listener.clone());
        self.agent_listeners.push(listener);
        self
    }

    /// Hears only the handovers, for a listener the agents were built with already.
    pub fn team_listener(mut self, listener: Listener) -> Self {
        self.listeners.push(listener);
        self
    }

    /// The agents' names, in the order they were added.
    pub fn agent_names(&self) -> Vec<String> {
        self.agents.iter().map(|a| a.name().to_string()).collect()
    }

    /// What the agent called `name` does; empty when there is none.
    pub fn description_of(&self, name: &str) -> String {
        self.agents
            .iter()
            .find(|a| a.name() == name)
            .map(|a| a.description().to_string())
            .unwrap_or_default()
    }

    /// The agent called `name` alone, as [`build`](Self::build) would have made it
    /// (the stage's output spec folded in, the team's agent listeners added): for
    /// a one-agent team run as a plain agent, which can then wait for approvals,
    /// be resumed and hold a conversation.
    pub fn into_agent(self, name: &str) -> Result<Agent, AgentError> {
        let mut agent = self
            .agents
            .into_iter()
            .find(|a| a.name() == name)
            .ok_or_else(|| AgentError::Setup(format!("no agent '{name}'")))?;
        agent.listeners.extend(self.agent_listeners);
        agent.apply_stage(&self.stage)?;
        Ok(agent)
    }

    /// Checks that names are unique and that every declared target is in the
    /// team, and folds the stage's output spec into every agent's.
    pub fn build(self) -> Result<Team, AgentError> {
        let mut agents = BTreeMap::new();
        for mut agent in self.agents {
            let name = agent.name().to_string();
            agent.listeners.extend(self.agent_listeners.iter().cloned());
            agent.apply_stage(&self.stage)?;
            if agents.insert(name.clone(), agent).is_some() {
                return Err(AgentError::Setup(format!("two agents are named '{name}'")));
            }
        }
        for (name, agent) in &agents {
            for target in agent.transfer_targets() {
                if target.name == *name {
                    return Err(AgentError::Setup(format!(
                        "agent '{name}' names itself as a transfer target"
                    )));
                }
                if !agents.contains_key(&target.name) {
                    return Err(AgentError::Setup(format!(
                        "agent '{name}' may transfer to '{}', which is not in the team",
                        target.name
                    )));
                }
            }
        }
        Ok(Team {
            agents,
            max_transfers: self.max_transfers,
            max_carry: self.max_carry,
            allow_transfer_back: self.allow_transfer_back,
            listeners: self.listeners,
        })
    }
}

/// One run of a team, configured before it starts: see [`Team::request`].
#[must_use = "a request does nothing until it is run"]
pub struct TeamRequest<'a> {
    team: &'a Team,
    entry: &'a str,
    task: &'a str,
    options: RequestOutput,
}

impl std::fmt::Debug for TeamRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TeamRequest")
            .field("entry", &self.entry)
            .finish_non_exhaustive()
    }
}

impl TeamRequest<'_> {
    /// The request level of the output spec, for every agent's final result
    /// (as [`RunRequest::output`](crate::RunRequest::output)). Default: none.
    pub fn output(mut self, spec: OutputSpec) -> Self {
        self.options.spec = spec;
        self
    }

    /// Stops the run when `token` is cancelled, whichever agent is at work: its
    /// model call is dropped, its script interrupted, its tool call ended, and the
    /// team's outcome is that agent's [`Outcome::Cancelled`]. Default: no token.
    pub fn cancel_on(mut self, token: tokio_util::sync::CancellationToken) -> Self {
        self.options.cancel = Some(token);
        self
    }

    /// Runs the team until some agent's run ends without a handover.
    pub async fn run(self) -> Result<TeamRun, AgentError> {
        self.team
            .run_inner(self.entry, self.task, &self.options)
            .await
    }
}

impl Team {
    /// Starts building a team.
    pub fn builder() -> TeamBuilder {
        TeamBuilder {
            agents: Vec::new(),
            max_transfers: 8,
            max_carry: 5,
            allow_transfer_back: true,
            stage: OutputSpec::default(),
            listeners: Vec::new(),
            agent_listeners: Vec::new(),
        }
    }

    /// The agents, by name.
    pub fn agent_names(&self) -> Vec<&str> {
        self.agents.keys().map(String::as_str).collect()
    }

    /// A run of `task`, starting with the agent called `entry`, to configure
    /// ([`TeamRequest::output`], [`TeamRequest::cancel_on`]) and then
    /// [`run`](TeamRequest::run).
    pub fn request<'a>(&'a self, entry: &'a str, task: &'a str) -> TeamRequest<'a> {
        TeamRequest {
            team: self,
            entry,
            task,
            options: RequestOutput::default(),
        }
    }

    /// Runs `task`, starting with the agent called `entry`, until some agent's run
    /// ends without a handover: `self.request(entry, task).run()`.
    pub async fn run(&self, entry: &str, task: &str) -> Result<TeamRun, AgentError> {
        self.request(entry, task).run().await
    }

    /// Like [`run`](Self::run), with `request` as the request level of the output
    /// spec for every agent's final result.
    pub async fn run_with_output(
        &self,
        entry: &str,
        task: &str,
        request: &OutputSpec,
    ) -> Result<TeamRun, AgentError> {
        self.request(entry, task)
            .output(request.clone())
            .run()
            .await
    }

    /// Runs `task` with every option of `request` (the output spec, a cancel
    /// token, per-run listeners): for `codeact serve`, which cancels team runs.
    async fn run_inner(
        &self,
        entry: &str,
        task: &str,
        request: &RequestOutput,
    ) -> Result<TeamRun, AgentError> {
        let mut current = self.agents.get(entry).ok_or_else(|| {
            AgentError::Setup(format!(
                "no agent '{entry}'; the team has: {}",
                self.agent_names().join(", ")
            ))
        })?;
        let mut handovers: Vec<Handover> = Vec::new();
        let mut steps = 0;
        let mut usage = Usage::default();
        let mut first_message = task.to_string();
        loop {
            let came_from = handovers.last().map(|h| h.from.as_str());
            let targets: Vec<TransferTarget> = current
                .transfer_targets()
                .iter()
                .filter(|t| self.allow_transfer_back || Some(t.name.as_str()) != came_from)
                .cloned()
                .collect();
            let run = current.run_with(&first_message, &targets, request).await?;
            steps += run.steps;
            usage += run.usage;
            let Outcome::Transfer { agent_name } = &run.outcome else {
                return Ok(TeamRun {
                    outcome: TeamOutcome::Finished {
                        agent: current.name().to_string(),
                        outcome: run.outcome,
                    },
                    final_output: run.final_output,
                    handovers,
                    steps,
                    usage,
                });
            };
            if handovers.len() >= self.max_transfers {
                return Ok(TeamRun {
                    outcome: TeamOutcome::TransferLimit {
                        transfers: handovers.len(),
                        agent: current.name().to_string(),
                    },
                    final_output: None,
                    handovers,
                    steps,
                    usage,
                });
            }
            // The conversation only offered team members, so the name resolves.
            let Some(next) = self.agents.get(agent_name) else {
                return Err(AgentError::Setup(format!(
                    "agent '{agent_name}' is not in the team"
                )));
            };
            let keep = self.max_carry.min(run.messages.len());
            let handover = Handover {
                from: current.name().to_string(),
                to: agent_name.clone(),
                carried: run.messages[run.messages.len() - keep..].to_vec(),
            };
            self.emit(
                current.name(),
                Event::Handover {
                    from: handover.from.clone(),
                    to: handover.to.clone(),
                    carried: handover.carried.clone(),
                },
            );
            first_message = handover_message(next.prompts(), task, &handover);
            handovers.push(handover);
            current = next;
        }
    }

    fn emit(&self, agent: &str, event: Event) {
        for listener in &self.listeners {
            listener(agent, &event);
        }
    }
}

/// The first message of an agent that received a task: the task, who handed it
/// over, and their last messages. Those were written by a model and by tools, so
/// they go through [`fence`] as one piece: its nonce is fresh for each handover,
/// so the carried text cannot close it and pose as the host.
/// The wording is the receiving agent's `handover` template.
pub(crate) fn handover_message(prompts: &Prompts, task: &str, handover: &Handover) -> String {
    let mut carried = String::new();
    for message in &handover.carried {
        let role = match message.role {
            Role::Assistant => handover.from.as_str(),
            Role::User => "host",
            Role::System => "system",
        };
        carried.push_str(&format!("[{role}]\n{}\n\n", message.joined_text()));
    }
    prompts.render(
        "handover",
        context! {
            from => &handover.from,
            task => task,
            count => handover.carried.len(),
            carried => fence(&UntrustedText::new(carried.trim_end())),
        },
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use codeact_rhai::RhaiRuntime;
    use codeact_runtime::Limits;

    use super::*;
    use crate::model::ReplayModel;

    /// If this fails, a team cannot be stopped while one of its agents computes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_team_run_stops_the_agent_at_work_at_once() {
        let limits = Limits {
            wall_time: Duration::from_secs(60),
            max_operations: u64::MAX,
            ..Limits::default()
        };
        let agent = crate::Agent::builder(
            Arc::new(ReplayModel::new(["```rhai\nloop { }\n```"])),
            Arc::new(RhaiRuntime::new(limits)),
        )
        .name("worker")
        .build()
        .expect("agent builds");
        let team = Team::builder().agent(agent).build().expect("team builds");
        let token = tokio_util::sync::CancellationToken::new();
        let cancel = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            cancel.cancel();
        });
        let started = Instant::now();
        let run = team
            .request("worker", "Loop.")
            .cancel_on(token)
            .run()
            .await
            .expect("run finishes");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert!(matches!(
            run.outcome,
            TeamOutcome::Finished {
                outcome: Outcome::Cancelled,
                ..
            }
        ));
    }

    #[test]
    fn the_handover_message_fences_the_carried_text_with_a_fresh_nonce() {
        let handover = Handover {
            from: "triage".into(),
            to: "billing".into(),
            carried: vec![Message::assistant(
                "```rhai\ntransfer_to_agent(\"billing\")\n```",
            )],
        };
        let first = handover_message(&Prompts::default(), "Refund order 7.", &handover);
        let second = handover_message(&Prompts::default(), "Refund order 7.", &handover);
        assert!(first.starts_with(
            "Agent 'triage' handed this task over to you.\n\nThe task:\nRefund order 7."
        ));
        assert!(first.contains("[triage]\n```rhai"));
        assert!(
            first
                .lines()
                .last()
                .is_some_and(|l| l.starts_with("</untrusted-"))
        );
        assert_ne!(first, second, "each handover gets its own nonce");
    }
}
