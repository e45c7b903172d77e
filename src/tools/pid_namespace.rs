//! Runs a command tool in a PID namespace of its own, so that every process it
//! starts dies when it ends, and tied to the host's life ([`parent_death`]), so
//! that it dies with the host too.
//!
//! A process group (what `command.rs` kills) holds only the processes that stay in
//! it: `setsid`, `setpgid` or a daemon's double fork leave it. In a new PID
//! namespace the command is process 1, and when it exits the kernel kills every
//! process left in the namespace, whatever group or session it moved to. Without
//! privileges a process may create one inside a new user namespace, which here maps
//! the current user to itself (files and their permissions look the same);
//! util-linux's `unshare` does both, and `--kill-child` ends the namespace when
//! `unshare` itself is killed (at a timeout, or a dropped call).
//!
//! Where that cannot be set up (no `unshare` on `PATH`, user namespaces switched
//! off, a container profile refusing them) the host finds out once, by trying, and
//! runs commands in their own process group only, with the gap docs/cli.md states.
//! Inside a user namespace, set-user-ID programs (`sudo`, `ping` on some systems)
//! do not gain privileges; a deployment whose tools need them sets
//! `CODEACT_TOOL_PID_NAMESPACE=off`.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;
use tokio::sync::OnceCell;

/// The environment variable that turns the namespace off (`off`); read once.
pub const SWITCH: &str = "CODEACT_TOOL_PID_NAMESPACE";

/// The arguments before a command's own that run it in a new PID namespace, or
/// `None` when commands run in their process group only. Probed on first use.
pub(crate) async fn launcher() -> Option<&'static [String]> {
    static LAUNCHER: OnceCell<Option<Vec<String>>> = OnceCell::const_new();
    LAUNCHER.get_or_init(probe).await.as_deref()
}

/// The arguments before a command's own (and before [`launcher`]'s) that make
/// it die when the process that started it dies, SIGKILL included: util-linux's
/// `setpriv --pdeathsig KILL`, which sets `PR_SET_PDEATHSIG` and then execs
/// the rest (the setting survives the exec; this crate forbids `unsafe`, which
/// a `pre_exec` hook would need). `None` where `setpriv` is missing or refuses
/// (not Linux, an old util-linux). Probed on first use.
///
/// With the PID namespace, that first process is `unshare`, whose death takes
/// the namespace's first process with it (`--kill-child`), and so every process
/// in the namespace: nothing a command started outlives a killed `codeact`.
/// Without the namespace, only the command itself dies; processes it started
/// are left (the death signal is not inherited across `fork`).
///
/// The kernel sends the signal when the *thread* that started the command ends,
/// not only the process. A command tool is started by the thread that makes the
/// script's tool call and waits in it until the command is done (or by a
/// runtime's worker thread, which lives as long as the runtime), so that thread
/// outlives the command unless the whole process dies.
pub(crate) async fn parent_death() -> Option<&'static [String]> {
    static TETHER: OnceCell<Option<Vec<String>>> = OnceCell::const_new();
    TETHER.get_or_init(probe_parent_death).await.as_deref()
}

async fn probe_parent_death() -> Option<Vec<String>> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let setpriv = on_path("setpriv")?.to_string_lossy().into_owned();
    let tether: Vec<String> = [setpriv.as_str(), "--pdeathsig", "KILL", "--"]
        .into_iter()
        .map(String::from)
        .collect();
    kept_if_it_runs(tether, [setpriv.as_str(), "--help"]).await
}

/// Finds `unshare` and checks that it can create the namespaces here by running
/// itself inside them.
async fn probe() -> Option<Vec<String>> {
    if std::env::var(SWITCH).is_ok_and(|value| value.eq_ignore_ascii_case("off")) {
        return None;
    }
    let unshare = on_path("unshare")?.to_string_lossy().into_owned();
    let launcher: Vec<String> = [
        unshare.as_str(),
        "--user",
        "--map-current-user",
        "--pid",
        "--fork",
        "--kill-child",
        "--",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    kept_if_it_runs(launcher, [unshare.as_str(), "--version"]).await
}

/// `prefix` when it runs `command` after it successfully here, else `None`: a
/// prefix the system refuses (no user namespaces, an old util-linux) is left out.
async fn kept_if_it_runs(prefix: Vec<String>, command: [&str; 2]) -> Option<Vec<String>> {
    let works = Command::new(&prefix[0])
        .args(&prefix[1..])
        .args(command)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .status()
        .await
        .is_ok_and(|status| status.success());
    works.then_some(prefix)
}

/// Where `program` would be found: itself when it names a path, else the first
/// match on `PATH`. `None` when there is no such file, so the caller can start it
/// directly and report the system's own error.
pub(crate) fn on_path(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        let path = Path::new(program);
        return path.is_file().then(|| path.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_found_on_the_path_or_by_its_own_path() {
        assert!(on_path("sh").is_some());
        assert_eq!(on_path("/bin/sh"), Some(PathBuf::from("/bin/sh")));
        assert_eq!(on_path("/nonexistent/tool"), None);
        assert_eq!(on_path("no-such-program-anywhere"), None);
    }
}
