//! Workloads: the seeded synthetic generator and the trace readers, each turning a job into a
//! `JobSpec` arriving at a virtual time.
//!
//! The mapping of a trace job (GPU count, run time, team) onto a `JobSpec` ([`Mapping`]):
//! - `kind = "training"` (gang: all VMs in one region on one size), `gpus` = the job's GPU count
//!   (cut to `max_gpus` when set), `gpu_models` = the mapping's (default `["V100"]`, the nearest
//!   Azure match to Philly's 12/24 GB GPUs), `min_gpus_per_vm` for jobs of at least that many GPUs;
//! - `duration_hours` = the run time, raised to `min_duration_minutes` (default 1) and cut to
//!   `max_duration_hours`; with `auto_complete` the job succeeds once that much work is done;
//! - `spot` = the mapping's policy (default `allowed`), except `never` for jobs longer than
//!   `spot_max_hours`; `checkpoint_interval_minutes` = the mapping's (default 30);
//! - `tenant` = the trace's team: Philly's virtual cluster (`vc-<id>`), Alibaba's QoS class;
//!   synthetic jobs draw one of eight tenants `vc-1` … `vc-8`;
//! - `regions` = the cloud's regions, starting at the tenant's home region (a hash of the tenant)
//!   when `home_regions` (the default), so `single-region` spreads teams over regions;
//! - `deadline` = submission + `deadline_slack × duration` when `deadline_slack` is set.
//!
//! Our own JSON lines carry full specs and are used as they are:
//! `{"at_hours": 1.5, "id": "optional-id", "spec": {"name": "x", "kind": "training", "gpus": 8}}`.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use scheduler::Catalog;
use scheduler::control::cheapest_spec_usd;
use scheduler::model::{
    FieldErrors, JobKind, JobSpec, MAX_BUDGET_USD, PipelineJobSpec, PipelineLink, PipelineSpec, Priority, SpotPolicy,
};
use serde::Deserialize;
use time::OffsetDateTime;

use super::WhatIfError;
use super::fit::PhillyFit;
use super::philly::read_philly;
use super::scenario::{Mapping, PipelineMix, Scenario, WorkloadSource};

/// A job of a workload: its id, when it arrives (ms after the run's start) and its spec.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceJob {
    /// Deterministic job id (the store's key and the fleet names' stem).
    pub id: String,
    /// Arrival, ms after the run's start.
    pub at_ms: i64,
    /// The spec as submitted.
    pub spec: JobSpec,
    /// The pipeline it is a stage of, when `[workload.pipelines]` chained it into one.
    pub pipeline: Option<Stage>,
}

/// A job's place in a pipeline of the workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Stage {
    /// What the stored job carries (as `POST /v1/pipelines` stores it): the pipeline's id, the
    /// job's name in it, its dependencies' ids, its declared output.
    pub link: PipelineLink,
    /// The whole pipeline as submitted (validated; stage names are the jobs' ids), shared by its
    /// stages: the control loop's policies submit it whole through `JobService`.
    pub spec: Arc<PipelineSpec>,
}

/// Lower-case letters, digits and `-` only: tenant names must be labels.
fn label(s: &str) -> String {
    let l: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).take(40).collect();
    if l.is_empty() { "default".into() } else { l }
}

fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The spec of a trace job under a mapping.
pub fn map_job(
    name: &str,
    m: &Mapping,
    regions: &[String],
    tenant: &str,
    gpus: u32,
    hours: f64,
    submit_ms: i64,
) -> JobSpec {
    let gpus = m.max_gpus.map_or(gpus, |cap| gpus.min(cap)).max(1);
    let mut hours = hours.max(m.min_duration_minutes / 60.0);
    if let Some(max) = m.max_duration_hours {
        hours = hours.min(max);
    }
    // Whole seconds keep specs readable and runs exact.
    let hours = ((hours * 3600.0).round() / 3600.0).max(1.0 / 3600.0);
    let tenant = label(tenant);
    let mut regions = regions.to_vec();
    if m.home_regions && !regions.is_empty() {
        let k = (fnv1a(&tenant) % regions.len() as u64) as usize;
        regions.rotate_left(k);
    }
    let spot = if m.spot_max_hours.is_some_and(|max| hours > max) { SpotPolicy::Never } else { m.spot };
    let deadline = m.deadline_slack.and_then(|slack| {
        let ms = submit_ms + (hours * slack * 3_600_000.0).ceil() as i64 + 1000;
        OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000).ok()
    });
    JobSpec {
        name: name.to_string(),
        tenant,
        kind: JobKind::Training,
        gpus,
        gpu_models: m.gpu_models.clone(),
        sizes: Vec::new(),
        min_gpus_per_vm: m.min_gpus_per_vm.filter(|&g| gpus >= g),
        gang: Some(true),
        regions: Some(regions),
        deny_regions: Vec::new(),
        data_region: None,
        data_gb: None,
        spot: Some(spot),
        regular_gpus: None,
        max_price_per_hour: None,
        budget: None,
        duration_hours: Some(hours),
        deadline,
        checkpoint_interval_minutes: m.checkpoint_interval_minutes,
        priority: 1,
        replicas: None,
        run: None,
        setup: None,
        envs: Default::default(),
        outputs: Default::default(),
        workdir: None,
        image: None,
        max_restarts: None,
        idle_minutes: None,
        on_idle: None,
    }
}

/// The jobs of a scenario's workload, in arrival order (ties by id), each spec validated.
pub fn load_workload(s: &Scenario) -> Result<Vec<TraceJob>, WhatIfError> {
    let w = &s.workload;
    let regions = &s.cloud.regions;
    let m = &w.mapping;
    let mut jobs = match &w.source {
        WorkloadSource::Synthetic { fit, jobs_per_hour } => synthetic(fit, *jobs_per_hour, m, regions, s),
        WorkloadSource::Philly { path, from } => {
            let mut rows = read_philly(path)?;
            rows.sort_by_key(|r| r.submit_s);
            let from_s = from.map(|t| t.unix_timestamp()).or(rows.first().map(|r| r.submit_s)).unwrap_or(0);
            let until_s = from_s + s.horizon_ms / 1000;
            rows.iter()
                .enumerate()
                .filter(|(_, r)| r.submit_s >= from_s && r.submit_s < until_s)
                .map(|(i, r)| {
                    let at_ms = (r.submit_s - from_s) * 1000;
                    let id = format!("p{i:06}");
                    let spec = map_job(
                        &id,
                        m,
                        regions,
                        &format!("vc-{}", r.cluster),
                        r.gpus,
                        r.duration_s / 3600.0,
                        s.start_ms + at_ms,
                    );
                    TraceJob { id, at_ms, spec, pipeline: None }
                })
                .collect()
        }
        WorkloadSource::Alibaba { path, from_seconds } => alibaba(path, *from_seconds, m, regions, s)?,
        WorkloadSource::JsonLines { path } => json_lines(path, s)?,
    };
    jobs.sort_by(|a, b| (a.at_ms, &a.id).cmp(&(b.at_ms, &b.id)));
    if let Some(limit) = w.limit {
        jobs.truncate(limit);
    }
    let catalog = s.catalog();
    validate_all(&jobs, &catalog, s)?;
    if let Some(mix) = &w.pipelines {
        chain_pipelines(&mut jobs, mix, s, &catalog)?;
        jobs.sort_by(|a, b| (a.at_ms, &a.id).cmp(&(b.at_ms, &b.id)));
    }
    Ok(jobs)
}

