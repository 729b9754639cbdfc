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
}

fn main() -> ExitCode {
    let args = Args::parse();
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
    }
}
