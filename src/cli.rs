//! The `codeact` command line.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use codeact_runtime::Limits;

use crate::command_tool::{CommandSpec, command_tool};
use crate::{ScriptSession, Tool, ToolBox, runtime_by_name};

/// Exit status for a run that produced a `ScriptOutput` (an error output included).
const EXIT_OK: u8 = 0;
/// Exit status when the host itself failed.
const EXIT_HOST_FAILURE: u8 = 1;
/// Exit status for usage errors: a bad flag, an unknown runtime, an unreadable file.
const EXIT_USAGE: u8 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "codeact",
    version,
    about = "Host code-executing agents in sandboxed script engines"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one script and print its ScriptOutput as one JSON line on stdout; what the
    /// script printed goes to stderr.
    Exec(ExecArgs),
}

#[derive(Debug, Args)]
struct LimitArgs {
    /// Wall-clock time per run, in milliseconds [default: 5000].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    timeout_ms: Option<u64>,
    /// Interpreter operations per run [default: 10000000].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_operations: Option<u64>,
    /// Memory the run's values may hold, in MiB [default: 64].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    max_memory_mb: Option<u64>,
}

impl LimitArgs {
    fn limits(&self) -> Limits {
        let mut limits = Limits::default();
        if let Some(ms) = self.timeout_ms {
            limits.wall_time = Duration::from_millis(ms);
        }
        if let Some(ops) = self.max_operations {
            limits.max_operations = ops;
        }
        if let Some(mb) = self.max_memory_mb {
            limits.max_memory_bytes = usize::try_from(mb << 20).unwrap_or(usize::MAX);
        }
        limits
    }
}

#[derive(Debug, Args)]
struct ToolArgs {
    /// A tool backed by a command, as NAME=COMMAND. The command is split like shell
    /// words but never run by a shell; each call writes its JSON arguments to the
    /// command's stdin and reads one JSON value from its stdout. Repeatable.
    #[arg(long = "tool", value_name = "NAME=COMMAND")]
    tools: Vec<String>,
    /// Kill a tool command after this many milliseconds [default: 30000].
    #[arg(long, value_name = "N", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    tool_timeout_ms: u64,
}

impl ToolArgs {
    fn toolbox(&self) -> Result<ToolBox, String> {
        let mut tools: Vec<Tool> = Vec::new();
        for entry in &self.tools {
            let (name, command) = entry
                .split_once('=')
                .ok_or_else(|| format!("--tool '{entry}' must be NAME=COMMAND"))?;
            let mut spec =
                CommandSpec::parse(command).map_err(|e| format!("--tool '{name}': {e}"))?;
            spec.timeout = Duration::from_millis(self.tool_timeout_ms);
            let description = format!(
                "Runs `{}` with the arguments as JSON on stdin; returns the JSON it prints.",
                command.trim()
            );
            tools.push(command_tool(name.trim(), description, spec));
        }
        ToolBox::new(tools).map_err(|e| format!("--tool: {e}"))
    }
}

#[derive(Debug, Args)]
struct ExecArgs {
    /// The runtime to run the script in.
    #[arg(long, default_value = "rhai")]
    runtime: String,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    tools: ToolArgs,
    /// The script file, or - for stdin.
    #[arg(value_name = "FILE|-")]
    file: String,
}

/// Runs the command line and returns the process exit status.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if !err.use_stderr() => {
            let _ = err.print();
            return ExitCode::SUCCESS;
        }
        Err(err) => {
            let text = err.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            return usage_error(first.trim_start_matches("error: "));
        }
    };
    match cli.command {
        Command::Exec(args) => exec(&args),
    }
}

fn usage_error(problem: &str) -> ExitCode {
    eprintln!("codeact: {problem}");
    ExitCode::from(EXIT_USAGE)
}

fn read_script(file: &str) -> Result<String, String> {
    let bytes = if file == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read the script from stdin: {e}"))?;
        bytes
    } else {
        std::fs::read(file).map_err(|e| format!("cannot read '{file}': {e}"))?
    };
    let name = if file == "-" { "stdin" } else { file };
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "{name} is not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
}

fn exec(args: &ExecArgs) -> ExitCode {
    let runtime = match runtime_by_name(&args.runtime, args.limits.limits()) {
        Ok(runtime) => runtime,
        Err(e) => return usage_error(&e.to_string()),
    };
    let toolbox = match args.tools.toolbox() {
        Ok(toolbox) => toolbox,
        Err(e) => return usage_error(&e),
    };
    let script = match read_script(&args.file) {
        Ok(script) => script,
        Err(e) => return usage_error(&e),
    };
    let host = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(host) => host,
        Err(e) => {
            eprintln!("codeact: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_HOST_FAILURE);
        }
    };
    let result = host.block_on(async {
        let mut session = ScriptSession::start(&*runtime, Arc::new(toolbox))?;
        session.run(script).await
    });
    match result {
        Ok(run) => {
            let mut stderr = std::io::stderr().lock();
            let logs = run.logs.render();
            let _ = stderr.write_all(logs.as_bytes());
            if !logs.is_empty() && !logs.ends_with('\n') {
                let _ = stderr.write_all(b"\n");
            }
            println!("{}", run.output);
            ExitCode::from(EXIT_OK)
        }
        Err(e) => {
            eprintln!("codeact: {e}");
            ExitCode::from(EXIT_HOST_FAILURE)
        }
    }
}
