//! A token bucket per API token: `burst` requests at once, refilled at `per_second`.
//!
//! Keyed by the token's id (never the secret), so one noisy client cannot starve the others and a
//! restart forgets nothing that matters (buckets start full).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Rate limit settings (per token).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Sustained requests per second per token; 0 turns the limit off.
    pub per_second: f64,
    /// Requests a token may make at once after being idle.
    pub burst: u32,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        RateLimitConfig { per_second: 200.0, burst: 400 }
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Buckets of every token seen.
#[derive(Debug)]
pub struct RateLimiter {
    config: RateLimitConfig,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    /// A limiter with these settings.
    pub fn new(config: RateLimitConfig) -> RateLimiter {
        RateLimiter { config, buckets: Mutex::new(HashMap::new()) }
    }

    /// The settings.
    pub fn config(&self) -> RateLimitConfig {
        self.config
    }

    /// Takes one request from `key`'s bucket at `now`; `Err(seconds to wait)` when it is empty.
    pub fn check(&self, key: &str, now: Instant) -> Result<(), u64> {
        let c = self.config;
        if c.per_second <= 0.0 || !c.per_second.is_finite() {
            return Ok(());
        }
        let burst = f64::from(c.burst.max(1));
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let b = buckets.entry(key.to_string()).or_insert(Bucket { tokens: burst, at: now });
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * c.per_second).min(burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - b.tokens) / c.per_second;
            Err(wait.ceil().max(1.0) as u64)
        }
    }

    /// Forgets a token's bucket (after it is revoked).
    pub fn forget(&self, key: &str) {
        self.buckets.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn burst_then_refill_at_the_configured_rate() {
        let l = RateLimiter::new(RateLimitConfig { per_second: 2.0, burst: 3 });
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(l.check("a", t0).is_ok());
        }
        assert_eq!(l.check("a", t0), Err(1), "empty bucket says when to come back");
        // Another token has its own bucket.
        assert!(l.check("b", t0).is_ok());
        // Half a second refills one request at 2/s.
        assert!(l.check("a", t0 + Duration::from_millis(500)).is_ok());
        assert!(l.check("a", t0 + Duration::from_millis(500)).is_err());
        // Refill never exceeds the burst.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert!(l.check("a", later).is_ok());
        }
        assert!(l.check("a", later).is_err());
    }

    #[test]
    fn zero_rate_means_unlimited() {
        let l = RateLimiter::new(RateLimitConfig { per_second: 0.0, burst: 1 });
        let t0 = Instant::now();
        for _ in 0..1000 {
            assert!(l.check("a", t0).is_ok());
        }
    }

    #[test]
    fn slow_rates_ask_for_longer_waits() {
        let l = RateLimiter::new(RateLimitConfig { per_second: 0.1, burst: 1 });
        let t0 = Instant::now();
        assert!(l.check("a", t0).is_ok());
        assert_eq!(l.check("a", t0), Err(10));
    }
}
