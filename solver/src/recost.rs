//! Cost at a fixed set of placed jobs: the jobs a plan places, each with the GPUs it has, placed
//! again from scratch by LP diving on the cost LP (every one of them placed, at the least cost).
//! The local moves of `search` and `neighbourhood` change a few jobs at a time; the cheapest way of
//! placing the same work can move most of it at once (a 32-GPU gang from one region's spot pool to
//! another's, after the jobs holding that pool move across regions), which the LP sees whole. On an
//! independent 40-job problem the plan the local searches left 38 % dearer than HiGHS's proven
//! optimum came out at the optimum's cost. Lighter, on up to 100 jobs (`follow_lp`): only the jobs
//! the cost LP puts whole elsewhere are moved there, the others stay where the plan has them.

use std::time::Instant;

use crate::Problem;
use crate::lp::{self, LpResult};
use crate::model::{Assign, Cand, Instance, Sol, better};
use crate::search::Packing;

/// LP solves at most in one dive.
const MAX_DIVES: usize = 40;

/// Jobs left undecided at which the dive stops and the branch and bound places them (with every
/// other job fixed), and the work it may take.
const EXACT_REST: usize = 10;
const REST_WORK: usize = 2_000_000;

/// Work (as in `exact`) the repair by neighbourhoods may take.
const REPAIR_WORK: usize = 5_000_000;

/// The repair by the weight search kicks this fraction of a full search's kicks (`kicks`): on 44
/// independent 40-job problems a quarter or a tenth found the same plans as all of them (0.29
/// instead of 0.33 s per problem), a thirtieth or none left one 37 % dearer.
const REPAIR_KICK_SHARE: usize = 4;

/// The plan placing the same weight as `sol` for less, if the dive over `sol`'s placed jobs finds
/// one; `None` otherwise.
pub(crate) fn recost(inst: &Instance, sol: &Sol, deadline: Option<Instant>) -> Option<Sol> {
    let p = inst.p;
    // The placed jobs, a split job with only the GPUs it has.
    let left: Vec<(usize, u32)> =
        (0..p.jobs.len()).filter(|&j| sol.job_gpus[j] > 0).map(|j| (j, sol.job_gpus[j])).collect();
    if left.is_empty() {
        return None;
    }
    let target = sol.weight(inst);
    // Two dives: one that guesses to the end, one that leaves its last jobs to the branch and
    // bound; each found the optimum's cost on a 40-job problem where the other stayed 2-37 % above.
    let mut repaired: Vec<Sol> = Vec::new();
    let mut dived: Vec<Vec<(usize, usize, u32)>> = Vec::new();
    for rest in [0, EXACT_REST] {
        let out = dive(inst, left.clone(), rest, deadline);
        // The two dives often end in the same plan (the LP decides all but a few jobs): repaired once.
        let key = placements(&out);
        if dived.contains(&key) {
            continue;
        }
        dived.push(key);
        crate::trace(|| {
            format!(
                "recost: dive placed {} cost {:.2} (plan {} cost {:.2})",
                out.weight(inst),
                out.cost(),
                target,
                sol.cost()
            )
        });
        // What the dive left, or could not fit: placed again by the weight search (lighter jobs
        // ejected and placed elsewhere), and separately by exact re-solves of the neighbourhoods of
        // the jobs left waiting; each repair can leave the other far dearer, so both are tried.
        if out.weight(inst) < target - 0.5 {
            let mut pack = Packing::from_sol(inst, &out);
            pack.improve_weight(deadline);
            pack.kick(crate::kicks(inst) / REPAIR_KICK_SHARE, deadline);
            repaired.push(pack.to_sol());
            let mut exact = out;
            crate::neighbourhood::improve(inst, &mut exact, &[], REPAIR_WORK, deadline);
            if exact.weight(inst) < target - 0.5 {
                let mut pack = Packing::from_sol(inst, &exact);
                pack.improve_weight(deadline);
                exact = pack.to_sol();
            }
            repaired.push(exact);
        } else {
            repaired.push(out);
        }
    }
    let mut best: Option<Sol> = None;
    let mut seen: Vec<Vec<(usize, usize, u32)>> = Vec::new();
    for mut found in repaired {
        // Repairs that meet in the same plan are searched once.
        let key = placements(&found);
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        found.improve(inst);
        let found = crate::cost_search(inst, found, None, deadline);
        crate::trace(|| format!("recost: {} cost {:.2}", found.weight(inst), found.cost()));
        let bar = best.as_ref().unwrap_or(sol);
        if better((found.weight(inst), found.cost()), (bar.weight(inst), bar.cost())) {
            best = Some(found);
        }
    }
    best
}

