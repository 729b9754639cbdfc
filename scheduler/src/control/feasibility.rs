//! Offer feasibility as one chain of named filters ([`OfferFilter`], Nomad's feasibility stack):
//! listed → priced → not restricted → not blocked → breaker → quota fits → capacity. The first four
//! steps after `listed` hold for any job and decide what the solver sees ([`Feasibility::solver_offers`]);
//! the last two depend on how many VMs a job needs (the solver enforces them itself as constraints,
//! the deadline policies and the wait reasons ask [`Feasibility::room`]). Every consumer asks the
//! same chain, and every rejection is counted under the filter that made it.
//!
//! A region whose circuit breaker is open is a filter, not a price: its offers are not shown to the
//! solver until the breaker half-opens (then one probe may go), so price caps, budgets and the plan's
//! expected cost always see real prices.

use std::cell::RefCell;
use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;

use super::breaker::RegionBreakers;
use super::world::WorldView;
use crate::catalog::Catalog;
use crate::model::{
    Attempt, AttemptState, BlockedOffer, FailureClass, Job, Offer, OfferFilter, OfferFilterCounts, Priority, QuotaPool,
    VmSize, Workload,
};

/// vCPUs our active attempts hold per (region, pool key): (held, of which still provisioning).
pub(crate) type OurUsage = BTreeMap<(String, String), (u64, u64)>;

/// The chain over one round's view of the world.
pub(crate) struct Feasibility<'a> {
    /// Offers, quota, restrictions and blocks.
    pub world: &'a WorldView,
    /// Region circuit breakers.
    pub breakers: &'a RegionBreakers,
    /// Sizes (GPUs, vCPUs, family).
    pub catalog: &'a Catalog,
    /// When.
    pub now: i64,
}

impl<'a> Feasibility<'a> {
    /// The catalog size of a listed offer, when it is one work may be placed on at all (a known
    /// size with whole GPUs); other listings are not candidates and are not counted.
    pub fn size_of(&self, o: &Offer) -> Option<&VmSize> {
        self.catalog.size(&o.size).filter(|s| s.gpus > 0)
    }

    /// The filters that hold for any job: `Ok(price per VM-hour)` or the first filter failed.
    pub fn offer(&self, o: &Offer, size: &VmSize) -> Result<f64, OfferFilter> {
        let price = o.price_per_hour.ok_or(OfferFilter::Priced)?;
        if self.world.restricted(&o.region, &size.name) {
            return Err(OfferFilter::NotRestricted);
        }
        if self.world.block_for(&o.region, &size.name, &size.family, o.priority, self.now).is_some() {
            return Err(OfferFilter::NotBlocked);
        }
        if self.breakers.shunned(&o.region, self.now) {
            return Err(OfferFilter::Breaker);
        }
        Ok(price)
    }

    /// The filters that depend on the work: room for `vms` VMs of the offer in every quota pool
    /// they draw from (a pool never read is left to the cloud), and in the capacity estimate.
    pub fn room(&self, o: &Offer, size: &VmSize, vms: u32, ours: &OurUsage) -> Result<(), OfferFilter> {
        let vcpus = vms as u64 * size.vcpus as u64;
        let fits = QuotaPool::keys_drawn_by(o.priority, &size.family)
            .iter()
            .all(|k| self.world.free_vcpus(&o.region, k, ours).is_none_or(|f| f >= vcpus));
        if !fits {
            return Err(OfferFilter::QuotaFits);
        }
        if o.capacity_vms.is_some_and(|c| c < vms) {
            return Err(OfferFilter::Capacity);
        }
        Ok(())
    }

