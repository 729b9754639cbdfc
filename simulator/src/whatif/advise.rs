//! Quota advice for a what-if week: the quota increases that would have helped that week, found
//! from the week's own waiting work and confirmed by simulating the week again with them.
//!
//! 1. **Observe**: the week runs once under the `spillway` policy (the production control loop on
//!    the simulated cloud). Every `sample_every_ms` of virtual time the cloud's offers and quota are
//!    sampled, and the peak usage of every pool is tracked.
//! 2. **Snapshots**: at each sample with work waiting, the waiting jobs (by the run's own
//!    outcomes), the offers and the free quota make a plan problem — the control loop's view at that
//!    moment — and [`solver::advise`] says which pools bind it and by how much. Per pool, those
//!    increases give candidate levels (their median, 75th and 90th percentiles, rounded to grant
//!    steps); pools are ranked by the priority weight their increases would have placed.
//! 3. **Search on the snapshots**: the `probe_snapshots` busiest snapshots (most waiting to save:
//!    priority × GPUs waiting × the hours to the horizon) are solved again with every candidate at
//!    its 90th-percentile level: the waiting the plans save beyond the snapshots as they were
//!    (priority × GPUs placed × hours to the horizon) is the benefit to keep. Then, largest first, each
//!    pool is tried at 0 and at its lower levels on the same snapshots: the smallest level that
//!    keeps `1 - tolerance` of the benefit stays (0 drops it). Each trial is a few dozen solves,
//!    not a simulated week (the search used to simulate the week per trial: 3,089 s of CPU on the
//!    tight-quota Philly week, BENCHMARKS.md); only the advice it settles on is simulated.
//! 4. **Confirmation**: the week runs again with the chosen increases. An increase the confirming
//!    run does not use (the pool's peak usage never passes the old limit) is dropped. Each remaining
//!    one is then removed in turn (one more run each): what the week loses without it is what it
//!    buys, and the ranking; one that buys nothing is dropped too, and so is, while the confirming
//!    week leaves more jobs never started by the horizon than the week as configured, the one
//!    without which the fewest never start (the advice never leaves more work waiting than it
//!    found; jobs still running at the horizon are work placed, not left). Each
//!    increase dropped makes room for the next pool of the evidence (the candidates ranked past
//!    the first `max + 2`), at the smallest level that keeps what it adds on the snapshots, and the
//!    week is confirmed again.
//! 5. **Alternatives**: the pool the snapshots most often named as an alternative to a
//!    recommendation is simulated in its place.
//!
//! Simulations that do not depend on each other run on `threads` threads.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::Path;
use std::task::{Context, Poll, Waker};

use scheduler::Catalog;
use scheduler::cloud::Cloud;
use scheduler::model::{Job, Offer, Quota, QuotaPool, normalize_family};
use serde::{Deserialize, Serialize};
use solver::advise::{AdviseOptions, PoolIncrease, advise};

use super::WhatIfError;
use super::engine::{RoundObserver, RunOptions, cloud_timeline, run_policy_observed};
use super::report::{PolicyRun, percentile};
use super::scenario::{EventAction, Policy, Scenario};
use super::workload::{TraceJob, load_workload};
use crate::sim_cloud::{RegionQuota, SimCloud};

/// How to advise on a week.
#[derive(Debug, Clone, PartialEq)]
pub struct WeekAdviceOptions {
    /// At most this many recommendations.
    pub max_recommendations: usize,
    /// Virtual time between snapshots of the cloud.
    pub sample_every_ms: i64,
    /// At most this many snapshots are analysed (evenly thinned).
    pub max_samples: usize,
    /// A smaller increase is kept when it keeps at least `1 - tolerance` of the benefit.
    pub tolerance: f64,
    /// Simulations run at once.
    pub threads: usize,
    /// The busiest snapshots the search solves again to weigh each increase (instead of
    /// simulating the week per trial).
    pub probe_snapshots: usize,
}

impl Default for WeekAdviceOptions {
    fn default() -> Self {
        WeekAdviceOptions {
            max_recommendations: 5,
            sample_every_ms: 3_600_000,
            max_samples: 168,
            tolerance: 0.05,
            threads: 2,
            probe_snapshots: 24,
        }
    }
}

/// The advice for a week, with the week before and after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WeekAdvice {
    /// The scenario's name.
    pub scenario: String,
    /// One line for people.
    pub summary: String,
    /// Ranked by what the week loses without them, best first.
    pub recommendations: Vec<WeekRecommendation>,
    /// The week as the scenario has it (the `spillway` policy).
    pub before: WeekOutcome,
    /// The week with every recommended increase: the confirming run.
    pub after: WeekOutcome,
    /// Snapshots of waiting work analysed.
    pub samples: usize,
    /// Simulated weeks, the first and the confirming one included.
    pub simulations: u32,
    /// Plan problems solved to weigh increases on the busiest snapshots (the search).
    pub probe_solves: u32,
    /// Increases the search chose and the confirmation dropped, in the order it dropped them, and
    /// why: what a reader needs to trust that the advice is not simply smaller than it could be.
    #[serde(default)]
    pub dropped: Vec<DroppedIncrease>,
}

/// An increase the confirmation dropped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DroppedIncrease {
    /// Region.
    pub region: String,
    /// Pool.
    pub pool: String,
    /// vCPUs it would have added.
    pub increase_vcpus: u64,
    /// Why, in words.
    pub reason: String,
}

/// How a week went for the `spillway` policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WeekOutcome {
    /// Jobs submitted.
    pub jobs_submitted: u64,
    /// Jobs completed by the horizon.
    pub jobs_completed: u64,
    /// Jobs waiting or running at the horizon.
    pub jobs_pending_at_end: u64,
    /// Jobs submitted before the horizon that never ran by then: the work the week left waiting.
    /// Unlike `jobs_pending_at_end` it does not count jobs still running at the horizon, which
    /// grow when more work starts earlier (longer jobs that then run past the week's end).
    #[serde(default)]
    pub jobs_never_started: u64,
    /// Wait from submission to first running, hours (a job that never ran waits until the horizon).
    pub wait_p50_hours: f64,
    /// 95th percentile of the wait.
    pub wait_p95_hours: f64,
    /// 99th percentile of the wait.
    pub wait_p99_hours: f64,
    /// Σ GPUs × wait: GPU-hours of demand left waiting.
    pub waiting_gpu_hours: f64,
    /// Σ priority × GPUs × wait: the priority weight left waiting, in GPU-hours.
    pub waiting_weight_gpu_hours: f64,
    /// USD billed.
    pub total_cost_usd: f64,
    /// GPU-hours billed.
    pub gpu_hours: f64,
    /// USD per GPU-hour billed.
    pub cost_per_gpu_hour: Option<f64>,
}

/// One pool to raise, and what the week would have gained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WeekRecommendation {
    /// 1 = best.
    pub rank: u32,
    /// Region.
    pub region: String,
    /// The pool, its limit and the increase (`free_vcpus`: what was left at the week's peak).
    pub increase: PoolIncrease,
    /// What the week loses without it, the others kept.
    pub buys: WeekBenefit,
    /// Other increases simulated in its place.
    pub alternatives: Vec<WeekAlternative>,
}

