//! The default build against optima HiGHS proved (`--features highs`, recorded here so that the
//! check runs without it): problems from `solver::generate::diverse` where the heuristics alone fell
//! short, each of which once failed issue #17's targets (99 % of the optimal weight; at the optimal
//! weight, at most 1 % more cost); and problems from the older `solver::generate`, where about a
//! fifth of the jobs are non-gang (split over offers in whole VMs).

use solver::generate::{DiverseParams, GenParams, diverse, generate};
use solver::{Plan, Problem, SolveOptions, check, solve_lp_round};

/// (jobs, regions, seed), HiGHS's proven optimal weight and its cost at that weight.
const CASES: &[(usize, usize, u64, f64, f64)] = &[
    // One region, one spot pool of 433 vCPUs: the optimum frees it for a 16-GPU A100 job by moving
    // seven others between spot and regular VMs (the local search stopped at 8,210: 94 %).
    (20, 1, 15_630_718_321_121_247_638, 8_738.0, 9_690.80),
    // Seven jobs move across two regions for the optimal cost (+24 % before the neighbourhood search).
    (22, 2, 7_696_311_165_983_138_323, 9_497.0, 21_253.51),
    // +59 % cost before the neighbourhood search.
    (40, 1, 17_026_080_507_310_378_593, 17_177.0, 17_971.89),
    // +33 % cost until the exact search's weight bound counted only the jobs that still fit (before,
    // its cost bound never acted in a neighbourhood and the branch and bound found nothing cheaper).
    (30, 2, 10_372_713_005_361_028_285, 10_193.0, 10_691.68),
    // +1.4 % until the limited-discrepancy passes took the choices in order of their cost with the
    // resources priced.
    (35, 4, 7_924_047_624_999_685_062, 20_908.0, 13_880.05),
    // +3.3 % until neighbourhoods of up to 24 jobs (found by the cost property test, shrunk).
    (36, 2, 194_117_124_323_343_346, 18_191.0, 31_570.02),
    // 2.8 times the optimum's cost (78,587) until the plans were recosted by the cost LP's dive
    // (`recost`): the cheaper plan moves ten jobs at once across two regions to free a spot pool
    // for a 64-GPU job.
    (36, 2, 221_910_058_539_608_769, 22_572.0, 28_469.46),
    // +37.5 % until the plans were recosted (found by sampling 60 cases of 20-40 jobs).
    (40, 1, 9_076_150_410_069_504_830, 11_021.0, 8_592.48),
];

#[test]
fn plans_reach_the_proven_optimum_weight_and_cost_within_one_percent() {
    for &(jobs, regions, seed, weight, cost) in CASES {
        let p = diverse(&DiverseParams { jobs, regions, seed });
        reaches_the_optimum(&p, &format!("{jobs}:{regions}:{seed}"), weight, cost);
    }
}

/// A case where the LP's bound is the optimum but HiGHS's plan moves almost every job (into a third
/// region's spot and regular V100 and T4 VMs) to fit one more: found by the weight property test
/// under a random proptest seed (CI fixes the seed). No local search makes a move that large and the
/// combinatorial branch and bound does not finish on it; the heuristics stopped at 23,878 of 24,348
/// (98.1 %). The MILP (microlp) proves the optimum in about 900 nodes.
#[test]
fn a_36_job_optimum_that_moves_every_job_is_reached() {
    let p = diverse(&DiverseParams { jobs: 36, regions: 3, seed: 5_363_701_810_204_640_342 });
    reaches_the_optimum(&p, "36:3", 24_348.0, 60_793.19);
}

