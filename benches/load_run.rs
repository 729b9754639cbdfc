//! Sustained mixed load against a busy scheduler: starts the release `spillway serve` on loopback
//! with the simulated cloud (a load scenario written to the run's temporary directory: four regions,
//! room for a few hundred VMs, one region short of spot T4s and evicting them often, one-minute
//! provisioning, jobs of 3 to 5 simulated minutes, so at `--speedup 60` the control loop places,
//! follows, fails over and completes jobs all the time), then issues requests OPEN-LOOP at fixed
//! rates from several tenants for a fixed time: every request leaves on its schedule whether or not
//! the previous one has answered, and its latency is measured from that scheduled instant (so a
//! stalled server shows up in the latency instead of silently lowering the rate).
//!
//!     cargo bench -p spillway --bench load_run                      # 600 s at the default rates
//!     cargo bench -p spillway --bench load_run -- --seconds 60 --json /tmp/load.json
//!
//! Options (each also an environment variable, the option wins):
//! `--seconds N` (`SPILLWAY_LOAD_SECONDS`, 600), `--submit-rate R` (`SPILLWAY_LOAD_SUBMIT_RATE`, 20/s),
//! `--get-rate R` (`SPILLWAY_LOAD_GET_RATE`, 40/s: `GET /v1/jobs/{id}`), `--list-rate R`
//! (`SPILLWAY_LOAD_LIST_RATE`, 10/s: `GET /v1/jobs?limit=100`, by the tenant's own token),
//! `--cancel-rate R` (`SPILLWAY_LOAD_CANCEL_RATE`, 5/s, of jobs the run submitted recently),
//! `--tenants N` (`SPILLWAY_LOAD_TENANTS`, 4: one submitter token each), `--speedup X`
//! (`SPILLWAY_LOAD_SPEEDUP`, 60), `--max-rss-growth F` (`SPILLWAY_LOAD_MAX_RSS_GROWTH`, 0.5),
//! `--json FILE` (`SPILLWAY_LOAD_JSON`: the summary as JSON), `--retain-finished-hours H`
//! (`SPILLWAY_LOAD_RETAIN_FINISHED_HOURS`: passed to `serve`, in simulated hours; reads then pick
//! among the jobs submitted within half that window, which the server still holds; without it the
//! server keeps its default of 168 h, longer than any run).
//!
//! Exit status: 0 when every request got its expected status (201 for a submission, 200 for reads,
//! 200 or 409 "already ended" for a cancellation) with no transport error, and the server's RSS at
//! the end is at most `1 + max-rss-growth` times its RSS at the 60 s mark (for runs shorter than
//! 120 s: at the first sample after the warm-up); 1 otherwise; 2 on a bad option.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long requests run before the "start" RSS sample is taken.
const WARM_UP: Duration = Duration::from_secs(10);
/// How often RSS, load average and the store's size are sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(30);
/// Requests in flight beyond which the client itself is overloaded; counted as errors.
const MAX_IN_FLIGHT: usize = 4096;
/// A request not answered within this is a transport error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Cancellations pick among this many of the most recent submissions, most of them still open.
const CANCEL_WINDOW: usize = 200;

/// The simulated cloud the server runs: generous enough that jobs flow through (so the store holds
/// finished jobs, not an ever-growing queue), tight enough in eastus that placements fail over.
const SCENARIO: &str = r#"
[cloud]
regions = ["eastus", "eastus2", "southcentralus", "westus3"]
seed = 7
provisioning_seconds = 60
eviction_reclaim_seconds = 600
poll_after_seconds = 15
default_capacity_vms = 40
default_spot_eviction_rate_per_hour = 0.5

[cloud.default_quota]
cores = 6000
low_priority_cores = 4000
family = 3000

[[cloud.capacity]]
region = "eastus"
size = "Standard_NC4as_T4_v3"
priority = "spot"
vms = 3
eviction_rate_per_hour = 6.0

[[cloud.capacity]]
region = "eastus"
size = "Standard_NC24ads_A100_v4"
vms = 2
"#;

