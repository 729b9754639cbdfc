//! The official Azure SDK for Python (`azure-mgmt-computefleet`, `azure-mgmt-compute`) and
//! `AzureCloud` against the ARM emulator, case by case: create / get / VMs / update (PUT, and
//! PATCH for the SDK) / an immutable change / quota and allocation errors / mixed fleets with a
//! spot eviction / list / delete / usages / SKUs / 401 / throttling. Each client records what it
//! observed in one normalised form per case; every SDK case must pass its own checks and both
//! clients must observe the same.
//!
//! The SDK runs in the virtual environment `simulator/tests/sdk/setup.sh` makes
//! (`target/azure-sdk-venv`, pinned packages; `.ci/run` runs it). Without it (no Python, or the
//! environment not made) the test says so and skips. `SPILLWAY_SDK_PYTHON` names another
//! interpreter. The simulated clock runs 1000× real time, so provisioning takes 60 ms.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use scheduler::Catalog;
use scheduler::clock::{Clock, ScaledClock, SystemClock};
use scheduler::cloud::azure::{AzureCloud, AzureConfig, CredentialKind, RetryConfig};
use scheduler::cloud::{Cloud, CloudError, FleetPart, FleetRequest};
use scheduler::model::Priority;
use serde_json::Value;
use simulator::arm_emulator::{EmulatorConfig, EmulatorHandle, FaultConfig, serve};
use simulator::sim_cloud::{OfferCapacity, RestrictionConfig};
use simulator::{SimCloud, SimCloudConfig};

const TOKEN: &str = "sdk-token-9c1e";
const A100: &str = "Standard_NC24ads_A100_v4";
const RG: &str = "rg-sdk";

fn cloud_config() -> SimCloudConfig {
    let mut c = SimCloudConfig::modest(["eastus", "westus3"]);
    c.restrictions.push(RestrictionConfig {
        region: "eastus".into(),
        size: "Standard_ND96asr_v4".into(),
        zones: Vec::new(),
        reason: "NotAvailableForSubscription".into(),
    });
    c.capacity.push(OfferCapacity {
        region: "westus3".into(),
        size: A100.into(),
        priority: Some(Priority::Regular),
        vms: Some(0),
        eviction_rate_per_hour: None,
    });
    c
}

async fn emulator(throttle: bool) -> EmulatorHandle {
    let clock: Arc<dyn Clock> = Arc::new(ScaledClock::new(SystemClock.now_ms(), 1000.0));
    let sim = SimCloud::new(cloud_config(), Catalog::builtin(), clock).expect("valid cloud");
    let mut cfg = EmulatorConfig::new(TOKEN);
    cfg.retry_after_seconds = 0;
    cfg.page_size = 2;
    if throttle {
        cfg.faults =
            FaultConfig { throttle_rate: 0.5, throttle_retry_after_seconds: 1, seed: 11, ..FaultConfig::default() };
    }
    serve(cfg, Arc::new(sim)).await.expect("emulator starts")
}

fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SPILLWAY_SDK_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let p = target.join("azure-sdk-venv/bin/python");
    p.is_file().then_some(p)
}

fn client(emu: &EmulatorHandle, token: &str) -> AzureCloud {
    let mut c = AzureConfig::new(emu.subscription(), RG);
    c.management_endpoint = emu.base_url();
    c.regions = vec!["eastus".into(), "westus3".into()];
    c.credential = CredentialKind::StaticToken;
    c.token = Some(token.into());
    c.vm_read_interval_secs = 0.0;
    c.retry = RetryConfig { max_retries: 8, max_elapsed_secs: 30.0, initial_backoff_secs: 0.05, max_backoff_secs: 2.0 };
    AzureCloud::new(c, Catalog::builtin()).expect("client builds").with_operation_timeout(Duration::from_secs(30))
}

fn request(name: &str, region: &str, regular: u32, regular_min: u32) -> FleetRequest {
    FleetRequest {
        name: name.into(),
        region: region.into(),
        priority: Priority::Regular,
        sizes: vec![A100.into()],
        vms: regular,
        min_vms: regular_min,
        max_price_per_vm: None,
        zones: Vec::new(),
        tags: [("spillway-job".to_string(), "sdk".to_string())].into(),
        regular: None,
    }
}

/// The SDK suite's `fleet_form`: `Succeeded regular 2/1`, `Succeeded spot 2/0 regular 2/2`.
fn fleet_form(f: &Value) -> String {
    let p = &f["properties"];
    let mut parts = vec![p["provisioningState"].as_str().unwrap_or("?").to_string()];
    for (key, word) in [("spotPriorityProfile", "spot"), ("regularPriorityProfile", "regular")] {
        let cap = p[key]["capacity"].as_u64().unwrap_or(0);
        if cap > 0 {
            parts.push(format!("{word} {cap}/{}", p[key]["minCapacity"].as_u64().unwrap_or(0)));
        }
    }
    parts.join(" ")
}

