//! Findings 2 and 3 of the audit: in-process Rhai's memory limit bypassed by values
//! held where its meter did not look (curried function pointers, closure captures,
//! the frames of a recursion), and its time limit bypassed by loops of slow builtin
//! calls, each of which counted as one operation between two clock reads.
//!
//! Each attack would hold 250–350 MB if it escaped the 64 MiB default; contained, it
//! stops after a few values.

use std::sync::Arc;
use std::time::{Duration, Instant};

use codeact::{Limits, NoTools, ScriptOutput, ScriptSession, runtime_by_name};

use crate::attack::Attack;

/// The attacks of this area.
pub const ATTACKS: &[Attack] = &[
    Attack {
        name: "rhai_curried_values_count_against_the_memory_limit",
        run: curried_values,
    },
    Attack {
        name: "rhai_closure_captures_count_against_the_memory_limit",
        run: closure_captures,
    },
    Attack {
        name: "rhai_values_held_by_recursion_frames_count_against_the_memory_limit",
        run: recursion_frames,
    },
    Attack {
        name: "rhai_medium_values_spread_over_frames_count_against_the_memory_limit",
        run: medium_values_over_frames,
    },
    Attack {
        name: "rhai_a_loop_of_slow_builtin_calls_stops_within_the_time_limit",
        run: slow_builtin_loop,
    },
];

/// Runs `script` in a fresh `rhai` session under `limits`; its output and whether
/// the session still runs a trivial script afterwards.
fn run(limits: Limits, script: &str) -> Result<ScriptOutput, String> {
    let runtime = runtime_by_name("rhai", limits).map_err(|e| e.to_string())?;
    let mut session =
        ScriptSession::start(&*runtime, Arc::new(NoTools)).map_err(|e| e.to_string())?;
    let output = session
        .run_blocking(script)
        .map_err(|e| format!("host failed: {e}"))?
        .output;
    let after = session
        .run_blocking("final_result(\"alive\")")
        .map_err(|e| format!("host failed afterwards: {e}"))?
        .output;
    if after != ScriptOutput::final_result(serde_json::json!("alive")) {
        return Err(format!("the session is unusable afterwards: {after}"));
    }
    Ok(output)
}

/// `Ok` with the table cell when `output` is an error naming `limit`.
fn stopped_by(output: &ScriptOutput, limit: &str) -> Result<String, String> {
    match output {
        ScriptOutput::Error { message } if message.contains(limit) => {
            Ok(format!("stopped by the {limit}"))
        }
        other => {
            let shown: String = other.to_string().chars().take(200).collect();
            Err(format!("not stopped by the {limit}: {shown}"))
        }
    }
}

fn memory_attack(column: &str, script: &str) -> Option<Result<String, String>> {
    (column == "rhai").then(|| {
        let output = run(Limits::default(), script)?;
        stopped_by(&output, "memory limit of 64 MiB")
    })
}

fn curried_values(column: &str) -> Option<Result<String, String>> {
    memory_attack(
        column,
        r#"
        fn keep(x) { x }
        let kept = [];
        for i in 0..20 {
            let big = "";
            big.pad(16000000, "x");
            kept.push(Fn("keep").curry(big + i));
        }
        final_result(kept.len())
        "#,
    )
}

fn closure_captures(column: &str) -> Option<Result<String, String>> {
    memory_attack(
        column,
        r#"
        let kept = [];
        for i in 0..20 {
            let big = "";
            big.pad(16000000, "x");
            big += i;
            kept.push(|| big.len());
        }
        final_result(kept.len())
        "#,
    )
}

fn recursion_frames(column: &str) -> Option<Result<String, String>> {
    memory_attack(
        column,
        r#"
        fn hold(n) {
            let big = "";
            big.pad(16000000, "x");
            big += n;
            if n > 0 { hold(n - 1) + big.len() } else { big.len() }
        }
        final_result(hold(20))
        "#,
    )
}

fn medium_values_over_frames(column: &str) -> Option<Result<String, String>> {
    memory_attack(
        column,
        r#"
        fn hold(n) {
            let mine = [];
            for i in 0..20 {
                let v = "";
                v.pad(250000, "y");
                v += i;
                mine.push(|| v);
            }
            if n > 0 { hold(n - 1) + mine.len() } else { mine.len() }
        }
        final_result(hold(60))
        "#,
    )
}

/// The audit's loop, with the largest pad the per-value cap allows.
fn slow_builtin_loop(column: &str) -> Option<Result<String, String>> {
    (column == "rhai").then(|| {
        let limits = Limits {
            wall_time: Duration::from_millis(100),
            max_operations: u64::MAX,
            ..Limits::default()
        };
        let started = Instant::now();
        let output = run(limits, r#"loop { let s = ""; s.pad(16000000, 'x'); }"#)?;
        let elapsed = started.elapsed();
        if elapsed > Duration::from_secs(2) {
            return Err(format!("stopped only after {} ms", elapsed.as_millis()));
        }
        stopped_by(&output, "time limit of 100 ms")
    })
}
