//! `spillway dashboard-url`: prints the link that opens the web dashboard signed in. The token
//! rides in the URL fragment (`#token=…`), which the browser keeps to itself: it is never sent to
//! the server, so it appears in no request line and no log.

use std::process::ExitCode;

use clap::Args;

use super::client::{Client, ServerArgs};

/// Arguments of `spillway dashboard-url`.
#[derive(Args, Debug)]
pub struct DashboardUrlArgs {
    #[command(flatten)]
    pub server: ServerArgs,
}

/// Prints the sign-in link for the server's URL and token (by default the admin token in
/// `<data-dir>/admin.token`).
pub fn run(args: DashboardUrlArgs) -> ExitCode {
    match Client::from_args(&args.server) {
        Ok(client) => {
            println!("{}", scheduler::api::dashboard::sign_in_url(client.base(), client.token()));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
