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

/// Whom jobs run as: a root worker runs them as root only when told so with
/// `--allow-root-jobs`, and `user` mode needs root.
#[test]
fn running_jobs_as_root_must_be_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_xce-worker"))
            .args(["--peers", "c1=127.0.0.1:1", "--name", "w1", "--mem-mb", "1"])
            .args(extra)
            .arg("--spool-dir")
            .arg(dir.path())
            .env_remove("XCE_RUN_JOBS_AS")
            .env_remove("XCE_ALLOW_ROOT_JOBS")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // Only refusals are run here: a worker that starts would keep trying to reach c1.
    if nix::unistd::geteuid().is_root() {
        for mode in ["any", "worker"] {
            let err = run(&["--run-jobs-as", mode]);
            assert!(err.contains("--allow-root-jobs"), "{mode}: {err}");
        }
    } else {
        let err = run(&["--run-jobs-as", "user"]);
        assert!(err.contains("needs root"), "{err}");
    }
}

/// A YAML file carries the same settings as the flags: unknown keys are named, flags win
/// over the file, and `--check-config` validates without starting.
#[test]
fn a_config_file_is_checked_and_flags_win_over_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("worker.yaml");
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_xce-worker"))
            .arg("--config")
            .arg(&path)
            .args(extra)
            .env_remove("XCE_PEERS")
            .env_remove("XCE_NAME")
            .env_remove("XCE_SPOOL_DIR")
            .env_remove("XCE_RUN_JOBS_AS")
            .env_remove("XCE_ALLOW_ROOT_JOBS")
            .output()
            .unwrap()
    };
    let spool = dir.path().join("spool");
    std::fs::write(
        &path,
        format!(
            "peers: c1=127.0.0.1:1\nname: w1\nspool_dir: {}\nmem_mb: 64\nrun_jobs_as: any\n\
             allow_root_jobs: true\nheartbeat_msec: 5\n",
            spool.display()
        ),
    )
    .unwrap();
    let out = run(&["--check-config"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown field `heartbeat_msec`"), "{err}");
    assert!(err.contains("worker.yaml"), "{err}");

    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("heartbeat_msec: 5\n", "cpus: 0\n")).unwrap();
    let out = run(&["--check-config"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--cpus"));
    // The flag wins over the file's bad value, and nothing starts.
    let out = run(&["--check-config", "--cpus", "2", "--name", "w9"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("configuration ok: worker w9"), "{stdout}");
    assert!(!spool.exists(), "--check-config prepared the spool");
}

/// Secure by default: plaintext to controllers beyond loopback needs `--insecure`.
#[test]
fn plaintext_beyond_loopback_needs_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let check = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_xce-worker"))
            .args(["--peers", "c1=10.9.8.7:1", "--name", "w1", "--check-config"])
            .args(extra)
            .arg("--spool-dir")
            .arg(dir.path())
            .env_remove("XCE_INSECURE")
            .output()
            .unwrap()
    };
    let out = check(&[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("10.9.8.7:1 is not a loopback address"),
        "{err}"
    );
    let out = check(&["--insecure"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
