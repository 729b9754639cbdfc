//! Spot or regular, and when a job may use spot: the two choices every layer of the workspace
//! speaks of. Defined once here, below both the problem format and the quota-pool rule (which
//! name them), and re-exported by the scheduler's model.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Spot or regular (Azure's "priority"; "tier" in prose). The one definition in the workspace: the
/// scheduler and the simulator use this type (`scheduler::model::Priority` re-exports it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Pay-as-you-go VMs: counted against the family pool and the region's `cores` pool.
    Regular,
    /// Evictable VMs: counted against the region's `lowPriorityCores` pool only.
    Spot,
}

impl Priority {
    /// `regular` or `spot`, as in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Regular => "regular",
            Priority::Spot => "spot",
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Priority {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "regular" => Ok(Priority::Regular),
            "spot" => Ok(Priority::Spot),
            _ => Err(format!("unknown priority {s:?}: expected regular or spot")),
        }
    }
}

/// When a job may use spot VMs. The one definition in the workspace: a job spec's `spot` field is this
/// type (`scheduler::model::SpotPolicy` re-exports it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum SpotPolicy {
    /// Regular VMs only.
    #[default]
    Never,
    /// Spot or regular, whichever is cheaper (eviction cost included).
    Allowed,
    /// Spot or regular; spot wins ties.
    Preferred,
    /// Spot VMs only: the job waits for spot rather than run on regular capacity it chose not to pay
    /// for (also what a deadline policy asks for while the job has slack to ride spot).
    Only,
}

impl SpotPolicy {
    /// The priorities a job with this policy may run at: the one home of "spot never / only".
    pub fn priorities(self) -> &'static [Priority] {
        match self {
            SpotPolicy::Never => &[Priority::Regular],
            SpotPolicy::Only => &[Priority::Spot],
            SpotPolicy::Allowed | SpotPolicy::Preferred => &[Priority::Regular, Priority::Spot],
        }
    }
}
