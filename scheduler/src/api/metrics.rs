//! HTTP request counts and latency by route and status, next to the control loop's metrics.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Labels of a request count.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// HTTP method.
    pub method: String,
    /// The route template (`/v1/jobs/{id}`), or `unmatched`: never the raw path, so ids do not
    /// explode the label space.
    pub route: String,
    /// Status code.
    pub status: String,
}

/// Labels of a latency histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// HTTP method.
    pub method: String,
    /// The route template.
    pub route: String,
    /// Status code.
    pub status: String,
}

fn latency_histogram() -> Histogram {
    Histogram::new([0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5])
}

/// The HTTP metrics. Cheap to clone (shared atomics).
#[derive(Clone, Debug)]
pub struct HttpMetrics {
    /// Requests by method, route and status.
    pub requests: Family<RequestLabels, Counter>,
    /// Time to the response headers, seconds, by method, route and status.
    pub latency: Family<RouteLabels, Histogram, fn() -> Histogram>,
}

impl HttpMetrics {
    /// Creates the metrics and registers them under `spillway_http_`.
    pub fn register(registry: &mut Registry) -> HttpMetrics {
        let m = HttpMetrics {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
        };
        let r = registry.sub_registry_with_prefix("spillway_http");
        r.register("requests", "HTTP requests by method, route and status", m.requests.clone());
        r.register("request_seconds", "HTTP request latency to the response headers", m.latency.clone());
        m
    }
}

/// Middleware: counts and times every request.
pub(crate) async fn track(State(metrics): State<HttpMetrics>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().as_str().to_string();
    let route =
        req.extensions().get::<MatchedPath>().map(|p| p.as_str().to_string()).unwrap_or_else(|| "unmatched".into());
    let resp = next.run(req).await;
    let status = resp.status().as_u16().to_string();
    metrics
        .requests
        .get_or_create(&RequestLabels { method: method.clone(), route: route.clone(), status: status.clone() })
        .inc();
    metrics.latency.get_or_create(&RouteLabels { method, route, status }).observe(started.elapsed().as_secs_f64());
    resp
}
