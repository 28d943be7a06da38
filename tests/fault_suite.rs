//! The fault suite's short fixed-seed run (`scripts/faults` runs it for longer): a cluster
//! under kills, pauses, partitions and slow links while clients submit through the CLI and
//! the HTTP API; every check of the history checker must pass.

#![allow(clippy::unwrap_used)]

use xce_tests::bin;

#[test]
fn a_short_fixed_seed_fault_run_passes_every_check() {
    // Half a minute, and the round of faults begun then is finished: every kind once at
    // least, a restart of every controller among them.
    let out = std::process::Command::new(bin("xce-faults"))
        .args(["--minutes", "0.5", "--seed", "11"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stdout.lines().last().unwrap_or_default();
    let summary: serde_json::Value = serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("no JSON summary ({e}): {stdout}\n{stderr}"));
    assert!(out.status.success(), "{summary:#}\n{stderr}");
    assert_eq!(summary["ok"], true, "{summary:#}");
    let kinds = summary["faults_by_kind"].as_object().unwrap();
    assert_eq!(kinds.len(), 12, "every kind of fault: {summary:#}");
    assert_eq!(
        summary["majority_down"].as_array().unwrap().len(),
        kinds["restart_every_controller"],
        "{summary:#}"
    );
    assert!(
        summary["submits"]["acknowledged"].as_u64().unwrap() > 50,
        "{summary:#}"
    );
}
