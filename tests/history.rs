//! History through the real binaries: ended jobs retire from the live state after
//! `history.retire_after`, every controller's history store holds each of them once, and
//! `xce history`, `xce job ID` and `GET /v1/history` answer for them.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use xce_client::ops::{all_jobs, Submit};
use xce_client::types::{JobFilter, JobSpec, RequestToken};
use xce_tests::{json_of, wait_for, Cluster};

/// Jobs retire a second after their end; snapshots every 40 entries and 5 entries kept
/// behind them, so that a controller that comes back, or is added, installs a snapshot past
/// retirements it never applied and must pull their records from a peer.
const CONFIG: &str = "history: {retire_after: 1s}\nraft:\n  snapshot_logs: 40\n  logs_kept: 5\n";

async fn submit(cluster: &Cluster, user: &str, command: &[&str]) -> u64 {
    let spec = JobSpec {
        command: command.iter().map(|s| s.to_string()).collect(),
        user: user.into(),
        ..JobSpec::default()
    };
    let op = Submit {
        token: RequestToken::random(),
        spec,
        script: None,
    };
    cluster.client().call(op).await.unwrap()
}

/// The ids `xce history -o json` lists, asking only controller `peer` (`name=host:port`).
fn history_of(peer: &str, args: &[&str]) -> Vec<u64> {
    let mut all = vec!["-o", "json", "history"];
    all.extend_from_slice(args);
    let out = xce_tests::xce(peer, &all);
    json_of(&out)
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn ended_jobs_retire_to_every_controller_s_history_once() {
    let mut cluster = Cluster::builder()
        .controllers(3)
        .config(CONFIG)
        .workers(1, &["--cpus", "4"])
        .schedulers(1, &[])
        .apiservers(1, &[])
        .start();
    cluster.wait_version().await;
    let mut users = BTreeMap::new();
    for i in 0..30 {
        let user = if i % 3 == 0 { "alice" } else { "bob" };
        let code = if i % 10 == 9 { "exit 3" } else { "true" };
        users.insert(submit(&cluster, user, &["sh", "-c", code]).await, user);
        // One controller is killed half-way and comes back: it applies the rest from the log.
        if i == 15 {
            cluster.kill9(2);
        }
    }
    let client = cluster.client();
    wait_for("every job retired", Duration::from_secs(60), || {
        let client = client.clone();
        async move {
            let live = all_jobs(&client, JobFilter::default()).await.ok()?;
            live.is_empty().then_some(())
        }
    })
    .await;
    // Entries beyond the retirements (held jobs, each its own), so that snapshots are taken
    // past them and the log before is compacted away.
    for _ in 0..60 {
        let spec = JobSpec {
            command: vec!["true".into()],
            hold: true,
            ..JobSpec::default()
        };
        let op = Submit {
            token: RequestToken::random(),
            spec,
            script: None,
        };
        cluster.client().call(op).await.unwrap();
    }
    cluster.restart(2);
    // A controller added afterwards holds no history of its own: it pulls it.
    let (c4, addr) = cluster.start_joining("c4");
    cluster.xce_ok(&["admin", "members", "add", &format!("c4={addr}")]);
    let all: Vec<u64> = users.keys().copied().collect();
    for c in cluster.controllers() {
        let peer = format!("{}={}", c.name, c.addr());
        let listed = wait_for(
            &format!("{}'s history to hold every job", c.name),
            Duration::from_secs(30),
            || {
                let peer = peer.clone();
                let all = all.clone();
                async move {
                    let listed = history_of(&peer, &[]);
                    (listed == all).then_some(listed)
                }
            },
        )
        .await;
        assert_eq!(listed, all, "{}", c.name);
        let alice: Vec<u64> = users
            .iter()
            .filter(|(_, u)| **u == "alice")
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(history_of(&peer, &["--user", "alice"]), alice, "{}", c.name);
    }
    let log = std::fs::read_to_string(&cluster.controllers()[c4].log).unwrap();
    assert!(
        log.contains("installed a snapshot from the primary"),
        "{log}"
    );
    assert!(log.contains("pulling them from its peers"), "{log}");
    // Filters: by result, by id range, by time window, and paging.
    let failed: Vec<u64> = all.iter().copied().skip(9).step_by(10).collect();
    assert_eq!(history_of(&cluster.peers, &["--result", "failed"]), failed);
    assert_eq!(
        history_of(&cluster.peers, &["--id", &format!("{}-{}", all[3], all[5])]),
        all[3..=5].to_vec()
    );
    assert_eq!(
        history_of(
            &cluster.peers,
            &[
                "--since",
                "now-1h",
                "--limit",
                "4",
                "--after",
                &all[1].to_string()
            ]
        ),
        all[2..6].to_vec()
    );
    assert!(history_of(&cluster.peers, &["--until", "now-1h"]).is_empty());
    // A retired job still answers `xce job ID`, with its result and usage.
    let out = cluster.xce_ok(&["-o", "json", "job", &failed[0].to_string()]);
    let job = json_of(&out);
    assert_eq!(
        (
            job["state"].as_str(),
            job["result"].as_str(),
            job["exit_code"].as_i64()
        ),
        (Some("exited"), Some("failed"), Some(3)),
        "{job}"
    );
    // Its runs, one record each (an attempt sent again after a worker's reconnect, which never
    // started, is none): the last one is its current attempt, where and how it ended.
    let runs = job["attempts"].as_array().unwrap();
    assert_eq!(runs.len() as u64, job["runs"].as_u64().unwrap(), "{job}");
    let last = runs.last().unwrap();
    assert_eq!(
        (
            last["attempt"].as_u64(),
            last["exit_code"].as_i64(),
            last["end_time"].as_str()
        ),
        (job["attempt"].as_u64(), Some(3), job["end_time"].as_str()),
        "{job}"
    );
    assert_eq!(last["host"], job["host"], "{job}");
    // Over HTTP, with the same filters and a cursor.
    let page = cluster.api(0).get("/v1/history?user=alice&limit=4").await;
    assert_eq!(page.status, 200, "{:?}", page.body);
    let ids: Vec<u64> = page.body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect();
    let alice: Vec<u64> = users
        .iter()
        .filter(|(_, u)| **u == "alice")
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(ids, alice[..4].to_vec());
    let cursor = page.body["next_cursor"].as_str().unwrap().to_string();
    let next = cluster
        .api(0)
        .get(&format!("/v1/history?user=alice&cursor={cursor}&limit=100"))
        .await;
    assert_eq!(next.body["jobs"].as_array().unwrap().len(), alice.len() - 4);
    assert_eq!(next.body["next_cursor"], serde_json::Value::Null);
    let bad = cluster.api(0).get("/v1/history?time_of=lunch").await;
    assert_eq!(bad.status, 400, "{:?}", bad.body);
    // A dependency on a retired job is decided from its record: met by one that completed,
    // refused, naming why, on one that failed.
    let after_ok = cluster.xce_ok(&[
        "-o",
        "json",
        "submit",
        "--dependency",
        &format!("afterok:{}", all[0]),
        "--",
        "true",
    ]);
    let child = json_of(&after_ok)["id"].as_u64().unwrap();
    cluster
        .wait_job(child, "done", |j| j.state.is_final())
        .await;
    let out = cluster.xce(&[
        "submit",
        "--dependency",
        &format!("afterok:{}", failed[0]),
        "--",
        "true",
    ]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains(&format!(
            "never satisfied: job {} ended failed (it retired to history)",
            failed[0]
        )),
        "{said}"
    );
    // An array retires with its tasks; `xce job ID_IDX` still answers for a task.
    let out = cluster.xce_ok(&["-o", "json", "submit", "--array", "0-2", "--", "true"]);
    let array = json_of(&out)["id"].as_u64().unwrap();
    wait_for("the array retired", Duration::from_secs(60), || {
        let client = client.clone();
        async move {
            let live = all_jobs(&client, JobFilter::default()).await.ok()?;
            live.iter()
                .all(|j| j.id != array && j.array_task.is_none_or(|t| t.array_id != array))
                .then_some(())
        }
    })
    .await;
    let out = cluster.xce_ok(&["-o", "json", "job", &format!("{array}_1")]);
    let task = json_of(&out);
    assert_eq!(
        (
            task["array_job_id"].as_u64(),
            task["array_task_id"].as_u64(),
            task["state"].as_str()
        ),
        (Some(array), Some(1), Some("done")),
        "{task}"
    );
    assert_eq!(
        history_of(&cluster.peers, &["--array", &array.to_string()]).len(),
        4
    );
    // The text listing: one line per job, under a header.
    let out = cluster.xce_ok(&["history", "--user", "alice"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 1 + 10, "{text}");
    assert!(text.lines().next().unwrap().starts_with("ID"), "{text}");
    cluster.assert_no_errors();
}
