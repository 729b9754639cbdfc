//! A circuit breaker per region: a region that keeps failing is shunned for a while.
//!
//! Closed → (too many failures in the window) → Open for a cool-down → HalfOpen: one probe
//! placement may go there; its success closes the breaker, its failure opens it again. While a
//! region is open its offers rank last, so work goes there only when nothing else can take it.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

/// Breaker settings.
#[derive(Debug, Clone, Copy)]
pub struct BreakerConfig {
    /// Failures within `window_ms` that open the breaker.
    pub threshold: usize,
    /// The window failures are counted in.
    pub window_ms: i64,
    /// How long the breaker stays open.
    pub cooldown_ms: i64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig { threshold: 3, window_ms: 10 * 60_000, cooldown_ms: 15 * 60_000 }
    }
}

/// A region's breaker state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum BreakerState {
    /// Healthy.
    Closed,
    /// Shunned until the given time.
    Open {
        /// Unix milliseconds.
        until_ms: i64,
    },
    /// Cool-down over: one probe allowed.
    HalfOpen,
}

/// Breakers for every region that has failed.
#[derive(Debug, Default)]
pub struct RegionBreakers {
    config: BreakerConfig,
    failures: BTreeMap<String, VecDeque<i64>>,
    open_until: BTreeMap<String, i64>,
    probing: BTreeMap<String, bool>,
}

impl RegionBreakers {
    /// Breakers with the given settings.
    pub fn new(config: BreakerConfig) -> Self {
        RegionBreakers { config, ..Default::default() }
    }

    /// The state of a region at `now_ms`.
    pub fn state(&self, region: &str, now_ms: i64) -> BreakerState {
        match self.open_until.get(region) {
            Some(&until) if now_ms < until => BreakerState::Open { until_ms: until },
            Some(_) => BreakerState::HalfOpen,
            None => BreakerState::Closed,
        }
    }

    /// True when placements in the region should rank last now: open, or half-open with its
    /// one probe already out.
    pub fn shunned(&self, region: &str, now_ms: i64) -> bool {
        match self.state(region, now_ms) {
            BreakerState::Closed => false,
            BreakerState::Open { .. } => true,
            BreakerState::HalfOpen => self.probing.get(region).copied().unwrap_or(false),
        }
    }

    /// Notes that a placement went to the region (the probe, when half-open).
    pub fn record_attempt(&mut self, region: &str, now_ms: i64) {
        if self.state(region, now_ms) == BreakerState::HalfOpen {
            self.probing.insert(region.to_string(), true);
        }
    }

    /// Records a failure in a region; returns true when it opened the breaker.
    pub fn record_failure(&mut self, region: &str, now_ms: i64) -> bool {
        let state = self.state(region, now_ms);
        if state == BreakerState::HalfOpen {
            self.open_until.insert(region.to_string(), now_ms + self.config.cooldown_ms);
            self.probing.remove(region);
            return true;
        }
        let q = self.failures.entry(region.to_string()).or_default();
        q.push_back(now_ms);
        while q.front().is_some_and(|&t| t < now_ms - self.config.window_ms) {
            q.pop_front();
        }
        if matches!(state, BreakerState::Closed) && q.len() >= self.config.threshold {
            self.open_until.insert(region.to_string(), now_ms + self.config.cooldown_ms);
            q.clear();
            return true;
        }
        false
    }

    /// Records a success: closes a half-open breaker.
    pub fn record_success(&mut self, region: &str, now_ms: i64) {
        if self.state(region, now_ms) == BreakerState::HalfOpen {
            self.open_until.remove(region);
            self.probing.remove(region);
        }
    }

    /// Every region not closed, with its state.
    pub fn snapshot(&self, now_ms: i64) -> Vec<(String, BreakerState)> {
        self.open_until.keys().map(|r| (r.clone(), self.state(r, now_ms))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_threshold_then_half_opens_and_closes_on_success() {
        let mut b = RegionBreakers::new(BreakerConfig { threshold: 3, window_ms: 1_000, cooldown_ms: 5_000 });
        assert!(!b.record_failure("eastus", 0));
        assert!(!b.record_failure("eastus", 100));
        assert!(b.record_failure("eastus", 200));
        assert_eq!(b.state("eastus", 300), BreakerState::Open { until_ms: 5_200 });
        assert!(b.shunned("eastus", 300));
        assert_eq!(b.state("eastus", 5_200), BreakerState::HalfOpen);
        assert!(!b.shunned("eastus", 5_200), "the probe may go");
        b.record_attempt("eastus", 5_200);
        assert!(b.shunned("eastus", 5_201), "only one probe at a time");
        b.record_success("eastus", 5_300);
        assert_eq!(b.state("eastus", 5_300), BreakerState::Closed);
    }

    #[test]
    fn failures_outside_the_window_do_not_count_and_a_failed_probe_reopens() {
        let mut b = RegionBreakers::new(BreakerConfig { threshold: 2, window_ms: 1_000, cooldown_ms: 5_000 });
        b.record_failure("westus", 0);
        assert!(!b.record_failure("westus", 2_000));
        assert!(b.record_failure("westus", 2_500));
        assert!(b.record_failure("westus", 7_600), "a failed probe reopens");
        assert_eq!(b.state("westus", 7_700), BreakerState::Open { until_ms: 12_600 });
    }
}
