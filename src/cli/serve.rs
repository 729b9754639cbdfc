//! `spillway serve`: the HTTP API and the control loop over one data directory.
//!
//! Out of the box (no flags, no Azure account) it runs the simulated cloud of the bundled scenario
//! (`scenarios/serve-default.toml`, embedded) in real time × `--speedup`, with jobs completing by
//! themselves after their `duration_hours`. `--cloud azure` drives Azure for real.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use prometheus_client::registry::Registry;
use scheduler::agents::{AgentBootstrap, AgentConfig, AgentKeys, AgentMetrics, AgentService, AgentSettings};
use scheduler::api::{ApiConfig, ApiState, TokenStore, router};
use scheduler::clock::{Clock, ScaledClock, SystemClock};
use scheduler::cloud::azure::{AzureCloud, AzureConfig};
use scheduler::cloud::{Cloud, TAG_ATTEMPT, TAG_JOB};
use scheduler::control::{ControlConfig, ControlMetrics, Controller, DriverConfig};
use scheduler::jobs::JobService;
use scheduler::leader::{LeaderConfig, Replica, run_elections};
use serde::Deserialize;
use simulator::sim_cloud::vms::{AgentLauncher, VmRunner, VmRunnerConfig};
use simulator::{SimCloud, SimCloudConfig};
use state::{Store, StoreLocation};
use std::os::unix::fs::DirBuilderExt;

/// The scenario `serve` simulates when given none.
pub const DEFAULT_SCENARIO: &str = include_str!("../../scenarios/serve-default.toml");

/// Default listening address: loopback only (a non-loopback one needs TLS or an explicit flag).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

/// Default data directory.
pub const DEFAULT_DATA_DIR: &str = "spillway-data";

/// Setting that remembers the simulated clock across restarts, so simulated time never runs backwards.
const SIM_CLOCK_SETTING: &str = "serve.sim_clock_ms";

/// Which cloud to drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CloudKind {
    /// The simulated cloud (a scenario's `[cloud]`), in real time × speed-up.
    Sim,
    /// Azure Resource Manager (settings from `[azure]` in --config and `SPILLWAY_AZURE_*`).
    Azure,
}

/// Log line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Arguments of `spillway serve`. Flags win over the config file, which wins over the defaults.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Data directory (created 0700 if absent; an existing one must not be open to other users): the
    /// admin token file, and the sled store unless --store names another [default: ./spillway-data].
    #[arg(long, env = "SPILLWAY_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Where the state lives: `sled:DIR` (embedded, this server only) or `postgres://USER@HOST/DB`
    /// (shared by several servers, one of which leads; see README "Running several servers")
    /// [default: sled:<data-dir>].
    #[arg(long, env = "SPILLWAY_STORE")]
    pub store: Option<String>,
    /// Address to listen on; `127.0.0.1:0` picks a free port (printed on stdout) [default: 127.0.0.1:7878].
    #[arg(long)]
    pub listen: Option<String>,
    /// Which cloud to drive [default: sim].
    #[arg(long, value_enum)]
    pub cloud: Option<CloudKind>,
    /// Scenario file whose `[cloud]` the simulated cloud runs [default: the bundled one].
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// Simulated seconds per real second (simulated cloud only) [default: 60].
    #[arg(long)]
    pub speedup: Option<f64>,
    /// TOML config file: `[serve]`, `[api]`, `[azure]`.
    #[arg(long, env = "SPILLWAY_CONFIG")]
    pub config: Option<PathBuf>,
    /// Log format on stderr [default: text].
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Also submit a small stream of example jobs, to watch the scheduler work.
    #[arg(long)]
    pub demo: bool,
    /// Allow listening on a non-loopback address without TLS (tokens would cross the network in clear).
    #[arg(long)]
    pub allow_insecure_remote: bool,
    /// Requests per second per token (0 = unlimited) [default: 200].
    #[arg(long)]
    pub rate_limit: Option<f64>,
    /// Requests a token may burst [default: 400].
    #[arg(long)]
    pub rate_burst: Option<u32>,
    /// PEM certificate chain: serve HTTPS (rustls) instead of HTTP; needs --tls-key.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Hours a finished job, its attempts and events (and the event log) are kept after it ends
    /// (0 = for ever) [default: 168]. What tenants spent is kept regardless.
    #[arg(long)]
    pub retain_finished_hours: Option<f64>,
    /// Minutes a quota pool may keep waiting work out before a `quota_exhausted` event (0 = never
    /// record one) [default: 15]. Simulated minutes with the simulated cloud.
    #[arg(long)]
    pub quota_exhausted_minutes: Option<f64>,
    /// The URL the VMs' agents reach this server at [default: the listening URL; on Azure it must
    /// be one the VMs can reach].
    #[arg(long)]
    pub agent_url: Option<String>,
}

/// `[serve]` of the config file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServeFile {
    data_dir: Option<PathBuf>,
    store: Option<String>,
    listen: Option<String>,
    cloud: Option<CloudKind>,
    scenario: Option<PathBuf>,
    speedup: Option<f64>,
    log_format: Option<LogFormat>,
    demo: Option<bool>,
    allow_insecure_remote: Option<bool>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
}

