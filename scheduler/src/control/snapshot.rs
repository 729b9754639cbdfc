//! Observe: one read of the store and the cloud at the start of a round. The [`Snapshot`] is what
//! every decision of the round reads; the round keeps it up to date with what it writes (so a
//! decision sees its predecessors' records as the store now holds them), never with what it merely
//! decided.
//!
//! The cloud is read once per attempt per round: a provisioning attempt's operation (not before the
//! `Retry-After` the cloud gave), then its fleet when the operation says it is done or is gone; a
//! running attempt's fleet (after its growth's operation, when it grows). Every few minutes (`ControlConfig::reconcile_cloud_ms`, and at the first
//! round after a start) the round also lists every fleet in the cloud, to find the tagged ones no
//! live attempt owns.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rustc_hash::FxHashMap;

use state::StoreError;

use super::deadline_choice::deadline_managed;
use super::world::our_usage;
use super::{Controller, LoopState};
use crate::agents::decide::replacement_reason;
use crate::agents::records::AttemptWork;
use crate::cloud::{CloudError, Fleet, OperationStatus, ProvisioningState, ScaleSet};
use crate::model::{Attempt, AttemptState, BlockedOffer, EndedMember, Job, JobState, Offer, Pipeline};
use crate::records::{AttemptsBy, JobsBy, Lookup, Tenant, attempt_key};

/// What the cloud said this round about one attempt's fleet (`None`: not asked).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Seen {
    /// The create operation's status, for an attempt being provisioned.
    pub operation: Option<Result<OperationStatus, CloudError>>,
    /// The fleet, when it was read.
    pub fleet: Option<Result<Fleet, CloudError>>,
    /// The fleet's scale sets, read when a failed fleet's cause was wanted.
    pub scale_sets: Option<Result<Vec<ScaleSet>, CloudError>>,
}

/// The records one round works from, and what the cloud said.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    /// When the round runs (clock time), Unix milliseconds.
    pub now: i64,
    /// Every open job and the job of every active attempt (final ones included), by id. Shared
    /// with the store's decoded-record cache (as are the attempts): a round reads every open job
    /// and active attempt, nearly all unchanged since the last round, and copying each (and
    /// dropping the copies) was a visible share of a long what-if run (#21).
    pub jobs: BTreeMap<String, Arc<Job>>,
    /// Every active attempt, and every attempt of a deadline job, by key (job, then number).
    pub attempts: BTreeMap<String, Arc<Attempt>>,
    /// Every tenant on record, by name.
    pub tenants: BTreeMap<String, Tenant>,
    /// What the cloud said of active attempts' fleets, by attempt key (hashed: filled and read
    /// once per active attempt per round, never walked in order).
    pub seen: FxHashMap<String, Seen>,
    /// Every fleet in the cloud, when this round reconciles the cloud with the store.
    pub cloud_fleets: Option<Vec<Fleet>>,
    /// Running attempts of open jobs whose agents reported that the VMs can no longer carry the
    /// work (a preemption notice, a lost VM, agents that never registered), with why, by attempt
    /// key: each is placed again and retired once the new placement runs, though the cloud still
    /// counts its VMs.
    pub agent_trouble: BTreeMap<String, &'static str>,
    /// The dependencies of open pipeline jobs that `jobs` does not hold (they ended), by id.
    pub upstream: BTreeMap<String, Job>,
    /// The region each dependency of an open pipeline job last ran in, by job id.
    pub upstream_regions: BTreeMap<String, String>,
    /// The dependencies of open pipeline jobs that retention forgot, as their pipelines kept
    /// them, by id.
    pub forgotten: BTreeMap<String, EndedMember>,
    /// What the jobs `jobs` does not hold (they ended) cost, by pipeline id, for each pipeline
    /// with a budget that has an open job (`control::pipeline_budget`).
    pub pipeline_ended_usd: BTreeMap<String, f64>,
}

impl Snapshot {
    /// Active attempts (holding or about to hold cloud resources), in (job, number) order.
    pub fn active(&self) -> impl Iterator<Item = &Attempt> {
        self.attempts.values().map(|a| &**a).filter(|a| a.is_active())
    }

    /// Active attempts in one state, in (job, number) order.
    pub fn in_state(&self, state: AttemptState) -> Vec<Attempt> {
        self.attempts.values().filter(|a| a.state == state).map(|a| Attempt::clone(a)).collect()
    }

