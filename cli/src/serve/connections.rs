//! Serving HTTP connections within bounds a client cannot stretch: how many are
//! open at once, how long a request's headers and its body may take to arrive.
//! `codeact serve` and `codeact mcp --listen` both serve their routes through
//! [`serve`] here.
//!
//! `axum::serve` waits as long as a client likes for the rest of a request, and
//! accepts every connection: clients that open connections and send half a
//! request each hold a file descriptor until the process has none left, before
//! any token is looked at. Here each connection is HTTP/1 on hyper with a header
//! read timeout, each request body is read under a deadline, and at most
//! [`ConnectionLimits::max_connections`] connections are accepted at once; the
//! ones past that wait in the kernel's listen queue, holding no descriptor of
//! this process, until one closes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Default cap on connections served at once: 512, half the usual soft limit of
/// 1,024 open files, leaving the rest to the store, tools and guests.
pub(crate) const DEFAULT_MAX_CONNECTIONS: u32 = 512;
/// Default time a client may take to send a request's headers: 10 s.
pub(crate) const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time a client may take to send a request's body: 30 s.
pub(crate) const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long an accept that failed for want of descriptors (`EMFILE`, `ENFILE`)
/// waits before the next: trying again at once would spin while nothing closes.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(200);

/// What one server allows its clients' connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnectionLimits {
    /// The most connections served at once. Past it the server accepts no more
    /// until one closes: new ones wait in the kernel's listen queue (its
    /// backlog, 1,024 on tokio), costing this process no descriptor. An open
    /// event stream holds its connection for as long as it is open. Default:
    /// [`DEFAULT_MAX_CONNECTIONS`] (512).
    pub max_connections: u32,
    /// How long a client may take to send a request's headers, counted from when
    /// the connection opens or its previous response ended, so it is also how
    /// long an idle keep-alive connection stays open. Past it the connection is
    /// closed without an answer. Default: [`DEFAULT_HEADER_TIMEOUT`] (10 s).
    pub header_timeout: Duration,
    /// How long a client may take to send a request's body, counted from the end
    /// of its headers, however steadily the bytes trickle in. Past it the request
    /// is answered 408 and the connection closed. Default:
    /// [`DEFAULT_BODY_TIMEOUT`] (30 s).
    pub body_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
        }
    }
}

/// Serves `router` on `listener` within `limits` until `stop` is cancelled;
/// then accepts nothing more, lets each connection finish the request it is on
/// (an idle one closes at once), and returns when all have closed. Accept
/// errors are logged and never end the loop.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    stop: CancellationToken,
) {
    let router = router.layer(axum::middleware::from_fn_with_state(
        limits.body_timeout,
        read_body_within,
    ));
    let max = limits.max_connections.max(1);
    let open = Arc::new(Semaphore::new(max as usize));
    loop {
        // A place first, then the connection: at the cap nothing is accepted.
        let place = tokio::select! {
            place = Arc::clone(&open).acquire_owned() => place,
            () = stop.cancelled() => break,
        };
        let Ok(place) = place else { break };
        let stream = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.cancelled() => break,
        };
        let stream = match stream {
            Ok((stream, _)) => stream,
            Err(e) => {
                if !is_connection_error(&e) {
                    tracing::error!("cannot accept a connection: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
                continue;
            }
        };
        let router = router.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            serve_connection(stream, router, limits.header_timeout, stop).await;
            drop(place);
        });
    }
    drop(listener);
    // Every connection holds a place until it closes: all of them back means
    // all closed.
    let _ = open.acquire_many(max).await;
}

/// One connection, HTTP/1 with keep-alive, until it closes or, after `stop`,
/// its request in progress is answered.
async fn serve_connection(
    stream: TcpStream,
    router: Router,
    header_timeout: Duration,
    stop: CancellationToken,
) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let connection =
        builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(router));
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        served = connection.as_mut() => {
            if let Err(e) = served {
                tracing::debug!("connection ended: {e}");
            }
            return;
        }
        () = stop.cancelled() => {}
    }
    connection.as_mut().graceful_shutdown();
    if let Err(e) = connection.await {
        tracing::debug!("connection ended: {e}");
    }
}

/// Errors of one connection that went away before it was accepted: the next
/// accept is fine.
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

/// Gives the request's body until `timeout` from now to arrive. A handler
/// reading it past then gets an error; whatever it answers, the client gets a
/// 408 and the connection is closed (hyper reads no further request from it).
async fn read_body_within(
    State(timeout): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    let expired = Arc::new(AtomicBool::new(false));
    let request = request.map(|body| {
        Body::new(DeadlineBody {
            body,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            timeout,
            expired: Arc::clone(&expired),
        })
    });
    let response = next.run(request).await;
    if !expired.load(Ordering::Acquire) {
        return response;
    }
    let message = format!(
        "the request body did not arrive within {} ms",
        timeout.as_millis()
    );
    let mut response = (
        StatusCode::REQUEST_TIMEOUT,
        axum::Json(serde_json::json!({ "error": message })),
    )
        .into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A request body that fails once its deadline passes while it is still
/// arriving; a body that has all arrived is never cut.
struct DeadlineBody {
    body: Body,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
    expired: Arc<AtomicBool>,
}

/// The error a [`DeadlineBody`] past its deadline yields.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
struct BodyTimedOut(Duration);

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            this.expired.store(true, Ordering::Release);
            return Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut(this.timeout)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
