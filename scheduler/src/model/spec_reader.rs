//! Reads a job spec field by field, so that every problem in it is reported at once and in the
//! user's terms.
//!
//! A derived `Deserialize` stops at the first wrong type and speaks Rust (`expected u32`). Here
//! each field is read on its own: a wrong type, a missing required field or an unknown field is
//! recorded and reading goes on. Fields that could not be read are stood in for by neutral
//! values and named in [`ReadSpec::broken`], so the semantic checks skip them instead of
//! reporting consequences of a problem already reported.
//!
//! The entry points (`JobSpec::parse`, `parse_checked`, `from_value`, `from_value_checked`) live
//! here, beside the reader they drive; `job_spec` holds the types and the semantic checks and does
//! not name this module, so the two do not import each other.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};
use time::OffsetDateTime;

use super::SpotPolicy;
use super::field_error::FieldErrors;
use super::job_spec::{JobKind, JobSpec, OnIdle, Replicas, SpecFormat, int_bounds};
use super::size::SizeCatalog;
use super::strict_json::{self, JsonError};

impl JobSpec {
    /// Parses a spec from TOML or JSON. Structural problems (unknown fields, wrong types, missing
    /// required fields, duplicate keys) come back as field errors, all of them; semantic checks are
    /// [`JobSpec::validate`]'s.
    pub fn parse(content: &str, format: SpecFormat) -> Result<JobSpec, FieldErrors> {
        let value = parse_value(content, format)?;
        Self::from_value(value)
    }

    /// Parses and validates in one pass, so that unknown fields, type errors and semantic
    /// problems are all reported together.
    pub fn parse_checked<C: SizeCatalog + ?Sized>(
        content: &str,
        format: SpecFormat,
        catalog: &C,
        now: OffsetDateTime,
    ) -> Result<JobSpec, FieldErrors> {
        let value = parse_value(content, format)?;
        Self::from_value_checked(value, catalog, now)
    }

    /// [`JobSpec::from_value`] followed by [`JobSpec::validate`], reporting every problem found
    /// by either: the semantic checks run on every field that could be read, so a spec with a
    /// missing `kind`, a negative `gpus` and an unknown `spot` gets all three problems at once.
    pub fn from_value_checked<C: SizeCatalog + ?Sized>(
        value: serde_json::Value,
        catalog: &C,
        now: OffsetDateTime,
    ) -> Result<JobSpec, FieldErrors> {
        let ReadSpec { spec, mut errors, broken } = read(value)?;
        if let Err(more) = spec.check(catalog, now, &broken, errors.is_empty()) {
            errors.0.extend(more.0);
        }
        errors.into_result(spec)
    }

    /// Builds a spec from an already-parsed JSON value, without the checks against the catalog
    /// and the clock.
    pub fn from_value(value: serde_json::Value) -> Result<JobSpec, FieldErrors> {
        let ReadSpec { spec, errors, .. } = read(value)?;
        errors.into_result(spec)
    }
}

/// The field names a spec accepts.
pub(super) const SPEC_FIELDS: &[&str] = &[
    "name",
    "tenant",
    "kind",
    "gpus",
    "gpu_models",
    "sizes",
    "min_gpus_per_vm",
    "gang",
    "regions",
    "deny_regions",
    "data_region",
    "data_gb",
    "spot",
    "regular_gpus",
    "max_price_per_hour",
    "budget",
    "duration_hours",
    "deadline",
    "checkpoint_interval_minutes",
    "priority",
    "replicas",
    "run",
    "setup",
    "envs",
    "outputs",
    "workdir",
    "image",
    "max_restarts",
    "idle_minutes",
    "on_idle",
];
const REPLICA_FIELDS: &[&str] = &["min", "desired"];

/// Longest list a spec field may hold. The catalog has a few dozen sizes and regions; a list far
/// longer is a generated mistake (thousands of copies of one region) that would otherwise cost
/// every round of the control loop.
pub const MAX_LIST_ITEMS: usize = 64;

