//! Act: performs the actions decisions returned, against the store and the cloud, and records
//! what was written in the round's snapshot. The only code of the loop that writes the store or
//! changes the cloud (reads are `snapshot.rs`'s).
//!
//! Errors follow the one error policy (`error_policy.rs`): a create the cloud refuses at once is
//! handed back to the round (the attempt fails and the job is placed again); a throttled or
//! transient call is looked at again after the policy's requeue; a failed deletion is retried with
//! backoff (`deletions.rs`) until the cloud confirms the fleet gone. Only the store failing ends a
//! round.

use futures_util::StreamExt;
use state::{StoreError, Tx, TxAbort};

use super::actions::{Action, Applied, Change, JobEdit};
use super::error_policy;
use super::round::{ControlError, RoundReport};
use super::snapshot::Snapshot;
use super::{Controller, LoopState};
use crate::cloud::{CloudError, FleetPart, FleetRequest, TAG_ATTEMPT, TAG_JOB};
use crate::jobs::record_event;
use crate::model::{Attempt, EventKind, FleetOperation, Job, Priority};
use crate::records::{Tenant, attempt_key};

/// Fleet deletions run side by side, at most this many at a time (a delete is a long-running
/// operation the cloud may ask us to wait on; bounded to stay within ARM's rate limits).
const DELETE_CONCURRENCY: usize = 16;

/// A create the cloud refused at once: the attempt and why.
pub(crate) type Refusal = (Attempt, CloudError);

impl Controller {
    /// Performs `actions` in order. Returns the creates the cloud refused at once.
    pub(crate) async fn act(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
        actions: Vec<Action>,
    ) -> Result<Vec<Refusal>, ControlError> {
        let mut refused = Vec::new();
        let mut deletions = Vec::new();
        // Consecutive records are written in one transaction; consecutive deletions run side by
        // side. Anything else waits for both, so every action sees its predecessors done.
        let mut records: Vec<Change> = Vec::new();
        for action in actions {
            if !matches!(action, Action::Record(_)) {
                self.write_all(snap, &std::mem::take(&mut records))?;
            }
            if !matches!(action, Action::Delete { .. }) {
                self.delete_fleets(st, snap, report, std::mem::take(&mut deletions)).await?;
            }
            match action {
                Action::Delete { fleet, then } => deletions.push((fleet, then)),
                Action::Record(change) => records.push(change),
                Action::Place(change) => refused.extend(self.place(st, snap, report, &change).await?),
                Action::Create(a) => refused.extend(self.create(st, snap, report, a).await?),
                Action::Grow(change) => {
                    if !self.record_placement(snap, report, &change)? {
                        continue;
                    }
                    if let Some(a) = change.attempts_with_job.first().cloned() {
                        refused.extend(self.resize(st, snap, report, a).await?);
                    }
                }
                Action::Resize(a) => refused.extend(self.resize(st, snap, report, a).await?),
                Action::Requeue { attempt_key, after_ms } => {
                    st.look_again.insert(attempt_key, snap.now.saturating_add(after_ms));
                }
            }
        }
        self.write_all(snap, &records)?;
        self.delete_fleets(st, snap, report, deletions).await?;
        Ok(refused)
    }

    /// Writes one change in one transaction; the job's edit is applied to the job as stored now.
    /// Returns what the edit gave, or `None` when it no longer applied.
    pub(crate) fn write(&self, snap: &mut Snapshot, c: &Change) -> Result<Option<Applied>, StoreError> {
        Ok(self.write_all(snap, std::slice::from_ref(c))?.pop().flatten())
    }

    /// Writes changes in order in one transaction (a round's records are many and small: one
    /// transaction each cost more than the writes), each job edit applied to the job as stored
    /// now, earlier changes of the batch included. Returns what each edit gave.
    fn write_all(&self, snap: &mut Snapshot, changes: &[Change]) -> Result<Vec<Option<Applied>>, StoreError> {
        if changes.is_empty() {
            return Ok(Vec::new());
        }
        let now = snap.now;
        let written = self.store.transaction(|tx| {
            let mut out = Vec::with_capacity(changes.len());
            for c in changes {
                out.push(write_change(tx, c, now)?);
            }
            Ok(out)
        })?;
        let mut applied_all = Vec::with_capacity(changes.len());
        for (c, (applied, job, tenant)) in changes.iter().zip(written) {
            for a in &c.attempts {
                snap.put_attempt(a);
            }
            if applied.is_some() || c.job.is_none() {
                for a in &c.attempts_with_job {
                    snap.put_attempt(a);
                }
            }
            if let Some(j) = &job {
                snap.put_job(j);
            }
            if let Some(t) = &tenant {
                snap.put_tenant(t);
            }
            applied_all.push(applied);
        }
        Ok(applied_all)
    }

