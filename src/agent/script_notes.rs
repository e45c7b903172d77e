//! What the host can tell from a script's text, for feedback a small model can act
//! on: the line an error points at, names the script redefines that the host
//! provides, and whether a script repeats the one that just failed.

/// The helpers every runtime provides, by the same names.
pub use codeact_runtime::HELPER_NAMES as HELPERS;
use codeact_runtime::{ErrorFacts, ErrorKind};

/// The 1-based line a script's error is on, and its text, from the facts the
/// runtime gave ([`ErrorFacts::line`]). For an undefined name (a variable or
/// a function with no match) the given line
/// counts only if it uses the name; else the script's first line that does (a
/// name declared in one block and used outside it: the use, not the
/// declaration, is the line that failed). `None` when the runtime gave no
/// line and no line uses the undefined name, or the line is blank or past the
/// script's end.
pub fn failing_line(facts: Option<&ErrorFacts>, script: &str) -> Option<(usize, String)> {
    let facts = facts?;
    let lines: Vec<&str> = script.lines().collect();
    let given = facts.line.and_then(|n| usize::try_from(n).ok());
    let number = match &facts.kind {
        ErrorKind::UndefinedName { name } | ErrorKind::FunctionNotFound { name, .. } => {
            let named = given.filter(|&number| {
                number
                    .checked_sub(1)
                    .and_then(|index| lines.get(index))
                    .is_some_and(|line| uses_name(line, name))
            });
            match named {
                Some(number) => number,
                None => lines.iter().position(|line| uses_name(line, name))? + 1,
            }
        }
        _ => given?,
    };
    let text = lines.get(number.checked_sub(1)?)?.trim();
    (!text.is_empty()).then(|| (number, text.to_string()))
}

fn uses_name(line: &str, name: &str) -> bool {
    line.match_indices(name).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + name.len()..].chars().next();
        let boundary = |c: Option<char>| c.is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        boundary(before) && boundary(after)
    })
}

/// The names among `provided` (helpers and tools) that `script` defines as its
/// own stand-in, in the forms models write: `def NAME(`, `function NAME(`, `fn
/// NAME(`, or `let|const|var NAME =` (or `NAME = ` at the start of a line)
/// followed by a function or an object (`function`, an arrow, `lambda`, a
/// Rhai closure or `Fn(…)`, `{…}`, `#{…}`). A variable holding a value (`const
/// weather = tools.weather({…})`, `let weather = weather(#{…})`) stands in
/// for nothing: it holds what the tool returned.
pub fn redefined_names<'a>(script: &str, provided: &'a [String]) -> Vec<&'a str> {
    let mut found: Vec<&str> = Vec::new();
    for line in script.lines() {
        let line = line.trim_start();
        let rest = [
            "def ",
            "function ",
            "fn ",
            "let ",
            "const ",
            "var ",
            "async def ",
        ]
        .iter()
        .find_map(|keyword| line.strip_prefix(keyword))
        .unwrap_or(line)
        .trim_start();
        let name_len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let (name, after) = rest.split_at(name_len);
        let after = after.trim_start();
        let defines = after.starts_with('(') && rest.len() != line.len()
            || (after.starts_with('=')
                && !after.starts_with("==")
                && !after.starts_with("=>")
                && stands_in(after[1..].trim_start()));
        if !defines || name.is_empty() {
            continue;
        }
        if let Some(provided) = provided.iter().find(|p| p.as_str() == name)
            && !found.contains(&provided.as_str())
        {
            found.push(provided.as_str());
        }
    }
    found
}

/// Whether the right-hand side of an assignment is a function or an object
/// (what can stand in for a tool), not a value computed from a call.
fn stands_in(value: &str) -> bool {
    let starts_arrow = || {
        // `(a) => …`, `a => …`, `async (a) => …`.
        let head = value.split(['\n', ';']).next().unwrap_or_default();
        head.contains("=>")
            && (value.starts_with('(')
                || head
                    .split_once("=>")
                    .is_some_and(|(params, _)| is_sayable_name(params.trim())))
    };
    [
        "function", "async ", "lambda", "class ", "Fn(", "{", "#{", "|",
    ]
    .iter()
    .any(|start| value.starts_with(start))
        || starts_arrow()
}

/// Whether a tool call's `args` hold a value (a string, or a number's text;
/// looked for inside arrays and objects, keys aside) that appears in none of
/// `seen`: the task, the host's messages, the tool results the script got. Such
/// a value was made up by the model (an id, a name). Booleans, null and empty
/// strings say nothing either way.
pub fn has_unseen_value(args: &serde_json::Value, seen: &[String]) -> bool {
    use serde_json::Value;
    match args {
        Value::String(text) => {
            let text = text.trim();
            !text.is_empty() && !seen.iter().any(|s| s.contains(text))
        }
        Value::Number(number) => {
            let text = number.to_string();
            !seen.iter().any(|s| s.contains(&text))
        }
        Value::Array(items) => items.iter().any(|item| has_unseen_value(item, seen)),
        Value::Object(map) => map.values().any(|item| has_unseen_value(item, seen)),
        Value::Bool(_) | Value::Null => false,
    }
}

