//! End-to-end tests of the HTTP API against the built binary: each test starts its own
//! `spillway serve` on a free loopback port with its own data directory and talks real HTTP.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

/// A running `spillway serve`, killed and cleaned up on drop.
struct Server {
    child: Child,
    url: String,
    dir: PathBuf,
    admin: String,
}

impl Server {
    fn start(name: &str, extra: &[&str]) -> Server {
        let dir = std::env::temp_dir().join(format!("spillway-api-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Server::start_in(dir, extra)
    }

    fn start_in(dir: PathBuf, extra: &[&str]) -> Server {
        let data = dir.join("data");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("server.log")).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(["serve", "--listen", "127.0.0.1:0", "--speedup", "3600", "--data-dir"])
            .arg(&data)
            .args(extra)
            .env_remove("SPILLWAY_CONFIG")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("spawn spillway serve");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let url = loop {
            let line = lines.next().unwrap_or_else(|| panic!("serve exited early; log in {}", dir.display())).unwrap();
            if let Some(rest) = line.strip_prefix("spillway listening on ") {
                break rest.trim().to_string();
            }
        };
        // Keep reading stdout so the server never writes into a closed pipe.
        std::thread::spawn(move || for _ in lines.by_ref() {});
        let admin = std::fs::read_to_string(data.join("admin.token")).unwrap().trim().to_string();
        Server { child, url, dir, admin }
    }

    fn client() -> reqwest::Client {
        reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap()
    }

    async fn req(&self, method: reqwest::Method, path: &str, token: Option<&str>) -> reqwest::RequestBuilder {
        let r = Server::client().request(method, format!("{}{path}", self.url));
        match token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    async fn get(&self, path: &str, token: &str) -> (StatusCode, Value) {
        let resp = self.req(reqwest::Method::GET, path, Some(token)).await.send().await.unwrap();
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn submit(&self, spec: &Value, token: &str) -> (StatusCode, Value) {
        let resp = self.req(reqwest::Method::POST, "/v1/jobs", Some(token)).await.json(spec).send().await.unwrap();
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn token(&self, role: &str, tenant: Option<&str>) -> String {
        let mut body = json!({ "role": role });
        if let Some(t) = tenant {
            body["tenant"] = json!(t);
        }
        let resp =
            self.req(reqwest::Method::POST, "/v1/tokens", Some(&self.admin)).await.json(&body).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::CREATED);
        let v: Value = resp.json().await.unwrap();
        v["token"].as_str().unwrap().to_string()
    }

    /// Waits until the job reaches `state` (or fails the test after `secs`).
    async fn wait_state(&self, id: &str, states: &[&str], secs: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let (s, v) = self.get(&format!("/v1/jobs/{id}"), &self.admin).await;
            assert_eq!(s, StatusCode::OK);
            let st = v["job"]["state"].as_str().unwrap().to_string();
            if states.contains(&st.as_str()) {
                return v;
            }
            assert!(Instant::now() < deadline, "job {id} still {st} after {secs} s: {v:#}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A job the bundled scenario places at once and that finishes in a few simulated minutes.
fn quick_job(name: &str, tenant: &str) -> Value {
    json!({
        "name": name, "tenant": tenant, "kind": "batch", "gpus": 1,
        "sizes": ["Standard_NC4as_T4_v3"], "spot": "never", "duration_hours": 0.05
    })
}

/// A job that runs for simulated days (long enough to be cancelled while open).
fn long_job(name: &str, tenant: &str) -> Value {
    json!({
        "name": name, "tenant": tenant, "kind": "batch", "gpus": 1,
        "sizes": ["Standard_NC4as_T4_v3"], "spot": "never", "duration_hours": 500.0
    })
}

#[tokio::test]
async fn submitted_job_is_placed_runs_and_succeeds() {
    let s = Server::start("lifecycle", &[]);
    let resp = s
        .req(reqwest::Method::POST, "/v1/jobs", Some(&s.admin))
        .await
        .json(&quick_job("quick", "ml"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let location = resp.headers()["location"].to_str().unwrap().to_string();
    let job: Value = resp.json().await.unwrap();
    let id = job["id"].as_str().unwrap().to_string();
    assert_eq!(location, format!("/v1/jobs/{id}"));
    assert_eq!(job["state"], "pending");
    assert_eq!(job["spec"]["tenant"], "ml");

    let done = s.wait_state(&id, &["succeeded"], 60).await;
    let kinds: Vec<&str> = done["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"submitted"));
    assert!(kinds.contains(&"running"), "the job ran before it succeeded: {kinds:?}");
    let attempts = done["attempts"].as_array().unwrap();
    assert!(!attempts.is_empty());
    assert_eq!(attempts.last().unwrap()["size"], "Standard_NC4as_T4_v3");
    assert!(done["job"]["cost_usd"].as_f64().unwrap() > 0.0, "running cost money: {done:#}");
    assert_eq!(done["placements"], json!([]), "a finished job holds nothing");

    let (st, list) = s.get("/v1/jobs?state=succeeded", &s.admin).await;
    assert_eq!(st, StatusCode::OK);
    assert!(list["jobs"].as_array().unwrap().iter().any(|j| j["id"] == id.as_str()));
}

#[tokio::test]
async fn an_acknowledged_job_survives_a_crash() {
    let dir = std::env::temp_dir().join(format!("spillway-api-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut s = Server::start_in(dir.clone(), &[]);
    let (st, job) = s.submit(&long_job("durable", "ml"), &s.admin).await;
    assert_eq!(st, StatusCode::CREATED);
    // SIGKILL right after the 201: no graceful shutdown, no final flush.
    s.kill();
    std::mem::forget(s);
    let s = Server::start_in(dir, &[]);
    let (st, back) = s.get(&format!("/v1/jobs/{}", job["id"].as_str().unwrap()), &s.admin).await;
    assert_eq!(st, StatusCode::OK, "{back}");
    assert_eq!(back["job"]["spec"]["name"], "durable");
}

#[tokio::test]
async fn idempotency_key_returns_the_same_job_and_refuses_a_different_spec() {
    let s = Server::start("idem", &[]);
    let send = |spec: Value, key: &'static str| {
        let url = format!("{}/v1/jobs", s.url);
        let admin = s.admin.clone();
        async move {
            let r = Server::client()
                .post(url)
                .bearer_auth(admin)
                .header("Idempotency-Key", key)
                .json(&spec)
                .send()
                .await
                .unwrap();
            let st = r.status();
            (st, r.json::<Value>().await.unwrap())
        }
    };
    let (st1, a) = send(long_job("idem", "ml"), "retry-1").await;
    let (st2, b) = send(long_job("idem", "ml"), "retry-1").await;
    assert_eq!(st1, StatusCode::CREATED);
    assert_eq!(st2, StatusCode::OK, "a retry is not a new job");
    assert_eq!(a["id"], b["id"]);
    let (st3, c) = send(long_job("something-else", "ml"), "retry-1").await;
    assert_eq!(st3, StatusCode::CONFLICT, "{c}");
    assert!(c["error"].as_str().unwrap().contains("Idempotency-Key"), "{c}");
    let (_, list) = s.get("/v1/jobs", &s.admin).await;
    assert_eq!(list["total"], 1, "one job for three submissions: {list}");
}

#[tokio::test]
async fn cancel_ends_a_job_once() {
    let s = Server::start("cancel", &[]);
    let (_, job) = s.submit(&long_job("to-cancel", "ml"), &s.admin).await;
    let id = job["id"].as_str().unwrap();
    s.wait_state(id, &["provisioning", "running"], 30).await;
    let r = s.req(reqwest::Method::DELETE, &format!("/v1/jobs/{id}"), Some(&s.admin)).await.send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["state"], "cancelled");
    let again = s.req(reqwest::Method::DELETE, &format!("/v1/jobs/{id}"), Some(&s.admin)).await.send().await.unwrap();
    assert_eq!(again.status(), StatusCode::CONFLICT);
    // The control loop lets go of the fleet.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, d) = s.get(&format!("/v1/jobs/{id}"), &s.admin).await;
        if d["placements"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "cancelled job still holds {:#}", d["placements"]);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let missing = s.req(reqwest::Method::DELETE, "/v1/jobs/j-nope", Some(&s.admin)).await.send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn auth_matrix() {
    use reqwest::Method;
    let s = Server::start("auth", &[]);
    // No token, a malformed one, an unknown one: 401 with a challenge.
    for token in [None, Some("not-a-token"), Some("spw_t0000000000_deadbeef")] {
        let r = s.req(Method::GET, "/v1/jobs", token).await.send().await.unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{token:?}");
        assert_eq!(r.headers()["www-authenticate"], "Bearer");
        let body: Value = r.json().await.unwrap();
        assert!(body["error"].is_string());
    }
    // A near miss of the real admin token is refused too.
    let mut near = s.admin.clone();
    let last = near.pop().unwrap();
    near.push(if last == 'a' { 'b' } else { 'a' });
    assert_eq!(
        s.req(Method::GET, "/v1/jobs", Some(&near)).await.send().await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    // Health checks need no token.
    assert_eq!(s.req(Method::GET, "/healthz", None).await.send().await.unwrap().status(), StatusCode::OK);

    let viewer_all = s.token("viewer", None).await;
    let viewer_b = s.token("viewer", Some("beta")).await;
    let sub_a = s.token("submitter", Some("alpha")).await;
    let sub_b = s.token("submitter", Some("beta")).await;

    // A viewer cannot submit.
    let (st, body) = s.submit(&long_job("v", "alpha"), &viewer_all).await;
    assert_eq!(st, StatusCode::FORBIDDEN, "{body}");

    // A submitter submits for its own tenant, with or without naming it, never for another.
    let (st, a_job) = s.submit(&long_job("a1", "alpha"), &sub_a).await;
    assert_eq!(st, StatusCode::CREATED);
    let mut unnamed = long_job("a2", "x");
    unnamed.as_object_mut().unwrap().remove("tenant");
    let (st, a2) = s.submit(&unnamed, &sub_a).await;
    assert_eq!(st, StatusCode::CREATED);
    assert_eq!(a2["spec"]["tenant"], "alpha");
    let (st, body) = s.submit(&long_job("sneaky", "beta"), &sub_a).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["problems"][0]["field"], "tenant");
    let (_, b_job) = s.submit(&long_job("b1", "beta"), &sub_b).await;
    let a_id = a_job["id"].as_str().unwrap();
    let b_id = b_job["id"].as_str().unwrap();

    // Tenant A never sees or touches tenant B's job: 404, exactly as for a job that does not exist.
    let (st, body) = s.get(&format!("/v1/jobs/{b_id}"), &sub_a).await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{body}");
    let (_, missing) = s.get("/v1/jobs/j-doesnotexist", &sub_a).await;
    assert_eq!(
        body["error"].as_str().unwrap().replace(b_id, "ID"),
        missing["error"].as_str().unwrap().replace("j-doesnotexist", "ID")
    );
    for (m, path) in [(Method::DELETE, format!("/v1/jobs/{b_id}")), (Method::POST, format!("/v1/jobs/{b_id}/complete"))]
    {
        let r = s.req(m, &path, Some(&sub_a)).await.send().await.unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
    }
    let (_, still) = s.get(&format!("/v1/jobs/{b_id}"), &s.admin).await;
    assert_ne!(still["job"]["state"], "cancelled");
    let (_, list_a) = s.get("/v1/jobs", &sub_a).await;
    let ids: Vec<&str> = list_a["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&a_id) && !ids.contains(&b_id), "{ids:?}");
    let (_, list_a_b) = s.get("/v1/jobs?tenant=beta", &sub_a).await;
    assert_eq!(list_a_b["jobs"], json!([]));
    // A tenant-bound viewer reads its tenant only; an unbound viewer reads all; viewers never write.
    assert_eq!(s.get(&format!("/v1/jobs/{b_id}"), &viewer_b).await.0, StatusCode::OK);
    assert_eq!(s.get(&format!("/v1/jobs/{a_id}"), &viewer_b).await.0, StatusCode::NOT_FOUND);
    assert_eq!(s.get(&format!("/v1/jobs/{a_id}"), &viewer_all).await.0, StatusCode::OK);
    let r = s.req(Method::DELETE, &format!("/v1/jobs/{b_id}"), Some(&viewer_b)).await.send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    // Only admins manage tokens.
    let r = s.req(Method::GET, "/v1/tokens", Some(&sub_a)).await.send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = s
        .req(Method::POST, "/v1/tokens", Some(&viewer_all))
        .await
        .json(&json!({"role": "admin"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    // The token list never holds a secret; a revoked token stops working at once.
    let (_, tokens) = s.get("/v1/tokens", &s.admin).await;
    let text = tokens.to_string();
    assert!(!text.contains(&sub_b) && !text.contains(&s.admin) && !text.contains("hash"), "{text}");
    let sub_b_id = sub_b.split('_').nth(1).unwrap();
    let r = s.req(Method::DELETE, &format!("/v1/tokens/{sub_b_id}"), Some(&s.admin)).await.send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(s.get("/v1/jobs", &sub_b).await.0, StatusCode::UNAUTHORIZED);
    // The server's log never holds a token.
    let log = std::fs::read_to_string(s.dir.join("server.log")).unwrap();
    for t in [&s.admin, &sub_a, &sub_b, &viewer_all] {
        assert!(!log.contains(t.as_str()), "a token leaked into the log");
    }
}

#[tokio::test]
async fn bad_input_is_refused_with_the_field_named_and_the_server_stays_healthy() {
    let s = Server::start("badinput", &[]);
    let post_raw = |body: Vec<u8>| {
        let url = format!("{}/v1/jobs", s.url);
        let admin = s.admin.clone();
        async move {
            let r = Server::client()
                .post(url)
                .bearer_auth(admin)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let st = r.status();
            let v: Value = r.json().await.unwrap_or_else(|e| panic!("status {st}: body is not JSON: {e}"));
            (st, v)
        }
    };
    let with = |field: &str, value: Value| {
        let mut j = quick_job("bad", "ml");
        j[field] = value;
        j.to_string().into_bytes()
    };
    let cases: Vec<(&str, Vec<u8>, StatusCode, &str)> = vec![
        ("malformed JSON", b"{\"name\": \"x\", \"gpus\": ".to_vec(), StatusCode::BAD_REQUEST, "body"),
        ("not JSON at all", b"name = 'toml?'".to_vec(), StatusCode::BAD_REQUEST, "body"),
        ("empty body", Vec::new(), StatusCode::BAD_REQUEST, "body"),
        ("an array", b"[1, 2]".to_vec(), StatusCode::UNPROCESSABLE_ENTITY, ""),
        ("wrong type", with("gpus", json!("eight")), StatusCode::UNPROCESSABLE_ENTITY, "gpus"),
        ("zero GPUs", with("gpus", json!(0)), StatusCode::UNPROCESSABLE_ENTITY, "gpus"),
        ("negative GPUs", with("gpus", json!(-4)), StatusCode::UNPROCESSABLE_ENTITY, "gpus"),
        ("huge GPUs", with("gpus", json!(99_999_999_999_999u64)), StatusCode::UNPROCESSABLE_ENTITY, "gpus"),
        ("huge float", with("duration_hours", json!(1e300)), StatusCode::UNPROCESSABLE_ENTITY, "duration_hours"),
        ("fractional GPUs", with("gpus", json!(1.5)), StatusCode::UNPROCESSABLE_ENTITY, "gpus"),
        ("unknown field", with("colour", json!("blue")), StatusCode::UNPROCESSABLE_ENTITY, "colour"),
        (
            "nested wrong type",
            with("replicas", json!({"min": "one", "desired": 2})),
            StatusCode::UNPROCESSABLE_ENTITY,
            "replicas",
        ),
        // Issue #24: each of these used to be accepted.
        (
            "denormal duration",
            with("duration_hours", json!(5e-324)),
            StatusCode::UNPROCESSABLE_ENTITY,
            "duration_hours",
        ),
        (
            "duplicate key",
            br#"{"name": "d", "tenant": "ml", "kind": "batch", "gpus": 1, "gpus": 2}"#.to_vec(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "gpus",
        ),
        ("5000 regions", with("regions", json!(vec!["eastus"; 5000])), StatusCode::UNPROCESSABLE_ENTITY, "regions"),
        ("1 PB plus", with("data_gb", json!(1e308)), StatusCode::UNPROCESSABLE_ENTITY, "data_gb"),
        (
            "price 1e308",
            with("max_price_per_hour", json!(1e308)),
            StatusCode::UNPROCESSABLE_ENTITY,
            "max_price_per_hour",
        ),
        ("year 9999", with("deadline", json!("9999-12-31T00:00:00Z")), StatusCode::UNPROCESSABLE_ENTITY, "deadline"),
    ];
    for (what, body, status, field) in cases {
        let (st, v) = post_raw(body).await;
        assert_eq!(st, status, "{what}: {v}");
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{what}: {v}");
        let problems = v["problems"].as_array().unwrap();
        assert!(
            problems.iter().any(|p| p["field"].as_str().unwrap().starts_with(field)),
            "{what}: expected a problem with field {field:?}: {v}"
        );
    }
    // Every problem at once, in the user's terms (issue #24: only `kind: missing` was reported).
    let (st, v) = post_raw(br#"{"name": "three", "gpus": -4, "spot": "sometimes"}"#.to_vec()).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let fields: Vec<&str> = v["problems"].as_array().unwrap().iter().map(|p| p["field"].as_str().unwrap()).collect();
    assert_eq!(fields, ["kind", "gpus", "spot"], "{v}");
    assert_eq!(v["problems"][1]["problem"], "must be ≥ 1 (got -4)", "{v}");
    assert!(!v.to_string().contains("4294967295"), "no internal ranges: {v}");
    // Far too large: 413, with the same JSON shape.
    let mut big = quick_job("big", "ml");
    big["name"] = json!("x".repeat(200_000));
    let (st, v) = post_raw(big.to_string().into_bytes()).await;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    assert!(v["error"].as_str().unwrap().contains("larger than"));
    // A bad query parameter and a bad Idempotency-Key are 400 naming them.
    let (st, v) = s.get("/v1/jobs?state=sleeping", &s.admin).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_eq!(v["problems"][0]["field"], "state");
    let r = Server::client()
        .post(format!("{}/v1/jobs", s.url))
        .bearer_auth(&s.admin)
        .header("Idempotency-Key", "x".repeat(500))
        .json(&quick_job("k", "ml"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // Unknown routes and methods answer JSON too.
    let (st, v) = s.get("/v1/nothing-here", &s.admin).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert!(v["error"].is_string());
    // Still healthy, and still accepting good work.
    assert_eq!(s.get("/healthz", "").await.0, StatusCode::OK);
    let (st, _) = s.submit(&quick_job("fine", "ml"), &s.admin).await;
    assert_eq!(st, StatusCode::CREATED);
    let (_, list) = s.get("/v1/jobs", &s.admin).await;
    assert_eq!(list["total"], 1, "none of the bad submissions was stored");
}

#[tokio::test]
async fn openapi_lists_every_route() {
    let s = Server::start("openapi", &[]);
    let (st, doc) = s.get("/openapi.json", &s.admin).await;
    assert_eq!(st, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let expected = [
        ("post", "/v1/jobs"),
        ("get", "/v1/jobs"),
        ("get", "/v1/jobs/{id}"),
        ("delete", "/v1/jobs/{id}"),
        ("post", "/v1/jobs/{id}/complete"),
        ("get", "/v1/jobs/{id}/logs"),
        ("post", "/v1/pipelines"),
        ("get", "/v1/pipelines"),
        ("get", "/v1/pipelines/{id}"),
        ("delete", "/v1/pipelines/{id}"),
        ("post", "/v1/agent/jobs/{job}/attempts/{attempt}/register"),
        ("get", "/v1/agent/jobs/{job}/attempts/{attempt}/ranks/{rank}/work"),
        ("post", "/v1/agent/jobs/{job}/attempts/{attempt}/ranks/{rank}/logs"),
        ("post", "/v1/agent/jobs/{job}/attempts/{attempt}/ranks/{rank}/heartbeat"),
        ("post", "/v1/agent/jobs/{job}/attempts/{attempt}/ranks/{rank}/reports"),
        ("get", "/v1/capacity"),
        ("get", "/v1/plan"),
        ("get", "/v1/advice"),
        ("post", "/v1/advice/requests"),
        ("get", "/v1/advice/requests"),
        ("get", "/v1/advice/requests/{id}"),
        ("get", "/v1/events"),
        ("get", "/v1/spend"),
        ("put", "/v1/tenants/{name}/budget"),
        ("get", "/v1/whoami"),
        ("post", "/v1/tokens"),
        ("get", "/v1/tokens"),
        ("delete", "/v1/tokens/{id}"),
        ("get", "/metrics"),
        ("get", "/healthz"),
        ("get", "/readyz"),
        ("get", "/openapi.json"),
    ];
    let paths = doc["paths"].as_object().unwrap();
    for (method, path) in expected {
        assert!(paths.get(path).and_then(|p| p.get(method)).is_some(), "{method} {path} missing from /openapi.json");
    }
    let count: usize = paths.values().map(|p| p.as_object().unwrap().len()).sum();
    assert_eq!(count, expected.len(), "the document lists exactly the served routes");
    // Every documented route is really served (no 404 from the router for any of them).
    for (method, path) in expected {
        let path = path
            .replace("{id}", "x")
            .replace("{name}", "x")
            .replace("{job}", "x")
            .replace("{attempt}", "1")
            .replace("{rank}", "0");
        let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let r = s.req(m, &path, Some(&s.admin)).await.timeout(Duration::from_secs(5)).send().await.unwrap();
        if !path.starts_with("/v1/jobs/x") && !path.starts_with("/v1/pipelines/x") && path != "/v1/tokens/x" {
            assert_ne!(r.status(), StatusCode::NOT_FOUND, "{method} {path}");
        }
        assert_ne!(r.status(), StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
    }
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
    assert!(doc["components"]["securitySchemes"]["agent_credential"].is_object());
    let register = &paths["/v1/agent/jobs/{job}/attempts/{attempt}/register"]["post"];
    assert_eq!(
        register["security"][0]["agent_credential"],
        serde_json::json!([]),
        "agent routes take agent credentials"
    );
    // Issue #24: the bodies of jobs, capacity and the plan were `{"type": "object"}`, so a
    // generated client got no Job, Attempt or Plan types. Every JSON body has a real schema now.
    for (path, ops) in paths {
        for (method, op) in ops.as_object().unwrap() {
            for (status, resp) in op["responses"].as_object().unwrap() {
                let Some(schema) = resp.pointer("/content/application~1json/schema") else { continue };
                let bare =
                    schema.get("$ref").is_none() && schema.get("properties").is_none() && schema.get("items").is_none();
                if path != "/openapi.json" {
                    assert!(!bare, "{method} {path} {status} has no schema of its body: {schema}");
                }
            }
        }
    }
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for name in [
        "JobView",
        "JobDetailView",
        "AttemptView",
        "JobListView",
        "PlanView",
        "CapacityView",
        "AdviceReport",
        "Recommendation",
        "EventView",
        "EventKind",
        "TokenInfo",
        "TokenCreated",
        "ErrorBody",
        "Health",
    ] {
        assert!(schemas.contains_key(name), "{name} missing from the document's schemas");
    }
    let kinds: Vec<&str> =
        schemas["EventKind"]["enum"].as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect();
    for k in ["submitted", "placed", "running", "provisioning_failed", "failover", "succeeded", "cancelled"] {
        assert!(kinds.contains(&k), "event kind {k} not listed: {kinds:?}");
    }
    // #22: a job's regular base, with its bounds, and a mixed fleet's regular part.
    let base = &schemas["JobSpec"]["properties"]["regular_gpus"];
    assert_eq!((base["minimum"].as_f64(), base["maximum"].as_f64()), (Some(0.0), Some(4096.0)), "{base}");
    assert!(schemas["AttemptView"]["properties"].get("regular").is_some(), "{}", schemas["AttemptView"]);
    assert!(schemas.contains_key("AttemptPartView"));
}

/// Parses OpenMetrics text strictly enough to catch a broken exposition: every sample line is
/// `name{labels} value` with a numeric value and the document ends with `# EOF`.
fn parse_metrics(text: &str) -> Vec<(String, String, f64)> {
    assert!(text.trim_end().ends_with("# EOF"), "OpenMetrics ends with # EOF");
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("bad line {line:?}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => {
                assert!(l.ends_with('}'), "bad labels in {line:?}");
                (n.to_string(), l.trim_end_matches('}').to_string())
            }
            None => (series.to_string(), String::new()),
        };
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'), "bad name in {line:?}");
        out.push((name, labels, value));
    }
    out
}

#[tokio::test]
async fn metrics_are_prometheus_text_with_job_gauges_and_http_latency() {
    let s = Server::start("metrics", &[]);
    let (st, _) = s.submit(&long_job("m", "ml"), &s.admin).await;
    assert_eq!(st, StatusCode::CREATED);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = s
            .req(reqwest::Method::GET, "/metrics", Some(&s.admin))
            .await
            .header("accept", "application/openmetrics-text; version=1.0.0")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert!(r.headers()["content-type"].to_str().unwrap().starts_with("application/openmetrics-text"));
        let samples = parse_metrics(&r.text().await.unwrap());
        let open_jobs: f64 = samples
            .iter()
            .filter(|(n, l, _)| {
                n == "spillway_jobs" && !l.contains("succeeded") && !l.contains("cancelled") && !l.contains("failed")
            })
            .map(|(_, _, v)| v)
            .sum();
        let posted = samples.iter().any(|(n, l, v)| {
            n == "spillway_http_requests_total"
                && l.contains("route=\"/v1/jobs\"")
                && l.contains("status=\"201\"")
                && *v >= 1.0
        });
        let latency = samples
            .iter()
            .any(|(n, l, _)| n == "spillway_http_request_seconds_bucket" && l.contains("route=\"/v1/jobs\""));
        if open_jobs >= 1.0 && posted && latency {
            assert!(samples.iter().any(|(n, _, _)| n == "spillway_reconcile_rounds_total"));
            let rounds_timed = samples.iter().find(|(n, _, _)| n == "spillway_round_seconds_count").map(|(_, _, v)| *v);
            assert!(rounds_timed.is_some_and(|v| v >= 1.0), "round durations: {rounds_timed:?}");
            assert!(samples.iter().any(|(n, _, _)| n == "spillway_cost_rate_usd_per_hour"));
            break;
        }
        assert!(Instant::now() < deadline, "metrics never showed the job and the request");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let r = s.req(reqwest::Method::GET, "/metrics", None).await.send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "metrics need a token");
}

/// Reads SSE events from a response until `n` events arrived; returns their JSON data.
async fn read_events(resp: &mut reqwest::Response, n: usize) -> Vec<(Option<u64>, Value)> {
    let mut buf = String::new();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while out.len() < n {
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let id = block.lines().find_map(|l| l.strip_prefix("id:")).map(|v| v.trim().parse().unwrap());
            let data: String = block.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).collect();
            if !data.is_empty() {
                out.push((id, serde_json::from_str(&data).unwrap()));
            }
        }
        if out.len() >= n {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let chunk = tokio::time::timeout(left, resp.chunk()).await.expect("events arrive in time").unwrap();
        buf.push_str(&String::from_utf8_lossy(&chunk.expect("stream open")));
    }
    out.truncate(n);
    out
}

#[tokio::test]
async fn events_stream_resumes_from_a_sequence_number_and_filters_by_tenant() {
    let s = Server::start("events", &[]);
    for (name, tenant) in [("e1", "alpha"), ("e2", "beta"), ("e3", "alpha")] {
        assert_eq!(s.submit(&long_job(name, tenant), &s.admin).await.0, StatusCode::CREATED);
    }
    let mut all = s.req(reqwest::Method::GET, "/v1/events?from=1", Some(&s.admin)).await.send().await.unwrap();
    assert_eq!(all.status(), StatusCode::OK);
    assert!(all.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let first = read_events(&mut all, 3).await;
    let seqs: Vec<u64> = first
        .iter()
        .map(|(id, v)| {
            assert_eq!(Some(v["seq"].as_u64().unwrap()), *id, "SSE id is the sequence number");
            v["seq"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(seqs[0], 1);
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    // Resume after the first event with Last-Event-ID: the next one is the second.
    let mut resumed = s
        .req(reqwest::Method::GET, "/v1/events", Some(&s.admin))
        .await
        .header("Last-Event-ID", seqs[0].to_string())
        .send()
        .await
        .unwrap();
    let again = read_events(&mut resumed, 2).await;
    assert_eq!(again[0].0, Some(seqs[1]));
    assert_eq!(again[1].0, Some(seqs[2]));
    // ?from=N starts exactly at N.
    let mut from = s
        .req(reqwest::Method::GET, &format!("/v1/events?from={}", seqs[2]), Some(&s.admin))
        .await
        .send()
        .await
        .unwrap();
    assert_eq!(read_events(&mut from, 1).await[0].0, Some(seqs[2]));
    // A beta viewer sees only beta's events (from=0: the oldest kept; its positions are cursors).
    let beta = s.token("viewer", Some("beta")).await;
    let mut mine = s.req(reqwest::Method::GET, "/v1/events?from=0", Some(&beta)).await.send().await.unwrap();
    let evs = read_events(&mut mine, 2).await;
    for (_, e) in &evs {
        assert_eq!(e["tenant"], "beta", "{e}");
    }
    // New events arrive live on an open stream.
    let mut live =
        s.req(reqwest::Method::GET, "/v1/events?kinds=submitted", Some(&s.admin)).await.send().await.unwrap();
    let (_, job) = s.submit(&long_job("live", "gamma"), &s.admin).await;
    let got = read_events(&mut live, 1).await;
    assert_eq!(got[0].1["job_id"], job["id"]);
    assert_eq!(got[0].1["kind"], "submitted");
}

#[tokio::test]
async fn rate_limit_answers_429_with_retry_after() {
    let s = Server::start("ratelimit", &["--rate-limit", "0.5", "--rate-burst", "3"]);
    for i in 0..3 {
        assert_eq!(s.get("/v1/jobs", &s.admin).await.0, StatusCode::OK, "request {i} is within the burst");
    }
    let r = s.req(reqwest::Method::GET, "/v1/jobs", Some(&s.admin)).await.send().await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&retry), "at 0.5/s the next request is allowed within 2 s, got {retry}");
    let v: Value = r.json().await.unwrap();
    assert!(v["error"].as_str().unwrap().contains("rate limit"));
    // Another token has its own bucket; health checks are never limited.
    let other = {
        // Token creation itself is limited for the admin, so wait out its bucket first.
        tokio::time::sleep(Duration::from_millis(2100)).await;
        s.token("viewer", None).await
    };
    assert_eq!(s.get("/v1/jobs", &other).await.0, StatusCode::OK);
    for _ in 0..10 {
        assert_eq!(s.get("/healthz", "").await.0, StatusCode::OK);
    }
}

#[tokio::test]
async fn capacity_and_plan_answer_after_the_first_round() {
    let s = Server::start("capacity", &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.req(reqwest::Method::GET, "/readyz", None).await.send().await.unwrap().status() != StatusCode::OK {
        assert!(Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (st, cap) = s.get("/v1/capacity", &s.admin).await;
    assert_eq!(st, StatusCode::OK);
    let pools = cap["pools"].as_array().unwrap();
    let regions: std::collections::BTreeSet<&str> = pools.iter().map(|p| p["region"].as_str().unwrap()).collect();
    assert!(regions.contains("eastus") && regions.contains("westus3"), "{regions:?}");
    let a100_east = pools
        .iter()
        .find(|p| p["region"] == "eastus" && p["pool"] == "standardNCADSA100v4Family")
        .expect("the bundled scenario's eastus A100 pool");
    assert_eq!(a100_east["limit"], 48);
    // A job too big for any region waits, and the plan says why.
    let huge = json!({"name": "huge", "tenant": "ml", "kind": "training", "gpus": 512, "gpu_models": ["A100-80GB"]});
    let (st, job) = s.submit(&huge, &s.admin).await;
    assert_eq!(st, StatusCode::CREATED);
    let (st, plan) = s.get("/v1/plan", &s.admin).await;
    assert_eq!(st, StatusCode::OK, "{plan}");
    let unplaced = plan["unplaced"].as_array().unwrap();
    let mine = unplaced.iter().find(|u| u["job"] == job["id"]).expect("the huge job is unplaced");
    assert!(!mine["reasons"].as_array().unwrap().is_empty());
    // Another tenant's viewer does not see it in the plan.
    let other = s.token("viewer", Some("other")).await;
    let (_, theirs) = s.get("/v1/plan", &other).await;
    assert!(theirs["unplaced"].as_array().unwrap().iter().all(|u| u["job"] != job["id"]));
}

#[tokio::test]
async fn listing_pages_return_the_newest_jobs_oldest_first_with_the_total() {
    let s = Server::start("list-page", &[]);
    let mut ids = Vec::new();
    for i in 0..7 {
        let tenant = if i % 2 == 0 { "ml" } else { "research" };
        let (_, job) = s.submit(&long_job(&format!("page-{i}"), tenant), &s.admin).await;
        ids.push(job["id"].as_str().unwrap().to_string());
    }
    let page_ids = |v: &Value| -> Vec<String> {
        v["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap().to_string()).collect()
    };
    let (st, all) = s.get("/v1/jobs?limit=3", &s.admin).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(page_ids(&all), ids[4..].to_vec(), "the newest three, oldest first");
    assert_eq!((all["total"].as_u64(), all["truncated"].as_bool()), (Some(7), Some(true)));
    // One tenant's jobs: 0, 2, 4, 6.
    let (_, ml) = s.get("/v1/jobs?tenant=ml&limit=2", &s.admin).await;
    assert_eq!(page_ids(&ml), vec![ids[4].clone(), ids[6].clone()]);
    assert_eq!((ml["total"].as_u64(), ml["truncated"].as_bool()), (Some(4), Some(true)));
    let (_, whole) = s.get("/v1/jobs?tenant=research", &s.admin).await;
    assert_eq!(page_ids(&whole), vec![ids[1].clone(), ids[3].clone(), ids[5].clone()]);
    assert_eq!((whole["total"].as_u64(), whole["truncated"].as_bool()), (Some(3), Some(false)));
}

/// Issue #18: past the newest page, `next` pages back through the history by an opaque cursor
/// that jobs submitted meanwhile do not shift; filters and tenant scoping hold on every page.
#[tokio::test]
async fn listing_pages_back_by_cursor_without_repeats_or_gaps_while_jobs_arrive() {
    let s = Server::start("list-cursor", &[]);
    let mut ids = Vec::new();
    for i in 0..11 {
        let tenant = if i % 3 == 0 { "ml" } else { "research" };
        let (st, job) = s.submit(&long_job(&format!("cur-{i}"), tenant), &s.admin).await;
        assert_eq!(st, StatusCode::CREATED);
        ids.push(job["id"].as_str().unwrap().to_string());
    }
    let page_ids = |v: &Value| -> Vec<String> {
        v["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap().to_string()).collect()
    };
    let (st, first) = s.get("/v1/jobs?limit=4", &s.admin).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!((first["total"].as_u64(), first["truncated"].as_bool()), (Some(11), Some(true)));
    let mut seen = page_ids(&first);
    let mut next = first["next"].as_str().expect("a next cursor while older jobs exist").to_string();
    assert!(!ids.iter().any(|id| next.contains(id.as_str())), "the cursor is opaque: {next}");
    let mut pages = 1;
    let mut added = Vec::new();
    loop {
        // Jobs arriving between pages land above every page already read.
        let (_, job) = s.submit(&long_job(&format!("late-{pages}"), "ml"), &s.admin).await;
        added.push(job["id"].as_str().unwrap().to_string());
        let (st, page) = s.get(&format!("/v1/jobs?limit=4&cursor={next}"), &s.admin).await;
        assert_eq!(st, StatusCode::OK, "{page}");
        let got = page_ids(&page);
        assert!(got.len() <= 4 && !got.is_empty(), "{page}");
        assert!(got.iter().all(|id| seen.iter().all(|s| id < s)), "each page is older than the ones before");
        seen.extend(got);
        pages += 1;
        match page["next"].as_str() {
            Some(n) => next = n.to_string(),
            None => {
                assert_eq!(page["truncated"], false);
                break;
            }
        }
    }
    assert_eq!(pages, 3, "11 jobs in pages of 4");
    let mut all = seen.clone();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), seen.len(), "no job on two pages");
    let mut want = ids.clone();
    want.sort();
    assert_eq!(all, want, "every job that existed is on a page; none that came later");
    assert!(added.iter().all(|a| !seen.contains(a)));

    // A filter pages the same way: ml has cur-0, 3, 6, 9 and the late ones.
    let (_, ml) = s.get("/v1/jobs?tenant=ml&limit=3", &s.admin).await;
    let (_, older) =
        s.get(&format!("/v1/jobs?tenant=ml&limit=3&cursor={}", ml["next"].as_str().unwrap()), &s.admin).await;
    let both: Vec<String> = page_ids(&older).into_iter().chain(page_ids(&ml)).collect();
    assert_eq!(both.len(), 6);
    assert!(both.iter().all(|id| ids.iter().position(|i| i == id).is_none_or(|p| p % 3 == 0)), "{both:?}");
    assert_eq!(ml["total"].as_u64(), Some(4 + added.len() as u64));

    // A viewer bound to research pages through research's jobs only.
    let viewer = s.token("viewer", Some("research")).await;
    let (_, mine) = s.get("/v1/jobs?limit=5", &viewer).await;
    let (_, rest) = s.get(&format!("/v1/jobs?limit=5&cursor={}", mine["next"].as_str().unwrap()), &viewer).await;
    let theirs: Vec<String> = page_ids(&rest).into_iter().chain(page_ids(&mine)).collect();
    let research: Vec<String> = ids.iter().enumerate().filter(|(i, _)| i % 3 != 0).map(|(_, id)| id.clone()).collect();
    let mut sorted = theirs.clone();
    sorted.sort();
    assert_eq!(sorted, research);
    assert!(rest["next"].is_null());

    // A cursor this API did not hand out is refused, naming the field.
    let long = format!("k{}", "6a".repeat(600));
    for bad in ["zz", "k", "k0", "kzz", "kff", long.as_str()] {
        let (st, body) = s.get(&format!("/v1/jobs?cursor={bad}"), &s.admin).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(body["problems"][0]["field"], "cursor", "{body}");
    }
}

/// Issue #18: an admin sets and clears a tenant's budget over the API; /v1/spend shows it; anyone
/// else is refused, and a bad body or name gets a 4xx naming the field and changes nothing.
#[tokio::test]
async fn budgets_are_set_by_admins_with_every_bad_input_named() {
    let s = Server::start("budget", &[]);
    let put = |path: String, token: String, body: Value| {
        let url = format!("{}{path}", s.url);
        async move {
            let r = Server::client().put(url).bearer_auth(token).json(&body).send().await.unwrap();
            let st = r.status();
            (st, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let admin = s.admin.clone();
    let (st, b) = put("/v1/tenants/ml/budget".into(), admin.clone(), json!({"budget_usd": 250.5})).await;
    assert_eq!(st, StatusCode::OK, "{b}");
    assert_eq!(b, json!({"tenant": "ml", "budget_usd": 250.5, "spent_usd": 0.0, "left_usd": 250.5}));
    let budget_of = |v: &Value, t: &str| {
        v["tenants"].as_array().unwrap().iter().find(|x| x["tenant"] == t).map(|x| x["budget_usd"].clone())
    };
    let (_, spend) = s.get("/v1/spend", &s.admin).await;
    assert_eq!(budget_of(&spend, "ml"), Some(json!(250.5)), "{spend}");

    for (role, tenant) in [("viewer", Some("ml")), ("submitter", Some("ml")), ("viewer", None)] {
        let t = s.token(role, tenant).await;
        let (st, body) = put("/v1/tenants/ml/budget".into(), t, json!({"budget_usd": 1e9})).await;
        assert_eq!(st, StatusCode::FORBIDDEN, "{role}: {body}");
    }
    let bad = [
        ("/v1/tenants/ml/budget", json!({"budget_usd": -1}), "budget_usd"),
        ("/v1/tenants/ml/budget", json!({"budget_usd": 1e13}), "budget_usd"),
        ("/v1/tenants/ml/budget", json!({"budget_usd": "lots"}), "budget_usd"),
        ("/v1/tenants/ml/budget", json!({}), "budget_usd"),
        ("/v1/tenants/ml/budget", json!({"budget_usd": 5, "currency": "EUR"}), "currency"),
        ("/v1/tenants/ml/budget", json!([5]), ""),
        ("/v1/tenants/a%20b/budget", json!({"budget_usd": 5}), "name"),
        (&format!("/v1/tenants/{}/budget", "x".repeat(64)), json!({"budget_usd": 5}), "name"),
    ];
    for (path, body, field) in bad {
        let (st, err) = put(path.to_string(), admin.clone(), body.clone()).await;
        assert!(st.is_client_error(), "{path} {body}: {st} {err}");
        let fields: Vec<&str> =
            err["problems"].as_array().unwrap().iter().map(|p| p["field"].as_str().unwrap()).collect();
        assert!(fields.iter().any(|f| f.contains(field)), "{path} {body}: {err}");
    }
    let (_, spend) = s.get("/v1/spend", &s.admin).await;
    assert_eq!(budget_of(&spend, "ml"), Some(json!(250.5)), "nothing changed: {spend}");

    // null clears it; a tenant with no jobs yet can be given one.
    let (st, b) = put("/v1/tenants/ml/budget".into(), admin.clone(), json!({"budget_usd": null})).await;
    assert_eq!((st, &b["budget_usd"], &b["left_usd"]), (StatusCode::OK, &Value::Null, &Value::Null), "{b}");
    let (st, _) = put("/v1/tenants/new-team/budget".into(), admin.clone(), json!({"budget_usd": 0})).await;
    assert_eq!(st, StatusCode::OK);
    let (_, spend) = s.get("/v1/spend", &s.admin).await;
    assert_eq!(budget_of(&spend, "new-team"), Some(json!(0.0)), "{spend}");
    assert_eq!(budget_of(&spend, "ml"), Some(Value::Null), "{spend}");
}

/// Reads `/metrics` with an `Accept` header; returns the content type and the text.
async fn scrape(s: &Server, token: &str, accept: Option<&str>) -> (String, String) {
    let mut r = s.req(reqwest::Method::GET, "/metrics", Some(token)).await;
    if let Some(a) = accept {
        r = r.header("accept", a);
    }
    let resp = r.send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
    (ct, resp.text().await.unwrap())
}

/// Issue #24: `/metrics` always answered OpenMetrics, which Prometheus' text parser mis-reads
/// (every counter became an untyped family of its own); provisioning failures appeared only with
/// the first failure; there was no cost per tenant.
#[tokio::test]
async fn metrics_negotiate_the_format_and_show_every_failure_class_and_each_tenants_cost() {
    let s = Server::start("metrics-format", &[]);
    let (ct, text) = scrape(&s, &s.admin, None).await;
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    assert!(!text.contains("# EOF"), "0.0.4 has no EOF marker");
    assert!(text.contains("# TYPE spillway_placements_total counter\n"), "a counter's TYPE names its sample:\n{text}");
    for class in
        ["quota", "capacity", "size_unavailable", "price_above_cap", "throttled", "transient", "permanent", "not_found"]
    {
        let line = format!("spillway_provisioning_failures_total{{class=\"{class}\"}} 0\n");
        assert!(text.contains(&line), "{line:?} missing before any failure:\n{text}");
    }
    let (ct, text) = scrape(&s, &s.admin, Some("text/plain;version=0.0.4")).await;
    assert!(ct.starts_with("text/plain; version=0.0.4") && !text.contains("# EOF"), "{ct}");
    let (ct, om) =
        scrape(&s, &s.admin, Some("application/openmetrics-text;version=1.0.0;q=0.5,text/plain;q=0.3")).await;
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    assert!(om.ends_with("# EOF\n") && om.contains("# TYPE spillway_placements counter\n"), "{om}");

    // Two tenants' jobs run and cost money; each tenant's cost is a series of its own.
    let (_, a) = s.submit(&quick_job("cost-a", "alpha"), &s.admin).await;
    let (_, b) = s.submit(&quick_job("cost-b", "beta"), &s.admin).await;
    for j in [&a, &b] {
        s.wait_state(j["id"].as_str().unwrap(), &["succeeded"], 60).await;
    }
    let (_, text) = scrape(&s, &s.admin, None).await;
    let spent = |text: &str, tenant: &str| -> f64 {
        let prefix = format!("spillway_tenant_spent_usd_total{{tenant=\"{tenant}\"}} ");
        text.lines().find_map(|l| l.strip_prefix(prefix.as_str())).and_then(|v| v.parse().ok()).unwrap_or(-1.0)
    };
    assert!(spent(&text, "alpha") > 0.0 && spent(&text, "beta") > 0.0, "{text}");
    assert!(text.contains("# TYPE spillway_tenant_spent_usd_total counter"), "{text}");

    // A tenant-bound token sees its own series and nothing cluster-wide.
    let alpha = s.token("viewer", Some("alpha")).await;
    for accept in [None, Some("application/openmetrics-text")] {
        let (_, mine) = scrape(&s, &alpha, accept).await;
        assert!(spent(&mine, "alpha") > 0.0, "{mine}");
        let samples: Vec<&str> = mine.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).collect();
        assert!(!samples.is_empty());
        for l in samples {
            assert!(l.contains("tenant=\"alpha\""), "a tenant sees only its own series, got {l:?}");
        }
        for global in ["spillway_gpus_in_use", "spillway_cost_rate_usd_per_hour", "spillway_http_requests", "beta"] {
            assert!(!mine.contains(global), "{global} shown to a tenant:\n{mine}");
        }
    }
}

/// Issue #24 and #21: a tenant's view is its own share of the cluster, in response types of their
/// own: no Azure operation URLs or quota bookkeeping in attempts, its inference parts kept in the
/// plan (they were looked up as job ids `<job>#min` and dropped), capacity without other tenants'
/// use, no global plan weight, and event positions that are not the global sequence numbers.
#[tokio::test]
async fn a_tenant_sees_its_own_share_and_nothing_of_other_tenants() {
    let s = Server::start("tenant-view", &[]);
    let alpha = s.token("submitter", Some("alpha")).await;
    // An inference service too big to place in full: its parts (#min, #extra) wait in the plan.
    let service = json!({"name": "svc", "kind": "inference", "gpus": 8, "gpu_models": ["A100-80GB"],
        "min_gpus_per_vm": 8, "replicas": {"min": 2, "desired": 4}, "duration_hours": 500.0});
    let (st, svc) = s.submit(&service, &alpha).await;
    assert_eq!(st, StatusCode::CREATED, "{svc}");
    let svc_id = svc["id"].as_str().unwrap().to_string();
    let (_, small) = s.submit(&long_job("small", "alpha"), &alpha).await;
    let small_id = small["id"].as_str().unwrap().to_string();
    let (_, other) = s.submit(&long_job("theirs", "beta"), &s.admin).await;
    let other_id = other["id"].as_str().unwrap().to_string();
    let detail = s.wait_state(&small_id, &["running"], 30).await;

    // Attempts carry what a client needs, not what the scheduler keeps to resume.
    let (_, mine) = s.get(&format!("/v1/jobs/{small_id}"), &alpha).await;
    let text = mine.to_string();
    for internal in
        ["status_url", "\"operation\"", "accounted_until_ms", "\"vcpus\"", "\"family\"", "awaiting_failover"]
    {
        assert!(!text.contains(internal), "{internal} in a tenant's job view: {text}");
    }
    let attempt = &mine["attempts"][0];
    for field in ["fleet_name", "region", "size", "priority", "vms", "running_vms", "gpus", "state", "cost_usd"] {
        assert!(attempt.get(field).is_some(), "{field} missing from {attempt}");
    }
    assert_eq!(mine["clock"]["kind"], "simulated", "times are labelled with their clock: {mine}");

    // Event positions: the admin sees the log's sequence numbers, the tenant opaque cursors that
    // resume its stream all the same.
    let admin_seqs: Vec<u64> =
        detail["events"].as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    let tenant_seqs: Vec<u64> = mine["events"].as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(tenant_seqs.len() >= 2, "{mine}");
    assert!(admin_seqs.iter().zip(&tenant_seqs).all(|(a, t)| a != t), "{admin_seqs:?} vs {tenant_seqs:?}");
    assert!(tenant_seqs.iter().all(|&c| c > 1_000_000), "cursors say nothing about the log's length: {tenant_seqs:?}");
    let mut resumed = s
        .req(reqwest::Method::GET, &format!("/v1/events?job={small_id}"), Some(&alpha))
        .await
        .header("Last-Event-ID", tenant_seqs[0].to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), StatusCode::OK);
    let next = read_events(&mut resumed, 1).await;
    assert_eq!(next[0].0, Some(tenant_seqs[1]), "a cursor resumes right after its event");
    assert_eq!(next[0].1["seq"].as_u64(), Some(tenant_seqs[1]));
    let bad = s.req(reqwest::Method::GET, "/v1/events?from=7", Some(&alpha)).await.send().await.unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST, "a guessed position is not a cursor");

    // The plan: the tenant's own entries, inference parts included and named; no global weight.
    let deadline = Instant::now() + Duration::from_secs(30);
    let plan = loop {
        let (st, plan) = s.get("/v1/plan", &alpha).await;
        assert_eq!(st, StatusCode::OK, "{plan}");
        let entries: Vec<&Value> =
            plan["placements"].as_array().unwrap().iter().chain(plan["unplaced"].as_array().unwrap()).collect();
        if entries.iter().any(|e| e["job"] == svc_id.as_str()) {
            break plan;
        }
        assert!(Instant::now() < deadline, "the tenant's inference service never shows in its plan: {plan}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let entries: Vec<&Value> =
        plan["placements"].as_array().unwrap().iter().chain(plan["unplaced"].as_array().unwrap()).collect();
    for e in &entries {
        assert!(e["job"] == svc_id.as_str() || e["job"] == small_id.as_str(), "not alpha's: {e}");
        if e["job"] == svc_id.as_str() {
            assert!(e["part"] == "min" || e["part"] == "extra", "an inference part names itself: {e}");
        }
    }
    assert!(plan.get("placed_weight").is_none(), "the cluster-wide weight is not a tenant's: {plan}");
    assert!(!plan.to_string().contains(&other_id));
    let (_, admin_plan) = s.get("/v1/plan", &s.admin).await;
    assert!(admin_plan["placed_weight"].is_number(), "{admin_plan}");

    // Capacity: what the tenant may use and what it holds, not what others hold.
    let (_, cap) = s.get("/v1/capacity", &alpha).await;
    let pools = cap["pools"].as_array().unwrap();
    assert!(!pools.is_empty());
    for p in pools {
        for hidden in ["used_by_others", "used_by_us", "in_flight"] {
            assert!(p.get(hidden).is_none(), "{hidden} shown to a tenant: {p}");
        }
        assert!(p["used_by_tenant"].is_u64() && p["free"].is_u64() && p["limit"].is_u64(), "{p}");
    }
    assert!(pools.iter().any(|p| p["used_by_tenant"].as_u64() > Some(0)), "alpha's running job holds quota: {cap}");
    let (_, admin_cap) = s.get("/v1/capacity", &s.admin).await;
    assert!(admin_cap["pools"][0]["used_by_others"].is_u64(), "{admin_cap}");
}
