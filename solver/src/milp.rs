//! The exact MILP model of a problem, for whichever MILP solver runs it (HiGHS with `--features
//! highs`, microlp in every build): variables, the weight and cost objectives and the rows, as plain
//! numbers, so that each solver's module only translates them.
//!
//! Gang classes stay aggregated (integer `n[c,k]` = jobs of class `c` on candidate `k`), which is exact
//! because a gang's candidates, caps and budget are the same for every job of its class. Non-gang jobs
//! get their own integer VM counts `x[j,k]` and GPU counts `y[j,k] ≤ gpus_per_vm · x[j,k]`, because their
//! price caps, budgets and partly idle last VMs are per job. Two phases, as in the LP method: maximise
//! the weight (integral, so an absolute gap below 1 proves it), then minimise cost at that weight.

use crate::lp::WEIGHT_ROW_SLACK;
use crate::model::{Instance, Sol};

/// A variable's domain.
#[derive(Clone, Copy)]
pub(crate) struct Var {
    pub integer: bool,
    pub max: f64,
}

/// A row: Σ coefficient × variable ≤ `rhs`.
#[derive(Clone)]
pub(crate) struct Row {
    pub terms: Vec<(usize, f64)>,
    pub rhs: f64,
}

/// The variables of one class (indices into [`Model::vars`]).
#[derive(Clone)]
enum ClassVars {
    Gang(Vec<usize>),
    /// Per job of the class: per candidate (VMs, GPUs).
    Split(Vec<Vec<(usize, usize)>>),
}

/// The model: every variable non-negative, up to its `max`.
#[derive(Clone)]
pub(crate) struct Model {
    pub vars: Vec<Var>,
    /// The objectives, per variable.
    pub weight: Vec<f64>,
    pub cost: Vec<f64>,
    pub rows: Vec<Row>,
    classes: Vec<ClassVars>,
}

impl Model {
    /// The model of `inst`.
    pub fn new(inst: &Instance) -> Model {
        let p = inst.p;
        let mut m =
            Model { vars: Vec::new(), weight: Vec::new(), cost: Vec::new(), rows: Vec::new(), classes: Vec::new() };
        let mut pool_rows: Vec<Vec<(usize, f64)>> = vec![Vec::new(); inst.pool_limit.len()];
        let mut cap_rows: Vec<Vec<(usize, f64)>> = vec![Vec::new(); p.offers.len()];
        let mut usage = |o: usize, vms: f64, v: usize| {
            let offer = &p.offers[o];
            for &q in &inst.offer_pools[o] {
                pool_rows[q].push((v, vms * f64::from(offer.vcpus_per_vm)));
            }
            if offer.capacity_vms.is_some() {
                cap_rows[o].push((v, vms));
            }
        };
        for class in &inst.classes {
            let job = inst.job(class.rep);
            let prio = f64::from(job.priority);
            if job.gang {
                let count = class.jobs.len() as f64;
                let vs: Vec<usize> = class
                    .cands
                    .iter()
                    .map(|c| {
                        let v = m.add(true, count, prio * f64::from(c.gpus), c.cost);
                        usage(c.offer, f64::from(c.vms), v);
                        v
                    })
                    .collect();
                if !vs.is_empty() {
                    m.rows.push(Row { terms: vs.iter().map(|&v| (v, 1.0)).collect(), rhs: count });
                }
                m.classes.push(ClassVars::Gang(vs));
            } else {
                let mut per_job = Vec::with_capacity(class.jobs.len());
                for _ in &class.jobs {
                    let mut demand = Vec::new();
                    let mut price = Vec::new();
                    let mut spend = Vec::new();
                    let vs: Vec<(usize, usize)> = class
                        .cands
                        .iter()
                        .map(|c| {
                            let gpv = f64::from(c.gpus);
                            let x = m.add(true, f64::from(job.gpus.div_ceil(c.gpus)), 0.0, c.cost);
                            let y = m.add(false, f64::from(job.gpus), prio, c.egress_per_gpu);
                            m.rows.push(Row { terms: vec![(y, 1.0), (x, -gpv)], rhs: 0.0 });
                            demand.push((y, 1.0));
                            price.push((x, p.offers[c.offer].price_per_hour));
                            spend.extend([(x, c.cost), (y, c.egress_per_gpu)]);
                            usage(c.offer, 1.0, x);
                            (x, y)
                        })
                        .collect();
                    if !vs.is_empty() {
                        m.rows.push(Row { terms: demand, rhs: f64::from(job.gpus) });
                        if let Some(cap) = job.max_price_per_hour {
                            m.rows.push(Row { terms: price, rhs: cap });
                        }
                        if let Some(budget) = job.budget {
                            m.rows.push(Row { terms: spend, rhs: budget });
                        }
                    }
                    per_job.push(vs);
                }
                m.classes.push(ClassVars::Split(per_job));
            }
        }
        for (q, terms) in pool_rows.into_iter().enumerate() {
            if !terms.is_empty() {
                m.rows.push(Row { terms, rhs: inst.pool_limit[q] as f64 });
            }
        }
        for (o, terms) in cap_rows.into_iter().enumerate() {
            if !terms.is_empty() {
                m.rows.push(Row { terms, rhs: f64::from(p.offers[o].capacity_vms.unwrap_or(0)) });
            }
        }
        m
    }

