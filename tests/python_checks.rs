//! Independent checks of the HTTP API by other people's tools (issue #24): Prometheus' own Python
//! parsers read `/metrics` in both formats, and `jsonschema` validates live responses of every
//! route against the schemas of `/openapi.json`.
//!
//! They need Python 3 with `prometheus_client` and `jsonschema` (`.ci/run` installs them in a
//! virtual environment and points `SPILLWAY_PYTHON` at it). Without them each test prints
//! `SKIPPED` with the reason and passes, so `cargo test` still works on a machine with only Rust.

mod e2e_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use e2e_support::{Server, client, quick_job, temp_dir, wait_state};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// The Python to use, if it has the modules; else why not.
fn python(modules: &str) -> Result<String, String> {
    let py = std::env::var("SPILLWAY_PYTHON").unwrap_or_else(|_| "python3".into());
    match Command::new(&py).args(["-c", &format!("import {modules}")]).output() {
        Ok(o) if o.status.success() => Ok(py),
        Ok(o) => Err(format!("{py} lacks {modules}: {}", String::from_utf8_lossy(&o.stderr).trim())),
        Err(e) => Err(format!("no {py}: {e}")),
    }
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python").join(name)
}

fn run(py: &str, args: &[&Path]) {
    let out = Command::new(py).args(args).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    println!("{}", text.trim());
}

#[tokio::test]
async fn prometheus_own_parsers_read_both_formats() {
    let py = match python("prometheus_client") {
        Ok(py) => py,
        Err(why) => return println!("SKIPPED: {why}"),
    };
    let dir = temp_dir("py-metrics");
    let s = Server::start(&dir, &dir.join("data"), 1, &["--speedup", "3600"], &[]);
    let r = client().post(format!("{}/v1/jobs", s.url)).bearer_auth(&s.admin).json(&quick_job("m", "ml")).send().await;
    let job: Value = r.unwrap().json().await.unwrap();
    wait_state(&s, job["id"].as_str().unwrap(), &["succeeded"], 60).await;
    let mut files = Vec::new();
    for (accept, name) in [(None, "text.txt"), (Some("application/openmetrics-text; version=1.0.0"), "om.txt")] {
        let mut req = client().get(format!("{}/metrics", s.url)).bearer_auth(&s.admin);
        if let Some(a) = accept {
            req = req.header("accept", a);
        }
        let text = req.send().await.unwrap().text().await.unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        files.push(path);
    }
    run(&py, &[&script("check_metrics.py"), &files[0], &files[1]]);
    drop(s);
}

/// One response to check: what it is, the schema's JSON pointer in the document, the body.
struct Case {
    what: String,
    pointer: String,
    instance: Value,
}

fn response_pointer(path: &str, method: &str, status: u16) -> String {
    let path = path.replace('~', "~0").replace('/', "~1");
    format!("/paths/{path}/{method}/responses/{status}/content/application~1json/schema")
}

struct Recorder {
    url: String,
    cases: Vec<Case>,
}

