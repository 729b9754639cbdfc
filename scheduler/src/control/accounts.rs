//! The loop's bookkeeping on its records, by the rules of [`crate::accounting`]: accruing a running
//! attempt's cost and its job's progress up to a time, and rolling a job back to its checkpoint when
//! a fleet loses VMs.

use crate::accounting::{self, FleetShare};
use crate::model::{Attempt, AttemptState, Job};

/// What an attempt's fleet is, for accounting. A mixed fleet's VMs all carry the same share of the
/// job (one size); what they cost is each part's running VMs at its own price, so the price per
/// running VM is the blend of the two (each part's own price when the other runs nothing).
pub(crate) fn fleet_share(a: &Attempt) -> FleetShare {
    let price_per_vm = match a.regular {
        Some(_) if a.running_vms > 0 => a.running_usd_per_hour() / f64::from(a.running_vms),
        Some(r) if r.vms == a.vms => r.price_per_hour,
        _ => a.price_per_hour,
    };
    FleetShare { running_vms: a.running_vms, vms: a.vms, gpus: a.gpus, price_per_vm }
}

/// How much of its own share each running fleet of `job` does, given all the job's attempts
/// `attempts` holds (others are ignored): see [`accounting::overlap_scale`].
pub(crate) fn overlap_scale<'a>(job: &Job, attempts: impl IntoIterator<Item = &'a Attempt>) -> f64 {
    let (gang, wanted) = (job.spec.is_gang(), job.wanted_gpus());
    let sum: f64 = attempts
        .into_iter()
        .filter(|a| a.job_id == job.id && a.state == AttemptState::Running)
        .map(|a| fleet_share(a).progress_fraction(gang, wanted))
        .sum();
    accounting::overlap_scale(sum)
}

/// Accrues a running attempt's cost (on the attempt and the job) and its job's progress up to
/// `now` at its last known VM count; `scale` is the job's [`overlap_scale`] over that stretch.
/// Returns the USD accrued (the tenant's share to add).
pub(crate) fn accrue(a: &mut Attempt, job: &mut Job, now: i64, scale: f64) -> f64 {
    let Some(Accrual { cost, job_cost_usd, progress_hours }) = accrual(a, job, now, scale) else { return 0.0 };
    a.cost_usd += cost;
    job.cost_usd = job_cost_usd;
    job.progress_hours = progress_hours;
    a.accounted_until_ms = Some(now);
    cost
}

/// What [`accrue`] would write, without writing it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Accrual {
    /// USD accrued.
    pub cost: f64,
    /// The job's cost after it.
    pub job_cost_usd: f64,
    /// The job's progress after it (unchanged for a job in a final state).
    pub progress_hours: f64,
}

/// What accruing the attempt up to `now` gives ([`accrue`]); `None` when nothing is due.
pub(crate) fn accrual(a: &Attempt, job: &Job, now: i64, scale: f64) -> Option<Accrual> {
    let from = a.accounted_until_ms.or(a.running_since_ms).unwrap_or(now);
    if now <= from {
        return None;
    }
    let hours = accounting::hours_between(from, now);
    let fleet = fleet_share(a);
    let cost = fleet.cost_usd(hours);
    let progress_hours = if job.state.is_final() {
        job.progress_hours
    } else {
        let fraction = fleet.progress_fraction(job.spec.is_gang(), job.wanted_gpus()) * scale;
        accounting::advance(job.progress_hours, hours, fraction, job.spec.duration_hours)
    };
    Some(Accrual { cost, job_cost_usd: job.cost_usd + cost, progress_hours })
}

/// Loses the work done since the last checkpoint for what `lost_vms` of the attempt's VMs carried;
/// returns GPU-hours lost.
pub(crate) fn roll_back(job: &mut Job, a: &Attempt, lost_vms: u32) -> f64 {
    let share = fleet_share(a).lost_share(job.spec.is_gang(), lost_vms, job.wanted_gpus());
    let r = accounting::roll_back_to_checkpoint(job.progress_hours, job.spec.checkpoint_interval_minutes, share);
    job.progress_hours = r.progress_hours;
    let lost = r.lost_hours * job.wanted_gpus().max(1) as f64;
    job.lost_work_gpu_hours += lost;
    lost
}
