//! Decisions that place work: the solver's input from the snapshot (open jobs' unmet demands, the
//! offers the feasibility chain lets through, free quota), the plan (the last one reused when the
//! problem has not changed), why jobs wait, and each placement as an attempt's intent. Pure, bar the
//! solver's wall-clock time limit.

use std::collections::BTreeMap;

use super::actions::{Change, JobEdit};
use super::deadline::apply_deadline_choice;
use super::demand::{DemandPart, demands};
use super::feasibility::Feasibility;
use super::snapshot::Snapshot;
use super::world::our_usage;
use super::{ControlConfig, LoopState};
use crate::catalog::Catalog;
use crate::model::{Attempt, AttemptState, Job, JobState, OfferFilterCounts, Priority, fleet_name};

/// Alternative sizes offered to a fleet after the chosen one.
const MAX_ALTERNATIVES: usize = 3;
/// Blocks listed among a waiting job's reasons, at most.
const MAX_BLOCK_REASONS: usize = 5;

/// Everything a plan is made from.
pub(crate) struct PlanInput {
    /// Open jobs, in planning order.
    pub jobs: Vec<Job>,
    /// The solver's problem.
    pub problem: solver::Problem,
    /// Why jobs were held out of the problem (deadline policy waiting, tenant over budget).
    pub reasons: BTreeMap<String, Vec<String>>,
    /// How the cloud's listings fared against the feasibility chain.
    pub offer_counts: OfferFilterCounts,
}

/// The solver's input from the snapshot.
pub(crate) fn plan_input(snap: &Snapshot, st: &LoopState, config: &ControlConfig, catalog: &Catalog) -> PlanInput {
    let now = snap.now;
    let jobs = snap.open_jobs();
    let attempts: Vec<&Attempt> = snap.active().collect();
    let mut healthy: BTreeMap<&str, u32> = BTreeMap::new();
    for a in &attempts {
        if !snap.to_replace(a, config.below_min_grace_ms) && !st.deadline.retiring(a) {
            *healthy.entry(a.job_id.as_str()).or_default() += a.gpus;
        }
    }
    let mut over_budget: BTreeMap<&str, String> = BTreeMap::new();
    for t in snap.tenants.values() {
        if let Some(b) = t.budget_usd
            && t.spent_usd >= b
        {
            over_budget.insert(
                &t.name,
                format!("tenant {} is over its budget (${:.2} of ${b:.2} spent)", t.name, t.spent_usd),
            );
        }
    }
    let mut problem_jobs = Vec::new();
    let mut reasons: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for job in &jobs {
        let mut d = demands(job, catalog, healthy.get(job.id.as_str()).copied().unwrap_or(0));
        if d.is_empty() {
            continue;
        }
        if let Some(choice) = st.deadline.choices.get(&job.id) {
            if choice.hold.is_none() {
                reasons.entry(job.id.clone()).or_default().push(choice.waiting_reason());
                continue;
            }
            apply_deadline_choice(&mut d, choice);
        }
        if let Some(why) = over_budget.get(job.spec.tenant.as_str()) {
            reasons.entry(job.id.clone()).or_default().push(why.clone());
            continue;
        }
        problem_jobs.extend(d);
    }
    let chain = Feasibility { world: &st.world, breakers: &st.breakers, catalog, now };
    let (offers, offer_counts) = chain.solver_offers(&attempts);
    let ours = our_usage(attempts.iter().copied());
    let quotas = st
        .world
        .pools(&ours)
        .into_iter()
        .map(|p| solver::QuotaLimit { region: p.region, pool: p.pool, vcpus: p.free })
        .collect();
    let problem = solver::Problem { offers, quotas, jobs: problem_jobs, egress: Vec::new() };
    PlanInput { jobs, problem, reasons, offer_counts }
}

/// The plan for a problem: the last one when the problem is the same (no new job, no capacity,
/// quota or block change; the plan depends only on the problem, bar the solver's wall-clock limit,
/// rarely reached and off in virtual time), else a fresh solve. Returns the plan and the seconds spent solving, if it solved.
pub(crate) fn solve(
    st: &mut LoopState,
    problem: solver::Problem,
    time_limit_ms: Option<u64>,
) -> (solver::Plan, Option<f64>) {
    if let Some((last, plan)) = &st.last_solve
        && *last == problem
    {
        return (plan.clone(), None);
    }
    let started = std::time::Instant::now();
    let options = solver::SolveOptions { method: solver::Method::Best, time_limit_ms };
    let plan = solver::solve(&problem, &options);
    let secs = started.elapsed().as_secs_f64();
    st.last_solve = Some((problem, plan.clone()));
    (plan, Some(secs))
}

