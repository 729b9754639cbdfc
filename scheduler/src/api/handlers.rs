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
use super::views::{
    AttemptView, BlockedOfferView, CapacityView, DemandPartView, JobDetailView, JobEventView, JobListView, JobView,
    ListedJobView, PlacementSummaryView, PlacementView, PlanView, PoolView, PriorityView, RegionHealthView,
    UnplacedView, money,
};
use crate::clock::{Clock, SystemClock};
use crate::model::strict_json::{self, JsonError};
use crate::model::{Attempt, AttemptState, FieldErrors, Job, JobState};
use crate::records::{AttemptsBy, Lookup};

/// Longest accepted `Idempotency-Key`.
const MAX_IDEMPOTENCY_KEY: usize = 200;

/// Largest event sequence number a client may send (`from`, `Last-Event-ID`): int64's maximum.
const MAX_SEQ: u64 = i64::MAX as u64;

/// Reads a request body up to the configured limit.
pub(super) async fn read_body(
    state: &ApiState,
    headers: &HeaderMap,
    body: Body,
) -> Result<axum::body::Bytes, ApiError> {
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

/// Parses a body as JSON; malformed JSON is a 400 naming where it broke, a key given twice a 422
/// naming the key (a client must not get a job other than the one it reviewed).
pub(super) fn parse_json(bytes: &[u8]) -> Result<serde_json::Value, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_field("body", "empty body: send a JSON object"));
    }
    strict_json::parse_slice(bytes).map_err(|e| match e {
        JsonError::Syntax(m) => ApiError::bad_field("body", format!("malformed JSON: {m}")),
        JsonError::DuplicateKey(f) => {
            let mut fe = FieldErrors::default();
            fe.0.push(f);
            ApiError::invalid(&fe)
        }
    })
}

pub(super) fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(v)| v).map_err(|e| ApiError::bad_field("query", e.body_text()))
}

pub(super) fn path_id(p: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
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

pub(super) fn require_writer(caller: &Caller, what: &str) -> Result<(), ApiError> {
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

/// The request's `Idempotency-Key`, if it sent a valid one.
pub(super) fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get("idempotency-key") else { return Ok(None) };
    let k = v
        .to_str()
        .ok()
        .filter(|k| !k.is_empty() && k.len() <= MAX_IDEMPOTENCY_KEY && k.chars().all(|c| c.is_ascii_graphic()))
        .ok_or_else(|| {
            ApiError::bad_field("Idempotency-Key", format!("use 1 to {MAX_IDEMPOTENCY_KEY} printable ASCII characters"))
        })?;
    Ok(Some(k.to_string()))
}

/// Submit a job spec (JSON). Answers 201 once the job is on disk; with an `Idempotency-Key`
/// already used for the same spec, 200 and the job the first request created.
#[utoipa::path(
    post, path = "/v1/jobs", tag = "jobs",
    request_body(content = crate::model::JobSpec, description = "A job spec (see the README's field table); unknown fields are errors"),
    params(("Idempotency-Key" = Option<String>, Header, nullable = false, pattern = "^[!-~]{1,200}$",
        description = "Makes a retried submission return the same job (1 to 200 printable ASCII characters)")),
    responses(
        (status = 201, description = "Accepted and durable", body = JobView),
        (status = 200, description = "An earlier submission with this Idempotency-Key", body = JobView),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 403, description = "The token may not submit", body = ErrorBody),
        (status = 409, description = "Idempotency-Key reused with a different spec", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 422, description = "Invalid spec (or a key given twice); every problem names its field", body = ErrorBody),
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
    let key = idempotency_key(&headers)?;
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
    let mut resp = (status, Json(JobView::from(&submitted.job))).into_response();
    if let Ok(loc) = HeaderValue::from_str(&format!("/v1/jobs/{}", submitted.job.id)) {
        resp.headers_mut().insert(header::LOCATION, loc);
    }
    Ok(resp)
}

