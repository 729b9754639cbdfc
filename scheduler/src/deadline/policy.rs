//! The interface between whatever runs a deadline job (the simulator's tick engine, the control
//! loop) and a deadline policy, and the exact slack arithmetic the policies share.
//!
//! Every tick the caller hands the policy a [`TickView`]: the job's state (progress, time left, the
//! VM it runs on and how much of that VM's restart overhead is still due) and, per region
//! ([`RegionTick`]), prices, regular capacity, and spot availability *up to and including the
//! current tick*. The view has no accessor for a later tick, so a policy cannot peek at the future.
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
//! simply continues). Where an eviction loses work (the control loop: work since the last
//! checkpoint), `rem'` of a spot choice and `rem` of the slack include that loss
//! ([`TickView::spot_loss_ms`]); the simulator's experiments never lose progress (loss 0). A policy that only ever takes safe choices, starting from a feasible job,
//! meets its deadline whenever regular capacity is available: the regular fallback stays feasible by
//! induction.

/// What a job holds during one tick. Regions are indices into [`TickView::regions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Choice {
    /// A spot VM in this region (only valid while spot is available there).
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

/// A deadline-aware spot policy. A fresh instance runs each job (policies may keep state, such as a
/// latch or incremental history statistics, across the ticks of one job). `Send + Sync` because
/// the control loop keeps one per job in the state its tasks share.
pub trait DeadlinePolicy: Send + Sync {
    /// The name used in experiment files, configuration and reports.
    fn name(&self) -> &'static str;
    /// Picks what the job holds during the current tick.
    fn choose(&mut self, view: &TickView<'_>) -> Choice;
}

/// One region as a policy sees it at the current tick.
#[derive(Clone, Copy, Debug)]
pub struct RegionTick<'a> {
    /// The region's name.
    pub name: &'a str,
    /// USD per hour of a regular VM (for the whole job) in this region.
    pub regular_price: f64,
    /// USD per hour of a spot VM (for the whole job) in this region during the current tick.
    pub spot_price: f64,
    /// Whether a regular VM may be started (or kept) here.
    pub regular_available: bool,
    /// Spot availability, one entry per tick, ending with the current tick. It may be a suffix of
    /// the whole history (a bounded window): `spot_observed` says how long the whole history is.
    /// Empty when spot is never offered here for this job (spot is then unavailable now).
    pub spot_history: &'a [bool],
    /// Ticks observed since the history began, including those no longer in `spot_history`; the
    /// first entry of `spot_history` is tick `spot_observed − spot_history.len()` of the history.
    pub spot_observed: u64,
}

impl RegionTick<'_> {
    /// Absolute index (in ticks since the history began) of the first entry of `spot_history`.
    pub fn history_start(&self) -> u64 {
        self.spot_observed.saturating_sub(self.spot_history.len() as u64)
    }

    /// Spot availability at absolute tick `t` of the history, if that tick is in the window.
    pub fn spot_at(&self, t: u64) -> Option<bool> {
        let start = self.history_start();
        if t < start {
            return None;
        }
        self.spot_history.get((t - start) as usize).copied()
    }
}

/// Everything a policy may know at the start of a tick (after a lost spot VM has been removed).
/// The caller fills the fields; policies read them through the methods.
#[derive(Clone, Copy, Debug)]
pub struct TickView<'a> {
    /// The regions, indexed by [`Choice`]; the first is the job's home region (where the
    /// single-region baselines run).
    pub regions: &'a [RegionTick<'a>],
    /// USD per GB to move the checkpoint between regions, row-major: `egress[from × n + to]` with
    /// `n = regions.len()` (0 on the diagonal).
    pub egress_usd_per_gb: &'a [f64],
    /// Size of the checkpoint moved on a change of region, GB.
    pub checkpoint_gb: f64,
    /// Ticks since the run started (0 for the first tick).
    pub tick: usize,
    /// Length of a tick in milliseconds (at least 1).
    pub tick_ms: i64,
    /// The whole job's work, in milliseconds of running time.
    pub work_ms: i64,
    /// The deadline, in milliseconds after the run's start.
    pub deadline_ms: i64,
    /// The restart overhead every start spends without progress.
    pub overhead_ms: i64,
    /// Work done so far (never lost).
    pub progress_ms: i64,
    /// What the job holds right now ([`Choice::Idle`] after a spot loss at this tick's start).
    pub running: Choice,
    /// Restart overhead the running VM still has to spend before it makes progress.
    pub overhead_left_ms: i64,
    /// Work a spot VM lost at the next tick would take with it (work since the last checkpoint);
    /// 0 where progress is never lost, as in the simulator's experiments.
    pub spot_loss_ms: i64,
    /// The region holding the checkpoint (where the job last ran); `None` before the first start.
    pub checkpoint_region: Option<usize>,
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
        self.regions.len()
    }
    /// A region's name.
    pub fn region_name(&self, r: usize) -> &'a str {
        self.regions[r].name
    }
    /// Regular price of region `r`, USD per VM-hour.
    pub fn regular_price(&self, r: usize) -> f64 {
        self.regions[r].regular_price
    }
    /// Whether region `r` has regular capacity.
    pub fn regular_available(&self, r: usize) -> bool {
        self.regions[r].regular_available
    }
    /// Spot price of region `r` in the current tick, USD per VM-hour.
    pub fn spot_price(&self, r: usize) -> f64 {
        self.regions[r].spot_price
    }
    /// Whether a spot VM may run in region `r` during the current tick (the last history entry).
    pub fn spot_available(&self, r: usize) -> bool {
        self.regions[r].spot_history.last().copied().unwrap_or(false)
    }
    /// Spot availability of region `r` up to and including now (possibly a bounded window; see
    /// [`RegionTick::spot_history`]).
    pub fn spot_history(&self, r: usize) -> &'a [bool] {
        self.regions[r].spot_history
    }
    /// USD per GB from region `from` to region `to` (0 if the table does not cover the pair).
    pub fn egress_usd_per_gb(&self, from: usize, to: usize) -> f64 {
        self.egress_usd_per_gb.get(from * self.regions.len() + to).copied().unwrap_or(0.0)
    }
    /// USD to move the checkpoint from the region holding it to `to` (0 before the first start).
    pub fn move_cost(&self, to: usize) -> f64 {
        match self.checkpoint_region {
            Some(from) => self.checkpoint_gb * self.egress_usd_per_gb(from, to),
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

    /// Work a spot VM lost at the next tick would take with it.
    pub fn spot_loss_ms(&self) -> i64 {
        self.spot_loss_ms
    }

    /// `ticks_left − ceil((remaining + spot loss + overhead) / tick)`: ticks that may still pass
    /// without progress before a regular VM must start. The safety net triggers at `≤ 0`.
    pub fn slack_ticks(&self) -> i64 {
        self.ticks_left() - self.needed_ticks(self.remaining_ms() + self.spot_loss_ms, self.overhead_ms)
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
        let (extra, lost) = match choice {
            Choice::Regular(_) => ((self.overhead_due(choice) - self.tick_ms).max(0), 0),
            Choice::Spot(_) => (self.overhead_ms, self.spot_loss_ms),
            Choice::Idle => (self.overhead_ms, 0),
        };
        // `needed ≤ left − 1`, after this tick (and after losing the unsaved work with spot).
        self.needed_ticks(rem_after + lost, extra) < self.ticks_left()
    }
}
