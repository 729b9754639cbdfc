//! Steps 6 and 7 of a round: the deadline policies choose what each deadline job holds, then the
//! round plans and places (the solver's problem from the snapshot, why jobs wait, the intents).
//! The decisions are `deadline.rs`'s and `placement.rs`'s; this file drives them.

use std::collections::{BTreeMap, BTreeSet};

use super::actions::{Action, Change, JobEdit};
use super::deadline;
use super::deadline_choice::deadline_managed;
use super::demand::DemandPart;
use super::feasibility::Feasibility;
use super::metrics::FilterLabel;
use super::round::{ControlError, RoundReport};
use super::snapshot::Snapshot;
use super::world::our_usage;
use super::{
    Controller, LoopState, cleanup, demand, dependencies, growth, mixed, placement, quota_watch, stage_deadlines,
};
use crate::model::{Attempt, EventKind, Job};
use crate::records::{AttemptsBy, Lookup};

/// Each demand's price cap per hour, by the demand's id in the problem.
type PriceCaps = BTreeMap<String, Option<f64>>;

/// Where each job's input data lies and its GB, by job id ([`placement::PlanInput::data`]).
type InputData = BTreeMap<String, (String, Option<f64>)>;

impl Controller {
    /// Step 6: each deadline job's policy chooses what the job holds this round (recorded in
    /// `st.deadline.choices`; the plan narrows the job's demands to it). A change of choice is
    /// recorded as a `deadline_choice` event; placements the choice leaves behind are retired.
    pub(super) async fn choose_deadlines(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
    ) -> Result<(), ControlError> {
        let now = snap.now;
        let tick_ms = self.config.deadline_tick_ms.max(1);
        deadline::observe_spot(st, &self.catalog, now, tick_ms);
        // A pipeline job whose dependencies ended takes its share of what is left of the
        // pipeline's deadline before its policy first plans with it.
        for open in snap.open_shared() {
            let id = &open.id;
            let Some(job) = snap.jobs.get(id) else { continue };
            let Some((deadline_ms, left_hours)) = stage_deadlines::recomputed(snap, job) else { continue };
            let was = job.spec.deadline.map_or_else(|| "none".to_string(), placement::fmt_time_of);
            let at = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(deadline_ms) * 1_000_000);
            let new = at.map(placement::fmt_time_of).unwrap_or_else(|_| deadline_ms.to_string());
            let message = format!(
                "deadline {new} (was {was}): its share of the {left_hours:.1} h left to the pipeline's deadline when its dependencies ended"
            );
            let edit = JobEdit::Deadline { deadline_ms, message };
            let change = Change { job: Some((id.clone(), edit)), ..Change::default() };
            self.act(st, snap, report, vec![Action::Record(change)]).await?;
        }
        // A pipeline job waiting for its dependencies holds nothing yet: no policy chooses for it.
        // Each with where its input data lies (and its size), for its policy's egress.
        type WithInput = (Job, Option<(String, Option<f64>)>);
        let open_jobs = snap.open_refs();
        let mut gates = dependencies::gates(snap, &open_jobs);
        let jobs: Vec<WithInput> = open_jobs
            .into_iter()
            .filter(|j| deadline_managed(j))
            .filter_map(|j| match gates.remove(&j.id).unwrap_or(dependencies::Gate::Ready { data: None }) {
                dependencies::Gate::Ready { data } => Some((j.clone(), data)),
                _ => None,
            })
            .collect();
        let open: BTreeSet<&str> = jobs.iter().map(|(j, _)| j.id.as_str()).collect();
        let previous = deadline::begin_choices(st, &open);
        if jobs.is_empty() {
            return Ok(());
        }
        let policy = (self.config.deadline_policy, tick_ms);
        let held = placement::held_by_job(snap, st, &self.config);
        let afford: BTreeMap<String, Option<f64>> = jobs
            .iter()
            .map(|(job, _)| (job.id.clone(), placement::affordable_usd(snap, st, job, &held, &self.catalog)))
            .collect();
        for (job, data) in &jobs {
            let attempts: Vec<Attempt> = snap.attempts_of(&job.id).cloned().collect();
            let refs: Vec<&Attempt> = attempts.iter().collect();
            // The room the job's policy sees leaves out the job's own fleets: where it runs it
            // needs no more. Counted, they filled the region it held (its spot or regular offer
            // there no longer fit a whole job), so it moved, paid its input's egress again, and
            // moved on the next round from the region its new fleet now filled.
            let ours = our_usage(snap.active().filter(|a| a.job_id != job.id));
            let afford = afford.get(&job.id).copied().flatten();
            let Some(choice) =
                deadline::choose(st, &self.catalog, policy, job, &refs, &ours, (data.as_ref(), afford), now)
            else {
                continue;
            };
            let mut actions = Vec::new();
            if previous.get(&job.id) != Some(&choice) {
                let event = (EventKind::DeadlineChoice, format!("{} deadline policy: {choice}", choice.policy));
                let change = Change { job: Some((job.id.clone(), JobEdit::Note { event })), ..Change::default() };
                actions.push(Action::Record(change));
            }
            self.act(st, snap, report, actions).await?;
            for old in deadline::leftovers(&refs, &choice) {
                let action = cleanup::retire_leftover(snap, &old);
                self.act(st, snap, report, vec![action]).await?;
            }
            st.deadline.choices.insert(job.id.clone(), choice);
        }
        Ok(())
    }

    /// Step 7: builds the solver problem from the snapshot, solves it (or reuses the last plan),
    /// records why jobs wait, and places. Returns how many placements the cloud refused at once
    /// (the round then plans again).
    pub(super) async fn plan_and_place(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
    ) -> Result<usize, ControlError> {
        let input = placement::plan_input(snap, st, &self.config, &self.catalog);
        let caps: PriceCaps = input.problem.jobs.iter().map(|d| (d.id.clone(), d.max_price_per_hour)).collect();
        self.record_input(st, snap, report, &input).await?;
        let placement::PlanInput { jobs, problem, mut reasons, data, .. } = input;
        let plan = self.solve_round(st, snap.now, problem, report);
        if let Some(plan) = &plan {
            for u in &plan.unplaced {
                let (job_id, _) = DemandPart::parse(&u.job);
                reasons.entry(job_id.to_string()).or_default().extend(u.reasons.iter().cloned());
            }
        }
        self.record_waiting(st, snap, report, &jobs, reasons, plan.as_ref()).await?;
        let Some(plan) = plan else { return Ok(0) };
        self.place_plan(st, snap, report, &plan, (&caps, &data)).await
    }

    /// What the problem's making found: how many listings each feasibility filter rejected (a
    /// gauge per filter) and the jobs that fail before they are placed.
    async fn record_input(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
        input: &placement::PlanInput,
    ) -> Result<(), ControlError> {
        for filter in crate::model::OfferFilter::ALL {
            let n = input.offer_counts.rejected.get(&filter).copied().unwrap_or(0);
            self.metrics
                .offers_rejected
                .get_or_create(&FilterLabel { filter: filter.as_str().to_string() })
                .set(n.into());
        }
        let failed: Vec<Action> = input
            .dependency_failures
            .iter()
            .map(|(job_id, why)| {
                let edit = JobEdit::DependencyFailed { reason: why.clone() };
                Action::Record(Change { job: Some((job_id.clone(), edit)), ..Change::default() })
            })
            .collect();
        self.act(st, snap, report, failed).await?;
        Ok(())
    }

    /// The round's plan (`None` when no job is in the problem), solved or reused, with the pools
    /// that block work kept up to date for the quota watch.
    fn solve_round(
        &self,
        st: &mut LoopState,
        now: i64,
        problem: solver::Problem,
        report: &mut RoundReport,
    ) -> Option<solver::Plan> {
        if problem.jobs.is_empty() {
            st.quota_blocking.clear();
            return None;
        }
        let (plan, solved_in) = placement::solve(st, problem, self.config.solve_time_limit_ms);
        if let Some(secs) = solved_in {
            report.solve_ms += secs * 1000.0;
            self.metrics.solve_seconds.observe(secs);
            // A plan reused for the same problem keeps the same pools blocking.
            if self.config.quota_exhausted_after_ms.is_some()
                && let Some((problem, plan)) = &st.last_solve
            {
                let chain = Feasibility { world: &st.world, breakers: &st.breakers, catalog: &self.catalog, now };
                let blocking = quota_watch::blocking(problem, plan, &chain.quota_blocked_offers());
                st.quota_blocking = blocking;
            }
        }
        Some(plan)
    }

    /// Why each waiting job waits, decided for all of them first (from the same view of the
    /// world), then written together: one change per job whose reasons changed. `reasons` holds
    /// why jobs were held out of the problem and why the plan left them unplaced.
    async fn record_waiting(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
        jobs: &[Job],
        mut reasons: BTreeMap<String, Vec<String>>,
        plan: Option<&solver::Plan>,
    ) -> Result<(), ControlError> {
        let now = snap.now;
        let chain = Feasibility { world: &st.world, breakers: &st.breakers, catalog: &self.catalog, now };
        // Built on first use: most rounds change no job's reasons, and the counter indexes every
        // listed offer.
        let ours = std::cell::OnceCell::new();
        let counter = std::cell::OnceCell::new();
        let mut waiting = Vec::new();
        for job in jobs.iter().filter(|j| placement::is_waiting(j)) {
            let why = reasons.remove(&job.id).unwrap_or_default();
            let Some(why) = placement::wait_reasons(st, &self.catalog, now, job, why, plan) else { continue };
            if !why.is_empty() && placement::is_pending(job) {
                report.pending += 1;
            }
            if why.is_empty() || why == job.pending_reasons {
                continue;
            }
            let counts =
                counter.get_or_init(|| chain.job_counter(ours.get_or_init(|| our_usage(snap.active())))).counts(job);
            if let Some(change) = placement::waiting_change(job, why, counts) {
                waiting.push(Action::Record(change));
            }
        }
        self.act(st, snap, report, waiting).await?;
        Ok(())
    }

    /// Acts on the plan: each placement (a mixed fleet's spot and regular parts together) grows
    /// the job's fleet on that offer or asks for a new one. `caps` is each demand's price cap,
    /// `data` where each job's input lies. Returns how many placements the cloud refused at once.
    async fn place_plan(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
        plan: &solver::Plan,
        (caps, data): (&PriceCaps, &InputData),
    ) -> Result<usize, ControlError> {
        let now = snap.now;
        let mut refused = 0;
        let mixes = |id: &str| snap.jobs.get(id).is_some_and(|j| demand::regular_base(j).is_some());
        let fleets = mixed::pairs(&plan.placements, mixes);
        for fleet in fleets {
            let (p, regular) = match fleet {
                mixed::Fleets::One(p) => (p, None),
                mixed::Fleets::Mixed { spot, regular } => (spot, Some(regular)),
            };
            let (job_id, _) = DemandPart::parse(&p.job);
            let Some(job) = snap.jobs.get(job_id).cloned() else { continue };
            let wanted = |x: &&solver::Placement| placement::wanted(st, &job, x);
            let (p, regular) = match (Some(p).filter(wanted), regular.filter(wanted)) {
                (Some(p), regular) => (p, regular),
                (None, Some(regular)) => (regular, None),
                (None, None) => continue,
            };
            let cap_of = |p: &solver::Placement| caps.get(p.job.as_str()).copied().flatten();
            let price = placement::price_and_cap(st, &self.catalog, p, cap_of(p));
            let regular = regular.map(|r| (r, placement::price_and_cap(st, &self.catalog, r, cap_of(r)).0));
            // Where the job already runs a fleet of that offer, the fleet grows instead (a mixed
            // fleet is asked for whole).
            let grows = if regular.is_none() { growth::fleet_to_grow(snap, st, &job, p, price.0) } else { None };
            let action = match grows {
                Some(a) => Action::Grow(growth::grow(a, p)),
                None => {
                    // The job's attempts that ended are not in the snapshot (it holds the active
                    // ones); the store has them all, and with them where its input was moved.
                    let earlier: Vec<Attempt> = match data.get(job_id) {
                        Some((from, Some(_))) if *from != p.region => self.store.find(AttemptsBy::Job(job_id))?,
                        _ => Vec::new(),
                    };
                    let data = data.get(job_id);
                    match placement::intent(st, &self.catalog, now, &job, p, price, regular, data, &earlier) {
                        Some((_, change)) => Action::Place(change),
                        None => continue,
                    }
                }
            };
            let no = self.act(st, snap, report, vec![action]).await?;
            refused += self.fail_refused(st, snap, report, no).await?;
        }
        Ok(refused)
    }
}