/// Query of `GET /v1/jobs` and `GET /v1/pipelines`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// Only those in this state (jobs: pending, provisioning, running, migrating, succeeded,
    /// failed, cancelled; pipelines: pending, running, succeeded, failed, cancelled).
    #[param(pattern = "^(|pending|provisioning|running|migrating|succeeded|failed|cancelled)$")]
    pub(crate) state: Option<String>,
    /// Only this tenant's.
    tenant: Option<String>,
    /// At most this many: the newest, or the newest older than `cursor` (default 1000, at most
    /// 100000).
    #[param(minimum = 1, maximum = 100000)]
    limit: Option<usize>,
    /// Where to continue: the `next` of the page before (each page holds older ones than the one
    /// before it). Opaque; stable while more are submitted, so paging neither repeats nor skips one.
    #[param(pattern = "^k([0-9a-f]{2})+$", max_length = 1025)]
    cursor: Option<String>,
}

/// What a list query asks for, checked: the same for every list.
pub(crate) struct Paging {
    /// Page size.
    pub limit: usize,
    /// The key the page continues below.
    pub before: Option<String>,
    /// The tenant to list (a tenant-bound caller's own).
    pub tenant: Option<String>,
    /// A tenant-bound caller asked for another tenant: the page is empty.
    pub nothing: bool,
}

impl ListQuery {
    /// The page asked for, or which parameter is wrong.
    pub(crate) fn paging(&self, caller: &Caller) -> Result<Paging, ApiError> {
        let limit = self.limit.unwrap_or(1000);
        if limit == 0 || limit > 100_000 {
            return Err(ApiError::bad_field("limit", "must be between 1 and 100000"));
        }
        let before = self.cursor.as_deref().filter(|c| !c.is_empty()).map(parse_list_cursor).transpose()?;
        let (tenant, nothing) = match (caller.tenant.clone(), self.tenant.clone().filter(|t| !t.is_empty())) {
            (Some(own), Some(asked)) if own != asked => (Some(own), true),
            (Some(own), _) => (Some(own), false),
            (None, asked) => (asked, false),
        };
        Ok(Paging { limit, before, tenant, nothing })
    }
}

/// The `cursor` of a list for a page that continues below key `id`.
pub(crate) fn list_cursor(id: &str) -> String {
    let mut c = String::with_capacity(1 + 2 * id.len());
    c.push('k');
    for b in id.bytes() {
        c.push_str(&format!("{b:02x}"));
    }
    c
}

/// The job id a `cursor` continues below, or what is wrong with it.
fn parse_list_cursor(c: &str) -> Result<String, ApiError> {
    let bad = || ApiError::bad_field("cursor", "not a cursor of this API: pass the `next` of the page before");
    let hex = c.strip_prefix('k').filter(|h| !h.is_empty() && h.len() % 2 == 0 && h.len() <= 1024).ok_or_else(bad)?;
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| hex.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok()))
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    String::from_utf8(bytes).map_err(|_| bad())
}

