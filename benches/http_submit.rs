//! Durable job submissions per second over loopback: starts the release `spillway serve`
//! (simulated cloud, control loop running, rate limit off), then 64 concurrent clients each
//! submit jobs as fast as the server acknowledges them (every 201 means the job is on disk).
//!
//!     cargo bench -p spillway --bench http_submit
//!
//! Environment: `SPILLWAY_BENCH_CLIENTS` (default 64), `SPILLWAY_BENCH_SECONDS` (default 10),
//! `SPILLWAY_BENCH_STORE` (a `--store` URL such as `postgres://…`; default the sled store in a fresh
//! data directory), `SPILLWAY_BENCH_BIN` (the `spillway` binary to serve with, to compare two builds
//! back to back; default the one built with the bench). The PostgreSQL database must be empty: the
//! bench writes into it.
//!
//!     .ci/with-postgres sh -c 'SPILLWAY_BENCH_STORE=$SPILLWAY_TEST_POSTGRES cargo bench -p spillway --bench http_submit'

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn main() {
    let clients = env_or("SPILLWAY_BENCH_CLIENTS", 64) as usize;
    let seconds = env_or("SPILLWAY_BENCH_SECONDS", 10);
    let dir = std::env::temp_dir().join(format!("spillway-bench-http-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = std::env::var("SPILLWAY_BENCH_STORE").ok();
    let bin = std::env::var("SPILLWAY_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_spillway").to_string());
    let mut serve = Command::new(bin);
    serve.args(["serve", "--listen", "127.0.0.1:0", "--rate-limit", "0", "--data-dir"]).arg(&dir);
    if let Some(url) = &store {
        serve.args(["--store", url]);
    }
    eprintln!("store: {}", if store.is_some() { "PostgreSQL (SPILLWAY_BENCH_STORE)" } else { "sled" });
    let mut child = serve
        .env("SPILLWAY_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn spillway serve");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().expect("serve printed its address").unwrap();
        if let Some(rest) = line.strip_prefix("spillway listening on ") {
            break rest.trim().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines.by_ref() {});
    let token = std::fs::read_to_string(dir.join("admin.token")).unwrap().trim().to_string();

    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let (latencies, errors, elapsed) = rt.block_on(async move {
        let http = reqwest::Client::builder().pool_max_idle_per_host(clients).build().unwrap();
        let counter = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        // Warm up: connections, tables, the first control-loop round.
        for i in 0..50 {
            let _ = submit(&http, &url, &token, &format!("warm-{i}")).await;
        }
        let started = Instant::now();
        let stop_at = started + Duration::from_secs(seconds);
        let mut tasks = Vec::new();
        for c in 0..clients {
            let (http, url, token, counter, errors) =
                (http.clone(), url.clone(), token.clone(), counter.clone(), errors.clone());
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::new();
                while Instant::now() < stop_at {
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    let t = Instant::now();
                    match submit(&http, &url, &token, &format!("bench-{c}-{n}")).await {
                        Ok(()) => lat.push(t.elapsed().as_secs_f64() * 1000.0),
                        Err(e) => {
                            if errors.fetch_add(1, Ordering::Relaxed) < 3 {
                                eprintln!("submission failed: {e}");
                            }
                        }
                    }
                }
                lat
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        (all, errors.load(Ordering::Relaxed), started.elapsed())
    });
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);

    let mut sorted = latencies;
    sorted.sort_by(f64::total_cmp);
    let rate = sorted.len() as f64 / elapsed.as_secs_f64();
    println!(
        "http_submit: {clients} clients, {:.1} s, {} durable submissions, {errors} errors",
        elapsed.as_secs_f64(),
        sorted.len()
    );
    println!(
        "  {rate:.0} submissions/s; latency p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        percentile(&sorted, 0.50),
        percentile(&sorted, 0.90),
        percentile(&sorted, 0.99),
        sorted.last().copied().unwrap_or(f64::NAN)
    );
}

async fn submit(http: &reqwest::Client, url: &str, token: &str, name: &str) -> Result<(), String> {
    let spec = serde_json::json!({
        "name": name, "tenant": "bench", "kind": "batch", "gpus": 1,
        "gpu_models": ["T4"], "spot": "allowed", "duration_hours": 1.0
    });
    let r =
        http.post(format!("{url}/v1/jobs")).bearer_auth(token).json(&spec).send().await.map_err(|e| e.to_string())?;
    if r.status() == reqwest::StatusCode::CREATED {
        Ok(())
    } else {
        Err(format!("status {}: {}", r.status(), r.text().await.unwrap_or_default()))
    }
}
