//! The prepared instance every method works on: feasibility filters (kept apart from ranking), cost
//! terms, job classes, pruned candidate offers, and the mutable resource usage of a partial plan.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::priority::{Priority, SpotPolicy};
use crate::problem::{JobDemand, Offer, Problem, normalize_pool};
use crate::quota_pools::QuotaPool;

/// Hours of a VM's price lost per eviction: re-provisioning plus the work since the last checkpoint.
///
/// The expected eviction cost of a placement is
/// `expected evictions × EVICTION_OVERHEAD_HOURS × hourly price of what restarts`, where a VM running
/// `duration_hours` at `eviction_rate_per_hour` is evicted `rate × duration` times on average. For a
/// non-gang job only the evicted VM restarts: `vms × price × duration × rate × overhead`. A gang restarts
/// whole when any of its VMs goes, so both factors scale with its size:
/// `vms × price × duration × rate × overhead × vms`. Both are zero when the rate is 0.
pub const EVICTION_OVERHEAD_HOURS: f64 = 0.5;

/// USD per GB used for a (from, to) pair the problem's `egress` table does not list: Azure's
/// inter-region transfer price within North America. Running in the data's own region costs nothing.
pub const DEFAULT_EGRESS_USD_PER_GB: f64 = 0.02;

/// Slack for comparing money against caps and budgets.
pub(crate) const EPS: f64 = 1e-9;

/// Why an offer does not match a job regardless of what else is placed: the filters, in the order
/// the explanations report them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mismatch {
    Model,
    Size,
    Region,
    Denied,
    Spot,
    Regular,
    MinGpus,
}

/// The match filters: GPU model, size allow-list, region allow/deny lists, spot policy, GPUs per VM.
pub(crate) fn mismatch(job: &JobDemand, offer: &Offer) -> Option<Mismatch> {
    if !job.gpu_models.is_empty() && !job.gpu_models.contains(&offer.gpu_model) {
        return Some(Mismatch::Model);
    }
    if !job.sizes.is_empty() && !job.sizes.contains(&offer.size) {
        return Some(Mismatch::Size);
    }
    if let Some(regions) = &job.regions
        && !regions.contains(&offer.region)
    {
        return Some(Mismatch::Region);
    }
    if job.deny_regions.contains(&offer.region) {
        return Some(Mismatch::Denied);
    }
    if job.spot == SpotPolicy::Never && offer.priority == Priority::Spot {
        return Some(Mismatch::Spot);
    }
    if job.spot == SpotPolicy::Only && offer.priority == Priority::Regular {
        return Some(Mismatch::Regular);
    }
    if job.min_gpus_per_vm.is_some_and(|m| offer.gpus_per_vm < m) {
        return Some(Mismatch::MinGpus);
    }
    None
}

/// VMs a gang job needs on an offer.
pub(crate) fn gang_vms(job: &JobDemand, offer: &Offer) -> u32 {
    job.gpus.div_ceil(offer.gpus_per_vm)
}

/// Expected USD of `vms` VMs of `offer` for `job`, without egress (see [`EVICTION_OVERHEAD_HOURS`]).
pub(crate) fn run_cost(job: &JobDemand, offer: &Offer, vms: u32) -> f64 {
    let run = f64::from(vms) * offer.price_per_hour * job.duration_hours;
    let restart_scale = if job.gang { f64::from(vms) } else { 1.0 };
    run * (1.0 + offer.eviction_rate_per_hour * job.duration_hours * EVICTION_OVERHEAD_HOURS * restart_scale)
}

/// USD per GB to move the job's data to `region`.
pub(crate) fn egress_rate(problem: &Problem, from: &str, to: &str) -> f64 {
    if from == to {
        return 0.0;
    }
    problem.egress.iter().find(|e| e.from == from && e.to == to).map_or(DEFAULT_EGRESS_USD_PER_GB, |e| e.usd_per_gb)
}