#[derive(Debug, Clone)]
struct Options {
    seconds: u64,
    submit_rate: f64,
    get_rate: f64,
    list_rate: f64,
    cancel_rate: f64,
    tenants: usize,
    speedup: f64,
    max_rss_growth: f64,
    json: Option<PathBuf>,
    /// Passed to `serve --retain-finished-hours` (simulated hours) when set.
    retain_finished_hours: Option<f64>,
}

fn parse_options() -> Result<Options, String> {
    fn env(name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
    fn num<T: std::str::FromStr>(what: &str, v: &str) -> Result<T, String> {
        v.parse().map_err(|_| format!("{what}: {v:?} is not a valid number"))
    }
    let mut raw: BTreeMap<&str, String> = BTreeMap::new();
    for (opt, var) in [
        ("--seconds", "SPILLWAY_LOAD_SECONDS"),
        ("--submit-rate", "SPILLWAY_LOAD_SUBMIT_RATE"),
        ("--get-rate", "SPILLWAY_LOAD_GET_RATE"),
        ("--list-rate", "SPILLWAY_LOAD_LIST_RATE"),
        ("--cancel-rate", "SPILLWAY_LOAD_CANCEL_RATE"),
        ("--tenants", "SPILLWAY_LOAD_TENANTS"),
        ("--speedup", "SPILLWAY_LOAD_SPEEDUP"),
        ("--max-rss-growth", "SPILLWAY_LOAD_MAX_RSS_GROWTH"),
        ("--json", "SPILLWAY_LOAD_JSON"),
        ("--retain-finished-hours", "SPILLWAY_LOAD_RETAIN_FINISHED_HOURS"),
    ] {
        if let Some(v) = env(var) {
            raw.insert(opt, v);
        }
    }
    let known = [
        "--seconds",
        "--submit-rate",
        "--get-rate",
        "--list-rate",
        "--cancel-rate",
        "--tenants",
        "--speedup",
        "--max-rss-growth",
        "--json",
        "--retain-finished-hours",
    ];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        // `cargo bench` passes `--bench` to every bench binary.
        if a == "--bench" {
            continue;
        }
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (a.clone(), None),
        };
        let Some(&opt) = known.iter().find(|k| **k == name) else {
            return Err(format!("unknown option {a:?}; known: {}", known.join(", ")));
        };
        let value = match inline {
            Some(v) => v,
            None => args.next().ok_or_else(|| format!("{opt} needs a value"))?,
        };
        raw.insert(opt, value);
    }
    let get = |k: &str| raw.get(k).map(String::as_str);
    let o = Options {
        seconds: get("--seconds").map(|v| num("--seconds", v)).transpose()?.unwrap_or(600),
        submit_rate: get("--submit-rate").map(|v| num("--submit-rate", v)).transpose()?.unwrap_or(20.0),
        get_rate: get("--get-rate").map(|v| num("--get-rate", v)).transpose()?.unwrap_or(40.0),
        list_rate: get("--list-rate").map(|v| num("--list-rate", v)).transpose()?.unwrap_or(10.0),
        cancel_rate: get("--cancel-rate").map(|v| num("--cancel-rate", v)).transpose()?.unwrap_or(5.0),
        tenants: get("--tenants").map(|v| num("--tenants", v)).transpose()?.unwrap_or(4),
        speedup: get("--speedup").map(|v| num("--speedup", v)).transpose()?.unwrap_or(60.0),
        max_rss_growth: get("--max-rss-growth").map(|v| num("--max-rss-growth", v)).transpose()?.unwrap_or(0.5),
        json: get("--json").map(PathBuf::from),
        retain_finished_hours: get("--retain-finished-hours").map(|v| num("--retain-finished-hours", v)).transpose()?,
    };
    if o.seconds < 20 {
        return Err(format!("--seconds: {} is too short; at least 20 (10 of them warm-up)", o.seconds));
    }
    for (name, r) in [
        ("--submit-rate", o.submit_rate),
        ("--get-rate", o.get_rate),
        ("--list-rate", o.list_rate),
        ("--cancel-rate", o.cancel_rate),
    ] {
        if !r.is_finite() || !(0.0..=10_000.0).contains(&r) {
            return Err(format!("{name}: {r} must be between 0 and 10000 requests per second"));
        }
    }
    if o.submit_rate == 0.0 && (o.get_rate > 0.0 || o.cancel_rate > 0.0) {
        return Err("--submit-rate: must be above 0 when jobs are read or cancelled".into());
    }
    if o.tenants == 0 || o.tenants > 100 {
        return Err(format!("--tenants: {} must be between 1 and 100", o.tenants));
    }
    if !o.speedup.is_finite() || o.speedup <= 0.0 {
        return Err(format!("--speedup: {} must be above 0", o.speedup));
    }
    if !o.max_rss_growth.is_finite() || o.max_rss_growth < 0.0 {
        return Err(format!("--max-rss-growth: {} must be 0 or more", o.max_rss_growth));
    }
    Ok(o)
}

