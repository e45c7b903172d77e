//! Runs the fixture corpus: `fixtures/scripts/<language>/<area>__<case>.<ext>`.
//!
//! A fixture is one or more scripts run in order in one session, split by a line
//! `// --- next run ---`. Lines starting with `// expect` state what the last run
//! must produce:
//!
//! - `// expect: <ScriptOutput JSON>`: exactly this output;
//! - `// expect error: <text>`: an `error` output whose message contains `<text>`;
//! - `// expect logs: <text>`: the printed output contains `<text>`.
//!
//! A line `// expect on <runtime>: …` (or `… error:`, `… logs:`) states what that
//! runtime produces instead, where engines differ by design (QuickJS allows `eval`;
//! a stopped wasm guest restarts); when a runtime has such lines, they replace the
//! general ones for it.
//!
//! An optional `// limits: <JSON>` line overrides fields of `Limits::default()`.
//! After the last run the session must still run a trivial script: a limit hit or an
//! error never wedges it. What each Rhai run allocated at most (counted by the
//! metered allocator this binary installs, as the `codeact` binary does) is checked
//! against its memory limit.

/// As the `codeact` binary: Rhai runs are held to their memory limit by what they
/// allocate, not only by what their variables hold.
#[global_allocator]
static ALLOCATOR: codeact::MeteredAllocator = codeact::MeteredAllocator;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use codeact::{Limits, ScriptOutput, ScriptSession, Tool, ToolBox, ToolError};
use codeact_alloc_meter::Metering;
use serde_json::{Value, json};

mod support;
use support::reliability::{self, Section};

/// The corpus's sandbox, adversarial and limit cases in RELIABILITY.md.
const CORPUS_SECTION: Section = Section {
    name: "script-corpus",
    title: "Script corpus: sandbox, adversarial and limit cases",
    intro: "The `sandbox__`, `adversarial__` and `limits__` fixtures of `fixtures/scripts/<language>/`, each run in one session per runtime (JS fixtures on Boa and QuickJS, Python fixtures on MicroPython and CPython). A cell is the expectation the fixture states for that runtime, met; after the last run the session must still run a trivial script.",
    binary: "fixtures",
    columns: &["rhai", "js", "wasm:js", "wasm:micropython", "wasm:python"],
};

/// The areas whose cases go into RELIABILITY.md.
const REPORTED_AREAS: &[&str] = &["sandbox__", "adversarial__", "limits__"];

/// Separates runs: `// --- next run ---` (or with `#` in Python).
const RUN_SEPARATOR: &str = "--- next run ---";

struct Fixture {
    name: String,
    runs: Vec<String>,
    limits: Limits,
    expectations: Vec<Expectation>,
    /// Expectations for one runtime, replacing the general ones.
    overrides: Vec<(String, Expectation)>,
}

enum Expectation {
    Output(ScriptOutput),
    ErrorContaining(String),
    LogsContaining(String),
}

/// The runtimes an `expect on RUNTIME` line may name.
const KNOWN_RUNTIMES: &[&str] = &[
    "rhai",
    "js",
    "js-in-process",
    "wasm:js",
    "wasm:micropython",
    "wasm:python",
];

/// The shortest text an `expect error:` or `expect logs:` line may look for: a
/// needle like `Error` matches nearly any failure, so the case could pass for the
/// wrong reason.
const MIN_NEEDLE_CHARS: usize = 8;

/// The directive a comment line holds: its text after `//` or `#` when that text
/// starts with the word `expect` or `limits` (so `# expected…` is prose). Every
/// such line must parse: a misspelt directive is an error, not a comment.
fn directive(line: &str) -> Option<&str> {
    let line = line.trim();
    let text = line
        .strip_prefix("//")
        .or_else(|| line.strip_prefix('#'))?
        .trim_start();
    let word_end = text
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(text.len());
    matches!(&text[..word_end], "expect" | "limits").then_some(text)
}

fn parse_fixture(path: &Path) -> Result<Fixture, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("unreadable: {e}"))?;
    let mut expectations = Vec::new();
    let mut limits = json!({});
    let mut overrides = Vec::new();
    for raw in text.lines() {
        let Some(line) = directive(raw) else {
            continue;
        };
        let bad = || format!("malformed directive: {}", raw.trim());
        if let Some(rest) = line.strip_prefix("expect on ") {
            let (runtime, what) = rest.split_once(' ').ok_or_else(bad)?;
            let (runtime, what) = match runtime.strip_suffix(':') {
                Some(runtime) => (runtime, format!("expect: {what}")),
                None => (runtime, format!("expect {what}")),
            };
            if !KNOWN_RUNTIMES.contains(&runtime) {
                return Err(format!("`expect on` names no runtime: {}", raw.trim()));
            }
            let expectation = parse_expectation(&what)?.ok_or_else(bad)?;
            overrides.push((runtime.to_string(), expectation));
        } else if let Some(expectation) = parse_expectation(line)? {
            expectations.push(expectation);
        } else if let Some(json_text) = line.strip_prefix("limits:") {
            limits = serde_json::from_str(json_text.trim())
                .map_err(|e| format!("bad limits line: {e}"))?;
        } else {
            return Err(bad());
        }
    }
    if expectations.is_empty() {
        return Err("has no `// expect` line".into());
    }
    let limits: Limits = serde_json::from_value(limits).map_err(|e| format!("bad limits: {e}"))?;
    let mut runs = vec![String::new()];
    for line in text.split_inclusive('\n') {
        let bare = line
            .trim()
            .trim_start_matches("//")
            .trim_start_matches('#')
            .trim();
        if bare == RUN_SEPARATOR {
            runs.push(String::new());
        } else if let Some(run) = runs.last_mut() {
            run.push_str(line);
        }
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(Fixture {
        name,
        runs,
        limits,
        expectations,
        overrides,
    })
}

