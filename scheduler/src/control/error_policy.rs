//! The one error policy of the control loop: every classified [`CloudError`] maps here to what the
//! loop does about it: which offers to block and for how long, whether the region's circuit breaker
//! counts it, and when to look again (Karpenter's unavailable-offerings cache, kube-rs'
//! `Action::requeue`). No other code decides a block's scope or duration.
//!
//! Block durations are the reference values of `azure/NOTES.md` (from an AKS node provisioner in
//! production), each named with its reason below.

use crate::cloud::CloudError;
use crate::model::{BlockedOffer, Priority, QuotaPool};

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 60 * MINUTE_MS;

/// No capacity for the size (`AllocationFailed`, `ZonalAllocationFailed`): capacity comes back on
/// the scale of an hour; asking sooner mostly fails again.
pub const CAPACITY_BLOCK_MS: i64 = HOUR_MS;
/// `SkuNotAvailable` for spot: spot capacity for a size comes and goes within hours.
pub const SPOT_SIZE_UNAVAILABLE_BLOCK_MS: i64 = HOUR_MS;
/// `SkuNotAvailable` for regular: the size is not sold there (to this subscription); that changes
/// on the scale of days, so a day less an hour (the next day's retry lands before the same hour).
pub const REGULAR_SIZE_UNAVAILABLE_BLOCK_MS: i64 = 23 * HOUR_MS;
/// A family's quota is exhausted: other work frees quota within minutes.
pub const FAMILY_QUOTA_BLOCK_MS: i64 = 10 * MINUTE_MS;
/// A pool whose limit is 0: only a quota request raises it, which takes hours.
pub const ZERO_QUOTA_BLOCK_MS: i64 = HOUR_MS;
/// The region's spot (`lowPriorityCores`) quota is exhausted: spot quota is shared by every spot
/// VM of the subscription and frees slowly.
pub const SPOT_QUOTA_BLOCK_MS: i64 = HOUR_MS;
/// The spot price is above the cap we gave: spot prices move on the scale of minutes to hours.
pub const PRICE_ABOVE_CAP_BLOCK_MS: i64 = 10 * MINUTE_MS;
/// A permanent refusal (bad request, spot not supported for the size, authorization): retrying
/// the same offer cannot help until something is changed by people, so once a day.
pub const PERMANENT_BLOCK_MS: i64 = 23 * HOUR_MS;
/// Our spot VMs there were evicted: the spot pool just ran dry; come back a little later rather
/// than walk into the next eviction.
pub const SPOT_EVICTION_BLOCK_MS: i64 = 15 * MINUTE_MS;

/// Our regular VMs there were lost and the fleet did not refill them (an outage, or a fleet below
/// its minimum past the grace period): Azure publishes no free capacity, so this loss is what says
/// the size has no room there now; as long as an allocation failure's block.
pub const REGULAR_LOST_BLOCK_MS: i64 = CAPACITY_BLOCK_MS;

/// Look again after a transient failure (5xx, timeouts): soon, but not in a tight loop.
pub const TRANSIENT_REQUEUE_MS: i64 = 5_000;
/// Look again after throttling when the cloud named no `Retry-After`.
pub const THROTTLED_REQUEUE_MS: i64 = 10_000;

/// What the loop does about one failure of an offer it tried.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The offers not to try again until the block expires.
    pub block: Option<BlockedOffer>,
    /// Whether the failure says something about the region's health (its circuit breaker counts
    /// it): no capacity, or the service failing. Quota and price are our own limits.
    pub counts_against_region: bool,
    /// When to look at the same thing again, in milliseconds from now; `None` when the next round
    /// may (retrying cannot help before the block expires, or nothing is left to retry).
    pub requeue_after_ms: Option<i64>,
}

/// The offer that was tried.
#[derive(Debug, Clone, Copy)]
pub struct Tried<'a> {
    /// Region.
    pub region: &'a str,
    /// Size asked for first.
    pub size: &'a str,
    /// Spot or regular.
    pub priority: Priority,
}

/// The verdict on `err`, met trying `tried` at `now_ms`.
pub fn verdict(err: &CloudError, tried: Tried<'_>, now_ms: i64) -> Verdict {
    Verdict {
        block: block_for(err, tried, now_ms),
        counts_against_region: matches!(err, CloudError::Capacity { .. } | CloudError::Transient { .. }),
        requeue_after_ms: requeue_after_ms(err),
    }
}

/// When to retry a call that failed with `err`: after `Retry-After` when throttled, soon after a
/// transient failure; `None` for failures that retrying does not mend.
pub fn requeue_after_ms(err: &CloudError) -> Option<i64> {
    match err {
        CloudError::Throttled { retry_after_ms } => {
            Some(retry_after_ms.map_or(THROTTLED_REQUEUE_MS, |ms| i64::try_from(ms).unwrap_or(i64::MAX)))
        }
        CloudError::Transient { .. } => Some(TRANSIENT_REQUEUE_MS),
        _ => None,
    }
}