/// The cost property test's case (`diverse`, 36 jobs, 2 regions): HiGHS's proven optimum places
/// 30,232 at $22,315.99; the searches placed that weight at $23,247 (+4.2 %, 21 of the 36 jobs
/// elsewhere), and the MILP's cost phase stopped with a bound of 21,955 short of a better plan. Its
/// phase over the plan's own jobs (each kept placed: a much tighter model) reaches the optimum.
#[test]
fn the_cheapest_form_of_a_plan_that_moves_most_jobs_is_found() {
    let p = diverse(&DiverseParams { jobs: 36, regions: 2, seed: 221_910_058_952_948_463 });
    reaches_the_optimum(&p, "36:2", 30_232.0, 22_315.99);
}

/// Issue #17's open counterexample: HiGHS's proven optimum, which the default build does not reach
/// (`cargo test -p solver --test optimum -- --ignored` shows where it stands). The cost property
/// test's case with CI's seed (`diverse`, 32 jobs, 2 regions): the optimal weight at $20,358, +3.5 %
/// (17 of the 32 jobs elsewhere in the optimum); neither MILP cost phase finds a cheaper plan in
/// its budget (bounds 19,285 and, over the plan's own jobs, 19,468).
#[test]
#[ignore = "issue #17's cost target is not met on it yet"]
fn open_counterexample_reaches_the_optimum() {
    let p = diverse(&DiverseParams { jobs: 32, regions: 2, seed: 16_090_311_556_169_549_233 });
    reaches_the_optimum(&p, "32:2", 10_934.0, 19_662.21);
}

/// Issue #17's open cost misses among the independent generator's problems (`python3
/// solver/benches/independent_problems.py DIR --sizes 100 --seed 3` and `--sizes 1000 --seed 1`),
/// with HiGHS's proven optimum (10 s and 30 s): tiny-100-3 +1.4 % (+4.9 % before the slots of
/// session 51, +2.9 % before session 52's cheaper trades; 33 of 100 1-GPU jobs elsewhere in the
/// optimum; it trades spot quota between jobs that save $4 on it and jobs that save $40),
/// tiny-1000-1 +4.8 % (+8.1 % before; the optimum
/// leaves two priority-3 jobs on V100 VMs waiting and runs three priority-2 jobs on T4 VMs in
/// their room, across two regions, which the slots' trades (one slot released, or two, the second
/// among the four dearest per weight) do not reach). BENCHMARKS.md, "Bounds on whole jobs (session
/// 50)", "Slots re-filled by min-cost flow (session 51)" and "Split jobs as slots, cheaper trades
/// (session 52)", says what was tried.
#[test]
#[ignore = "issue #17's cost target is not met on them yet"]
fn open_cost_misses_reach_the_optimum() {
    let cases = [
        ("tiny-100-3", include_str!("data/tiny-100-3.json"), 199.0, 4_463.97),
        ("tiny-1000-1", include_str!("data/tiny-1000-1.json"), 675.0, 2_504.93),
    ];
    for (case, json, weight, cost) in cases {
        let p = Problem::from_json_str(json).expect("a valid problem");
        reaches_the_optimum(&p, case, weight, cost);
    }
}

/// Solves `p` and checks the plan: feasible, the optimum's weight, at most 1 % above its cost.
fn reaches_the_optimum(p: &Problem, case: &str, weight: f64, cost: f64) {
    let plan = solve_lp_round(p, &SolveOptions::default());
    check(p, &plan).expect("feasible");
    assert!(plan.placed_weight >= weight, "{case}: weight {} below the optimum {weight}", plan.placed_weight);
    assert!(plan.expected_cost <= 1.01 * cost, "{case}: cost {} above the optimum {cost} + 1 %", plan.expected_cost);
}

/// (jobs, regions, sizes, quota fraction, seed) of `solver::generate` (slots 1, 2, 9 and 35 of
/// `cargo bench -p solver --features highs --bench diverse -- --sweep 48 --family generate`), HiGHS's
/// proven optimal weight and its cost at that weight. Each failed before the exact search and the
/// neighbourhoods took non-gang jobs: +7.2 %, +7.8 % and +10.7 % cost, 98.4 % of the weight.
const MIXED_CASES: &[(usize, usize, usize, f64, u64, f64, f64)] = &[
    (20, 1, 11, 0.5, 11_400_714_819_323_198_485, 1_022.0, 4_489.49),
    (25, 1, 18, 0.7, 4_354_685_564_936_845_354, 4_947.0, 2_093.12),
    (30, 2, 13, 1.1, 10_372_713_005_361_028_285, 7_418.0, 2_851.11),
    (40, 2, 6, 0.3, 11_643_393_128_411_363_039, 610.0, 1_338.22),
];

