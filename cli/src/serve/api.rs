//! The HTTP API: routes, request bodies, and errors as JSON (`{"error": "…"}`).
//!
//! Every route but `/healthz`, `/readyz` and the page's files needs a bearer token ([`auth`](super::auth)). A
//! client sees only its own runs: another tenant's run is a 404, the same answer
//! as a run that does not exist, unless the token is an admin one. Bodies are read
//! up to the configured cap (413 past it) and parsed strictly: a field this API
//! does not know (`limits`, `tools`, `validator`…) is a 400 naming it, so a
//! client can never widen what the server's config grants.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::config::Caller;
use super::runs::{Job, OutputRequest, Runs, awaited_call};
use super::store::{Created, Status, StoreError, StoredRun};

/// Runs a page of `GET /runs` holds without `limit`.
const DEFAULT_PAGE: u32 = 20;
/// The most a page of `GET /runs` holds, whatever `limit` asks.
const MAX_PAGE: u32 = 100;
/// Characters of a task a run's summary in a list shows.
const TASK_PREVIEW_CHARS: usize = 200;
/// What a 429 tells a client to wait before trying again (`Retry-After`): 5 s,
/// about what a short run takes, so a retry has a fair chance.
const RETRY_AFTER_SECONDS: u32 = 5;

/// Records every routed request in `http.server.request.duration`, by its
/// route pattern (`/runs/{id}`, not the id), method and status; the time is to
/// the response's head (an event stream's first byte).
pub(super) async fn measured(
    State(runs): State<Arc<Runs>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = request.method().as_str().to_string();
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    runs.metrics.request(
        &route,
        &method,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

/// An error answered as `{"error": message}` with its status.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, message)
    }

    /// The one answer for a run that does not exist, is not an id, or is another
    /// tenant's: nothing tells them apart.
    pub(crate) fn no_run() -> Self {
        Self::new(StatusCode::NOT_FOUND, "no such run")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(json!({ "error": self.message }))).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        tracing::error!("{error}");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "the store failed")
    }
}

impl From<PathRejection> for ApiError {
    fn from(_: PathRejection) -> Self {
        Self::no_run()
    }
}

/// Whether `id` has the shape of a run id (`run_` and 32 lowercase hex digits),
/// checked before any query.
pub(crate) fn is_run_id(id: &str) -> bool {
    id.strip_prefix("run_").is_some_and(|hex| {
        hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// A new run id: 128 random bits from the OS.
fn new_run_id() -> Result<String, ApiError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| {
        tracing::error!("no randomness for a run id: {e}");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "cannot make a run id")
    })?;
    Ok(format!(
        "run_{}",
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    ))
}

/// The run `id` if `caller` may see it; otherwise the same 404 as no run.
pub(crate) async fn visible_run(
    runs: &Runs,
    caller: &Caller,
    id: &str,
) -> Result<StoredRun, ApiError> {
    if !is_run_id(id) {
        return Err(ApiError::no_run());
    }
    match runs.store.get(id).await? {
        Some(run) if caller.admin || run.tenant == caller.name => Ok(run),
        _ => Err(ApiError::no_run()),
    }
}

/// How much of a body past the cap is read and dropped before the 413: 1 MiB.
const DRAIN_PAST_CAP: usize = 1 << 20;

/// Reads the body up to the configured cap and parses it as `T`, strictly.
async fn read_json<T: DeserializeOwned>(
    runs: &Runs,
    headers: &HeaderMap,
    body: Body,
) -> Result<T, ApiError> {
    let cap = runs.config.max_body_bytes;
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than this server takes ({cap} bytes)"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > cap.saturating_add(DRAIN_PAST_CAP) as u64) {
        return Err(too_large());
    }
    // A body past the cap is read on, and dropped, up to DRAIN_PAST_CAP more
    // bytes before the 413: a client still sending it would otherwise find the
    // connection reset under its write and never read the answer.
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    let mut seen = 0usize;
    while let Some(chunk) = futures_util::StreamExt::next(&mut stream).await {
        let chunk = chunk.map_err(|_| too_large())?;
        seen = seen.saturating_add(chunk.len());
        if seen > cap.saturating_add(DRAIN_PAST_CAP) {
            return Err(too_large());
        }
        if seen <= cap {
            bytes.extend_from_slice(&chunk);
        }
    }
    if seen > cap {
        return Err(too_large());
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("the body is not a valid request: {e}")))
}