/// A spec as read, with what could not be read.
pub(super) struct ReadSpec {
    /// The spec, with neutral stand-ins for the fields in `broken`.
    pub spec: JobSpec,
    /// Problems found while reading.
    pub errors: FieldErrors,
    /// Top-level fields that are missing or could not be read.
    pub broken: BTreeSet<String>,
}

/// Reads a spec from a JSON value (TOML is converted to JSON first).
pub(super) fn read(value: Value) -> Result<ReadSpec, FieldErrors> {
    let mut errors = FieldErrors::default();
    let Value::Object(obj) = value else {
        errors.push("", format!("a job spec must be an object (a table), got {}", got(&value)));
        return Err(errors);
    };
    for key in obj.keys().filter(|k| !SPEC_FIELDS.contains(&k.as_str())) {
        errors.push(key.clone(), format!("unknown field; the fields are {}", SPEC_FIELDS.join(", ")));
    }
    let mut r = Reader { obj, errors, broken: BTreeSet::new() };
    let name = r.required("name", |v| v.as_str().map(String::from), "must be a string");
    let tenant = r.optional("tenant", |v| v.as_str().map(String::from), "must be a string");
    let kind = r.required("kind", parse_kind, "must be one of training, batch, inference");
    let gpus = r.required_int("gpus");
    let gpu_models = r.list("gpu_models");
    let sizes = r.list("sizes");
    let min_gpus_per_vm = r.optional_int("min_gpus_per_vm");
    let gang = r.optional("gang", Value::as_bool, "must be true or false");
    let regions = r.list("regions");
    let deny_regions = r.list("deny_regions");
    let data_region = r.optional("data_region", |v| v.as_str().map(String::from), "must be a region name (a string)");
    let data_gb = r.number("data_gb");
    let spot = r.optional("spot", parse_spot, "must be one of never, allowed, preferred, only");
    let regular_gpus = r.optional_int("regular_gpus");
    let max_price_per_hour = r.number("max_price_per_hour");
    let budget = r.number("budget");
    let duration_hours = r.number("duration_hours");
    let deadline = r.optional(
        "deadline",
        |v| v.as_str().and_then(|s| OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()),
        "must be an RFC 3339 time such as 2026-12-01T18:00:00Z",
    );
    let checkpoint_interval_minutes = r.optional_int("checkpoint_interval_minutes");
    let priority = r.optional_int("priority");
    let replicas = r.replicas();
    let text = |v: &Value| v.as_str().map(String::from);
    let run = r.optional("run", text, "must be a shell script (a string)");
    let setup = r.optional("setup", text, "must be a shell script (a string)");
    let envs = r.strings("envs");
    let outputs = r.strings("outputs");
    let workdir = r.optional("workdir", text, "must be a path (a string)");
    let image = r.optional("image", text, "must be an image reference (a string)");
    let max_restarts = r.optional_int("max_restarts");
    let idle_minutes = r.optional_int("idle_minutes");
    let on_idle = r.optional("on_idle", parse_on_idle, "must be one of notify, stop");
    let spec = JobSpec {
        name: name.unwrap_or_default(),
        tenant: tenant.unwrap_or_else(|| "default".into()),
        kind: kind.unwrap_or(JobKind::Batch),
        gpus: gpus.unwrap_or(1),
        gpu_models: gpu_models.unwrap_or_default(),
        sizes: sizes.unwrap_or_default(),
        min_gpus_per_vm,
        gang,
        regions: r.present("regions").then_some(regions).flatten(),
        deny_regions: deny_regions.unwrap_or_default(),
        data_region,
        data_gb,
        spot,
        regular_gpus,
        max_price_per_hour,
        budget,
        duration_hours,
        deadline,
        checkpoint_interval_minutes,
        priority: priority.unwrap_or(1),
        replicas,
        run,
        setup,
        envs: envs.unwrap_or_default(),
        outputs: outputs.unwrap_or_default(),
        workdir,
        image,
        max_restarts,
        idle_minutes,
        on_idle,
    };
    Ok(ReadSpec { spec, errors: r.errors, broken: r.broken })
}

struct Reader {
    obj: Map<String, Value>,
    errors: FieldErrors,
    broken: BTreeSet<String>,
}

