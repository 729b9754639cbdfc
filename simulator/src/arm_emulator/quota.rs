//! `Microsoft.Quota` at 2025-09-01 on the emulated subscription: read a compute pool's limit, ask
//! for a new one, follow the request. The limits are the [`SimCloud`](crate::sim_cloud::SimCloud)'s
//! own, so a granted request shows in the Compute usages and lets fleets place.
//!
//! | route (`S` = `/subscriptions/{sub}/providers/Microsoft.Compute/locations/{region}`) | answers |
//! | --- | --- |
//! | `GET S/providers/Microsoft.Quota/quotas` | pages of `CurrentQuotaLimitBase`, one per pool the usages list |
//! | `GET S/providers/Microsoft.Quota/quotas/{resourceName}` | 200 the pool's limit; 404 `ResourceNotFound` for a pool the region does not have |
//! | `PUT S/providers/Microsoft.Quota/quotas/{resourceName}` | 202 + `Location` (`…/operationsStatus/{id}`, as the official example) + `Retry-After`; 400 `InvalidRequestContent` naming the field for a body that is not a `LimitValue` of this resource |
//! | `GET S/providers/Microsoft.Quota/operationsStatus/{id}` | 202 while the request runs, then 200 with its `QuotaRequestDetails` |
//! | `GET S/providers/Microsoft.Quota/quotaRequests/{id}` | 200 its `QuotaRequestDetails` (`InProgress` while it runs) |
//!
//! A request is decided `quota_request_seconds` (simulated) after it is filed, the way Azure's
//! automatic approval works: an increase of at most `quota_auto_approve_vcpus` over the limit is
//! granted (`Succeeded`, the limit applied); a larger one ends `Escalated` with the definition's
//! words (a support ticket is needed), nothing applied; a limit below the vCPUs in use ends
//! `Invalid`. Requests are decided when they are next read (any quota route or the usages), so
//! nothing runs in the background.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use scheduler::cloud::azure::quota::{
    CurrentQuotaLimitBase, LimitObject, QuotaProperties, QuotaRequestDetails, QuotaRequestProperties,
    QuotaRequestState, ResourceName, ServiceErrorDetail, SubRequest,
};
use scheduler::model::QuotaPool;

use super::AppState;
use super::respond::{cloud_error, err, guid, json, localized, paged, rfc3339, set_header};

const SCOPE: &str = "/subscriptions/{sub}/providers/Microsoft.Compute/locations/{region}/providers/Microsoft.Quota";

/// What the Quota API's definition says of an escalated request.
const ESCALATED: &str = "The quota request has been escalated for further review. Please file a support ticket. A support engineer will \
     follow up.";

/// One filed request.
#[derive(Debug, Clone)]
pub(crate) struct QuotaRequest {
    sub: String,
    region: String,
    pool: QuotaPool,
    limit: u64,
    submitted_ms: i64,
    decide_at_ms: i64,
    /// Set when decided: the state and its message.
    outcome: Option<(QuotaRequestState, String)>,
}

type St = State<Arc<AppState>>;
type Q = Query<HashMap<String, String>>;

/// The Quota routes, to be placed behind the ARM gate (authentication, api-version, faults).
pub(crate) fn routes(router: Router<Arc<AppState>>) -> Router<Arc<AppState>> {
    router
        .route(&format!("{SCOPE}/quotas"), get(list_quotas))
        .route(&format!("{SCOPE}/quotas/{{name}}"), get(get_quota).put(put_quota))
        .route(&format!("{SCOPE}/operationsStatus/{{id}}"), get(operation_status))
        .route(&format!("{SCOPE}/quotaRequests/{{id}}"), get(request_status))
}

