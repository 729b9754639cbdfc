//! Ships the work's output to the scheduler: lines go into a bounded buffer (the work never waits
//! on the network: a scheduler outage must not stall training), batches leave in order, each
//! retried until the scheduler has it on disk. When the buffer is full the oldest lines give way
//! and a marker line says how many; once the scheduler says the rank's log reached its cap, lines
//! are no longer sent (the exit report still carries the last ones).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use scheduler::agents::protocol::{LogBatch, LogLine, LogStream};

use crate::client::SchedulerClient;

/// Bytes of output held while the scheduler is away.
pub const BUFFER_BYTES: usize = 8 * 1024 * 1024;

/// Most bytes of text per batch.
const BATCH_BYTES: usize = 256 * 1024;

/// Most lines per batch.
const BATCH_LINES: usize = 5_000;

#[derive(Debug, Default)]
struct State {
    lines: VecDeque<(u32, LogLine)>,
    bytes: usize,
    dropped: u64,
    truncated: bool,
    in_flight: bool,
    stopped: bool,
}

/// The buffer between the work's outputs and the shipping task.
#[derive(Debug, Default)]
pub struct LogBuffer {
    state: Mutex<State>,
    ready: tokio::sync::Notify,
}

impl LogBuffer {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a line of start `restart`; never waits.
    pub fn push(&self, restart: u32, stream: LogStream, text: String) {
        let mut s = self.lock();
        if s.truncated || s.stopped {
            return;
        }
        let size = text.len() + 32;
        while s.bytes + size > BUFFER_BYTES {
            let Some((_, old)) = s.lines.pop_front() else { break };
            s.bytes -= old.text.len() + 32;
            s.dropped += 1;
        }
        s.bytes += size;
        s.lines.push_back((restart, LogLine { at_ms: now_ms(), stream, text }));
        drop(s);
        self.ready.notify_one();
    }

    /// The next batch: lines of one start, in order, within the batch limits.
    fn take(&self) -> Option<(u32, Vec<LogLine>)> {
        let mut s = self.lock();
        let restart = s.lines.front()?.0;
        let mut lines = Vec::new();
        if s.dropped > 0 {
            let n = std::mem::take(&mut s.dropped);
            lines.push(LogLine {
                at_ms: now_ms(),
                stream: LogStream::Agent,
                text: format!("[spillway-agent: {n} lines dropped while the scheduler was unreachable]"),
            });
        }
        let mut bytes = 0;
        while let Some((r, _)) = s.lines.front() {
            if *r != restart || lines.len() >= BATCH_LINES || bytes >= BATCH_BYTES {
                break;
            }
            let (_, line) = s.lines.pop_front().expect("front exists");
            s.bytes -= line.text.len() + 32;
            bytes += line.text.len();
            lines.push(line);
        }
        s.in_flight = true;
        Some((restart, lines))
    }

    /// True when nothing is waiting or in flight.
    fn drained(&self) -> bool {
        let s = self.lock();
        s.lines.is_empty() && !s.in_flight
    }
}

/// The shipping task of one rank.
pub struct Shipper {
    buffer: Arc<LogBuffer>,
    task: tokio::task::JoinHandle<()>,
}

impl Shipper {
    /// Starts shipping `buffer` for `rank`, batches numbered within `boot_id`.
    pub fn start(client: SchedulerClient, rank: u32, boot_id: String) -> Shipper {
        let buffer = Arc::new(LogBuffer::default());
        let buf = buffer.clone();
        let task = tokio::spawn(async move {
            let mut batch = 0u64;
            loop {
                while let Some((restart, lines)) = buf.take() {
                    batch += 1;
                    let body = LogBatch { boot_id: boot_id.clone(), batch, restart, lines };
                    let sent = client.logs(rank, &body).await;
                    let mut s = buf.lock();
                    s.in_flight = false;
                    match sent {
                        Ok(ack) if ack.truncated => {
                            s.truncated = true;
                            s.lines.clear();
                            s.bytes = 0;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(error = %e, "logs can no longer be sent");
                            s.stopped = true;
                            s.lines.clear();
                            s.bytes = 0;
                        }
                    }
                }
                if buf.lock().stopped {
                    return;
                }
                tokio::select! {
                    _ = buf.ready.notified() => {
                        // Let a burst gather into one batch.
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        });
        Shipper { buffer, task }
    }

    /// The buffer to push lines into.
    pub fn buffer(&self) -> Arc<LogBuffer> {
        self.buffer.clone()
    }

    /// Waits until every line pushed so far is stored (or `timeout` passes).
    pub async fn flush(&self, timeout: Duration) -> bool {
        self.buffer.ready.notify_one();
        let until = tokio::time::Instant::now() + timeout;
        while tokio::time::Instant::now() < until {
            if self.buffer.drained() || self.task.is_finished() {
                return self.buffer.drained();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }
}

fn now_ms() -> i64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_keep_to_one_start_and_a_full_buffer_drops_the_oldest_with_a_marker() {
        let b = LogBuffer::default();
        b.push(0, LogStream::Stdout, "a".into());
        b.push(0, LogStream::Stderr, "b".into());
        b.push(1, LogStream::Stdout, "c".into());
        let (r, lines) = b.take().unwrap();
        assert_eq!((r, lines.len()), (0, 2));
        b.lock().in_flight = false;
        let (r, lines) = b.take().unwrap();
        assert_eq!((r, lines[0].text.as_str()), (1, "c"));
        b.lock().in_flight = false;
        assert!(b.drained());
        let big = "x".repeat(1024 * 1024);
        for _ in 0..10 {
            b.push(2, LogStream::Stdout, big.clone());
        }
        let (_, lines) = b.take().unwrap();
        assert!(lines[0].text.contains("lines dropped"), "{}", lines[0].text);
        assert!(b.lock().bytes <= BUFFER_BYTES);
    }
}
