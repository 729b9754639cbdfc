//! Azure Resource Manager: Compute Fleet, Compute usages (quota) and resource SKUs.
//!
//! [`AzureCloud`] implements [`Cloud`] over `azure_core` 1.x's HTTP pipeline with an
//! `azure_identity` credential. Requests go through [`retry::with_retries`] (429 and 5xx, with
//! `Retry-After`), and every failure is classified by [`classify`] before it leaves this module.
//! [`models`] holds the wire format, shared with the ARM emulator in the `simulator` crate.
//!
//! VM counts: with a fleet api-version that lists a fleet's VMs (2026-08-01, the default),
//! [`Cloud::get_fleet`] reads `GET …/fleets/{name}/virtualMachines` at most once per fleet per
//! `vm_read_interval_secs` (60 s) and reports the running (`Succeeded`) VMs per priority in
//! `running_vms`, so evictions are seen as on the simulated cloud. With 2024-11-01 `running_vms`
//! stays `None` (unknown): only a fleet that fails or disappears shows a loss.
//!
//! Capacity signals ([`signals`]): Azure publishes no free capacity, so offers carry none; spot
//! offers carry the eviction-rate band from Azure Resource Graph and the spot placement score,
//! read at most once per `spot_signals_refresh_secs` (600 s), and plan with the prior made of
//! them (`model::spot_eviction_prior`; the configured rate where no band is published).

pub mod classify;
pub mod config;
pub mod credential;
pub mod fleet_body;
pub mod models;
pub mod quota;
pub mod retry;
mod signals;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use azure_core::credentials::TokenCredential;
use azure_core::http::headers::{HeaderName, Headers};
use azure_core::http::policies::Policy;
use azure_core::http::{ClientOptions, Context, Method, Pipeline, PipelineSendOptions, Request, RetryOptions, Url};
use serde::de::DeserializeOwned;
use tokio::sync::Mutex;

pub use classify::ErrorContext;
pub use config::{ApiVersions, AzureConfig, CredentialKind, RetryConfig};
pub use credential::StaticTokenCredential;
pub use fleet_body::{FleetBodyOptions, ranked_sizes};

use self::models::{ErrorDetail, OperationState, OperationStatusResult, Page, ResourceSku, RestrictionType, Usage};
use crate::catalog::Catalog;
use crate::clock::{Clock, SystemClock};
use crate::cloud::{
    Cloud, CloudError, Fleet, FleetOperation, FleetPartStatus, FleetRequest, OperationStatus, ProvisioningState,
    ScaleSet, SizeRestriction,
};
use crate::model::{Offer, Priority, Quota, QuotaPool, spot_eviction_prior};

/// Poll interval when the server sends no `Retry-After`.
const DEFAULT_POLL: Duration = Duration::from_secs(10);
/// How long SKU restrictions are reused by [`Cloud::offers`]: they change on the scale of days.
const SKU_CACHE: Duration = Duration::from_secs(3600);

/// The Azure implementation of [`Cloud`].
pub struct AzureCloud {
    config: AzureConfig,
    catalog: Catalog,
    pipeline: Pipeline,
    body_options: FleetBodyOptions,
    /// Expected spot evictions per VM-hour for spot offers whose size and region have no published
    /// eviction-rate band (documented in [`AzureCloud::with_spot_eviction_rate`]).
    spot_eviction_rate: f64,
    /// Longest a `create_fleet_and_wait` or a deletion is followed.
    operation_timeout: Duration,
    restrictions_cache: Mutex<HashMap<String, (Instant, Vec<SizeRestriction>)>>,
    /// Time for the VM-read interval: the scheduler's clock (virtual in tests).
    clock: Arc<dyn Clock>,
    /// Running VMs per fleet from its last VM list, and when (clock ms) it was read.
    vm_counts: Mutex<HashMap<String, (i64, VmCounts)>>,
    /// VM lists read so far (each is one ARM read, or one per page).
    vm_reads: AtomicU64,
    /// The spot signals as last read, and when (clock ms).
    spot_signals: Mutex<Option<(i64, Arc<signals::SpotSignals>)>>,
    /// Signal calls made so far (Resource Graph pages and placement-score POSTs).
    signal_calls: AtomicU64,
}

/// Running VMs of one fleet by priority, from its VM list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VmCounts {
    /// Spot VMs `Succeeded`.
    pub spot: u32,
    /// Regular VMs `Succeeded`.
    pub regular: u32,
    /// VMs `Failed`.
    pub failed: u32,
}

impl std::fmt::Debug for AzureCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureCloud")
            .field("endpoint", &self.config.management_endpoint)
            .field("subscription_id", &self.config.subscription_id)
            .field("resource_group", &self.config.resource_group)
            .finish_non_exhaustive()
    }
}

/// One HTTP answer, read whole.
struct Reply {
    status: u16,
    headers: Headers,
    body: Vec<u8>,
}

impl AzureCloud {
    /// Builds a client with the credential the configuration names. Fails with a `Permanent`
    /// error naming the field when the configuration, the template or the credential is unusable.
    pub fn new(config: AzureConfig, catalog: Catalog) -> Result<AzureCloud, CloudError> {
        let credential = credential::build_credential(&config)?;
        Self::with_credential(config, catalog, credential)
    }

