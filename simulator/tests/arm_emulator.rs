//! The ARM emulator over real HTTP on loopback: paths, auth, api-versions, status codes, headers,
//! operation transitions, paging and injected faults.

use std::sync::Arc;

use reqwest::{Client, Method, StatusCode};
use scheduler::Catalog;
use scheduler::clock::ManualClock;
use serde_json::{Value, json};
use simulator::arm_emulator::{EmulatorConfig, EmulatorHandle, FaultConfig, serve};
use simulator::sim_cloud::{OfferCapacity, RestrictionConfig, SimCloud, SimCloudConfig};

const TOKEN: &str = "test-token";
const API: &str = "api-version=2024-11-01";
const A100: &str = "Standard_NC24ads_A100_v4";

struct Env {
    emu: EmulatorHandle,
    clock: Arc<ManualClock>,
    http: Client,
}

impl Env {
    fn sub(&self) -> String {
        format!("{}/subscriptions/{}", self.emu.base_url(), self.emu.subscription())
    }
    fn fleet_url(&self, name: &str) -> String {
        format!("{}/resourceGroups/rg1/providers/Microsoft.AzureFleet/fleets/{name}?{API}", self.sub())
    }
    async fn call(
        &self,
        method: Method,
        url: &str,
        body: Option<Value>,
    ) -> (StatusCode, reqwest::header::HeaderMap, Value) {
        let mut rb = self.http.request(method, url).bearer_auth(TOKEN);
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let resp = rb.send().await.expect("request sent");
        let status = resp.status();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap();
        let value = if text.is_empty() { Value::Null } else { serde_json::from_str(&text).expect("JSON body") };
        (status, headers, value)
    }
}

async fn env_with(cfg: SimCloudConfig, emu_cfg: impl FnOnce(&mut EmulatorConfig)) -> Env {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let cloud = Arc::new(SimCloud::new(cfg, Catalog::builtin(), clock.clone()).unwrap());
    let mut ec = EmulatorConfig::new(TOKEN);
    ec.retry_after_seconds = 0;
    emu_cfg(&mut ec);
    let emu = serve(ec, cloud).await.expect("emulator starts");
    Env { emu, clock, http: Client::new() }
}

async fn env() -> Env {
    env_with(SimCloudConfig::modest(["eastus", "westus3"]), |_| {}).await
}

fn fleet_body(vms: u32, spot: bool) -> Value {
    let profile = json!({"capacity": vms, "minCapacity": vms, "allocationStrategy": "LowestPrice"});
    let zero = json!({"capacity": 0, "minCapacity": 0});
    let (spot_p, reg_p) = if spot { (profile, zero) } else { (zero, profile) };
    json!({
        "location": "eastus",
        "tags": {"spillway-job": "j1", "spillway-attempt": "1"},
        "properties": {
            "vmSizesProfile": [{"name": A100, "rank": 0}, {"name": "Standard_NC48ads_A100_v4", "rank": 1}],
            "spotPriorityProfile": spot_p,
            "regularPriorityProfile": reg_p,
            "computeProfile": {
                "baseVirtualMachineProfile": {"storageProfile": {"imageReference": {"publisher": "canonical"}}},
                "computeApiVersion": "2024-03-01",
                "platformFaultDomainCount": 1
            }
        }
    })
}

fn header<'a>(h: &'a reqwest::header::HeaderMap, name: &str) -> &'a str {
    h.get(name).and_then(|v| v.to_str().ok()).unwrap_or_else(|| panic!("header {name} missing"))
}

#[tokio::test]
async fn requests_need_a_bearer_token() {
    let e = env().await;
    let url = e.fleet_url("f");
    let resp = e.http.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "AuthenticationFailed");
    let resp = e.http.get(&url).bearer_auth("wrong").send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let stats = e.emu.stats();
    assert_eq!(stats.count("GET", "/fleets/{name}", Some(401)), 2);
}

