//! Job arrays (issue 34), through the real binaries: one submit of many tasks, each split off
//! into a job of its own as it is placed, never more at once than the throttle, each writing
//! its `%A_%a` output once with its `XCE_ARRAY_*` variables; `xce jobs` shows the tasks still
//! waiting on one line; a kill of the array ends every task.

#![allow(clippy::unwrap_used)]

use std::process::Output;
use std::time::Duration;

use xce_client::events::{EventStream, StreamItem};
use xce_client::ops::GetTask;
use xce_client::types::{ClusterEvent, EventFilter, HostState, JobResult, JobState};
use xce_tests::{json_of, submitted_id, wait_for, Cluster};

async fn cluster() -> Cluster {
    let cluster = Cluster::builder()
        .controllers(1)
        .workers(2, &["--heartbeat-ms", "200", "--cpus", "4"])
        .schedulers(1, &[])
        .start();
    cluster.wait_primary().await;
    cluster.wait_version().await;
    cluster.wait_host("w1", HostState::Ok).await;
    cluster.wait_host("w2", HostState::Ok).await;
    cluster.wait_active_scheduler().await;
    cluster
}

/// Waits up to `secs` for job `id` to end (`Cluster::wait_job` allows 30 s).
async fn ended_within(cluster: &Cluster, id: u64, secs: u64) -> xce_client::types::Job {
    let client = cluster.client();
    wait_for(
        &format!("job {id} ended"),
        Duration::from_secs(secs),
        || async {
            let job = client.call(xce_client::ops::GetJob { id }).await.ok()?;
            job.state.is_final().then_some(job)
        },
    )
    .await
}

#[tokio::test]
async fn an_array_runs_each_task_once_within_its_throttle() {
    let cluster = cluster().await;
    let (work, cwd) = cluster.work_dir();
    // Each task notes its start and end (wall clock, ns) and says who it is.
    let body = "echo start $(date +%s%N) >> times.$XCE_ARRAY_TASK_ID; sleep 0.1; \
                echo \"$XCE_ARRAY_JOB_ID $XCE_ARRAY_TASK_ID $XCE_ARRAY_TASK_COUNT \
                $XCE_ARRAY_TASK_MIN $XCE_ARRAY_TASK_MAX $XCE_ARRAY_TASK_STEP $XCE_JOB_ID\"; \
                echo end $(date +%s%N) >> times.$XCE_ARRAY_TASK_ID";
    let out = cluster.xce(&[
        "-o",
        "json",
        "submit",
        "--cwd",
        &cwd,
        "--array",
        "0-58:2%4",
        "--stdout",
        "%A_%a.out",
        "--wrap",
        body,
    ]);
    let array = submitted_id(&out);
    let listing = String::from_utf8(cluster.xce_ok(&["jobs"]).stdout).unwrap();
    assert!(
        listing.contains(&format!("{array}_[")) || listing.contains(&format!("{array}_")),
        "{listing}"
    );
    let done = cluster
        .wait_job(array, "every task ended", |j| j.state.is_final())
        .await;
    assert_eq!(
        (done.state, done.result),
        (JobState::Done, Some(JobResult::Completed)),
        "{done:?}"
    );
    let shown = json_of(&cluster.xce_ok(&["-o", "json", "job", &array.to_string()]));
    assert_eq!(shown["array"]["spec"], "0-58:2%4", "{shown}");
    assert_eq!(
        (&shown["array"]["pending"], &shown["array"]["done"]),
        (&serde_json::json!(0), &serde_json::json!(30)),
        "{shown}"
    );
    let mut spans = Vec::new();
    let mut task_ids = Vec::new();
    for index in (0..=58).step_by(2) {
        let out = std::fs::read_to_string(work.join(format!("{array}_{index}.out"))).unwrap();
        let fields: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(
            &fields[..6],
            &[
                array.to_string().as_str(),
                index.to_string().as_str(),
                "30",
                "0",
                "58",
                "2"
            ],
            "{out}"
        );
        let task_id: u64 = fields[6].parse().unwrap();
        assert_ne!(task_id, array, "a task is a job of its own");
        task_ids.push(task_id);
        let times = std::fs::read_to_string(work.join(format!("times.{index}"))).unwrap();
        let ns: Vec<u64> = times
            .lines()
            .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
            .collect();
        assert_eq!(ns.len(), 2, "task {index} ran once: {times}");
        spans.push((ns[0], ns[1]));
    }
    task_ids.sort_unstable();
    task_ids.dedup();
    assert_eq!(task_ids.len(), 30);
    // Never more than the throttle at once, by the tasks' own clocks.
    let most = spans
        .iter()
        .map(|(start, _)| {
            spans
                .iter()
                .filter(|(s, e)| s <= start && start < e)
                .count()
        })
        .max()
        .unwrap();
    assert!(
        most <= 4,
        "{most} tasks ran at once, over the throttle of 4"
    );
    let task = json_of(&cluster.xce_ok(&["-o", "json", "job", &task_ids[0].to_string()]));
    assert_eq!(task["array_job_id"], array, "{task}");
    assert!(task["array_task_id"].is_u64(), "{task}");
}

