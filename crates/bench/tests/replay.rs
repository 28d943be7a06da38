//! `xce-bench replay` on the in-repo trace prints the contract's lines, for both policies, and
//! backfill's mean bounded slowdown is below FCFS's; a bad trace is named.

#![allow(clippy::unwrap_used)]

mod common;

use common::{names, run_bench, value};

const TRACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/traces/synthetic-2000.swf");

#[test]
fn replay_prints_the_contract_lines_and_backfill_beats_fcfs() {
    let mut bsld = Vec::new();
    for policy in ["fcfs", "backfill"] {
        let (_, lines) = run_bench(&["replay", "--swf", TRACE, "--policy", policy]);
        let names = names(&lines);
        for name in [
            "replay_jobs",
            "replay_utilization",
            "replay_mean_wait_s",
            "replay_mean_bsld",
        ] {
            assert!(names.contains(&name), "{name} missing from {names:?}");
        }
        assert_eq!(value(&lines, "replay_jobs"), 2000.0);
        assert!(lines.iter().all(|l| l["policy"] == policy), "{lines:?}");
        bsld.push(value(&lines, "replay_mean_bsld"));
    }
    assert!(
        bsld[1] < bsld[0],
        "backfill {} against fcfs {}",
        bsld[1],
        bsld[0]
    );
    // Many hosts: jobs wider than a host are left out and counted.
    let (_, lines) = run_bench(&[
        "replay",
        "--swf",
        TRACE,
        "--hosts",
        "8",
        "--cpus-per-host",
        "8",
        "--depth",
        "1",
    ]);
    let left_out = value(&lines, "replay_left_out");
    assert!(left_out > 0.0);
    assert_eq!(value(&lines, "replay_jobs") + left_out, 2000.0);
}

#[test]
fn a_bad_trace_is_named_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.swf");
    std::fs::write(&path, "; MaxProcs: 4\n1 0 -1 10 1\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_xce-bench"))
        .args(["replay", "--swf", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("line 2: 5 fields, the format has 18"),
        "{stderr}"
    );
}
