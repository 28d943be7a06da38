//! Workers through the real binaries: joining, host control, liveness, rejoin after failover.

#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use xce_client::ops::ListHosts;
use xce_client::types::{Host, HostState};
use xce_tests::{bin, json_of, wait_for, Cluster};

/// Short liveness for tests: heartbeats every 200 ms, unavailable after 1 s of silence.
const CONFIG: &str = "hosts:\n  heartbeat_ttl_ms: 1000\n";
const WORKER_ARGS: &[&str] = &["--heartbeat-ms", "200", "--cpus", "2", "--mem-mb", "1024"];

async fn host(cluster: &Cluster, name: &str) -> Option<Host> {
    let hosts = cluster.client().call(ListHosts).await.ok()?;
    hosts.into_iter().find(|h| h.name == name)
}

async fn wait_state(cluster: &Cluster, name: &str, state: HostState) -> Host {
    wait_for(
        &format!("{name} {}", state.name()),
        Duration::from_secs(30),
        || async { host(cluster, name).await.filter(|h| h.state == state) },
    )
    .await
}

#[tokio::test]
async fn a_worker_joins_with_its_attributes_and_is_listed() {
    let cluster = Cluster::start_full(3, Some(CONFIG), 2, WORKER_ARGS);
    cluster.wait_primary().await;
    let w1 = wait_state(&cluster, "w1", HostState::Ok).await;
    assert_eq!((w1.cpus, w1.mem_mb, w1.running), (2, 1024, 0));
    wait_state(&cluster, "w2", HostState::Ok).await;
    let out = cluster.xce(&["hosts", "-o", "json"]);
    assert!(out.status.success());
    assert_eq!(
        json_of(&out)[0],
        serde_json::json!({"name": "w1", "cpus": 2, "mem_mb": 1024, "state": "ok", "running": 0, "cpus_used": 0})
    );
}

#[tokio::test]
async fn hosts_close_and_open_and_unknown_hosts_are_named() {
    let cluster = Cluster::start_full(1, Some(CONFIG), 1, WORKER_ARGS);
    wait_state(&cluster, "w1", HostState::Ok).await;
    assert!(cluster.xce(&["host", "close", "w1"]).status.success());
    assert_eq!(host(&cluster, "w1").await.unwrap().state, HostState::Closed);
    assert!(cluster.xce(&["host", "open", "w1"]).status.success());
    assert_eq!(host(&cluster, "w1").await.unwrap().state, HostState::Ok);
    let out = cluster.xce(&["-o", "json", "host", "close", "w9"]);
    assert!(!out.status.success());
    let err = json_of(&out);
    assert_eq!(err["error"]["code"], "noEnt");
    assert!(err["error"]["message"].as_str().unwrap().contains("w9"));
}

#[tokio::test]
async fn a_silent_worker_becomes_unavailable_and_returns_when_restarted() {
    let mut cluster = Cluster::start_full(3, Some(CONFIG), 1, WORKER_ARGS);
    wait_state(&cluster, "w1", HostState::Ok).await;
    cluster.local.kill9_worker(0).unwrap();
    let killed = Instant::now();
    wait_state(&cluster, "w1", HostState::Unavailable).await;
    // The TTL is 1 s and the primary checks four times per TTL.
    assert!(
        killed.elapsed() >= Duration::from_millis(900),
        "{:?}",
        killed.elapsed()
    );
    cluster.local.start_worker(0).unwrap();
    wait_state(&cluster, "w1", HostState::Ok).await;
}

#[tokio::test]
async fn a_worker_follows_a_failover_and_stays_available() {
    let mut cluster = Cluster::start_full(3, Some(CONFIG), 1, WORKER_ARGS);
    let (primary, _) = cluster.wait_all_standbys().await;
    wait_state(&cluster, "w1", HostState::Ok).await;
    cluster.kill9(primary);
    cluster.wait_primary().await;
    // Three TTLs on the new primary: the worker must have found it and kept heartbeating.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        if let Some(h) = host(&cluster, "w1").await {
            assert_eq!(
                h.state,
                HostState::Ok,
                "w1 went {:?} after the failover",
                h.state
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn an_unwritable_spool_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let out = Command::new(bin("xce-worker"))
        .args([
            "--peers",
            "c1=127.0.0.1:1",
            "--name",
            "w1",
            "--mem-mb",
            "1",
            "--spool-dir",
        ])
        .arg(file.join("spool"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("spool dir") && stderr.contains("a-file"),
        "{stderr}"
    );
}
