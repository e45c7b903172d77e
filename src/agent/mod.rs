//! The CodeAct loop: decisions in [`decide`], the async driver that does what they
//! say (and only the I/O) in `driver`.

pub(crate) mod absent_patterns;
pub(crate) mod answer_shape;
pub(crate) mod approval;
pub(crate) mod cell_news;
pub(crate) mod cells;
pub mod coach;
pub(crate) mod data_paths;
pub mod decide;
pub(crate) mod driver;
pub(crate) mod events;
pub(crate) mod extract;
pub(crate) mod feedback;
pub(crate) mod file_stubs;
pub(crate) mod host_tools;
pub(crate) mod js_fallback;
pub(crate) mod line_diff;
pub(crate) mod made_up_filters;
pub(crate) mod map_as_number;
pub(crate) mod outcome;
#[cfg(test)]
mod prompt_renderings;
pub(crate) mod resume;
pub(crate) mod script_notes;
pub(crate) mod seen;
pub(crate) mod snapshots;
pub mod spans;
pub(crate) mod team;
pub(crate) mod team_config;
#[cfg(test)]
pub(crate) mod test_errors;
pub(crate) mod two_word_names;
pub(crate) mod units;

pub use approval::PendingApproval;
pub use approval::{ApprovalDecision, ApprovalFuture, ApprovalReason, ApprovalRequest, Approver};
pub use cells::{CellLimits, CellState};
pub use coach::{Coach, PlainCoach, Rule, SmallModelCoach};
pub use codeact_rhai::RhaiPolicy;
pub use decide::{BareValues, Conversation, Decision, LoopConfig, Next, Progress};
pub use driver::{Agent, AgentBuilder, AgentError, Chat, RunItem, RunRequest, RunResult, TypedRun};
pub use events::{
    CoachDecision, Event, Listener, ResumedSession, ToolCallOutcome, Transcript, parse_transcript,
    read_transcript,
};
pub use extract::{Extraction, extract_code};
pub use feedback::cut_middle;
pub use outcome::Outcome;
pub use resume::{ResumeError, ResumePoint};
pub use snapshots::SnapshotDir;
pub use team::{Handover, Team, TeamBuilder, TeamOutcome, TeamRequest, TeamRun};
pub use team_config::{LoadedTeam, TeamConfigError, load_team, load_team_for_run};
