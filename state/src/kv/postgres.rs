//! The PostgreSQL backend: every tree in one table, `spillway_kv (tree, key, value, ver)`, shared by
//! several servers.
//!
//! The store above is synchronous; this backend drives `tokio-postgres` connections on a small
//! runtime of its own and waits for each answer on the caller's thread (as a sled call waits for
//! its disk), so it works the same from a blocking thread and from an async task.
//!
//! **Transactions** are optimistic and serializable. The closure reads rows as they are committed
//! (remembering each row's version, the id of the transaction that wrote it, or its absence) and
//! buffers its writes. Committing is one call of `spillway_commit`, a function installed with the
//! tables, in one PostgreSQL transaction: it takes an advisory lock per key read (shared) or written
//! (exclusive), in one global order so two commits never deadlock; checks that every row read still
//! has the version read (else it raises `40001` and the closure runs again); checks the fence (the
//! leader lease, see `crate::lease`) when one is given; and applies the writes. A writer of a key
//! waits for every commit that read it, so a validated read stays true until its reader commits:
//! the result is the same as running the transactions one at a time (what sled and the memory
//! backend do), and a conflicting transaction is retried, never half-applied. Keys of index trees
//! and of the event log are not locked: index entries change only with their record's key, which
//! is, and event numbers are never written twice. Transactions without a fence that commit at the
//! same time are committed together, by one call of `spillway_commit_many` in one PostgreSQL
//! transaction (`pg_group.rs` says how that keeps the same result).
//!
//! **Round trips.** A transaction's first read also sends `BEGIN`, takes the transaction id and an
//! event number, pipelined on one connection: most transactions that read go on to log an event,
//! and a submission then costs two round trips (that read, and the commit with its `COMMIT`).
//!
//! **Event numbers** come from a sequence, so transactions that log events commit side by side
//! (taking the numbers from a counter row, as sled does, would make every such commit wait for the
//! previous one's disk flush: about 270 a second on this machine). Numbers are then handed out in
//! one order and committed in another, and a reader that has seen event 7 must not move past 6 while
//! 6 may still commit. A transaction takes its number only after it has a transaction id, so every
//! number handed out before a moment belongs to a transaction whose id is below an id taken after
//! that moment. Readers therefore sample the sequence (`M`), then take a fresh id (`x`); once no
//! transaction of this database older than `x` is running (`XMIN`), every event numbered up to `M` that
//! will ever exist is visible, and readers are given events up to there ([`PgDb::readable_seq`]).
//! Numbers are unique and strictly increasing in the order readers see them; a retried or aborted
//! transaction leaves a gap.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use sled::IVec;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Statement};

use super::pg_group::{BatchFailure, Group, Member, Outcome};
use super::{FenceToken, TreeSet, TxError, TxFailed, TxStop, TxView};
use crate::StoreError;

/// Rows read per query by scans.
pub(crate) const PAGE: usize = 512;

/// The version of the tables and function this build installs. A database with another version is
/// refused with both numbers named.
pub(crate) const LAYOUT_VERSION: i32 = 1;

/// Advisory lock key every commit takes (shared; exclusive for very large transactions), and the
/// one that serialises installing the tables.
const GLOBAL_LOCK: i64 = 0x5350_494c_4c57_4159;
const INSTALL_LOCK: i64 = 0x5350_494c_4c57_4160;

/// A commit locking more keys than this takes the global lock exclusively instead (PostgreSQL's
/// lock table is shared by all sessions and finite).
const MAX_KEY_LOCKS: usize = 512;

/// How often a conflicting transaction is run again before the store gives up.
const MAX_RETRIES: u32 = 200;

/// The SQLSTATE `spillway_commit` raises when the fence does not hold.
const FENCED: &str = "SPW01";

const DDL: &str = r#"
CREATE TABLE spillway_layout (version integer NOT NULL);
CREATE TABLE spillway_kv (
    tree text COLLATE "C" NOT NULL,
    key bytea NOT NULL,
    value bytea NOT NULL,
    ver bigint NOT NULL,
    PRIMARY KEY (tree, key)
);
CREATE SEQUENCE spillway_event_seq;
CREATE TABLE spillway_lease (
    name text PRIMARY KEY,
    holder text NOT NULL,
    epoch bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    renewed_at timestamptz NOT NULL
);
"#;

/// The commit function: one statement that checks the fence, validates the reads and writes.
/// Installed with the tables, and replaced on every start (under the install lock), so a fix to it
/// reaches a database made by an older build of the same layout.
const COMMIT_FN: &str = r#"
CREATE OR REPLACE FUNCTION spillway_commit(
    lock_ids bigint[], lock_excl boolean[],
    r_tree text[], r_key bytea[], r_ver bigint[],
    p_tree text[], p_key bytea[], p_val bytea[],
    d_tree text[], d_key bytea[],
    fence_holder text, fence_epoch bigint
) RETURNS void LANGUAGE plpgsql AS $f$
DECLARE
    stale integer;
    me bigint;
    lease_end timestamptz;
BEGIN
    PERFORM CASE WHEN x THEN pg_advisory_xact_lock(h) ELSE pg_advisory_xact_lock_shared(h) END
       FROM (SELECT h, x FROM unnest(lock_ids, lock_excl) AS l(h, x) ORDER BY h) AS s;
    IF fence_epoch IS NOT NULL THEN
        SELECT expires_at INTO lease_end FROM spillway_lease
         WHERE name = 'leader' AND holder = fence_holder AND epoch = fence_epoch
           AND expires_at > clock_timestamp()
           FOR SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'the leader lease at epoch % is no longer held by %', fence_epoch, fence_holder
                USING ERRCODE = 'SPW01';
        END IF;
        -- The share lock on the lease row stops a takeover until this transaction ends. A leader
        -- frozen before its COMMIT arrives (SIGSTOP, a stalled VM) would hold it, and the lease,
        -- for as long as its connection lives: the server ends such a session once the lease has
        -- run out (at least a second), rolling the transaction back and freeing the row.
        PERFORM set_config('idle_in_transaction_session_timeout',
            greatest(1000, ceil(extract(epoch FROM lease_end - clock_timestamp()) * 1000))::bigint::text,
            true);
    END IF;
    SELECT count(*) INTO stale
      FROM unnest(r_tree, r_key, r_ver) AS r(t, k, v)
      LEFT JOIN spillway_kv kv ON kv.tree = r.t AND kv.key = r.k
     WHERE kv.ver IS DISTINCT FROM r.v;
    IF stale > 0 THEN
        RAISE EXCEPTION 'a row read by this transaction changed' USING ERRCODE = '40001';
    END IF;
    me := pg_current_xact_id()::text::bigint;
    DELETE FROM spillway_kv kv USING unnest(d_tree, d_key) AS d(t, k) WHERE kv.tree = d.t AND kv.key = d.k;
    INSERT INTO spillway_kv (tree, key, value, ver)
         SELECT t, k, v, me FROM unnest(p_tree, p_key, p_val) AS p(t, k, v)
    ON CONFLICT (tree, key) DO UPDATE SET value = EXCLUDED.value, ver = EXCLUDED.ver;
END
$f$;
"#;

/// The batch commit function (see `pg_group.rs`): the same locks, reads and writes as
/// `spillway_commit` for several transactions (each row tagged with its member's index), without a
/// fence; returns the members whose reads were stale, whose writes it leaves out.
const COMMIT_MANY_FN: &str = r#"
CREATE OR REPLACE FUNCTION spillway_commit_many(
    lock_ids bigint[], lock_excl boolean[],
    r_member integer[], r_tree text[], r_key bytea[], r_ver bigint[],
    p_member integer[], p_tree text[], p_key bytea[], p_val bytea[],
    d_member integer[], d_tree text[], d_key bytea[]
) RETURNS integer[] LANGUAGE plpgsql AS $f$
DECLARE
    stale integer[];
    me bigint;
