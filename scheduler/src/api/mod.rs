//! The HTTP API (axum, JSON): jobs, capacity, the plan preview, live events, metrics, tokens.
//!
//! ```text
//! POST   /v1/jobs                 submit (201 once durable; Idempotency-Key → same job, 200)
//! GET    /v1/jobs[?state=&tenant=&limit=&cursor=]   newest first, paged back by `next`
//! GET    /v1/jobs/{id}            job, placement, attempts, events, cost, pending reasons
//! DELETE /v1/jobs/{id}            cancel
//! POST   /v1/jobs/{id}/complete   mark a running job's work done
//! POST   /v1/pipelines            submit a pipeline: jobs with depends_on (201 once durable)
//! GET    /v1/pipelines            pipelines, oldest first, with their jobs' states
//! GET    /v1/pipelines/{id}       a pipeline: state, jobs [{name, id, state, depends_on}]
//! DELETE /v1/pipelines/{id}       cancel every job of it that has not ended
//! GET    /v1/jobs/{id}/logs[?attempt=&rank=&from=&limit=&follow=]   output; SSE with follow=true
//! GET    /v1/capacity             quota pools, blocked offers, unhealthy regions
//! GET    /v1/plan                 what the solver would do now
//! GET    /v1/advice[?max=]        which quota increases would place waiting work, ready to file
//! POST   /v1/advice/requests      file one of them with Azure: 202, driven to its answer (admin)
//! GET    /v1/advice/requests[/ID] the requests filed and how Azure answered (unbound tokens)
//! GET    /v1/events[?from=&job=&kinds=]   server-sent events, resumable (Last-Event-ID)
//! GET    /v1/spend[?hours=&tenant=]       spend per tenant and region, budgets, spend over time
//! PUT    /v1/tenants/{name}/budget   set or clear a tenant's budget, USD (admin)
//! GET    /v1/whoami               the calling token's id, role and tenant
//! POST   /v1/tokens, GET /v1/tokens, DELETE /v1/tokens/{id}   (admin)
//! GET    /metrics                 Prometheus (text 0.0.4, or OpenMetrics when asked for)
//! GET    /openapi.json            this list, generated from the handlers
//! GET    /healthz, /readyz        no token needed
//! *      /v1/agent/...            the node agents' routes, with attempt credentials ([`agent_routes`])
//! GET    /                        the web dashboard ([`dashboard`]), no token needed for its files
//! ```
//!
//! Every other route needs `Authorization: Bearer <token>` ([`auth`]). Errors are always
//! `{"error", "problems": [{"field", "problem"}]}` ([`error`]); store failures are 503. Bodies are
//! the types of [`views`], never stored records; what a tenant-bound token sees is decided there.
//! [`server`] serves the router with a header-read timeout and a connection cap.
//! Requests are rate-limited per token ([`ratelimit`]) and counted by route and status
//! ([`metrics`]).
//!
//! Wiring it up:
//! ```no_run
//! # async fn run(jobs: scheduler::jobs::JobService, controller: std::sync::Arc<scheduler::control::Controller>,
//! #              registry: prometheus_client::registry::Registry) -> Result<(), Box<dyn std::error::Error>> {
//! use scheduler::api::{ApiConfig, ApiState, auth::TokenStore, router};
//! let tokens = TokenStore::open(jobs.store().clone())?;
//! let (_stop, shutdown) = tokio::sync::watch::channel(false);
//! let state = ApiState::new(jobs, controller, tokens, registry, ApiConfig::default(), shutdown);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:7878").await?;
//! axum::serve(listener, router(state)).await?;
//! # Ok(()) }
//! ```

pub mod advice;
pub mod agent_routes;
pub mod auth;
pub mod budget;
pub mod cursor;
pub mod dashboard;
pub mod error;
mod events;
pub mod exposition;
pub mod handlers;
mod logs;
pub mod metrics;
pub mod pipelines;
pub mod ratelimit;
pub mod server;
pub mod spend;
pub mod tenant_metrics;
pub mod views;
pub mod whoami;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::control::Controller;
use crate::jobs::JobService;

pub use auth::{Caller, Role, TokenStore};
pub use error::{ApiError, ErrorBody, Problem};
pub use metrics::HttpMetrics;
pub use ratelimit::{RateLimitConfig, RateLimiter};

