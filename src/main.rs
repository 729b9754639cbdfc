//! The `spillway` command line: parses arguments and hands each command to its module in `cli/`.
//! No scheduling logic lives here.

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// Capacity-aware multi-region GPU job scheduler for Azure.
#[derive(Parser)]
#[command(name = "spillway", version, about)]
struct Args {
    /// A catalog file that extends (or, with `mode = "replace"`, replaces) the built-in one.
    #[arg(long, global = true, env = "SPILLWAY_CATALOG")]
    catalog: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// How results are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Default)]
pub enum Output {
    /// Aligned columns for people.
    #[default]
    Table,
    /// JSON for scripts.
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// List VM sizes × regions × priorities with their prices.
    Catalog {
        /// Only this GPU model (exact, e.g. A100-80GB, or a family such as A100).
        #[arg(long)]
        gpu: Option<String>,
        /// Only this region.
        #[arg(long)]
        region: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Check a job spec (TOML or JSON); print it normalised, or every problem with its field.
    Validate {
        /// The spec file.
        file: PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Solve a placement problem (JSON, see README) and print the plan with the reasons jobs wait.
    Plan {
        /// The problem file; without it, asks the running server what its solver would do now.
        #[arg(long)]
        problem: Option<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        output: Output,
        /// Solver method.
        #[arg(long = "solver", value_enum, default_value_t)]
        method: cli::plan::SolverArg,
        /// Time limit of the whole command, in milliseconds (reading the problem and writing the
        /// plan included): the best plan found by then, its gap against the bound proven by then.
        #[arg(long)]
        time_limit_ms: Option<u64>,
        /// Server to ask when no --problem is given.
        #[command(flatten)]
        server: cli::client::ServerArgs,
    },
    /// Which quota to ask Azure for, where, and what it buys, ready to file: from a plan problem,
    /// a what-if scenario, or the running server's pending work.
    Advise(cli::advise::AdviseArgs),
    /// Run a simulator experiment file (its `[experiment] kind`: spot-deadline, what-if); with no
    /// file, the bundled `default` what-if scenario.
    Simulate {
        /// The experiment file (TOML); trace paths in it are relative to its directory.
        file: Option<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        output: Output,
        /// What-if: also write a self-contained HTML report (charts per policy) to this file.
        #[arg(long)]
        report: Option<PathBuf>,
        /// What-if: replace the scenario's seed.
        #[arg(long)]
        seed: Option<u64>,
        /// What-if: write 0 as `wall_ms`, so the same scenario and seed give byte-identical output.
        #[arg(long)]
        no_timing: bool,
    },
    /// Back up (export), restore (import) and verify (check) the durable state in `--data-dir`.
    State {
        #[command(subcommand)]
        action: cli::state::StateCommand,
    },
    /// Run the HTTP API and the control loop (simulated cloud by default, `--cloud azure` for Azure).
    Serve(cli::serve::ServeArgs),
    /// Submit a job spec or a pipeline (TOML or JSON; a file with a `jobs` list is a pipeline).
    Submit(cli::submit::SubmitArgs),
    /// List jobs on the server.
    Jobs(cli::jobs::JobsArgs),
    /// List pipelines on the server.
    Pipelines(cli::pipelines::PipelinesArgs),
    /// Everything about one job (state, placement, attempts, events, cost, why it waits), or a
    /// pipeline's graph with each job's state (for a pipeline id, `p-…`).
    Status(cli::status::StatusArgs),
    /// Cancel a job, or every job of a pipeline that has not ended (for a pipeline id).
    Cancel(cli::cancel::JobIdArgs),
    /// Mark a running job's work as done.
    Complete(cli::cancel::JobIdArgs),
    /// Quota pools per region, blocked offers, unhealthy regions.
    Capacity(cli::capacity::CapacityArgs),
    /// Create, list and revoke API tokens (admin).
    Token(cli::token::TokenArgs),
    /// Set or clear a tenant's budget in USD (admin), or list every tenant's spend and budget.
    Budget(cli::budget::BudgetArgs),
    /// Print the link that opens the web dashboard signed in (the token in the URL fragment).
    DashboardUrl(cli::dashboard_url::DashboardUrlArgs),
    /// Serve a simulated cloud with Azure Resource Manager's API on loopback (for testing Azure clients).
    EmulateArm(cli::emulate_arm::EmulateArmArgs),
    /// A job's output: every rank of every attempt, or with --follow its new lines until it ends.
    Logs(cli::logs::LogsArgs),
    /// The node agent every VM of an attempt runs (started by the fleet's cloud-init).
    Agent(cli::agent::AgentArgs),
}

/// mimalloc, not the system allocator: a what-if run allocates and frees many small records every
/// round, and glibc's malloc made the whole Philly trace about 1.5x slower (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // No transparent huge pages: mimalloc asks for them, and every fresh 2 MiB page is zeroed at
    // its first touch. The solver frees and reallocates megabytes at a time, and on this machine
    // (THP "madvise") that zeroing made a 10,000-job plan take 1.66-2.34 s instead of 1.65-1.75 s
    // and the default what-if run 5.1 s instead of 4.7 s (BENCHMARKS.md, session 49).
    #[cfg(target_os = "linux")]
    // SAFETY: a process-wide flag for the kernel's page faults; no memory is touched.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
    let args = Args::parse();
    // A CLI piped into `head` must stop quietly when the pipe closes, not panic in `println!`.
    // Servers must not: with SIGPIPE's default action, a client closing its connection during a
    // vectored socket write (`writev` has no MSG_NOSIGNAL) killed `spillway serve` (found by
    // `fuzz/http_fuzz.sh`), so they keep Rust's default of ignoring it.
    #[cfg(unix)]
    if !matches!(args.command, Command::Serve(_) | Command::EmulateArm(_) | Command::Agent(_)) {
        // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let catalog = match scheduler::Catalog::load(args.catalog.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match args.command {
        Command::Catalog { gpu, region, output } => {
            cli::catalog::run(&catalog, gpu.as_deref(), region.as_deref(), output)
        }
        Command::Validate { file, output } => cli::validate::run(&catalog, &file, output),
        Command::Plan { problem: Some(problem), output, method, time_limit_ms, .. } => {
            cli::plan::run(&problem, output, method, time_limit_ms)
        }
        Command::Plan { problem: None, output, server, .. } => cli::capacity::run_remote_plan(&server, output),
        Command::Advise(a) => cli::advise::run(&catalog, a),
        Command::State { action } => cli::state::run(action),
        Command::Serve(a) => cli::serve::run(&catalog, a),
        Command::Submit(a) => cli::submit::run(a),
        Command::Jobs(a) => cli::jobs::run(a),
        Command::Pipelines(a) => cli::pipelines::run(a),
        Command::Status(a) => cli::status::run(a),
        Command::Cancel(a) => cli::cancel::cancel(a),
        Command::Complete(a) => cli::cancel::complete(a),
        Command::Capacity(a) => cli::capacity::run(a),
        Command::Token(a) => cli::token::run(a),
        Command::DashboardUrl(a) => cli::dashboard_url::run(a),
        Command::Budget(a) => cli::budget::run(a),
        Command::EmulateArm(a) => cli::emulate_arm::run(&catalog, a),
        Command::Logs(a) => cli::logs::run(a),
        Command::Agent(a) => cli::agent::run(a),
        Command::Simulate { file, output, report, seed, no_timing } => {
            cli::simulate::run_with(file.as_deref(), output, &cli::simulate::WhatIfArgs { report, seed, no_timing })
        }
    }
}
