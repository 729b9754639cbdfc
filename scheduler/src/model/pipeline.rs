//! Pipelines: jobs that depend on jobs. `PipelineSpec` is what a user submits (TOML or JSON, read
//! as strictly as a job spec: every problem reported at once, each with its field path), `Pipeline`
//! what the store keeps, and `PipelineLink` what each of its jobs carries so the control loop can
//! hold a job until its dependencies have succeeded.
//!
//! The jobs and their `depends_on` form a directed graph (`petgraph`): a cycle is refused naming
//! the jobs on it, an unknown dependency or a duplicate name naming the field.

use std::collections::{BTreeMap, BTreeSet};

use petgraph::graph::{DiGraph, NodeIndex};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::field_error::{FieldError, FieldErrors};
use super::job::JobState;
use super::job_spec::{JobSpec, MAX_BUDGET_USD, MAX_DATA_GB, SpecFormat, bounded, check_label};
use super::size::SizeCatalog;
use super::spec_reader::{got, parse_value};

/// Most jobs one pipeline may hold: far above any real pipeline, it keeps a generated mistake from
/// costing every round of the loop.
pub const MAX_PIPELINE_JOBS: usize = 100;

/// Most dependencies one job of a pipeline may name.
pub const MAX_DEPENDENCIES: usize = 64;

/// What a job does when one of its dependencies fails or is cancelled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnDependencyFailure {
    /// The job fails too, its reason naming the dependency (the default).
    #[default]
    Fail,
    /// The job runs once every dependency has ended, however it ended (a clean-up or report step).
    Run,
}

/// One job of a pipeline as submitted: today's job spec, plus its place in the graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PipelineJobSpec {
    /// The job (its `name` is its name within the pipeline, unique there; its tenant is the
    /// pipeline's).
    #[serde(flatten)]
    pub spec: JobSpec,
    /// Names of the jobs of this pipeline that must succeed before this one is placed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 64)]
    pub depends_on: Vec<String>,
    /// What happens when a dependency fails or is cancelled: `fail` (default) or `run`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_dependency_failure: Option<OnDependencyFailure>,
    /// Data this job leaves for its dependants, in GB: a dependant without its own `data_region`
    /// reads this much from the region this job last ran in (the solver prices moving it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 1000000)]
    pub output_gb: Option<f64>,
}

/// A pipeline as submitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PipelineSpec {
    /// A short name for people; need not be unique.
    #[schema(pattern = "^[A-Za-z0-9._-]+$", min_length = 1, max_length = 63)]
    pub name: String,
    /// The team the pipeline and all its jobs belong to.
    #[schema(pattern = "^[A-Za-z0-9._-]+$", min_length = 1, max_length = 63, default = "default")]
    pub tenant: String,
    /// When the whole pipeline must be finished, RFC 3339: split into per-job deadlines along the
    /// critical path of the jobs' `duration_hours` (each job's latest finish).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub deadline: Option<OffsetDateTime>,
    /// The most the whole pipeline may cost, USD (every job's `cost_usd`, egress included): once
    /// spent, its unfinished jobs fail; while placing, a stage may spend only what leaves the
    /// stages not yet started their cheapest expected cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(exclusive_minimum = 0, maximum = 1000000000)]
    pub budget: Option<f64>,
    /// Its jobs, each a job spec with `depends_on`.
    #[schema(min_items = 1, max_items = 100)]
    pub jobs: Vec<PipelineJobSpec>,
}

/// The fields a pipeline accepts at its top level.
const PIPELINE_FIELDS: &[&str] = &["name", "tenant", "deadline", "budget", "jobs"];
/// The fields a pipeline's job accepts beyond a job spec's.
const GRAPH_FIELDS: &[&str] = &["depends_on", "on_dependency_failure", "output_gb"];

impl PipelineSpec {
    /// Whether a spec file holds a pipeline rather than a job: a pipeline has a `jobs` list.
    pub fn is_pipeline(value: &Value) -> bool {
        value.as_object().is_some_and(|o| o.contains_key("jobs"))
    }

    /// Parses a file's content (TOML or JSON) into a JSON value, as job specs are.
    pub fn value_of(content: &str, format: SpecFormat) -> Result<Value, FieldErrors> {
        parse_value(content, format)
    }

