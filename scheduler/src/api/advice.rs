//! `GET /v1/advice`: which quota to ask Azure for, where, and what it buys, on the server's own
//! pending work (the control loop's view: its open jobs, the quota it last read, the blocks it
//! learnt), each increase confirmed by solving again with it. The body is the one
//! `spillway advise --output json` prints for every source ([`AdviceReport`]).
//!
//! Any token that may read jobs may read it (admin, submitter, viewer). Quota is the cluster's,
//! so every caller sees the same increases; a tenant-bound token sees only its own jobs among the
//! jobs each increase would place or move.
//!
//! `POST /v1/advice/requests` files one of the advice's requests with Azure (admin only, a
//! server that drives Azure): the subscription's quota is changed for everyone, and a request
//! Azure escalates opens a support case, so no other role may. It answers 202 at once with the
//! request's record; the leader drives it to its end in the background
//! ([`crate::quota_requests`]), and `GET /v1/advice/requests[/{id}]` reads it.

use axum::Extension;
use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ErrorBody, blocking};
use super::handlers::{parse_json, path_id, query, read_body};
use crate::advice::{AdviceReport, KnownPools, MANAGEMENT_ENDPOINT, SUBSCRIPTION_PLACEHOLDER};
use crate::control::DemandPart;
use crate::model::FieldErrors;
use crate::quota_requests::{QuotaRequest, QuotaRequests};

/// Recommendations at most, when `max` is not given (as `spillway advise`).
const DEFAULT_MAX: usize = 5;
/// The largest `max` accepted: each recommendation costs a few dozen solves.
const MAX_MAX: usize = 20;

/// Query of `GET /v1/advice`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct AdviceQuery {
    /// At most this many recommendations (1 to 20, default 5).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 20)]
    max: Option<String>,
}

/// Quota advice on the pending work: a ranked list of quota increases (region, pool, current
/// limit, increase in grant steps), what each buys (GPUs, GPU-hours, priority weight, jobs, cost
/// change) and its alternatives, the plan before and after them all, and for each pool the
/// `Microsoft.Quota` request and `az quota update` command that files it.
#[utoipa::path(
    get, path = "/v1/advice", tag = "cluster", params(AdviceQuery),
    responses(
        (status = 200, description = "The advice (an empty list: no quota increase would place more work)", body = AdviceReport),
        (status = 400, description = "A bad `max`", body = ErrorBody),
        (status = 503, body = ErrorBody)
    )
)]
pub(crate) async fn advice(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    q: Result<Query<AdviceQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let max = match q.max.as_deref().map(str::trim) {
        None => DEFAULT_MAX,
        Some(m) => match m.parse::<usize>() {
            Ok(n) if (1..=MAX_MAX).contains(&n) => n,
            _ => {
                return Err(ApiError::bad_field(
                    "max",
                    format!("{m:?} is not a number of recommendations: give a whole number from 1 to {MAX_MAX}"),
                ));
            }
        },
    };
    let advice = state
        .controller()
        .advise(max)
        .await
        .map_err(|e| ApiError::unavailable(format!("cannot compute the advice now ({e}); retry later")))?;
    let (endpoint, subscription) = match state.quota_filing() {
        Some((e, s)) => (e.clone(), s.clone()),
        None => (MANAGEMENT_ENDPOINT.to_string(), SUBSCRIPTION_PLACEHOLDER.to_string()),
    };
    let mut report = AdviceReport::new("server", advice, &endpoint, &subscription);
    if let Some(tenant) = caller.tenant.clone() {
        let named: std::collections::BTreeSet<String> = report
            .recommendations
            .iter()
            .flat_map(|r| r.buys.jobs.iter().chain(r.buys.moves.iter().map(|m| &m.job)))
            .map(|id| DemandPart::parse(id).0.to_string())
            .collect();
        let jobs = state.jobs().clone();
        let mine = blocking(move || -> Result<std::collections::BTreeSet<String>, ApiError> {
            let mut mine = std::collections::BTreeSet::new();
            for id in named {
                if jobs.get(&id)?.is_some_and(|j| j.spec.tenant == tenant) {
                    mine.insert(id);
                }
            }
            Ok(mine)
        })
        .await?;
        let is_mine = |id: &String| mine.contains(DemandPart::parse(id).0);
        for r in &mut report.recommendations {
            r.buys.jobs.retain(is_mine);
            r.buys.moves.retain(|m| is_mine(&m.job));
            // The notes name other tenants' moves.
            r.buys.notes.clear();
        }
    }
    Ok(Json(report).into_response())
}

/// Body of `POST /v1/advice/requests`: one quota increase to file with Azure, as a request of the
/// advice names it (`requests[i]` of `GET /v1/advice`).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuotaRequestBody {
    /// Region.
    pub region: String,
    /// The pool: `cores`, `lowPriorityCores` or a VM family, in any spelling Azure uses (the
    /// request is filed in the Quota API's).
    pub resource_name: String,
    /// vCPUs to add to the limit Azure reports when the request is filed.
    #[schema(minimum = 1, maximum = 2_147_483_647)]
    pub increase_vcpus: u64,
}

/// The largest limit the Quota API takes (its limits are int32).
const MAX_LIMIT: u64 = i32::MAX as u64;

