//! Offers: a (region, size, priority) the cloud lists, with its price. Whether the scheduler may
//! use one now (blocked after a failure, its region's breaker open, no quota or capacity left) is
//! not the cloud's to say: the control loop's feasibility chain decides, and names the filter.

use serde::{Deserialize, Serialize};

use super::{EvictionBand, PlacementScore, Priority};

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
    /// VMs known to be obtainable; `None` when unknown, which is always the case on Azure and in
    /// the simulated cloud (neither publishes free capacity): only hand-built worlds set it.
    pub capacity_vms: Option<u32>,
    /// The evictions per VM-hour the solver plans with (0 for regular): a prior, never a measured
    /// exact rate, made from the published signals below by [`super::spot_eviction_prior`].
    pub eviction_rate_per_hour: f64,
    /// The published spot eviction-rate band (spot only; `None` where none is published).
    #[serde(default)]
    pub eviction_band: Option<EvictionBand>,
    /// The published spot placement score (spot only; `None` where none is published).
    #[serde(default)]
    pub placement_score: Option<PlacementScore>,
}
