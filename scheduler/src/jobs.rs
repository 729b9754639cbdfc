//! Accepting and changing jobs on behalf of users: submit, cancel, complete, read.
//!
//! Both the HTTP API and the simulator go through this service, so a job is accepted the same
//! way everywhere: validated against the catalog, written with its first event in one
//! transaction, and acknowledged only after the store has flushed it to disk.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use state::{Event, EventDraft, Store, StoreError, Tx, TxAbort};

use crate::catalog::Catalog;
use crate::clock::Clock;
use crate::model::{Attempt, EventKind, FieldErrors, Job, JobSpec, JobState};
use crate::records::{AttemptsBy, EventsOfJob, IdempotencyRecord, JobsBy, Lookup, Tenant};

mod pipelines;
pub use pipelines::{PipelineDetail, PipelineJob, PipelinePage};

/// Why a job operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The spec (or a parameter) is invalid; every problem is listed with its field.
    #[error("invalid job spec:\n{0}")]
    Invalid(FieldErrors),
    /// No such job (or not visible to the caller).
    #[error("no job {0}")]
    NotFound(String),
    /// The request conflicts with the job's state or an earlier request.
    #[error("{0}")]
    Conflict(String),
    /// The store failed; nothing was acknowledged.
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

/// The outcome of a submission.
#[derive(Debug, Clone, PartialEq)]
pub struct Submitted {
    /// The job (new, or the one an earlier submission with the same idempotency key created).
    pub job: Job,
    /// False when an idempotent retry returned an existing job.
    pub created: bool,
}

/// Job events are records of the domain model; re-exported where they are written.
pub use crate::model::JobEvent;

/// A page of jobs ([`JobService::page`]).
#[derive(Debug, Clone, PartialEq)]
pub struct JobPage {
    /// The jobs, oldest first.
    pub jobs: Vec<Job>,
    /// How many jobs match the filter in all, on every page.
    pub total: usize,
    /// Where the next (older) page begins: the `before` to ask with; `None` on the last page.
    pub next: Option<String>,
}

/// The paging rule of every list (jobs, pipelines): `page` holds up to `limit + 1` records in key
/// order, the newest last; one more than asked means an older page exists. Drops that one and
/// returns where the next (older) page begins: the `before` to ask with, the oldest key shown.
pub(crate) fn split_page<T>(page: &mut Vec<T>, limit: usize, key: impl Fn(&T) -> String) -> Option<String> {
    if page.len() > limit {
        page.remove(0);
        page.first().map(key)
    } else {
        None
    }
}

/// Everything about one job, for `GET /v1/jobs/{id}` and `spillway status`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobDetail {
    /// The job.
    pub job: Job,
    /// Its attempts, oldest first.
    pub attempts: Vec<Attempt>,
    /// Its events, oldest first.
    pub events: Vec<JobEvent>,
}

/// Appends an event to the global log and to the job's own index, inside a transaction.
pub fn record_event(
    tx: &mut Tx,
    job: &Job,
    at_ms: i64,
    kind: EventKind,
    message: impl Into<String>,
    data: serde_json::Value,
) -> Result<u64, TxAbort> {
    let message = message.into();
    let seq = tx.append_event(EventDraft {
        at_ms,
        kind: kind.as_str().to_string(),
        job_id: Some(job.id.clone()),
        tenant: Some(job.spec.tenant.clone()),
        message: message.clone(),
        data,
    })?;
    // Its key holds the fresh event number: nothing to read first.
    tx.put_new(&JobEvent { job_id: job.id.clone(), seq, at_ms, kind, message })?;
    Ok(seq)
}

/// What the `submitted` event says: `batch job, 16 GPUs` or `inference service, 6 GPUs (3 replicas × 2)`.
fn submitted_message(job: &Job) -> String {
    use crate::model::JobKind;
    let what = match job.spec.kind {
        JobKind::Training => "training job",
        JobKind::Batch => "batch job",
        JobKind::Inference => "inference service",
    };
    let n = job.wanted_gpus();
    let gpus = if n == 1 { "1 GPU".to_string() } else { format!("{n} GPUs") };
    match job.spec.replicas {
        Some(r) => format!("{what}, {gpus} ({} replicas × {})", r.desired, job.spec.gpus),
        None => format!("{what}, {gpus}"),
    }
}

