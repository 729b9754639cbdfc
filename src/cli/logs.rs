//! `spillway logs ID [--follow] [--rank N] [--attempt N]`: a job's output, every rank of every
//! attempt (each line prefixed with its attempt and rank unless both are chosen), or with
//! `--follow` its new lines as they come until the job ends (reconnecting, without losing or
//! repeating a line, if the connection drops).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::Value;

use super::client::{Client, ClientArgs, ClientError, encode};
use crate::Output;

/// Arguments of `spillway logs`.
#[derive(Args, Debug)]
pub struct LogsArgs {
    /// The job id.
    pub id: String,
    /// Keep printing new lines until the job ends.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Only this rank.
    #[arg(long)]
    pub rank: Option<u32>,
    /// Only this attempt.
    #[arg(long)]
    pub attempt: Option<u32>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Runs `spillway logs`.
pub fn run(args: LogsArgs) -> ExitCode {
    super::client::run(logs(args))
}

fn print_line(out: &mut impl Write, entry: &Value, args: &LogsArgs) -> std::io::Result<()> {
    if args.client.output == Output::Json {
        return writeln!(out, "{entry}");
    }
    let text = entry["text"].as_str().unwrap_or("");
    if args.rank.is_some() && args.attempt.is_some() {
        writeln!(out, "{text}")
    } else {
        writeln!(out, "[a{} r{}] {text}", entry["attempt"], entry["rank"])
    }
}

async fn logs(args: LogsArgs) -> Result<ExitCode, ClientError> {
    let client = Client::from_args(&args.client.server)?;
    let mut filter = String::new();
    if let Some(r) = args.rank {
        filter.push_str(&format!("&rank={r}"));
    }
    if let Some(a) = args.attempt {
        filter.push_str(&format!("&attempt={a}"));
    }
    let base = format!("/v1/jobs/{}/logs", encode(&args.id));
    let stdout = std::io::stdout();
    if !args.follow {
        let mut from = "0".to_string();
        loop {
            let page = client.get(&format!("{base}?from={from}{filter}")).await?;
            let mut out = stdout.lock();
            for line in page["lines"].as_array().into_iter().flatten() {
                let _ = print_line(&mut out, line, &args);
            }
            let _ = out.flush();
            from = page["next"].as_str().unwrap_or("0").to_string();
            if page["more"] != Value::Bool(true) {
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
    let mut last: Option<String> = None;
    let mut failures = 0;
    loop {
        let path = format!("{base}?follow=true{filter}");
        let mut stream = match client.stream(&path, last.as_deref()).await {
            Ok(s) => s,
            Err(e) if failures < 10 && e.0.contains("cannot reach") => {
                failures += 1;
                tokio::time::sleep(Duration::from_millis(500 * failures)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        loop {
            match stream.next().await {
                Ok(Some(frame)) if frame.event == "line" => {
                    failures = 0;
                    let entry: Value = serde_json::from_str(&frame.data).unwrap_or(Value::Null);
                    let mut out = stdout.lock();
                    let _ = print_line(&mut out, &entry, &args);
                    let _ = out.flush();
                    last = frame.id.or(last);
                }
                Ok(Some(frame)) if frame.event == "end" => {
                    let end: Value = serde_json::from_str(&frame.data).unwrap_or(Value::Null);
                    eprintln!("job {} {}", args.id, end["state"].as_str().unwrap_or("ended"));
                    return Ok(ExitCode::SUCCESS);
                }
                Ok(Some(_)) => {}
                // The server went away mid-stream (a restart): resume after the last line.
                Ok(None) | Err(_) => break,
            }
        }
        failures += 1;
        if failures > 10 {
            return Err(ClientError(format!("the log stream of {} keeps breaking; giving up", args.id)));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