/// A plan's placements, (job, offer, VMs) in order: equal for equal plans.
fn placements(sol: &Sol) -> Vec<(usize, usize, u32)> {
    let mut key: Vec<(usize, usize, u32)> = sol.assigns.iter().map(|a| (a.job, a.offer, a.vms)).collect();
    key.sort_unstable();
    key
}

/// The problem of placing `left` (jobs of `p` with the GPUs each needs) in what `out` leaves free:
/// every offer's capacity less what `out` uses (its quota pools are lowered by the caller).
fn remaining(p: &Problem, out: &Sol, left: &[(usize, u32)]) -> Problem {
    let mut offers = p.offers.clone();
    for (o, offer) in offers.iter_mut().enumerate() {
        if let Some(c) = offer.capacity_vms.as_mut() {
            *c = c.saturating_sub(out.cap_used[o]);
        }
    }
    let jobs = left
        .iter()
        .map(|&(j, gpus)| {
            let mut job = p.jobs[j].clone();
            job.gpus = gpus;
            job
        })
        .collect();
    Problem { offers, quotas: p.quotas.clone(), jobs, egress: p.egress.clone() }
}

/// A fractional gang job the dive may fix next: a waiting job of the class `jobs`, on `cand`.
struct Guess {
    jobs: Vec<usize>,
    cand: Cand,
}

/// Places the best guess left that fits (a gang job of the guess's class still waiting, on its
/// candidate), remembering the state before it; `false` when none fits.
fn guess(
    inst: &Instance,
    out: &mut Sol,
    left: &mut Vec<(usize, u32)>,
    guesses: &mut Vec<Guess>,
    before: &mut Option<(Sol, Vec<(usize, u32)>)>,
) -> bool {
    while let Some(Guess { jobs, cand: c }) = guesses.pop() {
        let Some(&j) = jobs.iter().find(|&&j| left.iter().any(|x| x.0 == j)) else { continue };
        if out.room(inst, c.offer) < c.vms {
            continue;
        }
        *before = Some((out.clone(), left.clone()));
        out.try_gang(inst, j, &c);
        left.retain(|x| x.0 != j);
        return true;
    }
    false
}

