//! Branch and bound for small problems of gang jobs: every job on one of its candidates or waiting,
//! under the quota pools and the offers' capacity; the most weight, then the least cost, proven.
//!
//! Depth first over the jobs, heaviest first, from the heuristics' plan as the incumbent. First a
//! few limited-discrepancy passes (at most one, two, three choices other than the first per path)
//! in which, while weight can still be gained, a job's choices come in the order the multipliers
//! price them (the relaxation's choice first, waiting where it is worth nothing net): they find
//! plans the heuristics miss in a few hundred nodes, where a plain depth-first search spends its
//! budget at the bottom of the first branches. Then the full search, cheapest first and waiting
//! last (that order proved more problems than the multipliers'). A node is cut when it cannot beat
//! the incumbent:
//! - on weight, by the Lagrangian bound at the root's multipliers (`lagrange`) with the node's free
//!   resources: Σ λ·free + the weight placed + each open job's best weight net of λ over the
//!   candidates that still fit (any non-negative λ bounds every completion);
//! - on cost, when even that bound reaches only the incumbent's weight: the cost placed plus the
//!   least the open jobs can pay to make up the weight still missing (each at its cheapest fitting
//!   candidate, taken fractionally in order of cost per weight: a relaxation of the resources).
//!
//! It stops after a work budget or at the deadline; only a search that ran to the end proves
//! anything, but the best plan found on the way is a plan. The same search re-solves a few jobs
//! with the others fixed for the neighbourhood search (`neighbourhood`). Deterministic.

use std::time::Instant;

use crate::model::{Assign, Cand, Instance, Resources, Sol, better};
use crate::search::weight;

struct Search {
    /// Jobs in branching order.
    jobs: Vec<usize>,
    weight: Vec<f64>,
    /// Per job, its candidates (as the instance ranks them, cheapest first).
    options: Vec<Vec<Cand>>,
    /// Per offer, the resources one VM uses and how much.
    offer_res: Vec<Vec<(usize, i64)>>,
    /// Per offer, the Lagrangian price of one VM.
    vm_price: Vec<f64>,
    /// Per resource, its multiplier (weight per unit).
    lambda: Vec<f64>,
    free: Vec<i64>,
    /// Scratch buffers: per depth, its choices in order; the cost bound's (cost, weight) pairs.
    orders: Vec<Vec<(f64, Option<usize>)>>,
    fill: Vec<(f64, f64)>,
    chosen: Vec<Option<usize>>,
    best_weight: f64,
    best_cost: f64,
    best: Vec<Option<usize>>,
    /// Candidates looked at by the bounds so far, and the most it may look at: a node's cost is its
    /// open jobs' candidates, so this measures the work in a way the machine's load does not change
    /// (the plan stays the same on every run).
    work: usize,
    work_limit: usize,
    nodes: usize,
    deadline: Option<Instant>,
    aborted: bool,
}

/// The best plan the search found from `incumbent` (the incumbent itself when it found none better),
/// and whether the search finished: then that plan has the most weight, then the least cost,
/// proven. `None` when the problem is not one the search takes (too large, or not all gang jobs).
/// `lambda`:
/// per resource (quota pools, then every offer's capacity), a non-negative multiplier in weight per
/// unit (vCPU or VM).
pub(crate) fn solve(
    inst: &Instance,
    incumbent: &Sol,
    lambda: &[f64],
    work_limit: usize,
    deadline: Option<Instant>,
) -> Option<(Sol, bool)> {
    let p = inst.p;
    if p.jobs.iter().any(|j| !j.gang) || p.jobs.len() > MAX_JOBS {
        return None;
    }
    let (free, offer_res) = inst.resources();
    let jobs: Vec<usize> = (0..p.jobs.len()).collect();
    let mut s = Search::new(inst, &jobs, free, offer_res, incumbent, lambda, work_limit, deadline);
    s.run(DISCREPANCY_PASSES);
    crate::trace(|| format!("branch and bound: {} nodes, work {}, finished {}", s.nodes, s.work, !s.aborted));
    let mut sol = Sol::new(inst);
    s.take_best(inst, &mut sol);
    Some((sol, !s.aborted))
}

