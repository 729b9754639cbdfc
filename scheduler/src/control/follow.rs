//! Decisions about attempts being provisioned: from what the cloud said of the create operation
//! (or of the fleet, when there is no operation to poll), the attempt keeps waiting, is created
//! again (its intent is on disk but the create never went out), reaches running, or has failed.
//! Pure: they read the snapshot and the loop's memory and return actions.

use super::LoopState;
use super::actions::{Action, Change, JobEdit};
use super::error_policy::{self, Tried};
use super::snapshot::{Seen, Snapshot};
use super::world::our_usage;
use crate::accounting;
use crate::cloud::{CloudError, Fleet, OperationStatus, ProvisioningState, ScaleSet};
use crate::model::{Attempt, AttemptState};

/// What to do about one attempt being provisioned.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FollowUp {
    /// Nothing this round.
    Wait,
    /// Look again no sooner than this many milliseconds from now.
    LookAgainIn(i64),
    /// The intent is on disk but no fleet exists: ask for it again (the name is deterministic, so
    /// this cannot make a twin).
    Create,
    /// The fleet reached its minimum with this many VMs running.
    Running(u32),
    /// The creation failed for this (classified) reason.
    Failed(CloudError),
}

/// Reads what the cloud said of an attempt being provisioned.
pub(crate) fn follow_up(a: &Attempt, seen: Option<&Seen>) -> FollowUp {
    let Some(seen) = seen else { return FollowUp::Wait };
    // A mixed fleet counts its spot part in `running_vms` and its regular part beside it.
    let running = |fleet: &Option<Result<Fleet, CloudError>>| match fleet {
        Some(Ok(f)) => running_of(a, f),
        _ => a.vms,
    };
    match &seen.operation {
        Some(Ok(OperationStatus::InProgress { retry_after_ms })) if *retry_after_ms > 0 => {
            FollowUp::LookAgainIn(i64::try_from(*retry_after_ms).unwrap_or(i64::MAX))
        }
        Some(Ok(OperationStatus::InProgress { .. })) => FollowUp::Wait,
        Some(Ok(OperationStatus::Succeeded)) => FollowUp::Running(running(&seen.fleet)),
        Some(Ok(OperationStatus::Failed(err))) => FollowUp::Failed(err.clone()),
        Some(Err(CloudError::NotFound { .. })) => from_fleet(a, seen),
        Some(Err(e)) => error_policy::requeue_after_ms(e).map_or(FollowUp::Wait, FollowUp::LookAgainIn),
        None => match &seen.fleet {
            Some(Err(CloudError::NotFound { .. })) => FollowUp::Create,
            Some(Err(e)) => error_policy::requeue_after_ms(e).map_or(FollowUp::Wait, FollowUp::LookAgainIn),
            Some(Ok(_)) => from_fleet(a, seen),
            None => FollowUp::Wait,
        },
    }
}

/// VMs the fleet runs for the attempt, both parts of a mixed fleet (what the cloud cannot tell
/// counted as asked).
fn running_of(a: &Attempt, f: &Fleet) -> u32 {
    let regular = a.regular.map_or(0, |r| r.vms);
    f.running_vms.unwrap_or(a.vms - regular)
        + a.regular.map_or(0, |r| f.regular.and_then(|p| p.running_vms).unwrap_or(r.vms))
}

/// Where a fleet stands when there is no operation to poll: its provisioning state, and, if it
/// failed, the classified error of its first failed scale set.
fn from_fleet(a: &Attempt, seen: &Seen) -> FollowUp {
    match &seen.fleet {
        Some(Ok(f)) => match f.provisioning_state {
            ProvisioningState::Succeeded => FollowUp::Running(running_of(a, f)),
            ProvisioningState::Failed | ProvisioningState::Canceled => {
                let err = match &seen.scale_sets {
                    Some(Ok(sets)) => sets.iter().find_map(|s: &ScaleSet| s.error.clone()),
                    _ => None,
                };
                FollowUp::Failed(err.unwrap_or(CloudError::Capacity {
                    region: a.region.clone(),
                    size: Some(a.size.clone()),
                    priority: Some(a.priority),
                    zone: None,
                }))
            }
            _ => FollowUp::Wait,
        },
        Some(Err(CloudError::NotFound { .. })) => FollowUp::Failed(CloudError::Transient {
            message: format!("fleet {} vanished while being created", a.fleet_name),
        }),
        _ => FollowUp::Wait,
    }
}

