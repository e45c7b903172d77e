//! Rewrites of a failed script the feedback proposes, and running them when
//! the model sends the failed script again.

use std::collections::HashMap;

use minijinja::context;

use super::Conversation;
use crate::agent::feedback;
use crate::agent::line_diff::{self, LineChange};
use crate::agent::script_notes;

/// The most lines besides the proposed ones a script may have changed for
/// `notes/changed_beside_mend` to show them: past that, the script is a new
/// one, not the failed one mended.
pub(super) const CHANGES_BESIDE_MEND: usize = 3;

/// A rewrite of a failed script that the host's feedback proposed (a tool's
/// `ToolError` caught, a map's number taken, a JavaScript fallback moved into
/// its `catch`). At temperature 0 a small model answers the same feedback with
/// the same script: when the next reply is the failed script again, the host
/// runs the rewrite instead and says so, and goes on doing so while the rewrite
/// does not fail.
#[derive(Debug, Clone)]
pub(super) struct ProposedMend {
    /// The failed script, as it ran.
    pub(super) failed: String,
    /// The script to run in its place.
    pub(super) mended: String,
    /// The lines rewritten (1-based, inclusive), when the rewrite is of lines.
    pub(super) lines: Option<(usize, usize)>,
    /// Carried over from a step that ran as this mend and did not fail: kept
    /// only while the script keeps not failing.
    pub(super) carried: bool,
}

impl ProposedMend {
    /// `script` with its lines `first` to `last` (1-based, inclusive) written
    /// as `replacement`.
    pub(super) fn lines(
        script: &str,
        first: usize,
        last: usize,
        replacement: &str,
    ) -> ProposedMend {
        let lines: Vec<&str> = script.lines().collect();
        let before = lines.iter().take(first.saturating_sub(1));
        let after = lines.iter().skip(last);
        let mended: Vec<&str> = before
            .copied()
            .chain(replacement.lines())
            .chain(after.copied())
            .collect();
        ProposedMend {
            failed: script.to_string(),
            mended: mended.join("\n"),
            lines: Some((first, last)),
            carried: false,
        }
    }

    /// How many lines longer the rewrite is than the failed script (a
    /// `try:`/`except` around one line adds three).
    pub(super) fn grown(&self) -> isize {
        self.mended.lines().count() as isize - self.failed.lines().count() as isize
    }
}

/// `code` with the lines `mend` rewrote written as it proposed, when `code` is
/// the failed script with only its last line changed (how it ends, not what it
/// computes): the rewritten lines fail as they did. A change to any other line
/// is the model's own reckoning, shown against the mend instead
/// (`notes/changed_beside_mend`). Handed its script with its last line as
/// `final_result(result["temp_c"])` after the rewrite that caught the
/// `ToolError` had run, a small model took that last line into its own failed
/// script, without the catch, and its error came back until the step limit.
pub(super) fn mend_reapplied(mend: &ProposedMend, code: &str) -> Option<ProposedMend> {
    let (first, last) = mend.lines?;
    let failed: Vec<&str> = mend.failed.lines().map(str::trim).collect();
    let sent: Vec<&str> = code.lines().map(str::trim).collect();
    if failed.len() != sent.len() || first == 0 || last > failed.len() {
        return None;
    }
    let rewritten = first - 1..last;
    if failed[rewritten.clone()] != sent[rewritten.clone()]
        || failed[rewritten.clone()].iter().all(|line| line.is_empty())
    {
        return None;
    }
    let last_line = sent.iter().rposition(|line| !line.is_empty())?;
    let changed: Vec<usize> = (0..sent.len())
        .filter(|&index| failed[index] != sent[index])
        .collect();
    if changed != [last_line] || rewritten.contains(&last_line) {
        return None;
    }
    // The proposed lines: the rewrite's lines from `first`, as many as the
    // rewrite has more than the failed script, past `last`.
    let count = (last - first + 1) as isize + mend.grown();
    let replacement: Vec<&str> = mend
        .mended
        .lines()
        .skip(first - 1)
        .take(usize::try_from(count).ok()?)
        .collect();
    Some(ProposedMend::lines(
        code,
        first,
        last,
        &replacement.join("\n"),
    ))
}

impl Conversation {
    /// `code`, or the rewrite proposed for it when `code` is the failed script
    /// again (said in the next feedback, `notes/mend_applied`): the reply right
    /// after the feedback that proposed it, and the next ones while the rewrite
    /// runs without failing.
    pub(super) fn mended_if_repeated(
        &mut self,
        code: String,
        mend: Option<ProposedMend>,
    ) -> String {
        let Some(mend) = mend else {
            return code;
        };
        if mend.lines.is_some() && self.coaching.first_mend.is_none() {
            self.coaching.first_mend = Some(mend.clone());
        }
        if !script_notes::same_script(&code, &mend.failed) {
            if let Some(reapplied) = mend_reapplied(&mend, &code) {
                return self.run_as_mend(reapplied, true);
            }
            self.coaching.left_out_of_mend = self
                .left_out_of(&mend, &code)
                .map(|note| (note, mend.clone()));
            // Against this mend, else against the first of the chain: given the
            // line again for a script that had already dropped the `/ 3` of the
            // next, the model took it, and this mend alone showed no change.
            let first = self
                .coaching
                .first_mend
                .clone()
                .filter(|first| first.failed != mend.failed);
            let shown = self
                .changes_beside(&mend, &code)
                .map(|note| (note, mend))
                .or_else(|| {
                    let first = first?;
                    self.changes_beside(&first, &code).map(|note| (note, first))
                });
            if let Some((note, against)) = shown {
                self.coaching.changed_beside_mend = Some(note);
                self.coaching.applied_mend = Some(against);
            }
            return code;
        }
        self.run_as_mend(mend, false)
    }

