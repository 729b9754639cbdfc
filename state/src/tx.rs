//! The view of the store inside a transaction.

use std::fmt;

use crate::cache::RecordCache;
use crate::encoding::{META_LAST_SEQ, StoredTable, decode, encode, envelope, index_key, index_values, open_envelope};
use crate::kv::{TxError, TxView};
use crate::registry::{EVENTS_IX, META_IX, Registry, SETTINGS_IX, TableHandle};
use crate::{EventDraft, Record, StoreError, TableDef};

/// Why a transaction closure stopped. Build one with [`TxAbort::new`] to abort with your own error
/// (it comes back as [`StoreError::Aborted`]; `downcast_ref` recovers it); store errors convert with `?`.
pub struct TxAbort(pub(crate) AbortKind);

pub(crate) enum AbortKind {
    User(Box<dyn std::error::Error + Send + Sync>),
    Store(StoreError),
    /// The backend asks for the closure to be run again.
    Conflict,
}

impl From<TxError> for TxAbort {
    fn from(e: TxError) -> Self {
        match e {
            TxError::Conflict => TxAbort(AbortKind::Conflict),
            TxError::Storage(e) => TxAbort(AbortKind::Store(e)),
        }
    }
}

impl TxAbort {
    /// Abort the transaction with the caller's error; nothing it wrote is applied.
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        TxAbort(AbortKind::User(error.into()))
    }
}

impl From<StoreError> for TxAbort {
    fn from(e: StoreError) -> Self {
        TxAbort(AbortKind::Store(e))
    }
}

impl fmt::Debug for TxAbort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            AbortKind::User(e) => write!(f, "TxAbort({e:?})"),
            AbortKind::Store(e) => write!(f, "TxAbort({e:?})"),
            AbortKind::Conflict => write!(f, "TxAbort(Conflict)"),
        }
    }
}

impl fmt::Display for TxAbort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            AbortKind::User(e) => e.fmt(f),
            AbortKind::Store(e) => e.fmt(f),
            AbortKind::Conflict => f.write_str("transaction conflict"),
        }
    }
}

/// Reads and writes inside [`Store::transaction`](crate::Store::transaction). Everything done through
/// one `Tx` is applied atomically (tables, their indexes, settings and the event log), or not at all.
pub struct Tx<'a> {
    reg: &'a Registry,
    view: &'a TxView<'a>,
    cache: &'a RecordCache,
    /// The last sequence number handed out by this transaction.
    pub(crate) last_seq: Option<u64>,
    /// A table first used in this transaction: the store registers it and runs the closure again.
    pub(crate) missing: Option<TableDef>,
}

impl<'a> Tx<'a> {
    pub(crate) fn new(reg: &'a Registry, view: &'a TxView<'a>, cache: &'a RecordCache) -> Self {
        Tx { reg, view, cache, last_seq: None, missing: None }
    }

    /// The index values of the record stored as `bytes` (from the cache when it has them).
    fn stored_index_values<R: Record>(
        &self,
        def: &StoredTable,
        key: &str,
        bytes: &[u8],
    ) -> Result<Vec<Option<String>>, StoreError> {
        let pointers: Vec<&'static str> = R::TABLE.indexes.iter().map(|i| i.pointer).collect();
        match self.cache.index_values(R::TABLE.name, key, bytes, &pointers) {
            Some(values) => Ok(values),
            None => index_values(def, key, open_envelope(bytes, &def.name, key)?),
        }
    }

