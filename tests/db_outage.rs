//! The database going away under a running `spillway serve --store postgres://…` and coming back:
//! PostgreSQL is stopped (`pg_ctl stop -m fast`, as an operator's restart or a failover does) while
//! the server runs and jobs are being placed. Meanwhile the server stays up: `/healthz` answers,
//! `/readyz` says 503 naming the store, a submission gets a clear 503 (never a crash, never a 201
//! for work that was not stored). Once PostgreSQL is started again the same process recovers by
//! itself: ready again, every job acknowledged before is there, new submissions are accepted and
//! placed.
//!
//! Needs `SPILLWAY_TEST_POSTGRES` and `SPILLWAY_TEST_POSTGRES_CTL` (both set by `.ci/with-postgres`,
//! as `.ci/run` uses; skipped with a note otherwise). The cluster is stopped for a while: this file
//! holds this one test, so nothing else of this binary runs meanwhile (cargo runs test binaries one
//! after another).

mod e2e_support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use e2e_support::{Server, client, quick_job, temp_dir};
use serde_json::Value;

/// Stops or starts the test cluster; started again on drop if a failure left it stopped.
struct Cluster {
    ctl: String,
    stopped: bool,
}

impl Cluster {
    fn run(&mut self, what: &str) {
        let status = Command::new(&self.ctl)
            .arg(what)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("{} {what}: {e}", self.ctl));
        assert!(status.success(), "{} {what}: {status}", self.ctl);
        self.stopped = what == "stop";
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.stopped {
            self.run("start");
        }
    }
}

async fn fresh_database(admin: &str) -> String {
    let db = format!("spw_outage_{}", std::process::id());
    let (c, conn) = tokio_postgres::connect(admin, tokio_postgres::NoTls).await.expect("test server");
    tokio::spawn(conn);
    c.batch_execute(&format!("DROP DATABASE IF EXISTS {db}")).await.unwrap();
    c.batch_execute(&format!("CREATE DATABASE {db}")).await.unwrap();
    let base = admin.split('?').next().unwrap().rsplit_once('/').unwrap().0.to_string();
    // Short waits, so a request to a server whose database is gone is answered within seconds.
    format!("{base}/{db}?connect_timeout=2&timeout=3")
}

/// `GET path` as (status, body); the status is 0 when the server does not answer at all.
async fn get(s: &Server, path: &str) -> (u16, Value) {
    match client().get(format!("{}{path}", s.url)).bearer_auth(&s.admin).send().await {
        Ok(r) => (r.status().as_u16(), r.json().await.unwrap_or(Value::Null)),
        Err(_) => (0, Value::Null),
    }
}

async fn submit(s: &Server, name: &str) -> (u16, Value) {
    let r = client()
        .post(format!("{}/v1/jobs", s.url))
        .bearer_auth(&s.admin)
        .json(&quick_job(name, "outage"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("submission {name}: the server did not answer ({e})\n{}", s.logs()));
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// Waits until `/readyz` answers `code`; returns its body.
async fn wait_ready(s: &mut Server, code: u16, secs: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let (got, body) = get(s, "/readyz").await;
        if got == code {
            return body;
        }
        assert!(s.child.try_wait().unwrap().is_none(), "the server exited\n{}", s.logs());
        assert!(Instant::now() < deadline, "/readyz is {got}, not {code}, after {secs} s: {body}\n{}", s.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_answers_503_while_the_database_is_down_and_recovers_without_a_restart() {
    let (Ok(admin), Ok(ctl)) = (std::env::var("SPILLWAY_TEST_POSTGRES"), std::env::var("SPILLWAY_TEST_POSTGRES_CTL"))
    else {
        eprintln!("skipping db_outage: SPILLWAY_TEST_POSTGRES(_CTL) not set (run it under .ci/with-postgres)");
        return;
    };
    let store = fresh_database(&admin).await;
    let dir = temp_dir("db-outage");
    let mut server = Server::start(
        &dir,
        &dir.join("data"),
        1,
        &["--store", &store, "--speedup", "3600", "--rate-limit", "0"],
        &[("SPILLWAY_LOG", "info"), ("SPILLWAY_LEASE_MS", "1500")],
    );
    wait_ready(&mut server, 200, 60).await;
    let mut acked = Vec::new();
    for i in 0..10 {
        let (code, body) = submit(&server, &format!("before-{i}")).await;
        assert_eq!(code, 201, "{body}");
        acked.push(body["id"].as_str().unwrap().to_string());
    }

    let mut cluster = Cluster { ctl, stopped: false };
    cluster.run("stop");
    let body = wait_ready(&mut server, 503, 30).await;
    let reason = body["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("state store"), "/readyz does not say why: {body}");
    assert!(!reason.contains('\n'), "{reason}");
    let (code, health) = get(&server, "/healthz").await;
    assert_eq!(code, 200, "the process must stay alive and say so: {health}");
    for i in 0..3 {
        let (code, body) = submit(&server, &format!("during-{i}")).await;
        assert_eq!(code, 503, "a submission with the database down: {body}");
        let message = body.to_string();
        assert!(message.contains("state store") && message.contains("retry"), "{body}");
    }
    let (code, body) = get(&server, &format!("/v1/jobs/{}", acked[0])).await;
    assert_eq!(code, 503, "a read cannot be answered either: {body}");
    // Down for longer than the lease: the leader's term ends, and must begin again afterwards.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(server.child.try_wait().unwrap().is_none(), "the server exited\n{}", server.logs());
    let logs = server.logs();
    assert!(!logs.contains("panicked"), "{logs}");

    cluster.run("start");
    let restarted = Instant::now();
    wait_ready(&mut server, 200, 60).await;
    eprintln!("ready again {} ms after PostgreSQL started", restarted.elapsed().as_millis());
    let (code, body) = submit(&server, "after").await;
    assert_eq!(code, 201, "{body}");
    let after = body["id"].as_str().unwrap().to_string();
    for id in &acked {
        let (code, body) = get(&server, &format!("/v1/jobs/{id}")).await;
        assert_eq!(code, 200, "job {id} acknowledged before the outage: {body}");
    }
    let (_, list) = get(&server, "/v1/jobs?limit=1000").await;
    let names: Vec<&str> = list["jobs"].as_array().unwrap().iter().filter_map(|j| j["spec"]["name"].as_str()).collect();
    assert!(!names.iter().any(|n| n.starts_with("during-")), "a refused submission was stored: {names:?}");
    assert_eq!(names.len(), 11, "{names:?}");
    // Work continues: the control loop leads again and places the new job.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, d) = get(&server, &format!("/v1/jobs/{after}")).await;
        let state = d["job"]["state"].as_str().unwrap_or("").to_string();
        if !matches!(state.as_str(), "queued" | "") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the job submitted after the outage was never placed: {d}\n{}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, health) = get(&server, "/healthz").await;
    assert_eq!(health["role"], "leader", "{health}");
    let logs = server.logs();
    assert!(!logs.contains("panicked"), "{logs}");
}
