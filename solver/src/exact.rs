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
//! - on weight, by the better of two bounds with the node's free resources: the Lagrangian bound at
//!   the root's multipliers (`lagrange`): Σ λ·free + the weight placed + each open job's best weight
//!   net of λ over the candidates that still fit (any non-negative λ bounds every completion); and
//!   the weight placed + every open job that still fits somewhere (exact where nothing is scarce,
//!   as in most neighbourhoods, where the first alone never lets the cost bound act);
//! - on cost, when the weight bound reaches only the incumbent's weight: the cost placed plus the
//!   least the open jobs can pay to make up the weight still missing, taken fractionally in order
//!   of cost per weight, the better of each job at its cheapest fitting candidate and the same with
//!   the resources priced at cost multipliers fitted at the root (a Lagrangian bound on cost, less
//!   the price of what is free). In the limited-discrepancy passes a job's choices then come in
//!   the order of that priced cost: the cheap candidates everyone wants come last when they are
//!   scarce (a random 35-job case +1.4 % above the optimum before, at it since).
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
    /// Per offer, the price of one VM's resources at the cost bound's multipliers (USD).
    vm_cost: Vec<f64>,
    /// The resources with a positive cost multiplier, and the multiplier (USD per unit).
    mu: Vec<(usize, f64)>,
    free: Vec<i64>,
    /// Scratch buffers: per depth, its choices in order; the cost bound's (cost, weight) pairs, at
    /// zero multipliers and at the cost multipliers.
    orders: Vec<Vec<(f64, Option<usize>)>>,
    fill: Vec<(f64, f64, ())>,
    priced: Vec<(f64, f64, ())>,
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

/// Subgradient steps at most for the cost multipliers, and steps without a better bound before the
/// step halves.
const COST_STEPS: usize = 200;
const COST_STALL: usize = 10;

/// The least cost of `need` weight from (cost, weight, tag) items taken fractionally, cheapest per
/// weight first (infinite when they cannot make it up); sorts `items` and tells `taken` each tag
/// taken and how much of it.
fn cover<T>(items: &mut [(f64, f64, T)], need: f64, mut taken: impl FnMut(&T, f64)) -> f64 {
    items.sort_by(|a, b| (a.0 / a.1).total_cmp(&(b.0 / b.1)));
    let mut left = need;
    let mut cost = 0.0;
    for (c, w, tag) in items.iter() {
        if left <= 0.0 {
            break;
        }
        let take = (left / w).min(1.0);
        cost += take * c;
        left -= take * w;
        taken(tag, take);
    }
    if left > 0.5 { f64::INFINITY } else { cost }
}

