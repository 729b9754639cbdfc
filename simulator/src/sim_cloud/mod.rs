//! `SimCloud`: a simulated Azure that implements [`scheduler::cloud::Cloud`].
//!
//! Regions, sizes and prices come from the catalog; quota, capacity, provisioning delay, spot
//! eviction rates and size restrictions from the scenario's `[cloud]` section
//! ([`SimCloudConfig`]). Time comes from an `Arc<dyn Clock>`: a `ManualClock` in the simulator and
//! the tests, a real or scaled clock behind `spillway serve` and the ARM emulator.
//!
//! Behind the `Cloud` trait it shows only what Azure shows (issue #22): prices, quota (usages),
//! size restrictions, and for spot the two capacity signals Azure publishes, the eviction-rate
//! band of the offer's current rate (`0-5` … `20+` % per hour) and a placement score (`High`,
//! `Medium`, `Low`) made from the hidden free capacity with deterministic noise. An offer's free
//! capacity, its exact eviction rate and an outage are never shown: a scheduler finds them from
//! refused creations, failed allocations and lost VMs, as on Azure. The control hooks below and
//! the inspection methods (`free_capacity`, `fleets_snapshot`, `counters`) are the world's side,
//! for the what-if engine, the emulator and tests; no policy is ever given this type.
//!
//! Semantics, chosen to match Azure where Azure is known:
//! - **Create** is validated and quota-checked at once, like Azure's synchronous refusals: regular
//!   VMs draw on their family pool and on `cores`, spot VMs on `lowPriorityCores`; the whole
//!   request (`vms` × vCPUs) is held against the pools while the fleet is created, so two creations
//!   in flight cannot both use the last quota. Requested sizes the region does not sell, or that
//!   are restricted, are skipped; if none is left the request is `SizeUnavailable`. The first size
//!   in rank order whose quota fits is the one held.
//! - The same name twice is one fleet (idempotent PUT): the second call returns the first call's
//!   operation and uses no more quota, whatever it asks for.
//! - After `provisioning_seconds` the creation **resolves**: sizes are tried in rank order; a spot
//!   size whose list price is above `max_price_per_vm` fails with `PriceAboveCap`; otherwise the
//!   fleet gets `min(vms, free capacity, quota)` VMs of that one size if that is at least
//!   `min_vms`, else that size fails with `Capacity` (or `Quota` when capacity was there but quota
//!   was taken meanwhile). All of a fleet's VMs run on one size, so a gang stays on one size. The
//!   operation's error is that of the first size tried; every size tried shows on the scale sets.
//! - **Spot evictions**: each spot fleet loses one VM at a time, at exponential intervals with rate
//!   running VMs × the offer's evictions per VM-hour, drawn from a generator seeded by the scenario
//!   seed and the fleet's name, so one fleet's evictions do not depend on the others'. An evicted
//!   VM's capacity is held back by the cloud for `eviction_reclaim_seconds`.
//! - **maintain** (Azure's default, true for fleets created through the trait): a fleet that lost
//!   VMs tries to replace them on its own size one provisioning delay later, and again after each
//!   later event that frees capacity or quota (a delete, reclaimed capacity returning, an outage
//!   ending, a capacity or quota raise). Its `provisioning_state` stays `Succeeded` throughout;
//!   `running_vms` tells how many VMs it has.
//! - **Outages** (control hooks): while on, the offers in scope have no free capacity, and the VMs
//!   running in scope are lost when it begins.
//! - **Delete** is immediate and idempotent and frees the fleet's capacity and quota; deleting a
//!   fleet still being created cancels its operation.

#[cfg(feature = "bench-oracle")]
mod bench_oracle;
mod config;
pub mod vms;
mod world;

use std::sync::{Arc, Mutex, MutexGuard};

use scheduler::Catalog;
use scheduler::clock::Clock;
use scheduler::cloud::{
    Cloud, CloudError, Fleet, FleetOperation, FleetPartStatus, FleetRequest, OperationStatus, ProvisioningState,
    ScaleSet, SizeRestriction,
};
use scheduler::model::{
    EvictionBand, FieldErrors, Offer, PlacementScore, Priority, Quota, QuotaPool, spot_eviction_prior,
};

pub use config::{ConfigError, OfferCapacity, QuotaLimits, RegionQuota, RestrictionConfig, SimCloudConfig};
pub use world::{FleetPartSnapshot, FleetSnapshot, OperationState, OperationView, SimCounters};

use world::{Outage, World};

/// Prefix of the `status_url` of SimCloud operations (`simcloud:operations/op-00000001`).
pub const OPERATION_URL_PREFIX: &str = "simcloud:operations/";

