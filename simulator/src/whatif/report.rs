//! What a what-if run reports: per policy a summary (the table, and `--output json` with exactly
//! the keys below), time series for the charts, and per-job outcomes for checks; and the
//! self-contained HTML report with one SVG chart per question, drawn by hand (no plotting crate:
//! the charts are simple line, step and bar charts, and hand-written SVG keeps the output
//! byte-for-byte deterministic and the dependency tree small).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::workload::{Stage, TraceJob};

/// One policy's summary: the JSON keys of `spillway simulate --output json`, per policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyReport {
    /// Policy name.
    pub name: String,
    /// USD billed over the run (VM-hours × price, accrued per round).
    pub total_cost_usd: f64,
    /// GPU-hours billed (running VMs × GPUs per VM × time).
    pub gpu_hours: f64,
    /// Jobs that arrived within the horizon.
    pub jobs_submitted: u64,
    /// Jobs whose work was done.
    pub jobs_completed: u64,
    /// Jobs that ended without their work done (budget, cancellation).
    pub jobs_failed: u64,
    /// Jobs neither completed nor failed at the horizon (waiting, or still running).
    pub jobs_pending_at_end: u64,
    /// Median hours from submission to first running; jobs that never ran count the time they
    /// waited until the horizon.
    pub wait_p50_hours: f64,
    /// 95th percentile of the same.
    pub wait_p95_hours: f64,
    /// 99th percentile of the same.
    pub wait_p99_hours: f64,
    /// Jobs with a deadline that finished after it, failed, or were unfinished past it at the end.
    pub deadline_misses: u64,
    /// Fleet creations the cloud refused or that failed (quota, capacity, …), as the cloud counted.
    pub failed_provisioning_attempts: u64,
    /// Times a job was placed again after a failed provisioning, an eviction or an outage.
    pub failovers: u64,
    /// VMs the cloud took back: spot evictions, capacity cuts and outages.
    pub evictions: u64,
    /// GPU-hours of work lost since the last checkpoint when VMs were lost.
    pub lost_work_gpu_hours: f64,
    /// Wall-clock milliseconds the policy's run took (0 with timing off).
    pub wall_ms: u64,
    /// The pipelines of the workload, when it has any (`[workload.pipelines]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipelines: Option<PipelinesReport>,
}

/// How one policy did by the pipelines of a workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PipelinesReport {
    /// Pipelines that arrived within the horizon.
    pub submitted: u64,
    /// Pipelines whose every stage completed.
    pub finished: u64,
    /// Pipelines with a failed stage.
    pub failed: u64,
    /// Median hours from a finished pipeline's arrival (its first stage's) to its last stage's end.
    pub makespan_p50_hours: f64,
    /// 95th percentile of the same.
    pub makespan_p95_hours: f64,
    /// Pipelines with a deadline that finished after it, failed, or were unfinished past it at the
    /// end.
    pub deadline_misses: u64,
    /// Stage attempts that ran outside the region holding their input.
    pub stages_moved: u64,
    /// GB of stage input moved between regions, as billed: per attempt that ran away from it, its
    /// dependencies' declared output (its GPUs' share of it for a part of a split stage).
    pub egress_gb: f64,
    /// USD billed for that egress, at the catalog's rate for each pair of regions.
    pub egress_usd: f64,
    /// Pipelines with a `budget`.
    pub with_budget: u64,
    /// Pipelines whose stages cost more than their budget (by more than a cent).
    pub over_budget: u64,
    /// Pipelines a stage of which ended because the pipeline had spent its budget.
    pub stopped_by_budget: u64,
}

/// How a job ended up at the horizon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Work done.
    Completed,
    /// Ended without its work done.
    Failed,
    /// Waiting or running at the horizon.
    Pending,
}

/// One job's fate under one policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobOutcome {
    /// Job id.
    pub id: String,
    /// Final state.
    pub outcome: Outcome,
    /// GPUs wanted.
    pub gpus: u32,
    /// Arrival, Unix ms.
    pub submitted_ms: i64,
    /// First running, Unix ms.
    pub first_running_ms: Option<i64>,
    /// End, Unix ms.
    pub finished_ms: Option<i64>,
    /// Deadline, Unix ms.
    pub deadline_ms: Option<i64>,
    /// USD billed (its egress included).
    pub cost_usd: f64,
    /// USD of egress billed: a pipeline stage's input moved to where an attempt of it ran.
    #[serde(skip_serializing_if = "is_zero")]
    pub egress_usd: f64,
    /// GPU-hours of work kept (progress × GPUs).
    pub work_gpu_hours: f64,
    /// GPU-hours lost to evictions.
    pub lost_work_gpu_hours: f64,
    /// Placements after a failure or a loss.
    pub failovers: u32,
    /// Its attempts, in order.
    pub attempts: Vec<AttemptSpan>,
    /// Why it ended without its work done (a failed dependency, a budget), when it did.
    pub end_reason: Option<String>,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// One attempt of a job: where, and when it ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptSpan {
    /// Region.
    pub region: String,
    /// VM size.
    pub size: String,
    /// Spot or regular.
    pub priority: scheduler::model::Priority,
    /// When it was asked for, Unix ms.
    pub started_ms: i64,
    /// When its VMs ran, Unix ms.
    pub running_ms: Option<i64>,
    /// When it ended (failed, lost, replaced or done), Unix ms; none while it lasts.
    pub ended_ms: Option<i64>,
    /// GB of its pipeline stage's input it moved (`scheduler::accounting::moved_gb`: all of it for
    /// a gang, its GPUs' share for a part of a split job), once it ran away from the input.
    #[serde(skip_serializing_if = "is_zero")]
    pub egress_gb: f64,
    /// USD billed for that move (in its job's `cost_usd` and `egress_usd`).
    #[serde(skip_serializing_if = "is_zero")]
    pub egress_usd: f64,
}

