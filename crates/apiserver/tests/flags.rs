//! `xce-apiserver`'s flags through the real binary: secure by default.

#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};

fn check(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xce-apiserver"))
        .args(args)
        .arg("--check-config")
        .env_remove("XCE_INSECURE")
        .env_remove("XCE_PEERS")
        .output()
        .unwrap()
}

fn refused(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted; stderr: {err}");
    assert!(err.contains(needle), "{err}");
}

/// Plain HTTP beyond loopback (bearer tokens in the clear) and a plaintext backend beyond
/// loopback are each refused without `--insecure`.
#[test]
fn plaintext_beyond_loopback_needs_insecure() {
    let wide_http = ["--listen", "0.0.0.0:8080", "--peers", "c1=127.0.0.1:1"];
    refused(&check(&wide_http), "0.0.0.0:8080 is not a loopback address");
    let wide_backend = ["--listen", "127.0.0.1:8080", "--peers", "c1=10.9.8.7:1"];
    refused(
        &check(&wide_backend),
        "10.9.8.7:1 is not a loopback address",
    );
    for args in [&wide_http, &wide_backend] {
        let out = check(&[&args[..], &["--insecure"]].concat());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
