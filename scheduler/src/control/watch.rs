//! Decisions about running attempts: accrue their cost and their job's progress, notice VMs lost
//! (evictions roll work back to the last checkpoint), migrate a fleet below its minimum past the
//! grace period or whose agents reported trouble (a preemption notice, a lost VM, agents that never
//! registered), end an attempt that lost every VM, finish a job whose budget (or its pipeline's)
//! ran out or whose work is done, and re-price running VMs when the cloud's prices moved. Pure: they read the snapshot
//! and the loop's memory and return what to write.

use super::accounts::{accrual, accrue, overlap_scale, roll_back};
use super::actions::{Change, JobEdit};
use super::error_policy;
use super::snapshot::{Seen, Snapshot};
use super::{ControlConfig, LoopState};
use crate::agents::records::PREEMPTION_NOTICE;
use crate::catalog::Catalog;
use crate::cloud::{CloudError, ProvisioningState};
use crate::model::{Attempt, AttemptState, BlockedOffer, EventKind, FailureClass, Job, JobState, Priority};

/// What watching one running attempt decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Watched {
    /// What to write; `None` when nothing changed and no settling is due (accrual is linear between
    /// changes, so a stretch left unwritten is accrued the same later, or after a crash, from the
    /// stored `accounted_until_ms`).
    pub change: Option<Change>,
    /// The fleet lost every VM: the attempt ended, its fleet is to be deleted.
    pub delete_fleet: bool,
    /// The job ended this round (budget, or work done): its fleets are to be cleaned up.
    pub finished: Option<(Attempt, Job)>,
    /// VMs were lost this round.
    pub evicted: bool,
}

/// VMs running as the cloud says now (none for a failed, deleting or vanished fleet; what was last
/// seen when the fleet could not be read), and of them the regular part's of a mixed fleet (0 for
/// any other): the cloud
/// counts a mixed fleet's spot part in the fleet's own `running_vms` and its regular part beside
/// it (`Fleet::regular`).
pub(crate) fn observed_parts(a: &Attempt, seen: Option<&Seen>) -> (u32, u32) {
    let regular_vms = a.regular.map_or(0, |r| r.vms);
    match seen.and_then(|s| s.fleet.as_ref()) {
        Some(Ok(f)) if matches!(f.provisioning_state, ProvisioningState::Failed | ProvisioningState::Deleting) => {
            (0, 0)
        }
        Some(Ok(f)) => {
            let spot = f.running_vms.unwrap_or(a.vms - regular_vms);
            let regular = match a.regular {
                Some(r) => f.regular.and_then(|p| p.running_vms).unwrap_or(r.vms),
                None => 0,
            };
            (spot + regular, regular)
        }
        Some(Err(CloudError::NotFound { .. })) => (0, 0),
        Some(Err(_)) | None => (a.running_vms, a.regular.map_or(0, |r| r.running_vms)),
    }
}

