//! The round's decisions, tested without a cloud: snapshots built by hand, the loop's memory
//! fresh, and the actions (and the records they carry) asserted.

mod mixed;
mod pipelines;
mod placing;

use std::collections::BTreeMap;
use std::sync::Arc;

use super::actions::{Action, JobEdit};
use super::cleanup;
use super::follow::{self, FollowUp};
use super::placement;
use super::snapshot::{Seen, Snapshot};
use super::watch;
use super::{ControlConfig, LoopState};
use crate::catalog::Catalog;
use crate::cloud::{CloudError, Fleet, OperationStatus, ProvisioningState, TAG_ATTEMPT, TAG_JOB};
use crate::model::{
    Attempt, AttemptState, Capacity, EventKind, FailureClass, FleetOperation, Job, JobSpec, JobState, Offer, Priority,
    QuotaPool, SpecFormat, fleet_name,
};
use crate::records::attempt_key;

const NOW: i64 = 1_800_000_000_000;
const SIZE: &str = "Standard_NC24ads_A100_v4";

fn job(id: &str, toml: &str, state: JobState) -> Job {
    let spec = JobSpec::parse(toml, SpecFormat::Toml).expect("spec parses");
    let mut j = Job::new(id.to_string(), spec, NOW - 3_600_000);
    j.state = state;
    j.attempts = 1;
    j
}

fn batch(id: &str, state: JobState) -> Job {
    job(
        id,
        "name = \"b\"\nkind = \"batch\"\ngpus = 2\nsizes = [\"Standard_NC24ads_A100_v4\"]\nduration_hours = 10.0\ncheckpoint_interval_minutes = 30\n",
        state,
    )
}

fn gang(id: &str, state: JobState) -> Job {
    job(
        id,
        "name = \"g\"\nkind = \"training\"\ngpus = 2\nsizes = [\"Standard_NC24ads_A100_v4\"]\nduration_hours = 10.0\n",
        state,
    )
}

fn attempt(job_id: &str, number: u32, state: AttemptState, priority: Priority) -> Attempt {
    Attempt {
        job_id: job_id.to_string(),
        number,
        fleet_name: fleet_name(job_id, number),
        region: "eastus".into(),
        size: SIZE.into(),
        alternatives: Vec::new(),
        priority,
        vms: 2,
        min_vms: None,
        growing_to: None,
        gpus: 2,
        vcpus: 48,
        family: "standardNCADSA100v4Family".into(),
        price_per_hour: 2.0,
        max_price_per_vm: None,
        state,
        started_at_ms: NOW - 3_600_000,
        running_since_ms: (state == AttemptState::Running).then_some(NOW - 3_600_000),
        ended_at_ms: None,
        operation: None,
        running_vms: if state == AttemptState::Running { 2 } else { 0 },
        below_min_since_ms: None,
        cost_usd: 0.0,
        egress_usd: 0.0,
        egress_gb: 0.0,
        accounted_until_ms: (state == AttemptState::Running).then_some(NOW - 3_600_000),
        failure: None,
        failure_class: None,
        regular: None,
    }
}

fn snapshot(jobs: &[Job], attempts: &[Attempt]) -> Snapshot {
    let mut s = Snapshot { now: NOW, ..Snapshot::default() };
    for j in jobs {
        s.put_job(j);
    }
    for a in attempts {
        s.put_attempt(a);
    }
    s
}

fn fleet(name: &str, state: ProvisioningState, running: u32, tags: &[(&str, &str)]) -> Fleet {
    Fleet {
        name: name.to_string(),
        region: "eastus".into(),
        priority: Priority::Spot,
        sizes: vec![SIZE.to_string()].into(),
        capacity_vms: 2,
        min_capacity_vms: 2,
        provisioning_state: state,
        tags: std::sync::Arc::new(tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>()),
        running_vms: Some(running),
        regular: None,
    }
}

fn seen_fleet(f: Result<Fleet, CloudError>) -> Seen {
    Seen { fleet: Some(f), ..Seen::default() }
}

