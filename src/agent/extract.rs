//! Finding the script in a model's reply: the first fenced block whose tag the
//! runtime accepts, or an untagged one.

/// What a reply holds, as far as the loop cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Extraction {
    /// A block to run. `closed` is false when the reply ended inside it.
    Code {
        /// The block's text, without the fences.
        code: String,
        /// Whether the closing fence was there.
        closed: bool,
    },
    /// Only blocks for other languages, e.g. ```python in a Rhai session.
    OtherLanguage {
        /// The first such block's tag.
        tag: String,
    },
    /// No fenced block at all.
    NoCode,
}

/// Extracts the first block tagged with one of `accepted` (compared without case)
/// or untagged. Fences are three or more backticks or tildes, as in CommonMark.
pub fn extract_code(reply: &str, accepted: &[&str]) -> Extraction {
    let mut other_language: Option<String> = None;
    let mut lines = reply.lines();
    while let Some(line) = lines.next() {
        let Some(fence) = Fence::open(line) else {
            continue;
        };
        let mut body = Vec::new();
        let mut closed = false;
        for inner in lines.by_ref() {
            if fence.closes(inner) {
                closed = true;
                break;
            }
            body.push(inner);
        }
        let tag = fence.tag.to_ascii_lowercase();
        if tag.is_empty() || accepted.iter().any(|a| a.eq_ignore_ascii_case(&tag)) {
            // Models sometimes repeat the language on the block's first line
            // (```js, then `js`): that line is a label, not code.
            if body.len() > 1 && is_language_label(body[0], accepted) {
                body.remove(0);
            }
            return Extraction::Code {
                code: body.join("\n"),
                closed,
            };
        }
        other_language.get_or_insert(tag);
    }
    match other_language {
        Some(tag) => Extraction::OtherLanguage { tag },
        None => match inline_helper_call(reply).or_else(|| {
            let python = accepted.iter().any(|tag| matches!(*tag, "python" | "py"));
            bare_helper_call(reply, python)
        }) {
            Some(code) => Extraction::Code { code, closed: true },
            None => Extraction::NoCode,
        },
    }
}

/// Whether `line` is only a language's name, as models write above code.
fn is_language_label(line: &str, accepted: &[&str]) -> bool {
    let word = line.trim().trim_end_matches(':');
    accepted.iter().any(|a| a.eq_ignore_ascii_case(word))
        || ["js", "javascript", "python", "py", "python3", "rhai"]
            .iter()
            .any(|name| name.eq_ignore_ascii_case(word))
}

/// The call a reply consists of and nothing else (`final_result(2.2)`, or
/// `` `final_result(2.2)` ``), with no fenced block: the script the host runs
/// for it, which the history then shows in a fence (see
/// `Conversation::on_reply`).
pub fn whole_reply_helper_call(reply: &str) -> Option<String> {
    let trimmed = reply.trim();
    if trimmed.contains("```") || trimmed.contains('\n') {
        return None;
    }
    let unquoted = trimmed.trim_matches('`');
    let call = bare_helper_call(unquoted, false)?;
    (unquoted.strip_suffix(';').unwrap_or(unquoted) == call).then_some(call)
}

