//! The control loop's deadline-aware spot policies against the simulated cloud, in virtual time:
//! a deadline job rides spot where it lasts and still meets its deadline for less than regular;
//! with its slack gone it runs regular; with spot gone everywhere it waits, then runs regular in
//! time; and when spot comes back it moves there, make before break.

use scheduler::clock::Clock;
use scheduler::control::ControlConfig;
use scheduler::deadline::DeadlinePolicyKind;
use scheduler::jobs::JobDetail;
use scheduler::model::{AttemptState, Job, JobSpec, JobState, Priority, SpecFormat};
use simulator::sim_cloud::{OfferCapacity, SimCloudConfig};

mod support;

use support::{Harness, START_MS, harness_with};

const SIZE: &str = "Standard_NC24ads_A100_v4";
/// One round per deadline tick (the default one minute).
const ROUND_SECS: i64 = 60;

fn harness(name: &str, cloud_config: SimCloudConfig, policy: DeadlinePolicyKind) -> Harness {
    let config =
        ControlConfig { durable: false, auto_complete: true, deadline_policy: policy, ..ControlConfig::default() };
    harness_with(&format!("dl-{name}"), cloud_config, config)
}

impl Harness {
    async fn step(&self) {
        self.clock.advance_ms(ROUND_SECS * 1000);
        self.ctl.reconcile().await.expect("round runs");
    }

    fn submit(&self, spot: &str, hours: f64, deadline_hours: f64) -> Job {
        let deadline = time::OffsetDateTime::from_unix_timestamp(START_MS / 1000 + (deadline_hours * 3600.0) as i64)
            .unwrap()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap();
        let spec = format!(
            r#"
name = "deadline"
kind = "training"
gpus = 1
sizes = ["{SIZE}"]
regions = ["eastus", "westus3"]
spot = "{spot}"
duration_hours = {hours}
checkpoint_interval_minutes = 10
deadline = "{deadline}"
"#
        );
        let spec = JobSpec::parse(&spec, SpecFormat::Toml).expect("spec parses");
        self.jobs.submit(spec, None).expect("accepted").job
    }

    fn detail(&self, id: &str) -> JobDetail {
        self.jobs.detail(id).unwrap().unwrap()
    }

    /// Runs rounds until the job is final (and its fleet settled) or `limit_hours` have passed.
    async fn run_until_done(&self, id: &str, limit_hours: f64) -> Job {
        self.ctl.reconcile().await.expect("round runs");
        while self.clock.now_ms() - START_MS < (limit_hours * 3_600_000.0) as i64 {
            self.step().await;
            if self.detail(id).job.state.is_final() {
                break;
            }
        }
        // Settle the last fleet's cost.
        self.step().await;
        self.detail(id).job
    }
}

fn cloud(spot_vms: u32) -> SimCloudConfig {
    let mut c = SimCloudConfig::modest(["eastus", "westus3"]);
    c.provisioning_seconds = 60;
    c.default_quota.cores = 800;
    c.default_quota.low_priority_cores = 800;
    c.default_quota.family = 400;
    for region in ["eastus", "westus3"] {
        c.capacity.push(OfferCapacity {
            region: region.into(),
            size: SIZE.into(),
            priority: Some(Priority::Spot),
            vms: Some(spot_vms),
            eviction_rate_per_hour: None,
        });
    }
    c
}

/// westus3 has the cheaper spot A100 ($0.404 vs $0.444 an hour) but loses spot VMs about once an
/// hour (seeded, so the run is reproducible); eastus never does.
fn evicting_west() -> SimCloudConfig {
    let mut c = cloud(8);
    c.seed = 7;
    for o in c.capacity.iter_mut().filter(|o| o.region == "westus3") {
        o.eviction_rate_per_hour = Some(1.0);
    }
    c
}

fn deadline_ms(hours: f64) -> i64 {
    START_MS + (hours * 3_600_000.0) as i64
}

