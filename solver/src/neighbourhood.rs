//! Large neighbourhood search: a few related jobs taken out of the plan and placed again by
//! the exact search (`exact`), every other placement fixed; kept when the sub-plan places more
//! weight, or the same for less.
//!
//! The moves of `search` change one or two jobs at a time, and a cheaper plan can need five to move
//! at once (a spot pool freed by moving three jobs to regular VMs so that a fourth can take it). A
//! neighbourhood of about ten jobs is small enough to search exhaustively in a millisecond or two,
//! and large enough to hold such a chain when its jobs are chosen as related: jobs that draw on the
//! same quota pools or offers as a seed job. At the end, where one job costs much more than on its
//! cheapest candidate (a gang on many spot VMs, whose eviction risk grows with their number),
//! chains of 12-24 jobs in its way are grown from it. Where the LP over the whole problem was solved,
//! the jobs the plan places most unlike it make a neighbourhood too ([`follow_relaxation`]).

use std::collections::HashSet;
use std::time::Instant;

use crate::exact;
use crate::model::{Cand, Instance, Resources, Sol};
use crate::search::xorshift;

/// Jobs above which the search is not tried. Up to 100 it takes 0.2-0.5 s more and finds plans 1-10 %
/// cheaper at 60-100 jobs (a few more weight too), where the branch and bound does not run; on
/// 100-300 diverse jobs it took 0.3-0.8 s of CPU for +0.02 % weight on most. The control loop's
/// method runs no search, so only `Best` (`spillway plan`, the advisor) pays for it.
pub(crate) const MAX_JOBS: usize = 100;

/// Jobs in a neighbourhood at first, and at most: a neighbourhood of six jobs is searched in well
/// under a millisecond; the size grows by two whenever [`PATIENCE`] neighbourhoods in a row change
/// nothing (a chain of five moves needs a neighbourhood that holds all five). Up to 24 since the
/// exact search's cost bound acts in neighbourhoods (16 before): with [`SUBSET_WORK`] and the
/// search's whole budget tripled, a random 36-job case went from +3.3 % to the optimum's cost, the
/// independent issue-40 from +3.7 % to +2.0 %, and the cost property failed on 1 of 30 seeds
/// instead of 2, for about 1.5 times the time on 12-40 jobs (mean 100 ms, max 400).
const FIRST_SIZE: usize = 6;
const MAX_SIZE: usize = 24;

/// Work one neighbourhood's search may take: it keeps the best it found when it runs out (proving
/// that nothing better exists is not the point here), so that many neighbourhoods get looked at.
/// On the random 36-job case and issue-40 (`SPILLWAY_SOLVER_TRACE=1` prints each re-solve's work)
/// every neighbourhood of up to 14 jobs finished (median 10,000-60,000), most of 16-18 jobs did,
/// and about half of 20.
const SUBSET_WORK: usize = 1_000_000;

/// Neighbourhoods of one size tried in a row without a change before the size grows.
const PATIENCE: usize = 20;

/// Steps of [`improve_drawn`]'s loop drawn ahead per core (less one: seven on two cores), their
/// re-solves side by side: 1.5 % of re-solves change the plan (972 of 66,237 on the 44 independent
/// problems of 60-100 jobs of seeds 10 and 11), so most steps drawn ahead are steps the loop takes.
/// A re-solve takes about a millisecond at 60-100 jobs, against tens of microseconds to start the
/// threads. The plan is the one the loop finds one step after the other; on issue-100-10 the
/// polish's loop (167 re-solves) took 84 ms on two cores, 119 ms on one (`taskset -c 0`;
/// `SPILLWAY_SOLVER_TRACE=1` prints each loop's re-solves, changes and time).
const AHEAD: usize = 4;

/// A step of [`improve_drawn`]'s loop drawn ahead: its neighbourhood (`None` when searched before
/// with nothing changed since), and the loop's state after drawing it, to go on from should its
/// re-solve change the plan.
struct Step<R> {
    subset: Option<Vec<usize>>,
    next: R,
    round: usize,
    size: usize,
}