/// A task or message within the configured length, not blank.
fn check_text(runs: &Runs, what: &str, text: &str) -> Result<(), ApiError> {
    if text.trim().is_empty() {
        return Err(ApiError::bad_request(format!("the {what} is empty")));
    }
    let cap = runs.config.max_task_chars;
    let length = text.chars().count();
    if length > cap {
        return Err(ApiError::bad_request(format!(
            "the {what} is {length} characters; this server takes at most {cap}"
        )));
    }
    Ok(())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateRun {
    /// A configured agent's name.
    agent: String,
    task: String,
    #[serde(default)]
    output: Option<OutputRequest>,
    /// A conversation: `POST /runs/{id}/messages` continues it.
    #[serde(default)]
    chat: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Decision {
    approve: bool,
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NextMessage {
    message: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    limit: Option<u32>,
    after: Option<String>,
}

/// Liveness: the process answers and its store does.
pub(super) async fn healthz(State(runs): State<Arc<Runs>>) -> Result<Json<Value>, ApiError> {
    runs.store.ping().await?;
    Ok(Json(json!({ "ok": true })))
}

/// Readiness, for a load balancer: the store answers (a front end whose
/// database is unreachable takes no runs); 503 otherwise.
pub(super) async fn readyz(State(runs): State<Arc<Runs>>) -> Response {
    match runs.store.ping().await {
        Ok(()) => Json(json!({ "ready": true })).into_response(),
        Err(e) => {
            tracing::warn!("not ready: {e}");
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the store does not answer")
                .into_response()
        }
    }
}

pub(super) async fn list_agents(State(runs): State<Arc<Runs>>, _caller: Caller) -> Json<Value> {
    let agents: Vec<Value> = runs
        .config
        .agents
        .iter()
        .map(|(name, offered)| {
            json!({
                "name": name,
                "description": offered.description,
                "team": !offered.single,
                // What a single agent can do that a team run cannot here.
                "chat": offered.single,
                "approvals": offered.single,
            })
        })
        .collect();
    Json(json!({ "agents": agents }))
}

pub(super) async fn create_run(
    State(runs): State<Arc<Runs>>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let request: CreateRun = read_json(&runs, &headers, body).await?;
    check_text(&runs, "task", &request.task)?;
    let Some(offered) = runs.config.agents.get(&request.agent) else {
        return Err(ApiError::bad_request(format!(
            "no agent '{}' on this server; it has: {}",
            codeact_runtime::text::shorten(&request.agent, 60),
            runs.config
                .agents
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    if request.chat && !offered.single {
        return Err(ApiError::bad_request(format!(
            "agent '{}' is a team, which cannot hold a conversation here",
            request.agent
        )));
    }
    let output = match request.output {
        Some(output) => {
            // Compiled now, so a broken schema is this request's error, not the run's.
            output
                .clone()
                .into_spec()
                .load()
                .map_err(|e| ApiError::bad_request(format!("output: {e}")))?;
            Some(serde_json::to_value(output).unwrap_or(Value::Null))
        }
        None => None,
    };
    let id = new_run_id()?;
    let created = runs
        .store
        .create(
            &id,
            &caller.name,
            &request.agent,
            &request.task,
            request.chat,
            output.as_ref(),
            runs.config.queue,
        )
        .await?;
    let run = match created {
        Created::Run(run) => *run,
        Created::Full { tenant, limit } => {
            let whose = if tenant {
                "of your token"
            } else {
                "on this server"
            };
            let mut response = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "{limit} runs {whose} are queued or running, the most allowed: \
                     retry after {RETRY_AFTER_SECONDS} s"
                ),
            )
            .into_response();
            response.headers_mut().insert(
                header::RETRY_AFTER,
                header::HeaderValue::from(RETRY_AFTER_SECONDS),
            );
            return Ok(response);
        }
    };
    if !runs.store.is_shared() {
        runs.spawn(run.clone(), Job::Start, false);
    }
    Ok((StatusCode::CREATED, Json(full(&run))).into_response())
}

pub(super) async fn get_run(
    State(runs): State<Arc<Runs>>,
    caller: Caller,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let Path(id) = path?;
    let run = visible_run(&runs, &caller, &id).await?;
    Ok(Json(full(&run)))
}

pub(super) async fn list_runs(
    State(runs): State<Arc<Runs>>,
    caller: Caller,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) =
        query.map_err(|e| ApiError::bad_request(format!("the query is not valid: {e}")))?;
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit must be 1 to {MAX_PAGE}"
        )));
    }
    if let Some(after) = &query.after {
        visible_run(&runs, &caller, after)
            .await
            .map_err(|_| ApiError::bad_request("after= names no run you can see"))?;
    }
    let tenant = (!caller.admin).then_some(caller.name.as_str());
    let page = runs
        .store
        .list(tenant, query.after.as_deref(), limit)
        .await?;
    let next = (page.len() == limit as usize)
        .then(|| page.last().map(|run| run.id.clone()))
        .flatten();
    Ok(Json(json!({
        "runs": page.iter().map(summary).collect::<Vec<_>>(),
        "next": next,
    })))
}

