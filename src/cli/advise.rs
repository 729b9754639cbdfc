//! `spillway advise`: which quota to ask Azure for, where, and what it buys, ready to file.
//!
//! Sources: a plan problem (`--problem FILE`: its waiting jobs), a what-if scenario (`--scenario
//! FILE`: the advice that would have helped that week, confirmed by simulating the week again),
//! or, with neither, the running server (`--url`, `--token`: `GET /v1/advice`, the advice on its
//! own pending work, the quota it last read and the blocks it learnt), shown like a problem's.
//!
//! `--apply` files the increases with `Microsoft.Quota` and follows each request to its end. With
//! a problem, under the `[azure]` settings `serve --cloud azure` uses; with the server, by the
//! server under its own (`POST /v1/advice/requests`, admin only, one call per request, answered at
//! once; the command polls `GET /v1/advice/requests/{id}` until Azure has answered). Each pool
//! is raised by the advised vCPUs over the limit Azure reports *now* (a problem lists free vCPUs,
//! not limits, the server's advice may be minutes old, and a limit is never lowered by advice).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use scheduler::advice::{AdviceReport, Filing, KnownPools, MANAGEMENT_ENDPOINT, SUBSCRIPTION_PLACEHOLDER};
use scheduler::cloud::azure::AzureCloud;
use scheduler::cloud::azure::AzureConfig;
use scheduler::cloud::azure::quota::{QuotaRequestOutcome, QuotaRequestState};
use scheduler::model::FieldErrors;
use scheduler::quota_requests::{QuotaRequest, RequestState};
use simulator::whatif::advise::{WeekAdvice, WeekAdviceOptions, advise_week, write_advised_scenario};

use super::table;
use crate::Output;