    /// Builds a client with a given credential (tests use [`StaticTokenCredential`]).
    pub fn with_credential(
        config: AzureConfig,
        catalog: Catalog,
        credential: Arc<dyn TokenCredential>,
    ) -> Result<AzureCloud, CloudError> {
        let invalid = |e: crate::model::FieldErrors| CloudError::Permanent {
            code: "InvalidConfiguration".into(),
            message: e.to_string(),
        };
        config.validate().map_err(invalid)?;
        let template = config.load_template().map_err(invalid)?;
        let auth: Arc<dyn Policy> = Arc::new(credential::BearerPolicy::new(credential, config.scope()));
        let options = ClientOptions { retry: RetryOptions::none(), per_try_policies: vec![auth], ..Default::default() };
        let pipeline =
            Pipeline::new(Some("spillway"), Some(env!("CARGO_PKG_VERSION")), options, Vec::new(), Vec::new(), None);
        let body_options = FleetBodyOptions {
            compute_api_version: config.api_versions.compute.clone(),
            platform_fault_domain_count: config.platform_fault_domain_count,
            template,
            agent: None,
        };
        Ok(AzureCloud {
            config,
            catalog,
            pipeline,
            body_options,
            spot_eviction_rate: 0.05,
            operation_timeout: Duration::from_secs(1800),
            restrictions_cache: Mutex::new(HashMap::new()),
            clock: Arc::new(SystemClock),
            vm_counts: Mutex::new(HashMap::new()),
            vm_reads: AtomicU64::new(0),
            spot_signals: Mutex::new(None),
            signal_calls: AtomicU64::new(0),
        })
    }

