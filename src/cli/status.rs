//! `spillway status ID`: everything about one job, readable.

use std::process::ExitCode;

use clap::Args;
use serde_json::Value;

use super::client::{Client, ClientArgs, ClientError, cell, clock_line, encode, print_json, usd, when};
use crate::Output;

/// Arguments of `spillway status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The job id, or a pipeline id (`p-…`).
    pub id: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Runs `spillway status`.
pub fn run(args: StatusArgs) -> ExitCode {
    super::client::run(status(args))
}

/// An attempt's priority: `spot` or `regular`, or for a mixed fleet both parts' VMs
/// (`mixed: 2 regular + 3 spot`).
fn priority_cell(a: &Value) -> String {
    match a["regular"]["vms"].as_u64() {
        Some(regular) => {
            let spot = a["vms"].as_u64().unwrap_or(0).saturating_sub(regular);
            format!("mixed: {regular} regular + {spot} spot")
        }
        None => cell(a, "priority"),
    }
}

/// USD per hour of every VM an attempt asked for, each part of a mixed fleet at its own price.
fn usd_per_hour(a: &Value) -> f64 {
    let vms = a["vms"].as_u64().unwrap_or(0);
    let regular = a["regular"]["vms"].as_u64().unwrap_or(0);
    let regular_price = a["regular"]["price_per_hour"].as_f64().unwrap_or(0.0);
    a["price_per_hour"].as_f64().unwrap_or(0.0) * vms.saturating_sub(regular) as f64 + regular_price * regular as f64
}

fn placement_line(a: &Value) -> String {
    let (vms, running) = (a["vms"].as_u64().unwrap_or(0), a["running_vms"].as_u64().unwrap_or(0));
    let up = if a["state"] == "running" && running != vms { format!(" ({running} running)") } else { String::new() };
    format!(
        "{vms} × {} ({}) in {}{up}, {} GPUs, ${}/h, fleet {} (attempt {}, {})",
        cell(a, "size"),
        priority_cell(a),
        cell(a, "region"),
        cell(a, "gpus"),
        usd(usd_per_hour(a)),
        cell(a, "fleet_name"),
        cell(a, "number"),
        cell(a, "state"),
    )
}

