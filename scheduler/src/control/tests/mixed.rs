//! Mixed spot + regular fleets (#22): a job's regular base asked for as its own regular-only part,
//! a spot and a regular placement of one job on one offer made one attempt and one fleet, and what
//! the loop counts of such an attempt (quota pools, cost, held GPUs, evictions of its spot part).

use super::*;
use crate::control::demand::{DemandPart, Held, demands};
use crate::control::mixed::{self, Fleets};
use crate::control::world::our_usage;
use crate::model::AttemptPart;

fn mixed_batch(id: &str, extra: &str) -> Job {
    let toml = format!(
        "name = \"m\"\nkind = \"batch\"\ngpus = 4\nsizes = [\"{SIZE}\"]\nduration_hours = 10.0\ncheckpoint_interval_minutes = 30\n{extra}"
    );
    job(id, &toml, JobState::Pending)
}

fn parts_of(d: &[solver::JobDemand]) -> Vec<(String, u32, solver::SpotPolicy)> {
    d.iter().map(|d| (d.id.clone(), d.gpus, d.spot)).collect()
}

#[test]
fn a_regular_base_is_its_own_regular_only_part_of_the_deficit() {
    use solver::SpotPolicy::{Allowed, Never};
    let catalog = Catalog::builtin();
    let j = mixed_batch("j", "regular_gpus = 2\nmax_price_per_hour = 8.0\n");
    let d = demands(&j, &catalog, Held::default());
    assert_eq!(parts_of(&d), [("j#base".into(), 2, Never), ("j".into(), 2, Allowed)]);
    assert_eq!(DemandPart::parse(&d[0].id), ("j", DemandPart::Base));
    // The cap is shared pro rata, as between an inference service's parts.
    assert_eq!((d[0].max_price_per_hour, d[1].max_price_per_hour), (Some(4.0), Some(4.0)));

    // The base held on regular VMs is not asked for again; the rest is.
    let held = Held { gpus: 2, regular_gpus: 2, usd_per_hour: 0.0 };
    assert_eq!(parts_of(&demands(&j, &catalog, held)), [("j".into(), 2, Allowed)]);
    // Spot GPUs held do not count toward the base: the deficit is the base.
    let held = Held { gpus: 2, regular_gpus: 0, usd_per_hour: 0.0 };
    assert_eq!(parts_of(&demands(&j, &catalog, held)), [("j#base".into(), 2, Never)]);

    // No base where it means nothing: without it, with spot never, for a gang.
    let plain = mixed_batch("p", "");
    assert_eq!(parts_of(&demands(&plain, &catalog, Held::default())), [("p".into(), 4, Allowed)]);
    let never = mixed_batch("n", "regular_gpus = 2\nspot = \"never\"\n");
    assert_eq!(parts_of(&demands(&never, &catalog, Held::default())), [("n".into(), 4, Never)]);
    let mut g = mixed_batch("g", "");
    let mut spec = (*g.spec).clone();
    spec.gang = Some(true);
    spec.regular_gpus = Some(2);
    g.spec = Arc::new(spec);
    assert_eq!(parts_of(&demands(&g, &catalog, Held::default())), [("g".into(), 4, Allowed)]);
}

#[test]
fn an_inference_services_base_keeps_its_minimum_replicas_on_regular_at_the_minimums_weight() {
    use solver::SpotPolicy::{Allowed, Never};
    let catalog = Catalog::builtin();
    let toml = format!(
        "name = \"chat\"\nkind = \"inference\"\ngpus = 1\nsizes = [\"{SIZE}\"]\nspot = \"allowed\"\nregular_gpus = 2\npriority = 3\n[replicas]\nmin = 3\ndesired = 5\n"
    );
    let j = job("chat", &toml, JobState::Pending);
    let d = demands(&j, &catalog, Held::default());
    assert_eq!(
        parts_of(&d),
        [("chat#base".into(), 2, Never), ("chat#min".into(), 1, Allowed), ("chat#extra".into(), 2, Allowed)]
    );
    let boosted = 3 * crate::control::MIN_REPLICA_BOOST;
    assert_eq!((d[0].priority, d[1].priority, d[2].priority), (boosted, boosted, 3));
}

fn placement(job: &str, priority: Priority, size: &str, vms: u32) -> solver::Placement {
    solver::Placement {
        job: job.into(),
        region: "eastus".into(),
        size: size.into(),
        priority,
        vms,
        gpus: vms,
        price_per_hour: vms as f64 * if priority == Priority::Spot { 1.0 } else { 3.0 },
        expected_cost: 0.0,
    }
}

