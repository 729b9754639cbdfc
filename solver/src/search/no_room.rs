//! A memo of failed looks for room: which job shapes found no room, by inserting or by relocating
//! another job, in which state of the free resources.
//!
//! The weight search tries the same insert in the same state over and over: every waiting job of
//! one shape in a pass that changes nothing, every holder of one shape a relocation moves off one
//! offer for waiting jobs that want the same VMs, every "drop one, add many" that frees the same
//! room; and the same relocations and ejections for every waiting job of one shape. On real queues (thousands of 1-GPU jobs of a few shapes) those repeats were most of the
//! search. A state is named by a fingerprint of the free amounts (Zobrist hashing: the XOR of one
//! pseudo-random word per resource and amount, updated as resources are taken and given back), so
//! a state the search returns to is recognised whatever path led there. Inserting depends on the
//! free amounts alone; relocating and ejecting also on which jobs hold the room, so those are named
//! by the layout (the XOR of one word per placed job and candidate, and per piece in).

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::rc::Rc;

/// Remembered (state, shape) pairs at most; the memo starts over beyond (a 10,000-job search
/// remembers a few hundred thousand).
const CAPACITY: usize = 1 << 21;

/// The fingerprint term of resource `r` holding `free`.
pub(super) fn term(r: usize, free: i64) -> u64 {
    mix((r as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ free as u64)
}

/// The layout fingerprint's term of gang job `j` on its candidate `k`.
pub(super) fn placed(j: usize, k: usize) -> u64 {
    mix((j as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ (k as u64) ^ 0x1A70_0000_0000_0000)
}

/// The layout fingerprint's term of piece `x` (of `job`: `vms` VMs of `offer`) while it is in.
pub(super) fn piece(x: usize, job: usize, offer: usize, vms: u32) -> u64 {
    let id = (x as u64) << 40 ^ (job as u64) << 20 ^ (offer as u64) << 8 ^ u64::from(vms);
    mix(id.wrapping_mul(0xA076_1D64_78BD_642F) ^ 0x91EC_E000_0000_0000)
}

/// SplitMix64's finaliser: every input bit moves every output bit.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The failed looks seen, shared by a packing and its clones (a fingerprint names a state of one
/// instance's resources whichever packing is in it): per state, shape and way of looking, the
/// most weight it found no room for.
#[derive(Clone, Default)]
pub(super) struct NoRoom(Rc<RefCell<HashMap<u64, f64, BuildHasherDefault<Premixed>>>>);

/// How a job looked for room.
#[derive(Clone, Copy)]
pub(super) enum Look {
    /// On a candidate with room (`Packing::insert`).
    Insert,
    /// By moving one placed job that holds all the room a candidate lacks to another of its own
    /// candidates (the relocation in `Packing::eject_among`): what it finds depends on the layout
    /// and the job's shape only, not on its weight.
    Relocate,
    /// By taking out lighter jobs (the ejections in `Packing::eject_among`; `true` when a holder
    /// that can move elsewhere counts as no loss). A job finds the victims of a lighter one, and
    /// one that does not outweigh what they lose fails too: failing at a weight, it fails at any
    /// weight below.
    Eject(bool),
}

impl NoRoom {
    fn key(state: u64, shape: usize, look: Look) -> u64 {
        let salt = match look {
            Look::Insert => 0x5EED_5A17_0000_0000,
            Look::Relocate => 0x7E10_CA7E_0000_0000,
            Look::Eject(false) => 0xE1EC_7000_0000_0000,
            Look::Eject(true) => 0xE1EC_7001_0000_0000,
        };
        state ^ mix(shape as u64 ^ salt)
    }

    /// Whether a job of `shape` and `weight` found no room in `state` the `look` way before
    /// (ways that do not depend on the weight are remembered for any).
    pub(super) fn known(&self, state: u64, shape: usize, look: Look, weight: f64) -> bool {
        self.0.borrow().get(&Self::key(state, shape, look)).is_some_and(|&w| w >= weight)
    }

    /// Remembers that a job of `shape` and `weight` finds no room in `state` the `look` way.
    pub(super) fn remember(&self, state: u64, shape: usize, look: Look, weight: f64) {
        let mut seen = self.0.borrow_mut();
        if seen.len() >= CAPACITY {
            seen.clear();
        }
        let w = seen.entry(Self::key(state, shape, look)).or_insert(weight);
        *w = w.max(weight);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ejection_that_failed_fails_for_lighter_jobs_only() {
        let memo = NoRoom::default();
        memo.remember(7, 3, Look::Eject(false), 50.0);
        assert!(memo.known(7, 3, Look::Eject(false), 40.0), "lighter: its victims are among the heavier one's");
        assert!(!memo.known(7, 3, Look::Eject(false), 60.0), "heavier: may outweigh what it ejects");
        assert!(!memo.known(7, 3, Look::Eject(true), 40.0), "another way of counting the loss");
        assert!(!memo.known(8, 3, Look::Eject(false), 40.0), "another layout");
        assert!(!memo.known(7, 4, Look::Eject(false), 40.0), "another shape");
        assert!(!memo.known(7, 3, Look::Relocate, 40.0), "another way of looking");
    }
}
