//! Accepting, reading and cancelling pipelines. A pipeline is accepted whole or not at all: its
//! record, every job (each an ordinary job, carrying its [`PipelineLink`](crate::model::PipelineLink)) and their `submitted`
//! events are written in one transaction. Whether a job may be placed yet is the control loop's
//! decision (`control::dependencies`), made from the links.

use std::collections::BTreeMap;

use super::{JobError, JobService, record_event, scope_to_tenant, submitted_message};
use crate::model::{EventKind, Job, JobState, Pipeline, PipelineMember, PipelineSpec, PipelineState};
use crate::records::{Lookup, PipelineKey, PipelinesOfTenant};

/// A pipeline with its jobs as they are now.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineDetail {
    /// The stored pipeline.
    pub pipeline: Pipeline,
    /// Where it is, from its jobs.
    pub state: PipelineState,
    /// Its jobs, in the order submitted.
    pub jobs: Vec<PipelineJob>,
}

/// One page of pipelines.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelinePage {
    /// The pipelines, oldest first.
    pub pipelines: Vec<PipelineDetail>,
    /// How many pipelines match the filter in all, on every page.
    pub total: usize,
    /// Where the next (older) page begins: the `before` to ask with; `None` on the last page.
    pub next: Option<String>,
}

/// One job of a pipeline.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineJob {
    /// Name within the pipeline.
    pub name: String,
    /// Job id.
    pub id: String,
    /// Names of its dependencies.
    pub depends_on: Vec<String>,
    /// The job, unless retention has forgotten it (it had ended).
    pub job: Option<Job>,
}

impl JobService {
    /// Validates and accepts a pipeline given as JSON. `tenant`, when given, is the only tenant
    /// the caller may submit for (as for jobs). Returns the pipeline and whether it was created
    /// (false: an earlier submission with the same idempotency key).
    pub fn submit_pipeline_value(
        &self,
        mut value: serde_json::Value,
        tenant: Option<&str>,
        idempotency_key: Option<&str>,
    ) -> Result<(PipelineDetail, bool), JobError> {
        scope_to_tenant(&mut value, tenant)?;
        let now_dt = self.now_datetime();
        let spec = PipelineSpec::from_value_checked(value, &self.catalog, now_dt).map_err(JobError::Invalid)?;
        self.accept_pipeline(spec, idempotency_key, None)
    }

    /// Accepts a pipeline under ids the caller chose: the pipeline's and each job's by name (the
    /// what-if simulator's deterministic ids). The spec must have been validated.
    pub fn submit_pipeline_with_ids(
        &self,
        spec: PipelineSpec,
        pipeline_id: &str,
        job_ids: &BTreeMap<String, String>,
    ) -> Result<PipelineDetail, JobError> {
        if let Some(j) = spec.jobs.iter().find(|j| !job_ids.contains_key(&j.spec.name)) {
            return Err(JobError::Conflict(format!("no id given for pipeline job {}", j.spec.name)));
        }
        let (detail, _) = self.accept_pipeline(spec, None, Some((pipeline_id.to_string(), job_ids.clone())))?;
        Ok(detail)
    }

