//! End to end, against the built binary and the simulated cloud `spillway serve` runs by default:
//! jobs that say what to run are run by real `spillway agent` processes (one per simulated VM),
//! their output is in `spillway logs`, and their exit codes end them.

mod e2e_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use e2e_support::{Server, admin_get, cli, client, events_of, job_detail, temp_dir, text, wait_state};
use reqwest::StatusCode;
use serde_json::{Value, json};

fn start(dir: &Path, extra: &[&str]) -> Server {
    let mut args = vec!["--speedup", "3600"];
    args.extend_from_slice(extra);
    Server::start(dir, &dir.join("data"), 0, &args, &[])
}

async fn submit(s: &Server, spec: &Value) -> String {
    let resp = client().post(format!("{}/v1/jobs", s.url)).bearer_auth(&s.admin).json(spec).send().await.unwrap();
    let status = resp.status();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body:#}");
    body["id"].as_str().unwrap().to_string()
}

/// A job on one-GPU T4 VMs, which the bundled scenario places at once.
fn job(name: &str, gpus: u32, run: &str) -> Value {
    json!({"name": name, "kind": "training", "gpus": gpus, "sizes": ["Standard_NC4as_T4_v3"], "spot": "never", "run": run})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_two_vm_gang_runs_with_its_ranks_and_both_ranks_lines_are_in_the_logs() {
    let dir = temp_dir("agents-gang");
    let s = start(&dir, &[]);
    let run = "echo \"rank $SPILLWAY_NODE_RANK of $SPILLWAY_NUM_NODES\"\n\
               echo \"ips $(echo \"$SPILLWAY_NODE_IPS\" | tr '\\n' ' ')master $MASTER_ADDR:$MASTER_PORT\"";
    let id = submit(&s, &job("gang", 2, run)).await;
    let d = wait_state(&s, &id, &["succeeded", "failed"], 90).await;
    assert_eq!(d["job"]["state"], "succeeded", "{d:#}");
    assert!(d["job"]["end_reason"].as_str().unwrap().contains("every rank"), "{d:#}");
    let nodes = d["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{d:#}");
    let ips: Vec<&str> = nodes.iter().map(|n| n["private_ip"].as_str().unwrap()).collect();
    assert_ne!(ips[0], ips[1], "each VM has its own address");
    for n in nodes {
        assert_eq!(n["exit_code"], 0, "{n:#}");
        assert!(n.get("gpu_utilization").is_none(), "no GPUs here: absent, not zeros: {n:#}");
    }
    let out = cli(&s, &dir, &["logs", &id]);
    let logs = text(&out);
    assert!(out.status.success(), "{logs}");
    let want_ips = format!("ips {} {} master {}:29500", ips[0], ips[1], ips[0]);
    for rank in 0..2 {
        assert!(logs.contains(&format!("[a1 r{rank}] rank {rank} of 2")), "{logs}");
        assert!(logs.contains(&format!("[a1 r{rank}] {want_ips}")), "{want_ips} missing:\n{logs}");
    }
    let one = text(&cli(&s, &dir, &["logs", &id, "--rank", "1", "--attempt", "1"]));
    assert!(one.contains("rank 1 of 2") && !one.contains("rank 0 of 2"), "{one}");
    assert!(!one.contains("[a1 r1]"), "one stream needs no prefix: {one}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_command_fails_the_job_with_its_exit_code_and_last_lines() {
    let dir = temp_dir("agents-fail");
    let s = start(&dir, &[]);
    let id = submit(&s, &job("fails", 1, "echo loading data; echo 'KeyError: shard-7' >&2; exit 3")).await;
    let d = wait_state(&s, &id, &["succeeded", "failed"], 60).await;
    assert_eq!(d["job"]["state"], "failed", "{d:#}");
    assert_eq!(d["job"]["end_reason"], "rank 0's run exited with code 3", "{d:#}");
    let failed = events_of(&d, "failed");
    assert!(failed[0].contains("KeyError: shard-7") && failed[0].contains("loading data"), "{failed:?}");
    assert_eq!(d["nodes"][0]["exit_code"], 3);
    let status = text(&cli(&s, &dir, &["status", &id]));
    assert!(status.contains("exited with code 3"), "{status}");
    assert!(status.contains("rank 0") && status.contains("exit 3"), "per-rank exit code in status: {status}");
    // A job without `run` only holds capacity, and says so.
    let cap = submit(&s, &json!({"name": "cap", "kind": "batch", "gpus": 1, "sizes": ["Standard_NC4as_T4_v3"]})).await;
    let status = text(&cli(&s, &dir, &["status", &cap]));
    assert!(status.contains("capacity-only"), "{status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn max_restarts_one_runs_a_failing_command_again_in_place() {
    let dir = temp_dir("agents-restart");
    let s = start(&dir, &[]);
    let mut spec = job("retry", 1, "echo \"start $SPILLWAY_RESTART\"; [ \"$SPILLWAY_RESTART\" != 0 ] || exit 1");
    spec["max_restarts"] = json!(1);
    let id = submit(&s, &spec).await;
    let d = wait_state(&s, &id, &["succeeded", "failed"], 60).await;
    assert_eq!(d["job"]["state"], "succeeded", "{d:#}");
    assert_eq!(d["job"]["attempts"], 1, "restarted on the same VMs: {d:#}");
    let restarted = events_of(&d, "restarted");
    assert_eq!(restarted.len(), 1, "{d:#}");
    assert!(restarted[0].contains("exited with code 1"), "{restarted:?}");
    let logs = text(&cli(&s, &dir, &["logs", &id]));
    assert!(logs.contains("start 0") && logs.contains("start 1"), "{logs}");
    // Once is all: a command that always fails fails the job after one restart.
    let mut spec = job("retry-fail", 1, "exit 2");
    spec["max_restarts"] = json!(1);
    let id = submit(&s, &spec).await;
    let d = wait_state(&s, &id, &["succeeded", "failed"], 60).await;
    assert_eq!(d["job"]["state"], "failed");
    assert_eq!(d["job"]["end_reason"], "rank 0's run exited with code 2 (after 1 restart)", "{d:#}");
}

/// The credential an agent of the job's attempt was given (from its simulated VM's sandbox).
fn credential_of(dir: &Path, job: &str, attempt: u32) -> String {
    let fleet = format!("spw-{job}-a{attempt}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let fleet_dir = dir.join("data/sim-vms").join(&fleet);
        let found: Option<PathBuf> = std::fs::read_dir(&fleet_dir)
            .ok()
            .and_then(|mut d| d.find_map(|e| e.ok().map(|e| e.path().join("agent.json"))))
            .filter(|p| p.exists());
        if let Some(p) = found
            && let Ok(text) = std::fs::read_to_string(&p)
            && let Ok(v) = serde_json::from_str::<Value>(&text)
        {
            return v["credential"].as_str().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "no agent settings under {}", fleet_dir.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_credential_reports_on_its_own_attempt_only_and_ends_with_it() {
    let dir = temp_dir("agents-creds");
    let s = start(&dir, &[]);
    let a = submit(&s, &job("long-a", 1, "sleep 60")).await;
    let b = submit(&s, &job("long-b", 1, "sleep 60")).await;
    wait_state(&s, &a, &["running"], 60).await;
    wait_state(&s, &b, &["running"], 60).await;
    let cred_a = credential_of(&dir, &a, 1);
    let http = client();
    let work = |job: &str| format!("{}/v1/agent/jobs/{job}/attempts/1/ranks/0/work", s.url);
    // The settings are written before the agent registers: wait for the rank to exist.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let own = http.get(work(&a)).bearer_auth(&cred_a).send().await.unwrap();
        if own.status() == StatusCode::OK {
            break;
        }
        assert_eq!(own.status(), StatusCode::NOT_FOUND, "{}", own.text().await.unwrap());
        assert!(Instant::now() < deadline, "the agent never registered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let other = http.get(work(&b)).bearer_auth(&cred_a).send().await.unwrap();
    assert_eq!(other.status(), StatusCode::NOT_FOUND, "another attempt's credential: not found");
    let garbage = http.get(work(&a)).bearer_auth("spwa.nope.1.00").send().await.unwrap();
    assert_eq!(garbage.status(), StatusCode::UNAUTHORIZED);
    let none = http.get(work(&a)).send().await.unwrap();
    assert_eq!(none.status(), StatusCode::UNAUTHORIZED);
    let admin_on_agent = http.get(work(&a)).bearer_auth(&s.admin).send().await.unwrap();
    assert_eq!(admin_on_agent.status(), StatusCode::UNAUTHORIZED, "a user token is no agent credential");
    let agent_on_user = http.get(format!("{}/v1/jobs/{a}", s.url)).bearer_auth(&cred_a).send().await.unwrap();
    assert_eq!(agent_on_user.status(), StatusCode::UNAUTHORIZED, "an agent credential reads no user route");
    let forged = cred_a.replacen(&format!("{a}.1."), &format!("{b}.1."), 1);
    let forged = http.get(work(&b)).bearer_auth(&forged).send().await.unwrap();
    assert_eq!(forged.status(), StatusCode::UNAUTHORIZED, "the MAC does not follow an edited attempt");
    // The attempt ends with the job: its credential stops working.
    let cancel = http.delete(format!("{}/v1/jobs/{a}", s.url)).bearer_auth(&s.admin).send().await.unwrap();
    assert_eq!(cancel.status(), StatusCode::OK);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = http.get(work(&a)).bearer_auth(&cred_a).send().await.unwrap();
        if r.status() == StatusCode::UNAUTHORIZED {
            let body: Value = r.json().await.unwrap();
            assert!(body["error"].as_str().unwrap().contains("has ended"), "{body}");
            break;
        }
        assert!(Instant::now() < deadline, "the ended attempt's credential still works");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let logs = s.logs();
    assert!(logs.contains("agent call refused"), "refusals are logged");
    assert!(!logs.contains(&cred_a), "the credential is never logged");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_log_flood_is_cut_and_capped_and_the_job_still_ends_by_its_exit_code() {
    let dir = temp_dir("agents-flood");
    let config = dir.join("spillway.toml");
    std::fs::write(&config, "[agent]\nlog_bytes_per_rank = 65536\n").unwrap();
    let s = start(&dir, &["--config", config.to_str().unwrap()]);
    let run = "head -c 100000 /dev/zero | tr '\\0' x; echo; i=0; while [ $i -lt 20000 ]; do echo \"line $i\"; \
               i=$((i+1)); done; echo last-line";
    let id = submit(&s, &job("flood", 1, run)).await;
    let d = wait_state(&s, &id, &["succeeded", "failed"], 90).await;
    assert_eq!(d["job"]["state"], "succeeded", "{d:#}");
    assert_eq!(d["nodes"][0]["log_truncated"], true, "{d:#}");
    assert!(d["nodes"][0]["log_bytes"].as_u64().unwrap() <= 65536, "{d:#}");
    let page = admin_get(&s, &format!("/v1/jobs/{id}/logs")).await;
    let lines: Vec<&str> = page["lines"].as_array().unwrap().iter().map(|l| l["text"].as_str().unwrap()).collect();
    let long = lines.iter().find(|l| l.starts_with("xxxx")).expect("the long line is kept, cut");
    assert!(long.ends_with("more bytes]") && long.len() < 20_000, "{}", &long[long.len() - 40..]);
    assert!(lines.iter().any(|l| l.contains("reached its cap")), "a truncated marker");
    assert!(!lines.contains(&"last-line"), "nothing is stored beyond the cap");
}

#[tokio::test(flavor = "multi_thread")]
async fn logs_follow_streams_the_lines_until_the_job_ends() {
    let dir = temp_dir("agents-follow");
    let s = start(&dir, &[]);
    let id = submit(&s, &job("ticks", 1, "for i in 1 2 3 4 5 6; do echo tick-$i; sleep 0.2; done")).await;
    let out = tokio::task::spawn_blocking({
        let (url, data, id) = (s.url.clone(), dir.join("data"), id.clone());
        move || {
            Command::new(env!("CARGO_BIN_EXE_spillway"))
                .args(["logs", &id, "--follow", "--rank", "0", "--attempt", "1"])
                .env("SPILLWAY_URL", url)
                .env("SPILLWAY_DATA_DIR", data)
                .output()
                .unwrap()
        }
    });
    let out = tokio::time::timeout(Duration::from_secs(90), out).await.expect("--follow ends with the job").unwrap();
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    let ticks: Vec<&str> = all.lines().filter(|l| l.starts_with("tick-")).collect();
    assert_eq!(ticks, ["tick-1", "tick-2", "tick-3", "tick-4", "tick-5", "tick-6"], "each line once, in order:\n{all}");
    assert!(all.contains("succeeded"), "{all}");
}

/// Two regions: spot T4s in eastus only (one VM), regular T4s in westus3 only.
const EVICTION_SCENARIO: &str = r#"
[cloud]
regions = ["eastus", "westus3"]
sizes = ["Standard_NC4as_T4_v3"]
seed = 3
provisioning_seconds = 60
eviction_reclaim_seconds = 36000
poll_after_seconds = 5
default_capacity_vms = 0
default_spot_eviction_rate_per_hour = 0.0
[cloud.default_quota]
cores = 100
low_priority_cores = 100
family = 100
# Spot only in eastus and regular only in westus3, by quota, which Azure shows: the simulated cloud,
# like Azure, hides where there is room, so without it a placement may first be tried (and refused)
# where the capacity below has none.
[[cloud.quota]]
region = "westus3"
low_priority_cores = 0
[[cloud.quota]]
region = "eastus"
cores = 0
[[cloud.capacity]]
region = "eastus"
size = "Standard_NC4as_T4_v3"
priority = "spot"
vms = 1
[[cloud.capacity]]
region = "westus3"
size = "Standard_NC4as_T4_v3"
priority = "regular"
vms = 2
"#;

/// A loop that checkpoints its step, says when SIGTERM reaches it, and resumes from the checkpoint.
const RESUMABLE: &str = r#"
CK="$SPILLWAY_CHECKPOINT_DIR/step"
i=0
if [ -f "$CK" ]; then i=$(cat "$CK"); echo "resumed from step $i in $SPILLWAY_REGION (start $SPILLWAY_RESTART)"; fi
trap 'echo "SIGTERM at step $i"; echo "$i" > "$CK"; exit 143' TERM
while [ "$i" -lt 40 ]; do i=$((i+1)); echo "$i" > "$CK"; echo "step $i"; sleep 0.1; done
echo "finished at step $i in $SPILLWAY_REGION"
"#;

#[tokio::test(flavor = "multi_thread")]
async fn an_eviction_mid_run_delivers_sigterm_first_and_the_work_resumes_elsewhere_from_its_checkpoint() {
    let dir = temp_dir("agents-evict");
    let scenario = dir.join("evict.toml");
    std::fs::write(&scenario, EVICTION_SCENARIO).unwrap();
    // 60x: the 180 simulated seconds of notice are 3 real seconds.
    let s =
        Server::start(&dir, &dir.join("data"), 0, &["--speedup", "60", "--scenario", scenario.to_str().unwrap()], &[]);
    let vms = vms_url(&s);
    let spec = json!({"name": "resumable", "kind": "training", "gpus": 1, "sizes": ["Standard_NC4as_T4_v3"],
                      "spot": "preferred", "run": RESUMABLE});
    let id = submit(&s, &spec).await;
    // Wait for the work to be under way on the spot VM.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let page: Value = client()
            .get(format!("{}/v1/jobs/{id}/logs?attempt=1", s.url))
            .bearer_auth(&s.admin)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if page["lines"].as_array().unwrap().iter().any(|l| l["text"] == "step 3") {
            break;
        }
        assert!(Instant::now() < deadline, "the work did not start: {}", s.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let d = job_detail(&s, &id).await;
    assert_eq!(d["attempts"][0]["priority"], "spot", "{d:#}");
    let first_region = d["attempts"][0]["region"].as_str().unwrap().to_string();
    let evict =
        client().post(format!("{vms}/control/fleets/spw-{id}-a1/evict?notice_seconds=180")).send().await.unwrap();
    assert_eq!(evict.status(), StatusCode::ACCEPTED, "{}", evict.text().await.unwrap());
    let d = wait_state(&s, &id, &["succeeded", "failed"], 120).await;
    assert_eq!(d["job"]["state"], "succeeded", "{d:#}");
    assert!(!events_of(&d, "preemption_notice").is_empty(), "{d:#}");
    let attempts = d["attempts"].as_array().unwrap();
    assert!(attempts.len() >= 2, "{d:#}");
    let last = attempts.last().unwrap();
    assert_ne!(last["region"].as_str().unwrap(), first_region, "resumed elsewhere: {d:#}");
    let logs = text(&cli(&s, &dir, &["logs", &id]));
    let sigterm = logs.lines().find(|l| l.contains("SIGTERM at step")).unwrap_or_else(|| panic!("{logs}"));
    assert!(sigterm.starts_with("[a1 r0]"), "the first attempt's work saw SIGTERM: {logs}");
    let step: u32 = sigterm.rsplit(' ').next().unwrap().parse().unwrap();
    let resumed = format!("resumed from step {step} in {}", last["region"].as_str().unwrap());
    assert!(logs.contains(&resumed), "{resumed} missing:\n{logs}");
    assert!(logs.contains("finished at step 40"), "{logs}");
}

/// Where `serve` says its simulated VMs are controlled (the line may come just after the one
/// `Server::start` waits for: a loaded machine showed the gap).
fn vms_url(s: &Server) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = s.logs().lines().find_map(|l| {
            l.strip_prefix("simulated VMs: ").and_then(|r| r.split_whitespace().next()).map(str::to_string)
        });
        if let Some(url) = found {
            return url;
        }
        assert!(Instant::now() < deadline, "serve never printed where its simulated VMs are controlled");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until a line of the job's attempt `attempt` reads `text`.
async fn wait_line(s: &Server, id: &str, attempt: u32, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let page: Value = client()
            .get(format!("{}/v1/jobs/{id}/logs?attempt={attempt}", s.url))
            .bearer_auth(&s.admin)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if page["lines"].as_array().unwrap().iter().any(|l| l["text"] == text) {
            return;
        }
        assert!(Instant::now() < deadline, "no line {text:?} from attempt {attempt}: {}", s.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_notice_starts_the_replacement_at_once_and_the_old_placement_goes_once_it_runs() {
    let dir = temp_dir("agents-notice");
    let scenario = dir.join("evict.toml");
    std::fs::write(&scenario, EVICTION_SCENARIO).unwrap();
    let s =
        Server::start(&dir, &dir.join("data"), 0, &["--speedup", "60", "--scenario", scenario.to_str().unwrap()], &[]);
    let vms = vms_url(&s);
    let spec = json!({"name": "resumable", "kind": "training", "gpus": 1, "sizes": ["Standard_NC4as_T4_v3"],
                      "spot": "preferred", "run": RESUMABLE});
    let id = submit(&s, &spec).await;
    wait_line(&s, &id, 1, "step 3").await;
    // Ten simulated hours of notice (ten real minutes): the job must not wait for the eviction.
    let evict =
        client().post(format!("{vms}/control/fleets/spw-{id}-a1/evict?notice_seconds=36000")).send().await.unwrap();
    assert_eq!(evict.status(), StatusCode::ACCEPTED, "{}", evict.text().await.unwrap());
    let d = wait_state(&s, &id, &["succeeded", "failed"], 90).await;
    assert_eq!(d["job"]["state"], "succeeded", "{d:#}");
    let attempts = d["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{d:#}");
    assert_eq!(attempts[0]["state"], "replaced", "the noticed placement was retired, not lost: {d:#}");
    assert_eq!(attempts[1]["region"], "westus3", "{d:#}");
    assert!(!events_of(&d, "preemption_notice").is_empty(), "{d:#}");
    assert!(events_of(&d, "evicted").is_empty(), "the replacement came before any eviction: {d:#}");
    let logs = text(&cli(&s, &dir, &["logs", &id]));
    assert!(logs.contains("[a1 r0] SIGTERM at step"), "{logs}");
    assert!(logs.contains("finished at step 40 in westus3"), "{logs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vm_whose_agent_goes_silent_is_lost_and_the_work_moves_without_using_a_restart() {
    let dir = temp_dir("agents-lost");
    let config = dir.join("spillway.toml");
    std::fs::write(&config, "[agent]\nheartbeat_interval_secs = 0.2\nheartbeat_timeout_secs = 1\n").unwrap();
    let s = start(&dir, &["--config", config.to_str().unwrap()]);
    let vms = vms_url(&s);
    // max_restarts is 0: a failing command would end the job, a lost VM must not.
    let run = "echo \"attempt $SPILLWAY_ATTEMPT start $SPILLWAY_RESTART\"\n\
               if [ \"$SPILLWAY_ATTEMPT\" = 1 ]; then sleep 300; fi\necho done";
    let id = submit(&s, &job("lost", 1, run)).await;
    wait_line(&s, &id, 1, "attempt 1 start 0").await;
    let listed: Value = client().get(format!("{vms}/control/vms")).send().await.unwrap().json().await.unwrap();
    let fleet = format!("spw-{id}-a1");
    let pid = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["fleet"] == fleet.as_str())
        .and_then(|v| v["pid"].as_u64())
        .unwrap_or_else(|| panic!("no agent process for {fleet}: {listed:#}"));
    // The agent dies; the cloud still counts its VM as running.
    let killed = Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap();
    assert!(killed.success());
    let d = wait_state(&s, &id, &["succeeded", "failed"], 60).await;
    assert_eq!(d["job"]["state"], "succeeded", "{d:#}");
    assert_eq!(events_of(&d, "vm_lost").len(), 1, "{d:#}");
    assert!(events_of(&d, "restarted").is_empty(), "{d:#}");
    let attempts = d["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{d:#}");
    assert_eq!(attempts[0]["state"], "replaced", "{d:#}");
    let logs = text(&cli(&s, &dir, &["logs", &id]));
    assert!(logs.contains("[a2 r0] attempt 2 start 1"), "a new start (SPILLWAY_RESTART counts it): {logs}");
    assert!(logs.contains("[a2 r0] done"), "{logs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn gpu_telemetry_reaches_metrics_and_the_job_detail_and_idle_gpus_stop_the_job() {
    let dir = temp_dir("agents-gpu");
    // A stand-in for the driver's nvidia-smi: one T4 at 3 % utilisation.
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let smi = bin.join("nvidia-smi");
    std::fs::write(&smi, "#!/bin/sh\necho '0, Tesla T4, 3, 1200, 15360'\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let config = dir.join("spillway.toml");
    std::fs::write(&config, "[agent]\nheartbeat_interval_secs = 0.2\n").unwrap();
    let s = Server::start(
        &dir,
        &dir.join("data"),
        0,
        &["--speedup", "60", "--config", config.to_str().unwrap()],
        &[("PATH", path.as_str())],
    );
    let mut spec = job("idle", 1, "sleep 120");
    spec["idle_minutes"] = json!(2);
    spec["on_idle"] = json!("stop");
    let id = submit(&s, &spec).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let metrics = client()
            .get(format!("{}/metrics", s.url))
            .bearer_auth(&s.admin)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let series = metrics.lines().find(|l| {
            l.starts_with("spillway_gpu_utilization_percent{")
                && l.contains(&format!("job=\"{id}\""))
                && l.contains("gpu=\"0\"")
        });
        if let Some(line) = series {
            assert!(line.ends_with(" 3.0") || line.ends_with(" 3"), "{line}");
            break;
        }
        assert!(Instant::now() < deadline, "no GPU series for {id}:\n{metrics}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let d = job_detail(&s, &id).await;
    let node = &d["nodes"][0];
    assert_eq!(node["gpus"][0]["name"], "Tesla T4", "{node:#}");
    assert_eq!(node["gpu_utilization"][0]["utilization_percent"], 3.0, "{node:#}");
    let d = wait_state(&s, &id, &["cancelled", "succeeded", "failed"], 60).await;
    assert_eq!(d["job"]["state"], "cancelled", "{d:#}");
    assert!(d["job"]["end_reason"].as_str().unwrap().contains("idle"), "{d:#}");
    assert_eq!(events_of(&d, "idle").len(), 1, "{d:#}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_image_without_a_container_runtime_fails_the_attempt_with_the_reason() {
    let dir = temp_dir("agents-image");
    // A PATH with a shell and no docker or podman.
    let s = Server::start(&dir, &dir.join("data"), 0, &["--speedup", "3600"], &[("PATH", "/usr/bin:/bin")]);
    let mut spec = job("containerised", 1, "python train.py");
    spec["image"] = json!("ghcr.io/example/train:1.4");
    let id = submit(&s, &spec).await;
    let d = wait_state(&s, &id, &["failed", "succeeded"], 60).await;
    assert_eq!(d["job"]["state"], "failed", "{d:#}");
    let reason = d["job"]["end_reason"].as_str().unwrap();
    assert!(reason.contains("could not start") && reason.contains("container runtime"), "{reason}");
}

/// T4s in two regions, by quota (which Azure shows): spot only in eastus, room for 4 VMs; regular
/// only in westus3, room for 1.
const ELASTIC_SCENARIO: &str = r#"
[cloud]
regions = ["eastus", "westus3"]
sizes = ["Standard_NC4as_T4_v3"]
seed = 5
provisioning_seconds = 60
eviction_reclaim_seconds = 36000
poll_after_seconds = 5
default_capacity_vms = 8
default_spot_eviction_rate_per_hour = 0.0
[cloud.default_quota]
cores = 100
low_priority_cores = 100
family = 100
[[cloud.quota]]
region = "eastus"
cores = 0
low_priority_cores = 16
[[cloud.quota]]
region = "westus3"
cores = 4
low_priority_cores = 0
"#;

/// The sharding of `examples/batch-inference-spot-a10.toml` (each rank walks the shards
/// `rank, rank + N, …` of 32), without its per-shard sleep. A world smaller than the job's five VMs
/// stands for long work: it waits (until the world changes and stops it), so the growth lands
/// mid-run whatever the machine's speed.
const SHARDS: &str = r#"
if [ "$SPILLWAY_NUM_NODES" -lt 5 ]; then echo "world of $SPILLWAY_NUM_NODES: working"; sleep 300; fi
for shard in $(seq "$SPILLWAY_NODE_RANK" "$SPILLWAY_NUM_NODES" 31); do
  echo "embedding shard $shard of 32"
done
echo "rank $SPILLWAY_NODE_RANK of $SPILLWAY_NUM_NODES done"
"#;

/// Every stored log line of a job: (attempt, rank, restart, text).
async fn all_lines(s: &Server, id: &str) -> Vec<(u64, u64, u64, String)> {
    let mut out = Vec::new();
    let mut from = "0".to_string();
    loop {
        let page = admin_get(s, &format!("/v1/jobs/{id}/logs?from={from}")).await;
        for l in page["lines"].as_array().unwrap() {
            let n = |k: &str| l[k].as_u64().unwrap();
            out.push((n("attempt"), n("rank"), n("restart"), l["text"].as_str().unwrap().to_string()));
        }
        from = page["next"].as_str().unwrap().to_string();
        if page["more"] != true {
            return out;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_splittable_job_grows_its_fleet_and_its_world_spans_both_regions_walking_each_shard_once() {
    let dir = temp_dir("agents-elastic");
    let scenario = dir.join("elastic.toml");
    std::fs::write(&scenario, ELASTIC_SCENARIO).unwrap();
    let config = dir.join("spillway.toml");
    std::fs::write(&config, "[agent]\nheartbeat_interval_secs = 0.2\n").unwrap();
    let s = Server::start(
        &dir,
        &dir.join("data"),
        0,
        &["--speedup", "600", "--scenario", scenario.to_str().unwrap(), "--config", config.to_str().unwrap()],
        &[],
    );
    // Another job holds half of eastus' spot quota.
    let holder = json!({"name": "holder", "kind": "batch", "gpus": 2, "sizes": ["Standard_NC4as_T4_v3"],
                        "regions": ["eastus"], "spot": "only", "duration_hours": 1000.0});
    let holder = submit(&s, &holder).await;
    wait_state(&s, &holder, &["running"], 60).await;
    let spec = json!({"name": "embed", "kind": "batch", "gang": false, "gpus": 5, "sizes": ["Standard_NC4as_T4_v3"],
                      "spot": "preferred", "max_restarts": 0, "run": SHARDS});
    let id = submit(&s, &spec).await;
    // Its first world runs on what it got.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !all_lines(&s, &id).await.iter().any(|l| l.3.starts_with("world of ")) {
        assert!(Instant::now() < deadline, "the first world never ran: {:#}", job_detail(&s, &id).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The holder ends: eastus has spot quota for the job's fleet there to grow.
    let cancel = client().delete(format!("{}/v1/jobs/{holder}", s.url)).bearer_auth(&s.admin).send().await.unwrap();
    assert_eq!(cancel.status(), StatusCode::OK);
    let d = wait_state(&s, &id, &["succeeded", "failed"], 120).await;
    assert_eq!(d["job"]["state"], "succeeded", "{d:#}");
    assert!(d["job"]["end_reason"].as_str().unwrap().contains("5 ranks over attempts"), "{d:#}");
    // One fleet per region × priority: the growth was a PUT on the eastus fleet, not a new fleet.
    let attempts = d["attempts"].as_array().unwrap();
    let mut places: Vec<(String, String)> = attempts
        .iter()
        .map(|a| (a["region"].as_str().unwrap().to_string(), a["priority"].as_str().unwrap().to_string()))
        .collect();
    places.sort();
    assert_eq!(places, [("eastus".into(), "spot".into()), ("westus3".into(), "regular".into())], "{d:#}");
    let changed = events_of(&d, "world_changed");
    assert!(changed.iter().any(|m| m.contains("fleet grew in eastus")), "{changed:?}");
    assert!(changed.last().unwrap().contains("→ 5 VMs"), "{changed:?}");
    assert!(events_of(&d, "restarted").is_empty(), "world changes are not failures: {d:#}");
    // The final start: five ranks over both fleets, each shard walked exactly once.
    let lines = all_lines(&s, &id).await;
    let last = lines.iter().filter(|l| l.3.starts_with("embedding shard")).map(|l| l.2).max().unwrap();
    let mut shards: Vec<u32> = lines
        .iter()
        .filter(|l| l.2 == last)
        .filter_map(|l| l.3.strip_prefix("embedding shard ")?.strip_suffix(" of 32")?.parse().ok())
        .collect();
    shards.sort_unstable();
    assert_eq!(shards, (0..32).collect::<Vec<u32>>(), "each shard once in the final world");
    let mut done: Vec<String> =
        lines.iter().filter(|l| l.2 == last && l.3.ends_with(" done")).map(|l| l.3.clone()).collect();
    done.sort();
    let want: Vec<String> = (0..5).map(|r| format!("rank {r} of 5 done")).collect();
    assert_eq!(done, want, "{lines:?}");
    let starts: std::collections::BTreeSet<u64> = lines.iter().map(|l| l.2).collect();
    assert!(starts.len() >= 2, "the first world ran, then the grown one: {starts:?}");
}
