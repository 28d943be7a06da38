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
    /// Every submit by a new client (as a one-shot `xce submit` is), whose candidate list
    /// starts with the controller that was primary when the round began: each first guess
    /// is the faulted one.
    #[arg(long)]
    fresh_clients: bool,
}

/// How often each submitter starts a fresh client's submit, and how many of its submits may
/// be under way at once.
const FRESH_EVERY: Duration = Duration::from_millis(10);
const FRESH_IN_FLIGHT: usize = 16;

/// What the submitters saw: every call that ended (when it was sent, when it ended, whether
/// it was acknowledged), the calls under way (when each was sent), and the failures.
#[derive(Default)]
struct Tally {
    ended: Mutex<Vec<(Instant, Instant, bool)>>,
    under_way: Mutex<std::collections::HashMap<u64, Instant>>,
    next: std::sync::atomic::AtomicU64,
    errors: std::sync::atomic::AtomicU64,
}

impl Tally {
    /// One submit of `true`, recorded.
    async fn submit(&self, client: &xce_client::Client) {
        let op = Submit {
            token: RequestToken::random(),
            spec: JobSpec {
                command: vec!["true".into()],
                ..JobSpec::default()
            },
            script: None,
        };
        let call = self.next.fetch_add(1, Ordering::Relaxed);
        let sent = Instant::now();
        lock(&self.under_way).insert(call, sent);
        let result = client.call(op).await;
        lock(&self.under_way).remove(&call);
        if let Err(e) = &result {
            eprintln!("xce-bench failover: a submit failed: {e}");
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        lock(&self.ended).push((sent, Instant::now(), result.is_ok()));
    }

    /// When the first write sent after `fault` was acknowledged, if one was.
    fn first_ack_after(&self, fault: Instant) -> Option<Instant> {
        lock(&self.ended)
            .iter()
            .filter(|(sent, _, ok)| *ok && *sent > fault)
            .map(|(_, end, _)| *end)
            .min()
    }

    /// The longest a call under way at or after `fault` took: those that ended since, and
    /// those still under way (counted until now).
    fn slowest_since(&self, fault: Instant) -> f64 {
        let now = Instant::now();
        let ended = lock(&self.ended);
        let finished = ended
            .iter()
            .filter(|(_, end, _)| *end > fault)
            .map(|(sent, end, _)| *end - *sent);
        let under_way = lock(&self.under_way);
        let running = under_way.values().map(|sent| now - *sent);
        finished
            .chain(running)
            .max()
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    }
}

/// How long after a round's first acknowledgement its slowest call is read: calls still under
/// way by then count with the time they have taken so far.
const SETTLE: Duration = Duration::from_millis(1500);

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
    let tally = Arc::new(Tally::default());
    // The controller each fresh client tries first.
    let first_guess: Arc<Mutex<Option<String>>> = Arc::default();
    let mut load = Vec::new();
    for _ in 0..args.clients {
        let shared = cluster.client(ClientConfig::default())?;
        let fresh = args
            .fresh_clients
            .then(|| cluster.client_factory())
            .transpose()?;
        let (stop, tally, first_guess) = (stop.clone(), tally.clone(), first_guess.clone());
        load.push(tokio::spawn(async move {
            match fresh {
                // One-shot commands come when their users run them, not when the last one
                // ended: a new one every few milliseconds, a bounded number at once.
                Some(factory) => {
                    let slots = Arc::new(tokio::sync::Semaphore::new(FRESH_IN_FLIGHT));
                    while !stop.load(Ordering::Relaxed) {
                        let slot = slots.clone().acquire_owned().await?;
                        let client = factory.starting_at(lock(&first_guess).as_deref())?;
                        let tally = tally.clone();
                        tokio::spawn(async move {
                            tally.submit(&client).await;
                            drop(slot);
                        });
                        tokio::time::sleep(FRESH_EVERY).await;
                    }
                    // Wait for the last ones.
                    let _all = slots.acquire_many(FRESH_IN_FLIGHT as u32).await?;
                }
                None => {
                    while !stop.load(Ordering::Relaxed) {
                        tally.submit(&shared).await;
                        // Keep the load bounded: a handful of submits per millisecond at most.
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                }
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    let probe = cluster.client(ClientConfig::default())?;
    let mut outages = Vec::new();
    let mut slowest_calls = Vec::new();
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
        *lock(&first_guess) = Some(primary.clone());
        inject(&mut cluster, args.fault, index, &primary)?;
        let killed_at = Instant::now();
        let first = loop {
            if let Some(t) = tally.first_ack_after(killed_at) {
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
        tokio::time::sleep(SETTLE).await;
        let slowest = tally.slowest_since(killed_at);
        eprintln!("round {round}: slowest call under way since the fault {slowest:.1} ms");
        slowest_calls.push(slowest);
        repair(&mut cluster, args.fault, index)?;
        wait_all_members(&probe, args.controllers).await?;
        lock(&tally.ended).clear();
    }
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.await??;
    }
    let errors = tally.errors.load(Ordering::Relaxed);
    anyhow::ensure!(errors == 0, "submitters saw {errors} errors");
    outages.sort_by(f64::total_cmp);
    let fault = [
        ("fault", args.fault.name()),
        ("tls", if tls { "on" } else { "off" }),
        (
            "clients",
            if args.fresh_clients {
                "fresh"
            } else {
                "shared"
            },
        ),
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
    metric_with(
        "failover_slowest_call_max_ms",
        slowest_calls.iter().copied().fold(0.0, f64::max),
        "ms",
        &fault,
    );
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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