/// A failover for the timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failover {
    /// Hours after the start.
    pub at_hours: f64,
    /// Job id.
    pub job: String,
    /// Region it left.
    pub from: String,
    /// Region it went to.
    pub to: String,
}

/// Time series of one policy, sampled at most ~600 times over the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PolicySeries {
    /// Sample times, hours after the start.
    pub hours: Vec<f64>,
    /// USD billed so far.
    pub cost_usd: Vec<f64>,
    /// Jobs waiting for a placement (not running, not finished).
    pub queue: Vec<u64>,
    /// GPUs running per region.
    pub gpus_by_region: BTreeMap<String, Vec<f64>>,
    /// Failovers, in time order.
    pub failovers: Vec<Failover>,
}

/// One policy's run: summary, series and per-job outcomes.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyRun {
    /// The summary.
    pub summary: PolicyReport,
    /// The charts' data.
    pub series: PolicySeries,
    /// Every submitted job, by id.
    pub jobs: Vec<JobOutcome>,
    /// Cost integrated per round from the running fleets (equals `total_cost_usd` when the
    /// accounting is consistent; kept for checks).
    pub integrated_cost_usd: f64,
}

/// An outage window, for the timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutageWindow {
    /// Start, hours after the start.
    pub from_hours: f64,
    /// End, hours after the start (the horizon when it never ends).
    pub until_hours: f64,
    /// What is out (`eastus A100`).
    pub label: String,
}

/// The whole run.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// Its description.
    pub description: String,
    /// Seed.
    pub seed: u64,
    /// Horizon, hours.
    pub horizon_hours: f64,
    /// Regions.
    pub regions: Vec<String>,
    /// Outage windows.
    pub outages: Vec<OutageWindow>,
    /// One run per policy, in the scenario's order.
    pub runs: Vec<PolicyRun>,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    scenario: &'a str,
    seed: u64,
    horizon_hours: f64,
    policies: Vec<&'a PolicyReport>,
}

/// Nearest-rank percentile of sorted values (0 for none).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// Rounds for output: money to cents' hundredths, hours to 1e-4, so the JSON is stable and short.
fn r4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

impl PolicyReport {
    pub(crate) fn rounded(mut self) -> PolicyReport {
        self.total_cost_usd = r4(self.total_cost_usd);
        self.gpu_hours = r4(self.gpu_hours);
        self.wait_p50_hours = r4(self.wait_p50_hours);
        self.wait_p95_hours = r4(self.wait_p95_hours);
        self.wait_p99_hours = r4(self.wait_p99_hours);
        self.lost_work_gpu_hours = r4(self.lost_work_gpu_hours);
        if let Some(p) = &mut self.pipelines {
            p.makespan_p50_hours = r4(p.makespan_p50_hours);
            p.makespan_p95_hours = r4(p.makespan_p95_hours);
            p.egress_gb = r4(p.egress_gb);
            p.egress_usd = r4(p.egress_usd);
        }
        self
    }
}

