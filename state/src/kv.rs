//! The ordered key-value trees the store is built on: sled's, on disk, or ordered maps in memory.
//!
//! Everything above this module (tables, indexes, the event log, settings, the record cache,
//! `check`, `export`) is written once against [`Db`], [`Tree`] and [`TxView`]; only this module
//! knows which backend holds the bytes. The in-memory backend exists for stores that must not outlive
//! the process (the what-if simulator's): it keeps every guarantee a reader relies on (atomic
//! transactions over any set of trees, reads of a transaction's own writes, ordered scans) and drops
//! the one it cannot give, durability, along with its price (a log, page cache, I/O threads).
//!
//! Invariants of the memory backend: transactions run one at a time (one mutex), their writes are
//! buffered and applied only when the closure succeeds, so an aborted transaction leaves nothing; a
//! committing transaction takes one tree's write lock at a time, so a reader holding one tree's read
//! lock while it reads another (an index, then its table) can never deadlock with it.

use std::collections::{BTreeMap, HashMap};
use std::ops::{Bound, ControlFlow};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use sled::IVec;
use sled::Transactional;
use sled::transaction::{
    ConflictableTransactionError, TransactionError, TransactionalTree, UnabortableTransactionError,
};

use crate::StoreError;
use crate::tx::{AbortKind, TxAbort};

/// A database: named trees.
#[derive(Clone)]
pub(crate) enum Db {
    Sled(sled::Db),
    Memory(Arc<MemDb>),
}

/// One ordered map from byte keys to byte values.
#[derive(Clone)]
pub(crate) enum Tree {
    Sled(sled::Tree),
    Memory(Arc<MemTree>),
}

/// The in-memory database: its trees by name, and the lock that runs transactions one at a time.
#[derive(Default)]
pub(crate) struct MemDb {
    trees: Mutex<BTreeMap<Vec<u8>, Arc<MemTree>>>,
    transactions: Mutex<()>,
}

/// An in-memory tree.
#[derive(Default)]
pub(crate) struct MemTree {
    map: RwLock<BTreeMap<Vec<u8>, IVec>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section below leaves its map whole (single inserts and removes), so a panic
    // elsewhere cannot leave it half-changed: poisoning is ignored.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl MemTree {
    fn read(&self) -> RwLockReadGuard<'_, BTreeMap<Vec<u8>, IVec>> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, BTreeMap<Vec<u8>, IVec>> {
        self.map.write().unwrap_or_else(|p| p.into_inner())
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
                let mut trees = lock(&m.trees);
                Ok(Tree::Memory(trees.entry(name.as_ref().to_vec()).or_default().clone()))
            }
        }
    }

    /// Removes a tree and everything in it.
    pub fn drop_tree(&self, name: impl AsRef<[u8]>) -> Result<(), StoreError> {
        match self {
            Db::Sled(db) => {
                db.drop_tree(name)?;
            }
            Db::Memory(m) => {
                lock(&m.trees).remove(name.as_ref());
            }
        }
        Ok(())
    }

    /// Everything written so far reaches the disk (nothing to do in memory).
    pub fn flush(&self) -> Result<(), StoreError> {
        if let Db::Sled(db) = self {
            db.flush()?;
        }
        Ok(())
    }

    /// Runs `f` over `trees` atomically. `f` may run more than once on sled (when it reports a
    /// conflict); in memory it runs once, and its writes are applied only if it succeeds.
    pub fn transaction<T, E>(
        &self,
        trees: &TreeSet,
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
            Db::Memory(m) => {
                let _one_at_a_time = lock(&m.transactions);
                let view = MemTxView {
                    trees: trees.trees.as_slice(),
                    writes: std::cell::RefCell::new(vec![HashMap::new(); trees.trees.len()]),
                };
                let wrapped = TxView::Memory(view);
                let out = match f(&wrapped) {
                    Ok(v) => v,
                    Err(TxStop::Abort(e)) => return Err(TxFailed::Abort(e)),
                    // Nothing runs concurrently with a memory transaction, so nothing can conflict.
                    Err(TxStop::Conflict) => unreachable!("a memory transaction reported a conflict"),
                };
                let TxView::Memory(view) = wrapped else { unreachable!() };
                for (tree, writes) in view.trees.iter().zip(view.writes.into_inner()) {
                    if writes.is_empty() {
                        continue;
                    }
                    let Tree::Memory(t) = tree else { unreachable!("a memory database holds memory trees") };
                    let mut map = t.write();
                    for (k, v) in writes {
                        match v {
                            Some(v) => map.insert(k, v),
                            None => map.remove(&k),
                        };
                    }
                }
                Ok(out)
            }
        }
    }
}

