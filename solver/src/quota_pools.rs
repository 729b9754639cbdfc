//! Quota pools: the vCPU limits Azure enforces per region, and which of them a VM draws from.
//!
//! This is the one home of that rule for the whole workspace: the solver's constraints and its
//! checker, the scheduler's quota view and deadline policy, the simulated cloud and the what-if
//! baselines all ask [`QuotaPool::drawn_by`] (or one of its views below) instead of spelling it out.
//! Azure's rule: a regular VM draws from its size family's pool and from the region's `cores`; a spot
//! VM draws from the region's `lowPriorityCores` only. Family names differ in case and spacing between
//! Azure's APIs, so pools are compared by [`QuotaPool::key`] (lower-cased, spaces removed).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::priority::Priority;

/// A pool of vCPUs that Azure limits per region.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuotaPool {
    /// All regular vCPUs in the region (`cores`).
    Cores,
    /// All spot vCPUs in the region (`lowPriorityCores`).
    LowPriorityCores,
    /// Regular vCPUs of one size family, e.g. `standardNCADSA100v4Family`.
    Family(String),
}

/// The kinds of pool a VM draws from, per priority, family first (Azure checks it first): the rule
/// itself, from which every view below is derived.
fn kinds(priority: Priority) -> &'static [Kind] {
    match priority {
        Priority::Regular => &[Kind::Family, Kind::Cores],
        Priority::Spot => &[Kind::LowPriorityCores],
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Family,
    Cores,
    LowPriorityCores,
}

/// The normalised key of the `cores` pool.
pub const CORES_KEY: &str = "cores";
/// The normalised key of the `lowPriorityCores` pool.
pub const LOW_PRIORITY_CORES_KEY: &str = "lowprioritycores";

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
    /// The pools a VM of quota family `family` at `priority` draws from, family first.
    pub fn drawn_by(priority: Priority, family: &str) -> Vec<QuotaPool> {
        kinds(priority)
            .iter()
            .map(|k| match k {
                Kind::Family => QuotaPool::Family(family.to_string()),
                Kind::Cores => QuotaPool::Cores,
                Kind::LowPriorityCores => QuotaPool::LowPriorityCores,
            })
            .collect()
    }

    /// The keys ([`QuotaPool::key`]) of the pools a VM of `family` at `priority` draws from, family
    /// first.
    pub fn keys_drawn_by(priority: Priority, family: &str) -> Vec<String> {
        kinds(priority)
            .iter()
            .map(|k| match k {
                Kind::Family => normalize_family(family),
                Kind::Cores => CORES_KEY.to_string(),
                Kind::LowPriorityCores => LOW_PRIORITY_CORES_KEY.to_string(),
            })
            .collect()
    }

    /// Whether a VM at `priority` whose family's key is `family_key` (already normalised) draws from
    /// this pool: the rule as a test, for hot paths that must not allocate.
    pub fn is_drawn_by(&self, priority: Priority, family_key: &str) -> bool {
        kinds(priority).iter().any(|k| match (k, self) {
            (Kind::Cores, QuotaPool::Cores) | (Kind::LowPriorityCores, QuotaPool::LowPriorityCores) => true,
            (Kind::Family, QuotaPool::Family(f)) => same_key(f, family_key),
            _ => false,
        })
    }

    /// Parses a usages-API name: `cores`, `lowPriorityCores`, or a family.
    pub fn parse(name: &str) -> QuotaPool {
        match normalize_family(name).as_str() {
            CORES_KEY => QuotaPool::Cores,
            LOW_PRIORITY_CORES_KEY => QuotaPool::LowPriorityCores,
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

/// Whether `name` normalises to `key`, without allocating for ASCII names.
fn same_key(name: &str, key: &str) -> bool {
    if name.is_ascii() {
        let mut folded = name.bytes().filter(|b| !(*b as char).is_whitespace()).map(|b| b.to_ascii_lowercase());
        let mut k = key.bytes();
        loop {
            match (folded.next(), k.next()) {
                (None, None) => return true,
                (Some(a), Some(b)) if a == b => {}
                _ => return false,
            }
        }
    }
    normalize_family(name) == key
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn family_names_fold_case_and_drop_whitespace_in_ascii_and_beyond() {
        assert_eq!(normalize_family("Standard NCADSA100v4 Family"), "standardncadsa100v4family");
        assert_eq!(normalize_family("lowPriorityCores"), "lowprioritycores");
        assert_eq!(normalize_family(" a\tb\u{b}c "), "abc", "every ASCII whitespace goes");
        assert_eq!(normalize_family("Ärger Family"), "ärgerfamily");
    }

    #[test]
    fn a_regular_vm_draws_from_its_family_and_cores_a_spot_vm_from_low_priority_cores() {
        let fam = "Standard NCADSA100v4 Family";
        assert_eq!(QuotaPool::drawn_by(Priority::Regular, fam), [QuotaPool::Family(fam.to_string()), QuotaPool::Cores]);
        assert_eq!(QuotaPool::drawn_by(Priority::Spot, fam), [QuotaPool::LowPriorityCores]);
        assert_eq!(QuotaPool::keys_drawn_by(Priority::Regular, fam), ["standardncadsa100v4family", "cores"]);
        assert_eq!(QuotaPool::keys_drawn_by(Priority::Spot, fam), ["lowprioritycores"]);
    }

    #[test]
    fn the_three_views_agree_for_every_pool() {
        let fam = "standardNCADSA100v4Family";
        let key = normalize_family(fam);
        let pools = [
            QuotaPool::Cores,
            QuotaPool::LowPriorityCores,
            QuotaPool::Family(fam.into()),
            QuotaPool::Family("Standard NCADSA100v4 Family".into()),
            QuotaPool::Family("standardNDASv4_A100Family".into()),
        ];
        for priority in [Priority::Regular, Priority::Spot] {
            let keys = QuotaPool::keys_drawn_by(priority, fam);
            for p in &pools {
                assert_eq!(p.is_drawn_by(priority, &key), keys.contains(&p.key()), "{p} {priority}");
            }
        }
    }

    #[test]
    fn pools_parse_and_print_as_the_usages_api_spells_them() {
        assert_eq!(QuotaPool::parse("lowPriorityCores"), QuotaPool::LowPriorityCores);
        assert_eq!(QuotaPool::parse("Cores"), QuotaPool::Cores);
        assert_eq!(QuotaPool::parse("standardNCADSA100v4Family").name(), "standardNCADSA100v4Family");
        let json = serde_json::to_string(&QuotaPool::LowPriorityCores).unwrap();
        assert_eq!(json, "\"lowPriorityCores\"");
        assert_eq!(serde_json::from_str::<QuotaPool>(&json).unwrap(), QuotaPool::LowPriorityCores);
    }
}