async fn wire(cloud: &AzureCloud, name: &str) -> Value {
    serde_json::to_value(cloud.get_fleet_resource(name).await.expect("fleet readable")).unwrap()
}

async fn vm_form(cloud: &AzureCloud, name: &str) -> String {
    let f = cloud.get_fleet(name).await.expect("fleet readable");
    let (spot, regular) = match f.priority {
        Priority::Spot => (f.running_vms.unwrap_or(0), f.regular.and_then(|r| r.running_vms).unwrap_or(0)),
        Priority::Regular => (0, f.running_vms.unwrap_or(0)),
    };
    format!("spot={spot} regular={regular}")
}

fn error_form(e: &CloudError) -> String {
    match e {
        CloudError::Quota { pool, limit, usage, required, .. } => format!(
            "quota {} limit={} usage={} required={}",
            pool.name(),
            limit.unwrap_or(0),
            usage.unwrap_or(0),
            required.unwrap_or(0)
        ),
        CloudError::Capacity { region, .. } => format!("capacity {region}"),
        CloudError::Permanent { code, .. } => code.clone(),
        CloudError::NotFound { .. } => "NotFound".into(),
        other => format!("{other}"),
    }
}

/// The SDK suite's cases, with `AzureCloud`.
async fn azure_cloud_cases(emu: &EmulatorHandle, throttled: &EmulatorHandle) -> BTreeMap<String, String> {
    let cloud = client(emu, TOKEN);
    let mut out = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        out.insert(k.to_string(), v);
    };
    let q = cloud.quota("eastus").await.unwrap();
    let row =
        |name: &str| q.iter().find(|r| r.pool.name() == name).map(|r| format!("{}/{}", r.usage, r.limit)).unwrap();
    put("usages", format!("cores {} lowPriorityCores {}", row("cores"), row("lowPriorityCores")));
    let mut r: Vec<String> = cloud
        .restrictions("eastus")
        .await
        .unwrap()
        .iter()
        .map(|r| format!("{}:{}:{}", r.size, if r.zones.is_empty() { "Location" } else { "Zone" }, r.reason))
        .collect();
    r.sort();
    put("skus", r.join(","));

    cloud.create_fleet_and_wait(&request("sdk-reg", "eastus", 2, 1)).await.unwrap();
    put("create", fleet_form(&wire(&cloud, "sdk-reg").await));
    let f = wire(&cloud, "sdk-reg").await;
    let sizes: Vec<&str> =
        f["properties"]["vmSizesProfile"].as_array().unwrap().iter().filter_map(|s| s["name"].as_str()).collect();
    put("get", format!("{} {} {}", f["location"].as_str().unwrap(), fleet_form(&f), sizes.join(",")));
    put("vms", vm_form(&cloud, "sdk-reg").await);
    cloud.create_fleet_and_wait(&request("sdk-reg", "eastus", 3, 1)).await.unwrap();
    put("update", format!("{} {}", fleet_form(&wire(&cloud, "sdk-reg").await), vm_form(&cloud, "sdk-reg").await));
    let e = cloud.begin_create_fleet(&request("sdk-reg", "eastus", 3, 2)).await.unwrap_err();
    put("update-immutable", error_form(&e));
    // The SDK's PATCH; AzureCloud makes the same change by PUT.
    cloud.create_fleet_and_wait(&request("sdk-reg", "eastus", 2, 1)).await.unwrap();
    put("patch", format!("{} {}", fleet_form(&wire(&cloud, "sdk-reg").await), vm_form(&cloud, "sdk-reg").await));
    let e = cloud.begin_create_fleet(&request("sdk-big", "eastus", 5, 5)).await.unwrap_err();
    put("quota-error", error_form(&e));
    let e = cloud.create_fleet_and_wait(&request("sdk-west", "westus3", 1, 1)).await.unwrap_err();
    put("allocation-error", error_form(&e));

    let mixed = FleetRequest {
        priority: Priority::Spot,
        vms: 2,
        min_vms: 0,
        max_price_per_vm: Some(50.0),
        regular: Some(FleetPart { vms: 2, min_vms: 2 }),
        ..request("sdk-mix", "eastus", 2, 0)
    };
    cloud.create_fleet_and_wait(&mixed).await.unwrap();
    let form = fleet_form(&wire(&cloud, "sdk-mix").await);
    let before = vm_form(&cloud, "sdk-mix").await;
    assert_eq!(emu.cloud().evict("sdk-mix", 2).unwrap(), 2);
    let after = vm_form(&cloud, "sdk-mix").await;
    let state = cloud.get_fleet("sdk-mix").await.unwrap().provisioning_state;
    put("mixed", format!("{form}; {before}; evicted: {after} {state}"));

    let mut names: Vec<String> = cloud.list_fleets().await.unwrap().into_iter().map(|f| f.name).collect();
    names.sort();
    put("list", names.join(","));
    cloud.delete_fleet_and_wait("sdk-reg").await.unwrap();
    put("delete", error_form(&cloud.get_fleet("sdk-reg").await.unwrap_err()));
    put("401", error_form(&client(emu, "not-the-token").get_fleet("sdk-mix").await.unwrap_err()));
    let t = client(throttled, TOKEN);
    for _ in 0..3 {
        t.quota("eastus").await.unwrap();
    }
    put("throttling", "ok".into());
    out
}

