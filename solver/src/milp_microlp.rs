//! The exact MILP (`milp`) in every build, through microlp (pure Rust: no cmake, no C++): on
//! problems of up to [`MAX_JOBS`] jobs, from the heuristics' best plan, within a budget.
//!
//! Its LP-based branch and bound proves what the combinatorial one (`exact`) cannot: where the LP
//! bound is tight but the optimum moves most jobs (a 36-job case the heuristics left at 98.1 % of
//! the optimum: proven optimal in 0.08 s), and where the jobs are too many for the
//! combinatorial bounds. Two phases, as everywhere: the most weight (skipped when the plan meets a
//! bound already), then at that weight, once it is proven, the least cost. A phase the budget stops
//! still gives its incumbent and its proven bound (microlp's best bound, an LP bound over the open
//! nodes), so that the plan's `gap` says what the search established. Where the cost phase does
//! not prove its plan, a third looks for the cheapest way of placing the plan's own jobs: a model
//! whose LP is much tighter, where microlp finds plans that move most jobs at once.
//!
//! Deterministic: the budget is in nodes (see [`WEIGHT_WORK`]), not time (a wall-clock cap per
//! phase made solving twice give two plans under load); the deadline stops it only under a time
//! limit.
//! microlp panics where its numerics fail instead of answering wrongly: such a panic is caught and
//! the heuristics' plan stands.

use std::time::Instant;

use microlp::{ComparisonOp, LinearExpr, OptimizationDirection, Problem, SolveOptions, Variable};

use crate::milp::{Model, Row};
use crate::model::{Instance, Sol};
use crate::{Bound, pick};

/// Jobs above which the MILP is not tried: on the 66 independent problems of 60 and 100 jobs
/// (seeds 1-3) it proved one more optimum than the branch and bound alone (11 instead of 10) for
/// 1.7x the time (mean 260 -> 440 ms), where at 40 jobs it proves 19 of 44 instead of 13 for 1.35x
/// (mean 277 -> 372 ms, the worst 0.95 s).
pub(crate) const MAX_JOBS: usize = 50;

/// The weight phase's and the cost phase's budgets, in simplex pivots × (rows + variables): what
/// microlp's time follows (15-28 ns a unit on 74 runs of 50-3,300 variables, where nodes alone
/// ranged 0.02-1.1 ms), so about 0.1-0.2 s and 0.06-0.13 s here.
const WEIGHT_WORK: u64 = 12_000_000;
const COST_WORK: u64 = 4_500_000;

/// The budget of the cost phase over the plan's own jobs, run where the cost phase did not prove
/// its plan: the 36-job case of `optimum.rs` (`diverse`, 2 regions) needs 2,041 nodes, about 8.3
/// million units (0.16 s), to reach the optimum, 4 % cheaper than the searches' plan. Its nodes
/// are counted at the pivots a node of the cost phase took (7-19 on the independent 40-job
/// problems), not at [`PIVOTS_PER_NODE`]: counted at 7, it took up to 0.5 s where nodes took 19.
const FIXED_COST_WORK: u64 = 9_000_000;

/// Simplex pivots a node takes, for turning a work budget into nodes (3-19 on those 74 runs, most
/// about 7). The budget is spent in one call: microlp's search resumed in chunks, so that the
/// pivots could be counted as they are spent, lost its way (the 36-job case above, proven in 900
/// nodes in one call, was not in 3,000 resumed every 50 or 200).
const PIVOTS_PER_NODE: u64 = 7;

/// Variables above which the MILP is not tried: a node of a 100-job problem of split jobs (3,300
/// variables) took 43 pivots, not 7, and its 376 nodes 1.2 s.
const MAX_VARIABLES: usize = 2_000;

/// What the MILP established: the best plan (the start's when it found none better) and the bounds
/// it proved.
pub(crate) struct Outcome {
    pub sol: Sol,
    pub bounds: Vec<Bound>,
    /// Whether it proved `sol` optimal, weight and cost.
    pub optimal: bool,
}

/// Runs the phases from `start` (a plan of the problem); `weight_bound`: the most weight any plan
/// places as the heuristics' bounds prove it (a row of the weight phase, which tightens its LP).
/// `None` when the problem is too large or has no variable.
pub(crate) fn solve(inst: &Instance, start: &Sol, weight_bound: f64, deadline: Option<Instant>) -> Option<Outcome> {
    if inst.p.jobs.len() > MAX_JOBS {
        return None;
    }
    let m = Model::new(inst);
    if m.is_empty() || m.vars.len() > MAX_VARIABLES {
        return None;
    }
    let phases = Phases { m: &m, inst, deadline };
    let mut best = start.clone();
    let mut bounds = Vec::new();
    let mut proven_weight = weight_bound;
    if best.weight(inst) < weight_bound - 0.5 {
        let cap: Vec<Row> = weight_bound.is_finite().then(|| m.weight_at_most(weight_bound)).into_iter().collect();
        let run = phases.run(&mut best, Goal::Weight, &cap, WEIGHT_WORK, PIVOTS_PER_NODE)?;
        // Weights are whole numbers: a bound below the next one proves that one unreachable. The
        // slack keeps a bound the simplex's tolerances put a hair low from cutting off a whole unit
        // (it can only loosen the bound).
        if let Some(b) = run.bound {
            let b = (b + SLACK * b.abs().max(1.0)).floor();
            bounds.push(Bound { weight: b, cost: None });
            proven_weight = proven_weight.min(b);
        }
        crate::trace(|| format!("milp weight: {} bound {:?} optimal {}", best.weight(inst), run.bound, run.optimal));
    }
    let weight = best.weight(inst);
    if weight < proven_weight - 0.5 {
        return Some(Outcome { sol: best, bounds, optimal: false });
    }
    let full = phases.run(&mut best, Goal::Cost, &[m.weight_at_least(weight)], COST_WORK, PIVOTS_PER_NODE)?;
    crate::trace(|| format!("milp cost: {:.2} bound {:?} optimal {}", best.cost(), full.bound, full.optimal));
    let cost = full.bound.map(|b| (b - SLACK * b.abs().max(1.0)).max(0.0));
    bounds.push(Bound { weight, cost });
    // Proven only if the plan replayed from microlp's values is the one it proved (the replay
    // recomputes every cost and checks every row itself).
    let optimal = full.optimal
        && best.weight(inst) >= weight - 0.5
        && cost.is_some_and(|c| best.cost() <= c + 2.0 * SLACK * c.abs().max(1.0));
    if !optimal {
        // Unproven, the cheapest way of placing the plan's own jobs: each placed job kept placed
        // is a much tighter model than "weight at least", in which microlp's search finds plans
        // that move most jobs at once (see [`FIXED_COST_WORK`]). What it proves holds for these
        // jobs only, so its bound is not the problem's.
        let placed = m.placed_as_in(inst, &best);
        if let Some(fixed) = phases.run(&mut best, Goal::Cost, &placed, FIXED_COST_WORK, full.pivots_per_node) {
            crate::trace(|| {
                format!(
                    "milp cost of the placed jobs: {:.2} bound {:?} optimal {}",
                    best.cost(),
                    fixed.bound,
                    fixed.optimal
                )
            });
        }
    }
    Some(Outcome { sol: best, bounds, optimal })
}