/// The pipelines' figures of one policy's run, from the workload's stages and their outcomes (none
/// when the workload has no pipeline). A stage's input lies where the control loop's rule says
/// (`scheduler::control::gate_link`: its dependencies' last region and declared output); every
/// attempt of the stage that ran elsewhere counts as moved, and the GB and USD are what each
/// attempt was billed (`AttemptSpan::egress_gb`, `egress_usd`), so the table and the bill agree.
pub(crate) fn pipelines_report(jobs: &[TraceJob], outcomes: &[JobOutcome], end_ms: i64) -> Option<PipelinesReport> {
    use scheduler::control::{Gate, Upstream, gate_link, pipeline_budget_exhausted};
    use scheduler::model::JobState;
    let by_id: BTreeMap<&str, &JobOutcome> = outcomes.iter().map(|o| (o.id.as_str(), o)).collect();
    let stages: BTreeMap<&str, &Stage> =
        jobs.iter().filter_map(|j| j.pipeline.as_ref().map(|st| (j.id.as_str(), st))).collect();
    if stages.is_empty() {
        return None;
    }
    let last_region = |o: &JobOutcome| -> Option<String> {
        o.attempts.iter().rev().find(|a| a.running_ms.is_some()).map(|a| a.region.clone())
    };
    let regions: BTreeMap<&str, Option<String>> = outcomes.iter().map(|o| (o.id.as_str(), last_region(o))).collect();
    let mut report = PipelinesReport {
        submitted: 0,
        finished: 0,
        failed: 0,
        makespan_p50_hours: 0.0,
        makespan_p95_hours: 0.0,
        deadline_misses: 0,
        stages_moved: 0,
        egress_gb: 0.0,
        egress_usd: 0.0,
        with_budget: 0,
        over_budget: 0,
        stopped_by_budget: 0,
    };
    /// One pipeline as its stages went: arrival, its last end while every stage completed, whether
    /// a stage failed, its deadline (Unix ms), its budget, what its stages cost, whether its budget
    /// ended a stage.
    struct Run {
        arrival: i64,
        done: Option<i64>,
        failed: bool,
        deadline: Option<i64>,
        budget: Option<f64>,
        spent: f64,
        stopped: bool,
    }
    let mut pipelines: BTreeMap<&str, Run> = BTreeMap::new();
    for (&id, stage) in &stages {
        let Some(o) = by_id.get(id) else { continue };
        let deadline = stage.spec.deadline.map(|d| (d.unix_timestamp_nanos() / 1_000_000) as i64);
        let e = pipelines.entry(stage.link.pipeline_id.as_str()).or_insert(Run {
            arrival: o.submitted_ms,
            done: Some(i64::MIN),
            failed: false,
            deadline,
            budget: stage.spec.budget,
            spent: 0.0,
            stopped: false,
        });
        e.arrival = e.arrival.min(o.submitted_ms);
        e.spent += o.cost_usd;
        e.stopped |= e.budget.is_some_and(|b| o.end_reason.as_deref() == Some(pipeline_budget_exhausted(b).as_str()));
        e.done = match (e.done, o.outcome, o.finished_ms) {
            (Some(t), Outcome::Completed, Some(f)) => Some(t.max(f)),
            _ => None,
        };
        e.failed |= o.outcome == Outcome::Failed;
        let gate = gate_link(&stage.link, |dep| {
            let d = by_id.get(dep)?;
            Some(Upstream {
                state: match d.outcome {
                    Outcome::Completed => JobState::Succeeded,
                    Outcome::Failed => JobState::Failed,
                    Outcome::Pending => JobState::Pending,
                },
                last_region: regions.get(dep).and_then(|r| r.as_deref()),
                output_gb: stages.get(dep).and_then(|st| st.link.output_gb),
            })
        });
        if let Gate::Ready { data: Some((from, _)) } = gate {
            let moved = o.attempts.iter().filter(|a| a.running_ms.is_some() && a.region != from).count();
            report.stages_moved += moved as u64;
        }
        // What the policy billed, attempt by attempt, by the one rule the loop bills by (a split
        // stage's part moves its share of the input), at the catalog's rate for the pair.
        for a in o.attempts.iter().filter(|a| a.running_ms.is_some()) {
            report.egress_gb += a.egress_gb;
            report.egress_usd += a.egress_usd;
        }
    }
    let mut makespans = Vec::new();
    for Run { arrival, done, failed, deadline, budget, spent, stopped } in pipelines.values() {
        report.submitted += 1;
        report.with_budget += u64::from(budget.is_some());
        report.over_budget += u64::from(budget.is_some_and(|b| *spent > b + 0.01));
        report.stopped_by_budget += u64::from(*stopped);
        report.failed += u64::from(*failed);
        if let Some(end) = done {
            report.finished += 1;
            makespans.push((end - arrival) as f64 / 3_600_000.0);
        }
        let missed = match (deadline, done) {
            (None, _) => false,
            (Some(d), Some(end)) => end > d,
            (Some(d), None) => *failed || *d <= end_ms,
        };
        report.deadline_misses += u64::from(missed);
    }
    makespans.sort_by(f64::total_cmp);
    report.makespan_p50_hours = percentile(&makespans, 50.0);
    report.makespan_p95_hours = percentile(&makespans, 95.0);
    Some(report)
}

impl Report {
    /// The summary of a policy, by name.
    pub fn policy(&self, name: &str) -> Option<&PolicyRun> {
        self.runs.iter().find(|r| r.summary.name == name)
    }

    /// `--output json`: `{"scenario", "seed", "horizon_hours", "policies": [{name, total_cost_usd, …, wall_ms}]}`.
    pub fn to_json(&self) -> String {
        let j = JsonReport {
            scenario: &self.scenario,
            seed: self.seed,
            horizon_hours: self.horizon_hours,
            policies: self.runs.iter().map(|r| &r.summary).collect(),
        };
        serde_json::to_string_pretty(&j).expect("the report always serialises")
    }