/// Whether a script's line does nothing but load a module: `import requests`,
/// `from os import path` (Python), `import x from "y"` and `const fs =
/// require("fs")` (JavaScript), `import "m" as m;` (Rhai). Deleting such a line
/// is the fix when the module does not exist here.
pub fn is_import_line(line: &str) -> bool {
    let line = line.trim();
    line.starts_with("import ")
        || (line.starts_with("from ") && line.contains(" import "))
        || line.contains("require(")
}

/// `reply` without its `<think>…</think>` blocks (an unclosed one runs to the
/// end), where reasoning models write drafts that must not run.
pub fn without_thinking(reply: &str) -> String {
    let mut out = String::new();
    let mut rest = reply;
    while let Some(start) = rest.find("<think>") {
        out.push_str(&rest[..start]);
        match rest[start..].find("</think>") {
            Some(end) => rest = &rest[start + end + "</think>".len()..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

/// A Python line that assigns a tool's result (`result =
/// get_weather("Munich")`) written to catch the tool's error and assign `None`
/// instead, at the line's indent, when `script` then tests that name for `None`
/// (`if result is None:`, `if not result:`): the script was written for a tool
/// that answers `None` when it fails. `tools` are the host's tools' names.
///
/// Why: a small model's stub of `get_weather` returned `None` for an unknown
/// city and its script then asked another; with the stub taken out, the host's
/// tool raised `ToolError` at that line four times over.
pub fn catching_tool_error(line: &str, script: &str, tools: &[&str]) -> Option<String> {
    let indent = &line[..line.len() - line.trim_start().len()];
    let (name, value) = line.trim().split_once('=')?;
    let (name, value) = (name.trim(), value.trim());
    if !is_plain_name(name) || value.starts_with('=') {
        return None;
    }
    let called = value.split('(').next()?.trim();
    if !tools.contains(&called) || !value.ends_with(')') {
        return None;
    }
    let tests_none = [
        format!("{name} is None"),
        format!("not {name}"),
        format!("{name} == None"),
    ]
    .iter()
    .any(|test| {
        script
            .lines()
            .any(|other| uses_bare_name(other, name) && other.contains(test.as_str()))
    });
    tests_none.then(|| {
        format!(
            "{indent}try:\n{indent}    {name} = {value}\n{indent}except ToolError:\n{indent}    {name} = None"
        )
    })
}

/// [`catching_tool_error`] for 1-based line `number` of `script`, with the `if`
/// block that tests the name when it follows at once (shown the catch alone, a
/// small model wrote it over its fallback to another city): the last line
/// replaced and the lines to write in their place.
pub fn catching_tool_error_at(
    number: usize,
    script: &str,
    tools: &[&str],
) -> Option<(usize, String)> {
    let lines: Vec<&str> = script.lines().collect();
    let line = *lines.get(number.checked_sub(1)?)?;
    let mut caught = catching_tool_error(line, script, tools)?;
    let indent = line.len() - line.trim_start().len();
    let name = line.split_once('=')?.0.trim();
    let mut last = number;
    let test_follows = lines.get(number).is_some_and(|next| {
        next.len() - next.trim_start().len() == indent
            && next.trim_start().starts_with("if ")
            && uses_bare_name(next, name)
    });
    if test_follows {
        for (at, body) in lines.iter().enumerate().skip(number) {
            let inside = body.len() - body.trim_start().len() > indent && !body.trim().is_empty();
            if at > number && !inside {
                break;
            }
            caught.push('\n');
            caught.push_str(body);
            last = at + 1;
        }
    }
    Some((last, caught))
}

/// Scripts of more lines keep every import: each import is looked for in
/// every line, so a script of many thousand (a model's, or an attacker's
/// through it) would cost the host seconds per step.
const IMPORTS_FOLLOWED_LINES: usize = 2_000;

/// A Python script with the host's tools' stubs taken out
/// ([`without_python_defs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WithoutStubs {
    /// The script to run: the stubs' lines are blank, so every other line
    /// keeps its number.
    pub code: String,
    /// The tools whose definitions were taken out.
    pub removed: Vec<String>,
    /// The import lines taken out with them (`import requests`), by their
    /// index in `code`'s lines: only the stubs used what they import.
    pub imports: Vec<(usize, String)>,
    /// Each stub's `def` line, by its index in `code`'s lines, and the tool.
    pub headers: Vec<(usize, String, String)>,
}

/// `script` (Python) without its `def` blocks for any of `names`, and without
/// the top-level imports that only those blocks used. A block is the `def` line
/// and every line after it that is blank or indented deeper.
///
/// Why the imports: a small model's stub of `get_weather` called
/// `requests.get`; with the stub gone, `import requests` alone failed the
/// script, and the model sent it back unchanged until its errors ran out.
pub fn without_python_defs(script: &str, names: &[&str]) -> WithoutStubs {
    let mut kept: Vec<&str> = Vec::new();
    let mut removed: Vec<String> = Vec::new();
    let mut headers = Vec::new();
    let mut removed_text = String::new();
    let mut skipping: Option<usize> = None;
    for line in script.lines() {
        let indent = line.len() - line.trim_start().len();
        if let Some(depth) = skipping {
            if line.trim().is_empty() || indent > depth {
                removed_text.push_str(line);
                removed_text.push('\n');
                kept.push("");
                continue;
            }
            skipping = None;
        }
        let trimmed = line.trim_start();
        let defined = trimmed
            .strip_prefix("def ")
            .or_else(|| trimmed.strip_prefix("async def "))
            .and_then(|rest| rest.split('(').next())
            .map(str::trim)
            .filter(|name| names.contains(name));
        match defined {
            Some(name) => {
                skipping = Some(indent);
                if !removed.iter().any(|r| r == name) {
                    removed.push(name.to_string());
                }
                headers.push((kept.len(), name.to_string(), line.to_string()));
                kept.push("");
            }
            None => kept.push(line),
        }
    }
    let mut imports = Vec::new();
    if !removed.is_empty() && kept.len() <= IMPORTS_FOLLOWED_LINES {
        let only_the_stubs_use = |index: usize, bound: &[&str]| {
            let elsewhere = |name: &str| {
                kept.iter()
                    .enumerate()
                    .any(|(at, line)| at != index && uses_bare_name(line, name))
            };
            !bound.is_empty()
                && bound
                    .iter()
                    .all(|name| uses_bare_name(&removed_text, name) && !elsewhere(name))
        };
        let dropped: Vec<usize> = (0..kept.len())
            .filter(|&index| {
                let line = kept[index];
                !line.starts_with([' ', '\t'])
                    && imported_names(line).is_some_and(|bound| only_the_stubs_use(index, &bound))
            })
            .collect();
        for index in dropped {
            imports.push((index, kept[index].trim().to_string()));
            kept[index] = "";
        }
    }
    WithoutStubs {
        code: kept.join("\n"),
        removed,
        imports,
        headers,
    }
}

/// A one-line definition to stand where a Python stub of a tool was, when the
/// stub gave its parameters defaults (`def read_file(name="sales.csv"):`): it
/// calls the host's tool with the script's arguments, or the stub's defaults
/// (`def read_file(name="sales.csv", _host_tool=read_file): return
/// _host_tool(name=name)`), and the defaults as the stub wrote them, for the
/// note. None when the stub has no default, a default that is not a plain
/// string or number, or a parameter the tool's `parameters` lack.
///
/// Why: a small model's stubs of `read_file` named their file only in the
/// default and called `read_file()`; with the stub taken out, the host's tool
/// got no name, and the model sent the script back unchanged until its errors
/// ran out.
pub fn stub_with_defaults(
    header: &str,
    tool: &str,
    parameters: &[&str],
) -> Option<(String, String)> {
    let stub = stub_parameters(header, tool)?;
    if stub.iter().any(|(name, _)| !parameters.contains(name)) {
        return None;
    }
    let defaults: Vec<String> = stub
        .iter()
        .filter_map(|(name, default)| default.map(|default| format!("{name}={default}")))
        .collect();
    if defaults.is_empty() {
        return None;
    }
    let passed: Vec<String> = stub
        .iter()
        .map(|(name, _)| format!("{name}={name}"))
        .collect();
    let body = format!("_host_tool({})", passed.join(", "));
    Some((stub_shim(header, tool, &stub, &body), defaults.join(", ")))
}

/// A one-line definition to stand where a Python stub of a tool that read a
/// file was: it returns `reading` (the stub's own expression with the host's
/// tool in place of `open`, from `file_stubs::reading_of_parameter`), with the
/// stub's parameters and defaults. None when a parameter is not a plain name
/// with at most a plain default.
///
/// Why: told to write
/// `list(csv.reader(read_file(name="sales.csv").splitlines()))` in place of its
/// calls, a small model sent its stub back each time, and its rows were the
/// file's characters.
pub fn stub_with_reading(header: &str, tool: &str, reading: &str) -> Option<String> {
    let stub = stub_parameters(header, tool)?;
    let call = format!("{tool}(");
    let at = reading.find(&call)?;
    let body = format!(
        "{}_host_tool({}",
        &reading[..at],
        &reading[at + call.len()..]
    );
    Some(stub_shim(header, tool, &stub, &body))
}

/// Whether every parameter of a stub's plain `def` line has a default, so
/// calling it without arguments does what the script meant.
pub fn all_parameters_defaulted(header: &str, tool: &str) -> bool {
    stub_parameters(header, tool)
        .is_some_and(|stub| stub.iter().all(|(_, default)| default.is_some()))
}

/// `def TOOL(PARAMS, _host_tool=TOOL): return BODY` at the header's indent.
fn stub_shim(header: &str, tool: &str, stub: &[(&str, Option<&str>)], body: &str) -> String {
    let indent = &header[..header.len() - header.trim_start().len()];
    let mut own: Vec<String> = stub
        .iter()
        .map(|(name, default)| match default {
            Some(default) => format!("{name}={default}"),
            None => name.to_string(),
        })
        .collect();
    own.push(format!("_host_tool={tool}"));
    format!("{indent}def {tool}({}): return {body}", own.join(", "))
}

/// The parameters of a stub's `def` line, by name, with their defaults: None
/// unless each is a plain name with at most a plain literal default (an
/// annotation aside), and the line is a definition of `tool`.
fn stub_parameters<'a>(header: &'a str, tool: &str) -> Option<Vec<(&'a str, Option<&'a str>)>> {
    let inside = header
        .trim()
        .strip_prefix("def ")?
        .strip_prefix(tool)?
        .trim_start()
        .strip_prefix('(')?;
    let close = closing_paren(inside)?;
    let after = inside[close + 1..].trim_start();
    if !(after.starts_with(':') || after.starts_with("->")) {
        return None;
    }
    let mut stub = Vec::new();
    for param in split_top_level(&inside[..close]) {
        let param = param.trim();
        if param.is_empty() {
            continue;
        }
        let (name_part, default) = match param.split_once('=') {
            Some((name, default)) => (name, Some(default.trim())),
            None => (param, None),
        };
        let name = name_part.split(':').next().unwrap_or_default().trim();
        if !is_plain_name(name) || default.is_some_and(|default| !is_plain_literal(default)) {
            return None;
        }
        stub.push((name, default));
    }
    Some(stub)
}

/// The parameter names of a tool's card signature (`read_file(name=string)`,
/// `list_orders(customer=string|None)`).
pub fn signature_parameters(signature: &str) -> Vec<&str> {
    let Some(inside) = signature
        .split_once('(')
        .and_then(|(_, rest)| rest.rsplit_once(')'))
        .map(|(inside, _)| inside)
    else {
        return Vec::new();
    };
    inside
        .split(',')
        .map(|part| {
            part.split(['=', ':', '?'])
                .next()
                .unwrap_or_default()
                .trim()
        })
        .filter(|name| is_plain_name(name))
        .collect()
}

/// The offset of the `)` that closes the bracket just before `text` (a call's
/// arguments), past nested brackets and quoted text (`"`, `'`, or a backtick).
pub fn closing_paren(text: &str) -> Option<usize> {
    let (mut depth, mut quote) = (0usize, None::<char>);
    for (at, c) in text.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '"' | '\'' | '`' => quote = Some(c),
                '(' | '[' | '{' => depth += 1,
                ')' if depth == 0 => return Some(at),
                ')' | ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
    }
    None
}

/// `text` split at the commas outside brackets and quotes.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut quote, mut start) = (0usize, None::<char>, 0usize);
    for (at, c) in text.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '"' | '\'' => quote = Some(c),
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => depth = depth.saturating_sub(1),
                ',' if depth == 0 => {
                    parts.push(&text[start..at]);
                    start = at + 1;
                }
                _ => {}
            },
        }
    }
    parts.push(&text[start..]);
    parts
}

