//! The in-memory backend: ordered maps, one per tree, and one lock that runs transactions one at a
//! time.
//!
//! Invariants: transactions run one at a time (one mutex), their writes are buffered and applied only
//! when the closure succeeds, so an aborted transaction leaves nothing; a committing transaction takes
//! one tree's write lock at a time, so a reader holding one tree's read lock while it reads another (an
//! index, then its table) can never deadlock with it.

use std::cell::RefCell;
use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use sled::IVec;

use super::{Tree, TxError, TxFailed, TxStop, TxView};

/// The in-memory database: its trees by name, and the lock that runs transactions one at a time.
#[derive(Default)]
pub(crate) struct MemDb {
    pub(super) trees: Mutex<BTreeMap<Vec<u8>, std::sync::Arc<MemTree>>>,
    transactions: Mutex<()>,
}

/// An in-memory tree.
#[derive(Default)]
pub(crate) struct MemTree {
    map: RwLock<BTreeMap<Vec<u8>, IVec>>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here leaves its map whole (single inserts and removes), so a panic
    // elsewhere cannot leave it half-changed: poisoning is ignored.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl MemTree {
    pub(super) fn read(&self) -> RwLockReadGuard<'_, BTreeMap<Vec<u8>, IVec>> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn write(&self) -> RwLockWriteGuard<'_, BTreeMap<Vec<u8>, IVec>> {
        self.map.write().unwrap_or_else(|p| p.into_inner())
    }
}

impl MemDb {
    /// Runs `f` once, alone; applies its buffered writes only if it succeeds.
    pub(super) fn transaction<T, E>(
        &self,
        trees: &[Tree],
        f: impl Fn(&TxView) -> Result<T, TxStop<E>>,
    ) -> Result<T, TxFailed<E>> {
        let _one_at_a_time = lock(&self.transactions);
        let view = TxView::Memory(MemTxView { trees, writes: RefCell::new(vec![HashMap::default(); trees.len()]) });
        let out = match f(&view) {
            Ok(v) => v,
            Err(TxStop::Abort(e)) => return Err(TxFailed::Abort(e)),
            // Nothing runs concurrently with a memory transaction, so nothing can conflict.
            Err(TxStop::Conflict) => unreachable!("a memory transaction reported a conflict"),
        };
        let TxView::Memory(view) = view else { unreachable!() };
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

/// A memory transaction: the trees as they were, and its own writes (`None`: removed) on top.
pub(crate) struct MemTxView<'a> {
    trees: &'a [Tree],
    writes: RefCell<Vec<HashMap<Vec<u8>, Option<IVec>>>>,
}

impl MemTxView<'_> {
    fn committed(&self, tree: usize, key: &[u8]) -> Option<IVec> {
        match &self.trees[tree] {
            Tree::Memory(t) => t.read().get(key).cloned(),
            _ => unreachable!("a memory transaction over another backend's tree"),
        }
    }

    pub(super) fn get(&self, tree: usize, key: &[u8]) -> Result<Option<IVec>, TxError> {
        Ok(match self.writes.borrow()[tree].get(key) {
            Some(written) => written.clone(),
            None => self.committed(tree, key),
        })
    }

    pub(super) fn insert(&self, tree: usize, key: &[u8], value: IVec) {
        self.writes.borrow_mut()[tree].insert(key.to_vec(), Some(value));
    }

    pub(super) fn remove(&self, tree: usize, key: &[u8]) {
        self.writes.borrow_mut()[tree].insert(key.to_vec(), None);
    }
}
