//! The route handlers. Each takes the caller (set by the auth middleware), checks its role and
//! tenant, runs store work off the async threads, and answers JSON or an [`ApiError`].

use std::sync::OnceLock;

use axum::Extension;
use axum::Json;
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::ApiState;
use super::auth::{ApiToken, Caller, Role, TokenError};
use super::error::{ApiError, ErrorBody, blocking};
use crate::jobs::JobDetail;
use crate::model::{Attempt, FieldErrors, Job, JobState};

/// Longest accepted `Idempotency-Key`.
const MAX_IDEMPOTENCY_KEY: usize = 200;

/// Largest event sequence number a client may send (`from`, `Last-Event-ID`): int64's maximum.
const MAX_SEQ: u64 = i64::MAX as u64;

/// Reads a request body up to the configured limit.
async fn read_body(state: &ApiState, headers: &HeaderMap, body: Body) -> Result<axum::body::Bytes, ApiError> {
    let limit = state.config().max_body_bytes;
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::too_large(limit));
    }
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let too_large = std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
        if too_large {
            ApiError::too_large(limit)
        } else {
            ApiError::bad_request(format!("cannot read the request body: {e}"))
        }
    })
}

/// Parses a body as JSON; malformed JSON is a 400 naming where it broke.
fn parse_json(bytes: &[u8]) -> Result<serde_json::Value, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_field("body", "empty body: send a JSON object"));
    }
    serde_json::from_slice(bytes).map_err(|e| ApiError::bad_field("body", format!("malformed JSON: {e}")))
}

fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(v)| v).map_err(|e| ApiError::bad_field("query", e.body_text()))
}

fn path_id(p: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    p.map(|Path(v)| v).map_err(|e| ApiError::bad_field("id", e.body_text()))
}

/// Loads a job the caller may see; another tenant's job is "not found", never "forbidden".
pub(crate) async fn visible_job(state: &ApiState, caller: &Caller, id: &str) -> Result<Job, ApiError> {
    let jobs = state.jobs().clone();
    let key = id.to_string();
    let job = blocking(move || jobs.get(&key).map_err(ApiError::from)).await?;
    match job {
        Some(j) if caller.sees_tenant(&j.spec.tenant) => Ok(j),
        _ => Err(ApiError::not_found(format!("no job {id}"))),
    }
}

fn require_writer(caller: &Caller, what: &str) -> Result<(), ApiError> {
    if caller.may_write_jobs() {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!(
            "a {} token cannot {what}; use a submitter or admin token",
            caller.role.as_str()
        )))
    }
}

fn require_admin(caller: &Caller) -> Result<(), ApiError> {
    if caller.is_admin() {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!(
            "only an admin token may manage tokens (this is a {} token)",
            caller.role.as_str()
        )))
    }
}

/// Submit a job spec (JSON). Answers 201 once the job is on disk; with an `Idempotency-Key`
/// already used for the same spec, 200 and the job the first request created.
#[utoipa::path(
    post, path = "/v1/jobs", tag = "jobs",
    request_body(content = crate::model::JobSpec, description = "A job spec (see the README's field table); unknown fields are errors"),
    params(("Idempotency-Key" = Option<String>, Header, nullable = false, pattern = "^[!-~]{1,200}$",
        description = "Makes a retried submission return the same job (1 to 200 printable ASCII characters)")),
    responses(
        (status = 201, description = "Accepted and durable", body = Object),
        (status = 200, description = "An earlier submission with this Idempotency-Key", body = Object),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 403, description = "The token may not submit", body = ErrorBody),
        (status = 409, description = "Idempotency-Key reused with a different spec", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 422, description = "Invalid spec; every problem names its field", body = ErrorBody),
        (status = 429, description = "Rate limited", body = ErrorBody),
        (status = 503, description = "Store unavailable; nothing was accepted", body = ErrorBody),
    )
)]
pub(crate) async fn submit_job(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    require_writer(&caller, "submit jobs")?;
    let key = match headers.get("idempotency-key") {
        None => None,
        Some(v) => {
            let k = v
                .to_str()
                .ok()
                .filter(|k| !k.is_empty() && k.len() <= MAX_IDEMPOTENCY_KEY && k.chars().all(|c| c.is_ascii_graphic()))
                .ok_or_else(|| {
                    ApiError::bad_field(
                        "Idempotency-Key",
                        format!("use 1 to {MAX_IDEMPOTENCY_KEY} printable ASCII characters"),
                    )
                })?;
            Some(k.to_string())
        }
    };
    let bytes = read_body(&state, &headers, body).await?;
    let value = parse_json(&bytes)?;
    if !value.is_object() {
        let mut e = FieldErrors::default();
        e.push("", "the body must be a JSON object (a job spec)");
        return Err(ApiError::invalid(&e));
    }
    let jobs = state.jobs().clone();
    let tenant = if caller.role == Role::Admin { None } else { caller.tenant.clone() };
    let submitted =
        blocking(move || jobs.submit_value(value, tenant.as_deref(), key.as_deref()).map_err(ApiError::from)).await?;
    let status = if submitted.created { StatusCode::CREATED } else { StatusCode::OK };
    if submitted.created {
        tracing::info!(job = %submitted.job.id, tenant = %submitted.job.spec.tenant, by = %caller.token_id, "job submitted");
    }
    let mut resp = (status, Json(&submitted.job)).into_response();
    if let Ok(loc) = HeaderValue::from_str(&format!("/v1/jobs/{}", submitted.job.id)) {
        resp.headers_mut().insert(header::LOCATION, loc);
    }
    Ok(resp)
}