    fn table(&mut self, def: &TableDef) -> Result<&'a TableHandle, TxAbort> {
        match self.reg.tables.get(def.name) {
            Some(h) if h.def.matches(def) => Ok(h),
            _ => {
                self.missing = Some(*def);
                Err(StoreError::Definition(format!("table {} is not registered yet", def.name)).into())
            }
        }
    }

    /// Inserts or replaces the record with the same key, keeping its table's indexes in step.
    pub fn put<R: Record>(&mut self, record: &R) -> Result<(), TxAbort> {
        self.write(record, true)
    }

    /// Inserts a record under a key no transaction has used before: one named by an event number
    /// this transaction took ([`Tx::append_event`]), which is never handed out twice. Unlike
    /// [`Tx::put`] it does not read the key first (there is no earlier version whose index entries
    /// would need removing), which saves a round trip to a shared store. A key that did exist would
    /// be overwritten with its old index entries left behind: use [`Tx::put`] for any other key.
    pub fn put_new<R: Record>(&mut self, record: &R) -> Result<(), TxAbort> {
        self.write(record, false)
    }

    /// Writes a record and its index entries; `replaces`: whether the key may hold an earlier
    /// version (read first, so that its index entries are removed).
    fn write<R: Record>(&mut self, record: &R, replaces: bool) -> Result<(), TxAbort> {
        let h = self.table(&R::TABLE)?;
        let key = record.key();
        check_key(&h.def, &key)?;
        let json = serde_json::to_vec(record)
            .map_err(|e| StoreError::Encode { table: h.def.name.clone(), reason: e.to_string() })?;
        let bytes = sled::IVec::from(envelope(&json));
        let old = if replaces { self.view.get(h.tree, key.as_bytes())? } else { None };
        let mut values = Vec::new();
        if !h.indexes.is_empty() {
            let new_values = match record.index_values() {
                Some(values) => {
                    debug_assert_eq!(
                        values,
                        index_values(&h.def, &key, &json)?,
                        "{}: Record::index_values disagrees with the index pointers",
                        h.def.name
                    );
                    values
                }
                None => index_values(&h.def, &key, &json)?,
            };
            let old_values = match &old {
                Some(old) => self.stored_index_values::<R>(&h.def, &key, old)?,
                None => vec![None; h.indexes.len()],
            };
            for ((ix, old), new) in h.indexes.iter().zip(&old_values).zip(&new_values) {
                if old == new {
                    continue;
                }
                if let Some(old) = old {
                    self.view.remove(*ix, &index_key(old, &key))?;
                }
                if let Some(new) = new {
                    self.view.insert(*ix, &index_key(new, &key), &[][..])?;
                }
            }
            values = R::TABLE.indexes.iter().map(|i| i.pointer).zip(new_values).collect();
        }
        self.view.insert(h.tree, key.as_bytes(), bytes.clone())?;
        self.cache.put(R::TABLE.name, &key, bytes, record, values);
        Ok(())
    }

    /// Removes the record with this key (and its index entries); returns it if it existed.
    pub fn delete<R: Record>(&mut self, key: &str) -> Result<Option<R>, TxAbort> {
        let h = self.table(&R::TABLE)?;
        let Some(old) = self.view.take(h.tree, key.as_bytes())? else {
            return Ok(None);
        };
        if !h.indexes.is_empty() {
            for (ix, v) in h.indexes.iter().zip(self.stored_index_values::<R>(&h.def, key, &old)?) {
                if let Some(v) = v {
                    self.view.remove(*ix, &index_key(&v, key))?;
                }
            }
        }
        Ok(Some(self.cache.decode::<R>(key, old)?))
    }

    /// The record with this key, including changes made earlier in this transaction.
    pub fn get<R: Record>(&mut self, key: &str) -> Result<Option<R>, TxAbort> {
        let h = self.table(&R::TABLE)?;
        match self.view.get(h.tree, key.as_bytes())? {
            Some(bytes) => Ok(Some(self.cache.decode::<R>(key, bytes)?)),
            None => Ok(None),
        }
    }

    /// Appends to the event log; returns the event's sequence number. Numbers are strictly increasing
    /// in the order readers see them, so a reader that has seen `n` never later finds an event below
    /// `n` (on PostgreSQL a retried transaction's number is not reused, which leaves a gap).
    pub fn append_event(&mut self, draft: EventDraft) -> Result<u64, TxAbort> {
        let seq = self.view.next_seq(META_IX, META_LAST_SEQ.as_bytes())?;
        let bytes = encode(&draft.with_seq(seq), "events")?;
        self.view.insert(EVENTS_IX, &seq.to_be_bytes(), bytes)?;
        self.last_seq = Some(seq);
        Ok(seq)
    }

    /// Removes an event from the log by its stored key (trimming old events).
    pub(crate) fn remove_event(&mut self, key: &[u8]) -> Result<(), TxAbort> {
        self.view.remove(EVENTS_IX, key)?;
        Ok(())
    }

    /// A setting (string key, any serde value).
    pub fn setting<T: serde::de::DeserializeOwned>(&mut self, key: &str) -> Result<Option<T>, TxAbort> {
        match self.view.get(SETTINGS_IX, key.as_bytes())? {
            Some(bytes) => Ok(Some(decode(&bytes, "settings", key)?)),
            None => Ok(None),
        }
    }

    /// Sets a setting.
    pub fn set_setting<T: serde::Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), TxAbort> {
        self.view.insert(SETTINGS_IX, key.as_bytes(), encode(value, "settings")?)?;
        Ok(())
    }

    /// Removes a setting; returns whether it existed.
    pub fn delete_setting(&mut self, key: &str) -> Result<bool, TxAbort> {
        Ok(self.view.take(SETTINGS_IX, key.as_bytes())?.is_some())
    }
}

fn check_key(table: &StoredTable, key: &str) -> Result<(), StoreError> {
    if key.is_empty() {
        return Err(StoreError::Encode { table: table.name.clone(), reason: "the record key is empty".into() });
    }
    Ok(())
}
