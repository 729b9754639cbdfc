//! Synthetic problems for benchmarks and property tests: deterministic (same parameters and seed, same
//! problem), shaped like an ML platform's queue on Azure GPUs.
//!
//! Offers: up to 8 US regions × up to 30 GPU sizes (A100, H100, H200, MI300X, V100, P100, P40, T4, A10,
//! M60 shapes with list-like prices) × regular and spot. Regional prices vary by ±20 %; spot costs 20–45 %
//! of regular and is evicted 1–20 % per hour; about a quarter of the offers have a known, small capacity.
//! Quota: each region lists `cores`, `lowPriorityCores` and every family, sized so that all pools
//! together hold `quota_fraction` × the vCPUs the queue would need on its cheapest shapes (below 1 =
//! tight). Jobs: gang training runs (8–64 GPUs, A100/H100/V100, mostly regular, some with NVLink-sized
//! `min_gpus_per_vm`, price caps, budgets and data regions), small gang inference jobs, and non-gang
//! batch work that may use spot. Jobs are copies of `60 + jobs / 100` random shapes, so the queue has many
//! identical jobs, as real queues do.
//!
//! [`diverse`] draws a queue that does not repeat (issue #17's distribution): every job has its own
//! priority, duration, GPU-model set and region list, so no two jobs collapse into one class.

use crate::priority::{Priority, SpotPolicy};
use crate::problem::{Egress, JobDemand, Offer, Problem, QuotaLimit};

/// The 8 regions, in the order they are used.
pub const REGIONS: [&str; 8] =
    ["eastus", "eastus2", "southcentralus", "westus2", "westus3", "centralus", "northcentralus", "westus"];

/// (size, GPU model, GPUs per VM, vCPUs per VM, family, USD per hour in the reference region).
pub const SIZES: [(&str, &str, u32, u32, &str, f64); 30] = [
    ("Standard_NC24ads_A100_v4", "A100-80GB", 1, 24, "standardNCADSA100v4Family", 3.673),
    ("Standard_NC48ads_A100_v4", "A100-80GB", 2, 48, "standardNCADSA100v4Family", 7.346),
    ("Standard_NC96ads_A100_v4", "A100-80GB", 4, 96, "standardNCADSA100v4Family", 14.692),
    ("Standard_ND96amsr_A100_v4", "A100-80GB", 8, 96, "standardNDAMSv4_A100Family", 32.77),
    ("Standard_ND96asr_v4", "A100-40GB", 8, 96, "standardNDASv4_A100Family", 27.197),
    ("Standard_NC40ads_H100_v5", "H100", 1, 40, "standardNCadsH100v5Family", 6.98),
    ("Standard_NC80adis_H100_v5", "H100", 2, 80, "standardNCadsH100v5Family", 13.96),
    ("Standard_ND96isr_H100_v5", "H100", 8, 96, "standardNDSH100v5Family", 98.32),
    ("Standard_ND96isr_H200_v5", "H200", 8, 96, "standardNDH200v5Family", 110.0),
    ("Standard_ND96isr_MI300X_v5", "MI300X", 8, 96, "standardNDMI300Xv5Family", 48.0),
    ("Standard_NC6s_v3", "V100", 1, 6, "standardNCSv3Family", 3.06),
    ("Standard_NC12s_v3", "V100", 2, 12, "standardNCSv3Family", 6.12),
    ("Standard_NC24s_v3", "V100", 4, 24, "standardNCSv3Family", 12.24),
    ("Standard_NC24rs_v3", "V100", 4, 24, "standardNCSv3Family", 13.46),
    ("Standard_ND40rs_v2", "V100", 8, 40, "standardNDSv2Family", 22.03),
    ("Standard_NC6s_v2", "P100", 1, 6, "standardNCSv2Family", 2.07),
    ("Standard_NC12s_v2", "P100", 2, 12, "standardNCSv2Family", 4.14),
    ("Standard_NC24s_v2", "P100", 4, 24, "standardNCSv2Family", 8.28),
    ("Standard_ND6s", "P40", 1, 6, "standardNDSFamily", 2.07),
    ("Standard_ND12s", "P40", 2, 12, "standardNDSFamily", 4.14),
    ("Standard_ND24s", "P40", 4, 24, "standardNDSFamily", 8.28),
    ("Standard_NC4as_T4_v3", "T4", 1, 4, "standardNCASv3_T4Family", 0.526),
    ("Standard_NC8as_T4_v3", "T4", 1, 8, "standardNCASv3_T4Family", 0.752),
    ("Standard_NC16as_T4_v3", "T4", 1, 16, "standardNCASv3_T4Family", 1.204),
    ("Standard_NC64as_T4_v3", "T4", 4, 64, "standardNCASv3_T4Family", 4.352),
    ("Standard_NV36ads_A10_v5", "A10", 1, 36, "standardNVADSA10v5Family", 3.2),
    ("Standard_NV72ads_A10_v5", "A10", 2, 72, "standardNVADSA10v5Family", 6.52),
    ("Standard_NV12s_v3", "M60", 1, 12, "standardNVSv3Family", 1.14),
    ("Standard_NV24s_v3", "M60", 2, 24, "standardNVSv3Family", 2.28),
    ("Standard_NV48s_v3", "M60", 4, 48, "standardNVSv3Family", 4.56),
];

