//! The round's decisions for pipeline jobs and deadline jobs: dependencies, a pipeline's budget,
//! and a deadline job's policy judging the placement it holds.

use super::*;

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
    use crate::control::dependencies::{Gate, gate};
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
    let offer = listed;
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
        crate::control::deadline::choose(&mut st, &catalog, policy, &j, &[a], &BTreeMap::new(), (None, None), NOW)
            .expect("a choice")
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

/// A deadline job with no slack for a spot loss is held to regular, unless its budget (its own,
/// its pipeline's) cannot pay regular for the work left: then regular is not a choice, and the
/// job rides spot instead of waiting for good. Before, a pipelines week whose budgets were 1.5x
/// each pipeline's cheapest cost finished 20 of 64 pipelines (44 left unstarted); now 58.
#[test]
fn a_deadline_job_is_not_held_to_a_tier_its_budget_cannot_pay() {
    use crate::deadline::DeadlinePolicyKind;
    let catalog = Catalog::builtin();
    // 4 h of work, due in 4.2 h: no slack to lose a spot VM.
    let deadline = time::OffsetDateTime::from_unix_timestamp(NOW / 1000 + 4 * 3600 + 720).unwrap();
    let spec = format!(
        "name = \"s\"\nkind = \"training\"\ngpus = 1\nsizes = [\"{SIZE}\"]\nregions = [\"eastus\"]\n\
         spot = \"allowed\"\nduration_hours = 4.0\ncheckpoint_interval_minutes = 30\ndeadline = \"{}\"\n",
        deadline.format(&time::format_description::well_known::Rfc3339).unwrap()
    );
    let j = job("j", &spec, JobState::Pending);
    let offer = |priority, price| listed("eastus", priority, price);
    let tick = 60_000;
    let choose = |afford: Option<f64>| {
        let mut st = LoopState::default();
        st.world.offers = vec![offer(Priority::Regular, 3.67), offer(Priority::Spot, 0.40)];
        for t in 0..60 {
            let up: BTreeMap<String, bool> = [("eastus".to_string(), true)].into();
            st.deadline.history.observe(NOW - (59 - t) * tick, tick, &up);
        }
        let policy = (DeadlinePolicyKind::Spillway, tick);
        crate::control::deadline::choose(&mut st, &catalog, policy, &j, &[], &BTreeMap::new(), (None, afford), NOW)
            .expect("a choice")
    };
    let regular = Some((Priority::Regular, "eastus".to_string()));
    assert_eq!(choose(None).hold, regular, "no budget: the tight deadline wants regular");
    assert_eq!(choose(Some(4.0 * 3.67 + 0.01)).hold, regular, "a budget that pays regular changes nothing");
    // $10 pays 4 h of spot ($1.60), not of regular ($14.68).
    let choice = choose(Some(10.0));
    assert_eq!(choice.hold, Some((Priority::Spot, "eastus".to_string())), "{choice:?}");
}

/// An offer of the tests' size as the cloud lists it: a price, nothing known of capacity.
fn listed(region: &str, priority: Priority, price: f64) -> Offer {
    Offer {
        region: region.into(),
        size: SIZE.into(),
        priority,
        price_per_hour: Some(price),
        capacity_vms: None,
        eviction_rate_per_hour: 0.0,
        eviction_band: None,
        placement_score: None,
    }
}