#[tokio::test]
async fn api_version_and_subscription_are_checked() {
    let e = env().await;
    let base = format!("{}/resourceGroups/rg1/providers/Microsoft.AzureFleet/fleets/f", e.sub());
    let (s, _, b) = e.call(Method::GET, &base, None).await;
    assert_eq!((s, b["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("MissingApiVersionParameter")));
    let (s, _, b) = e.call(Method::GET, &format!("{base}?api-version=2099-01-01"), None).await;
    assert_eq!((s, b["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("NoRegisteredProviderFound")));
    assert_eq!(
        b["error"]["message"],
        "No registered resource provider found for location 'eastus' and API version '2099-01-01' for type 'fleets'. \
         The supported api-versions are '2024-11-01, 2026-08-01'. The supported locations are 'eastus, westus3'."
    );
    // Both served versions answer.
    for v in ["2024-11-01", "2026-08-01"] {
        let (s, _, b) = e.call(Method::GET, &format!("{base}?api-version={v}"), None).await;
        assert_eq!((s, b["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("ResourceNotFound")), "{v}");
    }
    let other = format!(
        "{}/subscriptions/other/resourceGroups/rg1/providers/Microsoft.AzureFleet/fleets/f?{API}",
        e.emu.base_url()
    );
    let (s, _, b) = e.call(Method::GET, &other, None).await;
    assert_eq!((s, b["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("SubscriptionNotFound")));
    let (s, _, b) = e.call(Method::GET, &e.fleet_url("absent"), None).await;
    assert_eq!((s, b["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("ResourceNotFound")));
}

#[tokio::test]
async fn create_poll_get_delete() {
    let e = env().await;
    let (s, h, b) = e.call(Method::PUT, &e.fleet_url("f1"), Some(fleet_body(2, false))).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    assert_eq!(b["properties"]["provisioningState"], "Creating");
    assert_eq!(b["name"], "f1");
    assert_eq!(b["type"], "Microsoft.AzureFleet/fleets");
    assert!(b["id"].as_str().unwrap().ends_with("/resourceGroups/rg1/providers/Microsoft.AzureFleet/fleets/f1"));
    assert_eq!(header(&h, "retry-after"), "0");
    let op_url = header(&h, "azure-asyncoperation").to_string();
    assert!(op_url.starts_with(&e.emu.base_url()) && op_url.contains("api-version=2024-11-01"), "{op_url}");

    let (s, h, op) = e.call(Method::GET, &op_url, None).await;
    assert_eq!((s, op["status"].as_str()), (StatusCode::OK, Some("InProgress")));
    assert!(h.get("retry-after").is_some());
    e.clock.advance_ms(60_000);
    let (_, _, op) = e.call(Method::GET, &op_url, None).await;
    assert_eq!(op["status"], "Succeeded");
    assert!(op["error"].is_null());

    // GET returns what was created, with the state kept current.
    let (s, _, got) = e.call(Method::GET, &e.fleet_url("f1"), None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(got["properties"]["provisioningState"], "Succeeded");
    assert_eq!(got["properties"]["computeProfile"], fleet_body(2, false)["properties"]["computeProfile"]);
    assert_eq!(got["properties"]["vmSizesProfile"], fleet_body(2, false)["properties"]["vmSizesProfile"]);
    assert_eq!(got["tags"]["spillway-job"], "j1");
    assert!(got["properties"]["timeCreated"].as_str().unwrap().starts_with("2023-11-14T"));

    // Same PUT again: 200, one fleet.
    let (s, h, b) = e.call(Method::PUT, &e.fleet_url("f1"), Some(fleet_body(2, false))).await;
    assert_eq!((s, b["properties"]["provisioningState"].as_str()), (StatusCode::OK, Some("Succeeded")));
    assert_eq!(header(&h, "azure-asyncoperation"), op_url);
    assert_eq!(e.emu.cloud().fleets_snapshot().len(), 1);

    let (s, h, _) = e.call(Method::DELETE, &e.fleet_url("f1"), None).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    assert!(h.get("retry-after").is_some());
    let location = header(&h, "location").to_string();
    // A deletion takes time: the fleet shows Deleting and the monitor says 202 until it is gone.
    let (s, _, got) = e.call(Method::GET, &e.fleet_url("f1"), None).await;
    assert_eq!((s, got["properties"]["provisioningState"].as_str()), (StatusCode::OK, Some("Deleting")));
    let (s, h, _) = e.call(Method::GET, &location, None).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    assert!(h.get("retry-after").is_some());
    e.clock.advance_ms(10_000);
    let (s, _, _) = e.call(Method::GET, &location, None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _, _) = e.call(Method::DELETE, &e.fleet_url("f1"), None).await;
    assert_eq!(s, StatusCode::NO_CONTENT, "already gone");
    let (s, _, _) = e.call(Method::GET, &e.fleet_url("f1"), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(e.emu.cloud().counters().deletes, 1);
}

#[tokio::test]
async fn quota_refusal_is_a_409_with_azure_message() {
    let e = env().await; // family limit 96 = 4 × 24
    let (s, _, b) = e.call(Method::PUT, &e.fleet_url("big"), Some(fleet_body(5, false))).await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(b["error"]["code"], "OperationNotAllowed");
    let msg = b["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with(
            "Operation could not be completed as it results in exceeding approved standardNCADSA100v4Family Cores \
             quota. Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 96, \
             Current Usage: 0, Additional Required: 120, (Minimum) New Limit Required: 120."
        ),
        "{msg}"
    );
    let (s, _, b) = e.call(Method::PUT, &e.fleet_url("spot"), Some(fleet_body(9, true))).await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert!(b["error"]["message"].as_str().unwrap().contains("approved LowPriorityCores quota"), "{b}");
}

#[tokio::test]
async fn capacity_failure_shows_in_the_operation_and_the_scale_sets() {
    let mut cfg = SimCloudConfig::modest(["eastus"]);
    for size in [A100, "Standard_NC48ads_A100_v4"] {
        cfg.capacity.push(OfferCapacity {
            region: "eastus".into(),
            size: size.into(),
            priority: None,
            vms: Some(1),
            eviction_rate_per_hour: None,
        });
    }
    let e = env_with(cfg, |_| {}).await;
    let (s, h, _) = e.call(Method::PUT, &e.fleet_url("gang"), Some(fleet_body(2, false))).await;
    assert_eq!(s, StatusCode::CREATED);
    e.clock.advance_ms(60_000);
    let (_, _, op) = e.call(Method::GET, header(&h, "azure-asyncoperation"), None).await;
    assert_eq!(op["status"], "Failed");
    assert_eq!(op["error"]["code"], "AllocationFailed");
    assert!(op["error"]["message"].as_str().unwrap().contains(A100));
    let (_, _, got) = e.call(Method::GET, &e.fleet_url("gang"), None).await;
    assert_eq!(got["properties"]["provisioningState"], "Failed");
    let url = format!(
        "{}/resourceGroups/rg1/providers/Microsoft.AzureFleet/fleets/gang/virtualMachineScaleSets?{API}",
        e.sub()
    );
    let (s, _, sets) = e.call(Method::GET, &url, None).await;
    assert_eq!(s, StatusCode::OK);
    let sets = sets["value"].as_array().unwrap();
    assert_eq!(sets.len(), 2, "both ranked sizes were tried");
    for set in sets {
        assert_eq!(set["operationStatus"], "Failed");
        assert_eq!(set["error"]["code"], "AllocationFailed");
    }
}

#[tokio::test]
async fn lists_page_with_next_link() {
    let e = env_with(SimCloudConfig::modest(["eastus"]), |c| c.page_size = 2).await;
    for i in 0..5 {
        let (s, _, _) = e.call(Method::PUT, &e.fleet_url(&format!("p{i}")), Some(fleet_body(1, true))).await;
        assert_eq!(s, StatusCode::CREATED);
    }
    let first = format!("{}/resourceGroups/rg1/providers/Microsoft.AzureFleet/fleets?{API}", e.sub());
    let mut names = Vec::new();
    let mut pages = 0;
    let mut next = Some(first);
    while let Some(url) = next {
        let (s, _, page) = e.call(Method::GET, &url, None).await;
        assert_eq!(s, StatusCode::OK, "{url}");
        pages += 1;
        for f in page["value"].as_array().unwrap() {
            names.push(f["name"].as_str().unwrap().to_string());
        }
        next = page["nextLink"].as_str().map(String::from);
    }
    assert_eq!(pages, 3);
    assert_eq!(names, ["p0", "p1", "p2", "p3", "p4"]);
    // Another resource group sees none of them; the subscription sees all.
    let (_, _, page) = e
        .call(Method::GET, &format!("{}/resourceGroups/rg2/providers/Microsoft.AzureFleet/fleets?{API}", e.sub()), None)
        .await;
    assert_eq!(page["value"].as_array().unwrap().len(), 0);
    let (_, _, page) =
        e.call(Method::GET, &format!("{}/providers/Microsoft.AzureFleet/fleets?{API}", e.sub()), None).await;
    assert_eq!(page["value"].as_array().unwrap().len(), 2);
    assert!(page["nextLink"].is_string());
}

#[tokio::test]
async fn usages_and_skus_come_from_the_scenario() {
    let mut cfg = SimCloudConfig::modest(["eastus", "westus3"]);
    cfg.restrictions.push(RestrictionConfig {
        region: "westus3".into(),
        size: A100.into(),
        zones: vec!["2".into()],
        reason: "NotAvailableForSubscription".into(),
    });
    let e = env_with(cfg, |_| {}).await;
    let (s, _, _) = e.call(Method::PUT, &e.fleet_url("u"), Some(fleet_body(2, false))).await;
    assert_eq!(s, StatusCode::CREATED);
    let url = format!("{}/providers/Microsoft.Compute/locations/eastus/usages?api-version=2024-07-01", e.sub());
    let (s, _, page) = e.call(Method::GET, &url, None).await;
    assert_eq!(s, StatusCode::OK);
    let rows = page["value"].as_array().unwrap();
    let row = |name: &str| rows.iter().find(|r| r["name"]["value"] == name).unwrap_or_else(|| panic!("{name}")).clone();
    assert_eq!(row("cores")["currentValue"], 48);
    assert_eq!(row("cores")["limit"], 200);
    assert_eq!(row("lowPriorityCores")["currentValue"], 0);
    assert_eq!(row("standardNCADSA100v4Family")["currentValue"], 48);
    assert_eq!(row("standardNCADSA100v4Family")["limit"], 96);
    assert_eq!(row("cores")["unit"], "Count");

    let url =
        format!("{}/providers/Microsoft.Compute/skus?api-version=2021-07-01&$filter=location eq 'westus3'", e.sub());
    let (s, _, page) = e.call(Method::GET, &url, None).await;
    assert_eq!(s, StatusCode::OK);
    let skus = page["value"].as_array().unwrap();
    assert!(!skus.is_empty());
    assert!(skus.iter().all(|k| k["locations"] == json!(["westus3"])));
    let a100 = skus.iter().find(|k| k["name"] == A100).unwrap();
    assert_eq!(a100["family"], "standardNCADSA100v4Family");
    assert!(a100["capabilities"].as_array().unwrap().contains(&json!({"name": "vCPUs", "value": "24"})));
    assert_eq!(a100["restrictions"][0]["type"], "Zone");
    assert_eq!(a100["restrictions"][0]["restrictionInfo"]["zones"], json!(["2"]));
    assert_eq!(a100["restrictions"][0]["reasonCode"], "NotAvailableForSubscription");
    let (s, _, b) = e
        .call(Method::GET, &format!("{}/providers/Microsoft.Compute/skus?api-version=2024-11-01", e.sub()), None)
        .await;
    assert_eq!((s, b["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("NoRegisteredProviderFound")));
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("for type 'skus'. The supported api-versions are '2021-07-01'")
    );
    // A size without restrictions says so with an empty list, and empty zone lists are [] too.
    let free = skus.iter().find(|k| k["restrictions"] == json!([])).expect("an unrestricted size");
    assert!(free["locationInfo"][0]["zoneDetails"].is_array());
    let (_, _, page) = e.call(Method::GET, &url.replace("westus3", "eastus"), None).await;
    for k in page["value"].as_array().unwrap() {
        for r in k["restrictions"].as_array().expect("restrictions always a list") {
            assert!(r["restrictionInfo"]["zones"].is_array(), "{r}");
            assert!(r["restrictionInfo"]["locations"].is_array(), "{r}");
        }
    }
}

#[tokio::test]
async fn injected_throttling_has_retry_after_and_is_counted() {
    let e = env_with(SimCloudConfig::modest(["eastus"]), |c| {
        c.faults = FaultConfig { throttle_rate: 1.0, throttle_retry_after_seconds: 7, ..FaultConfig::default() }
    })
    .await;
    let (s, h, b) = e.call(Method::PUT, &e.fleet_url("t"), Some(fleet_body(1, false))).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&h, "retry-after"), "7");
    assert_eq!(b["error"]["code"], "TooManyRequests");
    assert!(e.emu.cloud().fleets_snapshot().is_empty(), "a throttled PUT creates nothing");
    let stats: Value =
        e.http.get(format!("{}/_emulator/stats", e.emu.base_url())).send().await.unwrap().json().await.unwrap();
    assert_eq!(stats["faults"]["throttled"], 1);
    assert_eq!(stats["log"][0]["status"], 429);
    assert_eq!(e.emu.stats().count("PUT", "/fleets/{name}", Some(429)), 1);
}

#[tokio::test]
async fn injected_errors_and_failed_operations() {
    let e = env_with(SimCloudConfig::modest(["eastus"]), |c| {
        c.faults = FaultConfig { error_rate: 1.0, ..FaultConfig::default() }
    })
    .await;
    let (s, _, b) = e.call(Method::GET, &e.fleet_url("x"), None).await;
    assert_eq!((s, b["error"]["code"].as_str()), (StatusCode::INTERNAL_SERVER_ERROR, Some("InternalServerError")));

    let e = env_with(SimCloudConfig::modest(["eastus"]), |c| {
        c.faults = FaultConfig { lro_failure_rate: 1.0, ..FaultConfig::default() }
    })
    .await;
    let (s, h, _) = e.call(Method::PUT, &e.fleet_url("lro"), Some(fleet_body(1, false))).await;
    assert_eq!(s, StatusCode::CREATED);
    e.clock.advance_ms(60_000);
    let (_, _, op) = e.call(Method::GET, header(&h, "azure-asyncoperation"), None).await;
    assert_eq!(op["status"], "Failed");
    assert_eq!(op["error"]["code"], "InternalOperationError");
    assert_eq!(e.emu.stats().faults.get("lro_failure"), Some(&1));
}

#[tokio::test]
async fn faults_are_reproducible_from_the_seed() {
    async fn statuses(seed: u64) -> Vec<u16> {
        let e = env_with(SimCloudConfig::modest(["eastus"]), |c| {
            c.faults = FaultConfig { throttle_rate: 0.3, error_rate: 0.2, seed, ..FaultConfig::default() }
        })
        .await;
        let mut out = Vec::new();
        for _ in 0..30 {
            out.push(e.call(Method::GET, &e.fleet_url("none"), None).await.0.as_u16());
        }
        out
    }
    let a = statuses(5).await;
    assert_eq!(a, statuses(5).await);
    assert!(a.contains(&429) && a.contains(&500) && a.contains(&404), "{a:?}");
}

#[tokio::test]
async fn bad_bodies_are_400s_and_shutdown_stops_serving() {
    let e = env().await;
    let (s, _, b) = e.call(Method::PUT, &e.fleet_url("b"), Some(json!({"location": "eastus"}))).await;
    assert_eq!((s, b["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("InvalidParameter")));
    let (s, _, b) = e.call(Method::PUT, &e.fleet_url("b"), Some(json!([1, 2]))).await;
    assert_eq!((s, b["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("InvalidRequestContent")));
    let mut body = fleet_body(1, false);
    body["location"] = json!("mars");
    let (s, _, b) = e.call(Method::PUT, &e.fleet_url("b"), Some(body)).await;
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("LocationNotAvailableForResourceType"))
    );
    let url = e.fleet_url("b");
    let Env { emu, http, .. } = e;
    emu.shutdown().await.unwrap();
    assert!(http.get(&url).bearer_auth(TOKEN).send().await.is_err(), "nothing listens after shutdown");
}

// ---- held to the official SDK's expectations (issue #22 part 3) ----

#[path = "../../scheduler/tests/support/schema.rs"]
mod schema;

const API_2026: &str = "api-version=2026-08-01";

/// Microsoft's official definitions, read from `shared/azure` beside the checkout (never copied
/// into the repository); `None`, with the reason printed, where they are absent.
fn data_dir() -> Option<std::path::PathBuf> {
    schema::azure_definitions("azurefleet-2026-08-01/azurefleet.json")
}

impl Env {
    fn url_2026(&self, name: &str, suffix: &str) -> String {
        format!("{}/resourceGroups/rg1/providers/Microsoft.AzureFleet/fleets/{name}{suffix}?{API_2026}", self.sub())
    }
}

/// A body with `spot` spot VMs (min 0) and `regular` regular VMs (min `regular_min`).
fn mixed_body(spot: u32, regular: u32, regular_min: u32) -> Value {
    let mut b = fleet_body(1, false);
    b["properties"]["spotPriorityProfile"] = json!({"capacity": spot, "minCapacity": 0, "maxPricePerVM": 50.0});
    b["properties"]["regularPriorityProfile"] = json!({"capacity": regular, "minCapacity": regular_min});
    b
}

fn usage(page: &Value, name: &str) -> i64 {
    page["value"].as_array().unwrap().iter().find(|u| u["name"]["value"] == name).unwrap()["currentValue"]
        .as_i64()
        .unwrap()
}

#[tokio::test]
async fn a_mixed_fleet_runs_both_parts_on_their_own_quota_and_spot_evictions_leave_the_regular_part() {
    let e = env().await;
    let (s, _, b) = e.call(Method::PUT, &e.url_2026("mix", ""), Some(mixed_body(2, 2, 2))).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    assert_eq!(b["properties"]["spotPriorityProfile"]["capacity"], 2);
    assert_eq!(b["properties"]["regularPriorityProfile"]["capacity"], 2);
    let usages = format!("{}/providers/Microsoft.Compute/locations/eastus/usages?api-version=2024-07-01", e.sub());
    let (_, _, u) = e.call(Method::GET, &usages, None).await;
    assert_eq!(usage(&u, "lowPriorityCores"), 48, "the spot part holds spot quota: {u}");
    assert_eq!(usage(&u, "cores"), 48, "the regular part holds regular quota");
    assert_eq!(usage(&u, "standardNCADSA100v4Family"), 48);
    e.clock.advance_ms(60_000);
    let (_, _, got) = e.call(Method::GET, &e.url_2026("mix", ""), None).await;
    assert_eq!(got["properties"]["provisioningState"], "Succeeded");
    if let Some(dir) = data_dir() {
        let errors = schema::definition_errors(&dir, "2026-08-01", "Fleet", &got, true);
        assert!(errors.is_empty(), "{errors:#?}");
    }
    let snap = e.emu.cloud().fleet_snapshot("mix").unwrap();
    assert_eq!((snap.running_vms, snap.regular.as_ref().unwrap().running_vms), (2, 2));

    let (_, _, vms) = e.call(Method::GET, &e.url_2026("mix", "/virtualMachines"), None).await;
    let count = |p: &str| vms["value"].as_array().unwrap().iter().filter(|v| v["priority"] == p).count();
    assert_eq!((count("Spot"), count("Regular")), (2, 2), "{vms}");
    assert_eq!(e.emu.cloud().evict("mix", 2).unwrap(), 2, "both spot VMs");
    let (_, _, vms) = e.call(Method::GET, &e.url_2026("mix", "/virtualMachines"), None).await;
    let count = |p: &str| vms["value"].as_array().unwrap().iter().filter(|v| v["priority"] == p).count();
    assert_eq!((count("Spot"), count("Regular")), (0, 2), "the regular part keeps running");
    let (_, _, got) = e.call(Method::GET, &e.url_2026("mix", ""), None).await;
    assert_eq!(got["properties"]["provisioningState"], "Succeeded");

    // A mixed fleet whose regular part cannot get its minimum fails whole, both parts released.
    let mut cfg = SimCloudConfig::modest(["eastus"]);
    cfg.capacity.push(OfferCapacity {
        region: "eastus".into(),
        size: A100.into(),
        priority: Some(scheduler::model::Priority::Regular),
        vms: Some(1),
        eviction_rate_per_hour: None,
    });
    let e = env_with(cfg, |_| {}).await;
    let mut body = mixed_body(1, 2, 2);
    body["properties"]["vmSizesProfile"] = json!([{"name": A100, "rank": 0}]);
    let (s, h, _) = e.call(Method::PUT, &e.url_2026("mix2", ""), Some(body)).await;
    assert_eq!(s, StatusCode::CREATED);
    e.clock.advance_ms(60_000);
    let (_, _, op) = e.call(Method::GET, header(&h, "azure-asyncoperation"), None).await;
    assert_eq!((op["status"].as_str(), op["error"]["code"].as_str()), (Some("Failed"), Some("AllocationFailed")));
    let snap = e.emu.cloud().fleet_snapshot("mix2").unwrap();
    assert_eq!((snap.running_vms, snap.regular.unwrap().running_vms), (0, 0));
}

#[tokio::test]
async fn a_changed_put_is_applied_or_refused_naming_the_immutable_fields() {
    let e = env().await;
    let mut body = fleet_body(2, false);
    body["properties"]["regularPriorityProfile"]["minCapacity"] = json!(1);
    let (s, h, _) = e.call(Method::PUT, &e.fleet_url("u"), Some(body.clone())).await;
    assert_eq!(s, StatusCode::CREATED);
    let create_op = header(&h, "azure-asyncoperation").to_string();
    e.clock.advance_ms(60_000);

    // More capacity: applied, as an operation of its own.
    body["properties"]["regularPriorityProfile"]["capacity"] = json!(3);
    body["tags"]["team"] = json!("ml");
    let (s, h, b) = e.call(Method::PUT, &e.fleet_url("u"), Some(body.clone())).await;
    assert_eq!((s, b["properties"]["provisioningState"].as_str()), (StatusCode::OK, Some("Updating")), "{b}");
    let update_op = header(&h, "azure-asyncoperation").to_string();
    assert_ne!(update_op, create_op);
    let (_, _, op) = e.call(Method::GET, &update_op, None).await;
    assert_eq!(op["status"], "InProgress");
    e.clock.advance_ms(60_000);
    let (_, _, op) = e.call(Method::GET, &update_op, None).await;
    assert_eq!(op["status"], "Succeeded");
    let (_, _, got) = e.call(Method::GET, &e.fleet_url("u"), None).await;
    assert_eq!(got["properties"]["regularPriorityProfile"]["capacity"], 3);
    assert_eq!(got["tags"]["team"], "ml");
    assert_eq!(e.emu.cloud().fleet_snapshot("u").unwrap().running_vms, 3);

    // Fewer: VMs given back.
    body["properties"]["regularPriorityProfile"]["capacity"] = json!(1);
    let (s, _, _) = e.call(Method::PUT, &e.fleet_url("u"), Some(body.clone())).await;
    assert_eq!(s, StatusCode::OK);
    e.clock.advance_ms(60_000);
    assert_eq!(e.emu.cloud().fleet_snapshot("u").unwrap().running_vms, 1);

    // Immutable fields: one error naming each.
    let mut changed = body.clone();
    changed["zones"] = json!(["1"]);
    changed["properties"]["regularPriorityProfile"]["minCapacity"] = json!(0);
    changed["properties"]["regularPriorityProfile"]["minCapacity"] = json!(1);
    changed["properties"]["vmSizesProfile"] = json!([{"name": A100, "rank": 0}]);
    let (s, _, b) = e.call(Method::PUT, &e.fleet_url("u"), Some(changed)).await;
    assert_eq!((s, b["error"]["code"].as_str()), (StatusCode::CONFLICT, Some("PropertyChangeNotAllowed")));
    assert_eq!(b["error"]["message"], "Changing property 'zones', 'properties.vmSizesProfile' is not allowed.", "{b}");
    assert_eq!(b["error"]["details"].as_array().unwrap().len(), 2);
    let mut moved = body.clone();
    moved["location"] = json!("westus3");
    let (s, _, b) = e.call(Method::PUT, &e.fleet_url("u"), Some(moved)).await;
    assert_eq!((s, b["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("InvalidResourceLocation")));
    // Growth beyond the quota is refused at once, like a creation.
    body["properties"]["regularPriorityProfile"]["capacity"] = json!(5);
    let (s, _, b) = e.call(Method::PUT, &e.fleet_url("u"), Some(body)).await;
    assert_eq!((s, b["error"]["code"].as_str()), (StatusCode::CONFLICT, Some("OperationNotAllowed")), "{b}");
}

#[tokio::test]
async fn patch_is_a_long_running_update_answered_202_with_location() {
    let e = env().await;
    let mut body = fleet_body(2, false);
    body["properties"]["regularPriorityProfile"]["minCapacity"] = json!(1);
    e.call(Method::PUT, &e.url_2026("p", ""), Some(body)).await;
    e.clock.advance_ms(60_000);
    let patch = json!({"tags": {"owner": "ml"}, "properties": {"regularPriorityProfile": {"capacity": 1}}});
    let (s, h, b) = e.call(Method::PATCH, &e.url_2026("p", ""), Some(patch)).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    assert!(h.get("retry-after").is_some());
    let location = header(&h, "location").to_string();
    assert!(location.contains("/operationResults/") && location.contains(API_2026), "{location}");
    let (s, _, _) = e.call(Method::GET, &location, None).await;
    assert_eq!(s, StatusCode::ACCEPTED, "still updating");
    e.clock.advance_ms(60_000);
    let (s, _, fleet) = e.call(Method::GET, &location, None).await;
    assert_eq!(s, StatusCode::OK, "{fleet}");
    assert_eq!(fleet["properties"]["regularPriorityProfile"]["capacity"], 1);
    assert_eq!(fleet["properties"]["regularPriorityProfile"]["minCapacity"], 1, "merged, not replaced");
    assert_eq!(fleet["tags"], json!({"owner": "ml"}), "tags replaced");
    assert_eq!(e.emu.cloud().fleet_snapshot("p").unwrap().running_vms, 1);

    let (s, _, b) = e.call(Method::PATCH, &e.url_2026("p", ""), Some(json!({"properties": {"colour": "red"}}))).await;
    assert_eq!((s, b["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("InvalidRequestContent")));
    let (s, _, b) = e
        .call(
            Method::PATCH,
            &e.url_2026("p", ""),
            Some(json!({"properties": {"regularPriorityProfile": {"minCapacity": 0}}})),
        )
        .await;
    assert_eq!((s, b["error"]["code"].as_str()), (StatusCode::CONFLICT, Some("PropertyChangeNotAllowed")), "{b}");
    let (s, _, b) = e.call(Method::PATCH, &e.url_2026("absent", ""), Some(json!({"tags": {}}))).await;
    assert_eq!((s, b["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("ResourceNotFound")));
    // A method the resource does not have: 405 with an ARM error body.
    let (s, _, b) = e.call(Method::POST, &e.url_2026("p", ""), Some(json!({}))).await;
    assert_eq!((s, b["error"]["code"].as_str()), (StatusCode::METHOD_NOT_ALLOWED, Some("MethodNotAllowed")));
}

#[tokio::test]
async fn secrets_are_never_returned_and_a_put_back_without_them_changes_nothing() {
    let e = env().await;
    let mut body = fleet_body(1, false);
    body["properties"]["computeProfile"]["baseVirtualMachineProfile"]["osProfile"] =
        json!({"adminUsername": "azureuser", "adminPassword": "S3cret!pass", "customData": "I2Nsb3VkLWNvbmZpZw=="});
    let (s, _, put) = e.call(Method::PUT, &e.fleet_url("sec"), Some(body)).await;
    assert_eq!(s, StatusCode::CREATED);
    e.clock.advance_ms(60_000);
    let (_, _, got) = e.call(Method::GET, &e.fleet_url("sec"), None).await;
    let (_, _, list) = e
        .call(Method::GET, &format!("{}/resourceGroups/rg1/providers/Microsoft.AzureFleet/fleets?{API}", e.sub()), None)
        .await;
    for shown in [&put, &got, &list] {
        let text = shown.to_string();
        assert!(!text.contains("S3cret!pass") && !text.contains("I2Nsb3VkLWNvbmZpZw=="), "{text}");
        assert!(!text.contains("adminPassword") && !text.contains("customData"), "{text}");
        assert!(text.contains("azureuser"));
    }
    // Read, change the capacity, write back (without the secrets): an update, not a refusal.
    let mut back = got.clone();
    back["properties"]["regularPriorityProfile"]["capacity"] = json!(2);
    let (s, _, b) = e.call(Method::PUT, &e.fleet_url("sec"), Some(back)).await;
    assert_eq!((s, b["properties"]["provisioningState"].as_str()), (StatusCode::OK, Some("Updating")), "{b}");
}

#[tokio::test]
async fn unknown_properties_are_refused_naming_them_per_api_version() {
    let e = env().await;
    let mut body = fleet_body(1, true);
    body["properties"]["spotPriorityProfile"]["bidPrice"] = json!(1.0);
    let (s, _, b) = e.call(Method::PUT, &e.fleet_url("x"), Some(body)).await;
    assert_eq!((s, b["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("InvalidRequestContent")));
    assert!(
        b["error"]["message"].as_str().unwrap().contains(
            "Could not find member 'bidPrice' on object of type 'SpotPriorityProfile'. Path \
             'properties.spotPriorityProfile.bidPrice'."
        ),
        "{b}"
    );
    assert!(e.emu.cloud().fleets_snapshot().is_empty());
    // `mode` exists from 2026-08-01 on; `zoneAllocationPolicy` is tolerated (the examples send it).
    let mut body = fleet_body(1, true);
    body["properties"]["mode"] = json!("Managed");
    body["properties"]["zoneAllocationPolicy"] = json!({"distributionStrategy": "BestEffortSingleZone"});
    let (s, _, b) = e.call(Method::PUT, &e.fleet_url("y"), Some(body.clone())).await;
    assert_eq!((s, b["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("InvalidRequestContent")));
    let (s, _, b) = e.call(Method::PUT, &e.url_2026("y", ""), Some(body)).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    assert_eq!(b["properties"]["mode"], "Managed");
    // Read at the older version, the newer properties are not shown.
    let (_, _, old) = e.call(Method::GET, &e.fleet_url("y"), None).await;
    assert!(old["properties"].get("mode").is_none(), "{old}");
}

#[tokio::test]
async fn every_answer_has_request_ids_and_a_date_on_the_simulated_clock() {
    let e = env().await;
    let resp = e
        .http
        .put(e.fleet_url("d"))
        .bearer_auth(TOKEN)
        .header("x-ms-correlation-request-id", "corr-1")
        .header("x-ms-client-request-id", "client-1")
        .json(&fleet_body(1, false))
        .send()
        .await
        .unwrap();
    let h = resp.headers().clone();
    let b: Value = resp.json().await.unwrap();
    assert_eq!(header(&h, "x-ms-correlation-request-id"), "corr-1");
    assert_eq!(header(&h, "x-ms-client-request-id"), "client-1");
    assert_eq!(header(&h, "x-ms-request-id").len(), 36);
    // The clock starts at 1_700_000_000_000 ms.
    assert_eq!(header(&h, "date"), "Tue, 14 Nov 2023 22:13:20 GMT");
    assert_eq!(b["properties"]["timeCreated"], "2023-11-14T22:13:20Z");
    e.clock.advance_ms(60_000);
    let (_, h2, op) = e.call(Method::GET, header(&h, "azure-asyncoperation"), None).await;
    assert_eq!(header(&h2, "date"), "Tue, 14 Nov 2023 22:14:20 GMT");
    assert_eq!(
        (op["startTime"].as_str(), op["endTime"].as_str()),
        (Some("2023-11-14T22:13:20Z"), Some("2023-11-14T22:14:20Z"))
    );
    assert_ne!(header(&h2, "x-ms-request-id"), header(&h, "x-ms-request-id"));
    assert!(!header(&h2, "x-ms-correlation-request-id").is_empty(), "made up when the client sends none");
    // Errors carry them too.
    let resp = e.http.get(e.fleet_url("d")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(resp.headers().get("x-ms-request-id").is_some());
}

#[tokio::test]
async fn the_vm_list_shows_running_vms_and_exists_from_2026_08_01() {
    let e = env().await;
    e.call(Method::PUT, &e.url_2026("v", ""), Some(fleet_body(3, true))).await;
    let (_, _, vms) = e.call(Method::GET, &e.url_2026("v", "/virtualMachines"), None).await;
    let statuses: Vec<&str> =
        vms["value"].as_array().unwrap().iter().map(|v| v["operationStatus"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["Creating"; 3], "{vms}");
    e.clock.advance_ms(60_000);
    assert_eq!(e.emu.cloud().evict("v", 1).unwrap(), 1);
    let (s, _, vms) = e.call(Method::GET, &e.url_2026("v", "/virtualMachines"), None).await;
    assert_eq!(s, StatusCode::OK);
    if let Some(dir) = data_dir() {
        let errors = schema::definition_errors(&dir, "2026-08-01", "VirtualMachineListResult", &vms, true);
        assert!(errors.is_empty(), "{errors:#?}\n{vms:#}");
    }
    let items = vms["value"].as_array().unwrap();
    assert_eq!(items.len(), 2, "the evicted VM is gone (eviction policy Delete)");
    assert!(
        items.iter().all(|v| v["operationStatus"] == "Succeeded" && v["priority"] == "Spot" && v["vmSize"] == A100)
    );
    let (s, _, b) = e.call(Method::GET, &e.fleet_url("v").replace("/v?", "/v/virtualMachines?"), None).await;
    assert_eq!((s, b["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("NoRegisteredProviderFound")));
    assert!(b["error"]["message"].as_str().unwrap().contains("for type 'fleets/virtualMachines'"), "{b}");
}

/// The properties the emulator accepts are exactly those of the official definitions.
#[test]
fn known_properties_match_the_official_definitions() {
    let Some(dir) = data_dir() else { return };
    for (definition, version, mut ours) in simulator::arm_emulator::fleet_body::known_properties() {
        let spec: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("azurefleet-{version}/azurefleet.json"))).unwrap(),
        )
        .unwrap();
        let mut theirs: Vec<&str> =
            spec["definitions"][definition]["properties"].as_object().unwrap().keys().map(String::as_str).collect();
        if definition == "FleetProperties" && version == "2026-08-01" {
            theirs.push("zoneAllocationPolicy"); // tolerated: the examples send it
        }
        theirs.sort();
        ours.sort();
        assert_eq!(ours, theirs, "{definition} at {version}");
    }
}
