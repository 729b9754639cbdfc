//! Spot traces: the file format of `../shared/data/spot` and its resampling to the experiment's tick.
//!
//! A trace file is `{"metadata": {"gap_seconds": N, ...}, "data": [v0, v1, ...]}`: one value per
//! sample of `N` seconds. Sample `j` covers `[j·N, (j+1)·N)` seconds from the start of the trace.
//! A price trace has the same shape with a `"prices"` array (USD per VM-hour) instead of `"data"`.
//!
//! Resampling to ticks of `T` seconds: tick `k` covers `[k·T, (k+1)·T)`. Only whole ticks are kept
//! (`floor(len·N / T)` of them).
//! - Availability: a tick is available only if *every* sample overlapping it is available. A spot VM
//!   that exists for part of a tick would be lost within it, so the conservative reading is the
//!   one that never credits capacity the trace did not show.
//! - Prices: the time-weighted mean of the samples overlapping the tick.

use std::path::Path;

use serde::Deserialize;

/// How the numbers of an availability trace read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceConvention {
    /// The value counts spot instances alive (`1`/`0` in the single-instance traces, `0..=16` in the
    /// 16-node traces): the tick is available when the value is at least the region's
    /// `min_available_count` (default 1, i.e. one live instance is enough for a one-VM job).
    Available,
    /// The value counts preemptions: `0` means available, any value `≥ 1` means not available.
    Preempted,
}

/// The header every trace file carries.
#[derive(Debug, Deserialize)]
struct Metadata {
    gap_seconds: f64,
}

#[derive(Debug, Deserialize)]
struct AvailabilityFile {
    metadata: Metadata,
    data: Vec<f64>,
}

#[derive(Debug, Deserialize)]
struct PriceFile {
    metadata: Metadata,
    prices: Vec<f64>,
}

/// Reads an availability trace and resamples it to `tick_seconds`: `true` = spot available in that tick.
///
/// `min_count` is the value at or above which a sample reads as available under
/// [`TraceConvention::Available`]; it is ignored under [`TraceConvention::Preempted`].
pub fn load_availability(
    path: &Path,
    convention: TraceConvention,
    min_count: f64,
    tick_seconds: f64,
) -> Result<Vec<bool>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let file: AvailabilityFile = serde_json::from_str(&text).map_err(|e| {
        format!(
            "{} is not a spot trace ({{\"metadata\": {{\"gap_seconds\": N}}, \"data\": [...]}}): {e}",
            path.display()
        )
    })?;
    check_gap(path, file.metadata.gap_seconds)?;
    let samples: Vec<bool> = file
        .data
        .iter()
        .map(|&v| match convention {
            TraceConvention::Available => v >= min_count,
            TraceConvention::Preempted => v < 1.0,
        })
        .collect();
    Ok(resample_availability(&samples, file.metadata.gap_seconds, tick_seconds))
}

/// Reads a spot price trace (`"prices"`, USD per VM-hour) and resamples it to `tick_seconds`.
pub fn load_prices(path: &Path, tick_seconds: f64) -> Result<Vec<f64>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let file: PriceFile = serde_json::from_str(&text).map_err(|e| {
        format!(
            "{} is not a price trace ({{\"metadata\": {{\"gap_seconds\": N}}, \"prices\": [...]}}): {e}",
            path.display()
        )
    })?;
    check_gap(path, file.metadata.gap_seconds)?;
    if let Some((i, p)) = file.prices.iter().enumerate().find(|(_, p)| !p.is_finite() || **p < 0.0) {
        return Err(format!("{}: prices[{i}] = {p} is not a price (a finite number ≥ 0)", path.display()));
    }
    Ok(resample_prices(&file.prices, file.metadata.gap_seconds, tick_seconds))
}

fn check_gap(path: &Path, gap: f64) -> Result<(), String> {
    if gap.is_finite() && gap > 0.0 {
        Ok(())
    } else {
        Err(format!("{}: metadata.gap_seconds must be a positive number, got {gap}", path.display()))
    }
}