/// Arguments of `spillway advise`.
#[derive(Args, Debug)]
pub struct AdviseArgs {
    /// A plan problem (JSON, the `spillway plan` format): advice for the jobs it cannot place.
    #[arg(long, conflicts_with = "scenario")]
    pub problem: Option<PathBuf>,
    /// A what-if scenario (TOML): the advice that would have helped that week, confirmed by
    /// simulating the week again with it.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// At most this many recommendations.
    #[arg(long, default_value_t = 5)]
    pub max: usize,
    /// The subscription the requests are filed under [default: a `{subscriptionId}` placeholder].
    #[arg(long, env = "SPILLWAY_AZURE_SUBSCRIPTION_ID")]
    pub subscription: Option<String>,
    /// The management endpoint the requests go to.
    #[arg(long, default_value = MANAGEMENT_ENDPOINT)]
    pub endpoint: String,
    /// With --scenario: write a copy of the scenario with the advised limits (re-run it with
    /// `spillway simulate` to see the difference).
    #[arg(long, requires = "scenario")]
    pub write_scenario: Option<PathBuf>,
    /// File every advised increase with Azure (`Microsoft.Quota`) and wait for each request's
    /// answer. With --problem, Azure settings come from `[azure]` in --config and
    /// `SPILLWAY_AZURE_*`; with the server (--url), the server files them under its own (an admin
    /// token is needed).
    #[arg(long)]
    pub apply: bool,
    /// With --problem --apply: a TOML file with an `[azure]` table (the file `serve --cloud azure`
    /// takes).
    #[arg(long, requires = "apply")]
    pub config: Option<PathBuf>,
    /// Without --problem and --scenario: the server to ask (`GET /v1/advice`).
    #[command(flatten)]
    pub server: super::client::ServerArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

/// Runs `spillway advise`: exit 0 with the advice (also when there is none), 1 when the input is
/// refused (unknown region or pool, invalid scenario), Azure or the server cannot be reached or
/// the server refuses, 2 when a problem file is malformed, 3 when `--apply` filed requests and
/// Azure did not grant them all.
pub fn run(catalog: &scheduler::Catalog, args: AdviseArgs) -> ExitCode {
    if args.apply && args.scenario.is_some() {
        // Advice on a what-if week describes a simulated cloud: nothing to file with Azure.
        eprintln!(
            "error: --apply files the advice on a --problem or the server's (--url); a --scenario's advice is about \
             a simulated week"
        );
        return ExitCode::from(2);
    }
    if args.config.is_some() && args.problem.is_none() {
        // The server files under the subscription it drives; another one here would mislead.
        eprintln!("error: --config is for --problem --apply: the server files under its own [azure] settings");
        return ExitCode::from(2);
    }
    if let Some(path) = &args.problem {
        return run_problem(catalog, path, &args);
    }
    if let Some(path) = &args.scenario {
        return run_scenario(path, &args);
    }
    if args.write_scenario.is_some() {
        eprintln!("error: --write-scenario needs --scenario");
        return ExitCode::from(2);
    }
    super::client::run(run_server(args))
}

/// How long `--apply` follows one request the server filed: Azure may take up to 30 minutes to
/// decide (`AzureCloud`'s operation timeout), plus the calls around it.
const FILING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(31 * 60);

/// How often `--apply` asks the server how a filed request stands.
const POLL_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// A request the server filed, as `--apply` reports it: the same answer as a request filed with
/// `--problem`, so that both show and exit alike. A request that failed without an answer from
/// Azure (the call itself failed) shows as `Failed` with the error.
fn outcome_of(r: &QuotaRequest) -> QuotaRequestOutcome {
    let state = match (r.state, &r.azure_state) {
        (RequestState::Granted, _) => QuotaRequestState::Succeeded,
        (_, Some(s)) => QuotaRequestState::parse(s),
        _ => QuotaRequestState::Failed,
    };
    QuotaRequestOutcome {
        region: r.region.clone(),
        resource_name: r.resource_name.clone(),
        limit_before: r.limit_before.unwrap_or_default(),
        requested_limit: r.new_limit.unwrap_or_default(),
        state,
        message: r.error.clone(),
        limit_after: r.limit_after.or(r.limit_before).unwrap_or_default(),
        request_id: r.azure_request_id.clone(),
    }
}

/// Has the server file one request (`POST /v1/advice/requests`, answered 202 at once) and polls
/// it (`GET /v1/advice/requests/{id}`) until Azure's answer is in.
async fn file_and_follow(
    client: &super::client::Client,
    f: &Filing,
) -> Result<QuotaRequest, super::client::ClientError> {
    use super::client::ClientError;
    let read = |v: serde_json::Value| {
        serde_json::from_value::<QuotaRequest>(v).map_err(|e| {
            ClientError(format!("spillway at {} sent a quota request this client cannot read: {e}", client.base()))
        })
    };
    // The increase, not the new limit: the server raises the limit Azure reports when it files.
    let body = serde_json::json!({
        "region": f.region, "resource_name": f.resource_name, "increase_vcpus": f.increase_vcpus
    });
    let (_, v) = client.send(reqwest::Method::POST, "/v1/advice/requests", Some(&body), &[]).await?;
    let mut r = read(v)?;
    eprintln!("filed as {}; waiting for Azure's answer…", r.id);
    let deadline = std::time::Instant::now() + FILING_TIMEOUT;
    while r.state == RequestState::Submitted {
        if std::time::Instant::now() > deadline {
            return Err(ClientError(format!(
                "request {} is still submitted after {} minutes; `GET /v1/advice/requests/{}` shows how it ends",
                r.id,
                FILING_TIMEOUT.as_secs() / 60,
                r.id
            )));
        }
        tokio::time::sleep(POLL_EVERY).await;
        r = read(client.get(&format!("/v1/advice/requests/{}", super::client::encode(&r.id))).await?)?;
    }
    Ok(r)
}

/// Asks a running server for the advice on its pending work; with `--apply`, has the server file
/// each of its requests.
async fn run_server(args: AdviseArgs) -> Result<ExitCode, super::client::ClientError> {
    use super::client::ClientError;
    let client = super::client::Client::from_args(&args.server)?;
    let v = client.get(&format!("/v1/advice?max={}", args.max)).await?;
    if args.output == Output::Json && !args.apply {
        super::client::print_json(&v);
        return Ok(ExitCode::SUCCESS);
    }
    let report: AdviceReport = serde_json::from_value(v)
        .map_err(|e| ClientError(format!("spillway at {} sent advice this client cannot read: {e}", client.base())))?;
    if args.output == Output::Table {
        print!("{}", render(&report));
    }
    if !args.apply {
        return Ok(ExitCode::SUCCESS);
    }
    let mut applied = Vec::new();
    for f in &report.requests {
        eprintln!("filing: {} in {}, +{} vCPUs…", f.resource_name, f.region, f.increase_vcpus);
        match file_and_follow(&client, f).await {
            Ok(r) => applied.push(outcome_of(&r)),
            Err(e) => {
                // What was filed before stays filed: say so before the error.
                if !applied.is_empty() {
                    eprint!("{}", render_applied(&applied));
                }
                return Err(ClientError(format!("filing {} in {}: {e}", f.resource_name, f.region)));
            }
        }
    }
    Ok(report_applied(&args, &report, &applied))
}

/// The week's advice, ready to file.
#[derive(serde::Serialize)]
struct ScenarioReport<'a> {
    source: String,
    #[serde(flatten)]
    advice: &'a WeekAdvice,
    requests: Vec<Filing>,
    #[serde(skip_serializing_if = "Option::is_none")]
    written_scenario: Option<String>,
}

