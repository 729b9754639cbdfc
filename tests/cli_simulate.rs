//! `spillway simulate`, run as a user runs it: the built binary, its output and exit codes.

use std::path::PathBuf;
use std::process::Command;

fn spillway(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("spillway runs")
}

fn temp_file(name: &str, content: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spillway-cli-simulate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path
}

#[test]
fn simulate_rejects_an_unknown_kind_with_exit_2() {
    let f = temp_file("unknown.toml", "[experiment]\nkind = \"crystal-ball\"\n");
    let out = spillway(&["simulate", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(r#"experiment.kind: unknown kind "crystal-ball"; supported: "#), "{err}");
    assert!(err.contains("spot-deadline") && err.contains("what-if"), "{err}");
}

#[test]
fn simulate_reports_every_bad_field_with_exit_1() {
    let f = temp_file(
        "bad.toml",
        r#"
[experiment]
kind = "spot-deadline"
tick_seconds = 600
start_offsets_hours = [0.0]
colour = "blue"

[job]
work_hours = 10.0
deadline_hours = 12.0
"#,
    );
    let out = spillway(&["simulate", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("experiment.colour"));
}

#[test]
fn simulate_runs_the_bundled_single_region_experiment_as_json() {
    if !PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/spot").is_dir() {
        eprintln!("skipping: ../shared/data/spot is absent (the real spot traces)");
        return;
    }
    let out = spillway(&["simulate", "scenarios/spot-deadline-single.toml", "--output", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["kind"], "spot-deadline");
    assert!(report["runs"].as_u64().unwrap() >= 50, "one run every 6 hours through a 27-day trace");
    let names: Vec<&str> = report["policies"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["regular-only", "greedy", "uniform-progress", "spillway"]);
    for p in report["policies"].as_array().unwrap() {
        assert_eq!(p["deadline_met_fraction"], 1.0, "{p}");
        for key in ["mean_cost", "median_cost", "p90_cost", "mean_migrations"] {
            assert!(p[key].is_number(), "{key} in {p}");
        }
    }
    // A table for people by default.
    let out = spillway(&["simulate", "scenarios/spot-deadline-3zones.toml"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("uniform-progress"));
}
