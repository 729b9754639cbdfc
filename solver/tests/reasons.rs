//! Hand-made problems: the issue's example, the objective's order, cost terms, and one case per reason a
//! job can wait, each checking the exact explanation a user reads.

use solver::{JobDemand, Method, Offer, Plan, Priority, Problem, QuotaLimit, SolveOptions, SpotPolicy, check, solve};

fn a100(region: &str, size: &str, gpus: u32, vcpus: u32, price: f64) -> Offer {
    Offer {
        region: region.into(),
        size: size.into(),
        priority: Priority::Regular,
        gpu_model: "A100-80GB".into(),
        gpus_per_vm: gpus,
        vcpus_per_vm: vcpus,
        family: "standardNCADSA100v4Family".into(),
        price_per_hour: price,
        capacity_vms: None,
        eviction_rate_per_hour: 0.0,
    }
}

fn nc24(region: &str) -> Offer {
    a100(region, "Standard_NC24ads_A100_v4", 1, 24, 3.673)
}

fn spot(mut o: Offer, price: f64, rate: f64) -> Offer {
    o.priority = Priority::Spot;
    o.price_per_hour = price;
    o.eviction_rate_per_hour = rate;
    o
}

fn quota(region: &str, pool: &str, vcpus: u64) -> QuotaLimit {
    QuotaLimit { region: region.into(), pool: pool.into(), vcpus }
}

fn job(id: &str, gpus: u32) -> JobDemand {
    JobDemand { id: id.into(), gpus, gpu_models: vec!["A100-80GB".into()], duration_hours: 5.0, ..JobDemand::default() }
}

fn problem(offers: Vec<Offer>, quotas: Vec<QuotaLimit>, jobs: Vec<JobDemand>) -> Problem {
    let p = Problem { offers, quotas, jobs, egress: vec![] };
    p.validate().expect("hand-made problems are valid");
    p
}

fn best(p: &Problem) -> Plan {
    let plan = solve(p, &SolveOptions::default());
    check(p, &plan).unwrap_or_else(|e| panic!("infeasible plan {e:?}"));
    plan
}

fn greedy(p: &Problem) -> Plan {
    let plan = solve(p, &SolveOptions { method: Method::Greedy, time_limit_ms: None });
    check(p, &plan).unwrap_or_else(|e| panic!("infeasible greedy plan {e:?}"));
    plan
}

fn reasons(plan: &Plan, id: &str) -> Vec<String> {
    plan.unplaced.iter().find(|u| u.job == id).map(|u| u.reasons.clone()).unwrap_or_default()
}

#[test]
fn the_issue_example_places_the_gang_on_eight_vms() {
    let json = r#"{
      "offers": [
        {"region": "eastus", "size": "Standard_NC24ads_A100_v4", "priority": "regular",
         "gpu_model": "A100-80GB", "gpus_per_vm": 1, "vcpus_per_vm": 24,
         "family": "standardNCADSA100v4Family", "price_per_hour": 3.673,
         "capacity_vms": null, "eviction_rate_per_hour": 0.0}
      ],
      "quotas": [
        {"region": "eastus", "pool": "standardNCADSA100v4Family", "vcpus": 192},
        {"region": "eastus", "pool": "cores", "vcpus": 400},
        {"region": "eastus", "pool": "lowPriorityCores", "vcpus": 100}
      ],
      "jobs": [
        {"id": "ft-1", "gpus": 8, "gpu_models": ["A100-80GB"], "gang": true,
         "regions": ["eastus", "westus3"], "spot": "never", "priority": 10,
         "duration_hours": 5.0, "max_price_per_hour": 40.0}
      ]
    }"#;
    let p = Problem::from_json_str(json).expect("the issue's example parses");
    let plan = best(&p);
    assert_eq!(plan.placements.len(), 1);
    let pl = &plan.placements[0];
    assert_eq!((pl.job.as_str(), pl.region.as_str(), pl.vms, pl.gpus), ("ft-1", "eastus", 8, 8));
    assert_eq!(pl.price_per_hour, 29.384);
    assert_eq!(pl.expected_cost, 146.92);
    assert_eq!(plan.placed_weight, 80.0);
    assert_eq!(plan.expected_cost, 146.92);
    assert!(plan.optimal, "a single job on a single offer is provably optimal: {plan:?}");
    assert_eq!(plan.gap, 0.0);
    assert!(plan.unplaced.is_empty());
}

