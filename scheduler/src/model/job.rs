//! `Job`: a spec plus its lifecycle, and `Attempt`: one try at running it on one fleet.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::Priority;
use super::job_spec::JobSpec;

/// Where a job is in its life. `Succeeded`, `Failed` and `Cancelled` are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Accepted, waiting for a placement.
    Pending,
    /// A fleet is being created for it.
    Provisioning,
    /// Its fleet reached minimum capacity.
    Running,
    /// Moving to a new placement after a failure or eviction; the old one still runs.
    Migrating,
    /// Finished as asked.
    Succeeded,
    /// Gave up (for example: its budget ran out).
    Failed,
    /// Cancelled by a user.
    Cancelled,
}

impl JobState {
    /// Every state, in lifecycle order.
    pub const ALL: [JobState; 7] = [
        JobState::Pending,
        JobState::Provisioning,
        JobState::Running,
        JobState::Migrating,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
    ];

    /// True for states a job never leaves.
    pub fn is_final(self) -> bool {
        matches!(self, JobState::Succeeded | JobState::Failed | JobState::Cancelled)
    }

    /// The lower-case word used in APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Provisioning => "provisioning",
            JobState::Running => "running",
            JobState::Migrating => "migrating",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }
}

impl std::str::FromStr for JobState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|st| st.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown job state {s:?}: expected one of pending, provisioning, running, migrating, succeeded, failed, cancelled"))
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A submitted job and what has happened to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Unique id assigned at submission.
    pub id: String,
    /// What the user asked for. Never changes after submission; shared, because the control loop
    /// copies every open job several times a round and the spec is most of a job.
    pub spec: Arc<JobSpec>,
    /// Where it is in its lifecycle.
    pub state: JobState,
    /// Submission time, Unix milliseconds.
    pub submitted_at_ms: i64,
    /// Last state change, Unix milliseconds.
    pub updated_at_ms: i64,
    /// When it first ran, Unix milliseconds (wait time = this minus `submitted_at_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_running_at_ms: Option<i64>,
    /// When it reached a final state, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<i64>,
    /// Number of attempts made so far (the next attempt's number is this plus one).
    pub attempts: u32,
    /// USD accrued over all attempts.
    pub cost_usd: f64,
    /// Hours of work done (at full size), counting only work kept by checkpoints.
    #[serde(default)]
    pub progress_hours: f64,
    /// GPU-hours of work lost to evictions and failures since the last checkpoint.
    #[serde(default)]
    pub lost_work_gpu_hours: f64,
    /// Times the job moved to a new placement after a failure or eviction.
    #[serde(default)]
    pub failovers: u32,
    /// Spot evictions suffered.
    #[serde(default)]
    pub evictions: u32,
    /// While pending or migrating: why it is not (re)placed (empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_reasons: Vec<String>,
    /// While pending: how its candidate offers fared against the feasibility chain when its
    /// reasons last changed (Nomad's `AllocMetric`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offer_filters: Option<super::OfferFilterCounts>,
    /// The last provisioning failure, for people asking "why did it move?".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
    /// Why it ended, when it ended other than by completing (cancelled by whom, budget, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_reason: Option<String>,
    /// Set when an attempt failed or degraded: the next placement is a failover.
    #[serde(default)]
    pub awaiting_failover: bool,
    /// The region the awaited failover leaves (set with `awaiting_failover`): a placement back in
    /// it is a new placement there, not a failover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover_from: Option<String>,
    /// The pipeline the job belongs to and the jobs it waits for, when it is part of one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<super::PipelineLink>,
}

impl Job {
    /// A freshly accepted job.
    pub fn new(id: String, spec: JobSpec, now_ms: i64) -> Job {
        Job {
            id,
            spec: Arc::new(spec),
            state: JobState::Pending,
            submitted_at_ms: now_ms,
            updated_at_ms: now_ms,
            first_running_at_ms: None,
            finished_at_ms: None,
            attempts: 0,
            cost_usd: 0.0,
            progress_hours: 0.0,
            lost_work_gpu_hours: 0.0,
            failovers: 0,
            evictions: 0,
            pending_reasons: Vec::new(),
            offer_filters: None,
            last_failure: None,
            end_reason: None,
            awaiting_failover: false,
            failover_from: None,
            pipeline: None,
        }
    }

