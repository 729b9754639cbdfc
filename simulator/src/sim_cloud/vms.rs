//! Simulated VMs that run a real node agent: one local `spillway agent` process per VM of a fleet,
//! in a sandbox directory of its own (its "disk"), with a loopback address of its own
//! (`127.x.y.z`, all of which reach this host on Linux), and an instance metadata service that
//! serves each VM its name, its address and Scheduled Events.
//!
//! The simulated cloud counts VMs; this module gives them identities. It follows the fleets
//! ([`SimCloud::fleets_snapshot`]) on a short real-time poll: a fleet that gains VMs gets new
//! agent processes, a fleet that loses VMs loses processes (the ones given a notice first, then
//! the newest), a deleted fleet loses all of them. Every process the VM ran goes with it (the
//! agent is a session leader; its session is killed).
//!
//! Preemption notices come first: the simulated cloud draws each spot fleet's next eviction in
//! advance, so `notice_seconds` (simulated) before it the VM that will go gets a `Preempt` event,
//! as Azure gives at least 30 s. [`VmRunner::schedule_eviction`] evicts a VM of any fleet after a
//! notice of any length (the ARM emulator's control route; tests).
//!
//! Linux only: the processes are found by session in `/proc`, and `127.0.0.0/8` must be loopback.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use scheduler::agents::AgentSettings;
use scheduler::cloud::ProvisioningState;

use super::{FleetSnapshot, SimCloud};

/// Gives a fleet's VMs their agent settings, or none (the fleet runs no agent).
pub trait AgentLauncher: Send + Sync + 'static {
    /// The settings of the agents of `fleet`'s VMs; `vm_name`, `private_ip`, `imds_endpoint`,
    /// `work_dir` and `checkpoint_root` are the runner's to set.
    fn settings(&self, fleet: &FleetSnapshot) -> Option<AgentSettings>;
}

/// How the simulated VMs run.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct VmRunnerConfig {
    /// The agent program (`spillway`).
    pub program: PathBuf,
    /// Its arguments before `--config FILE` (`["agent"]`).
    pub args: Vec<String>,
    /// Where the VMs' sandboxes go (`<root>/<fleet>/<vm>/`).
    pub root: PathBuf,
    /// Every VM's checkpoint root (shared by all VMs: storage that outlives them).
    pub checkpoint_root: PathBuf,
    /// Simulated seconds between a `Preempt` notice and the eviction (Azure gives at least 30).
    pub notice_seconds: u64,
    /// How often the fleets are looked at (real time).
    pub poll: Duration,
    /// The agents' SIGTERM-to-SIGKILL grace, seconds.
    pub stop_grace_secs: u64,
}

impl VmRunnerConfig {
    /// Defaults for a program, under a root.
    pub fn new(program: PathBuf, args: Vec<String>, root: PathBuf, checkpoint_root: PathBuf) -> VmRunnerConfig {
        VmRunnerConfig {
            program,
            args,
            root,
            checkpoint_root,
            notice_seconds: 30,
            poll: Duration::from_millis(100),
            stop_grace_secs: 25,
        }
    }
}

/// One simulated VM, for reports and tests.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct VmInfo {
    /// Its fleet.
    pub fleet: String,
    /// Its name.
    pub name: String,
    /// Its address.
    pub private_ip: String,
    /// The agent's process id.
    pub pid: Option<u32>,
    /// When it was told it will be evicted (clock ms of the eviction).
    pub notice_for_ms: Option<i64>,
}

struct Vm {
    fleet: String,
    index: u32,
    name: String,
    ip: String,
    dir: PathBuf,
    child: tokio::process::Child,
    notice_for_ms: Option<i64>,
}

/// A scheduled event as the metadata service shows it.
#[derive(Debug, Clone)]
struct Event {
    id: String,
    fleet: String,
    vm: String,
    kind: &'static str,
    not_before_ms: i64,
    /// The runner evicts the VM itself at `not_before_ms` (a scheduled eviction); otherwise the
    /// simulated cloud's own draw does.
    forced: bool,
    approved: bool,
}

