//! `await` outside any function, in a script whose completion value is its
//! answer: each such `await X` becomes `__codeact_await(X)`, which the engine's
//! prelude answers on the spot (a tool call's result, or a promise settled by
//! running the engine's jobs), so a script keeps its completion value and its
//! top-level declarations while waiting on promises.
//!
//! A script is asynchronous ([`AwaitRewrite::asynchronous`]) when it writes
//! `await`, `async`, `Promise` or `.then(`: its tool calls then return
//! promises, which the host makes together when the script first waits on
//! one (`await Promise.all([tools.a(…), tools.b(…)])`); any other script's
//! tool calls return their values, as they always did.
//!
//! The scan skips strings, templates and comments and tells function bodies
//! (after `=>`, or after the parameters of a function or method) from other
//! braces (blocks, object literals, classes). Like [`crate::js_hoist`], a regex
//! literal holding quotes or braces can confuse it: the script then runs as
//! written, and a top-level `await` is the engine's syntax error.

/// A script with its top-level `await`s rewritten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwaitRewrite {
    /// The script to run.
    pub script: String,
    /// Whether the script waits on promises anywhere (see the module's doc).
    pub asynchronous: bool,
}

/// The name top-level `await X` becomes a call of.
pub const AWAIT_NOW: &str = "__codeact_await";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Word,
    /// A string, template or number: an operand on its own.
    Literal,
    Open(u8),
    Close(u8),
    Arrow,
    Punct(u8),
    Newline,
}

#[derive(Debug, Clone, Copy)]
struct Token {
    kind: Kind,
    start: usize,
    end: usize,
}

fn tokens(script: &str) -> Vec<Token> {
    let bytes = script.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        let kind = match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i = script[i..].find('\n').map_or(bytes.len(), |n| i + n);
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = script[i + 2..]
                    .find("*/")
                    .map_or(bytes.len(), |n| i + 2 + n + 2);
                continue;
            }
            quote @ (b'"' | b'\'' | b'`') => {
                i += 1;
                while i < bytes.len() && bytes[i] != quote {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(bytes.len());
                Kind::Literal
            }
            b'\n' => {
                i += 1;
                Kind::Newline
            }
            c if c.is_ascii_whitespace() => {
                i += 1;
                continue;
            }
            c if c.is_ascii_digit() => {
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.') {
                    i += 1;
                }
                Kind::Literal
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c == b'$' || c >= 0x80 => {
                while i < bytes.len()
                    && (bytes[i].is_ascii_alphanumeric()
                        || bytes[i] == b'_'
                        || bytes[i] == b'$'
                        || bytes[i] >= 0x80)
                {
                    i += 1;
                }
                Kind::Word
            }
            open @ (b'(' | b'[' | b'{') => {
                i += 1;
                Kind::Open(open)
            }
            close @ (b')' | b']' | b'}') => {
                i += 1;
                Kind::Close(close)
            }
            b'=' if bytes.get(i + 1) == Some(&b'>') => {
                i += 2;
                Kind::Arrow
            }
            b'?' if bytes.get(i + 1) == Some(&b'.')
                && !bytes.get(i + 2).is_some_and(u8::is_ascii_digit) =>
            {
                i += 2;
                Kind::Punct(b'.')
            }
            other => {
                i += 1;
                Kind::Punct(other)
            }
        };
        out.push(Token {
            kind,
            start,
            end: i,
        });
    }
    out
}

/// What an open bracket or an arrow's expression body is, for whether an
/// `await` inside it is outside any function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    /// A function's or method's body, or an arrow's expression body.
    Function,
    /// Anything else: a block, an object or array literal, parentheses.
    Other,
    /// An arrow's body without braces: it ends at a `,` or `;` of its own
    /// level, a closing bracket, or a line that does not go on.
    ArrowExpression,
}

/// Words before `(` whose `{ … }` after `)` is a block, not a function body.
const CONTROL: &[&str] = &["if", "for", "while", "catch", "switch", "with"];

