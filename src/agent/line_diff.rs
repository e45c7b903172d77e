//! The lines one script changed against another, found by the longest run of
//! lines the two share in order (blank lines and indentation not counted).
//!
//! Why: a small model handed a whole script to run (the JavaScript fallback
//! moved into `catch`) took it but for one line, the definition the fallback
//! read, and sent that broken script again to its error budget. Comparing line
//! by line at the same index, as a line mend can be, cannot see a line left
//! out: every line after it moves up.

/// Scripts longer than this many lines are not compared (the table is
/// quadratic in their lengths).
const MAX_LINES: usize = 400;

/// One difference between a script proposed and a script sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LineChange {
    /// Line `line` of the sent script stands where the proposed script had
    /// `before`.
    Changed {
        line: usize,
        before: String,
        after: String,
    },
    /// The proposed script's line `before`, left out just above line `line`
    /// of the sent script (one past its last line when left out at its end).
    LeftOut { line: usize, before: String },
    /// Line `line` of the sent script, which the proposed script did not
    /// have.
    Added { line: usize, after: String },
}

/// What `sent` changed against `proposed`, in the order of the sent script's
/// lines (1-based, counting its blank lines), each line trimmed. Empty when
/// the two have the same non-blank lines, and None when either is longer
/// than [`MAX_LINES`].
pub(crate) fn line_changes(proposed: &str, sent: &str) -> Option<Vec<LineChange>> {
    let proposed = numbered(proposed);
    let sent = numbered(sent);
    if proposed.len() > MAX_LINES || sent.len() > MAX_LINES {
        return None;
    }
    // shared[i][j]: the longest run shared by proposed[i..] and sent[j..].
    let mut shared = vec![vec![0usize; sent.len() + 1]; proposed.len() + 1];
    for i in (0..proposed.len()).rev() {
        for j in (0..sent.len()).rev() {
            shared[i][j] = if proposed[i].1 == sent[j].1 {
                shared[i + 1][j + 1] + 1
            } else {
                shared[i + 1][j].max(shared[i][j + 1])
            };
        }
    }
    let end_line = sent.last().map_or(1, |(line, _)| line + 1);
    let line_at = |j: usize| sent.get(j).map_or(end_line, |(line, _)| *line);
    let mut changes = Vec::new();
    let (mut i, mut j) = (0, 0);
    let mut left_out: Vec<&str> = Vec::new();
    let mut added: Vec<(usize, &str)> = Vec::new();
    let mut flush = |left_out: &mut Vec<&str>, added: &mut Vec<(usize, &str)>, at: usize| {
        let pairs = left_out.len().min(added.len());
        for (before, (line, after)) in left_out.iter().zip(added.iter()).take(pairs) {
            changes.push(LineChange::Changed {
                line: *line,
                before: before.to_string(),
                after: after.to_string(),
            });
        }
        for before in &left_out[pairs..] {
            changes.push(LineChange::LeftOut {
                line: at,
                before: before.to_string(),
            });
        }
        for (line, after) in &added[pairs..] {
            changes.push(LineChange::Added {
                line: *line,
                after: after.to_string(),
            });
        }
        left_out.clear();
        added.clear();
    };
    while i < proposed.len() || j < sent.len() {
        if i < proposed.len() && j < sent.len() && proposed[i].1 == sent[j].1 {
            flush(&mut left_out, &mut added, line_at(j));
            i += 1;
            j += 1;
        } else if j < sent.len() && (i == proposed.len() || shared[i][j + 1] >= shared[i + 1][j]) {
            added.push((sent[j].0, sent[j].1.as_str()));
            j += 1;
        } else {
            left_out.push(&proposed[i].1);
            i += 1;
        }
    }
    flush(&mut left_out, &mut added, line_at(j));
    Some(changes)
}

/// The non-blank lines of `script`, trimmed, with their 1-based numbers.
fn numbered(script: &str) -> Vec<(usize, String)> {
    script
        .lines()
        .enumerate()
        .map(|(index, line)| (index + 1, line.trim().to_string()))
        .filter(|(_, line)| !line.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROPOSED: &str = "try {\n  const w = tools.get_weather({city: \"Munich\"});\n  observation(w.temp_c);\n} catch (e) {\n  const berlin = tools.get_weather({city: \"Berlin\"});\n  observation(berlin.temp_c);\n}";

    #[test]
    fn a_line_left_out_is_named_with_the_line_it_stood_above() {
        let sent = "try {\n  const w = tools.get_weather({city: \"Munich\"});\n  observation(w.temp_c);\n} catch (e) {\n  observation(berlin.temp_c);\n}";
        assert_eq!(
            line_changes(PROPOSED, sent),
            Some(vec![LineChange::LeftOut {
                line: 5,
                before: "const berlin = tools.get_weather({city: \"Berlin\"});".to_string(),
            }])
        );
    }

    #[test]
    fn a_line_written_otherwise_is_a_change_and_a_new_line_is_added() {
        let sent = "try {\n  const w = tools.get_weather({city: \"Munich\"});\n  observation(w.temp_c);\n} catch (e) {\n  const berlin = tools.get_weather({city: \"Rome\"});\n  observation(berlin.temp_c);\n  console.log(berlin);\n}";
        assert_eq!(
            line_changes(PROPOSED, sent),
            Some(vec![
                LineChange::Changed {
                    line: 5,
                    before: "const berlin = tools.get_weather({city: \"Berlin\"});".to_string(),
                    after: "const berlin = tools.get_weather({city: \"Rome\"});".to_string(),
                },
                LineChange::Added {
                    line: 7,
                    after: "console.log(berlin);".to_string(),
                },
            ])
        );
    }

    #[test]
    fn indentation_and_blank_lines_are_no_change_and_a_line_left_out_at_the_end_points_past_it() {
        let sent = "try {\nconst w = tools.get_weather({city: \"Munich\"});\n\nobservation(w.temp_c);\n} catch (e) {\nconst berlin = tools.get_weather({city: \"Berlin\"});\nobservation(berlin.temp_c);";
        assert_eq!(
            line_changes(PROPOSED, sent),
            Some(vec![LineChange::LeftOut {
                line: 8,
                before: "}".to_string(),
            }])
        );
        assert_eq!(line_changes(PROPOSED, PROPOSED), Some(Vec::new()));
    }

    #[test]
    fn scripts_too_long_to_compare_give_none() {
        let long = "x = 1\n".repeat(MAX_LINES + 1);
        assert_eq!(line_changes(&long, "x = 1"), None);
    }
}
