//! `spillway state export FILE | import FILE | check | migrate`: backup, recovery, verification and
//! moving of the durable store (`--store sled:DIR|postgres://…`, or the sled store in `--data-dir`).

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use state::{CheckReport, Store, StoreLocation};

use crate::Output;

/// Where the store lives.
#[derive(clap::Args)]
pub struct DataDir {
    /// The data directory of a sled store (created with mode 0700 when missing).
    #[arg(long, env = "SPILLWAY_DATA_DIR", default_value = "./spillway-data")]
    pub data_dir: PathBuf,
    /// The store, when not the sled store in --data-dir: `sled:DIR` or `postgres://USER@HOST/DB`.
    #[arg(long, env = "SPILLWAY_STORE")]
    pub store: Option<String>,
}

impl DataDir {
    fn location(&self) -> Result<StoreLocation, String> {
        match &self.store {
            Some(s) => s.parse().map_err(|e: String| format!("--store: {e}")),
            None => Ok(StoreLocation::Sled(self.data_dir.clone())),
        }
    }
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
    /// Copy a whole store to another (sled to PostgreSQL or back), which must be new or empty, then
    /// check both and compare them; exit 1 if they differ. Stop the servers of the source first.
    Migrate {
        /// The store to copy: `sled:DIR` or `postgres://…`.
        #[arg(long)]
        from: String,
        /// The store to fill: `sled:DIR` or `postgres://…` (new or empty).
        #[arg(long)]
        to: String,
    },
}

/// Runs one `state` subcommand; 0 on success, 1 when refused or inconsistent.
pub fn run(command: StateCommand) -> ExitCode {
    let result = match command {
        StateCommand::Export { file, dir } => dir.location().and_then(|l| export(&l, &file)),
        StateCommand::Import { file, dir } => dir.location().and_then(|l| import(&l, &file)),
        StateCommand::Check { dir, output } => dir.location().and_then(|l| check(&l, output)),
        StateCommand::Migrate { from, to } => migrate(&from, &to),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(1)
        }
    }
}

/// Opens an existing store; export and check must not create an empty sled store by accident.
fn open_existing(location: &StoreLocation) -> Result<Store, String> {
    if let Some(dir) = location.sled_dir()
        && !dir.exists()
    {
        return Err(format!("no state store at {} (set --data-dir, --store or SPILLWAY_STORE)", dir.display()));
    }
    Store::open_location(location).map_err(|e| e.to_string())
}

fn export(dir: &StoreLocation, file: &Path) -> Result<ExitCode, String> {
    let store = open_existing(dir)?;
    if file == Path::new("-") {
        let summary = store.export(std::io::stdout().lock()).map_err(|e| e.to_string())?;
        eprintln!(
            "exported {} tables, {} records, {} settings, {} events from {}",
            summary.tables, summary.records, summary.settings, summary.events, dir
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
        dir,
        file.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn import(location: &StoreLocation, file: &Path) -> Result<ExitCode, String> {
    let input: Box<dyn Read> = if file == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(BufReader::new(File::open(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?))
    };
    let created = location.sled_dir().is_some_and(|d| !d.exists());
    let result = Store::open_location(location).and_then(|store| store.import(input));
    match result {
        Ok(summary) => {
            println!(
                "imported {} tables, {} records, {} settings, {} events into {}",
                summary.tables, summary.records, summary.settings, summary.events, location
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) if created && location.sled_dir().is_some_and(Path::exists) => {
            let dir = location.sled_dir().unwrap_or(Path::new("."));
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

fn check(dir: &StoreLocation, output: Output) -> Result<ExitCode, String> {
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

fn print_report(dir: &StoreLocation, report: &CheckReport) {
    println!("state store {dir}");
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

/// Streams an export of `from` into an import of `to`, then checks both and compares what they hold.
fn migrate(from: &str, to: &str) -> Result<ExitCode, String> {
    let from: StoreLocation = from.parse().map_err(|e: String| format!("--from: {e}"))?;
    let to: StoreLocation = to.parse().map_err(|e: String| format!("--to: {e}"))?;
    let source = open_existing(&from).map_err(|e| format!("--from: {e}"))?;
    let created = to.sled_dir().is_some_and(|d| !d.exists());
    let target = Store::open_location(&to).map_err(|e| format!("--to: {e}"))?;
    let (reader, writer) = std::io::pipe().map_err(|e| format!("cannot make a pipe: {e}"))?;
    let exporter = std::thread::spawn(move || {
        let result = source.export(writer);
        (source, result)
    });
    let imported = target.import(BufReader::new(reader));
    let (source, exported) = exporter.join().map_err(|_| "the export thread panicked".to_string())?;
    let summary = match (exported, imported) {
        (Err(e), _) => return Err(format!("reading {from}: {e}")),
        (Ok(_), Err(e)) => {
            drop(target);
            let cleanup = match to.sled_dir() {
                Some(dir) if created => match std::fs::remove_dir_all(dir) {
                    Ok(()) => format!(" (removed {})", dir.display()),
                    Err(r) => format!(" (could not remove {}: {r})", dir.display()),
                },
                _ => String::new(),
            };
            return Err(format!("writing {to}: {e}{cleanup}"));
        }
        (Ok(s), Ok(_)) => s,
    };
    let before = source.check_all().map_err(|e| format!("checking {from}: {e}"))?;
    let after = target.check_all().map_err(|e| format!("checking {to}: {e}"))?;
    println!(
        "copied {} tables, {} records, {} settings, {} events from {from} to {to}",
        summary.tables, summary.records, summary.settings, summary.events
    );
    let same = serde_json::to_value(&before).ok() == serde_json::to_value(&after).ok();
    if before.is_consistent() && after.is_consistent() && same {
        println!("checked: both stores consistent and equal ({} tables, {} events)", after.tables.len(), after.events);
        return Ok(ExitCode::SUCCESS);
    }
    println!("the stores differ or are inconsistent:");
    print_report(&from, &before);
    print_report(&to, &after);
    Ok(ExitCode::from(1))
}
