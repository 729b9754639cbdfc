//! `spillway advise` run as a user runs it: the built binary, its output and exit codes.

use std::process::Command;

use serde_json::Value;

const PROBLEM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/advise-problem.json");

fn spillway(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("SPILLWAY_AZURE_SUBSCRIPTION_ID")
        .output()
        .expect("spillway runs")
}

fn temp_problem(name: &str, edit: impl FnOnce(&mut Value)) -> std::path::PathBuf {
    let mut p: Value = serde_json::from_str(&std::fs::read_to_string(PROBLEM).unwrap()).unwrap();
    edit(&mut p);
    let path = std::env::temp_dir().join(format!("spillway-advise-{name}-{}.json", std::process::id()));
    std::fs::write(&path, serde_json::to_string(&p).unwrap()).unwrap();
    path
}

#[test]
fn a_problem_with_binding_quota_gets_ranked_increases_ready_to_file() {
    let out = spillway(&["advise", "--problem", PROBLEM, "--output", "json", "--subscription", "sub-42"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let first = &r["recommendations"][0];
    assert_eq!(first["rank"], 1);
    assert_eq!(first["region"], "westus3");
    assert_eq!(first["increases"][0]["pool"], "standardNCADSA100v4Family");
    assert_eq!(first["increases"][0]["current_limit"], 96);
    assert_eq!(first["increases"][0]["increase_vcpus"], 216);
    let jobs: Vec<&str> = first["buys"]["jobs"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(jobs.contains(&"pretrain-8"), "{jobs:?}");
    // The alternative: the same work in eastus needs its family and cores raised.
    let alt = &first["alternatives"][0];
    assert_eq!(alt["region"], "eastus");
    assert_eq!(alt["increases"].as_array().unwrap().len(), 2);
    assert_eq!(r["after"]["waiting_jobs"], 0);
    assert!(r["after"]["placed_weight"].as_f64() > r["before"]["placed_weight"].as_f64());
    let req = &r["requests"][0];
    assert_eq!(
        req["url"],
        "https://management.azure.com/subscriptions/sub-42/providers/Microsoft.Compute/locations/westus3/providers/\
         Microsoft.Quota/quotas/standardNCADSA100v4Family?api-version=2025-09-01"
    );
    assert_eq!(req["body"]["properties"]["limit"]["value"], 312);
    assert!(req["az"].as_str().unwrap().starts_with("az quota update --resource-name standardNCADSA100v4Family"));

    let table = spillway(&["advise", "--problem", PROBLEM]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("westus3  standardNCADSA100v4Family  96     +216"), "{text}");
    assert!(text.contains("or +216 vCPUs of standardNCADSA100v4Family and +192 vCPUs of cores in eastus"), "{text}");
    assert!(text.contains("{subscriptionId}"), "a placeholder without --subscription: {text}");
}

#[test]
fn nothing_binding_means_no_advice_and_exit_0() {
    let path = temp_problem("loose", |p| {
        for q in p["quotas"].as_array_mut().unwrap() {
            q["vcpus"] = 100_000.into();
        }
    });
    let out = spillway(&["advise", "--problem", path.to_str().unwrap(), "--output", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["summary"], "no quota increase would place more work");
    assert_eq!(r["recommendations"].as_array().unwrap().len(), 0);
    assert_eq!(r["requests"].as_array().unwrap().len(), 0);
    let text = spillway(&["advise", "--problem", path.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("no quota increase would place more work"));
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_region_or_pool_azure_does_not_know_is_refused_by_name() {
    let path = temp_problem("unknown", |p| {
        p["quotas"][1]["region"] = "mars-north".into();
        p["quotas"][4]["pool"] = "standardWarpDriveFamily".into();
    });
    let out = spillway(&["advise", "--problem", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("quotas[1].region: \"mars-north\" is not an Azure region"), "{err}");
    assert!(err.contains("quotas[4].pool: \"standardWarpDriveFamily\" is not a Microsoft.Compute quota pool"), "{err}");
    assert!(out.stdout.is_empty());
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_malformed_problem_exits_2_naming_the_field() {
    let path = temp_problem("malformed", |p| p["jobs"][2]["gpus"] = 0.into());
    let out = spillway(&["advise", "--problem", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("jobs[2].gpus: expected a positive integer"));
    let _ = std::fs::remove_file(path);
}

/// Half a day of A100 work in two regions whose regular A100 family quota is tight.
const TIGHT_WEEK: &str = include_str!("../simulator/tests/data/tight-quota.toml");

#[test]
fn a_scenario_gets_confirmed_advice_ready_to_file_and_an_advised_copy_that_simulates() {
    let dir = std::env::temp_dir().join(format!("spillway-advise-scenario-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("tight.toml");
    std::fs::write(&input, TIGHT_WEEK).unwrap();
    let written = dir.join("out/tight-advised.toml");
    std::fs::create_dir_all(written.parent().unwrap()).unwrap();
    let out = spillway(&[
        "advise",
        "--scenario",
        input.to_str().unwrap(),
        "--write-scenario",
        written.to_str().unwrap(),
        "--output",
        "json",
        "--max",
        "3",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let recs = r["recommendations"].as_array().unwrap();
    assert!(!recs.is_empty() && recs.len() <= 3, "{r:#}");
    assert_eq!(r["requests"].as_array().unwrap().len(), recs.len(), "one request per increase");
    for (rec, req) in recs.iter().zip(r["requests"].as_array().unwrap()) {
        let pool = rec["increase"]["pool"].as_str().unwrap();
        assert!(req["url"].as_str().unwrap().contains(&format!("/locations/{}/", rec["region"].as_str().unwrap())));
        assert!(req["url"].as_str().unwrap().contains(&format!("/quotas/{pool}?")), "{req:#}");
        assert_eq!(req["body"]["properties"]["limit"]["value"], rec["increase"]["new_limit"]);
    }
    assert!(r["after"]["waiting_gpu_hours"].as_f64() < r["before"]["waiting_gpu_hours"].as_f64(), "{r:#}");

    // The written copy runs with `spillway simulate` and gives the confirming run's week.
    let sim = spillway(&["simulate", written.to_str().unwrap(), "--output", "json"]);
    assert!(sim.status.success(), "{}", String::from_utf8_lossy(&sim.stderr));
    let report: Value = serde_json::from_slice(&sim.stdout).unwrap();
    let summary = &report["policies"][0];
    assert_eq!(summary["name"], "spillway");
    assert_eq!(summary["jobs_completed"], r["after"]["jobs_completed"], "{summary:#}");
    assert_eq!(summary["jobs_pending_at_end"], r["after"]["jobs_pending_at_end"]);

    let table = spillway(&["advise", "--scenario", input.to_str().unwrap(), "--max", "3"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("PENDING AT END") && text.contains("az quota update"), "{text}");
    let _ = std::fs::remove_dir_all(dir);
}