/// How a fleet is created, beyond the [`FleetRequest`]: what the ARM emulator reads from a PUT
/// body or injects.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateOptions {
    /// Azure's `maintain`: replace lost VMs by itself (Azure's default: true).
    pub maintain: bool,
    /// End the creation with this error instead of allocating (fault injection).
    pub fail_with: Option<CloudError>,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions { maintain: true, fail_with: None }
    }
}

/// A creation the cloud accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct Accepted {
    /// The operation to poll.
    pub operation: FleetOperation,
    /// False when the fleet already existed (an idempotent repeat).
    pub created: bool,
}

/// The simulated cloud. Cheap to share behind an `Arc`; every method takes `&self`.
pub struct SimCloud {
    world: Mutex<World>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for SimCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCloud").field("now_ms", &self.clock.now_ms()).finish_non_exhaustive()
    }
}

impl SimCloud {
    /// A simulated cloud from a validated configuration; every problem names its field.
    pub fn new(config: SimCloudConfig, catalog: Catalog, clock: Arc<dyn Clock>) -> Result<SimCloud, FieldErrors> {
        config.validate(&catalog)?;
        let now = clock.now_ms();
        Ok(SimCloud { world: Mutex::new(World::new(config, catalog, now)), clock })
    }

    /// Locks the state after processing every event due by now.
    fn world(&self) -> MutexGuard<'_, World> {
        let mut w = self.world.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        w.advance(self.clock.now_ms());
        w
    }

    /// The clock's time as this cloud last saw it, in Unix ms.
    pub fn now_ms(&self) -> i64 {
        self.world().now_ms
    }

    /// The configuration it was built from.
    pub fn config(&self) -> SimCloudConfig {
        self.world().cfg.clone()
    }

    /// The catalog it prices from.
    pub fn catalog(&self) -> Catalog {
        self.world().catalog.clone()
    }

    /// Starts creating a fleet with explicit options (the trait's `begin_create_fleet` uses the
    /// defaults); tells whether the fleet is new.
    pub fn begin_create(&self, request: &FleetRequest, options: &CreateOptions) -> Result<Accepted, CloudError> {
        let mut w = self.world();
        let (op_id, created) = w.begin_create(request, options.maintain, options.fail_with.clone())?;
        let retry_after_ms = self.retry_after_ms(&w, &op_id);
        Ok(Accepted {
            operation: FleetOperation {
                fleet_name: request.name.clone(),
                status_url: Some(format!("{OPERATION_URL_PREFIX}{op_id}")),
                retry_after_ms,
            },
            created,
        })
    }

    fn retry_after_ms(&self, w: &World, op_id: &str) -> u64 {
        let cap = w.cfg.poll_after_seconds.saturating_mul(1000);
        match w.operation(op_id) {
            Some(op) if op.state == OperationState::InProgress => {
                u64::try_from(op.ends_ms - w.now_ms).unwrap_or(0).clamp(1, cap.max(1))
            }
            _ => 0,
        }
    }

    /// An operation by id (the part of `status_url` after [`OPERATION_URL_PREFIX`]).
    pub fn operation(&self, op_id: &str) -> Option<OperationView> {
        self.world().operation(op_id)
    }

    /// How long a client should wait before polling an operation again, in ms (0 once final).
    pub fn operation_retry_after_ms(&self, op_id: &str) -> u64 {
        let w = self.world();
        self.retry_after_ms(&w, op_id)
    }

    /// Deletes a fleet at once; true when it existed.
    pub fn delete(&self, name: &str) -> bool {
        self.world().delete(name)
    }

    /// Starts deleting a fleet that is gone `after_ms` later (meanwhile `Deleting`, its VMs and
    /// quota held); `after_ms <= 0` deletes at once. True when it existed.
    pub fn begin_delete(&self, name: &str, after_ms: i64) -> bool {
        self.world().begin_delete(name, after_ms)
    }

    /// One fleet's state, for reports.
    pub fn fleet_snapshot(&self, name: &str) -> Option<FleetSnapshot> {
        let w = self.world();
        w.fleets.get(name).filter(|f| f.part_of.is_none()).map(|f| w.snapshot(f))
    }

    /// Every fleet's state, by name.
    pub fn fleets_snapshot(&self) -> Vec<FleetSnapshot> {
        let w = self.world();
        w.visible_fleets().map(|f| w.snapshot(f)).collect()
    }

    /// What the cloud has answered so far.
    pub fn counters(&self) -> SimCounters {
        self.world().counters.clone()
    }

    // ---- control hooks for the simulator and the tests ----

    /// Sets the VMs an offer holds for this subscription (in use + free). Spot VMs above the new
    /// total are evicted at once; regular VMs never are. Unknown offers are an error.
    pub fn set_capacity(&self, region: &str, size: &str, priority: Priority, vms: u32) -> Result<(), CloudError> {
        let mut w = self.world();
        let key = offer_key(&w, region, size, priority)?;
        w.set_capacity(key, vms);
        Ok(())
    }

    /// Sets an offer's price (USD per VM-hour) from now on: new offers list it, and VMs running on
    /// it are billed at it (the control loop follows the listed price). Only a price the catalog
    /// knows can change: an offer is never created by a price.
    pub fn set_price(&self, region: &str, size: &str, priority: Priority, usd_per_hour: f64) -> Result<(), CloudError> {
        if !usd_per_hour.is_finite() || usd_per_hour < 0.0 {
            return Err(CloudError::Permanent {
                code: "InvalidParameter".into(),
                message: format!("price must be a finite number ≥ 0, not {usd_per_hour}"),
            });
        }
        let mut w = self.world();
        let (region, size, priority) = offer_key(&w, region, size, priority)?;
        if w.set_price(&region, &size, priority, usd_per_hour) {
            Ok(())
        } else {
            Err(CloudError::SizeUnavailable { region, size, priority: Some(priority) })
        }
    }

    /// Free VMs of an offer right now.
    pub fn free_capacity(&self, region: &str, size: &str, priority: Priority) -> Result<u32, CloudError> {
        let w = self.world();
        let key = offer_key(&w, region, size, priority)?;
        Ok(w.capacity_free(&key))
    }

    /// Sets the evictions per VM-hour of a spot offer; running fleets redraw their next eviction.
    pub fn set_eviction_rate(&self, region: &str, size: &str, rate_per_hour: f64) -> Result<(), CloudError> {
        if !rate_per_hour.is_finite() || rate_per_hour < 0.0 {
            return Err(CloudError::Permanent {
                code: "InvalidParameter".into(),
                message: format!("eviction rate must be a finite number ≥ 0, not {rate_per_hour}"),
            });
        }
        let mut w = self.world();
        let key = offer_key(&w, region, size, Priority::Spot)?;
        w.set_eviction_rate(key, rate_per_hour);
        Ok(())
    }

    /// A region's quota pools with their limits and usage: what [`Cloud::quota`] answers, without
    /// an `await` (the ARM emulator decides quota requests while holding its own locks).
    pub fn quota_of(&self, region: &str) -> Result<Vec<Quota>, CloudError> {
        let w = self.world();
        check_region(&w, region)?;
        let pools = w.quota_pools(region);
        let usages = w.quota_usages(region, &pools);
        Ok(pools
            .into_iter()
            .zip(usages)
            .map(|(pool, usage)| Quota { region: region.to_string(), limit: w.quota_limit(region, &pool), usage, pool })
            .collect())
    }

    /// Sets a quota limit (a what-if: "96 more A100 vCPUs in westus3").
    pub fn set_quota_limit(&self, region: &str, pool: &QuotaPool, limit: u64) -> Result<(), CloudError> {
        let mut w = self.world();
        check_region(&w, region)?;
        w.set_quota_limit(region, pool, limit);
        Ok(())
    }

    /// Starts (`on = true`) or ends an outage of a region, or of one size and/or priority in it.
    /// VMs running in scope are lost when it starts; no creation in scope gets capacity while it
    /// lasts; `maintain` fleets refill after it ends.
    pub fn set_outage(
        &self,
        region: &str,
        size: Option<&str>,
        priority: Option<Priority>,
        on: bool,
    ) -> Result<(), CloudError> {
        let mut w = self.world();
        check_region(&w, region)?;
        let size = match size {
            Some(s) => Some(
                w.catalog
                    .size(s)
                    .map(|x| x.name.clone())
                    .ok_or_else(|| CloudError::NotFound { what: format!("size {s}") })?,
            ),
            None => None,
        };
        w.set_outage(Outage { region: region.to_string(), size, priority }, on);
        Ok(())
    }

    /// Evicts up to `n` VMs of a fleet now (any priority: a host failure for regular VMs); returns
    /// how many went. Their capacity is held back like a spot eviction's; a `maintain` fleet tries
    /// to replace them one provisioning delay later.
    pub fn evict(&self, fleet: &str, n: u32) -> Result<u32, CloudError> {
        self.world().evict(fleet, n)
    }

    /// Makes a creation still in flight end with `error` (fault injection); false when the fleet is
    /// not being created.
    pub fn inject_failure(&self, fleet: &str, error: CloudError) -> bool {
        self.world().inject_failure(fleet, error)
    }

    /// The spot signals Azure would publish for an offer: its eviction-rate band and its placement
    /// score for `desired` VMs (what the ARM emulator serves; the trait's offers carry them for one
    /// VM).
    pub fn spot_signals(
        &self,
        region: &str,
        size: &str,
        desired: u32,
    ) -> Result<(EvictionBand, PlacementScore), CloudError> {
        let w = self.world();
        let key = offer_key(&w, region, size, Priority::Spot)?;
        let free = w.capacity_free(&key);
        Ok((w.eviction_band(&key), w.placement_score(&key, free, desired)))
    }

    /// The regions this cloud serves.
    pub fn regions(&self) -> Vec<String> {
        self.world().cfg.regions.clone()
    }

    /// Sizes sold in a region (catalog spelling), in catalog order.
    pub fn sizes_in(&self, region: &str) -> Vec<String> {
        let w = self.world();
        w.catalog.sizes().iter().filter_map(|s| w.offered_size(region, &s.name)).collect()
    }
}

