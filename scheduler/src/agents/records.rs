//! How the agents' reports are stored: one record per rank ([`NodeRecord`]), one per attempt's work
//! ([`AttemptWork`]), one per job ([`JobWork`]), and the logs as numbered chunks ([`LogChunk`]).
//!
//! Log chunks are numbered per job, in the order the scheduler stored them, so a job's log is one
//! sequence that a reader (or a follower) walks by key from any position, whatever the ranks and
//! attempts it mixes, and a per-rank cap is kept with each rank's record.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use state::{IndexDef, Record, TableDef};

use super::protocol::{ExitReason, GpuInfo, GpuSample, LogLine, Phase, Script};
use crate::records::{IndexQuery, attempt_key};

const NODE_JOB: IndexDef = IndexDef { name: "job", pointer: "/job_id" };

/// One VM of an attempt, by rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Job id.
    pub job_id: String,
    /// Attempt number.
    pub attempt: u32,
    /// Rank, 0-based.
    pub rank: u32,
    /// The VM's name in the cloud.
    pub vm_name: String,
    /// Host name.
    pub hostname: String,
    /// Private IP.
    pub private_ip: String,
    /// GPUs the agent saw at registration; `None` when it could not tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<GpuInfo>>,
    /// The registering agent process.
    pub boot_id: String,
    /// Its version.
    #[serde(default)]
    pub agent_version: String,
    /// When it (last) registered, scheduler clock ms.
    pub registered_at_ms: i64,
    /// Last heartbeat written to the store (the server keeps fresher ones in memory).
    pub last_heartbeat_ms: i64,
    /// Where the rank is.
    pub phase: Phase,
    /// The start number it runs or last ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<u32>,
    /// When its current `run` started (scheduler clock ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_started_at_ms: Option<i64>,
    /// Agent start to `run` start, as the agent measured it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_ms: Option<u64>,
    /// The last exit of a script on this rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitRecord>,
    /// A preemption notice for this VM, when one came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<NoticeRecord>,
    /// Declared lost: its heartbeats stopped. A lost rank may be taken by a new VM.
    #[serde(default)]
    pub lost: bool,
    /// Log bytes stored for this rank (all restarts of the attempt).
    #[serde(default)]
    pub log_bytes: u64,
    /// The cap was reached: later lines are dropped (one marker line says so).
    #[serde(default)]
    pub log_truncated: bool,
    /// The agent process whose batches are counted in `last_batch`.
    #[serde(default)]
    pub log_boot_id: String,
    /// The last log batch stored from `log_boot_id` (retries of it are acknowledged, not stored).
    #[serde(default)]
    pub last_batch: u64,
    /// The last GPU samples written to the store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_samples: Option<Vec<GpuSample>>,
}

/// The key of a rank's record.
pub fn node_key(job_id: &str, attempt: u32, rank: u32) -> String {
    format!("{}/{rank:04}", attempt_key(job_id, attempt))
}

impl Record for NodeRecord {
    const TABLE: TableDef = TableDef { name: "agent_nodes", indexes: &[NODE_JOB] };
    fn key(&self) -> String {
        node_key(&self.job_id, self.attempt, self.rank)
    }
}

/// Every rank of a job, over all its attempts.
#[derive(Debug, Clone, Copy)]
pub struct NodesOfJob<'a>(pub &'a str);

impl IndexQuery for NodesOfJob<'_> {
    type Record = NodeRecord;
    fn index(&self) -> IndexDef {
        NODE_JOB
    }
    fn value(&self) -> Cow<'_, str> {
        Cow::Borrowed(self.0)
    }
}

/// How a script ended on a rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExitRecord {
    /// The start number.
    pub restart: u32,
    /// Which script.
    pub script: Script,
    /// Exit code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    /// Signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Why.
    pub reason: ExitReason,
    /// The agent's explanation, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the report came (scheduler clock ms).
    pub at_ms: i64,
}

