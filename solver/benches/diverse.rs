//! Solver quality and speed on queues that do not repeat (`solver::generate::diverse`, issue #17's
//! distribution) and on any problem files given: placed weight against the best proven bound and,
//! with `--features highs`, against HiGHS's exact optimum (the reference), per size.
//!
//! ```sh
//! cargo bench -p solver --bench diverse                                 # default build only
//! cargo bench -p solver --features highs --bench diverse                # adds the HiGHS reference
//! cargo bench -p solver --bench diverse -- --sizes 60,100 --seeds 1,2   # other sizes and seeds
//! cargo bench -p solver --bench diverse -- --write DIR                  # writes DIR/diverse-{n}-{seed}.json
//! cargo bench -p solver --features highs --bench diverse -- --files a.json b.json   # other problems
//! ```
//!
//! The reference is HiGHS with `--reference-ms` (default 60,000; 0 skips it, for timing the large
//! sizes) as its whole budget; where it does not prove the optimum, the ratio is against its best plan.

use std::time::Instant;

use solver::generate::{DiverseParams, diverse};
use solver::{Plan, Problem, SolveOptions, check, solve_lp_round};

fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(String::as_str)
}

fn list(s: &str) -> Vec<u64> {
    s.split(',').map(|x| x.trim().parse().expect("a number")).collect()
}

/// CPU time of this thread in ms (Linux), `NaN` elsewhere: on a machine shared with other builds the
/// wall time measures the load as much as the solver, the thread's CPU time does not.
fn cpu_ms() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|ns| ns.parse::<f64>().ok()))
        .map_or(f64::NAN, |ns| ns / 1e6)
}

/// The plan, its wall time and its CPU time, in ms.
fn timed(problem: &Problem, f: impl Fn(&Problem) -> Plan) -> (Plan, f64, f64) {
    let cpu = cpu_ms();
    let start = Instant::now();
    let plan = f(problem);
    let ms = start.elapsed().as_secs_f64() * 1e3;
    let cpu = cpu_ms() - cpu;
    if let Err(e) = check(problem, &plan) {
        panic!("infeasible plan: {e:?}");
    }
    (plan, ms, cpu)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sizes = arg(&args, "--sizes").map_or(vec![60, 100, 120, 200, 300, 1_000, 10_000], list);
    let seeds = arg(&args, "--seeds").map_or(vec![1], list);
    let write = arg(&args, "--write");
    let reference_ms: u64 = arg(&args, "--reference-ms").map_or(60_000, |s| s.parse().expect("ms"));
    let time_limit: Option<u64> = arg(&args, "--time-limit-ms").map(|s| s.parse().expect("ms"));
    let mut problems: Vec<(String, Problem)> = Vec::new();
    if let Some(i) = args.iter().position(|a| a == "--files") {
        for path in args[i + 1..].iter().take_while(|a| !a.starts_with("--")) {
            let text = std::fs::read_to_string(path).expect("read problem");
            problems.push((path.clone(), Problem::from_json_str(&text).expect("a valid problem")));
        }
    } else {
        for &n in &sizes {
            for &seed in &seeds {
                let p = diverse(&DiverseParams::new(n as usize, seed));
                if let Some(dir) = write {
                    let path = format!("{dir}/diverse-{n}-{seed}.json");
                    std::fs::write(&path, serde_json::to_string(&p).expect("serialise")).expect("write");
                    eprintln!("wrote {path}");
                }
                problems.push((format!("diverse-{n}-{seed}"), p));
            }
        }
    }
    println!(
        "| problem | jobs | method | ms | CPU ms | placed weight | gap | optimal | reference weight | weight ratio | cost ratio |"
    );
    println!("| --- | ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |");
    for (name, problem) in &problems {
        let opts = SolveOptions { time_limit_ms: time_limit, ..SolveOptions::default() };
        let (plan, ms, cpu) = timed(problem, |p| solve_lp_round(p, &opts));
        let reference = if cfg!(feature = "highs") && reference_ms > 0 {
            let o = SolveOptions { time_limit_ms: Some(reference_ms), ..SolveOptions::default() };
            Some(timed(problem, |p| solver::solve(p, &o)))
        } else {
            None
        };
        let (rw, ratio, cost) = match &reference {
            Some((r, rms, _)) => {
                eprintln!("{name}: reference {} in {rms:.0} ms, optimal {}, gap {}", r.solver, r.optimal, r.gap);
                let ratio = if r.placed_weight > 0.0 { plan.placed_weight / r.placed_weight } else { 1.0 };
                let cost = if (plan.placed_weight - r.placed_weight).abs() < 0.5 && r.expected_cost > 0.0 {
                    format!("{:.5}", plan.expected_cost / r.expected_cost)
                } else {
                    "-".to_string()
                };
                (
                    format!("{}{}", r.placed_weight, if r.optimal { "" } else { " (not proven)" }),
                    format!("{ratio:.5}"),
                    cost,
                )
            }
            None => ("-".to_string(), "-".to_string(), "-".to_string()),
        };
        println!(
            "| {name} | {} | {} | {ms:.1} | {cpu:.1} | {} | {:.5} | {} | {rw} | {ratio} | {cost} |",
            problem.jobs.len(),
            plan.solver,
            plan.placed_weight,
            plan.gap,
            plan.optimal
        );
    }
}