/// The operations the load is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    Submit,
    GetJob,
    ListJobs,
    Cancel,
}

impl Op {
    const ALL: [Op; 4] = [Op::Submit, Op::GetJob, Op::ListJobs, Op::Cancel];

    fn name(self) -> &'static str {
        match self {
            Op::Submit => "submit (POST /v1/jobs)",
            Op::GetJob => "get job (GET /v1/jobs/{id})",
            Op::ListJobs => "list jobs (GET /v1/jobs)",
            Op::Cancel => "cancel (DELETE /v1/jobs/{id})",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Op::Submit => "submit",
            Op::GetJob => "get_job",
            Op::ListJobs => "list_jobs",
            Op::Cancel => "cancel",
        }
    }

    /// Statuses that are a correct answer under this load. A cancellation may race the job's own
    /// completion: 409 "already ended" is then the right answer.
    fn expected(self, status: u16) -> bool {
        match self {
            Op::Submit => status == 201,
            Op::GetJob | Op::ListJobs => status == 200,
            Op::Cancel => status == 200 || status == 409,
        }
    }
}

/// What one operation saw.
#[derive(Default)]
struct OpStats {
    latencies_ms: Vec<f64>,
    statuses: BTreeMap<String, u64>,
    errors: u64,
    error_samples: Vec<String>,
}

/// Everything the run records, shared by the request tasks.
struct Shared {
    http: reqwest::Client,
    url: String,
    tokens: Vec<String>,
    stats: Mutex<BTreeMap<Op, OpStats>>,
    /// Every job the run submitted (id, tenant index), for reads.
    submitted: Mutex<Vec<(String, usize)>>,
    /// Recent submissions not yet picked for cancellation.
    cancellable: Mutex<VecDeque<(String, usize)>>,
    in_flight: AtomicUsize,
    rng: AtomicU64,
    /// How many of the newest submissions reads pick from (`None`: all of them).
    read_window: Option<usize>,
}