    /// The attempts of one job the snapshot holds, in number order.
    pub fn attempts_of<'a>(&'a self, job_id: &'a str) -> impl Iterator<Item = &'a Attempt> + 'a {
        // Keys are `job/number`: every key of the job starts with its id (so do those of a job whose
        // id extends this one, hence the filter). No key is formatted: this runs per attempt per round.
        self.attempts
            .range::<str, _>((std::ops::Bound::Included(job_id), std::ops::Bound::Unbounded))
            .take_while(move |(k, _)| k.starts_with(job_id))
            .filter(move |(_, a)| a.job_id == job_id)
            .map(|(_, a)| &**a)
    }

    /// Whether the job has an active attempt other than number `but`.
    pub fn others_active(&self, job_id: &str, but: u32) -> bool {
        self.attempts_of(job_id).any(|x| x.number != but && x.is_active())
    }

    /// Jobs not yet final, in planning order: priority first, then submission order.
    pub fn open_jobs(&self) -> Vec<Job> {
        self.open_refs().into_iter().cloned().collect()
    }

    /// [`Snapshot::open_jobs`] as the snapshot holds them now, shared, in the same order: for
    /// steps that write as they go, and so look each job up afresh by its id (no id is copied:
    /// this runs every round over every open job).
    pub fn open_shared(&self) -> Vec<Arc<Job>> {
        let mut jobs: Vec<&Arc<Job>> = self.jobs.values().filter(|j| !j.state.is_final()).collect();
        jobs.sort_by(|a, b| planning_order(a, b));
        jobs.into_iter().cloned().collect()
    }

    /// [`Snapshot::open_jobs`] as they stand in the snapshot.
    pub fn open_refs(&self) -> Vec<&Job> {
        let mut jobs: Vec<&Job> = self.jobs.values().map(|j| &**j).filter(|j| !j.state.is_final()).collect();
        jobs.sort_by(|a, b| planning_order(a, b));
        jobs
    }

    /// Whether a running attempt's agents reported trouble ([`Snapshot::agent_trouble`]): it is
    /// replaced as a whole, whatever its job's shape (make before break): its GPUs do not count
    /// towards its job's demand, and its job's next placement retires it once it runs.
    pub fn has_agent_trouble(&self, a: &Attempt) -> bool {
        // Asked per attempt per round: no key is formatted where no agent reported anything.
        a.state == AttemptState::Running
            && !self.agent_trouble.is_empty()
            && self.agent_trouble.contains_key(&attempt_key(&a.job_id, a.number))
    }

    /// Records what a write put in the store.
    pub fn put_attempt(&mut self, a: &Attempt) {
        self.attempts.insert(attempt_key(&a.job_id, a.number), Arc::new(a.clone()));
    }

    /// Holds an attempt read from the store.
    fn hold_attempt(&mut self, a: Arc<Attempt>) {
        self.attempts.insert(attempt_key(&a.job_id, a.number), a);
    }

    /// Records what a write put in the store.
    pub fn put_job(&mut self, j: &Job) {
        self.jobs.insert(j.id.clone(), Arc::new(j.clone()));
    }

    /// Records what a write put in the store.
    pub fn put_tenant(&mut self, t: &Tenant) {
        self.tenants.insert(t.name.clone(), t.clone());
    }
}

/// Planning order: priority first, then submission order (then id).
fn planning_order(a: &Job, b: &Job) -> std::cmp::Ordering {
    (std::cmp::Reverse(a.spec.priority), a.submitted_at_ms, &a.id).cmp(&(
        std::cmp::Reverse(b.spec.priority),
        b.submitted_at_ms,
        &b.id,
    ))
}

impl Controller {
    /// Reads the round's snapshot: records from the store, then what the cloud says of every
    /// active attempt whose job is still open.
    pub(crate) async fn observe(&self, st: &mut LoopState, now: i64) -> Result<(Snapshot, u32), StoreError> {
        if !st.loaded_blocks {
            st.world.blocked = self.store.scan::<BlockedOffer>()?;
            st.loaded_blocks = true;
        }
        let mut snap = self.read_records(now)?;
        // What the loop remembers of attempts no longer active is of no use any more.
        st.look_again.retain(|key, _| snap.attempts.get(key).is_some_and(|a| a.is_active()));
        st.unresizable.retain(|key| snap.attempts.get(key).is_some_and(|a| a.is_active()));
        if !st.deletions.is_empty() {
            let live: BTreeSet<&str> = snap.active().map(|a| a.fleet_name.as_str()).collect();
            st.deletions.forget_unowned_except(&live);
        }
        let mut cloud_errors = self.refresh_world(st, &snap, now).await;
        for (key, a) in snap.attempts.iter().filter(|(_, a)| a.is_active()) {
            if snap.jobs.get(&a.job_id).is_none_or(|j| j.state.is_final()) {
                continue; // the job ended: its fleet is deleted, not read
            }
            if st.look_again.get(key).is_some_and(|&at| at > now) {
                continue;
            }
            st.look_again.remove(key);
            let seen = self.look_at(a).await;
            cloud_errors += seen_errors(&seen);
            snap.seen.insert(key.clone(), seen);
        }
        if st.cloud_reconciled_at.is_none_or(|at| now - at >= self.config.reconcile_cloud_ms) {
            match self.cloud.list_fleets().await {
                Ok(fleets) => {
                    snap.cloud_fleets = Some(fleets);
                    st.cloud_reconciled_at = Some(now);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot list fleets to reconcile them; will retry next round");
                    cloud_errors += 1;
                }
            }
        }
        Ok((snap, cloud_errors))
    }

