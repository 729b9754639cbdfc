//! One reconcile round, step by step (see DESIGN.md, "The control loop"):
//! adopt fleets after a restart → refresh the world → follow fleets being created → watch running
//! fleets (cost, progress, evictions) → clean up finished jobs → plan and provision, re-planning
//! at once after synchronous failures so a job fails over within the round that saw the failure.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use state::{EventDraft, StoreError};

use super::deadline::apply_deadline_choice;
use super::demand::{DemandPart, demands};
use super::metrics::{ClassLabel, OfferLabel, StateLabel};
use super::world::our_usage;
use super::{Controller, LoopState};
use crate::cloud::{CloudError, FleetRequest, OperationStatus, ProvisioningState, TAG_ATTEMPT, TAG_JOB};
use crate::jobs::record_event;
use crate::model::{Attempt, AttemptState, BlockedOffer, Job, JobState, Priority, fleet_name};
use crate::records::{Tenant, attempt_key};

/// Why a round could not finish. Cloud failures never end a round: they are classified and acted
/// on; only the store failing does.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
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
    /// Cloud calls that failed transiently (retried next round).
    pub cloud_errors: u32,
    /// Orphan fleets found (tagged, unknown to the store).
    pub orphans: u32,
    /// USD per hour of the fleets running at the end of the round (running VMs × price).
    pub cost_rate_usd_per_hour: f64,
    /// GPUs of the running VMs at the end of the round, per region (every GPU of a VM is billed,
    /// whether or not the job uses it).
    pub billed_gpus_by_region: BTreeMap<String, f64>,
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

const HOUR_MS: f64 = 3_600_000.0;

/// Alternative sizes offered to a fleet after the chosen one.
const MAX_ALTERNATIVES: usize = 3;

/// Fleet deletions run side by side in one round, at most this many at a time.
const DELETE_CONCURRENCY: usize = 16;

impl Controller {
    /// Attempts holding (or about to hold) cloud resources, in (job, number) order.
    pub(crate) fn active_attempts(&self) -> Result<Vec<Attempt>, StoreError> {
        let mut v = self.store.by_index::<Attempt>("state", "provisioning")?;
        v.extend(self.store.by_index::<Attempt>("state", "running")?);
        v.sort_by(|a, b| (a.job_id.as_str(), a.number).cmp(&(b.job_id.as_str(), b.number)));
        Ok(v)
    }

    /// Jobs not yet final, in planning order.
    pub(crate) fn open_jobs(&self) -> Result<Vec<Job>, StoreError> {
        let mut jobs = Vec::new();
        for s in [JobState::Pending, JobState::Provisioning, JobState::Running, JobState::Migrating] {
            jobs.extend(self.store.by_index::<Job>("state", s.as_str())?);
        }
        // Priority first, then submission order: the order reasons and placements are made in.
        jobs.sort_by(|a, b| {
            (std::cmp::Reverse(a.spec.priority), a.submitted_at_ms, &a.id).cmp(&(
                std::cmp::Reverse(b.spec.priority),
                b.submitted_at_ms,
                &b.id,
            ))
        });
        Ok(jobs)
    }

    fn durable(&self) -> Result<(), StoreError> {
        if self.config.durable { self.store.flush() } else { Ok(()) }
    }

    /// Runs one round. Safe to call again at once: a round with nothing new to do does nothing.
    pub async fn reconcile(&self) -> Result<RoundReport, ControlError> {
        let started = std::time::Instant::now();
        let out = self.round().await;
        self.metrics.round_seconds.observe(started.elapsed().as_secs_f64());
        out
    }

    async fn round(&self) -> Result<RoundReport, ControlError> {
        let mut st = self.state.lock().await;
        let now = self.clock.now_ms();
        let mut report = RoundReport { at_ms: now, ..Default::default() };
        self.metrics.rounds.inc();
        if !st.loaded_blocks {
            st.world.blocked = self.store.scan::<BlockedOffer>()?;
            st.loaded_blocks = true;
        }
        if !st.adopted {
            self.adopt(&mut st, now, &mut report).await?;
        }
        self.refresh_world(&mut st, now).await?;
        self.prune_blocks(&mut st, now)?;
        // Attempts still holding fleets for jobs that ended (or vanished), as the steps that read
        // every active attempt anyway come across them: clean-up settles and deletes them.
        let mut ended: Vec<(Attempt, Option<Job>)> = Vec::new();
        for attempt in self.store.by_index::<Attempt>("state", "provisioning")? {
            self.follow_provisioning(&mut st, attempt, now, &mut report, &mut ended).await?;
        }
        self.watch_running(&mut st, now, &mut report, &mut ended).await?;
        self.clean_up_finished(now, &mut report, ended).await?;
        self.forget_finished(&mut st, now)?;
        let mut open_jobs = self.decide_deadlines(&mut st, now, &mut report).await?;
        // The attempts the last plan was made from: placing only adds provisioning attempts, so
        // its running ones are this round's (gauges and the report's rates come from them).
        let mut attempts = Vec::new();
        for _ in 0..self.config.max_replans_per_round.max(1) {
            let (refused, seen) = self.plan_and_provision(&mut st, now, &mut report, open_jobs.take()).await?;
            attempts = seen;
            if refused == 0 {
                break;
            }
        }
        self.update_gauges(&st, now, &attempts, &mut report)?;
        Ok(report)
    }

