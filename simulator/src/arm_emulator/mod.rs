//! The ARM emulator: serves a [`SimCloud`] over HTTP on loopback with Azure Resource Manager's
//! paths, bodies, status codes and headers, so that `AzureCloud` is tested end to end without an
//! Azure account.
//!
//! | route | answers |
//! | --- | --- |
//! | `PUT …/resourceGroups/{rg}/providers/Microsoft.AzureFleet/fleets/{name}` | 201 + `Azure-AsyncOperation` + `Retry-After`, body `provisioningState: Creating`; on an existing fleet 200: the same body again changes nothing, a changed one is applied (`Updating`) or refused (`PropertyChangeNotAllowed` naming every immutable field changed, `InvalidResourceLocation`); synchronous refusals (quota, size) 409, bad requests 400 |
//! | `PATCH …/fleets/{name}` | the body merged over the fleet (RFC 7386, tags replaced), then as a changed PUT; 202 + `Location` + `Retry-After`, the monitor's final answer is the fleet |
//! | `GET …/fleets/{name}` | 200 the fleet's body with `provisioningState` kept current, secrets (`adminPassword`, `customData`, `protectedSettings`) never returned; 404 |
//! | `DELETE …/fleets/{name}` | 202 + `Location` + `Retry-After`, the fleet `Deleting` for `delete_seconds`; 204 when absent |
//! | `GET …/resourceGroups/{rg}/providers/Microsoft.AzureFleet/fleets`, `GET /subscriptions/{sub}/providers/Microsoft.AzureFleet/fleets` | pages of `page_size` with `nextLink` |
//! | `GET …/fleets/{name}/virtualMachineScaleSets` | pages; `error` on failed scale sets |
//! | `GET …/fleets/{name}/virtualMachines` (2026-08-01) | pages of VMs: running ones `Succeeded`, ones being made `Creating`, with size, priority and zone |
//! | `GET /subscriptions/{sub}/providers/Microsoft.AzureFleet/locations/{region}/operationStatuses/{op}` | `{status: InProgress\|Succeeded\|Failed\|Canceled, error, startTime, endTime}` |
//! | `GET /subscriptions/{sub}/providers/Microsoft.AzureFleet/locations/{region}/operationResults/{op}` | `Location` monitors: 202 while running; then 204 (delete), 200 + the fleet (PATCH) or the error |
//! | `GET /subscriptions/{sub}/providers/Microsoft.Compute/locations/{region}/usages` | quota pages |
//! | `…/locations/{region}/providers/Microsoft.Quota/{quotas, quotas/{name}, operationsStatus/{id}, quotaRequests/{id}}` | limits read and raised at 2025-09-01, requests decided on the simulated clock (`quota.rs`) |
//! | `GET /subscriptions/{sub}/providers/Microsoft.Compute/skus?$filter=location eq '{region}'` | SKU pages with restrictions |
//! | `POST /providers/Microsoft.ResourceGraph/resources` (2024-04-01) | the spot eviction-rate query over `SpotResources` (`microsoft.compute/skuspotevictionrate/location`): one row per region × size with its band, from the simulated cloud's current rates, paged with `$skipToken` (`$top` or `page_size` rows); other queries 400 `BadRequest` |
//! | `POST /subscriptions/{sub}/providers/Microsoft.Compute/locations/{region}/placementScores/spot/generate` (2025-06-05) | a score per desired region × size (`High`/`Medium`/`Low` from the hidden free capacity and `desiredCount`, with the simulated cloud's noise; `DataNotFoundOrStale` where the size is not sold) and `isQuotaAvailable` from the spot quota |
//! | `GET /_emulator/stats` | request counts per route and status, and a log of recent requests (no token needed) |
//! | `/_imds/{vm}/metadata/…`, `POST /_emulator/fleets/{name}/evict` | Scheduled Events and the VMs' agents ([`scheduled_events`]) |
//!
//! Every ARM route needs `Authorization: Bearer <token>` (401 `AuthenticationFailed` otherwise),
//! the configured subscription (404 `SubscriptionNotFound`), and a supported `api-version` (400
//! `MissingApiVersionParameter`, or `NoRegisteredProviderFound` listing the supported versions as
//! ARM does for a resource type its provider does not serve at that version). Fleets are served at
//! 2024-11-01 and 2026-08-01 (the version current SDKs default to), each with the properties its
//! definition has: a property the version does not define is refused with 400
//! `InvalidRequestContent` naming it and its path. Every answer carries `x-ms-request-id`,
//! `x-ms-correlation-request-id` and a `Date` on the simulated clock (the clock of operation times).
//! Faults are injected with a seeded generator at the configured rates, after authentication:
//! latency, 429 `TooManyRequests` with `Retry-After`, 500 `InternalServerError`, and creations
//! whose operation ends `Failed` with `InternalOperationError`.
//!
//! A fleet with capacity in both priority profiles is *mixed*: each part draws its own quota pool,
//! and spot evictions leave the regular part running. Limits: a fleet has one region
//! (`additionalLocationsProfile` is refused with 400) and counts capacity in VMs (`capacityType:
//! VCpu` is refused); an update changes capacities, spot max price, `maintain` and tags (its sizes,
//! zones, minimums, profiles and VM profile are immutable here); fleet names are unique per
//! subscription.