#[tokio::test]
async fn a_deadline_job_on_spot_meets_its_deadline_for_less_than_the_same_job_on_regular() {
    let (work, deadline) = (3.0, 6.0);
    let spot = harness("spot", evicting_west(), DeadlinePolicyKind::Spillway);
    let job = spot.submit("allowed", work, deadline);
    let done = spot.run_until_done(&job.id, deadline + 1.0).await;
    let d = spot.detail(&job.id);
    assert_eq!(done.state, JobState::Succeeded, "{:?}", d.events.iter().map(|e| &e.message).collect::<Vec<_>>());
    assert!(done.finished_at_ms.unwrap() <= deadline_ms(deadline), "finished after the deadline");
    assert!(d.attempts.iter().any(|a| a.priority == Priority::Spot), "{:?}", d.attempts);
    assert!(
        d.events.iter().any(|e| e.kind == scheduler::model::EventKind::DeadlineChoice),
        "the policy's choices are recorded"
    );

    let regular = harness("never", evicting_west(), DeadlinePolicyKind::Spillway);
    let job = regular.submit("never", work, deadline);
    let baseline = regular.run_until_done(&job.id, deadline + 1.0).await;
    assert_eq!(baseline.state, JobState::Succeeded);
    assert!(regular.detail(&job.id).attempts.iter().all(|a| a.priority == Priority::Regular));
    eprintln!(
        "3 h on one A100, deadline 6 h, spot evicted ~1/h in westus3: spillway ${:.2} \
         ({} evictions, attempts {:?}), spot = never ${:.2}",
        done.cost_usd,
        done.evictions,
        d.attempts.iter().map(|a| format!("{} {}", a.priority, a.region)).collect::<Vec<_>>(),
        baseline.cost_usd
    );
    assert!(done.cost_usd < 0.5 * baseline.cost_usd, "spot ${} vs regular ${}", done.cost_usd, baseline.cost_usd);
}

/// A job's own fleet does not count against the room its policy sees for it: with spot quota for
/// one VM a region, the job placed on spot stays where it runs. Counted, its own VM filled the
/// region, which then looked unavailable: the job hopped to the other region every round (and a
/// pipeline stage paid its input's egress at every hop: issue #23, `pipelines-week`).
#[tokio::test]
async fn a_job_is_not_crowded_out_of_its_region_by_its_own_fleet() {
    let mut c = cloud(8);
    c.default_quota.low_priority_cores = 24;
    let h = harness("own-room", c, DeadlinePolicyKind::Spillway);
    let job = h.submit("allowed", 2.0, 8.0);
    let done = h.run_until_done(&job.id, 8.0).await;
    let d = h.detail(&job.id);
    let placed: Vec<String> = d.attempts.iter().map(|a| format!("{} {}", a.priority, a.region)).collect();
    assert_eq!(done.state, JobState::Succeeded, "{placed:?}");
    assert_eq!(placed.len(), 1, "one placement, kept: {placed:?}");
    assert_eq!(d.attempts[0].priority, Priority::Spot, "{placed:?}");
}

#[tokio::test]
async fn a_job_without_slack_for_a_spot_loss_is_placed_on_regular() {
    // 2 h of work, deadline in 2 h 8 min: losing 10 min of unsaved work plus a 6 min restart would
    // miss it, so even with spot everywhere the policy runs regular from the start.
    let h = harness("no-slack", cloud(8), DeadlinePolicyKind::Spillway);
    let job = h.submit("allowed", 2.0, 2.0 + 8.0 / 60.0);
    let done = h.run_until_done(&job.id, 3.0).await;
    let d = h.detail(&job.id);
    assert_eq!(d.attempts[0].priority, Priority::Regular, "{:?}", d.attempts);
    assert!(d.attempts.iter().all(|a| a.priority == Priority::Regular));
    assert_eq!(done.state, JobState::Succeeded);
    assert!(done.finished_at_ms.unwrap() <= deadline_ms(2.0 + 8.0 / 60.0));
}

#[tokio::test]
async fn with_spot_gone_everywhere_the_job_waits_while_it_has_slack_then_runs_regular_in_time() {
    let h = harness("no-spot", cloud(0), DeadlinePolicyKind::Spillway);
    let job = h.submit("allowed", 2.0, 5.0);
    h.ctl.reconcile().await.unwrap();
    for _ in 0..60 {
        h.step().await;
    }
    let d = h.detail(&job.id);
    assert!(d.attempts.is_empty(), "an hour in, with 3 h of slack, nothing is placed: {:?}", d.attempts);
    assert_eq!(d.job.state, JobState::Pending, "waiting is not failing");
    assert!(d.job.pending_reasons.iter().any(|r| r.contains("waiting for spot")), "{:?}", d.job.pending_reasons);
    let done = h.run_until_done(&job.id, 6.0).await;
    let d = h.detail(&job.id);
    assert_eq!(done.state, JobState::Succeeded);
    assert!(done.finished_at_ms.unwrap() <= deadline_ms(5.0), "finished after the deadline");
    assert!(d.attempts.iter().all(|a| a.priority == Priority::Regular), "{:?}", d.attempts);
    // It waited as long as the slack allowed: more than 2 h before the regular VM.
    assert!(d.attempts[0].started_at_ms - START_MS > 2 * 3_600_000, "{:?}", d.attempts[0]);
}

