//! The round's decisions, tested without a cloud: snapshots built by hand, the loop's memory
//! fresh, and the actions (and the records they carry) asserted.

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
        sizes: vec![SIZE.into()],
        capacity_vms: 2,
        min_capacity_vms: 2,
        provisioning_state: state,
        tags: tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
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
    let w = watch::watch(
        &snap,
        &mut LoopState::default(),
        &config,
        &Catalog::builtin(),
        (&attempt_key(&a.job_id, a.number), &a),
        &j,
    );
    assert_eq!(w, watch::Watched::default(), "30 s after the last settle: nothing to write");
    a.accounted_until_ms = Some(NOW - 60_000);
    let w = watch::watch(
        &snap,
        &mut LoopState::default(),
        &config,
        &Catalog::builtin(),
        (&attempt_key(&a.job_id, a.number), &a),
        &j,
    );
    let change = w.change.expect("settled every minute");
    assert_eq!(change.spend, Some(("default".to_string(), 2.0 * 2.0 / 60.0)), "2 VMs × $2 for a minute");
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

#[test]
fn the_feasibility_chain_names_the_filter_that_rejected_each_offer() {
    use super::feasibility::Feasibility;
    use crate::model::OfferFilter;
    let catalog = Arc::new(Catalog::builtin());
    let mut st = LoopState::default();
    let offer = |priority, price: Option<f64>, capacity| Offer {
        region: "eastus".into(),
        size: SIZE.into(),
        priority,
        price_per_hour: price,
        capacity_vms: capacity,
        eviction_rate_per_hour: 0.0,
        eviction_band: None,
        placement_score: None,
    };
    st.world.offers = vec![offer(Priority::Regular, Some(3.0), Some(1)), offer(Priority::Spot, None, None)];
    let chain = Feasibility { world: &st.world, breakers: &st.breakers, catalog: &catalog, now: NOW };
    let (offers, counts) = chain.solver_offers(&[]);
    assert_eq!(offers.len(), 1);
    assert_eq!(counts.rejected.get(&OfferFilter::Priced), Some(&1));
    let size = catalog.size(SIZE).unwrap();
    assert_eq!(chain.room(&st.world.offers[0], size, 2, &Default::default()), Err(OfferFilter::Capacity));
    // A region whose breaker is open is filtered, not priced up.
    for t in 0..3 {
        st.breakers.record_failure("eastus", NOW + t);
    }
    let chain = Feasibility { world: &st.world, breakers: &st.breakers, catalog: &catalog, now: NOW + 10 };
    assert_eq!(chain.offer(&st.world.offers[0], size), Err(OfferFilter::Breaker));
    let j = gang("j", JobState::Pending);
    let ours = Default::default();
    let counts = chain.job_counter(&ours).counts(&j);
    assert_eq!(counts.feasible, 0);
    assert_eq!(counts.rejected.get(&OfferFilter::Breaker), Some(&1), "{counts}");
}

