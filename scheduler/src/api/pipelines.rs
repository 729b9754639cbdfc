//! Pipelines over the API: submit (`POST /v1/pipelines`, 201 once durable, idempotent like a job
//! submission), list, read one with its jobs' states, cancel. Tenancy as for jobs: a tenant-bound
//! token sees and submits only its tenant's pipelines, another tenant's is "not found".

use axum::Extension;
use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::ApiState;
use super::auth::{Caller, Role};
use super::error::{ApiError, ErrorBody, blocking};
use super::handlers::{
    ListQuery, Paging, idempotency_key, list_cursor, parse_json, path_id, query, read_body, require_writer,
};
use super::views::ClockView;
use crate::jobs::PipelineDetail;
use crate::model::{FieldErrors, JobState, PipelineState};

/// One job of a pipeline as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PipelineJobView {
    /// Name within the pipeline.
    pub name: String,
    /// Job id (the job is also under `/v1/jobs/{id}`).
    pub id: String,
    /// Where the job is (once retention has forgotten the job, how it ended, as its pipeline kept
    /// it; null only for a job forgotten before pipelines kept that).
    pub state: Option<JobState>,
    /// Names of the jobs it waits for.
    pub depends_on: Vec<String>,
    /// While pending: why it is not placed (e.g. `waiting for prep`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_reasons: Vec<String>,
    /// Why it ended, when it ended other than by completing (e.g. `dependency prep failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_reason: Option<String>,
    /// USD accrued by the job.
    pub cost_usd: f64,
}

/// A pipeline and its jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PipelineView {
    /// Unique id assigned at submission.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its tenant.
    pub tenant: String,
    /// Where it is, from its jobs' states.
    pub state: PipelineState,
    /// Submission time, Unix milliseconds on the server's clock.
    pub submitted_at_ms: i64,
    /// Its jobs, in the order submitted.
    pub jobs: Vec<PipelineJobView>,
    /// USD accrued by its jobs in all (egress included): what it has spent so far.
    pub cost_usd: f64,
    /// The most the whole pipeline may cost, USD, when it has a budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
    /// Who cancelled it, when someone did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_by: Option<String>,
    /// Which clock the times are on.
    pub clock: ClockView,
}

impl PipelineView {
    fn new(d: &PipelineDetail, clock: ClockView) -> PipelineView {
        let jobs: Vec<PipelineJobView> = d
            .jobs
            .iter()
            .zip(&d.pipeline.jobs)
            .map(|(j, m)| {
                // A job retention forgot is shown as its pipeline kept it.
                let ended = m.ended.as_ref();
                PipelineJobView {
                    name: j.name.clone(),
                    id: j.id.clone(),
                    state: j.job.as_ref().map(|x| x.state).or(ended.map(|e| e.state)),
                    depends_on: j.depends_on.clone(),
                    pending_reasons: j.job.as_ref().map(|x| x.pending_reasons.clone()).unwrap_or_default(),
                    end_reason: match &j.job {
                        Some(x) => x.end_reason.clone(),
                        None => ended.and_then(|e| e.end_reason.clone()),
                    },
                    cost_usd: super::views::money(match &j.job {
                        Some(x) => x.cost_usd,
                        None => ended.map_or(0.0, |e| e.cost_usd),
                    }),
                }
            })
            .collect();
        PipelineView {
            id: d.pipeline.id.clone(),
            name: d.pipeline.name.clone(),
            tenant: d.pipeline.tenant.clone(),
            state: d.state,
            submitted_at_ms: d.pipeline.submitted_at_ms,
            cost_usd: super::views::money(jobs.iter().map(|j| j.cost_usd).sum()),
            jobs,
            budget_usd: d.pipeline.budget_usd,
            cancelled_by: d.pipeline.cancelled_by.clone(),
            clock,
        }
    }
}

/// A page of the pipelines the caller may see.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PipelineListView {
    /// Oldest first.
    pub pipelines: Vec<PipelineView>,
    /// How many match the filter in all, on every page.
    pub total: usize,
    /// Whether older pipelines match beyond this page (follow `next`).
    pub truncated: bool,
    /// The `cursor` of the next (older) page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// Submit a pipeline (JSON): a name, a tenant and its jobs, each a job spec with `depends_on`.
