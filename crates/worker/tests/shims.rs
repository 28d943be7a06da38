//! The worker's job table with real shims (forked by this crate's `xce-worker shim-launcher`)
//! and no cluster: starting, deduplication, fencing, orders, the lease, and adoption by a new
//! job table.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use xce_client::types::{HeldJob, HeldPhase, Job, JobEnd, JobId, JobOrder, JobSignal, JobSpec};
use xce_client::Client;
use xce_worker::cgroup::Cgroups;
use xce_worker::fence::{self, Lease, LeaseFile};
use xce_worker::jobs::{JobSettings, Jobs};
use xce_worker::outbox::Report;
use xce_worker::procs::{self, Records};

const KILL_GRACE: Duration = Duration::from_millis(200);

/// A job table whose reports go nowhere (no controller listens), with a lease that has not
/// been published: enough to exercise the shims without a cluster.
fn table(spool: &Path) -> (Arc<Jobs>, Arc<Lease>, watch::Sender<bool>) {
    table_with(spool, None)
}

/// The same, running jobs in `cgroups`.
fn table_with(
    spool: &Path,
    cgroups: Option<Cgroups>,
) -> (Arc<Jobs>, Arc<Lease>, watch::Sender<bool>) {
    table_for(spool, cgroups, xce_client::types::JobUsers::Any)
}

/// The same, running jobs for `job_users`.
fn table_for(
    spool: &Path,
    cgroups: Option<Cgroups>,
    job_users: xce_client::types::JobUsers,
) -> (Arc<Jobs>, Arc<Lease>, watch::Sender<bool>) {
    table_on(
        spool,
        cgroups,
        job_users,
        PathBuf::from(env!("CARGO_BIN_EXE_xce-worker")),
    )
}

/// The same, with shims forked by a launcher that `shim_exe` starts.
fn table_on(
    spool: &Path,
    cgroups: Option<Cgroups>,
    job_users: xce_client::types::JobUsers,
    shim_exe: PathBuf,
) -> (Arc<Jobs>, Arc<Lease>, watch::Sender<bool>) {
    // The worker account's home, where a job that names no directory runs: here the spool
    // itself, where these tests look for what their jobs write.
    table_at(spool, spool, cgroups, job_users, shim_exe)
}

/// The same, with the worker account's home at `own_home`.
fn table_at(
    spool: &Path,
    own_home: &Path,
    cgroups: Option<Cgroups>,
    job_users: xce_client::types::JobUsers,
    shim_exe: PathBuf,
) -> (Arc<Jobs>, Arc<Lease>, watch::Sender<bool>) {
    table_sized(spool, own_home, cgroups, job_users, shim_exe, BIG_HOST)
}

/// A host with room for every job these tests start at once.
const BIG_HOST: xce_client::types::Resources = xce_client::types::Resources {
    cpus: 1024,
    mem_mb: 1 << 40,
    gres: std::collections::BTreeMap::new(),
};

/// The same, on a host offering `capacity`.
fn table_sized(
    spool: &Path,
    own_home: &Path,
    cgroups: Option<Cgroups>,
    job_users: xce_client::types::JobUsers,
    shim_exe: PathBuf,
    capacity: xce_client::types::Resources,
) -> (Arc<Jobs>, Arc<Lease>, watch::Sender<bool>) {
    let own_home = own_home.to_path_buf();
    let peers = xce_client::parse_candidates("c1=127.0.0.1:1").unwrap();
    let client = Client::new(peers, xce_client::ClientConfig::default());
    let (stop_tx, stop) = watch::channel(false);
    let lease = Lease::new(
        KILL_GRACE,
        Duration::from_millis(200),
        fence::now(),
        Some(LeaseFile::new(spool)),
    );
    let settings = JobSettings {
        kill_grace: KILL_GRACE,
        shim_exe,
        cgroups,
        job_users,
        own_home,
        log: None,
        capacity,
    };
    let jobs = Jobs::new(
        client,
        "w1".into(),
        spool.to_path_buf(),
        settings,
        lease.clone(),
        stop,
    )
    .unwrap();
    (jobs, lease, stop_tx)
}

fn job(id: JobId, command: &[&str]) -> Job {
    Job {
        id,
        spec: JobSpec {
            command: command.iter().map(|s| s.to_string()).collect(),
            ..JobSpec::default()
        },
        state: xce_client::types::JobState::Dispatched,
        pend_reason: None,
        pend_code: None,
        reason: None,
        result: None,
        host: Some("w1".into()),
        attempt: 0,
        runs: 0,
        exit_code: None,
        signal: None,
        submit_time_ms: 0,
        start_time_ms: None,
        end_time_ms: None,
        output_dir: None,
        cancelled_by: None,
        dependency_state: None,
        array: None,
        array_task: None,
        expected_start_ms: None,
        usage: None,
        attempts: Vec::new(),
    }
}

fn sleeper(id: JobId) -> Job {
    job(id, &["sleep", "30"])
}

async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn started(jobs: &Jobs, id: JobId) -> i32 {
    let mut pgid = None;
    wait_until("the job to start", || {
        pgid = jobs.pgid(id);
        pgid.is_some()
    })
    .await;
    pgid.unwrap()
}

fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

fn end_report(spool: &Path, id: JobId, attempt: u32) -> Option<JobEnd> {
    let bytes = std::fs::read(spool.join(format!("outbox/{id}.{attempt}.end"))).ok()?;
    Report::decode(&bytes).unwrap().end
}

/// Waits until the attempt's end report is on disk and returns how it ended.
async fn wait_end(spool: &Path, id: JobId, attempt: u32) -> JobEnd {
    let mut end = None;
    wait_until("the end report on disk", || {
        end = end_report(spool, id, attempt);
        end.is_some()
    })
    .await;
    end.unwrap()
}

fn order(id: JobId, attempt: u32, signal: JobSignal) -> JobOrder {
    JobOrder {
        id,
        attempt,
        signal,
    }
}

/// The primary's view of job `id` after a join: its `attempt`, dispatched to w1.
fn dispatched(id: JobId, attempt: u32) -> Job {
    Job {
        attempt,
        ..job(id, &["true"])
    }
}

/// A start that comes while a join is unanswered is held (the next join lists it) but runs
/// only once the primary, asked after the answer, still wants that attempt here: a start the
/// resync superseded (it crossed the join on the wire and was sent again as a newer attempt)
/// never runs, a newer attempt replaces a waiting one, and a kill ends one that never ran.
#[tokio::test]
async fn a_start_that_crosses_a_join_runs_only_if_still_due_after_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (jobs, _lease, stop) = table(dir.path());
    let touch = |id: JobId| job(id, &["touch", &format!("ran{id}")]);
    assert!(jobs.join_begins().is_empty());
    for id in [20, 21, 22, 23] {
        jobs.start(touch(id), 1);
    }
    jobs.start(touch(22), 2);
    let held: Vec<(JobId, u32)> = jobs.held().iter().map(|h| (h.id, h.attempt)).collect();
    assert_eq!(held, vec![(20, 1), (21, 1), (22, 2), (23, 1)]);
    assert!(
        jobs.pgid(20).is_none(),
        "a start ran before the join's answer"
    );

    // A kill for one that waits: it never runs, and its end says so.
    assert!(jobs.signal(order(23, 1, JobSignal::Kill)));
    assert_eq!(
        wait_end(dir.path(), 23, 1).await,
        JobEnd::Failed("killed before it started".into())
    );

    // The answer: no primary answers here, so the checks settle nothing by themselves.
    jobs.join_answered(0);
    jobs.settle_parked(21, 1, Some(&dispatched(21, 2)));
    jobs.settle_parked(22, 1, Some(&dispatched(22, 1)));
    jobs.settle_parked(20, 1, Some(&dispatched(20, 1)));
    jobs.settle_parked(22, 2, Some(&dispatched(22, 2)));
    wait_until("the due starts to run", || {
        dir.path().join("ran20").exists() && dir.path().join("ran22").exists()
    })
    .await;
    assert!(
        jobs.held().iter().all(|h| h.id != 21),
        "a superseded start is still held"
    );
    // Each ran once, as the attempt the primary wanted; the others never ran.
    assert_eq!(wait_end(dir.path(), 22, 2).await, JobEnd::Exit(0));
    assert_eq!(wait_end(dir.path(), 20, 1).await, JobEnd::Exit(0));
    assert_eq!(end_report(dir.path(), 22, 1), None);
    assert_eq!(end_report(dir.path(), 21, 1), None);
    assert!(!dir.path().join("ran21").exists());
    assert!(!dir.path().join("ran23").exists());

    // With the window closed, a start runs at once.
    jobs.start(touch(24), 1);
    wait_until("a start after the answer to run", || {
        dir.path().join("ran24").exists()
    })
    .await;
    stop.send_replace(true);
}

