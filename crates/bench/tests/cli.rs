//! `xce-bench cli` runs a few `xce submit` processes against its own cluster and prints its
//! metric lines. It needs the `xce` binary beside `xce-bench` (`cargo build --workspace`, or
//! `cargo nextest run --workspace`, builds it).

#![allow(clippy::unwrap_used)]

mod common;

use common::{run_bench, value};

#[test]
fn cli_prints_the_documented_metric_lines_with_positive_values() {
    let (stderr, lines) = run_bench(&[
        "cli",
        "--submits",
        "12",
        "--concurrency",
        "2",
        "--timeout-s",
        "120",
    ]);
    assert!(stderr.contains("12 submits in"), "{stderr}");
    let value = |name: &str| value(&lines, name);
    for name in [
        "cli_submit_throughput",
        "cli_cpu_ms_client",
        "cli_cpu_ms_controllers",
        "cli_submit_latency_p50_ms",
        "cli_submit_latency_p99_ms",
        "cli_cpu_ms_process_floor",
    ] {
        assert!(value(name) > 0.0, "{name} is not positive: {lines:?}");
    }
    assert!(stderr.contains("a process costs"), "{stderr}");
}
