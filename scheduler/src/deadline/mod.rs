//! Deadline-aware spot policies: ride spot VMs as long as they can and still meet a deadline,
//! across regions. The same policies drive the control loop (`control`, for deadline jobs that
//! may use spot) and the simulator's `spot-deadline` experiment (`simulator::spot_deadline`).
//!
//! A caller describes the job and the regions at the current tick in a [`TickView`] and asks the
//! policy for a [`Choice`]: spot in region `r`, regular in region `r`, or nothing. The policies are
//! in [`policies`]: the published baselines (`regular-only`, `greedy`, `uniform-progress`, from
//! "Can't Be Late", NSDI'24) and spillway's own (`spillway`, the default).

pub mod policies;
pub mod policy;

pub use policies::{Greedy, HistoryStats, NAMES, RegularOnly, Spillway, UniformProgress, make};
pub use policy::{Choice, DeadlinePolicy, RegionTick, TickView};

/// Which policy the control loop runs for deadline jobs (`ControlConfig::deadline_policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeadlinePolicyKind {
    /// Regular from start to end in the home region.
    RegularOnly,
    /// The published baseline: spot while it lasts, regular once the slack is gone.
    Greedy,
    /// The published NSDI'24 Uniform Progress rule.
    UniformProgress,
    /// Spillway's own multi-region policy (the default).
    #[default]
    Spillway,
}

impl DeadlinePolicyKind {
    /// Every kind, in the order of [`NAMES`].
    pub const ALL: [DeadlinePolicyKind; 4] = [
        DeadlinePolicyKind::RegularOnly,
        DeadlinePolicyKind::Greedy,
        DeadlinePolicyKind::UniformProgress,
        DeadlinePolicyKind::Spillway,
    ];

    /// The policy's name, as in experiment files (`"spillway"`, …).
    pub fn name(self) -> &'static str {
        match self {
            DeadlinePolicyKind::RegularOnly => "regular-only",
            DeadlinePolicyKind::Greedy => "greedy",
            DeadlinePolicyKind::UniformProgress => "uniform-progress",
            DeadlinePolicyKind::Spillway => "spillway",
        }
    }

    /// The kind of the named policy; `None` for an unknown name.
    pub fn from_name(name: &str) -> Option<DeadlinePolicyKind> {
        DeadlinePolicyKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// A fresh instance of this policy (one per job: policies keep per-job state).
    pub fn make(self) -> Box<dyn DeadlinePolicy> {
        match self {
            DeadlinePolicyKind::RegularOnly => Box::new(RegularOnly),
            DeadlinePolicyKind::Greedy => Box::new(Greedy::default()),
            DeadlinePolicyKind::UniformProgress => Box::new(UniformProgress::default()),
            DeadlinePolicyKind::Spillway => Box::new(Spillway::default()),
        }
    }
}

impl std::fmt::Display for DeadlinePolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view<'a>(regions: &'a [RegionTick<'a>], egress: &'a [f64]) -> TickView<'a> {
        TickView {
            regions,
            egress_usd_per_gb: egress,
            checkpoint_gb: 10.0,
            tick: 0,
            tick_ms: 3_600_000,
            work_ms: 4 * 3_600_000,
            deadline_ms: 10 * 3_600_000,
            overhead_ms: 360_000,
            progress_ms: 0,
            running: Choice::Idle,
            overhead_left_ms: 0,
            spot_loss_ms: 0,
            checkpoint_region: Some(0),
        }
    }

    fn region<'a>(name: &'a str, history: &'a [bool], observed: u64) -> RegionTick<'a> {
        RegionTick {
            name,
            regular_price: 3.0,
            spot_price: 1.0,
            regular_available: true,
            spot_history: history,
            spot_observed: observed,
        }
    }

    #[test]
    fn kinds_round_trip_through_their_names_and_match_the_policies() {
        for (kind, name) in DeadlinePolicyKind::ALL.into_iter().zip(NAMES) {
            assert_eq!(kind.name(), name);
            assert_eq!(DeadlinePolicyKind::from_name(name), Some(kind));
            assert_eq!(kind.make().name(), name);
            assert_eq!(make(name).map(|p| p.name()), Some(name));
        }
        assert_eq!(DeadlinePolicyKind::from_name("cheapest"), None);
        assert_eq!(DeadlinePolicyKind::default(), DeadlinePolicyKind::Spillway);
    }

    #[test]
    fn a_windowed_history_is_indexed_from_its_absolute_start() {
        let h = [true, false, true];
        let r = region("a", &h, 10);
        assert_eq!(r.history_start(), 7);
        assert_eq!(r.spot_at(6), None);
        assert_eq!(r.spot_at(8), Some(false));
        assert_eq!(r.spot_at(9), Some(true));
        assert_eq!(r.spot_at(10), None);
        let empty = region("b", &[], 10);
        let regions = [r, empty];
        let v = view(&regions, &[0.0, 0.02, 0.02, 0.0]);
        assert!(v.spot_available(0));
        assert!(!v.spot_available(1), "no history means no spot now");
        assert!((v.move_cost(1) - 0.2).abs() < 1e-12);
        assert_eq!(v.move_cost(0), 0.0);
    }

    #[test]
    fn history_stats_from_a_window_match_those_of_the_same_ticks_in_full() {
        let full = [true, true, false, false, true, true, true, false];
        let mut whole = HistoryStats::default();
        whole.update(&full[3..]);
        let mut windowed = HistoryStats::default();
        // The window holds the last 5 of 8 ticks seen; the first 3 were dropped before being seen.
        windowed.update_window(&region("a", &full[3..], 8));
        assert_eq!(windowed.seen(), 8);
        assert_eq!(windowed.mean_uptime_ticks(0.0), whole.mean_uptime_ticks(0.0));
        assert_eq!(windowed.mean_downtime_ticks(0.0), whole.mean_downtime_ticks(0.0));
        // Seen ticks are not counted twice when the window slides on by one.
        windowed.update_window(&region("a", &full[4..], 8));
        assert_eq!(windowed.mean_uptime_ticks(0.0), whole.mean_uptime_ticks(0.0));
    }

    #[test]
    fn spillway_waits_with_slack_and_runs_regular_when_the_slack_is_gone() {
        let never = [false; 4];
        let regions = [region("a", &never, 4)];
        let mut v = view(&regions, &[0.0]);
        let mut p = Spillway::default();
        assert_eq!(p.choose(&v), Choice::Idle, "6 h of slack: waiting is free");
        // 5 h left for 4 h of work plus a restart: the net forces regular.
        v.tick = 5;
        assert_eq!(p.choose(&v), Choice::Regular(0));
        // Spot back with slack: ride it.
        let up = [false, false, false, true];
        let regions = [region("a", &up, 4)];
        let mut v = view(&regions, &[0.0]);
        v.tick = 1;
        assert_eq!(Spillway::default().choose(&v), Choice::Spot(0));
    }
}
