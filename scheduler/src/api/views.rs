//! What the API answers: response types of their own, separate from the stored records.
//!
//! A stored record carries what the scheduler needs to resume after a crash (an Azure operation's
//! status URL, accounting cursors, quota families); a response carries what a client needs, with a
//! schema in `/openapi.json`. Keeping the two apart means a new internal field never leaks to
//! tenants by accident, and the documented shape only changes on purpose.
//!
//! What a tenant-bound token sees (README, "What a tenant sees"): its own jobs, attempts, events,
//! plan entries and spend; of the shared cluster, the capacity it may use (quota limits and what
//! is free, blocked offers, unhealthy regions) but not what other tenants use, how many jobs there
//! are, nor the log's global sequence numbers (see [`super::cursor`]).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::cloud::FailureClass;
use crate::control::BreakerState;
use crate::jobs::JobEvent;
use crate::model::{Attempt, AttemptState, BlockedOffer, Job, JobSpec, JobState, Priority};

/// A job: its spec and where it is in its life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobView {
    /// Unique id assigned at submission.
    pub id: String,
    /// What was submitted, with the kind's defaults left implicit.
    pub spec: JobSpec,
    /// Where the job is in its life.
    pub state: JobState,
    /// GPUs the job wants in all: `spec.gpus`, times `replicas.desired` for an inference service.
    pub wanted_gpus: u32,
    /// Submission time, Unix milliseconds on the server's clock (see `clock`).
    pub submitted_at_ms: i64,
    /// Last state change, Unix milliseconds.
    pub updated_at_ms: i64,
    /// When it first ran, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_running_at_ms: Option<i64>,
    /// When it ended, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<i64>,
    /// Placements tried so far (each is one fleet; `failovers` counts the moves among them).
    pub attempts: u32,
    /// USD accrued over all attempts (settled at least once a minute while running).
    pub cost_usd: f64,
    /// Hours of work done at full size, counting only work kept by checkpoints.
    pub progress_hours: f64,
    /// GPU-hours of work lost to evictions and failures since the last checkpoint.
    pub lost_work_gpu_hours: f64,
    /// Moves to a new placement after a failure or an eviction.
    pub failovers: u32,
    /// Spot evictions suffered.
    pub evictions: u32,
    /// While pending: why it is not placed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_reasons: Vec<String>,
    /// The last provisioning failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
    /// Why it ended, when it ended other than by completing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_reason: Option<String>,
}

impl From<&Job> for JobView {
    fn from(j: &Job) -> Self {
        JobView {
            id: j.id.clone(),
            spec: (*j.spec).clone(),
            state: j.state,
            wanted_gpus: j.wanted_gpus(),
            submitted_at_ms: j.submitted_at_ms,
            updated_at_ms: j.updated_at_ms,
            first_running_at_ms: j.first_running_at_ms,
            finished_at_ms: j.finished_at_ms,
            attempts: j.attempts,
            cost_usd: money(j.cost_usd),
            progress_hours: j.progress_hours,
            lost_work_gpu_hours: j.lost_work_gpu_hours,
            failovers: j.failovers,
            evictions: j.evictions,
            pending_reasons: j.pending_reasons.clone(),
            last_failure: j.last_failure.clone(),
            end_reason: j.end_reason.clone(),
        }
    }
}

/// Spot or regular.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PriorityView {
    /// Pay-as-you-go VMs, never evicted.
    Regular,
    /// Spare capacity at a discount, evicted when Azure needs it back.
    Spot,
}

impl PriorityView {
    /// The view of the solver's priority.
    pub fn of_solver(p: solver::Priority) -> PriorityView {
        match p {
            solver::Priority::Regular => PriorityView::Regular,
            solver::Priority::Spot => PriorityView::Spot,
        }
    }
}

impl From<Priority> for PriorityView {
    fn from(p: Priority) -> Self {
        match p {
            Priority::Regular => PriorityView::Regular,
            Priority::Spot => PriorityView::Spot,
        }
    }
}

