//! Job spec parsing and validation: every problem reported at once, each naming its field.

use scheduler::Catalog;
use scheduler::model::{JobKind, JobSpec, SpecFormat, SpotPolicy};
use time::OffsetDateTime;

fn now() -> OffsetDateTime {
    time::macros::datetime!(2026-11-29 12:00 UTC)
}

fn check(toml: &str) -> Result<JobSpec, Vec<String>> {
    JobSpec::parse_checked(toml, SpecFormat::Toml, &Catalog::builtin(), now())
        .map_err(|e| e.0.iter().map(|x| x.to_string()).collect())
}

fn fields(errs: &[String]) -> Vec<&str> {
    errs.iter().map(|e| e.split(':').next().unwrap()).collect()
}

#[test]
fn a_minimal_spec_takes_the_kind_defaults() {
    let spec = check("name = \"a\"\nkind = \"training\"\ngpus = 8\n").unwrap();
    assert!(spec.is_gang());
    assert_eq!(spec.spot_policy(), SpotPolicy::Never);
    assert_eq!(spec.tenant, "default");
    let batch = check("name = \"b\"\nkind = \"batch\"\ngpus = 2\n").unwrap();
    assert!(!batch.is_gang());
    assert_eq!(batch.spot_policy(), SpotPolicy::Allowed);
    let inf = check("name = \"c\"\nkind = \"inference\"\ngpus = 1\n").unwrap();
    assert_eq!(inf.spot_policy(), SpotPolicy::Never, "inference never uses spot unless asked");
}

#[test]
fn missing_required_fields_are_named() {
    let errs = check("tenant = \"x\"\n").unwrap_err();
    assert_eq!(fields(&errs), ["name", "kind", "gpus"]);
}

#[test]
fn zero_gpus_is_rejected() {
    let errs = check("name = \"a\"\nkind = \"training\"\ngpus = 0\n").unwrap_err();
    assert!(errs.contains(&"gpus: must be at least 1".to_string()), "{errs:?}");
}

#[test]
fn negative_gpus_is_a_type_error_on_the_field() {
    let errs = check("name = \"a\"\nkind = \"training\"\ngpus = -4\n").unwrap_err();
    assert_eq!(fields(&errs), ["gpus"], "{errs:?}");
    let errs = check("name = \"a\"\nkind = \"training\"\ngpus = 99999999999\n").unwrap_err();
    assert_eq!(fields(&errs), ["gpus"], "{errs:?}");
}

#[test]
fn every_problem_is_reported_at_once() {
    let errs = check(
        r#"
name = "bad job!"
kind = "training"
gpus = 0
gpu_models = ["B200"]
regions = ["mars-central"]
deadline = "2020-01-01T00:00:00Z"
max_price_per_hour = -3.0
colour = "blue"
"#,
    )
    .unwrap_err();
    let f = fields(&errs);
    for want in ["colour", "name", "gpus", "gpu_models[0]", "regions[0]", "deadline", "max_price_per_hour"] {
        assert!(f.contains(&want), "{want} not reported in {errs:?}");
    }
}

#[test]
fn unknown_nested_fields_and_wrong_types_name_their_path() {
    let errs = JobSpec::parse_checked(
        r#"{"name": "s", "kind": "inference", "gpus": 1, "replicas": {"min": 1, "desired": 2, "max": 9}}"#,
        SpecFormat::Json,
        &Catalog::builtin(),
        now(),
    )
    .unwrap_err();
    assert_eq!(errs.0[0].field, "replicas.max");
    let errs = JobSpec::parse(r#"{"name": "s", "kind": "inference", "gpus": "two"}"#, SpecFormat::Json).unwrap_err();
    assert_eq!(errs.0[0].field, "gpus");
    let errs = JobSpec::parse(r#"{"name": "s", "kind": "quantum", "gpus": 1}"#, SpecFormat::Json).unwrap_err();
    assert_eq!(errs.0[0].field, "kind");
}

#[test]
fn deadline_must_leave_time_for_the_work() {
    let errs = check(
        "name = \"a\"\nkind = \"training\"\ngpus = 1\nduration_hours = 10.0\ndeadline = \"2026-11-29T15:00:00Z\"\n",
    )
    .unwrap_err();
    assert_eq!(fields(&errs), ["deadline"]);
}

#[test]
fn filters_that_match_nothing_are_explained() {
    let errs =
        check("name = \"a\"\nkind = \"training\"\ngpus = 8\ngpu_models = [\"T4\"]\nmin_gpus_per_vm = 8\n").unwrap_err();
    assert_eq!(fields(&errs), ["gpu_models"], "{errs:?}");
    let errs =
        check("name = \"a\"\nkind = \"training\"\ngpus = 8\nregions = [\"eastus\"]\ndeny_regions = [\"eastus\"]\n")
            .unwrap_err();
    assert_eq!(fields(&errs), ["deny_regions"], "{errs:?}");
}

#[test]
fn replicas_belong_to_inference() {
    let errs = check("name = \"a\"\nkind = \"training\"\ngpus = 1\n[replicas]\nmin = 1\ndesired = 1\n").unwrap_err();
    assert_eq!(fields(&errs), ["replicas"]);
    let errs = check("name = \"a\"\nkind = \"inference\"\ngpus = 1\n[replicas]\nmin = 3\ndesired = 1\n").unwrap_err();
    assert_eq!(fields(&errs), ["replicas.desired"]);
}

#[test]
fn toml_and_json_round_trip_to_the_same_spec() {
    let cat = Catalog::builtin();
    for file in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples")).unwrap() {
        let path = file.unwrap().path();
        let name = path.display().to_string();
        if name.contains("invalid") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let spec = JobSpec::parse_checked(&text, SpecFormat::detect(&name, &text), &cat, now())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let via_json = JobSpec::parse(&spec.to_json_pretty(), SpecFormat::Json).unwrap();
        let via_toml = JobSpec::parse(&spec.to_toml(), SpecFormat::Toml).unwrap();
        assert_eq!(spec, via_json, "{name} JSON round trip");
        assert_eq!(spec, via_toml, "{name} TOML round trip");
    }
}

#[test]
fn acceptable_sizes_follow_kind_models_and_min_gpus() {
    let cat = Catalog::builtin();
    let spec =
        check("name = \"a\"\nkind = \"training\"\ngpus = 64\ngpu_models = [\"A100\"]\nmin_gpus_per_vm = 8\n").unwrap();
    let mut names: Vec<&str> = spec.acceptable_sizes(&cat).iter().map(|s| s.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["Standard_ND96amsr_A100_v4", "Standard_ND96asr_v4"]);
    let inf = check("name = \"a\"\nkind = \"inference\"\ngpus = 1\n").unwrap();
    assert!(inf.acceptable_sizes(&cat).iter().all(|s| s.workloads.contains(&JobKind::Inference.workload())));
    assert!(inf.acceptable_sizes(&cat).iter().all(|s| !s.is_fractional()));
}
