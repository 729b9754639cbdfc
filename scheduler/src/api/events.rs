//! `GET /v1/events`: the store's event log as server-sent events, resumable.
//!
//! Each SSE event carries the log position as its `id` (the sequence number, or an opaque cursor
//! for tenant-bound tokens: [`super::cursor`]), the event kind as its `event` and the event as
//! JSON `data`. A client that lost the connection reconnects with `Last-Event-ID: N` (browsers do
//! this by themselves) or `?from=N+1` and misses nothing: the log is durable and its positions
//! never repeat. Without either, the stream starts with the next event.
//!
//! One task (the [`EventHub`]) reads the log, which lives in the store and is written by several
//! components, and fans new events out to every stream over a broadcast channel; a stream reads
//! the store itself only to catch up on history (a resume, or after falling behind the channel),
//! a few streams at a time. So an open stream costs a little memory and no thread, and the number
//! of streams is capped ([`super::ApiConfig::max_event_streams`]): past it, 503 with Retry-After.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::Stream;
use serde::Serialize;
use state::{Event, Store};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast, watch};

use super::cursor::Cursors;

/// Largest batch read from the log per read.
const BATCH: usize = 256;

/// Events the hub keeps for streams that fall behind before they must catch up from the store.
const CHANNEL: usize = 1024;

/// Streams reading history from the store at the same time (each read runs on a blocking thread).
const CATCH_UP_READERS: usize = 4;

/// What one subscriber wants.
#[derive(Debug, Clone)]
pub(crate) struct Subscription {
    /// First sequence number to send.
    pub next_seq: u64,
    /// Only this tenant's events (tenant-bound tokens, who also see cursors, not sequence numbers).
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

/// An event as streamed (the `data` of each frame).
#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct EventView {
    /// Position in the log: the sequence number, or an opaque cursor for tenant-bound tokens.
    pub seq: u64,
    /// When, Unix milliseconds on the server's clock.
    pub at_ms: i64,
    /// What happened.
    #[schema(value_type = super::views::EventKind)]
    pub kind: String,
    /// The job concerned, if any.
    #[serde(default)]
    pub job_id: Option<String>,
    /// The tenant concerned, if any.
    #[serde(default)]
    pub tenant: Option<String>,
    /// What happened, in words.
    pub message: String,
    /// Details for programs (e.g. `{"class": "capacity"}` of a `provisioning_failed`), or null.
    #[schema(value_type = Option<Object>)]
    pub data: serde_json::Value,
}

/// Reads the log once for every stream and fans new events out.
pub(crate) struct EventHub {
    store: Store,
    poll: Duration,
    shutdown: watch::Receiver<bool>,
    tx: broadcast::Sender<Arc<Event>>,
    streams: Arc<Semaphore>,
    max_streams: usize,
    catch_up: Arc<Semaphore>,
    started: Mutex<bool>,
    cursors: Cursors,
}

/// A stream could not be opened.
#[derive(Debug)]
pub(crate) struct TooManyStreams(pub usize);

impl EventHub {
    pub(crate) fn new(
        store: Store,
        poll: Duration,
        max_streams: usize,
        cursors: Cursors,
        shutdown: watch::Receiver<bool>,
    ) -> EventHub {
        let (tx, _) = broadcast::channel(CHANNEL);
        EventHub {
            store,
            poll,
            shutdown,
            tx,
            streams: Arc::new(Semaphore::new(max_streams)),
            max_streams,
            catch_up: Arc::new(Semaphore::new(CATCH_UP_READERS)),
            started: Mutex::new(false),
            cursors,
        }
    }

    /// Streams open now.
    pub(crate) fn open_streams(&self) -> usize {
        self.max_streams - self.streams.available_permits()
    }

    /// Starts the reader task the first time a stream opens (it needs a runtime, which the hub's
    /// creator may not be in).
    fn ensure_reader(&self) {
        let mut started = self.started.lock().unwrap_or_else(|p| p.into_inner());
        if *started {
            return;
        }
        *started = true;
        let (store, tx, poll, mut shutdown) = (self.store.clone(), self.tx.clone(), self.poll, self.shutdown.clone());
        tokio::spawn(async move {
            let mut next = store.last_seq() + 1;
            loop {
                if *shutdown.borrow() {
                    return;
                }
                let mut more = false;
                if tx.receiver_count() > 0 {
                    let s = store.clone();
                    match tokio::task::spawn_blocking(move || s.events_from(next, BATCH)).await {
                        Ok(Ok(events)) => {
                            more = events.len() == BATCH;
                            for e in events {
                                next = e.seq + 1;
                                let _ = tx.send(Arc::new(e));
                            }
                        }
                        Ok(Err(e)) => tracing::warn!(error = %e, "cannot read the event log; retrying"),
                        Err(e) => tracing::warn!(error = %e, "event log reader failed; retrying"),
                    }
                } else {
                    // Nobody listens: what is appended meanwhile is history, read by whoever asks.
                    next = store.last_seq() + 1;
                }
                if !more {
                    tokio::select! {
                        _ = tokio::time::sleep(poll) => {}
                        _ = shutdown.changed() => {}
                    }
                }
            }
        });
    }

