//! The fault suite's short fixed-seed run (`scripts/faults` runs it for longer): a cluster
//! under kills, pauses, partitions and slow links while clients submit through the CLI and
//! the HTTP API; every check of the history checker must pass.

#![allow(clippy::unwrap_used)]

use std::process::Command;

/// The binary under test; cargo builds it for this test (the workspace's other daemons are
/// built beside it by their own crates' tests).
fn faults() -> Command {
    Command::new(env!("CARGO_BIN_EXE_xce-faults"))
}

#[test]
fn bad_arguments_are_named_and_still_end_in_a_json_summary() {
    let cases: [(&[&str], &str); 3] = [
        (&["--minutes", "0", "--seed", "1"], "--minutes 0"),
        (&["--minutes", "1", "--bogus"], "--bogus"),
        (&["--partitions", "tunnel"], "tunnel"),
    ];
    for (args, named) in cases {
        let out = faults().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let summary: serde_json::Value =
            serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
        assert_eq!(summary["ok"], false, "{args:?}");
        assert!(
            summary["error"].as_str().unwrap().contains(named),
            "{args:?}: {summary}"
        );
    }
}

#[test]
fn a_short_fixed_seed_fault_run_passes_every_check() {
    // Half a minute, and the round of faults begun then is finished: every kind once at
    // least, a restart of every controller among them.
    let out = faults()
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
    // Job scripts on standard input were among them, each checked to have run its own.
    assert!(
        summary["submits"]["cli_scripts"].as_u64().unwrap() > 5,
        "{summary:#}"
    );
    assert_eq!(
        summary["checks"]["scripts_ran_their_own"], true,
        "{summary:#}"
    );
    // Some waited for an earlier job, and none started before it ended.
    assert!(
        summary["submits"]["dependents"].as_u64().unwrap() > 5,
        "{summary:#}"
    );
    assert_eq!(summary["checks"]["dependents_waited"], true, "{summary:#}");
    // Arrays were among them, each task a job of its own that ran once.
    assert!(
        summary["jobs"]["arrays"].as_u64().unwrap() > 2
            && summary["jobs"]["array_tasks"].as_u64().unwrap() >= 9,
        "{summary:#}"
    );
    assert_eq!(summary["checks"]["array_tasks_once"], true, "{summary:#}");
    // As root (CI), partitions drop packets in a network namespace of the run's own.
    let expected = if nix::unistd::geteuid().is_root() {
        "kernel"
    } else {
        "proxy"
    };
    assert_eq!(summary["partitions"], expected, "{summary:#}");
}
