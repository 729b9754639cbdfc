//! Routes and handlers of the ARM emulator.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{MatchedPath, Path, Query, Request, State};
use axum::http::{Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rand::Rng;
use scheduler::cloud::azure::models::{
    ApiError, CapacityType, ComputeProfile, ErrorDetail, Fleet as ArmFleet, FleetProperties,
    OperationState as ArmOpState, OperationStatusResult, PlacementScoreRow, RegularPriorityProfile, ResourceGraphQuery,
    ResourceGraphResponse, ResourceSku, ResourceSkuCapability, ResourceSkuLocationInfo, ResourceSkuRestriction,
    ResourceSkuRestrictionInfo, RestrictionReasonCode, RestrictionType, SpotPlacementScoresInput,
    SpotPlacementScoresResponse, SpotPriorityProfile, Usage, UsageName, VirtualMachine, VirtualMachineScaleSet,
    VmOperationStatus, VmSizeProfile,
};
use scheduler::cloud::{Cloud, CloudError, FleetPart, FleetRequest, ProvisioningState};
use scheduler::model::{Priority, QuotaPool};
use serde_json::{Value, json};

use super::errors::{ArmErrorContext, arm_error};
use super::respond::{cloud_error, err, error_response, guid, http_date, json, localized, paged, rfc3339, set_header};
use super::{AppState, FLEET_API_VERSION, Monitor, StoredFleet, fleet_body, take_budget};
use crate::sim_cloud::{CreateOptions, FleetSnapshot, OPERATION_URL_PREFIX, OperationState};

const FLEETS_RG: &str = "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.AzureFleet/fleets";
const FLEET_TYPE: &str = "Microsoft.AzureFleet/fleets";

/// A fault injected into a response, for the request log.
#[derive(Clone, Copy)]
struct InjectedFault(&'static str);

type St = State<Arc<AppState>>;
type Q = Query<HashMap<String, String>>;

pub(crate) fn router(state: Arc<AppState>) -> Router {
    let router = Router::new()
        .route(&format!("{FLEETS_RG}/{{name}}"), get(get_fleet).put(put_fleet).patch(patch_fleet).delete(delete_fleet))
        .route(FLEETS_RG, get(list_rg))
        .route("/subscriptions/{sub}/providers/Microsoft.AzureFleet/fleets", get(list_sub))
        .route(&format!("{FLEETS_RG}/{{name}}/virtualMachineScaleSets"), get(scale_sets))
        .route(&format!("{FLEETS_RG}/{{name}}/virtualMachines"), get(virtual_machines))
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
        .route("/providers/Microsoft.ResourceGraph/resources", axum::routing::post(resource_graph))
        .route(
            "/subscriptions/{sub}/providers/Microsoft.Compute/locations/{region}/placementScores/spot/generate",
            axum::routing::post(placement_scores),
        );
    super::quota::routes(router)
        .route_layer(middleware::from_fn_with_state(state.clone(), gate))
        .route("/_emulator/stats", get(stats))
        .route("/_emulator/fleets/{name}/evict-now", axum::routing::post(evict_now))
        .fallback(fallback)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), arm_headers))
        .with_state(state)
}

/// Headers ARM puts on every answer, errors included: `x-ms-request-id`,
/// `x-ms-correlation-request-id` (the client's when it sent one), `x-ms-routing-request-id`, the
/// client's `x-ms-client-request-id` echoed, and `Date` on the simulated cloud's clock, so that
/// `Date`, operation start and end times and `timeCreated` tell one story.
async fn arm_headers(State(st): St, req: Request, next: Next) -> Response {
    let n = st.next_request.fetch_add(1, Ordering::Relaxed);
    let request_id = guid(st.cfg.faults.seed, n);
    let (correlation, client_id) = {
        let header_of = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        (
            header_of("x-ms-correlation-request-id").unwrap_or_else(|| guid(!st.cfg.faults.seed, n)),
            header_of("x-ms-client-request-id"),
        )
    };
    let mut resp = next.run(req).await;
    let now = st.cloud.now_ms();
    set_header(&mut resp, "x-ms-request-id", &request_id);
    set_header(&mut resp, "x-ms-correlation-request-id", &correlation);
    let region = st.cloud.regions().first().cloned().unwrap_or_default().to_ascii_uppercase();
    set_header(
        &mut resp,
        "x-ms-routing-request-id",
        &format!("{region}:{}:{request_id}", http_date(now).replace(' ', "")),
    );
    if let Some(c) = client_id {
        set_header(&mut resp, "x-ms-client-request-id", &c);
    }
    set_header(&mut resp, "date", &http_date(now));
    resp
}

