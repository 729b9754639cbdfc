//! The two capacity signals Azure publishes about spot, and the one rule that turns them into the
//! scheduler's prior. Azure never says how many VMs an offer has free nor its exact eviction rate;
//! it publishes an eviction-rate *band* per size × region (Azure Resource Graph, `SpotResources`,
//! `microsoft.compute/skuspotevictionrate/location`, `properties.evictionRate`) and a spot
//! *placement score* per region × size (`…/placementScores/spot/generate`): its own estimate of how
//! likely a spot request succeeds and how long the VMs live. Both are priors: the control loop
//! still learns what they miss from allocation failures and evictions (blocked offers).

use serde::{Deserialize, Serialize};

/// A spot eviction-rate band, in percent of VMs evicted per hour, as Resource Graph gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EvictionBand {
    /// `0-5`
    #[serde(rename = "0-5")]
    Under5,
    /// `5-10`
    #[serde(rename = "5-10")]
    From5To10,
    /// `10-15`
    #[serde(rename = "10-15")]
    From10To15,
    /// `15-20`
    #[serde(rename = "15-20")]
    From15To20,
    /// `20+`
    #[serde(rename = "20+")]
    Over20,
}

impl EvictionBand {
    /// Every band, lowest first.
    pub const ALL: [EvictionBand; 5] = [
        EvictionBand::Under5,
        EvictionBand::From5To10,
        EvictionBand::From10To15,
        EvictionBand::From15To20,
        EvictionBand::Over20,
    ];

    /// The band's text as Resource Graph writes it (`0-5`, …, `20+`).
    pub fn as_str(self) -> &'static str {
        match self {
            EvictionBand::Under5 => "0-5",
            EvictionBand::From5To10 => "5-10",
            EvictionBand::From10To15 => "10-15",
            EvictionBand::From15To20 => "15-20",
            EvictionBand::Over20 => "20+",
        }
    }

    /// Parses Resource Graph's text (tolerating spaces and a `%`); `None` for a value it does not
    /// know, which the caller treats as no signal rather than an error.
    pub fn parse(text: &str) -> Option<EvictionBand> {
        let t: String = text.chars().filter(|c| !c.is_whitespace() && *c != '%').collect();
        EvictionBand::ALL.into_iter().find(|b| b.as_str() == t)
    }

    /// The band an exact rate (evictions per VM-hour) falls in: what Azure publishes of a rate it
    /// measures. A boundary belongs to the upper band (5 % is `5-10`).
    pub fn of_rate(rate_per_hour: f64) -> EvictionBand {
        let pct = rate_per_hour * 100.0;
        match pct {
            p if p < 5.0 => EvictionBand::Under5,
            p if p < 10.0 => EvictionBand::From5To10,
            p if p < 15.0 => EvictionBand::From10To15,
            p if p < 20.0 => EvictionBand::From15To20,
            _ => EvictionBand::Over20,
        }
    }

    /// The band's midpoint in evictions per VM-hour; `20+`, which has no upper end, counts as 25 %.
    pub fn midpoint_per_hour(self) -> f64 {
        match self {
            EvictionBand::Under5 => 0.025,
            EvictionBand::From5To10 => 0.075,
            EvictionBand::From10To15 => 0.125,
            EvictionBand::From15To20 => 0.175,
            EvictionBand::Over20 => 0.25,
        }
    }
}

impl std::fmt::Display for EvictionBand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Azure's spot placement score for a region × size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PlacementScore {
    /// Allocation unlikely to succeed, or the VMs unlikely to live long.
    Low,
    /// In between.
    Medium,
    /// Allocation likely to succeed and the VMs to live.
    High,
}

impl PlacementScore {
    /// The score's text as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            PlacementScore::High => "High",
            PlacementScore::Medium => "Medium",
            PlacementScore::Low => "Low",
        }
    }

    /// Parses the API's text; `None` for anything else (`DataNotFoundOrStale`, a restriction, a
    /// value added later): no signal, not an error.
    pub fn parse(text: &str) -> Option<PlacementScore> {
        match text.trim().to_ascii_lowercase().as_str() {
            "high" => Some(PlacementScore::High),
            "medium" => Some(PlacementScore::Medium),
            "low" => Some(PlacementScore::Low),
            _ => None,
        }
    }

    /// Extra evictions per VM-hour the prior adds for this score. The score covers both the odds of
    /// allocation and the VMs' expected lifetime (the API's own definition), so it raises the
    /// expected cost of a spot placement: a `Low` offer ranks behind a slightly dearer `High` one
    /// but stays usable when nothing else is.
    pub fn risk_per_hour(self) -> f64 {
        match self {
            PlacementScore::High => 0.0,
            PlacementScore::Medium => 0.02,
            PlacementScore::Low => 0.10,
        }
    }
}

impl std::fmt::Display for PlacementScore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The spot eviction rate the solver plans with (evictions per VM-hour), from the published
/// signals: the band's midpoint (or `default_rate` where no band is published) plus the placement
/// score's risk. One rule for every cloud, so a simulation and Azure rank offers alike.
pub fn spot_eviction_prior(band: Option<EvictionBand>, score: Option<PlacementScore>, default_rate: f64) -> f64 {
    band.map_or(default_rate, EvictionBand::midpoint_per_hour) + score.map_or(0.0, PlacementScore::risk_per_hour)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_round_trip_and_bound_the_rate() {
        for b in EvictionBand::ALL {
            assert_eq!(EvictionBand::parse(b.as_str()), Some(b));
            assert_eq!(EvictionBand::of_rate(b.midpoint_per_hour()), b, "a midpoint lies in its band");
        }
        assert_eq!(EvictionBand::parse(" 10 - 15 % "), Some(EvictionBand::From10To15));
        assert_eq!(EvictionBand::parse("25-30"), None);
        assert_eq!(EvictionBand::of_rate(0.05), EvictionBand::From5To10);
        assert_eq!(EvictionBand::of_rate(0.0), EvictionBand::Under5);
        assert_eq!(EvictionBand::of_rate(3.0), EvictionBand::Over20);
        assert_eq!(serde_json::to_string(&EvictionBand::Over20).unwrap(), "\"20+\"");
    }

    #[test]
    fn a_low_score_raises_the_prior_and_unknown_scores_are_no_signal() {
        assert_eq!(PlacementScore::parse("DataNotFoundOrStale"), None);
        assert_eq!(PlacementScore::parse("high"), Some(PlacementScore::High));
        let high = spot_eviction_prior(Some(EvictionBand::Under5), Some(PlacementScore::High), 0.05);
        let low = spot_eviction_prior(Some(EvictionBand::Under5), Some(PlacementScore::Low), 0.05);
        assert!((high - 0.025).abs() < 1e-12 && low > high);
        assert_eq!(spot_eviction_prior(None, None, 0.05), 0.05);
    }
}