/// Share of the plan's cost by which one job must cost more than on its cheapest candidate for
/// [`improve`] to end with neighbourhoods grown from it ([`DEAR_SIZES`]). The loop's seeds are
/// drawn uniformly, and reach the sizes a long chain needs late: on an independent 60-job problem
/// (all-spot-60-3) one 16-GPU gang job on sixteen 1-GPU spot VMs held 37 % of the plan's cost
/// (their eviction risk), and the chain that moves it needs 16 jobs.
const DEAR_SHARE: f64 = 0.05;
const DEAR_SIZES: [usize; 4] = [12, 16, 20, 24];

/// Jobs the end grows neighbourhoods from, one after the other while each helps.
const DEAR_SEEDS: usize = 3;

/// Improves `sol` by re-solving neighbourhoods until `work_limit` (candidates looked at by the
/// exact search, as in `exact`) is spent, neighbourhoods of [`MAX_SIZE`] change nothing either, or
/// the deadline passes; then from the dearest job ([`DEAR_SHARE`]). Deterministic.
pub(crate) fn improve(inst: &Instance, sol: &mut Sol, lambda: &[f64], work_limit: usize, deadline: Option<Instant>) {
    improve_drawn(inst, sol, lambda, work_limit, 0, deadline);
}

/// [`improve`] with the neighbourhoods drawn otherwise: `draw` picks the sequence (0 is
/// [`improve`]'s). A plan no neighbourhood of one draw improves is often improved by another's: the
/// jobs a cheaper plan moves together are few of the many subsets of a size.
pub(crate) fn improve_drawn(
    inst: &Instance,
    sol: &mut Sol,
    lambda: &[f64],
    work_limit: usize,
    draw: u64,
    deadline: Option<Instant>,
) {
    let jobs: Vec<usize> = (0..inst.p.jobs.len()).filter(|&j| !inst.cands_of(j).is_empty()).collect();
    if jobs.len() < 2 {
        return;
    }
    let resources = inst.resources();
    let (_, offer_res) = &resources;
    // Per job, the shared resources any of its candidates draws on.
    let touches: Vec<Vec<usize>> = (0..inst.p.jobs.len())
        .map(|j| {
            let mut r: Vec<usize> =
                inst.cands_of(j).iter().flat_map(|c| offer_res[c.offer].iter().map(|&(r, _)| r)).collect();
            r.sort_unstable();
            r.dedup();
            r
        })
        .collect();
    let mut next = xorshift(0xD1B5_4A32_D192_ED03 ^ draw.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut work = 0;
    let mut idle = 0;
    let mut tried: HashSet<Vec<usize>> = HashSet::new();
    let mut size = FIRST_SIZE;
    let mut round = 0usize;
    let cores = crate::parallel::cores();
    let (began, mut resolves, mut changes) = (Instant::now(), 0, 0);
    while work < work_limit && size <= MAX_SIZE && deadline.is_none_or(|d| Instant::now() < d) {
        // The next steps drawn as the loop would draw them if none changed the plan (the draws
        // depend on the plan only through what it holds), and their re-solves run side by side
        // (see [`AHEAD`]). Only as many as have their whole budget with one to spare (a re-solve
        // may overrun its budget by a node), so that each does what it would one after the other.
        let whole_budgets = (work_limit - work) / SUBSET_WORK;
        let ahead = if cores > 1 { (cores * AHEAD).min(whole_budgets).saturating_sub(1).max(1) } else { 1 };
        let mut steps: Vec<Step<_>> = Vec::with_capacity(ahead);
        while steps.len() < ahead && size <= MAX_SIZE {
            let mut subset = if round.is_multiple_of(2) {
                related(&jobs, &touches, size, &mut next)
            } else {
                blocking(inst, sol, &jobs, &resources, None, size, &mut next)
            };
            round += 1;
            subset.sort_unstable();
            // A neighbourhood searched before, with nothing changed since, cannot change anything
            // now.
            let fresh = tried.insert(subset.clone());
            steps.push(Step { subset: fresh.then_some(subset), next: next.clone(), round, size });
            idle += 1;
            if idle == PATIENCE {
                idle = 0;
                size += 2;
            }
        }
        let budget = SUBSET_WORK.min(work_limit - work);
        let resolved = crate::parallel::par_map(&steps, cores, |step| {
            let subset = step.subset.as_ref()?;
            let mut trial = sol.clone();
            let (changed, spent) =
                exact::resolve_subset(inst, &mut trial, subset, &resources, lambda, budget, deadline);
            Some((changed.then_some(trial), spent))
        });
        // The steps in order, up to the first that changed the plan (the exact re-solve changes it
        // only for the better): the steps after it drew from the plan before it, and are drawn again.
        for (step, outcome) in steps.into_iter().zip(resolved) {
            let Some((changed, spent)) = outcome else { continue };
            work += spent;
            resolves += 1;
            if let Some(better) = changed {
                changes += 1;
                *sol = better;
                (next, round, size, idle) = (step.next, step.round, step.size, 0);
                tried.clear();
                crate::trace(|| {
                    format!(
                        "neighbourhood: {} cost {:.2} size {} round {round} work {work}",
                        sol.weight(inst),
                        sol.cost(),
                        step.subset.as_ref().map_or(0, Vec::len)
                    )
                });
                break;
            }
        }
    }
    crate::trace(|| {
        let ms = began.elapsed().as_secs_f64() * 1e3;
        format!(
            "neighbourhood loop: {resolves} re-solves, {changes} changed the plan, work {work}, {ms:.1} ms on {cores} cores"
        )
    });
    for _ in 0..DEAR_SEEDS {
        let Some(seed) = dearest(inst, sol) else { return };
        let mut changed = false;
        for size in DEAR_SIZES {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return;
            }
            let mut subset = blocking(inst, sol, &jobs, &resources, Some(seed), size, &mut next);
            subset.sort_unstable();
            (changed, _) = exact::resolve_subset(inst, sol, &subset, &resources, lambda, SUBSET_WORK, deadline);
            if changed {
                crate::trace(|| {
                    format!("neighbourhood of the dearest job: {} cost {:.2} size {size}", sol.weight(inst), sol.cost())
                });
                break;
            }
        }
        if !changed {
            return;
        }
    }
}

