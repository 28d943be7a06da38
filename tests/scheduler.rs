//! The scheduler through the real binaries: submitted jobs run by themselves, never more at
//! once than the hosts have cpus, higher-priority queues first; a job that fits nowhere says
//! why; without a scheduler jobs say "no scheduler"; a standby scheduler takes over from a
//! killed active one and a killed primary loses no decision: every job runs exactly once.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use xce_client::ops::{DispatchBatch, Submit};
use xce_client::types::{JobSpec, JobState, Placement, RequestToken};
use xce_client::{Client, ClientError, Status};
use xce_tests::{wait_for, Cluster};

/// Two hosts of two cpus each, heartbeating fast.
const WORKER_ARGS: &[&str] = &[
    "--heartbeat-ms",
    "200",
    "--cpus",
    "2",
    "--mem-mb",
    "1024",
    "--kill-grace-ms",
    "1000",
];
/// A short lease, so a standby takes over quickly.
const SCHEDULER_ARGS: &[&str] = &["--lease-ttl-ms", "1500"];

/// Submits `sh -c script` in `cwd` (the job's id is in `$XCE_JOB_ID`) to `queue`.
async fn submit(client: &Client, cwd: &Path, queue: &str, cpus: u32, script: &str) -> u64 {
    let spec = JobSpec {
        command: vec!["sh".into(), "-c".into(), script.into()],
        cwd: cwd.to_string_lossy().into_owned(),
        queue: queue.into(),
        resources: xce_client::types::Resources::new(cpus, 0),
        ..JobSpec::default()
    };
    let op = Submit {
        token: RequestToken::random(),
        spec,
        script: None,
    };
    client.call(op).await.unwrap()
}

/// Waits until every job in `ids` has ended, and asserts each ended `done`.
async fn wait_all_done(cluster: &Cluster, ids: &[u64], within: Duration) {
    let client = cluster.client();
    let want: Vec<u64> = ids.to_vec();
    wait_for("every job to end", within, || {
        let (client, want) = (client.clone(), want.clone());
        async move {
            let jobs = xce_client::ops::all_jobs(&client, Default::default())
                .await
                .ok()?;
            let ended = jobs
                .iter()
                .filter(|j| want.contains(&j.id) && j.state.is_final())
                .count();
            (ended == want.len()).then_some(())
        }
    })
    .await;
    for id in ids {
        let job = cluster.job(*id).await.unwrap();
        assert_eq!(job.state, JobState::Done, "{job:?}");
    }
}

/// How long the (first) scheduler's log is now: where [`wait_out_of_budget`] starts looking.
fn log_length(cluster: &Cluster) -> usize {
    std::fs::read(&cluster.schedulers()[0].log).map_or(0, |b| b.len())
}

/// Waits until the (first) scheduler's log says, after byte `from`, that a retry budget ran
/// out (lines from before the fault, such as the first election, do not count).
async fn wait_out_of_budget(cluster: &Cluster, from: usize) {
    let log = cluster.schedulers()[0].log.clone();
    wait_for(
        "the scheduler to run out of a budget",
        Duration::from_secs(30),
        || {
            let text = std::fs::read(&log).unwrap_or_default();
            let after = String::from_utf8_lossy(text.get(from..).unwrap_or_default()).into_owned();
            async move { after.contains("cluster not ready").then_some(()) }
        },
    )
    .await;
}

/// Submits `n` jobs of `script` in `dir` to the default queue; returns their ids.
async fn submit_n(client: &Client, dir: &Path, n: usize, script: &str) -> Vec<u64> {
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        ids.push(submit(client, dir, "", 1, script).await);
    }
    ids
}