    /// The cloud's offers (every round), and each region's quota and size restrictions (when stale:
    /// every `quota_refresh_ms`, or after a quota refusal). A read that fails keeps the last view.
    /// Returns how many reads failed.
    async fn refresh_world(&self, st: &mut LoopState, snap: &Snapshot, now: i64) -> u32 {
        let mut errors = 0;
        st.prices_moved = false;
        match self.cloud.offers().await {
            Ok(offers) => {
                st.prices_moved = !same_prices(&st.world.offers, &offers);
                st.world.offers = offers;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read offers; keeping the last view");
                errors += 1;
            }
        }
        let regions: BTreeSet<String> = st.world.offers.iter().map(|o| o.region.clone()).collect();
        // What the cloud already counts of ours: fleets it has accepted (running, or being created
        // with the create accepted). Intents not yet sent are ours alone.
        let counted = our_usage(snap.active().filter(|a| a.state == AttemptState::Running || a.operation.is_some()));
        for region in regions {
            if !st.world.quota_stale(&region, now, self.config.quota_refresh_ms) {
                continue;
            }
            match self.cloud.quota(&region).await {
                Ok(q) => st.world.set_quota(&region, &q, &counted, now),
                Err(e) => {
                    tracing::warn!(%region, error = %e, "cannot read quota; keeping the last view");
                    errors += 1;
                }
            }
            match self.cloud.restrictions(&region).await {
                Ok(r) => {
                    st.world.restrictions.retain(|x| x.region != region);
                    st.world.restrictions.extend(r);
                }
                Err(e) => {
                    tracing::warn!(%region, error = %e, "cannot read size restrictions");
                    errors += 1;
                }
            }
        }
        errors
    }

    /// The store's side of the snapshot.
    pub(crate) fn read_records(&self, now: i64) -> Result<Snapshot, StoreError> {
        let mut snap = Snapshot { now, ..Snapshot::default() };
        for s in [JobState::Pending, JobState::Provisioning, JobState::Running, JobState::Migrating] {
            for j in self.store.find_shared(JobsBy::State(s))? {
                snap.jobs.insert(j.id.clone(), j);
            }
        }
        for s in [AttemptState::Provisioning, AttemptState::Running] {
            for a in self.store.find_shared(AttemptsBy::State(s))? {
                snap.hold_attempt(a);
            }
        }
        let owners: BTreeSet<String> = snap.active().map(|a| a.job_id.clone()).collect();
        for id in owners {
            if !snap.jobs.contains_key(&id)
                && let Some(j) = self.store.get_shared::<Job>(&id)?
            {
                snap.jobs.insert(id, j);
            }
        }
        let deadline_jobs: Vec<String> =
            snap.jobs.values().filter(|j| !j.state.is_final() && deadline_managed(j)).map(|j| j.id.clone()).collect();
        for id in deadline_jobs {
            for a in self.store.find_shared(AttemptsBy::Job(&id))? {
                snap.hold_attempt(a);
            }
        }
        for t in self.store.scan::<Tenant>()? {
            snap.tenants.insert(t.name.clone(), t);
        }
        // What an open pipeline job depends on: its dependencies' states and where they ran. Not
        // only waiting ones: a running job that loses its VMs this round waits again before the
        // placement step gates it (read only for waiting jobs, such a job found its ended
        // dependencies "no longer on record" and failed).
        let deps: BTreeMap<String, String> = snap
            .jobs
            .values()
            .filter(|j| !j.state.is_final())
            .filter_map(|j| j.pipeline.as_ref())
            .flat_map(|l| l.depends_on.iter().map(|d| (d.job_id.clone(), l.pipeline_id.clone())))
            .collect();
        for (id, pipeline_id) in deps {
            let job = match snap.jobs.get(&id) {
                Some(j) => Some(j.clone()),
                None => self.store.get_shared::<Job>(&id)?,
            };
            let Some(job) = job else {
                // Forgotten by retention: its pipeline kept how it ended.
                let ended = self
                    .store
                    .get::<Pipeline>(&pipeline_id)?
                    .and_then(|p| p.jobs.into_iter().find(|m| m.job_id == id))
                    .and_then(|m| m.ended);
                if let Some(e) = ended {
                    if let Some(region) = &e.last_region {
                        snap.upstream_regions.insert(id.clone(), region.clone());
                    }
                    snap.forgotten.insert(id, e);
                }
                continue;
            };
            // Where it last ran (an attempt that never ran holds no data).
            if job.attempts > 0
                && let Some(a) = self
                    .store
                    .find(AttemptsBy::Job(&id))?
                    .into_iter()
                    .filter(|a| a.running_since_ms.is_some())
                    .max_by_key(|a| a.number)
            {
                snap.upstream_regions.insert(id.clone(), a.region);
            }
            if !snap.jobs.contains_key(&id) {
                snap.upstream.insert(id, Arc::unwrap_or_clone(job));
            }
        }
        // What the ended jobs of each pipeline with a budget cost: with its open jobs' costs, what
        // the pipeline has spent (a forgotten job's cost as its pipeline kept it).
        let budgeted: BTreeSet<String> = snap
            .jobs
            .values()
            .filter(|j| !j.state.is_final())
            .filter_map(|j| j.pipeline.as_ref())
            .filter(|l| l.budget_usd.is_some())
            .map(|l| l.pipeline_id.clone())
            .collect();
        for pipeline_id in budgeted {
            let Some(pipeline) = self.store.get::<Pipeline>(&pipeline_id)? else { continue };
            let mut ended = 0.0;
            for m in pipeline.jobs.iter().filter(|m| !snap.jobs.contains_key(&m.job_id)) {
                ended += match snap.upstream.get(&m.job_id) {
                    Some(j) => j.cost_usd,
                    None => match self.store.get::<Job>(&m.job_id)? {
                        Some(j) => j.cost_usd,
                        None => m.ended.as_ref().map_or(0.0, |e| e.cost_usd),
                    },
                };
            }
            snap.pipeline_ended_usd.insert(pipeline_id, ended);
        }
        // What the agents said of running attempts (nothing, where no agents run: the what-if,
        // whose rounds then skip a look-up per running attempt).
        if self.store.last::<AttemptWork>(1)?.is_empty() {
            return Ok(snap);
        }
        for (key, a) in snap.attempts.iter().filter(|(_, a)| a.state == AttemptState::Running) {
            let Some(job) = snap.jobs.get(&a.job_id) else { continue };
            if let Some(work) = self.store.get::<AttemptWork>(key)?
                && let Some(why) = replacement_reason(job, &work)
            {
                snap.agent_trouble.insert(key.clone(), why);
            }
        }
        Ok(snap)
    }

