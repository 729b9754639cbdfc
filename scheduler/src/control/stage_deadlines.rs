//! One deadline for a pipeline, re-computed as its stages end. At submission a job that waits for
//! others holds its latest finish; once its dependencies have ended it gets its share of the time
//! then left to the pipeline's deadline ([`StageDeadline::share`](crate::model::StageDeadline::share)),
//! counted from when the last of them ended: a stage that ends early leaves its slack to the
//! stages after it, one that ends late leaves them less (down to none: the deadline-aware policy
//! then holds regular VMs). Decided from the snapshot before the deadline policies choose, and
//! only for a job that has not started (a running job's policy keeps the deadline it plans with).
//! Idempotent: the share depends only on when the dependencies ended.

use super::snapshot::Snapshot;
use crate::model::{Job, JobState};

/// The job's deadline as its pipeline's share says, Unix milliseconds, with the hours that were
/// left to the pipeline's deadline when it could start, when that differs from the deadline it
/// holds; `None` when it holds the right one, has started, or still waits for a dependency.
pub(crate) fn recomputed(snap: &Snapshot, job: &Job) -> Option<(i64, f64)> {
    let link = job.pipeline.as_ref()?;
    let share = link.deadline?;
    if job.state != JobState::Pending || job.attempts > 0 || link.depends_on.is_empty() {
        return None;
    }
    let mut start: Option<i64> = None;
    for d in &link.depends_on {
        let ended = match snap.jobs.get(&d.job_id).map(|j| &**j).or_else(|| snap.upstream.get(&d.job_id)) {
            Some(dep) if dep.state.is_final() => dep.finished_at_ms?,
            Some(_) => return None,
            None => snap.forgotten.get(&d.job_id)?.finished_at_ms,
        };
        start = Some(start.map_or(ended, |s| s.max(ended)));
    }
    let start = start?;
    let ms = share.share(start, job.spec.duration_hours.unwrap_or(0.0));
    let held = job.spec.deadline.map(|d| (d.unix_timestamp_nanos() / 1_000_000) as i64);
    let left_hours = (share.pipeline_ms - start) as f64 / 3_600_000.0;
    (held != Some(ms)).then_some((ms, left_hours))
}