#[test]
fn family_quota_too_small_names_pool_need_and_free() {
    let p = problem(vec![nc24("eastus")], vec![quota("eastus", "standardNCADSA100v4Family", 96)], vec![job("x", 8)]);
    let plan = best(&p);
    assert!(plan.placements.is_empty());
    assert_eq!(reasons(&plan, "x"), vec!["no quota: eastus standardNCADSA100v4Family needs 192 vCPUs, 96 free"]);
    // Nothing can be placed, and the solver proves it.
    assert!(plan.optimal);
}

#[test]
fn regional_cores_pool_binds_regular_vms_too() {
    let p = problem(
        vec![nc24("eastus")],
        vec![quota("eastus", "standardNCADSA100v4Family", 1000), quota("eastus", "cores", 100)],
        vec![job("x", 8)],
    );
    assert_eq!(reasons(&best(&p), "x"), vec!["no quota: eastus cores needs 192 vCPUs, 100 free"]);
}

#[test]
fn family_names_match_lower_cased_without_spaces() {
    let p = problem(vec![nc24("eastus")], vec![quota("eastus", "Standard NCADSA100v4 Family", 48)], vec![job("x", 4)]);
    assert_eq!(reasons(&best(&p), "x"), vec!["no quota: eastus Standard NCADSA100v4 Family needs 96 vCPUs, 48 free"]);
}

#[test]
fn spot_uses_only_the_low_priority_pool() {
    let offers = vec![spot(nc24("eastus"), 1.0, 0.0)];
    let mut j = job("s", 2);
    j.spot = SpotPolicy::Allowed;
    // Family and cores pools at zero do not matter for spot; lowPriorityCores does.
    let quotas = vec![
        quota("eastus", "standardNCADSA100v4Family", 0),
        quota("eastus", "cores", 0),
        quota("eastus", "lowPriorityCores", 48),
    ];
    let plan = best(&problem(offers.clone(), quotas, vec![j.clone()]));
    assert_eq!(plan.placements.len(), 1);
    assert_eq!(plan.placements[0].priority, Priority::Spot);
    let plan = best(&problem(offers, vec![quota("eastus", "lowPriorityCores", 24)], vec![j]));
    assert_eq!(reasons(&plan, "s"), vec!["no quota: eastus lowPriorityCores needs 48 vCPUs, 24 free"]);
}

#[test]
fn capacity_smaller_than_the_gang() {
    let mut o = nc24("eastus");
    o.capacity_vms = Some(3);
    let plan = best(&problem(vec![o], vec![], vec![job("x", 8)]));
    assert_eq!(reasons(&plan, "x"), vec!["no capacity: eastus Standard_NC24ads_A100_v4 regular has 3 VMs, needs 8"]);
}

#[test]
fn outranked_by_a_higher_priority_job_for_capacity() {
    let mut o = nc24("eastus");
    o.capacity_vms = Some(8);
    let mut high = job("high", 8);
    high.priority = 10;
    let low = job("low", 8);
    let plan = best(&problem(vec![o], vec![], vec![low, high]));
    assert_eq!(plan.placements.iter().map(|p| p.job.as_str()).collect::<Vec<_>>(), vec!["high"]);
    assert_eq!(
        reasons(&plan, "low"),
        vec![
            "no capacity: eastus Standard_NC24ads_A100_v4 regular has 0 of 8 VMs free, needs 8",
            "outranked: that quota and capacity went to 1 placed job of priority 10",
        ]
    );
}

