//! Security tests against the real binary: authentication of every route the OpenAPI document
//! lists, tenant isolation on every job route, no token in the logs (JSON, debug level, driving
//! the ARM emulator), the request size limit, file permissions, the refusal to listen in clear on
//! a non-loopback address, HTTPS with a given certificate, and the browser security headers
//! (Content-Security-Policy, no framing, no sniffing) on every answer.

mod e2e_support;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

use e2e_support::{EMULATOR_TOKEN, Emulator, FAST_SCENARIO, Server, TempDir, admin_get, client, quick_job, temp_dir};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

async fn new_token(s: &Server, role: &str, tenant: Option<&str>) -> String {
    let mut body = json!({ "role": role });
    if let Some(t) = tenant {
        body["tenant"] = json!(t);
    }
    let r = client().post(format!("{}/v1/tokens", s.url)).bearer_auth(&s.admin).json(&body).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    r.json::<Value>().await.unwrap()["token"].as_str().unwrap().to_string()
}

fn sim_server(name: &str) -> (TempDir, Server) {
    let dir = temp_dir(name);
    let s = Server::start(&dir, &dir.join("data"), 0, &["--speedup", "60"], &[]);
    (dir, s)
}

#[tokio::test]
async fn every_route_but_health_needs_a_valid_token() {
    let (_dir, s) = sim_server("sec-auth");
    let doc = admin_get(&s, "/openapi.json").await;
    let mut checked = 0;
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            let m: Method = method.to_uppercase().parse().unwrap();
            let url = format!("{}{}", s.url, path.replace("{id}", "j-0000000000000000"));
            let public = path == "/healthz" || path == "/readyz";
            for token in [None, Some("not-a-token"), Some("spw_0000000000000000000000000000000000000000")] {
                let mut r = client().request(m.clone(), &url);
                if let Some(t) = token {
                    r = r.bearer_auth(t);
                }
                let status = r.send().await.unwrap().status();
                if public {
                    assert!(status.is_success(), "{method} {path} is public, got {status}");
                } else {
                    assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path} with token {token:?}");
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 3 * 14, "the OpenAPI document lists too few operations ({checked} checks)");
    // A revoked token stops working at once.
    let t = new_token(&s, "viewer", None).await;
    let list: Value =
        client().get(format!("{}/v1/tokens", s.url)).bearer_auth(&s.admin).send().await.unwrap().json().await.unwrap();
    let id = list.as_array().unwrap().iter().find(|x| x["role"] == "viewer").unwrap()["id"].clone();
    let id = id.as_str().unwrap();
    assert_eq!(
        client().get(format!("{}/v1/jobs", s.url)).bearer_auth(&t).send().await.unwrap().status(),
        StatusCode::OK
    );
    let r = client().delete(format!("{}/v1/tokens/{id}", s.url)).bearer_auth(&s.admin).send().await.unwrap();
    assert!(r.status().is_success());
    assert_eq!(
        client().get(format!("{}/v1/jobs", s.url)).bearer_auth(&t).send().await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    drop(s);
}

/// The headers that keep a browser from framing, sniffing or running anything the server did not
/// mean as its own script (the dashboard's policy, `scheduler::api::dashboard`).
fn assert_browser_headers(what: &str, h: &reqwest::header::HeaderMap) {
    let csp =
        h.get("content-security-policy").and_then(|v| v.to_str().ok()).unwrap_or_else(|| panic!("{what}: no CSP"));
    for part in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "form-action 'none'",
        "require-trusted-types-for 'script'",
    ] {
        assert!(csp.contains(part), "{what}: CSP {csp:?} lacks {part:?}");
    }
    for loose in ["unsafe-inline", "unsafe-eval", "unsafe-hashes", "*", "data:", "http:", "https:"] {
        assert!(!csp.contains(loose), "{what}: CSP {csp:?} allows {loose:?}");
    }
    assert_eq!(h.get("x-frame-options").map(|v| v.as_bytes()), Some(&b"DENY"[..]), "{what}");
    assert_eq!(h.get("x-content-type-options").map(|v| v.as_bytes()), Some(&b"nosniff"[..]), "{what}");
    assert_eq!(h.get("referrer-policy").map(|v| v.as_bytes()), Some(&b"no-referrer"[..]), "{what}");
}

