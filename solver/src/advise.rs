//! Quota advice on a placement problem: which quota pools keep waiting work from being placed, and
//! the smallest grant-sized increases that would place more of it, each confirmed by solving again.
//!
//! Every number comes from the solver itself, run on the problem with some pool rows changed: the
//! perturbation form of the pool rows' shadow prices. An LP dual is only a slope at the LP optimum
//! (and gang jobs are integral: a pool may have a zero dual up to the 96th vCPU and then place an
//! 8-GPU job at once); re-solving measures what an increase really buys.
//!
//! 1. Solve the problem as given: the *base* plan.
//! 2. **Options**: for each job not placed in full, each offer it matches whose static limits
//!    (capacity, price cap, budget) allow it but whose quota pools, after what the plan uses, do not.
//!    An option is a set of pools to raise together: the binding pools of that offer, and all of its
//!    pools (a regular VM draws from its family pool *and* `cores`, so an increase may need both;
//!    a spot VM draws from `lowPriorityCores` only).
//! 3. **Benefit** of an option: solve with its pools opened up to what the waiting work could use;
//!    the placed weight (Σ priority × GPUs) beyond the current plan is what it can buy. Then
//!    **minimal**: per pool, the fewest grant steps that keep that benefit (binary search, a solve
//!    per probe). The grant step of a pool is [`grant_steps`]: the greatest common divisor of the
//!    vCPUs of the sizes the waiting work could use from it (or [`AdviseOptions::step_vcpus`]).
//! 4. **Greedy ranking**: the option that buys the most weight (then the smaller increase, then the
//!    lower cost) is recommended and applied, and the search repeats from the new plan. Options that
//!    would have bought at least half as much at that step, on pools no recommendation touches, are
//!    its alternatives ("or +96 vCPUs of this family in westus3").
//! 5. **Confirmation**: the problem is solved again with every recommended increase applied. An
//!    increase the confirming plan does not use is dropped; each is then lowered step by step while
//!    the confirming plan keeps its weight; what each recommendation buys is re-measured by applying
//!    them in rank order (so the benefits add up to the confirming plan's), and one that buys nothing
//!    any more is dropped.
//!
//! Cost: every step is solves of the whole problem, so the advice takes hundreds of times a plan's
//! time. Each quota vector is solved once (the confirmation and the report come back to vectors
//! the search solved), the confirmation starts each increase's lowering from what its plan draws
//! (one solve where a bisection from zero takes one per halving), and the options of a step are
//! screened and minimised on as many threads as the machine has cores: the result is the same on
//! any number of them (BENCHMARKS.md, "Quota advice on plan problems").

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::model::{EPS, gang_vms, mismatch, run_cost};
use crate::parallel::{cores, par_map};
use crate::priority::Priority;
use crate::problem::{Problem, QuotaLimit, normalize_pool};
use crate::quota_pools::QuotaPool;
use crate::{Plan, SolveOptions, solve};

/// Placed weight is a sum of integers: differences below this are rounding.
const WEIGHT_EPS: f64 = 0.5;

/// How to advise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdviseOptions {
    /// At most this many recommendations.
    pub max_recommendations: usize,
    /// At most this many alternatives per recommendation.
    pub max_alternatives: usize,
    /// The grant step in vCPUs for every pool; `None`: per pool, [`grant_steps`].
    pub step_vcpus: Option<u64>,
    /// How each (re-)solve is made.
    pub solve: SolveOptions,
}

impl Default for AdviseOptions {
    fn default() -> Self {
        AdviseOptions { max_recommendations: 5, max_alternatives: 2, step_vcpus: None, solve: SolveOptions::default() }
    }
}

/// The advice: ranked recommendations, and the plan before and after all of them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Advice {
    /// Best first; empty when no quota increase would place more work.
    pub recommendations: Vec<Recommendation>,
    /// The plan as the problem stands.
    pub before: PlanSummary,
    /// The confirming plan: every recommended increase applied.
    pub after: PlanSummary,
    /// Distinct solves made (the base plan, options, probes and confirmation).
    pub solves: u32,
}

/// What a plan places and leaves waiting.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PlanSummary {
    /// Σ priority × placed GPUs.
    pub placed_weight: f64,
    /// GPUs placed.
    pub placed_gpus: u64,
    /// GPU-hours placed (placed GPUs × each job's duration).
    pub placed_gpu_hours: f64,
    /// GPU-hours left waiting.
    pub waiting_gpu_hours: f64,
    /// Jobs not placed in full.
    pub waiting_jobs: usize,
    /// Expected cost of the placements (USD).
    pub expected_cost: f64,
    /// Expected USD per placed GPU-hour; `None` when nothing is placed.
    pub cost_per_gpu_hour: Option<f64>,
}

/// One recommendation: pools of one region to raise together, and what that buys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Recommendation {
    /// 1 = best.
    pub rank: u32,
    /// The region of every increase in it.
    pub region: String,
    /// One per pool (a regular VM may need its family and `cores` raised together).
    pub increases: Vec<PoolIncrease>,
    /// What it buys on top of the recommendations ranked before it.
    pub buys: Benefit,
    /// Other increases that would have bought at least half as much instead.
    pub alternatives: Vec<Alternative>,
}

