//! The Lagrangian bound on the placed weight: the shared rows (quota pools, offer capacity, and a
//! non-gang class's price cap and budget) are priced with multipliers instead of enforced, so that
//! every class chooses alone: the candidate with the most weight net of the prices of what it uses,
//! or nothing. For any non-negative multipliers the result bounds every plan (weak duality); at the
//! best multipliers it equals the LP relaxation's optimum, because a class's own choice (one
//! candidate per gang job, fractional VMs for a non-gang job) is integral already.
//!
//! Evaluating it costs one pass over the candidates, with no LP solver: what makes it the bound of
//! choice when jobs do not collapse into classes (10,000 distinct jobs are 400,000 candidates, an LP
//! too large to solve in the time a scheduler round has). The multipliers come from a subgradient
//! method (Polyak steps towards the best plan's weight, deflected directions), and their per-VM
//! prices of every offer rank candidates for the Lagrangian heuristic in `search`.

use std::sync::mpsc;
use std::time::Instant;

use crate::knapsack_bound::{self, ClassItem, ClassItems, Priced};
use crate::model::{Cand, Instance};

/// Jobs above which [`Lagrangian::knapsack_bound`] keeps every job's multiplier. On the 70
/// independent problems of 60-100 jobs the knapsacks without them proved 1 more weight optimal
/// (tight-caps-100-3) and tightened 7 other bounds (split-100-1's gap 0.0176 -> 0.0053), on the 62
/// of 1,000 and 10,000 jobs one-pool-1000-1 optimal (gap 0.00033 -> 0) and tight-caps-1000-1's gap
/// 0.0250 -> 0.0209; at 10,000 jobs they took 30-50 ms more (the knapsacks at the pools' prices
/// take 70-150 ms there) and tightened the bound by less than 0.03 % of it.
pub(crate) const EXACT_UNITS_MAX_JOBS: usize = 2_000;

/// A row: its right-hand side and the scale the subgradient is measured in (the right-hand side
/// itself, so that every row's subgradient is a fraction of its limit).
struct Rows {
    rhs: Vec<f64>,
    scale: Vec<f64>,
    /// Per offer, its capacity row.
    cap_row: Vec<Option<usize>>,
    /// Per class (non-gang only), its price-cap and budget rows.
    price_row: Vec<Option<usize>>,
    budget_row: Vec<Option<usize>>,
}

impl Rows {
    /// A non-gang class's multipliers per unit of its price-cap and budget rows (0 without them).
    fn split_multipliers(&self, c: usize, theta: &[f64]) -> (f64, f64) {
        let per_unit = |row: Option<usize>| row.map_or(0.0, |r| theta[r] / self.scale[r]);
        (per_unit(self.price_row[c]), per_unit(self.budget_row[c]))
    }
}

/// A non-gang job's weight from one VM of `cand` at priority `prio`, net of `vm_price` (the prices
/// of the rows it uses, per VM) and of what the VM takes of its price cap and budget at
/// multipliers `(price, budget)` (`Rows::split_multipliers`).
fn split_vm_profit(p: &crate::Problem, cand: &Cand, prio: f64, vm_price: f64, (price, budget): (f64, f64)) -> f64 {
    let gpus = f64::from(cand.gpus);
    prio * gpus
        - vm_price
        - price * p.offers[cand.offer].price_per_hour
        - budget * (cand.cost + cand.egress_per_gpu * gpus)
}

/// Multipliers and what they prove.
#[derive(Clone, Debug)]
pub(crate) struct Dual {
    /// Per row, the multiplier times the row's scale (weight per fraction of the row).
    theta: Vec<f64>,
    /// The bound at these multipliers: no plan places more weight.
    pub bound: f64,
}

pub(crate) struct Lagrangian<'i, 'a> {
    inst: &'i Instance<'a>,
    rows: Rows,
    /// Per gang class, the range of its candidates in `gang_cands`.
    gang_range: Vec<(u32, u32)>,
    /// Gang candidates that matter for weight, compact (offer, VMs): a candidate that uses the same
    /// pools as another of its class, no capacity row and no fewer vCPUs is left out (it never
    /// places more weight), and the scan over all of them is what every step costs.
    gang_cands: Vec<(u32, f32)>,
    /// Per entry of `gang_cands`, its index in the class's candidates.
    gang_index: Vec<u32>,
    /// Per-VM price of each offer at the current multipliers, for reuse by the caller.
    pub price: Vec<f64>,
}