/// Offers of a seed's list that [`repair`] makes room on, at most, the first first (a re-solve each).
const REPAIR_OFFERS: usize = 8;

/// Re-solves, exactly, up to `size` jobs with each of `seeds` that `sol` leaves short of `want`
/// GPUs, one seed after the other: per offer of the first [`REPAIR_OFFERS`] of the seed's list (the
/// offers it is best placed on first), the jobs holding most of what it
/// lacks there ([`holding`]), then a chain grown from it ([`blocking`]), until it has its GPUs. The
/// repair of a plan that moved many jobs at once (`recost::follow_lp_whole`) and left a few
/// without room, which the weight search would give room anywhere, at any cost. Returns whether
/// `sol` changed.
pub(crate) fn repair(
    inst: &Instance,
    sol: &mut Sol,
    seeds: &[(usize, u32, Vec<usize>)],
    size: usize,
    work: usize,
    deadline: Option<Instant>,
) -> bool {
    let jobs: Vec<usize> = (0..inst.p.jobs.len()).filter(|&j| !inst.cands_of(j).is_empty()).collect();
    let resources = inst.resources();
    let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
    let mut changed_any = false;
    for (seed, want, offers) in seeds {
        let (seed, want) = (*seed, *want);
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let mut subsets: Vec<Vec<usize>> =
            offers.iter().take(REPAIR_OFFERS).map(|&o| holding(inst, sol, &resources, seed, o, size)).collect();
        subsets.push(blocking(inst, sol, &jobs, &resources, Some(seed), size, &mut next));
        for mut subset in subsets {
            if sol.job_gpus[seed] >= want {
                break;
            }
            subset.sort_unstable();
            let (changed, _) = exact::resolve_subset(inst, sol, &subset, &resources, &[], work, deadline);
            changed_any |= changed;
        }
    }
    changed_any
}

/// `seed` and up to `size` − 1 jobs holding the resources `seed` lacks to be placed on `offer`
/// (its whole gang, or one VM of a split job), those holding most of them first.
fn holding(inst: &Instance, sol: &Sol, resources: &Resources, seed: usize, offer: usize, size: usize) -> Vec<usize> {
    let (free0, offer_res) = resources;
    let mut free = free0.clone();
    for a in &sol.assigns {
        for &(r, q) in &offer_res[a.offer] {
            free[r] -= q * i64::from(a.vms);
        }
    }
    let vms = inst
        .cands_of(seed)
        .iter()
        .find(|c| c.offer == offer)
        .map_or(1, |c| if inst.job(seed).gang { c.vms } else { 1 });
    let lacking: Vec<usize> =
        offer_res[offer].iter().filter(|&&(r, q)| q * i64::from(vms) > free[r]).map(|&(r, _)| r).collect();
    let mut held: Vec<(i64, usize)> = Vec::new();
    for a in &sol.assigns {
        if a.job == seed {
            continue;
        }
        let amount: i64 =
            offer_res[a.offer].iter().filter(|(r, _)| lacking.contains(r)).map(|&(_, q)| q * i64::from(a.vms)).sum();
        if amount > 0 {
            match held.iter_mut().find(|(_, j)| *j == a.job) {
                Some(h) => h.0 += amount,
                None => held.push((amount, a.job)),
            }
        }
    }
    held.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    std::iter::once(seed).chain(held.iter().map(|&(_, j)| j)).take(size).collect()
}

