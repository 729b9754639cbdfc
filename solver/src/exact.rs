//! Branch and bound for small problems: every gang job on one of its candidates or waiting, every
//! non-gang job split over its candidates in whole VMs (or partly placed, or waiting), under the
//! quota pools, the offers' capacity and the non-gang jobs' price caps and budgets; the most
//! weight, then the least cost, proven.
//!
//! A non-gang job is decided in steps at its depth: full parts (VMs whose GPUs it all uses, on
//! candidates in rank order, each at most once), then at most one part with idle GPUs that
//! completes the job, on any candidate. That covers every plan worth having: with two parts that
//! both have idle GPUs, moving GPUs to the one with the cheaper egress until one is full or a VM is
//! wholly idle (and dropped) costs no more.
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

use crate::model::{Assign, Cand, EPS, Instance, Resources, Sol, better};
use crate::search::weight;

/// A choice at a node: a job's candidate index and VMs on it, or waiting (`None`).
type Choice = Option<(usize, u32)>;

struct Search<'a> {
    /// Jobs in branching order.
    jobs: Vec<usize>,
    /// Per job, the weight of placing it whole, and its priority (a non-gang job's weight per GPU).
    weight: Vec<f64>,
    prio: Vec<f64>,
    gang: Vec<bool>,
    /// Per non-gang job: the GPUs it still needs, the first candidate its next full part may use
    /// (parts come in rank order), its price cap and budget (infinite when none) and what its parts
    /// so far take of them (USD per hour, USD).
    rem: Vec<u32>,
    from: Vec<usize>,
    limits: Vec<(f64, f64)>,
    spent: Vec<(f64, f64)>,
    /// Per job, its candidates (as the instance ranks them, cheapest first).
    options: Vec<Vec<Cand>>,
    /// Per offer, its hourly price per VM.
    offer_price: Vec<f64>,
    /// Per offer, the resources one VM uses and how much.
    offer_res: &'a [Vec<(usize, i64)>],
    /// Per offer, the Lagrangian price of one VM.
    vm_price: Vec<f64>,
    /// The resources with a positive multiplier, and the multiplier (weight per unit): the
    /// weight bound prices what is free of these at every node, and they are few of the pools
    /// and capacities.
    lambda: Vec<(usize, f64)>,
    /// Per offer, the price of one VM's resources at the cost bound's multipliers (USD).
    vm_cost: Vec<f64>,
    /// The resources with a positive cost multiplier, and the multiplier (USD per unit).
    mu: Vec<(usize, f64)>,
    /// Per job, its candidates by what each adds to the weight bound, most first: its weight less
    /// the multipliers' price of its VMs (per GPU for a split job). The bound takes the first
    /// that fits; every node looked at every candidate before (with the resources' prices summed
    /// at every node, a third of split-100-3's solve: BENCHMARKS.md, "The exact search's bounds
    /// without the per-node scans (session 70)").
    by_net: Vec<Vec<(f64, usize)>>,
    /// Per job, its candidates by cost (per GPU for a split job), cheapest first, and by cost
    /// with the resources priced at the cost multipliers: the cost bound takes the first of each
    /// that fits.
    by_cost: Vec<Vec<(f64, usize)>>,
    by_priced_cost: Vec<Vec<(f64, usize)>>,
    free: Vec<i64>,
    /// Scratch buffers: per level of the recursion, its choices in order; the cost bound's (cost,
    /// weight) pairs, at zero multipliers and at the cost multipliers.
    orders: Vec<Vec<(f64, f64, Choice)>>,
    fill: Vec<(f64, f64, ())>,
    priced: Vec<(f64, f64, ())>,
    /// Per job, the (candidate, VMs) parts chosen on the current path: one for a gang job.
    chosen: Vec<Vec<(usize, u32)>>,
    /// The most weight any plan places, when proven (`INFINITY` otherwise; see [`solve`]).
    max_weight: f64,
    best_weight: f64,
    best_cost: f64,
    best: Vec<Vec<(usize, u32)>>,
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
/// proven. `None` when the problem is too large for the search. `lambda`: per resource (quota
/// pools, then every offer's capacity), a non-negative multiplier in weight per unit (vCPU or VM);
/// resources past its end count 0 (`&[]`: no multipliers).
/// `max_weight`: the most weight any plan can place, as a bound proves it (`INFINITY` when none):
/// every node's weight bound is capped at it, and with it the search takes up to
/// [`MAX_CAPPED_JOBS`] jobs.
pub(crate) fn solve(
    inst: &Instance,
    incumbent: &Sol,
    lambda: &[f64],
    max_weight: f64,
    work_limit: usize,
    deadline: Option<Instant>,
) -> Option<(Sol, bool)> {
    let p = inst.p;
    if p.jobs.len() > if max_weight.is_finite() { MAX_CAPPED_JOBS } else { MAX_JOBS } {
        return None;
    }
    let (free, offer_res) = inst.resources();
    let jobs: Vec<usize> = (0..p.jobs.len()).collect();
    let mut s = Search::new(inst, &jobs, free, &offer_res, incumbent, lambda, work_limit, deadline);
    s.max_weight = max_weight;
    s.run(DISCREPANCY_PASSES);
    crate::trace(|| format!("branch and bound: {} nodes, work {}, finished {}", s.nodes, s.work, !s.aborted));
    let mut sol = Sol::new(inst);
    s.take_best(inst, &mut sol);
    Some((sol, !s.aborted))
}

