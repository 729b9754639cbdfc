//! `--features highs`: the exact MILP through HiGHS.
//!
//! Gang classes stay aggregated (integer `n[c,k]` = jobs of class `c` on candidate `k`), which is exact
//! because a gang's candidates, caps and budget are the same for every job of its class. Non-gang jobs
//! get their own integer VM counts `x[j,k]` and GPU counts `y[j,k] ≤ gpus_per_vm · x[j,k]`, because their
//! price caps, budgets and partly idle last VMs are per job. Two phases, as in the LP method: maximise
//! the weight (integral, so an absolute gap below 1 proves it), then minimise cost at that weight.
//! Both phases start from the LP-rounding plan (a MIP start), so HiGHS only ever improves on it.

use std::time::Instant;

use good_lp::solvers::highs::HighsProblem;
use good_lp::solvers::{Solution, SolutionStatus};
use good_lp::{Expression, ProblemVariables, SolverModel, Variable, WithInitialSolution, highs, variable};

use crate::model::{Instance, Sol};
use crate::plan::{Plan, SolveOptions};
use crate::problem::Problem;
use crate::{Bound, Search, finish, lp_round, pick};

/// Relative MIP gap asked of HiGHS in the cost phase (its default); the plan's `gap` reports it when
/// HiGHS stops there rather than at a proven optimum.
const COST_GAP: f32 = 1e-4;

enum Vars {
    Gang(Vec<Variable>),
    /// Per job of the class: per candidate (VMs, GPUs).
    Split(Vec<Vec<(Variable, Variable)>>),
}

struct Model {
    vars: Vec<Vars>,
    weight: Expression,
    cost: Expression,
    rows: Vec<good_lp::Constraint>,
}

fn build(inst: &Instance, pv: &mut ProblemVariables) -> Model {
    let p = inst.p;
    let mut weight = Expression::default();
    let mut cost = Expression::default();
    let mut rows = Vec::new();
    let mut pool_rows: Vec<Option<Expression>> = vec![None; inst.pool_limit.len()];
    let mut cap_rows: Vec<Option<Expression>> = vec![None; p.offers.len()];
    let mut usage = |o: usize, vms: f64, v: Variable| {
        let offer = &p.offers[o];
        for &q in &inst.offer_pools[o] {
            pool_rows[q].get_or_insert_with(Expression::default).add_mul(vms * f64::from(offer.vcpus_per_vm), v);
        }
        if offer.capacity_vms.is_some() {
            cap_rows[o].get_or_insert_with(Expression::default).add_mul(vms, v);
        }
    };
    let mut vars = Vec::with_capacity(inst.classes.len());
    for class in &inst.classes {
        let job = inst.job(class.rep);
        let prio = f64::from(job.priority);
        if job.gang {
            let count = class.jobs.len() as f64;
            let mut demand = Expression::default();
            let vs: Vec<Variable> = class
                .cands
                .iter()
                .map(|c| {
                    let v = pv.add(variable().integer().min(0.0).max(count));
                    weight.add_mul(prio * f64::from(c.gpus), v);
                    cost.add_mul(c.cost, v);
                    demand.add_mul(1.0, v);
                    usage(c.offer, f64::from(c.vms), v);
                    v
                })
                .collect();
            if !vs.is_empty() {
                rows.push(demand.leq(count));
            }
            vars.push(Vars::Gang(vs));
        } else {
            let mut per_job = Vec::with_capacity(class.jobs.len());
            for _ in &class.jobs {
                let mut demand = Expression::default();
                let mut price = Expression::default();
                let mut spend = Expression::default();
                let vs: Vec<(Variable, Variable)> = class
                    .cands
                    .iter()
                    .map(|c| {
                        let gpv = f64::from(c.gpus);
                        let x = pv.add(variable().integer().min(0.0).max(f64::from(job.gpus.div_ceil(c.gpus))));
                        let y = pv.add(variable().min(0.0).max(f64::from(job.gpus)));
                        rows.push((Expression::from(y) - gpv * x).leq(0.0));
                        weight.add_mul(prio, y);
                        cost.add_mul(c.cost, x);
                        cost.add_mul(c.egress_per_gpu, y);
                        demand.add_mul(1.0, y);
                        price.add_mul(p.offers[c.offer].price_per_hour, x);
                        spend.add_mul(c.cost, x);
                        spend.add_mul(c.egress_per_gpu, y);
                        usage(c.offer, 1.0, x);
                        (x, y)
                    })
                    .collect();
                if !vs.is_empty() {
                    rows.push(demand.leq(f64::from(job.gpus)));
                    if let Some(cap) = job.max_price_per_hour {
                        rows.push(price.leq(cap));
                    }
                    if let Some(budget) = job.budget {
                        rows.push(spend.leq(budget));
                    }
                }
                per_job.push(vs);
            }
            vars.push(Vars::Split(per_job));
        }
    }
    for (q, row) in pool_rows.into_iter().enumerate() {
        if let Some(row) = row {
            rows.push(row.leq(inst.pool_limit[q] as f64));
        }
    }
    for (o, row) in cap_rows.into_iter().enumerate() {
        if let Some(row) = row {
            rows.push(row.leq(f64::from(p.offers[o].capacity_vms.unwrap_or(0))));
        }
    }
    Model { vars, weight, cost, rows }
}

