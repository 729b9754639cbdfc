//! LP diving on the exact model (`milp`): a start for the local searches that follows the weight
//! LP's whole arrangement of the jobs, where the searches' own moves change a few jobs at a time.
//!
//! The weight LP is solved once (microlp's simplex), then its fractional integer variables are fixed
//! one at a time, each fix re-solved from the last basis (dual simplex, a few pivots): up to the
//! ceiling when the rows can still hold it and the variable is far enough there (half way, or 70 %
//! in a second dive; or nearer its ceiling than any other is to its floor), else the least
//! fractional one down to its floor. The point it ends at (after [`MAX_FIXES`], with the rest
//! rounded down) replays as a plan. That plan is rarely better than the searches' own (66-100 %
//! of their weight on the 55 independent 60-100-job problems it ran on), but the searches started
//! from it reach plans the ones started from the LP's rounding do not: on split-60-3, 32,814
//! against 32,381, for one (see `restart_from_dive` in `lib.rs`).
//!
//! A forced dive ([`Forced`]) first places a job the plan leaves waiting (its class's candidate with
//! the most of it in the LP fixed to at least 1, after a row asking for one more job of its class),
//! then dives the same way: where the LP with that job placed is not above the plan's weight, no
//! plan that places it is heavier, and there is no dive. Another start again: on split-100-2 the
//! searches from one reach 47,480 where every other start stops at 47,315.

use std::time::Instant;

use crate::milp::Model;
use crate::model::{Instance, Sol};

/// Tolerance on integrality and on the rows.
const TOL: f64 = 1e-6;

/// Fixes at most, after which the integer variables still fractional are rounded down (always
/// within the rows) and the searches fill what that leaves: a fix costs about 0.4 ms on the
/// 300-job split problems (10,000-12,500 variables), which took 2,900-3,600 fixes to end. From
/// the cut dives, the searches reached plans heavier than from the whole ones on 9 of the 35
/// 300-job problems and lighter on 4 (by at most 0.22 %).
const MAX_FIXES: usize = 400;

/// How far towards its ceiling a variable must be for a dive to fix it there, per dive: two dives
/// on small problems (see `restart_from_dive` in `lib.rs`), the first alone on larger ones. The
/// paths differ, and each finds plans the other misses.
pub(crate) const UP_FROM: [f64; 2] = [0.5, 0.7];

/// Variables above which there is no dive: the root LP of a 12,500-variable model took 0.8 s.
const MAX_VARIABLES: usize = 16_000;

/// The plans of one dive per threshold in `up_from` (how far a variable must be towards its
/// ceiling to be fixed there; see the module's doc), the dives side by side: none when the model
/// is too large, and none for a dive the time limit stops or microlp fails (its numerics panic
/// instead of answering wrongly: caught).
pub(crate) fn dives(inst: &Instance, up_from: &[f64], deadline: Option<Instant>) -> Vec<Sol> {
    let Some(m) = model(inst) else { return Vec::new() };
    // Side by side: each dive is its own sequence of LPs on the same model.
    let dived = crate::parallel::par_map(up_from, crate::parallel::cores(), |&up| {
        let d = dive(inst, &m, up, None, deadline)?;
        crate::trace(|| {
            format!("dive from {up}: {} at an LP point of {:.1} (finished: {})", d.plan.weight(inst), d.end, d.finished)
        });
        Some(d.plan)
    });
    dived.into_iter().flatten().collect()
}

/// Dives that each start by placing a job `plan` leaves waiting ([`Forced::dive`]): other starts
/// for the searches, where the LP's own arrangement of the jobs (what [`dives`] follow) is one the
/// searches already came from.
pub(crate) struct Forced {
    model: Model,
}

impl Forced {
    /// `None` where the model is too large for a dive.
    pub fn new(inst: &Instance) -> Option<Forced> {
        model(inst).map(|model| Forced { model })
    }

    /// The plan of a dive (from [`UP_FROM`]'s first threshold) on the model with one more job of
    /// `job`'s class placed than `plan` places, that job's candidate with the most of it in the LP
    /// fixed first. `None` when `job` is a split job or has no candidate, when the LP with it placed
    /// is not above `above` (no plan that places it is heavier: its weight bounds them), or when
    /// the dive fails as in [`dives`].
    pub fn dive(&self, inst: &Instance, plan: &Sol, job: usize, above: f64, deadline: Option<Instant>) -> Option<Sol> {
        let row = self.model.one_more_placed(inst, plan, job)?;
        let vars: Vec<usize> = row.terms.iter().map(|&(v, _)| v).collect();
        // A model of its own: dives for other jobs run beside this one.
        let mut model = self.model.clone();
        model.rows.push(row);
        let d = dive(inst, &model, UP_FROM[0], Some(Force { vars: &vars, above }), deadline)?;
        crate::trace(|| format!("forced dive: {} at an LP point of {:.1}", d.plan.weight(inst), d.end));
        Some(d.plan)
    }
}

