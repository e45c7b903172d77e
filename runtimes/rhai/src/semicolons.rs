//! Missing statement semicolons, inserted where Rhai's parser asks for them.
//!
//! Models trained mostly on Python and JavaScript often end Rhai statements with a
//! line break instead of `;` (`let sum = 0` ⏎ `for …`), and small ones repeat the
//! mistake however the error is phrased. When the parser's only complaint is a
//! missing `;` before a statement that starts a line, the `;` belongs at the end of
//! the previous line: it is added there and the script parsed again, up to
//! [`MAX_INSERTIONS`] times. A script that still fails reports its original error;
//! one that parses is what the model meant. The insertion is silent: told about it,
//! small models took the note for an error and rewrote working scripts.

use rhai::{AST, Engine, ParseError, ParseErrorType};

/// Semicolons inserted into one script at most.
const MAX_INSERTIONS: usize = 64;

/// A script that did not parse even with the semicolons it was missing.
#[derive(Debug)]
pub(crate) struct StillBroken {
    /// The error of the last attempt: the first problem that is not a missing `;`.
    pub error: ParseError,
    /// The source that error's position refers to (the script with the `;` added;
    /// lines and columns are those of the original up to each line's end).
    pub source: String,
}

/// Compiles `script`, inserting missing statement semicolons as described above.
/// Returns the AST and the 1-based lines that got a `;`.
///
/// An empty `{}` where a value goes (`let counts = {};`, `f({})`) is an empty
/// map (`#{}`) from the start: in Rhai it is an empty block whose value is `()`,
/// which no script means there, and small models kept it however the error
/// was explained. A script that still fails is tried once more with
/// JavaScript-style map literals (`read_file({name: "a"})`, `let m = {a: 1};`)
/// written the Rhai way (`#{…}`) and JavaScript loop headers (`for (let x of
/// xs) {`) as Rhai's (`for x in xs {`), and `null` as `()`; when that compiles
/// it runs, else the first attempt's error stands.
pub(crate) fn compile_lenient(
    engine: &Engine,
    script: &str,
) -> Result<(AST, Vec<usize>), StillBroken> {
    let emptied = map_literals(script, true);
    let script = emptied.as_deref().unwrap_or(script);
    let broken = match with_semicolons(engine, script) {
        Ok(done) => return Ok(done),
        Err(broken) => broken,
    };
    let mapped = map_literals(script, false);
    let looped = js_for_headers(mapped.as_deref().unwrap_or(script));
    let nulled = js_nulls(looped.as_deref().or(mapped.as_deref()).unwrap_or(script));
    match nulled.or(looped).or(mapped) {
        Some(rewritten) => with_semicolons(engine, &rewritten).map_err(|_| broken),
        None => Err(broken),
    }
}

/// `script` with each JavaScript loop header over a collection (`for (let x of
/// xs) {`, also `const`, `var` and `in`, alone on its line but for the `{`)
/// written as Rhai's `for x in xs {`, which walks the values. `None` when there
/// is none.
fn js_for_headers(script: &str) -> Option<String> {
    let mut changed = false;
    let lines: Vec<String> = script
        .lines()
        .map(|line| match js_for_header(line) {
            Some(rewritten) => {
                changed = true;
                rewritten
            }
            None => line.to_string(),
        })
        .collect();
    changed.then(|| lines.join("\n"))
}

fn js_for_header(line: &str) -> Option<String> {
    let code = line.trim_start();
    let indent = &line[..line.len() - code.len()];
    let inside = code.strip_prefix("for")?.trim_start().strip_prefix('(')?;
    // The `)` that closes the header: parentheses counted, strings skipped.
    let mut depth = 0usize;
    let mut quote = None;
    let mut close = None;
    for (at, c) in inside.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'' | '`') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') if depth == 0 => {
                close = Some(at);
                break;
            }
            (None, ')') => depth -= 1,
            _ => {}
        }
    }
    let close = close?;
    let (header, after) = (&inside[..close], &inside[close + 1..]);
    let rest = ["let ", "const ", "var "]
        .iter()
        .find_map(|keyword| header.trim_start().strip_prefix(keyword))?
        .trim_start();
    let name_end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    let (name, rest) = rest.split_at(name_end);
    let rest = rest.trim_start();
    let iterable = rest
        .strip_prefix("of ")
        .or_else(|| rest.strip_prefix("in "))?
        .trim();
    let plain = !name.is_empty() && !name.starts_with(|c: char| c.is_ascii_digit());
    (plain && !iterable.is_empty()).then(|| format!("{indent}for {name} in {iterable}{after}"))
}

