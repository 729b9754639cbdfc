//! The simulated cloud's state and its event processing. Everything here is synchronous and
//! driven by explicit times, so the same calls at the same (virtual) times give the same results.
//!
//! Events (a creation resolving, a spot eviction, a `maintain` refill, reclaimed capacity coming
//! back) are not run by background tasks: every call first processes, in time order, each event
//! due up to "now". The event search is a linear scan over fleets, which is ample for the few
//! hundred fleets a scenario holds.

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use scheduler::Catalog;
use scheduler::cloud::{CloudError, FailureClass, FleetRequest, ProvisioningState};
use scheduler::model::{EvictionBand, PlacementScore, Priority, QuotaPool, VmSize};
use serde::{Deserialize, Serialize};

use super::config::SimCloudConfig;

/// (region, size as the catalog spells it, priority).
pub(crate) type OfferKey = (String, String, Priority);

const HOUR_MS: f64 = 3_600_000.0;

/// Totals kept for reports: how the cloud answered.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SimCounters {
    /// Every `begin_create` call, repeats included.
    pub creates_attempted: u64,
    /// Calls that named a fleet that already existed (idempotent PUTs).
    pub creates_repeated: u64,
    /// Creations refused at once (quota, size, bad request).
    pub creates_refused: u64,
    /// Creations that ended with VMs running.
    pub creates_succeeded: u64,
    /// Creations accepted and then failed (capacity, price, injected failures).
    pub creates_failed: u64,
    /// Refusals and failures, by class.
    pub failures_by_class: BTreeMap<FailureClass, u64>,
    /// Fleets deleted (deleting an absent fleet does not count).
    pub deletes: u64,
    /// VMs lost to spot evictions and to `evict` calls.
    pub evictions: u64,
    /// VMs lost when an outage began.
    pub vms_lost_to_outages: u64,
    /// VMs that `maintain` fleets got back after losing them.
    pub vms_refilled: u64,
}

/// One fleet as the simulated cloud holds it, for reports and tests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetSnapshot {
    /// Name.
    pub name: String,
    /// Region.
    pub region: String,
    /// Priority.
    pub priority: Priority,
    /// Sizes as requested, ranked.
    pub sizes: Vec<String>,
    /// The size its VMs run on, once allocated.
    pub size: Option<String>,
    /// VMs asked for.
    pub capacity_vms: u32,
    /// Minimum VMs.
    pub min_capacity_vms: u32,
    /// VMs running now.
    pub running_vms: u32,
    /// `Creating`, `Succeeded` or `Failed`.
    pub state: ProvisioningState,
    /// Why it failed.
    pub error: Option<CloudError>,
    /// When it was accepted (clock ms).
    pub created_ms: i64,
    /// When its creation resolved (or will).
    pub ready_ms: i64,
    /// VMs it lost to evictions so far.
    pub evictions: u32,
    /// Whether it replaces lost VMs by itself.
    pub maintain: bool,
    /// Tags.
    pub tags: BTreeMap<String, String>,
    /// When its next spot eviction is due (clock ms), if one is drawn: what lets the simulated VMs
    /// give the preemption notice before it happens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_eviction_ms: Option<i64>,
    /// A mixed fleet's regular part (the fields above are then its spot part's).
    pub regular: Option<FleetPartSnapshot>,
    /// Until when it is being deleted (state `Deleting`), clock ms.
    pub deleting_until_ms: Option<i64>,
}

/// The regular part of a mixed fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetPartSnapshot {
    /// The size its VMs run on, once allocated.
    pub size: Option<String>,
    /// VMs asked for.
    pub capacity_vms: u32,
    /// Minimum VMs.
    pub min_capacity_vms: u32,
    /// VMs running now.
    pub running_vms: u32,
    /// VMs it lost so far.
    pub evictions: u32,
    /// Why it failed.
    pub error: Option<CloudError>,
}

/// Where a create operation is, with Azure's final states.
#[derive(Debug, Clone, PartialEq)]
pub enum OperationState {
    /// Still provisioning.
    InProgress,
    /// VMs running.
    Succeeded,
    /// Failed with this (classified) cause.
    Failed(CloudError),
    /// The fleet was deleted before its creation resolved.
    Canceled,
}

/// A create or update operation as the simulated cloud tracks it.
#[derive(Debug, Clone, PartialEq)]
pub struct OperationView {
    /// Operation id.
    pub id: String,
    /// The fleet it creates.
    pub fleet: String,
    /// The fleet's region.
    pub region: String,
    /// Where it is.
    pub state: OperationState,
    /// When it started (clock ms).
    pub started_ms: i64,
    /// When it resolves (or resolved).
    pub ends_ms: i64,
}

#[derive(Debug, Clone)]
pub(crate) struct OpRecord {
    pub fleet: String,
    pub region: String,
    pub started_ms: i64,
    pub ends_ms: i64,
    /// How it ended, once it has; an operation whose fleet went away before is `Canceled`.
    pub outcome: Option<OperationState>,
}

/// One priority's part of a fleet, keyed by the fleet's name; a mixed fleet's regular part is a
/// second `SimFleet` keyed [`regular_part_key`], linked both ways (`base` / `part_of`). Quota,
/// capacity, evictions and refills work part by part; the views (`fleet_of`, snapshots, listings,
/// operations) show one fleet.
#[derive(Debug, Clone)]
pub(crate) struct SimFleet {
    /// The request of this part: for a regular part, its own (priority regular, its VMs, the
    /// key [`regular_part_key`] as name); for the fleet itself, the whole request as given.
    pub req: FleetRequest,
    /// Requested sizes this region can run for this subscription, catalog-spelled, ranked.
    pub usable: Vec<String>,
    pub maintain: bool,
    pub op_id: String,
    pub state: ProvisioningState,
    pub created_ms: i64,
    pub ready_ms: i64,
    /// The size whose quota is held while creating.
    pub reserved: Option<String>,
    /// The size its VMs run on.
    pub size: Option<String>,
    pub running: u32,
    /// Sizes tried at allocation, with the error of each that failed.
    pub tried: Vec<(String, Option<CloudError>)>,
    pub error: Option<CloudError>,
    pub fail_with: Option<CloudError>,
    pub next_eviction_ms: Option<i64>,
    pub refill_at_ms: Option<i64>,
    pub evictions: u32,
    /// A mixed fleet: the key of its regular part.
    pub base: Option<String>,
    /// A regular part: the name of its fleet.
    pub part_of: Option<String>,
    /// Being deleted until then (state `Deleting`).
    pub deleting_until_ms: Option<i64>,
    /// `req`'s sizes and tags as every read of the fleet hands them out (kept with `req`).
    pub shared: SharedRecord,
    rng: StdRng,
}

/// The parts of a fleet's record that each read shares instead of copying: the control loop reads
/// every live fleet every round (its own, and the reconciliation's listing of all of them).
#[derive(Debug, Clone)]
pub(crate) struct SharedRecord {
    pub sizes: Arc<[String]>,
    pub tags: Arc<BTreeMap<String, String>>,
}

