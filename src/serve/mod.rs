//! `codeact serve`: runs as a service. An HTTP API (axum) starts runs of the
//! agents the server's config offers, streams their events, cancels them, takes
//! approvals and a conversation's next messages; runs and their journals live in
//! an embedded SQLite file, so a restarted server still lists and streams them.
//!
//! The parts: the config file and its tokens ([`config`]), who calls
//! ([`auth`]), the routes ([`api`]), the event stream ([`sse`]), the web page
//! ([`page`]), the work on runs ([`runs`]) and the store ([`store`]).

mod api;
mod auth;
mod config;
mod page;
mod runs;
mod sse;
mod store;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

pub(crate) use store::default_store_path;

/// What `codeact serve` was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct ServeOptions {
    /// Where to listen; port 0 picks a free one.
    pub listen: SocketAddr,
    /// The store, `sqlite:PATH`.
    pub store: String,
    /// The server's config file.
    pub config: PathBuf,
}

/// Loads the config, opens the store, and serves until Ctrl-C or SIGTERM. Once
/// listening, prints `codeact serve: listening on http://ADDR` on stdout (the
/// address with the port chosen when 0 was asked for). Runs still going at the
/// stop are marked `interrupted` by the next start.
pub(crate) async fn serve(options: ServeOptions) -> Result<(), String> {
    let path = options.config.clone();
    let config = tokio::task::spawn_blocking(move || config::ServeConfig::load(&path))
        .await
        .map_err(|e| format!("loading the config failed: {e}"))??;
    let store = store::Store::open(&options.store)
        .await
        .map_err(|e| e.to_string())?;
    let interrupted = store
        .interrupt_leftovers()
        .await
        .map_err(|e| e.to_string())?;
    if interrupted > 0 {
        tracing::warn!(
            "{interrupted} run(s) were going on when the server last stopped: marked interrupted"
        );
    }
    let runs = runs::Runs::new(store, Arc::new(config));
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
    axum::serve(listener, api::router(runs))
        .with_graceful_shutdown(stopped())
        .await
        .map_err(|e| format!("the server failed: {e}"))
}

/// Resolves at Ctrl-C or SIGTERM.
async fn stopped() {
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
