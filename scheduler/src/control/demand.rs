//! From jobs to solver demands: a job's kind, GPU models or sizes, regions, spot policy, caps and
//! budget become the solver's filters; its unmet GPUs become the demand.
//!
//! A gang job asks for all its GPUs on one offer or nothing. A splittable job (batch, inference)
//! asks only for what its healthy attempts do not already cover, so capacity lost in one region is
//! topped up elsewhere. An inference service asks in two parts: the GPUs needed to get back to
//! `replicas.min`, weighted far above everything else of its priority, and the rest up to
//! `replicas.desired` at its normal weight, so minimum replicas survive whatever else waits.
//!
//! A job with a regular base (`regular_gpus`) whose spot policy allows spot asks in one more part:
//! the base's GPUs not yet held on regular VMs, regular only (`#base`), and the rest under its spot
//! policy. Each part draws its own quota pools in the solver; placement puts a base and a spot part
//! landing on the same region and size into one mixed fleet (`mixed::pairs`).
//!
//! A job's `max_price_per_hour` and `budget` are about its *total*: the demands get what is left of
//! them after what the job already holds ([`Held`]: every VM its live fleets were asked for, at
//! the price they may bill), so that no sequence of rounds takes the job past either.

use crate::catalog::Catalog;
use crate::model::{Job, JobKind, SpotPolicy};

/// Weight multiplier for the part of an inference service below its minimum replicas.
pub const MIN_REPLICA_BOOST: u32 = 100;

/// Which part of a job a solver demand stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DemandPart {
    /// The whole job (gang, or a splittable job's whole deficit).
    Whole,
    /// An inference service's deficit up to `replicas.min`.
    Min,
    /// An inference service's deficit above `replicas.min`.
    Extra,
    /// The part of a job's regular base (`regular_gpus`) not held on regular VMs: regular only.
    Base,
}

impl DemandPart {
    /// The suffix of the solver job id.
    pub fn suffix(self) -> &'static str {
        match self {
            DemandPart::Whole => "",
            DemandPart::Min => "#min",
            DemandPart::Extra => "#extra",
            DemandPart::Base => "#base",
        }
    }

    /// Splits a solver job id back into the job id and the part.
    pub fn parse(solver_id: &str) -> (&str, DemandPart) {
        if let Some(id) = solver_id.strip_suffix("#min") {
            (id, DemandPart::Min)
        } else if let Some(id) = solver_id.strip_suffix("#extra") {
            (id, DemandPart::Extra)
        } else if let Some(id) = solver_id.strip_suffix("#base") {
            (id, DemandPart::Base)
        } else {
            (solver_id, DemandPart::Whole)
        }
    }
}

/// Time a new placement takes before it does useful work (provisioning and start-up); the restart
/// overhead the deadline policies plan with.
pub const RESTART_MARGIN_HOURS: f64 = 0.1;

/// What a job already holds when its new demands are made.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Held {
    /// GPUs its healthy placements carry: the demand is for the rest.
    pub gpus: u32,
    /// Of `gpus`, those on regular VMs (a regular fleet's, a mixed fleet's regular part's): what
    /// of its regular base (`regular_gpus`) the job holds.
    pub regular_gpus: u32,
    /// USD per hour its live fleets may bill: every VM they were asked for (a fleet refills what
    /// it lost) at the price it is billed at, a spot VM at its max price when it has one (the
    /// most it may cost before it is evicted).
    pub usd_per_hour: f64,
}

/// The hours a job's remaining work is planned and priced for: its remaining hours, at least a
/// minute; an hour when it gives no duration.
pub(crate) fn planning_hours(job: &Job) -> f64 {
    job.remaining_hours().unwrap_or(1.0).max(1.0 / 60.0)
}

impl Held {
    /// What the held fleets will still cost over the job's remaining work, USD.
    pub(crate) fn committed_usd(&self, job: &Job) -> f64 {
        self.usd_per_hour * planning_hours(job)
    }
}

/// What the job's own `budget` leaves a new placement, USD (at least 0): the budget less what it
/// has cost and what its held fleets will still cost. `None` without a budget.
pub(crate) fn remaining_budget(job: &Job, held: Held) -> Option<f64> {
    job.spec.budget.map(|b| (b - (job.cost_usd + held.committed_usd(job))).max(0.0))
}

/// The regular base a job asks for apart (`regular_gpus`), when it has one that means something:
/// its spot policy allows spot (with `never` every GPU is regular anyway), it is splittable, and no
/// deadline policy chooses spot or regular for it.
pub(crate) fn regular_base(job: &Job) -> Option<u32> {
    let spec = &job.spec;
    let base = spec.regular_gpus.filter(|&g| g > 0)?;
    let allows_spot = matches!(spec.spot_policy(), SpotPolicy::Allowed | SpotPolicy::Preferred);
    (allows_spot && !spec.is_gang() && !super::deadline_choice::deadline_managed(job)).then_some(base)
}