/// Why a provisioning failed, in classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailureClassView {
    /// Quota exhausted.
    Quota,
    /// No capacity in the region for that size.
    Capacity,
    /// The size is not sold there (or not to this subscription).
    SizeUnavailable,
    /// The spot price rose above the cap.
    PriceAboveCap,
    /// The cloud throttled us.
    Throttled,
    /// A transient cloud error.
    Transient,
    /// An error that retrying will not fix.
    Permanent,
    /// The resource was gone.
    NotFound,
}

impl From<FailureClass> for FailureClassView {
    fn from(c: FailureClass) -> Self {
        match c {
            FailureClass::Quota => FailureClassView::Quota,
            FailureClass::Capacity => FailureClassView::Capacity,
            FailureClass::SizeUnavailable => FailureClassView::SizeUnavailable,
            FailureClass::PriceAboveCap => FailureClassView::PriceAboveCap,
            FailureClass::Throttled => FailureClassView::Throttled,
            FailureClass::Transient => FailureClassView::Transient,
            FailureClass::Permanent => FailureClassView::Permanent,
            FailureClass::NotFound => FailureClassView::NotFound,
        }
    }
}

/// One placement of a job on one fleet (an attempt).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AttemptView {
    /// The job it belongs to.
    pub job_id: String,
    /// 1, 2, …
    pub number: u32,
    /// The fleet's name in the cloud (`spw-<job>-a<number>`).
    pub fleet_name: String,
    /// Region.
    pub region: String,
    /// VM size (the first ranked; the cloud may use one of `alternatives`).
    pub size: String,
    /// Sizes of the same shape the cloud may use instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alternatives: Vec<String>,
    /// Spot or regular (spot for a mixed fleet, whose regular part is `regular`).
    pub priority: PriorityView,
    /// VMs asked for (both parts of a mixed fleet).
    pub vms: u32,
    /// VMs running at the last look (both parts of a mixed fleet).
    pub running_vms: u32,
    /// GPUs this attempt carries (both parts of a mixed fleet).
    pub gpus: u32,
    /// List price per VM-hour when placed, USD (a mixed fleet's spot VMs').
    pub price_per_hour: f64,
    /// A mixed fleet's regular part (Compute Fleet's regular profile beside the spot one); absent
    /// for a fleet of one priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regular: Option<AttemptPartView>,
    /// Spot only: the most paid per VM-hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_price_per_vm: Option<f64>,
    /// Where the attempt is.
    pub state: AttemptState,
    /// When it was placed, Unix milliseconds.
    pub started_at_ms: i64,
    /// When its fleet reached its minimum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_since_ms: Option<i64>,
    /// Since when it has been below its minimum, if it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below_min_since_ms: Option<i64>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at_ms: Option<i64>,
    /// USD accrued by this attempt, its egress included.
    pub cost_usd: f64,
    /// USD of moving its job's input data to its region, billed (in `cost_usd`) once it ran; 0
    /// when it runs where the data lies.
    #[serde(default)]
    pub egress_usd: f64,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The failure's class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_class: Option<FailureClassView>,
}

/// The regular part of a mixed fleet; its VMs and GPUs are counted in the attempt's too.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AttemptPartView {
    /// Regular VMs asked for.
    pub vms: u32,
    /// Regular VMs running at the last look.
    pub running_vms: u32,
    /// GPUs on the regular VMs.
    pub gpus: u32,
    /// List price per regular VM-hour when placed, USD.
    pub price_per_hour: f64,
}

impl From<crate::model::AttemptPart> for AttemptPartView {
    fn from(r: crate::model::AttemptPart) -> Self {
        AttemptPartView { vms: r.vms, running_vms: r.running_vms, gpus: r.gpus, price_per_hour: r.price_per_hour }
    }
}

impl From<&Attempt> for AttemptView {
    fn from(a: &Attempt) -> Self {
        AttemptView {
            job_id: a.job_id.clone(),
            number: a.number,
            fleet_name: a.fleet_name.clone(),
            region: a.region.clone(),
            size: a.size.clone(),
            alternatives: a.alternatives.clone(),
            priority: a.priority.into(),
            vms: a.vms,
            running_vms: a.running_vms,
            gpus: a.gpus,
            price_per_hour: a.price_per_hour,
            regular: a.regular.map(Into::into),
            max_price_per_vm: a.max_price_per_vm,
            state: a.state,
            started_at_ms: a.started_at_ms,
            running_since_ms: a.running_since_ms,
            below_min_since_ms: a.below_min_since_ms,
            ended_at_ms: a.ended_at_ms,
            cost_usd: money(a.cost_usd),
            egress_usd: money(a.egress_usd),
            failure: a.failure.clone(),
            failure_class: a.failure_class.map(Into::into),
        }
    }
}

