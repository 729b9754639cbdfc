//! The agent side of the server, called directly (no HTTP, no processes): ranks, the gang's work
//! order, logs within their cap and durably acknowledged, verdicts on exits, notices, idleness.

use std::sync::Arc;
use std::time::Duration;

use scheduler::Catalog;
use scheduler::agents::protocol::{
    Action, ExitReason, GpuSample, Heartbeat, LogBatch, LogLine, LogStream, Phase, Registration, Report, Script,
};
use scheduler::agents::{AgentConfig, AgentError, AgentKeys, AgentMetrics, AgentService, LogCursor, LogFilter};
use scheduler::clock::{Clock, ManualClock};
use scheduler::model::{Attempt, AttemptState, EventKind, Job, JobSpec, JobState, Priority, fleet_name};
use state::{Fence, Store, StoreError};

const T0: i64 = 1_800_000_000_000;

struct World {
    store: Store,
    clock: Arc<ManualClock>,
    svc: AgentService,
    /// The fence of this server's lease (the leader's; the sweep writes under it).
    fence: Fence,
}

fn world_on(store: Store, config: AgentConfig) -> World {
    let clock = Arc::new(ManualClock::new(T0));
    let svc = AgentService::new(
        store.clone(),
        Arc::new(Catalog::builtin()),
        clock.clone() as Arc<dyn Clock>,
        AgentKeys::from_bytes([9; 32]),
        config,
        AgentMetrics::unregistered(),
        Arc::new(tokio::sync::Notify::new()),
    );
    let fence = Fence::new();
    if let Some(grant) = store.acquire_lease("this-server", Duration::from_secs(3600)).unwrap() {
        fence.hold(&grant);
    }
    World { store, clock, svc, fence }
}

fn world() -> World {
    world_on(Store::in_memory().unwrap(), AgentConfig { durable: false, ..AgentConfig::default() })
}

/// A running job with one active attempt of `vms` VMs, running `true`.
fn job(w: &World, id: &str, vms: u32, extra: &str) -> Attempt {
    job_with(w, id, vms, &format!("run = \"true\"\n{extra}"))
}

/// A running job with one active attempt of `vms` VMs and these extra spec lines.
fn job_with(w: &World, id: &str, vms: u32, extra: &str) -> Attempt {
    job_of_kind(w, id, "training", vms, extra)
}

/// A running job of `kind` with one active attempt of `vms` VMs and these extra spec lines.
fn job_of_kind(w: &World, id: &str, kind: &str, vms: u32, extra: &str) -> Attempt {
    let spec: JobSpec = toml::from_str(&format!(
        "name = \"t\"\nkind = \"{kind}\"\ngpus = {vms}\nsizes = [\"Standard_NC4as_T4_v3\"]\n{extra}"
    ))
    .unwrap();
    let mut job = Job::new(id.into(), spec, T0);
    job.state = JobState::Running;
    job.attempts = 1;
    let a = Attempt {
        job_id: id.into(),
        number: 1,
        fleet_name: fleet_name(id, 1),
        region: "eastus".into(),
        size: "Standard_NC4as_T4_v3".into(),
        alternatives: Vec::new(),
        priority: Priority::Spot,
        vms,
        min_vms: None,
        growing_to: None,
        gpus: vms,
        vcpus: 4 * vms as u64,
        family: "standardNCASv3_T4Family".into(),
        price_per_hour: 0.2,
        max_price_per_vm: None,
        state: AttemptState::Running,
        started_at_ms: T0,
        running_since_ms: Some(T0),
        ended_at_ms: None,
        operation: None,
        running_vms: vms,
        below_min_since_ms: None,
        cost_usd: 0.0,
        egress_usd: 0.0,
        egress_gb: 0.0,
        accounted_until_ms: Some(T0),
        failure: None,
        failure_class: None,
        regular: None,
    };
    w.store.put(&job).unwrap();
    w.store.put(&a).unwrap();
    a
}

fn reg(vm: &str, ip: &str) -> Registration {
    Registration {
        vm_name: vm.into(),
        hostname: vm.into(),
        private_ip: ip.into(),
        gpus: None,
        boot_id: format!("boot-{vm}"),
        agent_version: "test".into(),
    }
}

fn exit(restart: u32, code: i32) -> Report {
    Report::Exited {
        restart,
        script: Script::Run,
        code: Some(code),
        signal: None,
        reason: ExitReason::Finished,
        message: None,
        tail: vec![format!("last line of start {restart}")],
    }
}

