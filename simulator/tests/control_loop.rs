//! The control loop against the simulated cloud, in virtual time: placement, failover, evictions,
//! restarts, budgets and cancellation, each asserted on the job's states and events, the cloud's
//! fleets, and costs.

use std::collections::BTreeSet;
use std::sync::Arc;

use scheduler::clock::Clock;
use scheduler::cloud::{Cloud, FleetRequest, TAG_ATTEMPT, TAG_JOB};
use scheduler::control::{ControlConfig, RoundReport};
use scheduler::jobs::JobDetail;
use scheduler::model::{Attempt, AttemptState, Job, JobSpec, JobState, Priority, QuotaPool, SpecFormat};
use simulator::sim_cloud::SimCloudConfig;

mod support;

use support::{Harness, START_MS, config, controller, harness_with};

fn harness(name: &str, cloud_config: SimCloudConfig) -> Harness {
    harness_with(name, cloud_config, config())
}

impl Harness {
    async fn round(&self) -> RoundReport {
        self.ctl.reconcile().await.expect("round runs")
    }

    /// Moves virtual time on by `secs` and runs a round.
    async fn step(&self, secs: i64) -> RoundReport {
        self.clock.advance_ms(secs * 1000);
        self.round().await
    }

    fn submit(&self, toml: &str) -> Job {
        let spec = JobSpec::parse(toml, SpecFormat::Toml).expect("spec parses");
        self.jobs.submit(spec, None).expect("accepted").job
    }

    fn job(&self, id: &str) -> Job {
        self.jobs.get(id).unwrap().unwrap()
    }

    fn detail(&self, id: &str) -> JobDetail {
        self.jobs.detail(id).unwrap().unwrap()
    }

    fn event_kinds(&self, id: &str) -> Vec<String> {
        self.detail(id).events.into_iter().map(|e| e.kind.to_string()).collect()
    }

    fn live_fleets(&self) -> Vec<simulator::sim_cloud::FleetSnapshot> {
        self.cloud.fleets_snapshot()
    }
}

fn two_regions() -> SimCloudConfig {
    let mut c = SimCloudConfig::modest(["eastus", "westus3"]);
    c.provisioning_seconds = 60;
    c.default_quota.cores = 800;
    c.default_quota.low_priority_cores = 800;
    c.default_quota.family = 400;
    c
}

const A100_GANG: &str = r#"
name = "ft"
tenant = "research"
kind = "training"
gpus = 8
gpu_models = ["A100-80GB"]
sizes = ["Standard_NC96ads_A100_v4"]
regions = ["eastus", "westus3"]
duration_hours = 2.0
checkpoint_interval_minutes = 30
"#;

#[tokio::test]
async fn places_provisions_and_runs_a_job_and_a_second_round_changes_nothing() {
    let h = harness("runs", two_regions());
    let job = h.submit(A100_GANG);
    let r = h.round().await;
    assert_eq!(r.placements, 1, "{r:?}");
    assert_eq!(h.job(&job.id).state, JobState::Provisioning);
    let r = h.step(61).await;
    assert_eq!(r.became_running, 1, "{r:?}");
    let j = h.job(&job.id);
    assert_eq!(j.state, JobState::Running);
    assert_eq!(h.live_fleets().len(), 1);
    let fleet = &h.live_fleets()[0];
    assert_eq!(fleet.running_vms, 2, "8 GPUs on 4-GPU VMs");
    assert_eq!(fleet.tags.get(TAG_JOB), Some(&job.id));
    assert_eq!(h.event_kinds(&job.id), ["submitted", "placed", "running"]);

    // Idempotent: nothing new happened, so nothing changes.
    let before: Vec<Attempt> = h.detail(&job.id).attempts;
    let r = h.round().await;
    assert!(r.is_quiet(), "{r:?}");
    assert_eq!(h.detail(&job.id).attempts.len(), before.len());
    assert_eq!(h.live_fleets().len(), 1);
}

#[tokio::test]
async fn a_region_outage_fails_over_within_one_round() {
    let h = harness("outage", two_regions());
    let job = h.submit(A100_GANG);
    h.round().await;
    h.step(61).await;
    let first = h.detail(&job.id).attempts[0].clone();
    assert_eq!(first.state, AttemptState::Running);
    let other = if first.region == "eastus" { "westus3" } else { "eastus" };

    h.cloud.set_outage(&first.region, None, None, true).unwrap();
    h.clock.advance_ms(1_000);
    let r = h.round().await;
    assert_eq!(r.evictions, 1, "{r:?}");
    assert_eq!(r.placements, 1, "re-placed in the round that saw the loss: {r:?}");
    assert_eq!(r.failovers, 1, "{r:?}");
    let d = h.detail(&job.id);
    assert_eq!(d.attempts.len(), 2);
    assert_eq!(d.attempts[1].region, other, "the new placement is in the other region");
    assert_eq!(d.attempts[0].state, AttemptState::Failed);
    let r = h.step(61).await;
    assert_eq!(r.became_running, 1);
    assert_eq!(h.job(&job.id).state, JobState::Running);
    assert_eq!(h.job(&job.id).failovers, 1);
    let live: Vec<_> = h.live_fleets().into_iter().filter(|f| f.running_vms > 0).collect();
    assert_eq!(live.len(), 1, "one running fleet, in {other}");
    assert_eq!(live[0].region, other);
    let kinds = h.event_kinds(&job.id);
    assert!(kinds.contains(&"evicted".to_string()) && kinds.contains(&"failover".to_string()), "{kinds:?}");
}

#[tokio::test]
async fn quota_checked_before_asking_and_a_stale_quota_refusal_replans_in_the_same_round() {
    let mut cfg = two_regions();
    // No A100 family quota in eastus: spillway must not even ask there.
    cfg.quota.push(toml::from_str("region = \"eastus\"\n[families]\nstandardNCADSA100v4Family = 0\n").unwrap());
    let h = harness("quota", cfg);
    let job = h.submit(A100_GANG);
    let r = h.round().await;
    assert_eq!(r.placements, 1);
    assert_eq!(r.provisioning_failures, 0, "quota is read before asking: {r:?}");
    assert_eq!(h.detail(&job.id).attempts[0].region, "westus3");

    // Now with a quota change the scheduler has not read yet: V100s are cheaper in eastus than in
    // centralus, so eastus is tried first, refused, and the job fails over in the same round.
    let mut cfg = SimCloudConfig::modest(["eastus", "centralus"]);
    cfg.default_quota.family = 400;
    cfg.default_quota.cores = 800;
    let h = harness("quota-stale", cfg);
    h.round().await; // reads quota: plenty everywhere
    let family = QuotaPool::Family("standardNCSv3Family".into());
    h.cloud.set_quota_limit("eastus", &family, 0).unwrap();
    let job = h.submit(
        r#"
name = "v100"
kind = "training"
gpus = 8
sizes = ["Standard_NC24s_v3"]
regions = ["eastus", "centralus"]
"#,
    );
    let r = h.step(1).await;
    let d = h.detail(&job.id);
    let regions: Vec<&str> = d.attempts.iter().map(|a| a.region.as_str()).collect();
    assert_eq!(regions, ["eastus", "centralus"], "{r:?}");
    assert_eq!(r.provisioning_failures, 1);
    assert_eq!(r.placements, 2);
    assert_eq!(d.attempts[0].failure_class, Some(scheduler::cloud::FailureClass::Quota));
    assert!(h.event_kinds(&job.id).contains(&"provisioning_failed".to_string()));
    let cap = h.ctl.capacity().await.unwrap();
    assert!(
        cap.blocked_offers.iter().any(|b| b.region == "eastus" && b.family.is_some()),
        "the family quota block is visible: {:?}",
        cap.blocked_offers
    );
    h.step(61).await;
    assert_eq!(h.job(&job.id).state, JobState::Running);
}

#[tokio::test]
async fn when_every_region_is_full_jobs_learn_it_from_refusals_wait_with_the_reason_and_start_when_capacity_frees() {
    let mut cfg = two_regions();
    cfg.default_capacity_vms = 0;
    let h = harness("full", cfg);
    let job = h.submit(A100_GANG);
    // Azure publishes no free capacity: the scheduler asks, is refused, and learns. Each region is
    // asked once (a refused offer is blocked), then the job waits.
    h.round().await;
    for _ in 0..4 {
        h.step(61).await;
    }
    let d = h.detail(&job.id);
    let tried: Vec<&str> = d.attempts.iter().map(|a| a.region.as_str()).collect();
    assert_eq!(tried.len(), 2, "one try per region, no blind retries: {:?}", d.attempts);
    assert!(tried.contains(&"eastus") && tried.contains(&"westus3"), "{tried:?}");
    assert!(d.attempts.iter().all(|a| a.failure_class == Some(scheduler::cloud::FailureClass::Capacity)));
    let j = h.job(&job.id);
    assert_eq!(j.state, JobState::Pending);
    assert!(j.pending_reasons.join(" ").contains("capacity"), "a waiting job says why: {:?}", j.pending_reasons);
    let cap = h.ctl.capacity().await.unwrap();
    assert_eq!(cap.blocked_offers.len(), 2, "both offers blocked: {:?}", cap.blocked_offers);

    // While the blocks hold, rounds with nothing changed try nothing and write nothing new.
    let events = h.event_kinds(&job.id).len();
    for _ in 0..10 {
        h.step(60).await;
    }
    assert_eq!(h.detail(&job.id).attempts.len(), 2, "no retry before the blocks expire");
    assert_eq!(h.event_kinds(&job.id).len(), events, "no repeated 'waiting' events");

    // Capacity frees in westus3: the job is placed there once its block expires (within the
    // hour a capacity block lasts), and runs.
    h.cloud.set_capacity("westus3", "Standard_NC96ads_A100_v4", Priority::Regular, 4).unwrap();
    let freed = h.clock.now_ms();
    while h.job(&job.id).state != JobState::Running {
        assert!(h.clock.now_ms() - freed <= 3_600_000, "still not running an hour after capacity freed");
        h.step(60).await;
    }
    let d = h.detail(&job.id);
    let running = d.attempts.iter().find(|a| a.state == AttemptState::Running).unwrap();
    assert_eq!(running.region, "westus3");
    assert!(d.attempts.len() <= 4, "at most one more try per region: {:?}", d.attempts);
}

#[tokio::test]
async fn a_spot_eviction_storm_moves_work_and_accounts_the_lost_work() {
    let mut cfg = two_regions();
    cfg.provisioning_seconds = 30;
    let h = harness("storm", cfg);
    let job = h.submit(
        r#"
name = "embed"
kind = "batch"
gpus = 8
sizes = ["Standard_NC24ads_A100_v4"]
regions = ["eastus", "westus3"]
spot = "preferred"
duration_hours = 4.0
checkpoint_interval_minutes = 60
"#,
    );
    h.round().await;
    h.step(31).await;
    assert_eq!(h.job(&job.id).state, JobState::Running);
    h.step(90 * 60).await; // 1.5 h of work: 0.5 h past the last checkpoint
    let running: Vec<Attempt> = h.detail(&job.id).attempts.into_iter().filter(|a| a.is_active()).collect();
    assert!(running.iter().all(|a| a.priority == Priority::Spot), "spot preferred");
    for a in &running {
        h.cloud.evict(&a.fleet_name, a.vms).unwrap();
    }
    let r = h.step(1).await;
    assert!(r.evictions >= 1, "{r:?}");
    assert!(r.placements >= 1, "replaced in the same round: {r:?}");
    let j = h.job(&job.id);
    assert!(j.evictions >= 1);
    assert!(j.lost_work_gpu_hours > 0.0, "work since the checkpoint is lost");
    assert!((j.progress_hours - 1.0).abs() < 0.05, "progress rolled back to the checkpoint: {}", j.progress_hours);
    h.step(31).await;
    let j = h.job(&job.id);
    assert!(matches!(j.state, JobState::Running), "{:?}", j.state);
}