/// The longest observed name the host repeats in its own words.
pub const SAYABLE_NAME_CHARS: usize = 40;

/// Whether `text` is a variable's name the host may repeat in its own words:
/// ASCII letters, digits and `_`, not starting with a digit, at most
/// [`SAYABLE_NAME_CHARS`] bytes (`result`, `orders_2`).
pub fn is_sayable_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= SAYABLE_NAME_CHARS
        && !text.starts_with(|c: char| c.is_ascii_digit())
        && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn is_plain_name(text: &str) -> bool {
    !text.is_empty()
        && !text.starts_with(|c: char| c.is_ascii_digit())
        && text.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// A short Python string or number literal, with nothing a note could not
/// quote: `"sales.csv"`, `'EUR'`, `20`, `-1.5`.
fn is_plain_literal(text: &str) -> bool {
    let quoted = ['"', '\''].iter().any(|&q| {
        text.len() >= 2
            && text.starts_with(q)
            && text.ends_with(q)
            && text[1..text.len() - 1]
                .chars()
                .all(|c| c != q && c != '\\' && c != '`' && !c.is_control())
    });
    let number = text.trim_start_matches('-').parse::<f64>().is_ok()
        && text
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.' || c == '-');
    text.len() <= 60 && (quoted || number)
}

/// Whether `code` uses a name the Python import `line` binds.
pub fn uses_import(line: &str, code: &str) -> bool {
    imported_names(line).is_some_and(|bound| bound.iter().any(|name| uses_bare_name(code, name)))
}

/// The names a Python import line binds: `import a.b as c` binds `c`,
/// `import a.b` binds `a`, `from m import x, y as z` binds `x` and `z`. None
/// for any other line, and for `from m import *`, which binds names no one
/// can list.
fn imported_names(line: &str) -> Option<Vec<&str>> {
    let line = line.trim();
    let list = if let Some(rest) = line.strip_prefix("import ") {
        rest
    } else {
        let rest = line.strip_prefix("from ")?;
        rest.split_once(" import ")?.1
    };
    let list = list.trim().trim_start_matches('(').trim_end_matches(')');
    let mut bound = Vec::new();
    for item in list.split(',') {
        let item = item.trim();
        let name = match item.rsplit_once(" as ") {
            Some((_, alias)) => alias.trim(),
            None if line.starts_with("import ") => item.split('.').next()?.trim(),
            None => item,
        };
        if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
            return None;
        }
        bound.push(name);
    }
    Some(bound)
}

