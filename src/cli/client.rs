//! The HTTP client behind `submit`, `jobs`, `status`, `cancel`, `complete`, `capacity`, `token`
//! (and `plan` without `--problem`): finds the server and the token, sends requests, and turns
//! every failure into one line a person can act on.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::Output;

/// Default server URL.
pub const DEFAULT_URL: &str = "http://127.0.0.1:7878";

/// Where the server is and who is asking.
#[derive(Args, Debug, Clone)]
pub struct ServerArgs {
    /// Server URL [default: http://127.0.0.1:7878].
    #[arg(long, env = "SPILLWAY_URL")]
    pub url: Option<String>,
    /// Bearer token [default: the contents of <data-dir>/admin.token].
    #[arg(long, env = "SPILLWAY_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Data directory of a local `spillway serve`, where the admin token is [default: ./spillway-data].
    #[arg(long, env = "SPILLWAY_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

/// Server, token and output format; shared by every client command.
#[derive(Args, Debug, Clone)]
pub struct ClientArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

/// A failure, already phrased for people.
#[derive(Debug)]
pub struct ClientError(pub String);

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A connection to one server with one token.
pub struct Client {
    base: String,
    token: String,
    token_source: String,
    http: reqwest::Client,
}

impl Client {
    /// Resolves URL and token from flags, environment, and the data directory.
    pub fn from_args(args: &ServerArgs) -> Result<Client, ClientError> {
        let base = args.url.clone().unwrap_or_else(|| DEFAULT_URL.to_string()).trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ClientError(format!("--url {base:?} must start with http:// or https://")));
        }
        let (token, token_source) = match &args.token {
            Some(t) if !t.trim().is_empty() => (t.trim().to_string(), "--token / SPILLWAY_TOKEN".to_string()),
            _ => {
                let dir = super::serve::default_data_dir(args.data_dir.as_deref());
                let path = scheduler::api::auth::admin_token_path(&dir);
                match std::fs::read_to_string(&path) {
                    Ok(t) if !t.trim().is_empty() => (t.trim().to_string(), path.display().to_string()),
                    _ => {
                        return Err(ClientError(format!(
                            "no token: pass --token or set SPILLWAY_TOKEN, or run where `spillway serve` keeps its data \
                             ({} not found; set --data-dir)",
                            path.display()
                        )));
                    }
                }
            }
        };
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| ClientError(format!("cannot set up the HTTP client: {e}")))?;
        Ok(Client { base, token, token_source, http })
    }

    /// The server URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The bearer token.
    pub fn token(&self) -> &str {
        &self.token
    }

    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, format!("{}{path}", self.base)).bearer_auth(&self.token)
    }

    fn transport_error(&self, e: reqwest::Error) -> ClientError {
        let mut cause = String::new();
        let mut src: Option<&dyn std::error::Error> = std::error::Error::source(&e);
        while let Some(s) = src {
            cause = s.to_string();
            src = s.source();
        }
        if e.is_connect() {
            let why = if cause.is_empty() { "connection failed".to_string() } else { cause.to_lowercase() };
            let why = if why.contains("refused") { "connection refused".to_string() } else { why };
            ClientError(format!("cannot reach spillway at {}: {why}; is `spillway serve` running?", self.base))
        } else if e.is_timeout() {
            ClientError(format!("spillway at {} did not answer in time", self.base))
        } else {
            ClientError(format!(
                "request to {} failed: {e}{}",
                self.base,
                if cause.is_empty() { String::new() } else { format!(" ({cause})") }
            ))
        }
    }

    /// Turns a non-success answer into one line (plus one line per field problem).
    fn status_error(&self, status: StatusCode, body: &str) -> ClientError {
        let parsed: Option<scheduler::api::ErrorBody> = serde_json::from_str(body).ok();
        let message = parsed.as_ref().map(|b| b.error.clone()).unwrap_or_else(|| body.trim().to_string());
        let mut text = match status {
            StatusCode::UNAUTHORIZED => format!(
                "spillway refused the token from {} ({message}); pass --token or set SPILLWAY_TOKEN",
                self.token_source
            ),
            StatusCode::FORBIDDEN => format!("not allowed: {message}"),
            StatusCode::TOO_MANY_REQUESTS => format!("{message} (429)"),
            StatusCode::SERVICE_UNAVAILABLE => format!("spillway is unavailable: {message}"),
            _ => message,
        };
        if let Some(b) = parsed
            && b.problems.len() > 1
        {
            for p in b.problems {
                text.push_str(&format!("\n  {}: {}", if p.field.is_empty() { "(body)" } else { &p.field }, p.problem));
            }
        }
        ClientError(text)
    }

    /// Sends a request and returns the JSON answer (with its status) on success.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Result<(StatusCode, Value), ClientError> {
        let mut req = self.request(method, path).timeout(Duration::from_secs(60));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().await.map_err(|e| self.transport_error(e))?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| self.transport_error(e))?;
        if !status.is_success() {
            return Err(self.status_error(status, &text));
        }
        let value = serde_json::from_str(&text)
            .map_err(|e| ClientError(format!("spillway at {} sent an answer that is not JSON: {e}", self.base)))?;
        Ok((status, value))
    }

    /// `GET path` → JSON.
    pub async fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.send(Method::GET, path, None, &[]).await.map(|(_, v)| v)
    }

    /// Opens the event stream (`GET /v1/events?...`); call [`EventStream::next`] to read.
    pub async fn events(&self, query: &str) -> Result<EventStream, ClientError> {
        let resp = self
            .request(Method::GET, &format!("/v1/events{query}"))
            .header("accept", "text/event-stream")
            .send()
            .await
            .map_err(|e| self.transport_error(e))?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            return Err(self.status_error(status, &text));
        }
        Ok(EventStream { resp, buf: String::new() })
    }
}