/// How a transaction closure stopped early.
pub(crate) enum TxStop<E> {
    /// With the caller's error: nothing is applied.
    Abort(E),
    /// sled saw a concurrent change: run the closure again.
    Conflict,
}

/// Why a transaction did not apply.
pub(crate) enum TxFailed<E> {
    Abort(E),
    Storage(StoreError),
}

/// The trees a transaction may span, in the form each backend needs.
pub(crate) struct TreeSet {
    pub trees: Vec<Tree>,
    sled: Vec<sled::Tree>,
}

impl TreeSet {
    pub fn new(trees: Vec<Tree>) -> TreeSet {
        let sled = trees
            .iter()
            .filter_map(|t| match t {
                Tree::Sled(t) => Some(t.clone()),
                Tree::Memory(_) => None,
            })
            .collect();
        TreeSet { trees, sled }
    }
}

impl std::ops::Index<usize> for TreeSet {
    type Output = Tree;
    fn index(&self, i: usize) -> &Tree {
        &self.trees[i]
    }
}

/// The end of the key range that starts with `prefix` (exclusive), or `None` when it runs to the end.
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
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
        }
    }

    /// Sets `key` to `value`; returns the value it replaced.
    pub fn insert(&self, key: &[u8], value: impl Into<IVec>) -> Result<Option<IVec>, StoreError> {
        match self {
            Tree::Sled(t) => Ok(t.insert(key, value)?),
            Tree::Memory(t) => Ok(t.write().insert(key.to_vec(), value.into())),
        }
    }

    /// Removes `key`; returns its value.
    pub fn remove(&self, key: &[u8]) -> Result<Option<IVec>, StoreError> {
        match self {
            Tree::Sled(t) => Ok(t.remove(key)?),
            Tree::Memory(t) => Ok(t.write().remove(key)),
        }
    }

    /// Removes everything.
    pub fn clear(&self) -> Result<(), StoreError> {
        match self {
            Tree::Sled(t) => t.clear()?,
            Tree::Memory(t) => t.write().clear(),
        }
        Ok(())
    }

    /// How many keys the tree holds.
    pub fn len(&self) -> usize {
        match self {
            Tree::Sled(t) => t.len(),
            Tree::Memory(t) => t.read().len(),
        }
    }

    /// Whether the tree holds nothing.
    pub fn is_empty(&self) -> bool {
        match self {
            Tree::Sled(t) => t.is_empty(),
            Tree::Memory(t) => t.read().is_empty(),
        }
    }

    /// Calls `f` with each entry from `from` on, in key order (or in reverse), until it breaks.
    /// `f` must not write to this tree (in memory it runs under the tree's read lock).
    pub fn visit(
        &self,
        from: &[u8],
        reverse: bool,
        f: impl FnMut(&[u8], &IVec) -> Result<ControlFlow<()>, StoreError>,
    ) -> Result<(), StoreError> {
        self.visit_range((Bound::Included(from), Bound::Unbounded), reverse, f)
    }

    /// [`Tree::visit`] over the keys that start with `prefix`.
    pub fn visit_prefix(
        &self,
        prefix: &[u8],
        reverse: bool,
        f: impl FnMut(&[u8], &IVec) -> Result<ControlFlow<()>, StoreError>,
    ) -> Result<(), StoreError> {
        let end = prefix_end(prefix);
        let upper = match &end {
            Some(e) => Bound::Excluded(e.as_slice()),
            None => Bound::Unbounded,
        };
        self.visit_range((Bound::Included(prefix), upper), reverse, f)
    }

    /// Every entry, in key order.
    pub fn visit_all(
        &self,
        f: impl FnMut(&[u8], &IVec) -> Result<ControlFlow<()>, StoreError>,
    ) -> Result<(), StoreError> {
        self.visit_range((Bound::Unbounded, Bound::Unbounded), false, f)
    }

    fn visit_range(
        &self,
        range: (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
        mut f: impl FnMut(&[u8], &IVec) -> Result<ControlFlow<()>, StoreError>,
    ) -> Result<(), StoreError> {
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
        }
        Ok(())
    }

    /// How many keys start with `prefix`.
    pub fn count_prefix(&self, prefix: &[u8]) -> Result<usize, StoreError> {
        let mut n = 0;
        self.visit_prefix(prefix, false, |_, _| {
            n += 1;
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(n)
    }
}

/// The trees as one transaction sees them.
pub(crate) enum TxView<'a> {
    Sled(&'a [TransactionalTree]),
    Memory(MemTxView<'a>),
}

/// A memory transaction: the trees as they were, and its own writes (`None`: removed) on top.
pub(crate) struct MemTxView<'a> {
    trees: &'a [Tree],
    writes: std::cell::RefCell<Vec<HashMap<Vec<u8>, Option<IVec>>>>,
}

impl From<UnabortableTransactionError> for TxAbort {
    fn from(e: UnabortableTransactionError) -> Self {
        match e {
            UnabortableTransactionError::Conflict => TxAbort(AbortKind::Conflict),
            UnabortableTransactionError::Storage(e) => TxAbort(AbortKind::Store(e.into())),
        }
    }
}

impl MemTxView<'_> {
    fn committed(&self, tree: usize, key: &[u8]) -> Option<IVec> {
        match &self.trees[tree] {
            Tree::Memory(t) => t.read().get(key).cloned(),
            Tree::Sled(_) => unreachable!("a memory transaction over a sled tree"),
        }
    }

    fn current(&self, tree: usize, key: &[u8]) -> Option<IVec> {
        match self.writes.borrow()[tree].get(key) {
            Some(written) => written.clone(),
            None => self.committed(tree, key),
        }
    }
}