/// Egress USD for running `gpus` of the job's GPUs in `region`: a gang moves all of its data; a non-gang
/// job (sharded work) moves the share of its data that its GPUs there process.
pub(crate) fn egress_cost(problem: &Problem, job: &JobDemand, region: &str, gpus: u32) -> f64 {
    match (&job.data_region, job.data_gb) {
        (Some(from), Some(gb)) if gb > 0.0 => {
            let share = if job.gang { 1.0 } else { f64::from(gpus) / f64::from(job.gpus) };
            gb * share * egress_rate(problem, from, region)
        }
        _ => 0.0,
    }
}

/// A statically feasible (class, offer) pair.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cand {
    pub offer: usize,
    /// Gang: VMs for the whole job. Non-gang: 1 (the unit is one VM).
    pub vms: u32,
    /// Gang: the job's GPUs. Non-gang: GPUs per VM.
    pub gpus: u32,
    /// Gang: expected cost of the whole placement, egress included. Non-gang: run and eviction cost
    /// of one VM (egress is per GPU, below).
    pub cost: f64,
    /// Non-gang only: egress USD per placed GPU.
    pub egress_per_gpu: f64,
}

impl Cand {
    /// Cost per GPU at full use, the ranking key for non-gang jobs.
    pub fn cost_per_gpu(&self) -> f64 {
        self.cost / f64::from(self.gpus) + self.egress_per_gpu
    }

    /// The most VMs of this (non-gang) candidate, at most `want`, that job `j` may still take with
    /// `remaining` GPUs to place, `price` per hour already placed and `spent` of its budget spent:
    /// its price cap and its budget (egress included) decide. Cost grows with VMs, so every
    /// smaller count is allowed too.
    pub fn vms_allowed(&self, inst: &Instance, j: usize, want: u32, remaining: u32, price: f64, spent: f64) -> u32 {
        let job = inst.job(j);
        let per_vm = inst.p.offers[self.offer].price_per_hour;
        let mut vms = want;
        if let Some(cap) = job.max_price_per_hour
            && per_vm > 0.0
        {
            vms = vms.min(((cap - price + EPS) / per_vm).floor().max(0.0) as u32);
        }
        if let Some(budget) = job.budget {
            let left = budget - spent + EPS;
            if self.cost > 0.0 {
                vms = vms.min((left / self.cost).floor().max(0.0) as u32);
            }
            let cost_of =
                |k: u32| f64::from(k) * self.cost + self.egress_per_gpu * f64::from(remaining.min(k * self.gpus));
            while vms > 0 && cost_of(vms) > left {
                vms -= 1;
            }
        }
        vms
    }
}

/// Jobs identical in everything but their id: they share candidates and LP variables.
#[derive(Clone, Debug)]
pub(crate) struct Class {
    pub jobs: Vec<usize>,
    pub rep: usize,
    /// Statically feasible, not dominated, best first (cost, then spot preference, then offer order).
    pub cands: Vec<Cand>,
    /// Classes whose candidates are the same offers with the same VMs in the same order share a
    /// shape: a search that tries to place, or move, a job of one shape would find for any other job
    /// of it the same places (real queues repeat shapes where they do not repeat classes: jobs of
    /// one GPU count and region list differ only in priority and duration).
    pub shape: usize,
}

/// The prepared problem.
pub(crate) struct Instance<'a> {
    pub p: &'a Problem,
    /// Limit of each listed quota pool.
    pub pool_limit: Vec<u64>,
    /// (region, pool name as the quota row spells it).
    pub pool_name: Vec<(String, String)>,
    /// For each offer, the listed pools its VMs draw from.
    pub offer_pools: Vec<Vec<usize>>,
    pub classes: Vec<Class>,
    pub job_class: Vec<usize>,
    /// Per job, the weight it places when placed whole: priority × GPUs (read in the searches'
    /// inner loops, where reaching it through the job's whole record cost cache misses).
    pub weight: Vec<f64>,
    /// The offers of each size, in offer order: a job that names its sizes is matched against
    /// those offers only, not every offer (most jobs name theirs, and offers are many).
    offers_by_size: BTreeMap<&'a str, Vec<usize>>,
    /// The offers of each GPU model, in offer order, likewise for a job that names its models
    /// (matching every job of a 10,000-job queue against every offer was half of preparing it).
    offers_by_model: BTreeMap<&'a str, Vec<usize>>,
}

