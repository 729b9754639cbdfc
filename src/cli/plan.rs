//! `spillway plan --problem FILE`: solve a placement problem (the JSON format in README) and print the
//! plan.

use std::path::Path;
use std::process::ExitCode;

use clap::ValueEnum;

use crate::Output;
use crate::cli::table;

/// Which solver method `--solver` selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Default)]
pub enum SolverArg {
    /// The strongest method in this build (LP rounding, or HiGHS with `--features highs`).
    #[default]
    Best,
    /// Priority order, cheapest feasible offer first.
    Greedy,
}

/// Exit 0 with the plan (also when some jobs cannot be placed: the plan says why), or exit 2 when the
/// file cannot be read or the problem is malformed, with the error naming the bad field.
pub fn run(problem: &Path, output: Output, method: SolverArg, time_limit_ms: Option<u64>) -> ExitCode {
    let started = std::time::Instant::now();
    let path = problem.display().to_string();
    let content = match std::fs::read_to_string(problem) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot read {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let problem = match solver::Problem::from_json_str(&content) {
        Ok(p) => p,
        Err(e) => {
            for issue in &e.issues {
                eprintln!("error: {path}: {issue}");
            }
            return ExitCode::from(2);
        }
    };
    let method = match method {
        SolverArg::Best => solver::Method::Best,
        SolverArg::Greedy => solver::Method::Greedy,
    };
    let time_limit_ms = time_limit_ms.map(|limit| solve_budget_ms(limit, started.elapsed()));
    let mut plan = solver::solve(&problem, &solver::SolveOptions { method, time_limit_ms });
    // Sums of zero-cost placements can come out as -0.0, which prints as "-0"; no cost is negative.
    let clean = |v: f64| if v == 0.0 { 0.0 } else { v };
    plan.expected_cost = clean(plan.expected_cost);
    for p in &mut plan.placements {
        p.expected_cost = clean(p.expected_cost);
    }
    match output {
        Output::Json => println!("{}", plan.to_json_pretty()),
        Output::Table => print!("{}", render(&plan)),
    }
    ExitCode::SUCCESS
}

/// The solve's share of the command's `--time-limit-ms`, `read` having gone to reading and parsing
/// the problem: the limit is the whole command's, so the solve gets what is left after the reading,
/// after twice as long again for writing the plan out, and after [`PROCESS_MS`] for the process's
/// start and exit. Writing takes up to 1.5 times the reading where many jobs wait (every one with
/// its reasons: tight-caps-10000-1 read in 13.6 ms, its 9.4 MB plan written in 20.8); with the
/// reading counted once more for the writing and nothing for the process, the command took 310-341
/// ms under `--time-limit-ms 300` on 10,000 jobs, where it may take 330.
fn solve_budget_ms(limit_ms: u64, read: std::time::Duration) -> u64 {
    let read_ms = u64::try_from(read.as_millis()).unwrap_or(u64::MAX);
    limit_ms.saturating_sub(read_ms.saturating_mul(3)).saturating_sub(PROCESS_MS)
}

/// What the process's start and exit take outside [`run`] (loading the binary, the threads'
/// teardown): 6-17 ms, the whole command's wall time less `run`'s (measured by a one-off build
/// timing `run`; BENCHMARKS.md, "The time limit held from 50 ms to 1 s").
const PROCESS_MS: u64 = 10;

pub fn render(plan: &solver::Plan) -> String {
    let mut out = String::new();
    if plan.placements.is_empty() {
        out.push_str("no placements\n");
    } else {
        let rows: Vec<Vec<String>> = plan
            .placements
            .iter()
            .map(|p| {
                vec![
                    p.job.clone(),
                    p.region.clone(),
                    p.size.clone(),
                    p.priority.to_string(),
                    p.vms.to_string(),
                    p.gpus.to_string(),
                    format!("{:.3}", p.price_per_hour),
                    super::client::usd(p.expected_cost),
                ]
            })
            .collect();
        out.push_str(&table::render(
            &["JOB", "REGION", "SIZE", "PRIORITY", "VMS", "GPUS", "USD/H", "EXPECTED USD"],
            &rows,
        ));
    }
    if !plan.unplaced.is_empty() {
        out.push_str(&format!("\nnot placed ({}):\n", plan.unplaced.len()));
        for u in &plan.unplaced {
            out.push_str(&format!("  {}\n", u.job));
            for r in &u.reasons {
                out.push_str(&format!("    - {r}\n"));
            }
        }
    }
    let proof = if plan.optimal { "optimal".to_string() } else { format!("gap {:.4} %", plan.gap * 100.0) };
    out.push_str(&format!(
        "\nplaced weight {}, expected cost {} USD; solver {}, {proof}, {:.1} ms\n",
        plan.placed_weight,
        super::client::usd(plan.expected_cost),
        plan.solver,
        plan.solve_ms
    ));
    out
}

#[cfg(test)]
mod budget_tests {
    use std::time::Duration;

    use super::solve_budget_ms;

    /// The reading, the writing (twice as long again) and the process's start and exit come out
    /// of the command's limit, and a limit they use up leaves the solve nothing (it then returns
    /// its first plan) rather than wrapping around.
    #[test]
    fn the_solve_gets_the_limit_less_the_reading_the_writing_and_the_process() {
        assert_eq!(solve_budget_ms(100, Duration::from_millis(13)), 51);
        assert_eq!(solve_budget_ms(100, Duration::from_micros(1_800)), 87);
        assert_eq!(solve_budget_ms(50, Duration::from_millis(13)), 1);
        assert_eq!(solve_budget_ms(45, Duration::from_millis(13)), 0);
        assert_eq!(solve_budget_ms(0, Duration::ZERO), 0);
    }
}