#[tokio::test]
async fn a_restart_mid_provisioning_adopts_the_fleet_and_makes_no_duplicate_or_orphan() {
    let h = harness("restart", two_regions());
    let job = h.submit(A100_GANG);
    h.round().await; // intent written, fleet being created
    // An orphan: a tagged fleet no attempt knows (left by a lost store, say).
    let orphan = FleetRequest {
        name: "spw-ghost-a1".into(),
        region: "eastus".into(),
        priority: Priority::Regular,
        sizes: vec!["Standard_NC24ads_A100_v4".into()],
        vms: 1,
        min_vms: 1,
        max_price_per_vm: None,
        zones: vec![],
        tags: [(TAG_JOB.to_string(), "ghost".to_string()), (TAG_ATTEMPT.to_string(), "1".to_string())]
            .into_iter()
            .collect(),
        regular: None,
    };
    h.cloud.begin_create_fleet(&orphan).await.unwrap();

    // "Crash": a new controller on the same store and cloud, with no memory of the old one.
    let restarted = controller(&h.store, &h.cloud, &h.clock, config());
    h.clock.advance_ms(61_000);
    let r = restarted.reconcile().await.unwrap();
    assert_eq!(r.orphans, 1, "{r:?}");
    assert_eq!(r.placements, 0, "the in-flight attempt is adopted, not repeated: {r:?}");
    assert_eq!(h.job(&job.id).state, JobState::Running);
    let fleets = h.live_fleets();
    assert_eq!(fleets.len(), 1, "no duplicate, orphan deleted: {fleets:?}");
    assert_eq!(fleets[0].tags.get(TAG_JOB), Some(&job.id));
    assert_eq!(h.detail(&job.id).attempts.len(), 1);

    // A crash between writing the intent and asking the cloud: the next round asks, once.
    let job2 = h.submit(&A100_GANG.replace("name = \"ft\"", "name = \"ft2\""));
    let intent = Attempt {
        job_id: job2.id.clone(),
        number: 1,
        fleet_name: scheduler::model::fleet_name(&job2.id, 1),
        region: "westus3".into(),
        size: "Standard_NC96ads_A100_v4".into(),
        alternatives: vec![],
        priority: Priority::Regular,
        vms: 2,
        min_vms: None,
        growing_to: None,
        gpus: 8,
        vcpus: 192,
        family: "standardNCADSA100v4Family".into(),
        price_per_hour: 14.692,
        max_price_per_vm: None,
        state: AttemptState::Provisioning,
        started_at_ms: h.clock.now_ms(),
        running_since_ms: None,
        ended_at_ms: None,
        operation: None,
        running_vms: 0,
        below_min_since_ms: None,
        cost_usd: 0.0,
        egress_usd: 0.0,
        egress_gb: 0.0,
        accounted_until_ms: None,
        failure: None,
        failure_class: None,
        regular: None,
    };
    let mut j2 = h.job(&job2.id);
    j2.attempts = 1;
    j2.state = JobState::Provisioning;
    h.store
        .transaction(|tx| {
            tx.put(&intent)?;
            tx.put(&j2)?;
            Ok(())
        })
        .unwrap();
    let again = controller(&h.store, &h.cloud, &h.clock, config());
    let r = again.reconcile().await.unwrap();
    assert_eq!(r.placements, 0, "{r:?}");
    h.clock.advance_ms(61_000);
    again.reconcile().await.unwrap();
    assert_eq!(h.job(&job2.id).state, JobState::Running);
    let names: Vec<String> = h.live_fleets().into_iter().map(|f| f.name).collect();
    assert_eq!(names.iter().filter(|n| **n == intent.fleet_name).count(), 1, "{names:?}");
    assert_eq!(h.cloud.counters().creates_repeated, 0);
}

#[tokio::test]
async fn budgets_stop_a_job_and_hold_back_an_overspent_tenant() {
    let h = harness("budget", two_regions());
    // 2 × NC96ads at ~$14.69/h ≈ $29.4/h. The estimate (30 min, ~$14.7) fits the $20 budget, but
    // nobody completes the job, so it runs on and the budget runs out after about 41 minutes.
    let job = h.submit(&A100_GANG.replace("duration_hours = 2.0", "duration_hours = 0.5\nbudget = 20.0"));
    h.round().await;
    h.step(61).await;
    for _ in 0..6 {
        h.step(600).await;
    }
    let j = h.job(&job.id);
    assert_eq!(j.state, JobState::Failed, "{j:?}");
    assert!(j.end_reason.as_deref().unwrap_or("").contains("budget"));
    assert!(j.cost_usd >= 20.0 && j.cost_usd < 26.0, "stopped soon after the budget: ${}", j.cost_usd);
    h.step(1).await;
    assert!(h.live_fleets().is_empty(), "its fleet is deleted");

    h.jobs.set_tenant_budget("research", Some(j.cost_usd)).unwrap();
    let next = h.submit(
        &A100_GANG.replace("name = \"ft\"", "name = \"ft3\"").replace("duration_hours = 2.0", "duration_hours = 0.5"),
    );
    let r = h.step(1).await;
    assert_eq!(r.placements, 0);
    let waiting = h.job(&next.id);
    assert!(waiting.pending_reasons.iter().any(|r| r.contains("over its budget")), "{:?}", waiting.pending_reasons);
}

#[tokio::test]
async fn cancel_during_provisioning_deletes_the_fleet_and_settles() {
    let h = harness("cancel", two_regions());
    let job = h.submit(A100_GANG);
    h.round().await;
    assert_eq!(h.live_fleets().len(), 1);
    h.jobs.cancel(&job.id, "alice").unwrap();
    let r = h.step(1).await;
    assert_eq!(r.fleets_deleted, 1, "{r:?}");
    assert!(h.live_fleets().is_empty());
    let d = h.detail(&job.id);
    assert_eq!(d.job.state, JobState::Cancelled);
    assert_eq!(d.attempts[0].state, AttemptState::Ended);
    assert_eq!(d.job.cost_usd, 0.0, "it never ran, so it cost nothing");
    assert!(h.step(120).await.is_quiet(), "nothing left to do");
}

#[tokio::test]
async fn auto_completion_ends_the_job_and_bills_what_ran() {
    let cfg = ControlConfig { auto_complete: true, ..config() };
    let h = harness_with("complete", two_regions(), cfg);
    let job = h.submit(A100_GANG);
    h.round().await;
    h.step(61).await;
    for _ in 0..13 {
        h.step(600).await;
    }
    let j = h.job(&job.id);
    assert_eq!(j.state, JobState::Succeeded, "{j:?}");
    let a = &h.detail(&job.id).attempts[0];
    let expected = a.vms as f64 * a.price_per_hour * 2.0;
    assert!((j.cost_usd - expected).abs() / expected < 0.1, "cost {} vs {}", j.cost_usd, expected);
    h.step(1).await;
    assert!(h.live_fleets().is_empty());
}

#[tokio::test]
async fn a_fleet_below_its_minimum_past_the_grace_period_migrates_make_before_break() {
    let h = harness("degraded", two_regions());
    let job = h.submit(A100_GANG);
    h.round().await;
    h.step(61).await;
    let first = h.detail(&job.id).attempts[0].clone();
    // One of the two VMs is lost and its capacity stays gone (the fleet cannot refill).
    h.cloud.set_capacity(&first.region, "Standard_NC96ads_A100_v4", Priority::Regular, 2).unwrap();
    assert_eq!(h.cloud.evict(&first.fleet_name, 1).unwrap(), 1);
    h.cloud.set_capacity(&first.region, "Standard_NC96ads_A100_v4", Priority::Regular, 1).unwrap();
    let r = h.step(1).await;
    let a = h.detail(&job.id).attempts[0].clone();
    assert!(a.below_min_since_ms.is_some(), "{a:?}");
    assert_eq!(r.placements, 0, "within the grace period the job stays put");
    assert_eq!(h.job(&job.id).state, JobState::Running);
    let r = h.step(121).await;
    assert_eq!(r.placements, 1, "past the grace period it is placed again: {r:?}");
    assert_eq!(h.job(&job.id).state, JobState::Migrating);
    assert_eq!(h.live_fleets().iter().filter(|f| f.running_vms > 0).count(), 1, "the old one still runs");
    let r = h.step(61).await;
    assert_eq!(r.became_running, 1);
    let d = h.detail(&job.id);
    assert_eq!(d.job.state, JobState::Running);
    assert_eq!(d.attempts[0].state, AttemptState::Replaced, "broken only after the new one runs");
    assert_eq!(h.live_fleets().len(), 1);
}

#[tokio::test]
async fn an_inference_service_keeps_its_minimum_replicas_across_regions() {
    let mut cfg = two_regions();
    cfg.default_capacity_vms = 2;
    let h = harness("inference", cfg);
    let job = h.submit(
        r#"
name = "chat"
kind = "inference"
gpus = 1
sizes = ["Standard_NC24ads_A100_v4"]
regions = ["eastus", "westus3"]
priority = 10
[replicas]
min = 3
desired = 4
"#,
    );
    h.round().await;
    h.step(61).await;
    let d = h.detail(&job.id);
    let regions: BTreeSet<String> = d.attempts.iter().filter(|a| a.is_active()).map(|a| a.region.clone()).collect();
    let gpus: u32 = d.attempts.iter().filter(|a| a.is_active()).map(|a| a.gpus).sum();
    assert_eq!(gpus, 4, "desired replicas placed over both regions: {:?}", d.attempts);
    assert_eq!(regions.len(), 2, "two VMs per region only: it must spread");
    assert_eq!(d.job.state, JobState::Running);
    assert!(d.attempts.iter().all(|a| a.priority == Priority::Regular), "inference never on spot by default");

    // eastus goes dark: the replicas there are replaced in westus3 as far as capacity allows.
    h.cloud.set_outage("eastus", None, None, true).unwrap();
    h.cloud.set_capacity("westus3", "Standard_NC24ads_A100_v4", Priority::Regular, 4).unwrap();
    h.step(1).await;
    h.step(61).await;
    let d = h.detail(&job.id);
    let live: u32 = d.attempts.iter().filter(|a| a.state == AttemptState::Running).map(|a| a.running_vms).sum();
    assert!(live >= 3, "at least the minimum replicas run: {live}");
    assert!(d.attempts.iter().filter(|a| a.state == AttemptState::Running).all(|a| a.region == "westus3"));
}