    /// Uses `clock` for the VM-read interval (the wall clock by default): the scheduler's clock,
    /// so a virtual-time run reads VMs as often, in its time, as a real one.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> AzureCloud {
        self.clock = clock;
        self
    }

    /// How many VM lists this client has read.
    pub fn vm_reads(&self) -> u64 {
        self.vm_reads.load(Ordering::Relaxed)
    }

    /// A fleet's VMs as Azure lists them (fleet api-version 2026-08-01 and later), all pages.
    pub async fn fleet_virtual_machines(&self, name: &str) -> Result<Vec<models::VirtualMachine>, CloudError> {
        if !self.config.api_versions.fleet_lists_vms() {
            return Err(CloudError::Permanent {
                code: "UnsupportedApiVersion".into(),
                message: format!(
                    "fleet api-version {} does not list a fleet's VMs (2026-08-01 and later do)",
                    self.config.api_versions.fleet
                ),
            });
        }
        let url = self.fleet_url(name, "/virtualMachines")?;
        let ctx = ErrorContext { resource: Some(format!("fleet {name}")), ..ErrorContext::default() };
        self.vm_reads.fetch_add(1, Ordering::Relaxed);
        self.get_all(url, &ctx).await
    }

    /// Running VMs of a fleet: from its VM list, read again only once `vm_read_interval_secs` has
    /// passed since the last read (at most one extra ARM read per fleet per interval). `None` when
    /// the api-version lists no VMs or the read failed (the loop then keeps what it knew).
    async fn vm_counts(&self, name: &str, priority: crate::model::Priority) -> Option<VmCounts> {
        if !self.config.api_versions.fleet_lists_vms() {
            return None;
        }
        let now = self.clock.now_ms();
        let interval_ms = (self.config.vm_read_interval_secs * 1000.0) as i64;
        if let Some((at, counts)) = self.vm_counts.lock().await.get(name)
            && now - at < interval_ms
        {
            return Some(*counts);
        }
        let vms = match self.fleet_virtual_machines(name).await {
            Ok(v) => v,
            Err(e) => {
                tracing::debug!(fleet = name, error = %e, "VM list not read; VM counts unknown this round");
                return None;
            }
        };
        let counts = count_vms(&vms, priority);
        self.vm_counts.lock().await.insert(name.to_string(), (now, counts));
        Some(counts)
    }

    /// Deletes a fleet and follows the deletion to its end (`Location` polled, waiting
    /// `Retry-After` between polls).
    pub async fn delete_fleet_and_wait(&self, name: &str) -> Result<(), CloudError> {
        let deadline = Instant::now() + self.operation_timeout;
        let Some((monitor, mut wait)) = self.begin_delete(name).await? else { return Ok(()) };
        let ctx = ErrorContext { resource: Some(format!("fleet {name}")), ..ErrorContext::default() };
        loop {
            self.sleep_until_deadline(wait, deadline, name).await?;
            let poll = match self.call(Method::Get, &monitor, None, &[200, 201, 202, 204], &ctx).await {
                Err(CloudError::NotFound { .. }) => return Ok(()),
                other => other?,
            };
            wait = retry_after(&poll.headers).unwrap_or(DEFAULT_POLL);
            let state: Option<OperationStatusResult> = serde_json::from_slice(&poll.body).ok();
            match state {
                Some(s) if s.status == OperationState::Succeeded => return Ok(()),
                Some(s) if s.status.is_final() => {
                    let error = s
                        .error
                        .unwrap_or_else(|| ErrorDetail::new(s.status.as_str(), format!("deleting fleet {name}")));
                    return Err(classify::classify(None, None, &error, &ctx));
                }
                Some(_) => {}
                None if poll.status == 202 => {}
                None => return Ok(()),
            }
        }
    }

    /// Sends the DELETE: `None` when the fleet is gone already, else the monitor to poll and how
    /// long to wait first.
    async fn begin_delete(&self, name: &str) -> Result<Option<(Url, Duration)>, CloudError> {
        let url = self.fleet_url(name, "")?;
        let ctx = ErrorContext { resource: Some(format!("fleet {name}")), ..ErrorContext::default() };
        self.vm_counts.lock().await.remove(name);
        let reply = match self.call(Method::Delete, &url, None, &[200, 202, 204], &ctx).await {
            Err(CloudError::NotFound { .. }) => return Ok(None),
            other => other?,
        };
        if reply.status != 202 {
            return Ok(None);
        }
        let Some(link) = header(&reply.headers, "location").or_else(|| header(&reply.headers, "azure-asyncoperation"))
        else {
            return Ok(None);
        };
        Ok(Some((self.server_url(&link)?, retry_after(&reply.headers).unwrap_or(DEFAULT_POLL))))
    }

    /// Sets the expected spot evictions per VM-hour used for spot offers with no published
    /// eviction-rate band (default 0.05, the top of Azure's lowest band, 0–5 % per hour).
    pub fn with_spot_eviction_rate(mut self, rate: f64) -> AzureCloud {
        self.spot_eviction_rate = if rate.is_finite() && rate >= 0.0 { rate } else { 0.05 };
        self
    }

    /// Makes every fleet's VMs run the node agent: its settings (with the attempt's credential) go
    /// into `osProfile.customData` (see `crate::agents::bootstrap`).
    pub fn with_agent_bootstrap(mut self, bootstrap: crate::agents::AgentBootstrap) -> AzureCloud {
        self.body_options.agent = Some(bootstrap);
        self
    }

    /// Sets how long [`AzureCloud::create_fleet_and_wait`] and deletions follow an operation
    /// (default 30 min).
    pub fn with_operation_timeout(mut self, timeout: Duration) -> AzureCloud {
        self.operation_timeout = timeout;
        self
    }

    /// The configuration in use.
    pub fn config(&self) -> &AzureConfig {
        &self.config
    }

    /// The PUT body this client sends for a request.
    pub fn fleet_body(&self, request: &FleetRequest) -> Result<models::Fleet, CloudError> {
        fleet_body::build_fleet(request, &self.body_options)
    }

    /// Creates (or updates) a fleet and follows the operation to its end, waiting `Retry-After`
    /// between polls; returns the fleet as it then is.
    pub async fn create_fleet_and_wait(&self, request: &FleetRequest) -> Result<Fleet, CloudError> {
        let deadline = Instant::now() + self.operation_timeout;
        let op = self.begin_create_fleet(request).await?;
        let mut wait = Duration::from_millis(op.retry_after_ms);
        // Without a status URL the fleet's own state is read at once, then after each wait.
        let mut first = op.status_url.is_none();
        loop {
            if !first {
                self.sleep_until_deadline(wait, deadline, &request.name).await?;
            }
            first = false;
            match self.poll_operation(&op).await? {
                OperationStatus::Succeeded => return self.get_fleet(&request.name).await,
                OperationStatus::Failed(e) => return Err(e),
                OperationStatus::InProgress { retry_after_ms } => wait = Duration::from_millis(retry_after_ms),
            }
        }
    }

    async fn sleep_until_deadline(&self, wait: Duration, deadline: Instant, name: &str) -> Result<(), CloudError> {
        if Instant::now() + wait > deadline {
            return Err(CloudError::Transient {
                message: format!("fleet {name}: operation not finished after {:?}", self.operation_timeout),
            });
        }
        tokio::time::sleep(wait).await;
        Ok(())
    }

    fn fleets_url(&self) -> String {
        format!(
            "{}/subscriptions/{}/resourceGroups/{}/providers/Microsoft.AzureFleet/fleets",
            self.config.endpoint(),
            self.config.subscription_id,
            self.config.resource_group
        )
    }

    fn fleet_url(&self, name: &str, suffix: &str) -> Result<Url, CloudError> {
        if name.is_empty() || name.contains(['/', '?', '#', '%']) {
            return Err(CloudError::Permanent {
                code: "InvalidFleetName".into(),
                message: format!("fleet name {name:?}"),
            });
        }
        self.url(&format!("{}/{name}{suffix}", self.fleets_url()), &self.config.api_versions.fleet, &[])
    }

    fn url(&self, base: &str, api_version: &str, query: &[(&str, &str)]) -> Result<Url, CloudError> {
        let mut url = Url::parse(base)
            .map_err(|e| CloudError::Permanent { code: "InvalidUrl".into(), message: format!("{base}: {e}") })?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("api-version", api_version);
            for (k, v) in query {
                q.append_pair(k, v);
            }
        }
        Ok(url)
    }

    /// A URL the server handed us (`nextLink`, `Azure-AsyncOperation`, `Location`). It must point
    /// at the configured endpoint: the bearer token goes nowhere else.
    fn server_url(&self, link: &str) -> Result<Url, CloudError> {
        let url = Url::parse(link).map_err(|e| CloudError::Permanent {
            code: "InvalidUrl".into(),
            message: format!("server sent an unusable URL {link:?}: {e}"),
        })?;
        let ours = Url::parse(self.config.endpoint()).map_err(|e| CloudError::Permanent {
            code: "InvalidConfiguration".into(),
            message: format!("azure.management_endpoint: {e}"),
        })?;
        if url.scheme() != ours.scheme()
            || url.host_str() != ours.host_str()
            || url.port_or_known_default() != ours.port_or_known_default()
        {
            return Err(CloudError::Permanent {
                code: "UntrustedUrl".into(),
                message: format!("server sent a URL outside {}: {link}", self.config.endpoint()),
            });
        }
        Ok(url)
    }

    /// One request, no retries: transport failures and timeouts are `Transient`.
    async fn send_once(&self, method: Method, url: &Url, body: Option<&[u8]>) -> Result<Reply, CloudError> {
        let mut request = Request::new(url.clone(), method);
        request.insert_header("accept", "application/json");
        if let Some(b) = body {
            request.insert_header("content-type", "application/json");
            request.set_body(b.to_vec());
        }
        let options = PipelineSendOptions { skip_checks: true, ..Default::default() };
        let ctx = Context::new();
        let send = async {
            let raw = self.pipeline.send(&ctx, &mut request, Some(options)).await?;
            let (status, headers, body) = raw.deconstruct();
            azure_core::Result::Ok(Reply { status: u16::from(status), headers, body: body.to_vec() })
        };
        let reply = match tokio::time::timeout(self.config.request_timeout(), send).await {
            Err(_) => {
                return Err(CloudError::Transient {
                    message: format!("{method} {}: no answer within {:?}", url.path(), self.config.request_timeout()),
                });
            }
            Ok(Err(e)) => return Err(transport_error(e, &method, url)),
            Ok(Ok(r)) => r,
        };
        log_rate_limits(&reply.headers, &method, url, reply.status);
        Ok(reply)
    }

    /// A request with retries; a status outside `ok` is classified with `ctx`.
    async fn call(
        &self,
        method: Method,
        url: &Url,
        body: Option<&[u8]>,
        ok: &[u16],
        ctx: &ErrorContext,
    ) -> Result<Reply, CloudError> {
        let what = format!("{method} {}", url.path());
        retry::with_retries(&self.config.retry, &what, || async {
            let reply = self.send_once(method, url, body).await?;
            if ok.contains(&reply.status) {
                return Ok(reply);
            }
            Err(classify::classify_response(reply.status, retry_after(&reply.headers), &reply.body, ctx))
        })
        .await
    }

    async fn get_json<T: DeserializeOwned>(&self, url: &Url, ctx: &ErrorContext) -> Result<T, CloudError> {
        let reply = self.call(Method::Get, url, None, &[200], ctx).await?;
        parse_body(&reply.body, url)
    }

    /// Every item of a paged list, following `nextLink`.
    async fn get_all<T: DeserializeOwned>(&self, first: Url, ctx: &ErrorContext) -> Result<Vec<T>, CloudError> {
        let mut out = Vec::new();
        let mut next = Some(first);
        let mut pages = 0u32;
        while let Some(url) = next.take() {
            pages += 1;
            if pages > 10_000 {
                return Err(CloudError::Transient { message: format!("{}: more than 10000 pages", url.path()) });
            }
            let page: Page<T> = self.get_json(&url, ctx).await?;
            out.extend(page.value);
            if let Some(link) = page.next_link.filter(|l| !l.is_empty()) {
                next = Some(self.server_url(&link)?);
            }
        }
        Ok(out)
    }

    /// One fleet as Azure returns it (the whole resource, not the scheduler's summary).
    pub async fn get_fleet_resource(&self, name: &str) -> Result<models::Fleet, CloudError> {
        self.get_wire_fleet(name).await
    }

    async fn get_wire_fleet(&self, name: &str) -> Result<models::Fleet, CloudError> {
        let ctx = ErrorContext { resource: Some(format!("fleet {name}")), ..ErrorContext::default() };
        self.get_json(&self.fleet_url(name, "")?, &ctx).await
    }

    /// Error context from a fleet that exists, for classifying failures reported without one.
    async fn context_of(&self, name: &str) -> ErrorContext {
        let mut ctx = ErrorContext { resource: Some(format!("fleet {name}")), ..ErrorContext::default() };
        if let Ok(f) = self.get_wire_fleet(name).await
            && let Ok(f) = to_fleet(f, name)
        {
            ctx.region = Some(f.region);
            ctx.sizes = f.sizes.to_vec();
            ctx.priority = Some(f.priority);
        }
        ctx
    }

    async fn fetch_restrictions(&self, region: &str) -> Result<Vec<SizeRestriction>, CloudError> {
        let base = format!(
            "{}/subscriptions/{}/providers/Microsoft.Compute/skus",
            self.config.endpoint(),
            self.config.subscription_id
        );
        let filter = format!("location eq '{region}'");
        let url = self.url(&base, &self.config.api_versions.skus, &[("$filter", &filter)])?;
        let ctx = ErrorContext {
            region: Some(region.to_string()),
            resource: Some(format!("SKUs of {region}")),
            ..ErrorContext::default()
        };
        let skus: Vec<ResourceSku> = self.get_all(url, &ctx).await?;
        Ok(restrictions_from_skus(&skus, region, |size| self.catalog.size(size).is_some()))
    }

    async fn cached_restrictions(&self, region: &str) -> Result<Vec<SizeRestriction>, CloudError> {
        if let Some((at, r)) = self.restrictions_cache.lock().await.get(region)
            && at.elapsed() < SKU_CACHE
        {
            return Ok(r.clone());
        }
        let fresh = self.fetch_restrictions(region).await?;
        self.restrictions_cache.lock().await.insert(region.to_string(), (Instant::now(), fresh.clone()));
        Ok(fresh)
    }

    fn regions(&self) -> Vec<String> {
        if self.config.regions.is_empty() { self.catalog.regions() } else { self.config.regions.clone() }
    }
}

