//! The what-if scenario file: TOML, parsed strictly (unknown fields are errors) and validated in
//! one pass that reports every problem with its field path (`events[2].region`).
//!
//! ```toml
//! [experiment]
//! kind = "what-if"
//!
//! [scenario]
//! name = "default"
//! start = "2026-01-05T00:00:00Z"   # virtual time of the first instant
//! horizon_hours = 168
//! interval_seconds = 60            # one reconcile round per interval
//! seed = 42                        # the workload's draws and the cloud's (overrides [cloud] seed)
//! policies = ["spillway", "greedy-failover", "single-region", "regular-only"]
//!
//! [cloud]                          # simulator::sim_cloud::SimCloudConfig
//! regions = ["eastus", "westus3"]
//!
//! [[sizes]]                        # optional: sizes added to the catalog, or replacing one by name
//! name = "Standard_NC24ads_A100_v4"
//! family = "standardNCADSA100v4Family"
//! vcpus = 24
//! memory_gib = 220
//! gpu_model = "A100-80GB"
//! gpus = 1
//! gpu_memory_gib = 80
//! infiniband = false
//! workloads = ["training", "inference"]
//!
//! [[prices]]                       # optional static overrides of catalog prices (USD per VM-hour)
//! size = "Standard_NC24ads_A100_v4"
//! region = "westus3"
//! spot = 0.30
//!
//! [workload]                       # see `workload`
//! source = "synthetic"
//! fit = "philly"
//!
//! [workload.pipelines]             # optional: chain a share of the jobs into pipelines
//! fraction = 0.3                   # of the jobs, in (0, 1]
//! stages = [2, 4]                  # fewest, most stages (default [2, 4])
//! output_gb = [50, 500]            # each stage's declared output (default [50, 500])
//! deadline_slack = 1.5             # deadline = arrival + slack × critical path (optional)
//! budget_factor = 1.5              # budget = factor × its stages' cheapest expected cost (optional)
//!
//! [[events]]                       # outage | capacity | eviction-rate | quota | price
//! kind = "outage"
//! region = "eastus"
//! gpu_model = "A100"
//! at_hours = 84
//! until_hours = 90
//!
//! [[events]]                       # a price from a time on (back to the list price at until_hours)
//! kind = "price"
//! region = "westus3"
//! size = "Standard_NC24ads_A100_v4"
//! priority = "spot"                # default spot
//! usd = 1.10                       # per VM-hour
//! at_hours = 24
//!
//! [[traces]]                       # capacity | eviction-rate | price, one value per trace tick
//! kind = "capacity"
//! path = "../../shared/data/spot/aws-2023-08-27-16node/us-west-2a_v100_8.json"
//! region = "westus3"
//! size = "Standard_NC24ads_A100_v4"
//! per_unit = 0.5                   # VMs per trace unit
//! ```

use std::path::{Path, PathBuf};

use scheduler::Catalog;
use scheduler::catalog::PriceRow;
use scheduler::model::{FieldErrors, MAX_DATA_GB, Priority, QuotaPool, SpotPolicy, VmSize};
use serde::Deserialize;
use time::OffsetDateTime;

use super::fit::PhillyFit;
use super::{KIND, WhatIfError};
use crate::sim_cloud::SimCloudConfig;

/// A policy compared by a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Policy {
    /// The real solver and control loop.
    Spillway,
    /// A per-job broker: the cheapest offer first, tried in turn with no quota check.
    GreedyFailover,
    /// SkyPilot's failover: per job, cheapest first, each candidate once per pass, 30 s between
    /// passes.
    SkypilotLike,
    /// Each job's first allowed region only, waiting there for capacity.
    SingleRegion,
    /// The real control loop with spot disabled for every job.
    RegularOnly,
}

impl Policy {
    /// Every policy, in report order.
    pub const ALL: [Policy; 5] =
        [Policy::Spillway, Policy::GreedyFailover, Policy::SkypilotLike, Policy::SingleRegion, Policy::RegularOnly];

    /// The name used in files and reports.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Spillway => "spillway",
            Policy::GreedyFailover => "greedy-failover",
            Policy::SkypilotLike => "skypilot-like",
            Policy::SingleRegion => "single-region",
            Policy::RegularOnly => "regular-only",
        }
    }

    /// Parses a policy name.
    pub fn parse(name: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// A validated scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Short name (used in reports).
    pub name: String,
    /// What it asks, for people.
    pub description: String,
    /// Virtual start time, Unix ms.
    pub start_ms: i64,
    /// Length of the run, ms.
    pub horizon_ms: i64,
    /// Time between reconcile rounds, ms.
    pub interval_ms: i64,
    /// Seed of the workload generator and of the simulated cloud.
    pub seed: u64,
    /// Policies compared, in file order.
    pub policies: Vec<Policy>,
    /// The simulated cloud.
    pub cloud: SimCloudConfig,
    /// Sizes added to the catalog, or replacing one of the same name.
    pub sizes: Vec<VmSize>,
    /// Static price overrides applied to the catalog.
    pub prices: Vec<PriceRow>,
    /// The workload.
    pub workload: WorkloadConfig,
    /// Scheduled changes to the cloud.
    pub events: Vec<ScenarioEvent>,
    /// Trace-driven changes to the cloud.
    pub traces: Vec<TraceConfig>,
    /// Directory relative paths resolve against.
    pub base_dir: PathBuf,
    /// Where it came from (a path or `default`).
    pub origin: String,
}

