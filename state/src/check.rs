//! `check`: indexes against tables, and every stored value against its encoding.

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use serde::Serialize;

use crate::encoding::{
    EVENTS_TREE, META_TREE, SETTINGS_TREE, StoredTable, decode, index_keys, open_envelope, split_index_key,
};
use crate::store::recorded_tables;
use crate::{Event, Store, StoreError, TableDef};

/// At most this many problems are listed; the counts stay exact.
const MAX_PROBLEMS: usize = 100;

/// The result of [`Store::check`].
#[derive(Clone, Debug, Default, Serialize)]
pub struct CheckReport {
    /// One entry per table checked.
    pub tables: Vec<TableReport>,
    /// Events in the log.
    pub events: u64,
    /// Settings stored.
    pub settings: u64,
    /// Total number of problems found.
    pub problem_count: u64,
    /// The first problems, each naming the table, index and key concerned.
    pub problems: Vec<String>,
}

/// One table's counts.
#[derive(Clone, Debug, Serialize)]
pub struct TableReport {
    /// The table.
    pub name: String,
    /// Records in it.
    pub records: u64,
    /// Its indexes.
    pub indexes: Vec<IndexReport>,
}

/// One index's counts.
#[derive(Clone, Debug, Serialize)]
pub struct IndexReport {
    /// The index.
    pub name: String,
    /// Its JSON pointer.
    pub pointer: String,
    /// Entries in the index tree.
    pub entries: u64,
    /// Records whose entry is missing.
    pub missing: u64,
    /// Entries that no record (or no longer the record) produces.
    pub stale: u64,
}

impl CheckReport {
    /// No problem found.
    pub fn is_consistent(&self) -> bool {
        self.problem_count == 0
    }

    fn problem(&mut self, p: String) {
        self.problem_count += 1;
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(p);
        }
    }
}

impl Store {
    /// Checks the given tables' indexes against their records (as `tables` defines them), and every
    /// stored record, event and setting against its encoding. Writers wait while it runs.
    pub fn check(&self, tables: &[TableDef]) -> Result<CheckReport, StoreError> {
        let recorded = recorded_tables(&self.inner.db)?;
        let mut report = CheckReport::default();
        let mut defs = Vec::new();
        for t in tables {
            let def = StoredTable::from_def(t);
            def.validate()?;
            if let Some(r) = recorded.iter().find(|r| r.name == def.name)
                && *r != def
            {
                report.problem(format!(
                    "table {}: the store records indexes {:?}, the caller defines {:?} (opening the table with \
                     the new definition rebuilds them)",
                    def.name, r.indexes, def.indexes
                ));
            }
            defs.push(def);
        }
        self.check_defs(defs, report)
    }

    /// Checks every table recorded in the store, with the index definitions recorded when each was
    /// first used (what `spillway state check` runs, without knowing the Rust types).
    pub fn check_all(&self) -> Result<CheckReport, StoreError> {
        self.check_defs(recorded_tables(&self.inner.db)?, CheckReport::default())
    }

    fn check_defs(&self, defs: Vec<StoredTable>, mut report: CheckReport) -> Result<CheckReport, StoreError> {
        let _exclusive = self.inner.writers_exclusive();
        // Other servers may be writing to a shared store: read one consistent state of it.
        let db = &self.inner.db.snapshot()?;
        for def in defs {
            let table = db.open_tree(crate::encoding::table_tree(&def.name))?;
            let mut expected: Vec<BTreeSet<Vec<u8>>> = vec![BTreeSet::new(); def.indexes.len()];
            let mut records = 0;
            table.visit_all(|k, v| {
                records += 1;
                let key = String::from_utf8_lossy(k).into_owned();
                let keys = open_envelope(v, &def.name, &key).and_then(|json| {
                    serde_json::from_slice::<serde_json::Value>(json).map_err(|e| StoreError::Decode {
                        table: def.name.clone(),
                        what: key.clone(),
                        reason: e.to_string(),
                    })?;
                    index_keys(&def, &key, json)
                });
                match keys {
                    Ok(keys) => {
                        for (set, k) in expected.iter_mut().zip(keys) {
                            set.extend(k);
                        }
                    }
                    Err(e) => report.problem(format!("table {}: record {key:?}: {e}", def.name)),
                }
                Ok(ControlFlow::Continue(()))
            })?;
            let mut indexes = Vec::new();
            for (ix, want) in def.indexes.iter().zip(expected) {
                let tree = db.open_tree(crate::encoding::index_tree(&def.name, &ix.name))?;
                let (mut entries, mut stale) = (0, 0);
                let mut found = BTreeSet::new();
                tree.visit_all(|k, _| {
                    entries += 1;
                    if !want.contains(k) {
                        stale += 1;
                        let (value, key) = split_index_key(k).unwrap_or(("?", "?"));
                        report.problem(format!(
                            "index {}.{}: entry {value:?} -> {key:?} matches no record",
                            def.name, ix.name
                        ));
                    }
                    found.insert(k.to_vec());
                    Ok(ControlFlow::Continue(()))
                })?;
                let mut missing = 0;
                for k in want.difference(&found) {
                    missing += 1;
                    let (value, key) = split_index_key(k).unwrap_or(("?", "?"));
                    report.problem(format!(
                        "index {}.{}: record {key:?} (value {value:?}) has no entry",
                        def.name, ix.name
                    ));
                }
                indexes.push(IndexReport {
                    name: ix.name.clone(),
                    pointer: ix.pointer.clone(),
                    entries,
                    missing,
                    stale,
                });
            }
            report.tables.push(TableReport { name: def.name.clone(), records, indexes });
        }
        let mut prev = 0;
        db.open_tree(EVENTS_TREE)?.visit_all(|k, v| {
            report.events += 1;
            let Ok(seq) = <[u8; 8]>::try_from(k).map(u64::from_be_bytes) else {
                report.problem(format!("events: malformed key {k:?}"));
                return Ok(ControlFlow::Continue(()));
            };
            match decode::<Event>(v, "events", &format!("event {seq}")) {
                Ok(e) if e.seq != seq => report.problem(format!("events: event stored under {seq} says seq {}", e.seq)),
                Ok(_) => {}
                Err(e) => report.problem(e.to_string()),
            }
            prev = seq;
            Ok(ControlFlow::Continue(()))
        })?;
        let meta = db.open_tree(META_TREE)?;
        let last = db.allocated_seq(&meta, crate::encoding::META_LAST_SEQ.as_bytes())?;
        if prev > last {
            report.problem(format!("events: newest event is {prev} but the recorded last sequence is {last}"));
        }
        db.open_tree(SETTINGS_TREE)?.visit_all(|k, v| {
            report.settings += 1;
            let key = String::from_utf8_lossy(k);
            if let Err(e) = decode::<serde_json::Value>(v, "settings", &key) {
                report.problem(e.to_string());
            }
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(report)
    }
}