impl AzureCloud {
    /// Where an operation is, read from its status link (or the fleet's own state without one).
    async fn poll(&self, operation: &FleetOperation) -> Result<OperationStatus, CloudError> {
        let name = &operation.fleet_name;
        let Some(link) = &operation.status_url else {
            let fleet = self.get_fleet(name).await?;
            return Ok(match fleet.provisioning_state {
                ProvisioningState::Succeeded => OperationStatus::Succeeded,
                ProvisioningState::Failed | ProvisioningState::Canceled => {
                    OperationStatus::Failed(self.failure_from_scale_sets(name).await)
                }
                _ => OperationStatus::InProgress { retry_after_ms: DEFAULT_POLL.as_millis() as u64 },
            });
        };
        let url = self.server_url(link)?;
        let ctx = ErrorContext { resource: Some(format!("operation of fleet {name}")), ..ErrorContext::default() };
        let reply = self.call(Method::Get, &url, None, &[200, 201, 202, 204], &ctx).await?;
        let wait = retry_after(&reply.headers).unwrap_or(DEFAULT_POLL).as_millis() as u64;
        let parsed: Option<OperationStatusResult> =
            if reply.body.is_empty() { None } else { serde_json::from_slice(&reply.body).ok() };
        let state = match parsed {
            Some(s) => s,
            // A `Location` monitor: 202 while running, 200/201/204 when done.
            None if reply.status == 202 => return Ok(OperationStatus::InProgress { retry_after_ms: wait }),
            None => return Ok(OperationStatus::Succeeded),
        };
        Ok(match state.status {
            OperationState::Succeeded => OperationStatus::Succeeded,
            OperationState::Failed | OperationState::Canceled => {
                let ctx = self.context_of(name).await;
                let error = state.error.unwrap_or_else(|| {
                    ErrorDetail::new(
                        state.status.as_str(),
                        format!("the operation on fleet {name} ended {}", state.status),
                    )
                });
                let cause = classify::classify(None, None, &error, &ctx);
                OperationStatus::Failed(cause)
            }
            _ => OperationStatus::InProgress { retry_after_ms: wait },
        })
    }
}

