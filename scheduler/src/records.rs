//! How the scheduler's types are stored: each is a `state::Record` with its table and indexes.
//!
//! Index pointers are JSON pointers into the stored record, so the store can verify indexes
//! (`spillway state check`) without knowing these Rust types.

use serde::{Deserialize, Serialize};
use state::{IndexDef, Record, TableDef};

use crate::model::{Attempt, BlockedOffer, Job};

impl Record for Job {
    const TABLE: TableDef = TableDef {
        name: "jobs",
        indexes: &[IndexDef { name: "state", pointer: "/state" }, IndexDef { name: "tenant", pointer: "/spec/tenant" }],
    };
    fn key(&self) -> String {
        self.id.clone()
    }
}

impl Record for Attempt {
    const TABLE: TableDef = TableDef {
        name: "attempts",
        indexes: &[IndexDef { name: "job", pointer: "/job_id" }, IndexDef { name: "state", pointer: "/state" }],
    };
    fn key(&self) -> String {
        attempt_key(&self.job_id, self.number)
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
    const TABLE: TableDef = TableDef { name: "idempotency", indexes: &[IndexDef { name: "job", pointer: "/job_id" }] };
    fn key(&self) -> String {
        self.scope_key.clone()
    }
}

/// Every table the scheduler defines, for `spillway state check`.
pub const TABLES: &[TableDef] =
    &[Job::TABLE, Attempt::TABLE, BlockedOffer::TABLE, Tenant::TABLE, IdempotencyRecord::TABLE];
