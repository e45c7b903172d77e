//! The working directory as the Python guests see it through their own file API
//! (issue 18: WASI preopens, `open`, `os`), tried as an attacker would: `..`, links
//! out of the root and out of a mount (old and made by the script), a FIFO, a
//! read-only mount written, renamed or hard-linked into a writable folder; and the
//! disk limit in one big write, in many empty files, in a sparse file and in open
//! descriptors, which are the host's.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use codeact::files::{Mount, MountMode};
use codeact::{FileArea, Limits, ScriptOutput, ScriptSession, ToolBox};

use super::attack::Attack;

/// The attacks on the guests' own file access.
pub const ATTACKS: &[Attack] = &[
    Attack {
        name: "a_guests_own_file_access_never_reaches_outside_the_working_directory",
        run: escapes,
    },
    Attack {
        name: "a_guests_own_file_writes_keep_to_the_disk_limit_and_the_descriptor_cap",
        run: disk_limit,
    },
];

const SECRET: &str = "s3cret-outside-9d4";

/// `outside/` (a secret), `work/` (the root, with links out), `data/` (mounted
/// read-only: a CSV, a link out, a FIFO) and `out/` (mounted writable).
struct Tree {
    dir: tempfile::TempDir,
}

impl Tree {
    fn new() -> Self {
        let tree = Self {
            dir: tempfile::tempdir().expect("a scratch directory"),
        };
        for sub in ["outside", "work", "data", "out"] {
            std::fs::create_dir(tree.path(sub)).expect("made");
        }
        std::fs::write(tree.path("outside/secret.txt"), SECRET).expect("written");
        std::fs::write(tree.path("data/prices.csv"), "item,price\ncheese,7.8\n").expect("written");
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
                guest: "out".into(),
                mode: MountMode::ReadWrite,
            })
            .max_disk_bytes(max_disk_bytes)
            .open()
            .expect("the area opens")
    }
}

/// Python run in a guest with the area's folders, collecting for each attempt
/// `ok: <what it gave>` or `refused: <errno>`. `attempts` is Python source
/// defining `ATTEMPTS`, a list of functions.
fn run(column: &str, area: &FileArea, attempts: &str) -> Result<Vec<String>, String> {
    let script = format!(
        "import os\n\
         def read(p):\n    f = open(p)\n    t = f.read()\n    f.close()\n    return t\n\
         def write(p, t):\n    f = open(p, 'w')\n    f.write(t)\n    f.close()\n    return len(t)\n\
         {attempts}\n\
         out = []\n\
         for attempt in ATTEMPTS:\n    try:\n        out.append('ok: ' + str(attempt())[:200])\n    except Exception as e:\n        code = e.args[0] if e.args and isinstance(e.args[0], int) else repr(e)\n        out.append('refused: ' + str(code))\n\
         final_result(out)"
    );
    let runtime = crate::support::runtimes::runtime(column, Limits::default())?;
    let tools = Arc::new(ToolBox::new(area.tools()).map_err(|e| e.to_string())?);
    let view = area.view();
    let mut session = ScriptSession::start_with_files(&*runtime, tools, Some(&view))
        .map_err(|e| e.to_string())?;
    let output = session
        .run_blocking(&script)
        .map_err(|e| format!("host failed: {e}"))?
        .output;
    let ScriptOutput::FinalResult { value, .. } = &output else {
        return Err(format!("the script did not finish: {output}"));
    };
    let got: Vec<String> = value
        .as_array()
        .ok_or("not a list")?
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_string())
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(crate::support::runtimes::still_runs(&mut session))?;
    Ok(got)
}

/// Each result must be `ok…` where `want` is `ok`, a refusal with that errno
/// where it is a number (WASI's: 33 no descriptors, 51 no space, 58 not
/// supported, 60 no such device), any refusal where it is `refused`, either
/// where it is `any`; never the secret.
fn judge(labels: &[&str], wants: &[&str], got: &[String]) -> Result<(), String> {
    if got.len() != wants.len() {
        return Err(format!(
            "{} results for {} attempts: {got:?}",
            got.len(),
            wants.len()
        ));
    }
    for ((label, want), got) in labels.iter().zip(wants).zip(got) {
        let fine = match *want {
            "ok" => got.starts_with("ok"),
            "refused" => got.starts_with("refused"),
            "any" => true,
            errno => got == &format!("refused: {errno}"),
        };
        if !fine || got.contains(SECRET) {
            return Err(format!("{label}: wanted {want}, got {got}"));
        }
    }
    Ok(())
}

