//! A Python stub of a host tool that read a file itself (`def read_file(name=
//! "sales.csv"): with open(name) as file: return list(csv.reader(file))`): the
//! host takes the stub out (see `script_notes::without_python_defs`), so the
//! script's calls get the tool's text, not the rows the stub made of it. This
//! writes the stub's reading over the tool's text instead, for the feedback to
//! quote: `list(csv.reader(read_file(name="sales.csv").splitlines()))`.
//!
//! Why: on the data tasks a small model's first CPython script defined
//! `read_file` with `open` in four of five tasks, in both runs; told that the
//! host ran its script without the definition, it kept indexing the text as if
//! it were rows until its errors ran out.

/// What to write in place of a call of `tool` for what the stub of it in
/// `script` returned, when the stub opens a file named by one of its
/// parameters and returns one expression of that file: `csv.reader(file)`,
/// `csv.DictReader(file)`, `json.load(file)`, `file.read()`,
/// `file.readlines()`, with at most one assignment between. `signature` is the
/// card's (`read_file(name=string)`): the tool must take exactly one argument.
/// The text is the model's code rewritten, so it is quoted only fenced.
pub fn reading_in_place_of(script: &str, tool: &str, signature: &str) -> Option<String> {
    reading(script, tool, signature, false)
}

/// The same reading with the tool given the stub's parameter rather than its
/// default (`list(csv.reader(read_file(name=name).splitlines()))`): the body
/// of a definition that stands in for the stub and does what it did, with
/// the host's tool in place of `open`.
pub fn reading_of_parameter(script: &str, tool: &str, signature: &str) -> Option<String> {
    reading(script, tool, signature, true)
}

fn reading(script: &str, tool: &str, signature: &str, pass_parameter: bool) -> Option<String> {
    let argument = only_argument(signature)?;
    let block = def_block(script, tool)?;
    let mut lines = block.lines();
    let header = lines.next()?.trim();
    let params = header
        .strip_prefix("def ")?
        .strip_prefix(tool)?
        .strip_prefix('(')?
        .rsplit_once(')')?
        .0;
    let body: Vec<&str> = lines
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect();
    let (opened, file) = body.first().and_then(|line| with_open(line))?;
    let default = params.split(',').find_map(|param| {
        let (name, value) = param.split_once('=')?;
        (name.trim() == opened).then(|| value.trim())
    });
    let passed = match default {
        Some(default) if !pass_parameter => default,
        _ => opened.as_str(),
    };
    let text = format!("{tool}({argument}={passed})");
    let expression = match &body[1..] {
        [last] => last.strip_prefix("return ")?.trim().to_string(),
        [assignment, last] => {
            let (name, value) = assignment.split_once('=')?;
            let name = name.trim();
            if !is_name(name) || value.starts_with('=') {
                return None;
            }
            let returned = last.strip_prefix("return ")?.trim();
            replace_word(returned, name, value.trim())
        }
        _ => return None,
    };
    if !mentions(&expression, &file) {
        return None;
    }
    let read = over_tool_text(&expression, &file, &text);
    (read != text).then_some(read)
}

/// A `with open("server.log") as file:` block of one assignment, at 1-based
/// line `line` of `script` (where Python said the file was not found), written
/// over the host's `tool` instead: the block's first and last line and the line
/// to write in their place (`log_content = read_file(name="server.log")`, at
/// the block's indent). `signature` is the card's: the tool must take exactly
/// one argument. Model code rewritten: quoted only fenced.
///
/// Why: a small model's CPython scripts opened the task's file directly in one
/// data task of five, told only `FileNotFoundError` at that line, sent the same
/// script until its errors ran out.
pub fn open_in_place_of(
    script: &str,
    line: usize,
    tool: &str,
    signature: &str,
) -> Option<(usize, usize, String)> {
    let argument = only_argument(signature)?;
    let lines: Vec<&str> = script.lines().collect();
    let index = line.checked_sub(1)?;
    let header = *lines.get(index)?;
    let indent = header.len() - header.trim_start().len();
    let rest = header.trim().strip_prefix("with open(")?;
    let opened = rest.split([',', ')']).next()?.trim();
    let plain_literal = opened.len() >= 2
        && ['"', '\''].iter().any(|&q| {
            opened.starts_with(q)
                && opened.ends_with(q)
                && !opened[1..opened.len() - 1].contains([q, '\\'])
        });
    if !(plain_literal || is_name(opened)) {
        return None;
    }
    let file = rest.rsplit_once(" as ")?.1.strip_suffix(':')?.trim();
    if !is_name(file) {
        return None;
    }
    let mut body = Vec::new();
    let mut last = index;
    for (at, text) in lines.iter().enumerate().skip(index + 1) {
        let blank = text.trim().is_empty() || text.trim_start().starts_with('#');
        if !blank && text.len() - text.trim_start().len() <= indent {
            break;
        }
        if !blank {
            body.push(text.trim());
            last = at;
        }
    }
    let [assignment] = body.as_slice() else {
        return None;
    };
    let (name, value) = assignment.split_once('=')?;
    let (name, value) = (name.trim(), value.trim());
    if !is_name(name) || value.starts_with('=') || !mentions(value, file) {
        return None;
    }
    let text = format!("{tool}({argument}={opened})");
    let read = over_tool_text(value, file, &text);
    Some((
        index + 1,
        last + 1,
        format!("{}{name} = {read}", &header[..indent]),
    ))
}

