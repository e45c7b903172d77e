//! The `codeact` binary: see `codeact --help`.

fn main() -> std::process::ExitCode {
    // A JavaScript session's worker is this binary started again.
    #[cfg(feature = "js")]
    if let Some(code) = codeact_js::run_worker_if_requested() {
        return code;
    }
    codeact::cli::main()
}