#[tokio::test]
async fn a_deadline_job_leaves_spot_for_regular_when_its_slack_runs_out() {
    let h = harness("deadline", two_regions());
    // 4 h of work, deadline in 5.5 h: 1.5 h of slack, enough to risk spot.
    let deadline = time::OffsetDateTime::from_unix_timestamp(START_MS / 1000 + 5 * 3600 + 1800).unwrap();
    let spec = format!(
        r#"
name = "deadline"
kind = "training"
gpus = 4
sizes = ["Standard_NC96ads_A100_v4"]
regions = ["eastus", "westus3"]
spot = "allowed"
duration_hours = 4.0
checkpoint_interval_minutes = 60
deadline = "{}"
"#,
        deadline.format(&time::format_description::well_known::Rfc3339).unwrap()
    );
    let job = h.submit(&spec);
    h.round().await;
    h.step(61).await;
    let first = h.detail(&job.id).attempts[0].clone();
    assert_eq!(first.priority, Priority::Spot, "with slack, spot is cheaper");
    // 54 minutes in, every spot VM is evicted: 0.9 h of work since the last checkpoint is lost,
    // leaving ~0.6 h of slack, less than one more restart risks: the job must go regular.
    h.step(54 * 60).await;
    h.cloud.evict(&first.fleet_name, first.vms).unwrap();
    h.step(1).await;
    let j = h.job(&job.id);
    assert!(j.lost_work_gpu_hours > 3.0, "0.9 h × 4 GPUs lost: {}", j.lost_work_gpu_hours);
    let second = h.detail(&job.id).attempts.last().unwrap().clone();
    assert_eq!(second.number, 2);
    assert_eq!(second.priority, Priority::Regular, "no slack left for another eviction");
}

#[tokio::test]
async fn a_spot_price_cap_is_spread_over_the_planned_vms_so_the_fleet_is_not_refused() {
    // Room for every VM the plan asks for: what is under test is the price cap, not capacity (the
    // scheduler cannot see free capacity, so a shortage would fail the fleet for another reason).
    let mut cfg = two_regions();
    cfg.default_capacity_vms = 32;
    let h = harness("price-cap", cfg);
    // 16 A10 GPUs with a $12/h cap: at $0.80 per spot VM only 15 fit; the per-VM cap sent to the
    // cloud must be at least the price the solver planned with, or the fleet is refused.
    let job = h.submit(
        r#"
name = "batch-a10"
kind = "batch"
gpus = 16
sizes = ["Standard_NV36ads_A10_v5"]
regions = ["eastus"]
spot = "preferred"
max_price_per_hour = 12.0
"#,
    );
    h.round().await;
    h.step(61).await;
    let d = h.detail(&job.id);
    assert!(d.attempts.iter().all(|a| a.failure_class.is_none()), "{:?}", d.attempts);
    let spot: Vec<&Attempt> = d.attempts.iter().filter(|a| a.priority == Priority::Spot).collect();
    assert!(!spot.is_empty());
    for a in spot {
        assert_eq!(a.state, AttemptState::Running);
        let cap = a.max_price_per_vm.expect("spot attempts carry a cap");
        assert!(cap >= a.price_per_hour && a.vms as f64 * cap <= 12.0 + 1e-9, "{a:?}");
    }
}

#[tokio::test]
async fn finished_jobs_are_forgotten_after_the_retention_and_tenant_spend_is_kept() {
    let cfg = ControlConfig { auto_complete: true, retain_finished_ms: Some(3_600_000), ..config() };
    let h = harness_with("retention", two_regions(), cfg);
    let spec = JobSpec::parse(A100_GANG, SpecFormat::Toml).expect("spec parses");
    let done = h.jobs.submit(spec, Some("retry-1")).expect("accepted").job;
    let key = "research/retry-1";
    assert!(h.store.get::<scheduler::records::IdempotencyRecord>(key).unwrap().is_some());
    h.round().await;
    h.step(61).await;
    for _ in 0..13 {
        h.step(600).await;
    }
    assert_eq!(h.job(&done.id).state, JobState::Succeeded);
    let spent = h.store.get::<scheduler::records::Tenant>("research").unwrap().expect("tenant record").spent_usd;
    assert!(spent > 0.0);
    let seq_before = h.store.last_seq();
    // Within the hour the finished job is still there to be read.
    h.step(1_800).await;
    assert!(h.jobs.get(&done.id).unwrap().is_some(), "kept within the retention");
    // A job still running is never forgotten, however old.
    let open = h.submit(&A100_GANG.replace("duration_hours = 2.0", "duration_hours = 100.0"));
    h.step(1).await;
    h.step(2_000).await;
    assert!(h.jobs.get(&done.id).unwrap().is_none(), "forgotten past the retention");
    assert!(h.store.by_index::<Attempt>("job", &done.id).unwrap().is_empty(), "its attempts went with it");
    assert!(h.store.by_index::<scheduler::jobs::JobEvent>("job", &done.id).unwrap().is_empty(), "and its events");
    assert!(h.jobs.get(&open.id).unwrap().is_some(), "an open job stays");
    assert!(
        h.store.get::<scheduler::records::IdempotencyRecord>(key).unwrap().is_none(),
        "the job's idempotency key went with it"
    );
    let after = h.store.get::<scheduler::records::Tenant>("research").unwrap().expect("tenant record").spent_usd;
    assert!(after >= spent, "what the tenant spent is kept: {after} < {spent}");
    // The global log lost the events older than the hour but keeps numbering on.
    let events = h.store.events_from(0, 1_000_000).unwrap();
    assert!(events.iter().all(|e| e.at_ms >= h.clock.now_ms() - 3_600_000 - 60_000), "old events trimmed");
    assert!(h.store.last_seq() >= seq_before);
}

/// Accounting of unchanged running work is written at most every `settle_interval_ms`, and what is
/// written is exact: a controller that restarts from the store in between (as after a crash) bills
/// the same as one that settles every round, and `settle_accounts` brings the store up to the clock.
#[tokio::test]
async fn running_costs_are_settled_every_interval_and_a_restart_loses_nothing() {
    let every_round = ControlConfig { settle_interval_ms: Some(0), ..config() };
    let lazy = ControlConfig { settle_interval_ms: Some(600_000), ..config() };
    let eager = harness_with("settle-eager", two_regions(), every_round);
    let mut h = harness_with("settle-lazy", two_regions(), lazy.clone());
    let (a, b) = (eager.submit(A100_GANG), h.submit(A100_GANG));
    for x in [&eager, &h] {
        x.round().await;
        x.step(61).await;
    }
    assert_eq!(h.job(&b.id).state, JobState::Running);
    let cost = |x: &Harness, id: &str| x.job(id).cost_usd;
    let mut last_written = cost(&h, &b.id);
    for step in 1..=12 {
        eager.step(60).await;
        h.step(60).await;
        if step == 7 {
            // A new controller over the same store and cloud: only what is on disk survives.
            h.ctl = controller(&h.store, &h.cloud, &h.clock, lazy.clone());
        }
        let now = cost(&h, &b.id);
        // Eagerly settled: exact every round; lazily: written no more than every ten minutes.
        assert!(cost(&eager, &a.id) > 0.0);
        if now != last_written {
            assert!(step == 10, "step {step}: written at {now}, last {last_written}");
            last_written = now;
        }
    }
    assert!(cost(&h, &b.id) < cost(&eager, &a.id), "the lazy store lags before settling");
    h.ctl.settle_accounts().await.expect("settles");
    let (e, l) = (cost(&eager, &a.id), cost(&h, &b.id));
    assert!((e - l).abs() < 1e-6 * e, "eager {e} vs lazy {l}");
    let progress = |x: &Harness, id: &str| x.job(id).progress_hours;
    assert!((progress(&eager, &a.id) - progress(&h, &b.id)).abs() < 1e-9);
    let spent = |x: &Harness| x.store.get::<scheduler::records::Tenant>("research").unwrap().unwrap().spent_usd;
    assert!((spent(&eager) - spent(&h)).abs() < 1e-6 * e, "tenant spend {} vs {}", spent(&eager), spent(&h));
}

#[tokio::test]
async fn the_cloud_is_reconciled_every_few_minutes_and_a_refilling_orphan_is_deleted() {
    let h = harness("reconcile", two_regions());
    let job = h.submit(A100_GANG);
    h.round().await;
    h.step(61).await;
    assert_eq!(h.job(&job.id).state, JobState::Running);
    // A tagged fleet no live attempt owns, created with `maintain` (it refills itself): what a
    // deletion lost with a crash, or a lost store, leaves behind.
    let ghost = FleetRequest {
        name: "spw-ghost-a3".into(),
        region: "westus3".into(),
        priority: Priority::Regular,
        sizes: vec!["Standard_NC24ads_A100_v4".into()],
        vms: 1,
        min_vms: 1,
        max_price_per_vm: None,
        zones: vec![],
        tags: [(TAG_JOB.to_string(), "ghost".to_string()), (TAG_ATTEMPT.to_string(), "3".to_string())]
            .into_iter()
            .collect(),
        regular: None,
    };
    h.cloud.begin_create(&ghost, &simulator::sim_cloud::CreateOptions::default()).unwrap();
    let r = h.step(60).await;
    assert_eq!(r.orphans, 0, "not due yet: the first round reconciled a minute ago: {r:?}");
    assert_eq!(h.live_fleets().len(), 2);
    h.clock.advance_ms(ControlConfig::default().reconcile_cloud_ms);
    let r = h.round().await;
    assert_eq!((r.orphans, r.fleets_deleted), (1, 1), "{r:?}");
    let names: Vec<String> = h.live_fleets().into_iter().map(|f| f.name).collect();
    assert_eq!(names, [h.detail(&job.id).attempts[0].fleet_name.clone()], "only the live attempt's fleet is left");
    let events = h.store.events_from(0, 1000).unwrap();
    assert_eq!(events.iter().filter(|e| e.kind == "orphan_fleet").count(), 1, "recorded once: {events:#?}");
    assert_eq!(h.job(&job.id).state, JobState::Running, "the live work is untouched");
}

// ---- #24: caps, spend, failovers and progress across rounds ----

const A10_BATCH_CAPPED: &str = r#"
name = "embed-capped"
kind = "batch"
gpus = 16
sizes = ["Standard_NV36ads_A10_v5"]
regions = ["eastus", "westus3"]
spot = "only"
max_price_per_hour = 12.0
duration_hours = 6.0
checkpoint_interval_minutes = 10
"#;

const A10: &str = "Standard_NV36ads_A10_v5";

/// Two regions with room in quota for a few dozen A10 VMs (capacity is set per test).
fn a10_regions() -> SimCloudConfig {
    let mut c = two_regions();
    c.default_quota.low_priority_cores = 2_000;
    c.default_quota.cores = 2_000;
    c.default_quota.family = 2_000;
    c
}

impl Harness {
    fn a10_capacity(&self, east: u32, west: u32) {
        self.cloud.set_capacity("eastus", A10, Priority::Spot, east).unwrap();
        self.cloud.set_capacity("westus3", A10, Priority::Spot, west).unwrap();
        for r in ["eastus", "westus3"] {
            self.cloud.set_capacity(r, A10, Priority::Regular, 0).unwrap();
        }
    }

    /// The job's price per hour: (what its running VMs bill now, what its live fleets may bill).
    fn price_now(&self, id: &str) -> (f64, f64) {
        let live: Vec<Attempt> = self.detail(id).attempts.into_iter().filter(|a| a.is_active()).collect();
        let running = live.iter().map(|a| a.running_vms as f64 * a.price_per_hour).sum();
        let held = live.iter().map(|a| a.vms as f64 * a.max_price_per_vm.unwrap_or(a.price_per_hour)).sum();
        (running, held)
    }
}

