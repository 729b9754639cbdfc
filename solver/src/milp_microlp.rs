//! The exact MILP (`milp`) in every build, through microlp (pure Rust: no cmake, no C++): on
//! problems of up to [`MAX_JOBS`] jobs, from the heuristics' best plan, within a budget; on up to
//! 100, within a smaller one ([`Budget::LARGER`]).
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
//! Each phase looks only for plans better than the incumbent, and first works at the root as a
//! MILP solver would: rounds of fixing by reduced cost (`reduced_cost`) and cover cuts on the pool,
//! capacity and weight rows (`cover_cuts`), each round's LP priced again. Often that alone proves
//! the incumbent (no plan reaches the target); otherwise microlp searches what is left, a smaller
//! model under a tighter relaxation. On the 44 independent 40-job problems: 24 proven instead of
//! 19, mean 419 instead of 393 ms; on 60 random `diverse` ones of 20-40 jobs 50 instead of 43
//! (BENCHMARKS.md, "Root cuts and fixing").
//!
//! Deterministic: the budget is in nodes (see [`WEIGHT_WORK`]), not time (a wall-clock cap per
//! phase made solving twice give two plans under load); the deadline stops it only under a time
//! limit.
//! microlp panics where its numerics fail instead of answering wrongly: such a panic is caught and
//! the heuristics' plan stands.

use std::time::Instant;

use microlp::{ComparisonOp, LinearExpr, OptimizationDirection, Problem, Variable};

use crate::milp::{Model, Row};
use crate::model::{Instance, Sol};
use crate::reduced_cost::Domains;
use crate::{Bound, pick};

/// Jobs above which the MILP runs only on a smaller budget ([`Budget::LARGER`]): with the whole
/// budget, on the 70 independent problems of 60 and 100 jobs (seeds 1-3, and the split shape's
/// seeds 4 and 5) it proved 14 optima
/// instead of 10 for 2.0 times the time, where at 40 jobs it proves 19 of 44 instead of 13 for
/// 1.35x (mean 277 -> 372 ms, the worst 0.95 s).
pub(crate) const MAX_JOBS: usize = 50;

/// Jobs above which the MILP is not tried at all (where the neighbourhood search stops too).
const MAX_LARGER_JOBS: usize = crate::neighbourhood::MAX_JOBS;

/// How much the MILP may do on a problem.
struct Budget {
    /// The weight phase's and the cost phase's work (see [`WEIGHT_WORK`]).
    weight_work: u64,
    cost_work: u64,
    /// Rounds of the root's loop at most (see [`ROOT_ROUNDS`]).
    root_rounds: usize,
    /// Whether the cost phase over the plan's own jobs follows an unproven cost phase.
    fixed_cost: bool,
    /// Variables above which it is not tried.
    max_variables: usize,
}

impl Budget {
    /// Up to [`MAX_JOBS`] jobs.
    const FULL: Budget = Budget {
        weight_work: WEIGHT_WORK,
        cost_work: COST_WORK,
        root_rounds: ROOT_ROUNDS,
        fixed_cost: true,
        max_variables: MAX_VARIABLES,
    };

