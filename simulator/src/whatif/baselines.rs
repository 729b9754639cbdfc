//! The baselines: per-job brokers that drive the same simulated cloud through the `Cloud` trait, with
//! the control loop's accounting (cost = VMs running at the last look × price × time; a gang job
//! progresses only while all its VMs run; a loss rolls work back to the last checkpoint; the job
//! succeeds once `duration_hours` of work are done, seen at a round).
//!
//! Prices are the cloud's as listed at each round: a job ranks its offers by the prices when it
//! arrives, and a running VM is billed at the price in effect (a price change is accrued from the
//! round that sees it, as the control loop does).
//!
//! Every baseline sees the cloud only through the `Cloud` trait, as Azure shows it: prices, quota
//! (usages) and refusals; free capacity is never shown, so each learns where capacity is short
//! from its own failures.
//!
//! - `greedy-failover`: how a per-job broker behaves. Each job alone ranks every offer it accepts
//!   (allowed regions × acceptable sizes × spot when its policy allows it) by the job's price per
//!   hour, cheapest first, and asks for them in turn: no quota check, no memory of other jobs'
//!   failures, no pause. A refusal moves it to the next offer at once (within the round); a
//!   creation that fails later moves it on at the next round; after the last offer it starts
//!   again from the cheapest. A lost fleet (eviction, outage) is deleted and the job moves on to
//!   the next offer.
//! - `skypilot-like`: SkyPilot's failover. Per job, candidates cheapest first; a *pass* tries each
//!   at most once (the pass's blocklist), a refusal moving on at once and a creation that fails
//!   later at the next round; when a pass has tried every candidate the job waits
//!   [`SKYPILOT_RETRY_GAP_MS`] (`--retry-until-up`'s gap) before the next full pass. A lost VM
//!   relaunches the job through the same passes, from the cheapest candidate.
//! - Pipelines: a stage is held until its dependencies succeeded and fails with a failed one, by
//!   the control loop's own rule (`scheduler::control::gate_link`); a stage that may start ranks
//!   its offers then, at the prices of that moment. `skypilot-like` adds the egress of moving the
//!   stage's input out of its data region to each offer's cost (SkyPilot's DAG optimiser counts
//!   egress); the other two rank by price alone, as a broker that does not know where data lies.
//!   A pipeline's `budget` is held by the loop's running rule (a spend cap, as a team would set
//!   one on any broker): once its stages have cost it, its unfinished stages end failed with the
//!   loop's reason and their fleets are deleted. Unlike the loop, no broker plans within it.
//! - `single-region`: each job uses its first allowed region only (the tenant's home region with
//!   the trace mapping) and waits there. Each round it asks for the cheapest offer whose quota
//!   pools (as the usages show them) have room for the whole job and that no failure has blocked;
//!   a refusal or failed allocation blocks what it names for the control loop's durations
//!   (`scheduler::control::error_policy`, shared by all jobs of the broker), so it learns from
//!   refusals like the loop does. Jobs go in arrival order.

use std::collections::BTreeMap;
use std::sync::Arc;

use scheduler::Catalog;
use scheduler::accounting;
use scheduler::clock::{Clock, ManualClock};
use scheduler::cloud::{Cloud, CloudError, FleetOperation, FleetRequest, OperationStatus, TAG_ATTEMPT, TAG_JOB};
use scheduler::control::error_policy::{self, Tried};
use scheduler::control::{Gate, Upstream, gate_link};
use scheduler::model::{BlockedOffer, JobSpec, JobState, PipelineLink, Priority, QuotaPool, SpotPolicy, fleet_name};

use super::WhatIfError;
use super::driver::{Driver, RoundState};
use super::report::{AttemptSpan, Failover, JobOutcome, Outcome};
use super::scenario::Policy;
use super::workload::TraceJob;

/// SkyPilot's pause between two full failover passes of a job (`--retry-until-up`).
pub const SKYPILOT_RETRY_GAP_MS: i64 = 30_000;

/// An offer a job can use, with what it costs the job.
#[derive(Debug, Clone, PartialEq)]
struct Candidate {
    region: String,
    size: String,
    priority: Priority,
    vms: u32,
    gpus_per_vm: u32,
    vcpus_per_vm: u64,
    family: String,
    price_per_vm: f64,
}