#[tokio::test]
async fn a_price_cap_holds_for_the_jobs_total_across_rounds_and_the_reason_states_the_total() {
    let h = harness("cap-total", a10_regions());
    // Spot quota for 10 VMs in eastus and none in westus3 (quota is published, capacity is not):
    // the loop places 10.
    h.a10_capacity(16, 16);
    h.cloud.set_quota_limit("eastus", &QuotaPool::LowPriorityCores, 10 * 36).unwrap();
    h.cloud.set_quota_limit("westus3", &QuotaPool::LowPriorityCores, 0).unwrap();
    let job = h.submit(A10_BATCH_CAPPED);
    let check = |h: &Harness, when: &str| {
        let (running, held) = h.price_now(&job.id);
        assert!(running <= 12.0 + 1e-9, "{when}: running VMs bill {running:.2}/h, cap 12.00/h");
        assert!(held <= 12.0 + 1e-9, "{when}: live fleets may bill {held:.2}/h, cap 12.00/h");
    };
    h.round().await;
    h.step(61).await;
    check(&h, "placed");
    assert_eq!(h.job(&job.id).state, JobState::Running);
    // eastus loses 3 of its 10 spot VMs and cannot refill for now; westus3 opens up (its quota is
    // raised; the loop reads it within its 3-minute quota refresh).
    let first = h.detail(&job.id).attempts[0].clone();
    assert_eq!(first.vms, 10);
    h.cloud.set_capacity("eastus", A10, Priority::Spot, 10).unwrap();
    assert_eq!(h.cloud.evict(&first.fleet_name, 3).unwrap(), 3);
    h.cloud.set_capacity("eastus", A10, Priority::Spot, 7).unwrap();
    h.step(1).await;
    check(&h, "below its minimum");
    h.cloud.set_quota_limit("westus3", &QuotaPool::LowPriorityCores, 2_000).unwrap();
    for i in 0..6 {
        h.step(61).await;
        check(&h, &format!("round {i} after the loss"));
    }
    // eastus gets its capacity back: the fleet refills, and the total still holds.
    h.cloud.set_capacity("eastus", A10, Priority::Spot, 16).unwrap();
    for i in 0..6 {
        h.step(61).await;
        check(&h, &format!("round {i} after the refill"));
    }
    let (running, _) = h.price_now(&job.id);
    assert!(
        running >= 12.0 - 0.8 - 1e-9,
        "the job uses the room its cap leaves: {running:.2}/h: {:?} {:?}",
        h.detail(&job.id).attempts,
        h.event_kinds(&job.id)
    );
    // What it would take to place the rest is said as the job's total against its cap.
    let plan = h.ctl.plan_preview().await.unwrap();
    let why: Vec<String> = plan.unplaced.iter().filter(|u| u.job == job.id).flat_map(|u| u.reasons.clone()).collect();
    assert!(
        why.iter().any(|r| r.contains("would cost 12.80/h in total with 1 more VM at 0.80/h, cap 12.00/h")),
        "{why:?}"
    );
}

/// A splitmix64 step: the random runs below are seeded, so a failure replays.
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn fleet_deleted_costs(h: &Harness, id: &str) -> Vec<f64> {
    h.detail(id)
        .events
        .iter()
        .filter(|e| e.kind.to_string() == "fleet_deleted")
        .filter_map(|e| e.message.rsplit('$').next().and_then(|c| c.parse::<f64>().ok()))
        .collect()
}

#[tokio::test]
async fn a_jobs_cost_never_goes_down_over_a_random_run() {
    for seed in [1_u64, 7, 42] {
        let mut rng = seed;
        let h =
            harness_with(&format!("spend-{seed}"), a10_regions(), ControlConfig { auto_complete: true, ..config() });
        h.a10_capacity(6, 6);
        let mut ids = Vec::new();
        for i in 0..4 {
            let gpus = 6 + next_random(&mut rng) % 8;
            let hours = 1 + next_random(&mut rng) % 3;
            let spec = format!(
                "name = \"split-{i}\"\nkind = \"batch\"\ngpus = {gpus}\nsizes = [\"{A10}\"]\n\
                 regions = [\"eastus\", \"westus3\"]\nspot = \"only\"\nduration_hours = {hours}.0\n\
                 checkpoint_interval_minutes = 15\n"
            );
            ids.push(h.submit(&spec).id);
        }
        let mut last: std::collections::BTreeMap<String, f64> = Default::default();
        for step in 0..120 {
            match next_random(&mut rng) % 10 {
                0 => {
                    let live: Vec<_> = h.live_fleets().into_iter().filter(|f| f.running_vms > 0).collect();
                    if !live.is_empty() {
                        let f = &live[next_random(&mut rng) as usize % live.len()];
                        let n = 1 + (next_random(&mut rng) % f.running_vms as u64) as u32;
                        let _ = h.cloud.evict(&f.name, n);
                    }
                }
                1 => h.a10_capacity((next_random(&mut rng) % 12) as u32, (next_random(&mut rng) % 12) as u32),
                2 => {
                    let id = &ids[next_random(&mut rng) as usize % ids.len()];
                    let _ = h.jobs.cancel(id, "alice");
                }
                _ => {}
            }
            h.step(60 + (next_random(&mut rng) % 600) as i64).await;
            for id in &ids {
                let cost = h.job(id).cost_usd;
                let before = last.insert(id.clone(), cost).unwrap_or(0.0);
                assert!(cost >= before - 1e-9, "seed {seed} step {step}: job {id} cost went from {before} to {cost}");
                let deleted = fleet_deleted_costs(&h, id);
                assert!(
                    deleted.windows(2).all(|w| w[1] >= w[0]),
                    "seed {seed} step {step}: fleet_deleted costs of {id} go down: {deleted:?}"
                );
            }
        }
        // Every dollar is the job's: its cost is what its attempts cost, once settled.
        h.ctl.settle_accounts().await.unwrap();
        for id in &ids {
            let d = h.detail(id);
            let attempts: f64 = d.attempts.iter().map(|a| a.cost_usd).sum();
            assert!(
                (d.job.cost_usd - attempts).abs() < 1e-6,
                "seed {seed}: job {id} cost {} vs attempts {attempts}",
                d.job.cost_usd
            );
        }
    }
}

#[tokio::test]
async fn the_fleets_of_a_job_ended_together_add_up_in_its_cost() {
    // Settled only on changes, so each fleet has an hour to settle when the job ends.
    let h = harness_with("spend-split", a10_regions(), ControlConfig { settle_interval_ms: None, ..config() });
    // Each region's spot quota holds 5 VMs (quota is published; capacity is not).
    h.a10_capacity(16, 16);
    for r in ["eastus", "westus3"] {
        h.cloud.set_quota_limit(r, &QuotaPool::LowPriorityCores, 5 * 36).unwrap();
    }
    let job = h.submit(A10_BATCH_CAPPED);
    h.round().await;
    h.step(61).await;
    let live = h.detail(&job.id).attempts.iter().filter(|a| a.is_active()).count();
    assert_eq!(live, 2, "split over both regions");
    h.step(3_600).await;
    h.jobs.cancel(&job.id, "alice").unwrap();
    h.step(1).await;
    let d = h.detail(&job.id);
    let attempts: f64 = d.attempts.iter().map(|a| a.cost_usd).sum();
    assert!((d.job.cost_usd - attempts).abs() < 1e-6, "job cost {} vs its fleets' {attempts}", d.job.cost_usd);
    let deleted = fleet_deleted_costs(&h, &job.id);
    assert_eq!(deleted.len(), 2);
    assert!(deleted[1] > deleted[0], "the second deletion reports both fleets: {deleted:?}");
}

#[tokio::test]
async fn failovers_say_why_and_never_go_from_a_region_to_itself() {
    // A spot gang job in one region: its fleet is evicted whole, and it is placed again in the
    // same region on regular VMs. That is a new placement, not a failover.
    let h = harness("self-failover", two_regions());
    let job = h.submit(
        r#"
name = "ft-spot"
kind = "training"
gpus = 8
sizes = ["Standard_NC96ads_A100_v4"]
regions = ["eastus"]
spot = "preferred"
duration_hours = 2.0
checkpoint_interval_minutes = 30
"#,
    );
    h.round().await;
    h.step(61).await;
    let first = h.detail(&job.id).attempts[0].clone();
    assert_eq!(first.priority, Priority::Spot);
    h.cloud.evict(&first.fleet_name, first.vms).unwrap();
    h.step(1).await;
    h.step(61).await;
    let d = h.detail(&job.id);
    assert_eq!(d.attempts.len(), 2, "{:?}", d.attempts);
    assert_eq!(d.attempts[1].region, "eastus");
    let failovers: Vec<String> =
        d.events.iter().filter(|e| e.kind.to_string() == "failover").map(|e| e.message.clone()).collect();
    assert!(failovers.is_empty(), "eastus → eastus is no failover: {failovers:?}");
    assert_eq!(d.job.failovers, 0);
    let placed = d.events.iter().rfind(|e| e.kind.to_string() == "placed").unwrap();
    assert!(placed.message.contains("placed again in eastus after: attempt 1 lost 2 of its 2"), "{}", placed.message);

    // Across regions it is a failover, and it names where from and why.
    let h = harness("failover-why", two_regions());
    let job = h.submit(A100_GANG);
    h.round().await;
    h.step(61).await;
    let first = h.detail(&job.id).attempts[0].clone();
    h.cloud.set_outage(&first.region, None, None, true).unwrap();
    h.step(1).await;
    let d = h.detail(&job.id);
    let failover = d.events.iter().find(|e| e.kind.to_string() == "failover").expect("a failover");
    assert!(failover.message.starts_with(&format!("moving from {} to ", first.region)), "{}", failover.message);
    let (_, why) = failover.message.split_once(" after: ").unwrap();
    assert!(why.contains("lost 2 of its 2") && why.contains(&first.region), "{}", failover.message);
}

#[tokio::test]
async fn a_migrating_job_that_cannot_be_placed_says_why() {
    let h = harness("migrating-note", two_regions());
    let job = h.submit(A100_GANG);
    h.round().await;
    h.step(61).await;
    let first = h.detail(&job.id).attempts[0].clone();
    let other = if first.region == "eastus" { "westus3" } else { "eastus" };
    // One VM lost for good, and nowhere to go.
    h.cloud.set_capacity(other, "Standard_NC96ads_A100_v4", Priority::Regular, 0).unwrap();
    h.cloud.set_capacity(&first.region, "Standard_NC96ads_A100_v4", Priority::Regular, 2).unwrap();
    h.cloud.evict(&first.fleet_name, 1).unwrap();
    h.cloud.set_capacity(&first.region, "Standard_NC96ads_A100_v4", Priority::Regular, 1).unwrap();
    h.step(1).await;
    h.step(121).await;
    h.step(61).await;
    let j = h.job(&job.id);
    assert_eq!(j.state, JobState::Migrating);
    assert!(!j.pending_reasons.is_empty(), "a migrating job says what it waits for: {j:?}");
    // The loss started it; the last failure is the refusal the honest cloud gave in the other
    // region (it shows no capacity, so the loop learns westus3 is full by asking once).
    let d = h.detail(&job.id);
    assert!(d.events.iter().any(|e| e.message.contains("lost 1 of its 2")), "{:?}", d.events);
    assert!(
        j.last_failure.as_deref().is_some_and(|f| f.contains("no capacity") && f.contains(other)),
        "{:?}",
        j.last_failure
    );
}

