//! Files in and out (issue 18): a working directory with a mounted input read and a
//! report written from every runtime, the report coming back as an artifact with
//! its size and digest, `codeact run --mount … --artifacts DIR` copying it out, and
//! a temporary working directory removed at the end.

use std::path::Path;
use std::sync::Arc;

use codeact::files::{Mount, MountMode};
use codeact::model::ReplayModel;
use codeact::{Agent, FileArea, Limits, RhaiRuntime, ScriptOutput, ToolBox};
use serde_json::json;

use crate::cli::codeact;
use crate::support::runtimes::EVERY_RUNTIME;

/// `data/prices.csv` mounted read-only into a fresh temporary root.
fn area_with_prices(scratch: &Path) -> FileArea {
    let data = scratch.join("data");
    std::fs::create_dir_all(&data).expect("made");
    std::fs::write(
        data.join("prices.csv"),
        "item,price\ncheese,7.8\nbread,2.2\n",
    )
    .expect("written");
    FileArea::builder()
        .mount(Mount {
            host: data,
            guest: "data".into(),
            mode: MountMode::ReadOnly,
        })
        .open()
        .expect("opens")
}

/// The same work in each language, with the helpers as a model would call them:
/// read the CSV, add the prices, write a report, list the root.
fn report_script(runtime: &str) -> &'static str {
    match runtime {
        "rhai" | "wasm:rhai" => {
            r#"let lines = read_text("data/prices.csv").split("\n");
let total = 0.0;
for line in lines { let cells = line.split(","); if cells.len() == 2 && cells[0] != "item" { total += parse_float(cells[1]); } }
write_text("out/report.md", `total: ${total}`);
final_result(#{total: total, listed: list_dir("."), here: exists("out/report.md")}, ["out/report.md"])"#
        }
        "js" | "js-in-process" | "wasm:js" | "wasm:js-stdio" | "wasm:boa" => {
            r#"const lines = tools.read_text({path: "data/prices.csv"}).split("\n");
let total = 0;
for (const line of lines.slice(1)) { const cells = line.split(","); if (cells.length === 2) total += parseFloat(cells[1]); }
tools.write_text({path: "out/report.md", text: "total: " + total});
final_result({total, listed: tools.list_dir({}), here: tools.exists({path: "out/report.md"})}, ["out/report.md"])"#
        }
        _ => {
            r#"total = 0.0
for line in read_text("data/prices.csv").split("\n")[1:]:
    cells = line.split(",")
    if len(cells) == 2:
        total += float(cells[1])
write_text("out/report.md", "total: " + str(total))
final_result({"total": total, "listed": list_dir("."), "here": exists("out/report.md")}, ["out/report.md"])"#
        }
    }
}

/// Runs `script` once in a new `runtime` session over [`area_with_prices`]; the
/// scratch directory (kept alive), the area and the run.
fn run_with_prices(
    runtime: &str,
    script: &str,
) -> (tempfile::TempDir, FileArea, codeact::exec::ScriptRun) {
    let scratch = tempfile::tempdir().expect("scratch");
    let area = area_with_prices(scratch.path());
    let engine = crate::support::runtimes::runtime(runtime, Limits::default()).expect("runtime");
    let tools = Arc::new(ToolBox::new(area.tools()).expect("tools"));
    let mut session = codeact::ScriptSession::start(&*engine, tools).expect("starts");
    let run = session.run_blocking(script).expect("runs");
    (scratch, area, run)
}