#[derive(Default)]
struct RunnerState {
    vms: BTreeMap<String, Vm>,
    next_index: BTreeMap<String, u32>,
    events: Vec<Event>,
    incarnation: u64,
    next_ip: u32,
    next_event: u64,
    imds_base: String,
    stopped: bool,
}

/// Runs the agents of a simulated cloud's VMs.
pub struct VmRunner {
    cloud: Arc<SimCloud>,
    launcher: Arc<dyn AgentLauncher>,
    config: VmRunnerConfig,
    state: Mutex<RunnerState>,
}

impl std::fmt::Debug for VmRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmRunner").field("root", &self.config.root).finish_non_exhaustive()
    }
}

impl VmRunner {
    /// A runner for `cloud`'s fleets; call [`VmRunner::serve_metadata`] or
    /// [`VmRunner::set_metadata_base`], then [`VmRunner::spawn`].
    pub fn new(cloud: Arc<SimCloud>, launcher: Arc<dyn AgentLauncher>, config: VmRunnerConfig) -> Arc<VmRunner> {
        Arc::new(VmRunner { cloud, launcher, config, state: Mutex::new(RunnerState::default()) })
    }

    fn lock(&self) -> MutexGuard<'_, RunnerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where the metadata routes ([`VmRunner::metadata_router`]) are served: each VM's agent gets
    /// `<base>/<vm name>` as its instance metadata endpoint.
    pub fn set_metadata_base(&self, base: &str) {
        self.lock().imds_base = base.trim_end_matches('/').to_string();
    }

