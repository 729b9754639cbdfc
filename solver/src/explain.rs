//! Why a job waits, computed from the constraints that bind in the final plan: the match filters first
//! (nothing matches the job's model, sizes, regions or spot policy), then, for each matching offer, the
//! first limit that stops it (capacity, price cap, budget, a quota pool), and who holds the resources
//! the job would need.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};

use crate::model::{EPS, Instance, Mismatch, Sol, egress_cost, gang_vms, mismatch, run_cost};

/// At most this many per-offer reasons are listed; the rest are summarised in one line.
const MAX_OFFER_REASONS: usize = 8;

fn list(items: &[String]) -> String {
    items.join(", ")
}

/// Who holds each quota pool and each offer's capacity in a plan: worked out once per plan, so that
/// explaining thousands of waiting jobs does not walk every placement for each.
pub(crate) struct Holders {
    by_pool: Vec<Vec<usize>>,
    by_offer: Vec<Vec<usize>>,
    /// Per set of contended resources (pools, then offers as `usize::MAX - offer`), who holds them:
    /// thousands of waiting jobs contend for the same few sets, and a busy pool has thousands of
    /// holders.
    summaries: RefCell<HashMap<Vec<usize>, HolderSummary>>,
    /// Scratch marks, one per job, all false between uses.
    seen: RefCell<Vec<bool>>,
}

/// The placed jobs holding a set of resources: how many, and their lowest and highest priority.
#[derive(Clone, Copy, Default)]
struct HolderSummary {
    n: usize,
    lo: u32,
    hi: u32,
}

impl Holders {
    pub fn new(inst: &Instance, sol: &Sol) -> Holders {
        let mut by_pool = vec![Vec::new(); inst.pool_limit.len()];
        let mut by_offer = vec![Vec::new(); inst.p.offers.len()];
        for a in &sol.assigns {
            by_offer[a.offer].push(a.job);
            for &q in &inst.offer_pools[a.offer] {
                by_pool[q].push(a.job);
            }
        }
        for list in by_pool.iter_mut().chain(by_offer.iter_mut()) {
            list.sort_unstable();
            list.dedup();
        }
        Holders { by_pool, by_offer, summaries: RefCell::default(), seen: RefCell::new(vec![false; inst.p.jobs.len()]) }
    }
}

/// What a per-offer reason is about: reasons about the same pool and demand read alike (and are
/// listed once); every other reason names its offer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reason {
    Offer(usize),
    Pool(usize, u64),
}

/// The distinct per-offer reasons of one job: the first [`MAX_OFFER_REASONS`] written out, the
/// rest counted.
#[derive(Default)]
struct OfferReasons {
    pools: Vec<(usize, u64)>,
    distinct: usize,
    texts: Vec<String>,
}

impl OfferReasons {
    fn note(&mut self, reason: Reason, text: impl FnOnce() -> String) {
        if let Reason::Pool(q, need) = reason {
            if self.pools.contains(&(q, need)) {
                return;
            }
            self.pools.push((q, need));
        }
        self.distinct += 1;
        if self.texts.len() < MAX_OFFER_REASONS {
            self.texts.push(text());
        }
    }

    fn finish(mut self) -> Vec<String> {
        if self.distinct > MAX_OFFER_REASONS {
            let more = self.distinct - MAX_OFFER_REASONS;
            self.texts.push(format!("… and {more} more offers blocked likewise"));
        }
        self.texts
    }
}