#[test]
fn a_provisioning_attempt_waits_for_retry_after_runs_fails_or_is_created_again() {
    let mut a = attempt("j", 1, AttemptState::Provisioning, Priority::Spot);
    a.operation =
        Some(FleetOperation { fleet_name: a.fleet_name.clone(), status_url: Some("op".into()), retry_after_ms: 0 });
    let polled = |s: Result<OperationStatus, CloudError>, f: Option<Result<Fleet, CloudError>>| Seen {
        operation: Some(s),
        fleet: f,
        scale_sets: None,
    };
    let in_progress = polled(Ok(OperationStatus::InProgress { retry_after_ms: 15_000 }), None);
    assert_eq!(follow::follow_up(&a, Some(&in_progress)), FollowUp::LookAgainIn(15_000));
    let done =
        polled(Ok(OperationStatus::Succeeded), Some(Ok(fleet(&a.fleet_name, ProvisioningState::Succeeded, 1, &[]))));
    assert_eq!(follow::follow_up(&a, Some(&done)), FollowUp::Running(1));
    let throttled = polled(Err(CloudError::Throttled { retry_after_ms: Some(4_000) }), None);
    assert_eq!(follow::follow_up(&a, Some(&throttled)), FollowUp::LookAgainIn(4_000));
    let gone =
        polled(Err(CloudError::NotFound { what: "op".into() }), Some(Err(CloudError::NotFound { what: "f".into() })));
    assert!(matches!(follow::follow_up(&a, Some(&gone)), FollowUp::Failed(CloudError::Transient { .. })));
    assert_eq!(follow::follow_up(&a, None), FollowUp::Wait, "not looked at: nothing to decide");

    a.operation = None;
    let never_sent = seen_fleet(Err(CloudError::NotFound { what: "f".into() }));
    assert_eq!(follow::follow_up(&a, Some(&never_sent)), FollowUp::Create, "the intent is on disk: create it");
    let failed = seen_fleet(Ok(fleet(&a.fleet_name, ProvisioningState::Failed, 0, &[])));
    assert!(matches!(follow::follow_up(&a, Some(&failed)), FollowUp::Failed(CloudError::Capacity { .. })));
}

#[test]
fn a_failed_attempt_blocks_its_offer_marks_the_pool_full_and_is_placed_again_and_deleted() {
    let j = gang("j", JobState::Provisioning);
    let a = attempt("j", 1, AttemptState::Provisioning, Priority::Regular);
    let snap = snapshot(&[j], std::slice::from_ref(&a));
    let mut st = LoopState::default();
    let err = CloudError::Quota {
        region: "eastus".into(),
        pool: QuotaPool::Family("standardNCADSA100v4Family".into()),
        limit: Some(96),
        usage: Some(96),
        required: Some(48),
    };
    let actions = follow::failed(&snap, &mut st, &a, &err);
    let [Action::Record(change), Action::Delete { fleet, then: None }] = actions.as_slice() else {
        panic!("record the failure, then delete the fleet: {actions:?}")
    };
    assert_eq!(fleet, &a.fleet_name);
    assert_eq!(change.attempts[0].state, AttemptState::Failed);
    assert_eq!(change.attempts[0].failure_class, Some(FailureClass::Quota));
    assert_eq!(change.blocks.len(), 1, "the family's regular tier is blocked");
    assert_eq!(st.world.blocked.len(), 1, "and the loop plans around it at once");
    assert_eq!(st.world.free_vcpus("eastus", "standardncadsa100v4family", &BTreeMap::new()), Some(0), "pool full");
    let Some((_, JobEdit::ProvisioningFailed { others_active, .. })) = &change.job else { panic!("{change:?}") };
    assert!(!others_active);
    let mut stored = gang("j", JobState::Provisioning);
    let applied = change.job.as_ref().unwrap().1.apply(&mut stored, NOW).unwrap();
    assert_eq!((stored.state, stored.awaiting_failover), (JobState::Pending, true));
    assert_eq!(applied.events[0].0, EventKind::ProvisioningFailed);
}

