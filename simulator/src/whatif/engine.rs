//! The engine: discrete events in virtual time. Events are job arrivals, scheduled cloud changes
//! (outages, capacity, eviction rates, quota) and trace-driven changes; a reconcile round runs at
//! every multiple of `interval_seconds` from the start while anything is open. When nothing is
//! open (no job waiting or running), the clock jumps to the round before the next event.
//!
//! Each policy runs alone, from the same scenario, against a fresh `SimCloud`, clock and store:
//! - `spillway` and `regular-only`: the production `Controller` (`auto_complete: true`,
//!   `durable: false`), driven through the `Cloud` and `Clock` traits, with jobs submitted through
//!   `JobService::submit_with_id`. `regular-only` submits every job with `spot = "never"`.
//!   The store lives in memory (`Store::in_memory`): the same tables, indexes and transactions as a
//!   server's, without a disk that nobody would read after the run.
//!   Finished jobs (final, no fleet left) are archived out of the throwaway store after each round:
//!   their outcome is recorded and their records deleted, as a retention policy would, so a round
//!   costs what the open work costs and not what the history does.
//! - `greedy-failover`, `skypilot-like` and `single-region`: the brokers of [`super::baselines`].
//!
//! Cost over time is integrated per round from the running fleets at the rate the control loop
//! accounts them (VMs running at the last look × price), so it matches the jobs' billed cost.

use std::sync::Arc;
use std::time::Instant;

use scheduler::clock::ManualClock;
use scheduler::cloud::Cloud;
use scheduler::model::{Priority, QuotaPool};
use state::Store;

use super::WhatIfError;
use super::baselines::Broker;
use super::driver::{Driver, RoundState};
use super::loop_driver::LoopDriver;
use super::report::{
    Failover, JobOutcome, OutageWindow, Outcome, PolicyReport, PolicyRun, PolicySeries, Report, percentile,
};
use super::scenario::{EventAction, Policy, Scenario, TraceKind};
use super::workload::{TraceJob, load_workload};
use crate::sim_cloud::SimCloud;

/// How to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOptions {
    /// Measure wall time (`wall_ms`); off gives byte-identical JSON across runs.
    pub timing: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions { timing: true }
    }
}

/// A change to the simulated cloud at a time.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CloudChange {
    Outage { region: String, size: Option<String>, priority: Option<Priority>, on: bool },
    Capacity { region: String, size: String, priority: Priority, vms: u32 },
    EvictionRate { region: String, size: String, rate: f64 },
    Quota { region: String, pool: QuotaPool, vcpus: u64 },
    Price { region: String, size: String, priority: Priority, usd: f64 },
}

impl CloudChange {
    fn apply(&self, cloud: &SimCloud) -> Result<(), WhatIfError> {
        let r = match self {
            CloudChange::Outage { region, size, priority, on } => {
                cloud.set_outage(region, size.as_deref(), *priority, *on)
            }
            CloudChange::Capacity { region, size, priority, vms } => cloud.set_capacity(region, size, *priority, *vms),
            CloudChange::EvictionRate { region, size, rate } => cloud.set_eviction_rate(region, size, *rate),
            CloudChange::Quota { region, pool, vcpus } => cloud.set_quota_limit(region, pool, *vcpus),
            CloudChange::Price { region, size, priority, usd } => cloud.set_price(region, size, *priority, *usd),
        };
        r.map_err(|e| WhatIfError::Control(format!("cannot apply {self:?} to the simulated cloud: {e}")))
    }
}

/// Every cloud change of a scenario, in time order (absolute ms), and the outage windows.
/// Cloud changes at absolute times, in order.
pub(crate) type Timeline = Vec<(i64, CloudChange)>;