/// Chains a seeded share of the jobs into pipelines: a job starts one with a probability that puts
/// about `fraction` of the jobs in pipelines, its next stages being the next unchained jobs of its
/// tenant in arrival order (each depending on the one before). The whole pipeline arrives with its
/// first job, its stages' own deadlines give way to the pipeline's (split along the critical path
/// by `PipelineSpec::job_deadlines`, as for a submitted pipeline; the control loop shares what is
/// left among the later stages as each may start), and it is validated by the
/// pipeline rules of `scheduler::model` before anything runs.
fn chain_pipelines(
    jobs: &mut [TraceJob],
    mix: &PipelineMix,
    s: &Scenario,
    catalog: &Catalog,
) -> Result<(), WhatIfError> {
    let mut rng = StdRng::seed_from_u64(s.seed ^ 0x5049_5045_4c49_4e45);
    let n = jobs.len();
    let target = (mix.fraction * n as f64).round() as usize;
    let (lo, hi) = mix.stages;
    let mean = f64::from(lo + hi) / 2.0;
    // A free job starting a pipeline with probability q chains q·mean of every 1 − q + q·mean jobs.
    let start_p = (mix.fraction / (mean - mix.fraction * (mean - 1.0))).clamp(0.0, 1.0);
    let mut by_tenant: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, j) in jobs.iter().enumerate() {
        by_tenant.entry(j.spec.tenant.as_str()).or_default().push(i);
    }
    let by_tenant: BTreeMap<String, Vec<usize>> = by_tenant.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let mut used = vec![false; n];
    let mut chained = 0;
    let mut chains: Vec<Vec<usize>> = Vec::new();
    for i in 0..n {
        let starts = rng.random::<f64>() < start_p;
        let k = rng.random_range(lo..=hi) as usize;
        if used[i] || !starts || chained >= target {
            continue;
        }
        let k = k.min((target - chained).max(2));
        let mut members = vec![i];
        for &m in by_tenant[&jobs[i].spec.tenant].iter().filter(|&&m| m > i && !used[m]) {
            if members.len() == k {
                break;
            }
            members.push(m);
        }
        if members.len() < 2 {
            continue;
        }
        for &m in &members {
            used[m] = true;
        }
        chained += members.len();
        chains.push(members);
    }
    let prices: Vec<(&str, &str, Priority, Option<f64>)> = catalog
        .prices()
        .flat_map(|row| {
            [Priority::Regular, Priority::Spot]
                .map(|p| (row.region.as_str(), row.size.as_str(), p, row.for_priority(p)))
        })
        .collect();
    let mut errs = FieldErrors::default();
    for members in chains {
        let first = &jobs[members[0]];
        let pipeline_id = format!("pl-{}", first.id);
        let at_ms = first.at_ms;
        let now = OffsetDateTime::from_unix_timestamp_nanos((s.start_ms + at_ms) as i128 * 1_000_000)
            .unwrap_or(OffsetDateTime::UNIX_EPOCH);
        let mut stages = Vec::new();
        for (k, &m) in members.iter().enumerate() {
            let mut spec = jobs[m].spec.clone();
            spec.name = jobs[m].id.clone();
            spec.deadline = None;
            let output_gb = (rng.random_range(mix.output_gb.0..=mix.output_gb.1)).round();
            stages.push(PipelineJobSpec {
                spec,
                depends_on: if k == 0 { Vec::new() } else { vec![jobs[members[k - 1]].id.clone()] },
                on_dependency_failure: None,
                output_gb: Some(output_gb),
            });
        }
        let hours: f64 = stages.iter().map(|st| st.spec.duration_hours.unwrap_or(0.0)).sum();
        let deadline = mix.deadline_slack.or(s.workload.mapping.deadline_slack).and_then(|slack| {
            let ms = s.start_ms + at_ms + (hours * slack * 3_600_000.0).ceil() as i64 + 1000;
            OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000).ok()
        });
        let budget = mix.budget_factor.and_then(|factor| {
            let usd: f64 = stages.iter().map(|st| cheapest_spec_usd(&st.spec, catalog, prices.iter().copied())).sum();
            // Whole cents, within what a pipeline spec accepts; none when nothing is priced.
            let usd = ((usd * factor * 100.0).ceil() / 100.0).min(MAX_BUDGET_USD);
            (usd > 0.0).then_some(usd)
        });
        let raw = PipelineSpec {
            name: pipeline_id.clone(),
            tenant: first.spec.tenant.clone(),
            deadline,
            budget,
            jobs: stages,
        };
        let value =
            serde_json::to_value(&raw).map_err(|e| WhatIfError::Control(format!("pipeline {pipeline_id}: {e}")))?;
        let spec = match PipelineSpec::from_value_checked(value, catalog, now) {
            Ok(spec) => spec,
            Err(e) => {
                for fe in e.0 {
                    errs.push(format!("workload pipeline {pipeline_id}: {}", fe.field), fe.problem);
                }
                continue;
            }
        };
        let ids: BTreeMap<String, String> = members.iter().map(|&m| (jobs[m].id.clone(), jobs[m].id.clone())).collect();
        let links = spec.links(&pipeline_id, &ids);
        let deadlines = spec.job_deadlines(now);
        let spec = Arc::new(spec);
        for (k, &m) in members.iter().enumerate() {
            let job = &mut jobs[m];
            job.at_ms = at_ms;
            job.spec = spec.jobs[k].spec.clone();
            job.spec.deadline = deadlines[k];
            job.pipeline = Some(Stage { link: links[k].clone(), spec: spec.clone() });
        }
    }
    errs.into_result(()).map_err(|errors| WhatIfError::Invalid { origin: s.origin.clone(), errors })
}

