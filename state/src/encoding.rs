//! How things are laid out in sled: tree names, the value envelope, index keys.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{StoreError, TableDef};

/// The first byte of every stored value. A future encoding gets a new number; old values stay readable
/// because the decoder dispatches on it.
pub(crate) const ENVELOPE_V1: u8 = 1;

pub(crate) const META_TREE: &str = "meta";
pub(crate) const EVENTS_TREE: &str = "events";
pub(crate) const SETTINGS_TREE: &str = "settings";

pub(crate) const META_SCHEMA_VERSION: &str = "schema_version";
pub(crate) const META_LAST_SEQ: &str = "last_seq";
pub(crate) const META_IMPORT_INCOMPLETE: &str = "import_incomplete";
pub(crate) const META_TABLE_PREFIX: &str = "table/";

pub(crate) fn table_tree(table: &str) -> String {
    format!("t/{table}")
}

pub(crate) fn index_tree(table: &str, index: &str) -> String {
    format!("i/{table}/{index}")
}

/// Wraps JSON bytes in the versioned envelope.
pub(crate) fn envelope(json: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(json.len() + 1);
    v.push(ENVELOPE_V1);
    v.extend_from_slice(json);
    v
}

/// The JSON bytes inside an envelope.
pub(crate) fn open_envelope<'a>(bytes: &'a [u8], table: &str, what: &str) -> Result<&'a [u8], StoreError> {
    match bytes.split_first() {
        Some((&ENVELOPE_V1, json)) => Ok(json),
        Some((v, _)) => Err(StoreError::Decode {
            table: table.into(),
            what: what.into(),
            reason: format!("unknown envelope version {v}"),
        }),
        None => Err(StoreError::Decode { table: table.into(), what: what.into(), reason: "empty value".into() }),
    }
}

pub(crate) fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8], table: &str, what: &str) -> Result<T, StoreError> {
    let json = open_envelope(bytes, table, what)?;
    serde_json::from_slice(json).map_err(|e| StoreError::Decode {
        table: table.into(),
        what: what.into(),
        reason: e.to_string(),
    })
}

pub(crate) fn encode<T: Serialize + ?Sized>(value: &T, table: &str) -> Result<Vec<u8>, StoreError> {
    let json =
        serde_json::to_vec(value).map_err(|e| StoreError::Encode { table: table.into(), reason: e.to_string() })?;
    Ok(envelope(&json))
}

/// A table definition as recorded in the meta tree (owned, so it can come from disk or an import).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredTable {
    pub name: String,
    pub indexes: Vec<StoredIndex>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredIndex {
    pub name: String,
    pub pointer: String,
}

impl StoredTable {
    pub fn from_def(def: &TableDef) -> Self {
        StoredTable {
            name: def.name.into(),
            indexes: def
                .indexes
                .iter()
                .map(|i| StoredIndex { name: i.name.into(), pointer: i.pointer.into() })
                .collect(),
        }
    }

    pub fn matches(&self, def: &TableDef) -> bool {
        self.name == def.name
            && self.indexes.len() == def.indexes.len()
            && self.indexes.iter().zip(def.indexes).all(|(a, b)| a.name == b.name && a.pointer == b.pointer)
    }

    /// Names must be safe in tree names; pointers must be JSON pointers; index names unique.
    pub fn validate(&self) -> Result<(), StoreError> {
        valid_name(&self.name, "table name")?;
        for (i, ix) in self.indexes.iter().enumerate() {
            valid_name(&ix.name, &format!("index name in table {}", self.name))?;
            if !ix.pointer.is_empty() && !ix.pointer.starts_with('/') {
                return Err(StoreError::Definition(format!(
                    "index {}.{}: pointer {:?} must be empty or start with '/'",
                    self.name, ix.name, ix.pointer
                )));
            }
            if self.indexes[..i].iter().any(|o| o.name == ix.name) {
                return Err(StoreError::Definition(format!("table {}: index {} defined twice", self.name, ix.name)));
            }
        }
        Ok(())
    }
}