#[test]
fn a_placement_where_a_splittable_job_runs_grows_that_fleet_and_answers_a_failure_like_a_placement() {
    let mut st = LoopState::default();
    let running = attempt("b", 1, AttemptState::Running, Priority::Spot);
    let p = solver::Placement {
        job: "b".into(),
        region: "eastus".into(),
        size: SIZE.into(),
        priority: Priority::Spot,
        vms: 3,
        gpus: 3,
        price_per_hour: 6.0,
        expected_cost: 0.0,
    };
    let b = batch("b", JobState::Running);
    let snap = snapshot(std::slice::from_ref(&b), std::slice::from_ref(&running));
    assert!(super::growth::fleet_to_grow(&snap, &st, &b, &p, 2.0).is_some());
    // Not grown: a gang (placed whole), another region or priority, a fleet below its capacity, a
    // fleet with an operation in flight, a job whose agents run its `run`.
    let g = gang("b", JobState::Running);
    assert!(
        super::growth::fleet_to_grow(
            &snapshot(std::slice::from_ref(&g), std::slice::from_ref(&running)),
            &st,
            &g,
            &p,
            2.0
        )
        .is_none()
    );
    let west = solver::Placement { region: "westus3".into(), ..p.clone() };
    assert!(super::growth::fleet_to_grow(&snap, &st, &b, &west, 2.0).is_none());
    let regular = solver::Placement { priority: Priority::Regular, ..p.clone() };
    assert!(super::growth::fleet_to_grow(&snap, &st, &b, &regular, 2.0).is_none());
    let mut short = running.clone();
    short.running_vms = 1;
    short.below_min_since_ms = Some(NOW);
    assert!(super::growth::fleet_to_grow(&snapshot(std::slice::from_ref(&b), &[short]), &st, &b, &p, 2.0).is_none());
    let mut busy = running.clone();
    busy.growing_to = Some(Capacity { vms: 4, gpus: 4 });
    assert!(super::growth::fleet_to_grow(&snapshot(std::slice::from_ref(&b), &[busy]), &st, &b, &p, 2.0).is_none());
    let runs = job(
        "b",
        "name = \"b\"\nkind = \"batch\"\ngpus = 2\nsizes = [\"Standard_NC24ads_A100_v4\"]\nduration_hours = 10.0\nrun = \"python shard.py\"\n",
        JobState::Running,
    );
    // A splittable job that runs work grows too: its new VMs join its world (agents::decide).
    assert!(super::growth::fleet_to_grow(&snap, &st, &runs, &p, 2.0).is_some());
    // Inference replicas that run a server keep their ranks per attempt: a fleet per placement.
    let replicas = job(
        "b",
        "name = \"b\"\nkind = \"inference\"\ngpus = 2\nsizes = [\"Standard_NC24ads_A100_v4\"]\nrun = \"serve\"\n",
        JobState::Running,
    );
    assert!(super::growth::fleet_to_grow(&snap, &st, &replicas, &p, 2.0).is_none());

    // The growth: the new capacity on the attempt, its quota held, its minimum as created.
    let change = super::growth::grow(&running, &p);
    let grown = &change.attempts_with_job[0];
    assert_eq!(grown.growing_to, Some(Capacity { vms: 5, gpus: 5 }));
    assert_eq!((grown.vms, grown.gpus, grown.vcpus, grown.min_vms), (2, 2, 120, Some(2)));
    // The job awaited a new placement after a failed top-up in westus3: the growth answers it.
    let mut stored = batch("b", JobState::Running);
    stored.awaiting_failover = true;
    stored.failover_from = Some("westus3".into());
    stored.last_failure = Some("no capacity in westus3".into());
    let (_, edit) = change.job.clone().unwrap();
    let applied = edit.apply(&mut stored, NOW).unwrap();
    let kinds: Vec<EventKind> = applied.events.iter().map(|e| e.0).collect();
    assert_eq!(kinds, [EventKind::Failover, EventKind::Resized]);
    assert!(!stored.awaiting_failover);
    assert_eq!((stored.failovers, stored.attempts), (1, 1), "a move, not an attempt");

    // The cloud confirms: the new capacity counts; a failure leaves the fleet as it was.
    let mut a = grown.clone();
    let done = Ok(OperationStatus::Succeeded);
    let (event, block) = super::growth::follow(&snap, &mut st, &mut a, Some(&done)).unwrap();
    assert_eq!((a.vms, a.gpus, a.growing_to, event.0, block), (5, 5, None, EventKind::Resized, None));
    let mut a = grown.clone();
    let err = CloudError::Capacity { region: "eastus".into(), size: Some(SIZE.into()), priority: None, zone: None };
    let failed = Ok(OperationStatus::Failed(err));
    let (event, block) = super::growth::follow(&snap, &mut st, &mut a, Some(&failed)).unwrap();
    assert_eq!((a.vms, a.gpus, a.vcpus, a.growing_to), (2, 2, 48, None));
    assert!(event.1.contains("keeps 2"), "{event:?}");
    assert!(block.is_some_and(|b| b.region == "eastus"));
    let running_op = Ok(OperationStatus::InProgress { retry_after_ms: 1 });
    assert!(super::growth::follow(&snap, &mut st, &mut grown.clone(), Some(&running_op)).is_none());
}

