//! The knapsack bound on the placed weight: tighter than the Lagrangian's (`lagrange`), which at its
//! best multipliers is the LP relaxation's, where whole jobs cannot fill a quota pool the way
//! fractions of them do. On the independent 1,000-job problems the LP's bound stood 2-3 % above
//! the optimum (HiGHS proved one such optimum 2.7 % below it), so that even the optimal plan would
//! have reported a gap above 2 %.
//!
//! The quota pools are enforced exactly instead of priced. Each gang job's "at most one candidate"
//! row is priced instead (multiplier `u`, per job), and kept within each group of offers that draw
//! on the same pools; a non-gang job's GPU demand is priced per GPU, each of its VMs an item (at
//! most as many as its GPUs need); the capacity rows and the non-gang jobs' price caps and budgets
//! stay priced at the Lagrangian's multipliers. The problem then splits by each region's top pool
//! (`cores` with the family pools below it, `lowPriorityCores`): per family, the most profit of
//! whole jobs in its vCPUs (a multiple-choice knapsack, by dynamic programming), then the families
//! combined under the top pool's limit. Per family also the same with each offer's capacity
//! enforced (`capped_knapsack`): the lower of the two curves is taken point by point. For any `u ≥ 0` the sum bounds every plan (weak duality); at each job's profit in
//! the Lagrangian, every part is at most what its pools' prices add to the Lagrangian bound (no
//! item earns more than the prices of the vCPUs it takes), so the knapsack bound is never looser.
//! (Subgradient steps on `u` from there, tried: 10 steps took 20-35 ms on a 1,000-job problem and
//! tightened none of the independent ones.)
//!
//! A top pool whose dynamic programme would take too long stays priced ([`MAX_WORK`],
//! [`MAX_TOTAL_WORK`]).

use std::collections::BTreeMap;
use std::time::Instant;

use crate::model::Instance;

/// Item-units of dynamic programming (about a nanosecond each) per top pool above which it stays
/// priced, and for all of them together: the bound costs 1-12 ms on the independent 1,000-job
/// problems and 10-70 ms on the 10,000-job ones.
const MAX_WORK: usize = 10_000_000;
const MAX_TOTAL_WORK: usize = 30_000_000;

/// What the Lagrangian knows at its multipliers, for the bound.
pub(crate) struct Priced<'a> {
    /// Per pool, its limit (vCPUs); per offer, the pools it draws on and its vCPUs per VM.
    pub pool_limit: &'a [u64],
    pub offer_pools: &'a [Vec<usize>],
    pub offer_vcpus: Vec<u64>,
    /// Per offer, the VMs its capacity allows, where known.
    pub offer_capacity: Vec<Option<u32>>,
    /// Per offer, its capacity row's multiplier per VM (0 without one).
    pub offer_cap_price: Vec<f64>,
    /// Per pool, what its price adds to the Lagrangian bound (multiplier × limit). `None` where
    /// some job has no multiplier of its own (its items earn more than the prices of the vCPUs
    /// they take): the prices then bound nothing, every top pool's knapsack must run, and nothing
    /// clamps it.
    pub pool_value: Option<Vec<f64>>,
    /// What every other row adds, and the jobs' own multipliers (`u` times their jobs or GPUs).
    pub fixed: f64,
    pub classes: Vec<ClassItems>,
}

impl<'a> Priced<'a> {
    /// The bound's input for `inst`'s pools and offers, with these prices and items.
    pub fn of(
        inst: &'a Instance,
        offer_cap_price: Vec<f64>,
        pool_value: Option<Vec<f64>>,
        fixed: f64,
        classes: Vec<ClassItems>,
    ) -> Self {
        let offers = &inst.p.offers;
        Priced {
            pool_limit: &inst.pool_limit,
            offer_pools: &inst.offer_pools,
            offer_vcpus: offers.iter().map(|o| u64::from(o.vcpus_per_vm)).collect(),
            offer_capacity: offers.iter().map(|o| o.capacity_vms).collect(),
            offer_cap_price,
            pool_value,
            fixed,
            classes,
        }
    }
}

