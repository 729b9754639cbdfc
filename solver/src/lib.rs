//! Placement optimisation for spillway: pure functions, no I/O, no async.
//!
//! Given pending jobs, the offers of the cloud (region × size × priority, with prices, capacity and
//! spot eviction rates) and the free quota, [`solve`] decides where each job runs. The objective is
//! lexicographic: first the placed weight Σ priority × placed GPUs, then the expected cost (run cost,
//! expected spot eviction cost, see [`EVICTION_OVERHEAD_HOURS`], and egress). Every job left waiting
//! gets the reasons that bind.
//!
//! Methods ([`Method`]):
//! - `Best` in the default build: a greedy plan first; when it meets the capacity-blind bound (each
//!   job where it alone is cheapest) it is optimal as it stands, and when it places every placeable
//!   job only the cost LP runs (column generation from that plan's candidates). Otherwise, when
//!   shared quota and capacity bind: the LP relaxation over job classes (identical jobs grouped,
//!   dominated offers pruned) where it is small, with clarabel, rounded and repaired; the Lagrangian
//!   bound (`lagrange`: the pool and capacity rows priced, each class choosing alone, no LP), whose
//!   multipliers drive the Lagrangian heuristic (and, where most GPUs are in split jobs and the LP
//!   is not solved, whose classes' choices averaged over further steps and rounded stand in for
//!   the LP's rounding as another start), and which the knapsack bound (`knapsack_bound`: the pools
//!   enforced on whole jobs at the same multipliers) tightens; and local search on the best plans (`search`: insert,
//!   eject lighter jobs, relocate, drop one for many, then cost moves). On up to 50 jobs the exact
//!   MILP through microlp (pure Rust; `milp_microlp`) from the best plan, within a node budget
//!   (on up to 100, where the model is small, a quarter of it for the weight, all for the cost),
//!   each phase after a root loop of reduced-cost fixing (`reduced_cost`) and cover cuts
//!   (`cover_cuts`), which proves many of them (the weight, then the cost: 24 of 44 independent
//!   40-job problems). On up to 40 jobs (100 with
//!   its weight capped at the best bound: where that is the plan's weight only cost is left),
//!   branch and bound from the best plan (`exact`; a non-gang job split over candidates in whole VMs) proves the optimum
//!   (`optimal: true`) when it finishes within its node budget; on up to 100 jobs the
//!   same search re-solves neighbourhoods of related jobs when it has not proven the plan
//!   (`neighbourhood`), on up to 40 also from the plan that LP diving on the cost LP over the
//!   plan's placed jobs finds (`recost`: the cheapest way of placing the same work can move most of
//!   it at once), and on up to 100 the jobs that LP puts whole elsewhere moved there
//!   (`recost::follow_lp`, twice when the first moves the plan), then the jobs the plan places
//!   most unlike the LP over the whole problem re-solved together
//!   (`neighbourhood::follow_relaxation`); on 101-400 jobs, where no
//!   neighbourhood search runs, the weight search ends with local kicks from its heaviest packing
//!   instead; last, on up to 400 jobs, each job placed far above its cheapest candidate
//!   moved to a cheaper one after a chain of moves makes room. Then, on every size, the plan's gang
//!   placements (and split jobs' placed whole) are re-filled as slots (`slots`: which job sits in
//!   which of the plan's (offer, VMs)
//!   slots is a min-cost flow, solved exactly by cancelling negative cycles, so that a chain of any
//!   length moves at once; then slots changed one at a time along shortest paths, and trades that
//!   release one or two slots for jobs that fit their room). Last, on up to 400 jobs not proven,
//!   more starts: LP dives on the exact model (`dive`: the weight LP through microlp, its
//!   fractional variables fixed one at a time, each fix re-solved by dual simplex; two dives on up
//!   to 100 jobs, one above; on up to 100 also up to six that first place a heavy waiting job,
//!   where the LP with it placed is above the plan: `dive::Forced`) end at plans that the same
//!   searches improve, kept when better; a plan they make heavier gets the dear jobs' room and
//!   the slots' re-fill again. After them, on up to 100 jobs, heavy waiting jobs forced in, the
//!   jobs in their way re-placed together, more starts for the same searches (`force_in`); a plan
//!   these starts made heavier than the first start's gets that one's neighbourhood search and
//!   LP-led moves (`polish`) too; then the plan's jobs moved where the cost LP over them puts them
//!   once more, split jobs too (`recost::follow_lp_whole`: the jobs that leaves short get room by
//!   re-solving, exactly, the jobs holding what each lacks), kept when better; last, on up to 100
//!   jobs, the neighbourhood search six times more from the final plan, its neighbourhoods drawn
//!   otherwise (`neighbourhood::improve_drawn`), and the placed jobs that cost most above their
//!   cheapest candidate forced onto cheaper ones, the jobs in their way re-placed by the same
//!   searches (`force_in::force_cheaper`). Searches that are independent of each other run
//!   side by side on the machine's cores (`parallel`): the first starts, the dives and the
//!   searches from them, the candidates a waiting or dear job is forced onto, the draws of
//!   neighbourhoods, and on up to 40 jobs the plan's and the recosted plan's neighbourhood
//!   searches. Their plans are taken in a fixed order, as one after the other would take them, so
//!   the plan does not depend on the cores. The best bound found gives the reported `gap`; at
//!   the proven weight, the cost's includes the knapsack bound on the cost (`cost_bound::knapsack`: whole
//!   jobs in the pools, where the LP and the Lagrangian let fractions of cheap jobs fill them).
//!   With `--features highs`: an exact MILP through HiGHS, started from that plan, so that it is
//!   never worse than the default build even when its time limit stops it.
//! - `Greedy`: priority order, cheapest feasible offer first; also the fallback when the time limit
//!   hits.
//!
//! ```
//! let problem = solver::Problem::from_json_str(r#"{
//!   "offers": [{"region": "eastus", "size": "Standard_NC24ads_A100_v4", "priority": "regular",
//!               "gpu_model": "A100-80GB", "gpus_per_vm": 1, "vcpus_per_vm": 24,
//!               "family": "standardNCADSA100v4Family", "price_per_hour": 3.673}],
//!   "quotas": [{"region": "eastus", "pool": "standardNCADSA100v4Family", "vcpus": 96}],
//!   "jobs": [{"id": "ft-1", "gpus": 4, "gpu_models": ["A100-80GB"], "duration_hours": 5.0}]
//! }"#).unwrap();
//! let plan = solver::solve(&problem, &solver::SolveOptions::default());
//! assert_eq!(plan.placements[0].vms, 4);
//! assert!(plan.optimal);
//! ```

pub mod advise;
mod check;
mod cost_bound;
mod cover_cuts;
mod dive;
mod exact;
mod explain;
mod force_in;
pub mod generate;
mod knapsack_bound;
mod lagrange;
mod lp;
mod milp;
#[cfg(feature = "highs")]
mod milp_highs;
mod milp_microlp;
mod model;
mod neighbourhood;
pub mod parallel;
mod plan;
mod priority;
mod problem;
mod quota_pools;
mod recost;
mod reduced_cost;
mod search;
mod slots;

use std::time::Instant;

pub use check::check;
pub use model::{DEFAULT_EGRESS_USD_PER_GB, EVICTION_OVERHEAD_HOURS};
pub use plan::{Method, Placement, Plan, SolveOptions, Unplaced};
pub use priority::{Priority, SpotPolicy};
pub use problem::{Egress, FieldIssue, JobDemand, Offer, Problem, ProblemError, QuotaLimit, normalize_pool};
pub use quota_pools::{CORES_KEY, LOW_PRIORITY_CORES_KEY, QuotaPool, normalize_family};

use model::{Instance, Sol, better, priority_order};
use search::RoomMaking;

/// Solves a validated problem (see [`Problem::validate`]; an unvalidated one may give a meaningless
/// but still well-formed plan). `Method::Best` uses HiGHS when built with `--features highs`, the
/// LP-rounding method otherwise.
pub fn solve(problem: &Problem, options: &SolveOptions) -> Plan {
    let problem = &*problem.unsplittable_as_gangs();
    match options.method {
        Method::Greedy => solve_greedy(problem),
        Method::Round => solve_with(problem, options, Search::Off),
        #[cfg(feature = "highs")]
        Method::Best => milp_highs::solve(problem, options),
        #[cfg(not(feature = "highs"))]
        Method::Best => solve_with(problem, options, Search::On),
    }
}

/// The default build's `Best`: LP relaxation, rounding, repair and greedy fill, with the LP bound for
/// `gap`. Available in every build so that it can be compared with HiGHS.
pub fn solve_lp_round(problem: &Problem, options: &SolveOptions) -> Plan {
    solve_with(&problem.unsplittable_as_gangs(), options, Search::On)
}

/// Whether the default build's method runs the Lagrangian bound and the local search after the LP
/// rounding (`Best`) or stops at the rounded LP plan (`Round`, the control loop's method).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Search {
    On,
    Off,
}