/// The config file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    serve: ServeFile,
    #[serde(default)]
    api: Option<ApiConfig>,
    /// Read by `AzureConfig` itself.
    #[serde(default)]
    #[allow(dead_code)]
    azure: Option<toml::Table>,
    #[serde(default)]
    agent: AgentFile,
}

/// `[agent]` of the config file: how VMs run the node agent.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentFile {
    /// The URL the agents reach this server at.
    scheduler_url: Option<String>,
    /// Azure: the directory the VM profile mounts from storage, parent of every job's
    /// `SPILLWAY_CHECKPOINT_DIR` (default /var/lib/spillway/checkpoints, which is not shared).
    checkpoint_root: Option<String>,
    /// Azure: where the binary is on the VM image (default /usr/local/bin/spillway).
    binary_path: Option<String>,
    /// Azure: download the binary from here at first boot when the image lacks it.
    binary_url: Option<String>,
    /// Azure: the download's SHA-256 (hex).
    binary_sha256: Option<String>,
    /// A PEM file of the CA the agents trust for `scheduler_url` (with --tls-cert).
    ca_cert_file: Option<PathBuf>,
    /// Log bytes kept per rank and attempt (default 8 MiB).
    log_bytes_per_rank: Option<u64>,
    /// Seconds between heartbeats (default 5).
    heartbeat_interval_secs: Option<f64>,
    /// Seconds without a heartbeat after which a VM counts as lost (default 30).
    heartbeat_timeout_secs: Option<f64>,
    /// Seconds a running attempt may wait for its agents to register (default 900 on Azure, 60 in
    /// the simulated cloud).
    registration_timeout_secs: Option<f64>,
}

/// Everything `serve` runs with, after merging flags, file and defaults.
#[derive(Debug)]
struct Settings {
    data_dir: PathBuf,
    /// The store as given (`--store`, `serve.store`, `SPILLWAY_STORE`); sled in `data_dir` if none.
    /// Parsed when serving starts, so a bad one is a refused input (exit 1), not a usage error.
    store: Option<String>,
    listen: SocketAddr,
    cloud: CloudKind,
    scenario: Option<PathBuf>,
    speedup: f64,
    log_format: LogFormat,
    demo: bool,
    api: ApiConfig,
    config_path: Option<PathBuf>,
    /// Certificate chain and key files when serving HTTPS.
    tls: Option<(PathBuf, PathBuf)>,
    /// How long finished jobs are kept (`None`: for ever).
    retain_finished_ms: Option<i64>,
    /// How long a pool may keep work out before `quota_exhausted` (`None`: never).
    quota_exhausted_after_ms: Option<i64>,
    /// `[agent]`, with `--agent-url` over its `scheduler_url`.
    agent: AgentFile,
}