/// List jobs, newest pages first (each page oldest first); a tenant-bound token sees only its
/// tenant's. Follow `next` (as `cursor`) to page back through the history.
#[utoipa::path(
    get, path = "/v1/jobs", tag = "jobs", params(ListQuery),
    responses((status = 200, body = JobListView), (status = 400, body = ErrorBody))
)]
pub(crate) async fn list_jobs(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<JobListView>, ApiError> {
    let q = query(q)?;
    let job_state = match q.state.as_deref() {
        None | Some("") => None,
        Some(s) => Some(s.parse::<JobState>().map_err(|e| ApiError::bad_field("state", e))?),
    };
    let Paging { limit, before, tenant, nothing } = q.paging(&caller)?;
    if nothing {
        return Ok(Json(JobListView {
            jobs: Vec::new(),
            total: 0,
            truncated: false,
            next: None,
            clock: state.clock_view(),
        }));
    }
    let jobs = state.jobs().clone();
    let (page, total, next) = blocking(move || {
        let page = jobs.page(job_state, tenant.as_deref(), before.as_deref(), limit).map_err(ApiError::from)?;
        // One direct read per job: the newest attempt's key follows from the job's attempt count.
        let mut items = Vec::with_capacity(page.jobs.len());
        for job in &page.jobs {
            let placement = if job.attempts == 0 {
                None
            } else {
                let key = crate::records::attempt_key(&job.id, job.attempts);
                jobs.store().get::<Attempt>(&key)?.as_ref().map(PlacementSummaryView::from)
            };
            items.push(ListedJobView { job: JobView::from(job), placement });
        }
        Ok::<_, ApiError>((items, page.total, page.next))
    })
    .await?;
    let next = next.as_deref().map(list_cursor);
    Ok(Json(JobListView { jobs: page, total, truncated: next.is_some(), next, clock: state.clock_view() }))
}

/// One job with its placement, attempts, events, cost so far and, while pending, why.
#[utoipa::path(
    get, path = "/v1/jobs/{id}", tag = "jobs",
    params(("id" = String, Path, description = "Job id")),
    responses((status = 200, description = "The job, its placement, attempts and events", body = JobDetailView), (status = 404, body = ErrorBody))
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
    let placements = detail.attempts.iter().filter(|a| a.is_active()).map(AttemptView::from).collect();
    let nodes = match state.agents().cloned() {
        Some(agents) => blocking(move || agents.nodes(&id).map_err(ApiError::from)).await?,
        None => Vec::new(),
    };
    let seq = |s: u64| if caller.tenant.is_some() { state.cursors().encode(s) } else { s };
    let view = JobDetailView {
        job: JobView::from(&detail.job),
        attempts: detail.attempts.iter().map(AttemptView::from).collect(),
        events: detail.events.iter().map(|e| JobEventView::new(e, seq(e.seq))).collect(),
        placements,
        nodes,
        clock: state.clock_view(),
    };
    Ok(Json(view).into_response())
}

/// Cancel a job that has not ended; the control loop deletes its fleet.
#[utoipa::path(
    delete, path = "/v1/jobs/{id}", tag = "jobs",
    params(("id" = String, Path, description = "Job id")),
    responses((status = 200, description = "The job, now cancelled", body = JobView), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, description = "Already ended", body = ErrorBody))
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
    Ok(Json(JobView::from(&job)).into_response())
}

/// Mark a running job's work as done.
#[utoipa::path(
    post, path = "/v1/jobs/{id}/complete", tag = "jobs",
    params(("id" = String, Path, description = "Job id")),
    responses((status = 200, description = "The job, now succeeded", body = JobView), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, description = "Not running", body = ErrorBody))
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
    Ok(Json(JobView::from(&job)).into_response())
}