/// An `expect…` line (comment marker removed), or `None` for any other line.
fn parse_expectation(line: &str) -> Result<Option<Expectation>, String> {
    if let Some(json_text) = line.strip_prefix("expect:") {
        let wire: Value =
            serde_json::from_str(json_text.trim()).map_err(|e| format!("bad expect line: {e}"))?;
        let output = serde_json::from_value(wire)
            .map_err(|e| format!("expect line is not a ScriptOutput: {e}"))?;
        Ok(Some(Expectation::Output(output)))
    } else if let Some(text) = line.strip_prefix("expect error:") {
        Ok(Some(Expectation::ErrorContaining(needle(text)?)))
    } else if let Some(text) = line.strip_prefix("expect logs:") {
        Ok(Some(Expectation::LogsContaining(needle(text)?)))
    } else {
        Ok(None)
    }
}

/// The text an `expect error:` or `expect logs:` line looks for, if specific enough.
fn needle(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.chars().count() < MIN_NEEDLE_CHARS {
        return Err(format!(
            "`{text}` is too broad to look for (at least {MIN_NEEDLE_CHARS} characters)"
        ));
    }
    Ok(text.to_string())
}

fn test_tools() -> ToolBox {
    let add = Tool::from_fn("add", "Adds a and b.", |args| {
        Ok(json!(
            args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)
        ))
    });
    let add = add.with_parameters(json!({
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}
    }));
    let fail = Tool::from_fn("fail", "Always fails.", |_| {
        Err(ToolError::new("the tool failed on purpose"))
    });
    let echo = Tool::from_fn("echo", "Returns its arguments.", Ok);
    ToolBox::new([add, echo, fail]).expect("test tools are valid")
}

/// What an expectation checked, in a table cell.
fn describe(expectation: &Expectation) -> String {
    let short = |text: &str| {
        let mut cut: String = text.chars().take(70).collect();
        if cut.len() < text.len() {
            cut.push('…');
        }
        cut
    };
    match expectation {
        Expectation::Output(output) => {
            let wire = serde_json::to_value(output).unwrap_or_default();
            let kind = wire["type"].as_str().unwrap_or("?").to_string();
            let body = wire
                .get("value")
                .or_else(|| wire.get("message"))
                .or_else(|| wire.get("agent_name"))
                .map(Value::to_string)
                .unwrap_or_default();
            format!("{kind} {}", short(&body))
        }
        Expectation::ErrorContaining(text) => format!("error ∋ \"{}\"", short(text)),
        Expectation::LogsContaining(text) => format!("logs ∋ \"{}\"", short(text)),
    }
}

async fn check(runtime_name: &str, fixture: Fixture) -> Result<String, String> {
    let max_memory_bytes = fixture.limits.max_memory_bytes;
    let runtime = support::runtimes::runtime(runtime_name, fixture.limits)?;
    let mut session =
        ScriptSession::start(&*runtime, Arc::new(test_tools())).map_err(|e| e.to_string())?;
    let mut last = None;
    for script in &fixture.runs {
        let run = if runtime_name == "rhai" {
            // Rhai runs in this process: what each run allocated at most, counted
            // by the metered allocator on the thread that runs it, must stay near
            // its limit (the limit, one value at its cap, the engine's own).
            let (run, peak) = tokio::task::block_in_place(|| {
                let section = Metering::start();
                let run = session.run_blocking(script.as_str());
                let peak = usize::try_from(Metering::peak_bytes()).unwrap_or(0);
                drop(section);
                (run, peak)
            });
            let most = 2 * max_memory_bytes + (16 << 20);
            if peak > most {
                return Err(format!(
                    "a run allocated {} MiB at most, over {} MiB",
                    peak >> 20,
                    most >> 20
                ));
            }
            run
        } else {
            session.run(script.as_str()).await
        };
        last = Some(run.map_err(|e| format!("host failed: {e}"))?);
    }
    let run = last.ok_or("no runs")?;
    let overridden: Vec<&Expectation> = fixture
        .overrides
        .iter()
        .filter(|(runtime, _)| runtime == runtime_name)
        .map(|(_, expectation)| expectation)
        .collect();
    let expectations: Vec<&Expectation> = if overridden.is_empty() {
        fixture.expectations.iter().collect()
    } else {
        overridden
    };
    let described: Vec<String> = expectations.iter().map(|e| describe(e)).collect();
    for expectation in expectations {
        match expectation {
            Expectation::Output(expected) if &run.output != expected => {
                return Err(format!("expected {expected}, got {}", run.output));
            }
            Expectation::ErrorContaining(text) => match &run.output {
                ScriptOutput::Error { message } if message.contains(text.as_str()) => {}
                other => {
                    return Err(format!(
                        "expected an error containing {text:?}, got {other}"
                    ));
                }
            },
            Expectation::LogsContaining(text) if !run.logs.render().contains(text.as_str()) => {
                let logs = run.logs.render();
                let tail: String = logs
                    .chars()
                    .rev()
                    .take(300)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                return Err(format!(
                    "expected logs containing {text:?}, logs end with {tail:?}"
                ));
            }
            _ => {}
        }
    }
    support::runtimes::still_runs(&mut session).await?;
    Ok(format!("✓ {}", described.join("; ")))
}