    /// After a (re)start: match the fleets carrying our tags to attempts; report and, when
    /// configured, delete the ones no active attempt owns.
    async fn adopt(&self, st: &mut LoopState, now: i64, report: &mut RoundReport) -> Result<(), ControlError> {
        let fleets = match self.cloud.list_fleets().await {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list fleets to adopt them; will retry next round");
                report.cloud_errors += 1;
                return Ok(());
            }
        };
        for fleet in fleets {
            let Some(job_id) = fleet.tags.get(TAG_JOB) else { continue };
            let number: Option<u32> = fleet.tags.get(TAG_ATTEMPT).and_then(|n| n.parse().ok());
            let attempt = match number {
                Some(n) => self.store.get::<Attempt>(&attempt_key(job_id, n))?,
                None => None,
            };
            match attempt {
                Some(a) if a.is_active() && a.fleet_name == fleet.name => {
                    tracing::info!(fleet = %fleet.name, "adopted fleet of an active attempt");
                }
                other => {
                    report.orphans += 1;
                    let why = match other {
                        Some(a) => format!(
                            "fleet {} belongs to attempt {} of job {}, which is {:?}",
                            fleet.name, a.number, job_id, a.state
                        ),
                        None => format!("fleet {} is tagged for job {job_id} but no attempt knows it", fleet.name),
                    };
                    let delete = self.config.delete_orphans;
                    self.store.transaction(|tx| {
                        tx.append_event(EventDraft {
                            at_ms: now,
                            kind: "orphan_fleet".into(),
                            job_id: Some(job_id.clone()),
                            tenant: None,
                            message: format!("{why}{}", if delete { "; deleting it" } else { "; left alone" }),
                            data: serde_json::Value::Null,
                        })?;
                        Ok(())
                    })?;
                    if delete {
                        match self.cloud.delete_fleet(&fleet.name).await {
                            Ok(()) => report.fleets_deleted += 1,
                            Err(e) => tracing::warn!(fleet = %fleet.name, error = %e, "cannot delete orphan fleet"),
                        }
                    }
                }
            }
        }
        st.adopted = true;
        Ok(())
    }

    async fn refresh_world(&self, st: &mut LoopState, now: i64) -> Result<(), ControlError> {
        st.prices_moved = false;
        match self.cloud.offers().await {
            Ok(offers) => {
                st.prices_moved = !same_prices(&st.world.offers, &offers);
                st.world.offers = offers;
            }
            Err(e) => tracing::warn!(error = %e, "cannot read offers; keeping the last view"),
        }
        let regions: BTreeSet<String> = st.world.offers.iter().map(|o| o.region.clone()).collect();
        let attempts = self.active_attempts()?;
        // What the cloud already counts of ours: fleets it has accepted (running, or being created
        // with the create accepted). Intents not yet sent are ours alone.
        let counted = our_usage(attempts.iter().filter(|a| a.state == AttemptState::Running || a.operation.is_some()));
        for region in regions {
            if !st.world.quota_stale(&region, now, self.config.quota_refresh_ms) {
                continue;
            }
            match self.cloud.quota(&region).await {
                Ok(q) => st.world.set_quota(&region, &q, &counted, now),
                Err(e) => tracing::warn!(%region, error = %e, "cannot read quota; keeping the last view"),
            }
            match self.cloud.restrictions(&region).await {
                Ok(r) => {
                    st.world.restrictions.retain(|x| x.region != region);
                    st.world.restrictions.extend(r);
                }
                Err(e) => tracing::warn!(%region, error = %e, "cannot read size restrictions"),
            }
        }
        Ok(())
    }

    fn prune_blocks(&self, st: &mut LoopState, now: i64) -> Result<(), ControlError> {
        let expired: Vec<BlockedOffer> = st.world.blocked.iter().filter(|b| !b.is_active(now)).cloned().collect();
        if !expired.is_empty() {
            self.store.transaction(|tx| {
                for b in &expired {
                    tx.delete::<BlockedOffer>(&b.key())?;
                }
                Ok(())
            })?;
        }
        st.world.prune_blocks(now);
        Ok(())
    }

    fn fleet_request(&self, a: &Attempt) -> FleetRequest {
        let mut sizes = vec![a.size.clone()];
        sizes.extend(a.alternatives.iter().cloned());
        let max_price_per_vm = match a.priority {
            Priority::Spot => a.max_price_per_vm,
            Priority::Regular => None,
        };
        FleetRequest {
            name: a.fleet_name.clone(),
            region: a.region.clone(),
            priority: a.priority,
            sizes,
            vms: a.vms,
            min_vms: a.vms,
            max_price_per_vm,
            zones: Vec::new(),
            tags: [(TAG_JOB.to_string(), a.job_id.clone()), (TAG_ATTEMPT.to_string(), a.number.to_string())]
                .into_iter()
                .collect(),
            regular: None,
        }
    }

    /// Asks the cloud for an attempt's fleet. Returns false when the cloud refused at once (the
    /// attempt has then failed and its offer is blocked).
    async fn create_fleet(
        &self,
        st: &mut LoopState,
        mut a: Attempt,
        now: i64,
        report: &mut RoundReport,
    ) -> Result<bool, ControlError> {
        let request = self.fleet_request(&a);
        match self.cloud.begin_create_fleet(&request).await {
            Ok(op) => {
                a.operation = Some(op);
                // Not flushed: after a crash the fleet is found by its name anyway.
                self.store.put(&a)?;
                Ok(true)
            }
            Err(e) if e.is_retryable() => {
                tracing::debug!(fleet = %a.fleet_name, error = %e, "create deferred to the next round");
                report.cloud_errors += 1;
                Ok(true)
            }
            Err(e) => {
                self.fail_attempt(st, a, e, now, report).await?;
                Ok(false)
            }
        }
    }

    async fn follow_provisioning(
        &self,
        st: &mut LoopState,
        a: Attempt,
        now: i64,
        report: &mut RoundReport,
        ended: &mut Vec<(Attempt, Option<Job>)>,
    ) -> Result<(), ControlError> {
        let job = self.store.get::<Job>(&a.job_id)?;
        if job.as_ref().is_none_or(|j| j.state.is_final()) {
            ended.push((a, job)); // clean_up_finished deletes it
            return Ok(());
        }
        let status = match &a.operation {
            Some(op) => match self.cloud.poll_operation(op).await {
                Ok(s) => s,
                Err(CloudError::NotFound { .. }) => self.status_from_fleet(&a).await,
                Err(e) => {
                    tracing::debug!(fleet = %a.fleet_name, error = %e, "poll failed; retrying next round");
                    report.cloud_errors += 1;
                    return Ok(());
                }
            },
            None => match self.cloud.get_fleet(&a.fleet_name).await {
                // The intent was written but the create never went out (a crash, or a throttled
                // call): the name is deterministic, so asking again cannot make a twin.
                Err(CloudError::NotFound { .. }) => {
                    self.create_fleet(st, a, now, report).await?;
                    return Ok(());
                }
                Err(e) => {
                    report.cloud_errors += 1;
                    tracing::debug!(fleet = %a.fleet_name, error = %e, "get failed; retrying next round");
                    return Ok(());
                }
                Ok(_) => self.status_from_fleet(&a).await,
            },
        };
        match status {
            OperationStatus::InProgress { .. } => Ok(()),
            OperationStatus::Succeeded => {
                let running = match self.cloud.get_fleet(&a.fleet_name).await {
                    Ok(f) => f.running_vms.unwrap_or(a.vms),
                    Err(_) => a.vms,
                };
                self.mark_running(st, a, running, now, report).await
            }
            OperationStatus::Failed(err) => self.fail_attempt(st, a, err, now, report).await,
        }
    }

    /// Where a fleet stands when there is no operation to poll: its provisioning state, and, if it
    /// failed, the classified error of its first failed scale set.
    async fn status_from_fleet(&self, a: &Attempt) -> OperationStatus {
        match self.cloud.get_fleet(&a.fleet_name).await {
            Ok(f) => match f.provisioning_state {
                ProvisioningState::Succeeded => OperationStatus::Succeeded,
                ProvisioningState::Failed | ProvisioningState::Canceled => {
                    let err = match self.cloud.fleet_scale_sets(&a.fleet_name).await {
                        Ok(sets) => sets.into_iter().find_map(|s| s.error),
                        Err(_) => None,
                    };
                    OperationStatus::Failed(err.unwrap_or(CloudError::Capacity {
                        region: a.region.clone(),
                        size: Some(a.size.clone()),
                        priority: Some(a.priority),
                        zone: None,
                    }))
                }
                _ => OperationStatus::InProgress { retry_after_ms: 0 },
            },
            Err(CloudError::NotFound { .. }) => OperationStatus::Failed(CloudError::Transient {
                message: format!("fleet {} vanished while being created", a.fleet_name),
            }),
            Err(_) => OperationStatus::InProgress { retry_after_ms: 0 },
        }
    }

    async fn mark_running(
        &self,
        st: &mut LoopState,
        mut a: Attempt,
        running_vms: u32,
        now: i64,
        report: &mut RoundReport,
    ) -> Result<(), ControlError> {
        a.state = AttemptState::Running;
        a.running_since_ms = Some(now);
        a.accounted_until_ms = Some(now);
        a.running_vms = running_vms;
        a.operation = None;
        st.breakers.record_success(&a.region, now);
        self.metrics.provisioning_seconds.observe((now - a.started_at_ms).max(0) as f64 / 1000.0);
        report.became_running += 1;
        let grace = self.config.below_min_grace_ms;
        // Read outside the transaction: the store must not be used from inside one.
        let siblings: Vec<Attempt> = self
            .store
            .by_index::<Attempt>("job", &a.job_id)?
            .into_iter()
            .filter(|x| x.number != a.number && x.is_active())
            .collect();
        // A deadline job moved by its policy retires the placement it moved from, the same way.
        let replaced_by_a = |x: &Attempt| is_degraded(x, now, grace) || st.deadline.replaces(&a, x);
        let degraded: Vec<Attempt> = siblings.iter().filter(|x| replaced_by_a(x)).cloned().collect();
        let all_running = siblings.iter().filter(|x| !replaced_by_a(x)).all(|x| x.state == AttemptState::Running);
        let replaced: Vec<Attempt> = self.store.transaction(|tx| {
            tx.put(&a)?;
            let Some(mut job) = tx.get::<Job>(&a.job_id)? else { return Ok(Vec::new()) };
            if job.state.is_final() {
                return Ok(Vec::new());
            }
            if all_running {
                job.set_state(JobState::Running, now);
            }
            tx.put(&job)?;
            record_event(
                tx,
                &job,
                now,
                "running",
                format!(
                    "attempt {} is running: {} × {} ({}) in {}",
                    a.number, a.running_vms, a.size, a.priority, a.region
                ),
                serde_json::Value::Null,
            )?;
            Ok(if all_running { degraded.clone() } else { Vec::new() })
        })?;
        // Make before break: the old placement goes only now that the new one runs.
        for mut old in replaced {
            if self.cloud.delete_fleet(&old.fleet_name).await.is_ok() {
                report.fleets_deleted += 1;
                // A healthy placement left by a deadline policy ran until now: bill it up to the move.
                if old.state == AttemptState::Running
                    && st.deadline.replaces(&a, &old)
                    && let Some(mut job) = self.store.get::<Job>(&old.job_id)?
                {
                    let mut tenant = self.tenant(&job.spec.tenant)?;
                    self.account(&mut old, &mut job, &mut tenant, now);
                    self.store.transaction(|tx| {
                        tx.put(&job)?;
                        tx.put(&tenant)?;
                        Ok(())
                    })?;
                }
                old.state = AttemptState::Replaced;
                old.ended_at_ms = Some(now);
                self.store.put(&old)?;
            }
        }
        Ok(())
    }

    async fn fail_attempt(
        &self,
        st: &mut LoopState,
        mut a: Attempt,
        err: CloudError,
        now: i64,
        report: &mut RoundReport,
    ) -> Result<(), ControlError> {
        let class = err.class();
        self.metrics.provisioning_failures.get_or_create(&ClassLabel { class: class.as_str().to_string() }).inc();
        report.provisioning_failures += 1;
        let block = BlockedOffer::from_error(&err, &a.region, &a.size, a.priority, now);
        if let CloudError::Quota { region, pool, .. } = &err {
            let attempts = self.active_attempts()?;
            let ours = our_usage(attempts.iter().filter(|x| x.fleet_name != a.fleet_name));
            st.world.mark_pool_full(region, pool, &ours);
        }
        if err.counts_against_region() && st.breakers.record_failure(&a.region, now) {
            tracing::warn!(region = %a.region, "region marked unhealthy after repeated failures");
        }
        if let Some(b) = &block {
            st.world.add_block(b.clone());
        }
        a.state = AttemptState::Failed;
        a.ended_at_ms = Some(now);
        a.failure = Some(err.to_string());
        a.failure_class = Some(class);
        a.operation = None;
        let others_active =
            self.store.by_index::<Attempt>("job", &a.job_id)?.iter().any(|x| x.number != a.number && x.is_active());
        self.store.transaction(|tx| {
            tx.put(&a)?;
            if let Some(b) = &block {
                tx.put(b)?;
            }
            let Some(mut job) = tx.get::<Job>(&a.job_id)? else { return Ok(()) };
            job.last_failure = Some(format!("{} {} in {}: {}", a.size, a.priority, a.region, err));
            if !job.state.is_final() {
                job.awaiting_failover = true;
                if !others_active {
                    job.set_state(JobState::Pending, now);
                }
            }
            tx.put(&job)?;
            record_event(
                tx,
                &job,
                now,
                "provisioning_failed",
                format!("attempt {} ({} × {} {} in {}) failed: {}", a.number, a.vms, a.size, a.priority, a.region, err),
                serde_json::json!({"class": class.as_str()}),
            )?;
            Ok(())
        })?;
        // A failed fleet still exists as a resource; remove it so nothing is left behind.
        if let Err(e) = self.cloud.delete_fleet(&a.fleet_name).await {
            tracing::debug!(fleet = %a.fleet_name, error = %e, "cannot delete failed fleet yet");
        }
        Ok(())
    }

    /// Accrues cost and progress of a running attempt up to `now` at its last known VM count.
    pub(crate) fn account(&self, a: &mut Attempt, job: &mut Job, tenant: &mut Tenant, now: i64) {
        let from = a.accounted_until_ms.or(a.running_since_ms).unwrap_or(now);
        if now <= from {
            return;
        }
        let hours = (now - from) as f64 / HOUR_MS;
        let cost = a.running_vms as f64 * a.price_per_hour * hours;
        a.cost_usd += cost;
        job.cost_usd += cost;
        tenant.spent_usd += cost;
        if !job.state.is_final() {
            let gpus_per_vm = a.gpus as f64 / a.vms.max(1) as f64;
            let healthy = a.running_vms >= a.vms;
            let fraction = if job.spec.is_gang() && job.spec.kind != crate::model::JobKind::Inference {
                if healthy { 1.0 } else { 0.0 }
            } else {
                (a.running_vms as f64 * gpus_per_vm / job.wanted_gpus().max(1) as f64).min(1.0)
            };
            job.progress_hours += hours * fraction;
            if let Some(d) = job.spec.duration_hours {
                job.progress_hours = job.progress_hours.min(d);
            }
        }
        a.accounted_until_ms = Some(now);
    }

    async fn watch_running(
        &self,
        st: &mut LoopState,
        now: i64,
        report: &mut RoundReport,
        ended: &mut Vec<(Attempt, Option<Job>)>,
    ) -> Result<(), ControlError> {
        let grace = self.config.below_min_grace_ms;
        for mut a in self.store.by_index::<Attempt>("state", "running")? {
            let mut job = match self.store.get::<Job>(&a.job_id)? {
                Some(job) if !job.state.is_final() => job,
                other => {
                    ended.push((a, other));
                    continue;
                }
            };
            let settled_until = a.accounted_until_ms.or(a.running_since_ms).unwrap_or(now);
            let before = (a.running_vms, a.below_min_since_ms, job.state, job.awaiting_failover, job.evictions);
            let observed = match self.cloud.get_fleet(&a.fleet_name).await {
                Ok(f) if matches!(f.provisioning_state, ProvisioningState::Failed | ProvisioningState::Deleting) => 0,
                Ok(f) => f.running_vms.unwrap_or(a.vms),
                Err(CloudError::NotFound { .. }) => 0,
                Err(_) => {
                    report.cloud_errors += 1;
                    a.running_vms
                }
            };
            // What the tenant owes for this stretch; added to the stored tenant only if this round
            // writes the attempt's accounting (they are settled together or not at all).
            let mut accrued = Tenant::named(&job.spec.tenant);
            self.account(&mut a, &mut job, &mut accrued, now);
            // Running VMs are billed at the offer's price now (a spot price moves): what ran so far
            // was accrued at the old price just above, what runs from now on at the new one.
            let mut repriced = false;
            if st.prices_moved
                && let Some(p) = self.list_price(st, &a.region, &a.size, to_solver_priority(a.priority))
                && p != a.price_per_hour
            {
                a.price_per_hour = p;
                repriced = true;
            }
            let mut events: Vec<(&str, String)> = Vec::new();
            let mut delete_now = false;
            if observed < a.vms {
                if a.below_min_since_ms.is_none() || observed < a.running_vms {
                    let lost_vms = a.running_vms.saturating_sub(observed);
                    if a.below_min_since_ms.is_none() {
                        a.below_min_since_ms = Some(now);
                    }
                    if lost_vms > 0 {
                        report.evictions += 1;
                        self.metrics.evictions.inc();
                        if a.priority == Priority::Spot {
                            job.evictions += 1;
                            st.deadline.evicted_spot.insert(a.region.clone());
                        }
                        let lost =
                            roll_back_to_checkpoint(&mut job, lost_vms as f64 * a.gpus as f64 / a.vms.max(1) as f64);
                        events.push((
                            "evicted",
                            format!(
                                "{lost_vms} of {} VMs of attempt {} lost in {} ({}); {lost:.2} GPU-hours of work since the last checkpoint lost",
                                a.vms, a.number, a.region, a.priority
                            ),
                        ));
                    }
                }
                let degraded = observed == 0 || now - a.below_min_since_ms.unwrap_or(now) >= grace;
                if degraded && !job.awaiting_failover {
                    job.awaiting_failover = true;
                    if job.state == JobState::Running {
                        job.set_state(JobState::Migrating, now);
                    }
                    events.push((
                        "migrating",
                        format!("attempt {} has {observed} of {} VMs; placing the job again", a.number, a.vms),
                    ));
                }
                delete_now = observed == 0;
            } else if a.below_min_since_ms.is_some() {
                a.below_min_since_ms = None;
                events.push(("recovered", format!("attempt {} is back to {} VMs", a.number, a.vms)));
            }
            a.running_vms = observed;
            if delete_now {
                // Nothing left to keep running: end the attempt now so the job is placed afresh.
                a.state = AttemptState::Failed;
                a.ended_at_ms = Some(now);
                a.failure = Some("all VMs lost".into());
                a.failure_class = Some(crate::cloud::FailureClass::Capacity);
                if a.priority == Priority::Spot {
                    st.world.add_block(BlockedOffer {
                        region: a.region.clone(),
                        size: Some(a.size.clone()),
                        family: None,
                        priority: Some(Priority::Spot),
                        zone: None,
                        class: crate::cloud::FailureClass::Capacity,
                        reason: "spot VMs evicted".into(),
                        since_ms: now,
                        until_ms: now + 15 * 60_000,
                    });
                }
            }
            let mut finished = None;
            if job.spec.budget.is_some_and(|b| job.cost_usd >= b) {
                finished =
                    Some((JobState::Failed, format!("budget of ${:.2} exhausted", job.spec.budget.unwrap_or(0.0))));
            } else if self.config.auto_complete && job.remaining_hours() == Some(0.0) {
                finished = Some((JobState::Succeeded, "work done".to_string()));
            }
            if delete_now
                && finished.is_none()
                && !self
                    .store
                    .by_index::<Attempt>("job", &a.job_id)?
                    .iter()
                    .any(|x| x.number != a.number && x.is_active())
            {
                job.set_state(JobState::Pending, now);
            }
            if let Some((state, why)) = &finished {
                job.set_state(*state, now);
                job.end_reason = Some(why.clone());
                events.push((state.as_str(), why.clone()));
            }
            let block = st.world.blocked.last().filter(|b| delete_now && b.since_ms == now).cloned();
            // Accrual is linear between changes, so a stretch left unwritten is accrued the same
            // later (or after a crash) from the stored `accounted_until_ms`: write only when
            // something changed or the settle interval has passed.
            let changed = delete_now
                || repriced
                || finished.is_some()
                || !events.is_empty()
                || before != (a.running_vms, a.below_min_since_ms, job.state, job.awaiting_failover, job.evictions);
            let settle_due = self.config.settle_interval_ms.is_some_and(|i| now - settled_until >= i);
            if !changed && !settle_due {
                continue;
            }
            let mut tenant = self.tenant(&job.spec.tenant)?;
            tenant.spent_usd += accrued.spent_usd;
            self.store.transaction(|tx| {
                // The user may have cancelled or completed the job since we read it: their word wins.
                if let Some(current) = tx.get::<Job>(&job.id)?
                    && current.state.is_final()
                    && !job.state.is_final()
                {
                    let mut merged = current;
                    merged.cost_usd = job.cost_usd;
                    merged.progress_hours = job.progress_hours;
                    tx.put(&merged)?;
                } else {
                    tx.put(&job)?;
                }
                tx.put(&a)?;
                tx.put(&tenant)?;
                if let Some(b) = &block {
                    tx.put(b)?;
                }
                for (kind, msg) in &events {
                    record_event(tx, &job, now, kind, msg.clone(), serde_json::Value::Null)?;
                }
                Ok(())
            })?;
            if finished.is_some() {
                report.finished += 1;
                ended.push((a.clone(), Some(job)));
            }
            if delete_now {
                let _ = self.cloud.delete_fleet(&a.fleet_name).await;
            }
        }
        Ok(())
    }

    /// Writes the cost and progress of every running attempt up to now, however recently they were
    /// settled (see [`super::ControlConfig::settle_interval_ms`]): before reading costs that must be
    /// exact, e.g. at the end of a simulated run.
    pub async fn settle_accounts(&self) -> Result<(), ControlError> {
        let _round = self.state.lock().await;
        let now = self.clock.now_ms();
        for a in self.store.by_index::<Attempt>("state", "running")? {
            if a.accounted_until_ms.or(a.running_since_ms).unwrap_or(now) >= now {
                continue;
            }
            self.store.transaction(|tx| {
                let Some(mut job) = tx.get::<Job>(&a.job_id)? else { return Ok(()) };
                let mut tenant = tx.get::<Tenant>(&job.spec.tenant)?.unwrap_or_else(|| Tenant::named(&job.spec.tenant));
                let mut a = a.clone();
                self.account(&mut a, &mut job, &mut tenant, now);
                tx.put(&job)?;
                tx.put(&a)?;
                tx.put(&tenant)?;
                Ok(())
            })?;
        }
        Ok(())
    }

    fn tenant(&self, name: &str) -> Result<Tenant, StoreError> {
        Ok(self.store.get::<Tenant>(name)?.unwrap_or_else(|| Tenant::named(name)))
    }

    /// Jobs that ended (by a user, a budget, or completion) still holding fleets: settle their
    /// cost up to now, then delete the fleets.
    async fn clean_up_finished(
        &self,
        now: i64,
        report: &mut RoundReport,
        finished: Vec<(Attempt, Option<Job>)>,
    ) -> Result<(), ControlError> {
        use futures_util::StreamExt;
        // A delete is a long-running operation that the cloud may ask us to wait on: run them side
        // by side (bounded, to stay within ARM's rate limits) so a burst of finished jobs does not
        // hold up the rest of the round for a Retry-After each.
        let cloud = &self.cloud;
        let deleted: Vec<(Attempt, Option<Job>, Result<(), CloudError>)> =
            futures_util::stream::iter(finished.into_iter().map(|(a, job)| async move {
                let outcome = cloud.delete_fleet(&a.fleet_name).await;
                (a, job, outcome)
            }))
            .buffered(DELETE_CONCURRENCY)
            .collect()
            .await;
        for (mut a, job, outcome) in deleted {
            if let Err(e) = outcome {
                tracing::debug!(fleet = %a.fleet_name, error = %e, "delete failed; retrying next round");
                report.cloud_errors += 1;
                continue;
            }
            report.fleets_deleted += 1;
            let Some(mut job) = job else {
                a.state = AttemptState::Ended;
                a.ended_at_ms = Some(now);
                self.store.put(&a)?;
                continue;
            };
            let mut tenant = self.tenant(&job.spec.tenant)?;
            if a.state == AttemptState::Running {
                self.account(&mut a, &mut job, &mut tenant, now);
            }
            a.state = AttemptState::Ended;
            a.ended_at_ms = Some(now);
            a.operation = None;
            self.store.transaction(|tx| {
                let mut current = tx.get::<Job>(&job.id)?.unwrap_or_else(|| job.clone());
                current.cost_usd = job.cost_usd;
                tx.put(&current)?;
                tx.put(&a)?;
                tx.put(&tenant)?;
                record_event(
                    tx,
                    &current,
                    now,
                    "fleet_deleted",
                    format!("fleet {} deleted; job cost ${:.2}", a.fleet_name, current.cost_usd),
                    serde_json::Value::Null,
                )?;
                Ok(())
            })?;
            report.finished += 1;
        }
        Ok(())
    }

    /// Everything a plan is made from: open jobs, their demands, feasible offers, free quota.
    /// `jobs`: the open jobs, if the caller has just read them (they are read otherwise).
    fn plan_input(&self, st: &LoopState, now: i64, jobs: Option<Vec<Job>>) -> Result<PlanInput, ControlError> {
        let jobs = match jobs {
            Some(jobs) => jobs,
            None => self.open_jobs()?,
        };
        let attempts = self.active_attempts()?;
        let grace = self.config.below_min_grace_ms;
        let mut healthy: BTreeMap<&str, u32> = BTreeMap::new();
        for a in &attempts {
            if !is_degraded(a, now, grace) && !st.deadline.retiring(a) {
                *healthy.entry(a.job_id.as_str()).or_default() += a.gpus;
            }
        }
        let mut over_budget: BTreeMap<String, String> = BTreeMap::new();
        for t in self.store.scan::<Tenant>()? {
            if let Some(b) = t.budget_usd
                && t.spent_usd >= b
            {
                over_budget.insert(
                    t.name.clone(),
                    format!("tenant {} is over its budget (${:.2} of ${b:.2} spent)", t.name, t.spent_usd),
                );
            }
        }
        let mut problem_jobs = Vec::new();
        let mut reasons: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for job in &jobs {
            let mut d = demands(job, &self.catalog, healthy.get(job.id.as_str()).copied().unwrap_or(0));
            if d.is_empty() {
                continue;
            }
            if let Some(choice) = st.deadline.choices.get(&job.id) {
                if choice.hold.is_none() {
                    reasons.entry(job.id.clone()).or_default().push(choice.waiting_reason());
                    continue;
                }
                apply_deadline_choice(&mut d, choice);
            }
            if let Some(why) = over_budget.get(&job.spec.tenant) {
                reasons.entry(job.id.clone()).or_default().push(why.clone());
                continue;
            }
            problem_jobs.extend(d);
        }
        let offers = self.solver_offers(st, &attempts, now);
        let ours = our_usage(attempts.iter());
        let quotas = st
            .world
            .pools(&ours)
            .into_iter()
            .map(|p| solver::QuotaLimit { region: p.region, pool: p.pool, vcpus: p.free })
            .collect();
        Ok(PlanInput { jobs, problem_jobs, reasons, offers, quotas, attempts })
    }

    /// What the solver would do now, without provisioning anything (`GET /v1/plan`).
    pub async fn plan_preview(&self) -> Result<solver::Plan, ControlError> {
        let st = self.state.lock().await;
        let now = self.clock.now_ms();
        let input = self.plan_input(&st, now, None)?;
        let problem = solver::Problem {
            offers: input.offers,
            quotas: input.quotas,
            jobs: input.problem_jobs,
            egress: Vec::new(),
        };
        let mut plan = solver::solve(
            &problem,
            &solver::SolveOptions {
                method: solver::Method::Best,
                time_limit_ms: Some(self.config.solve_time_limit_ms),
            },
        );
        for (job, why) in input.reasons {
            plan.unplaced.push(solver::Unplaced { job, reasons: why });
        }
        Ok(plan)
    }

    /// Builds the solver problem from open jobs and feasible offers, solves it, records why jobs
    /// wait, and provisions the placements. Returns how many placements the cloud refused at once
    /// (the caller then re-plans within the same round).
    async fn plan_and_provision(
        &self,
        st: &mut LoopState,
        now: i64,
        report: &mut RoundReport,
        open_jobs: Option<Vec<Job>>,
    ) -> Result<(usize, Vec<Attempt>), ControlError> {
        let PlanInput { jobs, problem_jobs, mut reasons, offers, quotas, attempts } =
            self.plan_input(st, now, open_jobs)?;
        let problem_caps: BTreeMap<String, Option<f64>> =
            problem_jobs.iter().map(|d| (d.id.clone(), d.max_price_per_hour)).collect();
        let mut plan = None;
        if !problem_jobs.is_empty() {
            let problem = solver::Problem { offers, quotas, jobs: problem_jobs, egress: Vec::new() };
            // The plan depends only on the problem (bar the solver's time limit, rarely reached): a
            // round that sees the same problem as the last solve reuses its plan.
            let p = match &st.last_solve {
                Some((last, plan)) if *last == problem => plan.clone(),
                _ => {
                    let started = std::time::Instant::now();
                    let p = solver::solve(
                        &problem,
                        &solver::SolveOptions {
                            method: solver::Method::Best,
                            time_limit_ms: Some(self.config.solve_time_limit_ms),
                        },
                    );
                    let secs = started.elapsed().as_secs_f64();
                    report.solve_ms += secs * 1000.0;
                    self.metrics.solve_seconds.observe(secs);
                    st.last_solve = Some((problem, p.clone()));
                    p
                }
            };
            for u in &p.unplaced {
                let (job_id, _) = DemandPart::parse(&u.job);
                reasons.entry(job_id.to_string()).or_default().extend(u.reasons.iter().cloned());
            }
            plan = Some(p);
        }
        // Why jobs wait: the solver's binding constraints, plus the blocks that hid offers.
        for job in &jobs {
            if job.state != JobState::Pending {
                continue;
            }
            let mut why = reasons.remove(&job.id).unwrap_or_default();
            if why.is_empty()
                && !plan.as_ref().is_some_and(|p| p.placements.iter().any(|x| DemandPart::parse(&x.job).0 == job.id))
            {
                continue;
            }
            why.extend(self.blocks_for_job(st, job, now));
            why.dedup();
            if !why.is_empty() {
                report.pending += 1;
            }
            if why != job.pending_reasons && !why.is_empty() {
                let msg = why.join("; ");
                self.store.transaction(|tx| {
                    let Some(mut j) = tx.get::<Job>(&job.id)? else { return Ok(()) };
                    if j.state != JobState::Pending {
                        return Ok(());
                    }
                    j.pending_reasons = why.clone();
                    tx.put(&j)?;
                    record_event(tx, &j, now, "waiting", msg.clone(), serde_json::Value::Null)?;
                    Ok(())
                })?;
            }
        }
        let Some(plan) = plan else { return Ok((0, attempts)) };
        let mut refused = 0;
        for p in &plan.placements {
            let (job_id, _) = DemandPart::parse(&p.job);
            let Some(job) = self.store.get::<Job>(job_id)? else { continue };
            if job.state.is_final() {
                continue;
            }
            // The solver's filters (spot only, one region) already keep a deadline job to its
            // policy's choice; a placement outside it would undo the policy, so it is never made.
            if st.deadline.choices.get(job_id).is_some_and(|c| !c.allows(&p.region, p.priority)) {
                continue;
            }
            let price =
                self.list_price(st, &p.region, &p.size, p.priority).unwrap_or(p.price_per_hour / p.vms.max(1) as f64);
            // The solver kept vms × price within the part's cap: spreading that cap over the VMs
            // gives a per-VM spot cap at or above the price it planned with.
            let cap = problem_caps.get(p.job.as_str()).copied().flatten().map(|c| c / p.vms.max(1) as f64);
            if !self.place(st, job, p, (price, cap), now, report).await? {
                refused += 1;
            }
        }
        Ok((refused, attempts))
    }

    /// The cloud's current price of an offer (the solver saw a shunned region's prices inflated):
    /// looked up when placing, and when prices moved, rather than kept for every offer every round.
    fn list_price(&self, st: &LoopState, region: &str, size: &str, priority: solver::Priority) -> Option<f64> {
        st.world
            .offers
            .iter()
            .rev()
            .filter(|o| o.region == region && to_solver_priority(o.priority) == priority && o.price_per_hour.is_some())
            .find(|o| self.catalog.size(&o.size).is_some_and(|s| s.name == size && s.gpus > 0))
            .and_then(|o| o.price_per_hour)
    }

    /// Offers the solver may use: priced, not restricted, not blocked; in a shunned region their
    /// price is inflated so they rank last ([`Controller::list_price`] has the real one).
    fn solver_offers(&self, st: &LoopState, attempts: &[Attempt], now: i64) -> Vec<solver::Offer> {
        let mut offers = Vec::new();
        // The cloud's free capacity does not yet show fleets still being created: hold their VMs.
        let mut in_flight: BTreeMap<(String, String, Priority), u32> = BTreeMap::new();
        for a in attempts.iter().filter(|a| a.state == AttemptState::Provisioning) {
            *in_flight.entry((a.region.clone(), a.size.clone(), a.priority)).or_default() += a.vms;
        }
        for o in &st.world.offers {
            let Some(size) = self.catalog.size(&o.size) else { continue };
            let Some(price) = o.price_per_hour else { continue };
            if size.gpus == 0 || st.world.restricted(&o.region, &size.name) {
                continue;
            }
            if st.world.block_for(&o.region, &size.name, &size.family, o.priority, now).is_some() {
                continue;
            }
            let priority = to_solver_priority(o.priority);
            let shown =
                if st.breakers.shunned(&o.region, now) { price * self.config.shunned_price_factor } else { price };
            offers.push(solver::Offer {
                region: o.region.clone(),
                size: size.name.clone(),
                priority,
                gpu_model: size.gpu_model.clone(),
                gpus_per_vm: size.gpus,
                vcpus_per_vm: size.vcpus,
                family: size.family.clone(),
                price_per_hour: shown,
                capacity_vms: o.capacity_vms.map(|c| {
                    c.saturating_sub(
                        in_flight.get(&(o.region.clone(), size.name.clone(), o.priority)).copied().unwrap_or(0),
                    )
                }),
                eviction_rate_per_hour: o.eviction_rate_per_hour,
            });
        }
        offers
    }

    fn blocks_for_job(&self, st: &LoopState, job: &Job, now: i64) -> Vec<String> {
        let regions = job.spec.allowed_regions(&self.catalog);
        let sizes = job.spec.acceptable_sizes(&self.catalog);
        let mut out = Vec::new();
        for b in st.world.blocked.iter().filter(|b| b.is_active(now) && regions.contains(&b.region)) {
            if sizes.iter().any(|s| {
                [Priority::Regular, Priority::Spot].iter().any(|&p| b.covers(&b.region, &s.name, &s.family, p))
            }) {
                out.push(format!("blocked until {}: {}", fmt_time(b.until_ms), b.reason));
            }
        }
        out.truncate(5);
        out
    }

    /// Writes the intent for one placement durably, then asks the cloud for the fleet.
    async fn place(
        &self,
        st: &mut LoopState,
        job: Job,
        p: &solver::Placement,
        (price, max_price_per_vm): (f64, Option<f64>),
        now: i64,
        report: &mut RoundReport,
    ) -> Result<bool, ControlError> {
        let Some(size) = self.catalog.size(&p.size) else { return Ok(true) };
        let priority = match p.priority {
            solver::Priority::Regular => Priority::Regular,
            solver::Priority::Spot => Priority::Spot,
        };
        let alternatives = self.alternatives(st, &p.region, &size.name, priority, now);
        let number = job.attempts + 1;
        let attempt = Attempt {
            job_id: job.id.clone(),
            number,
            fleet_name: fleet_name(&job.id, number),
            region: p.region.clone(),
            size: size.name.clone(),
            alternatives,
            priority,
            vms: p.vms,
            gpus: p.gpus,
            vcpus: p.vms as u64 * size.vcpus as u64,
            family: size.family.clone(),
            price_per_hour: price,
            max_price_per_vm: if priority == Priority::Spot { max_price_per_vm.map(|c| c.max(price)) } else { None },
            state: AttemptState::Provisioning,
            started_at_ms: now,
            running_since_ms: None,
            ended_at_ms: None,
            operation: None,
            running_vms: 0,
            below_min_since_ms: None,
            cost_usd: 0.0,
            accounted_until_ms: None,
            failure: None,
            failure_class: None,
        };
        let written = self.store.transaction(|tx| {
            let Some(mut j) = tx.get::<Job>(&job.id)? else { return Ok(None) };
            if j.state.is_final() || j.attempts != job.attempts {
                return Ok(None);
            }
            j.attempts = number;
            if j.state == JobState::Pending {
                j.set_state(JobState::Provisioning, now);
            }
            let failover = j.awaiting_failover;
            if failover {
                j.failovers += 1;
                j.awaiting_failover = false;
            }
            tx.put(&attempt)?;
            tx.put(&j)?;
            if failover {
                record_event(
                    tx,
                    &j,
                    now,
                    "failover",
                    format!(
                        "moving to {} in {} after: {}",
                        size.name,
                        p.region,
                        j.last_failure.clone().unwrap_or_default()
                    ),
                    serde_json::Value::Null,
                )?;
            }
            record_event(
                tx,
                &j,
                now,
                "placed",
                format!(
                    "attempt {number}: {} × {} {} in {} at ${:.3}/VM-hour, fleet {}",
                    p.vms, size.name, priority, p.region, price, attempt.fleet_name
                ),
                serde_json::Value::Null,
            )?;
            Ok(Some((j, failover)))
        })?;
        let Some((_, failover)) = written else { return Ok(true) };
        self.durable()?;
        if failover {
            report.failovers += 1;
            self.metrics.failovers.inc();
        }
        report.placements += 1;
        self.metrics.placements.inc();
        st.breakers.record_attempt(&p.region, now);
        self.create_fleet(st, attempt, now, report).await
    }

    /// Other sizes that meet the same demand in the same region and tier (the fleet may fall back to
    /// them), ranked by the cloud module's rule, minus those the loop knows are restricted or blocked.
    fn alternatives(&self, st: &LoopState, region: &str, chosen: &str, priority: Priority, now: i64) -> Vec<String> {
        crate::cloud::azure::fleet_body::ranked_sizes(&self.catalog, chosen, region, priority, usize::MAX)
            .into_iter()
            .skip(1) // the chosen size itself
            .filter(|name| !st.world.restricted(region, name))
            .filter(|name| {
                self.catalog
                    .size(name)
                    .is_some_and(|s| st.world.block_for(region, name, &s.family, priority, now).is_none())
            })
            .take(MAX_ALTERNATIVES)
            .collect()
    }

    /// Gauges, and the report's spend rate and GPUs by region, from the round's active attempts.
    fn update_gauges(
        &self,
        st: &LoopState,
        now: i64,
        attempts: &[Attempt],
        report: &mut RoundReport,
    ) -> Result<(), StoreError> {
        for s in JobState::ALL {
            let n = self.store.count_by_index::<Job>("state", s.as_str())?;
            self.metrics.jobs.get_or_create(&StateLabel { state: s.as_str().to_string() }).set(n as i64);
        }
        self.metrics.blocked_offers.set(st.world.blocked.iter().filter(|b| b.is_active(now)).count() as i64);
        self.metrics.gpus_in_use.clear();
        let mut rate = 0.0;
        report.billed_gpus_by_region.clear();
        for a in attempts.iter().filter(|a| a.state == AttemptState::Running) {
            // Billed GPUs are the VMs' GPUs, whether or not the job uses them all.
            let per_vm = self.catalog.size(&a.size).map_or(a.gpus as f64 / a.vms.max(1) as f64, |s| s.gpus as f64);
            *report.billed_gpus_by_region.entry(a.region.clone()).or_default() += a.running_vms as f64 * per_vm;
            let gpus = (a.running_vms as u64 * a.gpus as u64 / a.vms.max(1) as u64) as i64;
            self.metrics
                .gpus_in_use
                .get_or_create(&OfferLabel {
                    region: a.region.clone(),
                    size: a.size.clone(),
                    priority: a.priority.to_string(),
                })
                .inc_by(gpus);
            rate += a.running_vms as f64 * a.price_per_hour;
        }
        self.metrics.cost_rate.set(rate);
        report.cost_rate_usd_per_hour = rate;
        Ok(())
    }
}

