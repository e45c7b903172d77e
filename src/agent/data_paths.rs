//! Where a failed script read its tools' results wrongly, found by following the
//! script's text over the values the tools returned: no code runs. A name the
//! script set from a tool call (`const ids = tools.find_user(...)`, `ids =
//! find_user(...)`), or to each item of such a list (`for order in orders`), is
//! followed through the accesses written after it (`ids[0].email`) until one
//! leads nowhere (`ids[0]` is the number 42, which has no `email`), and a loop
//! over a tool's multi-line text (its characters, not its lines) is named.
//!
//! Why: told the tool's whole result, a 1.5B model sent `final_result(ids[0].email)`
//! again four times; told that `ids[0]` is a number without `email`, it called
//! the tool that takes the id. Only the first misreading is reported, one on the
//! failing line before any other.

use serde_json::Value;

use super::seen::ToolResultSeen;

/// The script's language, for what its accesses and loops look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    JavaScript,
    Python,
    Rhai,
}

impl Language {
    /// The language of a fence tag (`python`, `rhai`; anything else is
    /// JavaScript, as the cards' tags are).
    pub fn from_fence_tag(tag: &str) -> Self {
        match tag {
            "python" | "py" => Self::Python,
            "rhai" => Self::Rhai,
            _ => Self::JavaScript,
        }
    }

    /// The language a runtime names (`RuntimeInfo::language`: `Python`,
    /// `Rhai`, `JavaScript`); any other is taken for JavaScript.
    pub fn from_name(name: &str) -> Self {
        match name {
            "Python" => Self::Python,
            "Rhai" => Self::Rhai,
            _ => Self::JavaScript,
        }
    }

    /// The language's name, as runtimes name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Python => "Python",
            Self::Rhai => "Rhai",
            Self::JavaScript => "JavaScript",
        }
    }
}

/// What a misread value is, in words a template can say.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A number, as JSON writes it (digits, sign, point, exponent: nothing a
    /// tool can word).
    Number(String),
    Text,
    Bool(bool),
    Null,
    /// A list of this many items, and what its first item is when the access
    /// was a key (host words: `numbers`, `maps with that key`, …).
    List(usize, Option<&'static str>),
    /// A map with these keys (a tool's words: shown fenced).
    Map(Vec<String>),
}

/// One access of a path: `.name` or `["name"]`, or `[3]`.
#[derive(Debug, Clone, PartialEq)]
pub enum Access {
    /// `.name`: an attribute in Python, a property elsewhere.
    Dot(String),
    /// `["name"]`.
    Key(String),
    /// `[3]`, `[-1]`.
    Index(i64),
}

impl Access {
    fn written(&self) -> String {
        match self {
            Self::Dot(name) => format!(".{name}"),
            Self::Key(name) => format!("[\"{name}\"]"),
            Self::Index(index) => format!("[{index}]"),
        }
    }
}

/// A misreading of a tool's result by a failed script.
#[derive(Debug, Clone, PartialEq)]
pub enum Misreading {
    /// `at` (a prefix of a path the script wrote) holds `kind`, and `access`
    /// leads nowhere in it.
    BrokenPath {
        /// The tool whose result the path starts from.
        tool: String,
        /// The name the path starts from.
        name: String,
        /// The list `name` takes the items of, when it is a loop's name.
        item_of: Option<String>,
        /// `name` holds a part of the result (`user = users[0]`).
        part: bool,
        /// The path up to the access that fails, as the host writes it.
        at: String,
        kind: Kind,
        access: Access,
    },
    /// A loop takes a tool's multi-line text one character at a time.
    LoopOverText {
        tool: String,
        /// The text's name.
        text: String,
        /// What the loop walks as written: the text, or a slice of it
        /// (`sales[1:]`, which drops a character, not a line).
        walked: String,
        /// The loop's name.
        name: String,
        /// The text's first line names columns (a CSV header).
        header: bool,
    },
    /// A loop over the lines of a tool's text indexes a line (`row[1]`) as if
    /// it were split into cells: it gets a character.
    LineIndexed {
        tool: String,
        /// The text's name.
        text: String,
        /// The loop's name.
        name: String,
        /// The separator the text's second line holds (`,`, `;` or a tab).
        separator: char,
    },
    /// The script splits a tool's text into lines and keeps a line that is no
    /// row: its first, which names columns, or the empty one after its last
    /// line break.
    LinesKept {
        tool: String,
        /// The text's name.
        text: String,
        /// The first line names columns and the script never drops it.
        header: bool,
        /// The text ends with a line break and the split keeps the empty last
        /// line (no `trim`, `strip` or `filter` in the script).
        trailing_newline: bool,
    },
    /// The error quotes a cell of the first line of a tool's multi-line text,
    /// which names columns: the script treated the header as data.
    HeaderAsData { tool: String },
    /// The error quotes a cell that only one column of a tool's text (with a
    /// header) holds, below its header: the script converted a value of the
    /// wrong column (`float(row[0])` over `product,quantity,unit_price`).
    CellOfColumn {
        tool: String,
        /// The column (from 0) that holds the quoted cell.
        column: usize,
        /// The text's first line, as the tool wrote it.
        header: String,
    },
    /// A row's cells taken in order by names that the first line of a tool's
    /// text puts in other columns: `const [quantity, unitPrice] =
    /// line.split(",")` over `product,quantity,unit_price`.
    CellsMisplaced {
        tool: String,
        /// The line of the script (1-based).
        line: usize,
        /// The script's names, in its order.
        names: Vec<String>,
        /// The column (from 0) the header gives each name.
        columns: Vec<usize>,
        /// The text's first line, as the tool wrote it.
        header: String,
        /// The line's declaration keyword with its space (`const `), or empty.
        declaration: String,
        /// What the line assigns, as written, when it is plain enough to quote
        /// in the host's words (see [`plain_code`]).
        value: Option<String>,
    },
}

