//! `spillway advise` run as a user runs it: the built binary, its output and exit codes.

mod e2e_support;

use e2e_support::{EMULATOR_TOKEN, Emulator, FAST_SCENARIO, Server, admin_get, temp_dir};
use std::process::Command;

use serde_json::Value;

const PROBLEM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/advise-problem.json");

fn spillway(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("SPILLWAY_AZURE_SUBSCRIPTION_ID")
        .output()
        .expect("spillway runs")
}

fn temp_problem(name: &str, edit: impl FnOnce(&mut Value)) -> std::path::PathBuf {
    let mut p: Value = serde_json::from_str(&std::fs::read_to_string(PROBLEM).unwrap()).unwrap();
    edit(&mut p);
    let path = std::env::temp_dir().join(format!("spillway-advise-{name}-{}.json", std::process::id()));
    std::fs::write(&path, serde_json::to_string(&p).unwrap()).unwrap();
    path
}

#[test]
fn a_problem_with_binding_quota_gets_ranked_increases_ready_to_file() {
    let out = spillway(&["advise", "--problem", PROBLEM, "--output", "json", "--subscription", "sub-42"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let first = &r["recommendations"][0];
    assert_eq!(first["rank"], 1);
    assert_eq!(first["region"], "westus3");
    assert_eq!(first["increases"][0]["pool"], "standardNCADSA100v4Family");
    assert_eq!(first["increases"][0]["current_limit"], 96);
    assert_eq!(first["increases"][0]["increase_vcpus"], 216);
    let jobs: Vec<&str> = first["buys"]["jobs"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(jobs.contains(&"pretrain-8"), "{jobs:?}");
    // The alternative: the same work in eastus needs its family and cores raised.
    let alt = &first["alternatives"][0];
    assert_eq!(alt["region"], "eastus");
    assert_eq!(alt["increases"].as_array().unwrap().len(), 2);
    assert_eq!(r["after"]["waiting_jobs"], 0);
    assert!(r["after"]["placed_weight"].as_f64() > r["before"]["placed_weight"].as_f64());
    let req = &r["requests"][0];
    assert_eq!(
        req["url"],
        "https://management.azure.com/subscriptions/sub-42/providers/Microsoft.Compute/locations/westus3/providers/\
         Microsoft.Quota/quotas/standardNCADSA100v4Family?api-version=2025-09-01"
    );
    assert_eq!(req["body"]["properties"]["limit"]["value"], 312);
    assert!(req["az"].as_str().unwrap().starts_with("az quota update --resource-name standardNCADSA100v4Family"));

    let table = spillway(&["advise", "--problem", PROBLEM]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("westus3  standardNCADSA100v4Family  96     +216"), "{text}");
    assert!(text.contains("or +216 vCPUs of standardNCADSA100v4Family and +192 vCPUs of cores in eastus"), "{text}");
    assert!(text.contains("{subscriptionId}"), "a placeholder without --subscription: {text}");
}

#[test]
fn nothing_binding_means_no_advice_and_exit_0() {
    let path = temp_problem("loose", |p| {
        for q in p["quotas"].as_array_mut().unwrap() {
            q["vcpus"] = 100_000.into();
        }
    });
    let out = spillway(&["advise", "--problem", path.to_str().unwrap(), "--output", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["summary"], "no quota increase would place more work");
    assert_eq!(r["recommendations"].as_array().unwrap().len(), 0);
    assert_eq!(r["requests"].as_array().unwrap().len(), 0);
    let text = spillway(&["advise", "--problem", path.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("no quota increase would place more work"));
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_region_or_pool_azure_does_not_know_is_refused_by_name() {
    let path = temp_problem("unknown", |p| {
        p["quotas"][1]["region"] = "mars-north".into();
        p["quotas"][4]["pool"] = "standardWarpDriveFamily".into();
    });
    let out = spillway(&["advise", "--problem", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("quotas[1].region: \"mars-north\" is not an Azure region"), "{err}");
    assert!(err.contains("quotas[4].pool: \"standardWarpDriveFamily\" is not a Microsoft.Compute quota pool"), "{err}");
    assert!(out.stdout.is_empty());
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_malformed_problem_exits_2_naming_the_field() {
    let path = temp_problem("malformed", |p| p["jobs"][2]["gpus"] = 0.into());
    let out = spillway(&["advise", "--problem", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("jobs[2].gpus: expected a positive integer"));
    let _ = std::fs::remove_file(path);
}

/// Half a day of A100 work in two regions whose regular A100 family quota is tight.
const TIGHT_WEEK: &str = include_str!("../simulator/tests/data/tight-quota.toml");

#[test]
fn a_scenario_gets_confirmed_advice_ready_to_file_and_an_advised_copy_that_simulates() {
    let dir = std::env::temp_dir().join(format!("spillway-advise-scenario-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("tight.toml");
    std::fs::write(&input, TIGHT_WEEK).unwrap();
    let written = dir.join("out/tight-advised.toml");
    std::fs::create_dir_all(written.parent().unwrap()).unwrap();
    let out = spillway(&[
        "advise",
        "--scenario",
        input.to_str().unwrap(),
        "--write-scenario",
        written.to_str().unwrap(),
        "--output",
        "json",
        "--max",
        "3",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let recs = r["recommendations"].as_array().unwrap();
    assert!(!recs.is_empty() && recs.len() <= 3, "{r:#}");
    assert_eq!(r["requests"].as_array().unwrap().len(), recs.len(), "one request per increase");
    for (rec, req) in recs.iter().zip(r["requests"].as_array().unwrap()) {
        let pool = rec["increase"]["pool"].as_str().unwrap();
        assert!(req["url"].as_str().unwrap().contains(&format!("/locations/{}/", rec["region"].as_str().unwrap())));
        assert!(req["url"].as_str().unwrap().contains(&format!("/quotas/{pool}?")), "{req:#}");
        assert_eq!(req["body"]["properties"]["limit"]["value"], rec["increase"]["new_limit"]);
    }
    assert!(r["after"]["waiting_gpu_hours"].as_f64() < r["before"]["waiting_gpu_hours"].as_f64(), "{r:#}");

    // The written copy runs with `spillway simulate` and gives the confirming run's week.
    let sim = spillway(&["simulate", written.to_str().unwrap(), "--output", "json"]);
    assert!(sim.status.success(), "{}", String::from_utf8_lossy(&sim.stderr));
    let report: Value = serde_json::from_slice(&sim.stdout).unwrap();
    let summary = &report["policies"][0];
    assert_eq!(summary["name"], "spillway");
    assert_eq!(summary["jobs_completed"], r["after"]["jobs_completed"], "{summary:#}");
    assert_eq!(summary["jobs_pending_at_end"], r["after"]["jobs_pending_at_end"]);

    let table = spillway(&["advise", "--scenario", input.to_str().unwrap(), "--max", "3"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("PENDING AT END") && text.contains("az quota update"), "{text}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `--apply` against the ARM emulator on loopback: the advised increase is filed with
/// `Microsoft.Quota` over the limit Azure reports, followed to its end, and shows in the usages;
/// an increase Azure will not grant automatically is reported as escalated, exit 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_files_the_advice_with_azure_and_reports_each_answer() {
    use std::sync::Arc;

    use scheduler::cloud::Cloud;
    use simulator::arm_emulator::{EmulatorConfig, serve};

    const TOKEN: &str = "advise-apply-token";
    let family = "standardNCADSA100v4Family";
    for (auto_approve, granted) in [(1000u64, true), (100, false)] {
        let clock = Arc::new(scheduler::clock::ManualClock::new(1_700_000_000_000));
        let sim = simulator::SimCloud::new(
            simulator::SimCloudConfig::modest(["eastus", "westus3"]),
            scheduler::Catalog::builtin(),
            clock,
        )
        .unwrap();
        let sim = Arc::new(sim);
        let mut cfg = EmulatorConfig::new(TOKEN);
        cfg.retry_after_seconds = 0;
        cfg.quota_request_seconds = 0;
        cfg.quota_auto_approve_vcpus = auto_approve;
        let emulator = serve(cfg, sim.clone()).await.unwrap();
        let dir = std::env::temp_dir().join(format!("spillway-advise-apply-{}-{auto_approve}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let settings = dir.join("azure.toml");
        std::fs::write(
            &settings,
            format!(
                "[azure]\nsubscription_id = \"{}\"\nresource_group = \"spillway\"\nmanagement_endpoint = \"{}\"\n\
                 credential = \"static_token\"\ntoken = \"{TOKEN}\"\n",
                emulator.subscription(),
                emulator.base_url()
            ),
        )
        .unwrap();
        let settings = settings.to_str().unwrap().to_string();
        let args: Vec<String> =
            ["advise", "--problem", PROBLEM, "--max", "1", "--apply", "--config", &settings].map(String::from).to_vec();
        let mut json_args = args.clone();
        json_args.extend(["--output".to_string(), "json".to_string()]);
        let run = |a: Vec<String>| move || spillway(&a.iter().map(String::as_str).collect::<Vec<_>>());
        let out = tokio::task::spawn_blocking(run(json_args)).await.unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
        let applied = &r["applied"][0];
        assert_eq!(applied["region"], "westus3", "{r:#}");
        assert_eq!(applied["resource_name"], family);
        // The problem says 96 free; the emulated subscription's limit is 96 too: 96 + 216.
        assert_eq!((applied["limit_before"].as_u64(), applied["requested_limit"].as_u64()), (Some(96), Some(312)));
        let limit =
            sim.quota("westus3").await.unwrap().into_iter().find(|q| q.pool.name() == family).map(|q| q.limit).unwrap();
        if granted {
            assert_eq!(out.status.code(), Some(0), "{stderr}");
            assert_eq!(applied["state"], "Succeeded");
            assert_eq!(applied["limit_after"], 312);
            assert_eq!(limit, 312, "the subscription's limit was raised");
        } else {
            assert_eq!(out.status.code(), Some(3), "{stderr}");
            assert_eq!(applied["state"], "Escalated");
            assert!(applied["message"].as_str().unwrap().contains("support ticket"));
            assert_eq!(limit, 96, "nothing changed");
            let table = tokio::task::spawn_blocking(run(args)).await.unwrap();
            let text = String::from_utf8_lossy(&table.stdout);
            assert!(text.contains("filed with Azure") && text.contains("Escalated"), "{text}");
            assert!(text.contains("1 of 1 requests were not granted automatically"), "{text}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn apply_refuses_a_subscription_that_disagrees_with_the_settings() {
    let dir = std::env::temp_dir().join(format!("spillway-advise-apply-sub-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let settings = dir.join("azure.toml");
    std::fs::write(
        &settings,
        "[azure]\nsubscription_id = \"11111111-2222-3333-4444-555555555555\"\nresource_group = \"rg\"\ncredential = \"static_token\"\ntoken = \"t\"\n",
    )
    .unwrap();
    let out = spillway(&[
        "advise",
        "--problem",
        PROBLEM,
        "--apply",
        "--config",
        settings.to_str().unwrap(),
        "--subscription",
        "sub-b",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "--subscription sub-b differs from the Azure settings' subscription_id 11111111-2222-3333-4444-555555555555"
        ),
        "{err}"
    );
    let scenario = spillway(&["advise", "--scenario", "scenarios/default.toml", "--apply"]);
    assert_eq!(scenario.status.code(), Some(2), "a what-if week is not filed with Azure");
    let _ = std::fs::remove_dir_all(dir);
}

/// `spillway advise --url` against `s`, as its admin.
fn advise(s: &Server, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["advise", "--url", &s.url, "--token", &s.admin];
    args.extend_from_slice(extra);
    spillway(&args)
}

#[tokio::test]
async fn the_live_server_advises_on_its_pending_work_and_refuses_a_bad_max() {
    let dir = temp_dir("advise-live");
    let s = Server::start(&dir, &dir.join("data"), 0, &["--speedup", "60"], &[]);
    let http = reqwest::Client::new();
    let get = |path: String, token: String| {
        let http = http.clone();
        async move {
            let r = http.get(path).bearer_auth(token).send().await.unwrap();
            let status = r.status();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    // The quota is read on the first round.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, cap) = get(format!("{}/v1/capacity", s.url), s.admin.clone()).await;
        if cap["pools"].as_array().is_some_and(|p| !p.is_empty()) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no quota read: {cap}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    // Nothing waits: no quota increase would place more work (exit 0, both outputs).
    let out = advise(&s, &["--output", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["summary"], "no quota increase would place more work");
    assert_eq!(r["source"], "server");
    assert!(r["recommendations"].as_array().unwrap().is_empty());
    let out = advise(&s, &[]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("no quota increase would place more work"));

    // An 8-GPU A100 gang that only eastus2 may run: two NC96 VMs need 192 vCPUs of a family
    // whose limit there is 96 (the bundled scenario's default).
    let spec = serde_json::json!({
        "name": "big", "tenant": "ml", "kind": "training", "gpus": 8, "gpu_models": ["A100-80GB"],
        "sizes": ["Standard_NC96ads_A100_v4"], "regions": ["eastus2"], "spot": "never", "duration_hours": 4.0
    });
    let r = http.post(format!("{}/v1/jobs", s.url)).bearer_auth(&s.admin).json(&spec).send().await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::CREATED);
    let job: Value = r.json().await.unwrap();
    let (st, r) = get(format!("{}/v1/advice?max=2", s.url), s.admin.clone()).await;
    assert_eq!(st, reqwest::StatusCode::OK, "{r}");
    let first = &r["recommendations"][0];
    assert_eq!(first["region"], "eastus2", "{r:#}");
    assert_eq!(first["increases"][0]["pool"], "standardNCADSA100v4Family", "{r:#}");
    assert_eq!(first["increases"][0]["current_limit"], 96);
    assert_eq!(first["increases"][0]["increase_vcpus"], 96);
    assert_eq!(first["buys"]["jobs"][0], job["id"]);
    assert_eq!(r["after"]["waiting_jobs"], 0);
    assert_eq!(r["requests"][0]["body"]["properties"]["limit"]["value"], 192);
    // The CLI shows the same advice as a table.
    let out = advise(&s, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("quota advice (server)"), "{text}");
    assert!(text.contains("eastus2  standardNCADSA100v4Family  96     +96"), "{text}");
    // Any token that may read jobs reads it; another tenant's viewer does not see the job's id.
    let r = http
        .post(format!("{}/v1/tokens", s.url))
        .bearer_auth(&s.admin)
        .json(&serde_json::json!({"role": "viewer", "tenant": "other"}))
        .send()
        .await
        .unwrap();
    let viewer = r.json::<Value>().await.unwrap()["token"].as_str().unwrap().to_string();
    let (st, theirs) = get(format!("{}/v1/advice", s.url), viewer).await;
    assert_eq!(st, reqwest::StatusCode::OK);
    assert_eq!(theirs["recommendations"][0]["increases"][0]["pool"], "standardNCADSA100v4Family");
    assert!(theirs["recommendations"][0]["buys"]["jobs"].as_array().unwrap().is_empty(), "{theirs:#}");

    // A bad `max`: 400 naming it, from the API and the CLI.
    for bad in ["0", "21", "five", "-1"] {
        let (st, e) = get(format!("{}/v1/advice?max={bad}", s.url), s.admin.clone()).await;
        assert_eq!(st, reqwest::StatusCode::BAD_REQUEST, "max={bad}: {e}");
        assert_eq!(e["problems"][0]["field"], "max", "{e}");
    }
    let out = advise(&s, &["--max", "0"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("max"), "{}", String::from_utf8_lossy(&out.stderr));

    // A server on a simulated cloud has no subscription to file with: --apply is refused (409).
    let out = advise(&s, &["--apply"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("drives a simulated cloud"), "{err}");
}

/// Regular A100 quota of 96 vCPUs per region (one NC96 VM) and plenty of everything else, on an
/// emulated Azure that decides quota requests within a second: the shared fast scenario with the
/// family pools tightened.
fn tight_a100_cloud() -> String {
    let tight = FAST_SCENARIO.replace("family = 20000", "family = 96");
    assert_ne!(tight, FAST_SCENARIO, "the fast scenario's family quota moved");
    tight
}

/// The A100 family's limit in westus3 as the emulated subscription's Quota API reports it.
async fn emulated_a100_limit(emu: &Emulator) -> u64 {
    let url = format!(
        "{}/subscriptions/00000000-0000-0000-0000-000000000000/providers/Microsoft.Compute/locations/westus3/\
         providers/Microsoft.Quota/quotas/standardNCADSA100v4Family?api-version=2025-09-01",
        emu.url
    );
    let v: Value =
        reqwest::Client::new().get(url).bearer_auth(EMULATOR_TOKEN).send().await.unwrap().json().await.unwrap();
    v["properties"]["limit"]["value"].as_u64().unwrap_or_else(|| panic!("{v}"))
}

/// The first `n` events of `kinds` in the server's log (admin), waiting up to 30 s for them.
async fn events(s: &Server, kinds: &str, n: usize) -> Vec<Value> {
    let url = format!("{}/v1/events?from=0&kinds={kinds}", s.url);
    let mut resp = reqwest::Client::new().get(url).bearer_auth(&s.admin).send().await.unwrap();
    assert_eq!(resp.status(), reqwest::StatusCode::OK);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let (mut buf, mut out) = (String::new(), Vec::new());
    while out.len() < n {
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let data: String = block.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).collect();
            if !data.is_empty() {
                out.push(serde_json::from_str(&data).unwrap());
            }
        }
        if out.len() >= n {
            break;
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let chunk = tokio::time::timeout(left, resp.chunk())
            .await
            .unwrap_or_else(|_| panic!("only {} of {n} {kinds} events: {out:#?}", out.len()))
            .unwrap();
        buf.push_str(&String::from_utf8_lossy(&chunk.expect("stream open")));
    }
    out
}

/// `GET /v1/advice/requests/{id}` until the request is no longer `submitted` (30 s at most).
async fn request_end(s: &Server, id: &str) -> Value {
    let http = reqwest::Client::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let r = http.get(format!("{}/v1/advice/requests/{id}", s.url)).bearer_auth(&s.admin).send().await.unwrap();
        assert_eq!(r.status(), reqwest::StatusCode::OK);
        let v: Value = r.json().await.unwrap();
        if v["state"] != "submitted" {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "still submitted: {v:#}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Starts an emulated Azure whose quota requests take `seconds` to decide, a server driving it
/// (on `data`), and waits for the server's first quota read.
async fn azure_server(dir: &std::path::Path, seconds: &str) -> (Emulator, Server) {
    let emu = Emulator::start(dir, &tight_a100_cloud(), &["--quota-request-seconds", seconds]);
    let s = start_azure_server(dir, &emu, 0).await;
    (emu, s)
}

async fn start_azure_server(dir: &std::path::Path, emu: &Emulator, run: usize) -> Server {
    let config = emu.azure_config(dir, "");
    let s = Server::start(
        dir,
        &dir.join("data"),
        run,
        &["--cloud", "azure", "--config", config.to_str().unwrap(), "--rate-limit", "0"],
        &[],
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let cap = admin_get(&s, "/v1/capacity").await;
        if cap["pools"].as_array().is_some_and(|p| !p.is_empty()) {
            return s;
        }
        assert!(std::time::Instant::now() < deadline, "no quota read: {cap}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// `spillway advise --url --apply` against a server driving (emulated) Azure: a submitter's run
/// is refused (403) and files nothing; the admin's run has the server file the live advice with
/// the Quota API, one request per call, and follows it until Azure's answer, which the
/// subscription shows. The server answers each filing at once (202, `submitted`), drives it in
/// the background, and records who filed what and how it ended as events; Azure's refusal (an
/// escalation) is a `failed` request carrying Azure's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_files_the_live_advice_with_azure_for_an_admin_only() {
    let dir = temp_dir("advise-live-apply");
    // Azure takes 2 s to decide each request: the server must not wait for it to answer.
    let (emu, s) = azure_server(&dir, "2").await;
    let http = reqwest::Client::new();
    let get = |path: &str| {
        let req = http.get(format!("{}{path}", s.url)).bearer_auth(&s.admin);
        async move { req.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    // Two NC96 VMs in westus3: 192 vCPUs of a family whose limit is 96.
    let spec = serde_json::json!({
        "name": "big", "tenant": "ml", "kind": "training", "gpus": 8, "gpu_models": ["A100-80GB"],
        "sizes": ["Standard_NC96ads_A100_v4"], "regions": ["westus3"], "spot": "never", "duration_hours": 4.0
    });
    let r = http.post(format!("{}/v1/jobs", s.url)).bearer_auth(&s.admin).json(&spec).send().await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::CREATED);
    let advice = get("/v1/advice").await;
    assert_eq!(advice["requests"][0]["region"], "westus3", "{advice:#}");
    assert_eq!(advice["requests"][0]["increase_vcpus"], 96, "{advice:#}");
    assert_eq!(emulated_a100_limit(&emu).await, 96);

    // A submitter may read the advice but not file it: 403, from the API and through the CLI.
    let r = http
        .post(format!("{}/v1/tokens", s.url))
        .bearer_auth(&s.admin)
        .json(&serde_json::json!({"role": "submitter", "tenant": "ml"}))
        .send()
        .await
        .unwrap();
    let submitter = r.json::<Value>().await.unwrap()["token"].as_str().unwrap().to_string();
    let filing = serde_json::json!({"region": "westus3", "resource_name": "standardNCADSA100v4Family",
                                    "increase_vcpus": 96});
    let post = |token: &str, body: &Value| {
        http.post(format!("{}/v1/advice/requests", s.url)).bearer_auth(token).json(body).send()
    };
    let r = post(&submitter, &filing).await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::FORBIDDEN);
    let run = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || spillway(&args.iter().map(String::as_str).collect::<Vec<_>>()))
    };
    let as_submitter = ["advise", "--url", &s.url, "--token", &submitter, "--apply"].map(String::from).to_vec();
    let out = run(as_submitter).await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("not allowed: only an admin token may file quota requests"), "{err}");
    assert_eq!(emulated_a100_limit(&emu).await, 96, "nothing was filed");
    // A tenant-bound token does not read the cluster's requests either.
    let r = http.get(format!("{}/v1/advice/requests", s.url)).bearer_auth(&submitter).send().await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::FORBIDDEN);

    // A bad request names its fields (422), before anything reaches Azure.
    let bad = serde_json::json!({"region": "mars-1", "resource_name": "standardWarpFamily", "increase_vcpus": 0});
    let r = post(&s.admin, &bad).await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::UNPROCESSABLE_ENTITY);
    let e: Value = r.json().await.unwrap();
    let fields: Vec<&str> = e["problems"].as_array().unwrap().iter().filter_map(|p| p["field"].as_str()).collect();
    assert_eq!(fields, ["region", "resource_name", "increase_vcpus"], "{e:#}");

    // The admin's run: the advised +96 filed over the limit Azure reports, followed until Azure
    // granted it, and in effect.
    let as_admin =
        ["advise", "--url", &s.url, "--token", &s.admin, "--apply", "--output", "json"].map(String::from).to_vec();
    let out = run(as_admin).await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.matches("filing: ").count(), 1, "one request per pool: {err}");
    assert!(err.contains("filed as q-"), "{err}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
    let applied = r["applied"].as_array().unwrap();
    assert_eq!(applied.len(), 1, "{r:#}");
    assert_eq!(applied[0]["region"], "westus3");
    assert_eq!(applied[0]["resource_name"], "standardNCADSA100v4Family");
    assert_eq!((applied[0]["limit_before"].as_u64(), applied[0]["requested_limit"].as_u64()), (Some(96), Some(192)));
    assert_eq!(applied[0]["state"], "Succeeded", "{r:#}");
    assert_eq!(applied[0]["limit_after"], 192);
    assert_eq!(emulated_a100_limit(&emu).await, 192, "the subscription's limit was raised");

    // Filed directly: answered at once, 202 and `submitted`, while Azure has not decided yet.
    // Azure grants at most 1,000 vCPUs automatically: +2,000 is escalated, and the request fails
    // with Azure's words.
    let big = serde_json::json!({"region": "westus3", "resource_name": "standardNCADSA100v4Family",
                                 "increase_vcpus": 2000});
    let r = post(&s.admin, &big).await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::ACCEPTED);
    let location = r.headers()["location"].to_str().unwrap().to_string();
    let filed: Value = r.json().await.unwrap();
    assert_eq!(filed["state"], "submitted", "{filed:#}");
    let id = filed["id"].as_str().unwrap().to_string();
    assert_eq!(location, format!("/v1/advice/requests/{id}"));
    assert_eq!((filed["region"].as_str(), filed["increase_vcpus"].as_u64()), (Some("westus3"), Some(2000)));
    assert!(filed["requested_by"].as_str().unwrap().starts_with("admin token "), "{filed:#}");
    let ended = request_end(&s, &id).await;
    assert_eq!(ended["state"], "failed", "{ended:#}");
    assert_eq!(ended["azure_state"], "Escalated", "{ended:#}");
    assert!(ended["error"].as_str().unwrap().contains("support ticket"), "{ended:#}");
    assert_eq!((ended["limit_before"].as_u64(), ended["new_limit"].as_u64()), (Some(192), Some(2192)));
    assert_eq!(emulated_a100_limit(&emu).await, 192, "nothing changed");
    // Both requests are listed, newest first.
    let list = get("/v1/advice/requests").await;
    let states: Vec<&str> = list.as_array().unwrap().iter().filter_map(|r| r["state"].as_str()).collect();
    assert_eq!(states, ["failed", "granted"], "{list:#}");

    // Every filing, grant and failure is an event: who, what, when.
    let filed_events = events(&s, "quota_requested", 2).await;
    for e in &filed_events {
        assert!(e["message"].as_str().unwrap().contains("filed by admin token"), "{e:#}");
        assert!(e["data"]["requested_by"].as_str().unwrap().starts_with("admin token "), "{e:#}");
        assert!(e["at_ms"].as_i64().unwrap() > 0);
        assert!(e["job_id"].is_null() && e["tenant"].is_null(), "a cluster event: {e:#}");
    }
    let granted = events(&s, "quota_granted", 1).await;
    assert!(granted[0]["message"].as_str().unwrap().contains("96 -> 192 vCPUs"), "{granted:#?}");
    let failed = events(&s, "quota_request_failed", 1).await;
    assert_eq!(failed[0]["data"]["id"], id.as_str());
    assert!(failed[0]["message"].as_str().unwrap().contains("support ticket"), "{failed:#?}");
}

/// A server that stops while Azure decides a request: the next one, leading the same store,
/// resumes it (the new limit was recorded before the request was sent, so it is asked for again,
/// not raised twice) and it ends granted, the limit raised once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_left_submitted_by_a_stopped_server_is_resumed_by_the_next_leader() {
    let dir = temp_dir("advise-request-restart");
    // Azure takes 4 s to decide: the server is killed meanwhile.
    let (emu, mut s) = azure_server(&dir, "4").await;
    let filing = serde_json::json!({"region": "westus3", "resource_name": "standardNCADSA100v4Family",
                                    "increase_vcpus": 96});
    let r = reqwest::Client::new()
        .post(format!("{}/v1/advice/requests", s.url))
        .bearer_auth(&s.admin)
        .json(&filing)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::ACCEPTED);
    let id = r.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string();
    // Killed once the request is filed with Azure (its new limit recorded), before Azure decides.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let v = admin_get(&s, &format!("/v1/advice/requests/{id}")).await;
        assert_eq!(v["state"], "submitted", "decided before the kill: {v:#}");
        if v["new_limit"].as_u64().is_some() {
            assert_eq!(v["new_limit"], 192);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{v:#}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    s.kill();
    let s = start_azure_server(&dir, &emu, 1).await;
    let ended = request_end(&s, &id).await;
    assert_eq!(ended["state"], "granted", "{ended:#}");
    assert_eq!(ended["new_limit"], 192);
    assert_eq!(emulated_a100_limit(&emu).await, 192, "raised once, not twice");
    let granted = events(&s, "quota_granted", 1).await;
    assert_eq!(granted[0]["data"]["id"], id.as_str());
}
