//! The one error type of the store.

use std::path::PathBuf;

/// The hint every "cannot open" error carries: the store never replaces a directory it cannot open.
pub(crate) const RECOVERY_HINT: &str = "the directory was left untouched; to recover, move it aside and restore \
     a backup into a new directory with `spillway state import FILE --data-dir DIR`";

/// Everything that can go wrong in the store. Messages name the path, table, key or line concerned.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The data directory exists but sled cannot open it (corrupt, not a database, unreadable).
    #[error("cannot open the state store at {path}: {reason}; {hint}", hint = RECOVERY_HINT)]
    Open {
        /// The data directory.
        path: PathBuf,
        /// What sled or the file system said.
        reason: String,
    },
    /// Another process (or another `Store` in this process) has the directory open.
    #[error("the state store at {path} is in use by another process (sled holds a lock on {path}/db)")]
    InUse {
        /// The data directory.
        path: PathBuf,
    },
    /// The database was written by a newer spillway, or its version is unknown to this one.
    #[error(
        "the state store at {path} has schema version {found}, but this spillway supports up to version \
         {supported}; upgrade spillway, or export with the newer one and import here"
    )]
    NewerSchema {
        /// The data directory.
        path: PathBuf,
        /// The version recorded in the database.
        found: u32,
        /// The newest version this build understands.
        supported: u32,
    },
    /// The database is older than this build and no migration covers the gap.
    #[error("the state store at {path} has schema version {found} and there is no migration from it to {target}")]
    NoMigration {
        /// The data directory.
        path: PathBuf,
        /// The version recorded in the database.
        found: u32,
        /// The version this build wants.
        target: u32,
    },
    /// An `import` started and did not finish; the contents are partial.
    #[error(
        "the state store at {path} holds a partial import (the import did not finish); delete the directory and \
         run `spillway state import FILE --data-dir {path}` again"
    )]
    PartialImport {
        /// The data directory.
        path: PathBuf,
    },
    /// The database server cannot be reached or answered with an error (PostgreSQL): the request
    /// may be retried; nothing it asked for was applied unless its commit had returned.
    #[error("the state store at {location} is unavailable: {reason}")]
    Unavailable {
        /// Where the store is (never with the password).
        location: String,
        /// What the driver or the server said.
        reason: String,
    },
    /// A write through a leader's store handle was refused: this server does not hold the leader
    /// lease (any more) at the epoch the handle writes under.
    #[error("write refused: {0}")]
    Fenced(String),
    /// A sled operation failed after opening.
    #[error("state store error: {0}")]
    Storage(String),
    /// A stored value could not be decoded.
    #[error("cannot decode {what} in table {table}: {reason}")]
    Decode {
        /// The table (or `events`, `settings`, `meta`).
        table: String,
        /// The key, or a description of the item.
        what: String,
        /// Why.
        reason: String,
    },
    /// A stored value does not match its checksum: the bytes were damaged after they were written.
    #[error(
        "record {what} in table {table} is damaged (its checksum does not match): the store refuses to use it; \
         `spillway state check` lists every damaged record, and a backup restores them (`spillway state import`, \
         see README)"
    )]
    Corrupt {
        /// The table (or `events`, `settings`, `meta`).
        table: String,
        /// The key, or a description of the item.
        what: String,
    },
    /// sled found a damaged page in its database file while reading it.
    #[error(
        "the database file of the state store is damaged ({0}): `spillway state check` lists what can still be \
         read, and a backup restores the rest (`spillway state import`, see README)"
    )]
    CorruptLog(String),
    /// The store found damage earlier and refuses writes until it is restored.
    #[error("the state store refuses writes: {0}")]
    Damaged(String),
    /// The disk of a sled store has too little space left for a write to be safe.
    #[error(
        "the disk of the state store at {path} is full ({free_mb} MiB free, writes need {need_mb} MiB): writes are \
         refused until space is freed (nothing acknowledged is lost)"
    )]
    DiskFull {
        /// The data directory.
        path: PathBuf,
        /// Free space, MiB.
        free_mb: u64,
        /// The reserve writes keep free, MiB.
        need_mb: u64,
    },
    /// A value could not be encoded as JSON.
    #[error("cannot encode a record for table {table}: {reason}")]
    Encode {
        /// The table.
        table: String,
        /// Why.
        reason: String,
    },
    /// A table or index definition is invalid or conflicts with another one.
    #[error("invalid table definition: {0}")]
    Definition(String),
    /// `by_index` named an index the table does not have.
    #[error("table {table} has no index named {index}")]
    UnknownIndex {
        /// The table.
        table: String,
        /// The index asked for.
        index: String,
    },
    /// The transaction closure aborted; the inner error is the caller's (use `downcast_ref`).
    #[error("transaction aborted: {0}")]
    Aborted(Box<dyn std::error::Error + Send + Sync>),
    /// An import file line is malformed or out of order.
    #[error("import line {line}: {reason}")]
    Import {
        /// The 1-based line number.
        line: usize,
        /// Why.
        reason: String,
    },
    /// `import` into a store that already holds data.
    #[error("the state store at {path} is not empty; import only into a new data directory")]
    NotEmpty {
        /// The data directory.
        path: PathBuf,
    },
    /// Reading or writing an export stream failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

impl From<sled::Error> for StoreError {
    fn from(e: sled::Error) -> Self {
        match e {
            sled::Error::Corruption { at, .. } => StoreError::CorruptLog(match at {
                Some(at) => format!("sled read corrupted data at {at:?}"),
                None => "sled read corrupted data".into(),
            }),
            e => StoreError::Storage(e.to_string()),
        }
    }
}
