//! `/metrics` in the format the scraper asks for, and only the series a tenant may see.
//!
//! The registry encodes OpenMetrics 1.0. Prometheus (and its client libraries' parsers) also read
//! the older text format 0.0.4, which differs where it matters: a counter's `# TYPE`/`# HELP`
//! name the sample (`x_total`), there is no `# UNIT`, no `info` type and no `# EOF`. A parser of
//! 0.0.4 given OpenMetrics files the `_total` samples under an untyped family of their own, which
//! is how Prometheus' Python parser mis-read every counter. So the answer is negotiated
//! ([`negotiate`]) and converted ([`render`]).
//!
//! A tenant-bound token gets only the series labelled with its own tenant (its spend, cost rate,
//! GPUs and open jobs); the cluster-wide series (GPUs per region, total cost rate, HTTP traffic)
//! are for admins and unbound viewers.

/// The two exposition formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 (`application/openmetrics-text; version=1.0.0`).
    OpenMetrics,
    /// Prometheus text format 0.0.4 (`text/plain; version=0.0.4`).
    Prometheus,
}

impl Format {
    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// Picks the format from an `Accept` header: OpenMetrics when it is asked for (with a quality at
/// least that of `text/plain`), else the 0.0.4 text format, which every scraper reads.
pub fn negotiate(accept: Option<&str>) -> Format {
    let Some(accept) = accept else { return Format::Prometheus };
    let (mut openmetrics, mut text) = (0.0f64, 0.0f64);
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.strip_prefix("q=").or_else(|| p.strip_prefix("Q=")))
            .find_map(|q| q.trim().parse::<f64>().ok())
            .unwrap_or(1.0);
        match media.as_str() {
            "application/openmetrics-text" => openmetrics = openmetrics.max(q),
            "text/plain" => text = text.max(q),
            _ => {}
        }
    }
    if openmetrics > 0.0 && openmetrics >= text { Format::OpenMetrics } else { Format::Prometheus }
}

/// One metric family of an OpenMetrics exposition.
#[derive(Debug, Default)]
struct Family {
    name: String,
    kind: String,
    help: Option<String>,
    unit: Option<String>,
    samples: Vec<String>,
}

fn families(openmetrics: &str) -> Vec<Family> {
    let mut out: Vec<Family> = Vec::new();
    for line in openmetrics.lines() {
        if line.is_empty() || line == "# EOF" {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (what, name, value) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next());
            if out.last().is_none_or(|f| f.name != name) {
                out.push(Family { name: name.to_string(), ..Family::default() });
            }
            let f = out.last_mut().expect("pushed above");
            match what {
                "TYPE" => f.kind = value.unwrap_or("unknown").to_string(),
                "HELP" => f.help = value.map(String::from),
                "UNIT" => f.unit = value.map(String::from),
                _ => {}
            }
            continue;
        }
        // Exemplars (`... # {trace_id="…"} 1.0`) have no place in 0.0.4 and are not ours to show.
        let sample = line.split(" # ").next().unwrap_or(line);
        match out.last_mut() {
            Some(f) => f.samples.push(sample.to_string()),
            None => out.push(Family { samples: vec![sample.to_string()], ..Family::default() }),
        }
    }
    out
}

/// True when a sample line carries `tenant="<tenant>"`.
fn has_tenant(sample: &str, tenant: &str) -> bool {
    let Some(start) = sample.find('{') else { return false };
    let Some(end) = sample[start..].find('}') else { return false };
    let labels = &sample[start + 1..start + end];
    let want = format!("tenant=\"{tenant}\"");
    labels.split(',').any(|l| l.trim() == want)
}