/// Builds the solver demands for a job that already holds `held`. The job's price cap is what its
/// held fleets leave of it; its budget what remains after what it has cost so far and what its
/// held fleets will cost over the rest of its work. For a deadline job the loop then narrows
/// them to its deadline policy's choice ([`apply_deadline_choice`](super::apply_deadline_choice)).
pub fn demands(job: &Job, catalog: &Catalog, held: Held) -> Vec<solver::JobDemand> {
    let healthy_gpus = held.gpus;
    let spec = &job.spec;
    let sizes = spec.acceptable_sizes(catalog);
    if sizes.is_empty() {
        return Vec::new();
    }
    let wanted = job.wanted_gpus();
    let gang = spec.is_gang();
    let deficit = if gang { if healthy_gpus > 0 { 0 } else { wanted } } else { wanted.saturating_sub(healthy_gpus) };
    if deficit == 0 {
        return Vec::new();
    }
    let mut gpu_models: Vec<String> = sizes.iter().map(|s| s.gpu_model.clone()).collect();
    gpu_models.sort();
    gpu_models.dedup();
    let size_names: Vec<String> = sizes.iter().map(|s| s.name.clone()).collect();
    let spot = spec.spot_policy();
    let remaining_hours = planning_hours(job);
    let held_cost = job.cost_usd + held.committed_usd(job);
    let remaining_cap = spec.max_price_per_hour.map(|c| (c - held.usd_per_hour).max(0.0));
    let remaining_budget = remaining_budget(job, held);
    // The regular base not yet held on regular VMs comes first out of the deficit.
    let base_gpus = regular_base(job).map_or(0, |b| b.saturating_sub(held.regular_gpus).min(deficit));
    let part = |id: String, gpus: u32, priority: u32, spot: SpotPolicy| {
        // What is left of the cap and budget is shared by the parts pro rata, so that the parts
        // placed together never pass it either.
        let share = gpus as f64 / deficit.max(1) as f64;
        solver::JobDemand {
            id,
            gpus,
            gpu_models: gpu_models.clone(),
            gang,
            regions: spec.regions.clone(),
            deny_regions: spec.deny_regions.clone(),
            spot,
            priority,
            duration_hours: remaining_hours,
            max_price_per_hour: remaining_cap.map(|c| c * share),
            held_price_per_hour: if spec.max_price_per_hour.is_some() {
                held.usd_per_hour + remaining_cap.unwrap_or(0.0) * (1.0 - share)
            } else {
                0.0
            },
            min_gpus_per_vm: if spec.kind == JobKind::Inference && spec.gpus <= 8 {
                // A replica must fit on one VM: its GPUs cannot be split across machines.
                Some(spec.min_gpus_per_vm.unwrap_or(1).max(spec.gpus))
            } else {
                spec.min_gpus_per_vm
            },
            budget: remaining_budget.map(|b| b * share),
            held_cost: if spec.budget.is_some() {
                held_cost + remaining_budget.unwrap_or(0.0) * (1.0 - share)
            } else {
                0.0
            },
            data_region: spec.data_region.clone(),
            data_gb: spec.data_gb,
            sizes: size_names.clone(),
        }
    };
    let id = |p: DemandPart| format!("{}{}", job.id, p.suffix());
    let boosted = spec.priority.saturating_mul(MIN_REPLICA_BOOST);
    let mut out = Vec::new();
    match spec.replicas {
        Some(r) if spec.kind == JobKind::Inference => {
            let min_gpus = spec.gpus.saturating_mul(r.min);
            let below_min = min_gpus.saturating_sub(healthy_gpus).min(deficit);
            // The base is the first GPUs placed: it takes the boost of the replicas below the
            // minimum it restores, and what it covers of them leaves the `#min` part.
            if base_gpus > 0 {
                let weight = if below_min > 0 { boosted } else { spec.priority };
                out.push(part(id(DemandPart::Base), base_gpus, weight, SpotPolicy::Never));
            }
            let min_rest = below_min.saturating_sub(base_gpus);
            let extra = deficit - base_gpus.max(below_min);
            if min_rest > 0 {
                out.push(part(id(DemandPart::Min), min_rest, boosted, spot));
            }
            if extra > 0 {
                out.push(part(id(DemandPart::Extra), extra, spec.priority, spot));
            }
        }
        _ => {
            if base_gpus > 0 {
                out.push(part(id(DemandPart::Base), base_gpus, spec.priority, SpotPolicy::Never));
            }
            if deficit > base_gpus {
                out.push(part(job.id.clone(), deficit - base_gpus, spec.priority, spot));
            }
        }
    }
    out
}
