//! The ordered key-value trees the store is built on: sled's on disk, ordered maps in memory, or one
//! table in PostgreSQL.
//!
//! Everything above this module (tables, indexes, the event log, settings, the record cache,
//! `check`, `export`) is written once against [`Db`], [`Tree`] and [`TxView`]; only this module
//! knows which backend holds the bytes. This is the lowest layer of the crate: it knows the store's
//! error type and nothing above it (transactions report [`TxError`], which the layer above turns into
//! its own abort type).
//!
//! What every backend guarantees (the contract tests in `state/tests/store.rs` run on each):
//! transactions over any set of trees are atomic and serializable, read their own writes, and may
//! run their closure more than once (on a conflict); scans are in byte order of the keys; a
//! transaction's event numbers ([`TxView::next_seq`]) are unique and strictly increasing in the
//! order readers can see them ([`Db::readable_seq`]).
//!
//! The in-memory backend exists for stores that must not outlive the process (the what-if
//! simulator's): it keeps every guarantee a reader relies on and drops the one it cannot give,
//! durability, along with its price (a log, page cache, I/O threads). The PostgreSQL backend
//! (`postgres.rs`) is for several servers sharing one store.

mod memory;
mod pg_group;
pub(crate) mod pg_tls;
pub(crate) mod postgres;

use std::ops::{Bound, ControlFlow};
use std::sync::Arc;

use sled::IVec;
use sled::Transactional;
use sled::transaction::{
    ConflictableTransactionError, TransactionError, TransactionalTree, UnabortableTransactionError,
};

use crate::StoreError;
use memory::{MemDb, MemTree, MemTxView};
use postgres::{PgDb, PgTree, PgTxView};

/// A database: named trees.
#[derive(Clone)]
pub(crate) enum Db {
    Sled(sled::Db),
    Memory(Arc<MemDb>),
    Postgres(Arc<PgDb>),
}

/// One ordered map from byte keys to byte values.
#[derive(Clone)]
pub(crate) enum Tree {
    Sled(sled::Tree),
    Memory(Arc<MemTree>),
    Postgres(PgTree),
}

/// Why an operation inside a transaction failed.
pub(crate) enum TxError {
    /// Another transaction changed what this one read: run the closure again.
    Conflict,
    /// The backend failed.
    Storage(StoreError),
}

impl From<StoreError> for TxError {
    fn from(e: StoreError) -> Self {
        TxError::Storage(e)
    }
}

impl From<UnabortableTransactionError> for TxError {
    fn from(e: UnabortableTransactionError) -> Self {
        match e {
            UnabortableTransactionError::Conflict => TxError::Conflict,
            UnabortableTransactionError::Storage(e) => TxError::Storage(e.into()),
        }
    }
}

/// How a transaction closure stopped early.
pub(crate) enum TxStop<E> {
    /// With the caller's error: nothing is applied.
    Abort(E),
    /// A concurrent change was seen: run the closure again.
    Conflict,
}

/// Why a transaction did not apply.
pub(crate) enum TxFailed<E> {
    Abort(E),
    Storage(StoreError),
}

/// Who may write, checked by the backend in the same transaction as the writes (see
/// `crate::lease`): the holder of the leader lease at this epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FenceToken {
    pub holder: String,
    pub epoch: u64,
}

/// The trees a transaction may span, in the form each backend needs.
pub(crate) struct TreeSet {
    pub trees: Vec<Tree>,
    /// Whether conflicting writers of a tree must be kept apart by locking its keys. Trees whose
    /// every write goes with a write of a locked tree's key in the same transaction (index entries
    /// follow their record) or whose keys are never written twice (event numbers) need no locks.
    pub locked: Vec<bool>,
    sled: Vec<sled::Tree>,
}

impl TreeSet {
    pub fn new(trees: Vec<Tree>, locked: Vec<bool>) -> TreeSet {
        assert_eq!(trees.len(), locked.len());
        let sled = trees
            .iter()
            .filter_map(|t| match t {
                Tree::Sled(t) => Some(t.clone()),
                _ => None,
            })
            .collect();
        TreeSet { trees, locked, sled }
    }
}

impl std::ops::Index<usize> for TreeSet {
    type Output = Tree;
    fn index(&self, i: usize) -> &Tree {
        &self.trees[i]
    }
}

impl Db {
    /// A new, empty in-memory database.
    pub fn memory() -> Db {
        Db::Memory(Arc::new(MemDb::default()))
    }

