//! The named filters an offer passes before work is placed on it, and how a waiting job's
//! candidate offers fared against them (Nomad's `AllocMetric`): the structured side of "why does my
//! job wait".

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// One filter of the feasibility chain, in the order they apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OfferFilter {
    /// The cloud offers the size in the region at this priority.
    Listed,
    /// The offer has a known price (an offer without one is never chosen).
    Priced,
    /// The subscription may use the size in the region (no SKU restriction).
    NotRestricted,
    /// No recent failure blocks the offer (see `BlockedOffer`).
    NotBlocked,
    /// The region's circuit breaker lets work in (closed, or half-open with its probe free).
    Breaker,
    /// Every quota pool the VMs draw from has room for them.
    QuotaFits,
    /// The cloud's capacity estimate has room for them (or is unknown).
    Capacity,
}

impl OfferFilter {
    /// Every filter, in chain order.
    pub const ALL: [OfferFilter; 7] = [
        OfferFilter::Listed,
        OfferFilter::Priced,
        OfferFilter::NotRestricted,
        OfferFilter::NotBlocked,
        OfferFilter::Breaker,
        OfferFilter::QuotaFits,
        OfferFilter::Capacity,
    ];

    /// The snake_case name used in APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            OfferFilter::Listed => "listed",
            OfferFilter::Priced => "priced",
            OfferFilter::NotRestricted => "not_restricted",
            OfferFilter::NotBlocked => "not_blocked",
            OfferFilter::Breaker => "breaker",
            OfferFilter::QuotaFits => "quota_fits",
            OfferFilter::Capacity => "capacity",
        }
    }
}

impl fmt::Display for OfferFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a job's candidate offers (allowed regions × acceptable sizes × the priorities its spot
/// policy allows) fared against the chain: how many each filter rejected (the first it failed) and
/// how many passed them all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OfferFilterCounts {
    /// Candidate offers looked at.
    pub candidates: u32,
    /// Offers rejected, by the first filter each failed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rejected: BTreeMap<OfferFilter, u32>,
    /// Offers that passed every filter (the solver may still not use them: price caps, budgets,
    /// other work).
    pub feasible: u32,
}

impl OfferFilterCounts {
    /// Counts one offer's verdict.
    pub fn count(&mut self, verdict: Result<(), OfferFilter>) {
        self.candidates += 1;
        match verdict {
            Ok(()) => self.feasible += 1,
            Err(f) => *self.rejected.entry(f).or_default() += 1,
        }
    }
}

impl fmt::Display for OfferFilterCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} candidate offers", self.candidates)?;
        for (filter, n) in &self.rejected {
            write!(f, ", {n} rejected by {filter}")?;
        }
        write!(f, ", {} feasible", self.feasible)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_name_the_first_filter_each_offer_failed() {
        let mut c = OfferFilterCounts::default();
        c.count(Ok(()));
        c.count(Err(OfferFilter::QuotaFits));
        c.count(Err(OfferFilter::QuotaFits));
        c.count(Err(OfferFilter::NotBlocked));
        assert_eq!((c.candidates, c.feasible), (4, 1));
        assert_eq!(
            c.to_string(),
            "4 candidate offers, 1 rejected by not_blocked, 2 rejected by quota_fits, 1 feasible"
        );
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["rejected"]["quota_fits"], 2);
    }
}
