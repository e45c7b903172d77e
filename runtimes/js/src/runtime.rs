//! The JavaScript runtime: sessions in worker processes or, opted into, on threads
//! of the host.

use std::path::PathBuf;
use std::sync::Arc;

use codeact_runtime::{
    Enforcement, HostError, LimitKind, Limits, Runtime, RuntimeInfo, Session, ToolDispatch,
    ToolSpec,
};

use crate::CARD_TEMPLATE;
use crate::session::{JsMode, JsSession};

const ENFORCEMENT: &[Enforcement] = &[
    Enforcement {
        limit: LimitKind::WallTime,
        how: "the host kills the worker process at the deadline (loops in callbacks and regex backtracking included); the session restarts. A backstop for a host that is stuck or gone: the worker ends itself (RLIMIT_CPU) once a run has used the limit plus 1 s of CPU. The host's clock stops while the worker waits on a tool call or a batch of calls: the deadline moves later by the wait (the backstop counts CPU, which a wait does not use)",
    },
    Enforcement {
        limit: LimitKind::TotalTime,
        how: "the same deadline, which waits never move past the total: the host kills the worker there, whatever it waits on, and a run found past it when a call returns ends there",
    },
    Enforcement {
        limit: LimitKind::Operations,
        how: "Boa's loop-iteration limit, counted per call frame: a backstop, the deadline is the real bound",
    },
    Enforcement {
        limit: LimitKind::Memory,
        how: "RLIMIT_DATA on the worker process (the limit plus 48 MiB for the engine); an allocation past it ends the worker, the session restarts",
    },
    Enforcement {
        limit: LimitKind::CallDepth,
        how: "Boa's recursion limit (8 frames per unit of the limit, at most 512)",
    },
    Enforcement {
        limit: LimitKind::NestingDepth,
        how: "checked when the completion value is encoded to JSON",
    },
    Enforcement {
        limit: LimitKind::Variables,
        how: "not enforced separately: bounded by the memory limit",
    },
    Enforcement {
        limit: LimitKind::Functions,
        how: "not enforced separately: bounded by the memory limit",
    },
    Enforcement {
        limit: LimitKind::Output,
        how: "console output past the cap is counted in the worker and never sent",
    },
];

static INFO: RuntimeInfo = RuntimeInfo {
    name: "js",
    language: "JavaScript",
    fence_tags: &["js", "javascript"],
    card_template: CARD_TEMPLATE,
    enforcement: ENFORCEMENT,
    parallel_calls: codeact_runtime::ParallelCalls::Together,
};

/// What the in-process mode gives up, limit by limit.
const IN_PROCESS_ENFORCEMENT: &[Enforcement] = &[
    Enforcement {
        limit: LimitKind::WallTime,
        how: "the host stops waiting at the deadline and restarts the session, but the abandoned thread runs on until its script ends: a loop in JS code ends at Boa's loop limit, a catastrophic regex or a huge native `fill` does not. The clock stops while the script waits on tools, as in the worker",
    },
    Enforcement {
        limit: LimitKind::TotalTime,
        how: "as in the worker: the host gives the thread up at the total deadline, whatever it waits on",
    },
    Enforcement {
        limit: LimitKind::Operations,
        how: "Boa's loop-iteration limit, counted per call frame",
    },
    Enforcement {
        limit: LimitKind::Memory,
        how: "NOT enforced: Boa has no heap cap; a memory bomb can exhaust the host",
    },
    Enforcement {
        limit: LimitKind::CallDepth,
        how: "Boa's recursion limit (8 frames per unit of the limit, at most 512), on a 16 MiB thread stack",
    },
    Enforcement {
        limit: LimitKind::NestingDepth,
        how: "checked when the completion value is encoded to JSON",
    },
    Enforcement {
        limit: LimitKind::Variables,
        how: "not enforced",
    },
    Enforcement {
        limit: LimitKind::Functions,
        how: "not enforced",
    },
    Enforcement {
        limit: LimitKind::Output,
        how: "console output past the cap is counted, never kept",
    },
];

