//! Shared harness of the end-to-end reliability tests (`crash_e2e`, `fault_injection`,
//! `security`): starts the real `spillway` binary as `emulate-arm` and as `serve`, each with its
//! stdout and stderr in files of a temporary directory (so a test can grep the logs afterwards),
//! and talks real HTTP to them.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The bearer token the emulator demands from the scheduler.
pub const EMULATOR_TOKEN: &str = "emu-token-3f1d9c0a7be24e58";

/// A scenario where fleets are created in about a second and nothing is scarce, so every job can
/// be placed at once and the tests measure the scheduler, not the scarcity.
pub const FAST_SCENARIO: &str = r#"
[cloud]
regions = ["eastus", "westus3"]
seed = 7
provisioning_seconds = 1
eviction_reclaim_seconds = 600
poll_after_seconds = 1
default_capacity_vms = 400
default_spot_eviction_rate_per_hour = 0.0

[cloud.default_quota]
cores = 20000
low_priority_cores = 20000
family = 20000
"#;

/// A fresh temporary directory for one test (see [`TempDir`]).
pub fn temp_dir(name: &str) -> TempDir {
    let path = std::env::temp_dir().join(format!("spillway-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    std::fs::create_dir_all(&path).unwrap();
    TempDir { path }
}

/// A test's temporary directory: removed when the test passes, kept when it fails, for the logs
/// of the processes it ran (a test that forgot to remove its own left 7 MB a CI run in `/tmp`).
/// Declared before the servers that write into it, it is dropped after they are killed.
pub struct TempDir {
    path: PathBuf,
}

impl std::ops::Deref for TempDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<std::ffi::OsStr> for TempDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.path.as_os_str()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Waits until `file` holds a line starting with `prefix` and returns the rest of that line.
fn wait_for_line(file: &Path, prefix: &str, child: &mut Child, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(text) = std::fs::read_to_string(file)
            && let Some(line) = text.lines().find_map(|l| l.strip_prefix(prefix))
        {
            return line.trim().to_string();
        }
        if let Ok(Some(status)) = child.try_wait() {
            let err = std::fs::read_to_string(file.with_extension("err")).unwrap_or_default();
            panic!("{what} exited early ({status}): {err}");
        }
        assert!(Instant::now() < deadline, "{what} did not print {prefix:?} within 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A running `spillway emulate-arm`, killed on drop.
pub struct Emulator {
    pub child: Child,
    pub url: String,
}

impl Emulator {
    /// Starts the emulator on a free loopback port with `scenario` (TOML text) and extra flags.
    pub fn start(dir: &Path, scenario: &str, extra: &[&str]) -> Emulator {
        let scen = dir.join("scenario.toml");
        std::fs::write(&scen, scenario).unwrap();
        let out = dir.join("emulator.out");
        // The emulator is killed, not stopped with Ctrl-C: its agents' sandboxes go in the test's
        // directory, not in one of its own it would remove only on Ctrl-C.
        let own_vm_dir = extra.iter().any(|a| *a == "--vm-dir" || *a == "--no-agents");
        let vm_dir = dir.join("vms");
        let vm_dir_args = if own_vm_dir { Vec::new() } else { vec!["--vm-dir".as_ref(), vm_dir.as_os_str()] };
        let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(["emulate-arm", "--port", "0", "--token", EMULATOR_TOKEN, "--scenario"])
            .arg(&scen)
            .args(extra)
            .args(vm_dir_args)
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(out.with_extension("err")).unwrap())
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn spillway emulate-arm");
        let line = wait_for_line(&out, "ARM emulator listening on ", &mut child, "emulate-arm");
        let url = line.split_whitespace().next().unwrap().to_string();
        Emulator { child, url }
    }

    /// `GET /_emulator/stats`.
    pub async fn stats(&self) -> Value {
        client()
            .get(format!("{}/_emulator/stats", self.url))
            .bearer_auth(EMULATOR_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Waits until the resource group holds no fleet; fails naming `what` and the fleets left.
    pub async fn wait_no_fleets(&self, secs: u64, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let left = self.fleets().await;
            if left.is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "{what}: {left:#?}");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Every fleet of the resource group, through ARM's own list call (following `nextLink`).
    pub async fn fleets(&self) -> Vec<Value> {
        let mut url = Some(format!(
            "{}/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/spillway-test/providers/\
             Microsoft.AzureFleet/fleets?api-version=2024-11-01",
            self.url
        ));
        let mut all = Vec::new();
        while let Some(u) = url.take() {
            let page: Value = client().get(&u).bearer_auth(EMULATOR_TOKEN).send().await.unwrap().json().await.unwrap();
            all.extend(page["value"].as_array().cloned().unwrap_or_default());
            url = page["nextLink"].as_str().map(str::to_string);
        }
        all
    }

    /// Writes the `[azure]` config that points `serve --cloud azure` at this emulator.
    pub fn azure_config(&self, dir: &Path, extra: &str) -> PathBuf {
        let path = dir.join("spillway.toml");
        std::fs::write(
            &path,
            format!(
                "[azure]\nsubscription_id = \"00000000-0000-0000-0000-000000000000\"\nresource_group = \
                 \"spillway-test\"\nregions = [\"eastus\", \"westus3\"]\nmanagement_endpoint = \"{}\"\ncredential = \
                 \"static_token\"\ntoken = \"{EMULATOR_TOKEN}\"\n{extra}",
                self.url
            ),
        )
        .unwrap();
        path
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `spillway serve`, killed (SIGKILL) on drop.
pub struct Server {
    pub child: Child,
    pub url: String,
    pub admin: String,
    /// Where its stdout went (stderr is next to it, `.err`).
    pub out: PathBuf,
}

impl Server {
    /// Starts `spillway serve --listen 127.0.0.1:0 --data-dir <data>` plus `extra` (which may
    /// give its own `--listen`); stdout and
    /// stderr go to `<dir>/serve-<n>.out` / `.err` (`n` = `run`).
    pub fn start(dir: &Path, data: &Path, run: usize, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let out = dir.join(format!("serve-{run}.out"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_spillway"));
        cmd.arg("serve");
        if !extra.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        cmd.arg("--data-dir")
            .arg(data)
            .args(extra)
            .env_remove("SPILLWAY_CONFIG")
            .env_remove("SPILLWAY_LOG")
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(out.with_extension("err")).unwrap())
            .stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn spillway serve");
        let url = wait_for_line(&out, "spillway listening on ", &mut child, "spillway serve");
        // A server sharing a PostgreSQL store with another one writes no admin token of its own.
        let admin = std::fs::read_to_string(data.join("admin.token")).unwrap_or_default().trim().to_string();
        Server { child, url, admin, out }
    }

    /// SIGKILL: no graceful shutdown, no final flush.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// stdout and stderr of the run so far.
    pub fn logs(&self) -> String {
        let mut s = std::fs::read_to_string(&self.out).unwrap_or_default();
        s.push_str(&std::fs::read_to_string(self.out.with_extension("err")).unwrap_or_default());
        s
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An HTTP client with a short timeout (a killed server must not hang a test).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap()
}

/// A one-GPU batch job on a size every region of [`FAST_SCENARIO`] has.
pub fn quick_job(name: &str, tenant: &str) -> Value {
    json!({
        "name": name, "tenant": tenant, "kind": "batch", "gpus": 1,
        "sizes": ["Standard_NC4as_T4_v3"], "spot": "never", "duration_hours": 0.05
    })
}

/// Every job of the server (admin view), or `None` when it does not answer.
pub async fn list_jobs(url: &str, admin: &str) -> Option<Vec<Value>> {
    let resp = client().get(format!("{url}/v1/jobs?limit=100000")).bearer_auth(admin).send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let v: Value = resp.json().await.ok()?;
    v["jobs"].as_array().cloned()
}

/// Whether a job (as the API lists it) has ended: nothing will change it any more.
pub fn is_final(j: &Value) -> bool {
    matches!(j["state"].as_str(), Some("succeeded" | "failed" | "cancelled"))
}

/// `GET path` with the admin token, read as JSON.
pub async fn admin_get(s: &Server, path: &str) -> Value {
    client().get(format!("{}{path}", s.url)).bearer_auth(&s.admin).send().await.unwrap().json().await.unwrap()
}

/// A job's detail (`GET /v1/jobs/{id}`), admin view.
pub async fn job_detail(s: &Server, id: &str) -> Value {
    admin_get(s, &format!("/v1/jobs/{id}")).await
}

/// Waits until the job is in one of `states`; fails with the job and the server's log otherwise.
pub async fn wait_state(s: &Server, id: &str, states: &[&str], secs: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let d = job_detail(s, id).await;
        if states.contains(&d["job"]["state"].as_str().unwrap_or("")) {
            return d;
        }
        assert!(Instant::now() < deadline, "job {id} not in {states:?} after {secs} s: {d:#}\n{}", s.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Completes every running job once (the Azure cloud has no notion of "the work is done": a
/// client says so). Returns how many were completed.
pub async fn complete_running(url: &str, admin: &str) -> usize {
    let Some(jobs) = list_jobs(url, admin).await else { return 0 };
    let mut n = 0;
    for j in jobs.iter().filter(|j| j["state"] == "running") {
        let id = j["id"].as_str().unwrap();
        if let Ok(r) = client().post(format!("{url}/v1/jobs/{id}/complete")).bearer_auth(admin).send().await
            && r.status().is_success()
        {
            n += 1;
        }
    }
    n
}

/// A small deterministic PRNG (xorshift64*), so a failing run can be replayed from its seed.
pub struct Rng(u64);

impl Rng {
    /// Seeded from `SPILLWAY_TEST_SEED` when set, else from the clock (printed by the caller).
    pub fn from_env_or_time() -> (Rng, u64) {
        let seed = std::env::var("SPILLWAY_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
        });
        (Rng(seed | 1), seed)
    }

    /// Next value.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
}

/// Runs the `spillway` CLI against `s` as the admin of its data directory under `dir` (no token
/// from the environment), as a user on the server's machine would.
pub fn cli(s: &Server, dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .env("SPILLWAY_URL", &s.url)
        .env("SPILLWAY_DATA_DIR", dir.join("data"))
        .env_remove("SPILLWAY_TOKEN")
        .output()
        .unwrap()
}

/// A command's stdout and stderr together, for assertions and failure messages.
pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The messages of a job detail's events of one kind, oldest first.
pub fn events_of(d: &Value, kind: &str) -> Vec<String> {
    d["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == kind)
        .map(|e| e["message"].as_str().unwrap().to_string())
        .collect()
}
