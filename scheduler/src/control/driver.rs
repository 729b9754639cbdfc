//! Runs reconcile rounds in real time: on a timer, and soon after every event (a submission, a
//! cancellation), waiting a short batching window first so a burst is solved together.

use std::sync::Arc;
use std::time::Duration;

use super::Controller;

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
        match controller.reconcile().await {
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
            _ = tokio::time::sleep(config.interval) => {}
            _ = wake.notified() => tokio::time::sleep(config.batch_window).await,
            _ = shutdown.changed() => {}
        }
    }
}