/// Answers 201 once the pipeline and every job are on disk; with an `Idempotency-Key` already used
/// for the same pipeline, 200 and the pipeline the first request created.
#[utoipa::path(
    post, path = "/v1/pipelines", tag = "pipelines",
    request_body(content = crate::model::PipelineSpec, description = "A pipeline: name, tenant, jobs (job specs with depends_on, on_dependency_failure, output_gb), optional deadline and budget; unknown fields are errors"),
    params(("Idempotency-Key" = Option<String>, Header, nullable = false, pattern = "^[!-~]{1,200}$",
        description = "Makes a retried submission return the same pipeline (1 to 200 printable ASCII characters)")),
    responses(
        (status = 201, description = "Accepted and durable", body = PipelineView),
        (status = 200, description = "An earlier submission with this Idempotency-Key", body = PipelineView),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 403, description = "The token may not submit", body = ErrorBody),
        (status = 409, description = "Idempotency-Key reused with a different pipeline", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 422, description = "Invalid pipeline (a cycle, an unknown dependency, a duplicate name, an invalid job); every problem names its field", body = ErrorBody),
        (status = 503, description = "Store unavailable; nothing was accepted", body = ErrorBody),
    )
)]
pub(crate) async fn submit_pipeline(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    require_writer(&caller, "submit pipelines")?;
    let key = idempotency_key(&headers)?;
    let bytes = read_body(&state, &headers, body).await?;
    let value = parse_json(&bytes)?;
    if !value.is_object() {
        let mut e = FieldErrors::default();
        e.push("", "the body must be a JSON object (a pipeline)");
        return Err(ApiError::invalid(&e));
    }
    let jobs = state.jobs().clone();
    let tenant = if caller.role == Role::Admin { None } else { caller.tenant.clone() };
    let (detail, created) =
        blocking(move || jobs.submit_pipeline_value(value, tenant.as_deref(), key.as_deref()).map_err(ApiError::from))
            .await?;
    if created {
        tracing::info!(pipeline = %detail.pipeline.id, tenant = %detail.pipeline.tenant, jobs = detail.jobs.len(),
            by = %caller.token_id, "pipeline submitted");
    }
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    let mut resp = (status, Json(PipelineView::new(&detail, state.clock_view()))).into_response();
    if let Ok(loc) = HeaderValue::from_str(&format!("/v1/pipelines/{}", detail.pipeline.id)) {
        resp.headers_mut().insert(header::LOCATION, loc);
    }
    Ok(resp)
}

/// List pipelines, newest pages first (each page oldest first), paged as `GET /v1/jobs` is (the
/// same parameters and cursors); a tenant-bound token sees only its tenant's.
#[utoipa::path(
    get, path = "/v1/pipelines", tag = "pipelines", params(ListQuery),
    responses((status = 200, body = PipelineListView), (status = 400, body = ErrorBody), (status = 503, body = ErrorBody))
)]
pub(crate) async fn list_pipelines(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<PipelineListView>, ApiError> {
    let q = query(q)?;
    let wanted = match q.state.as_deref() {
        None | Some("") => None,
        Some(s) => Some(PipelineState::parse(s).ok_or_else(|| {
            ApiError::bad_field(
                "state",
                format!("a pipeline is pending, running, succeeded, failed or cancelled (got {s:?})"),
            )
        })?),
    };
    let Paging { limit, before, tenant, nothing } = q.paging(&caller)?;
    let clock = state.clock_view();
    if nothing {
        return Ok(Json(PipelineListView { pipelines: Vec::new(), total: 0, truncated: false, next: None }));
    }
    let jobs = state.jobs().clone();
    let page = blocking(move || {
        jobs.pipelines_page(wanted, tenant.as_deref(), before.as_deref(), limit).map_err(ApiError::from)
    })
    .await?;
    let next = page.next.as_deref().map(list_cursor);
    Ok(Json(PipelineListView {
        pipelines: page.pipelines.iter().map(|d| PipelineView::new(d, clock)).collect(),
        total: page.total,
        truncated: next.is_some(),
        next,
    }))
}

/// Loads a pipeline the caller may see; another tenant's is "not found", never "forbidden".
async fn visible(state: &ApiState, caller: &Caller, id: &str) -> Result<PipelineDetail, ApiError> {
    let jobs = state.jobs().clone();
    let key = id.to_string();
    let found = blocking(move || jobs.pipeline(&key).map_err(ApiError::from)).await?;
    match found {
        Some(d) if caller.sees_tenant(&d.pipeline.tenant) => Ok(d),
        _ => Err(ApiError::not_found(format!("no pipeline {id}"))),
    }
}

/// One pipeline: its state and its jobs' names, ids, states and dependencies.
#[utoipa::path(
    get, path = "/v1/pipelines/{id}", tag = "pipelines",
    params(("id" = String, Path, description = "Pipeline id")),
    responses((status = 200, body = PipelineView), (status = 404, body = ErrorBody))
)]
pub(crate) async fn get_pipeline(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<PipelineView>, ApiError> {
    let id = path_id(id)?;
    let detail = visible(&state, &caller, &id).await?;
    Ok(Json(PipelineView::new(&detail, state.clock_view())))
}

/// Cancel a pipeline: every job of it that has not ended is cancelled (the control loop deletes
/// the running ones' fleets).
#[utoipa::path(
    delete, path = "/v1/pipelines/{id}", tag = "pipelines",
    params(("id" = String, Path, description = "Pipeline id")),
    responses(
        (status = 200, description = "The pipeline, now cancelled", body = PipelineView),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "Every job of it has already ended", body = ErrorBody),
    )
)]
pub(crate) async fn cancel_pipeline(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<PipelineView>, ApiError> {
    let id = path_id(id)?;
    require_writer(&caller, "cancel pipelines")?;
    visible(&state, &caller, &id).await?;
    let jobs = state.jobs().clone();
    let by = caller.describe();
    let detail = blocking(move || jobs.cancel_pipeline(&id, &by).map_err(ApiError::from)).await?;
    tracing::info!(pipeline = %detail.pipeline.id, by = %caller.token_id, "pipeline cancelled");
    Ok(Json(PipelineView::new(&detail, state.clock_view())))
}