/// The resource type a route serves, as ARM names it in api-version errors.
fn resource_type(route: &str) -> &'static str {
    if route.ends_with("/virtualMachines") {
        "fleets/virtualMachines"
    } else if route.ends_with("/virtualMachineScaleSets") {
        "fleets/virtualMachineScaleSets"
    } else if route.contains("/operationStatuses/") {
        "locations/operationStatuses"
    } else if route.contains("/operationResults/") {
        "locations/operationResults"
    } else if route.contains("Microsoft.AzureFleet") {
        "fleets"
    } else if route.contains("Microsoft.Quota/quotaRequests") {
        "quotaRequests"
    } else if route.contains("Microsoft.Quota/operationsStatus") {
        "operationsStatus"
    } else if route.contains("Microsoft.Quota") {
        "quotas"
    } else if route.ends_with("/usages") {
        "locations/usages"
    } else if route.contains("Microsoft.ResourceGraph") {
        "resources"
    } else if route.contains("/placementScores/") {
        "locations/placementScores"
    } else {
        "skus"
    }
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
        Method::PUT | Method::PATCH => {
            Some(("x-ms-ratelimit-remaining-subscription-writes", take_budget(&st.writes_left)))
        }
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
    // A DELETE's own fault reuses the request's error draw (the part above `error_rate`), so that
    // turning it on does not shift the faults every other request meets.
    let delete_fault = req.method() == Method::DELETE
        && error >= faults.error_rate
        && error - faults.error_rate < faults.delete_error_rate;
    if error < faults.error_rate || delete_fault {
        let mut resp =
            err(StatusCode::INTERNAL_SERVER_ERROR, "InternalServerError", "The server encountered an internal error.");
        resp.extensions_mut().insert(InjectedFault(if delete_fault { "delete_error" } else { "error" }));
        return resp;
    }
    let mut segments = req.uri().path().split('/');
    let sub = segments.nth(2).unwrap_or_default();
    // Resource Graph is a tenant-level route: its subscriptions are in the body.
    if sub != st.cfg.subscription && !route.starts_with("/providers/Microsoft.ResourceGraph") {
        return err(
            StatusCode::NOT_FOUND,
            "SubscriptionNotFound",
            format!("The subscription '{sub}' could not be found."),
        );
    }
    let kind = resource_type(route);
    let supported: Vec<String> = match kind {
        "fleets/virtualMachines" => {
            st.cfg.fleet_api_versions.iter().filter(|v| fleet_body::is_2026(v)).cloned().collect()
        }
        "locations/usages" => st.cfg.usage_api_versions.clone(),
        "quotas" | "quotaRequests" | "operationsStatus" => st.cfg.quota_api_versions.clone(),
        "skus" => st.cfg.sku_api_versions.clone(),
        "resources" => st.cfg.resource_graph_api_versions.clone(),
        "locations/placementScores" => st.cfg.placement_score_api_versions.clone(),
        _ => st.cfg.fleet_api_versions.clone(),
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
            // What ARM answers for a resource type its provider does not register at that version.
            let path = req.uri().path();
            let location = path
                .split('/')
                .skip_while(|s| *s != "locations")
                .nth(1)
                .map(str::to_string)
                .or_else(|| {
                    path.split("/fleets/")
                        .nth(1)
                        .and_then(|rest| rest.split('/').next())
                        .and_then(|name| st.cloud.fleet_snapshot(name).map(|f| f.region))
                })
                .or_else(|| st.cloud.regions().first().cloned())
                .unwrap_or_default();
            let mut locations = st.cloud.regions();
            locations.sort();
            return err(
                StatusCode::BAD_REQUEST,
                "NoRegisteredProviderFound",
                format!(
                    "No registered resource provider found for location '{location}' and API version '{v}' for type \
                     '{kind}'. The supported api-versions are '{}'. The supported locations are '{}'.",
                    supported.join(", "),
                    locations.join(", ")
                ),
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

async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    err(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        format!("The HTTP method '{method}' is not supported for '{}'.", uri.path()),
    )
}

async fn stats(State(st): St) -> Response {
    json(StatusCode::OK, &st.stats())
}

/// A test hook (not ARM): `POST /_emulator/fleets/{name}/evict-now?vms=N` with the bearer token evicts
/// up to N VMs of a fleet now (a mixed fleet's spot part first), as `SimCloud::evict` does, so an
/// HTTP client (the SDK suite) can stage an eviction.
async fn evict_now(State(st): St, Path(name): Path<String>, Query(q): Q, headers: axum::http::HeaderMap) -> Response {
    let authorized = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| t == st.cfg.token);
    if !authorized {
        return err(StatusCode::UNAUTHORIZED, "AuthenticationFailed", "Authentication failed.");
    }
    let Some(vms) = q.get("vms").and_then(|v| v.parse::<u32>().ok()) else {
        return err(StatusCode::BAD_REQUEST, "InvalidParameter", "vms: a whole number of VMs is required.");
    };
    match st.cloud.evict(&name, vms) {
        Ok(n) => json(StatusCode::OK, &json!({ "evicted": n })),
        Err(e) => cloud_error(&e),
    }
}

