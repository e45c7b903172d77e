//! What a failing CPython script's names held, reported with its error: read from
//! the script's frames without running any of the script's code, and only for
//! values of the built-in data types (the real guest, fetched by
//! guests/fetch-guests.sh).

use std::sync::Arc;

use codeact_runtime::{Limits, NoTools, Runtime, ScriptError, Session};
use codeact_wasm::WasmRuntime;

fn session() -> Box<dyn Session> {
    let runtime = WasmRuntime::by_name("wasm:python", Limits::default()).expect("the guest loads");
    runtime
        .new_session(Arc::new(NoTools))
        .expect("the session starts")
}

/// What a script that succeeds returns (its final result's value).
fn value_of(session: &mut dyn Session, script: &str) -> serde_json::Value {
    let completion = session.run(script).expect("the run finishes").completion;
    completion.expect("a value")["value"].clone()
}

/// What a script's `caught` list holds: each entry is a frame's name, or
/// "refused" where the guard refused the frame.
fn caught(session: &mut dyn Session) -> Vec<serde_json::Value> {
    let caught = value_of(session, "final_result(caught)");
    caught.as_array().expect("a list").clone()
}

fn values_of(session: &mut dyn Session, script: &str) -> Vec<(String, String)> {
    match session.run(script).expect("the run finishes").completion {
        Err(ScriptError::Thrown { values, .. }) => values,
        other => panic!("expected a thrown error, got {other:?}"),
    }
}

#[test]
fn a_failing_line_reports_its_names_values_a_generator_expressions_included() {
    let mut session = session();
    let values = values_of(
        session.as_mut(),
        "import math\npower_str = str(math.pow(2, 50))\ntotal = sum(int(digit) for digit in power_str)\nfinal_result(total)",
    );
    assert_eq!(
        values,
        vec![
            ("digit".to_string(), "'.'".to_string()),
            ("power_str".to_string(), "'1125899906842624.0'".to_string()),
        ],
        "`int`, `sum` and `total` hold no value of the script's on that line"
    );
}

#[test]
fn values_in_a_function_come_from_its_frame_and_big_ones_are_cut() {
    let mut session = session();
    let script = r#"
rows = "product,quantity\nlamp,3\n" * 100
def total(text):
    count = 0
    for row in text:
        count += float(row[1])
    return count
final_result(total(rows))
"#;
    let values = values_of(session.as_mut(), script);
    assert_eq!(values[0], ("count".into(), "0".into()));
    assert_eq!(values[1], ("row".into(), "'p'".into()));
    let nested = values_of(
        session.as_mut(),
        "data = {'a': [1, [2, [3, [4]]]], 'b': 'x' * 500, 'c': 10 ** 300}\nfinal_result(data['d'])",
    );
    let (name, text) = &nested[0];
    assert_eq!(name, "data");
    assert!(text.len() <= 200, "{text}");
    assert!(text.starts_with("{'a': [1, [...]], 'b': 'xxx"), "{text}");
}

/// A script's own objects are not shown, and none of their methods runs while
/// the host reads the values: a `__repr__` or `__eq__` that would run with the
/// prelude's frame access never gets the chance.
#[test]
fn the_scripts_own_objects_run_no_code_while_values_are_read() {
    let mut session = session();
    let script = r#"
ran = []
class Loud:
    def __repr__(self):
        ran.append("repr")
        return "LOUD"
    def __eq__(self, other):
        ran.append("eq")
        return False
    def __hash__(self):
        ran.append("hash")
        return 1
class Sneaky(str):
    def __repr__(self):
        ran.append("str repr")
        return "SNEAKY"
loud = Loud()
sneaky = Sneaky("s")
box = [loud, {loud: sneaky}]
ran.clear()
final_result(loud + sneaky + box)
"#;
    let values = values_of(session.as_mut(), script);
    assert_eq!(
        values,
        vec![(
            "box".to_string(),
            "[<object>, {<object>: <object>}]".to_string()
        )],
        "only the list is shown, its objects by a stand-in"
    );
    assert_eq!(
        value_of(session.as_mut(), "final_result(ran)"),
        serde_json::json!([])
    );
}

#[test]
fn a_syntax_error_and_a_failure_outside_the_script_carry_no_values() {
    let mut session = session();
    match session
        .run("x = (1,\nfinal_result(x)")
        .expect("runs")
        .completion
    {
        Err(ScriptError::Syntax { .. }) => {}
        other => panic!("{other:?}"),
    }
    let values = values_of(session.as_mut(), "x = 1\nraise ValueError('no')");
    assert!(values.is_empty(), "a line that names nothing: {values:?}");
}

/// A code object's file name can be a `str` subclass (`compile` keeps one). The
/// host compares file names while the prelude may look at frames, so a subclass
/// `__eq__` running then could walk to the prelude's frames: str's own
/// comparison is used there; the subclass's runs only later, with the guard
/// shut, as any script code does.
#[test]
fn a_file_name_that_is_a_str_subclass_runs_no_code_while_frames_are_read() {
    let mut session = session();
    let script = r#"
import sys
caught = []
class Name(str):
    def __eq__(self, other):
        try:
            caught.append(sys._getframe(1).f_code.co_name)
        except Exception as e:
            caught.append("refused")
        return str.__eq__(self, other)
    __ne__ = lambda self, other: not self.__eq__(other)
    __hash__ = str.__hash__
exec(compile("x = 1\n1 / 0", Name("<script>"), "exec"))
"#;
    let values = values_of(session.as_mut(), script);
    assert!(
        values.iter().all(|(name, _)| name != "caught"),
        "{values:?}"
    );
    let caught = caught(session.as_mut());
    assert!(
        caught.iter().all(|entry| entry == "refused"),
        "the subclass's __eq__ saw a frame: {caught:?}"
    );
}

/// A class body's namespace can be the script's own mapping (a metaclass's
/// `__prepare__`), which reading the frame's locals writes to: that happens
/// only with the guard shut, so the mapping's methods see no frame.
#[test]
fn a_class_body_with_the_scripts_own_namespace_sees_no_frame_while_values_are_read() {
    let mut session = session();
    let script = r#"
import sys
caught = []
def look():
    try:
        caught.append(sys._getframe(2).f_code.co_name)
    except Exception:
        caught.append("refused")
class Spy(dict):
    def __setitem__(self, key, value):
        look()
        dict.__setitem__(self, key, value)
    def __delitem__(self, key):
        look()
        dict.__delitem__(self, key)
class Meta(type):
    @classmethod
    def __prepare__(cls, name, bases):
        return Spy()
caught.clear()
class Body(metaclass=Meta):
    def method(self):
        return __class__
    size = len(caught) + undefined_name
"#;
    let _ = values_of(session.as_mut(), script);
    let caught = caught(session.as_mut());
    assert!(
        !caught.is_empty(),
        "reading the class body's locals wrote to it"
    );
    assert!(
        caught.iter().all(|entry| entry == "refused"),
        "the namespace's methods saw a frame: {caught:?}"
    );
}

/// Observations show JSON (`true`), and small models write it back: JSON's
/// literals mean Python's in a session, and a script may still rebind them.
#[test]
fn json_literals_mean_pythons_own_until_a_script_rebinds_them() {
    let mut session = session();
    assert_eq!(
        value_of(session.as_mut(), "final_result([true, false, null])"),
        serde_json::json!([true, false, null])
    );
    assert_eq!(
        value_of(session.as_mut(), "true = 'mine'\nfinal_result(true)"),
        "mine"
    );
}