fn solve_with(problem: &Problem, options: &SolveOptions, search: Search) -> Plan {
    let start = Instant::now();
    let deadline = options.time_limit_ms.map(|ms| start + std::time::Duration::from_millis(ms));
    trace(|| "start".to_string());
    let inst = Instance::new(problem);
    trace(|| "instance".to_string());
    // Explaining the waiting jobs after the search takes about as long as preparing the instance
    // (both go over every job and offer): the search stops early enough to leave it that time.
    let reserve = start.elapsed().mul_f64(FINISH_RESERVE);
    let deadline = deadline.map(|d| d.checked_sub(reserve).unwrap_or(start).max(start));
    let (sol, label, bounds) = lp_round(&inst, deadline, search);
    trace(|| "solved".to_string());
    let plan = finish(&inst, &sol, &label, &bounds, start);
    trace(|| "finished".to_string());
    plan
}

/// The LP-rounding plan, the name of the method that made it (greedy when the LP could not be solved,
/// and why), and the bounds proven on the way. With [`Search::Off`], the whole-LP rounding alone
/// (the cost phase at the LP's maximum weight, rounded), whatever the problem's size.
pub(crate) fn lp_round(inst: &Instance, deadline: Option<Instant>, search: Search) -> (Sol, String, Vec<Bound>) {
    let mut greedy = greedy(inst);
    trace(|| "greedy".to_string());
    greedy.improve(inst);
    trace(|| "greedy improved".to_string());
    let trivial = trivial_bounds(inst);
    // When nothing shared binds (every job fits where it alone would be cheapest), the greedy plan
    // meets the bound that ignores capacity and quota: it is optimal, and the LPs would only say so
    // again. Most rounds of a scheduler that keeps up are like this.
    if meets(inst, &greedy, &trivial) {
        return (greedy, "greedy (proven optimal)".to_string(), vec![trivial]);
    }
    // A plan placing everything that can be placed has the maximum weight: only cost is left to prove.
    if greedy.weight(inst) >= trivial.weight - 0.5 || search == Search::Off {
        let known_weight = (greedy.weight(inst) >= trivial.weight - 0.5).then_some((trivial.weight, &greedy));
        return match lp::solve_lp(inst, deadline, known_weight) {
            Ok(lp) => {
                let mut rounded = lp::round(inst, &lp);
                rounded.improve(inst);
                let sol = pick(inst, rounded, greedy);
                let bounds = vec![trivial, Bound { weight: lp.weight_bound, cost: lp.cost_bound }];
                // Every placeable job placed: on a small problem, the MILP or else branch and bound
                // proves the cost.
                let mut bounds = bounds;
                let sol = if search == Search::On && !proven(inst, &sol, &bounds) {
                    match milp(inst, sol, &mut bounds, trivial.weight, deadline) {
                        (sol, true) => return (sol, "lp-round, proven by the MILP".to_string(), bounds),
                        (sol, false) => sol,
                    }
                } else {
                    sol
                };
                if search == Search::On && !proven(inst, &sol, &bounds) {
                    match exact::solve(inst, &sol, &[], trivial.weight, EXACT_WORK, deadline) {
                        Some((proven, true)) => {
                            let mut bounds = bounds;
                            bounds.push(Bound { weight: proven.weight(inst), cost: Some(proven.cost()) });
                            return (
                                pick(inst, sol, proven),
                                "lp-round, proven by branch and bound".to_string(),
                                bounds,
                            );
                        }
                        Some((found, false)) => {
                            let found = pick(inst, sol, cost_search(inst, found, None, deadline));
                            let found = make_room_for_dear_jobs(
                                inst,
                                polish(inst, found, &[], Some(&lp.values), deadline),
                                deadline,
                            );
                            return (slots::reassign(inst, found, deadline), "lp-round".to_string(), bounds);
                        }
                        None => {}
                    }
                }
                let sol = if search == Search::On && !proven(inst, &sol, &bounds) {
                    slots::reassign(inst, sol, deadline)
                } else {
                    sol
                };
                (sol, "lp-round".to_string(), bounds)
            }
            Err(why) => (greedy, format!("greedy ({why})"), vec![trivial]),
        };
    }
    if expired(deadline) {
        return (greedy, "greedy (time limit)".to_string(), vec![trivial]);
    }
    // Where the LP over the classes is small (jobs collapse into few classes), its bound is exact and
    // its rounding a good start; where it is not, the Lagrangian gives the bound without it.
    let mut bounds = vec![trivial];
    let mut start = greedy;
    let mut label = "lagrangian";
    let mut relaxation = None;
    // Under a time limit the LP gets half the time left at most: out of time, it leaves the
    // Lagrangian and the search the other half (a 9,000-candidate LP takes about 0.9 s, all of a
    // 500 ms limit, where the Lagrangian's plan after 500 ms is within 14 % of its bound).
    let lp_deadline = deadline.map(|d| {
        let now = Instant::now();
        now + d.saturating_duration_since(now) / 2
    });
    if small_lp(inst)
        && let Ok(lp) = lp::solve_lp(inst, lp_deadline, None)
    {
        let mut rounded = lp::round(inst, &lp);
        rounded.improve(inst);
        start = pick(inst, rounded, start);
        bounds.push(Bound { weight: lp.weight_bound, cost: lp.cost_bound });
        label = "lp-round";
        relaxation = Some(lp.values);
        trace(|| format!("lp: bound {} plan {} cost {:.2}", lp.weight_bound, start.weight(inst), start.cost()));
    }
    let (sol, label, bounds) = lagrangian(inst, deadline, start, bounds, label, relaxation.as_deref());
    let label = if expired(deadline) { format!("{label} (time limit)") } else { label };
    (sol, label, bounds)
}

/// Jobs to explain from which [`finish`] explains them on every core: below, the threads' start
/// (tens of microseconds) is more than the work (about 10 µs a job).
const PARALLEL_EXPLANATIONS: usize = 200;

/// Time the search leaves, under a time limit, for assembling the plan and explaining the jobs
/// left waiting: this many times what preparing the instance took (at 10,000 diverse jobs 95 ms
/// to prepare, 135-190 ms to explain 9,875 waiting jobs; under `--time-limit-ms 300` the 14
/// 10,000-job problems of BENCHMARKS.md took 0.8-2.2 times as long to finish as to prepare, and
/// 2.5 times left 50-100 ms of a 1,000 ms limit unused without making any command meet it better).
const FINISH_RESERVE: f64 = 2.0;

