//! An eviction storm, twice: the control loop over the simulated cloud directly, and the same loop
//! over `AzureCloud` → ARM emulator (HTTP on loopback) → the same simulated cloud. With the fleet
//! VM list (api-version 2026-08-01, read at most once per fleet per minute) the Azure path sees
//! every lost VM: evictions, lost work, failovers, job events and capacity blocks must equal the
//! simulated cloud's, job by job and minute by minute.
//! With 2024-11-01 (no VM list) it sees none of them: the gap the VM reads close.
//!
//! Both run in virtual time (one `ManualClock` each, rounds every 60 s). The ARM calls each
//! makes are counted per placement and per fleet-hour (BENCHMARKS.md).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use scheduler::Catalog;
use scheduler::clock::{Clock, ManualClock};
use scheduler::cloud::Cloud;
use scheduler::cloud::azure::{AzureCloud, AzureConfig, CredentialKind};
use scheduler::control::{ControlConfig, ControlMetrics, Controller};
use scheduler::jobs::{JobEvent, JobService};
use scheduler::model::{Attempt, BlockedOffer, Job, JobSpec, SpecFormat};
use simulator::arm_emulator::{EmulatorConfig, EmulatorHandle, serve};
use simulator::{SimCloud, SimCloudConfig};
use state::Store;

const START_MS: i64 = 1_800_000_000_000;
const ROUND_S: i64 = 60;
const HOURS: i64 = 4;
const TOKEN: &str = "storm-token";
const A100: &str = "Standard_NC24ads_A100_v4";

fn cloud_config() -> SimCloudConfig {
    let mut c = SimCloudConfig::modest(["eastus", "westus3"]);
    c.provisioning_seconds = 60;
    c.default_capacity_vms = 64;
    c.default_quota.cores = 2000;
    c.default_quota.low_priority_cores = 2000;
    c.default_quota.family = 2000;
    c
}

/// One side of the comparison: a loop, its store, its clock and the simulated cloud behind it.
struct Side {
    clock: Arc<ManualClock>,
    sim: Arc<SimCloud>,
    jobs: JobService,
    store: Store,
    ctl: Controller,
    emulator: Option<EmulatorHandle>,
}

async fn side(azure_fleet_api: Option<&str>) -> Side {
    let clock = Arc::new(ManualClock::new(START_MS));
    let sim = Arc::new(SimCloud::new(cloud_config(), Catalog::builtin(), clock.clone()).expect("valid cloud"));
    let (cloud, emulator): (Arc<dyn Cloud>, _) = match azure_fleet_api {
        None => (sim.clone(), None),
        Some(api) => {
            let mut ec = EmulatorConfig::new(TOKEN);
            ec.retry_after_seconds = 0;
            // The trait's delete on the simulated cloud is immediate: the same here.
            ec.delete_seconds = 0;
            let emu = serve(ec, sim.clone()).await.expect("emulator starts");
            let mut c = AzureConfig::new(emu.subscription(), "storm");
            c.management_endpoint = emu.base_url();
            c.regions = vec!["eastus".into(), "westus3".into()];
            c.credential = CredentialKind::StaticToken;
            c.token = Some(TOKEN.into());
            c.api_versions.fleet = api.into();
            // The spot signals read every round, as the simulated cloud shows them through the
            // trait, so both loops plan with the same priors.
            c.spot_signals_refresh_secs = 0.0;
            let azure = AzureCloud::new(c, Catalog::builtin())
                .expect("client builds")
                .with_clock(clock.clone())
                // The simulated cloud's spot rate, so both loops price spot alike.
                .with_spot_eviction_rate(0.0);
            (Arc::new(azure) as Arc<dyn Cloud>, Some(emu))
        }
    };
    let store = Store::in_memory().expect("store");
    let jobs = JobService::new(store.clone(), Arc::new(Catalog::builtin()), clock.clone()).without_flush();
    let ctl = Controller::new(
        store.clone(),
        cloud,
        clock.clone() as Arc<dyn Clock>,
        Arc::new(Catalog::builtin()),
        ControlConfig { durable: false, auto_complete: true, ..ControlConfig::default() },
        ControlMetrics::unregistered(),
    );
    Side { clock, sim, jobs, store, ctl, emulator }
}

