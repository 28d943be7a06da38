//! Process groups of running attempts: signalling them, and remembering them on disk so that
//! a restarted worker can find the attempts its previous run left behind.
//!
//! Each attempt runs under its own shim ([`crate::shim`]), which outlives a worker crash. A
//! record is `<spool>/running/<job id>.<attempt>`, written by the shim right after it spawned
//! the job: the job's pid (also its process group) and the shim's, each with its start time
//! (clock ticks since boot, from `/proc/<pid>/stat`), since a pid alone could have been reused.
//! A restarted worker adopts every attempt whose shim still lives, and kills what it cannot
//! vouch for: a job whose shim is gone, and any process carrying [`ENV_SPOOL_MARK`] (every job
//! does) that belongs to no adopted attempt — one that left its job's group, say.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};
use xce_client::types::JobId;

/// The environment variable every job carries: the (canonical) spool dir of its worker. Not
/// a name the worker itself reads, so a shell that launched the worker never carries it.
pub const ENV_SPOOL_MARK: &str = xce_client::export::job_vars::JOB_SPOOL;
/// The job's id, in every job's environment.
pub const ENV_JOB_ID: &str = xce_client::export::job_vars::JOB_ID;
/// The attempt number, in every job's environment.
pub const ENV_ATTEMPT: &str = xce_client::export::job_vars::JOB_ATTEMPT;

/// Which marked processes to kill: every job of this spool but the attempts spared (adopted
/// ones), or one attempt's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marked {
    AllJobsBut(Vec<(JobId, u32)>),
    Attempt(JobId, u32),
}

/// Kills every live process whose environment carries this spool's mark (and, for one
/// attempt, its job id and attempt), whatever became of its process group, and waits
/// (bounded) until they are gone. They are stopped first and the scan repeated, so a process
/// forking during the sweep is caught too. Returns how many it killed.
pub fn kill_marked(spool: &Path, which: Marked) -> usize {
    let mut wanted = vec![format!("{ENV_SPOOL_MARK}={}", spool.display()).into_bytes()];
    let mut spared = Vec::new();
    match &which {
        Marked::AllJobsBut(spare) => {
            spared = spare
                .iter()
                .map(|(id, attempt)| {
                    (
                        format!("{ENV_JOB_ID}={id}").into_bytes(),
                        format!("{ENV_ATTEMPT}={attempt}").into_bytes(),
                    )
                })
                .collect();
        }
        Marked::Attempt(id, attempt) => {
            wanted.push(format!("{ENV_JOB_ID}={id}").into_bytes());
            wanted.push(format!("{ENV_ATTEMPT}={attempt}").into_bytes());
        }
    }
    let id_prefix = format!("{ENV_JOB_ID}=").into_bytes();
    let me = std::process::id() as i32;
    let mut stopped: Vec<(i32, u64)> = Vec::new();
    for _ in 0..10 {
        let found: Vec<(i32, u64)> = all_pids()
            .into_iter()
            .filter(|pid| *pid != me && !stopped.iter().any(|(p, _)| p == pid))
            .filter(|pid| {
                let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
                    return false;
                };
                let vars: Vec<&[u8]> = env.split(|b| *b == 0).collect();
                vars.iter().any(|v| v.starts_with(&id_prefix))
                    && wanted.iter().all(|w| vars.contains(&w.as_slice()))
                    && !spared.iter().any(|(id, attempt)| {
                        vars.contains(&id.as_slice()) && vars.contains(&attempt.as_slice())
                    })
            })
            .filter_map(|pid| Some((pid, start_ticks(pid)?)))
            .collect();
        if found.is_empty() {
            break;
        }
        for (pid, _) in &found {
            let _ = nix::sys::signal::kill(Pid::from_raw(*pid), Signal::SIGSTOP);
        }
        stopped.extend(found);
    }
    for (pid, _) in &stopped {
        let _ = nix::sys::signal::kill(Pid::from_raw(*pid), Signal::SIGKILL);
    }
    for (pid, ticks) in &stopped {
        wait_gone(
            ProcRecord {
                pid: *pid,
                start_ticks: *ticks,
            },
            Duration::from_secs(5),
        );
    }
    stopped.len()
}

/// Every pid in `/proc`.
fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A process as recorded on disk: its pid and when it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcRecord {
    pub pid: i32,
    pub start_ticks: u64,
}