#[test]
fn plans_with_split_jobs_reach_the_proven_optimum_weight_and_cost_within_one_percent() {
    for &(jobs, regions, sizes, quota_fraction, seed, weight, cost) in MIXED_CASES {
        let p = generate(&GenParams { jobs, regions, sizes, quota_fraction, seed });
        assert!(p.jobs.iter().any(|j| !j.gang), "{jobs}:{seed}: the case has split jobs");
        reaches_the_optimum(&p, &format!("{jobs}:{seed}"), weight, cost);
    }
}

/// A 60-job problem of the independent generator's `split` shape (`python3
/// solver/benches/independent_problems.py DIR --sizes 60 --shapes split`: a third of the jobs
/// non-gang, of any priority), where heavier gang jobs need the room split jobs hold. HiGHS's best
/// in 20 s places 33,828 (not proven); the plan placed 33,262 (98.3 %) while the local search could
/// not take split jobs' VMs out for a gang job, nor place a split job by taking lighter jobs out.
#[test]
fn split_jobs_give_their_room_to_heavier_jobs_and_take_it_from_lighter_ones() {
    let p = Problem::from_json_str(include_str!("data/split-60-1.json")).expect("a valid problem");
    places_99_percent_of(&p, "split-60-1", 33_828.0);
}

/// A 40-job problem of the independent generator's `issue` shape (`python3
/// solver/benches/independent_problems.py DIR --sizes 40 --seed 2`), where HiGHS proves 22,413 at
/// $31,850.53. The local searches placed that weight at $44,033 (+38 %): the cheap plan moves a
/// 32-GPU gang from one region's A100 spot VMs to another's A10 spot VMs, after most of the jobs
/// holding that region's spot quota move elsewhere, more at once than any neighbourhood holds. The
/// cost LP's dive over the placed jobs (`recost`) finds it.
#[test]
fn a_plan_whose_cheapest_form_moves_most_jobs_at_once_is_recosted() {
    let p = Problem::from_json_str(include_str!("data/issue-40-2.json")).expect("a valid problem");
    reaches_the_optimum(&p, "issue-40-2", 22_413.0, 31_850.53);
}

/// The independent generator's one-pool shape at 60 jobs (`python3
/// solver/benches/independent_problems.py DIR --sizes 60 --seed 1`): the plan was already HiGHS's
/// proven optimum (14,727 at $11,550.55), but the bounds stood 25 above its weight and the branch
/// and bound ran on 40 jobs at most, so the plan said `optimal: false`. With its weight capped at
/// the knapsack bound the branch and bound proves it in well under a second.
#[test]
fn a_60_job_optimum_is_proven() {
    proves_optima(&[("one-pool-60-1", include_str!("data/one-pool-60-1.json"), 14_727.0, 11_550.55)]);
}

/// The independent generator's tight-caps shape at 60 jobs (seeds 1 and 2) and budgets shape at
/// 100 (seed 2; `python3 solver/benches/independent_problems.py DIR --sizes 60,100 --seed S`): the
/// searches' plans were the optima (HiGHS proved tight-caps-60-1's in 0.3 s), but their bounds
/// stood 3 and 23 units of weight above, so the plans said `optimal: false`. The MILP on a smaller
/// budget above 50 jobs proves them, each in under 0.2 s. tight-caps-60-2 needs the cost phase's
/// whole budget (a quarter left its cost gap at 0.023; HiGHS does not prove it in 10 s).
#[test]
fn optima_of_60_and_100_jobs_are_proven_by_the_milp() {
    proves_optima(&[
        ("tight-caps-60-1", include_str!("data/tight-caps-60-1.json"), 14_214.0, 7_242.62),
        ("tight-caps-60-2", include_str!("data/tight-caps-60-2.json"), 11_622.0, 15_218.70),
        ("budgets-100-2", include_str!("data/budgets-100-2.json"), 27_852.0, 107_256.05),
    ]);
}

