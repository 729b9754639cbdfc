//! Offers: a (region, size, priority) the cloud lists, with its price. Whether the scheduler may
//! use one now (blocked after a failure, its region's breaker open, no quota or capacity left) is
//! not the cloud's to say: the control loop's feasibility chain decides, and names the filter.

use serde::{Deserialize, Serialize};

use super::Priority;

/// A (region, size, priority) candidate with what is known about it right now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offer {
    /// Azure region name, e.g. `eastus`.
    pub region: String,
    /// VM size name.
    pub size: String,
    /// Spot or regular.
    pub priority: Priority,
    /// USD per VM-hour; `None` when the price is unknown (such an offer is never chosen).
    pub price_per_hour: Option<f64>,
    /// Estimated VMs obtainable; `None` when unknown.
    pub capacity_vms: Option<u32>,
    /// Expected evictions per VM-hour (0 for regular).
    pub eviction_rate_per_hour: f64,
}
