//! Mutual TLS through the real binaries: a cluster whose every daemon holds a certificate of
//! its CA runs jobs as usual; a client without a certificate, with another CA's, or in
//! plaintext gets nowhere; and a certificate proves its holder's role and name, so a
//! worker's cannot place jobs, reach Raft, join as a controller or speak for another host.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use xce_client::ops::{Dispatch, Join, Op, Reply};
use xce_client::tls::Tls;
use xce_client::types::{HostAttributes, JobState, RequestToken, Role};
use xce_client::{ClientConfig, ClientError, ConnectOptions, Connection, Status};
use xce_tests::Cluster;

/// One op on one new connection to controller `i` made with `tls`; the connection's
/// failure when there is no reply.
async fn ask_as<O: Op>(
    cluster: &Cluster,
    i: usize,
    tls: Option<Arc<Tls>>,
    ops: Vec<O>,
) -> Result<Vec<Reply<O::Output>>, String> {
    let opts = ConnectOptions {
        tls,
        ..ConnectOptions::default()
    };
    let addr = cluster.controllers()[i].addr();
    let conn = Connection::connect(&addr, opts)
        .await
        .map_err(|e| e.to_string())?;
    let mut replies = Vec::new();
    for op in ops {
        let reply = conn
            .call(Duration::from_secs(5), move |client| op.send(client))
            .await
            .map_err(|e| e.to_string())?;
        replies.push(reply);
    }
    Ok(replies)
}

/// Three controllers, a worker (with `worker_args` too) and a scheduler, all with TLS.
fn tls_cluster(worker_args: &[&str]) -> Cluster {
    let mut args = vec!["--heartbeat-ms", "200"];
    args.extend_from_slice(worker_args);
    Cluster::builder()
        .controllers(3)
        .workers(1, &args)
        .schedulers(1, &[])
        .tls()
        .start()
}

fn join(role: Role, host: &str) -> Join {
    Join {
        token: RequestToken::random(),
        role,
        host: HostAttributes {
            name: host.into(),
            resources: xce_client::types::Resources::new(1, 1024),
            spool_dir: String::new(),
            job_users: xce_client::types::JobUsers::Any,
        },
        agent: None,
        held: Vec::new(),
        queues_starts: false,
    }
}

#[tokio::test]
async fn a_tls_cluster_runs_jobs_and_lets_in_only_certificates_of_its_ca() {
    let cluster = tls_cluster(&[]);
    cluster.wait_primary().await;
    let admin = cluster.client();
    let id = admin.call(xce_tests::true_job()).await.unwrap();
    let done = cluster
        .wait_job(id, "the job done", |j| j.state.is_final())
        .await;
    assert_eq!(done.state, JobState::Done, "{done:?}");
    let before = cluster.job(id).await.unwrap();

    // Plaintext: the controllers close the connection; the client says TLS may be why.
    let mut plain = ClientConfig::default();
    plain.retry.max_attempts = 3;
    let plain =
        xce_client::Client::new(xce_client::parse_candidates(&cluster.peers).unwrap(), plain);
    let refused = plain.call(xce_tests::true_job()).await.unwrap_err();
    assert!(
        matches!(
            refused,
            ClientError::Unreachable(_) | ClientError::ClusterNotReady { .. }
        ),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("TLS"), "{refused}");

    // A certificate of another CA, for an admin of the same name.
    let other = tempfile::tempdir().unwrap();
    let admin_cert = xce_devcluster::certs::Holder::new(Role::Admin, xce_devcluster::ADMIN);
    xce_devcluster::certs::init(other.path(), &[admin_cert], &[]).unwrap();
    let stranger = Tls::load(xce_devcluster::certs::paths_of(
        other.path(),
        xce_devcluster::ADMIN,
    ))
    .unwrap();
    for i in 0..3 {
        let e = ask_as(
            &cluster,
            i,
            Some(stranger.clone()),
            vec![join(Role::Admin, "")],
        )
        .await
        .unwrap_err();
        assert!(e.contains("TLS"), "c{}: {e}", i + 1);
    }
    assert_eq!(cluster.job(id).await.unwrap(), before);
    cluster.assert_no_errors();
}