/// How many times each job wrote its mark into `<dir>/<id>.runs`.
fn runs(dir: &Path, id: u64) -> usize {
    std::fs::read_to_string(dir.join(format!("{id}.runs")))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[tokio::test]
async fn two_hundred_jobs_on_four_cpus_never_run_more_than_four_at_once() {
    let cluster = Cluster::builder()
        .controllers(3)
        .workers(2, WORKER_ARGS)
        .schedulers(1, SCHEDULER_ARGS)
        .start();
    cluster.wait_active_scheduler().await;
    let work = tempfile::tempdir().unwrap();
    let client = cluster.client();
    // Each job records when it ran (ns) in a file of its own.
    let script = "echo \"$(date +%s%N) $(sleep 0.05; date +%s%N)\" >> $XCE_JOB_ID.runs";
    let ids = submit_n(&client, work.path(), 200, script).await;
    wait_all_done(&cluster, &ids, Duration::from_secs(120)).await;
    let mut edges = Vec::new();
    for id in &ids {
        let text = std::fs::read_to_string(work.path().join(format!("{id}.runs"))).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "job {id} ran {} times", lines.len());
        let (start, end) = lines[0].split_once(' ').unwrap();
        edges.push((start.parse::<u128>().unwrap(), 1i32));
        edges.push((end.parse::<u128>().unwrap(), -1i32));
    }
    // Ends before starts at the same instant.
    edges.sort();
    let (mut running, mut most) = (0, 0);
    for (_, d) in edges {
        running += d;
        most = most.max(running);
    }
    assert!(most <= 4, "{most} jobs ran at once on 4 cpus");
    assert!(most >= 2, "the jobs never ran side by side ({most})");
    cluster.assert_no_errors();
}