/// Whether `text` uses `name` as a whole name, not an attribute (`x.name`)
/// nor part of a longer name (`name_2`).
fn uses_bare_name(text: &str, name: &str) -> bool {
    let is_name_char = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(name).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        before.is_none_or(|c| !is_name_char(c) && c != '.')
            && after.is_none_or(|c| !is_name_char(c))
    })
}

/// What starts a function's definition at the top level, in Python,
/// JavaScript and Rhai.
const DEFINING: &[&str] = &[
    "def ",
    "async def ",
    "function ",
    "async function ",
    "fn ",
    "private fn ",
];

/// The functions a script defines when it only defines them: every line at the
/// top level (not indented) is a definition, an import, a decorator, a comment
/// or a closing brace, so nothing ran. Empty when the script does anything
/// else, or defines nothing. Names are letters, digits and `_` only.
///
/// Why: a small model wrote Python "libraries" (a `def` for the tool, one for
/// the filter, one for `final_result`) and was told only that its script ended
/// without a value; it then answered from memory.
pub fn uncalled_definitions(script: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for line in script.lines() {
        if line.trim().is_empty() || line.starts_with([' ', '\t']) {
            continue;
        }
        let defined = DEFINING
            .iter()
            .find_map(|keyword| line.strip_prefix(keyword))
            .map(|rest| rest.split('(').next().unwrap_or_default().trim());
        match defined {
            Some(name)
                if !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_') =>
            {
                if !names.iter().any(|n| n == name) {
                    names.push(name.to_string());
                }
            }
            Some(_) => return Vec::new(),
            None => {
                let quiet = ["import ", "from ", "@", "#", "//", "}"]
                    .iter()
                    .any(|start| line.starts_with(start));
                if !quiet {
                    return Vec::new();
                }
            }
        }
    }
    names
}

