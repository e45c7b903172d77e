//! `codeact serve`: the HTTP service (see `crate::serve`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::{EXIT_HOST_FAILURE, EXIT_OK, host_runtime};
use crate::serve::{ServeOptions, default_store_path, serve};

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The address to listen on; port 0 picks a free one, printed at start.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Where runs and their event journals are kept: sqlite:PATH (created when
    /// missing) [default: sqlite:$XDG_STATE_HOME/codeact/serve.sqlite, else
    /// sqlite:~/.local/state/codeact/serve.sqlite].
    #[arg(long, value_name = "sqlite:PATH")]
    store: Option<String>,
    /// The server's config (TOML): bearer tokens, the agents it offers (team
    /// files), limits and request caps; see examples/serve.toml. Clients choose
    /// among its agents and can change nothing else.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

pub(crate) fn serve_command(args: &ServeArgs) -> ExitCode {
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
    };
    match host.block_on(serve(options)) {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(e) => {
            eprintln!("codeact serve: {e}");
            ExitCode::from(EXIT_HOST_FAILURE)
        }
    }
}
