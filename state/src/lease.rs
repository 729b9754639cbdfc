//! Leadership: a lease held in the store, and the fence that makes a former leader's writes fail.
//! (This module holds the types; `leadership.rs` the store's operations on them.)
//!
//! Several servers may share a PostgreSQL store; exactly one of them runs the control loop. It holds
//! the lease (holder, epoch, expiry, on the database's clock), renewing it every few seconds; when
//! the lease runs out, another server takes it with the next epoch. The leader writes through a
//! [`Store::fenced`] handle: every transaction through it carries the [`Fence`]'s current holder and
//! epoch, and PostgreSQL applies the writes only if that lease is still held and unexpired, in the
//! same transaction as the writes. A leader that was paused or cut off past its lease therefore
//! writes nothing once it resumes, whatever it believes.
//!
//! On sled and in memory the store belongs to one process (sled locks its directory), which always
//! wins the lease; the epoch still counts up across restarts of a sled store.

use std::sync::{Arc, RwLock};

use crate::kv::FenceToken;

/// A lease the store granted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseGrant {
    /// Who holds it (one id per server process).
    pub holder: String,
    /// Counts up with every new holder: a higher epoch always wins.
    pub epoch: u64,
}

/// Who holds the lease now, as the store sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseHolder {
    /// The holder's id.
    pub holder: String,
    /// Its epoch.
    pub epoch: u64,
    /// Milliseconds left before it runs out (negative: it ran out that long ago).
    pub remaining_ms: i64,
}

/// The lease a leader's store handle writes under; shared between the election, which sets and
/// clears it, and the handle, which reads it on every write. Empty: writes are refused.
#[derive(Clone, Debug, Default)]
pub struct Fence(Arc<RwLock<Option<FenceToken>>>);

impl Fence {
    /// A fence holding no lease.
    pub fn new() -> Fence {
        Fence::default()
    }

    /// Writes go through under this lease from now on.
    pub fn hold(&self, grant: &LeaseGrant) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) =
            Some(FenceToken { holder: grant.holder.clone(), epoch: grant.epoch });
    }

    /// Writes are refused from now on.
    pub fn clear(&self) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// The epoch writes go through under, if any.
    pub fn epoch(&self) -> Option<u64> {
        self.token().map(|t| t.epoch)
    }

    pub(crate) fn token(&self) -> Option<FenceToken> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
