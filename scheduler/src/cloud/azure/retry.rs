//! Retrying throttled (429) and transient (5xx, timeouts, resets) calls: jittered exponential
//! backoff with `backon`, a `Retry-After` from the server taking precedence, within a budget of
//! retries and total time.

use std::future::Future;
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};

use super::config::RetryConfig;
use crate::cloud::CloudError;

/// Runs `op` until it succeeds, fails with an error that is not retryable, or the budget is spent
/// (then the last error is returned). A `Throttled { retry_after_ms }` waits exactly what the
/// server asked for, never less, as long as that fits in the remaining time budget.
pub async fn with_retries<T, F, Fut>(budget: &RetryConfig, what: &str, op: F) -> Result<T, CloudError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, CloudError>>,
{
    let started = Instant::now();
    let max_elapsed = Duration::from_secs_f64(budget.max_elapsed_secs.max(0.0));
    let backoff = ExponentialBuilder::default()
        .with_jitter()
        .with_min_delay(Duration::from_secs_f64(budget.initial_backoff_secs.max(0.0)))
        .with_max_delay(Duration::from_secs_f64(budget.max_backoff_secs.max(0.0)))
        .with_max_times(budget.max_retries as usize);
    op.retry(backoff)
        .sleep(tokio::time::sleep)
        .when(CloudError::is_retryable)
        .adjust(|err, backoff| {
            // `None` from backon means the retry count is spent.
            let computed = backoff?;
            let wait = match err {
                CloudError::Throttled { retry_after_ms: Some(ms) } => Duration::from_millis(*ms),
                _ => computed,
            };
            if started.elapsed() + wait > max_elapsed {
                tracing::debug!(what, ?wait, "retry budget spent");
                return None;
            }
            Some(wait)
        })
        .notify(|err, wait| tracing::debug!(what, %err, ?wait, "retrying"))
        .await
}

/// Reads a `Retry-After` value: delay seconds, or an HTTP date (relative to now; a date in the
/// past means zero).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if let Ok(secs) = value.parse::<f64>()
        && secs.is_finite()
        && secs >= 0.0
    {
        return Some(Duration::from_secs_f64(secs));
    }
    let date = azure_core::time::parse_rfc7231(value).ok()?;
    let delta = date - azure_core::time::OffsetDateTime::now_utc();
    Some(Duration::try_from(delta).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn quick(max_retries: u32) -> RetryConfig {
        RetryConfig { max_retries, max_elapsed_secs: 5.0, initial_backoff_secs: 0.001, max_backoff_secs: 0.01 }
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after(" 0 "), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), Some(Duration::ZERO), "past date");
        let future = azure_core::time::OffsetDateTime::now_utc() + azure_core::time::Duration::seconds(90);
        let d = parse_retry_after(&azure_core::time::to_rfc7231(&future)).unwrap();
        assert!(d > Duration::from_secs(85) && d <= Duration::from_secs(90), "{d:?}");
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[tokio::test]
    async fn transient_failures_are_retried_until_success() {
        let calls = Arc::new(AtomicU32::new(0));
        let c = calls.clone();
        let r = with_retries(&quick(5), "t", move || {
            let c = c.clone();
            async move {
                if c.fetch_add(1, Ordering::SeqCst) < 3 {
                    Err(CloudError::Transient { message: "503".into() })
                } else {
                    Ok(42)
                }
            }
        })
        .await;
        assert_eq!(r, Ok(42));
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn permanent_errors_are_not_retried_and_count_is_bounded() {
        let calls = Arc::new(AtomicU32::new(0));
        let c = calls.clone();
        let r: Result<(), _> = with_retries(&quick(5), "t", move || {
            c.fetch_add(1, Ordering::SeqCst);
            async { Err(CloudError::Permanent { code: "BadRequest".into(), message: "no".into() }) }
        })
        .await;
        assert!(matches!(r, Err(CloudError::Permanent { .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 1);

        let calls = Arc::new(AtomicU32::new(0));
        let c = calls.clone();
        let r: Result<(), _> = with_retries(&quick(2), "t", move || {
            c.fetch_add(1, Ordering::SeqCst);
            async { Err(CloudError::Transient { message: "500".into() }) }
        })
        .await;
        assert!(matches!(r, Err(CloudError::Transient { .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 3, "one try and two retries");
    }

    #[tokio::test]
    async fn retry_after_is_honoured_and_the_time_budget_stops_long_waits() {
        let calls = Arc::new(AtomicU32::new(0));
        let c = calls.clone();
        let start = Instant::now();
        let r = with_retries(&quick(3), "t", move || {
            let c = c.clone();
            async move {
                if c.fetch_add(1, Ordering::SeqCst) == 0 {
                    Err(CloudError::Throttled { retry_after_ms: Some(300) })
                } else {
                    Ok(())
                }
            }
        })
        .await;
        assert_eq!(r, Ok(()));
        assert!(start.elapsed() >= Duration::from_millis(300), "waited {:?}", start.elapsed());

        let start = Instant::now();
        let r: Result<(), _> =
            with_retries(&quick(3), "t", || async { Err(CloudError::Throttled { retry_after_ms: Some(60_000) }) })
                .await;
        assert_eq!(r, Err(CloudError::Throttled { retry_after_ms: Some(60_000) }));
        assert!(start.elapsed() < Duration::from_secs(1), "a wait past the budget is not slept");
    }
}
