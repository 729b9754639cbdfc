//! The built-in catalog is consistent, carries the corrections to its source, and agrees with the
//! source's prices where the source is present.

use std::path::Path;

use scheduler::Catalog;
use scheduler::model::Priority;

#[test]
fn every_size_has_family_gpus_and_vcpus() {
    let cat = Catalog::builtin();
    assert!(cat.sizes().len() >= 20, "catalog lost sizes: {}", cat.sizes().len());
    for s in cat.sizes() {
        assert!(!s.family.is_empty(), "{} has no quota family", s.name);
        assert!(s.vcpus > 0, "{} has no vCPUs", s.name);
        assert!(s.gpus > 0 || s.gpu_fraction.is_some(), "{} has no GPU count", s.name);
        assert!(!s.workloads.is_empty(), "{} suits no workload", s.name);
    }
}

#[test]
fn required_sizes_are_present() {
    let cat = Catalog::builtin();
    for name in [
        "Standard_NC24ads_A100_v4",
        "Standard_NC48ads_A100_v4",
        "Standard_NC96ads_A100_v4",
        "Standard_ND96asr_v4",
        "Standard_ND96amsr_A100_v4",
        "Standard_ND96isr_H100_v5",
        "Standard_NC40ads_H100_v5",
        "Standard_NC80adis_H100_v5",
        "Standard_NV36ads_A10_v5",
        "Standard_NV72ads_A10_v5",
        "Standard_NV6ads_A10_v5",
        "Standard_NV12ads_A10_v5",
        "Standard_NV18ads_A10_v5",
        "Standard_NC4as_T4_v3",
        "Standard_NC64as_T4_v3",
        "Standard_NC6s_v3",
        "Standard_NC24rs_v3",
        "Standard_ND40rs_v2",
    ] {
        assert!(cat.size(name).is_some(), "{name} missing from the catalog");
    }
}

#[test]
fn known_defects_are_corrected() {
    let cat = Catalog::builtin();
    assert_eq!(cat.size("Standard_ND96isr_H100_v5").unwrap().gpus, 8, "ND H100 v5 has 8 GPUs");
    for frac in ["Standard_NV6ads_A10_v5", "Standard_NV12ads_A10_v5", "Standard_NV18ads_A10_v5"] {
        let s = cat.size(frac).unwrap();
        assert!(s.is_fractional(), "{frac} must be marked fractional");
        assert_eq!(s.gpus, 0, "{frac} must not count as a whole GPU");
    }
    for p in cat.prices().filter(|p| p.size.contains("H100")) {
        assert_eq!(p.spot, None, "H100 spot price in {} must be unknown, not copied from on-demand", p.region);
    }
    assert!(cat.sizes().iter().all(|s| !s.name.contains("Promo")), "retired _Promo sizes must be left out");
}

#[test]
fn prices_are_positive_and_spot_is_cheaper() {
    let cat = Catalog::builtin();
    for p in cat.prices() {
        for v in [p.regular, p.spot].into_iter().flatten() {
            assert!(v > 0.0, "{} {} has a non-positive price", p.size, p.region);
        }
        if let (Some(r), Some(s)) = (p.regular, p.spot) {
            assert!(s < r, "{} {}: spot {s} not below regular {r}", p.size, p.region);
        }
    }
}

#[test]
fn regions_are_the_eight_us_regions() {
    let cat = Catalog::builtin();
    assert_eq!(
        cat.regions(),
        ["centralus", "eastus", "eastus2", "northcentralus", "southcentralus", "westus", "westus2", "westus3"]
    );
}

#[test]
fn nc24ads_a100_eastus_is_at_the_real_list_price() {
    let cat = Catalog::builtin();
    let row = cat.price("Standard_NC24ads_A100_v4", "eastus").unwrap();
    assert_eq!(row.regular, Some(3.673));
    assert_eq!(row.spot, Some(0.444433));
    assert_eq!(row.for_priority(Priority::Spot), Some(0.444433));
}

