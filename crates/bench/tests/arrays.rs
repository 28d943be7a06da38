//! `xce-bench arrays` runs on a small load and prints its metric lines (today the dependency
//! release latency). It needs the daemons beside `xce-bench` (`cargo nextest run --workspace`
//! builds them).

#![allow(clippy::unwrap_used)]

mod common;

use common::{names, run_bench, value};

#[test]
fn arrays_prints_the_dependency_release_latency() {
    let (stderr, lines) = run_bench(&["arrays", "--dependents", "5", "--tasks", "20"]);
    assert!(stderr.contains("drained 20"), "{stderr}");
    let expected = [
        "dep_release_p50_ms",
        "dep_release_p99_ms",
        "drain_throughput",
        "array_drain_throughput",
    ];
    assert_eq!(names(&lines), expected);
    for name in expected {
        assert!(value(&lines, name) > 0.0, "{name}: {lines:?}");
    }
}
