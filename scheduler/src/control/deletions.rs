//! Fleet deletions the cloud has not yet confirmed: retried with exponential backoff until the
//! cloud says the fleet is gone. A deletion is either the loop's to retry (the attempt that owned
//! the fleet has already ended: nothing else would ask again) or a decision's (a finished job's
//! clean-up, made again every round until it succeeds: the tracker only spaces the tries).
//!
//! The tracker lives in memory; after a restart the cloud reconciliation (every tagged fleet
//! without a live attempt is deleted) finds what it knew.

use std::collections::BTreeMap;

/// The first wait after a failed deletion.
pub const FIRST_BACKOFF_MS: i64 = 1_000;
/// The longest wait between two tries.
pub const MAX_BACKOFF_MS: i64 = 5 * 60_000;

#[derive(Debug, Clone, PartialEq)]
struct Pending {
    failures: u32,
    next_try_ms: i64,
    owned: bool,
}

/// Deletions that failed and when to try each again.
#[derive(Debug, Default)]
pub struct Deletions {
    pending: BTreeMap<String, Pending>,
}

impl Deletions {
    /// Records a failed try at `now_ms`; `owned` when no decision will ask again.
    pub fn failed(&mut self, fleet: &str, now_ms: i64, owned: bool) {
        let p = self.pending.entry(fleet.to_string()).or_insert(Pending { failures: 0, next_try_ms: now_ms, owned });
        p.failures += 1;
        p.owned |= owned;
        p.next_try_ms = now_ms + backoff_ms(p.failures);
    }

    /// The cloud confirmed the fleet gone.
    pub fn succeeded(&mut self, fleet: &str) {
        self.pending.remove(fleet);
    }

    /// Takes over a deletion no decision will ask for again (its attempt ended), due at once.
    pub fn own(&mut self, fleet: &str, now_ms: i64) {
        let p =
            self.pending.entry(fleet.to_string()).or_insert(Pending { failures: 0, next_try_ms: now_ms, owned: true });
        p.owned = true;
    }

    /// When the next try of a deletion may go out, if it is backing off.
    pub fn not_before(&self, fleet: &str, now_ms: i64) -> Option<i64> {
        self.pending.get(fleet).map(|p| p.next_try_ms).filter(|&t| t > now_ms)
    }

    /// Whether the tracker knows the fleet (it is being deleted).
    pub fn knows(&self, fleet: &str) -> bool {
        self.pending.contains_key(fleet)
    }

    /// The loop's own deletions due at `now_ms`.
    pub fn due(&self, now_ms: i64) -> Vec<String> {
        self.pending.iter().filter(|(_, p)| p.owned && p.next_try_ms <= now_ms).map(|(f, _)| f.clone()).collect()
    }

    /// The earliest next try of a deletion the loop owns, if one is pending.
    pub fn next_try_ms(&self) -> Option<i64> {
        self.pending.values().filter(|p| p.owned).map(|p| p.next_try_ms).min()
    }

    /// Whether no deletion is pending (the common case: the round then builds no set of live fleets).
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Forgets the spacing of decisions' deletions whose fleet no live attempt holds any more
    /// (the decision that asked will not ask again).
    pub fn forget_unowned_except(&mut self, live: &std::collections::BTreeSet<&str>) {
        self.pending.retain(|fleet, p| p.owned || live.contains(fleet.as_str()));
    }
}

/// The wait after `failures` failed tries: doubling from [`FIRST_BACKOFF_MS`], at most
/// [`MAX_BACKOFF_MS`].
pub fn backoff_ms(failures: u32) -> i64 {
    FIRST_BACKOFF_MS.saturating_mul(1 << failures.saturating_sub(1).min(20)).min(MAX_BACKOFF_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_deletion_backs_off_doubling_up_to_the_cap_and_is_forgotten_once_confirmed() {
        let mut d = Deletions::default();
        d.failed("f", 0, true);
        assert_eq!(d.not_before("f", 0), Some(1_000));
        assert!(d.due(999).is_empty());
        assert_eq!(d.due(1_000), ["f"]);
        d.failed("f", 1_000, true);
        assert_eq!(d.not_before("f", 1_000), Some(3_000), "2 s after the second failure");
        assert_eq!(backoff_ms(30), MAX_BACKOFF_MS);
        d.succeeded("f");
        assert!(!d.knows("f") && d.next_try_ms().is_none());
    }

    #[test]
    fn a_decisions_deletion_is_spaced_but_not_retried_by_the_tracker() {
        let mut d = Deletions::default();
        d.failed("cleanup", 0, false);
        assert!(d.due(10_000).is_empty(), "the clean-up decision asks again itself");
        assert_eq!(d.not_before("cleanup", 500), Some(1_000));
        assert_eq!(d.next_try_ms(), None, "nothing of the loop's own to wake up for");
        d.failed("other", 0, false);
        d.forget_unowned_except(&["cleanup"].into_iter().collect());
        assert!(d.knows("cleanup") && !d.knows("other"), "a deletion no live attempt wants any more is forgotten");
        d.own("cleanup", 600);
        assert_eq!(d.due(1_000), ["cleanup"], "once its attempt ended, the tracker retries it");
        assert_eq!(d.next_try_ms(), Some(1_000));
    }
}