/// A pending batch job of pipeline `p` that depends on `deps` (name, job id).
fn stage(id: &str, deps: &[(&str, &str)], run_anyway: bool) -> Job {
    use crate::model::{Dependency, OnDependencyFailure, PipelineLink};
    let mut j = batch(id, JobState::Pending);
    j.attempts = 0;
    j.pipeline = Some(PipelineLink {
        pipeline_id: "p-1".into(),
        name: id.into(),
        depends_on: deps.iter().map(|(n, id)| Dependency { name: n.to_string(), job_id: id.to_string() }).collect(),
        on_dependency_failure: if run_anyway { OnDependencyFailure::Run } else { OnDependencyFailure::Fail },
        output_gb: Some(500.0),
        deadline: None,
        budget_usd: None,
    });
    j
}

#[test]
fn a_pipeline_job_waits_for_its_dependencies_and_fails_with_a_failed_one() {
    use super::dependencies::{Gate, gate};
    let prep = stage("prep", &[], false);
    let train = stage("train", &[("prep", "prep")], false);
    let report = stage("report", &[("prep", "prep")], true);
    let snap = snapshot(&[prep.clone(), train.clone(), report.clone()], &[]);
    assert_eq!(gate(&snap, &prep), Gate::Ready { data: None });
    assert_eq!(gate(&snap, &train), Gate::Wait("waiting for prep".into()));
    assert_eq!(gate(&snap, &report), Gate::Wait("waiting for prep".into()));
    // The rule is applied where the plan is made: the waiting job never reaches the solver.
    let input = placement::plan_input(&snap, &LoopState::default(), &ControlConfig::default(), &Catalog::builtin());
    let ids: Vec<&str> = input.problem.jobs.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["prep"]);
    assert_eq!(input.reasons["train"], ["waiting for prep"]);

    // prep failed (it is no longer open: the loop reads it as an upstream job).
    let mut failed = prep.clone();
    failed.state = JobState::Failed;
    let mut snap = snapshot(&[train.clone(), report.clone()], &[]);
    snap.upstream.insert("prep".into(), failed.clone());
    snap.upstream_regions.insert("prep".into(), "westus3".into());
    assert_eq!(gate(&snap, &train), Gate::Fail("dependency prep failed".into()));
    assert_eq!(gate(&snap, &report), Gate::Ready { data: Some(("westus3".into(), Some(500.0))) });
    let input = placement::plan_input(&snap, &LoopState::default(), &ControlConfig::default(), &Catalog::builtin());
    assert_eq!(input.dependency_failures, [("train".to_string(), "dependency prep failed".to_string())]);
    let report_demand = input.problem.jobs.iter().find(|d| d.id == "report").unwrap();
    assert_eq!((report_demand.data_region.as_deref(), report_demand.data_gb), (Some("westus3"), Some(500.0)));
    let mut stored = train.clone();
    let applied =
        JobEdit::DependencyFailed { reason: "dependency prep failed".into() }.apply(&mut stored, NOW).unwrap();
    assert_eq!((stored.state, stored.end_reason.as_deref()), (JobState::Failed, Some("dependency prep failed")));
    assert_eq!(applied.events[0].0, EventKind::Failed);
    // A job cancelled meanwhile stays cancelled.
    let mut cancelled = train.clone();
    cancelled.state = JobState::Cancelled;
    assert!(JobEdit::DependencyFailed { reason: "x".into() }.apply(&mut cancelled, NOW).is_none());

    // A failure goes all the way down in one round: train fails with prep, eval with train, and
    // score with eval, each naming its own dependency (one level per round before).
    let eval = stage("eval", &[("train", "train")], false);
    let score = stage("score", &[("eval", "eval")], false);
    let mut chain = snapshot(&[score.clone(), eval.clone(), train.clone(), report.clone()], &[]);
    chain.upstream.insert("prep".into(), failed.clone());
    let input = placement::plan_input(&chain, &LoopState::default(), &ControlConfig::default(), &Catalog::builtin());
    let mut failures = input.dependency_failures.clone();
    failures.sort();
    assert_eq!(
        failures,
        [
            ("eval".to_string(), "dependency train failed".to_string()),
            ("score".to_string(), "dependency eval failed".to_string()),
            ("train".to_string(), "dependency prep failed".to_string()),
        ]
    );
    // A forgotten dependency gates as its pipeline kept it: how it ended and where it ran.
    let mut forgotten = snapshot(std::slice::from_ref(&train), &[]);
    let kept = crate::model::EndedMember {
        state: JobState::Succeeded,
        last_region: Some("westus3".into()),
        output_gb: Some(500.0),
        finished_at_ms: NOW - 30 * 86_400_000,
        cost_usd: 1.0,
        end_reason: None,
        outputs: Default::default(),
    };
    forgotten.forgotten.insert("prep".into(), kept);
    forgotten.upstream_regions.insert("prep".into(), "westus3".into());
    assert_eq!(gate(&forgotten, &train), Gate::Ready { data: Some(("westus3".into(), Some(500.0))) });

    // prep succeeded: train may run, near prep's output, unless its spec names its own data.
    let mut done = prep;
    done.state = JobState::Succeeded;
    snap.upstream.insert("prep".into(), done);
    assert_eq!(gate(&snap, &train), Gate::Ready { data: Some(("westus3".into(), Some(500.0))) });
}