    /// The script `mend` rewrote to, said in a note (`notes/mend_applied`;
    /// `kept_failed_lines` when the reply changed the failed script's last
    /// line) and remembered as the mend the step runs as.
    pub(super) fn run_as_mend(&mut self, mend: ProposedMend, kept_failed_lines: bool) -> String {
        let (first, last) = mend.lines.unzip();
        let note = self.prompts.render(
            "notes/mend_applied",
            context! { first => first, last => last, kept_failed_lines => kept_failed_lines },
        );
        self.pending_notes.push(note);
        let mended = mend.mended.clone();
        self.coaching.applied_mend = Some(mend);
        mended
    }

    /// When `code` took the lines `mend` proposed and changed up to
    /// [`CHANGES_BESIDE_MEND`] other lines of the failed script, the note that
    /// shows each change (`notes/changed_beside_mend`), the lines fenced. Given
    /// a `temp_c` line for its failing sum, a small model took it and also
    /// dropped the `/ 3` of the next line, then finished with the sum it
    /// observed.
    pub(super) fn changes_beside(&self, mend: &ProposedMend, code: &str) -> Option<String> {
        let (first, last) = mend.lines?;
        let grown = mend.grown();
        let last_rewritten = (last as isize + grown).max(first as isize) as usize;
        let numbered = |script: &str| -> Vec<(usize, String)> {
            script
                .lines()
                .enumerate()
                .map(|(index, line)| (index + 1, line.trim().to_string()))
                .filter(|(_, line)| !line.is_empty())
                .collect()
        };
        let proposed = numbered(&mend.mended);
        let sent = numbered(code);
        if proposed.len() != sent.len() {
            return None;
        }
        let mut changes = Vec::new();
        for ((at, was), (line, now)) in proposed.iter().zip(&sent) {
            if was == now {
                continue;
            }
            if (first..=last_rewritten).contains(at) {
                // The proposed line itself was not taken.
                return None;
            }
            changes.push((*line, was.clone(), now.clone()));
        }
        if changes.is_empty() || changes.len() > CHANGES_BESIDE_MEND {
            return None;
        }
        let limit = self.config.feedback_limit;
        let changes: Vec<_> = changes
            .iter()
            .map(|(line, was, now)| {
                context! {
                    line => line,
                    before => feedback::fenced(was, limit),
                    after => feedback::fenced(now, limit),
                }
            })
            .collect();
        Some(self.prompts.render(
            "notes/changed_beside_mend",
            context! { changes => changes, first => first, last => last },
        ))
    }

    /// When `code` took a line of the rewrite `mend` proposed (one the failed
    /// script did not have) and differs from that rewrite by up to
    /// [`CHANGES_BESIDE_MEND`] lines left out, changed or added, the note that
    /// shows them (`notes/left_out_of_mend`), the lines fenced. Handed its
    /// script with the fallback in `catch`, a small model took it but for the
    /// line that defined the fallback's weather, then sent that script again to
    /// its error budget.
    pub(super) fn left_out_of(&self, mend: &ProposedMend, code: &str) -> Option<String> {
        // Counted, not only looked for: the rewrite may move a line the
        // failed script had (the fallback out of `else` into `catch`).
        let counts = |script: &str| -> HashMap<String, usize> {
            let mut counts = HashMap::new();
            for line in script
                .lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
            {
                *counts.entry(line.to_string()).or_insert(0) += 1;
            }
            counts
        };
        let (failed, sent) = (counts(&mend.failed), counts(code));
        let took_a_line = counts(&mend.mended).into_iter().any(|(line, proposed)| {
            let before = failed.get(&line).copied().unwrap_or(0);
            proposed > before && sent.get(&line).copied().unwrap_or(0) > before
        });
        if !took_a_line {
            return None;
        }
        let changes = line_diff::line_changes(&mend.mended, code)?;
        if changes.is_empty() || changes.len() > CHANGES_BESIDE_MEND {
            return None;
        }
        let limit = self.config.feedback_limit;
        let last_line = code.lines().count();
        let changes: Vec<_> = changes
            .iter()
            .map(|change| match change {
                LineChange::Changed {
                    line,
                    before,
                    after,
                } => context! {
                    line => line,
                    before => feedback::fenced(before, limit),
                    after => feedback::fenced(after, limit),
                },
                LineChange::LeftOut { line, before } => context! {
                    line => (*line <= last_line).then_some(*line),
                    before => feedback::fenced(before, limit),
                    after => None::<String>,
                },
                LineChange::Added { line, after } => context! {
                    line => line,
                    before => None::<String>,
                    after => feedback::fenced(after, limit),
                },
            })
            .collect();
        let (first, last) = mend.lines.unzip();
        Some(self.prompts.render(
            "notes/left_out_of_mend",
            context! { changes => changes, first => first, last => last },
        ))
    }
}
