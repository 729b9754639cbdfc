//! The control loop's metrics, registered in a Prometheus registry that the HTTP API serves.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// Label: a failure class.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabel {
    /// `quota`, `capacity`, …
    pub class: String,
}

/// Label: a job state.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    /// `pending`, `running`, …
    pub state: String,
}

/// Labels: an offer.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OfferLabel {
    /// Region.
    pub region: String,
    /// VM size.
    pub size: String,
    /// `spot` or `regular`.
    pub priority: String,
}

/// Label: a filter of the feasibility chain.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FilterLabel {
    /// `priced`, `not_blocked`, `breaker`, …
    pub filter: String,
}

/// Labels: a quota pool.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabel {
    /// Region.
    pub region: String,
    /// `cores`, `lowPriorityCores` or a VM family, as the cloud spells it.
    pub pool: String,
}

/// Everything the control loop counts. Handles are cheap clones of shared atomics.
#[derive(Clone, Debug)]
pub struct ControlMetrics {
    /// Reconcile rounds run.
    pub rounds: Counter,
    /// Solver wall time per round, seconds.
    pub solve_seconds: Histogram,
    /// Wall time of whole reconcile rounds (cloud calls, store, solver), seconds: a loop that
    /// falls behind its interval shows here first.
    pub round_seconds: Histogram,
    /// Fleets asked for.
    pub placements: Counter,
    /// Jobs moved to a new placement after a failure or eviction.
    pub failovers: Counter,
    /// Spot evictions seen.
    pub evictions: Counter,
    /// Provisioning failures by class.
    pub provisioning_failures: Family<ClassLabel, Counter>,
    /// Time from intent to running, seconds.
    pub provisioning_seconds: Histogram,
    /// Offers blocked now.
    pub blocked_offers: Gauge,
    /// Jobs by state.
    pub jobs: Family<StateLabel, Gauge>,
    /// GPUs running by offer.
    pub gpus_in_use: Family<OfferLabel, Gauge>,
    /// USD per hour being spent now.
    pub cost_rate: Gauge<f64, AtomicU64>,
    /// The cloud's listings the feasibility chain kept from the last plan, by the filter that
    /// rejected each.
    pub offers_rejected: Family<FilterLabel, Gauge>,
    /// Quota limit per pool, vCPUs, as last read.
    pub quota_limit: Family<PoolLabel, Gauge>,
    /// vCPUs used per pool (everyone's, with spillway's fleets in flight).
    pub quota_used: Family<PoolLabel, Gauge>,
    /// vCPUs free per pool (the headroom).
    pub quota_free: Family<PoolLabel, Gauge>,
    /// Waiting jobs (demands) the pool keeps out of the last plan.
    pub quota_blocked_jobs: Family<PoolLabel, Gauge>,
    /// 1 while the pool has kept waiting work out for longer than the threshold (between its
    /// `quota_exhausted` and `quota_recovered` events).
    pub quota_exhausted: Family<PoolLabel, Gauge>,
}

impl ControlMetrics {
    /// Creates the metrics and registers them under `spillway_`.
    pub fn register(registry: &mut Registry) -> ControlMetrics {
        let m = ControlMetrics::unregistered();
        let r = registry.sub_registry_with_prefix("spillway");
        r.register("reconcile_rounds", "Reconcile rounds run", m.rounds.clone());
        r.register("solve_seconds", "Solver wall time per round", m.solve_seconds.clone());
        r.register("round_seconds", "Wall time of a whole reconcile round", m.round_seconds.clone());
        r.register("placements", "Fleets asked for", m.placements.clone());
        r.register("failovers", "Jobs moved after a failure or eviction", m.failovers.clone());
        r.register("evictions", "Spot evictions seen", m.evictions.clone());
        r.register("provisioning_failures", "Provisioning failures by class", m.provisioning_failures.clone());
        // Every class from the start, at 0: a rate over a series that appears only with its first
        // failure misses that failure, and alerts cannot tell "none" from "not scraped".
        for class in crate::cloud::FailureClass::ALL {
            let _ = m.provisioning_failures.get_or_create(&ClassLabel { class: class.as_str().to_string() });
        }
        r.register("provisioning_seconds", "Time from intent to running", m.provisioning_seconds.clone());
        r.register("blocked_offers", "Offers blocked now", m.blocked_offers.clone());
        r.register("jobs", "Jobs by state", m.jobs.clone());
        r.register("gpus_in_use", "GPUs running by region, size and priority", m.gpus_in_use.clone());
        r.register("cost_rate_usd_per_hour", "USD per hour being spent now", m.cost_rate.clone());
        r.register(
            "offers_rejected",
            "Listed offers kept from the last plan, by feasibility filter",
            m.offers_rejected.clone(),
        );
        r.register("quota_limit_vcpus", "Quota limit per region and pool, vCPUs", m.quota_limit.clone());
        r.register("quota_used_vcpus", "Quota used per region and pool (by everyone), vCPUs", m.quota_used.clone());
        r.register("quota_free_vcpus", "Quota free per region and pool, vCPUs", m.quota_free.clone());
        r.register("quota_blocked_jobs", "Waiting jobs the pool keeps out of the plan", m.quota_blocked_jobs.clone());
        r.register(
            "quota_exhausted",
            "1 while the pool has kept waiting work out past the threshold",
            m.quota_exhausted.clone(),
        );
        m
    }

    /// Metrics not attached to any registry (the simulator's).
    pub fn unregistered() -> ControlMetrics {
        ControlMetrics {
            rounds: Counter::default(),
            solve_seconds: Histogram::new([0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]),
            round_seconds: Histogram::new([0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0]),
            placements: Counter::default(),
            failovers: Counter::default(),
            evictions: Counter::default(),
            provisioning_failures: Family::default(),
            provisioning_seconds: Histogram::new([1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0]),
            blocked_offers: Gauge::default(),
            jobs: Family::default(),
            gpus_in_use: Family::default(),
            cost_rate: Gauge::default(),
            offers_rejected: Family::default(),
            quota_limit: Family::default(),
            quota_used: Family::default(),
            quota_free: Family::default(),
            quota_blocked_jobs: Family::default(),
            quota_exhausted: Family::default(),
        }
    }
}
