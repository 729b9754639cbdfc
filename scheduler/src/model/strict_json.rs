//! JSON parsing that refuses duplicate object keys.
//!
//! `serde_json` keeps the last of two equal keys (`{"gpus": 1, "gpus": 2}` is 2): a client whose
//! JSON library merged two objects would get a job other than the one it reviewed. User input
//! (job specs from files and the HTTP API, token requests) is read through [`parse`] instead,
//! which names the key given twice and where.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::field_error::FieldError;

/// Marks our own duplicate-key error inside serde's message, so it can be told from a syntax error.
const DUPLICATE: &str = "\u{1}duplicate key ";

/// Why a document is not acceptable JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonError {
    /// Not JSON at all (syntax, or a number out of range): where it broke.
    Syntax(String),
    /// Well-formed, but an object gives the same key twice: the key's path and where.
    DuplicateKey(FieldError),
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonError::Syntax(m) => f.write_str(m),
            JsonError::DuplicateKey(e) => write!(f, "{e}"),
        }
    }
}

/// Parses JSON text into a value; an object that gives a key twice is an error naming the key's
/// path (`replicas.min`) and its line and column.
pub fn parse(text: &str) -> Result<Value, JsonError> {
    parse_with(&mut serde_json::Deserializer::from_str(text))
}

/// [`parse`] over bytes (an HTTP body).
pub fn parse_slice(bytes: &[u8]) -> Result<Value, JsonError> {
    parse_with(&mut serde_json::Deserializer::from_slice(bytes))
}

fn parse_with<'de, R: serde_json::de::Read<'de>>(de: &mut serde_json::Deserializer<R>) -> Result<Value, JsonError> {
    let StrictValue(v) = serde_path_to_error::deserialize::<_, StrictValue>(&mut *de).map_err(|e| {
        let path = e.path().to_string();
        convert(&path, e.into_inner())
    })?;
    de.end().map_err(|e| convert(".", e))?;
    Ok(v)
}

fn convert(path: &str, inner: serde_json::Error) -> JsonError {
    let text = inner.to_string();
    let at = format!("line {}, column {}", inner.line(), inner.column());
    match text.strip_prefix(DUPLICATE) {
        Some(rest) => {
            let key = rest.split(" at line ").next().unwrap_or(rest).to_string();
            let field = if path == "." || path.contains('?') { key } else { format!("{path}.{key}") };
            JsonError::DuplicateKey(FieldError::new(field, format!("given twice ({at}); give each field once")))
        }
        None => {
            let what = text.split(" at line ").next().unwrap_or(&text).to_string();
            JsonError::Syntax(format!("{what} ({at})"))
        }
    }
}

/// A `serde_json::Value` whose objects were checked for duplicate keys.
struct StrictValue(Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map(Value::Number).unwrap_or(Value::Null))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        StrictValue::deserialize(d).map(|v| v.0)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(StrictValue(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!("{DUPLICATE}{key}")));
            }
            let StrictValue(v) = map.next_value()?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_are_named_with_their_path_and_position() {
        let e = parse(r#"{"name": "a", "gpus": 1, "gpus": 2}"#).unwrap_err();
        let JsonError::DuplicateKey(f) = e else { panic!("{e:?}") };
        assert_eq!(f.field, "gpus");
        assert!(f.problem.contains("given twice") && f.problem.contains("line 1"), "{f}");
        let e = parse("{\"replicas\": {\"min\": 1,\n \"min\": 2}}").unwrap_err();
        let JsonError::DuplicateKey(f) = e else { panic!("{e:?}") };
        assert_eq!(f.field, "replicas.min");
        assert!(f.problem.contains("line 2"), "{f}");
    }

    #[test]
    fn syntax_errors_say_where_and_values_round_trip() {
        let e = parse("{\"a\": 1,}").unwrap_err();
        assert!(
            matches!(&e, JsonError::Syntax(m) if m.contains("trailing comma") && m.contains("line 1, column 9")),
            "{e}"
        );
        assert!(matches!(parse("{} x"), Err(JsonError::Syntax(_))));
        let text = r#"{"a": [1, -2, 3.5, "x", null, true, {"b": {}}]}"#;
        assert_eq!(parse(text).unwrap(), serde_json::from_str::<Value>(text).unwrap());
        assert_eq!(parse_slice(text.as_bytes()).unwrap(), serde_json::from_str::<Value>(text).unwrap());
    }
}
