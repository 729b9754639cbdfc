//! Routes and handlers of the ARM emulator.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{MatchedPath, Path, Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rand::Rng;
use scheduler::cloud::azure::models::{
    ApiError, ComputeProfile, ErrorDetail, ErrorResponse, Fleet as ArmFleet, FleetProperties,
    OperationState as ArmOpState, OperationStatusResult, Page, RegularPriorityProfile, ResourceSku,
    ResourceSkuCapability, ResourceSkuLocationInfo, ResourceSkuRestriction, ResourceSkuRestrictionInfo,
    RestrictionReasonCode, RestrictionType, SpotPriorityProfile, Usage, UsageName, VirtualMachineScaleSet,
    VmSizeProfile,
};
use scheduler::cloud::{Cloud, CloudError, FleetRequest};
use scheduler::model::{Priority, QuotaPool};
use serde::Serialize;

use super::errors::{ArmErrorContext, arm_error};
use super::{AppState, FLEET_API_VERSION, StoredFleet, take_budget};
use crate::sim_cloud::{CreateOptions, FleetSnapshot, OPERATION_URL_PREFIX, OperationState};

const FLEETS_RG: &str = "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.AzureFleet/fleets";
const FLEET_TYPE: &str = "Microsoft.AzureFleet/fleets";

/// A fault injected into a response, for the request log.
#[derive(Clone, Copy)]
struct InjectedFault(&'static str);

type St = State<Arc<AppState>>;
type Q = Query<HashMap<String, String>>;

pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route(&format!("{FLEETS_RG}/{{name}}"), get(get_fleet).put(put_fleet).delete(delete_fleet))
        .route(FLEETS_RG, get(list_rg))
        .route("/subscriptions/{sub}/providers/Microsoft.AzureFleet/fleets", get(list_sub))
        .route(&format!("{FLEETS_RG}/{{name}}/virtualMachineScaleSets"), get(scale_sets))
        .route(
            "/subscriptions/{sub}/providers/Microsoft.AzureFleet/locations/{region}/operationStatuses/{op}",
            get(op_status),
        )
        .route(
            "/subscriptions/{sub}/providers/Microsoft.AzureFleet/locations/{region}/operationResults/{op}",
            get(op_result),
        )
        .route("/subscriptions/{sub}/providers/Microsoft.Compute/locations/{region}/usages", get(usages))
        .route("/subscriptions/{sub}/providers/Microsoft.Compute/skus", get(skus))
        .route_layer(middleware::from_fn_with_state(state.clone(), gate))
        .route("/_emulator/stats", get(stats))
        .fallback(fallback)
        .with_state(state)
}

fn error_response(status: StatusCode, error: ErrorDetail) -> Response {
    (status, axum::Json(ErrorResponse { error })).into_response()
}

fn err(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    error_response(status, ErrorDetail::new(code, message))
}

fn json<T: Serialize>(status: StatusCode, body: &T) -> Response {
    (status, axum::Json(body)).into_response()
}

fn set_header(resp: &mut Response, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().insert(name, v);
    }
}

fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_default()
}

/// Authentication, subscription, api-version, fault injection, rate-limit headers and counting:
/// everything every ARM route shares.
async fn gate(State(st): St, matched: MatchedPath, req: Request, next: Next) -> Response {
    let route = matched.as_str().to_string();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let mut resp = gate_inner(&st, &route, req, next).await;
    let budget = match method {
        Method::GET => Some(("x-ms-ratelimit-remaining-subscription-reads", take_budget(&st.reads_left))),
        Method::PUT => Some(("x-ms-ratelimit-remaining-subscription-writes", take_budget(&st.writes_left))),
        Method::DELETE => Some(("x-ms-ratelimit-remaining-subscription-deletes", take_budget(&st.deletes_left))),
        _ => None,
    };
    if let Some((name, left)) = budget {
        set_header(&mut resp, name, &left.to_string());
    }
    let fault = resp.extensions().get::<InjectedFault>().map(|f| f.0);
    st.record(method.as_str(), &route, &path, resp.status().as_u16(), fault);
    resp
}