impl TxView<'_> {
    /// The value under `key` in tree `tree`, including this transaction's writes.
    pub fn get(&self, tree: usize, key: &[u8]) -> Result<Option<IVec>, TxAbort> {
        match self {
            TxView::Sled(v) => Ok(v[tree].get(key)?),
            TxView::Memory(m) => Ok(m.current(tree, key)),
        }
    }

    /// Sets `key` in tree `tree`.
    pub fn insert(&self, tree: usize, key: &[u8], value: impl Into<IVec>) -> Result<(), TxAbort> {
        match self {
            TxView::Sled(v) => {
                v[tree].insert(key, value)?;
            }
            TxView::Memory(m) => {
                m.writes.borrow_mut()[tree].insert(key.to_vec(), Some(value.into()));
            }
        }
        Ok(())
    }

    /// Removes `key` from tree `tree`; returns its value.
    pub fn remove(&self, tree: usize, key: &[u8]) -> Result<Option<IVec>, TxAbort> {
        match self {
            TxView::Sled(v) => Ok(v[tree].remove(key)?),
            TxView::Memory(m) => {
                let old = m.current(tree, key);
                if old.is_some() {
                    m.writes.borrow_mut()[tree].insert(key.to_vec(), None);
                }
                Ok(old)
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
        let set = TreeSet::new(vec![db.open_tree("a").unwrap(), db.open_tree("b").unwrap()]);
        set[0].insert(b"k", &b"old"[..]).unwrap();
        let aborted: Result<(), TxFailed<&str>> = db.transaction(&set, |tx| {
            tx.insert(0, b"k", &b"new"[..]).map_err(|_| TxStop::Abort("store"))?;
            tx.insert(1, b"x", &b"1"[..]).map_err(|_| TxStop::Abort("store"))?;
            Err(TxStop::Abort("no"))
        });
        assert!(matches!(aborted, Err(TxFailed::Abort("no"))));
        assert_eq!(set[0].get(b"k").unwrap().as_deref(), Some(&b"old"[..]));
        assert!(set[1].is_empty());

        let seen: Result<_, TxFailed<()>> = db.transaction(&set, |tx| {
            let stop = |_| TxStop::Abort(());
            tx.insert(0, b"k", &b"new"[..]).map_err(stop)?;
            let own = tx.get(0, b"k").map_err(stop)?;
            let removed = tx.remove(0, b"k").map_err(stop)?;
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