#[tokio::test]
async fn when_spot_returns_a_job_on_regular_moves_there_and_the_regular_fleet_goes_once_spot_runs() {
    let h = harness("back", cloud(0), DeadlinePolicyKind::Spillway);
    let job = h.submit("allowed", 2.0, 3.0);
    h.ctl.reconcile().await.unwrap();
    // Without spot, the job goes regular once its spare slack is spent.
    while h.detail(&job.id).attempts.iter().all(|a| a.state != AttemptState::Running) {
        assert!(h.clock.now_ms() - START_MS < 3_600_000, "still not running after an hour");
        h.step().await;
    }
    let first = h.detail(&job.id).attempts[0].clone();
    assert_eq!(first.priority, Priority::Regular);
    for region in ["eastus", "westus3"] {
        h.cloud.set_capacity(region, SIZE, Priority::Spot, 8).unwrap();
    }
    for _ in 0..5 {
        h.step().await;
    }
    let d = h.detail(&job.id);
    let old = d.attempts.iter().find(|a| a.number == first.number).unwrap();
    assert_eq!(old.state, AttemptState::Replaced, "{:?}", d.attempts);
    let new = d.attempts.last().unwrap();
    assert_eq!((new.priority, new.state), (Priority::Spot, AttemptState::Running), "{:?}", d.attempts);
    assert_eq!(h.cloud.fleets_snapshot().len(), 1, "the regular fleet is deleted");
    let done = h.run_until_done(&job.id, 4.0).await;
    assert_eq!(done.state, JobState::Succeeded);
    assert!(done.finished_at_ms.unwrap() <= deadline_ms(3.0));
}

#[tokio::test]
async fn every_selectable_policy_meets_the_deadline_in_the_control_loop() {
    let (work, deadline) = (3.0, 6.0);
    let mut costs = Vec::new();
    for kind in DeadlinePolicyKind::ALL {
        let h = harness(kind.name(), evicting_west(), kind);
        let job = h.submit("allowed", work, deadline);
        let done = h.run_until_done(&job.id, deadline + 1.0).await;
        assert_eq!(done.state, JobState::Succeeded, "{kind}");
        assert!(done.finished_at_ms.unwrap() <= deadline_ms(deadline), "{kind} finished after the deadline");
        let attempts = h.detail(&job.id).attempts;
        if kind == DeadlinePolicyKind::RegularOnly {
            assert!(attempts.iter().all(|a| a.priority == Priority::Regular), "{attempts:?}");
        }
        costs.push((kind, done.cost_usd, done.evictions));
    }
    eprintln!("{costs:?}");
    let regular = costs[0].1;
    for (kind, cost, _) in &costs[1..] {
        assert!(*cost < regular, "{kind}: ${cost} against ${regular} on regular");
    }
}

