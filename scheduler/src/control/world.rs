//! The scheduler's view of the world: quota per pool, offers, size restrictions and blocked offers.
//!
//! Quota is read from the cloud every few minutes; between reads it is adjusted for our own work
//! in flight. At each read we split the cloud's usage into ours (the attempts we know run there)
//! and everyone else's; free quota is then `limit − others − ours now`, so a fleet we are creating
//! counts against quota the moment its intent is written (reserve before create) and stops counting
//! the moment its attempt fails (release on failure), whatever the cloud's next read says.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::cloud::SizeRestriction;
use crate::model::{Attempt, BlockedOffer, Offer, Priority, Quota, QuotaPool, normalize_family};

/// One pool as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolView {
    /// Region.
    pub region: String,
    /// Pool name as the cloud spells it.
    pub pool: String,
    /// vCPU limit.
    pub limit: u64,
    /// vCPUs used by others (not by spillway's attempts).
    pub used_by_others: u64,
    /// vCPUs held by spillway's active attempts (running and in flight).
    pub used_by_us: u64,
    /// vCPUs held by attempts still provisioning (part of `used_by_us`).
    pub in_flight: u64,
    /// vCPUs free.
    pub free: u64,
    /// When the cloud was last read for this region, Unix milliseconds.
    pub refreshed_at_ms: i64,
}

#[derive(Debug, Clone)]
struct PoolEntry {
    pool: QuotaPool,
    limit: u64,
    others: u64,
}

/// Quota, offers, restrictions and blocks.
#[derive(Debug, Default)]
pub struct WorldView {
    pools: BTreeMap<(String, String), PoolEntry>,
    refreshed_at: BTreeMap<String, i64>,
    /// The cloud's offers at the last read.
    pub offers: Vec<Offer>,
    /// Sizes the subscription cannot use, per region.
    pub restrictions: Vec<SizeRestriction>,
    /// Offers blocked after failures (expired ones are pruned each round).
    pub blocked: Vec<BlockedOffer>,
}

/// vCPUs our active attempts hold per (region, pool key): a regular VM draws from its family and
/// from `cores`, a spot VM from `lowPriorityCores`.
pub fn our_usage<'a>(attempts: impl Iterator<Item = &'a Attempt>) -> BTreeMap<(String, String), (u64, u64)> {
    let mut out: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    for a in attempts.filter(|a| a.is_active()) {
        let in_flight = if a.state == crate::model::AttemptState::Provisioning { a.vcpus } else { 0 };
        let pools: Vec<String> = match a.priority {
            Priority::Regular => vec![normalize_family(&a.family), "cores".into()],
            Priority::Spot => vec!["lowprioritycores".into()],
        };
        for p in pools {
            let e = out.entry((a.region.clone(), p)).or_default();
            e.0 += a.vcpus;
            e.1 += in_flight;
        }
    }
    out
}

impl WorldView {
    /// True when the region's quota should be read again.
    pub fn quota_stale(&self, region: &str, now_ms: i64, refresh_ms: i64) -> bool {
        self.refreshed_at.get(region).is_none_or(|&t| now_ms - t >= refresh_ms)
    }

    /// Forces the next round to read the region's quota.
    pub fn mark_stale(&mut self, region: &str) {
        self.refreshed_at.remove(region);
    }

    /// Takes a fresh read of a region's quota. `ours_counted` is what our attempts that the
    /// cloud already counts (running ones) hold, per pool key.
    pub fn set_quota(
        &mut self,
        region: &str,
        quotas: &[Quota],
        ours_counted: &BTreeMap<(String, String), (u64, u64)>,
        now_ms: i64,
    ) {
        self.pools.retain(|(r, _), _| r != region);
        for q in quotas {
            let key = q.pool.key();
            let ours = ours_counted.get(&(region.to_string(), key.clone())).map(|x| x.0).unwrap_or(0);
            self.pools.insert(
                (region.to_string(), key),
                PoolEntry { pool: q.pool.clone(), limit: q.limit, others: q.usage.saturating_sub(ours) },
            );
        }
        self.refreshed_at.insert(region.to_string(), now_ms);
    }

    /// A quota failure says the pool is full now, whatever our last read said.
    pub fn mark_pool_full(&mut self, region: &str, pool: &QuotaPool, ours: &BTreeMap<(String, String), (u64, u64)>) {
        let key = pool.key();
        let our = ours.get(&(region.to_string(), key.clone())).map(|x| x.0).unwrap_or(0);
        let entry = self.pools.entry((region.to_string(), key)).or_insert(PoolEntry {
            pool: pool.clone(),
            limit: 0,
            others: 0,
        });
        entry.others = entry.limit.saturating_sub(our);
        self.mark_stale(region);
    }

    /// Every known pool with free vCPUs after our current usage.
    pub fn pools(&self, ours: &BTreeMap<(String, String), (u64, u64)>) -> Vec<PoolView> {
        self.pools
            .iter()
            .map(|((region, key), e)| {
                let (us, in_flight) = ours.get(&(region.clone(), key.clone())).copied().unwrap_or((0, 0));
                PoolView {
                    region: region.clone(),
                    pool: e.pool.name().to_string(),
                    limit: e.limit,
                    used_by_others: e.others,
                    used_by_us: us,
                    in_flight,
                    free: e.limit.saturating_sub(e.others).saturating_sub(us),
                    refreshed_at_ms: self.refreshed_at.get(region).copied().unwrap_or(0),
                }
            })
            .collect()
    }

    /// Drops expired blocks; returns how many remain.
    pub fn prune_blocks(&mut self, now_ms: i64) -> usize {
        self.blocked.retain(|b| b.is_active(now_ms));
        self.blocked.len()
    }

    /// Adds a block, replacing an older one of the same scope.
    pub fn add_block(&mut self, block: BlockedOffer) {
        let key = block.key();
        self.blocked.retain(|b| b.key() != key);
        self.blocked.push(block);
    }

    /// The active block covering an offer, if any.
    pub fn block_for(
        &self,
        region: &str,
        size: &str,
        family: &str,
        priority: Priority,
        now_ms: i64,
    ) -> Option<&BlockedOffer> {
        self.blocked.iter().find(|b| b.is_active(now_ms) && b.covers(region, size, family, priority))
    }

    /// True when the subscription may not use the size anywhere in the region.
    pub fn restricted(&self, region: &str, size: &str) -> bool {
        self.restrictions.iter().any(|r| r.region == region && r.zones.is_empty() && r.size.eq_ignore_ascii_case(size))
    }
}
