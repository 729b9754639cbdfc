//! One reconcile round: **observe** (one snapshot of the store and the cloud, `snapshot.rs`) →
//! **decide** (pure functions from the snapshot to actions: `follow.rs`, `watch.rs`, `cleanup.rs`,
//! `deadline.rs`, `placement.rs`) → **act** (`act.rs`). The steps, in order:
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

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use state::StoreError;

use super::actions::{Action, Change, JobEdit};
use super::deadline::{self, deadline_managed};
use super::demand::DemandPart;
use super::feasibility::Feasibility;
use super::follow::{self, FollowUp};
use super::metrics::{ClassLabel, FilterLabel, OfferLabel, StateLabel};
use super::snapshot::Snapshot;
use super::world::our_usage;
use super::{Controller, LoopState, cleanup, placement, watch};
use crate::cloud::CloudError;
use crate::model::{Attempt, AttemptState, EventKind, Job, JobState};
use crate::records::{JobsBy, Lookup, Tenant, attempt_key};

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
        let cleanups = ended.iter().map(|(a, job)| cleanup::clean_up(now, a, job.as_ref())).collect();
        self.act(st, &mut snap, &mut report, cleanups).await?;
        self.forget_finished(st, now)?;
        self.choose_deadlines(st, &mut snap, &mut report).await?;
        for _ in 0..self.config.max_replans_per_round.max(1) {
            if self.plan_and_place(st, &mut snap, &mut report).await? == 0 {
                break;
            }
        }
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

    /// Every tagged fleet without a live attempt is deleted (recorded once as an `orphan_fleet`
    /// event; with `delete_orphans` off, only recorded), and the deletions the loop owns that are
    /// due are tried again.
    async fn reconcile_cloud(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
    ) -> Result<(), ControlError> {
        let mut actions: Vec<Action> =
            st.deletions.due(snap.now).into_iter().map(|fleet| Action::Delete { fleet, then: None }).collect();
        if let Some(fleets) = snap.cloud_fleets.take() {
            let known: BTreeSet<String> =
                fleets.iter().filter(|f| st.deletions.knows(&f.name)).map(|f| f.name.clone()).collect();
            let orphans = cleanup::orphans(snap, &fleets, &known);
            let live: BTreeSet<&str> = fleets.iter().map(|f| f.name.as_str()).collect();
            st.orphans_reported.retain(|f| live.contains(f.as_str()));
            for o in orphans {
                report.orphans += 1;
                if st.orphans_reported.insert(o.fleet.clone()) {
                    self.record_orphan(snap.now, &o)?;
                }
                if self.config.delete_orphans {
                    actions.push(Action::Delete { fleet: o.fleet, then: None });
                }
            }
        }
        self.act(st, snap, report, actions).await?;
        Ok(())
    }

    fn record_orphan(&self, now: i64, o: &cleanup::Orphan) -> Result<(), StoreError> {
        let what = if self.config.delete_orphans { "; deleting it" } else { "; left alone" };
        tracing::warn!(fleet = %o.fleet, job = %o.job_id, "{}{what}", o.why);
        self.store.transaction(|tx| {
            tx.append_event(state::EventDraft {
                at_ms: now,
                kind: EventKind::OrphanFleet.as_str().into(),
                job_id: Some(o.job_id.clone()),
                tenant: None,
                message: format!("{}{what}", o.why),
                data: serde_json::Value::Null,
            })?;
            Ok(())
        })
    }

    /// Step 2: every attempt being provisioned, from what the cloud said of it.
    async fn follow_provisioning(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
        ended: &mut Vec<(Attempt, Option<Job>)>,
    ) -> Result<(), ControlError> {
        for a in snap.in_state(AttemptState::Provisioning) {
            let job = snap.jobs.get(&a.job_id).cloned();
            if job.as_ref().is_none_or(|j| j.state.is_final()) {
                ended.push((a, job));
                continue;
            }
            let key = attempt_key(&a.job_id, a.number);
            match follow::follow_up(&a, snap.seen.get(&key)) {
                FollowUp::Wait => {}
                FollowUp::LookAgainIn(after_ms) => {
                    self.act(st, snap, report, vec![Action::Requeue { attempt_key: key, after_ms }]).await?;
                }
                FollowUp::Create => {
                    let refused = self.act(st, snap, report, vec![Action::Create(a)]).await?;
                    self.fail_refused(st, snap, report, refused).await?;
                }
                FollowUp::Running(running_vms) => self.became_running(st, snap, report, &a, running_vms).await?,
                FollowUp::Failed(err) => self.fail(st, snap, report, &a, &err).await?,
            }
        }
        Ok(())
    }

    async fn became_running(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
        a: &Attempt,
        running_vms: u32,
    ) -> Result<(), ControlError> {
        let now = snap.now;
        self.metrics.provisioning_seconds.observe((now - a.started_at_ms).max(0) as f64 / 1000.0);
        report.became_running += 1;
        let (change, retired) = follow::became_running(snap, st, a, running_vms, self.config.below_min_grace_ms);
        let running = change.attempts[0].clone();
        self.act(st, snap, report, vec![Action::Record(change)]).await?;
        // Make before break: the old placements go only now that the new one runs.
        for old in retired {
            let billed = st.deadline.replaces(&running, &old);
            let actions = cleanup::retire(snap, &old, billed);
            self.act(st, snap, report, actions).await?;
        }
        Ok(())
    }

    async fn fail(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
        a: &Attempt,
        err: &CloudError,
    ) -> Result<(), ControlError> {
        self.metrics.provisioning_failures.get_or_create(&ClassLabel { class: err.class().as_str().to_string() }).inc();
        report.provisioning_failures += 1;
        let actions = follow::failed(snap, st, a, err);
        self.act(st, snap, report, actions).await?;
        Ok(())
    }

    async fn fail_refused(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
        refused: Vec<(Attempt, CloudError)>,
    ) -> Result<usize, ControlError> {
        let n = refused.len();
        for (a, err) in refused {
            self.fail(st, snap, report, &a, &err).await?;
        }
        Ok(n)
    }

    /// Step 3: every running attempt (those that reached running in step 2 included).
    async fn watch_running(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
        ended: &mut Vec<(Attempt, Option<Job>)>,
    ) -> Result<(), ControlError> {
        for a in snap.in_state(AttemptState::Running) {
            let job = match snap.jobs.get(&a.job_id) {
                Some(job) if !job.state.is_final() => job.clone(),
                other => {
                    ended.push((a, other.cloned()));
                    continue;
                }
            };
            let w = watch::watch(snap, st, &self.config, &self.catalog, &a, &job);
            if w.evicted {
                report.evictions += 1;
                self.metrics.evictions.inc();
            }
            let Some(change) = w.change else { continue };
            let mut actions = vec![Action::Record(change)];
            if w.delete_fleet {
                actions.push(Action::Delete { fleet: a.fleet_name.clone(), then: None });
            }
            // Written before the fleet is deleted, so a crash in between leaves an ended attempt
            // whose fleet the cloud reconciliation deletes.
            self.act(st, snap, report, actions).await?;
            if let Some(done) = w.finished {
                report.finished += 1;
                ended.push((done.0, Some(done.1)));
            }
        }
        Ok(())
    }

    /// Step 6: each deadline job's policy chooses what the job holds this round (recorded in
    /// `st.deadline.choices`; the plan narrows the job's demands to it). A change of choice is
    /// recorded as a `deadline_choice` event; placements the choice leaves behind are retired.
    async fn choose_deadlines(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
    ) -> Result<(), ControlError> {
        let now = snap.now;
        let tick_ms = self.config.deadline_tick_ms.max(1);
        deadline::observe_spot(st, &self.catalog, now, tick_ms);
        let jobs: Vec<Job> = snap.open_jobs().into_iter().filter(deadline_managed).collect();
        let open: BTreeSet<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        let previous = deadline::begin_choices(st, &open);
        if jobs.is_empty() {
            return Ok(());
        }
        let ours = our_usage(snap.active());
        let policy = (self.config.deadline_policy, tick_ms);
        for job in &jobs {
            let attempts: Vec<Attempt> = snap.attempts_of(&job.id).cloned().collect();
            let refs: Vec<&Attempt> = attempts.iter().collect();
            let Some(choice) = deadline::choose(st, &self.catalog, policy, job, &refs, &ours, now) else { continue };
            let mut actions = Vec::new();
            if previous.get(&job.id) != Some(&choice) {
                let event = (EventKind::DeadlineChoice, format!("{} deadline policy: {choice}", choice.policy));
                let change = Change { job: Some((job.id.clone(), JobEdit::Note { event })), ..Change::default() };
                actions.push(Action::Record(change));
            }
            self.act(st, snap, report, actions).await?;
            for old in deadline::leftovers(&refs, &choice) {
                let action = cleanup::retire_leftover(snap, &old);
                self.act(st, snap, report, vec![action]).await?;
            }
            st.deadline.choices.insert(job.id.clone(), choice);
        }
        Ok(())
    }

    /// Step 7: builds the solver problem from the snapshot, solves it (or reuses the last plan),
    /// records why jobs wait, and places. Returns how many placements the cloud refused at once
    /// (the round then plans again).
    async fn plan_and_place(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
    ) -> Result<usize, ControlError> {
        let now = snap.now;
        let input = placement::plan_input(snap, st, &self.config, &self.catalog);
        let caps: BTreeMap<String, Option<f64>> =
            input.problem.jobs.iter().map(|d| (d.id.clone(), d.max_price_per_hour)).collect();
        for filter in crate::model::OfferFilter::ALL {
            let n = input.offer_counts.rejected.get(&filter).copied().unwrap_or(0);
            self.metrics
                .offers_rejected
                .get_or_create(&FilterLabel { filter: filter.as_str().to_string() })
                .set(n.into());
        }
        let mut reasons = input.reasons;
        let plan = if input.problem.jobs.is_empty() {
            None
        } else {
            let (plan, solved_in) = placement::solve(st, input.problem, self.config.solve_time_limit_ms);
            if let Some(secs) = solved_in {
                report.solve_ms += secs * 1000.0;
                self.metrics.solve_seconds.observe(secs);
            }
            for u in &plan.unplaced {
                let (job_id, _) = DemandPart::parse(&u.job);
                reasons.entry(job_id.to_string()).or_default().extend(u.reasons.iter().cloned());
            }
            Some(plan)
        };
        let ours = our_usage(snap.active());
        for job in input.jobs.iter().filter(|j| placement::is_pending(j)) {
            let why = reasons.remove(&job.id).unwrap_or_default();
            let Some(why) = placement::wait_reasons(st, &self.catalog, now, job, why, plan.as_ref()) else { continue };
            if !why.is_empty() {
                report.pending += 1;
            }
            if why.is_empty() || why == job.pending_reasons {
                continue;
            }
            let chain = Feasibility { world: &st.world, breakers: &st.breakers, catalog: &self.catalog, now };
            let counts = chain.job_counts(job, &ours);
            if let Some(change) = placement::waiting_change(job, why, counts) {
                self.act(st, snap, report, vec![Action::Record(change)]).await?;
            }
        }
        let Some(plan) = plan else { return Ok(0) };
        let mut refused = 0;
        for p in &plan.placements {
            let (job_id, _) = DemandPart::parse(&p.job);
            let Some(job) = snap.jobs.get(job_id).cloned() else { continue };
            if !placement::wanted(st, &job, p) {
                continue;
            }
            let price = placement::price_and_cap(st, &self.catalog, p, caps.get(p.job.as_str()).copied().flatten());
            let Some((_, change)) = placement::intent(st, &self.catalog, now, &job, p, price) else { continue };
            let no = self.act(st, snap, report, vec![Action::Place(change)]).await?;
            refused += self.fail_refused(st, snap, report, no).await?;
        }
        Ok(refused)
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
        for a in running {
            // Billed GPUs are the VMs' GPUs, whether or not the job uses them all.
            let per_vm = self.catalog.size(&a.size).map_or(a.gpus as f64 / a.vms.max(1) as f64, |s| s.gpus as f64);
            *report.billed_gpus_by_region.entry(a.region.clone()).or_default() += a.running_vms as f64 * per_vm;
            let gpus = (a.running_vms as u64 * a.gpus as u64 / a.vms.max(1) as u64) as i64;
            let label = OfferLabel { region: a.region.clone(), size: a.size.clone(), priority: a.priority.to_string() };
            self.metrics.gpus_in_use.get_or_create(&label).inc_by(gpus);
            rate += a.running_vms as f64 * a.price_per_hour;
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
        for a in self.store.find(crate::records::AttemptsBy::State(AttemptState::Running))? {
            if a.accounted_until_ms.or(a.running_since_ms).unwrap_or(now) >= now {
                continue;
            }
            self.store.transaction(|tx| {
                let Some(mut job) = tx.get::<Job>(&a.job_id)? else { return Ok(()) };
                let mut tenant = tx.get::<Tenant>(&job.spec.tenant)?.unwrap_or_else(|| Tenant::named(&job.spec.tenant));
                let mut a = a.clone();
                tenant.spent_usd += super::accounts::accrue(&mut a, &mut job, now);
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
            solver::SolveOptions { method: solver::Method::Best, time_limit_ms: Some(self.config.solve_time_limit_ms) };
        let mut plan = solver::solve(&input.problem, &options);
        for (job, why) in input.reasons {
            plan.unplaced.push(solver::Unplaced { job, reasons: why });
        }
        Ok(plan)
    }
}