pub(crate) fn cloud_timeline(s: &Scenario) -> Result<(Timeline, Vec<OutageWindow>), WhatIfError> {
    let mut out: Vec<(i64, CloudChange)> = Vec::new();
    let mut windows = Vec::new();
    let horizon_h = s.horizon_ms as f64 / 3_600_000.0;
    let catalog = s.catalog();
    for e in &s.events {
        let at = s.start_ms + e.at_ms;
        let until = e.until_ms.map(|u| s.start_ms + u);
        match &e.action {
            EventAction::Outage { region, sizes, priority } => {
                let scopes: Vec<Option<String>> =
                    if sizes.is_empty() { vec![None] } else { sizes.iter().cloned().map(Some).collect() };
                for size in scopes {
                    out.push((
                        at,
                        CloudChange::Outage {
                            region: region.clone(),
                            size: size.clone(),
                            priority: *priority,
                            on: true,
                        },
                    ));
                    if let Some(u) = until {
                        out.push((
                            u,
                            CloudChange::Outage { region: region.clone(), size, priority: *priority, on: false },
                        ));
                    }
                }
                let what = if sizes.is_empty() { "all sizes".to_string() } else { sizes.join(", ") };
                windows.push(OutageWindow {
                    from_hours: e.at_ms as f64 / 3_600_000.0,
                    until_hours: e.until_ms.map_or(horizon_h, |u| u as f64 / 3_600_000.0).min(horizon_h),
                    label: format!("{region} {what}{}", priority.map(|p| format!(" ({p})")).unwrap_or_default()),
                });
            }
            EventAction::Capacity { region, size, priority, vms } => {
                out.push((
                    at,
                    CloudChange::Capacity {
                        region: region.clone(),
                        size: size.clone(),
                        priority: *priority,
                        vms: *vms,
                    },
                ));
                if let Some(u) = until {
                    let base = s.cloud.capacity_vms(region, size, *priority);
                    out.push((
                        u,
                        CloudChange::Capacity {
                            region: region.clone(),
                            size: size.clone(),
                            priority: *priority,
                            vms: base,
                        },
                    ));
                }
            }
            EventAction::EvictionRate { region, sizes, rate } => {
                for size in sizes {
                    out.push((
                        at,
                        CloudChange::EvictionRate { region: region.clone(), size: size.clone(), rate: *rate },
                    ));
                    if let Some(u) = until {
                        let base = s.cloud.eviction_rate(region, size, Priority::Spot);
                        out.push((
                            u,
                            CloudChange::EvictionRate { region: region.clone(), size: size.clone(), rate: base },
                        ));
                    }
                }
            }
            EventAction::Quota { region, pool, vcpus } => {
                out.push((at, CloudChange::Quota { region: region.clone(), pool: pool.clone(), vcpus: *vcpus }));
                if let Some(u) = until {
                    let base = s.cloud.quota_limit(region, pool);
                    out.push((u, CloudChange::Quota { region: region.clone(), pool: pool.clone(), vcpus: base }));
                }
            }
            EventAction::Price { region, size, priority, usd } => {
                let change = |usd: f64| CloudChange::Price {
                    region: region.clone(),
                    size: size.clone(),
                    priority: *priority,
                    usd,
                };
                out.push((at, change(*usd)));
                if let Some(u) = until
                    && let Some(base) = catalog.price(size, region).and_then(|row| row.for_priority(*priority))
                {
                    out.push((u, change(base)));
                }
            }
        }
    }
    for t in &s.traces {
        let values = read_trace(&t.path)?;
        let gap_ms = values.0;
        let skip = (t.offset_hours * 3_600_000.0 / gap_ms as f64).round() as usize;
        let mut last: Option<f64> = None;
        for (k, v) in values.1.iter().skip(skip).enumerate() {
            let at_rel = k as i64 * gap_ms;
            if at_rel > s.horizon_ms {
                break;
            }
            let value = v * t.per_unit;
            if last == Some(value) {
                continue;
            }
            last = Some(value);
            let change = match t.kind {
                TraceKind::Capacity => CloudChange::Capacity {
                    region: t.region.clone(),
                    size: t.size.clone(),
                    priority: t.priority,
                    vms: value.round().max(0.0) as u32,
                },
                TraceKind::EvictionRate => {
                    CloudChange::EvictionRate { region: t.region.clone(), size: t.size.clone(), rate: value.max(0.0) }
                }
                TraceKind::Price => CloudChange::Price {
                    region: t.region.clone(),
                    size: t.size.clone(),
                    priority: t.priority,
                    usd: value.max(0.0),
                },
            };
            out.push((s.start_ms + at_rel, change));
        }
    }
    // Stable: changes at the same instant apply in file order.
    out.sort_by_key(|(t, _)| *t);
    Ok((out, windows))
}

