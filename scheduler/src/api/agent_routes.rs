//! The agent routes: what `spillway agent` on each VM calls. They are apart from the user routes:
//! another prefix (`/v1/agent/`), another credential (an attempt's, never a user token; a user
//! token is refused here and an agent credential is refused on the user routes), no per-token rate
//! limit (a gang's agents share nothing with a user), and larger bodies (log batches).
//!
//! ```text
//! POST /v1/agent/jobs/{job}/attempts/{attempt}/register              → rank
//! GET  /v1/agent/jobs/{job}/attempts/{attempt}/ranks/{rank}/work     → the order (long poll: wait_ms)
//! POST /v1/agent/jobs/{job}/attempts/{attempt}/ranks/{rank}/logs     → stored (acknowledged once on disk)
//! POST /v1/agent/jobs/{job}/attempts/{attempt}/ranks/{rank}/heartbeat → what to do now
//! POST /v1/agent/jobs/{job}/attempts/{attempt}/ranks/{rank}/reports  → setup/run started, exits, notices
//! ```
//!
//! A missing, wrong or unknown credential is 401, checked before the path is even parsed; another
//! attempt's credential is 404 (as for an attempt that does not exist); an ended attempt's is 401.
//! Refusals are logged with the path or the attempt it names, never with the credential.

use std::time::Duration;

use axum::Extension;
use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::ApiState;
use super::error::{ApiError, ErrorBody, blocking};
use crate::agents::protocol::{Action, Heartbeat, LogAck, LogBatch, Registered, Registration, Report, WorkStatus};
use crate::agents::{AgentError, AgentService, AttemptRef};
use crate::model::{Attempt, FieldErrors};

/// Largest agent request body: a log batch of a few thousand long lines.
pub const MAX_AGENT_BODY: usize = 1024 * 1024;

/// The attempt named by the credential an agent presented, once its MAC checked out (set by
/// [`authenticate`]). The credential itself is not kept, so it cannot reach a log line.
#[derive(Debug, Clone)]
pub(crate) struct AgentCredential(AttemptRef);

impl From<AgentError> for ApiError {
    fn from(e: AgentError) -> Self {
        match e {
            AgentError::Unauthorized(m) => ApiError::unauthorized(m),
            AgentError::NotFound(m) => ApiError::not_found(m),
            AgentError::Conflict(m) => ApiError::conflict(m),
            AgentError::Invalid(errors) => ApiError::invalid(&errors),
            AgentError::Store(e) => ApiError::from(e),
        }
    }
}

/// Verifies the bearer credential before anything else looks at the request. Its MAC needs no
/// path, so a request without a valid credential is 401 whatever its path, query or body: a probe
/// learns nothing about which paths parse or which attempts exist. The handlers then check that
/// the credential's attempt is the one in the path and still active.
pub(crate) async fn authenticate(State(state): State<ApiState>, mut req: Request, next: Next) -> Response {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim())
        .filter(|t| !t.is_empty());
    // A server without agents has no key; no credential is valid there.
    let named = presented.and_then(|c| state.agents().and_then(|svc| svc.keys().verify(c)));
    let Some(named) = named else {
        let message = if presented.is_none() {
            "missing agent credential: send `Authorization: Bearer <credential>`"
        } else {
            tracing::warn!(path = %req.uri().path(), status = 401, reason = "unknown agent credential", "agent call refused");
            "unknown agent credential"
        };
        let mut resp = ApiError::unauthorized(message).into_response();
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return resp;
    };
    req.extensions_mut().insert(AgentCredential(named));
    next.run(req).await
}

fn service(state: &ApiState) -> Result<AgentService, ApiError> {
    state.agents().cloned().ok_or_else(|| ApiError::not_found("this server runs no node agents"))
}

/// Checks the credential against the attempt in the path, off the async threads.
async fn attempt(state: &ApiState, cred: &AgentCredential, job: &str, attempt: u32) -> Result<Attempt, ApiError> {
    let svc = service(state)?;
    let (named, j) = (cred.0.clone(), job.to_string());
    let out = blocking(move || svc.authorize_named(&named, &j, attempt).map_err(ApiError::from)).await;
    if let Err(e) = &out
        && (e.status == StatusCode::UNAUTHORIZED || e.status == StatusCode::NOT_FOUND)
    {
        tracing::warn!(job, attempt, status = e.status.as_u16(), reason = %e.message, "agent call refused");
    }
    out
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_field("body", "empty body: send a JSON object"));
    }
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| ApiError::bad_field("body", format!("malformed JSON: {e}")))?;
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let mut errs = FieldErrors::default();
        errs.push(if path == "." { String::new() } else { path }, e.into_inner().to_string());
        ApiError::invalid(&errs)
    })
}

async fn body(body: Body) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, MAX_AGENT_BODY).await.map_err(|_| ApiError::too_large(MAX_AGENT_BODY))
}

fn path2(p: Result<Path<(String, u32)>, PathRejection>) -> Result<(String, u32), ApiError> {
    p.map(|Path(v)| v).map_err(|e| ApiError::bad_field("path", e.body_text()))
}

fn path3(p: Result<Path<(String, u32, u32)>, PathRejection>) -> Result<(String, u32, u32), ApiError> {
    p.map(|Path(v)| v).map_err(|e| ApiError::bad_field("path", e.body_text()))
}