/// Azure's spelling of a priority.
fn azure_priority(p: Priority) -> &'static str {
    match p {
        Priority::Spot => "Spot",
        Priority::Regular => "Regular",
    }
}

fn api_version(q: &HashMap<String, String>) -> &str {
    q.get("api-version").map(String::as_str).unwrap_or(FLEET_API_VERSION)
}

// ---- paging ----

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
    guid(h, 0)
}

/// The fleet resource as ARM returns it at `api_version`: the body it was created (or last
/// updated) with, or for fleets made on the SimCloud directly one built from its state, with the
/// read-only fields filled in and no secret.
fn fleet_resource(st: &AppState, sub: &str, snap: &FleetSnapshot, api_version: &str) -> Value {
    let stored = st.fleets.lock().unwrap_or_else(|p| p.into_inner()).get(&snap.name).cloned();
    let rg = stored.as_ref().map(|s| s.resource_group.clone()).unwrap_or_else(|| st.cfg.resource_group.clone());
    let mut body = match stored {
        Some(s) => s.body,
        None => serde_json::to_value(synthesize(snap)).unwrap_or_else(|_| json!({})),
    };
    fleet_body::strip_secrets(&mut body);
    fleet_body::for_api_version(&mut body, api_version);
    if let Value::Object(o) = &mut body {
        o.insert(
            "id".into(),
            json!(format!("/subscriptions/{sub}/resourceGroups/{rg}/providers/{FLEET_TYPE}/{}", snap.name)),
        );
        o.insert("name".into(), json!(snap.name));
        o.insert("type".into(), json!(FLEET_TYPE));
        let props = o.entry("properties").or_insert_with(|| json!({}));
        if let Value::Object(p) = props {
            p.insert("provisioningState".into(), json!(snap.state.as_str()));
            p.insert("timeCreated".into(), json!(rfc3339(snap.created_ms)));
            p.insert("uniqueId".into(), json!(unique_id(&snap.name, snap.created_ms)));
        }
    }
    body
}

fn synthesize(snap: &FleetSnapshot) -> ArmFleet {
    let regular_profile = |vms: u32, min: u32| RegularPriorityProfile {
        capacity: Some(vms),
        min_capacity: Some(min),
        ..RegularPriorityProfile::default()
    };
    let (spot, regular) = match snap.priority {
        Priority::Spot => (
            Some(SpotPriorityProfile {
                capacity: Some(snap.capacity_vms),
                min_capacity: Some(snap.min_capacity_vms),
                maintain: Some(snap.maintain),
                ..SpotPriorityProfile::default()
            }),
            snap.regular.as_ref().map(|r| regular_profile(r.capacity_vms, r.min_capacity_vms)),
        ),
        Priority::Regular => (None, Some(regular_profile(snap.capacity_vms, snap.min_capacity_vms))),
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

/// Reads a fleet body into the request SimCloud understands, and the fleet's `maintain`. A fleet
/// with capacity in both profiles is mixed: its spot part first, its regular part beside it.
fn fleet_request(name: &str, body: &ArmFleet) -> Result<(FleetRequest, bool), String> {
    if body.location.trim().is_empty() {
        return Err("location is required.".into());
    }
    let props = body.properties.as_ref().ok_or("properties is required.")?;
    if props.additional_locations_profile.as_ref().is_some_and(|a| !a.location_profiles.is_empty()) {
        return Err("additionalLocationsProfile is not supported by this emulator: a fleet has one region.".into());
    }
    if props.capacity_type.as_ref().is_some_and(|c| *c != CapacityType::Vm) {
        return Err("capacityType 'VCpu' is not supported by this emulator: give capacities in VMs.".into());
    }
    let spot = props.spot_priority_profile.as_ref();
    let regular = props.regular_priority_profile.as_ref();
    if spot.is_none() && regular.is_none() {
        return Err("one of spotPriorityProfile or regularPriorityProfile is required.".into());
    }
    let spot_cap = spot.and_then(|p| p.capacity).unwrap_or(0);
    let regular_cap = regular.and_then(|p| p.capacity).unwrap_or(0);
    let regular_min = regular.and_then(|p| p.min_capacity).unwrap_or(0);
    let use_spot = spot_cap > 0 || (regular_cap == 0 && regular.is_none());
    let (priority, vms, min_vms, max_price, maintain) = if use_spot {
        let p = spot.expect("use_spot implies a spot profile");
        (Priority::Spot, spot_cap, p.min_capacity.unwrap_or(0), p.max_price_per_vm, p.maintain.unwrap_or(true))
    } else {
        (Priority::Regular, regular_cap, regular_min, None, true)
    };
    let mixed = use_spot && regular_cap > 0;
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
            regular: mixed.then_some(FleetPart { vms: regular_cap, min_vms: regular_min }),
        },
        maintain,
    ))
}

