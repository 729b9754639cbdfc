//! The `[cloud]` section of a scenario: regions, sizes, quota, capacity, provisioning delay and
//! spot eviction rates. Prices are never configured here: they come from the catalog.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use scheduler::Catalog;
use scheduler::model::{FieldErrors, Priority, normalize_family};
use serde::{Deserialize, Serialize};

/// How the simulated cloud behaves. Loaded from the `[cloud]` table of a scenario file (every
/// other top-level table is left to the simulator), or built with [`SimCloudConfig::modest`].
///
/// ```toml
/// [cloud]
/// regions = ["eastus", "westus3"]
/// sizes = ["Standard_NC24ads_A100_v4", "Standard_NC48ads_A100_v4"]  # optional: default every size
/// seed = 7
/// provisioning_seconds = 90
/// default_capacity_vms = 8
/// default_spot_eviction_rate_per_hour = 0.02
///
/// [cloud.default_quota]
/// cores = 200
/// low_priority_cores = 200
/// family = 96
///
/// [[cloud.quota]]
/// region = "eastus"
/// cores = 350
/// families = { standardNCADSA100v4Family = 96 }
///
/// [[cloud.capacity]]
/// region = "eastus"
/// size = "Standard_NC24ads_A100_v4"
/// priority = "spot"            # optional: both priorities when absent
/// vms = 2
/// eviction_rate_per_hour = 0.1
///
/// [[cloud.restrictions]]
/// region = "westus3"
/// size = "Standard_NC48ads_A100_v4"
/// reason = "NotAvailableForSubscription"
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimCloudConfig {
    /// Regions the cloud serves; each must have prices in the catalog.
    pub regions: Vec<String>,
    /// Sizes offered; empty = every catalog size (sold in a region when the catalog prices it there).
    #[serde(default)]
    pub sizes: Vec<String>,
    /// Seed of every random draw (spot evictions), so a run is reproducible.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Time from accepting a fleet to its VMs running (or the allocation failing), in seconds;
    /// also the time a `maintain` fleet takes to replace lost VMs.
    #[serde(default = "default_provisioning_seconds")]
    pub provisioning_seconds: u64,
    /// How long Azure keeps the capacity of an evicted spot VM before it becomes available again,
    /// in seconds.
    #[serde(default = "default_reclaim_seconds")]
    pub eviction_reclaim_seconds: u64,
    /// The most a create operation tells the client to wait before polling again, in seconds.
    #[serde(default = "default_poll_seconds")]
    pub poll_after_seconds: u64,
    /// VMs available to this subscription per offer (region × size × priority) not listed in
    /// `capacity`.
    #[serde(default = "default_capacity_vms")]
    pub default_capacity_vms: u32,
    /// Evictions per spot VM-hour for offers not listed in `capacity` (0 = never evicted).
    #[serde(default)]
    pub default_spot_eviction_rate_per_hour: f64,
    /// Quota limits applied to every region, unless `quota` says otherwise.
    #[serde(default)]
    pub default_quota: QuotaLimits,
    /// Per-region quota overrides.
    #[serde(default)]
    pub quota: Vec<RegionQuota>,
    /// Per-offer capacity and eviction rate overrides.
    #[serde(default)]
    pub capacity: Vec<OfferCapacity>,
    /// Sizes this subscription may not use in a region (or in some zones), as the SKUs API reports.
    #[serde(default)]
    pub restrictions: Vec<RestrictionConfig>,
}

/// Quota limits of one region, in vCPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaLimits {
    /// Regular vCPUs in the region (`cores`, "Total Regional vCPUs").
    #[serde(default = "default_cores", alias = "totalRegionalCores")]
    pub cores: u64,
    /// Spot vCPUs in the region (`lowPriorityCores`).
    #[serde(default = "default_cores", alias = "lowPriorityCores")]
    pub low_priority_cores: u64,
    /// Limit of every family not named in `families`.
    #[serde(default = "default_family")]
    pub family: u64,
    /// Limits of named families (`standardNCADSA100v4Family = 96`); names match case- and
    /// space-insensitively, as Azure's APIs spell them differently.
    #[serde(default)]
    pub families: BTreeMap<String, u64>,
}

