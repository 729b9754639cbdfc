//! What-if simulation: scenarios, workloads, the engine with the real control loop and the
//! baselines, and the reports.

use std::path::PathBuf;

use simulator::whatif::fit::PhillyFit;

fn shared() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared")
}

fn scenarios() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}

#[test]
fn philly_fit_file_is_derived_from_the_trace() {
    let csv = shared().join("data/jobs/philly.csv");
    if !csv.exists() {
        eprintln!("skipping: {} is absent (the shared data folder is not next to the project)", csv.display());
        return;
    }
    let fit = PhillyFit::from_csv(&csv).expect("the trace fits");
    let path = scenarios().join("philly-fit.toml");
    if std::env::var_os("SPILLWAY_WRITE_FIT").is_some() {
        std::fs::write(&path, fit.to_toml()).expect("write the fit");
    }
    let committed = PhillyFit::parse(&std::fs::read_to_string(&path).expect("the fit file exists")).expect("it parses");
    assert_eq!(committed, fit, "scenarios/philly-fit.toml is stale: rerun with SPILLWAY_WRITE_FIT=1");
    assert_eq!(fit.jobs, 82_247);
    let one_gpu = fit.gpus.iter().find(|g| g.gpus == 1).expect("1-GPU class");
    assert!(one_gpu.share > 0.9, "most Philly jobs use one GPU: {}", one_gpu.share);
    assert!((fit.hour_of_day.iter().sum::<f64>() - 24.0).abs() < 1e-3);
}

use simulator::whatif::report::Outcome;
use simulator::whatif::{Report, RunOptions, Scenario, WhatIfError, load_workload, run_scenario};

/// A small scenario for fast tests: two regions, half a day, ~30 jobs.
fn tiny(seed: u64) -> Scenario {
    let text = format!(
        r#"
[experiment]
kind = "what-if"

[scenario]
name = "tiny"
start = "2026-01-05T00:00:00Z"
horizon_hours = 12
interval_seconds = 300
seed = {seed}

[cloud]
regions = ["eastus", "westus3"]
sizes = ["Standard_NC24ads_A100_v4", "Standard_NC48ads_A100_v4", "Standard_NC96ads_A100_v4"]
provisioning_seconds = 120
default_capacity_vms = 4
default_spot_eviction_rate_per_hour = 0.2

[cloud.default_quota]
cores = 400
low_priority_cores = 96
family = 96

[workload]
source = "synthetic"
jobs_per_hour = 3.0

[workload.mapping]
gpu_models = ["A100"]
max_gpus = 4
max_duration_hours = 6
spot_max_hours = 3
deadline_slack = 3.0
"#
    );
    Scenario::parse(&text, &scenarios(), "tiny").expect("tiny scenario is valid")
}

fn no_timing() -> RunOptions {
    RunOptions { timing: false }
}

/// A bundled scenario cut to its first `hours`, with its events moved by `shift_hours` (negative:
/// earlier) so they fall inside, and rounds every five minutes, to keep debug-build tests fast.
fn bundled_cut(name: &str, hours: f64, shift_hours: f64) -> Scenario {
    let mut s = Scenario::load(&scenarios().join(format!("{name}.toml"))).expect("bundled scenario is valid");
    s.horizon_ms = (hours * 3_600_000.0) as i64;
    s.interval_ms = 300_000;
    let shift = (shift_hours * 3_600_000.0) as i64;
    for e in &mut s.events {
        e.at_ms += shift;
        e.until_ms = e.until_ms.map(|u| u + shift);
    }
    s
}

#[tokio::test]
async fn same_scenario_and_seed_give_byte_identical_json() {
    let a = run_scenario(&tiny(3), &no_timing()).await.expect("runs");
    let b = run_scenario(&tiny(3), &no_timing()).await.expect("runs");
    assert_eq!(a.to_json(), b.to_json());
    assert_eq!(a.to_html(), b.to_html());
    assert!(a.to_json().contains("\"wall_ms\": 0"));
    let c = run_scenario(&tiny(4), &no_timing()).await.expect("runs");
    assert_ne!(a.to_json(), c.to_json(), "another seed draws another workload");
}

fn check_conservation(r: &Report, jobs: usize) {
    for run in &r.runs {
        let s = &run.summary;
        assert_eq!(s.jobs_submitted as usize, jobs, "{}: every job is counted", s.name);
        assert_eq!(s.jobs_completed + s.jobs_failed + s.jobs_pending_at_end, s.jobs_submitted, "{}", s.name);
        let mut ids: Vec<&str> = run.jobs.iter().map(|j| j.id.as_str()).collect();
        ids.dedup();
        assert_eq!(ids.len(), jobs, "{}: each job once, in exactly one state", s.name);
        let work: f64 = run.jobs.iter().map(|j| j.work_gpu_hours).sum();
        assert!(s.gpu_hours + 1e-6 >= work, "{}: billed {} GPU-h < work {work}", s.name, s.gpu_hours);
        for j in run.jobs.iter().filter(|j| j.outcome == Outcome::Completed) {
            assert!(
                j.finished_ms.is_some() && j.first_running_ms.is_some(),
                "{}: {} completed without running",
                s.name,
                j.id
            );
        }
        assert!(s.jobs_completed > 0 && s.total_cost_usd > 0.0, "{}: {s:?}", s.name);
        // What the fleets cost over time, plus the egress billed as stages ran away from their
        // input, is what the jobs were billed.
        let total: f64 = run.jobs.iter().map(|j| j.cost_usd).sum();
        let egress: f64 = run.jobs.iter().map(|j| j.egress_usd).sum();
        assert!(
            (run.integrated_cost_usd + egress - total).abs() <= 1e-6 * total.max(1.0),
            "{}: cost over time {} + egress {egress} vs billed {total}",
            s.name,
            run.integrated_cost_usd
        );
    }
}

