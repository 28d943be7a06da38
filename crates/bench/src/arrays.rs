//! `xce-bench arrays`: job arrays and dependencies, on one cluster (three controllers, two
//! workers, a scheduler).
//!
//! - **Million-task arrays**, first, on the idle cluster: `--big-arrays` arrays of 1,000,000
//!   `true` tasks (`0-999999`) submitted one after another into the inactive default queue, so
//!   nothing is split off or run: the median time from sending a submit to its acknowledgement
//!   (`array_submit_ms`), the primary's VmRSS growth over all of them per array
//!   (`array_rss_mb_per_1m`), and, with them pending, the median time of `--pages` first pages
//!   of the job list, the call `xce jobs` makes (`first_page_ms`). Then the arrays are killed
//!   (their waiting tasks end at once) and the queue activated again, so what follows starts
//!   from a cluster with nothing pending. Measured first, the arrays are on that first page.
//! - **Dependency release**, idle: for each of `--dependents` pairs, a `true` job and one that
//!   waits for it (`afterok`); from the primary applying the parent's end to it applying the
//!   dependent's dispatch, as one event stream delivers both (so the client's own delay
//!   cancels out).
//! - **Drain**: `--tasks` `true` jobs submitted one by one to an inactive queue, then the queue
//!   activated, until none is left (`drain_throughput`); then one array of as many `true`
//!   tasks, the same way (`array_drain_throughput`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use clap::Args;
use xce_client::array::JobRef;
use xce_client::dependency::{Expr, Kind, Term};
use xce_client::events::{EventStream, StreamItem};
use xce_client::ops::{claim_role, ControlJob, ControlQueue, GetCluster, GetJob, ListJobs, Submit};
use xce_client::types::{
    ClusterEvent, EventFilter, JobAction, JobFilter, JobId, JobSpec, JobState, QueueAction,
    RequestToken, Role,
};
use xce_client::{Client, ClientConfig};

use crate::cluster::BenchCluster;
use crate::{metric, quantile};

/// What `xce-bench arrays` is told.
#[derive(Debug, Args)]
pub struct ArraysArgs {
    /// Parent and dependent pairs timed one after another.
    #[arg(long, default_value_t = 200)]
    dependents: usize,
    /// Jobs, then array tasks, drained.
    #[arg(long, default_value_t = 2_000)]
    tasks: usize,
    /// Arrays of 1,000,000 tasks submitted for `array_submit_ms` and `array_rss_mb_per_1m`
    /// (0: none, and no `first_page_ms` either).
    #[arg(long, default_value_t = 5)]
    big_arrays: usize,
    /// First pages of the job list timed with those arrays pending.
    #[arg(long, default_value_t = 20)]
    pages: usize,
}

/// The tasks of one big array: a million, the figure.
const MILLION: &str = "0-999999";

/// Starts the cluster, times the dependents, prints the metric lines.
pub async fn run(args: &ArraysArgs) -> anyhow::Result<()> {
    let worker_args = ["--cpus", "4", "--mem-mb", "1024", "--heartbeat-ms", "500"];
    let cluster = BenchCluster::start_with_schedulers(3, None, 2, &worker_args, 1).await?;
    let client = cluster.client(ClientConfig::default())?;
    let operator = cluster.client(ClientConfig::default())?;
    claim_role(&operator, Role::Operator);
    million_task_arrays(&cluster, &client, &operator, args).await?;
    // Opened after the big arrays: it carries the dependents' events only.
    let mut stream = EventStream::open(
        cluster.client(ClientConfig::default())?,
        EventFilter::default(),
    )
    .await
    .context("subscribe to events")?;
    let mut latencies = Vec::with_capacity(args.dependents);
    for _ in 0..args.dependents {
        let parent = client
            .call(Submit {
                token: RequestToken::random(),
                spec: job(None),
                script: None,
            })
            .await?;
        let child = client
            .call(Submit {
                token: RequestToken::random(),
                spec: job(Some(after_ok(parent))),
                script: None,
            })
            .await?;
        latencies.push(release_ms(&mut stream, parent, child).await?);
    }
    latencies.sort_by(f64::total_cmp);
    metric("dep_release_p50_ms", quantile(&latencies, 0.50), "ms");
    metric("dep_release_p99_ms", quantile(&latencies, 0.99), "ms");

    let singles = drain(&client, &operator, args.tasks, || async {
        crate::jobs::submit_all(&client, args.tasks)
            .await
            .map(|_| ())
    })
    .await?;
    metric("drain_throughput", singles, "jobs/s");
    let array = drain(&client, &operator, args.tasks, || async {
        let tasks = format!("1-{}", args.tasks.max(1));
        client
            .call(Submit {
                token: RequestToken::random(),
                spec: JobSpec {
                    command: vec!["true".into()],
                    array: Some(tasks.parse()?),
                    ..JobSpec::default()
                },
                script: None,
            })
            .await?;
        Ok(())
    })
    .await?;
    metric("array_drain_throughput", array, "jobs/s");
    Ok(())
}