fn job_of(w: &World, id: &str) -> Job {
    w.store.get::<Job>(id).unwrap().unwrap()
}

#[test]
fn the_gang_gets_its_order_once_complete_with_stable_ranks() {
    let w = world();
    let a = job(&w, "j-1", 2, "[envs]\nFOO = \"bar\"");
    assert_eq!(w.svc.register(&a, reg("vm-a", "10.0.0.4")).unwrap().rank, 0);
    let waiting = w.svc.work_now(&a, 0).unwrap();
    assert_eq!((waiting.registered, waiting.num_nodes, waiting.order.is_none()), (1, 2, true));
    assert_eq!(w.svc.register(&a, reg("vm-b", "10.0.0.5")).unwrap().rank, 1);
    assert_eq!(w.svc.register(&a, reg("vm-a", "10.0.0.4")).unwrap().rank, 0, "a VM registering again keeps its rank");
    let third = w.svc.register(&a, reg("vm-c", "10.0.0.6"));
    assert!(matches!(third, Err(AgentError::Conflict(_))), "{third:?}");
    let order = w.svc.work_now(&a, 1).unwrap().order.unwrap();
    assert_eq!(order.action, Action::Run { restart: 0 });
    assert_eq!(order.env["SPILLWAY_NODE_RANK"], "1");
    assert_eq!(order.env["SPILLWAY_NODE_IPS"], "10.0.0.4\n10.0.0.5");
    assert_eq!(order.env["SPILLWAY_NUM_GPUS_PER_NODE"], "1");
    assert_eq!(order.env["SPILLWAY_PRIORITY"], "spot");
    assert_eq!(order.env["FOO"], "bar");
    let bad = w.svc.register(&a, Registration { private_ip: "not an ip".into(), ..reg("vm-d", "x") });
    let Err(AgentError::Invalid(e)) = bad else { panic!("{bad:?}") };
    assert_eq!(e.0[0].field, "private_ip");
}

#[test]
fn a_capacity_only_jobs_agents_run_nothing_but_still_watch_idleness() {
    let w = world();
    let a = job_with(&w, "cap", 1, "idle_minutes = 1");
    w.svc.register(&a, reg("vm-a", "10.0.0.4")).unwrap();
    assert!(w.svc.work_now(&a, 0).unwrap().order.is_none(), "nothing to run: wait (and heartbeat)");
    let idle = Heartbeat {
        phase: Phase::Waiting,
        restart: None,
        gpus: Some(vec![GpuSample { index: 0, utilization_percent: 0.0, memory_used_mib: 0, memory_total_mib: 1 }]),
    };
    w.svc.heartbeat(&a, 0, idle.clone()).unwrap();
    w.clock.advance_ms(61_000);
    w.svc.heartbeat(&a, 0, idle).unwrap();
    let events = w.store.by_index::<scheduler::jobs::JobEvent>("job", "cap").unwrap();
    assert!(events.iter().any(|e| e.kind.as_str() == "idle"), "{events:?}");
    assert_eq!(job_of(&w, "cap").state, JobState::Running, "notify only: the job goes on");
}

#[test]
fn credentials_are_checked_against_the_attempt_in_the_path() {
    let w = world();
    let a = job(&w, "j-1", 1, "");
    job(&w, "j-2", 1, "");
    let cred = w.svc.keys().mint("j-1", 1);
    assert!(w.svc.authorize(&cred, "j-1", 1).is_ok());
    assert!(matches!(w.svc.authorize(&cred, "j-2", 1), Err(AgentError::NotFound(_))));
    assert!(matches!(w.svc.authorize("spwa.j-1.1.00", "j-1", 1), Err(AgentError::Unauthorized(_))));
    let mut ended = a.clone();
    ended.state = AttemptState::Ended;
    w.store.put(&ended).unwrap();
    assert!(matches!(w.svc.authorize(&cred, "j-1", 1), Err(AgentError::Unauthorized(_))), "ended: refused");
}

fn batch(boot: &str, n: u64, lines: &[&str]) -> LogBatch {
    LogBatch {
        boot_id: boot.into(),
        batch: n,
        restart: 0,
        lines: lines.iter().map(|t| LogLine { at_ms: T0, stream: LogStream::Stdout, text: t.to_string() }).collect(),
    }
}