/// LP diving: solves the cost LP over the jobs `left` (each with the GPUs given; all of them must
/// be placed) in what the plan so far leaves free, fixes what the LP places integrally (a gang
/// class's whole jobs on a candidate, a split job's whole VMs), then the most decided fractional
/// gang job, and solves again for the rest. A guess after which the LP has no solution is undone for
/// the next. Ends with the last LP's rounding when nothing is decided any more, or with the branch
/// and bound over the last `rest` jobs (0: none). A split job is fixed only whole, and only when it
/// is a class of its own (identical split jobs are left to the rounding). The plan may place less
/// than `left` asks (a fractional job that fits nowhere whole); the caller repairs it.
fn dive(inst: &Instance, mut left: Vec<(usize, u32)>, rest: usize, deadline: Option<Instant>) -> Sol {
    let p = inst.p;
    let mut out = Sol::new(inst);
    // The guesses (a fractional gang job on one candidate) not yet tried, best last, and the state
    // before the last guess.
    let mut guesses: Vec<Guess> = Vec::new();
    let mut before_guess: Option<(Sol, Vec<(usize, u32)>)> = None;
    for dive in 0..MAX_DIVES {
        if left.len() <= rest {
            break;
        }
        let sub = remaining(p, &out, &left);
        let mut si = Instance::new(&sub);
        for (q, limit) in si.pool_limit.iter_mut().enumerate() {
            *limit = limit.saturating_sub(out.pool_used[q]);
        }
        let weight: f64 = (0..sub.jobs.len()).map(|j| crate::search::weight(&si, j)).sum();
        let solved = lp::min_cost_at(&si, weight, deadline, None).map(|(_, values)| LpResult {
            weight_bound: weight,
            cost_bound: None,
            values,
        });
        let lp = match solved {
            Ok(lp) => lp,
            Err(e) => {
                crate::trace(|| format!("recost: dive {dive} failed: {e}"));
                let Some((o, l)) = before_guess.take() else { break };
                (out, left) = (o, l);
                if !guess(inst, &mut out, &mut left, &mut guesses, &mut before_guess) {
                    break;
                }
                continue;
            }
        };
        let (decided, mut fractional) = fix_decided(inst, &si, &lp.values, &left, &mut out);
        let fixed = decided.iter().filter(|&&x| x).count();
        let sub_jobs = left.clone();
        left = left.iter().enumerate().filter(|(i, _)| !decided[*i]).map(|(_, &x)| x).collect();
        // The most decided fractional gang job next, then the others if the LP says it was wrong.
        fractional.sort_by(|a, b| a.0.total_cmp(&b.0));
        guesses = fractional.into_iter().map(|(_, g)| g).collect();
        let guessed = guess(inst, &mut out, &mut left, &mut guesses, &mut before_guess);
        crate::trace(|| format!("recost: dive {dive}: {} jobs, {fixed} fixed, guessed {guessed}", sub.jobs.len()));
        if left.len() <= rest {
            break;
        }
        if fixed == 0 && !guessed {
            // Stuck (split jobs the LP divides fractionally, or guesses that no longer fit): the
            // rest as this LP's rounding places them (nothing of it is placed yet).
            let mut rounded = lp::round(&si, &lp);
            rounded.improve(&si);
            for a in &rounded.assigns {
                if out.room(inst, a.offer) >= a.vms {
                    out.take(inst, Assign { job: sub_jobs[a.job].0, ..*a });
                }
            }
            break;
        }
    }
    // The last few jobs exactly, with the rest fixed: the LP's fractional remainder is where the
    // guesses go wrong (each one fits, the ones after it no longer do).
    if !left.is_empty() && left.len() <= rest {
        let subset: Vec<usize> = left.iter().map(|&(j, _)| j).collect();
        crate::exact::resolve_subset(inst, &mut out, &subset, &inst.resources(), &[], REST_WORK, deadline);
    }
    out
}

/// Fixes in `out` what the LP over `left` (`values`, per class of `si`, the instance of those jobs)
/// places integrally: a gang class's whole jobs on a candidate, as many as fit, and a split job that
/// is a class of its own when all its VMs fit. Returns, per job of `left`, whether it is placed now,
/// and the fractional gang (class, candidate) pairs with their fraction.
fn fix_decided(
    inst: &Instance,
    si: &Instance,
    values: &[Vec<f64>],
    left: &[(usize, u32)],
    out: &mut Sol,
) -> (Vec<bool>, Vec<(f64, Guess)>) {
    let mut decided = vec![false; left.len()];
    let mut fractional = Vec::new();
    for (class, vals) in si.classes.iter().zip(values) {
        let integral = vals.iter().all(|v| (v - v.round()).abs() < 1e-4);
        if si.job(class.rep).gang {
            let mut jobs = class.jobs.iter();
            for (cand, &v) in class.cands.iter().zip(vals) {
                let whole = if integral { v.round() } else { (v + 1e-4).floor() } as usize;
                for &j in jobs.by_ref().take(whole) {
                    decided[j] = out.try_gang(inst, left[j].0, cand);
                }
                let frac = v - (v + 1e-4).floor();
                if frac > 1e-4 {
                    fractional
                        .push((frac, Guess { jobs: class.jobs.iter().map(|&j| left[j].0).collect(), cand: *cand }));
                }
            }
        } else if integral && class.jobs.len() == 1 {
            let j = class.jobs[0];
            let mut need = si.job(j).gpus;
            for (cand, &v) in class.cands.iter().zip(vals) {
                let vms = v.round() as u32;
                if vms > 0 && need > 0 && out.room(inst, cand.offer) >= vms {
                    let gpus = need.min(vms * cand.gpus);
                    need -= gpus;
                    let cost = f64::from(vms) * cand.cost + cand.egress_per_gpu * f64::from(gpus);
                    out.take(inst, Assign { job: left[j].0, offer: cand.offer, vms, gpus, cost });
                }
            }
            // Short of room (the LP's VMs did not all fit): all or nothing of it, so that the job
            // left for the next LP is the whole job.
            if need > 0 {
                while let Some(i) = out.assigns.iter().rposition(|a| a.job == left[j].0) {
                    out.release(inst, i);
                }
            }
            decided[j] = need == 0;
        }
    }
    (decided, fractional)
}