/// Per offer, the knapsack unit it falls in (see [`units`]).
pub(crate) type Place = Vec<Option<(usize, Option<usize>)>>;

/// Whether all of `offers` (a job's candidates' offers; at least one) fall in one knapsack unit,
/// whose knapsack then keeps the job's "at most one candidate" row exactly.
pub(crate) fn in_one_unit(place: &Place, mut offers: impl Iterator<Item = usize>) -> bool {
    match offers.next() {
        Some(first) => place[first].is_some() && offers.all(|o| place[o] == place[first]),
        None => false,
    }
}

/// One class's items: what each of its candidates earns net of `u` and of the prices that stay.
pub(crate) struct ClassItems {
    /// Gang: one item per job, at most one candidate each. Non-gang: VMs, each candidate's up to
    /// its count.
    pub gang: bool,
    pub jobs: u32,
    pub items: Vec<ClassItem>,
}

/// A candidate as an item.
pub(crate) struct ClassItem {
    pub offer: usize,
    /// VMs it takes (gang: the whole job's; non-gang: 1).
    pub vms: u32,
    pub profit: f64,
    /// Non-gang: as many of it at most (VMs the class's GPUs fill).
    pub copies: u32,
}

/// An item in a unit: its class, profit, units of the top pool's divisor, and copies (non-gang).
#[derive(Clone, Copy)]
struct Item {
    class: u32,
    offer: u32,
    profit: f64,
    /// The profit without the capacity row's price.
    unpriced: f64,
    size: usize,
    copies: u32,
    gang: bool,
}

/// An item with the vCPUs it takes, before its top pool's divisor is known.
type SizedItem = (Item, u64);

