//! A small JSON-schema validator for the Azure REST API definitions in `shared/azure`, shared by
//! `scheduler/tests/fleet_schema.rs` and `simulator/tests/azure_cloud.rs` (included with `#[path]`).
//!
//! It knows what the Compute Fleet and Quota specs use: types, `required`, `enum` (open when
//! `x-ms-enum.modelAsString` is true), `$ref` across files (the spec's
//! `../../../../../common-types/...` resolve to `shared/azure/common-types/...`), `allOf`,
//! `discriminator` (the definition whose `x-ms-discriminator-value` the object names, e.g. the
//! Quota API's `LimitJsonObject` → `LimitObject`), `additionalProperties`, `minimum`/`maximum`,
//! int32, and `readOnly` (refused in requests, accepted in responses).

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The schema documents, loaded once, addressed by canonical path.
pub struct Schemas {
    docs: HashMap<PathBuf, Value>,
    /// Validating a response: read-only properties are expected, not refused.
    pub response: bool,
}

impl Schemas {
    pub fn new() -> Schemas {
        Schemas { docs: HashMap::new(), response: false }
    }

    /// `../../../../../common-types/resource-management/v5/x.json` is how the fleet spec names the
    /// common types in the REST API specs repository; here they live beside it in `shared/azure`.
    fn resolve_file(&self, base: &Path, file: &str) -> PathBuf {
        if let Some(rest) = file.split("common-types/").nth(1) {
            let azure =
                base.ancestors().find(|p| p.join("common-types").is_dir()).expect("common-types beside the spec");
            return azure.join("common-types").join(rest);
        }
        base.parent().unwrap().join(file)
    }

    fn doc(&mut self, path: &Path) -> &Value {
        let key = path.canonicalize().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        self.docs.entry(key.clone()).or_insert_with(|| {
            serde_json::from_str(&std::fs::read_to_string(&key).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", key.display()))
        })
    }

    /// Follows a `$ref` from the document at `base`: (the target schema, the document it is in).
    pub fn deref(&mut self, base: &Path, reference: &str) -> (Value, PathBuf) {
        let (file, pointer) = reference.split_once('#').unwrap_or((reference, ""));
        let path = if file.is_empty() { base.to_path_buf() } else { self.resolve_file(base, file) };
        let doc = self.doc(&path);
        let target =
            doc.pointer(pointer).unwrap_or_else(|| panic!("unresolved $ref {reference} from {}", base.display()));
        (target.clone(), path)
    }

    /// Validates `value` against `schema` (in document `base`), pushing every problem with its path.
    pub fn validate(&mut self, base: &Path, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
        self.validate_part(base, schema, value, at, errors, true);
    }

    /// `whole` is false for an `allOf` part: it sees the whole object but declares only some of
    /// its properties, so unknown properties are judged by the composed schema instead.
    fn validate_part(
        &mut self,
        base: &Path,
        schema: &Value,
        value: &Value,
        at: &str,
        errors: &mut Vec<String>,
        whole: bool,
    ) {
        if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
            let (target, doc) = self.deref(base, r);
            self.validate_part(&doc, &target, value, at, errors, whole);
            return;
        }
        // A polymorphic base validates as the derived definition the object names (that one's
        // `allOf` comes back here as a part, which must not dispatch again).
        if whole
            && let Some(field) = schema.get("discriminator").and_then(Value::as_str)
            && let Some(kind) = value.get(field).and_then(Value::as_str)
        {
            match self.derived(base, kind) {
                Some(derived) => self.validate_part(base, &derived, value, at, errors, true),
                None => errors.push(format!("{at}.{field}: no definition has discriminator value {kind:?}")),
            }
            return;
        }
        for part in schema.get("allOf").and_then(Value::as_array).into_iter().flatten() {
            self.validate_part(base, part, value, at, errors, false);
        }
        if let Some(t) = schema.get("type").and_then(Value::as_str) {
            let ok = match t {
                "object" => value.is_object(),
                "array" => value.is_array(),
                "string" => value.is_string(),
                "integer" => value.is_i64() || value.is_u64(),
                "number" => value.is_number(),
                "boolean" => value.is_boolean(),
                other => panic!("schema type {other} not handled"),
            };
            if !ok {
                errors.push(format!("{at}: expected {t}, got {value}"));
                return;
            }
            if t == "integer" && schema.get("format").and_then(Value::as_str) == Some("int32") {
                let n = value.as_i64().unwrap_or(i64::MAX);
                if i32::try_from(n).is_err() {
                    errors.push(format!("{at}: {n} is not an int32"));
                }
            }
        }
        if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
            let open = schema.pointer("/x-ms-enum/modelAsString").and_then(Value::as_bool) == Some(true);
            if !open && !allowed.contains(value) {
                errors.push(format!("{at}: {value} is not one of {allowed:?}"));
            }
        }
        if let (Some(min), Some(n)) = (schema.get("minimum").and_then(Value::as_f64), value.as_f64())
            && n < min
        {
            errors.push(format!("{at}: {n} < minimum {min}"));
        }
        if let (Some(max), Some(n)) = (schema.get("maximum").and_then(Value::as_f64), value.as_f64())
            && n > max
        {
            errors.push(format!("{at}: {n} > maximum {max}"));
        }
        if let (Some(items), Some(arr)) = (schema.get("items"), value.as_array()) {
            for (i, v) in arr.iter().enumerate() {
                self.validate(base, items, v, &format!("{at}[{i}]"), errors);
            }
        }
        if let Some(obj) = value.as_object() {
            for req in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
                let name = req.as_str().unwrap();
                if !obj.contains_key(name) {
                    errors.push(format!("{at}: required property {name} missing"));
                }
            }
            let props = schema.get("properties").and_then(Value::as_object);
            for (k, v) in obj {
                let path = format!("{at}.{k}");
                match props.and_then(|p| p.get(k)) {
                    Some(prop) => {
                        if !self.response && prop.get("readOnly").and_then(Value::as_bool) == Some(true) {
                            errors.push(format!("{path}: read-only, must not be sent"));
                        }
                        self.validate(base, prop, v, &path, errors);
                    }
                    None => match schema.get("additionalProperties") {
                        Some(Value::Bool(false)) => errors.push(format!("{path}: not allowed")),
                        Some(extra @ Value::Object(_)) => self.validate(base, extra, v, &path, errors),
                        // Properties may come from an `allOf` part: check they exist somewhere.
                        _ => {
                            if whole && !self.declares(base, schema, k) {
                                errors.push(format!("{path}: unknown property"));
                            }
                        }
                    },
                }
            }
        }
    }

    /// The definition of document `base` whose `x-ms-discriminator-value` is `kind`.
    fn derived(&mut self, base: &Path, kind: &str) -> Option<Value> {
        let doc = self.doc(base);
        doc.get("definitions")?
            .as_object()?
            .values()
            .find(|d| d.get("x-ms-discriminator-value").and_then(Value::as_str) == Some(kind))
            .cloned()
    }

    /// True when `schema` or one of its `allOf` parts declares property `name`, or the schema
    /// declares no properties at all (an open object).
    fn declares(&mut self, base: &Path, schema: &Value, name: &str) -> bool {
        if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
            let (target, doc) = self.deref(base, r);
            return self.declares(&doc, &target, name);
        }
        let own = schema.get("properties").and_then(Value::as_object);
        if own.is_some_and(|p| p.contains_key(name)) {
            return true;
        }
        let parts: Vec<Value> = schema.get("allOf").and_then(Value::as_array).cloned().unwrap_or_default();
        if own.is_none() && parts.is_empty() {
            return true;
        }
        parts.iter().any(|p| self.declares(base, p, name))
    }
}