impl ExitRecord {
    /// True when this exit ends the work well: `run` finished by itself with code 0.
    pub fn succeeded(&self) -> bool {
        self.script == Script::Run && self.reason == ExitReason::Finished && self.code == Some(0)
    }

    /// True when it counts as a failure of the work (not a stop or a preemption).
    pub fn failed(&self) -> bool {
        matches!(self.reason, ExitReason::Finished | ExitReason::Error) && !self.succeeded()
    }

    /// "rank 1's run exited with code 3", "…was killed by signal 9", "…could not start: why".
    pub fn describe(&self, rank: u32) -> String {
        let script = match self.script {
            Script::Setup => "setup",
            Script::Run => "run",
        };
        match (&self.reason, self.code, self.signal, &self.message) {
            (ExitReason::Error, _, _, Some(m)) => format!("rank {rank}'s {script} could not start: {m}"),
            (_, Some(c), _, _) => format!("rank {rank}'s {script} exited with code {c}"),
            (_, None, Some(s), _) => format!("rank {rank}'s {script} was killed by signal {s}"),
            _ => format!("rank {rank}'s {script} ended ({:?})", self.reason),
        }
    }
}

/// A preemption notice as a rank reported it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoticeRecord {
    /// The event id.
    pub event_id: String,
    /// `Preempt`, `Terminate`, …
    pub event_type: String,
    /// The event's `NotBefore`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    /// When it was reported (scheduler clock ms).
    pub at_ms: i64,
}

/// The work of one attempt: the gang, the start it runs, and whether it should stop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptWork {
    /// Job id.
    pub job_id: String,
    /// Attempt number.
    pub attempt: u32,
    /// VMs in the gang.
    pub num_nodes: u32,
    /// When the last VM registered and the work was ordered to start (scheduler clock ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at_ms: Option<i64>,
    /// The start number the ranks should run (`SPILLWAY_RESTART`), once the gang is complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<u32>,
    /// Set when every rank must stop, with the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<String>,
    /// Every rank's `run` of the current start exited 0.
    #[serde(default)]
    pub done: bool,
    /// The start whose failure was already counted (a gang failing once counts once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_restart: Option<u32>,
    /// When the first preemption notice of the attempt came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice_at_ms: Option<i64>,
    /// An `idle` event was recorded for this attempt.
    #[serde(default)]
    pub idle_reported: bool,
    /// When a rank was first declared lost (its heartbeats stopped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_at_ms: Option<i64>,
    /// When the attempt was found running without all its agents registered long after it started
    /// (the VMs never started the agent: an image without the binary, a network that cannot reach
    /// the scheduler).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unregistered_at_ms: Option<i64>,
}

impl AttemptWork {
    /// Why the attempt's VMs can no longer carry the work and it needs a new placement, if they
    /// cannot: a preemption notice, a lost VM, agents that never came. The control loop replaces
    /// such an attempt at once (make before break: the old one goes once the new one runs).
    pub fn needs_replacement(&self) -> Option<&'static str> {
        if self.notice_at_ms.is_some() {
            Some(PREEMPTION_NOTICE)
        } else if self.lost_at_ms.is_some() {
            Some("a VM whose agent stopped sending heartbeats")
        } else if self.unregistered_at_ms.is_some() {
            Some("VMs whose agents never registered")
        } else {
            None
        }
    }
}

/// Why an attempt with a preemption notice is replaced ([`AttemptWork::needs_replacement`]): the
/// control loop also reads it as Azure reclaiming that spot offer.
pub const PREEMPTION_NOTICE: &str = "a preemption notice";

impl Record for AttemptWork {
    const TABLE: TableDef = TableDef { name: "attempt_work", indexes: &[IndexDef { name: "job", pointer: "/job_id" }] };
    fn key(&self) -> String {
        attempt_key(&self.job_id, self.attempt)
    }
}

