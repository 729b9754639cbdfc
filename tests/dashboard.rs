//! The web dashboard, end to end: the built `spillway serve` and, for the browser tests, Debian's
//! headless Chromium driven over WebDriver (`tests/webdriver`). The browser tests skip with a
//! message when Chromium is not installed; `.ci/run` installs it.
//!
//! `SPILLWAY_WRITE_SCREENSHOTS=1 cargo test --test dashboard` also rewrites the README's
//! screenshots in `docs/` (they are taken on every run, into the test's temporary directory).

mod e2e_support;
mod webdriver;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use e2e_support::TempDir;
use reqwest::StatusCode;
use serde_json::{Value, json};
use webdriver::Browser;

/// A job name a browser would run as markup if the page ever built HTML from data.
const XSS_NAME: &str = "<img src=x onerror=alert(1)>";

/// A running `spillway serve`, killed (and its directory removed) on drop.
struct Server {
    child: Child,
    url: String,
    dashboard_line: String,
    dir: PathBuf,
    admin: String,
}

fn temp_dir(name: &str) -> TempDir {
    e2e_support::temp_dir(&format!("dash-{name}"))
}

impl Server {
    /// Starts `serve` on a free port over `dir/data` at 600× real time.
    fn start(dir: PathBuf, extra: &[&str]) -> Server {
        let data = dir.join("data");
        std::fs::create_dir_all(&dir).unwrap();
        let log = std::fs::File::create(dir.join("server.log")).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(["serve", "--listen", "127.0.0.1:0", "--speedup", "600", "--data-dir"])
            .arg(&data)
            .args(extra)
            .env_remove("SPILLWAY_CONFIG")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("spawn spillway serve");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut url, mut dashboard_line) = (String::new(), String::new());
        loop {
            let line = lines.next().unwrap_or_else(|| panic!("serve exited early; log in {}", dir.display())).unwrap();
            if let Some(rest) = line.strip_prefix("spillway listening on ") {
                url = rest.trim().to_string();
            }
            if let Some(rest) = line.strip_prefix("dashboard: ") {
                dashboard_line = rest.trim().to_string();
            }
            if line.starts_with("cloud: ") {
                break;
            }
        }
        std::thread::spawn(move || for _ in lines.by_ref() {});
        let admin = std::fs::read_to_string(data.join("admin.token")).unwrap().trim().to_string();
        Server { child, url, dashboard_line, dir, admin }
    }

    /// The signed-in link, as `spillway dashboard-url` prints it.
    fn sign_in_link(&self) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(["dashboard-url", "--url", &self.url, "--data-dir"])
            .arg(self.dir.join("data"))
            .env_remove("SPILLWAY_TOKEN")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn http() -> reqwest::Client {
        reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap()
    }

    async fn get(&self, path: &str, token: &str) -> (StatusCode, Value) {
        let r = Server::http().get(format!("{}{path}", self.url)).bearer_auth(token).send().await.unwrap();
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn submit(&self, spec: Value) -> String {
        let r = Server::http()
            .post(format!("{}/v1/jobs", self.url))
            .bearer_auth(&self.admin)
            .json(&spec)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
        r.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string()
    }

    async fn token(&self, role: &str, tenant: &str) -> String {
        let r = Server::http()
            .post(format!("{}/v1/tokens", self.url))
            .bearer_auth(&self.admin)
            .json(&json!({"role": role, "tenant": tenant}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
        r.json::<Value>().await.unwrap()["token"].as_str().unwrap().to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A job that runs for simulated weeks in one region (holds its quota for the whole test).
fn long_job(name: &str, tenant: &str, region: &str) -> Value {
    json!({"name": name, "tenant": tenant, "kind": "batch", "gpus": 1, "sizes": ["Standard_NC4as_T4_v3"],
           "regions": [region], "spot": "never", "duration_hours": 500.0})
}

/// Where screenshots go: `docs/` when asked to rewrite the README's, else the test's directory.
fn shot_path(dir: &std::path::Path, name: &str) -> PathBuf {
    if std::env::var_os("SPILLWAY_WRITE_SCREENSHOTS").is_some() {
        let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs");
        std::fs::create_dir_all(&docs).unwrap();
        docs.join(name)
    } else {
        dir.join(name)
    }
}

async fn screenshot(b: &Browser, dir: &std::path::Path, name: &str) {
    let png = b.screenshot().await;
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG screenshot");
    std::fs::write(shot_path(dir, name), png).unwrap();
}

/// No script error and no Content-Security-Policy violation in the console.
async fn assert_clean_console(b: &Browser) {
    let bad: Vec<(String, String)> = b
        .console()
        .await
        .into_iter()
        .filter(|(level, msg)| {
            level == "SEVERE"
                && !msg.contains("Failed to load resource") // 404s the tests ask for on purpose
                && !msg.contains("/v1/jobs/")
        })
        .collect();
    assert!(bad.is_empty(), "console errors: {bad:#?}");
}

async fn count(b: &Browser, css: &str) -> usize {
    b.exec("return document.querySelectorAll(arguments[0]).length", json!([css])).await.as_u64().unwrap_or(0) as usize
}

async fn page_text(b: &Browser) -> String {
    b.exec("return document.querySelector('main').innerText", json!([])).await.as_str().unwrap_or("").to_string()
}

/// The page fits the window: nothing sticks out sideways (tables scroll inside their cards).
async fn assert_fits(b: &Browser, what: &str) {
    let v = b
        .exec(
            "return [document.documentElement.scrollWidth, document.body.scrollWidth, window.innerWidth, \
             [...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right > window.innerWidth + 1 \
             && !e.closest('.scroll')).slice(0, 5).map(e => e.tagName + '.' + e.className + '#' + e.id)]",
            json!([]),
        )
        .await;
    let (w, body, inner) = (v[0].as_u64().unwrap(), v[1].as_u64().unwrap(), v[2].as_u64().unwrap());
    assert!(
        w <= inner + 1 && body <= inner + 1,
        "{what}: the page is {w} px ({body} px body) wide in a {inner} px window; sticking out: {}",
        v[3]
    );
}

#[tokio::test]
async fn dashboard_files_headers_sign_in_link_and_read_endpoints() {
    let dir = temp_dir("http");
    let s = Server::start(dir.to_path_buf(), &[]);
    // Into a pipe (a log file, a journal) serve prints the dashboard's address but not the token;
    // dashboard-url prints the signed-in link.
    assert!(s.dashboard_line.starts_with(&format!("{}/ ", s.url)), "{}", s.dashboard_line);
    assert!(!s.dashboard_line.contains(&s.admin));
    assert_eq!(s.sign_in_link(), format!("{}/#token={}", s.url, s.admin));
    // At a terminal, serve prints the signed-in link itself.
    let tty = dir.join("tty");
    std::fs::create_dir_all(&tty).unwrap();
    let cmd = format!(
        "{} serve --listen 127.0.0.1:0 --data-dir {}",
        env!("CARGO_BIN_EXE_spillway"),
        tty.join("data").display()
    );
    let mut script = Command::new("script")
        .args(["-q", "-e", "-c", &cmd, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("script (util-linux) runs serve on a terminal");
    let mut lines = BufReader::new(script.stdout.take().unwrap()).lines();
    let (mut url, mut link) = (String::new(), String::new());
    for line in lines.by_ref() {
        let line = line.unwrap();
        let line = line.trim_end_matches('\r');
        if let Some(rest) = line.strip_prefix("spillway listening on ") {
            url = rest.trim().to_string();
        }
        if let Some(rest) = line.strip_prefix("dashboard: ") {
            link = rest.trim().to_string();
            break;
        }
    }
    let _ = script.kill();
    let _ = script.wait();
    let token = std::fs::read_to_string(tty.join("data/admin.token")).unwrap();
    assert_eq!(link, format!("{url}/#token={}", token.trim()), "at a terminal serve prints the signed-in link");
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["dashboard-url", "--data-dir"])
        .arg(dir.join("nowhere"))
        .env_remove("SPILLWAY_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "no token: exit 1 with the reason");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no token"));

    // The page and its files: no token needed, strict headers, validators.
    let http = Server::http();
    let page = http.get(format!("{}/", s.url)).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let h = page.headers().clone();
    assert!(h["content-type"].to_str().unwrap().starts_with("text/html"));
    let csp = h["content-security-policy"].to_str().unwrap();
    for part in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
        "require-trusted-types-for 'script'",
    ] {
        assert!(csp.contains(part), "CSP {csp:?} lacks {part:?}");
    }
    assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"));
    assert_eq!(h["x-frame-options"], "DENY");
    assert_eq!(h["x-content-type-options"], "nosniff");
    let html = page.text().await.unwrap();
    assert!(html.contains("<script src=\"/dashboard/app.js\" defer></script>"));
    let js = http.get(format!("{}/dashboard/app.js", s.url)).send().await.unwrap();
    assert_eq!(js.status(), StatusCode::OK);
    assert!(js.headers()["content-type"].to_str().unwrap().starts_with("text/javascript"));
    let etag = js.headers()["etag"].to_str().unwrap().to_string();
    let again = http.get(format!("{}/dashboard/app.js", s.url)).header("If-None-Match", &etag).send().await.unwrap();
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    // The API's answers carry the same headers.
    let (st, _) = s.get("/v1/jobs", &s.admin).await;
    assert_eq!(st, StatusCode::OK);
    let api = http.get(format!("{}/v1/jobs", s.url)).send().await.unwrap();
    assert_eq!(api.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(api.headers()["x-frame-options"], "DENY");

    // whoami: who the token is, and the server's clock.
    let viewer = s.token("viewer", "team-a").await;
    let (st, me) = s.get("/v1/whoami", &viewer).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(
        (me["role"].as_str(), me["tenant"].as_str(), me["may_write_jobs"].as_bool()),
        (Some("viewer"), Some("team-a"), Some(false))
    );
    assert!(me["clock"]["now_ms"].as_i64().unwrap() > 1_600_000_000_000);
    assert_eq!((me["clock"]["kind"].as_str(), me["clock"]["speedup"].as_f64()), (Some("simulated"), Some(600.0)));

    // Listed jobs carry their placement; spend is per tenant and tenant-scoped.
    let a = s.submit(long_job("a-job", "team-a", "westus3")).await;
    let b = s.submit(long_job("b-job", "team-b", "westus3")).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (_, list) = s.get("/v1/jobs", &s.admin).await;
        let placed = list["jobs"].as_array().unwrap().iter().filter(|j| j["placement"]["region"] == "westus3").count();
        let (_, spend) = s.get("/v1/spend", &s.admin).await;
        let spending =
            spend["tenants"].as_array().unwrap().iter().filter(|t| t["usd_per_hour"].as_f64() > Some(0.0)).count();
        if placed == 2 && spending == 2 && spend["history"].as_array().unwrap().len() >= 2 {
            let p = &list["jobs"][0]["placement"];
            assert_eq!(
                (p["size"].as_str(), p["priority"].as_str(), p["vms"].as_u64()),
                (Some("Standard_NC4as_T4_v3"), Some("regular"), Some(1))
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "jobs not placed and billed in time: {list:#} {spend:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (st, mine) = s.get("/v1/spend?hours=1", &viewer).await;
    assert_eq!(st, StatusCode::OK);
    assert!(mine["tenants"].as_array().unwrap().iter().all(|t| t["tenant"] == "team-a"), "{mine:#}");
    assert!(mine["regions"].as_array().unwrap().iter().all(|t| t["tenant"] == "team-a"));
    assert!(
        mine["history"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|h| h["series"].as_array().unwrap())
            .all(|p| p["tenant"] == "team-a")
    );
    assert_eq!(mine["window_hours"], 1.0);
    let (st, other) = s.get("/v1/spend?tenant=team-b", &viewer).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(other["tenants"], json!([]), "another tenant's spend is not shown to a bound token");
    for bad in ["hours=0", "hours=721", "hours=abc", "colour=red"] {
        let (st, e) = s.get(&format!("/v1/spend?{bad}"), &s.admin).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{bad}: {e}");
        assert!(!e["problems"][0]["field"].as_str().unwrap().is_empty(), "{bad}: names the field: {e}");
    }
    let _ = (a, b);
}

#[tokio::test]
async fn browser_demo_jobs_job_timeline_filters_views_and_screenshots() {
    let dir = temp_dir("demo");
    let Some(b) = Browser::start(&dir, 1280, 800).await else { return };
    // Budgets for the demo's tenants (no API sets one yet: they go in the store before the start).
    let server_dir = dir.join("server");
    {
        let store = state::Store::open(&server_dir.join("data")).unwrap();
        for (name, budget) in [("product", 400.0), ("research", 250.0), ("search", 150.0)] {
            store
                .put(&scheduler::records::Tenant { name: name.into(), budget_usd: Some(budget), spent_usd: 0.0 })
                .unwrap();
        }
        store.flush().unwrap();
    }
    let s = Server::start(server_dir, &["--demo"]);
    let writing = std::env::var_os("SPILLWAY_WRITE_SCREENSHOTS").is_some();
    // A job no region has the quota for: it waits, and the dashboard must say why.
    let stuck = s
        .submit(json!({"name": "h100-pretrain", "tenant": "research", "kind": "training", "gpus": 64,
                       "gpu_models": ["H100"], "duration_hours": 12.0}))
        .await;

    // Sign in by the link (the token in the fragment): it leaves the address bar at once.
    b.goto(&s.sign_in_link()).await;
    b.wait_text("#who", "admin", 30).await;
    assert!(!b.url().await.contains("token="), "the token is removed from the URL");
    let stored = b.exec("return sessionStorage.getItem('spillway.token')", json!([])).await;
    assert_eq!(stored.as_str(), Some(s.admin.as_str()));

    // The demo's jobs appear, live, with counts by state; one of them runs to its end (a final
    // state, so filtering by it below cannot race the job's next move).
    let want = if writing { 7 } else { 3 };
    b.wait_for("the demo's jobs", 90, || async { (count(&b, "tr.row").await >= want).then_some(()) }).await;
    let ran = "succeeded";
    b.wait_for("a demo job that ran to its end", 90, || async {
        let n = b
            .exec("var e = document.querySelector('#state-counts [data-state=succeeded]'); return e ? Number(e.getAttribute('data-count')) : 0", json!([]))
            .await;
        (n.as_u64().unwrap_or(0) > 0).then_some(())
    })
    .await;
    let all = b.wait_text("#state-counts [data-state=all] b", "", 5).await;
    assert!(all.parse::<usize>().unwrap() >= 3, "{all}");
    assert_fits(&b, "jobs at 1280 px").await;
    screenshot(&b, &dir, "dashboard-jobs.png").await;

    // Filter by state: only that state's jobs are listed, and the filter is in the URL.
    b.click_on(&format!("#filter-state option[value={ran}]"), 5).await;
    b.wait_for("rows of one state", 30, || async {
        let states = b
            .exec("return [...document.querySelectorAll('tr.row')].map(r => r.getAttribute('data-state'))", json!([]))
            .await;
        let states: Vec<&str> = states.as_array()?.iter().filter_map(|v| v.as_str()).collect();
        (!states.is_empty() && states.iter().all(|s| *s == ran)).then_some(())
    })
    .await;
    assert!(b.url().await.contains(&format!("state={ran}")));

    // Sorting by cost puts the dearest first.
    b.click_on("button.sort[data-sort=cost]", 5).await;
    let costs = b.exec("return [...document.querySelectorAll('tr.row td.c-cost')].map(c => Number(c.textContent.replace(/[$,]/g, '')))", json!([])).await;
    let costs: Vec<f64> = costs.as_array().unwrap().iter().filter_map(|v| v.as_f64()).collect();
    assert!(costs.windows(2).all(|w| w[0] >= w[1]), "sorted by cost, dearest first: {costs:?}");

    // Open a job: its timeline shows it pending, provisioning and running, and its events.
    b.click_on("tr.row a.joblink", 5).await;
    b.wait_element("#timeline rect[data-phase=running]", 30).await;
    assert!(count(&b, "#timeline rect[data-phase=provisioning]").await >= 1);
    let kinds = b
        .exec(
            "return [...document.querySelectorAll('#job-events tr[data-kind]')].map(r => r.getAttribute('data-kind'))",
            json!([]),
        )
        .await;
    let kinds: Vec<&str> = kinds.as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
    assert!(kinds.contains(&"submitted") && kinds.contains(&"running"), "events: {kinds:?}");
    assert!(count(&b, "#attempts tr[data-attempt]").await >= 1);
    let logs = b.wait_text("#logs-note", "", 5).await;
    assert!(logs.contains("no command") || logs.contains("output"), "{logs}");
    assert_fits(&b, "a job at 1280 px").await;
    if writing {
        // The README shows the job that moved most.
        let (_, list) = s.get("/v1/jobs", &s.admin).await;
        let busiest = list["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|j| j["first_running_at_ms"].is_i64())
            .max_by_key(|j| {
                (
                    j["failovers"].as_u64().unwrap_or(0) + j["evictions"].as_u64().unwrap_or(0),
                    j["attempts"].as_u64().unwrap_or(0),
                )
            })
            .map(|j| j["id"].as_str().unwrap().to_string())
            .unwrap();
        b.goto(&format!("{}/#/job/{busiest}", s.url)).await;
        b.wait_element("#timeline rect[data-phase=running]", 30).await;
    }
    screenshot(&b, &dir, "dashboard-job.png").await;

    // A job that runs a command: its ranks and its output, followed live.
    let (_, list) = s.get("/v1/jobs", &s.admin).await;
    let service = list["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["spec"]["kind"] == "inference")
        .map(|j| j["id"].as_str().unwrap().to_string())
        .expect("the demo submits an inference service in its first burst");
    b.goto(&format!("{}/#/job/{service}", s.url)).await;
    b.wait_text("#logs", "served", 90).await;
    assert!(count(&b, "#nodes tr[data-rank]").await >= 1, "the ranks that ran it");
    let tagged = b
        .exec(
            "return [...document.querySelectorAll('#logs .logline')].every(l => l.querySelector('.logtag'))",
            json!([]),
        )
        .await;
    assert_eq!(tagged, json!(true), "every line is tagged with its attempt and rank");

    // The job that cannot fit: pending, with the reasons on its page.
    b.goto(&format!("{}/#/job/{stuck}", s.url)).await;
    let why = b.wait_text("#pending-reasons", "needs", 60).await;
    assert!(why.contains("Why it waits"), "{why}");
    assert!(count(&b, "#timeline rect[data-phase=pending]").await >= 1, "a waiting job's timeline is pending");

    // Capacity: every region of the bundled scenario with its quota pools as bars.
    b.goto(&format!("{}/#/capacity", s.url)).await;
    b.wait_for("four regions with pools", 30, || async {
        (count(&b, ".region .pool").await >= 8 && count(&b, ".region[data-region]").await == 4).then_some(())
    })
    .await;
    assert!(count(&b, "svg.poolbar rect.q-limit").await >= 8);
    assert!(count(&b, "[data-breaker]").await == 4, "a breaker state per region");
    assert_fits(&b, "capacity at 1280 px").await;
    screenshot(&b, &dir, "dashboard-capacity.png").await;

    // Cost: tenants with their spend, budgets and what is left; charts with units.
    b.goto(&format!("{}/#/cost", s.url)).await;
    b.wait_for("tenants and charts", 30, || async {
        (count(&b, "#tenants tr[data-tenant]").await >= 1 && count(&b, "#chart-tenantSpent path.line").await >= 1)
            .then_some(())
    })
    .await;
    let research = b.wait_text("#tenants tr[data-tenant=research]", "$250.00", 30).await;
    assert_eq!(count(&b, "#tenants svg.budget").await, 3, "a budget bar per tenant: {research}");
    let labels = b
        .exec(
            "return [...document.querySelectorAll('#chart-tenantRate .axislabel')].map(e => e.textContent)",
            json!([]),
        )
        .await;
    assert!(labels.to_string().contains("USD per hour") && labels.to_string().contains("server time"), "{labels}");
    assert_fits(&b, "cost at 1280 px").await;
    screenshot(&b, &dir, "dashboard-cost.png").await;

    // Plan: the solver's answer now, and why the job that cannot fit waits.
    b.goto(&format!("{}/#/plan", s.url)).await;
    b.wait_text("#plan-summary", "Solver ", 30).await;
    let reasons = b.wait_text(&format!("#plan-waiting tr[data-job='{stuck}']"), "needs", 30).await;
    assert!(reasons.contains("h100-pretrain"), "the waiting job is named: {reasons}");
    assert_fits(&b, "plan at 1280 px").await;
    screenshot(&b, &dir, "dashboard-plan.png").await;

    // Dark theme, and a phone's width.
    b.click_on("#theme", 5).await;
    b.click_on("#theme", 5).await;
    let theme = b.exec("return document.documentElement.getAttribute('data-theme')", json!([])).await;
    assert_eq!(theme.as_str(), Some("dark"));
    b.resize(390, 844).await;
    b.goto(&format!("{}/#/jobs", s.url)).await;
    b.wait_for("jobs on a phone", 30, || async { (count(&b, "tr.row").await >= 1).then_some(()) }).await;
    assert_fits(&b, "jobs at phone width").await;
    screenshot(&b, &dir, "dashboard-phone-dark.png").await;
    b.goto(&format!("{}/#/capacity", s.url)).await;
    b.wait_for("capacity on a phone", 30, || async { (count(&b, ".region .pool").await >= 1).then_some(()) }).await;
    assert_fits(&b, "capacity at phone width").await;
    // A job (its timeline, attempts, events and logs), cost (tables and charts) and the plan fit a
    // phone's width too: wide tables scroll inside their cards, the page itself never sideways.
    b.goto(&format!("{}/#/job/{stuck}", s.url)).await;
    b.wait_text("#job-name", "h100-pretrain", 30).await;
    assert_fits(&b, "a waiting job at phone width").await;
    b.goto(&format!("{}/#/jobs", s.url)).await;
    b.click_on("tr.row[data-state=running] a.joblink, tr.row[data-state=succeeded] a.joblink", 30).await;
    b.wait_element("#timeline rect[data-phase=running]", 30).await;
    b.wait_element("#job-events tr[data-kind]", 30).await;
    assert_fits(&b, "a job at phone width").await;
    screenshot(&b, &dir, "dashboard-phone-job.png").await;
    b.goto(&format!("{}/#/cost", s.url)).await;
    b.wait_for("cost on a phone", 30, || async {
        (count(&b, "#tenants tr[data-tenant]").await >= 1 && count(&b, "#chart-tenantSpent path.line").await >= 1)
            .then_some(())
    })
    .await;
    assert_fits(&b, "cost at phone width").await;
    b.goto(&format!("{}/#/plan", s.url)).await;
    b.wait_text(&format!("#plan-waiting tr[data-job='{stuck}']"), "needs", 30).await;
    assert_fits(&b, "plan at phone width").await;

    // Sign out: the token is gone and the sign-in form is back.
    b.click_on("#signout", 5).await;
    b.wait_element("#signin", 10).await;
    let stored = b.exec("return sessionStorage.getItem('spillway.token')", json!([])).await;
    assert!(stored.is_null());
    assert_clean_console(&b).await;
}

#[tokio::test]
async fn browser_tenant_viewer_quota_bar_and_escaped_names() {
    let dir = temp_dir("tenants");
    let Some(b) = Browser::start(&dir, 1280, 800).await else { return };
    // A job whose name and event are markup: the API validates names, so it is put in the store
    // directly, as a store written by another version (or any future free-text field) could hold.
    let server_dir = dir.join("server");
    {
        let store = state::Store::open(&server_dir.join("data")).unwrap();
        let spec: scheduler::model::JobSpec = serde_json::from_value(json!({
            "name": XSS_NAME, "tenant": "team-b", "kind": "batch", "gpus": 1,
            "sizes": ["Standard_NC4as_T4_v3"], "regions": ["eastus2"], "spot": "never", "duration_hours": 500.0
        }))
        .unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
        let job = scheduler::model::Job::new("j-markup".into(), spec, now);
        store
            .transaction(|tx| {
                tx.put(&job)?;
                scheduler::jobs::record_event(
                    tx,
                    &job,
                    now,
                    scheduler::model::EventKind::Submitted,
                    "<script>window.pwned = 1</script> imported",
                    Value::Null,
                )?;
                Ok(())
            })
            .unwrap();
        store.flush().unwrap();
    }
    let s = Server::start(server_dir, &[]);
    // team-a's budget, set as an admin sets it (the cost view shows it below).
    let r = Server::http()
        .put(format!("{}/v1/tenants/team-a/budget", s.url))
        .bearer_auth(&s.admin)
        .json(&json!({"budget_usd": 50}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let a_id = s.submit(long_job("a-job", "team-a", "eastus2")).await;
    let b_id = s.submit(long_job("b-job", "team-b", "eastus2")).await;
    let viewer = s.token("viewer", "team-a").await;

    // A tenant-A viewer sees tenant A's job and nothing of tenant B's.
    b.goto(&format!("{}/#token={viewer}", s.url)).await;
    b.wait_text("#who", "viewer · tenant team-a", 30).await;
    b.wait_for("team-a's job", 30, || async { b.find(&format!("tr.row[data-id='{a_id}']")).await }).await;
    let tenants = b
        .exec("return [...document.querySelectorAll('tr.row')].map(r => r.getAttribute('data-tenant'))", json!([]))
        .await;
    assert_eq!(tenants, json!(["team-a"]));
    assert!(b.find("#filter-tenant").await.is_none(), "a bound token has no tenant filter");
    let text = page_text(&b).await;
    assert!(
        !text.contains("b-job") && !text.contains(&b_id) && !text.contains("team-b") && !text.contains("j-markup"),
        "{text}"
    );
    b.goto(&format!("{}/#/job/{b_id}", s.url)).await;
    b.wait_element("#job-missing", 30).await;
    b.goto(&format!("{}/#/cost", s.url)).await;
    b.wait_text("#tenants tr[data-tenant='team-a']", "$50.00", 30).await;
    assert_eq!(count(&b, "#tenants tr[data-tenant]").await, 1);
    b.goto(&format!("{}/#/plan", s.url)).await;
    b.wait_text("#plan-summary", "Solver ", 30).await;
    let text = page_text(&b).await;
    assert!(!text.contains("b-job") && !text.contains(&b_id) && !text.contains("j-markup"), "{text}");

    // Capacity: the tenant's own share of each pool, nobody else's.
    b.goto(&format!("{}/#/capacity", s.url)).await;
    let mine =
        b.wait_for("team-a's share of eastus2", 30, || async { used_in(&b, "eastus2").await.filter(|&u| u > 0) }).await;
    assert_eq!(mine, 8, "a-job's VM: 4 vCPUs of its family pool and 4 of cores");
    b.wait_text(".legend", "used by tenant team-a", 5).await;

    // Sign out, then in again by pasting the admin token.
    b.click_on("#signout", 5).await;
    let input = b.wait_element("#token-input", 10).await;
    b.type_into(&input, &s.admin).await;
    b.click_on("#signin button[type=submit]", 5).await;
    b.wait_text("#who", "admin", 30).await;

    // The markup is shown as text: no image element, no script ran.
    b.goto(&format!("{}/#/jobs", s.url)).await;
    let name = b.wait_text("tr.row[data-id='j-markup'] a.joblink", "", 30).await;
    assert_eq!(name, XSS_NAME);
    assert_eq!(count(&b, "main img").await, 0);
    assert!(b.alert_text().await.is_none(), "no alert: the name was not run");
    b.click_on("tr.row[data-id='j-markup'] a.joblink", 5).await;
    assert_eq!(b.wait_text("#job-name", "", 30).await, XSS_NAME);
    b.wait_element("#job-events td.msg", 30).await;
    let messages =
        b.exec("return [...document.querySelectorAll('#job-events td.msg')].map(e => e.textContent)", json!([])).await;
    assert!(
        messages.as_array().unwrap().iter().any(|m| m == "<script>window.pwned = 1</script> imported"),
        "{messages}"
    );
    assert_eq!(count(&b, "main img, main script").await, 0);
    assert!(b.exec("return window.pwned === undefined", json!([])).await.as_bool().unwrap());
    assert!(b.alert_text().await.is_none());

    // A quota bar moves when a submission takes quota: westus3 is idle until the probe arrives.
    b.goto(&format!("{}/#/capacity", s.url)).await;
    let before = b.wait_for("westus3's pools", 30, || used_in(&b, "westus3")).await;
    b.wait_element(".pool[data-region=westus3] svg.poolbar", 5).await;
    let segs_before = count(
        &b,
        ".pool[data-region=westus3] rect[data-part=q-us], .pool[data-region=westus3] rect[data-part=q-inflight]",
    )
    .await;
    s.submit(long_job("quota-probe", "team-a", "westus3")).await;
    let after = b
        .wait_for("westus3's bar to grow", 30, || async { used_in(&b, "westus3").await.filter(|&u| u > before) })
        .await;
    assert!(after >= before + 8, "the family pool and cores both gain the VM's 4 vCPUs: {before} -> {after}");
    let segs_after = count(
        &b,
        ".pool[data-region=westus3] rect[data-part=q-us], .pool[data-region=westus3] rect[data-part=q-inflight]",
    )
    .await;
    assert!(segs_after > segs_before, "the bar draws the new use: {segs_before} -> {segs_after} segments");
    assert_clean_console(&b).await;
}

/// Issue #18: more jobs than one read of the list (1,000): the jobs view says how many it has read,
/// reads the older ones by the API's cursor when asked, and then searches and counts them all.
#[tokio::test]
async fn browser_pages_past_the_newest_thousand_jobs() {
    let dir = temp_dir("paging");
    let Some(b) = Browser::start(&dir, 1280, 800).await else { return };
    let server_dir = dir.join("server");
    const OLD: i64 = 1_040;
    let oldest_id;
    {
        // History from before this server: finished jobs, with ids as the server makes them
        // (submission time first), an hour old.
        let store = state::Store::open(&server_dir.join("data")).unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
        let id = |i: i64| format!("j-{:011x}{:06x}", now - 3_600_000 + i * 1_000, i);
        oldest_id = id(0);
        for i in 0..OLD {
            let spec: scheduler::model::JobSpec = serde_json::from_value(json!({
                "name": format!("old-{i:04}"), "tenant": "archive", "kind": "batch", "gpus": 1,
                "sizes": ["Standard_NC4as_T4_v3"], "spot": "never", "duration_hours": 1.0
            }))
            .unwrap();
            let at = now - 3_600_000 + i * 1_000;
            let mut job = scheduler::model::Job::new(id(i), spec, at);
            job.state = scheduler::model::JobState::Cancelled;
            job.finished_at_ms = Some(at + 500);
            store.put(&job).unwrap();
        }
        store.flush().unwrap();
    }
    let s = Server::start(server_dir, &[]);
    let fresh = s.submit(long_job("fresh", "team-a", "eastus2")).await;

    b.goto(&format!("{}/#token={}", s.url, s.admin)).await;
    b.wait_for("the newest job", 30, || async { b.find(&format!("tr.row[data-id='{fresh}']")).await }).await;
    let info = b.wait_text("#page-info", "read)", 30).await;
    assert!(info.contains(&format!("the newest 1000 of {} read", OLD + 1)), "{info}");
    // The oldest job is not among the newest 1,000: searching for it finds nothing yet.
    let search = b.wait_element("#filter-text", 5).await;
    b.type_into(&search, "old-0000").await;
    b.wait_element("#no-jobs", 10).await;
    let more = b.wait_text("#load-older", "", 5).await;
    assert_eq!(more, format!("Read {} older jobs", OLD + 1 - 1000));
    b.click_on("#load-older", 5).await;
    b.wait_for("the oldest job", 30, || async { b.find(&format!("tr.row[data-id='{oldest_id}']")).await }).await;
    assert_eq!(count(&b, "tr.row").await, 1);
    assert!(b.find("#load-older").await.is_none(), "everything is read");
    // Every job once: the whole list counts them all, none twice.
    b.exec(
        "const e = document.querySelector('#filter-text'); e.value = ''; e.dispatchEvent(new Event('input'))",
        json!([]),
    )
    .await;
    let info = b.wait_text("#page-info", &format!("of {} jobs", OLD + 1), 30).await;
    assert!(!info.contains("read)"), "{info}");
    // The list stays whole when it refreshes (a new job arrives and the view reads again).
    let later = s.submit(long_job("later", "team-a", "eastus2")).await;
    b.wait_for("the later job", 30, || async { b.find(&format!("tr.row[data-id='{later}']")).await }).await;
    b.wait_text("#page-info", &format!("of {} jobs", OLD + 2), 30).await;
    assert_clean_console(&b).await;
}

/// Issue #23: a pipeline submitted through the API is listed in the pipelines view and, opened,
/// shows its graph (an edge from each dependency to its dependant) with each job's state as the
/// API gives it, live: the waiting stage says what it waits for, and runs once its dependency ends.
#[tokio::test]
async fn browser_pipelines_list_and_graph_with_each_jobs_state() {
    let dir = temp_dir("pipelines");
    let Some(b) = Browser::start(&dir, 1280, 800).await else { return };
    let s = Server::start(dir.join("server"), &[]);
    // prep runs a few simulated minutes; train and eval wait for it in turn; report runs after
    // prep too, beside train. At 600× the whole is under a minute of real time.
    let stage = |name: &str, after: &[&str], hours: f64| {
        json!({"name": name, "kind": "batch", "gpus": 1, "sizes": ["Standard_NC4as_T4_v3"], "regions": ["eastus2"],
               "spot": "never", "duration_hours": hours, "depends_on": after})
    };
    let body = json!({"name": "nightly", "tenant": "team-a", "jobs": [
        stage("prep", &[], 0.5), stage("train", &["prep"], 500.0), stage("eval", &["train"], 1.0),
        stage("report", &["prep"], 500.0)]});
    let r =
        Server::http().post(format!("{}/v1/pipelines", s.url)).bearer_auth(&s.admin).json(&body).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let p: Value = r.json().await.unwrap();
    let id = p["id"].as_str().unwrap().to_string();
    let ids: std::collections::BTreeMap<String, String> = p["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["name"].as_str().unwrap().to_string(), j["id"].as_str().unwrap().to_string()))
        .collect();

    // The list: the pipeline, its state and tenant, from the nav.
    b.goto(&format!("{}/#token={}", s.url, s.admin)).await;
    b.wait_text("#who", "admin", 30).await;
    b.click_on("#nav a[data-view=pipelines]", 5).await;
    let row = format!("#pipelines-table tr.row[data-id='{id}']");
    b.wait_for("the pipeline's row", 30, || async { b.find(&row).await }).await;
    assert_eq!(b.text_of(&format!("{row} a.joblink")).await.as_deref(), Some("nightly"));
    assert_eq!(count(&b, &format!("{row} .dots .dot")).await, 4, "a dot per job");
    assert!(b.text_of(&row).await.unwrap().contains("team-a"));

    // The graph: a box per job with its state, an edge per dependency.
    b.click_on(&format!("{row} a.joblink"), 5).await;
    b.wait_text("#pipeline-name", "nightly", 30).await;
    assert_eq!(count(&b, "#pipeline-graph .pnode").await, 4);
    let edges = b
        .exec(
            "return [...document.querySelectorAll('#pipeline-graph path.edge')].map(e => e.getAttribute('data-from') + '>' + e.getAttribute('data-to')).sort()",
            json!([]),
        )
        .await;
    assert_eq!(edges, json!(["prep>report", "prep>train", "train>eval"]));
    // Dependencies to the left of their dependants.
    let x_of = |name: &str| {
        let b = &b;
        let script = format!(
            "return Number(document.querySelector(\"#pipeline-graph .pnode[data-job='{name}'] rect.pbox\").getAttribute('x'))"
        );
        async move { b.exec(&script, json!([])).await.as_f64().unwrap() }
    };
    let (prep_x, train_x, eval_x, report_x) =
        (x_of("prep").await, x_of("train").await, x_of("eval").await, x_of("report").await);
    assert!(prep_x < train_x && train_x < eval_x && train_x == report_x, "{prep_x} {train_x} {eval_x} {report_x}");
    // Each job's state as the API says, kept live: train waits for prep, then runs once prep ends.
    let state_in_graph = |name: &'static str| {
        let b = &b;
        async move {
            b.exec(
                "var e = document.querySelector(\"#pipeline-graph .pnode[data-job='\" + arguments[0] + \"']\"); return e ? e.getAttribute('data-state') : null",
                json!([name]),
            )
            .await
            .as_str()
            .map(str::to_string)
        }
    };
    let api_state = |name: &str| {
        let (s, id) = (&s, ids[name].clone());
        async move { s.get(&format!("/v1/jobs/{id}"), &s.admin).await.1["job"]["state"].as_str().unwrap().to_string() }
    };
    assert_eq!(state_in_graph("eval").await.as_deref(), Some("pending"));
    let waits = b.wait_text("#pipeline-jobs tr[data-job=eval] td.why", "waiting for train", 30).await;
    assert!(waits.contains("waiting for train"), "{waits}");
    b.wait_for("prep to succeed in the graph", 60, || async {
        (state_in_graph("prep").await.as_deref() == Some("succeeded")).then_some(())
    })
    .await;
    assert_eq!(api_state("prep").await, "succeeded");
    let train = b
        .wait_for("train to run in the graph", 60, || async {
            state_in_graph("train").await.filter(|s| s == "provisioning" || s == "running")
        })
        .await;
    let api = api_state("train").await;
    assert!(api == train || (train == "provisioning" && api == "running"), "graph {train}, API {api}");
    assert_eq!(state_in_graph("eval").await.as_deref(), Some("pending"), "eval still waits for train");
    assert_eq!(b.text_of("#pipeline-summary .big").await.as_deref(), Some("4"), "the jobs card counts them");
    assert_fits(&b, "a pipeline at 1280 px").await;
    screenshot(&b, &dir, "dashboard-pipeline.png").await;
    // A box opens its job.
    b.click_on("#pipeline-graph .pnode[data-job=prep]", 5).await;
    b.wait_text("#job-name", "prep", 30).await;
    assert!(b.url().await.contains(&ids["prep"]));
    // The nav marks the pipelines view for a pipeline.
    b.goto(&format!("{}/#/pipeline/{id}", s.url)).await;
    b.wait_text("#pipeline-name", "nightly", 30).await;
    let current =
        b.exec("return document.querySelector('#nav a[aria-current=page]').getAttribute('data-view')", json!([])).await;
    assert_eq!(current, json!("pipelines"));
    // An unknown pipeline says so.
    b.goto(&format!("{}/#/pipeline/p-nope", s.url)).await;
    b.wait_element("#pipeline-missing", 30).await;
    assert_clean_console(&b).await;
}

/// vCPUs spillway uses in a region's pools, as the capacity view's bars say (`None` before they show).
async fn used_in(b: &Browser, region: &str) -> Option<u64> {
    let script = "var p = [...document.querySelectorAll('.pool[data-region=' + arguments[0] + ']')]; \
                  return p.length ? p.reduce((a, e) => a + Number(e.getAttribute('data-us')), 0) : null";
    b.exec(script, json!([region])).await.as_u64()
}