/// Re-solves the jobs `subset` of `sol` exactly with every other placement fixed, within
/// `work_limit`: the sub-plan of the most weight, then the least cost, that the search found,
/// placed into `sol`. Returns whether it changed `sol` (then for the better) and the work spent.
/// `lambda` as for [`solve`].
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
    let mut s = Search::new(inst, subset, free, offer_res, &inside, lambda, work_limit, deadline);
    // The sub-plan as it is (the search's own accounting of a split job's egress may differ).
    let before = (inside.weight(inst), inside.cost());
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

/// Jobs above which the exact search is not tried: the tree grows too fast for a round.
pub(crate) const MAX_JOBS: usize = 40;

/// Jobs up to which the search runs when a bound caps the weight (the LP's or the knapsack bound):
/// every node's weight bound is capped at it, so that where the plan reaches it only its cost is
/// searched, and its cost pruning acts at every node. On the independent 60- and 100-job problems
/// (seeds 1-3, 66 problems) it proves 10 plans optimal in 4-94 ms (none before; 4 when it ran only
/// on plans at the bound), the solve's mean wall time 265 -> 281 ms; it gives up on the others after
/// its work budget, as on 40 jobs.
pub(crate) const MAX_CAPPED_JOBS: usize = 100;

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

/// Whether `vms` VMs of the offer fit in what is free.
fn fits(offer_res: &[Vec<(usize, i64)>], free: &[i64], offer: usize, vms: u32) -> bool {
    offer_res[offer].iter().all(|&(r, a)| a * i64::from(vms) <= free[r])
}

/// A job's candidates' indices, each with its `key`, in increasing order of it (a tie by index).
fn ranked(options: &[Cand], key: impl Fn(&Cand) -> f64) -> Vec<(f64, usize)> {
    let mut by: Vec<(f64, usize)> = options.iter().enumerate().map(|(k, o)| (key(o), k)).collect();
    by.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    by
}

/// What a candidate costs the cost bound, with `vm_cost` the price of one VM's resources: the
/// whole placement for a gang job, per GPU for a split job.
fn cost_of(gang: bool, o: &Cand, vm_cost: f64) -> f64 {
    if gang { o.cost + f64::from(o.vms) * vm_cost } else { (o.cost + vm_cost) / f64::from(o.gpus) + o.egress_per_gpu }
}

/// A non-gang part's GPUs and cost: `vms` VMs of the candidate for a job that needs `rem` more GPUs
/// (the last VM's idle GPUs are paid, not moved).
fn part(c: &Cand, vms: u32, rem: u32) -> (u32, f64) {
    let gpus = rem.min(vms * c.gpus);
    (gpus, f64::from(vms) * c.cost + c.egress_per_gpu * f64::from(gpus))
}

