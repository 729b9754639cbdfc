//! GPU inventory and utilisation from `nvidia-smi` (the NVML command line that ships with the
//! driver). Without it, or when it fails, GPUs are reported as absent (`None`), never as zeros: a
//! VM whose utilisation is unknown must not look idle.

use std::time::Duration;

use scheduler::agents::protocol::{GpuInfo, GpuSample};

/// The fields queried, in order.
const QUERY: &str = "index,name,utilization.gpu,memory.used,memory.total";

/// Runs `nvidia-smi` (or the configured program).
#[derive(Debug, Clone)]
pub struct Gpus {
    program: String,
}

/// One row of the query.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuRow {
    /// Index.
    pub index: u32,
    /// Model name.
    pub name: String,
    /// Utilisation, percent (absent when the driver says `[N/A]`).
    pub utilization: Option<f64>,
    /// Memory used, MiB.
    pub memory_used_mib: Option<u64>,
    /// Memory in all, MiB.
    pub memory_total_mib: Option<u64>,
}

impl Gpus {
    /// A reader running `program`.
    pub fn new(program: &str) -> Gpus {
        Gpus { program: program.to_string() }
    }

    /// One query; `None` when the program is missing, fails, or prints nothing usable.
    pub async fn query(&self) -> Option<Vec<GpuRow>> {
        let run = tokio::process::Command::new(&self.program)
            .args([&format!("--query-gpu={QUERY}"), "--format=csv,noheader,nounits"])
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(10), run).await.ok()?.ok()?;
        if !out.status.success() {
            return None;
        }
        let rows = parse(&String::from_utf8_lossy(&out.stdout));
        if rows.is_empty() { None } else { Some(rows) }
    }

    /// The GPUs, for the registration.
    pub async fn inventory(&self) -> Option<Vec<GpuInfo>> {
        self.query().await.map(|rows| {
            rows.into_iter()
                .map(|r| GpuInfo { index: r.index, name: r.name, memory_total_mib: r.memory_total_mib })
                .collect()
        })
    }

    /// Utilisation samples; GPUs whose utilisation the driver cannot tell are left out.
    pub async fn samples(&self) -> Option<Vec<GpuSample>> {
        let rows = self.query().await?;
        let samples: Vec<GpuSample> = rows
            .into_iter()
            .filter_map(|r| {
                Some(GpuSample {
                    index: r.index,
                    utilization_percent: r.utilization?,
                    memory_used_mib: r.memory_used_mib?,
                    memory_total_mib: r.memory_total_mib?,
                })
            })
            .collect();
        if samples.is_empty() { None } else { Some(samples) }
    }
}

/// Parses `nvidia-smi --format=csv,noheader,nounits` output; rows that do not parse are skipped.
pub fn parse(text: &str) -> Vec<GpuRow> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            if f.len() != 5 {
                return None;
            }
            Some(GpuRow {
                index: f[0].parse().ok()?,
                name: f[1].to_string(),
                utilization: f[2].parse::<f64>().ok().filter(|u| u.is_finite() && (0.0..=100.0).contains(u)),
                memory_used_mib: f[3].parse().ok(),
                memory_total_mib: f[4].parse().ok(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rows_and_leaves_unknown_values_absent() {
        let rows = parse("0, NVIDIA A100 80GB PCIe, 37, 1234, 81920\n1, NVIDIA A100 80GB PCIe, [N/A], 0, 81920\nbad\n");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].utilization, Some(37.0));
        assert_eq!(rows[0].memory_total_mib, Some(81920));
        assert_eq!(rows[1].utilization, None, "[N/A] is unknown, not zero");
    }

    #[tokio::test]
    async fn a_missing_program_means_no_telemetry() {
        let g = Gpus::new("/nonexistent/nvidia-smi");
        assert_eq!(g.samples().await, None);
        assert_eq!(g.inventory().await, None);
    }
}