    /// Reads and validates a pipeline: its fields, each job (as a job spec, errors prefixed with
    /// `jobs[i].`), names unique, dependencies known, no cycle. Every problem is reported.
    pub fn from_value_checked<C: SizeCatalog + ?Sized>(
        value: Value,
        catalog: &C,
        now: OffsetDateTime,
    ) -> Result<PipelineSpec, FieldErrors> {
        let mut errs = FieldErrors::default();
        let Value::Object(obj) = value else {
            errs.push("", format!("a pipeline must be an object (a table), got {}", got(&value)));
            return Err(errs);
        };
        for key in obj.keys().filter(|k| !PIPELINE_FIELDS.contains(&k.as_str())) {
            errs.push(key.clone(), format!("unknown field; a pipeline's fields are {}", PIPELINE_FIELDS.join(", ")));
        }
        let name = match obj.get("name") {
            None | Some(Value::Null) => {
                errs.push("name", "missing (required): a string");
                String::new()
            }
            Some(Value::String(s)) => {
                check_label(&mut errs, "name", s);
                s.clone()
            }
            Some(v) => {
                errs.push("name", format!("must be a string (got {})", got(v)));
                String::new()
            }
        };
        let tenant = match obj.get("tenant") {
            None | Some(Value::Null) => "default".to_string(),
            Some(Value::String(s)) => {
                check_label(&mut errs, "tenant", s);
                s.clone()
            }
            Some(v) => {
                errs.push("tenant", format!("must be a string (got {})", got(v)));
                "default".to_string()
            }
        };
        let deadline = match obj.get("deadline") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let parsed = v.as_str().and_then(|s| OffsetDateTime::parse(s, &Rfc3339).ok());
                if parsed.is_none() {
                    errs.push(
                        "deadline",
                        format!("must be an RFC 3339 time such as 2026-12-01T18:00:00Z (got {})", got(v)),
                    );
                }
                parsed
            }
        };
        // As strict as a job's budget: a positive finite number of USD, at most the same maximum.
        let budget = match obj.get("budget") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_f64() {
                Some(b) => {
                    let before = errs.0.len();
                    bounded(&mut errs, "budget", b, 0.0, true, MAX_BUDGET_USD, "USD");
                    (errs.0.len() == before).then_some(b)
                }
                None => {
                    errs.push("budget", format!("must be a number of USD (got {})", got(v)));
                    None
                }
            },
        };
        let entries: &[Value] = match obj.get("jobs") {
            Some(Value::Array(a)) if a.is_empty() => {
                errs.push("jobs", "must hold at least one job");
                &[]
            }
            Some(Value::Array(a)) if a.len() > MAX_PIPELINE_JOBS => {
                errs.push("jobs", format!("at most {MAX_PIPELINE_JOBS} jobs (got {})", a.len()));
                &[]
            }
            Some(Value::Array(a)) => a,
            None | Some(Value::Null) => {
                errs.push("jobs", "missing (required): a list of job specs ([[jobs]] in TOML)");
                &[]
            }
            Some(v) => {
                errs.push("jobs", format!("must be a list of job specs (got {})", got(v)));
                &[]
            }
        };
        let mut jobs = Vec::new();
        // Jobs whose entries could not be read at all keep their place, so indexes stay right.
        let mut readable: Vec<bool> = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            match read_job(i, entry, &tenant, catalog, now, &mut errs) {
                Some(j) => {
                    jobs.push(j);
                    readable.push(true);
                }
                None => readable.push(false),
            }
        }
        if readable.iter().all(|r| *r) {
            check_graph(&jobs, &mut errs);
        }
        let spec = PipelineSpec { name, tenant, deadline, budget, jobs };
        if let Some(deadline) = deadline
            && errs.is_empty()
        {
            spec.check_deadline(deadline, now, &mut errs);
        }
        errs.into_result(spec)
    }

    /// Parses and validates a pipeline file's content.
    pub fn parse_checked<C: SizeCatalog + ?Sized>(
        content: &str,
        format: SpecFormat,
        catalog: &C,
        now: OffsetDateTime,
    ) -> Result<PipelineSpec, FieldErrors> {
        Self::from_value_checked(parse_value(content, format)?, catalog, now)
    }

    /// The pipeline deadline against the critical path: every job needs `duration_hours`, and the
    /// longest chain of them must fit between now and the deadline.
    fn check_deadline(&self, deadline: OffsetDateTime, now: OffsetDateTime, errs: &mut FieldErrors) {
        let mut missing = false;
        for (i, j) in self.jobs.iter().enumerate() {
            if j.spec.duration_hours.is_none() {
                errs.push(
                    format!("jobs[{i}].duration_hours"),
                    "needed with a pipeline deadline (the deadline is split along the jobs' durations)",
                );
                missing = true;
            }
        }
        let latest = now + time::Duration::days(super::job_spec::MAX_DEADLINE_DAYS);
        if deadline <= now {
            errs.push("deadline", "is in the past");
            return;
        }
        if deadline > latest {
            errs.push(
                "deadline",
                format!("must be within five years ({} days) from now", super::job_spec::MAX_DEADLINE_DAYS),
            );
            return;
        }
        if missing {
            return;
        }
        let (hours, path) = self.critical_path();
        let left = (deadline - now).as_seconds_f64() / 3600.0;
        if hours > left {
            let names: Vec<&str> = path.iter().map(|&i| self.jobs[i].spec.name.as_str()).collect();
            errs.push(
                "deadline",
                format!(
                    "is {left:.1} h away, less than the critical path {} ({hours} h of duration_hours): it cannot be met",
                    names.join(" → ")
                ),
            );
        }
    }

    /// The longest chain of `duration_hours` through the graph: its hours and its jobs, first to last.
    pub fn critical_path(&self) -> (f64, Vec<usize>) {
        let order = self.topological_order();
        let index: BTreeMap<&str, usize> =
            self.jobs.iter().enumerate().map(|(i, j)| (j.spec.name.as_str(), i)).collect();
        let mut finish = vec![0.0_f64; self.jobs.len()];
        let mut via: Vec<Option<usize>> = vec![None; self.jobs.len()];
        for &i in &order {
            let j = &self.jobs[i];
            let before = j
                .depends_on
                .iter()
                .filter_map(|d| index.get(d.as_str()).copied())
                .max_by(|a, b| finish[*a].total_cmp(&finish[*b]));
            finish[i] = before.map_or(0.0, |b| finish[b]) + j.spec.duration_hours.unwrap_or(0.0);
            via[i] = before;
        }
        let Some(last) = (0..self.jobs.len()).max_by(|a, b| finish[*a].total_cmp(&finish[*b])) else {
            return (0.0, Vec::new());
        };
        let mut path = vec![last];
        while let Some(b) = via[*path.last().unwrap_or(&last)] {
            path.push(b);
        }
        path.reverse();
        (finish[last], path)
    }

    /// Hours of `duration_hours` that must still run after each job finishes: the longest chain of
    /// its dependants (in the order of `jobs`).
    fn hours_after(&self) -> Vec<f64> {
        let index: BTreeMap<&str, usize> =
            self.jobs.iter().enumerate().map(|(i, j)| (j.spec.name.as_str(), i)).collect();
        let mut after = vec![0.0_f64; self.jobs.len()];
        for &i in self.topological_order().iter().rev() {
            let own = self.jobs[i].spec.duration_hours.unwrap_or(0.0);
            for d in &self.jobs[i].depends_on {
                if let Some(&k) = index.get(d.as_str()) {
                    after[k] = after[k].max(after[i] + own);
                }
            }
        }
        after
    }

    /// What each job's share of the pipeline deadline is computed from (in the order of `jobs`);
    /// `None` for every job without a pipeline deadline (each keeps its own).
    pub fn stage_deadlines(&self) -> Vec<Option<StageDeadline>> {
        let Some(deadline) = self.deadline else { return vec![None; self.jobs.len()] };
        let ms = |t: OffsetDateTime| (t.unix_timestamp_nanos() / 1_000_000) as i64;
        self.jobs
            .iter()
            .zip(self.hours_after())
            .map(|(j, after_hours)| {
                Some(StageDeadline { pipeline_ms: ms(deadline), after_hours, own_ms: j.spec.deadline.map(ms) })
            })
            .collect()
    }

    /// Each job's deadline under the pipeline's, at submission (`now`): a job that may start at
    /// once gets its share of the time to the pipeline deadline ([`StageDeadline::share`]); a job
    /// that waits for others its latest finish (the pipeline deadline less the longest chain of
    /// `duration_hours` after it) until it may start, when the control loop gives it its share of
    /// what is left then. Its own deadline when that is earlier. `None` for every job without a
    /// pipeline deadline (each keeps its own).
    pub fn job_deadlines(&self, now: OffsetDateTime) -> Vec<Option<OffsetDateTime>> {
        let now_ms = (now.unix_timestamp_nanos() / 1_000_000) as i64;
        let at = |ms: i64| OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000).ok();
        self.jobs
            .iter()
            .zip(self.stage_deadlines())
            .map(|(j, sd)| match sd {
                None => j.spec.deadline,
                Some(sd) if j.depends_on.is_empty() => at(sd.share(now_ms, j.spec.duration_hours.unwrap_or(0.0))),
                Some(sd) => at(sd.latest_ms()),
            })
            .collect()
    }

    /// Each job's link to the pipeline (in the order of `jobs`), given the pipeline's id and each
    /// job's id by name: what the stored job carries and the control loop gates it by.
    pub fn links(&self, pipeline_id: &str, ids: &BTreeMap<String, String>) -> Vec<PipelineLink> {
        let id = |name: &str| ids.get(name).cloned().unwrap_or_default();
        self.jobs
            .iter()
            .map(|j| PipelineLink {
                pipeline_id: pipeline_id.to_string(),
                name: j.spec.name.clone(),
                depends_on: j.depends_on.iter().map(|d| Dependency { name: d.clone(), job_id: id(d) }).collect(),
                on_dependency_failure: j.on_dependency_failure.unwrap_or_default(),
                output_gb: j.output_gb,
                deadline: None,
                budget_usd: self.budget,
            })
            .zip(self.stage_deadlines())
            .map(|(link, deadline)| PipelineLink { deadline, ..link })
            .collect()
    }

    /// The jobs in an order where every job comes after its dependencies (the spec is acyclic once
    /// validated); indexes into `jobs`.
    pub fn topological_order(&self) -> Vec<usize> {
        let (graph, _) = graph_of(&self.jobs);
        petgraph::algo::toposort(&graph, None)
            .map(|order| order.into_iter().map(|n| graph[n]).collect())
            .unwrap_or_else(|_| (0..self.jobs.len()).collect())
    }
}

