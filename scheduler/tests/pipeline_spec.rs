//! Pipeline specs: cycles, unknown dependencies and duplicate names refused naming their field;
//! every problem reported at once with its path.

use scheduler::catalog::Catalog;
use scheduler::model::{FieldErrors, PipelineSpec, SpecFormat};
use time::OffsetDateTime;

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_780_000_000).unwrap()
}

fn check(toml: &str) -> Result<PipelineSpec, FieldErrors> {
    PipelineSpec::parse_checked(toml, SpecFormat::Toml, &Catalog::builtin(), now())
}

fn fields(e: &FieldErrors) -> Vec<&str> {
    e.0.iter().map(|e| e.field.as_str()).collect()
}

const JOB: &str = "kind = \"batch\"\ngpus = 1\n";

fn job(name: &str, deps: &[&str]) -> String {
    let deps: Vec<String> = deps.iter().map(|d| format!("{d:?}")).collect();
    format!("[[jobs]]\nname = {name:?}\n{JOB}depends_on = [{}]\n", deps.join(", "))
}

#[test]
fn a_chain_is_accepted_in_dependency_order() {
    let text = format!("name = \"p\"\n{}{}{}", job("eval", &["train"]), job("prep", &[]), job("train", &["prep"]));
    let p = check(&text).unwrap();
    let order: Vec<&str> = p.topological_order().into_iter().map(|i| p.jobs[i].spec.name.as_str()).collect();
    assert_eq!(order, ["prep", "train", "eval"]);
    assert_eq!(p.tenant, "default");
    assert_eq!(p.jobs[0].spec.tenant, "default");
}

#[test]
fn a_cycle_is_refused_naming_the_jobs_on_it() {
    let text =
        format!("name = \"p\"\n{}{}{}{}", job("a", &[]), job("b", &["a", "d"]), job("c", &["b"]), job("d", &["c"]));
    let e = check(&text).unwrap_err();
    assert_eq!(fields(&e), ["jobs[1].depends_on"], "{e}");
    let msg = &e.0[0].problem;
    assert!(msg.contains("cycle") && msg.contains('b') && msg.contains('c') && msg.contains('d'), "{msg}");
    assert!(!msg.contains("a →") && !msg.contains("→ a"), "a is not on the cycle: {msg}");
    let own = check(&format!("name = \"p\"\n{}", job("solo", &["solo"]))).unwrap_err();
    assert!(own.0[0].problem.contains("solo → solo"), "{own}");
}

#[test]
fn unknown_dependencies_and_duplicate_names_name_their_field() {
    let text = format!("name = \"p\"\n{}{}{}", job("a", &[]), job("a", &[]), job("b", &["a", "nope"]));
    let e = check(&text).unwrap_err();
    assert_eq!(fields(&e), ["jobs[1].name", "jobs[2].depends_on[1]"], "{e}");
    assert!(e.0[1].problem.contains("\"nope\""), "{e}");
}

/// A dependant finds its dependencies' regions and outputs as `SPILLWAY_DEP_<NAME>_…`: two names
/// that make the same variables would overwrite each other there.
#[test]
fn names_that_are_the_same_in_the_environment_are_refused() {
    let text = format!("name = \"p\"\n{}{}{}", job("pre-process", &[]), job("pre_process", &[]), job("Train", &[]));
    let e = check(&text).unwrap_err();
    assert_eq!(fields(&e), ["jobs[1].name"], "{e}");
    assert!(e.0[0].problem.contains("\"pre-process\"") && e.0[0].problem.contains("SPILLWAY_DEP_PRE_PROCESS"), "{e}");
    let text = format!("name = \"p\"\n{}{}", job("train", &[]), job("TRAIN", &["train"]));
    assert_eq!(fields(&check(&text).unwrap_err()), ["jobs[1].name"]);
}

#[test]
fn every_problem_is_reported_with_its_path() {
    let text = "name = \"p q\"\nbudget = -3\n[[jobs]]\nname = \"a\"\nkind = \"batch\"\ngpus = 0\ncolour = 1\n\
                output_gb = -1\non_dependency_failure = \"maybe\"\ntenant = \"other\"\n";
    let e = check(text).unwrap_err();
    let mut f = fields(&e);
    f.sort();
    assert_eq!(
        f,
        [
            "budget",
            "jobs[0].colour",
            "jobs[0].gpus",
            "jobs[0].on_dependency_failure",
            "jobs[0].output_gb",
            "jobs[0].tenant",
            "name"
        ],
        "{e}"
    );
    assert!(check("name = \"p\"\njobs = []\n").unwrap_err().0[0].field == "jobs");
    assert!(check("name = \"p\"\n").unwrap_err().0[0].field == "jobs");
}

