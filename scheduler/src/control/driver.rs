//! Runs reconcile rounds in real time: on a timer (sooner when a round asked to look again sooner),
//! and soon after every event (a submission, a cancellation), waiting a short batching window first
//! so a burst is solved together, and never less than the last round took, so a stream of
//! submissions cannot keep the loop busy all the time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::Controller;

/// How the loop's rounds have gone, for readiness: ready means the last round succeeded (a server
/// whose every round fails must not take traffic as if it worked).
#[derive(Debug, Default)]
pub struct RoundHealth(Mutex<RoundStatus>);

/// A snapshot of [`RoundHealth`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoundStatus {
    /// Rounds that succeeded since the loop (or this term of it) started.
    pub succeeded: u64,
    /// Rounds that failed since the last one that succeeded.
    pub failed_in_a_row: u64,
    /// Why the last failed round failed, while failures go on.
    pub last_error: Option<String>,
}

impl RoundHealth {
    /// Records a round's outcome.
    pub fn record(&self, outcome: Result<(), String>) {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match outcome {
            Ok(()) => {
                s.succeeded += 1;
                s.failed_in_a_row = 0;
                s.last_error = None;
            }
            Err(e) => {
                s.failed_in_a_row += 1;
                s.last_error = Some(e);
            }
        }
    }

    /// How the rounds have gone.
    pub fn status(&self) -> RoundStatus {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Starts counting afresh (a new term of leadership).
    pub fn reset(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = RoundStatus::default();
    }
}

/// The soonest a round comes back for something a round asked to look at again.
const MIN_LOOK_AGAIN: Duration = Duration::from_secs(1);

/// When rounds run.
#[derive(Debug, Clone, Copy)]
pub struct DriverConfig {
    /// Longest time between rounds.
    pub interval: Duration,
    /// Wait after a wake-up before the round, so a burst of submissions lands in one solve.
    pub batch_window: Duration,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig { interval: Duration::from_secs(5), batch_window: Duration::from_millis(200) }
    }
}

/// Runs rounds until `shutdown` turns true. Errors are logged and the next round tries again:
/// every round starts from what is on disk and in the cloud, so nothing is lost by skipping one.
pub async fn run_forever(
    controller: Arc<Controller>,
    wake: Arc<tokio::sync::Notify>,
    config: DriverConfig,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        if *shutdown.borrow() {
            break;
        }
        let started = std::time::Instant::now();
        let outcome = controller.reconcile().await;
        let took = started.elapsed();
        controller.health.record(outcome.as_ref().map(|_| ()).map_err(|e| e.to_string()));
        // Something the round saw is worth a look before the next timed round (an operation's
        // `Retry-After`, a deletion backing off): come back then, but never sooner than a second (or
        // the batching window), so a burst of short requeues cannot spin the loop.
        let floor = config.batch_window.max(MIN_LOOK_AGAIN);
        let look_again = match &outcome {
            Ok(r) => r.look_again_in_ms.map(|ms| Duration::from_millis(ms.max(0) as u64).max(floor)),
            Err(_) => None,
        };
        let next = look_again.map_or(config.interval, |d| d.min(config.interval));
        match outcome {
            Ok(r) if !r.is_quiet() => tracing::info!(
                placements = r.placements,
                failures = r.provisioning_failures,
                running = r.became_running,
                failovers = r.failovers,
                evictions = r.evictions,
                finished = r.finished,
                pending = r.pending,
                solve_ms = r.solve_ms,
                "reconcile round"
            ),
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "reconcile round failed; retrying"),
        }
        tokio::select! {
            _ = tokio::time::sleep(next) => {}
            // Under a sustained stream of wake-ups, wait at least as long as the last round took:
            // the loop then uses at most about half the time, and the API keeps the rest.
            _ = wake.notified() => tokio::time::sleep(wait_after_wake(&config, took)).await,
            _ = shutdown.changed() => {}
        }
    }
}

/// How long the loop waits after a wake-up before its next round: the batching window, or as long
/// as the last round took (so a stream of wake-ups leaves the API about half the time), but never
/// longer than the timed interval. Unbounded, a round that took minutes (a new leader's first
/// round placing hundreds of queued jobs on a slow machine) held the next one back as long again
/// while submissions kept waking the loop: ha_e2e with the default lease logged a 4-minute round,
/// then no round for 3.5 minutes.
fn wait_after_wake(config: &DriverConfig, took: Duration) -> Duration {
    config.batch_window.max(took.min(config.interval))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_round_holds_the_next_one_back_no_longer_than_the_interval() {
        let config = DriverConfig { interval: Duration::from_secs(5), batch_window: Duration::from_millis(200) };
        assert_eq!(wait_after_wake(&config, Duration::from_secs(240)), Duration::from_secs(5));
        assert_eq!(wait_after_wake(&config, Duration::from_secs(2)), Duration::from_secs(2));
        assert_eq!(wait_after_wake(&config, Duration::from_millis(30)), Duration::from_millis(200));
    }
}