#[tokio::test]
async fn a_partly_placed_job_progresses_with_the_gpus_it_has_and_never_faster_than_whole() {
    let cfg = ControlConfig { auto_complete: true, ..config() };
    let h = harness_with("partial-progress", a10_regions(), cfg);
    // Spot quota for 10 VMs in eastus and none in westus3: the loop reads it and places 10.
    h.a10_capacity(16, 16);
    h.cloud.set_quota_limit("eastus", &QuotaPool::LowPriorityCores, 10 * 36).unwrap();
    h.cloud.set_quota_limit("westus3", &QuotaPool::LowPriorityCores, 0).unwrap();
    let job = h.submit(
        r#"
name = "embed"
kind = "batch"
gpus = 16
sizes = ["Standard_NV36ads_A10_v5"]
regions = ["eastus", "westus3"]
spot = "only"
duration_hours = 1.5
checkpoint_interval_minutes = 10
"#,
    );
    h.round().await;
    h.step(61).await;
    for _ in 0..9 {
        h.step(600).await; // 1.5 h on 10 of 16 GPUs
    }
    let j = h.job(&job.id);
    assert_eq!(j.state, JobState::Running, "10 of 16 GPUs do 10/16 of the work an hour");
    assert!((j.progress_hours - 1.5 * 10.0 / 16.0).abs() < 0.02, "progress {}", j.progress_hours);

    // Now all 16 in eastus; 6 are lost, the job is topped up in westus3, and eastus refills just
    // before the top-up runs: for a while the job holds more GPUs than it wants, and still
    // progresses at its full size, not faster.
    let h = harness_with("overlap-progress", a10_regions(), ControlConfig { auto_complete: true, ..config() });
    h.a10_capacity(16, 0);
    let job = h.submit(&A10_BATCH_CAPPED.replace("max_price_per_hour = 12.0\n", "").replace("6.0", "3.0"));
    h.round().await;
    h.step(61).await;
    let first = h.detail(&job.id).attempts[0].clone();
    assert_eq!(first.vms, 16);
    h.cloud.evict(&first.fleet_name, 6).unwrap();
    h.a10_capacity(10, 16);
    h.step(1).await;
    h.step(100).await; // still within the grace period
    h.a10_capacity(16, 16); // eastus refills a minute from now
    let r = h.step(21).await; // past the grace period: placed again
    assert_eq!(r.placements, 1, "{r:?}");
    h.step(50).await; // eastus is back to 16
    h.step(61).await; // the new placement runs
    let start = h.job(&job.id).progress_hours;
    for _ in 0..6 {
        h.step(600).await;
    }
    let done = h.job(&job.id).progress_hours - start;
    assert!(done <= 1.0 + 1e-6, "an hour of work at most in an hour: {done}");
    assert!(done >= 0.9, "and close to it, with every GPU it wants: {done}");
}

#[tokio::test]
async fn a_job_grows_its_fleet_with_a_put_of_the_new_capacity_instead_of_adding_fleets() {
    let h = harness("grow-fleet", a10_regions());
    // Spot quota for 10 VMs in eastus and none in westus3: the loop reads it and places 10.
    h.a10_capacity(16, 16);
    h.cloud.set_quota_limit("eastus", &QuotaPool::LowPriorityCores, 10 * 36).unwrap();
    h.cloud.set_quota_limit("westus3", &QuotaPool::LowPriorityCores, 0).unwrap();
    let job = h.submit(
        r#"
name = "embed"
kind = "batch"
gpus = 16
sizes = ["Standard_NV36ads_A10_v5"]
regions = ["eastus", "westus3"]
spot = "only"
duration_hours = 4.0
"#,
    );
    h.round().await;
    h.step(61).await;
    let first = h.detail(&job.id).attempts[0].clone();
    assert_eq!((first.vms, first.gpus, first.state), (10, 10, AttemptState::Running));
    // Quota for all 16 in eastus, read at the loop's next quota refresh (3 minutes): the job's
    // fleet there grows to 16; no second fleet, no second try.
    h.cloud.set_quota_limit("eastus", &QuotaPool::LowPriorityCores, 2_000).unwrap();
    let mut r = h.step(61).await;
    for _ in 0..3 {
        if r.placements > 0 {
            break;
        }
        r = h.step(61).await;
    }
    assert_eq!(r.placements, 1, "{r:?}");
    let growing = h.detail(&job.id).attempts;
    assert_eq!(growing.len(), 1, "one fleet per job × region × priority: {growing:?}");
    assert_eq!(growing[0].vms, 10, "the new capacity counts once the cloud confirms it");
    for _ in 0..3 {
        h.step(61).await;
    }
    let d = h.detail(&job.id);
    assert_eq!(d.job.attempts, 1, "attempts count real attempts, not growths");
    assert_eq!(d.attempts.len(), 1, "{:?}", d.attempts);
    let a = &d.attempts[0];
    assert_eq!((a.vms, a.gpus, a.running_vms, a.state), (16, 16, 16, AttemptState::Running), "{a:?}");
    assert_eq!(a.growing_to, None);
    let fleets: Vec<_> = h.live_fleets().into_iter().filter(|f| f.tags.get(TAG_JOB) == Some(&job.id)).collect();
    assert_eq!(fleets.len(), 1, "{fleets:?}");
    assert_eq!(fleets[0].name, first.fleet_name);
    let f = h.cloud.get_fleet(&first.fleet_name).await.unwrap();
    assert_eq!((f.capacity_vms, f.min_capacity_vms, f.running_vms), (16, 10, Some(16)), "minCapacity never changes");
    let kinds = h.event_kinds(&job.id);
    assert_eq!(kinds.iter().filter(|k| *k == "resized").count(), 2, "asked, then done: {kinds:?}");
    assert_eq!(kinds.iter().filter(|k| *k == "placed").count(), 1, "{kinds:?}");
    assert!(h.cloud.counters().creates_refused == 0);
    // Billed for 16 VMs from the growth on: an hour more costs 16 VM-hours.
    let before = h.job(&job.id).cost_usd;
    for _ in 0..60 {
        h.step(60).await;
    }
    let hour = h.job(&job.id).cost_usd - before;
    let expected = 16.0 * a.price_per_hour;
    assert!((hour - expected).abs() < 0.01 * expected, "an hour of 16 VMs: {hour:.3} vs {expected:.3}");
}

#[tokio::test]
async fn a_growth_the_cloud_refuses_leaves_the_fleet_as_it_was() {
    let h = harness("grow-refused", a10_regions());
    h.a10_capacity(16, 16);
    // Spot quota for 16 VMs in eastus (published, read by the loop); another job holds 6 of them.
    h.cloud.set_quota_limit("eastus", &QuotaPool::LowPriorityCores, 16 * 36).unwrap();
    let spec = |name: &str, gpus: u32| {
        format!(
            "name = \"{name}\"\nkind = \"batch\"\ngpus = {gpus}\nsizes = [\"{A10}\"]\nregions = [\"eastus\"]\n\
             spot = \"only\"\nduration_hours = 4.0\n"
        )
    };
    let holder = h.submit(&spec("holder", 6));
    h.round().await;
    let job = h.submit(&spec("embed", 16));
    h.step(61).await;
    h.step(61).await;
    let first = h.detail(&job.id).attempts[0].clone();
    assert_eq!((first.region.as_str(), first.vms, first.state), ("eastus", 10, AttemptState::Running), "{first:?}");
    // The other job ends, and eastus' spot quota shrinks to what the fleet holds, unknown to the
    // loop (its next read is due in a minute): the loop asks to grow the fleet; the cloud refuses.
    h.jobs.cancel(&holder.id, "alice").unwrap();
    h.cloud.set_quota_limit("eastus", &QuotaPool::LowPriorityCores, 360).unwrap();
    let r = h.step(30).await;
    assert_eq!(r.placements, 1, "{r:?}");
    let d = h.detail(&job.id);
    assert_eq!(d.attempts.len(), 1, "{:?}", d.attempts);
    let a = &d.attempts[0];
    assert_eq!((a.vms, a.vcpus, a.growing_to, a.state), (10, 360, None, AttemptState::Running), "{a:?}");
    let f = h.cloud.get_fleet(&first.fleet_name).await.unwrap();
    assert_eq!((f.capacity_vms, f.running_vms), (10, Some(10)));
    let refusal = d.events.iter().filter(|e| e.kind.to_string() == "resized").map(|e| e.message.clone()).next_back();
    assert!(refusal.as_deref().is_some_and(|m| m.contains("refused") && m.contains("keeps 10")), "{refusal:?}");
    // The job keeps running on what it has, and waits for quota for the rest.
    for _ in 0..3 {
        h.step(61).await;
    }
    let j = h.job(&job.id);
    assert_eq!(j.state, JobState::Running);
    assert_eq!(j.attempts, 1);
    assert!(
        j.pending_reasons.is_empty() || j.pending_reasons.iter().any(|r| r.contains("quota")),
        "{:?}",
        j.pending_reasons
    );
}

#[tokio::test]
async fn a_growth_written_but_never_sent_is_sent_once_after_a_restart() {
    let h = harness("grow-restart", a10_regions());
    // Spot quota for 10 VMs in eastus (published, read by the loop): it places 10.
    h.a10_capacity(16, 16);
    h.cloud.set_quota_limit("eastus", &QuotaPool::LowPriorityCores, 10 * 36).unwrap();
    let job = h.submit(
        r#"
name = "embed"
kind = "batch"
gpus = 16
sizes = ["Standard_NV36ads_A10_v5"]
regions = ["eastus"]
spot = "only"
duration_hours = 4.0
"#,
    );
    h.round().await;
    h.step(61).await;
    // "Crash" between writing the growth and asking the cloud: the record says growing, the
    // cloud's fleet has not heard of it.
    let mut a = h.detail(&job.id).attempts[0].clone();
    a.growing_to = Some(scheduler::model::Capacity { vms: 16, gpus: 16 });
    a.min_vms = Some(10);
    a.vcpus = 16 * 36;
    h.store.put(&a).unwrap();
    h.cloud.set_quota_limit("eastus", &QuotaPool::LowPriorityCores, 2_000).unwrap();
    let restarted = controller(&h.store, &h.cloud, &h.clock, config());
    h.clock.advance_ms(1000);
    let r = restarted.reconcile().await.unwrap();
    assert_eq!(r.placements, 0, "the growth on record is sent, not planned again: {r:?}");
    assert_eq!(h.cloud.get_fleet(&a.fleet_name).await.unwrap().capacity_vms, 16);
    for _ in 0..3 {
        h.clock.advance_ms(61_000);
        restarted.reconcile().await.unwrap();
    }
    let d = h.detail(&job.id);
    assert_eq!(d.attempts.len(), 1, "{:?}", d.attempts);
    assert_eq!((d.attempts[0].vms, d.attempts[0].running_vms, d.attempts[0].growing_to), (16, 16, None));
    assert_eq!(h.live_fleets().len(), 1);
    assert_eq!(h.cloud.counters().creates_refused, 0);
}

/// README: `serve`'s bundled cloud has eastus short of A100s "so placements there fail and the work
/// fails over". The honest cloud (issue #22) shows no capacity, so that is learnt, not read: two
/// one-VM jobs both go to eastus, the cheapest region; it has room for one, the other's allocation
/// fails, the offer is blocked, and that job runs in another region.
#[tokio::test]
async fn in_the_serve_default_cloud_eastus_runs_short_and_the_work_fails_over() {
    let text = include_str!("../../scenarios/serve-default.toml");
    let cfg = SimCloudConfig::from_scenario_str(text, "serve-default").expect("bundled scenario");
    let h = harness("serve-default", cfg);
    let spec = r#"
name = "a100"
kind = "training"
gpus = 1
sizes = ["Standard_NC24ads_A100_v4"]
spot = "never"
duration_hours = 2.0
"#;
    let jobs = [h.submit(spec), h.submit(spec)];
    let r = h.round().await;
    assert_eq!(r.placements, 2, "{r:?}");
    for j in &jobs {
        assert_eq!(h.detail(&j.id).attempts[0].region, "eastus", "eastus is the cheapest: {:?}", h.detail(&j.id));
    }
    for _ in 0..6 {
        h.step(61).await;
    }
    let details: Vec<_> = jobs.iter().map(|j| h.detail(&j.id)).collect();
    let failed: Vec<_> = details
        .iter()
        .filter(|d| d.attempts[0].failure_class == Some(scheduler::cloud::FailureClass::Capacity))
        .collect();
    assert_eq!(failed.len(), 1, "eastus had room for one: {details:?}");
    let moved = failed[0];
    let last = moved.attempts.last().unwrap();
    assert_ne!(last.region, "eastus", "the refused job failed over: {:?}", moved.attempts);
    assert_eq!(h.job(&moved.job.id).state, JobState::Running, "{:?}", moved.attempts);
    assert!(h.event_kinds(&moved.job.id).contains(&"provisioning_failed".to_string()));
    let cap = h.ctl.capacity().await.unwrap();
    assert!(
        cap.blocked_offers
            .iter()
            .any(|b| b.region == "eastus" && b.size.as_deref() == Some("Standard_NC24ads_A100_v4")),
        "the shortage is remembered as a blocked offer: {:?}",
        cap.blocked_offers
    );
}

