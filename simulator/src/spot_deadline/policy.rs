//! The interface between the tick engine and a deadline policy, and the exact slack arithmetic the
//! policies share.
//!
//! Every tick the engine hands the policy a [`TickView`]: the job's state (progress, time left, the
//! VM it runs on and how much of that VM's restart overhead is still due) and, per region, prices,
//! regular capacity, and spot availability *up to and including the current tick*. The view has no
//! accessor for a later tick, so a policy cannot peek at the future.
//!
//! ## Slack, in whole ticks (the safety net's arithmetic)
//! With `T` the tick, `rem` the remaining work, `O` the restart overhead and `D` the deadline (all
//! measured from the run's start), at tick `i`:
//! - `needed = ceil((rem + O) / T)`: ticks a regular VM started now needs (one restart overhead);
//! - `left = floor((D − i·T) / T)`: whole ticks before the deadline;
//! - `slack = left − needed`: ticks that may still pass without progress.
//!
//! The net triggers when `slack ≤ 0`: one more tick without progress would leave fewer whole ticks
//! than a regular VM needs. A choice is *safe* ([`TickView::is_safe`]) when, even if spot vanished
//! at the next tick and never came back, a regular VM could still finish by the deadline: after the
//! progress the choice makes in this tick, `ceil((rem' + O') / T) ≤ left − 1`, where `O'` is a
//! fresh restart overhead for spot or idle, and the VM's remaining overhead for regular (which
//! simply continues). A policy that only ever takes safe choices, starting from a feasible job,
//! meets its deadline whenever regular capacity is available: the regular fallback stays feasible by
//! induction.

use super::experiment::Experiment;

/// What a job holds during one tick. Regions are indices into [`Experiment::regions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Choice {
    /// A spot VM in this region (only valid while its trace says available).
    Spot(usize),
    /// A regular VM in this region (only valid if the region has regular capacity).
    Regular(usize),
    /// Nothing: no VM, no cost, no progress.
    Idle,
}

impl Choice {
    /// The region a running choice is in; `None` for [`Choice::Idle`].
    pub fn region(self) -> Option<usize> {
        match self {
            Choice::Spot(r) | Choice::Regular(r) => Some(r),
            Choice::Idle => None,
        }
    }
}

/// A deadline-aware spot policy. A fresh instance runs each run (policies may keep state, such as a
/// latch, across the ticks of one run).
pub trait DeadlinePolicy {
    /// The name used in experiment files and reports.
    fn name(&self) -> &'static str;
    /// Picks what the job holds during the current tick.
    fn choose(&mut self, view: &TickView<'_>) -> Choice;
}

/// Everything a policy may know at the start of a tick (after a lost spot VM has been removed).
#[derive(Clone, Debug)]
pub struct TickView<'a> {
    pub(crate) experiment: &'a Experiment,
    /// Trace tick of now.
    pub(crate) now: usize,
    /// Ticks since the run started.
    pub(crate) tick: usize,
    pub(crate) tick_ms: i64,
    pub(crate) work_ms: i64,
    pub(crate) deadline_ms: i64,
    pub(crate) overhead_ms: i64,
    pub(crate) progress_ms: i64,
    pub(crate) running: Choice,
    pub(crate) overhead_left_ms: i64,
    pub(crate) checkpoint_region: Option<usize>,
}

