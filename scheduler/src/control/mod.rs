//! The control loop: reconcile rounds that read desired state (jobs in the store) and actual state
//! (fleets in the cloud) and converge them: place pending work, follow fleets to a final state,
//! fail over when capacity or quota runs out, migrate away from evictions, clean up finished work,
//! and delete every fleet the cloud holds that no live attempt owns.
//!
//! A round is **observe → decide → act** (`round.rs` runs the steps):
//! - observe (`snapshot.rs`): one [`Snapshot`](snapshot::Snapshot) of the store (open jobs, active
//!   attempts, tenants) and the cloud (offers, quota, restrictions, each active attempt's operation
//!   or fleet, and every few minutes the list of all fleets), beside the loop's memory
//!   ([`LoopState`]: blocks, breakers, deadline policies, deletions in flight);
//! - decide (`follow.rs`, `watch.rs`, `cleanup.rs`, `deadline.rs`, `placement.rs`, with the rules of
//!   `feasibility.rs`, `error_policy.rs` and `crate::accounting`): pure functions from the snapshot
//!   to [`Action`](actions::Action)s, unit-tested without a cloud;
//! - act (`act.rs`): the actions performed against the store and the cloud, events recorded, and
//!   what was written put back in the snapshot for the next decision.
//!
//! Invariants (kube-rs style reconcile):
//! - A round is idempotent: run twice with nothing changed, the second does nothing.
//! - Intent before action: an attempt (with its deterministic fleet name) is on disk before the
//!   fleet is asked for, so a crash between the two is healed by looking the fleet up by name;
//!   a new attempt number is only taken once the previous attempt has failed or ended, so there
//!   is never more than one fleet per attempt.
//! - No fleet leaks: a fleet whose attempt ended is deleted, and a failed deletion is retried with
//!   backoff until the cloud confirms it gone; the cloud reconciliation deletes every tagged fleet
//!   without a live attempt, whatever the loop remembers after a crash.
//! - Only `Cloud` and `Clock` are seen (never `cloud::azure`): the simulator runs this same code in
//!   virtual time.
//!
//! Extending the round: a new observation is a field of `Snapshot` filled in `observe` (or of
//! `LoopState` when it outlives the round); a new decision is a pure function in the step's file
//! (or a new file) returning `Action`s, called from its step in `round.rs`; a new kind of write is a
//! `JobEdit` or a field of `Change`, and a new kind of effect an `Action` variant performed in
//! `act.rs`. ARCHITECTURE.md has a worked example.

mod accounts;
mod act;
mod actions;
mod advice;
mod breaker;
mod cleanup;
mod deadline;
mod deadline_choice;
mod deletions;
mod demand;
mod dependencies;
mod driver;
pub mod error_policy;
mod feasibility;
mod follow;
mod growth;
mod metrics;
mod mixed;
mod pipeline_budget;
mod placement;
mod quota_watch;
mod retention;
mod round;
mod round_attempts;
mod round_cloud;
mod round_placement;
mod snapshot;
mod stage_deadlines;
#[cfg(test)]
mod tests;
mod watch;
mod world;

pub use breaker::{BreakerConfig, BreakerState, RegionBreakers};
pub use deadline_choice::{DeadlineChoice, apply_deadline_choice, deadline_managed};
pub use demand::{DemandPart, Held, MIN_REPLICA_BOOST, RESTART_MARGIN_HOURS, demands};
pub use dependencies::{Gate, Upstream, gate_link};
pub use driver::{DriverConfig, RoundHealth, RoundStatus, run_forever};
pub use metrics::{ClassLabel, ControlMetrics, FilterLabel, OfferLabel, PoolLabel, StateLabel};
pub use pipeline_budget::{cheapest_spec_usd, exhausted_reason as pipeline_budget_exhausted};
pub use round::{ControlError, RoundReport};
pub use world::{PoolView, SPOT_HISTORY_TICKS, SpotHistory, WorldView, our_usage};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;
use state::Store;

use crate::catalog::Catalog;
use crate::clock::Clock;
use crate::cloud::Cloud;
use crate::model::{Attempt, AttemptState, BlockedOffer};
use crate::records::{AttemptsBy, Lookup};
use deletions::Deletions;