fn op_status_url(st: &AppState, sub: &str, region: &str, op_id: &str, api_version: &str) -> String {
    format!(
        "{}/subscriptions/{sub}/providers/Microsoft.AzureFleet/locations/{region}/operationStatuses/{op_id}?api-version={api_version}",
        st.base_url
    )
}

fn op_result_url(st: &AppState, sub: &str, region: &str, id: &str, api_version: &str) -> String {
    format!(
        "{}/subscriptions/{sub}/providers/Microsoft.AzureFleet/locations/{region}/operationResults/{id}?api-version={api_version}",
        st.base_url
    )
}

/// Context for error messages about a fleet: its zones, spot cap and the spot price of `size`.
fn error_context(st: &AppState, fleet: &str, error: &CloudError) -> ArmErrorContext {
    let stored = st.fleets.lock().unwrap_or_else(|p| p.into_inner()).get(fleet).cloned();
    let body = stored.as_ref().map(|s| &s.body);
    let max_price =
        body.and_then(|b| b.pointer("/properties/spotPriorityProfile/maxPricePerVM")).and_then(Value::as_f64);
    let zones = body
        .and_then(|b| b.get("zones"))
        .and_then(Value::as_array)
        .map(|z| z.iter().filter_map(|z| z.as_str().map(String::from)).collect())
        .unwrap_or_default();
    let spot_price = match error {
        CloudError::PriceAboveCap { region, size: Some(size) } => {
            st.cloud.catalog().price(size, region).and_then(|p| p.spot)
        }
        _ => None,
    };
    ArmErrorContext { zones, max_price, spot_price }
}

fn bad_content(message: impl std::fmt::Display) -> Response {
    err(
        StatusCode::BAD_REQUEST,
        "InvalidRequestContent",
        format!("The request content was invalid and could not be deserialized: '{message}'."),
    )
}

/// Refusals an existing fleet gives a changed body before anything is asked of the cloud: it is in
/// another resource group, being deleted, in another location, or the body changes fields that
/// cannot change (one `PropertyChangeNotAllowed` naming every one of them).
fn check_change(st: &AppState, rg: &str, name: &str, body: &mut Value) -> Result<(), Box<Response>> {
    let Some(snap) = st.cloud.fleet_snapshot(name) else { return Ok(()) };
    let owner = resource_group_of(st, name);
    if owner != rg {
        return Err(Box::new(err(
            StatusCode::CONFLICT,
            "Conflict",
            format!("A fleet named '{name}' already exists in resource group '{owner}'."),
        )));
    }
    if snap.state == ProvisioningState::Deleting {
        return Err(Box::new(err(
            StatusCode::CONFLICT,
            "Conflict",
            format!("The fleet '{name}' is being deleted; create it again once it is gone."),
        )));
    }
    let stored = st.fleets.lock().unwrap_or_else(|p| p.into_inner()).get(name).map(|s| s.body.clone());
    let Some(stored) = stored else { return Ok(()) };
    fleet_body::keep_secrets(body, &stored);
    let location = |v: &Value| v.get("location").and_then(Value::as_str).unwrap_or_default().to_ascii_lowercase();
    if location(body) != location(&stored) {
        return Err(Box::new(err(
            StatusCode::BAD_REQUEST,
            "InvalidResourceLocation",
            format!(
                "The resource '{name}' already exists in location '{}' in resource group '{rg}'. A resource with the \
                 same name cannot be created in location '{}'. Please select a new resource name.",
                location(&stored),
                location(body)
            ),
        )));
    }
    let changed = fleet_body::changed_immutables(&stored, body);
    if !changed.is_empty() {
        let list = changed.iter().map(|c| format!("'{c}'")).collect::<Vec<_>>().join(", ");
        let mut detail =
            ErrorDetail::new("PropertyChangeNotAllowed", format!("Changing property {list} is not allowed."));
        detail.target = changed.first().cloned();
        detail.details = changed
            .iter()
            .map(|c| ErrorDetail {
                target: Some(c.clone()),
                ..ErrorDetail::new("PropertyChangeNotAllowed", format!("Changing property '{c}' is not allowed."))
            })
            .collect();
        return Err(Box::new(error_response(StatusCode::CONFLICT, detail)));
    }
    Ok(())
}

