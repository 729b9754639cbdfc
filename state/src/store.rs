//! Opening the store, typed reads, transactions, flushing, schema versions and migrations.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use serde_json::Value;

use crate::cache::{Lookup, RecordCache};
use crate::commit::GroupCommit;
use crate::encoding::{
    META_IMPORT_INCOMPLETE, META_LAST_SEQ, META_SCHEMA_VERSION, META_TABLE_PREFIX, META_TREE, StoredTable, decode,
    encode, index_keys, index_prefix, index_tree, open_envelope, pointer_value, table_tree,
};
use crate::kv::postgres::PgDb;
use crate::kv::{Db, Tree, TxFailed, TxStop, read_seq};
use crate::lease::{Fence, LeaseGrant};
use crate::location::{PgLocation, StoreLocation};
use crate::registry::{EVENTS_IX, META_IX, Registry, SETTINGS_IX};
use crate::tx::{AbortKind, Tx, TxAbort};
use crate::{Event, Record, StoreError, TableDef};

/// Longest a read of the event log waits, on PostgreSQL, for transactions that were running when it
/// started to end (so it sees every event committed before it; see `kv::postgres`).
const READ_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The schema this build writes: its version and the migrations that bring older stores up to it.
pub struct Schema {
    /// The version stored in new databases and required of opened ones.
    pub version: u32,
    /// Migrations, each from one version to the next.
    pub migrations: &'static [Migration],
}

/// One step of a schema upgrade: run on a store at version `from`, leaves it at `from + 1`.
///
/// Migrations must be idempotent: a crash during one leaves the version at `from`, and it runs again
/// on the next open. Indexes are rebuilt after the last migration, so a migration only edits records.
pub struct Migration {
    /// The version this migration upgrades from.
    pub from: u32,
    /// The change.
    pub run: fn(&Migrator<'_>) -> Result<(), StoreError>,
}

/// The schema of this build. Version 1 is the first; there is nothing to migrate from yet.
pub const SCHEMA: Schema = Schema { version: 1, migrations: &[] };

/// What a [`Migration`] may do: read and rewrite records as JSON.
pub struct Migrator<'a> {
    db: &'a Db,
    tables: Vec<StoredTable>,
    from: u32,
}

impl Migrator<'_> {
    /// The version being migrated from.
    pub fn from_version(&self) -> u32 {
        self.from
    }

    /// The tables recorded in the store.
    pub fn tables(&self) -> Vec<String> {
        self.tables.iter().map(|t| t.name.clone()).collect()
    }

    fn tree(&self, table: &str) -> Result<Tree, StoreError> {
        if !self.tables.iter().any(|t| t.name == table) {
            return Err(StoreError::Definition(format!("migration: no table named {table}")));
        }
        self.db.open_tree(table_tree(table))
    }

    /// Every record of a table, by key.
    pub fn records(&self, table: &str) -> Result<Vec<(String, Value)>, StoreError> {
        let mut out = Vec::new();
        self.tree(table)?.visit_all(|k, v| {
            let key = String::from_utf8_lossy(k).into_owned();
            let value = decode(v, table, &key)?;
            out.push((key, value));
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(out)
    }

    /// Writes a record (indexes are rebuilt after the migrations).
    pub fn put(&self, table: &str, key: &str, record: &Value) -> Result<(), StoreError> {
        self.tree(table)?.insert(key.as_bytes(), encode(record, table)?)?;
        Ok(())
    }

    /// Removes a record.
    pub fn delete(&self, table: &str, key: &str) -> Result<(), StoreError> {
        self.tree(table)?.remove(key.as_bytes())?;
        Ok(())
    }
}

pub(crate) struct Inner {
    /// Empty for an in-memory store; the location (without password) for PostgreSQL.
    pub path: PathBuf,
    pub db: Db,
    pub schema_version: u32,
    pub schema: &'static Schema,
    registry: RwLock<Arc<Registry>>,
    /// Serialises registrations (which may rebuild an index).
    register: Mutex<()>,
    /// Definitions used by this process's `Record` types, to catch two types claiming one table.
    seen: Mutex<HashMap<String, StoredTable>>,
    /// Transactions take it shared; index rebuilds, `check` and `export` take it exclusively, so they
    /// see no transaction half-applied.
    writers: RwLock<()>,
    pub last_seq: AtomicU64,
    commit: GroupCommit,
    /// Decoded records by the bytes they came from (reads of unchanged records skip the JSON).
    cache: RecordCache,
    /// The leader lease of a store only this process opens (sled, memory); see `crate::lease`.
    pub local_lease: Mutex<Option<LeaseGrant>>,
    /// The first damage a read found; writes are refused while it is set.
    fault: Mutex<Option<String>>,
    /// Free space on a sled store's disk, looked at before writes.
    space: DiskSpace,
    /// Flushes made durable so far (sled), and where that count is kept outside sled's log.
    pub flushes: AtomicU64,
    watermark: Option<Watermark>,
}

/// The durable store. Cheap to clone; all clones share one database.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
    /// Set on a leader's handle ([`Store::fenced`]): its writes need the lease.
    pub(crate) fence: Option<Fence>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Inner {
    pub fn registry(&self) -> Arc<Registry> {
        self.registry.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn writers_shared(&self) -> RwLockReadGuard<'_, ()> {
        self.writers.read().unwrap_or_else(|p| p.into_inner())
    }

    pub fn writers_exclusive(&self) -> RwLockWriteGuard<'_, ()> {
        self.writers.write().unwrap_or_else(|p| p.into_inner())
    }
}