impl Shared {
    /// A cheap shared pseudo-random number (splitmix64): good enough to pick jobs.
    fn random(&self) -> u64 {
        let mut z = self.rng.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn record(&self, op: Op, latency_ms: f64, outcome: Result<u16, String>) {
        let mut stats = self.stats.lock().unwrap();
        let s = stats.entry(op).or_default();
        s.latencies_ms.push(latency_ms);
        let problem = match outcome {
            Ok(code) => {
                *s.statuses.entry(code.to_string()).or_default() += 1;
                (!op.expected(code)).then(|| format!("unexpected status {code}"))
            }
            Err(e) => {
                *s.statuses.entry("transport".into()).or_default() += 1;
                Some(e)
            }
        };
        if let Some(p) = problem {
            s.errors += 1;
            if s.error_samples.len() < 5 {
                eprintln!("load_run: {}: {p}", op.key());
                s.error_samples.push(p);
            }
        }
    }
}

/// The job specs submitted, in turn: mostly cheap spot-friendly T4 batch work (which eastus cannot
/// hold, so some fails over or is evicted), A100 training that must run regular, and split T4 batch.
fn job_spec(n: u64) -> Value {
    match n % 10 {
        0..=5 => json!({
            "name": format!("load-t4-{n}"), "kind": "batch", "gpus": 1, "gpu_models": ["T4"],
            "spot": "allowed", "duration_hours": 0.05, "checkpoint_interval_minutes": 1
        }),
        6 | 7 => json!({
            "name": format!("load-a100-{n}"), "kind": "training", "gpus": 1, "gpu_models": ["A100"],
            "duration_hours": 0.08
        }),
        _ => json!({
            "name": format!("load-split-{n}"), "kind": "batch", "gpus": 2, "gpu_models": ["T4"],
            "gang": false, "spot": "preferred", "duration_hours": 0.05
        }),
    }
}

/// Sends one request and records it; `scheduled` is when it was due to leave.
async fn one_request(shared: Arc<Shared>, op: Op, n: u64, scheduled: Instant) {
    let tenant = (n as usize) % shared.tokens.len();
    let token = shared.tokens[tenant].clone();
    let http = &shared.http;
    let url = &shared.url;
    let outcome: Result<(u16, Option<Value>), String> = match op {
        Op::Submit => {
            let r = http.post(format!("{url}/v1/jobs")).bearer_auth(&token).json(&job_spec(n)).send().await;
            match r {
                Ok(r) => {
                    let code = r.status().as_u16();
                    match r.json::<Value>().await {
                        Ok(v) => Ok((code, Some(v))),
                        Err(e) => Err(format!("status {code}, unreadable body: {e}")),
                    }
                }
                Err(e) => Err(e.to_string()),
            }
        }
        Op::GetJob | Op::Cancel => {
            let pick = if op == Op::GetJob {
                let all = shared.submitted.lock().unwrap();
                // With a retention the server forgets finished jobs: read among those submitted
                // within half the retention (in real seconds), which it still has.
                let window = shared.read_window.unwrap_or(usize::MAX).min(all.len());
                let from = all.len() - window;
                if window == 0 { None } else { Some(all[from + (shared.random() % window as u64) as usize].clone()) }
            } else {
                let mut recent = shared.cancellable.lock().unwrap();
                if recent.is_empty() {
                    None
                } else {
                    let i = (shared.random() % recent.len() as u64) as usize;
                    recent.remove(i)
                }
            };
            // Nothing submitted yet (only at the very start): this slot is skipped, not counted.
            let Some((id, owner)) = pick else { return };
            let token = &shared.tokens[owner];
            let req = if op == Op::GetJob {
                http.get(format!("{url}/v1/jobs/{id}"))
            } else {
                http.delete(format!("{url}/v1/jobs/{id}"))
            };
            read_whole(req.bearer_auth(token).send().await).await
        }
        Op::ListJobs => read_whole(http.get(format!("{url}/v1/jobs?limit=100")).bearer_auth(&token).send().await).await,
    };
    let latency_ms = scheduled.elapsed().as_secs_f64() * 1000.0;
    if op == Op::Submit
        && let Ok((201, Some(v))) = &outcome
        && let Some(id) = v.get("id").and_then(Value::as_str)
    {
        shared.submitted.lock().unwrap().push((id.to_string(), tenant));
        let mut recent = shared.cancellable.lock().unwrap();
        recent.push_back((id.to_string(), tenant));
        while recent.len() > CANCEL_WINDOW {
            recent.pop_front();
        }
    }
    shared.record(op, latency_ms, outcome.map(|(c, _)| c));
}

/// Issues `op` at `rate` per second from `start` until `stop`, open-loop.
async fn drive(
    shared: Arc<Shared>,
    op: Op,
    rate: f64,
    start: Instant,
    stop: Instant,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut handles = Vec::new();
    if rate <= 0.0 {
        return handles;
    }
    let period = Duration::from_secs_f64(1.0 / rate);
    let mut n: u64 = 0;
    loop {
        let due = start + period.mul_f64(n as f64);
        if due >= stop {
            break;
        }
        tokio::time::sleep_until(due.into()).await;
        if shared.in_flight.load(Ordering::Relaxed) >= MAX_IN_FLIGHT {
            shared.record(op, 0.0, Err(format!("client: {MAX_IN_FLIGHT} requests in flight, request not sent")));
        } else {
            shared.in_flight.fetch_add(1, Ordering::Relaxed);
            let s = shared.clone();
            handles.push(tokio::spawn(async move {
                one_request(s.clone(), op, n, due).await;
                s.in_flight.fetch_sub(1, Ordering::Relaxed);
            }));
        }
        n += 1;
        // Keep the handle list short: finished requests need no joining.
        if handles.len() > 8192 {
            handles.retain(|h| !h.is_finished());
        }
    }
    handles
}

/// Resident set size of a process, KiB, from `/proc/<pid>/status`.
fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// CPU seconds (user + system) a process has used, from `/proc/<pid>/stat`.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((utime + stime) / ticks.max(1.0))
}

