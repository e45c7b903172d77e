//! What the figures were measured on, and the process's memory as Linux reports it.
//! Figures from a shared, busy machine are only comparable within one run, so a
//! report carries the machine line, the load and the date beside them.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// The machine a report was measured on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// The CPU's model line from `/proc/cpuinfo`, when readable.
    pub cpu: Option<String>,
    /// Logical CPUs this process may use.
    pub cpus: usize,
    /// The 1, 5 and 15 minute load averages at the start, when readable.
    pub load_average: Option<[f64; 3]>,
    /// Operating system and architecture, e.g. `linux x86_64`.
    pub os: String,
}

impl Machine {
    /// Reads the machine's description now.
    pub fn probe() -> Self {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|text| {
                text.lines()
                    .find(|line| line.starts_with("model name"))
                    .and_then(|line| line.split_once(':'))
                    .map(|(_, model)| model.split_whitespace().collect::<Vec<_>>().join(" "))
            });
        Self {
            cpu,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            load_average: load_average(),
            os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        }
    }

    /// One line for a report: `CPU, N CPUs, OS, load a b c`.
    pub fn line(&self) -> String {
        let load = self
            .load_average
            .map(|[a, b, c]| format!(", load {a:.2} {b:.2} {c:.2}"))
            .unwrap_or_default();
        format!(
            "{}, {} logical CPUs, {}{load}",
            self.cpu.as_deref().unwrap_or("unknown CPU"),
            self.cpus,
            self.os
        )
    }
}

fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut fields = text.split_whitespace().map(|f| f.parse::<f64>().ok());
    Some([fields.next()??, fields.next()??, fields.next()??])
}

/// The current UTC time as `YYYY-MM-DD HH:MM UTC`.
pub fn now_utc() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format_utc(secs)
}

/// Formats seconds since the Unix epoch as `YYYY-MM-DD HH:MM UTC` (proleptic
/// Gregorian calendar).
pub fn format_utc(secs: u64) -> String {
    let at = i64::try_from(secs)
        .ok()
        .and_then(|secs| time::OffsetDateTime::from_unix_timestamp(secs).ok())
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02} UTC",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute()
    )
}

/// A field of a `/proc/<pid>/status` file in bytes (`VmRSS`, `RssAnon` …), read
/// from `status` text.
fn status_field_bytes(status: &str, field: &str) -> Option<u64> {
    let line = status
        .lines()
        .find(|line| line.split(':').next() == Some(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// This process's resident set (`VmRSS`), in bytes; `None` where `/proc` is not.
pub fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status_field_bytes(&status, "VmRSS")
}

/// Private memory of this process's child processes (JavaScript workers): the sum
/// of their `RssAnon`, in bytes. Their shared pages (the executable's text, mapped
/// once for all of them) are left out, since a machine pays for them once.
pub fn children_private_bytes() -> u64 {
    child_pids()
        .into_iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .filter_map(|status| status_field_bytes(&status, "RssAnon"))
        .sum()
}

/// CPU time used so far by this process (all its threads, living or ended) and by
/// its living child processes, in seconds, from `/proc/<pid>/stat` (`utime` +
/// `stime`, in ticks of 1/100 s, Linux's `USER_HZ` on every common platform: so
/// read it over windows of a second or more). `None` where `/proc` is not.
pub fn cpu_seconds() -> Option<f64> {
    let own = stat_ticks(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    let children: u64 = child_pids()
        .into_iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| stat_ticks(&stat))
        .sum();
    Some((own + children) as f64 / 100.0)
}

/// Waits until this process and its children use less than a quarter of a CPU
/// over a 250 ms window, or `max` has passed; returns how long it waited. A case
/// that abandons work (an in-process JavaScript session gives up on a runaway
/// thread at the deadline, which runs on to Boa's loop limit) must not leave it
/// burning CPU under the next case's figures.
pub fn wait_until_idle(max: std::time::Duration) -> std::time::Duration {
    const WINDOW: std::time::Duration = std::time::Duration::from_millis(250);
    let started = std::time::Instant::now();
    while started.elapsed() < max {
        let Some(before) = cpu_seconds() else {
            break;
        };
        std::thread::sleep(WINDOW);
        let Some(after) = cpu_seconds() else {
            break;
        };
        if (after - before) / WINDOW.as_secs_f64() < 0.25 {
            break;
        }
    }
    started.elapsed()
}

/// `utime + stime` from a `/proc/<pid>/stat` line. The command name (field 2) may
/// hold spaces and parentheses, so fields are counted after its last `)`.
fn stat_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After the name: state is field 3, utime field 14, stime field 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Process ids of this process's children, from every thread's `children` list.
pub fn child_pids() -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|pid| pid.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epoch_and_a_known_day_format_as_utc_dates() {
        assert_eq!(format_utc(0), "1970-01-01 00:00 UTC");
        // 2024-02-29 13:45 UTC, a leap day.
        assert_eq!(format_utc(1_709_214_300), "2024-02-29 13:45 UTC");
        assert_eq!(format_utc(951_782_400), "2000-02-29 00:00 UTC");
    }

    #[test]
    fn status_fields_are_read_in_bytes() {
        let status = "Name:\tcodeact\nVmRSS:\t    2048 kB\nRssAnon:\t  512 kB\n";
        assert_eq!(status_field_bytes(status, "VmRSS"), Some(2048 * 1024));
        assert_eq!(status_field_bytes(status, "RssAnon"), Some(512 * 1024));
        assert_eq!(status_field_bytes(status, "VmSwap"), None);
    }

    #[test]
    fn cpu_ticks_are_read_after_the_command_name() {
        let stat = "42 (a (weird) name) S 1 42 42 0 -1 4194560 100 0 0 0 250 30 0 0 20 0 1";
        assert_eq!(stat_ticks(stat), Some(280));
        assert_eq!(stat_ticks("garbage"), None);
    }

    #[test]
    fn this_process_has_a_resident_set_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(rss_bytes().is_some_and(|b| b > 0));
        }
    }

    #[test]
    fn the_machine_line_names_the_cpu_count() {
        let machine = Machine::probe();
        assert!(machine.line().contains("logical CPUs"));
    }
}