/// The bound: the Lagrangian's at these multipliers with the pools enforced; `None` when the pools
/// do not form a tree of at most two levels (a VM draws on a family pool and the region's `cores`,
/// or on `lowPriorityCores`), or when `deadline` passes first: the knapsacks take up to 80 ms at
/// 10,000 jobs, all of them after the descent's deadline when it stopped just short of it
/// (huge-gangs-10000-1 under `--time-limit-ms 500`: 537 ms), and only the caller's own bound is
/// left then.
pub(crate) fn bound(pr: &Priced, deadline: Option<Instant>) -> Option<f64> {
    let pools = pr.pool_limit.len();
    let (place, parent) = units(pr.pool_limit, pr.offer_pools)?;
    // Per (top, pool below or none), its items with their vCPUs.
    let mut units: BTreeMap<(usize, Option<usize>), Vec<SizedItem>> = BTreeMap::new();
    for (c, class) in pr.classes.iter().enumerate() {
        for it in &class.items {
            let unpriced = it.profit + f64::from(it.vms) * pr.offer_cap_price[it.offer];
            if unpriced <= 1e-9 {
                continue;
            }
            if let Some(key) = place[it.offer] {
                let item = Item {
                    class: c as u32,
                    offer: it.offer as u32,
                    profit: it.profit,
                    unpriced,
                    size: 0,
                    copies: it.copies,
                    gang: class.gang,
                };
                units.entry(key).or_default().push((item, u64::from(it.vms) * pr.offer_vcpus[it.offer]));
            }
        }
    }
    let mut value = pr.fixed;
    let mut budget = MAX_TOTAL_WORK;
    let mut tops: Vec<usize> = place.iter().flatten().map(|&(t, _)| t).collect();
    tops.sort_unstable();
    tops.dedup();
    for top in tops {
        if crate::expired(deadline) {
            return None;
        }
        let priced_value: f64 = match &pr.pool_value {
            Some(v) => std::iter::once(top).chain((0..pools).filter(|&q| parent[q] == Some(top))).map(|q| v[q]).sum(),
            None => f64::INFINITY,
        };
        let mine: Vec<(Option<usize>, &Vec<SizedItem>)> =
            units.range((top, None)..).take_while(|((t, _), _)| *t == top).map(|((_, b), v)| (*b, v)).collect();
        // Every item's vCPUs are a multiple of g: the knapsacks count in units of g.
        let g = mine.iter().flat_map(|(_, v)| v.iter().map(|i| i.1)).fold(0, gcd).max(1);
        let limit = usize::try_from(pr.pool_limit[top] / g).unwrap_or(usize::MAX);
        let unit_limit =
            |b: Option<usize>| b.map_or(limit, |b| usize::try_from(pr.pool_limit[b] / g).unwrap_or(limit).min(limit));
        // Each unit counts in its own divisor (a family's sizes share a larger one than the region's):
        // its knapsack (a non-gang item's copies in about log2 of them), and its convolution.
        let scale = |v: &[SizedItem]| v.iter().map(|i| i.1 / g).fold(0, gcd).max(1) as usize;
        let work: usize = mine
            .iter()
            .map(|&(b, v)| {
                // A gang class's jobs are items each (identical jobs share a class).
                let items: usize = v
                    .iter()
                    .map(|(i, _)| {
                        if i.gang {
                            pr.classes[i.class as usize].jobs as usize
                        } else {
                            (32 - i.copies.leading_zeros()) as usize
                        }
                    })
                    .sum();
                items.saturating_add(limit).saturating_mul(unit_limit(b) / scale(v))
            })
            .fold(0usize, usize::saturating_add);
        if work > MAX_WORK.min(budget) {
            // Without the pools' prices there is no bound without this top's knapsack.
            pr.pool_value.as_ref()?;
            value += priced_value;
            continue;
        }
        budget -= work;
        let mut total = vec![0.0_f64; limit + 1];
        let mut cap_value = 0.0;
        for (below, list) in mine {
            if crate::expired(deadline) {
                return None;
            }
            let step = scale(list);
            let unit = unit_limit(below) / step;
            let items: Vec<Item> = list
                .iter()
                .map(|&(i, vcpus)| Item { size: (vcpus / g) as usize / step, ..i })
                .filter(|i| i.size <= unit)
                .collect();
            let priced: Vec<Item> = items.iter().filter(|i| i.profit > 1e-9).copied().collect();
            let mut part = knapsack(&priced, &pr.classes, unit);
            // The same unit with its offers' capacities enforced instead of priced: another bound on
            // the unit's most profit per units, so the lower of the two at each point is one too.
            // What the capacity rows' prices add moves from `fixed` into the priced curve.
            let priced_caps: f64 = (0..pr.offer_pools.len())
                .filter(|&o| place[o] == Some((top, below)))
                .filter_map(|o| pr.offer_capacity[o].map(|c| pr.offer_cap_price[o] * f64::from(c)))
                .sum();
            cap_value += priced_caps;
            let capped = capped_knapsack(&items, pr, g * step as u64, unit);
            for (a, b) in part.iter_mut().zip(&capped) {
                *a = (*a + priced_caps).min(*b);
            }
            // Max-plus convolution: the unit takes k steps of the top pool's units; only the steps
            // where its profit grows can be worth taking.
            let rises: Vec<(usize, f64)> =
                (1..=unit).filter(|&k| part[k] > part[k - 1]).map(|k| (k * step, part[k])).collect();
            let mut next = total.clone();
            for (v, slot) in next.iter_mut().enumerate() {
                for &(k, profit) in rises.iter().take_while(|r| r.0 <= v) {
                    *slot = slot.max(total[v - k] + profit);
                }
            }
            total = next;
        }
        // Never above what the pools' and capacities' prices add (it cannot be, bar float noise).
        value += total[limit].min(priced_value + cap_value) - cap_value;
    }
    Some(value)
}