/// Jobs in the neighbourhoods [`follow_relaxation`] takes where the plan and the LP differ most, one
/// after the other, and the work each may take. A 16-job neighbourhood of 60-100-job problems took
/// 1-20 million (up to 60 ms); 20 and 24 jobs rarely finished in 20 million and changed nothing more.
const RELAXATION_SIZES: [usize; 3] = [10, 13, 16];
const RELAXATION_WORK: usize = 20_000_000;

/// Re-solves, exactly, the jobs where the plan differs most from the LP's solution at the most
/// weight and least cost (`values`, per class, per candidate: jobs for a gang class, VMs for a
/// non-gang one), the weight at stake first: the relaxation-induced neighbourhood (RINS in MILP
/// solvers), every other job fixed. The jobs the LP would place differently are the ones worth
/// moving together, where the random neighbourhoods and those grown from one job hold a few of
/// them: on 70 independent 60-100-job problems five plans cheaper (egress-60-3 3.6 %, deny-sizes-
/// 100-3 3.1 %), none worse, no weight gained. Returns whether `sol` changed.
pub(crate) fn follow_relaxation(
    inst: &Instance,
    sol: &mut Sol,
    values: &[Vec<f64>],
    lambda: &[f64],
    deadline: Option<Instant>,
) -> bool {
    let resources = inst.resources();
    let mut changed_any = false;
    for size in RELAXATION_SIZES {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let at_stake = disagreement(inst, sol, values);
        let mut order: Vec<(f64, usize)> =
            at_stake.iter().enumerate().filter(|&(_, &w)| w > 1e-6).map(|(j, &w)| (w, j)).collect();
        if order.len() < 2 {
            break;
        }
        order.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut subset: Vec<usize> = order.iter().take(size).map(|&(_, j)| j).collect();
        subset.sort_unstable();
        let (changed, work) = exact::resolve_subset(inst, sol, &subset, &resources, lambda, RELAXATION_WORK, deadline);
        crate::trace(|| {
            format!(
                "relaxation's neighbourhood of {} (of {} differing): {} cost {:.2}, changed {changed}, work {work}",
                subset.len(),
                order.len(),
                sol.weight(inst),
                sol.cost()
            )
        });
        changed_any |= changed;
        if order.len() <= size {
            break;
        }
    }
    changed_any
}

/// Per job, the weight by which the plan's placement of its class differs from the LP's: Σ over the
/// class's candidates of |LP − plan| (jobs or VMs) times the weight one unit places.
fn disagreement(inst: &Instance, sol: &Sol, values: &[Vec<f64>]) -> Vec<f64> {
    let mut planned: Vec<Vec<f64>> = inst.classes.iter().map(|c| vec![0.0; c.cands.len()]).collect();
    // Weight the plan places on offers that are not the class's candidates (none, as the searches
    // place jobs; counted should one ever be).
    let mut astray = vec![0.0; inst.classes.len()];
    for a in &sol.assigns {
        let c = inst.job_class[a.job];
        let job = inst.job(a.job);
        match inst.classes[c].cands.iter().position(|k| k.offer == a.offer) {
            Some(k) => planned[c][k] += if job.gang { 1.0 } else { f64::from(a.vms) },
            None => astray[c] += f64::from(job.priority) * f64::from(a.gpus),
        }
    }
    let mut out = vec![0.0; inst.p.jobs.len()];
    for (c, class) in inst.classes.iter().enumerate() {
        let Some(lp) = values.get(c).filter(|v| v.len() == class.cands.len()) else { continue };
        let rep = class.rep;
        let job = inst.job(rep);
        let mut diff = astray[c];
        for (k, cand) in class.cands.iter().enumerate() {
            let per_unit = if job.gang { inst.weight[rep] } else { f64::from(job.priority) * f64::from(cand.gpus) };
            diff += (lp[k] - planned[c][k]).abs() * per_unit;
        }
        for &j in &class.jobs {
            out[j] = diff;
        }
    }
    out
}