#[test]
fn price_cap_and_budget() {
    let mut capped = job("capped", 8);
    capped.max_price_per_hour = Some(20.0);
    let mut poor = job("poor", 8);
    poor.budget = Some(100.0);
    // A job that already holds $8/h and $40 outside the problem: the reason states its total
    // against its whole cap and budget (the problem's cap and budget are what is left of them).
    let mut holding = job("holding", 8);
    holding.max_price_per_hour = Some(12.0);
    holding.held_price_per_hour = 8.0;
    let mut spent = job("spent", 8);
    spent.budget = Some(100.0);
    spent.held_cost = 40.0;
    let plan = best(&problem(vec![nc24("eastus")], vec![], vec![capped, poor, holding, spent]));
    assert!(plan.placements.is_empty());
    assert_eq!(
        reasons(&plan, "capped"),
        vec![
            "price cap: eastus Standard_NC24ads_A100_v4 regular would cost 29.38/h in total with 8 more VMs at \
             3.67/h, cap 20.00/h"
        ]
    );
    assert_eq!(
        reasons(&plan, "holding"),
        vec![
            "price cap: eastus Standard_NC24ads_A100_v4 regular would cost 37.38/h in total with 8 more VMs at \
             3.67/h, cap 20.00/h"
        ]
    );
    assert_eq!(
        reasons(&plan, "poor"),
        vec![
            "budget: eastus Standard_NC24ads_A100_v4 regular would bring the expected cost to 146.92 in total \
             (146.92 for 8 more VMs), budget 100.00"
        ]
    );
    assert_eq!(
        reasons(&plan, "spent"),
        vec![
            "budget: eastus Standard_NC24ads_A100_v4 regular would bring the expected cost to 186.92 in total \
             (146.92 for 8 more VMs), budget 140.00"
        ]
    );
}

#[test]
fn match_filters_each_name_what_matched_nothing() {
    let offers = vec![nc24("eastus"), spot(a100("westus3", "Standard_NC96ads_A100_v4", 4, 96, 14.692), 5.0, 0.05)];
    let mut model = job("model", 1);
    model.gpu_models = vec!["H100".into()];
    let mut size = job("size", 1);
    size.sizes = vec!["Standard_ND96isr_H100_v5".into()];
    let mut region = job("region", 1);
    region.regions = Some(vec!["centralus".into()]);
    let mut denied = job("denied", 1);
    denied.deny_regions = vec!["eastus".into(), "westus3".into()];
    let mut never = job("never", 4);
    never.regions = Some(vec!["westus3".into()]);
    let mut big = job("big", 8);
    big.min_gpus_per_vm = Some(8);
    let plan = best(&problem(offers, vec![], vec![model, size, region, denied, never, big]));
    assert!(plan.placements.is_empty());
    assert_eq!(reasons(&plan, "model"), vec!["no offer has GPU model H100"]);
    assert_eq!(reasons(&plan, "size"), vec!["no A100-80GB offer of size Standard_ND96isr_H100_v5"]);
    assert_eq!(reasons(&plan, "region"), vec!["no matching offer in the allowed regions centralus"]);
    assert_eq!(reasons(&plan, "denied"), vec!["every matching offer is in a denied region (eastus, westus3)"]);
    assert_eq!(reasons(&plan, "never"), vec!["spot: never, and every matching offer is spot"]);
    assert_eq!(reasons(&plan, "big"), vec!["no matching offer has at least 8 GPUs per VM"]);
}

#[test]
fn non_gang_job_is_split_and_its_remainder_explained() {
    let mut a = nc24("eastus");
    a.capacity_vms = Some(2);
    let mut b = nc24("westus3");
    b.capacity_vms = Some(1);
    let mut j = job("batch", 4);
    j.gang = false;
    let plan = best(&problem(vec![a, b], vec![], vec![j]));
    assert_eq!(plan.placements.len(), 2);
    assert_eq!(plan.placements.iter().map(|p| p.gpus).sum::<u32>(), 3);
    assert_eq!(plan.placed_weight, 3.0);
    let r = reasons(&plan, "batch");
    assert_eq!(r[0], "placed 3 of 4 GPUs");
    assert!(
        r.contains(&"no capacity: eastus Standard_NC24ads_A100_v4 regular has 0 of 2 VMs free, needs 1".to_string()),
        "{r:?}"
    );
}

