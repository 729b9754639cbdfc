//! The tick engine and its cost accounting (the semantics are in the module doc of `spot_deadline`).

use serde::Serialize;

use scheduler::deadline::{Choice, DeadlinePolicy, RegionTick, TickView, policies};

use super::experiment::{Experiment, KIND};

/// What one run of one policy from one start offset did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunResult {
    /// Offset into the traces, hours.
    pub offset_hours: f64,
    /// Total USD: compute plus egress.
    pub cost: f64,
    /// USD for VM ticks (spot and regular, restart overheads included).
    pub compute_cost: f64,
    /// USD for moving the checkpoint between regions.
    pub egress_cost: f64,
    /// Hours from the start to the end of the work; `None` if it never finished within the traces.
    pub finish_hours: Option<f64>,
    /// Finished within `deadline_hours`.
    pub deadline_met: bool,
    /// Starts after the first one (after a preemption, a change of priority or of region).
    pub migrations: u32,
    /// Starts in a region other than the one holding the checkpoint.
    pub region_changes: u32,
    /// Spot VMs lost because their trace turned unavailable.
    pub preemptions: u32,
    /// Ticks billed on spot.
    pub spot_ticks: u32,
    /// Ticks billed on regular.
    pub regular_ticks: u32,
}

/// A policy broke the rules of the engine, or the run cannot start.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RunError {
    /// The policy picked something that does not exist at that tick.
    #[error("policy {policy} at tick {tick} of the run from {offset_hours} h chose {choice:?}: {reason}")]
    InvalidChoice {
        /// The policy.
        policy: String,
        /// Ticks since the run's start.
        tick: usize,
        /// The run's start offset.
        offset_hours: f64,
        /// What it chose.
        choice: Choice,
        /// Why that is not allowed.
        reason: String,
    },
    /// No policy of that name.
    #[error("unknown policy {0:?}; known: {known}", known = policies::NAMES.join(", "))]
    UnknownPolicy(String),
    /// The offset starts at or past the end of the traces.
    #[error("start offset {0} h is past the end of the traces")]
    OffsetPastTraces(f64),
}

fn ms(hours: f64) -> i64 {
    (hours * 3_600_000.0).round() as i64
}

/// Runs `policy` once from `offset_hours`, until the work is done or the shortest trace ends.
pub fn run_once(
    experiment: &Experiment,
    policy: &mut dyn DeadlinePolicy,
    offset_hours: f64,
) -> Result<RunResult, RunError> {
    let tick_ms = (experiment.tick_seconds * 1000.0).round() as i64;
    let tick_hours = experiment.tick_seconds / 3600.0;
    let job = &experiment.job;
    let (work_ms, deadline_ms, overhead_ms) =
        (ms(job.work_hours), ms(job.deadline_hours), ms(job.restart_overhead_hours));
    let start = experiment.start_tick(offset_hours);
    let horizon = experiment.horizon_ticks();
    if start >= horizon {
        return Err(RunError::OffsetPastTraces(offset_hours));
    }
    let mut result = RunResult {
        offset_hours,
        cost: 0.0,
        compute_cost: 0.0,
        egress_cost: 0.0,
        finish_hours: None,
        deadline_met: false,
        migrations: 0,
        region_changes: 0,
        preemptions: 0,
        spot_ticks: 0,
        regular_ticks: 0,
    };
    let mut progress_ms = 0i64;
    let mut running = Choice::Idle;
    let mut overhead_left_ms = 0i64;
    let mut checkpoint: Option<usize> = None;
    let mut starts = 0u32;
    let n = experiment.regions.len();
    let egress: Vec<f64> =
        (0..n).flat_map(|from| (0..n).map(move |to| experiment.egress_usd_per_gb(from, to))).collect();
    let mut regions: Vec<RegionTick<'_>> = Vec::with_capacity(n);

    for now in start..horizon {
        let tick = now - start;
        // A spot VM whose trace turns unavailable is lost at the start of the tick.
        if let Choice::Spot(r) = running
            && !experiment.regions[r].spot_available[now]
        {
            running = Choice::Idle;
            overhead_left_ms = 0;
            result.preemptions += 1;
        }
        regions.clear();
        regions.extend(experiment.regions.iter().map(|r| RegionTick {
            name: &r.name,
            regular_price: r.regular_price_per_hour,
            spot_price: r.spot_price_at(now),
            regular_available: r.regular_available,
            // The trace from its beginning up to and including now: never the future.
            spot_history: &r.spot_available[..=now],
            spot_observed: now as u64 + 1,
        }));
        let view = TickView {
            regions: &regions,
            egress_usd_per_gb: &egress,
            checkpoint_gb: job.checkpoint_gb,
            tick,
            tick_ms,
            work_ms,
            deadline_ms,
            overhead_ms,
            progress_ms,
            running,
            overhead_left_ms,
            // Progress is never lost in the experiment's semantics.
            spot_loss_ms: 0,
            checkpoint_region: checkpoint,
        };
        let choice = policy.choose(&view);
        let invalid = |reason: String| RunError::InvalidChoice {
            policy: policy.name().to_string(),
            tick,
            offset_hours,
            choice,
            reason,
        };
        if let Some(r) = choice.region() {
            let Some(region) = experiment.regions.get(r) else {
                return Err(invalid(format!("there are only {} regions", experiment.regions.len())));
            };
            match choice {
                Choice::Spot(_) if !region.spot_available[now] => {
                    return Err(invalid(format!("spot is not available in {} at this tick", region.name)));
                }
                Choice::Regular(_) if !region.regular_available => {
                    return Err(invalid(format!("{} has no regular capacity", region.name)));
                }
                _ => {}
            }
        }
        if choice != running {
            running = choice;
            overhead_left_ms = 0;
            if let Some(r) = choice.region() {
                starts += 1;
                overhead_left_ms = overhead_ms;
                if let Some(from) = checkpoint
                    && from != r
                {
                    result.egress_cost += job.checkpoint_gb * experiment.egress_usd_per_gb(from, r);
                    result.region_changes += 1;
                }
                checkpoint = Some(r);
            }
        }
        let Some(r) = running.region() else { continue };
        // Billed for the whole tick, whatever part of it was overhead or came after the finish.
        let price = match running {
            Choice::Spot(_) => {
                result.spot_ticks += 1;
                experiment.regions[r].spot_price_at(now)
            }
            _ => {
                result.regular_ticks += 1;
                experiment.regions[r].regular_price_per_hour
            }
        };
        result.compute_cost += price * tick_hours;
        let overhead = overhead_left_ms.min(tick_ms);
        overhead_left_ms -= overhead;
        let productive = tick_ms - overhead;
        if progress_ms + productive >= work_ms {
            let finish_ms = tick as i64 * tick_ms + overhead + (work_ms - progress_ms);
            result.finish_hours = Some(finish_ms as f64 / 3_600_000.0);
            result.deadline_met = finish_ms <= deadline_ms;
            break;
        }
        progress_ms += productive;
    }
    result.migrations = starts.saturating_sub(1);
    result.cost = result.compute_cost + result.egress_cost;
    Ok(result)
}