    /// Opens a stream, or refuses when [`super::ApiConfig::max_event_streams`] are open.
    pub(crate) fn subscribe(
        self: &Arc<Self>,
        sub: Subscription,
    ) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>> + use<>>, TooManyStreams> {
        let permit = self.streams.clone().try_acquire_owned().map_err(|_| TooManyStreams(self.max_streams))?;
        self.ensure_reader();
        let cursor = Cursor {
            hub: self.clone(),
            rx: self.tx.subscribe(),
            catching_up: true,
            sub,
            buffer: VecDeque::new(),
            shutdown: self.shutdown.clone(),
            _permit: permit,
        };
        let s = futures_util::stream::unfold(cursor, |mut c| async move {
            let e = c.next().await?;
            let frame = c.frame(&e);
            Some((Ok(frame), c))
        });
        Ok(Sse::new(s).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
    }
}

/// One open stream.
struct Cursor {
    hub: Arc<EventHub>,
    rx: broadcast::Receiver<Arc<Event>>,
    /// Reading history from the store (at the start, and after falling behind the channel).
    catching_up: bool,
    sub: Subscription,
    buffer: VecDeque<Arc<Event>>,
    shutdown: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Cursor {
    /// When the last stream goes, hands the memory the streams used back to the system: glibc keeps
    /// freed blocks in its per-thread arenas, so without this a burst of a thousand subscribers
    /// leaves the process tens of megabytes larger for good (RELIABILITY.md, "Event streams").
    fn drop(&mut self) {
        if self.hub.open_streams() == 1 && tokio::runtime::Handle::try_current().is_ok() {
            tokio::task::spawn_blocking(release_free_memory);
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_free_memory() {
    // SAFETY: malloc_trim only walks the allocator's own free lists; it is safe to call at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_memory() {}

impl Cursor {
    fn frame(&self, e: &Event) -> SseEvent {
        let seq = if self.sub.tenant.is_some() { self.hub.cursors.encode(e.seq) } else { e.seq };
        let view = EventView {
            seq,
            at_ms: e.at_ms,
            kind: e.kind.clone(),
            job_id: e.job_id.clone(),
            tenant: e.tenant.clone(),
            message: e.message.clone(),
            data: e.data.clone(),
        };
        let data = serde_json::to_string(&view).unwrap_or_else(|_| "{}".into());
        SseEvent::default().id(seq.to_string()).event(e.kind.clone()).data(data)
    }

    /// The next event this stream wants; `None` once the server shuts down.
    async fn next(&mut self) -> Option<Arc<Event>> {
        loop {
            if let Some(e) = self.buffer.pop_front() {
                return Some(e);
            }
            if *self.shutdown.borrow() {
                return None;
            }
            if self.catching_up {
                self.catch_up().await;
                continue;
            }
            tokio::select! {
                got = self.rx.recv() => match got {
                    Ok(e) if e.seq >= self.sub.next_seq => {
                        self.sub.next_seq = e.seq + 1;
                        if self.sub.wants(&e) {
                            return Some(e);
                        }
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => self.catching_up = true,
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                _ = self.shutdown.changed() => {}
            }
        }
    }

    /// Reads one batch of history from the store; done when the batch is short.
    async fn catch_up(&mut self) {
        let Ok(_reader) = self.hub.catch_up.clone().acquire_owned().await else { return };
        let (store, from) = (self.hub.store.clone(), self.sub.next_seq);
        match tokio::task::spawn_blocking(move || store.events_from(from, BATCH)).await {
            Ok(Ok(events)) => {
                if events.len() < BATCH {
                    self.catching_up = false;
                }
                for e in events {
                    self.sub.next_seq = e.seq + 1;
                    if self.sub.wants(&e) {
                        self.buffer.push_back(Arc::new(e));
                    }
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot read the event log; retrying");
                tokio::time::sleep(self.hub.poll).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "event log reader failed; retrying");
                tokio::time::sleep(self.hub.poll).await;
            }
        }
    }
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
