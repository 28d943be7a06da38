//! Workers through the real binaries: joining, host control, liveness, rejoin after failover.

#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use xce_client::types::{Host, HostState, Job, JobState};
use xce_tests::{bin, json_of, Cluster};

/// Short liveness for tests: heartbeats every 200 ms, unavailable after 1 s of silence.
const CONFIG: &str = "hosts:\n  heartbeat_ttl_ms: 1000\n";
const WORKER_ARGS: &[&str] = &["--heartbeat-ms", "200", "--cpus", "2", "--mem-mb", "1024"];

async fn host(cluster: &Cluster, name: &str) -> Option<Host> {
    cluster.host(name).await
}

async fn wait_state(cluster: &Cluster, name: &str, state: HostState) -> Host {
    cluster.wait_host(name, state).await
}

#[tokio::test]
async fn a_worker_joins_with_its_attributes_and_is_listed() {
    let cluster = Cluster::start_full(3, Some(CONFIG), 2, WORKER_ARGS);
    cluster.wait_primary().await;
    let w1 = wait_state(&cluster, "w1", HostState::Ok).await;
    assert_eq!(
        (w1.capacity.cpus, w1.capacity.mem_mb, w1.running),
        (2, 1024, 0)
    );
    wait_state(&cluster, "w2", HostState::Ok).await;
    let out = cluster.xce(&["hosts", "-o", "json"]);
    assert!(out.status.success());
    assert_eq!(
        json_of(&out)[0],
        serde_json::json!({"name": "w1", "cpus": 2, "mem_mb": 1024, "state": "ok", "running": 0, "cpus_used": 0, "mem_mb_used": 0})
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

async fn wait_job(cluster: &Cluster, id: u64, done: impl Fn(&Job) -> bool) -> Job {
    cluster.wait_job(id, "to end", done).await
}

#[tokio::test]
async fn a_dispatched_job_runs_on_its_worker_and_reports_its_exit() {
    let cluster = Cluster::start_full(3, Some(CONFIG), 1, WORKER_ARGS);
    wait_state(&cluster, "w1", HostState::Ok).await;
    let work = cluster.dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let cwd = work.to_string_lossy().into_owned();
    let submit = |cmd: &[&str]| {
        let mut args = vec!["-o", "json", "submit", "--cwd", &cwd, "--"];
        args.extend_from_slice(cmd);
        json_of(&cluster.xce(&args))["id"].as_u64().unwrap()
    };
    let id = submit(&["sh", "-c", "echo hello from $0; echo oops >&2; exit 3"]);
    let out = cluster.xce(&["dispatch", &id.to_string(), "w1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job = wait_job(&cluster, id, |j| j.state.is_final()).await;
    assert_eq!(
        (job.state, job.exit_code, job.attempt),
        (JobState::Exited, Some(3), 1)
    );
    assert_eq!(job.host.as_deref(), Some("w1"));
    assert!(job.start_time_ms.is_some() && job.end_time_ms.is_some());
    // Its output, stderr with it, in its working directory (`xce-%j.out`, as Slurm's
    // `slurm-%j.out`); the spool keeps the worker's own records only.
    let out_path = work.join(format!("xce-{id}.out"));
    let output = std::fs::read_to_string(&out_path).unwrap();
    assert_eq!(output, "hello from sh\noops\n");
    let spool = &cluster.local.workers[0].data_dir;
    assert!(!spool.join(format!("{id}.1.out")).exists());
    // `xce job` tells the user where the output is.
    let shown = cluster.xce_ok(&["job", &id.to_string()]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    let out_path = format!("{} (on w1)", out_path.display());
    assert!(shown.contains(&out_path), "{shown:?} lacks {out_path:?}");

    // A command that does not exist ends the job with a clear reason; the worker lives on.
    let missing = submit(&["/no/such/program"]);
    assert!(cluster
        .xce(&["dispatch", &missing.to_string(), "w1"])
        .status
        .success());
    let job = wait_job(&cluster, missing, |j| j.state.is_final()).await;
    assert_eq!(job.state, JobState::Exited);
    assert_eq!(
        job.reason.as_deref(),
        Some("command not found: /no/such/program")
    );

    // A zero exit is done; the host's cpus are free again afterwards.
    let ok = submit(&["true"]);
    assert!(cluster
        .xce(&["dispatch", &ok.to_string(), "w1"])
        .status
        .success());
    let job = wait_job(&cluster, ok, |j| j.state.is_final()).await;
    assert_eq!((job.state, job.exit_code), (JobState::Done, Some(0)));
    assert_eq!(host(&cluster, "w1").await.unwrap().used.cpus, 0);
}

#[tokio::test]
async fn dispatch_refuses_what_cannot_run_and_names_why() {
    let cluster = Cluster::start_full(1, Some(CONFIG), 1, WORKER_ARGS);
    wait_state(&cluster, "w1", HostState::Ok).await;
    let sleeper =
        json_of(&cluster.xce(&["-o", "json", "submit", "--cpus", "2", "--", "sleep", "2"]))["id"]
            .as_u64()
            .unwrap();
    let other = json_of(&cluster.xce(&["-o", "json", "submit", "--", "true"]))["id"]
        .as_u64()
        .unwrap();
    let refused = |args: &[&str], code: &str, fragment: &str| {
        let mut all = vec!["-o", "json", "dispatch"];
        all.extend_from_slice(args);
        let out = cluster.xce(&all);
        assert!(!out.status.success(), "{args:?} was accepted");
        let err = json_of(&out);
        assert_eq!(err["error"]["code"], code, "{err}");
        let msg = err["error"]["message"].as_str().unwrap();
        assert!(msg.contains(fragment), "{msg:?} lacks {fragment:?}");
    };
    refused(&["999", "w1"], "noEnt", "999");
    refused(&[&other.to_string(), "w9"], "noEnt", "w9");
    assert!(cluster.xce(&["host", "close", "w1"]).status.success());
    refused(&[&other.to_string(), "w1"], "conflict", "closed");
    assert!(cluster.xce(&["host", "open", "w1"]).status.success());
    assert!(cluster
        .xce(&["dispatch", &sleeper.to_string(), "w1"])
        .status
        .success());
    refused(&[&sleeper.to_string(), "w1"], "conflict", "not pending");
    refused(&[&other.to_string(), "w1"], "conflict", "cpus free");
    // The sleeper (2 s) ends on its own; wait for it so no process outlives the test.
    let job = wait_job(&cluster, sleeper, |j| j.state.is_final()).await;
    assert_eq!(job.state, JobState::Done);
}
