//! Running jobs through the real binaries: kill, suspend, resume and requeue reach the whole
//! process group; reports survive a primary crash and a worker restart (durable outbox); a
//! restarted worker adopts the jobs its shims still run; a worker killed, frozen or cut off
//! has its jobs stopped by their shims before the cluster runs them elsewhere. A job never
//! runs twice at once.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use xce_client::ops::JobFinished;
use xce_client::types::{HeldJob, HeldPhase, HostState, JobEnd, JobState, RequestToken};
use xce_client::{ClientError, Status};
use xce_tests::{wait_for, Cluster};

/// Liveness for tests: heartbeats every 200 ms, unavailable after 1 s, lost 1 s later.
const CONFIG: &str = "hosts:\n  heartbeat_ttl_ms: 1000\n  lost_grace_ms: 1000\n";
const WORKER_ARGS: &[&str] = &[
    "--heartbeat-ms",
    "200",
    "--cpus",
    "16",
    "--mem-mb",
    "1024",
    "--kill-grace-ms",
    "1000",
];

/// The state letter of a process (`R`, `S`, `T` stopped, `Z` zombie), `None` once it is gone.
fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

fn alive(pid: i32) -> bool {
    proc_state(pid).is_some_and(|s| s != 'Z')
}

/// Kills, when the test ends however it ends, every pid a job wrote into `<dir>/*.pid`: no
/// job process outlives its test.
struct JobReaper(PathBuf);