/// Names at most this long are followed (and so said in the host's words).
const NAME_MAX: usize = 40;

/// Scripts of more lines are not looked at: the checks compare lines with
/// lines, so a script of many thousand (a model's, or an attacker's through
/// it) would cost the host seconds per step.
const LINES_FOLLOWED: usize = 400;

/// The first misreading of `results` (the script's successful tool calls) by
/// `script`, whose error said `message`, in this order: a loop over text or a
/// broken path on line `failing_line` (1-based), a loop over text anywhere, a
/// broken path anywhere, a CSV line indexed like its cells, lines kept by a split
/// that are no rows (a header, an empty last line), a header cell the error quotes. `None` when there is none of these.
pub fn misreading(
    script: &str,
    message: &str,
    failing_line: Option<usize>,
    results: &[ToolResultSeen],
    language: Language,
) -> Option<Misreading> {
    let lines: Vec<&str> = script.lines().collect();
    if lines.len() > LINES_FOLLOWED || results.is_empty() {
        return None;
    }
    let bindings = bindings(&lines, results, language);
    misread_path(&lines, failing_line, &bindings, language)
        .or_else(|| line_indexed(&lines, &bindings, language))
        .or_else(|| lines_kept(script, &bindings, language))
        .or_else(|| header_as_data(message, results))
        .or_else(|| cells_misplaced(&lines, results, language))
        .or_else(|| cell_of_column(message, results))
}

/// The misreadings of a tool's text that hold whatever the script made of
/// the text (a header cell the error quotes, cells taken by names the header
/// puts in other columns): for a tool the script defines for itself (a
/// Python stub kept as its reading), whose variables hold what the stub made
/// of the text, not the text.
pub fn header_misreading(
    script: &str,
    message: &str,
    results: &[ToolResultSeen],
    language: Language,
) -> Option<Misreading> {
    let lines: Vec<&str> = script.lines().collect();
    if lines.len() > LINES_FOLLOWED {
        return None;
    }
    header_as_data(message, results)
        .or_else(|| cells_misplaced(&lines, results, language))
        .or_else(|| cell_of_column(message, results))
}

/// The names `script` sets once from a tool called once that returned a list
/// (`let orders = list_orders(…)`): what a method of arrays called bare most
/// likely meant to be called on.
pub fn list_names(script: &str, results: &[ToolResultSeen]) -> Vec<String> {
    let lines: Vec<&str> = script.lines().collect();
    if lines.len() > LINES_FOLLOWED {
        return Vec::new();
    }
    tool_bindings(&lines, results)
        .into_iter()
        .filter(|bound| bound.whole.is_array())
        .map(|bound| bound.name)
        .collect()
}

/// A loop over text or a broken path: on the failing line, then anywhere.
fn misread_path(
    lines: &[&str],
    failing_line: Option<usize>,
    bindings: &[Binding<'_>],
    language: Language,
) -> Option<Misreading> {
    if bindings.is_empty() {
        return None;
    }
    let failing = failing_line
        .and_then(|n| n.checked_sub(1))
        .filter(|&i| i < lines.len());
    let on_failing_line = failing.and_then(|index| {
        loop_over_text(lines[index], bindings, language)
            .or_else(|| broken_path(lines[index], bindings, language))
    });
    on_failing_line
        .or_else(|| {
            lines
                .iter()
                .find_map(|line| loop_over_text(line, bindings, language))
        })
        .or_else(|| {
            lines
                .iter()
                .find_map(|line| broken_path(line, bindings, language))
        })
}

/// A name bound to one tool's result, or to the items of a list one returned.
#[derive(Debug)]
struct Binding<'a> {
    name: String,
    tool: &'a str,
    /// The value the name holds: the result, or the items it takes.
    values: Vec<&'a Value>,
    item_of: Option<String>,
    /// The name holds a part of the result, set from a path on another name.
    part: bool,
    /// The whole result when the name is a loop's, for the loop-over-text check.
    whole: &'a Value,
}

/// The names set from a tool's result (the tool called once in the script, the
/// name set once), the names set from a path on one of those, and the loop
/// names that take their items.
fn bindings<'a>(
    lines: &[&str],
    results: &'a [ToolResultSeen],
    language: Language,
) -> Vec<Binding<'a>> {
    let mut found = tool_bindings(lines, results);
    let parts = path_bindings(lines, &found, language);
    found.extend(parts);
    let items = loop_bindings(lines, &found, language);
    found.extend(items);
    found
}

