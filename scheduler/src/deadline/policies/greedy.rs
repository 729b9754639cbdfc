//! `greedy`, the published baseline.

use super::{HOME, safety_net};
use crate::deadline::policy::{Choice, DeadlinePolicy, TickView};

/// Spot in the home region whenever available, otherwise nothing; once the safety net triggers
/// (see [`super::safety_net`]), regular until the end, keeping a running spot VM as long as that
/// is safe.
#[derive(Debug, Default, Clone)]
pub struct Greedy {
    latched: bool,
}

impl DeadlinePolicy for Greedy {
    fn name(&self) -> &'static str {
        "greedy"
    }

    fn choose(&mut self, view: &TickView<'_>) -> Choice {
        if let Some(choice) = safety_net(view, &mut self.latched) {
            return choice;
        }
        if view.spot_available(HOME) { Choice::Spot(HOME) } else { Choice::Idle }
    }
}
