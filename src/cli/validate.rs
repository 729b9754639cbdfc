//! `spillway validate FILE`: parse and check a job spec or a pipeline without submitting it.

use std::path::Path;
use std::process::ExitCode;

use scheduler::Catalog;
use scheduler::model::{FieldErrors, JobSpec, PipelineSpec, SpecFormat};

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
    let format = SpecFormat::detect(&path, &content);
    let now = time::OffsetDateTime::now_utc();
    // A file with a `jobs` list is a pipeline (unreadable files go the job spec's way, which says why).
    if PipelineSpec::value_of(&content, format).is_ok_and(|v| PipelineSpec::is_pipeline(&v)) {
        return match PipelineSpec::parse_checked(&content, format, catalog, now) {
            Ok(p) => {
                let json = serde_json::to_string_pretty(&p).expect("a pipeline always serialises");
                match (output, toml::to_string(&p)) {
                    (Output::Table, Ok(t)) => print!("{t}"),
                    _ => println!("{json}"),
                }
                ExitCode::SUCCESS
            }
            Err(errors) => {
                report(&path, &errors, output);
                ExitCode::from(1)
            }
        };
    }
    let result = JobSpec::parse_checked(&content, format, catalog, now);
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