/// Simulates a what-if week, advises, confirms, and optionally writes the advised scenario.
fn run_scenario(path: &Path, args: &AdviseArgs) -> ExitCode {
    let shown = path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot read {shown}: {e}");
            return ExitCode::from(1);
        }
    };
    if !simulator::whatif::is_what_if(&text) {
        eprintln!("error: {shown}: --scenario takes a what-if scenario ([experiment] kind = \"what-if\")");
        return ExitCode::from(1);
    }
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let scenario = match simulator::whatif::Scenario::parse(&text, &dir, &shown) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    eprintln!("simulating {} to find the quota that binds, then again to confirm the advice…", scenario.name);
    let options = WeekAdviceOptions { max_recommendations: args.max, ..WeekAdviceOptions::default() };
    let advice = match advise_week(&scenario, &options) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let sub = subscription(args);
    let requests: Vec<Filing> = advice
        .recommendations
        .iter()
        .map(|r| {
            let inc = &r.increase;
            scheduler::advice::filing(
                &args.endpoint,
                &sub,
                &inc.region,
                &scheduler::model::QuotaPool::parse(&inc.pool),
                inc.current_limit,
                inc.new_limit,
            )
        })
        .collect();
    let mut written = None;
    if let Some(out) = &args.write_scenario {
        if let Err(e) = write_advised_scenario(path, &text, &scenario, &advice.increases(), out) {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
        written = Some(out.display().to_string());
    }
    let report =
        ScenarioReport { source: format!("scenario {shown}"), advice: &advice, requests, written_scenario: written };
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default()),
        Output::Table => print!("{}", render_week(&report)),
    }
    ExitCode::SUCCESS
}