fn check_region(w: &World, region: &str) -> Result<(), CloudError> {
    if w.cfg.regions.iter().any(|r| r == region) {
        Ok(())
    } else {
        Err(CloudError::Permanent {
            code: "LocationNotAvailableForResourceType".into(),
            message: format!(
                "The provided location '{region}' is not available for resource type \
                 'Microsoft.Compute/locations'. List of available regions for the resource type is '{}'.",
                w.cfg.regions.join(",")
            ),
        })
    }
}

fn offer_key(w: &World, region: &str, size: &str, priority: Priority) -> Result<world::OfferKey, CloudError> {
    check_region(w, region)?;
    let name = w.offered_size(region, size).ok_or_else(|| CloudError::SizeUnavailable {
        region: region.into(),
        size: size.into(),
        priority: None,
    })?;
    Ok((region.to_string(), name, priority))
}

fn fleet_of(w: &World, name: &str) -> Result<Fleet, CloudError> {
    let f = w
        .fleets
        .get(name)
        .filter(|f| f.part_of.is_none())
        .ok_or_else(|| CloudError::NotFound { what: format!("fleet {name}") })?;
    Ok(fleet_record(w, f))
}

/// A visible fleet as the cloud reports it (the listing calls this on each fleet it walks, without
/// looking each up again by name).
fn fleet_record(w: &World, f: &world::SimFleet) -> Fleet {
    let regular = f.base.as_ref().and_then(|k| w.fleets.get(k)).map(|p| FleetPartStatus {
        capacity_vms: p.req.vms,
        min_capacity_vms: p.req.min_vms,
        running_vms: Some(p.running),
    });
    Fleet {
        name: f.req.name.clone(),
        region: f.req.region.clone(),
        priority: f.req.priority,
        sizes: f.shared.sizes.clone(),
        capacity_vms: f.req.vms,
        min_capacity_vms: f.req.min_vms,
        provisioning_state: f.state.clone(),
        tags: f.shared.tags.clone(),
        running_vms: Some(f.running),
        regular,
    }
}

