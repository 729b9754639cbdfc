//! `spillway agent`: the node agent every VM of an attempt runs (started by the fleet's cloud-init
//! `customData` on Azure, as a local process per simulated VM in the simulated cloud).
//!
//! What it does, in order:
//! 1. finds out who it is (the VM's name and private IP from the instance metadata service, else
//!    the host name and the address it reaches the scheduler from) and which GPUs it has
//!    (`nvidia-smi`; none found means "unknown", never zero);
//! 2. registers with the scheduler (retrying while it is unreachable) and gets its rank;
//! 3. waits for its gang: the scheduler hands out the order once every VM of the attempt has
//!    registered, with the rank's `SPILLWAY_*` variables, `MASTER_ADDR` and `MASTER_PORT`;
//! 4. runs `setup` once, then `run`, each as its own process group, streaming both outputs
//!    ([`shipper`]) and keeping the last lines for the exit report;
//! 5. sends heartbeats (with GPU samples) and follows the answers: a new start number restarts the
//!    work in place, a stop stops it (SIGTERM, then SIGKILL after the grace);
//! 6. polls Scheduled Events ([`imds`]): a `Preempt` or `Terminate` for its VM is reported and
//!    forwarded to the work as SIGTERM, so it can checkpoint before the VM goes;
//! 7. reports every exit, and ends when told to stop or when its attempt's credential stops
//!    working (the attempt has ended).

pub mod client;
pub mod gpu;
pub mod imds;
pub mod output;
pub mod process;
pub mod shipper;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use scheduler::agents::AgentSettings;
use scheduler::agents::protocol::{
    Action, ExitReason, Heartbeat, LogStream, Phase, Registration, Report, Script, WorkOrder,
};
use tokio::sync::{mpsc, watch};

use crate::client::{CallError, SchedulerClient};
use crate::gpu::Gpus;
use crate::imds::{Imds, ScheduledEvent, eviction_for};
use crate::output::Tail;
use crate::process::{Ended, ScriptSpec};
use crate::shipper::{LogBuffer, Shipper};

/// Longest line kept whole in the logs (the scheduler cuts at the same length).
pub const MAX_LINE_BYTES: usize = 16 * 1024;

/// How often Scheduled Events are polled: Azure gives at least 30 s notice of a preemption.
const EVENTS_POLL: Duration = Duration::from_secs(1);

/// How the agent ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// The scheduler said to stop (the job ended, a notice, a replacement).
    Stopped(String),
    /// The attempt's credential no longer works: the attempt has ended.
    AttemptEnded(String),
    /// The agent itself was asked to stop (SIGTERM: the VM is shutting down).
    Shutdown,
}

/// Where the rank is, as heartbeats tell it.
#[derive(Debug, Clone, Copy)]
struct Status {
    phase: Phase,
    restart: Option<u32>,
}

/// Runs the agent until it is told to stop, its attempt ends, or `shutdown` turns true.
pub async fn run(settings: AgentSettings, mut shutdown: watch::Receiver<bool>) -> Result<Finish, String> {
    let started = Instant::now();
    let client = SchedulerClient::new(&settings)?;
    let imds = Imds::new(&settings.imds_endpoint);
    let gpus = Gpus::new(&settings.nvidia_smi);
    let vm_name = match &settings.vm_name {
        Some(n) => n.clone(),
        None => imds.vm_name().await.unwrap_or_else(|_| hostname()),
    };
    let private_ip = match &settings.private_ip {
        Some(ip) => ip.clone(),
        None => match imds.private_ip().await {
            Ok(ip) => ip,
            Err(_) => local_ip_towards(&settings.scheduler_url).unwrap_or_else(|| "127.0.0.1".into()),
        },
    };
    let boot_id = random_hex(8);
    let registration = Registration {
        vm_name: vm_name.clone(),
        hostname: hostname(),
        private_ip,
        gpus: gpus.inventory().await,
        boot_id: boot_id.clone(),
        agent_version: env!("CARGO_PKG_VERSION").into(),
    };
    let registered = tokio::select! {
        r = client.register(&registration) => match r {
            Ok(r) => r,
            Err(e) if e.is_refused() => return Ok(Finish::AttemptEnded(e.to_string())),
            Err(e) => return Err(e.to_string()),
        },
        _ = shutdown.changed() => return Ok(Finish::Shutdown),
    };
    let rank = registered.rank;
    tracing::info!(job = %settings.job_id, attempt = settings.attempt, rank, vm = %vm_name, "registered");
    let shipper = Shipper::start(client.clone(), rank, boot_id);
    let status = Arc::new(Mutex::new(Status { phase: Phase::Waiting, restart: None }));
    let (action_tx, actions) = watch::channel(None::<Action>);
    let interval = Duration::from_millis(registered.heartbeat_interval_ms.clamp(100, 60_000));
    let heartbeats = tokio::spawn(heartbeat_loop(client.clone(), rank, status.clone(), gpus, interval, action_tx));
    let (notice_tx, notices) = mpsc::channel(8);
    let events =
        settings.scheduled_events.then(|| tokio::spawn(watch_events(imds.clone(), vm_name.clone(), notice_tx)));
    let mut node = Node {
        client,
        rank,
        started,
        buffer: shipper.buffer(),
        shipper,
        status,
        actions,
        notices,
        reported: BTreeSet::new(),
        noticed: None,
        grace: Duration::from_secs(settings.stop_grace_secs),
        shutdown: shutdown.clone(),
        settings,
    };
    let finish = node.main().await;
    node.shipper.flush(Duration::from_secs(10)).await;
    if let Some(ev) = &node.noticed {
        // The work has stopped: let the cloud go ahead without waiting for NotBefore.
        let _ = imds.approve(&ev.event_id).await;
    }
    heartbeats.abort();
    if let Some(e) = events {
        e.abort();
    }
    finish
}

