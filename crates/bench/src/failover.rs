//! `xce-bench failover`: kill the primary under load, N times, and measure the outage clients
//! see: from the kill (the process is gone) to the first write acknowledged after it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use xce_client::ops::{GetCluster, Submit};
use xce_client::types::{JobSpec, RequestToken};
use xce_client::ClientConfig;

use crate::cluster::BenchCluster;
use crate::{metric, quantile};

#[derive(Debug, Args)]
pub struct FailoverArgs {
    /// Primary kills.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// Controllers in the cluster.
    #[arg(long, default_value_t = 3)]
    controllers: usize,
    /// Concurrent submitters keeping the cluster busy.
    #[arg(long, default_value_t = 8)]
    clients: usize,
}

/// Upper bound on one round's wait for the first acknowledgement after a kill.
const ROUND_LIMIT: Duration = Duration::from_secs(60);

pub async fn run(args: FailoverArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.controllers >= 3,
        "failover needs at least 3 controllers"
    );
    let mut cluster = BenchCluster::start(args.controllers).await?;
    eprintln!(
        "xce-bench failover: {} controllers, {} submitters, {} rounds",
        args.controllers, args.clients, args.rounds
    );
    let stop = Arc::new(AtomicBool::new(false));
    let acks: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let mut load = Vec::new();
    for _ in 0..args.clients {
        let client = cluster.client(ClientConfig::default())?;
        let (stop, acks) = (stop.clone(), acks.clone());
        load.push(tokio::spawn(async move {
            let spec = JobSpec {
                command: vec!["true".into()],
                ..JobSpec::default()
            };
            let mut errors = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let op = Submit {
                    token: RequestToken::random(),
                    spec: spec.clone(),
                };
                match client.call(op).await {
                    Ok(_) => acks
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(Instant::now()),
                    Err(_) => errors += 1,
                }
                // Keep the load bounded: a handful of submits per millisecond at most.
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            errors
        }));
    }
    let probe = cluster.client(ClientConfig::default())?;
    let mut outages = Vec::new();
    for round in 0..args.rounds {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let primary = probe
            .call(GetCluster)
            .await?
            .primary
            .context("no primary")?;
        let index = cluster
            .local
            .controllers
            .iter()
            .position(|c| c.name == primary)
            .context("primary not in the cluster")?;
        cluster.local.kill9(index)?;
        let killed_at = Instant::now();
        let first = loop {
            let first = acks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .find(|t| **t > killed_at)
                .copied();
            if let Some(t) = first {
                break t;
            }
            anyhow::ensure!(
                killed_at.elapsed() < ROUND_LIMIT,
                "round {round}: no write acknowledged within {ROUND_LIMIT:?} of the kill"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let outage = (first - killed_at).as_secs_f64() * 1000.0;
        eprintln!("round {round}: killed {primary}, first write after {outage:.1} ms");
        outages.push(outage);
        cluster.local.start_controller(index)?;
        acks.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
    stop.store(true, Ordering::Relaxed);
    let mut errors = 0;
    for l in load {
        errors += l.await?;
    }
    anyhow::ensure!(errors == 0, "submitters saw {errors} errors");
    outages.sort_by(f64::total_cmp);
    metric("failover_outage_p50_ms", quantile(&outages, 0.50), "ms");
    metric("failover_outage_p99_ms", quantile(&outages, 0.99), "ms");
    metric(
        "failover_outage_max_ms",
        outages.last().copied().unwrap_or(f64::NAN),
        "ms",
    );
    Ok(())
}
