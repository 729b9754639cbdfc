//! Heavy waiting jobs forced in, as further starts for the searches: a gang job the plan leaves
//! waiting placed on one of its candidates after the lightest jobs holding what it lacks there are
//! taken out, those given room again by exact re-solves of the jobs holding what each then lacks
//! (`neighbourhood::repair`), the rest placed by the weight search. The searches' own moves that
//! force a job in re-place what they take out one move at a time, and their kicks take the plan
//! back where it came from; a plan with the job forced in and the others re-placed together starts
//! them elsewhere. The heaviest of a job's forced plans is searched as the first start was (the
//! caller's `search`), and kept only when heavier than the plan.
//!
//! The same forcing moves a placed job that costs far more than its cheapest candidate onto a
//! cheaper one ([`force_cheaper`]): the room it needs there is held by jobs that must move
//! elsewhere, whose room is held by others in turn, across every region's tight pools. On an
//! independent 60-job problem (split-60-8) an 8-GPU H100 gang cost 1,368 of the plan's 14,277
//! where two 4-GPU A10 VMs cost 284, and the cheaper plan moved 16 jobs across four regions:
//! neither the neighbourhood search's exact re-solve nor the MILP found it on exactly those 16
//! jobs (10^9 units of work, 30 times the MILP's budget), while one forcing, the weight search
//! and one neighbourhood search reach within 0.8 % of HiGHS's best in 11 s (BENCHMARKS.md, "Dear
//! jobs forced onto cheaper candidates (session 59)").

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use crate::model::{Assign, Cand, Instance, Placements, Sol};
use crate::search::Packing;

/// Waiting gang jobs tried at most, heaviest first, and candidates per job, cheapest first.
const JOBS: usize = 6;
const CANDIDATES: usize = 4;

/// Placed gang jobs [`force_cheaper`] tries at most, those costing most above their cheapest
/// candidate first, and the least that excess must be, as a share of the plan's cost. Five, not
/// three: on the 114 independent problems of 60-100 jobs 2 plans heavier and 4 cheaper (tiny-100-8
/// reaches HiGHS's proven optimum from +1.08 %), 1 dearer by 0.19 %, for 1.18 times the time
/// (median; BENCHMARKS.md, "Five dear jobs forced (session 60)"). Eight, not five: on 132
/// independent problems of 60 and 100 jobs (seeds 8, 10-13 and 15, most drawn after the five
/// were chosen) 7 plans better and none worse (huge-gangs-100-15 from 1.06 % above HiGHS's cost
/// to HiGHS's, all-spot-100-13 0.65 % cheaper), for 1.02 times the time (median; mean 3.6 ->
/// 3.9 s; BENCHMARKS.md, "Eight dear jobs forced (session 72)"). Split jobs forced whole onto
/// one offer, after these, changed none of the 114 plans: only gang jobs are tried.
const DEAR_JOBS: usize = 8;
const DEAR_SHARE: f64 = 0.01;

/// Jobs re-solved with each job taken out, at most, and the work each re-solve may take.
const REPAIR_SIZE: usize = 16;
const REPAIR_WORK: usize = 2_000_000;

/// Jobs taken out at most: where the room needs more, the candidate is skipped.
const MAX_TAKEN_OUT: usize = 24;

/// Forces in, one after the other, up to [`JOBS`] of the heaviest gang jobs `sol` leaves waiting
/// ([`attempt`]); a job's plan that is heavier than `sol` replaces it. The jobs side by side on the
/// cores, each from `sol`: a job's plan counts only when the jobs before it changed
/// nothing (one after the other would have started it from the same plan, so the plan does not
/// depend on the cores); after one that changes `sol`, the jobs after it start again from the new
/// plan. Returns whether `sol` changed.
pub(crate) fn force_in(
    inst: &Instance,
    sol: &mut Sol,
    search: impl Fn(Sol) -> Sol + Sync,
    deadline: Option<Instant>,
) -> bool {
    let mut waiting: Vec<usize> = (0..inst.p.jobs.len())
        .filter(|&j| inst.job(j).gang && sol.job_gpus[j] == 0 && !inst.cands_of(j).is_empty())
        .collect();
    waiting.sort_by(|&a, &b| inst.weight[b].total_cmp(&inst.weight[a]).then(a.cmp(&b)));
    waiting.truncate(JOBS);
    let cores = crate::parallel::cores();
    let mut changed = false;
    let mut next = 0;
    while next < waiting.len() && deadline.is_none_or(|d| Instant::now() < d) {
        // A job the plan has placed since (the one that changed it moved it in) is not forced in.
        let ahead: Vec<usize> = waiting[next..].iter().copied().filter(|&j| sol.job_gpus[j] == 0).collect();
        let first = crate::parallel::par_first(&ahead, cores, 1, |&j| attempt(inst, sol, j, &search, deadline));
        let Some((k, plan)) = first.into_iter().next() else { break };
        *sol = plan;
        changed = true;
        next = waiting.iter().position(|&j| j == ahead[k]).map_or(waiting.len(), |i| i + 1);
    }
    changed
}