/// A scale set's name: one per size a fleet used or tried, as Azure Fleet makes one per size.
pub fn scale_set_name(fleet: &str, size: &str) -> String {
    format!("{fleet}_{}", size.strip_prefix("Standard_").unwrap_or(size))
}

#[async_trait::async_trait]
impl Cloud for SimCloud {
    async fn offers(&self) -> Result<Vec<Offer>, CloudError> {
        // What Azure publishes, no more: prices, and for spot the eviction-rate band and the
        // placement score. Free capacity and the exact rate stay hidden (outages and shortages are
        // found by asking, as on Azure).
        let w = self.world();
        #[cfg(feature = "bench-oracle")]
        return Ok(bench_oracle::offers(&w));
        #[cfg_attr(feature = "bench-oracle", allow(unreachable_code))]
        let used = w.capacity_used_by_offer();
        let mut out = Vec::new();
        for (region, name, row) in w.offered() {
            for priority in [Priority::Regular, Priority::Spot] {
                let (eviction_band, placement_score) = if priority == Priority::Spot {
                    let key = (region.clone(), name.clone(), priority);
                    let running = used.get(&(region.as_str(), name.as_str(), priority)).copied().unwrap_or(0);
                    let free = w.capacity_free_given(&key, running);
                    (Some(w.eviction_band(&key)), Some(w.placement_score(&key, free, 1)))
                } else {
                    (None, None)
                };
                out.push(Offer {
                    region: region.clone(),
                    size: name.clone(),
                    priority,
                    price_per_hour: row.for_priority(priority),
                    capacity_vms: None,
                    eviction_rate_per_hour: if priority == Priority::Spot {
                        spot_eviction_prior(eviction_band, placement_score, 0.0)
                    } else {
                        0.0
                    },
                    eviction_band,
                    placement_score,
                });
            }
        }
        Ok(out)
    }