fn load_average() -> Option<[f64; 3]> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    let v: Vec<f64> = s.split_whitespace().take(3).filter_map(|x| x.parse().ok()).collect();
    (v.len() == 3).then(|| [v[0], v[1], v[2]])
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// One periodic observation of the server.
#[derive(Debug, Clone)]
struct Sample {
    at_s: f64,
    rss_kib: u64,
    cpu_s: f64,
    load: [f64; 3],
    store_bytes: u64,
    jobs_submitted: usize,
}

fn sample(pid: u32, data_dir: &Path, started: Instant, shared: &Shared) -> Sample {
    Sample {
        at_s: started.elapsed().as_secs_f64(),
        rss_kib: rss_kib(pid).unwrap_or(0),
        cpu_s: cpu_seconds(pid).unwrap_or(0.0),
        load: load_average().unwrap_or([0.0; 3]),
        store_bytes: dir_bytes(data_dir),
        jobs_submitted: shared.submitted.lock().unwrap().len(),
    }
}

fn sample_json(s: &Sample) -> Value {
    json!({
        "at_s": (s.at_s * 10.0).round() / 10.0, "rss_kib": s.rss_kib, "server_cpu_s": (s.cpu_s * 10.0).round() / 10.0,
        "loadavg_1m": s.load[0], "loadavg_5m": s.load[1], "loadavg_15m": s.load[2],
        "store_bytes": s.store_bytes, "jobs_submitted": s.jobs_submitted
    })
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Values of a Prometheus text exposition, by metric name with labels (`name{a="b"}`).
fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

async fn get_json(http: &reqwest::Client, url: &str, token: &str) -> Result<Value, String> {
    let r = http.get(url).bearer_auth(token).send().await.map_err(|e| format!("{url}: {e}"))?;
    let code = r.status();
    if !code.is_success() {
        return Err(format!("{url}: status {code}"));
    }
    r.json().await.map_err(|e| format!("{url}: {e}"))
}

async fn scrape_metrics(http: &reqwest::Client, url: &str, token: &str) -> BTreeMap<String, f64> {
    match http.get(format!("{url}/metrics")).bearer_auth(token).send().await {
        Ok(r) => parse_metrics(&r.text().await.unwrap_or_default()),
        Err(e) => {
            eprintln!("load_run: cannot read /metrics: {e}");
            BTreeMap::new()
        }
    }
}

fn metric(m: &BTreeMap<String, f64>, name: &str) -> f64 {
    m.get(name).copied().unwrap_or(0.0)
}

/// Sum of a labelled metric family over its labels (e.g. every `class` of a counter).
fn metric_sum(m: &BTreeMap<String, f64>, prefix: &str) -> f64 {
    m.iter().filter(|(k, _)| k.starts_with(prefix)).map(|(_, v)| v).sum()
}

fn main() {
    let opts = match parse_options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("load_run: {e}");
            std::process::exit(2);
        }
    };
    let dir = std::env::temp_dir().join(format!("spillway-load-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the run's temporary directory");
    let data_dir = dir.join("data");
    let scenario = dir.join("load-scenario.toml");
    std::fs::write(&scenario, SCENARIO).expect("write the load scenario");
    let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["serve", "--cloud", "sim", "--listen", "127.0.0.1:0", "--speedup"])
        .arg(opts.speedup.to_string())
        .arg("--scenario")
        .arg(&scenario)
        .arg("--data-dir")
        .arg(&data_dir)
        .args(opts.retain_finished_hours.map(|h| format!("--retain-finished-hours={h}")))
        .env("SPILLWAY_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn spillway serve");
    let pid = child.id();
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let url = loop {
        let line = match lines.next() {
            Some(Ok(l)) => l,
            _ => {
                eprintln!("load_run: spillway serve exited before printing its address");
                std::process::exit(1);
            }
        };
        if let Some(rest) = line.strip_prefix("spillway listening on ") {
            break rest.trim().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines.by_ref() {});
    let admin = std::fs::read_to_string(data_dir.join("admin.token")).expect("admin token").trim().to_string();

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let report = rt.block_on(run(opts.clone(), url, admin, pid, data_dir.clone()));
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);

    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("load_run: {e}");
            std::process::exit(1);
        }
    };
    if let Some(path) = &opts.json {
        let text = serde_json::to_string_pretty(&report.json).unwrap();
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("load_run: --json {}: {e}", path.display());
            std::process::exit(1);
        }
        println!("JSON summary written to {}", path.display());
    }
    println!("{}", serde_json::to_string(&report.json).unwrap());
    if !report.passed {
        std::process::exit(1);
    }
}

