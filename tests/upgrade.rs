//! Upgrades onto this build. A rolling upgrade from the build of the store format before this
//! one (tests/upgrade-from.commit, built by scripts/upgrade-from-build) under load, with no
//! client error: while any member runs the older build the cluster stays at its version, and
//! the cluster, its worker and its scheduler (of the older build until the controllers are
//! done) go on placing and running jobs, those of the older version's features included; once
//! every member runs this build the primary raises the version by itself, after which the
//! older build refuses the data dir, and a scheduler of this build sends jobs ahead to a
//! worker of this build. And this build starting on the data dirs and the backups that the
//! builds of older formats wrote (the committed fixtures, `tests/fixtures/store-format-N`: 6,
//! 7, 8, 10, 11 and 12; format 10 stores jobs and states as 9 does, and 11 as 10 does).

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xce_client::ops::{all_jobs, GetCluster, Submit};
use xce_client::types::{
    DependencyState, HostState, JobFilter, JobResult, JobSpec, JobState, RequestToken,
};
use xce_tests::{background_submits, bin, json_of, submitted_id, wait_for, Cluster};

/// Every load loop is bounded by count and by time.
const MAX_CALLS: usize = 3_000;
const MAX_SPAN: Duration = Duration::from_secs(180);

/// The load is submitted to `normal`, made inactive at the start so that it stays pending;
/// what the test runs goes to `probe`.
const CONFIG: &str =
    "queues:\n  - name: normal\n    priority: 30\n  - name: probe\n    priority: 50\n";
/// One cpu: three jobs of one cpu placed at once on it are two beyond its room.
const WORKER_ARGS: &[&str] = &["--heartbeat-ms", "200", "--cpus", "1"];
const SCHEDULER_ARGS: &[&str] = &["--lease-ttl-ms", "1500"];

/// The store format of the build the upgrade starts from, and of this one.
const OLDER: u32 = 12;
const THIS: u32 = 13;