/// Settings of the control loop.
#[derive(Debug, Clone)]
pub struct ControlConfig {
    /// How often quota and restrictions are read from the cloud.
    pub quota_refresh_ms: i64,
    /// How long a fleet may stay below its minimum before its job migrates (0 VMs: at once).
    pub below_min_grace_ms: i64,
    /// Delete tagged fleets that no live attempt owns (found by the cloud reconciliation).
    pub delete_orphans: bool,
    /// How often every fleet in the cloud is compared with the live attempts (and at the first
    /// round after a start): tagged fleets without one are deleted.
    pub reconcile_cloud_ms: i64,
    /// Mark a job succeeded once its `duration_hours` of work are done (simulated clouds, where no
    /// user is there to say so).
    pub auto_complete: bool,
    /// Wall-clock limit on the solver per round (past it, the round places by the greedy plan).
    /// `None`: no limit. A run in virtual time (the what-if) sets `None`: a wall-clock limit would
    /// make its results depend on how loaded the machine was, and the solve ends on its own
    /// (the LP solver's own iteration cap bounds it).
    pub solve_time_limit_ms: Option<u64>,
    /// Re-plans within one round after synchronous failures, at most.
    pub max_replans_per_round: usize,
    /// Flush the store after writing an intent (off only for throwaway simulator stores).
    pub durable: bool,
    /// Region circuit breakers.
    pub breaker: BreakerConfig,
    /// How long a finished job (with its attempts and events) and the event log are kept after it
    /// ends; `None` keeps everything for ever. What tenants spent is kept regardless.
    pub retain_finished_ms: Option<i64>,
    /// The policy that decides, every round, whether a deadline job with spot allowed holds spot
    /// in a region, regular in a region, or nothing (see `crate::deadline`).
    pub deadline_policy: crate::deadline::DeadlinePolicyKind,
    /// The deadline policies' tick: spot availability is observed once per tick per region, and
    /// the policies' slack arithmetic counts whole ticks.
    pub deadline_tick_ms: i64,
    /// How often the cost and progress of an attempt that runs unchanged are written to the store
    /// (any change — VMs lost or back, a state change, the job ending — is written in the round that
    /// sees it). `None`: only on changes and [`Controller::settle_accounts`]. Readers of the store see
    /// a running job's cost at most this stale; nothing is lost by a crash, because accrual is linear
    /// between changes and resumes from the stored `accounted_until_ms`.
    pub settle_interval_ms: Option<i64>,
    /// How long a quota pool must keep waiting work out before a `quota_exhausted` event is
    /// recorded (once per episode; `quota_recovered` when it clears; see `quota_watch.rs`).
    /// `None`: pools are not watched (the what-if weeks, which have no one to alert).
    pub quota_exhausted_after_ms: Option<i64>,
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            quota_refresh_ms: 3 * 60_000,
            below_min_grace_ms: 2 * 60_000,
            delete_orphans: true,
            reconcile_cloud_ms: 3 * 60_000,
            auto_complete: false,
            solve_time_limit_ms: Some(2_000),
            max_replans_per_round: 4,
            durable: true,
            breaker: BreakerConfig::default(),
            retain_finished_ms: Some(7 * 24 * 3_600_000),
            deadline_policy: crate::deadline::DeadlinePolicyKind::Spillway,
            deadline_tick_ms: 60_000,
            settle_interval_ms: Some(60_000),
            quota_exhausted_after_ms: Some(15 * 60_000),
        }
    }
}

/// What `GET /v1/capacity` and `spillway capacity` show.
#[derive(Debug, Clone, Serialize)]
pub struct CapacityView {
    /// Quota pools per region: limit, used, in flight, free.
    pub pools: Vec<PoolView>,
    /// Blocked offers with reason and expiry.
    pub blocked_offers: Vec<BlockedOffer>,
    /// Regions whose circuit breaker is not closed.
    pub regions: Vec<RegionHealth>,
}

/// A region's breaker, for people.
#[derive(Debug, Clone, Serialize)]
pub struct RegionHealth {
    /// Region.
    pub region: String,
    /// Breaker state.
    pub breaker: BreakerState,
}

