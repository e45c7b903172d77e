//! What the rest of the agent needs to know of cells without their machinery
//! ([`super::cells`]): the names of the cell functions, and what changed in a
//! cell that no script has seen.

use serde::Serialize;

/// `start_cell(code)`: starts a cell running `code`, returns its id.
pub const START_CELL_TOOL: &str = "start_cell";
/// `poll_cell(id)`: a cell's state, new progress and, once ended, its result.
pub const POLL_CELL_TOOL: &str = "poll_cell";
/// `wait_cell(id, seconds)`: waits for a cell to end, then answers as `poll_cell`.
pub const WAIT_CELL_TOOL: &str = "wait_cell";
/// `cancel_cell(id)`: stops a cell.
pub const CANCEL_CELL_TOOL: &str = "cancel_cell";
/// `notify(message)`: inside a cell, records progress for the next poll.
pub const NOTIFY_TOOL: &str = "notify";

/// What changed in a cell that no script has seen: it ended, or it sent
/// progress; for the note after a step ([`Cells::news`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct CellNews {
    /// The cell's id.
    pub id: String,
    /// `running`, `done`, `failed` or `cancelled`.
    pub state: &'static str,
    /// Progress messages sent since the model last heard of the cell.
    pub progress: usize,
}
