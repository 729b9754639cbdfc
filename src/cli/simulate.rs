//! `spillway simulate FILE`: runs a simulator experiment. The file's `[experiment] kind` picks the
//! experiment; each kind is one arm of the `match` in [`run`].

use std::path::Path;
use std::process::ExitCode;

use simulator::spot_deadline::{self, Experiment};

use crate::Output;
use crate::cli::table;

/// The experiment kinds `simulate` knows, for the error message of an unknown one.
const KINDS: &[&str] = &[spot_deadline::experiment::KIND, simulator::whatif::KIND];

/// Exit 0 and the report; 1 when the file is unreadable or invalid (every problem, each naming its
/// field); 2 when the kind is missing or unknown.
pub fn run(file: &Path, output: Output) -> ExitCode {
    let content = match std::fs::read_to_string(file) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", file.display());
            return ExitCode::from(1);
        }
    };
    let kind = match kind_of(&content) {
        Ok(k) => k,
        Err(problem) => {
            eprintln!("{}: {problem}", file.display());
            return ExitCode::from(2);
        }
    };
    match kind.as_str() {
        spot_deadline::experiment::KIND => spot_deadline(file, output),
        simulator::whatif::KIND => what_if(Some(file), output, &WhatIfArgs::default()),
        other => {
            eprintln!("{}: experiment.kind: unknown kind {other:?}; supported: {}", file.display(), KINDS.join(", "));
            ExitCode::from(2)
        }
    }
}

/// Reads `[experiment] kind` without judging the rest of the file (each kind parses its own keys).
fn kind_of(content: &str) -> Result<String, String> {
    let table: toml::Table = toml::from_str(content).map_err(|e| format!("not valid TOML: {}", e.message().trim()))?;
    match table.get("experiment").and_then(|e| e.get("kind")) {
        Some(toml::Value::String(kind)) => Ok(kind.clone()),
        Some(_) => Err("experiment.kind: must be a string".to_string()),
        None => Err(format!("experiment.kind: missing; supported: {}", KINDS.join(", "))),
    }
}

fn spot_deadline(file: &Path, output: Output) -> ExitCode {
    let experiment = match Experiment::load(file) {
        Ok(e) => e,
        Err(errors) => {
            eprintln!("{}: {} problem(s)", file.display(), errors.0.len());
            for e in &errors.0 {
                eprintln!("  {e}");
            }
            return ExitCode::from(1);
        }
    };
    let report = match spot_deadline::run_experiment(&experiment) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    match output {
        Output::Json => match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        },
        Output::Table => {
            let job = &experiment.job;
            println!(
                "spot-deadline: {} run(s) per policy; job {} h of work, deadline {} h, restart overhead {} h; {} region(s)",
                report.runs,
                job.work_hours,
                job.deadline_hours,
                job.restart_overhead_hours,
                experiment.regions.len()
            );
            let rows: Vec<Vec<String>> = report
                .policies
                .iter()
                .map(|p| {
                    vec![
                        p.name.clone(),
                        format!("{:.2}", p.mean_cost),
                        format!("{:.2}", p.median_cost),
                        format!("{:.2}", p.p90_cost),
                        format!("{:.1}%", p.deadline_met_fraction * 100.0),
                        format!("{:.2}", p.mean_migrations),
                    ]
                })
                .collect();
            print!(
                "{}",
                table::render(&["policy", "mean USD", "median USD", "p90 USD", "deadline met", "migrations"], &rows)
            );
        }
    }
    ExitCode::SUCCESS
}

/// Options of `simulate` that only what-if scenarios take.
#[derive(Debug, Default)]
pub struct WhatIfArgs {
    /// Write the HTML report here.
    pub report: Option<std::path::PathBuf>,
    /// Replace the scenario's seed.
    pub seed: Option<u64>,
    /// Write 0 as `wall_ms`.
    pub no_timing: bool,
}

/// `spillway simulate [FILE]`: no file runs the bundled `default` what-if scenario; a what-if file
/// takes the what-if options; other kinds go to [`run`] (and refuse the what-if options, exit 2).
pub fn run_with(file: Option<&Path>, output: Output, args: &WhatIfArgs) -> ExitCode {
    let Some(file) = file else { return what_if(None, output, args) };
    let is_what_if = std::fs::read_to_string(file).is_ok_and(|c| simulator::whatif::is_what_if(&c));
    if is_what_if {
        return what_if(Some(file), output, args);
    }
    if args.report.is_some() || args.seed.is_some() || args.no_timing {
        eprintln!("{}: --report, --seed and --no-timing apply to what-if scenarios only", file.display());
        return ExitCode::from(2);
    }
    run(file, output)
}

fn what_if(file: Option<&Path>, output: Output, args: &WhatIfArgs) -> ExitCode {
    use simulator::whatif::{RunOptions, Scenario, run_scenario_blocking};
    let scenario = match file {
        Some(f) => Scenario::load(f),
        None => Scenario::bundled_default(Path::new(".")),
    };
    let mut scenario = match scenario {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    if let Some(seed) = args.seed {
        scenario = scenario.with_seed(seed);
    }
    let report = match run_scenario_blocking(&scenario, &RunOptions { timing: !args.no_timing }) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    match output {
        Output::Json => println!("{}", report.to_json()),
        Output::Table => print!("{}", report.to_table()),
    }
    if let Some(path) = &args.report {
        if let Err(e) = std::fs::write(path, report.to_html()) {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::from(1);
        }
        eprintln!("report written to {}", path.display());
    }
    ExitCode::SUCCESS
}