/// Query of `GET /v1/jobs`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// Only jobs in this state (pending, provisioning, running, migrating, succeeded, failed, cancelled).
    #[param(pattern = "^(|pending|provisioning|running|migrating|succeeded|failed|cancelled)$")]
    state: Option<String>,
    /// Only this tenant's jobs.
    tenant: Option<String>,
    /// At most this many of the newest jobs (default 1000, at most 100000).
    #[param(minimum = 1, maximum = 100000)]
    limit: Option<usize>,
}

/// A page of jobs.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct JobList {
    /// The jobs, oldest first.
    #[schema(value_type = Vec<Object>)]
    pub jobs: Vec<Job>,
    /// How many jobs matched before `limit`.
    pub total: usize,
    /// True when older jobs were left out because of `limit`.
    pub truncated: bool,
}

/// List jobs, oldest first; a tenant-bound token sees only its tenant's.
#[utoipa::path(
    get, path = "/v1/jobs", tag = "jobs", params(ListQuery),
    responses((status = 200, body = JobList), (status = 400, body = ErrorBody))
)]
pub(crate) async fn list_jobs(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<JobList>, ApiError> {
    let q = query(q)?;
    let job_state = match q.state.as_deref() {
        None | Some("") => None,
        Some(s) => Some(s.parse::<JobState>().map_err(|e| ApiError::bad_field("state", e))?),
    };
    let limit = q.limit.unwrap_or(1000);
    if limit == 0 || limit > 100_000 {
        return Err(ApiError::bad_field("limit", "must be between 1 and 100000"));
    }
    let tenant = match (caller.tenant.clone(), q.tenant.filter(|t| !t.is_empty())) {
        (Some(own), Some(asked)) if own != asked => {
            return Ok(Json(JobList { jobs: Vec::new(), total: 0, truncated: false }));
        }
        (Some(own), _) => Some(own),
        (None, asked) => asked,
    };
    let jobs = state.jobs().clone();
    let (page, total) =
        blocking(move || jobs.newest(job_state, tenant.as_deref(), limit).map_err(ApiError::from)).await?;
    Ok(Json(JobList { jobs: page, total, truncated: total > limit }))
}

/// Everything about one job.
#[derive(Debug, Serialize)]
pub struct JobView {
    /// The job, its attempts and its events.
    #[serde(flatten)]
    pub detail: JobDetail,
    /// The attempts holding (or acquiring) cloud resources now: one for a gang, possibly several
    /// (in several regions) for splittable work.
    pub placements: Vec<Attempt>,
    /// Every rank of every attempt that ran work: host, IP, phase, exit code, last heartbeat, GPU
    /// utilisation (empty for capacity-only jobs).
    pub nodes: Vec<crate::agents::NodeView>,
}

/// One job with its placement, attempts, events, cost so far and, while pending, why.
#[utoipa::path(
    get, path = "/v1/jobs/{id}", tag = "jobs",
    params(("id" = String, Path, description = "Job id")),
    responses((status = 200, description = "The job, its placement, attempts and events", body = Object), (status = 404, body = ErrorBody))
)]
pub(crate) async fn get_job(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = path_id(id)?;
    visible_job(&state, &caller, &id).await?;
    let jobs = state.jobs().clone();
    let key = id.clone();
    let detail = blocking(move || jobs.detail(&key).map_err(ApiError::from)).await?;
    let detail = detail.ok_or_else(|| ApiError::not_found(format!("no job {id}")))?;
    let placements = detail.attempts.iter().filter(|a| a.is_active()).cloned().collect();
    let nodes = match state.agents().cloned() {
        Some(agents) => blocking(move || agents.nodes(&id).map_err(ApiError::from)).await?,
        None => Vec::new(),
    };
    Ok(Json(JobView { detail, placements, nodes }).into_response())
}