/// The primary may send more than the host runs at once (dispatch ahead): the worker admits by
/// its own resources, in the order the starts came, and starts the next the moment one ends;
/// a start that waits for room is held (its join lists it), keeps a suspend for when it
/// starts, and a kill ends it as never run.
#[tokio::test]
async fn starts_beyond_the_host_wait_for_room_and_run_as_jobs_end() {
    let dir = tempfile::tempdir().unwrap();
    let shim_exe = PathBuf::from(env!("CARGO_BIN_EXE_xce-worker"));
    let capacity = xce_client::types::Resources::new(2, 0);
    let (jobs, _lease, stop) = table_sized(
        dir.path(),
        dir.path(),
        None,
        xce_client::types::JobUsers::Any,
        shim_exe,
        capacity,
    );
    let one_cpu = |job: Job| with_limits(job, 1, 0);
    for id in [1, 2, 3, 4] {
        jobs.start(one_cpu(sleeper(id)), 1);
    }
    started(&jobs, 1).await;
    started(&jobs, 2).await;
    assert_eq!(jobs.pgid(3), None, "a third job started on two cpus");
    let held: Vec<JobId> = jobs.held().iter().map(|h| h.id).collect();
    assert_eq!(held, vec![1, 2, 3, 4], "waiting starts are held");
    // A kill ends a waiting start as one that never ran.
    assert!(jobs.signal(order(4, 1, JobSignal::Kill)));
    assert_eq!(
        wait_end(dir.path(), 4, 1).await,
        JobEnd::Failed(xce_worker::shim::KILLED_BEFORE_START.into())
    );
    // A suspend holds until the job starts.
    assert!(jobs.signal(order(3, 1, JobSignal::Suspend)));
    jobs.start(one_cpu(job(5, &["touch", "ran5"])), 1);
    assert!(jobs.signal(order(1, 1, JobSignal::Kill)));
    let pgid = started(&jobs, 3).await;
    wait_until("the job that waited to start stopped", || {
        proc_state(pgid) == Some('T')
    })
    .await;
    assert!(
        !dir.path().join("ran5").exists(),
        "a start overtook the one before it"
    );
    assert!(jobs.signal(order(2, 1, JobSignal::Kill)));
    wait_until("the last start to run", || dir.path().join("ran5").exists()).await;
    assert!(jobs.signal(order(3, 1, JobSignal::Kill)));
    for id in [1, 2, 3] {
        assert!(matches!(
            wait_end(dir.path(), id, 1).await,
            JobEnd::Signal(_)
        ));
    }
    assert_eq!(wait_end(dir.path(), 5, 1).await, JobEnd::Exit(0));
    stop.send_replace(true);
}

/// A worker that stops runs nothing new: a start that waited for room is dropped, unreported
/// (the primary sends it again after a rejoin), when the job before it ends.
#[tokio::test]
async fn a_stopping_worker_does_not_run_what_waited_for_room() {
    let dir = tempfile::tempdir().unwrap();
    let shim_exe = PathBuf::from(env!("CARGO_BIN_EXE_xce-worker"));
    let (jobs, _lease, stop) = table_sized(
        dir.path(),
        dir.path(),
        None,
        xce_client::types::JobUsers::Any,
        shim_exe,
        xce_client::types::Resources::new(1, 0),
    );
    let one_cpu = |job: Job| with_limits(job, 1, 0);
    jobs.start(one_cpu(sleeper(1)), 1);
    started(&jobs, 1).await;
    jobs.start(one_cpu(job(2, &["touch", "ran2"])), 1);
    assert!(jobs.held().iter().any(|h| h.id == 2));
    stop.send_replace(true);
    assert!(jobs.signal(order(1, 1, JobSignal::Kill)));
    wait_until("the start that waited to be dropped", || {
        jobs.held().iter().all(|h| h.id != 2)
    })
    .await;
    assert!(
        !dir.path().join("ran2").exists(),
        "a stopping worker ran it"
    );
    assert_eq!(end_report(dir.path(), 2, 1), None);
}

/// A start for an attempt this worker already let go of, or for an older one, is most likely
/// a late copy of an order (a deposed primary's push that arrives after the resync sent the
/// job again, or after the attempt's end was acknowledged): it waits until the primary says
/// it is still due here, and runs only then (a cluster restored from a backup gives out ids
/// and attempts again). A newer attempt runs at once. Before, the job table had forgotten the
/// attempt and ran it a second time.
#[tokio::test]
async fn a_late_start_for_an_attempt_already_let_go_of_waits_for_the_primary_s_word() {
    let dir = tempfile::tempdir().unwrap();
    let (jobs, _lease, stop) = table(dir.path());
    let append = |id: JobId, file: &str| {
        let path = dir.path().join(file);
        job(
            id,
            &["sh", "-c", &format!("echo ran >> {}", path.display())],
        )
    };
    let runs = |file: &str| {
        std::fs::read_to_string(dir.path().join(file))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };

    // Superseded by the resync while it waited for the join: let go of, never run.
    jobs.join_begins();
    jobs.start(append(41, "ran41"), 1);
    jobs.join_answered(0);
    jobs.settle_parked(41, 1, Some(&dispatched(41, 2)));
    assert!(!jobs.waits(41, 1));
    // The late copy waits; the primary (here: the test) says attempt 2 is current.
    jobs.start(append(41, "ran41"), 1);
    assert!(
        jobs.waits(41, 1),
        "a late start of a superseded attempt was run"
    );
    jobs.settle_parked(41, 1, Some(&dispatched(41, 2)));
    assert!(jobs.held().iter().all(|h| h.id != 41));
    // Again, and this time the primary wants attempt 1 here (a restored cluster): it runs.
    jobs.start(append(41, "ran41"), 1);
    jobs.settle_parked(41, 1, Some(&dispatched(41, 1)));
    assert_eq!(wait_end(dir.path(), 41, 1).await, JobEnd::Exit(0));

    // Ran and ended, and its report settled (here the worker stops, as no primary answers):
    // a late copy waits instead of running.
    jobs.start(append(42, "ran42"), 1);
    assert_eq!(wait_end(dir.path(), 42, 1).await, JobEnd::Exit(0));
    stop.send_replace(true);
    wait_until("the ended attempt to be let go of", || {
        jobs.held().iter().all(|h| h.id != 42)
    })
    .await;
    jobs.start(append(42, "ran42"), 1);
    assert!(
        jobs.waits(42, 1),
        "a late start of an ended attempt was run"
    );

    // A newer attempt is no late copy.
    jobs.start(append(42, "ran42-2"), 2);
    assert!(!jobs.waits(42, 2), "a newer attempt waits");
    assert_eq!(wait_end(dir.path(), 42, 2).await, JobEnd::Exit(0));
    assert_eq!((runs("ran41"), runs("ran42"), runs("ran42-2")), (1, 1, 1));
}

