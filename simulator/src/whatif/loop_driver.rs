//! The production control loop as a what-if policy (`spillway`, `regular-only`): the real
//! `Controller` on an in-memory store, driven through the `Cloud` and `Clock` traits, with jobs
//! submitted through `JobService::submit_with_id`. It is handed the cloud as `Arc<dyn Cloud>` only:
//! what the loop knows of capacity it learns as on Azure (`tests/layering.rs` holds every policy to
//! that).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use scheduler::Catalog;
use scheduler::clock::{Clock, ManualClock};
use scheduler::cloud::Cloud;
use scheduler::control::{ControlConfig, ControlMetrics, Controller};
use scheduler::jobs::JobService;
use scheduler::model::{Attempt, Job, JobState, SpotPolicy};
use scheduler::records::{AttemptsBy, JobsBy, Lookup};
use state::{Record, Store};

use super::WhatIfError;
use super::driver::{Driver, RoundState};
use super::report::{AttemptSpan, Failover, JobOutcome, Outcome};
use super::workload::TraceJob;

fn store_err(e: impl std::fmt::Display) -> WhatIfError {
    WhatIfError::Store(e.to_string())
}

/// The production control loop as a policy.
pub(crate) struct LoopDriver {
    store: Store,
    jobs: JobService,
    ctl: Controller,
    no_spot: bool,
    open: u64,
    archived: Vec<JobOutcome>,
    failovers: Vec<Failover>,
    start_ms: i64,
    /// Pipelines submitted (a pipeline is submitted whole with its first stage to arrive).
    pipelines: BTreeSet<String>,
    /// Jobs kept in the store after they end, with how many of their pipeline dependants have not
    /// been archived yet: the loop reads an ended dependency from the store (a forgotten one fails
    /// its dependants), so it stays until its last dependant has ended.
    needed_by: BTreeMap<String, usize>,
}

impl LoopDriver {
    pub(crate) fn new(
        store: Store,
        cloud: Arc<dyn Cloud>,
        clock: Arc<ManualClock>,
        catalog: Arc<Catalog>,
        no_spot: bool,
    ) -> LoopDriver {
        let start_ms = clock.now_ms();
        let jobs = JobService::new(store.clone(), catalog.clone(), clock.clone() as Arc<dyn Clock>).without_flush();
        // Nobody reads a throwaway store mid-run: running work is settled only when it changes and
        // once at the end (`settle`), not every interval. The solver has no wall-clock limit in
        // virtual time: with one, a round's plan (and so the week's figures) would depend on how
        // loaded the machine was.
        let config = ControlConfig {
            auto_complete: true,
            durable: false,
            settle_interval_ms: None,
            solve_time_limit_ms: None,
            // Nobody is alerted in a what-if week: pools are not watched (no scan per plan).
            quota_exhausted_after_ms: None,
            ..ControlConfig::default()
        };
        let ctl = Controller::new(
            store.clone(),
            cloud,
            clock as Arc<dyn Clock>,
            catalog.clone(),
            config,
            ControlMetrics::unregistered(),
        );
        LoopDriver {
            store,
            jobs,
            ctl,
            no_spot,
            open: 0,
            archived: Vec::new(),
            failovers: Vec::new(),
            start_ms,
            pipelines: BTreeSet::new(),
            needed_by: BTreeMap::new(),
        }
    }

    fn outcome(&mut self, job: &Job, attempts: &[Attempt]) -> JobOutcome {
        let mut spans = Vec::new();
        for (i, a) in attempts.iter().enumerate() {
            // A failover leaves a region: a new placement in the same one is not one.
            if i > 0 && attempts[i - 1].region != a.region {
                self.failovers.push(Failover {
                    at_hours: (a.started_at_ms - self.start_ms) as f64 / 3_600_000.0,
                    job: job.id.clone(),
                    from: attempts[i - 1].region.clone(),
                    to: a.region.clone(),
                });
            }
            spans.push(AttemptSpan {
                region: a.region.clone(),
                size: a.size.clone(),
                priority: a.priority,
                started_ms: a.started_at_ms,
                running_ms: a.running_since_ms,
                ended_ms: a.ended_at_ms,
                // Billed only once the attempt ran; a placement that never ran moved nothing.
                egress_gb: if a.running_since_ms.is_some() { a.egress_gb } else { 0.0 },
                egress_usd: if a.running_since_ms.is_some() { a.egress_usd } else { 0.0 },
            });
        }
        JobOutcome {
            id: job.id.clone(),
            outcome: match job.state {
                JobState::Succeeded => Outcome::Completed,
                JobState::Failed | JobState::Cancelled => Outcome::Failed,
                _ => Outcome::Pending,
            },
            gpus: job.wanted_gpus(),
            submitted_ms: job.submitted_at_ms,
            first_running_ms: job.first_running_at_ms,
            finished_ms: job.finished_at_ms,
            deadline_ms: job.spec.deadline.map(|d| (d.unix_timestamp_nanos() / 1_000_000) as i64),
            cost_usd: job.cost_usd,
            egress_usd: attempts.iter().filter(|a| a.running_since_ms.is_some()).map(|a| a.egress_usd).sum(),
            work_gpu_hours: job.progress_hours * job.wanted_gpus() as f64,
            lost_work_gpu_hours: job.lost_work_gpu_hours,
            failovers: job.failovers,
            attempts: spans,
            end_reason: if job.state == JobState::Succeeded { None } else { job.end_reason.clone() },
        }
    }

