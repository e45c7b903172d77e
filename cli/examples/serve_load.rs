//! Load and failover of `codeact serve` + `codeact worker` on one PostgreSQL.
//!
//! Starts its own PostgreSQL cluster (as `cli/tests/serve_postgres.rs` does), one
//! front end and 1, 2 and 4 workers (concurrency 8 each), and pushes `--runs`
//! runs (default 500) of a replayed two-step agent whose first script calls a
//! 10 ms command tool. Reports runs/s, p50/p99 from create to the stored end
//! (both stamped by the processes in the rows), and database transactions per
//! run (`pg_stat_database.xact_commit` delta: every statement outside an
//! explicit transaction is one round trip, idle workers' polls and heartbeats
//! included). Then a failover: 3 workers, `--failover-runs` runs (default 200)
//! with a 300 ms tool, one worker killed with SIGKILL every 2 s (and a fresh one
//! started in its place); every run must end with 42, and no finished tool call
//! may be made again: in each journal, the calls journalled minus those a
//! resumption served from the journal must be at most 1 (0 when the call's
//! script had finished and was re-run silently). (A call in progress
//! at a kill is made again by design: the tool's log counts those.)
//!
//! ```sh
//! cargo build --release --bin codeact
//! cargo run --release --example serve_load -- --runs 500 --failover-runs 200
//! ```
//!
//! `--trickle-ms N` creates the runs one at a time, N ms apart, instead of all at
//! once: workers are idle between runs, which is where waking them costs most.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

#[path = "../tests/support/pg_cluster.rs"]
mod pg_cluster;

const TOKEN: &str = "load-secret-token";

struct Args {
    runs: usize,
    failover_runs: usize,
    workers: Vec<usize>,
    /// One run at a time, this far apart (`--trickle-ms`): workers idle between
    /// runs, as with a trickle of traffic, where every queued run wakes them all.
    trickle: Option<Duration>,
}

fn args() -> Args {
    let mut args = Args {
        runs: 500,
        failover_runs: 200,
        workers: vec![1, 2, 4],
        trickle: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_default();
        match flag.as_str() {
            "--runs" => args.runs = value.parse().expect("--runs N"),
            "--failover-runs" => args.failover_runs = value.parse().expect("--failover-runs N"),
            "--workers" => {
                args.workers = value
                    .split(',')
                    .map(|n| n.parse().expect("--workers 1,2,4"))
                    .collect()
            }
            "--trickle-ms" => {
                args.trickle = Some(Duration::from_millis(
                    value.parse().expect("--trickle-ms N"),
                ))
            }
            other => {
                panic!("unknown flag {other}; use --runs, --failover-runs, --workers, --trickle-ms")
            }
        }
    }
    args
}

/// The `codeact` binary beside this example's folder (`target/release/codeact`).
fn codeact() -> PathBuf {
    if let Some(path) = std::env::var_os("CODEACT_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the example's path");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/PROFILE/examples")
        .join("codeact");
    assert!(
        bin.is_file(),
        "{} is missing: cargo build --release --bin codeact first",
        bin.display()
    );
    bin
}