/// The directory holding the binaries a rolling upgrade starts from (xce-controller,
/// xce-worker, xce-scheduler): `XCE_UPGRADE_FROM` (an absolute path), else what
/// `scripts/upgrade-from-build` makes of tests/upgrade-from.commit (built the first time it is
/// asked: minutes; CI builds it before the tests run).
fn older_build() -> PathBuf {
    if let Some(dir) = std::env::var_os("XCE_UPGRADE_FROM") {
        return PathBuf::from(dir);
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/upgrade-from-build");
    let out = std::process::Command::new(&script).output().unwrap();
    assert!(
        out.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    PathBuf::from(printed.lines().last().unwrap().trim())
}

/// Which binary daemon `d` runs now.
fn running(d: &xce_devcluster::Daemon) -> PathBuf {
    std::fs::read_link(format!("/proc/{}/exe", d.pid().unwrap())).unwrap()
}

/// A job in the probe queue that waits for task 1 of array `array`: what format 11 judges
/// (a dependency on some tasks of an array), sent as it is (this client does not ask the
/// cluster's version first).
fn on_a_task_of(array: u64, cwd: &str) -> Submit {
    Submit {
        token: RequestToken::random(),
        spec: JobSpec {
            command: vec!["true".into()],
            queue: "probe".into(),
            cwd: cwd.into(),
            dependency: Some(format!("afterok:{array}_1").parse().unwrap()),
            ..JobSpec::default()
        },
        script: None,
    }
}

/// Submits `true` to the probe queue with the CLI and waits until it ended completed: the
/// cluster took it, the scheduler placed it, and the worker ran it and reported its end,
/// whichever builds each runs `now`.
async fn probe(cluster: &Cluster, cwd: &str, now: &str) -> u64 {
    let out = cluster.xce(&[
        "-o", "json", "submit", "-q", "probe", "--cwd", cwd, "--", "true",
    ]);
    let id = submitted_id(&out);
    ended_completed(cluster, id, now).await;
    id
}

/// Waits until job `id` ended, and checks it completed.
async fn ended_completed(cluster: &Cluster, id: u64, now: &str) {
    let job = cluster
        .wait_job(id, &format!("to end ({now})"), |j| j.state.is_final())
        .await;
    assert_eq!(job.result, Some(JobResult::Completed), "{now}: {job:?}");
}

/// Waits until every task of array `id` ended completed (each task split off is a job of its
/// own, listed with the array's id).
async fn array_completed(cluster: &Cluster, id: u64, tasks: usize, now: &str) {
    ended_completed(cluster, id, now).await;
    let jobs = all_jobs(&cluster.client(), JobFilter::default())
        .await
        .unwrap();
    let ended: Vec<_> = jobs
        .iter()
        .filter(|j| j.array_task.as_ref().is_some_and(|t| t.array_id == id))
        .map(|j| (j.id, j.result))
        .collect();
    assert_eq!(ended.len(), tasks, "array {id} ({now}): {ended:?}");
    assert!(
        ended.iter().all(|(_, r)| *r == Some(JobResult::Completed)),
        "array {id} ({now}): {ended:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_from_the_previous_format_fails_no_call_and_then_raises_the_version() {
    let older = older_build();
    let old = older.join("xce-controller").canonicalize().unwrap();
    let new = bin("xce-controller").canonicalize().unwrap();
    assert_ne!(old, new);
    let mut cluster = Cluster::builder()
        .bin_dir(older.clone())
        .controllers(3)
        .config(CONFIG)
        .workers(1, WORKER_ARGS)
        .schedulers(1, SCHEDULER_ARGS)
        .start();
    let (primary, _) = cluster.wait_all_standbys().await;
    for c in cluster.controllers() {
        assert_eq!(running(c), old, "{} runs another build", c.name);
    }
    let old_worker = older.join("xce-worker").canonicalize().unwrap();
    let old_scheduler = older.join("xce-scheduler").canonicalize().unwrap();
    assert_eq!(running(&cluster.worker_daemons()[0]), old_worker);
    assert_eq!(running(&cluster.schedulers()[0]), old_scheduler);
    // The older build raises a new cluster to its own version.
    assert_eq!(cluster.wait_version().await, OLDER);
    cluster.wait_host("w1", HostState::Ok).await;
    cluster.wait_active_scheduler().await;
    cluster.xce_ok(&["queue", "inactivate", "normal"]);
    let (_work, cwd) = cluster.work_dir();
    probe(&cluster, &cwd, "every daemon on the older build").await;
    // An array, held: the dependencies on its tasks below wait for it.
    let out = cluster.xce_ok(&[
        "-o", "json", "submit", "-q", "probe", "--cwd", &cwd, "--hold", "--array", "0-3", "--",
        "true",
    ]);
    let array = submitted_id(&out);
    let aftercorr = format!("aftercorr:{array}");

    // Under load: a failover client, and one-shot CLI processes.
    let stop = Arc::new(AtomicBool::new(false));
    let library = background_submits(
        cluster.client_with_default_budget(),
        stop.clone(),
        MAX_CALLS,
        MAX_SPAN,
    );
    let peers = cluster.peers.clone();
    let one_shots = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (t0, mut acked, mut failed) = (Instant::now(), Vec::new(), Vec::new());
            while !stop.load(Ordering::Relaxed)
                && acked.len() < MAX_CALLS
                && t0.elapsed() < MAX_SPAN
            {
                let out = xce_tests::xce(&peers, &["-o", "json", "submit", "--", "true"]);
                if out.status.success() {
                    acked.push(json_of(&out)["id"].as_u64().unwrap());
                } else {
                    failed.push(String::from_utf8_lossy(&out.stdout).into_owned());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            (acked, failed)
        })
    };

    // The standbys first, each back and caught up before the next goes down; jobs are placed
    // and run after each.
    for k in 1..=2 {
        let i = (primary + k) % 3;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            cluster.stop(i).await.success(),
            "c{} did not stop cleanly",
            i + 1
        );
        cluster.replace_binary(i, new.clone());
        cluster.restart(i);
        cluster.wait_all_standbys().await;
        probe(&cluster, &cwd, &format!("{k} standby(s) on this build")).await;
    }
    // The primary still runs the older build, whose version judges a dependency on tasks
    // (`aftercorr` pairs the tasks of two arrays): the client asks the cluster's version
    // first, and it is sent. It waits for the held array until that is released; then each
    // task runs after its pair, judged by the older primary and applied by both builds.
    let out = cluster.xce(&[
        "-o", "json", "submit", "-q", "probe", "--cwd", &cwd, "--array", "0-3", "-d", &aftercorr,
        "--", "true",
    ]);
    let paired = submitted_id(&out);
    let job = cluster.job(paired).await.unwrap();
    assert_eq!(
        job.dependency_state,
        Some(DependencyState::Waiting),
        "{job:?}"
    );
    cluster.xce_ok(&["release", &array.to_string()]);
    array_completed(&cluster, array, 4, "the primary on the older build").await;
    array_completed(&cluster, paired, 4, "the primary on the older build").await;

    // The older primary restarted on its older build: a primary of this build is elected,
    // and while a member runs the older build the cluster's version stays the older one.
    let old_primary = cluster.controllers()[primary].name.clone();
    assert!(cluster.stop(primary).await.success());
    // Kept down until a standby of this build leads (restarted at once, it would go on
    // leading its term).
    let (now_primary, _) = cluster.wait_primary().await;
    assert_ne!(now_primary, primary);
    cluster.restart(primary);
    cluster.wait_all_standbys().await;
    let client = cluster.client();
    let info = wait_for(
        "the older member's version heard",
        Duration::from_secs(30),
        || {
            let client = client.clone();
            let name = old_primary.clone();
            async move {
                let info = client.call(GetCluster).await.ok()?;
                let member = info.members.iter().find(|m| m.name == name)?;
                (member.version == Some(OLDER)).then_some(info)
            }
        },
    )
    .await;
    assert_eq!(info.active_version, OLDER);
    // The JSON contract: the cluster's version, and each member's.
    let shown = json_of(&cluster.xce_ok(&["-o", "json", "cluster"]));
    assert_eq!(shown["active_version"], OLDER, "{shown}");
    for member in shown["members"].as_array().unwrap() {
        // This build's members report its own version, the older build's its own.
        let expected = if member["name"] == old_primary.as_str() {
            OLDER
        } else {
            THIS
        };
        assert_eq!(member["version"], expected, "{shown}");
    }
    // A primary of this build at the older version judges what it does: a dependency on a
    // task, sent as it is, is taken and met, and the job runs.
    let id = client.call(on_a_task_of(array, &cwd)).await.unwrap();
    ended_completed(&cluster, id, "a member on the older build").await;
    assert_eq!(
        cluster.job(id).await.unwrap().dependency_state,
        Some(DependencyState::Satisfied)
    );

    // Until the version is raised, going back is possible: a member of this build, which
    // has written its data dir meanwhile, rolls back onto the older build and forward again,
    // under the same load; jobs run after each.
    let back = (0..3).find(|j| *j != primary && *j != now_primary).unwrap();
    for bin in [old.clone(), new.clone()] {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(cluster.stop(back).await.success());
        cluster.replace_binary(back, bin.clone());
        cluster.restart(back);
        cluster.wait_all_standbys().await;
        assert_eq!(running(&cluster.controllers()[back]), bin);
        let now = format!("c{} back on {}", back + 1, bin.display());
        probe(&cluster, &cwd, &now).await;
    }
    assert_eq!(client.call(GetCluster).await.unwrap().active_version, OLDER);
    // What the new version adds is refused by name until the raise: an account.
    let charged = [
        "submit",
        "-q",
        "probe",
        "--account",
        "physics",
        "--",
        "true",
    ];
    let refused = cluster.xce(&charged);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("account needs cluster version 13"), "{said}");

    // The last member onto this build: the primary raises the version by itself.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(cluster.stop(primary).await.success());
    cluster.replace_binary(primary, new.clone());
    cluster.restart(primary);
    cluster.wait_all_standbys().await;
    assert_eq!(cluster.wait_version().await, THIS);
    probe(
        &cluster,
        &cwd,
        "raised, worker and scheduler on the older build",
    )
    .await;
    // What the older version judged is judged alike after the raise.
    let id = client.call(on_a_task_of(array, &cwd)).await.unwrap();
    ended_completed(&cluster, id, "raised").await;
    // And what the new version adds is taken.
    let id = submitted_id(&cluster.xce_ok(&[&["-o", "json"], &charged[..]].concat()));
    assert_eq!(cluster.job(id).await.unwrap().spec.account, "physics");
    let out = cluster.xce_ok(&[
        "-o", "json", "submit", "-q", "probe", "--cwd", &cwd, "--array", "0-3", "-d", &aftercorr,
        "--", "true",
    ]);
    let id = submitted_id(&out);
    assert_eq!(
        cluster
            .job(id)
            .await
            .unwrap()
            .spec
            .dependency
            .unwrap()
            .to_string(),
        aftercorr
    );
    array_completed(&cluster, id, 4, "raised").await;

    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let (lib_acked, lib_failed) = library.await.unwrap();
    let (cli_acked, cli_failed) = one_shots.join().unwrap();
    assert!(
        lib_failed.is_empty(),
        "failover client errors: {lib_failed:?}"
    );
    assert!(cli_failed.is_empty(), "CLI errors: {cli_failed:?}");
    assert!(
        lib_acked.len() > 20 && cli_acked.len() > 5,
        "{} {}",
        lib_acked.len(),
        cli_acked.len()
    );
    for c in cluster.controllers() {
        assert_eq!(running(c), new, "{} runs another build", c.name);
    }
    // Every acknowledged job is there, once (beside what the test ran in the probe queue),
    // pending in the inactive queue.
    let jobs = all_jobs(&cluster.client(), JobFilter::default())
        .await
        .unwrap();
    let load: Vec<_> = jobs.iter().filter(|j| j.spec.queue != "probe").collect();
    assert!(
        load.iter().all(|j| j.state == JobState::Pending),
        "the load ran"
    );
    let mut ids: Vec<u64> = load.iter().map(|j| j.id).collect();
    ids.sort_unstable();
    let mut acked: Vec<u64> = lib_acked.into_iter().chain(cli_acked).collect();
    acked.sort_unstable();
    assert_eq!(
        ids, acked,
        "the cluster's jobs are exactly the acknowledged ones"
    );

    // Then the worker, and last the scheduler, onto this build, the scheduler sending up to
    // three rounds ahead: what version 12 admits, a host placed beyond its free room, which
    // its worker holds until room frees.
    let worker_bin = bin("xce-worker").canonicalize().unwrap();
    let scheduler_bin = bin("xce-scheduler").canonicalize().unwrap();
    let grace = Duration::from_secs(15);
    let stopped = cluster.local.stop_worker(0, grace).unwrap();
    assert!(stopped.is_some_and(|s| s.success()), "w1: {stopped:?}");
    cluster.local.workers[0]
        .process
        .replace_binary(worker_bin.clone());
    cluster.local.start_worker(0).unwrap();
    wait_for(
        "w1 back on this build, holding starts back",
        Duration::from_secs(30),
        || async {
            let host = cluster.host("w1").await?;
            (host.state == HostState::Ok && host.queues_starts).then_some(())
        },
    )
    .await;
    assert_eq!(running(&cluster.worker_daemons()[0]), worker_bin);
    probe(&cluster, &cwd, "the worker on this build").await;
    let stopped = cluster.local.stop_scheduler(0, grace).unwrap();
    assert!(stopped.is_some_and(|s| s.success()), "s1: {stopped:?}");
    let scheduler = &mut cluster.local.schedulers[0].process;
    scheduler.replace_binary(scheduler_bin.clone());
    scheduler.set_env("XCE_DISPATCH_AHEAD", PathBuf::from("3"));
    cluster.local.start_scheduler(0).unwrap();
    cluster.wait_active_scheduler().await;
    assert_eq!(running(&cluster.schedulers()[0]), scheduler_bin);
    let ahead = ran_ahead(&cluster, &cwd).await;
    assert!(ahead.len() >= 3, "{ahead:?}");

    cluster.assert_no_errors();

    // Once raised, the older build refuses a member's data dir by name (an ERROR in its log,
    // after the check above).
    let i = (now_primary + 1) % 3;
    assert!(cluster.stop(i).await.success());
    cluster.replace_binary(i, old.clone());
    cluster.restart(i);
    let daemon = &mut cluster.local.controllers[i];
    let status = wait_for("the older build to refuse", Duration::from_secs(30), || {
        std::future::ready(daemon.process.exited())
    })
    .await;
    assert!(!status.success());
    let log = std::fs::read_to_string(&cluster.local.controllers[i].log).unwrap();
    assert!(log.contains(&format!("store format {THIS}")), "{log}");
    cluster.replace_binary(i, new.clone());
    cluster.restart(i);
    cluster.wait_all_standbys().await;

    // Nor is a controller of the older build added: it could not apply version 12's records.
    // (The cluster was started from the older build's directory, so a joining one runs it.)
    let (c4, addr) = cluster.start_joining("c4");
    assert_eq!(running(&cluster.controllers()[c4]), old);
    let add = format!("c4={addr}");
    let error = wait_for("the addition refused", Duration::from_secs(30), || {
        let out = cluster.xce(&["-o", "json", "admin", "members", "add", &add]);
        let error = json_of(&out)["error"].clone();
        // `notReady` while it has not started listening yet.
        std::future::ready((error["code"] != "notReady").then_some(error))
    })
    .await;
    assert_eq!(error["code"], "invalid", "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("c4 runs a build of cluster version {OLDER}"))
            && message.contains(&format!("runs version {THIS}")),
        "{message}"
    );
    let members = json_of(&cluster.xce_ok(&["-o", "json", "admin", "members"]));
    assert_eq!(members["members"].as_array().unwrap().len(), 3, "{members}");
}

