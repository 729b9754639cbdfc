//! Event-log positions for tenant-bound tokens: opaque cursors instead of global sequence numbers.
//!
//! The event log is one sequence for the whole cluster, so its numbers tell anyone who sees two of
//! them how much happened in between: to a tenant, how busy the other tenants are. A tenant-bound
//! token is therefore shown, wherever a sequence number would appear (`seq` of events, the SSE
//! `id`), a cursor: the sequence number through a keyed permutation (a four-round Feistel network
//! on 62 bits, keyed by a secret kept in the store). A cursor resumes a stream exactly like a
//! sequence number (`from`, `Last-Event-ID`), but its value says nothing about the log. `from=0`
//! means "from the oldest event kept" for everyone; cursors are never 0.

use sha2::{Digest, Sha256};
use state::Store;

/// Store setting that holds the key, so cursors survive restarts.
const KEY_SETTING: &str = "api.cursor_key";

const HALF_BITS: u32 = 31;
const HALF_MASK: u64 = (1 << HALF_BITS) - 1;
const ROUNDS: u8 = 4;

/// The keyed permutation between sequence numbers and cursors.
#[derive(Clone)]
pub struct Cursors {
    key: [u8; 32],
}

impl std::fmt::Debug for Cursors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cursors { key: <secret> }")
    }
}

impl Cursors {
    /// Cursors keyed by the store's secret, created on first use. If the store cannot be read or
    /// written, a key for this process only: cursors then stop resuming across a restart, which
    /// costs a tenant a replay, never another tenant's data.
    pub fn open(store: &Store) -> Cursors {
        match store.setting::<String>(KEY_SETTING) {
            Ok(Some(hex)) if hex.len() == 64 => {
                let mut key = [0u8; 32];
                for (i, b) in key.iter_mut().enumerate() {
                    *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or(0);
                }
                return Cursors { key };
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot read the event cursor key; using one for this process"),
        }
        let mut key = [0u8; 32];
        if getrandom::fill(&mut key).is_err() {
            tracing::warn!("no operating-system randomness for the event cursor key");
        }
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        if let Err(e) = store.set_setting(KEY_SETTING, &hex) {
            tracing::warn!(error = %e, "cannot store the event cursor key; cursors will not survive a restart");
        }
        Cursors { key }
    }

    /// A fixed key (tests).
    pub fn with_key(key: [u8; 32]) -> Cursors {
        Cursors { key }
    }

    fn round(&self, i: u8, half: u64) -> u64 {
        let mut h = Sha256::new();
        h.update(self.key);
        h.update([i]);
        h.update(half.to_le_bytes());
        let d = h.finalize();
        u64::from(u32::from_le_bytes([d[0], d[1], d[2], d[3]])) & HALF_MASK
    }

    /// The cursor of a sequence number: 1 to 2^62 (sequence numbers above 2^62 − 1 do not occur).
    pub fn encode(&self, seq: u64) -> u64 {
        let x = seq & ((1 << (2 * HALF_BITS)) - 1);
        let (mut l, mut r) = (x >> HALF_BITS, x & HALF_MASK);
        for i in 0..ROUNDS {
            (l, r) = (r, l ^ self.round(i, r));
        }
        ((l << HALF_BITS) | r) + 1
    }

    /// The sequence number of a cursor; `None` for 0 and values no cursor has.
    pub fn decode(&self, cursor: u64) -> Option<u64> {
        let x = cursor.checked_sub(1).filter(|x| *x < 1 << (2 * HALF_BITS))?;
        let (mut l, mut r) = (x >> HALF_BITS, x & HALF_MASK);
        for i in (0..ROUNDS).rev() {
            (l, r) = (r ^ self.round(i, l), l);
        }
        Some((l << HALF_BITS) | r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_hide_the_order() {
        let c = Cursors::with_key([7; 32]);
        let cursors: Vec<u64> = (1..200).map(|s| c.encode(s)).collect();
        for (s, &cur) in (1..200).zip(&cursors) {
            assert!((1..=1 << 62).contains(&cur));
            assert_eq!(c.decode(cur), Some(s));
        }
        let ascending = cursors.windows(2).filter(|w| w[0] < w[1]).count();
        assert!((40..160).contains(&ascending), "cursors are not ordered like the log: {ascending} of 198 ascend");
        assert!(cursors.iter().all(|&x| x > 1_000_000), "cursors are not small numbers");
        assert_eq!(c.decode(0), None);
        assert_ne!(Cursors::with_key([8; 32]).encode(5), c.encode(5), "the key matters");
    }
}