impl Drop for JobReaper {
    fn drop(&mut self) {
        for pid in read_pids(&self.0) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

fn read_pids(dir: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "pid"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

/// A working dir for job files, reaped at the end of the test.
fn workdir(cluster: &Cluster) -> (PathBuf, JobReaper) {
    let dir = cluster.dir.path().join("work");
    std::fs::create_dir_all(&dir).unwrap();
    (dir.clone(), JobReaper(dir))
}

/// Waits until `<dir>/<name>` holds a pid and returns it.
async fn pid_in(dir: &Path, name: &str) -> i32 {
    let path = dir.join(name);
    wait_for(
        &format!("{}", path.display()),
        Duration::from_secs(30),
        || async { std::fs::read_to_string(&path).ok()?.trim().parse().ok() },
    )
    .await
}

async fn wait_gone(pid: i32, what: &str) {
    wait_for(what, Duration::from_secs(30), || async {
        (!alive(pid)).then_some(())
    })
    .await
}

/// A job that records its shell's pid and a background child's pid, then waits forever.
fn group_job(name: &str) -> String {
    format!("sleep 300 & echo $! > {name}.child.pid; echo $$ > {name}.pid; wait")
}

/// A [`group_job`] dispatched to w1 and running: its working dir's reaper, its id, and the
/// pids of its shell and of the shell's child.
async fn group_job_running_on_w1(cluster: &Cluster, name: &str) -> (JobReaper, u64, i32, i32) {
    let (work, reaper) = workdir(cluster);
    let id = cluster.submit_in(&work, &["sh", "-c", &group_job(name)]);
    cluster.xce_ok(&["dispatch", &id.to_string(), "w1"]);
    let shell = pid_in(&work, &format!("{name}.pid")).await;
    let child = pid_in(&work, &format!("{name}.child.pid")).await;
    cluster
        .wait_job(id, "running", |j| j.state == JobState::Running)
        .await;
    (reaper, id, shell, child)
}

#[tokio::test]
async fn kill_reaches_the_whole_group_and_sigkills_after_the_grace_period() {
    let cluster = Cluster::start_full(1, Some(CONFIG), 1, WORKER_ARGS);
    cluster.wait_host("w1", HostState::Ok).await;
    let (work, _reaper) = workdir(&cluster);
    let polite = cluster.submit_in(&work, &["sh", "-c", &group_job("polite")]);
    // Ignores SIGTERM (and so does its child): only SIGKILL after the grace period ends it.
    let stubborn = cluster.submit_in(
        &work,
        &[
            "sh",
            "-c",
            &format!("trap '' TERM; {}", group_job("stubborn")),
        ],
    );
    for id in [polite, stubborn] {
        cluster.xce_ok(&["dispatch", &id.to_string(), "w1"]);
        cluster
            .wait_job(id, "running", |j| j.state == JobState::Running)
            .await;
    }
    let mut pids = Vec::new();
    for file in [
        "polite.pid",
        "polite.child.pid",
        "stubborn.pid",
        "stubborn.child.pid",
    ] {
        pids.push(pid_in(&work, file).await);
    }
    for id in [polite, stubborn] {
        cluster.xce_ok(&["kill", &id.to_string()]);
    }
    let job = cluster
        .wait_job(polite, "killed", |j| j.state.is_final())
        .await;
    assert_eq!(
        (job.state, job.reason.as_deref(), job.signal),
        (JobState::Exited, Some("killed"), Some(15))
    );
    let job = cluster
        .wait_job(stubborn, "killed", |j| j.state.is_final())
        .await;
    assert_eq!(
        (job.state, job.reason.as_deref(), job.signal),
        (JobState::Exited, Some("killed"), Some(9))
    );
    for pid in pids {
        wait_gone(pid, &format!("job process {pid} to be gone")).await;
    }
    assert_eq!(cluster.host("w1").await.unwrap().used.cpus, 0);
    // Killing it again is a conflict that names the state.
    let out = cluster.xce(&["-o", "json", "kill", &polite.to_string()]);
    assert!(!out.status.success());
}

#[tokio::test]
async fn suspend_and_resume_stop_and_continue_the_whole_group() {
    let cluster = Cluster::start_full(1, Some(CONFIG), 1, WORKER_ARGS);
    cluster.wait_host("w1", HostState::Ok).await;
    let (_reaper, id, shell, child) = group_job_running_on_w1(&cluster, "s").await;

    cluster.xce_ok(&["suspend", &id.to_string()]);
    assert_eq!(cluster.job(id).await.unwrap().state, JobState::Suspended);
    // Stopped (`T`), or frozen in its cgroup (`D`) where the host has cgroups.
    let held = |s: char| s == 'T' || s == 'D';
    for pid in [shell, child] {
        wait_for(
            &format!("{pid} stopped"),
            Duration::from_secs(10),
            || async { proc_state(pid).filter(|s| held(*s)).map(|_| ()) },
        )
        .await;
    }
    cluster.xce_ok(&["resume", &id.to_string()]);
    assert_eq!(cluster.job(id).await.unwrap().state, JobState::Running);
    for pid in [shell, child] {
        wait_for(
            &format!("{pid} running"),
            Duration::from_secs(10),
            || async { proc_state(pid).filter(|s| !held(*s)).map(|_| ()) },
        )
        .await;
    }
    // A suspended job can be killed: the worker continues the group so it sees SIGTERM.
    cluster.xce_ok(&["suspend", &id.to_string()]);
    cluster.xce_ok(&["kill", &id.to_string()]);
    let job = cluster.wait_job(id, "killed", |j| j.state.is_final()).await;
    assert_eq!(job.reason.as_deref(), Some("killed"));
    wait_gone(child, "the suspended job's child to be gone").await;
}

/// Whether the worker runs jobs in cgroups (its log says so at start). As root (CI) a host
/// without them fails the test; otherwise the caller skips, saying why.
fn worker_has_cgroups(cluster: &Cluster) -> bool {
    let log = std::fs::read_to_string(&cluster.local.workers[0].log).unwrap();
    if log.contains("each job runs in a cgroup of its own") {
        return true;
    }
    assert!(
        !nix::unistd::geteuid().is_root(),
        "running as root, yet the worker found no cgroups: {log}"
    );
    eprintln!("skipped: not root, and the worker found no cgroups");
    false
}

#[tokio::test]
async fn a_job_over_its_memory_limit_ends_out_of_memory() {
    let cluster = Cluster::start_full(1, Some(CONFIG), 1, WORKER_ARGS);
    cluster.wait_host("w1", HostState::Ok).await;
    if !worker_has_cgroups(&cluster) {
        return;
    }
    // dd allocates (and fills) a 256 MiB buffer.
    let dd = |mem_mb: &str| {
        let out = cluster.xce_ok(&[
            "-o",
            "json",
            "submit",
            "--mem-mb",
            mem_mb,
            "--",
            "dd",
            "if=/dev/zero",
            "of=/dev/null",
            "bs=256M",
            "count=1",
        ]);
        let id = xce_tests::json_of(&out)["id"].as_u64().unwrap();
        cluster.xce_ok(&["dispatch", &id.to_string(), "w1"]);
        id
    };
    let id = dd("32");
    let job = cluster.wait_job(id, "ended", |j| j.state.is_final()).await;
    assert_eq!(
        (job.state, job.reason.as_deref(), job.signal),
        (JobState::Exited, Some("out of memory"), Some(9)),
        "{job:?}"
    );
    // The same job with room enough is done.
    let id = dd("512");
    let job = cluster.wait_job(id, "ended", |j| j.state.is_final()).await;
    assert_eq!(job.state, JobState::Done, "{job:?}");
}

/// `--cgroups off`: today's process-group behaviour, said at join. A suspend stops the
/// group with SIGSTOP (`T`, never frozen in a cgroup), a kill reaches the whole group, and
/// the job's memory is not enforced (a job asking for 32 MiB that uses 256 MiB is done).
#[tokio::test]
async fn with_cgroups_off_jobs_run_in_their_process_group_unlimited_and_the_worker_says_so() {
    let mut args = WORKER_ARGS.to_vec();
    args.extend(["--cgroups", "off"]);
    let cluster = Cluster::start_full(1, Some(CONFIG), 1, &args);
    cluster.wait_host("w1", HostState::Ok).await;
    let log = &cluster.local.workers[0].log;
    wait_for("the worker's join", Duration::from_secs(10), || async {
        let text = std::fs::read_to_string(log).ok()?;
        text.lines()
            .find(|l| l.contains("joined the cluster"))
            .map(str::to_string)
    })
    .await;
    let text = std::fs::read_to_string(log).unwrap();
    assert!(text.contains("cgroups are off (--cgroups off)"), "{text}");
    let joined = text
        .lines()
        .find(|l| l.contains("joined the cluster"))
        .unwrap();
    assert!(joined.contains("process groups only"), "{joined}");
    assert!(!text.contains("each job runs in a cgroup"), "{text}");

    let (_reaper, id, shell, child) = group_job_running_on_w1(&cluster, "g").await;
    cluster.xce_ok(&["suspend", &id.to_string()]);
    for pid in [shell, child] {
        wait_for(
            &format!("{pid} stopped by SIGSTOP"),
            Duration::from_secs(10),
            || async { proc_state(pid).filter(|s| *s == 'T').map(|_| ()) },
        )
        .await;
    }
    cluster.xce_ok(&["kill", &id.to_string()]);
    let job = cluster.wait_job(id, "killed", |j| j.state.is_final()).await;
    assert_eq!(job.reason.as_deref(), Some("killed"));
    wait_gone(child, "the job's child to be gone").await;

    let out = cluster.xce_ok(&[
        "-o",
        "json",
        "submit",
        "--mem-mb",
        "32",
        "--",
        "dd",
        "if=/dev/zero",
        "of=/dev/null",
        "bs=256M",
        "count=1",
    ]);
    let id = xce_tests::json_of(&out)["id"].as_u64().unwrap();
    cluster.xce_ok(&["dispatch", &id.to_string(), "w1"]);
    let job = cluster.wait_job(id, "ended", |j| j.state.is_final()).await;
    assert_eq!(job.state, JobState::Done, "{job:?}");
}

#[tokio::test]
async fn requeue_kills_the_attempt_and_the_next_dispatch_is_a_new_attempt() {
    let cluster = Cluster::start_full(1, Some(CONFIG), 1, WORKER_ARGS);
    cluster.wait_host("w1", HostState::Ok).await;
    let (work, _reaper) = workdir(&cluster);
    // The first attempt waits; the second (after requeue) sees the marker and exits at once.
    let id = cluster.submit_in(
        &work,
        &["sh", "-c", "if [ -e again ]; then echo second; exit 0; fi; echo $$ > first.pid; touch again; sleep 300"],
    );
    cluster.xce_ok(&["dispatch", &id.to_string(), "w1"]);
    let first = pid_in(&work, "first.pid").await;
    cluster
        .wait_job(id, "running", |j| j.state == JobState::Running)
        .await;
    cluster.xce_ok(&["requeue", &id.to_string()]);
    let job = cluster
        .wait_job(id, "pending again", |j| j.state == JobState::Pending)
        .await;
    assert_eq!((job.attempt, job.host.as_deref()), (1, None));
    assert_eq!(
        job.pend_reason.as_deref(),
        Some("requeued by an operator; no scheduler")
    );
    assert!(!alive(first), "the first attempt still runs");
    cluster.xce_ok(&["dispatch", &id.to_string(), "w1"]);
    let job = cluster.wait_job(id, "done", |j| j.state.is_final()).await;
    assert_eq!((job.state, job.attempt), (JobState::Done, 2));
    // Its output file, in its working directory: the second attempt added to the first's.
    assert_eq!(
        std::fs::read_to_string(work.join(format!("xce-{id}.out"))).unwrap(),
        "second\n"
    );
}

/// Every attempt that started, as (id, attempt), by the `attempt N` lines each writes first
/// into its job's `xce-<id>.out` in `dir` (every attempt adds to the file).
fn outputs(dir: &Path) -> Vec<(u64, u32)> {
    let mut found: Vec<(u64, u32)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let id: u64 = name
                .strip_prefix("xce-")?
                .strip_suffix(".out")?
                .parse()
                .ok()?;
            let text = std::fs::read_to_string(e.path()).ok()?;
            Some(
                text.lines()
                    .filter_map(|l| l.strip_prefix("attempt ")?.parse().ok())
                    .map(|attempt| (id, attempt))
                    .collect::<Vec<_>>(),
            )
        })
        .flatten()
        .collect();
    found.sort();
    found
}

#[tokio::test]
async fn twenty_short_jobs_finish_exactly_once_across_a_primary_crash() {
    let mut cluster = Cluster::start_full(3, Some(CONFIG), 2, WORKER_ARGS);
    let (primary, _) = cluster.wait_all_standbys().await;
    cluster.wait_host("w1", HostState::Ok).await;
    cluster.wait_host("w2", HostState::Ok).await;
    let (work, _reaper) = workdir(&cluster);
    let mut ids = Vec::new();
    for i in 0..20 {
        let id = cluster.submit_in(
            &work,
            &[
                "sh",
                "-c",
                "echo attempt $XCE_JOB_ATTEMPT; sleep 0.$((RANDOM % 9 + 1)); echo ran >> runs.$XCE_JOB_ID",
                "job",
            ],
        );
        let host = if i % 2 == 0 { "w1" } else { "w2" };
        cluster.xce_ok(&["dispatch", &id.to_string(), host]);
        ids.push(id);
    }
    cluster.kill9(primary);
    let mut finals = Vec::new();
    for id in &ids {
        let job = cluster.wait_job(*id, "done", |j| j.state.is_final()).await;
        assert_eq!(job.state, JobState::Done, "{job:?}");
        finals.push((*id, job.attempt));
    }
    // Each job's command ran to its end exactly once, by its own record. A start the new
    // primary could not see confirmed is sent again as a new attempt, which fences (and
    // waits out) a copy of the old one that arrived late: then the job ends as attempt 2.
    for id in &ids {
        let runs = std::fs::read_to_string(work.join(format!("runs.{id}"))).unwrap();
        assert_eq!(runs, "ran\n", "job {id}");
    }
    let ran = outputs(&work);
    for last in &finals {
        assert!(ran.contains(last), "no output of {last:?}: {ran:?}");
    }
    for w in &cluster.local.workers {
        let left = std::fs::read_dir(w.data_dir.join("outbox"))
            .unwrap()
            .count();
        assert_eq!(left, 0, "{} still holds reports", w.name);
    }
}

/// The shim of a job's attempt, from the record it keeps in the worker's spool.
fn shim_of(spool: &Path, id: u64, attempt: u32) -> i32 {
    let record = std::fs::read(spool.join(format!("running/{id}.{attempt}"))).unwrap();
    let record: serde_json::Value = serde_json::from_slice(&record).unwrap();
    record["shim"]["pid"].as_i64().unwrap() as i32
}

#[tokio::test]
async fn a_restarted_worker_delivers_what_it_could_not_adopts_what_runs_and_kills_what_it_cannot_vouch_for(
) {
    // Adoption needs the worker back within its jobs' lease: restarting two controllers and
    // the worker can take seconds on a loaded 2-core machine, so this host is lost only after
    // 8 s (its shims stop their jobs some 2 s before that).
    let config = "hosts:\n  heartbeat_ttl_ms: 4000\n  lost_grace_ms: 4000\n";
    let mut cluster = Cluster::start_full(3, Some(config), 1, WORKER_ARGS);
    let (primary, _) = cluster.wait_all_standbys().await;
    cluster.wait_host("w1", HostState::Ok).await;
    let (work, _reaper) = workdir(&cluster);
    let spool = cluster.local.workers[0].data_dir.clone();
    // Three jobs end (exit 7) once `go` exists; one runs on until `stop` exists.
    let mut enders = Vec::new();
    for _ in 0..3 {
        let id = cluster.submit_in(
            &work,
            &["sh", "-c", "while [ ! -e go ]; do sleep 0.05; done; exit 7"],
        );
        cluster.xce_ok(&["dispatch", &id.to_string(), "w1"]);
        enders.push(id);
    }
    // One runs on, with a child that escaped into a session (and process group) of its own.
    let runner = cluster.submit_in(
        &work,
        &[
            "sh",
            "-c",
            "setsid sleep 300 & echo $! > escaper.pid; echo $$ > runner.pid; \
             while [ ! -e stop ]; do sleep 0.05; done; exit 3",
        ],
    );
    cluster.xce_ok(&["dispatch", &runner.to_string(), "w1"]);
    // And one whose shim dies with the worker: nothing is left to vouch for it.
    let orphan = cluster.submit_in(&work, &["sh", "-c", "echo $$ > orphan.pid; exec sleep 300"]);
    cluster.xce_ok(&["dispatch", &orphan.to_string(), "w1"]);
    let runner_pid = pid_in(&work, "runner.pid").await;
    let escaper_pid = pid_in(&work, "escaper.pid").await;
    let orphan_pid = pid_in(&work, "orphan.pid").await;
    for id in enders.iter().chain([&runner, &orphan]) {
        cluster
            .wait_job(*id, "running", |j| j.state == JobState::Running)
            .await;
    }
    // No majority: the ends cannot be reported and pile up in the outbox.
    let standbys: Vec<usize> = (0..3).filter(|i| *i != primary).collect();
    for i in &standbys {
        cluster.kill9(*i);
    }
    std::fs::write(work.join("go"), b"").unwrap();
    wait_for(
        "3 end reports in the outbox",
        Duration::from_secs(30),
        || async {
            let ends = std::fs::read_dir(spool.join("outbox"))
                .ok()?
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".end"))
                .count();
            (ends == 3).then_some(())
        },
    )
    .await;
    let orphan_shim = shim_of(&spool, orphan, 1);
    cluster.local.kill9_worker(0).unwrap();
    kill(Pid::from_raw(orphan_shim), Signal::SIGKILL).unwrap();
    assert!(alive(runner_pid), "the runner died with its worker");
    assert!(alive(escaper_pid), "the escaper died with its worker");
    for i in &standbys {
        cluster.restart(*i);
    }
    cluster.local.start_worker(0).unwrap();
    // The restarted worker killed what no shim vouches for...
    wait_gone(orphan_pid, "the job without a shim to be killed").await;
    // ...reported the ends it had recorded...
    for id in &enders {
        let job = cluster
            .wait_job(*id, "exited", |j| j.state.is_final())
            .await;
        assert_eq!(
            (job.state, job.exit_code, job.attempt),
            (JobState::Exited, Some(7), 1)
        );
    }
    // ...the primary's resync requeued the job it no longer holds...
    let job = cluster
        .wait_job(orphan, "requeued", |j| j.state == JobState::Pending)
        .await;
    assert_eq!(
        job.pend_reason.as_deref(),
        Some("requeued: lost by its worker on w1; no scheduler")
    );
    // ...and the runner, adopted with all it started, ends as attempt 1.
    cluster.wait_host("w1", HostState::Ok).await;
    assert!(
        alive(runner_pid) && alive(escaper_pid),
        "the adopted job was killed"
    );
    let job = cluster.job(runner).await.unwrap();
    assert_eq!((job.state, job.attempt), (JobState::Running, 1), "{job:?}");
    std::fs::write(work.join("stop"), b"").unwrap();
    let job = cluster
        .wait_job(runner, "exited", |j| j.state.is_final())
        .await;
    assert_eq!(
        (job.state, job.exit_code, job.attempt),
        (JobState::Exited, Some(3), 1)
    );
    wait_for("an empty outbox", Duration::from_secs(30), || async {
        (std::fs::read_dir(spool.join("outbox")).ok()?.count() == 0).then_some(())
    })
    .await;
    let log = std::fs::read_to_string(&cluster.local.workers[0].log).unwrap();
    assert!(log.contains("adopted an attempt"), "{log}");
}

