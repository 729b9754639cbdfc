//! Attempt-scoped agent credentials: `spwa.<job>.<attempt>.<mac>`, where the MAC is HMAC-SHA256 of
//! `<job>/<attempt>` under a key only the scheduler holds.
//!
//! Deriving the credential instead of storing it means the cloud side (the fleet's cloud-init
//! `customData`, the simulated cloud's VMs) can be handed a credential for any attempt without the
//! control loop threading secrets through fleet requests, a restarted scheduler still accepts the
//! credentials its VMs hold, and nothing secret is stored per attempt. A credential names the one
//! attempt it may report on; the routes check that it is the attempt in the path (another
//! attempt's credential is "not found", so attempts of other jobs do not leak) and that the attempt
//! is still active (an ended attempt's credential is refused, so it "stops working when the attempt
//! ends"). Credentials are compared in constant time and never logged: log lines name the attempt.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use state::{Store, StoreError};

/// Setting holding the key (hex), created on first use and shared by every scheduler process of
/// the store.
pub const KEY_SETTING: &str = "agents.credential_key";

/// Prefix of every agent credential (user API tokens start with `spw_`).
pub const PREFIX: &str = "spwa.";

/// The key agent credentials are derived with.
#[derive(Clone, PartialEq, Eq)]
pub struct AgentKeys {
    key: [u8; 32],
}

impl std::fmt::Debug for AgentKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AgentKeys(..)")
    }
}

/// A credential that checked out: the attempt it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRef {
    /// Job id.
    pub job_id: String,
    /// Attempt number.
    pub attempt: u32,
}

impl AgentKeys {
    /// Keys from 32 bytes (tests, benches).
    pub fn from_bytes(key: [u8; 32]) -> AgentKeys {
        AgentKeys { key }
    }

    /// The store's key, created (from the operating system's randomness) if it has none yet. Two
    /// processes creating it at once agree on one: the write is a transaction that keeps an
    /// existing key.
    pub fn load_or_create(store: &Store) -> Result<AgentKeys, StoreError> {
        if let Some(hex) = store.setting::<String>(KEY_SETTING)?
            && let Some(keys) = AgentKeys::from_hex(&hex)
        {
            return Ok(keys);
        }
        let mut fresh = [0u8; 32];
        getrandom::fill(&mut fresh).map_err(|e| StoreError::Storage(format!("no randomness: {e}")))?;
        let fresh_hex = hex(&fresh);
        let stored = store.transaction(|tx| {
            if let Some(existing) = tx.setting::<String>(KEY_SETTING)?
                && AgentKeys::from_hex(&existing).is_some()
            {
                return Ok(existing);
            }
            tx.set_setting(KEY_SETTING, &fresh_hex)?;
            Ok(fresh_hex.clone())
        })?;
        store.flush()?;
        Ok(AgentKeys::from_hex(&stored).expect("a key just checked or written"))
    }

    fn from_hex(s: &str) -> Option<AgentKeys> {
        if s.len() != 64 {
            return None;
        }
        let mut key = [0u8; 32];
        for (i, b) in key.iter_mut().enumerate() {
            *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(AgentKeys { key })
    }

    fn mac(&self, job_id: &str, attempt: u32) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(job_id.as_bytes());
        mac.update(b"/");
        mac.update(attempt.to_string().as_bytes());
        mac
    }

    /// The credential of one attempt.
    pub fn mint(&self, job_id: &str, attempt: u32) -> String {
        let tag = self.mac(job_id, attempt).finalize().into_bytes();
        format!("{PREFIX}{job_id}.{attempt}.{}", hex(&tag))
    }

    /// The attempt a presented credential names, when its MAC is right (compared in constant time).
    pub fn verify(&self, presented: &str) -> Option<AttemptRef> {
        let rest = presented.strip_prefix(PREFIX)?;
        let (rest, tag_hex) = rest.rsplit_once('.')?;
        let (job_id, attempt) = rest.rsplit_once('.')?;
        let attempt: u32 = attempt.parse().ok()?;
        if job_id.is_empty() || tag_hex.len() != 64 {
            return None;
        }
        let mut tag = [0u8; 32];
        for (i, b) in tag.iter_mut().enumerate() {
            *b = u8::from_str_radix(tag_hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        // `verify_slice` compares in constant time.
        self.mac(job_id, attempt).verify_slice(&tag).ok()?;
        Some(AttemptRef { job_id: job_id.to_string(), attempt })
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_name_their_attempt_and_nothing_else_verifies() {
        let keys = AgentKeys::from_bytes([7; 32]);
        let c = keys.mint("j-abc.def", 3);
        assert!(c.starts_with("spwa.j-abc.def.3."));
        assert_eq!(keys.verify(&c), Some(AttemptRef { job_id: "j-abc.def".into(), attempt: 3 }));
        let other = keys.mint("j-abc.def", 4);
        assert_ne!(c, other);
        // Changing the attempt in the text does not carry the MAC along.
        let forged = c.replacen(".3.", ".4.", 1);
        assert_eq!(keys.verify(&forged), None);
        assert_eq!(AgentKeys::from_bytes([8; 32]).verify(&c), None, "another key");
        for bad in ["", "spwa.", "spwa.j.1.zz", "spw_t1_abc", &c[..c.len() - 1]] {
            assert_eq!(keys.verify(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_key_is_created_once_and_kept() {
        let store = Store::in_memory().unwrap();
        let a = AgentKeys::load_or_create(&store).unwrap();
        let b = AgentKeys::load_or_create(&store).unwrap();
        assert_eq!(a, b);
        assert_eq!(format!("{a:?}"), "AgentKeys(..)", "the key is never printed");
    }
}
