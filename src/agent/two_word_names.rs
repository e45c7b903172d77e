//! A declaration that gives a variable two names, `let weather paris =
//! get_weather(#{city: "Paris"})`, which the engines reject as a syntax error
//! ("Expecting ';'"): the lines rewritten for the feedback, as map fields when
//! the script reads `weather.paris` later, else as one joined name.
//!
//! Why: on "What is the average temperature in Paris, Oslo and Madrid?" a small
//! model (Rhai) declared `let weather paris`, `let weather oslo`, `let weather
//! madrid` and read `weather.paris.temp_c`; shown the syntax error at that
//! line, it sent the same script four times.

/// The declaration keywords read: Rhai's and JavaScript's.
const KEYWORDS: &[&str] = &["let", "const", "var"];

/// The lines of `script` that give a variable two names, rewritten (1-based
/// numbers of the lines, and the lines to write in their place): `let
/// weather = #{};` (or `{}` in JavaScript) once before the first, then
/// `weather.paris = …;`, when the script reads `weather.paris`; else `let
/// weather_paris = …`. `None` when no line does, or `rhai` is false and the
/// script is not JavaScript-like. Quoted only fenced: the values are the
/// model's code.
pub fn rewritten(script: &str, rhai: bool) -> Option<(Vec<usize>, String)> {
    let found: Vec<(usize, &str, &str, &str, &str)> = script
        .lines()
        .enumerate()
        .filter_map(|(index, line)| {
            let (keyword, first, second, value) = two_names(line)?;
            Some((index + 1, keyword, first, second, value))
        })
        .collect();
    let (_, keyword, first, _, _) = *found.first()?;
    let as_fields = found.iter().all(|(_, _, name, _, _)| *name == first)
        && found
            .iter()
            .any(|(_, _, name, field, _)| reads_field(script, name, field));
    let end = if rhai || script.contains(';') {
        ";"
    } else {
        ""
    };
    let mut lines = Vec::new();
    if as_fields {
        let empty = if rhai { "#{}" } else { "{}" };
        lines.push(format!("{keyword} {first} = {empty}{end}"));
        for (_, _, name, field, value) in &found {
            lines.push(format!("{name}.{field} = {value}{end}"));
        }
    } else {
        for (_, keyword, name, second, value) in &found {
            lines.push(format!("{keyword} {name}_{second} = {value}{end}"));
        }
    }
    let numbers = found.iter().map(|(number, ..)| *number).collect();
    Some((numbers, lines.join("\n")))
}

/// The two names a declaration `line` gives (`weather`, `paris`), if it
/// gives two.
pub fn names(line: &str) -> Option<(String, String)> {
    two_names(line).map(|(_, first, second, _)| (first.to_string(), second.to_string()))
}

/// `let A B = value` (the keyword, both names and the value without a final
/// `;`), when `A` and `B` are plain names.
fn two_names(line: &str) -> Option<(&'static str, &str, &str, &str)> {
    let trimmed = line.trim();
    let keyword = KEYWORDS.iter().find(|keyword| {
        trimmed
            .strip_prefix(**keyword)
            .is_some_and(|rest| rest.starts_with(' '))
    })?;
    let rest = trimmed[keyword.len()..].trim_start();
    let (names, value) = rest.split_once('=')?;
    if value.starts_with('=') {
        return None;
    }
    let mut words = names.split_whitespace();
    let (first, second) = (words.next()?, words.next()?);
    let plain = |name: &str| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_alphanumeric() || c == '_')
    };
    if words.next().is_some() || !plain(first) || !plain(second) {
        return None;
    }
    let value = value.trim();
    let value = value.strip_suffix(';').unwrap_or(value).trim_end();
    (!value.is_empty()).then_some((keyword, first, second, value))
}

/// Whether `script` reads `name.field` (as a whole name).
fn reads_field(script: &str, name: &str, field: &str) -> bool {
    let wanted = format!("{name}.{field}");
    script.match_indices(&wanted).any(|(at, _)| {
        let before = script[..at].chars().next_back();
        let after = script[at + wanted.len()..].chars().next();
        before.is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '.'))
            && after.is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_as_fields_later_become_fields_of_one_map() {
        let script = "let weather paris = get_weather(#{city: \"Paris\"})\nlet weather oslo = get_weather(#{city: \"Oslo\"})\nlet avg = (weather.paris.temp_c + weather.oslo.temp_c) / 2.0\nobservation(avg)";
        let (lines, text) = rewritten(script, true).expect("rewritten");
        assert_eq!(lines, vec![1, 2]);
        assert_eq!(
            text,
            "let weather = #{};\nweather.paris = get_weather(#{city: \"Paris\"});\nweather.oslo = get_weather(#{city: \"Oslo\"});"
        );
    }

    #[test]
    fn names_never_read_as_fields_are_joined_into_one() {
        let script = "const total price = 3 * 4;\nfinal_result(total);";
        let (lines, text) = rewritten(script, false).expect("rewritten");
        assert_eq!(lines, vec![1]);
        assert_eq!(text, "const total_price = 3 * 4;");
    }

    #[test]
    fn declarations_of_one_name_and_comparisons_are_left_alone() {
        for script in [
            "let weather = get_weather(#{city: \"Paris\"})",
            "let a == b",
            "let x y z = 1",
            "let 1x y = 2",
            "// let me think = hard",
        ] {
            assert_eq!(rewritten(script, true), None, "{script}");
        }
    }
}