#[derive(Debug, Clone, PartialEq)]
enum Phase {
    Waiting,
    Provisioning { op: FleetOperation, cand: usize },
    Running { cand: usize, since_ms: i64 },
    Done,
}

#[derive(Debug)]
struct BJob {
    id: String,
    spec: JobSpec,
    candidates: Vec<Candidate>,
    cursor: usize,
    phase: Phase,
    attempts: u32,
    fleet: String,
    submitted_ms: i64,
    first_running_ms: Option<i64>,
    finished_ms: Option<i64>,
    cost_usd: f64,
    /// Egress billed (in `cost_usd` too).
    egress_usd: f64,
    /// Where a ready pipeline stage's input lies, and its GB.
    input: Option<(String, Option<f64>)>,
    progress_hours: f64,
    lost: f64,
    failovers: u32,
    awaiting_failover: bool,
    running_vms: u32,
    accounted_ms: i64,
    spans: Vec<AttemptSpan>,
    /// `skypilot-like`: candidates tried in the current pass.
    tried: Vec<bool>,
    /// `skypilot-like`: no new pass before this time.
    next_pass_ms: i64,
    /// Its place in a pipeline, when it is a stage of one.
    link: Option<PipelineLink>,
    /// False while a stage waits for its dependencies.
    ready: bool,
    /// Why it failed without running (a dependency failed).
    failed: Option<String>,
}

impl BJob {
    /// The region its last attempt that reached running ran in: where its output lies.
    fn last_region(&self) -> Option<&str> {
        self.spans.iter().rev().find(|s| s.running_ms.is_some()).map(|s| s.region.as_str())
    }

    fn state(&self) -> JobState {
        match (&self.phase, &self.failed) {
            (Phase::Done, None) => JobState::Succeeded,
            (Phase::Done, Some(_)) => JobState::Failed,
            (Phase::Running { .. }, _) => JobState::Running,
            (Phase::Provisioning { .. }, _) => JobState::Provisioning,
            (Phase::Waiting, _) => JobState::Pending,
        }
    }
}

/// A baseline broker (`greedy-failover`, `skypilot-like` or `single-region`).
pub(crate) struct Broker {
    policy: Policy,
    cloud: Arc<dyn Cloud>,
    clock: Arc<ManualClock>,
    catalog: Catalog,
    jobs: Vec<BJob>,
    open: Vec<usize>,
    failovers: Vec<Failover>,
    start_ms: i64,
    /// The cloud's prices as listed at the last round, by (region, size, priority).
    prices: BTreeMap<(String, String, Priority), f64>,
    /// `single-region`: what refusals and failed allocations blocked, by block key.
    blocks: BTreeMap<String, BlockedOffer>,
    /// Index of each job by id (pipeline stages name their dependencies by id).
    by_id: BTreeMap<String, usize>,
    /// The jobs of each pipeline with a budget, by pipeline id.
    budgeted: BTreeMap<String, Vec<usize>>,
}

impl Broker {
    pub(crate) fn new(policy: Policy, cloud: Arc<dyn Cloud>, clock: Arc<ManualClock>, catalog: Catalog) -> Broker {
        let start_ms = clock.now_ms();
        Broker {
            policy,
            cloud,
            clock,
            catalog,
            jobs: Vec::new(),
            open: Vec::new(),
            failovers: Vec::new(),
            start_ms,
            prices: BTreeMap::new(),
            blocks: BTreeMap::new(),
            by_id: BTreeMap::new(),
            budgeted: BTreeMap::new(),
        }
    }

    /// `single-region` learns from a failure of candidate `k`: the block the control loop's error
    /// policy calls for (other brokers keep no memory).
    fn learn(&mut self, idx: usize, k: usize, err: &CloudError, now: i64) {
        if self.policy != Policy::SingleRegion {
            return;
        }
        let c = &self.jobs[idx].candidates[k];
        let tried = Tried { region: &c.region, size: &c.size, priority: c.priority };
        if let Some(b) = error_policy::block_for(err, tried, now) {
            self.blocks.insert(b.key(), b);
        }
    }

    fn blocked(&self, c: &Candidate, now: i64) -> bool {
        self.blocks.values().any(|b| b.is_active(now) && b.covers(&c.region, &c.size, &c.family, c.priority))
    }