/// Rewrites the top-level `await`s of `script` (see the module's doc).
pub fn rewrite_top_level_await(script: &str) -> AwaitRewrite {
    let tokens = tokens(script);
    let text = |t: &Token| &script[t.start..t.end];
    // A word, not a property name (`o.await`) or an object's key (`{await: 1}`).
    let keyword = |at: usize| {
        (at == 0 || tokens[at - 1].kind != Kind::Punct(b'.'))
            && tokens
                .get(at + 1)
                .is_none_or(|next| next.kind != Kind::Punct(b':'))
    };
    let asynchronous = tokens.iter().enumerate().any(|(at, t)| {
        t.kind == Kind::Word
            && (matches!(text(t), "await" | "async" | "Promise") && keyword(at)
                || (text(t) == "then"
                    && at > 0
                    && tokens[at - 1].kind == Kind::Punct(b'.')
                    && tokens
                        .get(at + 1)
                        .is_some_and(|n| n.kind == Kind::Open(b'('))))
    });
    if !asynchronous {
        return AwaitRewrite {
            script: script.to_string(),
            asynchronous,
        };
    }
    // The frames open at each token, and for each `(` the word before it.
    let mut frames: Vec<Frame> = Vec::new();
    let mut paren_owners: Vec<Option<usize>> = Vec::new();
    let mut last_paren_owner: Option<usize> = None;
    // (start of `await`, end of its operand) for each top-level await.
    let mut rewrites: Vec<(usize, usize, usize)> = Vec::new();
    let mut at = 0;
    while at < tokens.len() {
        let token = tokens[at];
        let previous = at
            .checked_sub(1)
            .and_then(|p| (0..=p).rev().find(|&k| tokens[k].kind != Kind::Newline));
        match token.kind {
            Kind::Open(b'{') => {
                let frame = match previous.map(|p| tokens[p].kind) {
                    Some(Kind::Arrow) => Frame::Function,
                    Some(Kind::Close(b')')) => match last_paren_owner {
                        Some(owner) if CONTROL.contains(&text(&tokens[owner])) => Frame::Other,
                        _ => Frame::Function,
                    },
                    _ => Frame::Other,
                };
                frames.push(frame);
            }
            Kind::Open(open) => {
                if open == b'(' {
                    paren_owners.push(previous.filter(|&p| tokens[p].kind == Kind::Word));
                }
                frames.push(Frame::Other);
            }
            Kind::Close(close) => {
                while frames.last() == Some(&Frame::ArrowExpression) {
                    frames.pop();
                }
                frames.pop();
                if close == b')' {
                    last_paren_owner = paren_owners.pop().flatten();
                }
            }
            Kind::Arrow => {
                let body_is_braced = tokens
                    .get(at + 1)
                    .is_some_and(|next| next.kind == Kind::Open(b'{'));
                if !body_is_braced {
                    frames.push(Frame::ArrowExpression);
                }
            }
            Kind::Punct(b',' | b';') => {
                if frames.last() == Some(&Frame::ArrowExpression) {
                    frames.pop();
                }
            }
            Kind::Newline => {
                let goes_on = tokens.get(at + 1).is_some_and(|next| {
                    matches!(next.kind, Kind::Close(_) | Kind::Arrow)
                        || matches!(next.kind, Kind::Punct(c) if c != b'!')
                });
                if frames.last() == Some(&Frame::ArrowExpression) && !goes_on {
                    frames.pop();
                }
            }
            Kind::Word if text(&token) == "await" => {
                let member = previous.is_some_and(|p| tokens[p].kind == Kind::Punct(b'.'));
                let in_function = frames
                    .iter()
                    .any(|frame| matches!(frame, Frame::Function | Frame::ArrowExpression));
                if !member
                    && !in_function
                    && let Some(end) = operand_end(&tokens, at + 1, &text)
                {
                    rewrites.push((token.start, token.end, end));
                }
            }
            _ => {}
        }
        at += 1;
    }
    if rewrites.is_empty() {
        return AwaitRewrite {
            script: script.to_string(),
            asynchronous,
        };
    }
    // Inserts `__codeact_await(` for `await` and `)` after each operand; an
    // operand may hold another top-level await, so the closing parentheses
    // are placed by position.
    let mut inserts: Vec<(usize, &str)> = Vec::new();
    for &(start, end, operand_end) in &rewrites {
        inserts.push((start, "\u{0}open"));
        inserts.push((end, "\u{0}skip"));
        inserts.push((operand_end, ")"));
    }
    let mut out = String::with_capacity(script.len() + rewrites.len() * 24);
    let mut cursor = 0;
    let mut skipping_until = None;
    let mut order: Vec<usize> = (0..inserts.len()).collect();
    // By position; at one position, closing parentheses before opening ones.
    order.sort_by_key(|&k| (inserts[k].0, inserts[k].1 != ")", k));
    for k in order {
        let (position, what) = inserts[k];
        if skipping_until.is_none() {
            out.push_str(&script[cursor..position]);
        }
        cursor = position;
        match what {
            "\u{0}open" => {
                out.push_str(AWAIT_NOW);
                out.push('(');
                skipping_until = Some(position);
            }
            "\u{0}skip" => {
                skipping_until = None;
            }
            _ => out.push(')'),
        }
    }
    out.push_str(&script[cursor..]);
    AwaitRewrite {
        script: out,
        asynchronous,
    }
}

