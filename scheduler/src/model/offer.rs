//! Offers: a (region, size, priority) the scheduler may place work on, with its price.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Azure's two VM priorities ("tiers" in prose).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Pay-as-you-go capacity that is not evicted.
    Regular,
    /// Spare capacity at a discount, evicted when Azure needs it back.
    Spot,
}

impl Priority {
    /// The lower-case word used in files and APIs.
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
    /// Why the offer is blocked right now; empty when it is usable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked: Vec<String>,
}