#[tokio::test]
async fn a_higher_priority_queue_goes_first_and_a_job_too_big_says_why() {
    let config = "queues:\n  - name: high\n    priority: 50\n  - name: low\n    priority: 10\n";
    let cluster = Cluster::builder()
        .controllers(1)
        .config(config)
        .workers(
            1,
            &["--heartbeat-ms", "200", "--cpus", "1", "--mem-mb", "1024"],
        )
        .schedulers(1, SCHEDULER_ARGS)
        .start();
    cluster.wait_active_scheduler().await;
    let work = tempfile::tempdir().unwrap();
    let client = cluster.client();
    let go = work.path().join("go");
    let blocker = format!("while [ ! -e {} ]; do sleep 0.02; done", go.display());
    let first = submit(&client, work.path(), "low", 1, &blocker).await;
    cluster
        .wait_job(first, "running", |j| j.state == JobState::Running)
        .await;
    let record = "echo $XCE_JOB_ID >> order";
    let mut low = Vec::new();
    let mut high = Vec::new();
    for _ in 0..3 {
        low.push(submit(&client, work.path(), "low", 1, record).await);
    }
    for _ in 0..3 {
        high.push(submit(&client, work.path(), "high", 1, record).await);
    }
    let big = submit(&client, work.path(), "high", 64, "true").await;
    let job = cluster
        .wait_job(big, "given a reason", |j| j.pend_reason.is_some())
        .await;
    assert_eq!(
        job.pend_reason.as_deref(),
        Some("no host with 64 cpus (largest has 1)")
    );
    // The first high job waits for the running one; every job after it waits behind it
    // (strict priority), each with a reason a user can read.
    let room = "no host with 1 free cpus (most free: 0)";
    cluster
        .wait_job(high[0], "waiting for room", |j| {
            j.pend_reason.as_deref() == Some(room)
        })
        .await;
    let behind = "waiting behind a higher-priority job that does not fit yet";
    for id in high[1..].iter().chain(&low) {
        cluster
            .wait_job(*id, "waiting behind it", |j| {
                j.pend_reason.as_deref() == Some(behind)
            })
            .await;
    }
    std::fs::write(&go, b"").unwrap();
    let all: Vec<u64> = std::iter::once(first)
        .chain(high.iter().copied())
        .chain(low.iter().copied())
        .collect();
    wait_all_done(&cluster, &all, Duration::from_secs(60)).await;
    let order: Vec<u64> = std::fs::read_to_string(work.path().join("order"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    let expected: Vec<u64> = high.iter().chain(&low).copied().collect();
    assert_eq!(order, expected, "high {high:?} before low {low:?}");
    // The big job still pends, and says why.
    let job = cluster.job(big).await.unwrap();
    assert_eq!(job.state, JobState::Pending);
    cluster.assert_no_errors();
}

#[tokio::test]
async fn without_a_scheduler_jobs_say_so_and_only_a_scheduler_may_place_in_batches() {
    let cluster = Cluster::start(1);
    let client = cluster.client();
    let work = tempfile::tempdir().unwrap();
    let id = submit(&client, work.path(), "", 1, "true").await;
    let job = cluster.job(id).await.unwrap();
    assert_eq!(job.pend_reason.as_deref(), Some("no scheduler"));
    let out = cluster.xce_ok(&["-o", "json", "cluster"]);
    assert_eq!(
        xce_tests::json_of(&out)["schedulers"],
        serde_json::json!([])
    );
    // A plain connection may not place jobs, however it asks.
    let batch = DispatchBatch {
        token: RequestToken::random(),
        epoch: 1,
        placements: vec![Placement {
            id,
            host: "w1".into(),
        }],
    };
    match client.call(batch).await {
        Err(ClientError::Status {
            status: Status::Perm,
            message,
        }) => assert!(message.contains("dispatchBatch"), "{message}"),
        other => panic!("a user connection placed jobs: {other:?}"),
    }
}

#[tokio::test]
async fn a_standby_scheduler_takes_over_and_every_job_runs_once() {
    let mut cluster = Cluster::builder()
        .controllers(3)
        .workers(2, WORKER_ARGS)
        .schedulers(2, SCHEDULER_ARGS)
        .start();
    let active = cluster.wait_active_scheduler().await;
    let out = cluster.xce_ok(&["-o", "json", "cluster"]);
    let schedulers = xce_tests::json_of(&out)["schedulers"].clone();
    wait_for(
        "both schedulers listed",
        Duration::from_secs(10),
        || async {
            let out = cluster.xce_ok(&["-o", "json", "cluster"]);
            let list = xce_tests::json_of(&out)["schedulers"].clone();
            (list.as_array().map_or(0, Vec::len) == 2).then_some(())
        },
    )
    .await;
    assert!(
        schedulers
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == active.as_str() && s["active"] == true),
        "{schedulers}"
    );
    let work = tempfile::tempdir().unwrap();
    let client = cluster.client();
    let script = "echo ran >> $XCE_JOB_ID.runs";
    let mut ids = submit_n(&client, work.path(), 20, script).await;
    let i = cluster
        .schedulers()
        .iter()
        .position(|s| s.name == active)
        .unwrap();
    cluster.kill9_scheduler(i);
    ids.extend(submit_n(&client, work.path(), 40, script).await);
    let standby = wait_for("the standby to take over", Duration::from_secs(15), || {
        let client = client.clone();
        let active = active.clone();
        async move {
            let info = client.call(xce_client::ops::GetCluster).await.ok()?;
            info.schedulers
                .into_iter()
                .find(|s| s.active && s.name != active)
                .map(|s| s.name)
        }
    })
    .await;
    assert_ne!(standby, active);
    wait_all_done(&cluster, &ids, Duration::from_secs(60)).await;
    for id in &ids {
        assert_eq!(runs(work.path(), *id), 1, "job {id}");
    }
    cluster.assert_no_errors();
}

/// A worker re-syncs with the primary every 100 ms while jobs stream onto it: starts the
/// primary pushes while a resync is on its way cross it on the wire, and the resync must not
/// make any of them run twice (it had: the resync sent such a job again as a new attempt,
/// which fenced a copy that had already started).
#[tokio::test]
async fn a_worker_that_resyncs_while_jobs_stream_in_runs_each_once() {
    let mut args = WORKER_ARGS.to_vec();
    args.extend(["--resync-ms", "100"]);
    let cluster = Cluster::builder()
        .controllers(1)
        .workers(1, &args)
        .schedulers(1, SCHEDULER_ARGS)
        .start();
    cluster.wait_active_scheduler().await;
    let work = tempfile::tempdir().unwrap();
    let client = cluster.client();
    let ids = submit_n(&client, work.path(), 300, "echo ran >> $XCE_JOB_ID.runs").await;
    wait_all_done(&cluster, &ids, Duration::from_secs(120)).await;
    for id in &ids {
        assert_eq!(runs(work.path(), *id), 1, "job {id}");
    }
    // Acknowledged reports leave the outbox as spares for later records, not deleted.
    let spool = cluster.dir.path().join("w1");
    let count = |dir: &str| std::fs::read_dir(spool.join(dir)).map_or(0, |d| d.count());
    wait_for("the outbox to empty", Duration::from_secs(30), || {
        let empty = count("outbox") == 0;
        async move { empty.then_some(()) }
    })
    .await;
    assert!(count("spare") > 0, "no report was kept as a spare");
    // Every push came through the capability of the worker's last answered join: none was
    // taken for a late order over a connection it left (each costs a read and a wait).
    let log = std::fs::read_to_string(&cluster.worker_daemons()[0].log).unwrap();
    assert!(
        !log.contains("came over a connection this worker has left"),
        "a push over the current connection was doubted"
    );
}

#[tokio::test]
async fn a_primary_killed_while_jobs_are_placed_loses_and_repeats_none() {
    let mut cluster = Cluster::builder()
        .controllers(3)
        .workers(2, WORKER_ARGS)
        .schedulers(1, SCHEDULER_ARGS)
        .start();
    cluster.wait_active_scheduler().await;
    let work = tempfile::tempdir().unwrap();
    let client = cluster.client();
    let script = "echo ran >> $XCE_JOB_ID.runs";
    let (submitted_tx, mut submitted) = tokio::sync::watch::channel(0usize);
    let submitter = {
        let (client, dir) = (client.clone(), work.path().to_path_buf());
        tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..500 {
                ids.push(submit(&client, &dir, "", 1, script).await);
                submitted_tx.send_replace(ids.len());
            }
            ids
        })
    };
    // Submits and placements are under way: kill the primary in the middle of them.
    submitted.wait_for(|n| *n >= 100).await.unwrap();
    cluster
        .wait_job(1, "placed", |j| j.state != JobState::Pending)
        .await;
    let (primary, _) = cluster.wait_primary().await;
    cluster.kill9(primary);
    let ids = submitter.await.unwrap();
    wait_all_done(&cluster, &ids, Duration::from_secs(180)).await;
    for id in &ids {
        assert_eq!(runs(work.path(), *id), 1, "job {id}");
    }
}