/// How many parameters the function `name` that `script` defines takes
/// (`def name(a, b):`, `function name(a)`, `fn name()`), when its
/// definition's header is on one line.
pub fn parameter_count(script: &str, name: &str) -> Option<usize> {
    script.lines().find_map(|line| {
        let rest = DEFINING
            .iter()
            .find_map(|keyword| line.strip_prefix(keyword))?;
        let inside = rest.strip_prefix(name)?.trim_start().strip_prefix('(')?;
        let inside = inside.split_once(')')?.0.trim();
        Some(if inside.is_empty() {
            0
        } else {
            inside.split(',').filter(|p| !p.trim().is_empty()).count()
        })
    })
}

/// Whether a short piece of a script can stand in the host's own words, quoted as
/// code: at most 60 characters of names, numbers, operators, brackets, dots,
/// commas, `=` and quotes, with no two words side by side (so it cannot carry a
/// sentence). `17 * 23`, `total`, `price(item="cheese")` pass; prose does not.
pub fn reads_as_plain_code(snippet: &str) -> bool {
    let allowed = |c: char| c.is_ascii_alphanumeric() || " _.+-*/%()[],=\"'".contains(c);
    if snippet.is_empty() || snippet.len() > 60 || !snippet.chars().all(allowed) {
        return false;
    }
    // No letter, spaces, letter: two words side by side could start a sentence.
    let chars: Vec<char> = snippet.chars().collect();
    !chars.iter().enumerate().any(|(i, c)| {
        let after = chars[i + 1..].iter().skip_while(|c| **c == ' ');
        *c == ' '
            && i > 0
            && chars[i - 1].is_ascii_alphabetic()
            && after
                .clone()
                .next()
                .is_some_and(|n| n.is_ascii_alphabetic())
    })
}

/// Whether two scripts are the same once blank lines and surrounding space on
/// each line are ignored.
pub fn same_script(a: &str, b: &str) -> bool {
    let normal = |s: &str| -> Vec<String> {
        s.lines()
            .map(|line| line.trim().to_string())
            .filter(|line| !line.is_empty())
            .collect()
    };
    normal(a) == normal(b)
}

