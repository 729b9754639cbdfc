//! How things are laid out in the trees: tree names, the value envelope, index keys.
//!
//! Every value is stored in an envelope: a version byte, then (since version 2) a CRC-32 of the
//! JSON that follows, checked on every read. A damaged value is refused with an error naming its
//! table and key ([`StoreError::Corrupt`]) instead of being decoded into something else or
//! silently skipped; `check` lists every such record.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{StoreError, TableDef};

/// The first byte of every stored value. A future encoding gets a new number; old values stay readable
/// because the decoder dispatches on it. Version 1: the JSON follows. Version 2 (written now): a
/// little-endian CRC-32 of the JSON, then the JSON.
pub(crate) const ENVELOPE_V1: u8 = 1;
pub(crate) const ENVELOPE_V2: u8 = 2;

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

/// Wraps JSON bytes in the versioned envelope, with their checksum.
pub(crate) fn envelope(json: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(json.len() + 5);
    v.push(ENVELOPE_V2);
    v.extend_from_slice(&crc32fast::hash(json).to_le_bytes());
    v.extend_from_slice(json);
    v
}

/// The JSON bytes inside an envelope, once their checksum matches.
pub(crate) fn open_envelope<'a>(bytes: &'a [u8], table: &str, what: &str) -> Result<&'a [u8], StoreError> {
    match bytes.split_first() {
        Some((&ENVELOPE_V2, rest)) if rest.len() >= 4 => {
            let (sum, json) = rest.split_at(4);
            if crc32fast::hash(json).to_le_bytes() == sum {
                Ok(json)
            } else {
                Err(StoreError::Corrupt { table: table.into(), what: what.into() })
            }
        }
        Some((&ENVELOPE_V2, _)) => Err(StoreError::Corrupt { table: table.into(), what: what.into() }),
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
    Ok(index_values(table, key, json)?.into_iter().map(|v| v.map(|v| index_key(&v, key))).collect())
}

/// The value of each index of `table` in a record (given as stored JSON bytes).
pub(crate) fn index_values(table: &StoredTable, key: &str, json: &[u8]) -> Result<Vec<Option<String>>, StoreError> {
    table
        .indexes
        .iter()
        .map(|ix| {
            pointer_value(json, &ix.pointer).map_err(|e| StoreError::Decode {
                table: table.name.clone(),
                what: format!("record {key}"),
                reason: e.to_string(),
            })
        })
        .collect()
}

/// [`index_value`] read straight from JSON bytes: only the value the pointer names is built, the
/// rest is skipped. Index upkeep runs on every write and every indexed read, and building a whole
/// `Value` (one allocation per string and map) was most of its cost. Pointers into arrays, and the
/// empty pointer, fall back to a full parse so the result is always `index_value`'s.
pub(crate) fn pointer_value(json: &[u8], pointer: &str) -> Result<Option<String>, serde_json::Error> {
    let segments: Option<Vec<String>> =
        pointer.strip_prefix('/').map(|p| p.split('/').map(|s| s.replace("~1", "/").replace("~0", "~")).collect());
    let Some(segments) = segments else {
        let value: Value = serde_json::from_slice(json)?;
        return Ok(index_value(&value, pointer));
    };
    let early = std::cell::Cell::new(None);
    let mut de = serde_json::Deserializer::from_slice(json);
    let found = match serde::de::DeserializeSeed::deserialize(PointerSeed { path: &segments, early: &early }, &mut de) {
        Ok(found) => {
            de.end()?;
            found
        }
        // The walk stops at the value it was looking for: the rest of the record is not read.
        Err(e) => early.take().ok_or(e)?,
    };
    match found {
        Found::Leaf(v) => Ok(match v {
            Value::Null => None,
            Value::String(s) => Some(s),
            other => Some(other.to_string()),
        }),
        Found::Nothing => Ok(None),
        Found::NeedsFullParse => {
            let value: Value = serde_json::from_slice(json)?;
            Ok(index_value(&value, pointer))
        }
    }
}

/// What a walk down a pointer found.
enum Found {
    Leaf(Value),
    Nothing,
    /// The path went through an array: left to `Value::pointer`'s rules.
    NeedsFullParse,
}

/// Compares a map key with a pointer segment without allocating it.
struct KeyIs<'p>(&'p str);