/// A start that comes through the agent capability of an older join than the last answered
/// one came over a connection this worker has left (a deposed primary's late push, sent
/// before its lease ran out): it waits for the primary's word even for an attempt never seen
/// here. Through the capability of the last answered join a start runs at once.
#[tokio::test]
async fn a_start_over_a_connection_the_worker_left_waits_for_the_primary_s_word() {
    let dir = tempfile::tempdir().unwrap();
    let (jobs, _lease, stop) = table(dir.path());
    let touch = |id: JobId| job(id, &["touch", &format!("ran{id}")]);
    let ran = |id: JobId| dir.path().join(format!("ran{id}")).exists();
    jobs.join_begins();
    jobs.join_answered(2);
    jobs.start_from(touch(51), 1, 1, None);
    assert!(
        jobs.waits(51, 1),
        "a start over a left connection ran at once"
    );
    jobs.start_from(touch(52), 1, 2, None);
    assert!(
        !jobs.waits(52, 1),
        "a start over the current connection waits"
    );
    // The primary's word: the resync sent 51 again as attempt 2, so attempt 1 never runs.
    jobs.settle_parked(51, 1, Some(&dispatched(51, 2)));
    assert!(jobs.held().iter().all(|h| h.id != 51));

    // After the next join, the capability of the one before is a left one too; a start
    // through it that the primary still wants here runs once it says so.
    jobs.join_begins();
    jobs.join_answered(3);
    jobs.start_from(touch(53), 1, 2, None);
    assert!(jobs.waits(53, 1));
    jobs.settle_parked(53, 1, Some(&dispatched(53, 1)));
    wait_until("the due starts to run", || ran(52) && ran(53)).await;
    assert!(!ran(51));
    stop.send_replace(true);
}

/// A launch that fails hands its spare back: the next attempt's record is that file, not a
/// new one (before, the spare sat unused on disk until the worker restarted).
#[tokio::test]
async fn a_spare_a_failed_launch_took_is_the_next_attempt_s_record() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let spare_dir = dir.path().join("spare");
    std::fs::create_dir_all(&spare_dir).unwrap();
    let spare = spare_dir.join("9.1.end");
    std::fs::write(&spare, b"an acknowledged report\n").unwrap();
    let inode = std::fs::metadata(&spare).unwrap().ino();
    // The launcher's program is not there yet: every launch fails.
    let bin = tempfile::tempdir().unwrap();
    let exe = bin.path().join("xce-worker");
    let (jobs, _lease, stop) = table_on(
        dir.path(),
        None,
        xce_client::types::JobUsers::Any,
        exe.clone(),
    );
    jobs.start(sleeper(1), 1);
    match wait_end(dir.path(), 1, 1).await {
        JobEnd::Failed(why) => assert!(why.contains("cannot start the job's supervisor"), "{why}"),
        other => panic!("a launch without its program ended {other:?}"),
    }

    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_xce-worker"), &exe).unwrap();
    jobs.start(sleeper(2), 1);
    started(&jobs, 2).await;
    let record = dir.path().join("running").join("2.1");
    assert_eq!(
        std::fs::metadata(&record).unwrap().ino(),
        inode,
        "the record is a new file: the failed launch's spare was lost"
    );
    stop.send_replace(true);
}

#[tokio::test]
async fn starts_once_per_attempt_fences_older_copies_and_signals_only_what_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (jobs, _lease, stop) = table(dir.path());
    jobs.start(sleeper(1), 2);
    let first = started(&jobs, 1).await;
    // The same attempt sent again (after a failover) and an older one are ignored.
    jobs.start(sleeper(1), 2);
    jobs.start(sleeper(1), 1);
    assert_eq!(jobs.pgid(1), Some(first));
    assert_eq!(
        jobs.held(),
        vec![HeldJob {
            id: 1,
            attempt: 2,
            phase: HeldPhase::Running
        }]
    );
    let records = Records::open(dir.path()).unwrap().scan().unwrap();
    assert_eq!(records.len(), 1);
    let record = records[0].1.unwrap();
    assert_eq!((records[0].0, record.job.pid), ((1, 2), first));
    assert!(record.shim.unwrap().alive(), "no live shim recorded");

    assert!(
        !jobs.signal(order(1, 1, JobSignal::Kill)),
        "a stale attempt is not held"
    );
    assert!(!jobs.signal(order(9, 1, JobSignal::Kill)));
    assert!(jobs.signal(order(1, 2, JobSignal::Suspend)));
    assert_eq!(jobs.held()[0].phase, HeldPhase::Suspended);
    wait_until("the group to stop", || proc_state(first) == Some('T')).await;
    assert!(jobs.signal(order(1, 2, JobSignal::Resume)));
    assert_eq!(jobs.held()[0].phase, HeldPhase::Running);

    // A newer attempt fences the old copy, unreported.
    jobs.start(sleeper(1), 3);
    wait_until("the old copy to die", || {
        procs::start_ticks(first).is_none()
    })
    .await;
    let second = started(&jobs, 1).await;
    assert_ne!(second, first);
    assert_eq!(end_report(dir.path(), 1, 2), None);

    // Kill ends it; its end waits in the outbox (no controller), durable.
    assert!(jobs.signal(order(1, 3, JobSignal::Kill)));
    assert_eq!(wait_end(dir.path(), 1, 3).await, JobEnd::Signal(15));
    wait_until("the attempt to finish", || {
        jobs.held()
            .iter()
            .any(|h| h.attempt == 3 && h.phase == HeldPhase::Finished)
    })
    .await;
    assert!(!dir.path().join("running/1.3").exists());
    stop.send_replace(true);
}

#[tokio::test]
async fn a_command_that_cannot_start_is_reported_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (jobs, _lease, stop) = table(dir.path());
    jobs.start(job(4, &["/no/such/program"]), 1);
    assert_eq!(
        wait_end(dir.path(), 4, 1).await,
        JobEnd::Failed("command not found: /no/such/program".into())
    );
    wait_until("the attempt to be held as finished", || {
        jobs.held()
            == vec![HeldJob {
                id: 4,
                attempt: 1,
                phase: HeldPhase::Finished,
            }]
    })
    .await;
    stop.send_replace(true);
}

fn script_job(id: JobId, cwd: &Path, body: &[u8], args: &[&str]) -> Job {
    let mut j = job(id, args);
    j.spec.cwd = cwd.to_string_lossy().into_owned();
    j.spec.script = Some(xce_client::script::ScriptId::of(body));
    j
}

/// A job script runs from a private copy with its interpreter line (or `/bin/sh` without
/// one), in its working directory, with its arguments; its output goes to `xce-<id>.out`
/// there, stderr with it, and a later attempt appends to it. The copy goes with the job.
#[tokio::test]
async fn a_script_runs_from_its_copy_and_writes_its_output_where_its_user_looks() {
    let dir = tempfile::tempdir().unwrap();
    let (spool, work) = (dir.path().join("spool"), dir.path().join("work"));
    std::fs::create_dir(&spool).unwrap();
    std::fs::create_dir(&work).unwrap();
    let (jobs, _lease, stop) = table(&spool);
    let body = b"#!/bin/sh\necho \"out $1 $(basename \"$(pwd)\")\"\necho err >&2\n\
                 stat -c %a \"$0\"\n";
    let first = script_job(61, &work, body, &["a b"]);
    jobs.start_script(first.clone(), 1, body.to_vec());
    assert_eq!(wait_end(&spool, 61, 1).await, JobEnd::Exit(0));
    let out = work.join("xce-61.out");
    let once = "out a b work\nerr\n500\n";
    assert_eq!(std::fs::read_to_string(&out).unwrap(), once);
    // Removed by the shim as it exits, just after the end report.
    let copy = spool.join("scripts/61.1");
    wait_until("the copy to go with its job", || !copy.exists()).await;
    jobs.start_script(first, 2, body.to_vec());
    assert_eq!(wait_end(&spool, 61, 2).await, JobEnd::Exit(0));
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        once.repeat(2),
        "a requeued job appends"
    );

    // No interpreter line: /bin/sh. Output patterns, stderr apart, truncated when asked.
    let plain = b"echo plain \"$@\"\necho oops >&2\nexit 3\n";
    let mut second = script_job(62, &work, plain, &["x"]);
    second.spec.stdout = Some("%x.%j.o".into());
    second.spec.stderr = Some("logs/%j.e".into());
    second.spec.name = "two".into();
    second.spec.open_mode = Some(xce_client::types::OpenMode::Truncate);
    std::fs::create_dir(work.join("logs")).unwrap();
    for attempt in [1, 2] {
        jobs.start_script(second.clone(), attempt, plain.to_vec());
        assert_eq!(wait_end(&spool, 62, attempt).await, JobEnd::Exit(3));
    }
    assert_eq!(
        std::fs::read_to_string(work.join("two.62.o")).unwrap(),
        "plain x\n"
    );
    assert_eq!(
        std::fs::read_to_string(work.join("logs/62.e")).unwrap(),
        "oops\n"
    );

    // What cannot start ends failed, naming why.
    let missing = b"#!/no/such/shell\necho\n";
    jobs.start_script(script_job(63, &work, missing, &[]), 1, missing.to_vec());
    assert_eq!(
        wait_end(&spool, 63, 1).await,
        JobEnd::Failed("command not found: /no/such/shell".into())
    );
    jobs.start_script(script_job(64, &work, body, &[]), 1, missing.to_vec());
    match wait_end(&spool, 64, 1).await {
        JobEnd::Failed(why) => assert!(why.contains("are not those of"), "{why}"),
        other => panic!("ran a script of other bytes: {other:?}"),
    }
    jobs.start(script_job(65, &work, body, &[]), 1);
    match wait_end(&spool, 65, 1).await {
        JobEnd::Failed(why) => assert!(why.contains("did not come with its start"), "{why}"),
        other => panic!("ran without its script: {other:?}"),
    }
    let mut nowhere = script_job(66, &dir.path().join("gone"), body, &[]);
    nowhere.spec.stdout = Some("/dev/null".into());
    jobs.start_script(nowhere, 1, body.to_vec());
    match wait_end(&spool, 66, 1).await {
        JobEnd::Failed(why) => assert!(why.contains("working directory"), "{why}"),
        other => panic!("ran without its directory: {other:?}"),
    }
    let scripts = spool.join("scripts");
    wait_until("every script copy to go", || {
        std::fs::read_dir(&scripts).unwrap().next().is_none()
    })
    .await;
    stop.send_replace(true);
}

