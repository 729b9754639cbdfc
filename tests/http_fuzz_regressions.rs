//! What the property-based HTTP fuzz run (`fuzz/http_fuzz.sh`, schemathesis against
//! `/openapi.json`) found, kept as regression tests. A fuzzer only generates what the document
//! describes, so a wrong document hides bugs and misleads every client generated from it.

use serde_json::Value;

fn doc() -> Value {
    serde_json::to_value(scheduler::api::openapi()).expect("the OpenAPI document serialises")
}

fn params<'a>(doc: &'a Value, path: &str, method: &str) -> Vec<&'a Value> {
    doc["paths"][path][method]["parameters"]
        .as_array()
        .unwrap_or_else(|| panic!("{method} {path} has no parameters"))
        .iter()
        .collect()
}

/// Found by schemathesis: the query strings of `GET /v1/jobs` and `GET /v1/events` were published
/// as required *path* parameters, which those paths do not have; generated requests (and clients)
/// could not send a filter at all, and the document was invalid (a path parameter that is not in
/// the path template).
#[test]
fn query_parameters_are_published_as_optional_query_parameters() {
    let doc = doc();
    for (path, names) in [("/v1/jobs", ["state", "tenant", "limit"]), ("/v1/events", ["from", "job", "kinds"])] {
        let ps = params(&doc, path, "get");
        for name in names {
            let p = ps
                .iter()
                .find(|p| p["name"] == name)
                .unwrap_or_else(|| panic!("GET {path} does not publish `{name}`: {ps:?}"));
            assert_eq!(p["in"], "query", "GET {path} `{name}` must be a query parameter: {p}");
            assert_ne!(p["required"], true, "GET {path} `{name}` is optional: {p}");
        }
        // Headers left out are absent, never `null`: a literal "null" header is refused.
        for p in ps.iter().filter(|p| p["in"] == "header") {
            assert!(!p["schema"]["type"].to_string().contains("null"), "GET {path} header {p} is not nullable");
        }
        // Every path parameter a document declares must appear in the path template.
        for p in ps.iter().filter(|p| p["in"] == "path") {
            let name = p["name"].as_str().unwrap();
            assert!(path.contains(&format!("{{{name}}}")), "GET {path} declares path parameter `{name}`");
        }
    }
}