    /// Writes a placement's intent durably, then asks the cloud for its fleet.
    async fn place(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
        change: &Change,
    ) -> Result<Option<Refusal>, ControlError> {
        if !self.record_placement(snap, report, change)? {
            return Ok(None);
        }
        let Some(attempt) = change.attempts_with_job.first().cloned() else { return Ok(None) };
        st.breakers.record_attempt(&attempt.region, snap.now);
        self.create(st, snap, report, attempt).await
    }

    /// Writes a placement's (or a growth's) intent durably before the cloud is asked, and counts it
    /// (and a failover it answers); `false` when the change no longer applied.
    fn record_placement(
        &self,
        snap: &mut Snapshot,
        report: &mut RoundReport,
        change: &Change,
    ) -> Result<bool, ControlError> {
        let Some(applied) = self.write(snap, change)? else { return Ok(false) };
        if self.config.durable {
            self.store.flush()?;
        }
        if applied.events.iter().any(|(k, _, _)| *k == EventKind::Failover) {
            report.failovers += 1;
            self.metrics.failovers.inc();
        }
        report.placements += 1;
        self.metrics.placements.inc();
        Ok(true)
    }

    /// Asks the cloud for an attempt's fleet; `Some` when the cloud refused at once.
    async fn create(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
        a: Attempt,
    ) -> Result<Option<Refusal>, ControlError> {
        let started = self.cloud.begin_create_fleet(&fleet_request(&a)).await;
        self.follow_start(st, snap, report, a, started, "create")
    }

    /// Asks the cloud to grow a running attempt's fleet to its `growing_to`; `Some` when the cloud
    /// refused at once (the round's `fail_refused` then takes the growth back).
    async fn resize(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
        a: Attempt,
    ) -> Result<Option<Refusal>, ControlError> {
        let started = self.cloud.begin_resize_fleet(&fleet_request(&a)).await;
        self.follow_start(st, snap, report, a, started, "resize")
    }

    /// What a create or a resize leads to: an accepted operation is recorded on the attempt (and
    /// polled no sooner than the cloud asked); a retryable error defers it to a later round as the
    /// error policy says; any other error is a refusal for the round to settle.
    fn follow_start(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
        mut a: Attempt,
        started: Result<FleetOperation, CloudError>,
        what: &str,
    ) -> Result<Option<Refusal>, ControlError> {
        let key = attempt_key(&a.job_id, a.number);
        match started {
            Ok(op) => {
                // The cloud says when the operation is worth polling: not before.
                if op.retry_after_ms > 0 {
                    let after = i64::try_from(op.retry_after_ms).unwrap_or(i64::MAX);
                    st.look_again.insert(key, snap.now.saturating_add(after));
                }
                a.operation = Some(op);
                // Not flushed: after a crash the fleet is found by its name anyway.
                self.store.put(&a)?;
                snap.put_attempt(&a);
                Ok(None)
            }
            Err(e) if e.is_retryable() => {
                tracing::debug!(fleet = %a.fleet_name, error = %e, "{what} deferred");
                report.cloud_errors += 1;
                if let Some(after) = error_policy::requeue_after_ms(&e) {
                    st.look_again.insert(key, snap.now.saturating_add(after));
                }
                Ok(None)
            }
            Err(e) => Ok(Some((a, e))),
        }
    }