/// What to generate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GenParams {
    /// Pending jobs.
    pub jobs: usize,
    /// Regions, 1 to 8 (the first of [`REGIONS`]).
    pub regions: usize,
    /// Sizes, 1 to 30 (the first of [`SIZES`]).
    pub sizes: usize,
    /// Total quota as a fraction of the vCPUs the queue needs: below 1 the quota is tight.
    pub quota_fraction: f64,
    /// Random seed.
    pub seed: u64,
}

impl GenParams {
    /// The benchmark shape: 8 regions × 30 sizes × 2 priorities with tight quota (40 % of demand).
    pub fn bench(jobs: usize, seed: u64) -> GenParams {
        GenParams { jobs, regions: 8, sizes: 30, quota_fraction: 0.4, seed }
    }
}

/// splitmix64: tiny, fast and good enough for test data; no dependency needed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

fn round(x: f64, step: f64) -> f64 {
    (x / step).round() * step
}

/// A problem with the given shape; see the module documentation for what it contains.
pub fn generate(params: &GenParams) -> Problem {
    let mut rng = Rng(params.seed ^ 0x5EED_0F5E_113A_7E00);
    let regions: Vec<&str> = REGIONS[..params.regions.clamp(1, 8)].to_vec();
    let sizes = &SIZES[..params.sizes.clamp(1, 30)];
    let region_factor: Vec<f64> = regions.iter().map(|_| 0.85 + 0.35 * rng.unit()).collect();

    let mut offers = Vec::new();
    for (r, region) in regions.iter().enumerate() {
        for &(size, model, gpus, vcpus, family, base) in sizes {
            let regular = round(base * region_factor[r] * (0.95 + 0.1 * rng.unit()), 0.001);
            let spot = round(regular * (0.2 + 0.25 * rng.unit()), 0.001);
            for (priority, price, rate) in
                [(Priority::Regular, regular, 0.0), (Priority::Spot, spot, round(0.01 + 0.19 * rng.unit(), 0.001))]
            {
                let capacity_vms = rng.chance(0.25).then(|| rng.below(12) as u32);
                offers.push(Offer {
                    region: region.to_string(),
                    size: size.to_string(),
                    priority,
                    gpu_model: model.to_string(),
                    gpus_per_vm: gpus,
                    vcpus_per_vm: vcpus,
                    family: family.to_string(),
                    price_per_hour: price,
                    capacity_vms,
                    eviction_rate_per_hour: rate,
                });
            }
        }
    }

    let models: Vec<&str> = {
        let mut m: Vec<&str> = sizes.iter().map(|s| s.1).collect();
        m.dedup();
        m
    };
    let region_sets: Vec<Option<Vec<String>>> = vec![
        None,
        None,
        Some(regions.iter().take(2).map(|s| s.to_string()).collect()),
        Some(regions.iter().rev().take(3).map(|s| s.to_string()).collect()),
    ];
    // Job shapes (templates) first; jobs then draw from them, so that the queue holds many identical
    // jobs. The number of shapes grows slowly with the queue: 60 + jobs / 100.
    let shapes = params.jobs.min(60 + params.jobs / 100);
    let mut templates = Vec::with_capacity(shapes);
    for _ in 0..shapes {
        let kind = rng.below(10);
        let mut job = JobDemand { regions: rng.pick(&region_sets).clone(), ..JobDemand::default() };
        if rng.chance(0.1) {
            job.deny_regions = vec![rng.pick(&regions).to_string()];
        }
        job.duration_hours = *rng.pick(&[1.0, 2.0, 4.0, 8.0, 24.0]);
        if kind < 3 {
            // Gang training.
            job.gpus = *rng.pick(&[8, 8, 16, 32, 64, 4]);
            job.gpu_models = match rng.below(4) {
                0 => vec!["A100-80GB".into()],
                1 => vec!["A100-80GB".into(), "A100-40GB".into()],
                2 => vec!["H100".into()],
                _ => vec!["V100".into()],
            };
            job.priority = *rng.pick(&[10, 20, 50, 100]);
            job.spot = if rng.chance(0.2) { SpotPolicy::Allowed } else { SpotPolicy::Never };
            if rng.chance(0.3) {
                job.min_gpus_per_vm = Some(8);
            }
            if rng.chance(0.3) {
                job.max_price_per_hour = Some(f64::from(job.gpus) * *rng.pick(&[3.0, 4.5, 6.0]));
            }
            if rng.chance(0.2) {
                job.budget = Some(f64::from(job.gpus) * job.duration_hours * *rng.pick(&[3.0, 5.0]));
            }
            if rng.chance(0.3) {
                job.data_region = Some(rng.pick(&regions).to_string());
                job.data_gb = Some(*rng.pick(&[500.0, 2000.0, 10000.0]));
            }
        } else if kind < 5 {
            // Small gang inference.
            job.gpus = *rng.pick(&[1, 1, 2, 4]);
            job.gpu_models = vec![rng.pick(&models).to_string()];
            job.priority = *rng.pick(&[20, 50]);
        } else {
            // Non-gang batch work.
            job.gang = false;
            job.gpus = *rng.pick(&[1, 2, 4, 8, 16]);
            job.gpu_models = if rng.chance(0.5) {
                vec![rng.pick(&models).to_string()]
            } else {
                vec![rng.pick(&models).to_string(), rng.pick(&models).to_string()]
            };
            job.priority = *rng.pick(&[1, 2, 5]);
            job.spot = *rng.pick(&[SpotPolicy::Allowed, SpotPolicy::Preferred, SpotPolicy::Never]);
            if rng.chance(0.2) {
                job.max_price_per_hour = Some(f64::from(job.gpus) * *rng.pick(&[1.0, 2.0]));
            }
            if rng.chance(0.2) {
                job.data_region = Some(rng.pick(&regions).to_string());
                job.data_gb = Some(*rng.pick(&[100.0, 1000.0]));
            }
        }
        templates.push(job);
    }
    let mut jobs = Vec::with_capacity(params.jobs);
    let mut demand_vcpus = 0.0;
    for i in 0..params.jobs {
        let mut job = rng.pick(&templates).clone();
        job.id = format!("job-{i:05}");
        demand_vcpus += f64::from(job.gpus) * 12.0;
        jobs.push(job);
    }

    // Quota: split the total over regions and, per region, over cores / lowPriorityCores / families.
    let mut quotas = Vec::new();
    let per_region = params.quota_fraction * demand_vcpus / regions.len() as f64;
    let mut families: Vec<&str> = sizes.iter().map(|s| s.4).collect();
    families.sort_unstable();
    families.dedup();
    for region in &regions {
        let cores = (per_region * (0.5 + rng.unit())).round() as u64;
        quotas.push(QuotaLimit { region: region.to_string(), pool: "cores".into(), vcpus: cores });
        quotas.push(QuotaLimit {
            region: region.to_string(),
            pool: "lowPriorityCores".into(),
            vcpus: (per_region * 0.5 * rng.unit()).round() as u64,
        });
        for family in &families {
            let share = 4.0 * rng.unit() / families.len() as f64;
            quotas.push(QuotaLimit {
                region: region.to_string(),
                pool: family.to_string(),
                vcpus: (cores as f64 * share).round() as u64 / 8 * 8,
            });
        }
    }

    let mut egress = Vec::new();
    for from in &regions {
        for to in &regions {
            if from != to && rng.chance(0.5) {
                egress.push(Egress {
                    from: from.to_string(),
                    to: to.to_string(),
                    usd_per_gb: *rng.pick(&[0.01, 0.02, 0.05]),
                });
            }
        }
    }
    Problem { offers, quotas, jobs, egress }
}

