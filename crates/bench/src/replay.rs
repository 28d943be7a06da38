//! `xce-bench replay`: a workload trace in the Standard Workload Format ([`crate::swf`])
//! replayed through the scheduler's own placement code (`xce_scheduler::place::plan_at`, with
//! its backfill) on a virtual clock: no daemons and no sleeping, each round decided at the time
//! a job is submitted or ends. A job runs for its logged run time from the round that places
//! it, so waits come from the policy alone.
//!
//! It prints, as JSON lines: `replay_jobs` (jobs replayed), `replay_utilization` (busy
//! processor-seconds over those the machine had from the first submit to the last end),
//! `replay_mean_wait_s`, `replay_mean_bsld` (mean bounded slowdown,
//! `max(1, (wait + run) / max(run, 10))`), `replay_left_out` (jobs the trace does not give a
//! size and run time, or larger than one host: jobs span one host until jobs across hosts
//! exist), `replay_rounds` and `replay_seconds` (the replay's own wall time).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;
use xce_client::fit::Resources;
use xce_client::types::{HostState, JobId, JobUsers, Placement};
use xce_scheduler::place::plan_at;
use xce_scheduler::view::{HostView, PendingJob, PlacedJob, QueueView, View};

use crate::metric_with;
use crate::swf::{SwfJob, Trace};

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The trace, in the Standard Workload Format.
    #[arg(long)]
    swf: Option<PathBuf>,
    /// `fcfs`: strict priority, nothing passes a job that does not fit; `backfill`: jobs
    /// start before the reserved starts of blocked ones when they delay none.
    #[arg(long, value_enum, default_value = "backfill")]
    policy: Policy,
    /// Blocked jobs given a reserved start each round, with `--policy backfill` (1: EASY).
    #[arg(long, default_value_t = xce_scheduler::config::DEFAULT_BACKFILL_DEPTH)]
    depth: u32,
    /// Hosts to replay on (with `--cpus-per-host`); default one host of the trace's size
    /// (its `MaxProcs`, else its widest job).
    #[arg(long, requires = "cpus_per_host")]
    hosts: Option<u32>,
    #[arg(long, requires = "hosts")]
    cpus_per_host: Option<u32>,
    /// Instead of replaying, write a synthetic trace of N jobs to stdout (with `--seed` and
    /// `--procs`): the one in `crates/bench/traces/` is `--synthesize 2000 --procs 64 --seed 1`.
    #[arg(long, value_name = "N", conflicts_with = "swf")]
    synthesize: Option<usize>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 64)]
    procs: u32,
}

/// How blocked jobs are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Policy {
    Fcfs,
    Backfill,
}

impl Policy {
    fn name(self) -> &'static str {
        match self {
            Policy::Fcfs => "fcfs",
            Policy::Backfill => "backfill",
        }
    }
}

/// What a replay measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub jobs: usize,
    pub left_out: usize,
    pub utilization: f64,
    pub mean_wait_s: f64,
    pub mean_bsld: f64,
    pub rounds: u64,
    /// Each replayed job's start, by its trace id.
    pub starts: HashMap<u64, u64>,
}