/// The plan with the waiting gang job `j` forced in, when heavier than `sol`: on each of up to
/// [`CANDIDATES`] of its candidates ([`forced`]), the first such plan heavier than `sol`, else the
/// heaviest of them searched (`search`) when that is heavier.
fn attempt(
    inst: &Instance,
    sol: &Sol,
    j: usize,
    search: &impl Fn(Sol) -> Sol,
    deadline: Option<Instant>,
) -> Option<Sol> {
    let mut heaviest: Option<Sol> = None;
    for c in inst.cands_of(j).iter().take(CANDIDATES) {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return None;
        }
        let Some(trial) = forced(inst, sol, j, c, deadline) else { continue };
        crate::trace(|| {
            let (w, cost) = (trial.weight(inst), trial.cost());
            format!("force in {} on offer {}: {w} cost {cost:.2}", inst.p.jobs[j].id, c.offer)
        });
        if trial.weight(inst) > sol.weight(inst) + 0.5 {
            return Some(trial);
        }
        heaviest = Some(match heaviest {
            Some(h) => crate::pick(inst, h, trial),
            None => trial,
        });
    }
    let searched = search(heaviest?);
    crate::trace(|| {
        let (w, cost) = (searched.weight(inst), searched.cost());
        format!("force in {}: searched {w} cost {cost:.2} (the plan {})", inst.p.jobs[j].id, sol.weight(inst))
    });
    (searched.weight(inst) > sol.weight(inst) + 0.5).then_some(searched)
}

