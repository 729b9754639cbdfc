//! Solver quality and speed on queues that do not repeat (`solver::generate::diverse`, issue #17's
//! distribution) and on any problem files given: placed weight and cost against the best proven bound and,
//! with `--features highs`, against HiGHS's exact optimum (the reference), per size.
//!
//! ```sh
//! cargo bench -p solver --bench diverse                                 # default build only
//! cargo bench -p solver --features highs --bench diverse                # adds the HiGHS reference
//! cargo bench -p solver --bench diverse -- --sizes 60,100 --seeds 1,2   # other sizes and seeds
//! cargo bench -p solver --bench diverse -- --write DIR                  # writes DIR/diverse-{n}-{seed}.json
//! cargo bench -p solver --features highs --bench diverse -- --files a.json b.json   # other problems
//! cargo bench -p solver --features highs --bench diverse -- --sweep 48 --reference-ms 10000
//! cargo bench -p solver --features highs --bench diverse -- --sweep 48 --family generate --reference-ms 10000
//! cargo bench -p solver --features highs --bench diverse -- --sample 60 --sample-seed 12345 --reference-ms 20000
//! cargo bench -p solver --bench diverse -- --advise --files a.json b.json   # quota advice instead
//! ```
//!
//! The reference is HiGHS with `--reference-ms` (default 60,000; 0 skips it, for timing the large
//! sizes) as its whole budget; where it does not prove the optimum, the ratio is against its best plan.
//!
//! `--sweep N` takes N small problems of many shapes instead of the sizes: problem s (0 ≤ s < N) has
//! 12, 20, 25, 30, 35 or 40 jobs (s mod 6) over 1-4 regions (s / 6 mod 4), seed s × 0x9E3779B97F4A7C15
//! (`sweep-JOBS:REGIONS:SEED`, the arguments of `DiverseParams`). Every run ends with a summary: the
//! worst weight ratio, the problems below the reference's weight, those whose reported gap the
//! reference contradicts (its weight above the bound the gap implies), those above +1 % of its cost
//! at its weight (counted only where the reference is proven), the proven ones and the wall time. With
//! `--family generate` the sweep's problems come from `solver::generate::generate` instead (the older
//! generator, which issue #17's work was not tuned on): 4-30 sizes, quota 0.3-1.1 of the demand.
//! `--sample N --sample-seed S` draws N `DiverseParams` at random instead (20-40 jobs, 1-4 regions,
//! any seed; xorshift64 from S), so that a change is also judged on cases the sweep's fixed grid
//! does not hold.

use std::time::Instant;

use solver::generate::{DiverseParams, GenParams, diverse, generate};
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

/// CPU time of this process (all its threads) in ms (Linux, to 10 ms), `NaN` elsewhere: the advice
/// solves on several threads.
fn process_cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command's name (which ends at the last ')'): utime and stime are the
    // 12th and 13th, in clock ticks of 10 ms.
    let fields: Vec<&str> = stat.rsplit_once(')').map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    match (fields.get(11).and_then(|u| u.parse::<f64>().ok()), fields.get(12).and_then(|s| s.parse::<f64>().ok())) {
        (Some(u), Some(s)) => (u + s) * 10.0,
        _ => f64::NAN,
    }
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

