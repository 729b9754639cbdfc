//! The store's side of leadership (see `lease.rs` for the design): taking, renewing and releasing
//! the leader lease, and the fenced handle a leader writes through.

use std::time::Duration;

use crate::StoreError;
use crate::kv::{Db, FenceToken};
use crate::lease::{Fence, LeaseGrant, LeaseHolder};
use crate::store::Store;

/// The lease name the control loop's leader holds.
const LEADER: &str = "leader";

/// Meta key counting the epochs of a sled store.
const META_LEASE_EPOCH: &str = "lease_epoch";

impl Store {
    /// A handle on the same store whose every write (transactions and the conveniences built on
    /// them) applies only while `fence` holds a lease that the store still grants: the control
    /// loop's handle. Reads are unaffected.
    pub fn fenced(&self, fence: &Fence) -> Store {
        Store { inner: self.inner.clone(), fence: Some(fence.clone()) }
    }

    /// The fence this handle writes under, if it is a fenced handle.
    pub(crate) fn fence_token(&self) -> Result<Option<FenceToken>, StoreError> {
        match &self.fence {
            None => Ok(None),
            Some(f) => match f.token() {
                Some(t) => Ok(Some(t)),
                None => Err(StoreError::Fenced("this server does not hold the leader lease".into())),
            },
        }
    }

    /// Takes the leader lease for `holder` for `ttl` if nobody holds it; `None` if somebody does.
    pub fn acquire_lease(&self, holder: &str, ttl: Duration) -> Result<Option<LeaseGrant>, StoreError> {
        match &self.inner.db {
            Db::Postgres(pg) => Ok(pg
                .lease_acquire(LEADER, holder, ttl_ms(ttl))?
                .map(|epoch| LeaseGrant { holder: holder.to_string(), epoch })),
            _ => {
                let mut local = self.inner.local_lease.lock().unwrap_or_else(|p| p.into_inner());
                if local.as_ref().is_some_and(|g| g.holder != holder) {
                    return Ok(None);
                }
                let meta = self.inner.db.open_tree(crate::encoding::META_TREE)?;
                let epoch = crate::kv::read_seq(meta.get(META_LEASE_EPOCH.as_bytes())?.as_deref())? + 1;
                meta.insert(META_LEASE_EPOCH.as_bytes(), &epoch.to_be_bytes()[..])?;
                self.inner.db.flush()?;
                let grant = LeaseGrant { holder: holder.to_string(), epoch };
                *local = Some(grant.clone());
                Ok(Some(grant))
            }
        }
    }

    /// Extends a granted lease by `ttl`; `false` when it is no longer this holder's at this epoch.
    pub fn renew_lease(&self, grant: &LeaseGrant, ttl: Duration) -> Result<bool, StoreError> {
        match &self.inner.db {
            Db::Postgres(pg) => pg.lease_renew(LEADER, &grant.holder, grant.epoch, ttl_ms(ttl)),
            _ => Ok(self.inner.local_lease.lock().unwrap_or_else(|p| p.into_inner()).as_ref() == Some(grant)),
        }
    }

    /// Gives the lease up now (on shutdown), so another server takes over without waiting.
    pub fn release_lease(&self, grant: &LeaseGrant) -> Result<(), StoreError> {
        match &self.inner.db {
            Db::Postgres(pg) => pg.lease_release(LEADER, &grant.holder, grant.epoch),
            _ => {
                let mut local = self.inner.local_lease.lock().unwrap_or_else(|p| p.into_inner());
                if local.as_ref() == Some(grant) {
                    *local = None;
                }
                Ok(())
            }
        }
    }

    /// Who holds the leader lease now.
    pub fn lease_holder(&self) -> Result<Option<LeaseHolder>, StoreError> {
        match &self.inner.db {
            Db::Postgres(pg) => Ok(pg.lease_info(LEADER)?.map(|(holder, epoch, remaining_ms)| LeaseHolder {
                holder,
                epoch,
                remaining_ms,
            })),
            _ => Ok(self.inner.local_lease.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|g| LeaseHolder {
                holder: g.holder.clone(),
                epoch: g.epoch,
                remaining_ms: i64::MAX,
            })),
        }
    }
}

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1)
}