/// Decides every request whose time has come: grants apply to the cloud's limits. Called by every
/// route that shows limits, so a read never sees a request decided but not applied.
pub(crate) fn settle(st: &AppState) {
    let now = st.cloud.now_ms();
    let mut requests = st.quota_requests.lock().unwrap_or_else(|p| p.into_inner());
    for r in requests.values_mut().filter(|r| r.outcome.is_none() && r.decide_at_ms <= now) {
        let (limit, usage) = st
            .cloud
            .quota_of(&r.region)
            .unwrap_or_default()
            .into_iter()
            .find(|q| q.pool == r.pool)
            .map(|q| (q.limit, q.usage))
            .unwrap_or((0, 0));
        let outcome = if r.limit < usage {
            (
                QuotaRequestState::Invalid,
                format!("The new limit {} is below the {usage} vCPUs in use for {}.", r.limit, r.pool.name()),
            )
        } else if r.limit.saturating_sub(limit) > st.cfg.quota_auto_approve_vcpus {
            (QuotaRequestState::Other("Escalated".into()), ESCALATED.to_string())
        } else {
            match st.cloud.set_quota_limit(&r.region, &r.pool, r.limit) {
                Ok(()) => (QuotaRequestState::Succeeded, "Request completed".to_string()),
                Err(e) => (QuotaRequestState::Failed, e.to_string()),
            }
        };
        r.outcome = Some(outcome);
    }
}

fn quota_body(sub: &str, region: &str, pool: &QuotaPool, limit: u64) -> CurrentQuotaLimitBase {
    let name = pool.name().to_string();
    CurrentQuotaLimitBase {
        id: Some(format!(
            "/subscriptions/{sub}/providers/Microsoft.Compute/locations/{region}/providers/Microsoft.Quota/quotas/{name}"
        )),
        name: Some(name.clone()),
        resource_type: Some("Microsoft.Quota/Quotas".into()),
        properties: Some(QuotaProperties {
            limit: Some(LimitObject::value(limit)),
            unit: Some("Count".into()),
            name: Some(ResourceName { value: Some(name), localized_value: Some(localized(pool)) }),
            is_quota_applicable: Some(true),
            ..QuotaProperties::default()
        }),
    }
}

/// The region's pools and limits, or the error the usages route gives for it.
fn pools(st: &AppState, region: &str) -> Result<Vec<scheduler::model::Quota>, Box<Response>> {
    settle(st);
    st.cloud.quota_of(region).map_err(|e| Box::new(cloud_error(&e)))
}

async fn list_quotas(State(st): St, Path((sub, region)): Path<(String, String)>, uri: Uri, Query(q): Q) -> Response {
    match pools(&st, &region) {
        Ok(rows) => {
            let items: Vec<CurrentQuotaLimitBase> =
                rows.iter().map(|r| quota_body(&sub, &region, &r.pool, r.limit)).collect();
            paged(&st, &uri, &q, &items)
        }
        Err(resp) => *resp,
    }
}

fn no_such_pool(region: &str, name: &str) -> Response {
    err(
        StatusCode::NOT_FOUND,
        "ResourceNotFound",
        format!("The quota resource '{name}' was not found for Microsoft.Compute in location '{region}'."),
    )
}

async fn get_quota(State(st): St, Path((sub, region, name)): Path<(String, String, String)>) -> Response {
    match pools(&st, &region) {
        Ok(rows) => match rows.iter().find(|r| r.pool.name().eq_ignore_ascii_case(&name)) {
            Some(r) => json(StatusCode::OK, &quota_body(&sub, &region, &r.pool, r.limit)),
            None => no_such_pool(&region, &name),
        },
        Err(resp) => *resp,
    }
}

fn bad_body(message: impl Into<String>) -> Response {
    err(StatusCode::BAD_REQUEST, "InvalidRequestContent", message)
}