/// What an increase buys over a week.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct WeekBenefit {
    /// GPU-hours of demand that no longer wait.
    pub waiting_gpu_hours_saved: f64,
    /// Priority weight that no longer waits: Σ priority × GPUs × hours saved.
    pub waiting_weight_gpu_hours_saved: f64,
    /// Jobs that start sooner with it.
    pub jobs_sooner: u64,
    /// A few of them, most hours saved first.
    pub jobs: Vec<String>,
    /// Jobs completed by the horizon that would not have been.
    pub more_jobs_completed: i64,
    /// Change of the week's bill (USD): mostly the work it lets run.
    pub cost_change_usd: f64,
    /// USD per GPU-hour of the week without it.
    pub cost_per_gpu_hour_without: Option<f64>,
    /// USD per GPU-hour of the week with it.
    pub cost_per_gpu_hour_with: Option<f64>,
    /// Caveats, e.g. that it moves work to a pricier region.
    pub notes: Vec<String>,
}

/// Another increase, simulated in place of a recommendation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WeekAlternative {
    /// Region.
    pub region: String,
    /// Pool.
    pub pool: String,
    /// vCPUs added.
    pub increase_vcpus: u64,
    /// Other pools of the same region raised with it (e.g. its regional `cores` for a family).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub with: Vec<AlternativePool>,
    /// Priority-weighted waiting GPU-hours it saves in place of the recommendation.
    pub waiting_weight_gpu_hours_saved: f64,
    /// Waiting GPU-hours it saves in place of the recommendation.
    pub waiting_gpu_hours_saved: f64,
    /// Change of the week's bill against the week without the recommendation (USD).
    pub cost_change_usd: f64,
}

/// A pool raised together with an alternative's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlternativePool {
    /// Pool.
    pub pool: String,
    /// vCPUs added.
    pub increase_vcpus: u64,
}

impl WeekAdvice {
    /// True when no quota increase would have placed more work.
    pub fn is_empty(&self) -> bool {
        self.recommendations.is_empty()
    }

    /// The increases as `(region, pool, vCPUs added)`, in rank order.
    pub fn increases(&self) -> Vec<(String, QuotaPool, u64)> {
        self.recommendations
            .iter()
            .map(|r| (r.region.clone(), QuotaPool::parse(&r.increase.pool), r.increase.increase_vcpus))
            .collect()
    }
}

/// An increase: region, pool, vCPUs added.
pub type Increase = (String, QuotaPool, u64);

/// The scenario with `increases` added to its quota limits (the `[cloud]` limits and every `quota`
/// event on the same pool), running only the `spillway` policy.
pub fn with_increases(s: &Scenario, increases: &[Increase]) -> Scenario {
    let mut out = s.clone();
    out.policies = vec![Policy::Spillway];
    for (region, pool, inc) in increases {
        let limit = s.cloud.quota_limit(region, pool) + inc;
        let row = match out.cloud.quota.iter().position(|q| &q.region == region) {
            Some(i) => &mut out.cloud.quota[i],
            None => {
                out.cloud.quota.push(RegionQuota {
                    region: region.clone(),
                    cores: None,
                    low_priority_cores: None,
                    family: None,
                    families: BTreeMap::new(),
                });
                out.cloud.quota.last_mut().expect("just pushed")
            }
        };
        match pool {
            QuotaPool::Cores => row.cores = Some(limit),
            QuotaPool::LowPriorityCores => row.low_priority_cores = Some(limit),
            QuotaPool::Family(f) => {
                let key = normalize_family(f);
                row.families.retain(|k, _| normalize_family(k) != key);
                row.families.insert(f.clone(), limit);
            }
        }
        for e in &mut out.events {
            if let EventAction::Quota { region: r, pool: p, vcpus } = &mut e.action
                && r == region
                && p.key() == pool.key()
            {
                *vcpus += inc;
            }
        }
    }
    out
}

/// The week simulated with some increases, as a confirming run sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Confirmation {
    /// How the week goes (the `spillway` policy).
    pub outcome: WeekOutcome,
    /// Peak vCPUs in use per (region, pool key: lower-cased, no spaces).
    pub peak_usage: BTreeMap<(String, String), u64>,
}

/// Simulates the week with `increases` (the `spillway` policy only) and reports how it goes and
/// how far each pool's usage went.
pub fn confirm(s: &Scenario, increases: &[Increase]) -> Result<Confirmation, WhatIfError> {
    let jobs = load_workload(s)?;
    let priority: BTreeMap<String, u32> = jobs.iter().map(|j| (j.id.clone(), j.spec.priority)).collect();
    let sim = simulate(s, &jobs, increases, 0)?;
    let outcome = measure(&sim.run, &priority, s.start_ms + s.horizon_ms).outcome;
    Ok(Confirmation { outcome, peak_usage: sim.peak })
}

/// Polls a future that needs no waiting (the simulated cloud's answers are immediate).
fn ready<F: Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

/// The cloud at one moment.
#[derive(Debug, Clone)]
struct Snapshot {
    t_ms: i64,
    offers: Vec<Offer>,
    quotas: Vec<Quota>,
}

/// Samples the cloud every `every_ms` and tracks each pool's peak usage.
struct Sampler {
    every_ms: i64,
    next_ms: i64,
    regions: Vec<String>,
    samples: Vec<Snapshot>,
    /// Peak usage per (region, normalised pool).
    peak: BTreeMap<(String, String), u64>,
}

impl RoundObserver for Sampler {
    fn after_round(&mut self, t_ms: i64, cloud: &SimCloud) {
        let mut quotas = Vec::new();
        for r in &self.regions {
            if let Some(Ok(q)) = ready(cloud.quota(r)) {
                for p in &q {
                    let e = self.peak.entry((r.clone(), p.pool.key())).or_default();
                    *e = (*e).max(p.usage);
                }
                quotas.extend(q);
            }
        }
        if self.every_ms > 0 && t_ms >= self.next_ms {
            let offers = ready(cloud.offers()).and_then(Result::ok).unwrap_or_default();
            self.samples.push(Snapshot { t_ms, offers, quotas });
            self.next_ms = t_ms + self.every_ms;
        }
    }
}

/// One simulated week.
struct Sim {
    run: PolicyRun,
    samples: Vec<Snapshot>,
    peak: BTreeMap<(String, String), u64>,
}

/// Runs the `spillway` policy on `s` with `increases`, sampling every `sample_ms` (0: never).
fn simulate(s: &Scenario, jobs: &[TraceJob], increases: &[Increase], sample_ms: i64) -> Result<Sim, WhatIfError> {
    let s = with_increases(s, increases);
    let (changes, _) = cloud_timeline(&s)?;
    let mut sampler = Sampler {
        every_ms: sample_ms,
        next_ms: s.start_ms,
        regions: s.cloud.regions.clone(),
        samples: Vec::new(),
        peak: BTreeMap::new(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| WhatIfError::Control(format!("cannot start a runtime: {e}")))?;
    let run = rt.block_on(run_policy_observed(
        &s,
        Policy::Spillway,
        jobs,
        &changes,
        &RunOptions { timing: false },
        Some(&mut sampler),
    ))?;
    Ok(Sim { run, samples: sampler.samples, peak: sampler.peak })
}

/// Simulates every variant, on at most `threads` threads, in order. A simulation that panics is
/// an error of its own variant.
fn simulate_all(
    s: &Scenario,
    jobs: &[TraceJob],
    variants: &[Vec<Increase>],
    threads: usize,
) -> Vec<Result<Sim, WhatIfError>> {
    solver::parallel::par_map(variants, threads.max(1), |v| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| simulate(s, jobs, v, 0)))
            .unwrap_or_else(|_| Err(WhatIfError::Control("a simulation panicked".into())))
    })
}

/// Per-job waits (hours), and the week's figures.
struct Measured {
    outcome: WeekOutcome,
    /// Wait per job id, hours.
    waits: BTreeMap<String, f64>,
}