/// Problems of `body` against `azurefleet.json#/definitions/Fleet`; `response` accepts read-only
/// properties.
pub fn fleet_errors(azure_dir: &Path, body: &Value, response: bool) -> Vec<String> {
    let spec = azure_dir.join("azurefleet-2024-11-01/azurefleet.json");
    let mut schemas = Schemas::new();
    schemas.response = response;
    let (fleet, doc) = schemas.deref(&spec, "#/definitions/Fleet");
    let mut errors = Vec::new();
    schemas.validate(&doc, &fleet, body, "Fleet", &mut errors);
    errors
}

/// Errors of `body` against `definition` (e.g. `Fleet`, `VirtualMachineListResult`) of the fleet
/// definition at `api_version` (`azurefleet-{api_version}/azurefleet.json` under `azure_dir`).
pub fn definition_errors(
    azure_dir: &Path,
    api_version: &str,
    definition: &str,
    body: &Value,
    response: bool,
) -> Vec<String> {
    let spec = azure_dir.join(format!("azurefleet-{api_version}/azurefleet.json"));
    let mut schemas = Schemas::new();
    schemas.response = response;
    let (schema, doc) = schemas.deref(&spec, &format!("#/definitions/{definition}"));
    let mut errors = Vec::new();
    schemas.validate(&doc, &schema, body, definition, &mut errors);
    errors
}

/// Problems of `body` against the definition at `pointer` (e.g. `#/definitions/CurrentQuotaLimitBase`)
/// of the spec file `spec`; `response` accepts read-only properties.
pub fn errors_against(spec: &Path, pointer: &str, body: &Value, response: bool) -> Vec<String> {
    let mut schemas = Schemas::new();
    schemas.response = response;
    let (def, doc) = schemas.deref(spec, pointer);
    let mut errors = Vec::new();
    let name = pointer.rsplit('/').next().unwrap_or(pointer);
    schemas.validate(&doc, &def, body, name, &mut errors);
    errors
}

/// Microsoft's official API definitions, read at run time from the shared reference folder
/// (`shared/azure` beside the checkout or one of its parents, so a worktree finds it too; never
/// copied into the repository): the folder when it holds `file`, else `None` after saying so.
pub fn azure_definitions(file: &str) -> Option<PathBuf> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = here.ancestors().map(|dir| dir.join("shared/azure")).find(|d| d.join(file).is_file());
    if found.is_none() {
        eprintln!(
            "skipping: shared/azure/{file} is absent above {} (the official definitions live in shared/)",
            here.display()
        );
    }
    found
}

/// The official Quota API definition (`shared/azure/quota-2025-09-01/openapi.json`), or `None`.
pub fn quota_spec() -> Option<PathBuf> {
    let file = "quota-2025-09-01/openapi.json";
    azure_definitions(file).map(|dir| dir.join(file))
}
