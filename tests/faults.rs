//! Failover under harder faults than a clean kill, through the real binaries and the dev
//! cluster's fault links: a primary partitioned from both standbys, a standby behind a slow
//! link, a frozen primary that new clients try first.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use xce_client::ops::{all_jobs, GetCluster, ListHosts, ListJobs, Submit};
use xce_client::types::{HostState, JobSpec, RequestToken};
use xce_client::ClientConfig;
use xce_client::Status;
use xce_tests::{steady_submits, true_job, Cluster};

/// Every load loop below is bounded by count and by time.
const MAX_CALLS: usize = 400;
/// How soon after a fault a client must be served again. Before their fixes these faults
/// stalled every call for the 5 s write timeout; here they cost 0.6-1.1 s. The 1 s goal is
/// measured (p50/p99 per fault kind) by `xce-bench failover --fault KIND`, not asserted by a
/// timed test on a shared 2-core machine, where CI once saw 1.3 s.
const OUTAGE_BOUND: Duration = Duration::from_millis(2500);
/// The longest one call may take during a fault (the same reasoning).
const CALL_BOUND: Duration = Duration::from_millis(3000);

/// `--peers` with controller `first` first, as a CLI configured that way tries them.
fn peers_starting_with(cluster: &Cluster, first: usize) -> String {
    let mut entries: Vec<String> = cluster
        .controllers()
        .iter()
        .map(|c| format!("{}={}", c.name, c.addr()))
        .collect();
    entries.rotate_left(first);
    entries.join(",")
}

