//! Waiting for the other side of a session: the host for its worker's next
//! line, the worker for its host's, an in-process engine and its session for
//! each other's messages. A wait may first spin (look again and again without
//! sleeping), then sleeps.
//!
//! Why: a tool call is a round trip (the script's call out, the answer back),
//! and a step is one too. Asleep, each side is woken by the kernel when the
//! other writes, and on a virtual machine whose idle CPUs halt, a wake-up costs
//! tens of microseconds: on a quiet machine most of a call's time went to two
//! or three of them. Spinning, a side sees the other's line as it lands.
//!
//! On a busy machine spinning is worse than sleeping: a spinning thread holds a
//! CPU the other side may need, and it is not woken (and so not run at once)
//! when the line lands. So the spin adapts, per thread ([`spin`]): it is as long
//! as [`SPIN`] after a wait that a spin ended, it halves after one that had to
//! sleep, and it stops altogether when the thread is descheduled while it
//! spins (the CPUs are wanted elsewhere); then one wait in [`PROBE_EVERY`]
//! tries a short spin, so a machine that grew quiet is noticed. What it costs
//! is bounded: at most [`SPIN`] of one CPU per wait that lasts longer (a slow
//! tool, a long script, the time between steps).

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The longest spin before a wait sleeps: 100 µs, several tool calls' round
/// trips, and a small fraction of a model's turn.
pub(crate) const SPIN: Duration = Duration::from_micros(100);

/// A gap this long between two looks of a spin means the thread was
/// descheduled: the machine is busy, and the spin stops.
const DESCHEDULED: Duration = Duration::from_micros(30);

/// Once spinning stopped, one wait in this many spins briefly (for a quarter of
/// [`SPIN`]) to notice a machine that grew quiet.
pub(crate) const PROBE_EVERY: u32 = 32;

thread_local! {
    /// This thread's spin, in microseconds, and its waits since spinning stopped.
    static SPINNING: Cell<(u64, u32)> = const { Cell::new((SPIN.as_micros() as u64, 0)) };
}

/// Spins until `ready` says yes or this thread's spin (at most `wait`) is over;
/// whether it said yes. Adapts the spin as the module docs say.
pub(crate) fn spin(wait: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let (micros, idle_waits) = SPINNING.with(Cell::get);
    // After a spin that ended without `ready`: half as long, or (not
    // spinning) one more wait since spinning stopped, a probe starting over.
    let (budget, unready) = if micros > 0 {
        (Duration::from_micros(micros), (micros / 2, 0))
    } else if idle_waits + 1 >= PROBE_EVERY {
        (SPIN / 4, (0, 0))
    } else {
        (Duration::ZERO, (0, idle_waits + 1))
    };
    let budget = budget.min(wait);
    let started = Instant::now();
    let mut last = started;
    let mut looks = 0u32;
    loop {
        looks += 1;
        if ready() {
            // Ready at the first look tells nothing about spinning.
            if looks > 1 {
                SPINNING.with(|cell| cell.set((SPIN.as_micros() as u64, 0)));
            }
            return true;
        }
        let now = Instant::now();
        if now.duration_since(last) >= DESCHEDULED {
            SPINNING.with(|cell| cell.set((0, 0)));
            return false;
        }
        if now.duration_since(started) >= budget {
            SPINNING.with(|cell| cell.set(unready));
            return false;
        }
        last = now;
        std::hint::spin_loop();
    }
}

