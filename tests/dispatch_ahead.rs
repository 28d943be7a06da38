//! Dispatch ahead (issue 34, slot turnover), through the real binaries: a scheduler run with
//! `--dispatch-ahead` sends a full host more jobs than it runs at once, its worker holds them
//! until an end frees room, so no host ever runs more than it offers (by the jobs' own
//! clocks) and each job runs once, a round's starts for one host going out in one call; a
//! job killed while it waits there never runs (nor counts as having run), and `after:` on
//! one waits for its start.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use xce_client::types::{DependencyState, HostState, JobResult, JobState};
use xce_tests::{submitted_id, wait_for, Cluster};

/// One controller, two workers of one cpu each, a scheduler sending up to three rounds
/// ahead.
async fn cluster() -> Cluster {
    let cluster = Cluster::builder()
        .controllers(1)
        .workers(2, &["--heartbeat-ms", "200", "--cpus", "1"])
        .schedulers(1, &["--dispatch-ahead", "3"])
        .start();
    cluster.wait_primary().await;
    cluster.wait_version().await;
    cluster.wait_host("w1", HostState::Ok).await;
    cluster.wait_host("w2", HostState::Ok).await;
    cluster.wait_active_scheduler().await;
    cluster
}

/// Waits until some host has more placed on it than it offers: jobs were sent ahead.
async fn sent_ahead(cluster: &Cluster) -> String {
    wait_for(
        "a host sent more than it runs at once",
        Duration::from_secs(30),
        || async {
            for name in ["w1", "w2"] {
                let host = cluster.host(name).await?;
                if host.used.cpus > host.capacity.cpus {
                    assert!(host.queues_starts, "{host:?}");
                    return Some(name.to_string());
                }
            }
            None
        },
    )
    .await
}

#[tokio::test]
async fn hosts_are_sent_jobs_ahead_and_never_run_more_than_they_offer() {
    let cluster = cluster().await;
    let (work, cwd) = cluster.work_dir();
    // Each job notes its host and its start and end (wall clock, ns).
    let body = "echo $XCE_NODELIST $(date +%s%N) > run.$XCE_JOB_ID; sleep 0.2; \
                echo $(date +%s%N) >> run.$XCE_JOB_ID";
    let ids: Vec<u64> = (0..24)
        .map(|_| {
            submitted_id(&cluster.xce(&["-o", "json", "submit", "--cwd", &cwd, "--wrap", body]))
        })
        .collect();
    sent_ahead(&cluster).await;
    for id in &ids {
        let job = cluster
            .wait_job(*id, "the job ended", |j| j.state.is_final())
            .await;
        assert_eq!(job.result, Some(JobResult::Completed), "{job:?}");
        assert_eq!(job.attempt, 1, "job {id} ran as a later attempt: {job:?}");
    }
    // Each ran once; by their own clocks, never two at once on a one-cpu host.
    let mut runs: Vec<(String, u64, u64)> = Vec::new();
    for id in &ids {
        let text = std::fs::read_to_string(work.join(format!("run.{id}"))).unwrap();
        let fields: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(fields.len(), 3, "job {id} ran once: {text:?}");
        runs.push((
            fields[0].to_string(),
            fields[1].parse().unwrap(),
            fields[2].parse().unwrap(),
        ));
    }
    for (host, start, _) in &runs {
        let at_once = runs
            .iter()
            .filter(|(h, s, e)| h == host && s <= start && start < e)
            .count();
        assert_eq!(at_once, 1, "{at_once} jobs ran at once on {host}: {runs:?}");
    }
    for host in ["w1", "w2"] {
        assert!(runs.iter().any(|(h, _, _)| h == host), "{host} ran nothing");
    }
    // A round's starts for one host went out in one call to its worker.
    let log = std::fs::read_to_string(&cluster.local.controllers[0].log).unwrap();
    assert!(
        log.contains("jobs sent to their worker in one call"),
        "{log}"
    );
}

