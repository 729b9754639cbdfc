//! An ordered parallel map on scoped threads: the quota advice screens a step's options with it,
//! the what-if advisor (which depends on this crate) simulates a week's variants with it, and a
//! solve runs its independent searches (the starts, the dives, the draws of neighbourhoods) with it.
//! Its variant `par_first` returns the first results in the items' order, as a loop that stops
//! at them would (the waiting jobs forced in, the forced dives).
//!
//! A map inside another map's worker runs on the worker's own thread: the outer map already keeps
//! every core busy (the advice solves a problem per option), and threads spawned under it would
//! only contend for them.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

thread_local! {
    /// Whether this thread is a worker of [`par_map`].
    static WORKER: Cell<bool> = const { Cell::new(false) };
}

/// A worker's stack: the main thread's usual 8 MiB rather than a spawned thread's 2 MiB, since the
/// searches a worker runs (the exact search's recursion among them) were written for the main
/// thread.
const WORKER_STACK: usize = 8 << 20;

/// The threads a solve's own searches may use: the machine's cores, or one inside a worker of
/// [`par_map`] (see the module doc).
pub fn cores() -> usize {
    if WORKER.with(Cell::get) { 1 } else { std::thread::available_parallelism().map_or(1, |n| n.get()) }
}

/// `f` over `items`, results in the items' order, on at most `threads` threads (one per item at
/// most). Each thread takes the next item when it finishes one, so uneven items keep every thread
/// busy. A panic in `f` is resumed on the caller's thread. Inside another map's worker, one thread.
pub fn par_map<T: Sync, R: Send>(items: &[T], threads: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = if WORKER.with(Cell::get) { 1 } else { threads.min(items.len()) };
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let mut out: Vec<(usize, R)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                std::thread::Builder::new()
                    .stack_size(WORKER_STACK)
                    .spawn_scoped(s, || {
                        WORKER.with(|w| w.set(true));
                        let mut mine = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(item) = items.get(i) else { break mine };
                            mine.push((i, f(item)));
                        }
                    })
                    .expect("a worker thread")
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, r)| r).collect()
}

/// The first `need` items for which `f` gives a result, with their indices, in the items' order:
/// what calling `f` on one item after the other until `need` results are in would return, on at
/// most `threads` threads. Each thread takes the next item when it finishes one (as [`par_map`]),
/// so an item that gives nothing at once does not leave a thread idle while its neighbour's runs;
/// an item is skipped once `need` items before it have given a result (it cannot be among the
/// first), and a result after the first `need` is dropped.
pub fn par_first<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    need: usize,
    f: impl Fn(&T) -> Option<R> + Sync,
) -> Vec<(usize, R)> {
    // The indices of the items that gave a result so far.
    let given: Mutex<Vec<usize>> = Mutex::new(Vec::new());
    let indices: Vec<usize> = (0..items.len()).collect();
    let found = par_map(&indices, threads, |&i| {
        let before = given.lock().unwrap_or_else(PoisonError::into_inner).iter().filter(|&&k| k < i).count();
        if before >= need {
            return None;
        }
        let result = f(&items[i])?;
        given.lock().unwrap_or_else(PoisonError::into_inner).push(i);
        Some(result)
    });
    found.into_iter().enumerate().filter_map(|(i, r)| Some((i, r?))).take(need).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_in_the_items_order() {
        // Uneven work, so that threads finish out of order.
        let items: Vec<u64> = (0..40).collect();
        let work = |&i: &u64| (0..(40 - i) * 20_000).fold(i, |a, x| a ^ x.wrapping_mul(31));
        let expected: Vec<u64> = items.iter().map(work).collect();
        for threads in [1, 2, 3, 64] {
            assert_eq!(par_map(&items, threads, work), expected, "{threads} threads");
        }
    }

    #[test]
    fn the_first_results_are_those_one_after_the_other_gives() {
        // Every third item gives a result; the items before the results take longest, so that
        // later items finish first on several threads.
        let items: Vec<u64> = (0..30).collect();
        let calls = AtomicUsize::new(0);
        let work = |&i: &u64| {
            calls.fetch_add(1, Ordering::Relaxed);
            std::hint::black_box((0..(30 - i) * 20_000).fold(i, |a, x| a ^ x.wrapping_mul(31)));
            (i % 3 == 2).then_some(i * 10)
        };
        let one_by_one: Vec<(usize, u64)> =
            items.iter().enumerate().filter_map(|(i, x)| Some((i, work(x)?))).take(4).collect();
        assert_eq!(one_by_one, [(2, 20), (5, 50), (8, 80), (11, 110)]);
        for threads in [1, 2, 3, 64] {
            calls.store(0, Ordering::Relaxed);
            assert_eq!(par_first(&items, threads, 4, work), one_by_one, "{threads} threads");
            // One thread stops at the fourth result; more threads may run items past it.
            let called = calls.load(Ordering::Relaxed);
            assert!(called >= 12, "{threads} threads called f {called} times");
            if threads == 1 {
                assert_eq!(called, 12);
            }
        }
        assert!(par_first(&items, 2, 0, work).is_empty());
        assert_eq!(par_first(&items, 2, 100, work).len(), 10);
    }
}