#[async_trait::async_trait]
impl Cloud for AzureCloud {
    async fn offers(&self) -> Result<Vec<Offer>, CloudError> {
        let signals = self.spot_signals().await;
        let mut out = Vec::new();
        for region in self.regions() {
            let restricted = self.cached_restrictions(&region).await?;
            for size in self.catalog.sizes() {
                let Some(row) = self.catalog.price(&size.name, &region) else { continue };
                // Only whole-region restrictions remove an offer: a zonal one leaves other zones.
                let blocked = restricted.iter().any(|r| r.zones.is_empty() && r.size.eq_ignore_ascii_case(&size.name));
                if blocked {
                    continue;
                }
                for priority in [Priority::Regular, Priority::Spot] {
                    let (band, score) = if priority == Priority::Spot {
                        (signals.band(&region, &size.name), signals.score(&region, &size.name))
                    } else {
                        (None, None)
                    };
                    out.push(Offer {
                        region: region.clone(),
                        size: size.name.clone(),
                        priority,
                        price_per_hour: row.for_priority(priority),
                        capacity_vms: None,
                        eviction_rate_per_hour: if priority == Priority::Spot {
                            spot_eviction_prior(band, score, self.spot_eviction_rate)
                        } else {
                            0.0
                        },
                        eviction_band: band,
                        placement_score: score,
                    });
                }
            }
        }
        Ok(out)
    }

    async fn quota(&self, region: &str) -> Result<Vec<Quota>, CloudError> {
        let base = format!(
            "{}/subscriptions/{}/providers/Microsoft.Compute/locations/{region}/usages",
            self.config.endpoint(),
            self.config.subscription_id
        );
        let url = self.url(&base, &self.config.api_versions.usages, &[])?;
        let ctx = ErrorContext {
            region: Some(region.to_string()),
            resource: Some(format!("usages of {region}")),
            ..ErrorContext::default()
        };
        let usages: Vec<Usage> = self.get_all(url, &ctx).await?;
        Ok(quota_from_usages(&usages, region))
    }

    async fn restrictions(&self, region: &str) -> Result<Vec<SizeRestriction>, CloudError> {
        let fresh = self.fetch_restrictions(region).await?;
        self.restrictions_cache.lock().await.insert(region.to_string(), (Instant::now(), fresh.clone()));
        Ok(fresh)
    }

