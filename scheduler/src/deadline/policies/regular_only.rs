//! `regular-only`: a regular VM in the home region from the start to the end.

use super::regular_or_best_effort;
use crate::deadline::policy::{Choice, DeadlinePolicy, TickView};

/// Regular from start to end in the home region: the cost every other policy is measured against.
/// (Without regular capacity in the home region it falls back to spot when available.)
#[derive(Debug, Default, Clone, Copy)]
pub struct RegularOnly;

impl DeadlinePolicy for RegularOnly {
    fn name(&self) -> &'static str {
        "regular-only"
    }

    fn choose(&mut self, view: &TickView<'_>) -> Choice {
        regular_or_best_effort(view)
    }
}