/// What [`diverse`] generates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiverseParams {
    /// Pending jobs.
    pub jobs: usize,
    /// Regions, 1 to 8 (the first of [`REGIONS`]).
    pub regions: usize,
    /// Random seed.
    pub seed: u64,
}

impl DiverseParams {
    /// `jobs` jobs over `jobs / 20 + 1` regions, at least 2 and at most 8 ("fewer in the small ones").
    pub fn new(jobs: usize, seed: u64) -> DiverseParams {
        DiverseParams { jobs, regions: (jobs / 20 + 1).clamp(2, 8), seed }
    }
}

/// The sizes of [`diverse`]: (size, GPU model, GPUs per VM, vCPUs per VM, family, USD per VM-hour in the
/// reference region). Five models; 1, 2, 4 or 8 GPUs per VM; every family shared by two or more sizes.
pub const DIVERSE_SIZES: [(&str, &str, u32, u32, &str, f64); 30] = [
    ("Standard_NC24ads_A100_v4", "A100-80GB", 1, 24, "standardNCADSA100v4Family", 3.673),
    ("Standard_NC48ads_A100_v4", "A100-80GB", 2, 48, "standardNCADSA100v4Family", 7.346),
    ("Standard_NC96ads_A100_v4", "A100-80GB", 4, 96, "standardNCADSA100v4Family", 14.692),
    ("Standard_ND48amsr_A100_v4", "A100-80GB", 4, 48, "standardNDAMSv4_A100Family", 16.385),
    ("Standard_ND96amsr_A100_v4", "A100-80GB", 8, 96, "standardNDAMSv4_A100Family", 32.77),
    ("Standard_ND96asr_A100_v4", "A100-80GB", 8, 96, "standardNDAMSv4_A100Family", 30.2),
    ("Standard_NC40ads_H100_v5", "H100", 1, 40, "standardNCadsH100v5Family", 6.98),
    ("Standard_NC80adis_H100_v5", "H100", 2, 80, "standardNCadsH100v5Family", 13.96),
    ("Standard_NC160adis_H100_v5", "H100", 4, 160, "standardNCadsH100v5Family", 27.92),
    ("Standard_ND48isr_H100_v5", "H100", 4, 48, "standardNDSH100v5Family", 49.16),
    ("Standard_ND96isr_H100_v5", "H100", 8, 96, "standardNDSH100v5Family", 98.32),
    ("Standard_ND96is_H100_v5", "H100", 8, 96, "standardNDSH100v5Family", 92.0),
    ("Standard_NC6s_v3", "V100", 1, 6, "standardNCSv3Family", 3.06),
    ("Standard_NC12s_v3", "V100", 2, 12, "standardNCSv3Family", 6.12),
    ("Standard_NC24s_v3", "V100", 4, 24, "standardNCSv3Family", 12.24),
    ("Standard_NC24rs_v3", "V100", 4, 24, "standardNCSv3Family", 13.46),
    ("Standard_ND20rs_v2", "V100", 4, 20, "standardNDSv2Family", 11.5),
    ("Standard_ND40rs_v2", "V100", 8, 40, "standardNDSv2Family", 22.03),
    ("Standard_NV36ads_A10_v5", "A10", 1, 36, "standardNVADSA10v5Family", 3.2),
    ("Standard_NV72ads_A10_v5", "A10", 2, 72, "standardNVADSA10v5Family", 6.52),
    ("Standard_NV18ads_A10_v5", "A10", 1, 18, "standardNVADSA10v5Family", 1.6),
    ("Standard_NC32ads_A10_v4", "A10", 4, 32, "standardNCADSA10v4Family", 6.4),
    ("Standard_NC64ads_A10_v4", "A10", 8, 64, "standardNCADSA10v4Family", 12.8),
    ("Standard_NC16ads_A10_v4", "A10", 2, 16, "standardNCADSA10v4Family", 3.3),
    ("Standard_NC4as_T4_v3", "T4", 1, 4, "standardNCASv3_T4Family", 0.526),
    ("Standard_NC8as_T4_v3", "T4", 1, 8, "standardNCASv3_T4Family", 0.752),
    ("Standard_NC16as_T4_v3", "T4", 1, 16, "standardNCASv3_T4Family", 1.204),
    ("Standard_NC64as_T4_v3", "T4", 4, 64, "standardNCASv3_T4Family", 4.352),
    ("Standard_NC32as_T4_v4", "T4", 2, 32, "standardNCT4v4Family", 2.4),
    ("Standard_NC128as_T4_v4", "T4", 8, 128, "standardNCT4v4Family", 9.6),
];