mod errors;
pub mod fleet_body;
mod quota;
mod respond;
mod routes;
pub mod scheduled_events;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::sim_cloud::SimCloud;

pub use errors::{ArmErrorContext, arm_error};

/// The api-version of Compute Fleet assumed when a request names none (answered 400 anyway): the
/// oldest served.
pub const FLEET_API_VERSION: &str = fleet_body::FLEET_API_VERSIONS[0];

/// How the emulator serves and which faults it injects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmulatorConfig {
    /// Address to bind; port 0 picks a free one. Loopback by default.
    pub bind: SocketAddr,
    /// The bearer token every request must carry.
    pub token: String,
    /// The only subscription that exists.
    pub subscription: String,
    /// Resource group shown for fleets created on the `SimCloud` directly (not over HTTP).
    pub resource_group: String,
    /// Api-versions accepted on `Microsoft.AzureFleet` routes.
    pub fleet_api_versions: Vec<String>,
    /// Api-versions accepted on Compute usages.
    pub usage_api_versions: Vec<String>,
    /// Api-versions accepted on Compute SKUs.
    pub sku_api_versions: Vec<String>,
    /// Api-versions accepted on `Microsoft.Quota`.
    #[serde(default = "default_quota_api_versions")]
    pub quota_api_versions: Vec<String>,
    /// The largest increase (vCPUs over the current limit) a quota request is granted without a
    /// support ticket; a larger one ends `Escalated`.
    #[serde(default = "default_quota_auto_approve_vcpus")]
    pub quota_auto_approve_vcpus: u64,
    /// How long (simulated seconds) a quota request runs before it is decided.
    #[serde(default = "default_quota_request_seconds")]
    pub quota_request_seconds: u64,
    /// Api-versions accepted on Azure Resource Graph queries.
    #[serde(default = "resource_graph_api_versions")]
    pub resource_graph_api_versions: Vec<String>,
    /// Api-versions accepted on spot placement scores.
    #[serde(default = "placement_score_api_versions")]
    pub placement_score_api_versions: Vec<String>,
    /// Items per page on every list (small values exercise `nextLink`).
    pub page_size: usize,
    /// `Retry-After` (seconds) on accepted PUTs, DELETEs and operations still in progress.
    pub retry_after_seconds: u64,
    /// How long (simulated seconds) a deleted fleet shows `Deleting` before it is gone.
    pub delete_seconds: u64,
    /// Injected faults.
    pub faults: FaultConfig,
    /// Run the node agent of every VM whose fleet carries spillway's `customData`, as local
    /// processes (`None`: VMs run nothing; Scheduled Events are served either way).
    #[serde(default)]
    pub agents: Option<crate::sim_cloud::vms::VmRunnerConfig>,
}

