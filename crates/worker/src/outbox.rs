//! The durable outbox: a job's end report is written to disk (and synced) before it is sent,
//! and deleted only once the primary acknowledged it. After a reconnect or a worker restart
//! whatever is still here is sent again with its original request token, so a report the
//! primary already applied comes back `dupJob` and is applied once.
//!
//! One file per report: `<spool>/outbox/<job id>.<attempt>.end`, JSON. A shim turns its
//! attempt's record (see [`crate::procs`]) into that file: it appends the report as the
//! record's last line, syncs it, renames the record into the outbox and syncs the directory
//! ([`Outbox::put_into_record`]). A report the worker decides itself (the shim never ran) is
//! written to a temporary name, synced and renamed into place ([`Outbox::put`]). Either way
//! the report is the file's last line; a finished job's result survives a machine crash, or
//! the job would run again.
//!
//! Why the record becomes the report rather than one more file: a job should cost its spool
//! as few files created and deleted as possible. On ext4 without a journal every inode
//! deleted in the last minute (ext4's `recently_deleted`; longer while its inode table
//! block is dirty) is skipped, one by one, by every later create, so a busy
//! worker's per-job file churn made each create slower the faster jobs ran.
//!
//! For the same reason an acknowledged report's file is not deleted but kept as a spare
//! ([`Spares`], `<spool>/spare/`, up to [`SPARES_KEPT`]): the worker hands one to each new
//! shim, which renames it into place as its attempt's record and overwrites it. In steady
//! state a job then deletes no file and creates only its two output files.
//!
//! Start reports are not kept here: a restarted worker sends a start for every attempt it
//! adopts (a repeated start of the current attempt changes nothing at the primary, a
//! refused one means the attempt is stale). `.start` files written by older workers are
//! still read, sent and deleted.

use std::collections::HashSet;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use tracing::warn;
use xce_client::types::{JobEnd, JobId, RequestToken};

/// One report waiting for its acknowledgement. On disk it is a [`ReportFile`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub token: RequestToken,
    pub id: JobId,
    pub attempt: u32,
    /// `None` for the start report; how the attempt ended for the end report.
    pub end: Option<JobEnd>,
    /// With the end: what the attempt used, as its shim measured it.
    pub usage: Option<xce_client::types::Usage>,
}

impl Report {
    /// A start report with a fresh token.
    pub fn started(id: JobId, attempt: u32) -> Report {
        Report {
            token: RequestToken::random(),
            id,
            attempt,
            end: None,
            usage: None,
        }
    }

    /// An end report with a fresh token.
    pub fn finished(id: JobId, attempt: u32, end: JobEnd) -> Report {
        Report {
            token: RequestToken::random(),
            id,
            attempt,
            end: Some(end),
            usage: None,
        }
    }

    /// This end report with what the attempt used.
    pub fn with_usage(self, usage: xce_client::types::Usage) -> Report {
        Report {
            usage: Some(usage),
            ..self
        }
    }

    fn file_name(&self) -> String {
        let kind = if self.end.is_some() { "end" } else { "start" };
        format!("{}.{}.{kind}", self.id, self.attempt)
    }

    /// The bytes of the report's file.
    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(&ReportFile::from(self))
    }

    /// A report read back from its file: the file's last line (a record turned report holds
    /// the attempt's record above it).
    pub fn decode(bytes: &[u8]) -> Result<Report, serde_json::Error> {
        serde_json::from_slice::<ReportFile>(last_line(bytes)).map(Report::from)
    }
}

/// A report as its outbox file holds it: the worker's own file type, so that a serde
/// attribute on a client type can never change what a restarted worker must read back.
/// JSON, `{"token":N,"id":N,"attempt":N,"end":null|{"Exit":N}|{"Signal":N}|{"Failed":"..."}
/// |"OutOfMemory"|{"TimedOut":{"exit_code":N|null,"signal":N|null}}}`, then, on an end
/// measured, `,"usage":{"cpu_user_ms":N,"cpu_sys_ms":N,"max_rss_kb":N}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ReportFile {
    token: u128,
    id: JobId,
    attempt: u32,
    end: Option<EndFile>,
    /// Appended, and left out when nothing was measured: a file written before reads as
    /// measuring nothing, and an older worker reads a newer file as it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    usage: Option<xce_client::types::Usage>,
}