/// Cancel a job that has not ended; the control loop deletes its fleet.
#[utoipa::path(
    delete, path = "/v1/jobs/{id}", tag = "jobs",
    params(("id" = String, Path, description = "Job id")),
    responses((status = 200, body = Object), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, description = "Already ended", body = ErrorBody))
)]
pub(crate) async fn cancel_job(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = path_id(id)?;
    require_writer(&caller, "cancel jobs")?;
    visible_job(&state, &caller, &id).await?;
    let jobs = state.jobs().clone();
    let by = caller.describe();
    let job = blocking(move || jobs.cancel(&id, &by).map_err(ApiError::from)).await?;
    tracing::info!(job = %job.id, by = %caller.token_id, "job cancelled");
    Ok(Json(job).into_response())
}

/// Mark a running job's work as done.
#[utoipa::path(
    post, path = "/v1/jobs/{id}/complete", tag = "jobs",
    params(("id" = String, Path, description = "Job id")),
    responses((status = 200, body = Object), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, description = "Not running", body = ErrorBody))
)]
pub(crate) async fn complete_job(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = path_id(id)?;
    require_writer(&caller, "complete jobs")?;
    visible_job(&state, &caller, &id).await?;
    let jobs = state.jobs().clone();
    let job = blocking(move || jobs.complete(&id).map_err(ApiError::from)).await?;
    Ok(Json(job).into_response())
}

/// Quota pools per region (limit, used, in flight, free), blocked offers with reason and
/// expiry, and unhealthy regions.
#[utoipa::path(
    get, path = "/v1/capacity", tag = "cluster",
    responses((status = 200, body = Object), (status = 503, body = ErrorBody))
)]
pub(crate) async fn capacity(State(state): State<ApiState>) -> Result<Response, ApiError> {
    let view = state.controller().capacity().await?;
    Ok(Json(view).into_response())
}

/// What the solver would do now with the pending work, without provisioning anything.
#[utoipa::path(
    get, path = "/v1/plan", tag = "cluster",
    responses((status = 200, body = Object), (status = 503, body = ErrorBody))
)]
pub(crate) async fn plan(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, ApiError> {
    // The control loop's only error is a store failure: retry later.
    let mut plan = state
        .controller()
        .plan_preview()
        .await
        .map_err(|e| ApiError::unavailable(format!("cannot compute a plan now ({e}); retry later")))?;
    if let Some(t) = caller.tenant.clone() {
        // Only the jobs the plan names (open work) are looked up, not the tenant's whole history.
        let jobs = state.jobs().clone();
        let named: std::collections::BTreeSet<String> =
            plan.placements.iter().map(|p| p.job.clone()).chain(plan.unplaced.iter().map(|u| u.job.clone())).collect();
        let mine = blocking(move || -> Result<std::collections::HashSet<String>, ApiError> {
            let mut mine = std::collections::HashSet::new();
            for id in named {
                if jobs.get(&id)?.is_some_and(|j| j.spec.tenant == t) {
                    mine.insert(id);
                }
            }
            Ok(mine)
        })
        .await?;
        plan.placements.retain(|p| mine.contains(&p.job));
        plan.unplaced.retain(|u| mine.contains(&u.job));
        // Totals are recomputed over what the tenant may see; the weight stays global (it names no job).
        plan.expected_cost = plan.placements.iter().map(|p| p.expected_cost).sum();
    }
    Ok(Json(plan).into_response())
}

/// Query of `GET /v1/events`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    /// First sequence number to send (the stream starts with the next new event when absent).
    #[param(maximum = 9223372036854775807_i64)]
    from: Option<u64>,
    /// Only this job's events.
    job: Option<String>,
    /// Only these kinds, comma-separated (e.g. `running,succeeded,failed`).
    kinds: Option<String>,
}

