//! End-to-end tests of the client commands (`submit`, `jobs`, `status`, `cancel`, `complete`,
//! `capacity`, `token`) against a real `spillway serve`, both run from the built binary.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    url: String,
    dir: PathBuf,
}

impl Server {
    fn start(name: &str) -> Server {
        let dir = std::env::temp_dir().join(format!("spillway-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = std::fs::File::create(dir.join("server.log")).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(["serve", "--listen", "127.0.0.1:0", "--speedup", "3600", "--data-dir"])
            .arg(dir.join("data"))
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let url = loop {
            let line = lines.next().expect("serve printed its address").unwrap();
            if let Some(rest) = line.strip_prefix("spillway listening on ") {
                break rest.trim().to_string();
            }
        };
        std::thread::spawn(move || for _ in lines.by_ref() {});
        Server { child, url, dir }
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Runs a client command against this server with the admin token found in the data dir.
    fn cli(&self, args: &[&str]) -> Output {
        cli_with(args, &[("SPILLWAY_URL", &self.url), ("SPILLWAY_DATA_DIR", self.data().to_str().unwrap())])
    }

    fn write(&self, name: &str, content: &str) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, content).unwrap();
        p
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn cli_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_spillway"));
    c.args(args).env_remove("SPILLWAY_TOKEN").env_remove("SPILLWAY_URL").env_remove("SPILLWAY_DATA_DIR");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "exit {:?}\nstdout: {}\nstderr: {}", o.status, stdout(o), stderr(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

const QUICK: &str = r#"
name = "cli-quick"
tenant = "ml"
kind = "batch"
gpus = 1
sizes = ["Standard_NC4as_T4_v3"]
spot = "never"
duration_hours = 0.05
"#;

const LONG: &str = r#"{"name": "cli-long", "tenant": "ml", "kind": "batch", "gpus": 1,
  "sizes": ["Standard_NC4as_T4_v3"], "spot": "never", "duration_hours": 500}"#;

#[test]
fn submit_wait_jobs_status_and_cancel_through_the_cli() {
    let s = Server::start("flow");
    let quick = s.write("quick.toml", QUICK);
    let o = s.cli(&["submit", quick.to_str().unwrap(), "--wait"]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("submitted j-"), "{out}");
    let id = out.split_whitespace().nth(1).unwrap().to_string();
    assert!(out.contains(&format!("{id} is running")) || out.contains(&format!("{id} is succeeded")), "{out}");

    // It finishes by itself (auto-complete after duration_hours in the simulated cloud).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = json(&s.cli(&["status", &id, "--output", "json"]));
        if v["job"]["state"] == "succeeded" {
            break;
        }
        assert!(Instant::now() < deadline, "still {}", v["job"]["state"]);
        std::thread::sleep(Duration::from_millis(200));
    }
    let status = stdout(&s.cli(&["status", &id]));
    for want in ["state     succeeded", "attempts (", "events (", "Standard_NC4as_T4_v3", "cost      $"] {
        assert!(status.contains(want), "status lacks {want:?}:\n{status}");
    }
    // Issue #24: times are labelled with their clock; a finished job's cost is not "so far"; the
    // events say what was submitted and what runs in words, not "running … running".
    assert!(status.contains("clock     simulated clock (3600× real time"), "{status}");
    assert!(status.contains("events (times on the simulated clock)"), "{status}");
    assert!(status.contains(" in all; progress") && !status.contains("so far"), "{status}");
    assert!(
        status.contains("batch job, 1 GPU\n") && status.contains("attempt 1 is running: 1 × Standard_NC4as_T4_v3"),
        "{status}"
    );
    assert!(!status.contains("Batch"), "{status}");

    let long = s.write("long.json", LONG);
    let v = json(&s.cli(&["submit", long.to_str().unwrap(), "--output", "json", "--idempotency-key", "k1"]));
    let long_id = v["id"].as_str().unwrap().to_string();
    let again = json(&s.cli(&["submit", long.to_str().unwrap(), "--output", "json", "--idempotency-key", "k1"]));
    assert_eq!(again["id"], long_id.as_str(), "same key, same job");

    let table = stdout(&s.cli(&["jobs"]));
    assert!(table.starts_with("ID "), "{table}");
    assert!(table.contains(&id) && table.contains(&long_id), "{table}");
    // Issue #24: GPUS counts replicas × GPUs of an inference service; TRIES is named for what it counts.
    let service = s.write(
        "svc.json",
        r#"{"name": "cli-svc", "tenant": "ml", "kind": "inference", "gpus": 2, "duration_hours": 500,
            "replicas": {"min": 1, "desired": 3}}"#,
    );
    let svc = json(&s.cli(&["submit", service.to_str().unwrap(), "--output", "json"]));
    assert_eq!(svc["wanted_gpus"], 6, "{svc}");
    let table = stdout(&s.cli(&["jobs"]));
    let header = table.lines().next().unwrap();
    assert!(header.contains("FLEETS") && header.contains("MOVES") && !header.contains("TRIES"), "{table}");
    let row = table.lines().find(|l| l.contains("cli-svc")).unwrap();
    assert!(row.contains("6 (3×2)"), "{row}");
    let running = json(&s.cli(&["jobs", "--state", "succeeded", "--output", "json"]));
    let ids: Vec<&str> = running["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![id.as_str()]);
    // Paging (#18): --limit shows the newest and says how to see the rest; --all follows the
    // server's cursor page by page back to the oldest job.
    let newest = stdout(&s.cli(&["jobs", "--limit", "1"]));
    assert!(newest.contains("(1 of 3 jobs shown, the newest; --all for every one"), "{newest}");
    let every = json(&s.cli(&["jobs", "--limit", "1", "--all", "--output", "json"]));
    let listed: Vec<&str> = every["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap()).collect();
    assert_eq!(listed, vec![id.as_str(), long_id.as_str(), svc["id"].as_str().unwrap()], "every job, oldest first");
    assert_eq!((every["total"].as_u64(), every["truncated"].as_bool()), (Some(3), Some(false)));
    let table = stdout(&s.cli(&["jobs", "--limit", "2", "--all"]));
    assert!(table.contains(&id) && table.contains("cli-svc") && !table.contains("shown"), "{table}");

    // Budgets (#18): set, shown, refused with the field named, cleared.
    let o = s.cli(&["budget", "set", "ml", "120.5"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("ml: budget $120.50, spent $"), "{}", stdout(&o));
    let listed = stdout(&s.cli(&["budget", "list"]));
    let row = listed.lines().find(|l| l.starts_with("ml ")).unwrap_or_else(|| panic!("{listed}"));
    assert!(row.contains("120.50"), "{listed}");
    let o = s.cli(&["budget", "set", "ml", "-5"]);
    assert!(!o.status.success());
    let o = s.cli(&["budget", "set", "no such team", "5"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("name"), "{}", stderr(&o));
    let v = json(&s.cli(&["budget", "clear", "ml", "--output", "json"]));
    assert!(v["budget_usd"].is_null(), "{v}");

    let o = s.cli(&["cancel", &long_id]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), format!("{long_id} is cancelled"));
    let o = s.cli(&["cancel", &long_id]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("already ended"), "{}", stderr(&o));
    let o = s.cli(&["complete", &long_id]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn errors_are_one_actionable_line_with_a_failing_exit_code() {
    // Nobody listening.
    let o = cli_with(&["jobs", "--url", "http://127.0.0.1:9", "--token", "spw_x_y"], &[]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot reach spillway at http://127.0.0.1:9") && err.contains("is `spillway serve` running?"),
        "{err}"
    );
    // No token anywhere.
    let nowhere = std::env::temp_dir().join(format!("spillway-cli-nowhere-{}", std::process::id()));
    let o = cli_with(&["jobs", "--data-dir", nowhere.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no token") && stderr(&o).contains("SPILLWAY_TOKEN"), "{}", stderr(&o));

    let s = Server::start("errors");
    // A wrong token.
    let o = cli_with(&["jobs", "--url", &s.url, "--token", "spw_t0_nope"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("refused the token"), "{}", stderr(&o));
    // An invalid spec: every problem with its field.
    let bad = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/invalid-spec.toml");
    let o = s.cli(&["submit", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    for field in ["gpus:", "colour:", "regions[0]:", "max_price_per_hour:"] {
        assert!(err.contains(field), "{field} missing from:\n{err}");
    }
    // An unknown job.
    let o = s.cli(&["status", "j-nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no job j-nope"), "{}", stderr(&o));
}

#[test]
fn tokens_are_created_listed_used_and_revoked_through_the_cli() {
    let s = Server::start("tokens");
    let created =
        json(&s.cli(&["token", "create", "--role", "submitter", "--tenant", "ml", "--name", "ci", "--output", "json"]));
    let token = created["token"].as_str().unwrap().to_string();
    let tid = created["id"].as_str().unwrap().to_string();
    let list = stdout(&s.cli(&["token", "list"]));
    assert!(list.contains(&tid) && list.contains("submitter") && list.contains("ml"), "{list}");
    // Issue #24: every token's time is wall-clock time (the server's cloud is simulated at 3600×,
    // whose clock would put this token days ahead), and the column says so.
    assert!(list.contains("CREATED (WALL CLOCK, UTC)"), "{list}");
    let listed = json(&s.cli(&["token", "list", "--output", "json"]));
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    for t in listed.as_array().unwrap() {
        let at = t["created_at_ms"].as_i64().unwrap();
        assert!((now_ms - at).abs() < 120_000, "token {t} is not on the wall clock (now {now_ms})");
    }
    assert!(!list.contains(&token), "the list never shows a token");

    let spec = s.write("ml.json", LONG);
    let as_ml = |args: &[&str]| cli_with(args, &[("SPILLWAY_URL", &s.url), ("SPILLWAY_TOKEN", &token)]);
    let o = as_ml(&["submit", spec.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let other = s.write("other.json", &LONG.replace("\"ml\"", "\"search\""));
    let o = as_ml(&["submit", other.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("tenant"), "{}", stderr(&o));
    let o = as_ml(&["token", "list"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not allowed"), "{}", stderr(&o));

    let o = s.cli(&["token", "revoke", &tid]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = as_ml(&["jobs"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("refused the token"), "{}", stderr(&o));
    let o = s.cli(&["token", "create", "--role", "submitter"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("tenant"), "{}", stderr(&o));
}

#[test]
fn capacity_shows_quota_pools_by_region() {
    let s = Server::start("capacity");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = s.cli(&["capacity"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = stdout(&o);
        if out.contains("LIMIT") {
            assert!(out.contains("eastus") && out.contains("standardNCADSA100v4Family"), "{out}");
            assert!(out.contains("IN FLIGHT") && out.contains("FREE"), "{out}");
            break;
        }
        assert!(Instant::now() < deadline, "no quota after 30 s:\n{out}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let v = json(&s.cli(&["capacity", "--output", "json"]));
    assert!(v["pools"].as_array().unwrap().len() > 4);
    assert!(v["blocked_offers"].is_array());

    // `spillway plan` without --problem asks the server's solver about the open work.
    let big = s.write("big.json", r#"{"name": "too-big", "tenant": "ml", "kind": "training", "gpus": 512}"#);
    let submitted = json(&s.cli(&["submit", big.to_str().unwrap(), "--output", "json"]));
    let plan = json(&s.cli(&["plan", "--output", "json"]));
    let unplaced = plan["unplaced"].as_array().unwrap();
    assert!(unplaced.iter().any(|u| u["job"] == submitted["id"]), "{plan}");
    let o = s.cli(&["plan"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains(submitted["id"].as_str().unwrap()), "{}", stdout(&o));
}

#[test]
fn serve_refuses_a_non_loopback_address_without_the_flag() {
    let dir = std::env::temp_dir().join(format!("spillway-cli-remote-{}", std::process::id()));
    let o = cli_with(&["serve", "--listen", "0.0.0.0:0", "--data-dir", dir.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("loopback"), "{}", stderr(&o));
    assert!(!dir.exists(), "nothing was created");
}