impl<'de> serde::de::DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> serde::de::Visitor<'de> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a map key")
    }

    fn visit_str<E>(self, k: &str) -> Result<bool, E> {
        Ok(k == self.0)
    }
}

/// Walks `path` down a JSON document. Once the value is found it is put in `early` and the walk
/// is abandoned with an error, so the bytes after it are never scanned (the first of repeated keys
/// wins; serde_json never writes repeated keys).
struct PointerSeed<'p> {
    path: &'p [String],
    early: &'p std::cell::Cell<Option<Found>>,
}

impl<'de> serde::de::DeserializeSeed<'de> for PointerSeed<'_> {
    type Value = Found;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Found, D::Error> {
        if self.path.is_empty() {
            let leaf = Value::deserialize(d)?;
            self.early.set(Some(Found::Leaf(leaf)));
            return Err(serde::de::Error::custom("found"));
        }
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for PointerSeed<'_> {
    type Value = Found;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Found, A::Error> {
        let (head, rest) = (&self.path[0], &self.path[1..]);
        let mut found = Found::Nothing;
        while let Some(is_head) = map.next_key_seed(KeyIs(head))? {
            if is_head {
                found = map.next_value_seed(PointerSeed { path: rest, early: self.early })?;
                if matches!(found, Found::NeedsFullParse) {
                    self.early.set(Some(Found::NeedsFullParse));
                    return Err(serde::de::Error::custom("array"));
                }
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(found)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Found, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Found::NeedsFullParse)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Found, E> {
        Ok(Found::Nothing)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Found, E> {
        Ok(Found::Nothing)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Found, E> {
        Ok(Found::Nothing)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Found, E> {
        Ok(Found::Nothing)
    }
    fn visit_str<E>(self, _: &str) -> Result<Found, E> {
        Ok(Found::Nothing)
    }
    fn visit_unit<E>(self) -> Result<Found, E> {
        Ok(Found::Nothing)
    }
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
    fn pointer_values_read_from_bytes_match_index_value() {
        let v = serde_json::json!({
            "s": "x", "n": 3, "f": 1.5, "b": true, "z": null, "o": {"k": [1, 2], "a/b": "slash", "t~": "tilde"},
            "arr": [{"id": "first"}, {"id": "second"}], "esc": "q\"uote\u{e9}", "e\"k": "escaped key", "deep": {"x": {"y": "z"}}
        });
        let bytes = serde_json::to_vec(&v).unwrap();
        for p in [
            "/s",
            "/n",
            "/f",
            "/b",
            "/z",
            "/missing",
            "/o",
            "/o/k",
            "/o/a~1b",
            "/o/t~0",
            "/arr/1/id",
            "/arr/9",
            "/esc",
            "/e\"k",
            "/deep/x/y",
            "/deep/x/y/w",
            "/s/inner",
            "",
        ] {
            assert_eq!(pointer_value(&bytes, p).unwrap(), index_value(&v, p), "pointer {p:?}");
        }
        // Bad JSON before the value, or around a value that is not there, is an error.
        assert!(pointer_value(br#"{"t":"a" "s":"b"}"#, "/s").is_err());
        assert!(pointer_value(br#"{"s":"a""#, "/t").is_err());
        assert!(pointer_value(br#"{"s":"a"} x"#, "/t").is_err());
    }

    #[test]
    fn a_flipped_byte_anywhere_in_a_value_is_caught_and_named() {
        let stored = envelope(br#"{"id":"j-1","state":"running","gpus":8}"#);
        assert_eq!(open_envelope(&stored, "jobs", "j-1").unwrap(), br#"{"id":"j-1","state":"running","gpus":8}"#);
        for i in 1..stored.len() {
            for bit in 0..8 {
                let mut bad = stored.clone();
                bad[i] ^= 1 << bit;
                let err = open_envelope(&bad, "jobs", "j-1").unwrap_err();
                assert!(err.to_string().contains("j-1") && err.to_string().contains("jobs"), "{err}");
            }
        }
        assert!(open_envelope(&stored[..3], "jobs", "j-1").is_err());
        // Values written before checksums (version 1) are still read.
        assert_eq!(open_envelope(b"\x01[1]", "jobs", "j").unwrap(), b"[1]");
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
