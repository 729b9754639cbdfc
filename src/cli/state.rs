//! `spillway state export FILE | import FILE | check`: backup, recovery and verification of the
//! durable store in `--data-dir`.

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use state::{CheckReport, Store};

use crate::Output;

/// Where the store lives.
#[derive(clap::Args)]
pub struct DataDir {
    /// The data directory (created with mode 0700 when missing).
    #[arg(long, env = "SPILLWAY_DATA_DIR", default_value = "./spillway-data")]
    pub data_dir: PathBuf,
}

/// The `state` subcommands.
#[derive(clap::Subcommand)]
pub enum StateCommand {
    /// Write every table, setting and event to FILE as JSON lines (`-` for stdout).
    Export {
        /// The export file; written to FILE.tmp, then renamed.
        file: PathBuf,
        #[command(flatten)]
        dir: DataDir,
    },
    /// Load an export (`-` for stdin) into a data directory that is new or empty, rebuilding indexes.
    Import {
        /// The export file.
        file: PathBuf,
        #[command(flatten)]
        dir: DataDir,
    },
    /// Verify every index against its table and every stored value; exit 1 on any problem.
    Check {
        #[command(flatten)]
        dir: DataDir,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
}

/// Runs one `state` subcommand; 0 on success, 1 when refused or inconsistent.
pub fn run(command: StateCommand) -> ExitCode {
    let result = match command {
        StateCommand::Export { file, dir } => export(&dir.data_dir, &file),
        StateCommand::Import { file, dir } => import(&dir.data_dir, &file),
        StateCommand::Check { dir, output } => check(&dir.data_dir, output),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(1)
        }
    }
}

/// Opens an existing store; export and check must not create an empty one by accident.
fn open_existing(dir: &Path) -> Result<Store, String> {
    if !dir.exists() {
        return Err(format!("no state store at {} (set --data-dir or SPILLWAY_DATA_DIR)", dir.display()));
    }
    Store::open(dir).map_err(|e| e.to_string())
}

fn export(dir: &Path, file: &Path) -> Result<ExitCode, String> {
    let store = open_existing(dir)?;
    if file == Path::new("-") {
        let summary = store.export(std::io::stdout().lock()).map_err(|e| e.to_string())?;
        eprintln!(
            "exported {} tables, {} records, {} settings, {} events from {}",
            summary.tables,
            summary.records,
            summary.settings,
            summary.events,
            dir.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    // A crash mid-export must not leave a truncated file under the name a restore would use.
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let write = || -> Result<state::DumpSummary, String> {
        // The export holds every record, token hashes included: readable by its owner only.
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
        let summary = store.export(&mut f).map_err(|e| e.to_string())?;
        f.flush().and_then(|_| f.sync_all()).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, file)
            .map_err(|e| format!("cannot rename {} to {}: {e}", tmp.display(), file.display()))?;
        Ok(summary)
    };
    let summary = write().inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })?;
    println!(
        "exported {} tables, {} records, {} settings, {} events from {} to {}",
        summary.tables,
        summary.records,
        summary.settings,
        summary.events,
        dir.display(),
        file.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn import(dir: &Path, file: &Path) -> Result<ExitCode, String> {
    let input: Box<dyn Read> = if file == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(BufReader::new(File::open(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?))
    };
    let created = !dir.exists();
    let result = Store::open(dir).and_then(|store| store.import(input));
    match result {
        Ok(summary) => {
            println!(
                "imported {} tables, {} records, {} settings, {} events into {}",
                summary.tables,
                summary.records,
                summary.settings,
                summary.events,
                dir.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) if created && dir.exists() => {
            // The directory is ours and holds only the failed import: leave nothing half-made behind.
            let cleanup = match std::fs::remove_dir_all(dir) {
                Ok(()) => format!("removed {}", dir.display()),
                Err(r) => format!("could not remove {}: {r}", dir.display()),
            };
            Err(format!("{e} ({cleanup})"))
        }
        Err(e) => Err(e.to_string()),
    }
}

fn check(dir: &Path, output: Output) -> Result<ExitCode, String> {
    let store = open_existing(dir)?;
    let report = store.check_all().map_err(|e| e.to_string())?;
    match output {
        Output::Json => {
            let json = serde_json::json!({ "consistent": report.is_consistent(), "report": report });
            println!("{json}");
        }
        Output::Table => print_report(dir, &report),
    }
    Ok(if report.is_consistent() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn print_report(dir: &Path, report: &CheckReport) {
    println!("state store {}", dir.display());
    for t in &report.tables {
        println!("  table {:<20} {:>8} records", t.name, t.records);
        for ix in &t.indexes {
            println!(
                "    index {:<16} {:<24} {:>8} entries, {} missing, {} stale",
                ix.name, ix.pointer, ix.entries, ix.missing, ix.stale
            );
        }
    }
    println!("  events {}, settings {}", report.events, report.settings);
    if report.is_consistent() {
        println!("consistent");
    } else {
        println!("{} problem(s):", report.problem_count);
        for p in &report.problems {
            println!("  {p}");
        }
        if report.problem_count as usize > report.problems.len() {
            println!("  ... and {} more", report.problem_count as usize - report.problems.len());
        }
    }
}