/// One frame of the `GET /v1/events` stream, as its fields appear on the wire. The document
/// describes the `text/event-stream` body by its frames, because that is what a client parses
/// (and what property-based testers check each event against); found by `fuzz/http_fuzz.sh`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EventFrame {
    /// The event's sequence number; send it back as `Last-Event-ID` to resume after it.
    pub id: String,
    /// The event's kind (`submitted`, `running`, `failover`, …).
    pub event: String,
    /// The event as JSON: `seq`, `at_ms`, `kind`, `job_id`, `tenant`, `message`, `data`.
    pub data: String,
}

/// The event log as server-sent events (`id` = sequence number, `event` = kind, `data` = the
/// event as JSON). Resume with `?from=SEQ` or `Last-Event-ID`; tenant-bound tokens see only their
/// tenant's events.
#[utoipa::path(
    get, path = "/v1/events", tag = "events", params(EventsQuery,
        ("Last-Event-ID" = Option<u64>, Header, nullable = false, maximum = 9223372036854775807_i64, description = "Resume after this sequence number")),
    responses((status = 200, description = "text/event-stream; each frame has `id`, `event` and `data`", content_type = "text/event-stream", body = EventFrame), (status = 400, body = ErrorBody))
)]
pub(crate) async fn events(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    q: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    // Sequence numbers are published as int64 (what most clients can hold): refuse what the
    // document says is out of range instead of silently accepting it.
    if q.from.is_some_and(|f| f > MAX_SEQ) {
        return Err(ApiError::bad_field("from", format!("must be an event sequence number (0 to {MAX_SEQ})")));
    }
    let last_event_id = match headers.get("last-event-id") {
        None => None,
        Some(v) => {
            Some(v.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok()).filter(|&n| n <= MAX_SEQ).ok_or_else(
                || ApiError::bad_field("Last-Event-ID", format!("must be an event sequence number (0 to {MAX_SEQ})")),
            )?)
        }
    };
    let store = state.jobs().store().clone();
    let next_seq = match (last_event_id, q.from) {
        (Some(id), _) => id.saturating_add(1),
        (None, Some(from)) => from,
        (None, None) => store.last_seq() + 1,
    };
    let kinds = q.kinds.map(|k| k.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect());
    let sub = super::events::Subscription { next_seq, tenant: caller.tenant.clone(), job: q.job, kinds };
    Ok(super::events::stream(store, sub, state.config().event_poll, state.shutdown()).into_response())
}

/// Prometheus metrics (OpenMetrics text): jobs by state, GPUs in use, cost rate, failovers,
/// evictions, provisioning failures by class, solve and HTTP latency.
#[utoipa::path(
    get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "OpenMetrics text", content_type = "application/openmetrics-text", body = String))
)]
pub(crate) async fn metrics(State(state): State<ApiState>) -> Result<Response, ApiError> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, state.registry())
        .map_err(|e| ApiError::unavailable(format!("cannot encode metrics: {e}")))?;
    Ok(([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text).into_response())
}

/// Health of the process and readiness of the scheduler.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Health {
    /// `ok`, `ready` or `starting`.
    pub status: String,
    /// Reconcile rounds run so far.
    pub reconcile_rounds: u64,
    /// Newest event sequence number.
    pub last_event_seq: u64,
}

/// Liveness: the process answers. No token needed.
#[utoipa::path(get, path = "/healthz", tag = "operations", security(()), responses((status = 200, body = Health)))]
pub(crate) async fn healthz(State(state): State<ApiState>) -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        reconcile_rounds: state.controller().metrics().rounds.get(),
        last_event_seq: state.jobs().store().last_seq(),
    })
}

/// Readiness: the store is open and the control loop has run a round. No token needed.
#[utoipa::path(get, path = "/readyz", tag = "operations", security(()),
    responses((status = 200, body = Health), (status = 503, description = "Still starting", body = Health)))]
pub(crate) async fn readyz(State(state): State<ApiState>) -> Response {
    let rounds = state.controller().metrics().rounds.get();
    let h = Health {
        status: if rounds > 0 { "ready" } else { "starting" }.into(),
        reconcile_rounds: rounds,
        last_event_seq: state.jobs().store().last_seq(),
    };
    let status = if rounds > 0 { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(h)).into_response()
}

/// This document: the OpenAPI 3.1 description of every route, generated from the handlers.
#[utoipa::path(get, path = "/openapi.json", tag = "operations", responses((status = 200, body = Object)))]
pub(crate) async fn openapi_json() -> Response {
    static DOC: OnceLock<String> = OnceLock::new();
    let doc = DOC.get_or_init(|| super::openapi().to_pretty_json().unwrap_or_else(|_| "{}".into()));
    ([(header::CONTENT_TYPE, "application/json")], doc.clone()).into_response()
}