/// One pool raised.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PoolIncrease {
    /// Region.
    pub region: String,
    /// `cores`, `lowPriorityCores` or a family, spelled as the problem spells it.
    pub pool: String,
    /// The limit before this increase (after the increases ranked before it on the same pool).
    pub current_limit: u64,
    /// vCPUs free before this increase.
    pub free_vcpus: u64,
    /// vCPUs asked for: a whole number of grant steps.
    pub increase_vcpus: u64,
    /// `current_limit + increase_vcpus`.
    pub new_limit: u64,
    /// The grant step, vCPUs.
    pub step_vcpus: u64,
    /// vCPUs of the increase the confirming plan uses (> 0, or the increase would have been dropped).
    pub used_vcpus: u64,
}

/// What an increase buys: work placed that would otherwise wait, and what it costs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Benefit {
    /// Placed weight gained (Σ priority × GPUs).
    pub placed_weight: f64,
    /// GPUs placed that would wait.
    pub gpus: u64,
    /// GPU-hours placed that would wait.
    pub gpu_hours: f64,
    /// Jobs placed (or placed further) thanks to it.
    pub jobs: Vec<String>,
    /// Change of the plan's expected cost (USD): mostly the work it places, plus work it moves.
    pub cost_change_usd: f64,
    /// Expected USD per GPU-hour of the work it places.
    pub cost_per_gpu_hour: Option<f64>,
    /// Jobs the re-solved plan moves to another region to make room.
    pub moves: Vec<Move>,
    /// Plain-language caveats, e.g. that it moves work to a pricier region.
    pub notes: Vec<String>,
}

/// A job the re-solved plan places in another region than before.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Move {
    /// The job.
    pub job: String,
    /// Where it was planned.
    pub from: String,
    /// Where it is planned now.
    pub to: String,
    /// Change of its expected cost (USD).
    pub cost_change_usd: f64,
}

/// An increase that would have bought at least half as much as the recommendation, instead of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Alternative {
    /// Region.
    pub region: String,
    /// The pools and increases.
    pub increases: Vec<PoolIncrease>,
    /// Placed weight it would gain instead.
    pub placed_weight: f64,
    /// GPU-hours it would place instead.
    pub gpu_hours: f64,
    /// Change of the expected cost (USD).
    pub cost_change_usd: f64,
}

impl Advice {
    /// True when no quota increase would place more work.
    pub fn is_empty(&self) -> bool {
        self.recommendations.is_empty()
    }

    /// The requests to file: one per pool, with the final new limit (the sum of every
    /// recommendation's increase on it), in the order the pools first appear in the ranking.
    pub fn requests(&self) -> Vec<PoolIncrease> {
        let mut out: Vec<PoolIncrease> = Vec::new();
        for inc in self.recommendations.iter().flat_map(|r| &r.increases) {
            match out
                .iter_mut()
                .find(|o| o.region == inc.region && normalize_pool(&o.pool) == normalize_pool(&inc.pool))
            {
                Some(o) => {
                    o.increase_vcpus += inc.increase_vcpus;
                    o.new_limit = o.current_limit + o.increase_vcpus;
                    o.used_vcpus += inc.used_vcpus;
                }
                None => out.push(inc.clone()),
            }
        }
        out
    }
}

/// Advises quota increases for `problem`. `in_use` lists the vCPUs already used per pool (a problem
/// lists *free* vCPUs; limits are free + in use); pools it does not list have none in use.
pub fn advise(problem: &Problem, in_use: &[QuotaLimit], options: &AdviseOptions) -> Advice {
    Advisor::new(problem, in_use, options).run()
}