async fn put_quota(
    State(st): St,
    Path((sub, region, name)): Path<(String, String, String)>,
    Query(q): Q,
    body: Bytes,
) -> Response {
    let rows = match pools(&st, &region) {
        Ok(rows) => rows,
        Err(resp) => return *resp,
    };
    let Some(pool) = rows.iter().find(|r| r.pool.name().eq_ignore_ascii_case(&name)).map(|r| r.pool.clone()) else {
        return no_such_pool(&region, &name);
    };
    let de = &mut serde_json::Deserializer::from_slice(&body);
    let request: CurrentQuotaLimitBase = match serde_path_to_error::deserialize(de) {
        Ok(r) => r,
        Err(e) => return bad_body(format!("The request content is not valid at '{}': {}", e.path(), e.inner())),
    };
    let Some(props) = request.properties.as_ref() else {
        return bad_body("The request content has no 'properties'.");
    };
    let Some(limit) = props.limit.as_ref() else {
        return bad_body("The request content has no 'properties.limit'.");
    };
    if limit.limit_object_type != "LimitValue" {
        return bad_body(format!(
            "'properties.limit.limitObjectType' must be 'LimitValue', not '{}'.",
            limit.limit_object_type
        ));
    }
    let Ok(value) = u64::try_from(limit.value) else {
        return bad_body(format!("'properties.limit.value' must not be negative ({}).", limit.value));
    };
    if let Some(named) = request.resource_name()
        && !named.eq_ignore_ascii_case(pool.name())
    {
        return bad_body(format!(
            "'properties.name.value' is '{named}' but the request is for the resource '{}'.",
            pool.name()
        ));
    }
    let now = st.cloud.now_ms();
    let id = guid(st.cfg.faults.seed ^ 0x0051_554f_5441, st.next_monitor.fetch_add(1, Ordering::Relaxed));
    let wait_ms = i64::try_from(st.cfg.quota_request_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
    st.quota_requests.lock().unwrap_or_else(|p| p.into_inner()).insert(
        id.clone(),
        QuotaRequest {
            sub: sub.clone(),
            region: region.clone(),
            pool,
            limit: value,
            submitted_ms: now,
            decide_at_ms: now.saturating_add(wait_ms),
            outcome: None,
        },
    );
    let version = q.get("api-version").cloned().unwrap_or_default();
    let mut resp = StatusCode::ACCEPTED.into_response();
    set_header(
        &mut resp,
        "location",
        &format!(
            "{}/subscriptions/{sub}/providers/Microsoft.Compute/locations/{region}/providers/Microsoft.Quota/\
             operationsStatus/{id}?api-version={version}",
            st.base_url
        ),
    );
    set_header(&mut resp, "retry-after", &st.cfg.retry_after_seconds.to_string());
    resp
}

fn details(id: &str, r: &QuotaRequest) -> QuotaRequestDetails {
    let (state, message) = r.outcome.clone().unwrap_or((QuotaRequestState::InProgress, "Request in progress".into()));
    let failed = matches!(state, QuotaRequestState::Failed | QuotaRequestState::Invalid);
    QuotaRequestDetails {
        id: Some(format!(
            "/subscriptions/{}/providers/Microsoft.Compute/locations/{}/providers/Microsoft.Quota/quotaRequests/{id}",
            r.sub, r.region
        )),
        name: Some(id.to_string()),
        resource_type: Some("Microsoft.Quota/quotaRequests".into()),
        properties: Some(QuotaRequestProperties {
            provisioning_state: Some(state.clone()),
            message: Some(message.clone()),
            error: failed.then(|| ServiceErrorDetail {
                code: Some(
                    if state == QuotaRequestState::Invalid { "InvalidQuotaLimit" } else { "QuotaRequestFailed" }.into(),
                ),
                message: Some(message.clone()),
            }),
            request_submit_time: Some(rfc3339(r.submitted_ms)),
            value: vec![SubRequest {
                name: Some(ResourceName {
                    value: Some(r.pool.name().to_string()),
                    localized_value: Some(localized(&r.pool)),
                }),
                unit: Some("Count".into()),
                provisioning_state: Some(state),
                message: Some(message),
                limit: Some(LimitObject::value(r.limit)),
            }],
        }),
    }
}

fn find(st: &AppState, region: &str, id: &str) -> Option<QuotaRequest> {
    settle(st);
    let requests = st.quota_requests.lock().unwrap_or_else(|p| p.into_inner());
    requests.get(id).filter(|r| r.region.eq_ignore_ascii_case(region)).cloned()
}

fn no_such_request(id: &str) -> Response {
    err(StatusCode::NOT_FOUND, "ResourceNotFound", format!("The quota request '{id}' was not found."))
}

async fn operation_status(State(st): St, Path((_sub, region, id)): Path<(String, String, String)>) -> Response {
    match find(&st, &region, &id) {
        None => no_such_request(&id),
        Some(r) if r.outcome.is_none() => {
            let mut resp = StatusCode::ACCEPTED.into_response();
            set_header(&mut resp, "retry-after", &st.cfg.retry_after_seconds.to_string());
            resp
        }
        Some(r) => json(StatusCode::OK, &details(&id, &r)),
    }
}

async fn request_status(State(st): St, Path((_sub, region, id)): Path<(String, String, String)>) -> Response {
    match find(&st, &region, &id) {
        None => no_such_request(&id),
        Some(r) => json(StatusCode::OK, &details(&id, &r)),
    }
}