fn render_week(r: &ScenarioReport) -> String {
    let a = r.advice;
    let mut out = format!("quota advice ({}): {}\n", r.source, a.summary);
    if !a.recommendations.is_empty() {
        let rows: Vec<Vec<String>> = a
            .recommendations
            .iter()
            .map(|rec| {
                let b = &rec.buys;
                vec![
                    rec.rank.to_string(),
                    rec.region.clone(),
                    rec.increase.pool.clone(),
                    rec.increase.current_limit.to_string(),
                    format!("+{}", rec.increase.increase_vcpus),
                    rec.increase.new_limit.to_string(),
                    format!("{:.1}", b.waiting_gpu_hours_saved),
                    format!("{:.1}", b.waiting_weight_gpu_hours_saved),
                    b.jobs_sooner.to_string(),
                    signed(b.cost_change_usd),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&table::render(
            &[
                "RANK",
                "REGION",
                "POOL",
                "LIMIT",
                "INCREASE",
                "NEW LIMIT",
                "GPU-H LESS WAITING",
                "WEIGHTED",
                "JOBS SOONER",
                "COST USD",
            ],
            &rows,
        ));
        for rec in &a.recommendations {
            let mut lines = Vec::new();
            if !rec.buys.jobs.is_empty() {
                lines.push(format!("starts sooner: {}", list_some(&rec.buys.jobs, 8)));
            }
            if rec.buys.more_jobs_completed != 0 {
                lines.push(format!("{:+} jobs completed by the end of the week", rec.buys.more_jobs_completed));
            }
            for n in &rec.buys.notes {
                lines.push(format!("note: {n}"));
            }
            for alt in &rec.alternatives {
                let with: String =
                    alt.with.iter().map(|w| format!(" with +{} vCPUs of {}", w.increase_vcpus, w.pool)).collect();
                lines.push(format!(
                    "or +{} vCPUs of {} in {}{with} ({:.1} GPU-h less waiting, {:.1} weighted, {} USD)",
                    alt.increase_vcpus,
                    alt.pool,
                    alt.region,
                    alt.waiting_gpu_hours_saved,
                    alt.waiting_weight_gpu_hours_saved,
                    signed(alt.cost_change_usd)
                ));
            }
            if !lines.is_empty() {
                out.push_str(&format!("\n{}. {}\n", rec.rank, lines.join(&format!("\n{}", " ".repeat(3)))));
            }
        }
    }
    let row = |name: &str, w: &simulator::whatif::advise::WeekOutcome| {
        vec![
            name.to_string(),
            w.jobs_submitted.to_string(),
            w.jobs_completed.to_string(),
            w.jobs_pending_at_end.to_string(),
            w.jobs_never_started.to_string(),
            format!("{:.2}", w.wait_p50_hours),
            format!("{:.2}", w.wait_p95_hours),
            format!("{:.2}", w.wait_p99_hours),
            format!("{:.1}", w.waiting_gpu_hours),
            format!("{:.2}", w.total_cost_usd),
            w.cost_per_gpu_hour.map(|c| format!("{c:.3}")).unwrap_or_else(|| "-".into()),
        ]
    };
    out.push_str(&format!(
        "\nthe week (spillway policy) as it was and simulated again with every increase ({} simulations, {} \
         snapshots of waiting work, {} probe solves):\n",
        a.simulations, a.samples, a.probe_solves
    ));
    out.push_str(&table::render(
        &[
            "WEEK",
            "JOBS",
            "COMPLETED",
            "PENDING AT END",
            "NEVER STARTED",
            "WAIT P50 H",
            "P95 H",
            "P99 H",
            "GPU-H WAITING",
            "USD",
            "USD/GPU-H",
        ],
        &[row("before", &a.before), row("after", &a.after)],
    ));
    if let Some(w) = &r.written_scenario {
        out.push_str(&format!("\nwrote {w}: `spillway simulate {w}` runs the week with the advised quota\n"));
    }
    out.push_str(&render_filings(&r.requests));
    out
}

fn subscription(args: &AdviseArgs) -> String {
    args.subscription.clone().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| SUBSCRIPTION_PLACEHOLDER.to_string())
}

/// Reads, checks and advises on a plan problem.
fn run_problem(catalog: &scheduler::Catalog, path: &Path, args: &AdviseArgs) -> ExitCode {
    let shown = path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot read {shown}: {e}");
            return ExitCode::from(2);
        }
    };
    let mut problem = match solver::Problem::from_json_str(&text) {
        Ok(p) => p,
        Err(e) => {
            for issue in &e.issues {
                eprintln!("error: {shown}: {issue}");
            }
            return ExitCode::from(2);
        }
    };
    if let Err(errors) = canonical_pools(catalog, &mut problem) {
        eprintln!("error: {shown}: refused:\n{errors}");
        return ExitCode::from(1);
    }
    let azure = match args.apply.then(|| azure_settings(args)).transpose() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let options = solver::advise::AdviseOptions { max_recommendations: args.max, ..Default::default() };
    let advice = solver::advise::advise(&problem, &[], &options);
    let (endpoint, sub) = match &azure {
        Some(a) => (a.endpoint().to_string(), a.subscription_id.clone()),
        None => (args.endpoint.clone(), subscription(args)),
    };
    let report = AdviceReport::new(&format!("problem {shown}"), advice, &endpoint, &sub);
    let Some(azure) = azure else {
        match args.output {
            Output::Json => println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default()),
            Output::Table => print!("{}", render(&report)),
        }
        return ExitCode::SUCCESS;
    };
    if matches!(args.output, Output::Table) {
        print!("{}", render(&report));
    }
    let applied = match apply(catalog, azure, &report.requests) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    report_applied(args, &report, &applied)
}

/// Prints how the filed requests ended (the advice itself is already printed as a table): exit 0
/// when Azure granted them all, 3 otherwise.
fn report_applied(args: &AdviseArgs, report: &AdviceReport, applied: &[QuotaRequestOutcome]) -> ExitCode {
    let granted = applied.iter().all(|o| o.state == QuotaRequestState::Succeeded);
    match args.output {
        Output::Json => {
            #[derive(serde::Serialize)]
            struct Applied<'a> {
                #[serde(flatten)]
                report: &'a AdviceReport,
                applied: &'a [QuotaRequestOutcome],
            }
            let out = Applied { report, applied };
            println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        }
        Output::Table if applied.is_empty() => println!("\nnothing to file with Azure"),
        Output::Table => print!("{}", render_applied(applied)),
    }
    if granted { ExitCode::SUCCESS } else { ExitCode::from(3) }
}

