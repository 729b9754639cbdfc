//! One reconcile round: **observe** (one snapshot of the store and the cloud, `snapshot.rs`) →
//! **decide** (pure functions from the snapshot to actions: `follow.rs`, `watch.rs`, `cleanup.rs`,
//! `deadline.rs`, `placement.rs`) → **act** (`act.rs`). This file holds the round's order, its
//! report and gauges; the steps are driven from `round_cloud.rs` (1), `round_attempts.rs` (2–3)
//! and `round_placement.rs` (6–7). The steps, in order:
//! 1. reconcile the cloud (when due): delete tagged fleets no live attempt owns, retry the
//!    deletions the loop owns;
//! 2. follow attempts being provisioned (running, failed, or created again);
//! 3. watch running attempts (cost, progress, evictions, migrations, budgets, completion);
//! 4. clean up the fleets of jobs that ended;
//! 5. forget finished work past the retention;
//! 6. let each deadline job's policy choose where it runs;
//! 7. plan and place, placing again at once after synchronous refusals so a job fails over within
//!    the round that saw the failure.
//!
//! Each decision is acted on before the next is made, and the snapshot holds what was written, so
//! every decision sees its predecessors' records as the store now holds them.

use std::collections::BTreeMap;

use serde::Serialize;
use state::StoreError;

use super::metrics::{OfferLabel, StateLabel};
use super::snapshot::Snapshot;
use super::{Controller, LoopState, cleanup, placement};
use crate::model::{Attempt, AttemptState, Job, JobState, Priority};
use crate::records::{JobsBy, Lookup, Tenant};

/// Why a round could not finish. Cloud failures never end a round: they are classified and acted
/// on; only the store failing does.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The quota advice could not be computed (its thread failed).
    #[error("quota advice: {0}")]
    Advice(String),
}

/// What one round did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RoundReport {
    /// When the round ran (clock time), Unix milliseconds.
    pub at_ms: i64,
    /// Fleets asked for.
    pub placements: u32,
    /// Fleets that failed to provision.
    pub provisioning_failures: u32,
    /// Attempts that reached running.
    pub became_running: u32,
    /// Jobs re-placed after a failure or eviction.
    pub failovers: u32,
    /// Fleets that lost VMs.
    pub evictions: u32,
    /// Jobs that ended in this round (fleets deleted).
    pub finished: u32,
    /// Fleets deleted.
    pub fleets_deleted: u32,
    /// Jobs left waiting for capacity.
    pub pending: u32,
    /// Solver wall time, milliseconds.
    pub solve_ms: f64,
    /// Cloud calls that failed (each is retried as the error policy says).
    pub cloud_errors: u32,
    /// Orphan fleets found (tagged, owned by no live attempt).
    pub orphans: u32,
    /// USD per hour of the fleets running at the end of the round (running VMs × price).
    pub cost_rate_usd_per_hour: f64,
    /// GPUs of the running VMs at the end of the round, per region (every GPU of a VM is billed,
    /// whether or not the job uses it).
    pub billed_gpus_by_region: BTreeMap<String, f64>,
    /// How long until something this round saw is worth looking at again (an operation's
    /// `Retry-After`, a throttled call, a deletion backing off), if sooner than any round would.
    pub look_again_in_ms: Option<i64>,
}

impl RoundReport {
    /// True when the round changed nothing (used to check that rounds are idempotent).
    pub fn is_quiet(&self) -> bool {
        self.placements == 0
            && self.provisioning_failures == 0
            && self.became_running == 0
            && self.failovers == 0
            && self.evictions == 0
            && self.finished == 0
            && self.fleets_deleted == 0
    }
}

impl Controller {
    /// Runs one round. Safe to call again at once: a round with nothing new to do does nothing.
    pub async fn reconcile(&self) -> Result<RoundReport, ControlError> {
        let started = std::time::Instant::now();
        let out = self.round().await;
        self.metrics.round_seconds.observe(started.elapsed().as_secs_f64());
        out
    }

    async fn round(&self) -> Result<RoundReport, ControlError> {
        let mut guard = self.state.lock().await;
        let st = &mut *guard;
        let now = self.clock.now_ms();
        let mut report = RoundReport { at_ms: now, ..Default::default() };
        self.metrics.rounds.inc();
        let (mut snap, cloud_errors) = self.observe(st, now).await?;
        report.cloud_errors += cloud_errors;
        self.prune_blocks(st, now)?;
        self.reconcile_cloud(st, &mut snap, &mut report).await?;
        let mut ended: Vec<(Attempt, Option<Job>)> = Vec::new();
        self.follow_provisioning(st, &mut snap, &mut report, &mut ended).await?;
        self.watch_running(st, &mut snap, &mut report, &mut ended).await?;
        let cleanups = ended.iter().map(|(a, job)| cleanup::clean_up(&snap, a, job.as_ref())).collect();
        self.act(st, &mut snap, &mut report, cleanups).await?;
        self.forget_finished(st, now)?;
        self.choose_deadlines(st, &mut snap, &mut report).await?;
        for _ in 0..self.config.max_replans_per_round.max(1) {
            if self.plan_and_place(st, &mut snap, &mut report).await? == 0 {
                break;
            }
        }
        self.watch_quota(st, &snap)?;
        self.update_gauges(st, &snap, &mut report)?;
        let next = st.look_again.values().copied().filter(|&t| t > now).chain(st.deletions.next_try_ms()).min();
        report.look_again_in_ms = next.map(|t| (t - now).max(0));
        Ok(report)
    }

