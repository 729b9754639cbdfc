//! How the scheduler's types are stored: each is a `state::Record` with its table and indexes, and
//! every index read goes through a typed query ([`JobsBy`], [`AttemptsBy`], …, read with
//! [`Lookup`]), so that an index name or the type of the value looked up cannot be misspelled.
//!
//! Index pointers are JSON pointers into the stored record, so the store can verify indexes
//! (`spillway state check`) without knowing these Rust types.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use state::{IndexDef, Record, Store, StoreError, TableDef};

use crate::model::{Attempt, AttemptState, BlockedOffer, Job, JobEvent, JobState, Pipeline, PipelineSpec};

const JOB_STATE: IndexDef = IndexDef { name: "state", pointer: "/state" };
const JOB_TENANT: IndexDef = IndexDef { name: "tenant", pointer: "/spec/tenant" };
const ATTEMPT_JOB: IndexDef = IndexDef { name: "job", pointer: "/job_id" };
const ATTEMPT_STATE: IndexDef = IndexDef { name: "state", pointer: "/state" };
const EVENT_JOB: IndexDef = IndexDef { name: "job", pointer: "/job_id" };
const IDEMPOTENCY_JOB: IndexDef = IndexDef { name: "job", pointer: "/job_id" };
const PIPELINE_TENANT: IndexDef = IndexDef { name: "tenant", pointer: "/tenant" };

impl Record for Job {
    const TABLE: TableDef = TableDef { name: "jobs", indexes: &[JOB_STATE, JOB_TENANT] };
    fn key(&self) -> String {
        self.id.clone()
    }
    fn index_values(&self) -> Option<Vec<Option<String>>> {
        Some(vec![Some(self.state.as_str().to_string()), Some(self.spec.tenant.clone())])
    }
}

impl Record for Attempt {
    const TABLE: TableDef = TableDef { name: "attempts", indexes: &[ATTEMPT_JOB, ATTEMPT_STATE] };
    fn key(&self) -> String {
        attempt_key(&self.job_id, self.number)
    }
    fn index_values(&self) -> Option<Vec<Option<String>>> {
        Some(vec![Some(self.job_id.clone()), Some(self.state.as_str().to_string())])
    }
}

impl Record for JobEvent {
    const TABLE: TableDef = TableDef { name: "job_events", indexes: &[EVENT_JOB] };
    fn key(&self) -> String {
        format!("{}/{:012}", self.job_id, self.seq)
    }
    fn index_values(&self) -> Option<Vec<Option<String>>> {
        Some(vec![Some(self.job_id.clone())])
    }
}

/// The key of a job's attempt; zero-padded so a job's attempts sort in order.
pub fn attempt_key(job_id: &str, number: u32) -> String {
    format!("{job_id}/{number:06}")
}

impl Record for BlockedOffer {
    const TABLE: TableDef = TableDef { name: "blocked_offers", indexes: &[] };
    fn key(&self) -> String {
        BlockedOffer::key(self)
    }
}

/// A tenant's budget and what it has spent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tenant {
    /// Tenant name.
    pub name: String,
    /// USD the tenant may spend in all; `None` = unlimited.
    pub budget_usd: Option<f64>,
    /// USD accrued by the tenant's jobs.
    pub spent_usd: f64,
}

impl Tenant {
    /// A tenant with no budget that has spent nothing: what an unknown tenant name stands for.
    pub fn named(name: &str) -> Tenant {
        Tenant { name: name.to_string(), budget_usd: None, spent_usd: 0.0 }
    }
}

impl Record for Tenant {
    const TABLE: TableDef = TableDef { name: "tenants", indexes: &[] };
    fn key(&self) -> String {
        self.name.clone()
    }
}

/// A remembered `Idempotency-Key`: a retried submission with the same key returns the same job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    /// `tenant/key`.
    pub scope_key: String,
    /// The job the first submission created.
    pub job_id: String,
    /// The spec first submitted, to refuse the same key with a different spec.
    pub spec: crate::model::JobSpec,
}