impl Default for QuotaLimits {
    fn default() -> Self {
        QuotaLimits {
            cores: default_cores(),
            low_priority_cores: default_cores(),
            family: default_family(),
            families: BTreeMap::new(),
        }
    }
}

/// Quota of one region; absent fields take `default_quota`'s values, `families` are merged over it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionQuota {
    /// The region.
    pub region: String,
    /// Regular vCPUs in the region.
    #[serde(default, alias = "totalRegionalCores")]
    pub cores: Option<u64>,
    /// Spot vCPUs in the region.
    #[serde(default, alias = "lowPriorityCores")]
    pub low_priority_cores: Option<u64>,
    /// Limit of every family not named in `families`.
    #[serde(default)]
    pub family: Option<u64>,
    /// Limits of named families.
    #[serde(default)]
    pub families: BTreeMap<String, u64>,
}

/// Capacity (and spot eviction rate) of one size in one region, for one priority or both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OfferCapacity {
    /// The region.
    pub region: String,
    /// The size.
    pub size: String,
    /// `regular` or `spot`; both when absent.
    #[serde(default)]
    pub priority: Option<Priority>,
    /// VMs available to this subscription; `default_capacity_vms` when absent.
    #[serde(default)]
    pub vms: Option<u32>,
    /// Evictions per spot VM-hour; `default_spot_eviction_rate_per_hour` when absent.
    #[serde(default)]
    pub eviction_rate_per_hour: Option<f64>,
}

/// A size the subscription cannot use in a region (or some of its zones).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestrictionConfig {
    /// The region.
    pub region: String,
    /// The size.
    pub size: String,
    /// Zones affected; empty = the whole region.
    #[serde(default)]
    pub zones: Vec<String>,
    /// Azure's reason code.
    #[serde(default = "default_reason")]
    pub reason: String,
}

fn default_seed() -> u64 {
    1
}
fn default_provisioning_seconds() -> u64 {
    60
}
fn default_reclaim_seconds() -> u64 {
    3600
}
fn default_poll_seconds() -> u64 {
    15
}
fn default_capacity_vms() -> u32 {
    8
}
fn default_cores() -> u64 {
    200
}
fn default_family() -> u64 {
    96
}
fn default_reason() -> String {
    "NotAvailableForSubscription".to_string()
}

/// Errors loading a scenario's `[cloud]` section.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read scenario {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not TOML, no `[cloud]` table, or a field of the wrong type or name.
    #[error("scenario {origin}: {message}")]
    Parse {
        /// Where the text came from.
        origin: String,
        /// What is wrong (toml names the key and the line).
        message: String,
    },
    /// Well-formed, but inconsistent with itself or the catalog.
    #[error("scenario {origin} is inconsistent:\n{errors}")]
    Invalid {
        /// Where the text came from.
        origin: String,
        /// Every problem, each naming its field under `cloud.`.
        errors: FieldErrors,
    },
}

impl SimCloudConfig {
    /// Modest defaults for tests and quick starts: the given regions, every catalog size, 200
    /// regular and 200 spot vCPUs per region, 96 per family, 8 VMs per offer, 60 s provisioning,
    /// no evictions, seed 1.
    pub fn modest<S: Into<String>>(regions: impl IntoIterator<Item = S>) -> SimCloudConfig {
        SimCloudConfig {
            regions: regions.into_iter().map(Into::into).collect(),
            sizes: Vec::new(),
            seed: default_seed(),
            provisioning_seconds: default_provisioning_seconds(),
            eviction_reclaim_seconds: default_reclaim_seconds(),
            poll_after_seconds: default_poll_seconds(),
            default_capacity_vms: default_capacity_vms(),
            default_spot_eviction_rate_per_hour: 0.0,
            default_quota: QuotaLimits::default(),
            quota: Vec::new(),
            capacity: Vec::new(),
            restrictions: Vec::new(),
        }
    }