BEGIN
    PERFORM CASE WHEN x THEN pg_advisory_xact_lock(h) ELSE pg_advisory_xact_lock_shared(h) END
       FROM (SELECT h, x FROM unnest(lock_ids, lock_excl) AS l(h, x) ORDER BY h) AS s;
    SELECT coalesce(array_agg(DISTINCT r.m), '{}') INTO stale
      FROM unnest(r_member, r_tree, r_key, r_ver) AS r(m, t, k, v)
      LEFT JOIN spillway_kv kv ON kv.tree = r.t AND kv.key = r.k
     WHERE kv.ver IS DISTINCT FROM r.v;
    me := pg_current_xact_id()::text::bigint;
    DELETE FROM spillway_kv kv USING unnest(d_member, d_tree, d_key) AS d(m, t, k)
     WHERE kv.tree = d.t AND kv.key = d.k AND NOT d.m = ANY(stale);
    INSERT INTO spillway_kv (tree, key, value, ver)
         SELECT t, k, v, me FROM unnest(p_member, p_tree, p_key, p_val) AS p(m, t, k, v)
          WHERE NOT m = ANY(stale)
    ON CONFLICT (tree, key) DO UPDATE SET value = EXCLUDED.value, ver = EXCLUDED.ver;
    RETURN stale;
END
$f$;
"#;

/// Where and how to connect.
#[derive(Clone)]
pub(crate) struct PgConfig {
    pub config: tokio_postgres::Config,
    pub tls: super::pg_tls::TlsSetup,
    /// Largest number of connections this process opens.
    pub max_connections: usize,
    /// Longest wait for one answer (or a free connection) before the operation fails.
    pub timeout: Duration,
    /// Gives the password for each new connection (Azure AD access tokens expire).
    pub password: Option<Arc<dyn Fn() -> Result<String, String> + Send + Sync>>,
    /// `user@host:port/dbname`, for messages (never the password).
    pub display: String,
}

/// Prepared statements of one connection.
struct Statements {
    get: Statement,
    upsert: Statement,
    delete: Statement,
    clear: Statement,
    count: Statement,
    count_to: Statement,
    fwd: Statement,
    fwd_to: Statement,
    rev: Statement,
    rev_to: Statement,
    ix_fwd: Statement,
    ix_fwd_to: Statement,
    ix_rev: Statement,
    ix_rev_to: Statement,
    get_many: Statement,
    commit: Statement,
    /// `None` where the database lacks `spillway_commit_many` (installed by an older build, and
    /// this role may not add it): every transaction then commits alone.
    commit_many: Option<Statement>,
    validate: Statement,
    xid: Statement,
    nextval: Statement,
    seq_state: Statement,
    xmin: Statement,
    setval: Statement,
}

const SELECT_PAGE: &str = "SELECT key, value FROM spillway_kv WHERE tree = $1 AND key >= $2";
const SELECT_INDEX_PAGE: &str = "SELECT i.key, t.ver FROM spillway_kv i LEFT JOIN spillway_kv t \
     ON t.tree = $3 AND t.key = substring(i.key FROM $4::integer) WHERE i.tree = $1 AND i.key >= $2";

impl Statements {
    async fn prepare(c: &Client) -> Result<Statements, tokio_postgres::Error> {
        Ok(Statements {
            get: c.prepare("SELECT value, ver FROM spillway_kv WHERE tree = $1 AND key = $2").await?,
            upsert: c
                .prepare(
                    "WITH old AS (SELECT value FROM spillway_kv WHERE tree = $1 AND key = $2), \
                     up AS (INSERT INTO spillway_kv (tree, key, value, ver) \
                            VALUES ($1, $2, $3, pg_current_xact_id()::text::bigint) \
                            ON CONFLICT (tree, key) DO UPDATE SET value = EXCLUDED.value, ver = EXCLUDED.ver) \
                     SELECT value FROM old",
                )
                .await?,
            delete: c.prepare("DELETE FROM spillway_kv WHERE tree = $1 AND key = $2 RETURNING value").await?,
            clear: c.prepare("DELETE FROM spillway_kv WHERE tree = $1").await?,
            count: c.prepare("SELECT count(*) FROM spillway_kv WHERE tree = $1 AND key >= $2").await?,
            count_to: c.prepare("SELECT count(*) FROM spillway_kv WHERE tree = $1 AND key >= $2 AND key < $3").await?,
            fwd: c.prepare(&format!("{SELECT_PAGE} ORDER BY key LIMIT $3")).await?,
            fwd_to: c.prepare(&format!("{SELECT_PAGE} AND key < $4 ORDER BY key LIMIT $3")).await?,
            rev: c.prepare(&format!("{SELECT_PAGE} ORDER BY key DESC LIMIT $3")).await?,
            rev_to: c.prepare(&format!("{SELECT_PAGE} AND key < $4 ORDER BY key DESC LIMIT $3")).await?,
            ix_fwd: c.prepare(&format!("{SELECT_INDEX_PAGE} ORDER BY i.key LIMIT $5")).await?,
            ix_fwd_to: c.prepare(&format!("{SELECT_INDEX_PAGE} AND i.key < $6 ORDER BY i.key LIMIT $5")).await?,
            ix_rev: c.prepare(&format!("{SELECT_INDEX_PAGE} ORDER BY i.key DESC LIMIT $5")).await?,
            ix_rev_to: c.prepare(&format!("{SELECT_INDEX_PAGE} AND i.key < $6 ORDER BY i.key DESC LIMIT $5")).await?,
            get_many: c
                .prepare("SELECT key, value, ver FROM spillway_kv WHERE tree = $1 AND key = ANY($2::bytea[])")
                .await?,
            commit: c.prepare("SELECT spillway_commit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)").await?,
            commit_many: c
                .prepare("SELECT spillway_commit_many($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)")
                .await
                .ok(),
            validate: c
                .prepare(
                    "SELECT count(*) FROM unnest($1::text[], $2::bytea[], $3::bigint[]) AS r(t, k, v) \
                     LEFT JOIN spillway_kv kv ON kv.tree = r.t AND kv.key = r.k WHERE kv.ver IS DISTINCT FROM r.v",
                )
                .await?,
            xid: c.prepare("SELECT pg_current_xact_id()::text::bigint").await?,
            nextval: c.prepare("SELECT nextval('spillway_event_seq')").await?,
            seq_state: c.prepare("SELECT last_value, is_called FROM spillway_event_seq").await?,
            xmin: c.prepare(XMIN).await?,
            setval: c.prepare("SELECT setval('spillway_event_seq', $1, true)").await?,
        })
    }
}

/// One open connection and its statements.
pub(crate) struct Conn {
    client: Client,
    st: Statements,
}

struct PoolState {
    idle: Vec<Conn>,
    open: usize,
}

/// The runtime that drives the connections; shut down in the background when dropped, which is
/// allowed from inside another runtime (a plain drop there would panic).
struct Runtime(Option<tokio::runtime::Runtime>);

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// Connections, the runtime that drives them, and the readers' view of the event sequence.
pub(crate) struct Shared {
    config: PgConfig,
    rt: Runtime,
    pool: Mutex<PoolState>,
    freed: Condvar,
    horizon: Mutex<Horizon>,
    /// Records read through indexes, by version (see [`Versioned`]).
    versioned: Mutex<Versioned>,
    /// Transactions waiting to commit together (see `pg_group.rs`).
    group: Group,
}

/// Stored bytes of versioned records held at most; past it the map starts again empty.
const VERSIONED_MAX_BYTES: usize = 32 * 1024 * 1024;

/// Records read through an index, with the version they were read at. The control loop reads every
/// open job each round through the state index, and most have not changed since the last round:
/// an index page now reads only each record's version (the id of the transaction that wrote it),
/// and the values of those whose version this map does not hold. A version names one write, so an
/// entry is right for as long as it matches, whoever changed the row since, with no invalidation;
/// PostgreSQL no longer decompresses and sends every open job's record every round.
#[derive(Default)]
struct Versioned {
    bytes: usize,
    /// (tree, key) → (version, value).
    rows: HashMap<(Arc<str>, Vec<u8>), (i64, IVec)>,
}