impl Recorder {
    /// Sends a request, records its JSON answer against the documented schema of `route`.
    async fn call(&mut self, method: Method, route: &str, path: &str, token: &str, body: Option<Value>) -> Value {
        let mut req = client().request(method.clone(), format!("{}{path}", self.url)).bearer_auth(token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let v: Value = resp.json().await.unwrap();
        let m = method.as_str().to_lowercase();
        self.cases.push(Case {
            what: format!("{} {path} -> {status}", method.as_str()),
            pointer: response_pointer(route, &m, status),
            instance: v.clone(),
        });
        v
    }
}

#[tokio::test]
async fn live_responses_match_the_openapi_schemas() {
    let py = match python("jsonschema") {
        Ok(py) => py,
        Err(why) => return println!("SKIPPED: {why}"),
    };
    let dir = temp_dir("py-schemas");
    let s = Server::start(&dir, &dir.join("data"), 1, &["--speedup", "3600"], &[]);
    let doc: Value = client()
        .get(format!("{}/openapi.json", s.url))
        .bearer_auth(&s.admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut r = Recorder { url: s.url.clone(), cases: Vec::new() };
    let admin = s.admin.clone();
    // Tokens: create (201), list (200), a tenant submitter and viewer for the tenant views.
    let sub = r
        .call(Method::POST, "/v1/tokens", "/v1/tokens", &admin, Some(json!({"role": "submitter", "tenant": "alpha"})))
        .await;
    let alpha = sub["token"].as_str().unwrap().to_string();
    let viewer =
        r.call(Method::POST, "/v1/tokens", "/v1/tokens", &admin, Some(json!({"role": "viewer", "name": "v"}))).await;
    r.call(Method::GET, "/v1/tokens", "/v1/tokens", &admin, None).await;
    r.call(Method::POST, "/v1/tokens", "/v1/tokens", &alpha, Some(json!({"role": "admin"}))).await; // 403
    r.call(Method::POST, "/v1/tokens", "/v1/tokens", &admin, Some(json!({"role": "boss"}))).await; // 422
    // Jobs: submit (201), invalid (422), malformed (400 is sent raw below), list, detail, cancel, complete.
    let short_job = r.call(Method::POST, "/v1/jobs", "/v1/jobs", &alpha, Some(quick_job("q", "alpha"))).await;
    let mut long = quick_job("long", "alpha");
    long["duration_hours"] = json!(500.0);
    let long_job = r.call(Method::POST, "/v1/jobs", "/v1/jobs", &alpha, Some(long)).await;
    let service = json!({"name": "svc", "tenant": "beta", "kind": "inference", "gpus": 8, "gpu_models": ["A100-80GB"],
        "min_gpus_per_vm": 8, "replicas": {"min": 2, "desired": 4}, "duration_hours": 500.0});
    r.call(Method::POST, "/v1/jobs", "/v1/jobs", &admin, Some(service)).await;
    r.call(Method::POST, "/v1/jobs", "/v1/jobs", &admin, Some(json!({"name": "x", "gpus": -4}))).await; // 422
    let q = short_job["id"].as_str().unwrap().to_string();
    let l = long_job["id"].as_str().unwrap().to_string();
    wait_state(&s, &q, &["succeeded"], 60).await;
    // The long job runs, then is completed; a third is cancelled while it waits or runs.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = r.call(Method::GET, "/v1/jobs/{id}", &format!("/v1/jobs/{l}"), &alpha, None).await;
        if v["job"]["state"] == "running" {
            break;
        }
        assert!(Instant::now() < deadline, "{v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    r.call(Method::GET, "/v1/jobs/{id}", &format!("/v1/jobs/{q}"), &admin, None).await;
    r.call(Method::GET, "/v1/jobs/{id}", "/v1/jobs/j-nope", &admin, None).await; // 404
    r.call(Method::GET, "/v1/jobs", "/v1/jobs", &admin, None).await;
    r.call(Method::GET, "/v1/jobs", "/v1/jobs?state=running", &alpha, None).await;
    r.call(Method::GET, "/v1/jobs", "/v1/jobs?state=sleeping", &alpha, None).await; // 400
    r.call(Method::GET, "/v1/capacity", "/v1/capacity", &admin, None).await;
    r.call(Method::GET, "/v1/capacity", "/v1/capacity", &alpha, None).await;
    r.call(Method::GET, "/v1/plan", "/v1/plan", &admin, None).await;
    r.call(Method::GET, "/v1/plan", "/v1/plan", &alpha, None).await;
    r.call(Method::GET, "/v1/advice", "/v1/advice", &admin, None).await;
    r.call(Method::GET, "/v1/advice", "/v1/advice?max=2", &alpha, None).await;
    r.call(Method::GET, "/v1/advice", "/v1/advice?max=0", &admin, None).await; // 400
    let filing = json!({"region": "eastus", "resource_name": "standardNCADSA100v4Family", "increase_vcpus": 96});
    r.call(Method::POST, "/v1/advice/requests", "/v1/advice/requests", &alpha, Some(filing.clone())).await; // 403
    r.call(Method::POST, "/v1/advice/requests", "/v1/advice/requests", &admin, Some(filing)).await; // 409: simulated
    let bad = json!({"region": "mars-1", "resource_name": "cores", "increase_vcpus": 0});
    r.call(Method::POST, "/v1/advice/requests", "/v1/advice/requests", &admin, Some(bad)).await; // 422
    r.call(Method::GET, "/v1/advice/requests", "/v1/advice/requests", &admin, None).await; // 409: simulated
    r.call(Method::GET, "/v1/advice/requests/{id}", "/v1/advice/requests/q-nope", &alpha, None).await; // 403
    r.call(Method::POST, "/v1/jobs/{id}/complete", &format!("/v1/jobs/{l}/complete"), &alpha, None).await;
    r.call(Method::POST, "/v1/jobs/{id}/complete", &format!("/v1/jobs/{l}/complete"), &alpha, None).await; // 409
    let mut third = quick_job("third", "alpha");
    third["duration_hours"] = json!(500.0);
    let third = r.call(Method::POST, "/v1/jobs", "/v1/jobs", &alpha, Some(third)).await;
    let t = third["id"].as_str().unwrap().to_string();
    r.call(Method::DELETE, "/v1/jobs/{id}", &format!("/v1/jobs/{t}"), &alpha, None).await;
    r.call(Method::DELETE, "/v1/jobs/{id}", &format!("/v1/jobs/{t}"), &alpha, None).await; // 409
    r.call(Method::DELETE, "/v1/jobs/{id}", &format!("/v1/jobs/{t}"), viewer["token"].as_str().unwrap(), None).await;
    r.call(Method::GET, "/v1/jobs", "/v1/jobs", "not-a-token", None).await; // 401
    let vid = viewer["id"].as_str().unwrap().to_string();
    r.call(Method::DELETE, "/v1/tokens/{id}", &format!("/v1/tokens/{vid}"), &admin, None).await;
    r.call(Method::DELETE, "/v1/tokens/{id}", &format!("/v1/tokens/{vid}"), &admin, None).await; // 404
    for path in ["/healthz", "/readyz"] {
        let resp = client().get(format!("{}{path}", s.url)).send().await.unwrap();
        let status = resp.status().as_u16();
        r.cases.push(Case {
            what: format!("GET {path} -> {status}"),
            pointer: response_pointer(path, "get", status),
            instance: resp.json().await.unwrap(),
        });
    }
    // A malformed body: 400.
    let resp = client()
        .post(format!("{}/v1/jobs", s.url))
        .bearer_auth(&admin)
        .header("content-type", "application/json")
        .body("{\"name\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    r.cases.push(Case {
        what: "POST /v1/jobs (malformed) -> 400".into(),
        pointer: response_pointer("/v1/jobs", "post", 400),
        instance: resp.json().await.unwrap(),
    });
    // Event frames from the start of the log, as an admin and as the tenant: each frame's data is
    // an EventView, its `event` an EventKind.
    for token in [&admin, &alpha] {
        let mut resp = client().get(format!("{}/v1/events?from=0", s.url)).bearer_auth(token).send().await.unwrap();
        let mut text = String::new();
        let until = Instant::now() + Duration::from_millis(1500);
        while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(until.into(), resp.chunk()).await {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        let mut frames = 0;
        for block in text.split("\n\n") {
            let event = block.lines().find_map(|l| l.strip_prefix("event:")).map(str::trim);
            let data: String = block.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).collect();
            let (Some(event), false) = (event, data.is_empty()) else { continue };
            frames += 1;
            r.cases.push(Case {
                what: format!("event frame {event}"),
                pointer: "/components/schemas/EventView".into(),
                instance: serde_json::from_str(&data).unwrap(),
            });
            r.cases.push(Case {
                what: format!("event kind {event}"),
                pointer: "/components/schemas/EventKind".into(),
                instance: json!(event),
            });
        }
        assert!(frames >= 5, "too few events to check: {text}");
    }
    let documented: std::collections::BTreeSet<&str> =
        r.cases.iter().filter(|c| c.pointer.starts_with("/paths/")).map(|c| c.pointer.as_str()).collect();
    for c in &r.cases {
        assert!(
            doc.pointer(&c.pointer).is_some(),
            "{}: the document has no schema for this answer ({})",
            c.what,
            c.pointer
        );
    }
    assert!(documented.len() >= 20, "too few distinct answers checked: {documented:?}");
    let cases: Vec<Value> =
        r.cases.iter().map(|c| json!({"what": c.what, "pointer": c.pointer, "instance": c.instance})).collect();
    let (doc_file, cases_file) = (dir.join("openapi.json"), dir.join("cases.json"));
    std::fs::write(&doc_file, doc.to_string()).unwrap();
    std::fs::write(&cases_file, Value::Array(cases).to_string()).unwrap();
    run(&py, &[&script("check_schemas.py"), &doc_file, &cases_file]);
    drop(s);
}