static IN_PROCESS_INFO: RuntimeInfo = RuntimeInfo {
    name: "js-in-process",
    language: "JavaScript",
    fence_tags: &["js", "javascript"],
    card_template: CARD_TEMPLATE,
    enforcement: IN_PROCESS_ENFORCEMENT,
    parallel_calls: codeact_runtime::ParallelCalls::Together,
};

/// This executable, to start as a worker. On Linux `/proc/self/exe`, which
/// names the running binary even once the file was replaced or deleted (a
/// package upgrade under a long-running host): its path then no longer starts
/// the same program, or any. Elsewhere, its path.
fn this_executable() -> PathBuf {
    let running = std::path::Path::new("/proc/self/exe");
    if cfg!(target_os = "linux") && running.exists() {
        return running.to_path_buf();
    }
    std::env::current_exe().unwrap_or_else(|_| PathBuf::from("codeact"))
}

/// The JavaScript runtime: sessions run in worker processes started from
/// `worker_path` (default: this executable, as it runs).
#[derive(Debug, Clone)]
pub struct JsRuntime {
    limits: Arc<Limits>,
    worker_path: PathBuf,
    mode: JsMode,
}

impl JsRuntime {
    /// A runtime whose workers are this executable (which must call
    /// [`run_worker_if_requested`]).
    pub fn new(limits: Limits) -> Self {
        let worker_path = this_executable();
        Self {
            limits: Arc::new(limits),
            worker_path,
            mode: JsMode::Worker,
        }
    }

    /// A runtime whose sessions run on threads of this process: no worker start
    /// and no pipe round trip, but without the guarantees (see
    /// [`JsMode::InProcess`]). An explicit opt-in, for trusted scripts.
    pub fn in_process(limits: Limits) -> Self {
        Self {
            mode: JsMode::InProcess,
            ..Self::new(limits)
        }
    }

    /// The same runtime with workers started from `path`.
    pub fn with_worker(mut self, path: impl Into<PathBuf>) -> Self {
        self.worker_path = path.into();
        self
    }
}

impl Runtime for JsRuntime {
    fn info(&self) -> &RuntimeInfo {
        match self.mode {
            JsMode::Worker => &INFO,
            JsMode::InProcess => &IN_PROCESS_INFO,
        }
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }

    fn tool_signature(&self, tool: &ToolSpec) -> String {
        tool.js_signature()
    }

    fn spelling(&self) -> codeact_runtime::Spelling {
        codeact_runtime::Spelling::JAVASCRIPT
    }

    fn new_session(&self, tools: Arc<dyn ToolDispatch>) -> Result<Box<dyn Session>, HostError> {
        Ok(Box::new(JsSession::new(
            self.mode,
            self.worker_path.clone(),
            self.limits.clone(),
            tools,
        )))
    }

    /// Refused, saying why (no Boa session has a snapshot to restore).
    fn restore(
        &self,
        snapshot: &codeact_runtime::Snapshot,
        tools: Arc<dyn ToolDispatch>,
    ) -> Result<Box<dyn Session>, codeact_runtime::SnapshotError> {
        let _ = (snapshot, tools);
        Err(crate::session::unsupported(self.mode))
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use codeact_runtime::{ErrorFacts, ErrorKind, NoTools, ScriptError, ToolError};
    use serde_json::{Value, json};

    use super::*;

    struct Add;

    impl ToolDispatch for Add {
        fn specs(&self) -> &[ToolSpec] {
            &[]
        }
        fn call(&self, name: &str, args: Value) -> Result<Value, ToolError> {
            if name == "fail" {
                return Err(ToolError::new("no such file"));
            }
            Ok(json!(
                args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)
            ))
        }
    }

    #[test]
    fn an_in_process_session_refuses_a_snapshot_saying_why() {
        let runtime = JsRuntime::in_process(Limits::default());
        let mut session = runtime.new_session(Arc::new(NoTools)).expect("a session");
        let error = session.snapshot().expect_err("refused");
        let text = error.to_string();
        assert!(
            text.starts_with("js-in-process sessions cannot be snapshotted")
                && text.contains("own heap"),
            "{text}"
        );
        let sealed = codeact_runtime::Snapshot::seal("js-in-process", "boa", b"{}");
        let error = runtime
            .restore(&sealed, Arc::new(NoTools))
            .err()
            .expect("refused");
        assert!(
            matches!(error, codeact_runtime::SnapshotError::Unsupported { .. }),
            "{error}"
        );
    }