    fn accept_pipeline(
        &self,
        spec: PipelineSpec,
        idempotency_key: Option<&str>,
        given_ids: Option<(String, BTreeMap<String, String>)>,
    ) -> Result<(PipelineDetail, bool), JobError> {
        let now = self.clock.now_ms();
        let (pipeline_id, ids) = match given_ids {
            Some(given) => given,
            None => {
                (self.new_id('p', now), spec.jobs.iter().map(|j| (j.spec.name.clone(), self.next_id(now))).collect())
            }
        };
        let deadlines = spec.job_deadlines(self.now_datetime());
        let links = spec.links(&pipeline_id, &ids);
        let mut jobs = Vec::new();
        for i in spec.topological_order() {
            let j = &spec.jobs[i];
            let mut job_spec = j.spec.clone();
            // Its share of the pipeline's deadline (the earlier, if the job has its own).
            job_spec.deadline = deadlines[i];
            let mut job = Job::new(ids[&j.spec.name].clone(), job_spec, now);
            job.pipeline = Some(links[i].clone());
            jobs.push(job);
        }
        let scope_key = idempotency_key.map(|k| format!("{}/{}", spec.tenant, k));
        let pipeline = Pipeline {
            id: pipeline_id.clone(),
            name: spec.name.clone(),
            tenant: spec.tenant.clone(),
            submitted_at_ms: now,
            budget_usd: spec.budget,
            jobs: spec
                .jobs
                .iter()
                .map(|j| PipelineMember {
                    name: j.spec.name.clone(),
                    job_id: ids[&j.spec.name].clone(),
                    depends_on: j.depends_on.clone(),
                    ended: None,
                })
                .collect(),
            cancelled_by: None,
            idempotency_key: scope_key.clone(),
        };
        let outcome = self.store.transaction(|tx| {
            if let Some(scope_key) = &scope_key {
                if let Some(prev) = tx.get::<PipelineKey>(scope_key)? {
                    if prev.spec != spec {
                        return Ok(Err(format!(
                            "Idempotency-Key already used for a different pipeline ({}); use a new key",
                            prev.pipeline_id
                        )));
                    }
                    if tx.get::<Pipeline>(&prev.pipeline_id)?.is_some() {
                        return Ok(Ok((prev.pipeline_id, false)));
                    }
                }
                tx.put(&PipelineKey {
                    scope_key: scope_key.clone(),
                    pipeline_id: pipeline_id.clone(),
                    spec: spec.clone(),
                })?;
            }
            tx.put(&pipeline)?;
            for job in &jobs {
                tx.put(job)?;
                let waits = job.pipeline.as_ref().map(|l| l.depends_on.len()).unwrap_or(0);
                let message = format!(
                    "{}; pipeline {} ({}), job {}{}",
                    submitted_message(job),
                    pipeline.name,
                    pipeline.id,
                    job.spec.name,
                    if waits == 0 { String::new() } else { format!(", after {waits} dependencies") }
                );
                record_event(tx, job, now, EventKind::Submitted, message, serde_json::Value::Null)?;
            }
            Ok(Ok((pipeline_id.clone(), true)))
        })?;
        let (id, created) = outcome.map_err(JobError::Conflict)?;
        if created {
            self.flush()?;
            self.wake.notify_one();
        }
        let detail = self.pipeline(&id)?.ok_or_else(|| JobError::NotFound(id.clone()))?;
        Ok((detail, created))
    }

    /// One pipeline with its jobs.
    pub fn pipeline(&self, id: &str) -> Result<Option<PipelineDetail>, JobError> {
        let Some(pipeline) = self.store.get::<Pipeline>(id)? else { return Ok(None) };
        Ok(Some(self.detail_of(pipeline)?))
    }

    fn detail_of(&self, pipeline: Pipeline) -> Result<PipelineDetail, JobError> {
        let mut jobs = Vec::with_capacity(pipeline.jobs.len());
        for m in &pipeline.jobs {
            jobs.push(PipelineJob {
                name: m.name.clone(),
                id: m.job_id.clone(),
                depends_on: m.depends_on.clone(),
                job: self.store.get::<Job>(&m.job_id)?,
            });
        }
        let states: Vec<Option<JobState>> = jobs
            .iter()
            .zip(&pipeline.jobs)
            .map(|(j, m)| j.job.as_ref().map(|j| j.state).or(m.ended.as_ref().map(|e| e.state)))
            .collect();
        let state = PipelineState::of(&states, pipeline.cancelled_by.is_some());
        Ok(PipelineDetail { pipeline, state, jobs })
    }