fn measure(run: &PolicyRun, priority: &BTreeMap<String, u32>, end_ms: i64) -> Measured {
    let mut waits = BTreeMap::new();
    let (mut g, mut w) = (0.0, 0.0);
    let mut never_started = 0;
    for j in &run.jobs {
        if j.submitted_ms < end_ms && j.first_running_ms.is_none_or(|t| t > end_ms) {
            never_started += 1;
        }
        let wait = (j.first_running_ms.unwrap_or(end_ms).min(end_ms) - j.submitted_ms).max(0) as f64 / 3_600_000.0;
        g += wait * f64::from(j.gpus);
        w += wait * f64::from(j.gpus) * f64::from(priority.get(&j.id).copied().unwrap_or(1));
        waits.insert(j.id.clone(), wait);
    }
    let mut sorted: Vec<f64> = waits.values().copied().collect();
    sorted.sort_by(f64::total_cmp);
    let s = &run.summary;
    Measured {
        outcome: WeekOutcome {
            jobs_submitted: s.jobs_submitted,
            jobs_completed: s.jobs_completed,
            jobs_pending_at_end: s.jobs_pending_at_end,
            jobs_never_started: never_started,
            wait_p50_hours: r4(percentile(&sorted, 50.0)),
            wait_p95_hours: r4(percentile(&sorted, 95.0)),
            wait_p99_hours: r4(percentile(&sorted, 99.0)),
            waiting_gpu_hours: r4(g),
            waiting_weight_gpu_hours: r4(w),
            total_cost_usd: r4(s.total_cost_usd),
            gpu_hours: r4(s.gpu_hours),
            cost_per_gpu_hour: (s.gpu_hours > 0.0).then(|| r4(s.total_cost_usd / s.gpu_hours)),
        },
        waits,
    }
}

fn r4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// What one snapshot's advice says about each pool.
#[derive(Default)]
struct PoolEvidence {
    /// vCPUs of increase per snapshot that asked for one.
    levels: Vec<u64>,
    /// Priority weight those increases would have placed, summed over snapshots.
    weight: f64,
    step: u64,
    /// Alternatives the snapshots named, each a set of pools of one region raised together (a
    /// family and its region's `cores`, for regular VMs): per set, the vCPUs each of its pools
    /// would have needed, one entry per snapshot. Kept as sets because a family raised alone in
    /// another region is often no alternative at all: that region's `cores` binds next, and the
    /// simulated alternative saved nothing (BENCHMARKS.md, #20).
    alternatives: BTreeMap<Vec<(String, String)>, Vec<Vec<u64>>>,
}

/// The solver offers of a snapshot, as the control loop builds them (priced, whole GPUs).
fn solver_offers(catalog: &Catalog, offers: &[Offer]) -> Vec<solver::Offer> {
    offers
        .iter()
        .filter_map(|o| {
            let size = catalog.size(&o.size)?;
            let price = o.price_per_hour?;
            (size.gpus > 0).then(|| solver::Offer {
                region: o.region.clone(),
                size: size.name.clone(),
                priority: match o.priority {
                    scheduler::model::Priority::Regular => solver::Priority::Regular,
                    scheduler::model::Priority::Spot => solver::Priority::Spot,
                },
                gpu_model: size.gpu_model.clone(),
                gpus_per_vm: size.gpus,
                vcpus_per_vm: size.vcpus,
                family: size.family.clone(),
                price_per_hour: price,
                capacity_vms: o.capacity_vms,
                eviction_rate_per_hour: o.eviction_rate_per_hour,
            })
        })
        .collect()
}

/// A snapshot's plan problem and when it was taken (virtual Unix milliseconds).
type TimedProblem = (solver::Problem, i64);

/// Analyses the snapshots of the first run: per pool, the increases its waiting work asked for.
fn evidence(
    s: &Scenario,
    catalog: &Catalog,
    jobs: &[TraceJob],
    run: &PolicyRun,
    samples: &[Snapshot],
    max_samples: usize,
) -> (BTreeMap<(String, String), PoolEvidence>, usize, Vec<TimedProblem>) {
    let first_running: BTreeMap<&str, Option<i64>> =
        run.jobs.iter().map(|j| (j.id.as_str(), j.first_running_ms)).collect();
    let waiting_at = |t: i64| -> Vec<&TraceJob> {
        jobs.iter()
            .filter(|j| s.start_ms + j.at_ms <= t)
            .filter(|j| first_running.get(j.id.as_str()).copied().flatten().is_none_or(|f| f > t))
            .collect()
    };
    let busy: Vec<&Snapshot> = samples.iter().filter(|x| !waiting_at(x.t_ms).is_empty()).collect();
    let stride = busy.len().div_ceil(max_samples.max(1)).max(1);
    let mut out: BTreeMap<(String, String), PoolEvidence> = BTreeMap::new();
    let mut analysed = 0;
    let mut problems = Vec::new();
    for snap in busy.iter().step_by(stride) {
        let mut demands = Vec::new();
        for j in waiting_at(snap.t_ms) {
            let job = Job::new(j.id.clone(), j.spec.clone(), s.start_ms + j.at_ms);
            demands.extend(scheduler::control::demands(&job, catalog, scheduler::control::Held::default()));
        }
        let problem = solver::Problem {
            offers: solver_offers(catalog, &snap.offers),
            quotas: snap
                .quotas
                .iter()
                .map(|q| solver::QuotaLimit {
                    region: q.region.clone(),
                    pool: q.pool.name().to_string(),
                    vcpus: q.free(),
                })
                .collect(),
            jobs: demands,
            egress: Vec::new(),
        };
        let in_use: Vec<solver::QuotaLimit> = snap
            .quotas
            .iter()
            .map(|q| solver::QuotaLimit { region: q.region.clone(), pool: q.pool.name().to_string(), vcpus: q.usage })
            .collect();
        let advice = advise(
            &problem,
            &in_use,
            &AdviseOptions { max_recommendations: 3, max_alternatives: 1, ..Default::default() },
        );
        analysed += 1;
        problems.push((problem, snap.t_ms));
        for rec in &advice.recommendations {
            let share = rec.buys.placed_weight / rec.increases.len().max(1) as f64;
            for inc in &rec.increases {
                let e = out.entry((inc.region.clone(), normalize_family(&inc.pool))).or_default();
                e.levels.push(inc.increase_vcpus);
                e.weight += share;
                e.step = inc.step_vcpus;
                for alt in &rec.alternatives {
                    let pools = alt.increases.iter().map(|a| (a.region.clone(), a.pool.clone())).collect();
                    let vcpus = alt.increases.iter().map(|a| a.increase_vcpus).collect();
                    e.alternatives.entry(pools).or_default().push(vcpus);
                }
            }
        }
    }
    (out, analysed, problems)
}

/// The week's busiest snapshots of waiting work (their plan problems), solved again with pools
/// raised: how the search weighs an increase without simulating the week. A snapshot's value is
/// the waiting its plan saves over the rest of the week: Σ priority × GPUs placed × the hours
/// from the snapshot to the horizon (at most what a job kept out then would have waited). Placed
/// weight alone (what the probes counted first) rated work unblocked at the week's last hours like
/// work unblocked at its start, and the advice bought the busy moments and not the week's tail
/// (BENCHMARKS.md, #20: the tight-quota Philly week). Scoring by the placed jobs' run hours was
/// tried too and did worse on the two-day cut (the waiting the week counts does not grow with a
/// job's length).
struct Probes {
    probes: Vec<Probe>,
    base: f64,
    solves: u32,
}

/// One snapshot's problem, and the hours from it to the horizon.
struct Probe {
    problem: solver::Problem,
    hours_left: f64,
}