    /// Reads the cloud's prices; true when any moved since the last read.
    async fn refresh_prices(&mut self) -> bool {
        let Ok(offers) = self.cloud.offers().await else { return false };
        let prices: BTreeMap<(String, String, Priority), f64> =
            offers.into_iter().filter_map(|o| Some(((o.region, o.size, o.priority), o.price_per_hour?))).collect();
        let moved = prices != self.prices;
        self.prices = prices;
        moved
    }

    /// Offers a job accepts, cheapest for the whole job first (ties: region, size, priority);
    /// `skypilot-like` counts moving the job's input `data` (region, GB) out of its region.
    fn candidates(&self, spec: &JobSpec, data: Option<&(String, Option<f64>)>) -> Vec<Candidate> {
        let mut regions = spec.allowed_regions(&self.catalog);
        if self.policy == Policy::SingleRegion {
            regions.truncate(1);
        }
        let priorities: &[Priority] = match spec.spot_policy() {
            SpotPolicy::Never => &[Priority::Regular],
            SpotPolicy::Allowed | SpotPolicy::Preferred => &[Priority::Spot, Priority::Regular],
            SpotPolicy::Only => &[Priority::Spot],
        };
        let mut out = Vec::new();
        for size in spec.acceptable_sizes(&self.catalog) {
            for region in &regions {
                let Some(row) = self.catalog.price(&size.name, region) else { continue };
                for &p in priorities {
                    let Some(listed) = row.for_priority(p) else { continue };
                    let price = self.prices.get(&(region.clone(), size.name.clone(), p)).copied().unwrap_or(listed);
                    let vms = spec.gpus.div_ceil(size.gpus);
                    out.push(Candidate {
                        region: region.clone(),
                        size: size.name.clone(),
                        priority: p,
                        vms,
                        gpus_per_vm: size.gpus,
                        vcpus_per_vm: size.vcpus as u64,
                        family: size.family.clone(),
                        price_per_vm: price,
                    });
                }
            }
        }
        let hours = spec.duration_hours.unwrap_or(1.0);
        let egress = |c: &Candidate| match data {
            Some((from, Some(gb))) if self.policy == Policy::SkypilotLike && *from != c.region => {
                accounting::egress_usd(*gb, self.catalog.egress_usd_per_gb(from, &c.region))
            }
            _ => 0.0,
        };
        let cost = |c: &Candidate| c.price_per_vm * c.vms as f64 * hours + egress(c);
        out.sort_by(|a, b| {
            cost(a).total_cmp(&cost(b)).then_with(|| {
                (&a.region, &a.size, a.priority == Priority::Regular).cmp(&(
                    &b.region,
                    &b.size,
                    b.priority == Priority::Regular,
                ))
            })
        });
        out
    }

    fn request(j: &BJob, c: &Candidate) -> FleetRequest {
        FleetRequest {
            name: j.fleet.clone(),
            region: c.region.clone(),
            priority: c.priority,
            sizes: vec![c.size.clone()],
            vms: c.vms,
            min_vms: c.vms,
            max_price_per_vm: None,
            zones: Vec::new(),
            tags: [(TAG_JOB.to_string(), j.id.clone()), (TAG_ATTEMPT.to_string(), j.attempts.to_string())]
                .into_iter()
                .collect(),
            regular: None,
        }
    }

    /// Accrues cost and progress up to now at the last seen VM count, by the control loop's rules
    /// ([`scheduler::accounting`]). A broker restarts a job that lost any VM, so every job counts
    /// as a gang here: its fleet does the work only while all its VMs run.
    fn account(j: &mut BJob, now: i64) {
        let Phase::Running { cand, .. } = j.phase else { return };
        let c = &j.candidates[cand];
        let hours = accounting::hours_between(j.accounted_ms, now);
        let fleet = Broker::fleet_share(j, c);
        j.cost_usd += fleet.cost_usd(hours);
        j.progress_hours = accounting::advance(
            j.progress_hours,
            hours,
            fleet.progress_fraction(true, j.spec.gpus),
            j.spec.duration_hours,
        );
        j.accounted_ms = now;
    }

    fn fleet_share(j: &BJob, c: &Candidate) -> accounting::FleetShare {
        accounting::FleetShare {
            running_vms: j.running_vms,
            vms: c.vms,
            gpus: c.vms * c.gpus_per_vm,
            price_per_vm: c.price_per_vm,
        }
    }

