//! Leader election: every server serves the API; the one holding the leader lease runs the control
//! loop.
//!
//! A server tries to take the lease (in the store: holder, epoch, expiry on the database's clock)
//! every [`LeaderConfig::retry_every`]. Once it holds it, it renews it every
//! [`LeaderConfig::renew_every`] and runs the control loop for that term: the loop's state is reset
//! first, so its first round adopts the cloud's fleets as after a restart, and it writes through a
//! fenced store handle ([`state::Store::fenced`]) that PostgreSQL checks against the lease in the
//! same transaction as each write. The term ends when a renewal is refused (another server took the
//! lease), when renewals have failed for longer than the lease minus a margin (the database cannot
//! be reached: the lease may run out any moment), or on shutdown, which releases the lease so
//! another server takes over at once. Ending a term clears the fence before the loop is told to
//! stop, so a round still running writes nothing more.
//!
//! On a sled store the server is alone (sled locks its directory) and leads from the start.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use state::{Fence, LeaseGrant, Store};
use tokio::sync::watch;

use crate::control::{Controller, DriverConfig, run_forever};

/// How the lease is held.
#[derive(Debug, Clone, Copy)]
pub struct LeaderConfig {
    /// How long a lease lasts without renewal: the longest a dead leader holds up a takeover.
    pub ttl: Duration,
    /// How often the leader renews it.
    pub renew_every: Duration,
    /// How often a follower tries to take it.
    pub retry_every: Duration,
}

impl Default for LeaderConfig {
    /// A 10 s lease renewed every 2 s, tried for every second: a takeover within about 11 s of a
    /// leader's death, and four renewals may fail in a row before the leader steps down.
    fn default() -> Self {
        LeaderConfig {
            ttl: Duration::from_secs(10),
            renew_every: Duration::from_secs(2),
            retry_every: Duration::from_secs(1),
        }
    }
}

impl LeaderConfig {
    /// The lease as a whole number of milliseconds, shortened for tests (`SPILLWAY_LEASE_MS`):
    /// renewals every fifth of it, attempts every tenth.
    pub fn with_ttl(ttl: Duration) -> LeaderConfig {
        let ttl = ttl.max(Duration::from_millis(100));
        LeaderConfig { ttl, renew_every: ttl / 5, retry_every: ttl / 10 }
    }
}

/// The leader's metrics, under `spillway_`.
#[derive(Clone, Debug, Default)]
struct LeaderMetrics {
    leader: Gauge,
    epoch: Gauge,
    terms: Counter,
    renewals: Counter,
    renewal_failures: Counter,
}

struct ReplicaInner {
    id: String,
    leader: AtomicBool,
    epoch: AtomicU64,
    fence: Fence,
    metrics: LeaderMetrics,
}

/// This server as a member of the group: its id, whether it leads, at which epoch. Cheap to clone.
#[derive(Clone)]
pub struct Replica {
    inner: Arc<ReplicaInner>,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica").field("id", &self.inner.id).field("leader", &self.is_leader()).finish()
    }
}

impl Replica {
    /// A server named by `id` (unique per process: host, process id and a random part), with its
    /// metrics registered: `spillway_leader` (1 while leading), `spillway_leader_epoch`,
    /// `spillway_leader_terms`, `spillway_lease_renewals` and `spillway_lease_renewal_failures`.
    pub fn new(id: impl Into<String>, registry: &mut Registry) -> Replica {
        let metrics = LeaderMetrics::default();
        let r = registry.sub_registry_with_prefix("spillway");
        r.register(
            "leader",
            "1 while this server holds the leader lease and runs the control loop",
            metrics.leader.clone(),
        );
        r.register("leader_epoch", "Epoch of the lease this server holds (0: none)", metrics.epoch.clone());
        r.register("leader_terms", "Times this server took the leader lease", metrics.terms.clone());
        r.register("lease_renewals", "Successful renewals of the leader lease", metrics.renewals.clone());
        r.register(
            "lease_renewal_failures",
            "Renewals of the leader lease that failed or were refused",
            metrics.renewal_failures.clone(),
        );
        Replica {
            inner: Arc::new(ReplicaInner {
                id: id.into(),
                leader: AtomicBool::new(false),
                epoch: AtomicU64::new(0),
                fence: Fence::new(),
                metrics,
            }),
        }
    }

    /// An id for this process: host name, process id and a random part.
    pub fn process_id() -> String {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let mut random = [0u8; 4];
        let _ = getrandom::fill(&mut random);
        format!("{}-{}-{:08x}", host.trim(), std::process::id(), u32::from_be_bytes(random))
    }

    /// This server's id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// Whether this server leads now.
    pub fn is_leader(&self) -> bool {
        self.inner.leader.load(Ordering::SeqCst)
    }

