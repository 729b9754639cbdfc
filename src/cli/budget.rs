//! `spillway budget set TENANT USD | clear TENANT` (admin): a tenant's budget, through
//! `PUT /v1/tenants/{name}/budget`. `spillway budget list` shows every tenant's spend and budget.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};

use super::client::{Client, ClientArgs, ClientError, encode, print_json, usd};
use crate::Output;

/// Arguments of `spillway budget`.
#[derive(Args, Debug)]
pub struct BudgetArgs {
    #[command(subcommand)]
    pub command: BudgetCommand,
}

/// Budget subcommands.
#[derive(Subcommand, Debug)]
pub enum BudgetCommand {
    /// Set a tenant's budget in USD (counted against everything it has spent).
    Set {
        /// The tenant.
        tenant: String,
        /// The budget, USD (e.g. 2500 or 99.5).
        usd: f64,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Remove a tenant's budget (its spending is then unlimited).
    Clear {
        /// The tenant.
        tenant: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Every tenant's spend, budget and what is left.
    List {
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// Runs `spillway budget …`.
pub fn run(args: BudgetArgs) -> ExitCode {
    super::client::run(budget(args.command))
}

fn money(v: &Value) -> String {
    v.as_f64().map(usd).unwrap_or_else(|| "-".into())
}

async fn budget(cmd: BudgetCommand) -> Result<ExitCode, ClientError> {
    let (tenant, value, args) = match cmd {
        BudgetCommand::Set { tenant, usd, client } => (tenant, json!(usd), client),
        BudgetCommand::Clear { tenant, client } => (tenant, Value::Null, client),
        BudgetCommand::List { client: args } => {
            let client = Client::from_args(&args.server)?;
            let spend = client.get("/v1/spend?hours=1").await?;
            if args.output == Output::Json {
                print_json(&spend["tenants"]);
                return Ok(ExitCode::SUCCESS);
            }
            let rows: Vec<Vec<String>> = spend["tenants"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|t| {
                    vec![
                        t["tenant"].as_str().unwrap_or("").to_string(),
                        money(&t["spent_usd"]),
                        money(&t["budget_usd"]),
                        money(&t["left_usd"]),
                    ]
                })
                .collect();
            if rows.is_empty() {
                println!("no tenants");
            } else {
                print!("{}", super::table::render(&["TENANT", "SPENT $", "BUDGET $", "LEFT $"], &rows));
            }
            return Ok(ExitCode::SUCCESS);
        }
    };
    let client = Client::from_args(&args.server)?;
    let path = format!("/v1/tenants/{}/budget", encode(&tenant));
    let (_, t) = client.send(Method::PUT, &path, Some(&json!({ "budget_usd": value })), &[]).await?;
    match args.output {
        Output::Json => print_json(&t),
        Output::Table => match t["budget_usd"].as_f64() {
            Some(b) => println!(
                "{}: budget ${}, spent ${}, left ${}",
                t["tenant"].as_str().unwrap_or(&tenant),
                usd(b),
                money(&t["spent_usd"]),
                money(&t["left_usd"])
            ),
            None => {
                println!("{}: no budget (spent ${})", t["tenant"].as_str().unwrap_or(&tenant), money(&t["spent_usd"]))
            }
        },
    }
    Ok(ExitCode::SUCCESS)
}