struct PlanInput {
    jobs: Vec<Job>,
    problem_jobs: Vec<solver::JobDemand>,
    reasons: BTreeMap<String, Vec<String>>,
    offers: Vec<solver::Offer>,
    quotas: Vec<solver::QuotaLimit>,
    /// The active attempts the input was made from.
    attempts: Vec<Attempt>,
}

/// True when an attempt has been below its minimum for longer than the grace period, or has
/// nothing left: the job needs a new placement for the GPUs it carried.
/// Whether two reads of the offers list the same offers at the same prices (in the same order, as a
/// cloud lists them; a reordering counts as a change, which only costs a re-pricing pass).
fn same_prices(old: &[crate::model::Offer], new: &[crate::model::Offer]) -> bool {
    old.len() == new.len()
        && old.iter().zip(new).all(|(a, b)| {
            a.price_per_hour == b.price_per_hour && a.priority == b.priority && a.size == b.size && a.region == b.region
        })
}

fn is_degraded(a: &Attempt, now: i64, grace_ms: i64) -> bool {
    a.state == AttemptState::Running && a.below_min_since_ms.is_some_and(|t| a.running_vms == 0 || now - t >= grace_ms)
}

/// Loses the work done since the last checkpoint for `lost_gpus` GPUs; returns GPU-hours lost.
fn roll_back_to_checkpoint(job: &mut Job, lost_gpus: f64) -> f64 {
    let interval_h = job.spec.checkpoint_interval_minutes.map(|m| m as f64 / 60.0);
    let kept = match interval_h {
        Some(i) if i > 0.0 => (job.progress_hours / i).floor() * i,
        _ => 0.0,
    };
    let since_checkpoint = (job.progress_hours - kept).max(0.0);
    let wanted = job.wanted_gpus().max(1) as f64;
    let gang = job.spec.is_gang() && job.spec.kind != crate::model::JobKind::Inference;
    let share = if gang { 1.0 } else { (lost_gpus / wanted).min(1.0) };
    job.progress_hours -= since_checkpoint * share;
    let lost = since_checkpoint * share * wanted;
    job.lost_work_gpu_hours += lost;
    lost
}

fn to_solver_priority(p: Priority) -> solver::Priority {
    match p {
        Priority::Regular => solver::Priority::Regular,
        Priority::Spot => solver::Priority::Spot,
    }
}

fn fmt_time(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| ms.to_string())
}