/// Lost after 4 s of silence; with a 1 s kill grace and a 1 s margin, a job's shim starts
/// stopping it 2 s after its worker's last acknowledged heartbeat and SIGKILLs it by 3 s.
const FENCING: &str = "hosts:\n  heartbeat_ttl_ms: 1000\n  lost_grace_ms: 3000\n";

/// A job that appends `<attempt> <wall clock ns>` to `ticks` every 10 ms: its own record of
/// when each attempt ran.
const TICKER: &str =
    "echo $$ >> copies.pid; while :; do echo \"$XCE_JOB_ATTEMPT $(date +%s%N)\" >> ticks; sleep 0.01; done";

/// Wall-clock nanoseconds, as the ticker's `date +%s%N` writes them.
fn wall_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// (first, last) tick of each attempt.
fn tick_spans(work: &Path) -> std::collections::BTreeMap<u32, (u128, u128)> {
    let mut spans = std::collections::BTreeMap::new();
    let text = std::fs::read_to_string(work.join("ticks")).unwrap_or_default();
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let (Some(Ok(attempt)), Some(Ok(at))) = (
            parts.next().map(str::parse::<u32>),
            parts.next().map(str::parse::<u128>),
        ) else {
            continue;
        };
        let span = spans.entry(attempt).or_insert((at, at));
        span.0 = span.0.min(at);
        span.1 = span.1.max(at);
    }
    spans
}