impl SharedRecord {
    fn of(req: &FleetRequest) -> Self {
        SharedRecord { sizes: req.sizes.as_slice().into(), tags: Arc::new(req.tags.clone()) }
    }
}

/// The key of a mixed fleet's regular part in [`World::fleets`] (`/` never appears in a fleet name).
pub(crate) fn regular_part_key(fleet: &str) -> String {
    format!("{fleet}/regular")
}

/// An outage scope: a region, optionally narrowed to one size and/or one priority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outage {
    pub region: String,
    pub size: Option<String>,
    pub priority: Option<Priority>,
}

impl Outage {
    fn covers(&self, key: &OfferKey) -> bool {
        self.region == key.0
            && self.size.as_deref().is_none_or(|s| s.eq_ignore_ascii_case(&key.1))
            && self.priority.is_none_or(|p| p == key.2)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum EventKind {
    Complete,
    Reclaim,
    Refill,
    Evict,
    Deleted,
}

pub(crate) struct World {
    pub cfg: SimCloudConfig,
    pub catalog: Catalog,
    pub now_ms: i64,
    pub fleets: BTreeMap<String, SimFleet>,
    pub ops: BTreeMap<String, OpRecord>,
    next_generation: u64,
    capacity_total: BTreeMap<OfferKey, u32>,
    /// Capacity of evicted VMs held back by the cloud until the given time.
    reclaimed: Vec<(OfferKey, i64)>,
    outages: Vec<Outage>,
    eviction_rates: BTreeMap<OfferKey, f64>,
    quota_limits: BTreeMap<(String, String), u64>,
    pub counters: SimCounters,
    /// The quota pools each region reports: fixed by the catalog and the configuration, and read
    /// every round, so worked out once.
    pools_by_region: BTreeMap<String, Vec<QuotaPool>>,
    /// Every (region, size) sold, catalog-spelled, with its price row, in region then catalog
    /// order: fixed by the catalog and the configuration, and listed every round.
    offered: Vec<(String, String, scheduler::PriceRow)>,
    /// Each catalog size's quota family, normalised (`QuotaPool::key` form), by size name.
    family_keys: BTreeMap<String, String>,
    /// No event is due before this time (a lower bound: lowered wherever an event time is set,
    /// raised when `advance` has looked at every fleet). Every call into the cloud advances the
    /// world first, and most find nothing due: they skip the walk over every fleet.
    quiet_until_ms: i64,
}

/// Azure's naming rule for fleets: 1–80 of letters, digits, `-`, `.`, `_`; starts with a letter or
/// digit; does not end with `-` or `.`.
pub(crate) fn check_fleet_name(name: &str) -> Result<(), CloudError> {
    let ok = !name.is_empty()
        && name.len() <= 80
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && !name.ends_with(['-', '.']);
    if ok {
        Ok(())
    } else {
        Err(CloudError::Permanent {
            code: "InvalidResourceName".into(),
            message: format!(
                "The resource name '{name}' is invalid: use 1 to 80 letters, digits, '-', '.' or '_', starting \
                 with a letter or digit and not ending with '-' or '.'."
            ),
        })
    }
}

fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn pool_key(pool: &QuotaPool) -> String {
    pool.key()
}

impl World {
    pub fn new(cfg: SimCloudConfig, catalog: Catalog, now_ms: i64) -> World {
        let mut w = World {
            cfg,
            catalog,
            now_ms,
            fleets: BTreeMap::new(),
            ops: BTreeMap::new(),
            next_generation: 1,
            capacity_total: BTreeMap::new(),
            reclaimed: Vec::new(),
            outages: Vec::new(),
            eviction_rates: BTreeMap::new(),
            quota_limits: BTreeMap::new(),
            counters: SimCounters::default(),
            pools_by_region: BTreeMap::new(),
            offered: Vec::new(),
            family_keys: BTreeMap::new(),
            quiet_until_ms: i64::MIN,
        };
        w.family_keys =
            w.catalog.sizes().iter().map(|s| (s.name.clone(), scheduler::model::normalize_family(&s.family))).collect();
        w.pools_by_region = w.cfg.regions.iter().map(|r| (r.clone(), w.find_quota_pools(r))).collect();
        for region in &w.cfg.regions {
            for size in w.catalog.sizes() {
                let Some(name) = w.offered_size(region, &size.name) else { continue };
                let Some(row) = w.catalog.price(&name, region) else { continue };
                w.offered.push((region.clone(), name, row.clone()));
            }
        }
        w
    }

    /// Every (region, size) sold, with its price row (see the field).
    pub fn offered(&self) -> &[(String, String, scheduler::PriceRow)] {
        &self.offered
    }

    /// Changes the price of a sold offer that has one; false when it has none (a price never
    /// creates an offer).
    pub fn set_price(&mut self, region: &str, size: &str, priority: Priority, usd_per_hour: f64) -> bool {
        let Some((_, _, row)) = self.offered.iter_mut().find(|(r, s, _)| r == region && s == size) else {
            return false;
        };
        let slot = match priority {
            Priority::Regular => &mut row.regular,
            Priority::Spot => &mut row.spot,
        };
        if slot.is_none() {
            return false;
        }
        *slot = Some(usd_per_hour);
        let mut changed = row.clone();
        changed.regular = (priority == Priority::Regular).then_some(usd_per_hour);
        changed.spot = (priority == Priority::Spot).then_some(usd_per_hour);
        self.catalog.extend(Vec::new(), vec![changed]);
        if priority == Priority::Spot {
            // Azure evicts spot VMs whose max price the spot price passes.
            let over: Vec<(String, u32)> = self
                .fleets
                .values()
                .filter(|f| {
                    f.req.region == region
                        && f.req.priority == Priority::Spot
                        && f.size.as_deref() == Some(size)
                        && f.running > 0
                        && f.req.max_price_per_vm.is_some_and(|cap| cap >= 0.0 && cap < usd_per_hour)
                })
                .map(|f| (f.req.name.clone(), f.running))
                .collect();
            for (name, running) in over {
                let _ = self.evict(&name, running);
            }
        }
        true
    }

    fn provisioning_ms(&self) -> i64 {
        i64::try_from(self.cfg.provisioning_seconds.saturating_mul(1000)).unwrap_or(i64::MAX)
    }

    fn size(&self, name: &str) -> Option<&VmSize> {
        self.catalog.size(name)
    }

    fn vcpus(&self, size: &str) -> u64 {
        self.size(size).map(|s| u64::from(s.vcpus)).unwrap_or(0)
    }

    /// The catalog's spelling of a size offered in a region, or `None` when it is not sold there.
    pub fn offered_size(&self, region: &str, size: &str) -> Option<String> {
        let s = self.size(size)?;
        (self.cfg.offers_size(&s.name) && self.catalog.price(&s.name, region).is_some()).then(|| s.name.clone())
    }

    fn restricted(&self, region: &str, size: &str, zones: &[String]) -> bool {
        self.cfg.restrictions.iter().any(|r| {
            r.region == region
                && r.size.eq_ignore_ascii_case(size)
                && (r.zones.is_empty() || (!zones.is_empty() && zones.iter().all(|z| r.zones.contains(z))))
        })
    }

    // ---- quota ----

    pub fn quota_limit(&self, region: &str, pool: &QuotaPool) -> u64 {
        self.quota_limits
            .get(&(region.to_string(), pool_key(pool)))
            .copied()
            .unwrap_or_else(|| self.cfg.quota_limit(region, pool))
    }

    pub fn set_quota_limit(&mut self, region: &str, pool: &QuotaPool, limit: u64) {
        self.quota_limits.insert((region.to_string(), pool_key(pool)), limit);
        self.arm_refills_all();
    }

    /// vCPUs a fleet part holds against each pool: running VMs, the whole request while creating,
    /// and the larger of the two while updating.
    fn fleet_holds<'f>(&self, f: &'f SimFleet) -> Option<(&'f str, u64)> {
        if let Some(s) = &f.reserved {
            return Some((s.as_str(), u64::from(f.req.vms) * self.vcpus(s)));
        }
        let vms = if f.state == ProvisioningState::Updating { f.running.max(f.req.vms) } else { f.running };
        f.size.as_ref().map(|s| (s.as_str(), u64::from(vms) * self.vcpus(s)))
    }

    pub fn quota_usage(&self, region: &str, pool: &QuotaPool) -> u64 {
        self.quota_usages(region, std::slice::from_ref(pool))[0]
    }

    /// The usage of each of `pools` in `region`, in one walk over the fleets (a hot path: the
    /// control loop reads every pool of every region each round). What the fleets hold is summed per
    /// tier and family first, then matched against the pools: a region's many fleets share a few
    /// families, and matching each fleet against each pool normalised a family name per pair.
    pub fn quota_usages(&self, region: &str, pools: &[QuotaPool]) -> Vec<u64> {
        let mut held: BTreeMap<(Priority, std::borrow::Cow<'_, str>), u64> = BTreeMap::new();
        for f in self.fleets.values().filter(|f| f.req.region == region) {
            let Some((size, vcpus)) = self.fleet_holds(f) else { continue };
            let family: std::borrow::Cow<'_, str> = match f.req.priority {
                Priority::Regular => match self.family_keys.get(size) {
                    Some(k) => k.as_str().into(),
                    None => self
                        .size(size)
                        .map(|s| scheduler::model::normalize_family(&s.family).into())
                        .unwrap_or_default(),
                },
                Priority::Spot => "".into(),
            };
            *held.entry((f.req.priority, family)).or_default() += vcpus;
        }
        let mut totals = vec![0; pools.len()];
        for ((priority, family), vcpus) in &held {
            for (pool, total) in pools.iter().zip(totals.iter_mut()) {
                if pool.is_drawn_by(*priority, family) {
                    *total += vcpus;
                }
            }
        }
        totals
    }

    /// The pools a VM of `size` at `priority` draws from, family first (Azure checks it first).
    fn pools(&self, size: &str, priority: Priority) -> Vec<QuotaPool> {
        QuotaPool::drawn_by(priority, self.size(size).map_or("", |s| s.family.as_str()))
    }

    /// How many VMs of `size` the quota still allows.
    fn quota_fit(&self, region: &str, size: &str, priority: Priority) -> u64 {
        let vcpus = self.vcpus(size).max(1);
        self.pools(size, priority)
            .iter()
            .map(|p| self.quota_limit(region, p).saturating_sub(self.quota_usage(region, p)) / vcpus)
            .min()
            .unwrap_or(0)
    }

    /// The quota error for `vms` VMs of `size`: the first pool that cannot hold them.
    fn quota_error(&self, region: &str, size: &str, priority: Priority, vms: u32) -> CloudError {
        let required = u64::from(vms) * self.vcpus(size);
        let pools = self.pools(size, priority);
        let pool = pools
            .iter()
            .find(|p| self.quota_usage(region, p) + required > self.quota_limit(region, p))
            .unwrap_or(&pools[0])
            .clone();
        CloudError::Quota {
            region: region.to_string(),
            limit: Some(self.quota_limit(region, &pool)),
            usage: Some(self.quota_usage(region, &pool)),
            required: Some(required),
            pool,
        }
    }

    /// Every pool of a region: `cores`, `lowPriorityCores`, then each family of the offered sizes.
    pub fn quota_pools(&self, region: &str) -> Vec<QuotaPool> {
        match self.pools_by_region.get(region) {
            Some(pools) => pools.clone(),
            None => self.find_quota_pools(region),
        }
    }

    fn find_quota_pools(&self, region: &str) -> Vec<QuotaPool> {
        let mut pools = vec![QuotaPool::Cores, QuotaPool::LowPriorityCores];
        let mut seen = std::collections::BTreeSet::new();
        for s in self.catalog.sizes() {
            if self.offered_size(region, &s.name).is_some()
                && seen.insert(scheduler::model::normalize_family(&s.family))
            {
                pools.push(QuotaPool::Family(s.family.clone()));
            }
        }
        pools
    }

    // ---- capacity ----

    pub fn capacity_total(&self, key: &OfferKey) -> u32 {
        self.capacity_total.get(key).copied().unwrap_or_else(|| self.cfg.capacity_vms(&key.0, &key.1, key.2))
    }

    fn capacity_used(&self, key: &OfferKey) -> u32 {
        self.fleets
            .values()
            .filter(|f| f.req.region == key.0 && f.req.priority == key.2 && f.size.as_deref() == Some(key.1.as_str()))
            .map(|f| f.running)
            .sum()
    }

    fn in_outage(&self, key: &OfferKey) -> bool {
        self.outages.iter().any(|o| o.covers(key))
    }

    /// VMs the offer can supply right now.
    pub fn capacity_free(&self, key: &OfferKey) -> u32 {
        self.capacity_free_given(key, self.capacity_used(key))
    }

    /// VMs running per offer (region, size, priority), in one walk over the fleets: listing every
    /// offer's free capacity with `capacity_free` would walk them once per offer.
    pub fn capacity_used_by_offer(&self) -> BTreeMap<(&str, &str, Priority), u32> {
        // Few keys (the offers in use), looked up once per offer: ordered beats hashed here.
        let mut used = BTreeMap::new();
        for f in self.fleets.values() {
            if let Some(size) = &f.size {
                *used.entry((f.req.region.as_str(), size.as_str(), f.req.priority)).or_default() += f.running;
            }
        }
        used
    }

    /// [`World::capacity_free`] with the offer's running VMs already counted.
    pub fn capacity_free_given(&self, key: &OfferKey, used: u32) -> u32 {
        if self.in_outage(key) {
            return 0;
        }
        let held = self.reclaimed.iter().filter(|(k, until)| k == key && *until > self.now_ms).count();
        let held = u32::try_from(held).unwrap_or(u32::MAX);
        self.capacity_total(key).saturating_sub(used).saturating_sub(held)
    }

    /// The eviction-rate band Azure would publish for a spot offer: the band its current rate falls in.
    pub fn eviction_band(&self, key: &OfferKey) -> EvictionBand {
        EvictionBand::of_rate(self.eviction_rate(key))
    }

    /// The spot placement score Azure would publish for `desired` VMs of an offer with `free` VMs
    /// free: `High` when the free VMs, times a noise factor, cover four times the request, `Medium`
    /// when they cover it, `Low` otherwise. The factor (0.5 to 1.5) is drawn per offer and hour
    /// from the seed, so a score is sometimes wrong both ways, as a published estimate is, and
    /// reproducible.
    pub fn placement_score(&self, key: &OfferKey, free: u32, desired: u32) -> PlacementScore {
        let hour = self.now_ms.div_euclid(3_600_000) as u64;
        let h = self.cfg.seed
            ^ fnv1a(&key.0).rotate_left(7)
            ^ fnv1a(&key.1).rotate_left(19)
            ^ hour.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let h = fnv1a(&h.to_string());
        let factor = 0.5 + (h % 1001) as f64 / 1000.0;
        let seen = f64::from(free) * factor;
        let desired = f64::from(desired.max(1));
        if seen >= 4.0 * desired {
            PlacementScore::High
        } else if seen >= desired {
            PlacementScore::Medium
        } else {
            PlacementScore::Low
        }
    }

    pub fn eviction_rate(&self, key: &OfferKey) -> f64 {
        self.eviction_rates.get(key).copied().unwrap_or_else(|| self.cfg.eviction_rate(&key.0, &key.1, key.2))
    }

    pub fn set_eviction_rate(&mut self, key: OfferKey, rate: f64) {
        self.eviction_rates.insert(key.clone(), rate.max(0.0));
        let names: Vec<String> = self
            .fleets
            .values()
            .filter(|f| f.req.region == key.0 && f.req.priority == key.2 && f.size.as_deref() == Some(key.1.as_str()))
            .map(|f| f.req.name.clone())
            .collect();
        for n in names {
            self.draw_eviction(&n);
        }
    }

    /// Sets an offer's total capacity. Spot VMs above the new total are taken back at once
    /// (fleets in reverse name order); regular VMs are never taken back.
    pub fn set_capacity(&mut self, key: OfferKey, vms: u32) {
        self.capacity_total.insert(key.clone(), vms);
        if key.2 == Priority::Spot {
            let mut excess = self.capacity_used(&key).saturating_sub(vms);
            let names: Vec<String> = self
                .fleets
                .values()
                .rev()
                .filter(|f| {
                    f.req.region == key.0 && f.req.priority == key.2 && f.size.as_deref() == Some(key.1.as_str())
                })
                .map(|f| f.req.name.clone())
                .collect();
            for n in names {
                if excess == 0 {
                    break;
                }
                let f = self.fleets.get_mut(&n).expect("listed above");
                let k = excess.min(f.running);
                f.running -= k;
                f.evictions += k;
                self.counters.evictions += u64::from(k);
                excess -= k;
                self.draw_eviction(&n);
            }
        }
        self.arm_refills_all();
    }

    /// Starts or ends an outage. Starting one loses every VM in scope at once.
    pub fn set_outage(&mut self, outage: Outage, on: bool) {
        if on {
            if !self.outages.contains(&outage) {
                self.outages.push(outage.clone());
            }
            let names: Vec<String> = self.fleets.keys().cloned().collect();
            for n in names {
                let f = &self.fleets[&n];
                let Some(size) = f.size.clone() else { continue };
                if f.running == 0 || !outage.covers(&(f.req.region.clone(), size, f.req.priority)) {
                    continue;
                }
                let f = self.fleets.get_mut(&n).expect("listed above");
                self.counters.vms_lost_to_outages += u64::from(f.running);
                f.running = 0;
                f.next_eviction_ms = None;
            }
        } else {
            self.outages.retain(|o| o != &outage);
        }
        self.arm_refills_all();
    }

    /// Evicts up to `n` VMs of a fleet now (a mixed fleet's spot part first); their capacity is
    /// held back like a spot eviction's.
    pub fn evict(&mut self, name: &str, n: u32) -> Result<u32, CloudError> {
        let taken = self.evict_part(name, n)?;
        match self.fleets.get(name).and_then(|f| f.base.clone()) {
            Some(base) if taken < n => Ok(taken + self.evict_part(&base, n - taken)?),
            _ => Ok(taken),
        }
    }

    fn evict_part(&mut self, name: &str, n: u32) -> Result<u32, CloudError> {
        let now = self.now_ms;
        let reclaim = self.reclaim_until(now);
        let f = self.fleets.get_mut(name).ok_or_else(|| CloudError::NotFound { what: format!("fleet {name}") })?;
        let Some(size) = f.size.clone() else { return Ok(0) };
        let k = n.min(f.running);
        f.running -= k;
        f.evictions += k;
        let key = (f.req.region.clone(), size, f.req.priority);
        self.reclaimed.extend(std::iter::repeat_n((key, reclaim), k as usize));
        self.expect_event_at(reclaim);
        self.counters.evictions += u64::from(k);
        self.draw_eviction(name);
        self.arm_refill(name);
        Ok(k)
    }

    fn reclaim_until(&self, now: i64) -> i64 {
        now.saturating_add(i64::try_from(self.cfg.eviction_reclaim_seconds.saturating_mul(1000)).unwrap_or(i64::MAX))
    }

    // ---- fleets ----

    /// The request as stored: sizes in the catalog's spelling (what a repeat is compared with).
    fn canonical(&self, req: &FleetRequest) -> FleetRequest {
        let mut c = req.clone();
        c.sizes = req.sizes.iter().map(|s| self.size(s).map(|x| x.name.clone()).unwrap_or(s.clone())).collect();
        c
    }

    /// A mixed request's regular part as a request of its own.
    fn regular_part_request(req: &FleetRequest) -> Option<FleetRequest> {
        req.regular.map(|r| FleetRequest {
            name: regular_part_key(&req.name),
            priority: Priority::Regular,
            vms: r.vms,
            min_vms: r.min_vms,
            max_price_per_vm: None,
            regular: None,
            ..req.clone()
        })
    }

    /// Validates and accepts a create request; quota is checked and held at once. The same request
    /// again is a repeat (its operation is returned, nothing changes); a different one for an
    /// existing fleet is an update ([`World::begin_update`]). Returns the operation id and whether a
    /// new fleet was made.
    pub fn begin_create(
        &mut self,
        req: &FleetRequest,
        maintain: bool,
        fail_with: Option<CloudError>,
    ) -> Result<(String, bool), CloudError> {
        self.counters.creates_attempted += 1;
        if let Some(f) = self.fleets.get(&req.name) {
            if f.deleting_until_ms.is_some() {
                return Err(CloudError::Permanent {
                    code: "Conflict".into(),
                    message: format!("The fleet '{}' is being deleted; create it again once it is gone.", req.name),
                });
            }
            if f.req == self.canonical(req) && f.maintain == maintain {
                self.counters.creates_repeated += 1;
                return Ok((f.op_id.clone(), false));
            }
            return self.begin_update(req, maintain).map(|op| (op, false));
        }
        match self.accept(req, maintain, fail_with) {
            Ok(op) => Ok((op, true)),
            Err(e) => {
                self.counters.creates_refused += 1;
                *self.counters.failures_by_class.entry(e.class()).or_default() += 1;
                Err(e)
            }
        }
    }

    /// Changes the capacity of a fleet that exists, keeping its `maintain` (a PUT of the new
    /// capacity on the same name, as [`World::begin_update`] checks it); `NotFound` when the fleet
    /// does not exist or is being deleted: a resize never creates a fleet.
    pub fn begin_resize(&mut self, req: &FleetRequest) -> Result<String, CloudError> {
        let maintain = match self.fleets.get(&req.name) {
            Some(f) if f.part_of.is_none() && f.deleting_until_ms.is_none() => f.maintain,
            _ => return Err(CloudError::NotFound { what: format!("fleet {}", req.name) }),
        };
        self.counters.creates_attempted += 1;
        let canonical = self.canonical(req);
        if self.fleets[&req.name].req == canonical {
            self.counters.creates_repeated += 1;
            return Ok(self.fleets[&req.name].op_id.clone());
        }
        self.begin_update(req, maintain).inspect_err(|e| {
            self.counters.creates_refused += 1;
            *self.counters.failures_by_class.entry(e.class()).or_default() += 1;
        })
    }

    /// Checks one part's request against the region, its sizes and the quota; returns the usable
    /// sizes and the one whose quota would be held.
    fn admit(&self, req: &FleetRequest) -> Result<(Vec<String>, String), CloudError> {
        let bad = |message: String| CloudError::Permanent { code: "InvalidParameter".into(), message };
        if req.sizes.is_empty() {
            return Err(bad("vmSizesProfile must name at least one VM size.".into()));
        }
        if req.min_vms > req.vms {
            return Err(bad(format!("minCapacity ({}) cannot be greater than capacity ({}).", req.min_vms, req.vms)));
        }
        let mut usable: Vec<String> = Vec::new();
        for s in &req.sizes {
            if let Some(name) = self.offered_size(&req.region, s)
                && !self.restricted(&req.region, &name, &req.zones)
                && !usable.contains(&name)
            {
                usable.push(name);
            }
        }
        if usable.is_empty() {
            let first = self.size(&req.sizes[0]).map(|s| s.name.clone()).unwrap_or_else(|| req.sizes[0].clone());
            return Err(CloudError::SizeUnavailable { region: req.region.clone(), size: first, priority: None });
        }
        let vms = u64::from(req.vms);
        let reserved = usable
            .iter()
            .find(|s| self.quota_fit(&req.region, s, req.priority) >= vms)
            .cloned()
            .ok_or_else(|| self.quota_error(&req.region, &usable[0], req.priority, req.vms))?;
        Ok((usable, reserved))
    }

    fn accept(
        &mut self,
        req: &FleetRequest,
        maintain: bool,
        fail_with: Option<CloudError>,
    ) -> Result<String, CloudError> {
        check_fleet_name(&req.name)?;
        if !self.cfg.regions.iter().any(|r| r == &req.region) {
            return Err(CloudError::Permanent {
                code: "LocationNotAvailableForResourceType".into(),
                message: format!(
                    "The provided location '{}' is not available for resource type 'Microsoft.AzureFleet/fleets'. \
                     List of available regions for the resource type is '{}'.",
                    req.region,
                    self.cfg.regions.join(",")
                ),
            });
        }
        let part_req = Self::regular_part_request(req);
        if part_req.is_some() && req.priority != Priority::Spot {
            return Err(CloudError::Permanent {
                code: "InvalidParameter".into(),
                message: "A mixed fleet has a spot part and a regular part.".into(),
            });
        }
        // Every part is admitted before any is held: a refused part refuses the whole fleet.
        let (usable, reserved) = self.admit(req)?;
        let part = match &part_req {
            Some(p) => Some((p, self.admit(p)?)),
            None => None,
        };

        let generation = self.next_generation;
        self.next_generation += 1;
        let op_id = format!("op-{generation:08}");
        let now = self.now_ms;
        let ready = now.saturating_add(self.provisioning_ms());
        self.expect_event_at(ready);
        let base = part.as_ref().map(|(p, _)| p.name.clone());
        self.insert_part(self.canonical(req), usable, reserved, maintain, generation, &op_id, fail_with, base, None);
        if let Some((p, (usable, reserved))) = part {
            let p = self.canonical(p);
            self.insert_part(p, usable, reserved, maintain, generation, &op_id, None, None, Some(req.name.clone()));
        }
        self.ops.insert(
            op_id.clone(),
            OpRecord {
                fleet: req.name.clone(),
                region: req.region.clone(),
                started_ms: now,
                ends_ms: ready,
                outcome: None,
            },
        );
        Ok(op_id)
    }

    #[allow(clippy::too_many_arguments)]
    fn insert_part(
        &mut self,
        req: FleetRequest,
        usable: Vec<String>,
        reserved: String,
        maintain: bool,
        generation: u64,
        op_id: &str,
        fail_with: Option<CloudError>,
        base: Option<String>,
        part_of: Option<String>,
    ) {
        let now = self.now_ms;
        let seed = self.cfg.seed ^ fnv1a(&req.name) ^ generation.rotate_left(32);
        let shared = SharedRecord::of(&req);
        self.fleets.insert(
            req.name.clone(),
            SimFleet {
                req,
                usable,
                maintain,
                op_id: op_id.to_string(),
                state: ProvisioningState::Creating,
                created_ms: now,
                ready_ms: now.saturating_add(self.provisioning_ms()),
                reserved: Some(reserved),
                size: None,
                running: 0,
                tried: Vec::new(),
                error: None,
                fail_with,
                next_eviction_ms: None,
                refill_at_ms: None,
                evictions: 0,
                base,
                part_of,
                deleting_until_ms: None,
                shared,
                rng: StdRng::seed_from_u64(seed),
            },
        );
    }

    /// Starts changing a fleet that exists: its capacities (both parts), spot max price,
    /// `maintain` and tags change; its region, zones, sizes, minimums and shape (one priority or
    /// mixed) cannot (`PropertyChangeNotAllowed`, naming each). Growth is quota-checked and held at
    /// once, like a creation; after `provisioning_seconds` a shrunk part gives VMs back and a grown
    /// one gets what capacity allows (a `maintain` fleet keeps trying for the rest).
    pub fn begin_update(&mut self, req: &FleetRequest, maintain: bool) -> Result<String, CloudError> {
        let req = self.canonical(req);
        let f =
            self.fleets.get(&req.name).ok_or_else(|| CloudError::NotFound { what: format!("fleet {}", req.name) })?;
        if f.state != ProvisioningState::Succeeded || f.deleting_until_ms.is_some() {
            return Err(CloudError::Permanent {
                code: "AnotherOperationInProgress".into(),
                message: format!(
                    "The fleet '{}' is {}: it can be changed once its current operation ends.",
                    req.name, f.state
                ),
            });
        }
        if f.req.region != req.region {
            return Err(CloudError::Permanent {
                code: "InvalidResourceLocation".into(),
                message: format!(
                    "The resource '{}' already exists in location '{}'. A resource with the same name cannot be \
                     created in location '{}'. Please select a new resource name.",
                    req.name, f.req.region, req.region
                ),
            });
        }
        let old = &f.req;
        let mut changed: Vec<&str> = Vec::new();
        if old.zones != req.zones {
            changed.push("zones");
        }
        if old.sizes != req.sizes {
            changed.push("properties.vmSizesProfile");
        }
        if old.priority != req.priority || old.regular.is_some() != req.regular.is_some() {
            changed.push(match req.priority {
                Priority::Spot if req.regular.is_some() || old.regular.is_some() => "properties.regularPriorityProfile",
                Priority::Spot => "properties.spotPriorityProfile",
                Priority::Regular => "properties.regularPriorityProfile",
            });
        } else {
            if old.min_vms != req.min_vms {
                changed.push(match req.priority {
                    Priority::Spot => "properties.spotPriorityProfile.minCapacity",
                    Priority::Regular => "properties.regularPriorityProfile.minCapacity",
                });
            }
            if let (Some(o), Some(n)) = (old.regular, req.regular)
                && o.min_vms != n.min_vms
            {
                changed.push("properties.regularPriorityProfile.minCapacity");
            }
        }
        if !changed.is_empty() {
            let list = changed.iter().map(|c| format!("'{c}'")).collect::<Vec<_>>().join(", ");
            return Err(CloudError::Permanent {
                code: "PropertyChangeNotAllowed".into(),
                message: format!("Changing property {list} is not allowed."),
            });
        }
        let bad = |message: String| CloudError::Permanent { code: "InvalidParameter".into(), message };
        if req.min_vms > req.vms {
            return Err(bad(format!("minCapacity ({}) cannot be greater than capacity ({}).", req.min_vms, req.vms)));
        }
        if let Some(r) = req.regular
            && r.min_vms > r.vms
        {
            return Err(bad(format!("minCapacity ({}) cannot be greater than capacity ({}).", r.min_vms, r.vms)));
        }
        // Growth must fit the quota now, part by part.
        let mut parts = vec![(req.name.clone(), req.clone())];
        if let (Some(key), Some(p)) = (f.base.clone(), Self::regular_part_request(&req)) {
            parts.push((key, p));
        }
        for (key, part_req) in &parts {
            let part = &self.fleets[key];
            let size = part.size.clone().unwrap_or_else(|| part.usable[0].clone());
            let extra = part_req.vms.saturating_sub(part.running);
            if u64::from(extra) > self.quota_fit(&part_req.region, &size, part_req.priority) {
                return Err(self.quota_error(&part_req.region, &size, part_req.priority, extra));
            }
        }
        let generation = self.next_generation;
        self.next_generation += 1;
        let op_id = format!("op-{generation:08}");
        let now = self.now_ms;
        let ready = now.saturating_add(self.provisioning_ms());
        self.expect_event_at(ready);
        for (key, part_req) in parts {
            let part = self.fleets.get_mut(&key).expect("listed above");
            part.shared = SharedRecord::of(&part_req);
            part.req = part_req;
            part.maintain = maintain;
            part.op_id = op_id.clone();
            part.state = ProvisioningState::Updating;
            part.ready_ms = ready;
            part.refill_at_ms = None;
        }
        self.ops.insert(
            op_id.clone(),
            OpRecord {
                fleet: req.name.clone(),
                region: req.region.clone(),
                started_ms: now,
                ends_ms: ready,
                outcome: None,
            },
        );
        Ok(op_id)
    }

    /// Makes a creation in flight end with `error` instead of allocating.
    pub fn inject_failure(&mut self, name: &str, error: CloudError) -> bool {
        match self.fleets.get_mut(name) {
            Some(f) if f.state == ProvisioningState::Creating && f.part_of.is_none() => {
                f.fail_with = Some(error);
                true
            }
            _ => false,
        }
    }

    /// Deletes a fleet (both parts of a mixed one) at once, releasing its VMs and quota. False when
    /// it did not exist.
    pub fn delete(&mut self, name: &str) -> bool {
        let Some(f) = self.fleets.get(name).filter(|f| f.part_of.is_none()) else { return false };
        if let Some(base) = f.base.clone() {
            self.fleets.remove(&base);
        }
        self.fleets.remove(name);
        self.counters.deletes += 1;
        self.arm_refills_all();
        true
    }

    /// Starts deleting a fleet that takes `after_ms` to go: it shows `Deleting` (VMs and quota held,
    /// no more evictions or refills, an operation in flight cancelled) and is gone at the end.
    /// `after_ms <= 0` deletes at once. False when it did not exist.
    pub fn begin_delete(&mut self, name: &str, after_ms: i64) -> bool {
        if after_ms <= 0 {
            return self.delete(name);
        }
        let Some(f) = self.fleets.get(name).filter(|f| f.part_of.is_none()) else { return false };
        if f.deleting_until_ms.is_some() {
            return true;
        }
        let until = self.now_ms.saturating_add(after_ms);
        let keys: Vec<String> = std::iter::once(name.to_string()).chain(f.base.clone()).collect();
        for key in keys {
            let f = self.fleets.get_mut(&key).expect("listed above");
            f.state = ProvisioningState::Deleting;
            f.deleting_until_ms = Some(until);
            f.next_eviction_ms = None;
            f.refill_at_ms = None;
        }
        self.expect_event_at(until);
        true
    }

    pub fn operation(&self, op_id: &str) -> Option<OperationView> {
        let op = self.ops.get(op_id)?;
        let state = match &op.outcome {
            Some(done) => done.clone(),
            None => match self.fleets.get(&op.fleet) {
                Some(f) if f.op_id == op_id && f.deleting_until_ms.is_none() => OperationState::InProgress,
                _ => OperationState::Canceled,
            },
        };
        Some(OperationView {
            id: op_id.to_string(),
            fleet: op.fleet.clone(),
            region: op.region.clone(),
            state,
            started_ms: op.started_ms,
            ends_ms: op.ends_ms,
        })
    }

    /// The fleet as one thing (a mixed fleet's regular part folded in).
    pub fn snapshot(&self, f: &SimFleet) -> FleetSnapshot {
        let regular = f.base.as_ref().and_then(|k| self.fleets.get(k)).map(|p| FleetPartSnapshot {
            size: p.size.clone(),
            capacity_vms: p.req.vms,
            min_capacity_vms: p.req.min_vms,
            running_vms: p.running,
            evictions: p.evictions,
            error: p.error.clone(),
        });
        FleetSnapshot {
            name: f.req.name.clone(),
            region: f.req.region.clone(),
            priority: f.req.priority,
            sizes: f.req.sizes.clone(),
            size: f.size.clone(),
            capacity_vms: f.req.vms,
            min_capacity_vms: f.req.min_vms,
            running_vms: f.running,
            state: f.state.clone(),
            error: f.error.clone().or_else(|| regular.as_ref().and_then(|r| r.error.clone())),
            created_ms: f.created_ms,
            ready_ms: f.ready_ms,
            evictions: f.evictions,
            maintain: f.maintain,
            tags: f.req.tags.clone(),
            next_eviction_ms: f.next_eviction_ms,
            regular,
            deleting_until_ms: f.deleting_until_ms,
        }
    }

    /// The fleets as clients see them: a mixed fleet's regular part is not one of them.
    pub fn visible_fleets(&self) -> impl Iterator<Item = &SimFleet> + '_ {
        self.fleets.values().filter(|f| f.part_of.is_none())
    }

