//! An independent feasibility check of a plan against its problem: written apart from the solver's own
//! bookkeeping (it recomputes quota pools, costs and limits from the problem alone), so that tests and
//! callers can verify any plan, whichever method made it.

use std::collections::BTreeMap;

use crate::model::{DEFAULT_EGRESS_USD_PER_GB, EVICTION_OVERHEAD_HOURS};
use crate::plan::Plan;
use crate::priority::{Priority, SpotPolicy};
use crate::problem::{Problem, normalize_pool};
use crate::quota_pools::QuotaPool;

const TOL: f64 = 1e-6;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= TOL * a.abs().max(b.abs()).max(1.0)
}

/// Checks that `plan` is feasible for `problem` and consistent with itself: every placement on an
/// offer that matches its job (model, size, regions, spot policy, GPUs per VM); gangs whole on one
/// offer; non-gang jobs at most their GPUs, with at most the last VM of a placement partly idle; price
/// caps, budgets, capacity and every quota pool (`cores` and the family pool for regular VMs,
/// `lowPriorityCores` for spot) respected; every job not fully placed listed in `unplaced` with a
/// reason; totals and costs matching the problem's prices. Returns every violation found.
pub fn check(problem: &Problem, plan: &Plan) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    let jobs: BTreeMap<&str, usize> = problem.jobs.iter().enumerate().map(|(i, j)| (j.id.as_str(), i)).collect();
    let offers: BTreeMap<(&str, &str, Priority), usize> =
        problem.offers.iter().enumerate().map(|(i, o)| ((o.region.as_str(), o.size.as_str(), o.priority), i)).collect();
    let mut pool_used: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut cap_used = vec![0u64; problem.offers.len()];
    let mut job_gpus = vec![0u64; problem.jobs.len()];
    let mut job_placements = vec![0usize; problem.jobs.len()];
    let mut job_price = vec![0.0; problem.jobs.len()];
    let mut job_cost = vec![0.0; problem.jobs.len()];
    let mut weight = 0.0;
    let mut total_cost = 0.0;
    for (i, pl) in plan.placements.iter().enumerate() {
        let at = format!("placements[{i}] ({} on {} {} {})", pl.job, pl.region, pl.size, pl.priority);
        let (Some(&j), Some(&o)) =
            (jobs.get(pl.job.as_str()), offers.get(&(pl.region.as_str(), pl.size.as_str(), pl.priority)))
        else {
            errs.push(format!("{at}: unknown job or offer"));
            continue;
        };
        let job = &problem.jobs[j];
        let offer = &problem.offers[o];
        if pl.vms == 0 || pl.gpus == 0 {
            errs.push(format!("{at}: empty placement"));
        }
        let gpv = u64::from(offer.gpus_per_vm);
        if u64::from(pl.gpus) > u64::from(pl.vms) * gpv
            || u64::from(pl.gpus) <= u64::from(pl.vms).saturating_sub(1) * gpv
        {
            errs.push(format!(
                "{at}: {} GPUs do not fit {} VMs of {gpv} GPUs with at most one partly idle",
                pl.gpus, pl.vms
            ));
        }
        if !job.gpu_models.is_empty() && !job.gpu_models.contains(&offer.gpu_model) {
            errs.push(format!("{at}: GPU model {} not in {:?}", offer.gpu_model, job.gpu_models));
        }
        if !job.sizes.is_empty() && !job.sizes.contains(&offer.size) {
            errs.push(format!("{at}: size not in the job's allow-list"));
        }
        if job.regions.as_ref().is_some_and(|r| !r.contains(&offer.region)) || job.deny_regions.contains(&offer.region)
        {
            errs.push(format!("{at}: region not allowed"));
        }
        if job.spot == SpotPolicy::Never && offer.priority == Priority::Spot {
            errs.push(format!("{at}: spot for a job that never uses spot"));
        }
        if job.spot == SpotPolicy::Only && offer.priority == Priority::Regular {
            errs.push(format!("{at}: regular for a job that uses spot only"));
        }
        if job.min_gpus_per_vm.is_some_and(|m| offer.gpus_per_vm < m) {
            errs.push(format!("{at}: fewer GPUs per VM than min_gpus_per_vm"));
        }
        if job.gang && (pl.vms != job.gpus.div_ceil(offer.gpus_per_vm) || pl.gpus != job.gpus) {
            errs.push(format!("{at}: a gang must be whole: {} VMs for {} GPUs", pl.vms, pl.gpus));
        }
        let price = f64::from(pl.vms) * offer.price_per_hour;
        if !close(price, pl.price_per_hour) {
            errs.push(format!("{at}: price_per_hour {} but {} VMs cost {price}", pl.price_per_hour, pl.vms));
        }
        // Expected cost, recomputed from the documented definitions.
        let vms = f64::from(pl.vms);
        let restart = if job.gang { vms } else { 1.0 };
        let run = vms * offer.price_per_hour * job.duration_hours;
        let eviction = run * offer.eviction_rate_per_hour * job.duration_hours * EVICTION_OVERHEAD_HOURS * restart;
        let egress = match (&job.data_region, job.data_gb) {
            (Some(from), Some(gb)) if *from != offer.region => {
                let rate = problem
                    .egress
                    .iter()
                    .find(|e| e.from == *from && e.to == offer.region)
                    .map_or(DEFAULT_EGRESS_USD_PER_GB, |e| e.usd_per_gb);
                let share = if job.gang { 1.0 } else { f64::from(pl.gpus) / f64::from(job.gpus) };
                gb * share * rate
            }
            _ => 0.0,
        };
        let cost = run + eviction + egress;
        if !close(cost, pl.expected_cost) {
            errs.push(format!("{at}: expected_cost {} but the definitions give {cost}", pl.expected_cost));
        }
        for pool in QuotaPool::keys_drawn_by(offer.priority, &offer.family) {
            *pool_used.entry((offer.region.clone(), pool)).or_default() +=
                u64::from(pl.vms) * u64::from(offer.vcpus_per_vm);
        }
        cap_used[o] += u64::from(pl.vms);
        job_gpus[j] += u64::from(pl.gpus);
        job_placements[j] += 1;
        job_price[j] += price;
        job_cost[j] += cost;
        weight += f64::from(pl.gpus) * f64::from(job.priority);
        total_cost += cost;
    }
    for q in &problem.quotas {
        let used = pool_used.get(&(q.region.clone(), normalize_pool(&q.pool))).copied().unwrap_or(0);
        if used > q.vcpus {
            errs.push(format!("quota {} {}: {used} vCPUs used, limit {}", q.region, q.pool, q.vcpus));
        }
    }
    for (o, offer) in problem.offers.iter().enumerate() {
        if let Some(cap) = offer.capacity_vms
            && cap_used[o] > u64::from(cap)
        {
            errs.push(format!(
                "capacity {} {} {}: {} VMs, capacity {cap}",
                offer.region, offer.size, offer.priority, cap_used[o]
            ));
        }
    }
    let mut unplaced: BTreeMap<&str, usize> = BTreeMap::new();
    for u in &plan.unplaced {
        *unplaced.entry(u.job.as_str()).or_default() += 1;
        if u.reasons.is_empty() {
            errs.push(format!("unplaced {}: no reason given", u.job));
        }
    }
    for (j, job) in problem.jobs.iter().enumerate() {
        if job.gang && job_placements[j] > 1 {
            errs.push(format!("job {}: a gang split over {} placements", job.id, job_placements[j]));
        }
        if job_gpus[j] > u64::from(job.gpus) {
            errs.push(format!("job {}: {} GPUs placed, wants {}", job.id, job_gpus[j], job.gpus));
        }
        if let Some(cap) = job.max_price_per_hour
            && job_price[j] > cap + TOL
        {
            errs.push(format!("job {}: {:.4}/h above its cap {cap}", job.id, job_price[j]));
        }
        if let Some(budget) = job.budget
            && job_cost[j] > budget + TOL * budget.max(1.0)
        {
            errs.push(format!("job {}: expected cost {:.4} above its budget {budget}", job.id, job_cost[j]));
        }
        let listed = unplaced.get(job.id.as_str()).copied().unwrap_or(0);
        let full = job_gpus[j] == u64::from(job.gpus);
        if full && listed > 0 || !full && listed != 1 {
            errs.push(format!(
                "job {}: {} of {} GPUs placed but listed {listed} times as unplaced",
                job.id, job_gpus[j], job.gpus
            ));
        }
    }
    if unplaced.keys().any(|id| !jobs.contains_key(id)) {
        errs.push("unplaced lists an unknown job".to_string());
    }
    if !close(weight, plan.placed_weight) {
        errs.push(format!("placed_weight {} but the placements give {weight}", plan.placed_weight));
    }
    if !close(total_cost, plan.expected_cost) {
        errs.push(format!("expected_cost {} but the placements give {total_cost}", plan.expected_cost));
    }
    if errs.is_empty() { Ok(()) } else { Err(errs) }
}