impl Reader {
    /// Present and not null (JSON `null` for an optional field means "not given").
    fn present(&self, field: &str) -> bool {
        self.obj.get(field).is_some_and(|v| !v.is_null())
    }

    fn bad(&mut self, field: &str, problem: String) {
        self.errors.push(field, problem);
        self.broken.insert(field.split(['.', '[']).next().unwrap_or(field).to_string());
    }

    fn optional<T>(&mut self, field: &str, parse: impl Fn(&Value) -> Option<T>, expected: &str) -> Option<T> {
        let v = self.obj.get(field).filter(|v| !v.is_null())?.clone();
        let parsed = parse(&v);
        if parsed.is_none() {
            self.bad(field, format!("{expected} (got {})", got(&v)));
        }
        parsed
    }

    fn required<T>(&mut self, field: &str, parse: impl Fn(&Value) -> Option<T>, expected: &str) -> Option<T> {
        if !self.present(field) {
            self.bad(field, format!("missing (required): {}", expected.trim_start_matches("must be ")));
            return None;
        }
        self.optional(field, parse, expected)
    }

    fn required_int(&mut self, field: &str) -> Option<u32> {
        if !self.present(field) {
            self.bad(field, "missing (required): a whole number".into());
            return None;
        }
        self.optional_int(field)
    }

    /// A whole number within the field's bounds ([`int_bounds`]); out of range is reported here,
    /// in the field's own bounds, not the machine type's.
    fn optional_int(&mut self, field: &str) -> Option<u32> {
        let v = self.obj.get(field).filter(|v| !v.is_null())?.clone();
        self.int_at(field, &v)
    }

    fn int_at(&mut self, field: &str, v: &Value) -> Option<u32> {
        let whole = v.as_i64().map(i128::from).or_else(|| v.as_u64().map(i128::from));
        let Some(n) = whole else {
            self.bad(field, format!("must be a whole number (got {})", got(v)));
            return None;
        };
        if let Some(problem) = int_bounds(field).and_then(|b| b.problem(n)) {
            self.bad(field, problem);
            return None;
        }
        match u32::try_from(n) {
            Ok(n) => Some(n),
            Err(_) => {
                self.bad(field, format!("must be a whole number ≥ 0 (got {n})"));
                None
            }
        }
    }

    fn number(&mut self, field: &str) -> Option<f64> {
        self.optional(field, Value::as_f64, "must be a number")
    }

