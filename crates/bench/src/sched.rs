//! `xce-bench sched`: the scheduler, three ways.
//!
//! - **Placement throughput**: `--pending` one-cpu jobs already pending on a cluster of
//!   `--hosts` simulated hosts (registered by joins with no worker behind them; the
//!   controllers are told to wait an hour before calling them unavailable). Then one
//!   scheduler starts; placements committed per second, from the first placement until none
//!   is pending (the queue's pending count, polled).
//! - **Submit to running**, idle: one `true` job at a time on two real workers; from the
//!   submit being sent to the primary committing the worker's start report (the job's
//!   `start_time`; one clock, as everything runs on this machine).
//! - **Drain**: `--drain` `true` jobs submitted to an inactive queue, which is then
//!   activated; jobs/s until every one is done. With it, where the drain's CPU went, per job:
//!   the whole machine's, the controllers', and the workers' shims and jobs' (what each
//!   worker's shim launcher and everything it reaped used), and the floor: what one process
//!   of `true` costs here ([`crate::cpu`]).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::Args;
use xce_client::ops::{claim_role, ControlQueue, GetJob, Join, ListQueues, Submit};
use xce_client::types::{HostAttributes, JobSpec, JobState, QueueAction, RequestToken, Role};
use xce_client::{Client, ClientConfig};
use xce_devcluster::Process;

use crate::cluster::BenchCluster;
use crate::cpu;
use crate::{metric, quantile};

#[derive(Debug, Args)]
pub struct SchedArgs {
    /// Pending jobs for the placement run.
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
    placement(&args).await?;
    latency_and_drain(&args).await
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

async fn latency_and_drain(args: &SchedArgs) -> anyhow::Result<()> {
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
    let cluster = BenchCluster::start_with_schedulers(3, None, 2, &worker_args, 1).await?;
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

    let operator = cluster.client(ClientConfig::default())?;
    claim_role(&operator, Role::Operator);
    let queue = |action| ControlQueue {
        token: RequestToken::random(),
        name: "normal".into(),
        action,
    };
    operator.call(queue(QueueAction::Inactivate)).await?;
    crate::jobs::submit_all(&client, args.drain).await?;
    let spent_before = DrainCpu::read(&cluster).context("read the CPU spent before the drain")?;
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
    eprintln!(
        "xce-bench sched: drained {} jobs in {elapsed:.2} s",
        args.drain
    );
    metric("drain_throughput", args.drain as f64 / elapsed, "jobs/s");
    // A launcher reaps each shim before its worker hears of the end and reports it: every
    // shim and job of the drain is counted by now.
    let spent = DrainCpu::read(&cluster)
        .context("read the CPU spent by the drain")?
        .minus(&spent_before);
    if args.drain == 0 {
        return Ok(());
    }
    let per_job = |ms: f64| ms / args.drain as f64;
    metric("drain_cpu_ms_per_job", per_job(spent.machine), "ms");
    metric("drain_cpu_ms_controllers", per_job(spent.controllers), "ms");
    metric(
        "drain_cpu_ms_shims_and_jobs",
        per_job(spent.shims_and_jobs),
        "ms",
    );
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
    Ok(())
}

/// CPU used so far, in ms: the machine's busy time, the controllers', and what the workers'
/// shim launchers and everything they reaped used.
struct DrainCpu {
    machine: f64,
    controllers: f64,
    shims_and_jobs: f64,
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
        })
    }

    fn minus(&self, before: &DrainCpu) -> DrainCpu {
        DrainCpu {
            machine: self.machine - before.machine,
            controllers: self.controllers - before.controllers,
            shims_and_jobs: self.shims_and_jobs - before.shims_and_jobs,
        }
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
