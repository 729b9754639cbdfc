//! `JobSpec`: what a user submits, in TOML or JSON (one schema), and its validation.
//!
//! Parsing is strict (unknown fields are errors: a typo must not silently change a placement) and
//! validation reports every problem at once, each naming its field.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::SpotPolicy;
use super::field_error::FieldErrors;
use super::size::{SizeCatalog, Workload, gpu_model_matches};

/// What kind of work a job is; it sets the defaults for gang, spot and the sizes considered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    /// Model training: gang by default, training sizes (NC/ND).
    Training,
    /// Batch work (e.g. offline inference): splittable, spot allowed by default.
    Batch,
    /// An inference service: replicas that may spread over regions, never spot unless asked.
    Inference,
}

impl JobKind {
    /// The workload class whose sizes this kind uses when the spec names no models or sizes.
    pub fn workload(self) -> Workload {
        match self {
            JobKind::Training => Workload::Training,
            JobKind::Batch | JobKind::Inference => Workload::Inference,
        }
    }
}

/// Replica counts of an inference service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Replicas {
    /// Replicas that must run at all times when capacity exists anywhere.
    #[schema(minimum = 1, maximum = 1000)]
    pub min: u32,
    /// Replicas wanted when capacity allows (at least `min`).
    #[schema(minimum = 1, maximum = 1000)]
    pub desired: u32,
}

/// What happens when every GPU of a job stays idle for `idle_minutes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnIdle {
    /// An `idle` job event only (the default).
    Notify,
    /// The `idle` event, then the job is stopped and its VMs released.
    Stop,
}

/// The file formats a spec can come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecFormat {
    /// TOML (`.toml`).
    Toml,
    /// JSON (`.json`).
    Json,
}

impl SpecFormat {
    /// Picks the format from a file name's extension; JSON when the content starts with `{`.
    pub fn detect(path: &str, content: &str) -> SpecFormat {
        if path.ends_with(".json") || (!path.ends_with(".toml") && content.trim_start().starts_with('{')) {
            SpecFormat::Json
        } else {
            SpecFormat::Toml
        }
    }
}

