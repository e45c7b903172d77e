//! `codeact serve` front ends and `codeact worker` processes sharing one real
//! PostgreSQL, as an operator runs them: the harness starts its own cluster
//! (`initdb` into a temporary folder, `pg_ctl` on a free port on 127.0.0.1, run
//! as a non-root user when the tests run as root), each test gets its own
//! database, and the binaries run with replayed models and command tools that
//! count their calls in files. Without the PostgreSQL binaries every test says
//! `SKIPPED` and passes.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

#[path = "support/codeact_process.rs"]
mod codeact_process;
#[path = "support/pg_cluster.rs"]
mod pg_cluster;
// A `codeact` process, killed when dropped; `base` is a front end's URL, empty
// for a worker.
use codeact_process::CodeactProcess as Process;
use pg_cluster::{Cluster, pg_bin, start_cluster};
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-token";
const BOB: &str = "bob-secret-token";

/// The cluster, started once; `None` (after saying SKIPPED) without binaries.
fn cluster() -> Option<&'static Cluster> {
    static CLUSTER: OnceLock<Option<Cluster>> = OnceLock::new();
    CLUSTER
        .get_or_init(|| {
            if pg_bin().is_none() {
                eprintln!(
                    "SKIPPED: PostgreSQL tests: no initdb/pg_ctl found (install Debian's `postgresql`)"
                );
                return None;
            }
            Some(start_cluster().unwrap_or_else(|e| panic!("PostgreSQL could not start: {e}")))
        })
        .as_ref()
}

/// A fresh database on the cluster, its URL.
async fn database(name: &str) -> Option<String> {
    Some(cluster()?.create_database(name).await)
}

/// Writes the config and its agents into `dir`, with `server` and `worker`
/// lines added: `calc` (two steps, 42), `slow` (a script that loops), `refund`
/// (a call that needs approval), `tally` (a tool that appends a line to
/// `tally.log`, then one that naps 3 s, then 42), `linger` (a tool whose shell
/// starts `linger.py`, which appends to `linger.log` and sleeps 30 s).
fn write_config(dir: &Path, server: &str, worker: &str) {
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).expect("fixture");
    let replay =
        |name: &str, replies: &[&str]| write(name, &json!({ "replies": replies }).to_string());
    write(
        "serve.toml",
        &format!(
            r#"
[server]
{server}

[limits]
timeout_ms = 20000
max_operations = 100000000000

[worker]
lease_ms = 1500
poll_ms = 200
{worker}

[[token]]
name = "alice"
token = "{ALICE}"

[[token]]
name = "bob"
token = "{BOB}"

[[agent]]
name = "calc"
team = "calc.toml"

[[agent]]
name = "slow"
team = "slow.toml"

[[agent]]
name = "refund"
team = "refund.toml"

[[agent]]
name = "tally"
team = "tally.toml"

[[agent]]
name = "linger"
team = "linger.toml"
"#
        ),
    );
    let single = |file: &str, name: &str, replay: &str, extra: &str| {
        write(
            file,
            &format!("[[agent]]\nname = \"{name}\"\nmodel = \"replay:{replay}\"\n{extra}"),
        );
    };
    single("calc.toml", "calc", "calc.json", "");
    replay(
        "calc.json",
        &[
            "```rhai\nlet x = 40;\nobservation(x)\n```",
            "```rhai\nfinal_result(x + 2)\n```",
        ],
    );
    single("slow.toml", "slow", "slow.json", "");
    replay("slow.json", &["```rhai\nlet n = 0;\nloop { n += 1; }\n```"]);
    single(
        "refund.toml",
        "refund",
        "refund.json",
        "tools = \"refund-tools.json\"\n",
    );
    let refunds = dir.join("refunds.log");
    write(
        "refund-tools.json",
        &json!([{
            "name": "refund",
            "description": "Refunds an amount.",
            "parameters": {"type": "object", "properties": {"amount": {"type": "number"}}},
            "command": ["python3", "-c", format!("import json,sys; a=json.load(sys.stdin); open({:?},'a').write('r\\n'); print(json.dumps({{'refunded': a['amount']}}))", refunds.display().to_string())],
            "approval": true
        }])
        .to_string(),
    );
    replay(
        "refund.json",
        &["```rhai\nlet r = call_tool(\"refund\", #{amount: 5});\nfinal_result(r)\n```"],
    );
    single(
        "tally.toml",
        "tally",
        "tally.json",
        "tools = \"tally-tools.json\"\n",
    );
    let tally = dir.join("tally.log");
    let naps = dir.join("naps.log");
    write(
        "tally-tools.json",
        &json!([{
            "name": "tally",
            "description": "Counts a call.",
            "parameters": {"type": "object", "properties": {}},
            "command": ["python3", "-c", format!("open({:?},'a').write('t\\n'); print(40)", tally.display().to_string())],
        }, {
            "name": "nap",
            "description": "Naps.",
            "parameters": {"type": "object", "properties": {}},
            "command": ["python3", "-c", format!("import time; open({:?},'a').write('n\\n'); time.sleep(3); print(2)", naps.display().to_string())],
        }])
        .to_string(),
    );
    single(
        "linger.toml",
        "linger",
        "linger.json",
        "tools = \"linger-tools.json\"\n",
    );
    let linger = dir.join("linger.py");
    write(
        "linger.py",
        &format!(
            "import time\nopen({:?}, 'a').write('l\\n')\ntime.sleep(30)\n",
            dir.join("linger.log").display().to_string()
        ),
    );
    // A shell that waits for its own child: the child is the tool's grandchild.
    write(
        "linger-tools.json",
        &json!([{
            "name": "linger",
            "description": "Lingers.",
            "parameters": {"type": "object", "properties": {}},
            "command": ["sh", "-c", format!("python3 {}; true", linger.display())],
        }])
        .to_string(),
    );
    replay(
        "linger.json",
        &["```rhai\nfinal_result(call_tool(\"linger\", #{}))\n```"],
    );
    replay(
        "tally.json",
        &[
            "```rhai\nlet a = call_tool(\"tally\", #{});\nlet b = call_tool(\"nap\", #{});\nfinal_result(a + b)\n```",
        ],
    );
}