/// Reads `jobs[i]`: the graph fields here, the rest as a job spec; `None` when it is not an object.
fn read_job<C: SizeCatalog + ?Sized>(
    i: usize,
    entry: &Value,
    tenant: &str,
    catalog: &C,
    now: OffsetDateTime,
    errs: &mut FieldErrors,
) -> Option<PipelineJobSpec> {
    let at = |f: &str| if f.is_empty() { format!("jobs[{i}]") } else { format!("jobs[{i}].{f}") };
    let Value::Object(obj) = entry else {
        errs.push(at(""), format!("must be a job spec (a table), got {}", got(entry)));
        return None;
    };
    let mut rest: Map<String, Value> = obj.clone();
    let mut depends_on = Vec::new();
    match rest.remove("depends_on") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) if items.len() > MAX_DEPENDENCIES => {
            errs.push(at("depends_on"), format!("at most {MAX_DEPENDENCIES} dependencies"));
        }
        Some(Value::Array(items)) => {
            for (k, item) in items.iter().enumerate() {
                match item.as_str() {
                    Some(s) => depends_on.push(s.to_string()),
                    None => errs.push(
                        at(&format!("depends_on[{k}]")),
                        format!("must be the name of a job of this pipeline (got {})", got(item)),
                    ),
                }
            }
        }
        Some(v) => errs.push(at("depends_on"), format!("must be a list of job names (got {})", got(&v))),
    }
    let on_dependency_failure = match rest.remove("on_dependency_failure") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s == "fail" => Some(OnDependencyFailure::Fail),
        Some(Value::String(s)) if s == "run" => Some(OnDependencyFailure::Run),
        Some(v) => {
            errs.push(at("on_dependency_failure"), format!("must be one of fail, run (got {})", got(&v)));
            None
        }
    };
    let output_gb = match rest.remove("output_gb") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_f64() {
            Some(gb) if gb.is_finite() && (0.0..=MAX_DATA_GB).contains(&gb) => Some(gb),
            Some(gb) => {
                errs.push(at("output_gb"), format!("must be between 0 and {MAX_DATA_GB} GB (got {gb})"));
                None
            }
            None => {
                errs.push(at("output_gb"), format!("must be a number of GB (got {})", got(&v)));
                None
            }
        },
    };
    match rest.get("tenant") {
        Some(Value::String(t)) if t != tenant => {
            errs.push(at("tenant"), format!("must be the pipeline's tenant {tenant:?} (or left out)"));
        }
        _ => {}
    }
    rest.insert("tenant".into(), Value::String(tenant.to_string()));
    let spec = match JobSpec::from_value_checked(Value::Object(rest), catalog, now) {
        Ok(spec) => Some(spec),
        Err(job_errs) => {
            for e in job_errs.0 {
                // The job spec's own list of fields does not name the graph fields; say both.
                let problem = if e.problem.starts_with("unknown field") {
                    format!("{}; in a pipeline also {}", e.problem, GRAPH_FIELDS.join(", "))
                } else {
                    e.problem
                };
                errs.0.push(FieldError::new(at(&e.field), problem));
            }
            // A job that cannot be read keeps its name, so the graph checks still run.
            obj.get("name").and_then(Value::as_str).and_then(|n| JobSpec::from_value(named(n)).ok())
        }
    };
    spec.map(|spec| PipelineJobSpec { spec, depends_on, on_dependency_failure, output_gb })
}