    /// A lost VM stops the whole job (the broker restarts it elsewhere): the work since the last
    /// checkpoint is lost.
    fn roll_back(j: &mut BJob) {
        let r = accounting::roll_back_to_checkpoint(j.progress_hours, j.spec.checkpoint_interval_minutes, 1.0);
        j.lost += r.lost_hours * j.spec.gpus as f64;
        j.progress_hours = r.progress_hours;
    }

    /// Starts the job's next attempt on candidate `k`; Ok(true) when the cloud accepted it.
    async fn try_create(&mut self, idx: usize, k: usize, now: i64) -> bool {
        let j = &mut self.jobs[idx];
        j.attempts += 1;
        j.fleet = fleet_name(&j.id, j.attempts);
        let req = Broker::request(j, &j.candidates[k]);
        match self.cloud.begin_create_fleet(&req).await {
            Ok(op) => {
                let j = &mut self.jobs[idx];
                if j.awaiting_failover {
                    j.awaiting_failover = false;
                    let from = j.spans.last().map(|s| s.region.clone()).unwrap_or_default();
                    // A failover leaves a region; another offer in the same one is not one (as
                    // the control loop counts them).
                    if from != req.region {
                        j.failovers += 1;
                        self.failovers.push(Failover {
                            at_hours: (now - self.start_ms) as f64 / 3_600_000.0,
                            job: j.id.clone(),
                            from,
                            to: req.region.clone(),
                        });
                    }
                }
                j.spans.push(AttemptSpan {
                    region: req.region.clone(),
                    size: req.sizes[0].clone(),
                    priority: req.priority,
                    started_ms: now,
                    running_ms: None,
                    ended_ms: None,
                    egress_gb: 0.0,
                    egress_usd: 0.0,
                });
                j.phase = Phase::Provisioning { op, cand: k };
                true
            }
            Err(e) => {
                if !matches!(e, CloudError::Throttled { .. } | CloudError::Transient { .. }) {
                    self.jobs[idx].awaiting_failover = true;
                }
                self.learn(idx, k, &e, now);
                false
            }
        }
    }

    /// Greedy: from the cursor, ask for offers in turn until one is accepted or all were tried.
    async fn place_greedy(&mut self, idx: usize, now: i64) {
        let n = self.jobs[idx].candidates.len();
        for _ in 0..n {
            let k = self.jobs[idx].cursor % n;
            self.jobs[idx].cursor = (k + 1) % n;
            if self.try_create(idx, k, now).await {
                return;
            }
        }
    }

    /// SkyPilot: the rest of the current pass, cheapest first, each candidate once; a finished pass
    /// waits [`SKYPILOT_RETRY_GAP_MS`] before the next.
    async fn place_skypilot(&mut self, idx: usize, now: i64) {
        if now < self.jobs[idx].next_pass_ms {
            return;
        }
        let n = self.jobs[idx].candidates.len();
        for k in 0..n {
            if self.jobs[idx].tried[k] {
                continue;
            }
            self.jobs[idx].tried[k] = true;
            if self.try_create(idx, k, now).await {
                return;
            }
        }
        let j = &mut self.jobs[idx];
        j.tried.iter_mut().for_each(|t| *t = false);
        j.next_pass_ms = now + SKYPILOT_RETRY_GAP_MS;
    }

    /// Single region: the cheapest offer of the home region, not blocked by an earlier failure,
    /// whose quota pools show room for the whole job; a refusal blocks it and moves on.
    async fn place_single(&mut self, idx: usize, now: i64, quota: &mut BTreeMap<(String, String), u64>) {
        let n = self.jobs[idx].candidates.len();
        for k in 0..n {
            let c = self.jobs[idx].candidates[k].clone();
            let need = c.vms as u64 * c.vcpus_per_vm;
            let pools = QuotaPool::keys_drawn_by(c.priority, &c.family);
            let fits = pools.iter().all(|p| quota.get(&(c.region.clone(), p.clone())).is_none_or(|&q| q >= need));
            if !fits || self.blocked(&c, now) {
                continue;
            }
            if self.try_create(idx, k, now).await {
                for p in pools {
                    if let Some(q) = quota.get_mut(&(c.region.clone(), p)) {
                        *q = q.saturating_sub(need);
                    }
                }
                return;
            }
        }
    }

