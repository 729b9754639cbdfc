//! Property tests on random problems from `solver::generate` (small shapes, all features: gang and
//! non-gang jobs, allow/deny lists, size lists, spot policies, caps, budgets, data regions, capacity,
//! and quota from generous to nearly none): every plan is feasible, the optimiser never loses to greedy,
//! and solving is deterministic.

use proptest::prelude::*;
use solver::generate::{DiverseParams, GenParams, diverse, generate};
use solver::{Method, Plan, Problem, SolveOptions, check, solve, solve_lp_round};

fn params() -> impl Strategy<Value = GenParams> {
    (1usize..40, 1usize..4, 1usize..31, 0.02f64..1.5, any::<u64>()).prop_map(
        |(jobs, regions, sizes, quota_fraction, seed)| GenParams { jobs, regions, sizes, quota_fraction, seed },
    )
}

/// Queues that do not repeat (issue #17's distribution), small enough for HiGHS in a debug build.
fn diverse_params() -> impl Strategy<Value = DiverseParams> {
    (1usize..40, 1usize..5, any::<u64>()).prop_map(|(jobs, regions, seed)| DiverseParams { jobs, regions, seed })
}

fn greedy(p: &Problem) -> Plan {
    solve(p, &SolveOptions { method: Method::Greedy, time_limit_ms: None })
}

fn without_time(plan: &Plan) -> String {
    let mut plan = plan.clone();
    plan.solve_ms = 0.0;
    serde_json::to_string(&plan).expect("serialise")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn plans_are_feasible_and_the_optimiser_never_loses_to_greedy(params in params()) {
        let p = generate(&params);
        p.validate().expect("generated problems are valid");
        let g = greedy(&p);
        let b = solve(&p, &SolveOptions::default());
        if let Err(e) = check(&p, &g) { prop_assert!(false, "greedy plan infeasible: {e:?}"); }
        if let Err(e) = check(&p, &b) { prop_assert!(false, "best plan infeasible: {e:?}"); }
        prop_assert!(b.placed_weight >= g.placed_weight, "weight {} < greedy {}", b.placed_weight, g.placed_weight);
        if b.placed_weight == g.placed_weight {
            prop_assert!(b.expected_cost <= g.expected_cost + 1e-6, "cost {} > greedy {}", b.expected_cost, g.expected_cost);
        }
        prop_assert!((0.0..=1.0).contains(&b.gap) && (0.0..=1.0).contains(&g.gap));
        prop_assert_eq!(b.optimal, b.gap <= solver::OPTIMAL_GAP);
        // A proven optimum is at least as good as every other plan, greedy's included.
        if b.optimal && b.placed_weight == g.placed_weight {
            prop_assert!(b.expected_cost <= g.expected_cost * (1.0 + 1e-6) + 1e-6);
        }
    }

    #[test]
    fn solving_twice_gives_the_same_plan(params in params()) {
        let p = generate(&params);
        let opts = SolveOptions::default();
        prop_assert_eq!(without_time(&solve(&p, &opts)), without_time(&solve(&p, &opts)));
        prop_assert_eq!(without_time(&solve_lp_round(&p, &opts)), without_time(&solve_lp_round(&p, &opts)));
        prop_assert_eq!(without_time(&greedy(&p)), without_time(&greedy(&p)));
    }

    #[test]
    fn diverse_plans_are_feasible_deterministic_and_beat_greedy(params in diverse_params()) {
        let p = diverse(&params);
        p.validate().expect("generated problems are valid");
        let g = greedy(&p);
        let b = solve(&p, &SolveOptions::default());
        if let Err(e) = check(&p, &b) { prop_assert!(false, "best plan infeasible: {e:?}"); }
        prop_assert!(b.placed_weight >= g.placed_weight, "weight {} < greedy {}", b.placed_weight, g.placed_weight);
        prop_assert!((0.0..=1.0).contains(&b.gap));
        prop_assert_eq!(b.optimal, b.gap <= solver::OPTIMAL_GAP);
        prop_assert_eq!(without_time(&solve_lp_round(&p, &SolveOptions::default())), without_time(&solve_lp_round(&p, &SolveOptions::default())));
    }

    /// The JSON form is the contract: a problem written and read back solves to the same plan.
    #[test]
    fn problems_round_trip_through_json(params in params()) {
        let p = generate(&params);
        let back = Problem::from_json_str(&serde_json::to_string(&p).expect("serialise")).expect("parses");
        prop_assert_eq!(&back, &p);
    }
}

/// With HiGHS in the build: the default build's plan is within its reported gap of HiGHS's optimum.
#[cfg(feature = "highs")]
mod against_highs {
    use super::*;