    fn in_process(wall_ms: u64) -> Box<dyn Session> {
        let limits = Limits {
            wall_time: Duration::from_millis(wall_ms),
            ..Limits::default()
        };
        JsRuntime::in_process(limits)
            .new_session(Arc::new(Add))
            .expect("session")
    }

    #[test]
    fn the_in_process_mode_keeps_state_and_serves_tools() {
        let mut session = in_process(5_000);
        session
            .run("let total = tools.add({a: 40, b: 1});")
            .expect("host ok");
        let outcome = session
            .run("let total2 = total + 1; final_result(total2)")
            .expect("host ok");
        assert_eq!(
            outcome.completion,
            Ok(json!({"type": "final_result", "value": 42}))
        );
    }

    /// The documented gap: the run returns at its deadline, but only because the
    /// host stops waiting; the session restarts.
    /// What the model reads: the script's line, never the prelude's code.
    #[test]
    fn an_error_points_at_the_script_and_never_at_the_prelude() {
        for (script, line) in [
            ("let a = 1;\nlet b = tools.fail({});\nb", ":2:"),
            (
                "let a;\nlet y = 2;\nfor (let i = 0; i < 2; i++) {\n  y += a.b;\n}\ny",
                ":4:",
            ),
        ] {
            let outcome = in_process(5_000).run(script).expect("host ok");
            let Err(ScriptError::Thrown { message, .. }) = outcome.completion else {
                panic!("{:?}", outcome.completion);
            };
            assert!(!message.contains("prelude"), "{message}");
            assert!(!message.contains("hostCall"), "{message}");
            assert!(message.contains(&format!("(script{line}")), "{message}");
        }
    }

    /// The facts of the error `script` ends in.
    fn facts_of(session: &mut dyn Session, script: &str) -> ErrorFacts {
        let outcome = session.run(script).expect("host ok");
        let error = outcome.completion.expect_err("the script fails");
        error
            .facts()
            .cloned()
            .unwrap_or_else(|| panic!("{error:?}"))
    }

    /// Every error kind Boa tells apart, with its line. Boa gives no
    /// position for a name undefined at the top level (`script:?:?`), and
    /// places an error inside a function at the function's frame: the loop
    /// then quotes the first line that uses the name.
    pub(crate) fn tells_error_kinds_and_lines(session: &mut dyn Session) {
        let found = facts_of(session, "let a = 1;\nlet b = missing + a;");
        assert_eq!(
            (found.kind, found.line),
            (
                ErrorKind::UndefinedName {
                    name: "missing".into()
                },
                None
            )
        );
        let found = facts_of(session, "let a = 1;\nnoSuchFunction(a)");
        assert_eq!(
            found.kind,
            ErrorKind::UndefinedName {
                name: "noSuchFunction".into()
            }
        );
        let found = facts_of(session, "const o = {};\n\no.nothing(1)");
        assert_eq!((found.kind, found.line), (ErrorKind::NotCallable, Some(3)));
        let found = facts_of(session, "const xs = [1];\nxs[5].name");
        assert_eq!((found.kind, found.line), (ErrorKind::TypeMismatch, Some(2)));
        let found = facts_of(session, "let x = 1;\nlet = ;");
        assert_eq!((found.kind, found.line), (ErrorKind::Syntax, Some(2)));
        assert_eq!(found.column, Some(5));
        let found = facts_of(session, "let a = 1;\ntools.fail({})");
        assert_eq!((found.kind, found.line), (ErrorKind::ToolError, Some(2)));
        let found = facts_of(session, "throw new RangeError('no')");
        assert_eq!(
            found.kind,
            ErrorKind::Other {
                engine_kind: "RangeError".into()
            }
        );
        let found = facts_of(session, "\nthrow 'plain words at line 3'");
        assert_eq!((found.kind, found.line), (ErrorKind::default(), Some(2)));
    }