impl Probe {
    /// Priority × GPUs × the hours to the horizon, over `jobs` (GPUs given per job).
    fn work<'a>(&self, jobs: impl Iterator<Item = (&'a str, u32)>) -> f64 {
        let demand: BTreeMap<&str, &solver::JobDemand> = self.problem.jobs.iter().map(|j| (j.id.as_str(), j)).collect();
        jobs.filter_map(|(id, gpus)| {
            let j = demand.get(id)?;
            Some(f64::from(j.priority) * f64::from(gpus) * self.hours_left)
        })
        .sum()
    }
}

impl Probes {
    /// The `k` snapshots with the most waiting to save (ties: the earlier), each `(problem, when)`.
    fn new(problems: Vec<TimedProblem>, end_ms: i64, k: usize) -> Probes {
        let all: Vec<Probe> = problems
            .into_iter()
            .map(|(problem, t_ms)| Probe { problem, hours_left: (end_ms - t_ms).max(0) as f64 / 3_600_000.0 })
            .collect();
        let waiting = |p: &Probe| p.work(p.problem.jobs.iter().map(|j| (j.id.as_str(), j.gpus)));
        let mut ranked: Vec<(usize, f64)> = all.iter().enumerate().map(|(i, p)| (i, waiting(p))).collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let keep: BTreeSet<usize> = ranked.iter().take(k.max(1)).map(|r| r.0).collect();
        let probes = all.into_iter().enumerate().filter(|(i, _)| keep.contains(i)).map(|(_, p)| p).collect();
        let mut probes = Probes { probes, base: 0.0, solves: 0 };
        probes.base = probes.value(&[]);
        probes
    }

    /// Σ work unblocked over the probes with `incs` applied.
    fn value(&mut self, incs: &[Increase]) -> f64 {
        // The control loop's method: the week's rounds plan with it.
        let options = solver::SolveOptions { method: solver::Method::Round, time_limit_ms: None };
        let mut total = 0.0;
        for probe in &self.probes {
            let mut p = probe.problem.clone();
            for q in &mut p.quotas {
                let key = QuotaPool::parse(&q.pool).key();
                for (region, pool, vcpus) in incs {
                    if *region == q.region && pool.key() == key {
                        q.vcpus = q.vcpus.saturating_add(*vcpus);
                    }
                }
            }
            let plan = solver::solve(&p, &options);
            total += probe.work(plan.placements.iter().map(|pl| (pl.job.as_str(), pl.gpus)));
            self.solves += 1;
        }
        total
    }

    /// What `incs` add over the probes as they were.
    fn gain(&mut self, incs: &[Increase]) -> f64 {
        self.value(incs) - self.base
    }
}

/// Peak usage per (region, normalised pool) of the first and the confirming run.
#[derive(Clone, Copy)]
struct Peaks<'a> {
    before: &'a BTreeMap<(String, String), u64>,
    after: &'a BTreeMap<(String, String), u64>,
}

/// A pool under consideration: its candidate levels and the level chosen so far.
struct Cand {
    region: String,
    pool: QuotaPool,
    levels: Vec<u64>,
    level: u64,
    step: u64,
}

/// The level at percentile `p` of `levels`, rounded up to whole steps.
fn level(levels: &[u64], p: f64, step: u64) -> u64 {
    let mut v: Vec<f64> = levels.iter().map(|&l| l as f64).collect();
    v.sort_by(f64::total_cmp);
    let x = percentile(&v, p) as u64;
    x.div_ceil(step.max(1)) * step.max(1)
}

/// Probe gains below this are rounding: less than half a GPU-hour of priority-1 work.
const PROBE_EPS: f64 = 0.5;

/// The increases of `cands` that are not zero.
fn incs(cands: &[Cand]) -> Vec<Increase> {
    cands.iter().filter(|c| c.level > 0).map(|c| (c.region.clone(), c.pool.clone(), c.level)).collect()
}

/// After the confirmation dropped `dropped` increases: as many of the next pools of the evidence
/// (`spares`, best first) as there is room for, each at the smallest of its levels that keeps
/// `1 - tolerance` of what it adds on the probes to the increases kept; a pool that adds nothing
/// there is passed over. Without this the confirmation could only shrink the advice: a pool
/// dropped because the week did not use it left its place empty, though the snapshots named
/// others (BENCHMARKS.md, #20: the tight-quota Philly week).
fn refill(
    cands: &mut Vec<Cand>,
    spares: &mut std::collections::VecDeque<Cand>,
    dropped: usize,
    probes: &mut Probes,
    options: &WeekAdviceOptions,
) {
    let mut added = 0;
    while added < dropped && cands.len() < options.max_recommendations {
        let Some(mut c) = spares.pop_front() else { break };
        let kept = incs(cands);
        let base = probes.value(&kept);
        let with = |probes: &mut Probes, l: u64| {
            let mut v = kept.clone();
            v.push((c.region.clone(), c.pool.clone(), l));
            probes.value(&v) - base
        };
        let top = with(probes, c.level);
        if top < PROBE_EPS {
            continue;
        }
        // Levels ascend and end at the highest (the one just weighed).
        let lower: Vec<u64> = c.levels.iter().copied().filter(|&l| l < c.level).collect();
        let chosen = lower.into_iter().find(|&l| with(probes, l) >= top * (1.0 - options.tolerance));
        if let Some(l) = chosen {
            c.level = l;
        }
        cands.push(c);
        added += 1;
    }
}

/// Which of the confirmed increases stay, best first (indices into `gains`): those that buy
/// something (`gains[i]`: the priority-weighted waiting the week loses without increase `i`), at
/// most `max` of them. And the advice must not leave more work waiting than it found: when the
/// confirming week (`all`) ends with more jobs that never started than the week as configured
/// (`base`), the increase without which the fewest jobs never start (`without[i]`; ties: the one
/// that buys the least) goes too, and the week is confirmed again. The waiting a week saves is
/// weighted by priority × GPUs, so an increase that lets a few large jobs start sooner can win on
/// it while the work they crowd out never starts. Jobs still *running* at the horizon are not
/// counted: more work started earlier lets longer jobs start within the week, and they are still
/// running when it ends (BENCHMARKS.md, #20: counting them, the guard threw away an increase that
/// cut the tight-quota Philly week's waiting by 80 %). The second value is the increase dropped
/// for the jobs left waiting, if one was.
fn kept_increases(
    base: &WeekOutcome,
    all: &WeekOutcome,
    without: &[&WeekOutcome],
    gains: &[f64],
    max: usize,
) -> (Vec<usize>, Option<usize>) {
    let mut keep: Vec<usize> = (0..gains.len()).filter(|&i| gains[i] > 0.0).collect();
    keep.sort_by(|&a, &b| gains[b].total_cmp(&gains[a]).then(a.cmp(&b)));
    keep.truncate(max);
    if keep.len() == gains.len() && all.jobs_never_started > base.jobs_never_started {
        // Only when nothing else was dropped: a week confirmed without those tells what is left.
        let worst = keep
            .iter()
            .copied()
            .min_by(|&a, &b| {
                without[a]
                    .jobs_never_started
                    .cmp(&without[b].jobs_never_started)
                    .then(gains[a].total_cmp(&gains[b]))
                    .then(a.cmp(&b))
            })
            .expect("every increase is kept, and there is one at least");
        keep.retain(|&i| i != worst);
        return (keep, Some(worst));
    }
    (keep, None)
}

