//! `codeact bench`: measure every backend on the same cases, then at scale.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::Args;

use super::{EXIT_HOST_FAILURE, EXIT_OK, usage_error};
use crate::bench::{BenchOptions, expand_runtimes, run};

#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Which runtimes: all (every built-in runtime but the opt-in
    /// wasm:js-stdio, wasm:micropython and wasm:python-sci), rhai, js, js-in-process, wasm (the
    /// same guests), wasm:js, wasm:js-stdio, wasm:micropython, wasm:python, wasm:python-sci,
    /// wasm:rhai, wasm:boa, wasm:PATH, or several separated by commas.
    #[arg(long, default_value = "all")]
    runtime: String,
    /// Print the report as one JSON document on stdout instead of a table.
    #[arg(long)]
    json: bool,
    /// Fewer samples, shorter windows, a tenth of the idle sessions: checks that
    /// every case works; its figures are rough.
    #[arg(long)]
    quick: bool,
    /// Skip the scale measurements (idle memory, throughput, script size, history).
    #[arg(long)]
    no_scale: bool,
}

/// Shows what runs on one line of stderr: rewritten in place on a terminal, one
/// line per step elsewhere (a log keeps them all).
struct Progress {
    terminal: bool,
}

impl Progress {
    fn show(&self, what: &str) {
        let mut stderr = std::io::stderr().lock();
        let _ = if self.terminal {
            write!(stderr, "\r\x1b[Kbench: {what}")
        } else {
            writeln!(stderr, "bench: {what}")
        };
        let _ = stderr.flush();
    }

    fn done(&self) {
        if self.terminal {
            let _ = write!(std::io::stderr().lock(), "\r\x1b[K");
        }
    }
}

pub(crate) fn bench(args: &BenchArgs) -> ExitCode {
    let runtimes = expand_runtimes(&args.runtime);
    if runtimes.is_empty() {
        return usage_error("--runtime names no runtime");
    }
    let options = BenchOptions {
        runtimes,
        quick: args.quick,
        scale: !args.no_scale,
    };
    let progress = Progress {
        terminal: std::io::stderr().is_terminal(),
    };
    let report = run(&options, &mut |what| progress.show(what));
    progress.done();
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("codeact: cannot write the report as JSON: {e}");
                return ExitCode::from(EXIT_HOST_FAILURE);
            }
        }
    } else {
        print!("{}", report.to_table());
    }
    // A backend that could not start, or a case whose check failed, is in the
    // report; the exit status says whether everything measured.
    let complete = report.backends.iter().all(|b| {
        b.unavailable.is_none()
            && b.cases.iter().all(|c| !c.result.failed())
            && b.scale.as_ref().is_none_or(|s| {
                !s.idle_memory.failed()
                    && s.throughput.iter().all(|t| !t.failed())
                    && s.script_size.iter().all(|t| !t.result.failed())
                    && !s.history.failed()
            })
    });
    ExitCode::from(if complete { EXIT_OK } else { EXIT_HOST_FAILURE })
}
