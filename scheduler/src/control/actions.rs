//! The actions decisions return and the round performs (`act.rs`): write records, place an
//! attempt, ask for a fleet again, grow a fleet, delete a fleet. Each says what to record; none does I/O itself.
//!
//! A job is never overwritten with a copy the decision made from the snapshot: a decision says how
//! to *edit* the job ([`JobEdit`]), and the edit is applied to the job as the store holds it when
//! the change is written, so that a user's concurrent cancel or completion is never undone.

use crate::accounting;
use crate::model::{Attempt, BlockedOffer, EventKind, Job, JobState, OfferFilterCounts};

/// One event to record on the job, with its message and data.
pub(crate) type JobEventDraft = (EventKind, String, serde_json::Value);

/// How a decision changes a job; applied to the job as stored when the change is written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum JobEdit {
    /// The loop's accounting of the job (cost, progress, state, evictions, …) as decided from the
    /// snapshot, with events. A job made final meanwhile (by its user or its agents) keeps that
    /// state, even when the loop decided a final state of its own: only the cost and progress are
    /// taken over, and the loop's own final-state event is dropped.
    Accounted { job: Job, events: Vec<(EventKind, String)> },
    /// A fleet of an ended job was deleted: add what it cost since it was last accounted to the
    /// job's cost as stored (never take over a copy's total: fleets of one job are settled side
    /// by side, and a copy would drop the others' share). `fallback` is the job before this
    /// settlement, for when the store no longer holds it.
    Settled { fallback: Job, added_usd: f64, fleet: String },
    /// An attempt reached running; the job runs when every placement it keeps does; the job's
    /// cost takes the attempt's egress (`egress_usd`, billed once, as the attempt first runs).
    BecameRunning { all_running: bool, message: String, egress_usd: f64 },
    /// An attempt failed to provision: the job is placed again (pending, unless another placement
    /// still runs).
    ProvisioningFailed {
        last_failure: String,
        region: String,
        others_active: bool,
        message: String,
        class: &'static str,
    },
    /// Why the job waits, when it still waits, and how its candidate offers fared.
    Waiting { reasons: Vec<String>, offers: OfferFilterCounts, message: String },
    /// A new attempt's intent: the job takes attempt `number`, if it still had `expected` attempts;
    /// `region` is where it goes, `moving_to` says what, for people.
    Placed { number: u32, expected: u32, message: String, region: String, moving_to: String },
    /// A running fleet of the job grows (`control::growth`): a `resized` event, and, like a
    /// placement, it answers a failure the job awaited a new placement for.
    Grown { message: String, region: String, moving_to: String },
    /// Only an event, if the job is still open.
    Note { event: (EventKind, String) },
    /// A dependency failed or was cancelled: the job, still waiting, fails with `reason`.
    DependencyFailed { reason: String },
    /// A pipeline job that has not started yet takes a new deadline (Unix milliseconds), its
    /// share of its pipeline's (`control::stage_deadlines`).
    Deadline { deadline_ms: i64, message: String },
}

/// What applying an edit to the stored job gave: whether the job is written, and its events.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Applied {
    /// Write the job back.
    pub write: bool,
    /// Events to record on it.
    pub events: Vec<JobEventDraft>,
}

impl JobEdit {
    /// The job to edit when the store no longer holds it: the loop's own copy, for edits that
    /// carry one (its accounting is still written), else none.
    pub fn fallback(&self) -> Option<Job> {
        match self {
            JobEdit::Accounted { job, .. } | JobEdit::Settled { fallback: job, .. } => Some(job.clone()),
            _ => None,
        }
    }

