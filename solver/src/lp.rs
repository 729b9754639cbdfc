//! The default build's optimiser: the LP relaxation over job classes, solved with clarabel (pure Rust,
//! interior point), then rounding, repair and greedy fill.
//!
//! Lexicographic objective, in two phases rather than with a weight scaling: phase 1 maximises the
//! placed weight `W`; its optimum, rounded down to an integer (weights are integers: priority × GPUs),
//! is a proven upper bound `Wb` on the weight of any plan. Phase 2 minimises cost subject to
//! `W ≥ Wb − δ` (δ ≥ 0 tiny): any integer plan of weight `Wb` satisfies that row, so the phase-2
//! optimum is a proven lower bound on the cost of every maximum-weight plan. A single scaled objective `M·W − cost` would
//! need `M` above the largest possible cost to be safe, and the interior-point tolerances relative to
//! `M·W` would then swamp the cost term.
//!
//! Variables: for a gang class, `n[c,k]` = jobs of class `c` on candidate `k` (each uses the
//! candidate's VMs); for a non-gang class, `x[c,k]` = VM-equivalents on `k`, counting `gpus_per_vm × x`
//! GPUs. Counting fractional VMs only lowers cost and usage, so the model is a relaxation of every
//! integer plan (including a non-gang job's partly idle last VM, and class-level price caps and budgets),
//! which is what makes its optima bounds.
//!
//! When a plan placing every placeable job is known, phase 1 is skipped (its optimum is that plan's
//! weight) and phase 2 runs by column generation: a restricted model over a few candidates per class,
//! grown by the candidates whose reduced cost is negative. Its cost bound is the Lagrangian bound
//! `Σ duals × right-hand sides + Σ min(0, reduced cost) × (the variable's upper bound)` over *every*
//! candidate, which holds for any duals of the right signs: it does not rely on the interior-point
//! solver's accuracy, nor on the pricing having converged.

use std::time::Instant;

use good_lp::solvers::Solution;
use good_lp::{Expression, ProblemVariables, SolverModel, Variable, clarabel, variable};

use crate::model::{Instance, Sol, priority_order};

/// Bounds and the phase-2 LP solution.
pub(crate) struct LpResult {
    /// Proven upper bound on the placed weight (an integer).
    pub weight_bound: f64,
    /// Proven lower bound on the cost of plans with `weight_bound` weight; `None` if phase 2 failed.
    pub cost_bound: Option<f64>,
    /// Per class, per candidate: jobs (gang) or VM-equivalents (non-gang).
    pub values: Vec<Vec<f64>>,
}

/// Relative slack on bounds read from the interior-point solver, whose optimality tolerance is 1e-8.
const BOUND_SLACK: f64 = 1e-7;

/// Relative slack below the weight asked for on the rows "weight at least" of the cost LP and of
/// the MILP's cost phase (`milp::Model::weight_at_least`): a hair for the solvers' tolerances.
/// Every weight is a whole number, so any more would let the relaxations leave part of a job's
/// weight out where it costs most.
pub(crate) const WEIGHT_ROW_SLACK: f64 = 1e-7;

struct Model {
    /// Per class, per candidate: the variable, or `None` for a candidate left out of a restricted model.
    vars: Vec<Vec<Option<Variable>>>,
    weight: Expression,
    cost: Expression,
    /// Each row, what it constrains, and its right-hand side (every row is `≤`).
    rows: Vec<(good_lp::Constraint, Row, f64)>,
}

/// What a row of the model constrains (every row is `≤` its right-hand side).
#[derive(Clone, Copy, Debug)]
enum Row {
    Demand(usize),
    Price(usize),
    Budget(usize),
    Pool(usize),
    Capacity(usize),
}

/// The whole model: every candidate of every class.
fn build(inst: &Instance, problem_vars: &mut ProblemVariables) -> Model {
    let all: Vec<Vec<bool>> = inst.classes.iter().map(|c| vec![true; c.cands.len()]).collect();
    build_over(inst, problem_vars, &all)
}

