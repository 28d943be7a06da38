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

#[test]
fn failover_under_a_partition_prints_its_outage_per_fault_kind() {
    let (stderr, lines) = run_bench(&[
        "failover",
        "--fault",
        "partition",
        "--rounds",
        "2",
        "--clients",
        "2",
        "--fresh-clients",
    ]);
    assert!(stderr.contains("round 1: partition"), "{stderr}");
    assert_eq!(
        names(&lines),
        [
            "failover_outage_p50_ms",
            "failover_outage_p99_ms",
            "failover_outage_max_ms",
            "failover_slowest_call_max_ms"
        ]
    );
    for l in &lines {
        assert_eq!(l["fault"], "partition", "{l}");
        assert_eq!(l["clients"], "fresh", "{l}");
        assert!(l["value"].as_f64().unwrap() > 0.0, "{l}");
    }
}

#[test]
fn api_prints_the_documented_metric_lines() {
    let (stderr, lines) = run_bench(&[
        "api",
        "--connections",
        "4",
        "--seconds",
        "1",
        "--jobs",
        "20",
        "--degraded-requests",
        "5",
        "--degraded-seconds",
        "1",
    ]);
    assert!(stderr.contains("api: get:"), "{stderr}");
    assert_eq!(
        names(&lines),
        [
            "api_get_rps",
            "api_get_p99_ms",
            "api_post_rps",
            "api_post_p99_ms",
            "api_degraded_p99_ms"
        ]
    );
    for l in &lines {
        assert!(l["value"].as_f64().unwrap() > 0.0, "{l}");
    }
}
