//! Job dependencies (issue 34), through the real binaries: an `afterok` chain runs in order,
//! each link only once its parent completed; `afternotok` on a job cancelled before it ran
//! never runs (and with `--kill-on-invalid-dep=yes` ends cancelled at once, with its own
//! dependents); `xce job` lists each condition and where it stands; a dependency on a job
//! that does not exist is refused naming it.

#![allow(clippy::unwrap_used)]

use xce_client::types::{DependencyState, HostState, Job, JobResult, JobState, PendCode};
use xce_tests::{json_of, submitted_id, Cluster};

/// A cluster that places jobs by itself: one controller, one worker, a scheduler.
async fn cluster() -> Cluster {
    let cluster = Cluster::builder()
        .controllers(1)
        .workers(1, &["--heartbeat-ms", "200"])
        .schedulers(1, &[])
        .start();
    cluster.wait_primary().await;
    cluster.wait_version().await;
    cluster.wait_host("w1", HostState::Ok).await;
    cluster.wait_active_scheduler().await;
    cluster
}

async fn ended(cluster: &Cluster, id: u64) -> Job {
    cluster.wait_job(id, "ended", |j| j.state.is_final()).await
}

#[tokio::test]
async fn an_afterok_chain_of_twenty_runs_in_order() {
    let cluster = cluster().await;
    let work = cluster.dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let cwd = work.to_string_lossy().into_owned();
    let mut ids: Vec<u64> = Vec::new();
    for link in 1..=20 {
        let mut args = vec![
            "-o".to_string(),
            "json".into(),
            "submit".into(),
            "--cwd".into(),
            cwd.clone(),
        ];
        if let Some(parent) = ids.last() {
            args.extend(["-d".into(), format!("afterok:{parent}")]);
        }
        args.extend(["--wrap".into(), format!("echo {link} >> chain")]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ids.push(submitted_id(&cluster.xce(&args)));
    }
    // The last is released only once its parent completed (read after it, so a parent
    // that completed before the last was read shows so).
    let last = cluster.job(*ids.last().unwrap()).await.unwrap();
    let parent = cluster.job(ids[ids.len() - 2]).await.unwrap();
    if last.dependency_state != Some(DependencyState::Waiting) {
        assert_eq!(
            parent.result,
            Some(JobResult::Completed),
            "{last:?} released before {parent:?}"
        );
    }
    let mut jobs = Vec::new();
    for id in &ids {
        jobs.push(ended(&cluster, *id).await);
    }
    let order: Vec<u32> = std::fs::read_to_string(work.join("chain"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(order, (1..=20).collect::<Vec<u32>>());
    for pair in jobs.windows(2) {
        let (parent, child) = (&pair[0], &pair[1]);
        assert_eq!(child.result, Some(JobResult::Completed), "{child:?}");
        assert_eq!(child.dependency_state, Some(DependencyState::Satisfied));
        assert!(
            child.start_time_ms.unwrap() >= parent.end_time_ms.unwrap(),
            "job {} started before its parent {} ended",
            child.id,
            parent.id
        );
    }
    let shown = json_of(&cluster.xce_ok(&["-o", "json", "job", &ids[1].to_string()]));
    assert_eq!(shown["dependency"], format!("afterok:{}", ids[0]));
    assert_eq!(shown["dependency_state"], "satisfied");
    let text = String::from_utf8(cluster.xce_ok(&["job", &ids[1].to_string()]).stdout).unwrap();
    assert!(text.contains(&format!("afterok:{}: met", ids[0])), "{text}");
}

#[tokio::test]
async fn afternotok_on_a_job_cancelled_before_it_ran_never_runs() {
    let cluster = cluster().await;
    let submit = |args: &[&str]| {
        let mut all = vec!["-o", "json", "submit"];
        all.extend_from_slice(args);
        submitted_id(&cluster.xce(&all))
    };
    let parent = submit(&["--hold", "--wrap", "true"]);
    let on = |kind: &str| format!("{kind}:{parent}");
    let kept = submit(&["-d", &on("afternotok"), "--wrap", "touch ran"]);
    let killed = submit(&[
        "-d",
        &on("afternotok"),
        "--kill-on-invalid-dep=yes",
        "--wrap",
        "touch ran",
    ]);
    // The killed one's own dependent goes with it, in the same change.
    let grandchild = submit(&[
        "-d",
        &format!("afterok:{killed}"),
        "--kill-on-invalid-dep",
        "yes",
        "--wrap",
        "true",
    ]);
    let waiting = cluster.job(kept).await.unwrap();
    assert_eq!(
        (waiting.pend_code, waiting.dependency_state),
        (Some(PendCode::Dependency), Some(DependencyState::Waiting)),
        "{waiting:?}"
    );
    let text = String::from_utf8(cluster.xce_ok(&["job", &kept.to_string()]).stdout).unwrap();
    assert!(
        text.contains(&format!("afternotok:{parent}: waiting")),
        "{text}"
    );

    cluster.xce_ok(&["kill", &parent.to_string()]);
    let why = format!("never satisfied: job {parent} ended cancelled before it ran");
    let never = cluster
        .wait_job(kept, "its verdict", |j| {
            j.dependency_state == Some(DependencyState::Never)
        })
        .await;
    assert_eq!(
        (never.state, never.pend_code, never.pend_reason.as_deref()),
        (
            JobState::Pending,
            Some(PendCode::Dependency),
            Some(why.as_str())
        )
    );
    let cancelled = ended(&cluster, killed).await;
    assert_eq!(
        (cancelled.result, cancelled.reason.as_deref()),
        (Some(JobResult::Cancelled), Some(why.as_str()))
    );
    assert_eq!(cancelled.start_time_ms, None);
    let cascaded = ended(&cluster, grandchild).await;
    assert_eq!(cascaded.result, Some(JobResult::Cancelled), "{cascaded:?}");
    let shown = json_of(&cluster.xce_ok(&["-o", "json", "job", &kept.to_string()]));
    assert_eq!(
        (&shown["dependency_state"], &shown["kill_on_invalid_dep"]),
        (&serde_json::json!("never"), &serde_json::json!(false))
    );
    // Still pending, never placed: nothing ran.
    assert_eq!(cluster.job(kept).await.unwrap().state, JobState::Pending);
    assert!(!cluster.dir.path().join("ran").exists());

    // What does not exist is refused, naming it.
    let out = cluster.xce(&["-o", "json", "submit", "-d", "afterok:9999", "--", "true"]);
    assert!(!out.status.success());
    let error = json_of(&out)["error"].clone();
    assert_eq!(error["code"], "invalid", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("job 9999 does not exist"),
        "{error}"
    );
    let out = cluster.xce(&["-o", "json", "submit", "-d", "afterwards:1", "--", "true"]);
    assert!(
        json_of(&out)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown type \"afterwards\""),
        "{out:?}"
    );
}

/// Over HTTP: `dependency` and `kill_on_invalid_dep` in a submit, the job's JSON says where it
/// stands, and a dependency that does not parse is `invalid`.
#[tokio::test]
async fn the_http_api_takes_a_dependency() {
    let cluster = Cluster::builder()
        .controllers(1)
        .workers(1, &["--heartbeat-ms", "200"])
        .schedulers(1, &[])
        .apiservers(1, &[])
        .start();
    cluster.wait_primary().await;
    cluster.wait_version().await;
    cluster.wait_host("w1", HostState::Ok).await;
    let api = cluster.api(0);
    let parent = serde_json::json!({"command": ["true"], "hold": true});
    let made = xce_tests::wait_for(
        "the apiserver",
        std::time::Duration::from_secs(30),
        || async {
            let answer = api
                .request("POST", "/v1/jobs", Some(&parent), &[])
                .await
                .ok()?;
            (answer.status == 201).then_some(answer)
        },
    )
    .await;
    let parent = made.body["id"].as_u64().unwrap();
    let body = serde_json::json!({
        "command": ["true"],
        "dependency": format!("afterany:{parent}"),
        "kill_on_invalid_dep": true,
    });
    let made = api.post("/v1/jobs", &body).await;
    assert_eq!(made.status, 201, "{}", made.body);
    let job = &made.body["job"];
    assert_eq!(job["dependency"], format!("afterany:{parent}"), "{job}");
    assert_eq!(
        (&job["dependency_state"], &job["kill_on_invalid_dep"]),
        (&serde_json::json!("waiting"), &serde_json::json!(true)),
        "{job}"
    );
    let id = made.body["id"].as_u64().unwrap();
    let released = api
        .post(
            &format!("/v1/jobs/{parent}/release"),
            &serde_json::json!({}),
        )
        .await;
    assert_eq!(released.status, 200, "{}", released.body);
    let job = ended(&cluster, id).await;
    assert_eq!(job.result, Some(JobResult::Completed), "{job:?}");
    let bad = api
        .post(
            "/v1/jobs",
            &serde_json::json!({"command": ["true"], "dependency": "afterok:1,after:2?after:3"}),
        )
        .await;
    assert_eq!(
        (bad.status, &bad.body["error"]["code"]),
        (400, &serde_json::json!("invalid")),
        "{}",
        bad.body
    );
}

/// The primary killed while parents end: a new primary, replaying the log, releases each
/// dependent once, never before its parent ended (the verdict is the state machine's, so
/// a replay reaches the same one at the same entry).
#[tokio::test]
async fn a_failover_while_parents_end_releases_every_dependent_once() {
    let mut cluster = Cluster::builder()
        .controllers(3)
        .workers(1, &["--heartbeat-ms", "200", "--cpus", "16"])
        .schedulers(1, &[])
        .start();
    let (primary, _) = cluster.wait_primary().await;
    cluster.wait_version().await;
    cluster.wait_host("w1", HostState::Ok).await;
    cluster.wait_active_scheduler().await;
    let work = cluster.dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let cwd = work.to_string_lossy().into_owned();
    let submit = |args: &[&str]| {
        let mut all = vec!["-o", "json", "submit", "--cwd", &cwd];
        all.extend_from_slice(args);
        submitted_id(&cluster.xce(&all))
    };
    let mut pairs = Vec::new();
    for k in 0..12u32 {
        // Parents end 0.2 s apart, over more than two seconds.
        let run = format!("sleep {}.{}", k * 2 / 10, k * 2 % 10);
        let parent = submit(&["--wrap", &run]);
        let child = submit(&[
            "-d",
            &format!("afterok:{parent}"),
            "--wrap",
            &format!("echo child{k} >> children"),
        ]);
        pairs.push((parent, child));
    }
    // Once the first parent has ended, while the others still run or end.
    cluster
        .wait_job(pairs[0].0, "the first parent ended", |j| j.state.is_final())
        .await;
    cluster.kill9(primary);
    let last = cluster.job(pairs[11].0).await.unwrap();
    assert!(
        !last.state.is_final(),
        "every parent ended before the kill: {last:?}"
    );
    let mut lines = Vec::new();
    for (k, (parent, child)) in pairs.iter().enumerate() {
        let parent = ended(&cluster, *parent).await;
        let child = ended(&cluster, *child).await;
        assert_eq!(child.result, Some(JobResult::Completed), "{child:?}");
        assert!(
            child.start_time_ms.unwrap() >= parent.end_time_ms.unwrap(),
            "{child:?} started before {parent:?} ended"
        );
        lines.push(format!("child{k}"));
    }
    let mut ran: Vec<String> = std::fs::read_to_string(work.join("children"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    ran.sort();
    lines.sort();
    assert_eq!(ran, lines, "each dependent ran exactly once");
}

/// The cluster's default (`jobs.kill_on_invalid_dep: true`) for a dependent that does not
/// say, which `--kill-on-invalid-dep=no` overrides.
#[tokio::test]
async fn the_cluster_default_cancels_a_dependent_that_can_never_run() {
    let cluster = Cluster::builder()
        .controllers(1)
        .config("jobs:\n  kill_on_invalid_dep: true\n")
        .workers(1, &["--heartbeat-ms", "200"])
        .schedulers(1, &[])
        .start();
    cluster.wait_primary().await;
    cluster.wait_version().await;
    let submit = |args: &[&str]| {
        let mut all = vec!["-o", "json", "submit"];
        all.extend_from_slice(args);
        submitted_id(&cluster.xce(&all))
    };
    let parent = submit(&["--hold", "--wrap", "true"]);
    let on = format!("afterok:{parent}");
    let defaulted = submit(&["-d", &on, "--wrap", "true"]);
    let kept = submit(&["-d", &on, "--kill-on-invalid-dep=no", "--wrap", "true"]);
    cluster.xce_ok(&["kill", &parent.to_string()]);
    let job = ended(&cluster, defaulted).await;
    assert_eq!(job.result, Some(JobResult::Cancelled), "{job:?}");
    assert_eq!(job.spec.kill_on_invalid_dep, Some(true));
    let job = cluster
        .wait_job(kept, "its verdict", |j| {
            j.dependency_state == Some(DependencyState::Never)
        })
        .await;
    assert_eq!(job.state, JobState::Pending);
}