/// The fewest grant steps in `0..=most` for which `holds` (the weight is kept), by bisection: the
/// weight is taken to grow with the steps, and `holds(most)` to be true.
fn fewest_steps(most: u64, mut holds: impl FnMut(u64) -> bool) -> u64 {
    let (mut lo, mut hi) = (0u64, most);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if holds(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    hi
}

/// The grant step of each quota row of `problem`, in vCPUs: the greatest common divisor of the
/// vCPUs per VM of the sizes that draw on the pool and that some job of the problem could use
/// (every size drawing on it when no job could use any; 1 when no size draws on it).
///
/// Why the gcd: `Microsoft.Quota` grants compute limits in whole vCPUs (`unit: "Count"`), so
/// any step is grantable; what matters is which increases can be *used*. A mix of VMs draws a sum
/// of their vCPUs, always a multiple of the gcd, and every large enough multiple of it is such a
/// sum: stepping by the gcd never asks for vCPUs no VM mix fills. The smallest size's vCPUs (the
/// earlier rule) over-asks when sizes do not divide each other (a 6-vCPU and a 4-vCPU size: a
/// step of 4 asks 8 for one 6-vCPU VM, the gcd asks 6), and the largest size or the lcm over-asks
/// whenever a smaller VM would do (24 vCPUs of an NC A100 v4 family place one 1-GPU VM; a step of
/// 96 asks four times that).
pub fn grant_steps(problem: &Problem) -> Vec<u64> {
    let rows: BTreeMap<(String, String), usize> =
        problem.quotas.iter().enumerate().map(|(i, q)| ((q.region.clone(), normalize_pool(&q.pool)), i)).collect();
    grant_steps_of(problem, &offer_pools(problem, &rows))
}

/// The quota rows (indices into `problem.quotas`, found in `rows` by region and normalised pool
/// name) each offer's VMs draw from.
fn offer_pools(problem: &Problem, rows: &BTreeMap<(String, String), usize>) -> Vec<Vec<usize>> {
    problem
        .offers
        .iter()
        .map(|o| {
            QuotaPool::keys_drawn_by(o.priority, &o.family)
                .into_iter()
                .filter_map(|n| rows.get(&(o.region.clone(), n)).copied())
                .collect()
        })
        .collect()
}

fn grant_steps_of(problem: &Problem, offer_pools: &[Vec<usize>]) -> Vec<u64> {
    let gcd = |mut a: u64, mut b: u64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    // 0 = no size seen yet (gcd(0, x) = x).
    let (mut usable, mut any) = (vec![0u64; problem.quotas.len()], vec![0u64; problem.quotas.len()]);
    for (o, offer) in problem.offers.iter().enumerate() {
        let vcpus = u64::from(offer.vcpus_per_vm);
        let used = problem.jobs.iter().any(|j| mismatch(j, offer).is_none());
        for &q in &offer_pools[o] {
            any[q] = gcd(any[q], vcpus);
            if used {
                usable[q] = gcd(usable[q], vcpus);
            }
        }
    }
    usable.iter().zip(&any).map(|(&u, &a)| if u > 0 { u } else { a.max(1) }).collect()
}

/// The quota rows (indices into `problem.quotas`) that keep waiting work from being placed in
/// `plan`: a job not placed in full has an offer it matches, that its capacity, price cap and
/// budget allow, but that one of these pools cannot fit one more of its VMs (a whole gang for a
/// gang job) after what the plan uses. The same test the advice starts from; the control loop
/// watches it to say when quota, not capacity, holds work back. Each row comes with the ids of the
/// jobs it keeps out, in problem order.
pub fn blocking_pools(problem: &Problem, plan: &Plan) -> Vec<(usize, Vec<String>)> {
    let options = AdviseOptions { step_vcpus: Some(1), ..AdviseOptions::default() };
    let a = Advisor::new(problem, &[], &options);
    let used = a.usage(plan);
    let mut out: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    for (j, remaining) in a.waiting(plan) {
        for o in 0..problem.offers.len() {
            for q in a.binding(j, remaining, o, &a.base_free, &used).into_iter().flatten() {
                out.entry(q).or_default().insert(j);
            }
        }
    }
    out.into_iter().map(|(q, jobs)| (q, jobs.into_iter().map(|j| problem.jobs[j].id.clone()).collect())).collect()
}

/// The pools a recommendation raises and by how many vCPUs.
type Levels = Vec<(usize, u64)>;

/// An evaluated option.
#[derive(Clone, Debug)]
struct Eval {
    levels: Levels,
    plan: Plan,
    gain: f64,
}

impl Eval {
    fn total(&self) -> u64 {
        self.levels.iter().map(|l| l.1).sum()
    }
}

struct Advisor<'a> {
    problem: &'a Problem,
    options: &'a AdviseOptions,
    /// Free vCPUs per quota row as given.
    base_free: Vec<u64>,
    /// vCPUs in use per quota row (limit = free + in use).
    in_use: Vec<u64>,
    /// Quota rows each offer draws from.
    offer_pools: Vec<Vec<usize>>,
    /// Offer index by (region, size, priority).
    offer_index: BTreeMap<(&'a str, &'a str, Priority), usize>,
    /// Job index by id.
    job_index: BTreeMap<&'a str, usize>,
    /// Grant step per quota row.
    step: Vec<u64>,
    /// Plans made so far, by free vCPUs per quota row.
    solved: Mutex<BTreeMap<Vec<u64>, Plan>>,
    /// Distinct quota vectors solved (a vector two threads solved at once counts once, so the
    /// count does not depend on the threads' timing).
    solves: AtomicU32,
}

