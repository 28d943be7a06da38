//! `xce-bench arrays` runs on a small load and prints its metric lines: what two
//! million-task arrays cost, the dependency release latency, and the drains. It needs the daemons beside `xce-bench` (`cargo nextest run --workspace`
//! builds them).

#![allow(clippy::unwrap_used)]

mod common;

use common::{names, run_bench, value};

#[test]
fn arrays_prints_the_array_costs_and_the_dependency_release_latency() {
    let (stderr, lines) = run_bench(&[
        "arrays",
        "--dependents",
        "5",
        "--tasks",
        "20",
        "--big-arrays",
        "2",
        "--pages",
        "3",
    ]);
    assert!(stderr.contains("drained 20"), "{stderr}");
    assert!(
        stderr.contains("2 arrays of 1,000,000 tasks pending"),
        "{stderr}"
    );
    let expected = [
        "array_submit_ms",
        "array_rss_mb_per_1m",
        "first_page_ms",
        "dep_release_p50_ms",
        "dep_release_p99_ms",
        "drain_throughput",
        "array_drain_throughput",
    ];
    assert_eq!(names(&lines), expected);
    for name in expected {
        // The RSS growth of two arrays may be within a page of nothing, or even below it.
        if name != "array_rss_mb_per_1m" {
            assert!(value(&lines, name) > 0.0, "{name}: {lines:?}");
        }
    }
    assert!(
        value(&lines, "array_rss_mb_per_1m").is_finite(),
        "{lines:?}"
    );
}
