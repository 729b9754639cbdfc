//! Scenario files (`[cloud]` of `spillway serve --scenario` and `emulate-arm`): parsing and
//! validating against the built-in catalog must never panic.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use scheduler::Catalog;

static CATALOG: OnceLock<Catalog> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let catalog = CATALOG.get_or_init(Catalog::builtin);
    if let Ok(config) = simulator::SimCloudConfig::from_scenario_str(text, "fuzz") {
        let _ = config.validate(catalog);
    }
});
