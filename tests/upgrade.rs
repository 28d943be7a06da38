//! A rolling upgrade: every controller restarted in turn on a new build (same store format)
//! while clients go on submitting, through a failover client and through one-shot CLI
//! processes. No call may fail, and every acknowledged job must be there afterwards.
//! CI rolls onto a copy of this build; `XCE_UPGRADE_FROM=DIR` rolls from an older build.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xce_client::ops::all_jobs;
use xce_client::types::JobFilter;
use xce_tests::{background_submits, bin, json_of, wait_for, Cluster};

/// Every load loop is bounded by count and by time.
const MAX_CALLS: usize = 2_000;
const MAX_SPAN: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_every_controller_on_a_new_build_in_turn_fails_no_call() {
    // XCE_UPGRADE_FROM=DIR: the cluster starts on an older build's controller (in DIR, with
    // the same store format) and rolls to this build's. Without it the "new build" is this
    // build's controller copied to another path, which proves the procedure only.
    let dir = tempfile::tempdir().unwrap();
    let (mut cluster, new) = match std::env::var_os("XCE_UPGRADE_FROM") {
        Some(old) => {
            let builder = Cluster::builder().bin_dir(PathBuf::from(old));
            let new = bin("xce-controller").canonicalize().unwrap();
            (builder.controllers(3).start(), new)
        }
        None => {
            let new = dir.path().join("xce-controller-next");
            std::fs::copy(bin("xce-controller"), &new).unwrap();
            (
                Cluster::builder().controllers(3).start(),
                new.canonicalize().unwrap(),
            )
        }
    };
    let (primary, _) = cluster.wait_all_standbys().await;
    for c in cluster.controllers() {
        let exe = std::fs::read_link(format!("/proc/{}/exe", c.pid().unwrap())).unwrap();
        assert_ne!(exe, new, "{} already runs the new build", c.name);
    }

    let stop = Arc::new(AtomicBool::new(false));
    let client = cluster.client_with_default_budget();
    let library = background_submits(client, stop.clone(), MAX_CALLS, MAX_SPAN);
    let peers = cluster.peers.clone();
    let one_shots = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (t0, mut acked, mut failed) = (Instant::now(), Vec::new(), Vec::new());
            while !stop.load(Ordering::Relaxed)
                && acked.len() < MAX_CALLS
                && t0.elapsed() < MAX_SPAN
            {
                let out = xce_tests::xce(&peers, &["-o", "json", "submit", "--", "true"]);
                if out.status.success() {
                    acked.push(json_of(&out)["id"].as_u64().unwrap());
                } else {
                    failed.push(String::from_utf8_lossy(&out.stdout).into_owned());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            (acked, failed)
        })
    };

    // Standbys first, the primary last, as an operator would; each back and caught up (a
    // primary and both standbys answering) before the next goes down.
    let order = (1..=3).map(|k| (primary + k) % 3);
    for i in order {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let status = cluster.stop(i).await;
        assert!(status.success(), "c{} stopped with {status}", i + 1);
        cluster.replace_binary(i, new.clone());
        cluster.restart(i);
        cluster.wait_all_standbys().await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let (lib_acked, lib_failed) = library.await.unwrap();
    let (cli_acked, cli_failed) = one_shots.join().unwrap();

    assert!(
        lib_failed.is_empty(),
        "failover client errors: {lib_failed:?}"
    );
    assert!(cli_failed.is_empty(), "CLI errors: {cli_failed:?}");
    assert!(
        lib_acked.len() > 20 && cli_acked.len() > 5,
        "{} {}",
        lib_acked.len(),
        cli_acked.len()
    );
    // Every controller runs the new build.
    for c in cluster.controllers() {
        let exe = std::fs::read_link(format!("/proc/{}/exe", c.pid().unwrap())).unwrap();
        assert_eq!(exe, new, "{} runs {}", c.name, exe.display());
    }
    // And every acknowledged job is there, once.
    let jobs = all_jobs(&cluster.client(), JobFilter::default())
        .await
        .unwrap();
    let mut ids: Vec<u64> = jobs.iter().map(|j| j.id).collect();
    ids.sort_unstable();
    let mut acked: Vec<u64> = lib_acked.into_iter().chain(cli_acked).collect();
    acked.sort_unstable();
    assert_eq!(
        ids, acked,
        "the cluster's jobs are exactly the acknowledged ones"
    );
    cluster.assert_no_errors();
}

/// The committed store fixture: three controllers' data dirs and a backup made by the last
/// build of store format 6 (`scripts/make-store-fixture`), with a manifest of what they held.
fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/store-format-6")
}

/// Stops the fixture's controllers however the test ends.
struct Controllers(Vec<xce_devcluster::process::Process>);

impl Drop for Controllers {
    fn drop(&mut self) {
        for p in &mut self.0 {
            p.kill_quietly();
        }
    }
}

/// How this build shows a job the format-6 build listed: every key it printed, unchanged,
/// and what this build adds derived from it (a result for an ended job, the pending code of
/// a job that waits with no scheduler, no time limit).
fn as_this_build_shows(old: &serde_json::Value) -> serde_json::Value {
    let mut job = old.clone();
    let state = old["state"].as_str().unwrap();
    let result = match (state, old["reason"].as_str()) {
        ("done", _) => serde_json::json!("completed"),
        ("exited", Some("killed")) => serde_json::json!("cancelled"),
        ("exited", _) => serde_json::json!("failed"),
        _ => serde_json::Value::Null,
    };
    let code = if state == "pending" {
        serde_json::json!("no_scheduler")
    } else {
        serde_json::Value::Null
    };
    let map = job.as_object_mut().unwrap();
    map.insert("result".into(), result);
    map.insert("pend_code".into(), code);
    map.insert("time_limit_s".into(), serde_json::Value::Null);
    job
}

