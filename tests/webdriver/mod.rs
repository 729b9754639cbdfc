//! A small WebDriver client (W3C protocol over HTTP, on reqwest) driving Debian's headless
//! Chromium through `chromedriver`, for the dashboard's browser tests. Only the commands the
//! tests use: open a page, find elements, read text and attributes, click, type, run a script,
//! resize, take a screenshot, and read the browser's console.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The key under which WebDriver returns element references.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Where Debian puts the browser and its driver (`apt-get install chromium chromium-driver`);
/// `CHROMIUM` and `CHROMEDRIVER` override. The error names what is missing.
fn executables() -> Result<(PathBuf, PathBuf), String> {
    let chromium = std::env::var_os("CHROMIUM").map(PathBuf::from).unwrap_or_else(|| "/usr/bin/chromium".into());
    let driver = std::env::var_os("CHROMEDRIVER").map(PathBuf::from).unwrap_or_else(|| "/usr/bin/chromedriver".into());
    let missing: Vec<String> =
        [&chromium, &driver].into_iter().filter(|p| !p.exists()).map(|p| p.display().to_string()).collect();
    if missing.is_empty() { Ok((chromium, driver)) } else { Err(format!("{} not found", missing.join(" and "))) }
}

/// A headless Chromium session, closed (browser and driver) on drop.
pub struct Browser {
    http: reqwest::Client,
    session: String,
    driver: Child,
    profile: PathBuf,
}

