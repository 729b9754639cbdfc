//! No fleet leaks, end to end: `spillway serve --cloud azure` (client retries off, so the loop's
//! own retries are what is tested) against `spillway emulate-arm` failing 20 % of DELETEs and 20 %
//! of fleet creations' operations; jobs are placed, some cancelled, and the server is SIGKILLed in
//! the middle of the rounds that delete their fleets, then restarted. Once every job is final the
//! emulator must hold no fleet at all: every failed deletion was retried until the cloud confirmed
//! it, and the fleets the killed process left behind were found by the cloud reconciliation.

mod e2e_support;

use std::time::{Duration, Instant};

use e2e_support::{Emulator, FAST_SCENARIO, Server, client, complete_running, list_jobs, quick_job, temp_dir};
use serde_json::Value;

const JOBS: usize = 12;

async fn submit(url: &str, admin: &str, n: usize) -> String {
    let r = client()
        .post(format!("{url}/v1/jobs"))
        .bearer_auth(admin)
        .json(&quick_job(&format!("leak-{n:02}"), "orphans"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::CREATED);
    r.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string()
}

async fn cancel(url: &str, admin: &str, id: &str) {
    let _ = client().delete(format!("{url}/v1/jobs/{id}")).bearer_auth(admin).send().await;
}

/// Waits until `done` holds, polling; panics with `what` after `secs` seconds.
async fn wait_until<F: AsyncFnMut() -> bool>(secs: u64, what: &str, mut done: F) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done().await {
        assert!(Instant::now() < deadline, "{what} within {secs} s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_deletions_and_a_kill_mid_round_leave_no_orphan_fleet() {
    let dir = temp_dir("orphans-e2e");
    let data = dir.join("data");
    let faults = ["--delete-error-rate", "0.2", "--lro-failure-rate", "0.2", "--seed", "5"];
    let emu = Emulator::start(&dir, FAST_SCENARIO, &faults);
    let config = emu.azure_config(&dir, "retry = { max_retries = 0 }\n");
    let args = ["--cloud", "azure", "--config", config.to_str().unwrap(), "--rate-limit", "0"];
    let mut server = Server::start(&dir, &data, 0, &args, &[]);
    let (mut url, admin) = (server.url.clone(), server.admin.clone());
    let mut ids = Vec::new();
    for n in 0..JOBS {
        ids.push(submit(&url, &admin, n).await);
    }
    wait_until(60, "half the jobs running", async || {
        let jobs = list_jobs(&url, &admin).await.unwrap_or_default();
        jobs.iter().filter(|j| j["state"] == "running").count() >= JOBS / 2
    })
    .await;

    // Two kills, each in the middle of the rounds deleting the fleets of jobs just cancelled.
    for (run, cancelled) in [(1, &ids[..4]), (2, &ids[4..8])] {
        for id in cancelled {
            cancel(&url, &admin, id).await;
        }
        tokio::time::sleep(Duration::from_millis(150 * run as u64)).await;
        server.kill();
        server = Server::start(&dir, &data, run, &args, &[]);
        url = server.url.clone();
    }

    // The rest run to completion (the cloud has no notion of done work: a client says so).
    wait_until(90, "every job final", async || {
        complete_running(&url, &admin).await;
        let jobs = list_jobs(&url, &admin).await.unwrap_or_default();
        jobs.len() == JOBS
            && jobs.iter().all(|j| ["succeeded", "cancelled", "failed"].contains(&j["state"].as_str().unwrap()))
    })
    .await;
    wait_until(60, "the emulator holds no fleet", async || emu.fleets().await.is_empty()).await;

    let stats = emu.stats().await;
    let delete_errors = stats["faults"]["delete_error"].as_u64().unwrap_or(0);
    assert!(delete_errors > 0, "the run must have met failed deletions to prove anything: {stats:#}");
    eprintln!("orphans_e2e: {delete_errors} DELETEs failed; 0 fleets left");
    drop(server);
}