fn settings(args: ServeArgs) -> Result<Settings, String> {
    let file: FileConfig = match &args.config {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("cannot read config {}: {e}", p.display()))?;
            toml::from_str(&text).map_err(|e| format!("config {}: {e}", p.display()))?
        }
        None => FileConfig::default(),
    };
    let f = file.serve;
    let listen_text = args.listen.or(f.listen).unwrap_or_else(|| DEFAULT_LISTEN.to_string());
    let listen: SocketAddr = listen_text
        .parse()
        .map_err(|_| format!("--listen {listen_text:?} is not an address such as 127.0.0.1:7878"))?;
    let allow_remote = args.allow_insecure_remote || f.allow_insecure_remote.unwrap_or(false);
    let tls = match (args.tls_cert.or(f.tls_cert), args.tls_key.or(f.tls_key)) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        (Some(_), None) => return Err("--tls-cert needs --tls-key (serve.tls_key)".into()),
        (None, Some(_)) => return Err("--tls-key needs --tls-cert (serve.tls_cert)".into()),
    };
    if !listen.ip().is_loopback() && !allow_remote && tls.is_none() {
        return Err(format!(
            "refusing to listen on {listen}: not a loopback address and no TLS, so tokens would cross the network in \
             clear; pass --tls-cert and --tls-key, use 127.0.0.1, or put a TLS proxy in front and pass \
             --allow-insecure-remote"
        ));
    }
    let speedup = args.speedup.or(f.speedup).unwrap_or(60.0);
    if !speedup.is_finite() || speedup <= 0.0 || speedup > 1_000_000.0 {
        return Err(format!("--speedup {speedup} must be a number in (0, 1000000]"));
    }
    let mut api = file.api.unwrap_or_default();
    if let Some(r) = args.rate_limit {
        if !r.is_finite() || r < 0.0 {
            return Err(format!("--rate-limit {r} must be ≥ 0 (0 = unlimited)"));
        }
        api.rate_limit.per_second = r;
    }
    if let Some(b) = args.rate_burst {
        api.rate_limit.burst = b.max(1);
    }
    let retain_finished_ms = match args.retain_finished_hours {
        None => ControlConfig::default().retain_finished_ms,
        Some(h) if h.is_finite() && h == 0.0 => None,
        Some(h) if h.is_finite() && h > 0.0 => Some((h * 3_600_000.0).round() as i64),
        Some(h) => return Err(format!("--retain-finished-hours: expected hours ≥ 0 (0 keeps everything), got {h}")),
    };
    let quota_exhausted_after_ms = match args.quota_exhausted_minutes {
        None => ControlConfig::default().quota_exhausted_after_ms,
        Some(m) if m.is_finite() && m == 0.0 => None,
        Some(m) if m.is_finite() && m > 0.0 => Some((m * 60_000.0).round() as i64),
        Some(m) => {
            return Err(format!("--quota-exhausted-minutes: expected minutes ≥ 0 (0 records no event), got {m}"));
        }
    };
    let mut agent = file.agent;
    if let Some(url) = args.agent_url {
        agent.scheduler_url = Some(url);
    }
    if let Some(url) = &agent.scheduler_url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(format!("--agent-url (agent.scheduler_url) {url:?} must start with http:// or https://"));
    }
    if agent.heartbeat_interval_secs.is_some_and(|s| !(s.is_finite() && (0.1..=60.0).contains(&s))) {
        return Err("agent.heartbeat_interval_secs must be between 0.1 and 60".into());
    }
    let interval = agent.heartbeat_interval_secs.unwrap_or(5.0);
    if agent.heartbeat_timeout_secs.is_some_and(|s| !(s.is_finite() && s >= 2.0 * interval && s <= 3600.0)) {
        return Err(format!(
            "agent.heartbeat_timeout_secs must be between two heartbeat intervals ({}) and 3600",
            2.0 * interval
        ));
    }
    if agent.registration_timeout_secs.is_some_and(|s| !(s.is_finite() && (1.0..=86_400.0).contains(&s))) {
        return Err("agent.registration_timeout_secs must be between 1 and 86400".into());
    }
    let store = args.store.or(f.store);
    // A sled store given alone keeps the admin token beside it, as a data directory always has.
    let sled_dir = store.as_deref().and_then(|s| s.strip_prefix("sled:")).filter(|d| !d.is_empty()).map(PathBuf::from);
    let data_dir = args.data_dir.or(f.data_dir).or(sled_dir).unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
    Ok(Settings {
        agent,
        retain_finished_ms,
        quota_exhausted_after_ms,
        data_dir,
        store,
        listen,
        cloud: args.cloud.or(f.cloud).unwrap_or(CloudKind::Sim),
        scenario: args.scenario.or(f.scenario),
        speedup,
        log_format: args.log_format.or(f.log_format).unwrap_or(LogFormat::Text),
        demo: args.demo || f.demo.unwrap_or(false),
        api,
        config_path: args.config,
        tls,
    })
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("SPILLWAY_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Runs the server until Ctrl-C or SIGTERM.
pub fn run(catalog: &scheduler::Catalog, args: ServeArgs) -> ExitCode {
    let settings = match settings(args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(settings.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(serve(catalog.clone(), settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// The cloud to drive, the clock the scheduler reads, and the simulated cloud when it is one.
struct CloudSetup {
    cloud: Arc<dyn Cloud>,
    clock: Arc<dyn Clock>,
    simulated: bool,
    sim: Option<Arc<SimCloud>>,
    /// Azure's management endpoint and subscription, where the advice's requests are filed.
    filing: Option<(String, String)>,
    /// The Azure client, which also files them (`POST /v1/advice/requests`).
    azure: Option<Arc<AzureCloud>>,
}

/// Builds the cloud and the clock for the settings.
fn cloud_and_clock(
    settings: &Settings,
    catalog: &scheduler::Catalog,
    store: &Store,
    bootstrap: &AgentBootstrap,
) -> Result<CloudSetup, String> {
    match settings.cloud {
        CloudKind::Sim => {
            let config = match &settings.scenario {
                Some(p) => SimCloudConfig::from_scenario_file(p).map_err(|e| e.to_string())?,
                None => {
                    SimCloudConfig::from_scenario_str(DEFAULT_SCENARIO, "the bundled scenario (serve-default.toml)")
                        .map_err(|e| e.to_string())?
                }
            };
            let saved: Option<i64> = store.setting(SIM_CLOCK_SETTING).map_err(|e| e.to_string())?;
            let start = saved.unwrap_or(0).max(SystemClock.now_ms());
            let clock: Arc<dyn Clock> = Arc::new(ScaledClock::new(start, settings.speedup));
            let origin = settings
                .scenario
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "the bundled scenario".into());
            let cloud = Arc::new(
                SimCloud::new(config, catalog.clone(), clock.clone())
                    .map_err(|e| format!("scenario {origin} does not fit the catalog:\n{e}"))?,
            );
            Ok(CloudSetup { cloud: cloud.clone(), clock, simulated: true, sim: Some(cloud), filing: None, azure: None })
        }
        CloudKind::Azure => {
            let config = AzureConfig::load(settings.config_path.as_deref())
                .map_err(|e| format!("Azure settings ([azure] in --config, SPILLWAY_AZURE_*):\n{e}"))?;
            let filing = Some((config.endpoint().to_string(), config.subscription_id.clone()));
            let azure = Arc::new(
                AzureCloud::new(config, catalog.clone())
                    .map_err(|e| format!("cannot set up Azure: {e}"))?
                    .with_agent_bootstrap(bootstrap.clone()),
            );
            Ok(CloudSetup {
                cloud: azure.clone(),
                clock: Arc::new(SystemClock),
                simulated: false,
                sim: None,
                filing,
                azure: Some(azure),
            })
        }
    }
}

async fn serve(catalog: scheduler::Catalog, settings: Settings) -> Result<(), String> {
    // Before anything is opened, so a bad certificate fails fast and touches nothing.
    let tls = match &settings.tls {
        Some((cert, key)) => Some(tls::acceptor(cert, key)?),
        None => None,
    };
    // Before anything is written: a second server on a busy port must change nothing (it used to
    // write a new admin.token into its data directory, then fail to listen). Bound before the
    // cloud is set up, too: the VMs' agents are told where to reach this server.
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}; nothing was changed", settings.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let data_dir = settings.data_dir.clone();
    check_data_dir(&data_dir)?;
    let mut location: StoreLocation = match &settings.store {
        Some(s) => s.parse().map_err(|e: String| format!("--store: {e}"))?,
        None => StoreLocation::Sled(data_dir.clone()),
    };
    if let StoreLocation::Postgres(pg) = &mut location
        && pg.azure_ad()
    {
        **pg = (**pg).clone().with_password_provider(azure_ad_password(settings.config_path.as_deref())?);
    }
    let store = {
        let location = location.clone();
        tokio::task::spawn_blocking(move || Store::open_location(&location))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?
    };
    if !store.is_shared() {
        // A damaged store is refused before it serves anything (a PostgreSQL server keeps its own
        // checksums and WAL; `spillway state check` reads a shared store on demand).
        let s = store.clone();
        let report = tokio::task::spawn_blocking(move || s.check_all()).await.map_err(|e| e.to_string())?;
        match report {
            Ok(r) if r.is_consistent() => {}
            Ok(r) => {
                let shown: Vec<&str> = r.problems.iter().take(5).map(String::as_str).collect();
                return Err(format!(
                    "the state store at {location} is damaged ({} problem(s): {}{}); `spillway state check` lists them \
                     all; restore a backup with `spillway state import` into a new directory (see README)",
                    r.problem_count,
                    shown.join("; "),
                    if r.problem_count > 5 { "; …" } else { "" }
                ));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    if store.is_shared() {
        // The admin token file still lives here; the store does not create it for us.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&data_dir)
            .map_err(|e| format!("cannot create the data directory {}: {e}", data_dir.display()))?;
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    let keys = AgentKeys::load_or_create(&store).map_err(|e| e.to_string())?;
    let bootstrap = agent_bootstrap(&settings.agent, &format!("{scheme}://{addr}"), keys.clone())?;
    let CloudSetup { cloud, clock, simulated, sim, filing, azure } =
        cloud_and_clock(&settings, &catalog, &store, &bootstrap)?;
    let catalog = Arc::new(catalog);
    let mut registry = Registry::default();
    let metrics = ControlMetrics::register(&mut registry);
    let agent_metrics = AgentMetrics::register(&mut registry);
    let replica = Replica::new(Replica::process_id(), &mut registry);
    let control = ControlConfig {
        auto_complete: simulated,
        retain_finished_ms: settings.retain_finished_ms,
        quota_exhausted_after_ms: settings.quota_exhausted_after_ms,
        ..ControlConfig::default()
    };
    // The control loop writes through a fenced handle: only while this server holds the leader lease.
    let controller = Arc::new(Controller::new(
        store.fenced(replica.fence()),
        cloud,
        clock.clone(),
        catalog.clone(),
        control,
        metrics,
    ));
    let jobs = JobService::new(store.clone(), catalog.clone(), clock.clone());
    let tokens = TokenStore::open(store.clone()).map_err(|e| e.to_string())?;
    let (token_path, created) = tokens.ensure_admin_file(&data_dir, SystemClock.now_ms()).map_err(|e| e.to_string())?;
    // Heartbeats come in real time; the store sees them at most every 30 real seconds per rank,
    // whatever the simulated clock's speed.
    let speed = if simulated { settings.speedup } else { 1.0 };
    let heartbeat_secs = settings.agent.heartbeat_interval_secs.unwrap_or(5.0);
    let registration_secs = settings.agent.registration_timeout_secs.unwrap_or(if simulated { 60.0 } else { 900.0 });
    let heartbeat_timeout_ms = (settings.agent.heartbeat_timeout_secs.unwrap_or(30.0) * 1000.0 * speed).round() as i64;
    let agent_config = AgentConfig {
        heartbeat_interval_ms: (heartbeat_secs * 1000.0).round() as u64,
        heartbeat_persist_ms: heartbeat_persist_ms(&store, heartbeat_timeout_ms, speed),
        heartbeat_timeout_ms,
        registration_timeout_ms: (registration_secs * 1000.0 * speed).round() as i64,
        // VMs boot in real time: an elastic attempt's registered VMs wait this long (real) for the
        // rest of theirs before they join the world without them.
        world_settle_ms: ((if simulated { 10.0 } else { 120.0 }) * 1000.0 * speed).round() as i64,
        log_bytes_per_rank: settings.agent.log_bytes_per_rank.unwrap_or(AgentConfig::default().log_bytes_per_rank),
        ..AgentConfig::default()
    };
    let agents = AgentService::new(
        store.clone(),
        catalog.clone(),
        clock.clone(),
        keys,
        agent_config,
        agent_metrics,
        jobs.wake_handle(),
    );
    let vm_runner = match &sim {
        Some(sim) => Some(start_sim_vms(sim.clone(), store.clone(), &bootstrap, &data_dir).await?),
        None => None,
    };

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let driver = if simulated {
        // One round per simulated minute, at most every 5 s and at least every 200 ms of real time.
        let ms = (60_000.0 / settings.speedup).clamp(200.0, 5_000.0) as u64;
        DriverConfig { interval: Duration::from_millis(ms), batch_window: Duration::from_millis(100) }
    } else {
        DriverConfig::default()
    };
    let leader_config = match std::env::var("SPILLWAY_LEASE_MS").ok().and_then(|v| v.parse::<u64>().ok()) {
        Some(ms) => LeaderConfig::with_ttl(Duration::from_millis(ms)),
        None => LeaderConfig::default(),
    };
    let loop_task = tokio::spawn(run_elections(
        store.clone(),
        replica.clone(),
        controller.clone(),
        jobs.wake_handle(),
        driver,
        leader_config,
        stop_rx.clone(),
    ));
    if simulated {
        tokio::spawn(save_sim_clock(store.clone(), clock.clone(), stop_rx.clone()));
    }
    if settings.demo {
        tokio::spawn(demo(jobs.clone(), stop_rx.clone()));
    }
    tokio::spawn(sweep_silent_agents(agents.clone(), replica.clone(), stop_rx.clone()));
    // Spend samples are the leader's to write, like everything the control loop writes.
    tokio::spawn(scheduler::api::spend::record_spend(
        store.clone(),
        replica.fence().clone(),
        clock.clone(),
        stop_rx.clone(),
    ));
    let limits = scheduler::api::server::Limits::of(&settings.api);
    let mut state =
        ApiState::new(jobs, controller, tokens, registry, settings.api, stop_rx.clone()).with_agents(agents);
    if let Some((endpoint, subscription)) = &filing {
        state = state.with_quota_filing(endpoint, subscription);
    }
    if let Some(azure) = azure {
        let requests = scheduler::quota_requests::QuotaRequests::new(store.clone(), clock.clone(), azure);
        // Quota requests are driven by the leader, through its fence: a request left `submitted`
        // by a server that stopped is resumed by the next leader (see `quota_requests`).
        tokio::spawn(scheduler::quota_requests::drive_quota_requests(
            requests.clone(),
            store.fenced(replica.fence()),
            replica.clone(),
            stop_rx.clone(),
        ));
        state = state.with_quota_requests(requests);
    }
    state.set_replica(replica.clone());
    let app = router(state);

    // Written with errors ignored: whoever started us may have closed our stdout after reading
    // the address, and that must not take the server down.
    let cloud_line = match settings.cloud {
        CloudKind::Sim => format!(
            "cloud: simulated ({}), {}× real time{}; jobs' run scripts execute here, as this user, one agent \
             process per simulated VM under {}",
            settings.scenario.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "bundled scenario".into()),
            settings.speedup,
            if settings.demo { ", demo jobs on" } else { "" },
            data_dir.join("sim-vms").display()
        ),
        CloudKind::Azure => "cloud: Azure".to_string(),
    };
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "spillway listening on {scheme}://{addr}");
        if token_path.exists() {
            let _ = writeln!(out, "admin token: {}{}", token_path.display(), if created { " (created)" } else { "" });
        } else {
            let _ = writeln!(
                out,
                "admin token: none in {} (the shared store has admin tokens already: use one, or create one with \
                 `spillway token create --role admin` on any server)",
                data_dir.display()
            );
        }
        // The signed-in link holds the admin token: printed only to a person at a terminal, never
        // into a file or a journal that keeps stdout (tokens are never logged).
        use std::io::IsTerminal;
        let base = format!("{scheme}://{addr}");
        match std::fs::read_to_string(&token_path) {
            Ok(token) if std::io::stdout().is_terminal() => {
                let _ = writeln!(out, "dashboard: {}", scheduler::api::dashboard::sign_in_url(&base, token.trim()));
            }
            _ => {
                let _ = writeln!(out, "dashboard: {base}/ (`spillway dashboard-url` prints a signed-in link)");
            }
        }
        let _ = writeln!(out, "{cloud_line}");
        if let Some((_, vms)) = &vm_runner {
            let _ = writeln!(
                out,
                "simulated VMs: http://{vms} (instance metadata under /vms/<vm>, control under /control)"
            );
        }
        let _ = out.flush();
    }
    tracing::info!(%addr, data_dir = %data_dir.display(), store = %location, "serving");

    let shutdown = {
        let stop_tx = stop_tx.clone();
        async move {
            wait_for_signal().await;
            tracing::info!("shutting down");
            let _ = stop_tx.send(true);
        }
    };
    let served = match tls {
        Some(acceptor) => {
            scheduler::api::server::serve(tls::TlsListener::new(listener, acceptor), app, limits, shutdown).await
        }
        None => scheduler::api::server::serve(listener, app, limits, shutdown).await,
    };
    let _ = stop_tx.send(true);
    if let Some((r, _)) = &vm_runner {
        r.shutdown();
    }
    if tokio::time::timeout(Duration::from_secs(10), loop_task).await.is_err() {
        tracing::warn!("the control loop did not stop within 10 s");
    }
    if simulated {
        let _ = store.set_setting(SIM_CLOCK_SETTING, &clock.now_ms());
    }
    let flushed = tokio::task::spawn_blocking(move || store.flush()).await;
    if let Ok(Err(e)) = flushed {
        tracing::error!(error = %e, "final flush failed");
    }
    served.map_err(|e| format!("server error: {e}"))
}

/// What the VMs are told about reaching this server and running the agent.
fn agent_bootstrap(file: &AgentFile, listening: &str, keys: AgentKeys) -> Result<AgentBootstrap, String> {
    let url = file.scheduler_url.clone().unwrap_or_else(|| listening.to_string());
    let mut b = AgentBootstrap::new(&url, keys);
    if let Some(root) = &file.checkpoint_root {
        b.checkpoint_root = root.clone();
    }
    if let Some(p) = &file.binary_path {
        b.binary_path = p.clone();
    }
    b.binary_url = file.binary_url.clone();
    b.binary_sha256 = file.binary_sha256.clone();
    if let Some(p) = &file.ca_cert_file {
        b.ca_cert = Some(std::fs::read_to_string(p).map_err(|e| format!("agent.ca_cert_file {}: {e}", p.display()))?);
    }
    Ok(b)
}

/// The simulated cloud's VMs run a real agent for every job that has work: a local
/// `spillway agent` process per VM, sandboxed under `<data-dir>/sim-vms`, checkpoints under
/// `<data-dir>/checkpoints`.
async fn start_sim_vms(
    sim: Arc<SimCloud>,
    store: Store,
    bootstrap: &AgentBootstrap,
    data_dir: &Path,
) -> Result<(Arc<VmRunner>, std::net::SocketAddr), String> {
    let program = std::env::current_exe().map_err(|e| format!("cannot find this program to run agents: {e}"))?;
    let root = data_dir.join("sim-vms");
    // The VMs of an earlier run are gone with its simulated cloud.
    let _ = std::fs::remove_dir_all(&root);
    let config = VmRunnerConfig::new(program, vec!["agent".into()], root, data_dir.join("checkpoints"));
    let launcher = Arc::new(SimLauncher { store, bootstrap: bootstrap.clone() });
    let runner = VmRunner::new(sim, launcher, config);
    let addr =
        runner.serve_metadata().await.map_err(|e| format!("cannot serve the simulated instance metadata: {e}"))?;
    runner.spawn();
    Ok((runner, addr))
}

/// Agents for the fleets of jobs that say what to run (capacity-only jobs' VMs stay bare).
struct SimLauncher {
    store: Store,
    bootstrap: AgentBootstrap,
}

impl AgentLauncher for SimLauncher {
    fn settings(&self, fleet: &simulator::sim_cloud::FleetSnapshot) -> Option<AgentSettings> {
        let job_id = fleet.tags.get(TAG_JOB)?;
        let attempt: u32 = fleet.tags.get(TAG_ATTEMPT)?.parse().ok()?;
        let job = self.store.get::<scheduler::model::Job>(job_id).ok()??;
        job.spec.runs_work().then(|| self.bootstrap.settings(job_id, attempt))
    }
}

/// Refuses a data directory that other users may read or enter: the store holds every job and the
/// tokens' hashes, and sled creates its files readable by the directory's readers. Refused rather
/// than tightened, because the directory may be shared on purpose (a home directory, a mount) and
/// changing its mode behind the owner's back would surprise them more than a clear refusal.
fn check_data_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() && m.permissions().mode() & 0o077 != 0 => Err(format!(
            "data directory {} is mode {:04o}: other users could read the job store and the token hashes; \
             run `chmod 700 {}` (or pass another --data-dir) and start again; nothing was changed",
            dir.display(),
            m.permissions().mode() & 0o777,
            dir.display()
        )),
        _ => Ok(()),
    }
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// How often a rank's heartbeat reaches the store: every 30 s on a server's own store (the rest
/// stays in its memory), but with several servers on one store (agents report to any of them, and
/// only the leader looks for silent ones) often enough that the leader never takes a rank heard by
/// another server for silent: three times per `heartbeat_timeout_ms`.
fn heartbeat_persist_ms(store: &Store, heartbeat_timeout_ms: i64, speed: f64) -> i64 {
    let own = (30_000.0 * speed).round() as i64;
    if store.is_shared() { own.min(heartbeat_timeout_ms / 3).max(1) } else { own }
}

/// Every two seconds, on the leader, declares the VMs whose agents went silent lost (and notes
/// attempts whose agents never came), for the control loop to move their work. Followers do not:
/// one server deciding is enough, and a follower may have been away while the agents reported.
/// The sweep writes under the leader's fence, so a leader deposed mid-sweep writes nothing.
async fn sweep_silent_agents(agents: AgentService, replica: Replica, mut stop: tokio::sync::watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = stop.changed() => return,
        }
        if !replica.is_leader() {
            continue;
        }
        let (a, fence) = (agents.clone(), replica.fence().clone());
        match tokio::task::spawn_blocking(move || a.sweep_silent(&fence)).await {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => tracing::warn!(lost = n, "VMs counted as lost: their agents stopped sending heartbeats"),
            Ok(Err(state::StoreError::Fenced(why))) => {
                tracing::info!(reason = %why, "silent-agent sweep not written: this server no longer leads")
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot look for silent agents; retrying"),
            Err(e) => tracing::warn!(error = %e, "silent-agent sweep failed"),
        }
    }
}

/// The scope of Azure AD access tokens for Azure Database for PostgreSQL.
const POSTGRES_AAD_SCOPE: &str = "https://ossrdbms-aad.database.windows.net/.default";

/// A password provider for `azure_ad=true` store URLs: an access token from the `[azure]`
/// credential (managed identity in production), fetched afresh for every new connection.
fn azure_ad_password(config: Option<&Path>) -> Result<Arc<dyn Fn() -> Result<String, String> + Send + Sync>, String> {
    let azure = AzureConfig::load(config)
        .map_err(|e| format!("--store azure_ad=true needs the [azure] credential settings:\n{e}"))?;
    let credential = scheduler::cloud::azure::credential::build_credential(&azure)
        .map_err(|e| format!("--store azure_ad=true: cannot build the Azure credential: {e}"))?;
    Ok(Arc::new(move || {
        let credential = credential.clone();
        // Its own thread and runtime: called from the store's connection path, which may be on one
        // of the server's async threads.
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
            rt.block_on(credential.get_token(&[POSTGRES_AAD_SCOPE], None))
                .map(|t| t.token.secret().to_string())
                .map_err(|e| format!("Azure AD token for PostgreSQL: {e}"))
        })
        .join()
        .map_err(|_| "the Azure AD token thread panicked".to_string())?
    }))
}

/// Remembers the simulated time every few seconds, so a restart continues from it.
async fn save_sim_clock(store: Store, clock: Arc<dyn Clock>, mut stop: tokio::sync::watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = stop.changed() => return,
        }
        let now = clock.now_ms();
        let s = store.clone();
        let _ = tokio::task::spawn_blocking(move || s.set_setting(SIM_CLOCK_SETTING, &now)).await;
    }
}