    /// Serves the metadata routes on a loopback port of their own, under `/vms`, and the control
    /// routes ([`VmRunner::control_router`]) under `/control`.
    pub async fn serve_metadata(self: &Arc<Self>) -> std::io::Result<std::net::SocketAddr> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        self.set_metadata_base(&format!("http://{addr}/vms"));
        let app = self.metadata_router("/vms").merge(self.control_router("/control"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(addr)
    }

    /// Follows the fleets until [`VmRunner::shutdown`].
    pub fn spawn(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                if me.lock().stopped {
                    return;
                }
                me.tick();
                tokio::time::sleep(me.config.poll).await;
            }
        })
    }

    /// Kills every VM's processes and stops following the fleets.
    pub fn shutdown(&self) {
        let mut st = self.lock();
        st.stopped = true;
        let names: Vec<String> = st.vms.keys().cloned().collect();
        for n in names {
            if let Some(vm) = st.vms.remove(&n) {
                kill_vm(vm, false);
            }
        }
    }

    /// The VMs running now.
    pub fn vms(&self) -> Vec<VmInfo> {
        self.lock()
            .vms
            .values()
            .map(|v| VmInfo {
                fleet: v.fleet.clone(),
                name: v.name.clone(),
                private_ip: v.ip.clone(),
                pid: v.child.id(),
                notice_for_ms: v.notice_for_ms,
            })
            .collect()
    }

    /// Gives the newest VM of `fleet` a `Preempt` notice now and evicts it `notice` (simulated
    /// time) later; returns the VM's name.
    pub fn schedule_eviction(&self, fleet: &str, notice: Duration) -> Result<String, String> {
        let now = self.cloud.now_ms();
        let mut st = self.lock();
        let victim = st
            .vms
            .values()
            .filter(|v| v.fleet == fleet && v.notice_for_ms.is_none())
            .max_by_key(|v| v.index)
            .map(|v| v.name.clone())
            .ok_or_else(|| format!("fleet {fleet} has no running VM without a notice"))?;
        let at = now + i64::try_from(notice.as_millis()).unwrap_or(i64::MAX / 2);
        add_event(&mut st, fleet, &victim, at, true);
        if let Some(v) = st.vms.get_mut(&victim) {
            v.notice_for_ms = Some(at);
        }
        Ok(victim)
    }

    /// One pass: evictions due, notices due, VMs started and stopped to match the fleets.
    pub fn tick(&self) {
        let now = self.cloud.now_ms();
        let forced_due: Vec<Event> = {
            let st = self.lock();
            st.events.iter().filter(|e| e.forced && e.not_before_ms <= now).cloned().collect()
        };
        for e in &forced_due {
            // The cloud takes one VM of the fleet; the runner makes it the one that was told.
            let _ = self.cloud.evict(&e.fleet, 1);
        }
        let snaps = self.cloud.fleets_snapshot();
        let notice_ms = i64::try_from(self.config.notice_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
        let mut st = self.lock();
        if st.stopped {
            return;
        }
        if !forced_due.is_empty() {
            let ids: Vec<&str> = forced_due.iter().map(|e| e.id.as_str()).collect();
            for e in &forced_due {
                if let Some(vm) = st.vms.remove(&e.vm) {
                    tracing::info!(vm = %vm.name, "simulated VM evicted after its notice");
                    kill_vm(vm, true);
                }
            }
            st.events.retain(|e| !ids.contains(&e.id.as_str()));
            st.incarnation += 1;
        }
        // A fleet being resized (a PUT of a new capacity) keeps its running VMs, as on Azure: only
        // its count moves. Counting it gone killed every VM of a growing fleet.
        let live: BTreeMap<&str, &FleetSnapshot> = snaps
            .iter()
            .filter(|f| {
                matches!(f.state, ProvisioningState::Succeeded | ProvisioningState::Updating) && f.size.is_some()
            })
            .map(|f| (f.name.as_str(), f))
            .collect();
        // VMs of fleets that are gone (deleted, failed) go with them.
        let gone: Vec<String> =
            st.vms.values().filter(|v| !live.contains_key(v.fleet.as_str())).map(|v| v.name.clone()).collect();
        for name in gone {
            if let Some(vm) = st.vms.remove(&name) {
                kill_vm(vm, true);
            }
        }
        for f in live.values() {
            let Some(settings) = self.launcher.settings(f) else { continue };
            // A notice for the VM the cloud's next draw will take.
            if let Some(t) = f.next_eviction_ms
                && t - now <= notice_ms
                && !st.events.iter().any(|e| e.fleet == f.name && !e.forced && e.not_before_ms == t)
            {
                st.events.retain(|e| e.fleet != f.name || e.forced);
                let victim = st
                    .vms
                    .values()
                    .filter(|v| v.fleet == f.name && v.notice_for_ms.is_none())
                    .max_by_key(|v| v.index)
                    .map(|v| v.name.clone());
                if let Some(victim) = victim {
                    add_event(&mut st, &f.name, &victim, t, false);
                    if let Some(v) = st.vms.get_mut(&victim) {
                        v.notice_for_ms = Some(t);
                    }
                }
            }
            let mine: Vec<(bool, u32, String)> = st
                .vms
                .values()
                .filter(|v| v.fleet == f.name)
                .map(|v| (v.notice_for_ms.is_some(), v.index, v.name.clone()))
                .collect();
            let running = f.running_vms as usize;
            if mine.len() > running {
                let mut order = mine.clone();
                // Those told first, then the newest.
                order.sort_by_key(|x| std::cmp::Reverse((x.0, x.1)));
                for (_, _, name) in order.into_iter().take(mine.len() - running) {
                    if let Some(vm) = st.vms.remove(&name) {
                        kill_vm(vm, true);
                    }
                    st.events.retain(|e| e.vm != name);
                    st.incarnation += 1;
                }
            }
            for _ in mine.len()..running {
                if let Err(e) = self.start_vm(&mut st, f, settings.clone()) {
                    tracing::warn!(fleet = %f.name, error = %e, "cannot start a simulated VM's agent");
                    break;
                }
            }
        }
        // Notices whose VM is gone, or whose draw moved (the rate changed), are withdrawn.
        let before = st.events.len();
        let vms = &st.vms;
        let draws: BTreeMap<&str, Option<i64>> = snaps.iter().map(|f| (f.name.as_str(), f.next_eviction_ms)).collect();
        let keep: Vec<Event> = st
            .events
            .iter()
            .filter(|e| vms.contains_key(&e.vm))
            .filter(|e| e.forced || draws.get(e.fleet.as_str()).copied().flatten() == Some(e.not_before_ms))
            .cloned()
            .collect();
        if keep.len() != before {
            let kept: Vec<String> = keep.iter().map(|e| e.vm.clone()).collect();
            for v in st.vms.values_mut() {
                if v.notice_for_ms.is_some() && !kept.contains(&v.name) {
                    v.notice_for_ms = None;
                }
            }
            st.events = keep;
            st.incarnation += 1;
        }
    }

    fn start_vm(&self, st: &mut RunnerState, f: &FleetSnapshot, mut settings: AgentSettings) -> Result<(), String> {
        let index = {
            let n = st.next_index.entry(f.name.clone()).or_insert(0);
            *n += 1;
            *n - 1
        };
        let name = format!("{}-vm{index}", f.name);
        st.next_ip += 1;
        let n = st.next_ip;
        // 127.10.0.1 upwards: distinct, routable loopback addresses (no .0 or .255 host part).
        let host = n % 254 + 1;
        let ip = format!("127.{}.{}.{host}", 10 + (n / 254 / 256) % 200, (n / 254) % 256);
        let dir = self.config.root.join(&f.name).join(&name);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        settings.vm_name = Some(name.clone());
        settings.private_ip = Some(ip.clone());
        settings.imds_endpoint = format!("{}/{name}", st.imds_base);
        settings.work_dir = dir.join("work");
        settings.checkpoint_root = self.config.checkpoint_root.clone();
        settings.stop_grace_secs = self.config.stop_grace_secs;
        let path = dir.join("agent.json");
        write_private(&path, &serde_json::to_vec_pretty(&settings).map_err(|e| e.to_string())?)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let log = std::fs::File::create(dir.join("agent.log")).map_err(|e| e.to_string())?;
        let mut cmd = tokio::process::Command::new(&self.config.program);
        cmd.args(&self.config.args)
            .arg("--config")
            .arg(&path)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .kill_on_drop(true);
        // SAFETY: setsid and prctl are async-signal-safe. setsid makes the agent a session leader,
        // so that every process the VM runs can be found (and killed) by its session; the death
        // signal takes the agent down with this process (even a SIGKILLed one), as a VM goes with
        // its cloud.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| format!("cannot start {}: {e}", self.config.program.display()))?;
        tracing::info!(vm = %name, fleet = %f.name, %ip, "simulated VM started its agent");
        st.vms.insert(name.clone(), Vm { fleet: f.name.clone(), index, name, ip, dir, child, notice_for_ms: None });
        Ok(())
    }

    /// Control routes (no token: loopback only, like the emulator's `/_emulator/` routes):
    /// `POST /fleets/{name}/evict?notice_seconds=N` gives the fleet's newest VM a `Preempt` notice
    /// and evicts it N simulated seconds later (default 30); `GET /vms` lists the VMs.
    pub fn control_router(self: &Arc<Self>, prefix: &str) -> Router {
        Router::new()
            .route(&format!("{prefix}/fleets/{{name}}/evict"), axum::routing::post(evict))
            .route(&format!("{prefix}/vms"), get(list_vms))
            .with_state(self.clone())
    }

    /// The instance metadata routes, at `<prefix>/<vm>/metadata/…`: Scheduled Events, the VM's name and its
    /// address, each requiring `Metadata: true` and an `api-version`, as Azure's do.
    pub fn metadata_router(self: &Arc<Self>, prefix: &str) -> Router {
        let at = |path: &str| format!("{prefix}/{{vm}}/metadata{path}");
        Router::new()
            .route(&at("/scheduledevents"), get(events).post(approve))
            .route(&at("/instance/compute"), get(compute))
            .route(&at("/instance/compute/name"), get(compute_name))
            .route(&at("/instance/network/interface/0/ipv4/ipAddress/0/privateIpAddress"), get(private_ip))
            .with_state(self.clone())
    }
}