/// The independent generator's all-spot and tiny shapes at 40 jobs (`python3
/// solver/benches/independent_problems.py DIR --sizes 40 --seed 1`): the plans were HiGHS's proven
/// optima, but microlp's branch and bound stopped 5 units of weight above all-spot's (22,506 against
/// 22,501) and 1.7 % below tiny's cost, so the plans said `optimal: false`. Reduced-cost fixing and
/// cover cuts at the root (`reduced_cost`, `cover_cuts`) prove both.
#[test]
fn forty_job_optima_that_need_root_cuts_are_proven() {
    proves_optima(&[
        ("all-spot-40-1", include_str!("data/all-spot-40-1.json"), 22_501.0, 25_812.53),
        ("tiny-40-1", include_str!("data/tiny-40-1.json"), 76.0, 1_222.43),
    ]);
}

/// The independent generator's tiny shape at 60 jobs (`python3 solver/benches/independent_problems.py
/// DIR --sizes 60 --seed 11`: one-GPU jobs of weight 1-3): the plan is HiGHS's proven optimum
/// (114 at $1,978.16, in 4.3 s), and its gap is the MILP's cost bound. With the cost phase's weight
/// row at the plan's weight rather than half a unit below it, the relaxation can no longer leave
/// half a unit of weight out where it costs most: the gap 0.0895 -> 0.0334.
#[test]
fn the_milp_cost_bound_holds_the_plan_to_its_whole_weight() {
    let plan = places_the_optimum("tiny-60-11", include_str!("data/tiny-60-11.json"), 114.0, 1_978.16);
    assert!(plan.gap <= 0.05, "gap {}", plan.gap);
}

/// Each case (name, problem, weight, cost): the plan is valid, places the optimum's weight at its
/// cost, and says it is optimal.
fn proves_optima(cases: &[(&str, &str, f64, f64)]) {
    for &(file, text, weight, cost) in cases {
        let plan = places_the_optimum(file, text, weight, cost);
        assert!(plan.optimal, "{file}: not proven, gap {}", plan.gap);
    }
}

/// The plan of `text` (the problem `file`), checked valid and at the optimum's weight and cost.
fn places_the_optimum(file: &str, text: &str, weight: f64, cost: f64) -> Plan {
    let p = Problem::from_json_str(text).expect("a valid problem");
    let plan = solve_lp_round(&p, &SolveOptions::default());
    assert!(check(&p, &plan).is_ok(), "{file}");
    assert_eq!(plan.placed_weight, weight, "{file}");
    assert!((plan.expected_cost - cost).abs() < 0.01, "{file}: cost {}", plan.expected_cost);
    plan
}

/// The independent generator's split shape at 60 jobs (`python3
/// solver/benches/independent_problems.py DIR --sizes 60 --seed 3`): HiGHS's best in 10 s places
/// 32,877 (not proven). Every search from the LP's rounding (kicks, neighbourhoods, the MILP on
/// its budget, the LP-led moves, the slots) stopped at 32,381 (98.5 %). Searched from the plans
/// LP dives end at (`dive`), the plan reaches 32,814 (99.8 %).
#[test]
fn a_plan_the_searches_miss_is_reached_from_the_lp_dives() {
    let p = Problem::from_json_str(include_str!("data/split-60-3.json")).expect("a valid problem");
    let plan = solve_lp_round(&p, &SolveOptions::default());
    check(&p, &plan).expect("feasible");
    assert!(plan.placed_weight >= 0.99 * 32_877.0, "weight {} below 99 % of 32,877", plan.placed_weight);
}

