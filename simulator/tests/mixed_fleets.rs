//! Mixed spot + regular fleets (#22) in the control loop against the simulated cloud, in virtual
//! time: a job with a regular base gets one fleet with both priority profiles, each part drawing
//! its own quota pools; its spot part evicted, the job runs on its regular part (no failover) and
//! the lost spot GPUs are placed again once the grace period has passed.

use scheduler::control::RoundReport;
use scheduler::jobs::JobDetail;
use scheduler::model::{AttemptState, Job, JobSpec, JobState, Priority, QuotaPool, SpecFormat};
use simulator::sim_cloud::SimCloudConfig;

mod support;

use support::{Harness, config, harness_with};

const SIZE: &str = "Standard_NC24ads_A100_v4";

/// A splittable batch job of 4 one-GPU VMs, 2 of its GPUs on regular VMs, the rest spot if it can.
const MIXED_BATCH: &str = r#"
name = "embed"
kind = "batch"
gpus = 4
sizes = ["Standard_NC24ads_A100_v4"]
regions = ["eastus"]
spot = "preferred"
regular_gpus = 2
duration_hours = 10.0
checkpoint_interval_minutes = 30
"#;

fn one_region() -> SimCloudConfig {
    let mut c = SimCloudConfig::modest(["eastus"]);
    c.provisioning_seconds = 60;
    c.default_quota.cores = 800;
    c.default_quota.low_priority_cores = 800;
    c.default_quota.family = 400;
    c
}

async fn step(h: &Harness, secs: i64) -> RoundReport {
    h.clock.advance_ms(secs * 1000);
    h.ctl.reconcile().await.expect("round runs")
}

fn submit(h: &Harness, toml: &str) -> Job {
    let spec = JobSpec::parse(toml, SpecFormat::Toml).expect("spec parses");
    h.jobs.submit(spec, None).expect("accepted").job
}

fn detail(h: &Harness, id: &str) -> JobDetail {
    h.jobs.detail(id).unwrap().unwrap()
}

/// vCPUs a pool of eastus is using, as the cloud counts them.
fn cloud_usage(h: &Harness, pool: &QuotaPool) -> u64 {
    h.cloud.quota_of("eastus").unwrap().into_iter().find(|q| &q.pool == pool).map_or(0, |q| q.usage)
}

/// vCPUs the loop counts its own attempts holding in a pool of eastus.
async fn loop_usage(h: &Harness, pool: &QuotaPool) -> u64 {
    let view = h.ctl.capacity().await.unwrap();
    view.pools.iter().find(|p| p.region == "eastus" && p.pool == pool.name()).map_or(0, |p| p.used_by_us)
}

