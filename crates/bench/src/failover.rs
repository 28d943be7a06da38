//! `xce-bench failover`: a fault on the primary under load, N times, and the outage clients
//! see: from the fault to the first acknowledgement of a write sent after it (a write the old
//! primary had already replicated when the fault began says nothing about the outage). Faults: `kill` (SIGKILL),
//! `partition` (cut off from every standby), `pause` (SIGSTOP), `delay` (a 150 ms round trip
//! to every standby, more than openraft's 50 ms append timeout).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use xce_client::ops::{GetCluster, Submit};
use xce_client::types::{JobSpec, RequestToken};
use xce_client::ClientConfig;

use crate::cluster::BenchCluster;
use crate::{metric_with, quantile};

/// What happens to the primary in each round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fault {
    Kill,
    Partition,
    Pause,
    Delay,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Partition => "partition",
            Fault::Pause => "pause",
            Fault::Delay => "delay",
        }
    }
}

/// One way delay of the `delay` fault: a 150 ms round trip.
const DELAY: Duration = Duration::from_millis(75);

#[derive(Debug, Args)]
pub struct FailoverArgs {
    /// Faults on the primary, one per round.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// Which fault.
    #[arg(long, value_enum, default_value_t = Fault::Kill)]
    fault: Fault,
    /// Controllers in the cluster.
    #[arg(long, default_value_t = 3)]
    controllers: usize,
    /// Mutual TLS on every connection: off, on, or both (one cluster of each in this run;
    /// each metric line says which).
    #[arg(long, value_enum, default_value_t = crate::TlsMode::Off)]
    tls: crate::TlsMode,
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
    for tls in args.tls.runs() {
        run_once(&args, tls).await?;
    }
    Ok(())
}

/// One cluster, `rounds` faults.
async fn run_once(args: &FailoverArgs, tls: bool) -> anyhow::Result<()> {
    let links = matches!(args.fault, Fault::Partition | Fault::Delay);
    let mut cluster = BenchCluster::start_tls(args.controllers, links, tls).await?;
    eprintln!(
        "xce-bench failover: {} controllers, {} submitters, {} rounds of {}",
        args.controllers,
        args.clients,
        args.rounds,
        args.fault.name()
    );
    let stop = Arc::new(AtomicBool::new(false));
    // Each acknowledged write: when it was sent, and when its acknowledgement came.
    let acks: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
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
                let sent = Instant::now();
                match client.call(op).await {
                    Ok(_) => acks
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((sent, Instant::now())),
                    Err(e) => {
                        eprintln!("xce-bench failover: a submit failed: {e}");
                        errors += 1
                    }
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
        inject(&mut cluster, args.fault, index, &primary)?;
        let killed_at = Instant::now();
        let first = loop {
            let first = acks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .filter(|(sent, _)| *sent > killed_at)
                .map(|(_, acked)| *acked)
                .min();
            if let Some(t) = first {
                break t;
            }
            anyhow::ensure!(
                killed_at.elapsed() < ROUND_LIMIT,
                "round {round}: no write acknowledged within {ROUND_LIMIT:?} of the fault"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let outage = (first - killed_at).as_secs_f64() * 1000.0;
        eprintln!(
            "round {round}: {} {primary}, first write after {outage:.1} ms",
            args.fault.name()
        );
        outages.push(outage);
        repair(&mut cluster, args.fault, index)?;
        wait_all_members(&probe, args.controllers).await?;
        acks.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
    stop.store(true, Ordering::Relaxed);
    let mut errors = 0;
    for l in load {
        errors += l.await?;
    }
    anyhow::ensure!(errors == 0, "submitters saw {errors} errors");
    outages.sort_by(f64::total_cmp);
    let fault = [
        ("fault", args.fault.name()),
        ("tls", if tls { "on" } else { "off" }),
    ];
    metric_with(
        "failover_outage_p50_ms",
        quantile(&outages, 0.50),
        "ms",
        &fault,
    );
    metric_with(
        "failover_outage_p99_ms",
        quantile(&outages, 0.99),
        "ms",
        &fault,
    );
    metric_with(
        "failover_outage_max_ms",
        outages.last().copied().unwrap_or(f64::NAN),
        "ms",
        &fault,
    );
    Ok(())
}

/// Applies `fault` to controller `index`, the primary `name`.
fn inject(
    cluster: &mut BenchCluster,
    fault: Fault,
    index: usize,
    name: &str,
) -> anyhow::Result<()> {
    match fault {
        Fault::Kill => cluster.local.kill9(index)?,
        Fault::Pause => cluster.local.pause(index)?,
        Fault::Partition => {
            cluster.local.isolate(name)?;
        }
        Fault::Delay => {
            cluster.local.delay(name, DELAY);
        }
    }
    Ok(())
}

/// Undoes `fault` on controller `index`.
fn repair(cluster: &mut BenchCluster, fault: Fault, index: usize) -> anyhow::Result<()> {
    match fault {
        Fault::Kill => cluster.local.start_controller(index)?,
        Fault::Pause => cluster.local.resume(index)?,
        Fault::Partition | Fault::Delay => cluster.local.heal()?,
    }
    Ok(())
}

/// Waits until the primary reports all `n` controllers as members again.
async fn wait_all_members(probe: &xce_client::Client, n: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + ROUND_LIMIT;
    loop {
        if let Ok(Ok(info)) =
            tokio::time::timeout(Duration::from_secs(2), probe.call(GetCluster)).await
        {
            let up = info
                .members
                .iter()
                .filter(|m| m.role != xce_client::types::MemberRole::Unreachable)
                .count();
            if up == n {
                return Ok(());
            }
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the cluster did not heal within {ROUND_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