    /// 51-100 jobs: a quarter of the weight phase's work (the cost phase's whole), 10 root rounds,
    /// no phase over the plan's own jobs (the neighbourhood search and the LP-led moves search the
    /// cost after it), and only where the model has at most 1,000 variables. The optima it proves
    /// there are proven by the root's loop or in a few hundred nodes of models of 150-700
    /// variables; where it does not, a root round of a 1,600-variable model took 160 ms. On the 70
    /// independent problems of 60 and 100 jobs (seeds 1-5): 13 proven optimal instead of 10
    /// (tight-caps-60-1, tight-caps-60-2, budgets-100-2, each in under 0.2 s), the same plans, for
    /// 1.10 times the time. The cost phase's whole work instead of a quarter: 14 proven instead of
    /// 13 (tight-caps-60-2 again), 11 cost gaps tighter, the same plans and times; four times as
    /// much proved 15 but took 22 problems over 1 s instead of 15, and the weight phase's whole
    /// work proved none more (BENCHMARKS.md, "The MILP's whole cost budget at 51-100 jobs, and what
    /// did not pay (session 53)"). Up to 1,000 variables, not 700, since session 69: on 77
    /// independent problems (60 and 100 jobs of seeds 1 and 12, 60 jobs of seeds 2, 3 and 8), the
    /// same plans, 6 gaps tighter (issue-60-1 0.0268 -> 0.0124, split-60-3 0.0155 -> 0.0054, tiny-60-8 0.0086 ->
    /// 0.0022), 1.02 times the time at 60 jobs (BENCHMARKS.md, "The MILP's root on 60-job models
    /// of up to 1,000 variables (session 69)").
    const LARGER: Budget = Budget {
        weight_work: WEIGHT_WORK / 4,
        cost_work: COST_WORK,
        root_rounds: 10,
        fixed_cost: false,
        max_variables: 1_000,
    };
}

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
    let budget = match inst.p.jobs.len() {
        n if n <= MAX_JOBS => Budget::FULL,
        n if n <= MAX_LARGER_JOBS => Budget::LARGER,
        _ => return None,
    };
    let m = Model::new(inst);
    if m.is_empty() || m.vars.len() > budget.max_variables {
        return None;
    }
    let phases = Phases { m: &m, inst, deadline, root_rounds: budget.root_rounds };
    let mut best = start.clone();
    let mut bounds = Vec::new();
    let mut proven_weight = weight_bound;
    if best.weight(inst) < weight_bound - 0.5 {
        let cap: Vec<Row> = weight_bound.is_finite().then(|| m.weight_at_most(weight_bound)).into_iter().collect();
        let run = phases.run(&mut best, Goal::Weight, &cap, budget.weight_work, PIVOTS_PER_NODE)?;
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
    // The weight is proven the most there is: the relaxation may not place more either.
    let at_weight = [m.weight_at_least(weight), m.weight_at_most(proven_weight.max(weight))];
    let full = phases.run(&mut best, Goal::Cost, &at_weight, budget.cost_work, PIVOTS_PER_NODE)?;
    crate::trace(|| format!("milp cost: {:.2} bound {:?} optimal {}", best.cost(), full.bound, full.optimal));
    let cost = full.bound.map(|b| (b - SLACK * b.abs().max(1.0)).max(0.0));
    bounds.push(Bound { weight, cost });
    // Proven only if the plan replayed from microlp's values is the one it proved (the replay
    // recomputes every cost and checks every row itself).
    let optimal = full.optimal
        && best.weight(inst) >= weight - 0.5
        && cost.is_some_and(|c| best.cost() <= c + (2.0 * SLACK + COST_TOLERANCE) * c.abs().max(1.0));
    if !optimal && budget.fixed_cost {
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
    /// Rounds of the root's loop at most.
    root_rounds: usize,
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
        // Only plans better than `best` are looked for: weights are whole numbers, and a cost is
        // better when it is by more than a tenth of the gap a plan is reported optimal within.
        let target = match goal {
            Goal::Weight => {
                let w = best.weight(self.inst);
                Target { fix_at: w + 1.0 - 1e-6, rest: w }
            }
            Goal::Cost => {
                let c = best.cost() - COST_TOLERANCE * best.cost().abs().max(1.0);
                Target { fix_at: c, rest: c }
            }
        };
        let out = run(
            self.m,
            objective,
            direction,
            extra,
            &start,
            target,
            self.root_rounds,
            work,
            pivots_per_node,
            self.deadline,
        )?;
        if let Some(values) = &out.values {
            *best = pick(self.inst, best.clone(), self.m.replay(self.inst, values));
        }
        Some(out)
    }
}

/// Rounds of the root's loop at most: each re-prices the rows (fixing by reduced cost) and adds the
/// cover cuts the LP's point breaks. It stops earlier when three rounds in a row fix nothing and
/// close less than a fiftieth of what is left between the LP and the target; on the independent
/// 40-job problems it ends after 2-30 rounds, 3-4 ms each.
const ROOT_ROUNDS: usize = 30;

/// What the first round of the root's loop is assumed to take, under a time limit (4-15 ms on
/// the independent 40-job problems, on a loaded 2-core machine).
const FIRST_ROUND: std::time::Duration = std::time::Duration::from_millis(10);

