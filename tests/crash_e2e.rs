//! Crash test, end to end: `spillway serve --cloud azure` drives `spillway emulate-arm` over real
//! HTTP while concurrent clients submit jobs; the server is SIGKILLed at random moments (at least
//! 20 times) and restarted on the same data directory. Afterwards:
//! - every job whose submission was answered 201 exists, with the spec that was sent;
//! - every fleet the emulator ever held (sampled continuously) belongs to an attempt the server
//!   recorded (no orphan), and no attempt ever had two fleets (no duplicate);
//! - every job reaches a final state, and then the emulator holds no fleet at all.
//!
//! Replay a failing run with `SPILLWAY_TEST_SEED=<seed printed> cargo test --test crash_e2e`.

mod e2e_support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use e2e_support::{
    Emulator, FAST_SCENARIO, Rng, Server, client, complete_running, is_final, list_jobs, quick_job, temp_dir,
};
use serde_json::Value;
use tokio::sync::{Mutex, RwLock};

/// SIGKILLs of the server per run.
const KILLS: usize = 22;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_storm_loses_no_job_and_leaks_no_fleet() {
    let (mut rng, seed) = Rng::from_env_or_time();
    eprintln!("crash_e2e seed: {seed} (SPILLWAY_TEST_SEED={seed} replays the kill schedule)");
    let dir = temp_dir("crash-e2e");
    let data = dir.join("data");
    let emu = Arc::new(Emulator::start(&dir, FAST_SCENARIO, &[]));
    let config = emu.azure_config(&dir, "");
    let config = config.to_str().unwrap().to_string();
    let args = move || ["--cloud", "azure", "--config", config.as_str(), "--rate-limit", "0"].map(String::from);
    let start = move |dir: &std::path::Path, data: &std::path::Path, run: usize, args: [String; 6]| {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        Server::start(dir, data, run, &a, &[])
    };
    let mut server = start(&dir, &data, 0, args());
    let admin = server.admin.clone();
    let url = Arc::new(RwLock::new(server.url.clone()));
    let stop_submitting = Arc::new(AtomicBool::new(false));
    let stop_all = Arc::new(AtomicBool::new(false));
    // name -> id of every submission answered 201.
    let acked: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    let unanswered = Arc::new(AtomicUsize::new(0));

    let mut tasks = Vec::new();
    for c in 0..3 {
        let (url, admin, acked, stop, unanswered) =
            (url.clone(), admin.clone(), acked.clone(), stop_submitting.clone(), unanswered.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let name = format!("crash-c{c}-{n:04}");
                let u = url.read().await.clone();
                let sent = client()
                    .post(format!("{u}/v1/jobs"))
                    .bearer_auth(&admin)
                    .json(&quick_job(&name, "crash"))
                    .send()
                    .await;
                match sent {
                    Ok(r) if r.status() == reqwest::StatusCode::CREATED => {
                        let v: Value = r.json().await.unwrap();
                        acked.lock().await.insert(name, v["id"].as_str().unwrap().to_string());
                    }
                    Ok(r) => panic!("submission {name} answered {}: {:?}", r.status(), r.text().await),
                    // Down between a kill and its restart: nothing was sent.
                    Err(e) if e.is_connect() => {}
                    // The server was killed mid-request: the job may or may not exist.
                    Err(_) => {
                        unanswered.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        }));
    }
    // Completes running jobs, and samples the emulator's fleets all along: name -> tags.
    let seen_fleets: Arc<Mutex<BTreeMap<String, Value>>> = Arc::default();
    let sampler = {
        let (url, admin, stop, seen, emu) =
            (url.clone(), admin.clone(), stop_all.clone(), seen_fleets.clone(), emu.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for f in emu.fleets().await {
                    seen.lock().await.insert(f["name"].as_str().unwrap().to_string(), f["tags"].clone());
                }
                let u = url.read().await.clone();
                complete_running(&u, &admin).await;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };

    let started = Instant::now();
    for round in 1..=KILLS {
        tokio::time::sleep(Duration::from_millis(rng.range(200, 1_500))).await;
        server.kill();
        server = tokio::task::spawn_blocking({
            let (dir, data, a) = (dir.to_path_buf(), data.clone(), args());
            move || start(&dir, &data, round, a)
        })
        .await
        .unwrap();
        *url.write().await = server.url.clone();
    }
    eprintln!("{KILLS} SIGKILLs survived in {:.1} s", started.elapsed().as_secs_f64());
    stop_submitting.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }

    // Every job, acknowledged or not, reaches a final state.
    let u = server.url.clone();
    let deadline = Instant::now() + Duration::from_secs(120);
    let jobs = loop {
        let jobs = list_jobs(&u, &admin).await.expect("the last server answers");
        let open: Vec<&Value> = jobs.iter().filter(|j| !is_final(j)).collect();
        if open.is_empty() {
            break jobs;
        }
        assert!(
            Instant::now() < deadline,
            "{} jobs still open after 120 s: {:#?}",
            open.len(),
            &open[..open.len().min(3)]
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    // ...and then no fleet remains in the cloud.
    emu.wait_no_fleets(60, "fleets left after every job ended").await;
    stop_all.store(true, Ordering::Relaxed);
    sampler.await.unwrap();

    // Every 201 exists, with the name that was sent, and completed.
    let acked = acked.lock().await.clone();
    assert!(acked.len() >= 30, "too few submissions to prove anything: {}", acked.len());
    let by_id: BTreeMap<&str, &Value> = jobs.iter().map(|j| (j["id"].as_str().unwrap(), j)).collect();
    for (name, id) in &acked {
        let j = by_id.get(id.as_str()).unwrap_or_else(|| panic!("acknowledged job {name} ({id}) is lost"));
        assert_eq!(j["spec"]["name"], name.as_str());
        assert_eq!(j["state"], "succeeded", "{j:#}");
    }

    // Every fleet ever seen belongs to an attempt the server recorded; no attempt had two fleets.
    let mut attempts: BTreeMap<String, BTreeSet<String>> = BTreeMap::new(); // job -> fleet names
    for j in &jobs {
        let id = j["id"].as_str().unwrap();
        let detail: Value =
            client().get(format!("{u}/v1/jobs/{id}")).bearer_auth(&admin).send().await.unwrap().json().await.unwrap();
        for a in detail["attempts"].as_array().unwrap() {
            attempts.entry(id.to_string()).or_default().insert(a["fleet_name"].as_str().unwrap().to_string());
        }
    }
    let seen = seen_fleets.lock().await.clone();
    let mut per_attempt: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (name, tags) in &seen {
        let job = tags["spillway-job"].as_str().unwrap_or_else(|| panic!("fleet {name} has no spillway-job tag"));
        let attempt = tags["spillway-attempt"].as_str().unwrap_or_else(|| panic!("fleet {name} has no attempt tag"));
        assert!(
            attempts.get(job).is_some_and(|names| names.contains(name)),
            "orphan: fleet {name} (job {job}, attempt {attempt}) is no attempt the server knows"
        );
        per_attempt.entry((job.to_string(), attempt.to_string())).or_default().push(name.clone());
    }
    for ((job, attempt), names) in &per_attempt {
        assert_eq!(names.len(), 1, "job {job} attempt {attempt} had several fleets: {names:?}");
    }
    let stats = emu.stats().await;
    let puts = stats["routes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["method"] == "PUT" && r["route"].as_str().unwrap().ends_with("/fleets/{name}"))
        .map(|r| r["count"].as_u64().unwrap())
        .sum::<u64>();
    eprintln!(
        "crash_e2e: {KILLS} kills, {} jobs acknowledged, {} submissions cut off by a kill, {} jobs in total, \
         {} fleets seen, {} fleet PUTs, 0 acknowledged jobs lost, 0 orphan fleets",
        acked.len(),
        unanswered.load(Ordering::Relaxed),
        jobs.len(),
        seen.len(),
        puts
    );
    assert!(!seen.is_empty(), "the sampler saw no fleet: the test did not exercise the cloud");
    drop(server);
}
