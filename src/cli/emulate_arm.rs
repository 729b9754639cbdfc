//! `spillway emulate-arm`: serves a simulated cloud over HTTP with Azure Resource Manager's paths,
//! bodies, status codes and headers, on loopback, until Ctrl-C. Point `AzureCloud` (or curl) at
//! the printed URL to exercise the Azure code path without an Azure account.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use scheduler::clock::{Clock, ScaledClock, SystemClock};
use simulator::arm_emulator::{EmulatorConfig, FaultConfig, serve};
use simulator::sim_cloud::vms::VmRunnerConfig;
use simulator::{SimCloud, SimCloudConfig};

/// Arguments of `spillway emulate-arm`.
#[derive(Args, Debug)]
pub struct EmulateArmArgs {
    /// Scenario file; its `[cloud]` table defines regions, quota, capacity and evictions.
    #[arg(long)]
    pub scenario: PathBuf,
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Bearer token every request must carry.
    #[arg(long, env = "SPILLWAY_EMULATOR_TOKEN")]
    pub token: String,
    /// The subscription id the emulator serves.
    #[arg(long, default_value = "00000000-0000-0000-0000-000000000000")]
    pub subscription: String,
    /// Share of requests answered 429 with Retry-After (0–1).
    #[arg(long, default_value_t = 0.0)]
    pub throttle_rate: f64,
    /// Share of requests answered 500 (0–1).
    #[arg(long, default_value_t = 0.0)]
    pub error_rate: f64,
    /// Share of DELETE requests answered 500, on top of --error-rate (0–1).
    #[arg(long, default_value_t = 0.0)]
    pub delete_error_rate: f64,
    /// Share of fleet creations whose operation ends Failed (0–1).
    #[arg(long, default_value_t = 0.0)]
    pub lro_failure_rate: f64,
    /// Added latency per request, `A..B` milliseconds (uniform), e.g. `20..200`.
    #[arg(long, value_parser = parse_range)]
    pub latency_ms: Option<LatencyRange>,
    /// Seed of the fault injection.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Retry-After (seconds) on accepted creations, deletions and operations in progress.
    #[arg(long, default_value_t = 1)]
    pub retry_after: u64,
    /// Items per page of every list.
    #[arg(long, default_value_t = 100)]
    pub page_size: usize,
    /// How long (simulated seconds) a deleted fleet shows `Deleting` before it is gone.
    #[arg(long, default_value_t = 10)]
    pub delete_seconds: u64,
    /// The largest quota increase (vCPUs over the limit) `Microsoft.Quota` grants without a support
    /// ticket; a larger request ends `Escalated`.
    #[arg(long, default_value_t = 1000)]
    pub quota_auto_approve_vcpus: u64,
    /// How long (simulated seconds) a quota request runs before it is decided.
    #[arg(long, default_value_t = 30)]
    pub quota_request_seconds: u64,
    /// How much faster than real time the simulated cloud runs (provisioning, evictions).
    #[arg(long, default_value_t = 1.0)]
    pub speedup: f64,
    /// Where the VMs' agents keep their sandboxes (and the shared checkpoint directory)
    /// [default: a new directory under the system's temporary directory, removed when Ctrl-C stops
    /// the emulator].
    #[arg(long)]
    pub vm_dir: Option<PathBuf>,
    /// Do not start agents for fleets created with spillway's customData.
    #[arg(long)]
    pub no_agents: bool,
    /// Simulated seconds between a spot VM's Preempt notice and its eviction.
    #[arg(long, default_value_t = 30)]
    pub notice_seconds: u64,
}

/// `A..B` milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencyRange(pub u64, pub u64);

fn parse_range(s: &str) -> Result<LatencyRange, String> {
    let (a, b) = s.split_once("..").ok_or_else(|| format!("{s:?} is not a range A..B (milliseconds)"))?;
    let num = |x: &str| x.trim().parse::<u64>().map_err(|_| format!("{x:?} in {s:?} is not a whole number of ms"));
    let (a, b) = (num(a)?, num(b)?);
    if a > b {
        return Err(format!("{s:?}: the lower bound is above the upper bound"));
    }
    Ok(LatencyRange(a, b))
}