pub async fn run(args: &ReplayArgs) -> anyhow::Result<()> {
    if let Some(jobs) = args.synthesize {
        print!("{}", crate::swf::synthesize(jobs, args.procs, args.seed));
        return Ok(());
    }
    let Some(path) = &args.swf else {
        bail!("--swf FILE (or --synthesize N) is required");
    };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let trace = crate::swf::parse(&text).with_context(|| format!("{}", path.display()))?;
    let (hosts, cpus) = match (args.hosts, args.cpus_per_host) {
        (Some(h), Some(c)) if h > 0 && c > 0 => (h, c),
        (Some(_), Some(_)) => bail!("--hosts and --cpus-per-host must be at least 1"),
        _ => {
            let widest = trace.jobs.iter().map(|j| j.procs).max().unwrap_or(1);
            (1, trace.max_procs.unwrap_or(widest))
        }
    };
    let depth = match args.policy {
        Policy::Fcfs => 0,
        Policy::Backfill => args.depth,
    };
    eprintln!(
        "replaying {} jobs of {} on {hosts} host(s) of {cpus} cpus, {} (depth {depth})",
        trace.jobs.len(),
        path.display(),
        args.policy.name()
    );
    let began = Instant::now();
    let out = replay(&trace, hosts, cpus, depth);
    let seconds = began.elapsed().as_secs_f64();
    let policy = [("policy", args.policy.name())];
    metric_with("replay_jobs", out.jobs as f64, "jobs", &policy);
    metric_with("replay_left_out", out.left_out as f64, "jobs", &policy);
    metric_with("replay_utilization", out.utilization, "ratio", &policy);
    metric_with("replay_mean_wait_s", out.mean_wait_s, "s", &policy);
    metric_with("replay_mean_bsld", out.mean_bsld, "ratio", &policy);
    metric_with("replay_rounds", out.rounds as f64, "rounds", &policy);
    metric_with("replay_seconds", seconds, "s", &policy);
    Ok(())
}

/// Replays `trace` on `hosts` hosts of `cpus` cpus with `depth` reservations a round (0: strict
/// priority).
pub fn replay(trace: &Trace, hosts: u32, cpus: u32, depth: u32) -> Outcome {
    let mut view = View {
        backfill_depth: depth,
        ..View::default()
    };
    for h in 0..hosts {
        view.hosts.insert(
            format!("h{h}"),
            HostView {
                capacity: Resources::new(cpus, 0),
                state: HostState::Ok,
                job_users: JobUsers::Any,
                queues_starts: false,
            },
        );
    }
    view.queues.insert(
        String::new(),
        QueueView {
            priority: 0,
            active: true,
        },
    );
    // Placed in submit order: the scheduler orders equal priorities by id.
    let mut jobs: Vec<&SwfJob> = trace.jobs.iter().filter(|j| j.procs <= cpus).collect();
    jobs.sort_by_key(|j| (j.submit_s, j.id));
    let left_out = trace.left_out + trace.jobs.len() - jobs.len();
    let (none, reserved) = (HashSet::new(), HashMap::new());
    let mut ends: BinaryHeap<Reverse<(u64, JobId)>> = BinaryHeap::new();
    let mut next = 0;
    let mut starts = HashMap::new();
    let mut out = Outcome {
        jobs: jobs.len(),
        left_out,
        utilization: 0.0,
        mean_wait_s: 0.0,
        mean_bsld: 0.0,
        rounds: 0,
        starts: HashMap::new(),
    };
    let (mut wait_sum, mut bsld_sum, mut busy, mut last_end) = (0.0, 0.0, 0.0, 0u64);
    loop {
        let submit = jobs.get(next).map(|j| j.submit_s);
        let end = ends.peek().map(|Reverse((t, _))| *t);
        let now = match (submit, end) {
            (Some(s), Some(e)) => s.min(e),
            (Some(t), None) | (None, Some(t)) => t,
            (None, None) => break,
        };
        while let Some(Reverse((t, id))) = ends.peek().copied() {
            if t > now {
                break;
            }
            ends.pop();
            view.placed.remove(&id);
        }
        while let Some(job) = jobs.get(next).filter(|j| j.submit_s <= now) {
            view.pending.insert(next as JobId, pending(job));
            next += 1;
        }
        out.rounds += 1;
        let plan = plan_at(&view, &none, &reserved, usize::MAX, now * 1000);
        for (id, reason) in plan.reasons {
            if let Some(job) = view.pending.get_mut(&id) {
                job.pend_reason = Some(reason.text);
            }
        }
        for Placement { id, host } in plan.placements {
            let Some(p) = view.pending.remove(&id) else {
                continue;
            };
            let job = jobs[id as usize];
            let mut placed = PlacedJob::dispatched(host, p.need, p.time_limit_s);
            placed.started_ms = Some(now * 1000);
            view.placed.insert(id, placed);
            ends.push(Reverse((now + job.run_s, id)));
            starts.insert(job.id, now);
            let wait = (now - job.submit_s) as f64;
            let run = job.run_s as f64;
            wait_sum += wait;
            bsld_sum += ((wait + run) / run.max(10.0)).max(1.0);
            busy += run * f64::from(job.procs);
            last_end = last_end.max(now + job.run_s);
        }
    }
    if let Some(first) = jobs.first() {
        let n = jobs.len() as f64;
        let span = last_end.saturating_sub(first.submit_s).max(1) as f64;
        out.utilization = busy / (span * f64::from(hosts) * f64::from(cpus));
        out.mean_wait_s = wait_sum / n;
        out.mean_bsld = bsld_sum / n;
    }
    out.starts = starts;
    out
}