/// Job classes from which [`Instance::new`] finds their candidates on every core: below, the
/// threads' start (tens of microseconds) is more than the work (a 1,000-job instance takes 7 ms).
const PARALLEL_CLASSES: usize = 500;

impl<'a> Instance<'a> {
    /// Whether at least half the GPUs the jobs ask for belong to jobs that may be split across
    /// VMs: then the LP's whole VMs are most of the plan (see `lp::round`). A job of one GPU
    /// cannot be split whatever it allows: real Philly queues of 1-GPU jobs marked splittable
    /// (`variant_problems.py --shapes nogang` of `real_problems.py --sizes 300`) kept their weight
    /// from the LP's start and ended up to 40 % dearer, in twice the time.
    pub fn mostly_split(&self) -> bool {
        self.p.half_the_gpus_in(|j| !j.gang && j.gpus > 1)
    }

    pub fn new(p: &'a Problem) -> Instance<'a> {
        let mut pool_index: BTreeMap<(String, String), usize> = BTreeMap::new();
        let mut pool_limit = Vec::new();
        let mut pool_name = Vec::new();
        for q in &p.quotas {
            pool_index.insert((q.region.clone(), normalize_pool(&q.pool)), pool_limit.len());
            pool_limit.push(q.vcpus);
            pool_name.push((q.region.clone(), q.pool.clone()));
        }
        let offer_pools = p
            .offers
            .iter()
            .map(|o| {
                QuotaPool::keys_drawn_by(o.priority, &o.family)
                    .into_iter()
                    .filter_map(|n| pool_index.get(&(o.region.clone(), n)).copied())
                    .collect()
            })
            .collect();
        let mut inst = Instance {
            p,
            pool_limit,
            pool_name,
            offer_pools,
            classes: Vec::new(),
            job_class: vec![0; p.jobs.len()],
            weight: p.jobs.iter().map(|j| f64::from(j.priority) * f64::from(j.gpus)).collect(),
            offers_by_size: BTreeMap::new(),
            offers_by_model: BTreeMap::new(),
        };
        for (o, offer) in p.offers.iter().enumerate() {
            inst.offers_by_size.entry(offer.size.as_str()).or_default().push(o);
            inst.offers_by_model.entry(offer.gpu_model.as_str()).or_default().push(o);
        }
        let mut by_key: BTreeMap<String, usize> = BTreeMap::new();
        for (j, job) in p.jobs.iter().enumerate() {
            let key = class_key(job);
            let c = *by_key.entry(key).or_insert_with(|| {
                inst.classes.push(Class { jobs: Vec::new(), rep: j, cands: Vec::new(), shape: 0 });
                inst.classes.len() - 1
            });
            inst.classes[c].jobs.push(j);
            inst.job_class[j] = c;
        }
        // Each class's candidates on every core where there are many (a tenth of a 10,000-job
        // solve on one core: 85 ms of the instance's 92); each class's own, so the same on any
        // number of cores.
        let reps: Vec<usize> = inst.classes.iter().map(|c| c.rep).collect();
        let threads = if reps.len() >= PARALLEL_CLASSES { crate::parallel::cores() } else { 1 };
        let all = crate::parallel::par_map(&reps, threads, |&j| inst.prune(j, inst.candidates(j)));
        let mut shapes: BTreeMap<Vec<(usize, u32)>, usize> = BTreeMap::new();
        for (c, cands) in all.into_iter().enumerate() {
            let places = cands.iter().map(|c| (c.offer, c.vms)).collect();
            let next = shapes.len();
            inst.classes[c].shape = *shapes.entry(places).or_insert(next);
            inst.classes[c].cands = cands;
        }
        inst
    }

    /// The shape of job `j`'s class (see [`Class::shape`]).
    pub fn shape_of(&self, j: usize) -> usize {
        self.classes[self.job_class[j]].shape
    }

    /// The shared resources a placement draws on, as the searches count them: the free amount of
    /// each (quota pools first, in vCPUs, then every offer's capacity, in VMs; unbounded where an offer
    /// states none) and, per offer, the resources one VM uses and how much of each.
    pub fn resources(&self) -> Resources {
        let p = self.p;
        let pools = self.pool_limit.len();
        let mut free: Vec<i64> = self.pool_limit.iter().map(|&l| i64::try_from(l).unwrap_or(UNBOUNDED)).collect();
        free.extend(p.offers.iter().map(|o| o.capacity_vms.map_or(UNBOUNDED, i64::from)));
        let offer_res = p
            .offers
            .iter()
            .enumerate()
            .map(|(o, offer)| {
                let mut res: Vec<(usize, i64)> =
                    self.offer_pools[o].iter().map(|&q| (q, i64::from(offer.vcpus_per_vm))).collect();
                if offer.capacity_vms.is_some() {
                    res.push((pools + o, 1));
                }
                res
            })
            .collect();
        (free, offer_res)
    }

    pub fn job(&self, j: usize) -> &JobDemand {
        &self.p.jobs[j]
    }

    pub fn cands_of(&self, j: usize) -> &[Cand] {
        &self.classes[self.job_class[j]].cands
    }

    /// The candidate of a job on an offer if the filters and static limits allow it.
    pub fn candidate(&self, j: usize, o: usize) -> Option<Cand> {
        let job = &self.p.jobs[j];
        let offer = &self.p.offers[o];
        if mismatch(job, offer).is_some() {
            return None;
        }
        let (vms, gpus) = if job.gang { (gang_vms(job, offer), job.gpus) } else { (1, offer.gpus_per_vm) };
        let cand = if job.gang {
            let egress = egress_cost(self.p, job, &offer.region, gpus);
            Cand { offer: o, vms, gpus, cost: run_cost(job, offer, vms) + egress, egress_per_gpu: 0.0 }
        } else {
            let per_gpu = egress_cost(self.p, job, &offer.region, 1);
            Cand { offer: o, vms, gpus, cost: run_cost(job, offer, 1), egress_per_gpu: per_gpu }
        };
        let first_cost =
            if job.gang { cand.cost } else { cand.cost + cand.egress_per_gpu * f64::from(gpus.min(job.gpus)) };
        let fits_statically = offer.capacity_vms.is_none_or(|c| c >= vms)
            && job.max_price_per_hour.is_none_or(|cap| f64::from(vms) * offer.price_per_hour <= cap + EPS)
            && job.budget.is_none_or(|b| first_cost <= b + EPS)
            && self.offer_pools[o]
                .iter()
                .all(|&q| self.pool_limit[q] >= u64::from(vms) * u64::from(offer.vcpus_per_vm));
        fits_statically.then_some(cand)
    }

    fn candidates(&self, j: usize) -> Vec<Cand> {
        let mut cands: Vec<Cand> = self.offers_named_by(j).filter_map(|o| self.candidate(j, o)).collect();
        cands.sort_by(|a, b| self.rank(j, a, b));
        cands
    }

    /// The offers of the sizes job `j` names, else of the GPU models it names, else every offer,
    /// each once: those [`mismatch`] may find no fault with (any other fails its size or model
    /// filter). Not in offer order: an offer has one size and one model, so the names' lists
    /// are disjoint, and each caller orders what it keeps.
    pub fn offers_named_by(&self, j: usize) -> impl Iterator<Item = usize> + '_ {
        let job = &self.p.jobs[j];
        let (index, names) = if !job.sizes.is_empty() {
            (Some(&self.offers_by_size), job.sizes.as_slice())
        } else if !job.gpu_models.is_empty() {
            (Some(&self.offers_by_model), job.gpu_models.as_slice())
        } else {
            (None, &[][..])
        };
        let every = index.is_none().then_some(0..self.p.offers.len()).into_iter().flatten();
        // A name listed twice, once.
        let named = names
            .iter()
            .enumerate()
            .filter(move |&(i, n)| !names[..i].contains(n))
            .filter_map(move |(_, n)| index?.get(n.as_str()))
            .flatten()
            .copied();
        every.chain(named)
    }

