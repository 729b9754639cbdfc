//! Tenants' budgets over the API (`PUT /v1/tenants/{name}/budget`, admin only): what the control
//! loop holds a tenant's new work to (a tenant at or over its budget gets no new placements), and
//! what the dashboard's cost view shows as left.

use axum::Extension;
use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ErrorBody, blocking};
use super::handlers::{parse_json, read_body};
use crate::model::FieldErrors;

/// Largest budget accepted, USD: far above any real budget, low enough that sums stay exact.
const MAX_BUDGET_USD: f64 = 1e12;

/// Body of `PUT /v1/tenants/{name}/budget`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetBudget {
    /// The budget in USD (0 to 10^12), or null for no budget. Counted against everything the
    /// tenant has spent, including before the budget was set.
    #[schema(minimum = 0, maximum = 1_000_000_000_000.0)]
    pub budget_usd: Option<f64>,
}

/// A tenant's budget as set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BudgetView {
    /// The tenant.
    pub tenant: String,
    /// The budget, USD; null when unlimited.
    pub budget_usd: Option<f64>,
    /// USD spent by the tenant's jobs in all.
    pub spent_usd: f64,
    /// Budget minus spent (negative once over); null when unlimited.
    pub left_usd: Option<f64>,
}

/// Sets or clears a tenant's budget (admin only). The tenant need not have jobs yet.
#[utoipa::path(
    put, path = "/v1/tenants/{name}/budget", tag = "tenants", request_body = SetBudget,
    params(("name" = String, Path, description = "Tenant name (letters, digits, '-', '_', '.'; at most 63)")),
    responses(
        (status = 200, description = "The budget as set", body = BudgetView),
        (status = 400, description = "Empty body or malformed JSON", body = ErrorBody),
        (status = 403, description = "Not an admin token", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 422, description = "Invalid tenant name or budget; every problem names its field", body = ErrorBody),
        (status = 503, description = "Store unavailable; nothing was changed", body = ErrorBody),
    )
)]
pub(crate) async fn set_budget(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    name: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<BudgetView>, ApiError> {
    if !caller.is_admin() {
        return Err(ApiError::forbidden(format!(
            "only an admin token may set budgets (this is a {} token)",
            caller.role.as_str()
        )));
    }
    let name = name.map(|Path(v)| v).map_err(|e| ApiError::bad_field("name", e.body_text()))?;
    let bytes = read_body(&state, &headers, body).await?;
    let value = parse_json(&bytes)?;
    let mut errors = FieldErrors::default();
    if name.trim().is_empty() || name.len() > 63 {
        errors.push("name", "a tenant name has 1 to 63 characters");
    } else if !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
        errors.push("name", "a tenant name may contain only letters, digits, '-', '_' and '.'");
    }
    if let Some(obj) = value.as_object() {
        for key in obj.keys().filter(|k| *k != "budget_usd") {
            errors.push(key.as_str(), "unknown field: the body is {\"budget_usd\": USD or null}");
        }
    }
    let req = match value.get("budget_usd") {
        _ if !value.is_object() => {
            errors.push("", "the body must be a JSON object: {\"budget_usd\": USD or null}");
            None
        }
        None => {
            errors.push("budget_usd", "required: the budget in USD, or null for none");
            None
        }
        Some(_) if !errors.0.is_empty() => None,
        Some(_) => match serde_path_to_error::deserialize::<_, SetBudget>(value) {
            Ok(r) => Some(r),
            Err(e) => {
                let path = e.path().to_string();
                errors.push(if path == "." { String::new() } else { path }, e.into_inner().to_string());
                None
            }
        },
    };
    if let Some(Some(b)) = req.as_ref().map(|r| r.budget_usd)
        && !(0.0..=MAX_BUDGET_USD).contains(&b)
    {
        errors.push("budget_usd", format!("must be between 0 and {MAX_BUDGET_USD:e} USD (null for no budget)"));
    }
    if !errors.0.is_empty() {
        return Err(ApiError::invalid(&errors));
    }
    let budget = req.and_then(|r| r.budget_usd);
    let jobs = state.jobs().clone();
    let tenant = name.clone();
    let t = blocking(move || jobs.set_tenant_budget(&tenant, budget).map_err(ApiError::from)).await?;
    tracing::info!(tenant = %t.name, budget_usd = ?t.budget_usd, by = %caller.token_id, "budget set");
    Ok(Json(BudgetView {
        tenant: t.name,
        budget_usd: t.budget_usd,
        spent_usd: t.spent_usd,
        left_usd: t.budget_usd.map(|b| b - t.spent_usd),
    }))
}