#[tokio::test]
async fn every_job_ends_in_exactly_one_state_and_billing_covers_the_work() {
    let s = tiny(11);
    let jobs = load_workload(&s).expect("workload").len();
    assert!(jobs >= 20, "{jobs} jobs");
    let r = run_scenario(&s, &no_timing()).await.expect("runs");
    assert_eq!(r.runs.len(), 5, "every policy, skypilot-like included");
    check_conservation(&r, jobs);
    let regular = &r.policy("regular-only").unwrap().summary;
    assert_eq!(regular.evictions, 0, "no spot, no evictions: {regular:?}");
}

#[tokio::test]
async fn in_a_region_outage_the_affected_jobs_fail_over_and_none_is_lost() {
    // The bundled outage (hours 84-90) moved to hours 6-12 of an 18-hour cut.
    let mut s = bundled_cut("region-outage", 18.0, -78.0);
    s.policies = vec![simulator::whatif::Policy::Spillway];
    let outage_start = s.start_ms + 6 * 3_600_000;
    let r = run_scenario(&s, &no_timing()).await.expect("runs");
    let run = &r.runs[0];
    let affected: Vec<_> = run
        .jobs
        .iter()
        .filter(|j| {
            j.attempts.iter().any(|a| {
                a.region == "eastus"
                    && a.running_ms.is_some_and(|t| t < outage_start)
                    && a.ended_ms.is_none_or(|e| e >= outage_start)
            })
        })
        .collect();
    assert!(!affected.is_empty(), "the outage hit running jobs");
    for j in &affected {
        assert_ne!(j.outcome, Outcome::Failed, "{} was lost", j.id);
        let hit = j
            .attempts
            .iter()
            .position(|a| a.region == "eastus" && a.ended_ms.is_none_or(|e| e >= outage_start))
            .unwrap();
        let later = &j.attempts[hit + 1..];
        if j.outcome == Outcome::Completed || j.finished_ms.is_none_or(|f| f > outage_start) {
            assert!(
                later.iter().any(|a| a.region != "eastus" && a.running_ms.is_some()),
                "{} did not fail over to another region: {:?}",
                j.id,
                j.attempts
            );
        }
        assert!(j.failovers >= 1, "{}", j.id);
    }
    assert_eq!(run.summary.jobs_failed, 0);
    eprintln!("{} jobs hit by the outage, all failed over; {}", affected.len(), r.to_table());
}

#[tokio::test]
async fn spillway_makes_far_fewer_failed_provisioning_attempts_than_greedy_failover() {
    // Each bundled synthetic scenario cut to its first day (events moved inside it).
    for (name, shift) in [("default", 0.0), ("region-outage", -78.0), ("spot-storm", -42.0)] {
        let mut s = bundled_cut(name, 24.0, shift);
        s.policies = vec![simulator::whatif::Policy::Spillway, simulator::whatif::Policy::GreedyFailover];
        let r = run_scenario(&s, &no_timing()).await.expect("runs");
        let sp = &r.policy("spillway").unwrap().summary;
        let gr = &r.policy("greedy-failover").unwrap().summary;
        eprintln!("{name}: {}", r.to_table());
        assert!(gr.failed_provisioning_attempts > 0, "{name}: the broker hits quota and capacity walls");
        assert!(
            sp.failed_provisioning_attempts * 5 <= gr.failed_provisioning_attempts,
            "{name}: spillway {} vs greedy {}",
            sp.failed_provisioning_attempts,
            gr.failed_provisioning_attempts
        );
        // Cost and wait are measured here, not asserted: on one-day cuts the two are within a few
        // tenths of a percent either way; the week-long tests below assert them on the bundled
        // scenarios themselves.
        eprintln!(
            "{name}: cost spillway ${:.2} vs greedy ${:.2}; wait p95 {:.2} h vs {:.2} h",
            sp.total_cost_usd, gr.total_cost_usd, sp.wait_p95_hours, gr.wait_p95_hours
        );
    }
}