/// Fault injection, decided by a generator seeded with `seed`: the same requests in the same
/// order meet the same faults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultConfig {
    /// Share of requests answered 429 `TooManyRequests` (0–1).
    pub throttle_rate: f64,
    /// `Retry-After` of injected 429s, in seconds.
    pub throttle_retry_after_seconds: u64,
    /// Share of requests answered 500 `InternalServerError` (0–1).
    pub error_rate: f64,
    /// Share of `DELETE` requests answered 500 `InternalServerError` on top of `error_rate` (0–1):
    /// deletions that fail, for the tests that no fleet leaks.
    #[serde(default)]
    pub delete_error_rate: f64,
    /// Share of new fleets whose creation ends `Failed` with `InternalOperationError` (0–1).
    pub lro_failure_rate: f64,
    /// Added latency per request, uniformly in this range of milliseconds (inclusive).
    pub latency_ms: (u64, u64),
    /// Seed of the fault generator.
    pub seed: u64,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            throttle_rate: 0.0,
            throttle_retry_after_seconds: 1,
            error_rate: 0.0,
            delete_error_rate: 0.0,
            lro_failure_rate: 0.0,
            latency_ms: (0, 0),
            seed: 1,
        }
    }
}

fn resource_graph_api_versions() -> Vec<String> {
    vec!["2024-04-01".into()]
}

fn placement_score_api_versions() -> Vec<String> {
    vec!["2025-06-05".into()]
}

impl EmulatorConfig {
    /// Loopback on a free port, the given token, subscription `00000000-0000-0000-0000-000000000000`,
    /// Azure's api-versions, pages of 100, `Retry-After: 1`, deletions taking 10 s, no faults.
    pub fn new(token: impl Into<String>) -> EmulatorConfig {
        EmulatorConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: token.into(),
            subscription: "00000000-0000-0000-0000-000000000000".into(),
            resource_group: "spillway".into(),
            fleet_api_versions: fleet_body::FLEET_API_VERSIONS.map(String::from).to_vec(),
            // 2026-04-01 is what azure-mgmt-compute 39 sends by default; its `Usage` and
            // `ListUsagesResult` (generated from Microsoft's definition) have the same fields as
            // 2024-07-01's, so the one response serves both.
            usage_api_versions: ["2026-04-01", "2024-11-01", "2024-07-01", "2024-03-01", "2023-09-01", "2023-03-01"]
                .map(String::from)
                .to_vec(),
            sku_api_versions: vec!["2021-07-01".into()],
            quota_api_versions: default_quota_api_versions(),
            quota_auto_approve_vcpus: default_quota_auto_approve_vcpus(),
            quota_request_seconds: default_quota_request_seconds(),
            resource_graph_api_versions: resource_graph_api_versions(),
            placement_score_api_versions: placement_score_api_versions(),
            page_size: 100,
            retry_after_seconds: 1,
            delete_seconds: 10,
            faults: FaultConfig::default(),
            agents: None,
        }
    }

    /// Checks rates and ranges; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("throttle_rate", self.faults.throttle_rate),
            ("error_rate", self.faults.error_rate),
            ("delete_error_rate", self.faults.delete_error_rate),
            ("lro_failure_rate", self.faults.lro_failure_rate),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("faults.{name} must be between 0 and 1, not {v}"));
            }
        }
        if self.faults.latency_ms.0 > self.faults.latency_ms.1 {
            return Err(format!(
                "faults.latency_ms: the range {}..{} is empty",
                self.faults.latency_ms.0, self.faults.latency_ms.1
            ));
        }
        if self.page_size == 0 {
            return Err("page_size must be at least 1".into());
        }
        if self.token.is_empty() {
            return Err("token must not be empty".into());
        }
        Ok(())
    }
}

