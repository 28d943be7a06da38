//! `xce-bench scale` loads a small number of jobs into its own three controllers, restarts them
//! all and prints its five metric lines with sane values. It needs `xce-controller` beside
//! `xce-bench` (`cargo build --workspace` builds it).

#![allow(clippy::unwrap_used)]

mod common;

use common::{names, run_bench, value};

#[test]
fn scale_prints_the_documented_metric_lines_with_sane_values() {
    let (stderr, lines) = run_bench(&[
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
    ]);
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
    let value = |name: &str| value(&lines, name);
    assert_eq!(
        names(&lines),
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