/// Greedy takes the cheapest size for the first job and wastes the family quota; the optimiser uses
/// the quota-efficient size for both jobs and places twice the weight.
#[test]
fn optimiser_beats_greedy_on_tight_quota() {
    let small = a100("eastus", "Standard_NC24ads_A100_v4", 1, 24, 3.0);
    let large = a100("eastus", "Standard_ND96amsr_A100_v4", 8, 96, 30.0);
    let p = problem(
        vec![small, large],
        vec![quota("eastus", "standardNCADSA100v4Family", 192)],
        vec![job("a", 8), job("b", 8)],
    );
    let g = greedy(&p);
    assert_eq!(g.placed_weight, 8.0);
    assert_eq!(g.placements[0].size, "Standard_NC24ads_A100_v4");
    let b = best(&p);
    assert_eq!(b.placed_weight, 16.0);
    assert!(b.placements.iter().all(|p| p.size == "Standard_ND96amsr_A100_v4"));
    assert!(b.optimal, "{b:?}");
    // Greedy's own plan cannot be proven: the bound says 16 is possible.
    assert!(!g.optimal && (g.gap - 0.5).abs() < 1e-9, "{g:?}");
}

#[test]
fn cheapest_region_wins_and_the_optimum_is_proven() {
    let p = problem(
        vec![nc24("eastus"), a100("westus3", "Standard_NC24ads_A100_v4", 1, 24, 3.2)],
        vec![],
        vec![job("a", 2), job("b", 2)],
    );
    let plan = best(&p);
    assert!(plan.placements.iter().all(|p| p.region == "westus3"));
    assert!(plan.optimal && plan.gap == 0.0, "{plan:?}");
}

#[test]
fn spot_eviction_cost_follows_its_definition() {
    // 2 VMs at 1.0/h for 4 h, 10 % evictions per hour, 0.5 h lost per eviction, gang of 2:
    // run 8.0, eviction 8.0 × 0.1 × 4 × 0.5 × 2 = 3.2.
    let mut j = job("s", 2);
    j.spot = SpotPolicy::Allowed;
    j.duration_hours = 4.0;
    let p = problem(vec![spot(nc24("eastus"), 1.0, 0.1)], vec![], vec![j.clone()]);
    assert_eq!(best(&p).placements[0].expected_cost, 11.2);
    // No eviction rate, no eviction cost.
    let p = problem(vec![spot(nc24("eastus"), 1.0, 0.0)], vec![], vec![j]);
    assert_eq!(best(&p).placements[0].expected_cost, 8.0);
}

#[test]
fn spot_policy_allowed_compares_cost_and_preferred_wins_ties() {
    let regular = a100("eastus", "Standard_NC24ads_A100_v4", 1, 24, 2.0);
    let cheap_but_evicted = spot(nc24("eastus"), 1.9, 0.2);
    let mut allowed = job("allowed", 1);
    allowed.spot = SpotPolicy::Allowed;
    allowed.duration_hours = 10.0;
    // Spot: 19 + 19 × 0.2 × 10 × 0.5 = 38 > 20 regular.
    let plan = best(&problem(vec![regular.clone(), cheap_but_evicted], vec![], vec![allowed]));
    assert_eq!(plan.placements[0].priority, Priority::Regular);
    let same_price = spot(nc24("eastus"), 2.0, 0.0);
    let mut preferred = job("preferred", 1);
    preferred.spot = SpotPolicy::Preferred;
    let mut allowed = job("allowed", 1);
    allowed.spot = SpotPolicy::Allowed;
    let plan = best(&problem(vec![regular, same_price], vec![], vec![preferred, allowed]));
    let tier = |id: &str| plan.placements.iter().find(|p| p.job == id).map(|p| p.priority);
    assert_eq!(tier("preferred"), Some(Priority::Spot));
    assert_eq!(tier("allowed"), Some(Priority::Regular));
}