    // ---- time ----

    /// Keeps `quiet_until_ms` a lower bound of every event time: called wherever one is set.
    fn expect_event_at(&mut self, t: i64) {
        self.quiet_until_ms = self.quiet_until_ms.min(t);
    }

    /// Every pending event: creations resolving, refills, evictions, and the next capacity return
    /// (only returns after the last processed time are events; older ones were already counted as
    /// free by `capacity_free`). `next_event` and `earliest_event` both read this one list, so a new
    /// kind of event cannot be processed without also waking the world for it.
    fn pending_events(&self) -> impl Iterator<Item = (i64, EventKind, &str)> + '_ {
        let of_fleets = self.fleets.values().flat_map(|f| {
            let name = f.req.name.as_str();
            let resolving = matches!(f.state, ProvisioningState::Creating | ProvisioningState::Updating);
            let complete = resolving.then_some((f.ready_ms, EventKind::Complete, name));
            let refill = f.refill_at_ms.map(|t| (t, EventKind::Refill, name));
            let evict = f.next_eviction_ms.map(|t| (t, EventKind::Evict, name));
            // A regular part goes with its fleet.
            let deleted = f.deleting_until_ms.filter(|_| f.part_of.is_none()).map(|t| (t, EventKind::Deleted, name));
            complete.into_iter().chain(refill).chain(evict).chain(deleted)
        });
        let returns = self.reclaimed.iter().map(|(_, t)| *t).filter(|t| *t > self.now_ms).min();
        of_fleets.chain(returns.map(|t| (t, EventKind::Reclaim, "")))
    }

    /// The earliest time anything is due.
    fn earliest_event(&self) -> i64 {
        self.pending_events().map(|(t, _, _)| t).min().unwrap_or(i64::MAX)
    }

    /// Processes every event due up to `now`, in time order.
    pub fn advance(&mut self, now: i64) {
        if now < self.quiet_until_ms {
            self.now_ms = self.now_ms.max(now);
            return;
        }
        self.process_due(now);
        self.quiet_until_ms = self.earliest_event();
    }

    fn process_due(&mut self, now: i64) {
        while let Some((t, kind, name)) = self.next_event(now) {
            self.now_ms = self.now_ms.max(t);
            match kind {
                EventKind::Complete => self.complete(&name),
                EventKind::Reclaim => {
                    let t = self.now_ms;
                    self.reclaimed.retain(|(_, until)| *until > t);
                    self.arm_refills_all();
                }
                EventKind::Refill => self.refill(&name),
                EventKind::Evict => self.evict_one(&name),
                EventKind::Deleted => {
                    self.delete(&name);
                }
            }
        }
        self.now_ms = self.now_ms.max(now);
    }

    /// The first event due by `now`, in (time, kind, fleet name) order.
    fn next_event(&self, now: i64) -> Option<(i64, EventKind, String)> {
        self.pending_events().filter(|(t, _, _)| *t <= now).min().map(|(t, kind, name)| (t, kind, name.to_string()))
    }

    fn complete(&mut self, name: &str) {
        if self.fleets.get(name).is_some_and(|f| f.state == ProvisioningState::Updating) {
            self.complete_update(name);
            return;
        }
        let Some(f) = self.fleets.get_mut(name) else { return };
        f.reserved = None;
        let injected = f.fail_with.take();
        let (region, priority, vms, min_vms) = (f.req.region.clone(), f.req.priority, f.req.vms, f.req.min_vms);
        let cap = f.req.max_price_per_vm.filter(|p| *p >= 0.0);
        let usable = f.usable.clone();
        let mut tried: Vec<(String, Option<CloudError>)> = Vec::new();
        let mut chosen: Option<(String, u32)> = None;
        if let Some(err) = injected {
            tried.push((usable[0].clone(), Some(err)));
        } else {
            for size in &usable {
                if priority == Priority::Spot
                    && let Some(cap) = cap
                    && let Some(price) = self.catalog.price(size, &region).and_then(|p| p.spot)
                    && price > cap
                {
                    tried.push((
                        size.clone(),
                        Some(CloudError::PriceAboveCap { region: region.clone(), size: Some(size.clone()) }),
                    ));
                    continue;
                }
                let key = (region.clone(), size.clone(), priority);
                let free = self.capacity_free(&key);
                let fit = u32::try_from(self.quota_fit(&region, size, priority)).unwrap_or(u32::MAX);
                let n = vms.min(free).min(fit);
                if n >= min_vms {
                    tried.push((size.clone(), None));
                    chosen = Some((size.clone(), n));
                    break;
                }
                let err = if free < min_vms {
                    let zone =
                        self.fleets[name].req.zones.first().cloned().filter(|_| self.fleets[name].req.zones.len() == 1);
                    CloudError::Capacity {
                        region: region.clone(),
                        size: Some(size.clone()),
                        priority: Some(priority),
                        zone,
                    }
                } else {
                    self.quota_error(&region, size, priority, vms)
                };
                tried.push((size.clone(), Some(err)));
            }
        }
        let f = self.fleets.get_mut(name).expect("present above");
        f.tried = tried;
        let mixed = f.base.is_some() || f.part_of.is_some();
        match chosen {
            Some((size, n)) => {
                f.state = ProvisioningState::Succeeded;
                f.size = Some(size);
                f.running = n;
                if !mixed {
                    self.counters.creates_succeeded += 1;
                    self.resolve_op(name, OperationState::Succeeded);
                }
                self.draw_eviction(name);
                self.arm_refill(name);
            }
            None => {
                let err = f.tried.iter().find_map(|(_, e)| e.clone()).expect("a failed allocation records an error");
                f.state = ProvisioningState::Failed;
                f.error = Some(err.clone());
                if !mixed {
                    *self.counters.failures_by_class.entry(err.class()).or_default() += 1;
                    self.counters.creates_failed += 1;
                    self.resolve_op(name, OperationState::Failed(err));
                }
                // The held quota is released: others may now fit.
                self.arm_refills_all();
            }
        }
        if mixed {
            self.settle_mixed(name);
        }
    }

    /// Records how a fleet's current operation ended.
    fn resolve_op(&mut self, name: &str, outcome: OperationState) {
        if let Some(op_id) = self.fleets.get(name).map(|f| f.op_id.clone())
            && let Some(op) = self.ops.get_mut(&op_id)
        {
            op.outcome = Some(outcome);
        }
    }

    /// Once both parts of a mixed fleet's creation resolved: the fleet succeeded if both did;
    /// otherwise both parts fail (and give back what one of them got), with the first error.
    fn settle_mixed(&mut self, name: &str) {
        let fleet = self.fleets.get(name).map(|f| f.part_of.clone().unwrap_or_else(|| name.to_string()));
        let Some(fleet) = fleet else { return };
        let Some(base) = self.fleets.get(&fleet).and_then(|f| f.base.clone()) else { return };
        let keys = [fleet.clone(), base];
        if keys.iter().any(|k| self.fleets.get(k).is_none_or(|f| f.state == ProvisioningState::Creating)) {
            return;
        }
        let error = keys.iter().find_map(|k| self.fleets[k].error.clone());
        match error {
            None => {
                self.counters.creates_succeeded += 1;
                self.resolve_op(&fleet, OperationState::Succeeded);
            }
            Some(err) => {
                for k in &keys {
                    let f = self.fleets.get_mut(k).expect("checked above");
                    f.state = ProvisioningState::Failed;
                    f.running = 0;
                    f.next_eviction_ms = None;
                    f.refill_at_ms = None;
                    if f.error.is_none() {
                        f.error = Some(err.clone());
                    }
                }
                *self.counters.failures_by_class.entry(err.class()).or_default() += 1;
                self.counters.creates_failed += 1;
                self.resolve_op(&fleet, OperationState::Failed(err));
                self.arm_refills_all();
            }
        }
    }

    /// An update resolves: a shrunk part gives VMs back at once, a grown one gets what capacity
    /// and quota allow now (`maintain` keeps trying for the rest). The update succeeds either way.
    fn complete_update(&mut self, name: &str) {
        let Some(f) = self.fleets.get_mut(name) else { return };
        f.state = ProvisioningState::Succeeded;
        let shrunk = f.running > f.req.vms;
        f.running = f.running.min(f.req.vms);
        let grow = f.req.vms - f.running;
        let key = f.size.clone().map(|s| (f.req.region.clone(), s, f.req.priority));
        let part_of = f.part_of.clone();
        if let Some(key) = key
            && grow > 0
        {
            let fit = u32::try_from(self.quota_fit(&key.0, &key.1, key.2)).unwrap_or(u32::MAX);
            let k = grow.min(self.capacity_free(&key)).min(fit);
            self.fleets.get_mut(name).expect("present above").running += k;
        }
        self.draw_eviction(name);
        self.arm_refill(name);
        if shrunk {
            self.arm_refills_all();
        }
        // The fleet's operation ends with its last part.
        let fleet = part_of.unwrap_or_else(|| name.to_string());
        let parts_done = std::iter::once(fleet.clone())
            .chain(self.fleets.get(&fleet).and_then(|f| f.base.clone()))
            .all(|k| self.fleets.get(&k).is_none_or(|f| f.state != ProvisioningState::Updating));
        if parts_done {
            self.resolve_op(&fleet, OperationState::Succeeded);
        }
    }

    fn evict_one(&mut self, name: &str) {
        let reclaim = self.reclaim_until(self.now_ms);
        let Some(f) = self.fleets.get_mut(name) else { return };
        f.next_eviction_ms = None;
        if f.running > 0
            && let Some(size) = f.size.clone()
        {
            f.running -= 1;
            f.evictions += 1;
            self.counters.evictions += 1;
            self.reclaimed.push(((f.req.region.clone(), size, f.req.priority), reclaim));
            self.expect_event_at(reclaim);
        }
        self.draw_eviction(name);
        self.arm_refill(name);
    }

    /// Draws the fleet's next spot eviction: exponential with rate running × rate per VM-hour,
    /// from the fleet's own seeded generator (so other fleets do not change its draws).
    fn draw_eviction(&mut self, name: &str) {
        let now = self.now_ms;
        let Some(f) = self.fleets.get(name) else { return };
        let rate = match &f.size {
            Some(size) if f.req.priority == Priority::Spot && f.running > 0 && f.deleting_until_ms.is_none() => {
                self.eviction_rate(&(f.req.region.clone(), size.clone(), f.req.priority)) * f64::from(f.running)
            }
            _ => 0.0,
        };
        let f = self.fleets.get_mut(name).expect("present above");
        if rate <= 0.0 || !rate.is_finite() {
            f.next_eviction_ms = None;
            return;
        }
        let u: f64 = 1.0 - f.rng.random::<f64>(); // in (0, 1]
        let wait_ms = (-u.ln() / rate * HOUR_MS).clamp(1.0, 1e15) as i64;
        let at = now.saturating_add(wait_ms);
        f.next_eviction_ms = Some(at);
        self.expect_event_at(at);
    }

    fn short(f: &SimFleet) -> bool {
        f.maintain && f.state == ProvisioningState::Succeeded && f.size.is_some() && f.running < f.req.vms
    }

    fn arm_refill(&mut self, name: &str) {
        let at = self.now_ms.saturating_add(self.provisioning_ms());
        if let Some(f) = self.fleets.get_mut(name)
            && World::short(f)
            && f.refill_at_ms.is_none()
        {
            f.refill_at_ms = Some(at);
            self.expect_event_at(at);
        }
    }

    /// After capacity or quota was freed: every fleet short of VMs tries again one provisioning
    /// delay later.
    fn arm_refills_all(&mut self) {
        let names: Vec<String> = self.fleets.values().filter(|f| World::short(f)).map(|f| f.req.name.clone()).collect();
        for n in names {
            self.arm_refill(&n);
        }
    }

    fn refill(&mut self, name: &str) {
        let Some(f) = self.fleets.get_mut(name) else { return };
        f.refill_at_ms = None;
        if !World::short(f) {
            return;
        }
        let size = f.size.clone().expect("short() checks it");
        let (region, priority, missing) = (f.req.region.clone(), f.req.priority, f.req.vms - f.running);
        let cap = f.req.max_price_per_vm.filter(|p| *p >= 0.0);
        let spot_price = self.catalog.price(&size, &region).and_then(|p| p.spot);
        if priority == Priority::Spot
            && let (Some(cap), Some(price)) = (cap, spot_price)
            && price > cap
        {
            // Above the fleet's max price Azure does not start spot VMs for it.
            return;
        }
        let free = self.capacity_free(&(region.clone(), size.clone(), priority));
        let fit = u32::try_from(self.quota_fit(&region, &size, priority)).unwrap_or(u32::MAX);
        let k = missing.min(free).min(fit);
        if k > 0 {
            let f = self.fleets.get_mut(name).expect("present above");
            f.running += k;
            self.counters.vms_refilled += u64::from(k);
            self.draw_eviction(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fleet_names_follow_azure_rules() {
        assert!(check_fleet_name("spw-job1-a1").is_ok());
        assert!(check_fleet_name("a.b_c-d").is_ok());
        for bad in ["", "_x", "-x", "x-", "x.", "has space", &"x".repeat(81)] {
            assert!(check_fleet_name(bad).is_err(), "{bad:?} should be refused");
        }
    }
}