/// `expression`, which reads the open file `file`, written over `text`, a
/// call of the tool that gives that file's text.
fn over_tool_text(expression: &str, file: &str, text: &str) -> String {
    let read = expression
        .replace(
            &format!("json.load({file})"),
            &format!("json.loads({text})"),
        )
        .replace(&format!("{file}.read()"), text)
        .replace(
            &format!("{file}.readlines()"),
            &format!("{text}.splitlines()"),
        );
    replace_word(&read, file, &format!("{text}.splitlines()"))
}

/// The one argument's name of a card's signature (`read_file(name=string)`).
fn only_argument(signature: &str) -> Option<&str> {
    let inside = signature.split_once('(')?.1.rsplit_once(')')?.0;
    let mut names = inside
        .split(',')
        .map(|part| part.split(['=', ':']).next().unwrap_or_default().trim());
    let first = names.next().filter(|name| is_name(name))?;
    names.next().is_none().then_some(first)
}

/// The `def` of `name` in `script` with its body: the `def` line and every
/// line after it that is blank or indented deeper.
fn def_block(script: &str, name: &str) -> Option<String> {
    let mut lines = script.lines().skip_while(|line| {
        !line
            .trim_start()
            .strip_prefix("def ")
            .is_some_and(|rest| rest.starts_with(&format!("{name}(")))
    });
    let header = lines.next()?;
    let indent = header.len() - header.trim_start().len();
    let mut block = vec![header];
    block.extend(lines.take_while(|line| {
        line.trim().is_empty() || line.len() - line.trim_start().len() > indent
    }));
    Some(block.join("\n"))
}

/// `with open(NAME…) as FILE:`: the parameter opened and the file's name.
fn with_open(line: &str) -> Option<(String, String)> {
    let rest = line.strip_prefix("with open(")?;
    let opened = rest.split([',', ')']).next()?.trim();
    let file = rest.rsplit_once(" as ")?.1.strip_suffix(':')?.trim();
    (is_name(opened) && is_name(file)).then(|| (opened.to_string(), file.to_string()))
}

fn is_name(text: &str) -> bool {
    !text.is_empty()
        && !text.starts_with(|c: char| c.is_ascii_digit())
        && text.chars().all(|c| c.is_alphanumeric() || c == '_')
}

fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Whether `text` uses `word` as a whole name (not `.word` or `word_x`).
fn mentions(text: &str, word: &str) -> bool {
    replace_word(text, word, "\u{0}") != text
}

