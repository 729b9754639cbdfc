//! The work's verdicts, as pure functions of what is stored: what a rank should do now, and what
//! an exit means for the job. [`super::AgentService`] applies them in the transaction that records
//! the report; keeping them here, apart from storage and HTTP, keeps the rules in one readable place.

use super::protocol::Action;
use super::records::{AttemptWork, ExitRecord, JobWork, NodeRecord};
use crate::model::Job;

/// True when the job's ranks are one gang: a failure or a notice on one stops all of them, and
/// one attempt finishing finishes the job. Inference replicas and splittable batch work are not.
pub fn is_gang(job: &Job) -> bool {
    // `JobSpec::is_gang` is the one home of "gang, never for inference".
    job.spec.is_gang()
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

/// What a rank should do now.
pub fn action(job: &Job, work: &AttemptWork, node: &NodeRecord) -> Action {
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
        assert_eq!(action(&j, &w, &n), Action::Run { restart: 2 });
        w.restart = None;
        assert_eq!(action(&j, &w, &n), Action::Wait);
        w.stop = Some("why".into());
        assert!(matches!(action(&j, &w, &n), Action::Stop { .. }));
        j.state = JobState::Succeeded;
        assert!(matches!(action(&j, &work(0), &n), Action::Stop { .. }));
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
    fn splittable_work_waits_for_its_other_attempts() {
        let j = job_of("batch", "gang = false");
        let ok = exit(0, Some(0), ExitReason::Finished);
        let both = [node(0, Some(ok.clone())), node(1, Some(ok.clone()))];
        let jw = JobWork::new("j-1");
        assert_eq!(on_exit(&j, &jw, &work(0), &both, 1, &ok, true), ExitVerdict::RankDone);
        assert_eq!(on_exit(&j, &jw, &work(0), &both, 1, &ok, false), ExitVerdict::Succeed);
    }
}
