//! Quota advice on what-if weeks: the advice places more work and shortens the tail of waiting,
//! every recommended increase is used by the confirming run, and the written scenario reproduces
//! the confirming run when simulated.

use std::path::PathBuf;

use scheduler::model::QuotaPool;
use simulator::whatif::advise::{WeekAdviceOptions, advise_week, confirm, with_increases, write_advised_scenario};
use simulator::whatif::{Policy, RunOptions, Scenario, run_scenario_blocking};

fn scenarios() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}

/// Half a day of A100 training where quota binds (shared with the CLI's test).
const TIGHT: &str = include_str!("data/tight-quota.toml");

fn tight(text: &str) -> Scenario {
    Scenario::parse(text, &scenarios(), "tight").expect("valid scenario")
}

fn options() -> WeekAdviceOptions {
    WeekAdviceOptions { max_recommendations: 3, ..WeekAdviceOptions::default() }
}

#[test]
fn the_advice_places_more_work_every_increase_is_used_and_the_written_scenario_reproduces_it() {
    let s = tight(TIGHT);
    let advice = advise_week(&s, &options()).expect("advice");
    assert!(!advice.is_empty(), "quota binds in this week: {advice:#?}");
    // The search weighs increases on the busiest snapshots; the week is simulated only to observe
    // it, confirm the advice, and measure what each increase (and one alternative) buys.
    assert!(advice.probe_solves > 0);
    let n = advice.recommendations.len() as u32;
    assert!(advice.simulations <= 2 + 2 * n, "{} simulations for {n} recommendations", advice.simulations);
    let (b, a) = (&advice.before, &advice.after);
    assert!(a.waiting_weight_gpu_hours < b.waiting_weight_gpu_hours, "less waiting: {b:?} -> {a:?}");
    assert!(a.wait_p95_hours < b.wait_p95_hours, "a shorter tail: {b:?} -> {a:?}");
    assert!(a.jobs_never_started <= b.jobs_never_started && a.gpu_hours > b.gpu_hours, "more work: {b:?} -> {a:?}");
    // Alternatives (none in this week: each advised pool is the other's alternative) are
    // simulated in place of their recommendation and save waiting there.
    for r in &advice.recommendations {
        for alt in &r.alternatives {
            assert!(alt.waiting_weight_gpu_hours_saved > 0.0, "{alt:#?}");
            let advised = advice.increases();
            assert!(
                !advised.iter().any(|(region, pool, _)| *region == alt.region && pool.name() == alt.pool),
                "an alternative is not an increase already advised: {alt:#?}"
            );
        }
    }
    for r in &advice.recommendations {
        assert!(r.buys.waiting_weight_gpu_hours_saved > 0.0, "rank {} buys nothing: {r:#?}", r.rank);
        assert_eq!(r.increase.increase_vcpus % r.increase.step_vcpus, 0, "grant-sized: {r:#?}");
        assert_eq!(r.increase.new_limit, r.increase.current_limit + r.increase.increase_vcpus);
    }

    // The confirming run, made again from the advice alone: each increase is used (its pool goes
    // past the old limit), and the week goes as the advice says.
    let increases = advice.increases();
    let c = confirm(&s, &increases).expect("confirming run");
    assert_eq!(&c.outcome, a, "the reported after-week is the confirming run");
    for (region, pool, inc) in &increases {
        let limit = s.cloud.quota_limit(region, pool);
        let peak = c.peak_usage.get(&(region.clone(), pool.key())).copied().unwrap_or(0);
        assert!(peak > limit, "{region} {pool} +{inc}: the confirming run never used more than the old {limit}");
    }

    // --write-scenario: the copy keeps comments, renames the scenario, raises the limits, and
    // simulating it gives the confirming run's figures.
    let dir = std::env::temp_dir().join(format!("spillway-quota-advice-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("tight-advised.toml");
    write_advised_scenario(&scenarios().join("tight.toml"), TIGHT, &s, &increases, &out).expect("written");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("# a comment that --write-scenario keeps"), "{text}");
    let written = Scenario::load(&out).expect("the written scenario is valid");
    assert_eq!(written.name, "tight-advised");
    for (region, pool, inc) in &increases {
        assert_eq!(written.cloud.quota_limit(region, pool), s.cloud.quota_limit(region, pool) + inc, "{text}");
    }
    let mut only_spillway = written.clone();
    only_spillway.policies = vec![Policy::Spillway];
    let report = run_scenario_blocking(&only_spillway, &RunOptions { timing: false }).expect("runs");
    let summary = &report.runs[0].summary;
    assert_eq!(summary.jobs_completed, a.jobs_completed);
    assert_eq!(summary.jobs_pending_at_end, a.jobs_pending_at_end);
    assert!((summary.wait_p95_hours - a.wait_p95_hours).abs() < 1e-3);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_week_where_quota_never_binds_gets_no_advice() {
    let loose = TIGHT
        .replace("family = 96", "family = 4800")
        .replace("cores = 400", "cores = 4800")
        .replace("standardNCADSA100v4Family = 48", "standardNCADSA100v4Family = 4800")
        .replace("low_priority_cores = 96", "low_priority_cores = 4800");
    let advice = advise_week(&tight(&loose), &options()).expect("advice");
    assert!(advice.is_empty(), "{advice:#?}");
    assert_eq!(advice.summary, "no quota increase would place more work");
    assert_eq!(advice.before, advice.after);
}

#[test]
fn increases_raise_limits_and_quota_events_on_the_same_pool() {
    let with_event = format!(
        "{TIGHT}\n[[events]]\nkind = \"quota\"\nregion = \"eastus\"\npool = \"standard NCADSA100v4 Family\"\nvcpus = \
         48\nat_hours = 6\n"
    );
    let s = tight(&with_event);
    let fam = QuotaPool::Family("standardNCADSA100v4Family".into());
    let raised = with_increases(&s, &[("eastus".into(), fam.clone(), 96), ("westus3".into(), QuotaPool::Cores, 24)]);
    assert_eq!(raised.cloud.quota_limit("eastus", &fam), 192);
    assert_eq!(raised.cloud.quota_limit("westus3", &fam), 48, "other regions keep theirs");
    assert_eq!(raised.cloud.quota_limit("westus3", &QuotaPool::Cores), 424);
    assert_eq!(raised.policies, vec![Policy::Spillway]);
    let vcpus = raised.events.iter().find_map(|e| match &e.action {
        simulator::whatif::scenario::EventAction::Quota { vcpus, .. } => Some(*vcpus),
        _ => None,
    });
    assert_eq!(vcpus, Some(144), "the event's limit moves with the increase");
}