impl<'i, 'a> Lagrangian<'i, 'a> {
    pub fn new(inst: &'i Instance<'a>) -> Self {
        let p = inst.p;
        let mut rhs: Vec<f64> = inst.pool_limit.iter().map(|&l| l as f64).collect();
        let mut cap_row = vec![None; p.offers.len()];
        for (o, offer) in p.offers.iter().enumerate() {
            if let Some(cap) = offer.capacity_vms {
                cap_row[o] = Some(rhs.len());
                rhs.push(f64::from(cap));
            }
        }
        let mut price_row = vec![None; inst.classes.len()];
        let mut budget_row = vec![None; inst.classes.len()];
        for (c, class) in inst.classes.iter().enumerate() {
            let job = inst.job(class.rep);
            if job.gang || class.cands.is_empty() {
                continue;
            }
            let n = class.jobs.len() as f64;
            if let Some(cap) = job.max_price_per_hour {
                price_row[c] = Some(rhs.len());
                rhs.push(n * cap);
            }
            if let Some(budget) = job.budget {
                budget_row[c] = Some(rhs.len());
                rhs.push(n * budget);
            }
        }
        let scale = rhs.iter().map(|&b| if b > 0.0 { b } else { 1.0 }).collect();
        let mut gang_range = vec![(0, 0); inst.classes.len()];
        let mut gang_cands = Vec::new();
        let mut gang_index = Vec::new();
        for (c, class) in inst.classes.iter().enumerate() {
            if !inst.job(class.rep).gang {
                continue;
            }
            let first = gang_cands.len() as u32;
            let vcpus = |k: &crate::model::Cand| u64::from(k.vms) * u64::from(p.offers[k.offer].vcpus_per_vm);
            for (i, k) in class.cands.iter().enumerate() {
                let pools = &inst.offer_pools[k.offer];
                let dominated = class.cands.iter().any(|a| {
                    a.offer != k.offer
                        && p.offers[a.offer].capacity_vms.is_none()
                        && inst.offer_pools[a.offer] == *pools
                        && (vcpus(a) < vcpus(k) || (vcpus(a) == vcpus(k) && a.offer < k.offer))
                });
                if !dominated {
                    gang_cands.push((k.offer as u32, k.vms as f32));
                    gang_index.push(i as u32);
                }
            }
            gang_range[c] = (first, gang_cands.len() as u32);
        }
        Lagrangian {
            inst,
            rows: Rows { rhs, scale, cap_row, price_row, budget_row },
            gang_range,
            gang_cands,
            gang_index,
            price: vec![0.0; p.offers.len()],
        }
    }

    /// The multipliers of `dual` per unit of each resource, quota pools first (per vCPU), then every
    /// offer's capacity (per VM; 0 for an offer without a capacity row): the layout of the exact
    /// search's resources.
    pub fn unit_multipliers(&self, dual: &Dual) -> Vec<f64> {
        let pools = self.inst.pool_limit.len();
        let mut out: Vec<f64> = (0..pools).map(|q| dual.theta[q] / self.rows.scale[q]).collect();
        out.extend(self.rows.cap_row.iter().map(|r| r.map_or(0.0, |r| dual.theta[r] / self.rows.scale[r])));
        out
    }

    /// A bound at least as tight as `dual.bound`, from the same multipliers: the quota pools enforced
    /// as knapsacks (`knapsack_bound`), twice. First every gang job's "at most one candidate" row
    /// priced, its multiplier the job's profit at the pools' prices, so that no item earns more than
    /// the prices of the vCPUs it takes and the knapsacks can only tighten the Lagrangian bound.
    /// Then, where some gang jobs have all their candidates in one knapsack unit (one region's
    /// regular or spot VMs), those jobs without a multiplier: the unit's knapsack keeps their row
    /// exactly, so a job left out no longer counts its multiplier. The lower of the two, on up to
    /// [`EXACT_UNITS_MAX_JOBS`] jobs.
    /// Only the knapsacks finished by `deadline` count: `dual.bound` alone when it passes during
    /// the first.
    pub fn knapsack_bound(&mut self, dual: &Dual, deadline: Option<Instant>) -> f64 {
        let priced = self.knapsack_bound_with(dual, false, deadline).unwrap_or(dual.bound);
        if self.inst.p.jobs.len() > EXACT_UNITS_MAX_JOBS {
            return priced.min(dual.bound);
        }
        let exact = self.knapsack_bound_with(dual, true, deadline).unwrap_or(dual.bound);
        crate::trace(|| format!("knapsack bounds: jobs priced {priced:.2}, one-unit jobs exact {exact:.2}"));
        priced.min(exact).min(dual.bound)
    }