    /// Applies the edit to `job` (as stored now) at `now_ms`; `None` when the edit no longer
    /// applies and nothing of the change that needs the job is written.
    pub fn apply(&self, job: &mut Job, now_ms: i64) -> Option<Applied> {
        let null = || serde_json::Value::Null;
        match self {
            JobEdit::Accounted { job: ours, events } => {
                // A final state written meanwhile (a user's cancel, the agents' success or failure)
                // stands, even against a final state the loop decided from its older snapshot
                // (budget spent, work done): only the money and the work done are the loop's.
                let stored_final = job.state.is_final();
                if stored_final {
                    job.cost_usd = ours.cost_usd;
                    job.progress_hours = ours.progress_hours;
                } else {
                    *job = ours.clone();
                }
                let events = events
                    .iter()
                    .filter(|(k, _)| !(stored_final && k.is_final_state()))
                    .map(|(k, m)| (*k, m.clone(), null()))
                    .collect();
                Some(Applied { write: true, events })
            }
            JobEdit::Settled { added_usd, fleet, .. } => {
                job.cost_usd += added_usd;
                let message = format!("fleet {fleet} deleted; job cost ${:.2}", job.cost_usd);
                Some(Applied { write: true, events: vec![(EventKind::FleetDeleted, message, null())] })
            }
            JobEdit::BecameRunning { all_running, message, egress_usd } => {
                // The attempt and the tenant pay the egress whatever the job's state (a cancel
                // that came while the fleet was being created): so does the job's cost.
                job.cost_usd = accounting::with_egress(job.cost_usd, *egress_usd);
                if job.state.is_final() {
                    return (*egress_usd > 0.0)
                        .then(|| Applied { write: true, events: vec![(EventKind::Running, message.clone(), null())] });
                }
                if *all_running {
                    job.set_state(JobState::Running, now_ms);
                }
                Some(Applied { write: true, events: vec![(EventKind::Running, message.clone(), null())] })
            }
            JobEdit::ProvisioningFailed { last_failure, region, others_active, message, class } => {
                job.last_failure = Some(last_failure.clone());
                if !job.state.is_final() {
                    job.awaiting_failover = true;
                    job.failover_from = Some(region.clone());
                    if !others_active {
                        job.set_state(JobState::Pending, now_ms);
                    }
                }
                let data = serde_json::json!({ "class": class });
                Some(Applied { write: true, events: vec![(EventKind::ProvisioningFailed, message.clone(), data)] })
            }
            JobEdit::Waiting { reasons, offers, message } => {
                // A migrating job waits for its new placement as a pending one does, and says why.
                if !matches!(job.state, JobState::Pending | JobState::Migrating) {
                    return None;
                }
                job.pending_reasons = reasons.clone();
                job.offer_filters = Some(offers.clone());
                Some(Applied { write: true, events: vec![(EventKind::Waiting, message.clone(), null())] })
            }
            JobEdit::Placed { number, expected, message, region, moving_to } => {
                if job.state.is_final() || job.attempts != *expected {
                    return None;
                }
                job.attempts = *number;
                if job.state == JobState::Pending {
                    job.set_state(JobState::Provisioning, now_ms);
                }
                let mut events = Vec::new();
                let message = take_failover(job, region, moving_to, message, &mut events);
                events.push((EventKind::Placed, message, null()));
                Some(Applied { write: true, events })
            }
            JobEdit::Grown { message, region, moving_to } => {
                if job.state.is_final() {
                    return None;
                }
                let mut events = Vec::new();
                let message = take_failover(job, region, moving_to, message, &mut events);
                events.push((EventKind::Resized, message, null()));
                Some(Applied { write: true, events })
            }
            JobEdit::DependencyFailed { reason } => {
                if job.state != JobState::Pending {
                    return None;
                }
                job.set_state(JobState::Failed, now_ms);
                job.end_reason = Some(reason.clone());
                Some(Applied { write: true, events: vec![(EventKind::Failed, reason.clone(), null())] })
            }
            JobEdit::Deadline { deadline_ms, message } => {
                if job.state != JobState::Pending || job.attempts > 0 {
                    return None;
                }
                let at = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(*deadline_ms) * 1_000_000).ok()?;
                std::sync::Arc::make_mut(&mut job.spec).deadline = Some(at);
                Some(Applied { write: true, events: vec![(EventKind::DeadlineChanged, message.clone(), null())] })
            }
            JobEdit::Note { event } => {
                if job.state.is_final() {
                    return None;
                }
                Some(Applied { write: false, events: vec![(event.0, event.1.clone(), null())] })
            }
        }
    }
}

/// A placement (a new fleet, or more VMs in a fleet the job has) that answers a failure the job
/// awaits a new placement for: a `failover` event when it leaves the region the job failed in,
/// else the placement's message says it is placed again there. Returns the placement's message.
fn take_failover(
    job: &mut Job,
    region: &str,
    moving_to: &str,
    message: &str,
    events: &mut Vec<JobEventDraft>,
) -> String {
    if !job.awaiting_failover {
        return message.to_string();
    }
    job.awaiting_failover = false;
    let from = job.failover_from.take();
    let after = job.last_failure.clone().unwrap_or_else(|| "an earlier placement ended".into());
    match from {
        // Back where it failed (another size or priority, or capacity returned): a new
        // placement, not a move.
        Some(from) if from == region => format!("{message}; placed again in {region} after: {after}"),
        from => {
            job.failovers += 1;
            let from = from.map(|f| format!("from {f} ")).unwrap_or_default();
            let text = format!("moving {from}to {moving_to} after: {after}");
            events.push((EventKind::Failover, text, serde_json::Value::Null));
            message.to_string()
        }
    }
}

/// Records one decision writes, in one transaction.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Change {
    /// Attempts written whatever the job's edit gives.
    pub attempts: Vec<Attempt>,
    /// The job's id and edit.
    pub job: Option<(String, JobEdit)>,
    /// Attempts written only when the job's edit applies (an intent needs its job).
    pub attempts_with_job: Vec<Attempt>,
    /// USD to add to a tenant's spend.
    pub spend: Option<(String, f64)>,
    /// Blocks to record.
    pub blocks: Vec<BlockedOffer>,
}

/// What the round does about something it saw.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    /// Write records.
    Record(Change),
    /// Write an attempt's intent durably, then ask the cloud for its fleet (a placement; with the
    /// job's `Placed` edit in the change).
    Place(Change),
    /// Ask the cloud for the fleet of an intent already on disk (the create never went out).
    Create(Attempt),
    /// Write a running attempt's growth durably, then ask the cloud to resize its fleet (the
    /// change carries the attempt with its `growing_to`, and the job's event).
    Grow(Change),
    /// Ask the cloud to resize the fleet of a growth already on disk (the resize never went out).
    Resize(Attempt),
    /// Delete a fleet. `then` is written once the cloud has accepted the deletion; without it, the
    /// deletion is the loop's to retry (with backoff, until the cloud confirms the fleet gone).
    Delete { fleet: String, then: Option<Change> },
    /// Look at an attempt's fleet again no sooner than this many milliseconds from now.
    Requeue { attempt_key: String, after_ms: i64 },
}