/// Settings of the API.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// Largest request body accepted, bytes (a job spec is a few hundred).
    pub max_body_bytes: usize,
    /// Per-token rate limit.
    pub rate_limit: RateLimitConfig,
    /// How often the event log is read for new events (one reader serves every stream).
    #[serde(with = "millis")]
    pub event_poll: Duration,
    /// Event streams (`GET /v1/events`) open at once, at most; past it, 503 with Retry-After.
    pub max_event_streams: usize,
    /// Connections open at once, at most; past it, a new connection gets 503 and is closed.
    pub max_connections: usize,
    /// Longest a client may take to send a request's headers; past it, 408 and the connection
    /// is closed (milliseconds in the config file).
    #[serde(with = "millis")]
    pub header_read_timeout: Duration,
}

mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            max_body_bytes: 64 * 1024,
            rate_limit: RateLimitConfig::default(),
            event_poll: Duration::from_millis(200),
            max_event_streams: 256,
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
        }
    }
}

struct Inner {
    hub: Arc<events::EventHub>,
    cursors: cursor::Cursors,
    jobs: JobService,
    controller: Arc<Controller>,
    tokens: TokenStore,
    limiter: RateLimiter,
    registry: Registry,
    http: HttpMetrics,
    config: ApiConfig,
    shutdown: watch::Receiver<bool>,
    agents: Option<crate::agents::AgentService>,
    /// This server's place among the servers sharing the store (role, epoch), once set.
    replica: std::sync::OnceLock<crate::leader::Replica>,
    /// The management endpoint and subscription the advice's requests are filed under (a server
    /// driving Azure); `None`: Azure's public endpoint and a placeholder subscription.
    quota_filing: Option<(String, String)>,
    /// The quota requests `POST /v1/advice/requests` files with Azure (a server driving Azure);
    /// `None`: nothing to file with.
    quota_requests: Option<crate::quota_requests::QuotaRequests>,
}

/// Everything the handlers share. Cheap to clone.
#[derive(Clone)]
pub struct ApiState {
    inner: Arc<Inner>,
}

impl ApiState {
    /// The API over a job service and a controller. `registry` should already hold the
    /// controller's metrics ([`crate::control::ControlMetrics::register`]); the HTTP and
    /// per-tenant metrics are added to it here. Event streams end when `shutdown` turns true, so a
    /// graceful shutdown does not wait for them forever.
    pub fn new(
        jobs: JobService,
        controller: Arc<Controller>,
        tokens: TokenStore,
        mut registry: Registry,
        config: ApiConfig,
        shutdown: watch::Receiver<bool>,
    ) -> ApiState {
        let http = HttpMetrics::register(&mut registry);
        registry.register_collector(Box::new(tenant_metrics::TenantMetrics::new(jobs.store().clone())));
        let limiter = RateLimiter::new(config.rate_limit);
        let cursors = cursor::Cursors::open(jobs.store());
        let hub = Arc::new(events::EventHub::new(
            jobs.store().clone(),
            config.event_poll,
            config.max_event_streams,
            cursors.clone(),
            shutdown.clone(),
        ));
        ApiState {
            inner: Arc::new(Inner {
                hub,
                cursors,
                jobs,
                controller,
                tokens,
                limiter,
                registry,
                http,
                config,
                shutdown,
                agents: None,
                replica: std::sync::OnceLock::new(),
                quota_filing: None,
                quota_requests: None,
            }),
        }
    }

    /// Serves the node agents' routes and the jobs' logs from `agents`. Call before the state is
    /// cloned (it panics otherwise).
    pub fn with_agents(mut self, agents: crate::agents::AgentService) -> ApiState {
        Arc::get_mut(&mut self.inner).expect("with_agents is called before the state is shared").agents = Some(agents);
        self
    }

    /// Files the advice's quota requests (`GET /v1/advice`) under this management endpoint and
    /// subscription: the server's own Azure settings. Call before the state is cloned (it panics
    /// otherwise).
    pub fn with_quota_filing(mut self, endpoint: &str, subscription: &str) -> ApiState {
        Arc::get_mut(&mut self.inner).expect("with_quota_filing is called before the state is shared").quota_filing =
            Some((endpoint.to_string(), subscription.to_string()));
        self
    }