/// Relative cost improvement below which the cost phases do not look for a cheaper plan (a tenth
/// of [`crate::OPTIMAL_GAP`]): what lets reduced costs fix variables at the incumbent's cost.
const COST_TOLERANCE: f64 = 1e-7;

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

/// What the root's loop leaves the search: nothing (no plan reaches the target), or the domains
/// the fixing left and the cuts.
enum Root {
    Proven,
    Left { domains: Domains, cuts: Vec<Row> },
}

/// The root's loop of a phase (see [`ROOT_ROUNDS`]): rounds of reduced-cost fixing against `t` and
/// of cover cuts at the LP's point, until the LP stalls or the rounds or the time run out.
fn root(
    m: &Model,
    objective: &[f64],
    maximise: bool,
    extra: &[Row],
    t: Target,
    rounds: usize,
    deadline: Option<Instant>,
) -> Root {
    let mut d = Domains::whole(&m.vars);
    let mut cuts: Vec<Row> = Vec::new();
    let sign = if maximise { 1.0 } else { -1.0 };
    let signed: Vec<f64> = objective.iter().map(|c| sign * c).collect();
    let gang_of = m.gang_of();
    let mut last = None;
    let mut stalls = 0;
    // microlp's LPs do not stop the moment their time limit passes (building and factoring the
    // basis comes first): a round starts only when it can end in time, as long as the last one
    // took twice over (the first one, as long as [`FIRST_ROUND`]).
    let mut round_time = FIRST_ROUND;
    for round in 0..=rounds {
        let started = Instant::now();
        if deadline.is_some_and(|d| started + 2 * round_time >= d) {
            break;
        }
        // A row on the objective itself (the weight phase's cap) would take all the prices and
        // leave every reduced cost zero: the fixing prices the model's rows only.
        let priced: Vec<&Row> = if maximise {
            m.rows.iter().chain(&cuts).collect()
        } else {
            m.rows.iter().chain(extra).chain(&cuts).collect()
        };
        let fixed = match crate::reduced_cost::fix(&m.vars, &signed, &priced, &mut d, sign * t.fix_at, deadline) {
            Ok(Some(n)) => n,
            Ok(None) => {
                crate::trace(|| format!("root: round {round}, {} cuts: nothing reaches the target", cuts.len()));
                return Root::Proven;
            }
            // The dual LP failed (microlp's numerics): no fixing this round, the cuts go on.
            Err(()) => 0,
        };
        if round == rounds {
            break;
        }
        let all: Vec<&Row> = m.rows.iter().chain(extra).chain(&cuts).collect();
        let Some(x) = crate::reduced_cost::relaxation(&d, objective, maximise, &all, deadline) else { break };
        let lpv: f64 = x.iter().zip(objective).map(|(a, b)| a * b).sum();
        let model: Vec<&Row> = m.rows.iter().chain(extra).collect();
        let new = crate::cover_cuts::separate(&model, &gang_of, &d, &x);
        crate::trace(|| format!("root: lp {lpv:.2}, {fixed} fixed, {} new cuts, {} in all", new.len(), cuts.len()));
        // Progress: the LP closed at least a fiftieth of what separates it from the target.
        let moved = last.is_none_or(|l: f64| (l - lpv).abs() > 0.02 * (l - t.fix_at).abs().max(1e-6 * l.abs()));
        stalls = if moved || fixed > 0 { 0 } else { stalls + 1 };
        if new.is_empty() || stalls >= 3 {
            break;
        }
        last = Some(lpv);
        cuts.extend(new);
        round_time = started.elapsed();
    }
    Root::Left { domains: d, cuts }
}

/// What a phase must beat: the objective value every plan it looks for reaches (`fix_at`, for
/// reduced-cost fixing), and what the plans it thereby leaves out reach at best (`rest`, the
/// incumbent's value: the bound over them).
#[derive(Clone, Copy)]
struct Target {
    fix_at: f64,
    rest: f64,
}