    /// The tree with this name, created empty if missing.
    pub fn open_tree(&self, name: impl AsRef<[u8]>) -> Result<Tree, StoreError> {
        match self {
            Db::Sled(db) => Ok(Tree::Sled(db.open_tree(name)?)),
            Db::Memory(m) => {
                let mut trees = memory::lock(&m.trees);
                Ok(Tree::Memory(trees.entry(name.as_ref().to_vec()).or_default().clone()))
            }
            Db::Postgres(pg) => Ok(Tree::Postgres(pg.tree(name.as_ref())?)),
        }
    }

    /// Removes a tree and everything in it.
    pub fn drop_tree(&self, name: impl AsRef<[u8]>) -> Result<(), StoreError> {
        match self {
            Db::Sled(db) => {
                db.drop_tree(name)?;
            }
            Db::Memory(m) => {
                memory::lock(&m.trees).remove(name.as_ref());
            }
            Db::Postgres(pg) => pg.tree(name.as_ref())?.clear()?,
        }
        Ok(())
    }

    /// Everything written so far reaches the disk (nothing to do in memory, and nothing on
    /// PostgreSQL, where a transaction is durable when its commit returns).
    pub fn flush(&self) -> Result<(), StoreError> {
        if let Db::Sled(db) = self {
            db.flush()?;
        }
        Ok(())
    }

    /// Runs `f` over `trees` atomically. `f` may run more than once (on sled and PostgreSQL, when
    /// it reports a conflict or another transaction changed what it read); in memory it runs once.
    /// With a `fence`, the writes apply only while its holder holds the leader lease at its epoch
    /// (checked by PostgreSQL in the same transaction; the other backends serve one process, whose
    /// caller checks its own lease).
    pub fn transaction<T, E>(
        &self,
        trees: &TreeSet,
        fence: Option<&FenceToken>,
        f: impl Fn(&TxView) -> Result<T, TxStop<E>>,
    ) -> Result<T, TxFailed<E>> {
        match self {
            Db::Sled(_) => {
                let result = trees.sled.as_slice().transaction(|view| {
                    f(&TxView::Sled(view)).map_err(|stop| match stop {
                        TxStop::Abort(e) => ConflictableTransactionError::Abort(e),
                        TxStop::Conflict => ConflictableTransactionError::Conflict,
                    })
                });
                result.map_err(|e| match e {
                    TransactionError::Abort(e) => TxFailed::Abort(e),
                    TransactionError::Storage(e) => TxFailed::Storage(e.into()),
                })
            }
            Db::Memory(m) => m.transaction(&trees.trees, f),
            Db::Postgres(pg) => pg.transaction(trees, fence, f),
        }
    }

    /// The highest event number handed out so far (`meta`/`key` hold it on sled and in memory).
    pub fn allocated_seq(&self, meta: &Tree, key: &[u8]) -> Result<u64, StoreError> {
        match self {
            Db::Postgres(pg) => pg.allocated_seq(),
            _ => read_seq(meta.get(key)?.as_deref()),
        }
    }

    /// The highest event number below which readers can see every event that will ever be
    /// committed: no transaction still running holds a lower one. On sled and in memory,
    /// transactions that number events commit one at a time, so it is the last number handed out;
    /// on PostgreSQL, where they commit side by side, it trails the running ones (and it waits up
    /// to `wait` for those running when it was called, so a reader sees what committed before).
    pub fn readable_seq(&self, meta: &Tree, key: &[u8], wait: std::time::Duration) -> Result<u64, StoreError> {
        match self {
            Db::Postgres(pg) => pg.readable_seq(wait),
            _ => read_seq(meta.get(key)?.as_deref()),
        }
    }

    /// Makes the next event number at least `seq + 1` (after an import).
    pub fn restore_seq(&self, meta: &Tree, key: &[u8], seq: u64) -> Result<(), StoreError> {
        match self {
            Db::Postgres(pg) => pg.restore_seq(seq),
            _ => meta.insert(key, &seq.to_be_bytes()[..]).map(|_| ()),
        }
    }

    /// A view of the database that sees one consistent state for as long as it is used (for
    /// `check` and `export` while other servers write). sled and memory stores are written by one
    /// process, whose writers the caller holds back instead: they return themselves.
    pub fn snapshot(&self) -> Result<Db, StoreError> {
        match self {
            Db::Postgres(pg) => Ok(Db::Postgres(Arc::new(pg.snapshot()?))),
            other => Ok(other.clone()),
        }
    }
}

