//! `xce-bench sched` runs its three parts on a small load and prints its metric lines: the
//! contract's four, then where the drain's CPU went. It needs the daemons beside `xce-bench`
//! (`cargo nextest run --workspace` builds them).

#![allow(clippy::unwrap_used)]

mod common;

use common::{names, run_bench, value};

#[test]
fn sched_prints_the_documented_metric_lines_with_positive_values() {
    let (stderr, lines) = run_bench(&[
        "sched",
        "--pending",
        "40",
        "--hosts",
        "4",
        "--latency-jobs",
        "3",
        "--drain",
        "30",
    ]);
    assert!(stderr.contains("drained 30 jobs"), "{stderr}");
    assert!(stderr.contains("cores allow at most"), "{stderr}");
    let expected = [
        "placement_throughput",
        "backfill_round_ms",
        "backfill_placements_per_s",
        "backfill_batch_round_ms",
        "submit_to_running_p50_ms",
        "submit_to_running_p99_ms",
        "drain_throughput",
        "drain_cpu_ms_per_job",
        "drain_cpu_ms_controllers",
        "drain_cpu_ms_shims_and_jobs",
        "drain_cpu_ms_scheduler",
        "drain_cpu_ms_workers",
        "drain_cpu_ms_process_floor",
    ];
    assert_eq!(names(&lines), expected);
    for name in expected {
        // A daemon's own CPU is counted in clock ticks: a small drain may take none.
        if !name.ends_with("_scheduler") && !name.ends_with("_workers") {
            assert!(
                value(&lines, name) > 0.0,
                "{name} is not positive: {lines:?}"
            );
        }
    }
}

#[test]
fn sched_with_slots_prints_the_turnover_and_the_unlimited_drain_beside_it() {
    let (stderr, lines) = run_bench(&[
        "sched",
        "--pending",
        "0",
        "--latency-jobs",
        "3",
        "--drain",
        "30",
        "--slots",
        "2",
        "--compare-unlimited",
        "--dispatch-ahead",
        "2",
    ]);
    assert!(
        stderr.contains("slot turnovers on 2 slots per worker"),
        "{stderr}"
    );
    let expected = [
        "submit_to_running_p50_ms",
        "submit_to_running_p99_ms",
        "drain_throughput",
        "slot_turnover_p50_ms",
        "slot_turnover_p99_ms",
        "drain_cpu_ms_per_job",
        "drain_cpu_ms_controllers",
        "drain_cpu_ms_shims_and_jobs",
        "drain_cpu_ms_scheduler",
        "drain_cpu_ms_workers",
        "drain_cpu_ms_process_floor",
        "drain_cpu_ms_per_job_unlimited",
        "drain_cpu_ms_controllers_unlimited",
        "drain_cpu_ms_shims_and_jobs_unlimited",
        "drain_cpu_ms_scheduler_unlimited",
        "drain_cpu_ms_workers_unlimited",
        "drain_throughput_unlimited",
        "slots_vs_unlimited_ratio",
    ];
    assert_eq!(names(&lines), expected);
    for name in expected {
        // A turnover within the same millisecond is 0; a daemon's own CPU is counted in
        // clock ticks, and a small drain may take none.
        let ticks = name.contains("_scheduler") || name.contains("_workers");
        if !name.starts_with("slot_turnover") && !ticks {
            assert!(
                value(&lines, name) > 0.0,
                "{name} is not positive: {lines:?}"
            );
        }
    }
    assert!(value(&lines, "slot_turnover_p99_ms") >= value(&lines, "slot_turnover_p50_ms"));
}
