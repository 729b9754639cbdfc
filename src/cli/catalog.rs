//! `spillway catalog`: the sizes, regions and prices the scheduler chooses from.

use std::process::ExitCode;

use scheduler::Catalog;

use super::table;
use crate::Output;

/// Prints the catalog, filtered; exit 1 when a filter names something the catalog lacks.
pub fn run(catalog: &Catalog, gpu: Option<&str>, region: Option<&str>, output: Output) -> ExitCode {
    if let Some(g) = gpu
        && !catalog.sizes().iter().any(|s| s.matches_gpu_model(g))
    {
        eprintln!("error: --gpu: unknown GPU model {g:?}; known: {}", catalog.gpu_models().join(", "));
        return ExitCode::from(1);
    }
    if let Some(r) = region
        && !catalog.regions().iter().any(|x| x == r)
    {
        eprintln!("error: --region: unknown region {r:?}; known: {}", catalog.regions().join(", "));
        return ExitCode::from(1);
    }
    let entries = catalog.entries(gpu, region);
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&entries).expect("entries serialise")),
        Output::Table => {
            let rows: Vec<Vec<String>> = entries
                .iter()
                .map(|e| {
                    let gpus = match &e.gpu_fraction {
                        Some(f) => format!("{f} {}", e.gpu_model),
                        None => format!("{}x {}", e.gpus, e.gpu_model),
                    };
                    vec![
                        e.size.clone(),
                        e.region.clone(),
                        e.priority.to_string(),
                        table::price(e.price_per_hour),
                        gpus,
                        e.vcpus.to_string(),
                        e.family.clone(),
                        if e.infiniband { "yes".into() } else { "no".into() },
                    ]
                })
                .collect();
            print!(
                "{}",
                table::render(&["SIZE", "REGION", "PRIORITY", "USD/H", "GPUS", "VCPUS", "FAMILY", "IB"], &rows)
            );
        }
    }
    ExitCode::SUCCESS
}