/// Reads a spot trace (`{"metadata": {"gap_seconds": N}, "data": [...]}`): (gap ms, values).
fn read_trace(path: &std::path::Path) -> Result<(i64, Vec<f64>), WhatIfError> {
    #[derive(serde::Deserialize)]
    struct Meta {
        gap_seconds: f64,
    }
    #[derive(serde::Deserialize)]
    struct File {
        metadata: Meta,
        data: Vec<f64>,
    }
    let text = std::fs::read_to_string(path).map_err(|e| WhatIfError::io("spot trace", path, &e))?;
    let f: File = serde_json::from_str(&text).map_err(|e| WhatIfError::Io {
        what: "spot trace".into(),
        path: path.display().to_string(),
        reason: format!("not a spot trace ({{\"metadata\": {{\"gap_seconds\": N}}, \"data\": [...]}}): {e}"),
    })?;
    if !(f.metadata.gap_seconds.is_finite() && f.metadata.gap_seconds >= 1.0) || f.data.iter().any(|v| !v.is_finite()) {
        return Err(WhatIfError::Io {
            what: "spot trace".into(),
            path: path.display().to_string(),
            reason: "gap_seconds must be ≥ 1 and every value a number".into(),
        });
    }
    Ok(((f.metadata.gap_seconds * 1000.0) as i64, f.data))
}

/// Runs every policy of a scenario (async: call from a Tokio runtime).
pub async fn run_scenario(s: &Scenario, opts: &RunOptions) -> Result<Report, WhatIfError> {
    let jobs = load_workload(s)?;
    let (changes, outages) = cloud_timeline(s)?;
    let mut runs = Vec::new();
    for &p in &s.policies {
        runs.push(run_policy(s, p, &jobs, &changes, opts).await?);
    }
    Ok(Report {
        scenario: s.name.clone(),
        description: s.description.clone(),
        seed: s.seed,
        horizon_hours: s.horizon_ms as f64 / 3_600_000.0,
        regions: s.cloud.regions.clone(),
        outages,
        runs,
    })
}

/// Runs every policy of a scenario on a runtime of its own (for callers outside Tokio).
pub fn run_scenario_blocking(s: &Scenario, opts: &RunOptions) -> Result<Report, WhatIfError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| WhatIfError::Control(format!("cannot start a runtime: {e}")))?;
    rt.block_on(run_scenario(s, opts))
}

/// Sees the simulated cloud after every round of a run: what the quota advisor samples.
pub trait RoundObserver {
    /// Called after the round at `t_ms` (virtual Unix ms) with the cloud as the round left it.
    fn after_round(&mut self, t_ms: i64, cloud: &SimCloud);
}

/// Runs one policy.
pub(crate) async fn run_policy(
    s: &Scenario,
    policy: Policy,
    jobs: &[TraceJob],
    changes: &[(i64, CloudChange)],
    opts: &RunOptions,
) -> Result<PolicyRun, WhatIfError> {
    run_policy_observed(s, policy, jobs, changes, opts, None).await
}

