//! Quota as the cloud reports it: limit and usage of one pool in one region. The pools themselves,
//! and which of them a VM draws from, are the solver's ([`solver::QuotaPool`], re-exported here).

use serde::{Deserialize, Serialize};

use super::QuotaPool;

/// Limit and usage of one pool in one region, in vCPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quota {
    /// Region name.
    pub region: String,
    /// Which pool.
    pub pool: QuotaPool,
    /// vCPUs allowed.
    pub limit: u64,
    /// vCPUs in use.
    pub usage: u64,
}

impl Quota {
    /// vCPUs still free (never negative).
    pub fn free(&self) -> u64 {
        self.limit.saturating_sub(self.usage)
    }
}
