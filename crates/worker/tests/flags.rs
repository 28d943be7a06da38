//! `xce-worker` refuses bad flags with a message naming them.

#![allow(clippy::unwrap_used)]

use std::process::Command;

#[test]
fn bad_peers_and_cpus_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_xce-worker"))
            .args(args)
            .arg("--spool-dir")
            .arg(dir.path())
            .env_remove("XCE_PEERS")
            .output()
            .unwrap()
    };
    let out = run(&["--peers", "c1=h:1,,c2=h:2", "--name", "w1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("candidate 2 is empty"));
    let out = run(&["--peers", "c1=h:1", "--name", "w1", "--cpus", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--cpus"));
}