fn applies(column: &str) -> bool {
    matches!(column, "wasm:python" | "wasm:micropython")
}

fn escapes(column: &str) -> Option<Result<String, String>> {
    if !applies(column) {
        return None;
    }
    let tree = Tree::new();
    let area = tree.area(codeact::files::DEFAULT_MAX_DISK_BYTES);
    let attempts: &[(&str, &str, &str)] = &[
        ("read the mount", "lambda: read('data/prices.csv')", "ok"),
        (
            "climb out",
            "lambda: read('../outside/secret.txt')",
            "refused",
        ),
        (
            "climb from the top",
            "lambda: read('/../outside/secret.txt')",
            "refused",
        ),
        ("a host path", "lambda: read('/etc/passwd')", "refused"),
        (
            "a folder link out",
            "lambda: read('link/secret.txt')",
            "refused",
        ),
        ("a file link out", "lambda: read('file_link')", "refused"),
        (
            "a link out of a mount",
            "lambda: read('data/escape')",
            "refused",
        ),
        ("a FIFO in a mount", "lambda: read('data/pipe')", "60"),
        ("list a link out", "lambda: os.listdir('link')", "refused"),
        (
            "write a read-only mount",
            "lambda: write('data/planted.txt', 'x')",
            "refused",
        ),
        (
            "overwrite a read-only file",
            "lambda: write('data/prices.csv', 'x')",
            "refused",
        ),
        (
            "rename out of a read-only mount",
            "lambda: os.rename('data/prices.csv', 'stolen.csv')",
            "refused",
        ),
        (
            "hard-link a read-only file",
            "lambda: os.link('data/prices.csv', 'out/hard.csv')",
            "refused",
        ),
        (
            "make a link out",
            "lambda: os.symlink('../outside', 'made')",
            "any",
        ),
        (
            "follow the made link",
            "lambda: read('made/secret.txt')",
            "refused",
        ),
        (
            "write through a link",
            "lambda: write('file_link', 'x')",
            "refused",
        ),
        (
            "climb out of a writable mount",
            "lambda: write('out/../../planted.txt', 'x')",
            "refused",
        ),
        (
            "write the writable mount",
            "lambda: write('out/report.md', 'total: 7.8')",
            "ok",
        ),
    ];
    let (labels, wants, source) = table(attempts);
    let started = Instant::now();
    Some(run(column, &area, &source).and_then(|got| {
        judge(&labels, &wants, &got)?;
        if started.elapsed() > Duration::from_secs(20) {
            return Err("the FIFO held the script up".into());
        }
        let outside: Vec<_> = std::fs::read_dir(tree.path("outside"))
            .map_err(|e| e.to_string())?
            .flatten()
            .map(|e| e.file_name())
            .collect();
        let secret =
            std::fs::read_to_string(tree.path("outside/secret.txt")).map_err(|e| e.to_string())?;
        let prices =
            std::fs::read_to_string(tree.path("data/prices.csv")).map_err(|e| e.to_string())?;
        if outside.len() != 1 || secret != SECRET || !prices.starts_with("item,price") {
            return Err(format!(
                "the outside or the read-only mount changed: {outside:?}, {secret:?}, {prices:?}"
            ));
        }
        if tree.path("data/planted.txt").exists()
            || tree.path("planted.txt").exists()
            || tree.path("out/hard.csv").exists()
            || !tree.path("out/report.md").exists()
        {
            return Err("a refused write left a file, or the writable mount was not written".into());
        }
        Ok("`open` and `os` through `..`, a host path, links out of the root and of a mount (and one the script made), a FIFO (refused at once), a read-only mount written, renamed or hard-linked out, a write through a link: refused; the outside and the mount unchanged".into())
    }))
}