/// Whether the time limit, if any, has passed.
pub(crate) fn expired(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// Candidates over all classes above which the LP relaxation is not solved (a third of it when jobs
/// do not collapse into classes: the Lagrangian bound is then as tight, in a fraction of the time;
/// clarabel takes about a second for 8,000 candidates of 300 distinct jobs).
const MAX_LP_COLUMNS: usize = 8_000;

/// Whether the LP relaxation over the classes is small enough to solve (see [`MAX_LP_COLUMNS`]).
fn small_lp(inst: &Instance) -> bool {
    let columns: usize = inst.classes.iter().map(|c| c.cands.len()).sum();
    let collapsed = inst.classes.len() * 2 <= inst.p.jobs.len();
    columns <= MAX_LP_COLUMNS / 3
        || (collapsed && columns <= MAX_LP_COLUMNS)
        || (inst.mostly_split() && columns <= SPLIT_LP_COLUMNS && inst.p.jobs.len() <= SPLIT_LP_MAX_JOBS)
}

/// Candidates up to which the LP relaxation is solved when most GPUs asked for are splittable
/// ([`Instance::mostly_split`]): clarabel took 0.7-1.5 s at about 9,000 on this 2-core machine.
/// Their LP's VMs rounded down stay feasible and lose at most a VM per job and candidate, where
/// the Lagrangian's plans and the search after them leave much more: every job of
/// `variant_problems.py --shapes nogang` splittable, 400 jobs of tight-caps-400-21 (9,002
/// candidates) reached 91.3 % of HiGHS's 10 s plan's weight without the LP, 100.0 % from its
/// rounding (BENCHMARKS.md, "Split jobs from the LP's rounding (session 66)").
const SPLIT_LP_COLUMNS: usize = 12_000;

/// Jobs up to which a mostly split problem's LP is solved (see [`SPLIT_LP_COLUMNS`]): 1,000 jobs
/// with few candidates each would fit in the columns, and take a second where their target is
/// 0.25 s.
const SPLIT_LP_MAX_JOBS: usize = 500;

/// Subgradient steps for the bound alone where the time limit cut the descent short (its first
/// pass, all multipliers 0, bounds by every job's weight, and the plan's gap would say nearly 1):
/// on the independent 10,000-job issue problem under a 200 ms limit, out of time after the first
/// pass, the bound went from 6.5 million to 0.3 million within 12 steps (0.35 ms a step).
pub(crate) const OUT_OF_TIME_STEPS: usize = 12;

/// Subgradient steps whose choices [`lagrange::Lagrangian::averaged_choices`] averages for a mostly
/// split problem too large for its LP: 10-20 ms at 1,000 jobs.
const AVERAGED_STEPS: usize = 100;

/// Jobs up to which a mostly split problem without its LP gets the start from the averaged choices
/// ([`AVERAGED_STEPS`]): at 10,000 jobs the steps took 120 ms and the start was 14 % lighter than
/// the Lagrangian heuristic's.
const AVERAGED_MAX_JOBS: usize = 2_000;

/// The weight phase when shared quota and capacity bind: the Lagrangian bound by subgradient steps,
/// the Lagrangian heuristic at the multipliers met on the way, then local search on the best plan.
fn lagrangian(
    inst: &Instance,
    deadline: Option<Instant>,
    start: Sol,
    mut bounds: Vec<Bound>,
    label: &str,
    relaxation: Option<&[Vec<f64>]>,
) -> (Sol, String, Vec<Bound>) {
    trace(|| format!("start {} cost {:.2}", start.weight(inst), start.cost()));
    let mut constructed = Sol::new(inst);
    let mut prices = Vec::new();
    let mut lag = lagrange::Lagrangian::new(inst);
    let start_weight = start.weight(inst);
    let dual = lag.descend(None, start_weight, SUBGRADIENT_STEPS, deadline, 25, |price| {
        let sol = search::construct(inst, price);
        trace(|| format!("visit: {}", sol.weight(inst)));
        prices = price.to_vec();
        constructed = pick(inst, std::mem::replace(&mut constructed, Sol::new(inst)), sol);
        constructed.weight(inst).max(start_weight)
    });
    // Out of time: the Lagrangian's bound as it stands (the knapsacks take up to 70 ms at 10,000
    // jobs), after a few more steps where the descent was cut short (see `OUT_OF_TIME_STEPS`): for
    // the bound alone, without a deadline or visits (the plans' prices were taken above, and
    // nothing after this uses the Lagrangian's own).
    let knapsack = if expired(deadline) {
        let target = constructed.weight(inst).max(start_weight);
        lag.descend(Some(&dual), target, OUT_OF_TIME_STEPS, None, 0, |_| target).bound.min(dual.bound)
    } else {
        lag.knapsack_bound(&dual, deadline)
    };
    trace(|| format!("knapsack bound {knapsack:.1} against {:.1}", dual.bound));
    let bound = Bound { weight: lagrange::integral(dual.bound.min(knapsack)), cost: None };
    bounds.push(bound);
    // Mostly split and no LP solved (too large): the LP's point estimated from the Lagrangian's
    // choices, rounded as the LP's would be, another start.
    if relaxation.is_none() && inst.mostly_split() && inst.p.jobs.len() <= AVERAGED_MAX_JOBS && !expired(deadline) {
        let target = constructed.weight(inst).max(start_weight);
        let values = lag.averaged_choices(&dual, target, AVERAGED_STEPS, deadline);
        let mut rounded = lp::round_values(inst, &values, 0.5);
        rounded.improve(inst);
        trace(|| format!("averaged choices rounded: {} cost {:.2}", rounded.weight(inst), rounded.cost()));
        constructed = pick(inst, constructed, rounded);
    }
    trace(|| format!("lagrangian: bound {} constructed {}", bound.weight, constructed.weight(inst)));
    // Local search from the better start, and from the other too when it is close (each ends in
    // its own local optimum; a start far behind rarely catches up).
    let (a, b) =
        if start.weight(inst) >= constructed.weight(inst) { (start, constructed) } else { (constructed, start) };
    // Out of time: the better plan as it stands (the search would only begin).
    if expired(deadline) {
        return (a, label.to_string(), bounds);
    }
    let close = b.weight(inst) >= 0.99 * a.weight(inst) && !many_placed(&a);
    let starts = if close { vec![a, b] } else { vec![a] };
    let mut best = best_searched(inst, &starts, |s| improve(inst, s.clone(), &prices, &bounds, deadline));
    phase(inst, "starts", &best);
    let lambda = lag.unit_multipliers(&dual);
    // Small problems: the MILP from the best plan, which proves many of them (then nothing is left
    // to search) and otherwise tightens the bound the branch and bound below caps its nodes at.
    if !expired(deadline) && !proven(inst, &best, &bounds) {
        let weight = weight_bound(&bounds);
        let optimal;
        (best, optimal) = milp(inst, best, &mut bounds, weight, deadline);
        if optimal {
            return (best, format!("{label}, proven by the MILP"), bounds);
        }
    }
    phase(inst, "milp", &best);
    // Small problems: branch and bound from the best plan proves it (or finds better); up to
    // `exact::MAX_CAPPED_JOBS` jobs, its weight capped at the best bound (where that is the plan's
    // weight, only the cost is left to search).
    if !expired(deadline) && !proven(inst, &best, &bounds) {
        match exact::solve(inst, &best, &lambda, weight_bound(&bounds), EXACT_WORK, deadline) {
            Some((proven, true)) => {
                bounds.push(Bound { weight: proven.weight(inst), cost: Some(proven.cost()) });
                best = pick(inst, best, proven);
                trace(|| format!("branch and bound: proven {} cost {:.2}", best.weight(inst), best.cost()));
                return (best, format!("{label}, proven by branch and bound"), bounds);
            }
            // Out of work or time: what it found on the way is still a plan, its cost not yet searched.
            Some((found, false)) => {
                let found = if found.weight(inst) > best.weight(inst) {
                    cost_search(inst, found, None, deadline)
                } else {
                    found
                };
                best = pick(inst, best, found);
            }
            None => {}
        }
    }
    phase(inst, "exact", &best);
    if inst.p.jobs.len() <= neighbourhood::MAX_JOBS && !expired(deadline) && !proven(inst, &best, &bounds) {
        best = polish(inst, best, &lambda, relaxation, deadline);
    }
    phase(inst, "polish", &best);
    best = last_cost_moves(inst, best, &bounds, deadline);
    let polished = best.weight(inst);
    phase(inst, "last cost moves", &best);
    // Last of the searches, more starts: the plans LP dives end at, searched as the first was (see
    // [`MAX_DIVE_JOBS`]). A heavier plan from them has had only `improve`'s cost search: it gets the
    // cost moves the first start's plan got after it (on the 70 independent 60-100-job problems
    // and the 22 of the held-out seed 8: 6 heavier, 6 cheaper, none worse; huge-gangs-60-8 13.6 %
    // cheaper).
    if inst.p.jobs.len() <= MAX_DIVE_JOBS && !expired(deadline) && !proven(inst, &best, &bounds) {
        let before = best.weight(inst);
        best = restart_from_dive(inst, best, &prices, &bounds, deadline);
        if best.weight(inst) > before + 0.5 {
            best = last_cost_moves(inst, best, &bounds, deadline);
        }
    }
    phase(inst, "dives", &best);
    // Then heavy waiting jobs forced in, the jobs in their way re-placed together (`force_in`):
    // more starts, on up to 100 jobs (BENCHMARKS.md, "Heavy waiting jobs forced in (session 56)").
    if inst.p.jobs.len() <= neighbourhood::MAX_JOBS
        && !expired(deadline)
        && !proven(inst, &best, &bounds)
        && force_in::force_in(inst, &mut best, |s| improve(inst, s, &prices, &bounds, deadline), deadline)
    {
        best = last_cost_moves(inst, best, &bounds, deadline);
    }
    phase(inst, "forced in", &best);
    // A plan the later starts made heavier has had the weight and cost searches (`improve`), not the
    // neighbourhood search and the LP-led moves of `polish`: those run again on it (on the 114
    // independent problems of 60-100 jobs, 30 plans heavier than the first start's: 6 of them
    // heavier still, egress-60-8 from 98.6 % to 99.6 % of HiGHS's proven optimum, and 19 cheaper,
    // none worse, for 1.09 times their time; BENCHMARKS.md, "Later starts' plans polished too
    // (session 57)").
    if inst.p.jobs.len() <= neighbourhood::MAX_JOBS
        && best.weight(inst) > polished + 0.5
        && !expired(deadline)
        && !proven(inst, &best, &bounds)
    {
        best = polish(inst, best, &lambda, relaxation, deadline);
        best = last_cost_moves(inst, best, &bounds, deadline);
    }
    phase(inst, "polished again", &best);
    // Last on small problems: the jobs moved where the cost LP over them puts them, split jobs
    // too (`recost::follow_lp_whole`). Last, because a plan it makes better starts the searches
    // that would follow elsewhere: run inside `polish` instead, it made 5 of 114 plans lighter and
    // 12 dearer (and 4 heavier, 2 cheaper); here, 2 of the 114 heavier and 6 cheaper, none worse,
    // for 1.08 times the time (BENCHMARKS.md, "The cost LP followed for split jobs too (session 56)").
    if inst.p.jobs.len() <= neighbourhood::MAX_JOBS
        && !expired(deadline)
        && !proven(inst, &best, &bounds)
        && recost::follow_lp_whole(inst, &mut best, deadline)
    {
        best = last_cost_moves(inst, best, &bounds, deadline);
    }
    phase(inst, "follow lp whole", &best);
    // Last of all on small problems: the neighbourhood search from the final plan, its
    // neighbourhoods drawn otherwise.
    if inst.p.jobs.len() <= neighbourhood::MAX_JOBS {
        best = more_neighbourhoods(inst, best, &lambda, &bounds, deadline);
    }
    // Then the dearest jobs forced onto cheaper candidates, the jobs in their way re-placed
    // (`force_in::force_cheaper`): the rotations that make room for them move more jobs than
    // any neighbourhood holds.
    if inst.p.jobs.len() <= neighbourhood::MAX_JOBS
        && !expired(deadline)
        && !proven(inst, &best, &bounds)
        && force_in::force_cheaper(
            inst,
            &mut best,
            |s| improve(inst, s, &prices, &bounds, deadline),
            |mut s| {
                neighbourhood::improve(inst, &mut s, &lambda, NEIGHBOURHOOD_WORK, deadline);
                s
            },
            deadline,
        )
    {
        best = last_cost_moves(inst, best, &bounds, deadline);
    }
    phase(inst, "force cheaper", &best);
    // The weight is proven the most there is (the knapsack bound often proves it where the LP's
    // cannot): a bound on its least cost, without which the gap would say nothing (a plan of the
    // proven weight would report 1). First the knapsack bound on the cost (`cost_bound::knapsack`:
    // the pools enforced on whole jobs, as the LP and the Lagrangian do not; on one region's pools
    // the optimum) at the weight Lagrangian's multipliers scaled to cost: one pass of knapsacks,
    // 1-12 ms at 1,000 jobs, so it runs even out of time on up to `EXACT_UNITS_MAX_JOBS` jobs,
    // with the cover bound (a sort). Then, with time left and the plan not proven, where nothing
    // bounds the cost yet: on a small problem the LP's least cost at that weight; on a large one
    // (at 10,000 diverse jobs that LP took 5 s) the Lagrangian bound on the cost (`cost_bound`:
    // one pass over the candidates a step) or the cover bound, and the knapsack bound at its
    // multipliers.
    let weight = best.weight(inst);
    if weight >= weight_bound(&bounds) - 0.5 {
        let cost_bounded = bounds.iter().any(|b| b.cost.is_some() && weight >= b.weight - 0.5);
        let add = |bounds: &mut Vec<Bound>, what: &str, cost: f64| {
            trace(|| format!("weight proven: {what} cost bound {cost:.2}"));
            bounds.push(Bound { weight, cost: Some(cost) });
        };
        let scaled = cost_bound::Multipliers {
            weight: best.cost(),
            resources: lambda.iter().map(|m| m * best.cost()).collect(),
        };
        let small = inst.p.jobs.len() <= lagrange::EXACT_UNITS_MAX_JOBS;
        if (!expired(deadline) || small)
            && let Some(cost) = cost_bound::knapsack(inst, weight, &scaled, if small { None } else { deadline })
        {
            add(&mut bounds, "knapsack", cost);
        }
        if expired(deadline) && !cost_bounded {
            add(&mut bounds, "cover", cheapest_at(inst, weight));
        } else if !expired(deadline) && !cost_bounded && !proven(inst, &best, &bounds) {
            if small_lp(inst) {
                if let Ok((cost, _)) = lp::min_cost_at(inst, weight, deadline, Some(&best)) {
                    add(&mut bounds, "LP", cost);
                }
            } else {
                let (priced, at) = cost_bound::bound(inst, weight, best.cost(), &lambda, deadline);
                add(&mut bounds, "Lagrangian", cheapest_at(inst, weight).max(priced));
                if !proven(inst, &best, &bounds)
                    && !expired(deadline)
                    && let Some(cost) = cost_bound::knapsack(inst, weight, &at, deadline)
                {
                    add(&mut bounds, "knapsack at its multipliers", cost);
                }
            }
        }
    }
    (best, label.to_string(), bounds)
}

/// The last steps on a small problem's plan that branch and bound has not proven: the neighbourhood
/// search from the plan and, on up to [`RECOST_MAX_JOBS`] jobs, from the plan the cost LP's dive over
/// its placed jobs finds (`recost`) when that one is better; the better of the two. Each search ends
/// in its own local optimum: from the recosted plan alone, 2 of 44 independent 40-job problems ended
/// with less weight or dearer than from the plan itself, and half the search's work each left 3
/// instead of 2 of 30 proven optima more than 1 % dearer. After the neighbourhood search, the plan's
/// jobs moved where the cost LP over them puts them (`recost::follow_lp`): on 70 independent 60-100-
/// job problems 11 plans heavier and 7 cheaper (all-spot-60-3 at HiGHS's proven optimum, from
/// +8.6 %), none worse, for 1.25 times the time; once more when that moved the plan: 3 more plans
/// heavier (issue-100-2 +0.61 %, to 99.5 % of HiGHS's weight), 2 cheaper (deny-sizes-100-1 -2.9 %,
/// tiny-100-2 -2.4 %), none worse, for 1.21 times the time (up to four rounds: nothing more, 1.30
/// times). Last, where the LP over the whole problem was solved, the jobs the plan places most
/// unlike it re-solved together (`neighbourhood::follow_relaxation`).
fn polish(
    inst: &Instance,
    best: Sol,
    lambda: &[f64],
    relaxation: Option<&[Vec<f64>]>,
    deadline: Option<Instant>,
) -> Sol {
    let recosted = if inst.p.jobs.len() <= RECOST_MAX_JOBS { recost::recost(inst, &best, deadline) } else { None };
    // The plan's own path and the recosted plan's, side by side.
    let starts: Vec<(Sol, bool)> = std::iter::once((best, true)).chain(recosted.map(|r| (r, false))).collect();
    best_searched(inst, &starts, |(start, own)| {
        let mut sol = start.clone();
        neighbourhood::improve(inst, &mut sol, lambda, NEIGHBOURHOOD_WORK, deadline);
        if *own {
            // Once more when it moved the plan: the LP over the jobs the new plan places differs.
            if recost::follow_lp(inst, &mut sol, deadline) {
                recost::follow_lp(inst, &mut sol, deadline);
            }
            if let Some(values) = relaxation {
                neighbourhood::follow_relaxation(inst, &mut sol, values, lambda, deadline);
            }
        }
        sol
    })
}

/// Draws of neighbourhoods the plan gets last, on up to `neighbourhood::MAX_JOBS` jobs, after the
/// one `polish` ran (see [`more_neighbourhoods`]). On the 114 independent problems of 60-100 jobs,
/// three: 12 plans heavier and 32 cheaper, none worse, for 1.15 times the time; six instead of
/// three: 10 heavier and 17 cheaper (two 100-job plans 15 % cheaper), none worse, for 1.12 times
/// (BENCHMARKS.md, "Other draws of neighbourhoods, last (session 57)"). In a trace of six, the
/// first improved 36 of the 89 plans that get them, each later one still 15-23.
const MORE_DRAWS: u64 = 6;

/// Last on small problems: the neighbourhood search from the final plan again, with the
/// neighbourhoods drawn otherwise ([`MORE_DRAWS`] times, each from the best plan so far), the cost
/// moves after each draw that improves it. The searches end in a local optimum of the
/// neighbourhoods they happened to draw; the rotations that make a plan cheaper move 14-22 jobs
/// across three or four regions, which one draw rarely holds.
fn more_neighbourhoods(
    inst: &Instance,
    mut best: Sol,
    lambda: &[f64],
    bounds: &[Bound],
    deadline: Option<Instant>,
) -> Sol {
    let cores = parallel::cores();
    let mut draw = 1;
    while draw <= MORE_DRAWS && !expired(deadline) && !proven(inst, &best, bounds) {
        // The next draws side by side, each from the best plan: a draw counts only when those
        // before it changed nothing, as one after the other would have started it from the same
        // plan (so the plan does not depend on the cores); after one that changes the plan, the
        // draws after it start again from the new plan.
        let ahead: Vec<u64> = (draw..=MORE_DRAWS).take(cores).collect();
        let drawn = parallel::par_map(&ahead, cores, |&draw| {
            let mut other = best.clone();
            neighbourhood::improve_drawn(inst, &mut other, lambda, NEIGHBOURHOOD_WORK, draw, deadline);
            other
        });
        for (&d, other) in ahead.iter().zip(drawn) {
            draw = d + 1;
            let improved = better((other.weight(inst), other.cost()), (best.weight(inst), best.cost()));
            if improved {
                best = last_cost_moves(inst, other, bounds, deadline);
            }
            phase(inst, "another draw of neighbourhoods", &best);
            if improved {
                break;
            }
        }
    }
    best
}

/// The MILP (`milp_microlp`) from `sol` on a small problem, `weight_bound` the most weight proven
/// so far: the better plan, and whether it is proven optimal; what the MILP proved joins `bounds`.
fn milp(
    inst: &Instance,
    sol: Sol,
    bounds: &mut Vec<Bound>,
    weight_bound: f64,
    deadline: Option<Instant>,
) -> (Sol, bool) {
    match milp_microlp::solve(inst, &sol, weight_bound, deadline) {
        Some(out) => {
            bounds.extend(out.bounds);
            (pick(inst, sol, out.sol), out.optimal)
        }
        None => (sol, false),
    }
}

/// Jobs above which the plan is not recosted: on 22 independent 60- and 100-job problems the dive's
/// repairs (a weight search with kicks, neighbourhoods, two cost searches: 0.3-0.9 s at 100 jobs)
/// and the second neighbourhood search doubled the solve for no cheaper plan and +0.1-0.5 % weight
/// on three.
const RECOST_MAX_JOBS: usize = 40;

/// Jobs above which, on up to [`MAX_KICK_JOBS`], the weight search ends with as many local kicks
/// (`search::Packing::kick_local`) as whole ones, from the heaviest packing the kicks found: above
/// `neighbourhood::MAX_JOBS` no neighbourhood search follows, and the plan has only these searches.
/// On the 35 independent 300-job problems of seeds 1-5 and the 9 `diverse` 120-300-job ones: 12
/// of 44 heavier (all-spot-300-2 +0.91 %, the others +0.02-0.08 %), none worse, for 1.33 times the
/// time (mean 436 -> 581 ms, max 794 -> 1,180 ms); half as many kicks: 7 heavier, 1.22 times.
const FURTHER_SEARCH_JOBS: usize = neighbourhood::MAX_JOBS;

/// Local search for weight (unless the plan meets the bound already) then for cost.
fn improve(inst: &Instance, mut sol: Sol, prices: &[f64], bounds: &[Bound], deadline: Option<Instant>) -> Sol {
    if expired(deadline) {
        return sol;
    }
    let weight_bound = weight_bound(bounds);
    sol.improve(inst);
    let mut further = None;
    if sol.weight(inst) < weight_bound - 0.5 {
        let mut pack = search::Packing::from_sol(inst, &sol);
        pack.guide(prices);
        pack.improve_weight(deadline);
        // The iterated search on top (see `kicks`); on large problems, cheaper local kicks after it,
        // on the others kicks that make room by moving jobs.
        let mut rooms = Vec::new();
        if !many_placed(&sol) {
            pack.kick(kicks(inst), deadline);
            if inst.p.jobs.len() > MAX_KICK_JOBS {
                let more = (MORE_LOCAL_KICKS, (1.0 - FAR_FROM_BOUND) * weight_bound, 1);
                pack.kick_local(LOCAL_KICKS, Some(more), search::LOCAL_PER_RESOURCE, deadline);
            } else if inst.p.jobs.len() > milp_microlp::MAX_JOBS {
                // Each from the plain kicks' plan: started from the chains' plan, the ejections
                // lost min-gpus-100's gain (the kicks' paths are chaotic; see the constants).
                let shares =
                    [(RoomMaking::Chains, ROOM_KICK_SHARE), (RoomMaking::ChainsAndEjections, EJECTING_KICK_SHARE)];
                for (how, share) in shares {
                    let mut room = pack.clone();
                    room.kick_making_room(kicks(inst) / share, how, deadline);
                    rooms.push(room);
                }
                // Where no neighbourhood search follows, local kicks from the heaviest of those
                // (see `FURTHER_SEARCH_JOBS`).
                if inst.p.jobs.len() > FURTHER_SEARCH_JOBS {
                    let heaviest = rooms
                        .iter()
                        .fold(&pack, |best, r| if r.placed_weight() > best.placed_weight() { r } else { best });
                    let mut far = heaviest.clone();
                    far.kick_local(kicks(inst), None, search::LOCAL_PER_RESOURCE, deadline);
                    further = Some(far.to_plan());
                }
            }
        }
        // Each packing as a plan (waiting split jobs placed again where there is room), the best:
        // a packing of more weight can give a plan of less.
        for pack in std::iter::once(pack).chain(rooms) {
            sol = pick(inst, sol, pack.to_plan());
        }
    }
    trace(|| format!("after weight search: plan {} cost {:.2}", sol.weight(inst), sol.cost()));
    // The further plan gets a cost search of its own when it is heavier: the cost search's re-filled
    // offers and kicks add weight too, by paths that differ from plan to plan, so the heavier plan
    // before it is not always the heavier after it, and both are kept until then.
    let weight = sol.weight(inst);
    let sol = cost_search(inst, sol, Some(prices), deadline);
    let sol = match further {
        Some(found) if found.weight(inst) > weight + 0.5 => {
            pick(inst, sol, cost_search(inst, found, Some(prices), deadline))
        }
        _ => sol,
    };
    if (MAX_KICK_JOBS + 1..=MAX_FAR_KICK_JOBS).contains(&inst.p.jobs.len()) {
        far_kicks(inst, sol, prices, weight_bound, deadline)
    } else {
        sol
    }
}

/// Jobs above which no plan gets [`far_kicks`]: at 1,000 jobs they added up to 73 ms to the whole
/// process (budgets-1000-6, 160 kicks and a cost search: 109 -> 182 ms), where it has 250; at
/// 10,000 jobs the cost search alone takes 120-180 ms (issue-10000-1, `SPILLWAY_SOLVER_TRACE=1`)
/// in a solve of 0.9-1.5 s of the 2,000, and none of the 11 10,000-job plans measured was that far
/// from its bound.
const MAX_FAR_KICK_JOBS: usize = 2_000;

/// Waiting jobs [`far_kicks`] forces in, the most worth placing at the prices first
/// (`search::Packing::force_waiting`).
const FORCED_WAITING: usize = 20;

/// From [`MAX_KICK_JOBS`] to [`MAX_FAR_KICK_JOBS`] jobs, a plan the searches left more than
/// [`FAR_FROM_BOUND`] below the weight bound, searched further from where the cost search left it:
/// the [`FORCED_WAITING`] waiting jobs most worth placing at the prices forced in one after the
/// other (the kicks draw the job they force at random, among hundreds), then rounds of
/// [`MORE_LOCAL_KICKS`] local kicks while the plan is that far (a round only after one that placed
/// more, at most [`MORE_LOCAL_ROUNDS`]); a cost search of what they found when heavier. After the
/// cost search rather than in the weight search: its re-filled offers place more too, and there
/// the kicks went to plans the cost search brings to the bound anyway (tiny-1000-4: 80 more kicks,
/// 45 ms, the same plan). On the 66 independent 1,000-job problems of seeds 1-6, 3 heavier
/// (tight-caps-1000-6 +0.46 %, tight-caps-1000-1 from 2.04 % to 1.89 % below its bound), none
/// lighter, the same time but on those (at most 198 ms in all; BENCHMARKS.md, session 63).
fn far_kicks(inst: &Instance, sol: Sol, prices: &[f64], weight_bound: f64, deadline: Option<Instant>) -> Sol {
    let enough = (1.0 - FAR_FROM_BOUND) * weight_bound;
    if sol.weight(inst) >= enough || expired(deadline) {
        return sol;
    }
    let mut pack = search::Packing::from_sol(inst, &sol);
    pack.guide(prices);
    pack.force_waiting(FORCED_WAITING, search::LOCAL_PER_RESOURCE, deadline);
    let forced = pack.placed_weight();
    pack.kick_local(0, Some((MORE_LOCAL_KICKS, enough, MORE_LOCAL_ROUNDS)), search::LOCAL_PER_RESOURCE, deadline);
    let found = pack.to_plan();
    trace(|| {
        format!(
            "far from the bound: {} -> waiting jobs forced in {forced} -> kicks {}",
            sol.weight(inst),
            found.weight(inst)
        )
    });
    if found.weight(inst) > sol.weight(inst) + 0.5 {
        pick(inst, sol, cost_search(inst, found, Some(prices), deadline))
    } else {
        sol
    }
}

/// The moves after the searches, on a plan not proven: room made for dear jobs, then the gang jobs
/// (and split jobs placed whole) re-filled as slots (`slots`), before the cost bound that follows
/// them in `lagrangian`: where that reaches the proven weight, the gap is the cost's
/// (one-pool-1000-2 reported gap 1 when it ran after).
fn last_cost_moves(inst: &Instance, mut best: Sol, bounds: &[Bound], deadline: Option<Instant>) -> Sol {
    if !proven(inst, &best, bounds) {
        best = make_room_for_dear_jobs(inst, best, deadline);
    }
    if !proven(inst, &best, bounds) {
        best = slots::reassign(inst, best, deadline);
    }
    best
}

/// Jobs above which no LP dive (`dive`) restarts the searches (see [`restart_from_dive`]): above,
/// the root LP alone takes too long (0.8 s for the 12,500 variables of a 300-job split problem),
/// and the searches of another start cost more than the time a large problem has. Measured in
/// BENCHMARKS.md, "LP dives as further starts (session 54)".
pub(crate) const MAX_DIVE_JOBS: usize = MAX_KICK_JOBS;

/// The best of `best` and the plans LP dives (`dive`) end at, each searched as the first start was
/// (`improve`): each search ends in its own local optimum, and a dive's plan starts it far from the
/// first one's, where the LP arranges the jobs. Two dives on up to `neighbourhood::MAX_JOBS` jobs
/// (`dive::UP_FROM`), one above. On the 70 independent 60-100-job problems 8 plans heavier (split-60-3
/// +1.34 %, split-100-3 +0.50 %) and 1 cheaper, none worse, for 1.41 times the time (one dive: 6
/// heavier); on the 35 300-job ones 12 heavier (split-300-1 +0.78 %), none lighter, for 2.04
/// times (a lighter search of the dive's plan, without the room-making kicks: 7 heavier). Last of
/// the searches, and picked only when better, so that it never takes the others down another
/// path: run before the MILP and the polish instead, its plan replaced theirs and 5 of the 70
/// ended lighter.
fn restart_from_dive(inst: &Instance, best: Sol, prices: &[f64], bounds: &[Bound], deadline: Option<Instant>) -> Sol {
    let small = inst.p.jobs.len() <= neighbourhood::MAX_JOBS;
    let up_from = if small { &dive::UP_FROM[..] } else { &dive::UP_FROM[..1] };
    let dived = dive::dives(inst, up_from, deadline);
    let best = search_dives(inst, best, &dived, prices, bounds, deadline);
    phase(inst, "plain dives", &best);
    if small { restart_from_forced_dives(inst, best, prices, bounds, deadline) } else { best }
}

/// The best of `best` and the plans of dives that each first place a gang job `best` leaves
/// waiting (`dive::Forced`), searched as in [`restart_from_dive`]: the heaviest such jobs first,
/// one per class, [`FORCED_DIVES`] dives at most, and only where the LP with the job placed is above
/// `best`'s weight (else no plan that places it is heavier). Placing a job first moves the
/// whole LP point, so each such dive starts the searches somewhere new: on split-100-2 the fifth
/// such dive (the seventh job tried; the LP ruled out two) gives 47,480 where every other start
/// stops at 47,315 (HiGHS's best in 20 s: 47,864). Measured in BENCHMARKS.md, "Dives that place
/// a waiting job first (session 55)".
fn restart_from_forced_dives(
    inst: &Instance,
    best: Sol,
    prices: &[f64],
    bounds: &[Bound],
    deadline: Option<Instant>,
) -> Sol {
    let Some(forced) = dive::Forced::new(inst) else { return best };
    let base = best.clone();
    let mut placed = vec![false; inst.p.jobs.len()];
    for a in &base.assigns {
        placed[a.job] = true;
    }
    // The waiting gang jobs with candidates, one per class (another job of a class would start the
    // same dive), heaviest first.
    let mut waiting: Vec<(u64, usize)> = inst
        .classes
        .iter()
        .filter(|c| !c.cands.is_empty() && inst.job(c.rep).gang)
        .filter_map(|c| c.jobs.iter().copied().find(|&j| !placed[j]))
        .map(|j| (u64::from(inst.job(j).priority) * u64::from(inst.job(j).gpus), j))
        .collect();
    waiting.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    waiting.truncate(FORCED_DIVE_TRIES);
    // The jobs' dives and their searches side by side on the cores, the first `FORCED_DIVES` that
    // dive taken in the jobs' order (so the plan does not depend on the cores), each dive asked to
    // beat the plan they all start from.
    let above = base.weight(inst);
    let searched = parallel::par_first(&waiting, parallel::cores(), FORCED_DIVES, |&(_, j)| {
        if expired(deadline) {
            return None;
        }
        let plan = forced.dive(inst, &base, j, above, deadline)?;
        trace(|| format!("a dive placing {} first", inst.p.jobs[j].id));
        Some(improve(inst, plan, prices, bounds, deadline))
    });
    searched.into_iter().map(|(_, plan)| plan).fold(best, |a, b| pick(inst, a, b))
}

/// Dives that first place a waiting job, at most, on up to `neighbourhood::MAX_JOBS` jobs (see
/// [`restart_from_forced_dives`]): each costs about what a search from the first start does
/// (0.2-0.5 s at 100 jobs). On the 70 independent 60-100-job problems, with 4: 5 plans heavier
/// and 2 cheaper; with 6: 6 heavier (split-100-2 among them) and 3 cheaper, none worse, for 1.70
/// times the time. Above 100 jobs none: at 300 jobs two took 2.1 times the time for 7 plans
/// heavier by at most 0.32 %.
const FORCED_DIVES: usize = 6;

/// Waiting jobs tried at most for [`FORCED_DIVES`] (a job the LP rules out costs one LP solve).
const FORCED_DIVE_TRIES: usize = 3 * FORCED_DIVES;

/// The best of `best` and the plans of `dived` searched as the first start was (`improve`), the
/// searches on as many cores as there are.
fn search_dives(
    inst: &Instance,
    best: Sol,
    dived: &[Sol],
    prices: &[f64],
    bounds: &[Bound],
    deadline: Option<Instant>,
) -> Sol {
    if dived.is_empty() {
        return best;
    }
    let searched = best_searched(inst, dived, |d| {
        let searched = improve(inst, d.clone(), prices, bounds, deadline);
        trace(|| format!("after a dive's searches: plan {} cost {:.2}", searched.weight(inst), searched.cost()));
        searched
    });
    pick(inst, best, searched)
}

/// The best of the plans `search` makes from `starts`, the searches on as many cores as there are
/// (`parallel::cores`). The searches are independent and the best is picked in the starts' order,
/// so the plan does not depend on the cores. `starts` must not be empty.
fn best_searched<T: Sync>(inst: &Instance, starts: &[T], search: impl Fn(&T) -> Sol + Sync) -> Sol {
    parallel::par_map(starts, parallel::cores(), search)
        .into_iter()
        .reduce(|a, b| pick(inst, a, b))
        .expect("a start to search from")
}

/// Local search for cost at the plan's weight. Above [`MAX_KICK_JOBS`] jobs, the weight searches of
/// its kicks are guided by `prices` (per VM of each offer, as the weight search's; see
/// [`GUIDED_COST_KICKS`]).
pub(crate) fn cost_search(inst: &Instance, sol: Sol, prices: Option<&[f64]>, deadline: Option<Instant>) -> Sol {
    if expired(deadline) {
        return sol;
    }
    let mut pack = search::Packing::from_sol(inst, &sol);
    let large = inst.p.jobs.len() > MAX_KICK_JOBS;
    if large && let Some(prices) = prices {
        pack.guide(prices);
    }
    pack.improve_cost_refilled(REPACK_ROUNDS, deadline);
    pack.kick_cost(if large { GUIDED_COST_KICKS } else { kicks(inst) / COST_KICK_SHARE }, deadline);
    let sol = pick(inst, sol, pack.to_plan());
    trace(|| format!("after cost search: plan {} cost {:.2}", sol.weight(inst), sol.cost()));
    sol
}

/// The last cost moves on the final plan, up to [`MAX_KICK_JOBS`] jobs: each job placed far above
/// its cheapest candidate moved there after a chain of cheaper moves makes room
/// (`search::Packing::improve_cost_making_room`). Last, so that no search after it takes another
/// path from the cheaper plan: only a cheaper plan of the same weight is kept.
fn make_room_for_dear_jobs(inst: &Instance, sol: Sol, deadline: Option<Instant>) -> Sol {
    if inst.p.jobs.len() > MAX_KICK_JOBS || expired(deadline) {
        return sol;
    }
    let mut pack = search::Packing::from_sol(inst, &sol);
    pack.improve_cost_making_room(DEAR_ROOM_SHARE, deadline);
    let sol = pick(inst, sol, pack.to_plan());
    trace(|| format!("after room for dear jobs: plan {} cost {:.2}", sol.weight(inst), sol.cost()));
    sol
}

/// Whether a plan places so many jobs that each kick's weight search, which goes over all of them,
/// costs more than the time a large problem has ([`MAX_KICK_PLACEMENTS`]).
fn many_placed(sol: &Sol) -> bool {
    sol.assigns.len() > MAX_KICK_PLACEMENTS
}

/// Placements above which a plan gets no kicks and the search runs from one start only. The
/// 10,000-job problems of the independent generator and `generate::diverse` place 100-200 jobs,
/// and kicks there cost 10-150 ms each; `generate::bench`'s tight 10,000-job problem places 6,363,
/// and there each whole kick cost 450 ms and the second start 4.8 s (12.9 s in all).
const MAX_KICK_PLACEMENTS: usize = 2_000;

/// Kicks of the iterated weight search for a problem of this many jobs: [`KICK_BUDGET`] divided by
/// the square of the jobs (a kick's weight search grows about as the square: 0.15 ms at 100 jobs,
/// 2.2 ms at 300), at most [`MAX_KICKS`]; above [`MAX_KICK_JOBS`] jobs [`LARGE_KICKS`]. So the
/// kicks take about the same time, a fifth of a second on one core, from 100 to 400 jobs.
pub(crate) fn kicks(inst: &Instance) -> usize {
    let jobs = inst.p.jobs.len().max(1);
    if jobs <= MAX_KICK_JOBS { (KICK_BUDGET / (jobs * jobs)).min(MAX_KICKS) } else { LARGE_KICKS }
}

/// The kicks that make room by moving jobs in chains (`search::Packing::kick_making_room`,
/// `RoomMaking::Chains`) are this fraction of the others, after them, from the plan they found, on
/// 51-400 jobs. Each such kick's search tries, for every job it cannot place, chains of moves that
/// fail most of the time: with room-making in every kick the 33 independent 60-300-job problems
/// took up to 2.6 times as long, and the plans followed other paths (6 placed less). Not on
/// problems the MILP runs on (`milp_microlp::MAX_JOBS`): on the 164 random and independent
/// problems of 20-40 jobs they changed no plan, for 2-11 % more time.
const ROOM_KICK_SHARE: usize = 4;

/// The same for the kicks that also relocate the job holding the room after lighter ones make way
/// (`RoomMaking::ChainsAndEjections`), also from the plain kicks' plan. On 99 independent
/// 60-300-job problems (seeds 1-3) the two kinds together placed more on 32 than the plain kicks
/// alone, less on 6, for 1.38 times the time.
const EJECTING_KICK_SHARE: usize = 8;

/// Kicks on problems of more than [`MAX_KICK_JOBS`] jobs, where each costs a weight search over all
/// of them (10-150 ms at 1,000-10,000 jobs). On the 26 problems of 1,000 and 10,000 jobs of the
/// BENCHMARKS table (random and independent shapes), 4 kicks placed as much or more on every one
/// (+0.0-1.0 %; 6 instead of 5 within 2 % of the bound) for 1.1-2.4 times the time (at most 139 ms
/// at 1,000 jobs, 1.3 s at 10,000); 8 placed more on most but took up to 1.9 s at 10,000.
const LARGE_KICKS: usize = 4;

/// Local kicks on problems of more than [`MAX_KICK_JOBS`] jobs, after the [`LARGE_KICKS`]: each
/// searches only the jobs near what it moved (`search::Packing::kick_local`), 1-4 ms at 1,000 and
/// 10,000 jobs where a whole search takes 10-150. On the 26 problems of 1,000 and 10,000 jobs: 20
/// placed more on 18 (up to +0.9 %), less on one (issue-1000, -0.2 %), 8 instead of 6 within 2 % of
/// the bound, for 1.0-1.7 times the time (at most 204 ms at 1,000 jobs, 1.6 s at 10,000); 40 placed
/// more still (11 within 2 %) but took 275 ms on a 1,000-job problem.
const LOCAL_KICKS: usize = 20;

/// Local kicks after the [`LOCAL_KICKS`] while the plan is still more than [`FAR_FROM_BOUND`] below
/// the bound the solver proves: the time goes where the plan is provably furthest from the
/// optimum, and the problems already close to their bound keep their time (BENCHMARKS, session 42).
const MORE_LOCAL_KICKS: usize = 40;

/// Rounds of [`MORE_LOCAL_KICKS`] in [`far_kicks`] at most, each only after one that placed more.
const MORE_LOCAL_ROUNDS: usize = 4;

/// How far below its bound (a fraction of the bound) a plan gets [`MORE_LOCAL_KICKS`]: issue #17's
/// "within 2 % of the bound the solver proves".
const FAR_FROM_BOUND: f64 = 0.02;

/// The cost search's kicks are this fraction of the weight search's (each costs a weight search and
/// a cost search; a quarter left a 60-job plan 0.5 % above HiGHS's cost, all of them 0.4 %).
const COST_KICK_SHARE: usize = 4;

/// The cost search's kicks above [`MAX_KICK_JOBS`] jobs, whose weight searches are guided by the
/// Lagrangian's prices as the weight search's are (ejections tried only for the jobs the prices
/// rate nearly worth placing, on their cheapest-rated candidates). Unguided, the one kick there
/// tried ejections for every waiting job on every candidate: 40-60 ms of a 1,000-job solve,
/// 430 ms of a 10,000-job one. On 56 problems of 1,000 and 10,000 jobs (`diverse` seeds 1-8, the
/// independent generator's seeds 1 and 2), two guided kicks: 19 plans heavier (up to +0.41 %), 11
/// lighter (tiny-10000-1 -0.52 %, the others at most -0.12 %), for 0.88 times the time (the
/// slowest 1,000-job solve 251 -> 219 ms). Not below: on 44 problems of 120-300 jobs guided cost
/// kicks left 28 plans lighter.
const GUIDED_COST_KICKS: usize = 2;

/// Share of the plan's cost by which a placed job must cost more than on its cheapest candidate
/// for [`make_room_for_dear_jobs`] to try it.
const DEAR_ROOM_SHARE: f64 = 0.005;

/// Rounds of re-filled offers and cost search at most, after the first cost search
/// (`search::Packing::improve_cost_refilled`).
const REPACK_ROUNDS: usize = 4;

const KICK_BUDGET: usize = 10_000_000;
const MAX_KICKS: usize = 1_000;
const MAX_KICK_JOBS: usize = 400;

/// Candidates the exact search's bounds may look at before it gives up: about 15-20 ns each, so a
/// search that cannot finish costs at most about half a second (10-20 diverse jobs are proven in
/// 0-20 ms; 30-40 mostly are not within it).
const EXACT_WORK: usize = 10_000_000;

/// Candidates the neighbourhood search's exact re-solves may look at in all, after a branch and
/// bound that could not finish (about 0.1-0.3 s; see `neighbourhood::MAX_SIZE`).
const NEIGHBOURHOOD_WORK: usize = 30_000_000;

/// Subgradient steps at most: on 1,000 distinct jobs the bound is within 0.02 % of the LP's after
/// 400 (100 leave it 3 % above).
const SUBGRADIENT_STEPS: usize = 400;

/// The plan's weight and cost after a step of the search (`name`), traced: which steps make the
/// final plan, and what each costs in time; with the process's processor time so far where Linux
/// tells it, so that a step's processor time against its wall time says how busy it kept the cores.
fn phase(inst: &Instance, name: &str, sol: &Sol) {
    trace(|| {
        let cpu = process_cpu_ms().map_or_else(String::new, |ms| format!(" cpu {ms} ms"));
        format!("phase {name}: {} {:.2}{cpu}", sol.weight(inst), sol.cost())
    });
}

/// The processor time of every thread of this process so far, in milliseconds: `utime` plus
/// `stime` of `/proc/self/stat`, in Linux's fixed 100 ticks a second. `None` off Linux.
fn process_cpu_ms() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name (which may hold spaces), from the third: utime is the 14th.
    let mut after_name = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let ticks = after_name.next()?.parse::<u64>().ok()? + after_name.next()?.parse::<u64>().ok()?;
    Some(ticks * 10)
}

