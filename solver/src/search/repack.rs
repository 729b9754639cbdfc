//! One offer re-filled exactly: the gang jobs on it and the waiting gang jobs that could go to it,
//! chosen again by a knapsack over the VMs the offer has room for (most weight, then least cost).
//!
//! The search's moves change one or two jobs at a time. Where one offer takes most of a binding
//! pool, a cheaper plan of the same weight can need a different *set* of jobs on it: a 64-GPU
//! job of 30 hours out, two 32-GPU jobs of 5 hours in. No swap pays for that step by step, and the
//! exact searches run only on small problems; the knapsack finds it on any size, as each offer's
//! choice is one dimension (its VMs) once every other placement is fixed.

use std::time::Instant;

use super::{NONE, Packing, weight};
use crate::model::EPS;

/// Cells (jobs × VM counts) one offer's knapsack may take: about a nanosecond each, and a bit
/// apiece to recover the choice.
const MAX_CELLS: usize = 2_000_000;

/// Cells over all offers of one pass.
const PASS_CELLS: usize = 20_000_000;

/// One job the knapsack may put on the offer: its candidate there, VMs, weight and cost.
struct Item {
    job: usize,
    cand: usize,
    vms: usize,
    weight: u64,
    cost: f64,
}

impl Packing<'_, '_> {
    /// The cost search ([`Packing::improve_cost`]), then up to `rounds` times, while re-filling
    /// the offers changes the plan: the offers re-filled and the cost search again.
    pub fn improve_cost_refilled(&mut self, rounds: usize, deadline: Option<Instant>) {
        self.improve_cost(deadline);
        for _ in 0..rounds {
            if !self.repack(deadline) {
                break;
            }
            self.improve_cost(deadline);
        }
    }

