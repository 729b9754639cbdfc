//! `GET /v1/advice`: which quota to ask Azure for, where, and what it buys, on the server's own
//! pending work (the control loop's view: its open jobs, the quota it last read, the blocks it
//! learnt), each increase confirmed by solving again with it. The body is the one
//! `spillway advise --output json` prints for every source ([`AdviceReport`]).
//!
//! Any token that may read jobs may read it (admin, submitter, viewer). Quota is the cluster's,
//! so every caller sees the same increases; a tenant-bound token sees only its own jobs among the
//! jobs each increase would place or move.

use axum::Extension;
use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ErrorBody, blocking};
use super::handlers::query;
use crate::advice::{AdviceReport, MANAGEMENT_ENDPOINT, SUBSCRIPTION_PLACEHOLDER};
use crate::control::DemandPart;

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