/// The `[azure]` settings `--apply` files under; `--subscription` and `--endpoint`, when given,
/// must agree with them (a request must not go where the user did not mean).
fn azure_settings(args: &AdviseArgs) -> Result<AzureConfig, String> {
    let config = AzureConfig::load(args.config.as_deref())
        .map_err(|e| format!("--apply needs Azure settings ([azure] in --config, SPILLWAY_AZURE_*):\n{e}"))?;
    if let Some(sub) = args.subscription.as_deref().filter(|s| !s.trim().is_empty())
        && sub != config.subscription_id
    {
        return Err(format!(
            "--subscription {sub} differs from the Azure settings' subscription_id {}: --apply files under the \
             settings' subscription; drop --subscription or make them agree",
            config.subscription_id
        ));
    }
    if args.endpoint.trim_end_matches('/') != MANAGEMENT_ENDPOINT
        && args.endpoint.trim_end_matches('/') != config.endpoint()
    {
        return Err(format!(
            "--endpoint {} differs from the Azure settings' management_endpoint {}: --apply sends to the settings' \
             endpoint",
            args.endpoint,
            config.endpoint()
        ));
    }
    Ok(config)
}

/// Files each request: the pool's limit as Azure reports it now, raised by the advised increase.
fn apply(
    catalog: &scheduler::Catalog,
    azure: AzureConfig,
    requests: &[Filing],
) -> Result<Vec<QuotaRequestOutcome>, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let cloud = AzureCloud::new(azure, catalog.clone()).map_err(|e| format!("cannot set up Azure: {e}"))?;
    runtime.block_on(async {
        let mut out = Vec::new();
        for f in requests {
            eprintln!("filing: {} in {}, +{} vCPUs…", f.resource_name, f.region, f.increase_vcpus);
            let outcome = cloud
                .raise_quota_limit(&f.region, &f.resource_name, f.increase_vcpus)
                .await
                .map_err(|e| format!("filing {} in {}: {e}", f.resource_name, f.region))?;
            out.push(outcome);
        }
        Ok(out)
    })
}

fn render_applied(applied: &[QuotaRequestOutcome]) -> String {
    let rows: Vec<Vec<String>> = applied
        .iter()
        .map(|o| {
            vec![
                o.region.clone(),
                o.resource_name.clone(),
                o.limit_before.to_string(),
                o.requested_limit.to_string(),
                o.state.as_str().to_string(),
                o.limit_after.to_string(),
                o.message.clone().unwrap_or_default(),
            ]
        })
        .collect();
    let mut out = String::from("\nfiled with Azure (Microsoft.Quota):\n");
    out.push_str(&table::render(&["REGION", "POOL", "LIMIT", "ASKED", "STATE", "LIMIT NOW", "MESSAGE"], &rows));
    let refused = applied.iter().filter(|o| o.state != QuotaRequestState::Succeeded).count();
    if refused > 0 {
        out.push_str(&format!(
            "{refused} of {} requests were not granted automatically: see MESSAGE (an escalated request needs a \
             support ticket)\n",
            applied.len()
        ));
    }
    out
}

/// Checks every quota row names a region and a pool Azure knows, and rewrites pool names in the
/// Quota API's spelling (the requests must use it).
fn canonical_pools(catalog: &scheduler::Catalog, problem: &mut solver::Problem) -> Result<(), FieldErrors> {
    let known = KnownPools::from_catalog(catalog);
    let mut errs = FieldErrors::default();
    for (i, q) in problem.quotas.iter_mut().enumerate() {
        known.check(&mut errs, &format!("quotas[{i}]"), &q.region, &q.pool);
        if let Some(p) = known.pool(&q.pool) {
            q.pool = p.name().to_string();
        }
    }
    errs.into_result(())
}

fn signed(x: f64) -> String {
    if x >= 0.0 { format!("+{x:.2}") } else { format!("{x:.2}") }
}

