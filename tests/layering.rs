//! The layering invariants of ARCHITECTURE.md, checked on the source: which workspace crate may
//! depend on which (read from the manifests), which of a crate's top-level modules may name which
//! (read from every `crate::…` path in the code, `use` lines and inline paths alike), and that no
//! two modules name each other, directly or through others. A change that breaks one fails here
//! with the offending files named.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The code of a file without its comments (line comments and doc comments), so that prose naming
/// a module is not an import.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines().map(|l| l.find("//").map_or(l, |i| &l[..i])).collect::<Vec<_>>().join("\n")
}

/// The top-level modules of the crate a file's code names through `crate::` (in `use` lines,
/// `use crate::{a, b}` groups and inline paths).
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level names of a `crate::{a::x, b, c::{..}}` group: the group is cut at its
            // depth-0 commas and each item's leading name is taken (an item may span lines).
            let mut depth = 0;
            let mut item = String::new();
            let mut items = Vec::new();
            for ch in group.chars() {
                match ch {
                    '}' if depth == 0 => break,
                    ',' if depth == 0 => items.push(std::mem::take(&mut item)),
                    '{' => {
                        depth += 1;
                        item.push(ch);
                    }
                    '}' => {
                        depth -= 1;
                        item.push(ch);
                    }
                    c => item.push(c),
                }
            }
            items.push(item);
            for item in items {
                let name: String = item.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

/// The top-level module a file belongs to (`src/control/round.rs` → `control`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next().unwrap().as_os_str().to_string_lossy().to_string();
    first.trim_end_matches(".rs").to_string()
}

/// Which top-level modules of a crate name which, with the files that do it.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut graph: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in sources(src) {
        let module = module_of(src, &file);
        if module == "lib" || module == "main" {
            continue;
        }
        for target in crate_refs(&code(&file)) {
            if target != module {
                let rel = file.strip_prefix(root()).unwrap().display().to_string();
                graph.entry(module.clone()).or_default().entry(target).or_default().insert(rel);
            }
        }
    }
    graph
}

/// A cycle in the graph, if there is one (as the modules along it).
fn find_cycle(graph: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut cycle = path[i..].to_vec();
            cycle.push(n.to_string());
            return Some(cycle);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for next in graph.get(n).into_iter().flat_map(|m| m.keys()) {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

/// The workspace crates a manifest's `[dependencies]` (or `[dev-dependencies]`) name by path.
fn path_deps(manifest: &Path, section: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let table: toml::Table = toml::from_str(&text).unwrap();
    let Some(deps) = table.get(section).and_then(|d| d.as_table()) else { return BTreeSet::new() };
    deps.iter().filter(|(_, v)| v.get("path").is_some()).map(|(k, _)| k.clone()).collect()
}

/// Within a module directory (`control/`, `whatif/`, …): which child modules name which, through
/// `super::` paths.
fn submodule_graph(dir: &Path) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let children: BTreeSet<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs") && !p.ends_with("mod.rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().to_string())
        .collect();
    let mut graph: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for child in &children {
        let file = dir.join(format!("{child}.rs"));
        let text = code(&file).replace("super::", "crate::");
        for target in crate_refs(&text).into_iter().filter(|t| children.contains(t) && t != child) {
            graph.entry(child.clone()).or_default().entry(target).or_default().insert(child.clone());
        }
    }
    graph
}

/// Every module directory of a crate (those holding a `mod.rs`).
fn module_dirs(src: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> =
        sources(src).into_iter().filter(|f| f.ends_with("mod.rs")).map(|f| f.parent().unwrap().to_path_buf()).collect();
    dirs.sort();
    dirs
}

fn assert_acyclic(what: &str, graph: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>) {
    if let Some(cycle) = find_cycle(graph) {
        let files: Vec<String> =
            cycle.windows(2).map(|w| format!("{} -> {}: {:?}", w[0], w[1], graph[&w[0]][&w[1]])).collect();
        panic!("{what} has an import cycle {}:\n{}", cycle.join(" -> "), files.join("\n"));
    }
}

#[test]
fn crates_depend_one_way() {
    let allowed: BTreeMap<&str, &[&str]> = [
        ("solver", &[][..]),
        ("state", &[][..]),
        ("scheduler", &["solver", "state"][..]),
        ("simulator", &["scheduler", "solver", "state"][..]),
    ]
    .into_iter()
    .collect();
    for (krate, ok) in &allowed {
        let manifest = root().join(krate).join("Cargo.toml");
        for section in ["dependencies", "dev-dependencies"] {
            for dep in path_deps(&manifest, section) {
                assert!(
                    ok.contains(&dep.as_str()),
                    "{krate} must not depend on {dep} ({section} of {})",
                    manifest.display()
                );
            }
        }
    }
}

#[test]
fn no_two_modules_of_a_crate_name_each_other() {
    for krate in ["scheduler", "simulator", "solver", "state"] {
        let src = root().join(krate).join("src");
        let graph = module_graph(&src);
        assert_acyclic(krate, &graph);
        for dir in module_dirs(&src) {
            assert_acyclic(&dir.display().to_string(), &submodule_graph(&dir));
        }
    }
}