impl ProcRecord {
    /// The live process `pid` as it is now; `None` if it is gone.
    pub fn of(pid: i32) -> Option<ProcRecord> {
        Some(ProcRecord {
            pid,
            start_ticks: start_ticks(pid)?,
        })
    }

    /// Whether the recorded process still runs (not a newcomer with its pid, not a zombie).
    pub fn alive(&self) -> bool {
        self.start_ticks != 0 && start_ticks(self.pid) == Some(self.start_ticks)
    }
}

/// One attempt as its record holds it: the job's leader (whose pid is also its process
/// group), at the top level as records have always had it, and the shim supervising it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    #[serde(flatten)]
    pub job: ProcRecord,
    /// Absent in the records of workers from before shims: such an attempt is not adoptable.
    #[serde(default)]
    pub shim: Option<ProcRecord>,
}

impl AttemptRecord {
    /// The record a file holds: its first line (an end the shim appended may follow).
    pub(crate) fn decode(bytes: &[u8]) -> Option<AttemptRecord> {
        let first = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
        serde_json::from_slice(first).ok()
    }
}

/// One attempt found among the records: which it is, and its record if it could be read.
pub type Recorded = ((JobId, u32), Option<AttemptRecord>);

/// The directory of records.
#[derive(Debug, Clone)]
pub struct Records {
    dir: PathBuf,
}

impl Records {
    /// Opens (creating if needed) the records under `spool`.
    pub fn open(spool: &Path) -> std::io::Result<Records> {
        let dir = spool.join("running");
        std::fs::create_dir_all(&dir)?;
        Ok(Records { dir })
    }

    /// Where the record of an attempt is: its shim turns that file into the attempt's end
    /// report ([`crate::outbox::Outbox::put_into_record`]).
    pub fn path(&self, id: JobId, attempt: u32) -> PathBuf {
        self.dir.join(format!("{id}.{attempt}"))
    }

    /// Remembers a freshly spawned attempt, replacing the record whole: one line, to which
    /// the shim later appends the attempt's end. Not synced: it must survive a crash of the
    /// worker, which the page cache ensures; a machine crash takes the attempt with it. The
    /// record is written into `spare` when there is one (renamed into place and overwritten:
    /// no file is created, see [`crate::outbox::Spares`]).
    pub fn remember(
        &self,
        id: JobId,
        attempt: u32,
        record: &AttemptRecord,
        spare: Option<&Path>,
    ) -> std::io::Result<()> {
        let mut bytes = serde_json::to_vec(record).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        let tmp = self.dir.join(format!(".{id}.{attempt}.tmp"));
        if let Some(spare) = spare {
            // Gone (a restart cleaned it up, an operator deleted it): a new file it is.
            let _ = std::fs::rename(spare, &tmp);
        }
        // Truncates the spare if it is there, so nothing of its old content is left.
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, self.path(id, attempt))
    }

    /// Forgets an attempt whose end is recorded (or that was killed).
    pub fn forget(&self, id: JobId, attempt: u32) {
        let _ = std::fs::remove_file(self.path(id, attempt));
    }

    /// Removes the records a shim began and never renamed into place (`.<id>.<attempt>.tmp`):
    /// at a worker's start, when no attempt without a record is adopted (what such a shim
    /// started is killed as unvouched for), so they are nobody's. Returns how many.
    pub fn sweep_unfinished(&self) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') && name.ends_with(".tmp") {
                removed += usize::from(std::fs::remove_file(entry.path()).is_ok());
            }
        }
        removed
    }

    /// Every recorded attempt, with its record if it could be read.
    pub fn scan(&self) -> std::io::Result<Vec<Recorded>> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&self.dir)?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let Some(key) = parse_name(&name) else {
                warn!(file = %entry.path().display(), "ignoring a stray file among the process records");
                continue;
            };
            let record = std::fs::read(entry.path())
                .ok()
                .and_then(|b| AttemptRecord::decode(&b));
            found.push((key, record));
        }
        found.sort_by_key(|(key, _)| *key);
        Ok(found)
    }

    /// Kills the attempt a previous run of the worker left alive without a shim to vouch for
    /// it (its record says where) and forgets it.
    pub fn kill_leftover(&self, id: JobId, attempt: u32, record: Option<&AttemptRecord>) {
        if let Some(r) = record.map(|r| r.job).filter(still_ours) {
            info!(
                job = id,
                attempt,
                pid = r.pid,
                "killing an attempt left by the previous run of this worker"
            );
            signal_group(r.pid, Signal::SIGKILL);
            wait_gone(r, Duration::from_secs(5));
        }
        self.forget(id, attempt);
    }
}