fn valid_name(name: &str, what: &str) -> Result<(), StoreError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok { Ok(()) } else { Err(StoreError::Definition(format!("{what} {name:?} must be 1-64 of a-z, 0-9, _"))) }
}

/// The string a record is indexed under, or `None` when the pointer finds nothing (or `null`).
pub(crate) fn index_value(record: &Value, pointer: &str) -> Option<String> {
    match record.pointer(pointer)? {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// Index entry key: the value's length (so values may contain any byte), the value, then the primary
/// key. Entries for one value are contiguous and found with a prefix scan.
pub(crate) fn index_key(value: &str, key: &str) -> Vec<u8> {
    let mut k = index_prefix(value);
    k.extend_from_slice(key.as_bytes());
    k
}

pub(crate) fn index_prefix(value: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + value.len() + 16);
    k.extend_from_slice(&(value.len() as u32).to_be_bytes());
    k.extend_from_slice(value.as_bytes());
    k
}

/// Splits an index entry key into (value, primary key).
pub(crate) fn split_index_key(k: &[u8]) -> Option<(&str, &str)> {
    let len = u32::from_be_bytes(k.get(..4)?.try_into().ok()?) as usize;
    let value = std::str::from_utf8(k.get(4..4 + len)?).ok()?;
    let key = std::str::from_utf8(k.get(4 + len..)?).ok()?;
    Some((value, key))
}

/// Every index entry key a record (given as stored JSON bytes) produces, per index of `table`.
/// `None` for an index the record has no value for.
pub(crate) fn index_keys(table: &StoredTable, key: &str, json: &[u8]) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
    if table.indexes.is_empty() {
        return Ok(Vec::new());
    }
    let value: Value = serde_json::from_slice(json).map_err(|e| StoreError::Decode {
        table: table.name.clone(),
        what: format!("record {key}"),
        reason: e.to_string(),
    })?;
    Ok(table.indexes.iter().map(|ix| index_value(&value, &ix.pointer).map(|v| index_key(&v, key))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_keys_split_back_even_with_separators_in_values() {
        let k = index_key("a\0b/c", "job\0-1");
        assert_eq!(split_index_key(&k), Some(("a\0b/c", "job\0-1")));
        // A value that is a prefix of another must not match its prefix scan.
        assert!(!index_key("queuedx", "j").starts_with(&index_prefix("queued")));
    }

    #[test]
    fn index_values_by_json_type() {
        let v = serde_json::json!({"s": "x", "n": 3, "b": true, "z": null, "o": {"k": [1, 2]}});
        assert_eq!(index_value(&v, "/s").as_deref(), Some("x"));
        assert_eq!(index_value(&v, "/n").as_deref(), Some("3"));
        assert_eq!(index_value(&v, "/b").as_deref(), Some("true"));
        assert_eq!(index_value(&v, "/z"), None);
        assert_eq!(index_value(&v, "/missing"), None);
        assert_eq!(index_value(&v, "/o").as_deref(), Some(r#"{"k":[1,2]}"#));
    }

    #[test]
    fn unknown_envelope_versions_are_refused() {
        let err = decode::<Value>(&[9, b'1'], "jobs", "record j").unwrap_err();
        assert!(err.to_string().contains("unknown envelope version 9"), "{err}");
        assert_eq!(decode::<Value>(&envelope(b"[1]"), "jobs", "j").unwrap(), serde_json::json!([1]));
    }

    #[test]
    fn bad_definitions_are_refused_with_the_name() {
        let t = StoredTable { name: "Jobs".into(), indexes: vec![] };
        assert!(t.validate().unwrap_err().to_string().contains("\"Jobs\""));
        let t = StoredTable {
            name: "jobs".into(),
            indexes: vec![StoredIndex { name: "state".into(), pointer: "state".into() }],
        };
        assert!(t.validate().unwrap_err().to_string().contains("jobs.state"));
    }
}