#[tokio::test]
async fn a_placement_left_behind_when_the_choice_changes_back_is_deleted() {
    // Slow provisioning, so the choice can change while the spot fleet is still being created.
    let mut config = cloud(0);
    config.provisioning_seconds = 180;
    let h = harness("leftover", config, DeadlinePolicyKind::Spillway);
    let job = h.submit("allowed", 2.0, 3.0);
    h.ctl.reconcile().await.unwrap();
    while h.detail(&job.id).attempts.iter().all(|a| a.state != AttemptState::Running) {
        assert!(h.clock.now_ms() - START_MS < 3_600_000, "still not running after an hour");
        h.step().await;
    }
    let regular = h.detail(&job.id).attempts[0].clone();
    assert_eq!(regular.priority, Priority::Regular);
    // Spot comes back: the policy moves the job there, make before break.
    for region in ["eastus", "westus3"] {
        h.cloud.set_capacity(region, SIZE, Priority::Spot, 8).unwrap();
    }
    let mut spot = None;
    for _ in 0..3 {
        h.step().await;
        spot = h.detail(&job.id).attempts.into_iter().find(|a| a.priority == Priority::Spot);
        if spot.is_some() {
            break;
        }
    }
    let spot = spot.expect("a spot placement once spot is back");
    assert_eq!(spot.state, AttemptState::Provisioning);
    assert_eq!(h.cloud.fleets_snapshot().len(), 2, "the regular fleet runs until spot does");
    // Spot is gone again before that fleet runs: the policy stays where the job runs, and the
    // half-made spot fleet is deleted instead of running beside it.
    for region in ["eastus", "westus3"] {
        h.cloud.set_capacity(region, SIZE, Priority::Spot, 0).unwrap();
    }
    h.step().await;
    let d = h.detail(&job.id);
    let spot_now = d.attempts.iter().find(|a| a.number == spot.number).unwrap();
    let regular_now = d.attempts.iter().find(|a| a.number == regular.number).unwrap();
    assert_eq!(spot_now.state, AttemptState::Replaced, "{:?}", d.attempts);
    assert_eq!(regular_now.state, AttemptState::Running);
    assert_eq!(h.cloud.fleets_snapshot().len(), 1);
    let done = h.run_until_done(&job.id, 4.0).await;
    assert_eq!(done.state, JobState::Succeeded);
    assert!(done.finished_at_ms.unwrap() <= deadline_ms(3.0));
}

/// A chain of 1-GPU stages of `hours` each (spot as given per stage) under one pipeline deadline
/// `deadline_hours` from the start; their ids by name, in order.
fn submit_chain(h: &Harness, stages: &[(&str, &str, f64)], deadline_hours: f64) -> Vec<String> {
    let deadline = time::OffsetDateTime::from_unix_timestamp(START_MS / 1000 + (deadline_hours * 3600.0) as i64)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let jobs: Vec<serde_json::Value> = stages
        .iter()
        .enumerate()
        .map(|(i, (name, spot, hours))| {
            let after: Vec<&str> = if i == 0 { Vec::new() } else { vec![stages[i - 1].0] };
            serde_json::json!({"name": name, "kind": "training", "gpus": 1, "sizes": [SIZE],
                "regions": ["eastus", "westus3"], "spot": spot, "duration_hours": hours,
                "checkpoint_interval_minutes": 10, "depends_on": after})
        })
        .collect();
    let value = serde_json::json!({"name": "chain", "deadline": deadline, "jobs": jobs});
    let (p, _) = h.jobs.submit_pipeline_value(value, None, None).expect("pipeline accepted");
    stages.iter().map(|(name, ..)| p.jobs.iter().find(|j| j.name == *name).unwrap().id.clone()).collect()
}

fn deadline_of(j: &Job) -> i64 {
    (j.spec.deadline.unwrap().unix_timestamp_nanos() / 1_000_000) as i64
}

async fn run_chain_until_done(h: &Harness, ids: &[String], limit_hours: f64) -> Vec<Job> {
    h.ctl.reconcile().await.expect("round runs");
    while h.clock.now_ms() - START_MS < (limit_hours * 3_600_000.0) as i64 {
        h.step().await;
        if ids.iter().all(|id| h.detail(id).job.state.is_final()) {
            break;
        }
    }
    h.step().await;
    ids.iter().map(|id| h.detail(id).job).collect()
}