/// The independent generator's split shape at 100 jobs (`python3
/// solver/benches/independent_problems.py DIR --sizes 100 --seed 2`): HiGHS's best in 20 s places
/// 47,864 (not proven; a 32-GPU job of priority 21 on four spot VMs, three light jobs out and 44
/// moved). Every start before stopped at 47,315 (98.85 %): the LP's rounding and both plain dives.
/// Dives that first place a job the plan leaves waiting (`dive::Forced`) start the searches
/// elsewhere; from the fifth of them (the one placing j00035) they reach 47,480 (99.2 %).
#[test]
fn a_plan_the_searches_miss_is_reached_from_a_dive_that_places_a_waiting_job() {
    let p = Problem::from_json_str(include_str!("data/split-100-2.json")).expect("a valid problem");
    places_99_percent_of(&p, "split-100-2", 47_864.0);
}

/// The independent generator's egress shape at 60 jobs (`--sizes 60 --seed 8`, a seed held out of
/// all tuning). HiGHS proves 39,291 optimal in 10 s by placing a 16-GPU job of priority 67 on four
/// H100 spot VMs in westus2, ten lighter jobs out and 25 moved. The first start's searches stop at
/// 38,717 (98.5 %), and so do the dives; a forced start reaches 38,723, and only the neighbourhood
/// search, run again on that heavier plan (`polish`), takes it to 39,149 (99.6 %).
#[test]
fn a_heavier_plan_from_a_later_start_is_searched_as_the_first_was() {
    let p = Problem::from_json_str(include_str!("data/egress-60-8.json")).expect("a valid problem");
    places_99_percent_of(&p, "egress-60-8", 39_291.0);
}

/// The independent generator's min-gpus shape at 60 jobs (`--sizes 60 --seed 8`, held out of all
/// tuning): HiGHS's best in 10 s (not proven) places 41,820 at $29,051.50 by moving 14 jobs across
/// four regions (three from spot to regular in eastus, so that a 4-GPU job takes that region's
/// spot room). The searches stopped at its weight but 1.4 % dearer; the neighbourhood search from
/// that plan again, with its neighbourhoods drawn otherwise (`more_neighbourhoods`), comes within
/// 0.04 %.
#[test]
fn another_draw_of_neighbourhoods_finds_a_rotation_across_four_regions() {
    let p = Problem::from_json_str(include_str!("data/min-gpus-60-8.json")).expect("a valid problem");
    reaches_the_optimum(&p, "min-gpus-60-8", 41_820.0, 29_051.50);
}

/// The independent generator's split shape at 60 jobs (`--sizes 60 --seed 8`, held out of all
/// tuning): HiGHS's best in 11 s (not proven) places 22,028 at $13,181.63. The searches reached
/// that weight at $14,277.23 (+8.3 %): an 8-GPU gang on an H100 VM cost $1,368 where two 4-GPU A10
/// VMs cost $284, and the room for them is held by jobs whose own room is held by others, 16 jobs
/// moving across all four regions. The dearest jobs forced onto cheaper candidates, the jobs in
/// their way re-placed (`force_in::force_cheaper`), come within 0.8 %.
#[test]
fn a_dear_job_forced_onto_a_cheaper_candidate_reaches_1_percent() {
    let p = Problem::from_json_str(include_str!("data/split-60-8.json")).expect("a valid problem");
    reaches_the_optimum(&p, "split-60-8", 22_028.0, 13_181.63);
}

