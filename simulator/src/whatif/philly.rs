//! The Philly job trace's reader (Microsoft's Philly GPU cluster, Sept–Dec 2017, CC-BY-4.0):
//! `timestamp,duration,num_gpus,gpu_time,cluster` rows, read by both the trace workload
//! ([`super::workload`]) and the fit derived from it ([`super::fit`]).

use std::io::BufRead;
use std::path::Path;

use super::WhatIfError;

/// One row of the Philly CSV.
#[derive(Debug, Clone, PartialEq)]
pub struct PhillyRow {
    /// Submission, Unix seconds (the trace's times are read as UTC).
    pub submit_s: i64,
    /// Run time, seconds.
    pub duration_s: f64,
    /// GPUs.
    pub gpus: u32,
    /// Virtual cluster id.
    pub cluster: String,
}

/// Reads the Philly CSV (`timestamp,duration,num_gpus,gpu_time,cluster`); blank lines are skipped,
/// a malformed line is an error naming its line number.
pub fn read_philly(path: &Path) -> Result<Vec<PhillyRow>, WhatIfError> {
    let file = std::fs::File::open(path).map_err(|e| WhatIfError::io("Philly job trace", path, &e))?;
    let fmt = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    let mut rows = Vec::new();
    let origin = path.display().to_string();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| WhatIfError::io("Philly job trace", path, &e))?;
        let line = line.trim();
        if i == 0 {
            if !line.starts_with("timestamp,duration,num_gpus") {
                return Err(WhatIfError::invalid(
                    &origin,
                    "line 1",
                    "expected the header timestamp,duration,num_gpus,gpu_time,cluster",
                ));
            }
            continue;
        }
        if line.is_empty() {
            continue;
        }
        let bad = |what: &str| WhatIfError::invalid(&origin, &format!("line {}", i + 1), what.to_string());
        let cols: Vec<&str> = line.split(',').collect();
        if cols.len() < 5 {
            return Err(bad("expected 5 columns"));
        }
        let t = time::PrimitiveDateTime::parse(cols[0], &fmt)
            .map_err(|_| bad("timestamp: expected YYYY-MM-DD hh:mm:ss"))?;
        let duration_s: f64 = cols[1].parse().map_err(|_| bad("duration: expected seconds"))?;
        let gpus: u32 = cols[2].parse().map_err(|_| bad("num_gpus: expected an integer"))?;
        if !duration_s.is_finite() || duration_s < 0.0 {
            return Err(bad("duration: expected seconds ≥ 0"));
        }
        rows.push(PhillyRow {
            submit_s: t.assume_utc().unix_timestamp(),
            duration_s,
            gpus: gpus.max(1),
            cluster: cols[4].to_string(),
        });
    }
    Ok(rows)
}
