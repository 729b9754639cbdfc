//! `export` / `import`: every tree as JSON lines, for backup and recovery.
//!
//! ```text
//! {"kind":"header","format":"spillway-state","version":1,"schema_version":1,"last_seq":42}
//! {"kind":"table","name":"jobs","indexes":[{"name":"state","pointer":"/state"}]}
//! {"kind":"record","table":"jobs","key":"j-1","value":{...the stored JSON, byte for byte...}}
//! {"kind":"setting","key":"max_hourly_spend","value":250.0}
//! {"kind":"event","value":{"seq":1,...}}
//! ```
//! Index trees are not exported: import recomputes them from the table definitions.

use std::io::{BufRead, BufReader, Read, Write};
use std::ops::ControlFlow;
use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::encoding::{
    EVENTS_TREE, META_IMPORT_INCOMPLETE, META_LAST_SEQ, META_SCHEMA_VERSION, META_TREE, SETTINGS_TREE, StoredIndex,
    StoredTable, envelope, index_keys, index_tree, open_envelope, table_tree,
};
use crate::kv::Tree;
use crate::registry::{EVENTS_IX, SETTINGS_IX};
use crate::store::{migrate, recorded_tables};
use crate::{Event, Store, StoreError};

const FORMAT: &str = "spillway-state";
const FORMAT_VERSION: u32 = 1;

/// What an export wrote or an import read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DumpSummary {
    /// Tables.
    pub tables: u64,
    /// Records over all tables.
    pub records: u64,
    /// Events.
    pub events: u64,
    /// Settings.
    pub settings: u64,
}

#[derive(Serialize)]
struct Header<'a> {
    kind: &'a str,
    format: &'a str,
    version: u32,
    schema_version: u32,
    last_seq: u64,
}

#[derive(Serialize)]
struct TableLine<'a> {
    kind: &'a str,
    name: &'a str,
    indexes: &'a [StoredIndex],
}

/// Any line; which fields are required depends on `kind`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line<'a> {
    kind: String,
    format: Option<String>,
    version: Option<u32>,
    schema_version: Option<u32>,
    last_seq: Option<u64>,
    name: Option<String>,
    indexes: Option<Vec<StoredIndex>>,
    table: Option<String>,
    key: Option<String>,
    #[serde(borrow)]
    value: Option<&'a RawValue>,
}