/// A pipeline over the harness's job service; returns its job ids by name.
fn submit_pipeline(h: &Harness, value: serde_json::Value) -> std::collections::BTreeMap<String, String> {
    let (detail, _) = h.jobs.submit_pipeline_value(value, None, None).expect("pipeline accepted");
    detail.jobs.into_iter().map(|j| (j.name, j.id)).collect()
}

/// An 8-GPU A100 stage of a pipeline.
fn a100_stage(name: &str, after: &[&str], hours: f64) -> serde_json::Value {
    serde_json::json!({"name": name, "kind": "training", "gpus": 8, "sizes": ["Standard_NC96ads_A100_v4"],
        "regions": ["eastus", "westus3"], "spot": "never", "duration_hours": hours,
        "checkpoint_interval_minutes": 30, "depends_on": after})
}

#[tokio::test]
async fn a_failed_stage_fails_every_stage_below_it_in_one_round() {
    let h = harness("pipeline-fail-down", two_regions());
    let ids = submit_pipeline(
        &h,
        serde_json::json!({"name": "chain", "tenant": "research", "jobs": [
            a100_stage("a", &[], 1.0), a100_stage("b", &["a"], 1.0), a100_stage("c", &["b"], 1.0),
            a100_stage("d", &["c"], 1.0)]}),
    );
    h.round().await;
    assert_eq!(h.job(&ids["b"]).pending_reasons, ["waiting for a"]);
    h.jobs.cancel(&ids["a"], "tester").unwrap();
    h.step(1).await;
    for (name, dep) in [("b", "dependency a was cancelled"), ("c", "dependency b failed"), ("d", "dependency c failed")]
    {
        let j = h.job(&ids[name]);
        assert_eq!((j.state, j.end_reason.as_deref()), (JobState::Failed, Some(dep)), "{name}");
    }
}

#[tokio::test]
async fn a_stage_that_waits_again_weeks_after_its_dependency_ended_is_gated_by_what_the_pipeline_kept() {
    let cfg = ControlConfig { auto_complete: true, ..config() };
    let keep_ms = cfg.retain_finished_ms.expect("the default keeps finished jobs a while");
    let h = harness_with("pipeline-retention", two_regions(), cfg);
    let mut prep = a100_stage("prep", &[], 1.0);
    prep["regions"] = serde_json::json!(["westus3"]);
    prep["output_gb"] = serde_json::json!(20000);
    let ids = submit_pipeline(
        &h,
        serde_json::json!({"name": "long", "tenant": "research", "jobs": [prep, a100_stage("train", &["prep"], 2000.0)]}),
    );
    h.round().await;
    h.step(61).await;
    for _ in 0..7 {
        h.step(600).await;
    }
    assert_eq!(h.job(&ids["prep"]).state, JobState::Succeeded);
    h.step(61).await;
    h.step(61).await;
    assert_eq!(h.job(&ids["train"]).state, JobState::Running);
    let first = h.detail(&ids["train"]).attempts[0].clone();
    assert_eq!(first.region, "westus3", "train runs where prep's 20 TB lie");
    // Past the retention prep is forgotten; its pipeline keeps how it ended.
    h.step(keep_ms / 1000 + 3_600).await;
    h.step(120).await;
    assert!(h.jobs.get(&ids["prep"]).unwrap().is_none(), "prep forgotten past the retention");
    let kept = h.jobs.pipeline(&h.job(&ids["train"]).pipeline.unwrap().pipeline_id).unwrap().unwrap();
    let ended = kept.pipeline.jobs[0].ended.clone().expect("the pipeline kept prep's end");
    assert_eq!(
        (ended.state, ended.last_region.as_deref(), ended.output_gb),
        (JobState::Succeeded, Some("westus3"), Some(20000.0))
    );
    // train loses its VMs: it waits again, is gated by prep as kept, and moves prep's output.
    h.cloud.set_outage("westus3", None, None, true).unwrap();
    h.step(1).await;
    let train = h.job(&ids["train"]);
    assert!(!train.state.is_final(), "train must not fail: {:?} {:?}", train.state, train.end_reason);
    let d = h.detail(&ids["train"]);
    let placed: Vec<String> =
        d.events.iter().filter(|e| e.kind.to_string() == "placed").map(|e| e.message.clone()).collect();
    assert_eq!(d.attempts.last().unwrap().region, "eastus", "{placed:?}");
    assert!(placed.last().unwrap().contains("20000 GB of data moved from westus3"), "{placed:?}");
}

/// Issue #23: a pipeline is forgotten with the last of its jobs (all final and past the job
/// retention), with its `Idempotency-Key`; until then it keeps what it needs of the forgotten ones.
#[tokio::test]
async fn a_pipeline_is_forgotten_with_the_last_of_its_jobs_and_not_before() {
    let cfg = ControlConfig { auto_complete: true, retain_finished_ms: Some(3_600_000), ..config() };
    let h = harness_with("pipeline-forgotten", two_regions(), cfg);
    let (detail, _) = h
        .jobs
        .submit_pipeline_value(
            serde_json::json!({"name": "short", "tenant": "research",
                "jobs": [a100_stage("prep", &[], 1.0), a100_stage("train", &["prep"], 3.0)]}),
            None,
            Some("pipe-1"),
        )
        .expect("pipeline accepted");
    let id = detail.pipeline.id.clone();
    let ids: std::collections::BTreeMap<String, String> = detail.jobs.into_iter().map(|j| (j.name, j.id)).collect();
    let key = || h.store.get::<scheduler::records::PipelineKey>("research/pipe-1").unwrap();
    assert!(key().is_some());
    h.round().await;
    let mut minutes = 0;
    while h.job(&ids["train"]).state != JobState::Succeeded {
        assert!(minutes < 8 * 60, "train did not succeed in 8 h: {:?}", h.job(&ids["train"]).state);
        h.step(600).await;
        minutes += 10;
    }
    // prep ended some 3 h ago, train just now: prep is forgotten, the pipeline stays (it is all
    // train's dependency gate and view have of prep) and so does its key.
    h.step(120).await;
    assert!(h.jobs.get(&ids["prep"]).unwrap().is_none(), "prep forgotten past the retention");
    let kept = h.jobs.pipeline(&id).unwrap().expect("the pipeline stays while a job of it is kept");
    assert!(kept.pipeline.jobs.iter().find(|m| m.name == "prep").unwrap().ended.is_some());
    assert!(kept.pipeline.jobs.iter().find(|m| m.name == "train").unwrap().ended.is_none());
    assert!(key().is_some(), "the key stays with its pipeline");
    // Within the hour after train ended, still there; past it, train and the pipeline are gone
    // together, and its key with them.
    h.step(1_800).await;
    assert!(h.jobs.pipeline(&id).unwrap().is_some(), "kept within the retention");
    for _ in 0..3 {
        h.step(900).await;
    }
    assert!(h.jobs.get(&ids["train"]).unwrap().is_none(), "train forgotten past the retention");
    assert!(h.jobs.pipeline(&id).unwrap().is_none(), "the pipeline went with its last job");
    assert!(h.store.get::<scheduler::model::Pipeline>(&id).unwrap().is_none());
    assert!(key().is_none(), "its idempotency key went with it");
    let page = h.jobs.pipelines_page(None, None, None, 10).unwrap();
    assert_eq!(page.total, 0, "no pipeline listed");
}

#[tokio::test]
async fn a_stage_whose_data_region_is_full_runs_elsewhere_and_pays_the_egress_with_room_it_stays() {
    for full in [false, true] {
        let cfg = ControlConfig { auto_complete: true, ..config() };
        let h = harness_with(if full { "pipeline-egress-full" } else { "pipeline-egress-room" }, two_regions(), cfg);
        let mut prep = a100_stage("prep", &[], 1.0);
        prep["regions"] = serde_json::json!(["westus3"]);
        prep["output_gb"] = serde_json::json!(500);
        let ids = submit_pipeline(
            &h,
            serde_json::json!({"name": "two", "tenant": "research", "jobs": [prep, a100_stage("train", &["prep"], 1.0)]}),
        );
        h.round().await;
        h.step(61).await;
        assert_eq!(h.job(&ids["prep"]).state, JobState::Running);
        if full {
            // westus3 has no A100 quota beyond what prep holds: train may only run in eastus.
            let family = QuotaPool::Family("standardNCADSA100v4Family".into());
            h.cloud.set_quota_limit("westus3", &family, 0).unwrap();
        }
        let spent = || h.store.get::<scheduler::records::Tenant>("research").unwrap().map_or(0.0, |t| t.spent_usd);
        let mut spent_before = 0.0;
        for _ in 0..20 {
            if h.job(&ids["train"]).state != JobState::Pending {
                break;
            }
            spent_before = spent();
            h.step(300).await;
        }
        assert_eq!(h.job(&ids["prep"]).state, JobState::Succeeded);
        h.step(61).await;
        let d = h.detail(&ids["train"]);
        assert_eq!(d.job.state, JobState::Running, "{:?}", d.job.pending_reasons);
        let a = d.attempts.last().unwrap().clone();
        let placed: Vec<String> =
            d.events.iter().filter(|e| e.kind.to_string() == "placed").map(|e| e.message.clone()).collect();
        if !full {
            assert_eq!(a.region, "westus3", "with room, train stays with prep's output: {placed:?}");
            assert!(placed[0].contains("data in westus3"), "{placed:?}");
            assert_eq!(a.egress_usd, 0.0);
            continue;
        }
        // 500 GB at the catalog's $0.02/GB between US regions: $10, in the event, the attempt's
        // and the job's cost, and the tenant's spend, billed once as the attempt ran.
        assert_eq!(a.region, "eastus", "{placed:?}");
        assert!(placed[0].contains("500 GB of data moved from westus3: egress $10.00"), "{placed:?}");
        assert!((a.egress_usd - 10.0).abs() < 1e-9, "{a:?}");
        assert!(a.cost_usd >= 10.0 && d.job.cost_usd >= a.cost_usd, "{} {}", a.cost_usd, d.job.cost_usd);
        let spent_now = spent();
        assert!(spent_now - spent_before >= 10.0, "the tenant's spend took the egress: {spent_before} → {spent_now}");
        let running: Vec<String> =
            d.events.iter().filter(|e| e.kind.to_string() == "running").map(|e| e.message.clone()).collect();
        assert!(running[0].contains("egress $10.00 billed"), "{running:?}");
        // Billed once: more rounds add the VMs' hours, not the egress again.
        let before = h.job(&ids["train"]).cost_usd;
        h.step(60).await;
        let after = h.job(&ids["train"]).cost_usd;
        let hour_of_vms = 2.0 * a.price_per_hour / 60.0;
        assert!(after - before < hour_of_vms + 1.0, "{before} → {after}");
        // The tenant paid what its jobs cost, egress included, to the cent.
        let jobs_cost = h.job(&ids["prep"]).cost_usd + after;
        assert!((spent() - jobs_cost).abs() < 0.01, "tenant {} against jobs {jobs_cost}", spent());
    }
}