/// The oldest transaction still running that could hold an event number of this database: like
/// `pg_snapshot_xmin`, but leaving out the transactions of backends connected to other databases
/// of the cluster. `pg_snapshot_xmin` is cluster-wide, so any long transaction elsewhere on a
/// shared server (another application's, or another test's database held open for seconds) held
/// every reader's horizon back, and readers were given no new events until it ended. Transaction
/// ids of backends the role may not see stay in (`pg_stat_activity` shows them as null): the
/// horizon is then as conservative as before, never ahead of a transaction of ours. The snapshot's
/// ids are 64-bit and `pg_stat_activity`'s 32-bit; two running transactions never share the low 32
/// bits.
const XMIN: &str = "WITH snap AS (SELECT pg_current_snapshot() AS s), \
     elsewhere AS (SELECT backend_xid::text::bigint AS x FROM pg_stat_activity \
       WHERE backend_xid IS NOT NULL \
       AND datid IS DISTINCT FROM (SELECT oid FROM pg_database WHERE datname = current_database())) \
     SELECT coalesce( \
       (SELECT min(i::text::bigint) FROM snap, pg_snapshot_xip(snap.s) AS i \
        WHERE i::text::bigint % 4294967296 NOT IN (SELECT x FROM elsewhere)), \
       (SELECT pg_snapshot_xmax(s)::text::bigint FROM snap))";

/// The readers' event horizon (see the module doc).
#[derive(Default)]
struct Horizon {
    readable: u64,
    /// (transaction id taken after sampling, sequence value sampled), oldest first.
    samples: VecDeque<(i64, u64)>,
}

/// The database: shared connections, or one connection pinned in a snapshot.
pub(crate) struct PgDb {
    shared: Arc<Shared>,
    /// A connection inside `REPEATABLE READ` (see [`PgDb::snapshot`]): every read sees one state.
    pinned: Option<Mutex<Conn>>,
}

/// A tree: its name in the `tree` column.
#[derive(Clone)]
pub(crate) struct PgTree {
    db: Arc<PgDb>,
    name: Arc<str>,
}

/// Runs a future to completion on this thread, for at most `timeout`.
fn block_on<F: Future>(f: F, timeout: Duration) -> Option<F::Output> {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    let deadline = Instant::now() + timeout;
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return Some(v);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        std::thread::park_timeout(deadline - now);
    }
}

/// What a PostgreSQL error means to the store.
enum PgFailure {
    /// A serialization failure or deadlock: run the transaction again.
    Conflict,
    /// The fence did not hold.
    Fenced(String),
    /// Anything else; `broken` when the connection cannot be used again.
    Other { message: String, broken: bool },
}

fn classify(e: &tokio_postgres::Error) -> PgFailure {
    match e.code() {
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED => {
            PgFailure::Conflict
        }
        Some(c) if c.code() == FENCED => {
            PgFailure::Fenced(e.as_db_error().map(|d| d.message().to_string()).unwrap_or_else(|| e.to_string()))
        }
        Some(_) => PgFailure::Other { message: describe(e), broken: e.is_closed() },
        None => PgFailure::Other { message: describe(e), broken: true },
    }
}

/// The error's own words, with the server's message when there is one.
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{}: {}", d.severity(), d.message()),
        None => match std::error::Error::source(e) {
            Some(s) => format!("{e}: {s}"),
            None => e.to_string(),
        },
    }
}

impl Shared {
    fn unavailable(&self, reason: impl std::fmt::Display) -> StoreError {
        StoreError::Unavailable { location: self.config.display.clone(), reason: reason.to_string() }
    }

    fn wait<F: Future>(&self, f: F) -> Result<F::Output, StoreError> {
        block_on(f, self.config.timeout)
            .ok_or_else(|| self.unavailable(format!("no answer within {} s", self.config.timeout.as_secs())))
    }

    fn lock_pool(&self) -> MutexGuard<'_, PoolState> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens a connection and prepares its statements.
    fn connect(&self) -> Result<Conn, StoreError> {
        let mut config = self.config.config.clone();
        if let Some(password) = &self.config.password {
            config.password(password().map_err(|e| self.unavailable(format!("cannot get a password: {e}")))?);
        }
        let tls = self.config.tls.clone();
        let rt = self.rt.0.as_ref().expect("runtime runs while the database is open");
        let connecting = rt.spawn(async move { config.connect(tls).await });
        let (client, connection) = self
            .wait(connecting)?
            .map_err(|e| self.unavailable(format!("join: {e}")))?
            .map_err(|e| self.unavailable(describe(&e)))?;
        rt.spawn(async move {
            if let Err(e) = connection.await {
                tracing_debug(&e);
            }
        });
        let st = self.wait(Statements::prepare(&client))?.map_err(|e| self.unavailable(describe(&e)))?;
        Ok(Conn { client, st })
    }

    /// A connection for this thread's exclusive use, opened if none is idle and the limit allows.
    fn checkout(self: &Arc<Self>) -> Result<ConnGuard, StoreError> {
        let deadline = Instant::now() + self.config.timeout;
        let mut pool = self.lock_pool();
        loop {
            if let Some(conn) = pool.idle.pop() {
                if conn.client.is_closed() {
                    pool.open -= 1;
                    continue;
                }
                return Ok(ConnGuard { shared: self.clone(), conn: Some(conn), broken: false });
            }
            if pool.open < self.config.max_connections {
                pool.open += 1;
                drop(pool);
                return match self.connect() {
                    Ok(conn) => Ok(ConnGuard { shared: self.clone(), conn: Some(conn), broken: false }),
                    Err(e) => {
                        self.lock_pool().open -= 1;
                        self.freed.notify_one();
                        Err(e)
                    }
                };
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(self.unavailable(format!(
                    "all {} connections stayed busy for {} s",
                    self.config.max_connections,
                    self.config.timeout.as_secs()
                )));
            }
            pool = self.freed.wait_timeout(pool, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}

fn tracing_debug(e: &tokio_postgres::Error) {
    // The store does not log on its own (the server does); a connection that ends is seen by the
    // next request on it, which fails with the reason.
    let _ = e;
}

/// A checked-out connection; back to the pool on drop unless broken.
pub(crate) struct ConnGuard {
    shared: Arc<Shared>,
    conn: Option<Conn>,
    broken: bool,
}

impl ConnGuard {
    fn conn(&self) -> &Conn {
        self.conn.as_ref().expect("present until dropped")
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        let mut pool = self.shared.lock_pool();
        if self.broken || conn.client.is_closed() {
            pool.open -= 1;
        } else {
            pool.idle.push(conn);
        }
        drop(pool);
        self.shared.freed.notify_one();
    }
}

/// Either a pooled connection or the snapshot's pinned one.
enum Use<'a> {
    Pooled(Box<ConnGuard>),
    Pinned(MutexGuard<'a, Conn>),
}

impl Use<'_> {
    fn conn(&self) -> &Conn {
        match self {
            Use::Pooled(g) => g.conn(),
            Use::Pinned(c) => c,
        }
    }

    fn mark_broken(&mut self) {
        if let Use::Pooled(g) = self {
            g.broken = true;
        }
    }
}

impl PgDb {
    /// Connects, installing the tables and function on an empty database (one server at a time).
    pub fn open(config: PgConfig) -> Result<PgDb, StoreError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("spillway-postgres")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Unavailable { location: config.display.clone(), reason: e.to_string() })?;
        let shared = Arc::new(Shared {
            config,
            rt: Runtime(Some(rt)),
            pool: Mutex::new(PoolState { idle: Vec::new(), open: 0 }),
            freed: Condvar::new(),
            horizon: Mutex::new(Horizon::default()),
            versioned: Mutex::new(Versioned::default()),
            group: Group::default(),
        });
        let db = PgDb { shared, pinned: None };
        db.install()?;
        Ok(db)
    }