impl Client {
    /// A listing (`/v1/jobs`, `/v1/pipelines`) under `key`: the newest page of `path?query`, or with
    /// `all` every page back to the oldest, merged in the API's order with `truncated: false`.
    pub async fn list(&self, path: &str, key: &str, query: &[String], all: bool) -> Result<Value, ClientError> {
        let q = query.join("&");
        let mut page = self.get(&format!("{path}?{q}")).await?;
        if all {
            // Pages come newest first, each oldest first: prepend each older page.
            let mut items = page[key].as_array().cloned().unwrap_or_default();
            while let Some(next) = page["next"].as_str().map(str::to_string) {
                page = self.get(&format!("{path}?{q}&cursor={}", encode(&next))).await?;
                let mut older = page[key].as_array().cloned().unwrap_or_default();
                older.append(&mut items);
                items = older;
            }
            page[key] = Value::Array(items);
            page["truncated"] = false.into();
        }
        Ok(page)
    }
}

impl Client {
    /// Opens a server-sent event stream at `path` (resuming after `last_event_id`), for readers
    /// that need each event's `id` and `event` as well as its `data` ([`SseReader`]).
    pub async fn stream(&self, path: &str, last_event_id: Option<&str>) -> Result<SseReader, ClientError> {
        let mut req = self.request(Method::GET, path).header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        let resp = req.send().await.map_err(|e| self.transport_error(e))?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            return Err(self.status_error(status, &text));
        }
        Ok(SseReader { resp, buf: String::new() })
    }
}

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SseFrame {
    /// `id:`.
    pub id: Option<String>,
    /// `event:` (`message` when absent).
    pub event: String,
    /// `data:` lines joined.
    pub data: String,
}

/// Reads whole frames of a server-sent event stream.
pub struct SseReader {
    resp: reqwest::Response,
    buf: String,
}

impl SseReader {
    /// The next frame; `None` when the server closed the stream.
    pub async fn next(&mut self) -> Result<Option<SseFrame>, ClientError> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut frame = SseFrame { event: "message".into(), ..SseFrame::default() };
                let mut data = Vec::new();
                for line in block.lines() {
                    let (field, value) = line.split_once(':').unwrap_or((line, ""));
                    let value = value.strip_prefix(' ').unwrap_or(value);
                    match field {
                        "id" => frame.id = Some(value.to_string()),
                        "event" => frame.event = value.to_string(),
                        "data" => data.push(value.to_string()),
                        _ => {}
                    }
                }
                if data.is_empty() {
                    continue; // keep-alive comment
                }
                frame.data = data.join("\n");
                return Ok(Some(frame));
            }
            match self.resp.chunk().await {
                Ok(Some(bytes)) => self.buf.push_str(&String::from_utf8_lossy(&bytes).replace("\r\n", "\n")),
                Ok(None) => return Ok(None),
                Err(e) => return Err(ClientError(format!("the stream broke: {e}"))),
            }
        }
    }
}

/// A server-sent event stream being read.
pub struct EventStream {
    resp: reqwest::Response,
    buf: String,
}

impl EventStream {
    /// The next event's `data` as JSON; `None` when the server closed the stream.
    pub async fn next(&mut self) -> Result<Option<Value>, ClientError> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let data: Vec<&str> = block
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                if data.is_empty() {
                    continue; // keep-alive comment
                }
                let v = serde_json::from_str(&data.join("\n"))
                    .map_err(|e| ClientError(format!("malformed event from the server: {e}")))?;
                return Ok(Some(v));
            }
            match self.resp.chunk().await {
                Ok(Some(bytes)) => self.buf.push_str(&String::from_utf8_lossy(&bytes).replace("\r\n", "\n")),
                Ok(None) => return Ok(None),
                Err(e) => return Err(ClientError(format!("the event stream broke: {e}"))),
            }
        }
    }
}

/// Runs a client command on a small runtime and maps its result to an exit code.
pub fn run<F>(fut: F) -> std::process::ExitCode
where
    F: std::future::Future<Output = Result<std::process::ExitCode, ClientError>>,
{
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    match rt.block_on(fut) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

/// Percent-encodes a query value.
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Pretty JSON for `--output json`.
pub fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string()));
}

/// A Unix-milliseconds time as RFC 3339 (UTC, seconds).
pub fn when(ms: Option<i64>) -> String {
    let Some(ms) = ms else { return "-".into() };
    time::OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000))
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| ms.to_string())
}

/// The clock of a response (`clock` of job responses): how its times are labelled.
pub fn clock_label(v: &Value) -> &'static str {
    match v["clock"]["kind"].as_str() {
        Some("simulated") => "simulated clock",
        _ => "wall clock, UTC",
    }
}

/// Describes the clock of a response for a header line: `simulated clock, 60× real time; now …`.
pub fn clock_line(v: &Value) -> String {
    let now = when(v["clock"]["now_ms"].as_i64());
    match (v["clock"]["kind"].as_str(), v["clock"]["speedup"].as_f64()) {
        (Some("simulated"), Some(x)) => {
            format!("simulated clock ({x}× real time; its now is {now}): times below are simulated, not today's")
        }
        (Some("simulated"), None) => format!("simulated clock (its now is {now}): times below are simulated"),
        _ => format!("wall clock, UTC (now {now})"),
    }
}

/// Dollars for a table or a sentence: two decimals, never `-0.00`.
pub fn usd(v: f64) -> String {
    let s = format!("{v:.2}");
    if s == "-0.00" { "0.00".into() } else { s }
}

/// A JSON field as text for a table cell.
pub fn cell(v: &Value, key: &str) -> String {
    match v.get(key) {
        None | Some(Value::Null) => "-".into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}
