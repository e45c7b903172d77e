//! The `codeact` binary: see `codeact --help`.

fn main() -> std::process::ExitCode {
    codeact::cli::main()
}
