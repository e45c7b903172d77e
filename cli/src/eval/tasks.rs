//! The task file: one JSON object per line.

use std::collections::HashSet;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One task of an evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalTask {
    /// A short unique name, used in reports and transcript file names.
    pub id: String,
    /// A group for the report (computation, strings, tools…).
    #[serde(default)]
    pub category: String,
    /// What the model is asked.
    pub task: String,
    /// The names of the tools (from the tools manifest) this task gets. Default: none.
    #[serde(default)]
    pub tools: Vec<String>,
    /// The expected answer.
    pub answer: Value,
    /// How an answer is compared with it. Default: [`Match::Exact`].
    #[serde(default, rename = "match")]
    pub match_: Match,
    /// For [`Match::Number`]: the largest difference still right. Default: 1e-6.
    #[serde(default)]
    pub tolerance: Option<f64>,
}

/// How an answer is compared with the expected one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Match {
    /// Equal as JSON; numbers compare by value, and a string holding the expected
    /// number or the expected string (trimmed) counts too.
    #[default]
    Exact,
    /// A number (or a string holding one) within `tolerance` of the answer.
    Number,
    /// A string equal to the answer ignoring case and surrounding space.
    Text,
    /// An array holding the same items in any order.
    Unordered,
}

/// Reads a task file; an error names the line and what is wrong with it.
pub fn load_tasks(path: &Path) -> Result<Vec<EvalTask>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the task file '{}': {e}", path.display()))?;
    parse_tasks(&text).map_err(|e| format!("'{}': {e}", path.display()))
}

/// Parses the lines of a task file (blank lines are skipped); ids must be unique.
pub fn parse_tasks(text: &str) -> Result<Vec<EvalTask>, String> {
    let mut tasks = Vec::new();
    let mut ids = HashSet::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let task: EvalTask = serde_json::from_str(line)
            .map_err(|e| format!("line {}: not a task: {e}", index + 1))?;
        if task.id.trim().is_empty() || !ids.insert(task.id.clone()) {
            return Err(format!(
                "line {}: the id {:?} is empty or used twice",
                index + 1,
                task.id
            ));
        }
        tasks.push(task);
    }
    if tasks.is_empty() {
        return Err("holds no task".into());
    }
    Ok(tasks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_line_reads_with_its_defaults() {
        let tasks = parse_tasks(r#"{"id":"a","task":"2+2?","answer":4}"#).expect("parses");
        assert_eq!(tasks[0].match_, Match::Exact);
        assert!(tasks[0].tools.is_empty());
    }

    #[test]
    fn a_duplicate_id_or_an_unknown_field_names_its_line() {
        let twice = "{\"id\":\"a\",\"task\":\"t\",\"answer\":1}\n\n{\"id\":\"a\",\"task\":\"t\",\"answer\":1}";
        assert!(
            parse_tasks(twice)
                .expect_err("a duplicate id")
                .starts_with("line 3:")
        );
        let typo = r#"{"id":"a","task":"t","answer":1,"tols":["x"]}"#;
        assert!(
            parse_tasks(typo)
                .expect_err("an unknown field")
                .starts_with("line 1:")
        );
        assert_eq!(parse_tasks("\n").expect_err("no task"), "holds no task");
    }

    /// If this fails, the shipped development set no longer parses or has shrunk
    /// below the 30 tasks the evaluation promises.
    #[test]
    fn the_shipped_development_set_parses_and_holds_thirty_tasks_or_more() {
        let tasks = load_tasks(Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/eval/tasks.jsonl"
        )))
        .expect("the development set parses");
        assert!(tasks.len() >= 30, "{} tasks", tasks.len());
    }
}
