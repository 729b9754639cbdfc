//! Mixed fleets (#22): a job with a regular base (`regular_gpus`) asks the solver for the base on
//! regular VMs and the rest under its spot policy, each part drawing its own quota pools. Where the
//! plan puts a spot and a regular placement of such a job on the same region and size, the loop
//! asks for one fleet with both of Compute Fleet's priority profiles (one attempt, one fleet name)
//! rather than two fleets side by side: the job's attempt count stays a count of real fleets, and
//! a spot eviction leaves the regular part running in the same fleet. Pure.

use super::demand::DemandPart;
use crate::model::Priority;

/// How the round asks for a plan's placements: one fleet each, or, for a job with a regular base
/// ([`super::demand::regular_base`]), a spot and a regular placement on the same region and size
/// as one mixed fleet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Fleets<'p> {
    /// One placement, one fleet of its priority.
    One(&'p solver::Placement),
    /// A job's spot and regular placements on one region and size: one mixed fleet.
    Mixed {
        /// The spot placement (the fleet's main part).
        spot: &'p solver::Placement,
        /// The regular placement (the fleet's regular part).
        regular: &'p solver::Placement,
    },
}

/// The plan's placements as fleets, in the plan's order (a pair where its first placement was):
/// each placement of a job that `mixes` is paired with the next unpaired placement of the other
/// priority of the same job on the same region and size, and each placement is in one fleet.
pub(crate) fn pairs<'p>(placements: &'p [solver::Placement], mixes: impl Fn(&str) -> bool) -> Vec<Fleets<'p>> {
    let job_of = |p: &solver::Placement| DemandPart::parse(&p.job).0.to_string();
    let same_offer = |a: &solver::Placement, b: &solver::Placement| {
        a.region == b.region && a.size == b.size && a.priority != b.priority && job_of(a) == job_of(b)
    };
    let mut used = vec![false; placements.len()];
    let mut out = Vec::with_capacity(placements.len());
    for (i, p) in placements.iter().enumerate() {
        if used[i] {
            continue;
        }
        used[i] = true;
        let partner = (mixes(&job_of(p)) && p.vms > 0)
            .then(|| {
                (i + 1..placements.len()).find(|&j| !used[j] && placements[j].vms > 0 && same_offer(p, &placements[j]))
            })
            .flatten();
        match partner {
            Some(j) => {
                used[j] = true;
                let (spot, regular) =
                    if p.priority == Priority::Spot { (p, &placements[j]) } else { (&placements[j], p) };
                out.push(Fleets::Mixed { spot, regular });
            }
            None => out.push(Fleets::One(p)),
        }
    }
    out
}