    fn install(&self) -> Result<(), StoreError> {
        let s = &self.shared;
        // Statements are prepared per connection and need the tables: install on a bare
        // connection first.
        let mut config = s.config.config.clone();
        if let Some(password) = &s.config.password {
            config.password(password().map_err(|e| s.unavailable(format!("cannot get a password: {e}")))?);
        }
        let tls = s.config.tls.clone();
        let rt = s.rt.0.as_ref().expect("runtime runs while the database is open");
        let (client, connection) = s
            .wait(rt.spawn(async move { config.connect(tls).await }))?
            .map_err(|e| s.unavailable(format!("join: {e}")))?
            .map_err(|e| s.unavailable(describe(&e)))?;
        rt.spawn(async move {
            let _ = connection.await;
        });
        let err = |e: tokio_postgres::Error| s.unavailable(describe(&e));
        let found: Option<i32> = s
            .wait(async {
                client.execute("SELECT pg_advisory_lock($1)", &[&INSTALL_LOCK]).await?;
                let exists: bool =
                    client.query_one("SELECT to_regclass('spillway_layout') IS NOT NULL", &[]).await?.get(0);
                if !exists {
                    client
                        .batch_execute(&format!(
                            "BEGIN; {DDL} {COMMIT_FN} {COMMIT_MANY_FN} INSERT INTO spillway_layout VALUES \
                             ({LAYOUT_VERSION}); COMMIT;"
                        ))
                        .await?;
                    client.execute("SELECT pg_advisory_unlock($1)", &[&INSTALL_LOCK]).await?;
                    return Ok::<_, tokio_postgres::Error>(None);
                }
                let v: Option<i32> =
                    client.query_opt("SELECT version FROM spillway_layout", &[]).await?.map(|r| r.get(0));
                if v == Some(LAYOUT_VERSION) {
                    for (name, function) in [("spillway_commit", COMMIT_FN), ("spillway_commit_many", COMMIT_MANY_FN)] {
                        let body = function.split("$f$").nth(1).unwrap_or_default();
                        let installed: Option<String> = client
                            .query_opt("SELECT prosrc FROM pg_proc WHERE proname = $1", &[&name])
                            .await?
                            .map(|r| r.get(0));
                        // Only the function's owner may replace it; a role that cannot keeps the
                        // older body (or none, for the batch function: transactions then commit
                        // alone), which commits correctly and lacks only what changed since.
                        if installed.as_deref() != Some(body) {
                            let _ = client.batch_execute(function).await;
                        }
                    }
                }
                client.execute("SELECT pg_advisory_unlock($1)", &[&INSTALL_LOCK]).await?;
                Ok(v)
            })?
            .map_err(err)?;
        match found {
            None => Ok(()),
            Some(v) if v == LAYOUT_VERSION => Ok(()),
            Some(v) if v > LAYOUT_VERSION => Err(StoreError::Open {
                path: s.config.display.clone().into(),
                reason: format!(
                    "its tables have layout version {v}, written by a newer spillway; this one knows version \
                     {LAYOUT_VERSION}: upgrade spillway"
                ),
            }),
            Some(v) => Err(StoreError::Open {
                path: s.config.display.clone().into(),
                reason: format!(
                    "its tables have layout version {v}, and this spillway knows only version {LAYOUT_VERSION} \
                     with no upgrade from {v}: export the store with the spillway that wrote it and import it here"
                ),
            }),
        }
    }

    /// Where it is, for messages.
    pub fn display(&self) -> &str {
        &self.shared.config.display
    }

    fn use_conn(&self) -> Result<Use<'_>, StoreError> {
        match &self.pinned {
            Some(c) => Ok(Use::Pinned(c.lock().unwrap_or_else(|p| p.into_inner()))),
            None => Ok(Use::Pooled(Box::new(self.shared.checkout()?))),
        }
    }

    /// Turns the outcome of a request on `u` into the store's terms, marking a pooled connection
    /// broken when it cannot be used again.
    fn settle<T>(
        &self,
        u: &mut Use<'_>,
        r: Result<Result<T, tokio_postgres::Error>, StoreError>,
    ) -> Result<T, StoreError> {
        match r {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                let failure = classify(&e);
                if let PgFailure::Other { broken: true, .. } = failure {
                    u.mark_broken();
                }
                Err(match failure {
                    PgFailure::Other { message, .. } => self.shared.unavailable(message),
                    PgFailure::Conflict => self.shared.unavailable("serialization failure outside a transaction"),
                    PgFailure::Fenced(m) => StoreError::Fenced(m),
                })
            }
            Err(e) => {
                u.mark_broken();
                Err(e)
            }
        }
    }

    /// The tree named `name`.
    pub fn tree(self: &Arc<Self>, name: &[u8]) -> Result<PgTree, StoreError> {
        let name = std::str::from_utf8(name)
            .map_err(|_| StoreError::Definition(format!("tree name {name:?} is not UTF-8")))?;
        Ok(PgTree { db: self.clone(), name: name.into() })
    }

    /// A view that sees one consistent state: a connection of its own in a read-only
    /// `REPEATABLE READ` transaction.
    pub fn snapshot(&self) -> Result<PgDb, StoreError> {
        let mut g = self.shared.checkout()?;
        let begun = self.shared.wait(g.conn().client.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"));
        match begun {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                g.broken = true;
                return Err(self.shared.unavailable(describe(&e)));
            }
            Err(e) => {
                g.broken = true;
                return Err(e);
            }
        }
        // The connection leaves the pool for good: it ends with the snapshot.
        g.broken = true;
        let conn = g.conn.take().expect("checked out");
        drop(g);
        Ok(PgDb { shared: self.shared.clone(), pinned: Some(Mutex::new(conn)) })
    }

    /// The highest event number handed out (0 before the first).
    pub fn allocated_seq(&self) -> Result<u64, StoreError> {
        let mut u = self.use_conn()?;
        let c = u.conn();
        let r = self.shared.wait(c.client.query_one(&c.st.seq_state, &[]));
        let row = self.settle(&mut u, r)?;
        let (last, called): (i64, bool) = (row.get(0), row.get(1));
        Ok(if called { last.max(0) as u64 } else { 0 })
    }

    /// Makes the sequence hand out numbers above `seq`.
    pub fn restore_seq(&self, seq: u64) -> Result<(), StoreError> {
        if seq == 0 || self.allocated_seq()? >= seq {
            return Ok(());
        }
        let n = i64::try_from(seq).map_err(|_| StoreError::Storage(format!("event number {seq} out of range")))?;
        let mut u = self.use_conn()?;
        let c = u.conn();
        let r = self.shared.wait(c.client.query_one(&c.st.setval, &[&n]));
        self.settle(&mut u, r).map(|_| ())
    }

    /// The event horizon: every event numbered up to it that will ever commit is visible now.
    /// Waits up to `wait` for the transactions running when it was called to end, so that a reader
    /// sees the events committed before its call (its own among them).
    pub fn readable_seq(&self, wait: Duration) -> Result<u64, StoreError> {
        // Sample the sequence, take an id after the sample, then see which samples are safe: the
        // three statements run in this order on one connection (pipelined, one round trip).
        let (m, x, xmin) = {
            let mut u = self.use_conn()?;
            let c = u.conn();
            let r = self.shared.wait(async {
                let (state, x, xmin) = futures_join3(
                    c.client.query_one(&c.st.seq_state, &[]),
                    c.client.query_one(&c.st.xid, &[]),
                    c.client.query_one(&c.st.xmin, &[]),
                )
                .await;
                let state = state?;
                let (last, called): (i64, bool) = (state.get(0), state.get(1));
                let m = if called { last.max(0) as u64 } else { 0 };
                Ok((m, x?.get::<_, i64>(0), xmin?.get::<_, i64>(0)))
            });
            self.settle(&mut u, r)?
        };
        let mut readable = self.advance_horizon(Some((x, m)), xmin);
        let deadline = Instant::now() + wait;
        while readable < m && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
            let xmin = {
                let mut u = self.use_conn()?;
                let c = u.conn();
                let r = self.shared.wait(c.client.query_one(&c.st.xmin, &[]));
                self.settle(&mut u, r)?.get::<_, i64>(0)
            };
            readable = self.advance_horizon(None, xmin);
        }
        Ok(readable)
    }

    /// Records a sample (id taken after sampling, sequence value) and moves the horizon over every
    /// sample whose id is below `xmin` (no transaction that old is running).
    fn advance_horizon(&self, sample: Option<(i64, u64)>, xmin: i64) -> u64 {
        let mut h = self.shared.horizon.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((x, m)) = sample
            && m > h.readable
            && h.samples.back().is_none_or(|&(_, last)| m > last)
        {
            h.samples.push_back((x, m));
        }
        while let Some(&(sx, sm)) = h.samples.front() {
            if sx >= xmin {
                break;
            }
            h.readable = h.readable.max(sm);
            h.samples.pop_front();
        }
        // A long queue means a transaction has been running for long; keep the newest samples.
        while h.samples.len() > 1024 {
            h.samples.pop_front();
        }
        h.readable
    }

    /// See [`super::Db::transaction`] and the module doc.
    pub fn transaction<T, E>(
        &self,
        set: &TreeSet,
        fence: Option<&FenceToken>,
        f: impl Fn(&TxView) -> Result<T, TxStop<E>>,
    ) -> Result<T, TxFailed<E>> {
        let names: Vec<&str> = set
            .trees
            .iter()
            .map(|t| match t {
                super::Tree::Postgres(t) => &*t.name,
                _ => unreachable!("a PostgreSQL transaction over another backend's tree"),
            })
            .collect();
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            if attempt > 1 {
                backoff(attempt);
            }
            if attempt > MAX_RETRIES {
                return Err(TxFailed::Storage(StoreError::Storage(format!(
                    "a transaction conflicted with others {MAX_RETRIES} times in a row; giving up"
                ))));
            }
            let view = TxView::Postgres(Box::new(PgTxView {
                db: self,
                names: &names,
                conn: RefCell::new(None),
                in_txn: Cell::new(false),
                spare_seq: Cell::new(None),
                reads: RefCell::new(HashMap::new()),
                writes: RefCell::new(vec![BTreeMap::new(); names.len()]),
            }));
            let out = f(&view);
            let TxView::Postgres(view) = view else { unreachable!() };
            match out {
                Ok(v) => match view.commit(set, fence) {
                    Ok(()) => return Ok(v),
                    Err(TxError::Conflict) => continue,
                    Err(TxError::Storage(e)) => return Err(TxFailed::Storage(e)),
                },
                Err(TxStop::Conflict) => {
                    view.rollback();
                    continue;
                }
                Err(TxStop::Abort(e)) => {
                    // An abort decided on rows that have changed since may not be the transaction's
                    // real answer: run it again on what is there now.
                    match view.still_valid() {
                        Ok(true) => {
                            view.rollback();
                            return Err(TxFailed::Abort(e));
                        }
                        Ok(false) => {
                            view.rollback();
                            continue;
                        }
                        Err(err) => {
                            view.rollback();
                            return Err(TxFailed::Storage(err));
                        }
                    }
                }
            }
        }
    }
}

