//! Top-level `let` and `const` become `var`, so a later script of the same session
//! may declare the same name again.
//!
//! Every script of a session runs in one global scope, where declaring a `let`
//! twice is a SyntaxError: a model re-running `let total = 0;` would trip over its
//! own earlier script. Rewriting the keyword outside any block, parenthesis,
//! string, template or comment keeps columns (`const` becomes `var  `) and leaves
//! everything nested alone. The cost: a top-level `const` can be reassigned, and
//! regex literals containing quotes or braces can confuse the scan (then the
//! script runs unchanged, and a redeclaration is an error as in plain JS).

/// Rewrites the top-level `let`/`const` declarations of `script` to `var`.
pub fn hoist_top_level(script: &str) -> String {
    let bytes = script.as_bytes();
    let mut out = String::with_capacity(script.len());
    let mut depth = 0usize;
    let mut i = 0;
    let mut last = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i = script[i..].find('\n').map_or(bytes.len(), |n| i + n);
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = script[i + 2..]
                    .find("*/")
                    .map_or(bytes.len(), |n| i + 2 + n + 2);
            }
            quote @ (b'"' | b'\'' | b'`') => {
                i += 1;
                while i < bytes.len() && bytes[i] != quote {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'{' | b'(' | b'[' => {
                depth += 1;
                i += 1;
            }
            b'}' | b')' | b']' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c == b'$' => {
                let start = i;
                while i < bytes.len()
                    && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'$')
                {
                    i += 1;
                }
                let word = &script[start..i];
                let before_ok = start == 0 || bytes[start - 1] != b'.';
                let after_ok = bytes
                    .get(i)
                    .is_some_and(|c| c.is_ascii_whitespace() || *c == b'[' || *c == b'{');
                if depth == 0 && before_ok && after_ok && (word == "let" || word == "const") {
                    out.push_str(&script[last..start]);
                    out.push_str(if word == "let" { "var" } else { "var  " });
                    last = i;
                }
            }
            _ => i += 1,
        }
    }
    out.push_str(&script[last.min(script.len())..]);
    out
}

#[cfg(test)]
mod tests {
    use super::hoist_top_level;

    #[test]
    fn top_level_declarations_become_var_and_nested_ones_stay() {
        let script = "let a = 1;\nconst b = {c: 2};\nfunction f() { let x = 1; return x; }\nfor (let i = 0; i < 2; i++) {}\n";
        assert_eq!(
            hoist_top_level(script),
            "var a = 1;\nvar   b = {c: 2};\nfunction f() { let x = 1; return x; }\nfor (let i = 0; i < 2; i++) {}\n"
        );
    }

    #[test]
    fn strings_templates_comments_and_properties_are_left_alone() {
        let script =
            "const s = \"let x = 1\"; // let y\n/* const z */ let t = `let ${s}`; obj.let = 1;";
        assert_eq!(
            hoist_top_level(script),
            "var   s = \"let x = 1\"; // let y\n/* const z */ var t = `let ${s}`; obj.let = 1;"
        );
    }

    #[test]
    fn destructuring_declarations_are_rewritten_too() {
        assert_eq!(
            hoist_top_level("let [a, b] = [1, 2];"),
            "var [a, b] = [1, 2];"
        );
        assert_eq!(hoist_top_level("const {a} = o;"), "var   {a} = o;");
    }
}
