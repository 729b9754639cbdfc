//! Job events: what happened to a job and when. The [`EventKind`] is the `kind` of every job event
//! in the store's log, the event name of `GET /v1/events`, and what the filter `?kinds=` takes.
//!
//! Adding a kind: add a variant here (its snake_case name is what is stored and shown), then
//! record it with `jobs::record_event`. Kinds are never renamed: stored events keep their name.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::JobState;

/// The kind of a job event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// The job was accepted.
    Submitted,
    /// The control loop wrote an attempt's intent and asked for its fleet.
    Placed,
    /// A placement after a failure or an eviction (recorded just before its `placed`).
    Failover,
    /// An attempt's fleet reached its minimum capacity.
    Running,
    /// An attempt's fleet could not be created; the job is placed again.
    ProvisioningFailed,
    /// A fleet lost VMs (spot eviction, outage); the work since the last checkpoint is lost.
    Evicted,
    /// A fleet stayed below its minimum past the grace period (or lost every VM): the job is
    /// placed again, make before break.
    Migrating,
    /// A fleet below its minimum got its VMs back.
    Recovered,
    /// The job finished as asked (by a user, or with its work done).
    Succeeded,
    /// The job gave up (e.g. its budget ran out).
    Failed,
    /// A user cancelled the job.
    Cancelled,
    /// A fleet of the job was deleted (the job ended, or moved).
    FleetDeleted,
    /// Why the job waits changed.
    Waiting,
    /// A deadline job's policy chose where the job runs (spot, regular, or nowhere yet).
    DeadlineChoice,
    /// A pipeline job's deadline was re-computed as its dependencies ended: its share of the time
    /// then left to the pipeline's deadline.
    DeadlineChanged,
    /// A fleet tagged for the job was found in the cloud with no live attempt.
    OrphanFleet,
    /// Every VM of an attempt registered its agent; the work's `run` starts.
    WorkStarted,
    /// The work's GPUs stayed idle past the spec's `idle_minutes`.
    Idle,
    /// A VM of the job got a notice (spot eviction, maintenance) and its work was sent SIGTERM.
    PreemptionNotice,
    /// A failed `run` starts again (within `max_restarts`).
    Restarted,
    /// One rank of the work exited.
    RankExited,
    /// A VM's agent went silent past the heartbeat timeout: the VM counts as lost.
    VmLost,
    /// A running attempt's agents did not all register in time (the work is placed anew).
    AgentsMissing,
    /// A job's fleet changed its capacity (a PUT of the new capacity on the same fleet): the job
    /// grows where it already runs instead of adding a fleet, or a growth was refused.
    Resized,
    /// The world of a splittable job's work changed (VMs joined or left): every rank starts again
    /// with the new world, not counted against `max_restarts`.
    WorldChanged,
    /// A quota pool has kept waiting work out for longer than the threshold (a cluster event, no
    /// job): once per episode.
    QuotaExhausted,
    /// A pool that was exhausted keeps no waiting work out any more (a cluster event).
    QuotaRecovered,
    /// An admin filed a quota increase with Azure (`POST /v1/advice/requests`; a cluster event
    /// naming who, what and when).
    QuotaRequested,
    /// Azure granted a quota request: the new limit is in effect (a cluster event).
    QuotaGranted,
    /// A quota request ended without the increase: Azure refused or escalated it, or could not be
    /// asked (a cluster event, with Azure's message).
    QuotaRequestFailed,
}