/// The end of the operand starting at token `from`: `new`, another `await`,
/// then a name, literal or bracketed expression, then any `.name`, `?.`,
/// calls, indexes and templates. `None` when it starts otherwise.
fn operand_end<'a>(
    tokens: &[Token],
    from: usize,
    text: &impl Fn(&Token) -> &'a str,
) -> Option<usize> {
    let mut at = from;
    while tokens.get(at)?.kind == Kind::Newline {
        at += 1;
    }
    while tokens.get(at).is_some_and(|t| {
        t.kind == Kind::Word && matches!(text(t), "new" | "await" | "typeof" | "void")
    }) {
        at += 1;
    }
    let first = tokens.get(at)?;
    let mut end = match first.kind {
        Kind::Word | Kind::Literal => {
            at += 1;
            first.end
        }
        Kind::Open(_) => {
            let close = matching(tokens, at)?;
            at = close + 1;
            tokens[close].end
        }
        _ => return None,
    };
    loop {
        match tokens.get(at).map(|t| t.kind) {
            Some(Kind::Punct(b'.')) => match tokens.get(at + 1) {
                Some(name) if name.kind == Kind::Word => {
                    end = name.end;
                    at += 2;
                }
                Some(next) if matches!(next.kind, Kind::Open(b'(' | b'[')) => at += 1,
                _ => return Some(end),
            },
            Some(Kind::Open(b'(' | b'[')) => {
                let close = matching(tokens, at)?;
                end = tokens[close].end;
                at = close + 1;
            }
            Some(Kind::Literal) if text(&tokens[at]).starts_with('`') => {
                end = tokens[at].end;
                at += 1;
            }
            _ => return Some(end),
        }
    }
}

/// The index of the bracket closing the one at `open`.
fn matching(tokens: &[Token], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (at, token) in tokens.iter().enumerate().skip(open) {
        match token.kind {
            Kind::Open(_) => depth += 1,
            Kind::Close(_) => {
                depth -= 1;
                if depth == 0 {
                    return Some(at);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(script: &str) -> String {
        rewrite_top_level_await(script).script
    }

    #[test]
    fn a_script_without_await_promise_or_then_is_synchronous_and_unchanged() {
        let script = "const awaited = tools.a({x: 'await'}); // await\nawaited.then";
        let rewrite = rewrite_top_level_await(script);
        assert!(!rewrite.asynchronous);
        assert_eq!(rewrite.script, script);
    }

    #[test]
    fn top_level_awaits_become_calls_that_keep_the_completion_value() {
        assert_eq!(
            rewritten("const [a, b] = await Promise.all([tools.a(1), tools.b(2)]);\na + b"),
            "const [a, b] = __codeact_await( Promise.all([tools.a(1), tools.b(2)]));\na + b"
        );
        assert_eq!(
            rewritten("(await tools.get({id: 1})).name"),
            "(__codeact_await( tools.get({id: 1}))).name"
        );
        assert_eq!(
            rewritten("if (x) { r = await tools.a(); } else { r = await new Thing(1).go() }"),
            "if (x) { r = __codeact_await( tools.a()); } else { r = __codeact_await( new Thing(1).go()) }"
        );
        assert_eq!(
            rewritten("final_result(await tools.a() + await tools.b())"),
            "final_result(__codeact_await( tools.a()) + __codeact_await( tools.b()))"
        );
    }

    #[test]
    fn awaits_inside_functions_arrows_and_methods_are_left_alone() {
        for script in [
            "async function f() { return await tools.a(); }\nawait f()",
            "const f = async () => { await tools.a() };\nawait f()",
            "const f = async x => await tools.a(x);\nawait f(1)",
            "const f = async x => await tools.a(x)\nawait f(1)",
            "await Promise.all(ids.map(async (id) => await tools.get({id})))",
            "const o = { async m() { return await tools.a() } };\nawait o.m()",
            "class K { async m() { await tools.a() } }\nawait new K().m()",
        ] {
            let out = rewritten(script);
            assert_eq!(
                out.matches("__codeact_await(").count(),
                1,
                "{script}\n=> {out}"
            );
            assert!(out.contains("await tools."), "{script}\n=> {out}");
        }
    }

    #[test]
    fn strings_comments_and_property_names_called_await_are_not_rewritten() {
        let script = "const s = 'await x'; // await y\n/* await z */ o.await = 1; await o.p";
        assert_eq!(
            rewritten(script),
            "const s = 'await x'; // await y\n/* await z */ o.await = 1; __codeact_await( o.p)"
        );
    }

    #[test]
    fn nested_awaits_inside_an_operand_are_each_rewritten() {
        assert_eq!(
            rewritten("await tools.b(await tools.a())"),
            "__codeact_await( tools.b(__codeact_await( tools.a())))"
        );
    }

    #[test]
    fn an_await_it_cannot_read_is_left_for_the_engine_to_report() {
        assert_eq!(rewritten("await -x"), "await -x");
        assert_eq!(rewritten("await"), "await");
        assert_eq!(rewritten("await tools.a("), "await tools.a(");
    }

    #[test]
    fn promise_and_then_make_a_script_asynchronous() {
        assert!(rewrite_top_level_await("Promise.all([tools.a()])").asynchronous);
        assert!(rewrite_top_level_await("tools.a().then(v => v)").asynchronous);
        assert!(!rewrite_top_level_await("const then = 1; then").asynchronous);
        assert!(!rewrite_top_level_await("tools.t({await: 1, async: 2}).await").asynchronous);
    }
}
