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

struct Model {
    vars: Vec<Vec<Variable>>,
    weight: Expression,
    cost: Expression,
    rows: Vec<good_lp::Constraint>,
}

fn build(inst: &Instance, problem_vars: &mut ProblemVariables) -> Model {
    let p = inst.p;
    let mut weight = Expression::default();
    let mut cost = Expression::default();
    let mut rows = Vec::new();
    let mut pool_rows: Vec<Expression> = vec![Expression::default(); inst.pool_limit.len()];
    let mut pool_any = vec![false; inst.pool_limit.len()];
    let mut cap_rows: Vec<Expression> = vec![Expression::default(); p.offers.len()];
    let mut cap_any = vec![false; p.offers.len()];
    let mut vars = Vec::with_capacity(inst.classes.len());
    for class in &inst.classes {
        let job = inst.job(class.rep);
        let count = class.jobs.len() as f64;
        let prio = f64::from(job.priority);
        let mut class_vars = Vec::with_capacity(class.cands.len());
        let mut demand = Expression::default();
        let mut price = Expression::default();
        let mut spend = Expression::default();
        for c in &class.cands {
            let offer = &p.offers[c.offer];
            let v = problem_vars.add(variable().min(0.0));
            class_vars.push(v);
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
        if !class.cands.is_empty() {
            if job.gang {
                rows.push(demand.leq(count));
            } else {
                rows.push(demand.leq(count * f64::from(job.gpus)));
                if let Some(cap) = job.max_price_per_hour {
                    rows.push(price.leq(count * cap));
                }
                if let Some(budget) = job.budget {
                    rows.push(spend.leq(count * budget));
                }
            }
        }
        vars.push(class_vars);
    }
    for (q, row) in pool_rows.into_iter().enumerate() {
        if pool_any[q] {
            rows.push(row.leq(inst.pool_limit[q] as f64));
        }
    }
    for (o, row) in cap_rows.into_iter().enumerate() {
        if cap_any[o] {
            rows.push(row.leq(f64::from(p.offers[o].capacity_vms.unwrap_or(0))));
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
pub(crate) fn solve_lp(inst: &Instance, deadline: Option<Instant>) -> Result<LpResult, String> {
    if inst.classes.iter().all(|c| c.cands.is_empty()) {
        return Ok(LpResult {
            weight_bound: 0.0,
            cost_bound: Some(0.0),
            values: inst.classes.iter().map(|_| Vec::new()).collect(),
        });
    }
    // Phase 1: maximise weight.
    let mut pv = ProblemVariables::new();
    let m = build(inst, &mut pv);
    let phase1_vars = m.vars;
    let mut phase1 = pv.maximise(m.weight).using(clarabel);
    if let Some(s) = seconds_left(deadline)? {
        phase1.settings().time_limit(s);
    }
    let sol1 = phase1.with_all(m.rows).solve().map_err(|e| format!("LP phase 1: {e}"))?;
    let inner = sol1.inner();
    // Clarabel minimised −W: the larger of −primal and −dual is an upper bound on W.
    let w_lp = (-inner.obj_val).max(-inner.obj_val_dual);
    let weight_bound = (w_lp * (1.0 + BOUND_SLACK) + BOUND_SLACK).floor().max(0.0);

    let last_error = match min_cost_at(inst, weight_bound, deadline) {
        Ok((cost_bound, values)) => return Ok(LpResult { weight_bound, cost_bound: Some(cost_bound), values }),
        Err(e) => e,
    };
    seconds_left(deadline).map_err(|_| last_error)?;
    // The weight bound stands; round the phase-1 solution instead.
    let values = phase1_vars.iter().map(|vs| vs.iter().map(|&v| sol1.value(v).max(0.0)).collect()).collect();
    Ok(LpResult { weight_bound, cost_bound: None, values })
}

/// Phase 2: the least LP cost of placing at least `weight`; returns a proven lower bound on the cost of
/// every plan of that weight, and the LP solution. The row `W ≥ weight − δ` admits every plan of weight
/// `weight` for any δ ≥ 0; a tiny δ keeps the bound tight and the row numerically feasible when the LP
/// optimum is exactly `weight`; should the solver still fail, δ = ½ (still valid, looser) is tried.
pub(crate) fn min_cost_at(
    inst: &Instance,
    weight: f64,
    deadline: Option<Instant>,
) -> Result<(f64, Vec<Vec<f64>>), String> {
    let mut last_error = String::new();
    for delta in [1e-7 * weight.max(1.0), 0.5] {
        let mut pv = ProblemVariables::new();
        let m = build(inst, &mut pv);
        let weight_row = m.weight.clone().geq(weight - delta);
        let mut phase2 = pv.minimise(m.cost.clone()).using(clarabel);
        if let Some(s) = seconds_left(deadline)? {
            phase2.settings().time_limit(s);
        }
        match phase2.with_all(m.rows).with(weight_row).solve() {
            Ok(sol2) => {
                let inner = sol2.inner();
                let c_lp = inner.obj_val.min(inner.obj_val_dual);
                let cost_bound = (c_lp * (1.0 - BOUND_SLACK)).max(0.0);
                let values = m.vars.iter().map(|vs| vs.iter().map(|&v| sol2.value(v).max(0.0)).collect()).collect();
                return Ok((cost_bound, values));
            }
            Err(e) => last_error = format!("LP phase 2: {e}"),
        }
    }
    Err(last_error)
}

/// Turns the LP solution into a plan: first the whole jobs the LP places on one candidate (always
/// feasible: rounding down a solution of packing constraints keeps it feasible), then, in priority
/// order, as many more jobs per class as the LP places (rounded up), trying the candidates the LP uses
/// most first and the rest by rank. The caller's greedy fill places what remains.
pub(crate) fn round(inst: &Instance, lp: &LpResult) -> Sol {
    let mut sol = Sol::new(inst);
    let mut classes: Vec<usize> = (0..inst.classes.len()).collect();
    classes.sort_by_key(|&c| (std::cmp::Reverse(inst.job(inst.classes[c].rep).priority), c));
    for &c in &classes {
        let class = &inst.classes[c];
        if !inst.job(class.rep).gang {
            continue;
        }
        let mut next = 0;
        for (k, cand) in class.cands.iter().enumerate() {
            let whole = (lp.values[c][k] + 1e-6).floor() as usize;
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
                .zip(&lp.values[c])
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
        if sol.job_gpus[j] > 0 || started[c] >= lp_jobs[c] {
            continue;
        }
        started[c] += 1.0;
        let cands = &inst.classes[c].cands;
        let mut order: Vec<usize> = (0..cands.len()).collect();
        // Stable sort: candidates the LP uses, most used first; the rest keep their rank order.
        order.sort_by(|&a, &b| {
            let (va, vb) = (lp.values[c][a], lp.values[c][b]);
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
