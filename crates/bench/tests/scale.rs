//! `xce-bench scale` loads a small number of jobs into its own three controllers, restarts them
//! all and prints its five metric lines with sane values. It needs `xce-controller` beside
//! `xce-bench` (`cargo build --workspace` builds it).

#![allow(clippy::unwrap_used)]

use std::process::Command;

#[test]
fn scale_prints_the_documented_metric_lines_with_sane_values() {
    let out = Command::new(env!("CARGO_BIN_EXE_xce-bench"))
        .args([
            "scale",
            "--jobs",
            "2000",
            "--clients",
            "4",
            "--inflight",
            "8",
            "--snapshot-logs",
            "50",
            "--load-timeout-s",
            "120",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "xce-bench failed: {stderr}");
    assert!(stderr.contains("2000 jobs loaded"), "{stderr}");
    assert!(stderr.contains("all 2000 jobs in "), "{stderr}");
    // Every controller restarted from a snapshot.
    assert_eq!(
        stderr
            .matches("restarted with snapshot at index Some(")
            .count(),
        3,
        "{stderr}"
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let value = |name: &str| {
        let line = lines
            .iter()
            .find(|l| l["metric"] == name)
            .unwrap_or_else(|| panic!("no {name} in {lines:?}"));
        assert!(line["unit"].is_string(), "{line}");
        line["value"].as_f64().unwrap()
    };
    let names: Vec<&str> = lines
        .iter()
        .map(|l| l["metric"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "scale_rss_mb_max",
            "scale_snapshot_mb",
            "scale_restart_ready_s",
            "scale_list_first_page_ms",
            "scale_list_all_s"
        ]
    );
    // A controller takes some MiB and far less than a GiB for 2000 jobs.
    let rss = value("scale_rss_mb_max");
    assert!((1.0..1024.0).contains(&rss), "rss {rss}");
    // 2000 small jobs: some KiB, far below 100 MiB.
    let snapshot = value("scale_snapshot_mb");
    assert!(snapshot > 0.0 && snapshot < 100.0, "snapshot {snapshot}");
    let ready = value("scale_restart_ready_s");
    assert!(ready > 0.0 && ready < 60.0, "ready {ready}");
    let first = value("scale_list_first_page_ms");
    assert!(first > 0.0 && first < 10_000.0, "first page {first}");
    let all = value("scale_list_all_s");
    assert!(all > 0.0 && all < 60.0, "all pages {all}");
}
