//! Running one attempt of a job: its own process group, its command, environment and working
//! directory, stdout/stderr in `<spool>/<job id>.<attempt>.out|err`, and its start and end
//! reported to the primary. Supervision never waits on the controller: the process is waited
//! for while its start report is still being delivered.
//!
//! Not yet here (next steps of the worker issue): the durable outbox (reports are retried until
//! delivered or shutdown, but not persisted across a worker restart), kill/suspend/resume and
//! resync on rejoin.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use tokio::sync::watch;
use tracing::{info, warn};
use xce_client::ops::{JobFinished, JobStarted};
use xce_client::publish::publish_until_done;
use xce_client::types::{Job, JobEnd, RequestToken};
use xce_client::Client;

/// What every attempt needs.
pub struct Runner {
    pub client: Client,
    pub host: String,
    pub spool: PathBuf,
    pub stop: watch::Receiver<bool>,
}

/// Where an attempt's output goes.
pub fn output_paths(spool: &Path, id: u64, attempt: u32) -> (PathBuf, PathBuf) {
    (
        spool.join(format!("{id}.{attempt}.out")),
        spool.join(format!("{id}.{attempt}.err")),
    )
}

/// Runs one attempt to its end and reports it.
pub async fn run_attempt(runner: Arc<Runner>, job: Job, attempt: u32) {
    let id = job.id;
    let end = match spawn(&runner, &job, attempt) {
        Err(reason) => {
            warn!(job = id, attempt, %reason, "job could not start");
            JobEnd::Failed(reason)
        }
        Ok(mut child) => {
            info!(job = id, attempt, pid = child.id(), "job started");
            let reporter = runner.clone();
            let started = tokio::spawn(async move {
                let op = JobStarted {
                    token: RequestToken::random(),
                    host: reporter.host.clone(),
                    id,
                    attempt,
                };
                let mut stop = reporter.stop.clone();
                if let Err(e) = publish_until_done(&reporter.client, op, &mut stop).await {
                    warn!(job = id, attempt, error = %e, "start not reported");
                }
            });
            let status = child.wait().await;
            let _ = started.await;
            match status {
                Ok(s) => match (s.code(), s.signal()) {
                    (Some(code), _) => JobEnd::Exit(code),
                    (None, Some(sig)) => JobEnd::Signal(sig),
                    (None, None) => JobEnd::Failed("ended without exit code or signal".into()),
                },
                Err(e) => JobEnd::Failed(format!("lost track of the process: {e}")),
            }
        }
    };
    info!(job = id, attempt, ?end, "job ended");
    let op = JobFinished {
        token: RequestToken::random(),
        host: runner.host.clone(),
        id,
        attempt,
        end,
    };
    let mut stop = runner.stop.clone();
    if let Err(e) = publish_until_done(&runner.client, op, &mut stop).await {
        warn!(job = id, attempt, error = %e, "end not reported");
    }
}

fn spawn(runner: &Runner, job: &Job, attempt: u32) -> Result<tokio::process::Child, String> {
    let Some((program, args)) = job.spec.command.split_first() else {
        return Err("empty command".into());
    };
    let (out, err) = output_paths(&runner.spool, job.id, attempt);
    let open = |p: &Path| {
        std::fs::File::create(p).map_err(|e| format!("cannot create {}: {e}", p.display()))
    };
    let cwd = if job.spec.cwd.is_empty() {
        runner.spool.clone()
    } else {
        PathBuf::from(&job.spec.cwd)
    };
    if !cwd.is_dir() {
        return Err(format!(
            "working directory {} does not exist",
            cwd.display()
        ));
    }
    tokio::process::Command::new(program)
        .args(args)
        .envs(job.spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&cwd)
        .stdin(Stdio::null())
        .stdout(open(&out)?)
        .stderr(open(&err)?)
        // Its own process group: kill and suspend reach the whole job, not just its leader.
        .process_group(0)
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("command not found: {program}"),
            std::io::ErrorKind::PermissionDenied => format!("permission denied: {program}"),
            _ => format!("cannot start {program}: {e}"),
        })
}