impl<'a> Search<'a> {
    /// A search over `subset` (the jobs to choose for; every other job's use already taken out of
    /// `free`), from the incumbent's choices for them.
    #[allow(clippy::too_many_arguments)]
    fn new(
        inst: &Instance,
        subset: &[usize],
        free: Vec<i64>,
        offer_res: &'a [Vec<(usize, i64)>],
        incumbent: &Sol,
        lambda: &[f64],
        work_limit: usize,
        deadline: Option<Instant>,
    ) -> Search<'a> {
        let p = inst.p;
        let n = p.jobs.len();
        let lambda: Vec<f64> = (0..free.len()).map(|r| lambda.get(r).copied().unwrap_or(0.0).max(0.0)).collect();
        let vm_price = vm_prices(offer_res, &lambda);
        let weight: Vec<f64> = (0..n).map(|j| weight(inst, j)).collect();
        let prio: Vec<f64> = p.jobs.iter().map(|j| f64::from(j.priority)).collect();
        let gang: Vec<bool> = p.jobs.iter().map(|j| j.gang).collect();
        let limits: Vec<(f64, f64)> = p
            .jobs
            .iter()
            .map(|j| (j.max_price_per_hour.unwrap_or(f64::INFINITY), j.budget.unwrap_or(f64::INFINITY)))
            .collect();
        let options: Vec<Vec<Cand>> =
            (0..n).map(|j| if subset.contains(&j) { inst.cands_of(j).to_vec() } else { Vec::new() }).collect();
        let mut jobs: Vec<usize> = subset.iter().copied().filter(|&j| !options[j].is_empty()).collect();
        jobs.sort_by(|&a, &b| weight[b].total_cmp(&weight[a]).then(a.cmp(&b)));
        // The incumbent, as (candidate, VMs) parts: a split job's VMs merged per candidate, in rank
        // order, and valued as the search values them.
        let mut best: Vec<Vec<(usize, u32)>> = vec![Vec::new(); n];
        for a in &incumbent.assigns {
            if let Some(k) = options[a.job].iter().position(|c| c.offer == a.offer) {
                match best[a.job].iter_mut().find(|(kk, _)| *kk == k) {
                    Some(part) => part.1 += a.vms,
                    None => best[a.job].push((k, a.vms)),
                }
            }
        }
        let (mut best_weight, mut best_cost) = (0.0, 0.0);
        for j in 0..n {
            best[j].sort_unstable();
            let mut rem = p.jobs[j].gpus;
            for &(k, vms) in &best[j] {
                let c = &options[j][k];
                if gang[j] {
                    best_weight += weight[j];
                    best_cost += c.cost;
                } else {
                    let (gpus, cost) = part(c, vms, rem);
                    rem -= gpus;
                    best_weight += prio[j] * f64::from(gpus);
                    best_cost += cost;
                }
            }
        }
        let vm_cost = vec![0.0; offer_res.len()];
        let by_net = (0..n)
            .map(|j| {
                ranked(&options[j], |o| {
                    if gang[j] {
                        weight[j] - f64::from(o.vms) * vm_price[o.offer]
                    } else {
                        prio[j] - vm_price[o.offer] / f64::from(o.gpus)
                    }
                })
                .into_iter()
                .rev()
                .collect()
            })
            .collect();
        let by_cost = (0..n).map(|j| ranked(&options[j], |o| cost_of(gang[j], o, 0.0))).collect();
        let mut s = Search {
            jobs,
            weight,
            prio,
            gang,
            rem: p.jobs.iter().map(|j| j.gpus).collect(),
            from: vec![0; n],
            limits,
            spent: vec![(0.0, 0.0); n],
            options,
            offer_price: p.offers.iter().map(|o| o.price_per_hour).collect(),
            offer_res,
            vm_price,
            lambda: (0..lambda.len()).filter(|&r| lambda[r] > 0.0).map(|r| (r, lambda[r])).collect(),
            vm_cost,
            mu: Vec::new(),
            by_net,
            by_cost,
            by_priced_cost: Vec::new(),
            orders: Vec::new(),
            fill: Vec::new(),
            priced: Vec::new(),
            free,
            chosen: vec![Vec::new(); n],
            max_weight: f64::INFINITY,
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
        s.by_priced_cost =
            (0..n).map(|j| ranked(&s.options[j], |o| cost_of(s.gang[j], o, s.vm_cost[o.offer]))).collect();
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
        // What is free does not change while the multipliers are fitted: each job's candidates
        // that fit, and the offers they are on, found once rather than at every step (the steps
        // were a tenth of a 100-job solve, most of it pricing offers no job here can use).
        let fitting: Vec<(usize, Vec<usize>)> = self
            .jobs
            .iter()
            .map(|&j| {
                let ks = (0..self.options[j].len())
                    .filter(|&k| {
                        let o = &self.options[j][k];
                        fits(self.offer_res, &self.free, o.offer, o.vms)
                    })
                    .collect();
                (j, ks)
            })
            .collect();
        let mut offers: Vec<usize> =
            fitting.iter().flat_map(|(j, ks)| ks.iter().map(|&k| self.options[*j][k].offer)).collect();
        offers.sort_unstable();
        offers.dedup();
        let mut vm_cost = vec![0.0; self.offer_res.len()];
        let mut mu = vec![0.0_f64; self.free.len()];
        let (mut best, mut best_mu) = (f64::NEG_INFINITY, Vec::new());
        let (mut theta, mut stall) = (1.0, 0);
        let mut items: Vec<(f64, f64, (usize, usize))> = Vec::new();
        let mut g = vec![0.0_f64; self.free.len()];
        for _ in 0..COST_STEPS {
            for &o in &offers {
                vm_cost[o] = self.offer_res[o].iter().map(|&(r, a)| mu[r] * a as f64).sum();
            }
            items.clear();
            for (j, ks) in &fitting {
                self.work += self.options[*j].len();
                if let Some((c, w, k)) = self.cheapest(*j, &vm_cost, ks.iter().copied()) {
                    items.push((c, w, (*j, k)));
                }
            }
            for &r in &used {
                g[r] = -(self.free[r] as f64);
            }
            // The relaxed plan's use of each resource, less what is free: the subgradient.
            let mut bound = cover(&mut items, need, |&(j, k), take| {
                let o = &self.options[j][k];
                let vms = if self.gang[j] { f64::from(o.vms) } else { f64::from(self.rem[j]) / f64::from(o.gpus) };
                for &(r, a) in &self.offer_res[o.offer] {
                    g[r] += take * vms * a as f64;
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
        self.vm_cost = vm_prices(self.offer_res, &best_mu);
    }

    /// The least an open job can pay for what it still needs, resources relaxed but each VM's
    /// resources priced at `vm_cost`, over its candidates `ks` (those that fit, in rank order):
    /// (cost, the weight it buys, the candidate). A split job pays per GPU at its cheapest
    /// candidate's full-VM rate (a partly used VM costs more per GPU, never less).
    fn cheapest(&self, j: usize, vm_cost: &[f64], ks: impl Iterator<Item = usize>) -> Option<(f64, f64, usize)> {
        let gang = self.gang[j];
        let mut best: Option<(f64, usize)> = None;
        for k in ks {
            let o = &self.options[j][k];
            let c = if gang {
                o.cost + f64::from(o.vms) * vm_cost[o.offer]
            } else {
                (o.cost + vm_cost[o.offer]) / f64::from(o.gpus) + o.egress_per_gpu
            };
            if best.is_none_or(|(b, _)| c < b) {
                best = Some((c, k));
            }
        }
        let (c, k) = best?;
        let (w, units) = self.open(j);
        (units > 0.0).then_some((c * units, w, k))
    }

    /// A few passes that stray from the relaxation's choices at most once, twice, … (`passes`)
    /// find better plans early (a plain depth-first search spends its budget at the bottom of the
    /// first branches); then the full search, the only one that proves anything.
    fn run(&mut self, passes: usize) {
        for limit in 1..=passes {
            self.branch(0, 0, 0.0, 0.0, limit);
            if self.aborted {
                return;
            }
        }
        self.branch(0, 0, 0.0, 0.0, usize::MAX);
    }

    /// The best choices found, placed into `sol`.
    fn take_best(&self, inst: &Instance, sol: &mut Sol) {
        for (j, parts) in self.best.iter().enumerate() {
            let mut rem = inst.p.jobs[j].gpus;
            for &(k, vms) in parts {
                let c = &self.options[j][k];
                let (gpus, cost) = if self.gang[j] { (c.gpus, c.cost) } else { part(c, vms, rem) };
                rem -= gpus.min(rem);
                sol.take(inst, Assign { job: j, offer: c.offer, vms, gpus, cost });
            }
        }
    }

    fn apply(&mut self, offer: usize, vms: u32, sign: i64) {
        for &(r, a) in &self.offer_res[offer] {
            self.free[r] -= sign * a * i64::from(vms);
        }
    }

    /// What open job `j` can still add: its weight, and the units its per-unit terms count (1 for
    /// a gang job; for a split job the GPUs it still needs, as its terms are per GPU).
    fn open(&self, j: usize) -> (f64, f64) {
        if self.gang[j] {
            (self.weight[j], 1.0)
        } else {
            let rem = f64::from(self.rem[j]);
            (self.prio[j] * rem, rem)
        }
    }

    /// VMs of the offer that fit in what is free.
    fn room(&self, offer: usize) -> u32 {
        self.offer_res[offer]
            .iter()
            .map(|&(r, a)| u32::try_from((self.free[r] / a).max(0)).unwrap_or(u32::MAX))
            .min()
            .unwrap_or(u32::MAX)
    }

    /// The Lagrangian bound on the weight the open jobs (from depth `d`) can add, at the root's
    /// multipliers and the node's free resources. (Multipliers re-optimised at each node by a few
    /// subgradient steps from the parent's were tried: they drift, and a 12-job problem proven in
    /// 42 nodes with the root's was not proven in a million.)
    fn lagrangian(&mut self, d: usize) -> f64 {
        let mut ub: f64 = self.lambda.iter().map(|&(r, l)| self.free[r] as f64 * l).sum();
        // The bound at zero multipliers, every open job that still fits somewhere placed: weaker
        // where resources are scarce, but exact where they are not, as in a neighbourhood whose
        // jobs all have room (the multipliers' bound then counts the room too, and the cost bound
        // below would never be reached).
        let mut fitting = 0.0;
        for &j in &self.jobs[d..] {
            // Every candidate counts, though the orders look at a few: the budget stops the search
            // where it stopped when each was looked at, so that its plans stay what they were.
            self.work += self.options[j].len();
            // A split job's GPUs each add its priority less the price of a VM's share of them: its
            // best net per GPU times the GPUs it still needs bounds every way of placing them.
            let (w, per) = self.open(j);
            let first = self.by_net[j].iter().find(|&&(_, k)| {
                let o = &self.options[j][k];
                fits(self.offer_res, &self.free, o.offer, o.vms)
            });
            if let Some(&(net, _)) = first {
                ub += 0.0_f64.max(if self.gang[j] { net } else { per * net });
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
            let first = |by: &[(f64, usize)]| {
                by.iter()
                    .find(|&&(_, k)| {
                        let o = &self.options[j][k];
                        fits(self.offer_res, &self.free, o.offer, o.vms)
                    })
                    .map(|&(c, _)| c)
            };
            let (w, times) = self.open(j);
            // The same candidates fit in both orders: either both are found or neither.
            if let (Some(cheapest), Some(cheapest_priced)) = (first(&self.by_cost[j]), first(&self.by_priced_cost[j]))
                && w > 0.0
            {
                fill.push((cheapest * times, w, ()));
                priced.push((cheapest_priced * times, w, ()));
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

    /// The node at depth `d` (its job next to decide) and recursion `level`, with weight `w` and
    /// cost `c` placed so far.
    fn branch(&mut self, d: usize, level: usize, w: f64, c: f64, discrepancies: usize) {
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
        let ub = (w + self.lagrangian(d)).min(self.max_weight);
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
        let guided = ub >= self.best_weight + 0.5 && discrepancies != usize::MAX;
        let priced = !guided && discrepancies != usize::MAX && !self.mu.is_empty();
        // Each level's order in its own buffer, kept across nodes (no allocation per node).
        if self.orders.len() <= level {
            self.orders.resize_with(level + 1, Vec::new);
        }
        let mut order = std::mem::take(&mut self.orders[level]);
        order.clear();
        if self.gang[j] {
            order.extend((0..self.options[j].len()).filter_map(|k| {
                let o = &self.options[j][k];
                let key = if priced {
                    o.cost + f64::from(o.vms) * self.vm_cost[o.offer]
                } else {
                    f64::from(o.vms) * self.vm_price[o.offer]
                };
                fits(self.offer_res, &self.free, o.offer, o.vms).then_some((key, 0.0, Some((k, o.vms))))
            }));
            order.push((if guided { self.weight[j] } else { f64::INFINITY }, 0.0, None));
            if guided || priced {
                order.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
        } else {
            self.split_choices(j, guided, priced, &mut order);
        }
        for (i, &(_, _, choice)) in order.iter().enumerate() {
            // Limited discrepancy: each choice other than the first spends one.
            let left = if i == 0 {
                discrepancies
            } else if discrepancies == 0 {
                break;
            } else {
                discrepancies - 1
            };
            match choice {
                Some((k, vms)) if self.gang[j] => {
                    let o = self.options[j][k];
                    self.apply(o.offer, vms, 1);
                    self.chosen[j].push((k, vms));
                    self.branch(d + 1, level + 1, w + self.weight[j], c + o.cost, left);
                    self.chosen[j].pop();
                    self.apply(o.offer, vms, -1);
                }
                Some((k, vms)) => {
                    let o = self.options[j][k];
                    let (rem, from, spent) = (self.rem[j], self.from[j], self.spent[j]);
                    let (gpus, cost) = part(&o, vms, rem);
                    self.apply(o.offer, vms, 1);
                    self.chosen[j].push((k, vms));
                    self.rem[j] = rem - gpus;
                    self.from[j] = k + 1;
                    self.spent[j] = (spent.0 + f64::from(vms) * self.offer_price[o.offer], spent.1 + cost);
                    // Done when it has all its GPUs, or no candidate is left for a full part
                    // (a part with idle GPUs comes last).
                    let done = self.rem[j] == 0 || gpus < vms * o.gpus;
                    let next = if done { d + 1 } else { d };
                    self.branch(next, level + 1, w + self.prio[j] * f64::from(gpus), c + cost, left);
                    self.rem[j] = rem;
                    self.from[j] = from;
                    self.spent[j] = spent;
                    self.chosen[j].pop();
                    self.apply(o.offer, vms, -1);
                }
                None => self.branch(d + 1, level + 1, w, c, left),
            }
            if self.aborted {
                break;
            }
        }
        self.orders[level] = order;
    }

    /// The next choices for split job `j`: a full part (VMs whose GPUs it all uses) on a candidate
    /// from `from` on, a part with idle GPUs that completes it on any candidate, or stopping where
    /// it is. Ordered as for a gang job: by the multipliers' price per GPU while weight can be
    /// gained (stopping at its priority), by priced cost per GPU when only cost can, by cost per GPU
    /// in the full search (stopping last); the more GPUs first on a tie.
    fn split_choices(&mut self, j: usize, guided: bool, priced: bool, order: &mut Vec<(f64, f64, Choice)>) {
        let rem = self.rem[j];
        let (cap, budget) = self.limits[j];
        let (price, spent) = self.spent[j];
        self.work += self.options[j].len();
        for k in 0..self.options[j].len() {
            let o = self.options[j][k];
            let mut most = self.room(o.offer);
            let hourly = self.offer_price[o.offer];
            if cap.is_finite() && hourly > 0.0 {
                most = most.min(((cap - price + EPS) / hourly).floor().max(0.0) as u32);
            }
            let full = if k >= self.from[j] { (rem / o.gpus).min(most) } else { 0 };
            let overflow = !rem.is_multiple_of(o.gpus) && rem.div_ceil(o.gpus) <= most;
            let vms_list = (1..=full).rev().chain(overflow.then(|| rem.div_ceil(o.gpus)));
            for vms in vms_list {
                let (gpus, cost) = part(&o, vms, rem);
                if spent + cost > budget + EPS {
                    continue;
                }
                let g = f64::from(gpus);
                let key = if guided {
                    f64::from(vms) * self.vm_price[o.offer] / g
                } else if priced {
                    (cost + f64::from(vms) * self.vm_cost[o.offer]) / g
                } else {
                    cost / g
                };
                order.push((key, -g, Some((k, vms))));
            }
        }
        order.push((if guided { self.prio[j] } else { f64::INFINITY }, 0.0, None));
        // Its choices can be many more than its candidates (one per VM count): they are work too.
        self.work += order.len();
        order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    }
}