/// How an attempt ended, as a report file holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum EndFile {
    Exit(i32),
    Signal(i32),
    Failed(String),
    OutOfMemory,
    // Appended: files written before read the same.
    TimedOut {
        exit_code: Option<i32>,
        signal: Option<i32>,
    },
}

impl From<&Report> for ReportFile {
    fn from(r: &Report) -> Self {
        ReportFile {
            token: r.token.0,
            id: r.id,
            attempt: r.attempt,
            end: r.end.clone().map(|end| match end {
                JobEnd::Exit(c) => EndFile::Exit(c),
                JobEnd::Signal(s) => EndFile::Signal(s),
                JobEnd::Failed(why) => EndFile::Failed(why),
                JobEnd::OutOfMemory => EndFile::OutOfMemory,
                JobEnd::TimedOut { exit_code, signal } => EndFile::TimedOut { exit_code, signal },
            }),
            usage: r.usage,
        }
    }
}

impl From<ReportFile> for Report {
    fn from(f: ReportFile) -> Self {
        Report {
            token: RequestToken(f.token),
            id: f.id,
            attempt: f.attempt,
            end: f.end.map(|end| match end {
                EndFile::Exit(c) => JobEnd::Exit(c),
                EndFile::Signal(s) => JobEnd::Signal(s),
                EndFile::Failed(why) => JobEnd::Failed(why),
                EndFile::OutOfMemory => JobEnd::OutOfMemory,
                EndFile::TimedOut { exit_code, signal } => JobEnd::TimedOut { exit_code, signal },
            }),
            usage: f.usage,
        }
    }
}

/// The last non-empty line of `bytes` (all of it when it holds one line).
fn last_line(bytes: &[u8]) -> &[u8] {
    let trimmed = bytes.trim_ascii_end();
    match trimmed.iter().rposition(|&b| b == b'\n') {
        Some(at) => &trimmed[at + 1..],
        None => trimmed,
    }
}

/// Why the outbox could not do its job.
#[derive(Debug, thiserror::Error)]
#[error("outbox {path}: {source}")]
pub struct OutboxError {
    path: PathBuf,
    source: std::io::Error,
}

/// How many retired report files are kept as spares: enough for the records of the attempts
/// a busy worker starts while the reports of the last ones are acknowledged.
pub const SPARES_KEPT: usize = 256;

/// Retired report files, each to be some later attempt's record (see the module doc). Their
/// content is stale and never read: a spare is overwritten by its next user. Only the worker
/// hands them out, so no two shims are given the same one.
#[derive(Debug)]
pub struct Spares {
    dir: PathBuf,
    names: Mutex<Vec<PathBuf>>,
}

impl Spares {
    /// Opens (creating if needed) the spares under `spool`, keeping the ones a previous run
    /// left, up to [`SPARES_KEPT`]. Only plain files with no other name are kept: after a
    /// machine crash on a filesystem without a journal, a rename may leave a spare's old name
    /// beside its new one (a live report's or record's), and overwriting it would destroy
    /// that file. Any other entry is removed (a directory is left alone and not used).
    pub fn open(spool: &Path) -> std::io::Result<Spares> {
        use std::os::unix::fs::MetadataExt;
        let dir = spool.join("spare");
        std::fs::create_dir_all(&dir)?;
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&dir)?.flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                warn!(path = %path.display(), "a directory among the spare report files; not used");
                continue;
            }
            if meta.is_file() && meta.nlink() == 1 && names.len() < SPARES_KEPT {
                names.push(path);
            } else {
                // Removing this name leaves any other name of the same file as it was.
                let _ = std::fs::remove_file(&path);
            }
        }
        Ok(Spares {
            dir,
            names: Mutex::new(names),
        })
    }

    fn names(&self) -> std::sync::MutexGuard<'_, Vec<PathBuf>> {
        self.names.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves `file` in as a spare (it keeps its name, which no other file shares), or deletes
    /// it when there are [`SPARES_KEPT`] already, or when it cannot be moved (the spare
    /// directory was removed or made unwritable: the file must not stay where it was). A
    /// `file` that is not there is `NotFound`.
    pub fn keep(&self, file: &Path) -> std::io::Result<()> {
        let mut names = self.names();
        let name = file.file_name().filter(|_| names.len() < SPARES_KEPT);
        let Some(name) = name else {
            drop(names);
            return std::fs::remove_file(file);
        };
        let spare = self.dir.join(name);
        match std::fs::rename(file, &spare) {
            Ok(()) => {
                names.push(spare);
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !file.exists() => Err(e),
            Err(e) => {
                warn!(dir = %self.dir.display(), error = %e, "cannot keep a report file as a spare; deleting it");
                drop(names);
                std::fs::remove_file(file)
            }
        }
    }

    /// A spare for a new record, now the taker's (to rename into place), if there is one.
    pub fn take(&self) -> Option<PathBuf> {
        self.names().pop()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.names().len()
    }
}

