//! Accounting: what running work costs, how much of its job it does, and what a loss of VMs takes
//! back. The one home of these rules for the control loop and the what-if baselines, so that a
//! what-if comparison measures the policies, not two bookkeepings.
//!
//! Accrual is linear between changes: over a stretch in which a fleet's VM count and price do not
//! change, the cost is `running VMs × price × hours`, and the progress `hours × fraction`, where the
//! fraction is what share of the job the running VMs carry (a gang does nothing unless all its VMs
//! run). A loss rolls the lost share of the work back to the job's last checkpoint.

const HOUR_MS: f64 = 3_600_000.0;

/// Hours between two instants given in Unix milliseconds (0 when `to` is not after `from`).
pub fn hours_between(from_ms: i64, to_ms: i64) -> f64 {
    (to_ms - from_ms).max(0) as f64 / HOUR_MS
}

/// What one fleet is and does, for accounting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FleetShare {
    /// VMs running now (at the last look).
    pub running_vms: u32,
    /// VMs the fleet was asked for.
    pub vms: u32,
    /// GPUs the fleet carries for its job when all its VMs run.
    pub gpus: u32,
    /// USD per VM-hour.
    pub price_per_vm: f64,
}

impl FleetShare {
    /// USD the fleet costs over `hours`: every running VM is billed, whether or not its job uses
    /// all its GPUs.
    pub fn cost_usd(&self, hours: f64) -> f64 {
        self.running_vms as f64 * self.price_per_vm * hours
    }

    /// The share of its job (0–1) the fleet does while it runs as it does now: all or nothing for a
    /// gang (see [`crate::model::JobSpec::is_gang`]), else the GPUs running over the GPUs the job
    /// wants.
    pub fn progress_fraction(&self, gang: bool, wanted_gpus: u32) -> f64 {
        if gang {
            if self.running_vms >= self.vms { 1.0 } else { 0.0 }
        } else {
            let gpus_per_vm = self.gpus as f64 / self.vms.max(1) as f64;
            (self.running_vms as f64 * gpus_per_vm / wanted_gpus.max(1) as f64).min(1.0)
        }
    }

    /// The share of its job (0–1) that losing `lost_vms` of the fleet's VMs stops: all of a gang,
    /// else the lost GPUs over the GPUs the job wants.
    pub fn lost_share(&self, gang: bool, lost_vms: u32, wanted_gpus: u32) -> f64 {
        if gang {
            1.0
        } else {
            let lost_gpus = lost_vms as f64 * self.gpus as f64 / self.vms.max(1) as f64;
            (lost_gpus / wanted_gpus.max(1) as f64).min(1.0)
        }
    }
}

/// How much of its own share each of a job's fleets does when they run together: 1 while the
/// fleets' shares (their [`FleetShare::progress_fraction`]s) add up to at most the whole job, else
/// the whole job spread over them. A job never progresses faster than at its full size, however
/// many GPUs it holds for a while (a fleet that refilled beside its top-up, two gang fleets during
/// a move).
pub fn overlap_scale(fractions_sum: f64) -> f64 {
    if fractions_sum > 1.0 { 1.0 / fractions_sum } else { 1.0 }
}

/// The GB of its job's input a placement of `gpus` of the job's `wanted_gpus` moves when it runs
/// away from the data: all of it for a gang (every rank reads the whole input), its GPUs' share
/// for a split job (sharded work), as the solver's egress term counts it; never more than all of
/// it (a placement whose VMs hold more GPUs than the job wants reads the input once).
pub fn moved_gb(data_gb: f64, gang: bool, gpus: u32, wanted_gpus: u32) -> f64 {
    if gang { data_gb } else { data_gb * (f64::from(gpus) / f64::from(wanted_gpus.max(1))).min(1.0) }
}

/// The GB of its job's input (`data_gb` in all) a placement of `gpus` of the job's `wanted_gpus`
/// moves to a region, and is billed for, when the job's earlier attempts already moved
/// `already_gb` there. Data moved once to a region is there: a later attempt of the job in that
/// region (after a loss, or a deadline policy's move back) reads it there and pays only for what
/// is not yet there, so that all the job's attempts together never pay for more than the whole
/// input per region. `already_gb` is the GB the job's earlier attempts that ran in the region were
/// billed (their `Attempt::egress_gb`), counted from the stored attempts so that it survives a
/// restart of the loop; an attempt that never ran moved nothing.
pub fn to_move_gb(data_gb: f64, gang: bool, gpus: u32, wanted_gpus: u32, already_gb: f64) -> f64 {
    moved_gb(data_gb, gang, gpus, wanted_gpus).min((data_gb - already_gb).max(0.0)).max(0.0)
}

/// The GB of its job's input the job's earlier attempts moved to `region`: the sum of what each of
/// them that ran there was billed ([`to_move_gb`]'s `already_gb`). `number` is the attempt being
/// placed, left out.
pub fn already_moved_gb<'a>(
    attempts: impl IntoIterator<Item = &'a crate::model::Attempt>,
    region: &str,
    number: u32,
) -> f64 {
    attempts
        .into_iter()
        .filter(|a| a.number != number && a.region == region && a.running_since_ms.is_some())
        .map(|a| a.egress_gb)
        .sum()
}

/// USD of moving `gb` at `usd_per_gb`: what the job (and its tenant's budget) pays for it.
pub fn egress_usd(gb: f64, usd_per_gb: f64) -> f64 {
    gb.max(0.0) * usd_per_gb.max(0.0)
}