/// A minimal readable job spec standing in for an invalid one in the graph checks.
fn named(name: &str) -> Value {
    serde_json::json!({ "name": name, "kind": "batch", "gpus": 1 })
}

/// The dependency graph: an edge from each dependency to its dependant; node weights are indexes
/// into `jobs`. Unknown names and first duplicates are left out (reported by `check_graph`).
fn graph_of(jobs: &[PipelineJobSpec]) -> (DiGraph<usize, ()>, BTreeMap<&str, NodeIndex>) {
    let mut graph = DiGraph::new();
    let mut nodes: BTreeMap<&str, NodeIndex> = BTreeMap::new();
    for (i, j) in jobs.iter().enumerate() {
        let n = graph.add_node(i);
        nodes.entry(j.spec.name.as_str()).or_insert(n);
    }
    for (i, j) in jobs.iter().enumerate() {
        for dep in &j.depends_on {
            if let Some(&from) = nodes.get(dep.as_str()) {
                graph.add_edge(from, NodeIndex::new(i), ());
            }
        }
    }
    (graph, nodes)
}

/// The part of a variable's name made from a pipeline job's or an output's name: upper case,
/// anything but letters and digits as `_` (a job `pre-process` is `PRE_PROCESS`). A dependant's
/// ranks find their dependencies by it (`SPILLWAY_DEP_<NAME>_…`), so it must tell a pipeline's
/// jobs apart (`check_graph`).
pub fn env_name_part(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect()
}