/// Re-solves the gang jobs `subset` of `sol` exactly with every other placement fixed, within
/// `work_limit`: the sub-plan of the most weight, then the least cost, that the search found,
/// placed into `sol`. Returns whether it changed `sol` (then for the better) and the work spent.
pub(crate) fn resolve_subset(
    inst: &Instance,
    sol: &mut Sol,
    subset: &[usize],
    resources: &Resources,
    lambda: &[f64],
    work_limit: usize,
    deadline: Option<Instant>,
) -> (bool, usize) {
    let (free0, offer_res) = resources;
    let mut in_subset = vec![false; inst.p.jobs.len()];
    for &j in subset {
        in_subset[j] = true;
    }
    let mut free = free0.clone();
    let mut inside = Sol::new(inst);
    for a in &sol.assigns {
        if in_subset[a.job] {
            inside.take(inst, *a);
        } else {
            for &(r, n) in &offer_res[a.offer] {
                free[r] -= n * i64::from(a.vms);
            }
        }
    }
    let mut s = Search::new(inst, subset, free, offer_res.clone(), &inside, lambda, work_limit, deadline);
    let before = (s.best_weight, s.best_cost);
    s.run(1);
    let work = s.work;
    crate::trace(|| format!("resolve {subset:?}: nodes {} work {} finished {}", s.nodes, s.work, !s.aborted));
    if !better((s.best_weight, s.best_cost), before) {
        return (false, work);
    }
    let mut i = 0;
    while i < sol.assigns.len() {
        if in_subset[sol.assigns[i].job] {
            sol.release(inst, i);
        } else {
            i += 1;
        }
    }
    s.take_best(inst, sol);
    (true, work)
}

/// Gang jobs above which the exact search is not tried: the tree grows too fast for a round.
pub(crate) const MAX_JOBS: usize = 40;

/// Limited-discrepancy passes before the full search.
const DISCREPANCY_PASSES: usize = 3;

fn fits(offer_res: &[Vec<(usize, i64)>], free: &[i64], c: &Cand) -> bool {
    offer_res[c.offer].iter().all(|&(r, a)| a * i64::from(c.vms) <= free[r])
}

impl Search {
    /// A search over `subset` (the gang jobs to choose for; every other job's use already taken
    /// out of `free`), from the incumbent's choices for them.
    #[allow(clippy::too_many_arguments)]
    fn new(
        inst: &Instance,
        subset: &[usize],
        free: Vec<i64>,
        offer_res: Vec<Vec<(usize, i64)>>,
        incumbent: &Sol,
        lambda: &[f64],
        work_limit: usize,
        deadline: Option<Instant>,
    ) -> Search {
        let n = inst.p.jobs.len();
        let lambda: Vec<f64> = (0..free.len()).map(|r| lambda.get(r).copied().unwrap_or(0.0).max(0.0)).collect();
        let vm_price = offer_res.iter().map(|res| res.iter().map(|&(r, a)| lambda[r] * a as f64).sum()).collect();
        let weight: Vec<f64> = (0..n).map(|j| weight(inst, j)).collect();
        let options: Vec<Vec<Cand>> =
            (0..n).map(|j| if subset.contains(&j) { inst.cands_of(j).to_vec() } else { Vec::new() }).collect();
        let mut jobs: Vec<usize> = subset.iter().copied().filter(|&j| !options[j].is_empty()).collect();
        jobs.sort_by(|&a, &b| weight[b].total_cmp(&weight[a]).then(a.cmp(&b)));
        // The incumbent, as candidate indices.
        let mut best = vec![None; n];
        let (mut best_weight, mut best_cost) = (0.0, 0.0);
        for a in &incumbent.assigns {
            if let Some(k) = options[a.job].iter().position(|c| c.offer == a.offer) {
                best[a.job] = Some(k);
                best_weight += weight[a.job];
                best_cost += options[a.job][k].cost;
            }
        }
        Search {
            jobs,
            weight,
            options,
            offer_res,
            vm_price,
            lambda,
            orders: vec![Vec::new(); subset.len() + 1],
            fill: Vec::new(),
            free,
            chosen: vec![None; n],
            best_weight,
            best_cost,
            best,
            work: 0,
            work_limit,
            nodes: 0,
            deadline,
            aborted: false,
        }
    }

    /// A few passes that stray from the relaxation's choices at most once, twice, … (`passes`)
    /// find better plans early (a plain depth-first search spends its budget at the bottom of the
    /// first branches); then the full search, the only one that proves anything.
    fn run(&mut self, passes: usize) {
        for limit in 1..=passes {
            self.branch(0, 0.0, 0.0, limit);
            if self.aborted {
                return;
            }
        }
        self.branch(0, 0.0, 0.0, usize::MAX);
    }

    /// The best choices found, placed into `sol`.
    fn take_best(&self, inst: &Instance, sol: &mut Sol) {
        for (j, k) in self.best.iter().enumerate() {
            if let Some(k) = *k {
                let c = &self.options[j][k];
                sol.take(inst, Assign { job: j, offer: c.offer, vms: c.vms, gpus: c.gpus, cost: c.cost });
            }
        }
    }

    fn fits(&self, c: &Cand) -> bool {
        fits(&self.offer_res, &self.free, c)
    }

    fn apply(&mut self, c: &Cand, sign: i64) {
        for &(r, a) in &self.offer_res[c.offer] {
            self.free[r] -= sign * a * i64::from(c.vms);
        }
    }