impl<'a> Advisor<'a> {
    fn new(problem: &'a Problem, in_use: &[QuotaLimit], options: &'a AdviseOptions) -> Advisor<'a> {
        let key = |region: &str, pool: &str| (region.to_string(), normalize_pool(pool));
        let rows: BTreeMap<(String, String), usize> =
            problem.quotas.iter().enumerate().map(|(i, q)| (key(&q.region, &q.pool), i)).collect();
        let mut used = vec![0; problem.quotas.len()];
        for u in in_use {
            if let Some(&i) = rows.get(&key(&u.region, &u.pool)) {
                used[i] = u.vcpus;
            }
        }
        let offer_pools = offer_pools(problem, &rows);
        let step = match options.step_vcpus {
            Some(s) => vec![s.max(1); problem.quotas.len()],
            None => grant_steps_of(problem, &offer_pools),
        };
        Advisor {
            problem,
            options,
            base_free: problem.quotas.iter().map(|q| q.vcpus).collect(),
            in_use: used,
            offer_pools,
            offer_index: problem
                .offers
                .iter()
                .enumerate()
                .map(|(i, o)| ((o.region.as_str(), o.size.as_str(), o.priority), i))
                .collect(),
            job_index: problem.jobs.iter().enumerate().map(|(i, j)| (j.id.as_str(), i)).collect(),
            step,
            solved: Mutex::new(BTreeMap::new()),
            solves: AtomicU32::new(0),
        }
    }

    /// The plan with `free` vCPUs per quota row. Each is solved once: the probes, the confirmation
    /// and the report come back to the same quota (the plan with every increase, each rank's, a
    /// bisection's midpoints), and a plan is a function of its problem.
    fn solve_with(&self, free: &[u64]) -> Plan {
        if let Some(plan) = self.known(free) {
            return plan;
        }
        let mut p = self.problem.clone();
        for (q, f) in p.quotas.iter_mut().zip(free) {
            q.vcpus = *f;
        }
        let plan = solve(&p, &self.options.solve);
        // A plan is a function of its problem: a thread that solved the same vector meanwhile
        // made the same plan.
        let mut solved = self.solved.lock().unwrap_or_else(PoisonError::into_inner);
        if solved.insert(free.to_vec(), plan.clone()).is_none() {
            self.solves.fetch_add(1, Ordering::Relaxed);
        }
        plan
    }

    fn known(&self, free: &[u64]) -> Option<Plan> {
        self.solved.lock().unwrap_or_else(PoisonError::into_inner).get(free).cloned()
    }

    fn free_with(&self, levels: &[&Levels]) -> Vec<u64> {
        let mut free = self.base_free.clone();
        for l in levels {
            for &(q, inc) in l.iter() {
                free[q] = free[q].saturating_add(inc);
            }
        }
        free
    }

    /// vCPUs a plan uses per quota row.
    fn usage(&self, plan: &Plan) -> Vec<u64> {
        let mut used = vec![0u64; self.base_free.len()];
        for p in &plan.placements {
            if let Some(&o) = self.offer_index.get(&(p.region.as_str(), p.size.as_str(), p.priority)) {
                for &q in &self.offer_pools[o] {
                    used[q] += u64::from(p.vms) * u64::from(self.problem.offers[o].vcpus_per_vm);
                }
            }
        }
        used
    }

    /// GPUs placed per job.
    fn placed(&self, plan: &Plan) -> Vec<u32> {
        let mut g = vec![0u32; self.problem.jobs.len()];
        for p in &plan.placements {
            if let Some(&j) = self.job_index.get(p.job.as_str()) {
                g[j] += p.gpus;
            }
        }
        g
    }

    fn run(&self) -> Advice {
        let base_plan = self.solve_with(&self.base_free.clone());
        let mut chosen: Vec<(Levels, Vec<Eval>)> = Vec::new();
        let mut plan = base_plan.clone();
        while chosen.len() < self.options.max_recommendations {
            let applied: Vec<&Levels> = chosen.iter().map(|c| &c.0).collect();
            let free = self.free_with(&applied);
            let options = self.options_for(&plan, &free);
            // Screen every option with its pools wide open (one solve each), then minimise only the
            // most promising: the best and enough others to name alternatives.
            // Each option's screen and minimisation is independent of the others': on a machine
            // with cores to spare they run at once (the result does not depend on it).
            let screens = par_map(&options, cores(), |o| self.screen(o, &free, &plan));
            let mut screened: Vec<(Vec<usize>, Plan)> =
                options.into_iter().zip(screens).filter_map(|(o, p)| p.map(|p| (o, p))).collect();
            screened.sort_by(|a, b| b.1.placed_weight.total_cmp(&a.1.placed_weight).then(a.0.cmp(&b.0)));
            screened.truncate(self.options.max_alternatives + 2);
            let mut evals: Vec<Eval> =
                par_map(&screened, cores(), |(option, relaxed)| self.minimize(option, &free, &plan, relaxed))
                    .into_iter()
                    .flatten()
                    .collect();
            if evals.is_empty() {
                break;
            }
            evals.sort_by(|a, b| {
                b.gain
                    .total_cmp(&a.gain)
                    .then(a.total().cmp(&b.total()))
                    .then(a.plan.expected_cost.total_cmp(&b.plan.expected_cost))
                    .then(a.levels.cmp(&b.levels))
            });
            evals.dedup_by(|a, b| a.levels == b.levels);
            let best = evals.remove(0);
            let alternatives: Vec<Eval> =
                evals.into_iter().filter(|e| e.gain >= best.gain * 0.5 - WEIGHT_EPS && e.gain > WEIGHT_EPS).collect();
            plan = best.plan.clone();
            chosen.push((best.levels, alternatives));
        }
        let chosen = self.confirm(chosen);
        self.report(base_plan, chosen)
    }

    /// Waiting work's remaining GPUs per job.
    fn waiting(&self, plan: &Plan) -> Vec<(usize, u32)> {
        let placed = self.placed(plan);
        self.problem
            .jobs
            .iter()
            .enumerate()
            .filter(|(j, job)| placed[*j] < job.gpus)
            .map(|(j, job)| (j, job.gpus - placed[j]))
            .collect()
    }

    /// VMs and vCPUs a job's remaining GPUs need on an offer, if only quota stands in the way.
    fn need(&self, j: usize, remaining: u32, o: usize) -> Option<(u32, u64)> {
        let job = &self.problem.jobs[j];
        let offer = &self.problem.offers[o];
        if mismatch(job, offer).is_some() {
            return None;
        }
        let vms = if job.gang { gang_vms(job, offer) } else { 1 };
        let static_ok = offer.capacity_vms.is_none_or(|c| c >= vms)
            && job.max_price_per_hour.is_none_or(|cap| f64::from(vms) * offer.price_per_hour <= cap + EPS)
            && job.budget.is_none_or(|b| run_cost(job, offer, vms) <= b + EPS);
        if !static_ok {
            return None;
        }
        let all = if job.gang { vms } else { remaining.div_ceil(offer.gpus_per_vm) };
        Some((vms, u64::from(all) * u64::from(offer.vcpus_per_vm)))
    }

    /// The pools of offer `o` too full (`free` minus `used`) for one more VM of job `j` (its whole
    /// gang, for a gang job), when only quota keeps the job off the offer; `None` when something
    /// else does, or no pool binds.
    fn binding(&self, j: usize, remaining: u32, o: usize, free: &[u64], used: &[u64]) -> Option<Vec<usize>> {
        let (vms, _) = self.need(j, remaining, o)?;
        let need = u64::from(vms) * u64::from(self.problem.offers[o].vcpus_per_vm);
        let binding: Vec<usize> =
            self.offer_pools[o].iter().copied().filter(|&q| free[q].saturating_sub(used[q]) < need).collect();
        (!binding.is_empty()).then_some(binding)
    }

    /// The sets of pools that, raised together, could let some waiting job onto some offer.
    fn options_for(&self, plan: &Plan, free: &[u64]) -> Vec<Vec<usize>> {
        let used = self.usage(plan);
        let mut out: BTreeSet<Vec<usize>> = BTreeSet::new();
        for (j, remaining) in self.waiting(plan) {
            for o in 0..self.problem.offers.len() {
                let Some(binding) = self.binding(j, remaining, o, free, &used) else { continue };
                let mut all = self.offer_pools[o].clone();
                all.sort_unstable();
                out.insert(binding);
                out.insert(all);
            }
        }
        out.into_iter().collect()
    }

    /// How far each pool could usefully grow: what every waiting job could draw from it at most.
    fn caps(&self, plan: &Plan) -> Vec<u64> {
        let mut cap = vec![0u64; self.base_free.len()];
        for (j, remaining) in self.waiting(plan) {
            let mut best: BTreeMap<usize, u64> = BTreeMap::new();
            for o in 0..self.problem.offers.len() {
                if let Some((_, vcpus)) = self.need(j, remaining, o) {
                    for &q in &self.offer_pools[o] {
                        let e = best.entry(q).or_default();
                        *e = (*e).max(vcpus);
                    }
                }
            }
            for (q, v) in best {
                cap[q] += v;
            }
        }
        cap
    }

    /// The plan with `option`'s pools opened up as far as waiting work could use them, if that
    /// places more than `plan`.
    fn screen(&self, option: &[usize], free: &[u64], plan: &Plan) -> Option<Plan> {
        let cap = self.caps(plan);
        if option.iter().any(|&q| cap[q] == 0) {
            return None;
        }
        let mut open = free.to_vec();
        for &q in option {
            open[q] = open[q].saturating_add(cap[q]);
        }
        let relaxed = self.solve_with(&open);
        (relaxed.placed_weight >= plan.placed_weight + WEIGHT_EPS).then_some(relaxed)
    }

    /// The smallest grant-sized increase of `option`'s pools that buys what `relaxed` (the screen's
    /// plan) placed beyond `plan`.
    fn minimize(&self, option: &[usize], free: &[u64], plan: &Plan, relaxed: &Plan) -> Option<Eval> {
        let cap = self.caps(plan);
        let weight = plan.placed_weight;
        let target = relaxed.placed_weight;
        let used = self.usage(relaxed);
        // Grant steps per pool: what the relaxed plan used beyond the free vCPUs, else the cap.
        let steps_of = |q: usize, v: u64, step: &[u64]| v.div_ceil(step[q]);
        let mut steps: Vec<u64> =
            option.iter().map(|&q| steps_of(q, used[q].saturating_sub(free[q]), &self.step)).collect();
        let probe = |a: &Advisor, steps: &[u64]| {
            let mut f = free.to_vec();
            for (i, &q) in option.iter().enumerate() {
                f[q] = f[q].saturating_add(steps[i] * a.step[q]);
            }
            a.solve_with(&f)
        };
        let mut at = probe(self, &steps);
        if at.placed_weight < target - WEIGHT_EPS {
            steps = option.iter().map(|&q| steps_of(q, cap[q], &self.step)).collect();
            at = probe(self, &steps);
            // The solver found the benefit only with the pools wide open; take what the grant
            // steps give if it is still a gain.
            if at.placed_weight < weight + WEIGHT_EPS {
                return None;
            }
        }
        let goal = at.placed_weight;
        // Smallest number of steps per pool that keeps the weight, the others held where they are.
        for i in 0..option.len() {
            steps[i] = fewest_steps(steps[i], |n| {
                let mut s = steps.clone();
                s[i] = n;
                probe(self, &s).placed_weight >= goal - WEIGHT_EPS
            });
        }
        // The plan at exactly the chosen steps (the last probe may have been a failing one).
        let final_plan = probe(self, &steps);
        let levels: Levels =
            option.iter().zip(&steps).filter(|(_, s)| **s > 0).map(|(&q, &s)| (q, s * self.step[q])).collect();
        if levels.is_empty() || final_plan.placed_weight < weight + WEIGHT_EPS {
            return None;
        }
        Some(Eval { gain: final_plan.placed_weight - weight, plan: final_plan, levels })
    }

    /// Confirms the chosen increases together: drops what the confirming plan does not use, lowers
    /// each while the weight holds, and drops recommendations that no longer buy anything.
    fn confirm(&self, mut chosen: Vec<(Levels, Vec<Eval>)>) -> Vec<(Levels, Vec<Eval>)> {
        for _ in 0..4 {
            let mut changed = false;
            let all: Vec<&Levels> = chosen.iter().map(|c| &c.0).collect();
            let free = self.free_with(&all);
            let plan = self.solve_with(&free);
            let goal = plan.placed_weight;
            let used = self.usage(&plan);
            // Unused: the confirming plan stays within the pool's limit before the increases.
            for c in chosen.iter_mut() {
                let before = c.0.len();
                c.0.retain(|&(q, _)| used[q] > self.base_free[q]);
                changed |= c.0.len() != before;
            }
            chosen.retain(|c| !c.0.is_empty());
            // Lowered step by step (largest first) while the confirming weight holds.
            let mut order: Vec<(usize, usize)> =
                chosen.iter().enumerate().flat_map(|(r, c)| (0..c.0.len()).map(move |i| (r, i))).collect();
            order.sort_by_key(|&(r, i)| std::cmp::Reverse(chosen[r].0[i].1));
            for (r, i) in order {
                let q = chosen[r].0[i].0;
                let step = self.step[q];
                let holds = |steps: u64| {
                    let mut trial = chosen.clone();
                    trial[r].0[i].1 = steps * step;
                    let levels: Vec<&Levels> = trial.iter().map(|c| &c.0).collect();
                    self.solve_with(&self.free_with(&levels)).placed_weight >= goal - WEIGHT_EPS
                };
                let mut hi = chosen[r].0[i].1 / step;
                // What the confirming plan draws from the pool beyond its free vCPUs with every
                // other increase is enough for that plan: one solve there first, and the bisection
                // below it, since the increases found one at a time are often larger than the
                // plan with all of them needs.
                let levels: Vec<&Levels> = chosen.iter().map(|c| &c.0).collect();
                let without = self.free_with(&levels)[q] - chosen[r].0[i].1;
                let drawn = used[q].saturating_sub(without).div_ceil(step);
                if drawn < hi && holds(drawn) {
                    hi = drawn;
                }
                let hi = fewest_steps(hi, holds);
                if hi * step != chosen[r].0[i].1 {
                    chosen[r].0[i].1 = hi * step;
                    changed = true;
                }
            }
            for c in chosen.iter_mut() {
                c.0.retain(|l| l.1 > 0);
            }
            chosen.retain(|c| !c.0.is_empty());
            // Each must still buy something on top of those ranked before it.
            let mut kept: Vec<(Levels, Vec<Eval>)> = Vec::new();
            let mut prev = self.solve_with(&self.base_free.clone()).placed_weight;
            for c in chosen.drain(..) {
                let mut levels: Vec<&Levels> = kept.iter().map(|k| &k.0).collect();
                levels.push(&c.0);
                let f = self.free_with(&levels);
                let w = self.solve_with(&f).placed_weight;
                if w >= prev + WEIGHT_EPS {
                    prev = w;
                    kept.push(c);
                } else {
                    changed = true;
                }
            }
            chosen = kept;
            if !changed {
                break;
            }
        }
        chosen
    }

    fn summary(&self, plan: &Plan) -> PlanSummary {
        let placed = self.placed(plan);
        let mut s = PlanSummary {
            placed_weight: plan.placed_weight,
            placed_gpus: 0,
            placed_gpu_hours: 0.0,
            waiting_gpu_hours: 0.0,
            waiting_jobs: 0,
            expected_cost: plan.expected_cost,
            cost_per_gpu_hour: None,
        };
        for (j, job) in self.problem.jobs.iter().enumerate() {
            s.placed_gpus += u64::from(placed[j]);
            s.placed_gpu_hours += f64::from(placed[j]) * job.duration_hours;
            s.waiting_gpu_hours += f64::from(job.gpus - placed[j].min(job.gpus)) * job.duration_hours;
            if placed[j] < job.gpus {
                s.waiting_jobs += 1;
            }
        }
        s.cost_per_gpu_hour = (s.placed_gpu_hours > 0.0).then(|| round6(plan.expected_cost / s.placed_gpu_hours));
        s.placed_gpu_hours = round6(s.placed_gpu_hours);
        s.waiting_gpu_hours = round6(s.waiting_gpu_hours);
        s
    }

    /// What `after` places beyond `before`.
    fn benefit(&self, before: &Plan, after: &Plan) -> Benefit {
        let (pb, pa) = (self.placed(before), self.placed(after));
        let mut b = Benefit {
            placed_weight: after.placed_weight - before.placed_weight,
            cost_change_usd: round6(after.expected_cost - before.expected_cost),
            ..Benefit::default()
        };
        let mut added_cost = 0.0;
        let job_cost = |plan: &Plan, id: &str| -> f64 {
            plan.placements.iter().filter(|p| p.job == id).map(|p| p.expected_cost).sum()
        };
        let regions = |plan: &Plan, id: &str| -> BTreeSet<String> {
            plan.placements.iter().filter(|p| p.job == id).map(|p| p.region.clone()).collect()
        };
        for (j, job) in self.problem.jobs.iter().enumerate() {
            if pa[j] > pb[j] {
                let more = pa[j] - pb[j];
                b.gpus += u64::from(more);
                b.gpu_hours += f64::from(more) * job.duration_hours;
                b.jobs.push(job.id.clone());
                // The cost of a job placed further, pro rata to the GPUs added.
                added_cost += (job_cost(after, &job.id) - job_cost(before, &job.id)).max(0.0);
            } else if pa[j] > 0 && pa[j] == pb[j] {
                let (rb, ra) = (regions(before, &job.id), regions(after, &job.id));
                if rb != ra {
                    let delta = round6(job_cost(after, &job.id) - job_cost(before, &job.id));
                    b.moves.push(Move {
                        job: job.id.clone(),
                        from: rb.into_iter().collect::<Vec<_>>().join("+"),
                        to: ra.into_iter().collect::<Vec<_>>().join("+"),
                        cost_change_usd: delta,
                    });
                }
            }
        }
        b.gpu_hours = round6(b.gpu_hours);
        b.cost_per_gpu_hour = (b.gpu_hours > 0.0).then(|| round6(added_cost / b.gpu_hours));
        let pricier: Vec<&Move> = b.moves.iter().filter(|m| m.cost_change_usd > 1e-6).collect();
        if !pricier.is_empty() {
            let list: Vec<String> = pricier
                .iter()
                .map(|m| format!("{} from {} to {} (+{:.2} USD)", m.job, m.from, m.to, m.cost_change_usd))
                .collect();
            b.notes.push(format!("moves work to a pricier region to make room: {}", list.join(", ")));
        }
        b
    }

    fn increases(&self, levels: &Levels, free: &[u64], used: &[u64]) -> Vec<PoolIncrease> {
        levels
            .iter()
            .map(|&(q, inc)| {
                let row = &self.problem.quotas[q];
                let limit = free[q] + self.in_use[q];
                PoolIncrease {
                    region: row.region.clone(),
                    pool: row.pool.clone(),
                    current_limit: limit,
                    free_vcpus: free[q],
                    increase_vcpus: inc,
                    new_limit: limit + inc,
                    step_vcpus: self.step[q],
                    used_vcpus: used[q].saturating_sub(free[q]).min(inc),
                }
            })
            .collect()
    }

    fn report(&self, base_plan: Plan, chosen: Vec<(Levels, Vec<Eval>)>) -> Advice {
        let all: Vec<&Levels> = chosen.iter().map(|c| &c.0).collect();
        let confirm = self.solve_with(&self.free_with(&all));
        let confirm_used = self.usage(&confirm);
        let touched: BTreeSet<usize> = chosen.iter().flat_map(|c| c.0.iter().map(|l| l.0)).collect();
        let mut recs = Vec::new();
        let mut prev = base_plan.clone();
        for (k, (levels, alts)) in chosen.iter().enumerate() {
            let applied: Vec<&Levels> = chosen[..k].iter().map(|c| &c.0).collect();
            let free = self.free_with(&applied);
            let mut upto = applied.clone();
            upto.push(levels);
            let plan = self.solve_with(&self.free_with(&upto));
            // What the confirming plan uses of this recommendation's share of each pool.
            let mut used = vec![0u64; free.len()];
            for &(q, _) in levels {
                used[q] = confirm_used[q];
            }
            let alternatives = alts
                .iter()
                .filter(|e| e.levels.iter().all(|l| !touched.contains(&l.0)))
                .take(self.options.max_alternatives)
                .map(|e| {
                    let ben = self.benefit(&prev, &e.plan);
                    Alternative {
                        region: self.problem.quotas[e.levels[0].0].region.clone(),
                        increases: self.increases(&e.levels, &free, &self.usage(&e.plan)),
                        placed_weight: e.gain,
                        gpu_hours: ben.gpu_hours,
                        cost_change_usd: ben.cost_change_usd,
                    }
                })
                .collect();
            recs.push(Recommendation {
                rank: (k + 1) as u32,
                region: self.problem.quotas[levels[0].0].region.clone(),
                increases: self.increases(levels, &free, &used),
                buys: self.benefit(&prev, &plan),
                alternatives,
            });
            prev = plan;
        }
        Advice {
            recommendations: recs,
            before: self.summary(&base_plan),
            after: self.summary(&confirm),
            solves: self.solves.load(Ordering::Relaxed),
        }
    }
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(quota: &str, jobs: &str) -> Problem {
        let text = format!(
            r#"{{"offers": [
              {{"region": "eastus", "size": "Standard_NC24ads_A100_v4", "priority": "regular", "gpu_model": "A100-80GB",
                "gpus_per_vm": 1, "vcpus_per_vm": 24, "family": "standardNCADSA100v4Family", "price_per_hour": 3.67}},
              {{"region": "westus3", "size": "Standard_NC24ads_A100_v4", "priority": "regular", "gpu_model": "A100-80GB",
                "gpus_per_vm": 1, "vcpus_per_vm": 24, "family": "standardNCADSA100v4Family", "price_per_hour": 4.10}}
            ], "quotas": [{quota}], "jobs": [{jobs}]}}"#
        );
        Problem::from_json_str(&text).expect("valid problem")
    }

    #[test]
    fn a_family_that_binds_gets_the_smallest_grant_sized_increase() {
        let p = problem(
            r#"{"region": "eastus", "pool": "standardNCADSA100v4Family", "vcpus": 48},
               {"region": "westus3", "pool": "standardNCADSA100v4Family", "vcpus": 0}"#,
            r#"{"id": "a", "gpus": 2, "duration_hours": 2}, {"id": "b", "gpus": 3, "duration_hours": 4, "regions": ["eastus"]}"#,
        );
        let advice = advise(&p, &[], &AdviseOptions::default());
        assert_eq!(advice.recommendations.len(), 1, "{advice:#?}");
        let r = &advice.recommendations[0];
        assert_eq!(r.region, "eastus");
        assert_eq!(r.increases.len(), 1);
        let inc = &r.increases[0];
        // b (3 GPUs) needs 72 vCPUs; a takes the 48 free in eastus or moves. With 72 more, b fits and
        // a keeps its place: the smallest step count that places both is 3 × 24.
        assert_eq!((inc.current_limit, inc.increase_vcpus, inc.new_limit, inc.step_vcpus), (48, 72, 120, 24));
        assert_eq!(r.buys.jobs, vec!["b".to_string()]);
        assert_eq!(r.buys.gpu_hours, 12.0);
        assert_eq!(advice.after.waiting_jobs, 0);
        assert!(inc.used_vcpus > 0);
    }

    #[test]
    fn nothing_binding_gives_no_advice() {
        let p = problem(
            r#"{"region": "eastus", "pool": "standardNCADSA100v4Family", "vcpus": 480}"#,
            r#"{"id": "a", "gpus": 2, "duration_hours": 2}"#,
        );
        let advice = advise(&p, &[], &AdviseOptions::default());
        assert!(advice.is_empty(), "{advice:#?}");
        assert_eq!(advice.before, advice.after);
    }

    #[test]
    fn a_regular_vm_may_need_its_family_and_cores_raised_together() {
        let p = problem(
            r#"{"region": "eastus", "pool": "standardNCADSA100v4Family", "vcpus": 0},
               {"region": "eastus", "pool": "cores", "vcpus": 24},
               {"region": "westus3", "pool": "standardNCADSA100v4Family", "vcpus": 0}"#,
            r#"{"id": "a", "gpus": 2, "duration_hours": 1, "regions": ["eastus"]}"#,
        );
        let advice = advise(&p, &[], &AdviseOptions::default());
        let r = &advice.recommendations[0];
        let pools: Vec<(&str, u64)> = r.increases.iter().map(|i| (i.pool.as_str(), i.increase_vcpus)).collect();
        assert_eq!(pools, vec![("standardNCADSA100v4Family", 48), ("cores", 24)], "{advice:#?}");
        assert_eq!(advice.requests().len(), 2);
    }

    #[test]
    fn the_grant_step_is_the_gcd_of_the_vcpus_of_the_sizes_the_waiting_work_could_use() {
        let offer = |size: &str, vcpus: u32, gpus: u32, model: &str| {
            format!(
                r#"{{"region": "eastus", "size": "{size}", "priority": "regular", "gpu_model": "{model}",
                   "gpus_per_vm": {gpus}, "vcpus_per_vm": {vcpus}, "family": "fam", "price_per_hour": 1.0}}"#
            )
        };
        let text = format!(
            r#"{{"offers": [{}, {}, {}],
                "quotas": [{{"region": "eastus", "pool": "fam", "vcpus": 0}}, {{"region": "eastus", "pool": "cores", "vcpus": 0}},
                           {{"region": "eastus", "pool": "otherFamily", "vcpus": 0}}],
                "jobs": [{{"id": "a", "gpus": 1, "duration_hours": 1, "gpu_models": ["T4"]}}]}}"#,
            offer("six", 6, 1, "T4"),
            offer("four", 4, 1, "T4"),
            offer("big", 96, 4, "A100-80GB")
        );
        let p = Problem::from_json_str(&text).unwrap();
        // The job can use the 6- and 4-vCPU sizes (not the A100): one of either is a multiple of 2;
        // the smallest size's 4 would ask 8 for one 6-vCPU VM. No size draws on otherFamily: 1.
        assert_eq!(grant_steps(&p), vec![2, 2, 1]);
        // No waiting job could use any size: every size drawing on the pool counts.
        let mut idle = p.clone();
        idle.jobs[0].gpu_models = vec!["H100".into()];
        assert_eq!(grant_steps(&idle), vec![2, 2, 1]);
        let mut a100 = p.clone();
        a100.jobs[0].gpu_models = vec!["A100-80GB".into()];
        assert_eq!(grant_steps(&a100), vec![96, 96, 1]);
        // The advice asks in those steps: one 6-vCPU VM is 6 vCPUs, not 8.
        let advice = advise(&p, &[], &AdviseOptions::default());
        let steps: Vec<(u64, u64)> =
            advice.recommendations[0].increases.iter().map(|i| (i.step_vcpus, i.increase_vcpus)).collect();
        assert!(steps.iter().all(|&(s, inc)| s == 2 && inc % 2 == 0 && inc <= 6), "{advice:#?}");
    }

    #[test]
    fn blocking_pools_are_those_that_keep_waiting_work_off_an_offer() {
        let p = problem(
            r#"{"region": "eastus", "pool": "standardNCADSA100v4Family", "vcpus": 48},
               {"region": "westus3", "pool": "standardNCADSA100v4Family", "vcpus": 0}"#,
            r#"{"id": "a", "gpus": 2, "duration_hours": 2}, {"id": "b", "gpus": 3, "duration_hours": 4, "regions": ["eastus"]}"#,
        );
        let plan = solve(&p, &SolveOptions::default());
        // b may only run in eastus, whose pool a fills: eastus binds; westus3 keeps nobody out.
        assert_eq!(blocking_pools(&p, &plan), vec![(0, vec!["b".to_string()])]);
        let loose = problem(
            r#"{"region": "eastus", "pool": "standardNCADSA100v4Family", "vcpus": 480}"#,
            r#"{"id": "a", "gpus": 2, "duration_hours": 2}"#,
        );
        assert!(blocking_pools(&loose, &solve(&loose, &SolveOptions::default())).is_empty());
    }
}