/// Creates or changes a fleet from a whole body (a PUT, or a PATCH merged over the fleet):
/// returns whether it is new, and the operation started (or the current one, when nothing changed).
fn apply(st: &AppState, rg: &str, name: &str, mut body: Value) -> Result<(bool, String), Box<Response>> {
    let parsed: ArmFleet = serde_json::from_value(body.clone()).map_err(|e| Box::new(bad_content(e)))?;
    let (request, maintain) =
        fleet_request(name, &parsed).map_err(|m| Box::new(err(StatusCode::BAD_REQUEST, "InvalidParameter", m)))?;
    check_change(st, rg, name, &mut body)?;
    let exists = st.cloud.fleet_snapshot(name).is_some();
    let lro_failure = !exists && st.cfg.faults.lro_failure_rate > 0.0 && {
        let mut rng = st.rng.lock().unwrap_or_else(|p| p.into_inner());
        rng.random::<f64>() < st.cfg.faults.lro_failure_rate
    };
    let options = CreateOptions {
        maintain,
        fail_with: lro_failure.then(|| CloudError::Transient {
            message: "An internal execution error occurred. Please retry later.".into(),
        }),
    };
    let accepted = st.cloud.begin_create(&request, &options).map_err(|e| {
        let ctx =
            ArmErrorContext { zones: request.zones.clone(), max_price: request.max_price_per_vm, spot_price: None };
        let (status, detail) = arm_error(&e, &ctx);
        Box::new(error_response(status, detail))
    })?;
    // What is stored is what the client sent, read-only fields aside (they are filled on output).
    if let Value::Object(o) = &mut body {
        for k in ["id", "name", "type", "systemData"] {
            o.remove(k);
        }
        if let Some(Value::Object(p)) = o.get_mut("properties") {
            for k in ["provisioningState", "timeCreated", "uniqueId"] {
                p.remove(k);
            }
        }
    }
    st.fleets
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(name.to_string(), StoredFleet { resource_group: rg.to_string(), body });
    let op_id =
        accepted.operation.status_url.as_deref().and_then(|u| u.strip_prefix(OPERATION_URL_PREFIX)).unwrap_or("");
    if accepted.created && lro_failure {
        return Ok((true, format!("{op_id}#fault")));
    }
    Ok((accepted.created, op_id.to_string()))
}

async fn put_fleet(
    State(st): St,
    Path((sub, rg, name)): Path<(String, String, String)>,
    Query(q): Q,
    body: Bytes,
) -> Response {
    let api = api_version(&q).to_string();
    let raw: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return bad_content(e),
    };
    if let Err(m) = fleet_body::check_known(&raw, &api, false) {
        return bad_content(m);
    }
    let (created, op) = match apply(&st, &rg, &name, raw) {
        Ok(r) => r,
        Err(resp) => return *resp,
    };
    let (op_id, fault) = match op.strip_suffix("#fault") {
        Some(id) => (id.to_string(), true),
        None => (op, false),
    };
    let Some(snap) = st.cloud.fleet_snapshot(&name) else {
        return err(StatusCode::INTERNAL_SERVER_ERROR, "InternalServerError", "the fleet vanished while being created");
    };
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    let mut resp = json(status, &fleet_resource(&st, &sub, &snap, &api));
    set_header(&mut resp, "azure-asyncoperation", &op_status_url(&st, &sub, &snap.region, &op_id, &api));
    set_header(&mut resp, "retry-after", &st.cfg.retry_after_seconds.to_string());
    if fault {
        resp.extensions_mut().insert(InjectedFault("lro_failure"));
    }
    resp
}