    async fn quota(&self, region: &str) -> Result<Vec<Quota>, CloudError> {
        self.quota_of(region)
    }

    async fn restrictions(&self, region: &str) -> Result<Vec<SizeRestriction>, CloudError> {
        let w = self.world();
        check_region(&w, region)?;
        Ok(w.cfg
            .restrictions
            .iter()
            .filter(|r| r.region == region)
            .map(|r| SizeRestriction {
                region: r.region.clone(),
                size: w.catalog.size(&r.size).map(|s| s.name.clone()).unwrap_or(r.size.clone()),
                zones: r.zones.clone(),
                reason: r.reason.clone(),
            })
            .collect())
    }

    async fn begin_create_fleet(&self, request: &FleetRequest) -> Result<FleetOperation, CloudError> {
        self.begin_create(request, &CreateOptions::default()).map(|a| a.operation)
    }

    async fn begin_resize_fleet(&self, request: &FleetRequest) -> Result<FleetOperation, CloudError> {
        let mut w = self.world();
        let op_id = w.begin_resize(request)?;
        let retry_after_ms = self.retry_after_ms(&w, &op_id);
        Ok(FleetOperation {
            fleet_name: request.name.clone(),
            status_url: Some(format!("{OPERATION_URL_PREFIX}{op_id}")),
            retry_after_ms,
        })
    }

    async fn poll_operation(&self, operation: &FleetOperation) -> Result<OperationStatus, CloudError> {
        let op_id =
            operation.status_url.as_deref().and_then(|u| u.strip_prefix(OPERATION_URL_PREFIX)).ok_or_else(|| {
                CloudError::Permanent {
                    code: "InvalidOperation".into(),
                    message: format!("{:?} is not a SimCloud operation", operation.status_url),
                }
            })?;
        let w = self.world();
        let op = w.operation(op_id).ok_or_else(|| CloudError::NotFound { what: format!("operation {op_id}") })?;
        Ok(match op.state {
            OperationState::InProgress => {
                OperationStatus::InProgress { retry_after_ms: self.retry_after_ms(&w, op_id) }
            }
            OperationState::Succeeded => OperationStatus::Succeeded,
            OperationState::Failed(e) => OperationStatus::Failed(e),
            OperationState::Canceled => OperationStatus::Failed(CloudError::Permanent {
                code: "Canceled".into(),
                message: format!("fleet {} was deleted before its creation finished", op.fleet),
            }),
        })
    }

    async fn get_fleet(&self, name: &str) -> Result<Fleet, CloudError> {
        fleet_of(&self.world(), name)
    }

    async fn delete_fleet(&self, name: &str) -> Result<(), CloudError> {
        self.world().delete(name);
        Ok(())
    }

    async fn list_fleets(&self) -> Result<Vec<Fleet>, CloudError> {
        let w = self.world();
        Ok(w.visible_fleets().map(|f| fleet_record(&w, f)).collect())
    }

    async fn fleet_scale_sets(&self, name: &str) -> Result<Vec<ScaleSet>, CloudError> {
        let w = self.world();
        let f = w
            .fleets
            .get(name)
            .filter(|f| f.part_of.is_none())
            .ok_or_else(|| CloudError::NotFound { what: format!("fleet {name}") })?;
        // One scale set per size and priority, as Azure Fleet makes them.
        let mut out = Vec::new();
        for part in std::iter::once(f).chain(f.base.as_ref().and_then(|k| w.fleets.get(k))) {
            let suffix = if part.part_of.is_some() { "_regular" } else { "" };
            let make = |size: &str, status: ProvisioningState, error: Option<CloudError>| {
                let ss = format!("{}{suffix}", scale_set_name(name, size));
                ScaleSet {
                    id: format!("fleets/{name}/virtualMachineScaleSets/{ss}"),
                    name: ss,
                    operation_status: status,
                    error,
                }
            };
            match &part.state {
                ProvisioningState::Creating => {
                    out.extend(part.reserved.iter().map(|s| make(s, ProvisioningState::Creating, None)))
                }
                _ => out.extend(part.tried.iter().map(|(s, e)| match e {
                    Some(e) => make(s, ProvisioningState::Failed, Some(e.clone())),
                    None => make(s, part.state.clone(), None),
                })),
            }
        }
        Ok(out)
    }
}