/// If this fails, a runtime's scripts cannot use the working directory the host
/// gave them: a mounted input unread, or a report not written where the host
/// looks for it.
#[test]
fn a_mounted_csv_is_read_and_a_report_written_on_every_runtime() {
    let mut failures = Vec::new();
    for runtime in EVERY_RUNTIME {
        let (_scratch, area, run) = run_with_prices(runtime, report_script(runtime));
        let report = std::fs::read_to_string(area.root().join("out/report.md")).unwrap_or_default();
        let fine = match &run.output {
            ScriptOutput::FinalResult { value, artifacts } => {
                (value["total"].as_f64().unwrap_or_default() - 10.0).abs() < 1e-9
                    && value["listed"] == json!(["data/", "out/"])
                    && value["here"] == json!(true)
                    && artifacts == &["out/report.md".to_string()]
                    && report.starts_with("total: 10")
            }
            _ => false,
        };
        if !fine {
            failures.push(format!("{runtime}: {} (report: {report:?})", run.output));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The 1×1 PNG a script writes with `write_bytes`, in base64.
const DOT_PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg==";

/// If this fails, a script cannot make a binary file (a chart it drew) for the
/// model to see or the host to take, or bad base64 is written rather than refused.
#[test]
fn a_script_writes_a_png_with_write_bytes_and_shows_it_on_every_runtime() {
    let mut failures = Vec::new();
    for runtime in EVERY_RUNTIME {
        let script = match runtime {
            "rhai" | "wasm:rhai" => format!(
                "let w = write_bytes(#{{path: \"out/dot.png\", base64: \"{DOT_PNG_BASE64}\"}});\nlet bad = \"\";\ntry {{ write_bytes(#{{path: \"out/bad.png\", base64: \"not base64!\"}}); }} catch (e) {{ bad = e; }}\nlet s = show_image(#{{path: \"out/dot.png\"}});\nfinal_result([w.bytes, s.width, `${{bad}}`])"
            ),
            "js" | "js-in-process" | "wasm:js" | "wasm:js-stdio" | "wasm:boa" => format!(
                "const w = tools.write_bytes({{path: \"out/dot.png\", base64: \"{DOT_PNG_BASE64}\"}});\nlet bad = \"\";\ntry {{ tools.write_bytes({{path: \"out/bad.png\", base64: \"not base64!\"}}); }} catch (e) {{ bad = e.message; }}\nconst s = tools.show_image({{path: \"out/dot.png\"}});\nfinal_result([w.bytes, s.width, bad])"
            ),
            _ => format!(
                "w = write_bytes(path=\"out/dot.png\", base64=\"{DOT_PNG_BASE64}\")\nbad = \"\"\ntry:\n    write_bytes(path=\"out/bad.png\", base64=\"not base64!\")\nexcept ToolError as e:\n    bad = str(e)\ns = show_image(path=\"out/dot.png\")\nfinal_result([w[\"bytes\"], s[\"width\"], bad])"
            ),
        };
        let (_scratch, area, run) = run_with_prices(runtime, &script);
        let written = std::fs::read(area.root().join("out/dot.png")).unwrap_or_default();
        let fine = match &run.output {
            ScriptOutput::FinalResult { value, .. } => {
                value[0] == json!(70)
                    && value[1] == json!(1)
                    && value[2]
                        .as_str()
                        .is_some_and(|bad| bad.contains("is not base64"))
                    && written.len() == 70
                    && !area.root().join("out/bad.png").exists()
            }
            _ => false,
        };
        if !fine {
            failures.push(format!("{runtime}: {}", run.output));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// If this fails, the record of a result no longer says which file it points to
/// as it was when accepted (size and sha256), or looks for it outside the area.
#[tokio::test]
async fn a_report_the_script_wrote_comes_back_as_an_artifact_with_its_size_and_digest() {
    let scratch = tempfile::tempdir().expect("scratch");
    let area = area_with_prices(scratch.path());
    let model = Arc::new(ReplayModel::new([
        "```rhai\nwrite_text(\"out/report.md\", \"hello\");\nfinal_result(\"see the report\", [\"out/report.md\"])\n```",
    ]));
    let agent = Agent::builder(model, Arc::new(RhaiRuntime::new(Limits::default())))
        .files(&area)
        .build()
        .expect("builds");
    let run = agent.run("Write the report.").await.expect("finishes");
    let output = run.final_output.expect("accepted");
    let artifact = &output.artifacts[0];
    assert_eq!(artifact.path, Path::new("out/report.md"));
    assert_eq!(artifact.bytes, Some(5));
    assert_eq!(
        artifact.sha256.as_deref(),
        Some("2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"),
        "sha256 of 'hello'"
    );
}

/// If this fails, an agent on a Python guest cannot use the language's own file
/// API on its working directory: `open` on a mounted CSV, `os.makedirs` and
/// `open(…, 'w')` for the report, `os.listdir`, with the bytes written charged to
/// the run's disk limit like the helpers' (issue 18).
#[tokio::test]
async fn python_guests_read_and_write_the_working_directory_with_open_and_os() {
    for runtime in ["wasm:python", "wasm:micropython"] {
        let scratch = tempfile::tempdir().expect("scratch");
        let area = area_with_prices(scratch.path());
        let script = "import os\n\
            total = 0.0\n\
            f = open('data/prices.csv')\n\
            for line in f.read().split('\\n')[1:]:\n    cells = line.split(',')\n    if len(cells) == 2:\n        total += float(cells[1])\n\
            f.close()\n\
            try:\n    os.mkdir('out')\nexcept OSError:\n    pass\n\
            f = open('out/report.md', 'w')\nf.write('total: ' + str(total))\nf.close()\n\
            final_result({'total': total, 'root': sorted(os.listdir('.')), 'data': sorted(os.listdir('data'))}, ['out/report.md'])";
        let model = Arc::new(ReplayModel::new([format!("```python\n{script}\n```")]));
        let engine =
            crate::support::runtimes::runtime(runtime, Limits::default()).expect("runtime");
        let agent = Agent::builder(model, engine)
            .files(&area)
            .build()
            .expect("builds");
        let run = agent.run("Total the prices.").await.expect("finishes");
        let output = run
            .final_output
            .unwrap_or_else(|| panic!("{runtime}: no result: {:?}", run.outcome));
        let value: serde_json::Value =
            serde_json::from_str(output.content.raw()).expect("JSON content");
        assert_eq!(
            value,
            json!({"total": 10.0, "root": ["out"], "data": ["prices.csv"]}),
            "{runtime}"
        );
        assert_eq!(output.artifacts[0].bytes, Some(11), "{runtime}");
        let report = std::fs::read_to_string(area.root().join("out/report.md")).expect("written");
        assert_eq!(report, "total: 10.0", "{runtime}");
        // The folder and the file a block each, and the eleven bytes.
        assert_eq!(area.written_bytes(), 2 * 4096 + 11, "{runtime}");
    }
}

/// If this fails, `codeact run` cannot hand a script files or bring its report
/// back: the mount, the working directory or `--artifacts` is broken.
#[test]
fn codeact_run_mounts_an_input_and_copies_the_report_out() {
    let scratch = tempfile::tempdir().expect("scratch");
    let data = scratch.path().join("data");
    std::fs::create_dir_all(&data).expect("made");
    std::fs::write(data.join("names.txt"), "ada\ngrace\n").expect("written");
    let replies = scratch.path().join("replies.json");
    let reply = "```rhai\nlet names = read_text(\"in/names.txt\").split(\"\\n\");\nwrite_text(\"out/count.txt\", `${names.len()}`);\nfinal_result(\"counted\", [\"out/count.txt\"])\n```";
    std::fs::write(&replies, json!({"replies": [reply]}).to_string()).expect("written");
    let dest = scratch.path().join("artifacts");
    let out = codeact(
        &[
            "run",
            "--model",
            &format!("replay:{}", replies.display()),
            "--mount",
            &format!("{}:in", data.display()),
            "--artifacts",
            &dest.to_string_lossy(),
            "Count the names.",
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    assert_eq!(
        std::fs::read_to_string(dest.join("out/count.txt"))
            .ok()
            .as_deref(),
        Some("3"),
        "stderr: {stderr}"
    );
    assert!(
        stderr.contains("artifact: out/count.txt (1 bytes)"),
        "{stderr}"
    );
}

/// If this fails, every run with files leaves a directory behind in the system's
/// temporary directory, or a kept one is removed.
#[test]
fn a_temporary_working_directory_is_removed_unless_kept() {
    let area = FileArea::temporary().expect("opens");
    let root = area.root().to_path_buf();
    let twin = area.clone();
    drop(area);
    assert!(root.is_dir(), "a clone still holds it");
    drop(twin);
    assert!(!root.exists(), "removed with the last handle");
    let kept = FileArea::builder().keep(true).open().expect("opens");
    let root = kept.root().to_path_buf();
    drop(kept);
    assert!(root.is_dir(), "kept");
    std::fs::remove_dir_all(root).expect("cleaned up");
}

/// If this fails, a team file's `[files]` no longer gives its agents one shared
/// working directory with its mounts, or gives it to an agent that said no.
#[tokio::test]
async fn a_team_file_shares_one_working_directory_with_the_agents_that_want_it() {
    let scratch = tempfile::tempdir().expect("scratch");
    let dir = scratch.path();
    std::fs::create_dir_all(dir.join("data")).expect("made");
    std::fs::write(dir.join("data/name.txt"), "ada").expect("written");
    let writer = "```rhai\nwrite_text(\"out/greeting.txt\", \"hello \" + read_text(\"in/name.txt\"));\ntransfer_to_agent(\"reader\")\n```";
    let reader = "```rhai\nfinal_result(read_text(\"out/greeting.txt\"))\n```";
    let outsider = "```rhai\nlet seen = \"no helper\";\ntry { seen = `${exists(\"out\")}`; } catch (e) { }\nfinal_result(seen)\n```";
    for (name, reply) in [
        ("writer", writer),
        ("reader", reader),
        ("outsider", outsider),
    ] {
        std::fs::write(
            dir.join(format!("{name}.json")),
            json!({"replies": [reply]}).to_string(),
        )
        .expect("written");
    }
    std::fs::write(
        dir.join("team.toml"),
        r#"
[files]
workdir = "work"
mounts = ["data:in"]

[[agent]]
name = "writer"
model = "replay:writer.json"
targets = ["reader"]

[[agent]]
name = "reader"
model = "replay:reader.json"

[[agent]]
name = "outsider"
model = "replay:outsider.json"
files = false
"#,
    )
    .expect("written");
    let loaded = codeact::agent::load_team(
        &dir.join("team.toml"),
        &Limits::default(),
        std::time::Duration::from_secs(5),
        |builder| builder,
    )
    .expect("loads");
    assert_eq!(
        loaded.files.as_ref().map(|a| a.root().to_path_buf()),
        Some(dir.join("work"))
    );
    let team = loaded.builder.build().expect("builds");
    let run = team.run("writer", "Greet.").await.expect("runs");
    let codeact::agent::TeamOutcome::Finished { outcome, .. } = run.outcome else {
        panic!("the team did not finish: {:?}", run.outcome);
    };
    assert_eq!(
        outcome.script_output(),
        Some(ScriptOutput::final_result(json!("hello ada")))
    );
    let outsider = team.run("outsider", "Look.").await.expect("runs");
    let codeact::agent::TeamOutcome::Finished { outcome, .. } = outsider.outcome else {
        panic!("the outsider did not finish");
    };
    assert_eq!(
        outcome.script_output(),
        Some(ScriptOutput::final_result(json!("no helper"))),
        "an agent with files = false reached the files"
    );
}

/// If this fails, `codeact exec` ignores its file flags: no helpers with
/// `--files`, or a disk limit of `--max-disk-mb` that does not hold.
#[test]
fn codeact_exec_gives_files_held_to_max_disk_mb() {
    let scratch = tempfile::tempdir().expect("scratch");
    let work = scratch.path().join("work");
    let script = scratch.path().join("fill.rhai");
    std::fs::write(
        &script,
        "let chunk = \"x\"; chunk.pad(600000, \"x\");\nlet written = 0;\nfor i in 0..4 { try { write_text(`part${i}.txt`, chunk); written += 1; } catch (e) { return final_result(#{written: written, refused: `${e}`}); } }\nfinal_result(#{written: written})",
    )
    .expect("written");
    let out = codeact(
        &[
            "exec",
            "--workdir",
            &work.to_string_lossy(),
            "--max-disk-mb",
            "1",
            &script.to_string_lossy(),
        ],
        None,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(r#""written":1"#), "{stdout}");
    assert!(
        stdout.contains("disk limit of 1048576 bytes exceeded"),
        "{stdout}"
    );
    assert!(work.join("part0.txt").is_file() && !work.join("part1.txt").exists());
}
