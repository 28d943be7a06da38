//! `xce-bench submit`: many clients submit trivial jobs as fast as acknowledgements come back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use xce_client::ops::{all_jobs, Submit};
use xce_client::types::{JobSpec, RequestToken};
use xce_client::ClientConfig;

use crate::cluster::BenchCluster;
use crate::{metric, quantile};

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// Controllers in the cluster.
    #[arg(long, default_value_t = 3)]
    controllers: usize,
    /// Concurrent client connections.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Submits in flight per client connection (callers sharing one connection, as in an
    /// apiserver or a submit gateway); 1 makes every client wait for each acknowledgement.
    #[arg(long, default_value_t = 16)]
    inflight: usize,
    /// Total acknowledged submits to make.
    #[arg(long, default_value_t = 20_000)]
    jobs: usize,
}

pub async fn run(args: SubmitArgs) -> anyhow::Result<()> {
    let cluster = BenchCluster::start(args.controllers).await?;
    let workers = (args.clients * args.inflight).max(1);
    // Spread the jobs exactly: the first `jobs % workers` workers take one more.
    let share = |w: usize| args.jobs / workers + usize::from(w < args.jobs % workers);
    eprintln!(
        "xce-bench submit: {} controllers, {} clients x {} in flight, {} jobs",
        args.controllers, args.clients, args.inflight, args.jobs
    );
    let spec = Arc::new(JobSpec {
        name: "bench".into(),
        user: "bench".into(),
        command: vec!["true".into()],
        ..JobSpec::default()
    });
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..args.clients {
        let client = cluster.client(ClientConfig::default())?;
        for i in 0..args.inflight {
            let client = client.clone();
            let spec = spec.clone();
            let per_worker = share(c * args.inflight + i);
            tasks.push(tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per_worker);
                for _ in 0..per_worker {
                    let t = Instant::now();
                    let op = Submit {
                        token: RequestToken::random(),
                        spec: (*spec).clone(),
                    };
                    client.call(op).await?;
                    latencies.push(t.elapsed().as_secs_f64() * 1000.0);
                }
                Ok::<_, xce_client::ClientError>(latencies)
            }));
        }
    }
    let mut latencies = Vec::with_capacity(args.jobs);
    for task in tasks {
        latencies.extend(task.await??);
    }
    let elapsed = started.elapsed();
    latencies.sort_by(f64::total_cmp);
    let acked = latencies.len();

    // Every acknowledged submit must be there exactly once.
    let client = cluster.client(ClientConfig::default())?;
    let jobs = tokio::time::timeout(
        Duration::from_secs(60),
        all_jobs(&client, Default::default()),
    )
    .await??;
    anyhow::ensure!(
        jobs.len() == acked,
        "{} jobs stored for {acked} acknowledged submits",
        jobs.len()
    );
    eprintln!("xce-bench submit: {acked} acknowledged in {elapsed:?}, all stored once");
    metric(
        "submit_throughput",
        acked as f64 / elapsed.as_secs_f64(),
        "submits/s",
    );
    metric("submit_latency_p50_ms", quantile(&latencies, 0.50), "ms");
    metric("submit_latency_p99_ms", quantile(&latencies, 0.99), "ms");
    Ok(())
}