fn disk_limit(column: &str) -> Option<Result<String, String>> {
    if !applies(column) {
        return None;
    }
    let tree = Tree::new();
    let area = tree.area(64 * 1024);
    let attempts: &[(&str, &str, &str)] = &[
        (
            "one write past the limit",
            "lambda: write('big.txt', 'x' * 100 * 1024)",
            "51",
        ),
        (
            "a sparse file past the limit",
            "lambda: open('sparse', 'w').truncate(1 << 40)",
            "refused",
        ),
        (
            "one byte written 1 GiB past the end",
            "lambda: seek_write('far', 1 << 30)",
            "51",
        ),
        (
            "one byte written at an offset 1 GiB past the end",
            "lambda: pwrite_far('far2', 1 << 30)",
            "refused",
        ),
        ("many empty files", "fill", "51"),
        ("many open descriptors", "hold", "33"),
        ("closing them", "release", "ok"),
        (
            "a file opens again",
            "lambda: read('data/prices.csv')",
            "ok",
        ),
    ];
    let source = "def seek_write(p, at):\n    f = open(p, 'w')\n    f.seek(at)\n    f.write('x')\n    f.close()\n    return at\n\
                  def pwrite_far(p, at):\n    fd = os.open(p, os.O_WRONLY | os.O_CREAT)\n    try:\n        return os.pwrite(fd, b'x', at)\n    finally:\n        os.close(fd)\n\
                  def fill():\n    for i in range(1000):\n        open('e%d' % i, 'w').close()\n    return 1000\n\
                  HELD = []\n\
                  def hold():\n    for i in range(1000):\n        HELD.append(open('data/prices.csv'))\n    return len(HELD)\n\
                  def release():\n    for f in HELD:\n        f.close()\n    return len(HELD)\n";
    let (labels, wants, list) = table(attempts);
    let source = format!("{source}{list}");
    Some(run(column, &area, &source).and_then(|got| {
        judge(&labels, &wants, &got)?;
        let on_disk = disk_bytes(&tree.path("work"))? + disk_bytes(&tree.path("out"))?;
        let sizes = file_sizes(&tree.path("work"))? + file_sizes(&tree.path("out"))?;
        if area.written_bytes() > 64 * 1024 || on_disk > 64 * 1024 || sizes > 64 * 1024 {
            return Err(format!(
                "{} bytes charged, {on_disk} bytes on disk, files {sizes} bytes long, for a limit of 65536",
                area.written_bytes()
            ));
        }
        Ok("a write past the limit, a sparse file by truncation or by a write far past the end, a thousand empty files (a block each): refused with ENOSPC, the disk and the files' lengths under the limit; a thousand open files: refused at 128 with EMFILE, and open again once closed".into())
    }))
}

/// The labels, wants and a Python `ATTEMPTS` list of `attempts`; an attempt that
/// is a bare name is a function the caller's source defines.
fn table(
    attempts: &[(&'static str, &str, &'static str)],
) -> (Vec<&'static str>, Vec<&'static str>, String) {
    let labels = attempts.iter().map(|a| a.0).collect();
    let wants = attempts.iter().map(|a| a.2).collect();
    let list: Vec<&str> = attempts.iter().map(|a| a.1).collect();
    (labels, wants, format!("ATTEMPTS = [{}]", list.join(", ")))
}

/// The lengths of the files under `dir`, holes included: what copying them out
/// or hashing them would read.
fn file_sizes(dir: &std::path::Path) -> Result<u64, String> {
    let mut total: u64 = 0;
    for entry in std::fs::read_dir(dir).map_err(|e| e.to_string())?.flatten() {
        let meta = entry.path().symlink_metadata().map_err(|e| e.to_string())?;
        total = total.saturating_add(if meta.is_dir() {
            file_sizes(&entry.path())?
        } else {
            meta.len()
        });
    }
    Ok(total)
}

/// Bytes the files under `dir` hold, as `du` counts them (blocks).
fn disk_bytes(dir: &std::path::Path) -> Result<u64, String> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for entry in std::fs::read_dir(dir).map_err(|e| e.to_string())?.flatten() {
        let meta = entry.path().symlink_metadata().map_err(|e| e.to_string())?;
        if meta.is_dir() {
            total += disk_bytes(&entry.path())?;
        } else {
            total += meta.blocks() * 512;
        }
    }
    Ok(total)
}