    /// A list of strings of at most [`MAX_LIST_ITEMS`], each named once.
    fn list(&mut self, field: &str) -> Option<Vec<String>> {
        let v = self.obj.get(field).filter(|v| !v.is_null())?.clone();
        let Value::Array(items) = &v else {
            self.bad(field, format!("must be a list of strings (got {})", got(&v)));
            return None;
        };
        if items.len() > MAX_LIST_ITEMS {
            self.bad(field, format!("must list at most {MAX_LIST_ITEMS} entries, each once (got {})", items.len()));
            return None;
        }
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            match item.as_str() {
                Some(s) => out.push(s.to_string()),
                None => {
                    self.bad(&format!("{field}[{i}]"), format!("must be a string (got {})", got(item)));
                    ok = false;
                }
            }
        }
        let mut seen = BTreeSet::new();
        let mut reported = BTreeSet::new();
        for (i, s) in out.iter().enumerate() {
            if !seen.insert(s.as_str()) && reported.insert(s.as_str()) {
                let times = out.iter().filter(|x| *x == s).count();
                self.bad(&format!("{field}[{i}]"), format!("{s:?} is listed {times} times; list each once"));
                ok = false;
            }
        }
        ok.then_some(out)
    }

    /// A table of names to string values (`envs`, `outputs`).
    fn strings(&mut self, field: &str) -> Option<BTreeMap<String, String>> {
        let v = self.obj.get(field).filter(|v| !v.is_null())?.clone();
        let Value::Object(vars) = &v else {
            self.bad(field, format!("must be a table of strings (got {})", got(&v)));
            return None;
        };
        let mut out = BTreeMap::new();
        let mut ok = true;
        for (k, val) in vars {
            match val.as_str() {
                Some(s) => {
                    out.insert(k.clone(), s.to_string());
                }
                None => {
                    self.bad(&format!("{field}.{k}"), format!("must be a string (got {})", got(val)));
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }

    fn replicas(&mut self) -> Option<Replicas> {
        let v = self.obj.get("replicas").filter(|v| !v.is_null())?.clone();
        let Value::Object(rep) = &v else {
            self.bad("replicas", format!("must be a table {{min, desired}} (got {})", got(&v)));
            return None;
        };
        for key in rep.keys().filter(|k| !REPLICA_FIELDS.contains(&k.as_str())) {
            self.errors.push(format!("replicas.{key}"), "unknown field; the fields are min, desired");
        }
        let mut part = |name: &str| -> Option<u32> {
            let field = format!("replicas.{name}");
            match rep.get(name).filter(|v| !v.is_null()) {
                None => {
                    self.bad(&field, "missing (required): a whole number".into());
                    None
                }
                Some(v) => self.int_at(&field, v),
            }
        };
        let min = part("min");
        let desired = part("desired");
        Some(Replicas { min: min?, desired: desired? })
    }
}

fn parse_kind(v: &Value) -> Option<JobKind> {
    match v.as_str()? {
        "training" => Some(JobKind::Training),
        "batch" => Some(JobKind::Batch),
        "inference" => Some(JobKind::Inference),
        _ => None,
    }
}

fn parse_on_idle(v: &Value) -> Option<OnIdle> {
    match v.as_str()? {
        "notify" => Some(OnIdle::Notify),
        "stop" => Some(OnIdle::Stop),
        _ => None,
    }
}

fn parse_spot(v: &Value) -> Option<SpotPolicy> {
    match v.as_str()? {
        "never" => Some(SpotPolicy::Never),
        "allowed" => Some(SpotPolicy::Allowed),
        "preferred" => Some(SpotPolicy::Preferred),
        "only" => Some(SpotPolicy::Only),
        _ => None,
    }
}

/// A value as the user wrote it, short enough for one line.
pub(super) fn got(v: &Value) -> String {
    let text = match v {
        Value::Null => "nothing (null)".to_string(),
        Value::Array(_) => "a list".to_string(),
        Value::Object(_) => "a table".to_string(),
        other => other.to_string(),
    };
    if text.chars().count() > 40 { format!("{}…", text.chars().take(40).collect::<String>()) } else { text }
}

/// Converts TOML to JSON, keeping dates as RFC 3339 strings (the `toml` crate's own serialisation
/// of a date is a private wrapper object, which no field accepts).
pub(super) fn toml_to_json(v: toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => Value::from(i),
        // nan and inf are no number a field accepts: kept as text, so the field's check names them.
        toml::Value::Float(f) => {
            serde_json::Number::from_f64(f).map(Value::Number).unwrap_or(Value::String(f.to_string()))
        }
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.into_iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => Value::Object(t.into_iter().map(|(k, v)| (k, toml_to_json(v))).collect()),
    }
}

pub(super) fn parse_value(content: &str, format: SpecFormat) -> Result<serde_json::Value, FieldErrors> {
    let mut errs = FieldErrors::default();
    match format {
        SpecFormat::Json => strict_json::parse(content).map_err(|e| {
            match e {
                JsonError::Syntax(m) => errs.push("", format!("not valid JSON: {m}")),
                JsonError::DuplicateKey(f) => errs.0.push(f),
            }
            errs
        }),
        SpecFormat::Toml => {
            let table: toml::Table = toml::from_str(content).map_err(|e| {
                let at = e.span().map(|s| line_col(content, s.start)).unwrap_or_default();
                errs.push("", format!("not valid TOML{at}: {}", e.message().trim()));
                errs
            })?;
            Ok(toml_to_json(toml::Value::Table(table)))
        }
    }
}

/// ` (line L, column C)` of a byte offset.
fn line_col(text: &str, offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!(" (line {line}, column {col})")
}