impl Store {
    /// Opens (or creates, with mode 0700) the store in `dir` with this build's [`SCHEMA`].
    ///
    /// Fails, leaving the directory untouched, when it is not a directory, holds something other than
    /// a sled database, cannot be opened by sled, is in use, or has a newer schema version.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        Store::open_with(dir, &SCHEMA)
    }

    /// [`Store::open`] with an explicit schema (its version and migrations).
    pub fn open_with(dir: &Path, schema: &'static Schema) -> Result<Store, StoreError> {
        let path = dir.to_path_buf();
        prepare_dir(&path)?;
        let marker = path.join(MARKER_FILE);
        let initialized = marker.exists();
        if initialized && !path.join("db").exists() {
            return Err(StoreError::Open { path, reason: "its database file `db` is missing".into() });
        }
        let sled = open_sled(&path)?;
        let db = Db::Sled(sled.clone());
        let meta = db.open_tree(META_TREE)?;
        if meta.get(META_IMPORT_INCOMPLETE.as_bytes())?.is_some() {
            return Err(StoreError::PartialImport { path });
        }
        let found = match meta.get(META_SCHEMA_VERSION.as_bytes())? {
            Some(v) => decode_version(&v).ok_or_else(|| StoreError::Open {
                path: path.clone(),
                reason: "its schema version is unreadable".into(),
            })?,
            None => {
                // sled 0.34 opens a corrupt database file as an empty one instead of failing; the
                // marker tells a new store from one whose contents sled could not read.
                if initialized {
                    return Err(StoreError::Open {
                        path,
                        reason: "sled read no spillway data from a directory that holds an initialised store (the \
                                 database file `db` is corrupt)"
                            .into(),
                    });
                }
                if holds_data(&sled)? {
                    return Err(StoreError::Open {
                        path,
                        reason: "it holds data but no schema version (not written by spillway?)".into(),
                    });
                }
                meta.insert(META_SCHEMA_VERSION.as_bytes(), &schema.version.to_be_bytes()[..])?;
                db.flush()?;
                schema.version
            }
        };
        if !initialized {
            // Also after a crash between the first flush and this line.
            write_marker(&marker).map_err(|e| StoreError::Open {
                path: path.clone(),
                reason: format!("cannot write {}: {e}", marker.display()),
            })?;
        }
        if found > schema.version {
            return Err(StoreError::NewerSchema { path, found, supported: schema.version });
        }
        if found < schema.version {
            migrate(&db, &path, found, schema)?;
        }
        // sled 0.34 opens a log damaged in the middle as if it ended there: the count of flushes it
        // recovered falls short of the count kept outside it.
        let flushes = read_seq(meta.get(META_FLUSHES.as_bytes())?.as_deref())?;
        let watermark = Watermark::open(&path).map_err(|e| StoreError::Open {
            path: path.clone(),
            reason: format!("cannot open {}: {e}", path.join(WATERMARK_FILE).display()),
        })?;
        if let Some(durable) = watermark.read()
            && durable > flushes
        {
            return Err(StoreError::Open {
                path,
                reason: format!(
                    "its database file lost writes that had been made durable: sled recovered it as of flush {flushes}, \
                     but {durable} flushes had completed (its log is damaged in the middle, and sled 0.34 drops \
                     everything after the damage without an error)"
                ),
            });
        }
        let registry = Registry::build(&db, recorded_tables(&db)?)?;
        let last_seq = read_seq(meta.get(META_LAST_SEQ.as_bytes())?.as_deref())?;
        Ok(Store::assemble(path, db, schema, registry, last_seq, flushes, Some(watermark)))
    }

    /// Opens the store at a parsed location (`sled:DIR` or `postgres://…`) with this build's schema.
    pub fn open_location(location: &StoreLocation) -> Result<Store, StoreError> {
        match location {
            StoreLocation::Sled(dir) => Store::open(dir),
            StoreLocation::Postgres(pg) => Store::connect(pg, &SCHEMA),
        }
    }

    /// Connects to a PostgreSQL store, creating its tables in an empty database (any number of
    /// servers may share it; see `crate::lease` for which of them writes as the leader). Fails with
    /// one line naming the server and the reason when it cannot be reached, refuses the password,
    /// or holds a schema this build cannot use.
    pub fn connect(location: &PgLocation, schema: &'static Schema) -> Result<Store, StoreError> {
        let pg = Arc::new(PgDb::open(location.pg_config())?);
        let path = PathBuf::from(pg.display());
        let db = Db::Postgres(pg);
        let meta = db.open_tree(META_TREE)?;
        if meta.get(META_IMPORT_INCOMPLETE.as_bytes())?.is_some() {
            return Err(StoreError::PartialImport { path });
        }
        let found = match meta.get(META_SCHEMA_VERSION.as_bytes())? {
            Some(v) => decode_version(&v).ok_or_else(|| StoreError::Open {
                path: path.clone(),
                reason: "its schema version is unreadable".into(),
            })?,
            None => {
                meta.insert(META_SCHEMA_VERSION.as_bytes(), &schema.version.to_be_bytes()[..])?;
                schema.version
            }
        };
        if found > schema.version {
            return Err(StoreError::NewerSchema { path, found, supported: schema.version });
        }
        if found < schema.version {
            migrate(&db, &path, found, schema)?;
        }
        let registry = Registry::build(&db, recorded_tables(&db)?)?;
        Ok(Store::assemble(path, db, schema, registry, 0, 0, None))
    }

    /// A store held entirely in memory, gone when the last clone is dropped: the same tables,
    /// indexes, transactions, event log and checks as [`Store::open`], without a directory, a log or
    /// I/O. For work whose record need not outlive the process (the what-if simulator runs thousands
    /// of rounds a second against one); [`Store::flush`] returns at once, as there is no disk.
    pub fn in_memory() -> Result<Store, StoreError> {
        let db = Db::memory();
        db.open_tree(META_TREE)?.insert(META_SCHEMA_VERSION.as_bytes(), &SCHEMA.version.to_be_bytes()[..])?;
        let registry = Registry::build(&db, Vec::new())?;
        Ok(Store::assemble(PathBuf::new(), db, &SCHEMA, registry, 0, 0, None))
    }

    fn assemble(
        path: PathBuf,
        db: Db,
        schema: &'static Schema,
        registry: Registry,
        last_seq: u64,
        flushes: u64,
        watermark: Option<Watermark>,
    ) -> Store {
        Store {
            inner: Arc::new(Inner {
                path,
                db,
                schema_version: schema.version,
                schema,
                registry: RwLock::new(Arc::new(registry)),
                register: Mutex::new(()),
                seen: Mutex::new(HashMap::new()),
                writers: RwLock::new(()),
                last_seq: AtomicU64::new(last_seq),
                commit: GroupCommit::default(),
                cache: RecordCache::default(),
                local_lease: Mutex::new(None),
                fault: Mutex::new(None),
                space: DiskSpace::default(),
                flushes: AtomicU64::new(flushes),
                watermark,
            }),
            fence: None,
        }
    }

    /// Whether this store lives in memory only ([`Store::in_memory`]).
    pub fn is_in_memory(&self) -> bool {
        matches!(self.inner.db, Db::Memory(_))
    }

    /// Remembers damage a read found (a record whose checksum does not match): from then on the
    /// store refuses writes and says why ([`Store::health`]).
    fn watch<T>(&self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(e @ (StoreError::Corrupt { .. } | StoreError::CorruptLog(_))) = &r {
            let mut fault = lock(&self.inner.fault);
            if fault.is_none() {
                *fault = Some(e.to_string());
            }
        }
        r
    }

    /// Refuses writes to a damaged store, and to a sled store whose disk is nearly full (a write
    /// that ran out of space would leave sled failing every later operation until restarted).
    fn writable(&self) -> Result<(), StoreError> {
        if let Some(why) = lock(&self.inner.fault).clone() {
            return Err(StoreError::Damaged(why));
        }
        if matches!(self.inner.db, Db::Sled(_)) {
            self.inner.space.check(&self.inner.path)?;
        }
        Ok(())
    }

    /// Whether the store can be used: `Err` with the reason when damage was found (writes are
    /// refused until it is restored) or when the disk is too full to write.
    pub fn health(&self) -> Result<(), String> {
        self.writable().map_err(|e| e.to_string())
    }

    /// Whether several servers may share this store (PostgreSQL).
    pub fn is_shared(&self) -> bool {
        matches!(self.inner.db, Db::Postgres(_))
    }

    /// The data directory (empty for an in-memory store; the location, without password, for
    /// PostgreSQL).
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The schema version of the open store.
    pub fn schema_version(&self) -> u32 {
        self.inner.schema_version
    }

    /// The record with this key.
    pub fn get<R: Record>(&self, key: &str) -> Result<Option<R>, StoreError> {
        Ok(self.get_shared(key)?.map(Arc::unwrap_or_clone))
    }

    /// The stored JSON of a record, byte for byte, looked up by table name (for tools and tests).
    pub fn get_raw(&self, table: &str, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let reg = self.inner.registry();
        let Some(h) = reg.tables.get(table) else { return Ok(None) };
        match reg.trees[h.tree].get(key.as_bytes())? {
            Some(bytes) => Ok(Some(open_envelope(&bytes, table, key)?.to_vec())),
            None => Ok(None),
        }
    }

    /// Every record of the table, in key order.
    pub fn scan<R: Record>(&self) -> Result<Vec<R>, StoreError> {
        self.watch((|| {
            let reg = self.ensure_table(&R::TABLE)?;
            let h = &reg.tables[R::TABLE.name];
            let mut out = Vec::new();
            reg.trees[h.tree].visit_all(|k, v| {
                out.push(decode(v, R::TABLE.name, &String::from_utf8_lossy(k))?);
                Ok(ControlFlow::Continue(()))
            })?;
            Ok(out)
        })())
    }

    /// The records whose index `index` has the value `value` (see [`IndexDef`](crate::IndexDef) for
    /// how values are written), in key order.
    pub fn by_index<R: Record>(&self, index: &str, value: &str) -> Result<Vec<R>, StoreError> {
        self.page_by_index_shared(index, value, None, usize::MAX, false).map(unshared)
    }

    /// [`Store::by_index`], each record shared with the store's decoded-record cache rather than
    /// copied: for readers that hold many records for a while and change few (the control loop
    /// reads every open job and active attempt each round, and most are as they were).
    pub fn by_index_shared<R: Record>(&self, index: &str, value: &str) -> Result<Vec<Arc<R>>, StoreError> {
        self.page_by_index_shared(index, value, None, usize::MAX, false)
    }

    /// [`Store::get`], the record shared with the decoded-record cache.
    pub fn get_shared<R: Record>(&self, key: &str) -> Result<Option<Arc<R>>, StoreError> {
        self.watch((|| {
            let reg = self.ensure_table(&R::TABLE)?;
            let h = &reg.tables[R::TABLE.name];
            match reg.trees[h.tree].get(key.as_bytes())? {
                Some(bytes) => Ok(Some(self.inner.cache.decode_shared::<R>(key, bytes)?)),
                None => Ok(None),
            }
        })())
    }

    /// How many records the index lists under `value`, without reading the records: cheap enough for
    /// gauges refreshed every round. A count taken while a transaction commits may be off by the
    /// records that transaction moves.
    pub fn count_by_index<R: Record>(&self, index: &str, value: &str) -> Result<usize, StoreError> {
        let reg = self.ensure_table(&R::TABLE)?;
        let h = &reg.tables[R::TABLE.name];
        let Some(pos) = h.def.indexes.iter().position(|i| i.name == index) else {
            return Err(StoreError::UnknownIndex { table: R::TABLE.name.into(), index: index.into() });
        };
        reg.trees[h.indexes[pos]].count_prefix(&index_prefix(value))
    }

    /// The last `n` records (in key order) whose index `index` has the value `value`, read from the
    /// end of the index: a page of the newest records costs `n` reads, not the whole history, when
    /// keys grow with time (as generated job ids do).
    pub fn last_by_index<R: Record>(&self, index: &str, value: &str, n: usize) -> Result<Vec<R>, StoreError> {
        self.last_by_index_before(index, value, None, n)
    }

    /// [`Store::last_by_index`] among the records whose key is below `before` (all of them with
    /// `None`): the page after one that ended at `before`, however many records were added since
    /// above it.
    pub fn last_by_index_before<R: Record>(
        &self,
        index: &str,
        value: &str,
        before: Option<&str>,
        n: usize,
    ) -> Result<Vec<R>, StoreError> {
        let mut out = unshared(self.page_by_index_shared(index, value, before, n, true)?);
        out.reverse();
        Ok(out)
    }

    /// The first `n` records (in key order) whose index `index` has the value `value`: the oldest,
    /// when keys grow with time.
    pub fn first_by_index<R: Record>(&self, index: &str, value: &str, n: usize) -> Result<Vec<R>, StoreError> {
        self.page_by_index_shared(index, value, None, n, false).map(unshared)
    }

    /// Up to `n` records whose index `index` has the value `value`, in key order from the start or
    /// (`from_end`) from the end, below `before` if given; shared with the decoded-record cache.
    fn page_by_index_shared<R: Record>(
        &self,
        index: &str,
        value: &str,
        before: Option<&str>,
        n: usize,
        from_end: bool,
    ) -> Result<Vec<Arc<R>>, StoreError> {
        self.watch((|| {
            let reg = self.ensure_table(&R::TABLE)?;
            let h = &reg.tables[R::TABLE.name];
            let Some(pos) = h.def.indexes.iter().position(|i| i.name == index) else {
                return Err(StoreError::UnknownIndex { table: R::TABLE.name.into(), index: index.into() });
            };
            // The type's own definition (static) names the same pointer as the registered one.
            let Some(pointer) = R::TABLE.indexes.iter().find(|i| i.name == index).map(|i| i.pointer) else {
                return Err(StoreError::UnknownIndex { table: R::TABLE.name.into(), index: index.into() });
            };
            let mut out = Vec::new();
            if n == 0 {
                return Ok(out);
            }
            let table = &reg.trees[h.tree];
            let before = before.map(str::as_bytes);
            reg.trees[h.indexes[pos]].visit_index(&index_prefix(value), before, table, from_end, n, |key, bytes| {
                let Ok(key) = std::str::from_utf8(key) else { return Ok(ControlFlow::Continue(())) };
                // A transaction may be committing between the index read and this one; only records that
                // have the value now are returned.
                let Some(bytes) = bytes else { return Ok(ControlFlow::Continue(())) };
                if let Some(r) = self.matching_record::<R>(key, bytes, pointer, value)? {
                    out.push(r);
                }
                Ok(if out.len() >= n { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
            })?;
            Ok(out)
        })())
    }

    /// The record stored as `bytes` under `key` if its value at `pointer` is `value`, decoded at most
    /// once for all the reads that find the same bytes.
    fn matching_record<R: Record>(
        &self,
        key: &str,
        bytes: sled::IVec,
        pointer: &'static str,
        value: &str,
    ) -> Result<Option<Arc<R>>, StoreError> {
        let cached = match self.inner.cache.get::<R>(R::TABLE.name, key, &bytes, Some(pointer)) {
            Lookup::Hit(r, Some(at)) => return Ok((at.as_deref() == Some(value)).then_some(r)),
            Lookup::Hit(r, None) => Some(r),
            Lookup::Miss => None,
        };
        let json = open_envelope(&bytes, R::TABLE.name, key)?;
        let decode_err = |e: serde_json::Error| StoreError::Decode {
            table: R::TABLE.name.into(),
            what: key.into(),
            reason: e.to_string(),
        };
        let at = pointer_value(json, pointer).map_err(decode_err)?;
        let matches = at.as_deref() == Some(value);
        // Cached by a plain `get`: only the index value was missing; the record is not decoded again.
        let r: Arc<R> = match cached {
            Some(r) => r,
            None if matches => Arc::new(serde_json::from_slice(json).map_err(decode_err)?),
            None => return Ok(None),
        };
        self.inner.cache.put_shared(R::TABLE.name, key, bytes, &r, vec![(pointer, at)]);
        Ok(matches.then_some(r))
    }

    /// The last `n` records of a table, in key order.
    pub fn last<R: Record>(&self, n: usize) -> Result<Vec<R>, StoreError> {
        self.last_before(None, n)
    }

    /// The last `n` records of a table whose key is below `before` (all with `None`), in key order.
    pub fn last_before<R: Record>(&self, before: Option<&str>, n: usize) -> Result<Vec<R>, StoreError> {
        self.watch((|| {
            let reg = self.ensure_table(&R::TABLE)?;
            let h = &reg.tables[R::TABLE.name];
            let mut out = Vec::new();
            if n > 0 {
                reg.trees[h.tree].visit_range(b"", before.map(str::as_bytes), true, |k, v| {
                    out.push(decode(v, R::TABLE.name, &String::from_utf8_lossy(k))?);
                    Ok(if out.len() >= n { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
                })?;
            }
            out.reverse();
            Ok(out)
        })())
    }

    /// How many records a table holds.
    pub fn count<R: Record>(&self) -> Result<usize, StoreError> {
        let reg = self.ensure_table(&R::TABLE)?;
        reg.trees[reg.tables[R::TABLE.name].tree].len()
    }

    /// Runs `f` atomically over every table, index, the settings and the event log: after a crash
    /// either all of its writes are there or none. Not durable until [`Store::flush`] returns.
    ///
    /// `f` may run more than once (so it must not have side effects outside the `Tx`), and must not
    /// call other `Store` methods (the backend holds a transaction lock while it runs).
    pub fn transaction<T>(&self, f: impl Fn(&mut Tx) -> Result<T, TxAbort>) -> Result<T, StoreError> {
        enum Outcome {
            Missing(TableDef),
            User(Box<dyn std::error::Error + Send + Sync>),
            Store(StoreError),
        }
        let fence = self.fence_token()?;
        self.writable()?;
        loop {
            let reg = self.inner.registry();
            let result = {
                let _shared = self.inner.writers_shared();
                self.inner.db.transaction(&reg.trees, fence.as_ref(), |view| {
                    let mut tx = Tx::new(&reg, view, &self.inner.cache);
                    let out = f(&mut tx);
                    if let Some(def) = tx.missing {
                        return Err(TxStop::Abort(Outcome::Missing(def)));
                    }
                    match out {
                        Ok(v) => Ok((v, tx.last_seq)),
                        Err(TxAbort(AbortKind::Conflict)) => Err(TxStop::Conflict),
                        Err(TxAbort(AbortKind::User(e))) => Err(TxStop::Abort(Outcome::User(e))),
                        Err(TxAbort(AbortKind::Store(e))) => Err(TxStop::Abort(Outcome::Store(e))),
                    }
                })
            };
            match result {
                Ok((v, seq)) => {
                    if let Some(seq) = seq
                        && !self.is_shared()
                    {
                        self.inner.last_seq.fetch_max(seq, Ordering::SeqCst);
                    }
                    return Ok(v);
                }
                Err(TxFailed::Abort(Outcome::Missing(def))) => {
                    self.ensure_table(&def)?;
                }
                Err(TxFailed::Abort(Outcome::User(e))) => return Err(StoreError::Aborted(e)),
                Err(TxFailed::Abort(Outcome::Store(e))) | Err(TxFailed::Storage(e)) => return self.watch(Err(e)),
            }
        }
    }

    /// Inserts or replaces one record (a transaction of one `put`). Not durable until `flush`.
    pub fn put<R: Record>(&self, record: &R) -> Result<(), StoreError> {
        self.transaction(|tx| tx.put(record))
    }

    /// Removes one record; returns it if it existed. Not durable until `flush`.
    pub fn delete<R: Record>(&self, key: &str) -> Result<Option<R>, StoreError> {
        self.transaction(|tx| tx.delete::<R>(key))
    }

    /// A setting (string key, any serde value).
    pub fn setting<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<Option<T>, StoreError> {
        self.watch((|| match self.inner.registry().trees[SETTINGS_IX].get(key.as_bytes())? {
            Some(bytes) => Ok(Some(decode(&bytes, "settings", key)?)),
            None => Ok(None),
        })())
    }

    /// Sets a setting. Not durable until `flush`.
    pub fn set_setting<T: serde::Serialize + ?Sized>(&self, key: &str, value: &T) -> Result<(), StoreError> {
        self.transaction(|tx| tx.set_setting(key, value))
    }

    /// Removes a setting; returns whether it existed. Not durable until `flush`.
    pub fn delete_setting(&self, key: &str) -> Result<bool, StoreError> {
        self.transaction(|tx| tx.delete_setting(key))
    }

    /// The durability barrier: returns once everything written before the call is on disk.
    /// Concurrent callers share one fsync. An in-memory store has no disk: it returns at once.
    pub fn flush(&self) -> Result<(), StoreError> {
        if !matches!(self.inner.db, Db::Sled(_)) {
            // In memory there is no disk; on PostgreSQL a commit is durable when it returns.
            return Ok(());
        }
        self.inner.commit.flush(|| {
            // Each flush counts itself in the log it makes durable, then outside it (see
            // `Watermark`): a log that later loses this flush is caught on the next open.
            let n = self.inner.flushes.load(Ordering::SeqCst) + 1;
            self.inner.db.open_tree(META_TREE)?.insert(META_FLUSHES.as_bytes(), &n.to_be_bytes()[..])?;
            self.inner.db.flush()?;
            self.inner.flushes.store(n, Ordering::SeqCst);
            if let Some(w) = &self.inner.watermark {
                w.record(n);
            }
            Ok(())
        })
    }

    /// How many fsyncs `flush` has run since open (fewer than `flush` calls when writers overlap).
    pub fn fsync_count(&self) -> u64 {
        self.inner.commit.fsyncs()
    }

    /// Up to `limit` events with `seq >= from`, in order. A reader that has seen up to `n` asks for
    /// `n + 1`.
    pub fn events_from(&self, from: u64, limit: usize) -> Result<Vec<Event>, StoreError> {
        self.watch((|| {
            let mut out = Vec::new();
            if limit == 0 {
                return Ok(out);
            }
            // On PostgreSQL, events numbered above the readable horizon may still be joined by lower
            // numbers committing late: they are left for a later read (see `kv::postgres`).
            let upto = match &self.inner.db {
                Db::Postgres(_) => Some(self.readable_seq(READ_WAIT)?),
                _ => None,
            };
            if upto.is_some_and(|h| from > h) {
                return Ok(out);
            }
            let end = upto.and_then(|h| h.checked_add(1)).map(u64::to_be_bytes);
            let reg = self.inner.registry();
            reg.trees[EVENTS_IX].visit_range(&from.to_be_bytes(), end.as_ref().map(|e| &e[..]), false, |k, v| {
                out.push(decode(v, "events", &format!("event {k:?}"))?);
                Ok(if out.len() >= limit { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
            })?;
            Ok(out)
        })())
    }

    /// The newest event number below which every event that will ever be committed is readable.
    fn readable_seq(&self, wait: std::time::Duration) -> Result<u64, StoreError> {
        let reg = self.inner.registry();
        let seq = self.inner.db.readable_seq(&reg.trees[META_IX], META_LAST_SEQ.as_bytes(), wait)?;
        self.inner.last_seq.fetch_max(seq, Ordering::SeqCst);
        Ok(seq)
    }

    /// Removes the events of the log that happened before `before_ms`, oldest first, at most `max` of
    /// them; returns how many went. Sequence numbers are never reused: a reader resuming from a
    /// removed event gets the oldest one kept.
    pub fn trim_events_before(&self, before_ms: i64, max: usize) -> Result<usize, StoreError> {
        let events = &self.inner.registry().trees[EVENTS_IX];
        let mut old = Vec::new();
        if max > 0 {
            events.visit_all(|k, v| {
                let event: Event = decode(v, "events", &format!("event {k:?}"))?;
                if event.at_ms >= before_ms {
                    return Ok(ControlFlow::Break(()));
                }
                old.push(k.to_vec());
                Ok(if old.len() >= max { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
            })?;
        }
        if !old.is_empty() {
            // A transaction, so that a leader's fenced handle trims only while it leads.
            self.transaction(|tx| {
                for k in &old {
                    tx.remove_event(k)?;
                }
                Ok(())
            })?;
        }
        Ok(old.len())
    }

    /// The sequence number of the newest event readers can see (0 when there is none). On
    /// PostgreSQL, the newest number below which no event can still appear (it trails the newest
    /// commits by the transactions still running); an event stream that starts after it misses
    /// nothing.
    pub fn last_seq(&self) -> u64 {
        if self.is_shared() {
            // Infallible by signature: on an error the last number seen is as good an answer.
            return self
                .readable_seq(std::time::Duration::ZERO)
                .unwrap_or_else(|_| self.inner.last_seq.load(Ordering::SeqCst));
        }
        self.inner.last_seq.load(Ordering::SeqCst)
    }

    /// Makes sure `def`'s trees exist and its indexes match `def` (rebuilding any index whose pointer
    /// changed), recording `def` in the meta tree; returns the registry including it.
    pub(crate) fn ensure_table(&self, def: &TableDef) -> Result<Arc<Registry>, StoreError> {
        let reg = self.inner.registry();
        if let Some(h) = reg.tables.get(def.name)
            && h.def.matches(def)
        {
            return Ok(reg);
        }
        let wanted = StoredTable::from_def(def);
        wanted.validate()?;
        {
            let mut seen = lock(&self.inner.seen);
            if let Some(prev) = seen.get(def.name)
                && *prev != wanted
            {
                return Err(StoreError::Definition(format!(
                    "table {} is defined twice with different indexes: {:?} and {:?}",
                    def.name, prev.indexes, wanted.indexes
                )));
            }
            seen.insert(def.name.into(), wanted.clone());
        }
        self.register(wanted)
    }

    /// Records a table definition and brings its index trees in line with it.
    pub(crate) fn register(&self, wanted: StoredTable) -> Result<Arc<Registry>, StoreError> {
        let _one_at_a_time = lock(&self.inner.register);
        let reg = self.inner.registry();
        if let Some(h) = reg.tables.get(&wanted.name)
            && h.def == wanted
        {
            return Ok(reg);
        }
        let _exclusive = self.inner.writers_exclusive();
        let db = &self.inner.db;
        let old = reg.tables.get(&wanted.name).map(|h| h.def.clone());
        let table = db.open_tree(table_tree(&wanted.name))?;
        for ix in &wanted.indexes {
            let unchanged = old.as_ref().is_some_and(|o| o.indexes.contains(ix));
            if !unchanged {
                rebuild_index(db, &table, &wanted, &ix.name)?;
            }
        }
        if let Some(old) = &old {
            for ix in &old.indexes {
                if !wanted.indexes.iter().any(|w| w.name == ix.name) {
                    db.drop_tree(index_tree(&wanted.name, &ix.name))?;
                }
            }
        }
        // Recorded last: a crash before this line leaves the old definition, so the rebuild reruns.
        let meta_key = format!("{META_TABLE_PREFIX}{}", wanted.name);
        db.open_tree(META_TREE)?.insert(meta_key.as_bytes(), encode(&wanted, "meta")?)?;
        db.flush()?;
        let mut defs: Vec<StoredTable> =
            reg.tables.values().map(|h| h.def.clone()).filter(|d| d.name != wanted.name).collect();
        defs.push(wanted);
        let new = Arc::new(Registry::build(db, defs)?);
        *self.inner.registry.write().unwrap_or_else(|p| p.into_inner()) = new.clone();
        Ok(new)
    }
}

/// Recomputes one index tree from its table.
pub(crate) fn rebuild_index(db: &Db, table: &Tree, def: &StoredTable, index: &str) -> Result<(), StoreError> {
    let pos = def.indexes.iter().position(|i| i.name == index).expect("index of this table");
    let tree = db.open_tree(index_tree(&def.name, index))?;
    tree.clear()?;
    // Entries are gathered first and written after: the table is not held while the index is written.
    let mut entries = Vec::new();
    table.visit_all(|k, v| {
        let key = String::from_utf8_lossy(k);
        let mut keys = index_keys(def, &key, open_envelope(v, &def.name, &key)?)?;
        entries.extend(keys.swap_remove(pos));
        Ok(ControlFlow::Continue(()))
    })?;
    for ik in entries {
        tree.insert(&ik, &[][..])?;
    }
    Ok(())
}

pub(crate) fn recorded_tables(db: &Db) -> Result<Vec<StoredTable>, StoreError> {
    let mut defs = Vec::new();
    db.open_tree(META_TREE)?.visit_prefix(META_TABLE_PREFIX.as_bytes(), false, |k, v| {
        let def: StoredTable = decode(v, "meta", &String::from_utf8_lossy(k))?;
        def.validate()?;
        defs.push(def);
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(defs)
}

fn decode_version(bytes: &[u8]) -> Option<u32> {
    bytes.try_into().ok().map(u32::from_be_bytes)
}

/// Whether any tree besides meta holds anything.
fn holds_data(db: &sled::Db) -> Result<bool, StoreError> {
    for name in db.tree_names() {
        if name.as_ref() == META_TREE.as_bytes() || name.as_ref() == b"__sled__default" {
            continue;
        }
        if !db.open_tree(&name)?.is_empty() {
            return Ok(true);
        }
    }
    Ok(!db.is_empty())
}

/// Runs the migrations from `found` up to `schema.version`, then rebuilds every index.
pub(crate) fn migrate(db: &Db, path: &Path, found: u32, schema: &Schema) -> Result<(), StoreError> {
    let meta = db.open_tree(META_TREE)?;
    let tables = recorded_tables(db)?;
    let mut version = found;
    while version < schema.version {
        let Some(m) = schema.migrations.iter().find(|m| m.from == version) else {
            return Err(StoreError::NoMigration { path: path.to_path_buf(), found: version, target: schema.version });
        };
        (m.run)(&Migrator { db, tables: tables.clone(), from: version })?;
        version += 1;
        // Indexes first, then the version: a crash in between reruns an idempotent migration.
        for t in &tables {
            let table = db.open_tree(table_tree(&t.name))?;
            for ix in &t.indexes {
                rebuild_index(db, &table, t, &ix.name)?;
            }
        }
        meta.insert(META_SCHEMA_VERSION.as_bytes(), &version.to_be_bytes()[..])?;
        db.flush()?;
    }
    Ok(())
}

/// Meta key: how many flushes the store has made durable (sled).
const META_FLUSHES: &str = "flushes";

/// The file, beside sled's, that keeps the count of durable flushes outside sled's log.
const WATERMARK_FILE: &str = "flushed";

/// The count of flushes known durable, kept outside sled's log: 4 magic bytes, the count (u64,
/// little-endian) and a CRC-32 of both, written in place after every flush. It is written after
/// sled's fsync and not synced itself, so after a power loss it may be behind, never ahead: a
/// count in sled's log below it means sled lost durable writes.
pub(crate) struct Watermark(Mutex<std::fs::File>);

impl Watermark {
    fn open(dir: &Path) -> std::io::Result<Watermark> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(WATERMARK_FILE))?;
        Ok(Watermark(Mutex::new(f)))
    }

    /// The count recorded, if the file holds a readable one.
    fn read(&self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 16];
        lock(&self.0).read_exact_at(&mut buf, 0).ok()?;
        let (body, sum) = buf.split_at(12);
        (&body[..4] == b"SPWF" && crc32fast::hash(body).to_le_bytes() == sum)
            .then(|| u64::from_le_bytes(body[4..12].try_into().unwrap_or_default()))
    }

    fn record(&self, n: u64) {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 16];
        buf[..4].copy_from_slice(b"SPWF");
        buf[4..12].copy_from_slice(&n.to_le_bytes());
        let sum = crc32fast::hash(&buf[..12]);
        buf[12..].copy_from_slice(&sum.to_le_bytes());
        // In place and unsynced (see above); a failure only weakens the check.
        let _ = lock(&self.0).write_all_at(&buf, 0);
    }
}

/// Space a sled store keeps free on its disk: below it writes are refused (sled 0.34 fails for good
/// once a write runs out of space, until the process restarts).
pub const DISK_RESERVE_BYTES: u64 = 16 * 1024 * 1024;

/// Free space on the disk, looked up at most every 100 ms.
#[derive(Default)]
struct DiskSpace(Mutex<Option<(std::time::Instant, u64)>>);

impl DiskSpace {
    fn check(&self, dir: &Path) -> Result<(), StoreError> {
        let mut last = lock(&self.0);
        let free = match *last {
            Some((at, free)) if at.elapsed() < std::time::Duration::from_millis(100) => free,
            _ => {
                let Some(free) = free_bytes(dir) else { return Ok(()) };
                *last = Some((std::time::Instant::now(), free));
                free
            }
        };
        if free < DISK_RESERVE_BYTES {
            return Err(StoreError::DiskFull {
                path: dir.to_path_buf(),
                free_mb: free / (1024 * 1024),
                need_mb: DISK_RESERVE_BYTES / (1024 * 1024),
            });
        }
        Ok(())
    }
}

/// Bytes an unprivileged writer may still use on the file system holding `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a valid NUL-terminated string and `st` a writable statvfs.
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut st) };
    (rc == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
}

/// Written next to sled's files once a store is initialised: from then on, a database that reads as
/// empty is corrupt, not new.
const MARKER_FILE: &str = "spillway-store";

fn write_marker(marker: &Path) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = marker.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(b"spillway-state 1\n")?;
    f.sync_all()?;
    std::fs::rename(&tmp, marker)?;
    std::fs::File::open(marker.parent().unwrap_or(Path::new(".")))?.sync_all()
}

/// Creates a missing directory with mode 0700; refuses a path that is not a directory, or a
/// non-empty directory without a sled database in it.
fn prepare_dir(path: &Path) -> Result<(), StoreError> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_dir() => {
            Err(StoreError::Open { path: path.to_path_buf(), reason: "it exists and is not a directory".into() })
        }
        Ok(_) => {
            let mut names = Vec::new();
            let entries = std::fs::read_dir(path)
                .map_err(|e| StoreError::Open { path: path.to_path_buf(), reason: format!("cannot list it: {e}") })?;
            for entry in entries {
                let entry = entry.map_err(|e| StoreError::Open {
                    path: path.to_path_buf(),
                    reason: format!("cannot list it: {e}"),
                })?;
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
            if !names.is_empty() && !names.iter().any(|n| n == "conf" || n == "db" || n == MARKER_FILE) {
                names.sort();
                names.truncate(5);
                return Err(StoreError::Open {
                    path: path.to_path_buf(),
                    reason: format!("it is not empty and holds no spillway database (found {})", names.join(", ")),
                });
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
            .map_err(|e| StoreError::Open { path: path.to_path_buf(), reason: format!("cannot create it: {e}") }),
        Err(e) => Err(StoreError::Open { path: path.to_path_buf(), reason: e.to_string() }),
    }
}

/// Opens sled, turning its failures (and panics, which some corruptions cause) into errors that name
/// the path; never deletes or recreates anything.
fn open_sled(path: &Path) -> Result<sled::Db, StoreError> {
    // sled releases its directory lock from background threads a moment after the last handle is
    // dropped, so reopening in the same process right after a close can briefly see the lock held:
    // retry for a short while before calling the store in use.
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        match open_sled_once(path) {
            Err(StoreError::InUse { .. }) if std::time::Instant::now() < give_up => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// sled's page cache, in bytes. sled's default (1 GiB) lets a server that reads its whole job history
/// (listing, exports) grow its memory with the data for ever; every read of the store is on the
/// control loop's or an API request's path, and a bounded cache keeps the server's memory flat (the
/// sustained load run in RELIABILITY.md measures it).
pub const CACHE_BYTES: u64 = 64 * 1024 * 1024;

fn open_sled_once(path: &Path) -> Result<sled::Db, StoreError> {
    let config = sled::Config::new().path(path).cache_capacity(CACHE_BYTES);
    let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| config.open()));
    match opened {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(e)) => {
            let reason = e.to_string();
            if reason.contains("could not acquire lock") {
                Err(StoreError::InUse { path: path.to_path_buf() })
            } else {
                Err(StoreError::Open { path: path.to_path_buf(), reason })
            }
        }
        Err(panic) => {
            let reason = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "sled panicked".into());
            Err(StoreError::Open { path: path.to_path_buf(), reason: format!("sled failed: {reason}") })
        }
    }
}

/// Records read shared with the decoded-record cache, as owned copies (a record no one else holds is
/// moved out, not copied).
fn unshared<R: Clone>(records: Vec<Arc<R>>) -> Vec<R> {
    records.into_iter().map(Arc::unwrap_or_clone).collect()
}