#[test]
fn logs_are_stored_once_within_the_cap_and_read_by_pages() {
    let w = world_on(
        Store::in_memory().unwrap(),
        AgentConfig { durable: false, log_bytes_per_rank: 64, max_line_bytes: 16, ..AgentConfig::default() },
    );
    let a = job(&w, "j-1", 1, "");
    w.svc.register(&a, reg("vm-a", "10.0.0.4")).unwrap();
    w.svc.ingest_logs(&a, 0, batch("b1", 1, &["one", "two"])).unwrap();
    let again = w.svc.ingest_logs(&a, 0, batch("b1", 1, &["one", "two"])).unwrap();
    assert_eq!((again.batch, again.truncated), (1, false), "a retried batch is acknowledged, not stored again");
    w.svc.ingest_logs(&a, 0, batch("b1", 2, &["three", &"x".repeat(100)])).unwrap();
    let ack = w.svc.ingest_logs(&a, 0, batch("b1", 3, &["beyond the cap line"])).unwrap();
    assert!(ack.truncated);
    let all = w.svc.read_logs("j-1", LogFilter::default(), LogCursor::default(), 100, 1 << 20).unwrap();
    let texts: Vec<&str> = all.lines.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(&texts[..3], ["one", "two", "three"], "{texts:?}");
    assert!(texts[3].starts_with("xxxxxxxxxxxxxxxx …[line cut: 84 more bytes]"), "{texts:?}");
    assert!(texts.iter().any(|t| t.contains("reached its cap")), "{texts:?}");
    assert!(!texts.contains(&"beyond the cap line"));
    // Pages: two lines at a time, each starting where the last stopped.
    let mut from = LogCursor::default();
    let mut paged = Vec::new();
    loop {
        let page = w.svc.read_logs("j-1", LogFilter::default(), from, 2, 1 << 20).unwrap();
        paged.extend(page.lines.iter().map(|l| l.text.clone()));
        from = LogCursor::parse(&page.next).unwrap();
        if !page.more {
            break;
        }
    }
    assert_eq!(paged, texts);
    let none = w.svc.read_logs("j-1", LogFilter { rank: Some(1), attempt: None }, LogCursor::default(), 10, 1 << 20);
    assert!(none.unwrap().lines.is_empty());
    // A new agent process on the same VM numbers its batches from 1 again.
    w.svc.register(&a, Registration { boot_id: "b2".into(), ..reg("vm-a", "10.0.0.4") }).unwrap();
    assert!(w.svc.ingest_logs(&a, 0, batch("b2", 1, &["after restart"])).unwrap().truncated, "the cap is per rank");
}