/// How long a failure blocks the offers it names; `None` for failures that say nothing about the
/// offer (throttling, transient, not found).
pub fn block_duration_ms(err: &CloudError) -> Option<i64> {
    Some(match err {
        CloudError::Quota { pool: QuotaPool::LowPriorityCores, .. } => SPOT_QUOTA_BLOCK_MS,
        CloudError::Quota { limit: Some(0), .. } => ZERO_QUOTA_BLOCK_MS,
        CloudError::Quota { .. } => FAMILY_QUOTA_BLOCK_MS,
        CloudError::Capacity { .. } => CAPACITY_BLOCK_MS,
        CloudError::SizeUnavailable { priority: Some(Priority::Spot), .. } => SPOT_SIZE_UNAVAILABLE_BLOCK_MS,
        CloudError::SizeUnavailable { .. } => REGULAR_SIZE_UNAVAILABLE_BLOCK_MS,
        CloudError::PriceAboveCap { .. } => PRICE_ABOVE_CAP_BLOCK_MS,
        CloudError::Permanent { .. } => PERMANENT_BLOCK_MS,
        CloudError::Throttled { .. } | CloudError::Transient { .. } | CloudError::NotFound { .. } => return None,
    })
}

/// The block a failure calls for, scoped by what the error says and, where it says nothing, by the
/// offer that was tried.
pub fn block_for(err: &CloudError, tried: Tried<'_>, now_ms: i64) -> Option<BlockedOffer> {
    let ttl = block_duration_ms(err)?;
    let mut b = BlockedOffer {
        region: tried.region.to_string(),
        size: Some(tried.size.to_string()),
        family: None,
        priority: Some(tried.priority),
        zone: None,
        class: err.class(),
        reason: err.to_string(),
        since_ms: now_ms,
        until_ms: now_ms + ttl,
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
            b.size = Some(size.clone().unwrap_or_else(|| tried.size.to_string()));
            b.priority = None;
            b.zone = zone.clone();
        }
        CloudError::SizeUnavailable { region, size, priority } => {
            b.region = region.clone();
            b.size = Some(size.clone());
            b.priority = priority.or(Some(tried.priority));
        }
        CloudError::PriceAboveCap { region, size } => {
            b.region = region.clone();
            b.size = Some(size.clone().unwrap_or_else(|| tried.size.to_string()));
            b.priority = Some(Priority::Spot);
        }
        CloudError::Permanent { .. } => {}
        CloudError::Throttled { .. } | CloudError::Transient { .. } | CloudError::NotFound { .. } => return None,
    }
    Some(b)
}

/// The block after our spot VMs in a region were evicted: that size's spot offer there, for
/// [`SPOT_EVICTION_BLOCK_MS`].
pub fn spot_eviction_block(region: &str, size: &str, now_ms: i64) -> BlockedOffer {
    BlockedOffer {
        region: region.to_string(),
        size: Some(size.to_string()),
        family: None,
        priority: Some(Priority::Spot),
        zone: None,
        class: crate::model::FailureClass::Capacity,
        reason: "spot VMs evicted".into(),
        since_ms: now_ms,
        until_ms: now_ms + SPOT_EVICTION_BLOCK_MS,
    }
}