    fn add(&mut self, integer: bool, max: f64, weight: f64, cost: f64) -> usize {
        self.vars.push(Var { integer, max });
        self.weight.push(weight);
        self.cost.push(cost);
        self.vars.len() - 1
    }

    /// Per variable, the gang job it is a candidate of where that job is a class of its own (at
    /// most one of its candidates is 1), numbered from 0; `None` for every other variable.
    pub fn gang_of(&self) -> Vec<Option<usize>> {
        let mut gang_of = vec![None; self.vars.len()];
        let single = self.classes.iter().filter_map(|c| match c {
            ClassVars::Gang(vs) if vs.first().is_some_and(|&v| self.vars[v].max <= 1.0) => Some(vs),
            _ => None,
        });
        for (g, vs) in single.enumerate() {
            for &v in vs {
                gang_of[v] = Some(g);
            }
        }
        gang_of
    }

    /// Whether the model has no variable (no job has a candidate).
    pub fn is_empty(&self) -> bool {
        self.vars.is_empty()
    }

    /// The row "weight ≥ `weight`" of the cost phase, as a ≤ row, less a hair for the simplex's
    /// tolerances ([`WEIGHT_ROW_SLACK`] of it). Every weight is a whole number (priority × GPUs),
    /// so a plan of the weight meets it exactly; half a unit of slack, as before, let the
    /// relaxation leave half a unit of weight out where it cost most: on tiny-60-13 (all jobs of one
    /// GPU and weight 1-3) the LP's cost 1,760 instead of 1,837, the optimum 2,604.
    pub fn weight_at_least(&self, weight: f64) -> Row {
        Row { terms: self.weight_terms(-1.0), rhs: WEIGHT_ROW_SLACK * weight.max(1.0) - weight }
    }

    /// The row "weight ≤ `weight`": a bound proven otherwise, which tightens the weight phase's LP.
    pub fn weight_at_most(&self, weight: f64) -> Row {
        Row { terms: self.weight_terms(1.0), rhs: weight }
    }

    fn weight_terms(&self, sign: f64) -> Vec<(usize, f64)> {
        self.weight.iter().enumerate().filter(|(_, w)| **w != 0.0).map(|(v, w)| (v, sign * w)).collect()
    }

    /// Rows keeping every job `sol` places placed (as much of a split job).
    pub fn placed_as_in(&self, inst: &Instance, sol: &Sol) -> Vec<Row> {
        let mut placed = vec![0u32; inst.p.jobs.len()];
        for a in &sol.assigns {
            placed[a.job] += a.gpus;
        }
        let mut rows = Vec::new();
        for (c, vars) in self.classes.iter().enumerate() {
            let class = &inst.classes[c];
            match vars {
                ClassVars::Gang(vs) => {
                    let n = class.jobs.iter().filter(|&&j| placed[j] > 0).count();
                    if n > 0 {
                        rows.push(Row { terms: vs.iter().map(|&v| (v, -1.0)).collect(), rhs: -(n as f64) });
                    }
                }
                ClassVars::Split(per_job) => {
                    for (vs, &j) in per_job.iter().zip(&class.jobs) {
                        if placed[j] > 0 {
                            rows.push(Row {
                                terms: vs.iter().map(|&(_, y)| (y, -1.0)).collect(),
                                rhs: -f64::from(placed[j]),
                            });
                        }
                    }
                }
            }
        }
        rows
    }