/// The exposition in `format`, keeping only `tenant`'s series when given.
pub fn render(openmetrics: &str, format: Format, tenant: Option<&str>) -> String {
    let mut out = String::new();
    for mut f in families(openmetrics) {
        if let Some(t) = tenant {
            f.samples.retain(|s| has_tenant(s, t));
            if f.samples.is_empty() {
                continue;
            }
        }
        match format {
            Format::OpenMetrics => {
                if let Some(h) = &f.help {
                    out.push_str(&format!("# HELP {} {h}\n", f.name));
                }
                out.push_str(&format!("# TYPE {} {}\n", f.name, f.kind));
                if let Some(u) = &f.unit {
                    out.push_str(&format!("# UNIT {} {u}\n", f.name));
                }
            }
            Format::Prometheus => {
                let (name, kind) = match f.kind.as_str() {
                    "counter" => (format!("{}_total", f.name), "counter"),
                    "info" => (format!("{}_info", f.name), "gauge"),
                    "gauge" | "histogram" | "summary" => (f.name.clone(), f.kind.as_str()),
                    _ => (f.name.clone(), "untyped"),
                };
                if let Some(h) = &f.help {
                    // 0.0.4 escapes only backslash and newline in help; OpenMetrics also escapes
                    // quotes, which 0.0.4 would show as written.
                    out.push_str(&format!("# HELP {name} {}\n", h.replace("\\\"", "\"")));
                }
                out.push_str(&format!("# TYPE {name} {kind}\n"));
            }
        }
        for s in &f.samples {
            out.push_str(s);
            out.push('\n');
        }
    }
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "# HELP spillway_placements Fleets asked for.\n# TYPE spillway_placements counter\n\
        spillway_placements_total 3\n# HELP spillway_round_seconds Round time.\n# TYPE spillway_round_seconds histogram\n\
        # UNIT spillway_round_seconds seconds\nspillway_round_seconds_sum 1.5\nspillway_round_seconds_count 2\n\
        spillway_round_seconds_bucket{le=\"+Inf\"} 2\n# HELP spillway_tenant_spent_usd Spent.\n\
        # TYPE spillway_tenant_spent_usd counter\nspillway_tenant_spent_usd_total{tenant=\"ml\"} 2.5\n\
        spillway_tenant_spent_usd_total{tenant=\"mlx\"} 7.0\n# EOF\n";

    #[test]
    fn accept_headers_pick_the_format() {
        assert_eq!(negotiate(None), Format::Prometheus);
        assert_eq!(negotiate(Some("*/*")), Format::Prometheus);
        assert_eq!(negotiate(Some("text/plain;version=0.0.4")), Format::Prometheus);
        assert_eq!(negotiate(Some("application/openmetrics-text; version=1.0.0")), Format::OpenMetrics);
        // What Prometheus itself sends: OpenMetrics preferred.
        let prom = "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,\
                    text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
        assert_eq!(negotiate(Some(prom)), Format::OpenMetrics);
        assert_eq!(negotiate(Some("text/plain;q=0.9, application/openmetrics-text;q=0.5")), Format::Prometheus);
        assert_eq!(negotiate(Some("application/openmetrics-text;q=0")), Format::Prometheus);
    }

    #[test]
    fn text_format_names_counters_by_their_samples_and_has_no_eof() {
        let t = render(SAMPLE, Format::Prometheus, None);
        assert!(t.contains("# TYPE spillway_placements_total counter\nspillway_placements_total 3\n"), "{t}");
        assert!(!t.contains("# EOF") && !t.contains("# UNIT"), "{t}");
        let om = render(SAMPLE, Format::OpenMetrics, None);
        assert_eq!(om, SAMPLE, "OpenMetrics passes through unchanged");
    }

    #[test]
    fn a_tenant_gets_only_its_own_series() {
        let t = render(SAMPLE, Format::OpenMetrics, Some("ml"));
        assert_eq!(
            t,
            "# HELP spillway_tenant_spent_usd Spent.\n# TYPE spillway_tenant_spent_usd counter\n\
             spillway_tenant_spent_usd_total{tenant=\"ml\"} 2.5\n# EOF\n"
        );
    }
}
