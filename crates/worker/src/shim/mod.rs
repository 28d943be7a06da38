//! The shim: one small supervisor process per attempt, the job's parent in place of the
//! worker. It outlives the worker, so what keeps a job from running twice at once does not die,
//! freeze or lose its network with the worker:
//!
//! - it stops the job once the worker's lease ([`crate::fence`]) has run out, whatever became of
//!   the worker;
//! - it records how the job ended, durably, in the worker's outbox, even while no worker runs;
//! - it is found again by a restarted worker through its record ([`crate::procs`]), which adopts
//!   it instead of killing and requeueing the job;
//! - it stops the job when the spool dir is gone, since nothing could report or adopt it.
//!
//! The worker's launcher ([`crate::launcher`]) forks it with the job's spec; run as
//! `xce-worker shim` instead it reads the spec as JSON on stdin. It says on stdout, one line,
//! `started <pid>` or `failed <reason>` (after its launcher's tag), then nothing more. The
//! worker steers it by signals: SIGUSR1 kills the job (SIGTERM, SIGKILL after the kill grace;
//! its end is reported), SIGTERM stops it unreported (the worker is stopping: the primary requeues it), SIGUSR2 kills it at
//! once, unreported (a stale copy). Suspend and resume go to the job's group directly; the
//! shim sees the job stopped or frozen, and leaves that time out of its time limit.
//!
//! By concern: `spec` (what the worker sends), `orders` (the worker's signals and why a job is
//! stopped), `supervise` (the running job), `spawn` (starting it); this file runs them in order.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
use tracing::{info, warn};
use xce_client::types::{JobEnd, JobId};

use crate::cgroup::{self, Cgroups, JobCgroup, Limits};
use crate::fence::{self, LeaseFile};
use crate::outbox::{Outbox, Report};
use crate::procs::{self, AttemptRecord, ProcRecord, Records};

mod orders;
mod spawn;
mod spec;
mod supervise;

use orders::*;
use spawn::*;
use supervise::*;

pub use orders::order_signals;
pub use spec::{limit_file, output_paths, write_limit, FencedCopy, Output, RunAs, ShimSpec};
use spec::{read_limit, Account};

/// The first argument that makes `xce-worker` a shim.
pub const SHIM_ARG: &str = "shim";

/// The shim stopped its job without an end of the job's own: nothing is reported.
pub const EXIT_UNREPORTED: i32 = 3;

/// How often the shim looks at the lease while nothing else happens.
const TICK: Duration = Duration::from_millis(100);

/// Runs a shim: reads its spec from stdin and supervises the job until it is over. Returns
/// the process exit code (0 once an end is recorded, [`EXIT_UNREPORTED`], 1 on failure).
pub fn main() -> i32 {
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut input) {
        warn!(error = %e, "shim: cannot read its spec");
        return 1;
    }
    let spec: ShimSpec = match serde_json::from_slice(&input) {
        Ok(spec) => spec,
        Err(e) => {
            warn!(error = %e, "shim: malformed spec");
            return 1;
        }
    };
    run_spec(&spec)
}

/// Supervises the attempt `spec` describes until it is over, in this process: an exec'd
/// shim or one the launcher forked ([`crate::launcher`]). Returns the process exit code.
pub fn run_spec(spec: &ShimSpec) -> i32 {
    let span = tracing::info_span!("job", id = spec.id, attempt = spec.attempt);
    let _entered = span.enter();
    let code = match run(spec) {
        Ok(code) => code,
        Err(e) => {
            warn!(error = %e, "shim failed");
            1
        }
    };
    // The job is over, or never started.
    remove_leftovers(spec);
    code
}

/// How a forked shim's one line is told apart on its launcher's pipe: `<seq> said `.
static ANNOUNCE_AS: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Makes this (forked) shim's line that of request `seq` of its launcher.
pub fn announce_as(seq: u64) {
    let _ = ANNOUNCE_AS.set(format!("{seq} said "));
}