/// The binding of `name` when it is not a loop's (it holds one value).
fn not_a_loops<'b, 'a>(bindings: &'b [Binding<'a>], name: &str) -> Option<&'b Binding<'a>> {
    bindings
        .iter()
        .find(|b| b.name == name && b.item_of.is_none())
}

/// Whether `name` is assigned on exactly one of `lines`.
fn assigned_once(lines: &[&str], name: &str) -> bool {
    lines
        .iter()
        .filter(|l| assigned_name(l) == Some(name))
        .count()
        == 1
}

/// `result = tool(…)`, when the tool was called once and the name set once.
fn tool_bindings<'a>(lines: &[&str], results: &'a [ToolResultSeen]) -> Vec<Binding<'a>> {
    let mut found: Vec<Binding<'a>> = Vec::new();
    for line in lines {
        let Some((name, tool)) = assignment_from_call(line) else {
            continue;
        };
        let mut calls = results.iter().filter(|seen| seen.tool == tool);
        let (Some(seen), None) = (calls.next(), calls.next()) else {
            continue;
        };
        if !assigned_once(lines, name) || found.iter().any(|b| b.name == name) {
            continue;
        }
        found.push(Binding {
            name: name.to_string(),
            tool: &seen.tool,
            values: vec![&seen.value],
            item_of: None,
            part: false,
            whole: &seen.value,
        });
    }
    found
}

/// `user = users[0]` (the whole right side a plain path on a bound name that
/// leads somewhere), the name set once.
fn path_bindings<'a>(
    lines: &[&str],
    bound: &[Binding<'a>],
    language: Language,
) -> Vec<Binding<'a>> {
    let mut found: Vec<Binding<'a>> = Vec::new();
    for line in lines {
        let Some(name) = assigned_name(line) else {
            continue;
        };
        let right = strip_declaration(line.trim_start())[name.len()..]
            .trim_start()
            .trim_start_matches('=')
            .trim()
            .trim_end_matches(';')
            .trim_end();
        let Some(from) = identifier_at(right) else {
            continue;
        };
        let path = &right[from.len()..];
        let accesses = accesses(path);
        let written: String = accesses.iter().map(Access::written).collect();
        let plain = !accesses.is_empty() && path.replace('\'', "\"") == written;
        let known = bound.iter().chain(&found).any(|b| b.name == name);
        if !plain || known || !assigned_once(lines, name) {
            continue;
        }
        let Some(source) = not_a_loops(bound, from) else {
            continue;
        };
        if let Some(value) = value_at(source.values[0], &accesses, language) {
            found.push(Binding {
                name: name.to_string(),
                tool: source.tool,
                values: vec![value],
                item_of: None,
                part: true,
                whole: value,
            });
        }
    }
    found
}

/// `for order in orders`, over a bound name: the loop's name takes the items
/// (none when the value is not a list).
fn loop_bindings<'a>(
    lines: &[&str],
    bound: &[Binding<'a>],
    language: Language,
) -> Vec<Binding<'a>> {
    let mut found: Vec<Binding<'a>> = Vec::new();
    for line in lines {
        let Some((name, list, _)) = loop_header(line, language) else {
            continue;
        };
        let Some(source) = not_a_loops(bound, list) else {
            continue;
        };
        if bound.iter().chain(&found).any(|b| b.name == name) {
            continue;
        }
        let values: Vec<&Value> = match source.values[0] {
            Value::Array(all) if !all.is_empty() => all.iter().collect(),
            _ => Vec::new(),
        };
        found.push(Binding {
            name: name.to_string(),
            tool: source.tool,
            values,
            item_of: Some(list.to_string()),
            part: source.part,
            whole: source.values[0],
        });
    }
    found
}

/// `name = tool(…)` or `name = tools.tool(…)` (after `const`, `let` or `var`,
/// and `await`), or `name = call_tool("tool", …)`, the call the whole value
/// ([`call_is_whole`]): the name and the tool.
fn assignment_from_call(line: &str) -> Option<(&str, &str)> {
    let name = assigned_name(line)?;
    let after = line.trim_start();
    let after = strip_declaration(after);
    let rest = after[name.len()..]
        .trim_start()
        .strip_prefix('=')?
        .trim_start();
    let rest = rest.strip_prefix("await ").map_or(rest, str::trim_start);
    if let Some(quoted) = rest.strip_prefix("call_tool(") {
        let quoted = quoted.trim_start();
        let quote = quoted.chars().next().filter(|c| *c == '"' || *c == '\'')?;
        let inner = &quoted[1..];
        let end = inner.find(quote)?;
        return call_is_whole(&rest["call_tool".len()..]).then_some((name, &inner[..end]));
    }
    let rest = rest.strip_prefix("tools.").unwrap_or(rest);
    let tool = identifier_at(rest)?;
    let call = rest[tool.len()..].trim_start();
    (call.starts_with('(') && call_is_whole(call)).then_some((name, tool))
}

