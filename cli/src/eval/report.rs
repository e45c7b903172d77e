//! `EVAL.md`: every run record of a folder, judged against the task file.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::judge::is_right;
use super::record::{EvalRecord, TaskRecord};
use super::tasks::EvalTask;

/// The report, in Markdown: a summary row per run (right answers overall and per
/// category, mean steps, tokens and wall time per task), then each task's right
/// answers per host and runtime, then what every wrong run ended with.
/// `source` says where the records came from, for the header.
pub fn render_report(tasks: &[EvalTask], records: &[EvalRecord], source: &str) -> String {
    let mut out = String::new();
    let categories = categories(tasks);
    let by_id: BTreeMap<&str, &EvalTask> = tasks.iter().map(|t| (t.id.as_str(), t)).collect();
    let _ = writeln!(
        out,
        "# Evaluation\n\nWritten by `codeact eval report` from {} run record(s) in {source}, judged against {} task(s); do not edit by hand. Each row is one run of every task; a task missing from a run counts as wrong.\n",
        records.len(),
        tasks.len()
    );
    let mut header = "| label | host | runtime | run | date | right |".to_string();
    let mut rule = "|---|---|---|---|---|---|".to_string();
    for category in &categories {
        let _ = write!(header, " {category} |");
        rule.push_str("---|");
    }
    header.push_str(" mean steps | mean tokens | mean wall s |");
    rule.push_str("---|---|---|");
    let _ = writeln!(out, "## Summary\n\n{header}\n{rule}");
    for record in records {
        let right = |task: &EvalTask| {
            record
                .tasks
                .iter()
                .find(|r| r.id == task.id)
                .is_some_and(|r| is_right(task, r.answer.as_ref()))
        };
        let total = tasks.iter().filter(|t| right(t)).count();
        let _ = write!(
            out,
            "| {} | {} | {} | {} | {} | {}/{} ({}%) |",
            record.label,
            record.runner,
            record.runtime,
            record.run,
            record.started.get(..10).unwrap_or(&record.started),
            total,
            tasks.len(),
            percent(total, tasks.len())
        );
        for category in &categories {
            let of: Vec<&EvalTask> = tasks.iter().filter(|t| &t.category == category).collect();
            let got = of.iter().filter(|t| right(t)).count();
            let _ = write!(out, " {got}/{} |", of.len());
        }
        let ran = &record.tasks;
        let _ = writeln!(
            out,
            " {:.1} | {:.0} | {:.1} |",
            mean(ran, |t| t.steps as f64),
            mean(ran, |t| (t.input_tokens + t.output_tokens) as f64),
            mean(ran, |t| t.wall_ms as f64 / 1000.0),
        );
    }
    let groups = groups(records);
    let _ = writeln!(
        out,
        "\n## Per task\n\nRight answers over the runs of each label, host and runtime.\n"
    );
    let mut header = "| task |".to_string();
    let mut rule = "|---|".to_string();
    for (label, runner, runtime) in groups.keys() {
        let _ = write!(header, " {label} {runner} {runtime} |");
        rule.push_str("---|");
    }
    let _ = writeln!(out, "{header}\n{rule}");
    for task in tasks {
        let _ = write!(out, "| {} |", task.id);
        for runs in groups.values() {
            let got = runs
                .iter()
                .filter(|record| {
                    record
                        .tasks
                        .iter()
                        .any(|r| r.id == task.id && is_right(task, r.answer.as_ref()))
                })
                .count();
            let _ = write!(out, " {got}/{} |", runs.len());
        }
        out.push('\n');
    }
    let _ = writeln!(out, "\n## Wrong runs\n");
    for record in records {
        let wrong: Vec<&TaskRecord> = record
            .tasks
            .iter()
            .filter(|r| {
                by_id
                    .get(r.id.as_str())
                    .is_some_and(|task| !is_right(task, r.answer.as_ref()))
            })
            .collect();
        if wrong.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "- {} {} {} run {}:",
            record.label, record.runner, record.runtime, record.run
        );
        for task in wrong {
            let answer = task
                .answer
                .as_ref()
                .map(|a| format!(", answered `{}`", one_line(&a.to_string(), 60)))
                .unwrap_or_default();
            let error = task
                .error
                .as_deref()
                .map(|e| format!(": {}", one_line(e, 100)))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  - {}: {} after {} step(s){answer}{error}",
                task.id, task.outcome, task.steps
            );
        }
    }
    out
}

type GroupKey = (String, String, String);

fn groups(records: &[EvalRecord]) -> BTreeMap<GroupKey, Vec<&EvalRecord>> {
    let mut groups: BTreeMap<GroupKey, Vec<&EvalRecord>> = BTreeMap::new();
    for record in records {
        groups
            .entry((
                record.label.clone(),
                record.runner.clone(),
                record.runtime.clone(),
            ))
            .or_default()
            .push(record);
    }
    groups
}

/// The categories in the order they first appear in the task file.
fn categories(tasks: &[EvalTask]) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for task in tasks {
        if !seen.contains(&task.category) {
            seen.push(task.category.clone());
        }
    }
    seen
}

fn percent(part: usize, whole: usize) -> usize {
    (part * 100).checked_div(whole).unwrap_or(0)
}

fn mean(tasks: &[TaskRecord], value: impl Fn(&TaskRecord) -> f64) -> f64 {
    if tasks.is_empty() {
        return 0.0;
    }
    tasks.iter().map(value).sum::<f64>() / tasks.len() as f64
}

/// `text` on one line, Markdown-quiet (no pipes or backticks), cut to `max` chars.
fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| match c {
            '\n' | '\r' | '\t' => ' ',
            '|' | '`' => '\'',
            c => c,
        })
        .collect();
    codeact_runtime::text::shorten(&flat, max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::tasks::parse_tasks;
    use serde_json::json;

    fn record(run: u32, answers: &[(&str, serde_json::Value)]) -> EvalRecord {
        EvalRecord {
            label: "after".into(),
            runner: "codeact".into(),
            runtime: "js".into(),
            model: "m".into(),
            coach: None,
            run,
            started: "2026-12-01T10:00:00Z".into(),
            tasks: answers
                .iter()
                .map(|(id, answer)| TaskRecord {
                    id: (*id).into(),
                    outcome: "final_result".into(),
                    answer: Some(answer.clone()),
                    steps: 2,
                    input_tokens: 100,
                    output_tokens: 20,
                    wall_ms: 3_000,
                    error: None,
                })
                .collect(),
        }
    }

    #[test]
    fn the_report_judges_each_run_and_counts_missing_tasks_as_wrong() {
        let tasks = parse_tasks(
            "{\"id\":\"a\",\"category\":\"c\",\"task\":\"t\",\"answer\":1}\n{\"id\":\"b\",\"category\":\"d\",\"task\":\"t\",\"answer\":\"x\",\"match\":\"text\"}",
        )
        .expect("tasks");
        let records = [
            record(1, &[("a", json!(1)), ("b", json!("X"))]),
            record(2, &[("a", json!(2))]),
        ];
        let report = render_report(&tasks, &records, "`r`");
        assert!(report.contains("| after | codeact | js | 1 | 2026-12-01 | 2/2 (100%) | 1/1 | 1/1 | 2.0 | 120 | 3.0 |"), "{report}");
        assert!(
            report.contains("| after | codeact | js | 2 | 2026-12-01 | 0/2 (0%) | 0/1 | 0/1 |"),
            "{report}"
        );
        assert!(report.contains("| a | 1/2 |"), "{report}");
        assert!(
            report.contains("  - a: final_result after 2 step(s), answered `2`"),
            "{report}"
        );
    }
}