/// A job run as the worker's own account that names no working directory runs in that
/// account's home, its `HOME`, and writes its default output there, never in the spool.
#[tokio::test]
async fn a_job_that_names_no_directory_runs_in_its_account_s_home() {
    let dir = tempfile::tempdir().unwrap();
    let (spool, home) = (dir.path().join("spool"), dir.path().join("home"));
    std::fs::create_dir(&spool).unwrap();
    std::fs::create_dir(&home).unwrap();
    let home = std::fs::canonicalize(home).unwrap();
    let (jobs, _lease, stop) = table_at(
        &spool,
        &home,
        None,
        xce_client::types::JobUsers::Any,
        PathBuf::from(env!("CARGO_BIN_EXE_xce-worker")),
    );
    let body = b"#!/bin/sh\necho \"$(pwd) $HOME\"\n";
    let mut homeless = script_job(67, Path::new(""), body, &[]);
    homeless.spec.cwd = String::new();
    jobs.start_script(homeless, 1, body.to_vec());
    assert_eq!(wait_end(&spool, 67, 1).await, JobEnd::Exit(0));
    let out = std::fs::read_to_string(home.join("xce-67.out")).unwrap();
    assert_eq!(out, format!("{0} {0}\n", home.display()));
    assert!(!spool.join("xce-67.out").exists());
    stop.send_replace(true);
}

/// `--signal USR1@1` with a 2 s limit: USR1 once, about a second before the TERM of the
/// limit; and a limit changed while the job runs is kept from then on (here raised past
/// the job's own end, which it then reaches).
#[tokio::test]
async fn the_warning_signal_comes_once_before_the_limit_and_a_new_limit_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (jobs, _lease, stop) = table(dir.path());
    let record = dir.path().join("signals");
    let script = format!(
        "trap 'echo usr1 $(date +%s%N) >> {0}' USR1; \
         trap 'echo term $(date +%s%N) >> {0}; exit 0' TERM; \
         while :; do sleep 0.05; done",
        record.display()
    );
    let mut warned = job(71, &["sh", "-c", &script]);
    warned.spec.limits.time_limit_s = Some(2);
    warned.spec.warn_signal = Some(xce_client::signals::parse_warning("USR1@1").unwrap());
    jobs.start(warned, 1);
    match wait_end(dir.path(), 71, 1).await {
        JobEnd::TimedOut { .. } => {}
        other => panic!("not stopped at its limit: {other:?}"),
    }
    let text = std::fs::read_to_string(&record).unwrap();
    let times: Vec<(&str, u64)> = text
        .lines()
        .map(|l| {
            let (what, ns) = l.split_once(' ').unwrap();
            (what, ns.parse().unwrap())
        })
        .collect();
    let names: Vec<&str> = times.iter().map(|(w, _)| *w).collect();
    assert_eq!(names, ["usr1", "term"], "{text}");
    let ahead = Duration::from_nanos(times[1].1 - times[0].1);
    assert!(
        ahead > Duration::from_millis(600) && ahead < Duration::from_millis(1600),
        "USR1 came {ahead:?} before the TERM"
    );

    let mut raised = job(72, &["sleep", "2"]);
    raised.spec.limits.time_limit_s = Some(1);
    jobs.start(raised, 1);
    started(&jobs, 72).await;
    assert!(jobs.set_time_limit(72, 1, Some(30)));
    assert_eq!(wait_end(dir.path(), 72, 1).await, JobEnd::Exit(0));
    // Once the worker has seen the end (after the report on disk), a limit has nothing to
    // reach, and the shim has removed its limit file.
    wait_until("the worker to see the end", || {
        !jobs
            .held()
            .iter()
            .any(|h| h.id == 72 && h.phase != HeldPhase::Finished)
    })
    .await;
    assert!(!jobs.set_time_limit(72, 1, Some(30)), "the job has ended");
    let file = xce_worker::shim::limit_file(dir.path(), 72, 1);
    wait_until("the shim to remove its limit file", || !file.exists()).await;
    stop.send_replace(true);
}

/// `xce signal`: any signal, to the job's whole group or its leading process alone.
#[tokio::test]
async fn a_signal_reaches_the_whole_job_or_its_leader_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (jobs, _lease, stop) = table(dir.path());
    let record = dir.path().join("got");
    let script = format!(
        "trap 'echo leader-hup >> {0}' HUP; \
         sh -c \"trap 'echo child-hup >> {0}' HUP; while :; do sleep 0.05; done\" & \
         trap 'echo leader-usr2 >> {0}; kill $!; exit 0' USR2; \
         while :; do sleep 0.05; done",
        record.display()
    );
    jobs.start(job(73, &["sh", "-c", &script]), 1);
    started(&jobs, 73).await;
    // The traps are set once the shell has run a little; the record file shows it.
    std::thread::sleep(Duration::from_millis(300));
    assert!(jobs.send_signal(73, 1, libc_hup(), true));
    wait_until("the leader to record its HUP", || {
        std::fs::read_to_string(&record).is_ok_and(|t| t.contains("leader-hup"))
    })
    .await;
    assert!(jobs.send_signal(73, 1, libc_hup(), false));
    wait_until("the child to record its HUP", || {
        std::fs::read_to_string(&record).is_ok_and(|t| t.contains("child-hup"))
    })
    .await;
    assert!(jobs.send_signal(73, 1, 12, true));
    assert_eq!(wait_end(dir.path(), 73, 1).await, JobEnd::Exit(0));
    let text = std::fs::read_to_string(&record).unwrap();
    assert_eq!(text.matches("child-hup").count(), 1, "{text}");
    wait_until("the worker to see the end", || {
        !jobs
            .held()
            .iter()
            .any(|h| h.id == 73 && h.phase != HeldPhase::Finished)
    })
    .await;
    assert!(!jobs.send_signal(73, 1, 1, false), "the job has ended");
    assert!(!jobs.send_signal(74, 1, 1, false), "never held");
    stop.send_replace(true);
}

fn libc_hup() -> i32 {
    nix::sys::signal::Signal::SIGHUP as i32
}