/// Body of `POST /v1/tokens`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// `admin`, `submitter` or `viewer`.
    pub role: Role,
    /// The tenant to bind to (required for submitters, optional for viewers, none for admins).
    #[serde(default)]
    #[schema(pattern = "^[A-Za-z0-9._-]+$", min_length = 1, max_length = 63)]
    pub tenant: Option<String>,
    /// A label for people (no control characters).
    #[serde(default)]
    #[schema(max_length = 100)]
    pub name: Option<String>,
}

/// A token as listed (no secret).
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenInfo {
    /// Token id (for `DELETE /v1/tokens/{id}`).
    pub id: String,
    /// Role.
    pub role: Role,
    /// Bound tenant.
    pub tenant: Option<String>,
    /// Label.
    pub name: Option<String>,
    /// Creation time, Unix milliseconds.
    pub created_at_ms: i64,
}

impl From<ApiToken> for TokenInfo {
    fn from(t: ApiToken) -> Self {
        TokenInfo { id: t.id, role: t.role, tenant: t.tenant, name: t.name, created_at_ms: t.created_at_ms }
    }
}

/// A new token: shown once, never again.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenCreated {
    /// The token's record.
    #[serde(flatten)]
    pub info: TokenInfo,
    /// The bearer token itself. Store it now: the server keeps only its hash.
    pub token: String,
}

fn token_error(e: TokenError) -> ApiError {
    match e {
        TokenError::Invalid(fe) => ApiError::invalid(&fe),
        TokenError::NotFound(id) => ApiError::not_found(format!("no token {id}")),
        TokenError::Conflict(m) => ApiError::conflict(m),
        TokenError::Store(s) => ApiError::from(s),
        TokenError::Io(m) => ApiError::unavailable(m),
    }
}

/// Create a token (admin only). The answer holds the token; the server keeps only its hash.
#[utoipa::path(
    post, path = "/v1/tokens", tag = "tokens", request_body = CreateToken,
    responses(
        (status = 201, body = TokenCreated),
        (status = 400, description = "Empty body or malformed JSON", body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 422, description = "Invalid request; every problem names its field", body = ErrorBody),
        (status = 503, description = "Store unavailable; no token was created", body = ErrorBody),
    )
)]
pub(crate) async fn create_token(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    require_admin(&caller)?;
    let bytes = read_body(&state, &headers, body).await?;
    let value = parse_json(&bytes)?;
    let req: CreateToken = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let mut fe = FieldErrors::default();
        fe.push(if path == "." { String::new() } else { path }, e.into_inner().to_string());
        ApiError::invalid(&fe)
    })?;
    let tokens = state.tokens().clone();
    let now = state.jobs_clock_ms();
    let (record, token) =
        blocking(move || tokens.create(req.role, req.tenant, req.name, now).map_err(token_error)).await?;
    tracing::info!(token_id = %record.id, role = record.role.as_str(), by = %caller.token_id, "token created");
    Ok((StatusCode::CREATED, Json(TokenCreated { info: record.into(), token })).into_response())
}

/// List tokens without their secrets (admin only).
#[utoipa::path(get, path = "/v1/tokens", tag = "tokens", responses((status = 200, body = Vec<TokenInfo>), (status = 403, body = ErrorBody)))]
pub(crate) async fn list_tokens(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Vec<TokenInfo>>, ApiError> {
    require_admin(&caller)?;
    Ok(Json(state.tokens().list().into_iter().map(TokenInfo::from).collect()))
}

/// Revoke a token (admin only); the last admin token cannot be revoked.
#[utoipa::path(
    delete, path = "/v1/tokens/{id}", tag = "tokens", params(("id" = String, Path, description = "Token id")),
    responses((status = 200, body = TokenInfo), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody))
)]
pub(crate) async fn revoke_token(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<TokenInfo>, ApiError> {
    require_admin(&caller)?;
    let id = path_id(id)?;
    let tokens = state.tokens().clone();
    let record = blocking(move || tokens.revoke(&id).map_err(token_error)).await?;
    state.limiter().forget(&record.id);
    tracing::info!(token_id = %record.id, by = %caller.token_id, "token revoked");
    Ok(Json(record.into()))
}

/// Unknown routes: the same JSON error shape as everything else.
pub(crate) async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no route {}; see /openapi.json", uri.path()))
}

/// Known route, wrong method.
pub(crate) async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} is not allowed on {}; see /openapi.json", uri.path()),
    )
}
