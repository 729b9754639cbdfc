//! Figures fitted to the Philly trace (Microsoft's Philly GPU cluster, Sept–Dec 2017, 82,247
//! jobs, CC-BY-4.0), kept as our own data in `scenarios/philly-fit.toml` so the synthetic
//! generator works without the trace. [`PhillyFit::from_csv`] derives them from
//! `../shared/data/jobs/philly.csv`; the test `philly_fit_file_is_derived_from_the_trace` checks
//! the committed file against the trace, and rewrites it when run with `SPILLWAY_WRITE_FIT=1`.
//!
//! What is fitted:
//! - the arrival rate (jobs per hour over the trace's span), with multipliers per hour of day and
//!   per day of week (UTC; mean 1 each): the synthetic generator draws a Poisson process whose
//!   rate is `jobs_per_hour × hour_of_day[h] × day_of_week[d]`;
//! - the share of each GPU count;
//! - per GPU count, a log-normal run time: the mean and standard deviation of ln(hours), with run
//!   times under one minute counted as one minute.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::philly::read_philly;

/// The committed fitted figures (`scenarios/philly-fit.toml`).
pub const BUILTIN_FIT: &str = include_str!("../../../scenarios/philly-fit.toml");

/// Figures fitted to a job trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhillyFit {
    /// Where the figures come from.
    pub source: String,
    /// Jobs in the trace.
    pub jobs: u64,
    /// Hours from the first submission to the last.
    pub span_hours: f64,
    /// Mean submissions per hour.
    pub jobs_per_hour: f64,
    /// Rate multiplier per UTC hour of day (24 values, mean 1).
    pub hour_of_day: Vec<f64>,
    /// Rate multiplier per day of week, Monday first (7 values, mean 1).
    pub day_of_week: Vec<f64>,
    /// GPU counts, their shares and run-time distributions.
    pub gpus: Vec<GpuClass>,
}

/// One GPU count of a fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuClass {
    /// GPUs per job.
    pub gpus: u32,
    /// Jobs with this count.
    pub jobs: u64,
    /// Share of all jobs.
    pub share: f64,
    /// Mean of ln(run time in hours).
    pub log_mean_hours: f64,
    /// Standard deviation of ln(run time in hours).
    pub log_sd_hours: f64,
}

/// Rounds to 6 significant digits so the committed file is stable and readable.
fn sig6(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let mag = x.abs().log10().floor() as i32;
    let scale = 10f64.powi(5 - mag);
    (x * scale).round() / scale
}

impl PhillyFit {
    /// The committed figures.
    pub fn builtin() -> PhillyFit {
        PhillyFit::parse(BUILTIN_FIT).expect("scenarios/philly-fit.toml is valid")
    }

    /// Parses and checks a fit file.
    pub fn parse(text: &str) -> Result<PhillyFit, String> {
        let fit: PhillyFit = toml::from_str(text).map_err(|e| e.to_string())?;
        if fit.hour_of_day.len() != 24 || fit.hour_of_day.iter().any(|v| !v.is_finite() || *v < 0.0) {
            return Err("hour_of_day: needs 24 multipliers ≥ 0".into());
        }
        if fit.day_of_week.len() != 7 || fit.day_of_week.iter().any(|v| !v.is_finite() || *v < 0.0) {
            return Err("day_of_week: needs 7 multipliers ≥ 0".into());
        }
        if fit.gpus.is_empty() {
            return Err("gpus: needs at least one class".into());
        }
        for (i, g) in fit.gpus.iter().enumerate() {
            let ok = g.gpus > 0
                && g.share.is_finite()
                && g.share >= 0.0
                && g.log_mean_hours.is_finite()
                && g.log_sd_hours.is_finite()
                && g.log_sd_hours >= 0.0;
            if !ok {
                return Err(format!("gpus[{i}]: gpus ≥ 1, share ≥ 0 and finite log-normal parameters required"));
            }
        }
        if !(fit.jobs_per_hour.is_finite() && fit.jobs_per_hour > 0.0) {
            return Err("jobs_per_hour: must be > 0".into());
        }
        Ok(fit)
    }

