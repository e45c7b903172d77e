//! The attacks of the containment audit (issue 14), each tried as an attacker would
//! on every runtime it applies to. Every attack states the outcome that means it was
//! contained; what was observed goes into RELIABILITY.md. Attacks live in one file
//! per area under `tests/containment/`, each exporting `ATTACKS`.

use std::time::Instant;

use crate::support::reliability::{self, Section};

#[path = "containment/attack.rs"]
mod attack;
use attack::Attack;

#[path = "containment/compile_cache.rs"]
mod compile_cache;
#[path = "containment/files.rs"]
mod files;
#[path = "containment/guest_protocol.rs"]
mod guest_protocol;
#[path = "containment/host.rs"]
mod host;
#[path = "containment/namespaces.rs"]
mod namespaces;
#[path = "containment/network.rs"]
mod network;
#[path = "containment/rhai_limits.rs"]
mod rhai_limits;
#[path = "containment/surfaces.rs"]
mod surfaces;
#[path = "containment/wasi_files.rs"]
mod wasi_files;

const SECTION: Section = Section {
    name: "containment",
    title: "Containment: the audit's attacks",
    intro: "Each attack of the containment audit (issue 14), run by `cli/tests/suite/containment.rs` on every runtime it applies to with default limits unless the case says otherwise. A cell says how the attack was contained; `host` holds attacks on the host itself (tool processes, artifacts, streamed replies, terminals, fences).",
    binary: "suite containment::",
    columns: &[
        "rhai",
        "js",
        "wasm:js",
        "wasm:js-stdio",
        "wasm:micropython",
        "wasm:python",
        "wasm:rhai",
        "wasm:boa",
        "host",
    ],
};

/// Every area's attacks, in the order of the audit's findings.
fn attacks() -> Vec<&'static Attack> {
    let areas: &[&[Attack]] = &[
        compile_cache::ATTACKS,
        rhai_limits::ATTACKS,
        guest_protocol::ATTACKS,
        host::ATTACKS,
        network::ATTACKS,
        files::ATTACKS,
        wasi_files::ATTACKS,
        namespaces::ATTACKS,
        surfaces::ATTACKS,
    ];
    areas.iter().flat_map(|area| area.iter()).collect()
}

fn run_column(column: &'static str) {
    let only = std::env::var("CONTAINMENT_CASE").ok();
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for attack in attacks() {
        if only
            .as_deref()
            .is_some_and(|only| !attack.name.contains(only))
        {
            continue;
        }
        let started = Instant::now();
        match (attack.run)(column) {
            None => {}
            Some(Ok(outcome)) => rows.push((attack.name.to_string(), format!("✓ {outcome}"))),
            Some(Err(failure)) => failures.push(format!("{column}/{}: {failure}", attack.name)),
        }
        eprintln!(
            "{column}/{}: {} ms",
            attack.name,
            started.elapsed().as_millis()
        );
    }
    if failures.is_empty()
        && only.is_none()
        && let Err(problem) = reliability::submit(&SECTION, column, rows)
    {
        failures.push(problem);
    }
    assert!(
        failures.is_empty(),
        "{} attack(s) not contained:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// If one fails, an attack from the audit gets past Rhai's limits or sandbox again.
#[test]
fn audit_attacks_are_contained_on_rhai() {
    run_column("rhai");
}

/// If one fails, an attack from the audit gets past the Boa worker again.
#[test]
fn audit_attacks_are_contained_on_js() {
    run_column("js");
}

/// If one fails, an attack from the audit gets past the QuickJS guest again.
#[test]
fn audit_attacks_are_contained_on_wasm_js() {
    run_column("wasm:js");
}

/// If one fails, an attack from the audit gets past the prebuilt QuickJS
/// reactor (the stdio protocol) again.
#[test]
fn audit_attacks_are_contained_on_wasm_js_stdio() {
    run_column("wasm:js-stdio");
}

/// If one fails, an attack from the audit gets past the MicroPython guest again.
#[test]
fn audit_attacks_are_contained_on_wasm_micropython() {
    run_column("wasm:micropython");
}

/// If one fails, an attack from the audit gets past the CPython guest again.
#[test]
fn audit_attacks_are_contained_on_wasm_python() {
    run_column("wasm:python");
}

/// If one fails, an attack from the audit gets past the Rhai guest (wasmtime) again.
#[test]
fn audit_attacks_are_contained_on_wasm_rhai() {
    run_column("wasm:rhai");
}

/// If one fails, an attack from the audit gets past the Boa guest (wasmtime) again.
#[test]
fn audit_attacks_are_contained_on_wasm_boa() {
    run_column("wasm:boa");
}

/// If one fails, an attack from the audit gets past the host's own boundaries again.
#[test]
fn audit_attacks_on_the_host_are_contained() {
    run_column("host");
}