    /// The offers the solver may use, in the cloud's order, with their capacity net of the VMs of
    /// fleets still being created (the cloud's estimate does not show those yet); and how many
    /// listings each filter rejected.
    pub fn solver_offers(&self, attempts: &[&Attempt]) -> (Vec<solver::Offer>, OfferFilterCounts) {
        let mut in_flight: BTreeMap<(&str, &str, Priority), u32> = BTreeMap::new();
        for a in attempts.iter().filter(|a| a.state == AttemptState::Provisioning) {
            // A mixed fleet takes each part from its own priority's offer.
            for part in a.parts() {
                *in_flight.entry((a.region.as_str(), a.size.as_str(), part.priority)).or_default() += part.vms;
            }
        }
        let mut counts = OfferFilterCounts::default();
        let mut offers = Vec::new();
        for o in &self.world.offers {
            let Some(size) = self.size_of(o) else { continue };
            let verdict = self.offer(o, size);
            counts.count(verdict.map(|_| ()));
            let Ok(price) = verdict else { continue };
            let held = in_flight.get(&(o.region.as_str(), size.name.as_str(), o.priority)).copied().unwrap_or(0);
            offers.push(solver_offer(o, size, price, o.capacity_vms.map(|c| c.saturating_sub(held))));
        }
        (offers, counts)
    }

    /// The listed offers that only a block learnt from a quota refusal keeps from the solver
    /// (every other filter lets them through), each with the pool the refusal named, as
    /// (region, pool). Such an offer's work is kept out by that pool as much as by a pool read
    /// full: the quota watch counts it ([`super::quota_watch::blocking`]).
    pub fn quota_blocked_offers(&self) -> Vec<(solver::Offer, (String, QuotaPool))> {
        let mut out = Vec::new();
        for o in &self.world.offers {
            let Some(size) = self.size_of(o) else { continue };
            let Some(price) = o.price_per_hour else { continue };
            if self.world.restricted(&o.region, &size.name) || self.breakers.shunned(&o.region, self.now) {
                continue;
            }
            let covering: Vec<&BlockedOffer> = self
                .world
                .blocked
                .iter()
                .filter(|b| b.is_active(self.now) && b.covers(&o.region, &size.name, &size.family, o.priority))
                .collect();
            // Another block (no capacity, a price cap) would keep the offer out even with quota.
            let Some(first) = covering.first() else { continue };
            if covering.iter().any(|b| b.class != FailureClass::Quota) {
                continue;
            }
            let pool = match (&first.family, first.priority) {
                (Some(f), _) => QuotaPool::Family(f.clone()),
                (None, Some(Priority::Spot)) => QuotaPool::LowPriorityCores,
                (None, _) => QuotaPool::Cores,
            };
            out.push((solver_offer(o, size, price, o.capacity_vms), (first.region.clone(), pool)));
        }
        out
    }

    /// Counts candidates per waiting job ([`JobCounter::counts`]) against this chain and `ours`:
    /// built once per round, since every waiting job asks about the same few offers.
    pub fn job_counter(&self, ours: &'a OurUsage) -> JobCounter<'a> {
        let catalog: &'a Catalog = self.catalog;
        let listed = self
            .world
            .offers
            .iter()
            .filter_map(|o| Some(((o.region.as_str(), catalog.size(&o.size)?.name.as_str(), o.priority), o)))
            .collect();
        JobCounter {
            chain: Feasibility { world: self.world, breakers: self.breakers, catalog, now: self.now },
            ours,
            listed,
            verdicts: RefCell::new(HashMap::default()),
            by_shape: RefCell::new(HashMap::default()),
        }
    }
}

/// The solver's view of a listed offer of `size` at `price` per VM-hour.
fn solver_offer(o: &Offer, size: &VmSize, price: f64, capacity_vms: Option<u32>) -> solver::Offer {
    solver::Offer {
        region: o.region.clone(),
        size: size.name.clone(),
        priority: o.priority,
        gpu_model: size.gpu_model.clone(),
        gpus_per_vm: size.gpus,
        vcpus_per_vm: size.vcpus,
        family: size.family.clone(),
        price_per_hour: price,
        capacity_vms,
        eviction_rate_per_hour: o.eviction_rate_per_hour,
    }
}

/// How waiting jobs' candidate offers fare against one round's chain ([`Feasibility::job_counter`]).
/// An offer's verdict for a number of VMs is worked out once and remembered: jobs of a round share
/// their offers and shapes, and the chain does not change within the round.
pub(crate) struct JobCounter<'a> {
    chain: Feasibility<'a>,
    ours: &'a OurUsage,
    /// The listed offers by (region, size, priority).
    listed: HashMap<(&'a str, &'a str, Priority), &'a Offer>,
    /// Verdicts worked out so far, by (the offer's address in the round's list, VMs).
    verdicts: RefCell<HashMap<(usize, u32), Result<(), OfferFilter>>>,
    /// Counts worked out so far, by the candidates they cover: most waiting jobs of a round share
    /// their regions, sizes and shape with others, and each candidate cost a hashed look-up.
    by_shape: RefCell<HashMap<Shape, OfferFilterCounts>>,
}