/// Per offer, the price of one VM's resources at `per_unit` (per resource).
fn vm_prices(offer_res: &[Vec<(usize, i64)>], per_unit: &[f64]) -> Vec<f64> {
    offer_res.iter().map(|res| res.iter().map(|&(r, a)| per_unit[r] * a as f64).sum()).collect()
}

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
        let vm_price = vm_prices(&offer_res, &lambda);
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
        let vm_cost = vec![0.0; offer_res.len()];
        let mut s = Search {
            jobs,
            weight,
            options,
            offer_res,
            vm_price,
            lambda,
            vm_cost,
            mu: Vec::new(),
            orders: vec![Vec::new(); subset.len() + 1],
            fill: Vec::new(),
            priced: Vec::new(),
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
        };
        s.fit_cost_multipliers();
        s
    }

    /// Multipliers on the resources for the cost bound, by subgradient ascent on its Lagrangian
    /// dual at the root: the least cost of the incumbent's weight with the resources priced instead
    /// of enforced. Each job at its cheapest candidate ignores that the cheap ones are few (spot
    /// pools, capacity); priced, a plan that crowds them is bounded by what it displaces, and a
    /// search for a cheaper plan at the same weight prunes most of its tree.
    fn fit_cost_multipliers(&mut self) {
        let need = self.best_weight;
        if need <= 0.5 || self.best_cost <= 0.0 {
            return;
        }
        let mut used = vec![false; self.free.len()];
        for &j in &self.jobs {
            for o in &self.options[j] {
                for &(r, _) in &self.offer_res[o.offer] {
                    used[r] = true;
                }
            }
        }
        let used: Vec<usize> = (0..used.len()).filter(|&r| used[r]).collect();
        let mut mu = vec![0.0_f64; self.free.len()];
        let (mut best, mut best_mu) = (f64::NEG_INFINITY, Vec::new());
        let (mut theta, mut stall) = (1.0, 0);
        let mut items: Vec<(f64, f64, (usize, usize))> = Vec::new();
        let mut g = vec![0.0_f64; self.free.len()];
        for _ in 0..COST_STEPS {
            let vm_cost = vm_prices(&self.offer_res, &mu);
            items.clear();
            for &j in &self.jobs {
                self.work += self.options[j].len();
                let priced = |(k, o): (usize, &Cand)| (o.cost + f64::from(o.vms) * vm_cost[o.offer], k);
                let cheapest = self.options[j]
                    .iter()
                    .enumerate()
                    .filter(|(_, o)| fits(&self.offer_res, &self.free, o))
                    .map(priced)
                    .min_by(|a, b| a.0.total_cmp(&b.0));
                if let Some((c, k)) = cheapest {
                    items.push((c, self.weight[j], (j, k)));
                }
            }
            for &r in &used {
                g[r] = -(self.free[r] as f64);
            }
            // The relaxed plan's use of each resource, less what is free: the subgradient.
            let mut bound = cover(&mut items, need, |&(j, k), take| {
                let o = &self.options[j][k];
                for &(r, a) in &self.offer_res[o.offer] {
                    g[r] += take * f64::from(o.vms) * a as f64;
                }
            });
            if !bound.is_finite() {
                return;
            }
            bound -= used.iter().map(|&r| mu[r] * self.free[r] as f64).sum::<f64>();
            if best_mu.is_empty() || bound > best + 1e-9 * best.abs().max(1.0) {
                best = bound;
                best_mu.clone_from(&mu);
                stall = 0;
            } else {
                stall += 1;
                if stall == COST_STALL {
                    theta /= 2.0;
                    stall = 0;
                }
            }
            // Projected: a resource at zero with room left does not move.
            let norm: f64 = used.iter().filter(|&&r| mu[r] > 0.0 || g[r] > 0.0).map(|&r| g[r] * g[r]).sum();
            if norm < 1e-12 || best >= self.best_cost * (1.0 - 1e-9) || theta < 1e-3 {
                break;
            }
            let step = theta * (self.best_cost - bound).max(1e-6 * self.best_cost) / norm;
            for &r in &used {
                mu[r] = (mu[r] + step * g[r]).max(0.0);
            }
        }
        crate::trace(|| format!("cost multipliers: bound {best:.2}, incumbent {:.2}", self.best_cost));
        if best_mu.is_empty() {
            return;
        }
        self.mu = (0..best_mu.len()).filter(|&r| best_mu[r] > 0.0).map(|r| (r, best_mu[r])).collect();
        self.vm_cost = vm_prices(&self.offer_res, &best_mu);
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
        // The bound at zero multipliers, every open job that still fits somewhere placed: weaker
        // where resources are scarce, but exact where they are not, as in a neighbourhood whose
        // jobs all have room (the multipliers' bound then counts the room too, and the cost bound
        // below would never be reached).
        let mut fitting = 0.0;
        for &j in &self.jobs[d..] {
            self.work += self.options[j].len();
            let w = self.weight[j];
            let mut net = 0.0_f64;
            let mut fit = false;
            for o in &self.options[j] {
                let n = w - f64::from(o.vms) * self.vm_price[o.offer];
                if (n > net || !fit) && fits(&self.offer_res, &self.free, o) {
                    net = net.max(n);
                    fit = true;
                }
            }
            ub += net;
            if fit {
                fitting += w;
            }
        }
        ub.min(fitting)
    }

    /// The least cost of making up `need` more weight from the open jobs, resources relaxed: the
    /// better of two bounds, each job at its cheapest fitting candidate, and the same with the
    /// resources priced at the cost multipliers (less their price of what is free).
    fn fill_cost(&mut self, d: usize, need: f64) -> f64 {
        if need <= 0.5 {
            return 0.0;
        }
        let mut fill = std::mem::take(&mut self.fill);
        let mut priced = std::mem::take(&mut self.priced);
        fill.clear();
        priced.clear();
        for &j in &self.jobs[d..] {
            self.work += self.options[j].len();
            let (mut cheapest, mut cheapest_priced) = (f64::INFINITY, f64::INFINITY);
            for o in &self.options[j] {
                if fits(&self.offer_res, &self.free, o) {
                    cheapest = cheapest.min(o.cost);
                    cheapest_priced = cheapest_priced.min(o.cost + f64::from(o.vms) * self.vm_cost[o.offer]);
                }
            }
            if cheapest.is_finite() {
                fill.push((cheapest, self.weight[j], ()));
                priced.push((cheapest_priced, self.weight[j], ()));
            }
        }
        let plain = cover(&mut fill, need, |_, _| {});
        let bound = if self.mu.is_empty() {
            plain
        } else {
            let free: f64 = self.mu.iter().map(|&(r, m)| m * self.free[r] as f64).sum();
            plain.max(cover(&mut priced, need, |_, _| {}) - free)
        };
        self.fill = fill;
        self.priced = priced;
        bound
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
        // waiting is worth nothing net); once only cost can be gained, by cost with the resources
        // priced; in the full search cheapest first and waiting last.
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
        } else if discrepancies != usize::MAX && !self.mu.is_empty() {
            for e in order.iter_mut() {
                if let Some(k) = e.1 {
                    let o = &self.options[j][k];
                    e.0 = o.cost + f64::from(o.vms) * self.vm_cost[o.offer];
                }
            }
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