/// The job is declared lost on w1 and runs again on w2. By the job's own records its first
/// copy stopped while the cluster still held attempt 1 (its last tick came before a read
/// that saw attempt 1 not yet requeued), it was gone when the requeue was seen, and the two
/// attempts never ran at once.
async fn assert_requeued_only_after_the_first_copy_stopped(
    cluster: &Cluster,
    work: &Path,
    id: u64,
    first: i32,
) {
    // When a read last began that found attempt 1 still held: the requeue came after it.
    let mut held_at = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let job = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "job {id} not requeued within 60 s"
        );
        let asked = wall_ns();
        match cluster.job(id).await {
            Some(job) if job.state == JobState::Pending => break job,
            Some(job) if job.attempt == 1 => held_at = Some(asked),
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        !alive(first),
        "the cluster requeued the job while its first copy still ran"
    );
    assert_eq!(
        job.pend_reason.as_deref(),
        Some("requeued: host w1 lost; no scheduler")
    );
    let held_at = held_at.expect("attempt 1 was never seen held");
    let last_tick = tick_spans(work)[&1].1;
    assert!(
        last_tick < held_at,
        "the first copy ticked {} ms after the cluster last held it: it was not stopped \
         before the requeue",
        (last_tick - held_at) / 1_000_000
    );
    cluster.xce_ok(&["dispatch", &id.to_string(), "w2"]);
    wait_for("attempt 2 to tick", Duration::from_secs(30), || async {
        tick_spans(work).get(&2).map(|_| ())
    })
    .await;
    let spans = tick_spans(work);
    let (one, two) = (spans[&1], spans[&2]);
    assert!(
        one.1 < two.0,
        "attempts overlapped by {} ms",
        (one.1 - two.0) / 1_000_000
    );
}