/// The model over the `active` candidates only (a restricted master for column generation).
fn build_over(inst: &Instance, problem_vars: &mut ProblemVariables, active: &[Vec<bool>]) -> Model {
    let p = inst.p;
    let mut weight = Expression::default();
    let mut cost = Expression::default();
    let mut rows = Vec::new();
    let mut pool_rows: Vec<Expression> = vec![Expression::default(); inst.pool_limit.len()];
    let mut pool_any = vec![false; inst.pool_limit.len()];
    let mut cap_rows: Vec<Expression> = vec![Expression::default(); p.offers.len()];
    let mut cap_any = vec![false; p.offers.len()];
    let mut vars = Vec::with_capacity(inst.classes.len());
    for (k, class) in inst.classes.iter().enumerate() {
        let job = inst.job(class.rep);
        let count = class.jobs.len() as f64;
        let prio = f64::from(job.priority);
        let mut class_vars = Vec::with_capacity(class.cands.len());
        let mut demand = Expression::default();
        let mut price = Expression::default();
        let mut spend = Expression::default();
        let mut any = false;
        for (i, c) in class.cands.iter().enumerate() {
            if !active[k][i] {
                class_vars.push(None);
                continue;
            }
            any = true;
            let offer = &p.offers[c.offer];
            let v = problem_vars.add(variable().min(0.0));
            class_vars.push(Some(v));
            let vms = f64::from(c.vms);
            if job.gang {
                weight.add_mul(prio * f64::from(c.gpus), v);
                cost.add_mul(c.cost, v);
                demand.add_mul(1.0, v);
            } else {
                let gpus = f64::from(c.gpus);
                let per_vm = c.cost + c.egress_per_gpu * gpus;
                weight.add_mul(prio * gpus, v);
                cost.add_mul(per_vm, v);
                demand.add_mul(gpus, v);
                price.add_mul(offer.price_per_hour, v);
                spend.add_mul(per_vm, v);
            }
            for &q in &inst.offer_pools[c.offer] {
                pool_rows[q].add_mul(vms * f64::from(offer.vcpus_per_vm), v);
                pool_any[q] = true;
            }
            if offer.capacity_vms.is_some() {
                cap_rows[c.offer].add_mul(vms, v);
                cap_any[c.offer] = true;
            }
        }
        if any {
            if job.gang {
                rows.push((demand.leq(count), Row::Demand(k), count));
            } else {
                let gpus = count * f64::from(job.gpus);
                rows.push((demand.leq(gpus), Row::Demand(k), gpus));
                if let Some(cap) = job.max_price_per_hour {
                    rows.push((price.leq(count * cap), Row::Price(k), count * cap));
                }
                if let Some(budget) = job.budget {
                    rows.push((spend.leq(count * budget), Row::Budget(k), count * budget));
                }
            }
        }
        vars.push(class_vars);
    }
    for (q, row) in pool_rows.into_iter().enumerate() {
        if pool_any[q] {
            let limit = inst.pool_limit[q] as f64;
            rows.push((row.leq(limit), Row::Pool(q), limit));
        }
    }
    for (o, row) in cap_rows.into_iter().enumerate() {
        if cap_any[o] {
            let cap = f64::from(p.offers[o].capacity_vms.unwrap_or(0));
            rows.push((row.leq(cap), Row::Capacity(o), cap));
        }
    }
    Model { vars, weight, cost, rows }
}

fn seconds_left(deadline: Option<Instant>) -> Result<Option<f64>, String> {
    match deadline {
        None => Ok(None),
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now()).as_secs_f64();
            if left <= 0.0 { Err("time limit".to_string()) } else { Ok(Some(left)) }
        }
    }
}

