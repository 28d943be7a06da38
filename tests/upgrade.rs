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
use xce_tests::{background_submits, bin, json_of, Cluster};

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
