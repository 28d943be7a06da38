//! `xce-bench submit`: many clients submit trivial jobs as fast as acknowledgements come back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use xce_client::ops::{all_jobs, Submit};
use xce_client::types::{JobSpec, RequestToken};
use xce_client::ClientConfig;

use crate::cluster::BenchCluster;
use crate::{metric, metric_with, quantile};

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
    /// Mutual TLS on every connection: off, on, or both (a cluster without, then one with,
    /// in this run; each metric line says which, and `tls_throughput_ratio` compares them).
    #[arg(long, value_enum, default_value_t = crate::TlsMode::Off)]
    tls: crate::TlsMode,
}

pub async fn run(args: SubmitArgs) -> anyhow::Result<()> {
    let mut throughput = Vec::new();
    for tls in args.tls.runs() {
        throughput.push(run_once(&args, tls).await?);
    }
    if let [off, on] = throughput[..] {
        metric("tls_throughput_ratio", on / off, "ratio");
    }
    Ok(())
}

/// One cluster, one load; returns the throughput.
async fn run_once(args: &SubmitArgs, tls: bool) -> anyhow::Result<f64> {
    let cluster = BenchCluster::start_tls(args.controllers, false, tls).await?;
    let tag = [("tls", if tls { "on" } else { "off" })];
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
                        script: None,
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
    let throughput = acked as f64 / elapsed.as_secs_f64();
    metric_with("submit_throughput", throughput, "submits/s", &tag);
    metric_with(
        "submit_latency_p50_ms",
        quantile(&latencies, 0.50),
        "ms",
        &tag,
    );
    metric_with(
        "submit_latency_p99_ms",
        quantile(&latencies, 0.99),
        "ms",
        &tag,
    );
    Ok(throughput)
}
