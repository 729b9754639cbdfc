//! `--features highs`: the exact MILP (`milp`) through HiGHS, on every problem `Method::Best` gets.
//! Both phases start from the LP-rounding plan (a MIP start), so HiGHS only ever improves on it.

use std::time::Instant;

use good_lp::solvers::highs::HighsProblem;
use good_lp::solvers::{Solution, SolutionStatus};
use good_lp::{Expression, ProblemVariables, SolverModel, Variable, WithInitialSolution, highs, variable};

use crate::milp::{Model, Row};
use crate::model::{Instance, Sol};
use crate::plan::{Plan, SolveOptions};
use crate::problem::Problem;
use crate::{Bound, Search, finish, lp_round, pick};

/// Relative MIP gap asked of HiGHS in the cost phase (its default); the plan's `gap` reports it when
/// HiGHS stops there rather than at a proven optimum.
const COST_GAP: f32 = 1e-4;

/// The model as HiGHS takes it through good_lp: its variables and the two objectives.
struct Translated {
    vars: Vec<Variable>,
    weight: Expression,
    cost: Expression,
}

fn translate(m: &Model, pv: &mut ProblemVariables) -> Translated {
    let vars: Vec<Variable> = m
        .vars
        .iter()
        .map(|v| {
            let def = variable().min(0.0).max(v.max);
            pv.add(if v.integer { def.integer() } else { def })
        })
        .collect();
    let objective = |coefs: &[f64]| {
        let mut e = Expression::default();
        for (v, &c) in coefs.iter().enumerate().filter(|(_, c)| **c != 0.0) {
            e.add_mul(c, vars[v]);
        }
        e
    };
    let (weight, cost) = (objective(&m.weight), objective(&m.cost));
    Translated { vars, weight, cost }
}

fn row(t: &Translated, r: &Row) -> good_lp::Constraint {
    let mut e = Expression::default();
    for &(v, c) in &r.terms {
        e.add_mul(c, t.vars[v]);
    }
    e.leq(r.rhs)
}

fn rows(t: &Translated, m: &Model) -> Vec<good_lp::Constraint> {
    m.rows.iter().map(|r| row(t, r)).collect()
}

fn start(t: &Translated, values: &[f64]) -> Vec<(Variable, f64)> {
    t.vars.iter().copied().zip(values.iter().copied()).collect()
}

fn values(t: &Translated, solution: &impl Solution) -> Vec<f64> {
    t.vars.iter().map(|&v| solution.value(v)).collect()
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

/// What HiGHS found: its plan, and the bound it proved (none when the time limit stopped the weight
/// phase: the plan is then HiGHS's best incumbent, which started from `start`).
fn run(inst: &Instance, deadline: Option<Instant>, start_plan: &Sol) -> Result<(Sol, Option<Bound>), String> {
    let m = Model::new(inst);
    if m.is_empty() {
        return Ok((Sol::new(inst), Some(Bound { weight: 0.0, cost: Some(0.0) })));
    }
    let mut pv = ProblemVariables::new();
    let t = translate(&m, &mut pv);
    let phase1 = configure(pv.maximise(t.weight.clone()).using(highs), deadline)?
        .set_mip_abs_gap(0.5)
        .map_err(|e| e.to_string())?
        .set_mip_rel_gap(0.0)
        .map_err(|e| e.to_string())?
        .with_initial_solution(start(&t, &m.values_of(inst, start_plan)));
    let sol1 = phase1.with_all(rows(&t, &m)).solve().map_err(|e| format!("highs phase 1: {e}"))?;
    // GapLimit here means within the absolute gap of 0.5, which for integer weights is optimal.
    if !matches!(sol1.status(), SolutionStatus::Optimal | SolutionStatus::GapLimit) {
        return Ok((m.replay(inst, &values(&t, &sol1)), None));
    }
    let best_weight = sol1.eval(&t.weight).round();
    let incumbent = m.replay(inst, &values(&t, &sol1));

    let mut pv = ProblemVariables::new();
    let t = translate(&m, &mut pv);
    let weight_row = row(&t, &m.weight_at_least(best_weight));
    // Start the cost phase from the cheaper of the two plans that reach the proven weight.
    let start2 = if start_plan.weight(inst) >= best_weight - 0.5 && start_plan.cost() < incumbent.cost() {
        start_plan
    } else {
        &incumbent
    };
    let phase2 = configure(pv.minimise(t.cost.clone()).using(highs), deadline)
        .map_err(|_| "time limit after highs phase 1".to_string());
    let phase2 = match phase2 {
        Ok(p) => p.set_mip_rel_gap(COST_GAP).map_err(|e| e.to_string())?,
        Err(_) => return Ok((incumbent, Some(Bound { weight: best_weight, cost: None }))),
    };
    let phase2 = phase2.with_initial_solution(start(&t, &m.values_of(inst, start2)));
    let sol2 = match phase2.with_all(rows(&t, &m)).with(weight_row).solve() {
        Ok(s) => s,
        // Out of time without a better plan: the weight stays proven.
        Err(_) => return Ok((incumbent, Some(Bound { weight: best_weight, cost: None }))),
    };
    let cost = sol2.eval(&t.cost);
    // HiGHS stops within COST_GAP of its dual bound: that bound, from the incumbent's cost, is what is
    // proven. At the time limit the incumbent (of the proven maximum weight) is kept, with no cost bound.
    let cost_bound = match sol2.status() {
        SolutionStatus::Optimal => Some(cost),
        SolutionStatus::GapLimit => Some(cost * (1.0 - f64::from(COST_GAP))),
        _ => None,
    };
    Ok((m.replay(inst, &values(&t, &sol2)), Some(Bound { weight: best_weight, cost: cost_bound.map(|c| c.max(0.0)) })))
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
