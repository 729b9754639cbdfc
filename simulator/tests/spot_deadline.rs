//! The deadline-aware spot engine, its policies and the experiment file, on hand-made traces and on
//! the real traces of `../shared/data/spot` (skipped with a message when absent).

use std::path::{Path, PathBuf};

use simulator::spot_deadline::policies::{self, NAMES};
use simulator::spot_deadline::{
    Choice, DeadlinePolicy, Egress, Experiment, Job, Region, RunResult, SpotPrice, TickView, run_experiment, run_once,
};

const REGULAR: f64 = 3.06;
const SPOT: f64 = 0.3978;

fn region(name: &str, spot: &[bool]) -> Region {
    Region {
        name: name.to_string(),
        regular_price_per_hour: REGULAR,
        regular_available: true,
        spot_price: SpotPrice::Fixed(SPOT),
        spot_available: spot.to_vec(),
    }
}

/// One-hour ticks make the arithmetic readable.
fn experiment(work: f64, deadline: f64, overhead: f64, regions: Vec<Region>) -> Experiment {
    Experiment {
        tick_seconds: 3600.0,
        policies: NAMES.iter().map(|s| s.to_string()).collect(),
        start_offsets_hours: vec![0.0],
        job: Job { work_hours: work, deadline_hours: deadline, restart_overhead_hours: overhead, checkpoint_gb: 0.0 },
        regions,
        egress: Vec::new(),
    }
}

fn run(ex: &Experiment, name: &str, offset: f64) -> RunResult {
    let mut p = policies::make(name).unwrap();
    run_once(ex, p.as_mut(), offset).unwrap()
}

/// Replays a fixed list of choices, then idles: drives the engine directly.
struct Script(Vec<Choice>, usize);

