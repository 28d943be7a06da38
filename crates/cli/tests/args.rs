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
fn a_misspelt_submit_option_is_invalid_by_name() {
    let e = json_error(&xce(
        &["-o", "json", "submit", "--cpuz", "2"],
        Some("127.0.0.1:1"),
    ));
    assert_eq!(e["code"], "invalid");
    assert!(e["message"].as_str().unwrap().contains("--cpuz"), "{e}");
    let e = json_error(&xce(
        &["-o", "json", "submit", "--signal", "NOPE", "--wrap", "true"],
        Some("127.0.0.1:1"),
    ));
    assert_eq!(e["code"], "invalid");
    assert!(e["message"].as_str().unwrap().contains("NOPE"), "{e}");
}

#[test]
fn text_errors_go_to_stderr_with_a_non_zero_exit() {
    let out = xce(&["jobs"], None);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--peers"));
}

/// Subcommands' arguments are built lazily (clap's `defer`), which takes a subcommand's
/// about text from its arguments struct's doc comment: every subcommand's own help must still
/// open with what `xce --help` lists for it.
#[test]
fn every_subcommand_s_help_opens_with_what_the_list_says() {
    let out = xce(&["--help"], None);
    let root = String::from_utf8(out.stdout).unwrap();
    let listed: Vec<(&str, &str)> = root
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.trim().split_once(char::is_whitespace))
        .map(|(name, about)| (name, about.trim()))
        .filter(|(name, _)| *name != "help")
        .collect();
    assert!(listed.len() > 10, "{root}");
    for (name, about) in listed {
        let out = xce(&[name, "--help"], None);
        let help = String::from_utf8(out.stdout).unwrap();
        let first: Vec<&str> = help.lines().take_while(|l| !l.is_empty()).collect();
        assert_eq!(first.join(" "), about, "xce {name} --help");
    }
}

/// The unwinder is linked in (build.rs): `xce` must not load libgcc_s, whose constructor
/// probes the CPU with `cpuid` at every command.
#[test]
fn xce_does_not_load_libgcc_s() {
    let out = Command::new(env!("CARGO_BIN_EXE_xce"))
        .arg("--version")
        .env("LD_DEBUG", "libs")
        .output()
        .unwrap();
    assert!(out.status.success());
    let loaded = String::from_utf8_lossy(&out.stderr);
    assert!(
        loaded.contains("libc.so.6"),
        "LD_DEBUG said nothing: {loaded}"
    );
    assert!(!loaded.contains("libgcc_s"), "{loaded}");
}