    /// Files the advice's quota requests (`POST /v1/advice/requests`) as `requests`: records
    /// driven to their end with the server's own Azure client by
    /// [`crate::quota_requests::drive_quota_requests`]. Call before the state is cloned (it panics
    /// otherwise).
    pub fn with_quota_requests(mut self, requests: crate::quota_requests::QuotaRequests) -> ApiState {
        Arc::get_mut(&mut self.inner)
            .expect("with_quota_requests is called before the state is shared")
            .quota_requests = Some(requests);
        self
    }

    /// The quota requests, when this server files them ([`ApiState::with_quota_requests`]).
    pub fn quota_requests(&self) -> Option<&crate::quota_requests::QuotaRequests> {
        self.inner.quota_requests.as_ref()
    }

    /// Where the advice's requests are filed, when set ([`ApiState::with_quota_filing`]).
    pub fn quota_filing(&self) -> Option<&(String, String)> {
        self.inner.quota_filing.as_ref()
    }

    /// The agent side, when this server runs agents.
    pub fn agents(&self) -> Option<&crate::agents::AgentService> {
        self.inner.agents.as_ref()
    }

    /// Tells `/healthz` and `/readyz` whether this server leads (see [`crate::leader`]). Without it
    /// the server reports itself as the only one, leading.
    pub fn set_replica(&self, replica: crate::leader::Replica) {
        let _ = self.inner.replica.set(replica);
    }

    /// This server's replica status, if set.
    pub fn replica(&self) -> Option<&crate::leader::Replica> {
        self.inner.replica.get()
    }

    /// The job service.
    pub fn jobs(&self) -> &JobService {
        &self.inner.jobs
    }

    /// The control loop.
    pub fn controller(&self) -> &Arc<Controller> {
        &self.inner.controller
    }

    /// The tokens.
    pub fn tokens(&self) -> &TokenStore {
        &self.inner.tokens
    }

    /// The rate limiter.
    pub fn limiter(&self) -> &RateLimiter {
        &self.inner.limiter
    }

    /// The metrics registry served at `/metrics`.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The settings.
    pub fn config(&self) -> &ApiConfig {
        &self.inner.config
    }

    fn shutdown(&self) -> watch::Receiver<bool> {
        self.inner.shutdown.clone()
    }

    /// Event streams open now.
    pub fn open_event_streams(&self) -> usize {
        self.inner.hub.open_streams()
    }

    fn hub(&self) -> &Arc<events::EventHub> {
        &self.inner.hub
    }

    fn cursors(&self) -> &cursor::Cursors {
        &self.inner.cursors
    }

    /// The scheduler's clock, as responses label it.
    fn clock_view(&self) -> views::ClockView {
        views::ClockView::of(self.inner.controller.clock().as_ref())
    }
}

/// Authenticates the bearer token, applies the rate limit and hands the [`Caller`] to the handler.
async fn authenticate(State(state): State<ApiState>, mut req: Request, next: Next) -> Response {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim().to_string());
    let Some(presented) = presented else {
        return challenge(ApiError::unauthorized(
            "missing bearer token: send `Authorization: Bearer <token>` (the admin token is in <data-dir>/admin.token)",
        ));
    };
    let Some(caller) = state.tokens().verify(&presented) else {
        return challenge(ApiError::unauthorized("unknown or revoked token"));
    };
    if let Err(wait) = state.limiter().check(&caller.token_id, Instant::now()) {
        return ApiError::rate_limited(wait).into_response();
    }
    req.extensions_mut().insert(caller);
    next.run(req).await
}

fn challenge(e: ApiError) -> Response {
    let mut resp = e.into_response();
    resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    resp
}

