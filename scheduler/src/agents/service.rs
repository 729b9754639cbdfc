//! [`AgentService`]: what the scheduler does with the agents' calls. It registers VMs and hands
//! out ranks, tells each rank what to run (once its whole gang is up), stores logs within a cap,
//! takes heartbeats and GPU samples, and records exits, preemption notices and idleness.
//!
//! The work's own verdicts are decided here, in the transaction that records the report that
//! settles them (see [`super::decide`]): every rank exiting 0 ends the job `succeeded`; a failing
//! rank restarts the work in place while `max_restarts` allows, else ends the job `failed` with the
//! exit code and the last lines in its events; `on_idle = "stop"` ends an idle job. Moving work
//! (a preemption notice, a VM whose heartbeats stopped) needs new capacity and is the control
//! loop's.
//!
//! Heartbeats are the hot path: they are kept in memory and written to the store at most every
//! `heartbeat_persist_ms` per rank (or when the rank's phase changes), so a thousand agents cost a
//! few store writes per second, not a thousand fsyncs. Logs are acknowledged only once on disk.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use serde::Serialize;
use state::{Store, StoreError, Tx, TxAbort};
use std::sync::atomic::AtomicU64;

use super::credential::{AgentKeys, AttemptRef};
use super::decide::{self, ExitVerdict};
use super::protocol::{
    Action, DependencyVars, ExitReason, GpuInfo, GpuSample, Heartbeat, LogAck, LogBatch, LogLine, LogStream, Phase,
    RankVars, Registered, Registration, Report, WorkOrder, WorkStatus, dependency_env,
};
use super::records::{
    AttemptWork, ExitRecord, JobWork, LogChunk, NodeRecord, NodesOfJob, NoticeRecord, World, chunk_key, node_key,
};
use crate::catalog::Catalog;
use crate::clock::Clock;
use crate::jobs::record_event;
use crate::model::EventKind;
use crate::model::{Attempt, AttemptState, FieldErrors, Job, JobState, OnIdle, Pipeline};
use crate::records::{AttemptsBy, Lookup, attempt_key};

/// Settings of the agent side of the server.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// How often agents are asked to send heartbeats (real milliseconds).
    pub heartbeat_interval_ms: u64,
    /// Scheduler-clock milliseconds between heartbeat writes of one rank to the store.
    pub heartbeat_persist_ms: i64,
    /// Log bytes kept per rank and attempt; later lines are dropped after one marker line.
    pub log_bytes_per_rank: u64,
    /// Longest line kept whole; longer lines are cut with a marker (the agent cuts them first).
    pub max_line_bytes: usize,
    /// A GPU below this utilisation (percent) counts as idle.
    pub idle_threshold_percent: f64,
    /// Longest a `GET …/work` waits for the gang (real milliseconds).
    pub max_wait_ms: u64,
    /// Scheduler-clock milliseconds without a heartbeat after which a rank's VM counts as lost.
    pub heartbeat_timeout_ms: i64,
    /// Scheduler-clock milliseconds a running attempt of a job with `run` may wait for all its
    /// agents to register before its VMs count as unable to run the work.
    pub registration_timeout_ms: i64,
    /// Flush the store before acknowledging logs, exits and registrations (off only for
    /// throwaway stores).
    pub durable: bool,
    /// Scheduler-clock milliseconds the registered VMs of an elastic job's attempt wait for the
    /// rest of that attempt's VMs before they join the world without them.
    pub world_settle_ms: i64,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            heartbeat_interval_ms: 5_000,
            heartbeat_persist_ms: 30_000,
            log_bytes_per_rank: 8 * 1024 * 1024,
            max_line_bytes: 16 * 1024,
            idle_threshold_percent: 5.0,
            max_wait_ms: 25_000,
            heartbeat_timeout_ms: 30_000,
            registration_timeout_ms: 15 * 60_000,
            durable: true,
            world_settle_ms: 2 * 60_000,
        }
    }
}

/// Why an agent call was refused.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// No valid credential, or the attempt has ended (401).
    #[error("{0}")]
    Unauthorized(String),
    /// The path names something this credential may not see, or nothing (404).
    #[error("{0}")]
    NotFound(String),
    /// Conflicts with the attempt's state (409): every rank is taken.
    #[error("{0}")]
    Conflict(String),
    /// The body is invalid; every problem names its field (422).
    #[error("invalid request:\n{0}")]
    Invalid(FieldErrors),
    /// The store failed (503).
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

/// Labels of a GPU's gauges (with the tenant, so a tenant's scrape shows its own GPUs).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GpuLabel {
    /// The job's tenant.
    pub tenant: String,
    /// Job id.
    pub job: String,
    /// Attempt number.
    pub attempt: String,
    /// Rank.
    pub rank: String,
    /// GPU index on the VM.
    pub gpu: String,
}

/// What the agent side counts, served at `/metrics`.
#[derive(Clone, Debug)]
pub struct AgentMetrics {
    /// Heartbeats taken.
    pub heartbeats: Counter,
    /// Log bytes stored.
    pub log_bytes: Counter,
    /// Ranks that sent a heartbeat recently.
    pub connected: Gauge,
    /// Agent start to `run` start, seconds.
    pub startup_seconds: Histogram,
    /// GPU utilisation, percent, per job, attempt, rank and GPU (only GPUs that report).
    pub gpu_utilization: Family<GpuLabel, Gauge<f64, AtomicU64>>,
    /// GPU memory used, bytes.
    pub gpu_memory_used: Family<GpuLabel, Gauge<f64, AtomicU64>>,
}

impl AgentMetrics {
    /// Creates the metrics and registers them under `spillway_`.
    pub fn register(registry: &mut Registry) -> AgentMetrics {
        let m = AgentMetrics::unregistered();
        let r = registry.sub_registry_with_prefix("spillway");
        r.register("agent_heartbeats", "Heartbeats taken from node agents", m.heartbeats.clone());
        r.register("agent_log_bytes", "Log bytes stored from node agents", m.log_bytes.clone());
        r.register("agents_connected", "Ranks whose agent sent a heartbeat recently", m.connected.clone());
        r.register("agent_startup_seconds", "Agent start to run start", m.startup_seconds.clone());
        r.register(
            "gpu_utilization_percent",
            "GPU utilisation per job, attempt, rank and GPU",
            m.gpu_utilization.clone(),
        );
        r.register(
            "gpu_memory_used_bytes",
            "GPU memory used per job, attempt, rank and GPU",
            m.gpu_memory_used.clone(),
        );
        m
    }

    /// Metrics attached to no registry.
    pub fn unregistered() -> AgentMetrics {
        AgentMetrics {
            heartbeats: Counter::default(),
            log_bytes: Counter::default(),
            connected: Gauge::default(),
            startup_seconds: Histogram::new([0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0]),
            gpu_utilization: Family::default(),
            gpu_memory_used: Family::default(),
        }
    }
}

/// What the server remembers about a rank between heartbeats.
#[derive(Debug, Clone)]
struct Live {
    tenant: String,
    seen: Instant,
    seen_ms: i64,
    persisted_ms: i64,
    phase: Phase,
    restart: Option<u32>,
    samples: Option<Vec<GpuSample>>,
}

/// Where to start reading a job's log: a chunk and a line in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogCursor {
    /// Chunk number.
    pub seq: u64,
    /// Line within the chunk.
    pub line: usize,
}

impl LogCursor {
    /// Parses `SEQ` or `SEQ.LINE`.
    pub fn parse(s: &str) -> Option<LogCursor> {
        let (seq, line) = s.split_once('.').unwrap_or((s, "0"));
        Some(LogCursor { seq: seq.parse().ok()?, line: line.parse().ok()? })
    }
}

impl std::fmt::Display for LogCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.seq, self.line)
    }
}

/// One line of a job's log as readers get it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct LogEntry {
    /// Attempt.
    pub attempt: u32,
    /// Rank.
    pub rank: u32,
    /// Start number (`SPILLWAY_RESTART`).
    pub restart: u32,
    /// Which output.
    pub stream: LogStream,
    /// When the agent read it (the VM's clock), Unix ms.
    pub at_ms: i64,
    /// The text.
    pub text: String,
    /// The position just after this line (resume from here).
    pub cursor: String,
}