/// The placed job whose cost lies furthest above its cheapest candidate's, when that excess is at
/// least [`DEAR_SHARE`] of the plan's cost.
fn dearest(inst: &Instance, sol: &Sol) -> Option<usize> {
    let mut best: Option<(f64, usize)> = None;
    for j in 0..inst.p.jobs.len() {
        if sol.job_gpus[j] < inst.job(j).gpus || inst.cands_of(j).is_empty() {
            continue;
        }
        let excess = sol.job_cost[j] - cheapest(inst, j);
        if excess >= DEAR_SHARE * sol.cost() && best.is_none_or(|(e, _)| excess > e) {
            best = Some((excess, j));
        }
    }
    best.map(|(_, j)| j)
}

/// What the whole of job `j` costs on candidate `c` (a split job at the candidate's cost per GPU).
fn whole_cost(inst: &Instance, j: usize, c: &Cand) -> f64 {
    if inst.job(j).gang { c.cost } else { c.cost_per_gpu() * f64::from(inst.job(j).gpus) }
}

/// What the whole of job `j` costs on its cheapest candidate.
pub(crate) fn cheapest(inst: &Instance, j: usize) -> f64 {
    inst.cands_of(j).iter().map(|c| whole_cost(inst, j, c)).fold(f64::INFINITY, f64::min)
}

/// A chain of jobs in each other's way: a seed job (`seed`, or one drawn among those unplaced or
/// placed dearer than their cheapest candidate), then, breadth first, the jobs holding a resource that one of the chain's better
/// candidates lacks (for the seed: candidates cheaper than where it is; for the others: any other
/// candidate, where it would go to make room). The moves that lower cost by five jobs at once follow
/// such chains, and jobs merely sharing a pool rarely hold all of them.
fn blocking(
    inst: &Instance,
    sol: &Sol,
    jobs: &[usize],
    resources: &Resources,
    seed: Option<usize>,
    size: usize,
    next: &mut impl FnMut() -> u64,
) -> Vec<usize> {
    let (free0, offer_res) = resources;
    let n = inst.p.jobs.len();
    let mut free = free0.clone();
    // Per job, the offers it is on (a split job may be on several).
    let mut at: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut holders: Vec<Vec<usize>> = vec![Vec::new(); free.len()];
    for a in &sol.assigns {
        at[a.job].push(a.offer);
        for &(r, q) in &offer_res[a.offer] {
            free[r] -= q * i64::from(a.vms);
            holders[r].push(a.job);
        }
    }
    // What the whole job costs on a candidate, and the least it uses of it (a split job can take a
    // single VM of it).
    let whole = |j: usize, c: &Cand| whole_cost(inst, j, c);
    let least = |j: usize, c: &Cand| if inst.job(j).gang { c.vms } else { 1 };
    // Seeds: jobs that could be better off, the more so the likelier.
    let gain = |j: usize| -> f64 {
        if sol.job_gpus[j] < inst.job(j).gpus { f64::INFINITY } else { sol.job_cost[j] - cheapest(inst, j) }
    };
    let seed = match seed {
        Some(seed) => seed,
        None => {
            let candidates: Vec<usize> = jobs.iter().copied().filter(|&j| gain(j) > 1e-6).collect();
            let Some(&seed) = candidates.get((next() % candidates.len().max(1) as u64) as usize) else {
                return Vec::new();
            };
            seed
        }
    };
    let mut chain = vec![seed];
    let mut queue = std::collections::VecDeque::from([seed]);
    while let Some(j) = queue.pop_front() {
        let full = sol.job_gpus[j] >= inst.job(j).gpus;
        let limit = if j == seed && full { sol.job_cost[j] } else { f64::INFINITY };
        let mut blockers: Vec<(u64, usize)> = Vec::new();
        for c in inst.cands_of(j) {
            if whole(j, c) >= limit - 1e-9 || at[j].contains(&c.offer) {
                continue;
            }
            for &(r, q) in &offer_res[c.offer] {
                if q * i64::from(least(j, c)) > free[r] {
                    blockers.extend(holders[r].iter().map(|&h| (next(), h)));
                }
            }
        }
        blockers.sort_unstable();
        for (_, h) in blockers {
            if chain.len() >= size {
                return chain;
            }
            if !chain.contains(&h) {
                chain.push(h);
                queue.push_back(h);
            }
        }
    }
    chain
}

