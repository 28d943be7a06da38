//! Bad configuration makes `xce-controller` exit non-zero with a message naming the problem,
//! and never touches existing data.

#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};

/// Kills (and reaps) a child when dropped, so a failed assertion never leaves it running.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn controller(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xce-controller"))
        .args(args)
        .env_remove("XCE_PEERS")
        .output()
        .unwrap()
}

fn fails_with(args: &[&str], fragment: &str) {
    let out = controller(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(
        stderr.contains(fragment),
        "{args:?}: {stderr:?} lacks {fragment:?}"
    );
}

#[test]
fn malformed_peers_and_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let peers = "c1=127.0.0.1:7101,c2=127.0.0.1:7102";
    fails_with(
        &[
            "--name",
            "c1",
            "--peers",
            "c1=127.0.0.1:7101,,c2=127.0.0.1:7102",
            "--data-dir",
            d,
        ],
        "candidate 2 is empty",
    );
    fails_with(
        &[
            "--name",
            "c1",
            "--peers",
            "c1=127.0.0.1:99999",
            "--data-dir",
            d,
        ],
        "out of range",
    );
    fails_with(
        &[
            "--name",
            "c1",
            "--peers",
            "c1=127.0.0.1:7101,c1=127.0.0.1:7102",
            "--data-dir",
            d,
        ],
        "duplicate name",
    );
    fails_with(
        &[
            "--name",
            "c1",
            "--peers",
            "c1=127.0.0.1:7101,c2=127.0.0.1:7101",
            "--data-dir",
            d,
        ],
        "duplicate address",
    );
    fails_with(
        &[
            "--name",
            "c1",
            "--peers",
            "a=h:1,b=h:2,c=h:3,d=h:4,e=h:5,f=h:6,g=h:7,i=h:8",
            "--data-dir",
            d,
        ],
        "too many candidates",
    );
    fails_with(
        &["--name", "c9", "--peers", peers, "--data-dir", d],
        "\"c9\" is not in --peers",
    );
}

#[test]
fn a_bad_config_file_is_refused_and_check_config_validates() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "queues: []\nsurprise: true\n").unwrap();
    let peers = "c1=127.0.0.1:7101";
    fails_with(
        &[
            "--name",
            "c1",
            "--peers",
            peers,
            "--data-dir",
            d,
            "--config",
            bad.to_str().unwrap(),
        ],
        "surprise",
    );
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/controller.yaml");
    let out = controller(&[
        "--name",
        "c1",
        "--peers",
        peers,
        "--data-dir",
        d,
        "--config",
        example,
        "--check-config",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn foreign_corrupt_and_unwritable_data_dirs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let peers = "c1=127.0.0.1:1,c2=127.0.0.1:2";
    // A data dir that belongs to c2...
    let c2 = dir.path().join("c2");
    let mut owner = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_xce-controller"))
            .args([
                "--name",
                "c2",
                "--peers",
                peers,
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(&c2)
            .spawn()
            .unwrap(),
    );
    let store = c2.join("xce.redb");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !store.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "c2 never created its store"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // ...is in use while c2 runs, and foreign to c1 once it stopped.
    fails_with(
        &[
            "--name",
            "c2",
            "--peers",
            peers,
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            c2.to_str().unwrap(),
        ],
        "in use by another running controller",
    );
    owner.0.kill().unwrap();
    owner.0.wait().unwrap();
    let before = std::fs::read(&store).unwrap();
    fails_with(
        &[
            "--name",
            "c1",
            "--peers",
            peers,
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            c2.to_str().unwrap(),
        ],
        "belongs to controller c2",
    );
    assert_eq!(
        std::fs::read(&store).unwrap(),
        before,
        "refused data was modified"
    );

    let corrupt = dir.path().join("corrupt");
    std::fs::create_dir(&corrupt).unwrap();
    std::fs::write(corrupt.join("xce.redb"), b"garbage garbage garbage").unwrap();
    fails_with(
        &[
            "--name",
            "c1",
            "--peers",
            peers,
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            corrupt.to_str().unwrap(),
        ],
        "xce.redb",
    );

    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    fails_with(
        &[
            "--name",
            "c1",
            "--peers",
            peers,
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            file.join("sub").to_str().unwrap(),
        ],
        "a-file",
    );
}

/// Secure by default: plaintext beyond loopback needs `--insecure`; TLS half given, or given
/// files that are not there, is an error naming what is wrong.
#[test]
fn plaintext_beyond_loopback_and_broken_tls_settings_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let wide = [
        "--name",
        "c1",
        "--peers",
        "c1=10.9.8.7:7101",
        "--data-dir",
        d,
    ];
    fails_with(
        &[&wide[..], &["--check-config"]].concat(),
        "10.9.8.7:7101 is not a loopback address",
    );
    let out = controller(&[&wide[..], &["--check-config", "--insecure"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let local = [
        "--name",
        "c1",
        "--peers",
        "c1=127.0.0.1:7101",
        "--data-dir",
        d,
    ];
    fails_with(
        &[&local[..], &["--check-config", "--tls-ca", "ca.pem"]].concat(),
        "tls-cert, tls-key not given",
    );
    fails_with(
        &[
            &local[..],
            &[
                "--check-config",
                "--tls-ca",
                "/nonexistent/ca.pem",
                "--tls-cert",
                "c.pem",
                "--tls-key",
                "k.pem",
            ],
        ]
        .concat(),
        "/nonexistent/ca.pem",
    );
    // The YAML's `tls:` keys are checked like every other key.
    let yaml = dir.path().join("c.yaml");
    std::fs::write(&yaml, "tls:\n  ca: a.pem\n  certificate: c.pem\n").unwrap();
    fails_with(
        &[
            &local[..],
            &["--check-config", "--config", yaml.to_str().unwrap()],
        ]
        .concat(),
        "certificate",
    );
}

/// The settings that identify a controller come from flags, `XCE_*` or the YAML, in that
/// order: a file alone is enough, a flag wins over it, and what none of them gives is named.
#[test]
fn name_peers_and_data_dir_come_from_flags_or_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = dir.path().join("controller.yaml");
    let data = dir.path().join("data");
    std::fs::write(
        &yaml,
        format!(
            "name: c9\npeers: c1=127.0.0.1:7101,c2=127.0.0.1:7102\ndata_dir: {}\n",
            data.display()
        ),
    )
    .unwrap();
    let file = yaml.to_str().unwrap();
    // c9 (from the file) is not a candidate; --name c1 wins over it and makes it valid.
    fails_with(
        &["--config", file, "--check-config"],
        "--name \"c9\" is not in --peers",
    );
    let out = controller(&["--config", file, "--name", "c1", "--check-config"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Nothing gives the data dir.
    std::fs::write(&yaml, "name: c1\npeers: c1=127.0.0.1:7101\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_xce-controller"))
        .args(["--config", file, "--check-config"])
        .env_remove("XCE_PEERS")
        .env_remove("XCE_DATA_DIR")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("no data_dir: give --data-dir, XCE_DATA_DIR or `data_dir:`"),
        "{err}"
    );
}
