//! `xce-bench cli`: what one-shot `xce submit` processes cost. `--submits` processes are run
//! by `--concurrency` launchers (each waits for its process before starting the next), against
//! a 3-controller cluster, with the `xce` binary built beside `xce-bench`.
//!
//! It reports throughput, the CPU the `xce` processes used (user + sys of the reaped children,
//! from `getrusage(RUSAGE_CHILDREN)` before and after) and the CPU the controllers used over
//! the same interval (from each one's CPU clock), both per submit. The controllers'
//! figure includes their idle work (Raft heartbeats) during the run; the idle rate is measured
//! first and printed on stderr, so it can be told apart.
//!
//! Then the floor, in the same run: what one process of the system's `true` costs when the
//! same launchers start it (`cli_cpu_ms_process_floor`). A one-shot command costs at least
//! that; on stderr, the throughput two numbers allow on this machine's cores: a client
//! costing only the floor, with the controllers as measured.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use clap::{Args, ValueEnum};
use xce_client::ops::{all_jobs, GetCluster};
use xce_client::ClientConfig;

use crate::cluster::BenchCluster;
use crate::cpu;
use crate::{metric, quantile};

/// Which controller the `XCE_PEERS` given to the `xce` processes lists first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum First {
    /// A standby: a client without a hint is redirected (what most users of a fixed list see).
    Standby,
    /// The primary: the first connect is the right one.
    Primary,
}

#[derive(Debug, Args)]
pub struct CliArgs {
    /// One-shot `xce submit` processes to run.
    #[arg(long, default_value_t = 1000)]
    submits: usize,
    /// Launchers running `xce submit` processes side by side.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Which controller is first in the peers list the processes are given.
    #[arg(long, value_enum, default_value = "standby")]
    first: First,
    /// Upper bound on the whole run, in seconds.
    #[arg(long, default_value_t = 600)]
    timeout_s: u64,
    /// Then as many submits again, each a 2 KiB job script (with `#XCE` directives) on the
    /// process's standard input, and the two forms' client CPU compared (`cli_script_cpu_ratio`).
    #[arg(long)]
    script: bool,
}

/// What one series of submits measured.
struct Series {
    n: usize,
    elapsed: Duration,
    children_ms: f64,
    controllers_ms: f64,
    latencies: Vec<f64>,
}

/// The script `--script` submits: directives, then 2 KiB of a job's body.
fn bench_script() -> Vec<u8> {
    let mut body = b"#!/bin/sh\n#XCE --name bench --time 1:00:00\n#XCE -e STAGE=bench\n".to_vec();
    while body.len() < 2048 {
        body.extend_from_slice(b"echo \"step $STAGE $XCE_JOB_ID\" # a line of a job's script\n");
    }
    body
}

/// Upper bound on one `xce submit` process (its own retry budget is about 10 s).
const PROCESS_LIMIT: Duration = Duration::from_secs(30);

/// Controllers in the benchmark's cluster.
const CONTROLLERS: usize = 3;

pub async fn run(args: CliArgs) -> anyhow::Result<()> {
    ensure!(args.submits > 0, "--submits must be at least 1");
    ensure!(args.concurrency > 0, "--concurrency must be at least 1");
    let xce = xce_devcluster::sibling_bin_dir()?.join("xce");
    ensure!(
        xce.exists(),
        "{} not found: build it first (cargo build --release -p xce-cli)",
        xce.display()
    );
    let cluster = BenchCluster::start(CONTROLLERS).await?;
    let peers = ordered_peers(&cluster, args.first).await?;
    // The processes keep their primary hint here, not in the user's cache.
    let cache = tempfile::Builder::new()
        .prefix("xce-bench-cli-")
        .tempdir()
        .context("create a temporary cache directory")?;
    let pids: Vec<u32> = cluster
        .local
        .controllers
        .iter()
        .filter_map(|d| d.pid())
        .collect();
    ensure!(pids.len() == CONTROLLERS, "a controller is not running");
    eprintln!(
        "xce-bench cli: {} submits by {} launchers, peers {peers}",
        args.submits, args.concurrency
    );
    let launch = Arc::new(Launch {
        xce,
        peers,
        cache: cache.path().to_path_buf(),
    });

    // One process first, outside the measurement: it pages the binary in and leaves the
    // hint a user's earlier command would have left.
    launch.submit().await.context("warm-up submit")?;
    let idle = cpu::processes_ms(&pids)?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_ms_per_s = cpu::processes_ms(&pids)? - idle;
    eprintln!("xce-bench cli: controllers idle: {idle_ms_per_s:.0} ms CPU per s (all three)");

    let plain = measure(&launch, &args, &pids, None).await?;
    let script = match args.script {
        true => Some(measure(&launch, &args, &pids, Some(bench_script().into())).await?),
        false => None,
    };
    let n = plain.n;

    // Every submit (and the warm-up) must be stored exactly once.
    let client = cluster.client(ClientConfig::default())?;
    let jobs = tokio::time::timeout(
        Duration::from_secs(60),
        all_jobs(&client, Default::default()),
    )
    .await??;
    let submitted = n + script.as_ref().map_or(0, |s| s.n) + 1;
    ensure!(
        jobs.len() == submitted,
        "{} jobs stored for {submitted} acknowledged submits",
        jobs.len(),
    );
    report("", &plain);
    if let Some(script) = &script {
        report("script_", script);
        let ratio = (script.children_ms / script.n as f64) / (plain.children_ms / n as f64);
        metric("cli_script_cpu_ratio", ratio, "x");
        eprintln!(
            "xce-bench cli: a 2 KiB script on stdin costs {ratio:.3}x the client CPU of `-- true`"
        );
    }
    let floor = cpu::process_floor_ms(
        &cpu::true_program()?,
        n.min(cpu::FLOOR_PROCESSES),
        args.concurrency,
    )
    .await
    .context("measure the process floor")?;
    metric("cli_cpu_ms_process_floor", floor, "ms");
    let per_submit = plain.controllers_ms / n as f64;
    let cores = cpu::cores();
    eprintln!(
        "xce-bench cli: a process costs {floor:.2} ms of CPU here; {cores} cores allow at most \
         {:.0} submits/s with a client at that floor and the controllers' {per_submit:.2} ms",
        cores as f64 * 1000.0 / (floor + per_submit)
    );
    Ok(())
}