fn configure(mut m: HighsProblem, deadline: Option<Instant>) -> Result<HighsProblem, String> {
    m = m.set_threads(1).set_option("random_seed", 0);
    if let Some(d) = deadline {
        let left = d.saturating_duration_since(Instant::now()).as_secs_f64();
        if left <= 0.0 {
            return Err("time limit".to_string());
        }
        m = m.set_time_limit(left);
    }
    Ok(m)
}

/// The variables' values that describe a plan: HiGHS's starting incumbent.
fn start_values(inst: &Instance, m: &Model, sol: &Sol) -> Vec<(Variable, f64)> {
    let mut by_job: Vec<Vec<&crate::model::Assign>> = vec![Vec::new(); inst.p.jobs.len()];
    for a in &sol.assigns {
        by_job[a.job].push(a);
    }
    let mut values = Vec::new();
    for (c, vars) in m.vars.iter().enumerate() {
        let class = &inst.classes[c];
        match vars {
            Vars::Gang(vs) => {
                for (k, &v) in vs.iter().enumerate() {
                    let offer = class.cands[k].offer;
                    let n = class.jobs.iter().filter(|&&j| by_job[j].iter().any(|a| a.offer == offer)).count();
                    values.push((v, n as f64));
                }
            }
            Vars::Split(per_job) => {
                for (vs, &j) in per_job.iter().zip(&class.jobs) {
                    for (k, &(x, y)) in vs.iter().enumerate() {
                        let offer = class.cands[k].offer;
                        let on = by_job[j].iter().filter(|a| a.offer == offer);
                        let (vms, gpus) = on.fold((0, 0), |(v, g), a| (v + a.vms, g + a.gpus));
                        values.push((x, f64::from(vms)));
                        values.push((y, f64::from(gpus)));
                    }
                }
            }
        }
    }
    values
}

