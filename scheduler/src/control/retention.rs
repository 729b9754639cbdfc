//! Forgetting finished work: jobs that ended more than `ControlConfig::retain_finished_ms` ago are
//! deleted with their attempts and job events, and the global event log is trimmed to the same
//! horizon. Without it every job ever submitted stays in the store, and the server's memory (sled's
//! page table and cache) and the cost of reading its history grow for ever (RELIABILITY.md, Load).
//! What a tenant has spent is kept: it is accrued in the tenant's record, not summed from jobs.
//! An `Idempotency-Key` goes with the job it named (a retry after that creates a new job).
//!
//! A pass runs at most once a minute of loop time and does bounded work (the oldest few hundred
//! finished jobs per state, read from the start of the state index: generated job ids begin with
//! the submission time, so those are the oldest submitted), so a long backlog is worked off over a
//! few passes rather than in one long round.

use state::Record;

use crate::model::{Attempt, Job, JobEvent, JobState};
use crate::records::{AttemptsBy, EventsOfJob, IdempotencyKeysOfJob, IdempotencyRecord, JobsBy, Lookup};

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
        let mut forgotten = 0;
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
                self.store.transaction(|tx| {
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
                    Ok(())
                })?;
                forgotten += 1;
            }
        }
        self.store.trim_events_before(horizon, EVENTS_PER_PASS)?;
        if forgotten > 0 {
            tracing::debug!(forgotten, "forgot finished jobs past their retention");
        }
        Ok(forgotten)
    }
}