/// Submits three jobs of one cpu that each note their start and end, waits until the
/// one-cpu host is seen placed beyond its room (sent ahead), and then until each ended
/// completed, having run alone on the host; returns their ids.
async fn ran_ahead(cluster: &Cluster, cwd: &str) -> Vec<u64> {
    let body = "echo $(date +%s%N) > run.$XCE_JOB_ID; sleep 1; \
                echo $(date +%s%N) >> run.$XCE_JOB_ID";
    let ids: Vec<u64> = (0..3)
        .map(|_| {
            submitted_id(&cluster.xce(&[
                "-o", "json", "submit", "-q", "probe", "--cwd", cwd, "--wrap", body,
            ]))
        })
        .collect();
    wait_for(
        "w1 placed beyond its free room",
        Duration::from_secs(30),
        || async {
            let host = cluster.host("w1").await?;
            (host.used.cpus > host.capacity.cpus).then_some(())
        },
    )
    .await;
    let mut runs = Vec::new();
    for id in &ids {
        ended_completed(cluster, *id, "sent ahead").await;
        let text = std::fs::read_to_string(Path::new(cwd).join(format!("run.{id}"))).unwrap();
        let stamps: Vec<u64> = text
            .split_whitespace()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(stamps.len(), 2, "job {id} ran once: {text:?}");
        runs.push((stamps[0], stamps[1]));
    }
    // By their own clocks, never two at once on the one-cpu host.
    for (start, _) in &runs {
        let at_once = runs.iter().filter(|(s, e)| s <= start && start < e).count();
        assert_eq!(at_once, 1, "{at_once} jobs ran at once: {runs:?}");
    }
    ids
}