/// Moves, one after the other, up to [`DEAR_JOBS`] placed gang jobs that cost far above their
/// cheapest candidate ([`DEAR_SHARE`] of `sol`'s cost) onto cheaper candidates: per job, on each of
/// up to [`CANDIDATES`] candidates cheaper than where it is, cheapest first and side by side on the
/// cores, the job taken out and forced in there ([`forced`]), each such plan searched (`search`:
/// the weight search gives back what the forcing left waiting; a forced plan equal to one searched
/// before is not searched again); the best of them searched further (`then`; not again when an
/// earlier job's best was the same plan), kept when better than `sol`. The jobs are chosen from `sol` as it is at the start, and each starts from the plan
/// the ones before left. Returns whether `sol` changed.
pub(crate) fn force_cheaper(
    inst: &Instance,
    sol: &mut Sol,
    search: impl Fn(Sol) -> Sol + Sync,
    then: impl Fn(Sol) -> Sol,
    deadline: Option<Instant>,
) -> bool {
    let mut dear: Vec<(f64, usize)> = (0..inst.p.jobs.len())
        .filter(|&j| inst.job(j).gang && sol.job_gpus[j] > 0)
        .map(|j| (sol.job_cost[j] - crate::neighbourhood::cheapest(inst, j), j))
        .filter(|&(excess, _)| excess >= DEAR_SHARE * sol.cost())
        .collect();
    dear.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    dear.truncate(DEAR_JOBS);
    let cores = crate::parallel::cores();
    // The searched plan of each forced plan searched so far. The forcing often gives back a plan
    // searched before (the same plan on two candidates, where the job went back, or one an earlier
    // job's forcing gave too), and the searches are deterministic: they would only repeat
    // themselves. On the 44 independent problems of 60-100 jobs of seeds 10 and 11, 148 of the 453
    // forced plans were repeats (`SPILLWAY_SOLVER_TRACE=1` prints the count per job).
    let mut searched: HashMap<Placements, Sol> = HashMap::new();
    // The best plans searched further so far: `then` is deterministic too, and what it gave for
    // one was no better than the plan then (or the plan changed to it), so no better than the
    // plan now, which only gets better.
    let mut furthered: HashSet<Placements> = HashSet::new();
    let mut changed = false;
    for (_, j) in dear {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let mut base = sol.clone();
        while let Some(i) = base.assigns.iter().rposition(|a| a.job == j) {
            base.release(inst, i);
        }
        let mut cheaper: Vec<Cand> = inst.cands_of(j).iter().copied().filter(|c| c.cost < sol.job_cost[j]).collect();
        cheaper.sort_by(|a, b| a.cost.total_cmp(&b.cost).then(a.offer.cmp(&b.offer)));
        cheaper.truncate(CANDIDATES);
        let forced: Vec<Option<(Placements, Sol)>> = crate::parallel::par_map(&cheaper, cores, |c| {
            forced(inst, &base, j, c, deadline).map(|plan| (plan.placements_in_order(), plan))
        });
        // Each plan not searched yet, once, the searches side by side.
        let mut fresh: Vec<&(Placements, Sol)> = Vec::new();
        for plan in forced.iter().flatten() {
            if !searched.contains_key(&plan.0) && fresh.iter().all(|f| f.0 != plan.0) {
                fresh.push(plan);
            }
        }
        crate::trace(|| {
            let all = forced.iter().flatten().count();
            format!(
                "force cheaper {}: {} forced plans searched, {} repeats",
                inst.p.jobs[j].id,
                fresh.len(),
                all - fresh.len()
            )
        });
        // Each forced plan against what its search made of it, and the time it took: which
        // searches pay (BENCHMARKS.md, "The exact search's bounds without the per-node scans").
        let found = crate::parallel::par_map(&fresh, cores, |(_, plan)| {
            let started = Instant::now();
            let found = search(plan.clone());
            crate::trace(|| {
                format!(
                    "force cheaper {} forced {} {:.2} searched {} {:.2} in {:.0} ms, plan {} {:.2}",
                    inst.p.jobs[j].id,
                    plan.weight(inst),
                    plan.cost(),
                    found.weight(inst),
                    found.cost(),
                    started.elapsed().as_secs_f64() * 1e3,
                    sol.weight(inst),
                    sol.cost()
                )
            });
            found
        });
        searched.extend(fresh.into_iter().map(|(key, _)| key.clone()).zip(found));
        let plans = forced.iter().zip(&cheaper).filter_map(|(plan, c)| {
            let plan = &searched[&plan.as_ref()?.0];
            crate::trace(|| {
                let (w, cost) = (plan.weight(inst), plan.cost());
                format!("force cheaper {} on offer {}: {w} cost {cost:.2}", inst.p.jobs[j].id, c.offer)
            });
            Some(plan.clone())
        });
        let Some(best) = plans.reduce(|a, b| crate::pick(inst, a, b)) else { continue };
        if !furthered.insert(best.placements_in_order()) {
            crate::trace(|| format!("force cheaper {}: its best plan searched further before", inst.p.jobs[j].id));
            continue;
        }
        let before = crate::tracing().then(|| (best.weight(inst), best.cost()));
        let best = then(best);
        if let Some((weight, cost)) = before {
            crate::trace(|| {
                let id = &inst.p.jobs[j].id;
                format!("force cheaper {id} then {weight} {cost:.2} -> {} {:.2}", best.weight(inst), best.cost())
            });
        }
        if crate::model::better((best.weight(inst), best.cost()), (sol.weight(inst), sol.cost())) {
            *sol = best;
            changed = true;
        }
    }
    changed
}