/// Optimises `objective` over the model with `extra` as more rows, from `start`, within `work`
/// (see [`WEIGHT_WORK`]; nodes at `pivots_per_node`) or until `deadline`, looking only for plans
/// that reach `target`: the variables are first fixed where reduced costs prove that no such plan
/// can move them (in up to `root_rounds` rounds of the root's loop), and the search runs on what
/// is left. `None` when microlp failed (an error or a panic).
#[allow(clippy::too_many_arguments)]
fn run(
    m: &Model,
    objective: &[f64],
    direction: OptimizationDirection,
    extra: &[Row],
    start: &[f64],
    target: Target,
    root_rounds: usize,
    work: u64,
    pivots_per_node: u64,
    deadline: Option<Instant>,
) -> Option<Run> {
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return None;
    }
    let maximise = matches!(direction, OptimizationDirection::Maximize);
    let (d, cuts) = match root(m, objective, maximise, extra, target, root_rounds, deadline) {
        Root::Proven => return Some(Run { values: None, bound: Some(target.rest), optimal: true, pivots_per_node: 1 }),
        Root::Left { domains, cuts } => (domains, cuts),
    };
    // What the root's rounds left of the time limit, not what there was before them.
    let options = crate::reduced_cost::lp_options(deadline)?;
    let rows: Vec<&Row> = m.rows.iter().chain(extra).chain(&cuts).collect();
    let (lo, hi) = (d.min, d.max);
    let fixed = |v: usize| hi[v] - lo[v] < 0.5;
    let solved = std::panic::catch_unwind(|| {
        let mut p = Problem::new(direction);
        let mut constant = 0.0;
        let vars: Vec<Option<Variable>> = m
            .vars
            .iter()
            .zip(objective)
            .enumerate()
            .map(|(j, (v, &c))| {
                if fixed(j) {
                    constant += c * lo[j];
                    None
                } else if v.integer {
                    Some(p.add_integer_var(c, (lo[j] as i32, hi[j] as i32)))
                } else {
                    Some(p.add_var(c, (lo[j], hi[j])))
                }
            })
            .collect();
        let mut kept = 0;
        for r in &rows {
            let mut e = LinearExpr::empty();
            let mut rhs = r.rhs;
            let mut most = 0.0;
            for &(v, c) in &r.terms {
                match vars[v] {
                    Some(x) => {
                        e.add(x, c);
                        most += (c * lo[v]).max(c * hi[v]);
                    }
                    None => rhs -= c * lo[v],
                }
            }
            // A row no values of the free variables can break is left out.
            if most <= rhs + 1e-9 * rhs.abs().max(1.0) {
                if most.is_nan() {
                    return None;
                }
                continue;
            }
            kept += 1;
            p.add_constraint(e, ComparisonOp::Le, rhs);
        }
        let free: Vec<(usize, Variable)> = vars.iter().enumerate().filter_map(|(j, v)| v.map(|v| (j, v))).collect();
        let size = (free.len() + kept + 1) as u64;
        let mut options = options;
        options.node_limit = Some(work / (size * pivots_per_node.max(1)));
        options.warm_start = Some(free.iter().map(|&(j, v)| (v, start[j])).collect());
        // An error, infeasibility included, proves nothing here: microlp has called a feasible LP
        // unbounded, and only the fixing's own bound above is trusted to prove the incumbent.
        let outcome = p.solve_with(options).ok()?;
        let stats = outcome.stats();
        crate::trace(|| {
            let ms = stats.elapsed.as_secs_f64() * 1e3;
            format!(
                "microlp: {} of {} variables, {} of {} rows, {} nodes, {} pivots, {ms:.0} ms",
                free.len(),
                m.vars.len(),
                kept,
                rows.len(),
                stats.nodes_solved,
                stats.lp_iterations
            )
        });
        let optimal = outcome.is_optimal();
        let values = outcome.solution().map(|s| {
            let mut values = lo.clone();
            for &(j, v) in &free {
                values[j] = s.var_value_raw(v);
            }
            values
        });
        let pivots_per_node = (stats.lp_iterations / stats.nodes_solved.max(1)).max(1);
        let bound = stats.best_bound.map(|b| b + constant);
        // What the fixing left out reaches the target's rest at best.
        let bound = bound.map(|b| if maximise { b.max(target.rest) } else { b.min(target.rest) });
        Some(Run { values, bound, optimal, pivots_per_node })
    });
    solved.ok().flatten()
}