#[test]
fn a_running_replacement_retires_the_degraded_placement_make_before_break() {
    // A splittable job's placement below its minimum keeps doing its share: the new one tops it
    // up and retires nothing.
    let b = batch("j", JobState::Running);
    let mut kept = attempt("j", 1, AttemptState::Running, Priority::Spot);
    kept.below_min_since_ms = Some(NOW - 600_000);
    kept.running_vms = 1;
    let topup = attempt("j", 2, AttemptState::Provisioning, Priority::Spot);
    let snap = snapshot(&[b], &[kept, topup.clone()]);
    let (_, retired) = follow::became_running(&snap, &mut LoopState::default(), &topup, 2, 120_000);
    assert!(retired.is_empty(), "{retired:?}");

    let j = gang("j", JobState::Migrating);
    let mut old = attempt("j", 1, AttemptState::Running, Priority::Spot);
    old.below_min_since_ms = Some(NOW - 600_000);
    old.running_vms = 1;
    let new = attempt("j", 2, AttemptState::Provisioning, Priority::Spot);
    let snap = snapshot(&[j], &[old.clone(), new.clone()]);
    let mut st = LoopState::default();
    let (change, retired) = follow::became_running(&snap, &mut st, &new, 2, 120_000);
    assert_eq!(retired, vec![old.clone()], "the degraded placement goes once the new one runs");
    let Some((_, JobEdit::BecameRunning { all_running: true, .. })) = &change.job else { panic!("{change:?}") };
    let retire = cleanup::retire(&snap, &old, false);
    assert!(matches!(&retire[0], Action::Record(c) if c.attempts[0].state == AttemptState::Replaced));
    assert!(matches!(&retire[1], Action::Delete { then: None, .. }), "the loop owns the deletion");
}

#[test]
fn a_spot_eviction_rolls_back_to_the_checkpoint_and_a_lost_fleet_is_failed_over() {
    let j = batch("j", JobState::Running);
    let mut a = attempt("j", 1, AttemptState::Running, Priority::Spot);
    let mut stored_job = j.clone();
    stored_job.progress_hours = 0.75;
    a.accounted_until_ms = Some(NOW);
    let mut snap = snapshot(&[stored_job.clone()], &[a.clone()]);
    snap.seen.insert(attempt_key("j", 1), seen_fleet(Ok(fleet(&a.fleet_name, ProvisioningState::Succeeded, 1, &[]))));
    let mut st = LoopState::default();
    let config = ControlConfig::default();
    let catalog = Catalog::builtin();
    let w = watch::watch(&snap, &mut st, &config, &catalog, (&attempt_key(&a.job_id, a.number), &a), &stored_job);
    assert!(w.evicted && !w.delete_fleet);
    let change = w.change.expect("an eviction is written");
    let Some((_, JobEdit::Accounted { job, events })) = &change.job else { panic!("{change:?}") };
    // 0.75 h done, checkpoints every 30 min: 0.25 h since the last one, half the job lost with 1 of 2 VMs.
    assert!((job.progress_hours - 0.625).abs() < 1e-9, "{}", job.progress_hours);
    assert_eq!((job.evictions, events[0].0), (1, EventKind::Evicted));
    assert!(st.deadline.evicted_spot.contains("eastus"));

    snap.seen.insert(attempt_key("j", 1), seen_fleet(Err(CloudError::NotFound { what: "fleet".into() })));
    let mut st = LoopState::default();
    let w = watch::watch(&snap, &mut st, &config, &catalog, (&attempt_key(&a.job_id, a.number), &a), &stored_job);
    assert!(w.delete_fleet, "a fleet with nothing left is deleted");
    let change = w.change.unwrap();
    assert_eq!(change.attempts[0].state, AttemptState::Failed);
    let Some((_, JobEdit::Accounted { job, .. })) = &change.job else { panic!() };
    assert_eq!((job.state, job.awaiting_failover), (JobState::Pending, true), "placed again");
    assert_eq!(change.blocks.len(), 1, "the evicted spot offer is blocked for a while");
}

