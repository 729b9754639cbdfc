//! The round's placement decisions: the feasibility chain's named filters, and a splittable job
//! grown where it already runs.

use super::*;

#[test]
fn the_feasibility_chain_names_the_filter_that_rejected_each_offer() {
    use crate::control::feasibility::Feasibility;
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
    assert!(crate::control::growth::fleet_to_grow(&snap, &st, &b, &p, 2.0).is_some());
    // Not grown: a gang (placed whole), another region or priority, a fleet below its capacity, a
    // fleet with an operation in flight, a job whose agents run its `run`.
    let g = gang("b", JobState::Running);
    assert!(
        crate::control::growth::fleet_to_grow(
            &snapshot(std::slice::from_ref(&g), std::slice::from_ref(&running)),
            &st,
            &g,
            &p,
            2.0
        )
        .is_none()
    );
    let west = solver::Placement { region: "westus3".into(), ..p.clone() };
    assert!(crate::control::growth::fleet_to_grow(&snap, &st, &b, &west, 2.0).is_none());
    let regular = solver::Placement { priority: Priority::Regular, ..p.clone() };
    assert!(crate::control::growth::fleet_to_grow(&snap, &st, &b, &regular, 2.0).is_none());
    let mut short = running.clone();
    short.running_vms = 1;
    short.below_min_since_ms = Some(NOW);
    assert!(
        crate::control::growth::fleet_to_grow(&snapshot(std::slice::from_ref(&b), &[short]), &st, &b, &p, 2.0)
            .is_none()
    );
    let mut busy = running.clone();
    busy.growing_to = Some(Capacity { vms: 4, gpus: 4 });
    assert!(
        crate::control::growth::fleet_to_grow(&snapshot(std::slice::from_ref(&b), &[busy]), &st, &b, &p, 2.0).is_none()
    );
    let runs = job(
        "b",
        "name = \"b\"\nkind = \"batch\"\ngpus = 2\nsizes = [\"Standard_NC24ads_A100_v4\"]\nduration_hours = 10.0\nrun = \"python shard.py\"\n",
        JobState::Running,
    );
    // A splittable job that runs work grows too: its new VMs join its world (agents::decide).
    assert!(crate::control::growth::fleet_to_grow(&snap, &st, &runs, &p, 2.0).is_some());
    // Inference replicas that run a server keep their ranks per attempt: a fleet per placement.
    let replicas = job(
        "b",
        "name = \"b\"\nkind = \"inference\"\ngpus = 2\nsizes = [\"Standard_NC24ads_A100_v4\"]\nrun = \"serve\"\n",
        JobState::Running,
    );
    assert!(crate::control::growth::fleet_to_grow(&snap, &st, &replicas, &p, 2.0).is_none());

    // The growth: the new capacity on the attempt, its quota held, its minimum as created.
    let change = crate::control::growth::grow(&running, &p);
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
    let (event, block) = crate::control::growth::follow(&snap, &mut st, &mut a, Some(&done)).unwrap();
    assert_eq!((a.vms, a.gpus, a.growing_to, event.0, block), (5, 5, None, EventKind::Resized, None));
    let mut a = grown.clone();
    let err = CloudError::Capacity { region: "eastus".into(), size: Some(SIZE.into()), priority: None, zone: None };
    let failed = Ok(OperationStatus::Failed(err));
    let (event, block) = crate::control::growth::follow(&snap, &mut st, &mut a, Some(&failed)).unwrap();
    assert_eq!((a.vms, a.gpus, a.vcpus, a.growing_to), (2, 2, 48, None));
    assert!(event.1.contains("keeps 2"), "{event:?}");
    assert!(block.is_some_and(|b| b.region == "eastus"));
    let running_op = Ok(OperationStatus::InProgress { retry_after_ms: 1 });
    assert!(crate::control::growth::follow(&snap, &mut st, &mut grown.clone(), Some(&running_op)).is_none());
}
