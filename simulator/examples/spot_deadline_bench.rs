//! Benchmark of the deadline-aware spot policies on the bundled experiments (real spot traces).
//!
//! ```sh
//! cargo run --release -p simulator --example spot_deadline_bench            # the bundled scenarios
//! cargo run --release -p simulator --example spot_deadline_bench -- FILE... # your own
//! ```
//! Prints, per experiment and policy: mean / median / p90 cost, deadline-met fraction, mean
//! migrations, and the mean spot and regular hours billed, plus the wall time of the whole run.

use std::path::PathBuf;
use std::time::Instant;

use simulator::spot_deadline::{Experiment, PolicySummary, run_policy};

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files: Vec<PathBuf> = std::env::args().skip(1).map(PathBuf::from).collect();
    if files.is_empty() {
        files = ["spot-deadline-single.toml", "spot-deadline-3zones.toml"]
            .iter()
            .map(|f| root.join("scenarios").join(f))
            .collect();
    }
    for file in files {
        let experiment = match Experiment::load(&file) {
            Ok(e) => e,
            Err(errors) => {
                eprintln!("{}:\n{errors}", file.display());
                std::process::exit(1);
            }
        };
        let started = Instant::now();
        println!(
            "{} — {} runs, work {} h, deadline {} h, overhead {} h, {} region(s)",
            file.display(),
            experiment.start_offsets_hours.len(),
            experiment.job.work_hours,
            experiment.job.deadline_hours,
            experiment.job.restart_overhead_hours,
            experiment.regions.len()
        );
        println!(
            "{:<17} {:>9} {:>9} {:>9} {:>6} {:>7} {:>8} {:>8}",
            "policy", "mean $", "median $", "p90 $", "met", "migr.", "spot h", "reg. h"
        );
        let tick_h = experiment.tick_seconds / 3600.0;
        for name in &experiment.policies {
            let runs = match run_policy(&experiment, name) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("{e}");
                    std::process::exit(1);
                }
            };
            let s = PolicySummary::from_runs(name, &runs);
            let n = runs.len() as f64;
            let spot_h = runs.iter().map(|r| f64::from(r.spot_ticks)).sum::<f64>() * tick_h / n;
            let reg_h = runs.iter().map(|r| f64::from(r.regular_ticks)).sum::<f64>() * tick_h / n;
            println!(
                "{:<17} {:>9.2} {:>9.2} {:>9.2} {:>6.3} {:>7.2} {:>8.1} {:>8.1}",
                s.name,
                s.mean_cost,
                s.median_cost,
                s.p90_cost,
                s.deadline_met_fraction,
                s.mean_migrations,
                spot_h,
                reg_h
            );
        }
        println!("({:.2} s wall)\n", started.elapsed().as_secs_f64());
    }
}