/// Spot-checks every price in the catalog against the source file, when `../shared` is present.
#[test]
fn prices_match_the_source_file() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/prices");
    if !dir.exists() {
        eprintln!("skipped: {} is absent (the shared reference data is not here)", dir.display());
        return;
    }
    let cat = Catalog::builtin();
    let mut checked = 0;
    for file in ["azure-nseries-us.csv", "azure-nseries-us-extra.csv"] {
        let Ok(text) = std::fs::read_to_string(dir.join(file)) else { continue };
        for line in text.lines().skip(1) {
            let cols = split_csv(line);
            let (name, price, spot, region) = (&cols[0], &cols[6], &cols[7], &cols[8]);
            let Some(size) = cat.size(name) else { continue };
            let row = cat.price(name, region).unwrap_or_else(|| panic!("{name} {region} missing"));
            assert_eq!(row.regular, price.parse().ok(), "{name} {region} regular");
            if !name.contains("H100") {
                assert_eq!(row.spot, spot.parse().ok(), "{name} {region} spot");
            }
            let vcpus: f64 = cols[3].parse().unwrap();
            assert_eq!(size.vcpus as f64, vcpus, "{name} vCPUs");
            checked += 1;
        }
    }
    assert!(checked > 100, "only {checked} rows checked");
}

fn split_csv(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(String::new()),
            _ => out.last_mut().unwrap().push(c),
        }
    }
    out
}

#[test]
fn user_catalog_extends_and_replaces() {
    let dir = std::env::temp_dir().join(format!("spillway-cat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let extend = dir.join("extend.toml");
    std::fs::write(
        &extend,
        r#"
[[prices]]
size = "Standard_NC24ads_A100_v4"
region = "swedencentral"
regular = 3.1
[[prices]]
size = "Standard_NC24ads_A100_v4"
region = "eastus"
regular = 2.9
[[egress]]
from = "eastus"
to = "swedencentral"
usd_per_gb = 0.05
"#,
    )
    .unwrap();
    let cat = Catalog::builtin_with(&extend).unwrap();
    // Transfer prices: the file's pair, the default between others, nothing within a region; the
    // solver is given the same table.
    assert_eq!(cat.egress_usd_per_gb("eastus", "swedencentral"), 0.05);
    assert_eq!(cat.egress_usd_per_gb("swedencentral", "eastus"), 0.02, "one direction per row");
    assert_eq!(cat.egress_usd_per_gb("eastus", "eastus"), 0.0);
    assert_eq!(cat.egress_table().len(), 1);
    assert!(Catalog::builtin().egress_table().is_empty());
    assert!(cat.regions().contains(&"swedencentral".to_string()));
    let row = cat.price("Standard_NC24ads_A100_v4", "eastus").unwrap();
    assert_eq!(row.regular, Some(2.9), "negotiated price replaces the list price");
    assert_eq!(row.spot, Some(0.444433), "a row overrides only the prices it states");
    assert!(cat.size("Standard_ND40rs_v2").is_some(), "extend keeps the built-in sizes");

    let replace = dir.join("replace.toml");
    std::fs::write(
        &replace,
        r#"
mode = "replace"
[[sizes]]
name = "Standard_X8_H200"
family = "standardXH200Family"
vcpus = 96
memory_gib = 1800
gpu_model = "H200-141GB"
gpus = 8
gpu_memory_gib = 141
infiniband = true
workloads = ["training"]
[[prices]]
size = "Standard_X8_H200"
region = "eastus"
regular = 100.0
"#,
    )
    .unwrap();
    let cat = Catalog::builtin_with(&replace).unwrap();
    assert_eq!(cat.sizes().len(), 1);
    assert_eq!(cat.regions(), ["eastus"]);

    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "[[prices]]\nsize = \"Standard_Nope\"\nregion = \"eastus\"\nregular = -1.0\n\
         [[egress]]\nfrom = \"eastus\"\nto = \"westus\"\nusd_per_gb = -0.1\n",
    )
    .unwrap();
    let err = Catalog::builtin_with(&bad).unwrap_err().to_string();
    assert!(err.contains("egress[eastus westus].usd_per_gb: must be a price ≥ 0"), "{err}");
    assert!(err.contains("unknown size Standard_Nope"), "{err}");
    assert!(err.contains("must be a positive price"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