fn run(spec: &ShimSpec) -> std::io::Result<i32> {
    // Listening before the job exists, so no order can kill the shim instead of steering it;
    // an order that came while a forked shim started is delivered now.
    let orders = Orders::listen()?;
    order_signals().thread_unblock()?;
    let outbox = Outbox::open(&spec.spool).map_err(std::io::Error::other)?;
    let records = Records::open(&spec.spool)?;
    let cgroup = spec.cgroups.as_ref().map(|c| c.job(spec.id, spec.attempt));
    if let Some(code) = spec
        .after
        .and_then(|older| wait_for_fenced_copy(spec, older, &orders, &outbox))
    {
        return code;
    }
    // A start that waited out the lease (the worker froze between the order and the spawn,
    // or this shim waited for an older copy) may have been superseded: no user code runs for
    // it. The resync places it again if not.
    let fence_at = LeaseFile::new(&spec.spool)
        .read()
        .unwrap_or(spec.fence_at_ms.map(Duration::from_millis));
    if let Some(late) = fence_at.and_then(|at| fence::now().checked_sub(at)) {
        warn!(?late, "not starting the job: this worker's lease ran out");
        tell_worker("failed the worker's lease ran out");
        return Ok(EXIT_UNREPORTED);
    }
    // An order that came while the shim got ready (a newer attempt fenced this one before
    // its job ran) is carried out without starting the job.
    if let Some(exit) = order_before_start(spec, &orders, &outbox) {
        return exit;
    }
    let mut child = match spawn_confined(spec) {
        Ok(child) => child,
        Err(reason) => {
            warn!(%reason, "job could not start");
            if let Some(cg) = &cgroup {
                cg.remove();
            }
            let end = Report::finished(spec.id, spec.attempt, JobEnd::Failed(reason.clone()));
            outbox.put(&end).map_err(std::io::Error::other)?;
            tell_worker(&format!("failed {reason}"));
            return Ok(0);
        }
    };
    let pid = child.id() as i32;
    let job = Confined {
        spec,
        pgid: pid,
        cgroup,
    };
    let record = AttemptRecord {
        job: ProcRecord::of(pid).unwrap_or(ProcRecord {
            pid,
            start_ticks: 0,
        }),
        shim: ProcRecord::of(std::process::id() as i32),
    };
    if let Err(e) = records.remember(spec.id, spec.attempt, &record, spec.spare.as_deref()) {
        // A restarted worker could not find it: it does not run.
        warn!(error = %e, "cannot record the job's process; killing it");
        job.kill_all();
        let _ = child.wait();
        if let Some(cg) = &job.cgroup {
            cg.remove();
        }
        tell_worker(&format!("failed cannot record the job's process: {e}"));
        return Ok(EXIT_UNREPORTED);
    }
    info!(pid, "job started");
    tell_worker(&format!("started {pid}"));
    let (status, stopping) = supervise(&job, &mut child, &orders)?;
    // The leader is gone; whatever it left behind goes with it: its group always, and what
    // left the group when there is a cgroup to find it or the job was being stopped anyway.
    if job.cgroup.is_some() || stopping.is_some() {
        job.kill_all();
    } else {
        procs::signal_group(pid, Signal::SIGKILL);
    }
    let out_of_memory = job.cgroup.as_ref().is_some_and(JobCgroup::oom_killed);
    let (cgroup_cpu, cgroup_peak) = job.cgroup.as_ref().map_or((None, None), JobCgroup::usage);
    if let Some(cg) = &job.cgroup {
        cg.remove();
    }
    let usage = crate::usage::combine(cgroup_cpu, cgroup_peak, crate::usage::of_children());
    let reporting = stopping.map_or(Reporting::End, |s| s.cause.reporting());
    if reporting == Reporting::Unreported {
        info!("job stopped; its end is not reported, so the primary requeues it");
        records.forget(spec.id, spec.attempt);
        return Ok(EXIT_UNREPORTED);
    }
    let end = match end_of(status) {
        JobEnd::Exit(code) if reporting == Reporting::TimedOut => JobEnd::TimedOut {
            exit_code: Some(code),
            signal: None,
        },
        JobEnd::Signal(sig) if reporting == Reporting::TimedOut => JobEnd::TimedOut {
            exit_code: None,
            signal: Some(sig),
        },
        // The kernel killed some process of the job for its memory limit, and the job did not
        // get over it.
        end if out_of_memory && end != JobEnd::Exit(0) => JobEnd::OutOfMemory,
        end => end,
    };
    info!(
        ?end,
        cpu_user_ms = usage.cpu_user_ms,
        cpu_sys_ms = usage.cpu_sys_ms,
        max_rss_kb = usage.max_rss_kb,
        "job ended"
    );
    let report = Report::finished(spec.id, spec.attempt, end).with_usage(usage);
    let record = records.path(spec.id, spec.attempt);
    // The record becomes the end report; only when it cannot is the report written apart and
    // the record forgotten.
    if let Err(e) = outbox.put_into_record(&record, &report) {
        warn!(error = %e, "cannot turn the attempt's record into its end report; writing the report apart");
        outbox.put(&report).map_err(std::io::Error::other)?;
        records.forget(spec.id, spec.attempt);
    }
    Ok(0)
}