/// A job as submitted. Optional fields left out take the defaults of the job's `kind`.
// The `schema` attributes publish in `/openapi.json` the per-field limits that `validate` enforces,
// so that clients (and property-based testers) know them; the checks against the catalog and the
// clock cannot be expressed there and stay in `validate` alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// A short name for people; need not be unique.
    #[schema(pattern = "^[A-Za-z0-9._-]+$", min_length = 1, max_length = 63)]
    pub name: String,
    /// The team the job belongs to (budgets and visibility are per tenant).
    #[serde(default = "default_tenant")]
    #[schema(pattern = "^[A-Za-z0-9._-]+$", min_length = 1, max_length = 63, default = "default")]
    pub tenant: String,
    /// Training, batch or inference.
    pub kind: JobKind,
    /// GPUs wanted (per replica for inference).
    #[schema(minimum = 1, maximum = 4096)]
    pub gpus: u32,
    /// Acceptable GPU models (any of); a family prefix such as `A100` matches every A100 model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 64)]
    pub gpu_models: Vec<String>,
    /// Explicit acceptable VM sizes; empty = any size with an acceptable GPU model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 64)]
    pub sizes: Vec<String>,
    /// Smallest acceptable GPUs per VM (e.g. 8 for an NVLink-bound model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 8)]
    pub min_gpus_per_vm: Option<u32>,
    /// All-or-nothing in one region on one size; defaults to true for training.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<bool>,
    /// Regions allowed; absent = any region in the catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_items = 1, max_items = 64)]
    pub regions: Option<Vec<String>>,
    /// Regions never to use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 64)]
    pub deny_regions: Vec<String>,
    /// Where the job's data lives; running elsewhere costs egress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_region: Option<String>,
    /// Data moved when the job runs outside `data_region`, in GB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 1000000)]
    pub data_gb: Option<f64>,
    /// Spot policy; defaults to `allowed` for batch and `never` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot: Option<SpotPolicy>,
    /// A guaranteed base of the job's GPUs on regular VMs, the rest under its spot policy: the
    /// loop places the two in one mixed fleet (Compute Fleet's regular and spot profiles together)
    /// where they land on the same region and size, and a spot eviction leaves the regular base
    /// running. Splittable jobs only (batch that is not a gang, inference); for an inference
    /// service a multiple of `gpus` (`replicas.min × gpus` keeps the minimum replicas on regular).
    /// Absent: no base, every GPU under the spot policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 4096)]
    pub regular_gpus: Option<u32>,
    /// Cap on the job's total price per hour (all its VMs), USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(exclusive_minimum = 0, maximum = 1000000)]
    pub max_price_per_hour: Option<f64>,
    /// Cap on the job's expected total cost, USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(exclusive_minimum = 0, maximum = 1000000000)]
    pub budget: Option<f64>,
    /// Estimated run time in hours (used for cost and deadlines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0.016666666666666666, maximum = 8784)]
    pub duration_hours: Option<f64>,
    /// When the job must be finished, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub deadline: Option<OffsetDateTime>,
    /// How often the job checkpoints; bounds the work lost on an eviction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 527040)]
    pub checkpoint_interval_minutes: Option<u32>,
    /// Relative importance, 1 to 1000 (higher places first).
    #[serde(default = "default_priority")]
    #[schema(minimum = 1, maximum = 1000, default = 1)]
    pub priority: u32,
    /// Inference only: replica counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<Replicas>,
    /// The work: a shell script every VM of an attempt runs (`sh -c`) once its whole gang is up.
    /// The job succeeds when every rank exits 0. Absent: a capacity-only job (ended by `complete`,
    /// or by `duration_hours` in the simulated cloud).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 32768)]
    pub run: Option<String>,
    /// A shell script each VM runs once before `run`; a non-zero exit fails the attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 32768)]
    pub setup: Option<String>,
    /// Environment variables added to `setup` and `run` (never replacing a `SPILLWAY_` one).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub envs: BTreeMap<String, String>,
    /// What the job leaves for the jobs that depend on it in a pipeline, by name (e.g. `model =
    /// "az://models/run-7"`): each dependant's `setup` and `run` get it as
    /// `SPILLWAY_DEP_<NAME>_OUTPUT_<KEY>`. Names are letters, digits and `_` (at most 64).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub outputs: BTreeMap<String, String>,
    /// Directory `setup` and `run` start in (relative: under the agent's work directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 1024)]
    pub workdir: Option<String>,
    /// Container image to run `run` in, with the GPUs passed through (needs a container runtime on
    /// the VM: without one the attempt fails with a clear error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[A-Za-z0-9][A-Za-z0-9._/:@-]*$", max_length = 512)]
    pub image: Option<String>,
    /// Times a failing `run` (a rank exiting non-zero) is started again before the job fails;
    /// default 0. Evictions and lost VMs do not count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 100)]
    pub max_restarts: Option<u32>,
    /// Minutes every GPU of the job may stay below the idle threshold before an `idle` event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 10080)]
    pub idle_minutes: Option<u32>,
    /// What an idle job does: `notify` (default: an event) or `stop` (end it, release its VMs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_idle: Option<OnIdle>,
}

fn default_tenant() -> String {
    "default".to_string()
}

fn default_priority() -> u32 {
    1
}

/// Largest GPU count a single job may ask for; far above any real quota, it catches typos.
pub const MAX_GPUS: u32 = 4096;

/// Longest `run` or `setup` script, bytes (larger programs belong in the image or the workdir).
pub const MAX_SCRIPT_BYTES: usize = 32 * 1024;

/// Most `envs` entries a spec may carry.
pub const MAX_ENVS: usize = 128;
/// Most `outputs` one job may declare.
pub const MAX_OUTPUTS: usize = 32;

/// Prefix of the variables spillway sets for the work; `envs` may not use it.
pub const RESERVED_ENV_PREFIX: &str = "SPILLWAY_";