/// A queue that does not repeat (issue #17's distribution). Offers: `regions` × the 30
/// [`DIVERSE_SIZES`], about 20 % of (region, size) pairs not sold, regional prices ±20 %, spot on
/// about 70 % at 10–40 % of the regular price (evicted 1–20 % per hour), capacity unknown or 2–40 VMs
/// (each half the time). Quota, every pool listed: each family's regional limit one of 0 / 48 / 96 /
/// 192 / 384 / 768 vCPUs, `cores` 200–1,600, `lowPriorityCores` 0–600. Jobs, all gang and independent:
/// GPUs from {1, 1, 2, 4, 8, 8, 16, 32, 64}, 1–3 acceptable models, priority uniform 1–100, duration
/// uniform 0.5–48 h, half with an allow-list of 1–3 regions, 30 % with a price cap (0.5–10 USD per
/// GPU-hour), spot `never` / `allowed` / `preferred` a third each.
pub fn diverse(params: &DiverseParams) -> Problem {
    let mut rng = Rng(params.seed ^ 0xD1CE_5EED_0017_0017);
    let regions: Vec<&str> = REGIONS[..params.regions.clamp(1, 8)].to_vec();
    let mut offers = Vec::new();
    for region in &regions {
        let factor = 0.85 + 0.35 * rng.unit();
        for &(size, model, gpus, vcpus, family, base) in &DIVERSE_SIZES {
            if rng.chance(0.2) {
                continue;
            }
            let regular = round(base * factor * (0.95 + 0.1 * rng.unit()), 0.001);
            let capacity = |rng: &mut Rng| rng.chance(0.5).then(|| 2 + rng.below(39) as u32);
            let offer = |priority, price_per_hour, capacity_vms, eviction_rate_per_hour| Offer {
                region: region.to_string(),
                size: size.to_string(),
                priority,
                gpu_model: model.to_string(),
                gpus_per_vm: gpus,
                vcpus_per_vm: vcpus,
                family: family.to_string(),
                price_per_hour,
                capacity_vms,
                eviction_rate_per_hour,
            };
            let cap = capacity(&mut rng);
            offers.push(offer(Priority::Regular, regular, cap, 0.0));
            if rng.chance(0.7) {
                let price = round(regular * (0.1 + 0.3 * rng.unit()), 0.001).max(0.001);
                let cap = capacity(&mut rng);
                offers.push(offer(Priority::Spot, price, cap, round(0.01 + 0.19 * rng.unit(), 0.001)));
            }
        }
    }
    let mut quotas = Vec::new();
    let mut families: Vec<&str> = DIVERSE_SIZES.iter().map(|s| s.4).collect();
    families.sort_unstable();
    families.dedup();
    for region in &regions {
        quotas.push(QuotaLimit {
            region: region.to_string(),
            pool: "cores".into(),
            vcpus: 200 + rng.below(1_401) as u64,
        });
        quotas.push(QuotaLimit {
            region: region.to_string(),
            pool: "lowPriorityCores".into(),
            vcpus: rng.below(601) as u64,
        });
        for family in &families {
            let vcpus = *rng.pick(&[0, 48, 96, 192, 384, 768]);
            quotas.push(QuotaLimit { region: region.to_string(), pool: family.to_string(), vcpus });
        }
    }
    let models = ["A100-80GB", "H100", "V100", "A10", "T4"];
    let mut jobs = Vec::with_capacity(params.jobs);
    for i in 0..params.jobs {
        let gpus = *rng.pick(&[1, 1, 2, 4, 8, 8, 16, 32, 64]);
        let mut gpu_models: Vec<String> = Vec::new();
        let wanted = 1 + rng.below(3);
        while gpu_models.len() < wanted {
            let m = rng.pick(&models).to_string();
            if !gpu_models.contains(&m) {
                gpu_models.push(m);
            }
        }
        let allow = if rng.chance(0.5) {
            let wanted = (1 + rng.below(3)).min(regions.len());
            let mut list: Vec<String> = Vec::new();
            while list.len() < wanted {
                let r = rng.pick(&regions).to_string();
                if !list.contains(&r) {
                    list.push(r);
                }
            }
            Some(list)
        } else {
            None
        };
        let max_price_per_hour = rng.chance(0.3).then(|| round(f64::from(gpus) * (0.5 + 9.5 * rng.unit()), 0.01));
        jobs.push(JobDemand {
            id: format!("job-{i:05}"),
            gpus,
            gpu_models,
            gang: true,
            regions: allow,
            spot: *rng.pick(&[SpotPolicy::Never, SpotPolicy::Allowed, SpotPolicy::Preferred]),
            priority: 1 + rng.below(100) as u32,
            duration_hours: round(0.5 + 47.5 * rng.unit(), 0.01),
            max_price_per_hour,
            ..JobDemand::default()
        });
    }
    Problem { offers, quotas, jobs, egress: Vec::new() }
}