    #[test]
    fn the_in_process_mode_tells_error_kinds_and_lines() {
        tells_error_kinds_and_lines(&mut *in_process(5_000));
    }

    #[test]
    fn the_in_process_mode_returns_at_the_deadline_of_a_runaway_regex() {
        let mut session = in_process(300);
        session.run("var kept = 1;").expect("host ok");
        let started = Instant::now();
        let outcome = session
            .run(r#"/(a+)+$/.test("a".repeat(26) + "b")"#)
            .expect("host ok");
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(matches!(
            outcome.completion,
            Err(ScriptError::LimitExceeded {
                limit: LimitKind::WallTime,
                ..
            })
        ));
        let outcome = session.run("final_result(typeof kept)").expect("host ok");
        assert_eq!(
            outcome.completion,
            Ok(json!({"type": "final_result", "value": "undefined"}))
        );
    }

    /// Which thread made each call: `now` answers at once, `later` does not say so.
    struct ThreadNames;

    impl ToolDispatch for ThreadNames {
        fn specs(&self) -> &[ToolSpec] {
            &[]
        }
        fn call(&self, _name: &str, _args: Value) -> Result<Value, ToolError> {
            Ok(json!(std::thread::current().name().unwrap_or("unnamed")))
        }
        fn is_immediate(&self, name: &str) -> bool {
            name == "now"
        }
    }

    #[test]
    fn an_immediate_tool_is_called_on_the_engine_thread_and_any_other_on_the_sessions() {
        let mut session = JsRuntime::in_process(Limits::default())
            .new_session(Arc::new(ThreadNames))
            .expect("session");
        let session_thread = std::thread::current().name().map(str::to_string);
        let outcome = session
            .run("final_result([tools.now({}), tools.later({}), call_tool('now', {})])")
            .expect("host ok");
        assert_eq!(
            outcome.completion,
            Ok(json!({"type": "final_result", "value": [
                "codeact-js-engine", session_thread, "codeact-js-engine"
            ]}))
        );
    }

    /// Counts its calls; answers at once.
    struct Ticks(std::sync::atomic::AtomicUsize);

    impl ToolDispatch for Ticks {
        fn specs(&self) -> &[ToolSpec] {
            &[]
        }
        fn call(&self, _name: &str, _args: Value) -> Result<Value, ToolError> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(Value::Null)
        }
        fn is_immediate(&self, _name: &str) -> bool {
            true
        }
    }

    /// The engine thread of a run given up at its deadline runs on; its tool
    /// calls, made on that thread, must stop with the run.
    #[test]
    fn a_script_given_up_at_its_deadline_makes_no_more_immediate_tool_calls() {
        let ticks = Arc::new(Ticks(std::sync::atomic::AtomicUsize::new(0)));
        let limits = Limits {
            wall_time: Duration::from_millis(200),
            ..Limits::default()
        };
        let mut session = JsRuntime::in_process(limits)
            .new_session(ticks.clone())
            .expect("session");
        let outcome = session
            .run("while (true) { try { tools.tick({}); } catch (e) {} }")
            .expect("host ok");
        assert!(matches!(
            outcome.completion,
            Err(ScriptError::LimitExceeded {
                limit: LimitKind::WallTime,
                ..
            })
        ));
        let at_the_deadline = ticks.0.load(std::sync::atomic::Ordering::Relaxed);
        assert!(at_the_deadline > 0, "the loop called the tool");
        std::thread::sleep(Duration::from_millis(300));
        let later = ticks.0.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            later <= at_the_deadline + 1,
            "{} calls after the deadline",
            later - at_the_deadline
        );
    }

    #[test]
    fn the_in_process_mode_says_memory_is_not_capped() {
        let runtime = JsRuntime::in_process(Limits::default());
        let memory = runtime
            .info()
            .enforcement
            .iter()
            .find(|row| row.limit == LimitKind::Memory)
            .expect("a memory row");
        assert!(memory.how.starts_with("NOT enforced"));
        let _ = runtime.new_session(Arc::new(NoTools)).expect("session");
    }
}
