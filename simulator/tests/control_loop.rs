//! The control loop against the simulated cloud, in virtual time: placement, failover, evictions,
//! restarts, budgets and cancellation, each asserted on the job's states and events, the cloud's
//! fleets, and costs.

use std::collections::BTreeSet;

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
async fn when_every_region_is_full_jobs_wait_with_the_reason_and_start_when_capacity_frees() {
    let mut cfg = two_regions();
    cfg.default_capacity_vms = 0;
    let h = harness("full", cfg);
    let job = h.submit(A100_GANG);
    let r = h.round().await;
    assert_eq!(r.placements, 0);
    let j = h.job(&job.id);
    assert_eq!(j.state, JobState::Pending);
    assert!(!j.pending_reasons.is_empty(), "a waiting job says why");
    assert!(j.pending_reasons.join(" ").contains("capacity"), "{:?}", j.pending_reasons);
    // A second round with nothing changed writes nothing new.
    let events = h.event_kinds(&job.id).len();
    h.round().await;
    assert_eq!(h.event_kinds(&job.id).len(), events, "no repeated 'waiting' events");

    h.cloud.set_capacity("westus3", "Standard_NC96ads_A100_v4", Priority::Regular, 4).unwrap();
    let r = h.step(5).await;
    assert_eq!(r.placements, 1, "placed as soon as capacity frees: {r:?}");
    h.step(61).await;
    assert_eq!(h.job(&job.id).state, JobState::Running);
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
        accounted_until_ms: None,
        failure: None,
        failure_class: None,
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
    let h = harness("price-cap", two_regions());
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
