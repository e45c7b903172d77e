//! HTTP plumbing shared by the clients: bounded retries with backoff that honour
//! `Retry-After`, and error bodies cut to a readable size.

use std::time::Duration;

use eventsource_stream::EventStreamError;
use reqwest::{RequestBuilder, Response, StatusCode};

use super::ModelError;
use super::sse::{Flow, StreamFault, StreamFold};
use crate::chat::{ModelResponse, StreamEvent};

/// How a client retries: 429, 5xx, timeouts and refused connections are retried;
/// other 4xx are not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt. Default: 3.
    pub max_retries: u32,
    /// Delay before the first retry, doubled for each next one. Default: 500 ms.
    pub base_delay: Duration,
    /// Longest wait between attempts, `Retry-After` included. Default: 30 s.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0-based), unless the server said.
    fn backoff(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry.min(16)).unwrap_or(u32::MAX);
        self.base_delay.saturating_mul(factor).min(self.max_delay)
    }
}

/// What went wrong with one attempt, and whether another might succeed.
pub(crate) enum AttemptError {
    Retryable {
        reason: String,
        retry_after: Option<Duration>,
    },
    Final(ModelError),
}

/// Counts retries and waits between them, as a policy allows.
pub(crate) struct Retrier {
    provider: &'static str,
    policy: RetryPolicy,
    retries: u32,
}

impl Retrier {
    pub fn new(provider: &'static str, policy: RetryPolicy) -> Self {
        Self {
            provider,
            policy,
            retries: 0,
        }
    }

    /// Handles a failed attempt: waits and returns `Ok` when another attempt may be
    /// made, or returns the error that ends the call.
    pub async fn after(&mut self, failure: AttemptError) -> Result<(), ModelError> {
        let (reason, retry_after) = match failure {
            AttemptError::Final(error) => return Err(error),
            AttemptError::Retryable {
                reason,
                retry_after,
            } => (reason, retry_after),
        };
        if self.retries >= self.policy.max_retries {
            return Err(ModelError::Unavailable {
                provider: self.provider,
                attempts: self.retries + 1,
                last: reason,
            });
        }
        let wait = retry_after
            .unwrap_or_else(|| jittered(self.policy.backoff(self.retries), random_fraction()))
            .min(self.policy.max_delay);
        tracing::warn!(provider = self.provider, %reason, wait_ms = wait.as_millis() as u64, "model call failed; retrying");
        tokio::time::sleep(wait).await;
        self.retries += 1;
        Ok(())
    }
}

/// `backoff` scaled into its upper half by `fraction` (0 to 1): many sessions that
/// failed together then retry spread out instead of in lockstep, and none waits
/// less than half the policy's delay.
fn jittered(backoff: Duration, fraction: f64) -> Duration {
    backoff.mul_f64(0.5 + 0.5 * fraction.clamp(0.0, 1.0))
}

/// A number in 0..1 that differs between calls and processes (std's per-map
/// random hasher keys), for jitter; not for anything secret.
fn random_fraction() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0);
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// Runs `once` until it succeeds, fails for good, or `policy` runs out of retries.
pub(crate) async fn with_retries<T, F, Fut>(
    provider: &'static str,
    policy: RetryPolicy,
    mut once: F,
) -> Result<T, ModelError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, AttemptError>>,
{
    let mut retrier = Retrier::new(provider, policy);
    loop {
        match once().await {
            Ok(value) => return Ok(value),
            Err(failure) => retrier.after(failure).await?,
        }
    }
}

/// Sends one request within `timeout` (until the response headers arrive); a
/// success status returns the response with its body unread.
pub(crate) async fn attempt(
    provider: &'static str,
    request: RequestBuilder,
    timeout: Duration,
) -> Result<Response, AttemptError> {
    let response = match tokio::time::timeout(timeout, request.send()).await {
        Ok(result) => result.map_err(|e| transport_error(&e))?,
        Err(_) => {
            return Err(AttemptError::Retryable {
                reason: format!("no response within {} ms", timeout.as_millis()),
                retry_after: None,
            });
        }
    };
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = retry_after(&response);
    let body = response.text().await.unwrap_or_default();
    let message = error_message(&body);
    if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
        return Err(AttemptError::Retryable {
            reason: format!("{status}: {message}"),
            retry_after,
        });
    }
    Err(AttemptError::Final(ModelError::Rejected {
        provider,
        status: status.as_u16(),
        message: if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            format!("the API key was not accepted: {message}")
        } else {
            message
        },
    }))
}