#[tokio::test]
async fn a_job_killed_while_it_waits_on_its_host_never_runs() {
    let cluster = cluster().await;
    let (work, cwd) = cluster.work_dir();
    // Both slots taken by long jobs; the next is sent ahead to one of them.
    let long: Vec<u64> = (0..2)
        .map(|_| submitted_id(&cluster.xce(&["-o", "json", "submit", "--", "sleep", "60"])))
        .collect();
    for id in &long {
        cluster
            .wait_job(*id, "running", |j| j.state == JobState::Running)
            .await;
    }
    let waiting =
        submitted_id(&cluster.xce(&["-o", "json", "submit", "--cwd", &cwd, "--wrap", "touch ran"]));
    let job = cluster
        .wait_job(waiting, "sent ahead", |j| j.state == JobState::Dispatched)
        .await;
    let host = job.host.clone().unwrap();
    assert_eq!(sent_ahead(&cluster).await, host);
    cluster.xce_ok(&["kill", &waiting.to_string()]);
    let killed = cluster
        .wait_job(waiting, "ended", |j| j.state.is_final())
        .await;
    assert_eq!(killed.result, Some(JobResult::Cancelled), "{killed:?}");
    // Its attempt never started: it never ran, so `afternotok` on it is never met.
    assert_eq!((killed.attempt, killed.runs), (1, 0), "{killed:?}");
    let dependent = submitted_id(&cluster.xce(&[
        "-o",
        "json",
        "submit",
        "--dependency",
        &format!("afternotok:{waiting}"),
        "--",
        "true",
    ]));
    let judged = cluster.job(dependent).await.unwrap();
    assert_eq!(
        (judged.dependency_state, judged.pend_reason.as_deref()),
        (
            Some(DependencyState::Never),
            Some(format!("never satisfied: job {waiting} ended cancelled before it ran").as_str())
        ),
        "{judged:?}"
    );
    cluster.xce_ok(&["kill", &dependent.to_string()]);
    // The long job on its host runs on, undisturbed.
    for id in &long {
        let job = cluster.job(*id).await.unwrap();
        assert_eq!(job.state, JobState::Running, "{job:?}");
        assert_eq!((job.attempt, job.runs), (1, 1), "{job:?}");
        cluster.xce_ok(&["kill", &id.to_string()]);
    }
    for id in &long {
        cluster.wait_job(*id, "ended", |j| j.state.is_final()).await;
    }
    assert!(!work.join("ran").exists(), "the killed job ran");
}

/// `after:` is met once its job started, and a job sent ahead has not until its worker says
/// so: it may wait behind a long one for as long as that runs.
#[tokio::test]
async fn after_waits_for_a_job_sent_ahead_to_start() {
    let cluster = cluster().await;
    let long: Vec<u64> = (0..2)
        .map(|_| submitted_id(&cluster.xce(&["-o", "json", "submit", "--", "sleep", "60"])))
        .collect();
    for id in &long {
        cluster
            .wait_job(*id, "running", |j| j.state == JobState::Running)
            .await;
    }
    let ahead = submitted_id(&cluster.xce(&["-o", "json", "submit", "--", "sleep", "60"]));
    let job = cluster
        .wait_job(ahead, "sent ahead", |j| j.state == JobState::Dispatched)
        .await;
    let host = job.host.clone().unwrap();
    let dependent = submitted_id(&cluster.xce(&[
        "-o",
        "json",
        "submit",
        "--dependency",
        &format!("after:{ahead}"),
        "--",
        "true",
    ]));
    // Judged when it was submitted, with its parent waiting on its host.
    let judged = cluster.job(dependent).await.unwrap();
    assert_eq!(
        judged.dependency_state,
        Some(DependencyState::Waiting),
        "{judged:?}"
    );
    assert_eq!(
        cluster.job(ahead).await.unwrap().state,
        JobState::Dispatched,
        "the parent still waits on {host}"
    );
    // The long job on its host ends; the parent starts there, and the dependent may go.
    let mut blocker = None;
    for id in &long {
        if cluster.job(*id).await.unwrap().host.as_deref() == Some(host.as_str()) {
            blocker = Some(*id);
        }
    }
    cluster.xce_ok(&["kill", &blocker.unwrap().to_string()]);
    let parent = cluster
        .wait_job(ahead, "started", |j| j.state == JobState::Running)
        .await;
    let released = cluster
        .wait_job(dependent, "released", |j| {
            j.dependency_state == Some(DependencyState::Satisfied)
        })
        .await;
    let parent_start = parent.start_time_ms.unwrap();
    if let Some(start) = released.start_time_ms {
        assert!(
            start >= parent_start,
            "{released:?} started before {parent:?}"
        );
    }
    for id in long.iter().chain([&ahead, &dependent]) {
        let _ = cluster.xce(&["kill", &id.to_string()]);
    }
    for id in long.iter().chain([&ahead, &dependent]) {
        cluster.wait_job(*id, "ended", |j| j.state.is_final()).await;
    }
}