/// `script` with each `{` that opens a JavaScript-style map literal made `#{`: a
/// `{` in expression position (after `(`, `[`, `,`, `=`, `:` or `return`) whose
/// contents start with a key and a `:` (or are `}`; only those when
/// `only_empty`). Strings and comments are skipped. `None` when there is none.
fn map_literals(script: &str, only_empty: bool) -> Option<String> {
    let chars: Vec<char> = script.chars().collect();
    let mut out = String::with_capacity(script.len() + 8);
    let mut changed = false;
    let mut i = 0;
    let mut previous = ' '; // the last character outside whitespace, strings and comments
    while i < chars.len() {
        let c = chars[i];
        if let Some(end) = string_or_comment_end(&chars, i) {
            out.extend(&chars[i..end]);
            if c != '/' {
                previous = c;
            }
            i = end;
            continue;
        }
        if c == '{'
            && previous != '#'
            && expression_position(&out, previous)
            && if only_empty {
                is_empty_braces(&chars[i + 1..])
            } else {
                starts_map(&chars[i + 1..])
            }
        {
            out.push('#');
            changed = true;
        }
        out.push(c);
        if !c.is_whitespace() {
            previous = c;
        }
        i += 1;
    }
    changed.then_some(out)
}

/// Where the string literal (`"…"`, `'…'`, `` `…` ``) or line comment (`//…`)
/// starting at `i` ends (just past it); `None` when none starts there.
fn string_or_comment_end(chars: &[char], i: usize) -> Option<usize> {
    let c = chars[i];
    if c == '"' || c == '\'' || c == '`' {
        let mut at = i + 1;
        while at < chars.len() && chars[at] != c {
            at += if chars[at] == '\\' { 2 } else { 1 };
        }
        return Some((at + 1).min(chars.len()));
    }
    if c == '/' && chars.get(i + 1) == Some(&'/') {
        let end = chars[i..]
            .iter()
            .position(|&c| c == '\n')
            .map_or(chars.len(), |n| i + n);
        return Some(end);
    }
    None
}