/// Register this VM with its attempt; the answer is its rank.
#[utoipa::path(
    post, path = "/v1/agent/jobs/{job}/attempts/{attempt}/register", tag = "agent",
    security(("agent_credential" = [])),
    params(("job" = String, Path, description = "Job id"), ("attempt" = u32, Path, description = "Attempt number")),
    request_body = Registration,
    responses(
        (status = 200, body = Registered),
        (status = 401, description = "A missing, wrong or ended attempt's credential", body = ErrorBody),
        (status = 404, description = "Not this credential's attempt", body = ErrorBody),
        (status = 409, description = "Every rank is held by a live VM", body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 503, body = ErrorBody),
    )
)]
pub(crate) async fn register(
    State(state): State<ApiState>,
    Extension(cred): Extension<AgentCredential>,
    p: Result<Path<(String, u32)>, PathRejection>,
    raw: Body,
) -> Result<Json<Registered>, ApiError> {
    let (job, n) = path2(p)?;
    let a = attempt(&state, &cred, &job, n).await?;
    let reg: Registration = parse(&body(raw).await?)?;
    let svc = service(&state)?;
    Ok(Json(blocking(move || svc.register(&a, reg).map_err(ApiError::from)).await?))
}

/// Query of `GET …/work`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct WorkQuery {
    /// Wait up to this long (ms, at most 25000) while the gang is still gathering.
    #[param(minimum = 0, maximum = 25000)]
    wait_ms: Option<u64>,
}

/// What this rank should run: the order once the whole gang has registered (long poll).
#[utoipa::path(
    get, path = "/v1/agent/jobs/{job}/attempts/{attempt}/ranks/{rank}/work", tag = "agent",
    security(("agent_credential" = [])),
    params(("job" = String, Path), ("attempt" = u32, Path), ("rank" = u32, Path), WorkQuery),
    responses((status = 200, body = WorkStatus), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 503, body = ErrorBody))
)]
pub(crate) async fn work(
    State(state): State<ApiState>,
    Extension(cred): Extension<AgentCredential>,
    p: Result<Path<(String, u32, u32)>, PathRejection>,
    q: Result<Query<WorkQuery>, QueryRejection>,
) -> Result<Json<WorkStatus>, ApiError> {
    let (job, n, rank) = path3(p)?;
    let a = attempt(&state, &cred, &job, n).await?;
    let q = q.map(|Query(v)| v).map_err(|e| ApiError::bad_field("query", e.body_text()))?;
    let svc = service(&state)?;
    let wait = Duration::from_millis(q.wait_ms.unwrap_or(0));
    Ok(Json(svc.work(&a, rank, wait).await?))
}

/// Store a batch of this rank's output; answered once on disk.
#[utoipa::path(
    post, path = "/v1/agent/jobs/{job}/attempts/{attempt}/ranks/{rank}/logs", tag = "agent",
    security(("agent_credential" = [])),
    params(("job" = String, Path), ("attempt" = u32, Path), ("rank" = u32, Path)),
    request_body = LogBatch,
    responses((status = 200, body = LogAck), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 413, body = ErrorBody), (status = 422, body = ErrorBody), (status = 503, body = ErrorBody))
)]
pub(crate) async fn logs(
    State(state): State<ApiState>,
    Extension(cred): Extension<AgentCredential>,
    p: Result<Path<(String, u32, u32)>, PathRejection>,
    raw: Body,
) -> Result<Json<LogAck>, ApiError> {
    let (job, n, rank) = path3(p)?;
    let a = attempt(&state, &cred, &job, n).await?;
    let batch: LogBatch = parse(&body(raw).await?)?;
    let svc = service(&state)?;
    Ok(Json(blocking(move || svc.ingest_logs(&a, rank, batch).map_err(ApiError::from)).await?))
}

/// This rank is alive: its phase and GPU samples; the answer is what it should do now.
#[utoipa::path(
    post, path = "/v1/agent/jobs/{job}/attempts/{attempt}/ranks/{rank}/heartbeat", tag = "agent",
    security(("agent_credential" = [])),
    params(("job" = String, Path), ("attempt" = u32, Path), ("rank" = u32, Path)),
    request_body = Heartbeat,
    responses((status = 200, body = Action), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 422, body = ErrorBody), (status = 503, body = ErrorBody))
)]
pub(crate) async fn heartbeat(
    State(state): State<ApiState>,
    Extension(cred): Extension<AgentCredential>,
    p: Result<Path<(String, u32, u32)>, PathRejection>,
    raw: Body,
) -> Result<Json<Action>, ApiError> {
    let (job, n, rank) = path3(p)?;
    let a = attempt(&state, &cred, &job, n).await?;
    let hb: Heartbeat = parse(&body(raw).await?)?;
    let svc = service(&state)?;
    Ok(Json(blocking(move || svc.heartbeat(&a, rank, hb).map_err(ApiError::from)).await?))
}

/// Something happened on this rank: setup or run started, a script exited, a preemption notice.
#[utoipa::path(
    post, path = "/v1/agent/jobs/{job}/attempts/{attempt}/ranks/{rank}/reports", tag = "agent",
    security(("agent_credential" = [])),
    params(("job" = String, Path), ("attempt" = u32, Path), ("rank" = u32, Path)),
    request_body = Report,
    responses((status = 204, description = "Recorded"), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 422, body = ErrorBody), (status = 503, body = ErrorBody))
)]
pub(crate) async fn reports(
    State(state): State<ApiState>,
    Extension(cred): Extension<AgentCredential>,
    p: Result<Path<(String, u32, u32)>, PathRejection>,
    raw: Body,
) -> Result<Response, ApiError> {
    let (job, n, rank) = path3(p)?;
    let a = attempt(&state, &cred, &job, n).await?;
    let report: Report = parse(&body(raw).await?)?;
    let svc = service(&state)?;
    blocking(move || svc.report(&a, rank, report).map_err(ApiError::from)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The agent routes, documented apart from the user routes.
pub(crate) fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(register))
        .routes(routes!(work))
        .routes(routes!(logs))
        .routes(routes!(heartbeat))
        .routes(routes!(reports))
}