/// Advises on a week: see the module documentation.
pub fn advise_week(s: &Scenario, options: &WeekAdviceOptions) -> Result<WeekAdvice, WhatIfError> {
    let jobs = load_workload(s)?;
    let catalog = s.catalog();
    let priority: BTreeMap<String, u32> = jobs.iter().map(|j| (j.id.clone(), j.spec.priority)).collect();
    let end_ms = s.start_ms + s.horizon_ms;
    let mut simulations = 0u32;

    let first = simulate(s, &jobs, &[], options.sample_every_ms)?;
    simulations += 1;
    let base = measure(&first.run, &priority, end_ms);
    let (evidence, samples, problems) = evidence(s, &catalog, &jobs, &first.run, &first.samples, options.max_samples);

    // Candidates: the pools whose increases would have placed the most, in Azure's spelling.
    let mut pools: Vec<(&(String, String), &PoolEvidence)> = evidence.iter().collect();
    pools.sort_by(|a, b| b.1.weight.total_cmp(&a.1.weight).then(a.0.cmp(b.0)));
    let total: f64 = pools.iter().map(|p| p.1.weight).sum();
    pools.retain(|p| p.1.weight >= total * 0.01);
    // The next pools wait their turn: the confirmation tries them when it drops one of the first.
    let next_pools = pools.split_off(pools.len().min(options.max_recommendations + 2));
    let pool_of = |key: &(String, String)| -> QuotaPool {
        let quotas = first.samples.iter().flat_map(|x| &x.quotas);
        quotas
            .filter(|q| q.region == key.0 && q.pool.key() == key.1)
            .map(|q| q.pool.clone())
            .next()
            .unwrap_or_else(|| QuotaPool::parse(&key.1))
    };
    let cand = |(k, e): &(&(String, String), &PoolEvidence)| {
        let mut levels: Vec<u64> = [50.0, 75.0, 90.0].iter().map(|&p| level(&e.levels, p, e.step)).collect();
        levels.dedup();
        Cand { region: k.0.clone(), pool: pool_of(k), level: *levels.last().unwrap_or(&0), levels, step: e.step }
    };
    let mut cands: Vec<Cand> = pools.iter().map(cand).filter(|c| c.level > 0).collect();
    let mut spares: std::collections::VecDeque<Cand> =
        next_pools.iter().take(options.max_recommendations).map(cand).filter(|c| c.level > 0).collect();

    let empty = |simulations: u32| WeekAdvice {
        scenario: s.name.clone(),
        summary: scheduler::advice::NOTHING_TO_ADVISE.to_string(),
        recommendations: Vec::new(),
        before: base.outcome.clone(),
        after: base.outcome.clone(),
        samples,
        simulations,
        probe_solves: 0,
        dropped: Vec::new(),
    };
    if cands.is_empty() {
        return Ok(empty(simulations));
    }
    // The benefit to keep, on the probes: every candidate at its highest level.
    let mut probes = Probes::new(problems, end_ms, options.probe_snapshots);
    let goal = probes.gain(&incs(&cands));
    if goal < PROBE_EPS {
        return Ok(WeekAdvice { probe_solves: probes.solves, ..empty(simulations) });
    }
    // Smallest level per pool that keeps the benefit on the probes, largest asks first.
    let mut order: Vec<usize> = (0..cands.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(cands[i].level));
    for i in order {
        let mut tries: Vec<u64> = vec![0];
        tries.extend(cands[i].levels.iter().copied().filter(|&l| l < cands[i].level));
        for l in tries {
            let mut v = incs(&cands);
            v.retain(|x| !(x.0 == cands[i].region && x.1 == cands[i].pool));
            if l > 0 {
                v.push((cands[i].region.clone(), cands[i].pool.clone(), l));
            }
            if probes.gain(&v) >= goal * (1.0 - options.tolerance) {
                cands[i].level = l;
                break;
            }
        }
    }
    cands.retain(|c| c.level > 0);

    // Confirmation: drop what the confirming run does not use, then what buys nothing, until stable.
    let mut confirm;
    let mut ablations: Vec<Measured>;
    let mut dropped_log: Vec<DroppedIncrease> = Vec::new();
    let drop_note = |c: &Cand, reason: String| DroppedIncrease {
        region: c.region.clone(),
        pool: c.pool.name().to_string(),
        increase_vcpus: c.level,
        reason,
    };
    loop {
        confirm = simulate(s, &jobs, &incs(&cands), 0)?;
        simulations += 1;
        let before = cands.len();
        let (used, unused): (Vec<Cand>, Vec<Cand>) = cands.into_iter().partition(|c| {
            let limit = s.cloud.quota_limit(&c.region, &c.pool);
            confirm.peak.get(&(c.region.clone(), c.pool.key())).copied().unwrap_or(0) > limit
        });
        cands = used;
        for c in &unused {
            dropped_log.push(drop_note(c, "the confirming week never used it".into()));
        }
        if cands.len() != before {
            let dropped = before - cands.len();
            refill(&mut cands, &mut spares, dropped, &mut probes, options);
            if cands.is_empty() {
                return Ok(WeekAdvice { probe_solves: probes.solves, dropped: dropped_log, ..empty(simulations) });
            }
            continue;
        }
        let all = measure(&confirm.run, &priority, end_ms);
        let variants: Vec<Vec<Increase>> = (0..cands.len())
            .map(|i| {
                let mut v = incs(&cands);
                v.remove(i);
                v
            })
            .collect();
        ablations = Vec::new();
        for r in simulate_all(s, &jobs, &variants, options.threads) {
            ablations.push(measure(&r?.run, &priority, end_ms));
        }
        simulations += variants.len() as u32;
        let gains: Vec<f64> = ablations
            .iter()
            .map(|m| m.outcome.waiting_weight_gpu_hours - all.outcome.waiting_weight_gpu_hours)
            .collect();
        let without: Vec<&WeekOutcome> = ablations.iter().map(|m| &m.outcome).collect();
        let (keep, for_pending) =
            kept_increases(&base.outcome, &all.outcome, &without, &gains, options.max_recommendations);
        if keep.len() == cands.len() {
            let mut sorted: Vec<(Cand, Measured, f64)> = Vec::new();
            let mut drained: Vec<Option<(Cand, Measured)>> =
                cands.drain(..).zip(ablations.drain(..)).map(Some).collect();
            for &i in &keep {
                let (c, m) = drained[i].take().expect("each once");
                sorted.push((c, m, gains[i]));
            }
            let peaks = Peaks { before: &first.peak, after: &confirm.peak };
            let probe_solves = probes.solves;
            return finish(
                s,
                &catalog,
                &jobs,
                &priority,
                options,
                (base, all),
                sorted,
                &evidence,
                peaks,
                samples,
                simulations,
            )
            .map(|a| WeekAdvice { probe_solves, dropped: dropped_log, ..a });
        }
        let mut kept = Vec::new();
        let before = cands.len();
        for (i, c) in cands.into_iter().enumerate() {
            if keep.contains(&i) {
                kept.push(c);
                continue;
            }
            let reason = if for_pending == Some(i) {
                format!(
                    "with every increase {} jobs never start in the week against {} as configured; without this \
                     one, {}",
                    all.outcome.jobs_never_started, base.outcome.jobs_never_started, without[i].jobs_never_started
                )
            } else if gains[i] <= 0.0 {
                "the week waits no longer without it".to_string()
            } else {
                format!("ranked past the {} recommendations asked for", options.max_recommendations)
            };
            dropped_log.push(drop_note(&c, reason));
        }
        cands = kept;
        let dropped = before - cands.len();
        refill(&mut cands, &mut spares, dropped, &mut probes, options);
        if cands.is_empty() {
            return Ok(WeekAdvice { probe_solves: probes.solves, dropped: dropped_log, ..empty(simulations) });
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        s: &Scenario,
        catalog: &Catalog,
        jobs: &[TraceJob],
        priority: &BTreeMap<String, u32>,
        options: &WeekAdviceOptions,
        (base, all): (Measured, Measured),
        ranked: Vec<(Cand, Measured, f64)>,
        evidence: &BTreeMap<(String, String), PoolEvidence>,
        peaks: Peaks,
        samples: usize,
        mut simulations: u32,
    ) -> Result<WeekAdvice, WhatIfError> {
        let end_ms = s.start_ms + s.horizon_ms;
        let chosen: Vec<Increase> =
            ranked.iter().map(|(c, _, _)| (c.region.clone(), c.pool.clone(), c.level)).collect();
        let keys: BTreeSet<(String, String)> = chosen.iter().map(|c| (c.0.clone(), c.1.key())).collect();
        // One alternative per recommendation: the set of pools the snapshots named most often in
        // its place (none of them advised already), each at the 90th percentile of what the
        // snapshots asked of it, simulated instead of it.
        let mut alt_variants: Vec<(usize, Vec<Increase>, Vec<Increase>)> = Vec::new();
        for (i, (c, _, _)) in ranked.iter().enumerate() {
            let Some(e) = evidence.get(&(c.region.clone(), c.pool.key())) else { continue };
            if let Some(alt) = alternative(e, &keys) {
                let mut v = chosen.clone();
                v.remove(i);
                v.extend(alt.iter().cloned());
                alt_variants.push((i, alt, v));
            }
        }
        let variants: Vec<Vec<Increase>> = alt_variants.iter().map(|a| a.2.clone()).collect();
        let alt_runs = simulate_all(s, jobs, &variants, options.threads);
        simulations += variants.len() as u32;
        let mut alternatives: BTreeMap<usize, Vec<WeekAlternative>> = BTreeMap::new();
        for ((i, alt, _), r) in alt_variants.into_iter().zip(alt_runs) {
            let m = measure(&r?.run, priority, end_ms);
            let without = &ranked[i].1;
            let saved = without.outcome.waiting_weight_gpu_hours - m.outcome.waiting_weight_gpu_hours;
            if saved > 0.0 {
                // The pool of the recommendation's kind leads (a family for a family); the rest
                // of the set goes with it.
                let kind = |p: &QuotaPool| std::mem::discriminant(p);
                let lead = alt.iter().position(|a| kind(&a.1) == kind(&ranked[i].0.pool)).unwrap_or(0);
                let (region, pool, vcpus) = &alt[lead];
                let with = alt
                    .iter()
                    .enumerate()
                    .filter(|&(k, _)| k != lead)
                    .map(|(_, a)| AlternativePool { pool: a.1.name().to_string(), increase_vcpus: a.2 })
                    .collect();
                alternatives.entry(i).or_default().push(WeekAlternative {
                    region: region.clone(),
                    pool: pool.name().to_string(),
                    increase_vcpus: *vcpus,
                    with,
                    waiting_weight_gpu_hours_saved: r4(saved),
                    waiting_gpu_hours_saved: r4(without.outcome.waiting_gpu_hours - m.outcome.waiting_gpu_hours),
                    cost_change_usd: r4(m.outcome.total_cost_usd - without.outcome.total_cost_usd),
                });
            }
        }
        let mut recs = Vec::new();
        for (i, (c, without, gain)) in ranked.iter().enumerate() {
            let limit = s.cloud.quota_limit(&c.region, &c.pool);
            let key = (c.region.clone(), c.pool.key());
            let peak_before = peaks.before.get(&key).copied().unwrap_or(0);
            let peak_after = peaks.after.get(&key).copied().unwrap_or(0);
            let mut sooner: Vec<(f64, &String)> = all
                .waits
                .iter()
                .filter_map(|(id, w)| {
                    let before = without.waits.get(id).copied().unwrap_or(*w);
                    (before > w + 1.0 / 60.0).then_some((before - w, id))
                })
                .collect();
            sooner.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
            let mut notes = Vec::new();
            if let Some(n) = pricier_note(s, catalog, &c.region, &c.pool) {
                notes.push(n);
            }
            recs.push(WeekRecommendation {
                rank: (i + 1) as u32,
                region: c.region.clone(),
                increase: PoolIncrease {
                    region: c.region.clone(),
                    pool: c.pool.name().to_string(),
                    current_limit: limit,
                    free_vcpus: limit.saturating_sub(peak_before),
                    increase_vcpus: c.level,
                    new_limit: limit + c.level,
                    step_vcpus: c.step,
                    used_vcpus: peak_after.saturating_sub(limit).min(c.level),
                },
                buys: WeekBenefit {
                    waiting_gpu_hours_saved: r4(without.outcome.waiting_gpu_hours - all.outcome.waiting_gpu_hours),
                    waiting_weight_gpu_hours_saved: r4(*gain),
                    jobs_sooner: sooner.len() as u64,
                    jobs: sooner.iter().take(8).map(|x| x.1.clone()).collect(),
                    more_jobs_completed: all.outcome.jobs_completed as i64 - without.outcome.jobs_completed as i64,
                    cost_change_usd: r4(all.outcome.total_cost_usd - without.outcome.total_cost_usd),
                    cost_per_gpu_hour_without: without.outcome.cost_per_gpu_hour,
                    cost_per_gpu_hour_with: all.outcome.cost_per_gpu_hour,
                    notes,
                },
                alternatives: alternatives.remove(&i).unwrap_or_default(),
            });
        }
        let saved = base.outcome.waiting_gpu_hours - all.outcome.waiting_gpu_hours;
        let n = recs.len();
        Ok(WeekAdvice {
            scenario: s.name.clone(),
            summary: format!(
                "{n} quota increase{} would have saved {saved:.1} GPU-hours of waiting ({:.1} priority-weighted) in {}",
                if n == 1 { "" } else { "s" },
                base.outcome.waiting_weight_gpu_hours - all.outcome.waiting_weight_gpu_hours,
                s.name
            ),
            recommendations: recs,
            before: base.outcome,
            after: all.outcome,
            samples,
            simulations,
            probe_solves: 0,
            dropped: Vec::new(),
        })
    }
}

/// The alternative to simulate in place of a recommendation: of the sets of pools its snapshots
/// named in its place, the one named most often (ties: the first by name) with none of its pools
/// advised already (`advised`: region and normalised pool), each pool at the 90th percentile of
/// what the snapshots asked of it. The whole set: a family elsewhere needs that region's `cores`
/// too when they bind.
fn alternative(e: &PoolEvidence, advised: &BTreeSet<(String, String)>) -> Option<Vec<Increase>> {
    let (pools, seen) = e
        .alternatives
        .iter()
        .filter(|(pools, _)| pools.iter().all(|k| !advised.contains(&(k.0.clone(), normalize_family(&k.1)))))
        .max_by(|a, b| a.1.len().cmp(&b.1.len()).then(b.0.cmp(a.0)))?;
    Some(
        pools
            .iter()
            .enumerate()
            .map(|(k, (region, pool))| {
                let asked: Vec<u64> = seen.iter().map(|v| v[k]).collect();
                (region.clone(), QuotaPool::parse(pool), level(&asked, 90.0, 1).max(1))
            })
            .collect(),
    )
}

/// "moves work to a pricier region" when the pool's region lists its sizes above the cheapest
/// region of the scenario that sells them.
fn pricier_note(s: &Scenario, catalog: &Catalog, region: &str, pool: &QuotaPool) -> Option<String> {
    let sizes: Vec<&scheduler::model::VmSize> = catalog
        .sizes()
        .iter()
        .filter(|z| z.gpus > 0 && s.cloud.offers_size(&z.name))
        .filter(|z| match pool {
            QuotaPool::Family(f) => normalize_family(&z.family) == normalize_family(f),
            _ => true,
        })
        .collect();
    let spot = matches!(pool, QuotaPool::LowPriorityCores);
    let per_gpu = |r: &str| -> Option<f64> {
        sizes
            .iter()
            .filter_map(|z| {
                let row = catalog.price(&z.name, r)?;
                let p = if spot { row.spot } else { row.regular }?;
                Some(p / f64::from(z.gpus))
            })
            .fold(None, |m: Option<f64>, p| Some(m.map_or(p, |m| m.min(p))))
    };
    let here = per_gpu(region)?;
    let (cheapest, at) = s
        .cloud
        .regions
        .iter()
        .filter_map(|r| per_gpu(r).map(|p| (r.clone(), p)))
        .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))?;
    (here > at * 1.005).then(|| {
        format!(
            "moves work to a pricier region: {region} lists these GPUs at {here:.2} USD per GPU-hour, {cheapest} at \
             {at:.2}"
        )
    })
}

