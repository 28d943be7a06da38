//! `xce-bench sched`: the scheduler, three ways, and with `--slots` two more views of the
//! drain.
//!
//! - **Placement throughput** (none with `--pending 0`): `--pending` one-cpu jobs already
//!   pending on a cluster of `--hosts` simulated hosts (registered by joins with no worker
//!   behind them; the controllers are told to wait an hour before calling them unavailable).
//!   Then one scheduler starts; placements committed per second, from the first placement
//!   until none is pending (the queue's pending count, polled).
//! - **Submit to running**, idle: one `true` job at a time on two real workers; from the
//!   submit being sent to the primary committing the worker's start report (the job's
//!   `start_time`; one clock, as everything runs on this machine).
//! - **Drain**: `--drain` `true` jobs submitted to an inactive queue, which is then
//!   activated; jobs/s until every one is done. With it, where the drain's CPU went, per job:
//!   the whole machine's, the controllers', and the workers' shims and jobs' (what each
//!   worker's shim launcher and everything it reaped used), and the floor: what one process
//!   of `true` costs here ([`crate::cpu`]).
//! - **Slot turnover**, with `--slots N`: how long a slot stands empty between one drained
//!   job and the next on the same host. Per host, starts and ends are put in time order
//!   apart; with N slots at most N jobs run at once, so the (k+N)-th start could only take
//!   the slot of an end at or before the k-th one, and the gap from the k-th end to the
//!   (k+N)-th start is the k-th slot's turnover (the first N starts take slots that were free
//!   already, the last N ends free slots no job needs). The times are the jobs' own records,
//!   stamped by the primary as it commits the worker's end and start reports: the gap spans
//!   the scheduler's round, the dispatch's commit, the worker's launch and its start report.
//!   Every slot stays wanted until the queue runs dry, as the whole drain is pending at the
//!   start. p50 and p99 over every gap of every host.
//! - **Slots against unlimited**, with `--slots N --compare-unlimited`: the same drain again
//!   on a new cluster whose workers have room for every job at once
//!   (`drain_throughput_unlimited`), and the ratio of the two (`slots_vs_unlimited_ratio`).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::Args;
use xce_client::ops::{all_jobs, claim_role, ControlQueue, GetJob, Join, ListQueues, Submit};
use xce_client::types::{
    HostAttributes, Job, JobFilter, JobId, JobSpec, JobState, QueueAction, RequestToken, Role,
};
use xce_client::{Client, ClientConfig};
use xce_devcluster::Process;

use crate::cluster::BenchCluster;
use crate::cpu;
use crate::{metric, quantile};

#[derive(Debug, Args)]
pub struct SchedArgs {
    /// Pending jobs for the placement run (0: no placement run).
    #[arg(long, default_value_t = 100_000)]
    pending: usize,
    /// Simulated hosts for the placement run (each with room for its share of the jobs).
    #[arg(long, default_value_t = 1_000)]
    hosts: usize,
    /// Jobs timed one at a time for submit-to-running.
    #[arg(long, default_value_t = 200)]
    latency_jobs: usize,
    /// Jobs for the drain run.
    #[arg(long, default_value_t = 10_000)]
    drain: usize,
    /// Cpus each of the two workers offers in the drain run (one-cpu jobs: how many run at
    /// once on each); 0 for room for every job at once.
    #[arg(long, default_value_t = 0)]
    slots: usize,
    /// With `--slots`: drain as many jobs again on a new cluster with room for every job at
    /// once, and print its throughput and the ratio of the two.
    #[arg(long, requires = "slots")]
    compare_unlimited: bool,
    /// Run the drains' schedulers with `--dispatch-ahead ROUNDS`: a full host is sent that
    /// many more rounds of jobs, which its worker starts as its jobs end (0: none).
    #[arg(long, default_value_t = 0)]
    dispatch_ahead: u32,
    /// Reservations a round in the backfill round (`backfill_round_ms`).
    #[arg(long, default_value_t = xce_scheduler::config::DEFAULT_BACKFILL_DEPTH)]
    depth: u32,
}

impl SchedArgs {
    /// The drains' cluster: 3 controllers, 2 workers given `worker_args`, one scheduler.
    async fn drain_cluster(&self, worker_args: &[&str]) -> anyhow::Result<BenchCluster> {
        let rounds = self.dispatch_ahead.to_string();
        let scheduler_args = ["--dispatch-ahead", rounds.as_str()];
        BenchCluster::start_spec(crate::cluster::BenchSpec {
            controllers: 3,
            workers: 2,
            worker_args,
            schedulers: 1,
            scheduler_args: &scheduler_args,
            ..Default::default()
        })
        .await
    }
}