/// Submission and lifecycle changes requested by users.
#[derive(Clone)]
pub struct JobService {
    store: Store,
    catalog: Arc<Catalog>,
    clock: Arc<dyn Clock>,
    wake: Arc<tokio::sync::Notify>,
    id_salt: u64,
    id_counter: Arc<AtomicU64>,
    durable: bool,
}

impl JobService {
    /// A service over `store`, validating against `catalog`, reading time from `clock`.
    pub fn new(store: Store, catalog: Arc<Catalog>, clock: Arc<dyn Clock>) -> JobService {
        let salt = std::collections::hash_map::RandomState::new().build_hasher().finish();
        JobService {
            store,
            catalog,
            clock,
            wake: Arc::new(tokio::sync::Notify::new()),
            id_salt: salt,
            id_counter: Arc::new(AtomicU64::new(0)),
            durable: true,
        }
    }

    /// Skips the flush before acknowledging: for the simulator's throwaway stores only.
    pub fn without_flush(mut self) -> JobService {
        self.durable = false;
        self
    }

    /// Notified on every submission, cancellation and completion; the control loop waits on it.
    pub fn wake_handle(&self) -> Arc<tokio::sync::Notify> {
        self.wake.clone()
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The catalog specs are validated against.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    fn next_id(&self, now_ms: i64) -> String {
        self.new_id('j', now_ms)
    }

    /// A new id: `prefix`, the time, and a hash of this process's salt and a counter.
    fn new_id(&self, prefix: char, now_ms: i64) -> String {
        let n = self.id_counter.fetch_add(1, Ordering::Relaxed);
        let mut h = std::collections::hash_map::DefaultHasher::new();
        h.write_u64(self.id_salt);
        h.write_u64(n);
        format!("{prefix}-{:011x}{:06x}", now_ms.max(0), h.finish() & 0xff_ffff)
    }

    fn flush(&self) -> Result<(), StoreError> {
        if self.durable { self.store.flush() } else { Ok(()) }
    }

    /// Validates and accepts a spec given as JSON (the API's path). `tenant`, when given, is the
    /// only tenant the caller may submit for: a spec naming another is refused, one naming none
    /// gets it. Returns once the job is on disk.
    pub fn submit_value(
        &self,
        mut value: serde_json::Value,
        tenant: Option<&str>,
        idempotency_key: Option<&str>,
    ) -> Result<Submitted, JobError> {
        scope_to_tenant(&mut value, tenant)?;
        let now_dt = self.now_datetime();
        let spec = JobSpec::from_value_checked(value, &self.catalog, now_dt).map_err(JobError::Invalid)?;
        self.accept(spec, idempotency_key, None)
    }

    /// Validates and accepts a parsed spec.
    pub fn submit(&self, spec: JobSpec, idempotency_key: Option<&str>) -> Result<Submitted, JobError> {
        let now_dt = self.now_datetime();
        spec.validate(&self.catalog, now_dt).map_err(JobError::Invalid)?;
        self.accept(spec, idempotency_key, None)
    }

    /// Accepts a spec under a given id (the simulator's path: ids must be deterministic there).
    pub fn submit_with_id(&self, id: &str, spec: JobSpec) -> Result<Submitted, JobError> {
        self.accept(spec, None, Some(id.to_string()))
    }

    fn accept(&self, spec: JobSpec, idempotency_key: Option<&str>, id: Option<String>) -> Result<Submitted, JobError> {
        let now = self.clock.now_ms();
        let id = id.unwrap_or_else(|| self.next_id(now));
        let scope_key = idempotency_key.map(|k| format!("{}/{}", spec.tenant, k));
        let job = Job::new(id, spec, now);
        let outcome = self.store.transaction(|tx| {
            if let Some(scope_key) = &scope_key {
                if let Some(prev) = tx.get::<IdempotencyRecord>(scope_key)? {
                    if prev.spec != *job.spec {
                        return Ok(Err(format!(
                            "Idempotency-Key already used for a different spec (job {}); use a new key",
                            prev.job_id
                        )));
                    }
                    if let Some(existing) = tx.get::<Job>(&prev.job_id)? {
                        return Ok(Ok(Submitted { job: existing, created: false }));
                    }
                }
                tx.put(&IdempotencyRecord {
                    scope_key: scope_key.clone(),
                    job_id: job.id.clone(),
                    spec: (*job.spec).clone(),
                })?;
            }
            if tx.get::<Job>(&job.id)?.is_some() {
                return Ok(Err(format!("a job with id {} exists already", job.id)));
            }
            tx.put(&job)?;
            record_event(tx, &job, now, EventKind::Submitted, submitted_message(&job), serde_json::Value::Null)?;
            Ok(Ok(Submitted { job: job.clone(), created: true }))
        })?;
        let submitted = outcome.map_err(JobError::Conflict)?;
        if submitted.created {
            self.flush()?;
            self.wake.notify_one();
        }
        Ok(submitted)
    }

    /// One job.
    pub fn get(&self, id: &str) -> Result<Option<Job>, JobError> {
        Ok(self.store.get::<Job>(id)?)
    }

    /// Jobs, filtered by state and tenant, oldest first.
    pub fn list(&self, state: Option<JobState>, tenant: Option<&str>) -> Result<Vec<Job>, JobError> {
        let mut jobs = match (state, tenant) {
            (Some(s), _) => self.store.find(JobsBy::State(s))?,
            (None, Some(t)) => self.store.find(JobsBy::Tenant(t))?,
            (None, None) => self.store.scan::<Job>()?,
        };
        if let Some(t) = tenant {
            jobs.retain(|j| j.spec.tenant == t);
        }
        jobs.sort_by(|a, b| (a.submitted_at_ms, &a.id).cmp(&(b.submitted_at_ms, &b.id)));
        Ok(jobs)
    }

    /// The newest `limit` jobs (oldest first among them), filtered by state or tenant, and how many
    /// match in all. Generated job ids begin with the submission time, so the newest jobs are the
    /// last keys of an index: a page costs `limit` reads however long the history grows (listing
    /// used to read every job of the tenant on every call, and the server's memory and latency grew
    /// with the history; see RELIABILITY.md, Load).
    pub fn newest(
        &self,
        state: Option<JobState>,
        tenant: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Job>, usize), JobError> {
        let page = self.page(state, tenant, None, limit)?;
        Ok((page.jobs, page.total))
    }

    /// A page of jobs going back in time: the `limit` last job ids below `before` (the newest jobs
    /// with `None`), oldest first among them, filtered by state or tenant. `next` is the `before`
    /// of the page after it (older jobs), `None` on the last page.
    ///
    /// Pages are cut by job id, not by position: jobs submitted while a client pages get larger
    /// ids (ids begin with the submission time), so they never push a job into a page already
    /// read, and every job that existed when paging began is on exactly one page (unless it
    /// changes state between pages and the client filters by state).
    pub fn page(
        &self,
        state: Option<JobState>,
        tenant: Option<&str>,
        before: Option<&str>,
        limit: usize,
    ) -> Result<JobPage, JobError> {
        // One more than asked: whether there is an older job decides `next`.
        let n = limit.saturating_add(1);
        let (mut page, total) = match (state, tenant) {
            // No index has both: filter one of them (a state's jobs of one tenant are few).
            (Some(_), Some(_)) => {
                let mut all = self.list(state, tenant)?;
                let total = all.len();
                all.retain(|j| before.is_none_or(|b| j.id.as_str() < b));
                all.sort_by(|a, b| a.id.cmp(&b.id));
                (all.split_off(all.len().saturating_sub(n)), total)
            }
            (Some(s), None) => {
                (self.store.last_where_before(JobsBy::State(s), before, n)?, self.store.count_where(JobsBy::State(s))?)
            }
            (None, Some(t)) => (
                self.store.last_where_before(JobsBy::Tenant(t), before, n)?,
                self.store.count_where(JobsBy::Tenant(t))?,
            ),
            (None, None) => (self.store.last_before::<Job>(before, n)?, self.store.count::<Job>()?),
        };
        let next = split_page(&mut page, limit, |j| j.id.clone());
        page.sort_by(|a, b| (a.submitted_at_ms, &a.id).cmp(&(b.submitted_at_ms, &b.id)));
        let total = total.max(page.len());
        Ok(JobPage { jobs: page, total, next })
    }

    /// A job with its attempts and events.
    pub fn detail(&self, id: &str) -> Result<Option<JobDetail>, JobError> {
        let Some(job) = self.get(id)? else { return Ok(None) };
        let mut attempts = self.store.find(AttemptsBy::Job(id))?;
        attempts.sort_by_key(|a| a.number);
        let mut events = self.store.find(EventsOfJob(id))?;
        events.sort_by_key(|e| e.seq);
        Ok(Some(JobDetail { job, attempts, events }))
    }

    /// Cancels a job that has not ended; the control loop deletes its fleets and settles its cost.
    pub fn cancel(&self, id: &str, by: &str) -> Result<Job, JobError> {
        self.finish(id, JobState::Cancelled, format!("cancelled by {by}"), |_| Ok(()))
    }

    /// Marks a running job's work as done; the control loop deletes its fleets and settles its cost.
    pub fn complete(&self, id: &str) -> Result<Job, JobError> {
        self.finish(id, JobState::Succeeded, "completed".to_string(), |job| match job.state {
            JobState::Running | JobState::Migrating => Ok(()),
            s => Err(format!("job {} is {s}; only a running job can complete (cancel it instead)", job.id)),
        })
    }

    fn finish(
        &self,
        id: &str,
        to: JobState,
        why: String,
        allowed: impl Fn(&Job) -> Result<(), String>,
    ) -> Result<Job, JobError> {
        let now = self.clock.now_ms();
        let outcome = self.store.transaction(|tx| {
            let Some(mut job) = tx.get::<Job>(id)? else { return Ok(Err(None)) };
            if job.state.is_final() {
                return Ok(Err(Some(format!("job {id} has already ended ({})", job.state))));
            }
            if let Err(e) = allowed(&job) {
                return Ok(Err(Some(e)));
            }
            job.set_state(to, now);
            job.end_reason = Some(why.clone());
            tx.put(&job)?;
            if let Some(kind) = EventKind::of_final_state(to) {
                record_event(tx, &job, now, kind, why.clone(), serde_json::Value::Null)?;
            }
            Ok(Ok(job))
        })?;
        match outcome {
            Ok(job) => {
                self.flush()?;
                self.wake.notify_one();
                Ok(job)
            }
            Err(None) => Err(JobError::NotFound(id.to_string())),
            Err(Some(msg)) => Err(JobError::Conflict(msg)),
        }
    }

    /// Sets (or clears) a tenant's budget in USD.
    pub fn set_tenant_budget(&self, tenant: &str, budget_usd: Option<f64>) -> Result<Tenant, JobError> {
        let t = self.store.transaction(|tx| {
            let mut t = tx.get::<Tenant>(tenant)?.unwrap_or_else(|| Tenant::named(tenant));
            t.budget_usd = budget_usd;
            tx.put(&t)?;
            Ok(t)
        })?;
        self.flush()?;
        Ok(t)
    }

    /// Events from the global log, starting at `from_seq`.
    pub fn events_from(&self, from_seq: u64, limit: usize) -> Result<Vec<Event>, JobError> {
        Ok(self.store.events_from(from_seq, limit)?)
    }

    /// Now on the scheduler's clock, as the spec reader takes it (deadlines are checked against it).
    fn now_datetime(&self) -> time::OffsetDateTime {
        time::OffsetDateTime::from_unix_timestamp_nanos(self.clock.now_ms() as i128 * 1_000_000)
            .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
    }
}

/// Holds a submission to the one tenant its token may submit for: a body naming another tenant is
/// refused (naming the field), one naming none is given it. `None`: the caller may submit for any.
pub(crate) fn scope_to_tenant(value: &mut serde_json::Value, tenant: Option<&str>) -> Result<(), JobError> {
    let (Some(t), Some(obj)) = (tenant, value.as_object_mut()) else { return Ok(()) };
    match obj.get("tenant").and_then(|v| v.as_str()) {
        Some(given) if given != t => {
            let mut e = FieldErrors::default();
            e.push("tenant", format!("this token may only submit for tenant {t:?}"));
            Err(JobError::Invalid(e))
        }
        _ => {
            obj.insert("tenant".into(), serde_json::Value::String(t.to_string()));
            Ok(())
        }
    }
}
