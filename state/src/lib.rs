//! The store: tables, secondary indexes, atomic transactions, settings and an event log, durable on
//! sled ([`Store::open`]) or held in memory for work that need not outlive the process
//! ([`Store::in_memory`]); only the `kv` module touches the backends.
//!
//! Tables are generic over [`Record`]: the scheduler crate defines its record types (jobs, attempts,
//! fleets, blocked offers, quota snapshots, API tokens, ...) and says, once per type, which table it
//! lives in and which fields are indexed (as JSON pointers into the serialized record). Because the
//! index keys derive from the stored JSON, `check`, `export` and `import` work without the Rust types.
//!
//! Durability contract: [`Store::transaction`] (and its conveniences `put`, `delete`, `set_setting`)
//! apply a change atomically *in memory and in sled's log*; a change that will be acknowledged to a
//! user must be followed by [`Store::flush`], which returns once everything written before the call is
//! on disk. Concurrent callers of `flush` share one fsync (group commit), so write throughput grows
//! with the number of writers. `Store` is `Clone + Send + Sync` (an `Arc` inside); async code calls it
//! through `tokio::task::spawn_blocking`.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use state::{EventDraft, IndexDef, Record, Store, TableDef};
//!
//! #[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
//! struct Job { id: String, tenant: String, state: String }
//!
//! impl Record for Job {
//!     const TABLE: TableDef = TableDef {
//!         name: "jobs",
//!         indexes: &[
//!             IndexDef { name: "state", pointer: "/state" },
//!             IndexDef { name: "tenant", pointer: "/tenant" },
//!         ],
//!     };
//!     fn key(&self) -> String { self.id.clone() }
//! }
//!
//! #[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
//! struct Attempt { id: String, job_id: String }
//!
//! impl Record for Attempt {
//!     const TABLE: TableDef =
//!         TableDef { name: "attempts", indexes: &[IndexDef { name: "job", pointer: "/job_id" }] };
//!     fn key(&self) -> String { self.id.clone() }
//! }
//!
//! # let dir = std::env::temp_dir().join(format!("spillway-state-doc-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! let store = Store::open(&dir)?;
//! let job = Job { id: "j-1".into(), tenant: "ml".into(), state: "queued".into() };
//!
//! // One atomic change over two tables and the event log: all of it survives a crash, or none.
//! let seq = store.transaction(|tx| {
//!     tx.put(&job)?;
//!     tx.put(&Attempt { id: "j-1/1".into(), job_id: "j-1".into() })?;
//!     tx.append_event(EventDraft {
//!         at_ms: 1_700_000_000_000,
//!         kind: "job.submitted".into(),
//!         job_id: Some("j-1".into()),
//!         tenant: Some("ml".into()),
//!         message: "job j-1 submitted".into(),
//!         data: serde_json::json!({ "gpus": 8 }),
//!     })
//! })?;
//! // Only now may the submission be acknowledged to the user.
//! store.flush()?;
//!
//! assert_eq!(store.get::<Job>("j-1")?, Some(job));
//! assert_eq!(store.by_index::<Job>("state", "queued")?.len(), 1);
//! assert_eq!(store.by_index::<Attempt>("job", "j-1")?.len(), 1);
//! assert_eq!(store.events_from(seq, 10)?[0].kind, "job.submitted");
//! assert_eq!(store.last_seq(), seq);
//!
//! // Typed settings: string key, any serde value.
//! store.set_setting("max_hourly_spend", &250.0)?;
//! assert_eq!(store.setting::<f64>("max_hourly_spend")?, Some(250.0));
//!
//! assert!(store.check(&[Job::TABLE, Attempt::TABLE])?.is_consistent());
//! # drop(store);
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), state::StoreError>(())
//! ```
//!
//! Inside a transaction only the [`Tx`] may be used (both backends hold a transaction lock while the
//! closure runs, so calling `Store` methods from inside it would deadlock). The closure may run more
//! than once (sled reruns it on a conflict), hence `Fn`.

mod cache;
mod check;
mod commit;
mod dump;
mod encoding;
mod error;
mod kv;
mod leadership;
mod lease;
mod location;
mod registry;
mod store;
mod tx;

pub use check::{CheckReport, IndexReport, TableReport};
pub use dump::DumpSummary;
pub use error::StoreError;
pub use lease::{Fence, LeaseGrant, LeaseHolder};
pub use location::{DEFAULT_STORE, PgLocation, StoreLocation};
pub use store::{CACHE_BYTES, Migration, Migrator, SCHEMA, Schema, Store};
pub use tx::{Tx, TxAbort};

/// A table: its name and its secondary indexes. Names use `a-z`, `0-9` and `_`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableDef {
    /// The table name, unique in the store.
    pub name: &'static str,
    /// The secondary indexes maintained on every write.
    pub indexes: &'static [IndexDef],
}

/// A secondary index: records are found by the value at `pointer` in their JSON form.
///
/// Strings index as themselves, numbers and booleans as their JSON text, arrays and objects as their
/// compact JSON text; a missing or `null` value is not indexed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexDef {
    /// The index name, unique within its table (used by [`Store::by_index`]).
    pub name: &'static str,
    /// A JSON pointer (RFC 6901) into the serialized record, e.g. `/state` or `/spec/tenant`.
    pub pointer: &'static str,
}

/// A type stored in a table. Implemented by the crates that own the types.
/// Records are `Clone + Send + Sync + 'static` so that the store can keep the decoded form of what it
/// read (see the `cache` module) and hand out clones while the stored bytes are unchanged.
pub trait Record: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static {
    /// The table this type lives in.
    const TABLE: TableDef;
    /// The primary key; unique within the table.
    fn key(&self) -> String;
    /// The values of `TABLE.indexes`, in their order, read off the record itself; `None` (the
    /// default): read by each index's JSON pointer from the encoded record. Every write keeps the
    /// indexes in step, and walking the JSON once per index was the larger part of a write of a
    /// big record (a job and its spec). Must equal what the pointers read; debug builds check it
    /// on every write.
    fn index_values(&self) -> Option<Vec<Option<String>>> {
        None
    }
}

/// An entry of the append-only event log (audit, `GET /v1/events`, `spillway status`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Event {
    /// Strictly increasing across the life of the store (never reused, even after a crash).
    pub seq: u64,
    /// When it happened, milliseconds since the Unix epoch, from the caller's clock.
    pub at_ms: i64,
    /// A dotted kind such as `job.submitted` or `fleet.created`.
    pub kind: String,
    /// The job concerned, if any.
    pub job_id: Option<String>,
    /// The tenant concerned, if any.
    pub tenant: Option<String>,
    /// A sentence for people.
    pub message: String,
    /// Structured details for programs.
    pub data: serde_json::Value,
}

/// An event before the store assigns its sequence number (see [`Tx::append_event`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EventDraft {
    /// When it happened, milliseconds since the Unix epoch, from the caller's clock.
    pub at_ms: i64,
    /// A dotted kind such as `job.submitted` or `fleet.created`.
    pub kind: String,
    /// The job concerned, if any.
    pub job_id: Option<String>,
    /// The tenant concerned, if any.
    pub tenant: Option<String>,
    /// A sentence for people.
    pub message: String,
    /// Structured details for programs.
    pub data: serde_json::Value,
}

impl EventDraft {
    fn with_seq(self, seq: u64) -> Event {
        Event {
            seq,
            at_ms: self.at_ms,
            kind: self.kind,
            job_id: self.job_id,
            tenant: self.tenant,
            message: self.message,
            data: self.data,
        }
    }
}
