//! `xce` argument handling that needs no cluster.

#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};

fn xce(args: &[&str], peers: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xce"));
    cmd.args(args).env_remove("XCE_PEERS");
    if let Some(p) = peers {
        cmd.env("XCE_PEERS", p);
    }
    cmd.output().unwrap()
}

fn json_error(out: &Output) -> serde_json::Value {
    assert!(!out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["error"].clone()
}

#[test]
fn missing_or_malformed_peers_are_invalid_and_named() {
    let e = json_error(&xce(&["jobs", "-o", "json"], None));
    assert_eq!(e["code"], "invalid");
    assert!(e["message"].as_str().unwrap().contains("XCE_PEERS"));
    let e = json_error(&xce(
        &["-o", "json", "jobs", "--peers", "c1=h:1,c1=h:2"],
        None,
    ));
    assert_eq!(e["code"], "invalid");
    assert!(e["message"].as_str().unwrap().contains("duplicate name"));
    let e = json_error(&xce(&["jobs", "-o", "json"], Some("c1=h:")));
    assert!(e["message"].as_str().unwrap().contains("c1=h:"), "{e}");
}

#[test]
fn submit_without_a_command_is_invalid() {
    let e = json_error(&xce(&["submit", "-o", "json"], Some("127.0.0.1:1")));
    assert_eq!(e["code"], "invalid");
    assert!(e["message"].as_str().unwrap().contains("command"));
}

#[test]
fn text_errors_go_to_stderr_with_a_non_zero_exit() {
    let out = xce(&["jobs"], None);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--peers"));
}
