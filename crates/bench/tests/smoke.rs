//! `xce-bench submit` runs end to end on a small load and prints its metric lines.

#![allow(clippy::unwrap_used)]

mod common;

use common::{names, run_bench};

#[test]
fn submit_prints_the_documented_metric_lines() {
    let (stderr, lines) = run_bench(&[
        "submit",
        "--controllers",
        "1",
        "--clients",
        "2",
        "--jobs",
        "50",
    ]);
    assert!(stderr.contains("50 acknowledged"), "{stderr}");
    assert_eq!(
        names(&lines),
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