/// The example specs the demo submits, made to fit the bundled scenario (smaller gangs, hours of
/// simulated work rather than days, no fixed deadlines).
pub fn demo_specs() -> Vec<serde_json::Value> {
    let toml_spec = |text: &str| -> serde_json::Value {
        let v: toml::Value = toml::from_str(text).unwrap_or(toml::Value::Table(Default::default()));
        serde_json::to_value(v).unwrap_or_default()
    };
    let mut specs = vec![
        toml_spec(include_str!("../../examples/spot-t4-experiment.toml")),
        toml_spec(include_str!("../../examples/batch-inference-spot-a10.toml")),
        serde_json::from_str(include_str!("../../examples/inference-service.json")).unwrap_or_default(),
        toml_spec(include_str!("../../examples/finetune-a100-64gpu.toml")),
    ];
    for s in &mut specs {
        let Some(o) = s.as_object_mut() else { continue };
        o.remove("deadline");
        let kind = o.get("kind").and_then(|k| k.as_str()).unwrap_or("").to_string();
        if kind == "training" && o.get("gpus").and_then(|g| g.as_u64()).unwrap_or(0) > 8 {
            o.insert("gpus".into(), 8.into());
            o.insert("duration_hours".into(), 3.0.into());
            o.insert("max_price_per_hour".into(), 60.0.into());
            // The one that fails: no torchrun here, so a stand-in that fails like a broken
            // collective, is restarted once in place, and fails again (exit code in its events).
            o.remove("setup");
            o.insert(
                "run".into(),
                "echo \"rank $SPILLWAY_NODE_RANK/$SPILLWAY_NUM_NODES: loading shards (start $SPILLWAY_RESTART)\"; sleep 3; \
                 echo 'NCCL error: unhandled system error (simulated)' >&2; exit 1"
                    .into(),
            );
        }
        if kind == "inference" {
            o.insert("duration_hours".into(), 2.0.into());
            o.insert("replicas".into(), serde_json::json!({"min": 1, "desired": 3}));
            // A demo server that stops by itself after a minute, so demo jobs keep coming.
            o.insert(
                "run".into(),
                "for i in $(seq 1 12); do echo \"replica $SPILLWAY_NODE_RANK served $((i * 100)) requests\"; sleep 5; done"
                    .into(),
            );
        }
        if kind == "batch" {
            o.insert("duration_hours".into(), 1.5.into());
        }
    }
    specs
}