/// `--advise`: `solver::advise` with its default options (`spillway advise --problem`'s) on each
/// problem: its wall and CPU time (all threads), its solves, the weight placed before and after the
/// advice and the vCPUs it asks for.
fn advise(problems: &[(String, Problem)]) {
    println!(
        "| problem | jobs | ms | CPU ms | solves | weight before | weight after | recommendations | vCPUs asked |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (name, problem) in problems {
        let (cpu, start) = (process_cpu_ms(), Instant::now());
        let a = solver::advise::advise(problem, &[], &solver::advise::AdviseOptions::default());
        let (ms, cpu) = (start.elapsed().as_secs_f64() * 1e3, process_cpu_ms() - cpu);
        let asked: u64 = a.recommendations.iter().flat_map(|r| &r.increases).map(|i| i.increase_vcpus).sum();
        println!(
            "| {name} | {} | {ms:.0} | {cpu:.0} | {} | {} | {} | {} | {asked} |",
            problem.jobs.len(),
            a.solves,
            a.before.placed_weight,
            a.after.placed_weight,
            a.recommendations.len()
        );
    }
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
    } else if let Some(n) = arg(&args, "--sample") {
        let n: usize = n.parse().expect("a number of problems");
        let mut state: u64 = arg(&args, "--sample-seed").map_or(1, |s| s.parse().expect("a seed"));
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..n {
            let jobs = 20 + (next() % 21) as usize;
            let regions = 1 + (next() % 4) as usize;
            let seed = next();
            problems.push((format!("sample-{jobs}:{regions}:{seed}"), diverse(&DiverseParams { jobs, regions, seed })));
        }
    } else if let Some(n) = arg(&args, "--sweep") {
        let n: u64 = n.parse().expect("a number of problems");
        for s in 0..n {
            let jobs = [12, 20, 25, 30, 35, 40][(s % 6) as usize];
            let regions = 1 + (s / 6 % 4) as usize;
            let seed = s.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            if arg(&args, "--family") == Some("generate") {
                // The older generator (jobs copied from a few shapes), quota from tight to loose.
                let sizes = 4 + (s as usize * 7) % 27;
                let quota_fraction = 0.3 + 0.2 * (s % 5) as f64;
                let params = GenParams { jobs, regions, sizes, quota_fraction, seed };
                problems
                    .push((format!("generate-{jobs}:{regions}:{sizes}:{quota_fraction:.1}:{seed}"), generate(&params)));
            } else {
                problems
                    .push((format!("sweep-{jobs}:{regions}:{seed}"), diverse(&DiverseParams { jobs, regions, seed })));
            }
        }
    } else {
        for &n in &sizes {
            for &seed in &seeds {
                let p = diverse(&DiverseParams::new(n as usize, seed));
                if let Some(dir) = write {
                    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("--write {dir}: {e}"));
                    let path = format!("{dir}/diverse-{n}-{seed}.json");
                    std::fs::write(&path, serde_json::to_string(&p).expect("serialise")).expect("write");
                    eprintln!("wrote {path}");
                }
                problems.push((format!("diverse-{n}-{seed}"), p));
            }
        }
    }
    if args.iter().any(|a| a == "--advise") {
        advise(&problems);
        return;
    }
    println!(
        "| problem | jobs | method | ms | CPU ms | placed weight | cost | gap | optimal | reference weight | weight ratio | cost ratio |"
    );
    println!("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |");
    let mut summary = Summary::default();
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
                summary.worst_weight = summary.worst_weight.min(ratio);
                summary.below += usize::from(plan.placed_weight < r.placed_weight - 0.5);
                // Below the reference's weight, the gap is against our weight bound, which the
                // reference's plan must not exceed.
                summary.unsound += usize::from(plan.placed_weight < (1.0 - plan.gap) * r.placed_weight - 1e-6);
                let cost = if (plan.placed_weight - r.placed_weight).abs() < 0.5 && r.expected_cost > 0.0 {
                    let ratio = plan.expected_cost / r.expected_cost;
                    if r.optimal && ratio > 1.01 {
                        summary.dearer.push(format!("{name} {:+.1} %", (ratio - 1.0) * 100.0));
                    }
                    format!("{ratio:.5}")
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
            "| {name} | {} | {} | {ms:.1} | {cpu:.1} | {} | {:.2} | {:.5} | {} | {rw} | {ratio} | {cost} |",
            problem.jobs.len(),
            plan.solver,
            plan.placed_weight,
            plan.expected_cost,
            plan.gap,
            plan.optimal
        );
        summary.proven += usize::from(plan.optimal);
        summary.ms.push(ms);
    }
    summary.print();
}

/// What a run adds up to: the numbers a change to the solver is judged by.
struct Summary {
    worst_weight: f64,
    /// Problems placing less weight than the reference.
    below: usize,
    /// Problems whose reported gap the reference's weight contradicts (a bound below a plan).
    unsound: usize,
    /// Problems above +1 % of a proven reference's cost at its weight, with how much.
    dearer: Vec<String>,
    proven: usize,
    ms: Vec<f64>,
}

impl Default for Summary {
    fn default() -> Summary {
        Summary { worst_weight: 1.0, below: 0, unsound: 0, dearer: Vec::new(), proven: 0, ms: Vec::new() }
    }
}

impl Summary {
    fn print(&self) {
        let n = self.ms.len();
        let mean = self.ms.iter().sum::<f64>() / n.max(1) as f64;
        let max = self.ms.iter().copied().fold(0.0, f64::max);
        println!(
            "\n{n} problems: worst weight ratio {:.4}, {} below the reference's weight, {} with a gap the \
             reference contradicts, {} above +1 % of a proven reference's cost{}{}, {} proven optimal, wall ms \
             mean {mean:.0} max {max:.0}",
            self.worst_weight,
            self.below,
            self.unsound,
            self.dearer.len(),
            if self.dearer.is_empty() { "" } else { ": " },
            self.dearer.join(", "),
            self.proven
        );
    }
}