/// The loop's memory between rounds (everything else lives in the store or the cloud).
#[derive(Debug, Default)]
pub(crate) struct LoopState {
    pub(crate) world: WorldView,
    pub(crate) breakers: RegionBreakers,
    pub(crate) loaded_blocks: bool,
    pub(crate) deadline: deadline::DeadlineState,
    /// The last problem solved and its plan: a round whose problem is the same (no new job, no
    /// capacity, quota or block change) reuses the plan instead of solving again.
    pub(crate) last_solve: Option<(solver::Problem, solver::Plan)>,
    /// When the last retention pass ran (loop time).
    pub(crate) retention_pass_at_ms: Option<i64>,
    /// Whether this round's read of the offers changed any price (or the offers themselves): running
    /// attempts are re-priced only then.
    pub(crate) prices_moved: bool,
    /// Attempts whose fleet is not worth asking about before a time (an operation's `Retry-After`,
    /// a throttled call), by attempt key.
    pub(crate) look_again: BTreeMap<String, i64>,
    /// When every fleet in the cloud was last compared with the live attempts; `None` before the
    /// first time since the start.
    pub(crate) cloud_reconciled_at: Option<i64>,
    /// Fleet deletions not yet confirmed.
    pub(crate) deletions: Deletions,
    /// Orphan fleets already recorded (one event each, however many passes find them).
    pub(crate) orphans_reported: BTreeSet<String>,
    /// Attempts whose fleet the cloud refused to grow for a reason no block covers, by attempt
    /// key: the job's next placement in their region gets a fleet of its own.
    pub(crate) unresizable: BTreeSet<String>,
    /// The pools that keep waiting work out of the last plan (when pools are watched).
    pub(crate) quota_blocking: quota_watch::Blocking,
    /// Episodes of pools keeping work out, for the `quota_exhausted` events.
    pub(crate) quota_watch: quota_watch::QuotaWatch,
    /// The quota gauges as last published.
    pub(crate) quota_gauges: quota_watch::QuotaGauges,
}

/// True when an attempt has been below its minimum for longer than the grace period, or has
/// nothing left: the job needs a new placement for the GPUs it carried.
pub(crate) fn is_degraded(a: &Attempt, now: i64, grace_ms: i64) -> bool {
    a.state == AttemptState::Running && a.below_min_since_ms.is_some_and(|t| a.running_vms == 0 || now - t >= grace_ms)
}

/// The control loop over one store and one cloud.
pub struct Controller {
    pub(crate) store: Store,
    pub(crate) cloud: Arc<dyn Cloud>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) config: ControlConfig,
    pub(crate) metrics: ControlMetrics,
    pub(crate) state: tokio::sync::Mutex<LoopState>,
    /// How the rounds `run_forever` ran have gone.
    pub(crate) health: RoundHealth,
}

impl Controller {
    /// A controller; call [`Controller::reconcile`] to run a round, or [`run_forever`].
    pub fn new(
        store: Store,
        cloud: Arc<dyn Cloud>,
        clock: Arc<dyn Clock>,
        catalog: Arc<Catalog>,
        config: ControlConfig,
        metrics: ControlMetrics,
    ) -> Controller {
        let breakers = RegionBreakers::new(config.breaker);
        Controller {
            store,
            cloud,
            clock,
            catalog,
            config,
            metrics,
            state: tokio::sync::Mutex::new(LoopState { breakers, ..Default::default() }),
            health: RoundHealth::default(),
        }
    }

    /// How the loop's rounds have gone (see [`RoundHealth`]).
    pub fn health(&self) -> &RoundHealth {
        &self.health
    }

    /// Forgets what the loop learned in memory, as a restart does, so the next round reads blocked
    /// offers from the store and reconciles the cloud's fleets with the live attempts before it acts: called when this server
    /// becomes the leader (another server may have acted since it last led).
    pub async fn start_term(&self) {
        let mut st = self.state.lock().await;
        *st = LoopState { breakers: RegionBreakers::new(self.config.breaker), ..Default::default() };
        self.health.reset();
    }

    /// The metrics this controller updates.
    pub fn metrics(&self) -> &ControlMetrics {
        &self.metrics
    }

    /// The cloud it drives.
    pub fn cloud(&self) -> &Arc<dyn Cloud> {
        &self.cloud
    }

    /// The clock it reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Quota, blocked offers and region health as of the last round.
    pub async fn capacity(&self) -> Result<CapacityView, state::StoreError> {
        let now = self.clock.now_ms();
        let mut attempts = self.store.find(AttemptsBy::State(AttemptState::Provisioning))?;
        attempts.extend(self.store.find(AttemptsBy::State(AttemptState::Running))?);
        let ours = our_usage(attempts.iter());
        let st = self.state.lock().await;
        let mut blocked: Vec<BlockedOffer> = st.world.blocked.iter().filter(|b| b.is_active(now)).cloned().collect();
        blocked.sort_by_key(|b| (b.until_ms, b.key()));
        Ok(CapacityView {
            pools: st.world.pools(&ours),
            blocked_offers: blocked,
            regions: st
                .breakers
                .snapshot(now)
                .into_iter()
                .filter(|(_, s)| *s != BreakerState::Closed)
                .map(|(region, breaker)| RegionHealth { region, breaker })
                .collect(),
        })
    }
}