#[tokio::test]
async fn a_regular_base_and_its_spot_rest_run_in_one_mixed_fleet_that_survives_a_spot_eviction() {
    let h = harness_with("mixed-fleet", one_region(), config());
    let job = submit(&h, MIXED_BATCH);
    let r = step(&h, 0).await;
    assert_eq!(r.placements, 1, "one placement for both parts: {r:?}");
    let d = detail(&h, &job.id);
    assert_eq!(d.attempts.len(), 1, "{:?}", d.attempts);
    let first = d.attempts[0].clone();
    assert_eq!((first.priority, first.vms, first.gpus), (Priority::Spot, 4, 4));
    let part = first.regular.expect("a mixed attempt");
    assert_eq!((part.vms, part.min_vms, part.gpus), (2, 2, 2), "the base on regular VMs");
    let fleets = h.cloud.fleets_snapshot();
    assert_eq!(fleets.len(), 1, "one fleet: {fleets:?}");
    let regular = fleets[0].regular.as_ref().expect("the fleet has a regular profile");
    assert_eq!((fleets[0].capacity_vms, fleets[0].min_capacity_vms), (2, 2), "spot part");
    assert_eq!((regular.capacity_vms, regular.min_capacity_vms), (2, 2), "regular part, its minimum honoured");

    let r = step(&h, 61).await;
    assert_eq!(r.became_running, 1, "{r:?}");
    assert_eq!(h.jobs.get(&job.id).unwrap().unwrap().state, JobState::Running);
    let a = detail(&h, &job.id).attempts[0].clone();
    assert_eq!((a.running_vms, a.regular.map(|r| r.running_vms)), (4, Some(2)));
    let view = serde_json::to_value(scheduler::api::views::AttemptView::from(&a)).unwrap();
    assert_eq!((view["priority"].as_str(), view["vms"].as_u64()), (Some("spot"), Some(4)), "{view}");
    assert_eq!(view["regular"]["vms"].as_u64(), Some(2), "the API shows the regular part: {view}");

    // Each part draws its own pools, in the cloud and in the loop's view of its own usage.
    let family = QuotaPool::Family("standardNCADSA100v4Family".into());
    for (pool, vcpus) in [(QuotaPool::LowPriorityCores, 48), (QuotaPool::Cores, 48), (family.clone(), 48)] {
        assert_eq!(cloud_usage(&h, &pool), vcpus, "the cloud's {}", pool.name());
        assert_eq!(loop_usage(&h, &pool).await, vcpus, "the loop's {}", pool.name());
    }
    // Billed at each part's price: after an hour, 2 spot and 2 regular VM-hours.
    step(&h, 3600).await;
    let a = detail(&h, &job.id).attempts[0].clone();
    let hourly = 2.0 * 0.444433 + 2.0 * 3.673;
    assert!((a.cost_usd - hourly * 3601.0 / 3600.0).abs() < 0.01, "{} vs {hourly}/h", a.cost_usd);

    // The spot capacity goes (and stays gone): the spot part is evicted, the regular part runs on.
    h.cloud.set_capacity("eastus", SIZE, Priority::Spot, 0).unwrap();
    let r = step(&h, 1).await;
    assert_eq!(r.placements, 0, "within the grace period the job stays put: {r:?}");
    let d = detail(&h, &job.id);
    let a = d.attempts[0].clone();
    assert_eq!((a.state, a.running_vms, a.regular.map(|r| r.running_vms)), (AttemptState::Running, 2, Some(2)));
    assert_eq!((d.job.state, d.job.evictions, d.job.failovers), (JobState::Running, 1, 0));
    assert!(!d.job.awaiting_failover, "not failed over");
    assert_eq!(cloud_usage(&h, &QuotaPool::Cores), 48, "the regular part's quota stays in use");

    // Past the grace period the lost spot GPUs are a deficit again: placed beside the mixed
    // fleet, on regular VMs now that spot has none, while the regular part keeps running.
    let r = step(&h, 121).await;
    assert_eq!((r.placements, r.failovers), (1, 0), "{r:?}");
    let r = step(&h, 61).await;
    assert_eq!(r.became_running, 1, "{r:?}");
    let d = detail(&h, &job.id);
    assert_eq!(d.attempts.len(), 2, "{:?}", d.attempts);
    let (old, new) = (&d.attempts[0], &d.attempts[1]);
    assert_eq!((old.state, old.regular.map(|r| r.running_vms)), (AttemptState::Running, Some(2)));
    assert_eq!((new.state, new.priority, new.gpus, new.regular), (AttemptState::Running, Priority::Regular, 2, None));
    assert_eq!((d.job.state, d.job.failovers), (JobState::Running, 0));
    let kinds: Vec<String> = d.events.iter().map(|e| e.kind.to_string()).collect();
    assert!(!kinds.iter().any(|k| k == "failover" || k == "migrating"), "{kinds:?}");
    assert_eq!(cloud_usage(&h, &QuotaPool::Cores), 96, "the mixed fleet's regular part and the new fleet");
    assert_eq!(loop_usage(&h, &QuotaPool::Cores).await, 96);
}

