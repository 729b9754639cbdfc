//! Acknowledged durable inserts per second, and acknowledgement latency, with N concurrent writers.
//!
//! An insert is acknowledged when `put` and then `flush` (the durability barrier) have returned, as
//! the API does before answering a job submission. Run:
//!
//! ```sh
//! cargo run --release -p state --example bench            # 1, 8 and 64 writers, 5 s each
//! cargo run --release -p state --example bench -- 64 10   # 64 writers for 10 s
//! ```
//! The store is created under `target/state-bench` (a real disk, not tmpfs), or `$STATE_BENCH_DIR`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use state::{IndexDef, Record, Store, TableDef};

/// About the size of a submitted job record (spec, state, tenant).
#[derive(Serialize, Deserialize, Clone)]
struct Job {
    id: String,
    tenant: String,
    state: String,
    spec: String,
}

impl Record for Job {
    const TABLE: TableDef = TableDef {
        name: "jobs",
        indexes: &[IndexDef { name: "state", pointer: "/state" }, IndexDef { name: "tenant", pointer: "/tenant" }],
    };
    fn key(&self) -> String {
        self.id.clone()
    }
}

fn run(writers: usize, seconds: u64) -> Result<(), state::StoreError> {
    let dir = std::env::var_os("STATE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/state-bench"))
        .join(format!("w{writers}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open(&dir)?;
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(writers + 1));
    let spec = "x".repeat(400);
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let (store, stop, start, spec) = (store.clone(), stop.clone(), start.clone(), spec.clone());
            std::thread::spawn(move || -> Result<Vec<Duration>, state::StoreError> {
                let mut latencies = Vec::new();
                start.wait();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let job = Job {
                        id: format!("w{w}-{i}"),
                        tenant: format!("tenant-{}", i % 7),
                        state: "queued".into(),
                        spec: spec.clone(),
                    };
                    store.put(&job)?;
                    store.flush()?;
                    latencies.push(t.elapsed());
                    i += 1;
                }
                Ok(latencies)
            })
        })
        .collect();
    let fsyncs_before = store.fsync_count();
    start.wait();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in threads {
        all.extend(t.join().expect("writer thread")?);
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let fsyncs = store.fsync_count() - fsyncs_before;
    all.sort();
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)].as_secs_f64() * 1000.0;
    println!(
        "{writers:>3} writers: {:>8.0} acknowledged inserts/s  p50 {:>6.2} ms  p99 {:>6.2} ms  max {:>7.2} ms  \
         ({} acks, {fsyncs} fsyncs, {:.1} acks/fsync, {elapsed:.1} s)",
        all.len() as f64 / elapsed,
        pct(0.50),
        pct(0.99),
        pct(1.0),
        all.len(),
        all.len() as f64 / fsyncs.max(1) as f64,
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parse = |i: usize, what: &str| {
        args.get(i).map(|s| s.parse::<u64>().unwrap_or_else(|_| panic!("{what} must be a number, got {s:?}")))
    };
    let writers = parse(0, "writers");
    let seconds = parse(1, "seconds").unwrap_or(5);
    let counts: Vec<usize> = match writers {
        Some(n) => vec![n as usize],
        None => vec![1, 8, 64],
    };
    for n in counts {
        if let Err(e) = run(n, seconds) {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
