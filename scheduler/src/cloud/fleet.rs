//! Fleets as the scheduler sees them: what it asks for, what exists, and operations in flight.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::error::CloudError;
pub use crate::model::FleetOperation;
use crate::model::Priority;

/// Tag carrying the job id on every fleet spillway creates.
pub const TAG_JOB: &str = "spillway-job";
/// Tag carrying the attempt number on every fleet spillway creates.
pub const TAG_ATTEMPT: &str = "spillway-attempt";

/// A request for one fleet: one job attempt in one region.
///
/// A fleet has one priority, or is *mixed*: Compute Fleet's `spotPriorityProfile` and
/// `regularPriorityProfile` together in one fleet. A mixed request has `priority: Spot` (and
/// `vms`, `min_vms`, `max_price_per_vm` describe the spot part) and a [`FleetRequest::regular`]
/// part beside it. Each part draws its own quota pools (spot: `lowPriorityCores`; regular: the
/// family and `cores`), and spot evictions leave the regular part running.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetRequest {
    /// Deterministic name (`model::fleet_name`), so a retry finds the fleet instead of a twin.
    pub name: String,
    /// Region.
    pub region: String,
    /// Spot or regular.
    pub priority: Priority,
    /// Sizes ranked: the chosen one first, then compatible alternatives meeting the same demand.
    pub sizes: Vec<String>,
    /// VMs wanted.
    pub vms: u32,
    /// VMs below which the fleet is useless (= `vms` for a gang).
    pub min_vms: u32,
    /// Spot only: the most we pay per VM-hour.
    pub max_price_per_vm: Option<f64>,
    /// Zones to use; empty = let the cloud choose.
    pub zones: Vec<String>,
    /// Tags, including [`TAG_JOB`] and [`TAG_ATTEMPT`].
    pub tags: BTreeMap<String, String>,
    /// A mixed fleet's regular part (with `priority: Spot`); `None` for a one-priority fleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regular: Option<FleetPart>,
}

impl FleetRequest {
    /// VMs asked for over both parts.
    pub fn total_vms(&self) -> u32 {
        self.vms.saturating_add(self.regular.map_or(0, |r| r.vms))
    }
}

/// The capacity of one priority's part of a fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetPart {
    /// VMs wanted.
    pub vms: u32,
    /// VMs below which the part is useless; Azure refuses to change it after creation.
    pub min_vms: u32,
}

/// One priority's part of a fleet as it exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetPartStatus {
    /// VMs asked for.
    pub capacity_vms: u32,
    /// Minimum VMs.
    pub min_capacity_vms: u32,
    /// VMs running now, when the cloud can tell.
    pub running_vms: Option<u32>,
}

/// Azure's `provisioningState`, open: values we do not know are kept, and treated as not final.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ProvisioningState {
    /// Being created.
    Creating,
    /// Being updated.
    Updating,
    /// Done.
    Succeeded,
    /// Failed.
    Failed,
    /// Cancelled.
    Canceled,
    /// Being deleted.
    Deleting,
    /// Being migrated.
    Migrating,
    /// A value this build does not know.
    Other(String),
}

impl ProvisioningState {
    /// Parses Azure's spelling; unknown values are kept as `Other`.
    pub fn parse(s: &str) -> ProvisioningState {
        match s {
            "Creating" => ProvisioningState::Creating,
            "Updating" => ProvisioningState::Updating,
            "Succeeded" => ProvisioningState::Succeeded,
            "Failed" => ProvisioningState::Failed,
            "Canceled" | "Cancelled" => ProvisioningState::Canceled,
            "Deleting" => ProvisioningState::Deleting,
            "Migrating" => ProvisioningState::Migrating,
            other => ProvisioningState::Other(other.to_string()),
        }
    }

    /// Azure's spelling.
    pub fn as_str(&self) -> &str {
        match self {
            ProvisioningState::Creating => "Creating",
            ProvisioningState::Updating => "Updating",
            ProvisioningState::Succeeded => "Succeeded",
            ProvisioningState::Failed => "Failed",
            ProvisioningState::Canceled => "Canceled",
            ProvisioningState::Deleting => "Deleting",
            ProvisioningState::Migrating => "Migrating",
            ProvisioningState::Other(s) => s,
        }
    }

    /// True for `Succeeded`, `Failed` and `Canceled`; unknown values are not final.
    pub fn is_final(&self) -> bool {
        matches!(self, ProvisioningState::Succeeded | ProvisioningState::Failed | ProvisioningState::Canceled)
    }
}

impl fmt::Display for ProvisioningState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ProvisioningState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ProvisioningState {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(ProvisioningState::parse(&String::deserialize(d)?))
    }
}

/// A fleet that exists in the cloud. For a mixed fleet `priority` is spot, the counts below are
/// the spot part's, and [`Fleet::regular`] is the regular part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fleet {
    /// Name.
    pub name: String,
    /// Region.
    pub region: String,
    /// Spot or regular (the profile with non-zero capacity; spot when both have some).
    pub priority: Priority,
    /// Sizes, ranked. Shared, as are the tags: a cloud that keeps its fleets in memory (the
    /// simulator) hands out its own copy, read every round for every live fleet, without copying
    /// every string of it.
    pub sizes: Arc<[String]>,
    /// VMs asked for.
    pub capacity_vms: u32,
    /// Minimum VMs.
    pub min_capacity_vms: u32,
    /// Where its last operation is.
    pub provisioning_state: ProvisioningState,
    /// Tags.
    pub tags: Arc<BTreeMap<String, String>>,
    /// VMs running now, when the cloud can tell (it falls on spot evictions).
    pub running_vms: Option<u32>,
    /// A mixed fleet's regular part; `None` for a one-priority fleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regular: Option<FleetPartStatus>,
}

/// Where a create operation is.
#[derive(Debug, Clone, PartialEq)]
pub enum OperationStatus {
    /// Still running; poll again after the given time.
    InProgress {
        /// Milliseconds to wait.
        retry_after_ms: u64,
    },
    /// The fleet exists.
    Succeeded,
    /// The operation failed for the given (classified) reason.
    Failed(CloudError),
}

/// One scale set of a fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaleSet {
    /// Name.
    pub name: String,
    /// Resource id.
    pub id: String,
    /// Where its last operation is.
    pub operation_status: ProvisioningState,
    /// The classified error when `operation_status` is `Failed`.
    pub error: Option<CloudError>,
}

/// A size that cannot be used in a region, or in some of its zones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeRestriction {
    /// Region.
    pub region: String,
    /// Size.
    pub size: String,
    /// Zones affected; empty = the whole region.
    pub zones: Vec<String>,
    /// Azure's reason code (`NotAvailableForSubscription`, `QuotaId`, or a newer one).
    pub reason: String,
}
