//! The work's verdicts, as pure functions of what is stored: what a rank should do now, and what
//! an exit means for the job. [`super::AgentService`] applies them in the transaction that records
//! the report; keeping them here, apart from storage and HTTP, keeps the rules in one readable place.

use std::collections::BTreeMap;

use super::protocol::Action;
use super::records::{AttemptWork, ExitRecord, JobWork, Member, NodeRecord, World};
use crate::model::{AttemptState, Job, JobKind};

/// True when the job's ranks are one gang: a failure or a notice on one stops all of them, and
/// one attempt finishing finishes the job. Inference replicas and splittable batch work are not.
pub fn is_gang(job: &Job) -> bool {
    // `JobSpec::is_gang` is the one home of "gang, never for inference".
    job.spec.is_gang()
}

/// True when the job's work is one elastic world over all its running attempts: splittable work
/// (not a gang, not inference replicas) that runs a command. Its ranks are numbered across the
/// attempts ([`World`]) so work sharded by `SPILLWAY_NODE_RANK` / `SPILLWAY_NUM_NODES` is split
/// over every VM the job has, and its fleets may grow: a change of VMs starts every rank again
/// with the new world, as elastic torchrun does on a membership change.
pub fn is_elastic(job: &Job) -> bool {
    job.spec.runs_work() && !is_gang(job) && job.spec.kind != JobKind::Inference
}

/// One attempt of an elastic job as the world rules see it.
#[derive(Debug, Clone)]
pub struct AttemptRanks<'a> {
    /// Attempt number.
    pub number: u32,
    /// Its region (for the reasons).
    pub region: &'a str,
    /// Its state: only active attempts hold members.
    pub state: AttemptState,
    /// Its work was told to stop.
    pub stopped: bool,
    /// Its ranks `0..num_nodes` (the VMs it holds or is growing to), `None` where none registered.
    pub nodes: &'a [Option<NodeRecord>],
}

fn live(n: &NodeRecord) -> bool {
    !n.lost && n.notice.is_none()
}

