//! The GPU catalog: sizes and their list prices per region and priority.
//!
//! The built-in catalog (`catalog/azure.toml`) is our own data, derived from a public price catalog
//! built from the Azure Retail Prices API, with that source's known defects corrected (see the
//! file's header). Users load their own file to replace it or extend it (new regions, negotiated
//! prices). A price the source does not know stays `None`: an unknown price is never invented.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use rustc_hash::FxHashMap as HashMap;
use serde::{Deserialize, Serialize};

use crate::model::{FieldErrors, Priority, SizeCatalog, VmSize};

const BUILTIN: &str = include_str!("../catalog/azure.toml");

/// Regular and spot list prices of one size in one region, USD per VM-hour.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceRow {
    /// VM size name.
    pub size: String,
    /// Region name.
    pub region: String,
    /// Regular (pay-as-you-go) price; absent when unknown or not sold there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regular: Option<f64>,
    /// Spot price; absent when unknown or not sold there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot: Option<f64>,
}

impl PriceRow {
    /// The price for one priority.
    pub fn for_priority(&self, p: Priority) -> Option<f64> {
        match p {
            Priority::Regular => self.regular,
            Priority::Spot => self.spot,
        }
    }
}

/// Checks size definitions (a catalog file's, or a what-if scenario's `[[sizes]]`), each problem
/// under `sizes[i].field`.
pub fn check_sizes(errs: &mut FieldErrors, sizes: &[VmSize]) {
    let mut seen = BTreeSet::new();
    for (i, s) in sizes.iter().enumerate() {
        let f = |x: &str| format!("sizes[{i}].{x}");
        if s.name.trim().is_empty() {
            errs.push(f("name"), "must not be empty");
        } else if !seen.insert(s.name.clone()) {
            errs.push(f("name"), format!("{} is listed twice", s.name));
        }
        if s.family.trim().is_empty() {
            errs.push(f("family"), "must not be empty");
        }
        if s.vcpus == 0 {
            errs.push(f("vcpus"), "must be at least 1");
        }
        if s.gpus == 0 && s.gpu_fraction.is_none() {
            errs.push(f("gpus"), "0 GPUs needs gpu_fraction (a fractional size)");
        }
        if s.gpus > 0 && s.gpu_fraction.is_some() {
            errs.push(f("gpu_fraction"), "only for sizes with 0 whole GPUs");
        }
    }
}

/// How a user's catalog file combines with the built-in one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MergeMode {
    /// Sizes and prices in the file replace those with the same key; the rest stay.
    #[default]
    Extend,
    /// The file is the whole catalog.
    Replace,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    #[serde(default)]
    mode: MergeMode,
    #[serde(default)]
    sizes: Vec<VmSize>,
    #[serde(default)]
    prices: Vec<PriceRow>,
    #[serde(default)]
    egress: Vec<solver::Egress>,
}

/// One row of the catalog as `spillway catalog` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CatalogEntry {
    /// VM size name.
    pub size: String,
    /// Region.
    pub region: String,
    /// Spot or regular.
    pub priority: Priority,
    /// USD per VM-hour, `None` when unknown.
    pub price_per_hour: Option<f64>,
    /// Whole GPUs per VM (0 for fractional sizes).
    pub gpus: u32,
    /// GPU model.
    pub gpu_model: String,
    /// Share of one GPU for fractional sizes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_fraction: Option<String>,
    /// GPU memory in GiB.
    pub gpu_memory_gib: u32,
    /// vCPUs per VM.
    pub vcpus: u32,
    /// Memory per VM in GiB.
    pub memory_gib: f64,
    /// Quota family.
    pub family: String,
    /// InfiniBand fabric.
    pub infiniband: bool,
}

/// Sizes and prices, indexed for lookups.
#[derive(Debug, Clone, PartialEq)]
pub struct Catalog {
    sizes: Vec<VmSize>,
    /// Position in `sizes` by exact name: the control loop and the simulated cloud look sizes up
    /// many times a round, and almost always by their canonical spelling.
    by_name: HashMap<String, usize>,
    /// Price rows by size, then region (nested so that a lookup by `&str` needs no allocation).
    prices: BTreeMap<String, BTreeMap<String, PriceRow>>,
    /// Inter-region transfer prices that differ from [`solver::DEFAULT_EGRESS_USD_PER_GB`], by
    /// (from, to) region: the one source of what moving data costs, for the solver's egress term,
    /// the deadline policies, and what a placement that moves data bills its job.
    egress: BTreeMap<(String, String), f64>,
    /// Every region with at least one price, sorted: kept with the prices (only `extend` changes
    /// them) because every job submission's validation asks for it, and working it out from the
    /// price rows each time was 1.8 % of a what-if run over the Philly trace.
    regions: Vec<String>,
}

/// Errors loading a catalog file.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The file could not be read.
    #[error("cannot read catalog {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has the wrong shape.
    #[error("catalog {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The content is well-formed but inconsistent.
    #[error("catalog {path} is inconsistent:\n{errors}")]
    Invalid {
        /// The file.
        path: String,
        /// Every problem.
        errors: FieldErrors,
    },
}

