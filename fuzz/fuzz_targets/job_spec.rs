//! Job specs as users send them: the first byte picks TOML or JSON, the rest is the document.
//! Parsing plus validation must never panic, whatever the bytes.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use scheduler::Catalog;
use scheduler::model::{JobSpec, SpecFormat};

static CATALOG: OnceLock<Catalog> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let format = if first % 2 == 0 { SpecFormat::Toml } else { SpecFormat::Json };
    let catalog = CATALOG.get_or_init(Catalog::builtin);
    let now = time::OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap();
    if let Err(e) = JobSpec::parse_checked(text, format, catalog, now) {
        // Every refusal explains itself.
        assert!(!e.to_string().is_empty());
    }
});