/// The outbox directory.
#[derive(Debug, Clone)]
pub struct Outbox {
    dir: PathBuf,
}

impl Outbox {
    /// Opens (creating if needed) the outbox under `spool`.
    pub fn open(spool: &Path) -> Result<Outbox, OutboxError> {
        let dir = spool.join("outbox");
        std::fs::create_dir_all(&dir).map_err(|source| OutboxError {
            path: dir.clone(),
            source,
        })?;
        Ok(Outbox { dir })
    }

    /// Makes `report` durable (see the module doc for how durable).
    pub fn put(&self, report: &Report) -> Result<(), OutboxError> {
        let path = self.dir.join(report.file_name());
        let tmp = self.dir.join(format!(".{}.tmp", report.file_name()));
        let err = |source| OutboxError {
            path: path.clone(),
            source,
        };
        let bytes = report.encode().map_err(|e| err(std::io::Error::other(e)))?;
        let sync = report.end.is_some();
        let mut f = File::create(&tmp).map_err(err)?;
        f.write_all(&bytes).map_err(err)?;
        if sync {
            f.sync_all().map_err(err)?;
        }
        std::fs::rename(&tmp, &path).map_err(err)?;
        if sync {
            File::open(&self.dir)
                .and_then(|d| d.sync_all())
                .map_err(err)?;
        }
        Ok(())
    }

    /// Makes an end `report` durable in the attempt's `record` file and moves that file into
    /// the outbox as the report's: no file is created or deleted for it (see the module doc).
    /// Until the rename, the record still reads as the record (its first line); a torn
    /// append is never renamed.
    pub fn put_into_record(&self, record: &Path, report: &Report) -> Result<(), OutboxError> {
        let path = self.dir.join(report.file_name());
        let err = |source| OutboxError {
            path: path.clone(),
            source,
        };
        let mut line = report.encode().map_err(|e| err(std::io::Error::other(e)))?;
        line.push(b'\n');
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(record)
            .map_err(err)?;
        f.write_all(&line).map_err(err)?;
        f.sync_data().map_err(err)?;
        self.move_in(record, &path).map_err(err)
    }

    /// Moves into the outbox the end an attempt's `record` holds, if it holds one whole (its
    /// shim appended it, then died before the rename): the end is reported, not lost.
    pub fn take_from_record(&self, record: &Path) -> Option<Report> {
        let bytes = std::fs::read(record).ok()?;
        if !bytes.trim_ascii_end().contains(&b'\n') {
            return None;
        }
        let report = Report::decode(&bytes).ok().filter(|r| r.end.is_some())?;
        // The record's own end, not what a spare held before (a lost overwrite after a crash).
        let named = record
            .file_name()
            .and_then(|n| crate::procs::parse_name(&n.to_string_lossy()));
        if named != Some((report.id, report.attempt)) {
            warn!(record = %record.display(), "a record whose last line is another attempt's end; not reported");
            return None;
        }
        let path = self.dir.join(report.file_name());
        let moved = File::open(record)
            .and_then(|f| f.sync_data())
            .and_then(|()| self.move_in(record, &path));
        match moved {
            Ok(()) => Some(report),
            Err(e) => {
                warn!(record = %record.display(), error = %e, "cannot move a recorded end into the outbox");
                None
            }
        }
    }

    /// Renames `from` to `to` in the outbox and syncs the directory, so the name lasts.
    fn move_in(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        std::fs::rename(from, to)?;
        File::open(&self.dir).and_then(|d| d.sync_all())
    }

    /// Retires an acknowledged (or refused) report: its file becomes a spare, or is deleted
    /// when there are spares enough.
    pub fn retire(&self, report: &Report, spares: &Spares) -> Result<(), OutboxError> {
        let path = self.dir.join(report.file_name());
        match spares.keep(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(OutboxError { path, source }),
        }
    }