#[test]
fn an_unchanged_running_attempt_is_not_written_until_the_settle_interval() {
    let j = gang("j", JobState::Running);
    let mut a = attempt("j", 1, AttemptState::Running, Priority::Regular);
    a.accounted_until_ms = Some(NOW - 30_000);
    let mut snap = snapshot(std::slice::from_ref(&j), std::slice::from_ref(&a));
    snap.seen.insert(attempt_key("j", 1), seen_fleet(Ok(fleet(&a.fleet_name, ProvisioningState::Succeeded, 2, &[]))));
    let config = ControlConfig::default();
    let watch_once = |a: &Attempt| {
        let key = attempt_key(&a.job_id, a.number);
        watch::watch(&snap, &mut LoopState::default(), &config, &Catalog::builtin(), (&key, a), &j)
    };
    assert_eq!(watch_once(&a), watch::Watched::default(), "30 s after the last settle: nothing to write");
    a.accounted_until_ms = Some(NOW - 60_000);
    let w = watch_once(&a);
    let change = w.change.expect("settled every minute");
    assert_eq!(change.spend, Some(("default".to_string(), 2.0 * 2.0 / 60.0)), "2 VMs × $2 for a minute");
}

/// A healthy running attempt is watched without copying it and its job (`watch::quiet`), but the
/// round in which its job's work is done, or its budget spent, by this round's accrual is still
/// seen: the job finishes, as before the shortcut.
#[test]
fn a_quiet_attempt_writes_nothing_until_its_jobs_work_is_done_or_its_budget_spent() {
    let spec = |extra: &str| {
        format!("name = \"g\"\nkind = \"training\"\ngpus = 2\nsizes = [\"{SIZE}\"]\nduration_hours = 10.0\n{extra}")
    };
    let mut a = attempt("j", 1, AttemptState::Running, Priority::Regular);
    a.accounted_until_ms = Some(NOW - 60_000);
    let config = ControlConfig { auto_complete: true, settle_interval_ms: None, ..ControlConfig::default() };
    let watch_once = |j: &Job| {
        let mut snap = snapshot(std::slice::from_ref(j), std::slice::from_ref(&a));
        snap.seen
            .insert(attempt_key("j", 1), seen_fleet(Ok(fleet(&a.fleet_name, ProvisioningState::Succeeded, 2, &[]))));
        let key = attempt_key("j", 1);
        watch::watch(&snap, &mut LoopState::default(), &config, &Catalog::builtin(), (&key, &a), j)
    };
    // Two minutes of work left, one accrued: nothing to write.
    let mut j = job("j", &spec(""), JobState::Running);
    j.progress_hours = 10.0 - 2.0 / 60.0;
    assert_eq!(watch_once(&j), watch::Watched::default());
    // Half a minute left: this round's minute ends it.
    j.progress_hours = 10.0 - 0.5 / 60.0;
    let w = watch_once(&j);
    assert_eq!(w.finished.as_ref().map(|(_, j)| j.state), Some(JobState::Succeeded), "{w:?}");
    // A budget this round's $0.07 (2 VMs × $2 for a minute) reaches.
    let mut j = job("j", &spec("budget = 10.0\n"), JobState::Running);
    j.cost_usd = 9.95;
    let w = watch_once(&j);
    assert_eq!(w.finished.as_ref().map(|(_, j)| j.state), Some(JobState::Failed), "{w:?}");
    j.cost_usd = 9.9;
    assert_eq!(watch_once(&j), watch::Watched::default(), "$9.97 of $10");
}

#[test]
fn a_users_cancel_wins_over_the_loops_accounting() {
    let mut ours = gang("j", JobState::Migrating);
    ours.cost_usd = 12.0;
    ours.progress_hours = 3.0;
    let edit = JobEdit::Accounted { job: ours, events: vec![(EventKind::Migrating, "m".into())] };
    let mut stored = gang("j", JobState::Cancelled);
    let applied = edit.apply(&mut stored, NOW).unwrap();
    assert_eq!((stored.state, stored.cost_usd, stored.progress_hours), (JobState::Cancelled, 12.0, 3.0));
    assert!(applied.write);
    let placed =
        JobEdit::Placed { number: 2, expected: 1, message: "p".into(), region: "eastus".into(), moving_to: "x".into() };
    assert!(placed.apply(&mut stored, NOW).is_none(), "no intent for a finished job");
    let mut moved = gang("j", JobState::Pending);
    moved.attempts = 2;
    assert!(placed.apply(&mut moved, NOW).is_none(), "nor for one placed meanwhile (attempt numbers never repeat)");
}

