//! `codeact exec`: run one script.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;

use super::files::FileArgs;
use super::printer::terminal_safe;
use super::{EXIT_HOST_FAILURE, EXIT_OK, LimitArgs, ToolArgs, host_runtime, usage_error};
use codeact::exec::ScriptSession;
use codeact::exec::runtime_by_name;
use codeact::tools::ToolBox;

#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// The runtime to run the script in: rhai, js, js-in-process, wasm:js,
    /// wasm:js-stdio, wasm:micropython, wasm:python, wasm:python-sci, wasm:rhai, wasm:boa, or wasm:PATH for a
    /// WASI guest file.
    #[arg(long, default_value = "rhai")]
    runtime: String,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    tools: ToolArgs,
    #[command(flatten)]
    files: FileArgs,
    /// Who decides on calls of tools that need approval ("approval": true in a
    /// tools manifest): ask (a prompt on the terminal), allow or deny [default:
    /// ask when stdin is a terminal, else deny]. A denied call throws a tool
    /// error the script can catch.
    #[arg(long, value_name = "MODE", value_parser = ["ask", "allow", "deny"])]
    approve: Option<String>,
    /// The script file, or - for stdin.
    #[arg(value_name = "FILE|-")]
    file: String,
}

pub(crate) fn read_script(file: &str) -> Result<String, String> {
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

pub(crate) fn exec(args: &ExecArgs) -> ExitCode {
    let runtime = match runtime_by_name(&args.runtime, args.limits.limits()) {
        Ok(runtime) => runtime,
        Err(e) => return usage_error(&e.to_string()),
    };
    let host = match host_runtime() {
        Ok(host) => host,
        Err(code) => return code,
    };
    let area = match args.files.area() {
        Ok(area) => area,
        Err(e) => return usage_error(&e),
    };
    let toolbox = match args
        .tools
        .tools(&host)
        .map(|mut tools| {
            tools.extend(area.iter().flat_map(|area| area.tools()));
            tools
        })
        .and_then(|tools| ToolBox::new(tools).map_err(|e| format!("--tool: {e}")))
    {
        Ok(toolbox) => toolbox.approved_by(super::approve::approver(args.approve.as_deref())),
        Err(e) => return usage_error(&e),
    };
    let script = match read_script(&args.file) {
        Ok(script) => script,
        Err(e) => return usage_error(&e),
    };
    let result = host.block_on(async {
        let view = area.as_ref().map(|area| area.view());
        let mut session =
            ScriptSession::start_with_files(&*runtime, Arc::new(toolbox), view.as_ref())?;
        session.run(script).await
    });
    match result {
        Ok(run) => {
            let mut stderr = std::io::stderr().lock();
            let logs = run.logs.render();
            let _ = stderr.write_all(terminal_safe(&logs).as_bytes());
            if !logs.is_empty() && !logs.ends_with('\n') {
                let _ = stderr.write_all(b"\n");
            }
            println!("{}", run.output);
            ExitCode::from(EXIT_OK)
        }
        Err(e) => {
            eprintln!("codeact: {}", terminal_safe(&e.to_string()));
            ExitCode::from(EXIT_HOST_FAILURE)
        }
    }
}