impl DeadlinePolicy for Script {
    fn name(&self) -> &'static str {
        "script"
    }
    fn choose(&mut self, _: &TickView<'_>) -> Choice {
        let c = self.0.get(self.1).copied().unwrap_or(Choice::Idle);
        self.1 += 1;
        c
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

// ---- the engine's accounting -------------------------------------------------------------------

#[test]
fn whole_ticks_are_billed_and_overhead_makes_no_progress() {
    // 2.5 h of work, 0.5 h overhead, 1 h ticks: regular from the start finishes at 3.0 h
    // (0.5 overhead + 2.5 work) inside the third tick, which is billed whole.
    let ex = experiment(2.5, 10.0, 0.5, vec![region("a", &[false; 20])]);
    let r = run_once(&ex, &mut Script(vec![Choice::Regular(0); 10], 0), 0.0).unwrap();
    assert_eq!(r.regular_ticks, 3);
    assert!(close(r.cost, 3.0 * REGULAR));
    assert_eq!(r.finish_hours, Some(3.0));
    assert!(r.deadline_met);
    assert_eq!(r.migrations, 0);
}

#[test]
fn a_change_of_priority_restarts_with_a_billed_overhead() {
    // Spot, then regular: the switch costs a second overhead of 0.5 h.
    let ex = experiment(2.0, 10.0, 0.5, vec![region("a", &[true; 20])]);
    let r = run_once(&ex, &mut Script(vec![Choice::Spot(0), Choice::Regular(0), Choice::Regular(0)], 0), 0.0).unwrap();
    // tick 0: spot, 0.5 progress; tick 1: regular, 0.5 progress; tick 2: regular, 1.0 → done at 3.0 h.
    assert_eq!((r.spot_ticks, r.regular_ticks), (1, 2));
    assert_eq!(r.finish_hours, Some(3.0));
    assert_eq!(r.migrations, 1);
    assert!(close(r.cost, SPOT + 2.0 * REGULAR));
}

#[test]
fn spot_is_lost_at_the_start_of_an_unavailable_tick_and_progress_is_kept() {
    let avail = [true, true, false, true, true, true, true, true];
    let ex = experiment(3.0, 10.0, 0.0, vec![region("a", &avail)]);
    let mut script = Script(vec![Choice::Spot(0), Choice::Spot(0), Choice::Idle, Choice::Spot(0), Choice::Spot(0)], 0);
    let r = run_once(&ex, &mut script, 0.0).unwrap();
    assert_eq!(r.preemptions, 1, "the VM running into tick 2 is lost at its start");
    assert_eq!(r.spot_ticks, 3, "tick 2 is not billed: the VM was gone");
    assert_eq!(r.finish_hours, Some(4.0), "the two hours done before the loss were kept");
    assert_eq!(r.migrations, 1);
}

#[test]
fn choosing_spot_where_it_is_unavailable_is_an_engine_error() {
    let ex = experiment(3.0, 10.0, 0.0, vec![region("a", &[false, true, true])]);
    let err = run_once(&ex, &mut Script(vec![Choice::Spot(0)], 0), 0.0).unwrap_err();
    assert!(err.to_string().contains("spot is not available in a"), "{err}");
    let mut no_regular = experiment(3.0, 10.0, 0.0, vec![region("a", &[true; 5])]);
    no_regular.regions[0].regular_available = false;
    let err = run_once(&no_regular, &mut Script(vec![Choice::Regular(0)], 0), 0.0).unwrap_err();
    assert!(err.to_string().contains("no regular capacity"), "{err}");
}

#[test]
fn egress_is_charged_on_every_change_of_region_only() {
    let mut ex = experiment(4.0, 10.0, 0.0, vec![region("a", &[true; 10]), region("b", &[true; 10])]);
    ex.job.checkpoint_gb = 50.0;
    // Only a → b is listed: b → a uses the same rate.
    ex.egress.push(Egress { from: 0, to: 1, usd_per_gb: 0.02 });
    let script = vec![Choice::Spot(0), Choice::Spot(1), Choice::Regular(1), Choice::Spot(0)];
    let r = run_once(&ex, &mut Script(script, 0), 0.0).unwrap();
    assert_eq!(r.region_changes, 2);
    assert!(close(r.egress_cost, 2.0 * 50.0 * 0.02), "{}", r.egress_cost);
    assert!(close(r.cost, r.compute_cost + r.egress_cost));
    assert_eq!(r.migrations, 3);
}

#[test]
fn a_run_starts_at_the_rounded_offset_tick() {
    // 10-minute ticks; offset 0.3 h = 1.8 ticks → starts at tick 2, the first available one.
    let mut avail = vec![false, false, true];
    avail.extend([true; 30]);
    let mut ex = experiment(1.0, 3.0, 0.0, vec![region("a", &avail)]);
    ex.tick_seconds = 600.0;
    let r = run_once(&ex, &mut Script(vec![Choice::Spot(0); 6], 0), 0.3).unwrap();
    assert_eq!(r.spot_ticks, 6);
    assert_eq!(r.finish_hours, Some(1.0));
}

// ---- each rule on hand-made traces -------------------------------------------------------------

#[test]
fn always_available_spot_runs_every_spot_policy_on_spot_only() {
    let ex = experiment(10.0, 14.0, 0.1, vec![region("a", &[true; 40])]);
    for name in ["greedy", "uniform-progress", "spillway"] {
        let r = run(&ex, name, 0.0);
        assert_eq!(r.regular_ticks, 0, "{name}");
        assert_eq!(r.spot_ticks, 11, "{name}: 10 h of work plus 0.1 h overhead span 11 ticks");
        assert!(r.deadline_met, "{name}");
    }
    let r = run(&ex, "regular-only", 0.0);
    assert_eq!((r.spot_ticks, r.regular_ticks), (0, 11));
}

#[test]
fn never_available_spot_waits_exactly_as_long_as_the_net_allows() {
    // 10 h of work + 0.5 h overhead need 11 ticks; the deadline is 14 h.
    let ex = experiment(10.0, 14.0, 0.5, vec![region("a", &[false; 40])]);
    // Greedy idles while slack ≥ 1, i.e. ticks 0..3 (slack 3, 2, 1), and starts regular at tick 3.
    let g = run(&ex, "greedy", 0.0);
    assert_eq!(g.finish_hours, Some(13.5));
    assert_eq!(g.regular_ticks, 11);
    assert!(g.deadline_met);
    // Uniform progress starts regular as soon as it falls behind the line (tick 1), leaves it once
    // two overheads ahead (tick 9: 7.5 h done, line at 6.4 h), and restarts when behind again,
    // paying a second start: the published rule, and still within the deadline.
    let u = run(&ex, "uniform-progress", 0.0);
    assert!(u.deadline_met, "{u:?}");
    assert!(u.migrations >= 1, "{u:?}");
    // The others pay for exactly 11 regular ticks: no spot ever, one start.
    for name in ["regular-only", "greedy", "spillway"] {
        let r = run(&ex, name, 0.0);
        assert_eq!((r.spot_ticks, r.regular_ticks, r.migrations), (0, 11, 0), "{name}");
        assert!(r.deadline_met, "{name}");
    }
}

#[test]
fn greedy_latches_on_regular_and_uniform_progress_leaves_it_once_ahead() {
    // Outage for the first 6 hours, then spot forever. 10 h of work, deadline 14 h, no overhead.
    let mut avail = vec![false; 6];
    avail.extend([true; 40]);
    let ex = experiment(10.0, 14.0, 0.0, vec![region("a", &avail)]);
    // Greedy idles 4 ticks (slack 4 → 1), then regular at tick 4, and stays there to the end.
    let g = run(&ex, "greedy", 0.0);
    assert_eq!((g.spot_ticks, g.regular_ticks), (0, 10));
    // Uniform progress: regular from tick 1 (behind the line) and back to spot once ahead: the
    // line is at 10/14 h per hour, so after 6 regular ticks it is ahead and spot is up.
    let u = run(&ex, "uniform-progress", 0.0);
    assert!(u.spot_ticks > 0 && u.regular_ticks < 10, "{u:?}");
    assert!(u.cost < g.cost);
    // Spillway keeps a reserve of slack, so it too returns to spot.
    let s = run(&ex, "spillway", 0.0);
    assert!(s.spot_ticks > 0 && s.cost <= u.cost, "{s:?} vs {u:?}");
    for r in [g, u, s] {
        assert!(r.deadline_met);
    }
}

#[test]
fn greedy_stays_on_a_running_spot_vm_when_the_net_triggers() {
    // Spot for the first 12 hours, 10 h of work, no overhead: greedy rides spot to the end.
    let mut avail = vec![true; 12];
    avail.extend([false; 10]);
    let ex = experiment(10.0, 12.0, 0.0, vec![region("a", &avail)]);
    let g = run(&ex, "greedy", 0.0);
    assert_eq!((g.spot_ticks, g.regular_ticks), (10, 0));
    // 1 h overhead: slack is 1 at the start and 0 from tick 1 on, so the net has triggered while
    // the spot VM runs; greedy keeps it (safe: it makes a full tick of progress) until the loss at
    // tick 8, then regular finishes in time.
    let mut avail = vec![true; 8];
    avail.extend([false; 10]);
    let ex = experiment(10.0, 12.0, 1.0, vec![region("a", &avail)]);
    for name in NAMES {
        let r = run(&ex, name, 0.0);
        assert!(r.deadline_met, "{name}: {r:?}");
    }
    let g = run(&ex, "greedy", 0.0);
    assert_eq!(g.spot_ticks, 8, "greedy keeps the running spot VM through slack 0");
}

#[test]
fn alternating_availability_meets_every_deadline_and_spot_policies_beat_regular() {
    let avail: Vec<bool> = (0..200).map(|t| (t / 3) % 2 == 0).collect();
    let ex = experiment(30.0, 40.0, 0.25, vec![region("a", &avail)]);
    let base = run(&ex, "regular-only", 0.0).cost;
    for name in ["greedy", "uniform-progress", "spillway"] {
        let r = run(&ex, name, 0.0);
        assert!(r.deadline_met, "{name}: {r:?}");
        assert!(r.cost < base, "{name}: {} vs regular-only {base}", r.cost);
    }
}

#[test]
fn a_long_outage_near_the_deadline_is_survived_by_every_policy() {
    // Spot for the first 20 hours, then nothing until long after the deadline.
    let mut avail = vec![true; 20];
    avail.extend([false; 60]);
    let ex = experiment(24.0, 30.0, 0.5, vec![region("a", &avail)]);
    for name in NAMES {
        let r = run(&ex, name, 0.0);
        assert!(r.deadline_met, "{name}: {r:?}");
        assert!(r.finish_hours.unwrap() <= 30.0);
    }
}

#[test]
fn spillway_moves_to_the_region_that_has_spot() {
    // Home region never has spot; the second one always does.
    let mut ex = experiment(10.0, 14.0, 0.1, vec![region("home", &[false; 40]), region("away", &[true; 40])]);
    ex.job.checkpoint_gb = 50.0;
    ex.egress.push(Egress { from: 0, to: 1, usd_per_gb: 0.02 });
    let s = run(&ex, "spillway", 0.0);
    assert_eq!((s.spot_ticks, s.regular_ticks), (11, 0));
    assert_eq!(s.region_changes, 0, "the first start is free and goes straight to spot away");
    let g = run(&ex, "greedy", 0.0);
    assert_eq!(g.spot_ticks, 0, "greedy is single-region: it never sees the other region's spot");
    assert!(s.cost < g.cost);
}

#[test]
fn spillway_does_not_thrash_between_equal_spot_regions() {
    // Two regions, both always available; the second slightly cheaper. Staying beats moving.
    let mut b = region("b", &[true; 40]);
    b.spot_price = SpotPrice::Fixed(SPOT - 0.01);
    let mut ex = experiment(10.0, 14.0, 0.1, vec![region("a", &[true; 40]), b]);
    ex.job.checkpoint_gb = 50.0;
    ex.egress.push(Egress { from: 0, to: 1, usd_per_gb: 0.02 });
    let s = run(&ex, "spillway", 0.0);
    assert_eq!(s.migrations, 0, "{s:?}");
}

#[test]
fn spillway_does_not_leave_regular_for_a_spot_window_shorter_than_its_overhead() {
    // Spot is up for one tick in every five (history says uptime = 1 tick); overhead 0.9 h of a
    // 1 h tick: a spot start would make 0.1 h of progress for a tick of spot plus a regular restart.
    let avail: Vec<bool> = (0..120).map(|t| t % 5 == 4).collect();
    let ex = experiment(20.0, 22.0, 0.9, vec![region("a", &avail)]);
    let mut ex = ex;
    ex.start_offsets_hours = vec![60.0];
    let s = run(&ex, "spillway", 60.0);
    assert!(s.deadline_met);
    assert_eq!(s.spot_ticks, 0, "{s:?}");
}

// ---- deadlines: every policy, random traces ----------------------------------------------------

#[test]
fn every_policy_meets_every_deadline_when_regular_capacity_exists() {
    // Pseudo-random traces with a fixed seed, several regions, tight and loose deadlines, overheads
    // shorter and longer than a tick.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for case in 0..60 {
        let tick_seconds = [600.0, 1800.0, 3600.0][case % 3];
        // Long enough for the latest offset plus any deadline below.
        let ticks = (130.0 * 3600.0 / tick_seconds) as usize;
        let regions: Vec<Region> = (0..1 + case % 3)
            .map(|k| {
                let mut up = next() % 2 == 0;
                let avail: Vec<bool> = (0..ticks)
                    .map(|_| {
                        if next() % 6 == 0 {
                            up = !up;
                        }
                        up
                    })
                    .collect();
                let mut r = region(&format!("r{k}"), &avail);
                r.spot_price = SpotPrice::Fixed(0.2 + (next() % 100) as f64 / 100.0);
                r
            })
            .collect();
        let work = 5.0 + (next() % 40) as f64;
        let overhead = [0.0, 0.1, 0.5, 1.0, 2.5][case % 5];
        let deadline = work + overhead + (next() % 12) as f64 * 0.75;
        let mut ex = experiment(work, deadline, overhead, regions);
        ex.tick_seconds = tick_seconds;
        ex.job.checkpoint_gb = 10.0;
        for name in NAMES {
            for offset in [0.0, 13.0, 47.5] {
                let r = run(&ex, name, offset);
                assert!(r.deadline_met, "case {case} {name} offset {offset}: {r:?}, job {:?}", ex.job);
            }
        }
    }
}