#[tokio::test]
async fn a_kill_that_is_ignored_ends_in_sigkill_after_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let (jobs, _lease, stop) = table(dir.path());
    jobs.start(
        job(
            2,
            &[
                "sh",
                "-c",
                "trap '' TERM; echo ready > ready; sleep 30 & wait",
            ],
        ),
        1,
    );
    started(&jobs, 2).await;
    let ready = dir.path().join("ready");
    wait_until("the trap to be set", || ready.exists()).await;
    assert!(jobs.signal(order(2, 1, JobSignal::Kill)));
    assert_eq!(wait_end(dir.path(), 2, 1).await, JobEnd::Signal(9));
    stop.send_replace(true);
}

/// The lease runs out while the worker is alive but unacknowledged: the shim stops the job
/// itself and records no end, and the worker asks the primary for a resync.
#[tokio::test]
async fn the_shim_stops_its_job_unreported_once_the_published_lease_runs_out() {
    let dir = tempfile::tempdir().unwrap();
    let (jobs, lease, stop) = table(dir.path());
    // Lost after 2.5 s: fence 2.5 - 0.2 (grace) - 1 (margin) = 1.3 s after the last ack.
    lease.set_lost_after(Duration::from_millis(2500));
    let file = LeaseFile::new(dir.path());
    let ms = |d: Option<Duration>| d.map(|d| d.as_millis());
    assert_eq!(file.read().map(ms), Some(ms(lease.deadline())));
    jobs.start(sleeper(3), 1);
    let pgid = started(&jobs, 3).await;
    wait_until("the shim to fence its job", || {
        procs::start_ticks(pgid).is_none()
    })
    .await;
    assert!(
        fence::now() >= lease.deadline().unwrap(),
        "fenced before the deadline"
    );
    wait_until("the attempt to be released", || jobs.held().is_empty()).await;
    assert_eq!(
        end_report(dir.path(), 3, 1),
        None,
        "a fenced end was reported"
    );
    assert!(Records::open(dir.path())
        .unwrap()
        .scan()
        .unwrap()
        .is_empty());
    stop.send_replace(true);
}

