//! What connected agents cost the scheduler: the release `spillway serve --cloud azure` (against
//! `spillway emulate-arm`, which holds one fleet of N VMs for a capacity-only job whose attempt is
//! written to the store before the server starts) takes registrations and heartbeats from N
//! simulated agents (tasks of this process speaking the real agent protocol with the attempt's real
//! credential, 8 GPU samples per heartbeat), and the server's own CPU time is read from
//! `/proc/<pid>/stat`:
//!
//! 1. registration of N agents (64 at a time);
//! 2. steady state: every agent sends a heartbeat every `--interval` seconds (5, the default agents
//!    use), staggered, for `--seconds`: the server's CPU share per 1,000 agents;
//! 3. saturation: 64 connections send heartbeats back to back for 10 s: the most heartbeats per
//!    second this machine's server absorbs (the load generator shares the machine).
//!
//! ```text
//! cargo bench -p spillway --bench agent_heartbeats                      # 1000 agents, 30 s
//! cargo bench -p spillway --bench agent_heartbeats -- --agents 2000 --seconds 60 --json out.json
//! ```
//!
//! Prints a JSON summary; exit 1 when a registration or heartbeat fails.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use scheduler::agents::AgentKeys;
use scheduler::agents::protocol::{GpuSample, Heartbeat, Phase, Registration};
use scheduler::cloud::azure::fleet_body::{FleetBodyOptions, attempt_request, build_fleet};
use scheduler::model::{Attempt, AttemptState, Job, JobSpec, JobState, Priority, fleet_name};
use serde_json::{Value, json};

const TOKEN: &str = "bench-emulator-token";
const SUB: &str = "00000000-0000-0000-0000-000000000000";
const RG: &str = "spillway-bench";
const SIZE: &str = "Standard_NC4as_T4_v3";
const JOB: &str = "j-heartbeat-bench";

const SCENARIO: &str = r#"
[cloud]
regions = ["eastus"]
seed = 1
provisioning_seconds = 1
poll_after_seconds = 1
default_capacity_vms = 100000
default_spot_eviction_rate_per_hour = 0.0
[cloud.default_quota]
cores = 10000000
low_priority_cores = 10000000
family = 10000000
"#;

struct Options {
    agents: u32,
    seconds: u64,
    interval: f64,
    json: Option<std::path::PathBuf>,
}

fn options() -> Result<Options, String> {
    let mut o = Options { agents: 1000, seconds: 30, interval: 5.0, json: None };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--agents" => o.agents = val("--agents")?.parse().map_err(|e| format!("--agents: {e}"))?,
            "--seconds" => o.seconds = val("--seconds")?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--interval" => o.interval = val("--interval")?.parse().map_err(|e| format!("--interval: {e}"))?,
            "--json" => o.json = Some(val("--json")?.into()),
            "--bench" => {}
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(o)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

fn cpu_seconds(pid: u32) -> f64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    let Some(i) = s.rfind(')') else { return 0.0 };
    let f: Vec<&str> = s[i + 2..].split_whitespace().collect();
    let t = |k: usize| f.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (t(11) + t(12)) / ticks.max(1.0)
}

