//! What the host and a running guest share: the guest's stdin, its parsed stdout,
//! the run's deadline and what the memory limiter saw.
//!
//! The guest's WASI streams and the store's callbacks reach this through an
//! `Arc<Mutex<Exchange>>`; the session's poll loop reads and fills it between polls
//! of the guest, on the session's own thread.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};
use std::time::Instant;

use bytes::Bytes;
use codeact_runtime::{Interrupt, LogBuffer};
use wasmtime_wasi::cli::{IsTerminal, StdinStream, StdoutStream};
use wasmtime_wasi::p2::{InputStream, OutputStream, Pollable, StreamError, StreamResult};

use crate::protocol::{GuestMessage, OutputParser};

/// Where the guest is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Starting up, or between scripts: a read of stdin waits for the next script.
    Idle,
    /// Running a script: a read of stdin gets a tool answer when one is due, else
    /// end-of-file.
    Running,
}

/// The shared state; see the module docs.
#[derive(Debug)]
pub(crate) struct Exchange {
    pub(crate) phase: Phase,
    stdin: VecDeque<u8>,
    /// A tool call was sent and its answer is not queued yet: reads wait.
    pub(crate) tool_pending: bool,
    read_waker: Option<Waker>,
    parser: OutputParser,
    pub(crate) logs: LogBuffer,
    pub(crate) inbox: VecDeque<GuestMessage>,
    /// When the current run must stop; checked at every epoch tick.
    pub(crate) deadline: Option<Instant>,
    /// Raised from outside to stop the current run as at its deadline.
    interrupt: Option<Interrupt>,
    /// The memory limiter refused to grow the guest's memory during this run.
    pub(crate) memory_refused: bool,
    /// Between scripts, reads of stdin find its end instead of waiting: a guest
    /// started by turns leaves its serving loop, so the host can copy its memory
    /// while it is inside no call (see [`crate::turns`]), then enters it again.
    pub(crate) pausing: bool,
    /// The session's state the guest's call copied while paused, for the host.
    pub(crate) paused_state: Option<crate::memory_image::SessionImage>,
}

/// A handle to the shared state.
pub(crate) type SharedExchange = Arc<Mutex<Exchange>>;

impl Exchange {
    /// A guest's exchange: `log_cap` bytes of output kept, messages of at most
    /// `max_message` bytes.
    pub(crate) fn new(log_cap: usize, max_message: usize) -> SharedExchange {
        Arc::new(Mutex::new(Exchange {
            phase: Phase::Idle,
            stdin: VecDeque::new(),
            tool_pending: false,
            read_waker: None,
            parser: OutputParser::new("", max_message),
            logs: LogBuffer::new(log_cap),
            inbox: VecDeque::new(),
            deadline: None,
            interrupt: None,
            memory_refused: false,
            pausing: false,
            paused_state: None,
        }))
    }

    /// Starts a run: a fresh nonce, empty logs, the script queued on stdin.
    pub(crate) fn begin_run(
        &mut self,
        nonce: &str,
        line: Vec<u8>,
        log_cap: usize,
        max_message: usize,
        deadline: Instant,
        interrupt: Option<&Interrupt>,
    ) {
        self.phase = Phase::Running;
        self.parser = OutputParser::new(nonce, max_message);
        self.logs = LogBuffer::new(log_cap);
        self.inbox.clear();
        self.stdin.clear();
        self.stdin.extend(line);
        self.tool_pending = false;
        self.deadline = Some(deadline);
        self.interrupt = interrupt.cloned();
        self.memory_refused = false;
        self.wake_reader();
    }

    /// Whether the current run must stop now: its deadline passed, or it was
    /// interrupted.
    pub(crate) fn must_stop(&self) -> bool {
        self.deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
            || self.interrupted()
    }

    /// Whether the current run was interrupted from outside.
    pub(crate) fn interrupted(&self) -> bool {
        self.interrupt.as_ref().is_some_and(Interrupt::is_raised)
    }

    /// Ends a run: what is left of the output is text; the next read waits for a script.
    pub(crate) fn end_run(&mut self) -> LogBuffer {
        let logs = &mut self.logs;
        self.parser.finish(&mut |text| logs.push(text));
        self.phase = Phase::Idle;
        self.deadline = None;
        self.interrupt = None;
        self.tool_pending = false;
        self.stdin.clear();
        std::mem::take(&mut self.logs)
    }

