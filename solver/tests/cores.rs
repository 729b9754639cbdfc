//! A plan does not depend on the cores it was solved on: a solve runs its independent searches
//! side by side (`solver::parallel::cores`), and takes their plans in a fixed order, so one core
//! and many give byte-identical plans (apart from `solve_ms`), as the plan's doc promises.

use solver::parallel::par_map;
use solver::{Plan, Problem, SolveOptions, solve_lp_round};

/// The plan with its only varying field cleared.
fn without_time(mut plan: Plan) -> Plan {
    plan.solve_ms = 0.0;
    plan
}

/// An independent 60-job problem that no step proves, so that every search a solve runs side by
/// side runs (the starts, the dives, the waiting jobs forced in, the draws of neighbourhoods). On
/// all cores, and inside a worker of `par_map`, where a solve keeps to its own thread. Draws of
/// neighbourhoods taken side by side from one plan, without running again those after a draw that
/// changed it, give another plan here (on min-gpus-60-8 the same one).
#[test]
fn the_plan_is_the_same_on_one_core_as_on_all() {
    let p = Problem::from_json_str(include_str!("data/egress-60-8.json")).expect("a valid problem");
    let all = without_time(solve_lp_round(&p, &SolveOptions::default()));
    assert!(!all.optimal, "the case must leave every search to run");
    // Two items, so that the map spawns workers (one item runs on the caller's thread).
    let one = par_map(&[(), ()], 2, |()| {
        assert_eq!(solver::parallel::cores(), 1, "a worker's solve keeps to its own thread");
        without_time(solve_lp_round(&p, &SolveOptions::default()))
    });
    for plan in one {
        assert_eq!(plan, all, "the plan on one core differs from the plan on all");
    }
}

/// A 1,000-job problem (the independent generator's tight-caps shape, seed 1): a job class each, so
/// the instance's candidates are found on every core, and hundreds of jobs left waiting, so their
/// explanations are too; the plan, reasons and all, is the one a single core gives.
#[test]
fn a_large_plan_and_its_reasons_are_the_same_on_one_core_as_on_all() {
    let p = Problem::from_json_str(include_str!("data/tight-caps-1000-1.json")).expect("a valid problem");
    let all = without_time(solve_lp_round(&p, &SolveOptions::default()));
    assert!(all.unplaced.len() >= 200, "the case must leave enough jobs waiting to explain them on all cores");
    let one = par_map(&[(), ()], 2, |()| without_time(solve_lp_round(&p, &SolveOptions::default())));
    for plan in one {
        assert_eq!(plan, all, "the plan on one core differs from the plan on all");
    }
}
