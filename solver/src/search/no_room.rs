//! A memo of failed inserts: which job shapes found no candidate with room in which state of the
//! free resources.
//!
//! The weight search tries the same insert in the same state over and over: every waiting job of
//! one shape in a pass that changes nothing, every holder of one shape a relocation moves off one
//! offer for waiting jobs that want the same VMs, every "drop one, add many" that frees the same
//! room. On real queues (thousands of 1-GPU jobs of a few shapes) those repeats were most of the
//! search. A state is named by a fingerprint of the free amounts (Zobrist hashing: the XOR of one
//! pseudo-random word per resource and amount, updated as resources are taken and given back), so
//! a state the search returns to is recognised whatever path led there.

use std::cell::RefCell;
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::rc::Rc;

/// Remembered (state, shape) pairs at most; the memo starts over beyond (a 10,000-job search
/// remembers a few hundred thousand).
const CAPACITY: usize = 1 << 21;

/// The fingerprint term of resource `r` holding `free`.
pub(super) fn term(r: usize, free: i64) -> u64 {
    mix((r as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ free as u64)
}

/// SplitMix64's finaliser: every input bit moves every output bit.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The failed inserts seen, shared by a packing and its clones (a fingerprint names a state of
/// one instance's resources whichever packing is in it).
#[derive(Clone, Default)]
pub(super) struct NoRoom(Rc<RefCell<HashSet<u64, BuildHasherDefault<Premixed>>>>);

impl NoRoom {
    fn key(state: u64, shape: usize) -> u64 {
        state ^ mix(shape as u64 ^ 0x5EED_5A17_0000_0000)
    }

    /// Whether a job of `shape` found no room in `state` before.
    pub(super) fn known(&self, state: u64, shape: usize) -> bool {
        self.0.borrow().contains(&Self::key(state, shape))
    }

    /// Remembers that a job of `shape` finds no room in `state`.
    pub(super) fn remember(&self, state: u64, shape: usize) {
        let mut seen = self.0.borrow_mut();
        if seen.len() >= CAPACITY {
            seen.clear();
        }
        seen.insert(Self::key(state, shape));
    }
}

/// A hasher for keys that are already well mixed: the key is its own hash.
#[derive(Default)]
pub(super) struct Premixed(u64);

impl Hasher for Premixed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = x;
    }
}