// ---- the experiment file -----------------------------------------------------------------------

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("spillway-spot-deadline-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(d.join("traces")).unwrap();
    std::fs::write(
        d.join("traces/a.json"),
        format!(r#"{{"metadata": {{"gap_seconds": 300}}, "data": [{}]}}"#, vec!["1"; 2000].join(",")),
    )
    .unwrap();
    std::fs::write(
        d.join("traces/p.json"),
        format!(r#"{{"metadata": {{"gap_seconds": 600}}, "prices": [{}]}}"#, vec!["0.5"; 1000].join(",")),
    )
    .unwrap();
    d
}

const GOOD: &str = r#"
[experiment]
kind = "spot-deadline"
tick_seconds = 600
policies = ["greedy", "spillway"]
start_offsets_hours = [0.0, 12.5]

[job]
work_hours = 10.0
deadline_hours = 12.0
restart_overhead_hours = 0.1
checkpoint_gb = 50.0

[[regions]]
name = "a"
regular_price_per_hour = 3.06
spot_price_per_hour = 0.4
spot_availability_trace = "traces/a.json"

[[regions]]
name = "b"
regular_price_per_hour = 3.06
spot_price_trace = "traces/p.json"
spot_availability_trace = "traces/a.json"
trace_convention = "preempted"

[[egress]]
from = "a"
to = "b"
usd_per_gb = 0.02
"#;

fn errors_of(dir: &Path, content: &str) -> String {
    Experiment::parse(content, dir).unwrap_err().to_string()
}

#[test]
fn experiment_file_parses_and_resolves_traces_relative_to_its_directory() {
    let dir = temp_dir("good");
    std::fs::write(dir.join("e.toml"), GOOD).unwrap();
    let ex = Experiment::load(&dir.join("e.toml")).unwrap();
    assert_eq!(ex.regions.len(), 2);
    assert_eq!(ex.regions[0].spot_available.len(), 1000, "2000 × 300 s resampled to 600 s ticks");
    assert!(ex.regions[0].spot_available.iter().all(|&a| a));
    assert!(ex.regions[1].spot_available.iter().all(|&a| !a), "preempted: 1 = not available");
    assert_eq!(ex.regions[1].spot_price_at(5), 0.5);
    assert!((ex.egress_usd_per_gb(1, 0) - 0.02).abs() < 1e-12);
    let report = run_experiment(&ex).unwrap();
    assert_eq!(report.runs, 2);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["kind"], "spot-deadline");
    let keys: Vec<&String> = json["policies"][0].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["deadline_met_fraction", "mean_cost", "mean_migrations", "median_cost", "name", "p90_cost"],
        "exactly the documented fields"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn experiment_file_errors_name_their_fields() {
    let dir = temp_dir("bad");
    let cases: &[(&str, &str, &str)] = &[
        ("deadline_hours = 12.0", "deadline_hours = 12.0\nwork_minutes = 3", "job.work_minutes"),
        ("spot_price_per_hour = 0.4\n", "", "regions[0].spot_price_per_hour"),
        ("[job]\nwork_hours = 10.0\n", "[job]\n", "job.work_hours"),
        ("tick_seconds = 600", "tick_seconds = 0", "experiment.tick_seconds"),
        ("[\"greedy\", \"spillway\"]", "[\"greedy\", \"cheapest\"]", "experiment.policies[1]"),
        ("[0.0, 12.5]", "[0.0, 9999.0]", "experiment.start_offsets_hours[1]"),
        (
            "\"traces/a.json\"\n\n[[regions]]",
            "\"traces/missing.json\"\n\n[[regions]]",
            "regions[0].spot_availability_trace",
        ),
        ("to = \"b\"", "to = \"c\"", "egress[0].to"),
        ("name = \"b\"", "name = \"a\"", "regions[1].name"),
        ("trace_convention = \"preempted\"", "trace_convention = \"inverted\"", "regions[1].trace_convention"),
        ("deadline_hours = 12.0", "deadline_hours = 8.0", "job.deadline_hours"),
        ("usd_per_gb = 0.02", "usd_per_gb = -1", "egress[0].usd_per_gb"),
        ("kind = \"spot-deadline\"", "kind = \"what-if\"", "experiment.kind"),
    ];
    for (from, to, field) in cases {
        assert!(GOOD.contains(from), "bad test case: {from}");
        let msg = errors_of(&dir, &GOOD.replacen(from, to, 1));
        assert!(msg.contains(&format!("{field}:")), "expected an error naming {field}, got:\n{msg}");
    }
    // Several problems are reported together.
    let msg = errors_of(
        &dir,
        &GOOD.replace("work_hours = 10.0", "work_hours = -1").replace("usd_per_gb = 0.02", "usd_per_gb = -1"),
    );
    assert!(msg.contains("job.work_hours:") && msg.contains("egress[0].usd_per_gb:"), "{msg}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn start_offset_every_hours_covers_the_traces() {
    let dir = temp_dir("every");
    let content = GOOD.replace("start_offsets_hours = [0.0, 12.5]", "start_offset_every_hours = 24.0");
    let ex = Experiment::parse(&content, &dir).unwrap();
    // 1000 ticks of 10 min = 166.7 h; a 12 h deadline window fits from 0, 24, ..., 144 h.
    assert_eq!(ex.start_offsets_hours, vec![0.0, 24.0, 48.0, 72.0, 96.0, 120.0, 144.0]);
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- the real traces ---------------------------------------------------------------------------

fn scenario(name: &str) -> Option<Experiment> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    if !root.join("../shared/data/spot").is_dir() {
        eprintln!("skipping: ../shared/data/spot is absent (the real spot traces)");
        return None;
    }
    Some(Experiment::load(&root.join("scenarios").join(name)).unwrap_or_else(|e| panic!("{name}: {e}")))
}

#[test]
fn spillway_beats_the_baselines_on_the_real_traces_and_meets_every_deadline() {
    for name in ["spot-deadline-single.toml", "spot-deadline-3zones.toml"] {
        let Some(ex) = scenario(name) else { return };
        assert!(ex.start_offsets_hours.len() >= 30, "{name}: one run every 6 hours through the traces");
        let report = run_experiment(&ex).unwrap();
        let get = |p: &str| report.policies.iter().find(|s| s.name == p).unwrap().clone();
        let (s, g, u, r) = (get("spillway"), get("greedy"), get("uniform-progress"), get("regular-only"));
        for p in [&s, &g, &u, &r] {
            assert_eq!(p.deadline_met_fraction, 1.0, "{name}: {} missed deadlines", p.name);
        }
        assert!(s.mean_cost <= g.mean_cost, "{name}: spillway {} > greedy {}", s.mean_cost, g.mean_cost);
        assert!(s.mean_cost <= u.mean_cost, "{name}: spillway {} > uniform-progress {}", s.mean_cost, u.mean_cost);
        assert!(g.mean_cost < r.mean_cost && u.mean_cost < r.mean_cost, "{name}: spot should pay");
    }
}