/// Every 429 the throttled emulator sent was followed by the next request no sooner than its
/// `Retry-After` (1 s), and some were sent.
fn assert_retry_after_honoured(emu: &EmulatorHandle, who: &str) {
    let log = emu.stats().log;
    let throttled: Vec<usize> = (0..log.len()).filter(|&i| log[i].status == 429).collect();
    assert!(!throttled.is_empty(), "{who}: the throttled emulator throttled nothing: {log:?}");
    for &i in &throttled {
        if let Some(next) = log.get(i + 1) {
            assert!(next.at_ms - log[i].at_ms >= 950, "{who}: retried {} ms after a 429", next.at_ms - log[i].at_ms);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_and_azure_cloud_agree_on_every_exchange() {
    let Some(python) = python() else {
        eprintln!(
            "skipping the Azure SDK suite: no Python environment at target/azure-sdk-venv (make it with \
             `bash simulator/tests/sdk/setup.sh`, as .ci/run does, or set SPILLWAY_SDK_PYTHON)"
        );
        return;
    };
    let (sdk_emu, sdk_throttled) = (emulator(false).await, emulator(true).await);
    let results = std::env::temp_dir().join(format!("spillway-sdk-results-{}.json", std::process::id()));
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/sdk_suite.py");
    let mut child = std::process::Command::new(&python)
        .arg(&script)
        .env("SPILLWAY_EMU_URL", sdk_emu.base_url())
        .env("SPILLWAY_EMU_THROTTLED_URL", sdk_throttled.base_url())
        .env("SPILLWAY_EMU_TOKEN", TOKEN)
        .env("SPILLWAY_EMU_SUB", sdk_emu.subscription())
        .env("SPILLWAY_SDK_RESULTS", &results)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the SDK suite starts");
    // The emulators run on this runtime: wait without blocking it, and give up after 4 minutes.
    let deadline = std::time::Instant::now() + Duration::from_secs(240);
    while child.try_wait().expect("the SDK suite can be waited for").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the SDK suite did not end within 4 minutes");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let output = child.wait_with_output().expect("the SDK suite's output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let sdk: BTreeMap<String, Value> = std::fs::read_to_string(&results)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| panic!("no results from the SDK suite\n{stdout}\n{stderr}"));
    let _ = std::fs::remove_file(&results);

    let (ours_emu, ours_throttled) = (emulator(false).await, emulator(true).await);
    let ours = azure_cloud_cases(&ours_emu, &ours_throttled).await;

    println!("| case | Azure SDK for Python | AzureCloud | agree |\n| --- | --- | --- | --- |");
    let mut failures = Vec::new();
    for (case, r) in &sdk {
        let observed = r["observed"].as_str().unwrap_or("(failed)");
        let ok = r["ok"].as_bool() == Some(true);
        let theirs = ours.get(case).map(String::as_str);
        let agree = match theirs {
            Some(t) => t == observed,
            None => true, // an SDK-only case
        };
        println!(
            "| {case} | {} `{observed}` | {} | {} |",
            if ok { "pass" } else { "FAIL" },
            theirs.map(|t| format!("`{t}`")).unwrap_or_else(|| "— (SDK only)".into()),
            if theirs.is_none() {
                "—"
            } else if agree {
                "yes"
            } else {
                "NO"
            }
        );
        if !ok {
            failures.push(format!("{case}: the SDK's checks failed: {r}"));
        }
        if !agree {
            failures.push(format!("{case}: SDK saw {observed:?}, AzureCloud saw {theirs:?}"));
        }
    }
    for case in ours.keys().filter(|c| !sdk.contains_key(*c)) {
        failures.push(format!("{case}: AzureCloud ran it, the SDK did not"));
    }
    assert!(failures.is_empty(), "{failures:#?}\n--- SDK output ---\n{stdout}\n{stderr}");
    assert_eq!(sdk.len(), 16, "every case ran: {:?}", sdk.keys());
    assert_retry_after_honoured(&sdk_throttled, "the SDK");
    assert_retry_after_honoured(&ours_throttled, "AzureCloud");
}