impl JobSpec {
    /// Serialises to pretty JSON (the normalised form `spillway validate` prints).
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).expect("a JobSpec always serialises")
    }

    /// Serialises to TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a JobSpec always serialises to TOML")
    }

    /// Gang scheduling (all VMs on one offer, or none; a lost VM stops all the work): explicit, else
    /// true for training only; never for inference, whose replicas are placed and lost one by one
    /// (validation refuses `gang = true` there). The one home of that rule.
    pub fn is_gang(&self) -> bool {
        self.kind != JobKind::Inference && self.gang.unwrap_or(self.kind == JobKind::Training)
    }

    /// GPUs the job wants in all: an inference service's per-replica GPUs times its desired replicas.
    pub fn wanted_gpus(&self) -> u32 {
        match self.replicas {
            Some(r) => self.gpus.saturating_mul(r.desired),
            None => self.gpus,
        }
    }

    /// Spot policy: explicit, else `allowed` for batch and `never` for training and inference.
    pub fn spot_policy(&self) -> SpotPolicy {
        self.spot.unwrap_or(match self.kind {
            JobKind::Batch => SpotPolicy::Allowed,
            JobKind::Training | JobKind::Inference => SpotPolicy::Never,
        })
    }

    /// True when the spec says what to run; otherwise the job only holds capacity.
    pub fn runs_work(&self) -> bool {
        self.run.is_some()
    }

    /// Times a failing `run` is restarted before the job fails.
    pub fn max_restarts(&self) -> u32 {
        self.max_restarts.unwrap_or(0)
    }

    /// Regions the job may run in, given the catalog's regions: the allow list (or all), minus
    /// the deny list.
    pub fn allowed_regions<C: SizeCatalog + ?Sized>(&self, catalog: &C) -> Vec<String> {
        let all: Vec<String> = match &self.regions {
            Some(list) => list.clone(),
            None => catalog.regions(),
        };
        all.into_iter().filter(|r| !self.deny_regions.contains(r)).collect()
    }

    /// The catalog sizes this job accepts, before regions and prices: explicit sizes, else the
    /// sizes with an acceptable GPU model, else the sizes of the kind's workload class; whole-GPU
    /// sizes only, with at least `min_gpus_per_vm`.
    pub fn acceptable_sizes<'c, C: SizeCatalog + ?Sized>(&self, catalog: &'c C) -> Vec<&'c super::VmSize> {
        catalog
            .sizes()
            .iter()
            .filter(|s| s.gpus > 0)
            .filter(|s| self.sizes.is_empty() || self.sizes.iter().any(|n| n.eq_ignore_ascii_case(&s.name)))
            .filter(|s| self.gpu_models.is_empty() || self.gpu_models.iter().any(|m| s.matches_gpu_model(m)))
            .filter(|s| {
                !(self.sizes.is_empty() && self.gpu_models.is_empty()) || s.workloads.contains(&self.kind.workload())
            })
            .filter(|s| s.gpus >= self.min_gpus_per_vm.unwrap_or(1))
            .collect()
    }

    /// Checks the spec against the catalog and the current time; returns every problem found.
    pub fn validate<C: SizeCatalog + ?Sized>(&self, catalog: &C, now: OffsetDateTime) -> Result<(), FieldErrors> {
        self.check(catalog, now, &BTreeSet::new(), true)
    }

    /// The semantic checks, skipping the fields in `broken` (already reported as unreadable, and
    /// standing in with neutral values) and the checks that depend on them; `whole` is false when
    /// anything else was wrong, which makes "no size matches" meaningless.
    pub(super) fn check<C: SizeCatalog + ?Sized>(
        &self,
        catalog: &C,
        now: OffsetDateTime,
        broken: &BTreeSet<String>,
        whole: bool,
    ) -> Result<(), FieldErrors> {
        let ok = |f: &str| !broken.contains(f);
        let mut errs = FieldErrors::default();
        if ok("name") {
            check_label(&mut errs, "name", &self.name);
        }
        if ok("tenant") {
            check_label(&mut errs, "tenant", &self.tenant);
        }
        let ints = [
            ("gpus", Some(self.gpus)),
            ("min_gpus_per_vm", self.min_gpus_per_vm),
            ("checkpoint_interval_minutes", self.checkpoint_interval_minutes),
            ("priority", Some(self.priority)),
            ("regular_gpus", self.regular_gpus),
        ];
        for (field, value) in ints {
            if let (true, Some(v), Some(bounds)) = (ok(field), value, int_bounds(field))
                && let Some(problem) = bounds.problem(i128::from(v))
            {
                errs.push(field, problem);
            }
        }
        let models: BTreeSet<String> = catalog.sizes().iter().map(|s| s.gpu_model.clone()).collect();
        for (i, m) in self.gpu_models.iter().enumerate() {
            if !models.iter().any(|known| gpu_model_matches(known, m)) {
                errs.push(
                    format!("gpu_models[{i}]"),
                    format!(
                        "unknown GPU model {m:?}; known: {}",
                        models.iter().cloned().collect::<Vec<_>>().join(", ")
                    ),
                );
            }
        }
        for (i, name) in self.sizes.iter().enumerate() {
            match catalog.size(name) {
                None => errs.push(format!("sizes[{i}]"), format!("unknown VM size {name:?}")),
                Some(s) if s.gpus == 0 => errs.push(
                    format!("sizes[{i}]"),
                    format!("{name} carries a fraction of a GPU; jobs are placed on whole GPUs"),
                ),
                Some(s) if !self.gpu_models.is_empty() && !self.gpu_models.iter().any(|m| s.matches_gpu_model(m)) => {
                    errs.push(
                        format!("sizes[{i}]"),
                        format!("{name} has {} GPUs, which gpu_models does not accept", s.gpu_model),
                    )
                }
                Some(_) => {}
            }
        }
        let known_regions = catalog.regions();
        if let Some(regions) = &self.regions {
            if regions.is_empty() {
                errs.push("regions", "must list at least one region (leave it out to allow all)");
            }
            for (i, r) in regions.iter().enumerate() {
                if !known_regions.contains(r) {
                    errs.push(format!("regions[{i}]"), format!("unknown region {r:?}"));
                }
            }
        }
        for (i, r) in self.deny_regions.iter().enumerate() {
            if !known_regions.contains(r) {
                errs.push(format!("deny_regions[{i}]"), format!("unknown region {r:?}"));
            }
        }
        if ok("regions")
            && ok("deny_regions")
            && self.regions.as_ref().is_some_and(|r| !r.is_empty())
            && self.allowed_regions(catalog).is_empty()
        {
            errs.push("deny_regions", "denies every region that regions allows");
        }
        if let Some(r) = &self.data_region
            && !known_regions.contains(r)
        {
            errs.push("data_region", format!("unknown region {r:?}"));
        }
        if let Some(gb) = self.data_gb {
            bounded(&mut errs, "data_gb", gb, 0.0, false, MAX_DATA_GB, "GB (1 PB)");
            if self.data_region.is_none() && ok("data_region") {
                errs.push("data_gb", "needs data_region (where the data lives)");
            }
        }
        if let Some(p) = self.max_price_per_hour {
            bounded(&mut errs, "max_price_per_hour", p, 0.0, true, MAX_PRICE_PER_HOUR, "USD per hour");
        }
        if let Some(b) = self.budget {
            bounded(&mut errs, "budget", b, 0.0, true, MAX_BUDGET_USD, "USD");
        }
        if let Some(h) = self.duration_hours {
            if !h.is_finite() {
                errs.push("duration_hours", format!("must be a finite number (got {h})"));
            } else if h < MIN_DURATION_HOURS {
                errs.push(
                    "duration_hours",
                    format!("must be at least one minute ({MIN_DURATION_HOURS:.4} h; got {h})"),
                );
            } else if h > MAX_DURATION_HOURS {
                errs.push("duration_hours", format!("must be at most a year ({MAX_DURATION_HOURS} h; got {h})"));
            }
        }
        if let Some(deadline) = self.deadline {
            let latest = now + time::Duration::days(MAX_DEADLINE_DAYS);
            if deadline <= now {
                errs.push("deadline", "is in the past");
            } else if deadline > latest {
                let latest = latest.format(&time::format_description::well_known::Rfc3339).unwrap_or_default();
                errs.push(
                    "deadline",
                    format!("must be within five years ({MAX_DEADLINE_DAYS} days) from now (by {latest})"),
                );
            } else if let Some(h) = self.duration_hours.filter(|_| ok("duration_hours")) {
                let hours_left = (deadline - now).as_seconds_f64() / 3600.0;
                if h.is_finite() && h > hours_left {
                    errs.push(
                        "deadline",
                        format!("is {hours_left:.1} h away, less than duration_hours ({h} h): it cannot be met"),
                    );
                }
            }
        }
        match (&self.replicas, self.kind) {
            _ if !ok("kind") => {}
            (Some(_), JobKind::Training | JobKind::Batch) => {
                errs.push("replicas", "only inference jobs have replicas");
            }
            (Some(r), JobKind::Inference) => {
                for (field, v) in [("replicas.min", r.min), ("replicas.desired", r.desired)] {
                    if let Some(problem) = int_bounds(field).and_then(|b| b.problem(i128::from(v))) {
                        errs.push(field, problem);
                    }
                }
                if r.desired < r.min {
                    errs.push("replicas.desired", "must be at least replicas.min");
                }
            }
            (None, _) => {}
        }
        if ok("kind") && self.kind == JobKind::Inference && self.gang == Some(true) {
            errs.push("gang", "inference replicas are placed independently; leave gang out");
        }
        if ok("regular_gpus") && ok("kind") && ok("gpus") && ok("replicas") {
            self.check_regular_gpus(&mut errs);
        }
        self.validate_work(&mut errs);
        // Only when the filters themselves are valid is "nothing matches" a meaningful message.
        if errs.is_empty() && whole && broken.is_empty() {
            let sizes = self.acceptable_sizes(catalog);
            let regions = self.allowed_regions(catalog);
            if sizes.is_empty() {
                let what = if !self.sizes.is_empty() {
                    "sizes"
                } else if !self.gpu_models.is_empty() {
                    "gpu_models"
                } else {
                    "kind"
                };
                errs.push(
                    what,
                    format!(
                        "no catalog size matches (GPU models, sizes, min_gpus_per_vm {})",
                        self.min_gpus_per_vm.unwrap_or(1)
                    ),
                );
            } else if !sizes.iter().any(|s| regions.iter().any(|r| catalog.is_priced(&s.name, r))) {
                errs.push("regions", "none of the acceptable sizes has a known price in the allowed regions");
            }
        }
        errs.into_result(())
    }
}