/// Runs the named policy from every start offset of the experiment.
pub fn run_policy(experiment: &Experiment, name: &str) -> Result<Vec<RunResult>, RunError> {
    experiment
        .start_offsets_hours
        .iter()
        .map(|&offset| {
            let mut policy = policies::make(name).ok_or_else(|| RunError::UnknownPolicy(name.to_string()))?;
            run_once(experiment, policy.as_mut(), offset)
        })
        .collect()
}

/// The output of `spillway simulate` for a `spot-deadline` experiment.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// Always `spot-deadline`.
    pub kind: &'static str,
    /// Runs per policy (one per start offset).
    pub runs: usize,
    /// One summary per policy, in the experiment's order.
    pub policies: Vec<PolicySummary>,
}

/// One policy's results over every run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicySummary {
    /// The policy.
    pub name: String,
    /// Mean total cost per run, USD (costs are rounded to micro-dollars).
    pub mean_cost: f64,
    /// Median (mean of the two middle runs when the count is even).
    pub median_cost: f64,
    /// 90th percentile, nearest rank: the `ceil(0.9·n)`-th cheapest run.
    pub p90_cost: f64,
    /// Fraction of runs that finished within the deadline.
    pub deadline_met_fraction: f64,
    /// Mean starts after the first one per run.
    pub mean_migrations: f64,
}

impl PolicySummary {
    /// Summarises the runs of one policy.
    pub fn from_runs(name: &str, runs: &[RunResult]) -> PolicySummary {
        let n = runs.len().max(1) as f64;
        let mut costs: Vec<f64> = runs.iter().map(|r| r.cost).collect();
        costs.sort_by(f64::total_cmp);
        let median = match costs.len() {
            0 => 0.0,
            len if len % 2 == 1 => costs[len / 2],
            len => (costs[len / 2 - 1] + costs[len / 2]) / 2.0,
        };
        let p90 = if costs.is_empty() { 0.0 } else { costs[((0.9 * costs.len() as f64).ceil() as usize).max(1) - 1] };
        // Micro-dollars: enough precision, without the float noise of summing hundreds of ticks.
        let usd = |v: f64| (v * 1e6).round() / 1e6;
        PolicySummary {
            name: name.to_string(),
            mean_cost: usd(costs.iter().sum::<f64>() / n),
            median_cost: usd(median),
            p90_cost: usd(p90),
            deadline_met_fraction: runs.iter().filter(|r| r.deadline_met).count() as f64 / n,
            mean_migrations: runs.iter().map(|r| f64::from(r.migrations)).sum::<f64>() / n,
        }
    }
}

/// Runs every policy of the experiment from every start offset.
pub fn run_experiment(experiment: &Experiment) -> Result<Report, RunError> {
    let mut policies = Vec::new();
    for name in &experiment.policies {
        let runs = run_policy(experiment, name)?;
        policies.push(PolicySummary::from_runs(name, &runs));
    }
    Ok(Report { kind: KIND, runs: experiment.start_offsets_hours.len(), policies })
}