/// Whether the call whose `(…)` starts `call` is all there is to the right of
/// its `=`: nothing follows its closing parenthesis on the line but `;` and a
/// comment. A call that does not close on its line (its arguments go on) is
/// taken as whole.
///
/// Why: `const sales = tools.read_file({…}).split('\n').slice(1)` bound `sales`
/// to the file's text, and the feedback told a small model that its loop over
/// `sales` took the text one character at a time, which was false.
fn call_is_whole(call: &str) -> bool {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (at, c) in call.char_indices() {
        if let Some(open) = quote {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                _ if c == open => quote = None,
                _ => {}
            }
            continue;
        }
        match c {
            '"' | '\'' | '`' => quote = Some(c),
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    let after = call[at + 1..].trim_start();
                    let after = after.strip_prefix(';').map_or(after, str::trim_start);
                    return after.is_empty() || after.starts_with("//") || after.starts_with('#');
                }
            }
            _ => {}
        }
    }
    true
}

/// The name a line's statement assigns (`name = …`, `let name = …`), not
/// `name == …` and not an augmented assignment.
fn assigned_name(line: &str) -> Option<&str> {
    let line = strip_declaration(line.trim_start());
    let name = identifier_at(line)?;
    let rest = line[name.len()..].trim_start();
    (rest.starts_with('=') && !rest.starts_with("==")).then_some(name)
}

fn strip_declaration(line: &str) -> &str {
    for keyword in ["const ", "let ", "var "] {
        if let Some(rest) = line.strip_prefix(keyword) {
            return rest.trim_start();
        }
    }
    line
}

/// `for (const x of xs)` (JavaScript), `for x in xs:` (Python, also in a
/// comprehension: `sum(x for x in xs)`), `for x in xs {` (Rhai): the loop's name
/// and the list's, when the list is a plain name.
fn loop_header(line: &str, language: Language) -> Option<(&str, &str, &str)> {
    let after_for = |at: usize| {
        line[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'))
            .then(|| &line[at + 4..])
    };
    match language {
        Language::Python => line
            .match_indices("for ")
            .find_map(|(at, _)| after_for(at).and_then(python_loop)),
        Language::JavaScript | Language::Rhai => {
            let rest = line.trim_start().strip_prefix("for ")?.trim_start();
            if language == Language::JavaScript {
                let rest = strip_declaration(rest.strip_prefix('(')?.trim_start());
                name_then_list(rest, "of ", &[")"])
            } else {
                name_then_list(rest, "in ", &["{"])
            }
        }
    }
}

/// `x in xs` then `:` (a statement), or `)`, `]`, `}` or `if ` (a
/// comprehension), after a Python `for `.
fn python_loop(rest: &str) -> Option<(&str, &str, &str)> {
    name_then_list(rest.trim_start(), "in ", &[":", ")", "]", "}", "if "])
}

/// `name` `keyword` `list` followed by one of `ends`: the name, the list, and
/// what the loop walks as written: the list, or a slice of it that drops
/// items at its ends (`sales[1:]`, `sales.slice(1)`), whose items are the
/// list's.
fn name_then_list<'a>(
    rest: &'a str,
    keyword: &str,
    ends: &[&str],
) -> Option<(&'a str, &'a str, &'a str)> {
    let name = identifier_at(rest)?;
    let rest = rest[name.len()..]
        .trim_start()
        .strip_prefix(keyword)?
        .trim_start();
    let list = identifier_at(rest)?;
    let walked = list.len() + slice_suffix(&rest[list.len()..]);
    let after = rest[walked..].trim_start();
    ends.iter()
        .any(|end| after.starts_with(end))
        .then_some((name, list, &rest[..walked]))
}

/// The length of a slice written right after a name, `[1:]`, `[:-1]`,
/// `.slice(1)` or `.extract(1)` (numbers only between the brackets), or 0.
fn slice_suffix(after: &str) -> usize {
    let numbers_only = |inside: &str, separators: &[char]| {
        inside
            .chars()
            .all(|c| c.is_ascii_digit() || c == '-' || c == ' ' || separators.contains(&c))
    };
    if let Some(inside) = after.strip_prefix('[')
        && let Some(end) = inside.find(']')
        && inside[..end].contains(':')
        && numbers_only(&inside[..end], &[':'])
    {
        return end + 2;
    }
    for method in [".slice(", ".extract("] {
        if let Some(inside) = after.strip_prefix(method)
            && let Some(end) = inside.find(')')
            && numbers_only(&inside[..end], &[','])
        {
            return method.len() + end + 1;
        }
    }
    0
}

