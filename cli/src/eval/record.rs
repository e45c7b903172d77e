//! What one run of an evaluation leaves behind: one JSON file per host, runtime and
//! run, written again after every task so a stopped evaluation keeps what it did.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One run of every task on one runtime of one host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalRecord {
    /// What this run measures, e.g. `before` or `after` a change.
    pub label: String,
    /// The host: `codeact`, or `smolagents` for the baseline.
    pub runner: String,
    /// The runtime the model's scripts ran in (`python` for smolagents).
    pub runtime: String,
    /// The model, as the runner named it.
    pub model: String,
    /// The coach that advised codeact's loop (`plain`, `small-model`); none in
    /// records from before coaches were named, and for other runners.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coach: Option<String>,
    /// Which run of this label, runner and runtime, from 1.
    pub run: u32,
    /// When the run started, as an RFC 3339 timestamp.
    pub started: String,
    /// One entry per task, in the task file's order.
    pub tasks: Vec<TaskRecord>,
}

/// How one task went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The task's id.
    pub id: String,
    /// How the run ended: `final_result`, `step_limit`, `error_budget`, … or
    /// `host_error` when the host itself failed.
    pub outcome: String,
    /// The final result, when there was one.
    pub answer: Option<Value>,
    /// Model calls made.
    pub steps: usize,
    /// Prompt tokens over the run.
    pub input_tokens: u64,
    /// Completion tokens over the run.
    pub output_tokens: u64,
    /// Wall time of the whole run, in milliseconds.
    pub wall_ms: u64,
    /// The host's error, or the last error of an exhausted budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl EvalRecord {
    /// The record's file in `folder`: one name per label, runner, runtime and run.
    pub fn path_in(&self, folder: &Path) -> PathBuf {
        folder.join(format!(
            "{}__{}__{}__run{}.json",
            file_safe(&self.label),
            file_safe(&self.runner),
            file_safe(&self.runtime),
            self.run
        ))
    }

    /// Writes the record to its file in `folder`.
    pub fn save(&self, folder: &Path) -> Result<(), String> {
        let path = self.path_in(folder);
        let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        std::fs::write(&path, text).map_err(|e| format!("cannot write '{}': {e}", path.display()))
    }
}

/// Every record in `folder` (files ending in `.json`), in file-name order.
pub fn load_records(folder: &Path) -> Result<Vec<EvalRecord>, String> {
    let entries = std::fs::read_dir(folder)
        .map_err(|e| format!("cannot read the results folder '{}': {e}", folder.display()))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read '{}': {e}", path.display()))?;
            serde_json::from_str(&text)
                .map_err(|e| format!("'{}' is not a run record: {e}", path.display()))
        })
        .collect()
}

/// The next run number for this label, runner and runtime among `records`.
pub fn next_run(records: &[EvalRecord], label: &str, runner: &str, runtime: &str) -> u32 {
    records
        .iter()
        .filter(|r| r.label == label && r.runner == runner && r.runtime == runtime)
        .map(|r| r.run)
        .max()
        .unwrap_or(0)
        + 1
}

/// `name` with everything but letters, digits, `-` and `.` made `_`, for file names.
pub fn file_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_with_a_colon_makes_a_safe_file_name() {
        let record = EvalRecord {
            label: "after".into(),
            runner: "codeact".into(),
            runtime: "wasm:python".into(),
            model: "openai:local".into(),
            coach: None,
            run: 2,
            started: String::new(),
            tasks: Vec::new(),
        };
        assert_eq!(
            record.path_in(Path::new("r")),
            Path::new("r/after__codeact__wasm_python__run2.json")
        );
        assert_eq!(next_run(&[record], "after", "codeact", "wasm:python"), 3);
    }
}