/// The world the job's work should run as now: the live ranks of its active attempts, in attempt,
/// then rank order. Ranks already in `current` stay; new ones join once every rank of their attempt
/// is up (a growth's or a new attempt's VMs join together, one change, not one per VM). A growth's
/// VMs also join once the oldest of them has waited `settle_ms` (VMs the fleet could not fill hold
/// no one back); a new attempt's do not: one whose agents never all come is the control loop's to
/// replace (`agents_missing`), as before it ran anything.
pub fn desired_world(
    current: Option<&World>,
    attempts: &[AttemptRanks<'_>],
    now_ms: i64,
    settle_ms: i64,
) -> Vec<Member> {
    let known = |n: &NodeRecord| current.is_some_and(|w| w.rank_of(n).is_some());
    let mut out = Vec::new();
    let mut by_number: Vec<&AttemptRanks<'_>> = attempts.iter().collect();
    by_number.sort_by_key(|a| a.number);
    for a in by_number {
        if !matches!(a.state, AttemptState::Provisioning | AttemptState::Running) || a.stopped {
            continue;
        }
        let complete = !a.nodes.is_empty() && a.nodes.iter().all(|n| n.as_ref().is_some_and(live));
        let in_world = a.nodes.iter().flatten().any(known);
        let waited = in_world
            && a.nodes
                .iter()
                .flatten()
                .filter(|n| live(n) && !known(n))
                .map(|n| n.registered_at_ms)
                .min()
                .is_some_and(|t| now_ms - t >= settle_ms);
        for n in a.nodes.iter().flatten().filter(|n| live(n)) {
            if complete || waited || known(n) {
                out.push(Member::of(n));
            }
        }
    }
    out
}

/// Why the world goes from `old` to `new` members, in the user's terms: "fleet grew in eastus",
/// "attempt 2 joined in westus3", "1 VM lost in eastus", "attempt 1 left (replaced)".
pub fn why_world_changed(old: &[Member], new: &[Member], attempts: &[AttemptRanks<'_>]) -> String {
    let mut count: BTreeMap<u32, (usize, usize, usize, usize)> = BTreeMap::new(); // old, new, lost, noticed
    for m in old {
        count.entry(m.attempt).or_default().0 += 1;
    }
    for m in new {
        count.entry(m.attempt).or_default().1 += 1;
    }
    let view = |n: u32| attempts.iter().find(|a| a.number == n);
    for m in old.iter().filter(|m| !new.contains(m)) {
        let node = view(m.attempt).and_then(|a| a.nodes.get(m.rank as usize)).and_then(Option::as_ref);
        match node {
            Some(n) if n.notice.is_some() && n.vm_name == m.vm_name => count.entry(m.attempt).or_default().3 += 1,
            _ => count.entry(m.attempt).or_default().2 += 1,
        }
    }
    let vms = |k: usize| if k == 1 { "1 VM".to_string() } else { format!("{k} VMs") };
    let mut parts = Vec::new();
    for (&n, &(was, now, lost, noticed)) in &count {
        let a = view(n);
        let region = a.map_or("?", |a| a.region);
        let gone_attempt =
            a.is_none_or(|a| !matches!(a.state, AttemptState::Provisioning | AttemptState::Running) || a.stopped);
        if was == 0 {
            parts.push(format!("attempt {n} joined in {region}"));
        } else if now == 0 && gone_attempt {
            let state = a.map_or("gone", |a| a.state.as_str());
            parts.push(format!("attempt {n} in {region} left ({state})"));
        } else {
            if noticed > 0 {
                parts.push(format!("{} in {region} got a preemption notice", vms(noticed)));
            }
            if lost > 0 {
                parts.push(format!("{} lost in {region}", vms(lost)));
            }
            let added = now + lost + noticed - was;
            if added > 0 && lost + noticed == 0 {
                parts.push(format!("fleet grew in {region}"));
            } else if added > 0 {
                parts.push(format!("{} joined in {region}", vms(added)));
            }
        }
    }
    parts.join("; ")
}

/// Why the control loop should place the job again and retire this attempt once the new placement
/// runs (make before break), from what its agents reported: for a gang, a preemption notice, a lost
/// VM or agents that never registered (one rank gone stops them all); for replicas and splittable
/// work, only an attempt whose agents never came (the others keep working, and the cloud's own VM
/// count moves the rest as today).
pub fn replacement_reason(job: &Job, work: &AttemptWork) -> Option<&'static str> {
    if job.state.is_final() || work.done {
        return None;
    }
    if is_gang(job) {
        work.needs_replacement()
    } else {
        work.unregistered_at_ms.map(|_| "VMs whose agents never registered")
    }
}

/// What a rank should do now. `world` is the job's ([`JobWork::world`]): an elastic job's rank runs
/// the world's start when it is a member, and waits to join otherwise.
pub fn action(job: &Job, work: &AttemptWork, node: &NodeRecord, world: Option<&World>) -> Action {
    if job.state.is_final() {
        return Action::Stop { reason: format!("the job has ended ({})", job.state) };
    }
    if node.lost {
        return Action::Stop { reason: "this VM was declared lost (its heartbeats stopped)".into() };
    }
    if let Some(n) = &node.notice {
        return Action::Stop { reason: format!("{} notice for this VM", n.event_type) };
    }
    if let Some(why) = &work.stop {
        return Action::Stop { reason: why.clone() };
    }
    if !job.spec.runs_work() {
        // Capacity only: nothing to run, but the agent stays for heartbeats and GPU telemetry.
        return Action::Wait;
    }
    if is_elastic(job) {
        return match world {
            Some(w) if w.rank_of(node).is_some() => Action::Run { restart: w.restart },
            _ => Action::Wait,
        };
    }
    match work.restart {
        Some(restart) => Action::Run { restart },
        None => Action::Wait,
    }
}

/// What an exit means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitVerdict {
    /// Nothing follows (a stop or a preemption, a stale start, a job already ended).
    Nothing,
    /// This rank is done; others are still running (or other attempts of a splittable job are).
    RankDone,
    /// Every rank exited 0: the job succeeded.
    Succeed,
    /// A rank failed and `max_restarts` allows another start: run again in place.
    Restart,
    /// A rank failed and no restart is left: the job failed.
    Fail,
    /// Another rank of the same start already failed; this one only adds its exit.
    AlreadyCounted,
}