#[test]
fn acknowledged_logs_survive_a_restart_of_the_server() {
    let dir = std::env::temp_dir().join(format!("spillway-agents-durable-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    {
        let w = world_on(Store::open(&dir).unwrap(), AgentConfig::default());
        let a = job(&w, "j-1", 1, "");
        w.svc.register(&a, reg("vm-a", "10.0.0.4")).unwrap();
        w.svc.ingest_logs(&a, 0, batch("b1", 1, &["kept"])).unwrap();
        drop(w);
    }
    let store = Store::open(&dir).unwrap();
    let w = world_on(store, AgentConfig::default());
    let page = w.svc.read_logs("j-1", LogFilter::default(), LogCursor::default(), 10, 1 << 20).unwrap();
    assert_eq!(page.lines[0].text, "kept");
    drop(w);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn exits_end_restart_or_fail_the_job() {
    let w = world();
    let a = job(&w, "ok", 2, "");
    w.svc.register(&a, reg("vm-a", "10.0.0.4")).unwrap();
    w.svc.register(&a, reg("vm-b", "10.0.0.5")).unwrap();
    w.svc.report(&a, 0, exit(0, 0)).unwrap();
    assert_eq!(job_of(&w, "ok").state, JobState::Running, "one rank of two");
    w.svc.report(&a, 1, exit(0, 0)).unwrap();
    assert_eq!(job_of(&w, "ok").state, JobState::Succeeded);

    let a = job(&w, "flaky", 2, "max_restarts = 1");
    w.svc.register(&a, reg("vm-a", "10.0.0.4")).unwrap();
    w.svc.register(&a, reg("vm-b", "10.0.0.5")).unwrap();
    w.svc.report(&a, 1, exit(0, 7)).unwrap();
    assert_eq!(job_of(&w, "flaky").state, JobState::Running);
    assert_eq!(w.svc.work_now(&a, 0).unwrap().order.unwrap().action, Action::Run { restart: 1 }, "both ranks restart");
    // The other rank, stopped for the restart, does not count as a failure.
    let stopped = Report::Exited {
        restart: 0,
        script: Script::Run,
        code: Some(143),
        signal: None,
        reason: ExitReason::Stopped,
        message: None,
        tail: Vec::new(),
    };
    w.svc.report(&a, 0, stopped).unwrap();
    assert_eq!(job_of(&w, "flaky").state, JobState::Running);
    w.svc.report(&a, 0, exit(1, 2)).unwrap();
    let j = job_of(&w, "flaky");
    assert_eq!(j.state, JobState::Failed);
    assert_eq!(j.end_reason.as_deref(), Some("rank 0's run exited with code 2 (after 1 restart)"));
    assert!(matches!(w.svc.work_now(&a, 1).unwrap().order.unwrap().action, Action::Stop { .. }));
}

#[test]
fn a_job_whose_agents_finish_before_the_control_loop_sees_it_running_still_ran() {
    let w = world();
    let a = job(&w, "quick", 2, "");
    let mut j = job_of(&w, "quick");
    j.state = JobState::Provisioning;
    w.store.put(&j).unwrap();
    w.svc.register(&a, reg("vm-a", "10.0.0.4")).unwrap();
    assert_eq!(job_of(&w, "quick").first_running_at_ms, None, "half a gang runs nothing");
    w.clock.advance_ms(5_000);
    w.svc.register(&a, reg("vm-b", "10.0.0.5")).unwrap();
    assert_eq!(job_of(&w, "quick").first_running_at_ms, Some(T0 + 5_000), "the gang is up: the work starts");
    w.clock.advance_ms(1_000);
    w.svc.report(&a, 0, exit(0, 0)).unwrap();
    w.svc.report(&a, 1, exit(0, 0)).unwrap();
    let j = job_of(&w, "quick");
    assert_eq!(j.state, JobState::Succeeded);
    assert_eq!((j.first_running_at_ms, j.finished_at_ms), (Some(T0 + 5_000), Some(T0 + 6_000)));

    // A capacity-only job runs once its VMs' agents are all up, too.
    let a = job_with(&w, "cap", 1, "");
    let mut j = job_of(&w, "cap");
    j.state = JobState::Provisioning;
    w.store.put(&j).unwrap();
    w.svc.register(&a, reg("vm-c", "10.0.0.6")).unwrap();
    let j = job_of(&w, "cap");
    assert_eq!((j.state, j.first_running_at_ms), (JobState::Provisioning, Some(T0 + 6_000)));
}

fn events(w: &World, job: &str, kind: EventKind) -> Vec<String> {
    let events = w.store.by_index::<scheduler::jobs::JobEvent>("job", job).unwrap();
    events.into_iter().filter(|e| e.kind == kind).map(|e| e.message).collect()
}

fn job_work(w: &World, job: &str) -> scheduler::agents::records::JobWork {
    w.store.get(job).unwrap().unwrap()
}

/// The variables rank `rank` of attempt `a` runs with now (panics when it has no order to run).
fn env_of(w: &World, a: &Attempt, rank: u32) -> (u32, std::collections::BTreeMap<String, String>) {
    let order = w.svc.work_now(a, rank).unwrap().order.unwrap_or_else(|| panic!("rank {rank} of {} waits", a.number));
    let Action::Run { restart } = order.action else { panic!("{:?}", order.action) };
    (restart, order.env)
}

#[test]
fn a_splittable_jobs_world_spans_its_attempts_and_each_change_restarts_every_rank_without_a_restart_counted() {
    let w = world();
    let a1 = job_of_kind(&w, "embed", "batch", 2, "gang = false\nrun = \"./shard.sh\"");
    w.svc.register(&a1, reg("e0", "10.0.0.4")).unwrap();
    w.svc.register(&a1, reg("e1", "10.0.0.5")).unwrap();
    let (restart, env) = env_of(&w, &a1, 1);
    assert_eq!((restart, env["SPILLWAY_NODE_RANK"].as_str(), env["SPILLWAY_NUM_NODES"].as_str()), (0, "1", "2"));
    assert_eq!(events(&w, "embed", EventKind::WorkStarted).len(), 1);
    // Rank 0 finishes its half of the first world's shards.
    w.svc.report(&a1, 0, exit(0, 0)).unwrap();

    // The fleet grows to 4 (control::growth). The first new VM waits for the second: one change.
    let mut grown = a1.clone();
    grown.growing_to = Some(scheduler::model::Capacity { vms: 4, gpus: 4 });
    w.store.put(&grown).unwrap();
    assert_eq!(w.svc.register(&grown, reg("e2", "10.0.0.6")).unwrap().rank, 2);
    assert!(w.svc.work_now(&grown, 2).unwrap().order.is_none(), "joins with the rest of the growth");
    assert_eq!(env_of(&w, &a1, 0).0, 0, "the world runs on meanwhile");
    w.clock.advance_ms(1_000);
    assert_eq!(w.svc.register(&grown, reg("e3", "10.0.0.7")).unwrap().rank, 3);
    let changed = events(&w, "embed", EventKind::WorldChanged);
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert!(changed[0].starts_with("world changed: 2 → 4 VMs (fleet grew in eastus)"), "{changed:?}");
    for rank in 0..4 {
        let (restart, env) = env_of(&w, &grown, rank);
        assert_eq!(restart, 1, "every rank starts again, the finished one too");
        assert_eq!(env["SPILLWAY_NODE_RANK"], rank.to_string());
        assert_eq!(env["SPILLWAY_NUM_NODES"], "4");
        assert_eq!(env["SPILLWAY_NODE_IPS"], "10.0.0.4\n10.0.0.5\n10.0.0.6\n10.0.0.7");
        assert_eq!(env["MASTER_ADDR"], "10.0.0.4");
    }

    // A second placement, in westus3: its VM is world rank 4.
    let mut j = job_of(&w, "embed");
    j.attempts = 2;
    w.store.put(&j).unwrap();
    let a2 = Attempt {
        number: 2,
        fleet_name: fleet_name("embed", 2),
        region: "westus3".into(),
        priority: Priority::Regular,
        vms: 1,
        gpus: 1,
        growing_to: None,
        ..grown.clone()
    };
    w.store.put(&a2).unwrap();
    w.svc.register(&a2, reg("w0", "10.1.0.4")).unwrap();
    let (restart, env) = env_of(&w, &a2, 0);
    assert_eq!((restart, env["SPILLWAY_NODE_RANK"].as_str(), env["SPILLWAY_NUM_NODES"].as_str()), (2, "4", "5"));
    assert_eq!(env["SPILLWAY_REGION"], "westus3");
    let shown: Vec<(u32, u32, Option<u32>)> =
        w.svc.nodes("embed").unwrap().iter().map(|n| (n.attempt, n.rank, n.world_rank)).collect();
    assert_eq!(shown, [(1, 0, Some(0)), (1, 1, Some(1)), (1, 2, Some(2)), (1, 3, Some(3)), (2, 0, Some(4))]);
    assert!(events(&w, "embed", EventKind::WorldChanged)[1].contains("5 VMs (attempt 2 joined in westus3)"));
    // Exits of a superseded start count for nothing.
    for rank in 0..4 {
        w.svc.report(&grown, rank, exit(1, 0)).unwrap();
    }
    assert_eq!(job_of(&w, "embed").state, JobState::Running, "start 1's world is gone");

    // The loop retires the westus3 placement: the world shrinks back at the next sweep.
    w.store.put(&Attempt { state: AttemptState::Replaced, ..a2.clone() }).unwrap();
    w.clock.advance_ms(1_000);
    for rank in 0..4 {
        w.svc.heartbeat(&grown, rank, Heartbeat { phase: Phase::Running, restart: Some(2), gpus: None }).unwrap();
    }
    w.svc.sweep_silent(&w.fence).unwrap();
    let changed = events(&w, "embed", EventKind::WorldChanged);
    assert_eq!(changed.len(), 3, "{changed:?}");
    assert!(changed[2].starts_with("world changed: 5 → 4 VMs (attempt 2 in westus3 left (replaced))"), "{changed:?}");
    for rank in 0..3 {
        w.svc.report(&grown, rank, exit(3, 0)).unwrap();
    }
    assert_eq!(job_of(&w, "embed").state, JobState::Running, "one rank of the current world to go");
    w.svc.report(&grown, 3, exit(3, 0)).unwrap();
    let j = job_of(&w, "embed");
    assert_eq!(j.state, JobState::Succeeded);
    assert_eq!(j.end_reason.as_deref(), Some("every rank of the job's world exited 0 (4 ranks over attempt 1)"));
    let jw = job_work(&w, "embed");
    assert_eq!((jw.failures, jw.next_restart), (0, 4), "three world changes, none counted against max_restarts");
    assert!(events(&w, "embed", EventKind::Restarted).is_empty());
}

#[test]
fn a_failing_rank_restarts_the_whole_world_within_max_restarts() {
    let w = world();
    let a = job_of_kind(&w, "flaky", "batch", 2, "gang = false\nmax_restarts = 1\nrun = \"./shard.sh\"");
    w.svc.register(&a, reg("e0", "10.0.0.4")).unwrap();
    w.svc.register(&a, reg("e1", "10.0.0.5")).unwrap();
    w.svc.report(&a, 1, exit(0, 3)).unwrap();
    assert_eq!(env_of(&w, &a, 0).0, 1, "every rank starts again");
    assert_eq!(job_work(&w, "flaky").failures, 1);
    w.svc.report(&a, 0, exit(1, 0)).unwrap();
    w.svc.report(&a, 1, exit(1, 4)).unwrap();
    let j = job_of(&w, "flaky");
    assert_eq!(j.state, JobState::Failed);
    assert_eq!(j.end_reason.as_deref(), Some("rank 1's run exited with code 4 (after 1 restart)"));
}

#[test]
fn a_notice_stops_every_rank_of_a_gang() {
    let w = world();
    let a = job(&w, "g", 2, "");
    w.svc.register(&a, reg("vm-a", "10.0.0.4")).unwrap();
    w.svc.register(&a, reg("vm-b", "10.0.0.5")).unwrap();
    let notice = Report::Notice { event_id: "E1".into(), event_type: "Preempt".into(), not_before: None };
    w.svc.report(&a, 1, notice).unwrap();
    for rank in 0..2 {
        let action = w.svc.work_now(&a, rank).unwrap().order.unwrap().action;
        assert!(matches!(action, Action::Stop { .. }), "rank {rank}: {action:?}");
    }
    let preempted = Report::Exited {
        restart: 0,
        script: Script::Run,
        code: Some(143),
        signal: None,
        reason: ExitReason::Preempted,
        message: None,
        tail: Vec::new(),
    };
    w.svc.report(&a, 1, preempted).unwrap();
    assert_eq!(job_of(&w, "g").state, JobState::Running, "a preemption is not a failure of the work");
}

#[test]
fn idle_gpus_raise_an_event_and_stop_the_job_when_asked() {
    let w = world();
    let a = job(&w, "idle", 1, "idle_minutes = 10\non_idle = \"stop\"");
    w.svc.register(&a, reg("vm-a", "10.0.0.4")).unwrap();
    let hb = |util: f64| Heartbeat {
        phase: Phase::Running,
        restart: Some(0),
        gpus: Some(vec![GpuSample {
            index: 0,
            utilization_percent: util,
            memory_used_mib: 100,
            memory_total_mib: 16384,
        }]),
    };
    let unknown = Heartbeat { phase: Phase::Running, restart: Some(0), gpus: None };
    w.svc.heartbeat(&a, 0, hb(1.0)).unwrap();
    w.clock.advance_ms(5 * 60_000);
    w.svc.heartbeat(&a, 0, hb(80.0)).unwrap();
    w.clock.advance_ms(6 * 60_000);
    w.svc.heartbeat(&a, 0, unknown.clone()).unwrap();
    w.clock.advance_ms(11 * 60_000);
    w.svc.heartbeat(&a, 0, unknown).unwrap();
    assert_eq!(job_of(&w, "idle").state, JobState::Running, "busy, then unknown: never idle");
    w.svc.heartbeat(&a, 0, hb(2.0)).unwrap();
    w.clock.advance_ms(9 * 60_000);
    w.svc.heartbeat(&a, 0, hb(3.0)).unwrap();
    assert_eq!(job_of(&w, "idle").state, JobState::Running, "nine minutes");
    w.clock.advance_ms(60_000);
    w.svc.heartbeat(&a, 0, hb(0.0)).unwrap();
    let j = job_of(&w, "idle");
    assert_eq!(j.state, JobState::Cancelled);
    assert!(j.end_reason.unwrap().contains("idle"));
    assert!(matches!(w.svc.work_now(&a, 0).unwrap().order.unwrap().action, Action::Stop { .. }));
    let bad = Heartbeat {
        gpus: Some(vec![GpuSample { utilization_percent: 250.0, ..hb(0.0).gpus.unwrap()[0].clone() }]),
        ..hb(0.0)
    };
    assert!(matches!(w.svc.heartbeat(&a, 0, bad), Err(AgentError::Invalid(_))));
}

#[tokio::test]
async fn a_rank_waiting_for_its_gang_is_answered_when_the_gang_completes() {
    let w = world();
    let a = job(&w, "j-1", 2, "");
    w.svc.register(&a, reg("vm-a", "10.0.0.4")).unwrap();
    let (svc, a2) = (w.svc.clone(), a.clone());
    let waiter = tokio::spawn(async move { svc.work(&a2, 0, Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished());
    let t = std::time::Instant::now();
    w.svc.register(&a, reg("vm-b", "10.0.0.5")).unwrap();
    let status = waiter.await.unwrap().unwrap();
    assert!(t.elapsed() < Duration::from_secs(2), "woken by the registration, not by its timeout");
    assert_eq!(status.order.unwrap().action, Action::Run { restart: 0 });
}

#[test]
fn silent_vms_are_declared_lost_and_missing_agents_noted_for_the_control_loop() {
    let w = world();
    let a = job(&w, "g", 2, "");
    w.svc.register(&a, reg("vm-a", "10.0.0.4")).unwrap();
    w.svc.register(&a, reg("vm-b", "10.0.0.5")).unwrap();
    let hb = Heartbeat { phase: Phase::Running, restart: Some(0), gpus: None };
    w.clock.advance_ms(20_000);
    w.svc.heartbeat(&a, 0, hb.clone()).unwrap();
    assert_eq!(w.svc.sweep_silent(&w.fence).unwrap(), 0, "within the timeout");
    w.clock.advance_ms(20_000);
    w.svc.heartbeat(&a, 0, hb).unwrap();
    assert_eq!(w.svc.sweep_silent(&w.fence).unwrap(), 1, "rank 1 has been quiet for 40 s");
    let work =
        w.store.get::<scheduler::agents::records::AttemptWork>(&scheduler::records::attempt_key("g", 1)).unwrap();
    let work = work.unwrap();
    assert_eq!(work.needs_replacement(), Some("a VM whose agent stopped sending heartbeats"));
    assert!(matches!(w.svc.work_now(&a, 0).unwrap().order.unwrap().action, Action::Stop { .. }), "the gang stops");
    assert_eq!(w.svc.sweep_silent(&w.fence).unwrap(), 0, "declared once");
    // The lost rank may be taken by a new VM.
    assert_eq!(w.svc.register(&a, reg("vm-c", "10.0.0.6")).unwrap().rank, 1);

    let half = job(&w, "half", 2, "");
    w.svc.register(&half, reg("vm-x", "10.0.1.4")).unwrap();
    w.clock.advance_ms(16 * 60_000);
    w.svc.heartbeat(&half, 0, Heartbeat { phase: Phase::Waiting, restart: None, gpus: None }).unwrap();
    w.svc.sweep_silent(&w.fence).unwrap();
    let work = w.store.get::<scheduler::agents::records::AttemptWork>(&scheduler::records::attempt_key("half", 1));
    assert_eq!(work.unwrap().unwrap().needs_replacement(), Some("VMs whose agents never registered"));
    let events = w.store.by_index::<scheduler::jobs::JobEvent>("job", "half").unwrap();
    assert!(events.iter().any(|e| e.kind.as_str() == "agents_missing" && e.message.contains("1 of 2")), "{events:?}");
}

/// What a sweep may have written about `job`: its ranks' lost marks, its attempt's work, its events.
fn swept(store: &Store, job: &str) -> (Vec<bool>, Option<scheduler::agents::records::AttemptWork>, usize) {
    let mut nodes = store.by_index::<scheduler::agents::records::NodeRecord>("job", job).unwrap();
    nodes.sort_by_key(|n| n.rank);
    let work = store.get(&scheduler::records::attempt_key(job, 1)).unwrap();
    let events = store.by_index::<scheduler::jobs::JobEvent>("job", job).unwrap();
    (nodes.iter().map(|n| n.lost).collect(), work, events.iter().filter(|e| e.kind == EventKind::VmLost).count())
}

/// A server that is not (or no longer) the leader sweeps: its verdicts are refused as a whole and
/// nothing is written. On every store a cleared fence refuses; on PostgreSQL a leader paused past
/// its lease, whose fence still names its old epoch, is refused by the database in the same
/// transaction, after another server took the lease and can sweep.
#[test]
fn a_deposed_leaders_silent_vm_sweep_writes_nothing() {
    let w = world();
    let a = job(&w, "g", 2, "");
    w.svc.register(&a, reg("vm-a", "10.0.0.4")).unwrap();
    w.svc.register(&a, reg("vm-b", "10.0.0.5")).unwrap();
    w.clock.advance_ms(40_000);
    let before = swept(&w.store, "g");
    w.fence.clear();
    let err = w.svc.sweep_silent(&w.fence).unwrap_err();
    assert!(matches!(err, StoreError::Fenced(_)), "{err}");
    assert_eq!(swept(&w.store, "g"), before, "a server without the lease wrote its verdicts");

    let Some(url) = postgres_url("deposed_sweep") else { return };
    let location: state::StoreLocation = url.parse().unwrap();
    let (old_server, new_server) = (Store::open_location(&location).unwrap(), Store::open_location(&location).unwrap());
    let old = world_on(old_server.clone(), AgentConfig { durable: false, ..AgentConfig::default() });
    let old_grant = old_server.lease_holder().unwrap().expect("world_on took the lease");
    let a = job(&old, "g", 2, "");
    old.svc.register(&a, reg("vm-a", "10.0.0.4")).unwrap();
    old.svc.register(&a, reg("vm-b", "10.0.0.5")).unwrap();
    old.clock.advance_ms(40_000);
    // The old leader pauses past its lease; another server takes it with the next epoch.
    old_server.release_lease(&state::LeaseGrant { holder: old_grant.holder.clone(), epoch: old_grant.epoch }).unwrap();
    let new_grant =
        new_server.acquire_lease("new-leader", Duration::from_secs(30)).unwrap().expect("the lease is free");
    assert_eq!(new_grant.epoch, old_grant.epoch + 1);
    let before = swept(&new_server, "g");
    assert_eq!(before.0, vec![false, false]);
    // The old leader resumes, its fence still naming its epoch: both ranks look silent to it.
    assert_eq!(old.fence.epoch(), Some(old_grant.epoch));
    let err = old.svc.sweep_silent(&old.fence).unwrap_err();
    assert!(matches!(err, StoreError::Fenced(_)), "{err}");
    assert_eq!(swept(&new_server, "g"), before, "the deposed leader's sweep was written");
    // The new leader's sweep goes through.
    let new = world_on(new_server.clone(), AgentConfig { durable: false, ..AgentConfig::default() });
    new.fence.hold(&new_grant);
    new.clock.advance_ms(40_000 + new.svc.config().heartbeat_timeout_ms);
    assert_eq!(new.svc.sweep_silent(&new.fence).unwrap(), 2);
    let (lost, work, events) = swept(&new_server, "g");
    assert_eq!((lost, events), (vec![true, true], 2));
    assert!(work.unwrap().needs_replacement().is_some());
}

/// A fresh, empty database on the test server (`SPILLWAY_TEST_POSTGRES`, a superuser URL; set by
/// `.ci/with-postgres`, as `.ci/run` does), as a store URL; `None`, with a note, when it is not set.
fn postgres_url(name: &str) -> Option<String> {
    let Ok(admin) = std::env::var("SPILLWAY_TEST_POSTGRES") else {
        eprintln!(
            "skipping the PostgreSQL part of `{name}`: SPILLWAY_TEST_POSTGRES is not set (see .ci/with-postgres)"
        );
        return None;
    };
    let db = format!("spw_agents_{name}_{}", std::process::id());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&admin, tokio_postgres::NoTls).await.expect("test server");
        tokio::spawn(conn);
        client.batch_execute(&format!("DROP DATABASE IF EXISTS {db}")).await.unwrap();
        client.batch_execute(&format!("CREATE DATABASE {db}")).await.unwrap();
    });
    let (base, query) = admin.split_once('?').map_or((admin.as_str(), String::new()), |(b, q)| (b, format!("?{q}")));
    Some(format!("{}/{db}{query}", base.rsplit_once('/').map_or(base, |(b, _)| b)))
}
