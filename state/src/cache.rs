//! Decoded records, remembered with the bytes they were decoded from.
//!
//! The control loop reads the same open jobs and attempts every round, and most of them have not
//! changed since the last: parsing their JSON again was a large share of a round. A read that finds
//! the stored bytes equal to the cached ones clones the cached record instead (and reuses the index
//! values already extracted from it). Coherent without any invalidation: a hit needs byte equality
//! with what is stored now, so a record changed by anyone, in any way, is decoded afresh.
//!
//! Writes fill it too: a record put in a transaction is remembered with the bytes written (and the
//! index values worked out for them), so the next read of it, and the next write's index upkeep,
//! find it without parsing. An entry for bytes a failed transaction never wrote is never hit.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::{Record, StoreError};

/// Stored bytes cached at most (the decoded copies take about as much again); past it the cache starts
/// again empty, which is cheap (the next reads refill it) and keeps a server's memory flat.
const MAX_BYTES: usize = 16 * 1024 * 1024;

struct Cached {
    bytes: sled::IVec,
    value: Arc<dyn Any + Send + Sync>,
    /// Index values already extracted from these bytes, by JSON pointer.
    pointers: Vec<(&'static str, Option<String>)>,
}

/// Bytes held in total, and per table, per key: the last decoded record. Keyed with std's seeded
/// hasher, not the faster one the store's other maps use: record keys include what clients send
/// (`Idempotency-Key`), and a predictable hash would let a client pile its keys into one bucket.
type Tables = (usize, HashMap<&'static str, HashMap<String, Cached>>);

/// Decoded records by table and key (see the module doc).
#[derive(Default)]
pub(crate) struct RecordCache {
    tables: Mutex<Tables>,
}

/// What a lookup found for bytes read from the store.
pub(crate) enum Lookup<R> {
    /// The cached record (shared, not copied) and, if asked for and known, the index value at the
    /// pointer.
    Hit(Arc<R>, Option<Option<String>>),
    Miss,
}

/// Whether cached bytes are the stored ones. The same buffer (a memory store hands out the bytes
/// it holds, not copies) is equal without comparing its contents.
fn same_bytes(cached: &[u8], stored: &[u8]) -> bool {
    std::ptr::eq(cached, stored) || cached == stored
}

impl RecordCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached record of `table`/`key` if it was decoded from exactly `bytes`.
    pub(crate) fn get<R: Send + Sync + 'static>(
        &self,
        table: &'static str,
        key: &str,
        bytes: &[u8],
        pointer: Option<&'static str>,
    ) -> Lookup<R> {
        let guard = self.lock();
        let Some(c) = guard.1.get(table).and_then(|t| t.get(key)) else { return Lookup::Miss };
        if !same_bytes(&c.bytes, bytes) {
            return Lookup::Miss;
        }
        let Ok(value) = c.value.clone().downcast::<R>() else { return Lookup::Miss };
        let index = pointer.and_then(|p| c.pointers.iter().find(|(q, _)| *q == p).map(|(_, v)| v.clone()));
        Lookup::Hit(value, index)
    }

    /// The index values at `pointers` of the record stored as `bytes`, if all are known.
    pub(crate) fn index_values(
        &self,
        table: &'static str,
        key: &str,
        bytes: &[u8],
        pointers: &[&'static str],
    ) -> Option<Vec<Option<String>>> {
        let guard = self.lock();
        let c = guard.1.get(table)?.get(key)?;
        if !same_bytes(&c.bytes, bytes) {
            return None;
        }
        pointers.iter().map(|p| c.pointers.iter().find(|(q, _)| q == p).map(|(_, v)| v.clone())).collect()
    }

    /// The record stored as `bytes`: the cached one when it was decoded from these bytes, else
    /// decoded now and remembered.
    pub(crate) fn decode<R: Record>(&self, key: &str, bytes: sled::IVec) -> Result<R, StoreError> {
        Ok(Arc::unwrap_or_clone(self.decode_shared(key, bytes)?))
    }

    /// [`RecordCache::decode`], the record shared with the cache instead of copied.
    pub(crate) fn decode_shared<R: Record>(&self, key: &str, bytes: sled::IVec) -> Result<Arc<R>, StoreError> {
        if let Lookup::Hit(r, _) = self.get::<R>(R::TABLE.name, key, &bytes, None) {
            return Ok(r);
        }
        let r: Arc<R> = Arc::new(crate::encoding::decode(&bytes, R::TABLE.name, key)?);
        self.put_shared(R::TABLE.name, key, bytes, &r, Vec::new());
        Ok(r)
    }

    /// Remembers `value` as decoded from `bytes`, with the index values already extracted from them
    /// (by JSON pointer).
    pub(crate) fn put<R: Clone + Send + Sync + 'static>(
        &self,
        table: &'static str,
        key: &str,
        bytes: sled::IVec,
        value: &R,
        index: Vec<(&'static str, Option<String>)>,
    ) {
        self.put_with(table, key, bytes, || Arc::new(value.clone()), index);
    }

    /// [`RecordCache::put`] of a record already shared (it is kept, not copied).
    pub(crate) fn put_shared<R: Send + Sync + 'static>(
        &self,
        table: &'static str,
        key: &str,
        bytes: sled::IVec,
        value: &Arc<R>,
        index: Vec<(&'static str, Option<String>)>,
    ) {
        self.put_with(table, key, bytes, || value.clone(), index);
    }

    fn put_with<R: Send + Sync + 'static>(
        &self,
        table: &'static str,
        key: &str,
        bytes: sled::IVec,
        value: impl FnOnce() -> Arc<R>,
        index: Vec<(&'static str, Option<String>)>,
    ) {
        let mut guard = self.lock();
        let (held, tables) = &mut *guard;
        if *held + bytes.len() > MAX_BYTES {
            tables.clear();
            *held = 0;
        }
        let t = tables.entry(table).or_default();
        match t.get_mut(key) {
            Some(c) if same_bytes(&c.bytes, &bytes) && c.value.is::<R>() => {
                for (p, v) in index {
                    if !c.pointers.iter().any(|(q, _)| *q == p) {
                        c.pointers.push((p, v));
                    }
                }
            }
            _ => {
                *held += bytes.len();
                let fresh = Cached { bytes, value: value(), pointers: index };
                if let Some(old) = t.insert(key.to_string(), fresh) {
                    *held -= old.bytes.len();
                }
            }
        }
    }
}
