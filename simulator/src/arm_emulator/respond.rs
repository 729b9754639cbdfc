//! The shapes every ARM emulator answer shares: error bodies, JSON, headers, times and ids in
//! ARM's formats, `$skipToken` paging, and quota pools' display names. Its own module so the
//! fleet routes and the quota routes both use it without naming each other.

use std::collections::HashMap;

use axum::http::{HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use scheduler::cloud::CloudError;
use scheduler::cloud::azure::models::{ErrorDetail, ErrorResponse, Page};
use scheduler::model::QuotaPool;
use serde::Serialize;

use super::AppState;
use super::errors::{ArmErrorContext, arm_error};

pub(super) fn error_response(status: StatusCode, error: ErrorDetail) -> Response {
    (status, axum::Json(ErrorResponse { error })).into_response()
}

pub(super) fn err(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    error_response(status, ErrorDetail::new(code, message))
}

pub(super) fn json<T: Serialize>(status: StatusCode, body: &T) -> Response {
    (status, axum::Json(body)).into_response()
}

pub(super) fn set_header(resp: &mut Response, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().insert(name, v);
    }
}

pub(super) fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_default()
}

/// An HTTP date (`Tue, 14 Nov 2023 22:13:20 GMT`).
pub(super) fn http_date(ms: i64) -> String {
    let format = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    time::OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000))
        .ok()
        .and_then(|t| t.format(&format).ok())
        .unwrap_or_default()
}

/// A GUID-shaped id, unique per emulator and counter value.
pub(super) fn guid(seed: u64, n: u64) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for b in n.to_le_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let h2 = h.rotate_left(31).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ n;
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        h >> 32,
        (h >> 16) & 0xffff,
        h & 0xfff,
        h2 >> 52,
        h2 & 0xffff_ffff_ffff
    )
}

/// One page of `items` per `$skipToken` (any case: the fleet VM list spells it `$skiptoken`), with
/// an absolute `nextLink` that keeps the other query parameters as the client sent them.
pub(super) fn paged<T: Serialize + Clone>(
    st: &AppState,
    uri: &Uri,
    q: &HashMap<String, String>,
    items: &[T],
) -> Response {
    let token = q.iter().find(|(k, _)| k.eq_ignore_ascii_case("$skipToken")).map(|(_, v)| v);
    let skip = match token.map(|s| s.parse::<usize>()) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => return err(StatusCode::BAD_REQUEST, "InvalidSkipToken", "The $skipToken is not valid."),
    };
    let start = skip.min(items.len());
    let end = start.saturating_add(st.cfg.page_size).min(items.len());
    let next_link = (end < items.len()).then(|| {
        let mut params: Vec<&str> = uri
            .query()
            .unwrap_or_default()
            .split('&')
            .filter(|p| {
                let lower = p.to_ascii_lowercase();
                !p.is_empty() && !lower.starts_with("$skiptoken=") && !lower.starts_with("%24skiptoken=")
            })
            .collect();
        let token = format!("$skipToken={end}");
        params.push(&token);
        format!("{}{}?{}", st.base_url, uri.path(), params.join("&"))
    });
    json(StatusCode::OK, &Page { value: items[start..end].to_vec(), next_link })
}

pub(super) fn cloud_error(e: &CloudError) -> Response {
    let (status, detail) = arm_error(e, &ArmErrorContext::default());
    error_response(status, detail)
}

/// A pool's display name, as the usages API spells it.
pub(super) fn localized(pool: &QuotaPool) -> String {
    match pool {
        QuotaPool::Cores => "Total Regional vCPUs".to_string(),
        QuotaPool::LowPriorityCores => "Total Regional Low-priority vCPUs".to_string(),
        QuotaPool::Family(f) => format!("{f} vCPUs"),
    }
}