    fn attempts_of(&self, id: &str) -> Result<Vec<Attempt>, WhatIfError> {
        let mut a = self.store.find(AttemptsBy::Job(id)).map_err(store_err)?;
        a.sort_by_key(|x| x.number);
        Ok(a)
    }

    /// Moves finished jobs without fleets out of the store into outcomes (one transaction a round).
    fn archive(&mut self) -> Result<(), WhatIfError> {
        let mut gone: Vec<(String, Vec<String>)> = Vec::new();
        for s in [JobState::Succeeded, JobState::Failed, JobState::Cancelled] {
            for job in self.store.find(JobsBy::State(s)).map_err(store_err)? {
                let attempts = self.attempts_of(&job.id)?;
                if attempts.iter().any(|a| a.is_active()) || self.needed_by.get(&job.id).is_some_and(|&n| n > 0) {
                    continue;
                }
                self.needed_by.remove(&job.id);
                for dep in job.pipeline.iter().flat_map(|l| &l.depends_on) {
                    if let Some(n) = self.needed_by.get_mut(&dep.job_id) {
                        *n = n.saturating_sub(1);
                    }
                }
                let o = self.outcome(&job, &attempts);
                self.archived.push(o);
                self.open -= 1;
                gone.push((job.id.clone(), attempts.iter().map(|a| a.key()).collect()));
            }
        }
        if gone.is_empty() {
            return Ok(());
        }
        self.store
            .transaction(|tx| {
                for (job, attempts) in &gone {
                    for a in attempts {
                        tx.delete::<Attempt>(a)?;
                    }
                    tx.delete::<Job>(job)?;
                }
                Ok(())
            })
            .map_err(store_err)
    }
}

impl Driver for LoopDriver {
    async fn submit(&mut self, job: &TraceJob) -> Result<(), WhatIfError> {
        if let Some(stage) = &job.pipeline {
            for dep in &stage.link.depends_on {
                *self.needed_by.entry(dep.job_id.clone()).or_default() += 1;
            }
            self.open += 1;
            if !self.pipelines.insert(stage.link.pipeline_id.clone()) {
                return Ok(());
            }
            let mut spec = (*stage.spec).clone();
            for j in &mut spec.jobs {
                if self.no_spot {
                    j.spec.spot = Some(SpotPolicy::Never);
                }
            }
            // Stage names are the workload's job ids.
            let ids = spec.jobs.iter().map(|j| (j.spec.name.clone(), j.spec.name.clone())).collect();
            self.jobs
                .submit_pipeline_with_ids(spec, &stage.link.pipeline_id, &ids)
                .map_err(|e| WhatIfError::Control(format!("pipeline {}: {e}", stage.link.pipeline_id)))?;
            return Ok(());
        }
        let mut spec = job.spec.clone();
        if self.no_spot {
            spec.spot = Some(SpotPolicy::Never);
        }
        self.jobs.submit_with_id(&job.id, spec).map_err(|e| WhatIfError::Control(format!("job {}: {e}", job.id)))?;
        self.open += 1;
        Ok(())
    }

    async fn round(&mut self) -> Result<RoundState, WhatIfError> {
        let report = self.ctl.reconcile().await.map_err(|e| WhatIfError::Control(e.to_string()))?;
        let st = RoundState {
            cost_rate: report.cost_rate_usd_per_hour,
            gpu_rate: report.billed_gpus_by_region.values().sum(),
            gpus_by_region: report.billed_gpus_by_region,
        };
        self.archive()?;
        Ok(st)
    }

    fn queue(&self) -> Result<u64, WhatIfError> {
        let mut n = 0;
        for s in [JobState::Pending, JobState::Provisioning] {
            n += self.store.count_where(JobsBy::State(s)).map_err(store_err)? as u64;
        }
        Ok(n)
    }

    fn idle(&self) -> bool {
        self.open == 0
    }

    async fn settle(&mut self) -> Result<(), WhatIfError> {
        self.ctl.settle_accounts().await.map_err(|e| WhatIfError::Control(e.to_string()))
    }

    fn finish(&mut self, _end_ms: i64) -> Result<(Vec<JobOutcome>, Vec<Failover>), WhatIfError> {
        let mut out = std::mem::take(&mut self.archived);
        for job in self.store.scan::<Job>().map_err(store_err)? {
            let attempts = self.attempts_of(&job.id)?;
            let o = self.outcome(&job, &attempts);
            out.push(o);
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        let mut f = std::mem::take(&mut self.failovers);
        f.sort_by(|a, b| a.at_hours.total_cmp(&b.at_hours).then(a.job.cmp(&b.job)));
        Ok((out, f))
    }
}