/// An event about one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobEventView {
    /// Position in the event log: the global sequence number for admins and unbound viewers, an
    /// opaque cursor for tenant-bound tokens (usable as `from` / `Last-Event-ID`).
    pub seq: u64,
    /// When, Unix milliseconds on the server's clock.
    pub at_ms: i64,
    /// What happened.
    pub kind: EventKind,
    /// What happened, in words.
    pub message: String,
}

impl JobEventView {
    /// The view of a stored event, with its position as `seq`.
    pub fn new(e: &JobEvent, seq: u64) -> JobEventView {
        JobEventView { seq, at_ms: e.at_ms, kind: e.kind, message: e.message.clone() }
    }
}

/// Every kind of event the scheduler records (the `kind` of events and of event-stream frames);
/// the one definition is the model's.
pub use crate::model::EventKind;

/// Which clock the times in a response are on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ClockView {
    /// `wall` (real time) or `simulated` (a simulated cloud's clock, running `speedup` times real
    /// time: its dates are not today's).
    pub kind: ClockKindView,
    /// Simulated seconds per real second, for a simulated clock that runs by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup: Option<f64>,
    /// The clock's time now, Unix milliseconds.
    pub now_ms: i64,
}

/// The two clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ClockKindView {
    /// Real time.
    Wall,
    /// A simulated cloud's time.
    Simulated,
}

impl ClockView {
    /// The view of a scheduler clock.
    pub fn of(clock: &dyn crate::clock::Clock) -> ClockView {
        use crate::clock::ClockKind;
        let (kind, speedup) = match clock.kind() {
            ClockKind::Wall => (ClockKindView::Wall, None),
            ClockKind::Scaled(s) => (ClockKindView::Simulated, Some(s)),
            ClockKind::Manual => (ClockKindView::Simulated, None),
        };
        ClockView { kind, speedup, now_ms: clock.now_ms() }
    }
}

/// Everything about one job (`GET /v1/jobs/{id}`).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct JobDetailView {
    /// The job.
    pub job: JobView,
    /// Its attempts, oldest first.
    pub attempts: Vec<AttemptView>,
    /// Its events, oldest first.
    pub events: Vec<JobEventView>,
    /// The attempts holding (or acquiring) cloud resources now: one for a gang, possibly several
    /// (in several regions) for splittable work.
    pub placements: Vec<AttemptView>,
    /// Every rank of every attempt that ran work: host, IP, phase, exit code, last heartbeat, GPU
    /// utilisation (empty for capacity-only jobs).
    pub nodes: Vec<crate::agents::NodeView>,
    /// The clock the times are on.
    pub clock: ClockView,
}

/// Where a listed job runs, or last tried to: its newest attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlacementSummaryView {
    /// The attempt's number (1, 2, …).
    pub attempt: u32,
    /// Region.
    pub region: String,
    /// VM size.
    pub size: String,
    /// Spot or regular (spot for a mixed fleet, whose regular part is `regular`).
    pub priority: PriorityView,
    /// VMs asked for (both parts of a mixed fleet).
    pub vms: u32,
    /// GPUs the attempt carries (both parts of a mixed fleet).
    pub gpus: u32,
    /// Where the attempt is.
    pub state: AttemptState,
    /// A mixed fleet's regular part; absent for a fleet of one priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regular: Option<AttemptPartView>,
}

impl From<&Attempt> for PlacementSummaryView {
    fn from(a: &Attempt) -> Self {
        PlacementSummaryView {
            attempt: a.number,
            region: a.region.clone(),
            size: a.size.clone(),
            priority: a.priority.into(),
            vms: a.vms,
            gpus: a.gpus,
            state: a.state,
            regular: a.regular.map(|r| r.into()),
        }
    }
}