async fn gate_inner(st: &AppState, route: &str, req: Request, next: Next) -> Response {
    let faults = &st.cfg.faults;
    // One draw of each kind per request, whatever the outcome, so a request's faults depend only
    // on its position in the sequence.
    let (latency, throttle, error) = {
        let mut rng = st.rng.lock().unwrap_or_else(|p| p.into_inner());
        let (lo, hi) = faults.latency_ms;
        (rng.random_range(lo..=hi), rng.random::<f64>(), rng.random::<f64>())
    };
    if latency > 0 {
        tokio::time::sleep(Duration::from_millis(latency)).await;
    }
    let auth = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let problem = match auth {
        None => Some("The 'Authorization' header is missing."),
        Some(v) => match v.strip_prefix("Bearer ") {
            Some(t) if t == st.cfg.token => None,
            Some(_) => Some("The access token is invalid."),
            None => Some("The 'Authorization' header is not a bearer token."),
        },
    };
    if let Some(p) = problem {
        let mut resp = err(StatusCode::UNAUTHORIZED, "AuthenticationFailed", format!("Authentication failed. {p}"));
        set_header(&mut resp, "www-authenticate", "Bearer error=\"invalid_token\"");
        return resp;
    }
    if throttle < faults.throttle_rate {
        let mut resp = err(
            StatusCode::TOO_MANY_REQUESTS,
            "TooManyRequests",
            "The request is being throttled as the limit has been reached for operation type. Retry after the time \
             in the Retry-After header.",
        );
        set_header(&mut resp, "retry-after", &faults.throttle_retry_after_seconds.to_string());
        resp.extensions_mut().insert(InjectedFault("throttled"));
        return resp;
    }
    if error < faults.error_rate {
        let mut resp =
            err(StatusCode::INTERNAL_SERVER_ERROR, "InternalServerError", "The server encountered an internal error.");
        resp.extensions_mut().insert(InjectedFault("error"));
        return resp;
    }
    let sub = req.uri().path().split('/').nth(2).unwrap_or_default();
    if sub != st.cfg.subscription {
        return err(
            StatusCode::NOT_FOUND,
            "SubscriptionNotFound",
            format!("The subscription '{sub}' could not be found."),
        );
    }
    let supported = if route.contains("Microsoft.AzureFleet") {
        &st.cfg.fleet_api_versions
    } else if route.ends_with("/usages") {
        &st.cfg.usage_api_versions
    } else {
        &st.cfg.sku_api_versions
    };
    let query: HashMap<String, String> =
        Query::<HashMap<String, String>>::try_from_uri(req.uri()).map(|q| q.0).unwrap_or_default();
    match query.get("api-version") {
        None => {
            return err(
                StatusCode::BAD_REQUEST,
                "MissingApiVersionParameter",
                "The api-version query parameter (?api-version=) is required for all requests.",
            );
        }
        Some(v) if !supported.contains(v) => {
            return err(
                StatusCode::BAD_REQUEST,
                "InvalidApiVersionParameter",
                format!("The api-version '{v}' is invalid. The supported versions are '{}'.", supported.join(",")),
            );
        }
        Some(_) => {}
    }
    next.run(req).await
}

async fn fallback(uri: Uri) -> Response {
    err(
        StatusCode::NOT_FOUND,
        "InvalidResourceType",
        format!("The resource type could not be found for '{}'.", uri.path()),
    )
}

async fn stats(State(st): St) -> Response {
    json(StatusCode::OK, &st.stats())
}

// ---- paging ----

/// One page of `items` per `$skipToken`, with an absolute `nextLink` that keeps the other query
/// parameters as the client sent them.
fn paged<T: Serialize + Clone>(st: &AppState, uri: &Uri, q: &HashMap<String, String>, items: &[T]) -> Response {
    let skip = match q.get("$skipToken").map(|s| s.parse::<usize>()) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => return err(StatusCode::BAD_REQUEST, "InvalidSkipToken", "The $skipToken is not valid."),
    };
    let start = skip.min(items.len());
    let end = start.saturating_add(st.cfg.page_size).min(items.len());
    let next_link = (end < items.len()).then(|| {
        let mut params: Vec<&str> = uri
            .query()
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty() && !p.starts_with("$skipToken=") && !p.starts_with("%24skipToken="))
            .collect();
        let token = format!("$skipToken={end}");
        params.push(&token);
        format!("{}{}?{}", st.base_url, uri.path(), params.join("&"))
    });
    json(StatusCode::OK, &Page { value: items[start..end].to_vec(), next_link })
}

