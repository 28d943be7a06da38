//! The history checker: what every client was told and what every job recorded, judged
//! after the run. Pure: it reads records, never the cluster.
//!
//! - **Exactly once**: every submit a client saw acknowledged exists as exactly one job (by
//!   its unique name), with the id the client was given; an unacknowledged one at most once.
//! - **Never two runs at once**: from the jobs' own records (start, a line every 200 ms while
//!   alive, end; each line with its shell's pid), no two runs of a job overlap in time — two
//!   attempts, or two copies of one.
//! - **No attempt ran twice**: a job that runs again (its worker died mid-run, its host was
//!   lost) does so as a new attempt, so nothing an old copy left can pass for the new one.
//! - **Every job final**, and every job succeeded (each runs a script that exits 0), but for
//!   those given a time limit shorter than their run: each of those **timed out, once, never
//!   before its limit** (it ended with result `timeout`; its last run lasted at least the limit,
//!   by its own records, and no run outlived it).
//! - **Dependents waited**: a job submitted to wait for another (`afterok`, or `afterany`
//!   after one that times out) started no run before that job's last run ended, by both
//!   jobs' own records; and, as every job, ran once per attempt and ended.
//! - **Array tasks once**: an acknowledged array submit's tasks each became one job of its
//!   own (no index twice, none missing), and each ran; as jobs they are held to every check
//!   above (their name is their array's, so the exactly-once check counts the array alone).
//! - **Client errors**: a failed call is allowed only as `clusterNotReady` (HTTP 503), and
//!   only while a majority of controllers was down (a window the nemesis recorded).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

/// One submit as its client saw it.
#[derive(Debug, Clone)]
pub struct Submit {
    /// The job's unique name (also the HTTP idempotency key).
    pub name: String,
    /// `cli` or `http`.
    pub via: &'static str,
    /// When the call started and ended, since the run began.
    pub started: Duration,
    pub ended: Duration,
    pub outcome: Result<u64, ClientFailure>,
    /// The job it was submitted to wait for (`--dependency afterok:ID`, or `afterany:ID`).
    pub after: Option<u64>,
}

/// Why a submit failed, as its client reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFailure {
    /// The CLI's JSON error code, or `http <status>`, or `transport`.
    pub code: String,
    pub message: String,
}

impl ClientFailure {
    /// The one failure a client may see, and only while a majority is down.
    fn is_not_ready(&self) -> bool {
        self.code == "clusterNotReady" || self.code == "http 503"
    }
}

/// One job as the cluster lists it at the end.
#[derive(Debug, Clone)]
pub struct FinalJob {
    pub id: u64,
    pub name: String,
    pub state: String,
    pub reason: Option<String>,
    /// How it ended (`timeout`, ...), once it has.
    pub result: Option<String>,
    /// Its time limit in seconds, if it was given one.
    pub time_limit_s: Option<u32>,
    pub attempt: u32,
    /// The array it is a task of, and its index.
    pub task_of: Option<(u64, u32)>,
    /// An array's own record: how many tasks it has.
    pub tasks: Option<u64>,
}

/// How far a job's own records may stray from its time limit: its shell notes a line every
/// 200 ms, starts a moment after its shim's clock does, and dies at SIGTERM.
const LIMIT_SLACK: Duration = Duration::from_millis(400);

/// One run of a job, as its shell recorded it (nanoseconds of the wall clock): an attempt,
/// and the pid of the shell that ran it (two copies of one attempt are two runs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AttemptRecord {
    pub attempt: u32,
    pub pid: u32,
    pub starts: u32,
    pub first_ns: u64,
    pub last_ns: u64,
    pub ended: bool,
    /// The names the run's script wrote as its own (`own ATTEMPT NANOS PID NAME`): a job
    /// submitted as a script writes its submit's name, once per run.
    pub own: Vec<String>,
}

