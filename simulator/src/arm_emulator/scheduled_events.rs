//! Scheduled Events and booting VMs for the ARM emulator: a fleet created over HTTP whose VM
//! profile carries spillway's cloud-init `customData` gets, per VM, a real `spillway agent` process
//! started from the settings that `customData` writes (what cloud-init does on an Azure VM), and an
//! instance metadata service at `/_imds/<vm>/metadata/…` (the agent's IMDS endpoint) serving the
//! VM's name, its address and Scheduled Events.
//!
//! | route | answers |
//! | --- | --- |
//! | `GET /_imds/{vm}/metadata/scheduledevents?api-version=…` (`Metadata: true`) | `{DocumentIncarnation, Events: [{EventId, EventType: Preempt, Resources, NotBefore, …}]}` for the VM's fleet |
//! | `POST /_imds/{vm}/metadata/scheduledevents?api-version=…` | approve events (`{StartRequests: [{EventId}]}`) |
//! | `GET /_imds/{vm}/metadata/instance/compute[/name]`, `…/privateIpAddress` | the VM's name, location, size; its address |
//! | `POST /_emulator/fleets/{name}/evict?notice_seconds=N` | a `Preempt` notice to the fleet's newest VM now, the eviction N simulated seconds later (default 30) |
//! | `GET /_emulator/vms` | the VMs running agents |
//!
//! Spot fleets' own evictions (the simulated cloud's rates) are announced `notice_seconds` ahead
//! too. A fleet without spillway's `customData` has VMs without agents (and without events).

use std::sync::Arc;

use axum::Router;
use scheduler::agents::{AgentSettings, settings_from_custom_data};

use super::AppState;
use crate::sim_cloud::FleetSnapshot;
use crate::sim_cloud::vms::{AgentLauncher, VmRunner, VmRunnerConfig};

/// Boots the agents of fleets created with spillway's `customData`.
struct CustomDataLauncher {
    state: std::sync::Weak<AppState>,
    enabled: bool,
}

impl AgentLauncher for CustomDataLauncher {
    fn settings(&self, fleet: &FleetSnapshot) -> Option<AgentSettings> {
        if !self.enabled {
            return None;
        }
        let state = self.state.upgrade()?;
        let fleets = state.fleets.lock().unwrap_or_else(|p| p.into_inner());
        let body = &fleets.get(&fleet.name)?.body;
        // The stored body keeps the secrets Azure never returns (customData among them).
        let custom_data = body.pointer("/properties/computeProfile/baseVirtualMachineProfile/osProfile/customData")?;
        settings_from_custom_data(custom_data.as_str()?)
    }
}

/// Adds the metadata and control routes to the emulator's router and starts following its fleets.
pub(crate) fn attach(app: Router, state: &Arc<AppState>, config: Option<VmRunnerConfig>) -> (Router, Arc<VmRunner>) {
    let enabled = config.is_some();
    let config = config.unwrap_or_else(|| {
        VmRunnerConfig::new(
            std::env::current_exe().unwrap_or_default(),
            vec!["agent".into()],
            std::env::temp_dir().join("spillway-emulator-vms"),
            std::env::temp_dir().join("spillway-emulator-checkpoints"),
        )
    });
    let launcher = Arc::new(CustomDataLauncher { state: Arc::downgrade(state), enabled });
    let runner = VmRunner::new(state.cloud.clone(), launcher, config);
    runner.set_metadata_base(&format!("{}/_imds", state.base_url));
    runner.spawn();
    let app = app.merge(runner.metadata_router("/_imds")).merge(runner.control_router("/_emulator"));
    (app, runner)
}