/// Per offer, the knapsack unit its VMs fall in: its top pool and the pool below it, if any
/// (`None` for an offer that draws on no pool); and per pool, its top pool where it is below one.
/// `None` when the pools do not form a tree of at most two levels.
pub(crate) fn units(pool_limit: &[u64], offer_pools: &[Vec<usize>]) -> Option<(Place, Vec<Option<usize>>)> {
    let pools = pool_limit.len();
    let mut users = vec![0usize; pools];
    for l in offer_pools {
        for &q in l {
            users[q] += 1;
        }
    }
    let mut parent: Vec<Option<usize>> = vec![None; pools];
    let mut place: Vec<Option<(usize, Option<usize>)>> = vec![None; offer_pools.len()];
    for (o, l) in offer_pools.iter().enumerate() {
        match *l.as_slice() {
            [] => {}
            [q] => place[o] = Some((q, None)),
            [a, b] => {
                // The pool more offers draw on is the top (`cores` above a family).
                let key = |q: usize| (users[q], pool_limit[q], std::cmp::Reverse(q));
                let (top, below) = if key(a) >= key(b) { (a, b) } else { (b, a) };
                if parent[below].is_some_and(|t| t != top) {
                    return None;
                }
                parent[below] = Some(top);
                place[o] = Some((top, Some(below)));
            }
            _ => return None,
        }
    }
    if (0..pools).any(|q| parent[q].is_some() && parent.contains(&Some(q))) {
        return None;
    }
    Some((place, parent))
}

/// One unit's knapsack: per number of units, the most profit in at most that many, each gang job
/// on at most one of its sizes, each non-gang item up to its copies.
fn knapsack(items: &[Item], classes: &[ClassItems], limit: usize) -> Vec<f64> {
    let mut best = vec![0.0_f64; limit + 1];
    // Non-gang items: bounded copies, split into 1, 2, 4, ... (any count up to `copies` is a sum).
    for it in items.iter().filter(|i| !i.gang && i.size > 0) {
        let mut left = it.copies.min((limit / it.size) as u32);
        let mut chunk = 1;
        while left > 0 {
            let m = chunk.min(left);
            let (k, profit) = (it.size * m as usize, it.profit * f64::from(m));
            for v in (k..=limit).rev() {
                best[v] = best[v].max(best[v - k] + profit);
            }
            left -= m;
            chunk *= 2;
        }
    }
    // Gang items: per class the best profit per size, none dominated by a smaller, richer one.
    let mut by_class: BTreeMap<u32, Vec<(usize, f64)>> = BTreeMap::new();
    for it in items.iter().filter(|i| i.gang && i.size > 0) {
        let e = by_class.entry(it.class).or_default();
        match e.iter_mut().find(|x| x.0 == it.size) {
            Some(x) => x.1 = x.1.max(it.profit),
            None => e.push((it.size, it.profit)),
        }
    }
    for (&c, v) in &by_class {
        let kept: Vec<(usize, f64)> = v
            .iter()
            .copied()
            .filter(|&(k, q)| !v.iter().any(|&(k2, q2)| (k2, q2) != (k, q) && k2 <= k && q2 >= q))
            .collect();
        let smallest = kept.iter().map(|x| x.0).min().unwrap_or(limit + 1);
        for _ in 0..(classes[c as usize].jobs as usize).min(limit / smallest) {
            let prev = best.clone();
            for &(k, profit) in &kept {
                for v in k..=limit {
                    best[v] = best[v].max(prev[v - k] + profit);
                }
            }
        }
    }
    best
}