    /// Re-fills every offer that holds gang jobs (see the module's doc), keeping a choice that
    /// places more weight, or the same for less; jobs the new choice leaves out go to their
    /// cheapest candidate with room elsewhere, if any. Returns whether the plan changed.
    fn repack(&mut self, deadline: Option<Instant>) -> bool {
        let inst = self.inst;
        let offers = inst.p.offers.len();
        // Per offer, the waiting gang jobs with a candidate on it and that candidate.
        let mut waiting: Vec<Vec<(usize, usize)>> = vec![Vec::new(); offers];
        for &j in &self.frame.order {
            if self.slot[j] == NONE {
                for (k, c) in inst.cands_of(j).iter().enumerate() {
                    waiting[c.offer].push((j, k));
                }
            }
        }
        let mut changed = false;
        let mut cells = 0;
        for (o, waiting) in waiting.iter().enumerate() {
            if self.on_offer[o].is_empty() || cells >= PASS_CELLS {
                continue;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            let on: Vec<usize> = self.on_offer[o].clone();
            let held: i64 = on.iter().map(|&j| i64::from(self.cand(j, self.slot[j] as usize).vms)).sum();
            // VMs the offer has room for with its own gang jobs taken out.
            let room =
                self.frame.offer_res[o].iter().map(|&(r, a)| (self.free[r] + a * held) / a).min().unwrap_or(i64::MAX);
            let item = |s: &Self, j: usize, k: usize| {
                let c = s.cand(j, k);
                Item { job: j, cand: k, vms: c.vms as usize, weight: weight(inst, j).round() as u64, cost: c.cost }
            };
            let mut items: Vec<Item> = on.iter().map(|&j| item(self, j, self.slot[j] as usize)).collect();
            let mut more: Vec<Item> =
                waiting.iter().filter(|&&(j, _)| self.slot[j] == NONE).map(|&(j, k)| item(self, j, k)).collect();
            // Its own jobs all fit already, so without a waiting one no choice is better.
            if more.is_empty() {
                continue;
            }
            let total: usize = items.iter().chain(&more).map(|i| i.vms).sum();
            let room = usize::try_from(room.max(0)).unwrap_or(usize::MAX).min(total);
            let width = room + 1;
            let fit = (MAX_CELLS / width).saturating_sub(items.len());
            if fit == 0 {
                continue;
            }
            if more.len() > fit {
                // Too many to count: the heaviest per VM, then the cheapest per VM.
                let per_vm = |i: &Item| (i.weight as f64 / i.vms as f64, i.cost / i.vms as f64);
                more.sort_by(|a, b| {
                    let ((wa, ca), (wb, cb)) = (per_vm(a), per_vm(b));
                    wb.total_cmp(&wa).then(ca.total_cmp(&cb)).then(a.job.cmp(&b.job))
                });
                more.truncate(fit);
            }
            let now = (items.iter().map(|i| i.weight).sum::<u64>(), items.iter().map(|i| i.cost).sum::<f64>());
            items.append(&mut more);
            cells += items.len() * width;
            let chosen = knapsack(&items, room);
            let best = chosen.iter().fold((0u64, 0.0), |(w, c), &i| (w + items[i].weight, c + items[i].cost));
            if best.0 < now.0 || (best.0 == now.0 && best.1 >= now.1 - EPS * now.1.max(1.0)) {
                continue;
            }
            let mut keep = vec![false; items.len()];
            for &i in &chosen {
                keep[i] = true;
            }
            let mut left = Vec::new();
            for (i, it) in items.iter().enumerate() {
                if !keep[i] && self.slot[it.job] != NONE {
                    self.remove(it.job);
                    left.push(it.job);
                }
            }
            for (i, it) in items.iter().enumerate() {
                if keep[i] && self.slot[it.job] == NONE {
                    debug_assert!(self.fits(it.job, it.cand), "the knapsack kept within the room");
                    self.put(it.job, it.cand);
                }
            }
            for j in left {
                self.insert(j);
            }
            changed = true;
        }
        crate::trace(|| format!("repack: changed {changed}, {cells} cells"));
        changed
    }
}

/// The items to take within `room` VMs: most weight, then least cost (a 0/1 knapsack by dynamic
/// programming over the VMs used; lexicographic values add, so it is exact).
fn knapsack(items: &[Item], room: usize) -> Vec<usize> {
    let width = room + 1;
    let words = width.div_ceil(64);
    let mut weight = vec![0u64; width];
    let mut cost = vec![0.0f64; width];
    let mut took = vec![0u64; items.len() * words];
    for (i, it) in items.iter().enumerate() {
        if it.vms > room {
            continue;
        }
        let bits = &mut took[i * words..(i + 1) * words];
        for v in (it.vms..width).rev() {
            let (w, c) = (weight[v - it.vms] + it.weight, cost[v - it.vms] + it.cost);
            if w > weight[v] || (w == weight[v] && c < cost[v] - EPS * cost[v].max(1.0)) {
                weight[v] = w;
                cost[v] = c;
                bits[v / 64] |= 1 << (v % 64);
            }
        }
    }
    let mut chosen = Vec::new();
    let mut v = room;
    for i in (0..items.len()).rev() {
        if took[i * words + v / 64] >> (v % 64) & 1 == 1 {
            chosen.push(i);
            v -= items[i].vms;
        }
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(vms: usize, weight: u64, cost: f64) -> Item {
        Item { job: 0, cand: 0, vms, weight, cost }
    }

    #[test]
    fn the_knapsack_takes_the_most_weight_then_the_least_cost() {
        // Room 4: {0} weighs 4 at cost 30; {1, 2} weigh 4 at cost 10; {3} weighs 3.
        let items = [item(4, 4, 30.0), item(2, 2, 5.0), item(2, 2, 5.0), item(1, 3, 1.0)];
        let mut chosen = knapsack(&items, 4);
        chosen.sort_unstable();
        // 3 (weight 3, 1 VM) + one of the 2-VM items (weight 2): 5 > 4.
        assert_eq!(chosen.iter().map(|&i| items[i].weight).sum::<u64>(), 5);
        assert_eq!(chosen.iter().map(|&i| items[i].vms).sum::<usize>(), 3);
        // Without the light job, the same weight for a third of the cost.
        let mut chosen = knapsack(&items[..3], 4);
        chosen.sort_unstable();
        assert_eq!(chosen, vec![1, 2]);
    }
}
