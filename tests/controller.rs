//! Multi-process scenarios for the Raft-replicated controller, through the real binaries.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use xce_client::ops::{all_jobs, GetCluster, ListJobs, Submit};
use xce_client::types::{JobSpec, MemberRole, RequestToken};
use xce_client::Status;
use xce_tests::{wait_for, Cluster};

fn spec(i: usize) -> JobSpec {
    JobSpec {
        name: format!("job-{i}"),
        command: vec!["echo".into(), i.to_string()],
        ..JobSpec::default()
    }
}

/// Submits `n` jobs through the failover client and returns their acknowledged ids.
async fn submit_n(cluster: &Cluster, n: usize) -> BTreeSet<u64> {
    let client = cluster.client();
    let mut ids = BTreeSet::new();
    for i in 0..n {
        let op = Submit {
            token: RequestToken::random(),
            spec: spec(i),
            script: None,
        };
        let id = client.call(op).await.expect("submit");
        assert!(ids.insert(id), "job id {id} handed out twice");
    }
    ids
}

async fn job_ids(cluster: &Cluster) -> BTreeSet<u64> {
    let jobs = all_jobs(&cluster.client(), Default::default())
        .await
        .expect("list jobs");
    jobs.iter().map(|j| j.id).collect()
}

#[tokio::test]
async fn three_controllers_elect_exactly_one_primary() {
    let cluster = Cluster::start(3);
    let (primary, info) = cluster.wait_all_standbys().await;
    let roles: Vec<MemberRole> = info.members.iter().map(|m| m.role).collect();
    assert_eq!(
        roles.iter().filter(|r| **r == MemberRole::Primary).count(),
        1
    );
    assert_eq!(
        roles.iter().filter(|r| **r == MemberRole::Standby).count(),
        2
    );
    assert_eq!(info.members[primary].role, MemberRole::Primary);
    assert!(info.term >= 1);
    // Every other node agrees on who the primary is, pointing at its client address (asked
    // again should a loaded machine have held an election meanwhile).
    wait_for(
        "the standbys to agree on the primary",
        Duration::from_secs(30),
        || async {
            let (primary, _) = cluster.wait_all_standbys().await;
            for i in (0..3).filter(|i| *i != primary) {
                let reply = cluster.ask(i, GetCluster).await;
                let (host, port) = reply.header.redirect.clone()?;
                assert_eq!(reply.header.status, Status::Redirect, "{:?}", reply.header);
                (format!("{host}:{port}") == cluster.controllers()[primary].addr()).then_some(())?;
            }
            Some(())
        },
    )
    .await;
    cluster.assert_no_errors();
}

#[tokio::test]
async fn a_single_candidate_is_a_cluster() {
    let cluster = Cluster::start(1);
    let (primary, info) = cluster.wait_primary().await;
    assert_eq!(primary, 0);
    assert_eq!(info.members.len(), 1);
    assert_eq!(submit_n(&cluster, 3).await, BTreeSet::from([1, 2, 3]));
}

#[tokio::test]
async fn a_submit_to_a_standby_is_redirected_and_lands_once() {
    let cluster = Cluster::start(3);
    let (primary, _) = cluster.wait_all_standbys().await;
    let standby = (primary + 1) % 3;
    let spec = spec(1);
    let token = RequestToken::random();

    // The standby itself answers with the primary's client address and applies nothing.
    let direct = cluster
        .ask(
            standby,
            Submit {
                token,
                spec: spec.clone(),
                script: None,
            },
        )
        .await;
    assert_eq!(direct.header.status, Status::Redirect);
    let (host, port) = direct.header.redirect.clone().expect("redirect address");
    assert_eq!(
        format!("{host}:{port}"),
        cluster.controllers()[primary].addr()
    );

    // A client that only knows the standby follows the hint and lands on the primary.
    let only_standby = format!(
        "{}={}",
        cluster.controllers()[standby].name,
        cluster.controllers()[standby].addr()
    );
    let client = cluster.client_for(&only_standby);
    let id = client
        .call(Submit {
            token,
            spec: spec.clone(),
            script: None,
        })
        .await
        .expect("submit via standby");
    // One hop: the standby, then straight to the primary it named.
    assert_eq!(client.stats().reconnects, 2, "{:?}", client.stats());
    assert_eq!(client.stats().backoffs, 0);
    // Re-sending the same token (a retry) gets the same job back, never a second job.
    let again = cluster
        .ask(
            primary,
            Submit {
                token,
                spec,
                script: None,
            },
        )
        .await;
    assert_eq!(again.header.status, Status::DupJob);
    assert_eq!(again.value, Some(id));
    assert_eq!(job_ids(&cluster).await, BTreeSet::from([id]));
}