/// Submits `args.big_arrays` million-task arrays into the inactive default queue and prints
/// how long each submit took to be acknowledged (median), the primary's RSS they added per
/// array, and how long the first page of the job list takes with them pending (median); then
/// kills them and activates the queue again.
async fn million_task_arrays(
    cluster: &BenchCluster,
    client: &Client,
    operator: &Client,
    args: &ArraysArgs,
) -> anyhow::Result<()> {
    if args.big_arrays == 0 {
        return Ok(());
    }
    operator
        .call(queue("normal", QueueAction::Inactivate))
        .await?;
    let (primary, pid) = primary_pid(cluster, client).await?;
    let before = rss_mib(pid)?;
    let mut submits = Vec::with_capacity(args.big_arrays);
    let mut ids = Vec::with_capacity(args.big_arrays);
    for _ in 0..args.big_arrays {
        let spec = JobSpec {
            command: vec!["true".into()],
            array: Some(MILLION.parse()?),
            ..JobSpec::default()
        };
        let sent = Instant::now();
        let id = client
            .call(Submit {
                token: RequestToken::random(),
                spec,
                script: None,
            })
            .await
            .context("submit a million-task array")?;
        submits.push(ms_since(sent));
        ids.push(id);
    }
    let after = rss_mib(pid)?;
    // Another primary's RSS would say nothing of what the arrays cost this one.
    let (now_primary, _) = primary_pid(cluster, client).await?;
    ensure!(
        now_primary == primary,
        "the primary moved from {primary} to {now_primary} during the submits"
    );
    for &id in &ids {
        let job = client.call(GetJob { id }).await?;
        let waiting = job.array.as_ref().map_or(0, |a| a.pending.len());
        ensure!(
            job.state == JobState::Pending && waiting == 1_000_000,
            "array {id} is {:?} with {waiting} tasks waiting in it, not pending with 1,000,000",
            job.state
        );
    }
    let pages = first_pages(client, args.pages, ids[0]).await?;
    eprintln!(
        "xce-bench arrays: {} arrays of 1,000,000 tasks pending; primary {primary} RSS {before:.1} -> {after:.1} MiB",
        ids.len()
    );
    kill_all(client, operator, &ids).await?;
    operator
        .call(queue("normal", QueueAction::Activate))
        .await?;
    submits.sort_by(f64::total_cmp);
    metric("array_submit_ms", quantile(&submits, 0.50), "ms");
    metric(
        "array_rss_mb_per_1m",
        (after - before) / args.big_arrays as f64,
        "MiB",
    );
    if !pages.is_empty() {
        metric("first_page_ms", quantile(&pages, 0.50), "ms");
    }
    Ok(())
}

/// Times `n` calls for the first page of the job list, as `xce jobs` asks for it (no filter,
/// the controller's default page); each page must hold job `expected`. Sorted, in ms.
async fn first_pages(client: &Client, n: usize, expected: JobId) -> anyhow::Result<Vec<f64>> {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let sent = Instant::now();
        let page = client
            .call(ListJobs {
                filter: JobFilter::default(),
                after: 0,
                limit: 0,
            })
            .await
            .context("list the first page of jobs")?;
        times.push(ms_since(sent));
        ensure!(
            page.jobs.iter().any(|j| j.id == expected),
            "the first page ({} jobs) does not hold array {expected}",
            page.jobs.len()
        );
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}