#[test]
fn a_spot_and_a_regular_placement_of_a_mixing_job_on_one_offer_are_one_fleet() {
    let other = "Standard_NC48ads_A100_v4";
    let plan = [
        placement("j", Priority::Spot, SIZE, 2),
        placement("k#base", Priority::Regular, SIZE, 1),
        placement("j#base", Priority::Regular, SIZE, 2),
        placement("k", Priority::Spot, SIZE, 1),
        placement("l#base", Priority::Regular, SIZE, 1),
        placement("l", Priority::Spot, other, 1),
    ];
    let fleets = mixed::pairs(&plan, |id| id == "j" || id == "l");
    assert_eq!(
        fleets,
        [
            Fleets::Mixed { spot: &plan[0], regular: &plan[2] },
            Fleets::One(&plan[1]),
            Fleets::One(&plan[3]),
            Fleets::One(&plan[4]),
            Fleets::One(&plan[5]),
        ],
        "j mixes on one offer; k has no base (not paired); l's parts are on two sizes"
    );
    // The regular placement first in the plan pairs just as well.
    let swapped = [plan[2].clone(), plan[0].clone()];
    assert_eq!(mixed::pairs(&swapped, |_| true), [Fleets::Mixed { spot: &swapped[1], regular: &swapped[0] }]);
}

/// A mixed attempt: 2 regular + 2 spot VMs of `SIZE` (1 GPU, 24 vCPUs each), spot at $1, regular at
/// $3 per VM-hour.
fn mixed_attempt() -> Attempt {
    let mut a = attempt("j", 1, AttemptState::Running, Priority::Spot);
    a.vms = 4;
    a.gpus = 4;
    a.vcpus = 96;
    a.running_vms = 4;
    a.price_per_hour = 1.0;
    a.regular = Some(AttemptPart { vms: 2, min_vms: 2, gpus: 2, price_per_hour: 3.0, running_vms: 2 });
    a
}

#[test]
fn a_mixed_intent_asks_for_one_fleet_of_both_profiles_and_each_part_draws_its_own_pools() {
    let catalog = Catalog::builtin();
    let st = LoopState::default();
    let j = mixed_batch("j", "regular_gpus = 2\n");
    let spot = placement("j", Priority::Spot, SIZE, 2);
    let regular = placement("j#base", Priority::Regular, SIZE, 2);
    let (a, change) =
        placement::intent(&st, &catalog, NOW, &j, &spot, (1.0, None), Some((&regular, 3.0)), None, &[]).unwrap();
    assert_eq!((a.priority, a.vms, a.gpus, a.vcpus), (Priority::Spot, 4, 4, 96), "the fleet's totals");
    assert_eq!(a.regular, Some(AttemptPart { vms: 2, min_vms: 2, gpus: 2, price_per_hour: 3.0, running_vms: 0 }));
    assert_eq!(
        change.attempts_with_job,
        std::slice::from_ref(&a),
        "one attempt, written before the fleet is asked for"
    );
    let req = crate::control::act::fleet_request(&a);
    assert_eq!((req.priority, req.vms, req.min_vms), (Priority::Spot, 2, 2), "the spot part in the request's fields");
    assert_eq!(req.regular, Some(crate::cloud::FleetPart { vms: 2, min_vms: 2 }), "each part's minimum honoured");
    assert_eq!(req.total_vms(), 4);

    // Quota: the regular part draws the family and cores pools, the spot part lowPriorityCores.
    let usage = our_usage([&a].into_iter());
    let family = QuotaPool::Family(a.family.clone()).key();
    let pool = |k: &str| usage.get(&("eastus".to_string(), k.to_string())).map(|x| x.0);
    assert_eq!(pool(&family), Some(48));
    assert_eq!(pool(&QuotaPool::Cores.key()), Some(48));
    assert_eq!(pool(&QuotaPool::LowPriorityCores.key()), Some(48));
    let in_flight = usage.get(&("eastus".to_string(), QuotaPool::LowPriorityCores.key())).unwrap().1;
    assert_eq!(in_flight, 48, "a provisioning fleet holds each part's quota from the intent on");
}