    async fn begin_create_fleet(&self, request: &FleetRequest) -> Result<FleetOperation, CloudError> {
        let body = self.fleet_body(request)?;
        let bytes = serde_json::to_vec(&body).map_err(|e| CloudError::Permanent {
            code: "InvalidFleetRequest".into(),
            message: format!("cannot serialise the fleet body: {e}"),
        })?;
        let ctx = ErrorContext {
            region: Some(request.region.clone()),
            sizes: request.sizes.clone(),
            priority: Some(request.priority),
            zones: request.zones.clone(),
            resource: Some(format!("fleet {}", request.name)),
        };
        let url = self.fleet_url(&request.name, "")?;
        let reply = self.call(Method::Put, &url, Some(&bytes), &[200, 201, 202], &ctx).await?;
        let retry_after_ms = retry_after(&reply.headers).unwrap_or(DEFAULT_POLL).as_millis() as u64;
        let status_url = header(&reply.headers, "azure-asyncoperation").or_else(|| header(&reply.headers, "location"));
        match status_url {
            Some(link) => {
                self.server_url(&link)?;
                Ok(FleetOperation { fleet_name: request.name.clone(), status_url: Some(link), retry_after_ms })
            }
            // No operation to follow: the fleet's own state says where it is (`poll_operation`
            // reads it).
            None => Ok(FleetOperation { fleet_name: request.name.clone(), status_url: None, retry_after_ms }),
        }
    }

    async fn begin_resize_fleet(&self, request: &FleetRequest) -> Result<FleetOperation, CloudError> {
        // A PUT on a name that no longer exists would create the fleet afresh: read it first. (The
        // 2024-11-01 definition offers no conditional PUT; a deletion racing this read is found by
        // the loop's reconciliation as a fleet no live attempt owns.)
        let current = to_fleet(self.get_wire_fleet(&request.name).await?, &request.name)?;
        if current.provisioning_state == ProvisioningState::Deleting {
            return Err(CloudError::NotFound { what: format!("fleet {} (being deleted)", request.name) });
        }
        self.begin_create_fleet(request).await
    }

    async fn poll_operation(&self, operation: &FleetOperation) -> Result<OperationStatus, CloudError> {
        let status = self.poll(operation).await;
        if matches!(status, Ok(OperationStatus::Succeeded | OperationStatus::Failed(_))) {
            // The fleet just changed (created, grown): VM counts read before are stale.
            self.vm_counts.lock().await.remove(&operation.fleet_name);
        }
        status
    }

    async fn get_fleet(&self, name: &str) -> Result<Fleet, CloudError> {
        let mut fleet = to_fleet(self.get_wire_fleet(name).await?, name)?;
        match fleet.provisioning_state {
            // No VM worth counting: the loop reads these states as "nothing runs".
            ProvisioningState::Failed | ProvisioningState::Canceled | ProvisioningState::Deleting => {
                fleet.running_vms = Some(0);
                if let Some(r) = &mut fleet.regular {
                    r.running_vms = Some(0);
                }
            }
            ProvisioningState::Creating => {}
            _ => {
                if let Some(c) = self.vm_counts(name, fleet.priority).await {
                    apply_counts(&mut fleet, c);
                }
            }
        }
        Ok(fleet)
    }

    /// Returns once Azure accepted the deletion (202): a round is not held up for the minutes a
    /// deletion takes; a fleet still listed later is deleted again by the loop's sweep.
    /// [`AzureCloud::delete_fleet_and_wait`] follows it to the end.
    async fn delete_fleet(&self, name: &str) -> Result<(), CloudError> {
        self.begin_delete(name).await.map(|_| ())
    }

    async fn list_fleets(&self) -> Result<Vec<Fleet>, CloudError> {
        let url = self.url(&self.fleets_url(), &self.config.api_versions.fleet, &[])?;
        let ctx = ErrorContext {
            resource: Some(format!("fleets of {}", self.config.resource_group)),
            ..ErrorContext::default()
        };
        let wire: Vec<models::Fleet> = self.get_all(url, &ctx).await?;
        // VM counts already read are reported; a listing reads no VM list.
        let counts = self.vm_counts.lock().await.clone();
        wire.into_iter()
            .map(|f| {
                let name = f.name.clone().unwrap_or_default();
                let mut fleet = to_fleet(f, &name)?;
                if let Some((_, c)) = counts.get(&fleet.name) {
                    apply_counts(&mut fleet, *c);
                }
                Ok(fleet)
            })
            .collect()
    }

    async fn fleet_scale_sets(&self, name: &str) -> Result<Vec<ScaleSet>, CloudError> {
        let url = self.fleet_url(name, "/virtualMachineScaleSets")?;
        let ctx = ErrorContext { resource: Some(format!("fleet {name}")), ..ErrorContext::default() };
        let wire: Vec<models::VirtualMachineScaleSet> = self.get_all(url, &ctx).await?;
        let ctx = if wire.iter().any(|s| s.error.is_some()) { self.context_of(name).await } else { ctx };
        Ok(wire
            .into_iter()
            .map(|s| ScaleSet {
                error: s.error.map(|e| classify::classify(None, None, &ErrorDetail::from(e), &ctx)),
                name: s.name,
                id: s.id,
                operation_status: s.operation_status,
            })
            .collect())
    }
}

impl AzureCloud {
    /// The cause of a failed fleet from its scale sets: the first failed one's error.
    async fn failure_from_scale_sets(&self, name: &str) -> CloudError {
        match self.fleet_scale_sets(name).await {
            Ok(sets) => sets.into_iter().find_map(|s| s.error).unwrap_or_else(|| CloudError::Permanent {
                code: "FleetFailed".into(),
                message: format!("fleet {name} failed without a scale-set error"),
            }),
            Err(e) => e,
        }
    }
}