// ---- fleets ----

fn resource_group_of(st: &AppState, name: &str) -> String {
    let stored = st.fleets.lock().unwrap_or_else(|p| p.into_inner());
    stored.get(name).map(|s| s.resource_group.clone()).unwrap_or_else(|| st.cfg.resource_group.clone())
}

fn unique_id(name: &str, created_ms: i64) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes().chain(created_ms.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let h2 = h.rotate_left(29) ^ 0x9e37_79b9_7f4a_7c15;
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        h >> 32,
        (h >> 16) & 0xffff,
        h & 0xfff,
        h2 >> 52,
        h2 & 0xffff_ffff_ffff
    )
}

/// The fleet resource as ARM returns it: the PUT body (or, for fleets made on the SimCloud
/// directly, one built from its state) with the read-only fields filled in.
fn fleet_resource(st: &AppState, sub: &str, snap: &FleetSnapshot) -> ArmFleet {
    let stored = st.fleets.lock().unwrap_or_else(|p| p.into_inner()).get(&snap.name).cloned();
    let rg = stored.as_ref().map(|s| s.resource_group.clone()).unwrap_or_else(|| st.cfg.resource_group.clone());
    let mut body = stored.map(|s| s.body).unwrap_or_else(|| synthesize(snap));
    body.id = Some(format!("/subscriptions/{sub}/resourceGroups/{rg}/providers/{FLEET_TYPE}/{}", snap.name));
    body.name = Some(snap.name.clone());
    body.resource_type = Some(FLEET_TYPE.into());
    let props = body.properties.get_or_insert_with(FleetProperties::default);
    props.provisioning_state = Some(snap.state.clone());
    props.time_created = Some(rfc3339(snap.created_ms));
    props.unique_id = Some(unique_id(&snap.name, snap.created_ms));
    body
}

fn synthesize(snap: &FleetSnapshot) -> ArmFleet {
    let (spot, regular) = match snap.priority {
        Priority::Spot => (
            Some(SpotPriorityProfile {
                capacity: Some(snap.capacity_vms),
                min_capacity: Some(snap.min_capacity_vms),
                maintain: Some(snap.maintain),
                ..SpotPriorityProfile::default()
            }),
            None,
        ),
        Priority::Regular => (
            None,
            Some(RegularPriorityProfile {
                capacity: Some(snap.capacity_vms),
                min_capacity: Some(snap.min_capacity_vms),
                ..RegularPriorityProfile::default()
            }),
        ),
    };
    ArmFleet {
        location: snap.region.clone(),
        tags: snap.tags.clone(),
        properties: Some(FleetProperties {
            spot_priority_profile: spot,
            regular_priority_profile: regular,
            vm_sizes_profile: snap
                .sizes
                .iter()
                .enumerate()
                .map(|(i, s)| VmSizeProfile { name: s.clone(), rank: u32::try_from(i).ok() })
                .collect(),
            compute_profile: Some(ComputeProfile {
                base_virtual_machine_profile: serde_json::json!({}),
                ..ComputeProfile::default()
            }),
            ..FleetProperties::default()
        }),
        ..ArmFleet::default()
    }
}