/// Where the jobs come from, and how trace rows become `JobSpec`s.
#[derive(Debug, Clone)]
pub struct WorkloadConfig {
    /// The source.
    pub source: WorkloadSource,
    /// How a job of the source maps onto a `JobSpec`.
    pub mapping: Mapping,
    /// Keep at most this many jobs (the first by submission time).
    pub limit: Option<usize>,
    /// Chain a share of the jobs into pipelines (`[workload.pipelines]`).
    pub pipelines: Option<PipelineMix>,
}

/// `[workload.pipelines]`: a seeded share of the workload's jobs chained into pipelines, each a
/// chain of jobs of one tenant submitted whole at its first job's arrival.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineMix {
    /// Share of the jobs that end up in a pipeline, in (0, 1].
    pub fraction: f64,
    /// Fewest and most stages of a pipeline (each at least 2).
    pub stages: (u32, u32),
    /// Range each stage's declared `output_gb` is drawn from.
    pub output_gb: (f64, f64),
    /// The pipeline's deadline is its arrival + `slack × critical path` (the sum of its stages'
    /// durations); the mapping's `deadline_slack` when absent; no deadline when neither is set.
    pub deadline_slack: Option<f64>,
    /// The pipeline's `budget` is `factor ×` the sum of its stages' cheapest expected costs (each
    /// stage's GPUs on the cheapest offer it accepts at the catalog's prices, for its duration);
    /// no budget when absent.
    pub budget_factor: Option<f64>,
}

/// A workload source.
#[derive(Debug, Clone)]
pub enum WorkloadSource {
    /// Seeded synthetic demand with sizes, durations and arrival pattern from fitted figures.
    Synthetic {
        /// The fitted figures.
        fit: PhillyFit,
        /// Mean arrivals per hour (the fit's own rate when absent).
        jobs_per_hour: f64,
    },
    /// The Philly CSV (`timestamp,duration,num_gpus,gpu_time,cluster`).
    Philly {
        /// The file.
        path: PathBuf,
        /// Trace time of the run's start (default: the first submission).
        from: Option<OffsetDateTime>,
    },
    /// The Alibaba pods CSV (`creation_time`, `scheduled_time`, `deletion_time` in seconds).
    Alibaba {
        /// The file.
        path: PathBuf,
        /// Trace seconds at the run's start (default: the first creation).
        from_seconds: Option<f64>,
    },
    /// Our own JSON lines: `{"at_hours": 1.5, "id": "optional", "spec": {JobSpec}}` per line.
    JsonLines {
        /// The file.
        path: PathBuf,
    },
}

/// How a trace job (GPU count, duration, tenant) becomes a `JobSpec`; see the README's
/// "What-if simulation" section.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapping {
    /// Acceptable GPU models of every mapped job.
    pub gpu_models: Vec<String>,
    /// Spot policy of jobs short enough for spot.
    pub spot: SpotPolicy,
    /// Jobs longer than this many hours never run on spot (none: no limit).
    pub spot_max_hours: Option<f64>,
    /// Checkpoint interval of every mapped job.
    pub checkpoint_interval_minutes: Option<u32>,
    /// Durations below this are raised to it, minutes.
    pub min_duration_minutes: f64,
    /// Durations above this are cut to it, hours.
    pub max_duration_hours: Option<f64>,
    /// GPU counts above this are cut to it.
    pub max_gpus: Option<u32>,
    /// Minimum GPUs per VM (e.g. 8 to keep big jobs inside one NVLink domain) for jobs of at
    /// least that many GPUs.
    pub min_gpus_per_vm: Option<u32>,
    /// When set, every job gets a deadline `slack × duration` after its submission.
    pub deadline_slack: Option<f64>,
    /// Each tenant's region list starts at a home region picked by hashing the tenant (true), or
    /// every job lists the regions in `[cloud] regions` order (false).
    pub home_regions: bool,
}

/// A scheduled change to the cloud.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioEvent {
    /// When, ms after the start.
    pub at_ms: i64,
    /// When it is undone, ms after the start (never when absent).
    pub until_ms: Option<i64>,
    /// What changes.
    pub action: EventAction,
}

