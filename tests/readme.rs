//! README.md against the built binary (issue #24): a new user reads the README first, so what it
//! shows must be what the binary does. Every command `spillway --help` lists has a row in one of
//! its tables, and the plan example's output is what `spillway plan` prints for its input.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap()
}

fn spillway(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_spillway")).args(args).output().expect("spillway runs")
}

/// The subcommands of `spillway --help`, as clap lists them (`help` aside).
fn commands() -> Vec<String> {
    let out = spillway(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let listed = help.split("Commands:").nth(1).expect("a Commands: section").split("\n\n").next().unwrap();
    listed.lines().filter_map(|l| l.split_whitespace().next()).filter(|c| *c != "help").map(str::to_string).collect()
}

/// The fenced blocks of `lang` in the README section whose heading is `heading`, in order.
fn blocks(text: &str, heading: &str, lang: &str) -> Vec<String> {
    let start = text.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("no section {heading:?}"));
    let section = &text[start + heading.len() + 2..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    let mut out = Vec::new();
    let mut rest = section;
    let fence = format!("```{lang}\n");
    while let Some(i) = rest.find(&fence) {
        let body = &rest[i + fence.len()..];
        let end = body.find("```").expect("a closed block");
        out.push(body[..end].to_string());
        rest = &body[end + 3..];
    }
    out
}

#[test]
fn every_command_has_a_row_in_a_readme_table() {
    let text = readme();
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with('|')).collect();
    let commands = commands();
    assert!(commands.len() >= 10, "{commands:?}");
    let missing: Vec<&String> =
        commands.iter().filter(|c| !rows.iter().any(|r| r.contains(&format!("`spillway {c}")))).collect();
    assert!(missing.is_empty(), "commands without a row in a README table: {missing:?}");
}

#[test]
fn the_readme_plan_example_is_what_plan_prints() {
    let text = readme();
    let examples = blocks(&text, "## The plan problem format", "json");
    assert_eq!(examples.len(), 2, "the problem and its plan");
    let dir = std::env::temp_dir().join(format!("spillway-readme-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let problem = dir.join("problem.json");
    std::fs::write(&problem, &examples[0]).unwrap();
    let out = spillway(&["plan", "--problem", problem.to_str().unwrap(), "--output", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    let shown: Value = serde_json::from_str(&examples[1]).expect("the README's plan is JSON");
    for key in ["placements", "unplaced", "placed_weight", "expected_cost", "solver", "optimal"] {
        assert_eq!(got[key], shown[key], "`{key}` differs from the README:\n{got:#}");
    }
    // How long it took and how close the bound came vary from machine to machine; that they are
    // there does not.
    assert!(got["solve_ms"].is_number() && got["gap"].is_number(), "{got}");
    let solver = got["solver"].as_str().unwrap();
    let listed = text.contains(&format!("`{solver}`"));
    assert!(listed, "the solver's name {solver:?} is not in the README's list");
    let _ = std::fs::remove_dir_all(dir);
}