/// The committed fixture of store format `format`: three controllers' data dirs and a backup
/// made by the last build of that format (`scripts/make-store-fixture`), with a manifest of
/// what they held.
fn fixture(format: u32) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/store-format-{format}"))
}

/// Stops the fixture's controllers however the test ends.
struct Controllers(Vec<xce_devcluster::process::Process>);

impl Drop for Controllers {
    fn drop(&mut self) {
        for p in &mut self.0 {
            p.kill_quietly();
        }
    }
}

/// How this build shows a job an older build listed: every key it printed, unchanged, and
/// the keys added since, derived from it (for format 6: a result for an ended job, the
/// pending code of a job that waits with no scheduler, no time limit; no script).
fn as_this_build_shows(old: &serde_json::Value) -> serde_json::Value {
    let mut job = old.clone();
    let state = old["state"].as_str().unwrap();
    let result = match (state, old["reason"].as_str()) {
        ("done", _) => serde_json::json!("completed"),
        ("exited", Some("killed")) => serde_json::json!("cancelled"),
        ("exited", _) => serde_json::json!("failed"),
        _ => serde_json::Value::Null,
    };
    let code = if state == "pending" {
        serde_json::json!("no_scheduler")
    } else {
        serde_json::Value::Null
    };
    // Its output where a job that named none writes it: `xce-ID.out` in its directory, once
    // it has a host.
    let output = match (&old["host"], old["cwd"].as_str()) {
        (serde_json::Value::String(_), Some(cwd)) => {
            let file = format!("xce-{}.out", old["id"]);
            serde_json::json!(std::path::Path::new(cwd).join(file).display().to_string())
        }
        _ => serde_json::Value::Null,
    };
    let map = job.as_object_mut().unwrap();
    map.entry("stdout").or_insert(output.clone());
    map.entry("stderr").or_insert(output);
    map.entry("open_mode").or_insert(serde_json::Value::Null);
    map.entry("held").or_insert(serde_json::json!(false));
    map.entry("begin_time").or_insert(serde_json::Value::Null);
    map.entry("warn_signal").or_insert(serde_json::Value::Null);
    map.entry("requeue").or_insert(serde_json::json!(true));
    map.entry("result").or_insert(result);
    map.entry("pend_code").or_insert(code);
    map.entry("time_limit_s").or_insert(serde_json::Value::Null);
    map.entry("script").or_insert(serde_json::json!(false));
    map.entry("dependency").or_insert(serde_json::Value::Null);
    map.entry("dependency_state")
        .or_insert(serde_json::Value::Null);
    map.entry("kill_on_invalid_dep")
        .or_insert(serde_json::json!(false));
    map.entry("array_job_id").or_insert(serde_json::Value::Null);
    map.entry("array_task_id")
        .or_insert(serde_json::Value::Null);
    map.entry("array").or_insert(serde_json::Value::Null);
    // Every attempt of an older build's counted as a run (format 12 counts reported starts).
    let attempt = map["attempt"].clone();
    map.entry("runs").or_insert(attempt);
    // Charged to no account, with no start reserved, no usage measured and no record of its
    // attempts (format 13); its elapsed time from the start and end it shows.
    map.entry("account").or_insert(serde_json::json!(""));
    map.entry("attempts").or_insert(serde_json::json!([]));
    map.entry("expected_start")
        .or_insert(serde_json::Value::Null);
    map.entry("cpu_time_s").or_insert(serde_json::Value::Null);
    map.entry("max_rss_mb").or_insert(serde_json::Value::Null);
    let at = |key: &str| {
        old[key].as_str().map(|t| {
            xce_client::when::parse(t, 0, xce_client::when::TimeOfDay::Last).unwrap() / 1000
        })
    };
    let elapsed = match (at("start_time"), at("end_time")) {
        (Some(start), Some(end)) => serde_json::json!(end - start),
        _ => serde_json::Value::Null,
    };
    map.entry("elapsed_s").or_insert(elapsed);
    job
}