/// Found by schemathesis: `POST /v1/jobs` published its body as "any object", so nearly every
/// generated body was refused (422) and the submit path was barely exercised. The body is now the
/// job spec's schema: required fields, closed field set, and the per-field limits validation enforces.
#[test]
fn the_submit_body_is_the_job_spec_schema() {
    let doc = doc();
    let body = &doc["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]["schema"];
    assert_eq!(body["$ref"], "#/components/schemas/JobSpec", "{body}");
    let spec = &doc["components"]["schemas"]["JobSpec"];
    let mut required: Vec<&str> = spec["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    required.sort_unstable();
    assert_eq!(required, ["gpus", "kind", "name"], "{spec}");
    assert_eq!(spec["additionalProperties"], false, "unknown fields are refused, so the schema is closed");
    let props = &spec["properties"];
    assert_eq!(props["gpus"]["minimum"], 1);
    assert_eq!(props["gpus"]["maximum"], 4096);
    assert_eq!(props["priority"]["maximum"], 1000);
    assert_eq!(props["name"]["maxLength"], 63);
    let kinds = &doc["components"]["schemas"]["JobKind"]["enum"];
    assert_eq!(*kinds, serde_json::json!(["training", "batch", "inference"]));
}

/// Found by schemathesis: every protected route answered 401 (no token) and could answer 429
/// (rate limit) before its handler ran, and the document listed neither.
#[test]
fn every_protected_operation_documents_401_and_429() {
    let doc = doc();
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let public = op["security"]
                .as_array()
                .is_some_and(|s| s.iter().all(|r| r.as_object().is_some_and(|o| o.is_empty())));
            if public {
                continue;
            }
            // Operations under the `agent_credential` scheme answer to an attempt's credential, not
            // to a user token, and are not behind the per-token rate limiter: 401 but no 429.
            let by_agent =
                op["security"].as_array().is_some_and(|s| s.iter().any(|r| r.get("agent_credential").is_some()));
            let statuses: &[&str] = if by_agent { &["401"] } else { &["401", "429"] };
            for &status in statuses {
                let r = &op["responses"][status];
                assert_eq!(
                    r["content"]["application/json"]["schema"]["$ref"], "#/components/schemas/ErrorBody",
                    "{method} {path} must document {status} with the error body"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 12, "only {checked} protected operations found");
}

/// A `spillway serve` on a free port with its own data directory, killed on drop.
struct Server {
    child: std::process::Child,
    url: String,
    token: String,
    dir: std::path::PathBuf,
}

impl Server {
    fn start(name: &str) -> Server {
        use std::io::{BufRead, BufReader};
        let dir = std::env::temp_dir().join(format!("spillway-httpfuzz-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = std::fs::File::create(dir.join("server.log")).unwrap();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(["serve", "--listen", "127.0.0.1:0", "--rate-limit", "0", "--data-dir"])
            .arg(dir.join("data"))
            .env_remove("SPILLWAY_CONFIG")
            .stdout(std::process::Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("spawn spillway serve");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let url = loop {
            let line = lines.next().expect("serve exited early").unwrap();
            if let Some(rest) = line.strip_prefix("spillway listening on ") {
                break rest.trim().to_string();
            }
        };
        std::thread::spawn(move || for _ in lines.by_ref() {});
        let token = std::fs::read_to_string(dir.join("data/admin.token")).unwrap().trim().to_string();
        Server { child, url, token, dir }
    }

    async fn get(&self, path: &str, headers: &[(&str, &str)]) -> (reqwest::StatusCode, Value) {
        let client = reqwest::Client::builder().timeout(std::time::Duration::from_secs(30)).build().unwrap();
        let mut req = client.get(format!("{}{path}", self.url)).bearer_auth(&self.token);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Found by schemathesis (`GET /v1/events?from=9223372036854775808`): sequence numbers are
/// published as int64, but the server accepted any u64 and streamed. Out-of-range values are
/// now a 400 naming the parameter, for the query and for `Last-Event-ID` alike, and
/// `limit=0` (published as minimum 1 now) stays a 400 naming `limit`.
#[tokio::test]
async fn out_of_range_numbers_are_refused_naming_the_parameter() {
    let server = Server::start("ranges");
    let (status, body) = server.get("/v1/events?from=9223372036854775808", &[]).await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["problems"][0]["field"], "from", "{body}");
    let (status, body) = server.get("/v1/events", &[("Last-Event-ID", "18446744073709551615")]).await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["problems"][0]["field"], "Last-Event-ID", "{body}");
    let (status, body) = server.get("/v1/jobs?limit=0", &[]).await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["problems"][0]["field"], "limit", "{body}");
    // The largest published values are still served.
    let (status, body) = server.get("/v1/jobs?limit=100000", &[]).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
}

/// Found by schemathesis (`CHECKS=all`): the event stream was published as one `string`, but a
/// client (and schemathesis) reads it frame by frame; each frame's fields are now published.
#[test]
fn the_event_stream_publishes_its_frame() {
    let doc = doc();
    let content = &doc["paths"]["/v1/events"]["get"]["responses"]["200"]["content"]["text/event-stream"];
    assert_eq!(content["schema"]["$ref"], "#/components/schemas/EventFrame", "{content}");
    let frame = &doc["components"]["schemas"]["EventFrame"];
    let mut required: Vec<&str> = frame["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    required.sort_unstable();
    assert_eq!(required, ["data", "event", "id"], "{frame}");
    for field in ["id", "event", "data"] {
        // `event` names its kind by a reference to the `EventKind` enum, which is itself a string.
        let schema = match frame["properties"][field]["$ref"].as_str() {
            Some(r) => &doc["components"]["schemas"][r.trim_start_matches("#/components/schemas/")],
            None => &frame["properties"][field],
        };
        assert_eq!(schema["type"], "string", "{field}: {frame}");
    }
}

/// Found by schemathesis: `spillway serve` died with status 141 (SIGPIPE) while event streams
/// were opened and dropped, because the binary restored SIGPIPE's default action for every command
/// (meant for `spillway jobs | head`), and a vectored socket write to a closed connection raises
/// it. The server must ignore SIGPIPE: checked on the running process's signal mask.
#[cfg(target_os = "linux")]
#[test]
fn the_server_ignores_sigpipe() {
    let server = Server::start("sigpipe");
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).unwrap();
    let ignored = status.lines().find_map(|l| l.strip_prefix("SigIgn:")).expect("SigIgn line").trim();
    let mask = u64::from_str_radix(ignored, 16).unwrap();
    let sigpipe = 1u64 << (13 - 1);
    assert_ne!(mask & sigpipe, 0, "SIGPIPE is not ignored by spillway serve (SigIgn {ignored})");
}
