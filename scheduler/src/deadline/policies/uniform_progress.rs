//! `uniform-progress`, the published NSDI'24 rule.

use super::{HOME, safety_net};
use crate::deadline::policy::{Choice, DeadlinePolicy, TickView};

/// Keeps progress at or above the straight line from zero (at the start) to the whole work (at the
/// deadline), evaluated at the start of each tick: spot in the home region whenever available;
/// without spot, regular only while behind the line; a running regular VM is left only once
/// progress is ahead of the line by two restart overheads; and the same safety net as `greedy`.
#[derive(Debug, Default, Clone)]
pub struct UniformProgress {
    latched: bool,
}

impl DeadlinePolicy for UniformProgress {
    fn name(&self) -> &'static str {
        "uniform-progress"
    }

    fn choose(&mut self, view: &TickView<'_>) -> Choice {
        if let Some(choice) = safety_net(view, &mut self.latched) {
            return choice;
        }
        let line =
            (i128::from(view.work_ms()) * i128::from(view.elapsed_ms()) / i128::from(view.deadline_ms().max(1))) as i64;
        let progress = view.progress_ms();
        let regular = Choice::Regular(HOME);
        if view.running() == regular && progress < line + 2 * view.overhead_ms() {
            return regular;
        }
        if view.spot_available(HOME) {
            Choice::Spot(HOME)
        } else if progress < line && view.regular_available(HOME) {
            regular
        } else {
            Choice::Idle
        }
    }
}