/// A trace's job as the scheduler's view holds a pending one.
fn pending(job: &SwfJob) -> PendingJob {
    let limit = job
        .requested_s
        .map(|r| u32::try_from(r).unwrap_or(u32::MAX));
    PendingJob::plain("", 0, Resources::new(job.procs, 0), limit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::swf::synthesize;

    fn job(id: u64, submit_s: u64, run_s: u64, procs: u32, requested_s: u64) -> SwfJob {
        SwfJob {
            id,
            submit_s,
            run_s,
            procs,
            requested_s: Some(requested_s),
            user: None,
            queue: None,
        }
    }

    /// A worked example on 4 cpus: job 1 (2 cpus) runs to 100; job 2 (4 cpus) must wait for
    /// it; job 3 (2 cpus, 50 s asked) fits beside job 1 and ends before 100, so backfill starts
    /// it at 0 where FCFS starts it after job 2; job 4 (2 cpus, 500 s asked) would delay job 2
    /// under both.
    #[test]
    fn a_worked_example_under_both_policies() {
        let trace = Trace {
            jobs: vec![
                job(1, 0, 100, 2, 100),
                job(2, 1, 100, 4, 100),
                job(3, 2, 40, 2, 50),
                job(4, 3, 10, 2, 500),
            ],
            max_procs: Some(4),
            left_out: 0,
        };
        let fcfs = replay(&trace, 1, 4, 0);
        let starts = |o: &Outcome| (1..=4).map(|id| o.starts[&id]).collect::<Vec<_>>();
        assert_eq!(starts(&fcfs), vec![0, 100, 200, 200]);
        let backfill = replay(&trace, 1, 4, 1);
        assert_eq!(starts(&backfill), vec![0, 100, 2, 200]);
        assert!(backfill.mean_bsld < fcfs.mean_bsld);
        assert_eq!((fcfs.jobs, fcfs.left_out), (4, 0));
        // Busy: 2*100 + 4*100 + 2*40 + 2*10 = 700 cpu-s over 4 cpus from 0 to 240.
        assert!((fcfs.utilization - 700.0 / (4.0 * 240.0)).abs() < 1e-9);
        assert!((backfill.utilization - 700.0 / (4.0 * 210.0)).abs() < 1e-9);
    }

    /// The in-repo trace: every job runs once under each policy, and backfill's mean bounded
    /// slowdown is below FCFS's.
    #[test]
    fn backfill_beats_fcfs_on_the_in_repo_trace() {
        let trace = crate::swf::parse(include_str!("../traces/synthetic-2000.swf")).unwrap();
        let fcfs = replay(&trace, 1, 64, 0);
        let backfill = replay(&trace, 1, 64, 100);
        for o in [&fcfs, &backfill] {
            assert_eq!(o.starts.len(), trace.jobs.len());
            assert!(o.utilization > 0.0 && o.utilization <= 1.0, "{o:?}");
        }
        assert!(
            backfill.mean_bsld < fcfs.mean_bsld,
            "backfill {} against fcfs {}",
            backfill.mean_bsld,
            fcfs.mean_bsld
        );
        // A job wider than the hosts is left out, not stuck.
        let small = replay(&synthesize(50, 64, 3), 4, 16, 100);
        assert_eq!(small.jobs + small.left_out, 50);
        assert_eq!(small.starts.len(), small.jobs);
    }
}
