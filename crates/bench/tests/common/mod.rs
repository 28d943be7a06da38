//! What every benchmark smoke test does: run `xce-bench` and read its metric lines.

#![allow(clippy::unwrap_used, dead_code)]

use std::process::Command;

/// Runs `xce-bench ARGS`, asserts it succeeded, and returns its stderr and its metric lines.
pub fn run_bench(args: &[&str]) -> (String, Vec<serde_json::Value>) {
    let out = Command::new(env!("CARGO_BIN_EXE_xce-bench"))
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "xce-bench failed: {stderr}");
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (stderr, lines)
}

/// The value of metric `name`, which must be there with a unit.
pub fn value(lines: &[serde_json::Value], name: &str) -> f64 {
    let line = lines
        .iter()
        .find(|l| l["metric"] == name)
        .unwrap_or_else(|| panic!("no {name} line in {lines:?}"));
    assert!(line["unit"].is_string(), "{line}");
    line["value"].as_f64().unwrap()
}

/// The metric names, in the order printed.
pub fn names(lines: &[serde_json::Value]) -> Vec<&str> {
    lines
        .iter()
        .map(|l| l["metric"].as_str().unwrap())
        .collect()
}
