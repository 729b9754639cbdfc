//! Blocked offers: offers that failed recently and are not tried again until their block expires.
//!
//! Nomad calls these "blocked evals" seen from the other side: instead of retrying blindly, the
//! scheduler remembers *what* failed (an offer, a family's quota, a region's spot pool) and for
//! how long, and plans around it. Users see every block with its reason and expiry.

use serde::{Deserialize, Serialize};

use super::FailureClass;
use super::Priority;
use super::normalize_family;

/// One block: a scope of offers (region, and optionally size, family, priority, zone) that must
/// not be used until `until_ms`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockedOffer {
    /// Region.
    pub region: String,
    /// One size, or every size when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// One quota family (regular tier), when the block is a family's quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    /// One priority, or both when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    /// One zone, when the failure was zonal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The failure class that caused it.
    pub class: FailureClass,
    /// The failure, in words.
    pub reason: String,
    /// When the block started, Unix milliseconds.
    pub since_ms: i64,
    /// When the block ends, Unix milliseconds.
    pub until_ms: i64,
}

impl BlockedOffer {
    /// A stable key: one block per scope (a newer failure of the same scope replaces the older).
    pub fn key(&self) -> String {
        format!(
            "{}/{}/{}/{}/{}",
            self.region,
            self.size.as_deref().unwrap_or("*"),
            self.family.as_deref().map(normalize_family).unwrap_or_else(|| "*".into()),
            self.priority.map(|p| p.as_str()).unwrap_or("*"),
            self.zone.as_deref().unwrap_or("*"),
        )
    }

    /// True when the block still holds at `now_ms`.
    pub fn is_active(&self, now_ms: i64) -> bool {
        now_ms < self.until_ms
    }

    /// True when this block covers the offer (zone-wide blocks do not cover a whole region:
    /// other zones may still have capacity, so they only narrow the fleet's zones).
    pub fn covers(&self, region: &str, size: &str, family: &str, priority: Priority) -> bool {
        self.zone.is_none()
            && self.region == region
            && self.size.as_deref().is_none_or(|s| s.eq_ignore_ascii_case(size))
            && self.family.as_deref().is_none_or(|f| normalize_family(f) == normalize_family(family))
            && self.priority.is_none_or(|p| p == priority)
    }
}