    /// Ranking (kept apart from the filters): cheaper first; at equal cost spot first for `preferred`,
    /// regular first otherwise; then offer order, so that every ranking is total and deterministic.
    pub fn rank(&self, j: usize, a: &Cand, b: &Cand) -> Ordering {
        let job = &self.p.jobs[j];
        let key = |c: &Cand| if job.gang { c.cost } else { c.cost_per_gpu() };
        let spot_first = matches!(job.spot, SpotPolicy::Preferred | SpotPolicy::Only);
        let tier = |c: &Cand| {
            let spot = self.p.offers[c.offer].priority == Priority::Spot;
            if spot == spot_first { 0 } else { 1 }
        };
        key(a).total_cmp(&key(b)).then(tier(a).cmp(&tier(b))).then(a.offer.cmp(&b.offer))
    }

    /// Drops candidates another candidate beats on every count: same quota pools, unbounded capacity,
    /// ranked no worse, using no more vCPUs (and, for non-gang jobs, the same GPUs per VM at no higher
    /// hourly price). A dominated candidate can never be needed: any plan using it stays feasible and no
    /// worse after moving that work to the dominating one.
    fn prune(&self, j: usize, cands: Vec<Cand>) -> Vec<Cand> {
        let gang = self.p.jobs[j].gang;
        let vcpus = |c: &Cand| u64::from(c.vms) * u64::from(self.p.offers[c.offer].vcpus_per_vm);
        // Best-ranked first already; per pool set, remember the unbounded candidates kept so far.
        let mut keepers: BTreeMap<&[usize], Vec<Cand>> = BTreeMap::new();
        let mut kept = Vec::with_capacity(cands.len());
        for c in cands {
            let pools = self.offer_pools[c.offer].as_slice();
            let group = keepers.entry(pools).or_default();
            let dominated = group.iter().any(|a| {
                vcpus(a) <= vcpus(&c)
                    && (gang
                        || (a.gpus == c.gpus
                            && self.p.offers[a.offer].price_per_hour <= self.p.offers[c.offer].price_per_hour
                            && a.egress_per_gpu <= c.egress_per_gpu
                            && a.cost <= c.cost))
            });
            if dominated {
                continue;
            }
            if self.p.offers[c.offer].capacity_vms.is_none() {
                // Only the cheapest few per group ever dominate anything; keep the list short.
                if gang {
                    group.retain(|a| vcpus(a) < vcpus(&c));
                }
                group.push(c);
            }
            kept.push(c);
        }
        kept
    }
}

