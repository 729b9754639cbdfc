//! Quota pools: the vCPU limits Azure enforces per region.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A pool of vCPUs that Azure limits per region. A regular VM draws from its family pool and from
/// `cores`; a spot VM draws from `lowPriorityCores` only.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuotaPool {
    /// All regular vCPUs in the region (`cores`).
    Cores,
    /// All spot vCPUs in the region (`lowPriorityCores`).
    LowPriorityCores,
    /// Regular vCPUs of one size family, e.g. `standardNCADSA100v4Family`.
    Family(String),
}

/// Family names differ in case and spacing between Azure APIs (`Standard NCASv3_T4 Family`):
/// compare them lower-cased with spaces removed.
pub fn normalize_family(name: &str) -> String {
    // Azure's names are ASCII: byte-wise folding is the common case, and the general one (Unicode
    // lowercase tables) was most of the cost of every quota read.
    if name.is_ascii() {
        let mut out = name.as_bytes().to_vec();
        out.retain(|b| !(*b as char).is_whitespace());
        out.make_ascii_lowercase();
        // ASCII in, ASCII out.
        return String::from_utf8(out).unwrap_or_default();
    }
    name.chars().filter(|c| !c.is_whitespace()).flat_map(char::to_lowercase).collect()
}

impl QuotaPool {
    /// Parses a usages-API name: `cores`, `lowPriorityCores`, or a family.
    pub fn parse(name: &str) -> QuotaPool {
        match normalize_family(name).as_str() {
            "cores" => QuotaPool::Cores,
            "lowprioritycores" => QuotaPool::LowPriorityCores,
            _ => QuotaPool::Family(name.to_string()),
        }
    }

    /// The name as the usages API spells it.
    pub fn name(&self) -> &str {
        match self {
            QuotaPool::Cores => "cores",
            QuotaPool::LowPriorityCores => "lowPriorityCores",
            QuotaPool::Family(f) => f,
        }
    }

    /// Normalised key for comparisons across APIs.
    pub fn key(&self) -> String {
        normalize_family(self.name())
    }
}

impl fmt::Display for QuotaPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for QuotaPool {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for QuotaPool {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(QuotaPool::parse(&s))
    }
}

/// Limit and usage of one pool in one region, in vCPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quota {
    /// Region name.
    pub region: String,
    /// Which pool.
    pub pool: QuotaPool,
    /// vCPUs allowed.
    pub limit: u64,
    /// vCPUs in use.
    pub usage: u64,
}

impl Quota {
    /// vCPUs still free (never negative).
    pub fn free(&self) -> u64 {
        self.limit.saturating_sub(self.usage)
    }
}

#[cfg(test)]
mod tests {
    use super::normalize_family;

    #[test]
    fn family_names_fold_case_and_drop_whitespace_in_ascii_and_beyond() {
        assert_eq!(normalize_family("Standard NCADSA100v4 Family"), "standardncadsa100v4family");
        assert_eq!(normalize_family("lowPriorityCores"), "lowprioritycores");
        assert_eq!(normalize_family(" a\tb\u{b}c "), "abc", "every ASCII whitespace goes");
        assert_eq!(normalize_family("Ärger Family"), "ärgerfamily");
    }
}
