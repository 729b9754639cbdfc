//! Time from "VMs running" to "`run` started": the release `spillway serve` on the simulated cloud
//! runs `--jobs` gang jobs of `--vms` VMs one after the other (`run = "true"`); for every rank the
//! agent measures its own start to the start of `run` (instance metadata, GPU discovery,
//! registration, the wait for the rest of its gang, `setup`: none here) and reports it
//! (`startup_ms` in the job's detail). The simulated cloud starts each VM's agent within one poll
//! (100 ms) of the VM running; on Azure the VM's boot and cloud-init come before the agent starts.
//!
//! ```text
//! cargo bench -p spillway --bench agent_startup                    # 20 jobs of 2 VMs
//! cargo bench -p spillway --bench agent_startup -- --jobs 10 --vms 4
//! ```

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const SCENARIO: &str = r#"
[cloud]
regions = ["eastus"]
sizes = ["Standard_NC4as_T4_v3"]
seed = 1
provisioning_seconds = 60
poll_after_seconds = 5
default_capacity_vms = 64
default_spot_eviction_rate_per_hour = 0.0
[cloud.default_quota]
cores = 10000
low_priority_cores = 10000
family = 10000
"#;

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() { 0.0 } else { v[(((v.len() - 1) as f64) * p).round() as usize] }
}

fn main() {
    let mut jobs = 20u32;
    let mut vms = 2u32;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--jobs" => jobs = args.next().and_then(|v| v.parse().ok()).expect("--jobs N"),
            "--vms" => vms = args.next().and_then(|v| v.parse().ok()).expect("--vms N"),
            "--bench" => {}
            other => {
                eprintln!("agent_startup: unknown option {other}");
                std::process::exit(2);
            }
        }
    }
    let dir = std::env::temp_dir().join(format!("spillway-startup-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("scenario.toml"), SCENARIO).unwrap();
    let out = dir.join("serve.out");
    let mut serve = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["serve", "--listen", "127.0.0.1:0", "--speedup", "60", "--scenario"])
        .arg(dir.join("scenario.toml"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env("SPILLWAY_LOG", "warn")
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = loop {
        if let Some(u) = std::fs::read_to_string(&out)
            .ok()
            .and_then(|t| t.lines().find_map(|l| l.strip_prefix("spillway listening on ").map(str::to_string)))
        {
            break u;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let admin = std::fs::read_to_string(dir.join("data/admin.token")).unwrap().trim().to_string();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let result = rt.block_on(async {
        let http = reqwest::Client::new();
        let mut startup = Vec::new();
        let mut gang = Vec::new();
        for n in 0..jobs {
            let spec = json!({"name": format!("startup-{n}"), "kind": "training", "gpus": vms,
                              "sizes": ["Standard_NC4as_T4_v3"], "run": "true"});
            let v: Value =
                http.post(format!("{url}/v1/jobs")).bearer_auth(&admin).json(&spec).send().await?.json().await?;
            let id = v["id"].as_str().unwrap_or_default().to_string();
            let deadline = Instant::now() + Duration::from_secs(120);
            let d = loop {
                let d: Value = http.get(format!("{url}/v1/jobs/{id}")).bearer_auth(&admin).send().await?.json().await?;
                if d["job"]["state"] == "succeeded" || d["job"]["state"] == "failed" {
                    break d;
                }
                if Instant::now() > deadline {
                    panic!("job {id} did not end: {d:#}");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            let ms: Vec<f64> = d["nodes"].as_array().unwrap().iter().filter_map(|n| n["startup_ms"].as_f64()).collect();
            gang.push(ms.iter().copied().fold(0.0, f64::max));
            startup.extend(ms);
        }
        Ok::<_, reqwest::Error>((startup, gang))
    });
    let _ = serve.kill();
    let _ = serve.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let (mut startup, mut gang) = result.expect("the bench's requests");
    let summary = json!({
        "jobs": jobs, "vms_per_job": vms,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "rank_startup_ms": {"p50": percentile(&mut startup, 0.5), "p95": percentile(&mut startup, 0.95),
                            "max": percentile(&mut startup, 1.0), "n": startup.len()},
        "gang_startup_ms (slowest rank)": {"p50": percentile(&mut gang, 0.5), "p95": percentile(&mut gang, 0.95),
                                           "max": percentile(&mut gang, 1.0)},
    });
    println!("{}", serde_json::to_string_pretty(&summary).unwrap());
}
