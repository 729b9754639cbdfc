//! The crate's modules form layers: each may use only the ones below it, so there is no cycle (the
//! key-value backends know nothing of transactions, transactions nothing of the store that runs
//! them). Read from the source: every `crate::…` path in a module must name a lower module, or an
//! item of the crate root (records, tables, events).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Lowest first. A module may name only modules before it.
const LAYERS: &[&str] = &[
    "error",
    "encoding",
    "kv",
    "cache",
    "lease",
    "location",
    "commit",
    "registry",
    "tx",
    "store",
    "check",
    "dump",
    "leadership",
];

/// Items re-exported at the crate root, by the module that defines them.
fn defining_module(item: &str) -> Option<&'static str> {
    Some(match item {
        "StoreError" => "error",
        "Store" | "Schema" | "Migration" | "Migrator" | "SCHEMA" | "CACHE_BYTES" => "store",
        "Tx" | "TxAbort" => "tx",
        "Fence" | "LeaseGrant" | "LeaseHolder" => "lease",
        "StoreLocation" | "PgLocation" | "DEFAULT_STORE" => "location",
        "CheckReport" | "TableReport" | "IndexReport" => "check",
        "DumpSummary" => "dump",
        // Defined in lib.rs itself: the vocabulary every layer shares.
        "Record" | "TableDef" | "IndexDef" | "Event" | "EventDraft" => return None,
        other => return LAYERS.iter().copied().find(|m| *m == other),
    })
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The first path segment of every item named after `crate::` (`crate::{a::b, C}` gives a and C).
fn crate_paths(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map(|(j, _)| j)
                .unwrap_or(group.len());
            let mut level = 0;
            let mut item = String::new();
            for c in group[..end].chars().chain([',']) {
                match c {
                    '{' => level += 1,
                    '}' => level -= 1,
                    ',' if level == 0 => {
                        let first = item.trim().split("::").next().unwrap_or("").trim().to_string();
                        if !first.is_empty() {
                            found.insert(first);
                        }
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
        } else {
            let ident: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !ident.is_empty() {
                found.insert(ident);
            }
        }
    }
    found
}

#[test]
fn modules_use_only_the_layers_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let module = rel.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        if module == "lib" {
            continue;
        }
        let Some(rank) = LAYERS.iter().position(|m| *m == module) else {
            problems.push(format!("{}: module `{module}` is not in LAYERS (add it where it belongs)", rel.display()));
            continue;
        };
        seen.insert(module.clone());
        // Comments (doc links among them) may point anywhere; code may not.
        let text: String = std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        for item in crate_paths(&text) {
            let Some(dep) = defining_module(&item) else { continue };
            if dep == module {
                continue;
            }
            let dep_rank = LAYERS.iter().position(|m| *m == dep).unwrap();
            if dep_rank > rank {
                problems
                    .push(format!("{}: `{module}` uses `crate::{item}` from `{dep}`, a layer above it", rel.display()));
            }
        }
    }
    assert!(problems.is_empty(), "layering broken:\n{}", problems.join("\n"));
    assert_eq!(seen.len(), LAYERS.len(), "LAYERS names modules that do not exist: {:?}", LAYERS);
}

#[test]
fn the_path_reader_finds_grouped_and_nested_items() {
    let text = "use crate::{a::b, C, d::{e, f}};\nlet x = crate::g::h(1);";
    let got: Vec<String> = crate_paths(text).into_iter().collect();
    assert_eq!(got, ["C", "a", "d", "g"]);
}
