//! Group commit on PostgreSQL: the write sets of concurrent transactions committed in one
//! PostgreSQL transaction.
//!
//! Each commit on PostgreSQL costs a function call (a plan and executor set-up per statement in
//! it), a `COMMIT` and a WAL flush, whatever its size; under many concurrent submissions those fixed
//! costs are most of the database's work. A transaction that commits while another server thread's
//! batch is in flight queues here; when that batch ends, one of the queued threads leads: it takes
//! itself and every queued transaction that does not touch what an earlier one in the batch writes
//! (a key read or written by one and written by another would make their order matter inside one
//! PostgreSQL transaction, whose statements see all of it at once), and commits them with one call
//! of `spillway_commit_many`. That function locks the union of their keys, validates every read
//! against the rows as they stood before the batch, and applies the writes of the members whose
//! reads all held: a member with a stale read is applied not at all and told to run again, the
//! others commit together or not at all. The result is as if the members had committed one after
//! another, in batch order. Transactions under a fence (the leader's) commit alone: the fence is
//! checked per commit.
//!
//! A member's event numbers were taken in its own open PostgreSQL transaction, which it ends only
//! once the batch has committed: readers' event horizon waits for that transaction (see
//! `postgres.rs`), so no reader moves past a member's number before its events are visible.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use sled::IVec;

use crate::StoreError;

/// Most transactions committed in one batch.
const MAX_BATCH: usize = 64;

/// One transaction's commit as a batch takes it.
pub(super) struct Member {
    /// (tree, key, version read; `None`: absent).
    pub reads: Vec<(String, Vec<u8>, Option<i64>)>,
    pub puts: Vec<(String, Vec<u8>, IVec)>,
    pub deletes: Vec<(String, Vec<u8>)>,
    /// Advisory key locks it needs: lock id → exclusive.
    pub locks: HashMap<i64, bool>,
    /// Every key it read or wrote, and every key it wrote, as lock ids of all its trees: what an
    /// earlier member of a batch must not have written.
    pub touched: Vec<i64>,
    pub written: Vec<i64>,
}

/// How a member's commit ended.
pub(super) enum Outcome {
    Committed,
    /// A row it read had changed (or the batch hit a serialization failure): run it again.
    Conflict,
    /// The batch failed; nothing of it was applied.
    Failed(StoreError),
}

#[derive(Default)]
struct State {
    next_id: u64,
    queue: VecDeque<(u64, Arc<Member>)>,
    done: HashMap<u64, Outcome>,
    committing: bool,
}

/// The queue of transactions waiting to commit, and whether a batch is in flight.
#[derive(Default)]
pub(super) struct Group {
    state: Mutex<State>,
    ended: Condvar,
}

/// Resets the group if a leader's batch unwinds (a panic), so the queue does not wait forever.
struct Leading<'a> {
    group: &'a Group,
    batch: Option<Vec<u64>>,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        if let Some(ids) = self.batch.take() {
            let mut s = self.group.lock();
            s.committing = false;
            for id in ids {
                s.done.insert(id, Outcome::Failed(StoreError::Storage("the thread committing a batch failed".into())));
            }
            self.group.ended.notify_all();
        }
    }
}

