//! `spillway`: spillway's own deadline-aware spot policy.

use crate::deadline::policy::{Choice, DeadlinePolicy, RegionTick, TickView};

/// Prior pseudo-observation for the history estimates: one spot run of this many hours, up and
/// down, so that a trace with no history yet reads as "one hour up, one hour down".
const PRIOR_RUN_HOURS: f64 = 1.0;

/// Spillway's policy. Every tick:
///
/// 1. **Only safe choices** ([`TickView::is_safe`]): a choice is taken only if, even if spot vanished
///    everywhere from the next tick on, a regular VM could still finish by the deadline, with
///    `ceil((remaining + overhead) / tick) ≤ ticks left` in whole ticks. This is the safety net with
///    exact slack accounting; it is what guarantees every deadline when regular capacity exists.
/// 2. **Spot wherever it pays**: among the regions whose spot is available (and safe), take the one
///    with the lowest expected cost per hour of progress over its expected spot run
///    `U` (the mean observed uptime of that region so far: up ticks seen ÷ (losses seen + 1), with a
///    one-hour prior; never the future):
///    `(egress + spot price × U [+ leave penalty]) / (U − overhead)` for a new start, and just the
///    spot price for the VM already running. A new start pays its overhead and its checkpoint move,
///    so the job stays on a running spot VM unless another region saves more than the move costs:
///    that is the hysteresis against thrashing between regions. When the job runs on regular, the
///    leave penalty adds the restart overhead it will pay on regular after the spot VM is lost, and
///    the switch happens only if that spot cost is below the regular price: a short spot window is
///    not worth leaving a running regular VM for. A job waiting with nothing running does not pay
///    egress to chase spot in another region when the spare slack (below) covers the expected
///    outage (mean observed downtime) of the region that holds its checkpoint: waiting is free.
/// 3. **Idle only with slack to spare**: without spot, wait (pay nothing) only while the slack left
///    after this tick stays at or above a *reserve*: the slack the rest of the job is expected to
///    spend on interruptions, `(remaining work ÷ U_any) × 2 × overhead` (one restart on regular and
///    one back to spot per expected loss, `U_any` being the mean uptime of "spot available in some
///    region"). Greedy spends all its slack waiting early and then sits on regular to the end even
///    when spot comes back; keeping the reserve lets spillway return to spot late in the job. A
///    running regular VM is stopped to wait only if the spare slack beyond the reserve covers the
///    expected outage (mean observed downtime), so it is not stopped and restarted within one outage.
/// 4. **Otherwise regular**, in the region where finishing costs least: move cost plus regular price
///    × (remaining work + restart overhead due).
#[derive(Debug, Default, Clone)]
pub struct Spillway {
    regions: Vec<HistoryStats>,
    any: HistoryStats,
}

/// Counts over an availability history, updated incrementally as the history grows.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct HistoryStats {
    seen: usize,
    up: u64,
    down: u64,
    losses: u64,
    recoveries: u64,
    last: Option<bool>,
}

impl HistoryStats {
    /// Adds the next observed tick.
    pub fn push(&mut self, available: bool) {
        if available {
            self.up += 1;
        } else {
            self.down += 1;
        }
        match (self.last, available) {
            (Some(true), false) => self.losses += 1,
            (Some(false), true) => self.recoveries += 1,
            _ => {}
        }
        self.last = Some(available);
        self.seen += 1;
    }

    /// Adds the ticks of `history` not seen yet (`history` is the whole history so far).
    pub fn update(&mut self, history: &[bool]) {
        for &a in history.iter().skip(self.seen) {
            self.push(a);
        }
    }

    /// Adds the ticks of a region's (possibly windowed) history not seen yet. Ticks that left the
    /// window before they were seen are skipped: the estimate then starts from the window.
    pub fn update_window(&mut self, region: &RegionTick<'_>) {
        let start = region.history_start() as usize;
        self.seen = self.seen.max(start);
        for t in self.seen..region.spot_observed as usize {
            self.push(region.spot_at(t as u64).unwrap_or(false));
        }
    }

    /// Ticks observed so far (absolute: windows skipped count as seen).
    pub fn seen(&self) -> usize {
        self.seen
    }

    /// Mean length of a spot run (available stretch), in ticks: the censored estimate
    /// `(up ticks + prior) / (losses + 1)`.
    pub fn mean_uptime_ticks(&self, prior_ticks: f64) -> f64 {
        (self.up as f64 + prior_ticks) / (self.losses as f64 + 1.0)
    }

    /// Mean length of an outage, in ticks, estimated the same way.
    pub fn mean_downtime_ticks(&self, prior_ticks: f64) -> f64 {
        (self.down as f64 + prior_ticks) / (self.recoveries as f64 + 1.0)
    }
}

