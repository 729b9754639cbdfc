//! Decisions that grow a job's fleet where it already runs (#24): a splittable job placed in the
//! region, priority and size of one of its healthy fleets gets that fleet's capacity raised (a PUT
//! of the new capacity on the same fleet), not a fleet beside it. On Azure each fleet is a resource
//! with its own scale sets; one fleet per job × region × priority × size keeps the job's attempt
//! count a count of real attempts. Pure: `act.rs` sends the resize, `snapshot.rs` polls it and
//! `watch.rs` applies what the cloud answered.

use super::LoopState;
use super::actions::{Change, JobEdit};
use super::error_policy::{self, Tried};
use super::snapshot::Snapshot;
use super::world::our_usage;
use crate::cloud::{CloudError, OperationStatus};
use crate::model::{Attempt, AttemptState, BlockedOffer, Capacity, EventKind, Job};
use crate::records::attempt_key;

/// The fleet of `job` that placement `p` grows, if any: a splittable job's running fleet (not one
/// a deadline policy manages: its policy moves whole placements; not inference replicas that run
/// a command, whose ranks are per attempt) in the placement's region, priority and size (a job
/// that runs work is elastic, [`crate::agents::decide::is_elastic`]: the new VMs join its world
/// and every rank starts again with the new `SPILLWAY_NUM_NODES`), at its full capacity (one below it is still asking the cloud for VMs), with
/// no operation in flight, not about to be replaced, whose spot max price covers the placement's
/// price, and that the cloud has not refused to resize for a reason no block covers. A mixed fleet
/// is not grown: its parts were asked for together, and a part that lost VMs is placed again.
pub(crate) fn fleet_to_grow<'a>(
    snap: &'a Snapshot,
    st: &LoopState,
    job: &'a Job,
    p: &solver::Placement,
    price: f64,
) -> Option<&'a Attempt> {
    let fixed_world = job.spec.runs_work() && !crate::agents::decide::is_elastic(job);
    if job.spec.is_gang() || fixed_world || super::deadline_choice::deadline_managed(job) || p.vms == 0 {
        return None;
    }
    snap.attempts_of(&job.id).find(|a| {
        a.state == AttemptState::Running
            && a.region == p.region
            && a.priority == p.priority
            && a.regular.is_none()
            && a.size == p.size
            && a.growing_to.is_none()
            && a.operation.is_none()
            && a.below_min_since_ms.is_none()
            && a.running_vms >= a.vms
            && !snap.has_agent_trouble(a)
            && !st.deadline.retiring(a)
            && a.max_price_per_vm.is_none_or(|m| m >= price)
            && !st.unresizable.contains(&attempt_key(&a.job_id, a.number))
    })
}

/// Fleet `a` grown by placement `p`'s VMs and GPUs: the attempt with the capacity it grows to and
/// the quota its new VMs hold, and the job's `resized` event. Written before the resize is sent,
/// so a restarted loop sends it again (a PUT of the same capacity is idempotent).
pub(crate) fn grow(a: &Attempt, p: &solver::Placement) -> Change {
    let mut grown = a.clone();
    let to = Capacity { vms: a.vms + p.vms, gpus: a.gpus + p.gpus };
    grown.vcpus = a.vcpus_per_vm() * u64::from(to.vms);
    grown.growing_to = Some(to);
    grown.min_vms = Some(a.min_vms.unwrap_or(a.vms));
    let message = format!(
        "attempt {} grows from {} to {} × {} {} in {} (+{} GPUs), fleet {}",
        a.number, a.vms, to.vms, a.size, a.priority, a.region, p.gpus, a.fleet_name
    );
    let edit = JobEdit::Grown {
        message,
        region: a.region.clone(),
        moving_to: format!("{} more {} in {}", p.vms, a.size, a.region),
    };
    Change { job: Some((a.job_id.clone(), edit)), attempts_with_job: vec![grown], ..Change::default() }
}