/// A shim killed -9 together with its worker (so nothing fences, reports or adopts the job)
/// takes its job's leader with it, rather than leaving it to run unsupervised while the
/// cluster runs the job again elsewhere.
#[test]
fn a_job_dies_with_its_shim_when_the_worker_is_gone_too() {
    let dir = tempfile::tempdir().unwrap();
    // The worker: a runtime of its own, dropped without a word to its shims, as a kill -9
    // would leave them.
    let worker = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (leader, stop) = worker.block_on(async {
        let (jobs, _lease, stop) = table(dir.path());
        jobs.start(sleeper(12), 1);
        (started(&jobs, 12).await, stop)
    });
    worker.shutdown_background();
    std::mem::forget(stop);
    let stat = std::fs::read_to_string(format!("/proc/{leader}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let shim: i32 = after.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert_ne!(
        shim,
        std::process::id() as i32,
        "the job is not the shim's child"
    );
    assert!(matches!(proc_state(leader), Some('S' | 'R')));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(shim),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !matches!(proc_state(leader), None | Some('Z')) {
        assert!(
            std::time::Instant::now() < deadline,
            "the job outlived its shim and worker by 10 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A start that reaches the shim after the lease ran out (the worker froze in between) runs
/// no user code and records no end: the primary's resync decides.
#[tokio::test]
async fn a_shim_started_after_the_lease_ran_out_does_not_start_its_job() {
    let dir = tempfile::tempdir().unwrap();
    let (jobs, lease, stop) = table(dir.path());
    lease.set_lost_after(Duration::from_millis(2500));
    let past = fence::now() - Duration::from_secs(1);
    LeaseFile::new(dir.path()).write(Some(past)).unwrap();
    let ran = dir.path().join("ran");
    jobs.start(job(11, &["touch", ran.to_str().unwrap()]), 1);
    wait_until("the attempt to be released", || jobs.held().is_empty()).await;
    assert!(!ran.exists(), "user code ran after the lease ran out");
    assert_eq!(end_report(dir.path(), 11, 1), None);
    stop.send_replace(true);
}

/// A new job table on the same spool (a restarted worker) adopts what the old one's shims
/// still run, and its end is recorded by the shim even while no worker watched it.
#[tokio::test]
async fn a_new_worker_adopts_running_shims_and_kills_what_none_vouches_for() {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let script = format!(
        "while [ ! -e {} ]; do sleep 0.02; done; exit 4",
        go.display()
    );
    // The old table runs on a runtime of its own, dropped with all its tasks, nothing
    // stopped: as if its worker died.
    let spool = dir.path().to_path_buf();
    let pgid = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (old, _lease, _stop) = table(&spool);
            old.start(job(5, &["sh", "-c", &script]), 1);
            started(&old, 5).await
        })
    })
    .join()
    .unwrap();
    // A process marked as a job of this spool that no shim supervises.
    let canonical = std::fs::canonicalize(dir.path()).unwrap();
    let mut stray = std::process::Command::new("sleep")
        .arg("30")
        .env(procs::ENV_SPOOL_MARK, &canonical)
        .env(procs::ENV_JOB_ID, "77")
        .env(procs::ENV_ATTEMPT, "1")
        .spawn()
        .unwrap();
    let stray_pid = stray.id() as i32;

    let (new, _lease, stop) = table(dir.path());
    new.recover().unwrap();
    assert_eq!(
        new.held(),
        vec![HeldJob {
            id: 5,
            attempt: 1,
            phase: HeldPhase::Running
        }]
    );
    assert_eq!(new.pgid(5), Some(pgid));
    assert!(
        procs::start_ticks(pgid).is_some(),
        "the adopted job was killed"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while procs::start_ticks(stray_pid).is_some() {
        // Say what the sweep saw, so a failure here can be told apart from a slow kill.
        let environ = std::fs::read(format!("/proc/{stray_pid}/environ"));
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stray process {stray_pid} was not killed: state {:?}, environ {}",
            proc_state(stray_pid),
            match environ {
                Ok(env) => format!(
                    "readable, {} bytes, marked {}",
                    env.len(),
                    env.split(|b| *b == 0)
                        .any(|v| v.starts_with(procs::ENV_SPOOL_MARK.as_bytes()))
                ),
                Err(e) => format!("unreadable: {e}"),
            }
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(stray.wait().is_ok());
    std::fs::write(&go, b"").unwrap();
    assert_eq!(wait_end(dir.path(), 5, 1).await, JobEnd::Exit(4));
    wait_until("the adopted attempt to be seen finished", || {
        new.held().iter().all(|h| h.phase == HeldPhase::Finished)
    })
    .await;
    stop.send_replace(true);
}

#[tokio::test]
async fn a_stopping_worker_stops_its_jobs_through_their_shims_unreported() {
    let dir = tempfile::tempdir().unwrap();
    let (jobs, _lease, stop) = table(dir.path());
    jobs.start(sleeper(6), 1);
    jobs.start(job(7, &["sh", "-c", "trap '' TERM; sleep 30 & wait"]), 1);
    let a = started(&jobs, 6).await;
    let b = started(&jobs, 7).await;
    stop.send_replace(true);
    tokio::time::timeout(Duration::from_secs(10), jobs.stop_all())
        .await
        .unwrap();
    for pid in [a, b] {
        assert_eq!(procs::start_ticks(pid), None, "job {pid} outlived the stop");
    }
    assert_eq!(end_report(dir.path(), 6, 1), None);
    assert_eq!(end_report(dir.path(), 7, 1), None);
    assert!(Records::open(dir.path())
        .unwrap()
        .scan()
        .unwrap()
        .is_empty());
}

/// This host's cgroups for a worker on `spool`. As root (CI) a host without them fails the
/// test; otherwise the caller skips, saying why.
fn cgroups_here(spool: &Path) -> Option<Cgroups> {
    let spool = std::fs::canonicalize(spool).unwrap();
    match Cgroups::detect("w1", &spool) {
        Ok(cgroups) => Some(cgroups),
        Err(why) if !nix::unistd::geteuid().is_root() => {
            eprintln!("skipped: not root, and no cgroups: {why}");
            None
        }
        Err(why) => panic!("running as root, yet no cgroups: {why}"),
    }
}

fn with_limits(mut job: Job, cpus: u32, mem_mb: u64) -> Job {
    job.spec.resources = xce_client::types::Resources::new(cpus, mem_mb);
    job
}

#[tokio::test]
async fn in_a_cgroup_kill_and_suspend_reach_what_left_the_group_and_dropped_its_mark() {
    let dir = tempfile::tempdir().unwrap();
    let Some(cgroups) = cgroups_here(dir.path()) else {
        return;
    };
    let (jobs, _lease, stop) = table_with(dir.path(), Some(cgroups.clone()));
    let escaper = dir.path().join("escaper.pid");
    // A child in a session of its own, with an empty environment: neither the job's group
    // nor its mark finds it; its cgroup does.
    let script = format!(
        "setsid env -i sh -c 'echo $$ > {}; exec sleep 300' & exec sleep 300",
        escaper.display()
    );
    jobs.start(with_limits(job(8, &["sh", "-c", &script]), 2, 64), 1);
    let leader = started(&jobs, 8).await;
    wait_until("the escaper's pid", || escaper.exists()).await;
    let mut escaped: Option<i32> = None;
    wait_until("the escaper's pid to be written", || {
        escaped = std::fs::read_to_string(&escaper)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        escaped.is_some()
    })
    .await;
    let escaped = escaped.unwrap();
    let cg = cgroups.job(8, 1);
    wait_until("both in the job's cgroup", || {
        let pids = cg.pids();
        pids.contains(&leader) && pids.contains(&escaped)
    })
    .await;
    assert!(
        !cg.pids().contains(&(std::process::id() as i32)),
        "the test process joined the job's cgroup"
    );
    // Its limits are the job's: 2 cpus, 64 MiB.
    let limit = |name: &str| {
        cgroups
            .hierarchies
            .iter()
            .map(|h| h.base.join("8.1").join(name))
            .find(|f| f.exists())
            .map(|f| std::fs::read_to_string(f).unwrap().trim().to_string())
    };
    if let Some(bytes) = limit("memory.limit_in_bytes").or_else(|| limit("memory.max")) {
        assert_eq!(bytes, (64u64 << 20).to_string());
    }
    if let Some(quota) = limit("cpu.cfs_quota_us") {
        assert_eq!(quota, "200000");
    }
    if let Some(max) = limit("cpu.max") {
        assert_eq!(max, "200000 100000");
    }

    assert!(jobs.signal(order(8, 1, JobSignal::Suspend)));
    let held = |pid| matches!(proc_state(pid), Some('T' | 'D'));
    wait_until("the escaper to be frozen", || held(escaped)).await;
    assert!(jobs.signal(order(8, 1, JobSignal::Resume)));
    wait_until("the escaper to run again", || !held(escaped)).await;

    assert!(jobs.signal(order(8, 1, JobSignal::Kill)));
    wait_until("the escaper to be killed", || {
        procs::start_ticks(escaped).is_none()
    })
    .await;
    wait_end(dir.path(), 8, 1).await;
    wait_until("the job's cgroup to be removed", || {
        cgroups.attempts().is_empty()
    })
    .await;
    stop.send_replace(true);
    cgroups.remove();
}

#[tokio::test]
async fn in_a_cgroup_a_job_over_its_memory_limit_ends_out_of_memory() {
    let dir = tempfile::tempdir().unwrap();
    let Some(cgroups) = cgroups_here(dir.path()) else {
        return;
    };
    let (jobs, _lease, stop) = table_with(dir.path(), Some(cgroups.clone()));
    // dd allocates (and fills) a 256 MiB buffer; the job may have 32 MiB. In a shell, so
    // the leader survives the kill of its child and exits 137.
    let dd = "dd if=/dev/zero of=/dev/null bs=256M count=1";
    jobs.start(with_limits(job(9, &["sh", "-c", dd]), 1, 32), 1);
    jobs.start(with_limits(job(10, &["sh", "-c", dd]), 1, 512), 1);
    assert_eq!(wait_end(dir.path(), 9, 1).await, JobEnd::OutOfMemory);
    assert_eq!(wait_end(dir.path(), 10, 1).await, JobEnd::Exit(0));
    stop.send_replace(true);
    wait_until("the jobs' cgroups to be removed", || {
        cgroups.attempts().is_empty()
    })
    .await;
    cgroups.remove();
}

/// A user (with a supplementary group of its own) that exists while this lives.
struct TestUser {
    name: String,
    group: String,
}

impl TestUser {
    fn create() -> TestUser {
        let n = std::process::id();
        let (name, group) = (format!("xcet{n}"), format!("xcetg{n}"));
        let run = |args: &[&str]| {
            let out = std::process::Command::new(args[0])
                .args(&args[1..])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run(&["groupadd", &group]);
        // Built before the user is added, so a failed useradd still removes the group.
        let user = TestUser { name, group };
        run(&[
            "useradd",
            "--no-create-home",
            "--home-dir",
            "/",
            "--shell",
            "/bin/sh",
            "-G",
            &user.group,
            &user.name,
        ]);
        user
    }

    fn uid(&self) -> u32 {
        nix::unistd::User::from_name(&self.name)
            .unwrap()
            .unwrap()
            .uid
            .as_raw()
    }

    fn gid_of_group(&self) -> u32 {
        nix::unistd::Group::from_name(&self.group)
            .unwrap()
            .unwrap()
            .gid
            .as_raw()
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = std::process::Command::new("userdel")
            .args(["-f", &self.name])
            .output();
        let _ = std::process::Command::new("groupdel")
            .arg(&self.group)
            .output();
    }
}

fn job_of(id: JobId, user: &str, command: &[&str]) -> Job {
    let mut job = job(id, command);
    job.spec.user = user.into();
    job
}

/// A root worker runs each job as its user, with the user's groups, its output owned by
/// them; it refuses a user the host does not know, and root unless allowed.
#[tokio::test]
async fn as_root_each_job_runs_as_its_user_with_their_groups() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root (CI runs as root) to create a user and switch to it");
        return;
    }
    let user = TestUser::create();
    let dir = tempfile::tempdir().unwrap();
    let each = xce_client::types::JobUsers::EachUser { root: false };
    let (jobs, _lease, stop) = table_for(dir.path(), None, each);
    let script = "id -u; id -G; echo $USER $HOME; pwd; \
                  grep -E '^(Uid|Gid|CapEff):' /proc/self/status; echo ${XCE_WORKERS_OWN:-clean}";
    // Something of the worker's own environment that a job must not inherit.
    std::env::set_var("XCE_WORKERS_OWN", "leaked");
    // Its output in a directory of its user's, named by patterns; its home ("/") is not
    // theirs to write in.
    let outputs = dir.path().join("outputs");
    std::fs::create_dir(&outputs).unwrap();
    std::os::unix::fs::chown(&outputs, Some(user.uid()), None).unwrap();
    let mut first = job_of(1, &user.name, &["sh", "-c", script]);
    first.spec.stdout = Some(format!("{}/%u-%j.out", outputs.display()));
    first.spec.stderr = Some(format!("{}/%u-%j.err", outputs.display()));
    jobs.start(first, 1);
    assert_eq!(wait_end(dir.path(), 1, 1).await, JobEnd::Exit(0));
    let out_path = outputs.join(format!("{}-1.out", user.name));
    let out = std::fs::read_to_string(&out_path).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    let uid = user.uid().to_string();
    assert_eq!(lines[0], uid, "{out}");
    let groups: Vec<&str> = lines[1].split_whitespace().collect();
    assert!(
        groups.contains(&user.gid_of_group().to_string().as_str()),
        "{out}"
    );
    assert!(!groups.contains(&"0"), "root's group kept: {out}");
    assert_eq!(lines[2], format!("{} /", user.name), "{out}");
    // Its home, entered as the user.
    assert_eq!(lines[3], "/", "{out}");
    // Real, effective, saved and filesystem ids all the user's, and no capability left.
    let ids =
        |line: &str| -> Vec<String> { line.split_whitespace().skip(1).map(String::from).collect() };
    assert_eq!(ids(lines[4]), vec![uid.clone(); 4], "{out}");
    assert!(!ids(lines[5]).contains(&"0".to_string()), "{out}");
    assert_eq!(ids(lines[6]), ["0000000000000000"], "{out}");
    assert_eq!(lines[7], "clean", "the worker's environment leaked: {out}");
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    for file in ["out", "err"] {
        let meta = std::fs::metadata(outputs.join(format!("{}-1.{file}", user.name))).unwrap();
        assert_eq!(meta.uid(), user.uid(), "{file}");
        let primary = nix::unistd::User::from_name(&user.name)
            .unwrap()
            .unwrap()
            .gid;
        assert_eq!(meta.gid(), primary.as_raw(), "{file}: not the user's group");
        assert_eq!(meta.permissions().mode() & 0o022, 0, "{file}");
    }
    // Output a user may not write where they asked: refused as theirs, though the shim is
    // root; and the default, in their home, which is not theirs either.
    let mut elsewhere = job_of(4, &user.name, &["true"]);
    elsewhere.spec.stdout = Some(format!("{}/%j.out", dir.path().display()));
    jobs.start(elsewhere, 1);
    match wait_end(dir.path(), 4, 1).await {
        JobEnd::Failed(reason) => assert!(
            reason.contains("cannot open output file") && reason.contains("Permission denied"),
            "{reason}"
        ),
        other => panic!("the job wrote where its user may not: {other:?}"),
    }
    assert!(!dir.path().join("4.out").exists());
    jobs.start(job_of(5, &user.name, &["true"]), 1);
    match wait_end(dir.path(), 5, 1).await {
        JobEnd::Failed(reason) => assert!(reason.contains("/xce-5.out"), "{reason}"),
        other => panic!("the job wrote into / as its user: {other:?}"),
    }

    jobs.start(job_of(2, "root", &["true"]), 1);
    match wait_end(dir.path(), 2, 1).await {
        JobEnd::Failed(reason) => assert!(reason.contains("root"), "{reason}"),
        other => panic!("root's job ran: {other:?}"),
    }
    jobs.start(job_of(3, "no-such-user-xce", &["true"]), 1);
    match wait_end(dir.path(), 3, 1).await {
        JobEnd::Failed(reason) => assert!(reason.contains("does not exist"), "{reason}"),
        other => panic!("an unknown user's job ran: {other:?}"),
    }
    stop.send_replace(true);
}

/// A worker that runs only its own account's jobs refuses anyone else's, even one the
/// controller sent (its own check, behind the controller's).
#[tokio::test]
async fn a_worker_for_one_user_refuses_another_users_job() {
    let dir = tempfile::tempdir().unwrap();
    let only = xce_client::types::JobUsers::Only("bob".into());
    let (jobs, _lease, stop) = table_for(dir.path(), None, only);
    jobs.start(job_of(1, "alice", &["true"]), 1);
    match wait_end(dir.path(), 1, 1).await {
        JobEnd::Failed(reason) => assert!(reason.contains("only bob's"), "{reason}"),
        other => panic!("alice's job ran on bob's worker: {other:?}"),
    }
    jobs.start(job_of(2, "bob", &["true"]), 1);
    assert_eq!(wait_end(dir.path(), 2, 1).await, JobEnd::Exit(0));
    stop.send_replace(true);
}

#[tokio::test]
async fn a_newer_attempt_starts_only_once_the_copy_it_fences_is_gone() {
    newer_attempt_beside_a_stuck_shim(true, false).await;
}

#[tokio::test]
async fn a_newer_attempt_kills_a_fenced_copy_whose_shim_never_acts() {
    newer_attempt_beside_a_stuck_shim(false, false).await;
}

/// A newer attempt that waited for a join still waits out the copy it fences.
#[tokio::test]
async fn a_newer_attempt_that_waited_for_a_join_still_waits_out_the_copy_it_fences() {
    newer_attempt_beside_a_stuck_shim(false, true).await;
}

/// Attempt 1 runs; its shim is stopped (slow to act on the stale order: its job lives on);
/// attempt 2 arrives. Attempt 2's job must not start while attempt 1's does. With `resume`,
/// the old shim comes back and kills its copy; without, the new shim kills it once its
/// patience (kill grace + 2 s) is over. With `through_a_join`, attempt 2 arrives while a join
/// is unanswered and runs once the primary still wants it.
async fn newer_attempt_beside_a_stuck_shim(resume: bool, through_a_join: bool) {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let dir = tempfile::tempdir().unwrap();
    let (jobs, _lease, stop) = table(dir.path());
    let pid_file = dir.path().join("first.pid");
    let verdict = dir.path().join("verdict");
    let first = format!(
        "echo $$ > {0}.tmp && mv {0}.tmp {0}; exec sleep 300",
        pid_file.display()
    );
    jobs.start(job(1, &["sh", "-c", &first]), 1);
    wait_until("the first copy to say its pid", || pid_file.exists()).await;
    let records = Records::open(dir.path()).unwrap();
    wait_until("the first copy's record", || {
        records.scan().is_ok_and(|r| r.len() == 1)
    })
    .await;
    let shim = records.scan().unwrap()[0].1.unwrap().shim.unwrap();
    kill(Pid::from_raw(shim.pid), Signal::SIGSTOP).unwrap();
    // Alive unless gone or a zombie (a killed job whose shim died is reaped by whoever
    // inherits it, which may take a while): its state is the third field of its stat.
    let check = format!(
        "s=$(cut -d' ' -f3 /proc/$(cat {})/stat 2>/dev/null); \
         if [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo overlap; else echo alone; fi > {}.tmp && mv {1}.tmp {1}",
        pid_file.display(),
        verdict.display()
    );
    if through_a_join {
        jobs.join_begins();
    }
    jobs.start(job(1, &["sh", "-c", &check]), 2);
    if through_a_join {
        jobs.join_answered(0);
        jobs.settle_parked(1, 2, Some(&dispatched(1, 2)));
    }
    // An observation window shorter than the new shim's patience.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!verdict.exists(), "attempt 2 started beside attempt 1");
    if resume {
        kill(Pid::from_raw(shim.pid), Signal::SIGCONT).unwrap();
    }
    wait_until("the second attempt's verdict", || verdict.exists()).await;
    assert_eq!(
        std::fs::read_to_string(&verdict).unwrap().trim(),
        "alone",
        "attempt 2 ran while attempt 1 still did"
    );
    if !resume {
        wait_until("the stuck shim to be killed", || !shim.alive()).await;
    }
    stop.send_replace(true);
}

/// The shim of a running attempt `id`, from its record.
fn shim_of(spool: &Path, id: JobId) -> i32 {
    let records = Records::open(spool).unwrap().scan().unwrap();
    let (_, record) = records
        .into_iter()
        .find(|(at, _)| at.0 == id)
        .expect("a record of the attempt");
    record.unwrap().shim.unwrap().pid
}

/// Field `n` (1-based, after the name) of `/proc/<pid>/stat`.
fn stat_field(pid: i32, n: usize) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat[stat.rfind(')').unwrap() + 2..]
        .split(' ')
        .nth(n - 1)
        .unwrap()
        .to_string()
}