impl Process {
    fn kill9(&mut self) {
        let _ = self.child.kill(); // SIGKILL
        let _ = self.child.wait();
    }
}

struct Setup {
    dir: tempfile::TempDir,
    url: String,
}

impl Setup {
    /// A folder with the config, and a fresh database named `name`; `None`
    /// when PostgreSQL is missing.
    async fn new(name: &str, server: &str, worker: &str) -> Option<Self> {
        let url = database(name).await?;
        let dir = tempfile::tempdir().expect("a temporary folder");
        write_config(dir.path(), server, worker);
        Some(Self { dir, url })
    }

    fn spawn(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_codeact"));
        command
            .args(args)
            .arg("--store")
            .arg(&self.url)
            .arg("--config")
            .arg(self.dir.path().join("serve.toml"))
            .stderr(Stdio::inherit());
        command
    }

    /// A front end that only queues runs (`serve` without `--work`).
    fn front(&self) -> Process {
        Process::start_listening(self.spawn(&["serve", "--listen", "127.0.0.1:0"]))
    }

    fn worker(&self) -> Process {
        let worker = Process::start(self.spawn(&["worker"]));
        assert!(
            worker.first_line.contains("working"),
            "{:?}",
            worker.first_line
        );
        worker
    }

    fn lines(&self, file: &str) -> usize {
        std::fs::read_to_string(self.dir.path().join(file))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    async fn db(&self) -> sqlx::PgPool {
        sqlx::PgPool::connect(&self.url)
            .await
            .expect("the database answers")
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("an HTTP client")
}

impl Process {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn post(
        &self,
        token: &str,
        path: &str,
        body: Value,
    ) -> (StatusCode, Value, Option<String>) {
        let response = client()
            .post(self.url(path))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .expect("the front end answers");
        let status = response.status();
        let retry = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        (status, response.json().await.unwrap_or(Value::Null), retry)
    }

    async fn get(&self, token: &str, path: &str) -> (StatusCode, Value) {
        let response = client()
            .get(self.url(path))
            .bearer_auth(token)
            .send()
            .await
            .expect("the front end answers");
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn create(&self, token: &str, agent: &str) -> String {
        let (status, run, _) = self
            .post(token, "/runs", json!({"agent": agent, "task": "Go."}))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{run}");
        assert_eq!(run["status"], "queued", "{run}");
        run["id"].as_str().expect("a run id").to_string()
    }

    /// Polls the run until `done` holds for it, at most `limit`.
    async fn wait_for(&self, id: &str, limit: Duration, done: impl Fn(&Value) -> bool) -> Value {
        let started = Instant::now();
        loop {
            let (status, run) = self.get(ALICE, &format!("/runs/{id}")).await;
            assert_eq!(status, StatusCode::OK, "{run}");
            if done(&run) {
                return run;
            }
            assert!(started.elapsed() < limit, "the run never got there: {run}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The run's events from the front end at `base` until `end`: their kinds, the
/// `end` status last.
async fn stream(base: &str, id: &str) -> Vec<String> {
    {
        let response = client()
            .get(format!("{base}/runs/{id}/events"))
            .bearer_auth(ALICE)
            .send()
            .await
            .expect("the stream opens");
        assert_eq!(response.status(), StatusCode::OK);
        let mut events = response.bytes_stream().eventsource();
        let mut seen = Vec::new();
        let read = async {
            while let Some(event) = events.next().await {
                let event = event.expect("a well-formed event");
                let data: Value = serde_json::from_str(&event.data).expect("JSON data");
                if event.event == "end" {
                    seen.push(format!("end:{}", data["status"].as_str().unwrap_or("?")));
                    return;
                }
                seen.push(data["event"].as_str().unwrap_or("?").to_string());
            }
        };
        tokio::time::timeout(Duration::from_secs(60), read)
            .await
            .expect("the stream ends within a minute");
        seen
    }
}

const LONG: Duration = Duration::from_secs(30);

fn finished_with(run: &Value, value: i64) -> bool {
    run["status"] == "finished" && run["outcome"]["value"] == value
}

/// If this fails, a fresh database gets no tables, or a second start fails on
/// (or re-applies) the schema a first one created.
#[tokio::test(flavor = "multi_thread")]
async fn migrations_apply_to_an_empty_database_and_leave_an_existing_one_as_it_is() {
    let Some(setup) = Setup::new("migrations", "", "").await else {
        return;
    };
    let first = setup.front();
    let (status, body) = first.get(ALICE, "/readyz").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let id = first.create(ALICE, "calc").await;
    drop(first);
    let second = setup.front();
    let (status, listed) = second.get(ALICE, "/runs").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed["runs"][0]["id"], id.as_str());
    let db = setup.db().await;
    let applied: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations")
        .fetch_one(&db)
        .await
        .expect("sqlx's table");
    assert_eq!(applied, 1);
    let tables: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_name IN ('runs', 'events')",
    )
    .fetch_one(&db)
    .await
    .expect("the catalog");
    assert_eq!(tables, 2);
}

/// If this fails, two workers can both take a run (its tools run twice), or a
/// front end without a worker runs runs itself.
#[tokio::test(flavor = "multi_thread")]
async fn two_workers_never_run_the_same_run() {
    let Some(setup) = Setup::new("two_workers", "", "concurrency = 8").await else {
        return;
    };
    let front = setup.front();
    let mut ids = Vec::new();
    for _ in 0..16 {
        ids.push(front.create(ALICE, "calc").await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, run) = front.get(ALICE, &format!("/runs/{}", ids[0])).await;
    assert_eq!(run["status"], "queued", "a front end alone runs nothing");
    let _one = setup.worker();
    let _two = setup.worker();
    for id in &ids {
        front.wait_for(id, LONG, |run| finished_with(run, 42)).await;
    }
    let db = setup.db().await;
    let claims: Vec<(i32, i32)> = sqlx::query_as("SELECT attempts, takeovers FROM runs")
        .fetch_all(&db)
        .await
        .expect("runs");
    assert_eq!(claims.len(), 16);
    assert!(claims.iter().all(|c| *c == (1, 0)), "{claims:?}");
    // Every run's journal is one run's: one run_started, numbered without gaps.
    let journals: Vec<(i64, i64, i64)> = sqlx::query_as(
        "SELECT COUNT(*) FILTER (WHERE body LIKE '{\"event\":\"run_started\"%'), COUNT(*), MAX(seq) FROM events GROUP BY run_id",
    )
    .fetch_all(&db)
    .await
    .expect("events");
    assert_eq!(journals.len(), 16);
    for (started, count, last) in journals {
        assert_eq!((started, count), (1, last), "one start, no gaps");
    }
}

/// If this fails, a run whose worker dies is lost, or its finished tool call is
/// made again by the worker that takes it over.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_whose_worker_is_killed_is_finished_by_another_without_repeating_a_finished_call() {
    let Some(setup) = Setup::new("takeover", "", "").await else {
        return;
    };
    let front = setup.front();
    let mut first = setup.worker();
    let id = front.create(ALICE, "tally").await;
    // Killed while napping: the tally call is journalled, the nap is not done.
    let started = Instant::now();
    while setup.lines("naps.log") == 0 {
        assert!(started.elapsed() < LONG, "the nap never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill9();
    let (_, run) = front.get(ALICE, &format!("/runs/{id}")).await;
    assert_eq!(run["status"], "running", "{run}");
    let _second = setup.worker();
    let run = front
        .wait_for(&id, LONG, |run| finished_with(run, 42))
        .await;
    assert_eq!(run["takeovers"], 1, "{run}");
    assert_eq!(
        setup.lines("tally.log"),
        1,
        "the finished call was served from the journal"
    );
    assert_eq!(setup.lines("naps.log"), 2, "the call cut short ran again");
}

/// The processes whose command line contains `marker` (a zombie's is empty).
fn processes_with(marker: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| String::from_utf8_lossy(&line).contains(marker))
        })
        .collect()
}

/// If this fails, a command tool's processes outlive a worker killed with
/// SIGKILL: they go on acting for a run another worker may have taken over.
#[tokio::test(flavor = "multi_thread")]
async fn a_command_tools_processes_die_with_a_worker_killed_by_sigkill() {
    let Some(setup) = Setup::new("linger", "", "").await else {
        return;
    };
    let front = setup.front();
    let mut worker = setup.worker();
    front.create(ALICE, "linger").await;
    let started = Instant::now();
    while setup.lines("linger.log") == 0 {
        assert!(started.elapsed() < LONG, "the tool never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let marker = setup.dir.path().join("linger.py").display().to_string();
    let running = processes_with(&marker);
    assert!(
        running.len() >= 2,
        "the tool's shell and its child run: {running:?}"
    );
    worker.kill9();
    let killed = Instant::now();
    loop {
        let left = processes_with(&marker);
        if left.is_empty() {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(3),
            "still running 3 s after the worker was killed: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// If this fails, a stopping worker abandons its runs until their leases run
/// out, or hands them back in a way that repeats their calls.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_stopped_with_sigterm_hands_back_what_it_cannot_finish() {
    let Some(setup) = Setup::new("hand_back", "", "shutdown_grace_ms = 300").await else {
        return;
    };
    let front = setup.front();
    let mut first = setup.worker();
    let id = front.create(ALICE, "tally").await;
    let started = Instant::now();
    while setup.lines("naps.log") == 0 {
        assert!(started.elapsed() < LONG, "the nap never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.terminate();
    assert!(
        first.wait_exit(Duration::from_secs(5)).is_some(),
        "the worker stops after its grace"
    );
    let (_, run) = front.get(ALICE, &format!("/runs/{id}")).await;
    assert_eq!(run["status"], "queued", "handed back: {run}");
    let _second = setup.worker();
    let run = front
        .wait_for(&id, LONG, |run| finished_with(run, 42))
        .await;
    assert_eq!(run["takeovers"], 1, "{run}");
    assert_eq!(setup.lines("tally.log"), 1);
}

/// If this fails, an approval holds a worker while it waits, or a decision made
/// through one front end is not carried out by another process.
#[tokio::test(flavor = "multi_thread")]
async fn an_approval_answered_through_one_front_end_is_carried_out_by_another_worker() {
    let Some(setup) = Setup::new("approval", "", "concurrency = 1").await else {
        return;
    };
    let asked = setup.front();
    let answering = setup.front();
    let mut first = setup.worker();
    let id = asked.create(ALICE, "refund").await;
    let run = asked
        .wait_for(&id, LONG, |run| run["status"] == "awaiting_approval")
        .await;
    let call = run["awaiting"]["call"]
        .as_str()
        .expect("the awaited call")
        .to_string();
    let db = setup.db().await;
    let owner: Option<String> = sqlx::query_scalar("SELECT lease_owner FROM runs WHERE id = $1")
        .bind(&id)
        .fetch_one(&db)
        .await
        .expect("the run");
    assert_eq!(owner, None, "a waiting run holds no worker");
    // The worker's one slot is free: it runs another run meanwhile.
    let other = asked.create(ALICE, "calc").await;
    asked
        .wait_for(&other, LONG, |run| finished_with(run, 42))
        .await;
    first.kill9();
    let _second = setup.worker();
    let (status, body, _) = answering
        .post(
            ALICE,
            &format!("/runs/{id}/approvals/{call}"),
            json!({"approve": true}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let run = asked
        .wait_for(&id, LONG, |run| run["status"] == "finished")
        .await;
    assert_eq!(run["outcome"]["value"], json!({"refunded": 5}), "{run}");
    assert_eq!(setup.lines("refunds.log"), 1);
}

/// If this fails, a viewer must reach the very front end that created a run to
/// watch it.
#[tokio::test(flavor = "multi_thread")]
async fn events_stream_live_from_a_front_end_that_did_not_create_the_run() {
    let Some(setup) = Setup::new("sse", "", "").await else {
        return;
    };
    let creating = setup.front();
    let viewing = setup.front();
    let id = creating.create(ALICE, "calc").await;
    // The viewer connects while the run is queued; the worker starts after.
    let stream = tokio::spawn({
        let base = viewing.base.clone();
        let id = id.clone();
        async move { stream(&base, &id).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _worker = setup.worker();
    let kinds = stream.await.expect("the stream task");
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("run_started"),
        "{kinds:?}"
    );
    assert!(kinds.contains(&"observation".to_string()), "{kinds:?}");
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("end:finished"),
        "{kinds:?}"
    );
}

/// If this fails, a client can fill the queue without bound, or is refused
/// without being told when to come back.
#[tokio::test(flavor = "multi_thread")]
async fn a_full_queue_is_refused_with_429_and_retry_after() {
    let Some(setup) = Setup::new(
        "backpressure",
        "max_queued = 3\nmax_queued_per_token = 2",
        "",
    )
    .await
    else {
        return;
    };
    let front = setup.front();
    front.create(ALICE, "calc").await;
    front.create(ALICE, "calc").await;
    let (status, body, retry) = front
        .post(ALICE, "/runs", json!({"agent": "calc", "task": "Go."}))
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(retry.as_deref(), Some("5"));
    assert!(
        body["error"]
            .as_str()
            .unwrap_or("")
            .contains("of your token"),
        "{body}"
    );
    front.create(BOB, "calc").await;
    let (status, body, retry) = front
        .post(BOB, "/runs", json!({"agent": "calc", "task": "Go."}))
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(retry.is_some());
    assert!(
        body["error"]
            .as_str()
            .unwrap_or("")
            .contains("on this server"),
        "{body}"
    );
    // Once a worker drains the queue, runs are taken again.
    let _worker = setup.worker();
    let started = Instant::now();
    loop {
        let (status, _, _) = front
            .post(ALICE, "/runs", json!({"agent": "calc", "task": "Go."}))
            .await;
        if status == StatusCode::CREATED {
            break;
        }
        assert!(started.elapsed() < LONG, "the queue never drained");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// If this fails, a cancel sent to one front end never reaches the worker that
/// runs the run.
#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_through_any_front_end_stops_the_run_on_its_worker() {
    let Some(setup) = Setup::new("cancel", "", "").await else {
        return;
    };
    let front = setup.front();
    let other = setup.front();
    let _worker = setup.worker();
    let id = front.create(ALICE, "slow").await;
    front
        .wait_for(&id, LONG, |run| run["status"] == "running")
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = Instant::now();
    let (status, body, _) = other
        .post(ALICE, &format!("/runs/{id}/cancel"), json!({}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    front
        .wait_for(&id, LONG, |run| run["status"] == "cancelled")
        .await;
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "took {:?}",
        asked.elapsed()
    );
}

/// If this fails, runs are lost, answered wrongly or repeat finished calls while
/// workers keep dying under them (the load example's failover, small). The
/// kills land once every run's tally call has finished (each is napping), so any
/// second tally is a finished call made again. (A call in progress at a kill is
/// made again by design; and its process, in a group of its own, outlives the
/// killed worker.)
#[tokio::test(flavor = "multi_thread")]
async fn runs_go_through_while_workers_are_killed_one_after_another() {
    let Some(setup) = Setup::new("failover", "", "concurrency = 2").await else {
        return;
    };
    let front = setup.front();
    let mut workers: Vec<Process> = (0..3).map(|_| setup.worker()).collect();
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(front.create(ALICE, "tally").await);
    }
    let started = Instant::now();
    while setup.lines("naps.log") < 6 {
        assert!(started.elapsed() < LONG, "the naps never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for worker in workers.iter_mut() {
        worker.kill9();
        *worker = setup.worker();
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    let mut takeovers = 0;
    for id in &ids {
        let run = front.wait_for(id, LONG, |run| finished_with(run, 42)).await;
        takeovers += run["takeovers"].as_i64().unwrap_or(0);
    }
    assert!(
        takeovers >= 2,
        "the killed workers' runs were resumed: {takeovers}"
    );
    assert_eq!(
        setup.lines("tally.log"),
        6,
        "no finished call was made again"
    );
    // In every journal, the tally call made for real is journalled once; each
    // resumption journals it again as served from the journal.
    let db = setup.db().await;
    let calls: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT run_id, \
           COUNT(*) FILTER (WHERE body::json->>'event' = 'tool_call' AND body::json->>'name' = 'tally'), \
           COALESCE(SUM((body::json->>'replayed_tool_calls')::BIGINT), 0)::BIGINT \
         FROM events GROUP BY run_id",
    )
    .fetch_all(&db)
    .await
    .expect("journals");
    assert_eq!(calls.len(), 6);
    for (id, journalled, replayed) in calls {
        assert_eq!(
            journalled - replayed,
            1,
            "run {id}: one tally made for real"
        );
    }
}
