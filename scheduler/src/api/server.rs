//! Serving the router over HTTP/1.1 with the limits a public-facing server needs: a header-read
//! timeout and a cap on open connections.
//!
//! `axum::serve` has neither: a client that opens connections and sends half a header holds a
//! descriptor and a task for as long as it likes (a probe held 200 such connections for over a
//! minute, one with half a header for 100 s). Here:
//! - A connection's first request must deliver its whole header within
//!   [`Limits::header_read_timeout`], or it is answered `408 Request Timeout` and closed. Later
//!   requests on a kept-alive connection get the same time (hyper's own timer), after which the
//!   connection is closed; an idle kept-alive connection is closed after it too.
//! - At most [`Limits::max_connections`] connections are served at once; one more is answered
//!   `503` with `Retry-After` and closed, so descriptors stay bounded.
//! - A header larger than [`MAX_HEAD_BYTES`] is answered `431` and closed.
//!
//! Graceful shutdown as in `axum::serve`: stop accepting, let in-flight requests finish.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::{Semaphore, watch};

/// Largest request header accepted, bytes.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// The limits of [`serve`].
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// Connections served at once, at most.
    pub max_connections: usize,
}

impl Limits {
    /// The limits of an API configuration.
    pub fn of(config: &super::ApiConfig) -> Limits {
        Limits { header_read_timeout: config.header_read_timeout, max_connections: config.max_connections.max(1) }
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then waits for open requests.
pub async fn serve<L>(
    mut listener: L,
    router: axum::Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()>
where
    L: axum::serve::Listener,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (stop_tx, stop_rx) = watch::channel(false);
    // Every connection task holds a receiver of this channel; shutdown waits until all are gone.
    let (done_tx, done_rx) = watch::channel(());
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let mut stopping = stop_rx.clone();
    loop {
        let (io, _peer) = tokio::select! {
            conn = listener.accept() => conn,
            _ = stopping.wait_for(|s| *s) => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tokio::spawn(refuse(io, Refusal::Busy(limits.max_connections)));
            continue;
        };
        let (router, mut stop, done) = (router.clone(), stop_rx.clone(), done_rx.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let _done = done;
            let io = match read_first_head(io, limits.header_read_timeout).await {
                Ok(io) => io,
                Err((io, refusal)) => {
                    if let (Some(io), Some(r)) = (io, refusal) {
                        refuse(io, r).await;
                    }
                    return;
                }
            };
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
            let conn = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(router));
            tokio::pin!(conn);
            loop {
                tokio::select! {
                    r = conn.as_mut() => {
                        if let Err(e) = r {
                            tracing::debug!(error = %e, "connection ended with an error");
                        }
                        break;
                    }
                    _ = stop.wait_for(|s| *s) => conn.as_mut().graceful_shutdown(),
                }
            }
        });
    }
    drop(listener);
    drop(done_rx);
    done_tx.closed().await;
    Ok(())
}

/// Why a connection is answered and closed without reaching the router.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// The header did not arrive in time.
    Timeout(Duration),
    /// The header is larger than [`MAX_HEAD_BYTES`].
    TooLarge,
    /// [`Limits::max_connections`] are open.
    Busy(usize),
}

/// Writes the refusal (the same JSON error shape as every other answer) and closes.
async fn refuse<S: AsyncRead + AsyncWrite + Unpin>(mut io: S, why: Refusal) {
    let (status, message, extra) = match why {
        Refusal::Timeout(t) => {
            ("408 Request Timeout", format!("the request header did not arrive within {} ms", t.as_millis()), "")
        }
        Refusal::TooLarge => (
            "431 Request Header Fields Too Large",
            format!("the request header is larger than {MAX_HEAD_BYTES} bytes"),
            "",
        ),
        Refusal::Busy(n) => (
            "503 Service Unavailable",
            format!("{n} connections are open, the most this server serves; retry later"),
            "Retry-After: 1\r\n",
        ),
    };
    if matches!(why, Refusal::Busy(_)) {
        // Read what the client sent first: closing a socket with unread data resets it, and the
        // client would see a reset instead of this answer.
        let mut sink = [0u8; 4096];
        let _ = tokio::time::timeout(Duration::from_millis(200), io.read(&mut sink)).await;
    }
    let body = serde_json::json!({ "error": message, "problems": [] }).to_string();
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{extra}\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = io.write_all(response.as_bytes()).await;
        let _ = io.shutdown().await;
    })
    .await;
}

/// Reads until the first request's header is complete; the bytes read are handed on with the
/// connection. `Err((Some(io), Some(refusal)))` when the client must be told why it is closed,
/// `Err((None, None))` when it went away.
#[allow(clippy::type_complexity)]
async fn read_first_head<S: AsyncRead + AsyncWrite + Unpin>(
    mut io: S,
    timeout: Duration,
) -> Result<Prefixed<S>, (Option<S>, Option<Refusal>)> {
    enum Head {
        Complete,
        Closed,
        TooLarge,
    }
    let mut buf = Vec::with_capacity(1024);
    let read = tokio::time::timeout(timeout, async {
        let mut chunk = [0u8; 4096];
        loop {
            let n = io.read(&mut chunk).await?;
            if n == 0 {
                return Ok::<_, io::Error>(Head::Closed);
            }
            // Only the last few bytes can complete the terminator with this chunk.
            let from = buf.len().saturating_sub(3);
            buf.extend_from_slice(&chunk[..n]);
            if buf[from..].windows(4).any(|w| w == b"\r\n\r\n") {
                return Ok(Head::Complete);
            }
            if buf.len() > MAX_HEAD_BYTES {
                return Ok(Head::TooLarge);
            }
        }
    })
    .await;
    match read {
        Ok(Ok(Head::Complete)) => Ok(Prefixed { prefix: buf, pos: 0, inner: io }),
        Ok(Ok(Head::TooLarge)) => Err((Some(io), Some(Refusal::TooLarge))),
        Ok(Ok(Head::Closed)) | Ok(Err(_)) => Err((None, None)),
        Err(_) => Err((Some(io), Some(Refusal::Timeout(timeout)))),
    }
}

/// A connection whose first bytes were already read: they are read again first.
struct Prefixed<S> {
    prefix: Vec<u8>,
    pos: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if self.pos < self.prefix.len() {
            let n = (self.prefix.len() - self.pos).min(out.remaining());
            let start = self.pos;
            out.put_slice(&self.prefix[start..start + n]);
            self.pos += n;
            if self.pos == self.prefix.len() {
                self.prefix = Vec::new();
                self.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, out)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
