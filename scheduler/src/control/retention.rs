//! Forgetting finished work: jobs that ended more than `ControlConfig::retain_finished_ms` ago are
//! deleted with their attempts and job events, and the global event log is trimmed to the same
//! horizon. Without it every job ever submitted stays in the store, and the server's memory (sled's
//! page table and cache) and the cost of reading its history grow for ever (RELIABILITY.md, Load).
//! What a tenant has spent is kept: it is accrued in the tenant's record, not summed from jobs.
//! An `Idempotency-Key` goes with the job it named (a retry after that creates a new job). A job of
//! a pipeline leaves how it ended, where its output lies and what it cost in the pipeline's record
//! ([`EndedMember`]): a stage still open may be gated by it weeks later (it lost its VMs and waits
//! again), and the pipeline's view stays whole. Exempting pipeline jobs from retention instead would
//! keep their attempts and events too, and, at the head of the state index, hold up the pass. The
//! pass that forgets the last job of a pipeline deletes the pipeline (and its `Idempotency-Key`) in
//! the same transaction: every job final and forgotten, nothing can be gated by it any more.
//!
//! A pass runs at most once a minute of loop time and does bounded work (the oldest few hundred
//! finished jobs per state, read from the start of the state index: generated job ids begin with
//! the submission time, so those are the oldest submitted), so a long backlog is worked off over a
//! few passes rather than in one long round.

use state::Record;

use crate::model::{Attempt, EndedMember, Job, JobEvent, JobState, Pipeline};
use crate::records::{AttemptsBy, EventsOfJob, IdempotencyKeysOfJob, IdempotencyRecord, JobsBy, Lookup, PipelineKey};

use super::round::ControlError;
use super::{Controller, LoopState};

/// Loop time between two passes.
const PASS_EVERY_MS: i64 = 60_000;
/// Finished jobs looked at per state and pass.
const JOBS_PER_PASS: usize = 500;
/// Global log events removed per pass at most.
const EVENTS_PER_PASS: usize = 20_000;

impl Controller {
    /// Deletes finished jobs (and their attempts and events) older than the retention, and log
    /// events older than it; returns how many jobs went. Idempotent; a crash mid-pass leaves whole
    /// jobs (each goes in one transaction).
    pub(crate) fn forget_finished(&self, st: &mut LoopState, now: i64) -> Result<usize, ControlError> {
        let Some(keep_ms) = self.config.retain_finished_ms else { return Ok(0) };
        if st.retention_pass_at_ms.is_some_and(|at| now - at < PASS_EVERY_MS) {
            return Ok(0);
        }
        st.retention_pass_at_ms = Some(now);
        let horizon = now - keep_ms;
        let (mut forgotten, mut forgotten_pipelines) = (0, 0);
        for state in [JobState::Succeeded, JobState::Failed, JobState::Cancelled] {
            for job in self.store.first_where(JobsBy::State(state), JOBS_PER_PASS)? {
                if job.finished_at_ms.is_none_or(|f| f > horizon) {
                    continue;
                }
                let attempts = self.store.find(AttemptsBy::Job(&job.id))?;
                // A fleet still being deleted keeps its job until the clean-up has settled it.
                if attempts.iter().any(|a| a.is_active()) {
                    continue;
                }
                let events = self.store.find(EventsOfJob(&job.id))?;
                let keys = self.store.find(IdempotencyKeysOfJob(&job.id))?;
                let ended = ended_member(&job, &attempts);
                let pipeline_gone = self.store.transaction(|tx| {
                    let mut pipeline_gone = false;
                    // Its dependants may be gated by it long after it ended: the pipeline keeps
                    // what the gate needs of it.
                    if let Some(link) = &job.pipeline
                        && let Some(mut pipeline) = tx.get::<Pipeline>(&link.pipeline_id)?
                        && let Some(m) = pipeline.jobs.iter_mut().find(|m| m.job_id == job.id)
                    {
                        m.ended = Some(ended.clone());
                        // The last of its jobs forgotten: no stage is left for it to gate, so
                        // the pipeline goes too, in this transaction, so a crash never leaves a
                        // pipeline behind whose jobs are all gone. Its key goes with it unless a
                        // later submission took the key over (this pipeline had gone then).
                        if pipeline.jobs.iter().all(|m| m.ended.is_some()) {
                            if let Some(k) = &pipeline.idempotency_key
                                && tx.get::<PipelineKey>(k)?.is_some_and(|r| r.pipeline_id == pipeline.id)
                            {
                                tx.delete::<PipelineKey>(k)?;
                            }
                            tx.delete::<Pipeline>(&pipeline.id)?;
                            pipeline_gone = true;
                        } else {
                            tx.put(&pipeline)?;
                        }
                    }
                    for k in &keys {
                        tx.delete::<IdempotencyRecord>(&k.key())?;
                    }
                    for a in &attempts {
                        tx.delete::<Attempt>(&a.key())?;
                    }
                    for e in &events {
                        tx.delete::<JobEvent>(&e.key())?;
                    }
                    tx.delete::<Job>(&job.id)?;
                    Ok(pipeline_gone)
                })?;
                forgotten += 1;
                forgotten_pipelines += usize::from(pipeline_gone);
            }
        }
        self.store.trim_events_before(horizon, EVENTS_PER_PASS)?;
        if forgotten > 0 {
            tracing::debug!(forgotten, forgotten_pipelines, "forgot finished jobs past their retention");
        }
        Ok(forgotten)
    }
}

/// What a pipeline keeps of a job of it that retention forgets: how it ended and where its output
/// lies (the region of its last attempt that ran).
fn ended_member(job: &Job, attempts: &[Attempt]) -> EndedMember {
    let last_region =
        attempts.iter().filter(|a| a.running_since_ms.is_some()).max_by_key(|a| a.number).map(|a| a.region.clone());
    EndedMember {
        state: job.state,
        last_region,
        output_gb: job.pipeline.as_ref().and_then(|l| l.output_gb),
        finished_at_ms: job.finished_at_ms.unwrap_or_default(),
        cost_usd: job.cost_usd,
        end_reason: job.end_reason.clone(),
        outputs: job.spec.outputs.clone(),
    }
}
