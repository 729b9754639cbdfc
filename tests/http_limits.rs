//! The HTTP server's limits against the real binary (issue #24's adversarial probe): a client that
//! sends half a header is answered 408 and closed; connections past the cap are answered 503 and
//! closed; event streams cost no thread each and are capped.

mod e2e_support;

use std::path::Path;
use std::time::{Duration, Instant};

use e2e_support::{Server, client, temp_dir};
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn config(dir: &Path, api: &str) -> String {
    let path = dir.join("spillway.toml");
    std::fs::write(&path, format!("[api]\n{api}\n")).unwrap();
    path.display().to_string()
}

fn addr(s: &Server) -> String {
    s.url.trim_start_matches("http://").to_string()
}

/// A line of `/proc/<pid>/status`, as a number.
fn proc_status(pid: u32, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = text.lines().find(|l| l.starts_with(key)).unwrap_or_else(|| panic!("no {key} in {text}"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// Reads whatever the server sends until it closes (or 5 s pass).
async fn read_all(c: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf).into_owned()
}

#[tokio::test]
async fn half_a_header_gets_408_and_the_connection_is_closed() {
    let dir = temp_dir("limits-header");
    let cfg = config(&dir, "header_read_timeout = 500");
    let s = Server::start(&dir, &dir.join("data"), 1, &["--config", &cfg], &[]);
    let pid = s.child.id();
    let fds_before = open_descriptors(pid);

    let mut c = TcpStream::connect(addr(&s)).await.unwrap();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let started = Instant::now();
    let answer = read_all(&mut c).await;
    let waited = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(answer.contains("\"error\""), "the usual JSON error body: {answer}");
    assert!(waited >= Duration::from_millis(400) && waited < Duration::from_secs(3), "{waited:?}");

    // 100 slow clients: all closed once the timeout passes; the descriptors come back.
    let mut slow = Vec::new();
    for _ in 0..100 {
        let mut c = TcpStream::connect(addr(&s)).await.unwrap();
        c.write_all(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthor").await.unwrap();
        slow.push(c);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let fds_open = open_descriptors(pid);
    assert!(fds_open >= fds_before + 90, "the slow connections are open: {fds_before} -> {fds_open}");
    for c in &mut slow {
        assert!(read_all(c).await.starts_with("HTTP/1.1 408"));
    }
    let fds_after = open_descriptors(pid);
    assert!(fds_after <= fds_before + 5, "descriptors {fds_before} -> {fds_open} -> {fds_after}");
    println!("descriptors: {fds_before} before, {fds_open} with 100 slow-header connections, {fds_after} after");

    // A prompt client is served as before.
    let r = client().get(format!("{}/healthz", s.url)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    drop(s);
}

#[tokio::test]
async fn connections_past_the_cap_get_503_and_are_closed() {
    let dir = temp_dir("limits-conns");
    let cfg = config(&dir, "header_read_timeout = 20000\nmax_connections = 8");
    let s = Server::start(&dir, &dir.join("data"), 1, &["--config", &cfg], &[]);
    let mut held = Vec::new();
    for _ in 0..8 {
        let mut c = TcpStream::connect(addr(&s)).await.unwrap();
        c.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
        held.push(c);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut ninth = TcpStream::connect(addr(&s)).await.unwrap();
    ninth.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let answer = read_all(&mut ninth).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    assert!(answer.to_ascii_lowercase().contains("retry-after: 1"), "{answer}");
    assert!(answer.contains("connections are open"), "{answer}");
    // Once the held connections go, there is room again.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(r) = client().get(format!("{}/healthz", s.url)).send().await
            && r.status() == StatusCode::OK
        {
            break;
        }
        assert!(Instant::now() < deadline, "the server never had room again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(s);
}

#[tokio::test]
async fn event_streams_cost_no_thread_each_and_are_capped() {
    let dir = temp_dir("limits-sse");
    let cfg = config(&dir, "max_event_streams = 60");
    let s = Server::start(&dir, &dir.join("data"), 1, &["--config", &cfg], &[]);
    let pid = s.child.id();
    // Let start-up settle (the first rounds, the runtime's threads).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let threads_before = proc_status(pid, "Threads:");
    let mut streams = Vec::new();
    for i in 0..60 {
        // A connection of its own per stream, as separate clients would have.
        let c = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
        let from = if i % 2 == 0 { "?from=0" } else { "" };
        let r = c.get(format!("{}/v1/events{from}", s.url)).bearer_auth(&s.admin).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "stream {i}");
        streams.push((c, r));
    }
    // Several poll intervals with every stream open.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let threads_open = proc_status(pid, "Threads:");
    assert!(
        threads_open <= threads_before + 8,
        "60 open streams must not take a thread each: {threads_before} -> {threads_open}"
    );
    let r = client().get(format!("{}/v1/events", s.url)).bearer_auth(&s.admin).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE, "past the cap");
    assert!(r.headers().contains_key("retry-after"));
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("event streams"), "{body}");
    println!("threads: {threads_before} before, {threads_open} with 60 event streams");
    // Closed streams give their places back.
    drop(streams);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = client().get(format!("{}/v1/events", s.url)).bearer_auth(&s.admin).send().await.unwrap();
        if r.status() == StatusCode::OK {
            break;
        }
        assert!(Instant::now() < deadline, "closed streams never freed their places");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(s);
}