#[test]
fn a_final_state_written_meanwhile_stands_against_the_loops_own_final_state() {
    // The loop saw the budget spent and decided `failed`; meanwhile the agents reported the work
    // done (or a user cancelled): the stored final state stands, the money and the work are the loop's.
    for stored_state in [JobState::Succeeded, JobState::Cancelled, JobState::Failed] {
        let mut ours = gang("j", JobState::Failed);
        ours.end_reason = Some("budget of $10.00 exhausted".into());
        ours.cost_usd = 10.5;
        ours.progress_hours = 4.0;
        let edit = JobEdit::Accounted {
            job: ours,
            events: vec![
                (EventKind::Evicted, "1 of 2 VMs lost".into()),
                (EventKind::Failed, "budget of $10.00 exhausted".into()),
            ],
        };
        let mut stored = gang("j", stored_state);
        stored.end_reason = Some("as stored".into());
        let applied = edit.apply(&mut stored, NOW).unwrap();
        assert_eq!(stored.state, stored_state, "the stored final state stands");
        assert_eq!(stored.end_reason.as_deref(), Some("as stored"));
        assert_eq!((stored.cost_usd, stored.progress_hours), (10.5, 4.0), "the loop's accounting is taken");
        let kinds: Vec<EventKind> = applied.events.iter().map(|e| e.0).collect();
        assert_eq!(kinds, [EventKind::Evicted], "no second final-state event");
    }
    // An open job takes the loop's decision whole.
    let mut ours = gang("j", JobState::Failed);
    ours.cost_usd = 10.5;
    let edit = JobEdit::Accounted { job: ours, events: vec![(EventKind::Failed, "budget".into())] };
    let mut stored = gang("j", JobState::Running);
    let applied = edit.apply(&mut stored, NOW).unwrap();
    assert_eq!((stored.state, applied.events.len()), (JobState::Failed, 1));
}

#[test]
fn agents_trouble_places_the_job_again_and_retires_the_attempt_once_the_new_one_runs() {
    let j = gang("j", JobState::Running);
    let a = attempt("j", 1, AttemptState::Running, Priority::Spot);
    let mut snap = snapshot(std::slice::from_ref(&j), std::slice::from_ref(&a));
    snap.seen.insert(attempt_key("j", 1), seen_fleet(Ok(fleet(&a.fleet_name, ProvisioningState::Succeeded, 2, &[]))));
    let config = ControlConfig::default();
    let catalog = Catalog::builtin();
    let wanted = |snap: &Snapshot| {
        let input = placement::plan_input(snap, &LoopState::default(), &config, &catalog);
        input.problem.jobs.iter().map(|d| d.gpus).sum::<u32>()
    };
    assert_eq!(wanted(&snap), 0, "a healthy placement holds the job's GPUs");
    let w =
        watch::watch(&snap, &mut LoopState::default(), &config, &catalog, (&attempt_key(&a.job_id, a.number), &a), &j);
    let Some((_, JobEdit::Accounted { job, .. })) = w.change.as_ref().and_then(|c| c.job.as_ref()) else { panic!() };
    assert!(!job.awaiting_failover, "no trouble, no move");

    // A preemption notice came while the cloud still counts both VMs.
    snap.agent_trouble.insert(attempt_key("j", 1), "a preemption notice");
    let w =
        watch::watch(&snap, &mut LoopState::default(), &config, &catalog, (&attempt_key(&a.job_id, a.number), &a), &j);
    assert!(!w.delete_fleet && !w.evicted, "the old VMs keep the work until the new placement runs");
    let change = w.change.expect("the move is written");
    let Some((_, JobEdit::Accounted { job, events })) = &change.job else { panic!("{change:?}") };
    assert_eq!((job.state, job.awaiting_failover), (JobState::Migrating, true));
    assert!(job.last_failure.as_deref().is_some_and(|f| f.contains("preemption notice")), "{job:?}");
    assert!(events.iter().any(|(k, m)| *k == EventKind::Migrating && m.contains("preemption notice")), "{events:?}");
    assert_eq!(wanted(&snap), 2, "the troubled placement's GPUs are asked for again");

    // The replacement is being provisioned: no second one.
    let mut moving = job.clone();
    moving.awaiting_failover = false;
    let b = attempt("j", 2, AttemptState::Provisioning, Priority::Regular);
    snap.put_job(&moving);
    snap.put_attempt(&b);
    let w = watch::watch(
        &snap,
        &mut LoopState::default(),
        &config,
        &catalog,
        (&attempt_key(&a.job_id, a.number), &a),
        &moving,
    );
    let moved_again = w
        .change
        .as_ref()
        .and_then(|c| c.job.as_ref())
        .is_some_and(|(_, e)| matches!(e, JobEdit::Accounted { job, .. } if job.awaiting_failover));
    assert!(!moved_again, "one replacement at a time");

    // It runs: the troubled placement is retired (make before break).
    let (_, retired) = follow::became_running(&snap, &mut LoopState::default(), &b, 2, config.below_min_grace_ms);
    assert_eq!(retired.iter().map(|x| x.number).collect::<Vec<_>>(), [1]);
}