/// Shims are forked by one launcher, not exec'd one by one; one that loses its launcher
/// (kill -9) still carries out a kill and records its end, the worker still settles the
/// attempt, and the next attempt gets a new launcher.
#[tokio::test]
async fn shims_come_from_one_launcher_and_outlive_it() {
    let dir = tempfile::tempdir().unwrap();
    let (jobs, _lease, stop) = table(dir.path());
    jobs.start(sleeper(5), 1);
    jobs.start(sleeper(6), 1);
    started(&jobs, 5).await;
    started(&jobs, 6).await;
    let (a, b) = (shim_of(dir.path(), 5), shim_of(dir.path(), 6));
    let launcher: i32 = stat_field(a, 2).parse().unwrap();
    assert_eq!(stat_field(b, 2), launcher.to_string(), "one launcher");
    assert_ne!(
        launcher,
        std::process::id() as i32,
        "forked, not spawned here"
    );
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{a}/comm")).unwrap(),
        "xce-shim\n"
    );

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(launcher),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_until("the launcher to be gone", || {
        procs::start_ticks(launcher).is_none()
    })
    .await;
    assert!(jobs.signal(order(5, 1, JobSignal::Kill)));
    assert_eq!(wait_end(dir.path(), 5, 1).await, JobEnd::Signal(15));
    wait_until("the orphaned attempt to be settled", || {
        jobs.held()
            .iter()
            .any(|h| h.id == 5 && h.phase == HeldPhase::Finished)
    })
    .await;

    jobs.start(job(7, &["true"]), 1);
    assert_eq!(wait_end(dir.path(), 7, 1).await, JobEnd::Exit(0));
    assert!(jobs.signal(order(6, 1, JobSignal::Kill)));
    assert_eq!(wait_end(dir.path(), 6, 1).await, JobEnd::Signal(15));
    stop.send_replace(true);
}

