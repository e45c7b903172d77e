//! A JavaScript fallback that can never run: a script calls a tool inside
//! `try`, tests its value (`if (weather) { … } else { fallback }`), and reports
//! the tool's failure from `catch (e) { error(e.message) }`. The host's tools
//! throw when they fail and never return a falsy value, so the `else` branch is
//! dead and the script gives up. Found from the script's text alone (no code
//! runs), the script is written back with the fallback in the `catch` block.
//!
//! Why: asked for Munich's temperature or else Berlin's, a small model wrote
//! exactly that script, was told that `error(...)` gives up, and answered with
//! bare `error("…")` replies until its errors ran out.

/// The longest script rewritten.
const SCRIPT_CHARS: usize = 4_000;

/// `script` with the body of its `catch` block replaced by the fallback its
/// test of `tool`'s value would have run: the `else` body of `if (x) { … }
/// else { … }`, or the body of `if (!x) { … }`, where `x` is assigned from
/// `tools.tool(…)`. None when the script is not of that shape.
pub fn fallback_into_catch(script: &str, tool: &str) -> Option<String> {
    if script.len() > SCRIPT_CHARS {
        return None;
    }
    let name = assigned_from(script, tool)?;
    let fallback = fallback_body(script, &name)?;
    let catch = find_catch(script)?;
    let open = catch + script[catch..].find('{')?;
    let close = closing_brace(script, open)?;
    let indent = line_indent(script, catch);
    let body: Vec<String> = dedented(fallback)
        .lines()
        .map(|line| format!("{indent}  {line}"))
        .collect();
    Some(format!(
        "{}{{\n{}\n{indent}}}{}",
        &script[..open],
        body.join("\n"),
        &script[close + 1..]
    ))
}

/// The variable a `const`, `let` or `var` assigns from `tools.tool(` (or
/// `call_tool("tool"`).
fn assigned_from(script: &str, tool: &str) -> Option<String> {
    let calls = [format!("tools.{tool}("), format!("call_tool(\"{tool}\"")];
    script.lines().find_map(|line| {
        let (left, right) = line.split_once('=')?;
        if !calls
            .iter()
            .any(|call| right.trim_start().starts_with(call.as_str()))
        {
            return None;
        }
        let name = ["const ", "let ", "var "]
            .iter()
            .find_map(|keyword| left.trim().strip_prefix(keyword))?
            .trim();
        let plain = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
        plain.then(|| name.to_string())
    })
}

/// The code the script runs when `name` is falsy: its `else` block after
/// `if (name) { … }`, or the block of `if (!name) { … }`.
fn fallback_body<'a>(script: &'a str, name: &str) -> Option<&'a str> {
    if let Some(at) = script.find(&format!("if (!{name})")) {
        let open = at + script[at..].find('{')?;
        let close = closing_brace(script, open)?;
        return Some(&script[open + 1..close]);
    }
    let at = script.find(&format!("if ({name})"))?;
    let open = at + script[at..].find('{')?;
    let close = closing_brace(script, open)?;
    let after = script[close + 1..].trim_start();
    let rest = after.strip_prefix("else")?.trim_start();
    if !rest.starts_with('{') {
        return None;
    }
    let open = script.len() - rest.len();
    let close = closing_brace(script, open)?;
    Some(&script[open + 1..close])
}

/// Where the script's one `catch (…)` (or `catch {`) begins; None for none or
/// several.
fn find_catch(script: &str) -> Option<usize> {
    let mut found = script.match_indices("catch").filter(|(at, _)| {
        let after = script[at + 5..].trim_start();
        let before_ok = script[..*at]
            .chars()
            .next_back()
            .is_none_or(|c| !c.is_ascii_alphanumeric() && c != '_' && c != '.');
        before_ok && (after.starts_with('(') || after.starts_with('{'))
    });
    let (first, _) = found.next()?;
    found.next().is_none().then_some(first)
}