struct Node {
    settings: AgentSettings,
    client: SchedulerClient,
    rank: u32,
    started: Instant,
    shipper: Shipper,
    buffer: Arc<LogBuffer>,
    status: Arc<Mutex<Status>>,
    actions: watch::Receiver<Option<Action>>,
    notices: mpsc::Receiver<ScheduledEvent>,
    reported: BTreeSet<String>,
    noticed: Option<ScheduledEvent>,
    grace: Duration,
    shutdown: watch::Receiver<bool>,
}

/// What ended a script.
struct Outcome {
    ended: Ended,
    reason: ExitReason,
}

impl Node {
    fn set(&self, phase: Phase, restart: Option<u32>) {
        let mut s = self.status.lock().unwrap_or_else(|p| p.into_inner());
        s.phase = phase;
        if restart.is_some() {
            s.restart = restart;
        }
    }

    /// A line from the agent itself in the rank's log.
    fn say(&self, restart: u32, text: String) {
        tracing::info!(rank = self.rank, "{text}");
        self.buffer.push(restart, LogStream::Agent, format!("[spillway-agent] {text}"));
    }

    async fn report(&self, r: &Report) -> Result<(), CallError> {
        self.client.report(self.rank, r).await
    }

    /// Reports a notice once.
    async fn notice(&mut self, ev: ScheduledEvent) -> Result<(), CallError> {
        if !self.reported.insert(ev.event_id.clone()) {
            return Ok(());
        }
        tracing::warn!(event = %ev.event_id, kind = %ev.event_type, not_before = %ev.not_before, "the cloud will take this VM");
        let r = Report::Notice {
            event_id: ev.event_id.clone(),
            event_type: ev.event_type.clone(),
            not_before: (!ev.not_before.is_empty()).then(|| ev.not_before.clone()),
        };
        self.noticed = Some(ev);
        self.report(&r).await
    }