async fn status(args: StatusArgs) -> Result<ExitCode, ClientError> {
    let client = Client::from_args(&args.client.server)?;
    if super::pipelines::is_pipeline_id(&args.id) {
        return super::pipelines::status(&client, &args.id, args.client.output).await;
    }
    let d = client.get(&format!("/v1/jobs/{}", encode(&args.id))).await?;
    if args.client.output == Output::Json {
        print_json(&d);
        return Ok(ExitCode::SUCCESS);
    }
    let job = &d["job"];
    let spec = &job["spec"];
    let finished = job["finished_at_ms"].is_i64();
    println!("job       {}  ({})", cell(job, "id"), cell(spec, "name"));
    println!("state     {}", cell(job, "state"));
    println!("tenant    {}   kind {}   priority {}", cell(spec, "tenant"), cell(spec, "kind"), cell(spec, "priority"));
    let models =
        spec["gpu_models"].as_array().map(|m| m.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join(", "));
    let gpus = match (spec["replicas"]["desired"].as_u64(), spec["gpus"].as_u64()) {
        (Some(r), Some(g)) => format!("{} GPUs ({r} replicas × {g})", r * g),
        _ => format!("{} GPUs", cell(spec, "gpus")),
    };
    println!("wants     {gpus}{}", models.map(|m| format!(" of {m}")).unwrap_or_default());
    println!("clock     {}", clock_line(&d));
    match spec["run"].as_str() {
        Some(_) => println!(
            "work      runs a script on every VM (max_restarts {})",
            spec["max_restarts"].as_u64().unwrap_or(0)
        ),
        None => println!(
            "work      capacity-only (no `run`: ended by `spillway complete`, or in the simulated cloud by duration_hours)"
        ),
    }
    println!("submitted {}", when(job["submitted_at_ms"].as_i64()));
    if job["first_running_at_ms"].is_i64() {
        println!("first ran {}", when(job["first_running_at_ms"].as_i64()));
    }
    if finished {
        println!("finished  {}", when(job["finished_at_ms"].as_i64()));
    }
    let progress = job["progress_hours"].as_f64().unwrap_or(0.0);
    let duration = spec["duration_hours"].as_f64();
    println!(
        "cost      ${} {}; progress {progress:.2} h{}",
        usd(job["cost_usd"].as_f64().unwrap_or(0.0)),
        if finished { "in all" } else { "so far" },
        duration.map(|d| format!(" of {d} h")).unwrap_or_default()
    );
    println!(
        "moves     {} failovers, {} evictions, {:.2} GPU-hours of work lost",
        cell(job, "failovers"),
        cell(job, "evictions"),
        job["lost_work_gpu_hours"].as_f64().unwrap_or(0.0)
    );
    match d["placements"].as_array().filter(|p| !p.is_empty()) {
        Some(ps) => {
            for (i, p) in ps.iter().enumerate() {
                println!("{} {}", if i == 0 { "placement" } else { "         " }, placement_line(p));
            }
        }
        None => println!("placement none"),
    }
    if let Some(reasons) = job["pending_reasons"].as_array().filter(|r| !r.is_empty()) {
        println!("waiting because:");
        for r in reasons {
            println!("  - {}", r.as_str().unwrap_or(""));
        }
    }
    if let Some(f) = job["last_failure"].as_str() {
        println!("last failure: {f}");
    }
    if let Some(r) = job["end_reason"].as_str() {
        println!("ended: {r}");
    }
    if let Some(attempts) = d["attempts"].as_array().filter(|a| !a.is_empty()) {
        println!("\nattempts (one fleet each; times on the {}):", super::client::clock_label(&d));
        let rows: Vec<Vec<String>> = attempts
            .iter()
            .map(|a| {
                vec![
                    cell(a, "number"),
                    cell(a, "region"),
                    cell(a, "size"),
                    priority_cell(a),
                    cell(a, "vms"),
                    cell(a, "state"),
                    when(a["started_at_ms"].as_i64()),
                    usd(a["cost_usd"].as_f64().unwrap_or(0.0)),
                    a["failure"].as_str().unwrap_or("").to_string(),
                ]
            })
            .collect();
        print!(
            "{}",
            super::table::render(
                &["#", "REGION", "SIZE", "PRIORITY", "VMS", "STATE", "STARTED", "COST $", "FAILURE"],
                &rows
            )
        );
    }
    if let Some(nodes) = d["nodes"].as_array().filter(|n| !n.is_empty()) {
        println!("\nranks:");
        for n in nodes {
            let exit = match (n["exit_code"].as_i64(), n["exit_signal"].as_i64()) {
                (Some(c), _) => format!("exit {c}"),
                (None, Some(sig)) => format!("signal {sig}"),
                _ => "-".into(),
            };
            let gpus = match n["gpu_utilization"].as_array() {
                Some(g) => g
                    .iter()
                    .map(|x| format!("{:.0}%", x["utilization_percent"].as_f64().unwrap_or(0.0)))
                    .collect::<Vec<_>>()
                    .join(" "),
                None => "GPUs unknown".into(),
            };
            // An elastic job's VM also has its rank in the job's world (what its run sees).
            let world = n["world_rank"].as_u64().map(|r| format!(" world rank {r:<3}")).unwrap_or_default();
            println!(
                "  a{} rank {:<3}{world} {:<28} {:<15} {:<8} {:<9} heartbeat {}  {}{}",
                cell(n, "attempt"),
                cell(n, "rank"),
                cell(n, "vm_name"),
                cell(n, "private_ip"),
                cell(n, "phase"),
                exit,
                when(n["last_heartbeat_ms"].as_i64()),
                gpus,
                if n["log_truncated"] == true { "  (log truncated)" } else { "" }
            );
        }
    }
    if let Some(events) = d["events"].as_array().filter(|e| !e.is_empty()) {
        println!("\nevents (times on the {}):", super::client::clock_label(&d));
        for e in events {
            println!(
                "  {}  {:<20} {}",
                when(e["at_ms"].as_i64()),
                cell(e, "kind"),
                e["message"].as_str().unwrap_or("")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mixed_attempt_shows_both_parts_and_its_hourly_price_at_each_parts_price() {
        let mixed = serde_json::json!({
            "priority": "spot", "vms": 5, "price_per_hour": 1.0,
            "regular": {"vms": 2, "running_vms": 2, "gpus": 2, "price_per_hour": 3.0}
        });
        assert_eq!(priority_cell(&mixed), "mixed: 2 regular + 3 spot");
        assert_eq!(usd_per_hour(&mixed), 3.0 * 1.0 + 2.0 * 3.0);
        let spot = serde_json::json!({"priority": "spot", "vms": 5, "price_per_hour": 1.0});
        assert_eq!(priority_cell(&spot), "spot");
        assert_eq!(usd_per_hour(&spot), 5.0);
    }
}
