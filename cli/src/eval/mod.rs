//! `codeact eval`: how often a real model solves a set of tasks with this host,
//! per runtime, next to another host (smolagents) run on the same tasks.
//!
//! A task file is JSON Lines, one [`EvalTask`] per line; each run of each runtime is
//! written as one [`RunRecord`] file; the report reads every record of a folder and
//! judges the answers against the task file, so records from another host (see
//! `cli/eval/smolagents_eval.py`) are judged by the same rules.

pub mod judge;
pub mod record;
pub mod report;
pub mod tasks;

pub use judge::is_right;
pub use record::{RunRecord, TaskRecord};
pub use report::render_report;
pub use tasks::{EvalTask, Match, load_tasks};