/// Runs the command; exit 1 when the scenario or the settings are refused or the port is taken.
pub fn run(catalog: &scheduler::Catalog, args: EmulateArmArgs) -> ExitCode {
    match run_inner(catalog, args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn run_inner(catalog: &scheduler::Catalog, args: EmulateArmArgs) -> Result<(), String> {
    if !(args.speedup.is_finite() && args.speedup > 0.0) {
        return Err(format!("--speedup must be a positive number, not {}", args.speedup));
    }
    let config = SimCloudConfig::from_scenario_file(&args.scenario).map_err(|e| e.to_string())?;
    let clock: Arc<dyn Clock> = Arc::new(ScaledClock::new(SystemClock.now_ms(), args.speedup));
    let cloud = SimCloud::new(config, catalog.clone(), clock)
        .map_err(|e| format!("scenario {} does not fit the catalog:\n{e}", args.scenario.display()))?;
    let mut emu = EmulatorConfig::new(args.token);
    emu.bind = SocketAddr::from(([127, 0, 0, 1], args.port));
    emu.subscription = args.subscription;
    emu.retry_after_seconds = args.retry_after;
    emu.page_size = args.page_size;
    emu.delete_seconds = args.delete_seconds;
    emu.quota_auto_approve_vcpus = args.quota_auto_approve_vcpus;
    emu.quota_request_seconds = args.quota_request_seconds;
    emu.faults = FaultConfig {
        throttle_rate: args.throttle_rate,
        error_rate: args.error_rate,
        delete_error_rate: args.delete_error_rate,
        lro_failure_rate: args.lro_failure_rate,
        latency_ms: args.latency_ms.map(|r| (r.0, r.1)).unwrap_or((0, 0)),
        seed: args.seed,
        ..FaultConfig::default()
    };
    emu.validate().map_err(|e| format!("--{}", e.replace('_', "-").trim_start_matches("faults.")))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    // A directory this run names after its own process id is of no use to anything after it: it is
    // made here and removed when Ctrl-C stops the emulator. One given with --vm-dir is the user's.
    let vm_dir = (!args.no_agents).then(|| args.vm_dir.clone().unwrap_or_else(|| default_vm_dir(std::process::id())));
    let scratch = vm_dir.clone().filter(|_| args.vm_dir.is_none());
    if let Some(dir) = &scratch {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    if let Some(dir) = vm_dir {
        let program = std::env::current_exe().map_err(|e| format!("cannot find this program to run agents: {e}"))?;
        let mut vms = VmRunnerConfig::new(program, vec!["agent".into()], dir.join("vms"), dir.join("checkpoints"));
        vms.notice_seconds = args.notice_seconds;
        emu.agents = Some(vms);
    }
    let stopped = runtime.block_on(async move {
        let handle = serve(emu, Arc::new(cloud)).await.map_err(|e| format!("cannot listen: {e}"))?;
        let url = handle.base_url();
        let sub = handle.subscription().to_string();
        println!("ARM emulator listening on {url} (subscription {sub}); Ctrl-C stops it.");
        println!("  management endpoint: {url}");
        println!("  fleets:  {url}/subscriptions/{sub}/resourceGroups/<rg>/providers/Microsoft.AzureFleet/fleets?api-version=2026-08-01");
        println!("  quota:   {url}/subscriptions/{sub}/providers/Microsoft.Compute/locations/<region>/usages?api-version=2024-07-01");
        println!("  stats:   {url}/_emulator/stats");
        println!("  VMs:     {url}/_emulator/vms; Scheduled Events at {url}/_imds/<vm>/metadata/scheduledevents");
        let _ = std::io::stdout().flush();
        handle.run_until_ctrl_c().await.map_err(|e| e.to_string())
    });
    // The agents were stopped with the emulator: their sandboxes and checkpoints go with it.
    if let Some(dir) = scratch {
        let _ = std::fs::remove_dir_all(dir);
    }
    stopped
}

/// Where the agents of the emulator running as process `pid` keep their sandboxes when no
/// `--vm-dir` is given.
fn default_vm_dir(pid: u32) -> PathBuf {
    std::env::temp_dir().join(format!("spillway-emulator-{pid}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_ranges_parse_strictly() {
        assert_eq!(parse_range("20..200"), Ok(LatencyRange(20, 200)));
        assert_eq!(parse_range("0..0"), Ok(LatencyRange(0, 0)));
        assert!(parse_range("200..20").is_err());
        assert!(parse_range("20-200").is_err());
        assert!(parse_range("a..b").is_err());
    }
}