    async fn main(&mut self) -> Result<Finish, String> {
        let mut setup_done = false;
        let mut finished: Option<u32> = None;
        loop {
            let order = match self.next_order(finished).await {
                Ok(Ok(o)) => o,
                Ok(Err(finish)) => return Ok(finish),
                Err(e) if e.is_refused() => return Ok(Finish::AttemptEnded(e.to_string())),
                Err(e) => return Err(e.to_string()),
            };
            let restart = match &order.action {
                Action::Run { restart } => *restart,
                Action::Stop { reason } => {
                    self.say(finished.unwrap_or(0), format!("stopping: {reason}"));
                    return Ok(Finish::Stopped(reason.clone()));
                }
                Action::Wait => continue,
            };
            let workdir = match &order.workdir {
                Some(w) if Path::new(w).is_absolute() => PathBuf::from(w),
                Some(w) => self.settings.work_dir.join(w),
                None => self.settings.work_dir.clone(),
            };
            let checkpoint_dir = self.settings.checkpoint_dir();
            if let Err(e) = std::fs::create_dir_all(&checkpoint_dir) {
                self.say(restart, format!("cannot create the checkpoint directory {}: {e}", checkpoint_dir.display()));
            }
            let mut env = order.env.clone();
            env.insert("SPILLWAY_CHECKPOINT_DIR".into(), checkpoint_dir.display().to_string());
            if let (Some(setup), false) = (order.setup.clone(), setup_done) {
                self.set(Phase::Setup, Some(restart));
                self.report(&Report::SetupStarted { restart }).await.map_err(|e| e.to_string())?;
                let spec = ScriptSpec {
                    script: &setup,
                    env: &env,
                    workdir: &workdir,
                    image: None,
                    checkpoint_dir: &checkpoint_dir,
                    name: self.container_name(restart),
                    search_path: None,
                };
                let out = match self.supervise(Script::Setup, &spec, restart).await {
                    Ok(o) => o,
                    Err(e) if e.is_refused() => return Ok(Finish::AttemptEnded(e.to_string())),
                    Err(e) => return Err(e.to_string()),
                };
                if !(out.reason == ExitReason::Finished && out.ended.code == Some(0)) {
                    finished = Some(restart);
                    self.set(Phase::Exited, None);
                    continue;
                }
                setup_done = true;
            }
            self.set(Phase::Running, Some(restart));
            let startup_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
            self.say(
                restart,
                format!("run starts (SPILLWAY_RESTART={restart}, {startup_ms} ms after the agent started)"),
            );
            if let Err(e) = self.report(&Report::RunStarted { restart, startup_ms }).await {
                return if e.is_refused() { Ok(Finish::AttemptEnded(e.to_string())) } else { Err(e.to_string()) };
            }
            let spec = ScriptSpec {
                script: &order.run,
                env: &env,
                workdir: &workdir,
                image: order.image.as_deref(),
                checkpoint_dir: &checkpoint_dir,
                name: self.container_name(restart),
                search_path: None,
            };
            match self.supervise(Script::Run, &spec, restart).await {
                Ok(_) => {}
                Err(e) if e.is_refused() => return Ok(Finish::AttemptEnded(e.to_string())),
                Err(e) => return Err(e.to_string()),
            }
            finished = Some(restart);
            self.set(Phase::Exited, None);
        }
    }

    fn container_name(&self, restart: u32) -> String {
        let clean: String =
            self.settings.job_id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' }).collect();
        format!("spillway-{clean}-a{}-r{}-s{restart}", self.settings.attempt, self.rank)
    }

    /// Waits for an order other than the start that just finished; reports notices meanwhile.
    async fn next_order(&mut self, finished: Option<u32>) -> Result<Result<WorkOrder, Finish>, CallError> {
        loop {
            let mut shutdown = self.shutdown.clone();
            let mut actions = self.actions.clone();
            let wait = if finished.is_some() { Duration::ZERO } else { Duration::from_secs(20) };
            tokio::select! {
                st = self.client.work(self.rank, wait) => {
                    let st = st?;
                    match st.order {
                        Some(o) if matches!(o.action, Action::Run { restart } if Some(restart) == finished) => {}
                        Some(o) => return Ok(Ok(o)),
                        None => self.set(Phase::Waiting, None),
                    }
                }
                _ = shutdown.changed() => return Ok(Err(Finish::Shutdown)),
                Some(ev) = self.notices.recv() => { self.notice(ev).await?; continue; }
            }
            if finished.is_some() {
                // The work of this start is over: wait for the scheduler to decide what follows.
                tokio::select! {
                    _ = actions.changed() => {}
                    _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                    _ = shutdown.changed() => return Ok(Err(Finish::Shutdown)),
                    Some(ev) = self.notices.recv() => { self.notice(ev).await?; }
                }
            }
        }
    }

