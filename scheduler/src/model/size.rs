//! A VM size as the catalog knows it: the facts placement needs (GPUs, vCPUs, quota family).

use serde::{Deserialize, Serialize};

/// What a size is suited for; training defaults to sizes marked `training`, inference to `inference`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// Model training (NC and ND series).
    Training,
    /// Serving and batch inference (NV and NC series).
    Inference,
}

/// One Azure VM size, e.g. `Standard_NC24ads_A100_v4`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmSize {
    /// Azure's name, `Standard_…`.
    pub name: String,
    /// Quota family as the Compute usages API names it (`standardNCADSA100v4Family`).
    pub family: String,
    /// vCPUs per VM: the unit every quota pool counts in.
    pub vcpus: u32,
    /// Memory per VM in GiB.
    pub memory_gib: f64,
    /// GPU model, e.g. `A100-80GB`.
    pub gpu_model: String,
    /// Whole GPUs per VM; 0 for a fractional size.
    pub gpus: u32,
    /// Share of one GPU for fractional sizes (`"1/3"`), absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_fraction: Option<String>,
    /// GPU memory per GPU (or per partition, for fractional sizes) in GiB.
    pub gpu_memory_gib: u32,
    /// Whether the size has an InfiniBand fabric for multi-node training.
    pub infiniband: bool,
    /// Workload classes the size suits.
    pub workloads: Vec<Workload>,
}

impl VmSize {
    /// True for sizes that carry only part of one GPU.
    pub fn is_fractional(&self) -> bool {
        self.gpu_fraction.is_some()
    }

    /// True when `wanted` names this size's GPU model, exactly (`A100-80GB`) or as a family
    /// prefix (`A100` matches `A100-80GB` and `A100-40GB`); case-insensitive.
    pub fn matches_gpu_model(&self, wanted: &str) -> bool {
        gpu_model_matches(&self.gpu_model, wanted)
    }
}

/// What the domain model needs to know of a catalog: its sizes and where they are sold. The GPU
/// catalog (`crate::catalog::Catalog`) implements it, so the model never depends on how sizes and
/// prices are loaded or merged.
pub trait SizeCatalog {
    /// Every size, in catalog order.
    fn sizes(&self) -> &[VmSize];
    /// A size by name (case-insensitive, as Azure treats them).
    fn size(&self, name: &str) -> Option<&VmSize>;
    /// Every region with at least one price, sorted.
    fn regions(&self) -> Vec<String>;
    /// Whether the catalog lists prices for the size in the region (a price row, either tier).
    fn is_priced(&self, size: &str, region: &str) -> bool;
}

impl<T: SizeCatalog + ?Sized> SizeCatalog for std::sync::Arc<T> {
    fn sizes(&self) -> &[VmSize] {
        (**self).sizes()
    }
    fn size(&self, name: &str) -> Option<&VmSize> {
        (**self).size(name)
    }
    fn regions(&self) -> Vec<String> {
        (**self).regions()
    }
    fn is_priced(&self, size: &str, region: &str) -> bool {
        (**self).is_priced(size, region)
    }
}

/// See [`VmSize::matches_gpu_model`].
pub fn gpu_model_matches(model: &str, wanted: &str) -> bool {
    // Byte-wise and without lowercased copies: the control loop asks this for every size, job and
    // round. ASCII case folding leaves other bytes as they are, so a match never splits a character.
    let (model, wanted) = (model.as_bytes(), wanted.as_bytes());
    model.len() >= wanted.len()
        && model[..wanted.len()].eq_ignore_ascii_case(wanted)
        && (model.len() == wanted.len() || model[wanted.len()] == b'-')
}

#[cfg(test)]
mod tests {
    use super::gpu_model_matches;

    #[test]
    fn gpu_models_match_exactly_or_as_a_family_prefix_in_any_case() {
        assert!(gpu_model_matches("A100-80GB", "A100-80GB"));
        assert!(gpu_model_matches("A100-80GB", "a100"));
        assert!(gpu_model_matches("a100-40gb", "A100"));
        assert!(gpu_model_matches("H100", "h100"));
        assert!(!gpu_model_matches("A100-80GB", "A10"), "a prefix must end at a dash");
        assert!(!gpu_model_matches("A10", "A100"));
        assert!(!gpu_model_matches("V100", "A100"));
        assert!(!gpu_model_matches("A100", ""), "an empty model names nothing");
    }
}