fn spec(i: usize) -> JobSpec {
    let toml = format!(
        r#"
name = "embed-{i}"
kind = "batch"
gpus = 4
sizes = ["{A100}"]
regions = ["eastus", "westus3"]
spot = "preferred"
duration_hours = 5.0
checkpoint_interval_minutes = 30
"#
    );
    JobSpec::parse(&toml, SpecFormat::Toml).expect("spec parses")
}

/// What one run did: per job (evictions, failovers, attempts, lost GPU-hours, state) and totals,
/// every job's events (kind and time) and every capacity block the loop made.
#[derive(Debug)]
struct Outcome {
    jobs: Vec<(String, u32, u32, u32, f64, String)>,
    placements: u64,
    fleet_hours: f64,
    /// Per job, by name: `(minute, kind)` of each event (ids differ between sides; times do not).
    events: BTreeMap<String, Vec<(i64, String)>>,
    /// Every block seen after a round: `(since minute, until minute, scope, class, reason)`.
    blocks: BTreeSet<(i64, i64, String, String, String)>,
}

/// The storm, the same on both sides whatever the fleets are named: from hour 1 to hour 3 a spot
/// VM of job `k mod 4` every 7 minutes, two of job `k+1 mod 4` every 23 minutes, and at hour 2
/// every VM of job 0 (its fleet is lost: a failover).
fn storm_at(t: i64) -> Vec<(usize, u32)> {
    let mut out = Vec::new();
    if !(3600..3 * 3600).contains(&t) {
        return out;
    }
    let m = (t - 3600) / 60;
    if m % 7 == 3 {
        out.push(((m / 7) as usize % 4, 1));
    }
    if m % 23 == 11 {
        out.push(((m / 23 + 1) as usize % 4, 2));
    }
    if t == 2 * 3600 {
        out.push((0, 4));
    }
    out
}

/// The fleet of job `embed-{i}`'s live attempt.
fn fleet_of(s: &Side, i: usize) -> Option<String> {
    let job = s.store.scan::<Job>().ok()?.into_iter().find(|j| j.spec.name == format!("embed-{i}"))?;
    let attempts = s.store.by_index::<Attempt>("job", &job.id).ok()?;
    attempts.into_iter().filter(|a| a.is_active()).max_by_key(|a| a.number).map(|a| a.fleet_name)
}

/// Submits four spot-preferred jobs, runs 4 h of rounds through the storm, and reports.
async fn run(s: &Side) -> Outcome {
    for i in 0..4 {
        s.jobs.submit(spec(i), None).expect("accepted");
    }
    let mut placements = 0u64;
    let mut blocks = BTreeSet::new();
    let minute = |ms: i64| (ms - START_MS) / 60_000;
    for round in 0..(HOURS * 3600 / ROUND_S) {
        let t = round * ROUND_S;
        // Halfway between rounds, so a loss is seen by the next round on both sides.
        s.clock.advance_ms(ROUND_S * 500);
        for (job, vms) in storm_at(t) {
            if let Some(fleet) = fleet_of(s, job) {
                s.sim.evict(&fleet, vms).expect("fleet exists");
            }
        }
        s.clock.advance_ms(ROUND_S * 500);
        let r = s.ctl.reconcile().await.expect("round runs");
        placements += u64::from(r.placements);
        for b in s.store.scan::<BlockedOffer>().expect("blocks") {
            blocks.insert((minute(b.since_ms), minute(b.until_ms), b.key(), format!("{:?}", b.class), b.reason));
        }
    }
    let end = s.clock.now_ms();
    let attempts: Vec<Attempt> = s.store.scan::<Attempt>().expect("attempts");
    let fleet_hours = attempts
        .iter()
        .filter_map(|a| a.running_since_ms.map(|from| (a.ended_at_ms.unwrap_or(end) - from) as f64 / 3_600_000.0))
        .sum();
    let mut jobs: Vec<(String, u32, u32, u32, f64, String)> = s
        .store
        .scan::<Job>()
        .expect("jobs")
        .into_iter()
        .map(|j| {
            let name = j.spec.name.clone();
            (
                name,
                j.evictions,
                j.failovers,
                j.attempts,
                (j.lost_work_gpu_hours * 100.0).round() / 100.0,
                j.state.as_str().into(),
            )
        })
        .collect();
    jobs.sort_by(|a, b| a.0.cmp(&b.0));
    let names: BTreeMap<String, String> =
        s.store.scan::<Job>().expect("jobs").into_iter().map(|j| (j.id, j.spec.name.clone())).collect();
    let mut events: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
    for e in s.store.scan::<JobEvent>().expect("events") {
        events.entry(names[&e.job_id].clone()).or_default().push((minute(e.at_ms), e.kind.to_string()));
    }
    Outcome { jobs, placements, fleet_hours, events, blocks }
}