fn json_str(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

impl Store {
    /// Writes every table (with its index definitions), setting and event as JSON lines. Writers wait
    /// while it runs, so the export is a consistent snapshot.
    pub fn export(&self, w: impl Write) -> Result<DumpSummary, StoreError> {
        let mut w = std::io::BufWriter::new(w);
        let _exclusive = self.inner.writers_exclusive();
        // Other servers may be writing to a shared store: read one consistent state of it.
        let db = &self.inner.db.snapshot()?;
        let meta = db.open_tree(META_TREE)?;
        let last_seq = db.allocated_seq(&meta, META_LAST_SEQ.as_bytes())?;
        let header = Header {
            kind: "header",
            format: FORMAT,
            version: FORMAT_VERSION,
            schema_version: self.inner.schema_version,
            last_seq,
        };
        let mut summary = DumpSummary::default();
        writeln!(w, "{}", serde_json::to_string(&header).map_err(std::io::Error::other)?)?;
        let mut defs = recorded_tables(db)?;
        defs.sort_by(|a, b| a.name.cmp(&b.name));
        for def in &defs {
            let line = TableLine { kind: "table", name: &def.name, indexes: &def.indexes };
            writeln!(w, "{}", serde_json::to_string(&line).map_err(std::io::Error::other)?)?;
            summary.tables += 1;
            db.open_tree(table_tree(&def.name))?.visit_all(|k, v| {
                let key = std::str::from_utf8(k).map_err(|_| StoreError::Decode {
                    table: def.name.clone(),
                    what: format!("key {k:?}"),
                    reason: "not UTF-8".into(),
                })?;
                let json = open_envelope(v, &def.name, key)?;
                write!(w, r#"{{"kind":"record","table":{},"key":{},"value":"#, json_str(&def.name), json_str(key))?;
                w.write_all(json)?;
                w.write_all(b"}\n")?;
                summary.records += 1;
                Ok(ControlFlow::Continue(()))
            })?;
        }
        db.open_tree(SETTINGS_TREE)?.visit_all(|k, v| {
            let key = String::from_utf8_lossy(k);
            write!(w, r#"{{"kind":"setting","key":{},"value":"#, json_str(&key))?;
            w.write_all(open_envelope(v, "settings", &key)?)?;
            w.write_all(b"}\n")?;
            summary.settings += 1;
            Ok(ControlFlow::Continue(()))
        })?;
        db.open_tree(EVENTS_TREE)?.visit_all(|_, v| {
            w.write_all(br#"{"kind":"event","value":"#)?;
            w.write_all(open_envelope(v, "events", "event")?)?;
            w.write_all(b"}\n")?;
            summary.events += 1;
            Ok(ControlFlow::Continue(()))
        })?;
        w.flush()?;
        Ok(summary)
    }

    /// Loads an export into this store, which must hold no records, settings or events. Recomputes
    /// the indexes, restores the event sequence, runs migrations if the export is from an older
    /// schema, and flushes. If it fails part-way, the store refuses to open until the directory is
    /// deleted (the import is never silently half-applied).
    pub fn import(&self, r: impl Read) -> Result<DumpSummary, StoreError> {
        let db = &self.inner.db;
        let reg = self.inner.registry();
        let mut empty = reg.trees[EVENTS_IX].is_empty()? && reg.trees[SETTINGS_IX].is_empty()?;
        for h in reg.tables.values() {
            empty = empty && reg.trees[h.tree].is_empty()?;
        }
        if !empty {
            return Err(StoreError::NotEmpty { path: self.inner.path.clone() });
        }
        let meta = db.open_tree(META_TREE)?;
        meta.insert(META_IMPORT_INCOMPLETE.as_bytes(), &[1u8][..])?;
        db.flush()?;

        let mut summary = DumpSummary::default();
        let mut header_seq = None;
        let mut schema_version = self.inner.schema_version;
        let mut tables: Vec<(StoredTable, Tree, Vec<Tree>)> = Vec::new();
        let mut last_event = 0u64;
        for (n, line) in BufReader::new(r).lines().enumerate() {
            let number = n + 1;
            let err = |reason: String| StoreError::Import { line: number, reason };
            let text = line?;
            if text.trim().is_empty() {
                continue;
            }
            let l: Line<'_> = serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
            if header_seq.is_none() && l.kind != "header" {
                return Err(err(format!("the first line must be the header, found kind {:?}", l.kind)));
            }
            let need = |v: Option<String>, field: &str| v.ok_or_else(|| err(format!("{} line lacks {field}", l.kind)));
            match l.kind.as_str() {
                "header" => {
                    if header_seq.is_some() {
                        return Err(err("a second header".into()));
                    }
                    if l.format.as_deref() != Some(FORMAT) || l.version != Some(FORMAT_VERSION) {
                        return Err(err(format!(
                            "not a {FORMAT} version {FORMAT_VERSION} export (format {:?}, version {:?})",
                            l.format, l.version
                        )));
                    }
                    let v = l.schema_version.ok_or_else(|| err("header lacks schema_version".into()))?;
                    if v > self.inner.schema_version {
                        return Err(StoreError::NewerSchema {
                            path: self.inner.path.clone(),
                            found: v,
                            supported: self.inner.schema_version,
                        });
                    }
                    schema_version = v;
                    header_seq = Some(l.last_seq.ok_or_else(|| err("header lacks last_seq".into()))?);
                }
                "table" => {
                    let def = StoredTable {
                        name: need(l.name, "name")?,
                        indexes: l.indexes.ok_or_else(|| err("table line lacks indexes".into()))?,
                    };
                    def.validate().map_err(|e| err(e.to_string()))?;
                    if tables.iter().any(|(t, _, _)| t.name == def.name) {
                        return Err(err(format!("table {} declared twice", def.name)));
                    }
                    self.register(def.clone())?;
                    let tree = db.open_tree(table_tree(&def.name))?;
                    let ix = def
                        .indexes
                        .iter()
                        .map(|i| db.open_tree(index_tree(&def.name, &i.name)))
                        .collect::<Result<_, _>>()?;
                    tables.push((def, tree, ix));
                    summary.tables += 1;
                }
                "record" => {
                    let table = need(l.table, "table")?;
                    let key = need(l.key, "key")?;
                    let value = l.value.ok_or_else(|| err("record line lacks value".into()))?;
                    let Some((def, tree, ixs)) = tables.iter().find(|(t, _, _)| t.name == table) else {
                        return Err(err(format!("record for table {table} before its table line")));
                    };
                    if key.is_empty() {
                        return Err(err("empty record key".into()));
                    }
                    let json = value.get().as_bytes();
                    let keys = index_keys(def, &key, json).map_err(|e| err(e.to_string()))?;
                    if tree.insert(key.as_bytes(), envelope(json))?.is_some() {
                        return Err(err(format!("record {key:?} of table {table} appears twice")));
                    }
                    for (ix, k) in ixs.iter().zip(keys) {
                        if let Some(k) = k {
                            ix.insert(&k, &[][..])?;
                        }
                    }
                    summary.records += 1;
                }
                "setting" => {
                    let key = need(l.key, "key")?;
                    let value = l.value.ok_or_else(|| err("setting line lacks value".into()))?;
                    reg.trees[SETTINGS_IX].insert(key.as_bytes(), envelope(value.get().as_bytes()))?;
                    summary.settings += 1;
                }
                "event" => {
                    let value = l.value.ok_or_else(|| err("event line lacks value".into()))?;
                    let event: Event = serde_json::from_str(value.get()).map_err(|e| err(format!("event: {e}")))?;
                    if event.seq <= last_event {
                        return Err(err(format!("event seq {} does not follow {last_event}", event.seq)));
                    }
                    last_event = event.seq;
                    reg.trees[EVENTS_IX].insert(&event.seq.to_be_bytes(), envelope(value.get().as_bytes()))?;
                    summary.events += 1;
                }
                other => return Err(err(format!("unknown kind {other:?}"))),
            }
        }
        let Some(header_seq) = header_seq else {
            return Err(StoreError::Import { line: 1, reason: "empty file: no header".into() });
        };
        let last_seq = header_seq.max(last_event);
        db.restore_seq(&meta, META_LAST_SEQ.as_bytes(), last_seq)?;
        if schema_version < self.inner.schema_version {
            meta.insert(META_SCHEMA_VERSION.as_bytes(), &schema_version.to_be_bytes()[..])?;
            migrate(db, &self.inner.path, schema_version, self.inner.schema)?;
        }
        db.flush()?;
        meta.remove(META_IMPORT_INCOMPLETE.as_bytes())?;
        db.flush()?;
        self.inner.last_seq.fetch_max(last_seq, Ordering::SeqCst);
        Ok(summary)
    }
}