/// Parses one job's record file: lines `start|alive|end ATTEMPT NANOS PID`, and `own
/// ATTEMPT NANOS PID NAME`. Malformed lines (a line torn by a kill) are skipped.
pub fn parse_records(text: &str) -> Vec<AttemptRecord> {
    let mut runs: BTreeMap<(u32, u32), AttemptRecord> = BTreeMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let (kind, attempt, ns, pid, own) = match parts[..] {
            [kind, attempt, ns, pid] => (kind, attempt, ns, pid, None),
            ["own", attempt, ns, pid, name] => ("own", attempt, ns, pid, Some(name)),
            _ => continue,
        };
        let (Ok(attempt), Ok(ns), Ok(pid)) = (
            attempt.parse::<u32>(),
            ns.parse::<u64>(),
            pid.parse::<u32>(),
        ) else {
            continue;
        };
        let rec = runs.entry((attempt, pid)).or_insert(AttemptRecord {
            attempt,
            pid,
            first_ns: ns,
            last_ns: ns,
            ..AttemptRecord::default()
        });
        rec.first_ns = rec.first_ns.min(ns);
        rec.last_ns = rec.last_ns.max(ns);
        match kind {
            "start" => rec.starts += 1,
            "end" => rec.ended = true,
            _ => {}
        }
        if let Some(name) = own {
            rec.own.push(name.to_string());
        }
    }
    runs.into_values().collect()
}

/// A span of the run during which a majority of controllers was down.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Window {
    /// When the fault began (ms into the run).
    pub from_ms: u64,
    /// When the cluster was whole again: healed, and ready with a primary.
    pub to_ms: u64,
}

/// Everything the checker reads.
#[derive(Debug, Default, Clone)]
pub struct History {
    pub submits: Vec<Submit>,
    pub jobs: Vec<FinalJob>,
    /// Each job's attempts as it recorded them, by id.
    pub records: BTreeMap<u64, Vec<AttemptRecord>>,
    pub majority_down: Vec<Window>,
}

/// The verdict: each check, and the first few violations of each.
#[derive(Debug, Default, Serialize)]
pub struct Verdict {
    pub acknowledged_exactly_once: bool,
    pub never_two_runs_at_once: bool,
    pub no_attempt_ran_twice: bool,
    pub every_job_final: bool,
    pub every_job_succeeded: bool,
    pub timed_out_once_never_early: bool,
    pub only_allowed_client_errors: bool,
    /// Every job submitted as a script on standard input ran its own script, once per run.
    pub scripts_ran_their_own: bool,
    /// No job that waited for another started before that one's last run ended.
    pub dependents_waited: bool,
    /// Every task of every acknowledged array became one job, and ran.
    pub array_tasks_once: bool,
    pub violations: Vec<String>,
}

impl Verdict {
    pub fn ok(&self) -> bool {
        self.acknowledged_exactly_once
            && self.never_two_runs_at_once
            && self.no_attempt_ran_twice
            && self.every_job_final
            && self.every_job_succeeded
            && self.timed_out_once_never_early
            && self.only_allowed_client_errors
            && self.scripts_ran_their_own
            && self.dependents_waited
            && self.array_tasks_once
    }
}

/// At most this many violations are listed per check.
const LISTED: usize = 5;