/// Routes that need a token.
fn protected_routes() -> OpenApiRouter<ApiState> {
    use handlers::*;
    OpenApiRouter::new()
        .routes(routes!(submit_job, list_jobs))
        .routes(routes!(get_job, cancel_job))
        .routes(routes!(complete_job))
        .routes(routes!(pipelines::submit_pipeline, pipelines::list_pipelines))
        .routes(routes!(pipelines::get_pipeline, pipelines::cancel_pipeline))
        .routes(routes!(logs::job_logs))
        .routes(routes!(capacity))
        .routes(routes!(plan))
        .routes(routes!(advice::advice))
        .routes(routes!(advice::file_request, advice::list_requests))
        .routes(routes!(advice::get_request))
        .routes(routes!(events))
        .routes(routes!(spend::spend))
        .routes(routes!(budget::set_budget))
        .routes(routes!(whoami::whoami))
        .routes(routes!(create_token, list_tokens))
        .routes(routes!(revoke_token))
        .routes(routes!(metrics))
        .routes(routes!(openapi_json))
}

/// Health checks: no token.
fn public_routes() -> OpenApiRouter<ApiState> {
    use handlers::*;
    OpenApiRouter::new().routes(routes!(healthz)).routes(routes!(readyz))
}

fn document(mut doc: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    doc.info.title = "spillway".into();
    doc.info.version = env!("CARGO_PKG_VERSION").into();
    doc.info.description = Some(
        "Capacity-aware multi-region GPU job scheduler for Azure. Every route but /healthz and /readyz needs \
         `Authorization: Bearer <token>`. Errors are {\"error\", \"problems\": [{\"field\", \"problem\"}]}."
            .into(),
    );
    let components = doc.components.get_or_insert_with(Default::default);
    components
        .add_security_scheme("bearer", SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()));
    doc.security = Some(vec![utoipa::openapi::security::SecurityRequirement::new("bearer", Vec::<String>::new())]);
    doc
}

/// Adds the answers the auth middleware gives before any handler runs (401 without a valid token,
/// 429 over the rate limit) to every operation of the protected routes: the handlers' annotations
/// cannot know them, and a document missing them misleads generated clients (found by the
/// schemathesis run, `fuzz/http_fuzz.sh`).
fn add_auth_responses(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
    let error = |description: &str| {
        RefOr::T(
            ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build(),
                )
                .build(),
        )
    };
    for item in doc.paths.paths.values_mut() {
        let ops = [&mut item.get, &mut item.put, &mut item.post, &mut item.delete, &mut item.patch];
        for op in ops.into_iter().flatten() {
            let responses = &mut op.responses.responses;
            responses.entry("401".into()).or_insert_with(|| error("Missing, unknown or revoked bearer token"));
            responses
                .entry("429".into())
                .or_insert_with(|| error("Rate limit exceeded for this token; see Retry-After"));
        }
    }
}

/// Schemas a client needs that no route names directly: the JSON inside each event-stream frame.
#[derive(utoipa::OpenApi)]
#[openapi(components(schemas(events::EventView, views::EventKind)))]
struct Extra;

/// The OpenAPI document of every route, generated from the handlers' annotations (the same
/// routers that serve the requests, so it cannot drift).
pub fn openapi() -> utoipa::openapi::OpenApi {
    use utoipa::OpenApi as _;
    let (_, mut doc) = protected_routes().split_for_parts();
    add_auth_responses(&mut doc);
    let (_, public) = public_routes().split_for_parts();
    doc.merge(public);
    doc.merge(Extra::openapi());
    let (_, agent) = agent_routes::routes().split_for_parts();
    doc.merge(agent);
    let mut doc = document(doc);
    doc.components.get_or_insert_with(Default::default).add_security_scheme(
        "agent_credential",
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some("An attempt's agent credential (`spwa.<job>.<attempt>.<mac>`), given to its VMs"))
                .build(),
        ),
    );
    doc
}

/// The whole API as an axum router.
pub fn router(state: ApiState) -> axum::Router {
    let protected = protected_routes().route_layer(middleware::from_fn_with_state(state.clone(), authenticate));
    let agent =
        agent_routes::routes().route_layer(middleware::from_fn_with_state(state.clone(), agent_routes::authenticate));
    let (router, _) = protected.merge(public_routes()).merge(agent).split_for_parts();
    let http = state.inner.http.clone();
    router
        .merge(dashboard::routes())
        .fallback(handlers::not_found)
        .method_not_allowed_fallback(handlers::method_not_allowed)
        .layer(middleware::from_fn_with_state(http, metrics::track))
        .layer(middleware::from_fn(dashboard::security_headers))
        .with_state(state)
}