    /// `leader` or `follower`.
    pub fn role(&self) -> &'static str {
        if self.is_leader() { "leader" } else { "follower" }
    }

    /// The epoch of the lease held, when leading.
    pub fn epoch(&self) -> Option<u64> {
        self.is_leader().then(|| self.inner.epoch.load(Ordering::SeqCst))
    }

    /// The fence the control loop's store handle writes under (`store.fenced(replica.fence())`).
    pub fn fence(&self) -> &Fence {
        &self.inner.fence
    }

    fn begin_term(&self, grant: &LeaseGrant) {
        self.inner.fence.hold(grant);
        self.inner.epoch.store(grant.epoch, Ordering::SeqCst);
        self.inner.leader.store(true, Ordering::SeqCst);
        self.inner.metrics.leader.set(1);
        self.inner.metrics.epoch.set(grant.epoch as i64);
        self.inner.metrics.terms.inc();
    }

    fn end_term(&self) {
        // The fence first: from here on nothing the loop still does is written.
        self.inner.fence.clear();
        self.inner.leader.store(false, Ordering::SeqCst);
        self.inner.metrics.leader.set(0);
        self.inner.metrics.epoch.set(0);
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

/// Why a term ended.
enum TermEnd {
    Shutdown,
    Lost(String),
}

/// Runs elections until `shutdown` turns true: takes the lease when it is free, runs the control
/// loop (`run_forever` with `driver`) while holding it, and releases it on shutdown.
/// `controller` must have been built on `store.fenced(replica.fence())`.
pub async fn run_elections(
    store: Store,
    replica: Replica,
    controller: Arc<Controller>,
    wake: Arc<tokio::sync::Notify>,
    driver: DriverConfig,
    config: LeaderConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut last_error: Option<String> = None;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let (s, id, ttl) = (store.clone(), replica.id().to_string(), config.ttl);
        match blocking(move || s.acquire_lease(&id, ttl)).await {
            Some(Ok(Some(grant))) => {
                last_error = None;
                tracing::info!(replica = %replica.id(), epoch = grant.epoch, "took the leader lease; running the control loop");
                let end = lead(&store, &replica, &controller, &wake, driver, config, &grant, &mut shutdown).await;
                match end {
                    TermEnd::Shutdown => {
                        let s = store.clone();
                        if let Some(Err(e)) = blocking(move || s.release_lease(&grant)).await {
                            tracing::warn!(error = %e, "could not release the leader lease; it runs out by itself");
                        }
                        return;
                    }
                    TermEnd::Lost(why) => {
                        tracing::warn!(replica = %replica.id(), epoch = grant.epoch, reason = %why, "no longer the leader");
                    }
                }
            }
            Some(Ok(None)) => {}
            Some(Err(e)) => {
                let e = e.to_string();
                if last_error.as_ref() != Some(&e) {
                    tracing::warn!(error = %e, "cannot reach the store to take the leader lease; retrying");
                    last_error = Some(e);
                }
            }
            None => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(config.retry_every) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// One term: the control loop runs while the lease is renewed.
#[allow(clippy::too_many_arguments)]
async fn lead(
    store: &Store,
    replica: &Replica,
    controller: &Arc<Controller>,
    wake: &Arc<tokio::sync::Notify>,
    driver: DriverConfig,
    config: LeaderConfig,
    grant: &LeaseGrant,
    shutdown: &mut watch::Receiver<bool>,
) -> TermEnd {
    controller.start_term().await;
    replica.begin_term(grant);
    let (stop_loop, loop_stops) = watch::channel(false);
    let loop_task = tokio::spawn(run_forever(controller.clone(), wake.clone(), driver, loop_stops));
    let mut renewed = Instant::now();
    // Step down before the lease can run out unrenewed: the database decides expiry on its clock,
    // which may run ahead of ours, and the loop must stop before another server starts.
    let give_up_after = config.ttl.saturating_sub(config.renew_every).max(config.renew_every);
    let end = loop {
        tokio::select! {
            _ = tokio::time::sleep(config.renew_every) => {}
            _ = shutdown.changed() => break TermEnd::Shutdown,
        }
        if *shutdown.borrow() {
            break TermEnd::Shutdown;
        }
        let (s, g, ttl) = (store.clone(), grant.clone(), config.ttl);
        // A renewal may wait on a stalled database for the store's whole answer timeout (15 s by
        // default), past the lease: wait for it no longer than the term can last unrenewed, so a
        // leader that cannot renew steps down while its lease still holds.
        let left = give_up_after.saturating_sub(renewed.elapsed()).max(config.renew_every);
        let renewal = match tokio::time::timeout(left, blocking(move || s.renew_lease(&g, ttl))).await {
            Ok(r) => r.map(|r| r.map_err(|e| e.to_string())),
            Err(_) => Some(Err(format!("no answer from the store within {} ms", left.as_millis()))),
        };
        match renewal {
            Some(Ok(true)) => {
                renewed = Instant::now();
                replica.inner.metrics.renewals.inc();
            }
            Some(Ok(false)) => {
                replica.inner.metrics.renewal_failures.inc();
                break TermEnd::Lost("another server holds the lease".into());
            }
            Some(Err(e)) => {
                replica.inner.metrics.renewal_failures.inc();
                tracing::warn!(error = %e, "cannot renew the leader lease");
                if renewed.elapsed() >= give_up_after {
                    break TermEnd::Lost(format!("no renewal for {} ms: {e}", renewed.elapsed().as_millis()));
                }
            }
            None => {
                replica.inner.metrics.renewal_failures.inc();
            }
        }
    };
    replica.end_term();
    let _ = stop_loop.send(true);
    wake.notify_one();
    // A round in progress finishes (its writes now fail); one stuck in a cloud call is abandoned.
    let mut loop_task = loop_task;
    if tokio::time::timeout(Duration::from_secs(30), &mut loop_task).await.is_err() {
        loop_task.abort();
        tracing::warn!("the control loop did not stop within 30 s of the term's end; abandoned it");
    }
    end
}