/// The argument of a last line that prints (`print(x)`, `console.log(x)`), for a
/// hint that shows `final_result(x)` instead.
pub fn printed_expression(script: &str) -> Option<String> {
    let last = script.lines().rev().find(|l| !l.trim().is_empty())?.trim();
    let last = last.strip_suffix(';').unwrap_or(last).trim_end();
    ["print(", "console.log("]
        .iter()
        .find_map(|call| last.strip_prefix(call))
        .and_then(|rest| rest.strip_suffix(')'))
        .map(str::trim)
        .filter(|inner| !inner.is_empty() && !inner.contains('\n'))
        .map(String::from)
}

/// The argument of a last line that observes (`observation(x)`), for a hint
/// that shows `final_result(x)`.
pub fn observed_expression(script: &str) -> Option<String> {
    let last = script.lines().rev().find(|l| !l.trim().is_empty())?.trim();
    let last = last.strip_suffix(';').unwrap_or(last).trim_end();
    last.strip_prefix("observation(")
        .and_then(|rest| rest.strip_suffix(')'))
        .map(str::trim)
        .filter(|inner| !inner.is_empty())
        .map(String::from)
}

/// `script` up to its last non-blank line, that line written as
/// `replacement` (its indentation and a closing `;` kept): the script that
/// ends with a call where it ended with an observation. Blank lines at its
/// start go, and a run of them becomes one (a stub taken out leaves them).
pub fn with_last_line_as(script: &str, replacement: &str) -> String {
    let lines: Vec<&str> = script.lines().collect();
    let Some(last) = lines.iter().rposition(|line| !line.trim().is_empty()) else {
        return replacement.to_string();
    };
    let line = lines[last];
    let indent = &line[..line.len() - line.trim_start().len()];
    let semicolon = if line.trim_end().ends_with(';') {
        ";"
    } else {
        ""
    };
    let mut out: Vec<String> = Vec::new();
    for line in &lines[..last] {
        let blank = line.trim().is_empty();
        if blank
            && out
                .last()
                .is_none_or(|previous: &String| previous.trim().is_empty())
        {
            continue;
        }
        out.push(if blank {
            String::new()
        } else {
            line.to_string()
        });
    }
    out.push(format!("{indent}{replacement}{semicolon}"));
    out.join("\n")
}

/// The method a runtime could not find for a receiver of `()` (Rhai's
/// `join` on `()`): the value before the dot was nothing, most often what an
/// in-place method returned (`parts.sort().join(" ")`). The name as the
/// runtime gave it, when it is a plain name of at most 64 characters.
pub fn called_on_unit(kind: &ErrorKind) -> Option<String> {
    let ErrorKind::FunctionNotFound {
        name,
        receiver: Some(receiver),
    } = kind
    else {
        return None;
    };
    let plain = !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    (plain && receiver == "()").then(|| name.clone())
}

/// Rhai's methods of arrays that take a closure first: called bare
/// (`reduce(|sum, x| sum + x, 0)`), Rhai looks for a function of a closure and
/// finds none.
const CLOSURE_METHODS: &[&str] = &[
    "map",
    "filter",
    "reduce",
    "reduce_rev",
    "some",
    "all",
    "find",
    "find_map",
    "retain",
    "index_of",
    "sort",
    "drain",
    "dedup",
    "for_each",
];

/// A method of arrays called without its array (a function `reduce` not
/// found for a first argument of type `Fn`, for `let total = reduce(|s, o| s + o.amount, 0)`): the method,
/// the failing `line` rewritten to call it on `array`, its arguments left out
/// (`let total = orders.reduce(...)`), when what comes before the call is plain
/// (`let total = `) and can be quoted in the host's words, and the whole line
/// rewritten so (model code: quoted only fenced).
pub fn bare_array_method(
    kind: &ErrorKind,
    line: &str,
    array: &str,
) -> Option<(String, Option<String>, String)> {
    let ErrorKind::FunctionNotFound {
        name,
        receiver: Some(receiver),
    } = kind
    else {
        return None;
    };
    let name = name.as_str();
    if !CLOSURE_METHODS.contains(&name) || !receiver.starts_with("Fn") {
        return None;
    }
    let call = format!("{name}(");
    let at = line.match_indices(&call).map(|(at, _)| at).find(|&at| {
        line[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '.'))
    })?;
    let before = line[..at].trim_start();
    let plain = before.len() <= 60
        && before
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ' ' || c == '=');
    let example = plain.then(|| format!("{before}{array}.{name}(...)"));
    let rewritten = format!("{}{array}.{}", &line[..at], line[at..].trim_end())
        .trim()
        .to_string();
    Some((name.to_string(), example, rewritten))
}

/// Rhai's methods that change their array or string in place and return `()`,
/// which models chain as in JavaScript (`.sort().join(…)`, `.trim().split(…)`).
/// Not `reverse`: codeact's returns the array too (`codeact_rhai`'s spellings).
const IN_PLACE_METHODS: &[&str] = &[
    "sort",
    "push",
    "append",
    "insert",
    "clear",
    "truncate",
    "dedup",
    "chop",
    "pad",
    "splice",
    "trim",
    "make_upper",
    "make_lower",
    "crop",
];