/// Solves both phases. `Err` carries why (time limit, numerical trouble); the caller falls back.
/// `known_weight`: the maximum placed weight when the caller has already proven it, with the plan that
/// reaches it (it seeds the cost phase), so that phase 1 is skipped.
pub(crate) fn solve_lp(
    inst: &Instance,
    deadline: Option<Instant>,
    known_weight: Option<(f64, &Sol)>,
) -> Result<LpResult, String> {
    if inst.classes.iter().all(|c| c.cands.is_empty()) {
        return Ok(LpResult {
            weight_bound: 0.0,
            cost_bound: Some(0.0),
            values: inst.classes.iter().map(|_| Vec::new()).collect(),
        });
    }
    if let Some((weight_bound, seed)) = known_weight {
        let (cost_bound, values) = min_cost_at(inst, weight_bound, deadline, Some(seed))?;
        return Ok(LpResult { weight_bound, cost_bound: Some(cost_bound), values });
    }
    // Phase 1: maximise weight.
    let mut pv = ProblemVariables::new();
    let m = build(inst, &mut pv);
    let phase1_vars = m.vars;
    let mut phase1 = pv.maximise(m.weight).using(clarabel);
    if let Some(s) = seconds_left(deadline)? {
        phase1.settings().time_limit(s);
    }
    let sol1 =
        phase1.with_all(m.rows.into_iter().map(|(r, _, _)| r)).solve().map_err(|e| format!("LP phase 1: {e}"))?;
    let inner = sol1.inner();
    // Clarabel minimised −W: the larger of −primal and −dual is an upper bound on W.
    let w_lp = (-inner.obj_val).max(-inner.obj_val_dual);
    let weight_bound = (w_lp * (1.0 + BOUND_SLACK) + BOUND_SLACK).floor().max(0.0);

    let last_error = match min_cost_at(inst, weight_bound, deadline, None) {
        Ok((cost_bound, values)) => return Ok(LpResult { weight_bound, cost_bound: Some(cost_bound), values }),
        Err(e) => e,
    };
    seconds_left(deadline).map_err(|_| last_error)?;
    // The weight bound stands; round the phase-1 solution instead.
    let values = values_of(&phase1_vars, &sol1);
    Ok(LpResult { weight_bound, cost_bound: None, values })
}

/// Phase 2: the least LP cost of placing at least `weight`; returns a proven lower bound on the cost of
/// every plan of that weight, and the LP solution. The row `W ≥ weight − δ` admits every plan of weight
/// `weight` for any δ ≥ 0; a tiny δ keeps the bound tight and the row numerically feasible when the LP
/// optimum is exactly `weight`; should the solver still fail, δ = ½ (still valid, looser) is tried.
///
/// With a `seed` plan that reaches `weight`, the LP is solved by column generation: first over the
/// few best-ranked candidates of each class and those the seed uses, then adding the candidates whose
/// reduced cost (from the duals) is negative, until none is. Most candidates of a many-region problem
/// are never worth pricing in, and the LP over the rest is a fraction of the size.
pub(crate) fn min_cost_at(
    inst: &Instance,
    weight: f64,
    deadline: Option<Instant>,
    seed: Option<&Sol>,
) -> Result<(f64, Vec<Vec<f64>>), String> {
    let mut last_error = String::new();
    for delta in [WEIGHT_ROW_SLACK * weight.max(1.0), 0.5] {
        match cost_phase(inst, weight - delta, deadline, seed) {
            Ok(found) => return Ok(found),
            Err(e) => last_error = e,
        }
        seconds_left(deadline).map_err(|_| last_error.clone())?;
    }
    Err(last_error)
}

/// Candidates per class in the first restricted model, best-ranked first.
const FIRST_COLUMNS: usize = 4;
/// Candidates added per class per pricing round, most negative reduced cost first.
const COLUMNS_PER_ROUND: usize = 4;
/// Pricing rounds at most; the bound is valid after any of them, only less tight.
const MAX_PRICING_ROUNDS: usize = 25;

/// Doublings of the weight row's price at which the cost phase's bound is tried with the pools
/// enforced on whole jobs.
const KNAPSACK_DOUBLINGS: usize = 6;

/// The duals of the cost phase's rows, clamped to their valid signs (`≤` rows non-positive, the
/// weight row non-negative); a row absent from a restricted model has dual 0.
struct Duals {
    demand: Vec<f64>,
    price: Vec<f64>,
    budget: Vec<f64>,
    pool: Vec<f64>,
    capacity: Vec<f64>,
    weight: f64,
}