struct Report {
    json: Value,
    passed: bool,
}

async fn run(opts: Options, url: String, admin: String, pid: u32, data_dir: PathBuf) -> Result<Report, String> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .timeout(REQUEST_TIMEOUT)
        .build()
        .map_err(|e| e.to_string())?;
    // Wait for the first reconcile round.
    let ready_by = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = http.get(format!("{url}/readyz")).send().await
            && r.status().is_success()
        {
            break;
        }
        if Instant::now() > ready_by {
            return Err("the server was not ready within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut tokens = Vec::new();
    for t in 0..opts.tenants {
        let body = json!({"role": "submitter", "tenant": format!("load-{t}"), "name": format!("load-run {t}")});
        let r = http
            .post(format!("{url}/v1/tokens"))
            .bearer_auth(&admin)
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("creating tenant tokens: {e}"))?;
        let v: Value = r.json().await.map_err(|e| format!("creating tenant tokens: {e}"))?;
        tokens.push(v.get("token").and_then(Value::as_str).ok_or(format!("no token in {v}"))?.to_string());
    }
    let shared = Arc::new(Shared {
        http: http.clone(),
        url: url.clone(),
        tokens,
        stats: Mutex::new(BTreeMap::new()),
        submitted: Mutex::new(Vec::new()),
        cancellable: Mutex::new(VecDeque::new()),
        in_flight: AtomicUsize::new(0),
        rng: AtomicU64::new(0x5EED),
        read_window: opts
            .retain_finished_hours
            .map(|h| (h * 3_600.0 / opts.speedup / 2.0 * opts.submit_rate).max(1.0) as usize),
    });
    let metrics_before = scrape_metrics(&http, &url, &admin).await;
    let started = Instant::now();
    let stop = started + Duration::from_secs(opts.seconds);
    println!(
        "load_run: {} s against {url} (pid {pid}): {}/s submit, {}/s get, {}/s list, {}/s cancel, {} tenants",
        opts.seconds, opts.submit_rate, opts.get_rate, opts.list_rate, opts.cancel_rate, opts.tenants
    );
    let drivers: Vec<_> = [
        (Op::Submit, opts.submit_rate),
        (Op::GetJob, opts.get_rate),
        (Op::ListJobs, opts.list_rate),
        (Op::Cancel, opts.cancel_rate),
    ]
    .into_iter()
    .map(|(op, rate)| tokio::spawn(drive(shared.clone(), op, rate, started, stop)))
    .collect();

    // Samples: after the warm-up, every 30 s from the start, and at the end.
    let mut samples = Vec::new();
    let mut next = started + WARM_UP;
    let mut k = 1u32;
    while next < stop {
        tokio::time::sleep_until(next.into()).await;
        let s = sample(pid, &data_dir, started, &shared);
        println!(
            "  t={:>5.0}s rss {:>7} KiB  server cpu {:>6.1} s  load {:.2}  store {:>6.1} MiB  jobs submitted {}",
            s.at_s,
            s.rss_kib,
            s.cpu_s,
            s.load[0],
            s.store_bytes as f64 / 1048576.0,
            s.jobs_submitted
        );
        samples.push(s);
        next = started + SAMPLE_EVERY * k;
        k += 1;
    }
    let mut handles = Vec::new();
    for d in drivers {
        handles.extend(d.await.map_err(|e| e.to_string())?);
    }
    // The last request of a slow rate may be due well before the end: the run still lasts its time.
    tokio::time::sleep_until(stop.into()).await;
    let drain_by = Instant::now() + REQUEST_TIMEOUT + Duration::from_secs(5);
    for h in handles {
        let left = drain_by.saturating_duration_since(Instant::now());
        let _ = tokio::time::timeout(left, h).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let end = sample(pid, &data_dir, started, &shared);
    println!(
        "  t={:>5.0}s rss {:>7} KiB  server cpu {:>6.1} s  load {:.2}  store {:>6.1} MiB  jobs submitted {} (end)",
        end.at_s,
        end.rss_kib,
        end.cpu_s,
        end.load[0],
        end.store_bytes as f64 / 1048576.0,
        end.jobs_submitted
    );
    samples.push(end.clone());
    let metrics_after = scrape_metrics(&http, &url, &admin).await;

    let mut by_state = BTreeMap::new();
    for s in ["pending", "provisioning", "running", "migrating", "succeeded", "failed", "cancelled"] {
        let v = get_json(&http, &format!("{url}/v1/jobs?state={s}&limit=1"), &admin).await?;
        by_state.insert(s.to_string(), v.get("total").and_then(Value::as_u64).unwrap_or(0));
    }

    // Summary.
    let stats = std::mem::take(&mut *shared.stats.lock().unwrap());
    let mut total_errors = 0;
    let mut ops_json = serde_json::Map::new();
    println!();
    println!(
        "{:<32} {:>7} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8}   statuses",
        "operation", "count", "errors", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms"
    );
    for op in Op::ALL {
        let Some(mut s) = stats.get(&op).map(|s| OpStats {
            latencies_ms: s.latencies_ms.clone(),
            statuses: s.statuses.clone(),
            errors: s.errors,
            error_samples: s.error_samples.clone(),
        }) else {
            continue;
        };
        s.latencies_ms.sort_by(f64::total_cmp);
        let l = &s.latencies_ms;
        let (p50, p90, p99, p999) = (percentile(l, 0.5), percentile(l, 0.9), percentile(l, 0.99), percentile(l, 0.999));
        let max = l.last().copied().unwrap_or(f64::NAN);
        total_errors += s.errors;
        let statuses = s.statuses.iter().map(|(k, v)| format!("{k}:{v}")).collect::<Vec<_>>().join(" ");
        println!(
            "{:<32} {:>7} {:>6} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2}   {statuses}",
            op.name(),
            l.len(),
            s.errors,
            p50,
            p90,
            p99,
            p999,
            max
        );
        let r2 = |x: f64| (x * 100.0).round() / 100.0;
        ops_json.insert(
            op.key().into(),
            json!({
                "count": l.len(), "errors": s.errors, "statuses": s.statuses, "error_samples": s.error_samples,
                "rate_per_s": r2(l.len() as f64 / elapsed),
                "latency_ms": {"p50": r2(p50), "p90": r2(p90), "p99": r2(p99), "p99_9": r2(p999), "max": r2(max)}
            }),
        );
    }

    // RSS rule: the end against the 60 s mark (or the first sample after the warm-up for a run
    // too short to have a settled 60 s mark).
    let first = samples.first().cloned().unwrap_or(end.clone());
    let baseline = if opts.seconds >= 120 {
        samples.iter().find(|s| s.at_s >= 59.0).cloned().unwrap_or(first.clone())
    } else {
        first.clone()
    };
    let growth = end.rss_kib as f64 / baseline.rss_kib.max(1) as f64 - 1.0;
    let rss_ok = growth <= opts.max_rss_growth;
    let max_load = samples.iter().map(|s| s.load[0]).fold(0.0, f64::max);
    let mean_load = samples.iter().map(|s| s.load[0]).sum::<f64>() / samples.len().max(1) as f64;

    let rounds = metric(&metrics_after, "spillway_reconcile_rounds_total")
        - metric(&metrics_before, "spillway_reconcile_rounds_total");
    let solves = metric(&metrics_after, "spillway_solve_seconds_count")
        - metric(&metrics_before, "spillway_solve_seconds_count");
    let solve_sum =
        metric(&metrics_after, "spillway_solve_seconds_sum") - metric(&metrics_before, "spillway_solve_seconds_sum");
    let diff = |name: &str| metric_sum(&metrics_after, name) - metric_sum(&metrics_before, name);
    let control = json!({
        "rounds": rounds,
        "rounds_per_s": (rounds / elapsed * 100.0).round() / 100.0,
        "solves": solves,
        "mean_solve_ms": if solves > 0.0 { (solve_sum / solves * 1e5).round() / 100.0 } else { 0.0 },
        "placements": diff("spillway_placements_total"),
        "failovers": diff("spillway_failovers_total"),
        "evictions": diff("spillway_evictions_total"),
        "provisioning_failures": diff("spillway_provisioning_failures_total"),
        "note": "/metrics exposes the number of rounds and the solver's time per round, not a round's total duration"
    });

    println!();
    println!(
        "RSS: {} KiB after the warm-up (t={:.0}s), {} KiB at the baseline (t={:.0}s), {} KiB at the end: {:+.1}% \
         (limit +{:.0}%: {})",
        first.rss_kib,
        first.at_s,
        baseline.rss_kib,
        baseline.at_s,
        end.rss_kib,
        growth * 100.0,
        opts.max_rss_growth * 100.0,
        if rss_ok { "ok" } else { "EXCEEDED" }
    );
    println!(
        "RSS series (KiB): {}",
        samples.iter().map(|s| format!("{:.0}s:{}", s.at_s, s.rss_kib)).collect::<Vec<_>>().join(" ")
    );
    println!(
        "jobs by state at the end: {}",
        by_state.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
    );
    println!(
        "control loop: {rounds:.0} rounds ({:.2}/s), mean solve {} ms, {} placements, {} failovers, {} evictions, \
         {} provisioning failures",
        rounds / elapsed,
        control["mean_solve_ms"],
        control["placements"],
        control["failovers"],
        control["evictions"],
        control["provisioning_failures"]
    );
    println!(
        "load average (1 min): mean {mean_load:.2}, max {max_load:.2} over {} samples; server CPU {:.1} s in {elapsed:.0} s; \
         store {:.1} MiB at the end",
        samples.len(),
        end.cpu_s,
        end.store_bytes as f64 / 1048576.0
    );
    let passed = total_errors == 0 && rss_ok;
    println!(
        "result: {} ({} request errors; RSS {})",
        if passed { "PASS" } else { "FAIL" },
        total_errors,
        if rss_ok { "within the limit" } else { "grew beyond the limit" }
    );

    let json = json!({
        "duration_s": (elapsed * 10.0).round() / 10.0,
        "rates_per_s": {"submit": opts.submit_rate, "get_job": opts.get_rate, "list_jobs": opts.list_rate, "cancel": opts.cancel_rate},
        "tenants": opts.tenants,
        "speedup": opts.speedup,
        "operations": ops_json,
        "errors": total_errors,
        "rss": {
            "after_warm_up_kib": first.rss_kib, "baseline_kib": baseline.rss_kib, "baseline_at_s": baseline.at_s.round(),
            "end_kib": end.rss_kib, "growth": (growth * 1000.0).round() / 1000.0, "max_growth": opts.max_rss_growth,
            "ok": rss_ok
        },
        "samples": samples.iter().map(sample_json).collect::<Vec<_>>(),
        "jobs_by_state": by_state,
        "control_loop": control,
        "loadavg_1m": {"mean": (mean_load * 100.0).round() / 100.0, "max": max_load},
        "passed": passed,
    });
    Ok(Report { json, passed })
}

/// The status of a response whose body is read to the end and dropped (a cut-off body is an error).
async fn read_whole(sent: reqwest::Result<reqwest::Response>) -> Result<(u16, Option<Value>), String> {
    let r = sent.map_err(|e| e.to_string())?;
    let code = r.status().as_u16();
    r.bytes().await.map(|_| (code, None)).map_err(|e| format!("status {code}, body cut off: {e}"))
}