/// The first of Rhai's in-place methods a line calls (`.sort(`), if any.
pub fn in_place_method(line: &str) -> Option<&'static str> {
    IN_PLACE_METHODS
        .iter()
        .copied()
        .filter_map(|method| line.find(&format!(".{method}(")).map(|at| (at, method)))
        .min()
        .map(|(_, method)| method)
}

/// The index and the length of an index past a list's end, when the runtime
/// gave both and the index is at or past the length: the feedback then says
/// which indexes exist, since a small model otherwise lowers the index and the
/// loop together, step after step.
pub fn index_out_of_bounds(kind: &ErrorKind) -> Option<(u64, u64)> {
    let ErrorKind::IndexOutOfBounds {
        index: Some(index),
        length: Some(length),
    } = kind
    else {
        return None;
    };
    let index = u64::try_from(*index).ok()?;
    (index >= *length).then_some((index, *length))
}

/// A Rhai mistake a small model makes even though the prompt card warns of it,
/// found in a script's text: a final result resting on one is held back once
/// with this account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RhaiPitfall {
    /// The 1-based line it is on.
    pub line: usize,
    /// What the script wrote: digits and operators, or a call on an identifier
    /// of at most 40 letters, digits and `_`, so the host may quote it in its
    /// own words.
    pub written: String,
    /// What that does in Rhai, and what to write instead, in the host's words.
    pub account: String,
}

/// Whether a tool's signature, as a card shows it (`tools.get_user({user_id:
/// integer})`, `get_user(user_id=integer)`), has an argument named `id` or
/// ending in `_id` or `Id`.
pub fn takes_an_id(signature: &str) -> bool {
    let arguments = signature.split_once('(').map_or("", |(_, rest)| rest);
    arguments
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(|word| {
            word == "id" || word.ends_with("_id") || (word.len() > 2 && word.ends_with("Id"))
        })
}

/// A call of the tool with this `signature` (as [`takes_an_id`] reads it)
/// passing `id` as its id argument, when that is its only argument:
/// `get_user(user_id=integer)` gives `get_user(user_id=42)`. `None` for a
/// tool of more arguments or none named like an id.
pub fn call_with_id(signature: &str, id: i64) -> Option<String> {
    let (name, arguments) = signature.split_once('(')?;
    if arguments.contains(',') || !takes_an_id(signature) {
        return None;
    }
    let type_start = arguments.find(['=', ':'])? + 1;
    let type_end = arguments[type_start..]
        .find(['}', ')'])
        .map_or(arguments.len(), |end| type_start + end);
    let spaced = if arguments[type_start..].starts_with(' ') {
        " "
    } else {
        ""
    };
    Some(format!(
        "{name}({}{spaced}{id}{}",
        &arguments[..type_start],
        &arguments[type_end..]
    ))
}

