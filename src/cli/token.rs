//! `spillway token create --role R [--tenant T] | list | revoke ID` (admin).

use std::process::ExitCode;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::json;

use super::client::{Client, ClientArgs, ClientError, cell, encode, print_json, when};
use crate::Output;

/// Arguments of `spillway token`.
#[derive(Args, Debug)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub command: TokenCommand,
}

/// Token subcommands.
#[derive(Subcommand, Debug)]
pub enum TokenCommand {
    /// Create a token; it is printed once and never again.
    Create {
        /// admin, submitter or viewer.
        #[arg(long)]
        role: String,
        /// The tenant it is bound to (required for submitters; optional for viewers).
        #[arg(long)]
        tenant: Option<String>,
        /// A label ("ci", "alice's laptop").
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List tokens (without secrets).
    List {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Revoke a token by id.
    Revoke {
        /// Token id (from `spillway token list`).
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// Runs `spillway token …`.
pub fn run(args: TokenArgs) -> ExitCode {
    super::client::run(token(args.command))
}

async fn token(cmd: TokenCommand) -> Result<ExitCode, ClientError> {
    match cmd {
        TokenCommand::Create { role, tenant, name, client: args } => {
            let client = Client::from_args(&args.server)?;
            let mut body = json!({ "role": role });
            if let Some(t) = tenant {
                body["tenant"] = json!(t);
            }
            if let Some(n) = name {
                body["name"] = json!(n);
            }
            let (_, t) = client.send(Method::POST, "/v1/tokens", Some(&body), &[]).await?;
            match args.output {
                Output::Json => print_json(&t),
                Output::Table => {
                    println!(
                        "created {} token {}{}",
                        cell(&t, "role"),
                        cell(&t, "id"),
                        t["tenant"].as_str().map(|x| format!(" for tenant {x}")).unwrap_or_default()
                    );
                    println!("{}", cell(&t, "token"));
                    eprintln!("(store it now: the server keeps only its hash)");
                }
            }
        }
        TokenCommand::List { client: args } => {
            let client = Client::from_args(&args.server)?;
            let v = client.get("/v1/tokens").await?;
            match args.output {
                Output::Json => print_json(&v),
                Output::Table => {
                    let rows: Vec<Vec<String>> = v
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                        .iter()
                        .map(|t| {
                            vec![
                                cell(t, "id"),
                                cell(t, "role"),
                                cell(t, "tenant"),
                                cell(t, "name"),
                                when(t["created_at_ms"].as_i64()),
                            ]
                        })
                        .collect();
                    // Tokens live in real time, even when the server's cloud is simulated.
                    print!(
                        "{}",
                        super::table::render(&["ID", "ROLE", "TENANT", "NAME", "CREATED (WALL CLOCK, UTC)"], &rows)
                    );
                }
            }
        }
        TokenCommand::Revoke { id, client: args } => {
            let client = Client::from_args(&args.server)?;
            let (_, t) = client.send(Method::DELETE, &format!("/v1/tokens/{}", encode(&id)), None, &[]).await?;
            match args.output {
                Output::Json => print_json(&t),
                Output::Table => println!("revoked token {}", cell(&t, "id")),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