/// The data dirs of a three-controller cluster written by the format-6 build start on this
/// build, which serves every job, queue, host and token as it was (adding only the new keys,
/// derived), raises the cluster's version once all three run it (their identities then name
/// format 7), takes a time limit; and that build's backup restores into a new cluster.
#[tokio::test]
async fn a_format_6_cluster_s_data_dirs_and_backup_are_served_by_this_build() {
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture().join("manifest.json")).unwrap()).unwrap();
    let peers = manifest["peers"].as_str().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let mut controllers = Controllers(Vec::new());
    let config = fixture().join("controller.yaml");
    for c in manifest["controllers"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let data = dir.path().join(name);
        std::fs::create_dir_all(&data).unwrap();
        for file in ["identity.json", "xce.redb"] {
            std::fs::copy(fixture().join(name).join(file), data.join(file)).unwrap();
        }
        let args = [
            "--name",
            name,
            "--peers",
            &peers,
            "--data-dir",
            &data.to_string_lossy(),
            "--config",
            &config.to_string_lossy(),
        ];
        let mut p = xce_devcluster::process::Process::new(
            name.to_string(),
            bin("xce-controller"),
            args.iter().map(|a| a.to_string()).collect(),
            dir.path().join(format!("{name}.log")),
        );
        p.start("info").unwrap();
        controllers.0.push(p);
    }
    let cli = |args: &[&str]| xce_tests::xce(&peers, args);
    let version = wait_for("the cluster's version raised", Duration::from_secs(60), || async {
        let out = cli(&["-o", "json", "cluster"]);
        let info = out.status.success().then(|| json_of(&out))?;
        let v = info["active_version"].as_u64()?;
        (v > 6).then_some(v)
    })
    .await;
    // Every job as the format-6 build listed it.
    for old in manifest["jobs"].as_array().unwrap() {
        let id = old["id"].as_u64().unwrap();
        let out = cli(&["-o", "json", "job", &id.to_string()]);
        assert!(out.status.success(), "job {id}: {out:?}");
        assert_eq!(json_of(&out), as_this_build_shows(old), "job {id}");
    }
    // Queues as listed; hosts as listed (with the memory they use, a key added since).
    let out = cli(&["-o", "json", "queues"]);
    assert_eq!(json_of(&out), manifest["queues"]);
    let out = cli(&["-o", "json", "hosts"]);
    let hosts = json_of(&out);
    for (new, old) in hosts.as_array().unwrap().iter().zip(manifest["hosts"].as_array().unwrap()) {
        for (key, value) in old.as_object().unwrap() {
            assert_eq!(&new[key], value, "host {}: {key}", old["name"]);
        }
    }
    // Tokens: the same ones listed; the revoked one still refused, a live one still works.
    let out = cli(&["-o", "json", "token", "list"]);
    assert_eq!(json_of(&out), manifest["tokens"]);
    let with_token = |token: &str| {
        std::process::Command::new(bin("xce"))
            .args(["-o", "json", "jobs", "--limit", "1"])
            .env("XCE_PEERS", &peers)
            .env("XCE_TOKEN", token)
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .env("XDG_CACHE_HOME", dir.path().join("cache"))
            .output()
            .unwrap()
    };
    let bob = with_token(manifest["token_secrets"]["bob"].as_str().unwrap());
    assert!(!bob.status.success(), "a revoked token was taken");
    assert_eq!(json_of(&bob)["error"]["code"], "auth");
    let alice = with_token(manifest["token_secrets"]["alice"].as_str().unwrap());
    assert!(alice.status.success(), "{alice:?}");
    // The new version's records are written, after each data dir's identity says so.
    let out = cli(&["-o", "json", "submit", "--time", "1:00", "-q", "normal", "--", "true"]);
    assert!(out.status.success(), "{out:?}");
    let id = json_of(&out)["id"].as_u64().unwrap();
    let out = cli(&["-o", "json", "job", &id.to_string()]);
    assert_eq!(json_of(&out)["time_limit_s"], 60);
    for c in manifest["controllers"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let path = dir.path().join(name).join("identity.json");
        wait_for(&format!("{name}'s identity raised"), Duration::from_secs(30), || async {
            let id: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
            (id["format"].as_u64()? == version).then_some(())
        })
        .await;
    }
    for p in &mut controllers.0 {
        let status = p.stop(Duration::from_secs(10)).unwrap();
        assert!(status.is_some_and(|s| s.success()), "{status:?}");
    }

    // The format-6 build's backup, into a new cluster of this build.
    let cluster = Cluster::start(1);
    cluster.wait_primary().await;
    let backup = fixture().join("backup.xcebk");
    cluster.xce_ok(&["admin", "snapshot", "restore", &backup.to_string_lossy()]);
    for old in manifest["jobs"].as_array().unwrap() {
        let id = old["id"].as_u64().unwrap();
        let out = cluster.xce_ok(&["-o", "json", "job", &id.to_string()]);
        let restored = json_of(&out);
        for key in ["state", "reason", "exit_code", "signal", "attempt", "command", "user"] {
            assert_eq!(restored[key], old[key], "job {id}: {key}");
        }
        assert_eq!(restored["result"], as_this_build_shows(old)["result"], "job {id}");
    }
    cluster.assert_no_errors();
}