/// The independent generator's tiny shape at 100 jobs, held out of all tuning until session 60
/// (`--sizes 100 --seed 8`): HiGHS's proven optimum places 193 at $3,336.43. The searches and
/// three dear jobs forced onto cheaper candidates stopped at $3,372.61 (+1.08 %). Forcing five
/// (`force_in::DEAR_JOBS`) reaches it: the fourth dearest job forced onto an A10 spot VM, the jobs
/// in its way re-placed, starts the searches elsewhere, and the plan they end at moves jobs across
/// regions and between regular and spot VMs (the forced job itself back where it was).
#[test]
fn five_dear_jobs_forced_onto_cheaper_candidates_reach_a_proven_optimum() {
    let p = Problem::from_json_str(include_str!("data/tiny-100-8.json")).expect("a valid problem");
    reaches_the_optimum(&p, "tiny-100-8", 193.0, 3_336.43);
}

/// The independent generator's tiny shape at 100 jobs (`python3
/// solver/benches/independent_problems.py DIR --sizes 100 --seed 1`): a hundred 1-GPU jobs of
/// priority 1-3 over regions whose `cores` hold 59-202 vCPUs. HiGHS's proven optimum places one
/// more job of priority 2 (185) on a 40-vCPU H100 VM by moving 28 others between regions and
/// between regular and spot VMs; the searches stopped at 183 (98.9 %): the room that VM needs is
/// held by more weight than the job's, so no ejection pays, and no single job can move out of it.
/// Kicks whose search moves jobs in chains to make room (`search::Packing::make_room`) reach it.
#[test]
fn room_made_by_chains_of_moves_reaches_a_100_job_optimum() {
    let p = Problem::from_json_str(include_str!("data/tiny-100-1.json")).expect("a valid problem");
    reaches_the_optimum(&p, "tiny-100-1", 185.0, 4_594.38);
}

/// The independent generator's min-gpus shape at 100 jobs (`--sizes 100 --seed 1`, as above): HiGHS
/// finds 52,428 in 20 s (gap 0.0001), placing a 32-GPU job of priority 75 in westus3 (the A10
/// family there holds one such job) by moving a heavier one, which holds that room, to westus2's
/// spot VMs and dropping 1,636 of lighter weight there. The searches stopped at 51,664 (98.5 %):
/// no ejection takes out the heavier job, and moving it needs the lighter ones out first.
/// Room-making's kicks relocate it after ejecting them (`search::Packing::relocate_ejecting`),
/// their ejections counting a job that can move away as not lost (both are needed here).
#[test]
fn a_heavier_job_relocated_where_lighter_ones_make_way_reaches_99_percent() {
    let p = Problem::from_json_str(include_str!("data/min-gpus-100-1.json")).expect("a valid problem");
    places_99_percent_of(&p, "min-gpus-100-1", 52_428.0);
}

/// The independent generator's huge-gangs shape at 40 jobs (`--sizes 40 --seed 2`): HiGHS's proven
/// optimum places 53,339 at $63,250.40; the plan reached that weight at $64,131.77 (+1.4 %), the
/// only one of the 44 independent 40-job problems above + 1 %. One job cost far more than on its
/// cheapest candidate, and the neighbourhoods seeded at random reached the size its chain needs
/// too late to start from it; neighbourhoods grown from the dearest job at the end
/// (`neighbourhood::dearest`) reach the optimum.
#[test]
fn neighbourhoods_of_the_dearest_job_reach_a_40_job_optimum() {
    let p = Problem::from_json_str(include_str!("data/huge-gangs-40-2.json")).expect("a valid problem");
    reaches_the_optimum(&p, "huge-gangs-40-2", 53_339.0, 63_250.40);
}

/// The independent generator's all-spot shape at 60 jobs (`--sizes 60 --seed 3`): HiGHS proves
/// $19,512.92 at 26,337. The searches stopped at $21,194 (+8.6 %): the cheapest plan moves some 20 jobs
/// at once across regions and between spot and regular VMs. The cost LP over the plan's jobs puts
/// them all where they go (`recost::follow_lp`), and the weight search places the few that no
/// longer fit.
#[test]
fn the_cost_lp_names_the_jobs_a_60_job_optimum_moves() {
    let p = Problem::from_json_str(include_str!("data/all-spot-60-3.json")).expect("a valid problem");
    reaches_the_optimum(&p, "all-spot-60-3", 26_337.0, 19_512.92);
}