/// The plan with its gang jobs moved where the cost LP over its placed jobs puts them whole, when
/// elsewhere: those that save most first, each where there is room, else back where it was; what
/// is left out placed again by the weight search (and, while weight is still missing, a quarter of
/// its kicks and a sixteenth of the room-making ones), then the cost search. Kept when it places more weight, or the same for less. The cheapest way of
/// placing the same work can move twenty jobs at once (a rotation across regions that frees a
/// cheap pool for a dear job): the LP names them all, where the local moves and the neighbourhoods
/// grown from one job find a few (all-spot-60-3: +8.6 % -> HiGHS's proven optimum). Returns whether
/// `sol` changed.
pub(crate) fn follow_lp(inst: &Instance, sol: &mut Sol, deadline: Option<Instant>) -> bool {
    follow(inst, sol, false, deadline)
}

/// [`follow_lp`] with the split jobs moved too, where the LP spreads them otherwise (its VMs
/// rounded up, all or nothing), and the jobs that move leaves short given room by re-solving,
/// exactly, the jobs holding what each lacks (`neighbourhood::repair`) before the weight search.
/// Returns whether `sol` changed.
pub(crate) fn follow_lp_whole(inst: &Instance, sol: &mut Sol, deadline: Option<Instant>) -> bool {
    follow(inst, sol, true, deadline)
}