impl JobSpec {
    /// The checks of `regular_gpus`: a base only a splittable job can keep while its spot part
    /// comes and goes (a gang stops whole on any loss), at most what the job wants, whole replicas
    /// for a service, and regular VMs its spot policy lets it have.
    fn check_regular_gpus(&self, errs: &mut FieldErrors) {
        let Some(base) = self.regular_gpus else { return };
        if self.is_gang() {
            errs.push(
                "regular_gpus",
                "only splittable jobs (batch with gang = false, inference) keep a regular base; a gang runs whole",
            );
            return;
        }
        if self.spot == Some(SpotPolicy::Only) && base > 0 {
            errs.push("regular_gpus", "spot = \"only\" runs nothing on regular VMs; leave regular_gpus out");
        }
        let wanted = self.wanted_gpus();
        if base > wanted {
            let what = if self.replicas.is_some() { "replicas.desired × gpus" } else { "gpus" };
            errs.push("regular_gpus", format!("must be at most {what} ({wanted}; got {base})"));
        }
        if self.kind == JobKind::Inference && self.gpus > 0 && base % self.gpus != 0 {
            errs.push(
                "regular_gpus",
                format!("must be whole replicas, a multiple of gpus ({}; got {base})", self.gpus),
            );
        }
    }

    /// The checks of what the job runs (`run`, `setup`, `envs`, `workdir`, `image`, restarts, idle).
    fn validate_work(&self, errs: &mut FieldErrors) {
        check_script(errs, "run", self.run.as_deref());
        check_script(errs, "setup", self.setup.as_deref());
        let needs_run = |errs: &mut FieldErrors, field: &str| {
            errs.push(field, "needs run (a capacity-only job runs nothing)");
        };
        if self.run.is_none() {
            if self.setup.is_some() {
                needs_run(errs, "setup");
            }
            if !self.envs.is_empty() {
                needs_run(errs, "envs");
            }
            if self.workdir.is_some() {
                needs_run(errs, "workdir");
            }
            if self.image.is_some() {
                needs_run(errs, "image");
            }
            if self.max_restarts.is_some() {
                needs_run(errs, "max_restarts");
            }
        }
        if self.envs.len() > MAX_ENVS {
            errs.push("envs", format!("at most {MAX_ENVS} variables"));
        }
        for (key, value) in &self.envs {
            let field = format!("envs.{key}");
            let valid_name = key.len() <= 128
                && key.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid_name {
                errs.push(
                    field,
                    "not a valid variable name: letters, digits and '_', not starting with a digit, at most 128",
                );
            } else if key.to_ascii_uppercase().starts_with(RESERVED_ENV_PREFIX) {
                errs.push(field, "SPILLWAY_ variables are set by spillway and cannot be given");
            } else if value.contains('\0') {
                errs.push(field, "must not contain a NUL character");
            } else if value.len() > 8192 {
                errs.push(field, "must be at most 8192 bytes");
            }
        }
        if self.outputs.len() > MAX_OUTPUTS {
            errs.push("outputs", format!("at most {MAX_OUTPUTS} outputs"));
        }
        for (key, value) in &self.outputs {
            let field = format!("outputs.{key}");
            let valid_name = key.len() <= 64
                && key.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid_name {
                errs.push(
                    field,
                    "not a valid output name: letters, digits and '_', not starting with a digit, at most 64 \
                     (dependants get it as SPILLWAY_DEP_<NAME>_OUTPUT_<KEY>)",
                );
            } else if value.contains('\0') {
                errs.push(field, "must not contain a NUL character");
            } else if value.len() > 4096 {
                errs.push(field, "must be at most 4096 bytes");
            }
        }
        if let Some(w) = &self.workdir {
            if w.trim().is_empty() {
                errs.push("workdir", "must not be empty (leave it out for the agent's work directory)");
            } else if w.len() > 1024 || w.chars().any(char::is_control) {
                errs.push("workdir", "a path of at most 1024 characters without control characters");
            }
        }
        if let Some(image) = &self.image {
            if image.is_empty() {
                errs.push("image", "must not be empty (leave it out to run on the VM itself)");
            } else if image.chars().any(|c| c.is_whitespace() || c.is_control()) {
                errs.push("image", "must not contain spaces or control characters (e.g. ghcr.io/org/train:1.4)");
            } else if image.len() > 512
                || image.starts_with(['-', '.', '/', ':', '@'])
                || !image.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | ':' | '@' | '-'))
            {
                errs.push(
                    "image",
                    "not an image reference: letters, digits and . _ / : @ -, starting with a letter or digit, at most 512",
                );
            }
        }
        if self.max_restarts.is_some_and(|n| n > 100) {
            errs.push("max_restarts", "must be at most 100");
        }
        match self.idle_minutes {
            Some(0) => errs.push("idle_minutes", "must be at least 1"),
            Some(m) if m > 10_080 => errs.push("idle_minutes", "must be at most 10080 (a week)"),
            _ => {}
        }
        if self.on_idle.is_some() && self.idle_minutes.is_none() {
            errs.push("on_idle", "needs idle_minutes (how long the GPUs must stay idle)");
        }
    }
}