#[tokio::test]
async fn a_kill_of_an_array_ends_every_task() {
    let cluster = cluster().await;
    let out = cluster.xce(&[
        "-o",
        "json",
        "submit",
        "--array",
        "1-100000%2",
        "--wrap",
        "sleep 300",
    ]);
    let array = submitted_id(&out);
    cluster
        .wait_job(array, "two tasks placed", |j| {
            j.array.as_ref().is_some_and(|p| p.running == 2)
        })
        .await;
    cluster.xce_ok(&["kill", &array.to_string()]);
    let ended = cluster
        .wait_job(array, "ended", |j| j.state.is_final())
        .await;
    let p = ended.array.unwrap();
    assert_eq!(
        (p.pending.len(), p.running, p.unrun + p.failed),
        (0, 0, 100_000),
        "{p:?}"
    );
    assert_eq!(ended.result, Some(JobResult::Cancelled));
}

/// A failed command's words (text mode prints them on stderr).
fn refused(out: &Output) -> String {
    assert!(!out.status.success(), "expected a refusal: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `ID_IDX` and `ID_[A-B]` name tasks in every command: a release or kill of some tasks
/// splits off or ends exactly those, `xce job ID_IDX` shows the task, `xce jobs --expand`
/// lists each waiting task, the throttle changes while the array waits, and a release of
/// the whole array reaches the tasks still waiting in it.
#[tokio::test]
async fn tasks_are_named_id_idx_in_every_command() {
    let cluster = cluster().await;
    let (work, cwd) = cluster.work_dir();
    let out = cluster.xce(&[
        "-o",
        "json",
        "submit",
        "--cwd",
        &cwd,
        "--hold",
        "--array",
        "0-5",
        "--stdout",
        "%A_%a.out",
        "--wrap",
        "echo $XCE_ARRAY_TASK_ID",
    ]);
    let a = submitted_id(&out);
    let task = |i: &str| format!("{a}_{i}");
    cluster.xce_ok(&["release", &task("[0-1]")]);
    cluster
        .wait_job(a, "the two released tasks ran", |j| {
            j.array.as_ref().is_some_and(|p| p.completed == 2)
        })
        .await;
    let first = json_of(&cluster.xce_ok(&["-o", "json", "job", &task("0")]));
    assert_eq!(
        (
            &first["array_job_id"],
            &first["array_task_id"],
            &first["state"]
        ),
        (
            &serde_json::json!(a),
            &serde_json::json!(0),
            &serde_json::json!("done")
        ),
        "{first}"
    );
    // A task still waiting is shown by its array's record.
    let waiting = json_of(&cluster.xce_ok(&["-o", "json", "job", &task("3")]));
    assert_eq!(waiting["id"], a, "{waiting}");
    let listing = String::from_utf8(cluster.xce_ok(&["jobs"]).stdout).unwrap();
    assert!(listing.contains(&task("[2-5]")), "{listing}");
    let expanded = String::from_utf8(cluster.xce_ok(&["jobs", "--expand"]).stdout).unwrap();
    for i in 2..=5 {
        let line = expanded
            .lines()
            .find(|l| l.split_whitespace().next() == Some(task(&i.to_string()).as_str()));
        assert!(line.is_some_and(|l| l.contains("pending")), "{expanded}");
    }
    assert!(!expanded.contains(&task("[")), "{expanded}");

    // Kill two waiting tasks; a task the array never had is named.
    cluster.xce_ok(&["kill", &task("[4-5]")]);
    let now = cluster
        .wait_job(a, "two tasks ended unrun", |j| {
            j.array.as_ref().is_some_and(|p| p.unrun == 2)
        })
        .await;
    assert_eq!(now.array.unwrap().pending.to_string(), "2-3");
    assert!(refused(&cluster.xce(&["kill", &task("9")])).contains("no task 9"));
    assert!(refused(&cluster.xce(&["hold", &task("0")])).contains("has ended"));

    // The throttle is the whole array's.
    cluster.xce_ok(&["update", &a.to_string(), "--throttle", "1"]);
    let shown = json_of(&cluster.xce_ok(&["-o", "json", "job", &a.to_string()]));
    assert_eq!(shown["array"]["spec"], "0-5%1", "{shown}");
    assert!(refused(&cluster.xce(&["update", &task("2"), "--throttle", "2"])).contains("throttle"));

    // Releasing the array releases the tasks still held in it.
    cluster.xce_ok(&["release", &a.to_string()]);
    let ended = cluster
        .wait_job(a, "every task ended", |j| j.state.is_final())
        .await;
    assert_eq!(ended.result, Some(JobResult::Cancelled), "{ended:?}");
    for (i, ran) in [
        (0, true),
        (1, true),
        (2, true),
        (3, true),
        (4, false),
        (5, false),
    ] {
        let out = work.join(format!("{a}_{i}.out"));
        assert_eq!(out.exists(), ran, "task {i}");
        if ran {
            assert_eq!(std::fs::read_to_string(out).unwrap().trim(), i.to_string());
        }
    }
}

/// A signal reaches the one task named; a kill of the array ends the others; `submit --wait`
/// on an array exits with its tasks' highest exit code.
#[tokio::test]
async fn a_signal_names_one_task_and_wait_exits_with_the_highest_code() {
    let cluster = cluster().await;
    let mut events = EventStream::open(cluster.client(), EventFilter::default())
        .await
        .unwrap();
    let out = cluster.xce(&[
        "-o",
        "json",
        "submit",
        "--array",
        "0-1",
        "--wrap",
        "sleep 300",
    ]);
    let a = submitted_id(&out);
    cluster
        .wait_job(a, "both tasks run", |j| {
            j.array.as_ref().is_some_and(|p| p.running == 2)
        })
        .await;
    let client = cluster.client();
    let task = |i: u32| {
        let client = &client;
        async move { client.call(GetTask { array: a, index: i }).await.ok() }
    };
    wait_for("task 0 runs", Duration::from_secs(30), || async {
        task(0).await.filter(|t| t.state == JobState::Running)
    })
    .await;
    // Events name a task by its array and index.
    let named = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(item) = events.next().await {
            if let StreamItem::Event(ClusterEvent::Job { task, .. }) = item {
                if task == Some((a, 0)) {
                    return true;
                }
            }
        }
        false
    })
    .await;
    assert_eq!(named, Ok(true), "no event named task {a}_0");
    cluster.xce_ok(&["signal", &format!("{a}_0"), "KILL"]);
    let t0 = wait_for("task 0 ends", Duration::from_secs(30), || async {
        task(0).await.filter(|t| t.state.is_final())
    })
    .await;
    assert_eq!(t0.signal, Some(9), "{t0:?}");
    let t1 = task(1).await.unwrap();
    assert_eq!(
        t1.state,
        JobState::Running,
        "task 1 was not signalled: {t1:?}"
    );
    cluster.xce_ok(&["kill", &a.to_string()]);
    cluster.wait_job(a, "ended", |j| j.state.is_final()).await;

    let out = cluster.xce(&[
        "submit",
        "--wait",
        "--array",
        "1-3",
        "--wrap",
        "exit $XCE_ARRAY_TASK_ID",
    ]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
}

/// `jobs.max_submitted_per_user` counts an array as one submit, plus each of its tasks while
/// it runs, not as its thousand tasks (Slurm counts each task against `MaxSubmitJobs`).
#[tokio::test]
async fn the_per_user_limit_counts_an_array_once_plus_its_running_tasks() {
    let cluster = Cluster::builder()
        .controllers(1)
        .config("jobs:\n  max_submitted_per_user: 3\n")
        .workers(1, &["--heartbeat-ms", "200", "--cpus", "1"])
        .schedulers(1, &[])
        .start();
    cluster.wait_primary().await;
    cluster.wait_version().await;
    cluster.wait_host("w1", HostState::Ok).await;
    let submit = |args: &[&str]| {
        let mut all = vec!["-o", "json", "submit"];
        all.extend_from_slice(args);
        cluster.xce(&all)
    };
    // A thousand held tasks: one submit.
    let held = submitted_id(&submit(&["--hold", "--array", "1-1000", "--wrap", "true"]));
    // One running task (one cpu): the array and the task, two.
    let running = submitted_id(&submit(&["--array", "1-5", "--wrap", "sleep 300"]));
    cluster
        .wait_job(running, "a task runs", |j| {
            j.array.as_ref().is_some_and(|p| p.running == 1)
        })
        .await;
    let out = submit(&["--wrap", "true"]);
    let refused = json_of(&out);
    assert_eq!(refused["error"]["code"], "conflict", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("3 jobs submitted") && message.contains("max_submitted_per_user"),
        "{message}"
    );
    // Once the held array is gone, there is room for one.
    cluster.xce_ok(&["kill", &held.to_string()]);
    cluster
        .wait_job(held, "ended", |j| j.state.is_final())
        .await;
    submitted_id(&submit(&["--hold", "--wrap", "true"]));
    cluster.xce_ok(&["kill", &running.to_string()]);
}

/// The scale: 10,000 tasks, `%4`, on two workers with eight cpus between them: never
/// more than four at once by the tasks' own clocks, and each task's `%A_%a` output written by
/// one run (appended to, so a second run would show).
#[tokio::test]
async fn ten_thousand_tasks_run_at_most_four_at_once_each_once() {
    const TASKS: u32 = 10_000;
    let cluster = cluster().await;
    let (work, cwd) = cluster.work_dir();
    let out = cluster.xce(&[
        "-o",
        "json",
        "submit",
        "--cwd",
        &cwd,
        "--array",
        &format!("0-{}%4", TASKS - 1),
        "--stdout",
        "%A_%a.out",
        "--open-mode",
        "append",
        "--wrap",
        "echo start $(date +%s%N); echo end $(date +%s%N)",
    ]);
    let array = submitted_id(&out);
    let done = ended_within(&cluster, array, 600).await;
    assert_eq!(done.result, Some(JobResult::Completed), "{done:?}");
    // Each task's run, as (start, end) on its own clock; then the most at once, by a sweep.
    let mut edges = Vec::with_capacity(2 * TASKS as usize);
    for index in 0..TASKS {
        let path = work.join(format!("{array}_{index}.out"));
        let text = std::fs::read_to_string(&path).unwrap();
        let ns: Vec<u64> = text
            .lines()
            .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
            .collect();
        assert_eq!(ns.len(), 2, "task {index} ran once: {text:?}");
        edges.push((ns[0], 1i32));
        edges.push((ns[1], -1i32));
    }
    // At one instant an end comes before a start: touching runs are not at once.
    edges.sort_unstable();
    let (mut now, mut most) = (0, 0);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    assert!(
        most <= 4,
        "{most} tasks ran at once, over the throttle of 4"
    );
}

/// The primary killed while an array drains: every task ran once (its `%A_%a` output,
/// appended to, holds one run) and the array's counts are its tasks'.
#[tokio::test]
async fn a_primary_killed_while_an_array_drains_runs_every_task_once() {
    const TASKS: u32 = 300;
    let mut cluster = Cluster::builder()
        .controllers(3)
        .workers(2, &["--heartbeat-ms", "200", "--cpus", "4"])
        .schedulers(1, &[])
        .start();
    let (primary, _) = cluster.wait_primary().await;
    cluster.wait_version().await;
    cluster.wait_host("w1", HostState::Ok).await;
    cluster.wait_host("w2", HostState::Ok).await;
    cluster.wait_active_scheduler().await;
    let (work, cwd) = cluster.work_dir();
    let out = cluster.xce(&[
        "-o",
        "json",
        "submit",
        "--cwd",
        &cwd,
        "--array",
        &format!("0-{}%6", TASKS - 1),
        "--stdout",
        "%A_%a.out",
        "--open-mode",
        "append",
        "--wrap",
        "echo ran; sleep 0.05",
    ]);
    let array = submitted_id(&out);
    // Kill the primary once a few dozen tasks have run, while most still wait.
    let before = cluster
        .wait_job(array, "some tasks ran", |j| {
            j.array.as_ref().is_some_and(|p| p.completed >= 30)
        })
        .await;
    assert!(before.array.unwrap().pending.len() > 100);
    cluster.kill9(primary);
    let done = ended_within(&cluster, array, 300).await;
    assert_eq!(done.result, Some(JobResult::Completed), "{done:?}");
    let p = done.array.unwrap();
    assert_eq!(
        (p.completed, p.failed, p.unrun),
        (u64::from(TASKS), 0, 0),
        "{p:?}"
    );
    for index in 0..TASKS {
        let text = std::fs::read_to_string(work.join(format!("{array}_{index}.out"))).unwrap();
        assert_eq!(text, "ran\n", "task {index} ran once");
    }
}

/// The nanosecond stamps a job wrote to `file` (one per line: `WORD NS`), none if absent.
fn stamps(file: &std::path::Path) -> Vec<u64> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
        .collect()
}