fn validate_all(jobs: &[TraceJob], catalog: &Catalog, s: &Scenario) -> Result<(), WhatIfError> {
    let mut errs = FieldErrors::default();
    for j in jobs {
        let now = OffsetDateTime::from_unix_timestamp_nanos((s.start_ms + j.at_ms) as i128 * 1_000_000)
            .unwrap_or(OffsetDateTime::UNIX_EPOCH);
        if let Err(e) = j.spec.validate(catalog, now) {
            for fe in e.0 {
                errs.push(format!("workload job {}: {}", j.id, fe.field), fe.problem);
            }
        }
        if errs.0.len() > 20 {
            break;
        }
    }
    errs.into_result(()).map_err(|errors| WhatIfError::Invalid { origin: s.origin.clone(), errors })
}

/// A standard normal draw (Box–Muller; `rand_distr` is not a dependency).
fn normal(rng: &mut StdRng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

fn synthetic(fit: &PhillyFit, jobs_per_hour: f64, m: &Mapping, regions: &[String], s: &Scenario) -> Vec<TraceJob> {
    let mut rng = StdRng::seed_from_u64(s.seed ^ 0x5157_4f52_4b4c_4f41);
    let peak = jobs_per_hour * fit.peak_multiplier();
    let total_share: f64 = fit.gpus.iter().map(|g| g.share).sum();
    let mut out = Vec::new();
    let mut t_h = 0.0f64;
    let horizon_h = s.horizon_ms as f64 / 3_600_000.0;
    if peak <= 0.0 {
        return out;
    }
    loop {
        // Thinning: candidates at the peak rate, each kept with probability rate(t) / peak.
        t_h += -(1.0 - rng.random::<f64>()).ln() / peak;
        if t_h >= horizon_h {
            break;
        }
        let at_ms = (t_h * 3_600_000.0) as i64;
        let abs_s = (s.start_ms + at_ms).div_euclid(1000);
        let hour = (abs_s.rem_euclid(86_400) / 3600) as usize;
        let day = ((abs_s.div_euclid(86_400) + 3).rem_euclid(7)) as usize;
        let rate = jobs_per_hour * fit.hour_of_day[hour] * fit.day_of_week[day];
        if rng.random::<f64>() * peak >= rate {
            continue;
        }
        let mut pick = rng.random::<f64>() * total_share;
        let class = fit
            .gpus
            .iter()
            .find(|g| {
                pick -= g.share;
                pick < 0.0
            })
            .unwrap_or(&fit.gpus[fit.gpus.len() - 1]);
        let hours = (class.log_mean_hours + class.log_sd_hours * normal(&mut rng)).exp();
        let tenant = format!("vc-{}", rng.random_range(1..=8u32));
        let id = format!("s{:06}", out.len());
        let spec = map_job(&id, m, regions, &tenant, class.gpus, hours, s.start_ms + at_ms);
        out.push(TraceJob { id, at_ms, spec, pipeline: None });
    }
    out
}

fn alibaba(
    path: &Path,
    from: Option<f64>,
    m: &Mapping,
    regions: &[String],
    s: &Scenario,
) -> Result<Vec<TraceJob>, WhatIfError> {
    let file = std::fs::File::open(path).map_err(|e| WhatIfError::io("Alibaba job trace", path, &e))?;
    let origin = path.display().to_string();
    let mut header: Vec<String> = Vec::new();
    let mut rows: Vec<(usize, f64, u32, f64, String)> = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| WhatIfError::io("Alibaba job trace", path, &e))?;
        let line = line.trim();
        if i == 0 {
            header = line.split(',').map(str::to_string).collect();
            for col in ["num_gpu", "qos", "creation_time", "deletion_time", "scheduled_time"] {
                if !header.iter().any(|h| h == col) {
                    return Err(WhatIfError::invalid(&origin, "line 1", format!("no {col} column")));
                }
            }
            continue;
        }
        if line.is_empty() {
            continue;
        }
        let cols: Vec<&str> = line.split(',').collect();
        let col = |name: &str| header.iter().position(|h| h == name).and_then(|k| cols.get(k)).copied().unwrap_or("");
        let bad = |what: String| WhatIfError::invalid(&origin, &format!("line {}", i + 1), what);
        let gpus: u32 = col("num_gpu").parse().map_err(|_| bad("num_gpu: expected an integer".into()))?;
        if gpus == 0 {
            continue; // CPU-only pods: no GPU work to place
        }
        let num = |name: &str| -> Result<Option<f64>, WhatIfError> {
            let v = col(name);
            if v.is_empty() {
                Ok(None)
            } else {
                v.parse().map(Some).map_err(|_| bad(format!("{name}: expected seconds")))
            }
        };
        let created = num("creation_time")?.ok_or_else(|| bad("creation_time: missing".into()))?;
        let deleted = num("deletion_time")?.ok_or_else(|| bad("deletion_time: missing".into()))?;
        let began = num("scheduled_time")?.unwrap_or(created);
        rows.push((i, created, gpus, (deleted - began).max(0.0), format!("qos-{}", col("qos"))));
    }
    rows.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let from = from.or(rows.first().map(|r| r.1)).unwrap_or(0.0);
    let horizon_s = s.horizon_ms as f64 / 1000.0;
    Ok(rows
        .into_iter()
        .filter(|r| r.1 >= from && r.1 - from < horizon_s)
        .map(|(i, created, gpus, run_s, tenant)| {
            let at_ms = ((created - from) * 1000.0) as i64;
            let id = format!("a{i:06}");
            let spec = map_job(&id, m, regions, &tenant, gpus, run_s / 3600.0, s.start_ms + at_ms);
            TraceJob { id, at_ms, spec, pipeline: None }
        })
        .collect())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonLine {
    at_hours: f64,
    #[serde(default)]
    id: Option<String>,
    spec: serde_json::Value,
}