/// Waits a little, more after each conflict, at random so retried transactions spread out.
fn backoff(attempt: u32) {
    let cap_us = 200u64 << attempt.min(8);
    let nanos = Instant::now().elapsed().as_nanos() as u64 ^ (std::process::id() as u64).rotate_left(17);
    let pseudo = nanos.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(attempt).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    std::thread::sleep(Duration::from_micros(pseudo % cap_us.max(1)));
}

/// Polls four futures together so their requests leave in order on one connection (pipelined):
/// a `tokio-postgres` request is sent at its future's first poll, and answered in the order sent.
async fn futures_join4<A: Future, B: Future, C: Future, D: Future>(
    a: A,
    b: B,
    c: C,
    d: D,
) -> (A::Output, B::Output, C::Output, D::Output) {
    let (mut a, mut b, mut c, mut d) = (Box::pin(a), Box::pin(b), Box::pin(c), Box::pin(d));
    let (mut ra, mut rb, mut rc, mut rd) = (None, None, None, None);
    std::future::poll_fn(|cx| {
        if ra.is_none()
            && let Poll::Ready(v) = a.as_mut().poll(cx)
        {
            ra = Some(v);
        }
        if rb.is_none()
            && let Poll::Ready(v) = b.as_mut().poll(cx)
        {
            rb = Some(v);
        }
        if rc.is_none()
            && let Poll::Ready(v) = c.as_mut().poll(cx)
        {
            rc = Some(v);
        }
        if rd.is_none()
            && let Poll::Ready(v) = d.as_mut().poll(cx)
        {
            rd = Some(v);
        }
        if ra.is_some() && rb.is_some() && rc.is_some() && rd.is_some() { Poll::Ready(()) } else { Poll::Pending }
    })
    .await;
    (ra.unwrap(), rb.unwrap(), rc.unwrap(), rd.unwrap())
}

/// Three futures polled together (pipelined), see [`futures_join4`].
async fn futures_join3<A: Future, B: Future, C: Future>(a: A, b: B, c: C) -> (A::Output, B::Output, C::Output) {
    let (x, y, z, ()) = futures_join4(a, b, c, async {}).await;
    (x, y, z)
}

/// Two futures polled together (pipelined), see [`futures_join4`].
async fn futures_join2<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    let (x, y, ()) = futures_join3(a, b, async {}).await;
    (x, y)
}

/// A 64-bit FNV-1a hash of a tree name and key: the advisory lock of that key. The same in every
/// process and version, so all servers lock the same numbers.
fn lock_id(tree: &str, key: &[u8]) -> i64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in tree.as_bytes().iter().chain(&[0xff]).chain(key) {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    h as i64
}

/// A row as a transaction read it: its value and version (`None`, `None` when absent).
type ReadRow = (Option<IVec>, Option<i64>);

/// A transaction in progress: its connection, what it read (with versions) and what it will write.
pub(crate) struct PgTxView<'a> {
    db: &'a PgDb,
    names: &'a [&'a str],
    conn: RefCell<Option<ConnGuard>>,
    /// Whether `BEGIN` was sent (a transaction that numbers events runs in one).
    in_txn: Cell<bool>,
    /// An event number taken with the transaction's first read, for its first [`Self::next_seq`].
    spare_seq: Cell<Option<i64>>,
    /// (tree, key) → (value, version); `None` version: absent.
    reads: RefCell<HashMap<(usize, Vec<u8>), ReadRow>>,
    writes: RefCell<Vec<BTreeMap<Vec<u8>, Option<IVec>>>>,
}