/// The bundled scenario as shipped (a week) on the honest cloud (issue #22: no capacity shown),
/// spillway against greedy-failover and skypilot-like: at least 5× fewer failed provisioning
/// attempts than either, and no worse on waiting (p50, p95, p99) or cost than greedy-failover.
async fn spillway_is_no_worse_than_the_brokers_on(name: &str) {
    let mut s = Scenario::load(&scenarios().join(format!("{name}.toml"))).expect("bundled scenario is valid");
    s.policies = vec![
        simulator::whatif::Policy::Spillway,
        simulator::whatif::Policy::GreedyFailover,
        simulator::whatif::Policy::SkypilotLike,
    ];
    let r = run_scenario(&s, &no_timing()).await.expect("runs");
    let sp = &r.policy("spillway").unwrap().summary;
    let gr = &r.policy("greedy-failover").unwrap().summary;
    let sky = &r.policy("skypilot-like").unwrap().summary;
    eprintln!("{name}: {}", r.to_table());
    for b in [gr, sky] {
        assert!(
            sp.failed_provisioning_attempts * 5 <= b.failed_provisioning_attempts,
            "{name}: spillway {} vs {} {}",
            sp.failed_provisioning_attempts,
            b.name,
            b.failed_provisioning_attempts
        );
    }
    assert!(sp.total_cost_usd <= gr.total_cost_usd, "{name}: ${} vs ${}", sp.total_cost_usd, gr.total_cost_usd);
    for (what, a, b) in [
        ("p50", sp.wait_p50_hours, gr.wait_p50_hours),
        ("p95", sp.wait_p95_hours, gr.wait_p95_hours),
        ("p99", sp.wait_p99_hours, gr.wait_p99_hours),
    ] {
        assert!(a <= b, "{name}: wait {what} {a} h vs {b} h");
    }
}

#[tokio::test]
async fn on_the_default_week_spillway_is_no_worse_than_greedy_failover() {
    spillway_is_no_worse_than_the_brokers_on("default").await;
}

#[tokio::test]
async fn on_the_region_outage_week_spillway_is_no_worse_than_greedy_failover() {
    spillway_is_no_worse_than_the_brokers_on("region-outage").await;
}

#[tokio::test]
async fn on_the_spot_storm_week_spillway_is_no_worse_than_greedy_failover() {
    spillway_is_no_worse_than_the_brokers_on("spot-storm").await;
}

#[test]
fn scenario_errors_name_their_fields() {
    let good = std::fs::read_to_string(scenarios().join("region-outage.toml")).unwrap();
    let bad = good
        .replace("policies = [\"spillway\",", "policies = [\"fastest\",")
        .replace("region = \"eastus\"\ngpu_model", "region = \"mars\"\ngpu_model")
        .replace("horizon_hours = 168", "horizon_hours = -1");
    let err = Scenario::parse(&bad, &scenarios(), "bad").unwrap_err().to_string();
    for field in ["scenario.policies[0]", "events[0].region", "scenario.horizon_hours"] {
        assert!(err.contains(field), "{field} missing from: {err}");
    }
    let typo = good.replace("jobs_per_hour = 8.0", "jobs_per_hr = 8.0");
    let err = Scenario::parse(&typo, &scenarios(), "typo").unwrap_err().to_string();
    assert!(err.contains("workload") && err.contains("jobs_per_hr"), "{err}");
    let other = good.replace("kind = \"what-if\"", "kind = \"spot-deadline\"");
    let err = Scenario::parse(&other, &scenarios(), "other").unwrap_err().to_string();
    assert!(err.contains("experiment.kind"), "{err}");
}