fn follow(inst: &Instance, sol: &mut Sol, split: bool, deadline: Option<Instant>) -> bool {
    let p = inst.p;
    let left: Vec<(usize, u32)> =
        (0..p.jobs.len()).filter(|&j| sol.job_gpus[j] > 0).map(|j| (j, sol.job_gpus[j])).collect();
    if left.is_empty() {
        return false;
    }
    let sub = remaining(p, &Sol::new(inst), &left);
    let si = Instance::new(&sub);
    let weight: f64 = (0..sub.jobs.len()).map(|j| crate::search::weight(&si, j)).sum();
    // The plan itself as the sub-problem's seed: the LP by column generation from its candidates.
    let mut seed = Sol::new(&si);
    for a in &sol.assigns {
        let job = left.iter().position(|&(j, _)| j == a.job).expect("a placed job");
        seed.take(&si, Assign { job, ..*a });
    }
    let Ok((lp_cost, values)) = lp::min_cost_at(&si, weight, deadline, Some(&seed)) else { return false };
    crate::trace(|| format!("follow the LP: its cost {lp_cost:.2}, the plan's {:.2}", sol.cost()));
    let mut elsewhere: Vec<(f64, usize)> = Vec::new();
    let mut lp_offer: Vec<Option<usize>> = vec![None; p.jobs.len()];
    // Per split job the LP spreads otherwise than the plan: its offers and VMs there, most first.
    let mut lp_split: Vec<Vec<(usize, u32)>> = vec![Vec::new(); p.jobs.len()];
    for (class, vals) in si.classes.iter().zip(&values) {
        if class.jobs.len() != 1 {
            continue;
        }
        let j = left[class.jobs[0]].0;
        if !si.job(class.rep).gang {
            if !split {
                continue;
            }
            let on: Vec<(&Cand, f64)> =
                class.cands.iter().zip(vals.iter().copied()).filter(|&(_, v)| v > 0.05).collect();
            // The LP's VMs rounded up, per offer, most first.
            let mut spread: Vec<(usize, u32)> = on.iter().map(|&(c, v)| (c.offer, (v - 1e-6).ceil() as u32)).collect();
            spread.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            let mut planned: Vec<(usize, u32)> =
                sol.assigns.iter().filter(|a| a.job == j).map(|a| (a.offer, a.vms)).collect();
            planned.sort_unstable();
            let mut wanted = spread.clone();
            wanted.sort_unstable();
            if wanted != planned && !wanted.is_empty() {
                let lp_cost: f64 = on.iter().map(|&(c, v)| v * c.cost).sum();
                elsewhere.push((sol.job_cost[j] - lp_cost, j));
                lp_split[j] = spread;
            }
            continue;
        }
        let Some((k, _)) = vals.iter().enumerate().filter(|(_, v)| **v > 0.5).max_by(|a, b| a.1.total_cmp(b.1)) else {
            continue;
        };
        let c = &class.cands[k];
        if sol.assigns.iter().any(|a| a.job == j && a.offer != c.offer) {
            lp_offer[j] = Some(c.offer);
            elsewhere.push((sol.job_cost[j] - c.cost, j));
        }
    }
    // One job alone the cost search moves itself.
    if elsewhere.len() < 2 {
        return false;
    }
    crate::trace(|| format!("follow the LP: {} jobs elsewhere", elsewhere.len()));
    let mut trial = sol.clone();
    let moving: Vec<usize> = elsewhere.iter().map(|&(_, j)| j).collect();
    while let Some(i) = trial.assigns.iter().rposition(|a| moving.contains(&a.job)) {
        trial.release(inst, i);
    }
    elsewhere.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(_, j) in &elsewhere {
        if !inst.job(j).gang {
            for &(o, vms) in &lp_split[j] {
                let c = *inst.cands_of(j).iter().find(|c| c.offer == o).expect("an LP candidate");
                trial.fill(inst, j, &c, vms);
            }
            // All or nothing: a split job the LP's VMs do not complete goes back where it was.
            if trial.job_gpus[j] < sol.job_gpus[j] {
                while let Some(i) = trial.assigns.iter().rposition(|a| a.job == j) {
                    trial.release(inst, i);
                }
            }
            continue;
        }
        let c = *inst.cands_of(j).iter().find(|c| lp_offer[j] == Some(c.offer)).expect("an LP candidate");
        trial.try_gang(inst, j, &c);
    }
    // Those that do not fit there back where they were, if they still fit.
    for a in sol.assigns.iter().filter(|a| moving.contains(&a.job)) {
        let c = *inst.cands_of(a.job).iter().find(|c| c.offer == a.offer).expect("its candidate");
        if inst.job(a.job).gang {
            trial.try_gang(inst, a.job, &c);
        } else if trial.job_gpus[a.job] == 0 || trial.assigns.iter().any(|b| b.job == a.job && b.offer == a.offer) {
            trial.fill(inst, a.job, &c, a.vms);
        }
    }
    let target = sol.weight(inst);
    if split {
        repair(inst, sol, &mut trial, &lp_offer, &lp_split, deadline);
    }
    let mut pack = Packing::from_sol(inst, &trial);
    pack.improve_weight(deadline);
    let mut trial = pack.to_plan();
    if trial.weight(inst) < target - 0.5 {
        pack.kick(crate::kicks(inst) / REPAIR_KICK_SHARE, deadline);
        let mut room = pack.clone();
        room.kick_making_room(crate::kicks(inst) / 16, crate::search::RoomMaking::ChainsAndEjections, deadline);
        trial = crate::pick(inst, pack.to_sol(), room.to_sol());
        trial.improve(inst);
    }
    crate::trace(|| format!("follow the LP: repaired {} cost {:.2}", trial.weight(inst), trial.cost()));
    let trial = crate::cost_search(inst, trial, None, deadline);
    let changed = better((trial.weight(inst), trial.cost()), (sol.weight(inst), sol.cost()));
    crate::trace(|| format!("follow the LP: {} cost {:.2}, changed {changed}", trial.weight(inst), trial.cost()));
    if changed {
        *sol = trial;
    }
    changed
}

/// Rounds of the repair in [`follow_lp_whole`]: the jobs re-solved with each job left short, at
/// most, and the work each re-solve may take.
const REPAIR_SIZES: [usize; 6] = [12, 16, 16, 20, 20, 24];
const CHAIN_WORK: usize = 2_000_000;

