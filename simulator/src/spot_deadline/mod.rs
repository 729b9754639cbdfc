//! Deadline-aware spot: policies that ride spot VMs as long as they can and still meet a deadline,
//! across regions, evaluated on real spot-availability traces (`spillway simulate`, experiment kind
//! `spot-deadline`).
//!
//! ## Semantics (the contract the engine implements, in [`run::run_once`])
//! - Time runs in ticks of `tick_seconds`. A run starts at trace tick
//!   `round(offset_hours × 3600 / tick_seconds)`; its tick `i` is trace tick `start + i`.
//! - At the start of each tick, a spot VM whose region's trace says unavailable at that tick is lost
//!   (it ran fully in the previous tick). Then the policy picks spot in a region (only if that region's
//!   trace says available at that tick), regular in a region (only where `regular_available`), or
//!   nothing.
//! - What runs during a tick is billed for the whole tick at its price (the spot price of that tick
//!   for spot), even when the work ends inside the tick.
//! - Every start (from nothing, after a loss, or on a change of priority or of region) spends its
//!   first `restart_overhead_hours` of running time without progress, billed; an overhead longer
//!   than a tick carries over into the next ticks of the same VM. Progress is never lost.
//! - A start in a region other than the one holding the checkpoint (where the job last ran) costs
//!   `checkpoint_gb × usd_per_gb` for that pair (the reverse pair's rate if only that is listed;
//!   0 if neither is). The first start is free of egress.
//! - A run ends when the work is done; the finish instant is the tick's start plus the overhead
//!   spent in it plus the remaining work, and the deadline is met if it is within `deadline_hours`.
//!   A run that has not finished when the shortest trace ends stops there (deadline missed).
//! - Migrations are the starts after the first one.
//!
//! The policies and their interface live in the scheduler crate ([`scheduler::deadline`]), where
//! the control loop uses them too; they are re-exported here under their former paths. The engine
//! builds each tick's [`TickView`] from the experiment.

pub mod experiment;
pub mod run;
pub mod trace;

pub use experiment::{Egress, Experiment, Job, Region, SpotPrice};
pub use run::{PolicySummary, Report, RunError, RunResult, run_experiment, run_once, run_policy};
pub use scheduler::deadline::{Choice, DeadlinePolicy, RegionTick, TickView, policies, policy};
pub use trace::TraceConvention;