#[tokio::test]
async fn a_certificate_proves_its_role_and_name() {
    let cluster = Cluster::builder()
        .controllers(3)
        .workers(2, &["--heartbeat-ms", "200"])
        .schedulers(2, &[])
        .tls()
        .start();
    let (primary, info) = cluster.wait_all_standbys().await;
    let active = cluster.wait_active_scheduler().await;
    let standby = if active == "s1" { "s2" } else { "s1" };
    let id = cluster.client().call(xce_tests::true_job()).await.unwrap();
    let before = cluster.job(id).await.unwrap();
    let w1 = cluster.tls_of("w1");

    // A worker's certificate joins as its own host only, and never as another role.
    let joins = ask_as(
        &cluster,
        primary,
        w1.clone(),
        vec![
            join(Role::Worker, "w2"),
            join(Role::Controller, ""),
            join(Role::Scheduler, ""),
            join(Role::Operator, ""),
        ],
    )
    .await
    .unwrap();
    for reply in joins {
        assert_eq!(reply.header.status, Status::Perm, "{:?}", reply.header);
        assert!(
            reply.header.message.contains("certificate is worker w1's"),
            "{}",
            reply.header.message
        );
    }
    // Nor may it place a job, even after joining as itself.
    let dispatch = Dispatch {
        token: RequestToken::random(),
        id,
        host: "w1".into(),
    };
    let replies = ask_as(&cluster, primary, w1.clone(), vec![dispatch])
        .await
        .unwrap();
    assert_eq!(
        replies[0].header.status,
        Status::Perm,
        "{:?}",
        replies[0].header
    );

    // The Raft interface stays closed to it on every controller.
    for (i, c) in cluster.controllers().iter().enumerate() {
        let opts = ConnectOptions {
            tls: w1.clone(),
            ..ConnectOptions::default()
        };
        let conn = Connection::connect(&c.addr(), opts).await.unwrap();
        let header = conn
            .call(Duration::from_secs(5), |client| {
                Box::pin(async move {
                    let resp = client.raft_request().send().promise.await?;
                    xce_client::wire::read_header(resp.get()?.get_header()?)
                })
            })
            .await
            .unwrap();
        assert_eq!(header.status, Status::Perm, "c{}: {header:?}", i + 1);
    }

    // A scheduler's certificate holds the lease under its own name only, and a standby's
    // cannot place jobs under the active one's lease, whatever epoch it tries.
    let acquire = xce_client::ops::AcquireScheduler {
        token: RequestToken::random(),
        name: active.clone(),
        instance: 7,
        ttl_ms: 60_000,
    };
    let replies = ask_as(&cluster, primary, cluster.tls_of(standby), vec![acquire])
        .await
        .unwrap();
    assert_eq!(
        replies[0].header.status,
        Status::Perm,
        "{:?}",
        replies[0].header
    );
    assert!(
        replies[0]
            .header
            .message
            .contains(&format!("scheduler {standby}'s")),
        "{}",
        replies[0].header.message
    );
    let batches: Vec<_> = (0..6)
        .map(|epoch| xce_client::ops::DispatchBatch {
            token: RequestToken::random(),
            epoch,
            placements: vec![xce_client::types::Placement {
                id,
                host: "w1".into(),
            }],
        })
        .collect();
    for reply in ask_as(&cluster, primary, cluster.tls_of(standby), batches)
        .await
        .unwrap()
    {
        assert_eq!(reply.header.status, Status::Perm, "{:?}", reply.header);
        assert!(
            reply
                .header
                .message
                .contains("does not hold the scheduler lease"),
            "{}",
            reply.header.message
        );
    }

    // Nothing changed: the job (placed by s1 meanwhile, or not), the hosts (w2's real worker is still up), the term.
    let after_job = cluster.job(id).await.unwrap();
    assert_eq!((after_job.id, &after_job.spec), (before.id, &before.spec));
    let (_, after) = cluster.wait_primary().await;
    assert_eq!((after.term, after.primary), (info.term, info.primary));
    let hosts = cluster
        .client()
        .call(xce_client::ops::ListHosts)
        .await
        .unwrap();
    assert!(
        hosts
            .iter()
            .all(|h| h.state == xce_client::types::HostState::Ok),
        "{hosts:?}"
    );
    let now = cluster
        .client()
        .call(xce_client::ops::GetCluster)
        .await
        .unwrap();
    let still: Vec<&str> = now
        .schedulers
        .iter()
        .filter(|s| s.active)
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(still, [active.as_str()]);

    // SIGHUP reloads the certificates; the controller stays up and keeps serving.
    let c1 = &cluster.controllers()[0];
    let pid = nix::unistd::Pid::from_raw(c1.pid().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    xce_tests::wait_for(
        "c1 to reload its certificates",
        Duration::from_secs(10),
        || {
            let log = std::fs::read_to_string(&c1.log).unwrap_or_default();
            async move { log.contains("TLS certificates reloaded").then_some(()) }
        },
    )
    .await;
    assert!(ask_as(
        &cluster,
        0,
        cluster.tls_of("admin"),
        vec![xce_client::ops::GetCluster]
    )
    .await
    .is_ok());
    cluster.assert_no_errors();
}

/// A worker's certificate reports only for its own host: unjoined it reports nothing, and
/// joined as itself it cannot end (or start) the job another host runs, whatever host the
/// request names; that job keeps running where it was placed.
#[tokio::test]
async fn a_worker_certificate_cannot_report_another_hosts_job() {
    let mut cluster = Cluster::builder()
        .controllers(1)
        .workers(2, &["--heartbeat-ms", "200"])
        .tls()
        .start();
    cluster.wait_primary().await;
    let operator = cluster.client();
    cluster
        .wait_host("w2", xce_client::types::HostState::Ok)
        .await;
    let sleep = xce_client::ops::Submit {
        token: RequestToken::random(),
        spec: xce_client::types::JobSpec {
            command: vec!["sleep".into(), "60".into()],
            ..Default::default()
        },
        script: None,
    };
    let id = operator.call(sleep).await.unwrap();
    let placed = Dispatch {
        token: RequestToken::random(),
        id,
        host: "w2".into(),
    };
    operator.call(placed).await.unwrap();
    let running = cluster
        .wait_job(id, "the job running on w2", |j| {
            j.state == JobState::Running
        })
        .await;
    assert_eq!(running.host.as_deref(), Some("w2"));

    // w1's real worker is gone; its certificate is in an attacker's hands.
    cluster.local.kill9_worker(0).unwrap();
    let conn = Connection::connect(
        &cluster.controllers()[0].addr(),
        ConnectOptions {
            tls: cluster.tls_of("w1"),
            ..ConnectOptions::default()
        },
    )
    .await
    .unwrap();
    let ask = |op: xce_client::ops::JobFinished| {
        let conn = conn.clone();
        async move {
            conn.call(Duration::from_secs(5), move |client| op.send(client))
                .await
                .unwrap()
                .header
        }
    };
    let finished = xce_client::ops::JobFinished {
        token: RequestToken::random(),
        host: "w2".into(),
        id,
        attempt: running.attempt,
        end: xce_client::types::JobEnd::Exit(0),
        usage: None,
    };
    let unjoined = ask(finished.clone()).await;
    assert_eq!(unjoined.status, Status::Perm, "{unjoined:?}");

    let joined = conn
        .call(Duration::from_secs(5), |client| {
            join(Role::Worker, "w1").send(client)
        })
        .await
        .unwrap();
    assert_eq!(joined.header.status, Status::Ok, "{:?}", joined.header);
    let ended = ask(xce_client::ops::JobFinished {
        token: RequestToken::random(),
        ..finished
    })
    .await;
    assert_ne!(ended.status, Status::Ok, "{ended:?}");
    let started = conn
        .call(Duration::from_secs(5), move |client| {
            xce_client::ops::JobStarted {
                token: RequestToken::random(),
                host: "w2".into(),
                id,
                attempt: running.attempt,
            }
            .send(client)
        })
        .await
        .unwrap();
    assert_ne!(started.header.status, Status::Ok, "{:?}", started.header);
    let after = cluster.job(id).await.unwrap();
    assert_eq!(
        (after.state, after.host.as_deref(), after.attempt),
        (JobState::Running, Some("w2"), running.attempt)
    );
}

#[tokio::test]
async fn the_cli_speaks_tls_with_its_certificate_and_tls_init_writes_the_contract_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = xce_tests::xce(
        "c1=127.0.0.1:1",
        &[
            "tls",
            "init",
            &dir.path().display().to_string(),
            "--controllers",
            "c1,c2",
            "--workers",
            "w1",
            "--schedulers",
            "s1",
            "--admins",
            "root1",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut files: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let expected = [
        "c1-key.pem",
        "c1.pem",
        "c2-key.pem",
        "c2.pem",
        "ca-key.pem",
        "ca.pem",
        "root1-key.pem",
        "root1.pem",
        "s1-key.pem",
        "s1.pem",
        "w1-key.pem",
        "w1.pem",
    ];
    assert_eq!(files, expected);

    let cluster = tls_cluster(&[]);
    cluster.wait_primary().await;
    let out = cluster.xce(&["submit", "--wait", "--", "true"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Operator commands go by the certificate: the admin's may, a worker's may not.
    let out = cluster.xce(&["queue", "close", "normal"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cluster.xce_as("w1", &["-o", "json", "queue", "open", "normal"]);
    assert!(!out.status.success());
    assert_eq!(xce_tests::json_of(&out)["error"]["code"], "perm");
    // Without TLS settings the CLI cannot get in, and says what may be missing.
    let out = xce_tests::xce(&cluster.peers, &["jobs"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--tls-ca"), "{stderr}");
    cluster.assert_no_errors();
}

/// What the raft capability of controller `i` answers to `send`, on a connection that
/// joined as a controller (claimed: there is no TLS here, so this is a peer as trusted as
/// one can be). `Err` is a failed call.
async fn raft_call<F, Fut>(cluster: &Cluster, i: usize, send: F) -> Result<Vec<u8>, String>
where
    F: FnOnce(xce_proto::xce_capnp::raft::Client) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<Vec<u8>, capnp::Error>> + 'static,
{
    let addr = cluster.controllers()[i].addr();
    let conn = Connection::connect(&addr, ConnectOptions::default())
        .await
        .unwrap();
    let joined = conn
        .call(Duration::from_secs(5), |client| {
            join(Role::Controller, "").send(client)
        })
        .await
        .unwrap();
    assert_eq!(joined.header.status, Status::Ok, "{:?}", joined.header);
    conn.call(Duration::from_secs(5), move |client| {
        Box::pin(async move {
            let raft = client.raft_request().send().pipeline.get_raft();
            send(raft).await
        })
    })
    .await
    .map_err(|e| e.to_string())
}

/// An install-snapshot chunk of snapshot `id` at `offset`, sent to controller `i`.
async fn install_snapshot(
    cluster: &Cluster,
    i: usize,
    id: &str,
    offset: u64,
    done: bool,
    chunk: &[u8],
) -> Result<Vec<u8>, String> {
    let chunk = chunk.to_vec();
    let request = format!(
        r#"{{"vote":{{"leader_id":{{"term":1,"node_id":1}},"committed":true}},"meta":{{"last_log_id":null,"last_membership":{{"log_id":null,"membership":{{"configs":[],"nodes":{{}}}}}},"snapshot_id":"{id}"}},"offset":{offset},"data":[],"done":{done}}}"#
    );
    raft_call(cluster, i, move |raft| {
        Box::pin(async move {
            let mut req = raft.install_snapshot_request();
            req.get().set_request(request.as_bytes());
            req.get().set_chunk(&chunk);
            Ok(req.send().promise.await?.get()?.get_reply()?.to_vec())
        })
    })
    .await
}

/// The attacks of the security issue on the Raft interface, replayed by a peer that holds
/// the controller role: a vote term of 2^64−1 (in an append and in a vote), a snapshot chunk
/// at 1 TiB, a whole snapshot of garbage, and one that decodes but breaks the state's rules
/// (an epoch that would overflow). Each is refused; every controller stays up with
/// its state, term and primary, and starts again afterwards.
#[tokio::test]
async fn forged_raft_messages_from_a_peer_are_refused_and_break_nothing() {
    let mut cluster = Cluster::start(3);
    let (_, before) = cluster.wait_all_standbys().await;
    let id = cluster.client().call(xce_tests::true_job()).await.unwrap();
    let job = cluster.job(id).await.unwrap();
    for i in 0..3 {
        // postcard: vote {term u64::MAX (varint), node 1, committed}, no prev, no entries,
        // no commit.
        let append = raft_call(&cluster, i, |raft| {
            Box::pin(async move {
                let mut req = raft.append_entries_request();
                req.get().set_request(&[
                    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x01, 0x01, 0x00,
                    0x00, 0x00,
                ]);
                Ok(req.send().promise.await?.get()?.get_reply()?.to_vec())
            })
        })
        .await;
        let vote = raft_call(&cluster, i, |raft| {
            Box::pin(async move {
                let mut req = raft.vote_request();
                req.get().set_request(
                    br#"{"vote":{"leader_id":{"term":18446744073709551615,"node_id":1},"committed":false},"last_log_id":null}"#,
                );
                Ok(req.send().promise.await?.get()?.get_reply()?.to_vec())
            })
        })
        .await;
        // A chunk at 1 GiB is within the size bound, but not where the snapshot's bytes
        // go on: answered as a mismatch, with nothing allocated (see the memory check).
        let gib_chunk = install_snapshot(&cluster, i, "y", 1 << 30, false, b"x").await;
        let answer = String::from_utf8_lossy(&gib_chunk.expect("an answer")).into_owned();
        assert!(answer.contains("SnapshotMismatch"), "c{}: {answer}", i + 1);
        // One at 1 TiB, and a whole snapshot of garbage.
        let far_chunk = install_snapshot(&cluster, i, "x", 1 << 40, false, b"x").await;
        let garbage = install_snapshot(
            &cluster,
            i,
            "g",
            0,
            true,
            b"\xde\xad\xbe\xef not a snapshot",
        )
        .await;
        // A snapshot that decodes, but holds a scheduler epoch of 2^64-1 (the next lease
        // would overflow): postcard of a state with no jobs, queues, hosts, intents or
        // tokens and a lease {name "s1", instance 1, epoch u64::MAX, expires 0}.
        let mut forged = vec![
            0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, b's', b'1', 0x01,
        ];
        forged.extend([0xff; 9]);
        forged.extend([0x01, 0x00, 0x00]);
        let overflowing = install_snapshot(&cluster, i, "o", 0, true, &forged).await;
        for (what, outcome) in [
            ("append", append),
            ("vote", vote),
            ("far chunk", far_chunk),
            ("garbage snapshot", garbage),
            ("overflowing snapshot", overflowing),
        ] {
            let e = outcome.expect_err(what);
            assert!(e.contains("refused"), "c{} {what}: {e}", i + 1);
        }
    }
    for c in cluster.local.controllers.iter_mut() {
        assert!(c.is_running(), "{} is down", c.name);
        let status = std::fs::read_to_string(format!("/proc/{}/status", c.pid().unwrap())).unwrap();
        let rss_kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        assert!(rss_kib < 256 * 1024, "{} holds {rss_kib} KiB", c.name);
    }
    let (_, after) = cluster.wait_all_standbys().await;
    assert_eq!((after.term, after.primary), (before.term, before.primary));
    assert_eq!(cluster.job(id).await.unwrap(), job);
    cluster.assert_no_errors();
    // Every controller still starts: nothing forged reached a store. (Stopping one makes
    // openraft log an ERROR for messages that race its shutdown, so errors are checked
    // before.)
    for i in 0..3 {
        cluster.stop(i).await;
        cluster.restart(i);
    }
    cluster.wait_all_standbys().await;
    assert_eq!(cluster.job(id).await.unwrap(), job);
}

/// Over TLS a killed primary's connections end without a TLS goodbye; the client takes that
/// for a lost connection like any other and fails over: every submit succeeds.
#[tokio::test]
async fn a_tls_client_fails_over_a_killed_primary_without_an_error() {
    let mut cluster = Cluster::builder().controllers(3).tls().start();
    let (primary, _) = cluster.wait_all_standbys().await;
    let client = cluster.client();
    // Eight submitters back to back (each bounded in count and time), so calls are in flight
    // when the primary dies.
    let load: Vec<_> = (0..8)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let t0 = std::time::Instant::now();
                let mut acked = 0;
                while t0.elapsed() < Duration::from_secs(4) && acked < 2000 {
                    if let Err(e) = client.call(xce_tests::true_job()).await {
                        panic!("a submit failed across the failover: {e}");
                    }
                    acked += 1;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                acked
            })
        })
        .collect();
    // Some submits land on the primary first, then it dies under them.
    xce_tests::wait_for("submits before the kill", Duration::from_secs(10), || {
        let client = client.clone();
        async move {
            let listed = client.call(xce_client::ops::ListQueues).await.ok()?;
            listed.iter().any(|q| q.pending > 2).then_some(())
        }
    })
    .await;
    cluster.kill9(primary);
    let mut acked = 0;
    for l in load {
        acked += l.await.unwrap();
    }
    assert!(acked > 40, "{acked} submits acknowledged");
    cluster.wait_primary().await;
}

/// `xce token create` as the admin; the token it printed alone on stdout.
fn create_token(cluster: &Cluster, user: &str, role: &str) -> String {
    let out = cluster.xce(&[
        "-o", "json", "token", "create", "--user", user, "--role", role,
    ]);
    let created = xce_tests::json_of(&out);
    assert!(out.status.success(), "{created}");
    let fields: Vec<&String> = created.as_object().unwrap().keys().collect();
    assert_eq!(fields, ["token"], "{created}");
    created["token"].as_str().unwrap().to_string()
}

/// The error code of a command that must fail.
fn refused(out: &std::process::Output) -> String {
    assert!(
        !out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let code = xce_tests::json_of(out)["error"]["code"]
        .as_str()
        .unwrap()
        .to_string();
    code
}

#[tokio::test]
async fn tokens_say_who_a_person_is_and_what_they_may_do() {
    let cluster = tls_cluster(&[]);
    cluster.wait_primary().await;
    // At the cluster's version, which records who cancels a job (below it, the kill of an
    // operator read "killed").
    cluster.wait_version().await;
    let alice = create_token(&cluster, "alice", "user");
    let bob = create_token(&cluster, "bob", "user");
    let ops = create_token(&cluster, "ops", "operator");
    // In text, the token alone on stdout.
    let out = cluster.xce(&["token", "create", "--user", "carol", "--expires", "1h"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let carol = String::from_utf8(out.stdout).unwrap();
    assert!(
        xce_client::tokens::Token::parse(&carol).is_ok(),
        "{carol:?}"
    );

    // A job is its token's user's, whoever the submitting process is.
    let submit = ["-o", "json", "submit", "--", "sleep", "60"];
    let out = cluster.xce_token(&alice, &submit);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = xce_tests::json_of(&out)["id"].as_u64().unwrap();
    let job = cluster.job(id).await.unwrap();
    assert_eq!(job.spec.user, "alice");
    let id_text = id.to_string();

    // Bob may not control it, nor manage tokens; the operator may control it.
    let kill = ["-o", "json", "kill", id_text.as_str()];
    assert_eq!(refused(&cluster.xce_token(&bob, &kill)), "perm");
    assert!(!cluster.job(id).await.unwrap().state.is_final());
    assert_eq!(
        refused(&cluster.xce_token(&alice, &["-o", "json", "token", "list"])),
        "perm"
    );
    let out = cluster.xce_token(&ops, &["-o", "json", "token", "create", "--user", "x"]);
    assert_eq!(refused(&out), "perm");
    let out = cluster.xce_token(&ops, &kill);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let killed = cluster.wait_job(id, "killed", |j| j.state.is_final()).await;
    assert_eq!(
        killed.reason.as_deref(),
        Some("cancelled by ops"),
        "{killed:?}"
    );

    // Alice controls her own.
    let out = cluster.xce_token(&alice, &submit);
    let id = xce_tests::json_of(&out)["id"].as_u64().unwrap().to_string();
    let out = cluster.xce_token(&alice, &["-o", "json", "kill", &id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Another user's job is shown without its environment (it may hold their secrets).
    let out = cluster.xce_token(
        &alice,
        &["-o", "json", "submit", "-e", "SECRET=hunter2", "--", "true"],
    );
    let secret_job = xce_tests::json_of(&out)["id"].as_u64().unwrap();
    let env_as = |client: xce_client::Client| async move {
        let job = client
            .call(xce_client::ops::GetJob { id: secret_job })
            .await
            .unwrap();
        job.spec.env
    };
    let secret = ("SECRET".to_string(), "hunter2".to_string());
    assert_eq!(env_as(cluster.client_with_token(&bob)).await, vec![]);
    let alice_sees = env_as(cluster.client_with_token(&alice)).await;
    assert!(alice_sees.contains(&secret), "{alice_sees:?}");
    // The token she submitted with is hers alone: never stored with the job.
    assert!(
        !alice_sees
            .iter()
            .any(|(k, v)| k == "XCE_TOKEN" || *v == alice),
        "{alice_sees:?}"
    );
    assert_eq!(env_as(cluster.client_with_token(&ops)).await, alice_sees);

    // The admin lists them, without a secret.
    let out = cluster.xce(&["-o", "json", "token", "list"]);
    let listed = xce_tests::json_of(&out);
    let users: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["user"].as_str().unwrap())
        .collect();
    let mut sorted = users.clone();
    sorted.sort();
    assert_eq!(sorted, ["alice", "bob", "carol", "ops"], "{listed}");
    let text = listed.to_string();
    for token in [&alice, &bob, &ops, &carol] {
        let secret = token.trim().rsplit('_').next().unwrap();
        assert!(!text.contains(secret), "a secret is listed: {text}");
    }
    let carols = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["user"] == "carol")
        .unwrap();
    assert!(carols["expires"].is_string(), "{carols}");

    // A revoked token is refused at once: by a new connection, and by one it had already
    // authenticated.
    let bobs = cluster.client_with_token(&bob);
    bobs.call(xce_client::ops::GetJob { id: 1 }).await.unwrap();
    use xce_client::events::{EventStream, StreamItem};
    let all = xce_client::types::EventFilter::default();
    let mut admins_events = EventStream::open(cluster.client(), all.clone())
        .await
        .unwrap();
    let mut bobs_events = EventStream::open(cluster.client_with_token(&bob), all)
        .await
        .unwrap();
    let bob_id = xce_client::tokens::Token::parse(&bob)
        .unwrap()
        .id()
        .to_string();
    let out = cluster.xce(&["-o", "json", "token", "revoke", &bob_id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = bobs
        .call(xce_client::ops::GetJob { id: 1 })
        .await
        .unwrap_err();
    assert_eq!(err.code(), "auth", "{err}");
    assert!(err.to_string().contains("revoked"), "{err}");
    assert_eq!(
        refused(&cluster.xce_token(&bob, &["-o", "json", "jobs"])),
        "auth"
    );
    // Nor do its events flow: a job submitted after the revocation reaches the admin's
    // stream, and within a second more still not bob's.
    let out = cluster.xce_token(&alice, &submit);
    let after = xce_tests::json_of(&out)["id"].as_u64().unwrap();
    let is_after = |item: &StreamItem| matches!(item, StreamItem::Event(xce_client::types::ClusterEvent::Job { id, .. }) if *id == after);
    tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(item) = admins_events.next().await {
            if is_after(&item) {
                return;
            }
        }
        panic!("the admin's event stream ended");
    })
    .await
    .expect("the admin's stream saw the new job");
    let leaked = tokio::time::timeout(Duration::from_secs(1), async {
        while let Some(item) = bobs_events.next().await {
            if is_after(&item) {
                return true;
            }
        }
        false
    })
    .await;
    assert_ne!(
        leaked,
        Ok(true),
        "a revoked token's subscription still gets events"
    );
    // A daemon's certificate cannot take a person's token (a worker's connection speaks for
    // its host alone).
    let (primary, _) = cluster.wait_primary().await;
    let auth = xce_client::ops::Authenticate {
        token: xce_client::tokens::Token::parse(&alice).unwrap(),
    };
    let replies = ask_as(&cluster, primary, cluster.tls_of("w1"), vec![auth])
        .await
        .unwrap();
    assert_eq!(
        replies[0].header.status,
        Status::Perm,
        "{:?}",
        replies[0].header
    );
    // The login host's certificate alone proves no one.
    let out = cluster.xce_as(xce_devcluster::LOGIN, &["-o", "json", "jobs"]);
    assert_eq!(refused(&out), "auth");
    // A token that is not one is no credential, named before anything is sent.
    let out = cluster.xce_token("xce_nope", &["-o", "json", "jobs"]);
    assert_eq!(refused(&out), "auth");
    // XCE_TOKEN=none: the certificate alone (here the login host's, which proves no one),
    // not a token that fails to parse.
    let out = cluster.xce_token("none", &["-o", "json", "jobs"]);
    assert_eq!(refused(&out), "auth");
    let message = xce_tests::json_of(&out)["error"]["message"].to_string();
    assert!(message.contains("proves no one"), "{message}");
    // Alice is untouched.
    let out = cluster.xce_token(&alice, &["-o", "json", "jobs"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster.assert_no_errors();
}

/// A user and a group of its own that exist on this host while this lives (root only).
struct TestUser {
    name: String,
}

impl TestUser {
    fn create(name: &str) -> TestUser {
        let out = std::process::Command::new("useradd")
            .args(["--no-create-home", "--shell", "/bin/sh", name])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        TestUser { name: name.into() }
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = std::process::Command::new("userdel")
            .arg(&self.name)
            .output();
    }
}

#[tokio::test]
async fn a_root_worker_runs_each_job_as_its_tokens_user() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root (CI runs as root) to create a user and switch to it");
        return;
    }
    let user = TestUser::create(&format!("xcee{}", std::process::id()));
    let uid = nix::unistd::User::from_name(&user.name)
        .unwrap()
        .unwrap()
        .uid
        .as_raw();
    let cluster = tls_cluster(&["--run-jobs-as", "user"]);
    cluster.wait_primary().await;
    let hosts = cluster.xce(&["-o", "json", "hosts"]);
    assert!(hosts.status.success());
    let token = create_token(&cluster, &user.name, "user");
    // A directory of the user's own for the job's output (its home is not theirs).
    let work = tempfile::Builder::new()
        .prefix("xce-user-job")
        .tempdir_in("/tmp")
        .unwrap();
    std::os::unix::fs::chown(work.path(), Some(uid), None).unwrap();
    let cwd = work.path().to_string_lossy().into_owned();
    let out = cluster.xce_token(
        &token,
        &["-o", "json", "submit", "--cwd", &cwd, "--", "id", "-u"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = xce_tests::json_of(&out)["id"].as_u64().unwrap();
    let done = cluster.wait_job(id, "done", |j| j.state.is_final()).await;
    assert_eq!(done.state, JobState::Done, "{done:?}");
    let path = work.path().join(format!("xce-{id}.out"));
    assert_eq!(
        std::fs::read_to_string(&path).unwrap().trim(),
        uid.to_string()
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&path).unwrap().uid(), uid);
    // Root's jobs: this worker does not run them, and the job says so.
    let root = create_token(&cluster, "root", "user");
    let out = cluster.xce_token(&root, &["-o", "json", "submit", "--", "true"]);
    let id = xce_tests::json_of(&out)["id"].as_u64().unwrap();
    let pending = cluster
        .wait_job(id, "a pending reason", |j| j.pend_reason.is_some())
        .await;
    let reason = pending.pend_reason.unwrap();
    assert_eq!(reason, "no host runs root's jobs");
    cluster.assert_no_errors();
}