/// Two workers with fencing on, and a ticker running on w1: the cluster, the job's working
/// dir (reaped when dropped), the job and the pid of its first copy.
async fn ticker_on_w1() -> (Cluster, PathBuf, JobReaper, u64, i32) {
    ticker_on_w1_of(Cluster::start_full(3, Some(FENCING), 2, WORKER_ARGS)).await
}

/// The same, on a cluster of the caller's.
async fn ticker_on_w1_of(cluster: Cluster) -> (Cluster, PathBuf, JobReaper, u64, i32) {
    cluster.wait_primary().await;
    cluster.wait_host("w1", HostState::Ok).await;
    cluster.wait_host("w2", HostState::Ok).await;
    let (work, reaper) = workdir(&cluster);
    let id = cluster.submit_in(&work, &["sh", "-c", TICKER]);
    cluster.xce_ok(&["dispatch", &id.to_string(), "w1"]);
    let first = pid_in(&work, "copies.pid").await;
    cluster
        .wait_job(id, "running", |j| j.state == JobState::Running)
        .await;
    (cluster, work, reaper, id, first)
}

#[tokio::test]
async fn a_killed_worker_s_jobs_are_stopped_by_their_shims_before_the_cluster_declares_them_lost() {
    let (mut cluster, work, _reaper, id, first) = ticker_on_w1().await;
    cluster.local.kill9_worker(0).unwrap();
    assert!(alive(first), "the job died with its worker");
    assert_requeued_only_after_the_first_copy_stopped(&cluster, &work, id, first).await;
    cluster.xce_ok(&["kill", &id.to_string()]);
    cluster.wait_job(id, "killed", |j| j.state.is_final()).await;
}

#[tokio::test]
async fn a_worker_cut_off_from_every_controller_has_its_jobs_stopped_before_they_are_lost() {
    let cluster = Cluster::builder()
        .controllers(3)
        .config(FENCING)
        .workers(2, WORKER_ARGS)
        .daemon_links()
        .start();
    let (cluster, work, _reaper, id, first) = ticker_on_w1_of(cluster).await;
    cluster.isolate_daemon("w1");
    assert!(alive(first), "the job died with its worker's links");
    assert_requeued_only_after_the_first_copy_stopped(&cluster, &work, id, first).await;
    // Back in touch, w1 joins again; the attempt it no longer holds is not started again.
    cluster.heal();
    cluster.wait_host("w1", HostState::Ok).await;
    let job = cluster.job(id).await.unwrap();
    assert_eq!((job.attempt, job.host.as_deref()), (2, Some("w2")));
    assert!(!alive(first));
    cluster.xce_ok(&["kill", &id.to_string()]);
    cluster.wait_job(id, "killed", |j| j.state.is_final()).await;
}