impl PgTxView<'_> {
    /// This transaction's connection, checked out at first use.
    fn conn(&self) -> Result<std::cell::RefMut<'_, ConnGuard>, TxError> {
        let mut slot = self.conn.borrow_mut();
        if slot.is_none() {
            *slot = Some(self.db.shared.checkout()?);
        }
        Ok(std::cell::RefMut::map(slot, |s| s.as_mut().expect("just set")))
    }

    /// [`PgDb::settle`] for a transaction: a serialization failure asks for a rerun.
    fn settle<T>(
        &self,
        u: &mut ConnGuard,
        r: Result<Result<T, tokio_postgres::Error>, StoreError>,
    ) -> Result<T, TxError> {
        match r {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => match classify(&e) {
                PgFailure::Conflict => Err(TxError::Conflict),
                PgFailure::Fenced(m) => Err(TxError::Storage(StoreError::Fenced(m))),
                PgFailure::Other { message, broken } => {
                    if broken || self.in_txn.get() {
                        u.broken = true;
                    }
                    Err(TxError::Storage(self.db.shared.unavailable(message)))
                }
            },
            Err(e) => {
                u.broken = true;
                Err(TxError::Storage(e))
            }
        }
    }

    pub(super) fn get(&self, tree: usize, key: &[u8]) -> Result<Option<IVec>, TxError> {
        if let Some(w) = self.writes.borrow()[tree].get(key) {
            return Ok(w.clone());
        }
        if let Some((v, _)) = self.reads.borrow().get(&(tree, key.to_vec())) {
            return Ok(v.clone());
        }
        let name = self.names[tree];
        let begin = !self.in_txn.get();
        let row = {
            let mut u = self.conn()?;
            let c = u.conn();
            let r = self.db.shared.wait(async {
                if begin {
                    // Most transactions that read go on to number an event (a submission, a state
                    // change): the first read also opens the transaction and takes its number (the
                    // id first, see the module doc), in the same round trip. A transaction that
                    // numbers nothing leaves a gap in the numbers, as a retried one does.
                    let (b, x, n, row) = futures_join4(
                        c.client.batch_execute("BEGIN"),
                        c.client.query_one(&c.st.xid, &[]),
                        c.client.query_one(&c.st.nextval, &[]),
                        c.client.query_opt(&c.st.get, &[&name, &key]),
                    )
                    .await;
                    b?;
                    x?;
                    let n = n?.get::<_, i64>(0);
                    Ok((row?, Some(n)))
                } else {
                    Ok((c.client.query_opt(&c.st.get, &[&name, &key]).await?, None))
                }
            });
            if begin {
                // Whatever happened, a `BEGIN` may have been sent: end it before reuse.
                self.in_txn.set(true);
            }
            let (row, spare) = self.settle(&mut u, r)?;
            self.spare_seq.set(spare);
            row
        };
        let (value, ver) = match row {
            Some(r) => (Some(IVec::from(r.get::<_, Vec<u8>>(0))), Some(r.get::<_, i64>(1))),
            None => (None, None),
        };
        self.reads.borrow_mut().insert((tree, key.to_vec()), (value.clone(), ver));
        Ok(value)
    }

    pub(super) fn insert(&self, tree: usize, key: &[u8], value: IVec) {
        self.writes.borrow_mut()[tree].insert(key.to_vec(), Some(value));
    }

    pub(super) fn remove(&self, tree: usize, key: &[u8]) {
        self.writes.borrow_mut()[tree].insert(key.to_vec(), None);
    }

    pub(super) fn next_seq(&self) -> Result<u64, TxError> {
        if let Some(n) = self.spare_seq.take() {
            return Ok(n as u64);
        }
        let begin = !self.in_txn.get();
        let mut u = self.conn()?;
        let c = u.conn();
        let r = self.db.shared.wait(async {
            if begin {
                // The transaction id first, then the number: see the module doc.
                let (b, x, n) = futures_join3(
                    c.client.batch_execute("BEGIN"),
                    c.client.query_one(&c.st.xid, &[]),
                    c.client.query_one(&c.st.nextval, &[]),
                )
                .await;
                b?;
                x?;
                Ok(n?.get::<_, i64>(0))
            } else {
                Ok(c.client.query_one(&c.st.nextval, &[]).await?.get::<_, i64>(0))
            }
        });
        if begin {
            // Whatever happened, a `BEGIN` may have been sent: end it before reuse.
            self.in_txn.set(true);
        }
        let n = self.settle(&mut u, r)?;
        Ok(n as u64)
    }

    /// The read set as the three arrays `spillway_commit` and the validation take.
    fn read_arrays(&self) -> (Vec<&str>, Vec<Vec<u8>>, Vec<Option<i64>>) {
        let reads = self.reads.borrow();
        let mut t = Vec::with_capacity(reads.len());
        let mut k = Vec::with_capacity(reads.len());
        let mut v = Vec::with_capacity(reads.len());
        for ((tree, key), (_, ver)) in reads.iter() {
            t.push(self.names[*tree]);
            k.push(key.clone());
            v.push(*ver);
        }
        (t, k, v)
    }

    /// Whether every row read is still as read.
    fn still_valid(&self) -> Result<bool, StoreError> {
        if self.reads.borrow().is_empty() {
            return Ok(true);
        }
        let (t, k, v) = self.read_arrays();
        let mut u = self.conn().map_err(tx_to_store)?;
        let c = u.conn();
        let r = self.db.shared.wait(c.client.query_one(&c.st.validate, &[&t, &k, &v]));
        let stale: i64 = self.settle(&mut u, r).map_err(tx_to_store)?.get(0);
        Ok(stale == 0)
    }

    fn rollback(&self) {
        if !self.in_txn.get() {
            return;
        }
        self.in_txn.set(false);
        let Ok(mut u) = self.conn() else { return };
        let c = u.conn();
        // Sent now and not waited for: the connection answers in order, so whoever uses it next
        // runs after the `ROLLBACK`, and a transaction that read and wrote nothing (or aborted)
        // costs no round trip for ending. Only a request that cannot even be sent (the connection
        // is gone) fails at once.
        let sent = {
            let mut rollback = pin!(c.client.batch_execute("ROLLBACK"));
            !matches!(rollback.as_mut().poll(&mut Context::from_waker(Waker::noop())), Poll::Ready(Err(_)))
        };
        if !sent {
            u.broken = true;
        }
    }

    fn commit(&self, set: &TreeSet, fence: Option<&FenceToken>) -> Result<(), TxError> {
        let writes = self.writes.borrow();
        if writes.iter().all(BTreeMap::is_empty) {
            drop(writes);
            self.rollback();
            return Ok(());
        }
        // Locks: written keys exclusive, keys only read shared, one per key, in tree order.
        let mut locks: HashMap<i64, bool> = HashMap::new();
        for (tree, w) in writes.iter().enumerate() {
            if set.locked[tree] {
                for key in w.keys() {
                    locks.insert(lock_id(self.names[tree], key), true);
                }
            }
        }
        for (tree, key) in self.reads.borrow().keys() {
            if set.locked[*tree] {
                locks.entry(lock_id(self.names[*tree], key)).or_insert(false);
            }
        }
        if fence.is_none() && self.conn()?.conn().st.commit_many.is_some() {
            drop(writes);
            return self.commit_in_group(locks);
        }
        let (lock_ids, lock_excl) = lock_arrays(locks);
        let (r_tree, r_key, r_ver) = self.read_arrays();
        let (mut p_tree, mut p_key, mut p_val) = (Vec::new(), Vec::new(), Vec::new());
        let (mut d_tree, mut d_key) = (Vec::new(), Vec::new());
        for (tree, w) in writes.iter().enumerate() {
            for (key, value) in w {
                match value {
                    Some(v) => {
                        p_tree.push(self.names[tree]);
                        p_key.push(key.as_slice());
                        p_val.push(&v[..]);
                    }
                    None => {
                        d_tree.push(self.names[tree]);
                        d_key.push(key.as_slice());
                    }
                }
            }
        }
        let fence_holder = fence.map(|f| f.holder.as_str());
        let fence_epoch = fence.map(|f| f.epoch as i64);
        let in_txn = self.in_txn.get();
        let mut u = self.conn()?;
        let c = u.conn();
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 12] = [
            &lock_ids,
            &lock_excl,
            &r_tree,
            &r_key,
            &r_ver,
            &p_tree,
            &p_key,
            &p_val,
            &d_tree,
            &d_key,
            &fence_holder,
            &fence_epoch,
        ];
        let r = self.db.shared.wait(async {
            let call = c.client.execute(&c.st.commit, &params);
            if in_txn {
                // The function's error, if any, comes first; the pipelined `COMMIT` then rolls back.
                let (called, committed) = futures_join2(call, c.client.batch_execute("COMMIT")).await;
                called?;
                committed?;
            } else {
                call.await?;
            }
            Ok(())
        });
        // The pipelined `COMMIT` ended the transaction either way (or the connection is broken).
        self.in_txn.set(false);
        self.settle(&mut u, r)
    }

    /// Commits with whichever transactions are committing at the same time (see `pg_group.rs`).
    fn commit_in_group(&self, locks: HashMap<i64, bool>) -> Result<(), TxError> {
        let writes = self.writes.borrow();
        let reads = self.reads.borrow();
        let mut member = Member {
            reads: Vec::with_capacity(reads.len()),
            puts: Vec::new(),
            deletes: Vec::new(),
            locks,
            touched: Vec::new(),
            written: Vec::new(),
        };
        for ((tree, key), (_, ver)) in reads.iter() {
            member.touched.push(lock_id(self.names[*tree], key));
            member.reads.push((self.names[*tree].to_string(), key.clone(), *ver));
        }
        for (tree, w) in writes.iter().enumerate() {
            for (key, value) in w {
                let id = lock_id(self.names[tree], key);
                member.touched.push(id);
                member.written.push(id);
                match value {
                    Some(v) => member.puts.push((self.names[tree].to_string(), key.clone(), v.clone())),
                    None => member.deletes.push((self.names[tree].to_string(), key.clone())),
                }
            }
        }
        drop((writes, reads));
        let outcome = self.db.shared.group.commit(member, |batch| self.commit_batch(batch));
        // A member's own transaction (which holds its event numbers back from readers) ends only
        // now that the batch is committed; a leader's ended with the batch.
        self.rollback();
        match outcome {
            Outcome::Committed => Ok(()),
            Outcome::Conflict => Err(TxError::Conflict),
            Outcome::Failed(e) => Err(TxError::Storage(e)),
        }
    }

    /// Commits a batch on this transaction's connection, in its PostgreSQL transaction; returns the
    /// members whose reads were stale.
    fn commit_batch(&self, batch: &[Arc<Member>]) -> Result<Vec<i32>, BatchFailure> {
        let mut locks: HashMap<i64, bool> = HashMap::new();
        for m in batch {
            for (id, excl) in &m.locks {
                *locks.entry(*id).or_insert(false) |= *excl;
            }
        }
        let (lock_ids, lock_excl) = lock_arrays(locks);
        let (mut r_member, mut r_tree, mut r_key, mut r_ver) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut p_member, mut p_tree, mut p_key, mut p_val) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut d_member, mut d_tree, mut d_key) = (Vec::new(), Vec::new(), Vec::new());
        for (i, m) in batch.iter().enumerate() {
            let i = i as i32;
            for (tree, key, ver) in &m.reads {
                r_member.push(i);
                r_tree.push(tree.as_str());
                r_key.push(key.as_slice());
                r_ver.push(*ver);
            }
            for (tree, key, value) in &m.puts {
                p_member.push(i);
                p_tree.push(tree.as_str());
                p_key.push(key.as_slice());
                p_val.push(&value[..]);
            }
            for (tree, key) in &m.deletes {
                d_member.push(i);
                d_tree.push(tree.as_str());
                d_key.push(key.as_slice());
            }
        }
        let in_txn = self.in_txn.get();
        let fail = |e: TxError| match e {
            TxError::Conflict => BatchFailure::Conflict,
            TxError::Storage(e) => BatchFailure::Failed(e),
        };
        let mut u = self.conn().map_err(fail)?;
        let c = u.conn();
        let Some(statement) = &c.st.commit_many else {
            return Err(BatchFailure::Failed(StoreError::Storage("spillway_commit_many is not installed".into())));
        };
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 13] = [
            &lock_ids, &lock_excl, &r_member, &r_tree, &r_key, &r_ver, &p_member, &p_tree, &p_key, &p_val, &d_member,
            &d_tree, &d_key,
        ];
        let r = self.db.shared.wait(async {
            let call = c.client.query_one(statement, &params);
            if in_txn {
                let (called, committed) = futures_join2(call, c.client.batch_execute("COMMIT")).await;
                let row = called?;
                committed?;
                Ok(row)
            } else {
                call.await
            }
        });
        self.in_txn.set(false);
        let row = self.settle(&mut u, r).map_err(fail)?;
        Ok(row.get::<_, Vec<i32>>(0))
    }
}

