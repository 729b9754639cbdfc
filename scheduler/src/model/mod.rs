//! The domain model: what users ask for (`JobSpec`), what the cloud offers (`VmSize`, `Offer`,
//! `Quota`), and what the scheduler keeps track of (`Job`, `Attempt`).
//!
//! These types are plain data with serde derives; the invariants they carry are checked by
//! `JobSpec::validate` and by the catalog loader, never assumed.

mod blocked_offer;
mod failure_class;
mod field_error;
mod fleet_operation;
mod job;
mod job_event;
mod job_spec;
mod offer;
mod offer_filter;
mod pipeline;
mod quota;
mod size;
mod spec_reader;
mod spot_signal;
pub mod strict_json;

pub use blocked_offer::BlockedOffer;
pub use failure_class::FailureClass;
pub use field_error::{FieldError, FieldErrors};
pub use fleet_operation::FleetOperation;
pub use job::{Attempt, AttemptPart, AttemptState, Capacity, Job, JobState, PartShare, fleet_name};
pub use job_event::{EventKind, JobEvent};
pub use job_spec::{
    IntBounds, JobKind, JobSpec, MAX_BUDGET_USD, MAX_CHECKPOINT_MINUTES, MAX_DATA_GB, MAX_DEADLINE_DAYS,
    MAX_DURATION_HOURS, MAX_GPUS, MAX_PRICE_PER_HOUR, MAX_REPLICAS, MIN_DURATION_HOURS, OnIdle, RESERVED_ENV_PREFIX,
    Replicas, SpecFormat, int_bounds,
};
pub use offer::Offer;
pub use offer_filter::{OfferFilter, OfferFilterCounts};
pub use pipeline::{
    Dependency, EndedMember, MAX_DEPENDENCIES, MAX_PIPELINE_JOBS, OnDependencyFailure, Pipeline, PipelineJobSpec,
    PipelineLink, PipelineMember, PipelineSpec, PipelineState, StageDeadline, env_name_part,
};
pub use quota::Quota;
pub use size::{SizeCatalog, VmSize, Workload};
/// Spot or regular, spot policies and quota pools have one home, the solver (the lowest layer).
pub use solver::{Priority, QuotaPool, SpotPolicy, normalize_family};
pub use spec_reader::MAX_LIST_ITEMS;
pub use spot_signal::{EvictionBand, PlacementScore, spot_eviction_prior};