/// Issue #23: data moved once to a region is there. A stage that runs away from its input (its data
/// region has no quota) pays the egress when its first attempt runs; when that attempt's VMs are
/// lost and a new attempt runs in the same region, the input is not billed again: the job, its
/// attempts and its tenant pay for it once.
#[tokio::test]
async fn a_moved_stage_placed_again_in_the_region_its_data_was_moved_to_pays_the_egress_once() {
    let cfg = ControlConfig { auto_complete: true, ..config() };
    let h = harness_with("pipeline-egress-once", two_regions(), cfg);
    let mut prep = a100_stage("prep", &[], 1.0);
    prep["regions"] = serde_json::json!(["westus3"]);
    prep["output_gb"] = serde_json::json!(500);
    let ids = submit_pipeline(
        &h,
        serde_json::json!({"name": "two", "tenant": "research", "jobs": [prep, a100_stage("train", &["prep"], 4.0)]}),
    );
    h.round().await;
    h.step(61).await;
    // westus3 has no A100 quota beyond what prep holds: train may only run in eastus.
    h.cloud.set_quota_limit("westus3", &QuotaPool::Family("standardNCADSA100v4Family".into()), 0).unwrap();
    for _ in 0..20 {
        if h.job(&ids["train"]).state == JobState::Running {
            break;
        }
        h.step(300).await;
    }
    let first = h.detail(&ids["train"]).attempts.last().unwrap().clone();
    assert_eq!((first.region.as_str(), first.running_since_ms.is_some()), ("eastus", true), "{first:?}");
    assert!((first.egress_usd - 10.0).abs() < 1e-9, "the first move pays for the 500 GB: {first:?}");
    // Its VMs are lost and eastus has no room for a while: past the grace period the stage waits
    // for a new placement, which comes in eastus again when room does (westus3 has no quota).
    let size = "Standard_NC96ads_A100_v4";
    h.cloud.set_capacity("eastus", size, Priority::Regular, first.vms).unwrap();
    h.cloud.evict(&first.fleet_name, first.vms).unwrap();
    h.cloud.set_capacity("eastus", size, Priority::Regular, 0).unwrap();
    h.step(1).await;
    h.step(181).await;
    h.cloud.set_capacity("eastus", size, Priority::Regular, 2 * first.vms).unwrap();
    let ran_in_eastus = || {
        h.detail(&ids["train"])
            .attempts
            .into_iter()
            .filter(|a| a.region == "eastus" && a.running_since_ms.is_some())
            .count()
    };
    for _ in 0..60 {
        if ran_in_eastus() >= 2 {
            break;
        }
        h.step(60).await;
    }
    let d = h.detail(&ids["train"]);
    let ran: Vec<&Attempt> = d.attempts.iter().filter(|a| a.running_since_ms.is_some()).collect();
    assert!(ran.len() >= 2 && ran.iter().all(|a| a.region == "eastus"), "{:?}", d.attempts);
    let billed: f64 = ran.iter().map(|a| a.egress_usd).sum();
    assert!((billed - 10.0).abs() < 1e-9, "the input is billed once, not at every attempt: {billed} over {ran:?}");
    assert_eq!(ran.iter().map(|a| a.egress_gb).sum::<f64>(), 500.0, "{ran:?}");
    let billed_events = d.events.iter().filter(|e| e.message.contains("billed for its input")).count();
    assert_eq!(billed_events, 1, "{:?}", d.events);
    let placed: Vec<&str> =
        d.events.iter().filter(|e| e.kind.to_string() == "placed").map(|e| e.message.as_str()).collect();
    assert!(placed.last().unwrap().contains("data from westus3 already moved to eastus"), "{placed:?}");
    // The tenant paid what its jobs cost, the one egress included, to the cent.
    let spent = h.store.get::<scheduler::records::Tenant>("research").unwrap().map_or(0.0, |t| t.spent_usd);
    let jobs_cost = h.job(&ids["prep"]).cost_usd + h.job(&ids["train"]).cost_usd;
    assert!((spent - jobs_cost).abs() < 0.01, "tenant {spent} against jobs {jobs_cost}");
}

/// The simulated cloud with one hook: the first read of a named fleet runs a callback first, so a
/// test can act between the round's read of the store and its decisions (a user's cancel that
/// comes while the round looks at the cloud).
struct HookOnFleetRead {
    inner: Arc<simulator::sim_cloud::SimCloud>,
    hook: std::sync::Mutex<Option<FleetReadHook>>,
}

/// The fleet whose first read runs the callback, and the callback.
type FleetReadHook = (String, Box<dyn FnOnce() + Send>);

#[async_trait::async_trait]
impl Cloud for HookOnFleetRead {
    async fn offers(&self) -> Result<Vec<scheduler::model::Offer>, scheduler::cloud::CloudError> {
        self.inner.offers().await
    }
    async fn quota(&self, region: &str) -> Result<Vec<scheduler::model::Quota>, scheduler::cloud::CloudError> {
        self.inner.quota(region).await
    }
    async fn restrictions(
        &self,
        region: &str,
    ) -> Result<Vec<scheduler::cloud::SizeRestriction>, scheduler::cloud::CloudError> {
        self.inner.restrictions(region).await
    }
    async fn begin_create_fleet(
        &self,
        request: &FleetRequest,
    ) -> Result<scheduler::cloud::FleetOperation, scheduler::cloud::CloudError> {
        self.inner.begin_create_fleet(request).await
    }
    async fn begin_resize_fleet(
        &self,
        request: &FleetRequest,
    ) -> Result<scheduler::cloud::FleetOperation, scheduler::cloud::CloudError> {
        self.inner.begin_resize_fleet(request).await
    }
    async fn poll_operation(
        &self,
        operation: &scheduler::cloud::FleetOperation,
    ) -> Result<scheduler::cloud::OperationStatus, scheduler::cloud::CloudError> {
        self.inner.poll_operation(operation).await
    }
    async fn get_fleet(&self, name: &str) -> Result<scheduler::cloud::Fleet, scheduler::cloud::CloudError> {
        let hook = {
            let mut armed = self.hook.lock().unwrap();
            if armed.as_ref().is_some_and(|(fleet, _)| fleet == name) { armed.take() } else { None }
        };
        if let Some((_, run)) = hook {
            run();
        }
        self.inner.get_fleet(name).await
    }
    async fn delete_fleet(&self, name: &str) -> Result<(), scheduler::cloud::CloudError> {
        self.inner.delete_fleet(name).await
    }
    async fn list_fleets(&self) -> Result<Vec<scheduler::cloud::Fleet>, scheduler::cloud::CloudError> {
        self.inner.list_fleets().await
    }
    async fn fleet_scale_sets(
        &self,
        name: &str,
    ) -> Result<Vec<scheduler::cloud::ScaleSet>, scheduler::cloud::CloudError> {
        self.inner.fleet_scale_sets(name).await
    }
}

/// A stage cancelled while its fleet is being created, whose fleet then runs (the cancel came after
/// the round read the job): the egress of its input, billed to the attempt and the tenant, is in
/// the job's cost too, so the tenant's spend is what its jobs cost.
#[tokio::test]
async fn a_stage_cancelled_while_its_fleet_is_created_pays_its_egress_in_its_own_cost() {
    let cfg = ControlConfig { auto_complete: true, ..config() };
    let mut h = harness_with("pipeline-egress-cancelled", two_regions(), cfg.clone());
    let hooked = Arc::new(HookOnFleetRead { inner: h.cloud.clone(), hook: std::sync::Mutex::new(None) });
    h.ctl = scheduler::control::Controller::new(
        h.store.clone(),
        hooked.clone() as Arc<dyn Cloud>,
        h.clock.clone() as Arc<dyn Clock>,
        Arc::new(scheduler::Catalog::builtin()),
        cfg,
        scheduler::control::ControlMetrics::unregistered(),
    );
    let mut prep = a100_stage("prep", &[], 1.0);
    prep["regions"] = serde_json::json!(["westus3"]);
    prep["output_gb"] = serde_json::json!(500);
    let ids = submit_pipeline(
        &h,
        serde_json::json!({"name": "two", "tenant": "research", "jobs": [prep, a100_stage("train", &["prep"], 1.0)]}),
    );
    h.round().await;
    h.step(61).await;
    assert_eq!(h.job(&ids["prep"]).state, JobState::Running);
    // westus3 has no A100 quota beyond what prep holds: train is placed in eastus, away from its
    // 500 GB of input ($10 of egress at the catalog's $0.02/GB).
    h.cloud.set_quota_limit("westus3", &QuotaPool::Family("standardNCADSA100v4Family".into()), 0).unwrap();
    for _ in 0..40 {
        if h.job(&ids["train"]).state != JobState::Pending {
            break;
        }
        h.step(300).await;
    }
    assert_eq!(h.job(&ids["train"]).state, JobState::Provisioning);
    let placed = h.detail(&ids["train"]).attempts.last().unwrap().clone();
    assert_eq!((placed.region.as_str(), placed.egress_usd), ("eastus", 10.0), "{placed:?}");
    // The user cancels train while the round looks at its fleet, which has been created.
    let canceller = scheduler::jobs::JobService::new(
        h.store.clone(),
        Arc::new(scheduler::Catalog::builtin()),
        h.clock.clone() as Arc<dyn Clock>,
    )
    .without_flush();
    let train_id = ids["train"].clone();
    *hooked.hook.lock().unwrap() = Some((
        placed.fleet_name.clone(),
        Box::new(move || {
            canceller.cancel(&train_id, "tester").expect("cancelled");
        }),
    ));
    h.step(61).await;
    assert!(hooked.hook.lock().unwrap().is_none(), "the hook ran");
    let d = h.detail(&ids["train"]);
    let ran = d.attempts.iter().find(|a| a.number == placed.number).unwrap();
    assert!(ran.running_since_ms.is_some(), "the fleet ran after the cancel: {ran:?}");
    assert_eq!(d.job.state, JobState::Cancelled, "the user's cancel stands");
    // The next rounds delete the fleet and settle it.
    h.step(60).await;
    h.step(60).await;
    let d = h.detail(&ids["train"]);
    assert!(d.attempts.iter().all(|a| !a.is_active()), "{:?}", d.attempts);
    let attempts_cost: f64 = d.attempts.iter().map(|a| a.cost_usd).sum();
    assert!(d.job.cost_usd >= 10.0, "the job's cost has its egress: {}", d.job.cost_usd);
    assert!((d.job.cost_usd - attempts_cost).abs() < 0.01, "job {} against attempts {attempts_cost}", d.job.cost_usd);
    let running: Vec<&str> =
        d.events.iter().filter(|e| e.kind.to_string() == "running").map(|e| e.message.as_str()).collect();
    assert!(running.iter().any(|m| m.contains("egress $10.00 billed")), "{running:?}");
    // The tenant paid what its jobs cost, egress included, to the cent.
    let prep_done = h.job(&ids["prep"]);
    let spent = h.store.get::<scheduler::records::Tenant>("research").unwrap().unwrap().spent_usd;
    let jobs_cost = prep_done.cost_usd + d.job.cost_usd;
    assert!((spent - jobs_cost).abs() < 0.01, "tenant {spent} against jobs {jobs_cost}");
}