/// What a scheduled event changes.
#[derive(Debug, Clone, PartialEq)]
pub enum EventAction {
    /// Capacity falls to zero in a region, or for some sizes (and/or one priority) in it.
    Outage {
        /// Region.
        region: String,
        /// Sizes affected (empty: the whole region).
        sizes: Vec<String>,
        /// Priority affected (both when absent).
        priority: Option<Priority>,
    },
    /// An offer's capacity becomes `vms`.
    Capacity {
        /// Region.
        region: String,
        /// Size.
        size: String,
        /// Priority.
        priority: Priority,
        /// VMs.
        vms: u32,
    },
    /// Spot evictions per VM-hour for some sizes of a region.
    EvictionRate {
        /// Region.
        region: String,
        /// Sizes (every spot size of the region when the file names none).
        sizes: Vec<String>,
        /// Evictions per VM-hour.
        rate: f64,
    },
    /// A quota limit.
    Quota {
        /// Region.
        region: String,
        /// Pool.
        pool: QuotaPool,
        /// vCPUs.
        vcpus: u64,
    },
    /// An offer's price, USD per VM-hour.
    Price {
        /// Region.
        region: String,
        /// Size.
        size: String,
        /// Priority.
        priority: Priority,
        /// USD per VM-hour.
        usd: f64,
    },
}

/// What a trace drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceKind {
    /// An offer's capacity: `round(value × per_unit)` VMs.
    Capacity,
    /// A spot offer's eviction rate: `value × per_unit` per VM-hour.
    EvictionRate,
    /// An offer's price: `value × per_unit` USD per VM-hour.
    Price,
}

/// A trace-driven change: one value per tick of the trace, applied when it changes.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceConfig {
    /// What it drives.
    pub kind: TraceKind,
    /// The trace file (resolved).
    pub path: PathBuf,
    /// Region.
    pub region: String,
    /// Size.
    pub size: String,
    /// Priority (capacity traces; eviction rates are spot's).
    pub priority: Priority,
    /// Multiplier from trace units.
    pub per_unit: f64,
    /// Hours into the trace at the run's start.
    pub offset_hours: f64,
}

// ---- the file as written ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    experiment: RawExperiment,
    scenario: RawScenario,
    cloud: SimCloudConfig,
    workload: RawWorkload,
    #[serde(default)]
    sizes: Vec<VmSize>,
    #[serde(default)]
    prices: Vec<PriceRow>,
    #[serde(default)]
    events: Vec<RawEvent>,
    #[serde(default)]
    traces: Vec<RawTrace>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExperiment {
    kind: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: String,
    #[serde(default)]
    description: String,
    start: String,
    horizon_hours: f64,
    #[serde(default = "default_interval")]
    interval_seconds: f64,
    #[serde(default = "default_seed")]
    seed: u64,
    #[serde(default = "default_policies")]
    policies: Vec<String>,
}