/// Reads a PUT body into the request SimCloud understands, and the fleet's `maintain`.
fn fleet_request(name: &str, body: &ArmFleet) -> Result<(FleetRequest, bool), String> {
    if body.location.trim().is_empty() {
        return Err("location is required.".into());
    }
    let props = body.properties.as_ref().ok_or("properties is required.")?;
    if props.additional_locations_profile.as_ref().is_some_and(|a| !a.location_profiles.is_empty()) {
        return Err("additionalLocationsProfile is not supported by this emulator: a fleet has one region.".into());
    }
    let spot = props.spot_priority_profile.as_ref();
    let regular = props.regular_priority_profile.as_ref();
    let spot_cap = spot.and_then(|p| p.capacity).unwrap_or(0);
    let regular_cap = regular.and_then(|p| p.capacity).unwrap_or(0);
    if spot_cap > 0 && regular_cap > 0 {
        return Err("this emulator runs one priority per fleet: give capacity to either spotPriorityProfile or \
                    regularPriorityProfile, not both."
            .into());
    }
    if spot.is_none() && regular.is_none() {
        return Err("one of spotPriorityProfile or regularPriorityProfile is required.".into());
    }
    let use_spot = spot_cap > 0 || (regular_cap == 0 && regular.is_none());
    let (priority, vms, min_vms, max_price, maintain) = if use_spot {
        let p = spot.expect("use_spot implies a spot profile");
        (Priority::Spot, spot_cap, p.min_capacity.unwrap_or(0), p.max_price_per_vm, p.maintain.unwrap_or(true))
    } else {
        let p = regular.expect("not spot implies a regular profile");
        (Priority::Regular, regular_cap, p.min_capacity.unwrap_or(0), None, true)
    };
    if props.vm_sizes_profile.is_empty() {
        return Err("vmSizesProfile must name at least one VM size.".into());
    }
    let mut ranked: Vec<&VmSizeProfile> = props.vm_sizes_profile.iter().collect();
    ranked.sort_by_key(|p| p.rank.unwrap_or(u32::MAX));
    Ok((
        FleetRequest {
            name: name.to_string(),
            region: body.location.clone(),
            priority,
            sizes: ranked.iter().map(|p| p.name.clone()).collect(),
            vms,
            min_vms,
            max_price_per_vm: max_price,
            zones: body.zones.clone().unwrap_or_default(),
            tags: body.tags.clone(),
        },
        maintain,
    ))
}

fn op_status_url(st: &AppState, sub: &str, region: &str, op_id: &str) -> String {
    format!(
        "{}/subscriptions/{sub}/providers/Microsoft.AzureFleet/locations/{region}/operationStatuses/{op_id}?api-version={FLEET_API_VERSION}",
        st.base_url
    )
}

/// Context for error messages about a fleet: its zones, spot cap and the spot price of `size`.
fn error_context(st: &AppState, fleet: &str, error: &CloudError) -> ArmErrorContext {
    let stored = st.fleets.lock().unwrap_or_else(|p| p.into_inner()).get(fleet).cloned();
    let max_price = stored
        .as_ref()
        .and_then(|s| s.body.properties.as_ref())
        .and_then(|p| p.spot_priority_profile.as_ref())
        .and_then(|p| p.max_price_per_vm);
    let spot_price = match error {
        CloudError::PriceAboveCap { region, size: Some(size) } => {
            st.cloud.catalog().price(size, region).and_then(|p| p.spot)
        }
        _ => None,
    };
    ArmErrorContext { zones: stored.and_then(|s| s.body.zones).unwrap_or_default(), max_price, spot_price }
}