impl Drop for VmRunner {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn add_event(st: &mut RunnerState, fleet: &str, vm: &str, at_ms: i64, forced: bool) {
    st.next_event += 1;
    let id = format!("{:08X}-0000-4000-8000-{:012X}", st.next_event, st.next_event);
    st.events.push(Event {
        id,
        fleet: fleet.to_string(),
        vm: vm.to_string(),
        kind: "Preempt",
        not_before_ms: at_ms,
        forced,
        approved: false,
    });
    st.incarnation += 1;
    tracing::info!(vm, fleet, "Preempt notice posted to the simulated instance metadata service");
}

/// Kills every process of the VM (its agent's session) and, when `wipe`, its disk.
fn kill_vm(mut vm: Vm, wipe: bool) {
    if let Some(pid) = vm.child.id() {
        kill_session(pid as i32);
    }
    let _ = vm.child.start_kill();
    let dir = vm.dir.clone();
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn(async move {
                let _ = vm.child.wait().await;
                if wipe {
                    let _ = tokio::fs::remove_dir_all(dir).await;
                }
            });
        }
        Err(_) => {
            if wipe {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
}

/// SIGKILLs every process whose session is `sid` (the agent and everything it started).
fn kill_session(sid: i32) {
    let Ok(entries) = std::fs::read_dir("/proc") else { return };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // pid (comm) state ppid pgrp session …: comm may hold spaces and parentheses.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else { continue };
        let session = after.split_whitespace().nth(3).and_then(|s| s.parse::<i32>().ok());
        if session == Some(sid) {
            // SAFETY: sends a signal to a process of the VM's session.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(bytes)
}

type Q = Query<BTreeMap<String, String>>;

/// Azure's checks: `Metadata: true` and an `api-version`.
fn check(headers: &HeaderMap, q: &BTreeMap<String, String>) -> Result<(), Box<Response>> {
    if !headers.get("metadata").and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Err(Box::new(
            (
                StatusCode::BAD_REQUEST,
                axum::Json(serde_json::json!({"error": "Bad request. Required metadata header not specified"})),
            )
                .into_response(),
        ));
    }
    if !q.contains_key("api-version") {
        return Err(Box::new(
            (
                StatusCode::BAD_REQUEST,
                axum::Json(serde_json::json!({
                    "error": "Bad request. api-version was not specified in the request. For more information refer to aka.ms/azureimds",
                    "newest-versions": ["2023-07-01", "2021-02-01", "2020-07-01"]
                })),
            )
                .into_response(),
        ));
    }
    Ok(())
}

fn http_date(ms: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000)).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let fmt = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    t.format(&fmt).unwrap_or_default()
}