fn json_lines(path: &Path, s: &Scenario) -> Result<Vec<TraceJob>, WhatIfError> {
    let file = std::fs::File::open(path).map_err(|e| WhatIfError::io("job file", path, &e))?;
    let origin = path.display().to_string();
    let mut out = Vec::new();
    let mut ids = std::collections::BTreeSet::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| WhatIfError::io("job file", path, &e))?;
        if line.trim().is_empty() {
            continue;
        }
        let field = format!("line {}", i + 1);
        let row: JsonLine =
            serde_json::from_str(&line).map_err(|e| WhatIfError::invalid(&origin, &field, e.to_string()))?;
        if !(row.at_hours.is_finite() && row.at_hours >= 0.0) {
            return Err(WhatIfError::invalid(&origin, &format!("{field}.at_hours"), "must be hours ≥ 0"));
        }
        let spec = JobSpec::from_value(row.spec).map_err(|e| {
            let mut errors = FieldErrors::default();
            for fe in e.0 {
                errors.push(format!("{field}.spec.{}", fe.field), fe.problem);
            }
            WhatIfError::Invalid { origin: origin.clone(), errors }
        })?;
        let id = row.id.unwrap_or_else(|| format!("l{:06}", i + 1));
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') || id.len() > 40 {
            return Err(WhatIfError::invalid(&origin, &format!("{field}.id"), "use 1 to 40 letters, digits or -"));
        }
        if !ids.insert(id.clone()) {
            return Err(WhatIfError::invalid(&origin, &format!("{field}.id"), format!("{id} is used twice")));
        }
        let at_ms = (row.at_hours * 3_600_000.0) as i64;
        if at_ms < s.horizon_ms {
            out.push(TraceJob { id, at_ms, spec, pipeline: None });
        }
    }
    Ok(out)
}