    /// Fits the figures to a Philly CSV.
    pub fn from_csv(path: &Path) -> Result<PhillyFit, String> {
        let rows = read_philly(path).map_err(|e| e.to_string())?;
        if rows.is_empty() {
            return Err(format!("{}: no jobs", path.display()));
        }
        let first = rows.iter().map(|r| r.submit_s).min().unwrap_or(0);
        let last = rows.iter().map(|r| r.submit_s).max().unwrap_or(0);
        let span_hours = ((last - first) as f64 / 3600.0).max(1.0);
        let n = rows.len() as f64;
        let mut hours = [0f64; 24];
        let mut days = [0f64; 7];
        let mut classes: std::collections::BTreeMap<u32, Vec<f64>> = std::collections::BTreeMap::new();
        for r in &rows {
            let h = r.submit_s.rem_euclid(86_400) / 3600;
            // 1970-01-01 was a Thursday: day 0 = Monday.
            let d = (r.submit_s.div_euclid(86_400) + 3).rem_euclid(7);
            hours[h as usize] += 1.0;
            days[d as usize] += 1.0;
            classes.entry(r.gpus).or_default().push((r.duration_s.max(60.0) / 3600.0).ln());
        }
        let gpus = classes
            .into_iter()
            .map(|(gpus, logs)| {
                let k = logs.len() as f64;
                let mean = logs.iter().sum::<f64>() / k;
                let var = logs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / k;
                GpuClass {
                    gpus,
                    jobs: logs.len() as u64,
                    share: sig6(k / n),
                    log_mean_hours: sig6(mean),
                    log_sd_hours: sig6(var.sqrt()),
                }
            })
            .collect();
        Ok(PhillyFit {
            source: "Microsoft Philly trace (philly.csv, 2017-09 to 2017-12, CC-BY-4.0), fitted by simulator/src/whatif/fit.rs".into(),
            jobs: rows.len() as u64,
            span_hours: sig6(span_hours),
            jobs_per_hour: sig6(n / span_hours),
            hour_of_day: hours.iter().map(|c| sig6(c / (n / 24.0))).collect(),
            day_of_week: days.iter().map(|c| sig6(c / (n / 7.0))).collect(),
            gpus,
        })
    }

    /// The file's text, with a header naming the source and how to regenerate it.
    pub fn to_toml(&self) -> String {
        let body = toml::to_string(self).expect("a fit always serialises");
        format!(
            "# Figures fitted to the Philly GPU cluster trace (Microsoft, 2017, CC-BY-4.0; see\n\
             # ../shared/data/jobs/LICENSE.philly-traces), kept as our own data so the synthetic workload\n\
             # needs no trace. Derived by PhillyFit::from_csv (simulator/src/whatif/fit.rs); regenerate with\n\
             #   SPILLWAY_WRITE_FIT=1 cargo test -p simulator --test whatif philly_fit\n\
             # Run times: log-normal per GPU count, ln(hours) mean and sd; rates: per UTC hour and weekday.\n\n{body}"
        )
    }

    /// The largest rate multiplier (for thinning).
    pub fn peak_multiplier(&self) -> f64 {
        let h = self.hour_of_day.iter().copied().fold(0.0, f64::max);
        let d = self.day_of_week.iter().copied().fold(0.0, f64::max);
        h * d
    }

    /// Mean GPU-hours per job under the fit (before any caps), for sizing a scenario's load.
    pub fn mean_gpu_hours(&self) -> f64 {
        let total: f64 = self.gpus.iter().map(|g| g.share).sum();
        self.gpus
            .iter()
            .map(|g| g.share / total * g.gpus as f64 * (g.log_mean_hours + g.log_sd_hours.powi(2) / 2.0).exp())
            .sum()
    }
}