#[tokio::test]
async fn a_format_6_cluster_s_data_dirs_and_backup_are_served_by_this_build() {
    serves_the_fixture_of(6).await;
}

#[tokio::test]
async fn a_format_7_cluster_s_data_dirs_and_backup_are_served_by_this_build() {
    serves_the_fixture_of(7).await;
}

#[tokio::test]
async fn a_format_8_cluster_s_data_dirs_and_backup_are_served_by_this_build() {
    serves_the_fixture_of(8).await;
}

/// Format 10's fixture holds arrays (one done, one held with tasks released, killed and
/// renamed by name, and its throttle changed) and dependencies (met, never met, cancelled for
/// it, waiting).
#[tokio::test]
async fn a_format_10_cluster_s_data_dirs_and_backup_are_served_by_this_build() {
    serves_the_fixture_of(10).await;
}

/// Format 11's fixture adds dependencies judged task by task: on one task of an array (met,
/// never met, waiting) and `aftercorr` (an array whose tasks ran after their pairs, the one
/// whose pair failed cancelled, and an array waiting for a held one's tasks).
#[tokio::test]
async fn a_format_11_cluster_s_data_dirs_and_backup_are_served_by_this_build() {
    serves_the_fixture_of(11).await;
}

/// Format 12's fixture adds each job's count of runs (attempts that started).
#[tokio::test]
async fn a_format_12_cluster_s_data_dirs_and_backup_are_served_by_this_build() {
    serves_the_fixture_of(12).await;
}