    /// Runs one script to its end, stopping it when told to, forwarding a preemption notice as
    /// SIGTERM, and reports how it ended (after its output is stored).
    async fn supervise(&mut self, script: Script, spec: &ScriptSpec<'_>, restart: u32) -> Result<Outcome, CallError> {
        let tail = Arc::new(Mutex::new(Tail::default()));
        let what = match script {
            Script::Setup => "setup",
            Script::Run => "run",
        };
        let mut running = match process::spawn(spec, restart, self.buffer.clone(), tail.clone(), MAX_LINE_BYTES) {
            Ok(r) => r,
            Err(message) => {
                self.say(restart, format!("{what} could not start: {message}"));
                self.shipper.flush(Duration::from_secs(30)).await;
                self.report(&Report::Exited {
                    restart,
                    script,
                    code: None,
                    signal: None,
                    reason: ExitReason::Error,
                    message: Some(message),
                    tail: Vec::new(),
                })
                .await?;
                return Ok(Outcome { ended: Ended { code: None, signal: None }, reason: ExitReason::Error });
            }
        };
        let mut actions = self.actions.clone();
        actions.borrow_and_update();
        let mut shutdown = self.shutdown.clone();
        let (ended, reason, message) = loop {
            tokio::select! {
                e = running.wait() => break (e, ExitReason::Finished, None),
                changed = actions.changed() => {
                    if changed.is_err() {
                        continue;
                    }
                    let action = actions.borrow_and_update().clone();
                    let why = match action {
                        Some(Action::Stop { reason }) => reason,
                        Some(Action::Run { restart: r }) if r != restart => format!("start {r} was ordered"),
                        _ => continue,
                    };
                    self.say(restart, format!("stopping {what}: {why} (SIGTERM, SIGKILL after {} s)", self.grace.as_secs()));
                    self.set(Phase::Stopping, None);
                    let e = running.stop(self.grace).await;
                    break (e, ExitReason::Stopped, Some(why));
                }
                Some(ev) = self.notices.recv() => {
                    let kind = ev.event_type.clone();
                    let not_before = ev.not_before.clone();
                    self.notice(ev).await?;
                    self.say(restart, format!("{kind} notice for this VM (not before {not_before}): SIGTERM sent to {what}"));
                    self.set(Phase::Stopping, None);
                    running.signal(libc::SIGTERM);
                    let e = running.wait_or_kill(self.grace).await;
                    break (e, ExitReason::Preempted, Some(format!("{kind} notice")));
                }
                _ = shutdown.changed() => {
                    self.say(restart, format!("the agent is stopping (the VM shuts down): SIGTERM sent to {what}"));
                    let e = running.stop(self.grace).await;
                    break (e, ExitReason::Stopped, Some("the agent was stopped".into()));
                }
            }
        };
        let how = match (ended.code, ended.signal) {
            (Some(c), _) => format!("exited with code {c}"),
            (None, Some(s)) => format!("was killed by signal {s}"),
            _ => "ended".into(),
        };
        self.say(restart, format!("{what} {how}"));
        if !self.shipper.flush(Duration::from_secs(30)).await {
            tracing::warn!("not every log line was stored before the exit report");
        }
        let tail = tail.lock().unwrap_or_else(|p| p.into_inner()).take();
        self.report(&Report::Exited { restart, script, code: ended.code, signal: ended.signal, reason, message, tail })
            .await?;
        Ok(Outcome { ended, reason })
    }
}

async fn heartbeat_loop(
    client: SchedulerClient,
    rank: u32,
    status: Arc<Mutex<Status>>,
    gpus: Gpus,
    interval: Duration,
    actions: watch::Sender<Option<Action>>,
) {
    loop {
        tokio::time::sleep(interval).await;
        let s = *status.lock().unwrap_or_else(|p| p.into_inner());
        let hb = Heartbeat { phase: s.phase, restart: s.restart, gpus: gpus.samples().await };
        match client.heartbeat(rank, &hb, interval).await {
            Ok(a) => {
                actions.send_replace(Some(a));
            }
            Err(e) if e.is_refused() => {
                actions.send_replace(Some(Action::Stop { reason: format!("the attempt has ended ({e})") }));
                return;
            }
            Err(e) => tracing::debug!(error = %e, "heartbeat not delivered"),
        }
    }
}

/// Polls Scheduled Events and sends every eviction of this VM (once per event).
async fn watch_events(imds: Imds, vm: String, notices: mpsc::Sender<ScheduledEvent>) {
    let mut sent = BTreeSet::new();
    let mut failing = false;
    loop {
        match imds.scheduled_events().await {
            Ok(doc) => {
                failing = false;
                if let Some(ev) = eviction_for(&doc, &vm)
                    && sent.insert(ev.event_id.clone())
                    && notices.send(ev.clone()).await.is_err()
                {
                    return;
                }
            }
            Err(e) => {
                if !failing {
                    tracing::debug!(error = %e, "Scheduled Events unavailable; still polling");
                    failing = true;
                }
            }
        }
        tokio::time::sleep(EVENTS_POLL).await;
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it or truncates.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The local address the VM reaches the scheduler from (no packet is sent: connecting a UDP
/// socket only picks the route).
fn local_ip_towards(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next()?;
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => (h, p.parse().ok()?),
        _ => (authority, if url.starts_with("https") { 443 } else { 80 }),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let target = std::net::ToSocketAddrs::to_socket_addrs(&(host, port)).ok()?.next()?;
    let bind = if target.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
    let sock = std::net::UdpSocket::bind(bind).ok()?;
    sock.connect(target).ok()?;
    Some(sock.local_addr().ok()?.ip().to_string())
}

fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    let _ = getrandom::fill(&mut buf);
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_route_to_the_scheduler_gives_the_local_address() {
        assert_eq!(local_ip_towards("http://127.0.0.1:7878").as_deref(), Some("127.0.0.1"));
        assert_eq!(local_ip_towards("http://127.0.0.1:7878/x").as_deref(), Some("127.0.0.1"));
        assert!(!hostname().is_empty());
    }
}