/// Judges a history.
pub fn check(h: &History) -> Verdict {
    let once = exactly_once(h);
    let overlaps = overlapping_attempts(h);
    let twice = attempts_run_twice(h);
    let not_final: Vec<String> = h
        .jobs
        .iter()
        .filter(|j| !matches!(j.state.as_str(), "done" | "exited"))
        .map(|j| format!("job {} ({}) is still {}", j.id, j.name, j.state))
        .collect();
    let failed: Vec<String> = h
        .jobs
        .iter()
        .filter(|j| j.state == "exited" && j.time_limit_s.is_none())
        .map(|j| {
            format!(
                "job {} ({}) exited: {}",
                j.id,
                j.name,
                j.reason.as_deref().unwrap_or("-")
            )
        })
        .collect();
    let limits = time_limits(h);
    let errors = client_errors(h);
    let scripts = own_scripts(h);
    let waited = dependents_waited(h);
    let tasks = array_tasks_once(h);
    let mut violations = Vec::new();
    for list in [
        &once, &overlaps, &twice, &not_final, &failed, &limits, &errors, &scripts, &waited, &tasks,
    ] {
        violations.extend(list.iter().take(LISTED).cloned());
    }
    Verdict {
        acknowledged_exactly_once: once.is_empty(),
        never_two_runs_at_once: overlaps.is_empty(),
        no_attempt_ran_twice: twice.is_empty(),
        every_job_final: not_final.is_empty(),
        every_job_succeeded: failed.is_empty(),
        timed_out_once_never_early: limits.is_empty(),
        only_allowed_client_errors: errors.is_empty(),
        scripts_ran_their_own: scripts.is_empty(),
        dependents_waited: waited.is_empty(),
        array_tasks_once: tasks.is_empty(),
        violations,
    }
}

/// Each job that waited for another started its first run after that one's last run ended
/// (both by their own records). A parent that never ran leaves nothing to compare: such a
/// dependent is judged by the other checks (it must still have run, once, and ended).
fn dependents_waited(h: &History) -> Vec<String> {
    let mut out = Vec::new();
    for s in &h.submits {
        let (Some(parent), Ok(child)) = (s.after, &s.outcome) else {
            continue;
        };
        let runs = |id: &u64| -> Vec<&AttemptRecord> {
            h.records
                .get(id)
                .into_iter()
                .flatten()
                .filter(|r| r.starts > 0)
                .collect()
        };
        // An array ran as its tasks: it ended when the last of them did.
        let mut ran = vec![parent];
        ran.extend(tasks_of(h, parent).map(|t| t.id));
        let parent_end = ran.iter().flat_map(runs).map(|r| r.last_ns).max();
        let child_start = runs(child).iter().map(|r| r.first_ns).min();
        if let (Some(end), Some(start)) = (parent_end, child_start) {
            if start < end {
                out.push(format!(
                    "job {child} ({}) started {} ms before job {parent}, which it waited for, \
                     ended",
                    s.name,
                    (end - start) / 1_000_000
                ));
            }
        }
    }
    out
}

/// The submit kind of a job script on the CLI's standard input, with its options in `#XCE`
/// lines.
pub const CLI_SCRIPT: &str = "cli-script";

/// Each run of a job submitted as a script wrote its own submit's name once: the script the
/// cluster stored and ran is the one submitted, and no other job's.
fn own_scripts(h: &History) -> Vec<String> {
    let mut out = Vec::new();
    for s in h.submits.iter().filter(|s| s.via == CLI_SCRIPT) {
        let Ok(id) = s.outcome else { continue };
        for run in h
            .records
            .get(&id)
            .into_iter()
            .flatten()
            .filter(|r| r.starts > 0)
        {
            if run.own != [s.name.clone()] {
                out.push(format!(
                    "job {id} ({}) run of attempt {} (pid {}) ran as its own {:?}",
                    s.name, run.attempt, run.pid, run.own
                ));
            }
        }
    }
    out
}

/// The tasks of array `id` that became jobs of their own.
fn tasks_of(h: &History, id: u64) -> impl Iterator<Item = &FinalJob> {
    h.jobs
        .iter()
        .filter(move |j| j.task_of.is_some_and(|(array, _)| array == id))
}