    proptest! {
        // HiGHS is built without optimisation in debug builds: keep the cases few and small.
        #![proptest_config(ProptestConfig { cases: 16, max_shrink_iters: 64, ..ProptestConfig::default() })]

        /// The saved regression seed (20 jobs, 1 region, 21 sizes) once looked like an unsound cost
        /// bound: a plan of weight 4,453 reported gap 0.000224 while HiGHS found the same weight for
        /// less. That gap is a *weight* gap (the LP bound is 4,454: 1/4,454 = 0.000224517), sound;
        /// the check below used to miss it because `gap` was rounded to the nearest 1e-9 (now up). The seed stays as a case.
        #[test]
        fn lp_rounding_is_within_its_gap_of_the_exact_optimum(params in params().prop_map(|p| GenParams { jobs: p.jobs.min(20), ..p })) {
            let p = generate(&params);
            let exact = solve(&p, &SolveOptions::default());
            prop_assert_eq!(exact.solver.as_str(), "highs");
            if let Err(e) = check(&p, &exact) { prop_assert!(false, "highs plan infeasible: {e:?}"); }
            let lp = solve_lp_round(&p, &SolveOptions::default());
            prop_assert!(exact.placed_weight >= lp.placed_weight, "highs {} < lp {}", exact.placed_weight, lp.placed_weight);
            // Weight gap: lp ≥ (1 − gap) × bound ≥ (1 − gap) × exact.
            prop_assert!(lp.placed_weight >= (1.0 - lp.gap) * exact.placed_weight - 1e-6,
                "lp weight {} gap {} vs exact {}", lp.placed_weight, lp.gap, exact.placed_weight);
            if lp.placed_weight == exact.placed_weight {
                // Either the gap is a cost gap, and (1 − gap) × lp cost is a lower bound on the cost of
                // every max-weight plan, or it is a weight gap: the bound W / (1 − gap) is above W by at
                // least one (weights are integers) and says nothing about cost.
                let cost_gap_holds = lp.expected_cost * (1.0 - lp.gap) <= exact.expected_cost * (1.0 + 1e-6) + 1e-6;
                // A bound of at least W + 1 means gap = 1 − W / bound ≥ 1 / (W + 1).
                let weight_gap = lp.gap >= 1.0 / (lp.placed_weight + 1.0) - 1e-12;
                prop_assert!(cost_gap_holds || weight_gap,
                    "lp cost {} gap {} vs exact {}", lp.expected_cost, lp.gap, exact.expected_cost);
            }
            if exact.optimal && exact.placed_weight == lp.placed_weight {
                prop_assert!(exact.expected_cost <= lp.expected_cost * (1.0 + 1e-6) + 1e-6);
            }
        }

        /// On queues that do not repeat: every plan feasible, never below greedy, and the reported gap
        /// sound against the exact optimum (weight ≥ (1 − gap) × optimum).
        #[test]
        fn diverse_plans_are_within_their_gap_of_the_optimum(params in diverse_params()) {
            let p = diverse(&params);
            let exact = solve(&p, &SolveOptions::default());
            if let Err(e) = check(&p, &exact) { prop_assert!(false, "highs plan infeasible: {e:?}"); }
            let plan = solve_lp_round(&p, &SolveOptions::default());
            if let Err(e) = check(&p, &plan) { prop_assert!(false, "plan infeasible: {e:?}"); }
            prop_assert!(exact.placed_weight >= plan.placed_weight, "highs {} < default {}", exact.placed_weight, plan.placed_weight);
            prop_assert!(plan.placed_weight >= greedy(&p).placed_weight);
            prop_assert!(plan.placed_weight >= (1.0 - plan.gap) * exact.placed_weight - 1e-6,
                "weight {} with gap {} but the optimum is {}", plan.placed_weight, plan.gap, exact.placed_weight);
        }

        /// Issue #17's weight target on queues that do not repeat: at least 99 % of the optimal weight.
        /// (The 20-job single-region case in the regression corpus placed 8,210 of HiGHS's proven
        /// 8,738 until the branch and bound's limited-discrepancy passes found the optimum.)
        #[test]
        fn diverse_plans_place_99_percent_of_the_optimal_weight(params in diverse_params()) {
            let p = diverse(&params);
            let exact = solve(&p, &SolveOptions::default());
            let plan = solve_lp_round(&p, &SolveOptions::default());
            prop_assert!(plan.placed_weight >= 0.99 * exact.placed_weight,
                "weight {} below 99 % of the optimum {}", plan.placed_weight, exact.placed_weight);
        }

        /// Issue #17's cost target: at the optimal weight at most 1 % more cost than the optimum. NOT
        /// MET on every problem yet (BENCHMARKS.md, "Queues that do not repeat"): with CI's seed it
        /// finds a 32-job case (2 regions, seed 16,090,311,556,169,549,233) at $20,358 against the
        /// optimum's $19,662 (+3.5 %; `optimum.rs::open_counterexample_reaches_the_optimum`), so it
        /// is ignored in CI; run it with `--ignored` to see where the default build stands. (The
        /// 30-, 35-, 36- and 40-job cases it used to fail on are in `optimum.rs`.)
        #[test]
        #[ignore = "issue #17's cost target is not met yet"]
        fn diverse_plans_at_the_optimal_weight_cost_at_most_one_percent_more(params in diverse_params()) {
            let p = diverse(&params);
            let exact = solve(&p, &SolveOptions::default());
            let plan = solve_lp_round(&p, &SolveOptions::default());
            if exact.optimal && plan.placed_weight == exact.placed_weight {
                prop_assert!(plan.expected_cost <= 1.01 * exact.expected_cost + 1e-6,
                    "cost {} above the optimum {} + 1 %", plan.expected_cost, exact.expected_cost);
            }
        }
    }
}