/// The same job through `AzureCloud` → the ARM emulator (HTTP on loopback, api-version 2026-08-01,
/// whose fleet VM list tells spot from regular VMs) → the simulated cloud: one fleet with both
/// priority profiles, and a spot eviction seen over the wire that leaves the job on its regular
/// part.
#[tokio::test]
async fn through_azure_cloud_a_mixed_fleet_is_one_fleet_with_both_profiles_and_survives_its_spot_part() {
    use std::sync::Arc;

    use scheduler::Catalog;
    use scheduler::clock::{Clock, ManualClock};
    use scheduler::cloud::Cloud;
    use scheduler::cloud::azure::{AzureCloud, AzureConfig, CredentialKind};
    use scheduler::control::{ControlMetrics, Controller};
    use scheduler::jobs::JobService;
    use simulator::arm_emulator::{EmulatorConfig, serve};
    use simulator::sim_cloud::SimCloud;

    const TOKEN: &str = "mixed-token";
    let clock = Arc::new(ManualClock::new(support::START_MS));
    let sim = Arc::new(SimCloud::new(one_region(), Catalog::builtin(), clock.clone()).expect("valid cloud"));
    let mut ec = EmulatorConfig::new(TOKEN);
    ec.retry_after_seconds = 0;
    let emu = serve(ec, sim.clone()).await.expect("emulator starts");
    let mut c = AzureConfig::new(emu.subscription(), "mixed");
    c.management_endpoint = emu.base_url();
    c.regions = vec!["eastus".into()];
    c.credential = CredentialKind::StaticToken;
    c.token = Some(TOKEN.into());
    c.api_versions.fleet = "2026-08-01".into();
    let azure = AzureCloud::new(c, Catalog::builtin()).expect("client builds").with_clock(clock.clone());
    let store = state::Store::in_memory().expect("store");
    let jobs = JobService::new(store.clone(), Arc::new(Catalog::builtin()), clock.clone()).without_flush();
    let ctl = Controller::new(
        store,
        Arc::new(azure) as Arc<dyn Cloud>,
        clock.clone() as Arc<dyn Clock>,
        Arc::new(Catalog::builtin()),
        config(),
        ControlMetrics::unregistered(),
    );
    let round = |secs: i64| {
        clock.advance_ms(secs * 1000);
        ctl.reconcile()
    };
    let spec = JobSpec::parse(MIXED_BATCH, SpecFormat::Toml).expect("spec parses");
    let job = jobs.submit(spec, None).expect("accepted").job;
    let detail = |id: &str| jobs.detail(id).unwrap().unwrap();

    let r = round(0).await.expect("round runs");
    assert_eq!(r.placements, 1, "{r:?}");
    let fleets = sim.fleets_snapshot();
    assert_eq!(fleets.len(), 1, "one fleet over the wire: {fleets:?}");
    let regular = fleets[0].regular.as_ref().expect("the body carried a regular profile");
    assert_eq!((fleets[0].capacity_vms, fleets[0].min_capacity_vms), (2, 2), "the spot profile");
    assert_eq!((regular.capacity_vms, regular.min_capacity_vms), (2, 2), "the regular profile");
    let mut running = false;
    for _ in 0..5 {
        round(61).await.expect("round runs");
        if detail(&job.id).job.state == JobState::Running {
            running = true;
            break;
        }
    }
    assert!(running, "{:?}", detail(&job.id));
    let quota = sim.quota_of("eastus").unwrap();
    let used = |p: &QuotaPool| quota.iter().find(|q| &q.pool == p).map_or(0, |q| q.usage);
    assert_eq!((used(&QuotaPool::LowPriorityCores), used(&QuotaPool::Cores)), (48, 48));

    // Both spot VMs evicted (the capacity stays gone); the VM list shows 2 regular VMs running.
    sim.set_capacity("eastus", SIZE, Priority::Spot, 0).unwrap();
    round(61).await.expect("round runs");
    let d = detail(&job.id);
    let a = &d.attempts[0];
    assert_eq!((a.state, a.running_vms, a.regular.map(|r| r.running_vms)), (AttemptState::Running, 2, Some(2)));
    assert_eq!(
        (d.job.state, d.job.evictions, d.job.failovers, d.job.awaiting_failover),
        (JobState::Running, 1, 0, false)
    );

    // Past the grace period the lost GPUs are placed again; the mixed fleet's regular part runs on.
    let r = round(121).await.expect("round runs");
    assert_eq!((r.placements, r.failovers), (1, 0), "{r:?}");
    let d = detail(&job.id);
    assert_eq!(d.attempts.len(), 2);
    assert_eq!((d.attempts[0].state, d.attempts[1].gpus), (AttemptState::Running, 2));
    assert_eq!(sim.fleets_snapshot().len(), 2, "the mixed fleet stays");
    drop(emu);
}