/// Each acknowledged array's tasks became one job each, every index once, and each ran.
fn array_tasks_once(h: &History) -> Vec<String> {
    let mut out = Vec::new();
    for array in h.jobs.iter().filter(|j| j.tasks.is_some()) {
        let mut seen = BTreeMap::new();
        for task in tasks_of(h, array.id) {
            let index = task.task_of.map_or(0, |(_, i)| i);
            if let Some(other) = seen.insert(index, task.id) {
                out.push(format!(
                    "array {} task {index} is jobs {other} and {}",
                    array.id, task.id
                ));
            }
            let ran = h
                .records
                .get(&task.id)
                .is_some_and(|runs| runs.iter().any(|r| r.starts > 0));
            if !ran {
                out.push(format!(
                    "array {} task {index} (job {}) never ran",
                    array.id, task.id
                ));
            }
        }
        let want = array.tasks.unwrap_or(0);
        if seen.len() as u64 != want {
            out.push(format!(
                "array {} ({}) has {} of its {want} tasks as jobs",
                array.id,
                array.name,
                seen.len()
            ));
        }
    }
    out
}

fn exactly_once(h: &History) -> Vec<String> {
    let mut by_name: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    // A task carries its array's name: the array is the submit.
    for j in h.jobs.iter().filter(|j| j.task_of.is_none()) {
        by_name.entry(j.name.as_str()).or_default().push(j.id);
    }
    let mut out = Vec::new();
    for s in &h.submits {
        let ids = by_name.get(s.name.as_str()).map_or(&[][..], Vec::as_slice);
        match &s.outcome {
            Ok(id) if ids != [*id] => out.push(format!(
                "{} submit {} was acknowledged as job {id}, the cluster has {ids:?}",
                s.via, s.name
            )),
            Err(_) if ids.len() > 1 => out.push(format!(
                "{} submit {} (failed) exists as jobs {ids:?}",
                s.via, s.name
            )),
            _ => {}
        }
    }
    out
}

fn overlapping_attempts(h: &History) -> Vec<String> {
    let mut out = Vec::new();
    for (id, attempts) in &h.records {
        for a in attempts.iter().filter(|a| a.starts > 1) {
            out.push(format!(
                "job {id} attempt {} started {} times",
                a.attempt, a.starts
            ));
        }
        let mut spans: Vec<&AttemptRecord> = attempts.iter().collect();
        spans.sort_by_key(|a| a.first_ns);
        for pair in spans.windows(2) {
            if pair[1].first_ns <= pair[0].last_ns {
                out.push(format!(
                    "job {id}: attempt {} (pid {}) started {} ms before attempt {} (pid {}) was \
                     last alive",
                    pair[1].attempt,
                    pair[1].pid,
                    (pair[0].last_ns - pair[1].first_ns) / 1_000_000,
                    pair[0].attempt,
                    pair[0].pid
                ));
            }
        }
    }
    out
}

fn attempts_run_twice(h: &History) -> Vec<String> {
    let mut out = Vec::new();
    for (id, runs) in &h.records {
        let mut pids: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for r in runs {
            pids.entry(r.attempt).or_default().push(r.pid);
        }
        for (attempt, pids) in pids.iter().filter(|(_, p)| p.len() > 1) {
            out.push(format!(
                "job {id} attempt {attempt} ran {} times (pids {pids:?})",
                pids.len()
            ));
        }
    }
    out
}