/// `script` with each `null` (JavaScript's and JSON's; a reserved word in
/// Rhai, so never a name) outside strings and comments written as `()`. `None`
/// when there is none.
fn js_nulls(script: &str) -> Option<String> {
    let chars: Vec<char> = script.chars().collect();
    let mut out = String::with_capacity(script.len());
    let mut changed = false;
    let mut i = 0;
    let word = |c: &char| c.is_alphanumeric() || *c == '_';
    while i < chars.len() {
        if let Some(end) = string_or_comment_end(&chars, i) {
            out.extend(&chars[i..end]);
            i = end;
            continue;
        }
        let is_null = chars[i..].starts_with(&['n', 'u', 'l', 'l'])
            && (i == 0 || !(word(&chars[i - 1]) || chars[i - 1] == '.'))
            && chars.get(i + 4).is_none_or(|c| !word(c));
        if is_null {
            out.push_str("()");
            changed = true;
            i += 4;
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    changed.then_some(out)
}

fn expression_position(before: &str, previous: char) -> bool {
    matches!(previous, '(' | '[' | ',' | '=' | ':') || before.trim_end().ends_with("return")
}

/// Whether the text after a `{` reads `}`, spaces aside.
fn is_empty_braces(after: &[char]) -> bool {
    after.iter().find(|c| !c.is_whitespace()) == Some(&'}')
}

/// Whether the text after a `{` reads `}` or `key:` (a name or a string, then a
/// colon that is not `::`).
fn starts_map(after: &[char]) -> bool {
    let mut i = 0;
    while i < after.len() && after[i].is_whitespace() {
        i += 1;
    }
    match after.get(i) {
        Some('}') => true,
        Some('"') => {
            i += 1;
            while i < after.len() && after[i] != '"' {
                i += 1;
            }
            after.get(i + 1) == Some(&':') && after.get(i + 2) != Some(&':')
        }
        Some(c) if c.is_alphabetic() || *c == '_' => {
            while i < after.len() && (after[i].is_alphanumeric() || after[i] == '_') {
                i += 1;
            }
            while i < after.len() && after[i] == ' ' {
                i += 1;
            }
            after.get(i) == Some(&':') && after.get(i + 1) != Some(&':')
        }
        _ => false,
    }
}

fn with_semicolons(engine: &Engine, script: &str) -> Result<(AST, Vec<usize>), StillBroken> {
    let mut error = match engine.compile(script) {
        Ok(ast) => return Ok((ast, Vec::new())),
        Err(err) => err,
    };
    let mut lines: Vec<String> = script.lines().map(str::to_string).collect();
    let mut patched = Vec::new();
    for _ in 0..MAX_INSERTIONS {
        let Some((line, at)) = line_missing_semicolon(&error, &lines) else {
            break;
        };
        lines[line - 1].insert(at, ';');
        patched.push(line);
        match engine.compile(lines.join("\n")) {
            Ok(ast) => return Ok((ast, patched)),
            Err(next) => error = next,
        }
    }
    let source = if patched.is_empty() {
        script.to_string()
    } else {
        lines.join("\n")
    };
    Err(StillBroken { error, source })
}

/// Where the `;` goes when `error` is a missing `;` reported at the first token of a
/// line: the end of the nearest line above holding code (blank and comment-only lines
/// are skipped), before a trailing `//` comment if it has one. `None` when that line
/// already ends in `;` or its comment cannot be told apart from a string.
fn line_missing_semicolon(error: &ParseError, lines: &[String]) -> Option<(usize, usize)> {
    let ParseErrorType::MissingToken(token, _) = error.err_type() else {
        return None;
    };
    if token != ";" {
        return None;
    }
    let line = error.position().line()?;
    let column = error.position().position()?;
    let text = lines.get(line - 1)?;
    let indent = text.chars().take_while(|c| c.is_whitespace()).count();
    if column != indent + 1 {
        return None;
    }
    let previous = (1..line).rev().find(|&n| {
        let code = lines[n - 1].trim_start();
        !code.is_empty() && !code.starts_with("//")
    })?;
    let text = &lines[previous - 1];
    let code_end = match text.find("//") {
        // A `//` after a quote may sit inside a string: leave such lines alone.
        Some(at) if text[..at].contains(['"', '`', '\'']) => return None,
        Some(at) => at,
        None => text.len(),
    };
    let code = text[..code_end].trim_end();
    if code.ends_with(';') {
        return None;
    }
    Some((previous, code.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> Engine {
        Engine::new()
    }

    #[test]
    fn statements_ended_by_line_breaks_get_their_semicolons() {
        let script = "let sum = 0\nfor i in 1..=3 {\n    sum += i * i\n}\nsum";
        let (ast, lines) = compile_lenient(&engine(), script).expect("parses once patched");
        assert_eq!(lines, vec![1]);
        assert_eq!(engine().eval_ast::<i64>(&ast).expect("runs"), 14);
    }

    #[test]
    fn several_missing_semicolons_are_all_inserted() {
        let script = "let a = 1\nlet b = 2\n\nlet c = a + b\nc";
        let (ast, lines) = compile_lenient(&engine(), script).expect("parses once patched");
        assert_eq!(lines, vec![1, 2, 4]);
        assert_eq!(engine().eval_ast::<i64>(&ast).expect("runs"), 3);
    }

    #[test]
    fn javascripts_null_is_rhais_unit_outside_strings_and_comments() {
        let script = "let best = null; // null until found\nlet counts = {};\nfor (let w in [\"a\", \"null\"]) {\n  if best == null { best = w; }\n}\n[best, counts, nullable]";
        let (ast, _) = compile_lenient(&engine(), script).expect("parses once patched");
        let mut scope = rhai::Scope::new();
        scope.push("nullable", 7_i64);
        let value = engine()
            .eval_ast_with_scope::<rhai::Array>(&mut scope, &ast)
            .expect("runs");
        assert_eq!(value[0].clone().into_string().ok(), Some("a".into()));
        assert_eq!(
            value[2].as_int().ok(),
            Some(7),
            "a name holding `null` is kept"
        );
        assert_eq!(js_nulls("\"null\" // null\nx.null"), None);
    }

    #[test]
    fn other_syntax_errors_keep_their_original_message() {
        let script = "let x = (1 + \nlet y = 2";
        let original = engine().compile(script).expect_err("broken");
        let Err(broken) = compile_lenient(&engine(), script) else {
            panic!("still broken")
        };
        assert_eq!(broken.error.to_string(), original.to_string());
        assert_eq!(broken.source, script);
    }

    #[test]
    fn past_the_missing_semicolons_the_next_real_error_is_reported() {
        let script = "let a = 1\nfinal_result(a +)";
        let Err(broken) = compile_lenient(&engine(), script) else {
            panic!("still broken")
        };
        assert_eq!(broken.error.position().line(), Some(2));
        assert_eq!(broken.source, "let a = 1;\nfinal_result(a +)");
    }

    #[test]
    fn javascript_map_literals_compile_as_rhai_maps_and_blocks_stay_blocks() {
        let script =
            "let a = 1\nlet m = {a: a, \"b\": \"{c: d}\"};\nif a == 1 { m.a + 1 } else { 0 }";
        let (ast, _) = compile_lenient(&engine(), script).expect("compiles");
        assert_eq!(engine().eval_ast::<i64>(&ast).expect("runs"), 2);
        assert_eq!(map_literals("if x { y }", false), None);
        assert_eq!(
            map_literals("f({a: 1}, [{\"b\": 2}])", false).as_deref(),
            Some("f(#{a: 1}, [#{\"b\": 2}])")
        );
    }

    #[test]
    fn an_empty_pair_of_braces_where_a_value_goes_is_an_empty_map() {
        let script = "let counts = {};\ncounts[\"a\"] = 1;\nlet f = |x| {};\nif true {} else {}\ncounts.len() + [{ }].len()";
        let (ast, _) = compile_lenient(&engine(), script).expect("compiles");
        assert_eq!(engine().eval_ast::<i64>(&ast).expect("runs"), 2);
        assert_eq!(map_literals("let s = \"= {}\"; while x {}", true), None);
    }

    #[test]
    fn javascript_loop_headers_walk_the_values_as_rhai_loops() {
        let script = "let total = 0;\nfor (let n of [1, 2, 3]) {\n  total += n;\n}\nfor (const w in \"a b\".split(\" \")) { total += 1; }\ntotal";
        let (ast, _) = compile_lenient(&engine(), script).expect("compiles");
        assert_eq!(engine().eval_ast::<i64>(&ast).expect("runs"), 8);
        assert_eq!(js_for_header("for (let i = 0; i < 3; i++) {"), None);
        assert_eq!(
            js_for_header("  for (var x of xs)").as_deref(),
            Some("  for x in xs")
        );
    }

    #[test]
    fn comment_lines_are_skipped_and_trailing_comments_kept_after_the_semicolon() {
        let script = "let a = 1 // one\n// the next one\nlet b = 2\nb + a";
        let (ast, lines) = compile_lenient(&engine(), script).expect("parses once patched");
        assert_eq!(lines, vec![1, 3]);
        assert_eq!(engine().eval_ast::<i64>(&ast).expect("runs"), 3);
    }

    #[test]
    fn a_comment_marker_after_a_quote_is_left_alone() {
        let script = "let url = \"http://x\"\nurl";
        assert!(compile_lenient(&engine(), script).is_err());
    }
}