#[test]
fn a_mixed_fleet_is_billed_and_held_at_each_parts_price() {
    let a = mixed_attempt();
    assert_eq!(a.running_usd_per_hour(), 2.0 * 1.0 + 2.0 * 3.0);
    let share = crate::control::accounts::fleet_share(&a);
    assert!((share.cost_usd(1.0) - 8.0).abs() < 1e-12, "{share:?}");
    assert_eq!(placement::billed_per_hour(&a, 4), 8.0);
    let j = mixed_batch("j", "regular_gpus = 2\n");
    assert_eq!(placement::holds(&j, &a, NOW, 120_000, false), (4, 4));
    assert_eq!(placement::holds_regular(&j, &a, NOW, 120_000, false), 2);
}

#[test]
fn a_spot_eviction_in_a_mixed_fleet_leaves_the_job_running_on_its_regular_part() {
    let catalog = Catalog::builtin();
    let config = ControlConfig::default();
    let mut j = mixed_batch("j", "regular_gpus = 2\n");
    j.state = JobState::Running;
    j.progress_hours = 0.75;
    let mut a = mixed_attempt();
    a.accounted_until_ms = Some(NOW);
    let key = attempt_key("j", 1);
    let mut seen = fleet(&a.fleet_name, ProvisioningState::Succeeded, 0, &[]);
    seen.regular = Some(crate::cloud::FleetPartStatus { capacity_vms: 2, min_capacity_vms: 2, running_vms: Some(2) });
    let mut snap = snapshot(std::slice::from_ref(&j), std::slice::from_ref(&a));
    snap.seen.insert(key.clone(), seen_fleet(Ok(seen)));
    let mut st = LoopState::default();
    let w = watch::watch(&snap, &mut st, &config, &catalog, (&key, &a), &j);
    assert!(w.evicted && !w.delete_fleet, "{w:?}");
    let change = w.change.expect("the eviction is written");
    let watched = &change.attempts[0];
    assert_eq!((watched.running_vms, watched.regular.map(|r| r.running_vms)), (2, Some(2)));
    let Some((_, JobEdit::Accounted { job, events })) = &change.job else { panic!("{change:?}") };
    assert_eq!((job.state, job.awaiting_failover, job.evictions), (JobState::Running, false, 1));
    assert!(events[0].1.contains("spot part"), "{events:?}");
    assert!(st.deadline.evicted_spot.contains("eastus"));

    // Past the grace period: only the spot offer is blocked, and the job holds its regular part's
    // GPUs, base included, so the lost spot GPUs are a deficit again.
    let mut below = watched.clone();
    below.below_min_since_ms = Some(NOW - 121_000);
    let mut snap = snapshot(std::slice::from_ref(job), std::slice::from_ref(&below));
    let mut seen = fleet(&a.fleet_name, ProvisioningState::Succeeded, 0, &[]);
    seen.regular = Some(crate::cloud::FleetPartStatus { capacity_vms: 2, min_capacity_vms: 2, running_vms: Some(2) });
    snap.seen.insert(key.clone(), seen_fleet(Ok(seen)));
    let mut st = LoopState::default();
    let w = watch::watch(&snap, &mut st, &config, &catalog, (&key, &below), job);
    assert!(!w.delete_fleet && w.finished.is_none(), "{w:?}");
    let blocks: Vec<_> = st.world.blocked.iter().filter(|b| b.is_active(NOW)).collect();
    assert_eq!(blocks.len(), 1, "{blocks:?}");
    assert!(blocks[0].covers("eastus", SIZE, &a.family, Priority::Spot));
    assert!(!blocks[0].covers("eastus", SIZE, &a.family, Priority::Regular), "the regular part runs on");
    let after = w.change.and_then(|c| c.job).map_or(job.clone(), |(_, e)| match e {
        JobEdit::Accounted { job, .. } => job,
        other => panic!("{other:?}"),
    });
    assert!(!after.awaiting_failover && after.state == JobState::Running, "not failed over");
    let after = &after;
    let held = placement::holds(after, &below, NOW, 120_000, false);
    assert_eq!(held, (2, 4), "2 GPUs run; all 4 VMs may bill again");
    assert_eq!(placement::holds_regular(after, &below, NOW, 120_000, false), 2);
    let held = Held { gpus: 2, regular_gpus: 2, usd_per_hour: 0.0 };
    assert_eq!(parts_of(&demands(after, &catalog, held)), [("j".into(), 2, solver::SpotPolicy::Allowed)]);
}