    /// [`Lagrangian::knapsack_bound`]'s knapsacks, with the jobs whose candidates fall in one unit
    /// unpriced (`exact`) or not; `None` where the knapsacks do not apply (with `exact`, also where
    /// no job's candidates fall in one unit).
    fn knapsack_bound_with(&mut self, dual: &Dual, exact: bool, deadline: Option<Instant>) -> Option<f64> {
        let inst = self.inst;
        let exact_units =
            if exact { Some(knapsack_bound::units(&inst.pool_limit, &inst.offer_pools)?.0) } else { None };
        let mut any_exact = false;
        let p = inst.p;
        let theta = &dual.theta;
        self.set_prices(theta);
        let rows = &self.rows;
        let pools = inst.pool_limit.len();
        let cap_price: Vec<f64> = rows.cap_row.iter().map(|r| r.map_or(0.0, |r| theta[r] / rows.scale[r])).collect();
        let mut fixed: f64 = (pools..rows.rhs.len()).map(|r| theta[r] * rows.rhs[r] / rows.scale[r]).sum();
        let mut classes = Vec::with_capacity(inst.classes.len());
        for (c, class) in inst.classes.iter().enumerate() {
            let job = inst.job(class.rep);
            let jobs = class.jobs.len() as u32;
            let prio = f64::from(job.priority);
            if !job.gang {
                let split = rows.split_multipliers(c, theta);
                // Per VM: its weight net of every price but the pools', and of the pools' too.
                let net: Vec<(f64, f64)> = class
                    .cands
                    .iter()
                    .map(|k| {
                        (
                            split_vm_profit(p, k, prio, cap_price[k.offer], split),
                            split_vm_profit(p, k, prio, self.price[k.offer], split),
                        )
                    })
                    .collect();
                // The class's profit per GPU in the Lagrangian prices its GPU demand.
                let u = class.cands.iter().zip(&net).map(|(k, n)| n.1 / f64::from(k.gpus)).fold(0.0, f64::max);
                let demand = jobs * job.gpus;
                fixed += f64::from(demand) * u;
                let items = class
                    .cands
                    .iter()
                    .zip(&net)
                    .map(|(k, n)| ClassItem {
                        offer: k.offer,
                        vms: 1,
                        profit: n.0 - u * f64::from(k.gpus),
                        copies: demand.div_ceil(k.gpus.max(1)),
                    })
                    .collect();
                classes.push(ClassItems { gang: false, jobs, items });
                continue;
            }
            let w = prio * f64::from(job.gpus);
            let (from, to) = self.gang_range[c];
            let cands = &self.gang_cands[from as usize..to as usize];
            let one_unit = exact_units
                .as_ref()
                .is_some_and(|place| knapsack_bound::in_one_unit(place, cands.iter().map(|&(o, _)| o as usize)));
            any_exact |= one_unit;
            let u = if one_unit {
                0.0
            } else {
                cands.iter().map(|&(o, vms)| w - f64::from(vms) * self.price[o as usize]).fold(0.0, f64::max)
            };
            fixed += f64::from(jobs) * u;
            let items = cands
                .iter()
                .map(|&(o, vms)| ClassItem {
                    offer: o as usize,
                    vms: vms as u32,
                    profit: w - u - f64::from(vms) * cap_price[o as usize],
                    copies: 1,
                })
                .collect();
            classes.push(ClassItems { gang: true, jobs, items });
        }
        let pool_value = if exact_units.is_some() {
            None
        } else {
            Some((0..pools).map(|q| theta[q] * rows.rhs[q] / rows.scale[q]).collect())
        };
        let priced = Priced::of(inst, cap_price, pool_value, fixed, classes);
        if exact && !any_exact {
            return None;
        }
        knapsack_bound::bound(&priced, deadline)
    }

    /// Per-VM prices of the offers at multipliers `theta` (into `self.price`).
    fn set_prices(&mut self, theta: &[f64]) {
        let inst = self.inst;
        for (o, offer) in inst.p.offers.iter().enumerate() {
            let vcpus = f64::from(offer.vcpus_per_vm);
            let mut pi = 0.0;
            for &q in &inst.offer_pools[o] {
                pi += theta[q] / self.rows.scale[q] * vcpus;
            }
            if let Some(r) = self.rows.cap_row[o] {
                pi += theta[r] / self.rows.scale[r];
            }
            self.price[o] = pi;
        }
    }

    /// The Lagrangian at `theta` and its subgradient (per row, the scaled slack of the classes' own
    /// choices).
    fn evaluate(&mut self, theta: &[f64], grad: &mut [f64]) -> f64 {
        self.evaluate_into(theta, grad, None)
    }