/// Replays an integer solution through the same bookkeeping as every other method.
fn replay(inst: &Instance, m: &Model, solution: &impl Solution) -> Sol {
    let mut sol = Sol::new(inst);
    for (c, vars) in m.vars.iter().enumerate() {
        let class = &inst.classes[c];
        match vars {
            Vars::Gang(vs) => {
                let mut next = class.jobs.iter();
                for (k, &v) in vs.iter().enumerate() {
                    let n = solution.value(v).round() as usize;
                    for j in next.by_ref().take(n) {
                        sol.try_gang(inst, *j, &class.cands[k]);
                    }
                }
            }
            Vars::Split(per_job) => {
                for (vs, &j) in per_job.iter().zip(&class.jobs) {
                    for (k, &(x, _)) in vs.iter().enumerate() {
                        let vms = solution.value(x).round() as u32;
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

/// What HiGHS found: its plan, and the bound it proved (none when the time limit stopped the weight
/// phase: the plan is then HiGHS's best incumbent, which started from `start`).
fn run(inst: &Instance, deadline: Option<Instant>, start: &Sol) -> Result<(Sol, Option<Bound>), String> {
    if inst.classes.iter().all(|c| c.cands.is_empty()) {
        return Ok((Sol::new(inst), Some(Bound { weight: 0.0, cost: Some(0.0) })));
    }
    let mut pv = ProblemVariables::new();
    let m = build(inst, &mut pv);
    let phase1 = configure(pv.maximise(m.weight.clone()).using(highs), deadline)?
        .set_mip_abs_gap(0.5)
        .map_err(|e| e.to_string())?
        .set_mip_rel_gap(0.0)
        .map_err(|e| e.to_string())?
        .with_initial_solution(start_values(inst, &m, start));
    let sol1 = phase1.with_all(m.rows.clone()).solve().map_err(|e| format!("highs phase 1: {e}"))?;
    // GapLimit here means within the absolute gap of 0.5, which for integer weights is optimal.
    if !matches!(sol1.status(), SolutionStatus::Optimal | SolutionStatus::GapLimit) {
        return Ok((replay(inst, &m, &sol1), None));
    }
    let best_weight = sol1.eval(&m.weight).round();
    let incumbent = replay(inst, &m, &sol1);

    let mut pv = ProblemVariables::new();
    let m = build(inst, &mut pv);
    let weight_row = m.weight.clone().geq(best_weight - 0.5);
    // Start the cost phase from the cheaper of the two plans that reach the proven weight.
    let start2 =
        if start.weight(inst) >= best_weight - 0.5 && start.cost() < incumbent.cost() { start } else { &incumbent };
    let phase2 = configure(pv.minimise(m.cost.clone()).using(highs), deadline)
        .map_err(|_| "time limit after highs phase 1".to_string());
    let phase2 = match phase2 {
        Ok(p) => p.set_mip_rel_gap(COST_GAP).map_err(|e| e.to_string())?,
        Err(_) => return Ok((incumbent, Some(Bound { weight: best_weight, cost: None }))),
    };
    let phase2 = phase2.with_initial_solution(start_values(inst, &m, start2));
    let sol2 = match phase2.with_all(m.rows.clone()).with(weight_row).solve() {
        Ok(s) => s,
        // Out of time without a better plan: the weight stays proven.
        Err(_) => return Ok((incumbent, Some(Bound { weight: best_weight, cost: None }))),
    };
    let cost = sol2.eval(&m.cost);
    // HiGHS stops within COST_GAP of its dual bound: that bound, from the incumbent's cost, is what is
    // proven. At the time limit the incumbent (of the proven maximum weight) is kept, with no cost bound.
    let cost_bound = match sol2.status() {
        SolutionStatus::Optimal => Some(cost),
        SolutionStatus::GapLimit => Some(cost * (1.0 - f64::from(COST_GAP))),
        _ => None,
    };
    Ok((replay(inst, &m, &sol2), Some(Bound { weight: best_weight, cost: cost_bound.map(|c| c.max(0.0)) })))
}

/// `Method::Best` with `--features highs`: the LP-rounding plan first (HiGHS's starting incumbent,
/// and the answer if HiGHS fails), then HiGHS with the time left; the better plan wins and every bound
/// proven on the way counts for `gap`.
pub(crate) fn solve(problem: &Problem, options: &SolveOptions) -> Plan {
    let start = Instant::now();
    let deadline = options.time_limit_ms.map(|ms| start + std::time::Duration::from_millis(ms));
    let inst = Instance::new(problem);
    let (base, base_label, mut bounds) = lp_round(&inst, deadline, Search::On);
    match run(&inst, deadline, &base) {
        Ok((sol, bound)) => {
            let label = if bound.is_some() { "highs" } else { "highs (time limit in the weight phase)" };
            // HiGHS proved a maximum weight below the LP's but no cost bound (its cost phase ran out
            // of time): the LP's least cost at that weight still bounds every plan of that weight. This
            // one LP may run past the time limit (it takes what the lp-round phase 2 took): a plan
            // reported with gap 1.0 for want of it would be useless.
            if let Some(Bound { weight, cost: None }) = bound
                && bounds.iter().all(|b| b.weight > weight + 0.5)
                && let Ok((cost, _)) = crate::lp::min_cost_at(&inst, weight, None, None)
            {
                bounds.push(Bound { weight, cost: Some(cost) });
            }
            bounds.extend(bound);
            let sol = pick(&inst, sol, base);
            finish(&inst, &sol, label, &bounds, start)
        }
        // No time left for HiGHS at all: the plan is what the time allowed, named as such.
        Err(why) if why == "time limit" => finish(&inst, &base, &base_label, &bounds, start),
        Err(why) => finish(&inst, &base, &format!("{base_label} (highs: {why})"), &bounds, start),
    }
}
