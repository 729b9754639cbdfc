//! Decisions that place work: the solver's input from the snapshot (open jobs' unmet demands, the
//! offers the feasibility chain lets through, free quota), the plan (the last one reused when the
//! problem has not changed), why jobs wait, and each placement as an attempt's intent. Pure, bar the
//! solver's wall-clock time limit.

use std::collections::BTreeMap;

use super::actions::{Change, JobEdit};
use super::deadline_choice::apply_deadline_choice;
use super::demand::{DemandPart, Held, demands};
use super::dependencies::{self, Gate};
use super::feasibility::Feasibility;
use super::pipeline_budget;
use super::snapshot::Snapshot;
use super::world::our_usage;
use super::{ControlConfig, LoopState, is_degraded};
use crate::accounting;
use crate::catalog::Catalog;
use crate::model::{Attempt, AttemptPart, AttemptState, Job, JobState, OfferFilterCounts, Priority, fleet_name};

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
    /// Jobs that fail before they are placed, with why: a dependency failed or was cancelled, or
    /// their pipeline spent its budget.
    pub dependency_failures: Vec<(String, String)>,
    /// Where each job's input data lies and its GB, by job id, for the jobs whose demands have it.
    pub data: BTreeMap<String, (String, Option<f64>)>,
}

/// The solver's input from the snapshot.
pub(crate) fn plan_input(snap: &Snapshot, st: &LoopState, config: &ControlConfig, catalog: &Catalog) -> PlanInput {
    let now = snap.now;
    let jobs = snap.open_jobs();
    let attempts: Vec<&Attempt> = snap.active().collect();
    let held = held_by_job(snap, st, config);
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
    let mut dependency_failures = Vec::new();
    let mut data = BTreeMap::new();
    let mut gates = dependencies::gates(snap, &jobs.iter().collect::<Vec<_>>());
    for job in &jobs {
        // A pipeline that has spent its budget ends its waiting jobs (its running ones end where
        // they are watched), whatever their dependencies say.
        if job.state == JobState::Pending
            && let Some(why) = pipeline_budget::exhausted(snap, job, job.cost_usd)
        {
            dependency_failures.push((job.id.clone(), why));
            continue;
        }
        let input = match gates.remove(&job.id).unwrap_or(Gate::Ready { data: None }) {
            Gate::Ready { data } => data,
            Gate::Wait(why) => {
                reasons.entry(job.id.clone()).or_default().push(why);
                continue;
            }
            Gate::Fail(why) => {
                dependency_failures.push((job.id.clone(), why));
                continue;
            }
        };
        let mut d = demands(job, catalog, held.get(job.id.as_str()).copied().unwrap_or_default());
        if d.is_empty() {
            continue;
        }
        dependencies::apply_input_data(job, &input, &mut d);
        if let Some(left) = pipeline_budget::left_for(snap, job, &held, catalog, &st.world.offers)
            && let Some(budget) = job.pipeline.as_ref().and_then(|l| l.budget_usd)
        {
            pipeline_budget::cap(&mut d, left, budget);
        }
        if let Some(first) = d.first()
            && let Some(region) = &first.data_region
        {
            data.insert(job.id.clone(), (region.clone(), first.data_gb));
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
    let problem = solver::Problem { offers, quotas, jobs: problem_jobs, egress: catalog.egress_table() };
    PlanInput { jobs, problem, reasons, offer_counts, dependency_failures, data }
}

/// What each job's active attempts hold ([`holds`]), by job id.
pub(crate) fn held_by_job<'s>(snap: &'s Snapshot, st: &LoopState, config: &ControlConfig) -> BTreeMap<&'s str, Held> {
    let mut held: BTreeMap<&str, Held> = BTreeMap::new();
    for a in snap.active() {
        let Some(job) = snap.jobs.get(&a.job_id) else { continue };
        let h = held.entry(a.job_id.as_str()).or_default();
        let replaced = st.deadline.retiring(a) || snap.has_agent_trouble(a);
        let (gpus, vms) = holds(job, a, snap.now, config.below_min_grace_ms, replaced);
        h.gpus += gpus;
        h.regular_gpus += holds_regular(job, a, snap.now, config.below_min_grace_ms, replaced);
        h.usd_per_hour += billed_per_hour(a, vms);
    }
    held
}