/// Quota pools per region (limit, free, and who uses what), blocked offers with reason and
/// expiry, and unhealthy regions. A tenant-bound token sees the capacity it may use (limits, what
/// is free, blocks, breakers) and its own use, not other tenants' nor spillway's total.
#[utoipa::path(
    get, path = "/v1/capacity", tag = "cluster",
    responses((status = 200, body = CapacityView), (status = 503, body = ErrorBody))
)]
pub(crate) async fn capacity(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, ApiError> {
    let view = state.controller().capacity().await?;
    let tenant_use = match caller.tenant.clone() {
        None => None,
        Some(t) => {
            let store = state.jobs().store().clone();
            Some(
                blocking(move || {
                    let mut mine = Vec::new();
                    for s in [AttemptState::Provisioning, AttemptState::Running] {
                        for a in store.find(AttemptsBy::State(s))? {
                            if store.get::<Job>(&a.job_id)?.is_some_and(|j| j.spec.tenant == t) {
                                mine.push(a);
                            }
                        }
                    }
                    Ok(crate::control::our_usage(mine.iter()))
                })
                .await?,
            )
        }
    };
    let scrub = caller.tenant.is_some();
    let pools = view
        .pools
        .iter()
        .map(|p| {
            let key = (p.region.clone(), crate::model::normalize_family(&p.pool));
            PoolView {
                region: p.region.clone(),
                pool: p.pool.clone(),
                limit: p.limit,
                free: p.free,
                used_by_tenant: tenant_use.as_ref().map(|u| u.get(&key).map_or(0, |x| x.0)),
                used_by_others: (!scrub).then_some(p.used_by_others),
                used_by_us: (!scrub).then_some(p.used_by_us),
                in_flight: (!scrub).then_some(p.in_flight),
                refreshed_at_ms: p.refreshed_at_ms,
            }
        })
        .collect();
    Ok(Json(CapacityView {
        pools,
        blocked_offers: view.blocked_offers.iter().map(|b| BlockedOfferView::new(b, scrub)).collect(),
        regions: view
            .regions
            .iter()
            .map(|r| RegionHealthView { region: r.region.clone(), breaker: r.breaker.into() })
            .collect(),
    })
    .into_response())
}

/// What the solver would do now with the open work, without provisioning anything. A
/// tenant-bound token sees its own jobs' entries (inference parts included), their GPUs and
/// cost, and not the cluster-wide `placed_weight`.
#[utoipa::path(
    get, path = "/v1/plan", tag = "cluster",
    responses((status = 200, body = PlanView), (status = 503, body = ErrorBody))
)]
pub(crate) async fn plan(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, ApiError> {
    use crate::control::DemandPart;
    // The control loop's only error is a store failure: retry later.
    let plan = state
        .controller()
        .plan_preview()
        .await
        .map_err(|e| ApiError::unavailable(format!("cannot compute a plan now ({e}); retry later")))?;
    // Solver ids name a job, or a part of an inference service (`<job>#min`, `<job>#extra`).
    let split = |solver_id: &str| -> (String, Option<DemandPartView>) {
        let (job, part) = DemandPart::parse(solver_id);
        let part = match part {
            DemandPart::Whole => None,
            DemandPart::Min => Some(DemandPartView::Min),
            DemandPart::Extra => Some(DemandPartView::Extra),
            DemandPart::Base => Some(DemandPartView::Base),
        };
        (job.to_string(), part)
    };
    let mut placements: Vec<PlacementView> = plan
        .placements
        .iter()
        .map(|p| {
            let (job, part) = split(&p.job);
            PlacementView {
                job,
                part,
                region: p.region.clone(),
                size: p.size.clone(),
                priority: PriorityView::of_solver(p.priority),
                vms: p.vms,
                gpus: p.gpus,
                price_per_hour: money(p.price_per_hour),
                expected_cost: money(p.expected_cost),
            }
        })
        .collect();
    let mut unplaced: Vec<UnplacedView> = plan
        .unplaced
        .iter()
        .map(|u| {
            let (job, part) = split(&u.job);
            UnplacedView { job, part, reasons: u.reasons.clone() }
        })
        .collect();
    if let Some(t) = caller.tenant.clone() {
        // Only the jobs the plan names (open work) are looked up, not the tenant's whole history.
        let jobs = state.jobs().clone();
        let named: std::collections::BTreeSet<String> =
            placements.iter().map(|p| p.job.clone()).chain(unplaced.iter().map(|u| u.job.clone())).collect();
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
        placements.retain(|p| mine.contains(&p.job));
        unplaced.retain(|u| mine.contains(&u.job));
    }
    let view = PlanView {
        placed_gpus: placements.iter().map(|p| u64::from(p.gpus)).sum(),
        expected_cost: money(placements.iter().map(|p| p.expected_cost).sum()),
        placed_weight: caller.tenant.is_none().then_some(plan.placed_weight),
        placements,
        unplaced,
        solver: plan.solver,
        optimal: plan.optimal,
        gap: plan.gap,
        solve_ms: plan.solve_ms,
    };
    Ok(Json(view).into_response())
}

/// Query of `GET /v1/events`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    /// First position to send: a sequence number, or for tenant-bound tokens a cursor they were
    /// given; 0 = the oldest event kept. Absent: the stream starts with the next new event.
    #[param(maximum = 9223372036854775807_i64)]
    from: Option<u64>,
    /// Only this job's events.
    job: Option<String>,
    /// Only these kinds, comma-separated (e.g. `running,succeeded,failed`; see `EventKind`).
    kinds: Option<String>,
}

/// One frame of the `GET /v1/events` stream, as its fields appear on the wire. The document
/// describes the `text/event-stream` body by its frames, because that is what a client parses
/// (and what property-based testers check each event against); found by `fuzz/http_fuzz.sh`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EventFrame {
    /// The event's position in the log (its `seq`); send it back as `Last-Event-ID` to resume
    /// after it.
    pub id: String,
    /// The event's kind.
    #[schema(value_type = super::views::EventKind)]
    pub event: String,
    /// The event as JSON, an `EventView`: `seq`, `at_ms`, `kind`, `job_id`, `tenant`, `message`, `data`.
    #[schema(content_media_type = "application/json")]
    pub data: String,
}