impl EventKind {
    /// Every kind, in the order above.
    pub const ALL: [EventKind; 30] = [
        EventKind::Submitted,
        EventKind::Placed,
        EventKind::Failover,
        EventKind::Running,
        EventKind::ProvisioningFailed,
        EventKind::Evicted,
        EventKind::Migrating,
        EventKind::Recovered,
        EventKind::Succeeded,
        EventKind::Failed,
        EventKind::Cancelled,
        EventKind::FleetDeleted,
        EventKind::Waiting,
        EventKind::DeadlineChoice,
        EventKind::DeadlineChanged,
        EventKind::OrphanFleet,
        EventKind::WorkStarted,
        EventKind::Idle,
        EventKind::PreemptionNotice,
        EventKind::Restarted,
        EventKind::RankExited,
        EventKind::VmLost,
        EventKind::AgentsMissing,
        EventKind::Resized,
        EventKind::WorldChanged,
        EventKind::QuotaExhausted,
        EventKind::QuotaRecovered,
        EventKind::QuotaRequested,
        EventKind::QuotaGranted,
        EventKind::QuotaRequestFailed,
    ];

    /// The name stored in the log and shown in APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Submitted => "submitted",
            EventKind::Placed => "placed",
            EventKind::Failover => "failover",
            EventKind::Running => "running",
            EventKind::ProvisioningFailed => "provisioning_failed",
            EventKind::Evicted => "evicted",
            EventKind::Migrating => "migrating",
            EventKind::Recovered => "recovered",
            EventKind::Succeeded => "succeeded",
            EventKind::Failed => "failed",
            EventKind::Cancelled => "cancelled",
            EventKind::FleetDeleted => "fleet_deleted",
            EventKind::Waiting => "waiting",
            EventKind::DeadlineChoice => "deadline_choice",
            EventKind::DeadlineChanged => "deadline_changed",
            EventKind::OrphanFleet => "orphan_fleet",
            EventKind::WorkStarted => "work_started",
            EventKind::Idle => "idle",
            EventKind::PreemptionNotice => "preemption_notice",
            EventKind::Restarted => "restarted",
            EventKind::RankExited => "rank_exited",
            EventKind::VmLost => "vm_lost",
            EventKind::AgentsMissing => "agents_missing",
            EventKind::Resized => "resized",
            EventKind::WorldChanged => "world_changed",
            EventKind::QuotaExhausted => "quota_exhausted",
            EventKind::QuotaRecovered => "quota_recovered",
            EventKind::QuotaRequested => "quota_requested",
            EventKind::QuotaGranted => "quota_granted",
            EventKind::QuotaRequestFailed => "quota_request_failed",
        }
    }

    /// The event that records a job reaching a final state; `None` for states that are not final.
    pub fn of_final_state(state: JobState) -> Option<EventKind> {
        match state {
            JobState::Succeeded => Some(EventKind::Succeeded),
            JobState::Failed => Some(EventKind::Failed),
            JobState::Cancelled => Some(EventKind::Cancelled),
            JobState::Pending | JobState::Provisioning | JobState::Running | JobState::Migrating => None,
        }
    }
}

impl EventKind {
    /// Whether this kind records a job reaching a final state.
    pub fn is_final_state(self) -> bool {
        matches!(self, EventKind::Succeeded | EventKind::Failed | EventKind::Cancelled)
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for EventKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| {
            let known: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
            format!("unknown event kind {s:?}: expected one of {}", known.join(", "))
        })
    }
}

/// An event about one job, indexed by job so `GET /v1/jobs/{id}` need not scan the whole log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobEvent {
    /// The job.
    pub job_id: String,
    /// The event's sequence number in the global log.
    pub seq: u64,
    /// When, Unix milliseconds.
    pub at_ms: i64,
    /// What kind of event.
    pub kind: EventKind,
    /// What happened, for people.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_serde_names_and_parse_back() {
        for k in EventKind::ALL {
            assert_eq!(serde_json::to_value(k).unwrap(), serde_json::Value::String(k.as_str().to_string()));
            assert_eq!(k.as_str().parse::<EventKind>(), Ok(k));
        }
        assert!("placd".parse::<EventKind>().unwrap_err().contains("provisioning_failed"));
        assert_eq!(EventKind::of_final_state(JobState::Cancelled), Some(EventKind::Cancelled));
        assert_eq!(EventKind::of_final_state(JobState::Running), None);
    }
}
