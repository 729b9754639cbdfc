//! Steps 2 and 3 of a round: the attempts. Those being provisioned are followed (running, failed,
//! or asked for again), those running are watched (cost, progress, evictions, migrations, budgets,
//! completion). The decisions are `follow.rs`'s and `watch.rs`'s; this file drives them, acting on
//! each before the next is made.

use super::actions::{Action, Change, JobEdit};
use super::follow::{self, FollowUp};
use super::metrics::ClassLabel;
use super::round::{ControlError, RoundReport};
use super::snapshot::Snapshot;
use super::{Controller, LoopState, cleanup, growth, watch};
use crate::cloud::CloudError;
use crate::model::{Attempt, AttemptState, EventKind, Job};
use crate::records::attempt_key;

impl Controller {
    /// Step 2: every attempt being provisioned, from what the cloud said of it.
    pub(super) async fn follow_provisioning(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
        ended: &mut Vec<(Attempt, Option<Job>)>,
    ) -> Result<(), ControlError> {
        for a in snap.in_state(AttemptState::Provisioning) {
            let job = snap.jobs.get(&a.job_id).map(|j| Job::clone(j));
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
            // Billed up to now where the old VMs ran to the end (a deadline move, agents' trouble
            // while the cloud still counts the VMs); a degraded fleet was settled when it was watched.
            let billed = st.deadline.replaces(&running, &old)
                || snap.agent_trouble.contains_key(&attempt_key(&old.job_id, old.number));
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

    pub(super) async fn fail_refused(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
        refused: Vec<(Attempt, CloudError)>,
    ) -> Result<usize, ControlError> {
        let n = refused.len();
        for (a, err) in refused {
            if a.state == AttemptState::Running && a.growing_to.is_some() {
                // A growth refused: the fleet keeps what it has.
                let change = growth::refused(snap, st, &a, &err);
                self.act(st, snap, report, vec![Action::Record(change)]).await?;
                continue;
            }
            self.fail(st, snap, report, &a, &err).await?;
        }
        Ok(n)
    }

    /// Step 3: every running attempt (those that reached running in step 2 included).
    pub(super) async fn watch_running(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
        ended: &mut Vec<(Attempt, Option<Job>)>,
    ) -> Result<(), ControlError> {
        // By key, and watched where the snapshot holds them: an attempt is cloned only to be
        // written (a round watches every running attempt, and most change nothing). Each step
        // writes only its own attempt and job, so none finds another's changed under it.
        let running: Vec<String> =
            snap.attempts.iter().filter(|(_, a)| a.state == AttemptState::Running).map(|(k, _)| k.clone()).collect();
        for key in running {
            let Some(a) = snap.attempts.get(&key) else { continue };
            match snap.jobs.get(&a.job_id) {
                Some(job) if !job.state.is_final() => {}
                other => {
                    ended.push((Attempt::clone(a), other.map(|j| Job::clone(j))));
                    continue;
                }
            }
            // The job as it was before a resend below (what the watch judges the attempt by).
            let mut job_before = None;
            if a.growing_to.is_some() && a.operation.is_none() {
                // A growth written but never sent (a crash, a throttled call): send it again.
                job_before = snap.jobs.get(&a.job_id).cloned();
                let resend = vec![Action::Resize(Attempt::clone(a))];
                let refused = self.act(st, snap, report, resend).await?;
                self.fail_refused(st, snap, report, refused).await?;
            }
            let Some(a) = snap.attempts.get(&key) else { continue };
            let Some(job) = job_before.as_ref().or_else(|| snap.jobs.get(&a.job_id)) else { continue };
            let w = watch::watch(snap, st, &self.config, &self.catalog, (&key, a), job);
            let fleet = w.delete_fleet.then(|| a.fleet_name.clone());
            if w.evicted {
                report.evictions += 1;
                self.metrics.evictions.inc();
            }
            let Some(change) = w.change else { continue };
            let mut actions = vec![Action::Record(change)];
            if let Some(fleet) = fleet {
                actions.push(Action::Delete { fleet, then: None });
            }
            // Written before the fleet is deleted, so a crash in between leaves an ended attempt
            // whose fleet the cloud reconciliation deletes.
            self.act(st, snap, report, actions).await?;
            if let Some(done) = w.finished {
                report.finished += 1;
                ended.push((done.0, Some(done.1)));
            }
        }
        // Placements a refilled fleet made surplus go (make before break: what stays runs).
        for open in snap.open_shared() {
            let id = &open.id;
            let Some(job) = snap.jobs.get(id) else { continue };
            for old in watch::surplus(snap, &self.config, job) {
                let event = (
                    EventKind::FleetDeleted,
                    format!(
                        "attempt {} ({} × {} {} in {}) retired: the job's other placements cover its GPUs again",
                        old.number, old.vms, old.size, old.priority, old.region
                    ),
                );
                let mut actions = cleanup::retire(snap, &old, true);
                actions.push(Action::Record(Change {
                    job: Some((id.clone(), JobEdit::Note { event })),
                    ..Change::default()
                }));
                self.act(st, snap, report, actions).await?;
            }
        }
        Ok(())
    }
}