    /// Free quota per (region, pool), as the usages show it now, in the regions jobs ask for.
    async fn quota(&self) -> BTreeMap<(String, String), u64> {
        let mut quota = BTreeMap::new();
        let regions: std::collections::BTreeSet<String> =
            self.open.iter().flat_map(|&i| self.jobs[i].candidates.iter().map(|c| c.region.clone())).collect();
        for r in regions {
            if let Ok(q) = self.cloud.quota(&r).await {
                for x in q {
                    quota.insert((r.clone(), x.pool.key()), x.limit.saturating_sub(x.usage));
                }
            }
        }
        quota
    }
}

impl Broker {
    /// Pipeline stages waiting for their dependencies, gated by the control loop's rule: one whose
    /// dependencies succeeded ranks its offers now (from its input's region), one with a failed
    /// dependency fails.
    fn open_stages(&mut self, open: &[usize]) {
        for &idx in open {
            let j = &self.jobs[idx];
            if j.ready || j.phase != Phase::Waiting {
                continue;
            }
            let Some(link) = &j.link else { continue };
            let gate = gate_link(link, |id| {
                let dep = &self.jobs[*self.by_id.get(id)?];
                Some(Upstream {
                    state: dep.state(),
                    last_region: dep.last_region(),
                    output_gb: dep.link.as_ref().and_then(|l| l.output_gb),
                })
            });
            match gate {
                Gate::Wait(_) => {}
                Gate::Fail(why) => {
                    let j = &mut self.jobs[idx];
                    j.phase = Phase::Done;
                    j.failed = Some(why);
                }
                Gate::Ready { data } => {
                    let candidates = self.candidates(&self.jobs[idx].spec, data.as_ref());
                    let j = &mut self.jobs[idx];
                    j.input = data;
                    j.tried = vec![false; candidates.len()];
                    j.candidates = candidates;
                    j.cursor = 0;
                    j.ready = true;
                }
            }
        }
    }
}

impl Broker {
    /// Ends the unfinished stages of every pipeline among `open` whose stages have cost its
    /// budget (each job's cost, egress included, accrued up to now), as the loop's running rule
    /// does: failed, with the loop's reason, their fleets deleted.
    async fn hold_pipeline_budgets(&mut self, open: &[usize], now: i64) -> Result<(), WhatIfError> {
        // What each budgeted pipeline with an open stage has spent, summed once per pipeline.
        let mut spent: BTreeMap<&str, f64> = BTreeMap::new();
        let mut exhausted = Vec::new();
        for &idx in open {
            let Some(link) = &self.jobs[idx].link else { continue };
            let (Some(budget), Some(members)) = (link.budget_usd, self.budgeted.get(&link.pipeline_id)) else {
                continue;
            };
            let spent = *spent
                .entry(link.pipeline_id.as_str())
                .or_insert_with(|| members.iter().map(|&m| self.jobs[m].cost_usd).sum());
            if spent >= budget && self.jobs[idx].phase != Phase::Done {
                exhausted.push((idx, budget));
            }
        }
        for (idx, budget) in exhausted {
            let j = &mut self.jobs[idx];
            let had_fleet = matches!(j.phase, Phase::Provisioning { .. } | Phase::Running { .. });
            j.phase = Phase::Done;
            j.failed = Some(scheduler::control::pipeline_budget_exhausted(budget));
            j.running_vms = 0;
            if had_fleet {
                if let Some(sp) = j.spans.last_mut() {
                    sp.ended_ms.get_or_insert(now);
                }
                delete(&self.cloud, &j.fleet).await?;
            }
        }
        Ok(())
    }
}

/// A broker's deletion: the simulated cloud never fails one, so a failure is a broken run, not a
/// fleet to leave behind.
async fn delete(cloud: &Arc<dyn Cloud>, fleet: &str) -> Result<(), WhatIfError> {
    cloud.delete_fleet(fleet).await.map_err(|e| WhatIfError::Control(format!("deleting fleet {fleet}: {e}")))
}

