//! Finding 1: foreign code from the compile cache. The attacker puts a valid compiled
//! module of another WASI module under QuickJS's (predictable) cache file name; here
//! it is even one this user's codeact compiled itself, in the same cache directory,
//! which is the strongest form: only the binding of each file to its guest stops it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use codeact_wasm::{Guest, cache};

use super::attack::Attack;

pub const ATTACKS: &[Attack] = &[Attack {
    name: "another_guests_compiled_module_under_quickjs_cache_name_is_not_run",
    run: foreign_module_under_quickjs_name,
}];

/// A WASI reactor whose `_initialize` announces itself: if it runs, foreign code ran.
const FOREIGN: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "FOREIGN CODE RAN\0a")
  (func (export "_initialize")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 17))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
  (func (export "_start")))
"#;

fn codeact(cache_dir: &Path, args: &[&str], script: &str) -> Result<Output, String> {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_codeact"))
        .args(args)
        .env("CODEACT_CACHE_DIR", cache_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("codeact does not start: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|e| format!("codeact does not take the script: {e}"))?;
    }
    child
        .wait_with_output()
        .map_err(|e| format!("codeact does not finish: {e}"))
}

fn compiled_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
                .collect()
        })
        .unwrap_or_default()
}

fn foreign_module_under_quickjs_name(column: &str) -> Option<Result<String, String>> {
    (column == "wasm:js-stdio").then(|| {
        let work =
            std::env::temp_dir().join(format!("codeact-containment-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&work);
        let result = attack(&work);
        let _ = std::fs::remove_dir_all(&work);
        result
    })
}

fn attack(work: &Path) -> Result<String, String> {
    let cache_dir = work.join("cache");
    std::fs::create_dir_all(work).map_err(|e| e.to_string())?;
    let foreign = work.join("foreign.wat");
    std::fs::write(&foreign, FOREIGN).map_err(|e| e.to_string())?;

    // Step 1: codeact compiles the foreign module into the cache (it then fails to
    // run it as a guest, which does not matter: its entry is written).
    let runtime = format!("wasm:{}", foreign.display());
    codeact(&cache_dir, &["exec", "--runtime", &runtime, "-"], "x")?;
    let [entry] = <[PathBuf; 1]>::try_from(compiled_files(&cache_dir))
        .map_err(|files| format!("expected one compiled file, found {files:?}"))?;

    // Step 2: the same file under the name QuickJS's entry has.
    let quickjs_sha = Guest::pinned("wasm:js-stdio", Path::new("."))
        .and_then(|g| g.sha256)
        .ok_or("no pinned QuickJS")?;
    let foreign_sha = cache::sha256_hex(FOREIGN.as_bytes());
    let name = entry
        .file_name()
        .map(|n| n.to_string_lossy().replace(&foreign_sha, &quickjs_sha))
        .ok_or("an entry without a name")?;
    std::fs::copy(&entry, cache_dir.join(&name)).map_err(|e| e.to_string())?;

    // Step 3: `--runtime wasm:js-stdio` must run QuickJS, not the planted module.
    let out = codeact(
        &cache_dir,
        &["exec", "--runtime", "wasm:js-stdio", "-"],
        "final_result(40 + 2)",
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stdout.contains("FOREIGN") || stderr.contains("FOREIGN") {
        return Err("the planted module's _initialize ran".into());
    }
    if stdout != "{\"type\":\"final_result\",\"value\":42}\n" {
        let shown: String = format!("{stdout}{stderr}").chars().take(300).collect();
        return Err(format!(
            "QuickJS did not run (exit {:?}): {shown}",
            out.status.code()
        ));
    }
    Ok("another guest's compiled module under QuickJS's cache name failed its check; QuickJS was compiled again and answered 42".into())
}
