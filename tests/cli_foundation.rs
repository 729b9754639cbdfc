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