impl Driver for Broker {
    async fn submit(&mut self, job: &TraceJob) -> Result<(), WhatIfError> {
        let now = self.clock.now_ms();
        let candidates = self.candidates(&job.spec, None);
        let candidates_len = candidates.len();
        self.by_id.insert(job.id.clone(), self.jobs.len());
        if let Some(link) = job.pipeline.as_ref().map(|st| &st.link).filter(|l| l.budget_usd.is_some()) {
            self.budgeted.entry(link.pipeline_id.clone()).or_default().push(self.jobs.len());
        }
        self.open.push(self.jobs.len());
        self.jobs.push(BJob {
            id: job.id.clone(),
            spec: job.spec.clone(),
            candidates,
            cursor: 0,
            phase: Phase::Waiting,
            attempts: 0,
            fleet: String::new(),
            submitted_ms: now,
            first_running_ms: None,
            finished_ms: None,
            cost_usd: 0.0,
            egress_usd: 0.0,
            input: None,
            progress_hours: 0.0,
            lost: 0.0,
            failovers: 0,
            awaiting_failover: false,
            running_vms: 0,
            accounted_ms: now,
            spans: Vec::new(),
            tried: vec![false; candidates_len],
            next_pass_ms: now,
            link: job.pipeline.as_ref().map(|st| st.link.clone()),
            ready: job.pipeline.is_none(),
            failed: None,
        });
        Ok(())
    }

    async fn round(&mut self) -> Result<RoundState, WhatIfError> {
        let now = self.clock.now_ms();
        let open = self.open.clone();
        // Follow creations and running fleets.
        for &idx in &open {
            match self.jobs[idx].phase.clone() {
                Phase::Provisioning { op, cand } => match self.cloud.poll_operation(&op).await {
                    Ok(OperationStatus::InProgress { .. }) | Err(_) => {}
                    Ok(OperationStatus::Succeeded) => {
                        let running = match self.cloud.get_fleet(&self.jobs[idx].fleet).await {
                            Ok(f) => f.running_vms.unwrap_or(0),
                            Err(_) => 0,
                        };
                        // A stage that runs away from its input pays to move it, as the loop's
                        // placements do (the same accounting rules, the same catalog rate).
                        let (moved_gb, egress) = match &self.jobs[idx].input {
                            Some((from, Some(gb))) if *from != self.jobs[idx].candidates[cand].region => {
                                let (j, c) = (&self.jobs[idx], &self.jobs[idx].candidates[cand]);
                                // Earlier attempts that ran in the region moved data there (the
                                // last span is this attempt's, not yet running).
                                let already: f64 = j
                                    .spans
                                    .iter()
                                    .filter(|s| s.region == c.region && s.running_ms.is_some())
                                    .map(|s| s.egress_gb)
                                    .sum();
                                let gpus = c.vms * c.gpus_per_vm;
                                let moved = accounting::to_move_gb(*gb, j.spec.is_gang(), gpus, j.spec.gpus, already);
                                (moved, accounting::egress_usd(moved, self.catalog.egress_usd_per_gb(from, &c.region)))
                            }
                            _ => (0.0, 0.0),
                        };
                        let j = &mut self.jobs[idx];
                        j.cost_usd = accounting::with_egress(j.cost_usd, egress);
                        j.egress_usd += egress;
                        if let Some(span) = j.spans.last_mut() {
                            span.egress_gb = moved_gb;
                            span.egress_usd = egress;
                        }
                        j.phase = Phase::Running { cand, since_ms: now };
                        j.running_vms = running;
                        j.tried.iter_mut().for_each(|t| *t = false);
                        j.accounted_ms = now;
                        j.first_running_ms.get_or_insert(now);
                        if let Some(sp) = j.spans.last_mut() {
                            sp.running_ms = Some(now);
                        }
                    }
                    Ok(OperationStatus::Failed(e)) => {
                        self.learn(idx, cand, &e, now);
                        delete(&self.cloud, &self.jobs[idx].fleet).await?;
                        let j = &mut self.jobs[idx];
                        j.phase = Phase::Waiting;
                        j.awaiting_failover = true;
                        if let Some(sp) = j.spans.last_mut() {
                            sp.ended_ms = Some(now);
                        }
                    }
                },
                Phase::Running { cand, .. } => {
                    let observed = match self.cloud.get_fleet(&self.jobs[idx].fleet).await {
                        Ok(f) => f.running_vms.unwrap_or(0),
                        Err(_) => 0,
                    };
                    let j = &mut self.jobs[idx];
                    Broker::account(j, now);
                    let vms = j.candidates[cand].vms;
                    if j.spec.duration_hours.is_some_and(|d| j.progress_hours >= d) {
                        j.phase = Phase::Done;
                        j.finished_ms = Some(now);
                        if let Some(sp) = j.spans.last_mut() {
                            sp.ended_ms = Some(now);
                        }
                        delete(&self.cloud, &j.fleet).await?;
                    } else if observed < vms {
                        // A lost VM stops a gang: restart elsewhere from the last checkpoint.
                        Broker::roll_back(j);
                        j.running_vms = 0;
                        j.phase = Phase::Waiting;
                        j.next_pass_ms = now;
                        j.awaiting_failover = true;
                        if let Some(sp) = j.spans.last_mut() {
                            sp.ended_ms = Some(now);
                        }
                        delete(&self.cloud, &j.fleet).await?;
                    } else {
                        j.running_vms = observed;
                    }
                }
                Phase::Waiting | Phase::Done => {}
            }
        }
        // Every running job was accrued up to now above, at the price it ran at: new prices apply
        // from here on.
        if self.refresh_prices().await {
            let prices = &self.prices;
            for &idx in &open {
                for c in &mut self.jobs[idx].candidates {
                    if let Some(p) = prices.get(&(c.region.clone(), c.size.clone(), c.priority)) {
                        c.price_per_vm = *p;
                    }
                }
            }
        }
        self.hold_pipeline_budgets(&open, now).await?;
        self.open_stages(&open);
        // Place waiting jobs, in arrival order.
        let mut quota = if self.policy == Policy::SingleRegion { self.quota().await } else { BTreeMap::new() };
        for &idx in &open {
            let j = &self.jobs[idx];
            if j.phase != Phase::Waiting || !j.ready || j.candidates.is_empty() {
                continue;
            }
            match self.policy {
                Policy::SingleRegion => self.place_single(idx, now, &mut quota).await,
                Policy::SkypilotLike => self.place_skypilot(idx, now).await,
                _ => self.place_greedy(idx, now).await,
            }
        }
        self.open.retain(|&i| self.jobs[i].phase != Phase::Done);
        let mut st = RoundState::default();
        for &idx in &self.open {
            let j = &self.jobs[idx];
            if let Phase::Running { cand, .. } = j.phase {
                let c = &j.candidates[cand];
                let gpus = j.running_vms as f64 * c.gpus_per_vm as f64;
                st.cost_rate += j.running_vms as f64 * c.price_per_vm;
                st.gpu_rate += gpus;
                *st.gpus_by_region.entry(c.region.clone()).or_default() += gpus;
            }
        }
        Ok(st)
    }