/// Whether [`trace`] prints: `SPILLWAY_SOLVER_TRACE` read once per process (the searches trace
/// thousands of times a solve), so that a caller can also skip what only a trace would use.
pub(crate) fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("SPILLWAY_SOLVER_TRACE").is_some())
}

/// Development tracing to stderr, on when `SPILLWAY_SOLVER_TRACE` is set.
pub(crate) fn trace(message: impl FnOnce() -> String) {
    if tracing() {
        static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let ms = T0.get_or_init(Instant::now).elapsed().as_secs_f64() * 1e3;
        eprintln!("solver {ms:.1} ms: {}", message());
    }
}

fn solve_greedy(problem: &Problem) -> Plan {
    let start = Instant::now();
    let inst = Instance::new(problem);
    let sol = greedy(&inst);
    finish(&inst, &sol, "greedy", &[trivial_bounds(&inst)], start)
}

/// Priority order, best-ranked (cheapest) feasible candidate first.
fn greedy(inst: &Instance) -> Sol {
    let mut sol = Sol::new(inst);
    for j in priority_order(inst) {
        sol.place(inst, j, inst.cands_of(j));
    }
    sol
}

/// The better of two plans, lexicographically; the first on a tie.
pub(crate) fn pick(inst: &Instance, a: Sol, b: Sol) -> Sol {
    if better((b.weight(inst), b.cost()), (a.weight(inst), a.cost())) { b } else { a }
}