/// The unit's knapsack with each capacitated offer's VMs enforced (its items at their profit
/// without the capacity's price): every such offer a knapsack of its own over its VMs (a gang
/// class may then take up to its jobs on each offer: the one-candidate rows are priced anyway),
/// the offers without a capacity one multiple-choice knapsack as in [`knapsack`], all combined
/// over the unit's units. Where capacities are small, whole jobs fill them worse than fractions
/// do, which the priced rows cannot see.
fn capped_knapsack(items: &[Item], pr: &Priced, unit_vcpus: u64, limit: usize) -> Vec<f64> {
    let mut free: Vec<Item> = Vec::new();
    let mut by_offer: BTreeMap<u32, Vec<Item>> = BTreeMap::new();
    for &it in items {
        match pr.offer_capacity[it.offer as usize] {
            Some(_) => by_offer.entry(it.offer).or_default().push(Item { profit: it.unpriced, ..it }),
            None if it.profit > 1e-9 => free.push(it),
            None => {}
        }
    }
    // The VMs each capacitated offer's knapsack counts up to (no more than the unit holds).
    let cap_of = |o: u32| {
        let cap = pr.offer_capacity[o as usize].unwrap_or(0) as usize;
        cap.min((limit as u64 * unit_vcpus / pr.offer_vcpus[o as usize].max(1)) as usize)
    };
    // Its items (a gang class's jobs each, a non-gang item's copies in about log2 of them) and its
    // convolution, per VM: a unit whose capacities are large (a pool of thousands of vCPUs and an
    // offer selling hundreds of VMs) keeps the priced curve alone, as a pool too large does.
    let work: usize = by_offer
        .iter()
        .map(|(&o, list)| {
            let items: usize = list
                .iter()
                .map(|i| {
                    if i.gang {
                        pr.classes[i.class as usize].jobs as usize
                    } else {
                        (32 - i.copies.leading_zeros()) as usize
                    }
                })
                .sum();
            items.saturating_add(limit).saturating_mul(cap_of(o))
        })
        .fold(0, usize::saturating_add);
    if work > MAX_WORK {
        return vec![f64::INFINITY; limit + 1];
    }
    let mut total = knapsack(&free, &pr.classes, limit);
    for (o, list) in by_offer {
        let vcpus = pr.offer_vcpus[o as usize];
        let cap = cap_of(o);
        // In VMs: each item's size in units times the unit's vCPUs over the VM's (exact: an
        // item's vCPUs are its VMs' and a multiple of the unit).
        let in_vms: Vec<Item> =
            list.iter().map(|i| Item { size: (i.size as u64 * unit_vcpus / vcpus) as usize, ..*i }).collect();
        let h = knapsack(&in_vms, &pr.classes, cap);
        let rises: Vec<(usize, f64)> = (1..=cap)
            .filter(|&n| h[n] > h[n - 1])
            .map(|n| ((n as u64 * vcpus / unit_vcpus) as usize, h[n]))
            .filter(|r| r.0 <= limit)
            .collect();
        let mut next = total.clone();
        for (v, slot) in next.iter_mut().enumerate() {
            for &(k, profit) in rises.iter().take_while(|r| r.0 <= v) {
                *slot = slot.max(total[v - k] + profit);
            }
        }
        total = next;
    }
    for v in 1..total.len() {
        total[v] = total[v].max(total[v - 1]);
    }
    total
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::{Problem, SolveOptions, solve_lp_round};

    /// `n` gang jobs of `gpus` A100 GPUs each, priorities 100, 99, ... (JSON, comma-separated).
    pub(crate) fn ranked_jobs(n: u32, gpus: u32) -> String {
        let jobs: Vec<String> = (0..n)
            .map(|i| {
                format!(
                    r#"{{"id": "j{i}", "gpus": {gpus}, "gpu_models": ["A100-80GB"], "priority": {}, "duration_hours": 2.0}}"#,
                    100 - i
                )
            })
            .collect();
        jobs.join(",")
    }

    /// 45 jobs of one 8-GPU VM (96 vCPUs) each, a family pool of 160 vCPUs: one job fits. The LP
    /// (and the Lagrangian) place 1⅔ jobs and leave the plan a gap of about 40 %; the knapsack
    /// proves the single best job the optimum.
    #[test]
    fn whole_jobs_that_cannot_fill_a_pool_are_proven_optimal() {
        let json = format!(
            r#"{{
              "offers": [{{"region": "eastus", "size": "Standard_ND96amsr_A100_v4", "priority": "regular",
                          "gpu_model": "A100-80GB", "gpus_per_vm": 8, "vcpus_per_vm": 96,
                          "family": "standardNDAMSv4_A100Family", "price_per_hour": 32.77}}],
              "quotas": [{{"region": "eastus", "pool": "standardNDAMSv4_A100Family", "vcpus": 160}},
                         {{"region": "eastus", "pool": "cores", "vcpus": 1000}}],
              "jobs": [{}]
            }}"#,
            ranked_jobs(45, 8)
        );
        let problem = Problem::from_json_str(&json).expect("valid problem");
        let plan = solve_lp_round(&problem, &SolveOptions::default());
        assert_eq!(plan.placed_weight, 800.0);
        assert!(plan.gap < 0.01, "gap {} against a bound the knapsack proves exact", plan.gap);
    }
}
