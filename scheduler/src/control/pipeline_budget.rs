//! A pipeline's `budget` for the whole, held by the loop from its jobs' links
//! ([`PipelineLink::budget_usd`](crate::model::PipelineLink)):
//! - placing: a stage's budget handed to the solver is at most what the pipeline leaves it: the
//!   budget less what every stage has spent, what the live fleets of its other stages will still
//!   cost, and a reserve for the stages not yet started (each one's cheapest expected cost), so an
//!   early stage cannot spend what later stages need;
//! - running: once the pipeline's jobs have spent the budget (each job's `cost_usd`, egress
//!   included), its unfinished jobs end failed, "pipeline budget of $X exhausted", and the fleets
//!   of those running are deleted (the path of a job's own budget).

use std::collections::BTreeMap;

use super::demand::Held;
use super::snapshot::Snapshot;
use crate::catalog::Catalog;
use crate::model::{Job, JobSpec, JobState, Offer, Priority};

/// Why a pipeline's unfinished jobs end when it has spent its budget.
pub fn exhausted_reason(budget: f64) -> String {
    format!("pipeline budget of ${budget:.2} exhausted")
}

/// The budget of `job`'s pipeline and what the pipeline has spent, `job` counted at `cost` (what it
/// has cost after this round's accrual); `None` when the job's pipeline has no budget.
pub(crate) fn spent_with(snap: &Snapshot, job: &Job, cost: f64) -> Option<(f64, f64)> {
    let link = job.pipeline.as_ref()?;
    let budget = link.budget_usd?;
    let ended = snap.pipeline_ended_usd.get(&link.pipeline_id).copied().unwrap_or(0.0);
    let others: f64 = siblings(snap, job).map(|j| j.cost_usd).sum();
    Some((budget, ended + others + cost))
}

/// Why `job` ends now, when its pipeline (with `job` at `cost`) has spent its budget.
pub(crate) fn exhausted(snap: &Snapshot, job: &Job, cost: f64) -> Option<String> {
    let (budget, spent) = spent_with(snap, job, cost)?;
    (spent >= budget).then(|| exhausted_reason(budget))
}

/// The other jobs of `job`'s pipeline the snapshot holds (its open ones, and any ended one whose
/// fleet is still being deleted).
fn siblings<'a>(snap: &'a Snapshot, job: &'a Job) -> impl Iterator<Item = &'a Job> + 'a {
    let pipeline_id = job.pipeline.as_ref().map(|l| l.pipeline_id.as_str());
    snap.jobs
        .values()
        .map(|j| &**j)
        .filter(move |j| j.id != job.id && j.pipeline.as_ref().map(|l| l.pipeline_id.as_str()) == pipeline_id)
}

/// The least a job not yet started is expected to cost, USD: its GPUs on the cheapest listed offer
/// it accepts (size, region, spot policy), for its `duration_hours`. Capacity is not asked: the
/// reserve is for what the stage will need whenever it runs. 0 without `duration_hours` or an
/// offer (nothing is known to reserve).
pub(crate) fn cheapest_expected_usd(job: &Job, catalog: &Catalog, offers: &[Offer]) -> f64 {
    let prices = offers.iter().map(|o| (o.region.as_str(), o.size.as_str(), o.priority, o.price_per_hour));
    cheapest_spec_usd(&job.spec, catalog, prices)
}

/// [`cheapest_expected_usd`] for a spec not yet a job, over `prices` as (region, size, priority,
/// USD per VM-hour when sold): what a what-if workload sets a pipeline's budget from.
pub fn cheapest_spec_usd<'a>(
    spec: &JobSpec,
    catalog: &Catalog,
    prices: impl IntoIterator<Item = (&'a str, &'a str, Priority, Option<f64>)>,
) -> f64 {
    let Some(hours) = spec.duration_hours else { return 0.0 };
    let sizes = spec.acceptable_sizes(catalog);
    let regions = spec.allowed_regions(catalog);
    let policy = spec.spot_policy();
    let gpus = spec.wanted_gpus();
    prices
        .into_iter()
        .filter(|(region, ..)| regions.iter().any(|r| r == region))
        .filter(|(_, _, priority, _)| policy.priorities().contains(priority))
        .filter_map(|(_, size, _, price)| {
            let size = sizes.iter().find(|s| s.name == size)?;
            let vms = gpus.div_ceil(size.gpus.max(1));
            Some(f64::from(vms) * price?)
        })
        .min_by(f64::total_cmp)
        .map_or(0.0, |per_hour| per_hour * hours)
}

/// What `job`'s pipeline leaves its placement, USD (at least 0): the budget less what the
/// pipeline has spent, what the live fleets of all its stages will still cost (`held`, by job id:
/// each job's price per hour over its remaining hours), and the cheapest expected cost of each
/// other stage not yet started. `None` when the pipeline has no budget.
pub(crate) fn left_for(
    snap: &Snapshot,
    job: &Job,
    held: &BTreeMap<&str, Held>,
    catalog: &Catalog,
    offers: &[Offer],
) -> Option<f64> {
    let (budget, spent) = spent_with(snap, job, job.cost_usd)?;
    let committed = |j: &Job| held.get(j.id.as_str()).map_or(0.0, |h| h.committed_usd(j));
    let not_started = |j: &&Job| j.state == JobState::Pending && j.attempts == 0;
    let others = siblings(snap, job);
    let (waiting, placed): (Vec<&Job>, Vec<&Job>) = others.partition(not_started);
    let reserve: f64 = waiting.iter().map(|j| cheapest_expected_usd(j, catalog, offers)).sum();
    let committed: f64 = committed(job) + placed.iter().map(|j| committed(j)).sum::<f64>();
    Some((budget - spent - committed - reserve).max(0.0))
}

/// Caps a job's solver demands at what its pipeline leaves it (`left`, USD), shared by the parts
/// pro rata to their GPUs as a job's own budget is. The part's `held_cost` becomes what the
/// pipeline has otherwise spent or set aside, so the solver's reason states the pipeline's budget.
pub(crate) fn cap(demands: &mut [solver::JobDemand], left: f64, budget: f64) {
    let gpus: u32 = demands.iter().map(|d| d.gpus).sum();
    for d in demands {
        let share = f64::from(d.gpus) / f64::from(gpus.max(1));
        let ours = left * share;
        if d.budget.is_none_or(|b| ours < b) {
            d.budget = Some(ours);
            d.held_cost = budget - ours;
        }
    }
}
