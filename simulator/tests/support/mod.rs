//! The control loop against the simulated cloud in virtual time: one store, one `SimCloud`, one
//! `ManualClock` and a `Controller`, shared by the control-loop test suites (each adds the helpers
//! its own scenarios need).

// Each test crate uses a different part of this module.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use scheduler::Catalog;
use scheduler::clock::{Clock, ManualClock};
use scheduler::cloud::Cloud;
use scheduler::control::{ControlConfig, ControlMetrics, Controller};
use scheduler::jobs::JobService;
use simulator::sim_cloud::{SimCloud, SimCloudConfig};
use state::Store;

/// Virtual time at which every harness starts.
pub const START_MS: i64 = 1_800_000_000_000;

/// A controller over a simulated cloud and a store in a temporary directory (removed on drop).
pub struct Harness {
    pub clock: Arc<ManualClock>,
    pub cloud: Arc<SimCloud>,
    pub store: Store,
    pub jobs: JobService,
    pub ctl: Controller,
    pub dir: PathBuf,
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A fresh temporary directory for one test (`name` keeps parallel tests apart).
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spillway-ctl-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A controller over `store`, `cloud` and `clock` with the built-in catalog.
pub fn controller(store: &Store, cloud: &Arc<SimCloud>, clock: &Arc<ManualClock>, config: ControlConfig) -> Controller {
    Controller::new(
        store.clone(),
        cloud.clone() as Arc<dyn Cloud>,
        clock.clone() as Arc<dyn Clock>,
        Arc::new(Catalog::builtin()),
        config,
        ControlMetrics::unregistered(),
    )
}

/// The loop's defaults without fsyncs (a throwaway store).
pub fn config() -> ControlConfig {
    ControlConfig { durable: false, ..ControlConfig::default() }
}

/// A harness with the given cloud and loop settings.
pub fn harness_with(name: &str, cloud_config: SimCloudConfig, cfg: ControlConfig) -> Harness {
    let dir = temp_dir(name);
    let clock = Arc::new(ManualClock::new(START_MS));
    let cloud = Arc::new(SimCloud::new(cloud_config, Catalog::builtin(), clock.clone()).expect("valid cloud"));
    let store = Store::open(&dir).expect("store opens");
    let jobs = JobService::new(store.clone(), Arc::new(Catalog::builtin()), clock.clone()).without_flush();
    let ctl = controller(&store, &cloud, &clock, cfg);
    Harness { clock, cloud, store, jobs, ctl, dir }
}