/// The cloud refused a growth at once: the attempt is back to what it has, the offer is blocked as
/// the error policy says (a quota refusal marks the pool full), and the job's event says why. A
/// refusal no block covers (a property the cloud will not change, another operation in progress)
/// keeps the loop from growing that fleet again: the job's next placement there gets its own.
pub(crate) fn refused(snap: &Snapshot, st: &mut LoopState, a: &Attempt, err: &CloudError) -> Change {
    let now = snap.now;
    let to = a.target();
    let block = settle_failure(snap, st, a, err, now);
    let mut back = a.clone();
    back.growing_to = None;
    back.operation = None;
    back.vcpus = a.vcpus_per_vm() * u64::from(a.vms);
    let event = (
        EventKind::Resized,
        format!("attempt {}: growing to {} VMs was refused: {err}; the fleet keeps {}", a.number, to.vms, a.vms),
    );
    Change {
        attempts: vec![back],
        job: Some((a.job_id.clone(), JobEdit::Note { event })),
        blocks: block.into_iter().collect(),
        ..Change::default()
    }
}

/// What the cloud answered about a growth in flight, applied to the running attempt `a`: done (or
/// the operation is no longer known: the fleet's own reading then says what runs) → the new
/// capacity counts from now on (what the fleet could not fill shows as VMs below it, like any
/// other); failed → the fleet keeps what it had and the offer is blocked. Returns the event and
/// the block, `None` while the operation runs or when there is none.
pub(crate) fn follow(
    snap: &Snapshot,
    st: &mut LoopState,
    a: &mut Attempt,
    status: Option<&Result<OperationStatus, CloudError>>,
) -> Option<((EventKind, String), Option<BlockedOffer>)> {
    let to = a.growing_to?;
    match status? {
        Ok(OperationStatus::Succeeded) | Err(CloudError::NotFound { .. }) => {
            let from = a.vms;
            a.vms = to.vms;
            a.gpus = to.gpus;
            a.growing_to = None;
            a.operation = None;
            let msg = format!("attempt {} grew from {from} to {} VMs ({} GPUs)", a.number, to.vms, to.gpus);
            Some(((EventKind::Resized, msg), None))
        }
        Ok(OperationStatus::Failed(err)) => {
            let block = settle_failure(snap, st, a, err, snap.now);
            a.vcpus = a.vcpus_per_vm() * u64::from(a.vms);
            a.growing_to = None;
            a.operation = None;
            let msg =
                format!("attempt {}: growing to {} VMs failed: {err}; the fleet keeps {}", a.number, to.vms, a.vms);
            Some(((EventKind::Resized, msg), block))
        }
        Ok(OperationStatus::InProgress { .. }) | Err(_) => None,
    }
}

/// The error policy's verdict on a failed growth, taken into the loop's view: the block (returned
/// to be recorded), a quota refusal's pool marked full, the region's breaker, and a refusal no
/// block covers remembered so the fleet is not grown again.
fn settle_failure(
    snap: &Snapshot,
    st: &mut LoopState,
    a: &Attempt,
    err: &CloudError,
    now: i64,
) -> Option<BlockedOffer> {
    let v = error_policy::verdict(err, Tried { region: &a.region, size: &a.size, priority: a.priority }, now);
    if let CloudError::Quota { region, pool, .. } = err {
        let ours = our_usage(snap.active().filter(|x| x.fleet_name != a.fleet_name));
        st.world.mark_pool_full(region, pool, &ours);
    }
    if v.counts_against_region {
        st.breakers.record_failure(&a.region, now);
    }
    if let Some(b) = &v.block {
        st.world.add_block(b.clone());
    }
    if v.block.is_none() && !matches!(err, CloudError::Quota { .. }) && !err.is_retryable() {
        st.unresizable.insert(attempt_key(&a.job_id, a.number));
    }
    v.block
}