fn default_quota_api_versions() -> Vec<String> {
    vec![scheduler::cloud::azure::quota::QUOTA_API_VERSION.to_string()]
}

/// Azure grants modest increases automatically and sends larger ones to a support engineer; where
/// the line falls is Azure's choice per subscription and size. 1,000 vCPUs is a round stand-in.
fn default_quota_auto_approve_vcpus() -> u64 {
    1000
}

fn default_quota_request_seconds() -> u64 {
    30
}

/// Requests counted per route and status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteCount {
    /// HTTP method.
    pub method: String,
    /// Route template, e.g. `/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.AzureFleet/fleets/{name}`.
    pub route: String,
    /// Response status.
    pub status: u16,
    /// How many.
    pub count: u64,
}

/// One request as the emulator answered it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Milliseconds since the emulator started (monotonic).
    pub at_ms: u64,
    /// HTTP method.
    pub method: String,
    /// Path as requested.
    pub path: String,
    /// Response status.
    pub status: u16,
    /// Injected fault, if any: `throttled`, `error`, `delete_error`, `lro_failure`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
}

/// What the emulator has served, for reports and for measuring `Retry-After` honouring.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EmulatorStats {
    /// Every request.
    pub total: u64,
    /// Counts per (method, route, status), sorted.
    pub routes: Vec<RouteCount>,
    /// Injected faults by kind.
    pub faults: BTreeMap<String, u64>,
    /// The most recent requests, oldest first (at most [`REQUEST_LOG_LIMIT`]).
    pub log: Vec<RequestRecord>,
}

impl EmulatorStats {
    /// Requests with this method whose route contains `route_part` and whose status is `status`
    /// (any status when `None`).
    pub fn count(&self, method: &str, route_part: &str, status: Option<u16>) -> u64 {
        self.routes
            .iter()
            .filter(|r| r.method == method && r.route.contains(route_part) && status.is_none_or(|s| s == r.status))
            .map(|r| r.count)
            .sum()
    }
}

/// How many requests the log keeps.
pub const REQUEST_LOG_LIMIT: usize = 10_000;

#[derive(Default)]
struct StatsInner {
    total: u64,
    routes: BTreeMap<(String, String, u16), u64>,
    faults: BTreeMap<String, u64>,
    log: std::collections::VecDeque<RequestRecord>,
}

/// A fleet created over HTTP: its resource group and the body it was created (or last changed)
/// with, secrets included (they are never returned).
#[derive(Debug, Clone)]
struct StoredFleet {
    resource_group: String,
    body: serde_json::Value,
}

/// What a `Location` monitor follows.
#[derive(Debug, Clone)]
enum Monitor {
    /// A deletion of the fleet created at `created_ms` (a new fleet of the same name is another).
    Delete { fleet: String, created_ms: i64 },
    /// A PATCH: the SimCloud operation it started.
    Update { fleet: String, resource_group: String, op: String },
}

pub(crate) struct AppState {
    cloud: Arc<SimCloud>,
    cfg: EmulatorConfig,
    base_url: String,
    started: Instant,
    fleets: Mutex<BTreeMap<String, StoredFleet>>,
    monitors: Mutex<BTreeMap<String, Monitor>>,
    next_monitor: AtomicU64,
    next_request: AtomicU64,
    rng: Mutex<StdRng>,
    stats: Mutex<StatsInner>,
    writes_left: AtomicU64,
    reads_left: AtomicU64,
    deletes_left: AtomicU64,
    quota_requests: Mutex<BTreeMap<String, quota::QuotaRequest>>,
}

impl AppState {
    fn stats(&self) -> EmulatorStats {
        let s = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        EmulatorStats {
            total: s.total,
            routes: s
                .routes
                .iter()
                .map(|((method, route, status), count)| RouteCount {
                    method: method.clone(),
                    route: route.clone(),
                    status: *status,
                    count: *count,
                })
                .collect(),
            faults: s.faults.clone(),
            log: s.log.iter().cloned().collect(),
        }
    }