fn write_config(dir: &Path, tool_ms: u64, lease_ms: u64) {
    let write = |name: &str, text: String| std::fs::write(dir.join(name), text).expect("fixture");
    write(
        "serve.toml",
        format!(
            "[server]\nmax_queued = 100000\nmax_queued_per_token = 100000\n\n\
             [worker]\nconcurrency = 8\nlease_ms = {lease_ms}\npoll_ms = 500\nshutdown_grace_ms = 1000\n\n\
             [[token]]\nname = \"load\"\ntoken = \"{TOKEN}\"\n\n\
             [[agent]]\nname = \"load\"\nteam = \"load.toml\"\n"
        ),
    );
    write(
        "load.toml",
        "[[agent]]\nname = \"load\"\nmodel = \"replay:load.json\"\ntools = \"tools.json\"\n".into(),
    );
    write(
        "load.json",
        json!({"replies": [
            "```rhai\nlet a = call_tool(\"tick\", #{});\nobservation(a)\n```",
            "```rhai\nfinal_result(a + 41)\n```",
        ]})
        .to_string(),
    );
    let log = dir.join("tool.log");
    write(
        "tools.json",
        json!([{
            "name": "tick",
            "description": "Takes a moment.",
            "parameters": {"type": "object", "properties": {}},
            "command": ["sh", "-c", format!(
                "echo start >> {log}; sleep {}; echo done >> {log}; echo 1",
                tool_ms as f64 / 1000.0,
                log = log.display()
            )],
        }])
        .to_string(),
    );
}

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(dir: &Path, url: &str, args: &[&str]) -> (Proc, String) {
    let mut child = Command::new(codeact())
        .args(args)
        .arg("--store")
        .arg(url)
        .arg("--config")
        .arg(dir.join("serve.toml"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("codeact starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut line)
        .expect("a first line");
    (Proc(child), line)
}

fn front(dir: &Path, url: &str) -> (Proc, String) {
    let (proc, line) = spawn(dir, url, &["serve", "--listen", "127.0.0.1:0"]);
    let base = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("an address")
        .to_string();
    (proc, base)
}

async fn transactions(db: &sqlx::PgPool, name: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT (xact_commit + xact_rollback)::BIGINT FROM pg_stat_database WHERE datname = $1",
    )
    .bind(name)
    .fetch_one(db)
    .await
    .expect("stats")
}

/// Creates `runs` runs through `base`, 16 requests at a time.
async fn create_runs(base: &str, runs: usize, trickle: Option<Duration>) {
    let client = reqwest::Client::new();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..if trickle.is_some() { 1 } else { 16 } {
        let (client, base, next) = (client.clone(), base.to_string(), next.clone());
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < runs {
                let response = client
                    .post(format!("{base}/runs"))
                    .bearer_auth(TOKEN)
                    .json(&json!({"agent": "load", "task": "Go."}))
                    .send()
                    .await
                    .expect("the front end answers");
                assert_eq!(response.status(), reqwest::StatusCode::CREATED);
                if let Some(gap) = trickle {
                    tokio::time::sleep(gap).await;
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("a creating task");
    }
}

/// Waits until no run is queued or running; answers how many polls it made.
async fn drain(db: &sqlx::PgPool, limit: Duration) -> i64 {
    let started = Instant::now();
    let mut polls = 0;
    loop {
        polls += 1;
        let active: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM runs WHERE status IN ('queued', 'running')")
                .fetch_one(db)
                .await
                .expect("runs");
        if active == 0 {
            return polls;
        }
        assert!(started.elapsed() < limit, "{active} runs never ended");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn millis(stamp: &str) -> i64 {
    // 2026-12-02T07:00:12.345Z: the same day for a whole scenario.
    let time = &stamp[11..23];
    let h: i64 = time[0..2].parse().unwrap_or(0);
    let m: i64 = time[3..5].parse().unwrap_or(0);
    let s: i64 = time[6..8].parse().unwrap_or(0);
    let ms: i64 = time[9..12].parse().unwrap_or(0);
    ((h * 60 + m) * 60 + s) * 1000 + ms
}

struct Outcome {
    finished_right: usize,
    latencies: Vec<i64>,
    span_ms: i64,
    takeovers: i64,
}

async fn outcome(db: &sqlx::PgPool) -> Outcome {
    let rows: Vec<(String, Option<String>, String, String, i32)> =
        sqlx::query_as("SELECT status, outcome, created_at, updated_at, takeovers FROM runs")
            .fetch_all(db)
            .await
            .expect("runs");
    let mut latencies: Vec<i64> = rows.iter().map(|r| millis(&r.3) - millis(&r.2)).collect();
    latencies.sort_unstable();
    let first = rows.iter().map(|r| millis(&r.2)).min().unwrap_or(0);
    let last = rows.iter().map(|r| millis(&r.3)).max().unwrap_or(0);
    Outcome {
        finished_right: rows
            .iter()
            .filter(|r| {
                r.0 == "finished"
                    && r.1
                        .as_deref()
                        .and_then(|o| serde_json::from_str::<serde_json::Value>(o).ok())
                        .is_some_and(|o| o["value"] == 42)
            })
            .count(),
        latencies,
        span_ms: last - first,
        takeovers: rows.iter().map(|r| i64::from(r.4)).sum(),
    }
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn tool_log(dir: &Path) -> (usize, usize) {
    let text = std::fs::read_to_string(dir.join("tool.log")).unwrap_or_default();
    (
        text.lines().filter(|l| *l == "start").count(),
        text.lines().filter(|l| *l == "done").count(),
    )
}

#[tokio::main]
async fn main() {
    let args = args();
    let Some(_) = pg_cluster::pg_bin() else {
        eprintln!("SKIPPED: no PostgreSQL binaries (initdb, pg_ctl)");
        return;
    };
    let cluster = pg_cluster::start_cluster().expect("PostgreSQL starts");
    println!(
        "codeact serve + worker on PostgreSQL, this machine ({} cores)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("workers  runs  runs/s  p50 ms  p99 ms  db xacts/run  right");
    for (i, &workers) in args.workers.iter().enumerate() {
        let dir = tempfile::tempdir().expect("a folder");
        write_config(dir.path(), 10, 30_000);
        let name = format!("load_{i}_{workers}");
        let url = cluster.create_database(&name).await;
        let db = sqlx::PgPool::connect(&url).await.expect("the database");
        let (_front, base) = front(dir.path(), &url);
        let mut procs = Vec::new();
        for _ in 0..workers {
            procs.push(spawn(dir.path(), &url, &["worker"]).0);
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let before = transactions(&db, &name).await;
        create_runs(&base, args.runs, args.trickle).await;
        let polls = drain(&db, Duration::from_secs(600)).await;
        tokio::time::sleep(Duration::from_millis(1500)).await; // stats are flushed within 1 s
        let after = transactions(&db, &name).await;
        let result = outcome(&db).await;
        // Our own statements: the drain's polls and the two stats reads.
        let xacts = (after - before - polls - 1) as f64 / args.runs as f64;
        println!(
            "{workers:>7}  {:>4}  {:>6.1}  {:>6}  {:>6}  {:>12.1}  {}/{}",
            args.runs,
            args.runs as f64 / (result.span_ms.max(1) as f64 / 1000.0),
            percentile(&result.latencies, 0.5),
            percentile(&result.latencies, 0.99),
            xacts,
            result.finished_right,
            args.runs
        );
        drop(procs);
    }

    if args.failover_runs == 0 {
        return;
    }
    let dir = tempfile::tempdir().expect("a folder");
    write_config(dir.path(), 300, 2_000);
    let url = cluster.create_database("failover").await;
    let db = sqlx::PgPool::connect(&url).await.expect("the database");
    let (_front, base) = front(dir.path(), &url);
    let mut workers: Vec<Proc> = (0..3)
        .map(|_| spawn(dir.path(), &url, &["worker"]).0)
        .collect();
    let creating = tokio::spawn({
        let base = base.clone();
        let runs = args.failover_runs;
        async move { create_runs(&base, runs, None).await }
    });
    let started = Instant::now();
    let mut kills = 0;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let active: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM runs WHERE status IN ('queued', 'running')")
                .fetch_one(&db)
                .await
                .expect("runs");
        if creating.is_finished() && active == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "the failover run never ended"
        );
        let victim = kills % workers.len();
        let _ = workers[victim].0.kill(); // SIGKILL
        let _ = workers[victim].0.wait();
        workers[victim] = spawn(dir.path(), &url, &["worker"]).0;
        kills += 1;
    }
    creating.await.expect("created");
    let result = outcome(&db).await;
    let (started_calls, _) = tool_log(dir.path());
    let calls: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT run_id, COUNT(*) FILTER (WHERE body::json->>'event' = 'tool_call'), \
           COALESCE(SUM((body::json->>'replayed_tool_calls')::BIGINT), 0)::BIGINT \
         FROM events GROUP BY run_id",
    )
    .fetch_all(&db)
    .await
    .expect("journals");
    let repeated: Vec<&(String, i64, i64)> = calls
        .iter()
        .filter(|(_, made, served)| made - served > 1)
        .collect();
    for (id, made, served) in &repeated {
        let lines: Vec<(String,)> = sqlx::query_as(
            "SELECT substring(body from 1 for 200) FROM events WHERE run_id = $1 ORDER BY seq",
        )
        .bind(id)
        .fetch_all(&db)
        .await
        .expect("a journal");
        eprintln!("run {id}: {made} tool calls journalled, {served} served from the journal:");
        for (line,) in lines {
            eprintln!("  {line}");
        }
    }
    let repeated = repeated.len();
    let resumed_runs: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM runs WHERE takeovers > 0")
        .fetch_one(&db)
        .await
        .expect("runs");
    println!(
        "failover: {} runs, 3 workers, one killed with SIGKILL every 2 s ({kills} kills): \
         {}/{} ended with 42; {resumed_runs} runs resumed from their journals ({} takeovers); \
         runs with a finished tool call made again: {repeated}; tool calls started \
         {started_calls} for {} runs (the extra ones were in progress at a kill); \
         p50 {} ms, p99 {} ms",
        args.failover_runs,
        result.finished_right,
        args.failover_runs,
        result.takeovers,
        args.failover_runs,
        percentile(&result.latencies, 0.5),
        percentile(&result.latencies, 0.99),
    );
    drop(workers);
}