    /// [`Lagrangian::evaluate`], adding `weight` times each class's choice to `choices` (per class
    /// and candidate, in the LP's units: a gang class's jobs, a split class's VMs) when given.
    fn evaluate_into(&mut self, theta: &[f64], grad: &mut [f64], mut choices: Option<(&mut [Vec<f64>], f64)>) -> f64 {
        self.set_prices(theta);
        let inst = self.inst;
        let p = inst.p;
        let rows = &self.rows;
        let mut value: f64 = theta.iter().zip(&rows.rhs).zip(&rows.scale).map(|((t, b), s)| t * b / s).sum();
        let mut use_vms = vec![0.0; p.offers.len()];
        let mut use_rows = vec![0.0; rows.rhs.len()];
        for (c, class) in inst.classes.iter().enumerate() {
            let job = inst.job(class.rep);
            let n = class.jobs.len() as f64;
            let prio = f64::from(job.priority);
            if job.gang {
                let w = prio * f64::from(job.gpus);
                let mut best = 0.0;
                let mut arg = None;
                let (from, to) = self.gang_range[c];
                for e in from as usize..to as usize {
                    let (offer, vms) = self.gang_cands[e];
                    let profit = w - f64::from(vms) * self.price[offer as usize];
                    if profit > best {
                        best = profit;
                        arg = Some(e);
                    }
                }
                if let Some(e) = arg {
                    let (offer, vms) = self.gang_cands[e];
                    value += n * best;
                    use_vms[offer as usize] += n * f64::from(vms);
                    if let Some((choices, weight)) = choices.as_mut() {
                        choices[c][self.gang_index[e] as usize] += *weight * n;
                    }
                }
            } else {
                let split = rows.split_multipliers(c, theta);
                let mut best = 0.0;
                let mut arg = None;
                for (i, cand) in class.cands.iter().enumerate() {
                    let profit = split_vm_profit(p, cand, prio, self.price[cand.offer], split);
                    let per_gpu = profit / f64::from(cand.gpus);
                    if per_gpu > best {
                        best = per_gpu;
                        arg = Some((i, cand));
                    }
                }
                if let Some((i, cand)) = arg {
                    let per_vm = cand.cost + cand.egress_per_gpu * f64::from(cand.gpus);
                    let gpus = n * f64::from(job.gpus);
                    let vms = gpus / f64::from(cand.gpus);
                    value += gpus * best;
                    use_vms[cand.offer] += vms;
                    if let Some((choices, weight)) = choices.as_mut() {
                        choices[c][i] += *weight * vms;
                    }
                    if let Some(r) = rows.price_row[c] {
                        use_rows[r] += vms * p.offers[cand.offer].price_per_hour;
                    }
                    if let Some(r) = rows.budget_row[c] {
                        use_rows[r] += vms * per_vm;
                    }
                }
            }
        }
        for (o, &vms) in use_vms.iter().enumerate() {
            if vms == 0.0 {
                continue;
            }
            let vcpus = f64::from(p.offers[o].vcpus_per_vm);
            for &q in &inst.offer_pools[o] {
                use_rows[q] += vms * vcpus;
            }
            if let Some(r) = rows.cap_row[o] {
                use_rows[r] += vms;
            }
        }
        for (r, g) in grad.iter_mut().enumerate() {
            *g = (rows.rhs[r] - use_rows[r]) / rows.scale[r];
        }
        value
    }

    /// Subgradient descent from `start` (or all zeros) for at most `iterations` steps or until
    /// `deadline`, stepping towards `target` (the weight of the best plan known, which the bound
    /// can never go below). Calls `visit` with the offers' per-VM prices every `visit_every` steps
    /// and with the best multipliers at the end; `visit` returns the best plan weight it knows, which
    /// becomes the new target. Stops early once the bound is within 1 of the target (weights are
    /// integers, so the target is then proven optimal).
    ///
    /// On more than one core (and outside a worker of `parallel::par_map`, whose solve keeps to
    /// its thread) the visits run on a thread of their own, and the steps go on beside each visit
    /// as if it left the target as it was; where it raises the target after all, the steps since
    /// it are taken again with the new one ([`Speculation`]). The steps, the visits and the bound
    /// are the ones in line would give, on any cores.
    pub fn descend(
        &mut self,
        start: Option<&Dual>,
        mut target: f64,
        iterations: usize,
        deadline: Option<Instant>,
        visit_every: usize,
        mut visit: impl FnMut(&[f64]) -> f64 + Send,
    ) -> Dual {
        let m = self.rows.rhs.len();
        let mut theta = start.map_or_else(|| vec![0.0; m], |d| d.theta.clone());
        let mut grad = vec![0.0; m];
        let mut dir = vec![0.0; m];
        let mut best = Dual { theta: theta.clone(), bound: f64::INFINITY };
        let mut step = 1.0;
        let mut since_better = 0;
        let beside = visit_every > 0 && crate::parallel::cores() > 1;
        std::thread::scope(|scope| {
            let mut visits = if beside {
                let (prices, to_visit) = mpsc::channel::<Vec<f64>>();
                let (weights, visited) = mpsc::channel::<f64>();
                let visit = &mut visit;
                scope.spawn(move || {
                    for price in to_visit {
                        if weights.send(visit(&price)).is_err() {
                            break;
                        }
                    }
                });
                Visits::Beside { prices, weights: visited, since: None, rewind: None }
            } else {
                Visits::InLine(&mut visit)
            };
            let mut it = 0;
            loop {
                // A visit that raised the target after all: back to the step it was made at.
                let value = if let Some((from, weight)) = visits.rewind() {
                    let from = *from;
                    (theta, grad, dir, best, step, since_better) =
                        (from.theta, from.grad, from.dir, from.best, from.step, from.since_better);
                    it = from.it;
                    target = target.max(weight);
                    from.value
                } else {
                    if it >= iterations {
                        if visits.holds(target) {
                            break;
                        }
                        continue;
                    }
                    let value = self.evaluate(&theta, &mut grad);
                    if value < best.bound {
                        if value < best.bound - 1e-9 * best.bound.abs().max(1.0) {
                            since_better = 0;
                        }
                        best = Dual { theta: theta.clone(), bound: value };
                    } else {
                        since_better += 1;
                        if since_better >= 12 {
                            step *= 0.6;
                            since_better = 0;
                        }
                    }
                    if visit_every > 0 && it % visit_every == visit_every - 1 {
                        // The visit before first: the steps since it stand only if it did not
                        // raise the target.
                        if !visits.holds(target) {
                            continue;
                        }
                        let from = Box::new(Speculation {
                            it,
                            theta: theta.clone(),
                            grad: grad.clone(),
                            dir: dir.clone(),
                            best: best.clone(),
                            step,
                            since_better,
                            value,
                        });
                        if let Some(weight) = visits.visit(&self.price, from) {
                            target = target.max(weight);
                        }
                    }
                    value
                };
                let stop = proven(best.bound, target) || step < 1e-5 || deadline.is_some_and(|d| Instant::now() >= d);
                let norm = deflect(&mut dir, &grad, &theta);
                if stop || norm <= 1e-18 {
                    if visits.holds(target) {
                        break;
                    }
                    continue;
                }
                polyak_step(&mut theta, &dir, norm, value, target, step);
                it += 1;
            }
            // The best multipliers' prices for the caller's last heuristic pass.
            let mut grad = vec![0.0; m];
            let value = self.evaluate(&best.theta, &mut grad);
            best.bound = best.bound.min(value);
            visits.last(&self.price);
        });
        best
    }
}

