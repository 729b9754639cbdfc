//! Group commit: many writers, one fsync.
//!
//! Each caller of [`GroupCommit::flush`] takes a ticket after its writes are in sled's log. A flusher
//! snapshots the highest ticket issued, fsyncs, and then declares every ticket up to that snapshot
//! durable: their writes preceded the snapshot, so they preceded the fsync. Callers that arrive while
//! an fsync runs wait for the next one, which then covers all of them at once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::StoreError;

#[derive(Default)]
struct State {
    issued: u64,
    durable: u64,
    flushing: bool,
}

#[derive(Default)]
pub(crate) struct GroupCommit {
    state: Mutex<State>,
    done: Condvar,
    fsyncs: AtomicU64,
}

impl GroupCommit {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave `State` inconsistent (plain counters, and
        // `flushing` is reset below before anything can panic), so poisoning is ignored.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Returns once everything written before the call is on disk.
    pub fn flush(&self, fsync: impl Fn() -> Result<(), StoreError>) -> Result<(), StoreError> {
        let mut s = self.lock();
        s.issued += 1;
        let ticket = s.issued;
        loop {
            if s.durable >= ticket {
                return Ok(());
            }
            if s.flushing {
                s = self.done.wait(s).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            s.flushing = true;
            let target = s.issued;
            drop(s);
            let result = fsync();
            self.fsyncs.fetch_add(1, Ordering::Relaxed);
            s = self.lock();
            s.flushing = false;
            if result.is_ok() {
                s.durable = s.durable.max(target);
            }
            self.done.notify_all();
            // On failure the waiters wake up, find nothing durable, and try the fsync themselves.
            result?;
        }
    }

    /// How many fsyncs have run: with concurrent writers, far fewer than acknowledged writes.
    pub fn fsyncs(&self) -> u64 {
        self.fsyncs.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn concurrent_callers_share_fsyncs_and_each_waits_for_one_that_started_after_it() {
        let gc = Arc::new(GroupCommit::default());
        // Each "write" bumps `written`; the fake fsync records how far it got, and every caller checks
        // that an fsync starting after its own write completed before it returned.
        let written = Arc::new(AtomicU64::new(0));
        let synced = Arc::new(AtomicU64::new(0));
        let in_fsync = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..16)
            .map(|_| {
                let (gc, written, synced, in_fsync) = (gc.clone(), written.clone(), synced.clone(), in_fsync.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let mine = written.fetch_add(1, Ordering::SeqCst) + 1;
                        gc.flush(|| {
                            assert!(!in_fsync.swap(true, Ordering::SeqCst), "two fsyncs at once");
                            let upto = written.load(Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_micros(200));
                            synced.fetch_max(upto, Ordering::SeqCst);
                            in_fsync.store(false, Ordering::SeqCst);
                            Ok(())
                        })
                        .unwrap();
                        assert!(synced.load(Ordering::SeqCst) >= mine, "returned before its write was synced");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(gc.fsyncs() < 800, "no sharing: {} fsyncs for 800 flushes", gc.fsyncs());
    }

    #[test]
    fn a_failed_fsync_is_reported_and_the_next_caller_retries() {
        let gc = GroupCommit::default();
        let err = gc.flush(|| Err(StoreError::Storage("disk full".into()))).unwrap_err();
        assert!(err.to_string().contains("disk full"));
        gc.flush(|| Ok(())).unwrap();
        assert_eq!(gc.fsyncs(), 2);
    }
}