    /// Queues the answer to the pending tool call; the guest may write again.
    pub(crate) fn answer_tool(&mut self, line: Vec<u8>) {
        self.stdin.extend(line);
        self.tool_pending = false;
        self.parser.reopen();
        self.wake_reader();
    }

    /// The guest wrote to stdout where it should have been reading stdin: after a
    /// tool call before its answer, or after the run's terminal message. Only a
    /// script that writes the protocol itself does that; the instance is not
    /// trusted with another run.
    pub(crate) fn broken(&self) -> bool {
        self.parser.overrun()
    }

    /// Asks a guest waiting for its next script to leave its serving loop: its
    /// reads find the end of stdin until the host's side of its call has copied
    /// its state.
    pub(crate) fn pause(&mut self) {
        self.pausing = true;
        self.paused_state = None;
        self.wake_reader();
    }

    fn wake_reader(&mut self) {
        if let Some(waker) = self.read_waker.take() {
            waker.wake();
        }
    }

    fn stdout(&mut self, bytes: &[u8]) {
        let logs = &mut self.logs;
        let mut parsed = Vec::new();
        self.parser
            .feed(bytes, &mut |text| logs.push(text), &mut parsed);
        // At most one message: the parser closes after each (see `broken`).
        for message in parsed {
            if message.is_terminal() {
                // The script is over as far as the guest is concerned: its next
                // read of stdin waits for the next script, even before the host
                // has handled this message.
                self.phase = Phase::Idle;
            } else {
                self.tool_pending = true;
            }
            self.inbox.push_back(message);
        }
    }

    /// True when the guest is blocked reading stdin for its next script.
    pub(crate) fn waiting_for_script(&self) -> bool {
        self.phase == Phase::Idle
            && self.stdin.is_empty()
            && !self.pausing
            && self.read_waker.is_some()
    }

    fn read_would_wait(&self) -> bool {
        let idle = self.phase == Phase::Idle && !self.pausing;
        self.stdin.is_empty() && (idle || self.tool_pending)
    }
}

/// Locks the exchange. A panic while holding the lock leaves plain data behind, so
/// a poisoned lock is used as it is.
pub(crate) fn locked(exchange: &SharedExchange) -> MutexGuard<'_, Exchange> {
    exchange
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The guest's stdin.
pub(crate) struct GuestStdin(pub(crate) SharedExchange);

/// The guest's stdout (`parse: true`) or stderr (`parse: false`, all text).
pub(crate) struct GuestOutput {
    pub(crate) exchange: SharedExchange,
    pub(crate) parse: bool,
}

struct StdinReader(SharedExchange);
struct OutputWriter {
    exchange: SharedExchange,
    parse: bool,
}

impl IsTerminal for GuestStdin {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdinStream for GuestStdin {
    fn p2_stream(&self) -> Box<dyn InputStream> {
        Box::new(StdinReader(self.0.clone()))
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncRead + Send + Sync> {
        // Only the p2 stream is used (guests are WASI p1); an async reader is part
        // of the trait. It reads nothing.
        Box::new(tokio::io::empty())
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(OutputWriter {
            exchange: self.exchange.clone(),
            parse: self.parse,
        })
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(tokio::io::sink())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for StdinReader {
    async fn ready(&mut self) {
        std::future::poll_fn(|cx| {
            let mut exchange = locked(&self.0);
            if exchange.read_would_wait() {
                exchange.read_waker = Some(cx.waker().clone());
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
        .await
    }
}

impl InputStream for StdinReader {
    fn read(&mut self, size: usize) -> StreamResult<Bytes> {
        let mut exchange = locked(&self.0);
        if exchange.stdin.is_empty() {
            return if exchange.read_would_wait() {
                Ok(Bytes::new())
            } else {
                Err(StreamError::Closed)
            };
        }
        let n = size.min(exchange.stdin.len());
        let taken: Vec<u8> = exchange.stdin.drain(..n).collect();
        Ok(Bytes::from(taken))
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for OutputWriter {
    async fn ready(&mut self) {}
}

impl OutputStream for OutputWriter {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        let mut exchange = locked(&self.exchange);
        if self.parse {
            exchange.stdout(&bytes);
        } else {
            exchange.logs.push(&String::from_utf8_lossy(&bytes));
        }
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(1 << 20)
    }
}
