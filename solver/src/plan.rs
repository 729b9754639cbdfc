//! What the solver answers: placements, the jobs it could not place and why, and solve statistics.

use serde::{Deserialize, Serialize};

use crate::priority::Priority;

/// How to solve.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// The strongest method in this build: LP relaxation, rounding and repair (default build), or an
    /// exact MILP through HiGHS (`--features highs`).
    #[default]
    Best,
    /// Priority order, cheapest feasible offer first: what a per-job broker does.
    Greedy,
    /// The control loop's method, in every build: the LP relaxation's plan at the maximum weight and
    /// least cost, rounded and repaired, without the Lagrangian heuristic and local search that `Best`
    /// adds on queues where shared quota binds. A round's plan is made again a minute later with what
    /// the cloud said, and on the bundled what-if weeks the search's extra weight did not pay: it
    /// changed 2 of the 94 rounds where quota bound, each time placing one long 8-GPU job where the rounding placed
    /// three short ones (weight 8 instead of 6), which cost the region-outage week $1,350 more and
    /// 9.5 hours of p99 wait (BENCHMARKS.md, "Queues that do not repeat").
    Round,
}

/// Solver settings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SolveOptions {
    /// Which method.
    pub method: Method,
    /// Wall-clock limit for the optimisation; when it is hit the greedy plan is returned (with
    /// `solver` saying so). `None` = no limit.
    pub time_limit_ms: Option<u64>,
}

/// The solver's answer. Deterministic: the same problem gives byte-identical JSON apart from `solve_ms`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// One entry per (job, offer) used, in job order then offer order.
    pub placements: Vec<Placement>,
    /// Every job not placed (and every non-gang job placed only in part), in job order.
    pub unplaced: Vec<Unplaced>,
    /// Σ priority × placed GPUs.
    pub placed_weight: f64,
    /// Σ of the placements' expected cost (USD).
    pub expected_cost: f64,
    /// Which method produced the plan: `lp-round`, `highs`, `greedy`, or `greedy (…)` when the optimiser
    /// fell back (time limit, solver failure).
    pub solver: String,
    /// True only when the bound proves the plan lexicographically optimal (max weight, then min cost),
    /// up to the LP solver's tolerance.
    pub optimal: bool,
    /// Proven relative gap: while the plan's weight is below the proven weight bound,
    /// `(bound − weight) / bound`; once the weight reaches it, `(cost − cost bound) / cost`.
    pub gap: f64,
    /// Wall-clock milliseconds spent solving (the only field that varies between identical runs).
    pub solve_ms: f64,
}

/// VMs of one offer given to one job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    /// The job's id.
    pub job: String,
    /// Offer region.
    pub region: String,
    /// Offer size.
    pub size: String,
    /// Offer priority.
    pub priority: Priority,
    /// VMs to create.
    pub vms: u32,
    /// GPUs counted for the job (≤ vms × gpus_per_vm: a non-gang job's last VM may be partly idle).
    pub gpus: u32,
    /// USD per hour for all these VMs (`vms × price_per_hour` of the offer).
    pub price_per_hour: f64,
    /// Expected USD: run cost, plus expected eviction cost for spot, plus egress.
    pub expected_cost: f64,
}

/// A job the plan leaves (at least partly) waiting, with the constraints that bind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unplaced {
    /// The job's id.
    pub job: String,
    /// Human-readable, most specific first, e.g.
    /// `no quota: eastus standardNCADSA100v4Family needs 192 vCPUs, 96 free`.
    pub reasons: Vec<String>,
}

impl Plan {
    /// The plan as pretty JSON (the `spillway plan --output json` format).
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).expect("a plan has only finite numbers and strings")
    }
}
