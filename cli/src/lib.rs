//! The `codeact` command line and what only it runs: the subcommands (`exec`, `run`,
//! `validate`, `mcp`, `guests`, `serve`, `worker`, `eval`, `bench`), the HTTP
//! server with its run store, the evaluation over a task file, and the benchmark
//! harness.
//!
//! The library an application embeds is the `codeact` crate; this package is the
//! tool (`cargo install --path cli`). Its library target exists for its own
//! benchmarks and tests, which use the bench harness ([`bench`]) and the
//! evaluation's records ([`eval`]).

pub mod bench;
pub mod cli;
pub mod eval;
mod serve;
