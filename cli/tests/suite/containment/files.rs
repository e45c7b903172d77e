//! The working directory a script gets when the host gives it files (issue 18):
//! the file helpers, tried from every runtime as an attacker would: `..`, links
//! out of the root and out of a mount, a FIFO, a read-only mount, a write through a
//! link, the disk limit in one big write, in many empty files and by shrinking a
//! file to buy room back.

use std::path::PathBuf;
use std::sync::Arc;

use codeact::files::{Mount, MountMode};
use codeact::{FileArea, Limits, ScriptOutput, ScriptSession, ToolBox};

use super::attack::Attack;

/// The file attacks.
pub const ATTACKS: &[Attack] = &[
    Attack {
        name: "file_helpers_never_reach_outside_the_working_directory",
        run: escapes,
    },
    Attack {
        name: "file_helpers_keep_to_the_disk_limit",
        run: disk_limit,
    },
];

/// A scratch tree: `outside/` (a secret the script must not reach), `work/` (the
/// root, holding links out), `data/` (mounted read-only, with a link out and a
/// FIFO) and `out/` (mounted writable).
struct Tree {
    dir: tempfile::TempDir,
}

const SECRET: &str = "s3cret-outside-7c1";

/// A 1×1 PNG.
const DOT_PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0,
    0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// A valid 1×1 PNG whose header claims `width` × `height` (its checksum made
/// right): a decompression bomb's shape without the compressed pixels.
fn png_claiming(width: u32, height: u32) -> Vec<u8> {
    let mut data = DOT_PNG.to_vec();
    data[16..20].copy_from_slice(&width.to_be_bytes());
    data[20..24].copy_from_slice(&height.to_be_bytes());
    let mut crc = 0xffff_ffffu32;
    for &byte in &data[12..29] {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    data[29..33].copy_from_slice(&(!crc).to_be_bytes());
    data
}

impl Tree {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let tree = Self { dir };
        for sub in ["outside", "work", "data", "out"] {
            std::fs::create_dir(tree.path(sub)).expect("made");
        }
        std::fs::write(tree.path("outside/secret.txt"), SECRET).expect("written");
        std::fs::write(tree.path("data/prices.csv"), "item,price\ncheese,7.8\n").expect("written");
        std::fs::write(tree.path("data/bomb.png"), png_claiming(40_000, 40_000)).expect("written");
        let link = |target: &str, at: &str| {
            std::os::unix::fs::symlink(tree.path(target), tree.path(at)).expect("linked")
        };
        link("outside", "work/link");
        link("outside/secret.txt", "work/file_link");
        link("outside/secret.txt", "data/escape");
        let fifo = std::process::Command::new("mkfifo")
            .arg(tree.path("data/pipe"))
            .status()
            .expect("mkfifo runs");
        assert!(fifo.success(), "mkfifo failed");
        tree
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn area(&self, max_disk_bytes: u64) -> FileArea {
        FileArea::builder()
            .workdir(self.path("work"))
            .mount(Mount {
                host: self.path("data"),
                guest: "data".into(),
                mode: MountMode::ReadOnly,
            })
            .mount(Mount {
                host: self.path("out"),
                guest: "/out".into(),
                mode: MountMode::ReadWrite,
            })
            .max_disk_bytes(max_disk_bytes)
            .open()
            .expect("the area opens")
    }
}

/// A script calling `call_tool(op, {path, text, base64})` for each case and collecting
/// `ok: <result as JSON>` or `refused: <message>`.
fn script(column: &str, cases: &[(&str, String, String)]) -> Option<String> {
    let list = |pick: fn(&(&str, String, String)) -> String| {
        serde_json::to_string(&cases.iter().map(pick).collect::<Vec<_>>()).expect("json")
    };
    let (ops, paths, texts) = (
        list(|c| c.0.to_string()),
        list(|c| c.1.clone()),
        list(|c| c.2.clone()),
    );
    Some(match column {
        "rhai" | "wasm:rhai" => format!(
            "let ops = {ops}; let paths = {paths}; let texts = {texts}; let out = [];\nfor i in 0..ops.len() {{ try {{ let r = call_tool(ops[i], #{{path: paths[i], text: texts[i], base64: `cGxhbnRlZA==`}}); out.push(`ok: ${{r}}`); }} catch (e) {{ out.push(`refused: ${{e}}`); }} }}\nfinal_result(out)"
        ),
        "js" | "wasm:js" | "wasm:js-stdio" | "wasm:boa" => format!(
            "const ops = {ops}, paths = {paths}, texts = {texts}; const out = [];\nfor (let i = 0; i < ops.length; i++) {{ try {{ out.push('ok: ' + JSON.stringify(call_tool(ops[i], {{path: paths[i], text: texts[i], base64: 'cGxhbnRlZA=='}}))); }} catch (e) {{ out.push('refused: ' + String(e)); }} }}\nfinal_result(out)"
        ),
        "wasm:python" | "wasm:micropython" => format!(
            "ops = {ops}\npaths = {paths}\ntexts = {texts}\nout = []\nfor i in range(len(ops)):\n    try:\n        out.append('ok: ' + str(call_tool(ops[i], {{'path': paths[i], 'text': texts[i], 'base64': 'cGxhbnRlZA=='}})))\n    except Exception as e:\n        out.append('refused: ' + str(e))\nfinal_result(out)"
        ),
        _ => return None,
    })
}

fn run(
    column: &str,
    area: &FileArea,
    script: &str,
) -> Result<(Vec<String>, ScriptSession), String> {
    let runtime = crate::support::runtimes::runtime(column, Limits::default())?;
    let tools = Arc::new(ToolBox::new(area.tools()).map_err(|e| e.to_string())?);
    let mut session = ScriptSession::start(&*runtime, tools).map_err(|e| e.to_string())?;
    let output = session
        .run_blocking(script)
        .map_err(|e| format!("host failed: {e}"))?
        .output;
    let ScriptOutput::FinalResult { value, .. } = &output else {
        return Err(format!("the script did not finish: {output}"));
    };
    let got = value
        .as_array()
        .ok_or("not a list")?
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string())
        })
        .collect();
    Ok((got, session))
}