/// `reply` without the lines that are the host's fence markers
/// (`<untrusted-0123456789abcdef>`, `</untrusted-…>`): a small model given a
/// line to write inside a fence echoed the fence with it, and the reply held no
/// code block. The markers are the host's quoting of data, never code; the
/// lines between them are the model's own reply.
pub fn without_fence_markers(reply: &str) -> String {
    let is_marker = |line: &str| {
        let line = line.trim();
        let nonce = line
            .strip_prefix("</untrusted-")
            .or_else(|| line.strip_prefix("<untrusted-"))
            .and_then(|rest| rest.strip_suffix('>'));
        nonce.is_some_and(|nonce| nonce.len() == 16 && nonce.chars().all(|c| c.is_ascii_hexdigit()))
    };
    if !reply.lines().any(is_marker) {
        return reply.to_string();
    }
    reply
        .lines()
        .filter(|line| !is_marker(line))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The last line of a reply without blocks, when it is a whole result-helper
/// call: models often answer an observation with just `final_result(10.0)`.
/// With `python`, the import lines right above it come with it: the host
/// hands a reading to observe as `import csv` and the call, fenced, and a
/// model that echoes the fence echoes both.
fn bare_helper_call(reply: &str, python: bool) -> Option<String> {
    let mut lines = reply.lines().rev().filter(|line| !line.trim().is_empty());
    let last = lines.next()?.trim();
    let last = last.strip_suffix(';').unwrap_or(last);
    let calls_helper = ["final_result(", "observation("]
        .iter()
        .any(|helper| last.starts_with(helper));
    if !(calls_helper && last.ends_with(')') && balanced(last)) {
        return None;
    }
    let is_import = |line: &str| {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["import", names @ ..] => !names.is_empty(),
            ["from", _, "import", _, ..] => true,
            _ => false,
        }
    };
    let mut imports: Vec<&str> = lines
        .map(str::trim)
        .take_while(|line| python && is_import(line))
        .collect();
    imports.reverse();
    Some(
        imports
            .into_iter()
            .chain([last])
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// Whether the brackets of `code` close in order (quotes are not parsed: a
/// bracket inside a string may make a real call look unbalanced, never the
/// reverse in practice).
fn balanced(code: &str) -> bool {
    let mut open = Vec::new();
    for c in code.chars() {
        match c {
            '(' | '[' | '{' => open.push(c),
            ')' | ']' | '}' => {
                let want = match c {
                    ')' => '(',
                    ']' => '[',
                    _ => '{',
                };
                if open.pop() != Some(want) {
                    return false;
                }
            }
            _ => {}
        }
    }
    open.is_empty()
}

/// The one inline code span (`` `…` ``) of a reply without blocks that calls a
/// result helper, e.g. `` `final_result(42)` ``: the script the model meant.
fn inline_helper_call(reply: &str) -> Option<String> {
    let mut found = None;
    for (index, span) in reply.split('`').enumerate() {
        let span = span.trim();
        let calls_helper = [
            "final_result(",
            "observation(",
            "error(",
            "transfer_to_agent(",
        ]
        .iter()
        .any(|helper| span.starts_with(helper));
        if index % 2 == 1 && calls_helper && span.ends_with(')') && !span.contains('\n') {
            if found.is_some() {
                return None;
            }
            found = Some(span.to_string());
        }
    }
    found
}

struct Fence<'a> {
    marker: char,
    length: usize,
    tag: &'a str,
}

impl<'a> Fence<'a> {
    fn open(line: &'a str) -> Option<Self> {
        let trimmed = line.trim_start();
        let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~')?;
        let length = trimmed.chars().take_while(|c| *c == marker).count();
        if length < 3 {
            return None;
        }
        let info = trimmed[length..].trim();
        if marker == '`' && info.contains('`') {
            return None;
        }
        let tag = info
            .split(|c: char| c.is_whitespace() || c == '{' || c == ',')
            .next()
            .unwrap_or("");
        Some(Self {
            marker,
            length,
            tag,
        })
    }

    fn closes(&self, line: &str) -> bool {
        let trimmed = line.trim();
        trimmed.len() >= self.length && trimmed.chars().all(|c| c == self.marker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(text: &str) -> Extraction {
        Extraction::Code {
            code: text.into(),
            closed: true,
        }
    }

    #[test]
    fn the_first_block_with_an_accepted_tag_is_taken() {
        let reply =
            "Plan first.\n```python\nprint(1)\n```\n```rhai\nlet x = 1;\nx\n```\n```rhai\n2\n```";
        assert_eq!(extract_code(reply, &["rhai"]), code("let x = 1;\nx"));
    }

    #[test]
    fn an_echoed_fence_around_a_helper_call_is_dropped_and_the_call_runs() {
        let echoed =
            "<untrusted-61e405a639d50a4f>\nobservation(read_file())\n</untrusted-61e405a639d50a4f>";
        let reply = without_fence_markers(echoed);
        assert_eq!(reply, "observation(read_file())");
        assert_eq!(
            whole_reply_helper_call(&reply).as_deref(),
            Some("observation(read_file())")
        );
        // Inside a code block too; anything that is not exactly a marker stays.
        let block =
            "```python\n<untrusted-0123456789abcdef>\nx = 1\n</untrusted-0123456789abcdef>\n```";
        assert_eq!(
            extract_code(&without_fence_markers(block), &["python"]),
            code("x = 1")
        );
        for kept in [
            "<untrusted-0123>",
            "<untrusted-0123456789abcdeg>",
            "x = '<untrusted-0123456789abcdef>'",
            "<untrusted-0123456789abcdef> and more",
        ] {
            assert_eq!(without_fence_markers(kept), kept);
        }
    }

    #[test]
    fn tags_match_without_case_and_untagged_fences_count() {
        assert_eq!(extract_code("```RHAI\n1\n```", &["rhai"]), code("1"));
        assert_eq!(extract_code("```\n2\n```", &["rhai"]), code("2"));
        assert_eq!(extract_code("~~~~js\n3\n~~~~", &["js"]), code("3"));
    }

    #[test]
    fn a_block_for_another_language_is_named() {
        assert_eq!(
            extract_code("```python\nprint(1)\n```", &["rhai"]),
            Extraction::OtherLanguage {
                tag: "python".into()
            }
        );
    }

    #[test]
    fn a_reply_without_fences_has_no_code() {
        assert_eq!(
            extract_code("The answer is 4.", &["rhai"]),
            Extraction::NoCode
        );
        assert_eq!(extract_code("use `x` here", &["rhai"]), Extraction::NoCode);
    }

    #[test]
    fn a_reply_that_ends_inside_a_block_is_marked_unclosed() {
        assert_eq!(
            extract_code("```rhai\nlet x = 1;\nlet y", &["rhai"]),
            Extraction::Code {
                code: "let x = 1;\nlet y".into(),
                closed: false
            }
        );
    }

    #[test]
    fn a_shorter_fence_inside_a_longer_one_does_not_close_it() {
        let reply = "````rhai\nlet s = \"```\";\n```\ns\n````";
        assert_eq!(
            extract_code(reply, &["rhai"]),
            code("let s = \"```\";\n```\ns")
        );
    }

    #[test]
    fn indented_fences_and_info_strings_with_attributes_work() {
        assert_eq!(
            extract_code("  ```rhai title=\"x\"\n  1\n  ```", &["rhai"]),
            code("  1")
        );
    }

    #[test]
    fn a_language_name_repeated_on_the_first_line_is_dropped() {
        assert_eq!(
            extract_code("```js\njs\nfinal_result(1)\n```", &["js"]),
            code("final_result(1)")
        );
        assert_eq!(
            extract_code("```\nPython:\nfinal_result(1)\n```", &["python"]),
            code("final_result(1)")
        );
        // A block that is only the word stays as it is: it may be a variable.
        assert_eq!(extract_code("```js\njs\n```", &["js"]), code("js"));
    }

    #[test]
    fn one_inline_helper_call_in_a_reply_without_blocks_is_the_script() {
        assert_eq!(
            extract_code("The answer is `final_result(\"AGENT\")`.", &["js"]),
            code("final_result(\"AGENT\")")
        );
        assert_eq!(
            extract_code(
                "Use `x` then `final_result(1)` or `final_result(2)`",
                &["js"]
            ),
            Extraction::NoCode
        );
        assert_eq!(
            extract_code("The answer is `42`.", &["js"]),
            Extraction::NoCode
        );
    }

    #[test]
    fn a_reply_that_is_nothing_but_a_helper_call_is_told_apart_from_one_that_says_more() {
        assert_eq!(
            whole_reply_helper_call(" final_result(2.2);\n").as_deref(),
            Some("final_result(2.2)")
        );
        assert_eq!(
            whole_reply_helper_call("`observation(x)`").as_deref(),
            Some("observation(x)")
        );
        for reply in [
            "The mean is 10.\nfinal_result(mean)",
            "```python\nfinal_result(1)\n```",
            "error(\"give up\")",
            "final_result(1) and more",
        ] {
            assert_eq!(whole_reply_helper_call(reply), None, "{reply}");
        }
    }

    #[test]
    fn a_reply_that_is_only_a_helper_call_is_the_script() {
        assert_eq!(
            extract_code("final_result(10.0)", &["python"]),
            code("final_result(10.0)")
        );
        assert_eq!(
            extract_code("The mean is 10.\nfinal_result(mean);", &["js"]),
            code("final_result(mean)")
        );
        // The import lines right above the call come with it; prose does not.
        assert_eq!(
            extract_code(
                "Reading it:\nimport csv\nfrom io import StringIO\nobservation(list(csv.reader(x)))",
                &["python"]
            ),
            code("import csv\nfrom io import StringIO\nobservation(list(csv.reader(x)))")
        );
        assert_eq!(
            extract_code("import\nfinal_result(1)", &["python"]),
            code("final_result(1)")
        );
        // Only Python's: a JavaScript module import cannot run in a script.
        assert_eq!(
            extract_code("import fs from 'fs'\nfinal_result(1)", &["js"]),
            code("final_result(1)")
        );
        assert_eq!(
            extract_code("final_result(f(1)", &["js"]),
            Extraction::NoCode
        );
        assert_eq!(
            extract_code("error(\"give up\")", &["js"]),
            Extraction::NoCode
        );
    }
}
