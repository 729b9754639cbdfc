//! A policy's side of the what-if engine: what the engine asks of the production control loop
//! ([`super::loop_driver`]) and of the baselines' brokers ([`super::baselines`]) alike.

use std::collections::BTreeMap;

use super::WhatIfError;
use super::report::{Failover, JobOutcome};
use super::workload::TraceJob;

/// What a round leaves behind, for the series.
#[derive(Debug, Default)]
pub(crate) struct RoundState {
    /// USD per hour of the fleets running now (running VMs × price).
    pub cost_rate: f64,
    /// GPUs per hour running now (running VMs × GPUs per VM).
    pub gpu_rate: f64,
    /// GPUs running per region.
    pub gpus_by_region: BTreeMap<String, f64>,
}

/// A policy's side of the engine.
#[allow(async_fn_in_trait)] // crate-private, driven on one thread: no `Send` bound is wanted
pub(crate) trait Driver {
    /// Submits a job at the clock's time.
    async fn submit(&mut self, job: &TraceJob) -> Result<(), WhatIfError>;
    /// Runs one round at the clock's time.
    async fn round(&mut self) -> Result<RoundState, WhatIfError>;
    /// Jobs waiting for a placement.
    fn queue(&self) -> Result<u64, WhatIfError>;
    /// True when no job is open (nothing to do until the next arrival).
    fn idle(&self) -> bool;
    /// Brings what the store says of running work up to the clock (before `finish`).
    async fn settle(&mut self) -> Result<(), WhatIfError> {
        Ok(())
    }
    /// Every submitted job's outcome, and the failovers, at the end.
    fn finish(&mut self, end_ms: i64) -> Result<(Vec<JobOutcome>, Vec<Failover>), WhatIfError>;
}