/// A cost with the egress of a placement's input added. The input moves once, when the placement
/// first runs, and that egress is billed then to the attempt, to its job and to the job's tenant
/// alike, whatever the job's state by then: a job cancelled while its fleet was being created still
/// pays for the input that fleet moved once it ran, or its cost would fall short of its tenant's
/// spend.
pub fn with_egress(cost_usd: f64, egress_usd: f64) -> f64 {
    cost_usd + egress_usd.max(0.0)
}

/// Progress after `hours` at `fraction` of the job, never beyond the job's `duration_hours`.
pub fn advance(progress_hours: f64, hours: f64, fraction: f64, duration_hours: Option<f64>) -> f64 {
    let p = progress_hours + hours * fraction;
    match duration_hours {
        Some(d) => p.min(d),
        None => p,
    }
}

/// What a loss takes back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rollback {
    /// The job's progress after the loss, in hours of work at full size.
    pub progress_hours: f64,
    /// Hours of work (at full size) the loss took back: multiply by the job's GPUs for GPU-hours.
    pub lost_hours: f64,
}

/// Loses the work done since the last checkpoint for `share` of the job: checkpoints are taken
/// every `checkpoint_interval_minutes` of work (none: the work since the start is lost).
pub fn roll_back_to_checkpoint(progress_hours: f64, checkpoint_interval_minutes: Option<u32>, share: f64) -> Rollback {
    let interval_h = checkpoint_interval_minutes.map(|m| m as f64 / 60.0);
    let kept = match interval_h {
        Some(i) if i > 0.0 => (progress_hours / i).floor() * i,
        _ => 0.0,
    };
    let since_checkpoint = (progress_hours - kept).max(0.0);
    Rollback { progress_hours: progress_hours - since_checkpoint * share, lost_hours: since_checkpoint * share }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLEET: FleetShare = FleetShare { running_vms: 2, vms: 4, gpus: 8, price_per_vm: 3.0 };

    #[test]
    fn cost_bills_every_running_vm_and_a_gang_progresses_only_whole() {
        assert_eq!(FLEET.cost_usd(0.5), 3.0);
        assert_eq!(FLEET.progress_fraction(true, 8), 0.0, "a gang missing a VM does nothing");
        assert_eq!(FLEET.progress_fraction(false, 8), 0.5, "2 of 4 VMs carry half of 8 GPUs");
        assert_eq!(FleetShare { running_vms: 4, ..FLEET }.progress_fraction(true, 8), 1.0);
        assert_eq!(FLEET.progress_fraction(false, 2), 1.0, "never more than the whole job");
        assert_eq!(advance(1.0, 2.0, 0.5, Some(1.5)), 1.5, "never beyond the job's duration");
        assert_eq!(hours_between(7_200_000, 3_600_000), 0.0);
    }

    #[test]
    fn fleets_that_together_hold_more_than_the_job_do_the_job_once() {
        let a = FleetShare { running_vms: 16, vms: 16, gpus: 16, price_per_vm: 0.8 };
        let b = FleetShare { running_vms: 6, vms: 6, gpus: 6, price_per_vm: 0.8 };
        let sum = a.progress_fraction(false, 16) + b.progress_fraction(false, 16);
        let scale = overlap_scale(sum);
        let rate = (a.progress_fraction(false, 16) + b.progress_fraction(false, 16)) * scale;
        assert!((rate - 1.0).abs() < 1e-12, "22 GPUs for a 16-GPU job progress at full size, not {rate}");
        assert_eq!(overlap_scale(10.0 / 16.0), 1.0, "10 of 16 GPUs progress at 10/16");
    }

    #[test]
    fn data_moved_once_to_a_region_is_not_paid_for_again() {
        assert_eq!(to_move_gb(400.0, true, 8, 8, 0.0), 400.0, "the first move pays for all of a gang's input");
        assert_eq!(to_move_gb(400.0, true, 8, 8, 400.0), 0.0, "a later gang attempt there reads it there");
        assert_eq!(to_move_gb(400.0, false, 4, 8, 200.0), 200.0, "the other half of a split job is not there yet");
        assert_eq!(to_move_gb(400.0, false, 4, 8, 300.0), 100.0, "only what is missing");
        assert_eq!(to_move_gb(400.0, false, 16, 8, 0.0), 400.0, "never more than the input");
    }

    #[test]
    fn a_loss_rolls_its_share_back_to_the_last_checkpoint() {
        // 100 minutes done, checkpoints every 30: 10 minutes since the last one.
        let r = roll_back_to_checkpoint(100.0 / 60.0, Some(30), 1.0);
        assert!((r.progress_hours - 1.5).abs() < 1e-12 && (r.lost_hours - 1.0 / 6.0).abs() < 1e-12, "{r:?}");
        let half = roll_back_to_checkpoint(100.0 / 60.0, Some(30), FLEET.lost_share(false, 2, 8));
        assert!((half.lost_hours - 1.0 / 12.0).abs() < 1e-12, "{half:?}");
        assert_eq!(roll_back_to_checkpoint(2.0, None, 1.0).progress_hours, 0.0, "no checkpoints: all is lost");
        assert_eq!(FLEET.lost_share(true, 1, 8), 1.0, "a gang loses everything since its checkpoint");
    }
}