/// Runs one policy, showing the cloud to `observer` after every round.
pub(crate) async fn run_policy_observed(
    s: &Scenario,
    policy: Policy,
    jobs: &[TraceJob],
    changes: &[(i64, CloudChange)],
    opts: &RunOptions,
    mut observer: Option<&mut dyn RoundObserver>,
) -> Result<PolicyRun, WhatIfError> {
    let started = Instant::now();
    let catalog = s.catalog();
    let clock = Arc::new(ManualClock::new(s.start_ms));
    let cloud = Arc::new(
        SimCloud::new(s.cloud.clone(), catalog.clone(), clock.clone())
            .map_err(|errors| WhatIfError::Invalid { origin: s.origin.clone(), errors })?,
    );
    let mut driver = match policy {
        Policy::Spillway | Policy::RegularOnly => {
            let store = Store::in_memory().map_err(|e| WhatIfError::Store(e.to_string()))?;
            PolicyDriver::Loop(LoopDriver::new(
                store,
                cloud.clone() as Arc<dyn Cloud>,
                clock.clone(),
                Arc::new(catalog),
                policy == Policy::RegularOnly,
            ))
        }
        Policy::GreedyFailover | Policy::SkypilotLike | Policy::SingleRegion => {
            PolicyDriver::Broker(Broker::new(policy, cloud.clone() as Arc<dyn Cloud>, clock.clone(), catalog))
        }
    };
    let mut series = PolicySeries::default();
    for r in &s.cloud.regions {
        series.gpus_by_region.insert(r.clone(), Vec::new());
    }
    let end = s.start_ms + s.horizon_ms;
    let interval = s.interval_ms.max(1);
    let sample_every = (s.horizon_ms / 600).max(interval);
    let mut next_sample = s.start_ms;
    let (mut ai, mut ci) = (0usize, 0usize);
    let mut t = s.start_ms;
    let mut cost = 0.0;
    let mut gpu_hours = 0.0;
    let mut last = RoundState::default();
    let mut last_t = s.start_ms;
    while t <= end {
        // Arrivals and cloud changes due by this round, in time order (changes first on ties).
        loop {
            let next_change = changes.get(ci).map(|c| c.0).filter(|&x| x <= t);
            let next_arrival = jobs.get(ai).map(|j| s.start_ms + j.at_ms).filter(|&x| x <= t);
            match (next_change, next_arrival) {
                (Some(c), a) if a.is_none_or(|a| c <= a) => {
                    clock.set_ms(c);
                    changes[ci].1.apply(&cloud)?;
                    ci += 1;
                }
                (_, Some(a)) => {
                    clock.set_ms(a);
                    driver.submit(&jobs[ai]).await?;
                    ai += 1;
                }
                _ => break,
            }
        }
        clock.set_ms(t);
        let dt_h = (t - last_t) as f64 / 3_600_000.0;
        cost += last.cost_rate * dt_h;
        gpu_hours += last.gpu_rate * dt_h;
        last = driver.round().await?;
        if let Some(o) = observer.as_mut() {
            o.after_round(t, &cloud);
        }
        last_t = t;
        if t >= next_sample {
            series.hours.push((t - s.start_ms) as f64 / 3_600_000.0);
            series.cost_usd.push(cost);
            series.queue.push(driver.queue()?);
            for (r, v) in series.gpus_by_region.iter_mut() {
                v.push(last.gpus_by_region.get(r).copied().unwrap_or(0.0));
            }
            next_sample = t + sample_every;
        }
        let mut next = t + interval;
        if driver.idle() && last.cost_rate == 0.0 && last.gpu_rate == 0.0 {
            // Nothing open: jump to the last round at or before the next event.
            let upcoming =
                [jobs.get(ai).map(|j| s.start_ms + j.at_ms), changes.get(ci).map(|c| c.0)].into_iter().flatten().min();
            match upcoming {
                Some(e) => {
                    let k = (e - s.start_ms).div_euclid(interval);
                    next = next.max(s.start_ms + k * interval);
                }
                None => break,
            }
        }
        t = next;
    }
    driver.settle().await?;
    let (outcomes, failovers) = driver.finish(end)?;
    series.failovers = failovers;
    let counters = cloud.counters();
    let summary = summarize(
        policy,
        jobs,
        &outcomes,
        end,
        counters.creates_refused + counters.creates_failed,
        counters.evictions + counters.vms_lost_to_outages,
        gpu_hours,
        if opts.timing { started.elapsed().as_millis() as u64 } else { 0 },
    );
    drop(driver);
    Ok(PolicyRun { summary: summary.rounded(), series, jobs: outcomes, integrated_cost_usd: cost })
}

/// One policy's driver: the control loop or a baseline broker (one per run: its size does not matter).
#[allow(clippy::large_enum_variant)]
enum PolicyDriver {
    Loop(LoopDriver),
    Broker(Broker),
}