fn default_interval() -> f64 {
    60.0
}
fn default_seed() -> u64 {
    1
}
fn default_policies() -> Vec<String> {
    Policy::ALL.iter().map(|p| p.name().to_string()).collect()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    source: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    fit: Option<String>,
    #[serde(default)]
    jobs_per_hour: Option<f64>,
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    from_seconds: Option<f64>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    mapping: RawMapping,
    #[serde(default)]
    pipelines: Option<RawPipelines>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPipelines {
    fraction: f64,
    #[serde(default)]
    stages: Option<Vec<u32>>,
    #[serde(default)]
    output_gb: Option<Vec<f64>>,
    #[serde(default)]
    deadline_slack: Option<f64>,
    #[serde(default)]
    budget_factor: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawMapping {
    #[serde(default)]
    gpu_models: Option<Vec<String>>,
    #[serde(default)]
    spot: Option<SpotPolicy>,
    #[serde(default)]
    spot_max_hours: Option<f64>,
    #[serde(default)]
    checkpoint_interval_minutes: Option<u32>,
    #[serde(default)]
    min_duration_minutes: Option<f64>,
    #[serde(default)]
    max_duration_hours: Option<f64>,
    #[serde(default)]
    max_gpus: Option<u32>,
    #[serde(default)]
    min_gpus_per_vm: Option<u32>,
    #[serde(default)]
    deadline_slack: Option<f64>,
    #[serde(default)]
    home_regions: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvent {
    kind: String,
    at_hours: f64,
    #[serde(default)]
    until_hours: Option<f64>,
    region: String,
    #[serde(default)]
    size: Option<String>,
    #[serde(default)]
    sizes: Vec<String>,
    #[serde(default)]
    gpu_model: Option<String>,
    #[serde(default)]
    priority: Option<Priority>,
    #[serde(default)]
    vms: Option<u32>,
    #[serde(default)]
    rate: Option<f64>,
    #[serde(default)]
    pool: Option<String>,
    #[serde(default)]
    vcpus: Option<u64>,
    #[serde(default)]
    usd: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTrace {
    kind: String,
    path: String,
    region: String,
    size: String,
    #[serde(default)]
    priority: Option<Priority>,
    per_unit: f64,
    #[serde(default)]
    offset_hours: f64,
}

impl Scenario {
    /// Reads and validates a scenario file; relative paths in it resolve against its directory.
    pub fn load(path: &Path) -> Result<Scenario, WhatIfError> {
        let text = std::fs::read_to_string(path).map_err(|e| WhatIfError::io("scenario", path, &e))?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Scenario::parse(&text, &dir, &path.display().to_string())
    }

    /// The bundled `default` scenario (paths resolve against `base_dir`).
    pub fn bundled_default(base_dir: &Path) -> Result<Scenario, WhatIfError> {
        Scenario::parse(super::DEFAULT_SCENARIO, base_dir, "default")
    }

    /// The catalog this scenario prices with: the built-in one plus its `[[sizes]]` and `[[prices]]`.
    pub fn catalog(&self) -> Catalog {
        let mut c = Catalog::builtin();
        c.extend(self.sizes.clone(), self.prices.clone());
        c
    }

    /// Replaces the seed (of the workload and of the cloud).
    pub fn with_seed(mut self, seed: u64) -> Scenario {
        self.seed = seed;
        self.cloud.seed = seed;
        self
    }

    /// Parses and validates scenario TOML; every problem is reported with its field path.
    pub fn parse(text: &str, base_dir: &Path, origin: &str) -> Result<Scenario, WhatIfError> {
        if !super::is_what_if(text) {
            return Err(WhatIfError::invalid(
                origin,
                "experiment.kind",
                format!("must be {KIND:?} for a what-if scenario"),
            ));
        }
        let raw: RawFile = serde_path_to_error::deserialize(toml::Deserializer::new(text)).map_err(|e| {
            let path = e.path().to_string();
            WhatIfError::invalid(origin, if path == "." { "" } else { &path }, e.into_inner().message().to_string())
        })?;
        let mut errs = FieldErrors::default();
        if raw.experiment.kind != KIND {
            errs.push("experiment.kind", format!("must be {KIND:?}"));
        }
        let mut cloud = raw.cloud;
        let mut catalog = Catalog::builtin();
        scheduler::catalog::check_sizes(&mut errs, &raw.sizes);
        catalog.extend(raw.sizes.clone(), Vec::new());
        for (i, p) in raw.prices.iter().enumerate() {
            if catalog.size(&p.size).is_none() {
                errs.push(format!("prices[{i}].size"), format!("unknown size {:?}", p.size));
            }
            if !cloud.regions.contains(&p.region) {
                errs.push(format!("prices[{i}].region"), format!("{} is not in cloud.regions", p.region));
            }
            for (f, v) in [("regular", p.regular), ("spot", p.spot)] {
                if v.is_some_and(|v| !v.is_finite() || v < 0.0) {
                    errs.push(format!("prices[{i}].{f}"), "must be a price ≥ 0 (USD per VM-hour)");
                }
            }
        }
        catalog.extend(Vec::new(), raw.prices.clone());
        if let Err(e) = cloud.validate(&catalog) {
            errs.0.extend(e.0);
        }
        let s = &raw.scenario;
        if s.name.trim().is_empty() {
            errs.push("scenario.name", "must not be empty");
        }
        let start_ms = match OffsetDateTime::parse(&s.start, &time::format_description::well_known::Rfc3339) {
            Ok(t) => (t.unix_timestamp_nanos() / 1_000_000) as i64,
            Err(e) => {
                errs.push("scenario.start", format!("expected an RFC 3339 time such as 2026-01-05T00:00:00Z: {e}"));
                0
            }
        };
        if !(s.horizon_hours.is_finite() && s.horizon_hours > 0.0 && s.horizon_hours <= 24.0 * 366.0) {
            errs.push("scenario.horizon_hours", "must be more than 0 and at most a year (8784)");
        }
        if !(s.interval_seconds.is_finite() && s.interval_seconds >= 1.0 && s.interval_seconds <= 86_400.0) {
            errs.push("scenario.interval_seconds", "must be between 1 and 86400");
        }
        let mut policies = Vec::new();
        if s.policies.is_empty() {
            errs.push("scenario.policies", "must name at least one policy");
        }
        for (i, name) in s.policies.iter().enumerate() {
            match Policy::parse(name) {
                Some(p) if policies.contains(&p) => {
                    errs.push(format!("scenario.policies[{i}]"), format!("{name} is listed twice"))
                }
                Some(p) => policies.push(p),
                None => errs.push(
                    format!("scenario.policies[{i}]"),
                    format!("unknown policy {name:?}; known: {}", Policy::ALL.map(|p| p.name()).join(", ")),
                ),
            }
        }
        let horizon_ms = (s.horizon_hours * 3_600_000.0) as i64;
        let workload = parse_workload(&raw.workload, base_dir, &catalog, &mut errs);
        let mut events = Vec::new();
        for (i, e) in raw.events.iter().enumerate() {
            if let Some(ev) = parse_event(i, e, &cloud, &catalog, horizon_ms, &mut errs) {
                events.push(ev);
            }
        }
        let mut traces = Vec::new();
        for (i, t) in raw.traces.iter().enumerate() {
            if let Some(tr) = parse_trace(i, t, base_dir, &cloud, &catalog, &mut errs) {
                traces.push(tr);
            }
        }
        if !errs.is_empty() {
            return Err(WhatIfError::Invalid { origin: origin.to_string(), errors: errs });
        }
        cloud.seed = s.seed;
        Ok(Scenario {
            name: s.name.clone(),
            description: s.description.clone(),
            start_ms,
            horizon_ms,
            interval_ms: (s.interval_seconds * 1000.0) as i64,
            seed: s.seed,
            policies,
            cloud,
            sizes: raw.sizes,
            prices: raw.prices,
            workload: workload.expect("no errors means the workload parsed"),
            events,
            traces,
            base_dir: base_dir.to_path_buf(),
            origin: origin.to_string(),
        })
    }
}

fn parse_workload(w: &RawWorkload, base: &Path, catalog: &Catalog, errs: &mut FieldErrors) -> Option<WorkloadConfig> {
    let m = &w.mapping;
    let gpu_models = m.gpu_models.clone().unwrap_or_else(|| vec!["V100".to_string()]);
    if gpu_models.is_empty() {
        errs.push("workload.mapping.gpu_models", "must name at least one GPU model");
    }
    for (i, g) in gpu_models.iter().enumerate() {
        if !catalog.sizes().iter().any(|s| s.gpus > 0 && s.matches_gpu_model(g)) {
            errs.push(format!("workload.mapping.gpu_models[{i}]"), format!("unknown GPU model {g:?}"));
        }
    }
    let positive = |errs: &mut FieldErrors, f: &str, v: Option<f64>| {
        if v.is_some_and(|v| !v.is_finite() || v <= 0.0) {
            errs.push(format!("workload.{f}"), "must be a number > 0");
        }
    };
    positive(errs, "mapping.spot_max_hours", m.spot_max_hours);
    positive(errs, "mapping.min_duration_minutes", m.min_duration_minutes);
    positive(errs, "mapping.max_duration_hours", m.max_duration_hours);
    positive(errs, "jobs_per_hour", w.jobs_per_hour);
    if m.deadline_slack.is_some_and(|s| !s.is_finite() || s < 1.0) {
        errs.push(
            "workload.mapping.deadline_slack",
            "must be at least 1 (a deadline shorter than the job cannot be met)",
        );
    }
    if m.max_gpus == Some(0) {
        errs.push("workload.mapping.max_gpus", "must be at least 1");
    }
    if m.checkpoint_interval_minutes == Some(0) {
        errs.push("workload.mapping.checkpoint_interval_minutes", "must be at least 1");
    }
    if m.min_gpus_per_vm.is_some_and(|g| g == 0 || g > 8) {
        errs.push("workload.mapping.min_gpus_per_vm", "must be between 1 and 8");
    }
    if w.limit == Some(0) {
        errs.push("workload.limit", "must be at least 1");
    }
    let mapping = Mapping {
        gpu_models,
        spot: m.spot.unwrap_or(SpotPolicy::Allowed),
        spot_max_hours: m.spot_max_hours,
        checkpoint_interval_minutes: m.checkpoint_interval_minutes.or(Some(30)),
        min_duration_minutes: m.min_duration_minutes.unwrap_or(1.0),
        max_duration_hours: m.max_duration_hours,
        max_gpus: m.max_gpus,
        min_gpus_per_vm: m.min_gpus_per_vm,
        deadline_slack: m.deadline_slack,
        home_regions: m.home_regions.unwrap_or(true),
    };
    let path = |errs: &mut FieldErrors| match &w.path {
        Some(p) => Some(base.join(p)),
        None => {
            errs.push("workload.path", format!("source {:?} needs the trace file's path", w.source));
            None
        }
    };
    let unused = |errs: &mut FieldErrors, field: &str, set: bool| {
        if set {
            errs.push(format!("workload.{field}"), format!("is not used by source {:?}", w.source));
        }
    };
    let source = match w.source.as_str() {
        "synthetic" => {
            unused(errs, "path", w.path.is_some());
            unused(errs, "from", w.from.is_some());
            unused(errs, "from_seconds", w.from_seconds.is_some());
            let fit = match w.fit.as_deref() {
                None | Some("philly") => PhillyFit::builtin(),
                Some(file) => {
                    let p = base.join(file);
                    match std::fs::read_to_string(&p) {
                        Ok(t) => match PhillyFit::parse(&t) {
                            Ok(f) => f,
                            Err(e) => {
                                errs.push("workload.fit", format!("{}: {e}", p.display()));
                                return None;
                            }
                        },
                        Err(e) => {
                            errs.push("workload.fit", format!("cannot read {}: {e}", p.display()));
                            return None;
                        }
                    }
                }
            };
            let jobs_per_hour = w.jobs_per_hour.unwrap_or(fit.jobs_per_hour);
            Some(WorkloadSource::Synthetic { fit, jobs_per_hour })
        }
        "philly" => {
            unused(errs, "fit", w.fit.is_some());
            unused(errs, "jobs_per_hour", w.jobs_per_hour.is_some());
            unused(errs, "from_seconds", w.from_seconds.is_some());
            let from = match &w.from {
                Some(f) => match OffsetDateTime::parse(f, &time::format_description::well_known::Rfc3339) {
                    Ok(t) => Some(t),
                    Err(e) => {
                        errs.push("workload.from", format!("expected an RFC 3339 time: {e}"));
                        None
                    }
                },
                None => None,
            };
            path(errs).map(|path| WorkloadSource::Philly { path, from })
        }
        "alibaba" => {
            unused(errs, "fit", w.fit.is_some());
            unused(errs, "jobs_per_hour", w.jobs_per_hour.is_some());
            unused(errs, "from", w.from.is_some());
            path(errs).map(|path| WorkloadSource::Alibaba { path, from_seconds: w.from_seconds })
        }
        "jsonl" => {
            unused(errs, "fit", w.fit.is_some());
            unused(errs, "jobs_per_hour", w.jobs_per_hour.is_some());
            unused(errs, "from", w.from.is_some());
            unused(errs, "from_seconds", w.from_seconds.is_some());
            path(errs).map(|path| WorkloadSource::JsonLines { path })
        }
        other => {
            errs.push("workload.source", format!("unknown source {other:?}; known: synthetic, philly, alibaba, jsonl"));
            None
        }
    };
    let pipelines = w.pipelines.as_ref().and_then(|p| parse_pipelines(p, errs));
    source.map(|source| WorkloadConfig { source, mapping, limit: w.limit, pipelines })
}

/// `[workload.pipelines]`, every problem under its field.
fn parse_pipelines(p: &RawPipelines, errs: &mut FieldErrors) -> Option<PipelineMix> {
    let before = errs.0.len();
    if !(p.fraction.is_finite() && p.fraction > 0.0 && p.fraction <= 1.0) {
        errs.push("workload.pipelines.fraction", format!("must be in (0, 1] (got {})", p.fraction));
    }
    let stages = match p.stages.as_deref() {
        None => (2, 4),
        Some(&[lo, hi]) if lo >= 2 && lo <= hi && hi as usize <= scheduler::model::MAX_PIPELINE_JOBS => (lo, hi),
        Some(v) => {
            errs.push(
                "workload.pipelines.stages",
                format!(
                    "must be [fewest, most] with 2 ≤ fewest ≤ most ≤ {} (got {v:?})",
                    scheduler::model::MAX_PIPELINE_JOBS
                ),
            );
            (2, 2)
        }
    };
    let output_gb = match p.output_gb.as_deref() {
        None => (50.0, 500.0),
        Some(&[lo, hi]) if lo.is_finite() && hi.is_finite() && lo >= 0.0 && lo <= hi && hi <= MAX_DATA_GB => (lo, hi),
        Some(v) => {
            errs.push(
                "workload.pipelines.output_gb",
                format!("must be [least, most] GB with 0 ≤ least ≤ most ≤ {MAX_DATA_GB} (got {v:?})"),
            );
            (0.0, 0.0)
        }
    };
    if p.deadline_slack.is_some_and(|s| !s.is_finite() || s < 1.0) {
        errs.push(
            "workload.pipelines.deadline_slack",
            "must be at least 1 (a deadline shorter than the critical path cannot be met)",
        );
    }
    if p.budget_factor.is_some_and(|f| !f.is_finite() || f <= 0.0 || f > 100.0) {
        errs.push(
            "workload.pipelines.budget_factor",
            format!("must be in (0, 100] (got {})", p.budget_factor.unwrap_or_default()),
        );
    }
    (errs.0.len() == before).then_some(PipelineMix {
        fraction: p.fraction,
        stages,
        output_gb,
        deadline_slack: p.deadline_slack,
        budget_factor: p.budget_factor,
    })
}

fn parse_hours(errs: &mut FieldErrors, field: &str, h: f64, horizon_ms: i64) -> i64 {
    if !h.is_finite() || h < 0.0 {
        errs.push(field, "must be a number of hours ≥ 0");
        return 0;
    }
    let ms = (h * 3_600_000.0) as i64;
    if ms > horizon_ms {
        errs.push(field, "is after the horizon");
    }
    ms
}

fn check_region(errs: &mut FieldErrors, field: &str, region: &str, cloud: &SimCloudConfig) {
    if !cloud.regions.iter().any(|r| r == region) {
        errs.push(field, format!("{region} is not in cloud.regions"));
    }
}

/// The catalog spelling of `size` when it is sold in `region` by this cloud.
fn check_size(
    errs: &mut FieldErrors,
    field: &str,
    size: &str,
    region: &str,
    cloud: &SimCloudConfig,
    catalog: &Catalog,
) -> Option<String> {
    match catalog.size(size) {
        None => {
            errs.push(field, format!("unknown size {size:?}"));
            None
        }
        Some(s) if !cloud.offers_size(&s.name) || catalog.price(&s.name, region).is_none() => {
            errs.push(field, format!("{} is not sold in {region} by this cloud", s.name));
            None
        }
        Some(s) => Some(s.name.clone()),
    }
}

/// A price event or trace changes a price the catalog knows; it never puts an offer on sale.
fn check_known_price(errs: &mut FieldErrors, field: &str, size: &str, region: &str, p: Priority, catalog: &Catalog) {
    if !size.is_empty() && catalog.price(size, region).and_then(|row| row.for_priority(p)).is_none() {
        errs.push(field, format!("{size} has no {p} price in {region} to change"));
    }
}

fn parse_event(
    i: usize,
    e: &RawEvent,
    cloud: &SimCloudConfig,
    catalog: &Catalog,
    horizon_ms: i64,
    errs: &mut FieldErrors,
) -> Option<ScenarioEvent> {
    let f = format!("events[{i}]");
    let before = errs.0.len();
    let at_ms = parse_hours(errs, &format!("{f}.at_hours"), e.at_hours, horizon_ms);
    let until_ms = e.until_hours.map(|u| parse_hours(errs, &format!("{f}.until_hours"), u, i64::MAX));
    if until_ms.is_some_and(|u| u <= at_ms) {
        errs.push(format!("{f}.until_hours"), "must be after at_hours");
    }
    check_region(errs, &format!("{f}.region"), &e.region, cloud);
    let mut sizes: Vec<String> = Vec::new();
    let named: Vec<String> = e.size.iter().chain(e.sizes.iter()).cloned().collect();
    for (j, s) in named.iter().enumerate() {
        if let Some(n) = check_size(errs, &format!("{f}.sizes[{j}]"), s, &e.region, cloud, catalog) {
            sizes.push(n);
        }
    }
    if let Some(model) = &e.gpu_model {
        let matching: Vec<String> = catalog
            .sizes()
            .iter()
            .filter(|s| {
                s.matches_gpu_model(model) && cloud.offers_size(&s.name) && catalog.price(&s.name, &e.region).is_some()
            })
            .map(|s| s.name.clone())
            .collect();
        if matching.is_empty() {
            errs.push(format!("{f}.gpu_model"), format!("no size with {model:?} GPUs is sold in {}", e.region));
        }
        sizes.extend(matching);
    }
    let not_for = |errs: &mut FieldErrors, field: &str, set: bool| {
        if set {
            errs.push(format!("{f}.{field}"), format!("is not used by kind {:?}", e.kind));
        }
    };
    let action = match e.kind.as_str() {
        "outage" => {
            not_for(errs, "usd", e.usd.is_some());
            not_for(errs, "vms", e.vms.is_some());
            not_for(errs, "rate", e.rate.is_some());
            not_for(errs, "pool", e.pool.is_some());
            not_for(errs, "vcpus", e.vcpus.is_some());
            EventAction::Outage { region: e.region.clone(), sizes, priority: e.priority }
        }
        "capacity" => {
            not_for(errs, "usd", e.usd.is_some());
            not_for(errs, "rate", e.rate.is_some());
            not_for(errs, "pool", e.pool.is_some());
            not_for(errs, "vcpus", e.vcpus.is_some());
            not_for(errs, "gpu_model", e.gpu_model.is_some());
            if sizes.len() != 1 && errs.0.len() == before {
                errs.push(format!("{f}.size"), "a capacity event names exactly one size");
            }
            let Some(vms) = e.vms else {
                errs.push(format!("{f}.vms"), "a capacity event needs vms");
                return None;
            };
            let Some(priority) = e.priority else {
                errs.push(format!("{f}.priority"), "a capacity event needs priority (regular or spot)");
                return None;
            };
            EventAction::Capacity {
                region: e.region.clone(),
                size: sizes.first().cloned().unwrap_or_default(),
                priority,
                vms,
            }
        }
        "eviction-rate" => {
            not_for(errs, "usd", e.usd.is_some());
            not_for(errs, "vms", e.vms.is_some());
            not_for(errs, "pool", e.pool.is_some());
            not_for(errs, "vcpus", e.vcpus.is_some());
            if e.priority.is_some_and(|p| p != Priority::Spot) {
                errs.push(format!("{f}.priority"), "only spot VMs are evicted");
            }
            let rate = match e.rate {
                Some(r) if r.is_finite() && r >= 0.0 => r,
                _ => {
                    errs.push(format!("{f}.rate"), "an eviction-rate event needs rate, a number ≥ 0 (per VM-hour)");
                    return None;
                }
            };
            if sizes.is_empty() && named.is_empty() && e.gpu_model.is_none() {
                sizes = catalog
                    .sizes()
                    .iter()
                    .filter(|s| {
                        cloud.offers_size(&s.name) && catalog.price(&s.name, &e.region).and_then(|p| p.spot).is_some()
                    })
                    .map(|s| s.name.clone())
                    .collect();
            }
            EventAction::EvictionRate { region: e.region.clone(), sizes, rate }
        }
        "quota" => {
            not_for(errs, "usd", e.usd.is_some());
            not_for(errs, "vms", e.vms.is_some());
            not_for(errs, "rate", e.rate.is_some());
            not_for(errs, "priority", e.priority.is_some());
            not_for(errs, "gpu_model", e.gpu_model.is_some());
            not_for(errs, "size", !named.is_empty());
            let (Some(pool), Some(vcpus)) = (&e.pool, e.vcpus) else {
                errs.push(
                    format!("{f}.pool"),
                    "a quota event needs pool (cores, lowPriorityCores or a family) and vcpus",
                );
                return None;
            };
            EventAction::Quota { region: e.region.clone(), pool: QuotaPool::parse(pool), vcpus }
        }
        "price" => {
            not_for(errs, "vms", e.vms.is_some());
            not_for(errs, "rate", e.rate.is_some());
            not_for(errs, "pool", e.pool.is_some());
            not_for(errs, "vcpus", e.vcpus.is_some());
            not_for(errs, "gpu_model", e.gpu_model.is_some());
            if sizes.len() != 1 && errs.0.len() == before {
                errs.push(format!("{f}.size"), "a price event names exactly one size");
            }
            let priority = e.priority.unwrap_or(Priority::Spot);
            let usd = match e.usd {
                Some(u) if u.is_finite() && u >= 0.0 => u,
                _ => {
                    errs.push(format!("{f}.usd"), "a price event needs usd, a price ≥ 0 (USD per VM-hour)");
                    return None;
                }
            };
            let size = sizes.first().cloned().unwrap_or_default();
            check_known_price(errs, &format!("{f}.priority"), &size, &e.region, priority, catalog);
            EventAction::Price { region: e.region.clone(), size, priority, usd }
        }
        other => {
            errs.push(
                format!("{f}.kind"),
                format!("unknown kind {other:?}; known: outage, capacity, eviction-rate, quota, price"),
            );
            return None;
        }
    };
    (errs.0.len() == before).then_some(ScenarioEvent { at_ms, until_ms, action })
}

fn parse_trace(
    i: usize,
    t: &RawTrace,
    base: &Path,
    cloud: &SimCloudConfig,
    catalog: &Catalog,
    errs: &mut FieldErrors,
) -> Option<TraceConfig> {
    let f = format!("traces[{i}]");
    let before = errs.0.len();
    let kind = match t.kind.as_str() {
        "capacity" => TraceKind::Capacity,
        "eviction-rate" => TraceKind::EvictionRate,
        "price" => TraceKind::Price,
        other => {
            errs.push(format!("{f}.kind"), format!("unknown kind {other:?}; known: capacity, eviction-rate, price"));
            TraceKind::Capacity
        }
    };
    check_region(errs, &format!("{f}.region"), &t.region, cloud);
    let size = check_size(errs, &format!("{f}.size"), &t.size, &t.region, cloud, catalog);
    if !(t.per_unit.is_finite() && t.per_unit >= 0.0) {
        errs.push(format!("{f}.per_unit"), "must be a number ≥ 0");
    }
    if !(t.offset_hours.is_finite() && t.offset_hours >= 0.0) {
        errs.push(format!("{f}.offset_hours"), "must be a number of hours ≥ 0");
    }
    let priority = t.priority.unwrap_or(Priority::Spot);
    if kind == TraceKind::EvictionRate && priority != Priority::Spot {
        errs.push(format!("{f}.priority"), "only spot VMs are evicted");
    }
    if kind == TraceKind::Price
        && let Some(size) = &size
    {
        check_known_price(errs, &format!("{f}.priority"), size, &t.region, priority, catalog);
    }
    (errs.0.len() == before).then(|| TraceConfig {
        kind,
        path: base.join(&t.path),
        region: t.region.clone(),
        size: size.unwrap_or_default(),
        priority,
        per_unit: t.per_unit,
        offset_hours: t.offset_hours,
    })
}
