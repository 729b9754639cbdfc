//! `spillway cancel ID` and `spillway complete ID`.

use std::process::ExitCode;

use clap::Args;
use reqwest::Method;

use super::client::{Client, ClientArgs, ClientError, cell, encode, print_json};
use crate::Output;

/// Arguments of `spillway cancel` and `spillway complete`.
#[derive(Args, Debug)]
pub struct JobIdArgs {
    /// The job id (`cancel` also takes a pipeline id, `p-…`).
    pub id: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Runs `spillway cancel`.
pub fn cancel(args: JobIdArgs) -> ExitCode {
    super::client::run(change(args, Method::DELETE, ""))
}

/// Runs `spillway complete`.
pub fn complete(args: JobIdArgs) -> ExitCode {
    super::client::run(change(args, Method::POST, "/complete"))
}

async fn change(args: JobIdArgs, method: Method, suffix: &str) -> Result<ExitCode, ClientError> {
    let client = Client::from_args(&args.client.server)?;
    if method == Method::DELETE && super::pipelines::is_pipeline_id(&args.id) {
        return super::pipelines::cancel(&client, &args.id, args.client.output).await;
    }
    let (_, job) = client.send(method, &format!("/v1/jobs/{}{suffix}", encode(&args.id)), None, &[]).await?;
    match args.client.output {
        Output::Json => print_json(&job),
        Output::Table => println!("{} is {}", cell(&job, "id"), cell(&job, "state")),
    }
    Ok(ExitCode::SUCCESS)
}
