//! Membership through the real binaries: a controller whose host died is replaced by a fresh
//! one with an empty data dir (`xce-controller --join`, `xce admin members add|remove`), with
//! no downtime: clients keep submitting throughout, the newcomer catches up from a snapshot,
//! and a client given the old candidate list still finds the primary.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use xce_client::ops::all_jobs;
use xce_client::types::JobFilter;
use xce_client::ClientConfig;
use xce_tests::{background_submits, json_of, true_job, wait_for, Cluster};

/// Snapshots every 40 entries, keeping 5 behind: the newcomer cannot catch up from the log.
const CONFIG: &str = "raft:\n  snapshot_logs: 40\n  logs_kept: 5\n";
/// Every load loop is bounded by count and by time.
const MAX_CALLS: usize = 3_000;
const MAX_SPAN: Duration = Duration::from_secs(120);

fn member_names(cluster: &Cluster) -> Vec<String> {
    let listed = json_of(&cluster.xce_ok(&["-o", "json", "admin", "members"]));
    let mut names: Vec<String> = listed["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_controller_is_replaced_by_a_fresh_one_without_a_failed_call() {
    let mut cluster = Cluster::builder().controllers(3).config(CONFIG).start();
    let (primary, _) = cluster.wait_all_standbys().await;
    let old_peers = cluster.peers.clone();
    // History the newcomer must catch up on: several snapshots' worth.
    let client = cluster.client_with_default_budget();
    let mut acked = Vec::new();
    for _ in 0..150 {
        acked.push(client.call(true_job()).await.unwrap());
    }

    let stop = Arc::new(AtomicBool::new(false));
    let load = background_submits(client.clone(), stop.clone(), MAX_CALLS, MAX_SPAN);

    // A standby's host dies for good; a fresh controller with an empty data dir replaces it.
    let dead = (primary + 1) % 3;
    let dead_name = cluster.controllers()[dead].name.clone();
    cluster.kill9(dead);
    let (c4, addr) = cluster.start_joining("c4");
    cluster.xce_ok(&["admin", "members", "add", &format!("c4={addr}")]);
    cluster.xce_ok(&["admin", "members", "remove", &dead_name]);
    let mut expected: Vec<String> = cluster
        .controllers()
        .iter()
        .map(|c| c.name.clone())
        .filter(|n| *n != dead_name)
        .collect();
    expected.sort();
    assert_eq!(member_names(&cluster), expected);
    // Adding it again is done already; removing the dead one again names the problem.
    cluster.xce_ok(&["admin", "members", "add", &format!("c4={addr}")]);
    let again = cluster.xce(&["admin", "members", "remove", &dead_name]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("not a voting member"));

    // It caught up from a snapshot: the log it would have needed was compacted away.
    let log = std::fs::read_to_string(&cluster.controllers()[c4].log).unwrap();
    assert!(
        log.contains("installed a snapshot from the primary"),
        "{log}"
    );

    // Now the old primary dies too: the newcomer and the last original are the majority,
    // and a client given only the old list finds whichever is primary.
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.kill9(primary);
    let stale = cluster.client_with_peers(&old_peers, ClientConfig::default());
    let id = wait_for(
        "a submit through the old list",
        Duration::from_secs(20),
        || {
            let stale = stale.clone();
            async move { stale.call(true_job()).await.ok() }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let (load_acked, failed) = load.await.unwrap();
    assert!(
        failed.is_empty(),
        "calls failed during the replacement: {failed:?}"
    );
    assert!(load_acked.len() > 10, "{}", load_acked.len());

    // Told the members by the cluster info, the stale client's candidates are the new list.
    stale.call(xce_client::ops::GetCluster).await.unwrap();
    let names: Vec<String> = stale.candidates().into_iter().map(|c| c.name).collect();
    assert!(
        names.contains(&"c4".to_string()) && !names.contains(&dead_name),
        "{names:?}"
    );

    // Every acknowledged job is there, once, read from the new majority.
    let jobs = all_jobs(&stale, JobFilter::default()).await.unwrap();
    let mut ids: Vec<u64> = jobs.iter().map(|j| j.id).collect();
    ids.sort_unstable();
    acked.extend(load_acked);
    acked.push(id);
    acked.sort_unstable();
    assert_eq!(ids, acked);
}

/// An apiserver started with the first three controllers keeps serving after every one of
/// them has died and been replaced: it learns the members from the cluster (its calls'
/// answers and its periodic read of the cluster info), not only from its own `--peers`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apiserver_outlives_every_controller_it_was_started_with() {
    let mut cluster = Cluster::builder()
        .controllers(3)
        .config(CONFIG)
        .apiservers(1, &[])
        .start();
    cluster
        .local
        .wait_ready(Duration::from_secs(30))
        .await
        .unwrap();
    let api = cluster.api(0);
    let submit = || async {
        let made = api.post("/v1/jobs", &json!({"command": ["true"]})).await;
        (made.status == 201).then(|| made.body["id"].as_u64().unwrap())
    };
    let mut acked = vec![submit().await.expect("a first submit over HTTP")];
    let mut peers: Vec<String> = cluster.peers.split(',').map(String::from).collect();
    for (old, new) in ["c4", "c5", "c6"].into_iter().enumerate() {
        // The old host dies for good; a fresh controller takes its place.
        let old_name = cluster.controllers()[old].name.clone();
        cluster.kill9(old);
        let (_, addr) = cluster.start_joining(new);
        peers.push(format!("{new}={addr}"));
        cluster.peers = peers.join(",");
        cluster.xce_ok(&["admin", "members", "add", &format!("{new}={addr}")]);
        cluster.xce_ok(&["admin", "members", "remove", &old_name]);
        let id = wait_for(
            &format!("a submit over HTTP once {old_name} was replaced by {new}"),
            Duration::from_secs(30),
            submit,
        )
        .await;
        acked.push(id);
        // Its health check reads the members from the primary: it knows the newcomer, and
        // no longer the controller that left, before the next one dies.
        let entry = format!("{new}={addr}");
        wait_for(
            &format!("/readyz listing {entry} and not {old_name}"),
            Duration::from_secs(10),
            || async {
                let ready = api.get("/readyz").await;
                let known: Vec<String> = ready.body["controllers"]
                    .as_array()?
                    .iter()
                    .filter_map(|c| c.as_str().map(String::from))
                    .collect();
                let left = known.iter().any(|c| c.starts_with(&format!("{old_name}=")));
                (known.contains(&entry) && !left).then_some(())
            },
        )
        .await;
    }
    // Only c4..c6 are left, none of them in the apiserver's --peers, and it still serves.
    assert_eq!(member_names(&cluster), ["c4", "c5", "c6"]);
    acked.push(
        submit()
            .await
            .expect("a submit with only the new controllers"),
    );
    for id in acked {
        let got = api.get(&format!("/v1/jobs/{id}")).await;
        assert_eq!(got.status, 200, "job {id}: {:?}", got.body);
    }
}

#[tokio::test]
async fn a_controller_that_is_not_running_is_not_added() {
    let cluster = Cluster::builder().controllers(1).start();
    cluster.wait_primary().await;
    let port = xce_tests::free_ports(1)[0];
    let out = cluster.xce(&["admin", "members", "add", &format!("c9=127.0.0.1:{port}")]);
    assert!(!out.status.success());
    let out = cluster.xce(&["admin", "members", "add", "c9"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NAME=HOST:PORT"), "{err}");
}