/// One-shot calls, each from a fresh client (as each CLI process is), for `span`: when each
/// started (since `t0`), how long it took, and the job id when it succeeded.
async fn one_shot_submits(
    cluster: &Cluster,
    peers: &str,
    t0: Instant,
    span: Duration,
) -> Vec<(Duration, Duration, Option<u64>)> {
    let mut calls = Vec::new();
    while t0.elapsed() < span && calls.len() < MAX_CALLS {
        let client = cluster.client_with_peers(peers, ClientConfig::default());
        let started = Instant::now();
        let result = client.call(true_job()).await;
        calls.push((started - t0, started.elapsed(), result.ok()));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    calls
}

/// One-shot calls as [`one_shot_submits`] records them.
type Calls = [(Duration, Duration, Option<u64>)];

/// When (since the fault) the first call that succeeded ended.
fn first_success(calls: &Calls) -> Option<Duration> {
    calls.iter().find(|c| c.2.is_some()).map(|c| c.0 + c.1)
}

/// Each call as `start+duration:succeeded`, for failure messages.
fn summary(calls: &Calls) -> Vec<String> {
    calls
        .iter()
        .map(|(at, took, ok)| format!("{at:?}+{took:?}:{}", ok.is_some()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_primary_stops_answering_and_clients_find_the_new_one_without_a_timeout() {
    let cluster = Cluster::builder().controllers(3).links().start();
    let (old, _) = cluster.wait_all_standbys().await;
    let old_name = cluster.controllers()[old].name.clone();
    let peers = peers_starting_with(&cluster, old);

    cluster.isolate(old);
    let t0 = Instant::now();
    let calls = one_shot_submits(&cluster, &peers, t0, Duration::from_secs(4)).await;

    // The stale side answers at once, for reads as for writes, and names why: `noMaster`
    // (cut off, it reached no successor; a redirect would only name a standby).
    let started = Instant::now();
    let reply = cluster.ask(old, ListJobs::default()).await;
    let h = &reply.header;
    assert!(h.message.contains("no majority has answered it"), "{h:?}");
    match h.status {
        Status::NoMaster => {}
        Status::Redirect => assert!(
            h.redirect_name.as_ref().is_some_and(|n| *n != old_name),
            "{h:?}"
        ),
        _ => panic!("the stale primary answered {h:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the stale primary held a read for {:?}",
        started.elapsed()
    );

    let slowest = calls.iter().map(|c| c.1).max().unwrap();
    let first_ok = first_success(&calls).expect("no submit succeeded during the partition");
    let summary = summary(&calls);
    eprintln!("first success {first_ok:?}, slowest call {slowest:?}: {summary:?}");
    assert!(slowest < CALL_BOUND, "a call took {slowest:?}: {summary:?}");
    assert!(
        first_ok < OUTAGE_BOUND,
        "first success {first_ok:?} after the partition: {summary:?}"
    );
    assert!(
        calls.iter().all(|c| c.0 < OUTAGE_BOUND || c.2.is_some()),
        "a call failed once the new primary served: {summary:?}"
    );

    // Healed, the old primary rejoins as a standby and every acknowledged job is there.
    cluster.heal();
    let (_, info) = cluster.wait_all_standbys().await;
    assert_ne!(info.primary.as_deref(), Some(old_name.as_str()));
    let stored: Vec<u64> = all_jobs(&cluster.client(), Default::default())
        .await
        .unwrap()
        .iter()
        .map(|j| j.id)
        .collect();
    for id in calls.iter().filter_map(|c| c.2) {
        assert!(stored.contains(&id), "acknowledged job {id} was lost");
    }
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_behind_a_slow_link_stays_a_member_and_deposes_no_one() {
    let cluster = Cluster::builder().controllers(3).links().start();
    let (primary, before) = cluster.wait_all_standbys().await;
    let slow = (primary + 1) % 3;
    let slow_name = cluster.controllers()[slow].name.clone();

    // 75 ms each way: a 150 ms round trip, three heartbeat intervals.
    cluster.delay(&slow_name, Duration::from_millis(75));
    let client = cluster.client();
    let acked = steady_submits(&client, Duration::from_secs(15), MAX_CALLS).await;
    let during = client.call(GetCluster).await.unwrap();
    cluster.heal();
    // Give a deposed-on-heal primary the time it would need to show.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = client.call(GetCluster).await.unwrap();

    assert_eq!(during.primary, before.primary, "the primary changed");
    assert_eq!(after.primary, before.primary, "the primary changed on heal");
    assert!(
        after.term <= before.term + 1,
        "term storm: {} -> {}",
        before.term,
        after.term
    );
    let reply = cluster.ask(slow, GetCluster).await;
    assert!(
        matches!(reply.header.status, Status::Redirect),
        "the slow standby does not follow the primary: {:?}",
        reply.header
    );
    assert_eq!(
        all_jobs(&client, Default::default()).await.unwrap().len(),
        acked
    );
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_primary_costs_a_new_client_no_call_timeout() {
    let mut cluster = Cluster::start(3);
    let (primary, _) = cluster.wait_all_standbys().await;
    let peers = peers_starting_with(&cluster, primary);
    cluster.local.pause(primary).unwrap();
    let t0 = Instant::now();
    let calls = one_shot_submits(&cluster, &peers, t0, Duration::from_secs(3)).await;
    cluster.local.resume(primary).unwrap();
    let summary = summary(&calls);
    let first_ok = first_success(&calls).expect("no submit succeeded while the primary was frozen");
    assert!(
        first_ok < OUTAGE_BOUND,
        "first success {first_ok:?} after the freeze: {summary:?}"
    );
    let slowest = calls.iter().map(|c| c.1).max().unwrap();
    assert!(slowest < CALL_BOUND, "a call took {slowest:?}: {summary:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_behind_a_slow_link_hands_over_to_a_standby_that_can_commit() {
    let cluster = Cluster::builder().controllers(3).links().start();
    let (old, before) = cluster.wait_all_standbys().await;
    let old_name = cluster.controllers()[old].name.clone();
    let peers = peers_starting_with(&cluster, old);

    // A 150 ms round trip to both standbys: openraft waits 50 ms for an append, so this
    // primary can never commit again, though its standbys still hear it.
    cluster.delay(&old_name, Duration::from_millis(75));
    let t0 = Instant::now();
    let calls = one_shot_submits(&cluster, &peers, t0, Duration::from_secs(4)).await;
    let summary = summary(&calls);
    let first_ok = first_success(&calls).expect("no submit succeeded behind the slow primary");
    eprintln!("first success {first_ok:?}: {summary:?}");
    assert!(
        first_ok < OUTAGE_BOUND,
        "first success {first_ok:?} after the delay began: {summary:?}"
    );
    let during = cluster.client().call(GetCluster).await.unwrap();
    assert_ne!(during.primary.as_deref(), Some(old_name.as_str()));
    // It handed over rather than leaving the standbys to their election timers (a full
    // timeout more of outage): it named a successor, and that standby took it.
    let log_of = |i: usize| std::fs::read_to_string(&cluster.controllers()[i].log).unwrap();
    assert!(
        log_of(old).contains("stepping down and handing over"),
        "{old_name} went silent without handing over"
    );
    assert!(
        (0..3).any(|i| i != old && log_of(i).contains("handed over to this node")),
        "no standby took the hand-over"
    );

    cluster.heal();
    let (_, after) = cluster.wait_all_standbys().await;
    assert!(
        after.term <= before.term + 3,
        "term storm: {} -> {}",
        before.term,
        after.term
    );
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_cut_off_for_seconds_does_not_depose_the_primary_when_it_returns() {
    let cluster = Cluster::builder().controllers(3).links().start();
    let (primary, before) = cluster.wait_all_standbys().await;
    cluster.isolate((primary + 1) % 3);
    let client = cluster.client();
    steady_submits(&client, Duration::from_secs(3), MAX_CALLS).await;
    cluster.heal();
    // Long enough for a returning node's higher term to depose the primary, if it could.
    steady_submits(&client, Duration::from_secs(2), MAX_CALLS).await;
    let (_, after) = cluster.wait_all_standbys().await;
    assert_eq!(
        after.primary, before.primary,
        "the returning standby deposed the primary"
    );
    assert_eq!(
        after.term, before.term,
        "terms moved while a standby was cut off"
    );
    cluster.assert_no_errors();
}

/// Two workers that beat every 200 ms against a 1.5 s TTL, joined to the primary.
fn cluster_with_beating_workers() -> Cluster {
    Cluster::builder()
        .controllers(3)
        .config("hosts:\n  heartbeat_ttl_ms: 1500\n")
        .workers(2, &["--heartbeat-ms", "200"])
        .links()
        .start()
}

/// For three TTLs after a fault on the old primary `old`, the new side must keep both hosts
/// available: the workers' heartbeats reach it while their rejoin moves on from the old one.
async fn hosts_stay_available_after_losing(cluster: &Cluster, old: usize) {
    let old_name = cluster.controllers()[old].name.clone();
    let client = cluster.client();
    let t0 = Instant::now();
    let mut checks = 0;
    while t0.elapsed() < Duration::from_millis(4500) && checks < MAX_CALLS {
        if let Ok(hosts) = client.call(ListHosts).await {
            for h in &hosts {
                assert_eq!(
                    h.state,
                    HostState::Ok,
                    "{} became {} {:?} after the fault",
                    h.name,
                    h.state.name(),
                    t0.elapsed()
                );
            }
        }
        checks += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let info = client.call(GetCluster).await.unwrap();
    assert_ne!(info.primary.as_deref(), Some(old_name.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_on_a_partitioned_primary_move_to_the_new_one_without_being_marked_unavailable() {
    let cluster = cluster_with_beating_workers();
    let (old, _) = cluster.wait_all_standbys().await;
    for w in ["w1", "w2"] {
        cluster.wait_host(w, HostState::Ok).await;
    }
    cluster.isolate(old);
    hosts_stay_available_after_losing(&cluster, old).await;
    cluster.heal();
    cluster.assert_no_errors();
}

/// A frozen primary still accepts connections (its kernel answers), so a rejoin that tried
/// it first would wait there; it moves on within its connect budget, and heartbeats never
/// wait behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_on_a_frozen_primary_move_to_the_new_one_without_being_marked_unavailable() {
    let mut cluster = cluster_with_beating_workers();
    let (old, _) = cluster.wait_all_standbys().await;
    for w in ["w1", "w2"] {
        cluster.wait_host(w, HostState::Ok).await;
    }
    cluster.local.pause(old).unwrap();
    hosts_stay_available_after_losing(&cluster, old).await;
    cluster.local.resume(old).unwrap();
    // Both rejoined the new primary (they beat to it, or the checks above would have failed)
    // and the thawed controller follows it.
    cluster.wait_all_standbys().await;
    cluster.assert_no_errors();
}

/// The largest request of every kind at once (here: submits with every field at its bound,
/// many at a time, so that batches are as large as they get) replicates, and an oversized one
/// is refused before it reaches the log, without being echoed, leaving the cluster serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_requests_replicate_and_an_oversized_one_is_refused_whole() {
    use xce_client::ops::ControlQueue;
    use xce_client::types::QueueAction;
    use xce_client::ClientError;

    let mut cluster = Cluster::start(3);
    let (primary, _) = cluster.wait_all_standbys().await;
    let client = cluster.client();
    let operator = cluster.client();
    xce_client::ops::claim_role(&operator, xce_client::types::Role::Operator);

    let huge = ControlQueue {
        token: RequestToken::random(),
        name: "q".repeat(40 << 20),
        action: QueueAction::Close,
    };
    let before = dir_bytes(&cluster.controllers()[primary].data_dir);
    let (a, b) = tokio::join!(operator.call(huge.clone()), operator.call(huge));
    let grown = dir_bytes(&cluster.controllers()[primary].data_dir).saturating_sub(before);
    assert!(
        grown < 8 << 20,
        "the refused writes reached the log: the primary's data grew by {grown} bytes"
    );
    for refused in [a, b] {
        match refused {
            Err(ClientError::Status { status, message }) => {
                assert_eq!(status, Status::Invalid);
                assert!(
                    message.len() < 200,
                    "the refusal echoed {} bytes",
                    message.len()
                );
            }
            other => panic!("a 40 MiB queue name was not refused: {other:?}"),
        }
    }

    let biggest = || Submit {
        token: RequestToken::random(),
        spec: JobSpec {
            name: "n".repeat(256),
            user: "u".repeat(64),
            cwd: format!("/{}", "d".repeat(4095)),
            // Each element also counts its 8-byte pointer.
            command: vec!["true".into(), "a".repeat(64 * 1024 - 4 - 16)],
            env: vec![("K".into(), "v".repeat(64 * 1024 - 1 - 16))],
            ..JobSpec::default()
        },
        script: None,
    };
    let submits: Vec<_> = (0..64).map(|_| client.call(biggest())).collect();
    let ids: Vec<u64> = futures::future::join_all(submits)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(ids.len(), 64);

    // Every standby holds them: the old primary goes, and the new one lists them all.
    cluster.kill9(primary);
    let listed = all_jobs(&client, Default::default()).await.unwrap();
    assert_eq!(listed.len(), 64);
    cluster.assert_no_errors();
}

/// The bytes of every file under `dir`.
fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Thousands of idle connections (each a plain TCP connect that never calls anything) cannot
/// lock clients out of the primary: at the connection limit the longest-idle plain connection
/// makes room, and Raft traffic and joined workers are never evicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_by_the_thousand_lock_no_client_out() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    // The controllers get 512 file descriptors (inherited), so that a thousand connections
    // would exhaust them; this test process keeps its own limit to hold those connections.
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, 512, hard).unwrap();
    let cluster = Cluster::builder().controllers(3).start();
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    let (primary, before) = cluster.wait_all_standbys().await;
    let addr = cluster.controllers()[primary].addr();
    let mut idle = Vec::new();
    for _ in 0..1000 {
        match std::net::TcpStream::connect(&addr) {
            Ok(s) => idle.push(s),
            Err(e) => panic!("connect {}: {e}", idle.len()),
        }
    }
    let peers = peers_starting_with(&cluster, primary);
    let started = Instant::now();
    let client = cluster.client_with_peers(&peers, ClientConfig::default());
    client.call(true_job()).await.unwrap();
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "a submit took {took:?} beside 1000 idle connections"
    );
    let after = client.call(GetCluster).await.unwrap();
    assert_eq!(after.primary, before.primary, "the primary changed");
    assert_eq!(after.term, before.term, "an election happened");
    assert!(
        after
            .members
            .iter()
            .all(|m| m.role != xce_client::types::MemberRole::Unreachable),
        "a standby became unreachable: {:?}",
        after.members
    );
    drop(idle);
    cluster.assert_no_errors();
}

/// A memory figure of a process from `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in bytes.
fn status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// The resident memory of a process, in bytes.
fn rss_bytes(pid: u32) -> u64 {
    status_bytes(pid, "VmRSS")
}

/// Eight connections each sending one 63 MiB frame (under capnp's 64 MiB default) make the
/// primary hold none of them: a frame over the inbound limit is refused from its segment
/// table, and the primary goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_inbound_frames_are_refused_before_they_are_buffered() {
    use std::io::Write;
    let cluster = Cluster::start(3);
    let (primary, before_info) = cluster.wait_all_standbys().await;
    let pid = cluster.controllers()[primary].pid().unwrap();
    let before = rss_bytes(pid);
    let addr = cluster.controllers()[primary].addr();
    let senders: Vec<_> = (0..8)
        .map(|_| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let words: u32 = (63 << 20) / 8;
                let mut s = std::net::TcpStream::connect(&addr).unwrap();
                // One segment of `words` words, then its body, 1 MiB at a time until the
                // controller closes the connection.
                let mut table = 0u32.to_le_bytes().to_vec();
                table.extend_from_slice(&words.to_le_bytes());
                s.write_all(&table).unwrap();
                let chunk = vec![0u8; 1 << 20];
                let mut sent = 0;
                while sent < 63 && s.write_all(&chunk).is_ok() {
                    sent += 1;
                }
                // Hold the connection while the test measures.
                std::thread::sleep(Duration::from_secs(2));
                sent
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let grown = rss_bytes(pid).saturating_sub(before);
    for s in senders {
        s.join().unwrap();
    }
    assert!(
        grown < 64 << 20,
        "the primary grew by {} MiB holding 8 frames of 63 MiB",
        grown >> 20
    );
    let info = cluster.client().call(GetCluster).await.unwrap();
    assert_eq!(info.primary, before_info.primary);
    cluster.client().call(true_job()).await.unwrap();
    cluster.assert_no_errors();
}

/// Ten connections each sending one 47 MiB frame (under the 48 MiB a frame may be) make the
/// primary hold at most its shared budget of partly read frames (192 MiB), not all ten
/// (470 MiB): the others wait, pushed back through TCP, and the primary goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_frames_sent_slowly_on_many_connections_are_bounded_together() {
    use std::io::Write;
    const CONNECTIONS: usize = 10;
    const FRAME_MIB: u32 = 47;
    let cluster = Cluster::start(3);
    let (primary, before_info) = cluster.wait_all_standbys().await;
    let pid = cluster.controllers()[primary].pid().unwrap();
    let before = rss_bytes(pid);
    let addr = cluster.controllers()[primary].addr();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    for _ in 0..CONNECTIONS {
        let addr = addr.clone();
        let done = done_tx.clone();
        std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(&addr).unwrap();
            s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut table = 0u32.to_le_bytes().to_vec();
            table.extend_from_slice(&((FRAME_MIB << 20) / 8).to_le_bytes());
            let chunk = vec![0u8; 1 << 20];
            let mut sent = s.write_all(&table).is_ok() as u32;
            // Slowly, as a client on a slow link would: 1 MiB every 10 ms.
            while sent > 0 && sent <= FRAME_MIB && s.write_all(&chunk).is_ok() {
                sent += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = done.send(sent);
        });
    }
    drop(done_tx);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut finished = 0;
    while finished < CONNECTIONS {
        let left = deadline.saturating_duration_since(Instant::now());
        match done_rx.recv_timeout(left) {
            Ok(_) => finished += 1,
            Err(e) => panic!("{finished} of {CONNECTIONS} senders finished: {e}"),
        }
    }
    let peak = status_bytes(pid, "VmHWM").saturating_sub(before);
    eprintln!("peak growth {} MiB", peak >> 20);
    assert!(
        peak < 300 << 20,
        "the primary grew by {} MiB holding {CONNECTIONS} partly sent frames of {FRAME_MIB} MiB",
        peak >> 20
    );
    let info = cluster.client().call(GetCluster).await.unwrap();
    assert_eq!(info.primary, before_info.primary);
    cluster.client().call(true_job()).await.unwrap();
    let log = std::fs::read_to_string(&cluster.controllers()[primary].log).unwrap();
    assert!(
        log.contains("this one waits to read its next"),
        "no connection waited for the shared budget"
    );
    cluster.assert_no_errors();
}

/// The far end of a client that never reads its replies: a reader that never yields a byte.
struct NeverReads;

impl futures::io::AsyncRead for NeverReads {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        _buf: &mut [u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::task::Poll::Pending
    }
}

/// The peak resident memory of a process, in bytes.
fn hwm_bytes(pid: u32) -> u64 {
    status_bytes(pid, "VmHWM")
}

/// One connection pipelines 300 full pages of `listJobs` (about 6 MiB each) and reads none
/// of the replies: the primary stops reading its calls once 16 MiB of replies wait, so its
/// memory stays bounded, and it goes on serving everyone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_replies_leaves_the_primary_serving_and_its_memory_bounded() {
    use capnp_rpc::{rpc_twoparty_capnp::Side, twoparty::VatNetwork, RpcSystem};
    use tokio_util::compat::TokioAsyncWriteCompatExt;
    use xce_proto::xce_capnp::controller;

    let cluster = Cluster::start(1);
    let (primary, _) = cluster.wait_primary().await;
    let client = cluster.client();
    // 1500 jobs with 4 KiB commands: a page of all of them is about 6 MiB.
    let big = "x".repeat(4096);
    for chunk in 0..15 {
        let submits = (0..100).map(|_| {
            client.call(Submit {
                token: RequestToken::random(),
                spec: JobSpec {
                    command: vec!["echo".into(), big.clone()],
                    ..JobSpec::default()
                },
                script: None,
            })
        });
        for r in futures::future::join_all(submits).await {
            r.unwrap_or_else(|e| panic!("submit in chunk {chunk}: {e}"));
        }
    }
    let pid = cluster.controllers()[primary].pid().unwrap();
    let before = hwm_bytes(pid);
    let addr = cluster.controllers()[primary].addr();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let attacker = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&runtime, async move {
            let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let (_unread, writer) = stream.into_split();
            let network = VatNetwork::new(
                NeverReads,
                writer.compat_write(),
                Side::Client,
                capnp::message::ReaderOptions::new(),
            );
            let mut rpc = RpcSystem::new(Box::new(network), None);
            let controller: controller::Client = rpc.bootstrap(Side::Server);
            tokio::task::spawn_local(rpc);
            // Kept, not dropped: a dropped answer would cancel its call.
            let mut pending = Vec::new();
            for _ in 0..300 {
                let mut request = controller.list_jobs_request();
                request.get().set_limit(5000);
                pending.push(request.send().promise);
            }
            let _ = stop_rx.await;
            drop(pending);
        });
    });
    // Until the primary says it stopped reading that peer's calls, or has grown too much.
    let log = cluster.controllers()[primary].log.clone();
    let too_much = 256u64 << 20;
    xce_tests::wait_for(
        "the primary to stop reading the calls of a peer that reads nothing",
        Duration::from_secs(60),
        || async {
            let text = std::fs::read_to_string(&log).ok()?;
            let stalled = text.contains("a peer is not reading its replies");
            (stalled || hwm_bytes(pid).saturating_sub(before) >= too_much).then_some(())
        },
    )
    .await;
    let grown = hwm_bytes(pid).saturating_sub(before);
    assert!(
        grown < too_much,
        "the primary's peak memory grew by {} MiB for a peer that reads nothing",
        grown >> 20
    );
    // Everyone else is served meanwhile.
    let page = tokio::time::timeout(
        Duration::from_secs(10),
        client.call(ListJobs {
            filter: Default::default(),
            after: 0,
            limit: 10,
        }),
    )
    .await
    .expect("a listing took over 10 s while one peer read nothing")
    .unwrap();
    assert_eq!(page.jobs.len(), 10);
    client.call(true_job()).await.unwrap();
    let _ = stop_tx.send(());
    attacker.join().unwrap();
    let grown = hwm_bytes(pid).saturating_sub(before);
    assert!(
        grown < too_much,
        "the primary's peak memory grew by {} MiB for a peer that reads nothing",
        grown >> 20
    );
    cluster.assert_no_errors();
}

/// A primary out of file descriptors cannot accept a client: it steps down within its lease
/// and does not stand again until it can accept, so clients find a primary that can serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_that_cannot_accept_clients_hands_over() {
    let cluster = Cluster::start(3);
    let (primary, before) = cluster.wait_all_standbys().await;
    let pid = cluster.controllers()[primary].pid().unwrap();
    let open_fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .unwrap()
        .0 as usize;
    let limit = |n: usize| {
        let status = std::process::Command::new("prlimit")
            .arg(format!("--pid={pid}"))
            .arg(format!("--nofile={n}:"))
            .status()
            .unwrap();
        assert!(status.success(), "prlimit failed");
    };
    // Room for a few more descriptors, then none.
    limit(open_fds + 4);
    let addr = cluster.controllers()[primary].addr();
    let mut held = Vec::new();
    for _ in 0..64 {
        if let Ok(s) = std::net::TcpStream::connect(&addr) {
            held.push(s);
        }
    }
    let log = cluster.controllers()[primary].log.clone();
    wait_for_log(&log, "cannot accept client connections").await;
    let peers = peers_starting_with(&cluster, primary);
    let client = cluster.client_with_peers(&peers, ClientConfig::default());
    let info = xce_tests::wait_for(
        "a primary that can accept",
        Duration::from_secs(30),
        || async {
            client
                .call(GetCluster)
                .await
                .ok()
                .filter(|i| i.primary != before.primary)
        },
    )
    .await;
    assert!(info.term > before.term, "{info:?}");
    client.call(true_job()).await.unwrap();
    // Inherited from this process: its own soft limit is the controller's original one.
    limit(soft);
    drop(held);
    client.call(true_job()).await.unwrap();
}

/// Waits until `log` holds `text`.
async fn wait_for_log(log: &std::path::Path, text: &str) {
    xce_tests::wait_for(text, Duration::from_secs(30), || async {
        std::fs::read_to_string(log)
            .ok()?
            .contains(text)
            .then_some(())
    })
    .await;
}

/// A primary deposed while pushes wait in a worker's queue sends none of them: each is
/// checked against the gate (ready primary, within its lease) just before it leaves, not
/// only when its entry was applied. Here the worker is frozen, so the first start's call
/// hangs until its timeout while the second waits behind it, and the primary is cut off from
/// both standbys meanwhile. Sent late, over a connection the worker is about to leave, such a
/// start could run an attempt the new primary had already sent again.
#[tokio::test]
async fn a_primary_deposed_while_pushes_wait_sends_none_of_them() {
    use xce_client::ops::{claim_role, Dispatch};
    use xce_client::types::Role;
    let mut cluster = Cluster::builder()
        .controllers(3)
        .workers(1, &["--heartbeat-ms", "200", "--cpus", "2"])
        .links()
        .log_filter("info,openraft=warn,xce_controller::network::push=debug")
        .start();
    let (primary, _) = cluster.wait_primary().await;
    cluster.wait_host("w1", HostState::Ok).await;
    let client = cluster.client();
    let mut ids = Vec::new();
    for _ in 0..2 {
        ids.push(client.call(true_job()).await.unwrap());
    }
    let operator = cluster.client();
    claim_role(&operator, Role::Operator);

    cluster.local.pause_worker(0).unwrap();
    for id in &ids {
        let dispatch = Dispatch {
            token: RequestToken::random(),
            id: *id,
            host: "w1".into(),
        };
        operator.call(dispatch).await.unwrap();
    }
    cluster.isolate(primary);
    let log = cluster.controllers()[primary].log.clone();
    let dropped = format!("job={}", ids[1]);
    xce_tests::wait_for(
        "the waiting start to be dropped",
        Duration::from_secs(30),
        || async {
            let text = std::fs::read_to_string(&log).ok()?;
            text.lines()
                .any(|l| l.contains("push dropped") && l.contains(&dropped))
                .then_some(())
        },
    )
    .await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text
            .lines()
            .any(|l| l.contains(&dropped) && l.contains("could not send the job")),
        "the deposed primary sent the waiting start"
    );
    cluster.heal();
    cluster.local.resume_worker(0).unwrap();
}