impl Spillway {
    fn observe(&mut self, view: &TickView<'_>) {
        let n = view.regions();
        self.regions.resize_with(n, HistoryStats::default);
        for (stats, region) in self.regions.iter_mut().zip(view.regions) {
            stats.update_window(region);
        }
        // "Spot available in some region", over the ticks every window covers from its start.
        let observed = view.regions.iter().map(|r| r.spot_observed).max().unwrap_or(0) as usize;
        let first = view
            .regions
            .iter()
            .filter(|r| !r.spot_history.is_empty())
            .map(|r| r.history_start() as usize)
            .min()
            .unwrap_or(observed);
        self.any.seen = self.any.seen.max(first);
        for t in self.any.seen..observed {
            self.any.push(view.regions.iter().any(|r| r.spot_at(t as u64) == Some(true)));
        }
    }
}

impl DeadlinePolicy for Spillway {
    fn name(&self) -> &'static str {
        "spillway"
    }

    fn choose(&mut self, view: &TickView<'_>) -> Choice {
        self.observe(view);
        let n = view.regions();
        let tick_h = view.tick_ms() as f64 / 3_600_000.0;
        let prior = PRIOR_RUN_HOURS / tick_h;
        let overhead_h = view.overhead_ms() as f64 / 3_600_000.0;
        let remaining_h = view.remaining_ms() as f64 / 3_600_000.0;
        let any_regular = (0..n).any(|r| view.regular_available(r));
        let running = view.running();

        // 2. Spot wherever it pays.
        let leave_penalty = match running {
            Choice::Regular(x) => overhead_h * view.regular_price(x),
            _ => 0.0,
        };
        let spot_cost = |r: usize| -> f64 {
            let choice = Choice::Spot(r);
            if running == choice {
                return view.spot_price(r);
            }
            let run_h = (self.regions[r].mean_uptime_ticks(prior) * tick_h).min(remaining_h + overhead_h);
            let productive_h = run_h - overhead_h;
            if productive_h <= 0.0 {
                return f64::INFINITY;
            }
            (view.move_cost(r) + view.spot_price(r) * run_h + leave_penalty) / productive_h
        };
        let best_spot = (0..n)
            .filter(|&r| view.spot_available(r) && (!any_regular || view.is_safe(Choice::Spot(r))))
            .map(|r| (r, spot_cost(r)))
            .filter(|(_, c)| c.is_finite())
            .min_by(|a, b| a.1.total_cmp(&b.1));
        // Slack left after an idle tick beyond the reserve (None if idling is not safe).
        let spare = view.is_safe(Choice::Idle).then(|| {
            let u_any_h = self.any.mean_uptime_ticks(prior) * tick_h;
            let expected_losses = remaining_h / u_any_h;
            let reserve = (expected_losses * 2.0 * overhead_h / tick_h).ceil() as i64;
            view.slack_ticks() - 1 - reserve
        });
        if let Some((r, cost)) = best_spot {
            match running {
                Choice::Regular(x) if cost >= view.regular_price(x) => {
                    // Not worth leaving regular for this spot window: stay.
                    return Choice::Regular(x);
                }
                Choice::Idle if view.move_cost(r) > 0.0 => {
                    // Moving the checkpoint costs egress; waiting for spot to return where the
                    // checkpoint is costs nothing if the spare slack covers the expected outage.
                    let home = view.checkpoint_region().unwrap_or(r);
                    if !view.spot_available(home)
                        && spare.is_some_and(|s| s as f64 >= self.regions[home].mean_downtime_ticks(prior))
                    {
                        return Choice::Idle;
                    }
                    return Choice::Spot(r);
                }
                _ => return Choice::Spot(r),
            }
        }
        if !any_regular {
            return Choice::Idle;
        }

        // 3. Idle only with slack to spare.
        if let Some(spare) = spare {
            let wait = match running {
                Choice::Regular(_) => spare as f64 >= self.any.mean_downtime_ticks(prior),
                _ => spare >= 0,
            };
            if wait {
                return Choice::Idle;
            }
        }

        // 4. Regular where finishing costs least (safe choices first).
        let finish_cost = |r: usize| {
            let c = Choice::Regular(r);
            view.move_cost(r)
                + view.regular_price(r) * (view.remaining_ms() + view.overhead_due(c)) as f64 / 3_600_000.0
        };
        let regular = (0..n).filter(|&r| view.regular_available(r));
        let safe = regular
            .clone()
            .filter(|&r| view.is_safe(Choice::Regular(r)))
            .min_by(|&a, &b| finish_cost(a).total_cmp(&finish_cost(b)));
        safe.or_else(|| regular.min_by_key(|&r| (view.overhead_due(Choice::Regular(r)), (finish_cost(r) * 1e6) as i64)))
            .map_or(Choice::Idle, Choice::Regular)
    }
}