/// Why a pending job waits: the solver's binding constraints and the reasons it was held out,
/// plus the blocks that hid offers from it. `None` when the plan placed it and nothing binds.
pub(crate) fn wait_reasons(
    st: &LoopState,
    catalog: &Catalog,
    now: i64,
    job: &Job,
    mut why: Vec<String>,
    plan: Option<&solver::Plan>,
) -> Option<Vec<String>> {
    if why.is_empty() && !plan.is_some_and(|p| p.placements.iter().any(|x| DemandPart::parse(&x.job).0 == job.id)) {
        return None;
    }
    let regions = job.spec.allowed_regions(catalog);
    let sizes = job.spec.acceptable_sizes(catalog);
    let mut blocks = Vec::new();
    for b in st.world.blocked.iter().filter(|b| b.is_active(now) && regions.contains(&b.region)) {
        let covers = |s: &&crate::model::VmSize| {
            [Priority::Regular, Priority::Spot].iter().any(|&p| b.covers(&b.region, &s.name, &s.family, p))
        };
        if sizes.iter().any(covers) {
            blocks.push(format!("blocked until {}: {}", fmt_time(b.until_ms), b.reason));
        }
    }
    blocks.truncate(MAX_BLOCK_REASONS);
    why.extend(blocks);
    why.dedup();
    Some(why)
}

/// The change that records why a job waits, when the reasons changed; with how the job's candidate
/// offers fare against the feasibility chain at this moment.
pub(crate) fn waiting_change(job: &Job, why: Vec<String>, offers: OfferFilterCounts) -> Option<Change> {
    if why.is_empty() || why == job.pending_reasons {
        return None;
    }
    let message = why.join("; ");
    Some(Change {
        job: Some((job.id.clone(), JobEdit::Waiting { reasons: why, offers, message })),
        ..Change::default()
    })
}

/// One placement of the plan as an attempt's intent: the attempt (its number the job's next, its
/// fleet name deterministic, the fleet's alternative sizes ranked) and the job's `Placed` edit.
/// `price` is the cloud's price per VM-hour; `cap` the spot cap per VM the solver planned within.
pub(crate) fn intent(
    st: &LoopState,
    catalog: &Catalog,
    now: i64,
    job: &Job,
    p: &solver::Placement,
    (price, cap): (f64, Option<f64>),
) -> Option<(Attempt, Change)> {
    let size = catalog.size(&p.size)?;
    let priority = p.priority;
    let alternatives: Vec<String> = catalog
        .ranked_sizes(&size.name, &p.region, priority, usize::MAX)
        .into_iter()
        .skip(1) // the chosen size itself
        .filter(|name| !st.world.restricted(&p.region, name))
        .filter(|name| {
            catalog.size(name).is_some_and(|s| st.world.block_for(&p.region, name, &s.family, priority, now).is_none())
        })
        .take(MAX_ALTERNATIVES)
        .collect();
    let number = job.attempts + 1;
    let attempt = Attempt {
        job_id: job.id.clone(),
        number,
        fleet_name: fleet_name(&job.id, number),
        region: p.region.clone(),
        size: size.name.clone(),
        alternatives,
        priority,
        vms: p.vms,
        gpus: p.gpus,
        vcpus: p.vms as u64 * size.vcpus as u64,
        family: size.family.clone(),
        price_per_hour: price,
        max_price_per_vm: if priority == Priority::Spot { cap.map(|c| c.max(price)) } else { None },
        state: AttemptState::Provisioning,
        started_at_ms: now,
        running_since_ms: None,
        ended_at_ms: None,
        operation: None,
        running_vms: 0,
        below_min_since_ms: None,
        cost_usd: 0.0,
        accounted_until_ms: None,
        failure: None,
        failure_class: None,
    };
    let message = format!(
        "attempt {number}: {} × {} {} in {} at ${:.3}/VM-hour, fleet {}",
        p.vms, size.name, priority, p.region, price, attempt.fleet_name
    );
    let edit = JobEdit::Placed {
        number,
        expected: job.attempts,
        message,
        moving_to: format!("{} in {}", size.name, p.region),
    };
    let change =
        Change { job: Some((job.id.clone(), edit)), attempts_with_job: vec![attempt.clone()], ..Change::default() };
    Some((attempt, change))
}

/// Whether a placement is made: its job is still open, and a deadline job's placement carries out
/// its policy's choice (the solver's filters already keep it there; one outside would undo the
/// policy).
pub(crate) fn wanted(st: &LoopState, job: &Job, p: &solver::Placement) -> bool {
    !job.state.is_final() && st.deadline.choices.get(&job.id).is_none_or(|c| c.allows(&p.region, p.priority))
}

/// The price per VM-hour a placement is billed at (the cloud's, or the plan's when the cloud no
/// longer lists it), and the spot cap per VM: the solver kept `vms × price` within the part's cap,
/// so spreading the cap over the VMs gives a per-VM cap at or above the price it planned with.
pub(crate) fn price_and_cap(
    st: &LoopState,
    catalog: &Catalog,
    p: &solver::Placement,
    part_cap: Option<f64>,
) -> (f64, Option<f64>) {
    let vms = p.vms.max(1) as f64;
    let price = st.world.list_price(catalog, &p.region, &p.size, p.priority).unwrap_or(p.price_per_hour / vms);
    (price, part_cap.map(|c| c / vms))
}

/// Whether the job still waits for its whole demand (pending, for the report).
pub(crate) fn is_pending(job: &Job) -> bool {
    job.state == JobState::Pending
}

fn fmt_time(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| ms.to_string())
}