impl Catalog {
    /// The built-in catalog (real list prices in US regions).
    pub fn builtin() -> Catalog {
        Catalog::parse(BUILTIN, "built-in catalog").expect("the built-in catalog is valid (tested)")
    }

    /// Parses a catalog file on its own (its `mode` is ignored).
    pub fn parse(content: &str, origin: &str) -> Result<Catalog, CatalogError> {
        let file = parse_file(content, origin)?;
        let mut cat = Catalog::from_parts(file.sizes, file.prices);
        cat.extend_egress(file.egress);
        cat.check(origin)?;
        Ok(cat)
    }

    /// The built-in catalog combined with a user file according to the file's `mode`.
    pub fn builtin_with(path: &Path) -> Result<Catalog, CatalogError> {
        let origin = path.display().to_string();
        let content =
            std::fs::read_to_string(path).map_err(|source| CatalogError::Io { path: origin.clone(), source })?;
        let file = parse_file(&content, &origin)?;
        let mut cat = match file.mode {
            MergeMode::Replace => Catalog::from_parts(file.sizes, file.prices),
            MergeMode::Extend => {
                let mut cat = Catalog::builtin();
                cat.extend(file.sizes, file.prices);
                cat
            }
        };
        cat.extend_egress(file.egress);
        cat.check(&origin)?;
        Ok(cat)
    }

    /// Loads the built-in catalog, or the user's when `path` is given.
    pub fn load(path: Option<&Path>) -> Result<Catalog, CatalogError> {
        match path {
            Some(p) => Catalog::builtin_with(p),
            None => Ok(Catalog::builtin()),
        }
    }

    fn from_parts(sizes: Vec<VmSize>, prices: Vec<PriceRow>) -> Catalog {
        let mut cat = Catalog {
            sizes: Vec::new(),
            by_name: HashMap::default(),
            prices: BTreeMap::new(),
            egress: BTreeMap::new(),
            regions: Vec::new(),
        };
        cat.extend(sizes, prices);
        cat
    }

    /// Adds or replaces sizes (by name) and prices (by size and region; a price row only
    /// overrides the priorities it states).
    pub fn extend(&mut self, sizes: Vec<VmSize>, prices: Vec<PriceRow>) {
        for s in sizes {
            match self.by_name.get(&s.name) {
                Some(&i) => self.sizes[i] = s,
                None => {
                    self.by_name.insert(s.name.clone(), self.sizes.len());
                    self.sizes.push(s);
                }
            }
        }
        for p in prices {
            match self.prices.entry(p.size.clone()).or_default().get_mut(&p.region) {
                Some(existing) => {
                    if p.regular.is_some() {
                        existing.regular = p.regular;
                    }
                    if p.spot.is_some() {
                        existing.spot = p.spot;
                    }
                }
                None => {
                    self.prices.entry(p.size.clone()).or_default().insert(p.region.clone(), p);
                }
            }
        }
        let regions: BTreeSet<&String> = self.prices().map(|p| &p.region).collect();
        self.regions = regions.into_iter().cloned().collect();
    }

    /// Adds or replaces inter-region transfer prices (by from and to region).
    pub fn extend_egress(&mut self, rows: Vec<solver::Egress>) {
        for e in rows {
            self.egress.insert((e.from, e.to), e.usd_per_gb);
        }
    }

    /// USD per GB to move data from one region to another: nothing within a region, the catalog's
    /// price for the pair when it lists one, else [`solver::DEFAULT_EGRESS_USD_PER_GB`] (Azure's
    /// transfer price between North American regions), the rate the solver uses for a pair its
    /// table does not list.
    pub fn egress_usd_per_gb(&self, from: &str, to: &str) -> f64 {
        if from == to {
            return 0.0;
        }
        self.egress.get(&(from.to_string(), to.to_string())).copied().unwrap_or(solver::DEFAULT_EGRESS_USD_PER_GB)
    }

    /// The transfer prices the catalog lists, as the solver's egress table (the pairs it does not
    /// list cost the solver's default, as in [`Catalog::egress_usd_per_gb`]).
    pub fn egress_table(&self) -> Vec<solver::Egress> {
        self.egress
            .iter()
            .map(|((from, to), usd)| solver::Egress { from: from.clone(), to: to.clone(), usd_per_gb: *usd })
            .collect()
    }

    fn check(&self, origin: &str) -> Result<(), CatalogError> {
        let mut errs = FieldErrors::default();
        check_sizes(&mut errs, &self.sizes);
        for ((from, to), usd) in &self.egress {
            let field = format!("egress[{from} {to}]");
            if from == to {
                errs.push(&field, "from and to must differ (moving data within a region is free)");
            }
            if !usd.is_finite() || *usd < 0.0 {
                errs.push(format!("{field}.usd_per_gb"), "must be a price ≥ 0 (USD per GB)");
            }
        }
        for p in self.prices() {
            let field = format!("prices[{} {}]", p.size, p.region);
            if self.size(&p.size).is_none() {
                errs.push(&field, format!("unknown size {}", p.size));
            }
            for (what, v) in [("regular", p.regular), ("spot", p.spot)] {
                if let Some(v) = v
                    && (!v.is_finite() || v <= 0.0)
                {
                    errs.push(format!("{field}.{what}"), "must be a positive price");
                }
            }
        }
        if errs.is_empty() { Ok(()) } else { Err(CatalogError::Invalid { path: origin.to_string(), errors: errs }) }
    }