/// Whether the recorded group is still the attempt's: its leader is the recorded process,
/// or the leader is gone but processes it left remain in its group. (A pid is never handed
/// out again while a process group of that number has members, so such members are the
/// job's, not a newcomer's.)
fn still_ours(r: &ProcRecord) -> bool {
    match start_ticks(r.pid) {
        Some(ticks) => r.start_ticks != 0 && ticks == r.start_ticks,
        // The leader is gone (or a zombie): only members it left can keep the group number.
        None => group_has_members(r.pid),
    }
}

/// Whether any live process is in process group `pgid`.
fn group_has_members(pgid: i32) -> bool {
    all_pids().into_iter().any(|pid| {
        // Fields after the name: state, ppid, pgrp.
        stat_fields(&format!("/proc/{pid}/stat"))
            .is_some_and(|f| f.len() > 2 && f[0] != "Z" && f[2].parse() == Ok(pgid))
    })
}

/// The fields of a `/proc/<pid>/stat` after the command name (which may hold spaces and
/// parentheses, so the split is at the last ')'): field 3 (state) first.
fn stat_fields(path: &str) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(path).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// The attempt a record's file name (`<id>.<attempt>`) stands for.
pub(crate) fn parse_name(name: &str) -> Option<(JobId, u32)> {
    let (id, attempt) = name.split_once('.')?;
    Some((id.parse().ok()?, attempt.parse().ok()?))
}