fn wait_line(path: &Path, prefix: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(rest) = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| t.lines().find_map(|l| l.strip_prefix(prefix).map(str::to_string)))
        {
            return rest.trim().to_string();
        }
        assert!(Instant::now() < deadline, "no {prefix:?} in {}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn spawn(dir: &Path, name: &str, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .env("SPILLWAY_LOG", "warn")
        .stdout(std::fs::File::create(dir.join(format!("{name}.out"))).unwrap())
        .stderr(std::fs::File::create(dir.join(format!("{name}.err"))).unwrap())
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

/// The job and its running attempt of `n` VMs, written before the server starts; the key the
/// server will derive credentials with.
fn prepare_store(data: &Path, n: u32) -> AgentKeys {
    let store = state::Store::open(data).unwrap();
    let keys = AgentKeys::load_or_create(&store).unwrap();
    let spec: JobSpec =
        serde_json::from_value(json!({"name": "bench", "kind": "batch", "gpus": n, "sizes": [SIZE]})).unwrap();
    let now = scheduler::clock::Clock::now_ms(&scheduler::clock::SystemClock);
    let mut job = Job::new(JOB.into(), spec, now);
    job.state = JobState::Running;
    job.attempts = 1;
    job.first_running_at_ms = Some(now);
    let attempt = Attempt {
        job_id: JOB.into(),
        number: 1,
        fleet_name: fleet_name(JOB, 1),
        region: "eastus".into(),
        size: SIZE.into(),
        alternatives: Vec::new(),
        priority: Priority::Regular,
        vms: n,
        min_vms: None,
        growing_to: None,
        gpus: n,
        vcpus: 4 * u64::from(n),
        family: "standardNCASv3_T4Family".into(),
        price_per_hour: 0.526,
        max_price_per_vm: None,
        state: AttemptState::Running,
        started_at_ms: now,
        running_since_ms: Some(now),
        ended_at_ms: None,
        operation: None,
        running_vms: n,
        below_min_since_ms: None,
        cost_usd: 0.0,
        egress_usd: 0.0,
        egress_gb: 0.0,
        accounted_until_ms: Some(now),
        failure: None,
        failure_class: None,
        regular: None,
    };
    store.put(&job).unwrap();
    store.put(&attempt).unwrap();
    store.flush().unwrap();
    keys
}

fn heartbeat() -> Heartbeat {
    Heartbeat {
        phase: Phase::Waiting,
        restart: None,
        gpus: Some(
            (0..8)
                .map(|i| GpuSample {
                    index: i,
                    utilization_percent: 63.0,
                    memory_used_mib: 40_000,
                    memory_total_mib: 81_920,
                })
                .collect(),
        ),
    }
}

fn main() {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("agent_heartbeats: {e}");
            std::process::exit(2);
        }
    };
    let dir = std::env::temp_dir().join(format!("spillway-hb-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = dir.join("scenario.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let mut emu = spawn(
        &dir,
        "emulator",
        &["emulate-arm", "--no-agents", "--port", "0", "--token", TOKEN, "--scenario", scenario.to_str().unwrap()],
    );
    let emu_url = wait_line(&dir.join("emulator.out"), "ARM emulator listening on ")
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let data = dir.join("data");
    let keys = prepare_store(&data, o.agents);
    let config = dir.join("spillway.toml");
    std::fs::write(
        &config,
        format!(
            "[azure]\nsubscription_id = \"{SUB}\"\nresource_group = \"{RG}\"\nregions = [\"eastus\"]\n\
             management_endpoint = \"{emu_url}\"\ncredential = \"static_token\"\ntoken = \"{TOKEN}\"\n\
             [agent]\nheartbeat_interval_secs = {}\n",
            o.interval
        ),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let http =
        reqwest::Client::builder().pool_max_idle_per_host(1024).timeout(Duration::from_secs(60)).build().unwrap();
    // The attempt's fleet, as the scheduler itself would have asked for it.
    let req = attempt_request(JOB, 1, "eastus", Priority::Regular, vec![SIZE.into()], o.agents, true, None);
    let body = build_fleet(&req, &FleetBodyOptions::default()).unwrap();
    rt.block_on(async {
        let url = format!(
            "{emu_url}/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.AzureFleet/fleets/{}?api-version=2024-11-01",
            req.name
        );
        let r = http.put(&url).bearer_auth(TOKEN).json(&body).send().await.unwrap();
        assert!(r.status().is_success(), "PUT fleet: {} {}", r.status(), r.text().await.unwrap());
        tokio::time::sleep(Duration::from_secs(2)).await;
    });
    let mut serve = spawn(
        &dir,
        "serve",
        &[
            "serve",
            "--cloud",
            "azure",
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            data.to_str().unwrap(),
        ],
    );
    let url = wait_line(&dir.join("serve.out"), "spillway listening on ");
    let pid = serve.id();
    let report = rt.block_on(run(&o, &http, &url, &keys, pid));
    let _ = serve.kill();
    let _ = serve.wait();
    let _ = emu.kill();
    let _ = emu.wait();
    let _ = std::fs::remove_dir_all(&dir);
    match report {
        Ok(v) => {
            println!("{}", serde_json::to_string_pretty(&v).unwrap());
            if let Some(p) = &o.json {
                std::fs::write(p, serde_json::to_string_pretty(&v).unwrap() + "\n").unwrap();
            }
        }
        Err(e) => {
            eprintln!("agent_heartbeats: {e}");
            std::process::exit(1);
        }
    }
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[(((v.len() - 1) as f64) * p).round() as usize]
}

async fn run(o: &Options, http: &reqwest::Client, url: &str, keys: &AgentKeys, pid: u32) -> Result<Value, String> {
    let cred = keys.mint(JOB, 1);
    let base = format!("{url}/v1/agent/jobs/{JOB}/attempts/1");
    // The server is up once its first round has run.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !http.get(format!("{url}/readyz")).send().await.is_ok_and(|r| r.status().is_success()) {
        if Instant::now() > deadline {
            return Err("the server never became ready".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rss_idle = rss_kib(pid);
    // 1. Registration.
    let t0 = Instant::now();
    let cpu0 = cpu_seconds(pid);
    let sem = Arc::new(tokio::sync::Semaphore::new(64));
    let mut tasks = Vec::new();
    for i in 0..o.agents {
        let (http, base, cred, sem) = (http.clone(), base.clone(), cred.clone(), sem.clone());
        tasks.push(tokio::spawn(async move {
            let _p = sem.acquire().await.unwrap();
            let reg = Registration {
                vm_name: format!("bench-vm{i}"),
                hostname: format!("bench-vm{i}"),
                private_ip: format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256),
                gpus: None,
                boot_id: format!("boot{i}"),
                agent_version: "bench".into(),
            };
            let r = http
                .post(format!("{base}/register"))
                .bearer_auth(&cred)
                .json(&reg)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if !r.status().is_success() {
                return Err(format!("register {i}: {} {}", r.status(), r.text().await.unwrap_or_default()));
            }
            let v: Value = r.json().await.map_err(|e| e.to_string())?;
            Ok::<u64, String>(v["rank"].as_u64().unwrap_or(0))
        }));
    }
    let mut ranks = Vec::new();
    for t in tasks {
        ranks.push(t.await.map_err(|e| e.to_string())??);
    }
    let register_s = t0.elapsed().as_secs_f64();
    let register_cpu = cpu_seconds(pid) - cpu0;
    let rss_registered = rss_kib(pid);
    // 2. Steady state: every agent at its interval, staggered over the interval.
    let interval = Duration::from_secs_f64(o.interval);
    let sent = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(std::sync::Mutex::new(Vec::new()));
    let until = Instant::now() + Duration::from_secs(o.seconds);
    let cpu1 = cpu_seconds(pid);
    let t1 = Instant::now();
    let mut tasks = Vec::new();
    for (i, rank) in ranks.iter().enumerate() {
        let (http, base, cred) = (http.clone(), base.clone(), cred.clone());
        let (sent, failed, latencies) = (sent.clone(), failed.clone(), latencies.clone());
        let offset = interval.mul_f64(i as f64 / o.agents.max(1) as f64);
        let rank = *rank;
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(offset).await;
            let mut tick = tokio::time::interval(interval);
            let hb = heartbeat();
            while Instant::now() < until {
                tick.tick().await;
                let t = Instant::now();
                let r = http.post(format!("{base}/ranks/{rank}/heartbeat")).bearer_auth(&cred).json(&hb).send().await;
                match r {
                    Ok(r) if r.status().is_success() => {
                        let _ = r.bytes().await;
                        sent.fetch_add(1, Ordering::Relaxed);
                        latencies.lock().unwrap().push(t.elapsed().as_secs_f64() * 1000.0);
                    }
                    _ => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let steady_s = t1.elapsed().as_secs_f64();
    let steady_cpu = cpu_seconds(pid) - cpu1;
    let steady_sent = sent.load(Ordering::Relaxed);
    let mut lat = std::mem::take(&mut *latencies.lock().unwrap());
    let (p50, p99) = (percentile(&mut lat, 0.5), percentile(&mut lat, 0.99));
    let rss_steady = rss_kib(pid);
    // 3. Saturation.
    let sat_sent = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(10);
    let cpu2 = cpu_seconds(pid);
    let t2 = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..64u64 {
        let (http, base, cred, sat_sent, failed) =
            (http.clone(), base.clone(), cred.clone(), sat_sent.clone(), failed.clone());
        let ranks = ranks.clone();
        tasks.push(tokio::spawn(async move {
            let hb = heartbeat();
            let mut k = c as usize;
            while Instant::now() < until {
                let rank = ranks[k % ranks.len()];
                k += 64;
                match http.post(format!("{base}/ranks/{rank}/heartbeat")).bearer_auth(&cred).json(&hb).send().await {
                    Ok(r) if r.status().is_success() => {
                        let _ = r.bytes().await;
                        sat_sent.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let sat_s = t2.elapsed().as_secs_f64();
    let sat_cpu = cpu_seconds(pid) - cpu2;
    let sat = sat_sent.load(Ordering::Relaxed) as f64;
    let failures = failed.load(Ordering::Relaxed);
    if failures > 0 {
        return Err(format!("{failures} heartbeats failed"));
    }
    let per_1000 = 1000.0 / o.agents as f64;
    Ok(json!({
        "agents": o.agents,
        "heartbeat_interval_s": o.interval,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "registration": {"seconds": register_s, "server_cpu_s": register_cpu, "per_second": o.agents as f64 / register_s},
        "steady": {
            "seconds": steady_s,
            "heartbeats_per_second": steady_sent as f64 / steady_s,
            "server_cpu_share_of_one_core": steady_cpu / steady_s,
            "server_cpu_share_per_1000_agents": steady_cpu / steady_s * per_1000,
            "server_cpu_us_per_heartbeat": steady_cpu / steady_sent.max(1) as f64 * 1e6,
            "latency_ms_p50": p50,
            "latency_ms_p99": p99,
        },
        "saturation": {
            "heartbeats_per_second": sat / sat_s,
            "server_cpu_share_of_one_core": sat_cpu / sat_s,
            "server_cpu_us_per_heartbeat": sat_cpu / sat.max(1.0) * 1e6,
        },
        "rss_kib": {"idle": rss_idle, "registered": rss_registered, "after_steady": rss_steady,
                    "per_1000_agents": (rss_steady.saturating_sub(rss_idle)) as f64 * per_1000},
    }))
}
