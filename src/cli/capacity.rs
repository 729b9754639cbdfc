//! `spillway capacity` (quota pools per region, blocked offers, unhealthy regions) and `spillway plan`
//! without `--problem` (what the server's solver would do now), both read from a running server.

use std::process::ExitCode;

use clap::Args;

use super::client::{Client, ClientArgs, ClientError, ServerArgs, cell, print_json, usd, when};
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
        // A tenant-bound token sees its own use, not spillway's total nor other users'.
        let tenant_view = pools.iter().any(|p| p.get("used_by_tenant").is_some());
        let rows: Vec<Vec<String>> = pools
            .iter()
            .map(|p| {
                if tenant_view {
                    return vec![
                        cell(p, "region"),
                        cell(p, "pool"),
                        cell(p, "limit"),
                        cell(p, "used_by_tenant"),
                        cell(p, "free"),
                    ];
                }
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
        let header: &[&str] = if tenant_view {
            &["REGION", "POOL", "LIMIT", "YOURS", "FREE"]
        } else {
            &["REGION", "POOL", "LIMIT", "USED", "BY SPILLWAY", "IN FLIGHT", "FREE"]
        };
        print!("{}", super::table::render(header, &rows));
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
        println!("\nblocked offers (until: on the scheduler's clock, UTC):");
        print!("{}", super::table::render(&["REGION", "SIZE/FAMILY", "PRIORITY", "CLASS", "UNTIL", "REASON"], &rows));
    }
    let regions = v["regions"].as_array().cloned().unwrap_or_default();
    if regions.is_empty() {
        println!("\nall regions healthy");
    } else {
        println!("\nunhealthy regions:");
        for r in regions {
            let until =
                r["breaker"]["until_ms"].as_i64().map(|t| format!(" until {}", when(Some(t)))).unwrap_or_default();
            println!("  {}  breaker {}{until}", cell(&r, "region"), cell(&r["breaker"], "state"));
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
            let plan: scheduler::api::views::PlanView = serde_json::from_value(v).map_err(|e| {
                ClientError(format!("spillway at {} sent a plan this CLI cannot read: {e}", client.base()))
            })?;
            print!("{}", render_plan(&plan));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The server's plan as a table, like a local plan, with inference parts named.
fn render_plan(plan: &scheduler::api::views::PlanView) -> String {
    use scheduler::api::views::DemandPartView;
    let job = |id: &str, part: Option<DemandPartView>| match part {
        None => id.to_string(),
        Some(DemandPartView::Min) => format!("{id} (to min replicas)"),
        Some(DemandPartView::Extra) => format!("{id} (above min replicas)"),
        Some(DemandPartView::Base) => format!("{id} (regular base)"),
    };
    let mut out = String::new();
    if plan.placements.is_empty() {
        out.push_str("no placements\n");
    } else {
        let rows: Vec<Vec<String>> = plan
            .placements
            .iter()
            .map(|p| {
                vec![
                    job(&p.job, p.part),
                    p.region.clone(),
                    p.size.clone(),
                    format!("{:?}", p.priority).to_lowercase(),
                    p.vms.to_string(),
                    p.gpus.to_string(),
                    format!("{:.3}", p.price_per_hour),
                    usd(p.expected_cost),
                ]
            })
            .collect();
        out.push_str(&super::table::render(
            &["JOB", "REGION", "SIZE", "PRIORITY", "VMS", "GPUS", "USD/H", "EXPECTED USD"],
            &rows,
        ));
    }
    if !plan.unplaced.is_empty() {
        out.push_str(&format!("\nnot placed ({}):\n", plan.unplaced.len()));
        for u in &plan.unplaced {
            out.push_str(&format!("  {}\n", job(&u.job, u.part)));
            for r in &u.reasons {
                out.push_str(&format!("    - {r}\n"));
            }
        }
    }
    let proof = if plan.optimal { "optimal".to_string() } else { format!("gap {:.4} %", plan.gap * 100.0) };
    let weight = plan.placed_weight.map(|w| format!(", placed weight {w}")).unwrap_or_default();
    out.push_str(&format!(
        "\n{} GPUs placed{weight}, expected cost {} USD; solver {}, {proof}, {:.1} ms\n",
        plan.placed_gpus,
        usd(plan.expected_cost),
        plan.solver,
        plan.solve_ms
    ));
    out
}