#[test]
fn egress_is_charged_outside_the_data_region() {
    let mut j = job("d", 1);
    j.data_region = Some("westus3".into());
    j.data_gb = Some(1000.0);
    j.duration_hours = 1.0;
    let mut p = problem(vec![nc24("eastus")], vec![], vec![j.clone()]);
    // Default rate 0.02/GB: 3.673 + 20.
    assert_eq!(best(&p).placements[0].expected_cost, 23.673);
    p.egress = vec![solver::Egress { from: "westus3".into(), to: "eastus".into(), usd_per_gb: 0.05 }];
    assert_eq!(best(&p).placements[0].expected_cost, 53.673);
    // With an offer in the data region at a slightly higher price, staying put is cheaper.
    p.offers.push(a100("westus3", "Standard_NC24ads_A100_v4", 1, 24, 4.0));
    assert_eq!(best(&p).placements[0].region, "westus3");
}

#[test]
fn a_zero_time_limit_falls_back_to_greedy() {
    // Two jobs for one VM: capacity binds, so greedy alone cannot prove its plan optimal.
    let mut offer = nc24("eastus");
    offer.capacity_vms = Some(1);
    let p = problem(vec![offer], vec![], vec![job("a", 1), job("b", 1)]);
    let plan = solve(&p, &SolveOptions { method: Method::Best, time_limit_ms: Some(0) });
    check(&p, &plan).expect("feasible");
    assert_eq!(plan.solver, "greedy (time limit)");
    assert_eq!(plan.placements.len(), 1);
}

#[test]
fn an_uncontended_problem_is_proven_optimal_without_the_lp() {
    // Room for everyone: each job where it alone is cheapest is the optimum, and says so.
    let mut one = job("one-gpu", 1);
    one.duration_hours = 2.0;
    let mut three = job("three-gpus", 3);
    three.duration_hours = 2.0;
    // The 4-GPU VM is cheaper per GPU (2.50 vs 3.60 an hour): right for three GPUs (20.00 for two
    // hours vs 21.60 on three small VMs), wrong for one (20.00 vs 7.20).
    let offers = vec![
        a100("eastus", "Standard_NC24ads_A100_v4", 1, 24, 3.6),
        a100("eastus", "Standard_NC96ads_A100_v4", 4, 96, 10.0),
    ];
    let p = problem(offers, vec![], vec![one, three]);
    let plan = solve(&p, &SolveOptions { method: Method::Best, time_limit_ms: Some(0) });
    check(&p, &plan).expect("feasible");
    assert_eq!(plan.solver, "greedy (proven optimal)");
    assert!(plan.optimal && plan.gap == 0.0, "{plan:?}");
    assert!((plan.expected_cost - (7.2 + 20.0)).abs() < 1e-6, "{plan:?}");
}

#[test]
fn a_spot_only_job_takes_spot_even_when_regular_is_cheaper_and_waits_without_it() {
    let mut j = job("ride-spot", 2);
    j.spot = SpotPolicy::Only;
    // Spot dearer than regular here (a high eviction rate): an `allowed` job would take regular.
    let with_spot = problem(vec![nc24("eastus"), spot(nc24("eastus"), 3.5, 0.5)], vec![], vec![j.clone()]);
    for plan in [best(&with_spot), greedy(&with_spot)] {
        assert_eq!(plan.placements.len(), 1, "{plan:?}");
        assert_eq!(plan.placements[0].priority, Priority::Spot);
    }
    let regular_only = problem(vec![nc24("eastus")], vec![], vec![j]);
    let plan = best(&regular_only);
    assert!(plan.placements.is_empty());
    assert_eq!(reasons(&plan, "ride-spot"), vec!["spot: only, and every matching offer is regular".to_string()]);
}