/// Decodes a stored event number (8 bytes, big-endian; absent means 0).
pub(crate) fn read_seq(bytes: Option<&[u8]>) -> Result<u64, StoreError> {
    match bytes {
        None => Ok(0),
        Some(b) => b.try_into().map(u64::from_be_bytes).map_err(|_| StoreError::Decode {
            table: "meta".into(),
            what: "last_seq".into(),
            reason: format!("expected 8 bytes, found {}", b.len()),
        }),
    }
}

/// The end of the key range that starts with `prefix` (exclusive), or `None` when it runs to the end.
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

impl Tree {
    /// The value under `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<IVec>, StoreError> {
        match self {
            Tree::Sled(t) => Ok(t.get(key)?),
            Tree::Memory(t) => Ok(t.read().get(key).cloned()),
            Tree::Postgres(t) => t.get(key),
        }
    }

    /// Sets `key`; returns the previous value.
    pub fn insert(&self, key: &[u8], value: impl Into<IVec>) -> Result<Option<IVec>, StoreError> {
        match self {
            Tree::Sled(t) => Ok(t.insert(key, value)?),
            Tree::Memory(t) => Ok(t.write().insert(key.to_vec(), value.into())),
            Tree::Postgres(t) => t.insert(key, &value.into()),
        }
    }

    /// Removes `key`; returns its value.
    pub fn remove(&self, key: &[u8]) -> Result<Option<IVec>, StoreError> {
        match self {
            Tree::Sled(t) => Ok(t.remove(key)?),
            Tree::Memory(t) => Ok(t.write().remove(key)),
            Tree::Postgres(t) => t.remove(key),
        }
    }

    /// Removes everything.
    pub fn clear(&self) -> Result<(), StoreError> {
        match self {
            Tree::Sled(t) => t.clear()?,
            Tree::Memory(t) => t.write().clear(),
            Tree::Postgres(t) => t.clear()?,
        }
        Ok(())
    }

    /// How many keys the tree holds.
    pub fn len(&self) -> Result<usize, StoreError> {
        match self {
            Tree::Sled(t) => Ok(t.len()),
            Tree::Memory(t) => Ok(t.read().len()),
            Tree::Postgres(t) => t.count(b"", None),
        }
    }

    /// Whether the tree holds nothing.
    pub fn is_empty(&self) -> Result<bool, StoreError> {
        match self {
            Tree::Sled(t) => Ok(t.is_empty()),
            Tree::Memory(t) => Ok(t.read().is_empty()),
            Tree::Postgres(t) => {
                let mut any = false;
                t.visit(b"", None, false, 1, |_, _| {
                    any = true;
                    Ok(ControlFlow::Break(()))
                })?;
                Ok(!any)
            }
        }
    }

    /// [`Tree::visit_range`] over the keys that start with `prefix`.
    pub fn visit_prefix(
        &self,
        prefix: &[u8],
        reverse: bool,
        f: impl FnMut(&[u8], &IVec) -> Result<ControlFlow<()>, StoreError>,
    ) -> Result<(), StoreError> {
        let end = prefix_end(prefix);
        self.visit_range(prefix, end.as_deref(), reverse, f)
    }

    /// Every entry, in key order.
    pub fn visit_all(
        &self,
        f: impl FnMut(&[u8], &IVec) -> Result<ControlFlow<()>, StoreError>,
    ) -> Result<(), StoreError> {
        self.visit_range(b"", None, false, f)
    }

    /// Calls `f` with each entry with `from <= key < to` (`to` `None`: to the end), in key order (or
    /// in reverse), until it breaks. `f` must not write to this tree (in memory it runs under the
    /// tree's read lock).
    pub fn visit_range(
        &self,
        from: &[u8],
        to: Option<&[u8]>,
        reverse: bool,
        mut f: impl FnMut(&[u8], &IVec) -> Result<ControlFlow<()>, StoreError>,
    ) -> Result<(), StoreError> {
        let range = (Bound::Included(from), to.map_or(Bound::Unbounded, Bound::Excluded));
        match self {
            Tree::Sled(t) => {
                let iter = t.range::<&[u8], _>(range);
                let iter: Box<dyn Iterator<Item = sled::Result<(IVec, IVec)>>> =
                    if reverse { Box::new(iter.rev()) } else { Box::new(iter) };
                for kv in iter {
                    let (k, v) = kv?;
                    if f(&k, &v)?.is_break() {
                        break;
                    }
                }
            }
            Tree::Memory(t) => {
                let map = t.read();
                let iter = map.range::<[u8], _>(range);
                let iter: Box<dyn Iterator<Item = (&Vec<u8>, &IVec)>> =
                    if reverse { Box::new(iter.rev()) } else { Box::new(iter) };
                for (k, v) in iter {
                    if f(k, v)?.is_break() {
                        break;
                    }
                }
            }
            Tree::Postgres(t) => t.visit(from, to, reverse, postgres::PAGE, f)?,
        }
        Ok(())
    }

    /// How many keys start with `prefix`.
    pub fn count_prefix(&self, prefix: &[u8]) -> Result<usize, StoreError> {
        if let Tree::Postgres(t) = self {
            return t.count(prefix, prefix_end(prefix).as_deref());
        }
        let mut n = 0;
        self.visit_prefix(prefix, false, |_, _| {
            n += 1;
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(n)
    }

    /// Walks the entries of this index tree that start with `prefix` (each key is `prefix` followed
    /// by a primary key of `table`) and calls `f` with the primary key and the record it names in
    /// `table` (`None` if there is none), until `f` breaks. On PostgreSQL one query reads a page of
    /// entries with their records; elsewhere each record is a lookup. With `before`, only primary
    /// keys below it are walked (a cursor's page).
    pub fn visit_index(
        &self,
        prefix: &[u8],
        before: Option<&[u8]>,
        table: &Tree,
        reverse: bool,
        limit: usize,
        mut f: impl FnMut(&[u8], Option<IVec>) -> Result<ControlFlow<()>, StoreError>,
    ) -> Result<(), StoreError> {
        if let (Tree::Postgres(ix), Tree::Postgres(t)) = (self, table) {
            return ix.visit_index(prefix, before, t, reverse, limit, f);
        }
        let end = match before {
            Some(b) => Some([prefix, b].concat()),
            None => prefix_end(prefix),
        };
        self.visit_range(prefix, end.as_deref(), reverse, |k, _| {
            let key = &k[prefix.len()..];
            f(key, table.get(key)?)
        })
    }
}

/// The trees as one transaction sees them.
pub(crate) enum TxView<'a> {
    Sled(&'a [TransactionalTree]),
    Memory(MemTxView<'a>),
    Postgres(Box<PgTxView<'a>>),
}

impl TxView<'_> {
    /// The value under `key` in tree `tree`, including this transaction's writes.
    pub fn get(&self, tree: usize, key: &[u8]) -> Result<Option<IVec>, TxError> {
        match self {
            TxView::Sled(v) => Ok(v[tree].get(key)?),
            TxView::Memory(m) => m.get(tree, key),
            TxView::Postgres(p) => p.get(tree, key),
        }
    }

    /// Sets `key` in tree `tree`.
    pub fn insert(&self, tree: usize, key: &[u8], value: impl Into<IVec>) -> Result<(), TxError> {
        match self {
            TxView::Sled(v) => {
                v[tree].insert(key, value)?;
            }
            TxView::Memory(m) => m.insert(tree, key, value.into()),
            TxView::Postgres(p) => p.insert(tree, key, value.into()),
        }
        Ok(())
    }

    /// Removes `key` from tree `tree`, without reading it first.
    pub fn remove(&self, tree: usize, key: &[u8]) -> Result<(), TxError> {
        match self {
            TxView::Sled(v) => {
                v[tree].remove(key)?;
            }
            TxView::Memory(m) => m.remove(tree, key),
            TxView::Postgres(p) => p.remove(tree, key),
        }
        Ok(())
    }

    /// Removes `key` from tree `tree`; returns its value.
    pub fn take(&self, tree: usize, key: &[u8]) -> Result<Option<IVec>, TxError> {
        match self {
            TxView::Sled(v) => Ok(v[tree].remove(key)?),
            _ => {
                let old = self.get(tree, key)?;
                if old.is_some() {
                    self.remove(tree, key)?;
                }
                Ok(old)
            }
        }
    }

    /// The next event number: one more than the last one handed out (kept under `key` in tree
    /// `meta` on sled and in memory; a sequence on PostgreSQL, see `postgres.rs` for why readers
    /// still see the numbers in order).
    pub fn next_seq(&self, meta: usize, key: &[u8]) -> Result<u64, TxError> {
        match self {
            TxView::Postgres(p) => p.next_seq(),
            _ => {
                let seq = read_seq(self.get(meta, key)?.as_deref())? + 1;
                self.insert(meta, key, &seq.to_be_bytes()[..])?;
                Ok(seq)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends_skip_trailing_max_bytes() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[1, 255]), Some(vec![2]));
        assert_eq!(prefix_end(&[255, 255]), None);
        assert_eq!(prefix_end(b""), None);
    }

    fn keys_limited(t: &Tree, prefix: &[u8], reverse: bool, limit: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        t.visit_prefix(prefix, reverse, |k, _| {
            out.push(k.to_vec());
            Ok(if out.len() >= limit { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
        })
        .unwrap();
        out
    }

    fn keys(t: &Tree, prefix: &[u8], reverse: bool) -> Vec<Vec<u8>> {
        keys_limited(t, prefix, reverse, usize::MAX)
    }

    /// Both backends order and bound scans the same way (the store's paging relies on it).
    #[test]
    fn scans_agree_between_sled_and_memory() {
        let dir = std::env::temp_dir().join(format!("spillway-kv-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let sled = Db::Sled(sled::Config::new().path(&dir).temporary(true).open().unwrap());
        let memory = Db::memory();
        let entries: [&[u8]; 6] = [b"a", b"ab\x00x", b"ab\x00y", b"ab\xff", b"ac", &[255, 255]];
        let trees: Vec<Tree> = [&sled, &memory].iter().map(|db| db.open_tree("t").unwrap()).collect();
        for t in &trees {
            for k in entries {
                t.insert(k, &b"v"[..]).unwrap();
            }
        }
        for prefix in [&b"ab"[..], b"ab\x00", b"", &[255]] {
            for reverse in [false, true] {
                assert_eq!(keys(&trees[0], prefix, reverse), keys(&trees[1], prefix, reverse), "{prefix:?} {reverse}");
            }
        }
        assert_eq!(keys(&trees[1], b"ab", false).len(), 3);
        assert_eq!(trees[1].count_prefix(b"ab").unwrap(), 3);
        assert_eq!(keys_limited(&trees[1], b"", true, 2), vec![vec![255, 255], b"ac".to_vec()]);
    }

    /// An aborted memory transaction leaves nothing; a committed one applies all its writes, and its
    /// reads see its own writes first.
    #[test]
    fn memory_transactions_are_all_or_nothing_and_read_their_own_writes() {
        let db = Db::memory();
        let set = TreeSet::new(vec![db.open_tree("a").unwrap(), db.open_tree("b").unwrap()], vec![true, true]);
        set[0].insert(b"k", &b"old"[..]).unwrap();
        let aborted: Result<(), TxFailed<&str>> = db.transaction(&set, None, |tx| {
            tx.insert(0, b"k", &b"new"[..]).map_err(|_| TxStop::Abort("store"))?;
            tx.insert(1, b"x", &b"1"[..]).map_err(|_| TxStop::Abort("store"))?;
            Err(TxStop::Abort("no"))
        });
        assert!(matches!(aborted, Err(TxFailed::Abort("no"))));
        assert_eq!(set[0].get(b"k").unwrap().as_deref(), Some(&b"old"[..]));
        assert!(set[1].is_empty().unwrap());

        let seen: Result<_, TxFailed<()>> = db.transaction(&set, None, |tx| {
            let stop = |_| TxStop::Abort(());
            tx.insert(0, b"k", &b"new"[..]).map_err(stop)?;
            let own = tx.get(0, b"k").map_err(stop)?;
            let removed = tx.take(0, b"k").map_err(stop)?;
            let after = tx.get(0, b"k").map_err(stop)?;
            tx.insert(1, b"x", &b"1"[..]).map_err(stop)?;
            Ok((own, removed, after))
        });
        let (own, removed, after) = seen.ok().unwrap();
        assert_eq!(own.as_deref(), Some(&b"new"[..]));
        assert_eq!(removed.as_deref(), Some(&b"new"[..]));
        assert_eq!(after, None);
        assert_eq!(set[0].get(b"k").unwrap(), None);
        assert_eq!(set[1].get(b"x").unwrap().as_deref(), Some(&b"1"[..]));
    }
}