    fn prune_blocks(&self, st: &mut LoopState, now: i64) -> Result<(), StoreError> {
        let expired: Vec<String> = st.world.blocked.iter().filter(|b| !b.is_active(now)).map(|b| b.key()).collect();
        if !expired.is_empty() {
            self.store.transaction(|tx| {
                for key in &expired {
                    tx.delete::<crate::model::BlockedOffer>(key)?;
                }
                Ok(())
            })?;
        }
        st.world.prune_blocks(now);
        Ok(())
    }

    /// Gauges, and the report's spend rate and GPUs by region, from the round's running attempts.
    fn update_gauges(&self, st: &LoopState, snap: &Snapshot, report: &mut RoundReport) -> Result<(), StoreError> {
        for s in JobState::ALL {
            let n = self.store.count_where(JobsBy::State(s))?;
            self.metrics.jobs.get_or_create(&StateLabel { state: s.as_str().to_string() }).set(n as i64);
        }
        self.metrics.blocked_offers.set(st.world.blocked.iter().filter(|b| b.is_active(snap.now)).count() as i64);
        self.metrics.gpus_in_use.clear();
        let mut running: Vec<&Attempt> = snap.active().filter(|a| a.state == AttemptState::Running).collect();
        // Summed in (job, number) order, so that the rate is the same number whatever the keys' order.
        running.sort_by(|a, b| (a.job_id.as_str(), a.number).cmp(&(b.job_id.as_str(), b.number)));
        let mut rate = 0.0;
        report.billed_gpus_by_region.clear();
        // Summed per offer on borrowed names first: hundreds of running attempts share a few
        // offers, and a label (three Strings) and a size lookup per attempt per round showed in
        // the whole-trace profile (#21).
        let mut by_offer: BTreeMap<(&str, &str, Priority), (u64, f64, i64)> = BTreeMap::new();
        for a in running {
            // A mixed fleet's parts are billed at their own priority and price.
            for part in a.parts() {
                let e = by_offer.entry((a.region.as_str(), a.size.as_str(), part.priority)).or_default();
                e.0 += u64::from(part.running_vms);
                e.1 += part.running_vms as f64 * (a.gpus as f64 / a.vms.max(1) as f64);
                e.2 += (part.running_vms as u64 * a.gpus as u64 / a.vms.max(1) as u64) as i64;
                rate += part.running_vms as f64 * part.price_per_hour;
            }
        }
        for ((region, size, priority), (vms, share, gpus)) in by_offer {
            // Billed GPUs are the VMs' GPUs, whether or not the job uses them all (a size the
            // catalog lacks counts the attempts' own share).
            let billed = self.catalog.size(size).map_or(share, |s| vms as f64 * s.gpus as f64);
            *report.billed_gpus_by_region.entry(region.to_string()).or_default() += billed;
            let label =
                OfferLabel { region: region.to_string(), size: size.to_string(), priority: priority.to_string() };
            self.metrics.gpus_in_use.get_or_create(&label).inc_by(gpus);
        }
        self.metrics.cost_rate.set(rate);
        report.cost_rate_usd_per_hour = rate;
        Ok(())
    }

    /// Writes the cost and progress of every running attempt up to now, however recently they were
    /// settled (see [`super::ControlConfig::settle_interval_ms`]): before reading costs that must be
    /// exact, e.g. at the end of a simulated run.
    pub async fn settle_accounts(&self) -> Result<(), ControlError> {
        let _round = self.state.lock().await;
        let now = self.clock.now_ms();
        let running = self.store.find(crate::records::AttemptsBy::State(AttemptState::Running))?;
        for a in &running {
            if a.accounted_until_ms.or(a.running_since_ms).unwrap_or(now) >= now {
                continue;
            }
            self.store.transaction(|tx| {
                let Some(mut job) = tx.get::<Job>(&a.job_id)? else { return Ok(()) };
                let mut tenant = tx.get::<Tenant>(&job.spec.tenant)?.unwrap_or_else(|| Tenant::named(&job.spec.tenant));
                let mut a = a.clone();
                let scale = super::accounts::overlap_scale(&job, &running);
                tenant.spent_usd += super::accounts::accrue(&mut a, &mut job, now, scale);
                tx.put(&job)?;
                tx.put(&a)?;
                tx.put(&tenant)?;
                Ok(())
            })?;
        }
        Ok(())
    }

    /// What the solver would do now, without provisioning anything (`GET /v1/plan`).
    pub async fn plan_preview(&self) -> Result<solver::Plan, ControlError> {
        let st = self.state.lock().await;
        let now = self.clock.now_ms();
        let snap = self.read_records(now)?;
        let input = placement::plan_input(&snap, &st, &self.config, &self.catalog);
        let options =
            solver::SolveOptions { method: solver::Method::Round, time_limit_ms: self.config.solve_time_limit_ms };
        let mut plan = solver::solve(&input.problem, &options);
        for (job, why) in input.reasons {
            plan.unplaced.push(solver::Unplaced { job, reasons: why });
        }
        Ok(plan)
    }
}