    /// Moves to `state` at `now_ms`, stamping the lifecycle times.
    pub fn set_state(&mut self, state: JobState, now_ms: i64) {
        if self.state == state {
            return;
        }
        self.state = state;
        self.updated_at_ms = now_ms;
        if state == JobState::Running && self.first_running_at_ms.is_none() {
            self.first_running_at_ms = Some(now_ms);
        }
        if state.is_final() {
            self.finished_at_ms = Some(now_ms);
            self.pending_reasons.clear();
        }
        if state != JobState::Pending {
            self.pending_reasons.clear();
            self.offer_filters = None;
        }
    }

    /// GPUs the job wants in all: `gpus`, times desired replicas for inference.
    pub fn wanted_gpus(&self) -> u32 {
        self.spec.wanted_gpus()
    }

    /// Hours of work left (at full size); `None` when the spec gives no duration.
    pub fn remaining_hours(&self) -> Option<f64> {
        self.spec.duration_hours.map(|d| (d - self.progress_hours).max(0.0))
    }
}

/// Where an attempt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AttemptState {
    /// Intent written; the fleet may or may not exist yet.
    Provisioning,
    /// Fleet at minimum capacity.
    Running,
    /// Fleet failed to provision (the failure says why).
    Failed,
    /// Replaced by a newer attempt after a migration.
    Replaced,
    /// The job ended and the fleet was deleted.
    Ended,
}

impl AttemptState {
    /// Every state, in lifecycle order.
    pub const ALL: [AttemptState; 5] = [
        AttemptState::Provisioning,
        AttemptState::Running,
        AttemptState::Failed,
        AttemptState::Replaced,
        AttemptState::Ended,
    ];

    /// The lower-case word stored and shown in APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptState::Provisioning => "provisioning",
            AttemptState::Running => "running",
            AttemptState::Failed => "failed",
            AttemptState::Replaced => "replaced",
            AttemptState::Ended => "ended",
        }
    }
}

/// One placement of a job on one fleet.
///
/// A fleet has one priority, or is *mixed* (`regular` is set): one size in one region, some VMs
/// spot and some regular, as Compute Fleet runs them side by side in one fleet. The counts below
/// (`vms`, `gpus`, `vcpus`, `running_vms`) are the whole fleet's, both parts; `priority` is spot,
/// and the price and max price are the spot part's; [`Attempt::regular`] is the regular part.
/// What depends on the priority (quota pools, prices, evictions) reads the parts
/// ([`Attempt::parts`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// The job it belongs to.
    pub job_id: String,
    /// 1, 2, …: together with the job id it names the fleet.
    pub number: u32,
    /// The deterministic fleet name (see [`fleet_name`]).
    pub fleet_name: String,
    /// Region.
    pub region: String,
    /// VM size (the first ranked; the cloud may use an alternative of the same shape).
    pub size: String,
    /// Alternatives of the same shape, ranked after `size`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alternatives: Vec<String>,
    /// Spot or regular.
    pub priority: Priority,
    /// VMs asked for (and confirmed by the cloud, for a fleet that grew).
    pub vms: u32,
    /// The fleet's minimum when it differs from `vms`: a fleet that grew keeps the minimum it was
    /// created with (Azure refuses to change `minCapacity` after creation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_vms: Option<u32>,
    /// The capacity the fleet is being grown to (the update's operation is in `operation`);
    /// `vms`, `gpus` and the cost stay what the cloud confirmed until it is done. `vcpus` already
    /// counts the new VMs: the cloud holds their quota from the request on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub growing_to: Option<Capacity>,
    /// GPUs this attempt carries.
    pub gpus: u32,
    /// vCPUs this attempt draws from quota.
    pub vcpus: u64,
    /// Quota family of the size.
    pub family: String,
    /// Price per VM-hour when placed.
    pub price_per_hour: f64,
    /// Spot only: the most to pay per VM-hour (the job's price cap, spread over this placement's
    /// VMs as the solver planned it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_price_per_vm: Option<f64>,
    /// Where the attempt is.
    pub state: AttemptState,
    /// When the intent was written, Unix milliseconds.
    pub started_at_ms: i64,
    /// When the fleet reached its minimum capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_since_ms: Option<i64>,
    /// When it ended, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at_ms: Option<i64>,
    /// The create (or resize) operation in flight, kept so a restarted scheduler can poll it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<super::FleetOperation>,
    /// VMs running at the last look.
    #[serde(default)]
    pub running_vms: u32,
    /// Since when the fleet has been below its minimum, if it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below_min_since_ms: Option<i64>,
    /// USD accrued by this attempt (its egress included, once it ran).
    #[serde(default)]
    pub cost_usd: f64,
    /// USD of moving its job's input data to `region` (its share of it, for a part of a split
    /// job), at the catalog's transfer price: billed to the attempt, its job and its tenant when
    /// the attempt first runs (the data moves when the VMs read it; a placement that never ran
    /// moved nothing).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub egress_usd: f64,
    /// GB of its job's input that `egress_usd` prices (`crate::accounting::moved_gb`: all of it for
    /// a gang, its GPUs' share for a part of a split job), kept so that reports count the data
    /// moved as it was billed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub egress_gb: f64,
    /// Up to when cost and progress have been accounted, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accounted_until_ms: Option<i64>,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The failure's class, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_class: Option<super::FailureClass>,
    /// A mixed fleet's regular part (its VMs and GPUs are also counted in the attempt's totals);
    /// `None` for a fleet of one priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regular: Option<AttemptPart>,
}