/// Issue #23: a budget for the whole pipeline, read as strictly as a job's.
#[test]
fn a_pipeline_budget_is_checked_like_a_jobs_and_errors_name_it() {
    let jobs = format!("{}{}", job("prep", &[]), job("train", &["prep"]));
    let p = check(&format!("name = \"p\"\nbudget = 250.5\n{jobs}")).unwrap();
    assert_eq!(p.budget, Some(250.5));
    let links = p.links("p-1", &Default::default());
    assert!(links.iter().all(|l| l.budget_usd == Some(250.5)), "every job carries it: {links:?}");
    for (bad, says) in [("0", "more than 0"), ("-5", "more than 0"), ("2e9", "at most"), ("\"lots\"", "number of USD")]
    {
        let e = check(&format!("name = \"p\"\nbudget = {bad}\n{jobs}")).unwrap_err();
        assert_eq!(fields(&e), ["budget"], "{bad}: {e}");
        assert!(e.0[0].problem.contains(says), "{bad}: {e}");
    }
}

#[test]
fn a_deadline_is_split_along_the_critical_path_and_refused_when_shorter() {
    // prep (2 h) → train (10 h) → eval (1 h); prep → score (3 h): the critical path is 13 h.
    let stage = |name: &str, hours: f64, deps: &str| {
        format!(
            "[[jobs]]\nname = {name:?}\nkind = \"batch\"\ngpus = 1\nduration_hours = {hours}\ndepends_on = [{deps}]\n"
        )
    };
    let jobs = format!(
        "{}{}{}{}",
        stage("prep", 2.0, ""),
        stage("train", 10.0, "\"prep\""),
        stage("eval", 1.0, "\"train\""),
        stage("score", 3.0, "\"prep\"")
    );
    // now() is 2026-05-28T20:26:40Z; 20 h later:
    let p = check(&format!("name = \"p\"\ndeadline = \"2026-05-29T16:26:40Z\"\n{jobs}")).unwrap();
    let (hours, path) = p.critical_path();
    assert_eq!(hours, 13.0);
    assert_eq!(path.iter().map(|&i| p.jobs[i].spec.name.as_str()).collect::<Vec<_>>(), ["prep", "train", "eval"]);
    let deadline = p.deadline.unwrap();
    let h = |n: i64| deadline - time::Duration::hours(n);
    // prep may start at once: its share of the 20 h, 2 h of its 13-hour chain; the others wait,
    // holding their latest finishes (eval and score at the deadline, train 1 h before) until the
    // control loop gives them their share of what is left when prep ends.
    let now = deadline - time::Duration::hours(20);
    let prep = now + time::Duration::seconds_f64(20.0 * 3600.0 * 2.0 / 13.0);
    let ds = p.job_deadlines(now);
    assert!((ds[0].unwrap() - prep).abs() < time::Duration::milliseconds(1), "{ds:?}");
    assert_eq!(ds[1..], [Some(h(1)), Some(deadline), Some(deadline)]);

    let e = check(&format!("name = \"p\"\ndeadline = \"2026-05-29T08:26:40Z\"\n{jobs}")).unwrap_err();
    assert_eq!(fields(&e), ["deadline"], "{e}");
    assert!(e.0[0].problem.contains("critical path prep → train → eval (13 h"), "{e}");
    let no_duration =
        "name = \"p\"\ndeadline = \"2026-05-29T16:26:40Z\"\n[[jobs]]\nname = \"a\"\nkind = \"batch\"\ngpus = 1\n";
    assert_eq!(fields(&check(no_duration).unwrap_err()), ["jobs[0].duration_hours"]);
}

#[test]
fn the_example_pipeline_is_valid_and_round_trips_through_json() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/pipeline-prep-train-eval.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let p = PipelineSpec::parse_checked(&text, SpecFormat::Toml, &Catalog::builtin(), now()).unwrap();
    assert_eq!(p.jobs.len(), 5);
    let json = serde_json::to_string(&p).unwrap();
    let back = PipelineSpec::parse_checked(&json, SpecFormat::Json, &Catalog::builtin(), now()).unwrap();
    assert_eq!(p, back);
}