fn model(inst: &Instance) -> Option<Model> {
    let m = Model::new(inst);
    (!m.is_empty() && m.vars.len() <= MAX_VARIABLES).then_some(m)
}

/// [`run`] with microlp's panics caught.
fn dive(inst: &Instance, m: &Model, up_from: f64, force: Option<Force>, deadline: Option<Instant>) -> Option<Dive> {
    std::panic::catch_unwind(|| run(inst, m, up_from, force, deadline)).ok().flatten()
}

/// A dive's first fix: one of `vars` (a class's candidates, which the model's last row asks to
/// place one more job of) to at least 1, taken only when the LP is above `above`.
#[derive(Clone, Copy)]
struct Force<'a> {
    vars: &'a [usize],
    above: f64,
}

/// Where a dive ended: the plan, the LP's weight at its last point, and whether every integer
/// variable was fixed or integral there (else the fractional ones were rounded down).
struct Dive {
    plan: Sol,
    end: f64,
    finished: bool,
}

fn run(inst: &Instance, m: &Model, up_from: f64, force: Option<Force>, deadline: Option<Instant>) -> Option<Dive> {
    let started = Instant::now();
    let max: Vec<f64> = m.vars.iter().map(|v| v.max).collect();
    let (p, vars) = crate::reduced_cost::lp(&m.weight, &vec![0.0; max.len()], &max, true, &m.rows);
    // Per variable, its rows and coefficients: whether a fix to the ceiling leaves the rows
    // feasible is read off what the fixed variables already take of them.
    let mut var_rows: Vec<Vec<(usize, f64)>> = vec![Vec::new(); m.vars.len()];
    for (r, row) in m.rows.iter().enumerate() {
        for &(v, a) in &row.terms {
            var_rows[v].push((r, a));
        }
    }
    let options = crate::reduced_cost::lp_options(deadline)?;
    let mut sol = p.solve_with(options).ok()?.into_solution().ok()?;
    let root = sol.objective();
    let mut fixed = vec![false; m.vars.len()];
    let mut taken = vec![0.0; m.rows.len()];
    let mut fixes = 0;
    // Every row is "non-negative terms ≤ right-hand side" but a split job's "GPUs ≤ GPUs per VM ×
    // VMs", which its GPUs meet at 0, and a forced job's row, which its first fix meets where no
    // job of its class was placed (else a later fix may leave it unmet: the re-solve fails and so
    // does that dive): with the unfixed variables at 0 the rows hold as long as the fixed ones'
    // terms fit, so checking those keeps every re-solve feasible.
    let fits = |taken: &[f64], v: usize, value: f64| {
        var_rows[v].iter().all(|&(r, a)| a <= 0.0 || taken[r] + a * value <= m.rows[r].rhs + TOL)
    };
    if let Some(force) = force {
        if root < force.above + 0.5 {
            crate::trace(|| format!("forced dive: the LP's {root:.1} is not above {}", force.above));
            return None;
        }
        // The candidate the LP puts most of the job on, of those the rows hold it on alone.
        let value = |v: usize| (sol.var_value_raw(vars[v]) - TOL).ceil().max(1.0);
        let x = |v: usize| sol.var_value_raw(vars[v]);
        let on = force.vars.iter().copied().filter(|&v| fits(&taken, v, value(v)));
        let v = on.max_by(|&a, &b| x(a).total_cmp(&x(b)).then(b.cmp(&a)))?;
        let value = value(v);
        fixed[v] = true;
        for &(r, a) in &var_rows[v] {
            taken[r] += a * value;
        }
        fixes += 1;
        sol = sol.fix_var(vars[v], value).ok()?.into_solution().ok()?;
    }
    let mut finished = false;
    while fixes < MAX_FIXES {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return None;
        }
        let mut up: Option<(usize, f64)> = None;
        let mut down: Option<(usize, f64)> = None;
        for (v, var) in m.vars.iter().enumerate() {
            if !var.integer || fixed[v] {
                continue;
            }
            let x = sol.var_value_raw(vars[v]);
            let f = x - x.floor();
            if !(TOL..=1.0 - TOL).contains(&f) {
                continue;
            }
            if fits(&taken, v, x.ceil()) && up.is_none_or(|(_, g)| f > g) {
                up = Some((v, f));
            }
            if down.is_none_or(|(_, g)| f < g) {
                down = Some((v, f));
            }
        }
        let (v, value) = match (up, down) {
            (Some((v, f)), _) if f >= up_from || down.is_none_or(|(_, g)| g >= 1.0 - f) => {
                (v, sol.var_value_raw(vars[v]).ceil())
            }
            (_, Some((v, _))) => (v, sol.var_value_raw(vars[v]).floor()),
            _ => {
                finished = true;
                break;
            }
        };
        fixed[v] = true;
        for &(r, a) in &var_rows[v] {
            taken[r] += a * value;
        }
        fixes += 1;
        sol = sol.fix_var(vars[v], value).ok()?.into_solution().ok()?;
    }
    let values: Vec<f64> = vars
        .iter()
        .zip(&m.vars)
        .map(|(&v, var)| {
            let x = sol.var_value_raw(v);
            if var.integer { (x + TOL).floor() } else { x }
        })
        .collect();
    let plan = m.replay(inst, &values);
    let end = sol.objective();
    crate::trace(|| {
        let ms = started.elapsed().as_secs_f64() * 1e3;
        format!("dive: root {root:.1}, {fixes} fixes, end {end:.1}, plan {} in {ms:.0} ms", plan.weight(inst))
    });
    Some(Dive { plan, end, finished })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::{DiverseParams, GenParams, diverse, generate};

    /// Every fix kept the rows feasible: where the dive finishes, its last LP point is integral and
    /// the plan replayed from it places at least the LP's weight (a fix the rows could not hold
    /// would have failed the re-solve, or left the replay unable to place what the LP placed; the
    /// replay then fills what the point leaves waiting), and the plan passes the independent
    /// check. On gang-only problems (`diverse`) and ones with split jobs (`generate`).
    #[test]
    fn a_finished_dive_replays_as_the_feasible_plan_of_its_lp_point() {
        let mut problems: Vec<_> =
            (1..=4).map(|seed| diverse(&DiverseParams::new(30 + 10 * seed as usize, seed))).collect();
        problems.extend(
            (1..=4).map(|seed| generate(&GenParams { jobs: 30, regions: 2, sizes: 12, quota_fraction: 0.5, seed })),
        );
        let mut finished = 0;
        for (i, p) in problems.iter().enumerate() {
            let inst = Instance::new(p);
            let m = Model::new(&inst);
            let d = run(&inst, &m, UP_FROM[0], None, None).expect("a small model dives");
            let plan = crate::finish(&inst, &d.plan, "dive", &[], Instant::now());
            crate::check::check(p, &plan).unwrap_or_else(|e| panic!("problem {i}: {e:?}"));
            if d.finished {
                finished += 1;
                let w = d.plan.weight(&inst);
                assert!(w >= d.end - 1e-3 * d.end.max(1.0), "problem {i}: plan {w}, LP point {}", d.end);
            }
        }
        assert!(finished >= 6, "only {finished} of 8 dives finished within the fixes");
    }

    /// A forced dive places a job of the class it was asked to, one the plain dive leaves waiting,
    /// in a plan the independent check passes; and none is made where the LP with that job placed
    /// is not above the bar.
    #[test]
    fn a_forced_dive_places_a_job_the_plain_dive_leaves_waiting() {
        let mut forced_in = 0;
        for seed in 1..=4 {
            let p = diverse(&DiverseParams::new(60, seed));
            let inst = Instance::new(&p);
            let plain = &dives(&inst, &UP_FROM[..1], None)[0];
            let waiting = |c: &&crate::model::Class| {
                !c.cands.is_empty() && !plain.assigns.iter().any(|a| c.jobs.contains(&a.job))
            };
            let forced = Forced::new(&inst).expect("a small model");
            for class in inst.classes.iter().filter(waiting).take(3) {
                let j = class.rep;
                let Some(plan) = forced.dive(&inst, plain, j, 0.0, None) else { continue };
                assert!(plan.assigns.iter().any(|a| class.jobs.contains(&a.job)), "seed {seed}: job {j} not placed");
                let checked = crate::finish(&inst, &plan, "dive", &[], Instant::now());
                crate::check::check(&p, &checked).unwrap_or_else(|e| panic!("seed {seed}, job {j}: {e:?}"));
                assert!(forced.dive(&inst, plain, j, 1e12, None).is_none(), "seed {seed}: no LP reaches 1e12");
                forced_in += 1;
            }
        }
        assert!(forced_in >= 6, "only {forced_in} jobs forced in");
    }
}