/// The regular part of a mixed attempt: the VMs of the fleet that are regular, their price, and
/// how many of them ran at the last look.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AttemptPart {
    /// Regular VMs asked for.
    pub vms: u32,
    /// The part's minimum (`minCapacity` of the regular profile; fixed at creation).
    pub min_vms: u32,
    /// GPUs the regular VMs carry for the job.
    pub gpus: u32,
    /// Price per regular VM-hour.
    pub price_per_hour: f64,
    /// Regular VMs running at the last look.
    #[serde(default)]
    pub running_vms: u32,
}

/// One priority's share of an attempt, as the rules that depend on the priority read it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PartShare {
    /// Spot or regular.
    pub priority: Priority,
    /// VMs of this priority (the target during a growth).
    pub vms: u32,
    /// Of which running at the last look.
    pub running_vms: u32,
    /// Price per VM-hour.
    pub price_per_hour: f64,
}

impl Attempt {
    /// True while the attempt holds (or may hold) cloud resources.
    pub fn is_active(&self) -> bool {
        matches!(self.state, AttemptState::Provisioning | AttemptState::Running)
    }

    /// The capacity the fleet will have once a growth in flight is done.
    pub fn target(&self) -> Capacity {
        self.growing_to.unwrap_or(Capacity { vms: self.vms, gpus: self.gpus })
    }

    /// vCPUs per VM of the attempt's size.
    pub fn vcpus_per_vm(&self) -> u64 {
        self.vcpus / u64::from(self.target().vms.max(1))
    }

    /// True for a mixed fleet (spot and regular parts).
    pub fn is_mixed(&self) -> bool {
        self.regular.is_some()
    }

    /// The attempt by priority: one share for a fleet of one priority; for a mixed fleet the spot
    /// part, then the regular part. The one place the totals are split.
    pub fn parts(&self) -> impl Iterator<Item = PartShare> {
        let target = self.target().vms;
        let (main, regular) = match self.regular {
            None => (
                PartShare {
                    priority: self.priority,
                    vms: target,
                    running_vms: self.running_vms,
                    price_per_hour: self.price_per_hour,
                },
                None,
            ),
            Some(r) => (
                PartShare {
                    priority: Priority::Spot,
                    vms: target.saturating_sub(r.vms),
                    running_vms: self.running_vms.saturating_sub(r.running_vms),
                    price_per_hour: self.price_per_hour,
                },
                Some(PartShare {
                    priority: Priority::Regular,
                    vms: r.vms,
                    running_vms: r.running_vms,
                    price_per_hour: r.price_per_hour,
                }),
            ),
        };
        std::iter::once(main).chain(regular)
    }

    /// GPUs on regular VMs: all of a regular fleet's, a mixed fleet's regular part's.
    pub fn regular_gpus(&self) -> u32 {
        match (self.regular, self.priority) {
            (Some(r), _) => r.gpus,
            (None, Priority::Regular) => self.target().gpus,
            (None, Priority::Spot) => 0,
        }
    }

    /// USD per hour the running VMs are billed now, over both parts.
    pub fn running_usd_per_hour(&self) -> f64 {
        self.parts().map(|p| f64::from(p.running_vms) * p.price_per_hour).sum()
    }
}

/// A fleet's capacity, as the job counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capacity {
    /// VMs.
    pub vms: u32,
    /// GPUs the job counts on them (≤ VMs × GPUs per VM: a splittable job's last VM may be
    /// partly idle).
    pub gpus: u32,
}

/// The fleet name for a job's attempt: deterministic, so that after a crash the scheduler finds
/// the fleet it may already have created instead of creating a twin. Azure allows 1–80 characters
/// of letters, digits, `-`, `.`, `_`.
pub fn fleet_name(job_id: &str, attempt: u32) -> String {
    let clean: String =
        job_id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' }).take(60).collect();
    format!("spw-{}-a{attempt}", clean.trim_matches('-'))
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}