    fn record(&self, method: &str, route: &str, path: &str, status: u16, fault: Option<&str>) {
        let mut s = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        s.total += 1;
        *s.routes.entry((method.to_string(), route.to_string(), status)).or_default() += 1;
        if let Some(f) = fault {
            *s.faults.entry(f.to_string()).or_default() += 1;
        }
        if s.log.len() == REQUEST_LOG_LIMIT {
            s.log.pop_front();
        }
        let at_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        s.log.push_back(RequestRecord {
            at_ms,
            method: method.to_string(),
            path: path.to_string(),
            status,
            fault: fault.map(String::from),
        });
    }
}

/// A running emulator. Dropping it stops the server too; [`EmulatorHandle::shutdown`] also waits
/// for it to finish.
pub struct EmulatorHandle {
    addr: SocketAddr,
    state: Arc<AppState>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
    vms: Arc<crate::sim_cloud::vms::VmRunner>,
}

impl EmulatorHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`: the management endpoint to give `AzureCloud`.
    pub fn base_url(&self) -> String {
        self.state.base_url.clone()
    }

    /// The subscription it serves.
    pub fn subscription(&self) -> &str {
        &self.state.cfg.subscription
    }

    /// The cloud behind it (for control hooks and counters).
    pub fn cloud(&self) -> &Arc<SimCloud> {
        &self.state.cloud
    }

    /// The simulated VMs (their agents, Scheduled Events, scheduled evictions).
    pub fn vms(&self) -> &Arc<crate::sim_cloud::vms::VmRunner> {
        &self.vms
    }

    /// Requests served so far.
    pub fn stats(&self) -> EmulatorStats {
        self.state.stats()
    }

    /// Stops accepting requests and waits for the server to finish.
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        self.vms.shutdown();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.map_err(std::io::Error::other)?,
            None => Ok(()),
        }
    }

    /// Serves until Ctrl-C, then shuts down.
    pub async fn run_until_ctrl_c(self) -> std::io::Result<()> {
        tokio::signal::ctrl_c().await?;
        self.shutdown().await
    }
}

impl Drop for EmulatorHandle {
    fn drop(&mut self) {
        self.vms.shutdown();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Binds and starts serving `cloud`; returns once the socket is bound.
pub async fn serve(config: EmulatorConfig, cloud: Arc<SimCloud>) -> std::io::Result<EmulatorHandle> {
    config.validate().map_err(|m| std::io::Error::new(std::io::ErrorKind::InvalidInput, m))?;
    let listener = tokio::net::TcpListener::bind(config.bind).await?;
    let addr = listener.local_addr()?;
    let agents = config.agents.clone();
    let state = Arc::new(AppState {
        cloud,
        base_url: format!("http://{addr}"),
        started: Instant::now(),
        fleets: Mutex::new(BTreeMap::new()),
        monitors: Mutex::new(BTreeMap::new()),
        next_monitor: AtomicU64::new(1),
        next_request: AtomicU64::new(1),
        rng: Mutex::new(StdRng::seed_from_u64(config.faults.seed)),
        stats: Mutex::new(StatsInner::default()),
        writes_left: AtomicU64::new(1199),
        reads_left: AtomicU64::new(11999),
        deletes_left: AtomicU64::new(14999),
        quota_requests: Mutex::new(BTreeMap::new()),
        cfg: config,
    });
    let (app, vms) = scheduled_events::attach(routes::router(state.clone()), &state, agents);
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    // Small answers on a kept-alive connection: without TCP_NODELAY each waits for a delayed ACK.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
        let _ = tcp.set_nodelay(true);
    });
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stop_rx.await;
            })
            .await
    });
    Ok(EmulatorHandle { addr, state, stop: Some(stop_tx), task: Some(task), vms })
}

fn take_budget(counter: &AtomicU64) -> u64 {
    counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(1))).unwrap_or(0)
}