impl Record for IdempotencyRecord {
    /// Indexed by job so that retention forgets a key with the job it named.
    const TABLE: TableDef = TableDef { name: "idempotency", indexes: &[IDEMPOTENCY_JOB] };
    fn key(&self) -> String {
        self.scope_key.clone()
    }
}

impl Record for Pipeline {
    const TABLE: TableDef = TableDef { name: "pipelines", indexes: &[PIPELINE_TENANT] };
    fn key(&self) -> String {
        self.id.clone()
    }
}

/// A remembered `Idempotency-Key` of a pipeline submission: a retry returns the same pipeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PipelineKey {
    /// `tenant/key`.
    pub scope_key: String,
    /// The pipeline the first submission created.
    pub pipeline_id: String,
    /// The spec first submitted, to refuse the same key with a different spec.
    pub spec: PipelineSpec,
}

impl Record for PipelineKey {
    const TABLE: TableDef = TableDef { name: "pipeline_idempotency", indexes: &[] };
    fn key(&self) -> String {
        self.scope_key.clone()
    }
}

/// Every table the scheduler defines, for `spillway state check`.
pub const TABLES: &[TableDef] = &[
    Job::TABLE,
    Attempt::TABLE,
    BlockedOffer::TABLE,
    Tenant::TABLE,
    IdempotencyRecord::TABLE,
    JobEvent::TABLE,
    Pipeline::TABLE,
    PipelineKey::TABLE,
];

/// A typed read of one secondary index: which table, which index, which value.
pub trait IndexQuery {
    /// The records the index points to.
    type Record: Record;
    /// The index, one of `Self::Record::TABLE.indexes`.
    fn index(&self) -> IndexDef;
    /// The value looked up, as the index stores it.
    fn value(&self) -> Cow<'_, str>;
}

/// Jobs by state or by tenant.
#[derive(Debug, Clone, Copy)]
pub enum JobsBy<'a> {
    /// Jobs in one state.
    State(JobState),
    /// Jobs of one tenant.
    Tenant(&'a str),
}

impl IndexQuery for JobsBy<'_> {
    type Record = Job;
    fn index(&self) -> IndexDef {
        match self {
            JobsBy::State(_) => JOB_STATE,
            JobsBy::Tenant(_) => JOB_TENANT,
        }
    }
    fn value(&self) -> Cow<'_, str> {
        match self {
            JobsBy::State(s) => Cow::Borrowed(s.as_str()),
            JobsBy::Tenant(t) => Cow::Borrowed(t),
        }
    }
}

/// Attempts by job or by state.
#[derive(Debug, Clone, Copy)]
pub enum AttemptsBy<'a> {
    /// Every attempt of one job, in attempt order.
    Job(&'a str),
    /// Attempts in one state.
    State(AttemptState),
}

impl IndexQuery for AttemptsBy<'_> {
    type Record = Attempt;
    fn index(&self) -> IndexDef {
        match self {
            AttemptsBy::Job(_) => ATTEMPT_JOB,
            AttemptsBy::State(_) => ATTEMPT_STATE,
        }
    }
    fn value(&self) -> Cow<'_, str> {
        match self {
            AttemptsBy::Job(j) => Cow::Borrowed(j),
            AttemptsBy::State(s) => Cow::Borrowed(s.as_str()),
        }
    }
}

/// Pipelines of one tenant.
#[derive(Debug, Clone, Copy)]
pub struct PipelinesOfTenant<'a>(pub &'a str);

impl IndexQuery for PipelinesOfTenant<'_> {
    type Record = Pipeline;
    fn index(&self) -> IndexDef {
        PIPELINE_TENANT
    }
    fn value(&self) -> Cow<'_, str> {
        Cow::Borrowed(self.0)
    }
}

/// A job's events, oldest first.
#[derive(Debug, Clone, Copy)]
pub struct EventsOfJob<'a>(pub &'a str);

impl IndexQuery for EventsOfJob<'_> {
    type Record = JobEvent;
    fn index(&self) -> IndexDef {
        EVENT_JOB
    }
    fn value(&self) -> Cow<'_, str> {
        Cow::Borrowed(self.0)
    }
}