fn cost_phase(
    inst: &Instance,
    floor: f64,
    deadline: Option<Instant>,
    seed: Option<&Sol>,
) -> Result<(f64, Vec<Vec<f64>>), String> {
    use good_lp::solvers::{DualValues, SolutionWithDual};
    let p = inst.p;
    let all: Vec<Vec<bool>> = inst.classes.iter().map(|c| vec![true; c.cands.len()]).collect();
    let mut active = match seed {
        None => all.clone(),
        Some(sol) => {
            let mut active: Vec<Vec<bool>> =
                inst.classes.iter().map(|c| (0..c.cands.len()).map(|i| i < FIRST_COLUMNS).collect()).collect();
            for a in &sol.assigns {
                let k = inst.job_class[a.job];
                if let Some(i) = inst.classes[k].cands.iter().position(|c| c.offer == a.offer) {
                    active[k][i] = true;
                }
            }
            active
        }
    };
    for round in 0.. {
        let restricted = active != all;
        let mut pv = ProblemVariables::new();
        let m = build_over(inst, &mut pv, &active);
        let mut model = pv.minimise(m.cost.clone()).using(clarabel);
        if let Some(s) = seconds_left(deadline)? {
            model.settings().time_limit(s);
        }
        let refs: Vec<_> = m.rows.into_iter().map(|(r, kind, rhs)| (model.add_constraint(r), kind, rhs)).collect();
        let weight_ref = model.add_constraint(m.weight.clone().geq(floor));
        let mut sol = match model.solve() {
            Ok(sol) => sol,
            // The restricted model may not reach the weight at all: solve the whole one.
            Err(_) if restricted => {
                active = all.clone();
                continue;
            }
            Err(e) => return Err(format!("LP phase 2: {e}")),
        };
        let values = values_of(&m.vars, &sol);
        let dual = sol.compute_dual();
        let mut y = Duals {
            demand: vec![0.0; inst.classes.len()],
            price: vec![0.0; inst.classes.len()],
            budget: vec![0.0; inst.classes.len()],
            pool: vec![0.0; inst.pool_limit.len()],
            capacity: vec![0.0; p.offers.len()],
            weight: dual.dual(weight_ref).max(0.0),
        };
        // Lagrangian bound: Σ duals × right-hand sides, plus every candidate's most negative
        // contribution within its bounds. Valid for any duals of the right signs, so the bound does
        // not depend on how exactly the solver converged, nor on every candidate having been priced in.
        let mut bound = y.weight * floor;
        for (r, kind, rhs) in &refs {
            let d = dual.dual(r.clone()).min(0.0);
            let slot = match *kind {
                Row::Demand(k) => &mut y.demand[k],
                Row::Price(k) => &mut y.price[k],
                Row::Budget(k) => &mut y.budget[k],
                Row::Pool(q) => &mut y.pool[q],
                Row::Capacity(o) => &mut y.capacity[o],
            };
            *slot = d;
            bound += d * rhs;
        }
        let mut added = false;
        for (k, class) in inst.classes.iter().enumerate() {
            let job = inst.job(class.rep);
            let n = class.jobs.len() as f64;
            let mut entering: Vec<(f64, usize)> = Vec::new();
            for (i, c) in class.cands.iter().enumerate() {
                let offer = &p.offers[c.offer];
                let vms = f64::from(c.vms);
                let gpus = f64::from(c.gpus);
                let (cost, demand, limit) = if job.gang {
                    (c.cost, 1.0, n)
                } else {
                    (c.cost + c.egress_per_gpu * gpus, gpus, n * f64::from(job.gpus) / gpus)
                };
                let limit = offer.capacity_vms.map_or(limit, |cap| limit.min(f64::from(cap) / vms));
                let mut reduced = cost - y.demand[k] * demand - y.weight * f64::from(job.priority) * gpus;
                if !job.gang {
                    reduced -= y.price[k] * offer.price_per_hour + y.budget[k] * cost;
                }
                for &q in &inst.offer_pools[c.offer] {
                    reduced -= y.pool[q] * vms * f64::from(offer.vcpus_per_vm);
                }
                reduced -= y.capacity[c.offer] * vms;
                bound += reduced.min(0.0) * limit;
                if !active[k][i] && reduced < -1e-7 * (1.0 + cost) {
                    entering.push((reduced, i));
                }
            }
            entering.sort_by(|a, b| a.0.total_cmp(&b.0));
            for &(_, i) in entering.iter().take(COLUMNS_PER_ROUND) {
                active[k][i] = true;
                added = true;
            }
        }
        if !added || round + 1 >= MAX_PRICING_ROUNDS {
            // The same duals with the quota pools enforced on whole jobs (`cost_bound::knapsack`,
            // valid at any multipliers of the right signs), the weight row's price doubled up to
            // KNAPSACK_DOUBLINGS times: where whole jobs cannot fill a pool as the LP's fractions
            // do, the LP's price of weight is too low for them (see the test
            // `the_cost_bound_enforces_the_pools_on_whole_jobs`). A millisecond a try at 60 jobs.
            let mut resources: Vec<f64> = y.pool.iter().map(|d| -d).collect();
            resources.extend(y.capacity.iter().map(|d| -d));
            let mut at = crate::cost_bound::Multipliers { weight: y.weight, resources };
            let mut knapsack = 0.0f64;
            for _ in 0..=KNAPSACK_DOUBLINGS {
                if let Some(b) = crate::cost_bound::knapsack(inst, floor, &at, None) {
                    knapsack = knapsack.max(b);
                }
                at.weight *= 2.0;
            }
            return Ok(((bound.max(knapsack) * (1.0 - BOUND_SLACK)).max(0.0), values));
        }
    }
    unreachable!("the pricing loop returns")
}

