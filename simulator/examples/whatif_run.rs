//! Runs a what-if scenario in release and prints the table (and the JSON with `--json`):
//!   cargo run --release -p simulator --example whatif_run -- scenarios/default.toml [--json] [--html out.html]
//! With no file it runs the bundled default scenario.

use std::path::PathBuf;

use simulator::whatif::{RunOptions, Scenario, run_scenario_blocking};

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
    if args.iter().any(|a| a == "--json") {
        println!("{}", report.to_json());
    }
    if let Some(i) = args.iter().position(|a| a == "--html")
        && let Some(path) = args.get(i + 1)
    {
        std::fs::write(path, report.to_html()).expect("write html");
    }
}