/// Reasons for job `j`, which the plan `sol` does not place in full.
pub(crate) fn reasons(inst: &Instance, sol: &Sol, holders_of: &Holders, j: usize) -> Vec<String> {
    let p = inst.p;
    let job = inst.job(j);
    let mut out = Vec::new();
    let placed = sol.job_gpus[j];
    if placed > 0 {
        out.push(format!("placed {placed} of {} GPUs", job.gpus));
    }

    // The filters, one at a time, so the reason names the one that empties the set.
    let mut matching: Vec<usize> = inst.offers_named_by(j).filter(|&o| mismatch(job, &p.offers[o]).is_none()).collect();
    if matching.is_empty() {
        let worst = p.offers.iter().filter_map(|offer| mismatch(job, offer)).reduce(later);
        let what = if job.gpu_models.is_empty() { "any GPU model".to_string() } else { list(&job.gpu_models) };
        out.push(match worst {
            None => "no offers in the problem".to_string(),
            Some(Mismatch::Model) => format!("no offer has GPU model {what}"),
            Some(Mismatch::Size) => format!("no {what} offer of size {}", list(&job.sizes)),
            Some(Mismatch::Region) => {
                format!("no matching offer in the allowed regions {}", list(job.regions.as_deref().unwrap_or_default()))
            }
            Some(Mismatch::Denied) => {
                format!("every matching offer is in a denied region ({})", list(&job.deny_regions))
            }
            Some(Mismatch::Spot) => "spot: never, and every matching offer is spot".to_string(),
            Some(Mismatch::Regular) => "spot: only, and every matching offer is regular".to_string(),
            Some(Mismatch::MinGpus) => {
                format!("no matching offer has at least {} GPUs per VM", job.min_gpus_per_vm.unwrap_or_default())
            }
        });
        return out;
    }

    // Per matching offer: the first limit that stops it, static limits before contended ones. Only
    // the first few distinct reasons are written out (most jobs of a large queue match hundreds of
    // offers, and formatting every reason was most of explaining them); the rest are counted.
    let mut reasons = OfferReasons::default();
    let mut contended_pools = BTreeSet::new();
    let mut contended_offers = BTreeSet::new();
    let mut fits_somewhere: Option<String> = None;
    matching.sort_by(|&a, &b| p.offers[a].price_per_hour.total_cmp(&p.offers[b].price_per_hour).then(a.cmp(&b)));
    for o in matching {
        let offer = &p.offers[o];
        let name = || format!("{} {} {}", offer.region, offer.size, offer.priority);
        let vms = if job.gang { gang_vms(job, offer) } else { 1 };
        let gpus = if job.gang { job.gpus } else { offer.gpus_per_vm.min(job.gpus - placed) };
        let price = f64::from(vms) * offer.price_per_hour;
        let vm_word = if vms == 1 { "VM" } else { "VMs" };
        if let Some(cap) = offer.capacity_vms
            && cap < vms
        {
            reasons.note(Reason::Offer(o), || format!("no capacity: {} has {cap} VMs, needs {vms}", name()));
            continue;
        }
        if let Some(cap) = job.max_price_per_hour
            && price > cap - sol.job_price[j] + EPS
        {
            // The job's total against its whole cap: what it held before, what this plan gave it,
            // and this offer on top (a cap that binds is about the total, never one VM).
            let total = job.held_price_per_hour + sol.job_price[j] + price;
            let cap = job.held_price_per_hour + cap;
            let each = offer.price_per_hour;
            reasons.note(Reason::Offer(o), || {
                format!(
                    "price cap: {} would cost {total:.2}/h in total with {vms} more {vm_word} at {each:.2}/h, cap {cap:.2}/h",
                    name()
                )
            });
            continue;
        }
        if let Some(budget) = job.budget {
            let cost = run_cost(job, offer, vms) + egress_cost(p, job, &offer.region, gpus);
            if cost > budget - sol.job_cost[j] + EPS {
                let total = job.held_cost + sol.job_cost[j] + cost;
                let budget = job.held_cost + budget;
                reasons.note(Reason::Offer(o), || {
                    format!(
                        "budget: {} would bring the expected cost to {total:.2} in total ({cost:.2} for {vms} more {vm_word}), budget {budget:.2}",
                        name()
                    )
                });
                continue;
            }
        }
        let need = u64::from(vms) * u64::from(offer.vcpus_per_vm);
        if let Some(&q) =
            inst.offer_pools[o].iter().find(|&&q| inst.pool_limit[q].saturating_sub(sol.pool_used[q]) < need)
        {
            let free = inst.pool_limit[q].saturating_sub(sol.pool_used[q]);
            let (region, pool) = &inst.pool_name[q];
            reasons
                .note(Reason::Pool(q, need), || format!("no quota: {region} {pool} needs {need} vCPUs, {free} free"));
            if inst.pool_limit[q] >= need {
                contended_pools.insert(q);
            }
            continue;
        }
        if let Some(cap) = offer.capacity_vms {
            let free = cap.saturating_sub(sol.cap_used[o]);
            if free < vms {
                reasons.note(Reason::Offer(o), || {
                    format!("no capacity: {} has {free} of {cap} VMs free, needs {vms}", name())
                });
                contended_offers.insert(o);
                continue;
            }
        }
        fits_somewhere.get_or_insert_with(name);
    }
    out.extend(reasons.finish());

    // Who holds the contended resources.
    if !contended_pools.is_empty() || !contended_offers.is_empty() {
        let key: Vec<usize> =
            contended_pools.iter().copied().chain(contended_offers.iter().map(|&o| usize::MAX - o)).collect();
        let summary = *holders_of.summaries.borrow_mut().entry(key).or_insert_with(|| {
            let mut seen = holders_of.seen.borrow_mut();
            let mut s = HolderSummary::default();
            let mut stamp = |h: usize| {
                if !seen[h] {
                    seen[h] = true;
                    let prio = inst.job(h).priority;
                    s.lo = if s.n == 0 { prio } else { s.lo.min(prio) };
                    s.hi = s.hi.max(prio);
                    s.n += 1;
                }
            };
            for &q in &contended_pools {
                holders_of.by_pool[q].iter().for_each(|&h| stamp(h));
            }
            for &o in &contended_offers {
                holders_of.by_offer[o].iter().for_each(|&h| stamp(h));
            }
            for &q in &contended_pools {
                holders_of.by_pool[q].iter().for_each(|&h| seen[h] = false);
            }
            for &o in &contended_offers {
                holders_of.by_offer[o].iter().for_each(|&h| seen[h] = false);
            }
            s
        });
        // A waiting job holds nothing in full, but a partly placed one is among the holders it
        // would count: leave it out, as it is not what the job waits for.
        let own = placed > 0
            && (contended_pools.iter().any(|&q| holders_of.by_pool[q].contains(&j))
                || contended_offers.iter().any(|&o| holders_of.by_offer[o].contains(&j)));
        let (n, lo, hi) = if own {
            let mut set = BTreeSet::new();
            for &q in &contended_pools {
                set.extend(holders_of.by_pool[q].iter().copied().filter(|&h| h != j));
            }
            for &o in &contended_offers {
                set.extend(holders_of.by_offer[o].iter().copied().filter(|&h| h != j));
            }
            let prios: Vec<u32> = set.iter().map(|&h| inst.job(h).priority).collect();
            (set.len(), prios.iter().copied().min().unwrap_or(0), prios.iter().copied().max().unwrap_or(0))
        } else {
            (summary.n, summary.lo, summary.hi)
        };
        if n > 0 {
            let range = if lo == hi { format!("{lo}") } else { format!("{lo}-{hi}") };
            let jobs = if n == 1 { "job" } else { "jobs" };
            if lo > job.priority {
                out.push(format!("outranked: that quota and capacity went to {n} placed {jobs} of priority {range}"));
            } else {
                out.push(format!(
                    "that quota and capacity went to {n} placed {jobs} of priority {range} (more weight placed that way)"
                ));
            }
        }
    }
    if let Some(name) = fits_somewhere {
        // Every method ends with a greedy fill over all candidates, so this should not happen; say so
        // rather than invent a reason.
        out.push(format!("not placed although {name} has room: a solver defect, please report it"));
    }
    out
}

/// The filter that removes the most specific offers: later filters in the `Mismatch` order are nearer
/// to matching, so they explain better.
fn later(a: Mismatch, b: Mismatch) -> Mismatch {
    let order = |m: Mismatch| m as u8;
    if order(b) > order(a) { b } else { a }
}