/// The Polyak step's factor in [`Lagrangian::averaged_choices`]: a tenth of the descent's first.
/// Long steps swing the choices far past the LP's point (at 0.5, the averaged choices of
/// tight-caps-1000-5-nogang used 19 % more vCPUs than its pools hold; at 0.05, 3 %).
const AVERAGED_STEP: f64 = 0.05;

impl Lagrangian<'_, '_> {
    /// An estimate of the LP relaxation's solution (per class and candidate, in the LP's units),
    /// from `iterations` more subgradient steps from `dual` towards `target`: the classes' own
    /// choices averaged, later steps weighing more. Near the best multipliers the choices swing
    /// between the candidates the LP shares a class's jobs among, and their average approaches
    /// the LP's point (ergodic primal recovery) at the price of a pass over the candidates a step,
    /// where solving the LP at 1,000 distinct split jobs takes 2-7 s.
    pub fn averaged_choices(
        &mut self,
        dual: &Dual,
        target: f64,
        iterations: usize,
        deadline: Option<Instant>,
    ) -> Vec<Vec<f64>> {
        let inst = self.inst;
        let m = self.rows.rhs.len();
        let mut sum: Vec<Vec<f64>> = inst.classes.iter().map(|c| vec![0.0; c.cands.len()]).collect();
        let mut theta = dual.theta.clone();
        let mut grad = vec![0.0; m];
        let mut dir = vec![0.0; m];
        let mut total = 0.0;
        for it in 0..iterations {
            // Out of time, the average of the steps so far: a cruder estimate, still a start.
            if it > 0 && deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            let weight = (it + 1) as f64;
            let value = self.evaluate_into(&theta, &mut grad, Some((&mut sum, weight)));
            total += weight;
            let norm = deflect(&mut dir, &grad, &theta);
            if norm <= 1e-18 {
                break;
            }
            polyak_step(&mut theta, &dir, norm, value, target, AVERAGED_STEP);
        }
        if total > 0.0 {
            for v in sum.iter_mut().flatten() {
                *v /= total;
            }
        }
        sum
    }
}

/// Deflects the direction `dir` towards the subgradient `grad` (damps the zigzag between rows
/// that bind alternately) and returns its squared length over the rows that can move (a row at 0
/// whose direction would push it below does not count).
fn deflect(dir: &mut [f64], grad: &[f64], theta: &[f64]) -> f64 {
    for (d, g) in dir.iter_mut().zip(grad) {
        *d = 0.6 * g + 0.4 * *d;
    }
    dir.iter().zip(theta).map(|(d, t)| if *t <= 0.0 && *d > 0.0 { 0.0 } else { d * d }).sum()
}

/// A Polyak step along `dir` (squared length `norm`) from a Lagrangian of `value` towards
/// `target`, scaled by `factor`, the multipliers kept non-negative.
fn polyak_step(theta: &mut [f64], dir: &[f64], norm: f64, value: f64, target: f64, factor: f64) {
    let gap = (value - target).max(1e-3 * value.abs().max(1.0) * 0.01);
    let t = factor * gap / norm;
    for (th, d) in theta.iter_mut().zip(dir) {
        *th = (*th - t * d).max(0.0);
    }
}