/// The solution's values per class and candidate (0 for candidates left out of the model).
fn values_of(vars: &[Vec<Option<Variable>>], sol: &impl Solution) -> Vec<Vec<f64>> {
    vars.iter().map(|vs| vs.iter().map(|v| v.map_or(0.0, |v| sol.value(v).max(0.0))).collect()).collect()
}

/// Turns the LP solution into a plan: first the whole jobs the LP places on one candidate (always
/// feasible: rounding down a solution of packing constraints keeps it feasible) and, where most
/// GPUs are splittable, the whole VMs it gives split jobs; then, in priority
/// order, as many more jobs per class as the LP places (rounded up), trying the candidates the LP uses
/// most first and the rest by rank. The caller's greedy fill places what remains.
pub(crate) fn round(inst: &Instance, lp: &LpResult) -> Sol {
    round_values(inst, &lp.values, 0.0)
}

/// [`round`] from values per class and candidate, however they were found: the LP's (`up_from`
/// 0: whole VMs and jobs rounded down, so that they fit) or an estimate of them (0.5: to the
/// nearest, 3.96 being the estimate's 4; `Sol::fill` and `try_gang` place only what fits).
pub(crate) fn round_values(inst: &Instance, values: &[Vec<f64>], up_from: f64) -> Sol {
    let mut sol = Sol::new(inst);
    // Where split jobs are a minority, the searches after the rounding did better from the older
    // start (split-60-8: $13,285 from it, $14,286 from the floors; BENCHMARKS.md, "Split jobs from
    // the LP's rounding (session 66)").
    let split_floors = inst.mostly_split();
    let mut classes: Vec<usize> = (0..inst.classes.len()).collect();
    classes.sort_by_key(|&c| (std::cmp::Reverse(inst.job(inst.classes[c].rep).priority), c));
    for &c in &classes {
        let class = &inst.classes[c];
        if !inst.job(class.rep).gang {
            if !split_floors {
                continue;
            }
            // A split job's whole VMs the LP places, rounded down, on the class's jobs in turn.
            // The interior point's 3.999998 is 4: the room `fill` checks keeps the plan feasible.
            for (k, cand) in class.cands.iter().enumerate() {
                let mut whole = (values[c][k] + up_from.max(1e-4)).floor() as u32;
                for &j in &class.jobs {
                    if whole == 0 {
                        break;
                    }
                    whole -= sol.fill(inst, j, cand, whole).div_ceil(cand.gpus).min(whole);
                }
            }
            continue;
        }
        let mut next = 0;
        for (k, cand) in class.cands.iter().enumerate() {
            let whole = (values[c][k] + up_from.max(1e-6)).floor() as usize;
            for _ in 0..whole {
                while next < class.jobs.len() && sol.job_gpus[class.jobs[next]] > 0 {
                    next += 1;
                }
                if next >= class.jobs.len() || !sol.try_gang(inst, class.jobs[next], cand) {
                    break;
                }
            }
        }
    }
    // Then, in priority order, the jobs the LP places only fractionally, up to the number it places
    // (rounded up) per class: the LP knows which classes use the quota well; priority order alone
    // would hand it to whichever job comes first. The rest are left to the final greedy fill.
    let lp_jobs: Vec<f64> = (0..inst.classes.len())
        .map(|c| {
            let class = &inst.classes[c];
            let job = inst.job(class.rep);
            let total: f64 = class
                .cands
                .iter()
                .zip(&values[c])
                .map(|(k, v)| if job.gang { *v } else { v * f64::from(k.gpus) / f64::from(job.gpus) })
                .sum();
            (total - 1e-6).ceil()
        })
        .collect();
    let mut started = vec![0.0; inst.classes.len()];
    for j in priority_order(inst) {
        let c = inst.job_class[j];
        if sol.job_gpus[j] > 0 {
            started[c] += 1.0;
        }
    }
    for j in priority_order(inst) {
        let c = inst.job_class[j];
        let split_started = !inst.job(j).gang && sol.job_gpus[j] > 0 && sol.job_gpus[j] < inst.job(j).gpus;
        if !split_started && (sol.job_gpus[j] > 0 || started[c] >= lp_jobs[c]) {
            continue;
        }
        if !split_started {
            started[c] += 1.0;
        }
        let cands = &inst.classes[c].cands;
        let mut order: Vec<usize> = (0..cands.len()).collect();
        // Stable sort: candidates the LP uses, most used first; the rest keep their rank order.
        order.sort_by(|&a, &b| {
            let (va, vb) = (values[c][a], values[c][b]);
            let used = |v: f64| v > 1e-6;
            used(vb).cmp(&used(va)).then(if used(va) && used(vb) {
                vb.total_cmp(&va)
            } else {
                std::cmp::Ordering::Equal
            })
        });
        sol.place(inst, j, order.iter().map(|&k| &cands[k]));
    }
    sol
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::problem::{JobDemand, Problem};

    /// Two split jobs of 8 GPUs and 16 vCPUs of quota: `a` (priority 10) on T4 VMs of a vCPU
    /// (8 at most) or A10 VMs of two, `b` (9) on the T4 VMs only. The LP's only optimum gives `a`
    /// 4 VMs of each and `b` the other 4 T4 VMs (weight 116); filled in priority order on the
    /// cheap-in-vCPUs VMs, `a` would take all 8 and leave `b` nothing (weight 80).
    pub(crate) fn two_split_jobs() -> Problem {
        let json = r#"{"offers": [
                {"region": "eastus", "size": "Standard_X1T4", "priority": "regular", "gpu_model": "T4",
                 "gpus_per_vm": 1, "vcpus_per_vm": 1, "family": "standardT4Family", "price_per_hour": 1.0,
                 "capacity_vms": 8},
                {"region": "eastus", "size": "Standard_X2A10", "priority": "regular", "gpu_model": "A10",
                 "gpus_per_vm": 1, "vcpus_per_vm": 2, "family": "standardA10Family", "price_per_hour": 1.0}],
            "quotas": [{"region": "eastus", "pool": "cores", "vcpus": 16}],
            "jobs": [{"id": "a", "gpus": 8, "gpu_models": ["T4", "A10"], "gang": false, "priority": 10,
                      "duration_hours": 1},
                     {"id": "b", "gpus": 8, "gpu_models": ["T4"], "gang": false, "priority": 9,
                      "duration_hours": 1}]}"#;
        Problem::from_json_str(json).expect("valid problem")
    }

    /// 10 vCPUs of quota and 6-vCPU VMs: one VM fits. The most weight is `a` (priority 3, ten
    /// hours, $10); the LP reaches that weight for $1.50 with one and a half one-hour jobs of
    /// priority 2, which whole jobs cannot do. At the LP's price of weight ($0.50) the pool is
    /// not priced and the knapsack bound is the LP's too; at 32 times it, $10, the optimum.
    #[test]
    fn the_cost_bound_enforces_the_pools_on_whole_jobs() {
        let json = r#"{"offers": [
                {"region": "eastus", "size": "Standard_X6V100", "priority": "regular", "gpu_model": "V100",
                 "gpus_per_vm": 1, "vcpus_per_vm": 6, "family": "standardV100Family", "price_per_hour": 1.0}],
            "quotas": [{"region": "eastus", "pool": "cores", "vcpus": 10}],
            "jobs": [{"id": "a", "gpus": 1, "priority": 3, "duration_hours": 10},
                     {"id": "b", "gpus": 1, "priority": 2, "duration_hours": 1},
                     {"id": "c", "gpus": 1, "priority": 2, "duration_hours": 1}]}"#;
        let p = Problem::from_json_str(json).expect("valid problem");
        let inst = Instance::new(&p);
        let (cost, _) = min_cost_at(&inst, 3.0, None, None).expect("the cost LP solves");
        assert!((cost - 10.0).abs() < 1e-3, "cost bound {cost} at weight 3, where the only plan costs $10");
    }

    #[test]
    fn split_jobs_get_the_whole_vms_the_lp_gives_them() {
        let p = two_split_jobs();
        let inst = Instance::new(&p);
        let lp = solve_lp(&inst, None, None).expect("the LP solves");
        assert!((lp.weight_bound - 116.0).abs() < 1.0, "LP bound {}", lp.weight_bound);
        let sol = round(&inst, &lp);
        assert_eq!(sol.job_gpus, vec![8, 4], "a on both offers, b on the rest of the cheap one");
        assert_eq!(sol.weight(&inst), 116.0);
    }

    #[test]
    fn one_gpu_split_jobs_are_placed_and_bounded_as_gangs() {
        // 8 vCPUs of quota: four 2-vCPU one-GPU VMs (weight 4), or one 8-GPU VM that gives a
        // one-GPU job one GPU. As split jobs credited 8 GPUs a VM, the 8-GPU VM would seem to
        // hold all eight jobs at a vCPU each: LP bound 8. (On a problem this small the exact
        // search proves the plan either way; at 1,000 such jobs nothing does, and the bound and
        // the prices from it are what the searches have: BENCHMARKS.md, session 67.)
        let jobs: Vec<String> = (0..8)
            .map(|i| {
                format!(
                    r#"{{"id": "j{i}", "gpus": 1, "gpu_models": ["T4"], "gang": false, "priority": 1,
                        "duration_hours": 1}}"#
                )
            })
            .collect();
        let json = format!(
            r#"{{"offers": [
                {{"region": "eastus", "size": "Standard_X8T4", "priority": "regular", "gpu_model": "T4",
                 "gpus_per_vm": 8, "vcpus_per_vm": 8, "family": "standardT4Family", "price_per_hour": 4.0}},
                {{"region": "eastus", "size": "Standard_X2T4", "priority": "regular", "gpu_model": "T4",
                 "gpus_per_vm": 1, "vcpus_per_vm": 2, "family": "standardT4Family", "price_per_hour": 1.0}}],
            "quotas": [{{"region": "eastus", "pool": "cores", "vcpus": 8}}],
            "jobs": [{}]}}"#,
            jobs.join(",")
        );
        let p = Problem::from_json_str(&json).expect("valid problem");
        let bound = |p: &Problem| solve_lp(&Instance::new(p), None, None).expect("the LP solves").weight_bound;
        assert!((bound(&p) - 8.0).abs() < 1e-3, "as split jobs: LP bound {}", bound(&p));
        let gangs = p.unsplittable_as_gangs();
        assert!(gangs.jobs.iter().all(|j| j.gang));
        assert!((bound(&gangs) - 4.0).abs() < 1e-3, "as gangs: LP bound {}", bound(&gangs));
        let plan = crate::solve_lp_round(&p, &crate::SolveOptions::default());
        crate::check(&p, &plan).expect("feasible for the problem as given");
        assert_eq!(plan.placed_weight, 4.0);
        assert!(plan.optimal && plan.gap < 1e-6, "the bound proves the plan: {plan:?}");
        // A minority of the GPUs asked for: the problem as given.
        let mut more = p.clone();
        more.jobs.push(JobDemand { id: "big".into(), gpus: 16, ..p.jobs[0].clone() });
        assert!(matches!(more.unsplittable_as_gangs(), std::borrow::Cow::Borrowed(_)));
    }
}
