//! The durable outbox: a job's start and end reports are written to disk (and synced) before
//! they are sent, and deleted only once the primary acknowledged them. After a reconnect or a
//! worker restart whatever is still here is sent again with its original request token, so
//! a report the primary already applied comes back `dupJob` and is applied once.
//!
//! One file per report: `<spool>/outbox/<job id>.<attempt>.start|end`, JSON, written to a
//! temporary name and renamed into place. End reports are synced (file and directory) before
//! they are sent: a finished job's result must survive even a machine crash, or the job would
//! run again. Start reports only need to survive the worker process (the page cache does
//! that): a machine crash kills the attempt too, and the resync then requeues or resends it.

use std::collections::HashSet;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use xce_client::types::{JobEnd, JobId, RequestToken};

/// One report waiting for its acknowledgement. On disk it is a [`ReportFile`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub token: RequestToken,
    pub id: JobId,
    pub attempt: u32,
    /// `None` for the start report; how the attempt ended for the end report.
    pub end: Option<JobEnd>,
}

impl Report {
    /// A start report with a fresh token.
    pub fn started(id: JobId, attempt: u32) -> Report {
        Report {
            token: RequestToken::random(),
            id,
            attempt,
            end: None,
        }
    }

    /// An end report with a fresh token.
    pub fn finished(id: JobId, attempt: u32, end: JobEnd) -> Report {
        Report {
            token: RequestToken::random(),
            id,
            attempt,
            end: Some(end),
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

    /// A report read back from its file.
    pub fn decode(bytes: &[u8]) -> Result<Report, serde_json::Error> {
        serde_json::from_slice::<ReportFile>(bytes).map(Report::from)
    }
}

/// A report as its outbox file holds it: the worker's own file type, so that a serde
/// attribute on a client type can never change what a restarted worker must read back.
/// JSON, `{"token":N,"id":N,"attempt":N,"end":null|{"Exit":N}|{"Signal":N}|{"Failed":"..."}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ReportFile {
    token: u128,
    id: JobId,
    attempt: u32,
    end: Option<EndFile>,
}

/// How an attempt ended, as a report file holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum EndFile {
    Exit(i32),
    Signal(i32),
    Failed(String),
    OutOfMemory,
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
            }),
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
            }),
        }
    }
}

/// Why the outbox could not do its job.
#[derive(Debug, thiserror::Error)]
#[error("outbox {path}: {source}")]
pub struct OutboxError {
    path: PathBuf,
    source: std::io::Error,
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
                },
                r#"{"token":12345,"id":7,"attempt":1,"end":{"Exit":5}}"#,
            ),
            (
                Report {
                    token: RequestToken(u128::MAX),
                    id: 8,
                    attempt: 2,
                    end: None,
                },
                r#"{"token":340282366920938463463374607431768211455,"id":8,"attempt":2,"end":null}"#,
            ),
            (
                Report {
                    token: RequestToken(1),
                    id: 9,
                    attempt: 3,
                    end: Some(JobEnd::Failed("no such file".into())),
                },
                r#"{"token":1,"id":9,"attempt":3,"end":{"Failed":"no such file"}}"#,
            ),
            (
                Report {
                    token: RequestToken(2),
                    id: 9,
                    attempt: 4,
                    end: Some(JobEnd::Signal(9)),
                },
                r#"{"token":2,"id":9,"attempt":4,"end":{"Signal":9}}"#,
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
}