/// The lock arrays a commit function takes: every key lock and the global lock shared, or, past
/// [`MAX_KEY_LOCKS`], the global lock alone, exclusive.
fn lock_arrays(locks: HashMap<i64, bool>) -> (Vec<i64>, Vec<bool>) {
    if locks.len() > MAX_KEY_LOCKS {
        (vec![GLOBAL_LOCK], vec![true])
    } else {
        locks.into_iter().chain([(GLOBAL_LOCK, false)]).unzip()
    }
}

fn tx_to_store(e: TxError) -> StoreError {
    match e {
        TxError::Storage(e) => e,
        TxError::Conflict => StoreError::Storage("a serialization failure while validating reads".into()),
    }
}

impl Drop for PgTxView<'_> {
    fn drop(&mut self) {
        self.rollback();
    }
}

impl PgTree {
    pub fn get(&self, key: &[u8]) -> Result<Option<IVec>, StoreError> {
        let name = &*self.name;
        let mut u = self.db.use_conn()?;
        let c = u.conn();
        let r = self.db.shared.wait(c.client.query_opt(&c.st.get, &[&name, &key]));
        Ok(self.db.settle(&mut u, r)?.map(|r| IVec::from(r.get::<_, Vec<u8>>(0))))
    }

    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<Option<IVec>, StoreError> {
        let name = &*self.name;
        let mut u = self.db.use_conn()?;
        let c = u.conn();
        let r = self.db.shared.wait(c.client.query_opt(&c.st.upsert, &[&name, &key, &value]));
        Ok(self.db.settle(&mut u, r)?.map(|r| IVec::from(r.get::<_, Vec<u8>>(0))))
    }

    pub fn remove(&self, key: &[u8]) -> Result<Option<IVec>, StoreError> {
        let name = &*self.name;
        let mut u = self.db.use_conn()?;
        let c = u.conn();
        let r = self.db.shared.wait(c.client.query_opt(&c.st.delete, &[&name, &key]));
        Ok(self.db.settle(&mut u, r)?.map(|r| IVec::from(r.get::<_, Vec<u8>>(0))))
    }

    pub fn clear(&self) -> Result<(), StoreError> {
        let name = &*self.name;
        let mut u = self.db.use_conn()?;
        let c = u.conn();
        let r = self.db.shared.wait(c.client.execute(&c.st.clear, &[&name]));
        self.db.settle(&mut u, r).map(|_| ())
    }

    pub fn count(&self, from: &[u8], to: Option<&[u8]>) -> Result<usize, StoreError> {
        let name = &*self.name;
        let mut u = self.db.use_conn()?;
        let c = u.conn();
        let r = self.db.shared.wait(async {
            match to {
                Some(to) => c.client.query_one(&c.st.count_to, &[&name, &from, &to]).await,
                None => c.client.query_one(&c.st.count, &[&name, &from]).await,
            }
        });
        let n: i64 = self.db.settle(&mut u, r)?.get(0);
        Ok(n as usize)
    }

    /// Pages through `from <= key < to` by keys (each page starts after the last key seen).
    pub fn visit(
        &self,
        from: &[u8],
        to: Option<&[u8]>,
        reverse: bool,
        page: usize,
        mut f: impl FnMut(&[u8], &IVec) -> Result<ControlFlow<()>, StoreError>,
    ) -> Result<(), StoreError> {
        let name = &*self.name;
        let mut lo = from.to_vec();
        let mut hi: Option<Vec<u8>> = to.map(<[u8]>::to_vec);
        let limit = page as i64;
        loop {
            let rows = {
                let mut u = self.db.use_conn()?;
                let c = u.conn();
                let r = self.db.shared.wait(async {
                    match (reverse, &hi) {
                        (false, None) => c.client.query(&c.st.fwd, &[&name, &lo, &limit]).await,
                        (false, Some(h)) => c.client.query(&c.st.fwd_to, &[&name, &lo, &limit, h]).await,
                        (true, None) => c.client.query(&c.st.rev, &[&name, &lo, &limit]).await,
                        (true, Some(h)) => c.client.query(&c.st.rev_to, &[&name, &lo, &limit, h]).await,
                    }
                });
                self.db.settle(&mut u, r)?
            };
            let full = rows.len() == page;
            let mut last = None;
            for r in rows {
                let k: Vec<u8> = r.get(0);
                let v = IVec::from(r.get::<_, Vec<u8>>(1));
                if f(&k, &v)?.is_break() {
                    return Ok(());
                }
                last = Some(k);
            }
            match (full, last) {
                (true, Some(k)) if reverse => hi = Some(k),
                (true, Some(mut k)) => {
                    k.push(0);
                    lo = k;
                }
                _ => return Ok(()),
            }
        }
    }