/// What a phase optimises: the most weight or the least cost.
#[derive(Clone, Copy)]
enum Goal {
    Weight,
    Cost,
}

/// The model and its problem, for running phases from a plan.
struct Phases<'a, 'i> {
    m: &'a Model,
    inst: &'a Instance<'i>,
    deadline: Option<Instant>,
}

impl Phases<'_, '_> {
    /// One phase from `best` with `extra` as more rows (see [`run`]); microlp's plan, replayed,
    /// replaces `best` when it is better. `None` when microlp failed.
    fn run(&self, best: &mut Sol, goal: Goal, extra: &[Row], work: u64, pivots_per_node: u64) -> Option<Run> {
        let (objective, direction) = match goal {
            Goal::Weight => (&self.m.weight, OptimizationDirection::Maximize),
            Goal::Cost => (&self.m.cost, OptimizationDirection::Minimize),
        };
        let start = self.m.values_of(self.inst, best);
        let out = run(self.m, objective, direction, extra, &start, work, pivots_per_node, self.deadline)?;
        if let Some(values) = &out.values {
            *best = pick(self.inst, best.clone(), self.m.replay(self.inst, values));
        }
        Some(out)
    }
}

/// Relative slack on microlp's bounds, which its tolerances (1e-9 relative on feasibility) can put
/// a hair past the true optimum.
const SLACK: f64 = 1e-7;

/// One phase's result: the incumbent's values, microlp's proven bound on the objective, and
/// whether the search finished.
struct Run {
    values: Option<Vec<f64>>,
    bound: Option<f64>,
    optimal: bool,
    /// Simplex pivots per node it took (at least 1).
    pivots_per_node: u64,
}

/// Optimises `objective` over the model with `extra` as more rows, from `start`, within `work`
/// (see [`WEIGHT_WORK`]; nodes at `pivots_per_node`) or until `deadline`. `None` when microlp
/// failed (an error or a panic).
#[allow(clippy::too_many_arguments)]
fn run(
    m: &Model,
    objective: &[f64],
    direction: OptimizationDirection,
    extra: &[Row],
    start: &[f64],
    work: u64,
    pivots_per_node: u64,
    deadline: Option<Instant>,
) -> Option<Run> {
    let time_limit = match deadline {
        Some(d) => Some(d.checked_duration_since(Instant::now()).filter(|t| !t.is_zero())?),
        None => None,
    };
    let solved = std::panic::catch_unwind(|| {
        let mut p = Problem::new(direction);
        let vars: Vec<Variable> = m
            .vars
            .iter()
            .zip(objective)
            .map(|(v, &c)| if v.integer { p.add_integer_var(c, (0, v.max as i32)) } else { p.add_var(c, (0.0, v.max)) })
            .collect();
        for r in m.rows.iter().chain(extra) {
            let mut e = LinearExpr::empty();
            for &(v, c) in &r.terms {
                e.add(vars[v], c);
            }
            p.add_constraint(e, ComparisonOp::Le, r.rhs);
        }
        let size = (m.vars.len() + m.rows.len() + 1) as u64;
        let mut options = SolveOptions::default();
        options.node_limit = Some(work / (size * pivots_per_node.max(1)));
        options.time_limit = time_limit;
        options.warm_start = Some(vars.iter().copied().zip(start.iter().copied()).collect());
        let outcome = p.solve_with(options).ok()?;
        let stats = outcome.stats();
        crate::trace(|| {
            let ms = stats.elapsed.as_secs_f64() * 1e3;
            format!(
                "microlp: {} variables, {} rows, {} nodes, {} pivots, {ms:.0} ms",
                vars.len(),
                m.rows.len() + extra.len(),
                stats.nodes_solved,
                stats.lp_iterations
            )
        });
        let optimal = outcome.is_optimal();
        let values = outcome.solution().map(|s| vars.iter().map(|&v| s.var_value_raw(v)).collect());
        let pivots_per_node = (stats.lp_iterations / stats.nodes_solved.max(1)).max(1);
        Some(Run { values, bound: stats.best_bound, optimal, pivots_per_node })
    });
    solved.ok().flatten()
}