/// Everything about a job but its id, normalised, as a string: equal keys, interchangeable jobs.
fn class_key(job: &JobDemand) -> String {
    let mut j = job.clone();
    j.id.clear();
    j.gpu_models.sort();
    j.gpu_models.dedup();
    j.sizes.sort();
    j.sizes.dedup();
    j.deny_regions.sort();
    j.deny_regions.dedup();
    if let Some(r) = j.regions.as_mut() {
        r.sort();
        r.dedup();
    }
    serde_json::to_string(&j).expect("job demands serialise")
}

/// The free amount [`Instance::resources`] gives a resource without a limit (an offer that states
/// no capacity): far above any use, with room to add to it without overflow.
pub(crate) const UNBOUNDED: i64 = i64::MAX / 4;

/// One (job, offer) assignment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Assign {
    pub job: usize,
    pub offer: usize,
    pub vms: u32,
    pub gpus: u32,
    pub cost: f64,
}

/// The shared resources a placement draws on (see [`Instance::resources`]): per resource its free
/// amount, and per offer the resources one VM uses and how much of each.
pub(crate) type Resources = (Vec<i64>, Vec<Vec<(usize, i64)>>);

/// A plan's placements, (job, offer, VMs, GPUs) each (see [`Sol::placements_in_order`]).
pub(crate) type Placements = Vec<(usize, usize, u32, u32)>;