/// A proven bound: no plan has more than `weight`; plans with exactly `weight` cost at least `cost`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bound {
    pub weight: f64,
    pub cost: Option<f64>,
}

/// The tightest of `bounds` on the placed weight.
fn weight_bound(bounds: &[Bound]) -> f64 {
    bounds.iter().map(|b| b.weight).fold(f64::INFINITY, f64::min)
}

/// Whether a plan provably reaches the optimum by meeting `bound` in weight and in cost.
fn meets(inst: &Instance, sol: &Sol, bound: &Bound) -> bool {
    let cost = sol.cost();
    sol.weight(inst) >= bound.weight - 0.5 && bound.cost.is_some_and(|b| cost <= b + 1e-9 * b.abs().max(1.0))
}

/// Whether `bounds` already prove `sol` optimal within [`OPTIMAL_GAP`] (what the plan will report),
/// so that branch and bound has nothing to add.
fn proven(inst: &Instance, sol: &Sol, bounds: &[Bound]) -> bool {
    let weight = sol.weight(inst);
    let weight_bound = weight_bound(bounds);
    let cost_bound =
        bounds.iter().filter(|b| weight >= b.weight - 0.5).filter_map(|b| b.cost).fold(f64::NEG_INFINITY, f64::max);
    weight >= weight_bound - 0.5 && sol.cost() <= cost_bound + OPTIMAL_GAP * sol.cost().abs()
}

