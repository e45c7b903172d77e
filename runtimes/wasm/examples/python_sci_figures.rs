//! Figures for `wasm:python-sci` (issue 19, section 2): load (cold compile or
//! compile cache), new session, warm step, import costs, memory per idle session,
//! and a real data task. Medians of N runs, printed as a table.
//!
//! ```sh
//! guests/fetch-guests.sh --python-sci
//! cargo run --release -p codeact-wasm --example python_sci_figures -- [--cache-dir DIR] [--runs N] [--load-only]
//! ```
//!
//! A fresh `--cache-dir` measures the cold compile; a second run with the same
//! directory measures the cache load.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use codeact_runtime::{Limits, NoTools, Session};
use codeact_wasm::{Guest, WasmRuntime, WasmSession, default_guest_dir};

/// The data task: a CSV from a string, a group-by, a PNG of the totals.
const DATA_TASK: &str = r#"import io
import pandas as pd
import matplotlib
import matplotlib.pyplot as plt
csv = "region,product,units,price\n" + "\n".join(
    f"{r},{p},{(i * 7) % 13 + 1},{(i * 3) % 11 + 2.5}"
    for i, (r, p) in enumerate([(r, p) for r in ("north", "south", "east", "west") for p in ("a", "b", "c")] * 50)
)
df = pd.read_csv(io.StringIO(csv))
df["revenue"] = df["units"] * df["price"]
totals = df.groupby("region")["revenue"].sum().sort_values(ascending=False)
fig, ax = plt.subplots(figsize=(4, 3))
totals.plot.bar(ax=ax)
buf = io.BytesIO()
fig.savefig(buf, format="png")
plt.close(fig)
final_result({"top": totals.index[0], "png_bytes": len(buf.getvalue())})
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut cache_dir: Option<PathBuf> = None;
    let mut runs = 5usize;
    let mut load_only = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--cache-dir" => cache_dir = args.next().map(PathBuf::from),
            "--runs" => runs = args.next().ok_or("--runs needs a number")?.parse()?,
            "--load-only" => load_only = true,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let limits = Limits {
        max_memory_bytes: 1 << 30,
        wall_time: Duration::from_secs(120),
        ..Limits::default()
    };
    let guest = Guest::pinned("wasm:python-sci", &default_guest_dir()).ok_or("no such guest")?;
    let runtime = match &cache_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            WasmRuntime::with_cache_dir(guest, limits, dir)?
        }
        None => WasmRuntime::new(guest, limits)?,
    };
    println!("load ({:?}): {}", runtime.source(), ms(runtime.load_time()));
    if load_only {
        return Ok(());
    }

    let new_session = median(runs, || {
        let started = Instant::now();
        let session = runtime.start_session(Arc::new(NoTools)).expect("a session");
        let took = started.elapsed();
        drop(session);
        took
    });
    println!("new session: {}", ms(new_session));

    let mut session = runtime.start_session(Arc::new(NoTools))?;
    step(&mut session, "x = 1\nfinal_result(x)")?;
    let warm = median(runs * 4, || timed(&mut session, "final_result(x + 1)"));
    println!("warm step (final_result(x + 1)): {}", ms(warm));

    for import in [
        "import numpy",
        "import pandas",
        "import matplotlib.pyplot",
        "import sklearn.linear_model",
    ] {
        let took = median(runs, || {
            let mut session = runtime.start_session(Arc::new(NoTools)).expect("a session");
            timed(&mut session, &format!("{import}\nfinal_result(0)"))
        });
        println!("{import} (first in a session): {}", ms(took));
    }

    let cold_task = median(runs, || {
        let mut session = runtime.start_session(Arc::new(NoTools)).expect("a session");
        timed(&mut session, DATA_TASK)
    });
    println!(
        "data task, imports included (new session): {}",
        ms(cold_task)
    );
    let mut session = runtime.start_session(Arc::new(NoTools))?;
    println!("data task answer: {}", step(&mut session, DATA_TASK)?);
    let warm_task = median(runs, || timed(&mut session, DATA_TASK));
    println!("data task, modules imported: {}", ms(warm_task));

    for (what, setup) in [("idle", "x = 1"), ("pandas imported", "import pandas")] {
        let before = rss_bytes();
        let mut sessions = Vec::new();
        for _ in 0..10 {
            let mut session = runtime.start_session(Arc::new(NoTools))?;
            step(&mut session, &format!("{setup}\nfinal_result(0)"))?;
            sessions.push(session);
        }
        let after = rss_bytes();
        println!(
            "memory per session ({what}, RSS growth over 10 sessions / 10): {:.1} MiB",
            after.saturating_sub(before) as f64 / 10.0 / f64::from(1 << 20)
        );
    }
    Ok(())
}

/// Runs `script`, which must succeed; returns its completion value as text.
fn step(session: &mut WasmSession, script: &str) -> Result<String, String> {
    let outcome = session.run(script).map_err(|e| e.to_string())?;
    match outcome.completion {
        Ok(value) => Ok(value.to_string()),
        Err(e) => Err(format!("{e}; logs: {}", outcome.logs.render())),
    }
}

fn timed(session: &mut WasmSession, script: &str) -> Duration {
    let started = Instant::now();
    step(session, script).expect("the script runs");
    started.elapsed()
}

fn median(runs: usize, mut f: impl FnMut() -> Duration) -> Duration {
    let mut times: Vec<Duration> = (0..runs.max(1)).map(|_| f()).collect();
    times.sort();
    times[times.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// This process's resident memory, from /proc (0 where there is none).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}
