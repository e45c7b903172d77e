//! Findings 2 and 3 of the audit: in-process Rhai's memory limit bypassed by values
//! held where its meter did not look (curried function pointers, closure captures,
//! the frames of a recursion), and its time limit bypassed by loops of slow builtin
//! calls, each of which counted as one operation between two clock reads.
//!
//! Each attack would hold 250–800 MB if it escaped the 64 MiB default; contained, it
//! stops after a few values. What the run allocated at most is measured by the
//! metered allocator this binary installs (as the `codeact` binary does) and must
//! stay under twice the limit: the limit plus one value at the per-value cap.

use std::sync::Arc;
use std::time::{Duration, Instant};

use codeact::tools::NoTools;
use codeact::{Limits, ScriptOutput, ScriptSession, runtime_by_name};
use codeact_alloc_meter::Metering;

use super::attack::Attack;

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
        name: "rhai_values_no_variable_holds_yet_count_against_the_memory_limit",
        run: values_in_flight,
    },
    Attack {
        name: "rhai_a_loop_of_slow_builtin_calls_stops_within_the_time_limit",
        run: slow_builtin_loop,
    },
];

/// The columns these attacks apply to: in-process Rhai and the Rhai guest (the
/// same engine inside wasmtime).
fn applies(column: &str) -> bool {
    matches!(column, "rhai" | "wasm:rhai")
}

/// Runs `script` in a fresh session of `column` under `limits`; its output and
/// whether the session still runs a trivial script afterwards.
fn run(column: &str, limits: Limits, script: &str) -> Result<ScriptOutput, String> {
    let runtime = runtime_by_name(column, limits).map_err(|e| e.to_string())?;
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

/// In-process, the host's allocator measures what the run held at most. In the
/// guest, what the run holds lives in the guest's linear memory, which wasmtime
/// caps; the host's own allocations are measured all the same.
fn memory_attack(column: &str, script: &str) -> Option<Result<String, String>> {
    applies(column).then(|| {
        let limits = Limits::default();
        let most = 2 * limits.max_memory_bytes;
        let section = Metering::start();
        let output = run(column, limits, script);
        let peak = usize::try_from(Metering::peak_bytes()).unwrap_or(0);
        drop(section);
        if !codeact::exec::metered_allocator_installed() {
            return Err("the metered allocator is not installed".into());
        }
        if peak > most {
            return Err(format!(
                "the run allocated {} MiB at most, over {} MiB",
                peak >> 20,
                most >> 20
            ));
        }
        stopped_by(&output?, "memory limit of 64 MiB")
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

/// Values only the engine holds while it works: the array `map` builds, the items
/// of an array literal being evaluated, the arguments of a call.
fn values_in_flight(column: &str) -> Option<Result<String, String>> {
    memory_attack(
        column,
        r#"
        fn big(i) { let s = ""; s.pad(4000000, "w"); s + i }
        fn count(a, b, c, d, e, f, g, h) { 8 }
        let seeds = [];
        seeds.pad(200, 0);
        let built = seeds.map(|i| big(i)).len();
        let listed = [big(1), big(2), big(3), big(4), big(5), big(6), big(7), big(8), big(9), big(10), big(11), big(12), big(13), big(14), big(15), big(16), big(17), big(18), big(19), big(20)].len();
        let passed = count(big(1), big(2), big(3), big(4), big(5), big(6), big(7), big(8)) + count(big(1), big(2), big(3), big(4), big(5), big(6), big(7), big(8));
        final_result(built + listed + passed)
        "#,
    )
}

/// The audit's loop, with the largest pad the per-value cap allows.
fn slow_builtin_loop(column: &str) -> Option<Result<String, String>> {
    applies(column).then(|| {
        let limits = Limits {
            wall_time: Duration::from_millis(100),
            max_operations: u64::MAX,
            ..Limits::default()
        };
        let started = Instant::now();
        let output = run(
            column,
            limits,
            r#"loop { let s = ""; s.pad(16000000, 'x'); }"#,
        )?;
        let elapsed = started.elapsed();
        if elapsed > Duration::from_secs(2) {
            return Err(format!("stopped only after {} ms", elapsed.as_millis()));
        }
        stopped_by(&output, "time limit of 100 ms")
    })
}