/// Names unique (also as they appear in dependants' environment variables), dependencies known and
/// listed once, no cycle.
fn check_graph(jobs: &[PipelineJobSpec], errs: &mut FieldErrors) {
    let mut first: BTreeMap<&str, usize> = BTreeMap::new();
    let mut by_env: BTreeMap<String, usize> = BTreeMap::new();
    for (i, j) in jobs.iter().enumerate() {
        if let Some(k) = first.get(j.spec.name.as_str()) {
            errs.push(
                format!("jobs[{i}].name"),
                format!(
                    "duplicate job name {:?} (also jobs[{k}].name); names are unique within a pipeline",
                    j.spec.name
                ),
            );
            continue;
        }
        first.insert(&j.spec.name, i);
        let env = env_name_part(&j.spec.name);
        if let Some(&k) = by_env.get(&env) {
            errs.push(
                format!("jobs[{i}].name"),
                format!(
                    "job name {:?} and jobs[{k}].name {:?} are both SPILLWAY_DEP_{env}_… in their dependants' \
                     environment; rename one (names differing only in punctuation or case are not told apart)",
                    j.spec.name, jobs[k].spec.name
                ),
            );
        } else {
            by_env.insert(env, i);
        }
    }
    let names: Vec<&str> = first.keys().copied().collect();
    for (i, j) in jobs.iter().enumerate() {
        let mut seen = BTreeSet::new();
        for (k, dep) in j.depends_on.iter().enumerate() {
            let field = format!("jobs[{i}].depends_on[{k}]");
            if !first.contains_key(dep.as_str()) {
                errs.push(field, format!("unknown job {dep:?}; this pipeline's jobs are {}", names.join(", ")));
            } else if !seen.insert(dep.as_str()) {
                errs.push(field, format!("{dep:?} is listed twice"));
            }
        }
    }
    let (graph, _) = graph_of(jobs);
    for scc in petgraph::algo::tarjan_scc(&graph) {
        let looped = scc.len() > 1 || graph.contains_edge(scc[0], scc[0]);
        if !looped {
            continue;
        }
        let mut on_cycle: Vec<usize> = scc.iter().map(|&n| graph[n]).collect();
        on_cycle.sort_unstable();
        let cycle = cycle_path(jobs, &on_cycle);
        errs.push(
            format!("jobs[{}].depends_on", on_cycle[0]),
            format!("dependency cycle: {cycle}; a pipeline's jobs must not depend on each other in a loop"),
        );
    }
}