    /// The table for people.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "scenario {} (seed {}, {} h): {}",
            self.scenario,
            self.seed,
            self.horizon_hours,
            self.description.trim()
        );
        let head = [
            "POLICY",
            "COST USD",
            "GPU-H",
            "JOBS",
            "DONE",
            "FAILED",
            "PENDING",
            "WAIT P50 H",
            "P95 H",
            "P99 H",
            "DL MISS",
            "FAILED PROV",
            "FAILOVERS",
            "EVICTIONS",
            "LOST GPU-H",
            "WALL MS",
        ];
        let rows: Vec<Vec<String>> = self
            .runs
            .iter()
            .map(|r| {
                let s = &r.summary;
                vec![
                    s.name.clone(),
                    format!("{:.2}", s.total_cost_usd),
                    format!("{:.1}", s.gpu_hours),
                    s.jobs_submitted.to_string(),
                    s.jobs_completed.to_string(),
                    s.jobs_failed.to_string(),
                    s.jobs_pending_at_end.to_string(),
                    format!("{:.2}", s.wait_p50_hours),
                    format!("{:.2}", s.wait_p95_hours),
                    format!("{:.2}", s.wait_p99_hours),
                    s.deadline_misses.to_string(),
                    s.failed_provisioning_attempts.to_string(),
                    s.failovers.to_string(),
                    s.evictions.to_string(),
                    format!("{:.1}", s.lost_work_gpu_hours),
                    s.wall_ms.to_string(),
                ]
            })
            .collect();
        write_aligned(&mut out, &head, &rows);
        if let Some((head, rows)) = self.pipeline_rows() {
            let _ = writeln!(out, "\npipelines (makespan: first stage's arrival to last stage's end):");
            write_aligned(&mut out, &head, &rows);
        }
        out
    }

    /// The pipelines table's head and rows, when the workload has pipelines.
    fn pipeline_rows(&self) -> Option<(Vec<&'static str>, Vec<Vec<String>>)> {
        if self.runs.iter().all(|r| r.summary.pipelines.is_none()) {
            return None;
        }
        // The budget columns only when some pipeline has a budget.
        let budgets = self.runs.iter().any(|r| r.summary.pipelines.as_ref().is_some_and(|p| p.with_budget > 0));
        let mut head = vec![
            "POLICY",
            "PIPELINES",
            "DONE",
            "FAILED",
            "MAKESPAN P50 H",
            "P95 H",
            "DL MISS",
            "STAGES MOVED",
            "EGRESS GB",
            "EGRESS USD",
        ];
        if budgets {
            head.extend(["BUDGETS", "OVER BUDGET", "STOPPED BY BUDGET"]);
        }
        let rows = self
            .runs
            .iter()
            .filter_map(|r| {
                let p = r.summary.pipelines.as_ref()?;
                let mut row = vec![
                    r.summary.name.clone(),
                    p.submitted.to_string(),
                    p.finished.to_string(),
                    p.failed.to_string(),
                    format!("{:.2}", p.makespan_p50_hours),
                    format!("{:.2}", p.makespan_p95_hours),
                    p.deadline_misses.to_string(),
                    p.stages_moved.to_string(),
                    format!("{:.0}", p.egress_gb),
                    format!("{:.2}", p.egress_usd),
                ];
                if budgets {
                    row.extend([p.with_budget, p.over_budget, p.stopped_by_budget].map(|n| n.to_string()));
                }
                Some(row)
            })
            .collect();
        Some((head, rows))
    }

    /// The self-contained HTML report: what it shows, the summary table, the policies compared on
    /// the same axes (cost so far, jobs waiting), then per policy the GPUs in use by region and a
    /// timeline of failovers and outages.
    pub fn to_html(&self) -> String {
        let mut h = String::new();
        let _ = write!(
            h,
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>spillway what-if: {name}</title>\n<style>\
             body{{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}}h2{{margin-top:2em;border-bottom:1px solid #ccc}}\
             table{{border-collapse:collapse;font-size:13px}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}\
             th:first-child,td:first-child{{text-align:left}}.charts{{display:flex;flex-wrap:wrap;gap:12px}}\
             svg{{background:#fafafa;border:1px solid #ddd}}p.note{{max-width:60em;line-height:1.4}}</style></head><body>\n\
             <h1>What-if: {name}</h1><p>{desc}</p><p>Seed {seed}, horizon {hz} h, regions: {regions}.</p>\n",
            name = esc(&self.scenario),
            desc = esc(self.description.trim()),
            seed = self.seed,
            hz = self.horizon_hours,
            regions = esc(&self.regions.join(", ")),
        );
        h.push_str(
            "<p class=\"note\"><b>What this shows.</b> The same jobs, arriving at the same times, run once per \
             policy against the same simulated cloud: the same quotas, capacity, spot evictions, prices and \
             outages. The table sums each run up; the first two charts put the policies on the same axes: the \
             money spent so far, and the jobs waiting for GPUs (submitted, not yet running). A policy whose cost \
             line is higher but whose queue is shorter bought waiting time with money (more regular VMs, more \
             regions); one that asks the cloud for capacity it does not get shows it in the table's failed \
             provisioning column. Below, per policy: where its GPUs ran, stacked by region, and a timeline per \
             region of outages (red bands) and of failovers into that region (ticks).</p>\n",
        );
        h.push_str("<h2>Summary</h2>\n");
        h.push_str(&self.html_table());
        if let Some((head, rows)) = self.pipeline_rows() {
            h.push_str(
                "<h2>Pipelines</h2>\n<p class=\"note\">Makespan runs from a pipeline's arrival (its first \
                 stage's) to its last stage's end, over the pipelines that finished. A stage's input lies where \
                 its dependencies last ran; every attempt of a stage that ran in another region moved it (their \
                 declared output, GB) and paid egress. Over budget: a pipeline whose stages cost more than its \
                 budget; stopped by budget: one whose stage ended because the pipeline had spent it.</p>\n<table><tr>",
            );
            for c in head {
                let _ = write!(h, "<th>{}</th>", esc(&c.to_lowercase()));
            }
            h.push_str("</tr>\n");
            for r in rows {
                h.push_str("<tr>");
                for c in r {
                    let _ = write!(h, "<td>{}</td>", esc(&c));
                }
                h.push_str("</tr>\n");
            }
            h.push_str("</table>\n");
        }
        let max_cost = self.runs.iter().flat_map(|r| r.series.cost_usd.iter().copied()).fold(0.0, f64::max);
        let max_queue = self.runs.iter().flat_map(|r| r.series.queue.iter().map(|&q| q as f64)).fold(0.0, f64::max);
        let max_gpus = self
            .runs
            .iter()
            .flat_map(|r| {
                let n = r.series.hours.len();
                (0..n).map(move |i| {
                    r.series.gpus_by_region.values().map(|v| v.get(i).copied().unwrap_or(0.0)).sum::<f64>()
                })
            })
            .fold(0.0, f64::max);
        h.push_str("<h2>All policies</h2><div class=\"charts\">");
        let costs: Vec<(&str, &[f64], &str)> = self
            .runs
            .iter()
            .enumerate()
            .map(|(i, r)| (r.summary.name.as_str(), &r.series.cost_usd[..], SERIES_COLORS[i % SERIES_COLORS.len()]))
            .collect();
        let queues: Vec<Vec<f64>> =
            self.runs.iter().map(|r| r.series.queue.iter().map(|&x| x as f64).collect()).collect();
        let waiting: Vec<(&str, &[f64], &str)> = self
            .runs
            .iter()
            .zip(&queues)
            .enumerate()
            .map(|(i, (r, q))| (r.summary.name.as_str(), &q[..], SERIES_COLORS[i % SERIES_COLORS.len()]))
            .collect();
        let hours: Vec<&[f64]> = self.runs.iter().map(|r| &r.series.hours[..]).collect();
        h.push_str(&line_chart(
            "Cost so far, all policies",
            "USD",
            &hours,
            &costs,
            self.horizon_hours,
            max_cost,
            false,
        ));
        h.push_str(&line_chart(
            "Jobs waiting, all policies",
            "jobs waiting",
            &hours,
            &waiting,
            self.horizon_hours,
            max_queue,
            true,
        ));
        h.push_str("</div>\n");
        for run in &self.runs {
            let s = &run.series;
            let _ = writeln!(h, "<h2>{}</h2><div class=\"charts\">", esc(&run.summary.name));
            h.push_str(&stacked_chart(
                "GPUs in use by region",
                &s.hours,
                &s.gpus_by_region,
                &self.regions,
                self.horizon_hours,
                max_gpus,
            ));
            h.push_str(&timeline(&s.failovers, &self.outages, &self.regions, self.horizon_hours));
            h.push_str("</div>\n");
        }
        h.push_str("</body></html>\n");
        h
    }

    fn html_table(&self) -> String {
        let mut t = String::from("<table><tr>");
        for c in [
            "policy",
            "cost USD",
            "GPU-hours",
            "jobs",
            "completed",
            "failed",
            "pending at end",
            "wait p50 h",
            "p95 h",
            "p99 h",
            "deadline misses",
            "failed provisioning",
            "failovers",
            "evictions",
            "lost GPU-hours",
        ] {
            let _ = write!(t, "<th>{c}</th>");
        }
        t.push_str("</tr>\n");
        for r in &self.runs {
            let s = &r.summary;
            let _ = writeln!(
                t,
                "<tr><td>{}</td><td>{:.2}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td>\
                 <td>{:.2}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td></tr>",
                esc(&s.name),
                s.total_cost_usd,
                s.gpu_hours,
                s.jobs_submitted,
                s.jobs_completed,
                s.jobs_failed,
                s.jobs_pending_at_end,
                s.wait_p50_hours,
                s.wait_p95_hours,
                s.wait_p99_hours,
                s.deadline_misses,
                s.failed_provisioning_attempts,
                s.failovers,
                s.evictions,
                s.lost_work_gpu_hours
            );
        }
        t.push_str("</table>\n");
        t
    }
}

/// Colours of policies and regions; red is kept for outages alone.
const SERIES_COLORS: [&str; 7] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
/// Outages, and nothing else.
const OUTAGE_RED: &str = "#d62728";
const W: f64 = 560.0;
const H: f64 = 260.0;
const PAD_T: f64 = 28.0;
const PAD_B: f64 = 46.0;
/// Room right of the plot for a legend (charts without one keep a margin for the last x label).
const LEGEND_W: f64 = 150.0;
const PAD_R: f64 = 24.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Round tick values from 0 to at least `max`: steps of 1, 2, 2.5 or 5 × 10^k, whole numbers only
/// when `whole` (jobs, GPUs).
fn nice_ticks(max: f64, whole: bool) -> Vec<f64> {
    let max = if max > 0.0 && max.is_finite() { max } else { 1.0 };
    let raw = max / 4.0;
    let mag = 10f64.powf(raw.log10().floor());
    let mut step = [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    if whole {
        step = step.max(1.0).ceil();
    }
    let n = (max / step - 1e-9).ceil().max(1.0) as usize;
    (0..=n).map(|k| step * k as f64).collect()
}

/// Hour ticks at a step people count in (hours, quarter days, days, weeks).
fn hour_ticks(horizon: f64) -> Vec<f64> {
    let step = [1.0, 2.0, 3.0, 6.0, 12.0, 24.0, 48.0, 72.0, 168.0, 336.0, 720.0, 1440.0]
        .into_iter()
        .find(|s| horizon / s <= 8.0)
        .unwrap_or((horizon / 8.0).ceil());
    let n = (horizon / step + 1e-9).floor() as usize;
    (0..=n).map(|k| step * k as f64).collect()
}

fn tick_label(v: f64, step: f64) -> String {
    if step >= 1.0 || v == 0.0 {
        if v >= 10_000.0 && (v / 1000.0).fract() == 0.0 { format!("{}k", v / 1000.0) } else { format!("{v:.0}") }
    } else {
        // As many decimals as the step needs, so that every label of an axis has the same
        // number of them: 0.25 steps label 0.50, not 0.5.
        let decimals = (1..=6).find(|&d| {
            let scaled = step * 10f64.powi(d);
            (scaled - scaled.round()).abs() < 1e-6 * scaled
        });
        let decimals = decimals.unwrap_or(6) as usize;
        format!("{v:.decimals$}")
    }
}

/// A chart's plot area and scales.
struct Axes {
    pad_l: f64,
    right: f64,
    horizon: f64,
    y_ticks: Vec<f64>,
}

impl Axes {
    fn new(pad_l: f64, legend: bool, horizon: f64, max: f64, whole: bool) -> Axes {
        let right = W - if legend { LEGEND_W } else { PAD_R };
        Axes { pad_l, right, horizon: horizon.max(1e-9), y_ticks: nice_ticks(max, whole) }
    }

    fn y_max(&self) -> f64 {
        self.y_ticks.last().copied().unwrap_or(1.0)
    }

    fn x(&self, hours: f64) -> f64 {
        self.pad_l + (self.right - self.pad_l) * (hours / self.horizon).clamp(0.0, 1.0)
    }

    fn y(&self, v: f64) -> f64 {
        H - PAD_B - (H - PAD_T - PAD_B) * (v / self.y_max()).clamp(0.0, 1.0)
    }

    /// The `<svg>` start, the title, the axes with round ticks, and both axis titles.
    fn frame(&self, title: &str, y_title: &str) -> String {
        let y0 = H - PAD_B;
        let mut s = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" font-size=\"11\">\
             <text x=\"{:.1}\" y=\"17\" font-weight=\"bold\">{}</text>\
             <line x1=\"{:.1}\" y1=\"{y0}\" x2=\"{:.1}\" y2=\"{y0}\" stroke=\"#888\"/>\
             <line x1=\"{:.1}\" y1=\"{PAD_T}\" x2=\"{:.1}\" y2=\"{y0}\" stroke=\"#888\"/>",
            self.pad_l,
            esc(title),
            self.pad_l,
            self.right,
            self.pad_l,
            self.pad_l,
        );
        let step = self.y_ticks.get(1).copied().unwrap_or(1.0);
        for &v in &self.y_ticks {
            let y = self.y(v);
            let _ = write!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text><line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#eee\"/>",
                self.pad_l - 4.0,
                y + 4.0,
                tick_label(v, step),
                self.pad_l,
                self.right
            );
        }
        s.push_str(&self.hour_axis());
        let mid = (PAD_T + y0) / 2.0;
        let _ = write!(
            s,
            "<text x=\"14\" y=\"{mid:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {mid:.1})\">{}</text>",
            esc(y_title)
        );
        s
    }

    /// Hour ticks and the x axis title (the last label right-aligned, so it is never cut).
    fn hour_axis(&self) -> String {
        let mut s = String::new();
        let ticks = hour_ticks(self.horizon);
        for (i, &t) in ticks.iter().enumerate() {
            let anchor = if i + 1 == ticks.len() && self.x(t) > self.right - 12.0 { "end" } else { "middle" };
            let _ = write!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{}</text><line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#888\"/>",
                self.x(t),
                H - PAD_B + 15.0,
                tick_label(t, 1.0),
                self.x(t),
                H - PAD_B,
                self.x(t),
                H - PAD_B + 4.0
            );
        }
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">hours since the start of the run</text>",
            (self.pad_l + self.right) / 2.0,
            H - 8.0
        );
        s
    }

    /// A legend right of the plot, off the data.
    fn legend(&self, items: &[(&str, &str)]) -> String {
        let mut s = String::new();
        for (i, (label, color)) in items.iter().enumerate() {
            let y = PAD_T + 4.0 + 16.0 * i as f64;
            let _ = write!(
                s,
                "<rect x=\"{:.1}\" y=\"{y:.1}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                self.right + 12.0,
                self.right + 26.0,
                y + 9.0,
                esc(label)
            );
        }
        s
    }
}

