//! `spillway submit FILE [--wait] [--idempotency-key K]`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use reqwest::Method;
use serde_json::Value;

use super::client::{Client, ClientArgs, ClientError, cell, encode, print_json};
use crate::Output;

/// Arguments of `spillway submit`.
#[derive(Args, Debug)]
pub struct SubmitArgs {
    /// The job spec or pipeline (TOML or JSON; a file with a `jobs` list is a pipeline).
    pub file: PathBuf,
    /// Follow the job's events until it runs or ends (a pipeline: until it ends); exit 1 if it
    /// fails or is cancelled.
    #[arg(long)]
    pub wait: bool,
    /// Makes a retried submission return the job the first one created, instead of a twin.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Reads a spec file into JSON (the server validates it).
fn read_spec(path: &PathBuf) -> Result<Value, ClientError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| ClientError(format!("cannot read {}: {e}", path.display())))?;
    let name = path.display().to_string();
    match scheduler::model::SpecFormat::detect(&name, &text) {
        scheduler::model::SpecFormat::Json => {
            serde_json::from_str(&text).map_err(|e| ClientError(format!("{name} is not valid JSON: {e}")))
        }
        scheduler::model::SpecFormat::Toml => {
            let v: toml::Value =
                toml::from_str(&text).map_err(|e| ClientError(format!("{name} is not valid TOML: {e}")))?;
            serde_json::to_value(v).map_err(|e| ClientError(format!("{name}: {e}")))
        }
    }
}

/// Runs `spillway submit`.
pub fn run(args: SubmitArgs) -> ExitCode {
    super::client::run(submit(args))
}

async fn submit(args: SubmitArgs) -> Result<ExitCode, ClientError> {
    let spec = read_spec(&args.file)?;
    let client = Client::from_args(&args.client.server)?;
    let headers: Vec<(&str, &str)> =
        args.idempotency_key.as_deref().map(|k| vec![("Idempotency-Key", k)]).unwrap_or_default();
    if scheduler::model::PipelineSpec::is_pipeline(&spec) {
        return super::pipelines::submit(&client, &spec, &headers, args.wait, args.client.output).await;
    }
    let (status, job) = client.send(Method::POST, "/v1/jobs", Some(&spec), &headers).await?;
    let id = cell(&job, "id");
    if args.client.output == Output::Table {
        let again =
            if status == reqwest::StatusCode::OK { " (already submitted with this idempotency key)" } else { "" };
        println!(
            "submitted {id} ({}) for tenant {}: {}{again}",
            job["spec"]["name"].as_str().unwrap_or("?"),
            job["spec"]["tenant"].as_str().unwrap_or("?"),
            cell(&job, "state")
        );
    }
    if !args.wait {
        if args.client.output == Output::Json {
            print_json(&job);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let last = wait_for(&client, &id, args.client.output).await?;
    if args.client.output == Output::Json {
        print_json(&last);
    }
    let state = cell(&last, "state");
    Ok(if matches!(state.as_str(), "failed" | "cancelled") { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// Follows a job until it is running or final; returns the job as last read.
pub async fn wait_for(client: &Client, id: &str, output: Output) -> Result<Value, ClientError> {
    // Subscribe first, then read the job: a change between the two still arrives on the stream.
    let mut stream = client.events(&format!("?job={}", encode(id))).await?;
    let mut job = client.get(&format!("/v1/jobs/{}", encode(id))).await?["job"].clone();
    let mut seen = job["state"].as_str().unwrap_or("").to_string();
    loop {
        if matches!(seen.as_str(), "running" | "succeeded" | "failed" | "cancelled") {
            if output == Output::Table {
                let extra = match seen.as_str() {
                    "failed" | "cancelled" => job["end_reason"].as_str().map(|r| format!(": {r}")).unwrap_or_default(),
                    _ => String::new(),
                };
                println!("{id} is {seen}{extra}");
            }
            return Ok(job);
        }
        // Re-read on every event of the job, and every 10 s in case the stream went quiet.
        match tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
            Ok(Ok(Some(ev))) => {
                if output == Output::Table
                    && let Some(msg) = ev["message"].as_str()
                {
                    println!("  {} {}", ev["kind"].as_str().unwrap_or(""), msg);
                }
            }
            Ok(Ok(None)) => return Err(ClientError(format!("the server closed the event stream before {id} ran"))),
            Ok(Err(e)) => return Err(e),
            Err(_) => {}
        }
        job = client.get(&format!("/v1/jobs/{}", encode(id))).await?["job"].clone();
        seen = job["state"].as_str().unwrap_or("").to_string();
    }
}
