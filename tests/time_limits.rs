//! A job's time limit through the real binaries: its shim stops it at the limit (SIGTERM to
//! the whole job, SIGKILL after the kill grace) and it ends `exited` with result `timeout`,
//! exactly once and never before its limit, whatever fails meanwhile; time suspended does
//! not count; a limit that is malformed or over the cluster's maximum is refused by name.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use xce_client::types::{HostState, Job, JobResult, JobState};
use xce_tests::{json_of, wait_for, Cluster};

/// Liveness for tests: heartbeats every 200 ms, unavailable after 1 s, lost 1 s later.
const CONFIG: &str = "hosts:\n  heartbeat_ttl_ms: 1000\n  lost_grace_ms: 1000\n";
/// A lost grace long enough that a worker restarted, and the primary killed, keep the job.
const RESTARTS: &str = "hosts:\n  heartbeat_ttl_ms: 3000\n  lost_grace_ms: 8000\n";
const WORKER_ARGS: &[&str] = &["--heartbeat-ms", "200", "--kill-grace-ms", "1000"];

/// The state letter of a process, `None` once it is gone (or a zombie).
fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rfind(')')
        .and_then(|at| stat[at + 1..].trim_start().chars().next());
    state.is_some_and(|s| s != 'Z')
}

/// Kills, however the test ends, every pid its jobs wrote into `<dir>/*.pid`.
struct Reaper(PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in pids(&self.0) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

fn pids(dir: &Path) -> Vec<i32> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "pid"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

fn workdir(cluster: &Cluster) -> (PathBuf, Reaper) {
    let dir = cluster.dir.path().join("work");
    std::fs::create_dir_all(&dir).unwrap();
    (dir.clone(), Reaper(dir))
}

/// A job that notes when it started (ms since the epoch, by its own clock), its shell's pid
/// and a background child's pid, then waits for the child (`sleep 60`). `trap` is run first.
fn timed_job(trap: &str) -> String {
    format!(
        "{trap} date +%s%3N >> start.ms; sleep 60 & echo $! > child.pid; echo $$ > shell.pid; wait"
    )
}

/// Submits `script` with `--time time` in `dir` and places it on w1.
fn submit_timed(cluster: &Cluster, dir: &Path, time: &str, script: &str) -> u64 {
    let cwd = dir.to_string_lossy();
    let out = cluster.xce_ok(&[
        "-o", "json", "submit", "--cwd", &cwd, "--time", time, "--", "sh", "-c", script,
    ]);
    let id = json_of(&out)["id"].as_u64().unwrap();
    cluster.xce_ok(&["dispatch", &id.to_string(), "w1"]);
    id
}

/// Every start time the job noted (one per run of it).
fn starts(dir: &Path) -> Vec<u64> {
    std::fs::read_to_string(dir.join("start.ms"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

async fn started(dir: &Path) -> (u64, i32, i32) {
    wait_for("the job to start", Duration::from_secs(30), || async {
        let start = *starts(dir).first()?;
        let read = |f: &str| {
            std::fs::read_to_string(dir.join(f))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        Some((start, read("shell.pid")?, read("child.pid")?))
    })
    .await
}

async fn ended(cluster: &Cluster, id: u64) -> Job {
    cluster.wait_job(id, "ended", |j| j.state.is_final()).await
}

async fn cluster_with_w1(controllers: usize, config: &str) -> Cluster {
    let cluster = Cluster::start_full(controllers, Some(config), 1, WORKER_ARGS);
    cluster.wait_primary().await;
    cluster.wait_version().await;
    cluster.wait_host("w1", HostState::Ok).await;
    cluster
}

#[tokio::test]
async fn a_job_past_its_time_limit_ends_timeout_within_the_limit_and_its_whole_group_goes() {
    let cluster = cluster_with_w1(1, CONFIG).await;
    let (work, _reaper) = workdir(&cluster);
    // `0:02` is two seconds (a bare `2` would be two minutes, as in Slurm).
    let id = submit_timed(&cluster, &work, "0:02", &timed_job(""));
    let (start, shell, child) = started(&work).await;
    let job = ended(&cluster, id).await;
    assert_eq!(
        (job.state, job.result, job.signal, job.attempt),
        (JobState::Exited, Some(JobResult::Timeout), Some(15), 1),
        "{job:?}"
    );
    assert_eq!(job.reason.as_deref(), Some("time limit of 0:02 reached"));
    assert_eq!(job.spec.limits.time_limit_s, Some(2));
    let ran = job.end_time_ms.unwrap() - start;
    assert!((1900..=3000).contains(&ran), "ran {ran} ms for a 2 s limit");
    for pid in [shell, child] {
        assert!(!alive(pid), "{pid} outlived the job's time limit");
    }
    // The listing says how it ended, and so does the JSON.
    let out = cluster.xce_ok(&["jobs"]);
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(listing.contains("exited (timeout)"), "{listing}");
    let out = cluster.xce_ok(&["-o", "json", "job", &id.to_string()]);
    let shown = json_of(&out);
    assert_eq!(
        (
            &shown["result"],
            &shown["time_limit_s"],
            &shown["pend_code"]
        ),
        (
            &serde_json::json!("timeout"),
            &serde_json::json!(2),
            &serde_json::Value::Null
        )
    );
    assert_eq!(starts(&work).len(), 1, "the job ran more than once");
    cluster.assert_no_errors();
}

#[tokio::test]
async fn a_job_that_ignores_sigterm_at_its_limit_is_sigkilled_after_the_kill_grace() {
    let cluster = cluster_with_w1(1, CONFIG).await;
    let (work, _reaper) = workdir(&cluster);
    let id = submit_timed(&cluster, &work, "0:01", &timed_job("trap '' TERM;"));
    let (start, shell, _) = started(&work).await;
    let job = ended(&cluster, id).await;
    assert_eq!(
        (job.result, job.signal),
        (Some(JobResult::Timeout), Some(9)),
        "{job:?}"
    );
    // The limit, then the worker's 1 s kill grace.
    let ran = job.end_time_ms.unwrap() - start;
    assert!(
        (1900..=3000).contains(&ran),
        "ran {ran} ms for 1 s + 1 s of grace"
    );
    assert!(!alive(shell));
}

/// As Slurm: time suspended does not count against the limit (its `_job_suspend_op` moves a
/// resumed job's end on by the time it was suspended).
#[tokio::test]
async fn time_suspended_does_not_count_against_the_limit() {
    let cluster = cluster_with_w1(1, CONFIG).await;
    let (work, _reaper) = workdir(&cluster);
    let id = submit_timed(&cluster, &work, "0:03", &timed_job(""));
    let (start, _, _) = started(&work).await;
    cluster
        .wait_job(id, "running", |j| j.state == JobState::Running)
        .await;
    cluster.xce_ok(&["suspend", &id.to_string()]);
    let suspended = std::time::Instant::now();
    // Suspended for 3 s: longer than the whole limit.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !cluster.job(id).await.unwrap().state.is_final(),
        "it timed out while suspended"
    );
    cluster.xce_ok(&["resume", &id.to_string()]);
    let away = suspended.elapsed().as_millis() as u64;
    let job = ended(&cluster, id).await;
    assert_eq!(job.result, Some(JobResult::Timeout), "{job:?}");
    let ran = job.end_time_ms.unwrap() - start - away;
    assert!(
        (2700..=4000).contains(&ran),
        "ran {ran} ms (besides {away} ms suspended) for a 3 s limit"
    );
}

/// The limit's clock is the shim's: a primary killed and a worker restarted while the job
/// runs neither reset nor double it, and the job ends `timeout` once, as its first attempt,
/// at its original deadline.
#[tokio::test]
async fn a_primary_crash_and_a_worker_restart_neither_reset_nor_repeat_the_limit() {
    let mut cluster = cluster_with_w1(3, RESTARTS).await;
    let (work, _reaper) = workdir(&cluster);
    let id = submit_timed(&cluster, &work, "0:05", &timed_job(""));
    let (start, shell, _) = started(&work).await;
    cluster
        .wait_job(id, "running", |j| j.state == JobState::Running)
        .await;
    let (primary, _) = cluster.wait_primary().await;
    cluster.kill9(primary);
    cluster.local.kill9_worker(0).unwrap();
    assert!(alive(shell), "the job died with its worker");
    cluster.local.start_worker(0).unwrap();
    cluster.wait_primary().await;
    let job = ended(&cluster, id).await;
    assert_eq!(
        (job.state, job.result, job.attempt),
        (JobState::Exited, Some(JobResult::Timeout), 1),
        "{job:?}"
    );
    let ran = job.end_time_ms.unwrap() - start;
    assert!((4900..=6500).contains(&ran), "ran {ran} ms for a 5 s limit");
    assert_eq!(starts(&work).len(), 1, "the job ran more than once");
    cluster.restart(primary);
}

#[tokio::test]
async fn a_malformed_or_too_long_time_limit_is_refused_naming_it() {
    let cluster = Cluster::start_with_config(1, Some("jobs:\n  max_time_limit: 1-00:00:00\n"));
    cluster.wait_primary().await;
    cluster.wait_version().await;
    let out = cluster.xce(&["submit", "--time", "1h", "--", "true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("\"1h\"") && err.contains("D-HH:MM:SS"),
        "{err}"
    );
    // Under `-o json` a malformed one is an `invalid` error like any other bad field.
    let out = cluster.xce(&["-o", "json", "submit", "--time", "1:2:3:4", "--", "true"]);
    assert!(!out.status.success());
    let e = json_of(&out);
    assert_eq!(e["error"]["code"], "invalid", "{e}");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"1:2:3:4\"") && message.contains("D-HH:MM:SS"),
        "{message}"
    );
    let out = cluster.xce(&["-o", "json", "submit", "--time", "2-00", "--", "true"]);
    assert!(!out.status.success());
    let e = json_of(&out);
    assert_eq!(e["error"]["code"], "invalid", "{e}");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("time_limit_s: 172800 s (2-00:00:00)") && message.contains("1-00:00:00"),
        "{message}"
    );
    // `0` and `UNLIMITED` are no limit.
    for none in ["0", "UNLIMITED"] {
        let out = cluster.xce_ok(&["-o", "json", "submit", "--time", none, "--", "true"]);
        let id = json_of(&out)["id"].as_u64().unwrap();
        let job = cluster.job(id).await.unwrap();
        assert_eq!(job.spec.limits.time_limit_s, None);
    }
}

/// A queue's time rules (controller config): a job without a limit gets the queue's default
/// (or else its maximum), one over the maximum is refused at submit naming the queue's.
#[tokio::test]
async fn a_queue_gives_its_default_time_and_refuses_over_its_maximum() {
    let config = "queues:\n  - {name: short, priority: 40, default_time: \"0:30\", max_time: \"2:00\"}\n  - {name: capped, priority: 20, max_time: \"5:00\"}\n";
    let cluster = Cluster::start_with_config(1, Some(config));
    cluster.wait_primary().await;
    cluster.wait_version().await;
    let limit_of = |args: &[&str]| {
        let mut all = vec!["-o", "json", "submit"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--", "true"]);
        let out = cluster.xce_ok(&all);
        let id = json_of(&out)["id"].as_u64().unwrap();
        let shown = json_of(&cluster.xce_ok(&["-o", "json", "job", &id.to_string()]));
        shown["time_limit_s"].as_u64()
    };
    // `xce queues` shows each queue's rules.
    let queues = json_of(&cluster.xce_ok(&["-o", "json", "queues"]));
    let rules: Vec<(String, Option<u64>, Option<u64>)> = queues
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            (
                q["name"].as_str().unwrap().to_string(),
                q["default_time_s"].as_u64(),
                q["max_time_s"].as_u64(),
            )
        })
        .collect();
    assert!(
        rules.contains(&("short".into(), Some(30), Some(120))),
        "{rules:?}"
    );
    assert!(
        rules.contains(&("capped".into(), None, Some(300))),
        "{rules:?}"
    );
    assert!(rules.contains(&("normal".into(), None, None)), "{rules:?}");
    let text = String::from_utf8(cluster.xce_ok(&["queues"]).stdout).unwrap();
    let short: Vec<&str> = text
        .lines()
        .find(|l| l.starts_with("short"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(short[6..], ["0:30", "2:00"], "{text}");
    assert_eq!(limit_of(&["-q", "short"]), Some(30));
    assert_eq!(limit_of(&["-q", "short", "--time", "1:30"]), Some(90));
    assert_eq!(limit_of(&["-q", "capped"]), Some(300));
    assert_eq!(
        limit_of(&["-q", "capped", "--time", "UNLIMITED"]),
        Some(300)
    );
    // The default queue has no rules here.
    assert_eq!(limit_of(&[]), None);
    let out = cluster.xce(&[
        "-o", "json", "submit", "-q", "short", "--time", "3", "--", "true",
    ]);
    assert!(!out.status.success());
    let e = json_of(&out);
    assert_eq!(e["error"]["code"], "invalid", "{e}");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("180 s (3:00)")
            && message.contains("queue short's maximum of 120 s (2:00)"),
        "{message}"
    );
}