/// Files one quota increase with Azure (`Microsoft.Quota`) under this server's `[azure]`
/// subscription, admin only, and answers at once (202) with the request's record in state
/// `submitted`: Azure may take up to half an hour to decide. The leader then reads the pool's limit,
/// asks for it raised by `increase_vcpus`, and follows the request to `granted` or `failed`
/// (refused, escalated to a support ticket, or Azure could not be asked; `error` says why, in
/// Azure's words); `GET /v1/advice/requests/{id}` reads it. The filing, the grant and the failure
/// are each a cluster event (`quota_requested`, `quota_granted`, `quota_request_failed`) naming who
/// filed it. One request per call, so that each increase is confirmed on its own (`spillway
/// advise --url --apply` sends the advice's requests one by one).
#[utoipa::path(
    post, path = "/v1/advice/requests", tag = "cluster", request_body = QuotaRequestBody,
    responses(
        (status = 202, description = "Accepted: the request's record, `submitted`; poll `GET /v1/advice/requests/{id}` for Azure's answer", body = QuotaRequest,
         headers(("Location" = String, description = "The request's URL"))),
        (status = 400, description = "Empty body or malformed JSON", body = ErrorBody),
        (status = 403, description = "Not an admin token", body = ErrorBody),
        (status = 409, description = "This server does not drive Azure (a simulated cloud has no quota to file)", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 422, description = "An unknown region or pool, or a bad increase; every problem names its field", body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
pub(crate) async fn file_request(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    if !caller.is_admin() {
        return Err(ApiError::forbidden(format!(
            "only an admin token may file quota requests with Azure (this is a {} token)",
            caller.role.as_str()
        )));
    }
    let bytes = read_body(&state, &headers, body).await?;
    let value = parse_json(&bytes)?;
    let known = KnownPools::from_catalog(&state.controller().catalog);
    let mut errors = FieldErrors::default();
    let req = match serde_path_to_error::deserialize::<_, QuotaRequestBody>(value) {
        Ok(r) => Some(r),
        Err(e) => {
            let path = e.path().to_string();
            errors.push(if path == "." { String::new() } else { path }, e.into_inner().to_string());
            None
        }
    };
    let mut pool = None;
    if let Some(r) = &req {
        known.check_fields(&mut errors, ("region", &r.region), ("resource_name", &r.resource_name));
        pool = known.pool(&r.resource_name);
        if !(1..=MAX_LIMIT).contains(&r.increase_vcpus) {
            errors.push("increase_vcpus", format!("must be a whole number of vCPUs from 1 to {MAX_LIMIT}"));
        }
    }
    let (Some(req), Some(pool), true) = (req, pool, errors.0.is_empty()) else {
        return Err(ApiError::invalid(&errors));
    };
    let Some(requests) = state.quota_requests().cloned() else {
        return Err(ApiError::conflict(
            "this server drives a simulated cloud: there is no Azure subscription to file quota requests with \
             (serve --cloud azure files them under its [azure] settings)",
        ));
    };
    let name = pool.name().to_string();
    let by = caller.describe();
    let filed =
        blocking(move || requests.submit(&req.region, &name, req.increase_vcpus, &by).map_err(ApiError::from)).await?;
    tracing::info!(request = %filed.id, region = %filed.region, pool = %filed.resource_name,
        increase = filed.increase_vcpus, by = %caller.token_id, "quota request filed");
    let location = format!("/v1/advice/requests/{}", filed.id);
    Ok((StatusCode::ACCEPTED, [(axum::http::header::LOCATION, location)], Json(filed)).into_response())
}

/// The quota requests of this server, or 403 for a tenant-bound token: they are the cluster's,
/// like the `quota_*` events only unbound tokens see.
fn readable_requests(state: &ApiState, caller: &Caller) -> Result<QuotaRequests, ApiError> {
    if caller.tenant.is_some() {
        return Err(ApiError::forbidden(
            "quota requests are the cluster's: a token bound to a tenant may not read them",
        ));
    }
    state.quota_requests().cloned().ok_or_else(|| {
        ApiError::conflict("this server drives a simulated cloud: it files no quota requests with Azure")
    })
}

/// The quota requests filed with Azure, newest first, each as `GET /v1/advice/requests/{id}`
/// shows it (tokens bound to no tenant).
#[utoipa::path(
    get, path = "/v1/advice/requests", tag = "cluster",
    responses(
        (status = 200, description = "Every request, newest first", body = [QuotaRequest]),
        (status = 403, description = "A tenant-bound token", body = ErrorBody),
        (status = 409, description = "This server does not drive Azure", body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
pub(crate) async fn list_requests(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Vec<QuotaRequest>>, ApiError> {
    let requests = readable_requests(&state, &caller)?;
    Ok(Json(blocking(move || requests.list().map_err(ApiError::from)).await?))
}

/// One quota request: `submitted` while Azure decides, then `granted` (with the limit now in
/// effect) or `failed` (with Azure's message in `error`).
#[utoipa::path(
    get, path = "/v1/advice/requests/{id}", tag = "cluster",
    params(("id" = String, Path, description = "The request's id (`q-…`), as `POST /v1/advice/requests` answered")),
    responses(
        (status = 200, description = "The request", body = QuotaRequest),
        (status = 403, description = "A tenant-bound token", body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "This server does not drive Azure", body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
pub(crate) async fn get_request(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<QuotaRequest>, ApiError> {
    let id = path_id(id)?;
    let requests = readable_requests(&state, &caller)?;
    let key = id.clone();
    let found = blocking(move || requests.get(&key).map_err(ApiError::from)).await?;
    found.map(Json).ok_or_else(|| ApiError::not_found(format!("no quota request {id}")))
}