#[test]
fn the_scheduler_layers_hold() {
    let graph = module_graph(&root().join("scheduler").join("src"));
    let names = |m: &str| graph.get(m).cloned().unwrap_or_default();
    // The domain model is plain data: it names no other part of the scheduler.
    let model = names("model");
    assert!(model.is_empty(), "model must not import other modules (it imports neither cloud nor catalog): {model:?}");
    // The control loop sees the cloud through the `Cloud` trait only, never the Azure client.
    for file in sources(&root().join("scheduler/src/control")) {
        let text = code(&file);
        assert!(
            !text.contains("cloud::azure") && !text.contains("azure::"),
            "{} names the Azure client; the control loop sees only the Cloud trait",
            file.display()
        );
    }
    // Below the loop: the cloud boundary, the catalog and the store's records never name the loop,
    // the API or the job service.
    for lower in ["cloud", "catalog", "records", "accounting", "clock", "deadline"] {
        for upper in ["control", "api", "jobs"] {
            assert!(!names(lower).contains_key(upper), "{lower} must not import {upper}: {:?}", names(lower)[upper]);
        }
    }
}

#[test]
fn the_checker_finds_what_it_is_meant_to() {
    assert_eq!(
        crate_refs(
            "use crate::model::X;\nlet x = crate::cloud::azure::f();\nuse crate::{catalog::C, clock, jobs::{a, b}, \n    records,\n    api::{x::{y, z}, w}, deadline};"
        ),
        ["api", "catalog", "clock", "cloud", "deadline", "jobs", "model", "records"]
            .map(String::from)
            .into_iter()
            .collect()
    );
    let mut g: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into(), BTreeSet::new());
    assert_eq!(find_cycle(&g), None);
    g.entry("b".into()).or_default().insert("a".into(), BTreeSet::new());
    assert_eq!(find_cycle(&g), Some(vec!["a".to_string(), "b".to_string(), "a".to_string()]));
}

/// Issue #22: nothing above the `Cloud` trait can read the simulated cloud's hidden state (free
/// capacity, exact eviction rates, outages). The scheduler cannot (it never depends on the
/// simulator, `crates_depend_one_way`); in the what-if engine only the engine itself, which plays
/// the world (its outages, capacity and price changes) and reads the cloud's counters for the report,
/// names `SimCloud`: every policy (the control loop's driver, the baselines, the driver trait)
/// is handed `Arc<dyn Cloud>` and names neither the simulated cloud nor the emulator. The trait has
/// no `Any` supertrait, so a `dyn Cloud` cannot be downcast back to the simulator.
#[test]
fn what_if_policies_see_the_cloud_only_through_the_trait() {
    let whatif = root().join("simulator/src/whatif");
    // The world's side: the engine, the scenario and its workload, the report, and the quota
    // advisor (it observes a finished round's cloud, it places nothing).
    let world_side =
        ["engine.rs", "mod.rs", "scenario.rs", "report.rs", "workload.rs", "fit.rs", "philly.rs", "advise.rs"];
    let mut policies = 0;
    for file in sources(&whatif) {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        if world_side.contains(&name.as_str()) {
            continue;
        }
        policies += 1;
        let text = code(&file);
        for hidden in ["sim_cloud", "SimCloud", "arm_emulator", "World", "free_capacity", "fleets_snapshot"] {
            assert!(
                !text.contains(hidden),
                "{} names `{hidden}`: a what-if policy must see the cloud only through `Cloud`",
                file.display()
            );
        }
    }
    assert!(policies >= 3, "the policies (driver, loop_driver, baselines) were not found under {}", whatif.display());
    // The engine hands each policy the trait object, never the simulated cloud itself.
    let engine = code(&whatif.join("engine.rs"));
    for ctor in ["LoopDriver::new(", "Broker::new("] {
        let at = engine.find(ctor).unwrap_or_else(|| panic!("engine.rs no longer calls {ctor}"));
        let call = &engine[at..at + engine[at..].find(';').unwrap()];
        assert!(
            call.contains("as Arc<dyn Cloud>"),
            "engine.rs passes {ctor} something other than `Arc<dyn Cloud>`: {call}"
        );
    }
    let cloud = code(&root().join("scheduler/src/cloud/mod.rs"));
    assert!(!cloud.contains("Any"), "the Cloud trait must not allow downcasting (no `Any`)");
    // What the trait returns: `Offer` carries no free capacity from either cloud.
    for file in ["simulator/src/sim_cloud/mod.rs", "scheduler/src/cloud/azure/mod.rs"] {
        let text = code(&root().join(file));
        assert!(
            text.contains("capacity_vms: None") && !text.contains("capacity_vms: Some"),
            "{file} must list offers without their free capacity (Azure never publishes it)"
        );
    }
    // The one place that may show it: the benchmark instrument, compiled only with a feature that
    // no manifest but the simulator's own (which declares it) names.
    let sim = code(&root().join("simulator/src/sim_cloud/mod.rs"));
    assert!(
        sim.contains("#[cfg(feature = \"bench-oracle\")]\nmod bench_oracle;"),
        "simulator/src/sim_cloud/bench_oracle.rs must stay behind the bench-oracle feature"
    );
    // Every manifest of the workspace (the root's and each crate folder's), so a crate added later
    // is checked too.
    let crates = std::fs::read_dir(root()).unwrap().filter_map(Result::ok).map(|e| e.path().join("Cargo.toml"));
    for manifest in std::iter::once(root().join("Cargo.toml")).chain(crates).filter(|m| m.is_file()) {
        if manifest.starts_with(root().join("simulator")) {
            continue;
        }
        let text = std::fs::read_to_string(&manifest).unwrap();
        let manifest = manifest.display();
        assert!(!text.contains("bench-oracle"), "{manifest} turns on the simulator's bench-oracle feature");
    }
}
