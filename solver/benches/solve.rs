//! Solver benchmark: generated problems with 100 / 1,000 / 10,000 pending jobs over 8 regions × 30 sizes
//! × 2 priorities with tight quota (see `solver::generate`); solve time, placed weight and cost for
//! greedy, the default build's LP rounding and (with `--features highs`) HiGHS.
//!
//! ```sh
//! cargo bench -p solver --bench solve                      # greedy and lp-round
//! cargo bench -p solver --features highs --bench solve     # adds the HiGHS column
//! cargo bench -p solver --bench solve -- --write DIR       # also writes the problems as JSON
//! cargo bench -p solver --features highs --bench solve -- --only loose-100   # one problem
//! ```

use std::time::Instant;

use solver::generate::{GenParams, generate};
use solver::{Method, Plan, Problem, SolveOptions, check, solve, solve_lp_round};

fn timed(name: &str, runs: usize, problem: &Problem, f: impl Fn(&Problem) -> Plan) -> (Plan, f64) {
    // Median of `runs` runs: the machine is shared.
    let mut times = Vec::new();
    let mut plan = None;
    for _ in 0..runs {
        let start = Instant::now();
        let p = f(problem);
        times.push(start.elapsed().as_secs_f64() * 1e3);
        plan = Some(p);
    }
    times.sort_by(f64::total_cmp);
    let plan = plan.expect("at least one run");
    eprintln!("{name}: {} jobs, {:.1} ms", problem.jobs.len(), times[times.len() / 2]);
    if let Err(e) = check(problem, &plan) {
        panic!("{name}: infeasible plan: {e:?}");
    }
    (plan, times[times.len() / 2])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let write_dir = args.iter().position(|a| a == "--write").and_then(|i| args.get(i + 1)).cloned();
    // `--only loose-100` runs one problem (HiGHS takes minutes on the others).
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).cloned();
    println!(
        "| quota | jobs | classes* | method | solve ms | placed weight | weight vs greedy | expected cost | gap | optimal |"
    );
    println!("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |");
    let tight = [100usize, 1_000, 10_000].map(|n| ("tight", GenParams::bench(n, 7)));
    // Loose: quota for 5× the demand, so every job that can run anywhere fits and cost decides.
    let loose =
        [100usize, 1_000, 10_000].map(|n| ("loose", GenParams { quota_fraction: 5.0, ..GenParams::bench(n, 7) }));
    for (quota, params) in tight.into_iter().chain(loose) {
        let n = params.jobs;
        if only.as_ref().is_some_and(|o| *o != format!("{quota}-{n}")) {
            continue;
        }
        let problem = generate(&params);
        if let Some(dir) = &write_dir {
            let path = format!("{dir}/problem-{quota}-{n}.json");
            std::fs::write(&path, serde_json::to_string(&problem).expect("serialise")).expect("write problem");
            eprintln!("wrote {path}");
        }
        let distinct: std::collections::BTreeSet<String> = problem
            .jobs
            .iter()
            .map(|j| {
                let mut j = j.clone();
                j.id.clear();
                serde_json::to_string(&j).expect("serialise")
            })
            .collect();
        let greedy_opts = SolveOptions { method: Method::Greedy, time_limit_ms: None };
        let best_opts = SolveOptions::default();
        let mut rows = vec![("greedy", timed("greedy", 3, &problem, |p| solve(p, &greedy_opts)))];
        rows.push(("lp-round", timed("lp-round", 3, &problem, |p| solve_lp_round(p, &best_opts))));
        if cfg!(feature = "highs") {
            // HiGHS may take long on the tight problems: give it a minute, then it keeps its incumbent
            // (or, in the weight phase, falls back to greedy, which the solver column shows).
            let highs_opts = SolveOptions { time_limit_ms: Some(60_000), ..best_opts };
            rows.push(("highs", timed("highs", 1, &problem, |p| solve(p, &highs_opts))));
        }
        let greedy_weight = rows[0].1.0.placed_weight;
        for (name, (plan, ms)) in &rows {
            let vs = if greedy_weight > 0.0 { 100.0 * (plan.placed_weight / greedy_weight - 1.0) } else { 0.0 };
            println!(
                "| {quota} | {n} | {} | {name} ({}) | {ms:.1} | {:.0} | {vs:+.2} % | {:.2} | {:.5} | {} |",
                distinct.len(),
                plan.solver,
                plan.placed_weight,
                plan.expected_cost,
                plan.gap,
                plan.optimal
            );
        }
    }
    println!("\n*classes: distinct job shapes before grouping by the solver.");
}