/// PATCH (`Fleets_Update`): the body is merged over the fleet and applied like a PUT; answered 202
/// with a `Location` whose final answer is the fleet.
async fn patch_fleet(
    State(st): St,
    Path((sub, rg, name)): Path<(String, String, String)>,
    Query(q): Q,
    body: Bytes,
) -> Response {
    let api = api_version(&q).to_string();
    let Some(snap) = visible(&st, &rg, &name) else { return not_found(&name, &rg) };
    let patch: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return bad_content(e),
    };
    if let Err(m) = fleet_body::check_known(&patch, &api, true) {
        return bad_content(m);
    }
    let current = st.fleets.lock().unwrap_or_else(|p| p.into_inner()).get(&name).map(|s| s.body.clone());
    let current = current.unwrap_or_else(|| serde_json::to_value(synthesize(&snap)).unwrap_or_else(|_| json!({})));
    let merged = fleet_body::merge_patch(&current, &patch);
    let (_, op_id) = match apply(&st, &rg, &name, merged) {
        Ok(r) => r,
        Err(resp) => return *resp,
    };
    let id = format!("upd-{:08}", st.next_monitor.fetch_add(1, Ordering::Relaxed));
    st.monitors
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id.clone(), Monitor::Update { fleet: name.clone(), resource_group: rg.clone(), op: op_id });
    let mut resp = StatusCode::ACCEPTED.into_response();
    set_header(&mut resp, "location", &op_result_url(&st, &sub, &snap.region, &id, &api));
    set_header(&mut resp, "retry-after", &st.cfg.retry_after_seconds.to_string());
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

async fn get_fleet(State(st): St, Path((sub, rg, name)): Path<(String, String, String)>, Query(q): Q) -> Response {
    match visible(&st, &rg, &name) {
        Some(snap) => json(StatusCode::OK, &fleet_resource(&st, &sub, &snap, api_version(&q))),
        None => not_found(&name, &rg),
    }
}

/// DELETE: the fleet shows `Deleting` for `delete_seconds` of the simulated clock, then is gone;
/// the `Location` monitor answers 202 until then, 204 after.
async fn delete_fleet(State(st): St, Path((sub, rg, name)): Path<(String, String, String)>, Query(q): Q) -> Response {
    let Some(snap) = visible(&st, &rg, &name) else {
        return StatusCode::NO_CONTENT.into_response();
    };
    let after_ms = i64::try_from(st.cfg.delete_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
    st.cloud.begin_delete(&name, after_ms);
    let id = format!("del-{:08}", st.next_monitor.fetch_add(1, Ordering::Relaxed));
    st.monitors
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id.clone(), Monitor::Delete { fleet: name.clone(), created_ms: snap.created_ms });
    let mut resp = StatusCode::ACCEPTED.into_response();
    set_header(&mut resp, "location", &op_result_url(&st, &sub, &snap.region, &id, api_version(&q)));
    set_header(&mut resp, "retry-after", &st.cfg.retry_after_seconds.to_string());
    resp
}

/// A `Location` monitor: 202 while its operation runs; then 204 for a deletion, the fleet (200) for
/// an update, or the operation's error.
async fn op_result(State(st): St, Path((sub, _region, op)): Path<(String, String, String)>, Query(q): Q) -> Response {
    let monitor = st.monitors.lock().unwrap_or_else(|p| p.into_inner()).get(&op).cloned();
    let in_progress = || {
        let mut resp = StatusCode::ACCEPTED.into_response();
        set_header(&mut resp, "retry-after", &st.cfg.retry_after_seconds.to_string());
        resp
    };
    match monitor {
        None => err(StatusCode::NOT_FOUND, "ResourceNotFound", format!("The operation '{op}' was not found.")),
        Some(Monitor::Delete { fleet, created_ms }) => match st.cloud.fleet_snapshot(&fleet) {
            Some(f) if f.created_ms == created_ms => in_progress(),
            _ => {
                let mut stored = st.fleets.lock().unwrap_or_else(|p| p.into_inner());
                if st.cloud.fleet_snapshot(&fleet).is_none() {
                    stored.remove(&fleet);
                }
                StatusCode::NO_CONTENT.into_response()
            }
        },
        Some(Monitor::Update { fleet, resource_group, op: sim_op }) => {
            match st.cloud.operation(&sim_op).map(|v| v.state) {
                Some(OperationState::InProgress) => in_progress(),
                Some(OperationState::Succeeded) => match visible(&st, &resource_group, &fleet) {
                    Some(snap) => json(StatusCode::OK, &fleet_resource(&st, &sub, &snap, api_version(&q))),
                    None => not_found(&fleet, &resource_group),
                },
                Some(OperationState::Failed(e)) => {
                    let (status, detail) = arm_error(&e, &error_context(&st, &fleet, &e));
                    error_response(status, detail)
                }
                Some(OperationState::Canceled) | None => err(
                    StatusCode::CONFLICT,
                    "OperationCanceled",
                    format!("The update of fleet '{fleet}' was canceled: the fleet is being deleted."),
                ),
            }
        }
    }
}