    /// The row "one more job of `job`'s class placed than `sol` places", for a gang job; `None`
    /// for a non-gang one or a job without candidates.
    pub fn one_more_placed(&self, inst: &Instance, sol: &Sol, job: usize) -> Option<Row> {
        let c = inst.job_class[job];
        let ClassVars::Gang(vs) = &self.classes[c] else { return None };
        if vs.is_empty() {
            return None;
        }
        let class = &inst.classes[c];
        let placed = sol.assigns.iter().filter(|a| class.jobs.contains(&a.job)).count();
        Some(Row { terms: vs.iter().map(|&v| (v, -1.0)).collect(), rhs: -(placed as f64 + 1.0) })
    }

    /// The variables' values that describe a plan: a solver's starting incumbent.
    pub fn values_of(&self, inst: &Instance, sol: &Sol) -> Vec<f64> {
        let mut by_job: Vec<Vec<&crate::model::Assign>> = vec![Vec::new(); inst.p.jobs.len()];
        for a in &sol.assigns {
            by_job[a.job].push(a);
        }
        let mut values = vec![0.0; self.vars.len()];
        for (c, vars) in self.classes.iter().enumerate() {
            let class = &inst.classes[c];
            match vars {
                ClassVars::Gang(vs) => {
                    for (k, &v) in vs.iter().enumerate() {
                        let offer = class.cands[k].offer;
                        let n = class.jobs.iter().filter(|&&j| by_job[j].iter().any(|a| a.offer == offer)).count();
                        values[v] = n as f64;
                    }
                }
                ClassVars::Split(per_job) => {
                    for (vs, &j) in per_job.iter().zip(&class.jobs) {
                        for (k, &(x, y)) in vs.iter().enumerate() {
                            let offer = class.cands[k].offer;
                            let on = by_job[j].iter().filter(|a| a.offer == offer);
                            let (vms, gpus) = on.fold((0, 0), |(v, g), a| (v + a.vms, g + a.gpus));
                            values[x] = f64::from(vms);
                            values[y] = f64::from(gpus);
                        }
                    }
                }
            }
        }
        values
    }

    /// Replays an integer solution through the same bookkeeping as every other method.
    pub fn replay(&self, inst: &Instance, values: &[f64]) -> Sol {
        let mut sol = Sol::new(inst);
        for (c, vars) in self.classes.iter().enumerate() {
            let class = &inst.classes[c];
            match vars {
                ClassVars::Gang(vs) => {
                    let mut next = class.jobs.iter();
                    for (k, &v) in vs.iter().enumerate() {
                        let n = values[v].round() as usize;
                        for j in next.by_ref().take(n) {
                            sol.try_gang(inst, *j, &class.cands[k]);
                        }
                    }
                }
                ClassVars::Split(per_job) => {
                    for (vs, &j) in per_job.iter().zip(&class.jobs) {
                        for (k, &(x, _)) in vs.iter().enumerate() {
                            let vms = values[x].round() as u32;
                            if vms > 0 {
                                sol.fill(inst, j, &class.cands[k], vms);
                            }
                        }
                    }
                }
            }
        }
        sol.fill_waiting(inst);
        sol
    }
}

/// One to three random rows over `n` variables for the root's tests: each variable in a row with
/// probability 2/3, coefficients 1-9, right-hand side `lo` to `lo + spread − 1`.
#[cfg(test)]
pub(crate) fn random_rows(n: usize, lo: u64, spread: u64, below: &mut impl FnMut(u64) -> u64) -> Vec<Row> {
    (0..1 + below(3))
        .map(|_| {
            let mut terms = Vec::new();
            for v in 0..n {
                if below(3) > 0 {
                    terms.push((v, (1 + below(9)) as f64));
                }
            }
            Row { terms, rhs: (lo + below(spread)) as f64 }
        })
        .collect()
}