fn polyline(axes: &Axes, hours: &[f64], values: &[f64], color: &str) -> String {
    let pts: Vec<String> =
        hours.iter().zip(values).map(|(&t, &v)| format!("{:.1},{:.1}", axes.x(t), axes.y(v))).collect();
    format!("<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"/>", pts.join(" "))
}

/// One line per series on the same axes, with a legend.
#[allow(clippy::too_many_arguments)]
fn line_chart(
    title: &str,
    y_title: &str,
    hours: &[&[f64]],
    lines: &[(&str, &[f64], &str)],
    horizon: f64,
    max: f64,
    whole: bool,
) -> String {
    let axes = Axes::new(64.0, true, horizon, max, whole);
    let mut s = axes.frame(title, y_title);
    for ((_, v, c), t) in lines.iter().zip(hours) {
        s.push_str(&polyline(&axes, t, v, c));
    }
    let items: Vec<(&str, &str)> = lines.iter().map(|(n, _, c)| (*n, *c)).collect();
    s.push_str(&axes.legend(&items));
    s.push_str("</svg>\n");
    s
}

fn stacked_chart(
    title: &str,
    hours: &[f64],
    by_region: &BTreeMap<String, Vec<f64>>,
    regions: &[String],
    horizon: f64,
    max: f64,
) -> String {
    let axes = Axes::new(64.0, true, horizon, max, true);
    let mut s = axes.frame(title, "GPUs in use");
    let mut base = vec![0.0; hours.len()];
    let mut items = Vec::new();
    for (region, vals) in by_region {
        // A region keeps its colour in every chart: its place among the scenario's regions.
        let i = regions.iter().position(|r| r == region).unwrap_or(regions.len());
        let color = SERIES_COLORS[i % SERIES_COLORS.len()];
        let top: Vec<f64> = base.iter().zip(vals).map(|(b, v)| b + v).collect();
        let mut pts: Vec<String> =
            hours.iter().zip(&top).map(|(&t, &v)| format!("{:.1},{:.1}", axes.x(t), axes.y(v))).collect();
        pts.extend(hours.iter().zip(&base).rev().map(|(&t, &v)| format!("{:.1},{:.1}", axes.x(t), axes.y(v))));
        let _ =
            write!(s, "<polygon fill=\"{color}\" fill-opacity=\"0.7\" stroke=\"none\" points=\"{}\"/>", pts.join(" "));
        items.push((region.as_str(), color));
        base = top;
    }
    s.push_str(&axes.legend(&items));
    s.push_str("</svg>\n");
    s
}

/// One row per region: outage windows as red bands, failovers into the region as ticks. The left
/// margin fits the longest region name.
fn timeline(failovers: &[Failover], outages: &[OutageWindow], regions: &[String], horizon: f64) -> String {
    let longest = regions.iter().map(|r| r.chars().count()).max().unwrap_or(0) as f64;
    let axes = Axes::new((longest * 6.5 + 12.0).max(64.0), true, horizon, 1.0, true);
    let rows = regions.len().max(1) as f64;
    let row_h = (H - PAD_T - PAD_B) / rows;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" font-size=\"11\">\
         <text x=\"{:.1}\" y=\"17\" font-weight=\"bold\">Failovers into each region, and outages</text>",
        axes.pad_l
    );
    for (i, r) in regions.iter().enumerate() {
        let y = PAD_T + row_h * i as f64;
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text><line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>",
            axes.pad_l - 4.0,
            y + row_h / 2.0 + 4.0,
            esc(r),
            axes.pad_l,
            y + row_h,
            axes.right,
            y + row_h
        );
        for o in outages.iter().filter(|o| o.label.split(' ').next() == Some(r.as_str())) {
            let (x0, x1) = (axes.x(o.from_hours), axes.x(o.until_hours));
            let _ = write!(
                s,
                "<rect x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{OUTAGE_RED}\" fill-opacity=\"0.35\"><title>{}</title></rect>",
                y + 2.0,
                (x1 - x0).max(1.0),
                row_h - 4.0,
                esc(&o.label)
            );
        }
        // Many failovers at once would be thousands of elements: one tick per pixel column.
        let mut seen = std::collections::BTreeSet::new();
        for f in failovers.iter().filter(|f| &f.to == r) {
            let x = axes.x(f.at_hours).round() as i64;
            if seen.insert(x) {
                let _ = write!(
                    s,
                    "<line x1=\"{x}\" y1=\"{:.1}\" x2=\"{x}\" y2=\"{:.1}\" stroke=\"#333\"/>",
                    y + 4.0,
                    y + row_h - 4.0
                );
            }
        }
    }
    s.push_str(&axes.hour_axis());
    s.push_str(&axes.legend(&[("failover into it", "#333"), ("outage", OUTAGE_RED)]));
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\">{} failovers in all</text></svg>",
        axes.right + 12.0,
        PAD_T + 50.0,
        failovers.len()
    );
    s
}