    /// All sizes.
    pub fn sizes(&self) -> &[VmSize] {
        &self.sizes
    }

    /// A size by name (case-insensitive, as Azure treats them).
    pub fn size(&self, name: &str) -> Option<&VmSize> {
        match self.by_name.get(name) {
            Some(&i) => Some(&self.sizes[i]),
            None => self.sizes.iter().find(|s| s.name.eq_ignore_ascii_case(name)),
        }
    }

    /// The price row of a size in a region.
    pub fn price(&self, size: &str, region: &str) -> Option<&PriceRow> {
        let name = self.size(size).map_or(size, |s| s.name.as_str());
        self.prices.get(name)?.get(region)
    }

    /// All price rows, by size then region.
    pub fn prices(&self) -> impl Iterator<Item = &PriceRow> {
        self.prices.values().flat_map(|by_region| by_region.values())
    }

    /// Every region that has at least one price, sorted.
    pub fn regions(&self) -> Vec<String> {
        self.regions.clone()
    }

    /// Sizes to rank in a fleet for the same demand: the chosen size first, then sizes with the same
    /// GPU model and the same GPUs per VM (and InfiniBand when the chosen one has it), sold in the
    /// region at a known price for the priority; same quota family first, then catalog order. At
    /// most `max` sizes in all. (The fleet may fall back to them; both the control loop and the
    /// Azure fleet body use this one rule.)
    pub fn ranked_sizes(&self, chosen: &str, region: &str, priority: Priority, max: usize) -> Vec<String> {
        let Some(c) = self.size(chosen) else { return vec![chosen.to_string()] };
        let mut same_family = Vec::new();
        let mut other_family = Vec::new();
        for s in self.sizes() {
            if s.name.eq_ignore_ascii_case(&c.name)
                || s.gpus != c.gpus
                || s.is_fractional() != c.is_fractional()
                || s.gpu_fraction != c.gpu_fraction
                || !s.gpu_model.eq_ignore_ascii_case(&c.gpu_model)
                || (c.infiniband && !s.infiniband)
                || self.price(&s.name, region).and_then(|p| p.for_priority(priority)).is_none()
            {
                continue;
            }
            if s.family.eq_ignore_ascii_case(&c.family) {
                same_family.push(s.name.clone());
            } else {
                other_family.push(s.name.clone());
            }
        }
        std::iter::once(c.name.clone()).chain(same_family).chain(other_family).take(max.max(1)).collect()
    }

    /// Every GPU model, sorted.
    pub fn gpu_models(&self) -> Vec<String> {
        let set: BTreeSet<&String> = self.sizes.iter().map(|s| &s.gpu_model).collect();
        set.into_iter().cloned().collect()
    }

    /// Size × region × priority rows, filtered by GPU model (exact or family prefix) and region;
    /// sorted by size order in the catalog, then region, then priority.
    pub fn entries(&self, gpu: Option<&str>, region: Option<&str>) -> Vec<CatalogEntry> {
        let mut out = Vec::new();
        for s in &self.sizes {
            if gpu.is_some_and(|g| !s.matches_gpu_model(g)) {
                continue;
            }
            for p in self.prices.get(&s.name).into_iter().flat_map(|by_region| by_region.values()) {
                if region.is_some_and(|r| r != p.region) {
                    continue;
                }
                for pr in [Priority::Regular, Priority::Spot] {
                    out.push(CatalogEntry {
                        size: s.name.clone(),
                        region: p.region.clone(),
                        priority: pr,
                        price_per_hour: p.for_priority(pr),
                        gpus: s.gpus,
                        gpu_model: s.gpu_model.clone(),
                        gpu_fraction: s.gpu_fraction.clone(),
                        gpu_memory_gib: s.gpu_memory_gib,
                        vcpus: s.vcpus,
                        memory_gib: s.memory_gib,
                        family: s.family.clone(),
                        infiniband: s.infiniband,
                    });
                }
            }
        }
        out
    }
}

impl SizeCatalog for Catalog {
    fn sizes(&self) -> &[VmSize] {
        Catalog::sizes(self)
    }
    fn size(&self, name: &str) -> Option<&VmSize> {
        Catalog::size(self, name)
    }
    fn regions(&self) -> Vec<String> {
        Catalog::regions(self)
    }
    fn is_priced(&self, size: &str, region: &str) -> bool {
        self.price(size, region).is_some()
    }
}

fn parse_file(content: &str, origin: &str) -> Result<CatalogFile, CatalogError> {
    toml::from_str(content).map_err(|e| CatalogError::Parse { path: origin.to_string(), message: e.to_string() })
}
