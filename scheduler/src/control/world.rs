//! The scheduler's view of the world: quota per pool, offers, size restrictions and blocked offers.
//!
//! Quota is read from the cloud every few minutes; between reads it is adjusted for our own work
//! in flight. At each read we split the cloud's usage into ours (the attempts we know run there)
//! and everyone else's; free quota is then `limit − others − ours now`, so a fleet we are creating
//! counts against quota the moment its intent is written (reserve before create) and stops counting
//! the moment its attempt fails (release on failure), whatever the cloud's next read says.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

use crate::catalog::Catalog;
use crate::cloud::SizeRestriction;
use crate::model::{Attempt, BlockedOffer, Offer, Priority, Quota, QuotaPool};

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

/// vCPUs our active attempts hold per (region, pool key), by the pools each VM draws from
/// ([`QuotaPool::keys_drawn_by`]).
pub fn our_usage<'a>(attempts: impl Iterator<Item = &'a Attempt>) -> BTreeMap<(String, String), (u64, u64)> {
    // Summed per region, priority and family on borrowed keys first, then spread over the pools
    // each draws from: this runs several times a round over every active attempt, and owned pool
    // keys made per attempt (the family normalised, region and key copied) were most of its cost.
    let mut per_offer: BTreeMap<(&str, Priority, &str), (u64, u64)> = BTreeMap::new();
    for a in attempts.filter(|a| a.is_active()) {
        let provisioning = a.state == crate::model::AttemptState::Provisioning;
        // A mixed fleet's parts draw their own pools: its regular VMs' vCPUs are taken out of its
        // total and counted at regular priority.
        let regular_vcpus = a.regular.map_or(0, |r| a.vcpus_per_vm() * u64::from(r.vms)).min(a.vcpus);
        let parts = [(a.priority, a.vcpus - regular_vcpus), (Priority::Regular, regular_vcpus)];
        for (priority, vcpus) in parts.into_iter().filter(|&(_, v)| v > 0) {
            let e = per_offer.entry((a.region.as_str(), priority, a.family.as_str())).or_default();
            e.0 += vcpus;
            e.1 += if provisioning { vcpus } else { 0 };
        }
    }
    let mut out: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    for ((region, priority, family), (vcpus, in_flight)) in per_offer {
        for p in QuotaPool::keys_drawn_by(priority, family) {
            let e = out.entry((region.to_string(), p)).or_default();
            e.0 += vcpus;
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
            let key = (region.to_string(), q.pool.key());
            let ours = ours_counted.get(&key).map(|x| x.0).unwrap_or(0);
            self.pools
                .insert(key, PoolEntry { pool: q.pool.clone(), limit: q.limit, others: q.usage.saturating_sub(ours) });
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
            .map(|(k, e)| {
                let region = &k.0;
                let (us, in_flight) = ours.get(k).copied().unwrap_or((0, 0));
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

    /// Free vCPUs of one pool (by key: a normalised family, `cores`, `lowprioritycores`) after our
    /// current usage; `None` when the pool was never read (the cloud then decides).
    pub fn free_vcpus(&self, region: &str, key: &str, ours: &BTreeMap<(String, String), (u64, u64)>) -> Option<u64> {
        let k = (region.to_string(), key.to_string());
        let e = self.pools.get(&k)?;
        let us = ours.get(&k).map_or(0, |x| x.0);
        Some(e.limit.saturating_sub(e.others).saturating_sub(us))
    }

    /// The cloud's current price of an offer (`size` as the catalog spells it), looked up when
    /// placing and when prices moved rather than kept for every offer every round.
    pub fn list_price(&self, catalog: &Catalog, region: &str, size: &str, priority: Priority) -> Option<f64> {
        self.offers
            .iter()
            .rev()
            .filter(|o| o.region == region && o.priority == priority && o.price_per_hour.is_some())
            .find(|o| catalog.size(&o.size).is_some_and(|s| s.name == size && s.gpus > 0))
            .and_then(|o| o.price_per_hour)
    }

    /// True when the subscription may not use the size anywhere in the region.
    pub fn restricted(&self, region: &str, size: &str) -> bool {
        self.restrictions.iter().any(|r| r.region == region && r.zones.is_empty() && r.size.eq_ignore_ascii_case(size))
    }
}

/// Observations kept per region by [`SpotHistory`]: the policies' estimates look at most this far
/// back (at the default one-minute tick, about 16 hours).
pub const SPOT_HISTORY_TICKS: usize = 1000;

/// Spot availability per region as the control loop observed it, one entry per deadline tick (the
/// input of the deadline policies' history estimates).
///
/// **The rule**: region `r` counts as spot-*unavailable* during a tick if, in any round of that
/// tick, the cloud listed no spot GPU offer in `r` whose published placement score is above `Low`
/// (and whose capacity, where a hand-built world knows it, is not 0), or a capacity block (a spot
/// allocation failure or a spot eviction, see `BlockedOffer`) covered a spot offer in `r`, or a
/// spot VM of ours in `r` lost VMs in that round; it counts as available otherwise. Ticks that passed without a round
/// take the next round's observation. Only the last [`SPOT_HISTORY_TICKS`] ticks are kept, and only
/// in memory: after a restart the history starts empty, and the policies start from their priors.
#[derive(Debug, Default, Clone)]
pub struct SpotHistory {
    /// Absolute index of the last tick observed (`now ÷ tick`), if any.
    last_tick: Option<i64>,
    /// Ticks observed since the history began (the absolute count the windows end at).
    observed: u64,
    regions: BTreeMap<String, VecDeque<bool>>,
}

impl SpotHistory {
    /// Records one round's observation at `now_ms`: `available` says, per region the round looked
    /// at, whether spot counts as available (regions known before and absent now count as
    /// unavailable). A second round in the same tick can only turn the tick unavailable.
    pub fn observe(&mut self, now_ms: i64, tick_ms: i64, available: &BTreeMap<String, bool>) {
        let tick = now_ms.div_euclid(tick_ms.max(1));
        for region in available.keys() {
            self.regions.entry(region.clone()).or_default();
        }
        let new_ticks = match self.last_tick {
            Some(last) if tick <= last => 0,
            Some(last) => (tick - last) as u64,
            None => 1,
        };
        for (region, window) in &mut self.regions {
            let up = available.get(region).copied().unwrap_or(false);
            if new_ticks == 0 {
                if let Some(last) = window.back_mut() {
                    *last &= up;
                } else {
                    window.push_back(up);
                }
                continue;
            }
            for _ in 0..new_ticks.min(SPOT_HISTORY_TICKS as u64) {
                if window.len() == SPOT_HISTORY_TICKS {
                    window.pop_front();
                }
                window.push_back(up);
            }
            window.make_contiguous();
        }
        self.observed += new_ticks;
        self.last_tick = Some(self.last_tick.map_or(tick, |l| l.max(tick)));
    }

    /// Ticks observed since the history began.
    pub fn observed(&self) -> u64 {
        self.observed
    }

    /// A region's window, oldest first, ending with the current tick (empty if never observed).
    pub fn window(&self, region: &str) -> &[bool] {
        self.regions.get(region).map_or(&[], |w| w.as_slices().0)
    }
}

#[cfg(test)]
mod spot_history_tests {
    use super::*;

    fn obs(pairs: &[(&str, bool)]) -> BTreeMap<String, bool> {
        pairs.iter().map(|(r, a)| (r.to_string(), *a)).collect()
    }

    #[test]
    fn one_entry_per_tick_and_a_bad_round_spoils_its_tick() {
        let mut h = SpotHistory::default();
        h.observe(0, 60_000, &obs(&[("a", true), ("b", true)]));
        // A second round in the same tick sees an eviction in b: the tick counts as unavailable.
        h.observe(30_000, 60_000, &obs(&[("a", true), ("b", false)]));
        h.observe(45_000, 60_000, &obs(&[("a", true), ("b", true)]));
        assert_eq!(h.observed(), 1);
        assert_eq!(h.window("b"), &[false]);
        // Three ticks later: the two ticks without a round take this round's observation.
        h.observe(3 * 60_000, 60_000, &obs(&[("a", false), ("b", true)]));
        assert_eq!(h.observed(), 4);
        assert_eq!(h.window("a"), &[true, false, false, false]);
        assert_eq!(h.window("b"), &[false, true, true, true]);
        assert_eq!(h.window("c"), &[] as &[bool]);
    }

    #[test]
    fn the_window_is_bounded_and_a_region_gone_from_the_offers_counts_as_unavailable() {
        let mut h = SpotHistory::default();
        for t in 0..(SPOT_HISTORY_TICKS as i64 + 5) {
            h.observe(t * 1000, 1000, &obs(&[("a", t % 2 == 0)]));
        }
        assert_eq!(h.observed(), SPOT_HISTORY_TICKS as u64 + 5);
        assert_eq!(h.window("a").len(), SPOT_HISTORY_TICKS);
        assert_eq!(h.window("a").last(), Some(&true), "tick 1004 is even");
        h.observe(2_000_000, 1000, &obs(&[]));
        assert_eq!(h.window("a").last(), Some(&false));
        assert_eq!(h.window("a").len(), SPOT_HISTORY_TICKS);
    }
}
