//! `codeact serve`: runs as a service. An HTTP API (axum) starts runs of the
//! agents the server's config offers, streams their events, cancels them, takes
//! approvals and a conversation's next messages; runs and their journals live in
//! an embedded SQLite file, so a restarted server still lists and streams them.
//! With a PostgreSQL store, any number of front ends (`codeact serve`) and
//! workers (`codeact worker`) share one database: front ends queue runs, workers
//! claim and run them, and any front end streams any run.
//!
//! The parts: the config file and its tokens ([`config`]), who calls
//! ([`auth`]), the routes ([`api`]), the event stream ([`sse`]), the web page
//! ([`page`]), the work on runs ([`runs`]), the store ([`store`]), the queue
//! on PostgreSQL ([`queue`]), the workers taking from it ([`worker`]), and
//! the export of traces and metrics over OTLP ([`telemetry`]), and the
//! connections, served within limits ([`connections`], which `codeact mcp
//! --listen` serves through too).

mod api;
mod auth;
mod config;
pub(crate) mod connections;
mod page;
mod queue;
mod runs;
mod sse;
mod store;
pub(crate) mod telemetry;
mod worker;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{get, post};

pub(crate) use store::default_store_path;
pub(crate) use worker::{WorkerOptions, worker};

/// What `codeact serve` was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct ServeOptions {
    /// Where to listen; port 0 picks a free one.
    pub listen: SocketAddr,
    /// The store, `sqlite:PATH` or `postgres://…`.
    pub store: String,
    /// The server's config file.
    pub config: PathBuf,
    /// With a PostgreSQL store, also work on queued runs in this process (as a
    /// `codeact worker` does); without, this process only queues them.
    pub work: bool,
}

/// Reads and checks the config file, off the runtime's threads.
async fn load_config(path: PathBuf) -> Result<config::ServeConfig, String> {
    tokio::task::spawn_blocking(move || config::ServeConfig::load(&path))
        .await
        .map_err(|e| format!("loading the config failed: {e}"))?
}

/// Loads the config, opens the store, and serves until Ctrl-C or SIGTERM. Once
/// listening, prints `codeact serve: listening on http://ADDR` on stdout (the
/// address with the port chosen when 0 was asked for). Connections are held to
/// the config's `[server]` limits ([`connections::ConnectionLimits`]). At a stop
/// it takes no new requests and waits up to [`SHUTDOWN_GRACE`] for open ones;
/// runs still going then are marked `interrupted` by the next start.
pub(crate) async fn serve(options: ServeOptions) -> Result<(), String> {
    let config = load_config(options.config.clone()).await?;
    let store = store::Store::open(&options.store)
        .await
        .map_err(|e| e.to_string())?;
    if options.work && !store.is_shared() {
        return Err(
            "--work needs a postgres:// store (on SQLite, serve runs its runs itself)".into(),
        );
    }
    let interrupted = store
        .interrupt_leftovers()
        .await
        .map_err(|e| e.to_string())?;
    if interrupted > 0 {
        tracing::warn!(
            "{interrupted} run(s) were going on when the server last stopped: marked interrupted"
        );
    }
    let owner = options.work.then(worker::worker_name);
    let connection_limits = config.connections;
    let runs = runs::Runs::new(store, Arc::new(config), owner);
    if telemetry::exporting() {
        tokio::spawn(runs::sample_queue(runs.clone()));
    }
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", options.listen))?;
    let address = listener
        .local_addr()
        .map_err(|e| format!("cannot read the address listened on: {e}"))?;
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "codeact serve: listening on http://{address} (store {})",
            options.store
        );
        let _ = out.flush();
    }
    let stop = tokio_util::sync::CancellationToken::new();
    let signalled = stop.clone();
    tokio::spawn(async move {
        stopped().await;
        signalled.cancel();
    });
    // On PostgreSQL, workers write the journals: notices tell this process's
    // viewers; with --work, this process is one of the workers too.
    let working = if runs.store.is_shared() {
        if options.work {
            Some(tokio::spawn(worker::work_queue(runs.clone(), stop.clone())))
        } else {
            tokio::spawn(worker::listen(runs.clone(), None));
            None
        }
    } else {
        None
    };
    let server = connections::serve(listener, router(runs), connection_limits, stop.clone());
    // An event stream stays open while its run goes on: past the grace, the
    // server stops anyway, and the next start marks such runs interrupted.
    let grace = async {
        stop.cancelled().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    let served = tokio::select! {
        () = server => Ok(()),
        () = grace => {
            tracing::warn!("stopping with requests still open after {SHUTDOWN_GRACE:?}");
            Ok(())
        }
    };
    if let Some(working) = working {
        let _ = working.await;
    }
    served
}

/// How long a stopping server waits for open requests (event streams of runs
/// still going) to end: 5 s.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Resolves at Ctrl-C or SIGTERM.
pub(super) async fn stopped() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

/// The routes, over the runs they work on.
fn router(runs: Arc<runs::Runs>) -> Router {
    Router::new()
        .route("/", get(page::index))
        .route("/page/app.js", get(page::script))
        .route("/page/style.css", get(page::style))
        .route("/healthz", get(api::healthz))
        .route("/readyz", get(api::readyz))
        .route("/agents", get(api::list_agents))
        .route("/runs", post(api::create_run).get(api::list_runs))
        .route("/runs/{id}", get(api::get_run))
        .route("/runs/{id}/events", get(sse::events))
        .route("/runs/{id}/cancel", post(api::cancel_run))
        .route("/runs/{id}/approvals/{call}", post(api::decide))
        .route("/runs/{id}/messages", post(api::send_message))
        .fallback(|| async { api::ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .method_not_allowed_fallback(|| async {
            api::ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "this route takes another method",
            )
        })
        .route_layer(axum::middleware::from_fn_with_state(
            runs.clone(),
            api::measured,
        ))
        .with_state(runs)
}