/// The independent generator's min-gpus shape at 1,000 jobs (`python3
/// solver/benches/independent_problems.py DIR --sizes 1000 --seed 1`): after the usual 20 local
/// kicks the plan stood 2.1 % below the bound the solver proves (137,151 against 140,122), where
/// issue #17 asks for 2 % at most. Kicks go on while a plan is that far from its bound.
#[test]
fn a_1000_job_plan_far_from_its_bound_is_searched_further() {
    within_2_percent_of_its_bound(include_str!("data/min-gpus-1000-1.json"));
}

/// The independent generator's tight-caps shape at 1,000 jobs (`python3
/// solver/benches/independent_problems.py DIR --sizes 1000 --seed 1`): the weight and cost
/// searches left the plan 2.04 % below the bound the solver proves (108,760 against 111,024; HiGHS
/// reached 109,356 in 30 s), where issue #17 asks for 2 % at most. Such a plan gets the waiting
/// jobs most worth placing forced in, and more kicks, after the cost search.
#[test]
fn a_1000_job_plan_far_from_its_bound_after_the_cost_search_is_searched_further() {
    within_2_percent_of_its_bound(include_str!("data/tight-caps-1000-1.json"));
}

/// Issue #17's target at 1,000 jobs: a feasible plan within 2 % of the bound the solver proves.
fn within_2_percent_of_its_bound(json: &str) {
    let p = Problem::from_json_str(json).expect("a valid problem");
    let plan = solve_lp_round(&p, &SolveOptions::default());
    check(&p, &plan).expect("feasible");
    assert!(plan.gap <= 0.02, "weight {} at gap {} from its own bound", plan.placed_weight, plan.gap);
}

/// One pool, one offer, 2,000 jobs of one priority: the most weight is as many GPUs as the pool has
/// room for, and the cheapest plan of that weight is a subset-sum over the jobs' GPUs, which the
/// test solves itself by dynamic programming. The search's moves change a job or two at a time, and
/// from the plan the weight search leaves (heavy long jobs in, lighter short ones waiting) no move
/// of one or two jobs pays; the independent generator's one-pool shape at 10,000 jobs was left 64 %
/// above this optimum until every offer's jobs were chosen again by a knapsack
/// (`search::Packing::repack`). And the plan is proven optimal (`cost_bound::knapsack`).
#[test]
fn one_pool_of_many_jobs_reaches_the_cheapest_plan_of_the_most_weight() {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let vcpus = 4 * 211;
    let mut jobs = Vec::new();
    for i in 0..2_000 {
        let gpus = [1, 2, 4, 8, 16, 32, 64][(next() % 7) as usize];
        let hours = 0.5 + (next() % 950) as f64 / 20.0;
        // A few jobs of the top priority (the ones the pool is for), the rest below it.
        let priority = if i % 20 == 0 { 100 } else { 1 + next() % 99 };
        jobs.push(format!(
            r#"{{"id": "j{i}", "gpus": {gpus}, "gpu_models": ["T4"], "gang": true, "priority": {priority}, "duration_hours": {hours}}}"#
        ));
    }
    let p = Problem::from_json_str(&format!(
        r#"{{"offers": [{{"region": "eastus", "size": "Standard_NC4as_T4_v3", "priority": "regular",
             "gpu_model": "T4", "gpus_per_vm": 1, "vcpus_per_vm": 4, "family": "standardNCASv3_T4Family",
             "price_per_hour": 0.526}}],
           "quotas": [{{"region": "eastus", "pool": "cores", "vcpus": {vcpus}}}],
           "jobs": [{}]}}"#,
        jobs.join(",")
    ))
    .expect("a valid problem");
    // The optimum: the top-priority jobs' GPUs filling the pool exactly, at the least cost.
    let room = vcpus / 4;
    let mut cheapest = vec![f64::INFINITY; room + 1];
    cheapest[0] = 0.0;
    for job in p.jobs.iter().filter(|j| j.priority == 100) {
        let (g, cost) = (job.gpus as usize, f64::from(job.gpus) * 0.526 * job.duration_hours);
        for k in (g..=room).rev() {
            cheapest[k] = cheapest[k].min(cheapest[k - g] + cost);
        }
    }
    assert!(cheapest[room].is_finite(), "the top-priority jobs can fill the pool");
    let plan = solve_lp_round(&p, &SolveOptions::default());
    check(&p, &plan).expect("feasible");
    assert_eq!(plan.placed_weight, 100.0 * room as f64, "the pool filled by the top priority");
    assert!(
        plan.expected_cost <= cheapest[room] * 1.01,
        "cost {} against the optimum {:.2}",
        plan.expected_cost,
        cheapest[room]
    );
    // The plan says it is optimal: the knapsack bound on the cost at the most weight proves it,
    // where the LP's bound (fractions of cheap jobs filling the pool) left a gap of 1.5 %.
    assert!(plan.optimal, "cost {} proven only within {}", plan.expected_cost, plan.gap);
}