#[tokio::test]
async fn killing_the_primary_elects_a_new_one_that_serves_every_committed_job() {
    let mut cluster = Cluster::start(3);
    let (old, _) = cluster.wait_all_standbys().await;
    let acked = submit_n(&cluster, 20).await;
    cluster.kill9(old);
    let (new, info) = cluster.wait_primary().await;
    assert_ne!(new, old);
    assert_eq!(info.members[old].role, MemberRole::Unreachable);
    assert_eq!(job_ids(&cluster).await, acked);
    // The new primary takes writes, and ids continue in log order.
    let more = submit_n(&cluster, 1).await;
    assert_eq!(more.first().copied(), Some(acked.last().unwrap() + 1));
}

#[tokio::test]
async fn with_two_of_three_down_the_survivor_answers_no_master_without_hanging() {
    let mut cluster = Cluster::start(3);
    let (primary, _) = cluster.wait_all_standbys().await;
    let survivor = (primary + 1) % 3;
    for i in (0..3).filter(|i| *i != survivor) {
        cluster.kill9(i);
    }
    // Within an election timeout or so the survivor knows there is no primary; every answer
    // until then is a prompt redirect (to the dead primary) or noMaster, never a hang.
    let status = wait_for(
        "noMaster from the survivor",
        Duration::from_secs(20),
        || {
            let cluster = &cluster;
            async move {
                let reply = tokio::time::timeout(
                    Duration::from_secs(5),
                    cluster.ask(survivor, ListJobs::default()),
                )
                .await
                .expect("the survivor answers within 5 s");
                let s = reply.header.status;
                assert!(
                    matches!(s, Status::NoMaster | Status::Redirect),
                    "unexpected {s}"
                );
                (s == Status::NoMaster).then_some(s)
            }
        },
    )
    .await;
    assert_eq!(status, Status::NoMaster);
}

#[tokio::test]
async fn restarting_every_controller_keeps_every_acknowledged_job() {
    let mut cluster = Cluster::start(3);
    cluster.wait_all_standbys().await;
    let mut acked = submit_n(&cluster, 30).await;
    // A clean stop of all three...
    for i in 0..3 {
        assert!(cluster.stop(i).await.success(), "c{} exit status", i + 1);
    }
    for i in 0..3 {
        cluster.restart(i);
    }
    cluster.wait_primary().await;
    assert_eq!(job_ids(&cluster).await, acked);
    // ...and a crash of all three right after acknowledged writes.
    acked.extend(submit_n(&cluster, 30).await);
    for i in 0..3 {
        cluster.kill9(i);
    }
    for i in 0..3 {
        cluster.restart(i);
    }
    cluster.wait_primary().await;
    assert_eq!(job_ids(&cluster).await, acked);
    assert_eq!(acked.len(), 60);
}

/// Three controllers that compact their log every 10 entries, one standby stopped while
/// `missed` jobs are submitted: the cluster, the primary, the stopped standby, the running
/// one, and the acknowledged job ids.
async fn with_a_lagging_standby(missed: usize) -> (Cluster, usize, usize, usize, BTreeSet<u64>) {
    let config = "raft:\n  snapshot_logs: 10\n  logs_kept: 2\n";
    let mut cluster = Cluster::start_with_config(3, Some(config));
    let (primary, _) = cluster.wait_all_standbys().await;
    let lagging = (primary + 1) % 3;
    let third = (primary + 2) % 3;
    assert!(cluster.stop(lagging).await.success());
    let acked = submit_n(&cluster, missed).await;
    (cluster, primary, lagging, third, acked)
}

#[tokio::test]
async fn a_lagging_controller_catches_up_from_a_snapshot_and_restarts_restore_state() {
    // The lagging standby misses 80 batches; the primary compacts them away.
    let (mut cluster, primary, lagging, third, mut acked) = with_a_lagging_standby(80).await;
    // Back with only the lagging node as the second voter, a write commits only once the
    // lagging node has installed the primary's snapshot.
    cluster.restart(lagging);
    assert!(cluster.stop(third).await.success());
    acked.extend(submit_n(&cluster, 1).await);
    // Now lose the old primary: the lagging node and the third one serve everything.
    assert!(cluster.stop(primary).await.success());
    cluster.restart(third);
    cluster.wait_primary().await;
    assert_eq!(job_ids(&cluster).await, acked);
    // Restart everything: state comes back from snapshots plus the log tail.
    for i in [lagging, third] {
        assert!(cluster.stop(i).await.success());
    }
    for i in 0..3 {
        cluster.restart(i);
    }
    cluster.wait_primary().await;
    assert_eq!(job_ids(&cluster).await, acked);
    assert_eq!(acked.len(), 81);
}