/// Issue #23: a pipeline's budget. An early stage may spend only what leaves the stages not yet
/// started their cheapest expected cost, so it waits rather than take an offer that would leave
/// them unaffordable; once the pipeline has spent its budget, its waiting stages fail.
#[test]
fn a_pipeline_budget_keeps_a_reserve_for_later_stages_and_fails_waiting_stages_once_spent() {
    let offer = |region: &str, price: f64, capacity| Offer {
        region: region.into(),
        size: SIZE.into(),
        priority: Priority::Regular,
        price_per_hour: Some(price),
        capacity_vms: capacity,
        eviction_rate_per_hour: 0.0,
        eviction_band: None,
        placement_score: None,
    };
    let world = || {
        let mut st = LoopState::default();
        // eastus is cheapest but full right now; westus3 has room at $5 per VM-hour.
        st.world.offers = vec![offer("eastus", 3.0, Some(0)), offer("westus3", 5.0, None)];
        st
    };
    let budgeted = |budget: f64| {
        let mut prep = stage("prep", &[], false);
        let mut train = stage("train", &[("prep", "prep")], false);
        for j in [&mut prep, &mut train] {
            j.pipeline.as_mut().unwrap().budget_usd = Some(budget);
            // All or nothing: a splittable stage would start on the one VM the budget allows.
            Arc::make_mut(&mut j.spec).gang = Some(true);
        }
        snapshot(&[prep, train], &[])
    };
    let catalog = Catalog::builtin();
    let placed = |snap: &Snapshot| {
        let mut st = world();
        let input = placement::plan_input(snap, &st, &ControlConfig::default(), &catalog);
        let prep = input.problem.jobs.iter().find(|d| d.id == "prep").expect("prep is asked for").clone();
        let (plan, _) = placement::solve(&mut st, input.problem, None);
        (prep.budget, plan.placements.iter().filter(|p| p.job == "prep").map(|p| p.region.clone()).collect::<Vec<_>>())
    };
    // Each stage: 2 one-GPU VMs for 10 h. prep in westus3 is expected to cost $100; train's
    // cheapest is eastus, $60. Of $150, prep may spend $90: it waits rather than leave train $50.
    let (budget, regions) = placed(&budgeted(150.0));
    assert_eq!(budget, Some(90.0));
    assert!(regions.is_empty(), "prep would leave train less than its cheapest cost: {regions:?}");
    // With $170 prep may spend $110: it runs in westus3 and leaves train its $60.
    let (budget, regions) = placed(&budgeted(170.0));
    assert_eq!(budget, Some(110.0));
    assert_eq!(regions, ["westus3"]);

    // The pipeline has spent its budget (on a stage that ended): its waiting stages fail, with why.
    let mut spent = budgeted(170.0);
    spent.pipeline_ended_usd.insert("p-1".into(), 170.0);
    let input = placement::plan_input(&spent, &world(), &ControlConfig::default(), &catalog);
    let why = "pipeline budget of $170.00 exhausted".to_string();
    assert_eq!(input.dependency_failures, [("prep".to_string(), why.clone()), ("train".to_string(), why)]);
    assert!(input.problem.jobs.is_empty());
}

