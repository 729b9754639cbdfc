//! `GET /v1/jobs/{id}/logs`: a job's output, every rank of every attempt, as the agents sent it.
//!
//! Without `follow`, a page of lines as JSON (`next` is where the following page starts). With
//! `follow=true`, server-sent events: one `line` event per line (its `id` is the position after it,
//! so a reconnect with `Last-Event-ID` misses nothing), then one `end` event once the job has ended
//! and its agents have gone quiet. Tenancy and roles are the job's: whoever may read the job may
//! read its logs, and another tenant's job is "not found".

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::{Duration, Instant};

use axum::Extension;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ErrorBody, blocking};
use crate::agents::{AgentService, LogCursor, LogEntry, LogFilter, LogPage};

/// Most lines per page (and per read while following).
const MAX_LINES: usize = 10_000;

/// About the most text bytes per page.
const MAX_PAGE_BYTES: usize = 4 * 1024 * 1024;

/// How long a follower waits, once the job has ended, for the agents' last lines.
const END_GRACE: Duration = Duration::from_secs(3);

/// Query of `GET /v1/jobs/{id}/logs`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogsQuery {
    /// Only this attempt.
    #[param(minimum = 1)]
    attempt: Option<u32>,
    /// Only this rank.
    #[param(minimum = 0)]
    rank: Option<u32>,
    /// Start here (a `next` or a line's `cursor`; default: the beginning).
    #[param(pattern = "^[0-9]+(\\.[0-9]+)?$")]
    from: Option<String>,
    /// At most this many lines (default and maximum 10000).
    #[param(minimum = 1, maximum = 10000)]
    limit: Option<usize>,
    /// Stream new lines as server-sent events until the job ends.
    follow: Option<bool>,
}

/// The `end` event of a followed log.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LogEnd {
    /// The job's final state.
    pub state: String,
    /// Where the log ended (`from=` to read anything stored later).
    pub next: String,
}

/// A job's output (JSON), or with `follow=true` its new lines as server-sent events.
#[utoipa::path(
    get, path = "/v1/jobs/{id}/logs", tag = "jobs",
    params(("id" = String, Path, description = "Job id"), LogsQuery,
           ("Last-Event-ID" = Option<String>, Header, description = "follow: resume after this line's cursor")),
    responses(
        (status = 200, description = "A page of lines (JSON), or with follow=true `text/event-stream`: \
            `event: line` (`id` = the position after it, `data` = a LogEntry) ... then `event: end` (`data` = a LogEnd)",
            body = LogPage),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 503, body = ErrorBody),
    )
)]
pub(crate) async fn job_logs(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
    q: Result<Query<LogsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let id = id.map(|Path(v)| v).map_err(|e| ApiError::bad_field("id", e.body_text()))?;
    let q = q.map(|Query(v)| v).map_err(|e| ApiError::bad_field("query", e.body_text()))?;
    super::handlers::visible_job(&state, &caller, &id).await?;
    let limit = q.limit.unwrap_or(MAX_LINES);
    if limit == 0 || limit > MAX_LINES {
        return Err(ApiError::bad_field("limit", format!("must be between 1 and {MAX_LINES}")));
    }
    let resume = headers.get("last-event-id").and_then(|v| v.to_str().ok()).map(str::to_string);
    let from = match q.from.or(resume) {
        None => LogCursor::default(),
        Some(s) => LogCursor::parse(&s).ok_or_else(|| ApiError::bad_field("from", "a position such as 12 or 12.3"))?,
    };
    let filter = LogFilter { attempt: q.attempt, rank: q.rank };
    let Some(svc) = state.agents().cloned() else {
        let empty = LogPage { lines: Vec::new(), next: from.to_string(), more: false };
        return Ok(axum::Json(empty).into_response());
    };
    if !q.follow.unwrap_or(false) {
        let s = svc.clone();
        let page =
            blocking(move || s.read_logs(&id, filter, from, limit, MAX_PAGE_BYTES).map_err(ApiError::from)).await?;
        return Ok(axum::Json(page).into_response());
    }
    Ok(follow(state, svc, id, filter, from).into_response())
}

struct Follower {
    state: ApiState,
    svc: AgentService,
    job: String,
    filter: LogFilter,
    cursor: LogCursor,
    buffer: VecDeque<LogEntry>,
    changes: tokio::sync::watch::Receiver<u64>,
    ended_since: Option<Instant>,
    done: bool,
}

fn follow(
    state: ApiState,
    svc: AgentService,
    job: String,
    filter: LogFilter,
    from: LogCursor,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    let changes = svc.subscribe();
    let f = Follower {
        state,
        svc,
        job,
        filter,
        cursor: from,
        buffer: VecDeque::new(),
        changes,
        ended_since: None,
        done: false,
    };
    let stream = futures_util::stream::unfold(f, |mut f| async move {
        loop {
            if f.done {
                return None;
            }
            if let Some(line) = f.buffer.pop_front() {
                let ev = SseEvent::default()
                    .id(line.cursor.clone())
                    .event("line")
                    .data(serde_json::to_string(&line).unwrap_or_default());
                return Some((Ok(ev), f));
            }
            if *f.state.shutdown().borrow() {
                return None;
            }
            let (svc, job, filter, cursor) = (f.svc.clone(), f.job.clone(), f.filter, f.cursor);
            let read = tokio::task::spawn_blocking(move || {
                let page = svc.read_logs(&job, filter, cursor, MAX_LINES, MAX_PAGE_BYTES)?;
                let state = svc.store().get::<crate::model::Job>(&job)?.map(|j| j.state);
                Ok::<_, state::StoreError>((page, state))
            })
            .await;
            let (page, job_state) = match read {
                Ok(Ok(x)) => x,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "cannot read a job's log; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "log reader failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            f.cursor = LogCursor::parse(&page.next).unwrap_or(f.cursor);
            if !page.lines.is_empty() {
                f.buffer.extend(page.lines);
                f.ended_since = None;
                continue;
            }
            match job_state {
                Some(s) if s.is_final() => {
                    let since = *f.ended_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= END_GRACE {
                        f.done = true;
                        let end = LogEnd { state: s.as_str().to_string(), next: f.cursor.to_string() };
                        let ev = SseEvent::default().event("end").data(serde_json::to_string(&end).unwrap_or_default());
                        return Some((Ok(ev), f));
                    }
                }
                // The job was forgotten (retention) while followed.
                None => return None,
                Some(_) => {}
            }
            let mut shutdown = f.state.shutdown();
            tokio::select! {
                _ = f.changes.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                _ = shutdown.changed() => {}
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