/// The advice as tables: the ranked increases, before and after, and the requests to file.
pub fn render(r: &AdviceReport) -> String {
    let mut out = format!("quota advice ({}): {}\n", r.source, r.summary);
    if r.recommendations.is_empty() {
        out.push_str(&format!(
            "\n{} jobs wait ({:.1} GPU-hours); no quota pool stands between them and a placement\n",
            r.before.waiting_jobs, r.before.waiting_gpu_hours
        ));
        return out;
    }
    let mut rows = Vec::new();
    for rec in &r.recommendations {
        for (i, inc) in rec.increases.iter().enumerate() {
            let buys = if i == 0 {
                format!(
                    "{} GPUs, {:.1} GPU-h, weight {:.0}, {} jobs",
                    rec.buys.gpus,
                    rec.buys.gpu_hours,
                    rec.buys.placed_weight,
                    rec.buys.jobs.len()
                )
            } else {
                "(together with the row above)".to_string()
            };
            let cost = if i == 0 {
                let rate = rec.buys.cost_per_gpu_hour.map(|c| format!(" ({c:.2}/GPU-h)")).unwrap_or_default();
                format!("{}{rate}", signed(rec.buys.cost_change_usd))
            } else {
                String::new()
            };
            rows.push(vec![
                if i == 0 { rec.rank.to_string() } else { String::new() },
                inc.region.clone(),
                inc.pool.clone(),
                inc.current_limit.to_string(),
                format!("+{}", inc.increase_vcpus),
                inc.new_limit.to_string(),
                buys,
                cost,
            ]);
        }
    }
    out.push('\n');
    out.push_str(&table::render(
        &["RANK", "REGION", "POOL", "LIMIT", "INCREASE", "NEW LIMIT", "BUYS", "COST USD"],
        &rows,
    ));
    for rec in &r.recommendations {
        let mut lines = Vec::new();
        if !rec.buys.jobs.is_empty() {
            lines.push(format!("jobs: {}", list_some(&rec.buys.jobs, 8)));
        }
        for n in &rec.buys.notes {
            lines.push(format!("note: {n}"));
        }
        for a in &rec.alternatives {
            let what: Vec<String> =
                a.increases.iter().map(|i| format!("+{} vCPUs of {}", i.increase_vcpus, i.pool)).collect();
            lines.push(format!(
                "or {} in {} (weight {:.0}, {:.1} GPU-h, {} USD)",
                what.join(" and "),
                a.region,
                a.placed_weight,
                a.gpu_hours,
                signed(a.cost_change_usd)
            ));
        }
        if !lines.is_empty() {
            out.push_str(&format!("\n{}. {}\n", rec.rank, lines.join(&format!("\n{}", " ".repeat(3)))));
        }
    }
    let row = |name: &str, s: &solver::advise::PlanSummary| {
        vec![
            name.to_string(),
            format!("{:.0}", s.placed_weight),
            s.placed_gpus.to_string(),
            format!("{:.1}", s.placed_gpu_hours),
            s.waiting_jobs.to_string(),
            format!("{:.1}", s.waiting_gpu_hours),
            format!("{:.2}", s.expected_cost),
            s.cost_per_gpu_hour.map(|c| format!("{c:.3}")).unwrap_or_else(|| "-".into()),
        ]
    };
    out.push_str("\nconfirmed by solving again with every increase applied:\n");
    out.push_str(&table::render(
        &["PLAN", "WEIGHT", "GPUS", "GPU-H", "JOBS WAITING", "GPU-H WAITING", "EXPECTED USD", "USD/GPU-H"],
        &[row("before", &r.before), row("after", &r.after)],
    ));
    out.push_str(&render_filings(&r.requests));
    out
}

/// The requests to file, each as the Quota API call and as an `az` command.
pub fn render_filings(filings: &[Filing]) -> String {
    let mut out = String::new();
    if filings.is_empty() {
        return out;
    }
    out.push_str("\nready to file (Microsoft.Quota 2025-09-01; or the az command below each):\n");
    for f in filings {
        out.push_str(&format!(
            "\n  {} {} {} -> {} vCPUs (+{})\n  {} {}\n  {}\n  {}\n",
            f.region,
            f.resource_name,
            f.current_limit,
            f.new_limit,
            f.increase_vcpus,
            f.method,
            f.url,
            serde_json::to_string(&f.body).unwrap_or_default(),
            f.az
        ));
    }
    out
}

fn list_some(items: &[String], n: usize) -> String {
    if items.len() <= n { items.join(", ") } else { format!("{} and {} more", items[..n].join(", "), items.len() - n) }
}