/// `text` with each whole-name `word` (not after a dot) replaced by `with`.
fn replace_word(text: &str, word: &str, with: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(word) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + word.len()..].chars().next();
        let whole = before.is_none_or(|c| !is_name_char(c) && c != '.')
            && after.is_none_or(|c| !is_name_char(c));
        out.push_str(&rest[..at]);
        out.push_str(if whole { with } else { word });
        rest = &rest[at + word.len()..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_opened_file_is_read_through_the_tool_instead() {
        let script = "import re\n\n# Read the log file\nwith open('server.log', 'r') as file:\n    log_content = file.read()\n\ncodes = re.findall(r'E\\d+', log_content)";
        assert_eq!(
            open_in_place_of(script, 4, "read_file", "read_file(name=string)"),
            Some((
                4,
                5,
                "log_content = read_file(name='server.log')".to_string()
            ))
        );
        let rows = "def main():\n    with open(\"sales.csv\", newline='') as f:\n\n        rows = list(csv.DictReader(f))\n    return rows";
        assert_eq!(
            open_in_place_of(rows, 2, "read_file", "read_file(name=string)"),
            Some((
                2,
                4,
                "    rows = list(csv.DictReader(read_file(name=\"sales.csv\").splitlines()))"
                    .to_string()
            ))
        );
        let json = "with open(path) as f:\n    data = json.load(f)";
        assert_eq!(
            open_in_place_of(json, 1, "read_file", "read_file(name=string)"),
            Some((1, 2, "data = json.loads(read_file(name=path))".to_string()))
        );
    }

    #[test]
    fn an_open_that_is_not_one_plain_assignment_is_left_alone() {
        for (script, why) in [
            (
                "with open('a') as f:\n    a = f.read()\n    b = 2",
                "two statements",
            ),
            (
                "with open('a') as f:\n    for line in f:\n        x = 1",
                "a loop",
            ),
            (
                "with open('a' + b) as f:\n    a = f.read()",
                "an expression opened",
            ),
            (
                "with open('a\\'b') as f:\n    a = f.read()",
                "an escape in the name",
            ),
            ("with open('a') as f:\n    a = 3", "the file unread"),
            ("x = open('a').read()", "no with block"),
        ] {
            assert_eq!(
                open_in_place_of(script, 1, "read_file", "read_file(name=string)"),
                None,
                "{why}"
            );
        }
        assert_eq!(
            open_in_place_of(
                "with open('a') as f:\n    a = f.read()",
                1,
                "read_file",
                "read_file(name=string, encoding=string)"
            ),
            None,
            "a tool of two arguments"
        );
    }

    const SIGNATURE: &str = "read_file(name=string)";

    #[test]
    fn a_csv_stub_becomes_the_reader_over_the_tools_lines_with_its_default_file() {
        let script = "import csv\n\ndef read_file(name=\"sales.csv\"):\n    with open(name, newline='') as file:\n        reader = csv.reader(file)\n        return list(reader)\n\ndef total():\n    return 1\n";
        assert_eq!(
            reading_in_place_of(script, "read_file", SIGNATURE).as_deref(),
            Some("list(csv.reader(read_file(name=\"sales.csv\").splitlines()))")
        );
        let dicts = script.replace("csv.reader", "csv.DictReader");
        assert_eq!(
            reading_in_place_of(&dicts, "read_file", SIGNATURE).as_deref(),
            Some("list(csv.DictReader(read_file(name=\"sales.csv\").splitlines()))")
        );
    }

    #[test]
    fn json_and_whole_text_stubs_read_the_tools_text() {
        let json = "def read_file(name=\"inventory.json\"):\n    with open(name, \"r\") as file:\n        return json.load(file)";
        assert_eq!(
            reading_in_place_of(json, "read_file", SIGNATURE).as_deref(),
            Some("json.loads(read_file(name=\"inventory.json\"))")
        );
        let lines = "def read_file(path):\n    with open(path) as f:\n        return f.readlines()";
        assert_eq!(
            reading_in_place_of(lines, "read_file", SIGNATURE).as_deref(),
            Some("read_file(name=path).splitlines()")
        );
    }

    #[test]
    fn a_stub_that_only_returns_the_text_or_does_more_is_left_alone() {
        let text = "def read_file(name=\"server.log\"):\n    with open(name, \"r\") as file:\n        return file.read()";
        assert_eq!(reading_in_place_of(text, "read_file", SIGNATURE), None);
        let more = "def read_file(name):\n    with open(name) as f:\n        a = f.read()\n        b = a.upper()\n        return b";
        assert_eq!(reading_in_place_of(more, "read_file", SIGNATURE), None);
        let no_file = "def read_file(name):\n    return {\"a\": 1}";
        assert_eq!(reading_in_place_of(no_file, "read_file", SIGNATURE), None);
    }

    #[test]
    fn a_tool_of_two_arguments_or_another_name_gets_no_rewrite() {
        let script = "def read_file(name):\n    with open(name) as f:\n        return json.load(f)";
        assert_eq!(
            reading_in_place_of(script, "read_file", "read_file(name=string, lines=int)"),
            None
        );
        assert_eq!(
            reading_in_place_of(script, "get_file", "get_file(name=string)"),
            None
        );
    }
}