/// The descent's state at a visit, taken while the visit runs beside the steps: where its weight
/// raises the target, the steps start again from here with the new target.
struct Speculation {
    it: usize,
    theta: Vec<f64>,
    grad: Vec<f64>,
    dir: Vec<f64>,
    best: Dual,
    step: f64,
    since_better: usize,
    value: f64,
}

/// Where [`Lagrangian::descend`]'s visits run. A visit (a plan constructed at the prices) takes
/// longer than the steps between two (1.5 ms against 1 ms at 1,000 diverse jobs), and in line the
/// two take turns on one core. Beside the steps, most visits leave the target as it is (a plan
/// constructed at the prices rarely beats the best known after the first few), so the steps
/// taken meanwhile stand (BENCHMARKS.md, "Trades in one pool, and the Lagrangian's visits beside
/// its steps (session 64)": the same plans, 0.93 times the time at 10,000 jobs).
enum Visits<'v, F> {
    InLine(&'v mut F),
    /// The prices sent to the visiting thread, its answers, the state at the visit under way, and
    /// a visit that raised the target (its state and weight) for the descent to go back to.
    Beside {
        prices: mpsc::Sender<Vec<f64>>,
        weights: mpsc::Receiver<f64>,
        since: Option<Box<Speculation>>,
        rewind: Option<(Box<Speculation>, f64)>,
    },
}

impl<F: FnMut(&[f64]) -> f64> Visits<'_, F> {
    /// Visits `price`, `from` the descent's state there; returns the weight the target takes now
    /// (in line, the visit's own; beside, none yet: see [`Visits::holds`]).
    fn visit(&mut self, price: &[f64], from: Box<Speculation>) -> Option<f64> {
        match self {
            Visits::InLine(visit) => Some(visit(price)),
            Visits::Beside { prices, since, .. } => {
                prices.send(price.to_vec()).expect("the visiting thread runs until the descent ends");
                *since = Some(from);
                None
            }
        }
    }

    /// Whether the steps since the visit under way stand: its weight, waited for, does not raise
    /// `target`. Where it does, the visit is kept for [`Visits::rewind`].
    fn holds(&mut self, target: f64) -> bool {
        let Visits::Beside { weights, since, rewind, .. } = self else { return true };
        let Some(from) = since.take() else { return true };
        let weight = weights.recv().expect("the visiting thread answers every visit");
        if weight <= target {
            return true;
        }
        *rewind = Some((from, weight));
        false
    }

    /// The visit that raised the target, if one did: the state to go back to, and its weight.
    fn rewind(&mut self) -> Option<(Box<Speculation>, f64)> {
        match self {
            Visits::InLine(_) => None,
            Visits::Beside { rewind, .. } => rewind.take(),
        }
    }

    /// The last visit, at the best multipliers' prices; its weight is not needed.
    fn last(&mut self, price: &[f64]) {
        match self {
            Visits::InLine(visit) => {
                visit(price);
            }
            Visits::Beside { prices, weights, .. } => {
                prices.send(price.to_vec()).expect("the visiting thread runs until the descent ends");
                weights.recv().expect("the visiting thread answers every visit");
            }
        }
    }
}

/// The bound rounded down to the integer weights it allows, never understated by float noise.
pub(crate) fn integral(bound: f64) -> f64 {
    (bound + 1e-9 * bound.abs() + 1e-6).floor().max(0.0)
}

/// Whether a plan of weight `target` is proven to have the maximum weight by `bound`.
pub(crate) fn proven(bound: f64, target: f64) -> bool {
    integral(bound) <= target + 0.5
}

#[cfg(test)]
mod tests {
    use super::Lagrangian;
    use crate::generate::{DiverseParams, GenParams, diverse, generate};
    use crate::knapsack_bound::tests::ranked_jobs;
    use crate::model::Instance;
    use crate::{Problem, SolveOptions, solve_lp_round};