/// A page of a job's log.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct LogPage {
    /// Lines in the order they were stored (per rank in the order written).
    pub lines: Vec<LogEntry>,
    /// Where the next page starts (`from=`).
    pub next: String,
    /// True when the page stopped at its limit: more lines are stored already.
    pub more: bool,
}

/// Which lines a reader wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogFilter {
    /// One attempt only.
    pub attempt: Option<u32>,
    /// One rank only.
    pub rank: Option<u32>,
}

impl LogFilter {
    fn wants(&self, c: &LogChunk) -> bool {
        self.attempt.is_none_or(|a| a == c.attempt) && self.rank.is_none_or(|r| r == c.rank)
    }
}

/// One rank as the job's detail shows it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct NodeView {
    /// Attempt.
    pub attempt: u32,
    /// Rank within the attempt (the agent's own).
    pub rank: u32,
    /// Its rank in the job's world (`SPILLWAY_NODE_RANK`) when the job's work is one elastic world
    /// over its attempts and this VM is in it; absent for gangs (the attempt rank is the rank).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub world_rank: Option<u32>,
    /// The VM's name.
    pub vm_name: String,
    /// Host name.
    pub hostname: String,
    /// Private IP.
    pub private_ip: String,
    /// Where it is.
    pub phase: Phase,
    /// The start number it runs or last ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart: Option<u32>,
    /// The last exit code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended the last run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_signal: Option<i32>,
    /// Why the last run ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_reason: Option<ExitReason>,
    /// The agent's explanation of the last exit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_message: Option<String>,
    /// Its heartbeats stopped.
    pub lost: bool,
    /// The preemption notice it got (`Preempt`, `Terminate`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    /// Last heartbeat, scheduler clock ms.
    pub last_heartbeat_ms: i64,
    /// GPUs the agent saw; absent when it could not tell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<GpuInfo>>,
    /// The latest GPU samples; absent when the VM reports none (never zeros for "unknown").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_utilization: Option<Vec<GpuSample>>,
    /// Log bytes stored.
    pub log_bytes: u64,
    /// The log reached its cap.
    pub log_truncated: bool,
    /// When its current `run` started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_started_at_ms: Option<i64>,
    /// Agent start to `run` start, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub startup_ms: Option<u64>,
}

struct Inner {
    store: Store,
    catalog: Arc<Catalog>,
    clock: Arc<dyn Clock>,
    keys: AgentKeys,
    config: AgentConfig,
    metrics: AgentMetrics,
    live: Mutex<HashMap<String, Live>>,
    /// Since when every GPU of an attempt has been idle (scheduler clock ms), by attempt key.
    idle_since: Mutex<HashMap<String, i64>>,
    last_sweep: Mutex<Instant>,
    /// When this server started (scheduler clock): ranks stored before get a full timeout of grace.
    started_ms: i64,
    changed: tokio::sync::watch::Sender<u64>,
    wake: Arc<tokio::sync::Notify>,
}

/// The agent side of the server. Cheap to clone.
#[derive(Clone)]
pub struct AgentService {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for AgentService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentService").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Result of a transaction that may refuse with an [`AgentError`] (kept apart from store errors,
/// which abort the transaction).
type Refusable<T> = Result<T, AgentError>;

impl AgentService {
    /// The agent side over a store. `wake` is the control loop's wake-up (notified when the work
    /// ends a job, so its fleets are released at once).
    pub fn new(
        store: Store,
        catalog: Arc<Catalog>,
        clock: Arc<dyn Clock>,
        keys: AgentKeys,
        config: AgentConfig,
        metrics: AgentMetrics,
        wake: Arc<tokio::sync::Notify>,
    ) -> AgentService {
        let (changed, _) = tokio::sync::watch::channel(0);
        let started_ms = clock.now_ms();
        AgentService {
            inner: Arc::new(Inner {
                started_ms,
                store,
                catalog,
                clock,
                keys,
                config,
                metrics,
                live: Mutex::new(HashMap::new()),
                idle_since: Mutex::new(HashMap::new()),
                last_sweep: Mutex::new(Instant::now()),
                changed,
                wake,
            }),
        }
    }

    /// The key credentials are derived with (the cloud side mints them for new fleets).
    pub fn keys(&self) -> &AgentKeys {
        &self.inner.keys
    }

