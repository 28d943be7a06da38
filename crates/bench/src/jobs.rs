//! `xce-bench jobs`: trivial jobs (`true`) dispatched by hand (`Dispatch`, as `xce dispatch`
//! does) to two workers and run to their end. Measures jobs/s from the first dispatch until the
//! last job is done, and dispatch-to-start latency: from sending the dispatch to the commit of
//! the worker's start report (the job's `start_time`, stamped by the primary; one clock, as
//! everything runs on this machine).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::Args;
use xce_client::ops::{all_jobs, claim_role, Dispatch, ListHosts, ListJobs, Submit};
use xce_client::types::{HostState, JobFilter, JobId, JobSpec, JobState, RequestToken, Role};
use xce_client::{Client, ClientConfig, ClientError, Status};

use crate::cluster::BenchCluster;
use crate::{metric, quantile};

#[derive(Debug, Args)]
pub struct JobsArgs {
    /// Controllers in the cluster.
    #[arg(long, default_value_t = 3)]
    controllers: usize,
    /// Jobs to run.
    #[arg(long, default_value_t = 2_000)]
    jobs: usize,
    /// Dispatches in flight (a scheduler publishing concurrently).
    #[arg(long, default_value_t = 16)]
    inflight: usize,
    /// Dispatches per second, paced (0: as fast as they are acknowledged). Below saturation
    /// the dispatch-to-start figures are the pipeline's latency, not queueing.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
}

const WORKERS: [&str; 2] = ["w1", "w2"];

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub async fn run(args: JobsArgs) -> anyhow::Result<()> {
    // Slots for every job at once: the benchmark measures the pipeline, not queueing.
    let cpus = args.jobs.to_string();
    let worker_args = ["--cpus", &cpus, "--mem-mb", "1024", "--heartbeat-ms", "500"];
    let cluster = BenchCluster::start_with_workers(args.controllers, 2, &worker_args).await?;
    let client = cluster.client(ClientConfig::default())?;
    // It places the jobs by hand, as an operator would (the scheduler does it later).
    claim_role(&client, Role::Operator);
    wait_workers(&client).await?;
    eprintln!(
        "xce-bench jobs: {} controllers, 2 workers, {} jobs, {} dispatches in flight, rate {}",
        args.controllers,
        args.jobs,
        args.inflight,
        if args.rate > 0.0 {
            format!("{}/s", args.rate)
        } else {
            "unpaced".into()
        }
    );
    let ids = submit_all(&client, args.jobs).await?;
    let queue = Arc::new(Mutex::new(
        ids.iter()
            .copied()
            .enumerate()
            .collect::<VecDeque<(usize, JobId)>>(),
    ));
    let started = Instant::now();
    let pace = (args.rate > 0.0).then(|| Duration::from_secs_f64(1.0 / args.rate));
    let mut tasks = Vec::new();
    for _ in 0..args.inflight.max(1) {
        let (client, queue) = (client.clone(), queue.clone());
        tasks.push(tokio::spawn(async move {
            dispatch_from(client, queue, started, pace).await
        }));
    }
    let mut sent = std::collections::HashMap::new();
    for task in tasks {
        sent.extend(task.await??);
    }
    wait_all_done(&client, args.jobs).await?;
    let elapsed = started.elapsed();
    let jobs = all_jobs(&client, JobFilter::default()).await?;
    let mut latencies = Vec::with_capacity(jobs.len());
    for job in &jobs {
        if job.state != JobState::Done {
            bail!("job {} ended {:?} ({:?})", job.id, job.state, job.reason);
        }
        if job.attempt != 1 {
            bail!("job {} ran {} attempts", job.id, job.attempt);
        }
        let (Some(start), Some(at)) = (job.start_time_ms, sent.get(&job.id)) else {
            bail!("job {} has no start time or was never dispatched", job.id);
        };
        latencies.push(start.saturating_sub(*at) as f64);
    }
    latencies.sort_by(f64::total_cmp);
    eprintln!(
        "xce-bench jobs: {} jobs done once each in {elapsed:?}",
        jobs.len()
    );
    metric(
        "jobs_throughput",
        jobs.len() as f64 / elapsed.as_secs_f64(),
        "jobs/s",
    );
    metric("dispatch_to_start_p50_ms", quantile(&latencies, 0.50), "ms");
    metric("dispatch_to_start_p99_ms", quantile(&latencies, 0.99), "ms");
    Ok(())
}

async fn wait_workers(client: &Client) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(hosts) = client.call(ListHosts).await {
            let ok = hosts.iter().filter(|h| h.state == HostState::Ok).count();
            if ok == WORKERS.len() {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("the workers did not join within 30 s")
}

/// Submits `n` `true` jobs from 16 concurrent callers; returns their ids in order.
pub(crate) async fn submit_all(client: &Client, n: usize) -> anyhow::Result<Vec<JobId>> {
    let spec = JobSpec {
        name: "bench".into(),
        user: "bench".into(),
        command: vec!["true".into()],
        ..JobSpec::default()
    };
    let mut tasks = Vec::new();
    for chunk in 0..16 {
        let (client, spec) = (client.clone(), spec.clone());
        let count = n / 16 + usize::from(chunk < n % 16);
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::with_capacity(count);
            for _ in 0..count {
                let op = Submit {
                    token: RequestToken::random(),
                    spec: spec.clone(),
                    script: None,
                };
                ids.push(client.call(op).await?);
            }
            Ok::<_, ClientError>(ids)
        }));
    }
    let mut ids = Vec::with_capacity(n);
    for t in tasks {
        ids.extend(t.await??);
    }
    ids.sort_unstable();
    Ok(ids)
}

/// Dispatches jobs from the shared queue, alternating hosts, the `n`th no earlier than
/// `n × pace` after `start`; returns when each was sent.
async fn dispatch_from(
    client: Client,
    queue: Arc<Mutex<VecDeque<(usize, JobId)>>>,
    start: Instant,
    pace: Option<Duration>,
) -> anyhow::Result<Vec<(JobId, u64)>> {
    let mut sent = Vec::new();
    loop {
        let next = queue.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
        let Some((n, id)) = next else {
            return Ok(sent);
        };
        if let Some(pace) = pace {
            tokio::time::sleep_until((start + pace * n as u32).into()).await;
        }
        let host = WORKERS[(id % 2) as usize].to_string();
        let at = now_ms();
        let op = Dispatch {
            token: RequestToken::random(),
            id,
            host,
        };
        match client.call(op).await {
            Ok(()) => sent.push((id, at)),
            Err(ClientError::Status {
                status: Status::Conflict,
                message,
            }) => {
                bail!("job {id}: dispatch refused: {message}")
            }
            Err(e) => return Err(e).context(format!("dispatch job {id}")),
        }
    }
}

async fn wait_all_done(client: &Client, n: usize) -> anyhow::Result<()> {
    let unfinished = JobFilter {
        states: vec![JobState::Pending, JobState::Dispatched, JobState::Running],
        ..JobFilter::default()
    };
    let deadline = Instant::now() + Duration::from_secs(60 + n as u64 / 10);
    while Instant::now() < deadline {
        if client
            .call(ListJobs {
                filter: unfinished.clone(),
                after: 0,
                limit: 1,
            })
            .await?
            .jobs
            .is_empty()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bail!("jobs still unfinished at the deadline")
}
