//! The coarse classes of cloud failures: what metrics count, circuit breakers weigh, blocks are
//! scoped by and attempts record. The cloud boundary classifies every error into one
//! (`cloud::CloudError::class`).

use serde::{Deserialize, Serialize};

/// The coarse classes used for metrics, circuit breakers and block durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// Quota exhausted.
    Quota,
    /// No capacity.
    Capacity,
    /// Size not available.
    SizeUnavailable,
    /// Spot price above cap.
    PriceAboveCap,
    /// Throttled.
    Throttled,
    /// Transient.
    Transient,
    /// Permanent.
    Permanent,
    /// Not found.
    NotFound,
}

impl FailureClass {
    /// Every class, so that a dashboard sees each one (at 0) before the first failure.
    pub const ALL: [FailureClass; 8] = [
        FailureClass::Quota,
        FailureClass::Capacity,
        FailureClass::SizeUnavailable,
        FailureClass::PriceAboveCap,
        FailureClass::Throttled,
        FailureClass::Transient,
        FailureClass::Permanent,
        FailureClass::NotFound,
    ];

    /// The lower-case name used in metrics and events.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::Quota => "quota",
            FailureClass::Capacity => "capacity",
            FailureClass::SizeUnavailable => "size_unavailable",
            FailureClass::PriceAboveCap => "price_above_cap",
            FailureClass::Throttled => "throttled",
            FailureClass::Transient => "transient",
            FailureClass::Permanent => "permanent",
            FailureClass::NotFound => "not_found",
        }
    }
}