/// What a job's counts depend on: the spec fields its candidates are made of (allowed regions ×
/// acceptable sizes: what [`JobSpec::allowed_regions`](crate::model::JobSpec::allowed_regions) and
/// [`JobSpec::acceptable_sizes`](crate::model::JobSpec::acceptable_sizes) read), the priorities its
/// spot policy allows, and how many VMs each asks for (all its GPUs for a gang, one VM otherwise).
/// Copied from the spec rather than worked out: working out the candidates was most of the cost.
#[derive(PartialEq, Eq, Hash)]
struct Shape {
    regions: Option<Vec<String>>,
    deny_regions: Vec<String>,
    sizes: Vec<String>,
    gpu_models: Vec<String>,
    workload: Workload,
    min_gpus_per_vm: Option<u32>,
    priorities: &'static [Priority],
    /// The GPUs a gang needs at once; `None` for work that may be split.
    gang_gpus: Option<u32>,
}

impl JobCounter<'_> {
    /// How a job's candidate offers (allowed regions × acceptable sizes × the priorities its spot
    /// policy allows) fare against the whole chain, each sized for the job: all its GPUs for a gang,
    /// one VM for work that may be split.
    pub fn counts(&self, job: &Job) -> OfferFilterCounts {
        let priorities = job.spec.spot_policy().priorities();
        let catalog = self.chain.catalog;
        let spec = &job.spec;
        let gang_gpus = spec.is_gang().then(|| job.wanted_gpus());
        let shape = Shape {
            regions: spec.regions.clone(),
            deny_regions: spec.deny_regions.clone(),
            sizes: spec.sizes.clone(),
            gpu_models: spec.gpu_models.clone(),
            workload: spec.kind.workload(),
            min_gpus_per_vm: spec.min_gpus_per_vm,
            priorities,
            gang_gpus,
        };
        if let Some(counts) = self.by_shape.borrow().get(&shape) {
            return counts.clone();
        }
        let sizes = spec.acceptable_sizes(catalog);
        let mut counts = OfferFilterCounts::default();
        let mut verdicts = self.verdicts.borrow_mut();
        for region in &spec.allowed_regions(catalog) {
            for size in &sizes {
                let vms = gang_gpus.map_or(1, |g| g.div_ceil(size.gpus.max(1)));
                for &p in priorities {
                    let listed: &HashMap<(&str, &str, Priority), &Offer> = &self.listed;
                    let verdict = match listed.get(&(region.as_str(), size.name.as_str(), p)) {
                        None => Err(OfferFilter::Listed),
                        // The offer is known by its place in the round's list.
                        Some(&o) => *verdicts.entry((std::ptr::from_ref(o) as usize, vms)).or_insert_with(|| {
                            self.chain.offer(o, size).and_then(|_| self.chain.room(o, size, vms, self.ours))
                        }),
                    };
                    counts.count(verdict);
                }
            }
        }
        self.by_shape.borrow_mut().insert(shape, counts.clone());
        counts
    }
}
