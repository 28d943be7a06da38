//! `xce-bench cli` runs a few `xce submit` processes against its own cluster and prints its
//! metric lines. It needs the `xce` binary beside `xce-bench` (`cargo build --workspace`, or
//! `cargo nextest run --workspace`, builds it).

#![allow(clippy::unwrap_used)]

use std::process::Command;

#[test]
fn cli_prints_the_documented_metric_lines_with_positive_values() {
    let out = Command::new(env!("CARGO_BIN_EXE_xce-bench"))
        .args([
            "cli",
            "--submits",
            "12",
            "--concurrency",
            "2",
            "--timeout-s",
            "120",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "xce-bench failed: {stderr}");
    assert!(stderr.contains("12 submits in"), "{stderr}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let value = |name: &str| {
        let line = lines
            .iter()
            .find(|l| l["metric"] == name)
            .unwrap_or_else(|| panic!("no {name} line in {lines:?}"));
        assert!(line["unit"].is_string(), "{line}");
        line["value"].as_f64().unwrap()
    };
    for name in [
        "cli_submit_throughput",
        "cli_cpu_ms_client",
        "cli_cpu_ms_controllers",
        "cli_submit_latency_p50_ms",
        "cli_submit_latency_p99_ms",
    ] {
        assert!(value(name) > 0.0, "{name} is not positive: {lines:?}");
    }
}