/// A loop over the lines of a bound tool's text (`for row in
/// sales.splitlines()[1:]`, `for (const row of sales.trim().split("\n"))`) whose
/// name is then indexed by a number (`row[1]`) while the text's lines hold cells
/// split by `,`, `;` or a tab.
fn line_indexed(
    lines: &[&str],
    bindings: &[Binding<'_>],
    language: Language,
) -> Option<Misreading> {
    for (index, line) in lines.iter().enumerate() {
        let Some((name, text, rest)) = loop_over_lines(line, language) else {
            continue;
        };
        let Some(bound) = not_a_loops(bindings, text) else {
            continue;
        };
        let Value::String(whole) = bound.whole else {
            continue;
        };
        let splits = ["splitlines()", "split(\"\\n\")", "split('\\n')"];
        if !splits.iter().any(|split| rest.contains(split)) {
            continue;
        }
        let Some(separator) = whole
            .lines()
            .nth(1)
            .and_then(|second| [',', ';', '\t'].into_iter().find(|c| second.contains(*c)))
        else {
            continue;
        };
        let indexed = lines[index..].iter().any(|later| {
            later.match_indices(name).any(|(at, _)| {
                let starts = later[..at]
                    .chars()
                    .next_back()
                    .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'));
                let after = &later[at + name.len()..];
                starts
                    && after.starts_with('[')
                    && after[1..]
                        .split(']')
                        .next()
                        .is_some_and(|inside| inside.trim().parse::<i64>().is_ok())
            })
        });
        if indexed {
            return Some(Misreading::LineIndexed {
                tool: bound.tool.to_string(),
                text: text.to_string(),
                name: name.to_string(),
                separator,
            });
        }
    }
    None
}

/// A loop header whose list starts with a plain name followed by more
/// (`sales.splitlines()[1:]`): the loop's name, the list's first name, and the
/// rest of the line after it.
fn loop_over_lines(line: &str, language: Language) -> Option<(&str, &str, &str)> {
    let keyword = if language == Language::JavaScript {
        " of "
    } else {
        " in "
    };
    let at = line.find("for ")?;
    let rest = line[at + 4..].trim_start();
    let rest = if language == Language::JavaScript {
        strip_declaration(rest.strip_prefix('(')?.trim_start())
    } else {
        rest
    };
    let name = identifier_at(rest)?;
    let rest = rest[name.len()..]
        .trim_start()
        .strip_prefix(keyword.trim_start())?
        .trim_start();
    let text = identifier_at(rest)?;
    let after = &rest[text.len()..];
    after.starts_with('.').then_some((name, text, after))
}

/// A loop over a bound name whose value is a tool's multi-line text.
fn loop_over_text(line: &str, bindings: &[Binding<'_>], language: Language) -> Option<Misreading> {
    let (name, list, walked) = loop_header(line, language)?;
    let bound = not_a_loops(bindings, list)?;
    match bound.whole {
        Value::String(text) if text.trim_end().contains('\n') => Some(Misreading::LoopOverText {
            tool: bound.tool.to_string(),
            text: list.to_string(),
            walked: walked.to_string(),
            name: name.to_string(),
            header: header_cells(text).is_some(),
        }),
        _ => None,
    }
}

/// The cells of a text's first line when it reads as a header: more than one
/// line, cells split by `,`, `;` or a tab, no digit in the first line and one in
/// the second.
fn header_cells(text: &str) -> Option<Vec<&str>> {
    let mut lines = text.lines();
    let first = lines.next()?;
    let second = lines.next()?;
    let separator = cell_separator(first)?;
    let looks_like_header =
        !first.chars().any(|c| c.is_ascii_digit()) && second.chars().any(|c| c.is_ascii_digit());
    looks_like_header.then(|| {
        first
            .split(separator)
            .map(str::trim)
            .filter(|cell| !cell.is_empty())
            .collect()
    })
}

/// The character a header line splits its cells by: `,`, `;` or a tab.
fn cell_separator(first_line: &str) -> Option<char> {
    [',', ';', '\t']
        .into_iter()
        .find(|c| first_line.contains(*c))
}

/// Ways a script drops a first line (or row), one of which in the script
/// means it skips the header.
const SKIPS_FIRST: [&str; 12] = [
    "slice(1",
    "[1:]",
    "[1..]",
    "extract(1",
    "shift()",
    "splice(0",
    "drop(1",
    "skip(1",
    "next(",
    "= 1;",
    "range(1",
    "in 1..",
];

/// Ways a script drops empty lines, one of which in the script means it drops
/// the one after a text's last line break.
const DROPS_EMPTY: [&str; 3] = ["trim", "strip", "filter"];

/// A bound tool's text that the script splits into lines (`text.split("\n")`,
/// `text.splitlines()`) keeping a line that is no row: a header it never drops
/// a first line of, or (`split` only) the empty line after a final line break.
fn lines_kept(script: &str, bindings: &[Binding<'_>], language: Language) -> Option<Misreading> {
    bindings
        .iter()
        .filter(|bound| bound.item_of.is_none())
        .find_map(|bound| {
            let Value::String(text) = bound.whole else {
                return None;
            };
            let name = &bound.name;
            let split = [
                format!("{name}.split(\"\\n\")"),
                format!("{name}.split('\\n')"),
            ]
            .iter()
            .any(|split| script.contains(split.as_str()));
            let splitlines =
                language == Language::Python && script.contains(&format!("{name}.splitlines()"));
            if !split && !splitlines {
                return None;
            }
            let header = header_cells(text).is_some()
                && !SKIPS_FIRST.iter().any(|skip| script.contains(skip));
            let trailing_newline = split
                && text.ends_with('\n')
                && !DROPS_EMPTY.iter().any(|drop| script.contains(drop));
            (header || trailing_newline).then(|| Misreading::LinesKept {
                tool: bound.tool.to_string(),
                text: name.clone(),
                header,
                trailing_newline,
            })
        })
}

/// A header cell of a tool's text quoted in the error message (`'quantity' is
/// not a number`, `could not convert string to float: 'quantity'`).
fn header_as_data(message: &str, results: &[ToolResultSeen]) -> Option<Misreading> {
    results.iter().find_map(|seen| {
        let Value::String(text) = &seen.value else {
            return None;
        };
        let cells = header_cells(text)?;
        cells
            .iter()
            .any(|cell| {
                message.contains(&format!("'{cell}'")) || message.contains(&format!("\"{cell}\""))
            })
            .then(|| Misreading::HeaderAsData {
                tool: seen.tool.clone(),
            })
    })
}

/// The column of a tool's text with a header that alone holds a cell the
/// error quotes (`'lamp'`), below the header: the value a script failed to
/// convert came from that column. A cell that holds a digit, or that more
/// than one column holds, names no column.
fn cell_of_column(message: &str, results: &[ToolResultSeen]) -> Option<Misreading> {
    results.iter().find_map(|seen| {
        let Value::String(text) = &seen.value else {
            return None;
        };
        let header = header_cells(text)?;
        let separator = cell_separator(text.lines().next()?)?;
        let quoted = |cell: &str| {
            message.contains(&format!("'{cell}'")) || message.contains(&format!("\"{cell}\""))
        };
        let mut columns: Vec<usize> = Vec::new();
        for line in text.lines().skip(1).take(LINES_FOLLOWED) {
            for (column, cell) in line.split(separator).map(str::trim).enumerate() {
                if !cell.is_empty()
                    && !cell.chars().any(|c| c.is_ascii_digit())
                    && quoted(cell)
                    && !columns.contains(&column)
                {
                    columns.push(column);
                }
            }
        }
        match columns.as_slice() {
            [column] if *column < header.len() => Some(Misreading::CellOfColumn {
                tool: seen.tool.clone(),
                column: *column,
                header: text.lines().next().unwrap_or_default().to_string(),
            }),
            _ => None,
        }
    })
}

/// The first line that takes a row's cells by names (`const [quantity,
/// unitPrice] = line.split(",")`, `quantity, price = row.split(",")`) that the
/// header of a tool's text puts in other columns. Every name must match one
/// column (the same letters, case and `_` aside, or the end or start of a
/// longer column name: `price` for `unit_price`); `_` stays where it is.
/// Rhai has no such assignment.
fn cells_misplaced(
    lines: &[&str],
    results: &[ToolResultSeen],
    language: Language,
) -> Option<Misreading> {
    if language == Language::Rhai {
        return None;
    }
    let (tool, text, cells) = results.iter().find_map(|seen| match &seen.value {
        Value::String(text) => header_cells(text).map(|cells| (&seen.tool, text, cells)),
        _ => None,
    })?;
    lines.iter().enumerate().find_map(|(index, line)| {
        let (declaration, names, value) = split_into_names(line, language)?;
        let columns: Vec<usize> = names
            .iter()
            .enumerate()
            .map(|(at, name)| {
                if *name == "_" {
                    Some(at)
                } else {
                    column_of(name, &cells)
                }
            })
            .collect::<Option<_>>()?;
        let distinct = columns
            .iter()
            .enumerate()
            .all(|(at, column)| !columns[..at].contains(column));
        let misplaced = columns.iter().enumerate().any(|(at, column)| at != *column);
        (distinct && misplaced).then(|| Misreading::CellsMisplaced {
            tool: tool.clone(),
            line: index + 1,
            names: names.iter().map(|name| name.to_string()).collect(),
            columns,
            header: text.lines().next().unwrap_or_default().to_string(),
            declaration: declaration.to_string(),
            value: plain_code(value).then(|| value.to_string()),
        })
    })
}

/// The names a line assigns the cells of a split to, in order: `const [a, b]
/// = ….split(…)` (`let`, `var` or none) in JavaScript, `a, b = ….split(…)` in
/// Python; the split may be followed by `.map(…)` and `;`. At least two names.
/// With them, the declaration keyword (`const `, or empty) and the value
/// assigned as written.
fn split_into_names(line: &str, language: Language) -> Option<(&str, Vec<&str>, &str)> {
    let line = line.trim();
    let (pattern, value) = line.split_once('=')?;
    if value.starts_with('=') || pattern.ends_with(['!', '<', '>']) {
        return None;
    }
    let pattern = pattern.trim();
    let undeclared = strip_declaration(pattern);
    let declaration = &pattern[..pattern.len() - undeclared.len()];
    let pattern = match language {
        Language::JavaScript => undeclared.strip_prefix('[')?.strip_suffix(']')?,
        Language::Python => pattern.trim_start_matches('(').trim_end_matches(')'),
        Language::Rhai => return None,
    };
    let names: Vec<&str> = pattern.split(',').map(str::trim).collect();
    if names.len() < 2
        || names
            .iter()
            .any(|name| identifier_at(name).is_none_or(|word| word.len() != name.len()))
    {
        return None;
    }
    let after_split = &value[value.find(".split(")?..];
    let after = after_split[after_split.find(')')? + 1..].trim();
    let after = after.strip_suffix(';').unwrap_or(after).trim();
    (after.is_empty() || (after.starts_with(".map(") && after.ends_with(')'))).then_some((
        declaration,
        names,
        value.trim(),
    ))
}

/// Code the host may quote outside a fence, though a model wrote it: short,
/// made of names, brackets, dots and operators, with string literals of at
/// most four characters (a separator such as `","` or `"\t"`), so nothing in
/// it can read as an instruction.
fn plain_code(code: &str) -> bool {
    const LONGEST: usize = 80;
    const LITERAL_MAX: usize = 4;
    if code.len() > LONGEST {
        return false;
    }
    let mut literal: Option<(char, usize)> = None;
    for c in code.chars() {
        match literal {
            Some((quote, _)) if c == quote => literal = None,
            Some((quote, length)) => {
                if length >= LITERAL_MAX {
                    return false;
                }
                literal = Some((quote, length + 1));
            }
            None if matches!(c, '"' | '\'') => literal = Some((c, 0)),
            None if c.is_ascii_alphanumeric() || "_ .,;:[]()+-*/".contains(c) => {}
            None => return false,
        }
    }
    literal.is_none()
}

/// The column of `cells` a script's `name` stands for: the same letters (case
/// and `_` aside), else the one column whose name ends or starts with it (3
/// letters at least).
fn column_of(name: &str, cells: &[&str]) -> Option<usize> {
    let letters = |text: &str| -> String {
        text.chars()
            .filter(char::is_ascii_alphanumeric)
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    let name = letters(name);
    let cells: Vec<String> = cells.iter().map(|cell| letters(cell)).collect();
    if let Some(exact) = cells.iter().position(|cell| *cell == name) {
        return Some(exact);
    }
    if name.len() < 3 {
        return None;
    }
    let mut partial = cells
        .iter()
        .enumerate()
        .filter(|(_, cell)| cell.ends_with(&name) || cell.starts_with(&name))
        .map(|(at, _)| at);
    match (partial.next(), partial.next()) {
        (Some(only), None) => Some(only),
        _ => None,
    }
}

/// The first path on `line` from a bound name that leads nowhere in every value
/// the name holds.
fn broken_path(line: &str, bindings: &[Binding<'_>], language: Language) -> Option<Misreading> {
    let bytes = line.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        let byte = bytes[at];
        if matches!(byte, b'"' | b'\'' | b'`') {
            at = end_of_string(bytes, at);
            continue;
        }
        let comment = match language {
            Language::Python => byte == b'#',
            Language::JavaScript | Language::Rhai => line[at..].starts_with("//"),
        };
        if comment {
            break;
        }
        let starts_word = is_word(bytes[at])
            && (at == 0
                || !(is_word(bytes[at - 1]) || bytes[at - 1] == b'.' || bytes[at - 1] == b'$'));
        if !starts_word {
            at += 1;
            continue;
        }
        let word = identifier_at(&line[at..]).unwrap_or("");
        let end = at + word.len().max(1);
        if let Some(bound) = bindings
            .iter()
            .find(|b| b.name == word && !b.values.is_empty())
        {
            let accesses = accesses(&line[end..]);
            if let Some(found) = follow(bound, &accesses, language) {
                return Some(found);
            }
        }
        at = end;
    }
    None
}

/// The index just past the string literal whose opening quote is at `start`
/// (a backslash escapes the next byte; an unclosed string runs to the line's
/// end).
fn end_of_string(bytes: &[u8], start: usize) -> usize {
    let quote = bytes[start];
    let mut at = start + 1;
    while at < bytes.len() {
        match bytes[at] {
            b'\\' => at += 2,
            byte if byte == quote => return at + 1,
            _ => at += 1,
        }
    }
    bytes.len()
}

/// The accesses written right after a name, up to the first that is not a
/// plain property, key or index (a method call ends them: its name is not
/// looked up).
fn accesses(text: &str) -> Vec<Access> {
    let mut found = Vec::new();
    let mut rest = text;
    loop {
        if let Some(after) = rest.strip_prefix('.') {
            let Some(name) = identifier_at(after) else {
                break;
            };
            let next = after[name.len()..].trim_start();
            if next.starts_with('(') {
                break;
            }
            found.push(Access::Dot(name.to_string()));
            rest = &after[name.len()..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let close = match after.find(']') {
                Some(close) => close,
                None => break,
            };
            let inside = after[..close].trim();
            let access = if let Ok(index) = inside.parse::<i64>() {
                Access::Index(index)
            } else {
                let quoted = inside
                    .strip_prefix('"')
                    .and_then(|s| s.strip_suffix('"'))
                    .or_else(|| inside.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')));
                match quoted {
                    Some(key) if identifier_at(key) == Some(key) => Access::Key(key.to_string()),
                    _ => break,
                }
            };
            found.push(access);
            rest = &after[close + 1..];
        } else {
            break;
        }
    }
    found
}

/// Follows `accesses` through each value `bound` holds; the misreading when the
/// path breaks in all of them (reported for the first).
fn follow(bound: &Binding<'_>, accesses: &[Access], language: Language) -> Option<Misreading> {
    let mut first = None;
    for value in &bound.values {
        let broken = break_in(value, accesses, language)?;
        first.get_or_insert(broken);
    }
    let (depth, kind) = first?;
    let at: String = std::iter::once(bound.name.clone())
        .chain(accesses[..depth].iter().map(Access::written))
        .collect();
    Some(Misreading::BrokenPath {
        tool: bound.tool.to_string(),
        name: bound.name.clone(),
        item_of: bound.item_of.clone(),
        part: bound.part,
        at,
        kind,
        access: accesses[depth].clone(),
    })
}

/// Where `accesses` break in `value`: how many succeeded, and what the value
/// there is. `None` when they all lead somewhere (or stop at a length, a
/// string's character, or an access the host does not judge).
fn break_in(value: &Value, accesses: &[Access], language: Language) -> Option<(usize, Kind)> {
    let mut current = value;
    for (depth, access) in accesses.iter().enumerate() {
        let next = match step(current, access, language) {
            Step::Stop => return None,
            Step::Next(next) => next,
        };
        match (next, current, access) {
            (Some(next), _, _) => current = next,
            (None, Value::Array(items), Access::Dot(key) | Access::Key(key)) => {
                let first = items.first().map(|item| items_are(item, key, language));
                return Some((depth, Kind::List(items.len(), first)));
            }
            (None, _, _) => return Some((depth, kind_of(current))),
        }
    }
    None
}

/// One access taken in a value.
enum Step<'a> {
    /// The access leads to this value, or (`None`) nowhere.
    Next(Option<&'a Value>),
    /// The access is one the host does not judge (a length, a string's
    /// character): the path is followed no further.
    Stop,
}

fn step<'a>(current: &'a Value, access: &Access, language: Language) -> Step<'a> {
    Step::Next(match (current, access) {
        (Value::Array(_) | Value::String(_), Access::Dot(name))
            if matches!(name.as_str(), "length" | "len" | "size") =>
        {
            return Step::Stop;
        }
        (Value::String(_), Access::Index(_)) => return Step::Stop,
        (Value::Array(items), Access::Index(index)) => {
            let len = items.len() as i64;
            let at = if *index < 0 && language == Language::Python {
                len + index
            } else {
                *index
            };
            usize::try_from(at).ok().and_then(|at| items.get(at))
        }
        (Value::Object(map), Access::Key(key)) => map.get(key),
        (Value::Object(map), Access::Dot(key)) if language != Language::Python => map.get(key),
        _ => None,
    })
}

/// The value `accesses` lead to in `value`, when they all lead somewhere.
fn value_at<'a>(value: &'a Value, accesses: &[Access], language: Language) -> Option<&'a Value> {
    accesses.iter().try_fold(value, |current, access| {
        match step(current, access, language) {
            Step::Next(next) => next,
            Step::Stop => None,
        }
    })
}

/// What a list's items are, judged by its first, in words for "its items are …",
/// given the key the script wanted of the list.
fn items_are(item: &Value, key: &str, language: Language) -> &'static str {
    match item {
        Value::Number(_) => "numbers",
        Value::String(_) => "strings",
        Value::Bool(_) => "true or false",
        Value::Null => "null",
        Value::Array(_) => "lists",
        Value::Object(map) if map.contains_key(key) => match language {
            Language::Python => "dicts with that key",
            Language::Rhai => "maps with that key",
            Language::JavaScript => "objects with that key",
        },
        Value::Object(_) => match language {
            Language::Python => "dicts without that key",
            Language::Rhai => "maps without that key",
            Language::JavaScript => "objects without that key",
        },
    }
}

fn kind_of(value: &Value) -> Kind {
    match value {
        Value::Number(number) => Kind::Number(number.to_string()),
        Value::String(_) => Kind::Text,
        Value::Bool(flag) => Kind::Bool(*flag),
        Value::Null => Kind::Null,
        Value::Array(items) => Kind::List(items.len(), None),
        Value::Object(map) => Kind::Map(map.keys().cloned().collect()),
    }
}

/// The identifier `text` starts with (ASCII letters, digits, `_`, not starting
/// with a digit; at most [`NAME_MAX`] long).
fn identifier_at(text: &str) -> Option<&str> {
    let end = text.bytes().position(|b| !is_word(b)).unwrap_or(text.len());
    let word = &text[..end];
    (!word.is_empty() && word.len() <= NAME_MAX && !word.as_bytes()[0].is_ascii_digit())
        .then_some(word)
}

fn is_word(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

#[cfg(test)]
mod tests;
