//! The `codeact` binary: see `codeact --help`.

/// Counts what each Rhai run allocates, so its memory limit holds for values the
/// engine's own meter cannot see (see `codeact::MeteredAllocator`).
#[global_allocator]
static ALLOCATOR: codeact::MeteredAllocator = codeact::MeteredAllocator;

fn main() -> std::process::ExitCode {
    // A JavaScript session's worker is this binary started again.
    if let Some(code) = codeact::run_worker_if_requested() {
        return code;
    }
    codeact_cli::cli::main()
}