/// The samples (index range) that overlap tick `k`, or `None` when the tick runs past the trace.
fn overlapping(k: usize, len: usize, gap: f64, tick: f64) -> Option<(usize, usize, f64, f64)> {
    let start = k as f64 * tick;
    let end = start + tick;
    if end > len as f64 * gap + 1e-9 {
        return None;
    }
    let first = (start / gap + 1e-9).floor() as usize;
    // The last sample whose interval starts strictly before the end of the tick.
    let last = (((end / gap) - 1e-9).ceil() as usize).saturating_sub(1).max(first).min(len - 1);
    Some((first, last, start, end))
}

/// Resamples availability samples of `gap` seconds to ticks of `tick` seconds (see the module doc).
pub fn resample_availability(samples: &[bool], gap: f64, tick: f64) -> Vec<bool> {
    let mut out = Vec::new();
    if samples.is_empty() {
        return out;
    }
    let mut k = 0;
    while let Some((first, last, _, _)) = overlapping(k, samples.len(), gap, tick) {
        out.push(samples[first..=last].iter().all(|&a| a));
        k += 1;
    }
    out
}

/// Resamples prices of `gap` seconds to ticks of `tick` seconds by time-weighted mean.
pub fn resample_prices(samples: &[f64], gap: f64, tick: f64) -> Vec<f64> {
    let mut out = Vec::new();
    if samples.is_empty() {
        return out;
    }
    let mut k = 0;
    while let Some((first, last, start, end)) = overlapping(k, samples.len(), gap, tick) {
        let mut sum = 0.0;
        for (j, price) in samples.iter().enumerate().take(last + 1).skip(first) {
            let lo = (j as f64 * gap).max(start);
            let hi = ((j + 1) as f64 * gap).min(end);
            sum += price * (hi - lo).max(0.0);
        }
        out.push(sum / tick);
        k += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarser_ticks_are_available_only_when_every_sample_is() {
        // 300 s samples into 600 s ticks: pairs.
        let s = [true, true, true, false, false, true, true];
        assert_eq!(resample_availability(&s, 300.0, 600.0), vec![true, false, false]);
    }

    #[test]
    fn finer_ticks_repeat_samples_and_partial_overlaps_count() {
        let s = [true, false];
        assert_eq!(resample_availability(&s, 600.0, 300.0), vec![true, true, false, false]);
        // 600 s samples into 900 s ticks: tick 0 = [0,900) overlaps samples 0 and 1.
        let s = [true, false, true];
        assert_eq!(resample_availability(&s, 600.0, 900.0), vec![false, false]);
    }

    #[test]
    fn prices_are_time_weighted() {
        let p = [1.0, 3.0, 5.0];
        assert_eq!(resample_prices(&p, 600.0, 1200.0), vec![2.0]);
        assert_eq!(resample_prices(&p, 600.0, 600.0), vec![1.0, 3.0, 5.0]);
    }

    #[test]
    fn conventions_read_counts() {
        let dir = std::env::temp_dir().join(format!("spillway-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t.json");
        std::fs::write(&f, r#"{"metadata": {"gap_seconds": 600, "note": "x"}, "data": [0, 1, 16, 3]}"#).unwrap();
        let a = load_availability(&f, TraceConvention::Available, 1.0, 600.0).unwrap();
        assert_eq!(a, vec![false, true, true, true]);
        let a = load_availability(&f, TraceConvention::Available, 4.0, 600.0).unwrap();
        assert_eq!(a, vec![false, false, true, false]);
        let a = load_availability(&f, TraceConvention::Preempted, 1.0, 600.0).unwrap();
        assert_eq!(a, vec![true, false, false, false]);
        std::fs::write(&f, r#"{"metadata": {"gap_seconds": 0}, "data": [1]}"#).unwrap();
        assert!(load_availability(&f, TraceConvention::Available, 1.0, 600.0).unwrap_err().contains("gap_seconds"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