#[tokio::test]
async fn a_pipeline_deadline_is_met_with_its_stages_on_spot_and_a_stage_ending_early_leaves_its_slack_to_the_rest() {
    // Three 2-hour stages, 12 h to the deadline: 6 h of slack, shared 2 h a stage at submission
    // (prep's deadline 4 h in; train's and eval's are their latest finishes, 10 and 12 h, until
    // they may start).
    let h = harness("pipeline-spot", cloud(8), DeadlinePolicyKind::Spillway);
    let ids = submit_chain(&h, &[("prep", "allowed", 2.0), ("train", "allowed", 2.0), ("eval", "allowed", 2.0)], 12.0);
    let jobs: Vec<Job> = ids.iter().map(|id| h.detail(id).job).collect();
    assert_eq!(deadline_of(&jobs[0]), deadline_ms(4.0), "prep: its share, 2 h of 6 h for a third of 12 h");
    assert_eq!(deadline_of(&jobs[1]), deadline_ms(10.0), "train: its latest finish until it may start");
    let done = run_chain_until_done(&h, &ids, 13.0).await;
    let events = |id: &str| h.detail(id).events.iter().map(|e| e.message.clone()).collect::<Vec<_>>();
    for (j, id) in done.iter().zip(&ids) {
        assert_eq!(j.state, JobState::Succeeded, "{:?}", events(id));
        let attempts = h.detail(id).attempts;
        assert!(attempts.iter().all(|a| a.priority == Priority::Spot), "{}: {attempts:?}", j.spec.name);
    }
    assert!(done[2].finished_at_ms.unwrap() <= deadline_ms(12.0), "the pipeline met its deadline");
    // prep ended early (about 2 h in, not 4): train's deadline, re-computed then, is its share of
    // the 10 h left (half, with eval after it): more slack than the 2 h it had at submission.
    let prep_end = done[0].finished_at_ms.unwrap();
    assert!(prep_end < deadline_ms(3.0), "prep ended early");
    let train_start = prep_end;
    let expected = train_start + (deadline_ms(12.0) - train_start) / 2;
    assert!((deadline_of(&done[1]) - expected).abs() <= 1, "{} vs {expected}", deadline_of(&done[1]));
    let train_slack_h = (deadline_of(&done[1]) - train_start) as f64 / 3_600_000.0 - 2.0;
    assert!(train_slack_h > 2.5, "prep's unused slack went to the rest: {train_slack_h:.2} h");
    let changed: Vec<String> = h
        .detail(&ids[1])
        .events
        .iter()
        .filter(|e| e.kind == scheduler::model::EventKind::DeadlineChanged)
        .map(|e| e.message.clone())
        .collect();
    assert_eq!(changed.len(), 1, "re-computed once, as prep ended: {changed:?}");
    assert!(changed[0].contains("left to the pipeline's deadline"), "{changed:?}");
}

#[tokio::test]
async fn a_stage_that_ends_late_leaves_the_next_no_slack_for_spot_and_it_runs_regular_in_time() {
    // prep may only run regular, and no regular A100 is to be had for its first 5.5 hours (the
    // refused offers are tried again on the hour: it starts about 6.1 h in): it ends about 8.1 h
    // in, past its 4.2 h share; train, re-computed, has little slack left and runs regular, and
    // the pipeline still meets its 12.5 h deadline.
    let h = harness("pipeline-late", cloud(8), DeadlinePolicyKind::Spillway);
    for region in ["eastus", "westus3"] {
        h.cloud.set_capacity(region, SIZE, Priority::Regular, 0).unwrap();
    }
    let ids = submit_chain(&h, &[("prep", "never", 2.0), ("train", "allowed", 2.0), ("eval", "allowed", 2.0)], 12.5);
    h.ctl.reconcile().await.expect("round runs");
    while h.clock.now_ms() - START_MS < (5.5 * 3_600_000.0) as i64 {
        h.step().await;
    }
    for region in ["eastus", "westus3"] {
        h.cloud.set_capacity(region, SIZE, Priority::Regular, 8).unwrap();
    }
    let done = run_chain_until_done(&h, &ids, 13.0).await;
    for j in &done {
        assert_eq!(j.state, JobState::Succeeded, "{}", j.spec.name);
    }
    let prep_end = done[0].finished_at_ms.unwrap();
    assert!(prep_end > deadline_ms(12.5 / 3.0), "prep ended past its share");
    let train_slack_h = (deadline_of(&done[1]) - prep_end) as f64 / 3_600_000.0 - 2.0;
    assert!(train_slack_h < 0.3, "train was left little slack: {train_slack_h:.2} h");
    let train = h.detail(&ids[1]).attempts;
    assert!(train.iter().all(|a| a.priority == Priority::Regular), "{train:?}");
    let h_of = |ms: i64| (ms - START_MS) as f64 / 3_600_000.0;
    let timeline: Vec<String> = ids
        .iter()
        .flat_map(|id| h.detail(id).attempts)
        .map(|a| format!("{} {} {:.2}-{:?}", a.job_id, a.priority, h_of(a.started_at_ms), a.ended_at_ms.map(h_of)))
        .chain(done.iter().map(|j| {
            format!("{} deadline {:.2} ended {:.2}", j.spec.name, h_of(deadline_of(j)), h_of(j.finished_at_ms.unwrap()))
        }))
        .collect();
    assert!(done[2].finished_at_ms.unwrap() <= deadline_ms(12.5), "the pipeline met its deadline: {timeline:#?}");
}