/// With fencing on, a worker killed and restarted at once adopts its running job, and its
/// first heartbeats renew the lease the job's shim reads: the job runs on well past the old
/// deadline and ends as attempt 1.
#[tokio::test]
async fn a_worker_restarted_within_the_lease_adopts_its_job_and_renews_its_lease() {
    let mut cluster = Cluster::start_full(3, Some(FENCING), 1, WORKER_ARGS);
    cluster.wait_primary().await;
    cluster.wait_host("w1", HostState::Ok).await;
    let (work, _reaper) = workdir(&cluster);
    let id = cluster.submit_in(
        &work,
        &[
            "sh",
            "-c",
            "echo $$ > job.pid; while [ ! -e stop ]; do sleep 0.05; done; exit 5",
        ],
    );
    cluster.xce_ok(&["dispatch", &id.to_string(), "w1"]);
    let pid = pid_in(&work, "job.pid").await;
    cluster
        .wait_job(id, "running", |j| j.state == JobState::Running)
        .await;
    let lease = cluster.local.workers[0].data_dir.join("lease");
    let published = || std::fs::read_to_string(&lease).unwrap();
    let before = published();
    cluster.local.kill9_worker(0).unwrap();
    cluster.local.start_worker(0).unwrap();
    // The new run renews the lease for the shim it adopted...
    wait_for(
        "the lease to be renewed",
        Duration::from_secs(30),
        || async { (published() != before).then_some(()) },
    )
    .await;
    // ...and keeps renewing it past the old deadline (2 s after the last acknowledgement).
    let t0 = std::time::Instant::now();
    wait_for(
        "3 s to pass with the job alive",
        Duration::from_secs(30),
        || async {
            assert!(alive(pid), "the adopted job was stopped");
            (t0.elapsed() >= Duration::from_secs(3)).then_some(())
        },
    )
    .await;
    std::fs::write(work.join("stop"), b"").unwrap();
    let job = cluster.wait_job(id, "exited", |j| j.state.is_final()).await;
    assert_eq!(
        (job.state, job.exit_code, job.attempt),
        (JobState::Exited, Some(5), 1)
    );
    let log = std::fs::read_to_string(&cluster.local.workers[0].log).unwrap();
    assert!(log.contains("adopted an attempt"), "{log}");
}

#[tokio::test]
async fn a_frozen_worker_s_jobs_are_stopped_by_their_shims_before_the_cluster_declares_them_lost() {
    let (mut cluster, work, _reaper, id, first) = ticker_on_w1().await;

    cluster.local.pause_worker(0).unwrap();
    assert_requeued_only_after_the_first_copy_stopped(&cluster, &work, id, first).await;

    // w1 thaws: it joins again, holding nothing, and the job stays where it runs.
    cluster.local.resume_worker(0).unwrap();
    cluster.wait_host("w1", HostState::Ok).await;
    let job = cluster.job(id).await.unwrap();
    assert_eq!(
        (job.state, job.attempt, job.host.as_deref()),
        (JobState::Running, 2, Some("w2"))
    );
    cluster.xce_ok(&["kill", &id.to_string()]);
    let job = cluster.wait_job(id, "killed", |j| j.state.is_final()).await;
    assert_eq!((job.reason.as_deref(), job.attempt), (Some("killed"), 2));
}