/// Runs `args.submits` processes by `args.concurrency` launchers, each a plain submit or,
/// with `script`, that script on standard input, and measures them.
async fn measure(
    launch: &Arc<Launch>,
    args: &CliArgs,
    pids: &[u32],
    script: Option<Arc<[u8]>>,
) -> anyhow::Result<Series> {
    let children_before = cpu::children_ms()?;
    let controllers_before = cpu::processes_ms(pids)?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.timeout_s);
    let next = Arc::new(AtomicUsize::new(0));
    let mut launchers = Vec::with_capacity(args.concurrency);
    for _ in 0..args.concurrency {
        let (launch, next, total) = (launch.clone(), next.clone(), args.submits);
        let script = script.clone();
        launchers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < total {
                if Instant::now() > deadline {
                    bail!("the run took longer than its limit");
                }
                let t = Instant::now();
                launch.submit_with(script.as_deref()).await?;
                latencies.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            Ok(latencies)
        }));
    }
    let mut latencies = Vec::with_capacity(args.submits);
    for launcher in launchers {
        latencies.extend(launcher.await??);
    }
    let elapsed = started.elapsed();
    let controllers_ms = cpu::processes_ms(pids)? - controllers_before;
    let children_ms = cpu::children_ms()? - children_before;
    latencies.sort_by(f64::total_cmp);
    Ok(Series {
        n: latencies.len(),
        elapsed,
        children_ms,
        controllers_ms,
        latencies,
    })
}

/// Prints a series' figures, their names prefixed (`cli_script_...`).
fn report(prefix: &str, s: &Series) {
    let n = s.n;
    eprintln!(
        "xce-bench cli: {prefix}{n} submits in {:?}, all stored once; client {:.0} ms, \
         controllers {:.0} ms CPU in all",
        s.elapsed, s.children_ms, s.controllers_ms
    );
    let name = |what: &str| format!("cli_{prefix}{what}");
    metric(
        &name("submit_throughput"),
        n as f64 / s.elapsed.as_secs_f64(),
        "submits/s",
    );
    metric(&name("cpu_ms_client"), s.children_ms / n as f64, "ms");
    metric(
        &name("cpu_ms_controllers"),
        s.controllers_ms / n as f64,
        "ms",
    );
    metric(
        &name("submit_latency_p50_ms"),
        quantile(&s.latencies, 0.50),
        "ms",
    );
    metric(
        &name("submit_latency_p99_ms"),
        quantile(&s.latencies, 0.99),
        "ms",
    );
}

/// How the launchers run one `xce submit`.
struct Launch {
    xce: PathBuf,
    peers: String,
    cache: PathBuf,
}

impl Launch {
    /// Runs one `xce submit -- true` to completion; any failure is the benchmark's failure.
    async fn submit(&self) -> anyhow::Result<()> {
        self.submit_with(None).await
    }

    /// [`Launch::submit`], or with `script` on its standard input (`xce submit < SCRIPT`).
    async fn submit_with(&self, script: Option<&[u8]>) -> anyhow::Result<()> {
        let mut command = tokio::process::Command::new(&self.xce);
        match script {
            None => command.args(["submit", "--name", "bench", "--", "true"]),
            Some(_) => command.arg("submit"),
        };
        let mut child = command
            .env("XCE_PEERS", &self.peers)
            .env("XDG_CACHE_HOME", &self.cache)
            .env_remove("RUST_LOG")
            .stdin(if script.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // A process still running at its limit is killed (by its pid) when dropped.
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start {}", self.xce.display()))?;
        if let (Some(body), Some(mut stdin)) = (script, child.stdin.take()) {
            use tokio::io::AsyncWriteExt;
            stdin.write_all(body).await.context("write the script")?;
        }
        let out = tokio::time::timeout(PROCESS_LIMIT, child.wait_with_output())
            .await
            .with_context(|| format!("xce submit still running after {PROCESS_LIMIT:?}"))?
            .context("wait for xce submit")?;
        ensure!(
            out.status.success(),
            "xce submit failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(())
    }
}

/// The cluster's peers list with the controller `first` asks for in front.
async fn ordered_peers(cluster: &BenchCluster, first: First) -> anyhow::Result<String> {
    let client = cluster.client(ClientConfig::default())?;
    let info = tokio::time::timeout(Duration::from_secs(10), client.call(GetCluster))
        .await
        .context("ask for the primary")??;
    let primary = info.primary.context("no primary")?;
    let entries: Vec<&str> = cluster.local.peers().split(',').collect();
    let is_primary = |e: &&str| e.split_once('=').is_some_and(|(name, _)| name == primary);
    let (mut front, back): (Vec<&str>, Vec<&str>) = match first {
        First::Primary => entries.into_iter().partition(is_primary),
        First::Standby => entries.into_iter().partition(|e| !is_primary(e)),
    };
    front.extend(back);
    Ok(front.join(","))
}