    /// Deletes fleets side by side, then writes the follow-up changes of those the cloud accepted, in
    /// order, in one transaction. A deletion still backing off after a failure is not tried yet.
    async fn delete_fleets(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
        deletions: Vec<(String, Option<Change>)>,
    ) -> Result<(), ControlError> {
        if deletions.is_empty() {
            return Ok(());
        }
        let now = snap.now;
        let mut due = Vec::new();
        for (fleet, then) in deletions {
            match st.deletions.not_before(&fleet, now) {
                Some(_) if then.is_none() => st.deletions.own(&fleet, now),
                Some(_) => {}
                None => due.push((fleet, then)),
            }
        }
        let cloud = &self.cloud;
        let outcomes: Vec<(String, Option<Change>, Result<(), CloudError>)> =
            futures_util::stream::iter(due.into_iter().map(|(fleet, then)| async move {
                let outcome = cloud.delete_fleet(&fleet).await;
                (fleet, then, outcome)
            }))
            .buffered(DELETE_CONCURRENCY)
            .collect()
            .await;
        let mut follow_ups = Vec::new();
        for (fleet, then, outcome) in outcomes {
            match outcome {
                Ok(()) => {
                    st.deletions.succeeded(&fleet);
                    report.fleets_deleted += 1;
                    if let Some(change) = then {
                        // A finished job's fleet gone: the job is done with the cloud.
                        if matches!(change.job, Some((_, JobEdit::Settled { .. }))) {
                            report.finished += 1;
                        }
                        follow_ups.push(change);
                    }
                }
                Err(e) => {
                    tracing::debug!(%fleet, error = %e, "delete failed; retrying with backoff");
                    report.cloud_errors += 1;
                    st.deletions.failed(&fleet, now, then.is_none());
                }
            }
        }
        self.write_all(snap, &follow_ups)?;
        Ok(())
    }
}

/// What one change wrote: the edit's outcome, the job as written, the tenant as written.
type Written = (Option<Applied>, Option<Job>, Option<Tenant>);

/// One change inside a transaction: its attempts and blocks, the job's edit applied to the job as
/// the transaction sees it (the attempts that go with the job only when the edit applied), and the
/// tenant's spend.
fn write_change(tx: &mut Tx, c: &Change, now: i64) -> Result<Written, TxAbort> {
    for a in &c.attempts {
        tx.put(a)?;
    }
    for b in &c.blocks {
        tx.put(b)?;
    }
    let mut applied = None;
    let mut written: Option<Job> = None;
    if let Some((id, edit)) = &c.job
        && let Some(mut j) = tx.get::<Job>(id)?.or_else(|| edit.fallback())
        && let Some(app) = edit.apply(&mut j, now)
    {
        if app.write {
            tx.put(&j)?;
        }
        for (kind, message, data) in &app.events {
            record_event(tx, &j, now, *kind, message.clone(), data.clone())?;
        }
        if app.write {
            written = Some(j);
        }
        applied = Some(app);
    }
    if applied.is_some() || c.job.is_none() {
        for a in &c.attempts_with_job {
            tx.put(a)?;
        }
    }
    let tenant = match &c.spend {
        Some((name, usd)) => {
            let mut t = tx.get::<Tenant>(name)?.unwrap_or_else(|| Tenant::named(name));
            t.spent_usd += usd;
            tx.put(&t)?;
            Some(t)
        }
        None => None,
    };
    Ok((applied, written, tenant))
}

/// The request for an attempt's fleet: its deterministic name, the chosen size then the ranked
/// alternatives, its capacity (the one it grows to, during a growth), the minimum it was created
/// with (all its VMs; Azure refuses to change it later), the spot cap, and the tags that find it
/// again. A mixed attempt asks for one fleet of both profiles: its spot part in the request's own
/// fields, its regular part beside it, each part's minimum all its VMs.
pub(crate) fn fleet_request(a: &Attempt) -> FleetRequest {
    let mut sizes = vec![a.size.clone()];
    sizes.extend(a.alternatives.iter().cloned());
    let max_price_per_vm = match a.priority {
        Priority::Spot => a.max_price_per_vm,
        Priority::Regular => None,
    };
    let regular_vms = a.regular.map_or(0, |r| r.vms);
    FleetRequest {
        name: a.fleet_name.clone(),
        region: a.region.clone(),
        priority: a.priority,
        sizes,
        vms: a.target().vms.saturating_sub(regular_vms),
        min_vms: a.min_vms.unwrap_or(a.vms).saturating_sub(regular_vms),
        max_price_per_vm,
        zones: Vec::new(),
        tags: [(TAG_JOB.to_string(), a.job_id.clone()), (TAG_ATTEMPT.to_string(), a.number.to_string())]
            .into_iter()
            .collect(),
        regular: a.regular.map(|r| FleetPart { vms: r.vms, min_vms: r.min_vms }),
    }
}