/// The index of the `}` that closes the `{` at `open`, skipping strings,
/// template literals and comments.
fn closing_brace(script: &str, open: usize) -> Option<usize> {
    let bytes = script.as_bytes();
    let mut depth = 0usize;
    let mut at = open;
    while at < bytes.len() {
        match bytes[at] {
            quote @ (b'"' | b'\'' | b'`') => {
                at += 1;
                while at < bytes.len() && bytes[at] != quote {
                    at += if bytes[at] == b'\\' { 2 } else { 1 };
                }
            }
            b'/' if bytes.get(at + 1) == Some(&b'/') => {
                while at < bytes.len() && bytes[at] != b'\n' {
                    at += 1;
                }
            }
            b'{' => depth += 1,
            b'}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(at);
                }
            }
            _ => {}
        }
        at += 1;
    }
    None
}

/// The leading spaces of the line holding byte `at`.
fn line_indent(script: &str, at: usize) -> String {
    let start = script[..at].rfind('\n').map_or(0, |newline| newline + 1);
    script[start..]
        .chars()
        .take_while(|c| *c == ' ' || *c == '\t')
        .collect()
}

/// `body`'s non-blank lines without their common indent of spaces and tabs.
fn dedented(body: &str) -> String {
    let indent = |line: &str| line.len() - line.trim_start_matches([' ', '\t']).len();
    let lines: Vec<&str> = body
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    let common = lines.iter().map(|line| indent(line)).min().unwrap_or(0);
    lines
        .iter()
        .map(|line| &line[common..])
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MUNICH: &str = "try {\n  const weather = tools.get_weather({city: \"Munich\"});\n  if (weather) {\n    observation(weather.temp_c);\n  } else {\n    const weatherBerlin = tools.get_weather({city: \"Berlin\"});\n    observation(weatherBerlin.temp_c);\n  }\n} catch (e) {\n  error(e.message);\n}";

    #[test]
    fn the_else_branch_of_a_test_of_the_tools_value_moves_into_the_catch_block() {
        let rewritten = fallback_into_catch(MUNICH, "get_weather").expect("rewritten");
        assert!(
            rewritten.ends_with("} catch (e) {\n  const weatherBerlin = tools.get_weather({city: \"Berlin\"});\n  observation(weatherBerlin.temp_c);\n}"),
            "{rewritten}"
        );
        assert!(
            rewritten
                .starts_with("try {\n  const weather = tools.get_weather({city: \"Munich\"});")
        );
    }

    #[test]
    fn a_negated_test_gives_its_own_block_and_braces_in_strings_do_not_count() {
        let script = "let user;\ntry {\n  const u = tools.find({name: \"}{\"});\n  if (!u) {\n    observation(\"none }\");\n  }\n} catch (err) { error(err.message) }";
        let rewritten = fallback_into_catch(script, "find").expect("rewritten");
        assert!(
            rewritten.ends_with("} catch (err) {\n  observation(\"none }\");\n}"),
            "{rewritten}"
        );
    }

    #[test]
    fn scripts_of_another_shape_are_left_alone() {
        // Another tool, no test of the value, no catch, two catches, a long script.
        assert_eq!(fallback_into_catch(MUNICH, "list_orders"), None);
        let untested = "try {\n  const w = tools.get_weather({city: \"Munich\"});\n  observation(w);\n} catch (e) { error(e.message) }";
        assert_eq!(fallback_into_catch(untested, "get_weather"), None);
        let uncaught = "const weather = tools.get_weather({city: \"Munich\"});\nif (weather) { observation(1) } else { observation(2) }";
        assert_eq!(fallback_into_catch(uncaught, "get_weather"), None);
        let twice = format!("{MUNICH}\ntry {{ x() }} catch (e) {{ }}");
        assert_eq!(fallback_into_catch(&twice, "get_weather"), None);
        let long = format!("{MUNICH}\n//{}", "x".repeat(SCRIPT_CHARS));
        assert_eq!(fallback_into_catch(&long, "get_weather"), None);
        // An unclosed block is no block.
        let unclosed = "try {\n  const weather = tools.get_weather({city: \"Munich\"});\n  if (weather) {\n} catch (e) {";
        assert_eq!(fallback_into_catch(unclosed, "get_weather"), None);
    }
}
