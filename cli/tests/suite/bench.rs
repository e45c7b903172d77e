//! `codeact bench` end to end: the JSON report carries every case and every scale
//! figure, the table names every case, and progress goes to stderr.

use std::process::{Command, Output};

use serde_json::Value;

fn codeact(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_codeact"))
        .args(args)
        .output()
        .expect("codeact runs")
}

const CASES: [&str; 8] = [
    "new_session",
    "warm_step",
    "tool_calls_1000",
    "sum_1m",
    "stop_infinite_loop_200ms",
    "json_10kb",
    "agent_10_steps",
    "slow_tool_short_budget",
];

/// If this fails, `benches/peers/benchmarks.sh` cannot build BENCHMARKS.md from the report.
#[test]
fn quick_rhai_bench_prints_parseable_json_with_every_case_and_scale_figure() {
    let out = codeact(&["bench", "--quick", "--runtime", "rhai", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("the report is JSON");
    assert_eq!(report["format"], 1);
    assert_eq!(report["quick"], true);
    assert!(report["machine"]["cpus"].as_u64().is_some_and(|n| n >= 1));
    let rhai = &report["backends"][0];
    assert_eq!(rhai["runtime"], "rhai");
    for case in CASES {
        let found = rhai["cases"]
            .as_array()
            .and_then(|cases| cases.iter().find(|c| c["case"] == case))
            .unwrap_or_else(|| panic!("no {case} in {rhai}"));
        for field in ["median_us", "p10_us", "p90_us"] {
            assert!(
                found[field].as_f64().is_some_and(|v| v > 0.0),
                "{case}: {found}"
            );
        }
        assert!(
            found["iterations"].as_u64().is_some_and(|n| n >= 1),
            "{case}: {found}"
        );
    }
    let scale = &rhai["scale"];
    assert!(
        scale["idle_memory"]["per_session_bytes"].as_f64().is_some(),
        "{scale}"
    );
    let levels: Vec<u64> = scale["throughput"]
        .as_array()
        .map(|levels| {
            levels
                .iter()
                .filter_map(|t| t["concurrent"].as_u64())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(levels, [1, 10, 100], "{scale}");
    assert_eq!(
        scale["script_size"].as_array().map(Vec::len),
        Some(3),
        "{scale}"
    );
    assert!(
        scale["history"]["step_100"]["median_us"].as_f64().is_some(),
        "{scale}"
    );
    assert!(stderr.contains("bench: rhai: warm_step"), "{stderr}");
}

#[test]
fn the_table_names_every_case_for_the_javascript_worker() {
    let out = codeact(&["bench", "--quick", "--no-scale", "--runtime", "js"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for title in [
        "new session + first step",
        "warm trivial step",
        "1,000 tool calls",
        "sum 1..1,000,000",
        "stop infinite loop (200 ms limit)",
        "JSON 10 KB in and out",
        "10-step agent run (replay)",
        "snapshot, 10 MB held",
    ] {
        assert!(stdout.contains(title), "no '{title}' in\n{stdout}");
    }
    assert!(!stdout.contains("FAILED"), "{stdout}");
    assert!(
        stdout.contains("n/a: Boa keeps a session's variables as objects in its own heap"),
        "a case that does not apply says so: {stdout}"
    );
}

#[test]
fn an_unknown_runtime_is_reported_and_exits_one() {
    let out = codeact(&["bench", "--quick", "--runtime", "cobol", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).expect("the report is JSON");
    let reason = report["backends"][0]["unavailable"].as_str().unwrap_or("");
    assert!(reason.contains("unknown runtime 'cobol'"), "{report}");
}