    /// Parses the `[cloud]` table of a scenario (other top-level tables are ignored: they belong
    /// to the simulator). Checks field names and types only; [`SimCloudConfig::validate`] checks
    /// the content against a catalog.
    pub fn from_scenario_str(text: &str, origin: &str) -> Result<SimCloudConfig, ConfigError> {
        let parse_err = |message: String| ConfigError::Parse { origin: origin.to_string(), message };
        let mut table: toml::Table = toml::from_str(text).map_err(|e| parse_err(e.to_string()))?;
        let cloud = table.remove("cloud").ok_or_else(|| parse_err("no [cloud] table".to_string()))?;
        cloud.try_into().map_err(|e: toml::de::Error| parse_err(format!("in [cloud]: {e}")))
    }

    /// Reads a scenario file and parses its `[cloud]` table.
    pub fn from_scenario_file(path: &Path) -> Result<SimCloudConfig, ConfigError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io { path: origin.clone(), source })?;
        SimCloudConfig::from_scenario_str(&text, &origin)
    }

    /// Checks the configuration against the catalog; every problem names its field under `cloud.`.
    pub fn validate(&self, catalog: &Catalog) -> Result<(), FieldErrors> {
        let mut errs = FieldErrors::default();
        let catalog_regions: BTreeSet<String> = catalog.regions().into_iter().collect();
        let regions: BTreeSet<&str> = self.regions.iter().map(String::as_str).collect();
        if self.regions.is_empty() {
            errs.push("cloud.regions", "must name at least one region");
        }
        for (i, r) in self.regions.iter().enumerate() {
            if !catalog_regions.contains(r) {
                errs.push(
                    format!("cloud.regions[{i}]"),
                    format!(
                        "{r} has no prices in the catalog (known: {})",
                        catalog_regions.iter().cloned().collect::<Vec<_>>().join(", ")
                    ),
                );
            }
        }
        if regions.len() != self.regions.len() {
            errs.push("cloud.regions", "lists a region twice");
        }
        for (i, s) in self.sizes.iter().enumerate() {
            if catalog.size(s).is_none() {
                errs.push(format!("cloud.sizes[{i}]"), format!("unknown size {s}"));
            }
        }
        if self.provisioning_seconds > 7 * 24 * 3600 {
            errs.push("cloud.provisioning_seconds", "must be at most a week (604800)");
        }
        check_rate(&mut errs, "cloud.default_spot_eviction_rate_per_hour", self.default_spot_eviction_rate_per_hour);
        let families: BTreeSet<String> = catalog.sizes().iter().map(|s| normalize_family(&s.family)).collect();
        let check_families = |errs: &mut FieldErrors, field: &str, fams: &BTreeMap<String, u64>| {
            for name in fams.keys() {
                if !families.contains(&normalize_family(name)) {
                    errs.push(format!("{field}.families.{name}"), "no catalog size is in this family");
                }
            }
        };
        check_families(&mut errs, "cloud.default_quota", &self.default_quota.families);
        let mut seen = BTreeSet::new();
        for (i, q) in self.quota.iter().enumerate() {
            let f = format!("cloud.quota[{i}]");
            if !regions.contains(q.region.as_str()) {
                errs.push(format!("{f}.region"), format!("{} is not in cloud.regions", q.region));
            }
            if !seen.insert(q.region.clone()) {
                errs.push(format!("{f}.region"), format!("{} has quota listed twice", q.region));
            }
            check_families(&mut errs, &f, &q.families);
        }
        for (i, c) in self.capacity.iter().enumerate() {
            let f = format!("cloud.capacity[{i}]");
            self.check_offer(&mut errs, catalog, &f, &c.region, &c.size);
            if let Some(rate) = c.eviction_rate_per_hour {
                check_rate(&mut errs, &format!("{f}.eviction_rate_per_hour"), rate);
            }
        }
        for (i, r) in self.restrictions.iter().enumerate() {
            let f = format!("cloud.restrictions[{i}]");
            self.check_offer(&mut errs, catalog, &f, &r.region, &r.size);
            if r.reason.trim().is_empty() {
                errs.push(format!("{f}.reason"), "must not be empty");
            }
        }
        errs.into_result(())
    }

    fn check_offer(&self, errs: &mut FieldErrors, catalog: &Catalog, field: &str, region: &str, size: &str) {
        if !self.regions.iter().any(|r| r == region) {
            errs.push(format!("{field}.region"), format!("{region} is not in cloud.regions"));
        }
        match catalog.size(size) {
            None => errs.push(format!("{field}.size"), format!("unknown size {size}")),
            Some(s) if !self.offers_size(&s.name) => {
                errs.push(format!("{field}.size"), format!("{size} is not in cloud.sizes"))
            }
            Some(_) => {}
        }
    }

    /// True when the configuration offers the size at all (by catalog name).
    pub fn offers_size(&self, name: &str) -> bool {
        self.sizes.is_empty() || self.sizes.iter().any(|s| s.eq_ignore_ascii_case(name))
    }

    /// The quota limit of a pool in a region, in vCPUs (`family` is the family's name).
    pub fn quota_limit(&self, region: &str, pool: &scheduler::model::QuotaPool) -> u64 {
        use scheduler::model::QuotaPool;
        let over = self.quota.iter().find(|q| q.region == region);
        match pool {
            QuotaPool::Cores => over.and_then(|q| q.cores).unwrap_or(self.default_quota.cores),
            QuotaPool::LowPriorityCores => {
                over.and_then(|q| q.low_priority_cores).unwrap_or(self.default_quota.low_priority_cores)
            }
            QuotaPool::Family(name) => {
                let key = normalize_family(name);
                let named = |fams: &BTreeMap<String, u64>| {
                    fams.iter().find(|(k, _)| normalize_family(k) == key).map(|(_, v)| *v)
                };
                over.and_then(|q| named(&q.families))
                    .or_else(|| named(&self.default_quota.families))
                    .or_else(|| over.and_then(|q| q.family))
                    .unwrap_or(self.default_quota.family)
            }
        }
    }

    /// The configured capacity row for an offer, the most specific first (a row naming the
    /// priority wins over one for both).
    fn capacity_row(&self, region: &str, size: &str, priority: Priority) -> Option<&OfferCapacity> {
        let matches = |c: &&OfferCapacity| c.region == region && c.size.eq_ignore_ascii_case(size);
        self.capacity
            .iter()
            .filter(matches)
            .find(|c| c.priority == Some(priority))
            .or_else(|| self.capacity.iter().filter(matches).find(|c| c.priority.is_none()))
    }

    /// VMs an offer holds for this subscription, before any use.
    pub fn capacity_vms(&self, region: &str, size: &str, priority: Priority) -> u32 {
        self.capacity_row(region, size, priority).and_then(|c| c.vms).unwrap_or(self.default_capacity_vms)
    }

    /// Evictions per VM-hour of an offer (always 0 for regular).
    pub fn eviction_rate(&self, region: &str, size: &str, priority: Priority) -> f64 {
        if priority == Priority::Regular {
            return 0.0;
        }
        self.capacity_row(region, size, priority)
            .and_then(|c| c.eviction_rate_per_hour)
            .unwrap_or(self.default_spot_eviction_rate_per_hour)
    }
}

fn check_rate(errs: &mut FieldErrors, field: &str, rate: f64) {
    if !rate.is_finite() || rate < 0.0 {
        errs.push(field, "must be a finite number ≥ 0 (evictions per VM-hour)");
    }
}