/// The cycle through the jobs of one strongly connected component, as `a → b → a`, following
/// dependencies from the first of them until a job repeats.
fn cycle_path(jobs: &[PipelineJobSpec], members: &[usize]) -> String {
    let in_scc = |name: &str| members.iter().copied().find(|&m| jobs[m].spec.name == name);
    let mut path = vec![members[0]];
    let mut at = members[0];
    // Within a strongly connected component every job has a dependency inside it.
    while let Some(next) = jobs[at].depends_on.iter().find_map(|d| in_scc(d)) {
        if let Some(pos) = path.iter().position(|&p| p == next) {
            path.drain(..pos);
            path.push(next);
            break;
        }
        path.push(next);
        at = next;
    }
    // Walked from dependant to dependency: show it in the order work would have to run.
    path.reverse();
    path.iter().map(|&i| jobs[i].spec.name.as_str()).collect::<Vec<_>>().join(" → ")
}

/// A job's place in its pipeline, kept on the job so the control loop can decide from the job
/// alone (and the dependencies it names) whether it may be placed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PipelineLink {
    /// The pipeline's id.
    pub pipeline_id: String,
    /// The job's name within the pipeline.
    pub name: String,
    /// The jobs that must succeed first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<Dependency>,
    /// What the job does when a dependency fails or is cancelled.
    #[serde(default)]
    pub on_dependency_failure: OnDependencyFailure,
    /// GB of output the job leaves for its dependants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_gb: Option<f64>,
    /// With a pipeline deadline: what the job's share of it is computed from, when it may start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<StageDeadline>,
    /// The pipeline's budget, USD, when it has one: the loop holds the job to it
    /// (`control::pipeline_budget`) from the job alone, as it gates it by its dependencies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
}

/// A job's share of its pipeline's deadline. The time from when the job may start to the
/// pipeline's deadline is shared along the longest chain from it (the job, then its dependants)
/// in proportion to their `duration_hours`: each stage gets the same share of the slack, so the
/// deadline-aware spot policy may ride spot on every stage, not only the first (which, given its
/// latest finish, would hold the whole pipeline's slack and could spend it all). Computed anew for
/// each job when its dependencies end: a stage that ends early leaves its slack to the rest, one
/// that ends late takes it from them. Never later than the job's latest finish, nor its own
/// deadline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StageDeadline {
    /// The pipeline's deadline, Unix milliseconds.
    pub pipeline_ms: i64,
    /// Hours of `duration_hours` on the longest chain of the job's dependants.
    pub after_hours: f64,
    /// The job's own deadline, when its spec gave one, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_ms: Option<i64>,
}

impl StageDeadline {
    /// The latest the job may finish for the rest to finish in time at their `duration_hours`
    /// (its own deadline, when earlier), Unix milliseconds.
    pub fn latest_ms(&self) -> i64 {
        let latest = self.pipeline_ms - (self.after_hours * 3_600_000.0).round() as i64;
        self.own_ms.map_or(latest, |own| own.min(latest))
    }

    /// The job's deadline when it may start at `start_ms` and runs `hours`: its share
    /// `hours / (hours + after_hours)` of the time left to the pipeline's deadline, at most its
    /// latest finish. Unix milliseconds.
    pub fn share(&self, start_ms: i64, hours: f64) -> i64 {
        let left = (self.pipeline_ms - start_ms) as f64;
        let chain = hours + self.after_hours;
        let share = if chain > 0.0 { left * hours / chain } else { left };
        (start_ms + share.round() as i64).min(self.latest_ms())
    }
}

