//! `xce-bench submit` runs end to end on a small load and prints its metric lines.

#![allow(clippy::unwrap_used)]

use std::process::Command;

#[test]
fn submit_prints_the_documented_metric_lines() {
    let out = Command::new(env!("CARGO_BIN_EXE_xce-bench"))
        .args([
            "submit",
            "--controllers",
            "1",
            "--clients",
            "2",
            "--jobs",
            "50",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "xce-bench failed: {stderr}");
    assert!(stderr.contains("50 acknowledged"), "{stderr}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names: Vec<&str> = lines
        .iter()
        .map(|l| l["metric"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "submit_throughput",
            "submit_latency_p50_ms",
            "submit_latency_p99_ms"
        ]
    );
    for l in &lines {
        assert!(l["value"].as_f64().unwrap() > 0.0, "{l}");
        assert!(l["unit"].is_string());
    }
}