/// Writes a table with each column as wide as its widest cell, two spaces apart, no trailing space.
fn write_aligned(out: &mut String, head: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        cells.zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect::<Vec<_>>().join("  ").trim_end().to_string()
    };
    let _ = writeln!(out, "{}", line(&mut head.iter().copied()));
    for r in rows {
        let _ = writeln!(out, "{}", line(&mut r.iter().map(String::as_str)));
    }
}

#[cfg(test)]
mod chart_tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_data() {
        assert_eq!(nice_ticks(11_216.0, false), vec![0.0, 5000.0, 10_000.0, 15_000.0]);
        assert_eq!(nice_ticks(6.2, true), vec![0.0, 2.0, 4.0, 6.0, 8.0]);
        assert_eq!(nice_ticks(3.0, true), vec![0.0, 1.0, 2.0, 3.0]);
        assert_eq!(nice_ticks(0.0, true), vec![0.0, 1.0]);
        assert_eq!(hour_ticks(168.0), vec![0.0, 24.0, 48.0, 72.0, 96.0, 120.0, 144.0, 168.0]);
        assert_eq!(tick_label(10_000.0, 5000.0), "10k");
        assert_eq!(tick_label(0.5, 0.25), "0.50");
        assert_eq!(tick_label(0.4, 0.2), "0.4");
        assert_eq!(tick_label(0.05, 0.025), "0.050");
    }
}