async fn events(State(r): State<Arc<VmRunner>>, Path(vm): Path<String>, headers: HeaderMap, Query(q): Q) -> Response {
    if let Err(resp) = check(&headers, &q) {
        return *resp;
    }
    let st = r.lock();
    // Azure lists the events of the VM's whole placement group (here: its fleet).
    let fleet = st.vms.get(&vm).map(|v| v.fleet.clone());
    let events: Vec<serde_json::Value> = st
        .events
        .iter()
        .filter(|e| fleet.as_deref() == Some(e.fleet.as_str()))
        .map(|e| {
            serde_json::json!({
                "EventId": e.id,
                "EventType": e.kind,
                "ResourceType": "VirtualMachine",
                "Resources": [e.vm],
                "EventStatus": "Scheduled",
                "NotBefore": http_date(e.not_before_ms),
                "Description": "The virtual machine is being evicted because Azure needs the capacity back.",
                "EventSource": "Platform",
                "DurationInSeconds": -1,
            })
        })
        .collect();
    axum::Json(serde_json::json!({"DocumentIncarnation": st.incarnation, "Events": events})).into_response()
}

async fn approve(
    State(r): State<Arc<VmRunner>>,
    Path(_vm): Path<String>,
    headers: HeaderMap,
    Query(q): Q,
    body: axum::body::Bytes,
) -> Response {
    if let Err(resp) = check(&headers, &q) {
        return *resp;
    }
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "Bad request. The body is not JSON").into_response();
    };
    let ids: Vec<String> = v["StartRequests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x["EventId"].as_str().map(str::to_string))
        .collect();
    let mut st = r.lock();
    // Recorded only: the eviction still happens when the cloud draws it (a preemption does not
    // wait for approval, and approving early must not make the simulated cloud evict twice).
    for e in st.events.iter_mut().filter(|e| ids.contains(&e.id)) {
        e.approved = true;
    }
    StatusCode::OK.into_response()
}