/// A job as `GET /v1/jobs` lists it: the job, and where it runs (or last tried to).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ListedJobView {
    /// The job.
    #[serde(flatten)]
    pub job: JobView,
    /// Its newest attempt (region, size, priority, VMs, GPUs, state); absent before the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementSummaryView>,
}

/// A page of jobs (`GET /v1/jobs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobListView {
    /// The jobs, oldest first, each with `placement` once it has an attempt.
    pub jobs: Vec<ListedJobView>,
    /// How many jobs match the filter in all (on every page).
    pub total: usize,
    /// True when there are older jobs than this page's: `next` reads them.
    pub truncated: bool,
    /// The `cursor` that reads the next page (older jobs); null on the last page.
    pub next: Option<String>,
    /// The clock the times are on.
    pub clock: ClockView,
}

/// VMs of one offer the solver would give to a job now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlacementView {
    /// The job's id.
    pub job: String,
    /// For an inference service: `min` (the GPUs needed to get back to `replicas.min`) or
    /// `extra` (the rest up to `replicas.desired`); absent for the whole job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<DemandPartView>,
    /// Region.
    pub region: String,
    /// VM size.
    pub size: String,
    /// Spot or regular.
    pub priority: PriorityView,
    /// VMs.
    pub vms: u32,
    /// GPUs counted for the job.
    pub gpus: u32,
    /// USD per hour for all these VMs.
    pub price_per_hour: f64,
    /// Expected USD: run cost, expected eviction cost for spot, egress.
    pub expected_cost: f64,
}

/// The parts a job is planned in: an inference service's, and the regular base of a job with
/// `regular_gpus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DemandPartView {
    /// Up to `replicas.min`.
    Min,
    /// Above `replicas.min`, up to `replicas.desired`.
    Extra,
    /// The job's regular base (`regular_gpus`) not yet held on regular VMs.
    Base,
}

/// A job the plan leaves (at least partly) waiting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UnplacedView {
    /// The job's id.
    pub job: String,
    /// The inference part, as in [`PlacementView::part`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<DemandPartView>,
    /// Why, most specific first.
    pub reasons: Vec<String>,
}

/// What the solver would do with the open work now (`GET /v1/plan`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlanView {
    /// Placements, in job order.
    pub placements: Vec<PlacementView>,
    /// Jobs not placed in full, with the constraints that bind.
    pub unplaced: Vec<UnplacedView>,
    /// GPUs the placements shown carry.
    pub placed_gpus: u64,
    /// The solver's objective over the whole cluster (Σ priority × placed GPUs); absent for
    /// tenant-bound tokens, whose view is their own placements only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placed_weight: Option<f64>,
    /// Σ of the placements' expected cost shown, USD.
    pub expected_cost: f64,
    /// Which solver produced the plan: `lp-round`, `highs`, `greedy`, or `greedy (…)` after a fallback.
    pub solver: String,
    /// True when the plan is proven optimal.
    pub optimal: bool,
    /// Proven relative gap (0 when optimal).
    pub gap: f64,
    /// Wall-clock milliseconds spent solving.
    pub solve_ms: f64,
}

/// One quota pool of one region.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PoolView {
    /// Region.
    pub region: String,
    /// Pool name as Azure spells it (`cores`, `lowPriorityCores`, a family).
    pub pool: String,
    /// vCPU limit.
    pub limit: u64,
    /// vCPUs free now: what new placements may use.
    pub free: u64,
    /// vCPUs the caller's tenant holds (tenant-bound tokens only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_by_tenant: Option<u64>,
    /// vCPUs used outside spillway (admins and unbound viewers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_by_others: Option<u64>,
    /// vCPUs held by spillway's active attempts (admins and unbound viewers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_by_us: Option<u64>,
    /// vCPUs of attempts still provisioning, part of `used_by_us` (admins and unbound viewers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<u64>,
    /// When the cloud was last read for this region, Unix milliseconds.
    pub refreshed_at_ms: i64,
}

