//! The problem format (a public contract: `spillway plan --problem FILE` reads it, README documents it),
//! its strict parsing and its semantic validation.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use crate::priority::{Priority, SpotPolicy};

/// Everything the solver needs: what the cloud offers, the quota pools, the pending jobs, and the
/// optional egress price table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Problem {
    /// Every (region, size, priority) the jobs may be placed on.
    pub offers: Vec<Offer>,
    /// Quota pools with their free vCPUs; a pool not listed is unlimited.
    #[serde(default)]
    pub quotas: Vec<QuotaLimit>,
    /// The jobs to place.
    pub jobs: Vec<JobDemand>,
    /// USD per GB for moving a job's data from its `data_region` to where it runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<Egress>,
}

/// One (region, size, priority) a job can run on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Offer {
    /// Azure region, e.g. `eastus`.
    pub region: String,
    /// VM size, e.g. `Standard_NC24ads_A100_v4`.
    pub size: String,
    /// Spot or regular.
    pub priority: Priority,
    /// GPU model, e.g. `A100-80GB`; jobs match it exactly against their `gpu_models`.
    pub gpu_model: String,
    /// Whole GPUs per VM (at least 1; fractional-GPU sizes do not belong in a problem).
    #[serde(deserialize_with = "positive_u32")]
    pub gpus_per_vm: u32,
    /// vCPUs per VM: what quota counts.
    #[serde(deserialize_with = "positive_u32")]
    pub vcpus_per_vm: u32,
    /// Quota family, e.g. `standardNCADSA100v4Family` (compared lower-cased with spaces removed).
    pub family: String,
    /// USD per VM-hour.
    pub price_per_hour: f64,
    /// VMs of this offer available to all jobs together; `None` = unknown, treated as unbounded.
    #[serde(default)]
    pub capacity_vms: Option<u32>,
    /// Expected evictions per VM-hour (0 for regular).
    #[serde(default)]
    pub eviction_rate_per_hour: f64,
}

/// Free vCPUs of one quota pool in one region.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaLimit {
    /// Azure region.
    pub region: String,
    /// `cores` (all regular vCPUs), `lowPriorityCores` (all spot vCPUs) or a family name (regular vCPUs
    /// of that family). Compared lower-cased with spaces removed, as Azure spells them inconsistently.
    pub pool: String,
    /// vCPUs still free in the pool.
    pub vcpus: u64,
}

/// One pending job as the solver sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobDemand {
    /// Unique within the problem.
    pub id: String,
    /// GPUs wanted.
    #[serde(deserialize_with = "positive_u32")]
    pub gpus: u32,
    /// Acceptable GPU models (any of; exact names). Empty = any model.
    #[serde(default)]
    pub gpu_models: Vec<String>,
    /// All VMs on one offer, or nothing (the default). A non-gang job may be split over offers in
    /// whole VMs and counts only the GPUs placed.
    #[serde(default = "default_true")]
    pub gang: bool,
    /// Allowed regions; `None` = any.
    #[serde(default)]
    pub regions: Option<Vec<String>>,
    /// Regions never to use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_regions: Vec<String>,
    /// Spot policy; default `never`.
    #[serde(default)]
    pub spot: SpotPolicy,
    /// Weight per GPU in the objective (at least 1; default 1).
    #[serde(default = "default_priority", deserialize_with = "positive_u32")]
    pub priority: u32,
    /// Expected run time, for cost.
    pub duration_hours: f64,
    /// Cap on the job's total USD per hour (`vms × price_per_hour` over all its placements in this
    /// problem): what is left of the job's own cap after what it already holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_price_per_hour: Option<f64>,
    /// USD per hour the job already holds outside this problem (placements made before): not
    /// planned with (`max_price_per_hour` is already net of it), only added back when a wait
    /// reason states the job's total against its whole cap.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub held_price_per_hour: f64,
    /// Only offers with at least this many GPUs per VM.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "positive_u32_opt")]
    pub min_gpus_per_vm: Option<u32>,
    /// Cap on the job's expected cost (USD) in this problem: what is left of its own budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<f64>,
    /// USD the job has spent or is committed to outside this problem (as `held_price_per_hour`,
    /// only for stating the total in a wait reason).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub held_cost: f64,
    /// Where the job's data lives; running elsewhere costs egress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_region: Option<String>,
    /// How much data (GB) moves when the job runs outside `data_region`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_gb: Option<f64>,
    /// Explicit VM size allow-list; empty = any size.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sizes: Vec<String>,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl Default for JobDemand {
    /// A one-GPU, one-hour, priority-1 gang job with no constraints: valid once `id` is set.
    fn default() -> Self {
        JobDemand {
            id: String::new(),
            gpus: 1,
            gpu_models: Vec::new(),
            gang: true,
            regions: None,
            deny_regions: Vec::new(),
            spot: SpotPolicy::Never,
            priority: 1,
            duration_hours: 1.0,
            max_price_per_hour: None,
            held_price_per_hour: 0.0,
            min_gpus_per_vm: None,
            budget: None,
            held_cost: 0.0,
            data_region: None,
            data_gb: None,
            sizes: Vec::new(),
        }
    }
}