/// What one reply may cost once its headers arrived, streamed or whole: the same
/// bounds for both, so streaming is not a way around them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReplyBounds {
    /// Bytes of body read at most (before any parsing).
    pub max_bytes: usize,
    /// Longest silence between chunks (or events).
    pub idle: Duration,
    /// Longest time reading the whole reply.
    pub total: Duration,
}

/// Which bound a wait for the next piece of a reply runs into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Late {
    /// Silence longer than the idle timeout.
    Idle,
    /// The whole reply's time ran out.
    Total,
}

impl ReplyBounds {
    /// The wait for the next piece: the idle timeout, or less when the total
    /// deadline is nearer, and which bound that is.
    fn next_wait(&self, deadline: tokio::time::Instant) -> (Duration, Late) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left < self.idle {
            (left, Late::Total)
        } else {
            (self.idle, Late::Idle)
        }
    }

    fn too_late(&self, late: Late) -> String {
        match late {
            Late::Idle => format!("no data for {} ms", self.idle.as_millis()),
            Late::Total => format!(
                "the reply took longer than {} ms in all",
                self.total.as_millis()
            ),
        }
    }

    fn too_large(&self) -> String {
        format!("the reply is larger than {} bytes", self.max_bytes)
    }
}

/// Reads a whole body within `bounds`. Silence longer than the idle timeout
/// between chunks is a failure worth retrying: a server that sends its headers and
/// then nothing would otherwise hang the call (the request timeout ends when the
/// headers arrive); so is a body over the byte cap or the total time.
pub(crate) async fn read_body(
    response: Response,
    bounds: ReplyBounds,
) -> Result<Vec<u8>, AttemptError> {
    use futures_util::StreamExt;
    let deadline = tokio::time::Instant::now() + bounds.total;
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    loop {
        let (wait, late) = bounds.next_wait(deadline);
        let chunk = match tokio::time::timeout(wait, chunks.next()).await {
            Err(_) => {
                let reason = match late {
                    Late::Idle => format!("the reply's body stalled: {}", bounds.too_late(late)),
                    Late::Total => bounds.too_late(late),
                };
                return Err(AttemptError::Retryable {
                    reason,
                    retry_after: None,
                });
            }
            Ok(None) => break,
            Ok(Some(chunk)) => chunk,
        };
        let chunk = chunk.map_err(|e| transport_error(&e))?;
        if body.len() + chunk.len() > bounds.max_bytes {
            return Err(AttemptError::Retryable {
                reason: bounds.too_large(),
                retry_after: None,
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A reply that cannot be understood: retrying will not help.
pub(crate) fn malformed(provider: &'static str, message: String) -> AttemptError {
    AttemptError::Final(ModelError::Malformed { provider, message })
}

/// A stream that failed part way. Before any text reached the caller the whole
/// call can be retried; after, a retry would repeat that text, so it is final.
pub(crate) fn stream_broke(provider: &'static str, emitted: bool, reason: String) -> AttemptError {
    if emitted {
        malformed(provider, reason)
    } else {
        AttemptError::Retryable {
            reason,
            retry_after: None,
        }
    }
}

/// Why a streamed body stopped early: the transport broke, or the reply passed
/// its byte cap.
#[derive(Debug)]
enum WireFault {
    Transport(reqwest::Error),
    TooLarge(String),
}

impl std::fmt::Display for WireFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireFault::Transport(error) => write!(f, "{error}"),
            WireFault::TooLarge(reason) => f.write_str(reason),
        }
    }
}

/// Reads a streamed reply's events off `response` into `fold`, within `bounds`:
/// silence longer than the idle timeout, more bytes than the cap (counted off the
/// wire, before the event parser buffers them, so one endless event is caught
/// too) or more time than the total all end it, so a stalled or endless server
/// cannot hang a run or fill the host's memory.
pub(crate) async fn fold_stream<F: StreamFold + Send>(
    provider: &'static str,
    response: reqwest::Response,
    bounds: ReplyBounds,
    mut fold: F,
    on_event: &mut (dyn FnMut(StreamEvent) + Send),
) -> Result<ModelResponse, AttemptError> {
    use futures_util::StreamExt;
    let deadline = tokio::time::Instant::now() + bounds.total;
    let mut read = 0usize;
    let capped = response.bytes_stream().map(move |chunk| match chunk {
        Err(error) => Err(WireFault::Transport(error)),
        Ok(chunk) => {
            read = read.saturating_add(chunk.len());
            if read > bounds.max_bytes {
                Err(WireFault::TooLarge(bounds.too_large()))
            } else {
                Ok(chunk)
            }
        }
    });
    let mut events = std::pin::pin!(super::sse::sse_events(capped));
    let fault = |emitted: bool, fault: StreamFault| match fault {
        StreamFault::Malformed(reason) => malformed(provider, reason),
        StreamFault::Broken(reason) => stream_broke(provider, emitted, reason),
    };
    loop {
        let (wait, late) = bounds.next_wait(deadline);
        let event = match tokio::time::timeout(wait, events.next()).await {
            Err(_) => {
                return Err(stream_broke(
                    provider,
                    fold.emitted(),
                    bounds.too_late(late),
                ));
            }
            Ok(None) => break,
            Ok(Some(Err(EventStreamError::Transport(WireFault::TooLarge(reason))))) => {
                return Err(stream_broke(provider, fold.emitted(), reason));
            }
            Ok(Some(Err(e))) => {
                let reason = format!("the stream broke: {e}");
                return Err(stream_broke(provider, fold.emitted(), reason));
            }
            Ok(Some(Ok(event))) => event,
        };
        match fold.event(&event.event, &event.data, on_event) {
            Ok(Flow::More) => {}
            Ok(Flow::Complete) => break,
            Err(e) => return Err(fault(fold.emitted(), e)),
        }
    }
    let emitted = fold.emitted();
    fold.finish(on_event).map_err(|e| fault(emitted, e))
}

/// Checks a base URL and builds the HTTP client every call of a provider shares.
/// `official` is the provider's own endpoint, which needs a key (`key_hint` says
/// how to give one).
pub(crate) fn client(
    provider: &'static str,
    base_url: &str,
    official: &str,
    has_key: bool,
    key_hint: &str,
) -> Result<(String, reqwest::Client), ModelError> {
    let config = |message: String| ModelError::Config { provider, message };
    let base = base_url.trim_end_matches('/').to_string();
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(config(format!(
            "base URL '{base}' must start with http:// or https://"
        )));
    }
    if !has_key && base == official {
        return Err(config(key_hint.to_string()));
    }
    // The roots are both the bundled Mozilla set and the system's own store
    // (reqwest's rustls-tls-native-roots), so a corporate proxy's CA installed on
    // the machine is trusted without a flag.
    let http = reqwest::Client::builder()
        .user_agent(concat!("codeact/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| config(format!("cannot build an HTTP client: {e}")))?;
    Ok((base, http))
}

/// A transport failure: always worth another try (refused, reset, timed out).
pub(crate) fn transport_error(error: &reqwest::Error) -> AttemptError {
    let kind = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "could not connect"
    } else {
        "transport error"
    };
    AttemptError::Retryable {
        reason: format!("{kind}: {error}"),
        retry_after: None,
    }
}

/// `Retry-After` as seconds or an HTTP date.
fn retry_after(response: &Response) -> Option<Duration> {
    let value = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    )
}

/// The `error.message` of a JSON error body, or the body itself, cut to 500 chars.
pub(crate) fn error_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.get("message"))
                .or_else(|| v.get("error"))
        })
        .and_then(|m| m.as_str().map(str::to_string))
        .unwrap_or_else(|| body.trim().to_string());
    let message = if message.is_empty() {
        "(empty body)".to_string()
    } else {
        message
    };
    codeact_runtime::text::shorten(&message, 500)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_keeps_a_retry_between_half_and_all_of_the_backoff() {
        let backoff = Duration::from_secs(2);
        assert_eq!(jittered(backoff, 0.0), Duration::from_secs(1));
        assert_eq!(jittered(backoff, 1.0), backoff);
        let spread: std::collections::HashSet<u128> = (0..20)
            .map(|_| jittered(backoff, random_fraction()).as_micros())
            .collect();
        assert!(spread.len() > 1, "twenty retries at one moment: {spread:?}");
        assert!(spread.iter().all(|us| (1_000_000..=2_000_000).contains(us)));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.backoff(0), Duration::from_millis(500));
        assert_eq!(policy.backoff(2), Duration::from_secs(2));
        assert_eq!(policy.backoff(40), Duration::from_secs(30));
    }

    #[test]
    fn error_messages_come_from_json_bodies_when_there_is_one() {
        assert_eq!(
            error_message(r#"{"error":{"message":"bad key"}}"#),
            "bad key"
        );
        assert_eq!(error_message("upstream down"), "upstream down");
        assert_eq!(error_message(""), "(empty body)");
        assert!(error_message(&"x".repeat(10_000)).chars().count() <= 501);
    }
}