/// The event log as server-sent events (`id` = the event's position, `event` = kind, `data` = the
/// event as JSON, an `EventView`). Resume with `?from=POSITION` or `Last-Event-ID`. Tenant-bound
/// tokens see only their tenant's events, and positions as opaque cursors instead of the log's
/// global sequence numbers (they resume the same way; `from=0` starts at the oldest event kept).
/// At most `max_event_streams` streams are open at once; past that, 503 with Retry-After.
#[utoipa::path(
    get, path = "/v1/events", tag = "events", params(EventsQuery,
        ("Last-Event-ID" = Option<u64>, Header, nullable = false, maximum = 9223372036854775807_i64, description = "Resume after this position")),
    responses(
        (status = 200, description = "text/event-stream; each frame has `id`, `event` and `data`", content_type = "text/event-stream", body = EventFrame),
        (status = 400, body = ErrorBody),
        (status = 503, description = "Too many event streams open; see Retry-After", body = ErrorBody),
    )
)]
pub(crate) async fn events(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    q: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let tenant_bound = caller.tenant.is_some();
    let what = if tenant_bound { "an event cursor from this server" } else { "an event sequence number" };
    // Positions are published as int64 (what most clients can hold): refuse what the document says
    // is out of range instead of silently accepting it. A tenant's positions are cursors.
    let position = |field: &str, n: u64| -> Result<u64, ApiError> {
        let bad = || ApiError::bad_field(field, format!("must be {what} (0 to {MAX_SEQ})"));
        if n > MAX_SEQ {
            return Err(bad());
        }
        if !tenant_bound || n == 0 {
            return Ok(n);
        }
        // Every number decodes to some position; one past the log's end was not given out (the
        // odds of guessing a real cursor are the log's length in 2^62).
        let last = state.jobs().store().last_seq();
        state.cursors().decode(n).filter(|&seq| seq <= last).ok_or_else(bad)
    };
    let from = q.from.map(|f| position("from", f)).transpose()?;
    let last_event_id = match headers.get("last-event-id") {
        None => None,
        Some(v) => {
            let n = v
                .to_str()
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| ApiError::bad_field("Last-Event-ID", format!("must be {what} (0 to {MAX_SEQ})")))?;
            Some(position("Last-Event-ID", n)?)
        }
    };
    let next_seq = match (last_event_id, from) {
        (Some(id), _) => id.saturating_add(1),
        (None, Some(from)) => from,
        (None, None) => state.jobs().store().last_seq() + 1,
    };
    let kinds = q.kinds.map(|k| k.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect());
    let sub = super::events::Subscription { next_seq, tenant: caller.tenant.clone(), job: q.job, kinds };
    match state.hub().subscribe(sub) {
        Ok(sse) => Ok(sse.into_response()),
        Err(super::events::TooManyStreams(n)) => Err(ApiError {
            retry_after_secs: Some(5),
            ..ApiError::unavailable(format!("{n} event streams are open, the most this server serves; retry later"))
        }),
    }
}

/// Prometheus metrics: jobs by state, GPUs in use, cost rate, failovers, evictions, provisioning
/// failures by class (every class from the start), solve, round and HTTP latency, and per tenant
/// spend, cost rate, GPUs and open jobs. OpenMetrics 1.0 when the `Accept` header asks for
/// `application/openmetrics-text`, else the Prometheus text format 0.0.4. A tenant-bound token
/// gets only the series labelled with its tenant.
#[utoipa::path(
    get, path = "/metrics", tag = "operations",
    params(("Accept" = Option<String>, Header, description = "`application/openmetrics-text` for OpenMetrics 1.0; anything else gets `text/plain; version=0.0.4`")),
    responses((status = 200, description = "Prometheus text format 0.0.4 or OpenMetrics 1.0", body = String,
        content((String = "text/plain; version=0.0.4"), (String = "application/openmetrics-text; version=1.0.0"))))
)]
pub(crate) async fn metrics(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let format = super::exposition::negotiate(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let tenant = caller.tenant.clone();
    // Encoding reads the store (the per-tenant series): off the async threads.
    let st = state.clone();
    let text = blocking(move || {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, st.registry())
            .map_err(|e| ApiError::unavailable(format!("cannot encode metrics: {e}")))?;
        Ok(super::exposition::render(&text, format, tenant.as_deref()))
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, format.content_type())], text).into_response())
}