/// `sol` with the waiting gang job `j` (for [`force_cheaper`], a placed one taken out first) on
/// its candidate `c`: the placed jobs holding a pool (or the offer's capacity) that lacks room for
/// it taken out, the lightest first, until it fits; then waiting jobs placed where they fit, the
/// jobs taken out given room again, each by re-solving it exactly with the jobs holding what it
/// lacks on its candidates, and the weight search; the cost search when that made it heavier than
/// `sol`. `None` when the room needs more than [`MAX_TAKEN_OUT`] jobs taken out.
fn forced(inst: &Instance, sol: &Sol, j: usize, c: &Cand, deadline: Option<Instant>) -> Option<Sol> {
    let p = inst.p;
    let o = c.offer;
    let offer = &p.offers[o];
    let need = u64::from(offer.vcpus_per_vm) * u64::from(c.vms);
    let mut trial = sol.clone();
    let mut out: Vec<(usize, u32)> = Vec::new();
    while trial.room(inst, o) < c.vms {
        if out.len() == MAX_TAKEN_OUT {
            return None;
        }
        let short_pools: Vec<usize> = inst.offer_pools[o]
            .iter()
            .copied()
            .filter(|&q| inst.pool_limit[q].saturating_sub(trial.pool_used[q]) < need)
            .collect();
        let short_cap = offer.capacity_vms.is_some_and(|cap| cap.saturating_sub(trial.cap_used[o]) < c.vms);
        let holds = |a: &Assign| {
            (short_cap && a.offer == o) || inst.offer_pools[a.offer].iter().any(|q| short_pools.contains(q))
        };
        let placed_weight = |k: usize| f64::from(p.jobs[k].priority) * f64::from(trial.job_gpus[k]);
        let lightest = trial
            .assigns
            .iter()
            .filter(|a| holds(a))
            .map(|a| a.job)
            .min_by(|&a, &b| placed_weight(a).total_cmp(&placed_weight(b)).then(a.cmp(&b)))?;
        out.push((lightest, trial.job_gpus[lightest]));
        while let Some(i) = trial.assigns.iter().rposition(|a| a.job == lightest) {
            trial.release(inst, i);
        }
    }
    trial.try_gang(inst, j, c);
    trial.improve(inst);
    // Room made for each job taken out on its cheapest candidates.
    let seeds: Vec<(usize, u32, Vec<usize>)> =
        out.iter().map(|&(k, gpus)| (k, gpus, inst.cands_of(k).iter().map(|c| c.offer).collect())).collect();
    crate::neighbourhood::repair(inst, &mut trial, &seeds, REPAIR_SIZE, REPAIR_WORK, deadline);
    let mut pack = Packing::from_sol(inst, &trial);
    pack.improve_weight(deadline);
    let trial = crate::pick(inst, trial, pack.to_plan());
    if trial.weight(inst) > sol.weight(inst) + 0.5 {
        Some(crate::cost_search(inst, trial, None, deadline))
    } else {
        Some(trial)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Problem;

    /// One region's T4 quota holds two 1-GPU VMs, taken by two priority-1 jobs that could run in a
    /// second region; a priority-10 two-GPU job that runs only in the first waits. Forced in, it
    /// takes their room and both move to the second region.
    #[test]
    fn a_heavy_waiting_job_takes_the_room_of_light_jobs_that_move() {
        let offer = |region: &str| {
            format!(
                r#"{{"region": "{region}", "size": "Standard_NC4as_T4_v3", "priority": "regular",
                    "gpu_model": "T4", "gpus_per_vm": 1, "vcpus_per_vm": 4,
                    "family": "standardNCASv3_T4Family", "price_per_hour": 1.0}}"#
            )
        };
        let quota = |region: &str| format!(r#"{{"region": "{region}", "pool": "cores", "vcpus": 8}}"#);
        let job = |id: &str, gpus: u32, priority: u32, regions: &str| {
            format!(
                r#"{{"id": "{id}", "gpus": {gpus}, "priority": {priority}, "gpu_models": ["T4"],
                    "duration_hours": 1, "regions": [{regions}]}}"#
            )
        };
        let json = format!(
            r#"{{"offers": [{}, {}], "quotas": [{}, {}], "jobs": [{}, {}, {}]}}"#,
            offer("eastus"),
            offer("westus"),
            quota("eastus"),
            quota("westus"),
            job("x", 1, 1, r#""eastus", "westus""#),
            job("y", 1, 1, r#""eastus", "westus""#),
            job("j", 2, 10, r#""eastus""#),
        );
        let p = Problem::from_json_str(&json).expect("a valid problem");
        let inst = Instance::new(&p);
        let mut sol = Sol::new(&inst);
        let eastus = |j: usize| *inst.cands_of(j).iter().find(|c| p.offers[c.offer].region == "eastus").unwrap();
        assert!(sol.try_gang(&inst, 0, &eastus(0)) && sol.try_gang(&inst, 1, &eastus(1)));
        assert_eq!(sol.weight(&inst), 2.0, "x and y in eastus, j waiting");
        assert!(force_in(&inst, &mut sol, |s| s, None));
        assert_eq!(sol.weight(&inst), 22.0);
        let region = |j: usize| {
            let a = sol.assigns.iter().find(|a| a.job == j).expect("placed");
            p.offers[a.offer].region.as_str()
        };
        assert_eq!([region(0), region(1), region(2)], ["westus", "westus", "eastus"]);
        crate::check::check(&p, &crate::finish(&inst, &sol, "force in", &[], Instant::now())).expect("feasible");
    }
}