impl Group {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Commits `member` in a batch: led by this thread (which calls `run` with the batch, itself
    /// first; `run` returns the indexes of the members whose reads were stale, or why the batch
    /// failed) when no batch is in flight, else by another. Returns once its batch has ended.
    pub fn commit(
        &self,
        member: Member,
        run: impl FnOnce(&[Arc<Member>]) -> Result<Vec<i32>, BatchFailure>,
    ) -> Outcome {
        let mut s = self.lock();
        let id = s.next_id;
        s.next_id += 1;
        s.queue.push_back((id, Arc::new(member)));
        let mut run = Some(run);
        loop {
            if let Some(outcome) = s.done.remove(&id) {
                return outcome;
            }
            if s.committing {
                s = self.ended.wait(s).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            s.committing = true;
            let batch = take_batch(&mut s.queue, id);
            drop(s);
            let ids: Vec<u64> = batch.iter().map(|(id, _)| *id).collect();
            let mut leading = Leading { group: self, batch: Some(ids.clone()) };
            let members: Vec<Arc<Member>> = batch.into_iter().map(|(_, m)| m).collect();
            let result = (run.take().expect("a thread leads at most once: its own batch ends its commit"))(&members);
            leading.batch = None;
            s = self.lock();
            s.committing = false;
            match result {
                Ok(stale) => {
                    for (i, id) in ids.into_iter().enumerate() {
                        let outcome = if stale.contains(&(i as i32)) { Outcome::Conflict } else { Outcome::Committed };
                        s.done.insert(id, outcome);
                    }
                }
                Err(BatchFailure::Conflict) => {
                    for id in ids {
                        s.done.insert(id, Outcome::Conflict);
                    }
                }
                Err(BatchFailure::Failed(e)) => {
                    for id in ids {
                        s.done.insert(id, Outcome::Failed(copy_error(&e)));
                    }
                }
            }
            self.ended.notify_all();
        }
    }
}

/// Why a whole batch failed.
pub(super) enum BatchFailure {
    Conflict,
    Failed(StoreError),
}

/// The same error for every member of a failed batch (the store's error is not `Clone`).
fn copy_error(e: &StoreError) -> StoreError {
    match e {
        StoreError::Unavailable { location, reason } => {
            StoreError::Unavailable { location: location.clone(), reason: reason.clone() }
        }
        other => StoreError::Storage(other.to_string()),
    }
}

/// Takes the leader's transaction and then, in queue order, every queued one that touches no key
/// an earlier member of the batch writes, up to [`MAX_BATCH`].
fn take_batch(queue: &mut VecDeque<(u64, Arc<Member>)>, lead: u64) -> Vec<(u64, Arc<Member>)> {
    let pos = queue.iter().position(|(id, _)| *id == lead).expect("the leader is queued");
    let first = queue.remove(pos).expect("found");
    let mut written: HashSet<i64> = first.1.written.iter().copied().collect();
    let mut batch = vec![first];
    let mut i = 0;
    while i < queue.len() && batch.len() < MAX_BATCH {
        let m = &queue[i].1;
        if m.touched.iter().any(|k| written.contains(k)) {
            i += 1;
            continue;
        }
        written.extend(m.written.iter().copied());
        batch.push(queue.remove(i).expect("in range"));
    }
    batch
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(read: &[i64], write: &[i64]) -> Member {
        Member {
            reads: Vec::new(),
            puts: Vec::new(),
            deletes: Vec::new(),
            locks: HashMap::new(),
            touched: read.iter().chain(write).copied().collect(),
            written: write.to_vec(),
        }
    }

    /// A member that reads or writes what an earlier one writes waits for a later batch; one that
    /// only writes what an earlier one read joins (it comes after it in the batch's order).
    #[test]
    fn a_batch_leaves_out_members_that_touch_an_earlier_members_writes() {
        let mut queue: VecDeque<(u64, Arc<Member>)> = VecDeque::new();
        queue.push_back((1, Arc::new(member(&[10], &[11]))));
        queue.push_back((2, Arc::new(member(&[11], &[20])))); // reads what 1 writes
        queue.push_back((3, Arc::new(member(&[], &[30, 10])))); // writes what 1 read: fine after 1
        queue.push_back((4, Arc::new(member(&[], &[30])))); // writes what 3 writes
        queue.push_back((5, Arc::new(member(&[40], &[41]))));
        let batch: Vec<u64> = take_batch(&mut queue, 1).into_iter().map(|(id, _)| id).collect();
        assert_eq!(batch, vec![1, 3, 5]);
        let left: Vec<u64> = queue.iter().map(|(id, _)| *id).collect();
        assert_eq!(left, vec![2, 4]);
        // The leader comes first whatever its place in the queue.
        let batch: Vec<u64> = take_batch(&mut queue, 4).into_iter().map(|(id, _)| id).collect();
        assert_eq!(batch, vec![4, 2]);
    }

    /// Concurrent commits share batches; every member gets its own outcome, stale ones a conflict.
    #[test]
    fn concurrent_commits_share_batches_and_each_gets_its_outcome() {
        let group = Arc::new(Group::default());
        let batches = Arc::new(Mutex::new(Vec::<usize>::new()));
        let threads: Vec<_> = (0..16i64)
            .map(|t| {
                let (group, batches) = (group.clone(), batches.clone());
                std::thread::spawn(move || {
                    let mut outcomes = Vec::new();
                    for n in 0..20i64 {
                        let stale = n % 5 == 0;
                        let mut m = member(&[], &[t * 1000 + n]);
                        // A stale member is marked by a read of key -1 (the fake batch reports it).
                        if stale {
                            m.touched.push(-1 - t);
                            m.reads.push((String::new(), Vec::new(), Some(-1)));
                        }
                        let outcome = group.commit(m, |batch| {
                            std::thread::sleep(std::time::Duration::from_micros(300));
                            batches.lock().unwrap().push(batch.len());
                            Ok(batch
                                .iter()
                                .enumerate()
                                .filter(|(_, m)| !m.reads.is_empty())
                                .map(|(i, _)| i as i32)
                                .collect())
                        });
                        outcomes.push((stale, matches!(outcome, Outcome::Committed)));
                    }
                    outcomes
                })
            })
            .collect();
        for t in threads {
            for (stale, committed) in t.join().unwrap() {
                assert_eq!(committed, !stale);
            }
        }
        let batches = batches.lock().unwrap();
        assert_eq!(batches.iter().sum::<usize>(), 16 * 20);
        assert!(batches.len() < 16 * 20, "no batch held more than one member");
    }
}
