//! Runs a what-if scenario in release and prints the table (and the JSON with `--json`):
//!   cargo run --release -p simulator --example whatif_run -- scenarios/default.toml [--json] [--html out.html]
//!   [--placements] [--idle-gpus]
//! With no file it runs the bundled default scenario.

use std::path::PathBuf;

use simulator::whatif::{RunOptions, Scenario, run_scenario_blocking};

/// mimalloc, not the system allocator: a what-if run allocates and frees many small records every
/// round, and glibc's malloc made the whole Philly trace about 1.5x slower (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let file = args.iter().find(|a| a.ends_with(".toml")).map(PathBuf::from);
    let scenario = match &file {
        Some(f) => Scenario::load(f),
        None => Scenario::bundled_default(std::path::Path::new("scenarios")),
    };
    let scenario = match scenario {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let report = match run_scenario_blocking(&scenario, &RunOptions::default()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    print!("{}", report.to_table());
    if args.iter().any(|a| a == "--placements") {
        // Where each policy ran its jobs: attempts that reached running, by priority and size.
        for run in &report.runs {
            let mut by: std::collections::BTreeMap<String, u32> = std::collections::BTreeMap::new();
            for j in &run.jobs {
                for a in j.attempts.iter().filter(|a| a.running_ms.is_some()) {
                    *by.entry(format!("{} {} {}", a.priority, a.region, a.size)).or_default() += 1;
                }
            }
            println!("{}: {by:?}", run.summary.name);
        }
    }
    if args.iter().any(|a| a == "--idle-gpus") {
        // GPUs billed but not used by the job (a 1-GPU job on a 4-GPU VM idles three), by the job's
        // GPU count, size and priority: what over-provisioning costs each policy. Attempts still
        // running at the horizon count up to it.
        let catalog = scenario.catalog();
        let end = scenario.start_ms + scenario.horizon_ms;
        for run in &report.runs {
            let mut by: std::collections::BTreeMap<(u32, String, String), (u32, f64, f64)> =
                std::collections::BTreeMap::new();
            for j in &run.jobs {
                for a in j.attempts.iter() {
                    let (Some(from), Some(size)) = (a.running_ms, catalog.size(&a.size)) else { continue };
                    if size.gpus == 0 {
                        continue;
                    }
                    let hours = (a.ended_ms.unwrap_or(end).min(end) - from).max(0) as f64 / 3_600_000.0;
                    let vms = j.gpus.div_ceil(size.gpus).max(1);
                    let billed = (vms * size.gpus) as f64 * hours;
                    let e = by.entry((j.gpus, a.size.clone(), a.priority.to_string())).or_default();
                    e.0 += 1;
                    e.1 += billed;
                    e.2 += billed - j.gpus as f64 * hours;
                }
            }
            let (billed, idle) = by.values().fold((0.0, 0.0), |(b, i), v| (b + v.1, i + v.2));
            println!("{}: GPU-hours billed {billed:.1}, idle {idle:.1}", run.summary.name);
            let mut by_gpus: std::collections::BTreeMap<u32, (u32, f64)> = std::collections::BTreeMap::new();
            for ((gpus, _, _), (n, b, _)) in &by {
                let e = by_gpus.entry(*gpus).or_default();
                e.0 += n;
                e.1 += b;
            }
            for (gpus, (n, b)) in &by_gpus {
                println!("  {gpus}-GPU jobs: {n} attempts that ran, {b:.1} GPU-h billed");
            }
            for ((gpus, size, priority), (n, b, i)) in by.iter().filter(|(_, v)| v.2 > 0.05) {
                println!("  {gpus}-GPU jobs on {priority} {size}: {n} attempts, {b:.1} GPU-h billed, {i:.1} idle");
            }
        }
    }
    if args.iter().any(|a| a == "--json") {
        println!("{}", report.to_json());
    }
    if let Some(i) = args.iter().position(|a| a == "--html")
        && let Some(path) = args.get(i + 1)
    {
        std::fs::write(path, report.to_html()).expect("write html");
    }
}