    /// The bound never falls below a feasible plan's weight (the searched plan's), on problems with
    /// split jobs (the older generator: a fifth of them) and without, quota from tight to loose;
    /// and it is never looser than the Lagrangian's, which is what it gives when its deadline has
    /// passed (the knapsacks would overrun a time limit by tens of milliseconds).
    #[test]
    fn the_bound_holds_every_plan() {
        let mut problems: Vec<Problem> = (0..12)
            .map(|seed| {
                generate(&GenParams {
                    jobs: 50 + 10 * seed as usize,
                    regions: 1 + seed as usize % 4,
                    sizes: 30,
                    quota_fraction: 0.1 + 0.1 * seed as f64,
                    seed,
                })
            })
            .collect();
        problems.extend((0..8).map(|seed| diverse(&DiverseParams::new(60 + 20 * seed as usize, seed))));
        let mut tighter = 0;
        for p in &problems {
            let plan = solve_lp_round(p, &SolveOptions::default());
            let inst = Instance::new(p);
            let mut lag = Lagrangian::new(&inst);
            let dual = lag.descend(None, plan.placed_weight, 400, None, 0, |_| plan.placed_weight);
            let bound = lag.knapsack_bound(&dual, None);
            assert!(bound >= plan.placed_weight - 1e-6, "bound {bound} below a plan of {}", plan.placed_weight);
            assert!(bound <= dual.bound + 1e-6);
            tighter += usize::from(bound < dual.bound - 1.0);
            let out_of_time = lag.knapsack_bound(&dual, Some(std::time::Instant::now()));
            assert_eq!(out_of_time.to_bits(), dual.bound.to_bits(), "a bound past its deadline");
        }
        assert!(tighter >= problems.len() / 2, "tighter on {tighter} of {} problems only", problems.len());
    }

    /// A descent the time limit stops at its first pass bounds nothing (every job's weight, 1.7-2.6
    /// times the plan's on these problems); the few steps after it bring the bound towards what the
    /// pools allow, and it still holds every plan.
    #[test]
    fn a_descent_cut_short_still_bounds_the_weight_closely() {
        for seed in 0..4 {
            let p = diverse(&DiverseParams::new(400, seed));
            let plan = solve_lp_round(&p, &SolveOptions::default());
            let inst = Instance::new(&p);
            let mut lag = Lagrangian::new(&inst);
            let expired = Some(std::time::Instant::now());
            let cut = lag.descend(None, plan.placed_weight, 400, expired, 0, |_| plan.placed_weight);
            let every_job: f64 =
                (0..p.jobs.len()).filter(|&j| !inst.cands_of(j).is_empty()).map(|j| inst.weight[j]).sum();
            assert!(
                cut.bound >= every_job - 1e-6,
                "seed {seed}: one pass, {} below every job's {every_job}",
                cut.bound
            );
            let target = plan.placed_weight;
            let tightened = lag.descend(Some(&cut), target, crate::OUT_OF_TIME_STEPS, None, 0, |_| target).bound;
            assert!(
                tightened >= plan.placed_weight - 1e-6,
                "seed {seed}: {tightened} below a plan of {}",
                plan.placed_weight
            );
            // At least a quarter of the way from every job's weight to the plan's (0.36-0.75 of it
            // on these four).
            let closed = (every_job - tightened) / (every_job - plan.placed_weight);
            assert!(
                closed >= 0.25,
                "seed {seed}: {tightened} after {} steps closes {closed:.2} of the way from every job's \
                 {every_job} to a plan of {}",
                crate::OUT_OF_TIME_STEPS,
                plan.placed_weight
            );
        }
    }

    /// The averaged choices share the quota between split jobs as the LP does, where each step's
    /// choices give one job all of it: rounded, they place both jobs (weight 116, the LP's
    /// optimum), where priority order would give `a` the cheap-in-vCPUs VMs and `b` nothing (80).
    /// Per class they never ask for more GPUs than its jobs have.
    #[test]
    fn averaged_choices_share_the_quota_as_the_lp_does() {
        let p = crate::lp::tests::two_split_jobs();
        let inst = Instance::new(&p);
        let mut lag = Lagrangian::new(&inst);
        let dual = lag.descend(None, 80.0, 400, None, 0, |_| 80.0);
        let values = lag.averaged_choices(&dual, 80.0, 100, None);
        for (c, class) in inst.classes.iter().enumerate() {
            let gpus: f64 = class.cands.iter().zip(&values[c]).map(|(k, v)| v * f64::from(k.gpus)).sum();
            let asked = f64::from(inst.job(class.rep).gpus) * class.jobs.len() as f64;
            assert!(gpus <= asked + 1e-9, "class {c}: {gpus} GPUs of {asked}");
        }
        let sol = crate::lp::round_values(&inst, &values, 0.5);
        assert_eq!(sol.weight(&inst), 116.0, "averaged choices {values:?}");
    }

    /// The visits beside the steps give the descent the visits in line give, where visits raise
    /// the target (so the steps since them are taken again) and where they do not: the same
    /// prices visited in the same order, the same multipliers and bound. In line inside a worker
    /// of `par_map` (one core there); beside on the caller's thread where the machine has more.
    #[test]
    fn visits_beside_the_steps_give_the_descent_in_line() {
        let p = diverse(&DiverseParams::new(300, 3));
        let inst = Instance::new(&p);
        let start = solve_lp_round(&p, &SolveOptions::default()).placed_weight;
        let descend = || {
            let mut lag = Lagrangian::new(&inst);
            let mut visited: Vec<Vec<f64>> = Vec::new();
            // Weights that rise at the first visits and at the fifth: the steps after those are
            // taken again beside.
            let dual = lag.descend(None, 0.8 * start, 400, None, 5, |price| {
                visited.push(price.to_vec());
                let k = visited.len();
                if k <= 2 || k == 5 { 0.8 * start + k as f64 * 0.02 * start } else { 0.0 }
            });
            (dual.theta, dual.bound, visited)
        };
        let beside = descend();
        assert!(beside.2.len() >= 6, "the descent must reach the visits that raise the target");
        let in_line = crate::parallel::par_map(&[(), ()], 2, |()| {
            assert_eq!(crate::parallel::cores(), 1);
            descend()
        });
        for run in in_line {
            assert_eq!(run, beside, "the descent with its visits beside the steps differs from in line");
        }
    }