/// Removes what the worker left for this attempt alone: its script copy and its limit file.
fn remove_leftovers(spec: &ShimSpec) {
    if let Some(script) = &spec.script {
        let _ = std::fs::remove_file(script);
    }
    let _ = std::fs::remove_file(limit_file(&spec.spool, spec.id, spec.attempt));
}

/// How the end of an attempt killed before its job started reads, wherever it was stopped:
/// the controller counts no run for it (`xce_client::types::KILLED_BEFORE_START`).
pub use xce_client::types::KILLED_BEFORE_START;

/// The one line the worker reads; it may be gone, which changes nothing here. A forked shim
/// writes it whole in one call (its launcher's other shims share the pipe), then lets go of
/// the pipe, so that it ends once the launcher and the shims still starting are gone.
fn tell_worker(line: &str) {
    let prefix = ANNOUNCE_AS.get().map_or("", String::as_str);
    let mut out = std::io::stdout().lock();
    let _ = out
        .write_all(format!("{prefix}{}\n", one_line(line, LINE_MAX)).as_bytes())
        .and_then(|()| out.flush());
    if ANNOUNCE_AS.get().is_some() {
        if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
            let _ = nix::unistd::dup2_stdout(&null);
        }
    }
}

/// The most a shim's line carries (bytes), well under `PIPE_BUF` (4096) with its tag: a
/// line written in one call is never interleaved with another shim's.
const LINE_MAX: usize = 3072;

/// `text` as one line of at most `max` bytes: control characters (a newline in a command or
/// a directory a user named, say) escaped, so that no text of a user's can make a line of
/// its own on the pipe a launcher's shims share and speak for another shim.
pub fn one_line(text: &str, max: usize) -> String {
    let mut line = String::with_capacity(text.len().min(max));
    for c in text.chars() {
        let piece: String = if c.is_control() {
            c.escape_default().collect()
        } else {
            c.to_string()
        };
        if line.len() + piece.len() > max {
            break;
        }
        line.push_str(&piece);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_suspended_does_not_count_against_the_limit() {
        let s = Duration::from_secs;
        let mut clock = RunClock::new(Some(s(10)));
        clock.tick(s(100), false);
        clock.tick(s(104), false);
        // Suspended from 104 to 110: the job is seen suspended at each look.
        clock.tick(s(107), true);
        clock.tick(s(110), true);
        assert!(!clock.reached());
        clock.tick(s(115), false);
        assert_eq!(clock.ran, s(9));
        assert!(!clock.reached());
        clock.tick(s(116), false);
        assert!(clock.reached());
        assert!(clock.within(s(0)) && !RunClock::new(None).within(s(1000)));
        // A stop caused by the limit is reported as a timeout, with the kill grace.
        assert_eq!(StopCause::TimeLimit.reporting(), Reporting::TimedOut);
        assert_eq!(StopCause::TimeLimit.grace(s(3)), s(3));
        assert_eq!(StopCause::Stale.grace(s(3)), Duration::ZERO);
        assert_eq!(StopCause::LeaseLost.reporting(), Reporting::Unreported);
    }

    #[test]
    fn a_line_for_the_worker_is_one_line_and_bounded() {
        assert_eq!(one_line("started 12", 64), "started 12");
        let forged = "failed command not found: x\n1 exit 1\r\n2 said started 1";
        let line = one_line(forged, LINE_MAX);
        assert!(!line.contains('\n') && !line.contains('\r'), "{line}");
        assert_eq!(
            line,
            "failed command not found: x\\n1 exit 1\\r\\n2 said started 1"
        );
        let long = "é".repeat(5000);
        let cut = one_line(&long, LINE_MAX);
        assert!(cut.len() <= LINE_MAX && cut.chars().all(|c| c == 'é'));
        assert!(cut.len() > LINE_MAX - 2);
    }
}