/// Whether `fd` has something to read (a line, or its other end closed) within
/// `wait` (`None`: however long it takes): [`spin`]s, then sleeps in `poll`.
/// `Ok(false)`: nothing within `wait`, or the sleep was interrupted (the caller
/// looks at its clock and asks again). `Err`: `poll` itself failed, and the
/// caller's read blocks instead.
#[cfg(unix)]
pub(crate) fn readable(
    fd: std::os::fd::BorrowedFd<'_>,
    wait: Option<Duration>,
) -> std::io::Result<bool> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

    let started = Instant::now();
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    let mut failed = None;
    let ready = spin(wait.unwrap_or(SPIN), || {
        match poll(&mut fds, PollTimeout::ZERO) {
            Ok(ready) => ready > 0,
            Err(e) => {
                failed = Some(e);
                true
            }
        }
    });
    if let Some(e) = failed {
        return Err(e.into());
    }
    if ready {
        return Ok(true);
    }
    let timeout = match wait {
        None => PollTimeout::NONE,
        Some(wait) => {
            let left = wait.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Ok(false);
            }
            // Whole milliseconds, rounded up: a wait never ends early.
            let millis = left.as_micros().div_ceil(1000);
            u32::try_from(millis)
                .ok()
                .and_then(|millis| PollTimeout::try_from(millis).ok())
                .unwrap_or(PollTimeout::MAX)
        }
    };
    match poll(&mut fds, timeout) {
        Ok(ready) => Ok(ready > 0),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The next message on `channel` within `wait`: [`spin`]s, then sleeps.
pub(crate) fn receive<T>(
    channel: &std::sync::mpsc::Receiver<T>,
    wait: Duration,
) -> Result<T, std::sync::mpsc::RecvTimeoutError> {
    use std::sync::mpsc::{RecvTimeoutError, TryRecvError};

    let started = Instant::now();
    let mut received = None;
    spin(wait, || match channel.try_recv() {
        Ok(message) => {
            received = Some(Ok(message));
            true
        }
        Err(TryRecvError::Disconnected) => {
            received = Some(Err(RecvTimeoutError::Disconnected));
            true
        }
        Err(TryRecvError::Empty) => false,
    });
    if let Some(received) = received {
        return received;
    }
    channel.recv_timeout(wait.saturating_sub(started.elapsed()))
}

/// Lines read from a pipe, kept past the last whole line.
#[derive(Debug, Default)]
pub(crate) struct Lines {
    pending: Vec<u8>,
    /// How much of `pending` is known to hold no newline.
    scanned: usize,
    /// What each read fills, zeroed once: zeroing 64 KiB for every read
    /// cost more than a short line's copy.
    chunk: Vec<u8>,
}

/// How much one read takes from the pipe at most: 64 KiB, a Linux pipe's
/// whole buffer.
const CHUNK: usize = 64 << 10;

impl Lines {
    /// The next whole line already read, without its newline.
    pub(crate) fn take_line(&mut self) -> Option<Vec<u8>> {
        let at = self.pending[self.scanned..]
            .iter()
            .position(|byte| *byte == b'\n')
            .map(|offset| self.scanned + offset);
        let Some(at) = at else {
            self.scanned = self.pending.len();
            return None;
        };
        let rest = self.pending.split_off(at + 1);
        let mut line = std::mem::replace(&mut self.pending, rest);
        line.pop();
        self.scanned = 0;
        Some(line)
    }

    /// Reads what `source` has (one read); false when it ended or failed.
    pub(crate) fn fill(&mut self, source: &mut impl std::io::Read) -> bool {
        if self.chunk.len() < CHUNK {
            self.chunk = vec![0; CHUNK];
        }
        let read = source.read(&mut self.chunk);
        if let Ok(n) = read {
            self.pending.extend_from_slice(&self.chunk[..n]);
        }
        match read {
            Ok(0) => false,
            Ok(_) => true,
            Err(e) => e.kind() == std::io::ErrorKind::Interrupted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin_state() -> (u64, u32) {
        SPINNING.with(Cell::get)
    }

    /// A spin that ends without the other side halves; a spin that sees it
    /// ready after looking again is as long as it may be.
    #[test]
    fn a_spin_halves_after_a_wait_it_could_not_end_and_grows_back_when_it_ends_one() {
        std::thread::spawn(|| {
            assert_eq!(spin_state(), (SPIN.as_micros() as u64, 0));
            let started = Instant::now();
            assert!(!spin(Duration::from_secs(1), || false));
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "the spin is bounded"
            );
            let (micros, _) = spin_state();
            // Halved, unless the thread was descheduled (a busy machine): stopped.
            assert!(
                micros == SPIN.as_micros() as u64 / 2 || micros == 0,
                "{micros}"
            );
            SPINNING.with(|cell| cell.set((10, 0)));
            let mut looks = 0;
            assert!(spin(Duration::from_secs(1), || {
                looks += 1;
                looks == 2
            }));
            assert_eq!(spin_state(), (SPIN.as_micros() as u64, 0));
        })
        .join()
        .expect("the test thread");
    }

    /// Once spinning stopped, waits sleep at once, and one in [`PROBE_EVERY`]
    /// spins again briefly.
    #[test]
    fn a_thread_that_stopped_spinning_probes_once_in_a_while() {
        std::thread::spawn(|| {
            SPINNING.with(|cell| cell.set((0, 0)));
            for wait in 1..PROBE_EVERY {
                let mut looks = 0;
                assert!(!spin(Duration::from_secs(1), || {
                    looks += 1;
                    false
                }));
                assert_eq!(looks, 1, "no spin at wait {wait}");
                assert_eq!(spin_state(), (0, wait));
            }
            let mut looks = 0;
            assert!(spin(Duration::from_secs(1), || {
                looks += 1;
                looks == 3
            }));
            assert_eq!(
                spin_state(),
                (SPIN.as_micros() as u64, 0),
                "the probe found it ready"
            );
        })
        .join()
        .expect("the test thread");
    }

    /// A line split over reads, and two lines in one read, come out whole.
    #[test]
    fn lines_come_out_whole_however_the_reads_cut_them() {
        let mut lines = Lines::default();
        let mut first: &[u8] = b"{\"op\":";
        assert!(lines.fill(&mut first));
        assert_eq!(lines.take_line(), None);
        let mut second: &[u8] = b"1}\n{\"op\":2}\n{\"op";
        assert!(lines.fill(&mut second));
        assert_eq!(lines.take_line().as_deref(), Some(&b"{\"op\":1}"[..]));
        assert_eq!(lines.take_line().as_deref(), Some(&b"{\"op\":2}"[..]));
        assert_eq!(lines.take_line(), None);
        let mut ended: &[u8] = b"";
        assert!(!lines.fill(&mut ended), "the end of the input");
    }
}