/// The fixtures of `language`, exactly those `fixtures/scripts/<language>/FIXTURES`
/// lists (one file name a line): a fixture that disappears, or one added without
/// being listed, fails here rather than shrinking the corpus unnoticed.
fn fixture_paths(language: &str) -> Vec<PathBuf> {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .join("fixtures/scripts")
        .join(language);
    let listing = dir.join(FIXTURE_LIST);
    let listed: Vec<String> = std::fs::read_to_string(&listing)
        .unwrap_or_else(|e| panic!("{}: {e}", listing.display()))
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(String::from)
        .collect();
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.is_file())
        .filter_map(|path| path.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|name| name != FIXTURE_LIST)
        .collect();
    present.sort();
    let missing: Vec<&String> = listed.iter().filter(|n| !present.contains(n)).collect();
    let unlisted: Vec<&String> = present.iter().filter(|n| !listed.contains(n)).collect();
    assert!(
        missing.is_empty() && unlisted.is_empty(),
        "{}: missing {missing:?}, not listed {unlisted:?}",
        listing.display()
    );
    present.into_iter().map(|name| dir.join(name)).collect()
}

/// The file in each language's fixture folder that lists its fixtures.
const FIXTURE_LIST: &str = "FIXTURES";

fn run_corpus(language: &'static str) -> Vec<String> {
    run_corpus_on(language, language)
}

fn run_corpus_on(language: &'static str, runtime_name: &'static str) -> Vec<String> {
    let paths = fixture_paths(language);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let mut failures = Vec::new();
    let mut rows = Vec::new();
    for path in &paths {
        let result = match parse_fixture(path) {
            Ok(fixture) => {
                let name = fixture.name.clone();
                runtime
                    .block_on(check(runtime_name, fixture))
                    .map(|outcome| (name.clone(), outcome))
                    .map_err(|e| format!("{runtime_name}/{name}: {e}"))
            }
            Err(e) => Err(format!("{}: {e}", path.display())),
        };
        match result {
            Ok((name, outcome)) => {
                let case = name
                    .rsplit_once('.')
                    .map_or(name.as_str(), |(stem, _)| stem);
                if REPORTED_AREAS.iter().any(|area| case.starts_with(area)) {
                    rows.push((case.to_string(), outcome));
                }
            }
            Err(failure) => failures.push(failure),
        }
    }
    if failures.is_empty()
        && let Err(problem) = reliability::submit(&CORPUS_SECTION, runtime_name, rows)
    {
        failures.push(problem);
    }
    failures
}

/// Fails listing every fixture that did not meet its expectation.
fn assert_none_failed(failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} fixture(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The corpus is the behaviour contract of the Rhai backend: if this fails, a script
/// gets a different output, a limit no longer holds, or a session is wedged.
#[test]
fn every_rhai_fixture_meets_its_expectation_and_memory_stays_bounded() {
    // Each run's allocations are checked against its limit in `check`: the
    // process's peak memory would include the other corpora running beside it.
    assert_none_failed(&run_corpus("rhai"));
}

/// The same contract for JavaScript: the cases of the Rhai corpus written in JS,
/// plus what only JS has (undefined, NaN, cycles, BigInt, regex backtracking).
/// Memory bombs run in worker processes, whose caps the cases check.
#[test]
fn every_js_fixture_meets_its_expectation() {
    assert_none_failed(&run_corpus("js"));
}

/// The JS corpus on QuickJS in wasm, with its `// expect on wasm:js` differences.
#[test]
fn every_js_fixture_on_quickjs() {
    assert_none_failed(&run_corpus_on("js", "wasm:js"));
}

/// The Python corpus on both Python guests.
#[test]
fn every_python_fixture_on_micropython() {
    assert_none_failed(&run_corpus_on("python", "wasm:micropython"));
}

#[test]
fn every_python_fixture_on_cpython() {
    assert_none_failed(&run_corpus_on("python", "wasm:python"));
}