async fn put_fleet(State(st): St, Path((sub, rg, name)): Path<(String, String, String)>, body: Bytes) -> Response {
    let parsed: ArmFleet = match serde_json::from_slice(&body) {
        Ok(f) => f,
        Err(e) => {
            return err(
                StatusCode::BAD_REQUEST,
                "InvalidRequestContent",
                format!("The request content was invalid and could not be deserialized: '{e}'."),
            );
        }
    };
    let (request, maintain) = match fleet_request(&name, &parsed) {
        Ok(r) => r,
        Err(m) => return err(StatusCode::BAD_REQUEST, "InvalidParameter", m),
    };
    if st.cloud.fleet_snapshot(&name).is_some() {
        let owner = resource_group_of(&st, &name);
        if owner != rg {
            return err(
                StatusCode::CONFLICT,
                "Conflict",
                format!("A fleet named '{name}' already exists in resource group '{owner}'."),
            );
        }
    }
    let lro_failure = st.cfg.faults.lro_failure_rate > 0.0 && {
        let mut rng = st.rng.lock().unwrap_or_else(|p| p.into_inner());
        rng.random::<f64>() < st.cfg.faults.lro_failure_rate
    };
    let options = CreateOptions {
        maintain,
        fail_with: lro_failure.then(|| CloudError::Transient {
            message: "An internal execution error occurred. Please retry later.".into(),
        }),
    };
    let accepted = match st.cloud.begin_create(&request, &options) {
        Ok(a) => a,
        Err(e) => {
            let ctx =
                ArmErrorContext { zones: request.zones.clone(), max_price: request.max_price_per_vm, spot_price: None };
            let (status, detail) = arm_error(&e, &ctx);
            return error_response(status, detail);
        }
    };
    if accepted.created {
        let mut stored = parsed.clone();
        stored.id = None;
        stored.name = None;
        stored.resource_type = None;
        st.fleets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.clone(), StoredFleet { resource_group: rg.clone(), body: stored });
    }
    let Some(snap) = st.cloud.fleet_snapshot(&name) else {
        return err(StatusCode::INTERNAL_SERVER_ERROR, "InternalServerError", "the fleet vanished while being created");
    };
    let op_id =
        accepted.operation.status_url.as_deref().and_then(|u| u.strip_prefix(OPERATION_URL_PREFIX)).unwrap_or("");
    let status = if accepted.created { StatusCode::CREATED } else { StatusCode::OK };
    let mut resp = json(status, &fleet_resource(&st, &sub, &snap));
    set_header(&mut resp, "azure-asyncoperation", &op_status_url(&st, &sub, &snap.region, op_id));
    set_header(&mut resp, "retry-after", &st.cfg.retry_after_seconds.to_string());
    if accepted.created && lro_failure {
        resp.extensions_mut().insert(InjectedFault("lro_failure"));
    }
    resp
}

fn not_found(name: &str, rg: &str) -> Response {
    err(
        StatusCode::NOT_FOUND,
        "ResourceNotFound",
        format!("The Resource '{FLEET_TYPE}/{name}' under resource group '{rg}' was not found."),
    )
}

/// The fleet's snapshot when it exists in this resource group.
fn visible(st: &AppState, rg: &str, name: &str) -> Option<FleetSnapshot> {
    st.cloud.fleet_snapshot(name).filter(|_| resource_group_of(st, name) == rg)
}

async fn get_fleet(State(st): St, Path((sub, rg, name)): Path<(String, String, String)>) -> Response {
    match visible(&st, &rg, &name) {
        Some(snap) => json(StatusCode::OK, &fleet_resource(&st, &sub, &snap)),
        None => not_found(&name, &rg),
    }
}

async fn delete_fleet(State(st): St, Path((sub, rg, name)): Path<(String, String, String)>) -> Response {
    let Some(snap) = visible(&st, &rg, &name) else {
        return StatusCode::NO_CONTENT.into_response();
    };
    st.cloud.delete(&name);
    st.fleets.lock().unwrap_or_else(|p| p.into_inner()).remove(&name);
    let id = format!("del-{:08}", st.next_delete.fetch_add(1, Ordering::Relaxed));
    st.deletes.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone(), snap.region.clone());
    let mut resp = StatusCode::ACCEPTED.into_response();
    let location = format!(
        "{}/subscriptions/{sub}/providers/Microsoft.AzureFleet/locations/{}/operationResults/{id}?api-version={FLEET_API_VERSION}",
        st.base_url, snap.region
    );
    set_header(&mut resp, "location", &location);
    set_header(&mut resp, "retry-after", &st.cfg.retry_after_seconds.to_string());
    resp
}

async fn op_result(State(st): St, Path((_sub, _region, op)): Path<(String, String, String)>) -> Response {
    if st.deletes.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&op) {
        StatusCode::NO_CONTENT.into_response()
    } else {
        err(StatusCode::NOT_FOUND, "ResourceNotFound", format!("The operation '{op}' was not found."))
    }
}