/// Kills each of `ids` and waits (60 s at most) until every one has ended.
async fn kill_all(client: &Client, operator: &Client, ids: &[JobId]) -> anyhow::Result<()> {
    for &id in ids {
        operator
            .call(ControlJob {
                token: RequestToken::random(),
                id,
                action: JobAction::Kill,
            })
            .await
            .with_context(|| format!("kill array {id}"))?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for &id in ids {
        loop {
            let job = client.call(GetJob { id }).await?;
            if job.state.is_final() {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "array {id} is still {:?} 60 s after its kill",
                job.state
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(())
}

/// The primary's name and pid: the controllers are this benchmark's own processes.
async fn primary_pid(cluster: &BenchCluster, client: &Client) -> anyhow::Result<(String, u32)> {
    let name = client
        .call(GetCluster)
        .await?
        .primary
        .context("the cluster names no primary")?;
    let pid = cluster
        .local
        .controllers
        .iter()
        .find(|d| d.name == name)
        .and_then(|d| d.pid())
        .with_context(|| {
            format!("the primary {name} is not a running controller of this benchmark")
        })?;
    Ok((name, pid))
}

/// A process's VmRSS, in MiB.
fn rss_mib(pid: u32) -> anyhow::Result<f64> {
    crate::scale::proc_mib(pid, "VmRSS").with_context(|| format!("read VmRSS of pid {pid}"))
}

fn ms_since(at: Instant) -> f64 {
    at.elapsed().as_secs_f64() * 1000.0
}

fn queue(name: &str, action: QueueAction) -> ControlQueue {
    ControlQueue {
        token: RequestToken::random(),
        name: name.into(),
        action,
    }
}

/// Submits with `submit` into the inactive default queue, activates it, and returns jobs/s
/// until nothing is pending or running.
async fn drain<F, Fut>(
    client: &xce_client::Client,
    operator: &xce_client::Client,
    n: usize,
    submit: F,
) -> anyhow::Result<f64>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    operator
        .call(queue("normal", QueueAction::Inactivate))
        .await?;
    submit().await?;
    let started = Instant::now();
    operator
        .call(queue("normal", QueueAction::Activate))
        .await?;
    let deadline = started + Duration::from_secs(600);
    loop {
        let (pending, running) = crate::sched::queue_counts(client).await?;
        if pending == 0 && running == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!("{pending} pending and {running} running after 600 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!("xce-bench arrays: drained {n} in {elapsed:.2} s");
    Ok(n as f64 / elapsed)
}

fn job(dependency: Option<Expr>) -> JobSpec {
    JobSpec {
        command: vec!["true".into()],
        dependency,
        ..JobSpec::default()
    }
}

/// `afterok:PARENT`.
fn after_ok(parent: u64) -> Expr {
    Expr::Term(Term::On(
        Kind::AfterOk,
        JobRef {
            id: parent,
            tasks: None,
        },
    ))
}

/// From the event of `parent`'s end to the event of `child`'s dispatch, as they arrive.
async fn release_ms(stream: &mut EventStream, parent: u64, child: u64) -> anyhow::Result<f64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen: HashMap<u64, Instant> = HashMap::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let item = match tokio::time::timeout(left, stream.next()).await {
            Ok(Some(item)) => item,
            Ok(None) => bail!("the event stream ended"),
            Err(_) => bail!("job {child} was not dispatched within 60 s of its submit"),
        };
        let ClusterEvent::Job { id, state, .. } = item_event(item)? else {
            continue;
        };
        let at = Instant::now();
        match (id, state) {
            (id, JobState::Done | JobState::Exited) if id == parent => {
                seen.insert(parent, at);
            }
            (id, JobState::Dispatched) if id == child => {
                let Some(ended) = seen.get(&parent) else {
                    bail!("job {child} was dispatched before its parent {parent} ended");
                };
                return Ok(at.duration_since(*ended).as_secs_f64() * 1000.0);
            }
            _ => {}
        }
    }
}

fn item_event(item: StreamItem) -> anyhow::Result<ClusterEvent> {
    match item {
        StreamItem::Event(e) => Ok(e),
        StreamItem::Resync { reason } => bail!("events were lost on an idle cluster: {reason}"),
    }
}