/// One dependency of a pipeline's job: its name in the pipeline and its job id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Dependency {
    /// Name within the pipeline.
    pub name: String,
    /// Job id.
    pub job_id: String,
}

/// A pipeline as stored: its jobs by name and id. Each job is also an ordinary job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pipeline {
    /// Unique id assigned at submission (`p-…`).
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its tenant (every job's).
    pub tenant: String,
    /// Submission time, Unix milliseconds.
    pub submitted_at_ms: i64,
    /// The most the whole pipeline may cost, USD, when it has a budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
    /// Its jobs, in the order submitted.
    pub jobs: Vec<PipelineMember>,
    /// Who cancelled it, when someone did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_by: Option<String>,
    /// The `tenant/key` of the `Idempotency-Key` it was submitted with: retention deletes that key
    /// with the pipeline (the keys have no index by pipeline to find it by).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// One job of a stored pipeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PipelineMember {
    /// Name within the pipeline.
    pub name: String,
    /// Job id.
    pub job_id: String,
    /// Names of its dependencies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// How the job ended, kept here when retention forgets the job itself: its dependants may
    /// still need it (a stage that runs for weeks and loses its VMs is gated again by it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<EndedMember>,
}

/// What the dependency gate needs of a finished job of a pipeline once the job is forgotten.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndedMember {
    /// Its final state.
    pub state: JobState,
    /// The region its last attempt that reached running ran in (none: it never ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_region: Option<String>,
    /// The output it declared for its dependants, GB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_gb: Option<f64>,
    /// When it ended, Unix milliseconds.
    pub finished_at_ms: i64,
    /// What it cost, USD.
    #[serde(default)]
    pub cost_usd: f64,
    /// Why it ended, when it ended other than by completing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_reason: Option<String>,
    /// The `outputs` it declared, for its dependants' environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub outputs: BTreeMap<String, String>,
}

/// Where a pipeline is, from its jobs' states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PipelineState {
    /// No job has been placed yet.
    Pending,
    /// Some job has been placed and some job has not ended.
    Running,
    /// Every job succeeded.
    Succeeded,
    /// Every job ended, and some did not succeed.
    Failed,
    /// Cancelled by a user (its jobs that had not ended were cancelled).
    Cancelled,
}

impl PipelineState {
    /// The state of a pipeline whose jobs are in `states` (`None`: a job no longer on record and
    /// of unknown end, read as succeeded). `cancelled`: a user cancelled it.
    pub fn of(states: &[Option<JobState>], cancelled: bool) -> PipelineState {
        let ended = |s: &Option<JobState>| s.is_none_or(JobState::is_final);
        if states.iter().all(ended) {
            if cancelled {
                PipelineState::Cancelled
            } else if states.iter().all(|s| s.is_none_or(|s| s == JobState::Succeeded)) {
                PipelineState::Succeeded
            } else {
                PipelineState::Failed
            }
        } else if states.iter().all(|s| *s == Some(JobState::Pending)) {
            PipelineState::Pending
        } else {
            PipelineState::Running
        }
    }

    /// The state a lower-case word names.
    pub fn parse(word: &str) -> Option<PipelineState> {
        [
            PipelineState::Pending,
            PipelineState::Running,
            PipelineState::Succeeded,
            PipelineState::Failed,
            PipelineState::Cancelled,
        ]
        .into_iter()
        .find(|s| s.as_str() == word)
    }

    /// The lower-case word used in APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            PipelineState::Pending => "pending",
            PipelineState::Running => "running",
            PipelineState::Succeeded => "succeeded",
            PipelineState::Failed => "failed",
            PipelineState::Cancelled => "cancelled",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipeline_state_follows_its_jobs() {
        use JobState::*;
        let of = |s: &[Option<JobState>], c| PipelineState::of(s, c);
        assert_eq!(of(&[Some(Pending), Some(Pending)], false), PipelineState::Pending);
        assert_eq!(of(&[Some(Succeeded), Some(Pending)], false), PipelineState::Running);
        assert_eq!(of(&[Some(Succeeded), None], false), PipelineState::Succeeded);
        assert_eq!(of(&[Some(Succeeded), Some(Failed)], false), PipelineState::Failed);
        assert_eq!(of(&[Some(Succeeded), Some(Cancelled)], true), PipelineState::Cancelled);
    }
}