    /// The settings.
    pub fn config(&self) -> &AgentConfig {
        &self.inner.config
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    fn now(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    fn flush(&self) -> Result<(), StoreError> {
        if self.inner.config.durable { self.inner.store.flush() } else { Ok(()) }
    }

    /// Wakes the waiters of `GET …/work` and of log followers.
    fn bump(&self) {
        self.inner.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// A receiver that changes whenever anything an agent or a log follower waits for may have.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }

    /// Checks a presented credential against the attempt in the path. A credential for another
    /// attempt is "not found" (as an attempt that does not exist); an attempt that has ended no
    /// longer accepts its credential.
    pub fn authorize(&self, credential: &str, job_id: &str, attempt: u32) -> Result<Attempt, AgentError> {
        let Some(named) = self.inner.keys.verify(credential) else {
            return Err(AgentError::Unauthorized("unknown agent credential".into()));
        };
        self.authorize_named(&named, job_id, attempt)
    }

    /// [`authorize`](Self::authorize) for a credential already verified (by its MAC alone, which
    /// needs no path: the HTTP layer does that first, so that a request without a valid
    /// credential learns nothing about the path it named).
    pub fn authorize_named(&self, named: &AttemptRef, job_id: &str, attempt: u32) -> Result<Attempt, AgentError> {
        let not_found = || AgentError::NotFound(format!("no attempt {attempt} of job {job_id} for this credential"));
        if named.job_id != job_id || named.attempt != attempt {
            return Err(not_found());
        }
        let a = self.inner.store.get::<Attempt>(&attempt_key(job_id, attempt))?.ok_or_else(not_found)?;
        if !a.is_active() {
            return Err(AgentError::Unauthorized(format!(
                "attempt {attempt} of job {job_id} has ended; its credential no longer works"
            )));
        }
        Ok(a)
    }

    /// Registers a VM: it gets its old rank back, else the first free one (or one whose VM was
    /// declared lost). The registration that completes the gang orders the work to start.
    pub fn register(&self, a: &Attempt, reg: Registration) -> Result<Registered, AgentError> {
        check_registration(&reg)?;
        let now = self.now();
        let akey = attempt_key(&a.job_id, a.number);
        let rank: Refusable<u32> = self.inner.store.transaction(|tx| {
            let Some(mut job) = tx.get::<Job>(&a.job_id)? else {
                return Ok(Err(AgentError::NotFound(format!("no job {}", a.job_id))));
            };
            let mut work = tx.get::<AttemptWork>(&akey)?.unwrap_or_else(|| new_attempt_work(a));
            let elastic = decide::is_elastic(&job);
            if !job.spec.runs_work() {
                // A capacity-only job's fleet may grow (control::growth): its new VMs get new ranks.
                work.num_nodes = work.num_nodes.max(a.vms.max(1));
            } else if elastic {
                // So may an elastic job's, and its new VMs may come before the loop has seen the
                // growth done: the capacity it grows to is what has ranks.
                work.num_nodes = work.num_nodes.max(a.target().vms.max(1));
            }
            let mut nodes = read_nodes(tx, &a.job_id, a.number, work.num_nodes)?;
            let pick = nodes
                .iter()
                .position(|n| n.as_ref().is_some_and(|n| n.vm_name == reg.vm_name))
                .or_else(|| nodes.iter().position(Option::is_none))
                .or_else(|| nodes.iter().position(|n| n.as_ref().is_some_and(|n| n.lost)));
            let Some(rank) = pick else {
                return Ok(Err(AgentError::Conflict(format!(
                    "every one of the {} ranks of attempt {} is held by a live VM",
                    work.num_nodes, a.number
                ))));
            };
            let prev = nodes[rank].take();
            let mut node = NodeRecord {
                job_id: a.job_id.clone(),
                attempt: a.number,
                rank: rank as u32,
                vm_name: reg.vm_name.clone(),
                hostname: reg.hostname.clone(),
                private_ip: reg.private_ip.clone(),
                gpus: reg.gpus.clone(),
                boot_id: reg.boot_id.clone(),
                agent_version: reg.agent_version.clone(),
                registered_at_ms: now,
                last_heartbeat_ms: now,
                phase: Phase::Waiting,
                restart: None,
                run_started_at_ms: None,
                startup_ms: None,
                exit: None,
                notice: None,
                lost: false,
                log_bytes: 0,
                log_truncated: false,
                log_boot_id: String::new(),
                last_batch: 0,
                gpu_samples: None,
            };
            if let Some(p) = prev {
                // The cap is per rank and attempt, whichever VM writes it.
                node.log_bytes = p.log_bytes;
                node.log_truncated = p.log_truncated;
                if p.vm_name == reg.vm_name {
                    node.exit = p.exit;
                    node.notice = p.notice;
                }
            }
            tx.put(&node)?;
            nodes[rank] = Some(node);
            let complete = nodes.iter().all(|n| n.as_ref().is_some_and(|n| !n.lost));
            if complete && job.first_running_at_ms.is_none() && !job.state.is_final() {
                // The whole gang is up, so the job runs now, even if the control loop has not yet
                // seen the fleet at capacity (agents can start, and even finish, before that).
                job.first_running_at_ms = Some(now);
                tx.put(&job)?;
            }
            if complete && work.started_at_ms.is_none() && !job.spec.runs_work() {
                // A capacity-only job's agents run nothing: they report heartbeats and GPUs.
                work.started_at_ms = Some(now);
            }
            if complete
                && work.restart.is_none()
                && work.stop.is_none()
                && !job.state.is_final()
                && job.spec.runs_work()
                && !elastic
            {
                let mut jw = tx.get::<JobWork>(&job.id)?.unwrap_or_else(|| JobWork::new(&job.id));
                let restart = jw.next_restart;
                jw.next_restart += 1;
                work.restart = Some(restart);
                work.started_at_ms = Some(now);
                tx.put(&jw)?;
                record_event(
                    tx,
                    &job,
                    now,
                    EventKind::WorkStarted,
                    format!(
                        "attempt {}: all {} VMs registered; run starts (SPILLWAY_RESTART={restart})",
                        a.number, work.num_nodes
                    ),
                    serde_json::json!({"attempt": a.number, "restart": restart}),
                )?;
            }
            tx.put(&work)?;
            if elastic {
                // The job's world starts, or changes, with this VM (once its attempt's VMs are up).
                reconcile_world(tx, &job.id, now, self.inner.config.world_settle_ms)?;
            }
            Ok(Ok(rank as u32))
        })?;
        let rank = rank?;
        // A rank must never be handed out twice: it is on disk before the agent hears it.
        self.flush()?;
        self.bump();
        let key = node_key(&a.job_id, a.number, rank);
        lock(&self.inner.live).insert(
            key,
            Live {
                tenant: String::new(),
                seen: Instant::now(),
                seen_ms: now,
                persisted_ms: now,
                phase: Phase::Waiting,
                restart: None,
                samples: None,
            },
        );
        tracing::info!(job = %a.job_id, attempt = a.number, rank, vm = %reg.vm_name, "agent registered");
        Ok(Registered { rank, num_nodes: a.vms, heartbeat_interval_ms: self.inner.config.heartbeat_interval_ms })
    }

    /// What a rank should do now; with `wait`, waits (up to the configured maximum) while the answer
    /// is "wait for the gang".
    pub async fn work(&self, a: &Attempt, rank: u32, wait: Duration) -> Result<WorkStatus, AgentError> {
        let deadline = Instant::now() + wait.min(Duration::from_millis(self.inner.config.max_wait_ms));
        let mut changes = self.subscribe();
        loop {
            let this = self.clone();
            let att = a.clone();
            let status = tokio::task::spawn_blocking(move || this.work_now(&att, rank))
                .await
                .map_err(|e| AgentError::Store(StoreError::Storage(format!("worker failed: {e}"))))??;
            let now = Instant::now();
            if status.order.is_some() || now >= deadline {
                return Ok(status);
            }
            let nap = (deadline - now).min(Duration::from_secs(1));
            tokio::select! {
                _ = changes.changed() => {}
                _ = tokio::time::sleep(nap) => {}
            }
        }
    }

    /// [`AgentService::work`] without waiting.
    pub fn work_now(&self, a: &Attempt, rank: u32) -> Result<WorkStatus, AgentError> {
        let store = &self.inner.store;
        let node = self.node(a, rank)?;
        let work = store.get::<AttemptWork>(&attempt_key(&a.job_id, a.number))?.unwrap_or_else(|| new_attempt_work(a));
        let job = store.get::<Job>(&a.job_id)?.ok_or_else(|| AgentError::NotFound(format!("no job {}", a.job_id)))?;
        let mut nodes = Vec::new();
        for r in 0..work.num_nodes {
            nodes.push(store.get::<NodeRecord>(&node_key(&a.job_id, a.number, r))?);
        }
        let registered = nodes.iter().filter(|n| n.as_ref().is_some_and(|n| !n.lost)).count() as u32;
        let world = self.world_of(&job)?;
        let action = decide::action(&job, &work, &node, world.as_ref());
        let order = match action {
            Action::Wait => None,
            Action::Stop { .. } => Some(WorkOrder {
                action,
                run: String::new(),
                setup: None,
                workdir: None,
                image: None,
                env: Default::default(),
            }),
            Action::Run { restart } => {
                // An elastic job's rank is its place in the job's world (every running attempt's
                // VMs); a gang's is its rank in its attempt.
                let (ips, rank): (Vec<String>, u32) = match &world {
                    Some(w) => (w.ips(), w.rank_of(&node).unwrap_or(rank)),
                    None => (
                        nodes.iter().map(|n| n.as_ref().map(|n| n.private_ip.clone()).unwrap_or_default()).collect(),
                        rank,
                    ),
                };
                let gpus_per_node = self.inner.catalog.size(&a.size).map_or_else(|| a.gpus / a.vms.max(1), |s| s.gpus);
                let priority = a.priority.to_string();
                let vars = RankVars {
                    job_id: &a.job_id,
                    attempt: a.number,
                    rank,
                    ips: &ips,
                    gpus_per_node,
                    region: &a.region,
                    priority: &priority,
                    restart,
                };
                let mut env = vars.env(&job.spec.envs);
                env.extend(self.dependency_env(&job)?);
                Some(WorkOrder {
                    action,
                    run: job.spec.run.clone().unwrap_or_default(),
                    setup: job.spec.setup.clone(),
                    workdir: job.spec.workdir.clone(),
                    image: job.spec.image.clone(),
                    env,
                })
            }
        };
        Ok(WorkStatus { registered, num_nodes: work.num_nodes, order })
    }

    /// What a pipeline job's ranks are told of its dependencies ([`dependency_env`]): each one's
    /// region and outputs from its records, or, once retention forgot it, from its pipeline's.
    fn dependency_env(&self, job: &Job) -> Result<std::collections::BTreeMap<String, String>, StoreError> {
        let Some(link) = &job.pipeline else { return Ok(Default::default()) };
        let store = &self.inner.store;
        let mut known: Vec<(String, Option<String>, std::collections::BTreeMap<String, String>)> = Vec::new();
        let mut pipeline = None;
        for d in &link.depends_on {
            if let Some(dep) = store.get::<Job>(&d.job_id)? {
                let region = store
                    .find(AttemptsBy::Job(&d.job_id))?
                    .into_iter()
                    .filter(|a| a.running_since_ms.is_some())
                    .max_by_key(|a| a.number)
                    .map(|a| a.region);
                known.push((d.name.clone(), region, dep.spec.outputs.clone()));
                continue;
            }
            if pipeline.is_none() {
                pipeline = store.get::<Pipeline>(&link.pipeline_id)?;
            }
            let kept = pipeline.as_ref().and_then(|p| p.jobs.iter().find(|m| m.job_id == d.job_id)?.ended.clone());
            match kept {
                Some(e) => known.push((d.name.clone(), e.last_region, e.outputs)),
                None => known.push((d.name.clone(), None, Default::default())),
            }
        }
        let vars: Vec<DependencyVars<'_>> = known
            .iter()
            .map(|(name, region, outputs)| DependencyVars { name, region: region.as_deref(), outputs })
            .collect();
        Ok(dependency_env(&vars))
    }

    /// The job's world, for an elastic job ([`decide::is_elastic`]); `None` otherwise.
    fn world_of(&self, job: &Job) -> Result<Option<World>, StoreError> {
        if !decide::is_elastic(job) {
            return Ok(None);
        }
        Ok(self.inner.store.get::<JobWork>(&job.id)?.and_then(|w| w.world))
    }

    fn node(&self, a: &Attempt, rank: u32) -> Result<NodeRecord, AgentError> {
        self.inner.store.get::<NodeRecord>(&node_key(&a.job_id, a.number, rank))?.ok_or_else(|| {
            AgentError::NotFound(format!("rank {rank} of attempt {} is not registered; register first", a.number))
        })
    }

    /// Stores a batch of log lines (within the rank's cap) and answers once it is on disk.
    pub fn ingest_logs(&self, a: &Attempt, rank: u32, batch: LogBatch) -> Result<LogAck, AgentError> {
        let mut errs = FieldErrors::default();
        if batch.boot_id.is_empty() || batch.boot_id.len() > 64 {
            errs.push("boot_id", "1 to 64 characters");
        }
        if batch.batch == 0 {
            errs.push("batch", "batches are numbered from 1");
        }
        if batch.lines.len() > 20_000 {
            errs.push("lines", "at most 20000 lines per batch");
        }
        if !errs.is_empty() {
            return Err(AgentError::Invalid(errs));
        }
        let max_line = self.inner.config.max_line_bytes;
        let lines: Vec<LogLine> = batch
            .lines
            .into_iter()
            .map(|mut l| {
                l.text = cut_line(&l.text, max_line);
                l
            })
            .collect();
        let cap = self.inner.config.log_bytes_per_rank;
        let key = node_key(&a.job_id, a.number, rank);
        let (ack, stored): (Refusable<LogAck>, u64) = self.inner.store.transaction(|tx| {
            let Some(mut node) = tx.get::<NodeRecord>(&key)? else {
                return Ok((Err(AgentError::NotFound(format!("rank {rank} is not registered; register first"))), 0));
            };
            if node.log_boot_id == batch.boot_id && batch.batch <= node.last_batch {
                return Ok((Ok(LogAck { batch: node.last_batch, truncated: node.log_truncated }), 0));
            }
            node.log_boot_id = batch.boot_id.clone();
            node.last_batch = batch.batch;
            let mut keep = Vec::new();
            let mut bytes = 0u64;
            if !node.log_truncated {
                for line in &lines {
                    let size = line.text.len() as u64 + 1;
                    if node.log_bytes + size > cap {
                        node.log_truncated = true;
                        keep.push(LogLine {
                            at_ms: line.at_ms,
                            stream: LogStream::Agent,
                            text: format!(
                                "[spillway: this rank's log reached its cap of {cap} bytes; later lines are not kept \
                                 (the exit event has the last lines)]"
                            ),
                        });
                        break;
                    }
                    node.log_bytes += size;
                    bytes += size;
                    keep.push(line.clone());
                }
            }
            if !keep.is_empty() {
                let mut jw = tx.get::<JobWork>(&a.job_id)?.unwrap_or_else(|| JobWork::new(&a.job_id));
                tx.put(&LogChunk {
                    job_id: a.job_id.clone(),
                    seq: jw.next_log_seq,
                    attempt: a.number,
                    rank,
                    restart: batch.restart,
                    lines: keep,
                })?;
                jw.next_log_seq += 1;
                tx.put(&jw)?;
            }
            tx.put(&node)?;
            Ok((Ok(LogAck { batch: node.last_batch, truncated: node.log_truncated }), bytes))
        })?;
        let ack = ack?;
        self.flush()?;
        if stored > 0 {
            self.inner.metrics.log_bytes.inc_by(stored);
            self.bump();
        }
        Ok(ack)
    }

    /// Takes a heartbeat: remembers it (written to the store now and then), updates the GPU gauges,
    /// watches for idleness, and answers what the rank should do.
    pub fn heartbeat(&self, a: &Attempt, rank: u32, hb: Heartbeat) -> Result<Action, AgentError> {
        if let Some(samples) = &hb.gpus {
            let mut errs = FieldErrors::default();
            if samples.len() > 64 {
                errs.push("gpus", "at most 64 GPUs");
            }
            for (i, s) in samples.iter().enumerate() {
                if !(s.utilization_percent.is_finite() && (0.0..=100.0).contains(&s.utilization_percent)) {
                    errs.push(format!("gpus[{i}].utilization_percent"), "a percentage from 0 to 100");
                }
            }
            if !errs.is_empty() {
                return Err(AgentError::Invalid(errs));
            }
        }
        let now = self.now();
        let store = &self.inner.store;
        let key = node_key(&a.job_id, a.number, rank);
        let node = self.node(a, rank)?;
        let akey = attempt_key(&a.job_id, a.number);
        let work = store.get::<AttemptWork>(&akey)?.unwrap_or_else(|| new_attempt_work(a));
        let job = store.get::<Job>(&a.job_id)?.ok_or_else(|| AgentError::NotFound(format!("no job {}", a.job_id)))?;
        self.inner.metrics.heartbeats.inc();
        let persist = {
            let mut live = lock(&self.inner.live);
            let entry = live.entry(key.clone()).or_insert_with(|| Live {
                tenant: String::new(),
                seen: Instant::now(),
                seen_ms: now,
                persisted_ms: node.last_heartbeat_ms,
                phase: node.phase,
                restart: node.restart,
                samples: None,
            });
            let changed = entry.phase != hb.phase || entry.restart != hb.restart;
            entry.tenant.clone_from(&job.spec.tenant);
            entry.seen = Instant::now();
            entry.seen_ms = now;
            entry.phase = hb.phase;
            entry.restart = hb.restart;
            entry.samples = hb.gpus.clone();
            let due = changed || now - entry.persisted_ms >= self.inner.config.heartbeat_persist_ms;
            if due {
                entry.persisted_ms = now;
            }
            due
        };
        if persist {
            store.transaction(|tx| {
                if let Some(mut n) = tx.get::<NodeRecord>(&key)? {
                    n.last_heartbeat_ms = now;
                    n.phase = hb.phase;
                    n.restart = hb.restart.or(n.restart);
                    n.gpu_samples = hb.gpus.clone();
                    tx.put(&n)?;
                }
                Ok(())
            })?;
        }
        self.update_gauges(&job.spec.tenant, a, rank, hb.gpus.as_deref());
        self.watch_idle(a, &job, &work, now)?;
        self.sweep();
        let world = self.world_of(&job)?;
        Ok(decide::action(&job, &work, &node, world.as_ref()))
    }

    fn update_gauges(&self, tenant: &str, a: &Attempt, rank: u32, samples: Option<&[GpuSample]>) {
        let m = &self.inner.metrics;
        for s in samples.unwrap_or_default() {
            let label = GpuLabel {
                tenant: tenant.to_string(),
                job: a.job_id.clone(),
                attempt: a.number.to_string(),
                rank: rank.to_string(),
                gpu: s.index.to_string(),
            };
            m.gpu_memory_used.get_or_create(&label).set(s.memory_used_mib as f64 * 1024.0 * 1024.0);
            m.gpu_utilization.get_or_create(&label).set(s.utilization_percent);
        }
    }

    /// Forgets ranks not heard from for six heartbeat intervals: their gauges go, and the count of
    /// connected agents follows. Runs at most every few seconds, from the heartbeat path.
    fn sweep(&self) {
        let interval = Duration::from_millis(self.inner.config.heartbeat_interval_ms.max(1));
        {
            let mut last = lock(&self.inner.last_sweep);
            if last.elapsed() < interval.min(Duration::from_secs(5)) {
                return;
            }
            *last = Instant::now();
        }
        let stale_after = interval * 6;
        let mut live = lock(&self.inner.live);
        let stale: Vec<(String, Live)> =
            live.iter().filter(|(_, l)| l.seen.elapsed() > stale_after).map(|(k, l)| (k.clone(), l.clone())).collect();
        for (key, l) in stale {
            live.remove(&key);
            let mut parts = key.rsplitn(3, '/');
            let (Some(rank), Some(attempt), Some(job)) = (parts.next(), parts.next(), parts.next()) else { continue };
            let (Ok(rank), Ok(attempt)) = (rank.parse::<u32>(), attempt.parse::<u32>()) else { continue };
            for s in l.samples.unwrap_or_default() {
                let label = GpuLabel {
                    tenant: l.tenant.clone(),
                    job: job.to_string(),
                    attempt: attempt.to_string(),
                    rank: rank.to_string(),
                    gpu: s.index.to_string(),
                };
                self.inner.metrics.gpu_utilization.remove(&label);
                self.inner.metrics.gpu_memory_used.remove(&label);
            }
        }
        self.inner.metrics.connected.set(live.len() as i64);
    }

    /// An `idle` event once every GPU of the attempt has stayed below the threshold for the job's
    /// `idle_minutes` (only GPUs that report count; a rank without telemetry keeps the job busy);
    /// with `on_idle = "stop"` the job ends and its VMs are released.
    fn watch_idle(&self, a: &Attempt, job: &Job, work: &AttemptWork, now: i64) -> Result<(), AgentError> {
        let Some(minutes) = job.spec.idle_minutes else { return Ok(()) };
        if work.idle_reported || work.started_at_ms.is_none() || job.state.is_final() {
            return Ok(());
        }
        let threshold = self.inner.config.idle_threshold_percent;
        let all_idle = {
            let live = lock(&self.inner.live);
            (0..work.num_nodes).all(|r| {
                live.get(&node_key(&a.job_id, a.number, r))
                    .and_then(|l| l.samples.as_ref())
                    .is_some_and(|s| !s.is_empty() && s.iter().all(|g| g.utilization_percent < threshold))
            })
        };
        let akey = attempt_key(&a.job_id, a.number);
        let since = {
            let mut idle = lock(&self.inner.idle_since);
            if !all_idle {
                idle.remove(&akey);
                return Ok(());
            }
            *idle.entry(akey.clone()).or_insert(now)
        };
        if now - since < i64::from(minutes) * 60_000 {
            return Ok(());
        }
        let stop = job.spec.on_idle == Some(OnIdle::Stop);
        let ended = self.inner.store.transaction(|tx| {
            let Some(mut w) = tx.get::<AttemptWork>(&akey)? else { return Ok(false) };
            let Some(mut j) = tx.get::<Job>(&a.job_id)? else { return Ok(false) };
            if w.idle_reported || j.state.is_final() {
                return Ok(false);
            }
            w.idle_reported = true;
            let what = format!("every GPU of attempt {} below {threshold}% utilisation for {minutes} min", a.number);
            record_event(
                tx,
                &j,
                now,
                EventKind::Idle,
                if stop { format!("{what}; stopping the job (on_idle = \"stop\")") } else { what.clone() },
                serde_json::json!({"attempt": a.number, "idle_minutes": minutes}),
            )?;
            if stop {
                w.stop = Some("the job was stopped because its GPUs were idle".into());
                j.set_state(JobState::Cancelled, now);
                j.end_reason = Some(format!("stopped: {what} (on_idle = \"stop\")"));
                tx.put(&j)?;
                record_event(
                    tx,
                    &j,
                    now,
                    EventKind::Cancelled,
                    j.end_reason.clone().unwrap_or_default(),
                    serde_json::Value::Null,
                )?;
            }
            tx.put(&w)?;
            Ok(stop)
        })?;
        self.flush()?;
        self.bump();
        if ended {
            self.inner.wake.notify_one();
        }
        Ok(())
    }

    /// Records what happened on a rank and, for exits and notices, decides what follows.
    pub fn report(&self, a: &Attempt, rank: u32, report: Report) -> Result<(), AgentError> {
        let now = self.now();
        let key = node_key(&a.job_id, a.number, rank);
        let akey = attempt_key(&a.job_id, a.number);
        if let Report::RunStarted { startup_ms, .. } = &report {
            self.inner.metrics.startup_seconds.observe(*startup_ms as f64 / 1000.0);
        }
        let tail_field = |tail: &[String]| -> Vec<String> {
            let max = self.inner.config.max_line_bytes;
            tail.iter().rev().take(super::protocol::TAIL_LINES).rev().map(|l| cut_line(l, max)).collect()
        };
        let ends_job: Refusable<bool> = self.inner.store.transaction(|tx| {
            let Some(mut node) = tx.get::<NodeRecord>(&key)? else {
                return Ok(Err(AgentError::NotFound(format!("rank {rank} is not registered; register first"))));
            };
            node.last_heartbeat_ms = now;
            match &report {
                Report::SetupStarted { restart } => {
                    node.phase = Phase::Setup;
                    node.restart = Some(*restart);
                    tx.put(&node)?;
                    Ok(Ok(false))
                }
                Report::RunStarted { restart, startup_ms } => {
                    node.phase = Phase::Running;
                    node.restart = Some(*restart);
                    node.run_started_at_ms = Some(now);
                    node.startup_ms = Some(*startup_ms);
                    tx.put(&node)?;
                    Ok(Ok(false))
                }
                Report::Notice { event_id, event_type, not_before } => {
                    let first = node.notice.is_none();
                    node.notice = Some(NoticeRecord {
                        event_id: event_id.clone(),
                        event_type: event_type.clone(),
                        not_before: not_before.clone(),
                        at_ms: now,
                    });
                    tx.put(&node)?;
                    if !first {
                        return Ok(Ok(false));
                    }
                    let (Some(mut work), Some(job)) = (tx.get::<AttemptWork>(&akey)?, tx.get::<Job>(&a.job_id)?) else {
                        return Ok(Ok(false));
                    };
                    work.notice_at_ms.get_or_insert(now);
                    let gang = decide::is_gang(&job);
                    if gang && work.stop.is_none() {
                        work.stop = Some(format!(
                            "{event_type} notice for {} (rank {rank}): every rank stops so the work can checkpoint; \
                             it resumes on a new placement",
                            node.vm_name
                        ));
                    }
                    tx.put(&work)?;
                    record_event(
                        tx,
                        &job,
                        now,
                        EventKind::PreemptionNotice,
                        format!(
                            "{event_type} notice for {} (attempt {}, rank {rank}){}; SIGTERM sent to the work",
                            node.vm_name,
                            a.number,
                            not_before.as_deref().map(|t| format!(", not before {t}")).unwrap_or_default()
                        ),
                        serde_json::json!({"attempt": a.number, "rank": rank, "event_type": event_type}),
                    )?;
                    if decide::is_elastic(&job) {
                        // The noticed VM leaves the world; the others start again without it.
                        reconcile_world(tx, &job.id, now, self.inner.config.world_settle_ms)?;
                    }
                    Ok(Ok(false))
                }
                Report::Exited { restart, script, code, signal, reason, message, tail } => {
                    let exit = ExitRecord {
                        restart: *restart,
                        script: *script,
                        code: *code,
                        signal: *signal,
                        reason: *reason,
                        message: message.clone(),
                        at_ms: now,
                    };
                    node.phase = Phase::Exited;
                    node.exit = Some(exit.clone());
                    tx.put(&node)?;
                    self.decide_exit(tx, a, rank, &exit, &tail_field(tail), now)
                }
            }
        })?;
        let ends_job = ends_job?;
        if matches!(report, Report::Exited { .. } | Report::Notice { .. }) {
            self.flush()?;
        }
        if let Some(l) = lock(&self.inner.live).get_mut(&key) {
            l.seen = Instant::now();
            l.seen_ms = now;
        }
        self.bump();
        if ends_job {
            self.inner.wake.notify_one();
        }
        Ok(())
    }

    /// The verdict of an exit (inside its transaction); true when it ended the job.
    fn decide_exit(
        &self,
        tx: &mut Tx,
        a: &Attempt,
        rank: u32,
        exit: &ExitRecord,
        tail: &[String],
        now: i64,
    ) -> Result<Refusable<bool>, TxAbort> {
        let akey = attempt_key(&a.job_id, a.number);
        let (Some(mut work), Some(mut job)) = (tx.get::<AttemptWork>(&akey)?, tx.get::<Job>(&a.job_id)?) else {
            return Ok(Ok(false));
        };
        if decide::is_elastic(&job) {
            return decide_world_exit(tx, job, a, rank, exit, tail, now);
        }
        let nodes = read_nodes(tx, &a.job_id, a.number, work.num_nodes)?;
        let mut jw = tx.get::<JobWork>(&job.id)?.unwrap_or_else(|| JobWork::new(&job.id));
        // Other attempts still running work, for splittable jobs that must all finish.
        let mut others_busy = false;
        for n in 1..=job.attempts {
            if n == a.number {
                continue;
            }
            let Some(other) = tx.get::<Attempt>(&attempt_key(&job.id, n))? else { continue };
            if !other.is_active() {
                continue;
            }
            if let Some(w) = tx.get::<AttemptWork>(&attempt_key(&job.id, n))?
                && w.restart.is_some()
                && w.stop.is_none()
                && !w.done
            {
                others_busy = true;
            }
        }
        let verdict = decide::on_exit(&job, &jw, &work, &nodes, rank, exit, others_busy);
        let data = serde_json::json!({
            "attempt": a.number, "rank": rank, "restart": exit.restart, "script": exit.script,
            "code": exit.code, "signal": exit.signal, "tail": tail,
        });
        let ended = match verdict {
            ExitVerdict::Nothing => false,
            ExitVerdict::RankDone => {
                if nodes
                    .iter()
                    .flatten()
                    .all(|n| n.exit.as_ref().is_some_and(|e| e.restart == exit.restart && e.succeeded()))
                {
                    work.done = true;
                    tx.put(&work)?;
                }
                false
            }
            ExitVerdict::Succeed => {
                work.done = true;
                tx.put(&work)?;
                // It ran, whether or not the control loop saw it running before it ended.
                let why = format!(
                    "every rank of attempt {} exited 0 ({} rank{})",
                    a.number,
                    work.num_nodes,
                    if work.num_nodes == 1 { "" } else { "s" }
                );
                end_succeeded(tx, &mut job, why, work.started_at_ms.unwrap_or(now), now, data)?;
                true
            }
            ExitVerdict::Restart => {
                let restart = jw.next_restart;
                jw.next_restart += 1;
                jw.failures += 1;
                work.failed_restart = Some(exit.restart);
                work.restart = Some(restart);
                work.done = false;
                tx.put(&jw)?;
                tx.put(&work)?;
                record_event(
                    tx,
                    &job,
                    now,
                    EventKind::Restarted,
                    with_tail(
                        tail,
                        format!(
                            "{}; starting run again (restart {} of at most {}, SPILLWAY_RESTART={restart})",
                            exit.describe(rank),
                            jw.failures,
                            job.spec.max_restarts()
                        ),
                    ),
                    data,
                )?;
                false
            }
            ExitVerdict::Fail => {
                jw.failures += 1;
                work.failed_restart = Some(exit.restart);
                work.stop = Some("the job failed".into());
                tx.put(&jw)?;
                tx.put(&work)?;
                end_failed(tx, &mut job, exit.describe(rank), work.started_at_ms.unwrap_or(now), now, tail, data)?;
                true
            }
            ExitVerdict::AlreadyCounted => {
                record_event(tx, &job, now, EventKind::RankExited, with_tail(tail, exit.describe(rank)), data)?;
                false
            }
        };
        Ok(Ok(ended))
    }

    /// A page of a job's log from `from`, at most `max_lines` lines and about `max_bytes` bytes.
    pub fn read_logs(
        &self,
        job_id: &str,
        filter: LogFilter,
        from: LogCursor,
        max_lines: usize,
        max_bytes: usize,
    ) -> Result<LogPage, StoreError> {
        let store = &self.inner.store;
        let end = store.get::<JobWork>(job_id)?.map_or(0, |w| w.next_log_seq);
        let mut lines = Vec::new();
        let mut bytes = 0usize;
        let mut seq = from.seq;
        while seq < end {
            let Some(chunk) = store.get::<LogChunk>(&chunk_key(job_id, seq))? else {
                seq += 1;
                continue;
            };
            if filter.wants(&chunk) {
                let skip = if seq == from.seq { from.line } else { 0 };
                for (i, line) in chunk.lines.iter().enumerate().skip(skip) {
                    if lines.len() >= max_lines || bytes >= max_bytes {
                        return Ok(LogPage { lines, next: LogCursor { seq, line: i }.to_string(), more: true });
                    }
                    bytes += line.text.len();
                    lines.push(LogEntry {
                        attempt: chunk.attempt,
                        rank: chunk.rank,
                        restart: chunk.restart,
                        stream: line.stream,
                        at_ms: line.at_ms,
                        text: line.text.clone(),
                        cursor: LogCursor { seq, line: i + 1 }.to_string(),
                    });
                }
            }
            seq += 1;
        }
        Ok(LogPage { lines, next: LogCursor { seq: seq.max(from.seq), line: 0 }.to_string(), more: false })
    }

    /// Looks for VMs that went silent and attempts whose agents never came: a rank without a
    /// heartbeat for `heartbeat_timeout_ms` is declared lost (its rank may be taken by a new VM; a
    /// gang's other ranks are stopped), and a running attempt of a job with `run` still missing
    /// agents `registration_timeout_ms` after it started is marked. Both mark the attempt's work
    /// ([`AttemptWork::needs_replacement`]) for the control loop, which places the work anew.
    /// Returns how many ranks were declared lost. Run it every few seconds, on the leader only.
    ///
    /// Its writes go through the store fenced by `fence` (the leader's, [`state::Store::fenced`]):
    /// a server that lost the lease while sweeping (paused, cut off) writes nothing, and gets
    /// [`StoreError::Fenced`], even if it still believes it leads. Otherwise two servers could both
    /// declare a VM lost and the new leader's placements race a deposed one's verdicts.
    pub fn sweep_silent(&self, fence: &state::Fence) -> Result<u32, StoreError> {
        let now = self.now();
        let cfg = &self.inner.config;
        let store = &self.inner.store;
        let writer = store.fenced(fence);
        let mut lost = 0;
        let mut changed = false;
        let mut elastic = std::collections::BTreeSet::new();
        for a in store.find(AttemptsBy::State(AttemptState::Running))? {
            let Some(job) = store.get::<Job>(&a.job_id)? else { continue };
            if job.state.is_final() {
                continue;
            }
            if decide::is_elastic(&job) {
                elastic.insert(job.id.clone());
            }
            let akey = attempt_key(&a.job_id, a.number);
            let work = store.get::<AttemptWork>(&akey)?;
            let num_nodes = work.as_ref().map_or(a.vms.max(1), |w| w.num_nodes);
            let mut silent = Vec::new();
            let mut registered = 0;
            for rank in 0..num_nodes {
                let key = node_key(&a.job_id, a.number, rank);
                let Some(node) = store.get::<NodeRecord>(&key)? else { continue };
                if node.lost {
                    continue;
                }
                registered += 1;
                // The latest of what this server heard and what the store says: with several servers
                // on one store an agent may report to another one, and this server's memory of it
                // is then older than the store.
                let seen = lock(&self.inner.live).get(&key).map_or(0, |l| l.seen_ms);
                let last = seen.max(node.last_heartbeat_ms).max(self.inner.started_ms);
                if now - last > cfg.heartbeat_timeout_ms {
                    silent.push((rank, node.vm_name.clone(), now - last));
                }
            }
            let since = a.running_since_ms.unwrap_or(a.started_at_ms).max(self.inner.started_ms);
            let unregistered = job.spec.runs_work()
                && registered < num_nodes
                && now - since > cfg.registration_timeout_ms
                && work.as_ref().is_none_or(|w| w.unregistered_at_ms.is_none() && w.restart.is_none());
            if silent.is_empty() && !unregistered {
                continue;
            }
            changed = true;
            lost += silent.len() as u32;
            let gang = decide::is_gang(&job);
            writer.transaction(|tx| {
                let Some(job) = tx.get::<Job>(&a.job_id)? else { return Ok(()) };
                let mut w = tx.get::<AttemptWork>(&akey)?.unwrap_or_else(|| new_attempt_work(&a));
                for (rank, vm, quiet_ms) in &silent {
                    let key = node_key(&a.job_id, a.number, *rank);
                    let Some(mut node) = tx.get::<NodeRecord>(&key)? else { continue };
                    node.lost = true;
                    tx.put(&node)?;
                    w.lost_at_ms.get_or_insert(now);
                    if gang && w.stop.is_none() && job.spec.runs_work() {
                        w.stop = Some(format!("rank {rank} ({vm}) was lost: every rank stops; the work moves"));
                    }
                    record_event(
                        tx,
                        &job,
                        now,
                        EventKind::VmLost,
                        format!(
                            "rank {rank} of attempt {} ({vm}) sent no heartbeat for {:.0} s: its VM counts as lost",
                            a.number,
                            *quiet_ms as f64 / 1000.0
                        ),
                        serde_json::json!({"attempt": a.number, "rank": rank}),
                    )?;
                }
                if unregistered && w.unregistered_at_ms.is_none() {
                    w.unregistered_at_ms = Some(now);
                    record_event(
                        tx,
                        &job,
                        now,
                        EventKind::AgentsMissing,
                        format!(
                            "attempt {}: {registered} of {num_nodes} VMs started the agent within {:.0} min of \
                             running (does the image have the spillway binary, and can the VMs reach the \
                             scheduler?)",
                            a.number,
                            cfg.registration_timeout_ms as f64 / 60_000.0
                        ),
                        serde_json::json!({"attempt": a.number, "registered": registered}),
                    )?;
                }
                tx.put(&w)?;
                Ok(())
            })?;
            for (rank, ..) in &silent {
                lock(&self.inner.live).remove(&node_key(&a.job_id, a.number, *rank));
            }
        }
        // Elastic worlds follow what changed since: VMs lost above, attempts the control loop
        // retired or replaced, registered VMs that waited long enough for the rest of theirs.
        for job_id in elastic {
            let settle = cfg.world_settle_ms;
            changed |= writer.transaction(|tx| reconcile_world(tx, &job_id, now, settle))?;
        }
        if changed {
            self.flush()?;
            self.bump();
            self.inner.wake.notify_one();
        }
        Ok(lost)
    }

    /// Every rank of a job, with the freshest heartbeat and GPU samples the server has.
    pub fn nodes(&self, job_id: &str) -> Result<Vec<NodeView>, StoreError> {
        let mut nodes = self.inner.store.find(NodesOfJob(job_id))?;
        nodes.sort_by_key(|n| (n.attempt, n.rank));
        let world = self.inner.store.get::<JobWork>(job_id)?.and_then(|w| w.world);
        let live = lock(&self.inner.live);
        Ok(nodes
            .into_iter()
            .map(|n| {
                let l = live.get(&node_key(&n.job_id, n.attempt, n.rank));
                NodeView {
                    world_rank: world.as_ref().and_then(|w| w.rank_of(&n)),
                    attempt: n.attempt,
                    rank: n.rank,
                    vm_name: n.vm_name,
                    hostname: n.hostname,
                    private_ip: n.private_ip,
                    phase: l.map_or(n.phase, |l| l.phase).max_by_report(n.phase),
                    restart: n.restart,
                    exit_code: n.exit.as_ref().and_then(|e| e.code),
                    exit_signal: n.exit.as_ref().and_then(|e| e.signal),
                    exit_reason: n.exit.as_ref().map(|e| e.reason),
                    exit_message: n.exit.as_ref().and_then(|e| e.message.clone()),
                    lost: n.lost,
                    notice: n.notice.map(|x| x.event_type),
                    last_heartbeat_ms: l.map_or(n.last_heartbeat_ms, |l| l.seen_ms.max(n.last_heartbeat_ms)),
                    gpus: n.gpus,
                    gpu_utilization: l.map_or(n.gpu_samples, |l| l.samples.clone()),
                    log_bytes: n.log_bytes,
                    log_truncated: n.log_truncated,
                    run_started_at_ms: n.run_started_at_ms,
                    startup_ms: n.startup_ms,
                }
            })
            .collect())
    }
}

trait PhaseOrder {
    /// The stored phase when a report moved the rank on after its last heartbeat (an exit report
    /// is newer than the heartbeat that said "running").
    fn max_by_report(self, stored: Phase) -> Phase;
}

impl PhaseOrder for Phase {
    fn max_by_report(self, stored: Phase) -> Phase {
        if stored == Phase::Exited { stored } else { self }
    }
}

fn new_attempt_work(a: &Attempt) -> AttemptWork {
    AttemptWork {
        job_id: a.job_id.clone(),
        attempt: a.number,
        num_nodes: a.vms.max(1),
        started_at_ms: None,
        restart: None,
        stop: None,
        done: false,
        failed_restart: None,
        notice_at_ms: None,
        idle_reported: false,
        lost_at_ms: None,
        unregistered_at_ms: None,
    }
}

/// Brings an elastic job's world in line with its attempts' ranks ([`decide::desired_world`]): when
/// its members change, every member runs a new start (`SPILLWAY_RESTART`, not counted against
/// `max_restarts`) with the new world, and one event says why. Returns true when it changed.
fn reconcile_world(tx: &mut Tx, job_id: &str, now: i64, settle_ms: i64) -> Result<bool, TxAbort> {
    let Some(job) = tx.get::<Job>(job_id)? else { return Ok(false) };
    if job.state.is_final() || !decide::is_elastic(&job) {
        return Ok(false);
    }
    let mut jw = tx.get::<JobWork>(job_id)?.unwrap_or_else(|| JobWork::new(job_id));
    let mut seen: Vec<(Attempt, AttemptWork, Vec<Option<NodeRecord>>)> = Vec::new();
    for n in 1..=job.attempts {
        let Some(a) = tx.get::<Attempt>(&attempt_key(job_id, n))? else { continue };
        let work = tx.get::<AttemptWork>(&attempt_key(job_id, n))?.unwrap_or_else(|| new_attempt_work(&a));
        let nodes = if a.is_active() { read_nodes(tx, job_id, n, work.num_nodes)? } else { Vec::new() };
        seen.push((a, work, nodes));
    }
    let views: Vec<decide::AttemptRanks<'_>> = seen
        .iter()
        .map(|(a, w, nodes)| decide::AttemptRanks {
            number: a.number,
            region: &a.region,
            state: a.state,
            stopped: w.stop.is_some(),
            nodes,
        })
        .collect();
    let members = decide::desired_world(jw.world.as_ref(), &views, now, settle_ms);
    if members.is_empty() || jw.world.as_ref().is_some_and(|w| w.members == members) {
        // Nobody to run (the job waits for a new placement), or nothing changed.
        return Ok(false);
    }
    let restart = jw.next_restart;
    jw.next_restart += 1;
    let world = World { members, restart, started_at_ms: now, failed_restart: None };
    let (kind, message) = match &jw.world {
        None => (
            EventKind::WorkStarted,
            format!(
                "{} VMs registered ({}); run starts as one world of {} ranks (SPILLWAY_RESTART={restart})",
                world.members.len(),
                attempts_phrase(&world),
                world.members.len()
            ),
        ),
        Some(old) => (
            EventKind::WorldChanged,
            format!(
                "world changed: {} → {} VMs ({}); every rank starts again with the new world \
                 (SPILLWAY_RESTART={restart}, not counted against max_restarts; the work resumes from its checkpoints)",
                old.members.len(),
                world.members.len(),
                decide::why_world_changed(&old.members, &world.members, &views)
            ),
        ),
    };
    let data = serde_json::json!({
        "restart": restart,
        "num_nodes": world.members.len(),
        "from": jw.world.as_ref().map(|w| w.members.len()),
        "attempts": world.attempts(),
    });
    for (a, w, _) in &seen {
        if a.is_active() && world.members.iter().any(|m| m.attempt == a.number) {
            let mut w = w.clone();
            w.restart = Some(restart);
            w.started_at_ms.get_or_insert(now);
            w.done = false;
            tx.put(&w)?;
        }
    }
    jw.world = Some(world);
    tx.put(&jw)?;
    record_event(tx, &job, now, kind, message, data)?;
    Ok(true)
}

/// "attempt 1" or "attempts 1, 2": where a world's VMs are.
fn attempts_phrase(world: &World) -> String {
    let list: Vec<String> = world.attempts().iter().map(u32::to_string).collect();
    format!("attempt{} {}", if list.len() == 1 { "" } else { "s" }, list.join(", "))
}

/// The verdict of an exit of an elastic job's rank, applied in its transaction: only the current
/// world's current start counts ([`decide::on_world_exit`]). True when it ended the job.
fn decide_world_exit(
    tx: &mut Tx,
    mut job: Job,
    a: &Attempt,
    rank: u32,
    exit: &ExitRecord,
    tail: &[String],
    now: i64,
) -> Result<Refusable<bool>, TxAbort> {
    let mut jw = tx.get::<JobWork>(&job.id)?.unwrap_or_else(|| JobWork::new(&job.id));
    let Some(mut world) = jw.world.clone() else { return Ok(Ok(false)) };
    let Some(node) = tx.get::<NodeRecord>(&node_key(&a.job_id, a.number, rank))? else { return Ok(Ok(false)) };
    let world_rank = world.rank_of(&node);
    let mut members = Vec::with_capacity(world.members.len());
    for m in &world.members {
        let n = tx.get::<NodeRecord>(&node_key(&job.id, m.attempt, m.rank))?;
        members.push(n.filter(|n| m.is(n)));
    }
    let verdict = decide::on_world_exit(&job, &jw, &world, &members, world_rank.is_some(), exit);
    let shown = world_rank.unwrap_or(rank);
    let data = serde_json::json!({
        "attempt": a.number, "rank": rank, "world_rank": world_rank, "restart": exit.restart,
        "script": exit.script, "code": exit.code, "signal": exit.signal, "tail": tail,
    });
    let n = world.members.len();
    let ended = match verdict {
        ExitVerdict::Nothing | ExitVerdict::RankDone => false,
        ExitVerdict::Succeed => {
            for number in world.attempts() {
                if let Some(mut w) = tx.get::<AttemptWork>(&attempt_key(&job.id, number))? {
                    w.done = true;
                    tx.put(&w)?;
                }
            }
            let why = format!(
                "every rank of the job's world exited 0 ({n} rank{} over {})",
                if n == 1 { "" } else { "s" },
                attempts_phrase(&world)
            );
            end_succeeded(tx, &mut job, why, world.started_at_ms, now, data)?;
            true
        }
        ExitVerdict::Restart => {
            let restart = jw.next_restart;
            jw.next_restart += 1;
            jw.failures += 1;
            world.failed_restart = Some(exit.restart);
            world.restart = restart;
            world.started_at_ms = now;
            for number in world.attempts() {
                if let Some(mut w) = tx.get::<AttemptWork>(&attempt_key(&job.id, number))? {
                    w.restart = Some(restart);
                    w.done = false;
                    tx.put(&w)?;
                }
            }
            jw.world = Some(world);
            tx.put(&jw)?;
            record_event(
                tx,
                &job,
                now,
                EventKind::Restarted,
                with_tail(
                    tail,
                    format!(
                        "{}; every rank of the world starts again (restart {} of at most {}, SPILLWAY_RESTART={restart})",
                        exit.describe(shown),
                        jw.failures,
                        job.spec.max_restarts()
                    ),
                ),
                data,
            )?;
            false
        }
        ExitVerdict::Fail => {
            jw.failures += 1;
            world.failed_restart = Some(exit.restart);
            jw.world = Some(world);
            tx.put(&jw)?;
            end_failed(tx, &mut job, exit.describe(shown), now, now, tail, data)?;
            true
        }
        ExitVerdict::AlreadyCounted => {
            record_event(tx, &job, now, EventKind::RankExited, with_tail(tail, exit.describe(shown)), data)?;
            false
        }
    };
    Ok(Ok(ended))
}

/// A rank's exit message with the last lines of its output, when there are any.
fn with_tail(tail: &[String], msg: String) -> String {
    if tail.is_empty() { msg } else { format!("{msg}; last lines:\n{}", tail.join("\n")) }
}

/// Ends `job` succeeded (it ran from `ran_since`, whether or not the control loop saw it running).
fn end_succeeded(
    tx: &mut Tx,
    job: &mut Job,
    why: String,
    ran_since: i64,
    now: i64,
    data: serde_json::Value,
) -> Result<(), TxAbort> {
    job.first_running_at_ms.get_or_insert(ran_since);
    job.set_state(JobState::Succeeded, now);
    job.end_reason = Some(why.clone());
    tx.put(job)?;
    record_event(tx, job, now, EventKind::Succeeded, why, data)?;
    Ok(())
}

/// Ends `job` failed by a rank's exit (`why`), saying how many restarts it was allowed.
fn end_failed(
    tx: &mut Tx,
    job: &mut Job,
    why: String,
    ran_since: i64,
    now: i64,
    tail: &[String],
    data: serde_json::Value,
) -> Result<(), TxAbort> {
    let restarts = job.spec.max_restarts();
    let summary = if restarts > 0 {
        format!("{why} (after {restarts} restart{})", if restarts == 1 { "" } else { "s" })
    } else {
        why
    };
    job.first_running_at_ms.get_or_insert(ran_since);
    job.set_state(JobState::Failed, now);
    job.end_reason = Some(summary.clone());
    job.last_failure = Some(summary.clone());
    tx.put(job)?;
    record_event(tx, job, now, EventKind::Failed, with_tail(tail, summary), data)?;
    Ok(())
}

fn read_nodes(tx: &mut Tx, job_id: &str, attempt: u32, n: u32) -> Result<Vec<Option<NodeRecord>>, TxAbort> {
    (0..n).map(|r| tx.get::<NodeRecord>(&node_key(job_id, attempt, r))).collect()
}

fn check_registration(reg: &Registration) -> Result<(), AgentError> {
    let mut errs = FieldErrors::default();
    let printable = |s: &str| s.chars().all(|c| !c.is_control());
    if reg.vm_name.is_empty() || reg.vm_name.len() > 128 || !printable(&reg.vm_name) {
        errs.push("vm_name", "1 to 128 printable characters");
    }
    if reg.hostname.len() > 255 || !printable(&reg.hostname) {
        errs.push("hostname", "at most 255 printable characters");
    }
    if reg.private_ip.parse::<std::net::IpAddr>().is_err() {
        errs.push("private_ip", "an IPv4 or IPv6 address");
    }
    if reg.boot_id.is_empty() || reg.boot_id.len() > 64 || !printable(&reg.boot_id) {
        errs.push("boot_id", "1 to 64 printable characters");
    }
    if reg.agent_version.len() > 64 {
        errs.push("agent_version", "at most 64 characters");
    }
    if reg.gpus.as_ref().is_some_and(|g| g.len() > 64) {
        errs.push("gpus", "at most 64 GPUs");
    }
    if errs.is_empty() { Ok(()) } else { Err(AgentError::Invalid(errs)) }
}

/// Cuts a line longer than `max` bytes (at a character boundary), saying how much was cut: long
/// lines are cut, never dropped.
pub fn cut_line(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} …[line cut: {} more bytes]", &text[..end], text.len() - end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_cut_with_a_marker() {
        assert_eq!(cut_line("short", 10), "short");
        let cut = cut_line(&"é".repeat(10), 5);
        assert!(cut.starts_with("éé …[line cut: 16 more bytes]"), "{cut}");
    }

    #[test]
    fn cursors_parse_and_print() {
        assert_eq!(LogCursor::parse("12.3"), Some(LogCursor { seq: 12, line: 3 }));
        assert_eq!(LogCursor::parse("7"), Some(LogCursor { seq: 7, line: 0 }));
        assert_eq!(LogCursor::parse("x"), None);
        assert_eq!(LogCursor { seq: 1, line: 2 }.to_string(), "1.2");
    }
}
