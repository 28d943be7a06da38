//! The `xce-scheduler` binary's flags and configuration. Also what makes `cargo test` build
//! the binary that the workspace's multi-process tests start.

#![allow(clippy::unwrap_used)]

#[test]
fn bad_flags_and_config_exit_non_zero_naming_the_problem() {
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_xce-scheduler"))
            .args(args)
            .env_remove("XCE_PEERS")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} was accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(&["--peers", "c1=no-port"]);
    assert!(err.contains("--peers"), "{err}");
    let err = run(&[]);
    assert!(err.contains("--peers: required"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let yaml = dir.path().join("scheduler.yaml");
    std::fs::write(&yaml, "peers: c1=127.0.0.1:1\nlease_tll_ms: 5\n").unwrap();
    let err = run(&["--config", yaml.to_str().unwrap(), "--check-config"]);
    assert!(err.contains("lease_tll_ms"), "{err}");
    // A good file passes the check.
    std::fs::write(&yaml, "peers: c1=127.0.0.1:1\nname: s2\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_xce-scheduler"))
        .args(["--config", yaml.to_str().unwrap(), "--check-config"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("scheduler s2"));
    // Secure by default: plaintext to controllers beyond loopback needs --insecure.
    let err = run(&["--peers", "c1=10.9.8.7:1", "--check-config"]);
    assert!(
        err.contains("10.9.8.7:1 is not a loopback address"),
        "{err}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_xce-scheduler"))
        .args(["--peers", "c1=10.9.8.7:1", "--check-config", "--insecure"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
