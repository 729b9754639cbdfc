//! The job-level feasibility rule of pipelines, decided from the snapshot before a job reaches the
//! solver: a job whose dependencies have not all succeeded waits ("waiting for prep"); a failed or
//! cancelled dependency fails it (its reason names the dependency) unless it says
//! `on_dependency_failure = "run"`, in which case it waits for every dependency to end and runs.
//! A job that may run takes, by default, its dependencies' data: the region the dependency that
//! left the most output last ran in, and that output's size, so the solver's egress term keeps a
//! chain in one region unless moving pays. The one home of these rules: the control loop applies
//! them through [`gate`] (from its snapshot), the what-if baselines through [`gate_link`] (from
//! their own records of the jobs).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::snapshot::Snapshot;
use crate::model::{Job, JobState, OnDependencyFailure, PipelineLink};

/// Whether a job may be placed, as far as its dependencies go.
#[derive(Debug, Clone, PartialEq)]
pub enum Gate {
    /// It may; with where its input data lies and how much of it there is, when its dependencies
    /// say (the job's own `data_region` takes precedence).
    Ready {
        /// The region holding its input, and the input's size in GB when declared.
        data: Option<(String, Option<f64>)>,
    },
    /// Not yet: why.
    Wait(String),
    /// Never: a dependency failed or was cancelled; why.
    Fail(String),
}

/// What the gate needs to know of one dependency.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Upstream<'a> {
    /// Its state now.
    pub state: JobState,
    /// The region its last attempt that reached running ran in (none: it never ran).
    pub last_region: Option<&'a str>,
    /// The output it declared for its dependants, GB.
    pub output_gb: Option<f64>,
}

/// How a dependency stands.
enum Ended {
    Not,
    Succeeded,
    Otherwise(String),
}

/// The gate of one open job, from the loop's snapshot alone (a dependency failing in this round
/// is not seen: [`gates`] sees it).
#[cfg(test)]
pub(crate) fn gate(snap: &Snapshot, job: &Job) -> Gate {
    gate_failing(snap, &BTreeSet::new(), job)
}

/// The gates of `jobs` (open jobs of the snapshot), with failures carried all the way down in
/// one round: a job the gate fails counts as failed for its own dependants, and theirs, so a
/// failed stage fails every stage below it at once (not one level per round). Only pipeline jobs
/// have an entry: a job without one is [`Gate::Ready`] with no input data.
pub(crate) fn gates(snap: &Snapshot, jobs: &[&Job]) -> BTreeMap<String, Gate> {
    let mut dependants: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, j) in jobs.iter().enumerate() {
        for d in j.pipeline.iter().flat_map(|l| &l.depends_on) {
            dependants.entry(d.job_id.as_str()).or_default().push(i);
        }
    }
    let mut failing: BTreeSet<String> = BTreeSet::new();
    let mut out = BTreeMap::new();
    // A job outside a pipeline is always ready: it gets no entry (most jobs, every round).
    let mut queue: VecDeque<usize> = (0..jobs.len()).filter(|&i| jobs[i].pipeline.is_some()).collect();
    while let Some(i) = queue.pop_front() {
        let job = &jobs[i];
        let g = gate_failing(snap, &failing, job);
        // Only a waiting job is failed by its dependency (`JobEdit::DependencyFailed`).
        if matches!(g, Gate::Fail(_)) && job.state == JobState::Pending && failing.insert(job.id.clone()) {
            queue.extend(dependants.get(job.id.as_str()).into_iter().flatten());
        }
        out.insert(job.id.clone(), g);
    }
    out
}

/// The gate of one open job, reading the jobs in `failing` as failed.
fn gate_failing(snap: &Snapshot, failing: &BTreeSet<String>, job: &Job) -> Gate {
    let Some(link) = &job.pipeline else { return Gate::Ready { data: None } };
    gate_link(link, |id| {
        let last_region = snap.upstream_regions.get(id).map(String::as_str);
        if failing.contains(id) {
            return Some(Upstream { state: JobState::Failed, last_region, output_gb: None });
        }
        if let Some(stored) = snap.jobs.get(id).map(|j| &**j).or_else(|| snap.upstream.get(id)) {
            return Some(Upstream {
                state: stored.state,
                last_region,
                output_gb: stored.pipeline.as_ref().and_then(|l| l.output_gb),
            });
        }
        let kept = snap.forgotten.get(id)?;
        Some(Upstream { state: kept.state, last_region, output_gb: kept.output_gb })
    })
}

/// The gate of a job of a pipeline, given how each of its dependencies stands by job id (`None`:
/// no record of it).
pub fn gate_link<'a>(link: &PipelineLink, upstream: impl Fn(&str) -> Option<Upstream<'a>>) -> Gate {
    let mut waiting = Vec::new();
    let mut failed = Vec::new();
    for dep in &link.depends_on {
        let ended = match upstream(&dep.job_id).map(|u| u.state) {
            Some(JobState::Succeeded) => Ended::Succeeded,
            Some(s) if s.is_final() => Ended::Otherwise(format!("dependency {} {}", dep.name, ended_word(s))),
            Some(_) => Ended::Not,
            // Only ended jobs are forgotten, and their pipeline keeps how they ended: this is a
            // dependency whose pipeline record was lost too.
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
    Gate::Ready { data: input_data(link, &upstream) }
}

/// Where a ready job's input lies: the region holding the most declared output of its
/// dependencies (the first dependency's region when none declares any), and that output in GB.
fn input_data<'a>(
    link: &PipelineLink,
    upstream: &impl Fn(&str) -> Option<Upstream<'a>>,
) -> Option<(String, Option<f64>)> {
    let mut by_region: BTreeMap<&str, Option<f64>> = BTreeMap::new();
    let mut first = None;
    for dep in &link.depends_on {
        let Some(up) = upstream(&dep.job_id) else { continue };
        let Some(region) = up.last_region else { continue };
        first.get_or_insert(region);
        let entry = by_region.entry(region).or_default();
        if let Some(gb) = up.output_gb {
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