/// Offers not tried again until a time, after a failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BlockedOfferView {
    /// Region.
    pub region: String,
    /// One size, or every size when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// One quota family, when the block is a family's quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    /// One priority, or both when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<PriorityView>,
    /// One zone, when the failure was zonal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The failure class that caused it.
    pub class: FailureClassView,
    /// The failure, in words (for tenant-bound tokens, with fleet and job names taken out).
    pub reason: String,
    /// Since when, Unix milliseconds.
    pub since_ms: i64,
    /// Until when, Unix milliseconds.
    pub until_ms: i64,
}

impl BlockedOfferView {
    /// The view of a block; `scrub` takes other jobs' names out of the reason.
    pub fn new(b: &BlockedOffer, scrub: bool) -> BlockedOfferView {
        BlockedOfferView {
            region: b.region.clone(),
            size: b.size.clone(),
            family: b.family.clone(),
            priority: b.priority.map(Into::into),
            zone: b.zone.clone(),
            class: b.class.into(),
            reason: if scrub { scrub_names(&b.reason) } else { b.reason.clone() },
            since_ms: b.since_ms,
            until_ms: b.until_ms,
        }
    }
}

/// A region's circuit breaker, when not closed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RegionHealthView {
    /// Region.
    pub region: String,
    /// `open` (shunned until `until_ms`) or `half_open` (one probe allowed).
    pub breaker: BreakerView,
}

/// A breaker's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BreakerView {
    /// `closed`, `open` or `half_open`.
    pub state: BreakerStateView,
    /// When an open breaker lets a probe through, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<i64>,
}

/// The three breaker states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BreakerStateView {
    /// Healthy.
    Closed,
    /// Shunned.
    Open,
    /// One probe allowed.
    HalfOpen,
}

impl From<BreakerState> for BreakerView {
    fn from(b: BreakerState) -> Self {
        match b {
            BreakerState::Closed => BreakerView { state: BreakerStateView::Closed, until_ms: None },
            BreakerState::Open { until_ms } => BreakerView { state: BreakerStateView::Open, until_ms: Some(until_ms) },
            BreakerState::HalfOpen => BreakerView { state: BreakerStateView::HalfOpen, until_ms: None },
        }
    }
}

/// Quota, blocked offers and region health (`GET /v1/capacity`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CapacityView {
    /// Quota pools per region.
    pub pools: Vec<PoolView>,
    /// Offers blocked now, soonest expiry first.
    pub blocked_offers: Vec<BlockedOfferView>,
    /// Regions whose breaker is not closed.
    pub regions: Vec<RegionHealthView>,
}

/// Takes names of fleets (`spw-…`) and jobs (`j-…`) out of a message shown to a tenant: a block
/// caused by another tenant's fleet must not tell whose.
pub fn scrub_names(text: &str) -> String {
    text.split_inclusive(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '\'' | '"' | '(' | ')'))
        .map(|w| {
            let core =
                w.trim_end_matches(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '\'' | '"' | '(' | ')'));
            let tail = &w[core.len()..];
            let lead = core.trim_start_matches(['\'', '"', '(']);
            let head = &core[..core.len() - lead.len()];
            if lead.starts_with("spw-") {
                format!("{head}(a fleet){tail}")
            } else if lead.len() > 2 && lead.starts_with("j-") && lead[2..].chars().all(|c| c.is_ascii_hexdigit()) {
                format!("{head}(a job){tail}")
            } else {
                w.to_string()
            }
        })
        .collect()
}

/// Money as shown: rounded to a hundredth of a cent, and never `-0`.
pub fn money(v: f64) -> f64 {
    let r = (v * 10_000.0).round() / 10_000.0;
    if r == 0.0 { 0.0 } else { r }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_fleets_and_jobs_are_scrubbed() {
        assert_eq!(
            scrub_names("fleet spw-j-0001-a2 of job j-0193ab2f00a1b2c3d failed: 'spw-x-a1' (capacity)"),
            "fleet (a fleet) of job (a job) failed: '(a fleet)' (capacity)"
        );
        assert_eq!(scrub_names("no capacity in eastus"), "no capacity in eastus");
    }

    #[test]
    fn money_is_never_negative_zero() {
        assert_eq!(money(-0.0).to_string(), "0");
        assert_eq!(money(-0.00001).to_string(), "0");
        assert_eq!(money(21.674999), 21.675);
    }
}
