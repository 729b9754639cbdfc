//! Scenario files: the `[cloud]` table (`spillway serve --scenario`, `emulate-arm`) parsed and
//! validated against the built-in catalog, and whole what-if scenarios (`spillway simulate`).
//! Neither may panic, whatever the text.
#![no_main]

use std::path::Path;
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
    // A what-if scenario may name a fit file, which is read while parsing. Paths into device and
    // process trees would make the run block on a read (`/dev/stdin`) or allocate without bound
    // (`/dev/zero`): that is the user's own file choice, not a parser bug, so skip those inputs.
    if text.contains("/dev") || text.contains("/proc") || text.contains("/sys") {
        return;
    }
    // Relative paths resolve against a directory that does not exist, so they fail fast.
    let base = Path::new("/nonexistent-spillway-fuzz");
    if let Err(e) = simulator::whatif::Scenario::parse(text, base, "fuzz") {
        // Every refusal explains itself.
        assert!(!e.to_string().is_empty());
    }
});
