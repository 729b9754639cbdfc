//! `spillway validate FILE`: parse and check a job spec without submitting it.

use std::path::Path;
use std::process::ExitCode;

use scheduler::Catalog;
use scheduler::model::{FieldErrors, JobSpec, SpecFormat};

use crate::Output;

/// Exit 0 and the normalised spec, or exit 1 and every problem, one per line, each naming its field.
pub fn run(catalog: &Catalog, file: &Path, output: Output) -> ExitCode {
    let path = file.display().to_string();
    let content = match std::fs::read_to_string(file) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot read {path}: {e}");
            return ExitCode::from(1);
        }
    };
    let result =
        JobSpec::parse_checked(&content, SpecFormat::detect(&path, &content), catalog, time::OffsetDateTime::now_utc());
    match result {
        Ok(spec) => {
            match output {
                Output::Json => println!("{}", spec.to_json_pretty()),
                Output::Table => print!("{}", spec.to_toml()),
            }
            ExitCode::SUCCESS
        }
        Err(errors) => {
            report(&path, &errors, output);
            ExitCode::from(1)
        }
    }
}

fn report(path: &str, errors: &FieldErrors, output: Output) {
    match output {
        Output::Json => println!("{}", serde_json::json!({"valid": false, "file": path, "errors": errors.0})),
        Output::Table => {
            eprintln!("{path}: {} problem(s)", errors.0.len());
            for e in &errors.0 {
                eprintln!("  {e}");
            }
        }
    }
}
