//! Throughput of the simulated cloud and of the ARM emulator.
//!
//! `cargo bench -p simulator --bench sim_cloud` (release build; prints one line per measurement).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use scheduler::Catalog;
use scheduler::clock::ManualClock;
use scheduler::cloud::{Cloud, FleetRequest};
use scheduler::model::Priority;
use simulator::arm_emulator::{EmulatorConfig, serve};
use simulator::sim_cloud::{SimCloud, SimCloudConfig};

fn request(i: usize, region: &str) -> FleetRequest {
    FleetRequest {
        name: format!("bench-{i}"),
        region: region.into(),
        priority: if i.is_multiple_of(2) { Priority::Spot } else { Priority::Regular },
        sizes: vec!["Standard_NC4as_T4_v3".into(), "Standard_NC8as_T4_v3".into()],
        vms: 2,
        min_vms: 1,
        max_price_per_vm: None,
        zones: vec![],
        tags: BTreeMap::new(),
        regular: None,
    }
}

async fn sim_cloud_month(fleets: usize) {
    let regions = ["eastus", "eastus2", "westus3", "southcentralus"];
    let mut cfg = SimCloudConfig::modest(regions);
    cfg.default_capacity_vms = 10_000;
    cfg.default_quota.cores = 1_000_000;
    cfg.default_quota.low_priority_cores = 1_000_000;
    cfg.default_quota.family = 1_000_000;
    cfg.default_spot_eviction_rate_per_hour = 0.05;
    cfg.eviction_reclaim_seconds = 1800;
    let clock = Arc::new(ManualClock::new(0));
    let cloud = SimCloud::new(cfg, Catalog::builtin(), clock.clone()).unwrap();
    let start = Instant::now();
    for i in 0..fleets {
        cloud.begin_create_fleet(&request(i, regions[i % regions.len()])).await.unwrap();
    }
    let created = start.elapsed();
    // A month of virtual time, polled every virtual minute as a control loop would.
    let t = Instant::now();
    for _ in 0..(30 * 24 * 60) {
        clock.advance_ms(60_000);
        cloud.list_fleets().await.unwrap();
    }
    let month = t.elapsed();
    let c = cloud.counters();
    println!(
        "sim_cloud: {fleets} fleets created in {:.1} ms; 30 virtual days polled each minute (43200 polls) in {:.2} s; \
         {} evictions, {} VMs refilled",
        created.as_secs_f64() * 1e3,
        month.as_secs_f64(),
        c.evictions,
        c.vms_refilled
    );
}

async fn emulator_requests(n: usize) {
    let clock = Arc::new(ManualClock::new(0));
    let cloud = Arc::new(SimCloud::new(SimCloudConfig::modest(["eastus"]), Catalog::builtin(), clock).unwrap());
    let mut cfg = EmulatorConfig::new("t");
    cfg.retry_after_seconds = 0;
    let emu = serve(cfg, cloud).await.unwrap();
    let http = reqwest::Client::new();
    let url = format!(
        "{}/subscriptions/{}/providers/Microsoft.Compute/locations/eastus/usages?api-version=2024-07-01",
        emu.base_url(),
        emu.subscription()
    );
    let t = Instant::now();
    for _ in 0..n {
        let r = http.get(&url).bearer_auth("t").send().await.unwrap();
        assert!(r.status().is_success());
        r.bytes().await.unwrap();
    }
    let el = t.elapsed();
    println!(
        "arm_emulator: {n} sequential GET usages over loopback in {:.2} s = {:.0} requests/s ({:.2} ms each)",
        el.as_secs_f64(),
        n as f64 / el.as_secs_f64(),
        el.as_secs_f64() * 1e3 / n as f64
    );
    emu.shutdown().await.unwrap();
}

#[tokio::main]
async fn main() {
    sim_cloud_month(100).await;
    sim_cloud_month(400).await;
    emulator_requests(2000).await;
}