/// Health of the process and readiness of the scheduler.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Health {
    /// `ok`, `ready`, `starting` or `not_ready`.
    pub status: String,
    /// Reconcile rounds run so far.
    pub reconcile_rounds: u64,
    /// Newest event sequence number.
    pub last_event_seq: u64,
    /// `leader` (runs the control loop) or `follower` (serves the API only).
    pub role: String,
    /// The epoch of the leader lease this server holds, when it leads.
    pub epoch: Option<u64>,
    /// This server's id among the servers sharing the store.
    pub replica: Option<String>,
    /// Why the server is not ready, when it is not.
    pub reason: Option<String>,
}

fn role_of(state: &ApiState) -> (String, Option<u64>, Option<String>) {
    match state.replica() {
        Some(r) => (r.role().to_string(), r.epoch(), Some(r.id().to_string())),
        None => ("leader".to_string(), None, None),
    }
}

/// Liveness: the process answers. No token needed.
#[utoipa::path(get, path = "/healthz", tag = "operations", security(()), responses((status = 200, body = Health)))]
pub(crate) async fn healthz(State(state): State<ApiState>) -> Json<Health> {
    let (role, epoch, replica) = role_of(&state);
    let store = state.jobs().store().clone();
    let last_event_seq = tokio::task::spawn_blocking(move || store.last_seq()).await.unwrap_or_default();
    Json(Health {
        status: "ok".into(),
        reconcile_rounds: state.controller().metrics().rounds.get(),
        last_event_seq,
        role,
        epoch,
        replica,
        reason: None,
    })
}

/// Readiness: the store can be read and written, and, on the leader, the control loop's last round
/// succeeded (a server whose rounds all fail, or whose store is damaged or full, is not ready and
/// says why). A follower is ready when its store is. No token needed.
#[utoipa::path(get, path = "/readyz", tag = "operations", security(()),
    responses((status = 200, body = Health), (status = 503, description = "Starting, or not able to work; `reason` says why", body = Health)))]
pub(crate) async fn readyz(State(state): State<ApiState>) -> Response {
    let (role, epoch, replica) = role_of(&state);
    let store = state.jobs().store().clone();
    // A read reaches the database of a shared store; `health` reports damage and a full disk.
    let probe = tokio::task::spawn_blocking(move || {
        store.setting::<serde_json::Value>("readyz.probe").map_err(|e| e.to_string())?;
        store.health()?;
        Ok::<u64, String>(store.last_seq())
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()));
    let rounds = state.controller().health().status();
    let leading = role == "leader";
    let (status, reason) = match &probe {
        Err(e) => ("not_ready", Some(format!("state store: {e}"))),
        Ok(_) if leading && rounds.failed_in_a_row > 0 => (
            "not_ready",
            Some(format!(
                "the last {} reconcile round(s) failed: {}",
                rounds.failed_in_a_row,
                rounds.last_error.clone().unwrap_or_default()
            )),
        ),
        Ok(_) if leading && rounds.succeeded == 0 => ("starting", Some("no reconcile round has succeeded yet".into())),
        Ok(_) => ("ready", None),
    };
    let h = Health {
        status: status.into(),
        reconcile_rounds: state.controller().metrics().rounds.get(),
        last_event_seq: probe.unwrap_or_default(),
        role,
        epoch,
        replica,
        reason,
    };
    let code = if status == "ready" { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, Json(h)).into_response()
}

/// This document: the OpenAPI 3.1 description of every route, generated from the handlers.
#[utoipa::path(get, path = "/openapi.json", tag = "operations", responses((status = 200, description = "An OpenAPI 3.1 document", body = Object)))]
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
    /// Creation time, Unix milliseconds on the wall clock (tokens live in real time, even when
    /// the cloud is simulated).
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
    let now = SystemClock.now_ms();
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
