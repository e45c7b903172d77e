//! The compile cache as an attacker sees it: files in the cache directory are
//! loaded only if this user's codeact wrote them for exactly this guest and engine.
//! The guests are tiny: `fixtures/guests/probe.wat` answers `a` with 42, and a copy
//! of it that answers 43 plays "another guest".

#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use codeact_runtime::{Limits, Session, ToolDispatch, ToolError, ToolSpec};
use codeact_wasm::{Guest, Source, WasmRuntime, cache};
use serde_json::{Value, json};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/guests")
        .join(name)
}

struct NoTools;

impl ToolDispatch for NoTools {
    fn specs(&self) -> &[ToolSpec] {
        &[]
    }

    fn call(&self, name: &str, _args: Value) -> Result<Value, ToolError> {
        Err(ToolError::new(format!("unknown tool '{name}'")))
    }
}

/// A fresh directory for this test, made the way codeact makes its own (0700).
fn scratch(name: &str) -> PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    let dir =
        std::env::temp_dir().join(format!("codeact-cache-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .expect("a scratch directory");
    dir
}

/// The probe guest, and a copy of it (in `dir`) that answers 43 instead of 42.
fn guests(dir: &Path) -> (Guest, Guest) {
    let probe = fixture("probe.wat");
    let text = std::fs::read_to_string(&probe).expect("probe.wat");
    let other_text = text.replace("\\22value\\22:42}}", "\\22value\\22:43}}");
    assert_ne!(text, other_text, "the other guest differs");
    let other = dir.join("other.wat");
    std::fs::write(&other, other_text).expect("other.wat");
    (
        Guest::custom(probe, "Probe", &["probe"]),
        Guest::custom(other, "Other", &["other"]),
    )
}

fn load(guest: &Guest, cache_dir: &Path) -> WasmRuntime {
    WasmRuntime::with_cache_dir(guest.clone(), Limits::default(), cache_dir).expect("loads")
}

/// What the guest answers to the script `a`: 42 from the probe, 43 from the other.
fn answer(runtime: &WasmRuntime) -> Value {
    let mut session = runtime
        .start_session(Arc::new(NoTools))
        .expect("a session starts");
    let outcome = session.run("a").expect("runs");
    let completion = outcome.completion.expect("a completion value");
    completion["value"].clone()
}

/// The compiled files in `dir`.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// If this fails, a compiled module of another WASI module placed under a guest's
/// cache file name is loaded and run as that guest: foreign code from the cache.
#[test]
fn a_compiled_module_of_another_guest_under_this_guests_cache_name_is_not_loaded() {
    let work = scratch("foreign-guests");
    let cache_dir = scratch("foreign-cache");
    let (probe, other) = guests(&work);

    // The probe's own entry, to learn its file name, then the other guest's entry.
    assert_eq!(answer(&load(&probe, &cache_dir)), json!(42));
    let [target] = entries(&cache_dir).try_into().expect("one entry");
    std::fs::remove_file(&target).expect("removed");
    assert_eq!(answer(&load(&other, &cache_dir)), json!(43));
    let [foreign] = entries(&cache_dir).try_into().expect("one entry");

    // The attacker's move: the other guest's compiled module under the probe's name.
    std::fs::copy(&foreign, &target).expect("copied");
    cache::forget_loaded();
    let runtime = load(&probe, &cache_dir);
    assert_eq!(
        answer(&runtime),
        json!(42),
        "the other guest's code ran as the probe"
    );
    assert_eq!(runtime.source(), Source::Compiled);

    let _ = std::fs::remove_dir_all(&work);
    let _ = std::fs::remove_dir_all(&cache_dir);
}

/// Loads the probe twice from `cache_dir` (forgetting in between): both times it must
/// be compiled, answer 42, and leave nothing in the directory.
fn compiled_without_touching(cache_dir: &Path, why: &str) {
    let probe = Guest::custom(fixture("probe.wat"), "Probe", &["probe"]);
    let before = listing(cache_dir);
    for _ in 0..2 {
        cache::forget_loaded();
        let runtime = load(&probe, cache_dir);
        assert_eq!(runtime.source(), Source::Compiled, "{why}");
        assert_eq!(answer(&runtime), json!(42));
    }
    assert_eq!(
        listing(cache_dir),
        before,
        "{why}: the directory was written"
    );
}

fn listing(dir: &Path) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    all.sort();
    all
}

/// If this fails, codeact loads or writes compiled code in a directory that others
/// may write, where they could plant files or swap the secret.
#[test]
fn a_cache_directory_others_may_write_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    for (name, mode) in [("group", 0o770), ("world", 0o777), ("sticky", 0o1777)] {
        let dir = scratch(&format!("writable-{name}"));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).expect("chmod");
        compiled_without_touching(&dir, &format!("a {name}-writable cache directory"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// If this fails, codeact trusts a cache directory that belongs to another user.
#[test]
fn a_cache_directory_of_another_user_is_not_used() {
    if rustix::process::geteuid().is_root() {
        // As root, make one: a 0700 directory handed to `nobody`.
        let dir = scratch("other-owner");
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).expect("chown");
        compiled_without_touching(&dir, "a directory of uid 65534");
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        // As anyone else, `/` is another user's (root's) directory.
        compiled_without_touching(Path::new("/"), "root's directory");
    }
}

/// If this fails, with `HOME` unset codeact keeps compiled code under the
/// system-wide temporary directory, where another user can plant files first.
#[test]
fn without_home_nothing_is_cached_under_the_temporary_directory() {
    const CHILD: &str = "CODEACT_CACHE_TEST_CHILD";
    let name = "without_home_nothing_is_cached_under_the_temporary_directory";
    if std::env::var_os(CHILD).is_some() {
        // In the child: no HOME, no XDG_CACHE_HOME, no CODEACT_CACHE_DIR.
        let probe = Guest::custom(fixture("probe.wat"), "Probe", &["probe"]);
        for _ in 0..2 {
            cache::forget_loaded();
            let runtime = WasmRuntime::new(probe.clone(), Limits::default()).expect("loads");
            assert_eq!(runtime.source(), Source::Compiled);
            assert_eq!(answer(&runtime), json!(42));
        }
        return;
    }
    let tmp = scratch("no-home-tmp");
    let out = std::process::Command::new(std::env::current_exe().expect("this test"))
        .args(["--exact", name, "--test-threads=1"])
        .env_clear()
        .env(CHILD, "1")
        .env("TMPDIR", &tmp)
        .output()
        .expect("the test runs again as a child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the child failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        listing(&tmp),
        Vec::<PathBuf>::new(),
        "written under the temporary directory"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}