    /// What the cloud says of one attempt's fleet, asked the way the attempt's state calls for.
    async fn look_at(&self, a: &Attempt) -> Seen {
        let mut seen = Seen::default();
        if a.state == AttemptState::Running {
            // A growth in flight: its operation first, then the fleet as it stands.
            if let (Some(_), Some(op)) = (a.growing_to, &a.operation) {
                seen.operation = Some(self.cloud.poll_operation(op).await);
            }
            seen.fleet = Some(self.cloud.get_fleet(&a.fleet_name).await);
            return seen;
        }
        match &a.operation {
            Some(op) => {
                let status = self.cloud.poll_operation(op).await;
                let want_fleet = matches!(status, Ok(OperationStatus::Succeeded) | Err(CloudError::NotFound { .. }));
                seen.operation = Some(status);
                if want_fleet {
                    seen.fleet = Some(self.cloud.get_fleet(&a.fleet_name).await);
                }
            }
            None => seen.fleet = Some(self.cloud.get_fleet(&a.fleet_name).await),
        }
        let failed = matches!(
            &seen.fleet,
            Some(Ok(f)) if matches!(f.provisioning_state, ProvisioningState::Failed | ProvisioningState::Canceled)
        );
        if failed && !matches!(seen.operation, Some(Ok(_))) {
            seen.scale_sets = Some(self.cloud.fleet_scale_sets(&a.fleet_name).await);
        }
        seen
    }
}

/// Whether two reads of the offers list the same offers at the same prices (in the same order, as a
/// cloud lists them; a reordering counts as a change, which only costs a re-pricing pass).
fn same_prices(old: &[Offer], new: &[Offer]) -> bool {
    old.len() == new.len()
        && old.iter().zip(new).all(|(a, b)| {
            a.price_per_hour == b.price_per_hour && a.priority == b.priority && a.size == b.size && a.region == b.region
        })
}

/// Failed cloud reads in one look (a fleet not found is an answer, not a failure).
fn seen_errors(seen: &Seen) -> u32 {
    let failed = |r: Option<bool>| u32::from(r == Some(true));
    failed(seen.operation.as_ref().map(|r| matches!(r, Err(e) if !matches!(e, CloudError::NotFound { .. }))))
        + failed(seen.fleet.as_ref().map(|r| matches!(r, Err(e) if !matches!(e, CloudError::NotFound { .. }))))
}
