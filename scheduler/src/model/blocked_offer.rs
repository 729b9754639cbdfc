//! Blocked offers: offers that failed recently and are not tried again until their block expires.
//!
//! Nomad calls these "blocked evals" seen from the other side: instead of retrying blindly, the
//! scheduler remembers *what* failed (an offer, a family's quota, a region's spot pool) and for
//! how long, and plans around it. Users see every block with its reason and expiry.

use serde::{Deserialize, Serialize};

use super::offer::Priority;
use super::quota::{QuotaPool, normalize_family};
use crate::cloud::{CloudError, FailureClass};

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

    /// The block a failure calls for, scoped by what the error says and, where it says nothing,
    /// by the offer that was tried. `None` for failures that say nothing about the offer.
    pub fn from_error(
        err: &CloudError,
        tried_region: &str,
        tried_size: &str,
        tried_priority: Priority,
        now_ms: i64,
    ) -> Option<BlockedOffer> {
        let ttl = err.block_for()?;
        let mut b = BlockedOffer {
            region: tried_region.to_string(),
            size: Some(tried_size.to_string()),
            family: None,
            priority: Some(tried_priority),
            zone: None,
            class: err.class(),
            reason: err.to_string(),
            since_ms: now_ms,
            until_ms: now_ms + ttl.as_millis() as i64,
        };
        match err {
            CloudError::Quota { region, pool, .. } => {
                b.region = region.clone();
                b.size = None;
                match pool {
                    QuotaPool::LowPriorityCores => b.priority = Some(Priority::Spot),
                    QuotaPool::Cores => b.priority = Some(Priority::Regular),
                    QuotaPool::Family(f) => {
                        b.family = Some(f.clone());
                        b.priority = Some(Priority::Regular);
                    }
                }
                b.reason = quota_reason(err);
            }
            CloudError::Capacity { region, size, zone, .. } => {
                // NOTES.md: an allocation failure says the size has no room there, in both tiers.
                b.region = region.clone();
                b.size = Some(size.clone().unwrap_or_else(|| tried_size.to_string()));
                b.priority = None;
                b.zone = zone.clone();
            }
            CloudError::SizeUnavailable { region, size, priority } => {
                b.region = region.clone();
                b.size = Some(size.clone());
                b.priority = priority.or(Some(tried_priority));
            }
            CloudError::PriceAboveCap { region, size } => {
                b.region = region.clone();
                b.size = Some(size.clone().unwrap_or_else(|| tried_size.to_string()));
                b.priority = Some(Priority::Spot);
            }
            CloudError::Permanent { .. } => {}
            CloudError::Throttled { .. } | CloudError::Transient { .. } | CloudError::NotFound { .. } => return None,
        }
        Some(b)
    }
}

fn quota_reason(err: &CloudError) -> String {
    match err {
        CloudError::Quota { region, pool, limit, usage, required } => {
            let mut s = format!("no quota: {region} {pool}");
            if let (Some(l), Some(u)) = (limit, usage) {
                s.push_str(&format!(" (limit {l} vCPUs, {u} used"));
                if let Some(r) = required {
                    s.push_str(&format!(", {r} more needed"));
                }
                s.push(')');
            }
            s
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn family_quota_blocks_the_family_regular_tier_in_the_region() {
        let err = CloudError::Quota {
            region: "eastus".into(),
            pool: QuotaPool::Family("standardNCADSA100v4Family".into()),
            limit: Some(96),
            usage: Some(96),
            required: Some(24),
        };
        let b = BlockedOffer::from_error(&err, "eastus", "Standard_NC24ads_A100_v4", Priority::Regular, 0).unwrap();
        assert_eq!(b.until_ms, 600_000, "family quota blocks for 10 minutes");
        assert!(b.covers("eastus", "Standard_NC96ads_A100_v4", "StandardNCADSA100v4Family", Priority::Regular));
        assert!(!b.covers("eastus", "Standard_NC96ads_A100_v4", "standardNCADSA100v4Family", Priority::Spot));
        assert!(!b.covers("westus3", "Standard_NC96ads_A100_v4", "standardNCADSA100v4Family", Priority::Regular));
        assert!(b.reason.contains("limit 96 vCPUs, 96 used, 24 more needed"), "{}", b.reason);
    }

    #[test]
    fn capacity_blocks_the_size_in_both_tiers_for_an_hour() {
        let err = CloudError::Capacity { region: "eastus".into(), size: None, priority: None, zone: None };
        let b = BlockedOffer::from_error(&err, "eastus", "Standard_ND96asr_v4", Priority::Spot, 1_000).unwrap();
        assert_eq!(b.until_ms, 1_000 + 3_600_000);
        assert!(b.covers("eastus", "Standard_ND96asr_v4", "f", Priority::Regular));
        assert!(b.covers("eastus", "Standard_ND96asr_v4", "f", Priority::Spot));
        assert!(!b.covers("eastus", "Standard_ND96amsr_A100_v4", "f", Priority::Spot));
        assert!(b.is_active(3_600_999) && !b.is_active(3_601_000));
    }

    #[test]
    fn regular_sku_unavailable_blocks_for_23_hours_and_throttling_blocks_nothing() {
        let err = CloudError::SizeUnavailable { region: "westus".into(), size: "S".into(), priority: None };
        let b = BlockedOffer::from_error(&err, "westus", "S", Priority::Regular, 0).unwrap();
        assert_eq!(b.until_ms, 23 * 3_600_000);
        assert!(
            BlockedOffer::from_error(&CloudError::Throttled { retry_after_ms: None }, "r", "s", Priority::Spot, 0)
                .is_none()
        );
    }
}