/// A map key tested for truth on `line`, when the runtime said a condition got
/// `()` ([`ErrorKind::UnitCondition`]): JavaScript's `if (counts[w])` on a
/// missing key in Rhai. `None` when the error is another; `Some(None)` when the
/// line has no `if m[k]` (or `if !m[k]`) between plain names; else the map, the
/// key and whether the test was negated, so the host can write `if k in m`.
pub fn unit_condition(kind: &ErrorKind, line: &str) -> Option<Option<(String, String, bool)>> {
    if *kind != ErrorKind::UnitCondition {
        return None;
    }
    let plain = |text: &str| {
        !text.is_empty()
            && text.len() <= 40
            && !text.starts_with(|c: char| c.is_ascii_digit())
            && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let found = line
        .find("if ")
        .map(|at| line[at + 3..].trim_start())
        .and_then(|condition| {
            let condition = condition
                .strip_prefix('(')
                .unwrap_or(condition)
                .trim_start();
            let (negated, condition) = match condition.strip_prefix('!') {
                Some(rest) => (true, rest.trim_start()),
                None => (false, condition),
            };
            let (map, rest) = condition.split_once('[')?;
            let (key, _) = rest.split_once(']')?;
            let (map, key) = (map.trim(), key.trim());
            (plain(map) && plain(key)).then(|| (map.to_string(), key.to_string(), negated))
        });
    Some(found)
}

/// The Rhai pitfalls in `script`, in order: a range `1..N` between integer
/// literals (it stops at N - 1; counting from 1 means to N, `1..=N`), `A^B`
/// between integer literals (bitwise XOR in Rhai; a power is `A**B`), and
/// `c.to_int()` on a string's characters (their codes, not digits). Text in
/// strings and comments is not told apart: a pitfall there is rare and costs
/// one held result at most.
pub fn rhai_pitfalls(script: &str) -> Vec<RhaiPitfall> {
    let mut found = Vec::new();
    for (index, line) in script.lines().enumerate() {
        let bytes = line.as_bytes();
        let mut at = 0;
        while at < bytes.len() {
            if !bytes[at].is_ascii_digit() || (at > 0 && is_word_byte(bytes[at - 1])) {
                at += 1;
                continue;
            }
            let (left, after_left) = digits_at(bytes, at);
            let operator_at = skip_spaces(bytes, after_left);
            let range = bytes[operator_at..].starts_with(b"..")
                && !bytes[operator_at..].starts_with(b"..=")
                && !bytes[operator_at..].starts_with(b"...");
            let xor = bytes.get(operator_at) == Some(&b'^');
            let right_at = skip_spaces(bytes, operator_at + if range { 2 } else { 1 });
            let right =
                (range || xor)
                    .then(|| digits_at(bytes, right_at))
                    .filter(|(digits, end)| {
                        !digits.is_empty()
                            && bytes
                                .get(*end)
                                .is_none_or(|b| !is_word_byte(*b) && *b != b'.')
                    });
            let Some((right, end)) = right else {
                at = after_left.max(at + 1);
                continue;
            };
            let written = line[at..end].to_string();
            if range && left == "1" {
                let last = right.parse::<u64>().ok().and_then(|n| n.checked_sub(1));
                if let Some(last) = last {
                    found.push(RhaiPitfall {
                        line: index + 1,
                        account: format!(
                            "`{written}` stops at {last}: in Rhai the end of `a..b` is excluded. To include {right}, write `1..={right}`."
                        ),
                        written,
                    });
                }
            } else if xor {
                let value = left
                    .parse::<i64>()
                    .ok()
                    .zip(right.parse::<i64>().ok())
                    .map(|(a, b)| a ^ b);
                if let Some(value) = value {
                    found.push(RhaiPitfall {
                        line: index + 1,
                        account: format!(
                            "`{written}` is bitwise XOR in Rhai (it gives {value}), not a power. A power is written `{left}**{right}`."
                        ),
                        written,
                    });
                }
            }
            at = end;
        }
    }
    found.extend(character_codes_taken_for_digits(script));
    found.sort_by_key(|pitfall| pitfall.line);
    found
}

/// `c.to_int()` on the name of a loop over a string's characters (`for c in
/// n.to_string()`, or a name set from `.to_string()` or a string literal): in
/// Rhai that is the character's code ('7' gives 55), where a model means the
/// digit. The loop's name is quoted: an identifier of at most 40 letters,
/// digits and `_`.
fn character_codes_taken_for_digits(script: &str) -> Vec<RhaiPitfall> {
    let texts: Vec<&str> = script
        .lines()
        .filter_map(|line| {
            let rest = line.trim_start().strip_prefix("let ")?.trim_start();
            let (name, value) = rest.split_once('=')?;
            let value = value.trim().trim_end_matches(';').trim_end();
            (value.ends_with(".to_string()") || value.starts_with('"')).then(|| name.trim())
        })
        .collect();
    let mut found = Vec::new();
    let mut loops: Vec<String> = Vec::new();
    for (index, line) in script.lines().enumerate() {
        if let Some(rest) = line.trim_start().strip_prefix("for ") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let over = rest[name.len()..]
                .trim_start()
                .strip_prefix("in ")
                .map(|over| over.split('{').next().unwrap_or("").trim());
            let over_text = over.is_some_and(|over| {
                over.ends_with(".to_string()")
                    || over.ends_with(".chars")
                    || over.ends_with(".chars()")
                    || over.starts_with('"')
                    || texts.contains(&over)
            });
            if over_text
                && !name.is_empty()
                && name.len() <= 40
                && !name.starts_with(|c: char| c.is_ascii_digit())
            {
                loops.push(name);
            }
        }
        for name in &loops {
            let call = format!("{name}.to_int()");
            let standalone = line.match_indices(&call).any(|(at, _)| {
                line[..at]
                    .chars()
                    .next_back()
                    .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            });
            if standalone && !found.iter().any(|p: &RhaiPitfall| p.written == call) {
                found.push(RhaiPitfall {
                    line: index + 1,
                    account: format!(
                        "`{call}` gives the character's code in Rhai ('7' gives 55), not the digit's value. For the digit, write `{name}.to_string().parse_int()`."
                    ),
                    written: call,
                });
            }
        }
    }
    found
}

fn is_word_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'.'
}

/// The digits starting at `at`, and where they end.
fn digits_at(bytes: &[u8], at: usize) -> (String, usize) {
    let end = (at..bytes.len())
        .find(|&i| !bytes[i].is_ascii_digit())
        .unwrap_or(bytes.len());
    (
        String::from_utf8_lossy(&bytes[at.min(end)..end]).into_owned(),
        end,
    )
}

fn skip_spaces(bytes: &[u8], at: usize) -> usize {
    (at..bytes.len())
        .find(|&i| bytes[i] != b' ')
        .unwrap_or(bytes.len())
}

#[cfg(test)]
mod tests;