/// A seed job and up to `size` − 1 others drawn at random among those sharing the most resources
/// with it.
fn related(jobs: &[usize], touches: &[Vec<usize>], size: usize, next: &mut impl FnMut() -> u64) -> Vec<usize> {
    let seed = jobs[(next() % jobs.len() as u64) as usize];
    // Shared resources times a random factor in [1, 3): the most related first, but not always the
    // same few (a seed's neighbourhood would otherwise come back unchanged).
    let mut scored: Vec<(u64, usize)> = jobs
        .iter()
        .filter(|&&j| j != seed)
        .map(|&j| (shared(&touches[seed], &touches[j]) as u64 * (1024 + next() % 2048), j))
        .filter(|&(n, _)| n > 0)
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut subset: Vec<usize> = std::iter::once(seed).chain(scored.iter().map(|&(_, j)| j)).take(size).collect();
    // Too few related jobs: fill with others at random.
    while subset.len() < size.min(jobs.len()) {
        let j = jobs[(next() % jobs.len() as u64) as usize];
        if !subset.contains(&j) {
            subset.push(j);
        }
    }
    subset
}

/// How many resources two sorted lists share.
fn shared(a: &[usize], b: &[usize]) -> usize {
    let (mut i, mut k, mut n) = (0, 0, 0);
    while i < a.len() && k < b.len() {
        match a[i].cmp(&b[k]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => k += 1,
            std::cmp::Ordering::Equal => {
                n += 1;
                i += 1;
                k += 1;
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On all cores the loop draws steps ahead and re-solves them side by side; inside a worker of
    /// `par_map` it takes them one after the other. From the greedy plan of an independent 60-job
    /// problem, where the re-solves change the plan many times (each change drops the steps drawn
    /// after it), both end at the same plan.
    #[test]
    fn steps_drawn_ahead_end_where_one_step_after_the_other_ends() {
        let p = crate::Problem::from_json_str(include_str!("../tests/data/egress-60-8.json")).expect("a valid problem");
        let inst = Instance::new(&p);
        let start = crate::greedy(&inst);
        let search = || {
            let mut sol = start.clone();
            improve(&inst, &mut sol, &[], 30_000_000, None);
            sol
        };
        let ahead = search();
        assert!(
            crate::model::better((ahead.weight(&inst), ahead.cost()), (start.weight(&inst), start.cost())),
            "the re-solves must change the greedy plan"
        );
        // Two items, so that the map spawns workers.
        for one in crate::parallel::par_map(&[(), ()], 2, |()| {
            assert_eq!(crate::parallel::cores(), 1, "a worker takes one step at a time");
            search()
        }) {
            assert_eq!(one.placements_in_order(), ahead.placements_in_order());
        }
    }

    /// The plan holds the dear-job chain's worst arrangement (103 USD); the LP over the problem
    /// puts all three jobs elsewhere, and the neighbourhood of the three re-solved together finds
    /// the 15 USD plan, which no move of one or two jobs reaches.
    #[test]
    fn the_jobs_the_lp_places_otherwise_are_re_solved_together() {
        let p = crate::search::tests::dear_job_behind_a_chain();
        let inst = Instance::new(&p);
        let mut sol = crate::search::tests::dear_job_chain_at_its_worst(&inst);
        let lp = crate::lp::solve_lp(&inst, None, None).expect("a small LP");
        let at_stake = disagreement(&inst, &sol, &lp.values);
        assert!(at_stake.iter().all(|&w| w > 0.5), "the LP places all three elsewhere: {at_stake:?}");
        assert!(follow_relaxation(&inst, &mut sol, &lp.values, &[], None));
        assert!((sol.cost() - 15.0).abs() < 1e-6, "cost {}", sol.cost());
        assert_eq!(sol.weight(&inst), 3.0);
        assert!(disagreement(&inst, &sol, &lp.values).iter().all(|&w| w < 1e-3), "the plan is the LP's now");
    }
}
