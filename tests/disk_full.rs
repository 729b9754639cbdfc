//! A full disk, end to end: `spillway serve` on a small tmpfs; the disk is filled up, then space is
//! freed. Meanwhile submissions and cancellations answer 503 saying why and `/readyz` is not ready;
//! afterwards they work again by themselves (no restart), the control loop's rounds resume, and
//! nothing acknowledged is lost.
//!
//! Mounting a tmpfs with a size limit needs root (CI runs as root); elsewhere the test says it is
//! skipped.

mod e2e_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use e2e_support::{Server, client, quick_job, temp_dir};
use serde_json::Value;

/// A tmpfs of `mb` MiB mounted at a new directory, unmounted on drop.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(at: &Path, mb: u64) -> Option<SmallDisk> {
        std::fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mb}m"), "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| SmallDisk(at.to_path_buf()))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the file system of `dir` until less than `leave` bytes are free (a file of zeros).
fn fill(dir: &Path, leave: u64) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 1 << 20];
    loop {
        let free = free_bytes(dir);
        if free <= leave {
            break;
        }
        let n = ((free - leave) as usize).min(chunk.len());
        if f.write_all(&chunk[..n]).is_err() {
            break;
        }
    }
    let _ = f.sync_all();
    path
}

fn free_bytes(dir: &Path) -> u64 {
    let out = Command::new("df").args(["-B1", "--output=avail"]).arg(dir).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().nth(1).unwrap().trim().parse().unwrap()
}

async fn submit(url: &str, admin: &str, name: &str) -> reqwest::Response {
    client().post(format!("{url}/v1/jobs")).bearer_auth(admin).json(&quick_job(name, "disk")).send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_then_everything_resumes_by_itself() {
    let dir = temp_dir("disk-full");
    let Some(disk) = SmallDisk::mount(&dir.join("disk"), 64) else {
        eprintln!("skipping disk_full: cannot mount a size-limited tmpfs here (needs root; CI runs as root)");
        return;
    };
    let data = disk.0.join("data");
    let server = Server::start(&dir, &data, 0, &["--rate-limit", "0"], &[]);
    let (url, admin) = (server.url.clone(), server.admin.clone());
    let mut acked = Vec::new();
    for i in 0..5 {
        let r = submit(&url, &admin, &format!("before-{i}")).await;
        assert_eq!(r.status(), reqwest::StatusCode::CREATED);
        acked.push(r.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string());
    }
    let filler = fill(&disk.0, 4 << 20);

    // Full: writes refused with the reason, reads still answered, not ready.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = submit(&url, &admin, "while-full").await;
    assert_eq!(r.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
    let body = r.text().await.unwrap();
    assert!(body.contains("full"), "{body}");
    let r = client().delete(format!("{url}/v1/jobs/{}", acked[0])).bearer_auth(&admin).send().await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE, "cancel while the disk is full");
    let r = client().get(format!("{url}/v1/jobs/{}", acked[1])).bearer_auth(&admin).send().await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::OK, "reads go on");
    let r = client().get(format!("{url}/readyz")).send().await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
    let ready: Value = r.json().await.unwrap();
    assert!(ready["reason"].as_str().unwrap_or_default().contains("full"), "{ready}");

    // Space returns: everything resumes without a restart.
    std::fs::remove_file(&filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = submit(&url, &admin, "after").await;
        if r.status() == reqwest::StatusCode::CREATED {
            break;
        }
        assert!(Instant::now() < deadline, "submissions did not resume: {} {:?}", r.status(), r.text().await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let r = client().delete(format!("{url}/v1/jobs/{}", acked[0])).bearer_auth(&admin).send().await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::OK, "cancel after space returned");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = client().get(format!("{url}/readyz")).send().await.unwrap();
        if r.status() == reqwest::StatusCode::OK {
            break;
        }
        assert!(Instant::now() < deadline, "never ready again: {:?}", r.text().await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for id in &acked {
        let r = client().get(format!("{url}/v1/jobs/{id}")).bearer_auth(&admin).send().await.unwrap();
        assert_eq!(r.status(), reqwest::StatusCode::OK, "acknowledged job {id} lost");
    }
    drop(server);
    drop(disk);
}