fn list(st: &AppState, sub: &str, rg: Option<&str>, uri: &Uri, q: &HashMap<String, String>) -> Response {
    let fleets: Vec<Value> = st
        .cloud
        .fleets_snapshot()
        .iter()
        .filter(|s| rg.is_none_or(|rg| resource_group_of(st, &s.name) == rg))
        .map(|s| fleet_resource(st, sub, s, api_version(q)))
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

/// `GET …/fleets/{name}/virtualMachines` (2026-08-01): each running VM `Succeeded`, and while the
/// fleet is being created or grown, the VMs still to come `Creating`. An evicted VM (eviction
/// policy `Delete`) is gone from the list.
async fn virtual_machines(
    State(st): St,
    Path((sub, rg, name)): Path<(String, String, String)>,
    uri: Uri,
    Query(q): Q,
) -> Response {
    let Some(snap) = visible(&st, &rg, &name) else { return not_found(&name, &rg) };
    let zone = {
        let stored = st.fleets.lock().unwrap_or_else(|p| p.into_inner());
        let zones = stored.get(&name).and_then(|s| s.body.get("zones").and_then(Value::as_array).cloned());
        zones.filter(|z| z.len() == 1).and_then(|z| z[0].as_str().map(String::from))
    };
    let growing = matches!(snap.state, ProvisioningState::Creating | ProvisioningState::Updating);
    let mut parts = vec![(snap.priority, snap.size.clone(), snap.running_vms, snap.capacity_vms, "")];
    if let Some(r) = &snap.regular {
        parts.push((Priority::Regular, r.size.clone(), r.running_vms, r.capacity_vms, "_regular"));
    }
    let mut items = Vec::new();
    for (priority, size, running, capacity, suffix) in parts {
        let size = size.or_else(|| snap.sizes.first().cloned()).unwrap_or_default();
        let set = format!("{}{suffix}", crate::sim_cloud::scale_set_name(&name, &size));
        let pending = if growing { capacity.saturating_sub(running) } else { 0 };
        for i in 0..running + pending {
            let vm = format!("{set}_{i}");
            items.push(VirtualMachine {
                id: format!(
                    "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines/{vm}"
                ),
                name: vm,
                resource_type: Some("Microsoft.Compute/virtualMachines".into()),
                operation_status: if i < running { VmOperationStatus::Succeeded } else { VmOperationStatus::Creating },
                error: None,
                vm_size: Some(size.clone()),
                zone: zone.clone(),
                priority: Some(azure_priority(priority).to_string()),
            });
        }
    }
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
                format!("The operation on fleet '{}' was canceled: the fleet is being deleted.", view.fleet),
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

async fn usages(State(st): St, Path((_sub, region)): Path<(String, String)>, uri: Uri, Query(q): Q) -> Response {
    super::quota::settle(&st);
    let quota = match st.cloud.quota(&region).await {
        Ok(q) => q,
        Err(e) => return cloud_error(&e),
    };
    let rows: Vec<Usage> = quota
        .into_iter()
        .map(|qu| {
            let localized = localized(&qu.pool);
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

// ---- the spot capacity signals ----

/// Azure Resource Graph, for the one query the scheduler sends: the spot eviction-rate bands. The
/// rows come from the simulated cloud's current rates (only their band is published); regions are
/// those the query names among the cloud's, sizes those sold there.
async fn resource_graph(State(st): St, body: Bytes) -> Response {
    let q: ResourceGraphQuery = match serde_json::from_slice(&body) {
        Ok(q) => q,
        Err(e) => {
            return err(
                StatusCode::BAD_REQUEST,
                "InvalidRequestContent",
                format!("The request content was invalid: {e}"),
            );
        }
    };
    if !(q.query.contains("SpotResources") && q.query.to_ascii_lowercase().contains("skuspotevictionrate")) {
        return err(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "This emulator answers only the spot eviction-rate query over SpotResources \
             ('microsoft.compute/skuspotevictionrate/location').",
        );
    }
    if !q.subscriptions.is_empty() && !q.subscriptions.iter().any(|s| s == &st.cfg.subscription) {
        return json(
            StatusCode::OK,
            &json!({"totalRecords": 0, "count": 0, "resultTruncated": "false", "data": [], "facets": []}),
        );
    }
    let raw = !q.query.contains("evictionRate =");
    let text = q.query.to_ascii_lowercase();
    let mut rows = Vec::new();
    let mut regions: Vec<String> = st
        .cloud
        .regions()
        .into_iter()
        .filter(|r| !text.contains(" in~ (") || text.contains(&format!("'{r}'")))
        .collect();
    regions.sort();
    let mut all = Vec::new();
    for region in &regions {
        for size in st.cloud.sizes_in(region) {
            let Ok((band, _)) = st.cloud.spot_signals(region, &size, 1) else { continue };
            all.push((size.to_ascii_lowercase(), region.clone(), band));
        }
    }
    all.sort();
    for (size, region, band) in all {
        rows.push(if raw {
            json!({"type": "microsoft.compute/skuspotevictionrate/location", "location": region,
                   "sku": {"name": size}, "properties": {"evictionRate": band.as_str()}})
        } else {
            json!({"skuName": size, "location": region, "evictionRate": band.as_str()})
        });
    }
    let opts = q.options.unwrap_or_default();
    let skip = match opts.skip_token.as_deref().map(str::parse::<usize>) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => return err(StatusCode::BAD_REQUEST, "InvalidSkipToken", "The $skipToken is not valid."),
    };
    let top = opts.top.map_or(st.cfg.page_size, |t| (t as usize).clamp(1, 1000).min(st.cfg.page_size));
    let start = skip.min(rows.len());
    let end = start.saturating_add(top).min(rows.len());
    let page = ResourceGraphResponse {
        total_records: rows.len() as i64,
        count: (end - start) as i64,
        result_truncated: json!("false"),
        skip_token: (end < rows.len()).then(|| end.to_string()),
        data: Value::Array(rows[start..end].to_vec()),
    };
    json(StatusCode::OK, &page)
}

/// Spot placement scores for the desired regions × sizes, from the simulated cloud's hidden free
/// capacity (with its noise) and spot quota.
async fn placement_scores(State(st): St, body: Bytes) -> Response {
    let input: SpotPlacementScoresInput = match serde_json::from_slice(&body) {
        Ok(i) => i,
        Err(e) => {
            return err(
                StatusCode::BAD_REQUEST,
                "InvalidRequestContent",
                format!("The request content was invalid: {e}"),
            );
        }
    };
    if input.desired_locations.is_empty() || input.desired_sizes.is_empty() {
        return err(
            StatusCode::BAD_REQUEST,
            "InvalidParameter",
            "desiredLocations and desiredSizes must not be empty.",
        );
    }
    if input.desired_locations.len() > 8 || input.desired_sizes.len() > 5 {
        return err(StatusCode::BAD_REQUEST, "InvalidParameter", "At most 8 desiredLocations and 5 desiredSizes.");
    }
    let count = u32::try_from(input.desired_count.unwrap_or(1).max(1)).unwrap_or(1);
    let catalog = st.cloud.catalog();
    let mut scores = Vec::new();
    for region in &input.desired_locations {
        let free_spot = match st.cloud.quota(region).await {
            Ok(q) => q.iter().find(|x| x.pool == QuotaPool::LowPriorityCores).map(|x| x.limit.saturating_sub(x.usage)),
            Err(e) => return cloud_error(&e),
        };
        for size in &input.desired_sizes {
            let (score, quota) = match st.cloud.spot_signals(region, &size.sku, count) {
                Ok((_, s)) => {
                    let vcpus = catalog.size(&size.sku).map_or(0, |z| u64::from(z.vcpus)) * u64::from(count);
                    (s.as_str().to_string(), free_spot.is_none_or(|f| f >= vcpus))
                }
                Err(_) => ("DataNotFoundOrStale".to_string(), false),
            };
            scores.push(PlacementScoreRow {
                sku: Some(size.sku.clone()),
                region: Some(region.clone()),
                availability_zone: None,
                score: Some(score),
                is_quota_available: Some(quota),
            });
        }
    }
    json(
        StatusCode::OK,
        &SpotPlacementScoresResponse {
            desired_locations: input.desired_locations,
            desired_sizes: input.desired_sizes,
            desired_count: input.desired_count,
            availability_zones: input.availability_zones,
            placement_scores: scores,
        },
    )
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