/// Issue #20: a pool that keeps waiting work out is watched (gauges, one `quota_exhausted` event
/// past the threshold, `quota_recovered` when it clears), and the live advice names it.
#[tokio::test]
async fn a_pool_that_keeps_work_out_is_reported_once_per_episode_and_the_live_advice_names_it() {
    use scheduler::control::PoolLabel;
    let mut cfg = two_regions();
    cfg.quota.push(toml::from_str("region = \"eastus\"\n[families]\nstandardNCADSA100v4Family = 0\n").unwrap());
    cfg.quota.push(toml::from_str("region = \"westus3\"\n[families]\nstandardNCADSA100v4Family = 96\n").unwrap());
    let h = harness("quota-watch", cfg);
    let job = h.submit(
        r#"
name = "ft"
tenant = "research"
kind = "training"
gpus = 8
sizes = ["Standard_NC96ads_A100_v4"]
regions = ["eastus", "westus3"]
spot = "never"
duration_hours = 2.0
"#,
    );
    let quota_events = |h: &Harness| -> Vec<(String, Option<String>, String)> {
        h.store
            .events_from(0, 10_000)
            .unwrap()
            .into_iter()
            .filter(|e| e.kind.starts_with("quota_"))
            .map(|e| (e.kind, e.job_id, e.message))
            .collect()
    };
    h.round().await;
    let west = PoolLabel { region: "westus3".into(), pool: "standardNCADSA100v4Family".into() };
    let m = h.ctl.metrics();
    assert_eq!(m.quota_limit.get_or_create(&west).get(), 96);
    assert_eq!(m.quota_free.get_or_create(&west).get(), 96);
    assert_eq!(m.quota_used.get_or_create(&west).get(), 0);
    assert_eq!(m.quota_blocked_jobs.get_or_create(&west).get(), 1, "the 8-GPU gang needs 192 vCPUs");
    assert_eq!(m.quota_exhausted.get_or_create(&west).get(), 0);

    // The live advice: the pool, +96 (one NC96 VM), confirmed to place the job.
    let advice = h.ctl.advise(3).await.expect("advice");
    let first = &advice.recommendations[0];
    let inc = &first.increases[0];
    assert_eq!((inc.region.as_str(), inc.pool.as_str()), ("westus3", "standardNCADSA100v4Family"), "{advice:#?}");
    assert_eq!((inc.current_limit, inc.increase_vcpus, inc.step_vcpus), (96, 96, 96), "{advice:#?}");
    assert_eq!(first.buys.jobs, vec![job.id.clone()]);
    assert_eq!(advice.after.waiting_jobs, 0);

    // 14 virtual minutes blocked: nothing yet; at 15, one event; no repeat while it lasts.
    for _ in 0..14 {
        h.step(60).await;
    }
    assert!(quota_events(&h).is_empty(), "{:?}", quota_events(&h));
    h.step(60).await;
    for _ in 0..5 {
        h.step(60).await;
    }
    // Both regions' pools keep the job out (eastus has none): one event each.
    let ev = quota_events(&h);
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert!(ev.iter().all(|e| e.0 == "quota_exhausted" && e.1.is_none() && e.2.contains(&job.id)), "{ev:?}");
    assert!(ev[0].2.contains("standardNCADSA100v4Family quota in eastus (limit 0 vCPUs, 0 free)"), "{}", ev[0].2);
    assert!(ev[1].2.contains("standardNCADSA100v4Family quota in westus3 (limit 96 vCPUs, 96 free)"), "{}", ev[1].2);
    assert_eq!(h.ctl.metrics().quota_exhausted.get_or_create(&west).get(), 1);

    // The advice applied: the job is placed at the next quota read, and the pool recovers.
    h.cloud.set_quota_limit("westus3", &QuotaPool::Family("standardNCADSA100v4Family".into()), 192).unwrap();
    h.step(181).await;
    assert_ne!(h.job(&job.id).state, JobState::Pending);
    let ev = quota_events(&h);
    let kinds: Vec<&str> = ev.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(kinds, ["quota_exhausted", "quota_exhausted", "quota_recovered", "quota_recovered"], "{ev:?}");
    assert_eq!(h.ctl.metrics().quota_exhausted.get_or_create(&west).get(), 0);
    assert_eq!(h.ctl.metrics().quota_limit.get_or_create(&west).get(), 192);
    assert_eq!(h.ctl.metrics().quota_used.get_or_create(&west).get(), 192);
}

/// `(kind, data)` of the store's quota events.
fn quota_events_of(h: &Harness) -> Vec<(String, serde_json::Value)> {
    h.store
        .events_from(0, 10_000)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind.starts_with("quota_"))
        .map(|e| (e.kind, e.data))
        .collect()
}

/// An 8-GPU gang that only westus3's A100 family can take (two NC96 VMs, 192 vCPUs).
const WEST_GANG: &str = r#"
name = "ft"
tenant = "research"
kind = "training"
gpus = 8
sizes = ["Standard_NC96ads_A100_v4"]
regions = ["westus3"]
spot = "never"
duration_hours = 2.0
"#;

/// Issue #20: a pool whose offers the loop blocked after Azure refused them for quota keeps the
/// work out as much as a pool read full, so its episode runs while the block lasts: the
/// `quota_exhausted` event comes 15 minutes after the refusal, not 15 minutes after the block
/// expires, and the gauge counts the job meanwhile.
#[tokio::test]
async fn a_pool_hidden_by_a_learnt_quota_block_counts_toward_quota_exhausted() {
    use scheduler::control::PoolLabel;
    let a100 = QuotaPool::Family("standardNCADSA100v4Family".into());
    let mut cfg = two_regions();
    cfg.quota.push(toml::from_str("region = \"westus3\"\n[families]\nstandardNCADSA100v4Family = 192\n").unwrap());
    let h = harness("quota-watch-block", cfg);
    // The loop reads 192 vCPUs; the limit then drops (another team's request, an Azure change)
    // before the loop reads it again: its placement is refused for quota, and it blocks the family.
    h.round().await;
    h.cloud.set_quota_limit("westus3", &a100, 96).unwrap();
    let job = h.submit(WEST_GANG);
    h.step(60).await;
    let refused_at = h.clock.now_ms();
    let blocks = h.ctl.capacity().await.unwrap().blocked_offers;
    assert!(
        blocks.iter().any(|b| b.region == "westus3" && b.class == scheduler::model::FailureClass::Quota),
        "the refusal was learnt: {blocks:?}"
    );
    assert_eq!(h.job(&job.id).state, JobState::Pending);
    let west = PoolLabel { region: "westus3".into(), pool: "standardNCADSA100v4Family".into() };
    h.step(60).await;
    assert_eq!(h.ctl.metrics().quota_blocked_jobs.get_or_create(&west).get(), 1, "the block hides the job's offer");
    // The block lasts 10 minutes; the event is due 15 minutes after the refusal.
    for _ in 0..12 {
        h.step(60).await;
    }
    assert!(quota_events_of(&h).is_empty(), "{:?}", quota_events_of(&h));
    for _ in 0..3 {
        h.step(60).await;
    }
    let ev = quota_events_of(&h);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].0, "quota_exhausted");
    assert_eq!(ev[0].1["region"], "westus3");
    assert_eq!(ev[0].1["pool"], "standardNCADSA100v4Family");
    let since = ev[0].1["since_ms"].as_i64().unwrap();
    assert!(since <= refused_at + 60_000, "the episode runs from the refusal ({refused_at}), not from {since}");
}

/// Issue #20: the open quota episodes are in the store, so a loop that takes over (a new leader
/// on the same store) continues them: the pool reported by the first loop is not reported again,
/// and its `quota_recovered` dates the episode from when it began.
#[tokio::test]
async fn a_new_leader_continues_the_open_quota_episodes() {
    use scheduler::control::PoolLabel;
    let a100 = QuotaPool::Family("standardNCADSA100v4Family".into());
    let mut cfg = two_regions();
    cfg.quota.push(toml::from_str("region = \"westus3\"\n[families]\nstandardNCADSA100v4Family = 96\n").unwrap());
    let h = harness("quota-watch-leader", cfg);
    let job = h.submit(WEST_GANG);
    h.round().await;
    for _ in 0..16 {
        h.step(60).await;
    }
    let ev = quota_events_of(&h);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].0, "quota_exhausted");
    let since = ev[0].1["since_ms"].as_i64().unwrap();

    // Another loop leads from here on, on the same store: longer than the threshold again.
    let next = controller(&h.store, &h.cloud, &h.clock, config());
    let west = PoolLabel { region: "westus3".into(), pool: "standardNCADSA100v4Family".into() };
    for i in 0..20 {
        h.clock.advance_ms(60_000);
        next.reconcile().await.expect("round runs");
        if i == 0 {
            assert_eq!(next.metrics().quota_exhausted.get_or_create(&west).get(), 1, "still exhausted");
        }
    }
    let ev = quota_events_of(&h);
    assert_eq!(ev.len(), 1, "reported once, not again by the new leader: {ev:?}");

    // The pool recovers: the new leader ends the episode the first one began.
    h.cloud.set_quota_limit("westus3", &a100, 192).unwrap();
    h.clock.advance_ms(181_000);
    next.reconcile().await.expect("round runs");
    assert_ne!(h.job(&job.id).state, JobState::Pending);
    let ev = quota_events_of(&h);
    let kinds: Vec<&str> = ev.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(kinds, ["quota_exhausted", "quota_recovered"], "{ev:?}");
    assert_eq!(ev[1].1["since_ms"], since, "{ev:?}");
}

/// Issue #23: a pipeline's budget for the whole. Nobody completes `a`, so it runs on past its
/// estimate until the pipeline has spent its budget: `a` then fails and its fleet is deleted, and
/// `b`, which still waited for it, fails with the same reason (not merely "dependency a failed").
#[tokio::test]
async fn a_pipeline_that_spends_its_budget_fails_its_remaining_stages_and_leaves_no_fleet() {
    let h = harness("pipeline-budget", two_regions());
    // Each stage: one NC96ads (~$14.69/h) for 0.5 h, ~$7.3 expected. $20 leaves `a` its estimate
    // after `b`'s reserve, and runs out after about 80 minutes.
    let stage = |name: &str, after: &[&str]| {
        let mut s = a100_stage(name, after, 0.5);
        s["gpus"] = 4.into();
        s
    };
    let ids = submit_pipeline(
        &h,
        serde_json::json!({"name": "chain", "tenant": "research", "budget": 20.0,
            "jobs": [stage("a", &[]), stage("b", &["a"])]}),
    );
    let pipeline_id = h.job(&ids["a"]).pipeline.unwrap().pipeline_id;
    h.round().await;
    h.step(61).await;
    assert_eq!(h.job(&ids["a"]).state, JobState::Running);
    for _ in 0..12 {
        h.step(600).await;
    }
    let why = "pipeline budget of $20.00 exhausted";
    for name in ["a", "b"] {
        let j = h.job(&ids[name]);
        assert_eq!((j.state, j.end_reason.as_deref()), (JobState::Failed, Some(why)), "{name}");
    }
    let a = h.job(&ids["a"]);
    assert!(a.cost_usd >= 20.0 && a.cost_usd < 24.0, "stopped soon after the budget: ${}", a.cost_usd);
    h.step(1).await;
    assert!(h.live_fleets().is_empty(), "its fleet is deleted");
    let detail = h.jobs.pipeline(&pipeline_id).unwrap().unwrap();
    assert_eq!(detail.pipeline.budget_usd, Some(20.0));
}