/// The work of one job over all its attempts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobWork {
    /// Job id.
    pub job_id: String,
    /// The next start number (`SPILLWAY_RESTART`): 0 before the first start.
    pub next_restart: u32,
    /// Failures of the work counted against `max_restarts`.
    pub failures: u32,
    /// The next log chunk number.
    pub next_log_seq: u64,
    /// The world of a splittable job's work ([`crate::agents::decide::is_elastic`]): every VM of
    /// its running attempts as one set of ranks. `None` for gangs (one attempt is the world) and
    /// before the first start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world: Option<World>,
}

impl JobWork {
    /// A job whose work never started.
    pub fn new(job_id: &str) -> JobWork {
        JobWork { job_id: job_id.to_string(), next_restart: 0, failures: 0, next_log_seq: 0, world: None }
    }
}

/// One VM of a world: the attempt and attempt rank its agent registered as (the agent's own
/// paths use those), and the VM that holds that rank now (a new VM in a lost rank is a new member).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Attempt number.
    pub attempt: u32,
    /// Rank within the attempt.
    pub rank: u32,
    /// The VM's name.
    pub vm_name: String,
    /// Its private IP (`SPILLWAY_NODE_IPS`).
    pub private_ip: String,
}

impl Member {
    /// The member a rank's record stands for.
    pub fn of(n: &NodeRecord) -> Member {
        Member { attempt: n.attempt, rank: n.rank, vm_name: n.vm_name.clone(), private_ip: n.private_ip.clone() }
    }

    /// True when `n` is this member's rank held by the same VM.
    pub fn is(&self, n: &NodeRecord) -> bool {
        self.attempt == n.attempt && self.rank == n.rank && self.vm_name == n.vm_name
    }
}

/// The ranks of a splittable job's work across all its running attempts, and the start they run.
/// World rank `i` is `members[i]`, ordered by attempt, then attempt rank; any change of members
/// is a new start of every rank (elastic: not counted against `max_restarts`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct World {
    /// The members, in world-rank order.
    pub members: Vec<Member>,
    /// The start they run (`SPILLWAY_RESTART`).
    pub restart: u32,
    /// When this start was ordered (scheduler clock ms).
    pub started_at_ms: i64,
    /// The start whose failure was already counted (one failing start counts once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_restart: Option<u32>,
}

impl World {
    /// The world rank of `n`, when it is a member.
    pub fn rank_of(&self, n: &NodeRecord) -> Option<u32> {
        self.members.iter().position(|m| m.is(n)).map(|i| i as u32)
    }

    /// Every member's IP, in world-rank order.
    pub fn ips(&self) -> Vec<String> {
        self.members.iter().map(|m| m.private_ip.clone()).collect()
    }

    /// The attempts with members, ascending.
    pub fn attempts(&self) -> Vec<u32> {
        let mut a: Vec<u32> = self.members.iter().map(|m| m.attempt).collect();
        a.dedup();
        a
    }
}

impl Record for JobWork {
    const TABLE: TableDef = TableDef { name: "job_work", indexes: &[] };
    fn key(&self) -> String {
        self.job_id.clone()
    }
}

/// A batch of log lines of one rank, numbered within the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogChunk {
    /// Job id.
    pub job_id: String,
    /// Number within the job (0, 1, …).
    pub seq: u64,
    /// Attempt.
    pub attempt: u32,
    /// Rank.
    pub rank: u32,
    /// Start number.
    pub restart: u32,
    /// The lines.
    pub lines: Vec<LogLine>,
}

/// The key of a log chunk.
pub fn chunk_key(job_id: &str, seq: u64) -> String {
    format!("{job_id}/{seq:012}")
}

impl Record for LogChunk {
    const TABLE: TableDef = TableDef { name: "log_chunks", indexes: &[IndexDef { name: "job", pointer: "/job_id" }] };
    fn key(&self) -> String {
        chunk_key(&self.job_id, self.seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_typed_node_query_names_an_index_of_its_table() {
        let def = NodesOfJob("j").index();
        assert!(NodeRecord::TABLE.indexes.contains(&def), "agent_nodes has no index {}", def.name);
    }
}