/// The independent generator's all-spot shape at 300 jobs (`python3
/// solver/benches/independent_problems.py DIR --sizes 300 --seed 2`): HiGHS places 99,500 in 10 s
/// (not proven: the optimum is at least that). The searches stopped at 98,340 (98.8 %); on 101-400
/// jobs, where no neighbourhood search follows, local kicks from the heaviest packing the weight
/// search found, and that plan's own cost search, reach 99,237.
#[test]
fn a_300_job_plan_searched_further_reaches_99_percent() {
    let p = Problem::from_json_str(include_str!("data/all-spot-300-2.json")).expect("a valid problem");
    places_99_percent_of(&p, "all-spot-300-2", 99_500.0);
}

/// Solves `p` and checks that the plan is feasible and places at least 99 % of `highs`, the weight
/// HiGHS's plan places (its proven optimum, or its best when its time limit stopped it: the optimum
/// is at least that).
fn places_99_percent_of(p: &Problem, case: &str, highs: f64) {
    let plan = solve_lp_round(p, &SolveOptions::default());
    check(p, &plan).expect("feasible");
    assert!(plan.placed_weight >= 0.99 * highs, "{case}: weight {} below 99 % of HiGHS's {highs}", plan.placed_weight);
}

/// The independent generator's issue shape at 100 jobs (`--sizes 100 --seed 2`): HiGHS places 39,608
/// in 10 s (not proven). The searches stopped at 39,174 (98.9 %), and following the cost LP over the
/// plan's jobs once (`recost::follow_lp`) changed it without gaining weight; the LP over the jobs
/// the changed plan places, followed once more, reaches 39,412.
#[test]
fn the_cost_lp_followed_twice_reaches_99_percent_at_100_jobs() {
    let p = Problem::from_json_str(include_str!("data/issue-100-2.json")).expect("a valid problem");
    places_99_percent_of(&p, "issue-100-2", 39_608.0);
}

/// The independent generator's deny-sizes shape at 60 jobs (`--sizes 60 --seed 3`): HiGHS proves
/// 40,311 at $147,648.28. Every search stopped at 40,154 (99.6 %); the plan's jobs moved once more
/// where the cost LP over them puts them, split jobs too, with the jobs that leaves short given room
/// by exact re-solves of those holding what each lacks (`recost::follow_lp_whole`), reach the
/// optimum's weight and cost.
#[test]
fn the_cost_lp_followed_for_split_jobs_too_reaches_a_60_job_optimum() {
    let p = Problem::from_json_str(include_str!("data/deny-sizes-60-3.json")).expect("a valid problem");
    reaches_the_optimum(&p, "deny-sizes-60-3", 40_311.0, 147_648.28);
}
