//! From jobs to solver demands: a job's kind, GPU models or sizes, regions, spot policy, caps and
//! budget become the solver's filters; its unmet GPUs become the demand.
//!
//! A gang job asks for all its GPUs on one offer or nothing. A splittable job (batch, inference)
//! asks only for what its healthy attempts do not already cover, so capacity lost in one region is
//! topped up elsewhere. An inference service asks in two parts: the GPUs needed to get back to
//! `replicas.min`, weighted far above everything else of its priority, and the rest up to
//! `replicas.desired` at its normal weight, so minimum replicas survive whatever else waits.

use crate::catalog::Catalog;
use crate::model::{Job, JobKind};

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
}

impl DemandPart {
    /// The suffix of the solver job id.
    pub fn suffix(self) -> &'static str {
        match self {
            DemandPart::Whole => "",
            DemandPart::Min => "#min",
            DemandPart::Extra => "#extra",
        }
    }

    /// Splits a solver job id back into the job id and the part.
    pub fn parse(solver_id: &str) -> (&str, DemandPart) {
        if let Some(id) = solver_id.strip_suffix("#min") {
            (id, DemandPart::Min)
        } else if let Some(id) = solver_id.strip_suffix("#extra") {
            (id, DemandPart::Extra)
        } else {
            (solver_id, DemandPart::Whole)
        }
    }
}

/// Time a new placement takes before it does useful work (provisioning and start-up); the restart
/// overhead the deadline policies plan with.
pub const RESTART_MARGIN_HOURS: f64 = 0.1;

/// Builds the solver demands for a job whose healthy attempts carry `healthy_gpus`.
/// The job's budget is what remains of it after what the job has cost so far. For a deadline job
/// the loop then narrows them to its deadline policy's choice
/// ([`apply_deadline_choice`](super::apply_deadline_choice)).
pub fn demands(job: &Job, catalog: &Catalog, healthy_gpus: u32) -> Vec<solver::JobDemand> {
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
    let remaining_hours = job.remaining_hours().unwrap_or(1.0).max(1.0 / 60.0);
    let remaining_budget = spec.budget.map(|b| (b - job.cost_usd).max(0.0));
    let base = |id: String, gpus: u32, priority: u32| {
        // A cap on the job's total price per hour applies pro rata to a part of it.
        let share = gpus as f64 / wanted.max(1) as f64;
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
            max_price_per_hour: spec.max_price_per_hour.map(|c| c * share),
            min_gpus_per_vm: if spec.kind == JobKind::Inference && spec.gpus <= 8 {
                // A replica must fit on one VM: its GPUs cannot be split across machines.
                Some(spec.min_gpus_per_vm.unwrap_or(1).max(spec.gpus))
            } else {
                spec.min_gpus_per_vm
            },
            budget: remaining_budget.map(|b| b * share),
            data_region: spec.data_region.clone(),
            data_gb: spec.data_gb,
            sizes: size_names.clone(),
        }
    };
    match spec.replicas {
        Some(r) if spec.kind == JobKind::Inference => {
            let min_gpus = spec.gpus.saturating_mul(r.min);
            let below_min = min_gpus.saturating_sub(healthy_gpus).min(deficit);
            let extra = deficit - below_min;
            let mut out = Vec::new();
            if below_min > 0 {
                out.push(base(
                    format!("{}{}", job.id, DemandPart::Min.suffix()),
                    below_min,
                    spec.priority.saturating_mul(MIN_REPLICA_BOOST),
                ));
            }
            if extra > 0 {
                out.push(base(format!("{}{}", job.id, DemandPart::Extra.suffix()), extra, spec.priority));
            }
            out
        }
        _ => vec![base(job.id.clone(), deficit, spec.priority)],
    }
}