/// Watches one running attempt of an open job; `key` is the attempt's key in the snapshot
/// ([`crate::records::attempt_key`], passed in rather than formatted again for every running
/// attempt every round).
pub(crate) fn watch(
    snap: &Snapshot,
    st: &mut LoopState,
    config: &ControlConfig,
    catalog: &Catalog,
    (key, attempt): (&str, &Attempt),
    job: &Job,
) -> Watched {
    let now = snap.now;
    debug_assert_eq!(key, crate::records::attempt_key(&attempt.job_id, attempt.number));
    if quiet(snap, st, config, (key, attempt), job) {
        return Watched::default();
    }
    let (mut a, mut job) = (attempt.clone(), job.clone());
    let (observed, observed_regular) = observed_parts(&a, snap.seen.get(key));
    let settled_until = a.accounted_until_ms.or(a.running_since_ms).unwrap_or(now);
    let regular_running = |a: &Attempt| a.regular.map(|r| r.running_vms);
    let before =
        (a.running_vms, regular_running(&a), a.below_min_since_ms, job.state, job.awaiting_failover, job.evictions);
    let scale = overlap_scale(&job, snap.attempts_of(&job.id));
    let spend = accrue(&mut a, &mut job, now, scale);
    // What ran so far was accrued at the old price just above, what runs from now on at the new one.
    let repriced = st.prices_moved && reprice(st, catalog, &mut a);
    let mut out = Watched::default();
    let mut events: Vec<(EventKind, String)> = Vec::new();
    // A growth the cloud finished counts from now on (what ran so far was accrued just above).
    let seen_op = snap.seen.get(key).and_then(|s| s.operation.as_ref());
    let mut growth_block = None;
    let grew = match super::growth::follow(snap, st, &mut a, seen_op) {
        Some((event, block)) => {
            events.push(event);
            growth_block = block;
            true
        }
        None => false,
    };
    let mut lost_blocks = Vec::new();
    let mut notice_block = None;
    if observed < a.vms {
        out.evicted = observed < a.running_vms; // VMs lost since the last look
        lost_blocks = fewer_vms(snap, st, config, &mut a, &mut job, (observed, observed_regular), &mut events);
        out.delete_fleet = observed == 0;
    } else if a.below_min_since_ms.is_some() {
        a.below_min_since_ms = None;
        events.push((EventKind::Recovered, format!("attempt {} is back to {} VMs", a.number, a.vms)));
    }
    if let Some(why) = snap.agent_trouble.get(key).copied()
        && !job.awaiting_failover
        && !snap.others_active(&a.job_id, a.number)
    {
        notice_block = agent_trouble(snap, st, &a, &mut job, why, &mut events);
    }
    a.running_vms = observed;
    if let Some(r) = a.regular.as_mut() {
        r.running_vms = observed_regular;
    }
    let blocks: Vec<_> = growth_block.into_iter().chain(lost_blocks).chain(notice_block).collect();
    let finished = end(snap, config, (&mut a, &mut job), out.delete_fleet, &mut events);
    let changed = out.delete_fleet
        || grew
        || repriced
        || finished.is_some()
        || !events.is_empty()
        || before
            != (
                a.running_vms,
                regular_running(&a),
                a.below_min_since_ms,
                job.state,
                job.awaiting_failover,
                job.evictions,
            );
    let settle_due = config.settle_interval_ms.is_some_and(|i| now - settled_until >= i);
    if !changed && !settle_due {
        return out;
    }
    if finished.is_some() {
        out.finished = Some((a.clone(), job.clone()));
    }
    out.change = Some(Change {
        attempts: vec![a],
        spend: Some((job.spec.tenant.clone(), spend)),
        job: Some((job.id.clone(), JobEdit::Accounted { job, events })),
        blocks,
        ..Change::default()
    });
    out
}

/// Bills running VMs at the offer's price now (a spot price moves), for the attempt and a mixed
/// fleet's regular part. Returns whether a price changed.
fn reprice(st: &LoopState, catalog: &Catalog, a: &mut Attempt) -> bool {
    let mut repriced = false;
    if let Some(p) = st.world.list_price(catalog, &a.region, &a.size, a.priority)
        && p != a.price_per_hour
    {
        a.price_per_hour = p;
        repriced = true;
    }
    if let Some(r) = a.regular.as_mut()
        && let Some(p) = st.world.list_price(catalog, &a.region, &a.size, Priority::Regular)
        && p != r.price_per_hour
    {
        r.price_per_hour = p;
        repriced = true;
    }
    repriced
}

/// How the watch ends the attempt and its job: an attempt whose fleet lost every VM (`emptied`)
/// fails, and its job waits to be placed afresh unless another attempt still runs for it; a job
/// whose budget (or its pipeline's) is spent, or whose work is done, ends. Returns the job's end
/// (its final state and why), if it ends.
fn end(
    snap: &Snapshot,
    config: &ControlConfig,
    (a, job): (&mut Attempt, &mut Job),
    emptied: bool,
    events: &mut Vec<(EventKind, String)>,
) -> Option<(JobState, String)> {
    let now = snap.now;
    if emptied {
        // Nothing left to keep running: end the attempt now so the job is placed afresh.
        a.state = AttemptState::Failed;
        a.ended_at_ms = Some(now);
        a.failure = Some("all VMs lost".into());
        a.failure_class = Some(FailureClass::Capacity);
    }
    let finished = finish(config, job)
        .or_else(|| super::pipeline_budget::exhausted(snap, job, job.cost_usd).map(|why| (JobState::Failed, why)));
    if emptied && finished.is_none() && !snap.others_active(&a.job_id, a.number) {
        job.set_state(JobState::Pending, now);
    }
    if let Some((state, why)) = &finished {
        job.set_state(*state, now);
        job.end_reason = Some(why.clone());
        events.extend(EventKind::of_final_state(*state).map(|k| (k, why.clone())));
    }
    finished
}

