//! `spillway jobs [--state S] [--tenant T] [--limit N] [--all]`: a table of jobs, the newest N, or
//! with `--all` every one (read page by page, following the API's `next` cursor). GPUS is what a job wants in all
//! (replicas × GPUs for an inference service), FLEETS the fleets created for it (one per attempt:
//! a placement, a top-up or a failover), MOVES its failovers.

use std::process::ExitCode;

use clap::Args;

use super::client::{Client, ClientArgs, ClientError, cell, encode, print_json};
use crate::Output;

/// Arguments of `spillway jobs`.
#[derive(Args, Debug)]
pub struct JobsArgs {
    /// Only jobs in this state (pending, provisioning, running, migrating, succeeded, failed, cancelled).
    #[arg(long)]
    pub state: Option<String>,
    /// Only this tenant's jobs.
    #[arg(long)]
    pub tenant: Option<String>,
    /// At most this many of the newest jobs (with --all: jobs read per request).
    #[arg(long, default_value_t = 200)]
    pub limit: usize,
    /// Every job, read page by page back to the oldest (the server lists at most 100,000 at a time).
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// GPUs a job wants in all: `replicas × gpus` for an inference service, shown as such.
fn gpus(j: &serde_json::Value) -> String {
    let total = j["wanted_gpus"].as_u64().or_else(|| j["spec"]["gpus"].as_u64()).unwrap_or(0);
    match (j["spec"]["replicas"]["desired"].as_u64(), j["spec"]["gpus"].as_u64()) {
        (Some(r), Some(g)) => format!("{total} ({r}×{g})"),
        _ => total.to_string(),
    }
}

/// Runs `spillway jobs`.
pub fn run(args: JobsArgs) -> ExitCode {
    super::client::run(list(args))
}

async fn list(args: JobsArgs) -> Result<ExitCode, ClientError> {
    let client = Client::from_args(&args.client.server)?;
    let mut q = vec![format!("limit={}", args.limit)];
    if let Some(s) = &args.state {
        q.push(format!("state={}", encode(s)));
    }
    if let Some(t) = &args.tenant {
        q.push(format!("tenant={}", encode(t)));
    }
    let page = client.list("/v1/jobs", "jobs", &q, args.all).await?;
    if args.client.output == Output::Json {
        print_json(&page);
        return Ok(ExitCode::SUCCESS);
    }
    let jobs = page["jobs"].as_array().cloned().unwrap_or_default();
    if jobs.is_empty() {
        println!("no jobs");
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            let why = j["pending_reasons"]
                .as_array()
                .and_then(|r| r.first())
                .and_then(|r| r.as_str())
                .map(String::from)
                .or_else(|| j["end_reason"].as_str().map(String::from))
                .or_else(|| j["last_failure"].as_str().map(|f| format!("last failure: {f}")))
                .unwrap_or_default();
            vec![
                cell(j, "id"),
                j["spec"]["name"].as_str().unwrap_or("").to_string(),
                j["spec"]["tenant"].as_str().unwrap_or("").to_string(),
                j["spec"]["kind"].as_str().unwrap_or("").to_string(),
                gpus(j),
                cell(j, "state"),
                cell(j, "attempts"),
                cell(j, "failovers"),
                super::client::usd(j["cost_usd"].as_f64().unwrap_or(0.0)),
                why,
            ]
        })
        .collect();
    print!(
        "{}",
        super::table::render(
            &["ID", "NAME", "TENANT", "KIND", "GPUS", "STATE", "FLEETS", "MOVES", "COST $", "NOTE"],
            &rows
        )
    );
    // The column names are short; what they count is not obvious.
    println!("(GPUS: wanted in all, replicas × GPUs for inference; FLEETS: fleets created; MOVES: failovers)");
    if page["truncated"].as_bool() == Some(true) {
        println!("({} of {} jobs shown, the newest; --all for every one, or --limit)", jobs.len(), page["total"]);
    }
    Ok(ExitCode::SUCCESS)
}
