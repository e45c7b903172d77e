//! The containment audit's attacks on in-process Rhai (issue 14, findings 2 and 3):
//! values hidden where the memory meter did not look, and builtins slow enough that
//! a clock read every 1,024 operations let a run overshoot its deadline by seconds.
//!
//! Memory attacks run under an 8 MiB limit (per-value string cap 2 MiB), so a
//! contained attack allocates little and an escaped one a few hundred MB, not GB.

use std::sync::Arc;
use std::time::{Duration, Instant};

use codeact_rhai::RhaiRuntime;
use codeact_runtime::{LimitKind, Limits, NoTools, RunOutcome, Runtime, ScriptError, Session};
use serde_json::json;

const MIB: usize = 1 << 20;

fn small_memory() -> Limits {
    Limits {
        max_memory_bytes: 8 * MIB,
        ..Limits::default()
    }
}

fn run(limits: Limits, script: &str) -> (RunOutcome, Box<dyn Session>) {
    let runtime = RhaiRuntime::new(limits);
    let mut session = runtime.new_session(Arc::new(NoTools)).expect("session");
    let outcome = session.run(script).expect("host ok");
    (outcome, session)
}

fn limit_hit(outcome: &RunOutcome) -> Option<LimitKind> {
    match &outcome.completion {
        Err(ScriptError::LimitExceeded { limit, .. }) => Some(*limit),
        _ => None,
    }
}

/// Asserts the run stopped with the memory limit and the session still works.
fn assert_stopped_by_memory(script: &str) {
    let (outcome, mut session) = run(small_memory(), script);
    assert_eq!(
        limit_hit(&outcome),
        Some(LimitKind::Memory),
        "{:?}",
        outcome.completion
    );
    let after = session.run("final_result(1)").expect("host ok");
    assert_eq!(
        after.completion,
        Ok(json!({"type": "final_result", "value": 1}))
    );
}

/// If this fails, values curried into function pointers escape the memory limit:
/// the audit held 2.4 GB under 64 MiB this way.
#[test]
fn curried_values_count_against_the_memory_limit() {
    assert_stopped_by_memory(
        r#"
        fn keep(x) { x }
        let kept = [];
        for i in 0..100 {
            let big = "";
            big.pad(2000000, "x");
            kept.push(Fn("keep").curry(big + i));
        }
        kept.len()
        "#,
    );
}

/// If this fails, values captured by closures escape the memory limit.
#[test]
fn closure_captures_count_against_the_memory_limit() {
    assert_stopped_by_memory(
        r#"
        let kept = [];
        for i in 0..100 {
            let big = "";
            big.pad(2000000, "x");
            big += i;
            kept.push(|| big.len());
        }
        kept.len()
        "#,
    );
}

/// If this fails, a recursion in which every frame holds a large value escapes the
/// memory limit: each frame's scan saw only its own value.
#[test]
fn values_held_by_the_frames_of_a_recursion_count_against_the_memory_limit() {
    assert_stopped_by_memory(
        r#"
        fn hold(n) {
            let big = "";
            big.pad(2000000, "x");
            big += n;
            if n > 0 { hold(n - 1) + big.len() } else { big.len() }
        }
        hold(60)
        "#,
    );
}

/// If this fails, many medium values spread over frames and closures escape the
/// memory limit (the attacker's next move once large values are caught).
#[test]
fn medium_values_spread_over_frames_count_against_the_memory_limit() {
    assert_stopped_by_memory(
        r#"
        fn hold(n, kept) {
            let mine = [];
            for i in 0..20 {
                let v = "";
                v.pad(50000, "y");
                v += i;
                mine.push(|| v);
            }
            if n > 0 { hold(n - 1, kept) + mine.len() } else { mine.len() }
        }
        hold(60, [])
        "#,
    );
}

/// If this fails, one string shared by every frame of a recursion is counted once
/// per frame, and an honest script is stopped for memory it does not use.
#[test]
fn a_string_shared_by_many_frames_is_counted_once() {
    let (outcome, _session) = run(
        small_memory(),
        r#"
        fn walk(n, text) { if n > 0 { walk(n - 1, text) + 1 } else { text.len() } }
        let text = "";
        text.pad(1000000, "z");
        walk(40, text)
        "#,
    );
    assert_eq!(outcome.completion, Ok(json!(1_000_040)));
}

/// If this fails, a closure that captures itself (a cycle through shared cells)
/// hangs or fails the meter.
#[test]
fn a_closure_cycle_is_metered_without_looping() {
    let (outcome, _session) = run(
        small_memory(),
        r#"
        let a = [];
        let b = [];
        let fa = || b.len();
        let fb = || a.len();
        a.push(fa);
        b.push(fb);
        for i in 0..100 { a.len() + b.len(); }
        fa.call() + fb.call()
        "#,
    );
    assert_eq!(outcome.completion, Ok(json!(2)));
}

fn time_limited() -> Limits {
    Limits {
        wall_time: Duration::from_millis(100),
        max_operations: u64::MAX,
        ..Limits::default()
    }
}

/// Asserts `script` is stopped within 2 s of a 100 ms limit, by the time limit or
/// (for builtins that would build values past the caps) the memory limit.
fn assert_stopped_quickly(script: &str) {
    let runtime = RhaiRuntime::new(time_limited());
    let mut session = runtime.new_session(Arc::new(NoTools)).expect("session");
    let started = Instant::now();
    let outcome = session.run(script).expect("host ok");
    let elapsed = started.elapsed();
    assert!(
        matches!(
            limit_hit(&outcome),
            Some(LimitKind::WallTime | LimitKind::Memory)
        ),
        "{:?}",
        outcome.completion
    );
    assert!(
        elapsed < Duration::from_secs(2),
        "stopped after {elapsed:?}"
    );
}

