//! The first commands, run as a user runs them: the built binary, its output and exit codes.

use std::process::Command;

fn spillway(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("spillway runs")
}

#[test]
fn catalog_json_lists_nc24ads_a100_at_list_price() {
    let out = spillway(&["catalog", "--gpu", "A100-80GB", "--region", "eastus", "--output", "json"]);
    assert!(out.status.success());
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let regular = rows
        .iter()
        .find(|r| r["size"] == "Standard_NC24ads_A100_v4" && r["priority"] == "regular")
        .expect("NC24ads A100 v4 regular listed");
    assert_eq!(regular["price_per_hour"], 3.673);
    assert_eq!(regular["gpus"], 1);
    assert_eq!(regular["vcpus"], 24);
    assert_eq!(regular["family"], "standardNCADSA100v4Family");
    assert!(rows.iter().all(|r| r["region"] == "eastus" && r["gpu_model"] == "A100-80GB"));
}

#[test]
fn catalog_rejects_unknown_filters() {
    let out = spillway(&["catalog", "--gpu", "B300"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--gpu"));
}

#[test]
fn validate_accepts_every_valid_example() {
    for f in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/examples")).unwrap() {
        let path = f.unwrap().path().display().to_string();
        if path.contains("invalid") {
            continue;
        }
        let out = spillway(&["validate", &path, "--output", "json"]);
        assert!(out.status.success(), "{path}: {}", String::from_utf8_lossy(&out.stderr));
        let spec: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(spec["name"].is_string());
    }
}

#[test]
fn validate_rejects_the_invalid_example_naming_each_field() {
    let out = spillway(&["validate", "examples/invalid-spec.toml"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for field in ["gpus:", "gpu_models[0]:", "regions[0]:", "deadline:", "max_price_per_hour:", "colour:"] {
        assert!(err.contains(field), "{field} not named in:\n{err}");
    }
    let out = spillway(&["validate", "examples/invalid-spec.toml", "--output", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(body["valid"], false);
    assert!(body["errors"].as_array().unwrap().len() >= 6);
}

#[test]
fn validate_of_a_missing_file_fails() {
    let out = spillway(&["validate", "no/such/file.toml"]);
    assert_eq!(out.status.code(), Some(1));
}

/// Issue #24: `validate` stopped at the first type error and spoke Rust (`expected u32`).
#[test]
fn validate_reports_every_problem_in_the_users_terms() {
    let dir = std::env::temp_dir().join(format!("spillway-validate-three-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("three.toml");
    std::fs::write(&file, "name = \"three\"\ngpus = -4\nspot = \"sometimes\"\n").unwrap();
    let out = spillway(&["validate", file.to_str().unwrap(), "--output", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let errors = body["errors"].as_array().unwrap();
    let fields: Vec<&str> = errors.iter().map(|e| e["field"].as_str().unwrap()).collect();
    assert_eq!(fields, ["kind", "gpus", "spot"], "{body}");
    assert_eq!(errors[1]["problem"], "must be ≥ 1 (got -4)");
    let _ = std::fs::remove_dir_all(dir);
}

/// Issue #24: a JSON syntax error in a plan file printed `?: trailing comma`; `expected_cost`
/// printed `-0`.
#[test]
fn plan_names_where_a_file_breaks_and_never_prints_negative_zero() {
    let dir = std::env::temp_dir().join(format!("spillway-plan-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"offers\": [],\n \"jobs\": [],\n}\n").unwrap();
    let out = spillway(&["plan", "--problem", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 3, column 1: trailing comma"), "{err}");
    assert!(!err.contains("?:"), "{err}");
    // Nothing can be placed: the cost of no placements (an empty float sum, -0.0 in Rust) is zero.
    let none = dir.join("none.json");
    std::fs::write(
        &none,
        r#"{"offers": [{"region": "eastus", "size": "S", "priority": "regular", "gpu_model": "A100-80GB",
            "gpus_per_vm": 1, "vcpus_per_vm": 24, "family": "f", "price_per_hour": 1.0}],
            "jobs": [{"id": "big", "gpus": 64, "gpu_models": ["H100"], "duration_hours": 1.0}]}"#,
    )
    .unwrap();
    for output in ["table", "json"] {
        let out = spillway(&["plan", "--problem", none.to_str().unwrap(), "--output", output]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("-0"), "{output}: {text}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `emulate-arm` without `--vm-dir` keeps its agents' sandboxes in a directory named after its
/// process id, which nothing can use once it stops: Ctrl-C removes it (before, every run left one
/// in the temporary directory).
#[test]
fn emulate_arm_removes_its_own_vm_directory_on_ctrl_c() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["emulate-arm", "--port", "0", "--token", "t", "--scenario", "simulator/scenarios/cloud-basic.toml"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn spillway emulate-arm");
    let dir = std::env::temp_dir().join(format!("spillway-emulator-{}", child.id()));
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let listening = lines.by_ref().map_while(Result::ok).find(|l| l.starts_with("ARM emulator listening on "));
    assert!(listening.is_some(), "emulate-arm never said it was listening");
    assert!(dir.is_dir(), "{} not made at start", dir.display());
    let signalled = Command::new("sh").args(["-c", &format!("kill -INT {}", child.id())]).status().unwrap();
    assert!(signalled.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "emulate-arm after Ctrl-C: {status}");
    assert!(!dir.exists(), "{} left behind", dir.display());
}