/// The most a new placement of `job` may cost over its remaining work, USD: what its own budget
/// and its pipeline's leave it (the caps its solver demands get, [`demands`] and
/// [`pipeline_budget::left_for`]); `None` when neither has a budget.
pub(crate) fn affordable_usd(
    snap: &Snapshot,
    st: &LoopState,
    job: &Job,
    held: &BTreeMap<&str, Held>,
    catalog: &Catalog,
) -> Option<f64> {
    let budget = super::demand::remaining_budget(job, held.get(job.id.as_str()).copied().unwrap_or_default());
    let pipeline = pipeline_budget::left_for(snap, job, held, catalog, &st.world.offers);
    match (budget, pipeline) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What an active attempt holds for its job: the GPUs that count against the job's demand, and the
/// VMs that may bill. A healthy placement holds all it was asked for (a fleet refills what it
/// loses). A gang placement below its minimum past the grace period, one whose agents reported
/// trouble and one a deadline policy moves the job away from (`retiring`) are replaced as a whole
/// once the replacement runs: they hold no GPUs and only the VMs they still run. A splittable job's placement below its minimum keeps doing its
/// share with the VMs it runs and is topped up elsewhere for the rest; it may refill, so it holds
/// every VM it was asked for.
pub(crate) fn holds(job: &Job, a: &Attempt, now: i64, grace_ms: i64, retiring: bool) -> (u32, u32) {
    let degraded = is_degraded(a, now, grace_ms);
    if retiring || (degraded && job.spec.is_gang()) {
        (0, a.running_vms.min(a.vms))
    } else if degraded {
        (a.running_vms.min(a.vms) * (a.gpus / a.vms.max(1)), a.vms)
    } else {
        // A growth in flight counts: the cloud holds its VMs' quota and may bill them soon.
        let t = a.target();
        (t.gpus, t.vms)
    }
}

/// Of what [`holds`] counts for the job, the GPUs on regular VMs (a regular fleet's, a mixed
/// fleet's regular part's): what the job holds of its regular base. By the same rule: nothing of a
/// placement being replaced, only what runs of one below its minimum.
pub(crate) fn holds_regular(job: &Job, a: &Attempt, now: i64, grace_ms: i64, retiring: bool) -> u32 {
    let degraded = is_degraded(a, now, grace_ms);
    if retiring || (degraded && job.spec.is_gang()) {
        0
    } else if degraded {
        let regular = a.parts().filter(|p| p.priority == Priority::Regular);
        regular.map(|p| p.running_vms.min(p.vms)).sum::<u32>() * (a.gpus / a.vms.max(1))
    } else {
        a.regular_gpus()
    }
}

/// The most `vms` of the attempt's VMs ([`holds`]: all it was asked for, or those running) may
/// bill per hour: a mixed fleet's regular VMs at their price, its spot VMs as [`billed_at_most`].
pub(crate) fn billed_per_hour(a: &Attempt, vms: u32) -> f64 {
    match a.regular {
        None => f64::from(vms) * billed_at_most(a),
        Some(r) => {
            let regular = vms.min(if vms >= a.target().vms { r.vms } else { r.running_vms });
            f64::from(regular) * r.price_per_hour + f64::from(vms - regular) * billed_at_most(a)
        }
    }
}

/// The most a VM of the attempt (a mixed fleet's spot VM) may bill per hour: its price, or a spot VM's max price when it has
/// one (the cloud evicts it before it costs more).
pub(crate) fn billed_at_most(a: &Attempt) -> f64 {
    match (a.priority, a.max_price_per_vm) {
        (Priority::Spot, Some(max)) if max >= 0.0 => max.max(a.price_per_hour),
        _ => a.price_per_hour,
    }
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
    let options = solver::SolveOptions { method: solver::Method::Round, time_limit_ms };
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
    // Worked out only when a block is active in one of those regions: most rounds have none, and
    // matching the catalog's sizes for every waiting job every round showed in the whole Philly
    // trace's profile (`gpu_model_matches` about 1 % of the run, with the solver's demands).
    let sizes = std::cell::OnceCell::new();
    let mut blocks = Vec::new();
    for b in st.world.blocked.iter().filter(|b| b.is_active(now) && regions.contains(&b.region)) {
        let covers = |s: &&crate::model::VmSize| {
            [Priority::Regular, Priority::Spot].iter().any(|&p| b.covers(&b.region, &s.name, &s.family, p))
        };
        if sizes.get_or_init(|| job.spec.acceptable_sizes(catalog)).iter().any(covers) {
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
/// `earlier` are the job's attempts so far (stored, so a restart sees them): what those that ran
/// in the placement's region moved there is not billed again. With `regular` (a regular
/// placement of the job on the same region and size as the spot placement `p`, and its price per
/// VM-hour) the attempt is one mixed fleet of both ([`super::mixed::pairs`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn intent<'a>(
    st: &LoopState,
    catalog: &Catalog,
    now: i64,
    job: &Job,
    p: &solver::Placement,
    (price, cap): (f64, Option<f64>),
    regular: Option<(&solver::Placement, f64)>,
    data: Option<&(String, Option<f64>)>,
    earlier: impl IntoIterator<Item = &'a Attempt>,
) -> Option<(Attempt, Change)> {
    let size = catalog.size(&p.size)?;
    let priority = p.priority;
    // A mixed fleet's alternatives serve both parts: none either part's offer is blocked in.
    let priorities: &[Priority] = if regular.is_some() { &[Priority::Spot, Priority::Regular] } else { &[priority] };
    let alternatives: Vec<String> = catalog
        .ranked_sizes(&size.name, &p.region, priority, usize::MAX)
        .into_iter()
        .skip(1) // the chosen size itself
        .filter(|name| !st.world.restricted(&p.region, name))
        .filter(|name| {
            catalog.size(name).is_some_and(|s| {
                priorities.iter().all(|&pr| st.world.block_for(&p.region, name, &s.family, pr, now).is_none())
            })
        })
        .take(MAX_ALTERNATIVES)
        .collect();
    let part = regular.map(|(r, price)| AttemptPart {
        vms: r.vms,
        min_vms: r.vms,
        gpus: r.gpus,
        price_per_hour: price,
        running_vms: 0,
    });
    let (vms, gpus) = match part {
        Some(r) => (p.vms + r.vms, p.gpus + r.gpus),
        None => (p.vms, p.gpus),
    };
    let number = job.attempts + 1;
    let attempt = Attempt {
        job_id: job.id.clone(),
        number,
        fleet_name: fleet_name(&job.id, number),
        region: p.region.clone(),
        size: size.name.clone(),
        alternatives,
        priority,
        vms,
        min_vms: None,
        growing_to: None,
        gpus,
        vcpus: vms as u64 * size.vcpus as u64,
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
        egress_usd: 0.0,
        egress_gb: 0.0,
        accounted_until_ms: None,
        failure: None,
        failure_class: None,
        regular: part,
    };
    let mut message = match part {
        None => format!(
            "attempt {number}: {} × {} {} in {} at ${:.3}/VM-hour, fleet {}",
            p.vms, size.name, priority, p.region, price, attempt.fleet_name
        ),
        Some(r) => format!(
            "attempt {number}: {} × {} in {}, {} regular at ${:.3}/VM-hour and {} spot at ${:.3}/VM-hour in one mixed fleet {}",
            vms, size.name, p.region, r.vms, r.price_per_hour, p.vms, price, attempt.fleet_name
        ),
    };
    let already_gb = accounting::already_moved_gb(earlier, &p.region, number);
    let (note, egress_gb, egress_usd) =
        data_note(catalog, data, &p.region, (job.spec.is_gang(), gpus, job.wanted_gpus()), already_gb);
    message.push_str(&note);
    let attempt = Attempt { egress_gb, egress_usd, ..attempt };
    let edit = JobEdit::Placed {
        number,
        expected: job.attempts,
        message,
        region: p.region.clone(),
        moving_to: format!("{} in {}", size.name, p.region),
    };
    let change =
        Change { job: Some((job.id.clone(), edit)), attempts_with_job: vec![attempt.clone()], ..Change::default() };
    Some((attempt, change))
}

/// Where the placement's data comes from, and the GB it moves and the egress it bills: `, data in
/// eastus` when it runs there, `, 120 GB of data moved from eastus: egress $2.40` when it does not
/// (at the catalog's transfer price, the solver's; its share of the data for a part of a split job),
/// `, data already moved to westus3` when the job's earlier attempts there (`already_gb`) moved it.
fn data_note(
    catalog: &Catalog,
    data: Option<&(String, Option<f64>)>,
    region: &str,
    (gang, gpus, wanted): (bool, u32, u32),
    already_gb: f64,
) -> (String, f64, f64) {
    match data {
        None => (String::new(), 0.0, 0.0),
        Some((from, _)) if from == region => (format!(", data in {from}"), 0.0, 0.0),
        Some((from, None)) => (format!(", data in {from} (size not declared)"), 0.0, 0.0),
        Some((from, Some(gb))) => {
            let gb = accounting::to_move_gb(*gb, gang, gpus, wanted, already_gb);
            if gb <= 0.0 && already_gb > 0.0 {
                return (format!(", data from {from} already moved to {region}"), 0.0, 0.0);
            }
            let usd = accounting::egress_usd(gb, catalog.egress_usd_per_gb(from, region));
            (format!(", {gb:.0} GB of data moved from {from}: egress ${usd:.2}"), gb, usd)
        }
    }
}

/// Whether a placement is made: its job is still open, and a deadline job's placement carries out
/// its policy's choice (the solver's filters already keep it there; one outside would undo the
/// policy).
pub(crate) fn wanted(st: &LoopState, job: &Job, p: &solver::Placement) -> bool {
    !job.state.is_final() && st.deadline.choices.get(&job.id).is_none_or(|c| c.allows(&p.region, p.priority))
}

/// The price per VM-hour a placement is billed at (the cloud's, or the plan's when the cloud no
/// longer lists it), and, for a job with a price cap, the spot max price per VM: the price the
/// solver planned with (at least the cloud's now), since the cap holds for the job's total at
/// every moment and the plan used all the room it needed at that price. A spot price that rises
/// past it evicts the VMs (the loop places them again within the cap); the job's held price
/// counts its spot VMs at this max price ([`billed_at_most`]).
pub(crate) fn price_and_cap(
    st: &LoopState,
    catalog: &Catalog,
    p: &solver::Placement,
    part_cap: Option<f64>,
) -> (f64, Option<f64>) {
    let vms = p.vms.max(1) as f64;
    let planned = p.price_per_hour / vms;
    let price = st.world.list_price(catalog, &p.region, &p.size, p.priority).unwrap_or(planned);
    (price, part_cap.map(|_| planned.max(price)))
}

/// Whether the job still waits for its whole demand (pending, for the report).
pub(crate) fn is_pending(job: &Job) -> bool {
    job.state == JobState::Pending
}

/// Whether the job waits for a placement and says why: pending, or migrating (its placement
/// degraded or lost, its replacement not placed yet).
pub(crate) fn is_waiting(job: &Job) -> bool {
    matches!(job.state, JobState::Pending | JobState::Migrating)
}

/// A time as RFC 3339, for messages.
pub(crate) fn fmt_time_of(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339).unwrap_or_else(|_| t.to_string())
}

fn fmt_time(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| ms.to_string())
}
