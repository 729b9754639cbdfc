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
    assert!(errs.contains(&"gpus: must be ≥ 1 (got 0)".to_string()), "{errs:?}");
}

#[test]
fn out_of_range_gpus_are_reported_in_the_fields_own_bounds() {
    let errs = check("name = \"a\"\nkind = \"training\"\ngpus = -4\n").unwrap_err();
    assert_eq!(errs, ["gpus: must be ≥ 1 (got -4)"]);
    let errs = check("name = \"a\"\nkind = \"training\"\ngpus = 99999999999\n").unwrap_err();
    assert_eq!(errs, ["gpus: must be ≤ 4096, the most one job may ask for (got 99999999999)"]);
    let errs = check("name = \"a\"\nkind = \"training\"\ngpus = 1.5\n").unwrap_err();
    assert_eq!(errs, ["gpus: must be a whole number (got 1.5)"]);
    assert!(errs.iter().all(|e| !e.contains("u32") && !e.contains("4294967295")), "{errs:?}");
}

/// Issue #24: a spec with no `kind`, `gpus = -4` and `spot = "sometimes"` used to report only
/// `kind: missing`; every problem is reported at once, each in the user's terms.
#[test]
fn type_errors_missing_fields_and_range_errors_are_all_reported_together() {
    let errs = check("name = \"a\"\ngpus = -4\nspot = \"sometimes\"\n").unwrap_err();
    assert_eq!(fields(&errs), ["kind", "gpus", "spot"], "{errs:?}");
    assert!(errs[0].contains("one of training, batch, inference"), "{errs:?}");
    assert_eq!(errs[1], "gpus: must be ≥ 1 (got -4)");
    assert_eq!(errs[2], "spot: must be one of never, allowed, preferred, only (got \"sometimes\")");
    // Type errors on several fields, plus a semantic problem on a field that could be read.
    let errs = JobSpec::parse_checked(
        r#"{"name": "x y", "kind": "batch", "gpus": "eight", "gang": "yes", "regions": ["eastus", 5],
            "replicas": {"min": "one"}, "priority": 0, "deadline": "tomorrow"}"#,
        SpecFormat::Json,
        &Catalog::builtin(),
        now(),
    )
    .unwrap_err();
    let got: Vec<&str> = errs.0.iter().map(|e| e.field.as_str()).collect();
    for want in ["name", "gpus", "gang", "regions[1]", "replicas.min", "replicas.desired", "priority", "deadline"] {
        assert!(got.contains(&want), "{want} missing from {got:?}");
    }
}

/// Issue #24: values no one means are refused with the field's documented bound.
#[test]
fn absurd_values_are_refused_naming_the_field_and_the_bound() {
    let base = "name = \"a\"\nkind = \"batch\"\ngpus = 1\n";
    let cases = [
        ("duration_hours = 5e-324", "duration_hours", "at least one minute"),
        ("duration_hours = 100000.0", "duration_hours", "at most a year"),
        ("data_region = \"eastus\"\ndata_gb = 1e308", "data_gb", "at most 1000000 GB"),
        ("max_price_per_hour = 1e308", "max_price_per_hour", "at most 1000000 USD per hour"),
        ("budget = 1e308", "budget", "at most 1000000000 USD"),
        ("max_price_per_hour = 0.0", "max_price_per_hour", "more than 0"),
        ("duration_hours = nan", "duration_hours", "must be a number"),
        ("deadline = \"9999-12-31T00:00:00Z\"", "deadline", "within five years"),
        ("deadline = 9999-12-31T00:00:00Z", "deadline", "within five years"),
        ("checkpoint_interval_minutes = 9999999", "checkpoint_interval_minutes", "≤ 527040"),
        ("priority = 5000", "priority", "≤ 1000"),
    ];
    for (line, field, text) in cases {
        let errs = check(&format!("{base}{line}\n")).unwrap_err();
        assert_eq!(fields(&errs), [field], "{line}: {errs:?}");
        assert!(errs[0].contains(text), "{line}: {errs:?}");
    }
    // A TOML date is a deadline like an RFC 3339 string.
    let ok = check(&format!("{base}deadline = 2026-12-24T00:00:00Z\n")).unwrap();
    assert_eq!(ok.deadline, Some(time::macros::datetime!(2026-12-24 00:00 UTC)));
}

