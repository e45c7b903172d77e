//! `codeact run --approve ask|allow|deny|defer`: who decides on calls that need
//! approval (`--needs-approval TOOL`, `"approval": true` in a tools manifest, or
//! a policy answering `"ask"`).

use std::io::{BufRead, IsTerminal, Write};
use std::sync::Mutex;

use codeact::agent::{ApprovalDecision, ApprovalRequest, Approver};

use super::printer::terminal_safe;

/// The approver `mode` names: `ask` (a prompt on the controlling terminal),
/// `allow`, `deny`; without a mode, `ask` when stdin is a terminal, else `deny`.
pub(crate) fn approver(mode: Option<&str>) -> Approver {
    let mode = mode.unwrap_or(if std::io::stdin().is_terminal() {
        "ask"
    } else {
        "deny"
    });
    match mode {
        "allow" => Approver::allow_all(),
        "defer" => Approver::defer_all(),
        "ask" => Approver::new(|request| async move {
            tokio::task::spawn_blocking(move || ask_at_terminal(&request))
                .await
                .unwrap_or_else(|_| ApprovalDecision::deny("the prompt failed").by("terminal"))
        }),
        _ => Approver::deny_all("calls that need approval are denied (--approve deny)"),
    }
}

/// Asks on `/dev/tty`, one request at a time: `y` or `yes` approves; anything
/// else denies, a longer answer being the reason the script is told.
fn ask_at_terminal(request: &ApprovalRequest) -> ApprovalDecision {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let no_terminal = || {
        ApprovalDecision::deny("no terminal to ask (give --approve allow or deny)").by("terminal")
    };
    let Ok(mut tty) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
    else {
        return no_terminal();
    };
    let args = codeact_runtime::text::shorten(&request.args.to_string(), 400);
    let caller = if request.agent.is_empty() {
        "a script".to_string()
    } else {
        format!("agent '{}' (step {})", request.agent, request.step)
    };
    let question = format!(
        "\n── approval: {caller} calls {}({})\n   approve? [y/N, or a reason to deny] ",
        request.tool, args
    );
    if tty.write_all(terminal_safe(&question).as_bytes()).is_err() {
        return no_terminal();
    }
    let mut answer = String::new();
    if std::io::BufReader::new(&tty)
        .read_line(&mut answer)
        .is_err()
    {
        return no_terminal();
    }
    match answer.trim() {
        "y" | "Y" | "yes" | "Yes" => ApprovalDecision::approve().by("terminal"),
        "" | "n" | "N" | "no" | "No" => {
            ApprovalDecision::deny("denied at the terminal").by("terminal")
        }
        reason => ApprovalDecision::deny(reason).by("terminal"),
    }
}