    fn queue(&self) -> Result<u64, WhatIfError> {
        Ok(self.open.iter().filter(|&&i| !matches!(self.jobs[i].phase, Phase::Running { .. })).count() as u64)
    }

    fn idle(&self) -> bool {
        self.open.is_empty()
    }

    fn finish(&mut self, _end_ms: i64) -> Result<(Vec<JobOutcome>, Vec<Failover>), WhatIfError> {
        let mut out: Vec<JobOutcome> = self
            .jobs
            .iter()
            .map(|j| JobOutcome {
                id: j.id.clone(),
                outcome: match (&j.phase, &j.failed) {
                    (Phase::Done, None) => Outcome::Completed,
                    (Phase::Done, Some(_)) => Outcome::Failed,
                    _ => Outcome::Pending,
                },
                gpus: j.spec.gpus,
                submitted_ms: j.submitted_ms,
                first_running_ms: j.first_running_ms,
                finished_ms: j.finished_ms,
                deadline_ms: j.spec.deadline.map(|d| (d.unix_timestamp_nanos() / 1_000_000) as i64),
                cost_usd: j.cost_usd,
                egress_usd: j.egress_usd,
                work_gpu_hours: j.progress_hours * j.spec.gpus as f64,
                lost_work_gpu_hours: j.lost,
                failovers: j.failovers,
                attempts: j.spans.clone(),
                end_reason: j.failed.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok((out, std::mem::take(&mut self.failovers)))
    }
}