/// No user's text speaks for another shim on the pipe a launcher's shims share: a command
/// whose name forges lines for the first shim fails to start with its reason, and the first
/// attempt runs on.
#[tokio::test]
async fn no_command_speaks_for_another_shim() {
    let dir = tempfile::tempdir().unwrap();
    let (jobs, _lease, stop) = table(dir.path());
    jobs.start(sleeper(8), 1);
    let pgid = started(&jobs, 8).await;
    let forged = "x\n1 exit 1\n1 said started 1\n2 exit 1\n";
    jobs.start(job(9, &[forged]), 1);
    match wait_end(dir.path(), 9, 1).await {
        JobEnd::Failed(reason) => assert!(reason.starts_with("command not found"), "{reason}"),
        other => panic!("{other:?}"),
    }
    wait_until("the failed attempt to be settled", || {
        jobs.held()
            .iter()
            .any(|h| h.id == 9 && h.phase == HeldPhase::Finished)
    })
    .await;
    assert!(
        jobs.held()
            .iter()
            .any(|h| h.id == 8 && h.phase == HeldPhase::Running),
        "{:?}",
        jobs.held()
    );
    assert!(
        procs::start_ticks(pgid).is_some(),
        "the first job was killed"
    );
    assert!(jobs.signal(order(8, 1, JobSignal::Kill)));
    assert_eq!(wait_end(dir.path(), 8, 1).await, JobEnd::Signal(15));
    stop.send_replace(true);
}

/// A launcher run by hand, as the worker runs it: its socket, and its pipe.
struct HandLauncher {
    process: std::process::Child,
    socket: std::os::unix::net::UnixStream,
    pipe: std::io::BufReader<std::process::ChildStdout>,
}

impl HandLauncher {
    fn start() -> HandLauncher {
        let (socket, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut process = std::process::Command::new(env!("CARGO_BIN_EXE_xce-worker"))
            .arg("shim-launcher")
            .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
                theirs,
            )))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pipe = std::io::BufReader::new(process.stdout.take().unwrap());
        HandLauncher {
            process,
            socket,
            pipe,
        }
    }

    /// Asks for a shim running `command` in `dir` as job `id`; returns its pid (no go yet).
    fn fork(&mut self, id: JobId, command: &[&str], dir: &Path) -> i32 {
        use std::io::{BufRead, Write};
        let spec = serde_json::json!({
            "id": id, "attempt": 1, "command": command, "env": [],
            "cwd": dir, "spool": dir, "kill_grace_ms": 200,
            "fence_at_ms": null, "cgroups": null, "limits": {"cpus": 1, "mem_mb": 0},
            "run_as": null, "refused": null,
        });
        (&self.socket)
            .write_all(format!("{id} {spec}\n").as_bytes())
            .unwrap();
        let mut answer = String::new();
        std::io::BufReader::new(&self.socket)
            .read_line(&mut answer)
            .unwrap();
        let pid = answer.trim().strip_prefix(&format!("{id} pid ")).unwrap();
        pid.parse().unwrap()
    }

    fn go(&mut self, id: JobId) {
        use std::io::Write;
        (&self.socket)
            .write_all(format!("{id} go\n").as_bytes())
            .unwrap();
    }

    /// The next line on the pipe.
    fn event(&mut self) -> String {
        use std::io::BufRead;
        let mut line = String::new();
        self.pipe.read_line(&mut line).unwrap();
        line.trim_end().to_string()
    }
}

/// An order that reaches a forked shim before it listens (between its fork and its go) is
/// carried out once it does, not taken for the signal's default action, which would kill it;
/// and since its job has not started, the job never starts: a kill is reported as such.
#[test]
fn an_order_sent_before_a_forked_shim_listens_is_carried_out() {
    let dir = tempfile::tempdir().unwrap();
    let mut launcher = HandLauncher::start();
    let shim = launcher.fork(12, &["touch", "ran"], dir.path());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(shim),
        nix::sys::signal::Signal::SIGUSR1,
    )
    .unwrap();
    launcher.go(12);
    assert_eq!(launcher.event(), "12 said failed killed before it started");
    assert_eq!(launcher.event(), "12 exit 0");
    assert_eq!(
        end_report(dir.path(), 12, 1),
        Some(JobEnd::Failed("killed before it started".into()))
    );
    assert!(!dir.path().join("ran").exists(), "the job ran");
}

/// A shim a newer attempt fenced before its job started (the worker's SIGUSR2 came between
/// its fork and its go) never starts the job, and leaves no end report: the job is the newer
/// attempt's. Started and then killed, the job would have run twice.
#[test]
fn a_copy_fenced_before_its_job_starts_never_starts_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut launcher = HandLauncher::start();
    let shim = launcher.fork(13, &["touch", "ran"], dir.path());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(shim),
        nix::sys::signal::Signal::SIGUSR2,
    )
    .unwrap();
    launcher.go(13);
    assert_eq!(launcher.event(), "13 said failed stopped before it started");
    assert_eq!(
        launcher.event(),
        format!("13 exit {}", xce_worker::shim::EXIT_UNREPORTED)
    );
    assert_eq!(end_report(dir.path(), 13, 1), None);
    assert!(!dir.path().join("ran").exists(), "the job ran");
    assert!(!dir.path().join("13.1.out").exists());
}

/// A shim the launcher forked does nothing until the worker says go: one forked for a
/// request the worker gave up on exits with its launcher, having run nothing.
#[test]
fn a_shim_without_its_go_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut hand = HandLauncher::start();
    let pid = hand.fork(11, &["touch", "ran"], dir.path());
    let HandLauncher {
        process: mut launcher,
        socket: ours,
        ..
    } = hand;
    let shim = procs::ProcRecord::of(pid).expect("a forked shim");
    // The worker gives up on this launcher: no go.
    drop(ours);
    assert!(launcher.wait().unwrap().success());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while shim.alive() {
        assert!(
            std::time::Instant::now() < deadline,
            "the shim outlived its launcher"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!dir.path().join("ran").exists(), "the job ran");
    assert!(!dir.path().join("running/11.1").exists());
    assert!(!dir.path().join("11.1.out").exists());
}

/// A restarted worker removes the script copies and limit files no shim runs any more (a
/// shim killed, or the host down, left them), but not fresh ones a shim may still be about
/// to use.
#[tokio::test]
async fn a_restarted_worker_removes_leftover_script_copies() {
    let dir = tempfile::tempdir().unwrap();
    let scripts = dir.path().join("scripts");
    std::fs::create_dir_all(&scripts).unwrap();
    let (stale, fresh) = (scripts.join("81.1"), scripts.join("82.1"));
    for file in [&stale, &fresh] {
        std::fs::write(file, "echo\n").unwrap();
    }
    let long_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(long_ago)
        .unwrap();
    let limit = xce_worker::shim::limit_file(dir.path(), 83, 2);
    xce_worker::shim::write_limit(dir.path(), 83, 2, Some(5)).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&limit)
        .unwrap()
        .set_modified(long_ago)
        .unwrap();
    let (jobs, _lease, stop) = table(dir.path());
    jobs.recover().unwrap();
    assert!(!stale.exists() && !limit.exists(), "leftovers kept");
    assert!(fresh.exists(), "a fresh copy removed");
    stop.send_replace(true);
}