/// The idempotency keys that named a job.
#[derive(Debug, Clone, Copy)]
pub struct IdempotencyKeysOfJob<'a>(pub &'a str);

impl IndexQuery for IdempotencyKeysOfJob<'_> {
    type Record = IdempotencyRecord;
    fn index(&self) -> IndexDef {
        IDEMPOTENCY_JOB
    }
    fn value(&self) -> Cow<'_, str> {
        Cow::Borrowed(self.0)
    }
}

/// Typed index reads (see [`IndexQuery`]); the store's string-named reads stay below this.
pub trait Lookup {
    /// Every record the query finds, in key order.
    fn find<Q: IndexQuery>(&self, query: Q) -> Result<Vec<Q::Record>, StoreError>;
    /// [`Lookup::find`], each record shared with the store's decoded-record cache, not copied.
    fn find_shared<Q: IndexQuery>(&self, query: Q) -> Result<Vec<std::sync::Arc<Q::Record>>, StoreError>;
    /// How many records the query finds.
    fn count_where<Q: IndexQuery>(&self, query: Q) -> Result<usize, StoreError>;
    /// The first `n` records the query finds, in key order.
    fn first_where<Q: IndexQuery>(&self, query: Q, n: usize) -> Result<Vec<Q::Record>, StoreError>;
    /// The last `n` records the query finds, in key order.
    fn last_where<Q: IndexQuery>(&self, query: Q, n: usize) -> Result<Vec<Q::Record>, StoreError>;
    /// The last `n` records the query finds whose key sorts before `before` (all of them for `None`).
    fn last_where_before<Q: IndexQuery>(
        &self,
        query: Q,
        before: Option<&str>,
        n: usize,
    ) -> Result<Vec<Q::Record>, StoreError>;
}

impl Lookup for Store {
    fn find<Q: IndexQuery>(&self, query: Q) -> Result<Vec<Q::Record>, StoreError> {
        self.by_index::<Q::Record>(query.index().name, &query.value())
    }
    fn find_shared<Q: IndexQuery>(&self, query: Q) -> Result<Vec<std::sync::Arc<Q::Record>>, StoreError> {
        self.by_index_shared::<Q::Record>(query.index().name, &query.value())
    }
    fn count_where<Q: IndexQuery>(&self, query: Q) -> Result<usize, StoreError> {
        self.count_by_index::<Q::Record>(query.index().name, &query.value())
    }
    fn first_where<Q: IndexQuery>(&self, query: Q, n: usize) -> Result<Vec<Q::Record>, StoreError> {
        self.first_by_index::<Q::Record>(query.index().name, &query.value(), n)
    }
    fn last_where<Q: IndexQuery>(&self, query: Q, n: usize) -> Result<Vec<Q::Record>, StoreError> {
        self.last_by_index::<Q::Record>(query.index().name, &query.value(), n)
    }
    fn last_where_before<Q: IndexQuery>(
        &self,
        query: Q,
        before: Option<&str>,
        n: usize,
    ) -> Result<Vec<Q::Record>, StoreError> {
        self.last_by_index_before::<Q::Record>(query.index().name, &query.value(), before, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declared<Q: IndexQuery>(q: Q) {
        let def = q.index();
        assert!(Q::Record::TABLE.indexes.contains(&def), "{} has no index {}", Q::Record::TABLE.name, def.name);
    }

    #[test]
    fn every_typed_query_names_an_index_of_its_table() {
        for s in JobState::ALL {
            declared(JobsBy::State(s));
        }
        declared(JobsBy::Tenant("t"));
        declared(AttemptsBy::Job("j"));
        for s in AttemptState::ALL {
            declared(AttemptsBy::State(s));
            // The index stores the serialized state: the typed value must be the same text.
            assert_eq!(serde_json::to_value(s).unwrap(), serde_json::Value::String(s.as_str().to_string()));
        }
        declared(EventsOfJob("j"));
        declared(IdempotencyKeysOfJob("j"));
        declared(PipelinesOfTenant("t"));
    }
}