/// Each case's result must start with `ok` or contain the refusal's words.
fn judge(cases: &[(&str, String, String)], wants: &[&str], got: &[String]) -> Result<(), String> {
    if got.len() != cases.len() {
        return Err(format!(
            "{} results for {} cases: {got:?}",
            got.len(),
            cases.len()
        ));
    }
    for ((case, want), got) in cases.iter().zip(wants).zip(got) {
        let fine = if *want == "ok" {
            got.starts_with("ok")
        } else {
            got.starts_with("refused") && got.contains(want)
        };
        if !fine || got.contains(SECRET) {
            return Err(format!("{}({}): wanted {want}, got {got}", case.0, case.1));
        }
    }
    Ok(())
}

fn case(
    op: &'static str,
    path: &str,
    want: &'static str,
) -> ((&'static str, String, String), &'static str) {
    ((op, path.to_string(), "planted".to_string()), want)
}

fn escapes(column: &str) -> Option<Result<String, String>> {
    script(column, &[])?;
    let tree = Tree::new();
    let area = tree.area(codeact::files::DEFAULT_MAX_DISK_BYTES);
    let (cases, wants): (Vec<_>, Vec<_>) = [
        case("read_text", "data/prices.csv", "ok"),
        case("read_text", "../outside/secret.txt", "climbs out"),
        case("read_text", "/../outside/secret.txt", "climbs out"),
        case("read_text", "link/secret.txt", "leads out"),
        case("read_text", "file_link", "leads out"),
        case("read_text", "data/escape", "leads out"),
        case("read_text", "data/pipe", "not a regular file"),
        case("read_text", "/etc/passwd", "does not exist"),
        case("list_dir", "link", "leads out"),
        case("exists", "link/secret.txt", "leads out"),
        case("write_text", "link/planted.txt", "leads out"),
        case("write_text", "file_link", "is a link"),
        case("write_text", "data/planted.txt", "read-only"),
        case("write_text", "data", "read-only"),
        case("write_text", "out/../../planted.txt", "climbs out"),
        case("write_bytes", "link/planted.png", "leads out"),
        case("write_bytes", "data/planted.png", "read-only"),
        case("write_bytes", "out/../../planted.png", "climbs out"),
        case("show_image", "link/secret.txt", "leads out"),
        case(
            "show_image",
            "data/prices.csv",
            "is not a PNG, JPEG, GIF or WebP image",
        ),
        case("show_image", "data/bomb.png", "at most 24 million pixels"),
        case("write_text", "out/report.md", "ok"),
    ]
    .into_iter()
    .unzip();
    let script = script(column, &cases)?;
    let started = std::time::Instant::now();
    Some(
        run(column, &area, &script)
            .and_then(|(got, mut session)| {
                judge(&cases, &wants, &got)?;
                alive(&mut session)
            })
            .and_then(|()| {
                if started.elapsed() > std::time::Duration::from_secs(20) {
                    return Err("the FIFO held the script up".into());
                }
                let outside: Vec<_> = std::fs::read_dir(tree.path("outside"))
                    .map_err(|e| e.to_string())?
                    .flatten()
                    .map(|e| e.file_name())
                    .collect();
                let secret = std::fs::read_to_string(tree.path("outside/secret.txt"))
                    .map_err(|e| e.to_string())?;
                if outside.len() != 1 || secret != SECRET {
                    return Err(format!("the outside changed: {outside:?}, {secret:?}"));
                }
                if tree.path("data/planted.txt").exists() || !tree.path("out/report.md").exists() {
                    return Err("the read-only mount was written, or the writable one was not".into());
                }
                Ok("`..`, absolute and relative links out of the root and out of a mount, a FIFO, a read-only mount, a write through a link (text or bytes), a 100-byte PNG claiming 1.6 billion pixels: refused; the outside unchanged".into())
            }),
    )
}

fn disk_limit(column: &str) -> Option<Result<String, String>> {
    script(column, &[])?;
    let tree = Tree::new();
    let area = tree.area(64 * 1024);
    let kib = |n: usize| "x".repeat(n * 1024);
    let mut cases: Vec<(&str, String, String)> = vec![
        ("write_text", "big.txt".into(), kib(100)),
        ("write_text", "a.txt".into(), kib(30)),
        ("write_text", "a.txt".into(), String::new()),
        ("write_text", "b.txt".into(), kib(30)),
    ];
    let mut wants = vec!["disk limit", "ok", "ok", "disk limit"];
    for i in 0..12 {
        cases.push(("write_text", format!("empty/{i}.txt"), String::new()));
        // 34 KiB charged so far; the folder and each file cost 4 KiB.
        wants.push(if i < 6 { "ok" } else { "disk limit" });
    }
    let script = script(column, &cases)?;
    Some(
        run(column, &area, &script)
            .and_then(|(got, mut session)| {
                judge(&cases, &wants, &got)?;
                alive(&mut session)
            })
            .and_then(|()| {
                let work = tree.path("work");
                if work.join("big.txt").exists() || work.join("b.txt").exists() {
                    return Err("a refused write left a file".into());
                }
                if area.written_bytes() > 64 * 1024 {
                    return Err(format!("{} bytes charged", area.written_bytes()));
                }
                Ok("one write past the limit, room bought back by shrinking a file, and many empty files (a block each): refused before anything was written".into())
            }),
    )
}

fn alive(session: &mut ScriptSession) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(crate::support::runtimes::still_runs(session))
}
