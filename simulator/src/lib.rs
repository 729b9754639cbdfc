//! The simulated cloud, virtual time, workloads, scenarios, baselines and reports.
//!
//! - [`sim_cloud`]: `SimCloud`, a simulated Azure behind the scheduler's `Cloud` trait.
//! - [`arm_emulator`]: serves a `SimCloud` over HTTP with Azure Resource Manager's semantics.
//! - [`spot_deadline`]: deadline-aware spot policies and the `spot-deadline` experiment.
//! - [`whatif`]: what-if scenarios replayed with the real control loop and baselines.

pub mod arm_emulator;
pub mod sim_cloud;
pub mod spot_deadline;
pub mod whatif;

pub use sim_cloud::{SimCloud, SimCloudConfig};