/// Price of moving data between two regions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Egress {
    /// Region the data leaves.
    pub from: String,
    /// Region the data arrives in.
    pub to: String,
    /// USD per GB.
    pub usd_per_gb: f64,
}

fn default_true() -> bool {
    true
}

fn default_priority() -> u32 {
    1
}

struct PositiveU32;

impl serde::de::Visitor<'_> for PositiveU32 {
    type Value = u32;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a positive integer")
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<u32, E> {
        match u32::try_from(v) {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(E::custom("expected a positive integer")),
        }
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<u32, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => Err(E::custom("expected a positive integer")),
        }
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<u32, E> {
        Err(E::custom("expected a positive integer"))
    }
}

/// Counts are positive integers; the error reads the same for 0, -1, 2.5 and 1e12 so that the message
/// after the field path is always `expected a positive integer`.
fn positive_u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    d.deserialize_any(PositiveU32)
}

fn positive_u32_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    struct Opt;
    impl<'de> serde::de::Visitor<'de> for Opt {
        type Value = Option<u32>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a positive integer or null")
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            positive_u32(d).map(Some)
        }
    }
    d.deserialize_option(Opt)
}

/// One thing wrong with a problem, with the path of the field (`jobs[3].gpus`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FieldIssue {
    /// Path of the bad field, e.g. `jobs[3].gpus`; `.` for the document itself.
    pub path: String,
    /// What is wrong, e.g. `expected a positive integer`.
    pub message: String,
}

impl fmt::Display for FieldIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// A problem that cannot be solved as given: every issue found, each naming its field.
/// Parsing stops at the first syntax or type error (one issue); semantic validation reports all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ProblemError {
    /// At least one issue, in document order.
    pub issues: Vec<FieldIssue>,
}

impl fmt::Display for ProblemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.issues.iter().map(ToString::to_string).collect();
        f.write_str(&lines.join("\n"))
    }
}

/// Lower-cased with spaces removed: how Azure quota pool and family names are compared (the same
/// rule as [`crate::normalize_family`]).
pub fn normalize_pool(name: &str) -> String {
    crate::quota_pools::normalize_family(name)
}

impl Problem {
    /// The problem with every one-GPU job that may be split made a gang, where such jobs ask for
    /// at least half the GPUs: one cannot be split (its one GPU is on one VM either way), and the
    /// same placements, costs, price cap and budget hold for it as a gang. As a split job the
    /// relaxations credit it a GPU for a fraction of a VM (an eighth of an 8-GPU one): a bound far
    /// above any plan, and prices that send it to VMs it leaves idle (`variant_problems.py
    /// --shapes nogang` of the independent tiny family, 1,000 such jobs: 85.6 % of HiGHS's weight,
    /// 99.0 % as gangs). Where they are fewer, the bound is the other jobs' and the searches' paths
    /// are theirs: every one-GPU job made a gang, split-60-8 of the regression corpus (6 of its 60
    /// jobs such, 6 of its 663 GPUs) ended 8.7 % above HiGHS's cost where it is within 1 % as given.
    pub(crate) fn unsplittable_as_gangs(&self) -> std::borrow::Cow<'_, Problem> {
        let unsplittable = |j: &JobDemand| !j.gang && j.gpus == 1;
        if !self.jobs.iter().any(unsplittable) || !self.half_the_gpus_in(unsplittable) {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut p = self.clone();
        for j in &mut p.jobs {
            if j.gpus == 1 {
                j.gang = true;
            }
        }
        std::borrow::Cow::Owned(p)
    }

    /// Whether the jobs for which `counts` holds ask for at least half of all the GPUs asked for.
    pub(crate) fn half_the_gpus_in(&self, counts: impl Fn(&JobDemand) -> bool) -> bool {
        let (some, all) = self.jobs.iter().fold((0u64, 0u64), |(s, a), j| {
            let gpus = u64::from(j.gpus);
            (s + if counts(j) { gpus } else { 0 }, a + gpus)
        });
        2 * some >= all
    }