fn list(st: &AppState, sub: &str, rg: Option<&str>, uri: &Uri, q: &HashMap<String, String>) -> Response {
    let fleets: Vec<ArmFleet> = st
        .cloud
        .fleets_snapshot()
        .iter()
        .filter(|s| rg.is_none_or(|rg| resource_group_of(st, &s.name) == rg))
        .map(|s| fleet_resource(st, sub, s))
        .collect();
    paged(st, uri, q, &fleets)
}

async fn list_rg(State(st): St, Path((sub, rg)): Path<(String, String)>, uri: Uri, Query(q): Q) -> Response {
    list(&st, &sub, Some(&rg), &uri, &q)
}

async fn list_sub(State(st): St, Path(sub): Path<String>, uri: Uri, Query(q): Q) -> Response {
    list(&st, &sub, None, &uri, &q)
}

async fn scale_sets(
    State(st): St,
    Path((sub, rg, name)): Path<(String, String, String)>,
    uri: Uri,
    Query(q): Q,
) -> Response {
    if visible(&st, &rg, &name).is_none() {
        return not_found(&name, &rg);
    }
    let sets = match st.cloud.fleet_scale_sets(&name).await {
        Ok(s) => s,
        Err(e) => {
            let (status, detail) = arm_error(&e, &ArmErrorContext::default());
            return error_response(status, detail);
        }
    };
    let items: Vec<VirtualMachineScaleSet> = sets
        .into_iter()
        .map(|s| VirtualMachineScaleSet {
            id: format!(
                "/subscriptions/{sub}/resourceGroups/{rg}/providers/{FLEET_TYPE}/{name}/virtualMachineScaleSets/{}",
                s.name
            ),
            name: s.name,
            resource_type: Some("Microsoft.AzureFleet/fleets/virtualMachineScaleSets".into()),
            operation_status: s.operation_status,
            error: s.error.map(|e| {
                let (_, d) = arm_error(&e, &error_context(&st, &name, &e));
                ApiError { code: d.code, message: d.message, target: d.target, ..ApiError::default() }
            }),
        })
        .collect();
    paged(&st, &uri, &q, &items)
}

async fn op_status(State(st): St, Path((sub, _region, op)): Path<(String, String, String)>) -> Response {
    let Some(view) = st.cloud.operation(&op) else {
        return err(StatusCode::NOT_FOUND, "ResourceNotFound", format!("The operation '{op}' was not found."));
    };
    let (status, error, done) = match &view.state {
        OperationState::InProgress => (ArmOpState::InProgress, None, false),
        OperationState::Succeeded => (ArmOpState::Succeeded, None, true),
        OperationState::Failed(e) => {
            let (_, detail) = arm_error(e, &error_context(&st, &view.fleet, e));
            (ArmOpState::Failed, Some(detail), true)
        }
        OperationState::Canceled => (
            ArmOpState::Canceled,
            Some(ErrorDetail::new(
                "OperationCanceled",
                format!("The fleet '{}' was deleted before it was created.", view.fleet),
            )),
            true,
        ),
    };
    let body = OperationStatusResult {
        id: Some(format!(
            "/subscriptions/{sub}/providers/Microsoft.AzureFleet/locations/{}/operationStatuses/{op}",
            view.region
        )),
        name: Some(op.clone()),
        status,
        error,
        start_time: Some(rfc3339(view.started_ms)),
        end_time: done.then(|| rfc3339(view.ends_ms.min(st.cloud.now_ms()))),
        percent_complete: None,
    };
    let mut resp = json(StatusCode::OK, &body);
    if !done {
        set_header(&mut resp, "retry-after", &st.cfg.retry_after_seconds.to_string());
    }
    resp
}

// ---- compute ----

fn cloud_error(e: &CloudError) -> Response {
    let (status, detail) = arm_error(e, &ArmErrorContext::default());
    error_response(status, detail)
}