#[tokio::test]
async fn aftercorr_pairs_tasks_and_a_dependency_names_one_task() {
    let cluster = cluster().await;
    let (work, cwd) = cluster.work_dir();
    // Array A: task 0 takes 3 s, the rest end at once; task 3 fails.
    let a = submitted_id(&cluster.xce(&[
        "-o",
        "json",
        "submit",
        "--cwd",
        &cwd,
        "--array",
        "0-5",
        "--wrap",
        "if [ $XCE_ARRAY_TASK_ID = 0 ]; then sleep 3; fi; echo end $(date +%s%N) > a.$XCE_ARRAY_TASK_ID; \
         [ $XCE_ARRAY_TASK_ID != 3 ]",
    ]));
    // Array B: task i after task i of A completed; C after A_1 alone.
    let b = submitted_id(&cluster.xce(&[
        "-o",
        "json",
        "submit",
        "--cwd",
        &cwd,
        "--array",
        "0-5",
        "--dependency",
        &format!("aftercorr:{a}"),
        "--kill-on-invalid-dep",
        "yes",
        "--wrap",
        "echo start $(date +%s%N) > b.$XCE_ARRAY_TASK_ID",
    ]));
    let c = submitted_id(&cluster.xce(&[
        "-o",
        "json",
        "submit",
        "--cwd",
        &cwd,
        "--dependency",
        &format!("afterok:{a}_1"),
        "--wrap",
        "echo start $(date +%s%N) > c",
    ]));
    let b_done = ended_within(&cluster, b, 60).await;
    let c_done = ended_within(&cluster, c, 60).await;
    assert_eq!(c_done.result, Some(JobResult::Completed), "{c_done:?}");
    // B ends cancelled: its task 3 could never start (its pair failed).
    assert_eq!(b_done.result, Some(JobResult::Cancelled), "{b_done:?}");
    let never = json_of(&cluster.xce_ok(&["-o", "json", "job", &format!("{b}_3")]));
    assert_eq!(
        never["reason"],
        format!("never satisfied: job {a}_3 ended failed"),
        "{never}"
    );
    assert!(stamps(&work.join("b.3")).is_empty(), "B_3 ran");
    let a_end = |i: usize| stamps(&work.join(format!("a.{i}")))[0];
    for i in [0, 1, 2, 4, 5] {
        let started = stamps(&work.join(format!("b.{i}")));
        assert_eq!(started.len(), 1, "B_{i} ran once");
        assert!(started[0] >= a_end(i), "B_{i} started before A_{i} ended");
    }
    // Paired, not after the whole array: B_1 started while A_0 still ran.
    assert!(
        stamps(&work.join("b.1"))[0] < a_end(0),
        "B_1 waited for A_0"
    );
    assert!(stamps(&work.join("c"))[0] >= a_end(1));
    // `xce job` judges each condition from the task it names.
    let shown = String::from_utf8(cluster.xce_ok(&["job", &c.to_string()]).stdout).unwrap();
    assert!(shown.contains(&format!("afterok:{a}_1: met")), "{shown}");
}