async fn evict(State(r): State<Arc<VmRunner>>, Path(fleet): Path<String>, Query(q): Q) -> Response {
    let secs = match q.get("notice_seconds").map(|s| s.parse::<u64>()) {
        None => 30,
        Some(Ok(n)) if n <= 86_400 => n,
        Some(_) => {
            return (StatusCode::BAD_REQUEST, "notice_seconds: a whole number of seconds up to 86400").into_response();
        }
    };
    match r.schedule_eviction(&fleet, Duration::from_secs(secs)) {
        Ok(vm) => {
            (StatusCode::ACCEPTED, axum::Json(serde_json::json!({"vm": vm, "notice_seconds": secs}))).into_response()
        }
        Err(e) => (StatusCode::NOT_FOUND, axum::Json(serde_json::json!({"error": e}))).into_response(),
    }
}

async fn list_vms(State(r): State<Arc<VmRunner>>) -> Response {
    axum::Json(r.vms()).into_response()
}

async fn compute(State(r): State<Arc<VmRunner>>, Path(vm): Path<String>, headers: HeaderMap, Query(q): Q) -> Response {
    if let Err(resp) = check(&headers, &q) {
        return *resp;
    }
    let snap = {
        let st = r.lock();
        st.vms.get(&vm).map(|v| v.fleet.clone())
    }
    .and_then(|fleet| r.cloud.fleet_snapshot(&fleet));
    match snap {
        Some(f) => axum::Json(serde_json::json!({
            "name": vm,
            "location": f.region,
            "vmSize": f.size,
            "priority": if f.priority == scheduler::model::Priority::Spot { "Spot" } else { "Regular" },
            "tagsList": f.tags.iter().map(|(k, v)| serde_json::json!({"name": k, "value": v})).collect::<Vec<_>>(),
        }))
        .into_response(),
        None => (StatusCode::NOT_FOUND, "no such VM").into_response(),
    }
}

async fn compute_name(
    State(r): State<Arc<VmRunner>>,
    Path(vm): Path<String>,
    headers: HeaderMap,
    Query(q): Q,
) -> Response {
    if let Err(resp) = check(&headers, &q) {
        return *resp;
    }
    if r.lock().vms.contains_key(&vm) {
        vm.into_response()
    } else {
        (StatusCode::NOT_FOUND, "no such VM").into_response()
    }
}

async fn private_ip(
    State(r): State<Arc<VmRunner>>,
    Path(vm): Path<String>,
    headers: HeaderMap,
    Query(q): Q,
) -> Response {
    if let Err(resp) = check(&headers, &q) {
        return *resp;
    }
    match r.lock().vms.get(&vm) {
        Some(v) => v.ip.clone().into_response(),
        None => (StatusCode::NOT_FOUND, "no such VM").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_dates_read_like_azures() {
        assert_eq!(http_date(1_474_309_787_000), "Mon, 19 Sep 2016 18:29:47 GMT");
    }
}