/// Bounds that need no optimiser: every job with a feasible candidate placed in full, each as cheaply
/// as it could be alone (capacity and quota ignored). A plan reaching that weight places every such job
/// in full, so it pays at least the sum of those costs.
fn trivial_bounds(inst: &Instance) -> Bound {
    let mut weight = 0.0;
    let mut cost = 0.0;
    for class in &inst.classes {
        let job = inst.job(class.rep);
        let n = class.jobs.len() as f64;
        let cheapest = if job.gang {
            class.cands.iter().map(|c| c.cost).fold(f64::INFINITY, f64::min)
        } else {
            cheapest_cover(&class.cands, job.gpus)
        };
        if cheapest.is_finite() {
            weight += n * f64::from(job.priority) * f64::from(job.gpus);
            cost += n * cheapest;
        }
    }
    Bound { weight, cost: Some(cost) }
}

/// A bound on the cost of every plan placing `weight`, with capacity and quota ignored: the
/// least cost of covering that weight when each job may be taken in part at the cost per weight of
/// its cheapest candidate (a gang job whole; a split job's GPUs each at the cheapest per GPU), the
/// cheapest per weight first. No optimiser: with `cost_bound`'s, where the cost LP would be large.
fn cheapest_at(inst: &Instance, weight: f64) -> f64 {
    let mut jobs: Vec<(f64, f64)> = Vec::new();
    for class in &inst.classes {
        let job = inst.job(class.rep);
        let cost = if job.gang {
            class.cands.iter().map(|c| c.cost).fold(f64::INFINITY, f64::min)
        } else {
            class.cands.iter().map(|c| c.cost_per_gpu()).fold(f64::INFINITY, f64::min) * f64::from(job.gpus)
        };
        let w = inst.weight[class.rep];
        if cost.is_finite() && w > 0.0 {
            jobs.extend(std::iter::repeat_n((cost / w, w), class.jobs.len()));
        }
    }
    jobs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut left, mut cost) = (weight, 0.0);
    for (per, w) in jobs {
        if left <= 0.0 {
            break;
        }
        cost += per * w.min(left);
        left -= w;
    }
    cost
}