fn check_script(errs: &mut FieldErrors, field: &str, script: Option<&str>) {
    let Some(s) = script else { return };
    if s.trim().is_empty() {
        errs.push(field, "must not be empty (leave it out for a capacity-only job)");
    } else if s.len() > MAX_SCRIPT_BYTES {
        errs.push(field, format!("must be at most {MAX_SCRIPT_BYTES} bytes"));
    } else if s.contains('\0') {
        errs.push(field, "must not contain a NUL character");
    }
}

/// The bounds of a whole-number field, in the user's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntBounds {
    /// Smallest accepted value.
    pub min: i128,
    /// Largest accepted value.
    pub max: i128,
    /// Why the maximum is what it is, for the message.
    pub why_max: &'static str,
}

impl IntBounds {
    /// The problem with `v`, if it is out of bounds.
    pub fn problem(&self, v: i128) -> Option<String> {
        if v < self.min {
            Some(format!("must be ≥ {} (got {v})", self.min))
        } else if v > self.max {
            Some(format!("must be ≤ {}{} (got {v})", self.max, self.why_max))
        } else {
            None
        }
    }
}

/// The bounds of each whole-number field of a spec (README's field table lists them).
pub fn int_bounds(field: &str) -> Option<IntBounds> {
    let b = |min: i128, max: i128, why_max: &'static str| Some(IntBounds { min, max, why_max });
    match field {
        "gpus" => b(1, MAX_GPUS as i128, ", the most one job may ask for"),
        "min_gpus_per_vm" => b(1, 8, ": no Azure size has more GPUs per VM"),
        "checkpoint_interval_minutes" => b(1, MAX_CHECKPOINT_MINUTES as i128, ", a year"),
        "priority" => b(1, 1000, ""),
        "regular_gpus" => b(0, MAX_GPUS as i128, ", the most one job may ask for"),
        "replicas.min" | "replicas.desired" => b(1, MAX_REPLICAS as i128, ""),
        _ => None,
    }
}