/// A partial plan and the resources it uses.
#[derive(Clone)]
pub(crate) struct Sol {
    pub pool_used: Vec<u64>,
    pub cap_used: Vec<u32>,
    pub assigns: Vec<Assign>,
    pub job_gpus: Vec<u32>,
    pub job_price: Vec<f64>,
    pub job_cost: Vec<f64>,
}

impl Sol {
    pub fn new(inst: &Instance) -> Sol {
        let n = inst.p.jobs.len();
        Sol {
            pool_used: vec![0; inst.pool_limit.len()],
            cap_used: vec![0; inst.p.offers.len()],
            assigns: Vec::new(),
            job_gpus: vec![0; n],
            job_price: vec![0.0; n],
            job_cost: vec![0.0; n],
        }
    }

    /// How many more VMs of the offer fit in its capacity and quota pools.
    pub fn room(&self, inst: &Instance, o: usize) -> u32 {
        let offer = &inst.p.offers[o];
        let mut room = offer.capacity_vms.map_or(u32::MAX, |c| c.saturating_sub(self.cap_used[o]));
        for &q in &inst.offer_pools[o] {
            let free = inst.pool_limit[q].saturating_sub(self.pool_used[q]);
            room = room.min(u32::try_from(free / u64::from(offer.vcpus_per_vm)).unwrap_or(u32::MAX));
        }
        room
    }

    pub fn take(&mut self, inst: &Instance, a: Assign) {
        let offer = &inst.p.offers[a.offer];
        self.cap_used[a.offer] += a.vms;
        for &q in &inst.offer_pools[a.offer] {
            self.pool_used[q] += u64::from(a.vms) * u64::from(offer.vcpus_per_vm);
        }
        self.job_gpus[a.job] += a.gpus;
        self.job_price[a.job] += f64::from(a.vms) * offer.price_per_hour;
        self.job_cost[a.job] += a.cost;
        self.assigns.push(a);
    }

    /// Removes the assignment at `i` (order of the others is kept) and returns it.
    pub fn release(&mut self, inst: &Instance, i: usize) -> Assign {
        let a = self.assigns.remove(i);
        let offer = &inst.p.offers[a.offer];
        self.cap_used[a.offer] -= a.vms;
        for &q in &inst.offer_pools[a.offer] {
            self.pool_used[q] -= u64::from(a.vms) * u64::from(offer.vcpus_per_vm);
        }
        self.job_gpus[a.job] -= a.gpus;
        self.job_price[a.job] -= f64::from(a.vms) * offer.price_per_hour;
        self.job_cost[a.job] -= a.cost;
        a
    }

    /// Places an unplaced gang job on the candidate if it fits now.
    pub fn try_gang(&mut self, inst: &Instance, j: usize, c: &Cand) -> bool {
        if self.job_gpus[j] > 0 || self.room(inst, c.offer) < c.vms {
            return false;
        }
        self.take(inst, Assign { job: j, offer: c.offer, vms: c.vms, gpus: c.gpus, cost: c.cost });
        true
    }

