//! Fault injection, end to end: `spillway serve --cloud azure` against `spillway emulate-arm`
//! answering 20% of calls 429 (`Retry-After: 1`), 5% 500, failing 5% of fleet creations' long-running
//! operations and adding 5–60 ms of latency to each call. Every job must still be placed and
//! run; the number of ARM calls per placement must stay bounded; and every retry after a 429 must
//! come at least `Retry-After` later (measured on the emulator's request log).

mod e2e_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use e2e_support::{Emulator, FAST_SCENARIO, Server, client, complete_running, list_jobs, quick_job, temp_dir};
use serde_json::Value;

const JOBS: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_is_placed_through_throttling_errors_and_failed_operations() {
    let dir = temp_dir("fault-injection");
    let emu = Emulator::start(
        &dir,
        FAST_SCENARIO,
        &[
            "--throttle-rate",
            "0.2",
            "--error-rate",
            "0.05",
            "--lro-failure-rate",
            "0.05",
            "--latency-ms",
            "5..60",
            "--seed",
            "11",
        ],
    );
    let config = emu.azure_config(&dir, "");
    let server = Server::start(
        &dir,
        &dir.join("data"),
        0,
        &["--cloud", "azure", "--config", config.to_str().unwrap(), "--rate-limit", "0"],
        &[],
    );
    let (url, admin) = (server.url.clone(), server.admin.clone());
    let mut ids = Vec::new();
    for n in 0..JOBS {
        let r = client()
            .post(format!("{url}/v1/jobs"))
            .bearer_auth(&admin)
            .json(&quick_job(&format!("faulty-{n:02}"), "faults"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), reqwest::StatusCode::CREATED);
        ids.push(r.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Placed = ran at some point; completed by us once running so the fleets go away again.
    let started = Instant::now();
    let deadline = started + Duration::from_secs(150);
    loop {
        complete_running(&url, &admin).await;
        let jobs = list_jobs(&url, &admin).await.unwrap();
        let ran = jobs.iter().filter(|j| j["first_running_at_ms"].is_number()).count();
        let failed: Vec<&Value> = jobs.iter().filter(|j| j["state"] == "failed" || j["state"] == "cancelled").collect();
        assert!(failed.is_empty(), "a job gave up under faults: {failed:#?}");
        if ran == JOBS && jobs.iter().all(|j| j["state"] == "succeeded") {
            break;
        }
        assert!(Instant::now() < deadline, "only {ran}/{JOBS} jobs placed after 150 s: {jobs:#?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let elapsed = started.elapsed();

    let stats = emu.stats().await;
    let total = stats["total"].as_u64().unwrap();
    let faults: BTreeMap<String, u64> = serde_json::from_value(stats["faults"].clone()).unwrap();
    let throttled = faults.get("throttled").copied().unwrap_or(0);
    let errors = faults.get("error").copied().unwrap_or(0);
    let lro_failures = faults.get("lro_failure").copied().unwrap_or(0);
    assert!(throttled > 0 && errors > 0, "the faults were not injected: {faults:?}");

    // Attempts per job (a failed operation makes the scheduler try again, maybe elsewhere).
    let mut attempts = 0;
    for id in &ids {
        let d: Value =
            client().get(format!("{url}/v1/jobs/{id}")).bearer_auth(&admin).send().await.unwrap().json().await.unwrap();
        attempts += d["attempts"].as_array().unwrap().len();
    }
    let per_placement = total as f64 / JOBS as f64;
    // Each placement costs a create, a few polls and a delete; reads of quota and the fleet list are
    // shared by a round. 60 per job would mean runaway retrying.
    assert!(per_placement <= 60.0, "{per_placement:.1} ARM calls per placement");

    // Retry-After honoured: after a 429 on a call, the same call is not repeated within 1 s.
    let log = stats["log"].as_array().unwrap();
    let mut gaps = Vec::new();
    for (i, r) in log.iter().enumerate() {
        if r["status"] != 429 {
            continue;
        }
        let key = (r["method"].as_str().unwrap(), r["path"].as_str().unwrap());
        // Only calls nothing else repeats concurrently: a fleet's create, delete and operation polls.
        if !(key.1.contains("/fleets/") || key.1.contains("/operations/")) {
            continue;
        }
        let at = r["at_ms"].as_u64().unwrap();
        if let Some(next) =
            log[i + 1..].iter().find(|n| (n["method"].as_str().unwrap(), n["path"].as_str().unwrap()) == key)
        {
            gaps.push(next["at_ms"].as_u64().unwrap() - at);
        }
    }
    gaps.sort_unstable();
    assert!(gaps.len() >= 3, "too few throttled fleet calls retried to measure: {gaps:?}");
    // The emulator stamps a request when it arrives and the latency is added before it answers, so
    // the client sees the 429 up to 60 ms after `at_ms`; the retry must still be ≥ 1 s after that.
    assert!(gaps[0] >= 1_000, "a retry came {} ms after a 429 with Retry-After: 1 (gaps {gaps:?})", gaps[0]);
    eprintln!(
        "fault_injection: {JOBS} jobs placed and completed in {:.1} s; {total} ARM calls ({per_placement:.1} per \
         placement), {attempts} attempts; injected {throttled}×429, {errors}×500, {lro_failures} failed LROs; \
         retry gap after 429 (ms): min {} median {} max {} over {} retries",
        elapsed.as_secs_f64(),
        gaps[0],
        gaps[gaps.len() / 2],
        gaps[gaps.len() - 1],
        gaps.len()
    );
    drop(server);
}