#[test]
fn philly_week_reads_the_real_trace_or_says_clearly_that_it_is_absent() {
    let text = std::fs::read_to_string(scenarios().join("philly-week.toml")).unwrap();
    // Resolved from a directory with no shared folder next to it: a clear error naming the path.
    let nowhere = std::env::temp_dir().join(format!("spillway-nowhere-{}/scenarios", std::process::id()));
    let s = Scenario::parse(&text, &nowhere, "philly-week").expect("the file itself is valid");
    match load_workload(&s) {
        Err(WhatIfError::Io { path, reason, .. }) => {
            assert!(path.ends_with("shared/data/jobs/philly.csv"), "{path}");
            assert!(reason.contains("not found"), "{reason}");
        }
        other => panic!("expected a missing-trace error, got {other:?}"),
    }
    let csv = shared().join("data/jobs/philly.csv");
    if !csv.exists() {
        eprintln!("skipping the real-trace half: {} is absent", csv.display());
        return;
    }
    let s = Scenario::load(&scenarios().join("philly-week.toml")).unwrap();
    let jobs = load_workload(&s).expect("the week loads");
    assert!(jobs.len() > 1_000, "{} jobs in the week", jobs.len());
    assert!(jobs.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
    assert!(jobs.iter().all(|j| j.at_ms < s.horizon_ms && j.spec.tenant.starts_with("vc-")));
    assert!(jobs.iter().any(|j| j.spec.gpus >= 8), "multi-GPU jobs keep their size");
    let long = jobs.iter().find(|j| j.spec.duration_hours.unwrap() > 4.0).unwrap();
    assert_eq!(long.spec.spot, Some(scheduler::model::SpotPolicy::Never), "long jobs stay off spot");
    // The same week with a fifth of its jobs chained into pipelines within one virtual cluster.
    let s = Scenario::load(&scenarios().join("philly-pipelines-week.toml")).unwrap();
    let chained = load_workload(&s).expect("the week with pipelines loads");
    assert_eq!(chained.len(), jobs.len(), "the same jobs");
    let stages: Vec<_> = chained.iter().filter_map(|j| j.pipeline.as_ref().map(|st| (j, st))).collect();
    let share = stages.len() as f64 / chained.len() as f64;
    assert!((0.15..0.25).contains(&share), "{share} of the jobs chained");
    assert!(stages.iter().all(|(j, st)| j.spec.tenant == st.spec.tenant && (2..=4).contains(&st.spec.jobs.len())));
}

#[test]
fn json_lines_workloads_keep_their_specs_and_reject_bad_lines_by_number() {
    let dir = std::env::temp_dir().join(format!("spillway-jsonl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = std::fs::read_to_string(scenarios().join("default.toml")).unwrap();
    let text = base
        .replace("source = \"synthetic\"\nfit = \"philly\"", "source = \"jsonl\"\npath = \"jobs.jsonl\"")
        .replace("jobs_per_hour = 8.0", "");
    std::fs::write(
        dir.join("jobs.jsonl"),
        "{\"at_hours\": 2.0, \"id\": \"b\", \"spec\": {\"name\": \"two\", \"kind\": \"training\", \"gpus\": 2, \"gpu_models\": [\"A100\"], \"duration_hours\": 1.0}}\n\
         {\"at_hours\": 0.5, \"spec\": {\"name\": \"one\", \"kind\": \"batch\", \"gpus\": 1, \"duration_hours\": 0.5}}\n",
    )
    .unwrap();
    let s = Scenario::parse(&text, &dir, "jsonl").expect("valid");
    let jobs = load_workload(&s).expect("loads");
    assert_eq!(jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), ["l000002", "b"]);
    assert_eq!(jobs[1].spec.name, "two");
    std::fs::write(
        dir.join("jobs.jsonl"),
        "{\"at_hours\": 1, \"spec\": {\"name\": \"x\", \"kind\": \"training\", \"gpus\": 0}}\n",
    )
    .unwrap();
    let err = load_workload(&s).unwrap_err().to_string();
    assert!(err.contains("gpus"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_html_report_is_self_contained_with_the_policies_compared_and_two_charts_per_policy() {
    let r = run_scenario(&tiny(5), &no_timing()).await.expect("runs");
    let html = r.to_html();
    assert!(html.starts_with("<!doctype html>"));
    assert_eq!(html.matches("<svg").count(), 2 + 2 * r.runs.len());
    // Issue #24: one chart with every policy on the same axes, axis titles with units, a paragraph
    // saying what the report shows, and outage red used for outages only.
    for title in ["Cost so far, all policies", "Jobs waiting, all policies", "What this shows"] {
        assert_eq!(html.matches(title).count(), 1, "{title}");
    }
    for title in ["GPUs in use by region", "Failovers into each region"] {
        assert_eq!(html.matches(title).count(), r.runs.len(), "{title}");
    }
    for axis in [">USD<", ">jobs waiting<", ">GPUs in use<", ">hours since the start of the run<"] {
        assert!(html.contains(axis), "axis title {axis} missing");
    }
    assert!(!html.contains("<polygon fill=\"#d62728\"") && !html.contains("stroke=\"#d62728\""), "red is for outages");
    assert!(!html.contains("<script") && !html.contains("src="), "nothing to fetch");
    assert!(html.contains("<table>") && html.contains("greedy-failover"));
}

#[test]
fn every_bundled_scenario_parses_and_the_default_is_the_embedded_one() {
    for name in [
        "default",
        "region-outage",
        "spot-storm",
        "philly-week",
        "philly-full",
        "pipelines-week",
        "philly-pipelines-week",
    ] {
        Scenario::load(&scenarios().join(format!("{name}.toml"))).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let on_disk = std::fs::read_to_string(scenarios().join("default.toml")).unwrap();
    assert_eq!(simulator::whatif::DEFAULT_SCENARIO, on_disk);
    let s = Scenario::bundled_default(&scenarios()).expect("the embedded default parses");
    assert_eq!((s.name.as_str(), s.horizon_ms), ("default", 168 * 3_600_000));
    assert_eq!(s.cloud.regions.len(), 4);
    let jobs = load_workload(&s).expect("synthetic workload");
    // 8 jobs an hour on average over a week, shaped by the fitted hour and weekday multipliers.
    assert!((1_000..1_700).contains(&jobs.len()), "{} jobs", jobs.len());
    assert!(jobs.iter().all(|j| j.spec.gpus <= 8 && j.spec.duration_hours.unwrap() <= 24.0));
    let one_gpu = jobs.iter().filter(|j| j.spec.gpus == 1).count() as f64 / jobs.len() as f64;
    assert!(one_gpu > 0.85, "Philly-shaped: mostly 1-GPU jobs ({one_gpu})");
}

/// One 1-GPU, 4-hour job on spot A100 in one region (regular quota is zero, evictions are off), and
/// optionally the spot price doubling at hour 2, by an event or by a price trace.
fn priced_run(dir: &std::path::Path, change: &str) -> Scenario {
    let text = format!(
        r#"
[experiment]
kind = "what-if"

[scenario]
name = "price"
start = "2026-01-05T00:00:00Z"
horizon_hours = 8
interval_seconds = 300
seed = 1
policies = ["spillway", "greedy-failover", "single-region"]

[cloud]
regions = ["eastus"]
sizes = ["Standard_NC24ads_A100_v4"]
provisioning_seconds = 120
default_capacity_vms = 4
default_spot_eviction_rate_per_hour = 0.0

[cloud.default_quota]
cores = 0
low_priority_cores = 96
family = 0

[workload]
source = "jsonl"
path = "jobs.jsonl"
{change}
"#
    );
    std::fs::write(
        dir.join("jobs.jsonl"),
        "{\"at_hours\": 0.0, \"id\": \"p\", \"spec\": {\"name\": \"p\", \"kind\": \"training\", \"gpus\": 1, \
         \"sizes\": [\"Standard_NC24ads_A100_v4\"], \"regions\": [\"eastus\"], \"spot\": \"preferred\", \"duration_hours\": 4.0}}\n",
    )
    .unwrap();
    Scenario::parse(&text, dir, "price").expect("valid")
}

/// Prices per tick: a running VM is billed at the price in effect, under the loop and the baselines
/// alike, whether the price comes from an event or from a trace; and a bad price event is refused
/// with its field named.
#[tokio::test]
async fn running_vms_are_billed_at_the_price_in_effect_from_events_and_traces() {
    let dir = std::env::temp_dir().join(format!("spillway-price-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let list = scheduler::Catalog::builtin()
        .price("Standard_NC24ads_A100_v4", "eastus")
        .and_then(|p| p.spot)
        .expect("the catalog has this spot price");
    let event = format!(
        "[[events]]\nkind = \"price\"\nregion = \"eastus\"\nsize = \"Standard_NC24ads_A100_v4\"\nusd = {}\nat_hours = 2\n",
        2.0 * list
    );
    // Hourly ticks: the list price for two hours, then double.
    std::fs::write(
        dir.join("price.json"),
        "{\"metadata\": {\"gap_seconds\": 3600}, \"data\": [1, 1, 2, 2, 2, 2, 2, 2, 2]}",
    )
    .unwrap();
    let trace = format!(
        "[[traces]]\nkind = \"price\"\npath = \"price.json\"\nregion = \"eastus\"\nsize = \"Standard_NC24ads_A100_v4\"\nper_unit = {list}\n"
    );
    let base = run_scenario(&priced_run(&dir, ""), &no_timing()).await.expect("runs");
    let by_event = run_scenario(&priced_run(&dir, &event), &no_timing()).await.expect("runs");
    let by_trace = run_scenario(&priced_run(&dir, &trace), &no_timing()).await.expect("runs");
    for ((b, e), t) in base.runs.iter().zip(&by_event.runs).zip(&by_trace.runs) {
        let name = &b.summary.name;
        let (job_b, job_e) = (&b.jobs[0], &e.jobs[0]);
        assert_eq!(job_b.outcome, Outcome::Completed, "{name}");
        assert_eq!(job_e.outcome, Outcome::Completed, "{name}");
        let hours = |ms: i64| ms as f64 / 3_600_000.0;
        let start = hours(job_e.attempts[0].running_ms.expect("ran") - job_e.submitted_ms);
        let end = hours(job_e.attempts[0].ended_ms.expect("ended") - job_e.submitted_ms);
        assert!(start < 2.0 && end > 2.0, "{name}: the change falls inside the run ({start} to {end} h)");
        let expected = list * (2.0 - start) + 2.0 * list * (end - 2.0);
        let one_round = 2.0 * list * 300.0 / 3600.0;
        assert!(
            (job_e.cost_usd - expected).abs() <= one_round,
            "{name}: billed {} where the prices say {expected}",
            job_e.cost_usd
        );
        assert!(job_e.cost_usd > job_b.cost_usd * 1.4, "{name}: {} vs {}", job_e.cost_usd, job_b.cost_usd);
        assert!((t.jobs[0].cost_usd - job_e.cost_usd).abs() < 1e-6, "{name}: a trace and an event agree");
    }

    let text = std::fs::read_to_string(scenarios().join("default.toml")).unwrap()
        + "\n[[events]]\nkind = \"price\"\nregion = \"eastus\"\nsize = \"Standard_NC24ads_A100_v4\"\nusd = -1\nvms = 2\nat_hours = 1\n";
    let err = Scenario::parse(&text, &scenarios(), "bad-price").unwrap_err().to_string();
    let n = text.matches("[[events]]").count() - 1;
    for field in [format!("events[{n}].usd"), format!("events[{n}].vms")] {
        assert!(err.contains(&field), "{field} missing from: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `[[sizes]]` add a size the built-in catalog lacks (here a 2-GPU A100 size with its own family):
/// the cloud sells it at the scenario's prices, the loop places on it and quota counts its vCPUs;
/// a malformed size is refused with its field named.
#[tokio::test]
async fn a_scenario_can_add_a_size_and_the_loop_places_on_it() {
    let dir = std::env::temp_dir().join(format!("spillway-sizes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let size = |vcpus: u32| {
        format!(
            r#"
[[sizes]]
name = "Standard_NC48x_A100_custom"
family = "customA100Family"
vcpus = {vcpus}
memory_gib = 440
gpu_model = "A100-80GB"
gpus = 2
gpu_memory_gib = 80
infiniband = false
workloads = ["training"]

[[prices]]
size = "Standard_NC48x_A100_custom"
region = "eastus"
regular = 5.0
spot = 2.0
"#
        )
    };
    let text = |vcpus: u32| {
        format!(
            r#"
[experiment]
kind = "what-if"

[scenario]
name = "sizes"
start = "2026-01-05T00:00:00Z"
horizon_hours = 4
interval_seconds = 300
seed = 1
policies = ["spillway"]

[cloud]
regions = ["eastus"]
sizes = ["Standard_NC48x_A100_custom"]
default_capacity_vms = 4
default_spot_eviction_rate_per_hour = 0.0

[cloud.default_quota]
cores = 0
low_priority_cores = 96
family = 96

[workload]
source = "jsonl"
path = "jobs.jsonl"
{}"#,
            size(vcpus)
        )
    };
    std::fs::write(
        dir.join("jobs.jsonl"),
        "{\"at_hours\": 0.0, \"id\": \"a\", \"spec\": {\"name\": \"a\", \"kind\": \"training\", \"gpus\": 2, \
         \"gpu_models\": [\"A100\"], \"spot\": \"preferred\", \"duration_hours\": 1.0}}\n",
    )
    .unwrap();
    let s = Scenario::parse(&text(48), &dir, "sizes").expect("valid");
    assert_eq!(s.catalog().size("Standard_NC48x_A100_custom").map(|z| z.gpus), Some(2));
    let r = run_scenario(&s, &no_timing()).await.expect("runs");
    let job = &r.runs[0].jobs[0];
    assert_eq!(job.outcome, Outcome::Completed);
    assert!(job.attempts.iter().all(|a| a.size == "Standard_NC48x_A100_custom"), "{:?}", job.attempts);
    // One VM at $2 an hour for at least the hour of work.
    assert!(job.cost_usd >= 2.0 - 1e-9 && job.cost_usd <= 2.0 * 1.25, "{}", job.cost_usd);

    let err = Scenario::parse(&text(0), &dir, "bad-size").unwrap_err().to_string();
    assert!(err.contains("sizes[0].vcpus"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A day in three regions with most jobs chained into pipelines of 2–3 stages, rounds every five
/// minutes: small enough for a debug-build test.
fn pipelines_day(extra: &str) -> Scenario {
    let text = pipelines_day_text(extra);
    Scenario::parse(&text, &scenarios(), "pipelines-day").expect("pipelines scenario is valid")
}

fn pipelines_day_text(extra: &str) -> String {
    format!(
        r#"
[experiment]
kind = "what-if"

[scenario]
name = "pipelines-day"
start = "2026-01-05T00:00:00Z"
horizon_hours = 24
interval_seconds = 300
seed = 7
policies = ["spillway", "greedy-failover", "skypilot-like", "single-region", "regular-only"]

[cloud]
regions = ["eastus", "southcentralus", "westus3"]
sizes = ["Standard_NC24ads_A100_v4", "Standard_NC48ads_A100_v4", "Standard_NC96ads_A100_v4"]
provisioning_seconds = 120
default_capacity_vms = 4
default_spot_eviction_rate_per_hour = 0.05

[cloud.default_quota]
cores = 400
low_priority_cores = 96
family = 96

[workload]
source = "synthetic"
jobs_per_hour = 1.5

[workload.mapping]
gpu_models = ["A100"]
max_gpus = 4
max_duration_hours = 3
spot_max_hours = 2

[workload.pipelines]
{extra}
"#
    )
}

/// Data moved to a region is there: however often a stage is placed again in a region its
/// attempts already moved its input to (evictions on a stormy spot market), no policy bills more
/// than the input's GB per region (`accounting::to_move_gb`, the loop's and the baselines').
#[tokio::test]
async fn a_stage_pays_for_its_input_once_per_region_under_every_policy() {
    use std::collections::BTreeMap;
    let text = pipelines_day_text("fraction = 0.8\nstages = [2, 3]\noutput_gb = [100, 400]")
        .replace("default_spot_eviction_rate_per_hour = 0.05", "default_spot_eviction_rate_per_hour = 1.5")
        .replace("jobs_per_hour = 1.5", "jobs_per_hour = 3");
    let s = Scenario::parse(&text, &scenarios(), "pipelines-storm").expect("valid");
    let jobs = load_workload(&s).expect("workload");
    let output: BTreeMap<&str, f64> = jobs
        .iter()
        .filter_map(|j| j.pipeline.as_ref().map(|st| (j.id.as_str(), st.link.output_gb.unwrap_or(0.0))))
        .collect();
    let input_gb: BTreeMap<&str, f64> = jobs
        .iter()
        .filter_map(|j| {
            let st = j.pipeline.as_ref()?;
            Some((j.id.as_str(), st.link.depends_on.iter().map(|d| output[d.job_id.as_str()]).sum()))
        })
        .collect();
    let r = run_scenario(&s, &no_timing()).await.expect("runs");
    eprintln!("{}", r.to_table());
    let mut again = BTreeMap::new();
    for run in &r.runs {
        let name = run.summary.name.as_str();
        for o in &run.jobs {
            let Some(&gb) = input_gb.get(o.id.as_str()) else { continue };
            let mut by_region: BTreeMap<&str, (f64, u32)> = BTreeMap::new();
            for a in o.attempts.iter().filter(|a| a.running_ms.is_some()) {
                let e = by_region.entry(a.region.as_str()).or_default();
                e.0 += a.egress_gb;
                e.1 += 1;
            }
            for (region, (billed, runs)) in by_region {
                assert!(billed <= gb + 1e-6, "{name}: {} billed {billed} GB into {region} for a {gb} GB input", o.id);
                if runs > 1 && billed > 0.0 {
                    *again.entry(name.to_string()).or_insert(0) += 1;
                }
            }
        }
    }
    // The rule was exercised by a baseline: stages ran again in a region they had moved their
    // input to (the loop's side has its own test in `control_loop.rs`).
    assert!(again.keys().any(|k| k != "spillway" && k != "regular-only"), "{again:?}");
}

#[tokio::test]
async fn pipelines_run_in_order_under_every_policy_with_their_egress_counted() {
    use std::collections::{BTreeMap, BTreeSet};
    let s = pipelines_day("fraction = 0.6\nstages = [2, 3]\noutput_gb = [100, 400]\ndeadline_slack = 2.0");
    let jobs = load_workload(&s).expect("workload");
    let stages: Vec<_> = jobs.iter().filter_map(|j| j.pipeline.as_ref().map(|st| (j, st))).collect();
    let pipelines: BTreeSet<&str> = stages.iter().map(|(_, st)| st.link.pipeline_id.as_str()).collect();
    assert!(
        stages.len() * 5 >= jobs.len() * 2 && pipelines.len() >= 4,
        "{} of {} jobs chained",
        stages.len(),
        jobs.len()
    );
    for (j, st) in &stages {
        assert_eq!(j.spec.tenant, st.spec.tenant, "one tenant per pipeline");
        assert!(j.spec.deadline.is_some_and(|d| d <= st.spec.deadline.unwrap()), "{}: its share of the deadline", j.id);
    }
    let r = run_scenario(&s, &no_timing()).await.expect("runs");
    eprintln!("{}", r.to_table());
    check_conservation(&r, jobs.len());
    let mut moved = 0;
    for run in &r.runs {
        let name = &run.summary.name;
        let by_id: BTreeMap<&str, _> = run.jobs.iter().map(|o| (o.id.as_str(), o)).collect();
        for (j, st) in &stages {
            let o = by_id[j.id.as_str()];
            for dep in &st.link.depends_on {
                let d = by_id[dep.job_id.as_str()];
                if let Some(first) = o.attempts.first() {
                    assert!(
                        d.outcome == Outcome::Completed && d.finished_ms.is_some_and(|f| f <= first.started_ms),
                        "{name}: {} started at {} before its dependency {} ended ({:?})",
                        j.id,
                        first.started_ms,
                        d.id,
                        d.finished_ms
                    );
                }
            }
        }
        let p = run.summary.pipelines.as_ref().expect("the workload has pipelines");
        assert_eq!(p.submitted as usize, pipelines.len(), "{name}");
        assert!(p.finished > 0, "{name}: {p:?}");
        assert!((p.egress_usd - p.egress_gb * 0.02).abs() < 1e-3, "{name}: {p:?}");
        // The table counts the egress each policy billed its stages (one rule, the loop's).
        let billed: f64 = stages.iter().map(|(j, _)| by_id[j.id.as_str()].egress_usd).sum();
        assert!((p.egress_usd - billed).abs() < 1e-3, "{name}: table {p:?} against billed ${billed}");
        assert_eq!(p.stages_moved > 0, p.egress_gb > 0.0, "{name}: a moved stage pays for its input: {p:?}");
        moved += p.stages_moved;
    }
    assert!(moved > 0, "some policy ran a stage away from its input: {}", r.to_table());
    let sp = r.policy("spillway").unwrap().summary.pipelines.clone().unwrap();
    let gr = r.policy("greedy-failover").unwrap().summary.pipelines.clone().unwrap();
    assert!(sp.finished >= gr.finished, "spillway {sp:?} vs greedy {gr:?}");
    assert!(sp.deadline_misses <= gr.deadline_misses, "spillway {sp:?} vs greedy {gr:?}");
    assert!(sp.makespan_p95_hours <= gr.makespan_p95_hours, "spillway {sp:?} vs greedy {gr:?}");
    assert!(r.to_table().contains("MAKESPAN P50 H") && r.to_html().contains("<h2>Pipelines</h2>"));
    assert!(r.to_json().contains("\"egress_usd\""));
}

#[tokio::test]
async fn a_pipeline_budget_is_set_from_its_stages_cheapest_cost_and_held_by_every_policy() {
    use std::collections::BTreeMap;
    let base = "fraction = 0.6\nstages = [2, 3]\noutput_gb = [100, 400]";
    let budget_of = |factor: &str| {
        let s = pipelines_day(&format!("{base}\nbudget_factor = {factor}"));
        let jobs = load_workload(&s).expect("workload");
        let budgets: BTreeMap<String, f64> = jobs
            .iter()
            .filter_map(|j| j.pipeline.as_ref())
            .map(|st| (st.link.pipeline_id.clone(), st.spec.budget.expect("every pipeline gets a budget")))
            .collect();
        (s, jobs, budgets)
    };
    let (_, _, once) = budget_of("1.0");
    let (_, _, twice) = budget_of("2.0");
    assert!(!once.is_empty());
    for (id, b) in &once {
        // Rounded up to whole cents each: within two cents of double.
        assert!(*b > 0.0 && (twice[id] - 2.0 * b).abs() <= 0.02, "{id}: {b} then {}", twice[id]);
    }
    // Half the cheapest cost: no pipeline can finish within it, every policy stops some.
    // Half the cheapest cost: no pipeline can finish within it. The brokers start stages and are
    // stopped once they spent it; the loop does not start what its pipeline cannot afford.
    let (s, jobs, budgets) = budget_of("0.5");
    let r = run_scenario(&s, &no_timing()).await.expect("runs");
    eprintln!("{}", r.to_table());
    check_conservation(&r, jobs.len());
    assert!(r.to_table().contains("STOPPED BY BUDGET"));
    let stage_of: BTreeMap<&str, &str> = jobs
        .iter()
        .filter_map(|j| j.pipeline.as_ref().map(|st| (j.id.as_str(), st.link.pipeline_id.as_str())))
        .collect();
    for run in &r.runs {
        let name = run.summary.name.as_str();
        let p = run.summary.pipelines.as_ref().expect("pipelines");
        assert_eq!(p.with_budget, p.submitted, "{name}: {p:?}");
        let mut spent: BTreeMap<&str, f64> = BTreeMap::new();
        for o in &run.jobs {
            if let Some(pl) = stage_of.get(o.id.as_str()) {
                *spent.entry(pl).or_default() += o.cost_usd;
            }
        }
        for o in run.jobs.iter().filter(|o| o.end_reason.as_deref().is_some_and(|r| r.contains("pipeline budget"))) {
            let pl = stage_of[o.id.as_str()];
            assert!(spent[pl] >= budgets[pl], "{name}: {} stopped at ${} of ${}", o.id, spent[pl], budgets[pl]);
            assert_eq!(o.outcome, Outcome::Failed, "{name}: {}", o.id);
            assert!(o.attempts.iter().all(|a| a.ended_ms.is_some()), "{name}: {} stopped with a fleet left", o.id);
        }
        match name {
            "spillway" | "regular-only" => {
                assert_eq!(p.over_budget, 0, "{name}: {p:?}");
                assert!(spent.values().all(|&usd| usd == 0.0), "{name} started a stage it could not afford: {spent:?}");
            }
            _ => assert!(p.stopped_by_budget > 0, "{name}: {p:?}"),
        }
    }
    // A fifth above the cheapest cost: the loop plans within it, the brokers overrun.
    let (s, _, _) = budget_of("1.2");
    let r = run_scenario(&s, &no_timing()).await.expect("runs");
    eprintln!("{}", r.to_table());
    let sp = r.policy("spillway").unwrap().summary.pipelines.clone().unwrap();
    let gr = r.policy("greedy-failover").unwrap().summary.pipelines.clone().unwrap();
    assert_eq!(sp.over_budget, 0, "{sp:?}");
    assert!(sp.finished >= gr.finished && sp.finished > 0, "spillway {sp:?} vs greedy {gr:?}");
}

#[test]
fn pipeline_workload_errors_name_their_fields() {
    let text = std::fs::read_to_string(scenarios().join("pipelines-week.toml")).unwrap();
    let bad = text
        .replace("fraction = 0.4", "fraction = 1.5")
        .replace("stages = [2, 4]", "stages = [1, 4]")
        .replace("output_gb = [50, 500]", "output_gb = [500]")
        .replace("deadline_slack = 1.5 ", "deadline_slack = 0.5\nbudget_factor = -1 ");
    let err = Scenario::parse(&bad, &scenarios(), "bad").unwrap_err().to_string();
    for field in [
        "workload.pipelines.fraction",
        "workload.pipelines.stages",
        "workload.pipelines.output_gb",
        "workload.pipelines.deadline_slack",
        "workload.pipelines.budget_factor",
    ] {
        assert!(err.contains(field), "{field} missing from: {err}");
    }
    let typo = text.replace("stages = [2, 4]", "stage = [2, 4]");
    let err = Scenario::parse(&typo, &scenarios(), "typo").unwrap_err().to_string();
    assert!(err.contains("pipelines") && err.contains("stage"), "{err}");
}
