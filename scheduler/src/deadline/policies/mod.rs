//! The policies: the published baselines (`regular-only`, `greedy`, `uniform-progress`, from
//! "Can't Be Late", NSDI'24) and spillway's own (`spillway`).
//!
//! The baselines are single-region policies: they run in the first region listed (the job's home
//! region), as published. `spillway` uses every region.

mod greedy;
mod regular_only;
mod spillway;
mod uniform_progress;

pub use greedy::Greedy;
pub use regular_only::RegularOnly;
pub use spillway::{HistoryStats, Spillway};
pub use uniform_progress::UniformProgress;

use super::policy::{Choice, DeadlinePolicy, TickView};

/// Every policy name, in the order reports list them by default.
pub const NAMES: [&str; 4] = ["regular-only", "greedy", "uniform-progress", "spillway"];

/// A fresh instance of the named policy (one per run: policies keep per-run state).
pub fn make(name: &str) -> Option<Box<dyn DeadlinePolicy>> {
    Some(match name {
        "regular-only" => Box::new(RegularOnly),
        "greedy" => Box::new(Greedy::default()),
        "uniform-progress" => Box::new(UniformProgress::default()),
        "spillway" => Box::new(Spillway::default()),
        _ => return None,
    })
}

/// The home region of the single-region baselines.
const HOME: usize = 0;

/// The published safety net, shared by `greedy` and `uniform-progress` in the home region. Once
/// the slack is gone (`slack_ticks ≤ 0`: one more tick without progress would leave fewer whole
/// ticks than `ceil((remaining + overhead) / tick)`), keep a running spot VM while keeping it is
/// safe, else switch to regular and latch there until the end. Returns `None` while the net has
/// not triggered.
fn safety_net(view: &TickView<'_>, latched: &mut bool) -> Option<Choice> {
    if *latched {
        return Some(regular_or_best_effort(view));
    }
    if view.slack_ticks() > 0 {
        return None;
    }
    let stay = Choice::Spot(HOME);
    if view.running() == stay && view.is_safe(stay) {
        return Some(stay);
    }
    if view.regular_available(HOME) {
        *latched = true;
    }
    Some(regular_or_best_effort(view))
}

/// Regular in the home region; without regular capacity there, spot if available, else nothing.
fn regular_or_best_effort(view: &TickView<'_>) -> Choice {
    if view.regular_available(HOME) {
        Choice::Regular(HOME)
    } else if view.spot_available(HOME) {
        Choice::Spot(HOME)
    } else {
        Choice::Idle
    }
}