    /// Adds as many VMs of the candidate to a non-gang job as its remaining demand, price cap, budget
    /// and the free resources allow, but at most `limit`. Returns the GPUs added.
    pub fn fill(&mut self, inst: &Instance, j: usize, c: &Cand, limit: u32) -> u32 {
        let job = inst.job(j);
        let remaining = job.gpus - self.job_gpus[j];
        let want = remaining.div_ceil(c.gpus).min(limit).min(self.room(inst, c.offer));
        let vms = c.vms_allowed(inst, j, want, remaining, self.job_price[j], self.job_cost[j]);
        if vms == 0 {
            return 0;
        }
        let gpus = remaining.min(vms * c.gpus);
        let cost = f64::from(vms) * c.cost + c.egress_per_gpu * f64::from(gpus);
        self.take(inst, Assign { job: j, offer: c.offer, vms, gpus, cost });
        gpus
    }

    /// Places what it can of job `j` on the candidates in the given order.
    pub fn place<'c>(&mut self, inst: &Instance, j: usize, order: impl IntoIterator<Item = &'c Cand>) {
        let job = inst.job(j);
        for c in order {
            if job.gang {
                if self.try_gang(inst, j, c) {
                    return;
                }
            } else {
                self.fill(inst, j, c, u32::MAX);
                if self.job_gpus[j] >= job.gpus {
                    return;
                }
            }
        }
    }

    pub fn weight(&self, inst: &Instance) -> f64 {
        self.job_gpus.iter().zip(&inst.p.jobs).map(|(&g, j)| f64::from(g) * f64::from(j.priority)).sum()
    }

    pub fn cost(&self) -> f64 {
        self.assigns.iter().map(|a| a.cost).sum()
    }

    /// The placements (job, offer, VMs, GPUs) in the order they were made: two plans equal in
    /// this are equal for every search, which are deterministic and follow that order.
    pub fn placements_in_order(&self) -> Placements {
        self.assigns.iter().map(|a| (a.job, a.offer, a.vms, a.gpus)).collect()
    }

    /// Moves gang placements to cheaper offers that have room, most expensive first, then gives any
    /// freed resources to jobs still waiting, in priority order.
    pub fn improve(&mut self, inst: &Instance) {
        let mut order: Vec<usize> = (0..self.assigns.len()).filter(|&i| inst.job(self.assigns[i].job).gang).collect();
        order.sort_by(|&a, &b| self.assigns[b].cost.total_cmp(&self.assigns[a].cost).then(a.cmp(&b)));
        let targets: Vec<(usize, usize)> =
            order.iter().map(|&i| (self.assigns[i].job, self.assigns[i].offer)).collect();
        for (j, o) in targets {
            let Some(i) = self.assigns.iter().position(|a| a.job == j && a.offer == o) else { continue };
            let old = self.release(inst, i);
            let better = inst.cands_of(j).iter().find(|c| c.cost < old.cost - EPS && self.room(inst, c.offer) >= c.vms);
            match better {
                Some(c) => {
                    let c = *c;
                    self.try_gang(inst, j, &c);
                }
                None => self.take(inst, old),
            }
        }
        // Waiting jobs first, so that re-placing split jobs cannot take quota they would have used
        // (it never lowers a job's GPUs, so the weight stays); then again for what it frees.
        self.fill_waiting(inst);
        self.improve_splittable(inst);
        self.fill_waiting(inst);
    }

    /// Re-places each non-gang job, dearest per GPU first, on the offers that cover its GPUs most
    /// cheaply *at the size it actually needs*: ranking by cost per GPU at full use puts a one-GPU
    /// remainder on an eight-GPU VM when that VM is cheaper per GPU, paying for seven idle GPUs. The
    /// new placement is kept only if it places at least as many GPUs for less.
    fn improve_splittable(&mut self, inst: &Instance) {
        let mut jobs: Vec<usize> = (0..inst.p.jobs.len())
            .filter(|&j| !inst.job(j).gang && self.job_gpus[j] > 0 && self.could_be_cheaper(inst, j))
            .collect();
        jobs.sort_by(|&a, &b| {
            let per_gpu = |j: usize| self.job_cost[j] / f64::from(self.job_gpus[j]);
            per_gpu(b).total_cmp(&per_gpu(a)).then(a.cmp(&b))
        });
        for j in jobs {
            let (gpus, cost) = (self.job_gpus[j], self.job_cost[j]);
            let mut old = Vec::new();
            while let Some(i) = self.assigns.iter().rposition(|a| a.job == j) {
                old.push(self.release(inst, i));
            }
            self.place_snug(inst, j);
            if self.job_gpus[j] > gpus || (self.job_gpus[j] == gpus && self.job_cost[j] < cost - EPS) {
                continue;
            }
            while let Some(i) = self.assigns.iter().rposition(|a| a.job == j) {
                self.release(inst, i);
            }
            for a in old.into_iter().rev() {
                self.take(inst, a);
            }
        }
    }

    /// Whether some candidate covers a non-gang job's placed GPUs for less than it pays now, ignoring
    /// what is free: a cheap test that skips jobs already placed as cheaply as they can be.
    fn could_be_cheaper(&self, inst: &Instance, j: usize) -> bool {
        let gpus = self.job_gpus[j];
        let best = inst
            .cands_of(j)
            .iter()
            .map(|c| {
                let per_gpu = c.cost_per_gpu();
                // At most one VM is partly idle; a job smaller than one VM pays for the whole VM.
                if gpus < c.gpus { c.cost + c.egress_per_gpu * f64::from(gpus) } else { per_gpu * f64::from(gpus) }
            })
            .fold(f64::INFINITY, f64::min);
        self.job_cost[j] > best + EPS
    }

    /// Places what it can of non-gang job `j`, each step on the candidate with the lowest cost per GPU
    /// it would actually cover (the remaining demand and the free room decide how much of its last VM
    /// is used).
    fn place_snug(&mut self, inst: &Instance, j: usize) {
        let cands = inst.cands_of(j);
        let mut excluded = vec![false; cands.len()];
        loop {
            let remaining = inst.job(j).gpus - self.job_gpus[j];
            if remaining == 0 {
                return;
            }
            let mut best: Option<(f64, usize, u32)> = None;
            for (k, c) in cands.iter().enumerate() {
                if excluded[k] {
                    continue;
                }
                let room = self.room(inst, c.offer);
                if room == 0 {
                    continue;
                }
                let covered = remaining.min(room.saturating_mul(c.gpus));
                let vms = covered.div_ceil(c.gpus);
                let ratio = (f64::from(vms) * c.cost + c.egress_per_gpu * f64::from(covered)) / f64::from(covered);
                if best.is_none_or(|(r, _, _)| ratio < r - 1e-12) {
                    best = Some((ratio, k, vms));
                }
            }
            let Some((_, k, vms)) = best else { return };
            if self.fill(inst, j, &cands[k], vms) == 0 {
                excluded[k] = true;
            }
        }
    }

    /// Greedy pass over jobs not (fully) placed: priority order, best-ranked candidate first.
    pub fn fill_waiting(&mut self, inst: &Instance) {
        for j in priority_order(inst) {
            if self.job_gpus[j] < inst.job(j).gpus {
                self.place(inst, j, inst.cands_of(j));
            }
        }
    }
}

/// Jobs by priority (highest first), then input order.
pub(crate) fn priority_order(inst: &Instance) -> Vec<usize> {
    let mut order: Vec<usize> = (0..inst.p.jobs.len()).collect();
    order.sort_by_key(|&j| (std::cmp::Reverse(inst.p.jobs[j].priority), j));
    order
}

/// `true` when plan `a` beats plan `b` lexicographically (more weight, then less cost).
pub(crate) fn better(a: (f64, f64), b: (f64, f64)) -> bool {
    a.0 > b.0 + 0.5 || ((a.0 - b.0).abs() <= 0.5 && a.1 < b.1 - 1e-9 * b.1.abs().max(1.0))
}