/// If this fails, a loop of slow builtin calls (each one operation) runs seconds
/// past its time limit: the audit's loop stopped after 4.2 s under 100 ms.
#[test]
fn a_loop_of_slow_padding_stops_within_the_time_limit() {
    assert_stopped_quickly(r#"loop { let s = ""; s.pad(16000000, 'x'); }"#);
}

/// If this fails, another slow builtin (string replacement growing a string to the
/// cap) lets a loop overrun its time limit.
#[test]
fn a_loop_of_slow_replacements_stops_within_the_time_limit() {
    assert_stopped_quickly(
        r#"let s = ""; s.pad(4000000, "ab"); loop { let t = s; t.replace("a", "cc"); }"#,
    );
}

/// If this fails, padding with an empty string loops forever inside one builtin
/// call, where no limit can stop it, and holds the thread for good.
#[test]
fn padding_with_an_empty_string_ends() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (outcome, _session) = run(time_limited(), r#"let s = "a"; s.pad(10, ""); s"#);
        let _ = done.send(outcome.completion);
    });
    let completion = finished
        .recv_timeout(Duration::from_secs(10))
        .expect("the run ends");
    assert_eq!(completion, Ok(json!("a")));
}

/// If this fails, the replacement builtins changed what scripts see.
#[test]
fn padding_and_replacing_keep_their_meaning() {
    let (outcome, _session) = run(
        Limits::default(),
        r#"
        let a = "ab"; a.pad(5, "xy");
        let b = "é"; b.pad(3, 'ü');
        let c = "abc"; c.pad(2, "z");
        let d = "a-b-a"; d.replace("a", "xyz");
        let e = "ab"; e.replace("", "-");
        let f = "aXa"; f.replace('X', "yy");
        let g = "aXa"; g.replace("X", 'é');
        let h = "aXa"; h.replace('a', 'b');
        [a, b, c, d, e, f, g, h]
        "#,
    );
    assert_eq!(
        outcome.completion,
        Ok(json!([
            "abxyx",
            "éüü",
            "abc",
            "xyz-b-xyz",
            "-a-b-",
            "ayya",
            "aéa",
            "bXb"
        ]))
    );
}

/// If this fails, a replacement whose result would be far past the string cap is
/// built before being refused (here a terabyte: the process would abort).
#[test]
fn a_replacement_past_the_string_cap_is_refused_before_it_is_built() {
    let (outcome, _session) = run(
        small_memory(),
        r#"let s = ""; s.pad(1000000, "a"); let t = ""; t.pad(1000000, "b"); s.replace("a", t); s.len()"#,
    );
    assert_eq!(
        limit_hit(&outcome),
        Some(LimitKind::Memory),
        "{:?}",
        outcome.completion
    );
}

/// If this fails, splitting a string into more pieces than the array cap builds
/// every piece before being refused (16 million strings for a string at the cap).
#[test]
fn a_split_into_more_pieces_than_the_array_cap_is_refused() {
    let limits = Limits {
        max_operations: u64::MAX,
        ..Limits::default()
    };
    for split in [
        r#"s.split("")"#,
        "s.to_chars()",
        "s.split('x')",
        r#"s.split_rev("x", 100000000)"#,
    ] {
        let (outcome, _session) = run(
            limits.clone(),
            &format!(r#"let s = ""; s.pad(16000000, "x"); {split}.len()"#),
        );
        assert_eq!(
            limit_hit(&outcome),
            Some(LimitKind::Memory),
            "{split}: {:?}",
            outcome.completion
        );
    }
}

/// If this fails, the splitting builtins changed what scripts see.
#[test]
fn splitting_keeps_its_meaning() {
    let (outcome, _session) = run(
        Limits::default(),
        r#"
        const T = "a,b,,c";
        [T.split(","), T.split(',', 2), T.split_rev(","), T.split_rev(',', 2),
         "ab".split(""), "x y  z".split(), "".split(","), "abc".split("-"), "héj".to_chars(), T.split(",", 0)]
        "#,
    );
    assert_eq!(
        outcome.completion,
        Ok(json!([
            ["a", "b", "", "c"],
            ["a", "b,,c"],
            ["c", "", "b", "a"],
            ["c", "a,b,"],
            ["", "a", "b", ""],
            ["x", "y", "z"],
            [""],
            ["abc"],
            ["h", "é", "j"],
            ["a,b,,c"]
        ]))
    );
}

/// If this fails, the copy a result helper keeps for a script that ends in a
/// statement lets a run grow past its limit: an array that grows past it,
/// observed after every push, must still stop the run, and the session go on.
/// (The copy holds one output at a time, and the script cannot read it back.)
#[test]
fn a_value_a_result_helper_keeps_is_no_place_to_hide_memory() {
    assert_stopped_by_memory(
        r#"
        let kept = [];
        for i in 0..100 {
            let big = "";
            big.pad(2000000, "x");
            kept.push(big + i);
            observation(kept);
        }
        "#,
    );
}

/// If this fails, a loop that hands a large value to a result helper (which
/// keeps a copy of its output) runs past its time limit.
#[test]
fn a_loop_of_result_helpers_over_a_large_value_stops_within_the_time_limit() {
    assert_stopped_quickly(
        r#"
        let big = [];
        for i in 0..20000 { big.push(i); }
        loop { observation(big); }
        "#,
    );
}