/// The verdict of `exit` on `rank` (whose record in `nodes` already shows it). `others_busy`: another
/// active attempt of the job still runs work it was not told to stop.
pub fn on_exit(
    job: &Job,
    job_work: &JobWork,
    work: &AttemptWork,
    nodes: &[Option<NodeRecord>],
    rank: u32,
    exit: &ExitRecord,
    others_busy: bool,
) -> ExitVerdict {
    let _ = rank;
    if job.state.is_final() || work.stop.is_some() || work.restart != Some(exit.restart) {
        return ExitVerdict::Nothing;
    }
    if exit.succeeded() {
        let all_done = nodes.iter().all(|n| {
            n.as_ref().is_some_and(|n| n.exit.as_ref().is_some_and(|e| e.restart == exit.restart && e.succeeded()))
        });
        return if all_done && (is_gang(job) || !others_busy) { ExitVerdict::Succeed } else { ExitVerdict::RankDone };
    }
    if !exit.failed() {
        return ExitVerdict::Nothing;
    }
    if work.failed_restart == Some(exit.restart) {
        return ExitVerdict::AlreadyCounted;
    }
    if job_work.failures < job.spec.max_restarts() { ExitVerdict::Restart } else { ExitVerdict::Fail }
}

/// The verdict of `exit` of an elastic job's rank. `member`: the rank is in the current world;
/// `members`: the world's ranks' records in world-rank order (`None` where the rank is now held by
/// another VM). Only the current start of the current world counts: the job succeeds when every
/// member's `run` of `world.restart` exited 0; an exit of a superseded start or world is nothing.
pub fn on_world_exit(
    job: &Job,
    job_work: &JobWork,
    world: &World,
    members: &[Option<NodeRecord>],
    member: bool,
    exit: &ExitRecord,
) -> ExitVerdict {
    if job.state.is_final() || !member || exit.restart != world.restart {
        return ExitVerdict::Nothing;
    }
    if exit.succeeded() {
        let all_done = members.len() == world.members.len()
            && members.iter().all(|n| {
                n.as_ref().is_some_and(|n| n.exit.as_ref().is_some_and(|e| e.restart == world.restart && e.succeeded()))
            });
        return if all_done { ExitVerdict::Succeed } else { ExitVerdict::RankDone };
    }
    if !exit.failed() {
        return ExitVerdict::Nothing;
    }
    if world.failed_restart == Some(exit.restart) {
        return ExitVerdict::AlreadyCounted;
    }
    if job_work.failures < job.spec.max_restarts() { ExitVerdict::Restart } else { ExitVerdict::Fail }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::protocol::{ExitReason, Phase, Script};
    use crate::model::{JobSpec, JobState};

    fn job(extra: &str) -> Job {
        job_of("training", extra)
    }

    fn job_of(kind: &str, extra: &str) -> Job {
        let spec: JobSpec =
            toml::from_str(&format!("name = \"t\"\nkind = \"{kind}\"\ngpus = 2\nrun = \"true\"\n{extra}")).unwrap();
        let mut j = Job::new("j-1".into(), spec, 0);
        j.state = JobState::Running;
        j
    }

    fn work(restart: u32) -> AttemptWork {
        AttemptWork {
            job_id: "j-1".into(),
            attempt: 1,
            num_nodes: 2,
            started_at_ms: Some(0),
            restart: Some(restart),
            stop: None,
            done: false,
            failed_restart: None,
            notice_at_ms: None,
            idle_reported: false,
            lost_at_ms: None,
            unregistered_at_ms: None,
        }
    }

    fn exit(restart: u32, code: Option<i32>, reason: ExitReason) -> ExitRecord {
        ExitRecord { restart, script: Script::Run, code, signal: None, reason, message: None, at_ms: 0 }
    }

    fn node(rank: u32, e: Option<ExitRecord>) -> Option<NodeRecord> {
        Some(NodeRecord {
            job_id: "j-1".into(),
            attempt: 1,
            rank,
            vm_name: format!("vm{rank}"),
            hostname: String::new(),
            private_ip: "10.0.0.1".into(),
            gpus: None,
            boot_id: "b".into(),
            agent_version: String::new(),
            registered_at_ms: 0,
            last_heartbeat_ms: 0,
            phase: Phase::Running,
            restart: Some(0),
            run_started_at_ms: None,
            startup_ms: None,
            exit: e,
            notice: None,
            lost: false,
            log_bytes: 0,
            log_truncated: false,
            log_boot_id: String::new(),
            last_batch: 0,
            gpu_samples: None,
        })
    }

    #[test]
    fn the_job_succeeds_only_when_every_rank_exited_zero() {
        let j = job("");
        let jw = JobWork::new("j-1");
        let ok = exit(0, Some(0), ExitReason::Finished);
        let one = [node(0, Some(ok.clone())), node(1, None)];
        assert_eq!(on_exit(&j, &jw, &work(0), &one, 0, &ok, false), ExitVerdict::RankDone);
        let both = [node(0, Some(ok.clone())), node(1, Some(ok.clone()))];
        assert_eq!(on_exit(&j, &jw, &work(0), &both, 1, &ok, false), ExitVerdict::Succeed);
    }

    #[test]
    fn failures_restart_until_max_restarts_then_fail_and_stops_never_count() {
        let j = job("max_restarts = 1");
        let mut jw = JobWork::new("j-1");
        let bad = exit(0, Some(3), ExitReason::Finished);
        let nodes = [node(0, Some(bad.clone())), node(1, None)];
        assert_eq!(on_exit(&j, &jw, &work(0), &nodes, 0, &bad, false), ExitVerdict::Restart);
        jw.failures = 1;
        let bad1 = exit(1, Some(3), ExitReason::Finished);
        assert_eq!(on_exit(&j, &jw, &work(1), &nodes, 0, &bad1, false), ExitVerdict::Fail);
        let mut counted = work(1);
        counted.failed_restart = Some(1);
        assert_eq!(on_exit(&j, &jw, &counted, &nodes, 1, &bad1, false), ExitVerdict::AlreadyCounted);
        for reason in [ExitReason::Stopped, ExitReason::Preempted] {
            let e = exit(1, Some(143), reason);
            assert_eq!(on_exit(&j, &jw, &work(1), &nodes, 0, &e, false), ExitVerdict::Nothing, "{reason:?}");
        }
        let stale = exit(0, Some(1), ExitReason::Finished);
        assert_eq!(on_exit(&j, &jw, &work(1), &nodes, 0, &stale, false), ExitVerdict::Nothing, "an old start");
        let error = ExitRecord { message: Some("no container runtime".into()), ..exit(1, None, ExitReason::Error) };
        assert_eq!(on_exit(&j, &jw, &work(1), &nodes, 0, &error, false), ExitVerdict::Fail);
    }

    #[test]
    fn actions_follow_the_job_the_node_and_the_attempt() {
        let mut j = job("");
        let n = node(0, None).unwrap();
        let mut w = work(2);
        assert_eq!(action(&j, &w, &n, None), Action::Run { restart: 2 });
        w.restart = None;
        assert_eq!(action(&j, &w, &n, None), Action::Wait);
        w.stop = Some("why".into());
        assert!(matches!(action(&j, &w, &n, None), Action::Stop { .. }));
        j.state = JobState::Succeeded;
        assert!(matches!(action(&j, &work(0), &n, None), Action::Stop { .. }));
    }

    #[test]
    fn gangs_move_on_any_agent_trouble_and_replicas_only_when_no_agent_came() {
        let gang = job("");
        let replicas = job_of("batch", "gang = false");
        let mut w = work(0);
        assert_eq!(replacement_reason(&gang, &w), None);
        w.notice_at_ms = Some(1);
        assert_eq!(replacement_reason(&gang, &w), Some("a preemption notice"));
        assert_eq!(replacement_reason(&replicas, &w), None);
        let mut w = work(0);
        w.lost_at_ms = Some(1);
        assert_eq!(replacement_reason(&gang, &w), Some("a VM whose agent stopped sending heartbeats"));
        assert_eq!(replacement_reason(&replicas, &w), None);
        let mut w = work(0);
        w.unregistered_at_ms = Some(1);
        assert_eq!(replacement_reason(&replicas, &w), Some("VMs whose agents never registered"));
        w.done = true;
        assert_eq!(replacement_reason(&gang, &w), None, "finished work stays where it is");
    }

    #[test]
    fn replicas_that_run_work_wait_for_their_other_attempts() {
        let j = job_of("inference", "");
        assert!(!is_elastic(&j), "replicas keep their ranks per attempt");
        let ok = exit(0, Some(0), ExitReason::Finished);
        let both = [node(0, Some(ok.clone())), node(1, Some(ok.clone()))];
        let jw = JobWork::new("j-1");
        assert_eq!(on_exit(&j, &jw, &work(0), &both, 1, &ok, true), ExitVerdict::RankDone);
        assert_eq!(on_exit(&j, &jw, &work(0), &both, 1, &ok, false), ExitVerdict::Succeed);
    }

    fn at(attempt: u32, rank: u32, vm: &str, registered_at_ms: i64) -> Option<NodeRecord> {
        node(rank, None).map(|n| NodeRecord {
            attempt,
            vm_name: vm.into(),
            private_ip: format!("10.0.{attempt}.{rank}"),
            registered_at_ms,
            ..n
        })
    }

    fn ranks<'a>(number: u32, region: &'a str, nodes: &'a [Option<NodeRecord>]) -> AttemptRanks<'a> {
        AttemptRanks { number, region, state: AttemptState::Running, stopped: false, nodes }
    }

    fn names(m: &[Member]) -> Vec<String> {
        m.iter().map(|m| format!("a{}r{}:{}", m.attempt, m.rank, m.vm_name)).collect()
    }

    fn world_of(members: Vec<Member>, restart: u32) -> World {
        World { members, restart, started_at_ms: 0, failed_restart: None }
    }

    #[test]
    fn splittable_work_that_runs_a_command_is_one_elastic_world_and_gangs_are_not() {
        assert!(is_elastic(&job_of("batch", "gang = false")));
        assert!(is_elastic(&job_of("batch", "")), "batch is no gang unless it says so");
        assert!(!is_elastic(&job("")), "training is a gang");
        assert!(!is_elastic(&job_of("batch", "gang = true")));
        let spec: JobSpec = toml::from_str("name = \"t\"\nkind = \"batch\"\ngpus = 2\n").unwrap();
        assert!(!is_elastic(&Job::new("j-2".into(), spec, 0)), "nothing to run, no world");
    }

    #[test]
    fn the_world_numbers_ranks_across_attempts_by_attempt_then_rank() {
        let east = [at(1, 0, "e0", 0), at(1, 1, "e1", 0)];
        let west = [at(2, 0, "w0", 0)];
        // Listed out of order: the world is ordered by attempt all the same.
        let members = desired_world(None, &[ranks(2, "westus3", &west), ranks(1, "eastus", &east)], 0, 60_000);
        assert_eq!(names(&members), ["a1r0:e0", "a1r1:e1", "a2r0:w0"]);
        let w = world_of(members, 4);
        assert_eq!(w.rank_of(west[0].as_ref().unwrap()), Some(2));
        assert_eq!(w.ips(), ["10.0.1.0", "10.0.1.1", "10.0.2.0"]);
        assert_eq!(w.attempts(), [1, 2]);
        // Every member runs the world's start, whatever its attempt's own work says.
        let j = job_of("batch", "gang = false");
        let mut own = work(0);
        own.restart = None;
        assert_eq!(action(&j, &own, west[0].as_ref().unwrap(), Some(&w)), Action::Run { restart: 4 });
    }

    #[test]
    fn a_growths_vms_join_together_or_after_the_settle_time_and_lost_or_noticed_vms_leave() {
        let old = [at(1, 0, "e0", 0), at(1, 1, "e1", 0)];
        let current = world_of(desired_world(None, &[ranks(1, "eastus", &old)], 0, 60_000), 0);
        // Growing to 4: one new VM up, one to come. The world keeps its two; the new one waits.
        let half = [at(1, 0, "e0", 0), at(1, 1, "e1", 0), at(1, 2, "e2", 1_000), None];
        let members = desired_world(Some(&current), &[ranks(1, "eastus", &half)], 2_000, 60_000);
        assert_eq!(members, current.members, "no change until the growth's VMs are up");
        let j = job_of("batch", "gang = false");
        assert_eq!(action(&j, &work(0), half[2].as_ref().unwrap(), Some(&current)), Action::Wait);
        // Its last VM never comes: after the settle time the ones that came join.
        let members = desired_world(Some(&current), &[ranks(1, "eastus", &half)], 61_000, 60_000);
        assert_eq!(names(&members), ["a1r0:e0", "a1r1:e1", "a1r2:e2"]);
        // All four up: one change to four.
        let full = [at(1, 0, "e0", 0), at(1, 1, "e1", 0), at(1, 2, "e2", 1_000), at(1, 3, "e3", 1_500)];
        let grown = desired_world(Some(&current), &[ranks(1, "eastus", &full)], 2_000, 60_000);
        assert_eq!(grown.len(), 4);
        let views = [ranks(1, "eastus", &full)];
        assert_eq!(why_world_changed(&current.members, &grown, &views), "fleet grew in eastus");
        // A lost VM and a noticed one leave; a new VM in the lost rank is a new member.
        let grown_world = world_of(grown.clone(), 1);
        let mut after = full.clone();
        after[1].as_mut().unwrap().lost = true;
        after[3].as_mut().unwrap().notice = Some(crate::agents::records::NoticeRecord {
            event_id: "e".into(),
            event_type: "Preempt".into(),
            not_before: None,
            at_ms: 0,
        });
        let views = [ranks(1, "eastus", &after)];
        let shrunk = desired_world(Some(&grown_world), &views, 3_000, 60_000);
        assert_eq!(names(&shrunk), ["a1r0:e0", "a1r2:e2"]);
        assert_eq!(
            why_world_changed(&grown, &shrunk, &views),
            "1 VM in eastus got a preemption notice; 1 VM lost in eastus"
        );
        after[1] = at(1, 1, "e1-new", 4_000);
        let views = [ranks(1, "eastus", &after)];
        let shrunk_world = world_of(shrunk.clone(), 2);
        let wait = desired_world(Some(&shrunk_world), &views, 4_000, 60_000);
        assert_eq!(wait, shrunk, "the noticed VM still holds its rank: the attempt is not complete");
        let back = desired_world(Some(&shrunk_world), &views, 64_000, 60_000);
        assert_eq!(names(&back), ["a1r0:e0", "a1r1:e1-new", "a1r2:e2"], "joined after the settle time");
        // An attempt retired by the loop leaves with all its VMs; a new one joins.
        let west = [at(2, 0, "w0", 5_000)];
        let mut retired = ranks(1, "eastus", &after);
        retired.state = AttemptState::Replaced;
        let views = [retired, ranks(2, "westus3", &west)];
        let moved = desired_world(Some(&world_of(back.clone(), 3)), &views, 5_000, 60_000);
        assert_eq!(names(&moved), ["a2r0:w0"]);
        assert_eq!(
            why_world_changed(&back, &moved, &views),
            "attempt 1 in eastus left (replaced); attempt 2 joined in westus3"
        );
        // A new attempt joins whole: one with a VM that never comes waits (for the loop to replace
        // it), however long.
        let partial = [at(3, 0, "x0", 0), None];
        let views = [ranks(2, "westus3", &west), ranks(3, "eastus", &partial)];
        let moved_world = world_of(moved.clone(), 4);
        assert_eq!(desired_world(Some(&moved_world), &views, 10_000_000, 60_000), moved);
    }

    #[test]
    fn only_the_current_worlds_current_start_decides_and_every_member_must_exit_zero() {
        let j = job_of("batch", "gang = false\nmax_restarts = 1");
        let jw = JobWork::new("j-1");
        let ok = |restart| exit(restart, Some(0), ExitReason::Finished);
        let done = |attempt, rank, restart| {
            at(attempt, rank, &format!("v{attempt}{rank}"), 0).map(|n| NodeRecord { exit: Some(ok(restart)), ..n })
        };
        let w = world_of(
            vec![
                Member::of(done(1, 0, 3).as_ref().unwrap()),
                Member::of(done(1, 1, 3).as_ref().unwrap()),
                Member::of(done(2, 0, 3).as_ref().unwrap()),
            ],
            3,
        );
        // Two of three members done in start 3; the third exited 0 in start 2, a superseded world.
        let members = [done(1, 0, 3), done(1, 1, 3), done(2, 0, 2)];
        assert_eq!(on_world_exit(&j, &jw, &w, &members, true, &ok(3)), ExitVerdict::RankDone);
        assert_eq!(on_world_exit(&j, &jw, &w, &members, true, &ok(2)), ExitVerdict::Nothing, "an old start");
        let all = [done(1, 0, 3), done(1, 1, 3), done(2, 0, 3)];
        assert_eq!(on_world_exit(&j, &jw, &w, &all, true, &ok(3)), ExitVerdict::Succeed);
        assert_eq!(on_world_exit(&j, &jw, &w, &all, false, &ok(3)), ExitVerdict::Nothing, "not a member");
        let gone = [done(1, 0, 3), None, done(2, 0, 3)];
        assert_eq!(
            on_world_exit(&j, &jw, &w, &gone, true, &ok(3)),
            ExitVerdict::RankDone,
            "a member's VM was replaced"
        );
        // A failure of the current start counts once against max_restarts; a stop never does.
        let bad = exit(3, Some(1), ExitReason::Finished);
        assert_eq!(on_world_exit(&j, &jw, &w, &all, true, &bad), ExitVerdict::Restart);
        let counted = World { failed_restart: Some(3), ..w.clone() };
        assert_eq!(on_world_exit(&j, &jw, &counted, &all, true, &bad), ExitVerdict::AlreadyCounted);
        let stopped = exit(3, Some(143), ExitReason::Stopped);
        assert_eq!(on_world_exit(&j, &jw, &w, &all, true, &stopped), ExitVerdict::Nothing, "a world change's stop");
        let spent = JobWork { failures: 1, ..JobWork::new("j-1") };
        assert_eq!(on_world_exit(&j, &spent, &w, &all, true, &bad), ExitVerdict::Fail);
    }
}
