//! The web dashboard at `/`: a handful of hand-written files (HTML, CSS, JavaScript, one icon)
//! embedded in the binary, so it works offline and needs no front-end toolchain to build.
//!
//! The page is a client of the same API a script uses: it signs in with a bearer token (pasted,
//! or from the URL fragment `#token=…`, which browsers never send to the server), keeps it in
//! session storage, reads `/v1/jobs`, `/v1/jobs/{id}`, `/v1/capacity`, `/v1/plan`, `/v1/spend` and
//! `/v1/whoami`, and follows `/v1/events` (server-sent events read through `fetch`, because
//! `EventSource` cannot send an `Authorization` header). Tenant scoping is the API's: the page
//! shows whatever the token is allowed to read, nothing more.
//!
//! Security: every response of the server carries a strict Content-Security-Policy (scripts and
//! styles from this origin only, no inline code, no framing, Trusted Types required so that no
//! string can ever reach an HTML sink), `X-Frame-Options: DENY`, `X-Content-Type-Options: nosniff`
//! and `Referrer-Policy: no-referrer`. The script builds the page with DOM nodes and `textContent`
//! only: job names, event messages and log lines are text, never markup.

use std::sync::OnceLock;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

/// The policy sent with every response. `require-trusted-types-for 'script'` with no policy
/// allowed makes any assignment of a string to `innerHTML` (or another HTML sink) throw.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'; require-trusted-types-for 'script'; trusted-types 'none'";

/// One embedded file.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

/// Every file the dashboard is made of.
const ASSETS: &[Asset] = &[
    Asset { path: "/", content_type: "text/html; charset=utf-8", body: include_bytes!("assets/index.html") },
    Asset {
        path: "/dashboard/app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("assets/app.js"),
    },
    Asset {
        path: "/dashboard/app.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("assets/app.css"),
    },
    Asset { path: "/dashboard/icon.svg", content_type: "image/svg+xml", body: include_bytes!("assets/icon.svg") },
];

/// Total size of the embedded files, bytes.
pub fn assets_size() -> usize {
    ASSETS.iter().map(|a| a.body.len()).sum()
}

/// Strong validators, computed once: a reload costs a 304 unless the binary changed.
fn etags() -> &'static [String] {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| {
                let digest = Sha256::digest(a.body);
                let hex: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
                format!("\"{hex}\"")
            })
            .collect()
    })
}

fn serve(index: usize, headers: &HeaderMap) -> Response {
    let asset = &ASSETS[index];
    let tag = &etags()[index];
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
    let mut resp = if fresh { StatusCode::NOT_MODIFIED.into_response() } else { asset.body.into_response() };
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    // Revalidate every time: the files change with the binary, and a 304 is cheap.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(tag) {
        h.insert(header::ETAG, v);
    }
    resp
}

/// The dashboard's routes (no token needed: the files hold no data; the data needs a token).
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let mut router = Router::new();
    for (i, asset) in ASSETS.iter().enumerate() {
        router = router.route(asset.path, get(move |headers: HeaderMap| async move { serve(i, &headers) }));
    }
    router
}

/// Adds the security headers to every response (API answers included: they cost nothing there
/// and keep a JSON answer from being framed or sniffed as HTML).
pub async fn security_headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    resp
}

/// The link that opens the dashboard signed in with `token`: the token rides in the fragment,
/// which browsers keep to themselves (never sent in a request, so never in a server log).
/// An unspecified listening address (`0.0.0.0`, `[::]`) is shown as loopback.
pub fn sign_in_url(base: &str, token: &str) -> String {
    let base = base.trim_end_matches('/').replace("://0.0.0.0", "://127.0.0.1").replace("://[::]", "://[::1]");
    format!("{base}/#token={token}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assets_are_small_and_hold_no_inline_code() {
        assert!(assets_size() < 300 * 1024, "the dashboard is {} bytes; keep it a few hundred KiB", assets_size());
        let html = std::str::from_utf8(ASSETS[0].body).unwrap();
        // Only external scripts and styles: the policy allows nothing else, so inline code would
        // be dead (and a sign someone meant to loosen the policy).
        for bad in ["<style", " style=", "onclick", "onload", "javascript:"] {
            assert!(!html.contains(bad), "index.html contains {bad:?}");
        }
        assert!(html.matches("<script").count() == html.matches("<script src=").count());
        let js = std::str::from_utf8(ASSETS[1].body).unwrap();
        for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"] {
            assert!(!js.contains(sink), "app.js uses {sink}: build nodes with textContent instead");
        }
    }

    #[test]
    fn sign_in_url_puts_the_token_in_the_fragment() {
        assert_eq!(sign_in_url("http://127.0.0.1:7878", "spw_a_b"), "http://127.0.0.1:7878/#token=spw_a_b");
        assert_eq!(sign_in_url("http://0.0.0.0:80/", "t"), "http://127.0.0.1:80/#token=t");
    }
}
