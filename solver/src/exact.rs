//! Branch and bound for small problems of gang jobs: every job on one of its candidates or waiting,
//! under the quota pools and the offers' capacity; the most weight, then the least cost, proven.
//!
//! Depth first over the jobs, heaviest first, each job's candidates cheapest first and "waiting"
//! last, from the heuristics' plan as the incumbent. A node is cut when it cannot beat the incumbent:
//! - on weight, by the Lagrangian bound at the root's multipliers (`lagrange`) with the node's free
//!   resources: Σ λ·free + the weight placed + each open job's best weight net of λ over the
//!   candidates that still fit (any non-negative λ bounds every completion);
//! - on cost, when even that bound reaches only the incumbent's weight: the cost placed plus the
//!   least the open jobs can pay to make up the weight still missing (each at its cheapest fitting
//!   candidate, taken fractionally in order of cost per weight: a relaxation of the resources).
//!
//! It stops after a node budget or at the deadline; only a search that ran to the end proves
//! anything. Deterministic.

use std::time::Instant;

use crate::model::{Assign, Cand, Instance, Sol, better};
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

/// The plan of the most weight, then the least cost, proven, when the problem is small enough and
/// made of gang jobs only, searched from `incumbent`; `None` when the search could not finish (too large, out of work or
/// time). `lambda`:
/// per resource (quota pools, then every offer's capacity), a non-negative multiplier in weight per
/// unit (vCPU or VM).
pub(crate) fn solve(
    inst: &Instance,
    incumbent: &Sol,
    lambda: &[f64],
    work_limit: usize,
    deadline: Option<Instant>,
) -> Option<Sol> {
    let p = inst.p;
    if p.jobs.iter().any(|j| !j.gang) || p.jobs.len() > MAX_JOBS {
        return None;
    }
    let (free, offer_res) = inst.resources();
    let lambda: Vec<f64> = (0..free.len()).map(|r| lambda.get(r).copied().unwrap_or(0.0).max(0.0)).collect();
    let vm_price: Vec<f64> = offer_res.iter().map(|res| res.iter().map(|&(r, a)| lambda[r] * a as f64).sum()).collect();
    let weight: Vec<f64> = (0..p.jobs.len()).map(|j| weight(inst, j)).collect();
    let options: Vec<Vec<Cand>> = (0..p.jobs.len()).map(|j| inst.cands_of(j).to_vec()).collect();
    let mut jobs: Vec<usize> = (0..p.jobs.len()).filter(|&j| !options[j].is_empty()).collect();
    jobs.sort_by(|&a, &b| weight[b].total_cmp(&weight[a]).then(a.cmp(&b)));
    // The incumbent, as candidate indices.
    let mut best = vec![None; p.jobs.len()];
    for a in &incumbent.assigns {
        best[a.job] = options[a.job].iter().position(|c| c.offer == a.offer);
    }
    let mut s = Search {
        jobs,
        weight,
        options,
        offer_res,
        vm_price,
        lambda,
        free,
        chosen: vec![None; p.jobs.len()],
        best_weight: incumbent.weight(inst),
        best_cost: incumbent.cost(),
        best,
        work: 0,
        work_limit,
        nodes: 0,
        deadline,
        aborted: false,
    };
    s.branch(0, 0.0, 0.0);
    if s.aborted {
        return None;
    }
    let mut sol = Sol::new(inst);
    for (j, k) in s.best.iter().enumerate() {
        if let Some(k) = *k {
            let c = &s.options[j][k];
            sol.take(inst, Assign { job: j, offer: c.offer, vms: c.vms, gpus: c.gpus, cost: c.cost });
        }
    }
    Some(sol)
}

/// Gang jobs above which the exact search is not tried: the tree grows too fast for a round.
pub(crate) const MAX_JOBS: usize = 40;

impl Search {
    fn fits(&self, c: &Cand) -> bool {
        self.offer_res[c.offer].iter().all(|&(r, a)| a * i64::from(c.vms) <= self.free[r])
    }

    fn apply(&mut self, c: &Cand, sign: i64) {
        for &(r, a) in &self.offer_res[c.offer] {
            self.free[r] -= sign * a * i64::from(c.vms);
        }
    }

    /// Upper bound on the weight any completion reaches, and the least cost of making up `need`
    /// more weight from the open jobs (resources relaxed).
    fn bounds(&mut self, d: usize, need: f64) -> (f64, f64) {
        let mut ub: f64 =
            self.free.iter().zip(&self.lambda).filter(|(_, l)| **l > 0.0).map(|(f, l)| *f as f64 * l).sum();
        let mut fill: Vec<(f64, f64)> = Vec::new();
        for &j in &self.jobs[d..] {
            self.work += self.options[j].len();
            let w = self.weight[j];
            let mut net = 0.0_f64;
            let mut cheapest = f64::INFINITY;
            for o in &self.options[j] {
                if !self.fits(o) {
                    continue;
                }
                net = net.max(w - f64::from(o.vms) * self.vm_price[o.offer]);
                cheapest = cheapest.min(o.cost);
            }
            ub += net;
            if cheapest.is_finite() {
                fill.push((cheapest, w));
            }
        }
        if need <= 0.5 {
            return (ub, 0.0);
        }
        fill.sort_by(|a, b| (a.0 / a.1).total_cmp(&(b.0 / b.1)));
        let mut left = need;
        let mut cost = 0.0;
        for (c, w) in fill {
            if left <= 0.0 {
                break;
            }
            let take = (left / w).min(1.0);
            cost += take * c;
            left -= take * w;
        }
        (ub, if left > 0.5 { f64::INFINITY } else { cost })
    }

    fn branch(&mut self, d: usize, w: f64, c: f64) {
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
            }
            return;
        }
        let (ub, fill_cost) = self.bounds(d, self.best_weight - w);
        let ub = w + ub;
        // Weights are integers: below the incumbent's weight no completion reaches it; below its
        // weight + 1 a completion can only match it, and must then cost less.
        if ub < self.best_weight - 0.5 + 1e-9 * ub.abs() {
            return;
        }
        if ub < self.best_weight + 0.5 && c + fill_cost >= self.best_cost - 1e-9 * self.best_cost.abs().max(1.0) {
            return;
        }
        let j = self.jobs[d];
        for k in 0..self.options[j].len() {
            let o = self.options[j][k];
            if !self.fits(&o) {
                continue;
            }
            self.apply(&o, 1);
            self.chosen[j] = Some(k);
            self.branch(d + 1, w + self.weight[j], c + o.cost);
            self.chosen[j] = None;
            self.apply(&o, -1);
            if self.aborted {
                return;
            }
        }
        self.branch(d + 1, w, c);
    }
}
