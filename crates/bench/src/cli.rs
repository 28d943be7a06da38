//! `xce-bench cli`: what one-shot `xce submit` processes cost. `--submits` processes are run
//! by `--concurrency` launchers (each waits for its process before starting the next), against
//! a 3-controller cluster, with the `xce` binary built beside `xce-bench`.
//!
//! It reports throughput, the CPU the `xce` processes used (user + sys of the reaped children,
//! from `getrusage(RUSAGE_CHILDREN)` before and after) and the CPU the controllers used over
//! the same interval (from each one's CPU clock), both per submit. The controllers'
//! figure includes their idle work (Raft heartbeats) during the run; the idle rate is measured
//! first and printed on stderr, so it can be told apart.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use clap::{Args, ValueEnum};
use nix::sys::resource::{getrusage, UsageWho};
use xce_client::ops::{all_jobs, GetCluster};
use xce_client::ClientConfig;

use crate::cluster::BenchCluster;
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
    let idle = controllers_cpu_ms(&pids)?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_ms_per_s = controllers_cpu_ms(&pids)? - idle;
    eprintln!("xce-bench cli: controllers idle: {idle_ms_per_s:.0} ms CPU per s (all three)");

    let children_before = children_cpu_ms()?;
    let controllers_before = controllers_cpu_ms(&pids)?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.timeout_s);
    let next = Arc::new(AtomicUsize::new(0));
    let mut launchers = Vec::with_capacity(args.concurrency);
    for _ in 0..args.concurrency {
        let (launch, next, total) = (launch.clone(), next.clone(), args.submits);
        launchers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < total {
                if Instant::now() > deadline {
                    bail!("the run took longer than its limit");
                }
                let t = Instant::now();
                launch.submit().await?;
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
    let controllers_ms = controllers_cpu_ms(&pids)? - controllers_before;
    let children_ms = children_cpu_ms()? - children_before;
    latencies.sort_by(f64::total_cmp);
    let n = latencies.len();

    // Every submit (and the warm-up) must be stored exactly once.
    let client = cluster.client(ClientConfig::default())?;
    let jobs = tokio::time::timeout(
        Duration::from_secs(60),
        all_jobs(&client, Default::default()),
    )
    .await??;
    ensure!(
        jobs.len() == n + 1,
        "{} jobs stored for {} acknowledged submits",
        jobs.len(),
        n + 1
    );
    eprintln!(
        "xce-bench cli: {n} submits in {elapsed:?}, all stored once; client {children_ms:.0} ms, \
         controllers {controllers_ms:.0} ms CPU in all"
    );
    metric(
        "cli_submit_throughput",
        n as f64 / elapsed.as_secs_f64(),
        "submits/s",
    );
    metric("cli_cpu_ms_client", children_ms / n as f64, "ms");
    metric("cli_cpu_ms_controllers", controllers_ms / n as f64, "ms");
    metric(
        "cli_submit_latency_p50_ms",
        quantile(&latencies, 0.50),
        "ms",
    );
    metric(
        "cli_submit_latency_p99_ms",
        quantile(&latencies, 0.99),
        "ms",
    );
    Ok(())
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
        let child = tokio::process::Command::new(&self.xce)
            .args(["submit", "--name", "bench", "--", "true"])
            .env("XCE_PEERS", &self.peers)
            .env("XDG_CACHE_HOME", &self.cache)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // A process still running at its limit is killed (by its pid) when dropped.
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start {}", self.xce.display()))?;
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

/// User + system CPU of every reaped child of this process so far, in ms.
fn children_cpu_ms() -> anyhow::Result<f64> {
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).context("getrusage(RUSAGE_CHILDREN)")?;
    let ms = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 * 1000.0 + t.tv_usec() as f64 / 1000.0;
    Ok(ms(usage.user_time()) + ms(usage.system_time()))
}

/// CPU time of the given processes (every thread, the exited ones too), summed, in ms. Read
/// from each process's CPU clock, which counts nanoseconds: `/proc/<pid>/stat` counts 10 ms
/// ticks, and a short run's few ms per controller read as 0 from it.
fn controllers_cpu_ms(pids: &[u32]) -> anyhow::Result<f64> {
    let mut ms = 0.0;
    for &pid in pids {
        ms += process_cpu_ms(pid)?;
    }
    Ok(ms)
}

fn process_cpu_ms(pid: u32) -> anyhow::Result<f64> {
    let raw = i32::try_from(pid).with_context(|| format!("pid {pid} out of range"))?;
    let clock = nix::time::clock_getcpuclockid(nix::unistd::Pid::from_raw(raw))
        .with_context(|| format!("clock_getcpuclockid({pid})"))?;
    let time =
        nix::time::clock_gettime(clock).with_context(|| format!("CPU clock of process {pid}"))?;
    Ok(time.tv_sec() as f64 * 1000.0 + time.tv_nsec() as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::controllers_cpu_ms;

    #[test]
    fn another_process_s_cpu_is_read_below_a_tick() {
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 30",
            ])
            .spawn()
            .unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut last = 0.0;
        // The loop's CPU shows up as it runs; a tick-based reading would step by 10 ms.
        while std::time::Instant::now() < deadline {
            last = controllers_cpu_ms(&[pid]).unwrap();
            if last > 0.0 && last % 10.0 != 0.0 {
                break;
            }
            std::thread::yield_now();
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(last > 0.0 && last % 10.0 != 0.0, "read {last} ms");
        assert!(controllers_cpu_ms(&[u32::MAX]).is_err());
    }
}