/// Running VMs from a fleet's VM list: `Succeeded` ones per priority (a VM without a priority counts
/// for the fleet's).
pub fn count_vms(vms: &[models::VirtualMachine], fleet_priority: crate::model::Priority) -> VmCounts {
    use models::VmOperationStatus;
    let mut c = VmCounts::default();
    for vm in vms {
        match vm.operation_status {
            VmOperationStatus::Succeeded => {
                let spot = match vm.priority.as_deref() {
                    Some(p) => p.eq_ignore_ascii_case("spot") || p.eq_ignore_ascii_case("low"),
                    None => fleet_priority == Priority::Spot,
                };
                if spot {
                    c.spot += 1;
                } else {
                    c.regular += 1;
                }
            }
            VmOperationStatus::Failed => c.failed += 1,
            _ => {}
        }
    }
    c
}

fn apply_counts(fleet: &mut Fleet, c: VmCounts) {
    fleet.running_vms = Some(match fleet.priority {
        Priority::Spot => c.spot,
        Priority::Regular => c.regular,
    });
    if let Some(r) = &mut fleet.regular {
        r.running_vms = Some(c.regular);
    }
}

/// Wire fleet → the scheduler's view. The priority is the profile with capacity (spot when both:
/// a mixed fleet, whose regular profile is then [`Fleet::regular`]).
fn to_fleet(f: models::Fleet, name: &str) -> Result<Fleet, CloudError> {
    let props = f.properties.unwrap_or_default();
    let spot_cap = props.spot_priority_profile.as_ref().and_then(|p| p.capacity).unwrap_or(0);
    let regular_cap = props.regular_priority_profile.as_ref().and_then(|p| p.capacity).unwrap_or(0);
    let regular = (spot_cap > 0 && regular_cap > 0).then(|| {
        let p = props.regular_priority_profile.clone().unwrap_or_default();
        FleetPartStatus { capacity_vms: regular_cap, min_capacity_vms: p.min_capacity.unwrap_or(0), running_vms: None }
    });
    let (priority, capacity, min) = if spot_cap > 0 || props.regular_priority_profile.is_none() {
        let p = props.spot_priority_profile.clone().unwrap_or_default();
        (Priority::Spot, p.capacity.unwrap_or(0), p.min_capacity.unwrap_or(0))
    } else {
        let p = props.regular_priority_profile.clone().unwrap_or_default();
        (Priority::Regular, p.capacity.unwrap_or(0), p.min_capacity.unwrap_or(0))
    };
    let mut sizes: Vec<(u32, usize, String)> =
        props.vm_sizes_profile.into_iter().enumerate().map(|(i, s)| (s.rank.unwrap_or(u32::MAX), i, s.name)).collect();
    sizes.sort();
    Ok(Fleet {
        name: f.name.unwrap_or_else(|| name.to_string()),
        region: f.location,
        priority,
        sizes: sizes.into_iter().map(|(_, _, n)| n).collect(),
        capacity_vms: capacity,
        min_capacity_vms: min,
        provisioning_state: props.provisioning_state.unwrap_or_else(|| ProvisioningState::Other("Unknown".into())),
        tags: Arc::new(f.tags),
        running_vms: None,
        regular,
    })
}

/// Usages → vCPU quota pools: `cores`, `lowPriorityCores` and the `…Family` rows; the rest
/// (availability sets, disks, scale sets) are not vCPU pools.
pub fn quota_from_usages(usages: &[Usage], region: &str) -> Vec<Quota> {
    usages
        .iter()
        .filter_map(|u| {
            let pool = QuotaPool::parse(&u.name.value);
            let is_vcpu_pool = match &pool {
                QuotaPool::Cores | QuotaPool::LowPriorityCores => true,
                QuotaPool::Family(_) => pool.key().ends_with("family"),
            };
            is_vcpu_pool.then(|| Quota {
                region: region.to_string(),
                pool,
                limit: u64::try_from(u.limit).unwrap_or(0),
                usage: u64::try_from(u.current_value).unwrap_or(0),
            })
        })
        .collect()
}

/// SKU restrictions in one region for sizes `keep` accepts: a `Location` restriction covering the
/// region blocks the whole region; a `Zone` restriction blocks its zones.
pub fn restrictions_from_skus(skus: &[ResourceSku], region: &str, keep: impl Fn(&str) -> bool) -> Vec<SizeRestriction> {
    let mut out = Vec::new();
    for sku in skus {
        if sku.resource_type.as_deref().is_some_and(|t| !t.eq_ignore_ascii_case("virtualMachines")) || !keep(&sku.name)
        {
            continue;
        }
        for r in &sku.restrictions {
            let info = r.restriction_info.clone().unwrap_or_default();
            let in_region = info.locations.iter().chain(&r.values).any(|l| l.eq_ignore_ascii_case(region))
                || (info.locations.is_empty() && r.values.is_empty());
            let reason = r.reason_code.as_ref().map(|c| c.as_str().to_string()).unwrap_or_default();
            match &r.restriction_type {
                RestrictionType::Location if in_region => out.push(SizeRestriction {
                    region: region.to_string(),
                    size: sku.name.clone(),
                    zones: Vec::new(),
                    reason,
                }),
                RestrictionType::Zone if in_region || info.locations.is_empty() => {
                    let zones = if info.zones.is_empty() { r.values.clone() } else { info.zones.clone() };
                    if !zones.is_empty() {
                        out.push(SizeRestriction { region: region.to_string(), size: sku.name.clone(), zones, reason });
                    }
                }
                _ => {}
            }
        }
    }
    out
}