    /// Parses the JSON problem format strictly (unknown fields are errors) and validates it.
    /// Errors name the path of the bad field: `jobs[3].gpus: expected a positive integer`.
    pub fn from_json_str(s: &str) -> Result<Problem, ProblemError> {
        let de = &mut serde_json::Deserializer::from_str(s);
        let problem: Problem = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let mut message = inner.to_string();
            if let Some(i) = message.rfind(" at line ") {
                message.truncate(i);
            }
            let at = format!("line {}, column {}", inner.line(), inner.column());
            // Where the document stops being JSON (a trailing comma, a missing brace) the path has
            // unknown segments (`?`): name the known part, or else the position.
            let known = path.trim_end_matches('?').trim_end_matches('.');
            let (path, message) = if known.is_empty() || known.contains('?') {
                (at, message)
            } else {
                (known.to_string(), format!("{message} ({at})"))
            };
            ProblemError { issues: vec![FieldIssue { path, message }] }
        })?;
        problem.validate()?;
        Ok(problem)
    }

    /// Semantic checks the types cannot express: positive counts, finite non-negative prices and
    /// rates, positive durations, unique job ids, unique offers, quota pools and egress pairs.
    pub fn validate(&self) -> Result<(), ProblemError> {
        let mut issues = Vec::new();
        let mut bad = |path: String, message: &str| issues.push(FieldIssue { path, message: message.to_string() });
        let mut seen_offers = BTreeSet::new();
        for (i, o) in self.offers.iter().enumerate() {
            let p = |f: &str| format!("offers[{i}].{f}");
            for (name, value) in
                [("region", &o.region), ("size", &o.size), ("gpu_model", &o.gpu_model), ("family", &o.family)]
            {
                if value.trim().is_empty() {
                    bad(p(name), "must not be empty");
                }
            }
            if o.gpus_per_vm == 0 {
                bad(p("gpus_per_vm"), "expected a positive integer");
            }
            if o.vcpus_per_vm == 0 {
                bad(p("vcpus_per_vm"), "expected a positive integer");
            }
            if !(o.price_per_hour.is_finite() && o.price_per_hour >= 0.0) {
                bad(p("price_per_hour"), "expected a finite number >= 0");
            }
            if !(o.eviction_rate_per_hour.is_finite() && o.eviction_rate_per_hour >= 0.0) {
                bad(p("eviction_rate_per_hour"), "expected a finite number >= 0");
            }
            if !seen_offers.insert((o.region.as_str(), o.size.as_str(), o.priority)) {
                bad(p("size"), &format!("duplicate offer: {} {} {} appears twice", o.region, o.size, o.priority));
            }
        }
        let mut seen_pools = BTreeSet::new();
        for (i, q) in self.quotas.iter().enumerate() {
            if q.region.trim().is_empty() {
                bad(format!("quotas[{i}].region"), "must not be empty");
            }
            if q.pool.trim().is_empty() {
                bad(format!("quotas[{i}].pool"), "must not be empty");
            }
            if !seen_pools.insert((q.region.clone(), normalize_pool(&q.pool))) {
                bad(format!("quotas[{i}].pool"), &format!("duplicate pool: {} {} appears twice", q.region, q.pool));
            }
        }
        let mut seen_jobs = BTreeSet::new();
        for (i, j) in self.jobs.iter().enumerate() {
            let p = |f: &str| format!("jobs[{i}].{f}");
            if j.id.trim().is_empty() {
                bad(p("id"), "must not be empty");
            } else if !seen_jobs.insert(j.id.as_str()) {
                bad(p("id"), &format!("duplicate job id {:?}", j.id));
            }
            if j.gpus == 0 {
                bad(p("gpus"), "expected a positive integer");
            }
            if j.priority == 0 {
                bad(p("priority"), "expected a positive integer");
            }
            if j.min_gpus_per_vm == Some(0) {
                bad(p("min_gpus_per_vm"), "expected a positive integer");
            }
            if !(j.duration_hours.is_finite() && j.duration_hours > 0.0) {
                bad(p("duration_hours"), "expected a finite number > 0");
            }
            for (name, value) in [
                ("max_price_per_hour", j.max_price_per_hour),
                ("budget", j.budget),
                ("data_gb", j.data_gb),
                ("held_price_per_hour", Some(j.held_price_per_hour)),
                ("held_cost", Some(j.held_cost)),
            ] {
                if let Some(v) = value
                    && !(v.is_finite() && v >= 0.0)
                {
                    bad(p(name), "expected a finite number >= 0");
                }
            }
            if j.data_gb.is_some_and(|g| g > 0.0) && j.data_region.is_none() {
                bad(p("data_gb"), "needs data_region: egress is counted from where the data lives");
            }
            if let Some(regions) = &j.regions
                && regions.is_empty()
            {
                bad(p("regions"), "an empty allow-list places nothing; omit it (or null) for any region");
            }
        }
        let mut seen_egress = BTreeSet::new();
        for (i, e) in self.egress.iter().enumerate() {
            if !(e.usd_per_gb.is_finite() && e.usd_per_gb >= 0.0) {
                bad(format!("egress[{i}].usd_per_gb"), "expected a finite number >= 0");
            }
            if !seen_egress.insert((e.from.as_str(), e.to.as_str())) {
                bad(format!("egress[{i}].to"), &format!("duplicate egress pair {} -> {}", e.from, e.to));
            }
        }
        if issues.is_empty() { Ok(()) } else { Err(ProblemError { issues }) }
    }
}