impl Driver for PolicyDriver {
    async fn submit(&mut self, job: &TraceJob) -> Result<(), WhatIfError> {
        match self {
            PolicyDriver::Loop(d) => d.submit(job).await,
            PolicyDriver::Broker(d) => d.submit(job).await,
        }
    }
    async fn round(&mut self) -> Result<RoundState, WhatIfError> {
        match self {
            PolicyDriver::Loop(d) => d.round().await,
            PolicyDriver::Broker(d) => d.round().await,
        }
    }
    fn queue(&self) -> Result<u64, WhatIfError> {
        match self {
            PolicyDriver::Loop(d) => d.queue(),
            PolicyDriver::Broker(d) => d.queue(),
        }
    }
    fn idle(&self) -> bool {
        match self {
            PolicyDriver::Loop(d) => d.idle(),
            PolicyDriver::Broker(d) => d.idle(),
        }
    }
    async fn settle(&mut self) -> Result<(), WhatIfError> {
        match self {
            PolicyDriver::Loop(d) => d.settle().await,
            PolicyDriver::Broker(d) => d.settle().await,
        }
    }
    fn finish(&mut self, end_ms: i64) -> Result<(Vec<JobOutcome>, Vec<Failover>), WhatIfError> {
        match self {
            PolicyDriver::Loop(d) => d.finish(end_ms),
            PolicyDriver::Broker(d) => d.finish(end_ms),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn summarize(
    policy: Policy,
    workload: &[TraceJob],
    jobs: &[JobOutcome],
    end: i64,
    failed_prov: u64,
    evictions: u64,
    gpu_hours: f64,
    wall_ms: u64,
) -> PolicyReport {
    let mut waits: Vec<f64> = jobs
        .iter()
        .map(|j| (j.first_running_ms.unwrap_or(end).min(end) - j.submitted_ms).max(0) as f64 / 3_600_000.0)
        .collect();
    waits.sort_by(f64::total_cmp);
    let count = |o: Outcome| jobs.iter().filter(|j| j.outcome == o).count() as u64;
    let deadline_misses = jobs
        .iter()
        .filter(|j| match j.deadline_ms {
            None => false,
            Some(d) => match j.outcome {
                Outcome::Completed => j.finished_ms.is_some_and(|f| f > d),
                Outcome::Failed => true,
                Outcome::Pending => d <= end,
            },
        })
        .count() as u64;
    PolicyReport {
        name: policy.name().to_string(),
        total_cost_usd: jobs.iter().map(|j| j.cost_usd).sum(),
        gpu_hours,
        jobs_submitted: jobs.len() as u64,
        jobs_completed: count(Outcome::Completed),
        jobs_failed: count(Outcome::Failed),
        jobs_pending_at_end: count(Outcome::Pending),
        wait_p50_hours: percentile(&waits, 50.0),
        wait_p95_hours: percentile(&waits, 95.0),
        wait_p99_hours: percentile(&waits, 99.0),
        deadline_misses,
        failed_provisioning_attempts: failed_prov,
        failovers: jobs.iter().map(|j| j.failovers as u64).sum(),
        evictions,
        lost_work_gpu_hours: jobs.iter().map(|j| j.lost_work_gpu_hours).sum(),
        wall_ms,
        pipelines: super::report::pipelines_report(workload, jobs, end),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim_cloud::SimCloudConfig;
    use scheduler::Catalog;
    use scheduler::clock::Clock;
    use scheduler::control::{ControlConfig, ControlMetrics, Controller};
    use scheduler::jobs::JobService;
    use scheduler::model::{JobSpec, SpecFormat};

    const A100_GANG: &str = r#"
name = "ft"
tenant = "research"
kind = "training"
gpus = 8
gpu_models = ["A100-80GB"]
sizes = ["Standard_NC96ads_A100_v4"]
regions = ["eastus"]
duration_hours = 2.0
"#;

    /// The engine's long traces lean on this: a round whose solver problem is the last one's (a job
    /// waiting for quota, nothing changed) reuses the plan rather than solving again, and a change
    /// (here, quota granted) is solved afresh and placed.
    #[tokio::test]
    async fn an_unchanged_problem_is_not_solved_again_and_a_change_is() {
        let mut cfg = SimCloudConfig::modest(["eastus"]);
        cfg.default_quota.cores = 800;
        cfg.default_quota.low_priority_cores = 800;
        cfg.default_quota.family = 0;
        let clock = Arc::new(ManualClock::new(1_800_000_000_000));
        let cloud = Arc::new(SimCloud::new(cfg, Catalog::builtin(), clock.clone()).expect("valid cloud"));
        let store = Store::in_memory().expect("store opens");
        let catalog = Arc::new(Catalog::builtin());
        let jobs = JobService::new(store.clone(), catalog.clone(), clock.clone() as Arc<dyn Clock>).without_flush();
        let ctl = Controller::new(
            store,
            cloud.clone() as Arc<dyn Cloud>,
            clock.clone() as Arc<dyn Clock>,
            catalog,
            ControlConfig { durable: false, ..ControlConfig::default() },
            ControlMetrics::unregistered(),
        );
        let spec = JobSpec::parse(A100_GANG, SpecFormat::Toml).expect("spec parses");
        let job = jobs.submit(spec, None).expect("accepted").job;

        let first = ctl.reconcile().await.expect("round");
        assert_eq!((first.placements, first.pending), (0, 1), "no A100 family quota: {first:?}");
        assert!(first.solve_ms > 0.0, "the first round solves: {first:?}");
        let reasons = jobs.get(&job.id).unwrap().unwrap().pending_reasons;
        assert!(!reasons.is_empty());

        clock.advance_ms(60_000);
        let second = ctl.reconcile().await.expect("round");
        assert_eq!((second.placements, second.pending), (0, 1), "{second:?}");
        assert_eq!(second.solve_ms, 0.0, "same problem, no second solve: {second:?}");
        assert_eq!(jobs.get(&job.id).unwrap().unwrap().pending_reasons, reasons, "the reused plan's reasons");

        cloud.set_quota_limit("eastus", &QuotaPool::Family("standardNCADSA100v4Family".into()), 400).unwrap();
        clock.advance_ms(ControlConfig::default().quota_refresh_ms);
        let third = ctl.reconcile().await.expect("round");
        assert!(third.solve_ms > 0.0, "quota changed, so the problem did: {third:?}");
        assert_eq!(third.placements, 1, "{third:?}");
    }
}
