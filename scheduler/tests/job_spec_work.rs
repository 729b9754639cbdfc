//! The fields that say what a job runs (`run`, `setup`, `envs`, `workdir`, `image`,
//! `max_restarts`, `idle_minutes`, `on_idle`): parsed strictly, every problem named by its field.

use scheduler::Catalog;
use scheduler::model::{JobSpec, OnIdle, SpecFormat};
use time::OffsetDateTime;

fn now() -> OffsetDateTime {
    time::macros::datetime!(2026-11-29 12:00 UTC)
}

const BASE: &str = "name = \"w\"\nkind = \"training\"\ngpus = 1\n";

fn check(extra: &str) -> Result<JobSpec, Vec<String>> {
    JobSpec::parse_checked(&format!("{BASE}{extra}"), SpecFormat::Toml, &Catalog::builtin(), now())
        .map_err(|e| e.0.iter().map(|x| x.to_string()).collect())
}

fn fields(errs: &[String]) -> Vec<String> {
    errs.iter().map(|e| e.split(": ").next().unwrap().to_string()).collect()
}

#[test]
fn a_spec_with_work_parses_in_toml_and_json_alike() {
    let spec = check(
        r#"
run = "python train.py --rank $SPILLWAY_NODE_RANK"
setup = "pip install -r requirements.txt"
workdir = "src"
image = "ghcr.io/org/train:1.4@sha256:abc"
max_restarts = 2
idle_minutes = 30
on_idle = "stop"
[envs]
NCCL_DEBUG = "INFO"
_private = "x"
"#,
    )
    .unwrap();
    assert!(spec.runs_work());
    assert_eq!(spec.max_restarts(), 2);
    assert_eq!(spec.on_idle, Some(OnIdle::Stop));
    assert_eq!(spec.envs["NCCL_DEBUG"], "INFO");
    let json = spec.to_json_pretty();
    let again = JobSpec::parse_checked(&json, SpecFormat::Json, &Catalog::builtin(), now()).unwrap();
    assert_eq!(again, spec, "JSON round trip");
    let toml = spec.to_toml();
    let again = JobSpec::parse_checked(&toml, SpecFormat::Toml, &Catalog::builtin(), now()).unwrap();
    assert_eq!(again, spec, "TOML round trip");
}

#[test]
fn capacity_only_specs_stay_valid_and_say_so() {
    let spec = check("").unwrap();
    assert!(!spec.runs_work());
    assert_eq!(spec.max_restarts(), 0);
    assert!(!spec.to_json_pretty().contains("envs"), "empty envs are not printed");
}

#[test]
fn bad_work_fields_are_each_named() {
    let errs = check(
        r#"
run = "   "
image = "ghcr.io/org/my image:1"
max_restarts = 101
idle_minutes = 0
[envs]
"1BAD" = "x"
"HAS-DASH" = "y"
SPILLWAY_NODE_RANK = "7"
spillway_job_id = "j"
"#,
    )
    .unwrap_err();
    let f = fields(&errs);
    for want in
        ["run", "image", "max_restarts", "idle_minutes", "envs.1BAD", "envs.HAS-DASH", "envs.SPILLWAY_NODE_RANK"]
    {
        assert!(f.iter().any(|x| x == want), "{want} missing from {errs:#?}");
    }
    assert!(f.iter().any(|x| x == "envs.spillway_job_id"), "the reserved prefix is case-blind: {errs:#?}");
    assert!(errs.iter().any(|e| e.starts_with("image: must not contain spaces")), "{errs:#?}");
}

#[test]
fn work_fields_without_run_are_refused() {
    let errs = check("setup = \"make\"\nworkdir = \"x\"\nimage = \"alpine\"\nmax_restarts = 1\n[envs]\nA = \"1\"\n")
        .unwrap_err();
    assert_eq!(fields(&errs), ["setup", "envs", "workdir", "image", "max_restarts"], "{errs:#?}");
    assert!(errs[0].contains("needs run"), "{errs:#?}");
}

#[test]
fn on_idle_needs_idle_minutes_and_scripts_are_bounded() {
    let errs = check("run = \"true\"\non_idle = \"stop\"\n").unwrap_err();
    assert_eq!(fields(&errs), ["on_idle"]);
    let long = "x".repeat(40_000);
    let errs = check(&format!("run = \"{long}\"\n")).unwrap_err();
    assert_eq!(fields(&errs), ["run"]);
    let errs = check("run = \"true\"\non_idle = \"sleep\"\n").unwrap_err();
    assert_eq!(fields(&errs), ["on_idle"], "{errs:#?}");
    let errs = check("run = \"true\"\n[envs]\nA = 3\n").unwrap_err();
    assert_eq!(fields(&errs), ["envs.A"], "a non-string value names its key: {errs:#?}");
}

#[test]
fn outputs_are_named_strings_for_the_dependants() {
    let spec = check("[outputs]\nmodel = \"az://models/run-7\"\nmetrics_v2 = \"s3://m.json\"\n").unwrap();
    assert_eq!(spec.outputs["model"], "az://models/run-7");
    let json = JobSpec::parse(&spec.to_json_pretty(), SpecFormat::Json).unwrap();
    assert_eq!(json.outputs, spec.outputs, "round-trips through JSON");
    let errs = check("[outputs]\n1bad = \"x\"\nhas-dash = \"y\"\n").unwrap_err();
    assert_eq!(fields(&errs), ["outputs.1bad", "outputs.has-dash"], "{errs:#?}");
    let errs = check("[outputs]\nn = 3\n").unwrap_err();
    assert_eq!(fields(&errs), ["outputs.n"], "a non-string value names its key: {errs:#?}");
    let errs = check("outputs = \"model\"\n").unwrap_err();
    assert_eq!(fields(&errs), ["outputs"], "{errs:#?}");
    let long = "x".repeat(5000);
    let errs = check(&format!("[outputs]\nbig = \"{long}\"\n")).unwrap_err();
    assert_eq!(fields(&errs), ["outputs.big"], "{errs:#?}");
}