/// The data dirs of a three-controller cluster written by the build of store format `format`
/// start on this build, which serves every job, queue, host and token as it was (adding only
/// the new keys, derived), raises the cluster's version once all three run it (their
/// identities then name this build's format), takes a time limit; and that build's backup
/// restores into a new cluster.
async fn serves_the_fixture_of(format: u32) {
    let fixture = || fixture(format);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture().join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["made_by"]["store_format"], format);
    let peers = manifest["peers"].as_str().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let mut controllers = Controllers(Vec::new());
    let config = fixture().join("controller.yaml");
    for c in manifest["controllers"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let data = dir.path().join(name);
        std::fs::create_dir_all(&data).unwrap();
        for file in ["identity.json", "xce.redb"] {
            std::fs::copy(fixture().join(name).join(file), data.join(file)).unwrap();
        }
        let args = [
            "--name",
            name,
            "--peers",
            &peers,
            "--data-dir",
            &data.to_string_lossy(),
            "--config",
            &config.to_string_lossy(),
        ];
        let mut p = xce_devcluster::process::Process::new(
            name.to_string(),
            bin("xce-controller"),
            args.iter().map(|a| a.to_string()).collect(),
            dir.path().join(format!("{name}.log")),
        );
        p.start("info").unwrap();
        controllers.0.push(p);
    }
    let cli = |args: &[&str]| xce_tests::xce(&peers, args);
    let version = wait_for(
        "the cluster's version raised",
        Duration::from_secs(60),
        || async {
            let out = cli(&["-o", "json", "cluster"]);
            let info = out.status.success().then(|| json_of(&out))?;
            let v = info["active_version"].as_u64()?;
            (v > u64::from(format)).then_some(v)
        },
    )
    .await;
    // Every job as the older build listed it.
    for old in manifest["jobs"].as_array().unwrap() {
        let id = old["id"].as_u64().unwrap();
        let out = cli(&["-o", "json", "job", &id.to_string()]);
        assert!(out.status.success(), "job {id}: {out:?}");
        assert_eq!(json_of(&out), as_this_build_shows(old), "job {id}");
    }
    // Queues as listed (with their time rules, keys added since: none configured here);
    // hosts as listed (with the memory they use, a key added since).
    let out = cli(&["-o", "json", "queues"]);
    let mut listed = manifest["queues"].clone();
    for q in listed.as_array_mut().unwrap() {
        let q = q.as_object_mut().unwrap();
        q.entry("default_time_s").or_insert(serde_json::Value::Null);
        q.entry("max_time_s").or_insert(serde_json::Value::Null);
    }
    assert_eq!(json_of(&out), listed);
    let out = cli(&["-o", "json", "hosts"]);
    let hosts = json_of(&out);
    for (new, old) in hosts
        .as_array()
        .unwrap()
        .iter()
        .zip(manifest["hosts"].as_array().unwrap())
    {
        for (key, value) in old.as_object().unwrap() {
            assert_eq!(&new[key], value, "host {}: {key}", old["name"]);
        }
    }
    // Tokens: the same ones listed; the revoked one still refused, a live one still works.
    let out = cli(&["-o", "json", "token", "list"]);
    assert_eq!(json_of(&out), manifest["tokens"]);
    let with_token = |token: &str| {
        std::process::Command::new(bin("xce"))
            .args(["-o", "json", "jobs", "--limit", "1"])
            .env("XCE_PEERS", &peers)
            .env("XCE_TOKEN", token)
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .env("XDG_CACHE_HOME", dir.path().join("cache"))
            .output()
            .unwrap()
    };
    let bob = with_token(manifest["token_secrets"]["bob"].as_str().unwrap());
    assert!(!bob.status.success(), "a revoked token was taken");
    assert_eq!(json_of(&bob)["error"]["code"], "auth");
    let alice = with_token(manifest["token_secrets"]["alice"].as_str().unwrap());
    assert!(alice.status.success(), "{alice:?}");
    // The new version's records are written, after each data dir's identity says so.
    let out = cli(&[
        "-o", "json", "submit", "--time", "1:00", "-q", "normal", "--", "true",
    ]);
    assert!(out.status.success(), "{out:?}");
    let id = json_of(&out)["id"].as_u64().unwrap();
    let out = cli(&["-o", "json", "job", &id.to_string()]);
    assert_eq!(json_of(&out)["time_limit_s"], 60);
    for c in manifest["controllers"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let path = dir.path().join(name).join("identity.json");
        wait_for(
            &format!("{name}'s identity raised"),
            Duration::from_secs(30),
            || async {
                let id: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
                (id["format"].as_u64()? == version).then_some(())
            },
        )
        .await;
    }
    for p in &mut controllers.0 {
        let status = p.stop(Duration::from_secs(10)).unwrap();
        assert!(status.is_some_and(|s| s.success()), "{status:?}");
    }

    // The older build's backup, into a new cluster of this build.
    let cluster = Cluster::start(1);
    cluster.wait_primary().await;
    // A new cluster starts at the oldest version and raises it at once; a backup holding what
    // a newer one added is refused until then ("try again").
    cluster.wait_version().await;
    let backup = fixture().join("backup.xcebk");
    cluster.xce_ok(&["admin", "snapshot", "restore", &backup.to_string_lossy()]);
    for old in manifest["jobs"].as_array().unwrap() {
        let id = old["id"].as_u64().unwrap();
        let out = cluster.xce_ok(&["-o", "json", "job", &id.to_string()]);
        let restored = json_of(&out);
        for key in [
            "state",
            "reason",
            "exit_code",
            "signal",
            "attempt",
            "command",
            "user",
        ] {
            assert_eq!(restored[key], old[key], "job {id}: {key}");
        }
        assert_eq!(
            restored["result"],
            as_this_build_shows(old)["result"],
            "job {id}"
        );
    }
    cluster.assert_no_errors();
}