/// Simulated hosts never heartbeat: keep them available for the whole run.
const PATIENT_HOSTS: &str = "hosts:\n  heartbeat_ttl_ms: 3600000\n  lost_grace_ms: 3600000\n";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub async fn run(args: SchedArgs) -> anyhow::Result<()> {
    if args.pending > 0 {
        placement(&args).await?;
        backfill_round(args.pending, args.hosts.max(1), args.depth);
    }
    let limited = latency_and_drain(&args).await?;
    if args.compare_unlimited && args.slots > 0 {
        let unlimited = unlimited_drain(&args).await?;
        metric("drain_throughput_unlimited", unlimited, "jobs/s");
        metric(
            "slots_vs_unlimited_ratio",
            limited / unlimited.max(f64::MIN_POSITIVE),
            "ratio",
        );
    }
    Ok(())
}

async fn placement(args: &SchedArgs) -> anyhow::Result<()> {
    let mut cluster =
        BenchCluster::start_with_schedulers(3, Some(PATIENT_HOSTS), 0, &[], 0).await?;
    let client = cluster.client(ClientConfig::default())?;
    let per_host = args.pending.div_ceil(args.hosts.max(1)) as u32;
    for i in 0..args.hosts {
        let join = Join {
            token: RequestToken::random(),
            role: Role::Worker,
            host: HostAttributes {
                name: format!("sim{i}"),
                resources: xce_client::types::Resources::new(per_host, 1 << 20),
                spool_dir: String::new(),
                job_users: xce_client::types::JobUsers::Any,
            },
            agent: None,
            held: Vec::new(),
            queues_starts: false,
        };
        client
            .call(join)
            .await
            .context("register a simulated host")?;
    }
    let submitter = cluster.client(ClientConfig::default())?;
    crate::jobs::submit_all(&submitter, args.pending).await?;
    eprintln!(
        "xce-bench sched: {} pending jobs on {} simulated hosts of {per_host} cpus; starting the scheduler",
        args.pending, args.hosts
    );
    let dir = tempfile::tempdir().context("scheduler dir")?;
    let mut scheduler = Process::new(
        "s1".into(),
        xce_devcluster::sibling_bin_dir()?.join("xce-scheduler"),
        vec![
            "--name".into(),
            "s1".into(),
            "--peers".into(),
            cluster.local.peers().to_string(),
        ],
        dir.path().join("s1.log"),
    );
    scheduler.start("warn")?;
    let started = Instant::now();
    let mut first = None;
    let deadline = started + Duration::from_secs(600);
    loop {
        let pending = queue_counts(&client).await?.0;
        if first.is_none() && pending < args.pending {
            first = Some(Instant::now());
        }
        if pending == 0 {
            break;
        }
        if Instant::now() > deadline {
            scheduler.kill_quietly();
            bail!("{pending} jobs still pending after 600 s");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let done = Instant::now();
    let first = first.unwrap_or(started);
    scheduler.kill_quietly();
    cluster.local.stop_all(Duration::from_secs(5));
    let span = done.duration_since(first).as_secs_f64().max(1e-3);
    eprintln!(
        "xce-bench sched: placed {} jobs in {span:.2} s ({:.2} s after the scheduler started)",
        args.pending,
        done.duration_since(started).as_secs_f64()
    );
    metric(
        "placement_throughput",
        args.pending as f64 / span,
        "placements/s",
    );
    Ok(())
}

/// Pending and running jobs over every queue.
pub(crate) async fn queue_counts(client: &Client) -> anyhow::Result<(usize, usize)> {
    let queues = client.call(ListQueues).await?;
    Ok(queues.iter().fold((0, 0), |(p, r), q| {
        (p + q.pending as usize, r + q.running as usize)
    }))
}

/// Submit-to-running latency, then the drain with its CPU and, with `--slots`, its slot
/// turnover; returns the drain's jobs/s.
async fn latency_and_drain(args: &SchedArgs) -> anyhow::Result<f64> {
    let slots = match args.slots {
        0 => args.drain.max(1),
        n => n,
    }
    .to_string();
    let worker_args = [
        "--cpus",
        &slots,
        "--mem-mb",
        "1024",
        "--heartbeat-ms",
        "500",
    ];
    let cluster = args.drain_cluster(&worker_args).await?;
    let client = cluster.client(ClientConfig::default())?;
    let spec = JobSpec {
        command: vec!["true".into()],
        ..JobSpec::default()
    };
    let mut latencies = Vec::with_capacity(args.latency_jobs);
    for _ in 0..args.latency_jobs {
        let sent = now_ms();
        let id = client
            .call(Submit {
                token: RequestToken::random(),
                spec: spec.clone(),
                script: None,
            })
            .await?;
        let start = wait_started(&client, id).await?;
        latencies.push(start.saturating_sub(sent) as f64);
    }
    latencies.sort_by(f64::total_cmp);
    metric("submit_to_running_p50_ms", quantile(&latencies, 0.50), "ms");
    metric("submit_to_running_p99_ms", quantile(&latencies, 0.99), "ms");

    let mut spent_before = None;
    let (throughput, ids) = drain(&cluster, args.drain, || {
        spent_before =
            Some(DrainCpu::read(&cluster).context("read the CPU spent before the drain")?);
        Ok(())
    })
    .await?;
    metric("drain_throughput", throughput, "jobs/s");
    // A launcher reaps each shim before its worker hears of the end and reports it: every
    // shim and job of the drain is counted by now.
    let spent = DrainCpu::read(&cluster)
        .context("read the CPU spent by the drain")?
        .minus(&spent_before.context("the drain read no CPU before it started")?);
    if args.drain == 0 {
        return Ok(throughput);
    }
    if args.slots > 0 {
        let jobs = drained_jobs(&client, &ids).await?;
        let mut turnovers = slot_turnovers(&run_times(&jobs)?, args.slots);
        turnovers.sort_by(f64::total_cmp);
        eprintln!(
            "xce-bench sched: {} slot turnovers on {} slots per worker",
            turnovers.len(),
            args.slots
        );
        metric("slot_turnover_p50_ms", quantile(&turnovers, 0.50), "ms");
        metric("slot_turnover_p99_ms", quantile(&turnovers, 0.99), "ms");
    }
    let per_job = |ms: f64| ms / args.drain as f64;
    spent.print(args.drain, "");
    let floor = cpu::process_floor_ms(
        &cpu::true_program()?,
        args.drain.min(cpu::FLOOR_PROCESSES),
        2,
    )
    .await
    .context("measure the process floor")?;
    metric("drain_cpu_ms_process_floor", floor, "ms");
    let cores = cpu::cores() as f64;
    eprintln!(
        "xce-bench sched: {cores} cores allow at most {:.0} jobs/s for the shims and jobs \
         alone, {:.0} jobs/s for the jobs' own processes alone",
        cores * 1000.0 / per_job(spent.shims_and_jobs).max(f64::MIN_POSITIVE),
        cores * 1000.0 / floor.max(f64::MIN_POSITIVE)
    );
    Ok(throughput)
}

/// The drain again, on a new cluster whose workers have room for every job at once: what
/// `--slots` is compared with. Returns jobs/s.
async fn unlimited_drain(args: &SchedArgs) -> anyhow::Result<f64> {
    let cpus = args.drain.max(1).to_string();
    let worker_args = ["--cpus", &cpus, "--mem-mb", "1024", "--heartbeat-ms", "500"];
    let cluster = args.drain_cluster(&worker_args).await?;
    let mut spent_before = None;
    let (throughput, _) = drain(&cluster, args.drain, || {
        spent_before =
            Some(DrainCpu::read(&cluster).context("read the CPU spent before the drain")?);
        Ok(())
    })
    .await?;
    let spent = DrainCpu::read(&cluster)
        .context("read the CPU spent by the drain")?
        .minus(&spent_before.context("the drain read no CPU before it started")?);
    spent.print(args.drain, "_unlimited");
    Ok(throughput)
}

/// Submits `n` `true` jobs to the inactive default queue, calls `before_start`, activates
/// the queue and waits (600 s at most) until nothing is pending or running. Returns jobs/s
/// from the activation, and the jobs' ids.
async fn drain(
    cluster: &BenchCluster,
    n: usize,
    before_start: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<(f64, Vec<JobId>)> {
    let client = cluster.client(ClientConfig::default())?;
    let operator = cluster.client(ClientConfig::default())?;
    claim_role(&operator, Role::Operator);
    let queue = |action| ControlQueue {
        token: RequestToken::random(),
        name: "normal".into(),
        action,
    };
    operator.call(queue(QueueAction::Inactivate)).await?;
    let ids = crate::jobs::submit_all(&client, n).await?;
    before_start()?;
    let started = Instant::now();
    operator.call(queue(QueueAction::Activate)).await?;
    let deadline = started + Duration::from_secs(600);
    loop {
        let (pending, running) = queue_counts(&client).await?;
        if pending == 0 && running == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!("{pending} pending and {running} running after 600 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!("xce-bench sched: drained {n} jobs in {elapsed:.2} s");
    Ok((n as f64 / elapsed, ids))
}

/// The jobs `ids` as the controllers hold them, each checked to have run once to its end.
async fn drained_jobs(client: &Client, ids: &[JobId]) -> anyhow::Result<Vec<Job>> {
    let wanted: std::collections::HashSet<JobId> = ids.iter().copied().collect();
    let jobs: Vec<Job> = all_jobs(client, JobFilter::default())
        .await?
        .into_iter()
        .filter(|j| wanted.contains(&j.id))
        .collect();
    if jobs.len() != ids.len() {
        bail!("listed {} of the {} drained jobs", jobs.len(), ids.len());
    }
    if let Some(j) = jobs
        .iter()
        .find(|j| j.state != JobState::Done || j.attempt != 1)
    {
        bail!(
            "job {} ended {:?} after {} attempts ({:?})",
            j.id,
            j.state,
            j.attempt,
            j.reason
        );
    }
    Ok(jobs)
}

/// Each job's host, start and end (ms since the epoch, the primary's stamps).
fn run_times(jobs: &[Job]) -> anyhow::Result<Vec<(&str, u64, u64)>> {
    jobs.iter()
        .map(
            |job| match (job.host.as_deref(), job.start_time_ms, job.end_time_ms) {
                (Some(host), Some(start), Some(end)) => Ok((host, start, end)),
                _ => bail!("job {} has no host, start or end time", job.id),
            },
        )
        .collect()
}

/// Every slot turnover of jobs run as `(host, start, end)` on hosts of `slots` slots, in ms
/// (see the module's doc): per host, the gap from the k-th end to the (k+`slots`)-th start,
/// starts and ends each in time order. Unsorted.
fn slot_turnovers(runs: &[(&str, u64, u64)], slots: usize) -> Vec<f64> {
    let mut hosts: std::collections::BTreeMap<&str, (Vec<u64>, Vec<u64>)> = Default::default();
    for &(host, start, end) in runs {
        let (starts, ends) = hosts.entry(host).or_default();
        starts.push(start);
        ends.push(end);
    }
    let mut gaps = Vec::with_capacity(runs.len());
    for (starts, ends) in hosts.values_mut() {
        starts.sort_unstable();
        ends.sort_unstable();
        // No more than `slots` run at once, so the start is never before the end it follows.
        gaps.extend(
            ends.iter()
                .zip(starts.iter().skip(slots))
                .map(|(end, start)| start.saturating_sub(*end) as f64),
        );
    }
    gaps
}

/// CPU used so far, in ms: the machine's busy time, the controllers', and what the workers'
/// shim launchers and everything they reaped used.
struct DrainCpu {
    machine: f64,
    controllers: f64,
    shims_and_jobs: f64,
    /// The scheduler's and the workers' own processes.
    scheduler: f64,
    workers: f64,
}

impl DrainCpu {
    fn read(cluster: &BenchCluster) -> anyhow::Result<DrainCpu> {
        let pids = |daemons: &[xce_devcluster::Daemon]| -> anyhow::Result<Vec<u32>> {
            daemons
                .iter()
                .map(|d| d.pid().context("a daemon is not running"))
                .collect()
        };
        Ok(DrainCpu {
            machine: cpu::machine_busy_ms()?,
            controllers: cpu::processes_ms(&pids(&cluster.local.controllers)?)?,
            shims_and_jobs: cpu::descendants_ms(&pids(&cluster.local.workers)?)?,
            scheduler: cpu::processes_ms(&pids(&cluster.local.schedulers)?)?,
            workers: cpu::processes_ms(&pids(&cluster.local.workers)?)?,
        })
    }

    fn minus(&self, before: &DrainCpu) -> DrainCpu {
        DrainCpu {
            machine: self.machine - before.machine,
            controllers: self.controllers - before.controllers,
            shims_and_jobs: self.shims_and_jobs - before.shims_and_jobs,
            scheduler: self.scheduler - before.scheduler,
            workers: self.workers - before.workers,
        }
    }

    /// Prints what the drain of `jobs` jobs spent per job, each metric's name ending in
    /// `suffix`.
    fn print(&self, jobs: usize, suffix: &str) {
        let per_job = |ms: f64| ms / jobs.max(1) as f64;
        metric(
            &format!("drain_cpu_ms_per_job{suffix}"),
            per_job(self.machine),
            "ms",
        );
        metric(
            &format!("drain_cpu_ms_controllers{suffix}"),
            per_job(self.controllers),
            "ms",
        );
        metric(
            &format!("drain_cpu_ms_shims_and_jobs{suffix}"),
            per_job(self.shims_and_jobs),
            "ms",
        );
        metric(
            &format!("drain_cpu_ms_scheduler{suffix}"),
            per_job(self.scheduler),
            "ms",
        );
        metric(
            &format!("drain_cpu_ms_workers{suffix}"),
            per_job(self.workers),
            "ms",
        );
    }
}

/// Waits for job `id` to be started; returns its start time (ms since the epoch).
async fn wait_started(client: &Client, id: u64) -> anyhow::Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let job = client.call(GetJob { id }).await?;
        if let Some(start) = job.start_time_ms {
            return Ok(start);
        }
        if job.state.is_final() && job.state != JobState::Done {
            bail!("job {id} ended {:?} without starting", job.state);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    bail!("job {id} did not start within 30 s")
}

/// One scheduling round with backfill active, in process: the scheduler's own planning
/// code (`plan_at`) over `pending` jobs on `hosts` hosts of 32 cpus, each half full of jobs
/// with time limits; one pending job in 100 wants a whole host, so up to `depth` of them get
/// reservations and every job after the first is checked against them. Prints the round's
/// time, its placements per second, and the time of a round of the scheduler's batch size.
fn backfill_round(pending: usize, hosts: usize, depth: u32) {
    use xce_client::types::{HostState, JobUsers};
    use xce_scheduler::view::{HostView, PendingJob, PlacedJob, QueueView, View};
    const CPUS: u32 = 32;
    let now = now_ms();
    let mut view = View {
        backfill_depth: depth,
        backfill_slack_ms: xce_scheduler::config::DEFAULT_BACKFILL_SLACK_MS,
        ..View::default()
    };
    view.queues.insert(
        "normal".into(),
        QueueView {
            priority: 0,
            active: true,
        },
    );
    let mut seq = 0u64;
    let mut next = move |n: u64| {
        seq = seq
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seq >> 33) % n
    };
    for h in 0..hosts {
        let name = format!("sim{h}");
        view.hosts.insert(
            name.clone(),
            HostView {
                capacity: xce_client::types::Resources::new(CPUS, 0),
                state: HostState::Ok,
                job_users: JobUsers::Any,
                queues_starts: false,
            },
        );
        for j in 0..CPUS / 2 {
            let limit = 60 + next(7200) as u32;
            let mut job = PlacedJob::dispatched(
                name.clone(),
                xce_client::types::Resources::new(1, 0),
                Some(limit),
            );
            job.started_ms = Some(now - next(u64::from(limit) * 1000));
            view.placed
                .insert(10_000_000 + (h as u64) * 64 + u64::from(j), job);
        }
    }
    for id in 1..=pending as u64 {
        let cpus = if id % 100 == 0 { CPUS } else { 1 };
        view.pending.insert(
            id,
            PendingJob::plain(
                "normal",
                0,
                xce_client::types::Resources::new(cpus, 0),
                Some(60 + next(7200) as u32),
            ),
        );
    }
    let none = std::collections::HashSet::new();
    let reserved = std::collections::HashMap::new();
    let time = |max: usize| {
        let began = Instant::now();
        let plan = xce_scheduler::place::plan_at(&view, &none, &reserved, max, now);
        (began.elapsed().as_secs_f64(), plan)
    };
    let (whole, plan) = time(usize::MAX);
    let (batch, _) = time(xce_scheduler::pipeline::MAX_BATCH);
    eprintln!(
        "xce-bench sched: a backfill round over {pending} pending jobs on {hosts} hosts placed {} and reserved {} in {:.1} ms ({:.1} ms for a batch of {})",
        plan.placements.len(),
        plan.reservations.len(),
        whole * 1e3,
        batch * 1e3,
        xce_scheduler::pipeline::MAX_BATCH
    );
    metric("backfill_round_ms", whole * 1e3, "ms");
    metric(
        "backfill_placements_per_s",
        plan.placements.len() as f64 / whole.max(1e-9),
        "placements/s",
    );
    metric("backfill_batch_round_ms", batch * 1e3, "ms");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_follows_the_end_that_freed_its_slot_on_its_own_host() {
        // Two slots on h1: jobs a (0-10) and b (1-20) fill them, c starts at 13 (after a's
        // end at 10), d at 24 (after b's end at 20), and e at 31 (after c's end at 30). h2's
        // one job takes a slot that was free.
        let runs = [
            ("h1", 0, 10),
            ("h1", 1, 20),
            ("h1", 13, 30),
            ("h1", 24, 40),
            ("h1", 31, 50),
            ("h2", 5, 6),
        ];
        assert_eq!(slot_turnovers(&runs, 2), vec![3.0, 4.0, 1.0]);
        assert_eq!(slot_turnovers(&runs, 5), Vec::<f64>::new());
    }
}