/// ARM calls by kind: (all, creating a fleet: PUTs and operation polls, fleet GETs, VM lists).
fn calls(emu: &EmulatorHandle) -> (u64, u64, u64, u64) {
    let st = emu.stats();
    let vm_lists = st.count("GET", "/virtualMachines", None);
    let fleet_gets = st.count("GET", "/fleets/{name}", None) - st.count("GET", "/fleets/{name}/", None);
    let create = st.count("PUT", "/fleets/{name}", None) + st.count("GET", "/operationStatuses/", None);
    (st.total, create, fleet_gets, vm_lists)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_storm_on_azure_loses_and_moves_what_the_simulated_cloud_does() {
    let sim_side = side(None).await;
    let sim = run(&sim_side).await;
    let after_side = side(Some("2026-08-01")).await;
    let after = run(&after_side).await;
    let before_side = side(Some("2024-11-01")).await;
    let before = run(&before_side).await;

    let evictions: u32 = sim.jobs.iter().map(|j| j.1).sum();
    assert!(evictions >= 10, "the storm evicts: {sim:#?}");
    assert!(sim.jobs.iter().map(|j| j.3).sum::<u32>() > 4, "a fleet lost whole is replaced: {sim:#?}");
    assert_eq!(after.jobs, sim.jobs, "Azure with VM reads sees what the simulated cloud does");
    assert_eq!(after.placements, sim.placements);
    assert_eq!(after.events, sim.events, "the same events at the same minutes, job by job");
    assert!(sim.blocks.iter().any(|b| b.4 == "spot VMs evicted"), "the lost fleet blocks its offer: {:#?}", sim.blocks);
    assert_eq!(after.blocks, sim.blocks, "the same capacity blocks, from the same minutes");
    let seen_before: u32 = before.jobs.iter().map(|j| j.1).sum();
    assert!(seen_before < evictions, "without VM reads evictions go unseen: {before:#?}");

    println!(
        "| run | evictions | failovers | lost GPU-h | placements | fleet-hours | ARM calls | create calls per placement | fleet GETs per fleet-hour | VM lists per fleet-hour |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (name, o, emu) in [
        ("simulated cloud", &sim, None),
        ("azure 2024-11-01 (no VM reads)", &before, before_side.emulator.as_ref()),
        ("azure 2026-08-01 (VM reads)", &after, after_side.emulator.as_ref()),
    ] {
        let ev: u32 = o.jobs.iter().map(|j| j.1).sum();
        let fo: u32 = o.jobs.iter().map(|j| j.2).sum();
        let lost: f64 = o.jobs.iter().map(|j| j.4).sum();
        let (total, create, gets, vms) = emu.map(calls).unwrap_or_default();
        let fh = o.fleet_hours.max(1e-9);
        println!(
            "| {name} | {ev} | {fo} | {lost:.2} | {} | {:.1} | {total} | {:.1} | {:.1} | {:.1} |",
            o.placements,
            o.fleet_hours,
            create as f64 / o.placements.max(1) as f64,
            gets as f64 / fh,
            vms as f64 / fh
        );
    }
    // At most one VM list per fleet per minute: rounds are a minute apart, so at most one per
    // fleet-round, i.e. 60 per fleet-hour (plus the read when a fleet starts running).
    let (_, _, _, vms) = calls(after_side.emulator.as_ref().unwrap());
    let fleets = after_side.sim.counters().creates_attempted.max(1) as f64;
    assert!(
        vms as f64 <= after.fleet_hours * 60.0 + 2.0 * fleets,
        "{vms} VM lists in {} fleet-hours",
        after.fleet_hours
    );
}
