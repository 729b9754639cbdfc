//! A benchmark instrument, never part of the product (issue #21): the offers as the simulated cloud
//! gave them before issue #22 made it honest, each with its exact free capacity and eviction rate
//! and no published signal, so that today's control loop can be timed on the same work as the loop
//! before the observe / decide / act redesign (BENCHMARKS.md). Compiled only with the simulator's
//! `bench-oracle` feature, which nothing in the workspace enables: `tests/sim_cloud.rs`' honesty
//! test fails if anything does, and `tests/layering.rs` checks that this file stays behind it.

use scheduler::model::{Offer, Priority};

use super::world::World;

/// Every sold offer with the hidden free capacity and exact eviction rate.
pub(super) fn offers(w: &World) -> Vec<Offer> {
    let used = w.capacity_used_by_offer();
    let mut out = Vec::new();
    for (region, name, row) in w.offered() {
        for priority in [Priority::Regular, Priority::Spot] {
            let key = (region.clone(), name.clone(), priority);
            let running = used.get(&(region.as_str(), name.as_str(), priority)).copied().unwrap_or(0);
            out.push(Offer {
                capacity_vms: Some(w.capacity_free_given(&key, running)),
                eviction_rate_per_hour: w.eviction_rate(&key),
                region: key.0,
                size: key.1,
                priority,
                price_per_hour: row.for_priority(priority),
                eviction_band: None,
                placement_score: None,
            });
        }
    }
    out
}