#[tokio::test]
async fn a_report_the_primary_applied_before_a_worker_restart_is_acknowledged_by_dup_job() {
    let mut cluster = Cluster::start_full(1, Some(CONFIG), 1, WORKER_ARGS);
    cluster.wait_host("w1", HostState::Ok).await;
    let (work, _reaper) = workdir(&cluster);
    let id = cluster.submit_in(&work, &["sleep", "300"]);
    cluster.xce_ok(&["dispatch", &id.to_string(), "w1"]);
    cluster
        .wait_job(id, "running", |j| j.state == JobState::Running)
        .await;
    // A stopping worker kills its job without reporting it...
    let stopped = cluster
        .local
        .stop_worker(0, Duration::from_secs(10))
        .unwrap();
    assert!(stopped.is_some_and(|s| s.success()), "{stopped:?}");
    // ...and here its end report was applied but the acknowledgement never came back: the
    // primary has it, and so does the outbox, with the same token.
    let token = RequestToken(12_345);
    // Only a connection joined as w1 may report for it; this one holds the running attempt.
    let as_w1 = cluster.client_as_worker(
        "w1",
        vec![HeldJob {
            id,
            attempt: 1,
            phase: HeldPhase::Running,
        }],
    );
    let end = JobFinished {
        token,
        host: "w1".into(),
        id,
        attempt: 1,
        end: JobEnd::Exit(5),
        usage: None,
    };
    as_w1.call(end).await.unwrap();
    drop(as_w1);
    let spool = cluster.local.workers[0].data_dir.clone();
    let report = format!(r#"{{"token":12345,"id":{id},"attempt":1,"end":{{"Exit":5}}}}"#);
    std::fs::write(spool.join(format!("outbox/{id}.1.end")), report).unwrap();
    cluster.local.start_worker(0).unwrap();
    wait_for(
        "the re-sent report to be acknowledged",
        Duration::from_secs(30),
        || async { (std::fs::read_dir(spool.join("outbox")).ok()?.count() == 0).then_some(()) },
    )
    .await;
    let job = cluster.job(id).await.unwrap();
    assert_eq!((job.state, job.exit_code), (JobState::Exited, Some(5)));
    cluster.wait_host("w1", HostState::Ok).await;

    // Reports for an unknown job or a stale attempt are refused and change nothing.
    let report = |id, attempt| JobFinished {
        token: RequestToken::random(),
        host: "w1".into(),
        id,
        attempt,
        end: JobEnd::Exit(0),
        usage: None,
    };
    let refused = |r: Result<(), ClientError>, status: Status| match r {
        Err(ClientError::Status { status: s, message }) => {
            assert_eq!(s, status, "{message}");
            message
        }
        other => panic!("accepted: {other:?}"),
    };
    // The job has ended, so a join as w1 that holds nothing loses nothing.
    let as_w1 = cluster.client_as_worker("w1", vec![]);
    let message = refused(as_w1.call(report(999, 1)).await, Status::NoEnt);
    assert!(message.contains("999"), "{message}");
    let message = refused(as_w1.call(report(id, 7)).await, Status::Conflict);
    assert!(message.contains("stale"), "{message}");
    assert_eq!(cluster.job(id).await.unwrap(), job);
}

#[tokio::test]
async fn a_worker_that_loses_every_controller_stops_its_jobs_before_they_are_requeued() {
    // Lost after 1 s + 2.5 s of silence; with a 0.5 s kill grace and a 1 s margin the worker
    // stops its jobs 2 s after the last acknowledged heartbeat.
    let config = "hosts:\n  heartbeat_ttl_ms: 1000\n  lost_grace_ms: 2500\n";
    let args = [
        "--heartbeat-ms",
        "200",
        "--cpus",
        "4",
        "--mem-mb",
        "1024",
        "--kill-grace-ms",
        "500",
    ];
    let mut cluster = Cluster::start_full(3, Some(config), 1, &args);
    cluster.wait_host("w1", HostState::Ok).await;
    let (work, _reaper) = workdir(&cluster);
    let id = cluster.submit_in(
        &work,
        &[
            "sh",
            "-c",
            "setsid sleep 300 & echo $! > escaper.pid; echo $$ > job.pid; exec sleep 300",
        ],
    );
    cluster.xce_ok(&["dispatch", &id.to_string(), "w1"]);
    let pid = pid_in(&work, "job.pid").await;
    let escaper = pid_in(&work, "escaper.pid").await;
    cluster
        .wait_job(id, "running", |j| j.state == JobState::Running)
        .await;
    for i in 0..3 {
        cluster.kill9(i);
    }
    assert!(alive(pid), "the job died with the controllers");
    wait_gone(pid, "the cut-off worker to stop its job").await;
    wait_gone(
        escaper,
        "the cut-off worker to stop what its job started outside its group",
    )
    .await;
    for i in 0..3 {
        cluster.restart(i);
    }
    // Back in touch, the worker no longer holds the job: the primary requeues it.
    let job = cluster
        .wait_job(id, "requeued", |j| j.state == JobState::Pending)
        .await;
    assert_eq!(
        job.pend_reason.as_deref(),
        Some("requeued: lost by its worker on w1; no scheduler")
    );
    let log = std::fs::read_to_string(&cluster.local.workers[0].log).unwrap();
    assert!(
        log.contains("stopping its job before the cluster requeues it"),
        "{log}"
    );
    assert!(
        !log.contains('\u{1b}'),
        "terminal colour codes in a log file"
    );
}

#[tokio::test]
async fn a_job_gets_its_environment_and_working_directory() {
    let cluster = Cluster::start_full(1, Some(CONFIG), 1, WORKER_ARGS);
    cluster.wait_host("w1", HostState::Ok).await;
    let (work, _reaper) = workdir(&cluster);
    let cwd = work.to_string_lossy().into_owned();
    let out = cluster.xce_ok(&[
        "-o",
        "json",
        "submit",
        "--cwd",
        &cwd,
        "--env",
        "MARK=42",
        "-e",
        "EMPTY=",
        "--",
        "sh",
        "-c",
        "echo \"$MARK:$EMPTY:${EMPTY+set}:$(pwd):$XCE_JOB_ID.$XCE_JOB_ATTEMPT:$XCE_JOB_SPOOL\"",
    ]);
    let id = xce_tests::json_of(&out)["id"].as_u64().unwrap();
    cluster.xce_ok(&["dispatch", &id.to_string(), "w1"]);
    let job = cluster.wait_job(id, "done", |j| j.state.is_final()).await;
    assert_eq!(job.state, JobState::Done, "{job:?}");
    let spool = &cluster.local.workers[0].data_dir;
    let printed = std::fs::read_to_string(work.join(format!("xce-{id}.out"))).unwrap();
    // XCE_JOB_SPOOL is its worker's spool, canonical (a contract: jobs find their outputs
    // and the worker finds its jobs' processes by it).
    let canonical = spool.canonicalize().unwrap();
    assert_eq!(
        printed,
        format!("42::set:{cwd}:{id}.1:{}\n", canonical.display())
    );
    // A malformed --env is refused before anything is submitted, naming it.
    let bad = cluster.xce(&["submit", "--env", "NOEQUALS", "--", "true"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("NOEQUALS"));
}

#[tokio::test]
async fn jobs_run_on_through_a_restart_of_every_controller_and_end_once() {
    // Default lost grace (30 s): a short whole-cluster outage must not touch running jobs.
    let config = "hosts:\n  heartbeat_ttl_ms: 1000\n";
    let mut cluster = Cluster::start_full(3, Some(config), 1, WORKER_ARGS);
    cluster.wait_host("w1", HostState::Ok).await;
    let (work, _reaper) = workdir(&cluster);
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = cluster.submit_in(
            &work,
            &[
                "sh",
                "-c",
                "while [ ! -e go ]; do sleep 0.05; done; echo $XCE_JOB_ID >> ran",
            ],
        );
        cluster.xce_ok(&["dispatch", &id.to_string(), "w1"]);
        ids.push(id);
    }
    for id in &ids {
        cluster
            .wait_job(*id, "running", |j| j.state == JobState::Running)
            .await;
    }
    for i in 0..3 {
        cluster.kill9(i);
    }
    for i in 0..3 {
        cluster.restart(i);
    }
    cluster.wait_primary().await;
    // The worker finds the new primary and re-syncs: its jobs are still its own.
    cluster.wait_host("w1", HostState::Ok).await;
    for id in &ids {
        let job = cluster.job(*id).await.unwrap();
        assert_eq!((job.state, job.attempt), (JobState::Running, 1), "{job:?}");
    }
    std::fs::write(work.join("go"), b"").unwrap();
    for id in &ids {
        let job = cluster.wait_job(*id, "done", |j| j.state.is_final()).await;
        assert_eq!((job.state, job.attempt), (JobState::Done, 1), "{job:?}");
    }
    let mut ran: Vec<u64> = std::fs::read_to_string(work.join("ran"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    ran.sort_unstable();
    assert_eq!(ran, ids, "each job ran exactly once");
}

/// A start order pushed to a frozen worker waits in its socket; by the time the worker thaws,
/// the cluster has declared the host lost and run the job elsewhere. The thawed worker must
/// not start that superseded attempt, not even for a moment.
#[tokio::test]
async fn a_thawed_worker_starts_no_attempt_that_was_superseded_while_it_was_frozen() {
    let mut cluster = Cluster::start_full(3, Some(FENCING), 2, WORKER_ARGS);
    cluster.wait_primary().await;
    cluster.wait_host("w1", HostState::Ok).await;
    cluster.wait_host("w2", HostState::Ok).await;
    let (work, _reaper) = workdir(&cluster);
    let id = cluster.submit_in(
        &work,
        &[
            "sh",
            "-c",
            "echo $XCE_JOB_ATTEMPT >> starts; exec sleep 300",
        ],
    );

    cluster.local.pause_worker(0).unwrap();
    // The order reaches w1's socket, not w1.
    cluster.xce_ok(&["dispatch", &id.to_string(), "w1"]);
    let job = cluster
        .wait_job(id, "requeued", |j| j.state == JobState::Pending)
        .await;
    assert_eq!(
        job.pend_reason.as_deref(),
        Some("requeued: host w1 lost; no scheduler")
    );
    cluster.xce_ok(&["dispatch", &id.to_string(), "w2"]);
    cluster
        .wait_job(id, "running on w2", |j| j.state == JobState::Running)
        .await;

    cluster.local.resume_worker(0).unwrap();
    // Back only through a join, which comes after the stale order was read.
    cluster.wait_host("w1", HostState::Ok).await;
    let starts = std::fs::read_to_string(work.join("starts")).unwrap();
    assert_eq!(starts, "2\n", "attempts started: {starts:?}");
    cluster.xce_ok(&["kill", &id.to_string()]);
    cluster.wait_job(id, "killed", |j| j.state.is_final()).await;
}

/// The shim measures what an attempt used at its end (its cgroup's CPU time and peak memory,
/// or its reaped children's), and says so with the end: a job that spins for a while shows
/// its CPU time in the worker's log and, through the end report, in the job.
#[tokio::test]
async fn an_attempt_s_cpu_time_and_memory_are_measured_at_its_end() {
    let cluster = Cluster::start_full(1, Some(CONFIG), 1, WORKER_ARGS);
    cluster.wait_host("w1", HostState::Ok).await;
    let spin = "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done";
    let out = cluster.xce_ok(&["-o", "json", "submit", "--", "sh", "-c", spin]);
    let id = xce_tests::submitted_id(&out);
    cluster.xce_ok(&["dispatch", &id.to_string(), "w1"]);
    let job = cluster.wait_job(id, "ended", |j| j.state.is_final()).await;
    assert_eq!(job.state, JobState::Done, "{job:?}");
    let log = &cluster.local.workers[0].log;
    let line = wait_for(
        "the end's usage in the log",
        Duration::from_secs(10),
        || async {
            let text = std::fs::read_to_string(log).ok()?;
            text.lines()
                .find(|l| l.contains("job ended") && l.contains("cpu_user_ms="))
                .map(str::to_string)
        },
    )
    .await;
    let figure = |name: &str| -> u64 {
        let at = line.find(&format!("{name}=")).unwrap() + name.len() + 1;
        line[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(figure("cpu_user_ms") + figure("cpu_sys_ms") >= 50, "{line}");
    assert!(figure("max_rss_kb") > 0, "{line}");
    // The end report carries it to the job (JSON `cpu_time_s`, `max_rss_mb`, `elapsed_s`).
    let shown = xce_tests::json_of(&cluster.xce_ok(&["-o", "json", "job", &id.to_string()]));
    let cpu = shown["cpu_time_s"].as_f64().unwrap();
    let logged = (figure("cpu_user_ms") + figure("cpu_sys_ms")) as f64 / 1000.0;
    assert!((cpu - logged).abs() < 0.0015, "{shown} against {line}");
    assert!(shown["max_rss_mb"].as_f64().unwrap() > 0.0, "{shown}");
    assert!(shown["elapsed_s"].is_u64(), "{shown}");
}
