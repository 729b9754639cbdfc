//! Classified cloud errors: what went wrong, in the terms the scheduler reacts to.

use serde::{Deserialize, Serialize};

use crate::model::{FailureClass, Priority, QuotaPool};

/// A failure at the cloud boundary, already classified. The control loop decides what to block
/// and for how long from the variant alone (`control::error_policy`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "class", rename_all = "snake_case")]
pub enum CloudError {
    /// A quota pool is exhausted. `limit`, `usage` and `required` are vCPUs, when Azure said them.
    #[error("no quota: {region} {pool}{}", quota_numbers(*limit, *usage, *required))]
    Quota {
        /// Region.
        region: String,
        /// The exhausted pool.
        pool: QuotaPool,
        /// vCPU limit.
        limit: Option<u64>,
        /// vCPUs in use.
        usage: Option<u64>,
        /// vCPUs the request needed on top.
        required: Option<u64>,
    },
    /// No capacity for the size (in the zone, when known).
    #[error("no capacity: {region}{}{}{}", opt(size), opt(&priority.map(|p| p.to_string())), zone.as_ref().map(|z| format!(" zone {z}")).unwrap_or_default())]
    Capacity {
        /// Region.
        region: String,
        /// Size, when known.
        size: Option<String>,
        /// Priority, when known.
        priority: Option<Priority>,
        /// Zone, when the failure was zonal.
        zone: Option<String>,
    },
    /// The size is not offered there (or not to this subscription, or not as spot).
    #[error("size unavailable: {size} in {region}{}", opt(&priority.map(|p| p.to_string())))]
    SizeUnavailable {
        /// Region.
        region: String,
        /// Size.
        size: String,
        /// Priority, when the refusal was for one tier only.
        priority: Option<Priority>,
    },
    /// The spot price is above the cap we gave.
    #[error("spot price above the cap: {region}{}", opt(size))]
    PriceAboveCap {
        /// Region.
        region: String,
        /// Size, when known.
        size: Option<String>,
    },
    /// Throttled; retry after the given time.
    #[error("throttled{}", retry_after_ms.map(|ms| format!(" (retry after {ms} ms)")).unwrap_or_default())]
    Throttled {
        /// What `Retry-After` said, in milliseconds.
        retry_after_ms: Option<u64>,
    },
    /// A failure that may go away on its own (5xx, timeouts, connection resets).
    #[error("transient: {message}")]
    Transient {
        /// What happened.
        message: String,
    },
    /// A failure that will not go away by retrying (bad request, spot not supported, auth).
    #[error("permanent: {code}: {message}")]
    Permanent {
        /// Azure's error code, or our own.
        code: String,
        /// What happened.
        message: String,
    },
    /// The object does not exist.
    #[error("not found: {what}")]
    NotFound {
        /// What was looked for.
        what: String,
    },
}

fn opt(s: &Option<String>) -> String {
    s.as_ref().map(|s| format!(" {s}")).unwrap_or_default()
}

fn quota_numbers(limit: Option<u64>, usage: Option<u64>, required: Option<u64>) -> String {
    match (limit, usage, required) {
        (Some(l), Some(u), Some(r)) => format!(" (limit {l} vCPUs, {u} used, {r} more needed)"),
        (Some(l), Some(u), None) => format!(" (limit {l} vCPUs, {u} used)"),
        _ => String::new(),
    }
}

impl CloudError {
    /// The error's class.
    pub fn class(&self) -> FailureClass {
        match self {
            CloudError::Quota { .. } => FailureClass::Quota,
            CloudError::Capacity { .. } => FailureClass::Capacity,
            CloudError::SizeUnavailable { .. } => FailureClass::SizeUnavailable,
            CloudError::PriceAboveCap { .. } => FailureClass::PriceAboveCap,
            CloudError::Throttled { .. } => FailureClass::Throttled,
            CloudError::Transient { .. } => FailureClass::Transient,
            CloudError::Permanent { .. } => FailureClass::Permanent,
            CloudError::NotFound { .. } => FailureClass::NotFound,
        }
    }

    /// True when retrying the same call later may succeed without changing anything.
    pub fn is_retryable(&self) -> bool {
        matches!(self, CloudError::Throttled { .. } | CloudError::Transient { .. })
    }
}