/// Most replicas an inference service may ask for.
pub const MAX_REPLICAS: u32 = 1000;
/// Shortest `duration_hours`: one minute, the control loop's resolution.
pub const MIN_DURATION_HOURS: f64 = 1.0 / 60.0;
/// Longest `duration_hours`: a (leap) year.
pub const MAX_DURATION_HOURS: f64 = 8784.0;
/// Furthest `deadline`, in days from now: five years. Far enough for any plan (and for examples
/// that must stay valid for years), near enough to catch a typed 9999.
pub const MAX_DEADLINE_DAYS: i64 = 1827;
/// Largest `checkpoint_interval_minutes`: a year.
pub const MAX_CHECKPOINT_MINUTES: u32 = 527_040;
/// Largest `data_gb`: 1 PB.
pub const MAX_DATA_GB: f64 = 1_000_000.0;
/// Largest `max_price_per_hour`, USD: 4096 GPUs at the dearest list price are about 50,000.
pub const MAX_PRICE_PER_HOUR: f64 = 1_000_000.0;
/// Largest `budget`, USD: a year of the largest price cap is about 10^10; no real budget is near.
pub const MAX_BUDGET_USD: f64 = 1_000_000_000.0;

/// Checks a number against `(min, max]` (`exclusive_min`) or `[min, max]`.
pub(super) fn bounded(
    errs: &mut FieldErrors,
    field: &str,
    v: f64,
    min: f64,
    exclusive_min: bool,
    max: f64,
    unit: &str,
) {
    if !v.is_finite() {
        errs.push(field, format!("must be a finite number (got {v})"));
    } else if exclusive_min && v <= min {
        errs.push(field, format!("must be more than {min} (got {v})"));
    } else if !exclusive_min && v < min {
        errs.push(field, format!("must be ≥ {min} (got {v})"));
    } else if v > max {
        errs.push(field, format!("must be at most {max} {unit} (got {v})"));
    }
}

pub(super) fn check_label(errs: &mut FieldErrors, field: &str, value: &str) {
    if value.trim().is_empty() {
        errs.push(field, "must not be empty");
    } else if value.len() > 63 {
        errs.push(field, "must be at most 63 characters");
    } else if !value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
        errs.push(field, "may contain only letters, digits, '-', '_' and '.'");
    }
}
