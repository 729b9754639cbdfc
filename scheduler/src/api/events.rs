//! `GET /v1/events`: the store's event log as server-sent events, resumable.
//!
//! Each SSE event carries the log's sequence number as its `id`, the event kind as its `event`
//! and the whole [`state::Event`] as JSON `data`. A client that lost the connection reconnects
//! with `Last-Event-ID: N` (browsers do this by themselves) or `?from=N+1` and misses nothing: the
//! log is durable and its sequence numbers never repeat. Without either, the stream starts with
//! the next event. The log is polled (it lives in the store, written by several components), at
//! an interval short enough for people and cheap when idle.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::Stream;
use state::{Event, Store};
use tokio::sync::watch;

/// Largest batch read from the log per poll.
const BATCH: usize = 256;

/// What one subscriber wants.
#[derive(Debug, Clone)]
pub(crate) struct Subscription {
    /// First sequence number to send.
    pub next_seq: u64,
    /// Only this tenant's events (tenant-bound tokens).
    pub tenant: Option<String>,
    /// Only this job's events.
    pub job: Option<String>,
    /// Only these kinds.
    pub kinds: Option<Vec<String>>,
}

impl Subscription {
    fn wants(&self, e: &Event) -> bool {
        self.tenant.as_ref().is_none_or(|t| e.tenant.as_ref() == Some(t))
            && self.job.as_ref().is_none_or(|j| e.job_id.as_ref() == Some(j))
            && self.kinds.as_ref().is_none_or(|ks| ks.contains(&e.kind))
    }
}

struct Cursor {
    store: Store,
    sub: Subscription,
    buffer: VecDeque<Event>,
    poll: Duration,
    shutdown: watch::Receiver<bool>,
}

/// The SSE response for a subscription; ends when the server shuts down.
pub(crate) fn stream(
    store: Store,
    sub: Subscription,
    poll: Duration,
    shutdown: watch::Receiver<bool>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let cursor = Cursor { store, sub, buffer: VecDeque::new(), poll, shutdown };
    let s = futures_util::stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some(e) = c.buffer.pop_front() {
                let data = serde_json::to_string(&e).unwrap_or_else(|_| "{}".into());
                let ev = SseEvent::default().id(e.seq.to_string()).event(e.kind.clone()).data(data);
                return Some((Ok(ev), c));
            }
            if *c.shutdown.borrow() {
                return None;
            }
            let store = c.store.clone();
            let from = c.sub.next_seq;
            let batch = tokio::task::spawn_blocking(move || store.events_from(from, BATCH)).await;
            match batch {
                Ok(Ok(events)) if !events.is_empty() => {
                    let full = events.len() == BATCH;
                    if let Some(last) = events.last() {
                        c.sub.next_seq = last.seq + 1;
                    }
                    c.buffer.extend(events.into_iter().filter(|e| c.sub.wants(e)));
                    if full || !c.buffer.is_empty() {
                        continue;
                    }
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot read the event log; retrying"),
                Err(e) => tracing::warn!(error = %e, "event log reader failed; retrying"),
            }
            tokio::select! {
                _ = tokio::time::sleep(c.poll) => {}
                _ = c.shutdown.changed() => {}
            }
        }
    });
    Sse::new(s).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(seq: u64, kind: &str, job: Option<&str>, tenant: Option<&str>) -> Event {
        Event {
            seq,
            at_ms: 0,
            kind: kind.into(),
            job_id: job.map(Into::into),
            tenant: tenant.map(Into::into),
            message: String::new(),
            data: serde_json::Value::Null,
        }
    }

    #[test]
    fn filters_by_tenant_job_and_kind() {
        let sub = Subscription {
            next_seq: 1,
            tenant: Some("ml".into()),
            job: None,
            kinds: Some(vec!["running".into(), "succeeded".into()]),
        };
        assert!(sub.wants(&ev(1, "running", Some("j"), Some("ml"))));
        assert!(!sub.wants(&ev(2, "running", Some("j"), Some("search"))));
        assert!(!sub.wants(&ev(3, "running", None, None)), "tenant-bound subscribers see no untagged events");
        assert!(!sub.wants(&ev(4, "submitted", Some("j"), Some("ml"))));
        let sub = Subscription { next_seq: 1, tenant: None, job: Some("j".into()), kinds: None };
        assert!(sub.wants(&ev(5, "submitted", Some("j"), Some("x"))));
        assert!(!sub.wants(&ev(6, "submitted", Some("k"), Some("x"))));
    }
}