/// Writes a copy of the scenario file `original` with the increases applied to its `[cloud]` quota
/// (and to `quota` events on the same pools), renamed `<name>-advised`, keeping its comments.
/// Relative paths in it are rewritten so that they still point at the same files from `out`.
pub fn write_advised_scenario(
    original: &Path,
    text: &str,
    s: &Scenario,
    increases: &[Increase],
    out: &Path,
) -> Result<(), String> {
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| format!("{}: {e}", original.display()))?;
    let lines: Vec<String> = increases
        .iter()
        .map(|(r, p, inc)| {
            let limit = s.cloud.quota_limit(r, p);
            format!("#   {r} {}: {limit} -> {} vCPUs (+{inc})", p.name(), limit + inc)
        })
        .collect();
    let cloud = doc
        .get_mut("cloud")
        .and_then(|c| c.as_table_mut())
        .ok_or_else(|| format!("{}: no [cloud] table", original.display()))?;
    if !cloud.contains_key("quota") {
        cloud.insert("quota", toml_edit::Item::ArrayOfTables(toml_edit::ArrayOfTables::new()));
    }
    let quota = cloud
        .get_mut("quota")
        .and_then(|q| q.as_array_of_tables_mut())
        .ok_or_else(|| format!("{}: cloud.quota is not an array of tables", original.display()))?;
    for (region, pool, inc) in increases {
        let limit = (s.cloud.quota_limit(region, pool) + inc) as i64;
        let pos = quota.iter().position(|t| t.get("region").and_then(|v| v.as_str()) == Some(region.as_str()));
        let t = match pos {
            Some(i) => quota.get_mut(i).expect("found"),
            None => {
                let mut t = toml_edit::Table::new();
                t.insert("region", toml_edit::value(region.as_str()));
                quota.push(t);
                quota.get_mut(quota.len() - 1).expect("pushed")
            }
        };
        match pool {
            QuotaPool::Cores => {
                t.insert("cores", toml_edit::value(limit));
            }
            QuotaPool::LowPriorityCores => {
                t.remove("lowPriorityCores");
                t.insert("low_priority_cores", toml_edit::value(limit));
            }
            QuotaPool::Family(f) => {
                if !t.contains_key("families") {
                    t.insert("families", toml_edit::value(toml_edit::InlineTable::new()));
                }
                let fams = t.get_mut("families").expect("inserted");
                let key = normalize_family(f);
                if let Some(inline) = fams.as_inline_table_mut() {
                    let old: Vec<String> =
                        inline.iter().map(|(k, _)| k.to_string()).filter(|k| normalize_family(k) == key).collect();
                    for k in old {
                        inline.remove(&k);
                    }
                    inline.insert(f, limit.into());
                } else if let Some(table) = fams.as_table_mut() {
                    let old: Vec<String> =
                        table.iter().map(|(k, _)| k.to_string()).filter(|k| normalize_family(k) == key).collect();
                    for k in old {
                        table.remove(&k);
                    }
                    table.insert(f, toml_edit::value(limit));
                }
            }
        }
    }
    if let Some(events) = doc.get_mut("events").and_then(|e| e.as_array_of_tables_mut()) {
        for e in events.iter_mut() {
            let is_quota = e.get("kind").and_then(|k| k.as_str()) == Some("quota");
            let region = e.get("region").and_then(|r| r.as_str()).map(str::to_string);
            let pool = e.get("pool").and_then(|p| p.as_str()).map(QuotaPool::parse);
            let vcpus = e.get("vcpus").and_then(|v| v.as_integer());
            if let (true, Some(region), Some(pool), Some(vcpus)) = (is_quota, region, pool, vcpus)
                && let Some((_, _, inc)) = increases.iter().find(|(r, p, _)| *r == region && p.key() == pool.key())
            {
                e.insert("vcpus", toml_edit::value(vcpus + *inc as i64));
            }
        }
    }
    if let Some(sc) = doc.get_mut("scenario").and_then(|t| t.as_table_mut()) {
        let name = format!("{}-advised", s.name);
        sc.insert("name", toml_edit::value(name));
    }
    rebase_paths(&mut doc, original, out);
    let header = format!(
        "# {} with the quota `spillway advise` recommends (written by spillway advise --write-scenario):\n{}\n\n",
        original.display(),
        lines.join("\n")
    );
    std::fs::write(out, format!("{header}{doc}")).map_err(|e| format!("cannot write {}: {e}", out.display()))
}