/// The block after one of our fleets lost VMs it could not get back (every VM, or below its
/// minimum past the grace period): that size's offer there in the fleet's tier, for
/// [`SPOT_EVICTION_BLOCK_MS`] (spot) or [`REGULAR_LOST_BLOCK_MS`] (regular). The job's next
/// placement, made in the same round, then goes elsewhere instead of asking the offer that just
/// failed it.
pub fn lost_vms_block(region: &str, size: &str, priority: Priority, now_ms: i64) -> BlockedOffer {
    match priority {
        Priority::Spot => spot_eviction_block(region, size, now_ms),
        Priority::Regular => BlockedOffer {
            region: region.to_string(),
            size: Some(size.to_string()),
            family: None,
            priority: Some(Priority::Regular),
            zone: None,
            class: crate::model::FailureClass::Capacity,
            reason: "regular VMs lost and not refilled".into(),
            since_ms: now_ms,
            until_ms: now_ms + REGULAR_LOST_BLOCK_MS,
        },
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

    fn tried(region: &'static str, size: &'static str, priority: Priority) -> Tried<'static> {
        Tried { region, size, priority }
    }

    #[test]
    fn family_quota_blocks_the_family_regular_tier_in_the_region_for_ten_minutes() {
        let err = CloudError::Quota {
            region: "eastus".into(),
            pool: QuotaPool::Family("standardNCADSA100v4Family".into()),
            limit: Some(96),
            usage: Some(96),
            required: Some(24),
        };
        let v = verdict(&err, tried("eastus", "Standard_NC24ads_A100_v4", Priority::Regular), 0);
        let b = v.block.unwrap();
        assert_eq!(b.until_ms, FAMILY_QUOTA_BLOCK_MS);
        assert!(b.covers("eastus", "Standard_NC96ads_A100_v4", "StandardNCADSA100v4Family", Priority::Regular));
        assert!(!b.covers("eastus", "Standard_NC96ads_A100_v4", "standardNCADSA100v4Family", Priority::Spot));
        assert!(!b.covers("westus3", "Standard_NC96ads_A100_v4", "standardNCADSA100v4Family", Priority::Regular));
        assert!(b.reason.contains("limit 96 vCPUs, 96 used, 24 more needed"), "{}", b.reason);
        assert!(!v.counts_against_region, "quota is our own limit, not the region's health");
        assert_eq!(v.requeue_after_ms, None);
    }

    #[test]
    fn a_zero_limit_and_spot_quota_block_for_an_hour() {
        let zero = CloudError::Quota {
            region: "westus2".into(),
            pool: QuotaPool::Family("f".into()),
            limit: Some(0),
            usage: Some(0),
            required: Some(24),
        };
        assert_eq!(block_duration_ms(&zero), Some(HOUR_MS));
        let spot = CloudError::Quota {
            region: "westus2".into(),
            pool: QuotaPool::LowPriorityCores,
            limit: Some(100),
            usage: Some(96),
            required: Some(96),
        };
        let b = block_for(&spot, tried("westus2", "S", Priority::Spot), 0).unwrap();
        assert_eq!((b.until_ms, b.priority, b.size), (HOUR_MS, Some(Priority::Spot), None));
    }

    #[test]
    fn capacity_blocks_the_size_in_both_tiers_for_an_hour_and_counts_against_the_region() {
        let err = CloudError::Capacity { region: "eastus".into(), size: None, priority: None, zone: None };
        let v = verdict(&err, tried("eastus", "Standard_ND96asr_v4", Priority::Spot), 1_000);
        let b = v.block.unwrap();
        assert_eq!(b.until_ms, 1_000 + 3_600_000);
        assert!(b.covers("eastus", "Standard_ND96asr_v4", "f", Priority::Regular));
        assert!(b.covers("eastus", "Standard_ND96asr_v4", "f", Priority::Spot));
        assert!(!b.covers("eastus", "Standard_ND96amsr_A100_v4", "f", Priority::Spot));
        assert!(b.is_active(3_600_999) && !b.is_active(3_601_000));
        assert!(v.counts_against_region);
    }

    #[test]
    fn size_unavailable_blocks_regular_for_23_hours_and_spot_for_one() {
        let err = CloudError::SizeUnavailable { region: "westus".into(), size: "S".into(), priority: None };
        let b = block_for(&err, tried("westus", "S", Priority::Regular), 0).unwrap();
        assert_eq!(b.until_ms, 23 * 3_600_000);
        let spot =
            CloudError::SizeUnavailable { region: "westus".into(), size: "S".into(), priority: Some(Priority::Spot) };
        assert_eq!(block_duration_ms(&spot), Some(HOUR_MS));
    }

    #[test]
    fn throttling_and_transient_failures_block_nothing_and_requeue() {
        let throttled = CloudError::Throttled { retry_after_ms: Some(7_000) };
        let v = verdict(&throttled, tried("r", "s", Priority::Spot), 0);
        assert_eq!((v.block, v.counts_against_region, v.requeue_after_ms), (None, false, Some(7_000)));
        assert_eq!(requeue_after_ms(&CloudError::Throttled { retry_after_ms: None }), Some(THROTTLED_REQUEUE_MS));
        let transient = CloudError::Transient { message: "500".into() };
        let v = verdict(&transient, tried("r", "s", Priority::Spot), 0);
        assert_eq!((v.block, v.counts_against_region, v.requeue_after_ms), (None, true, Some(TRANSIENT_REQUEUE_MS)));
        assert_eq!(verdict(&CloudError::NotFound { what: "x".into() }, tried("r", "s", Priority::Spot), 0).block, None);
    }

    #[test]
    fn lost_regular_vms_block_that_regular_offer_for_an_hour() {
        let b = lost_vms_block("eastus", "S", Priority::Regular, 100);
        assert_eq!((b.region.as_str(), b.size.as_deref(), b.priority), ("eastus", Some("S"), Some(Priority::Regular)));
        assert_eq!((b.class, b.until_ms), (crate::model::FailureClass::Capacity, 100 + HOUR_MS));
        assert_eq!(lost_vms_block("eastus", "S", Priority::Spot, 100), spot_eviction_block("eastus", "S", 100));
    }

    #[test]
    fn an_eviction_blocks_that_spot_offer_for_fifteen_minutes() {
        let b = spot_eviction_block("eastus", "S", 100);
        assert!(b.covers("eastus", "S", "f", Priority::Spot) && !b.covers("eastus", "S", "f", Priority::Regular));
        assert_eq!(b.until_ms, 100 + SPOT_EVICTION_BLOCK_MS);
    }
}