#[tokio::test]
async fn submit_wait_exits_with_the_job_s_exit_code() {
    let cluster = Cluster::builder()
        .controllers(1)
        .workers(1, WORKER_ARGS)
        .schedulers(1, SCHEDULER_ARGS)
        .start();
    cluster.wait_active_scheduler().await;
    let out = cluster.xce(&["submit", "--wait", "--", "sh", "-c", "exit 7"]);
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("exited: exit code 7"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cluster.xce(&["submit", "--wait", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(out.status.code(), Some(128 + 15));
    let out = cluster.xce_ok(&["submit", "--wait", "--", "true"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("is done"));
}

#[tokio::test]
async fn an_outage_longer_than_the_retry_budget_loses_no_decision() {
    let mut cluster = Cluster::builder()
        .controllers(3)
        .workers(1, WORKER_ARGS)
        .schedulers(1, &["--lease-ttl-ms", "1500", "--retry-attempts", "2"])
        .start();
    cluster.wait_active_scheduler().await;
    let work = tempfile::tempdir().unwrap();
    let client = cluster.client_with_default_budget();
    let script = "echo ran >> $XCE_JOB_ID.runs";
    let mut ids = submit_n(&client, work.path(), 30, script).await;
    // Every controller goes away for longer than the scheduler's budget (two attempts, a
    // few hundred milliseconds), while it still has jobs to place.
    let from = log_length(&cluster);
    for i in 0..3 {
        cluster.kill9(i);
    }
    wait_out_of_budget(&cluster, from).await;
    for i in 0..3 {
        cluster.restart(i);
    }
    ids.extend(submit_n(&client, work.path(), 10, script).await);
    wait_all_done(&cluster, &ids, Duration::from_secs(90)).await;
    for id in &ids {
        assert_eq!(runs(work.path(), *id), 1, "job {id}");
    }
    let sched = cluster.schedulers()[0].pid();
    assert!(sched.is_some(), "the scheduler exited");
}

#[tokio::test]
async fn a_scheduler_cut_off_longer_than_its_budget_resumes_by_itself_and_loses_nothing() {
    let cluster = Cluster::builder()
        .controllers(3)
        .workers(1, WORKER_ARGS)
        .schedulers(1, &["--lease-ttl-ms", "1500", "--retry-attempts", "2"])
        .daemon_links()
        .start();
    cluster.wait_active_scheduler().await;
    let work = tempfile::tempdir().unwrap();
    let client = cluster.client_with_default_budget();
    let script = "sleep 0.05; echo ran >> $XCE_JOB_ID.runs";
    let mut ids = submit_n(&client, work.path(), 20, script).await;
    let from = log_length(&cluster);
    cluster.isolate_daemon("s1");
    wait_out_of_budget(&cluster, from).await;
    // Cut off, it no longer holds the lease: jobs submitted meanwhile say so.
    let late = submit(&client, work.path(), "", 1, script).await;
    ids.push(late);
    cluster
        .wait_job(late, "told there is no scheduler", |j| {
            j.pend_reason.as_deref() == Some("no scheduler")
        })
        .await;
    cluster.heal();
    ids.extend(submit_n(&client, work.path(), 10, script).await);
    wait_all_done(&cluster, &ids, Duration::from_secs(90)).await;
    for id in &ids {
        assert_eq!(runs(work.path(), *id), 1, "job {id}");
    }
    assert!(
        cluster.schedulers()[0].pid().is_some(),
        "the scheduler exited"
    );
}

#[tokio::test]
async fn a_cleanly_stopped_scheduler_hands_its_lease_over_at_once() {
    // A lease far longer than the takeover may take: only a release explains a fast one.
    let ttl = Duration::from_secs(20);
    let ttl_ms = ttl.as_millis().to_string();
    let mut cluster = Cluster::builder()
        .controllers(1)
        .workers(1, WORKER_ARGS)
        .schedulers(2, &["--lease-ttl-ms", &ttl_ms])
        .start();
    let active = cluster.wait_active_scheduler().await;
    let i = cluster
        .schedulers()
        .iter()
        .position(|s| s.name == active)
        .unwrap();
    let stopped_at = std::time::Instant::now();
    let status = cluster
        .local
        .stop_scheduler(i, Duration::from_secs(10))
        .unwrap();
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    let client = cluster.client();
    let standby = wait_for("the standby to take over", ttl / 2, || {
        let (client, active) = (client.clone(), active.clone());
        async move {
            let info = client.call(xce_client::ops::GetCluster).await.ok()?;
            info.schedulers
                .into_iter()
                .find(|s| s.active && s.name != active)
                .map(|s| s.name)
        }
    })
    .await;
    // A standby asks every second; the lease would have lasted 20 s.
    assert!(
        stopped_at.elapsed() < Duration::from_secs(5),
        "{standby} took {:?}: it waited for the lease to run out",
        stopped_at.elapsed()
    );
    let log = std::fs::read_to_string(&cluster.schedulers()[i].log).unwrap();
    assert!(log.contains("released the scheduler lease"), "{log}");
    let work = tempfile::tempdir().unwrap();
    let ids = submit_n(&client, work.path(), 3, "echo ran >> $XCE_JOB_ID.runs").await;
    wait_all_done(&cluster, &ids, Duration::from_secs(30)).await;
}

/// Submits `sh -c script` of `cpus` cpus with a time limit of `limit_s` seconds.
async fn submit_limited(client: &Client, cwd: &Path, cpus: u32, limit_s: u32, script: &str) -> u64 {
    let spec = JobSpec {
        command: vec!["sh".into(), "-c".into(), script.into()],
        cwd: cwd.to_string_lossy().into_owned(),
        resources: xce_client::types::Resources::new(cpus, 0),
        limits: xce_client::types::Limits {
            time_limit_s: Some(limit_s),
        },
        ..JobSpec::default()
    };
    let op = Submit {
        token: RequestToken::random(),
        spec,
        script: None,
    };
    client.call(op).await.unwrap()
}

/// Backfill (the scheduler's default): on a host of 2 cpus, one running 1-cpu job with an
/// 8-second limit holds back a 2-cpu job, which gets a reserved start at that job's limit.
/// Short jobs submitted after the wide one fill the free cpu before it, as they end before
/// its reservation; a long one that would delay it waits, saying why; and the wide job
/// starts as the running one reaches its limit, before the long one.
#[tokio::test]
async fn a_wide_job_starts_at_its_reservation_while_short_jobs_backfill_before_it() {
    let cluster = Cluster::builder()
        .controllers(1)
        .workers(
            1,
            &[
                "--heartbeat-ms",
                "200",
                "--cpus",
                "2",
                "--mem-mb",
                "1024",
                "--kill-grace-ms",
                "500",
            ],
        )
        .schedulers(1, SCHEDULER_ARGS)
        .start();
    cluster.wait_version().await;
    cluster.wait_active_scheduler().await;
    let work = tempfile::tempdir().unwrap();
    let client = cluster.client();
    let running = submit_limited(&client, work.path(), 1, 8, "sleep 60").await;
    cluster
        .wait_job(running, "running", |j| j.state == JobState::Running)
        .await;
    let wide = submit_limited(&client, work.path(), 2, 30, "true").await;
    // Its reserved start: never before the running job's limit ends (the scheduler heard of
    // that start no sooner than it was), shown in its JSON.
    let reserved = cluster
        .wait_job(wide, "given its reserved start", |j| {
            j.expected_start_ms.is_some()
        })
        .await;
    let first_start = cluster.job(running).await.unwrap().start_time_ms.unwrap();
    let at = reserved.expected_start_ms.unwrap();
    assert!(
        (first_start + 8_000..first_start + 60_000).contains(&at),
        "reserved at {at}, the running job started at {first_start} with 8 s"
    );
    let shown = xce_tests::json_of(&cluster.xce_ok(&["-o", "json", "job", &wide.to_string()]));
    let at_text = shown["expected_start"].as_str().unwrap().to_string();
    // `xce jobs --start` (squeue --start) lists it with that time.
    let listed = cluster.xce_ok(&["jobs", "--start"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    let line = listed
        .lines()
        .find(|l| l.starts_with(&format!("{wide} ")))
        .unwrap_or_else(|| panic!("job {wide} not in {listed}"));
    assert!(
        line.contains(&at_text) && line.contains("resources"),
        "{line}"
    );
    let long = submit_limited(&client, work.path(), 1, 300, "true").await;
    let mut short = Vec::new();
    for _ in 0..3 {
        short.push(submit_limited(&client, work.path(), 1, 2, "true").await);
    }
    for id in &short {
        cluster
            .wait_job(*id, "backfilled and done", |j| j.state.is_final())
            .await;
    }
    let wide_now = cluster.job(wide).await.unwrap();
    assert_eq!(wide_now.state, JobState::Pending, "{wide_now:?}");
    let long_now = cluster
        .wait_job(long, "told it would delay a reservation", |j| {
            j.pend_reason.as_deref() == Some(RESERVED)
        })
        .await;
    assert_eq!(
        long_now.pend_code,
        Some(xce_client::types::PendCode::Priority)
    );
    let first = cluster
        .wait_job(running, "ended at its limit", |j| j.state.is_final())
        .await;
    assert_eq!(first.result, Some(xce_client::types::JobResult::Timeout));
    let wide_done = cluster.wait_job(wide, "done", |j| j.state.is_final()).await;
    assert_eq!(
        wide_done.expected_start_ms, None,
        "a started job has no reservation"
    );
    let long_done = cluster.wait_job(long, "done", |j| j.state.is_final()).await;
    let start = |j: &xce_client::types::Job| j.start_time_ms.unwrap();
    let end = |j: &xce_client::types::Job| j.end_time_ms.unwrap();
    assert!(start(&wide_done) >= end(&first));
    assert!(
        start(&long_done) >= end(&wide_done),
        "the long job delayed the wide one"
    );
    for id in &short {
        let j = cluster.job(*id).await.unwrap();
        assert_eq!(
            j.result,
            Some(xce_client::types::JobResult::Completed),
            "{j:?}"
        );
        assert!(end(&j) <= end(&first), "job {id} ran after the reservation");
    }
    cluster.assert_no_errors();
}

/// The scheduler's text for a job held back by a reservation, as its users read it.
const RESERVED: &str =
    "waiting behind the reserved start of a higher-priority job, which it would delay";