/// The primary loses its lease while its only reachable voter is down and then comes back
/// far behind (compacted away): the primary must not stay silent for good, since that voter
/// cannot win an election against it; it catches it up and commits again.
#[tokio::test]
async fn a_primary_whose_only_voter_returns_far_behind_catches_it_up_after_losing_its_lease() {
    let (mut cluster, primary, lagging, third, mut acked) = with_a_lagging_standby(40).await;
    assert!(cluster.stop(third).await.success());
    // Alone, the primary's lease runs out: it answers noMaster and stops replicating.
    wait_for(
        "the lone primary to give up its lease",
        Duration::from_secs(30),
        || async {
            let reply = cluster.ask(primary, ListJobs::default()).await;
            (reply.header.status == Status::NoMaster).then_some(())
        },
    )
    .await;
    cluster.restart(lagging);
    let client = cluster.client();
    let id = wait_for(
        "a write to commit again",
        Duration::from_secs(30),
        || async {
            client
                .call(Submit {
                    token: RequestToken::random(),
                    spec: spec(99),
                    script: None,
                })
                .await
                .ok()
        },
    )
    .await;
    acked.insert(id);
    assert_eq!(job_ids(&cluster).await, acked);
}

/// A connection that has not joined with a role is a plain user: it cannot report for a
/// worker, place a job, heartbeat or reach the Raft interface, and trying changes nothing.
#[tokio::test]
async fn a_plain_connection_cannot_report_dispatch_or_reach_raft() {
    use xce_client::ops::{Dispatch, Heartbeat, JobFinished, JobStarted};
    use xce_client::types::JobEnd;
    use xce_client::{ConnectOptions, Connection};

    let cluster = Cluster::start(3);
    let (primary, before) = cluster.wait_all_standbys().await;
    let id = cluster
        .client()
        .call(Submit {
            token: RequestToken::random(),
            spec: spec(1),
            script: None,
        })
        .await
        .unwrap();
    let job = cluster.job(id).await.unwrap();
    let token = RequestToken::random;
    let statuses = [
        cluster
            .ask(
                primary,
                Dispatch {
                    token: token(),
                    id,
                    host: "w1".into(),
                },
            )
            .await
            .header,
        cluster
            .ask(
                primary,
                JobStarted {
                    token: token(),
                    host: "w1".into(),
                    id,
                    attempt: 1,
                },
            )
            .await
            .header,
        cluster
            .ask(
                primary,
                JobFinished {
                    token: token(),
                    host: "w1".into(),
                    id,
                    attempt: 1,
                    end: JobEnd::Exit(0),
                    usage: None,
                },
            )
            .await
            .header,
        cluster
            .ask(primary, Heartbeat { name: "w1".into() })
            .await
            .header,
    ];
    for header in statuses {
        assert_eq!(header.status, Status::Perm, "{header:?}");
        assert!(header.message.contains("not joined"), "{}", header.message);
    }
    // The Raft interface of every controller is closed to it: no capability, and a vote
    // sent through the pipelined one goes nowhere.
    for c in cluster.controllers() {
        let conn = Connection::connect(&c.addr(), ConnectOptions::default())
            .await
            .unwrap();
        let (header, vote) = conn
            .call(Duration::from_secs(5), |client| {
                Box::pin(async move {
                    let resp = client.raft_request().send();
                    let mut vote = resp.pipeline.get_raft().vote_request();
                    vote.get().set_request(br#"{"vote":{"leader_id":{"term":99,"node_id":9},"committed":false},"last_log_id":null}"#);
                    let vote = vote.send().promise.await.map(|_| ());
                    let resp = resp.promise.await?;
                    let header = xce_client::wire::read_header(resp.get()?.get_header()?)?;
                    Ok((header, vote))
                })
            })
            .await
            .unwrap();
        assert_eq!(header.status, Status::Perm, "{}: {header:?}", c.name);
        assert!(vote.is_err(), "{}: a vote got through", c.name);
    }
    assert_eq!(cluster.job(id).await.unwrap(), job);
    let (_, after) = cluster.wait_primary().await;
    assert_eq!((after.term, after.primary), (before.term, before.primary));
    cluster.assert_no_errors();
}
