//! A `codeact` process a test started (`serve`, `worker`): its first line of
//! stdout read (where it listens, or that it works), killed when dropped.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A started `codeact` process, killed (SIGKILL) when dropped.
pub struct CodeactProcess {
    pub child: Child,
    /// The `http://` address its first line names (a front end's base URL,
    /// without a trailing `/`); empty when it names none (a worker).
    pub base: String,
    /// Its first line of stdout.
    pub first_line: String,
}

impl CodeactProcess {
    /// Spawns `command` with stdout piped and waits for its first line.
    pub fn start(mut command: Command) -> Self {
        let mut child = command
            .stdout(Stdio::piped())
            .spawn()
            .expect("codeact starts");
        let mut first_line = String::new();
        BufReader::new(child.stdout.take().expect("stdout is piped"))
            .read_line(&mut first_line)
            .expect("the process says it started");
        let base = first_line
            .split_whitespace()
            .find(|word| word.starts_with("http://"))
            .unwrap_or_default()
            .trim_end_matches('/')
            .to_string();
        Self {
            child,
            base,
            first_line,
        }
    }

    /// [`start`](Self::start), for a front end: panics without an address.
    pub fn start_listening(command: Command) -> Self {
        let process = Self::start(command);
        assert!(
            !process.base.is_empty(),
            "no address in {:?}",
            process.first_line
        );
        process
    }

    /// Sends SIGTERM; whether `kill` ran and succeeded.
    pub fn terminate(&self) -> bool {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .is_ok_and(|status| status.success())
    }

    /// Waits at most `limit` for the process to exit; its status, if it did.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let started = Instant::now();
        while started.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for CodeactProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