impl<'a> TickView<'a> {
    /// Ticks since the run started (0 for the first tick).
    pub fn tick(&self) -> usize {
        self.tick
    }
    /// Length of a tick in milliseconds.
    pub fn tick_ms(&self) -> i64 {
        self.tick_ms
    }
    /// Time since the run started, in milliseconds.
    pub fn elapsed_ms(&self) -> i64 {
        self.tick as i64 * self.tick_ms
    }
    /// Time until the deadline, in milliseconds (negative once it has passed).
    pub fn time_left_ms(&self) -> i64 {
        self.deadline_ms - self.elapsed_ms()
    }
    /// The deadline, in milliseconds after the run's start.
    pub fn deadline_ms(&self) -> i64 {
        self.deadline_ms
    }
    /// The whole job's work, in milliseconds of running time.
    pub fn work_ms(&self) -> i64 {
        self.work_ms
    }
    /// Work done so far (never lost).
    pub fn progress_ms(&self) -> i64 {
        self.progress_ms
    }
    /// Work still to do.
    pub fn remaining_ms(&self) -> i64 {
        self.work_ms - self.progress_ms
    }
    /// The restart overhead every start spends without progress.
    pub fn overhead_ms(&self) -> i64 {
        self.overhead_ms
    }
    /// What the job holds right now ([`Choice::Idle`] after a spot loss at this tick's start).
    pub fn running(&self) -> Choice {
        self.running
    }
    /// Restart overhead the running VM still has to spend before it makes progress.
    pub fn overhead_left_ms(&self) -> i64 {
        self.overhead_left_ms
    }
    /// The region holding the checkpoint (where the job last ran); `None` before the first start.
    pub fn checkpoint_region(&self) -> Option<usize> {
        self.checkpoint_region
    }
    /// Number of regions.
    pub fn regions(&self) -> usize {
        self.experiment.regions.len()
    }
    /// A region's name.
    pub fn region_name(&self, r: usize) -> &'a str {
        &self.experiment.regions[r].name
    }
    /// Regular price of region `r`, USD per VM-hour.
    pub fn regular_price(&self, r: usize) -> f64 {
        self.experiment.regions[r].regular_price_per_hour
    }
    /// Whether region `r` has regular capacity.
    pub fn regular_available(&self, r: usize) -> bool {
        self.experiment.regions[r].regular_available
    }
    /// Spot price of region `r` in the current tick, USD per VM-hour.
    pub fn spot_price(&self, r: usize) -> f64 {
        self.experiment.regions[r].spot_price_at(self.now)
    }
    /// Whether a spot VM may run in region `r` during the current tick.
    pub fn spot_available(&self, r: usize) -> bool {
        self.experiment.regions[r].spot_available[self.now]
    }
    /// Spot availability of region `r` from the beginning of its trace up to and including now.
    pub fn spot_history(&self, r: usize) -> &'a [bool] {
        &self.experiment.regions[r].spot_available[..=self.now]
    }
    /// USD to move the checkpoint from the region holding it to `to` (0 before the first start).
    pub fn move_cost(&self, to: usize) -> f64 {
        match self.checkpoint_region {
            Some(from) => self.experiment.job.checkpoint_gb * self.experiment.egress_usd_per_gb(from, to),
            None => 0.0,
        }
    }

    /// Restart overhead `choice` spends in this tick before any progress: the running VM's
    /// remainder if it continues, a full overhead if it starts, nothing if idle.
    pub fn overhead_due(&self, choice: Choice) -> i64 {
        match choice {
            Choice::Idle => 0,
            c if c == self.running => self.overhead_left_ms,
            _ => self.overhead_ms,
        }
    }

    /// Progress `choice` makes during this tick (the engine's exact rule).
    pub fn progress_in_tick(&self, choice: Choice) -> i64 {
        if choice == Choice::Idle {
            return 0;
        }
        (self.tick_ms - self.overhead_due(choice).min(self.tick_ms)).max(0).min(self.remaining_ms())
    }

    /// `ceil((remaining + extra) / tick)`: whole ticks a VM needs for the remaining work plus `extra`.
    pub fn needed_ticks(&self, remaining_ms: i64, extra_ms: i64) -> i64 {
        let need = remaining_ms + extra_ms;
        if need <= 0 { 0 } else { (need + self.tick_ms - 1) / self.tick_ms }
    }

    /// `floor((deadline − elapsed) / tick)`: whole ticks before the deadline (negative once past).
    pub fn ticks_left(&self) -> i64 {
        self.time_left_ms().div_euclid(self.tick_ms)
    }

    /// `ticks_left − ceil((remaining + overhead) / tick)`: ticks that may still pass without progress
    /// before a regular VM must start. The safety net triggers at `≤ 0`.
    pub fn slack_ticks(&self) -> i64 {
        self.ticks_left() - self.needed_ticks(self.remaining_ms(), self.overhead_ms)
    }

    /// Whether `choice` keeps the deadline reachable on regular capacity alone, whatever spot does
    /// from the next tick on (see the module doc).
    pub fn is_safe(&self, choice: Choice) -> bool {
        let progress = self.progress_in_tick(choice);
        let rem_after = self.remaining_ms() - progress;
        if rem_after <= 0 {
            // Finishes in this tick: in time if the finish instant is.
            return self.elapsed_ms() + self.overhead_due(choice).min(self.tick_ms) + self.remaining_ms()
                <= self.deadline_ms;
        }
        let extra = match choice {
            Choice::Regular(_) => (self.overhead_due(choice) - self.tick_ms).max(0),
            _ => self.overhead_ms,
        };
        // `needed ≤ left − 1`, after this tick.
        self.needed_ticks(rem_after, extra) < self.ticks_left()
    }
}