/// A deadline job running whole on spot in eastus stays there when a new allocation of that
/// offer would meet a block (learnt from another job's refused creation) and the region's spot
/// history reads "unavailable" this tick: its VMs run. Before, its policy judged the offer it ran on as a
/// new allocation, saw it closed and moved the job to westus3's spot (a pipeline stage paying its
/// input's egress again; 2,000 of the Philly pipelines week's 2,543 stage moves).
#[test]
fn a_deadline_job_is_not_moved_off_a_healthy_fleet_whose_offer_a_new_allocation_would_not_get() {
    use crate::deadline::DeadlinePolicyKind;
    let catalog = Catalog::builtin();
    let deadline = time::OffsetDateTime::from_unix_timestamp(NOW / 1000 + 48 * 3600).unwrap();
    let spec = format!(
        "name = \"s\"\nkind = \"training\"\ngpus = 1\nsizes = [\"{SIZE}\"]\nregions = [\"eastus\", \"westus3\"]\n\
         spot = \"allowed\"\nduration_hours = 4.0\ncheckpoint_interval_minutes = 30\ndeadline = \"{}\"\n",
        deadline.format(&time::format_description::well_known::Rfc3339).unwrap()
    );
    let mut j = job("j", &spec, JobState::Running);
    j.progress_hours = 1.0;
    let mut a = attempt("j", 1, AttemptState::Running, Priority::Spot);
    (a.vms, a.gpus, a.running_vms, a.vcpus, a.price_per_hour) = (1, 1, 1, 24, 0.40);
    let offer = |region: &str, priority, price| Offer {
        region: region.into(),
        size: SIZE.into(),
        priority,
        price_per_hour: Some(price),
        capacity_vms: None,
        eviction_rate_per_hour: 0.0,
        eviction_band: None,
        placement_score: None,
    };
    let tick = 60_000;
    let choose = |a: &Attempt, evicted_here: bool| {
        let mut st = LoopState::default();
        st.world.offers = vec![
            offer("eastus", Priority::Regular, 3.67),
            offer("eastus", Priority::Spot, 0.40),
            offer("westus3", Priority::Regular, 3.67),
            offer("westus3", Priority::Spot, 0.40),
        ];
        for t in 0..60 {
            let last = t == 59;
            let up: BTreeMap<String, bool> = [("eastus".to_string(), !last), ("westus3".to_string(), true)].into();
            st.deadline.history.observe(NOW - (59 - t) * tick, tick, &up);
        }
        st.world.add_block(crate::model::BlockedOffer {
            region: "eastus".into(),
            size: Some(SIZE.into()),
            family: None,
            priority: Some(Priority::Spot),
            zone: None,
            class: FailureClass::Capacity,
            reason: "no capacity: eastus spot".into(),
            since_ms: NOW - tick,
            until_ms: NOW + 14 * tick,
        });
        if evicted_here {
            st.deadline.spot_lost_at.insert("eastus".into(), NOW - tick);
        }
        let policy = (DeadlinePolicyKind::Spillway, tick);
        super::deadline::choose(&mut st, &catalog, policy, &j, &[a], &BTreeMap::new(), None, NOW).expect("a choice")
    };
    let choice = choose(&a, false);
    assert_eq!(choice.hold, Some((Priority::Spot, "eastus".to_string())), "{choice:?}");
    // Our spot VMs lost in eastus a minute ago (another fleet's): evidence against the VMs that
    // run there, so the job is judged as any new placement and leaves.
    let choice = choose(&a, true);
    assert_ne!(choice.hold, Some((Priority::Spot, "eastus".to_string())), "{choice:?}");
    // Its VMs lost, the job is judged as any new placement: eastus's spot is closed.
    a.running_vms = 0;
    a.below_min_since_ms = Some(NOW);
    let choice = choose(&a, false);
    assert_ne!(choice.hold, Some((Priority::Spot, "eastus".to_string())), "{choice:?}");
}
