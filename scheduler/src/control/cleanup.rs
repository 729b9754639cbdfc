//! Decisions that end attempts and delete their fleets: the fleets of jobs that ended (a user
//! cancelled or completed them, a budget ran out, the work is done), the placements a running
//! replacement retires (make before break), and the tagged fleets the cloud holds that no live
//! attempt owns (found by the cloud reconciliation every few minutes and at start).

use std::collections::BTreeSet;

use rustc_hash::FxHashMap;

use super::accounts::{accrue, overlap_scale};
use super::actions::{Action, Change, JobEdit};
use super::snapshot::Snapshot;
use crate::cloud::{Fleet, TAG_ATTEMPT, TAG_JOB};
use crate::model::{Attempt, AttemptState, EventKind, Job};

/// A fleet of a job that ended (or vanished) is deleted; once the cloud has accepted the deletion,
/// the attempt's cost is settled up to now and the attempt ends. The job's cost is *added to* as
/// stored when the deletion is written: several fleets of one job are deleted side by side, and
/// each one's settlement must count on top of the others', not replace them.
pub(crate) fn clean_up(snap: &Snapshot, attempt: &Attempt, job: Option<&Job>) -> Action {
    let now = snap.now;
    let mut a = attempt.clone();
    let then = match job {
        None => {
            a.state = AttemptState::Ended;
            a.ended_at_ms = Some(now);
            Change { attempts: vec![a], ..Change::default() }
        }
        Some(job) => {
            let mut accrued = job.clone();
            let spend = if a.state == AttemptState::Running {
                let scale = overlap_scale(job, snap.attempts_of(&job.id));
                accrue(&mut a, &mut accrued, now, scale)
            } else {
                0.0
            };
            a.state = AttemptState::Ended;
            a.ended_at_ms = Some(now);
            a.operation = None;
            let edit = JobEdit::Settled { fallback: job.clone(), added_usd: spend, fleet: a.fleet_name.clone() };
            Change {
                attempts: vec![a],
                spend: Some((job.spec.tenant.clone(), spend)),
                job: Some((job.id.clone(), edit)),
                ..Change::default()
            }
        }
    };
    Action::Delete { fleet: attempt.fleet_name.clone(), then: Some(then) }
}

/// A placement retired by its running replacement (make before break): it ends now, billed up to
/// now when a deadline policy moved the healthy job away from it, and its fleet is deleted.
pub(crate) fn retire(snap: &Snapshot, old: &Attempt, billed: bool) -> Vec<Action> {
    let now = snap.now;
    let mut old = old.clone();
    let mut change = Change::default();
    if billed
        && old.state == AttemptState::Running
        && let Some(job) = snap.jobs.get(&old.job_id)
    {
        let mut job = Job::clone(job);
        let scale = overlap_scale(&job, snap.attempts_of(&job.id));
        let spend = accrue(&mut old, &mut job, now, scale);
        change.spend = Some((job.spec.tenant.clone(), spend));
        change.job = Some((job.id.clone(), JobEdit::Accounted { job, events: Vec::new() }));
    }
    old.state = AttemptState::Replaced;
    old.ended_at_ms = Some(now);
    let fleet = old.fleet_name.clone();
    change.attempts.push(old);
    vec![Action::Record(change), Action::Delete { fleet, then: None }]
}

/// A leftover placement of a deadline job that moved (e.g. one still being created when the
/// policy's choice changed back): once its fleet is deleted it is billed up to now and ends.
pub(crate) fn retire_leftover(snap: &Snapshot, old: &Attempt) -> Action {
    let now = snap.now;
    let mut old = old.clone();
    let mut change = Change::default();
    if let Some(job) = snap.jobs.get(&old.job_id) {
        let mut job = Job::clone(job);
        let scale = overlap_scale(&job, snap.attempts_of(&job.id));
        let spend = if old.state == AttemptState::Running { accrue(&mut old, &mut job, now, scale) } else { 0.0 };
        let message = format!("attempt {} ({} in {}) retired: the job moved", old.number, old.priority, old.region);
        change.spend = Some((job.spec.tenant.clone(), spend));
        change.job =
            Some((job.id.clone(), JobEdit::Accounted { job, events: vec![(EventKind::FleetDeleted, message)] }));
    }
    old.state = AttemptState::Replaced;
    old.ended_at_ms = Some(now);
    old.operation = None;
    let fleet = old.fleet_name.clone();
    change.attempts.push(old);
    Action::Delete { fleet, then: Some(change) }
}

/// A fleet in the cloud carrying our tags that no live attempt owns.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Orphan {
    /// The fleet.
    pub fleet: String,
    /// The job its tags name.
    pub job_id: String,
    /// Why it is an orphan, for people.
    pub why: String,
}

/// The tagged fleets among `fleets` that no active attempt of the snapshot owns by name. Fleets
/// `known` to be on their way out already (being deleted) are left out.
pub(crate) fn orphans(snap: &Snapshot, fleets: &[Fleet], known: &BTreeSet<String>) -> Vec<Orphan> {
    // The listing holds every live fleet, nearly all owned: each is matched by a hashed look-up of
    // its name among the active attempts' fleets (ordered maps keyed by ids that share long
    // prefixes cost a string comparison per level), and only a fleet that is no active attempt's
    // looks its tagged attempt up to say why.
    let live: FxHashMap<&str, &Attempt> = snap.active().map(|a| (a.fleet_name.as_str(), a)).collect();
    let mut out = Vec::new();
    for fleet in fleets {
        let Some(job_id) = fleet.tags.get(TAG_JOB) else { continue };
        if known.contains(&fleet.name) {
            continue;
        }
        let number: Option<u32> = fleet.tags.get(TAG_ATTEMPT).and_then(|n| n.parse().ok());
        if live.get(fleet.name.as_str()).is_some_and(|a| &a.job_id == job_id && Some(a.number) == number) {
            continue;
        }
        let attempt = number.and_then(|n| snap.attempts_of(job_id).find(|a| a.number == n));
        let why = match attempt {
            Some(a) if a.is_active() && a.fleet_name == fleet.name => continue,
            Some(a) => format!(
                "fleet {} belongs to attempt {} of job {}, which is {:?}",
                fleet.name, a.number, job_id, a.state
            ),
            None => format!("fleet {} is tagged for job {job_id} but no live attempt owns it", fleet.name),
        };
        out.push(Orphan { fleet: fleet.name.clone(), job_id: job_id.clone(), why });
    }
    out
}