pub(super) async fn cancel_run(
    State(runs): State<Arc<Runs>>,
    caller: Caller,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = path?;
    let run = visible_run(&runs, &caller, &id).await?;
    // Worked on here, or (PostgreSQL) by a worker, which hears of it at once
    // and in any case at its next heartbeat.
    if runs.cancel(&id) || (runs.store.is_shared() && runs.store.request_cancel(&id).await?) {
        return Ok((
            StatusCode::ACCEPTED,
            Json(json!({ "id": id, "status": "cancelling" })),
        )
            .into_response());
    }
    let waiting = [
        Status::Queued,
        Status::AwaitingApproval,
        Status::AwaitingMessage,
    ];
    if runs
        .store
        .set_status(&id, &waiting, Status::Cancelled)
        .await?
    {
        runs.touched(&id);
        return Ok(Json(json!({ "id": id, "status": "cancelled" })).into_response());
    }
    Err(ApiError::conflict(format!(
        "the run is {}; only a running or waiting run can be cancelled",
        run.status.as_str()
    )))
}

pub(super) async fn decide(
    State(runs): State<Arc<Runs>>,
    caller: Caller,
    path: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let Path((id, call)) = path?;
    let run = visible_run(&runs, &caller, &id).await?;
    let decision: Decision = read_json(&runs, &headers, body).await?;
    if let Some(reason) = &decision.reason {
        check_text(&runs, "reason", reason)?;
    }
    let awaited =
        awaited_call(run.outcome.as_ref()).filter(|_| run.status == Status::AwaitingApproval);
    let Some((awaited, tool, args)) = awaited else {
        return Err(ApiError::conflict(format!(
            "the run is {}, not waiting for an approval",
            run.status.as_str()
        )));
    };
    if awaited != call {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("the run waits for a decision on call '{awaited}', not on this one"),
        ));
    }
    let job = Job::Decide {
        tool,
        args,
        approved: decision.approve,
        reason: decision.reason,
        by: format!("{} (codeact serve)", caller.name),
    };
    if !runs.go_on(run, &[Status::AwaitingApproval], job).await? {
        return Err(ApiError::conflict(
            "the run was decided on or cancelled meanwhile",
        ));
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "id": id, "status": if runs.store.is_shared() { "queued" } else { "running" } })),
    )
        .into_response())
}

pub(super) async fn send_message(
    State(runs): State<Arc<Runs>>,
    caller: Caller,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let Path(id) = path?;
    let run = visible_run(&runs, &caller, &id).await?;
    let next: NextMessage = read_json(&runs, &headers, body).await?;
    check_text(&runs, "message", &next.message)?;
    if !run.chat {
        return Err(ApiError::conflict(
            "the run is not a conversation; create one with \"chat\": true",
        ));
    }
    let ready = [
        Status::AwaitingMessage,
        Status::Cancelled,
        Status::Failed,
        Status::Interrupted,
    ];
    let status = run.status;
    let job = Job::Message {
        message: next.message,
    };
    if !runs.go_on(run, &ready, job).await? {
        return Err(ApiError::conflict(format!(
            "the run is {}; send the next message once its turn has ended",
            status.as_str()
        )));
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "id": id, "status": if runs.store.is_shared() { "queued" } else { "running" } })),
    )
        .into_response())
}

/// A run in full, as `GET /runs/{id}` answers.
fn full(run: &StoredRun) -> Value {
    let mut value = serde_json::to_value(run).unwrap_or(Value::Null);
    if let (Some((call, tool, args)), Value::Object(fields)) =
        (awaited_call(run.outcome.as_ref()), &mut value)
        && run.status == Status::AwaitingApproval
    {
        fields.insert(
            "awaiting".into(),
            json!({ "call": call, "tool": tool, "args": args }),
        );
    }
    value
}

/// A run in a list: no outcome or output, the task cut short.
fn summary(run: &StoredRun) -> Value {
    let task: String = run.task.chars().take(TASK_PREVIEW_CHARS).collect();
    json!({
        "id": run.id,
        "tenant": run.tenant,
        "agent": run.agent,
        "task": task,
        "chat": run.chat,
        "status": run.status,
        "steps": run.steps,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
    })
}