#[cfg(test)]
mod pipeline_tests {
    use std::sync::Arc;

    use scheduler::model::{PipelineSpec, Priority, SpecFormat};

    use super::*;
    use crate::whatif::workload::Stage;

    const H: i64 = 3_600_000;

    fn span(region: &str, started: i64, egress_gb: f64, egress_usd: f64) -> AttemptSpan {
        AttemptSpan {
            region: region.into(),
            size: "Standard_NC24ads_A100_v4".into(),
            priority: Priority::Regular,
            started_ms: started,
            running_ms: Some(started + 60_000),
            ended_ms: Some(started + H),
            egress_gb,
            egress_usd,
        }
    }

    fn outcome(id: &str, attempts: Vec<AttemptSpan>) -> JobOutcome {
        let egress_usd = attempts.iter().map(|a| a.egress_usd).sum();
        JobOutcome {
            id: id.into(),
            outcome: Outcome::Completed,
            gpus: 4,
            submitted_ms: 0,
            first_running_ms: attempts.first().and_then(|a| a.running_ms),
            finished_ms: attempts.iter().filter_map(|a| a.ended_ms).max(),
            deadline_ms: None,
            cost_usd: 10.0 + egress_usd,
            egress_usd,
            work_gpu_hours: 4.0,
            lost_work_gpu_hours: 0.0,
            failovers: 0,
            attempts,
            end_reason: None,
        }
    }

