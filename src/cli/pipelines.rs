//! Pipelines in the CLI: `spillway pipelines [--state S] [--tenant T] [--limit N] [--all]` (a table
//! of the newest N, or with `--all` every one, read page by page as `spillway jobs` does), and the
//! pipeline side of `spillway submit` (a file with a `jobs` list), `spillway status p-…` (the graph with each job's state) and
//! `spillway cancel p-…`.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use reqwest::Method;
use serde_json::Value;

use super::client::{Client, ClientArgs, ClientError, cell, clock_line, encode, print_json, usd, when};
use crate::Output;

/// Arguments of `spillway pipelines`.
#[derive(Args, Debug)]
pub struct PipelinesArgs {
    /// Only pipelines in this state (pending, running, succeeded, failed, cancelled).
    #[arg(long)]
    pub state: Option<String>,
    /// Only this tenant's pipelines.
    #[arg(long)]
    pub tenant: Option<String>,
    /// At most this many of the newest pipelines (with --all: pipelines read per request).
    #[arg(long, default_value_t = 200)]
    pub limit: usize,
    /// Every pipeline, read page by page back to the oldest (the server lists at most 100,000 at a time).
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Whether an id names a pipeline (pipeline ids begin with `p-`, job ids with `j-`).
pub fn is_pipeline_id(id: &str) -> bool {
    id.starts_with("p-")
}

/// Runs `spillway pipelines`.
pub fn run(args: PipelinesArgs) -> ExitCode {
    super::client::run(list(args))
}

async fn list(args: PipelinesArgs) -> Result<ExitCode, ClientError> {
    let client = Client::from_args(&args.client.server)?;
    let mut q = vec![format!("limit={}", args.limit)];
    if let Some(s) = &args.state {
        q.push(format!("state={}", encode(s)));
    }
    if let Some(t) = &args.tenant {
        q.push(format!("tenant={}", encode(t)));
    }
    let page = client.list("/v1/pipelines", "pipelines", &q, args.all).await?;
    if args.client.output == Output::Json {
        print_json(&page);
        return Ok(ExitCode::SUCCESS);
    }
    let pipelines = page["pipelines"].as_array().cloned().unwrap_or_default();
    if pipelines.is_empty() {
        println!("no pipelines");
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = pipelines
        .iter()
        .map(|p| {
            let jobs = p["jobs"].as_array().cloned().unwrap_or_default();
            let done = jobs.iter().filter(|j| j["state"] == "succeeded").count();
            vec![
                cell(p, "id"),
                cell(p, "name"),
                cell(p, "tenant"),
                cell(p, "state"),
                format!("{done}/{}", jobs.len()),
                usd(p["cost_usd"].as_f64().unwrap_or(0.0)),
                when(p["submitted_at_ms"].as_i64()),
            ]
        })
        .collect();
    print!("{}", super::table::render(&["ID", "NAME", "TENANT", "STATE", "DONE", "COST $", "SUBMITTED"], &rows));
    if page["truncated"].as_bool() == Some(true) {
        println!(
            "({} of {} pipelines shown, the newest; --all for every one, or --limit)",
            pipelines.len(),
            page["total"]
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `spillway submit` of a pipeline file: prints the pipeline; with `wait`, follows it to its end
/// (exit 1 unless it succeeded).
pub async fn submit(
    client: &Client,
    spec: &Value,
    headers: &[(&str, &str)],
    wait: bool,
    output: Output,
) -> Result<ExitCode, ClientError> {
    let (status, mut p) = client.send(Method::POST, "/v1/pipelines", Some(spec), headers).await?;
    let id = cell(&p, "id");
    if output == Output::Table {
        let again =
            if status == reqwest::StatusCode::OK { " (already submitted with this idempotency key)" } else { "" };
        println!(
            "submitted pipeline {id} ({}) for tenant {}: {} jobs{again}",
            cell(&p, "name"),
            cell(&p, "tenant"),
            p["jobs"].as_array().map_or(0, Vec::len)
        );
        print_graph(&p);
    }
    if wait {
        let mut last = String::new();
        while !matches!(p["state"].as_str(), Some("succeeded" | "failed" | "cancelled")) {
            tokio::time::sleep(Duration::from_secs(2)).await;
            p = client.get(&format!("/v1/pipelines/{}", encode(&id))).await?;
            let line = job_states(&p);
            if output == Output::Table && line != last {
                println!("  {line}");
                last = line;
            }
        }
        if output == Output::Table {
            println!("{id} is {}", cell(&p, "state"));
        }
    }
    if output == Output::Json {
        print_json(&p);
    }
    Ok(if wait && p["state"] != "succeeded" { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn job_states(p: &Value) -> String {
    p["jobs"]
        .as_array()
        .map(|js| js.iter().map(|j| format!("{} {}", cell(j, "name"), cell(j, "state"))).collect::<Vec<_>>().join(", "))
        .unwrap_or_default()
}

/// The graph: each job with its state, what it waits for and why.
fn print_graph(p: &Value) {
    let rows: Vec<Vec<String>> = p["jobs"]
        .as_array()
        .map(|js| {
            js.iter()
                .map(|j| {
                    let deps = j["depends_on"]
                        .as_array()
                        .map(|d| d.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
                        .unwrap_or_default();
                    let why = j["pending_reasons"]
                        .as_array()
                        .map(|r| r.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("; "))
                        .filter(|s| !s.is_empty())
                        .or_else(|| j["end_reason"].as_str().map(str::to_string))
                        .unwrap_or_default();
                    vec![
                        cell(j, "name"),
                        cell(j, "id"),
                        if j["state"].is_null() { "forgotten".into() } else { cell(j, "state") },
                        if deps.is_empty() { "-".into() } else { deps },
                        usd(j["cost_usd"].as_f64().unwrap_or(0.0)),
                        why,
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    print!("{}", super::table::render(&["JOB", "ID", "STATE", "AFTER", "COST $", "WHY"], &rows));
}

/// `spillway status p-…`: the pipeline and its graph.
pub async fn status(client: &Client, id: &str, output: Output) -> Result<ExitCode, ClientError> {
    let p = client.get(&format!("/v1/pipelines/{}", encode(id))).await?;
    if output == Output::Json {
        print_json(&p);
        return Ok(ExitCode::SUCCESS);
    }
    println!("pipeline  {}  ({})", cell(&p, "id"), cell(&p, "name"));
    println!("state     {}", cell(&p, "state"));
    println!("tenant    {}", cell(&p, "tenant"));
    println!("clock     {}", clock_line(&p));
    println!("submitted {}", when(p["submitted_at_ms"].as_i64()));
    let spent = usd(p["cost_usd"].as_f64().unwrap_or(0.0));
    match p["budget_usd"].as_f64() {
        Some(budget) => println!("cost      ${spent} of its ${} budget", usd(budget)),
        None => println!("cost      ${spent}"),
    }
    if let Some(by) = p["cancelled_by"].as_str() {
        println!("cancelled by {by}");
    }
    println!();
    print_graph(&p);
    println!("\n(`spillway status JOB-ID` for a job's placements and events)");
    Ok(ExitCode::SUCCESS)
}

/// `spillway cancel p-…`.
pub async fn cancel(client: &Client, id: &str, output: Output) -> Result<ExitCode, ClientError> {
    let (_, p) = client.send(Method::DELETE, &format!("/v1/pipelines/{}", encode(id)), None, &[]).await?;
    match output {
        Output::Json => print_json(&p),
        Output::Table => println!("{} is {}", cell(&p, "id"), cell(&p, "state")),
    }
    Ok(ExitCode::SUCCESS)
}