    /// Deletes an acknowledged (or refused) report.
    pub fn remove(&self, report: &Report) -> Result<(), OutboxError> {
        let path = self.dir.join(report.file_name());
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(OutboxError { path, source }),
        }
    }

    /// The end report of an attempt, if one is waiting (a shim writes it).
    pub fn end_of(&self, id: JobId, attempt: u32) -> Option<Report> {
        let bytes = std::fs::read(self.dir.join(format!("{id}.{attempt}.end"))).ok()?;
        Report::decode(&bytes)
            .ok()
            .filter(|r| r.id == id && r.attempt == attempt && r.end.is_some())
    }

    /// Every report still waiting, start before end for each attempt. Files that cannot be
    /// read or parsed are named in the error list and left in place for an operator.
    /// Unfinished writes are removed, except those of the `live` attempts (their shims may be
    /// writing them right now).
    pub fn load(
        &self,
        live: &HashSet<(JobId, u32)>,
    ) -> Result<(Vec<Report>, Vec<String>), OutboxError> {
        let entries = std::fs::read_dir(&self.dir).map_err(|source| OutboxError {
            path: self.dir.clone(),
            source,
        })?;
        let mut reports = Vec::new();
        let mut bad = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(tmp) = name.strip_prefix('.') {
                // A report whose write did not complete was never sent: nothing to redo.
                let mut parts = tmp.split('.');
                let key = (
                    parts.next().and_then(|id| id.parse().ok()),
                    parts.next().and_then(|a| a.parse().ok()),
                );
                let writing = match key {
                    (Some(id), Some(attempt)) => live.contains(&(id, attempt)),
                    _ => false,
                };
                if !writing {
                    let _ = std::fs::remove_file(&path);
                }
                continue;
            }
            let parsed = std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| Report::decode(&b).map_err(|e| e.to_string()));
            match parsed {
                Ok(r) if r.file_name() == name => reports.push(r),
                Ok(_) => bad.push(format!(
                    "{}: name does not match its content",
                    path.display()
                )),
                Err(e) => bad.push(format!("{}: {e}", path.display())),
            }
        }
        reports.sort_by_key(|r| (r.id, r.attempt, r.end.is_some()));
        Ok((reports, bad))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_survive_until_removed_in_start_then_end_order() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::open(dir.path()).unwrap();
        let end = Report::finished(7, 2, JobEnd::Signal(9));
        let start = Report::started(7, 2);
        let other = Report::started(3, 1);
        for r in [&end, &start, &other] {
            outbox.put(r).unwrap();
        }
        // A fresh handle on the same directory (a restarted worker) sees them all.
        let reopened = Outbox::open(dir.path()).unwrap();
        let (loaded, bad) = reopened.load(&HashSet::new()).unwrap();
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(loaded, vec![other.clone(), start.clone(), end.clone()]);
        reopened.remove(&start).unwrap();
        reopened.remove(&start).unwrap();
        assert_eq!(reopened.load(&HashSet::new()).unwrap().0, vec![other, end]);
    }

    /// The file format is what restarted workers read back: it must not change by accident.
    #[test]
    fn report_files_have_their_golden_bytes() {
        let cases = [
            (
                Report {
                    token: RequestToken(12_345),
                    id: 7,
                    attempt: 1,
                    end: Some(JobEnd::Exit(5)),
                    usage: None,
                },
                r#"{"token":12345,"id":7,"attempt":1,"end":{"Exit":5}}"#,
            ),
            (
                Report {
                    token: RequestToken(u128::MAX),
                    id: 8,
                    attempt: 2,
                    end: None,
                    usage: None,
                },
                r#"{"token":340282366920938463463374607431768211455,"id":8,"attempt":2,"end":null}"#,
            ),
            (
                Report {
                    token: RequestToken(1),
                    id: 9,
                    attempt: 3,
                    end: Some(JobEnd::Failed("no such file".into())),
                    usage: None,
                },
                r#"{"token":1,"id":9,"attempt":3,"end":{"Failed":"no such file"}}"#,
            ),
            (
                Report {
                    token: RequestToken(2),
                    id: 9,
                    attempt: 4,
                    end: Some(JobEnd::Signal(9)),
                    usage: None,
                },
                r#"{"token":2,"id":9,"attempt":4,"end":{"Signal":9}}"#,
            ),
            (
                Report {
                    token: RequestToken(3),
                    id: 10,
                    attempt: 1,
                    end: Some(JobEnd::Exit(0)),
                    usage: Some(xce_client::types::Usage {
                        cpu_user_ms: 1500,
                        cpu_sys_ms: 20,
                        max_rss_kb: 4096,
                    }),
                },
                r#"{"token":3,"id":10,"attempt":1,"end":{"Exit":0},"usage":{"cpu_user_ms":1500,"cpu_sys_ms":20,"max_rss_kb":4096}}"#,
            ),
        ];
        for (report, golden) in cases {
            assert_eq!(String::from_utf8(report.encode().unwrap()).unwrap(), golden);
            assert_eq!(Report::decode(golden.as_bytes()).unwrap(), report);
        }
    }

    #[test]
    fn unreadable_reports_are_named_and_kept_and_torn_writes_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::open(dir.path()).unwrap();
        std::fs::write(dir.path().join("outbox/5.1.end"), b"{not json").unwrap();
        std::fs::write(dir.path().join("outbox/.5.1.start.tmp"), b"{").unwrap();
        let (loaded, bad) = outbox.load(&HashSet::new()).unwrap();
        assert!(loaded.is_empty());
        assert_eq!(bad.len(), 1);
        assert!(bad[0].contains("5.1.end"), "{bad:?}");
        assert!(dir.path().join("outbox/5.1.end").exists());
        assert!(!dir.path().join("outbox/.5.1.start.tmp").exists());
    }

    fn record_of(dir: &Path, id: JobId, attempt: u32) -> (crate::procs::Records, PathBuf) {
        let records = crate::procs::Records::open(dir).unwrap();
        let record = crate::procs::AttemptRecord {
            job: crate::procs::ProcRecord {
                pid: 4321,
                start_ticks: 99,
            },
            shim: None,
        };
        records.remember(id, attempt, &record, None).unwrap();
        let path = records.path(id, attempt);
        (records, path)
    }

    #[test]
    fn a_record_becomes_its_attempts_end_report_without_a_file_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::open(dir.path()).unwrap();
        let (records, path) = record_of(dir.path(), 7, 2);
        let end = Report::finished(7, 2, JobEnd::Exit(3));
        outbox.put_into_record(&path, &end).unwrap();
        assert!(!path.exists(), "the record was moved");
        assert!(records.scan().unwrap().is_empty());
        assert_eq!(outbox.end_of(7, 2), Some(end.clone()));
        let (loaded, bad) = outbox.load(&HashSet::new()).unwrap();
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(loaded, vec![end.clone()]);
        // The file is the record's line, then the report's.
        let text = std::fs::read_to_string(dir.path().join("outbox/7.2.end")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0], r#"{"pid":4321,"start_ticks":99,"shim":null}"#);
        assert_eq!(Report::decode(lines[1].as_bytes()).unwrap(), end);
    }

    #[test]
    fn an_end_appended_but_not_moved_is_taken_in_and_a_torn_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::open(dir.path()).unwrap();
        let (records, whole) = record_of(dir.path(), 5, 1);
        let end = Report::finished(5, 1, JobEnd::Signal(9));
        let mut line = end.encode().unwrap();
        line.push(b'\n');
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&whole)
            .unwrap();
        f.write_all(&line).unwrap();
        // Until it is moved it still reads as the record.
        let scanned = records.scan().unwrap();
        assert_eq!(scanned.len(), 1);
        assert_eq!(scanned[0].1.map(|r| r.job.pid), Some(4321));
        assert_eq!(outbox.take_from_record(&whole), Some(end.clone()));
        assert!(!whole.exists());
        assert_eq!(outbox.end_of(5, 1), Some(end));

        let (_, torn) = record_of(dir.path(), 6, 1);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&torn)
            .unwrap();
        f.write_all(br#"{"token":1,"id":6,"att"#).unwrap();
        assert_eq!(outbox.take_from_record(&torn), None);
        assert!(torn.exists(), "a torn end stays a record");
        // A record with nothing appended is no end either.
        let (_, bare) = record_of(dir.path(), 8, 1);
        assert_eq!(outbox.take_from_record(&bare), None);
        assert!(bare.exists());
    }

    #[test]
    fn a_retired_report_s_file_becomes_the_next_record_and_no_file_is_created() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::open(dir.path()).unwrap();
        let spares = Spares::open(dir.path()).unwrap();
        let report = Report::finished(1, 1, JobEnd::Exit(0));
        outbox.put(&report).unwrap();
        let file = dir.path().join("outbox").join(report.file_name());
        let inode = std::fs::metadata(&file).unwrap().ino();
        outbox.retire(&report, &spares).unwrap();
        assert!(!file.exists());
        assert_eq!(spares.len(), 1);
        // Retiring it again (a report acknowledged twice) is no error and keeps nothing.
        outbox.retire(&report, &spares).unwrap();
        assert_eq!(spares.len(), 1);

        let records = crate::procs::Records::open(dir.path()).unwrap();
        let record = crate::procs::AttemptRecord {
            job: crate::procs::ProcRecord {
                pid: 77,
                start_ticks: 5,
            },
            shim: None,
        };
        let spare = spares.take().unwrap();
        records.remember(2, 1, &record, Some(&spare)).unwrap();
        let path = records.path(2, 1);
        assert_eq!(
            std::fs::metadata(&path).unwrap().ino(),
            inode,
            "a new file was created"
        );
        assert!(!spare.exists());
        // Only the record is in it: the old report is gone whole.
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert_eq!(
            crate::procs::AttemptRecord::decode(text.as_bytes()),
            Some(record)
        );
        // Without a spare (or with one that is gone) the record is a new file.
        records
            .remember(3, 1, &record, Some(&dir.path().join("spare/gone")))
            .unwrap();
        assert!(records.path(3, 1).exists());
    }

    #[test]
    fn spares_are_kept_up_to_their_limit_and_found_again_by_a_restarted_worker() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::open(dir.path()).unwrap();
        let spares = Spares::open(dir.path()).unwrap();
        for id in 0..(SPARES_KEPT as u64 + 5) {
            let report = Report::finished(id, 1, JobEnd::Exit(0));
            outbox.put(&report).unwrap();
            outbox.retire(&report, &spares).unwrap();
        }
        assert_eq!(spares.len(), SPARES_KEPT);
        let on_disk = std::fs::read_dir(dir.path().join("spare")).unwrap().count();
        assert_eq!(on_disk, SPARES_KEPT);
        assert_eq!(
            std::fs::read_dir(dir.path().join("outbox"))
                .unwrap()
                .count(),
            0
        );
        assert_eq!(Spares::open(dir.path()).unwrap().len(), SPARES_KEPT);
    }

    #[test]
    fn a_spare_with_another_name_or_not_a_plain_file_is_never_handed_out() {
        let dir = tempfile::tempdir().unwrap();
        let spare = dir.path().join("spare");
        std::fs::create_dir_all(&spare).unwrap();
        std::fs::create_dir_all(dir.path().join("outbox")).unwrap();
        std::fs::write(spare.join("1.1.end"), "x").unwrap();
        // A crash left a live report's old name among the spares.
        std::fs::write(dir.path().join("outbox/2.1.end"), "live").unwrap();
        std::fs::hard_link(dir.path().join("outbox/2.1.end"), spare.join("2.1.end")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", spare.join("3.1.end")).unwrap();
        std::fs::create_dir(spare.join("4.1.end")).unwrap();
        let spares = Spares::open(dir.path()).unwrap();
        assert_eq!(spares.take(), Some(spare.join("1.1.end")));
        assert_eq!(spares.take(), None);
        assert!(!spare.join("2.1.end").exists() && !spare.join("3.1.end").exists());
        let live = std::fs::read_to_string(dir.path().join("outbox/2.1.end")).unwrap();
        assert_eq!(live, "live");
    }

    #[test]
    fn a_report_is_deleted_when_the_spare_directory_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::open(dir.path()).unwrap();
        let spares = Spares::open(dir.path()).unwrap();
        std::fs::remove_dir(dir.path().join("spare")).unwrap();
        let report = Report::finished(5, 1, JobEnd::Exit(0));
        outbox.put(&report).unwrap();
        outbox.retire(&report, &spares).unwrap();
        assert!(!dir.path().join("outbox").join(report.file_name()).exists());
        assert_eq!(spares.len(), 0);
    }

    #[test]
    fn a_record_holding_another_attempt_s_end_is_not_taken_for_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::open(dir.path()).unwrap();
        let records = crate::procs::Records::open(dir.path()).unwrap();
        let stale = Report::finished(8, 1, JobEnd::Exit(0));
        let mut text = b"{\"pid\":1,\"start_ticks\":1}\n".to_vec();
        text.extend(stale.encode().unwrap());
        text.push(b'\n');
        let record = records.path(9, 1);
        std::fs::write(&record, &text).unwrap();
        assert_eq!(outbox.take_from_record(&record), None);
        assert!(outbox.end_of(8, 1).is_none());
    }
}