#[tokio::test]
async fn every_answer_carries_a_strict_content_security_policy_and_no_framing() {
    let (_dir, s) = sim_server("sec-headers");
    let doc = admin_get(&s, "/openapi.json").await;
    let mut checked = 0;
    // Every operation the API lists, signed in and not (successes, 401s, 404s and 400s alike); an
    // event stream is judged by its headers, then dropped.
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            let m: Method = method.to_uppercase().parse().unwrap();
            let url = format!("{}{}", s.url, path.replace("{id}", "j-0000000000000000"));
            for token in [None, Some(s.admin.as_str())] {
                let mut r = client().request(m.clone(), &url);
                if let Some(t) = token {
                    r = r.bearer_auth(t);
                }
                let resp = r.send().await.unwrap();
                assert_browser_headers(&format!("{method} {path} ({})", resp.status()), resp.headers());
                checked += 1;
            }
        }
    }
    assert!(checked >= 2 * 14, "the OpenAPI document lists too few operations ({checked} checks)");
    // The dashboard's files (no token needed: they hold no data), a revalidated one, a path that
    // does not exist and a method a route does not take.
    let page = client().get(format!("{}/", s.url)).send().await.unwrap();
    assert_browser_headers("GET /", page.headers());
    let html = page.text().await.unwrap();
    assert!(html.contains("<script src=\"/dashboard/app.js\""), "the page loads its script from this origin");
    assert_eq!(html.matches("<script").count(), html.matches("<script src=").count(), "no inline script");
    for asset in ["/dashboard/app.js", "/dashboard/app.css", "/dashboard/icon.svg"] {
        let r = client().get(format!("{}{asset}", s.url)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{asset}");
        assert_browser_headers(asset, r.headers());
        let etag = r.headers()["etag"].clone();
        let again = client().get(format!("{}{asset}", s.url)).header("If-None-Match", etag).send().await.unwrap();
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "{asset}");
        assert_browser_headers(&format!("{asset} (304)"), again.headers());
    }
    let missing = client().get(format!("{}/no/such/page", s.url)).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert_browser_headers("a missing path", missing.headers());
    let wrong = client().delete(format!("{}/", s.url)).send().await.unwrap();
    assert_eq!(wrong.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_browser_headers("DELETE /", wrong.headers());
    drop(s);
}