/// The common case, decided without copying the attempt and its job: a running attempt whose
/// fleet runs every VM it was asked for, with no growth, price change, agent report or settling
/// due, whose job neither finishes nor spends its own or its pipeline's budget with this round's
/// accrual. [`watch`] would then change nothing: it writes nothing and returns nothing. (Copying
/// every running attempt and job each round to find that out showed in the whole-trace profile.)
fn quiet(snap: &Snapshot, st: &LoopState, config: &ControlConfig, (key, a): (&str, &Attempt), job: &Job) -> bool {
    let now = snap.now;
    let settled_until = a.accounted_until_ms.or(a.running_since_ms).unwrap_or(now);
    let (observed, observed_regular) = observed_parts(a, snap.seen.get(key));
    let still = a.state == AttemptState::Running
        && observed == a.vms
        && observed == a.running_vms
        && a.regular.is_none_or(|r| observed_regular == r.running_vms)
        && a.below_min_since_ms.is_none()
        && a.growing_to.is_none()
        && !st.prices_moved
        && !snap.agent_trouble.contains_key(key)
        && config.settle_interval_ms.is_none_or(|i| now - settled_until < i);
    if !still {
        return false;
    }
    let (cost, progress) = match accrual(a, job, now, overlap_scale(job, snap.attempts_of(&job.id))) {
        Some(x) => (x.job_cost_usd, x.progress_hours),
        None => (job.cost_usd, job.progress_hours),
    };
    finish_at(config, job, cost, progress).is_none() && super::pipeline_budget::exhausted(snap, job, cost).is_none()
}

/// A splittable job's running placements it no longer needs, newest first: a fleet that refilled
/// after the job was topped up elsewhere leaves the job holding more GPUs than it wants; each
/// placement whose GPUs the job's other placements cover without it is retired (billed up to now,
/// its fleet deleted), so the job pays for what it uses.
pub(crate) fn surplus(snap: &Snapshot, config: &ControlConfig, job: &Job) -> Vec<Attempt> {
    if job.spec.is_gang() || job.state.is_final() || super::deadline_choice::deadline_managed(job) {
        return Vec::new();
    }
    let now = snap.now;
    let live: Vec<&Attempt> = snap.attempts_of(&job.id).filter(|a| a.is_active()).collect();
    let mut held: u32 = live
        .iter()
        .map(|a| super::placement::holds(job, a, now, config.below_min_grace_ms, snap.has_agent_trouble(a)).0)
        .sum();
    let wanted = job.wanted_gpus();
    let mut out = Vec::new();
    for a in live.iter().rev() {
        if a.state == AttemptState::Running && a.below_min_since_ms.is_none() && held >= wanted + a.gpus {
            held -= a.gpus;
            out.push((*a).clone());
        }
    }
    out
}

/// The fleet runs fewer VMs than the attempt holds (`observed`: all of them, and of them the
/// regular part's of a mixed fleet): count what was lost, block the offer of each short part once
/// the shortfall outlasts the grace period (or the fleet is empty), and mark the job for failover
/// when it must move. Returns the blocks it added.
fn fewer_vms(
    snap: &Snapshot,
    st: &mut LoopState,
    config: &ControlConfig,
    a: &mut Attempt,
    job: &mut Job,
    (observed, observed_regular): (u32, u32),
    events: &mut Vec<(EventKind, String)>,
) -> Vec<BlockedOffer> {
    let now = snap.now;
    lost_vms(st, a, job, (observed, observed_regular), now, events);
    let degraded = observed == 0 || now - a.below_min_since_ms.unwrap_or(now) >= config.below_min_grace_ms;
    let mut blocks = Vec::new();
    // The parts short of VMs: a mixed fleet's spot part evicted leaves its regular offer alone.
    let short: Vec<Priority> = match a.regular {
        None => vec![a.priority],
        Some(r) => [
            (Priority::Spot, observed - observed_regular < a.vms - r.vms),
            (Priority::Regular, observed_regular < r.vms),
        ]
        .into_iter()
        .filter_map(|(p, short)| short.then_some(p))
        .collect(),
    };
    for priority in short {
        if degraded && (observed == 0 || st.world.block_for(&a.region, &a.size, &a.family, priority, now).is_none()) {
            // The cloud took VMs and did not give them back: the only sign of a shortage or an
            // outage Azure gives. Block the offer so the job's next placement (or top-up) goes
            // elsewhere rather than ask the offer that just failed it.
            let b = error_policy::lost_vms_block(&a.region, &a.size, priority, now);
            st.world.add_block(b.clone());
            blocks.push(b);
        }
    }
    // A gang below its minimum does nothing and moves as a whole; a splittable job moves only
    // when a fleet lost everything and nothing else runs for it (otherwise what it lost is
    // topped up beside what still runs, and the job keeps running: a mixed fleet's regular part
    // runs on through its spot part's evictions).
    let moves = job.spec.is_gang() || (observed == 0 && !snap.others_active(&a.job_id, a.number));
    if degraded && moves && !job.awaiting_failover {
        let failure = format!(
            "attempt {} lost {} of its {} {} VMs in {} ({})",
            a.number,
            a.vms - observed,
            a.vms,
            a.size,
            a.region,
            if a.priority == Priority::Spot { "spot eviction" } else { "capacity lost" }
        );
        let msg = format!("attempt {} has {observed} of {} VMs; placing the job again", a.number, a.vms);
        place_again(job, a, now, failure, msg, events);
    }
    blocks
}