#[test]
fn a_finished_jobs_fleet_is_settled_once_deleted_and_orphans_are_found_by_their_tags() {
    let mut j = gang("j", JobState::Cancelled);
    j.cost_usd = 1.0;
    let a = attempt("j", 1, AttemptState::Running, Priority::Regular);
    let snap = snapshot(std::slice::from_ref(&j), std::slice::from_ref(&a));
    let Action::Delete { fleet: deleted, then: Some(then) } = cleanup::clean_up(&snap, &a, Some(&j)) else { panic!() };
    assert_eq!(deleted, a.fleet_name);
    assert_eq!(then.attempts[0].state, AttemptState::Ended);
    assert_eq!(then.spend, Some(("default".to_string(), 4.0)), "2 VMs × $2 × the hour since the last settle");
    // The settlement adds to the job as stored: another fleet of the job, settled first, counts.
    let Some((_, edit)) = &then.job else { panic!("{then:?}") };
    let mut stored = j.clone();
    stored.cost_usd = 6.0;
    let applied = edit.apply(&mut stored, NOW).unwrap();
    assert_eq!(stored.cost_usd, 10.0, "$6 stored (the other fleet's settlement included) + $4");
    assert!(applied.events[0].1.ends_with("job cost $10.00"), "{:?}", applied.events);

    let live = attempt("k", 3, AttemptState::Running, Priority::Regular);
    let snap = snapshot(&[], std::slice::from_ref(&live));
    let fleets = vec![
        fleet(&live.fleet_name, ProvisioningState::Succeeded, 2, &[(TAG_JOB, "k"), (TAG_ATTEMPT, "3")]),
        fleet("spw-k-a2", ProvisioningState::Succeeded, 2, &[(TAG_JOB, "k"), (TAG_ATTEMPT, "2")]),
        fleet("spw-gone-a1", ProvisioningState::Deleting, 0, &[(TAG_JOB, "gone"), (TAG_ATTEMPT, "1")]),
        fleet("someone-elses", ProvisioningState::Succeeded, 2, &[]),
    ];
    let orphans = cleanup::orphans(&snap, &fleets, &Default::default());
    let names: Vec<&str> = orphans.iter().map(|o| o.fleet.as_str()).collect();
    assert_eq!(names, ["spw-k-a2", "spw-gone-a1"], "tagged fleets without a live attempt, and only those");
    let known = ["spw-k-a2".to_string()].into_iter().collect();
    assert_eq!(cleanup::orphans(&snap, &fleets, &known).len(), 1, "one already being deleted is not reported again");
}