/// Gives the jobs `trial` leaves shorter than `sol` had them room: waiting jobs placed where they
/// fit, then per such job the jobs holding what it lacks on the offers the LP puts it on, where it
/// was, and its other candidates, re-solved together exactly.
fn repair(
    inst: &Instance,
    sol: &Sol,
    trial: &mut Sol,
    lp_offer: &[Option<usize>],
    lp_split: &[Vec<(usize, u32)>],
    deadline: Option<Instant>,
) {
    trial.improve(inst);
    for size in REPAIR_SIZES {
        // The re-solves trade lighter jobs for the short ones: those traded out are short next.
        let short: Vec<(usize, u32, Vec<usize>)> = (0..inst.p.jobs.len())
            .filter(|&j| trial.job_gpus[j] < sol.job_gpus[j])
            .map(|j| {
                let mut offers: Vec<usize> =
                    lp_offer[j].into_iter().chain(lp_split[j].iter().map(|&(o, _)| o)).collect();
                offers.extend(sol.assigns.iter().filter(|a| a.job == j).map(|a| a.offer));
                offers.extend(inst.cands_of(j).iter().map(|c| c.offer));
                let mut seen = std::collections::HashSet::new();
                offers.retain(|&o| seen.insert(o));
                (j, sol.job_gpus[j], offers)
            })
            .collect();
        if short.is_empty() {
            break;
        }
        crate::neighbourhood::repair(inst, trial, &short, size, CHAIN_WORK, deadline);
        crate::trace(|| {
            let s: Vec<String> =
                short.iter().map(|&(j, w, _)| format!("{} {}/{w}", inst.p.jobs[j].id, trial.job_gpus[j])).collect();
            format!(
                "follow the LP: {} short re-solved ({size}): {} cost {:.2}; {}",
                short.len(),
                trial.weight(inst),
                trial.cost(),
                s.join(" ")
            )
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The LP moves all three jobs of the dear-job chain at once: `j` to eastus, `x` to westus,
    /// `y` to centralus.
    #[test]
    fn jobs_move_where_the_cost_lp_puts_them() {
        let p = crate::search::tests::dear_job_behind_a_chain();
        let inst = Instance::new(&p);
        let mut sol = crate::search::tests::dear_job_chain_at_its_worst(&inst);
        assert!(follow_lp(&inst, &mut sol, None));
        assert!((sol.cost() - 15.0).abs() < 1e-6);
        assert_eq!(sol.weight(&inst), 3.0);
        assert!(!follow_lp(&inst, &mut sol, None), "nothing left to move");
    }

    /// The dear-job chain with `x` and `y` split jobs of two GPUs (each region's quota two 1-GPU
    /// VMs) and `j` a two-GPU gang: only moving the split jobs too frees eastus for `j`.
    #[test]
    fn split_jobs_move_where_the_cost_lp_spreads_them() {
        let json = serde_json::to_string(&{
            let mut v: serde_json::Value =
                serde_json::to_value(crate::search::tests::dear_job_behind_a_chain()).unwrap();
            for q in v["quotas"].as_array_mut().unwrap() {
                q["vcpus"] = 8.into();
            }
            for (k, job) in v["jobs"].as_array_mut().unwrap().iter_mut().enumerate() {
                job["gpus"] = 2.into();
                job["gang"] = (k == 2).into();
            }
            v
        })
        .unwrap();
        let p = Problem::from_json_str(&json).expect("a valid problem");
        let inst = Instance::new(&p);
        let mut sol = Sol::new(&inst);
        for j in 0..3 {
            sol.place(&inst, j, inst.cands_of(j));
        }
        let region = |sol: &Sol, j: usize| {
            let on: Vec<&str> =
                sol.assigns.iter().filter(|a| a.job == j).map(|a| p.offers[a.offer].region.as_str()).collect();
            on.join(",")
        };
        assert_eq!([region(&sol, 0), region(&sol, 1), region(&sol, 2)], ["eastus", "westus", "northeurope"]);
        assert!((sol.cost() - 206.0).abs() < 1e-6, "x 2, y 4, j 200");
        let mut gang_only = sol.clone();
        assert!(!follow_lp(&inst, &mut gang_only, None), "j cannot move while x holds eastus");
        assert!(follow_lp_whole(&inst, &mut sol, None));
        assert_eq!([region(&sol, 0), region(&sol, 1), region(&sol, 2)], ["westus", "centralus", "eastus"]);
        assert!((sol.cost() - 30.0).abs() < 1e-6, "x 4, y 6, j 20: {}", sol.cost());
        assert_eq!(sol.weight(&inst), 6.0);
    }
}