    /// The records of `table` that index entries (key, version of the record they name) point at,
    /// the record's key following `prefix_len` bytes of each entry: from [`Versioned`] where it
    /// holds that version, the rest read in one query. A record changed since its version was read
    /// is returned as it is now; one removed since, as `None`.
    fn versioned_values(
        &self,
        table: &PgTree,
        prefix_len: usize,
        entries: &[(Vec<u8>, Option<i64>)],
    ) -> Result<Vec<Option<IVec>>, StoreError> {
        let mut out: Vec<Option<IVec>> = vec![None; entries.len()];
        let mut missing: Vec<(usize, &[u8])> = Vec::new();
        {
            let cache = self.db.shared.versioned.lock().unwrap_or_else(|p| p.into_inner());
            for (i, (k, ver)) in entries.iter().enumerate() {
                let Some(ver) = ver else { continue };
                let key = &k[prefix_len..];
                match cache.rows.get(&(table.name.clone(), key.to_vec())) {
                    Some((v, value)) if v == ver => out[i] = Some(value.clone()),
                    _ => missing.push((i, key)),
                }
            }
        }
        if missing.is_empty() {
            return Ok(out);
        }
        let name = &*table.name;
        let keys: Vec<&[u8]> = missing.iter().map(|(_, k)| *k).collect();
        let rows = {
            let mut u = self.db.use_conn()?;
            let c = u.conn();
            let r = self.db.shared.wait(c.client.query(&c.st.get_many, &[&name, &keys]));
            self.db.settle(&mut u, r)?
        };
        let mut found: HashMap<Vec<u8>, (IVec, i64)> = rows
            .into_iter()
            .map(|r| (r.get::<_, Vec<u8>>(0), (IVec::from(r.get::<_, Vec<u8>>(1)), r.get::<_, i64>(2))))
            .collect();
        let mut cache = self.db.shared.versioned.lock().unwrap_or_else(|p| p.into_inner());
        for (i, key) in missing {
            let Some((value, ver)) = found.remove(key) else { continue };
            if cache.bytes + value.len() > VERSIONED_MAX_BYTES {
                cache.rows.clear();
                cache.bytes = 0;
            }
            cache.bytes += value.len();
            if let Some((_, old)) = cache.rows.insert((table.name.clone(), key.to_vec()), (ver, value.clone())) {
                cache.bytes -= old.len();
            }
            out[i] = Some(value);
        }
        Ok(out)
    }

    /// See [`super::Tree::visit_index`]: one query per page reads the index entries with the
    /// versions of their records, and the records not held at that version are read in a second.
    pub fn visit_index(
        &self,
        prefix: &[u8],
        before: Option<&[u8]>,
        table: &PgTree,
        reverse: bool,
        limit: usize,
        mut f: impl FnMut(&[u8], Option<IVec>) -> Result<ControlFlow<()>, StoreError>,
    ) -> Result<(), StoreError> {
        let name = &*self.name;
        let table_name = &*table.name;
        let offset = (prefix.len() + 1) as i32;
        let page = limit.clamp(1, PAGE) as i64;
        let mut lo = prefix.to_vec();
        let mut hi = match before {
            Some(b) => Some([prefix, b].concat()),
            None => super::prefix_end(prefix),
        };
        loop {
            let rows = {
                let mut u = self.db.use_conn()?;
                let c = u.conn();
                let r = self.db.shared.wait(async {
                    match (reverse, &hi) {
                        (false, None) => c.client.query(&c.st.ix_fwd, &[&name, &lo, &table_name, &offset, &page]).await,
                        (false, Some(h)) => {
                            c.client.query(&c.st.ix_fwd_to, &[&name, &lo, &table_name, &offset, &page, h]).await
                        }
                        (true, None) => c.client.query(&c.st.ix_rev, &[&name, &lo, &table_name, &offset, &page]).await,
                        (true, Some(h)) => {
                            c.client.query(&c.st.ix_rev_to, &[&name, &lo, &table_name, &offset, &page, h]).await
                        }
                    }
                });
                self.db.settle(&mut u, r)?
            };
            let full = rows.len() as i64 == page;
            let entries: Vec<(Vec<u8>, Option<i64>)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
            let values = self.versioned_values(table, prefix.len(), &entries)?;
            let mut last = None;
            for ((k, _), v) in entries.into_iter().zip(values) {
                if f(&k[prefix.len()..], v)?.is_break() {
                    return Ok(());
                }
                last = Some(k);
            }
            match (full, last) {
                (true, Some(k)) if reverse => hi = Some(k),
                (true, Some(mut k)) => {
                    k.push(0);
                    lo = k;
                }
                _ => return Ok(()),
            }
        }
    }
}

/// The lease rows: who leads, at which epoch, until when (the database's clock decides).
impl PgDb {
    fn lease_query(
        &self,
        sql: &'static str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Option<tokio_postgres::Row>, StoreError> {
        let mut u = self.use_conn()?;
        let c = u.conn();
        let r = self.shared.wait(c.client.query_opt(sql, params));
        self.settle(&mut u, r)
    }

    /// Takes lease `name` for `holder` if nobody holds it unexpired; returns the new epoch.
    pub fn lease_acquire(&self, name: &str, holder: &str, ttl_ms: i64) -> Result<Option<u64>, StoreError> {
        let row = self.lease_query(
            "INSERT INTO spillway_lease (name, holder, epoch, expires_at, renewed_at) \
             VALUES ($1, $2, 1, clock_timestamp() + $3::bigint * interval '1 millisecond', clock_timestamp()) \
             ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, epoch = spillway_lease.epoch + 1, \
             expires_at = EXCLUDED.expires_at, renewed_at = EXCLUDED.renewed_at \
             WHERE spillway_lease.expires_at <= clock_timestamp() RETURNING epoch",
            &[&name, &holder, &ttl_ms],
        )?;
        Ok(row.map(|r| r.get::<_, i64>(0) as u64))
    }

    /// Extends the lease if `holder` still holds it at `epoch` (even if it ran out, as long as
    /// nobody took it since).
    pub fn lease_renew(&self, name: &str, holder: &str, epoch: u64, ttl_ms: i64) -> Result<bool, StoreError> {
        let epoch = epoch as i64;
        let row = self.lease_query(
            "UPDATE spillway_lease SET expires_at = clock_timestamp() + $4::bigint * interval '1 millisecond', \
             renewed_at = clock_timestamp() WHERE name = $1 AND holder = $2 AND epoch = $3 RETURNING epoch",
            &[&name, &holder, &epoch, &ttl_ms],
        )?;
        Ok(row.is_some())
    }

    /// Ends the lease now, so another server can take it at once.
    pub fn lease_release(&self, name: &str, holder: &str, epoch: u64) -> Result<(), StoreError> {
        let epoch = epoch as i64;
        self.lease_query(
            "UPDATE spillway_lease SET expires_at = clock_timestamp() \
             WHERE name = $1 AND holder = $2 AND epoch = $3 RETURNING epoch",
            &[&name, &holder, &epoch],
        )?;
        Ok(())
    }

    /// Who holds the lease, at which epoch, and for how many more milliseconds (negative: ran out).
    pub fn lease_info(&self, name: &str) -> Result<Option<(String, u64, i64)>, StoreError> {
        let row = self.lease_query(
            "SELECT holder, epoch, (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint \
             FROM spillway_lease WHERE name = $1",
            &[&name],
        )?;
        Ok(row.map(|r| (r.get(0), r.get::<_, i64>(1) as u64, r.get(2))))
    }
}
