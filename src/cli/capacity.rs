//! `spillway capacity` (quota pools per region, blocked offers, unhealthy regions) and `spillway plan`
//! without `--problem` (what the server's solver would do now), both read from a running server.

use std::process::ExitCode;

use clap::Args;

use super::client::{Client, ClientArgs, ClientError, ServerArgs, cell, print_json, when};
use crate::Output;

/// Arguments of `spillway capacity`.
#[derive(Args, Debug)]
pub struct CapacityArgs {
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Runs `spillway capacity`.
pub fn run(args: CapacityArgs) -> ExitCode {
    super::client::run(capacity(args))
}

async fn capacity(args: CapacityArgs) -> Result<ExitCode, ClientError> {
    let client = Client::from_args(&args.client.server)?;
    let v = client.get("/v1/capacity").await?;
    if args.client.output == Output::Json {
        print_json(&v);
        return Ok(ExitCode::SUCCESS);
    }
    let pools = v["pools"].as_array().cloned().unwrap_or_default();
    if pools.is_empty() {
        println!("no quota read yet (the control loop reads it on its first round)");
    } else {
        let rows: Vec<Vec<String>> = pools
            .iter()
            .map(|p| {
                let used = p["used_by_others"].as_u64().unwrap_or(0) + p["used_by_us"].as_u64().unwrap_or(0);
                vec![
                    cell(p, "region"),
                    cell(p, "pool"),
                    cell(p, "limit"),
                    used.to_string(),
                    cell(p, "used_by_us"),
                    cell(p, "in_flight"),
                    cell(p, "free"),
                ]
            })
            .collect();
        println!("quota (vCPUs):");
        print!(
            "{}",
            super::table::render(&["REGION", "POOL", "LIMIT", "USED", "BY SPILLWAY", "IN FLIGHT", "FREE"], &rows)
        );
    }
    let blocked = v["blocked_offers"].as_array().cloned().unwrap_or_default();
    if blocked.is_empty() {
        println!("\nno blocked offers");
    } else {
        let rows: Vec<Vec<String>> = blocked
            .iter()
            .map(|b| {
                vec![
                    cell(b, "region"),
                    b["size"].as_str().or(b["family"].as_str()).unwrap_or("*").to_string(),
                    b["priority"].as_str().unwrap_or("both").to_string(),
                    cell(b, "class"),
                    when(b["until_ms"].as_i64()),
                    cell(b, "reason"),
                ]
            })
            .collect();
        println!("\nblocked offers:");
        print!("{}", super::table::render(&["REGION", "SIZE/FAMILY", "PRIORITY", "CLASS", "UNTIL", "REASON"], &rows));
    }
    let regions = v["regions"].as_array().cloned().unwrap_or_default();
    if regions.is_empty() {
        println!("\nall regions healthy");
    } else {
        println!("\nunhealthy regions:");
        for r in regions {
            println!("  {}  {}", cell(&r, "region"), r["breaker"]);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `spillway plan` without `--problem`: asks the server (`GET /v1/plan`) what its solver would
/// do with the open work now, and prints it like a local plan.
pub fn run_remote_plan(server: &ServerArgs, output: Output) -> ExitCode {
    super::client::run(remote_plan(server.clone(), output))
}

async fn remote_plan(server: ServerArgs, output: Output) -> Result<ExitCode, ClientError> {
    let client = Client::from_args(&server)?;
    let v = client.get("/v1/plan").await?;
    match output {
        Output::Json => print_json(&v),
        Output::Table => {
            let plan: solver::Plan = serde_json::from_value(v).map_err(|e| {
                ClientError(format!("spillway at {} sent a plan this CLI cannot read: {e}", client.base()))
            })?;
            print!("{}", super::plan::render(&plan));
        }
    }
    Ok(ExitCode::SUCCESS)
}