#[tokio::test]
async fn a_tenant_sees_and_touches_nothing_of_another_tenant() {
    let (_dir, s) = sim_server("sec-tenant");
    let alice = new_token(&s, "submitter", Some("alice")).await;
    let bob = new_token(&s, "submitter", Some("bob")).await;
    let bob_viewer = new_token(&s, "viewer", Some("bob")).await;
    let mut long = quick_job("alice-secret-job", "alice");
    long["duration_hours"] = json!(500.0);
    let r = client().post(format!("{}/v1/jobs", s.url)).bearer_auth(&alice).json(&long).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let id = r.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string();

    for token in [&bob, &bob_viewer] {
        for (m, path) in [
            (Method::GET, format!("/v1/jobs/{id}")),
            (Method::DELETE, format!("/v1/jobs/{id}")),
            (Method::POST, format!("/v1/jobs/{id}/complete")),
        ] {
            let st = client().request(m.clone(), format!("{}{path}", s.url)).bearer_auth(token).send().await.unwrap();
            assert!(
                st.status() == StatusCode::NOT_FOUND || st.status() == StatusCode::FORBIDDEN,
                "{m} {path} by bob: {}",
                st.status()
            );
        }
        for path in ["/v1/jobs", "/v1/jobs?tenant=alice", "/v1/plan", "/v1/capacity"] {
            let r = client().get(format!("{}{path}", s.url)).bearer_auth(token).send().await.unwrap();
            let text = r.text().await.unwrap();
            assert!(
                !text.contains(&id) && !text.contains("alice-secret-job"),
                "{path} shows alice's job to bob: {text}"
            );
        }
        // The event stream: read for a while from the start of history.
        let mut resp = client().get(format!("{}/v1/events?from=0", s.url)).bearer_auth(token).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let mut seen = String::new();
        let until = Instant::now() + Duration::from_millis(1_500);
        while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(until.into(), resp.chunk()).await {
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
        assert!(!seen.contains(&id), "bob's event stream shows alice's job: {seen}");
    }
    // Bob cannot submit into alice's tenant.
    let r = client()
        .post(format!("{}/v1/jobs", s.url))
        .bearer_auth(&bob)
        .json(&quick_job("sneaky", "alice"))
        .send()
        .await
        .unwrap();
    if r.status().is_success() {
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["spec"]["tenant"], "bob", "a bob-bound token created a job in alice's tenant: {v}");
    }
    // Token administration is for admins only.
    for token in [&alice, &bob_viewer] {
        let r = client().get(format!("{}/v1/tokens", s.url)).bearer_auth(token).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        let r = client()
            .post(format!("{}/v1/tokens", s.url))
            .bearer_auth(token)
            .json(&json!({"role": "admin"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
    }
    // ...and alice still sees her job.
    let r = client().get(format!("{}/v1/jobs/{id}", s.url)).bearer_auth(&alice).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    drop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_ever_appears_in_the_logs_even_at_debug_level() {
    let dir = temp_dir("sec-logs");
    let emu = Emulator::start(&dir, FAST_SCENARIO, &["--throttle-rate", "0.2", "--error-rate", "0.05"]);
    let config = emu.azure_config(&dir, "");
    let s = Server::start(
        &dir,
        &dir.join("data"),
        0,
        &["--cloud", "azure", "--config", config.to_str().unwrap(), "--log-format", "json"],
        &[("SPILLWAY_LOG", "debug")],
    );
    let tenant = new_token(&s, "submitter", Some("ml")).await;
    for (n, tok) in [&s.admin, &tenant].into_iter().enumerate() {
        let r = client()
            .post(format!("{}/v1/jobs", s.url))
            .bearer_auth(tok)
            .json(&quick_job(&format!("log-{n}"), "ml"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    // Failed authentications get logged too: with a token that looks real.
    let fake = "spw_deadbeefdeadbeefdeadbeefdeadbeefdeadbeef";
    let _ = client().get(format!("{}/v1/jobs", s.url)).bearer_auth(fake).send().await.unwrap();
    // Let the control loop talk to the emulator (with faults) for a while.
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        e2e_support::complete_running(&s.url, &s.admin).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let calls = emu.stats().await["total"].as_u64().unwrap();
    assert!(calls > 5, "the server did not drive the emulator ({calls} calls)");
    let logs = s.logs();
    assert!(logs.lines().filter(|l| l.starts_with('{')).count() > 5, "expected JSON debug logs: {logs}");
    assert!(logs.contains("DEBUG"), "SPILLWAY_LOG=debug gave no debug lines");
    for (what, secret) in [("admin", s.admin.as_str()), ("tenant", &tenant), ("forged", fake), ("ARM", EMULATOR_TOKEN)]
    {
        assert!(!logs.contains(secret), "the {what} token appears in the server's logs");
        // A prefix long enough to identify the token must not be logged either.
        let head = &secret[..secret.len().min(16)];
        assert!(!logs.contains(head), "a 16-character prefix of the {what} token appears in the logs");
    }
    drop(s);
}

#[tokio::test]
async fn oversized_bodies_are_refused_with_413() {
    let (_dir, s) = sim_server("sec-size");
    let mut spec = quick_job("big", "ml");
    spec["name"] = json!("x".repeat(70 * 1024));
    let r = client().post(format!("{}/v1/jobs", s.url)).bearer_auth(&s.admin).json(&spec).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // The server is still fine.
    let r = client().post(format!("{}/v1/jobs", s.url)).bearer_auth(&s.admin).json(&quick_job("ok", "ml")).send().await;
    assert_eq!(r.unwrap().status(), StatusCode::CREATED);
    drop(s);
}

#[tokio::test]
async fn data_dir_is_0700_and_the_token_file_0600() {
    let (dir, s) = sim_server("sec-perms");
    let data = dir.join("data");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700, "data directory mode");
    assert_eq!(mode(&data.join("admin.token")), 0o600, "admin.token mode");
    drop(s);
}

/// Issue #24: an existing 0755 data directory was used as is (the store then readable by every
/// user); it is refused with the fix in the message, and nothing in it is touched.
#[test]
fn a_data_dir_open_to_other_users_is_refused_and_left_alone() {
    let dir = temp_dir("sec-open-dir");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .env_remove("SPILLWAY_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("mode 0755") && err.contains("chmod 700"), "{err}");
    assert_eq!(std::fs::read_dir(&data).unwrap().count(), 0, "nothing was written into it");
    assert_eq!(std::fs::metadata(&data).unwrap().permissions().mode() & 0o777, 0o755, "its mode is the owner's call");
    // Once tightened, it is used.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
    let s = Server::start(&dir, &data, 1, &[], &[]);
    drop(s);
}

/// Issue #24: a second `serve` on a busy port wrote a new admin.token into its data directory and
/// then failed to listen; now it fails first and changes nothing.
#[test]
fn a_second_server_on_a_busy_port_changes_nothing() {
    let dir = temp_dir("sec-busy-port");
    let first = Server::start(&dir, &dir.join("data"), 1, &[], &[]);
    let addr = first.url.trim_start_matches("http://").to_string();
    let other = dir.join("other-data");
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["serve", "--listen", &addr, "--data-dir"])
        .arg(&other)
        .env_remove("SPILLWAY_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("cannot listen on {addr}")) && err.contains("nothing was changed"), "{err}");
    assert!(!other.exists(), "the second server created its data directory");
    // The same data directory as the first server: its token is not replaced either.
    let before = std::fs::read_to_string(dir.join("data/admin.token")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["serve", "--listen", &addr, "--data-dir"])
        .arg(dir.join("data"))
        .env_remove("SPILLWAY_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(std::fs::read_to_string(dir.join("data/admin.token")).unwrap(), before);
    drop(first);
}

/// Issue #24: `state export` wrote its file 0644, token hashes included.
#[test]
fn state_export_is_readable_by_its_owner_only() {
    let dir = temp_dir("sec-export");
    let first = Server::start(&dir, &dir.join("data"), 1, &[], &[]);
    drop(first);
    let file = dir.join("backup.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["state", "export"])
        .arg(&file)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env_remove("SPILLWAY_CONFIG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(std::fs::read_to_string(&file).unwrap().contains("api_tokens"), "the export holds the token table");
}

#[test]
fn refuses_a_non_loopback_address_in_clear_unless_told() {
    let dir = temp_dir("sec-remote");
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["serve", "--listen", "0.0.0.0:0", "--data-dir"])
        .arg(dir.join("data"))
        .env_remove("SPILLWAY_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refusing to listen on 0.0.0.0:0") && err.contains("--tls-cert"), "{err}");
    assert!(!dir.join("data").exists(), "a refused start must not create the data directory");
    // With the explicit flag it starts.
    let s = Server::start(&dir, &dir.join("data"), 1, &["--listen", "0.0.0.0:0", "--allow-insecure-remote"], &[]);
    assert!(s.url.starts_with("http://0.0.0.0:"), "{}", s.url);
    drop(s);
}

#[tokio::test]
async fn serves_https_with_a_given_certificate_on_any_address() {
    let dir = temp_dir("sec-tls");
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    let (cert_pem, key_pem) = (cert.cert.pem(), cert.signing_key.serialize_pem());
    std::fs::write(dir.join("cert.pem"), &cert_pem).unwrap();
    std::fs::write(dir.join("key.pem"), &key_pem).unwrap();
    let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
    // A non-loopback address is accepted once TLS is on.
    let s = Server::start(
        &dir,
        &dir.join("data"),
        0,
        &["--listen", "0.0.0.0:0", "--tls-cert", c.to_str().unwrap(), "--tls-key", k.to_str().unwrap()],
        &[],
    );
    let port = s.url.rsplit(':').next().unwrap().to_string();
    assert!(s.url.starts_with("https://"), "{}", s.url);
    let tls_client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(cert_pem.as_bytes()).unwrap())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let r = tls_client.get(format!("https://localhost:{port}/healthz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = tls_client
        .post(format!("https://localhost:{port}/v1/jobs"))
        .bearer_auth(&s.admin)
        .json(&quick_job("over-tls", "ml"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    // A client that does not trust the certificate is refused, and plain HTTP gets no answer.
    assert!(client().get(format!("https://localhost:{port}/healthz")).send().await.is_err());
    assert!(client().get(format!("http://127.0.0.1:{port}/healthz")).send().await.is_err());
    // The server survives both.
    let r = tls_client.get(format!("https://localhost:{port}/healthz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    drop(s);
    // A key that does not exist is a clear error naming the flag.
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["serve", "--listen", "127.0.0.1:0", "--tls-cert", c.to_str().unwrap(), "--tls-key", "/nonexistent.pem"])
        .arg("--data-dir")
        .arg(dir.join("data2"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tls-key"), "{}", String::from_utf8_lossy(&out.stderr));
}