    /// The table counts a stage's egress as the policy billed it, attempt by attempt: a split
    /// stage whose part of 2 of its 4 GPUs ran away from its 400 GB of input moved 200 GB (the
    /// loop's rule, `accounting::moved_gb`), not the whole input, at the pair's rate.
    #[test]
    fn a_split_stage_moved_in_part_counts_its_share_of_the_input_as_billed() {
        let text = r#"
name = "p"
tenant = "t"
[[jobs]]
name = "prep"
kind = "batch"
gpus = 4
duration_hours = 1.0
output_gb = 400
[[jobs]]
name = "score"
kind = "batch"
gpus = 4
duration_hours = 1.0
depends_on = ["prep"]
"#;
        let catalog = scheduler::Catalog::builtin();
        let spec = Arc::new(
            PipelineSpec::parse_checked(text, SpecFormat::Toml, &catalog, time::OffsetDateTime::UNIX_EPOCH)
                .expect("valid pipeline"),
        );
        let ids =
            BTreeMap::from([("prep".to_string(), "j-prep".to_string()), ("score".to_string(), "j-score".to_string())]);
        let links = spec.links("p-1", &ids);
        let jobs: Vec<TraceJob> = spec
            .jobs
            .iter()
            .zip(links)
            .map(|(j, link)| TraceJob {
                id: ids[&j.spec.name].clone(),
                at_ms: 0,
                spec: j.spec.clone(),
                pipeline: Some(Stage { link, spec: spec.clone() }),
            })
            .collect();
        assert!(!jobs[1].spec.is_gang(), "a batch stage is split");
        // prep ran in eastus; score in two parts: 2 GPUs there, 2 in westus3 (200 GB moved, $4).
        let outcomes = vec![
            outcome("j-prep", vec![span("eastus", 0, 0.0, 0.0)]),
            outcome("j-score", vec![span("eastus", 2 * H, 0.0, 0.0), span("westus3", 2 * H, 200.0, 4.0)]),
        ];
        let p = pipelines_report(&jobs, &outcomes, 10 * H).expect("the workload has pipelines");
        assert_eq!(p.stages_moved, 1, "{p:?}");
        assert!((p.egress_gb - 200.0).abs() < 1e-9, "the part's share, not the whole 400 GB: {p:?}");
        assert!((p.egress_usd - 4.0).abs() < 1e-9, "what was billed: {p:?}");
        assert_eq!(p.finished, 1, "{p:?}");
    }
}