/// Waits (bounded) until the recorded process is gone.
fn wait_gone(r: ProcRecord, limit: Duration) {
    let deadline = std::time::Instant::now() + limit;
    while start_ticks(r.pid) == Some(r.start_ticks) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `pid` is stopped (by SIGSTOP: a suspended job).
pub fn is_stopped(pid: i32) -> bool {
    stat_fields(&format!("/proc/{pid}/stat")).is_some_and(|f| f.first().is_some_and(|s| s == "T"))
}

/// When `pid` started, in clock ticks since boot; `None` if there is no such process or it is
/// a zombie (already dead).
pub fn start_ticks(pid: i32) -> Option<u64> {
    let fields = stat_fields(&format!("/proc/{pid}/stat"))?;
    // fields[0] is field 3 (state); the start time is field 22.
    if fields.first().is_some_and(|s| s == "Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// Sends `signal` to the whole process group `pgid`; false if the group is gone.
pub fn signal_group(pgid: i32, signal: Signal) -> bool {
    killpg(Pid::from_raw(pgid), signal).is_ok()
}

/// Sends any signal by number (real-time ones too, which [`Signal`] does not name) to a
/// job's whole process group, or to its leading process alone. Whether it was delivered.
#[allow(unsafe_code)]
pub fn send_signal(pgid: i32, signal: i32, leader_only: bool) -> bool {
    if pgid <= 1 {
        return false;
    }
    let target = if leader_only { pgid } else { -pgid };
    // SAFETY: kill(2) takes plain integers and touches no memory of this process; a pid of
    // 0, 1 or -1 (every process) is refused above.
    unsafe { nix::libc::kill(target, signal) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    #[test]
    fn start_ticks_identify_a_live_process() {
        let me = std::process::id() as i32;
        let ticks = start_ticks(me);
        assert!(ticks.is_some());
        assert_eq!(start_ticks(me), ticks);
        assert_eq!(start_ticks(i32::MAX), None);
    }

    /// A record as a shim writes it for a job `pid` under a shim `shim` (or none).
    fn record_of(pid: i32, shim: Option<i32>) -> AttemptRecord {
        AttemptRecord {
            job: ProcRecord::of(pid).unwrap(),
            shim: shim.and_then(ProcRecord::of),
        }
    }

    #[test]
    fn records_scan_back_and_leftovers_are_killed_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let records = Records::open(dir.path()).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let me = std::process::id() as i32;
        records
            .remember(4, 2, &record_of(pid, Some(me)), None)
            .unwrap();
        // A record whose process is long gone (pid reuse is caught by the start time), in
        // the format of workers from before shims.
        std::fs::write(
            dir.path().join("running/5.1"),
            format!(r#"{{"pid":{pid},"start_ticks":1}}"#),
        )
        .unwrap();
        let found = Records::open(dir.path()).unwrap().scan().unwrap();
        assert_eq!(
            found,
            vec![
                ((4, 2), Some(record_of(pid, Some(me)))),
                (
                    (5, 1),
                    Some(AttemptRecord {
                        job: ProcRecord {
                            pid,
                            start_ticks: 1
                        },
                        shim: None
                    })
                ),
            ]
        );
        assert!(found[0].1.unwrap().shim.unwrap().alive());
        // The stale record kills nothing; the live one kills its group.
        records.kill_leftover(5, 1, found[1].1.as_ref());
        assert_eq!(child.try_wait().unwrap(), None);
        records.kill_leftover(4, 2, found[0].1.as_ref());
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9));
        assert_eq!(records.scan().unwrap(), vec![]);
    }

    #[test]
    fn what_a_dead_leader_left_in_its_group_is_killed_too() {
        let dir = tempfile::tempdir().unwrap();
        let records = Records::open(dir.path()).unwrap();
        let pidfile = dir.path().join("bg.pid");
        // The leader starts a background child in its group and exits once told to (so that
        // it can be recorded while it lives, as a shim records it).
        let go = dir.path().join("go");
        let mut leader = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "sleep 30 & echo $! > {}; while [ ! -e {} ]; do sleep 0.01; done",
                pidfile.display(),
                go.display()
            ))
            .process_group(0)
            .spawn()
            .unwrap();
        let leader_pid = leader.id() as i32;
        let record = record_of(leader_pid, None);
        std::fs::write(&go, b"").unwrap();
        leader.wait().unwrap();
        let child: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(start_ticks(child).is_some());
        records.kill_leftover(8, 1, Some(&record));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while start_ticks(child).is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "the leftover child lives on"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn processes_carrying_the_spool_mark_are_killed_whatever_their_group() {
        let dir = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let spawn = |spool: &Path, id: &str, attempt: &str| {
            let mut c = std::process::Command::new("sleep");
            c.arg("30").env(ENV_SPOOL_MARK, spool).process_group(0);
            if !id.is_empty() {
                c.env(ENV_JOB_ID, id).env(ENV_ATTEMPT, attempt);
            }
            c.spawn().unwrap()
        };
        let mut first = spawn(dir.path(), "1", "1");
        let mut second = spawn(dir.path(), "2", "1");
        let mut theirs = spawn(other.path(), "1", "1");
        // The mark without a job id: a shell that merely exported the variable, not a job.
        let mut shell = spawn(dir.path(), "", "");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(kill_marked(dir.path(), Marked::Attempt(2, 1)), 1);
        assert_eq!(second.wait().unwrap().signal(), Some(9));
        assert_eq!(
            first.try_wait().unwrap(),
            None,
            "another attempt was killed"
        );
        assert_eq!(kill_marked(dir.path(), Marked::AllJobsBut(vec![(1, 1)])), 0);
        assert_eq!(kill_marked(dir.path(), Marked::AllJobsBut(Vec::new())), 1);
        assert_eq!(first.wait().unwrap().signal(), Some(9));
        for other in [&mut theirs, &mut shell] {
            assert_eq!(
                other.try_wait().unwrap(),
                None,
                "an unrelated process was killed"
            );
            other.kill().unwrap();
            other.wait().unwrap();
        }
    }

    #[test]
    fn record_names_parse_strictly() {
        assert_eq!(parse_name("12.3"), Some((12, 3)));
        assert_eq!(parse_name("12"), None);
        assert_eq!(parse_name("a.3"), None);
        assert_eq!(parse_name("1.2.3"), None);
    }

    #[test]
    fn unfinished_records_are_swept_and_finished_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let records = Records::open(dir.path()).unwrap();
        let record = AttemptRecord {
            job: ProcRecord {
                pid: 1,
                start_ticks: 1,
            },
            shim: None,
        };
        records.remember(1, 1, &record, None).unwrap();
        std::fs::write(dir.path().join("running/.2.1.tmp"), "half").unwrap();
        assert_eq!(records.sweep_unfinished(), 1);
        assert!(!dir.path().join("running/.2.1.tmp").exists());
        assert_eq!(records.scan().unwrap().len(), 1);
    }
}
