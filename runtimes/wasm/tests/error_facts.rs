//! Each guest's script errors carry their kind and line in structure
//! ([`ErrorFacts`]), so a loop never reads an interpreter's message text (the
//! real guests, fetched by guests/fetch-guests.sh).

use std::sync::Arc;

use codeact_runtime::{ErrorFacts, ErrorKind, Limits, NoTools, Runtime, Session};
use codeact_wasm::WasmRuntime;

fn session(runtime: &str) -> Box<dyn Session> {
    WasmRuntime::by_name(runtime, Limits::default())
        .expect("the guest loads")
        .new_session(Arc::new(NoTools))
        .expect("the session starts")
}

/// The facts of the error `script` fails with.
fn facts(session: &mut dyn Session, script: &str) -> ErrorFacts {
    let error = session
        .run(script)
        .expect("the run finishes")
        .completion
        .expect_err(script);
    error
        .facts()
        .cloned()
        .unwrap_or_else(|| panic!("{script}: {error:?}"))
}

fn undefined(name: &str) -> ErrorKind {
    ErrorKind::UndefinedName { name: name.into() }
}

fn python_errors_carry_their_kind_and_line(runtime: &str) {
    let mut session = session(runtime);
    let session = &mut *session;
    let found = facts(session, "a = 1\nb = missing + a\nfinal_result(b)");
    assert_eq!((found.kind, found.line), (undefined("missing"), Some(2)));
    let found = facts(session, "a = 1\nno_such_function(a)");
    assert_eq!(
        (found.kind, found.line),
        (undefined("no_such_function"), Some(2)),
        "a call of a missing function, the script's last expression"
    );
    let found = facts(session, "xs = [1]\nys = xs[5]\nfinal_result(ys)");
    let bounds = ErrorKind::IndexOutOfBounds {
        index: None,
        length: None,
    };
    assert_eq!((found.kind.clone(), found.line), (bounds.clone(), Some(2)));
    let found = facts(session, "xs = [1]\n\nxs[5]");
    assert_eq!((found.kind, found.line), (bounds, Some(3)));
    let found = facts(session, "def f():\n    return gone\n\nf()");
    assert_eq!(
        (found.kind, found.line),
        (undefined("gone"), Some(2)),
        "the innermost frame"
    );
    let found = facts(session, "x = 1\ny = (x +\n");
    assert_eq!(found.kind, ErrorKind::Syntax);
    assert!(found.line.is_some(), "{found:?}");
    let found = facts(session, "x = 1\nx()");
    assert_eq!((found.kind, found.line), (ErrorKind::NotCallable, Some(2)));
    let found = facts(session, "import requests");
    assert_eq!(
        (found.kind, found.line),
        (ErrorKind::ImportUnavailable, Some(1))
    );
    let found = facts(session, "raise ValueError('at line 9')");
    assert_eq!(
        (found.kind, found.line),
        (
            ErrorKind::Other {
                engine_kind: "ValueError".into()
            },
            Some(1)
        )
    );
}

#[test]
fn cpython_errors_carry_their_kind_and_line() {
    python_errors_carry_their_kind_and_line("wasm:python");
}

#[test]
fn micropython_errors_carry_their_kind_and_line() {
    python_errors_carry_their_kind_and_line("wasm:micropython");
}

#[test]
fn a_python_exception_named_like_a_name_error_is_not_taken_for_one() {
    let mut session = session("wasm:python");
    let found = facts(
        &mut *session,
        "class NameError(Exception):\n    name = 'forged'\nraise NameError('x')",
    );
    assert_eq!(
        found.kind,
        ErrorKind::Other {
            engine_kind: "NameError".into()
        }
    );
    assert_eq!(found.line, Some(3));
}

/// Checks the kinds and lines of `runtime`'s errors; the line of a syntax
/// error, where the guest gives one.
fn javascript_errors_carry_their_kind_and_line(runtime: &str) -> Option<u32> {
    let mut session = session(runtime);
    let session = &mut *session;
    let found = facts(session, "let a = 1;\nlet b = missing + a;");
    assert_eq!((found.kind, found.line), (undefined("missing"), Some(2)));
    let found = facts(session, "let a = 1;\nnoSuchFunction(a)");
    assert_eq!(
        (found.kind, found.line),
        (undefined("noSuchFunction"), Some(2))
    );
    let found = facts(session, "const o = {};\n\no.nothing(1)");
    assert_eq!((found.kind, found.line), (ErrorKind::NotCallable, Some(3)));
    let found = facts(session, "const xs = [1];\nxs[5].name");
    assert_eq!((found.kind, found.line), (ErrorKind::TypeMismatch, Some(2)));
    let found = facts(session, "let x = 1;\nlet = ;");
    assert_eq!(found.kind, ErrorKind::Syntax);
    found.line
}

#[test]
fn quickjs_errors_carry_their_kind_and_line() {
    // The QuickJS guest's syntax errors carry no position in their text.
    assert_eq!(javascript_errors_carry_their_kind_and_line("wasm:js"), None);
}

#[test]
fn stdio_quickjs_errors_carry_their_kind_and_line() {
    let syntax = javascript_errors_carry_their_kind_and_line("wasm:js-stdio");
    assert!(syntax.is_none_or(|line| line == 2), "{syntax:?}");
}
