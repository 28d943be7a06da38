//! `xce-bench arrays`: job arrays and dependencies, on one cluster (three controllers, two
//! workers, a scheduler).
//!
//! - **Dependency release**, idle: for each of `--dependents` pairs, a `true` job and one that
//!   waits for it (`afterok`); from the primary applying the parent's end to it applying the
//!   dependent's dispatch, as one event stream delivers both (so the client's own delay
//!   cancels out).
//! - **Drain**: `--tasks` `true` jobs submitted one by one to an inactive queue, then the queue
//!   activated, until none is left (`drain_throughput`); then one array of as many `true`
//!   tasks, the same way (`array_drain_throughput`).
//!
//! Still to come with arrays' next steps: `array_submit_ms` and `array_rss_mb_per_1m`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use xce_client::array::JobRef;
use xce_client::dependency::{Expr, Kind, Term};
use xce_client::events::{EventStream, StreamItem};
use xce_client::ops::{claim_role, ControlQueue, Submit};
use xce_client::types::{
    ClusterEvent, EventFilter, JobSpec, JobState, QueueAction, RequestToken, Role,
};
use xce_client::ClientConfig;

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
}

/// Starts the cluster, times the dependents, prints the metric lines.
pub async fn run(args: &ArraysArgs) -> anyhow::Result<()> {
    let worker_args = ["--cpus", "4", "--mem-mb", "1024", "--heartbeat-ms", "500"];
    let cluster = BenchCluster::start_with_schedulers(3, None, 2, &worker_args, 1).await?;
    let client = cluster.client(ClientConfig::default())?;
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

    let operator = cluster.client(ClientConfig::default())?;
    claim_role(&operator, Role::Operator);
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
    let queue = |action| ControlQueue {
        token: RequestToken::random(),
        name: "normal".into(),
        action,
    };
    operator.call(queue(QueueAction::Inactivate)).await?;
    submit().await?;
    let started = Instant::now();
    operator.call(queue(QueueAction::Activate)).await?;
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