/// Every job given a limit shorter than its run ended `timeout` (the state machine ends a job
/// once), its last run lasted the limit (never stopped early), and no run outlived it.
fn time_limits(h: &History) -> Vec<String> {
    let mut out = Vec::new();
    for j in &h.jobs {
        let Some(limit_s) = j.time_limit_s else {
            continue;
        };
        let limit = Duration::from_secs(limit_s.into());
        if (j.state.as_str(), j.result.as_deref()) != ("exited", Some("timeout")) {
            out.push(format!(
                "job {} ({}) with a {limit_s} s limit ended {} ({})",
                j.id,
                j.name,
                j.state,
                j.result.as_deref().unwrap_or("no result")
            ));
            continue;
        }
        let runs = h.records.get(&j.id).map_or(&[][..], Vec::as_slice);
        let span = |r: &AttemptRecord| Duration::from_nanos(r.last_ns.saturating_sub(r.first_ns));
        if let Some(r) = runs.iter().find(|r| span(r) > limit + LIMIT_SLACK) {
            out.push(format!(
                "job {} attempt {} ran {:?}, past its {limit_s} s limit",
                j.id,
                r.attempt,
                span(r)
            ));
        }
        match runs.iter().max_by_key(|r| r.first_ns) {
            Some(last) if last.ended => out.push(format!(
                "job {} timed out, yet its last run (attempt {}) ran to its end",
                j.id, last.attempt
            )),
            Some(last) if span(last) + LIMIT_SLACK < limit => out.push(format!(
                "job {} timed out after {:?}, before its {limit_s} s limit",
                j.id,
                span(last)
            )),
            Some(_) => {}
            None => out.push(format!("job {} timed out without ever running", j.id)),
        }
    }
    out
}