/// Rewrites the relative file paths of a scenario (workload path and fit file, traces) so they
/// resolve from `out`'s directory to the same files as from `original`'s.
fn rebase_paths(doc: &mut toml_edit::DocumentMut, original: &Path, out: &Path) {
    let from = original.parent().map(Path::to_path_buf).unwrap_or_default();
    let to = out.parent().map(Path::to_path_buf).unwrap_or_default();
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (from, to) = (abs(&from), abs(&to));
    if from == to {
        return;
    }
    let rebase = |value: &str| -> Option<String> {
        let p = Path::new(value);
        if p.is_absolute() {
            return None;
        }
        let target = from.join(p);
        Some(relative(&to, &target).display().to_string())
    };
    if let Some(w) = doc.get_mut("workload").and_then(|w| w.as_table_mut()) {
        for key in ["path", "fit"] {
            let v = w.get(key).and_then(|v| v.as_str()).map(str::to_string);
            if let Some(v) = v
                && !(key == "fit" && v == "philly")
                && let Some(new) = rebase(&v)
            {
                w.insert(key, toml_edit::value(new));
            }
        }
    }
    if let Some(traces) = doc.get_mut("traces").and_then(|t| t.as_array_of_tables_mut()) {
        for t in traces.iter_mut() {
            let v = t.get("path").and_then(|v| v.as_str()).map(str::to_string);
            if let Some(new) = v.and_then(|v| rebase(&v)) {
                t.insert("path", toml_edit::value(new));
            }
        }
    }
}