/// Issue #24: `regions` with 5,000 copies of one region was accepted.
#[test]
fn lists_must_be_short_and_name_each_entry_once() {
    let many = vec!["\"eastus\""; 5000].join(", ");
    let errs = check(&format!("name = \"a\"\nkind = \"batch\"\ngpus = 1\nregions = [{many}]\n")).unwrap_err();
    assert_eq!(errs, ["regions: must list at most 64 entries, each once (got 5000)"]);
    let errs = check(
        "name = \"a\"\nkind = \"batch\"\ngpus = 1\nregions = [\"eastus\", \"westus3\", \"eastus\", \"eastus\"]\n",
    )
    .unwrap_err();
    assert_eq!(errs, ["regions[2]: \"eastus\" is listed 3 times; list each once"]);
    let errs = check("name = \"a\"\nkind = \"batch\"\ngpus = 1\ngpu_models = [\"T4\", \"T4\"]\n").unwrap_err();
    assert_eq!(fields(&errs), ["gpu_models[1]"]);
}

/// Issue #24: `{"gpus": 1, "gpus": 2}` silently kept 2.
#[test]
fn duplicate_json_keys_are_refused_naming_the_key() {
    let errs = JobSpec::parse(r#"{"name": "a", "kind": "batch", "gpus": 1, "gpus": 2}"#, SpecFormat::Json).unwrap_err();
    assert_eq!(errs.0.len(), 1, "{errs}");
    assert_eq!(errs.0[0].field, "gpus");
    assert!(errs.0[0].problem.contains("given twice"), "{errs}");
    let errs = JobSpec::parse("name = \"a\"\nname = \"b\"\n", SpecFormat::Toml).unwrap_err();
    assert!(errs.0[0].problem.contains("line 2"), "{errs}");
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
        // Pipelines have their own round trip (tests/pipeline_spec.rs).
        if name.contains("invalid") || name.contains("pipeline") {
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

/// #22: a regular base only a splittable job keeps, within what it wants, in whole replicas for a
/// service, and not with a spot policy that runs nothing on regular VMs.
#[test]
fn a_regular_base_is_checked_against_the_jobs_kind_size_and_spot_policy() {
    let spec = check("name = \"b\"\nkind = \"batch\"\ngpus = 8\nregular_gpus = 2\n").unwrap();
    assert_eq!(spec.regular_gpus, Some(2));
    let service =
        "name = \"s\"\nkind = \"inference\"\ngpus = 2\nspot = \"allowed\"\n[replicas]\nmin = 2\ndesired = 4\n";
    assert_eq!(check(&format!("regular_gpus = 4\n{service}")).unwrap().regular_gpus, Some(4), "replicas.min × gpus");
    let errs = check("name = \"a\"\nkind = \"training\"\ngpus = 8\nregular_gpus = 2\n").unwrap_err();
    assert_eq!(fields(&errs), ["regular_gpus"], "a gang runs whole: {errs:?}");
    let errs = check("name = \"b\"\nkind = \"batch\"\ngang = true\ngpus = 8\nregular_gpus = 2\n").unwrap_err();
    assert_eq!(fields(&errs), ["regular_gpus"], "{errs:?}");
    let errs = check("name = \"b\"\nkind = \"batch\"\ngpus = 8\nregular_gpus = 9\n").unwrap_err();
    assert_eq!(errs, ["regular_gpus: must be at most gpus (8; got 9)"]);
    let errs = check(&format!("regular_gpus = 3\n{service}")).unwrap_err();
    assert_eq!(errs, ["regular_gpus: must be whole replicas, a multiple of gpus (2; got 3)"]);
    let errs = check(&format!("regular_gpus = 10\n{service}")).unwrap_err();
    assert_eq!(errs, ["regular_gpus: must be at most replicas.desired × gpus (8; got 10)"]);
    let errs = check("name = \"b\"\nkind = \"batch\"\ngpus = 8\nspot = \"only\"\nregular_gpus = 2\n").unwrap_err();
    assert_eq!(fields(&errs), ["regular_gpus"], "{errs:?}");
    let errs = check("name = \"b\"\nkind = \"batch\"\ngpus = 8\nregular_gpus = \"two\"\n").unwrap_err();
    assert_eq!(errs, ["regular_gpus: must be a whole number (got \"two\")"]);
    check("name = \"b\"\nkind = \"batch\"\ngpus = 8\nspot = \"never\"\nregular_gpus = 8\n")
        .expect("all regular anyway");
}