    /// The Lagrangian bound on the weight the open jobs (from depth `d`) can add, at the root's
    /// multipliers and the node's free resources. (Multipliers re-optimised at each node by a few
    /// subgradient steps from the parent's were tried: they drift, and a 12-job problem proven in
    /// 42 nodes with the root's was not proven in a million.)
    fn lagrangian(&mut self, d: usize) -> f64 {
        let mut ub: f64 =
            self.free.iter().zip(&self.lambda).filter(|(_, l)| **l > 0.0).map(|(f, l)| *f as f64 * l).sum();
        for &j in &self.jobs[d..] {
            self.work += self.options[j].len();
            let w = self.weight[j];
            let mut net = 0.0_f64;
            for o in &self.options[j] {
                let n = w - f64::from(o.vms) * self.vm_price[o.offer];
                if n > net && fits(&self.offer_res, &self.free, o) {
                    net = n;
                }
            }
            ub += net;
        }
        ub
    }

    /// The least cost of making up `need` more weight from the open jobs (resources relaxed).
    fn fill_cost(&mut self, d: usize, need: f64) -> f64 {
        if need <= 0.5 {
            return 0.0;
        }
        let mut fill = std::mem::take(&mut self.fill);
        fill.clear();
        for &j in &self.jobs[d..] {
            self.work += self.options[j].len();
            let cheapest = self.options[j]
                .iter()
                .filter(|o| fits(&self.offer_res, &self.free, o))
                .map(|o| o.cost)
                .fold(f64::INFINITY, f64::min);
            if cheapest.is_finite() {
                fill.push((cheapest, self.weight[j]));
            }
        }
        fill.sort_by(|a, b| (a.0 / a.1).total_cmp(&(b.0 / b.1)));
        let mut left = need;
        let mut cost = 0.0;
        for &(c, w) in &fill {
            if left <= 0.0 {
                break;
            }
            let take = (left / w).min(1.0);
            cost += take * c;
            left -= take * w;
        }
        self.fill = fill;
        if left > 0.5 { f64::INFINITY } else { cost }
    }

    fn branch(&mut self, d: usize, w: f64, c: f64, discrepancies: usize) {
        if self.aborted {
            return;
        }
        self.nodes += 1;
        if self.work > self.work_limit
            || (self.nodes.is_multiple_of(1024) && self.deadline.is_some_and(|t| Instant::now() >= t))
        {
            self.aborted = true;
            return;
        }
        if d == self.jobs.len() {
            if better((w, c), (self.best_weight, self.best_cost)) {
                self.best_weight = w;
                self.best_cost = c;
                self.best.clone_from(&self.chosen);
                crate::trace(|| format!("branch and bound: {w} cost {c:.2} at node {}", self.nodes));
            }
            return;
        }
        let ub = w + self.lagrangian(d);
        // Weights are integers: below the incumbent's weight no completion reaches it; below its
        // weight + 1 a completion can only match it, and must then cost less.
        if ub < self.best_weight - 0.5 + 1e-9 * ub.abs() {
            return;
        }
        if ub < self.best_weight + 0.5
            && c + self.fill_cost(d, self.best_weight - w) >= self.best_cost - 1e-9 * self.best_cost.abs().max(1.0)
        {
            return;
        }
        let j = self.jobs[d];
        // In the limited-discrepancy passes, while weight can still be gained, the choices the
        // multipliers price best first (the dive follows the relaxation, where better plans are;
        // waiting is worth nothing net); otherwise cheapest first and waiting last.
        // Each depth's order in its own buffer, kept across nodes (no allocation per node).
        let mut order = std::mem::take(&mut self.orders[d]);
        order.clear();
        order.extend(
            (0..self.options[j].len())
                .filter(|&k| self.fits(&self.options[j][k]))
                .map(|k| (f64::from(self.options[j][k].vms) * self.vm_price[self.options[j][k].offer], Some(k))),
        );
        let guided = ub >= self.best_weight + 0.5 && discrepancies != usize::MAX;
        order.push((if guided { self.weight[j] } else { f64::INFINITY }, None));
        if guided {
            order.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        for (i, &(_, k)) in order.iter().enumerate() {
            // Limited discrepancy: each choice other than the first spends one.
            let left = if i == 0 {
                discrepancies
            } else if discrepancies == 0 {
                break;
            } else {
                discrepancies - 1
            };
            match k {
                Some(k) => {
                    let o = self.options[j][k];
                    self.apply(&o, 1);
                    self.chosen[j] = Some(k);
                    self.branch(d + 1, w + self.weight[j], c + o.cost, left);
                    self.chosen[j] = None;
                    self.apply(&o, -1);
                }
                None => self.branch(d + 1, w, c, left),
            }
            if self.aborted {
                break;
            }
        }
        self.orders[d] = order;
    }
}
