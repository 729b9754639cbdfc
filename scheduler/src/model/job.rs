//! `Job`: a spec plus its lifecycle, and `Attempt`: one try at running it on one fleet.

use serde::{Deserialize, Serialize};

use super::job_spec::JobSpec;
use super::offer::Priority;

/// Where a job is in its life. `Succeeded`, `Failed` and `Cancelled` are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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
    /// What the user asked for.
    pub spec: JobSpec,
    /// Where it is in its lifecycle.
    pub state: JobState,
    /// Submission time, Unix milliseconds.
    pub submitted_at_ms: i64,
    /// Last state change, Unix milliseconds.
    pub updated_at_ms: i64,
    /// Number of attempts made so far (the next attempt's number is this plus one).
    pub attempts: u32,
    /// USD accrued over all attempts.
    pub cost_usd: f64,
    /// While pending: why it is not placed (empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_reasons: Vec<String>,
}

/// Where an attempt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

/// One placement of a job on one fleet.
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
    /// VM size.
    pub size: String,
    /// Spot or regular.
    pub priority: Priority,
    /// VMs asked for.
    pub vms: u32,
    /// Price per VM-hour when placed.
    pub price_per_hour: f64,
    /// Where the attempt is.
    pub state: AttemptState,
    /// When the intent was written, Unix milliseconds.
    pub started_at_ms: i64,
    /// When it ended, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at_ms: Option<i64>,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// The fleet name for a job's attempt: deterministic, so that after a crash the scheduler finds
/// the fleet it may already have created instead of creating a twin. Azure allows 1–80 characters
/// of letters, digits, `-`, `.`, `_`.
pub fn fleet_name(job_id: &str, attempt: u32) -> String {
    let clean: String =
        job_id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' }).take(60).collect();
    format!("spw-{}-a{attempt}", clean.trim_matches('-'))
}