/// An attempt reached running with `running_vms` VMs: the attempt and the job's state, and which
/// of the job's other placements it retires (make before break: degraded ones, those whose agents
/// reported trouble, and the one a deadline policy moved the job away from). Records the breaker's success.
pub(crate) fn became_running(
    snap: &Snapshot,
    st: &mut LoopState,
    a: &Attempt,
    running_vms: u32,
    grace_ms: i64,
) -> (Change, Vec<Attempt>) {
    let now = snap.now;
    let mut a = a.clone();
    a.state = AttemptState::Running;
    a.running_since_ms = Some(now);
    a.accounted_until_ms = Some(now);
    a.running_vms = running_vms;
    // A mixed fleet reaches its minimum with each part at its own: the regular part is counted
    // full (the watch step reads the parts from the next look on).
    if let Some(r) = a.regular.as_mut() {
        r.running_vms = r.vms.min(running_vms);
    }
    a.operation = None;
    st.breakers.record_success(&a.region, now);
    let siblings: Vec<&Attempt> =
        snap.attempts_of(&a.job_id).filter(|x| x.number != a.number && x.is_active()).collect();
    // A gang is placed again only when none of its placements was healthy, so a gang's new fleet
    // replaces all the others (one that refilled meanwhile too: a gang needs one fleet). A
    // splittable job's fleet below its minimum keeps its share; the new one tops it up. A fleet
    // whose agents reported trouble, or that a deadline policy moves the job away from, goes.
    let gang = snap.jobs.get(&a.job_id).is_some_and(|j| j.spec.is_gang());
    let replaced_by_a = |x: &Attempt| {
        (gang && (x.state == AttemptState::Running || super::is_degraded(x, now, grace_ms)))
            || snap.has_agent_trouble(x)
            || st.deadline.replaces(&a, x)
    };
    let all_running = siblings.iter().filter(|x| !replaced_by_a(x)).all(|x| x.state == AttemptState::Running);
    let retired: Vec<Attempt> = if all_running {
        siblings.iter().filter(|x| replaced_by_a(x)).map(|x| (*x).clone()).collect()
    } else {
        Vec::new()
    };
    let mut message =
        format!("attempt {} is running: {} × {} ({}) in {}", a.number, a.running_vms, a.size, a.priority, a.region);
    // The input moves now that VMs read it: its egress is billed once, as the job's cost and its
    // tenant's spend.
    let egress_usd = a.egress_usd;
    let mut spend = None;
    if egress_usd > 0.0 {
        a.cost_usd = accounting::with_egress(a.cost_usd, egress_usd);
        message.push_str(&format!("; egress ${egress_usd:.2} billed for its input"));
        spend = snap.jobs.get(&a.job_id).map(|j| (j.spec.tenant.clone(), egress_usd));
    }
    let change = Change {
        job: Some((a.job_id.clone(), JobEdit::BecameRunning { all_running, message, egress_usd })),
        attempts: vec![a],
        spend,
        ..Change::default()
    };
    (change, retired)
}

/// An attempt failed to provision with `err`: it fails, its offer is blocked as the error policy
/// says, a quota refusal marks the pool full, the breaker counts what says something about the
/// region, the job is placed again, and the fleet (a failed fleet is still a resource) is deleted.
pub(crate) fn failed(snap: &Snapshot, st: &mut LoopState, a: &Attempt, err: &CloudError) -> Vec<Action> {
    let now = snap.now;
    let v = error_policy::verdict(err, Tried { region: &a.region, size: &a.size, priority: a.priority }, now);
    if let CloudError::Quota { region, pool, .. } = err {
        let ours = our_usage(snap.active().filter(|x| x.fleet_name != a.fleet_name));
        st.world.mark_pool_full(region, pool, &ours);
    }
    if v.counts_against_region && st.breakers.record_failure(&a.region, now) {
        tracing::warn!(region = %a.region, "region marked unhealthy after repeated failures");
    }
    if let Some(b) = &v.block {
        st.world.add_block(b.clone());
    }
    let class = err.class();
    let mut failed = a.clone();
    failed.state = AttemptState::Failed;
    failed.ended_at_ms = Some(now);
    failed.failure = Some(err.to_string());
    failed.failure_class = Some(class);
    failed.operation = None;
    let edit = JobEdit::ProvisioningFailed {
        last_failure: format!("{} {} in {}: {}", a.size, a.priority, a.region, err),
        region: a.region.clone(),
        others_active: snap.others_active(&a.job_id, a.number),
        message: format!(
            "attempt {} ({} × {} {} in {}) failed: {}",
            a.number, a.vms, a.size, a.priority, a.region, err
        ),
        class: class.as_str(),
    };
    let change = Change {
        attempts: vec![failed],
        job: Some((a.job_id.clone(), edit)),
        blocks: v.block.into_iter().collect(),
        ..Change::default()
    };
    vec![Action::Record(change), Action::Delete { fleet: a.fleet_name.clone(), then: None }]
}
