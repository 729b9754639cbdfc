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
//! Azure escalates opens a support case, so no other role may.

use axum::Extension;
use axum::Json;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ErrorBody, blocking};
use super::handlers::{parse_json, query, read_body};
use crate::advice::{AdviceReport, KnownPools, MANAGEMENT_ENDPOINT, SUBSCRIPTION_PLACEHOLDER};
use crate::cloud::azure::quota::QuotaRequestOutcome;
use crate::control::DemandPart;
use crate::model::FieldErrors;

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

/// How one filed quota request ended ([`QuotaRequestOutcome`] on the wire).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct QuotaRequestView {
    /// Region.
    pub region: String,
    /// The Quota API's resource name.
    pub resource_name: String,
    /// The limit before the request, vCPUs (as Azure reported it).
    pub limit_before: u64,
    /// The limit asked for, vCPUs.
    pub requested_limit: u64,
    /// How the request ended: `Succeeded`, `Failed`, `Invalid`, or Azure's own word (`Escalated`:
    /// a support ticket is needed).
    pub state: String,
    /// Azure's message, when it gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The limit in effect afterwards, vCPUs.
    pub limit_after: u64,
    /// The request's id at Azure, when it named one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl From<QuotaRequestOutcome> for QuotaRequestView {
    fn from(o: QuotaRequestOutcome) -> QuotaRequestView {
        QuotaRequestView {
            region: o.region,
            resource_name: o.resource_name,
            limit_before: o.limit_before,
            requested_limit: o.requested_limit,
            state: o.state.as_str().to_string(),
            message: o.message,
            limit_after: o.limit_after,
            request_id: o.request_id,
        }
    }
}

/// The largest limit the Quota API takes (its limits are int32).
const MAX_LIMIT: u64 = i32::MAX as u64;

/// Files one quota increase with Azure (`Microsoft.Quota`) under this server's `[azure]`
/// subscription, admin only: the pool's limit as Azure reports it now, raised by
/// `increase_vcpus`, and the request followed to its answer (granted, failed, or escalated to a
/// support ticket). One request per call, so that each increase is confirmed on its own
/// (`spillway advise --url --apply` sends the advice's requests one by one).
#[utoipa::path(
    post, path = "/v1/advice/requests", tag = "cluster", request_body = QuotaRequestBody,
    responses(
        (status = 200, description = "Filed; how Azure answered (a refusal or an escalation is an answer, not an error)", body = QuotaRequestView),
        (status = 400, description = "Empty body or malformed JSON", body = ErrorBody),
        (status = 403, description = "Not an admin token", body = ErrorBody),
        (status = 409, description = "This server does not drive Azure (a simulated cloud has no quota to file)", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 422, description = "An unknown region or pool, or a bad increase; every problem names its field", body = ErrorBody),
        (status = 502, description = "Azure refused or failed the call itself (authorization, transport)", body = ErrorBody),
    )
)]
pub(crate) async fn file_request(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<QuotaRequestView>, ApiError> {
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
    let Some(azure) = state.quota_requests() else {
        return Err(ApiError::conflict(
            "this server drives a simulated cloud: there is no Azure subscription to file quota requests with \
             (serve --cloud azure files them under its [azure] settings)",
        ));
    };
    let name = pool.name().to_string();
    tracing::info!(region = %req.region, pool = %name, increase = req.increase_vcpus, by = %caller.token_id,
        "filing a quota request");
    let outcome = azure.raise_quota_limit(&req.region, &name, req.increase_vcpus).await.map_err(|e| {
        ApiError::new(
            axum::http::StatusCode::BAD_GATEWAY,
            format!("Azure did not take the request for {name} in {}: {e}", req.region),
        )
    })?;
    tracing::info!(region = %req.region, pool = %name, state = outcome.state.as_str(), limit = outcome.limit_after,
        "quota request answered");
    Ok(Json(outcome.into()))
}
