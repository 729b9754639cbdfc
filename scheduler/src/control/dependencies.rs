//! The job-level feasibility rule of pipelines, decided from the snapshot before a job reaches the
//! solver: a job whose dependencies have not all succeeded waits ("waiting for prep"); a failed or
//! cancelled dependency fails it (its reason names the dependency) unless it says
//! `on_dependency_failure = "run"`, in which case it waits for every dependency to end and runs.
//! A job that may run takes, by default, its dependencies' data: the region the dependency that
//! left the most output last ran in, and that output's size, so the solver's egress term keeps a
//! chain in one region unless moving pays. The one home of these rules.

use std::collections::BTreeMap;

use super::snapshot::Snapshot;
use crate::model::{Job, JobState, OnDependencyFailure};

/// Whether a job may be placed, as far as its dependencies go.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Gate {
    /// It may; with where its input data lies and how much of it there is, when its dependencies
    /// say (the job's own `data_region` takes precedence).
    Ready { data: Option<(String, Option<f64>)> },
    /// Not yet: why.
    Wait(String),
    /// Never: a dependency failed or was cancelled; why.
    Fail(String),
}

/// How a dependency stands.
enum Ended {
    Not,
    Succeeded,
    Otherwise(String),
}

/// The gate of one open job.
pub(crate) fn gate(snap: &Snapshot, job: &Job) -> Gate {
    let Some(link) = &job.pipeline else { return Gate::Ready { data: None } };
    let mut waiting = Vec::new();
    let mut failed = Vec::new();
    for dep in &link.depends_on {
        let stored = snap.jobs.get(&dep.job_id).or_else(|| snap.upstream.get(&dep.job_id));
        let ended = match stored.map(|j| j.state) {
            Some(JobState::Succeeded) => Ended::Succeeded,
            Some(s) if s.is_final() => Ended::Otherwise(format!("dependency {} {}", dep.name, ended_word(s))),
            Some(_) => Ended::Not,
            // Only ended jobs are forgotten (after the retention); how it ended is no longer known.
            None => Ended::Otherwise(format!("dependency {} ({}) is no longer on record", dep.name, dep.job_id)),
        };
        match ended {
            Ended::Not => waiting.push(dep.name.as_str()),
            Ended::Succeeded => {}
            Ended::Otherwise(why) => failed.push(why),
        }
    }
    if link.on_dependency_failure == OnDependencyFailure::Fail
        && let Some(why) = failed.into_iter().next()
    {
        return Gate::Fail(why);
    }
    if !waiting.is_empty() {
        return Gate::Wait(format!("waiting for {}", waiting.join(", ")));
    }
    Gate::Ready { data: input_data(snap, job) }
}

/// Where a ready job's input lies: the region holding the most declared output of its
/// dependencies (the first dependency's region when none declares any), and that output in GB.
fn input_data(snap: &Snapshot, job: &Job) -> Option<(String, Option<f64>)> {
    let link = job.pipeline.as_ref()?;
    let mut by_region: BTreeMap<&str, Option<f64>> = BTreeMap::new();
    let mut first = None;
    for dep in &link.depends_on {
        let Some(region) = snap.upstream_regions.get(&dep.job_id) else { continue };
        first.get_or_insert(region.as_str());
        let output = snap
            .jobs
            .get(&dep.job_id)
            .or_else(|| snap.upstream.get(&dep.job_id))
            .and_then(|j| j.pipeline.as_ref())
            .and_then(|l| l.output_gb);
        let entry = by_region.entry(region.as_str()).or_default();
        if let Some(gb) = output {
            *entry = Some(entry.unwrap_or(0.0) + gb);
        }
    }
    let most = by_region
        .iter()
        .filter_map(|(r, gb)| gb.map(|gb| (*r, gb)))
        .max_by(|a, b| a.1.total_cmp(&b.1).then_with(|| b.0.cmp(a.0)));
    match most {
        Some((region, gb)) => Some((region.to_string(), Some(gb))),
        None => first.map(|r| (r.to_string(), None)),
    }
}

fn ended_word(s: JobState) -> &'static str {
    match s {
        JobState::Cancelled => "was cancelled",
        _ => "failed",
    }
}

/// Applies a ready job's input data to its solver demands, where its spec names none.
pub(crate) fn apply_input_data(job: &Job, data: &Option<(String, Option<f64>)>, demands: &mut [solver::JobDemand]) {
    let Some((region, gb)) = data else { return };
    if job.spec.data_region.is_some() {
        return;
    }
    for d in demands {
        d.data_region = Some(region.clone());
        if job.spec.data_gb.is_none() {
            d.data_gb = *gb;
        }
    }
}