/// An element found on the page.
#[derive(Clone, Debug)]
pub struct Element(String);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Browser {
    /// Starts chromedriver and a headless Chromium with a fresh profile, `width`×`height` pixels.
    /// `None` (with a message on stderr) when Chromium or chromedriver is not installed, unless
    /// `SPILLWAY_REQUIRE_BROWSER` is set (`.ci/run` sets it): there a missing browser fails the
    /// test, so CI can never pass by skipping the browser tests.
    pub async fn start(dir: &Path, width: u32, height: u32) -> Option<Browser> {
        let (chromium, driver_bin) = match executables() {
            Ok(found) => found,
            Err(missing) => {
                let why = format!(
                    "the dashboard browser tests need Debian's chromium and chromium-driver ({missing}; \
                     apt-get install -y chromium chromium-driver, as .ci/run does)"
                );
                assert!(
                    std::env::var_os("SPILLWAY_REQUIRE_BROWSER").is_none(),
                    "SPILLWAY_REQUIRE_BROWSER is set: {why}"
                );
                eprintln!("SKIPPED: {why}");
                return None;
            }
        };
        let port = free_port();
        let log = std::fs::File::create(dir.join("chromedriver.log")).unwrap();
        let driver = Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn chromedriver");
        let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = http.get(format!("{base}/status")).send().await;
            if let Ok(r) = ready
                && let Ok(v) = r.json::<Value>().await
                && v["value"]["ready"] == true
            {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver did not start within 30 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = dir.join("chromium-profile");
        let _ = std::fs::remove_dir_all(&profile);
        std::fs::create_dir_all(&profile).unwrap();
        // The machine has no internet: without these flags Chromium keeps trying to reach
        // Google's services and hangs or slows down.
        let args = vec![
            "--headless".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            "--hide-scrollbars".into(),
            "--force-device-scale-factor=1".into(),
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", profile.display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
            "goog:loggingPrefs": {"browser": "ALL"},
            "unhandledPromptBehavior": "ignore",
        }}});
        let resp: Value = http.post(format!("{base}/session")).json(&caps).send().await.unwrap().json().await.unwrap();
        let session = resp["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("chromedriver refused the session: {resp}"))
            .to_string();
        Some(Browser { http, session: format!("{base}/session/{session}"), driver, profile })
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<Value, String> {
        let mut req = self.http.request(method, format!("{}{path}", self.session));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.map_err(|e| e.to_string())?;
        let ok = resp.status().is_success();
        let v: Value = resp.json().await.map_err(|e| e.to_string())?;
        if ok { Ok(v["value"].clone()) } else { Err(format!("{}: {}", v["value"]["error"], v["value"]["message"])) }
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        self.call(reqwest::Method::POST, path, Some(body)).await.unwrap_or_else(|e| panic!("POST {path}: {e}"))
    }

    /// Opens a URL.
    pub async fn goto(&self, url: &str) {
        self.post("/url", json!({ "url": url })).await;
    }

    /// The current URL.
    pub async fn url(&self) -> String {
        self.call(reqwest::Method::GET, "/url", None).await.unwrap().as_str().unwrap_or("").to_string()
    }

    /// The first element matching a CSS selector, if any.
    pub async fn find(&self, css: &str) -> Option<Element> {
        let v =
            self.call(reqwest::Method::POST, "/element", Some(json!({"using": "css selector", "value": css}))).await;
        v.ok().and_then(|v| v[ELEMENT].as_str().map(|s| Element(s.to_string())))
    }

    /// Every element matching a CSS selector.
    pub async fn find_all(&self, css: &str) -> Vec<Element> {
        let v = self.post("/elements", json!({"using": "css selector", "value": css})).await;
        v.as_array()
            .map(|a| a.iter().filter_map(|e| e[ELEMENT].as_str().map(|s| Element(s.to_string()))).collect())
            .unwrap_or_default()
    }

    /// An element's rendered text.
    pub async fn text(&self, el: &Element) -> String {
        let v = self.call(reqwest::Method::GET, &format!("/element/{}/text", el.0), None).await;
        v.ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default()
    }

    /// The rendered text of the first element matching `css` (read in the page, so a redraw
    /// between finding and reading cannot make it stale).
    pub async fn text_of(&self, css: &str) -> Option<String> {
        let v = self
            .exec("var e = document.querySelector(arguments[0]); return e ? e.innerText : null", json!([css]))
            .await;
        v.as_str().map(String::from)
    }

    /// Waits until the first element matching `css` shows text containing `want`; returns it.
    pub async fn wait_text(&self, css: &str, want: &str, secs: u64) -> String {
        self.wait_for(&format!("{css:?} to show {want:?}"), secs, || async {
            self.text_of(css).await.filter(|t| t.contains(want))
        })
        .await
    }

    /// An element's attribute (or property).
    pub async fn attr(&self, el: &Element, name: &str) -> Option<String> {
        let v = self.call(reqwest::Method::GET, &format!("/element/{}/attribute/{name}", el.0), None).await;
        v.ok().and_then(|v| v.as_str().map(String::from))
    }

    /// Clicks an element.
    pub async fn click(&self, el: &Element) {
        self.post(&format!("/element/{}/click", el.0), json!({})).await;
    }

    /// Clicks the first element matching `css`, waiting up to `secs` for it; found again when
    /// the page redraws it between finding and clicking (live pages do).
    pub async fn click_on(&self, css: &str, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(el) = self.find(css).await {
                match self.call(reqwest::Method::POST, &format!("/element/{}/click", el.0), Some(json!({}))).await {
                    Ok(_) => return,
                    Err(e) if e.contains("stale") => {}
                    Err(e) => panic!("click {css}: {e}"),
                }
            }
            assert!(Instant::now() < deadline, "no clickable {css:?} within {secs} s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Types into an element.
    pub async fn type_into(&self, el: &Element, text: &str) {
        self.post(&format!("/element/{}/value", el.0), json!({ "text": text })).await;
    }

    /// Runs a script in the page and returns its result.
    pub async fn exec(&self, script: &str, args: Value) -> Value {
        self.post("/execute/sync", json!({ "script": script, "args": args })).await
    }

    /// The text of an open alert, if one is open (an alert means script ran that should not).
    pub async fn alert_text(&self) -> Option<String> {
        self.call(reqwest::Method::GET, "/alert/text", None).await.ok().map(|v| v.as_str().unwrap_or("").to_string())
    }

    /// Resizes the window.
    pub async fn resize(&self, width: u32, height: u32) {
        self.post("/window/rect", json!({ "width": width, "height": height })).await;
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Vec<u8> {
        let v = self.call(reqwest::Method::GET, "/screenshot", None).await.expect("screenshot");
        base64_decode(v.as_str().expect("base64 PNG"))
    }

    /// The browser console's messages since the last call (level and text).
    pub async fn console(&self) -> Vec<(String, String)> {
        let v = self.call(reqwest::Method::POST, "/se/log", Some(json!({"type": "browser"}))).await;
        v.ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
            .iter()
            .map(|e| (e["level"].as_str().unwrap_or("").to_string(), e["message"].as_str().unwrap_or("").to_string()))
            .collect()
    }

    /// Polls `probe` every 50 ms until it returns `Some`, failing the test after `secs` with `what`.
    pub async fn wait_for<T, F, Fut>(&self, what: &str, secs: u64, mut probe: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(v) = probe().await {
                return v;
            }
            if Instant::now() > deadline {
                let body = self.exec("return document.body.innerText", json!([])).await;
                panic!("timed out after {secs} s waiting for {what}; the page shows:\n{}", body.as_str().unwrap_or(""));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for an element matching `css` and returns it.
    pub async fn wait_element(&self, css: &str, secs: u64) -> Element {
        self.wait_for(&format!("an element {css:?}"), secs, || self.find(css)).await
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ends the session (closing Chromium) without an async runtime: a blocking request on
        // a fresh thread, then the driver is killed.
        let url = self.session.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            rt.block_on(async { reqwest::Client::new().delete(url).timeout(Duration::from_secs(10)).send().await.ok() })
        })
        .join();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// Decodes standard base64 (what WebDriver sends screenshots in).
pub fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for v in text.bytes().filter_map(value) {
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}
