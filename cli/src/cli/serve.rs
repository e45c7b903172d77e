//! `codeact serve`: the HTTP service, and `codeact worker`: a process working on
//! the runs front ends queue in PostgreSQL (see `crate::serve`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::{EXIT_HOST_FAILURE, EXIT_OK, EXIT_USAGE, ExtraLayer, host_runtime, init_tracing};
use crate::serve::telemetry::{self, Telemetry};
use crate::serve::{ServeOptions, WorkerOptions, default_store_path, serve, worker};

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The address to listen on; port 0 picks a free one, printed at start.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Where runs and their event journals are kept: sqlite:PATH (created when
    /// missing), or postgres://USER[:PASSWORD]@HOST:PORT/DATABASE, shared with
    /// other front ends and `codeact worker`s, which then run the runs this
    /// process queues [default: sqlite:$XDG_STATE_HOME/codeact/serve.sqlite,
    /// else sqlite:~/.local/state/codeact/serve.sqlite].
    #[arg(long, value_name = "sqlite:PATH|postgres://…")]
    store: Option<String>,
    /// With a postgres:// store, also work on queued runs here, as a `codeact
    /// worker` does (settings in the config's [worker]); without, this process
    /// only queues runs and serves them.
    #[arg(long)]
    work: bool,
    /// The server's config (TOML): bearer tokens, the agents it offers (team
    /// files), limits and request caps; see examples/serve.toml. Clients choose
    /// among its agents and can change nothing else.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

/// Sets up logging, and the OpenTelemetry export when the config at `config`
/// (or the environment) names an endpoint; `Err`: the exit status of a broken
/// `[telemetry]` table, reported.
fn start_telemetry(config: &Path, process: &str) -> Result<Option<Telemetry>, ExitCode> {
    let telemetry =
        telemetry::read_entry(config).and_then(|entry| Telemetry::start(&entry, process));
    match telemetry {
        Ok(telemetry) => {
            init_tracing(
                telemetry
                    .as_ref()
                    .map(|t| Box::new(t.layer()) as ExtraLayer),
            );
            Ok(telemetry)
        }
        Err(e) => {
            init_tracing(None);
            eprintln!("codeact {process}: {e}");
            Err(ExitCode::from(EXIT_USAGE))
        }
    }
}

pub(crate) fn serve_command(args: &ServeArgs) -> ExitCode {
    let telemetry = match start_telemetry(&args.config, "serve") {
        Ok(telemetry) => telemetry,
        Err(code) => return code,
    };
    let host = match host_runtime() {
        Ok(host) => host,
        Err(code) => return code,
    };
    let options = ServeOptions {
        listen: args.listen,
        store: args
            .store
            .clone()
            .unwrap_or_else(|| format!("sqlite:{}", default_store_path().display())),
        config: args.config.clone(),
        work: args.work,
    };
    let served = host.block_on(serve(options));
    // What is still batched goes out before the process exits.
    drop(host);
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    match served {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(e) => {
            eprintln!("codeact serve: {e}");
            ExitCode::from(EXIT_HOST_FAILURE)
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    /// The PostgreSQL database the front ends queue runs in:
    /// postgres://USER[:PASSWORD]@HOST:PORT/DATABASE.
    #[arg(long, value_name = "postgres://…")]
    store: String,
    /// The config the front ends read (the agents, limits, and [worker]:
    /// concurrency, lease_ms, poll_ms, shutdown_grace_ms).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

pub(crate) fn worker_command(args: &WorkerArgs) -> ExitCode {
    let telemetry = match start_telemetry(&args.config, "worker") {
        Ok(telemetry) => telemetry,
        Err(code) => return code,
    };
    let host = match host_runtime() {
        Ok(host) => host,
        Err(code) => return code,
    };
    let options = WorkerOptions {
        store: args.store.clone(),
        config: args.config.clone(),
    };
    let worked = host.block_on(worker(options));
    drop(host);
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    match worked {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(e) => {
            eprintln!("codeact worker: {e}");
            ExitCode::from(EXIT_HOST_FAILURE)
        }
    }
}