/// `target` relative to directory `base` (both absolute), with `..` where needed.
fn relative(base: &Path, target: &Path) -> std::path::PathBuf {
    let b: Vec<_> = base.components().collect();
    let t: Vec<_> = target.components().collect();
    let common = b.iter().zip(&t).take_while(|(x, y)| x == y).count();
    let mut out = std::path::PathBuf::new();
    for _ in common..b.len() {
        out.push("..");
    }
    for c in &t[common..] {
        out.push(c.as_os_str());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One snapshot: an 8-GPU gang that fits only on two NC96 VMs in eastus, whose A100 family
    /// has no room (192 vCPUs needed), 24 hours before the horizon.
    fn snapshot_problem() -> solver::Problem {
        solver::Problem::from_json_str(
            r#"{"offers": [{"region": "eastus", "size": "Standard_NC96ads_A100_v4", "priority": "regular",
                 "gpu_model": "A100-80GB", "gpus_per_vm": 4, "vcpus_per_vm": 96,
                 "family": "standardNCADSA100v4Family", "price_per_hour": 14.7, "capacity_vms": 8}],
                "quotas": [{"region": "eastus", "pool": "standardNCADSA100v4Family", "vcpus": 0},
                           {"region": "eastus", "pool": "cores", "vcpus": 10000}],
                "jobs": [{"id": "big", "gpus": 8, "priority": 2, "duration_hours": 3.0}]}"#,
        )
        .expect("valid problem")
    }

    fn cand(region: &str, pool: &str, levels: &[u64]) -> Cand {
        Cand {
            region: region.into(),
            pool: QuotaPool::parse(pool),
            levels: levels.to_vec(),
            level: *levels.last().unwrap(),
            step: 96,
        }
    }

    /// A week that ends with `never_started` jobs that never ran and, like the tight-quota Philly
    /// week, more jobs running at the horizon the more work it starts.
    fn week(never_started: u64) -> WeekOutcome {
        WeekOutcome {
            jobs_submitted: 1000,
            jobs_completed: 700,
            jobs_pending_at_end: 300,
            jobs_never_started: never_started,
            wait_p50_hours: 0.0,
            wait_p95_hours: 0.0,
            wait_p99_hours: 0.0,
            waiting_gpu_hours: 0.0,
            waiting_weight_gpu_hours: 0.0,
            total_cost_usd: 0.0,
            gpu_hours: 0.0,
            cost_per_gpu_hour: None,
        }
    }

    #[test]
    fn advice_that_leaves_more_jobs_never_started_than_it_found_drops_the_increase_behind_them() {
        let base = week(216);
        // Two increases, both saving waiting; with both, 237 jobs never start. Without the first
        // (the larger gain) 214 never start, without the second 240.
        let (with_both, without_0, without_1) = (week(237), week(214), week(240));
        let without = [&without_0, &without_1];
        assert_eq!(kept_increases(&base, &with_both, &without, &[900.0, 100.0], 5), (vec![1], Some(0)));
        // Fewer never started than found: both stay, best first.
        assert_eq!(kept_increases(&base, &week(210), &without, &[100.0, 900.0], 5), (vec![1, 0], None));
        // As many as found is not more.
        assert_eq!(kept_increases(&base, &week(216), &without, &[900.0, 100.0], 5), (vec![0, 1], None));
        // One that buys nothing goes first; the week is confirmed again before judging the rest.
        assert_eq!(kept_increases(&base, &with_both, &without, &[900.0, 0.0], 5), (vec![0], None));
        // Ties on what never starts: the one that buys the least goes.
        let same = [&without_0, &without_0];
        assert_eq!(kept_increases(&base, &with_both, &same, &[900.0, 100.0], 5), (vec![0], Some(1)));
    }

    #[test]
    fn jobs_still_running_at_the_horizon_are_work_placed_not_work_left_waiting() {
        // The tight-quota Philly week: with the increase 237 jobs are open at the horizon against
        // 214 as configured, because more long jobs started and still run; fewer never started.
        let mut base = week(200);
        base.jobs_pending_at_end = 214;
        let mut with_it = week(150);
        with_it.jobs_pending_at_end = 237;
        let without = week(200);
        assert_eq!(kept_increases(&base, &with_it, &[&without], &[5_000.0], 5), (vec![0], None));
    }

    #[test]
    fn an_alternative_is_the_set_of_pools_named_most_often_with_none_advised() {
        let pools = |v: &[(&str, &str)]| v.iter().map(|(r, p)| (r.to_string(), p.to_string())).collect::<Vec<_>>();
        let mut e = PoolEvidence::default();
        let fam = "standardNCADSA100v4Family";
        // Named three times: westus3's family with its cores; twice: eastus's family alone;
        // four times: a set with a pool already advised.
        e.alternatives
            .insert(pools(&[("westus3", fam), ("westus3", "cores")]), vec![vec![96, 48], vec![192, 96], vec![96, 96]]);
        e.alternatives.insert(pools(&[("eastus", fam)]), vec![vec![96], vec![96]]);
        e.alternatives.insert(pools(&[("eastus2", "cores")]), vec![vec![96]; 4]);
        let advised: BTreeSet<(String, String)> = [("eastus2".to_string(), "cores".to_string())].into();
        let alt = alternative(&e, &advised).expect("one");
        assert_eq!(
            alt,
            vec![("westus3".to_string(), QuotaPool::parse(fam), 192), ("westus3".to_string(), QuotaPool::Cores, 96)],
            "the whole set, each pool at the 90th percentile of what was asked"
        );
        let all: BTreeSet<(String, String)> = [("westus3", fam), ("eastus", fam), ("eastus2", "cores")]
            .iter()
            .map(|(r, p)| (r.to_string(), normalize_family(p)))
            .collect();
        assert_eq!(alternative(&e, &all), None);
    }

    #[test]
    fn a_probe_is_worth_the_waiting_it_saves_until_the_horizon() {
        let end = 100 * 3_600_000;
        let mut probes = Probes::new(vec![(snapshot_problem(), end - 24 * 3_600_000)], end, 4);
        assert_eq!(probes.base, 0.0, "nothing fits as the snapshot was");
        let raised = [("eastus".to_string(), QuotaPool::parse("standardNCADSA100v4Family"), 192)];
        // Priority 2 × 8 GPUs × the 24 hours the job would otherwise have waited at most.
        assert_eq!(probes.gain(&raised), 2.0 * 8.0 * 24.0);
    }

    #[test]
    fn a_dropped_increase_makes_room_for_the_next_pool_that_helps_at_its_smallest_level() {
        let end = 48 * 3_600_000;
        let mut probes = Probes::new(vec![(snapshot_problem(), 0)], end, 4);
        let options = WeekAdviceOptions { max_recommendations: 2, ..WeekAdviceOptions::default() };
        // The first spare adds nothing on the probes (no offer draws from it): passed over. The
        // second places the job from 192 vCPUs on; 96 would not, 288 is more than it needs.
        let mut spares: std::collections::VecDeque<Cand> =
            [cand("westus3", "cores", &[96, 192]), cand("eastus", "standardNCADSA100v4Family", &[96, 192, 288])]
                .into_iter()
                .collect();
        let mut cands = vec![cand("eastus", "lowPriorityCores", &[96])];
        refill(&mut cands, &mut spares, 1, &mut probes, &options);
        let got: Vec<(String, String, u64)> =
            cands.iter().map(|c| (c.region.clone(), c.pool.name().to_string(), c.level)).collect();
        assert_eq!(
            got,
            [
                ("eastus".to_string(), "lowPriorityCores".to_string(), 96),
                ("eastus".to_string(), "standardNCADSA100v4Family".to_string(), 192)
            ]
        );
        assert!(spares.is_empty());
        // No room left: nothing more is tried.
        let mut more: std::collections::VecDeque<Cand> =
            [cand("eastus", "standardNCADSA100v4Family", &[96])].into_iter().collect();
        refill(&mut cands, &mut more, 1, &mut probes, &options);
        assert_eq!((cands.len(), more.len()), (2, 1));
    }
}