    /// A page of pipelines (of one tenant, or all; in one state, or any), as [`JobService::page`]
    /// pages jobs: the newest `limit` older than the pipeline id `before`, oldest first.
    pub fn pipelines_page(
        &self,
        state: Option<PipelineState>,
        tenant: Option<&str>,
        before: Option<&str>,
        limit: usize,
    ) -> Result<PipelinePage, JobError> {
        let n = limit.saturating_add(1);
        let (mut page, total) = match (state, tenant) {
            // A pipeline's state follows from its jobs (no index has it): read them and filter.
            (Some(s), _) => {
                let all = match tenant {
                    Some(t) => self.store.find(PipelinesOfTenant(t))?,
                    None => self.store.scan::<Pipeline>()?,
                };
                let mut matching = Vec::new();
                for p in all {
                    let d = self.detail_of(p)?;
                    if d.state == s {
                        matching.push(d);
                    }
                }
                let total = matching.len();
                matching.retain(|d| before.is_none_or(|b| d.pipeline.id.as_str() < b));
                matching.sort_by(|a, b| a.pipeline.id.cmp(&b.pipeline.id));
                (matching.split_off(matching.len().saturating_sub(n)), total)
            }
            (None, Some(t)) => {
                let page = self.store.last_where_before(PipelinesOfTenant(t), before, n)?;
                let total = self.store.count_where(PipelinesOfTenant(t))?;
                (page.into_iter().map(|p| self.detail_of(p)).collect::<Result<_, _>>()?, total)
            }
            (None, None) => {
                let page = self.store.last_before::<Pipeline>(before, n)?;
                let total = self.store.count::<Pipeline>()?;
                (page.into_iter().map(|p| self.detail_of(p)).collect::<Result<_, _>>()?, total)
            }
        };
        let next = super::split_page(&mut page, limit, |d| d.pipeline.id.clone());
        page.sort_by(|a, b| {
            (a.pipeline.submitted_at_ms, &a.pipeline.id).cmp(&(b.pipeline.submitted_at_ms, &b.pipeline.id))
        });
        let total = total.max(page.len());
        Ok(PipelinePage { pipelines: page, total, next })
    }

    /// Pipelines (of one tenant, or all), oldest first.
    pub fn pipelines(&self, tenant: Option<&str>) -> Result<Vec<PipelineDetail>, JobError> {
        let mut all = match tenant {
            Some(t) => self.store.find(PipelinesOfTenant(t))?,
            None => self.store.scan::<Pipeline>()?,
        };
        all.sort_by(|a, b| (a.submitted_at_ms, &a.id).cmp(&(b.submitted_at_ms, &b.id)));
        all.into_iter().map(|p| self.detail_of(p)).collect()
    }

    /// Cancels every job of the pipeline that has not ended, in one transaction; the control loop
    /// deletes their fleets as for a cancelled job.
    pub fn cancel_pipeline(&self, id: &str, by: &str) -> Result<PipelineDetail, JobError> {
        let now = self.clock.now_ms();
        let outcome = self.store.transaction(|tx| {
            let Some(mut pipeline) = tx.get::<Pipeline>(id)? else { return Ok(Err(None)) };
            let mut open = Vec::new();
            for m in &pipeline.jobs {
                if let Some(job) = tx.get::<Job>(&m.job_id)?
                    && !job.state.is_final()
                {
                    open.push(job);
                }
            }
            if open.is_empty() {
                return Ok(Err(Some(format!("pipeline {id} has already ended"))));
            }
            let why = format!("pipeline {id} cancelled by {by}");
            for mut job in open {
                job.set_state(JobState::Cancelled, now);
                job.end_reason = Some(why.clone());
                tx.put(&job)?;
                record_event(tx, &job, now, EventKind::Cancelled, why.clone(), serde_json::Value::Null)?;
            }
            pipeline.cancelled_by = Some(by.to_string());
            tx.put(&pipeline)?;
            Ok(Ok(()))
        })?;
        match outcome {
            Ok(()) => {
                self.flush()?;
                self.wake.notify_one();
                self.pipeline(id)?.ok_or_else(|| JobError::NotFound(id.to_string()))
            }
            Err(None) => Err(JobError::NotFound(id.to_string())),
            Err(Some(msg)) => Err(JobError::Conflict(msg)),
        }
    }
}