/// Submits the example jobs under new names, a few at first and then one every 20 seconds
/// while fewer than 8 demo jobs are open.
async fn demo(jobs: JobService, mut stop: tokio::sync::watch::Receiver<bool>) {
    let specs = demo_specs();
    let mut n = 0usize;
    let mut first = true;
    loop {
        let burst = if first { 3 } else { 1 };
        first = false;
        for _ in 0..burst {
            let mut spec = specs[n % specs.len()].clone();
            n += 1;
            if let Some(o) = spec.as_object_mut() {
                let base = o.get("name").and_then(|v| v.as_str()).unwrap_or("demo").to_string();
                o.insert("name".into(), format!("{base}-{n:03}").into());
            }
            let j = jobs.clone();
            let open = {
                let j = j.clone();
                tokio::task::spawn_blocking(move || {
                    j.list(None, None).map(|all| all.iter().filter(|x| !x.state.is_final()).count()).unwrap_or(0)
                })
                .await
                .unwrap_or(0)
            };
            if open >= 8 {
                break;
            }
            match tokio::task::spawn_blocking(move || j.submit_value(spec, None, None)).await {
                Ok(Ok(s)) => tracing::info!(job = %s.job.id, name = %s.job.spec.name, "demo job submitted"),
                Ok(Err(e)) => tracing::warn!(error = %e, "demo job refused"),
                Err(e) => tracing::warn!(error = %e, "demo task failed"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(20)) => {}
            _ = stop.changed() => return,
        }
    }
}

/// HTTPS with rustls.
mod tls {
    use std::net::SocketAddr;
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::net::{TcpListener, TcpStream};
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls::{ServerConfig, crypto::aws_lc_rs};
    use tokio_rustls::{TlsAcceptor, server::TlsStream};

    /// Longest a client may take to finish its TLS handshake.
    const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

    /// Reads the PEM certificate chain and key; errors name the flag and the file.
    pub(super) fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, String> {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .and_then(|it| it.collect::<Result<_, _>>())
            .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?;
        if chain.is_empty() {
            return Err(format!("--tls-cert {}: no PEM CERTIFICATE in the file", cert.display()));
        }
        let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("--tls-key {}: {e}", key.display()))?;
        // An explicit provider: the process-wide default panics when several are compiled in.
        let mut config = ServerConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup: {e}"))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| format!("--tls-cert/--tls-key {}: {e}", cert.display()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }

    /// Accepts TCP connections and runs each TLS handshake in its own task, so a slow or silent
    /// client cannot hold up the others; failed or timed-out handshakes are dropped.
    pub(super) struct TlsListener {
        rx: tokio::sync::mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
        local: SocketAddr,
    }

    impl TlsListener {
        pub(super) fn new(tcp: TcpListener, acceptor: TlsAcceptor) -> TlsListener {
            let local = tcp.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
            let (tx, rx) = tokio::sync::mpsc::channel(64);
            tokio::spawn(async move {
                while !tx.is_closed() {
                    let (stream, peer) = match tcp.accept().await {
                        Ok(x) => x,
                        Err(e) => {
                            // Out of file descriptors and the like: back off instead of spinning.
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let (acceptor, tx) = (acceptor.clone(), tx.clone());
                    tokio::spawn(async move {
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                            Ok(Ok(tls)) => {
                                let _ = tx.send((tls, peer)).await;
                            }
                            Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                            Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                        }
                    });
                }
            });
            TlsListener { rx, local }
        }
    }

    impl axum::serve::Listener for TlsListener {
        type Io = TlsStream<TcpStream>;
        type Addr = SocketAddr;

        async fn accept(&mut self) -> (Self::Io, Self::Addr) {
            match self.rx.recv().await {
                Some(conn) => conn,
                None => std::future::pending().await,
            }
        }

        fn local_addr(&self) -> std::io::Result<SocketAddr> {
            Ok(self.local)
        }
    }
}

/// The data directory the client commands read `admin.token` from.
pub fn default_data_dir(flag: Option<&Path>) -> PathBuf {
    flag.map(Path::to_path_buf)
        .or_else(|| std::env::var_os("SPILLWAY_DATA_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_scenario_fits_the_catalog() {
        let catalog = scheduler::Catalog::load(None).unwrap();
        let cfg = SimCloudConfig::from_scenario_str(DEFAULT_SCENARIO, "bundled").unwrap();
        cfg.validate(&catalog).unwrap();
        assert!(cfg.regions.len() >= 3);
    }

    #[test]
    fn demo_specs_are_valid_for_the_catalog() {
        let catalog = scheduler::Catalog::load(None).unwrap();
        for spec in demo_specs() {
            let now = time::OffsetDateTime::now_utc();
            scheduler::model::JobSpec::from_value_checked(spec.clone(), &catalog, now)
                .unwrap_or_else(|e| panic!("{spec}: {e}"));
        }
    }

    #[test]
    fn non_loopback_listen_needs_an_explicit_flag() {
        let args = |listen: &str, allow: bool| ServeArgs {
            data_dir: None,
            store: None,
            listen: Some(listen.into()),
            cloud: None,
            scenario: None,
            speedup: None,
            config: None,
            log_format: None,
            demo: false,
            allow_insecure_remote: allow,
            rate_limit: None,
            rate_burst: None,
            tls_cert: None,
            tls_key: None,
            retain_finished_hours: None,
            quota_exhausted_minutes: None,
            agent_url: None,
        };
        assert!(settings(args("0.0.0.0:7878", false)).unwrap_err().contains("loopback"));
        assert!(settings(args("0.0.0.0:7878", true)).is_ok());
        assert!(settings(args("[::1]:0", false)).is_ok());
        assert!(settings(args("localhost", false)).is_err());
        let tls =
            ServeArgs { tls_cert: Some("c.pem".into()), tls_key: Some("k.pem".into()), ..args("0.0.0.0:7878", false) };
        assert!(settings(tls).is_ok(), "TLS makes a non-loopback address acceptable");
        let half = ServeArgs { tls_cert: Some("c.pem".into()), ..args("127.0.0.1:0", false) };
        assert!(settings(half).unwrap_err().contains("--tls-key"));
    }
}
