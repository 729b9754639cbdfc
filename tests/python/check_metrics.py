"""Reads spillway's /metrics answers with Prometheus' own Python parsers (prometheus_client).

Usage: check_metrics.py TEXT_0.0.4_FILE OPENMETRICS_FILE
Exits non-zero with the reason when a parser fails or mis-types a family.
"""
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

EXPECTED_TYPES = {
    "spillway_placements": "counter",
    "spillway_failovers": "counter",
    "spillway_provisioning_failures": "counter",
    "spillway_reconcile_rounds": "counter",
    "spillway_http_requests": "counter",
    "spillway_tenant_spent_usd": "counter",
    "spillway_jobs": "gauge",
    "spillway_cost_rate_usd_per_hour": "gauge",
    "spillway_tenant_cost_rate_usd_per_hour": "gauge",
    "spillway_round_seconds": "histogram",
    "spillway_quota_limit_vcpus": "gauge",
    "spillway_quota_used_vcpus": "gauge",
    "spillway_quota_free_vcpus": "gauge",
    "spillway_quota_blocked_jobs": "gauge",
    "spillway_quota_exhausted": "gauge",
}
CLASSES = {"quota", "capacity", "size_unavailable", "price_above_cap", "throttled", "transient", "permanent", "not_found"}


def check(families, fmt):
    by_name = {}
    for f in families:
        if f.name in by_name:
            sys.exit(f"{fmt}: family {f.name} appears twice (a counter read as two families?)")
        by_name[f.name] = f
    for name, typ in EXPECTED_TYPES.items():
        if name not in by_name:
            sys.exit(f"{fmt}: no family {name}; got {sorted(by_name)}")
        if by_name[name].type != typ:
            sys.exit(f"{fmt}: {name} is a {by_name[name].type}, expected {typ}")
    for f in by_name.values():
        if f.type == "unknown" or f.type == "untyped":
            sys.exit(f"{fmt}: family {f.name} has no type: the parser did not match its samples to a TYPE line")
        for s in f.samples:
            if s.name.endswith("_total") and f.type != "counter":
                sys.exit(f"{fmt}: sample {s.name} is in a {f.type} family {f.name}")
    classes = {s.labels.get("class") for s in by_name["spillway_provisioning_failures"].samples if s.name.endswith("_total")}
    if classes != CLASSES:
        sys.exit(f"{fmt}: provisioning failure classes {sorted(c for c in classes if c)}, expected {sorted(CLASSES)}")
    spent = [s for s in by_name["spillway_tenant_spent_usd"].samples if s.name.endswith("_total")]
    if not any(s.value > 0 for s in spent):
        sys.exit(f"{fmt}: no tenant has spent anything: {spent}")
    limits = by_name["spillway_quota_limit_vcpus"].samples
    if not limits or any(set(s.labels) != {"region", "pool"} for s in limits):
        sys.exit(f"{fmt}: quota limits need one sample per region and pool: {limits}")
    if not any(s.labels["pool"] == "cores" and s.value > 0 for s in limits):
        sys.exit(f"{fmt}: no region's cores limit was read: {limits}")
    return len(by_name)


with open(sys.argv[1]) as f:
    n_text = check(parse_text(f.read()), "text 0.0.4")
with open(sys.argv[2]) as f:
    n_om = check(parse_openmetrics(f.read()), "OpenMetrics")
print(f"ok: {n_text} families in text 0.0.4, {n_om} in OpenMetrics")