async fn usages(State(st): St, Path((_sub, region)): Path<(String, String)>, uri: Uri, Query(q): Q) -> Response {
    let quota = match st.cloud.quota(&region).await {
        Ok(q) => q,
        Err(e) => return cloud_error(&e),
    };
    let rows: Vec<Usage> = quota
        .into_iter()
        .map(|qu| {
            let localized = match &qu.pool {
                QuotaPool::Cores => "Total Regional vCPUs".to_string(),
                QuotaPool::LowPriorityCores => "Total Regional Low-priority vCPUs".to_string(),
                QuotaPool::Family(f) => format!("{f} vCPUs"),
            };
            Usage {
                unit: "Count".into(),
                current_value: i64::try_from(qu.usage).unwrap_or(i64::MAX),
                limit: i64::try_from(qu.limit).unwrap_or(i64::MAX),
                name: UsageName { value: qu.pool.name().to_string(), localized_value: Some(localized) },
            }
        })
        .collect();
    paged(&st, &uri, &q, &rows)
}

/// Reads `location eq 'eastus'` (the only filter the SKUs API documents).
fn location_filter(filter: &str) -> Option<String> {
    let rest = filter.trim().strip_prefix("location")?.trim_start().strip_prefix("eq")?.trim();
    let region = rest.strip_prefix('\'')?.strip_suffix('\'')?;
    Some(region.to_string())
}

async fn skus(State(st): St, uri: Uri, Query(q): Q) -> Response {
    let regions = match q.get("$filter") {
        None => st.cloud.regions(),
        Some(f) => match location_filter(f) {
            Some(r) => st.cloud.regions().into_iter().filter(|x| x.eq_ignore_ascii_case(&r)).collect(),
            None => {
                return err(
                    StatusCode::BAD_REQUEST,
                    "InvalidFilter",
                    format!("The $filter '{f}' is not supported; use location eq '<region>'."),
                );
            }
        },
    };
    let catalog = st.cloud.catalog();
    let mut items = Vec::new();
    for region in regions {
        let restrictions = match st.cloud.restrictions(&region).await {
            Ok(r) => r,
            Err(e) => return cloud_error(&e),
        };
        for name in st.cloud.sizes_in(&region) {
            let Some(size) = catalog.size(&name) else { continue };
            let cap = |n: &str, v: String| ResourceSkuCapability { name: n.into(), value: v };
            items.push(ResourceSku {
                resource_type: Some("virtualMachines".into()),
                name: size.name.clone(),
                tier: Some("Standard".into()),
                size: Some(size.name.strip_prefix("Standard_").unwrap_or(&size.name).to_string()),
                family: Some(size.family.clone()),
                locations: vec![region.clone()],
                location_info: vec![ResourceSkuLocationInfo {
                    location: region.clone(),
                    zones: vec!["1".into(), "2".into(), "3".into()],
                    zone_details: Vec::new(),
                }],
                capabilities: vec![
                    cap("vCPUs", size.vcpus.to_string()),
                    cap("MemoryGB", size.memory_gib.to_string()),
                    cap("GPUs", size.gpus.to_string()),
                    cap("LowPriorityCapable", "True".into()),
                    cap("RdmaEnabled", if size.infiniband { "True" } else { "False" }.into()),
                ],
                restrictions: restrictions
                    .iter()
                    .filter(|r| r.size.eq_ignore_ascii_case(&size.name))
                    .map(|r| ResourceSkuRestriction {
                        restriction_type: if r.zones.is_empty() {
                            RestrictionType::Location
                        } else {
                            RestrictionType::Zone
                        },
                        values: vec![region.clone()],
                        restriction_info: Some(ResourceSkuRestrictionInfo {
                            locations: vec![region.clone()],
                            zones: r.zones.clone(),
                        }),
                        reason_code: Some(RestrictionReasonCode::parse(&r.reason)),
                    })
                    .collect(),
            });
        }
    }
    paged(&st, &uri, &q, &items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_filter_reads_the_documented_form() {
        assert_eq!(location_filter("location eq 'eastus'").as_deref(), Some("eastus"));
        assert_eq!(location_filter("  location  eq  'westus3' ").as_deref(), Some("westus3"));
        assert_eq!(location_filter("name eq 'x'"), None);
        assert_eq!(location_filter("location eq eastus"), None);
    }
}
