//! The problem format is parsed strictly and every error names the path of the bad field.

use solver::Problem;

const OFFER: &str = r#"{"region": "eastus", "size": "Standard_NC24ads_A100_v4", "priority": "regular",
  "gpu_model": "A100-80GB", "gpus_per_vm": 1, "vcpus_per_vm": 24,
  "family": "standardNCADSA100v4Family", "price_per_hour": 3.673}"#;

fn with_jobs(jobs: &str) -> String {
    format!(r#"{{"offers": [{OFFER}], "jobs": [{jobs}]}}"#)
}

fn first_error(json: &str) -> String {
    let err = Problem::from_json_str(json).expect_err("must be rejected");
    err.issues[0].to_string()
}

const OK_JOB: &str = r#"{"id": "a", "gpus": 1, "duration_hours": 1}"#;

#[test]
fn defaults_fill_the_optional_fields() {
    let p = Problem::from_json_str(&with_jobs(OK_JOB)).expect("valid");
    let j = &p.jobs[0];
    assert!(j.gang, "gang defaults to true");
    assert_eq!(j.priority, 1);
    assert_eq!(j.spot, solver::SpotPolicy::Never);
    assert!(j.regions.is_none() && j.deny_regions.is_empty() && j.sizes.is_empty() && j.gpu_models.is_empty());
    assert!(p.quotas.is_empty() && p.egress.is_empty());
    assert_eq!(p.offers[0].capacity_vms, None);
    assert_eq!(p.offers[0].eviction_rate_per_hour, 0.0);
}

#[test]
fn zero_negative_and_fractional_gpus_name_the_field() {
    for bad in ["0", "-1", "2.5"] {
        let jobs = format!(r#"{OK_JOB}, {OK_JOB}, {OK_JOB}, {{"id": "d", "gpus": {bad}, "duration_hours": 1}}"#);
        let msg = first_error(&with_jobs(&jobs));
        assert!(msg.starts_with("jobs[3].gpus: expected a positive integer"), "{bad}: {msg}");
    }
}

#[test]
fn unknown_fields_are_errors_with_their_path() {
    let msg = first_error(&with_jobs(r#"{"id": "a", "gpus": 1, "duration_hours": 1, "gpu": 3}"#));
    assert!(msg.starts_with("jobs[0].gpu: unknown field `gpu`, expected one of `id`"), "{msg}");
    let msg = first_error(r#"{"offers": [], "jobs": [], "extra": 1}"#);
    assert!(msg.starts_with("extra: unknown field `extra`"), "{msg}");
}

#[test]
fn wrong_enum_and_missing_field() {
    let json = with_jobs(r#"{"id": "a", "gpus": 1, "duration_hours": 1, "spot": "sometimes"}"#);
    assert!(first_error(&json).starts_with("jobs[0].spot: unknown variant `sometimes`"));
    let msg = first_error(&with_jobs(r#"{"id": "a", "gpus": 1}"#));
    assert!(msg.starts_with("jobs[0]: missing field `duration_hours`"), "{msg}");
}

#[test]
fn semantic_checks_report_every_problem() {
    let json = format!(
        r#"{{"offers": [{OFFER}, {OFFER}],
            "quotas": [{{"region": "eastus", "pool": "cores", "vcpus": 1}}, {{"region": "eastus", "pool": "Cores", "vcpus": 2}}],
            "jobs": [{OK_JOB}, {OK_JOB}, {{"id": "b", "gpus": 1, "duration_hours": 0, "budget": -3, "regions": []}}],
            "egress": [{{"from": "a", "to": "b", "usd_per_gb": -1}}]}}"#
    );
    let err = Problem::from_json_str(&json).expect_err("invalid");
    let got: Vec<String> = err.issues.iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        vec![
            "offers[1].size: duplicate offer: eastus Standard_NC24ads_A100_v4 regular appears twice",
            "quotas[1].pool: duplicate pool: eastus Cores appears twice",
            "jobs[1].id: duplicate job id \"a\"",
            "jobs[2].duration_hours: expected a finite number > 0",
            "jobs[2].budget: expected a finite number >= 0",
            "jobs[2].regions: an empty allow-list places nothing; omit it (or null) for any region",
            "egress[0].usd_per_gb: expected a finite number >= 0",
        ]
    );
}

#[test]
fn negative_price_is_rejected() {
    let json = r#"{"offers": [{"region": "eastus", "size": "s", "priority": "spot", "gpu_model": "T4",
        "gpus_per_vm": 1, "vcpus_per_vm": 4, "family": "f", "price_per_hour": -0.1}], "jobs": []}"#;
    assert_eq!(first_error(json), "offers[0].price_per_hour: expected a finite number >= 0");
}

#[test]
fn plans_round_trip_through_json() {
    let p = Problem::from_json_str(&with_jobs(OK_JOB)).expect("valid");
    let plan = solver::solve(&p, &solver::SolveOptions::default());
    let back: solver::Plan = serde_json::from_str(&plan.to_json_pretty()).expect("plan JSON parses");
    assert_eq!(back, plan);
}