fn parse_body<T: DeserializeOwned>(body: &[u8], url: &Url) -> Result<T, CloudError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| CloudError::Transient {
        message: format!("{}: unreadable answer at {}: {}", url.path(), e.path(), e.inner()),
    })
}

fn header(headers: &Headers, name: &'static str) -> Option<String> {
    headers.get_optional_string(&HeaderName::from_static(name)).filter(|v| !v.is_empty())
}

/// `Retry-After` (seconds or HTTP date), or the millisecond variants Azure also sends.
fn retry_after(headers: &Headers) -> Option<Duration> {
    for ms in ["retry-after-ms", "x-ms-retry-after-ms"] {
        if let Some(v) = header(headers, ms).and_then(|v| v.trim().parse::<u64>().ok()) {
            return Some(Duration::from_millis(v));
        }
    }
    header(headers, "retry-after").and_then(|v| retry::parse_retry_after(&v))
}

fn log_rate_limits(headers: &Headers, method: &Method, url: &Url, status: u16) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    for (name, value) in headers.iter() {
        if name.as_str().starts_with("x-ms-ratelimit-remaining-") {
            tracing::debug!(%method, path = url.path(), status, header = name.as_str(), value = value.as_str(), "ARM rate limit");
        }
    }
}

fn transport_error(e: azure_core::Error, method: &Method, url: &Url) -> CloudError {
    use azure_core::error::ErrorKind;
    match e.kind() {
        ErrorKind::Credential => CloudError::Permanent {
            code: "CredentialUnavailable".into(),
            message: format!("no token for {method} {}: {e}", url.path()),
        },
        ErrorKind::DataConversion => {
            CloudError::Permanent { code: "InvalidRequest".into(), message: format!("{method} {}: {e}", url.path()) }
        }
        ErrorKind::Other if e.to_string().contains("refusing to send a bearer token") => {
            CloudError::Permanent { code: "InsecureEndpoint".into(), message: e.to_string() }
        }
        _ => CloudError::Transient { message: format!("{method} {}: {e}", url.path()) },
    }
}

#[cfg(test)]
mod tests {
    use super::models::{ResourceSkuRestriction, ResourceSkuRestrictionInfo, RestrictionReasonCode, UsageName};
    use super::*;

    #[test]
    fn usages_keep_only_vcpu_pools() {
        let u = |name: &str, cur: i64, lim: i64| Usage {
            unit: "Count".into(),
            current_value: cur,
            limit: lim,
            name: UsageName { value: name.into(), localized_value: None },
        };
        let q = quota_from_usages(
            &[
                u("cores", 10, 100),
                u("lowPriorityCores", 0, 48),
                u("standardNCADSA100v4Family", 24, 96),
                u("availabilitySets", 1, 2500),
                u("virtualMachines", 3, 25000),
                u("Standard NCASv3_T4 Family", 0, -1),
            ],
            "eastus",
        );
        let pools: Vec<String> = q.iter().map(|q| q.pool.key()).collect();
        assert_eq!(pools, ["cores", "lowprioritycores", "standardncadsa100v4family", "standardncasv3_t4family"]);
        assert_eq!(q[2].free(), 72);
        assert_eq!(q[3].limit, 0, "a negative limit is no quota, not a wrap-around");
    }

    #[test]
    fn sku_restrictions_by_scope() {
        let restriction = |t: RestrictionType, values: &[&str], zones: &[&str], reason: RestrictionReasonCode| {
            ResourceSkuRestriction {
                restriction_type: t,
                values: values.iter().map(|s| s.to_string()).collect(),
                restriction_info: Some(ResourceSkuRestrictionInfo {
                    locations: vec!["eastus".into()],
                    zones: zones.iter().map(|s| s.to_string()).collect(),
                }),
                reason_code: Some(reason),
            }
        };
        let skus = vec![
            ResourceSku {
                resource_type: Some("virtualMachines".into()),
                name: "Standard_ND96asr_v4".into(),
                restrictions: vec![restriction(
                    RestrictionType::Location,
                    &["eastus"],
                    &[],
                    RestrictionReasonCode::NotAvailableForSubscription,
                )],
                ..ResourceSku::default()
            },
            ResourceSku {
                resource_type: Some("virtualMachines".into()),
                name: "Standard_NC24ads_A100_v4".into(),
                restrictions: vec![restriction(
                    RestrictionType::Zone,
                    &["eastus"],
                    &["3"],
                    RestrictionReasonCode::Other("NewReason".into()),
                )],
                ..ResourceSku::default()
            },
            ResourceSku { resource_type: Some("disks".into()), name: "Premium_LRS".into(), ..ResourceSku::default() },
        ];
        let r = restrictions_from_skus(&skus, "eastus", |_| true);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].size, "Standard_ND96asr_v4");
        assert!(r[0].zones.is_empty(), "whole region");
        assert_eq!(r[0].reason, "NotAvailableForSubscription");
        assert_eq!(r[1].zones, ["3"]);
        assert_eq!(r[1].reason, "NewReason");
        assert!(restrictions_from_skus(&skus, "eastus", |s| s != "Standard_ND96asr_v4").len() == 1);
        assert!(restrictions_from_skus(&skus, "westus", |_| true).is_empty(), "restricted elsewhere only");
    }
}