    /// Jobs whose candidates all fall in one knapsack unit need no multiplier of their own: the
    /// unit's knapsack keeps their "at most one candidate" row. On the independent generator's
    /// one-pool shape (one region, one pool, every job in its knapsack), priced, a job left out
    /// still counts its multiplier, and the bound stays above the optimum that the MILP proves;
    /// unpriced, it is the optimum. Never below a plan's weight, on the other shapes either.
    #[test]
    fn jobs_in_one_unit_are_kept_whole_by_its_knapsack() {
        let files = [
            include_str!("../tests/data/one-pool-60-1.json"),
            include_str!("../tests/data/tiny-40-1.json"),
            include_str!("../tests/data/issue-40-2.json"),
            include_str!("../tests/data/tight-caps-60-1.json"),
        ];
        for (i, f) in files.iter().enumerate() {
            let p = Problem::from_json_str(f).expect("valid");
            let plan = solve_lp_round(&p, &SolveOptions::default());
            let inst = Instance::new(&p);
            let mut lag = Lagrangian::new(&inst);
            let dual = lag.descend(None, plan.placed_weight, 400, None, 0, |_| plan.placed_weight);
            let priced = lag.knapsack_bound_with(&dual, false, None).expect("a tree of pools");
            let exact = lag.knapsack_bound_with(&dual, true, None);
            assert!(priced >= plan.placed_weight - 1e-6, "problem {i}: priced {priced} below {}", plan.placed_weight);
            if let Some(exact) = exact {
                assert!(exact >= plan.placed_weight - 1e-6, "problem {i}: {exact} below {}", plan.placed_weight);
            }
            if i == 0 {
                assert!(plan.optimal, "the MILP proves the one-pool problem");
                assert!(priced > plan.placed_weight + 1.0, "priced, {priced} is already the optimum");
                let exact = exact.expect("every job in one unit");
                assert!((exact - plan.placed_weight).abs() < 1e-6, "unpriced, {exact} is not the optimum");
                assert!((lag.knapsack_bound(&dual, None) - plan.placed_weight).abs() < 1e-6);
            }
        }
    }

    /// Two regions, each selling 3 VMs of 8 GPUs (its capacity) under roomy quota; 40 jobs of 16
    /// GPUs (2 VMs) each: one job fits per region. Priced, the capacity rows let 1.5 jobs in each
    /// (the LP's bound, about 50 % above the optimum); enforced, the bound is within 1 % of the two
    /// heaviest jobs (not exact: the jobs' multipliers stay the LP's).
    #[test]
    fn small_capacities_are_filled_by_whole_jobs() {
        let offer = |region: &str| {
            format!(
                r#"{{"region": "{region}", "size": "Standard_ND96amsr_A100_v4", "priority": "regular",
                    "gpu_model": "A100-80GB", "gpus_per_vm": 8, "vcpus_per_vm": 96, "capacity_vms": 3,
                    "family": "standardNDAMSv4_A100Family", "price_per_hour": 32.77}}"#
            )
        };
        let quota = |region: &str| {
            format!(
                r#"{{"region": "{region}", "pool": "standardNDAMSv4_A100Family", "vcpus": 4000}},
                   {{"region": "{region}", "pool": "cores", "vcpus": 4000}}"#
            )
        };
        let json = format!(
            r#"{{"offers": [{}, {}], "quotas": [{}, {}], "jobs": [{}]}}"#,
            offer("eastus"),
            offer("westus"),
            quota("eastus"),
            quota("westus"),
            ranked_jobs(40, 16)
        );
        let p = Problem::from_json_str(&json).expect("valid problem");
        let inst = Instance::new(&p);
        let mut lag = Lagrangian::new(&inst);
        let optimum = 16.0 * (100.0 + 99.0);
        let dual = lag.descend(None, optimum, 400, None, 0, |_| optimum);
        let bound = lag.knapsack_bound(&dual, None);
        assert!(dual.bound > 1.3 * optimum, "the priced bound {} is not the LP's", dual.bound);
        assert!(bound >= optimum - 1e-6 && bound < 1.01 * optimum, "bound {bound} against the optimum {optimum}");
    }
}