/// Above this many GPUs a job's cover cost is bounded per GPU rather than computed exactly (the
/// dynamic programme grows with the GPU count).
const MAX_EXACT_COVER_GPUS: u32 = 1_024;

/// The least a non-gang job of `gpus` GPUs can pay on these candidates with unlimited room: whole VMs
/// (a partly used VM is paid in full), egress per GPU placed. Exact by dynamic programming over the
/// GPUs still to cover; `INFINITY` without candidates.
fn cheapest_cover(cands: &[model::Cand], gpus: u32) -> f64 {
    if gpus > MAX_EXACT_COVER_GPUS {
        // Cost per GPU at full use never exceeds what a GPU costs in any placement: still a bound.
        return cands.iter().map(|c| c.cost_per_gpu() * f64::from(gpus)).fold(f64::INFINITY, f64::min);
    }
    let mut best = vec![f64::INFINITY; gpus as usize + 1];
    best[0] = 0.0;
    for k in 1..=gpus {
        for c in cands {
            let used = k.min(c.gpus);
            let v = c.cost + c.egress_per_gpu * f64::from(used) + best[(k - used) as usize];
            if v < best[k as usize] {
                best[k as usize] = v;
            }
        }
    }
    best[gpus as usize]
}

/// Rounds money to micro-dollars so that the JSON does not show float noise.
fn money(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// Assembles the plan: placements merged per (job, offer) in job then offer order, the reasons of
/// every job not fully placed, and the gap against the tightest applicable bounds.
fn finish(inst: &Instance, sol: &Sol, solver: &str, bounds: &[Bound], start: Instant) -> Plan {
    let p = inst.p;
    let mut assigns = sol.assigns.clone();
    assigns.sort_by_key(|a| (a.job, a.offer));
    let mut placements: Vec<Placement> = Vec::new();
    let mut last: Option<(usize, usize)> = None;
    for a in assigns {
        let offer = &p.offers[a.offer];
        if last == Some((a.job, a.offer))
            && let Some(prev) = placements.last_mut()
        {
            prev.vms += a.vms;
            prev.gpus += a.gpus;
            prev.price_per_hour = money(f64::from(prev.vms) * offer.price_per_hour);
            prev.expected_cost = money(prev.expected_cost + a.cost);
            continue;
        }
        last = Some((a.job, a.offer));
        placements.push(Placement {
            job: p.jobs[a.job].id.clone(),
            region: offer.region.clone(),
            size: offer.size.clone(),
            priority: offer.priority,
            vms: a.vms,
            gpus: a.gpus,
            price_per_hour: money(f64::from(a.vms) * offer.price_per_hour),
            expected_cost: money(a.cost),
        });
    }
    // Jobs of one class that are wholly unplaced have the same reasons: explain each class once,
    // for its first such job (a job partly placed, for itself). The explanations on every core
    // where there are many (9,875 waiting jobs of 10,000 took 100 ms on one).
    let waiting: Vec<usize> = (0..p.jobs.len()).filter(|&j| sol.job_gpus[j] < p.jobs[j].gpus).collect();
    let mut explained_as: Vec<usize> = Vec::with_capacity(waiting.len());
    let mut class_first: Vec<Option<usize>> = vec![None; inst.classes.len()];
    let mut explain_jobs: Vec<usize> = Vec::new();
    for &j in &waiting {
        let at = if sol.job_gpus[j] == 0 {
            *class_first[inst.job_class[j]].get_or_insert_with(|| {
                explain_jobs.push(j);
                explain_jobs.len() - 1
            })
        } else {
            explain_jobs.push(j);
            explain_jobs.len() - 1
        };
        explained_as.push(at);
    }
    let threads = if explain_jobs.len() >= PARALLEL_EXPLANATIONS { parallel::cores() } else { 1 };
    // In chunks, a few per thread so that uneven ones even out, each with its own holders (whose
    // caches are not shared; building them is one pass over the placements); on one thread one
    // chunk, whose holders' caches serve every job.
    let chunk = if threads > 1 { explain_jobs.len().div_ceil(4 * threads) } else { explain_jobs.len() };
    let chunks: Vec<&[usize]> = explain_jobs.chunks(chunk.max(1)).collect();
    let reasons: Vec<Vec<String>> = parallel::par_map(&chunks, threads, |chunk| {
        let holders = explain::Holders::new(inst, sol);
        chunk.iter().map(|&j| explain::reasons(inst, sol, &holders, j)).collect::<Vec<_>>()
    })
    .into_iter()
    .flatten()
    .collect();
    let unplaced = waiting
        .iter()
        .zip(explained_as)
        .map(|(&j, at)| Unplaced { job: p.jobs[j].id.clone(), reasons: reasons[at].clone() })
        .collect();
    let weight = sol.weight(inst);
    let cost = sol.cost();
    let weight_bound = weight_bound(bounds).max(weight);
    let gap = if weight < weight_bound - 0.5 {
        (weight_bound - weight) / weight_bound
    } else {
        let cost_bound = bounds.iter().filter(|b| weight >= b.weight - 0.5).filter_map(|b| b.cost).fold(0.0, f64::max);
        if cost <= 0.0 { 0.0 } else { ((cost - cost_bound) / cost).max(0.0) }
    };
    // Rounded up: a proven gap may be overstated by the rounding, never understated.
    let gap = if gap <= 0.0 { 0.0 } else { (gap * 1e9 - 1e-6).ceil().max(0.0) / 1e9 };
    Plan {
        placements,
        unplaced,
        placed_weight: weight,
        expected_cost: money(cost),
        solver: solver.to_string(),
        optimal: gap <= OPTIMAL_GAP,
        gap,
        solve_ms: (start.elapsed().as_secs_f64() * 1e6).round() / 1e3,
    }
}

/// Relative gap under which a plan is reported optimal: the tolerance of the LP bounds.
pub const OPTIMAL_GAP: f64 = 1e-6;