fn client_errors(h: &History) -> Vec<String> {
    let in_window = |s: &Submit| {
        h.majority_down.iter().any(|w| {
            let from = Duration::from_millis(w.from_ms);
            // A window ends once the cluster is whole again, so a call that began after it
            // had a primary to find; one begun inside may end after it.
            let to = Duration::from_millis(w.to_ms);
            s.started <= to && s.ended >= from
        })
    };
    h.submits
        .iter()
        .filter_map(|s| {
            let Err(e) = &s.outcome else { return None };
            if e.is_not_ready() && in_window(s) {
                return None;
            }
            Some(format!(
                "{} submit {} at {:.1}s–{:.1}s failed: {} ({}){}",
                s.via,
                s.name,
                s.started.as_secs_f64(),
                s.ended.as_secs_f64(),
                e.code,
                e.message,
                if e.is_not_ready() {
                    " while a majority was up"
                } else {
                    ""
                }
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn submit(name: &str, outcome: Result<u64, ClientFailure>, at_s: u64) -> Submit {
        Submit {
            name: name.into(),
            via: "cli",
            started: Duration::from_secs(at_s),
            ended: Duration::from_secs(at_s + 1),
            outcome,
            after: None,
        }
    }

    fn job(id: u64, name: &str, state: &str) -> FinalJob {
        FinalJob {
            id,
            name: name.into(),
            state: state.into(),
            reason: None,
            result: None,
            time_limit_s: None,
            attempt: 1,
            task_of: None,
            tasks: None,
        }
    }

    fn not_ready() -> ClientFailure {
        ClientFailure {
            code: "clusterNotReady".into(),
            message: "no primary".into(),
        }
    }

    fn clean() -> History {
        History {
            submits: vec![submit("a", Ok(1), 1), submit("b", Err(not_ready()), 10)],
            jobs: vec![job(1, "a", "done")],
            records: BTreeMap::from([(
                1,
                parse_records(
                    "start 1 100 7\nalive 1 200 7\nend 1 300 7\nstart 2 301 8\nend 2 400 8\n",
                ),
            )]),
            // "b" failed from 10 s to 11 s: begun inside the window, ended after it.
            majority_down: vec![Window {
                from_ms: 9_000,
                to_ms: 10_500,
            }],
        }
    }

    #[test]
    fn a_script_job_must_run_its_own_script_once_per_run() {
        let mut h = clean();
        h.submits[0].via = CLI_SCRIPT;
        assert!(!check(&h).scripts_ran_their_own, "no own line at all");
        h.records.insert(
            1,
            parse_records("start 1 100 7\nown 1 101 7 a\nend 1 300 7\n"),
        );
        assert!(check(&h).ok(), "{:?}", check(&h));
        h.records.insert(
            1,
            parse_records("start 1 100 7\nown 1 101 7 b\nend 1 300 7\n"),
        );
        let v = check(&h);
        assert!(!v.scripts_ran_their_own && !v.ok());
        assert!(v.violations[0].contains("[\"b\"]"), "{v:?}");
    }

    #[test]
    fn a_dependent_that_started_before_its_parent_ended_is_caught() {
        let mut h = clean();
        h.submits.push(Submit {
            after: Some(1),
            ..submit("c", Ok(2), 2)
        });
        h.jobs.push(job(2, "c", "done"));
        // Job 1's last run ended at 400 ns; job 2 started after it.
        h.records.insert(
            2,
            parse_records(
                "start 1 450 9
end 1 500 9
",
            ),
        );
        assert!(check(&h).ok(), "{:?}", check(&h));
        h.records.insert(
            2,
            parse_records(
                "start 1 350 9
end 1 500 9
",
            ),
        );
        let v = check(&h);
        assert!(!v.dependents_waited && !v.ok());
        assert!(v.violations[0].contains("job 2 (c) started"), "{v:?}");
    }

    /// An array's tasks each became one job and ran; one missing, one twice or one that
    /// never ran is caught, and the array's submit is judged by the array alone.
    #[test]
    fn an_array_whose_task_is_missing_doubled_or_unrun_is_caught() {
        let mut h = clean();
        h.submits.push(submit("arr", Ok(2), 2));
        h.jobs.push(FinalJob {
            tasks: Some(2),
            ..job(2, "arr", "done")
        });
        for (id, index) in [(3, 0), (4, 1)] {
            h.jobs.push(FinalJob {
                task_of: Some((2, index)),
                ..job(id, "arr", "done")
            });
            h.records
                .insert(id, parse_records("start 1 100 7\nend 1 300 7\n"));
        }
        assert!(check(&h).ok(), "{:?}", check(&h));
        let mut unrun = h.clone();
        unrun.records.remove(&4);
        let v = check(&unrun);
        assert!(!v.array_tasks_once, "{v:?}");
        assert!(
            v.violations.iter().any(|m| m.contains("never ran")),
            "{v:?}"
        );
        let mut doubled = h.clone();
        doubled.jobs[3].task_of = Some((2, 0));
        let v = check(&doubled);
        assert!(!v.array_tasks_once, "{v:?}");
        assert!(
            v.violations.iter().any(|m| m.contains("task 0 is jobs")),
            "{v:?}"
        );
        let mut missing = h;
        missing.jobs.pop();
        missing.records.remove(&4);
        let v = check(&missing);
        assert!(
            v.violations.iter().any(|m| m.contains("1 of its 2 tasks")),
            "{v:?}"
        );
    }

    #[test]
    fn a_clean_history_passes_every_check() {
        let v = check(&clean());
        assert!(v.ok(), "{v:?}");
    }

    #[test]
    fn a_lost_or_doubled_submit_fails_exactly_once() {
        let mut lost = clean();
        lost.jobs.clear();
        assert!(!check(&lost).acknowledged_exactly_once);
        let mut doubled = clean();
        doubled.jobs.push(job(2, "a", "done"));
        let v = check(&doubled);
        assert!(!v.acknowledged_exactly_once);
        assert!(v.violations[0].contains("[1, 2]"), "{:?}", v.violations);
        let mut failed_twice = clean();
        failed_twice.jobs.push(job(2, "b", "done"));
        failed_twice.jobs.push(job(3, "b", "done"));
        assert!(!check(&failed_twice).acknowledged_exactly_once);
    }

    #[test]
    fn overlapping_runs_and_an_attempt_run_twice_fail() {
        let mut overlap = clean();
        overlap.records.insert(
            1,
            parse_records("start 1 100 7\nalive 1 500 7\nstart 2 400 8\nend 2 600 8\n"),
        );
        let v = check(&overlap);
        assert!(!v.never_two_runs_at_once, "{v:?}");
        // Two copies of one attempt at once.
        let mut copies = clean();
        copies.records.insert(
            1,
            parse_records("start 1 100 7\nstart 1 150 9\nalive 1 180 7\nend 1 200 9\n"),
        );
        assert!(!check(&copies).never_two_runs_at_once);
        // One attempt run again once its first copy stopped: not at once, but twice.
        let mut again = clean();
        again.records.insert(
            1,
            parse_records("start 1 100 7\nalive 1 150 7\nstart 1 300 9\nend 1 400 9\n"),
        );
        let v = check(&again);
        assert!(v.never_two_runs_at_once && !v.no_attempt_ran_twice, "{v:?}");
        // A torn last line is no evidence either way.
        let mut torn = clean();
        torn.records
            .insert(1, parse_records("start 1 100 7\nalive 1 2\nali"));
        assert!(check(&torn).never_two_runs_at_once);
    }

    #[test]
    fn unfinished_or_failed_jobs_fail() {
        let mut pending = clean();
        pending.jobs[0].state = "running".into();
        assert!(!check(&pending).every_job_final);
        let mut exited = clean();
        exited.jobs[0].state = "exited".into();
        let v = check(&exited);
        assert!(v.every_job_final && !v.every_job_succeeded);
    }

    #[test]
    fn a_limited_job_must_time_out_once_at_its_limit() {
        let s = 1_000_000_000u64;
        let mut timed = clean();
        timed.jobs.push(FinalJob {
            result: Some("timeout".into()),
            time_limit_s: Some(1),
            ..job(2, "t", "exited")
        });
        // Its first run stopped by a lost host after 0.5 s, its second at the limit.
        let text = format!(
            "start 1 {} 7\nalive 1 {} 7\nstart 2 {} 8\nalive 2 {} 8\n",
            s,
            s + s / 2,
            3 * s,
            3 * s + 9 * s / 10
        );
        timed.records.insert(2, parse_records(&text));
        let v = check(&timed);
        assert!(v.ok(), "{v:?}");
        // It ended otherwise, or early, or ran past its limit, or to its own end.
        let mut done = timed.clone();
        done.jobs[1].result = Some("completed".into());
        assert!(!check(&done).timed_out_once_never_early);
        let mut early = timed.clone();
        early.records.insert(
            2,
            parse_records(&format!("start 1 {s} 7\nalive 1 {} 7\n", s + s / 3)),
        );
        assert!(!check(&early).timed_out_once_never_early);
        let mut late = timed.clone();
        late.records.insert(
            2,
            parse_records(&format!("start 1 {s} 7\nalive 1 {} 7\n", 3 * s)),
        );
        assert!(!check(&late).timed_out_once_never_early);
        let mut ended = timed.clone();
        ended.records.insert(
            2,
            parse_records(&format!("start 1 {s} 7\nend 1 {} 7\n", 2 * s)),
        );
        assert!(!check(&ended).timed_out_once_never_early);
        // And it is not counted as a failed job.
        assert!(check(&timed).every_job_succeeded);
    }

    #[test]
    fn errors_pass_only_as_not_ready_while_a_majority_is_down() {
        let mut outside = clean();
        outside.majority_down.clear();
        assert!(!check(&outside).only_allowed_client_errors);
        let mut other = clean();
        other.submits[1].outcome = Err(ClientFailure {
            code: "internal".into(),
            message: "boom".into(),
        });
        assert!(!check(&other).only_allowed_client_errors);
        // Begun once the cluster was whole again, even just after: not caused by it.
        let mut after = clean();
        after.submits[1].started = Duration::from_millis(10_600);
        after.submits[1].ended = Duration::from_millis(10_700);
        assert!(!check(&after).only_allowed_client_errors);
        // Long after the window: not caused by it.
        let mut late = clean();
        late.submits[1].started = Duration::from_secs(60);
        late.submits[1].ended = Duration::from_secs(61);
        assert!(!check(&late).only_allowed_client_errors);
    }
}
