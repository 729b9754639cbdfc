//! The agent's side of the agent routes: one attempt, one credential, retries that outlast a
//! scheduler restart.
//!
//! Connection failures, 5xx and 429 are retried with backoff (a restarting scheduler comes back
//! and the agent carries on where it was); 401 and 404 mean the attempt has ended or this
//! credential is not for it, and stop the agent; other 4xx are bugs and are reported as such.

use std::time::Duration;

use reqwest::StatusCode;
use scheduler::agents::AgentSettings;
use scheduler::agents::protocol::{Action, Heartbeat, LogAck, LogBatch, Registered, Registration, Report, WorkStatus};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Why a call failed for good.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The scheduler refused the credential or does not know the attempt (401, 404): the attempt
    /// has ended or was never this agent's. The agent stops.
    #[error("the scheduler refused this agent ({status}): {message}")]
    Refused {
        /// HTTP status.
        status: u16,
        /// The scheduler's message.
        message: String,
    },
    /// Any other refusal (409, 422, …).
    #[error("the scheduler rejected a request ({status}): {message}")]
    Rejected {
        /// HTTP status.
        status: u16,
        /// The scheduler's message.
        message: String,
    },
    /// The scheduler could not be reached within the retry budget.
    #[error("the scheduler at {url} could not be reached: {message}")]
    Unreachable {
        /// Its URL.
        url: String,
        /// The last failure.
        message: String,
    },
}

impl CallError {
    /// True when the attempt is over for this agent.
    pub fn is_refused(&self) -> bool {
        matches!(self, CallError::Refused { .. })
    }
}

/// A client for one rank (or, before registration, one attempt).
#[derive(Clone)]
pub struct SchedulerClient {
    http: reqwest::Client,
    base: String,
    credential: String,
}

impl std::fmt::Debug for SchedulerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerClient").field("base", &self.base).finish_non_exhaustive()
    }
}

enum Failure {
    Retry(String),
    Final(CallError),
}

impl SchedulerClient {
    /// A client for the settings' attempt.
    pub fn new(settings: &AgentSettings) -> Result<SchedulerClient, String> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(40))
            .user_agent(concat!("spillway-agent/", env!("CARGO_PKG_VERSION")));
        if let Some(pem) = &settings.ca_cert {
            for cert in reqwest::Certificate::from_pem_bundle(pem.as_bytes()).map_err(|e| format!("ca_cert: {e}"))? {
                builder = builder.add_root_certificate(cert);
            }
        }
        let http = builder.build().map_err(|e| format!("cannot set up HTTP: {e}"))?;
        let base = format!(
            "{}/v1/agent/jobs/{}/attempts/{}",
            settings.scheduler_url.trim_end_matches('/'),
            encode(&settings.job_id),
            settings.attempt
        );
        Ok(SchedulerClient { http, base, credential: settings.credential.clone() })
    }

    async fn once<B: Serialize, T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<Option<T>, Failure> {
        let mut req = self.http.request(method, format!("{}{path}", self.base)).bearer_auth(&self.credential);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().await.map_err(|e| Failure::Retry(describe(&e)))?;
        let status = resp.status();
        if status == StatusCode::NO_CONTENT {
            return Ok(None);
        }
        let text = resp.text().await.map_err(|e| Failure::Retry(describe(&e)))?;
        if status.is_success() {
            return serde_json::from_str(&text).map(Some).map_err(|e| {
                Failure::Final(CallError::Rejected {
                    status: status.as_u16(),
                    message: format!("unreadable answer: {e}"),
                })
            });
        }
        let message = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .unwrap_or(text);
        match status {
            StatusCode::UNAUTHORIZED | StatusCode::NOT_FOUND => {
                Err(Failure::Final(CallError::Refused { status: status.as_u16(), message }))
            }
            s if s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS || s == StatusCode::REQUEST_TIMEOUT => {
                Err(Failure::Retry(format!("{s}: {message}")))
            }
            s => Err(Failure::Final(CallError::Rejected { status: s.as_u16(), message })),
        }
    }

    /// Calls until it succeeds, fails for good, or `budget` runs out (`None`: no limit).
    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&B>,
        budget: Option<Duration>,
    ) -> Result<Option<T>, CallError> {
        let started = tokio::time::Instant::now();
        let mut backoff = Duration::from_millis(200);
        let mut warned = false;
        loop {
            match self.once(method.clone(), path, body).await {
                Ok(v) => {
                    if warned {
                        tracing::info!("the scheduler answers again");
                    }
                    return Ok(v);
                }
                Err(Failure::Final(e)) => return Err(e),
                Err(Failure::Retry(message)) => {
                    if budget.is_some_and(|b| started.elapsed() + backoff > b) {
                        return Err(CallError::Unreachable { url: self.base.clone(), message });
                    }
                    if !warned && started.elapsed() > Duration::from_secs(5) {
                        tracing::warn!(%message, "the scheduler does not answer; retrying");
                        warned = true;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    /// Registers this VM (retried until the scheduler answers).
    pub async fn register(&self, reg: &Registration) -> Result<Registered, CallError> {
        self.call(reqwest::Method::POST, "/register", Some(reg), None)
            .await
            .map(|v| v.expect("register answers a body"))
    }

    /// The rank's order, waiting up to `wait` for the gang.
    pub async fn work(&self, rank: u32, wait: Duration) -> Result<WorkStatus, CallError> {
        let path = format!("/ranks/{rank}/work?wait_ms={}", wait.as_millis());
        self.call::<(), WorkStatus>(reqwest::Method::GET, &path, None, None)
            .await
            .map(|v| v.expect("work answers a body"))
    }

    /// Sends a log batch (retried until stored: it must not be lost).
    pub async fn logs(&self, rank: u32, batch: &LogBatch) -> Result<LogAck, CallError> {
        let path = format!("/ranks/{rank}/logs");
        self.call(reqwest::Method::POST, &path, Some(batch), None).await.map(|v| v.expect("logs answer a body"))
    }

    /// Sends a heartbeat; gives up after one interval (the next heartbeat follows anyway).
    pub async fn heartbeat(&self, rank: u32, hb: &Heartbeat, budget: Duration) -> Result<Action, CallError> {
        let path = format!("/ranks/{rank}/heartbeat");
        self.call(reqwest::Method::POST, &path, Some(hb), Some(budget))
            .await
            .map(|v| v.expect("heartbeat answers a body"))
    }

    /// Reports an event on the rank (retried until recorded).
    pub async fn report(&self, rank: u32, report: &Report) -> Result<(), CallError> {
        let path = format!("/ranks/{rank}/reports");
        self.call::<Report, serde_json::Value>(reqwest::Method::POST, &path, Some(report), None).await.map(|_| ())
    }
}

fn describe(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(cause) = src {
        s = format!("{s}: {cause}");
        src = cause.source();
    }
    s
}

/// Percent-encodes a path segment.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