/// The agents say these VMs cannot carry the work while the cloud still counts them: place the
/// job again now; this attempt goes once the new one runs (make before break). Returns the block
/// a preemption notice adds.
fn agent_trouble(
    snap: &Snapshot,
    st: &mut LoopState,
    a: &Attempt,
    job: &mut Job,
    why: &str,
    events: &mut Vec<(EventKind, String)>,
) -> Option<BlockedOffer> {
    let now = snap.now;
    let failure = format!("attempt {} in {} reported {why}", a.number, a.region);
    let msg = format!(
        "attempt {} reported {why}; placing the job again (the attempt goes once the new placement runs)",
        a.number
    );
    place_again(job, a, now, failure, msg, events);
    // A preemption notice is Azure taking that spot capacity back: the replacement, placed in
    // this same round, must not ask the offer being reclaimed (Azure shows no capacity to tell).
    if why == PREEMPTION_NOTICE
        && a.priority == Priority::Spot
        && st.world.block_for(&a.region, &a.size, &a.family, a.priority, now).is_none()
    {
        let b = error_policy::spot_eviction_block(&a.region, &a.size, now);
        st.world.add_block(b.clone());
        return Some(b);
    }
    None
}

/// Marks the job to be placed again away from attempt `a` (a running job becomes migrating), with
/// why (`failure`) and the `migrating` event's message.
fn place_again(
    job: &mut Job,
    a: &Attempt,
    now: i64,
    failure: String,
    msg: String,
    events: &mut Vec<(EventKind, String)>,
) {
    job.awaiting_failover = true;
    job.failover_from = Some(a.region.clone());
    job.last_failure = Some(failure);
    if job.state == JobState::Running {
        job.set_state(JobState::Migrating, now);
    }
    events.push((EventKind::Migrating, msg));
}

/// The fleet has fewer VMs than asked: note since when, and count an eviction (rolling the work
/// the lost VMs carried back to the last checkpoint) when VMs were lost since the last look. A
/// mixed fleet's loss is an eviction only when its spot part lost VMs.
fn lost_vms(
    st: &mut LoopState,
    a: &mut Attempt,
    job: &mut Job,
    (observed, observed_regular): (u32, u32),
    now: i64,
    events: &mut Vec<(EventKind, String)>,
) {
    if a.below_min_since_ms.is_some() && observed >= a.running_vms {
        return;
    }
    let lost_vms = a.running_vms.saturating_sub(observed);
    if a.below_min_since_ms.is_none() {
        a.below_min_since_ms = Some(now);
    }
    if lost_vms == 0 {
        return;
    }
    let lost_regular = a.regular.map_or(0, |r| r.running_vms.saturating_sub(observed_regular));
    let what = match a.regular {
        None => a.priority.to_string(),
        Some(_) if lost_regular == 0 => "spot, of the mixed fleet's spot part".to_string(),
        Some(_) => format!("{lost_regular} of them regular, of the mixed fleet's regular part"),
    };
    if a.priority == Priority::Spot && lost_vms > lost_regular {
        job.evictions += 1;
        st.deadline.evicted_spot.insert(a.region.clone());
    }
    let lost = roll_back(job, a, lost_vms);
    events.push((
        EventKind::Evicted,
        format!(
            "{lost_vms} of {} VMs of attempt {} lost in {} ({what}); {lost:.2} GPU-hours of work since the last checkpoint lost",
            a.vms, a.number, a.region
        ),
    ));
}

/// Whether the loop ends the job: its budget is spent (failed), or, where nobody is there to say
/// so (`auto_complete`), its work is done (succeeded).
fn finish(config: &ControlConfig, job: &Job) -> Option<(JobState, String)> {
    finish_at(config, job, job.cost_usd, job.progress_hours)
}

/// [`finish`] for the job at `cost_usd` and `progress_hours` (what an accrual would make of them).
fn finish_at(config: &ControlConfig, job: &Job, cost_usd: f64, progress_hours: f64) -> Option<(JobState, String)> {
    if let Some(b) = job.spec.budget.filter(|&b| cost_usd >= b) {
        Some((JobState::Failed, format!("budget of ${b:.2} exhausted")))
    } else if config.auto_complete && job.spec.duration_hours.map(|d| (d - progress_hours).max(0.0)) == Some(0.0) {
        Some((JobState::Succeeded, "work done".to_string()))
    } else {
        None
    }
}
