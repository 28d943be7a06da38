//! `xce-bench scale`: what N jobs cost the controllers. Loads N jobs through the real client
//! (many concurrent submitters), waits until every controller has built a snapshot covering
//! the whole load, then measures each controller's RSS, the stored snapshot, a full restart
//! (every controller stopped with SIGTERM and started again) until a primary serves a
//! linearizable read, and listing the first page and then every page.
//!
//! Snapshots follow openraft's policy (`raft.snapshot_logs` entries since the last one), so
//! after the load the newest snapshot lags it by up to that many entries. To make the restart
//! replay a snapshot rather than a long log tail, the benchmark then re-sends one
//! already-applied submit (same request token: a log entry answered as a duplicate, no new
//! job) one at a time until every controller has started and finished a snapshot after the
//! load ended. Which snapshot each controller restarted from, and how many log entries it
//! re-applied on top, is read from openraft's info lines in the controllers' logs.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use clap::Args;
use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use xce_client::backoff::RetryPolicy;
use xce_client::ops::{list_jobs, GetCluster, ListJobs, Submit};
use xce_client::types::{JobId, JobSpec, RequestToken};
use xce_client::{Client, ClientConfig, ClientError, Status};

use crate::cluster::BenchCluster;
use crate::metric;

#[derive(Debug, Args)]
pub struct ScaleArgs {
    /// Jobs to load.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) jobs: usize,
    /// Controllers in the cluster.
    #[arg(long, default_value_t = 3)]
    pub(crate) controllers: usize,
    /// Concurrent client connections submitting.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Submits in flight per client connection.
    #[arg(long, default_value_t = 32)]
    inflight: usize,
    /// `raft.snapshot_logs` given to the controllers: build a snapshot after this many log
    /// entries since the last one.
    #[arg(long, default_value_t = 1000)]
    pub(crate) snapshot_logs: u64,
    /// Give up when loading takes longer than this many seconds.
    #[arg(long, default_value_t = 1800)]
    pub(crate) load_timeout_s: u64,
    /// Load at this cluster version (held by the controllers' `hold_version`), so that the
    /// data dirs are written in that store format, and restart without the hold: the restart
    /// then reads (migrates) the older format, and the version is raised after it. Its time
    /// is `scale_restart_ready_s` as before; how long the raise took is printed beside it.
    #[arg(long)]
    load_at_version: Option<u32>,
    /// Run the jobs to their end on two workers and let them retire to history instead:
    /// prints `scale_rss_mb_after_retire` and `history_query_p99_ms`.
    #[arg(long)]
    finished: bool,
}

/// The controllers' log filter: warnings, plus openraft's lines on snapshots and on what a
/// starting node found in its store.
const LOG_FILTER: &str =
    "warn,openraft::engine::handler::snapshot_handler=info,openraft::storage::helper=info";
const SNAPSHOT_PUSHED: &str = "push snapshot building command";
const SNAPSHOT_UPDATED: &str = "update_snapshot: ";
const INITIAL_STATE: &str = "get_initial_state";

/// The store's tables, read (with every controller stopped) to size the snapshot and the log.
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");

const MIB: f64 = 1024.0 * 1024.0;

pub async fn run(args: ScaleArgs) -> anyhow::Result<()> {
    ensure!(args.jobs > 0, "--jobs must be at least 1");
    ensure!(args.snapshot_logs > 0, "--snapshot-logs must be at least 1");
    if args.finished {
        return crate::finished::run(&args).await;
    }
    let config = format!("raft:\n  snapshot_logs: {}\n", args.snapshot_logs);
    let held = match args.load_at_version {
        Some(v) => format!("{config}hold_version: {v}\n"),
        None => config.clone(),
    };
    let mut cluster = BenchCluster::start_configured(args.controllers, &held, LOG_FILTER).await?;
    let pids = controller_pids(&cluster)?;
    let baseline = rss_all(&pids);
    eprintln!(
        "xce-bench scale: {} controllers, {} clients x {} in flight, {} jobs, snapshot every {} entries; idle RSS {} MiB",
        args.controllers,
        args.clients,
        args.inflight,
        args.jobs,
        args.snapshot_logs,
        fmt_mib(&baseline)
    );
    let spec = JobSpec {
        name: "bench".into(),
        user: "bench".into(),
        command: vec!["true".into()],
        ..JobSpec::default()
    };

    // Load.
    let done = Arc::new(AtomicUsize::new(0));
    let sampler = Sampler::start(pids.clone(), done.clone());
    let loaded = load(&cluster, &args, &spec, done).await;
    let load_peak = sampler.stop().await?;
    let (load_time, replay) = loaded?;
    let after_load = rss_all(&pids);
    eprintln!(
        "xce-bench scale: {} jobs loaded in {:.1} s ({:.0} submits/s); RSS after load {} MiB, peak sampled during load {} MiB",
        args.jobs,
        load_time.as_secs_f64(),
        args.jobs as f64 / load_time.as_secs_f64(),
        fmt_mib(&after_load),
        fmt_mib(&load_peak)
    );

    // A snapshot covering the whole load on every controller.
    let settle_started = Instant::now();
    let (duplicates, snapshots) = settle(&cluster, &spec, replay).await?;
    let after_snapshot = rss_all(&pids);
    let hwm: Vec<f64> = pids
        .iter()
        .map(|p| proc_mib(*p, "VmHWM").unwrap_or(0.0))
        .collect();
    eprintln!(
        "xce-bench scale: snapshot on every controller {:.1} s after the load ({duplicates} duplicate submits, no new jobs), at log index {:?}; RSS {} MiB, peak (VmHWM) {} MiB",
        settle_started.elapsed().as_secs_f64(),
        snapshots,
        fmt_mib(&after_snapshot),
        fmt_mib(&hwm)
    );
    for (i, pid) in pids.iter().enumerate() {
        if let Some(r) = smaps_rollup(*pid) {
            eprintln!("xce-bench scale: c{} smaps_rollup: {r}", i + 1);
        }
    }

    // Full restart.
    let stop_started = Instant::now();
    let killed = cluster.local.stop_all(Duration::from_secs(60));
    eprintln!(
        "xce-bench scale: all controllers stopped (SIGTERM) in {:.2} s{}",
        stop_started.elapsed().as_secs_f64(),
        if killed.is_empty() {
            String::new()
        } else {
            format!("; had to SIGKILL {}", killed.join(", "))
        }
    );
    let stores: Vec<StoreSize> = cluster
        .local
        .controllers
        .iter()
        .map(|d| StoreSize::read(&d.data_dir.join("xce.redb")))
        .collect();
    for (i, s) in stores.iter().enumerate() {
        eprintln!("xce-bench scale: c{} store: {s}", i + 1);
    }
    let snapshot_mib = stores
        .iter()
        .filter_map(|s| s.snapshot_bytes)
        .max()
        .map(|b| b as f64 / MIB)
        .context("no controller's store had a snapshot")?;
    let logs_before: Vec<usize> = log_texts(&cluster)
        .iter()
        .map(|t| t.matches(INITIAL_STATE).count())
        .collect();

    if let Some(v) = args.load_at_version {
        // The data dirs hold that format only: their identities say so.
        for d in &cluster.local.controllers {
            let identity: serde_json::Value = serde_json::from_slice(
                &std::fs::read(d.data_dir.join("identity.json")).context("read identity.json")?,
            )?;
            ensure!(
                identity["format"].as_u64() == Some(v.into()),
                "{} was written in store format {}, not {v}",
                d.name,
                identity["format"]
            );
        }
        let file = cluster
            .local
            .config_file()
            .context("the controllers have no config file")?;
        std::fs::write(file, &config).context("write the controllers' config")?;
        eprintln!("xce-bench scale: the data dirs hold store format {v}; restarting without holding the version");
    }
    let probe = cluster.client(ClientConfig {
        call_timeout: Duration::from_secs(2),
        retry: RetryPolicy {
            max_attempts: 1,
            initial: Duration::from_millis(10),
            multiplier: 1.0,
            max_delay: Duration::from_millis(10),
        },
        ..ClientConfig::default()
    })?;
    let restart_started = Instant::now();
    for i in 0..cluster.local.controllers.len() {
        cluster.local.start_controller(i)?;
    }
    let ready_deadline = restart_started + Duration::from_secs(300);
    loop {
        let read = ListJobs {
            filter: Default::default(),
            after: 0,
            limit: 1,
        };
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(3), probe.call(read)).await {
            break;
        }
        if Instant::now() > ready_deadline {
            bail!("no primary served a read within 300 s of the restart");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let restart_ready = restart_started.elapsed();
    let pids = controller_pids(&cluster)?;
    let after_restart = rss_all(&pids);
    let client = cluster.client(ClientConfig::default())?;
    let primary = client.call(GetCluster).await?.primary;
    eprintln!(
        "xce-bench scale: primary {} ready {:.2} s after starting every controller; RSS {} MiB",
        primary.as_deref().unwrap_or("?"),
        restart_ready.as_secs_f64(),
        fmt_mib(&after_restart)
    );
    if let Some(v) = args.load_at_version {
        // No longer held: the primary raises the version by itself.
        let deadline = Instant::now() + Duration::from_secs(120);
        let raised = loop {
            let info = client.call(GetCluster).await?;
            if info.active_version > v {
                break info.active_version;
            }
            ensure!(
                Instant::now() < deadline,
                "the cluster's version stayed {v} for 120 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        eprintln!(
            "xce-bench scale: version raised from {v} to {raised} {:.2} s after starting every controller",
            restart_started.elapsed().as_secs_f64()
        );
    }
    // A primary serves once a majority is up: the last controller may still be opening its
    // store, so wait (bounded) until each has logged the state it restarted with.
    let logged_deadline = Instant::now() + Duration::from_secs(30);
    let mut texts = log_texts(&cluster);
    while Instant::now() < logged_deadline
        && texts
            .iter()
            .zip(&logs_before)
            .any(|(text, before)| text.matches(INITIAL_STATE).count() <= *before)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
        texts = log_texts(&cluster);
    }
    for (i, text) in texts.iter().enumerate() {
        let fresh = text.matches(INITIAL_STATE).count() > logs_before[i];
        match text.lines().rev().find(|l| l.contains(INITIAL_STATE)) {
            Some(line) if fresh => {
                eprintln!(
                    "xce-bench scale: c{} restarted with {}",
                    i + 1,
                    Restored::of(line)
                )
            }
            _ => eprintln!("xce-bench scale: c{} logged no initial state", i + 1),
        }
    }

    // Listings.
    let first_started = Instant::now();
    let first = client
        .call(ListJobs {
            filter: Default::default(),
            after: 0,
            limit: 0,
        })
        .await?;
    let first_page = first_started.elapsed();
    ensure!(
        !first.jobs.is_empty() && first.jobs.len() <= args.jobs,
        "the first page holds {} jobs",
        first.jobs.len()
    );
    let all_started = Instant::now();
    let mut pages = 0usize;
    let listed = tokio::time::timeout(
        Duration::from_secs(1800),
        list_jobs(&client, Default::default(), None, |_| pages += 1),
    )
    .await
    .context("listing every page took over 1800 s")??;
    let list_all = all_started.elapsed();
    ensure!(
        listed == args.jobs,
        "listed {listed} jobs, loaded {}",
        args.jobs
    );
    let after_list = rss_all(&pids);
    eprintln!(
        "xce-bench scale: first page ({} jobs) in {:.1} ms; all {listed} jobs in {pages} calls in {:.2} s; RSS after listing {} MiB",
        first.jobs.len(),
        first_page.as_secs_f64() * 1000.0,
        list_all.as_secs_f64(),
        fmt_mib(&after_list)
    );

    let rss_max = [
        &load_peak,
        &after_load,
        &after_snapshot,
        &after_restart,
        &after_list,
    ]
    .iter()
    .flat_map(|v| v.iter().copied())
    .fold(0.0, f64::max);
    let idle = baseline.iter().copied().fold(0.0, f64::max);
    let per_job = |mib: f64| (mib - idle) * MIB / args.jobs as f64;
    let restarted_max = after_restart.iter().copied().fold(0.0, f64::max);
    let hwm_max = hwm.iter().copied().fold(0.0, f64::max);
    eprintln!(
        "xce-bench scale: per job above the idle RSS: {:.0} B at the largest RSS sampled, {:.0} B at the peak (VmHWM), {:.0} B right after the restart; snapshot {:.0} B per job",
        per_job(rss_max),
        per_job(hwm_max),
        per_job(restarted_max),
        snapshot_mib * MIB / args.jobs as f64
    );
    metric("scale_rss_mb_max", rss_max, "MiB");
    metric("scale_snapshot_mb", snapshot_mib, "MiB");
    metric("scale_restart_ready_s", restart_ready.as_secs_f64(), "s");
    metric(
        "scale_list_first_page_ms",
        first_page.as_secs_f64() * 1000.0,
        "ms",
    );
    metric("scale_list_all_s", list_all.as_secs_f64(), "s");
    Ok(())
}

/// One already-applied submit: re-sending it adds a log entry and no job.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Replay {
    token: RequestToken,
    id: JobId,
}

/// Submits `args.jobs` jobs from `clients x inflight` callers; returns how long it took and
/// one of the applied submits.
pub(crate) async fn load(
    cluster: &BenchCluster,
    args: &ScaleArgs,
    spec: &JobSpec,
    done: Arc<AtomicUsize>,
) -> anyhow::Result<(Duration, Replay)> {
    let claimed = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(args.load_timeout_s);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.clients.max(1) {
        let client = cluster.client(ClientConfig::default())?;
        for _ in 0..args.inflight.max(1) {
            let (client, spec) = (client.clone(), spec.clone());
            let (claimed, done, jobs) = (claimed.clone(), done.clone(), args.jobs);
            tasks.push(tokio::spawn(async move {
                let mut last = None;
                while claimed.fetch_add(1, Ordering::Relaxed) < jobs {
                    if Instant::now() > deadline {
                        bail!("timed out");
                    }
                    let token = RequestToken::random();
                    let id = submit(&client, token, &spec).await?;
                    done.fetch_add(1, Ordering::Relaxed);
                    last = Some(Replay { token, id });
                }
                Ok(last)
            }));
        }
    }
    let mut replay = None;
    let mut failed = None;
    for task in tasks {
        match task.await {
            Ok(Ok(last)) => replay = replay.or(last),
            Ok(Err(e)) => failed = Some(e),
            Err(e) => failed = Some(e.into()),
        }
    }
    let acked = done.load(Ordering::Relaxed);
    if let Some(e) = failed {
        bail!(
            "loading stopped after {acked} of {} jobs in {:.0} s: {e:#}",
            args.jobs,
            started.elapsed().as_secs_f64()
        );
    }
    ensure!(
        acked == args.jobs,
        "{acked} of {} jobs acknowledged",
        args.jobs
    );
    let replay = replay.context("no submit was made")?;
    Ok((started.elapsed(), replay))
}

/// One submit through the failover loop, re-sent with the same token (applied at most once)
/// when the loop gives up, three times at most.
async fn submit(client: &Client, token: RequestToken, spec: &JobSpec) -> anyhow::Result<JobId> {
    let mut tries = 0;
    loop {
        let op = Submit {
            token,
            spec: spec.clone(),
            script: None,
        };
        match client.call(op).await {
            Ok(id) => return Ok(id),
            Err(e) if tries >= 3 => return Err(e.into()),
            Err(_) => tries += 1,
        }
    }
}

/// Waits until every controller has started a snapshot after the load and finished it,
/// re-sending an applied submit one at a time so that the entries for the policy accrue.
/// Returns the duplicates sent and each controller's snapshot index.
async fn settle(
    cluster: &BenchCluster,
    spec: &JobSpec,
    replay: Replay,
) -> anyhow::Result<(usize, Vec<u64>)> {
    let marks: Vec<usize> = log_texts(cluster)
        .iter()
        .map(|t| t.matches(SNAPSHOT_PUSHED).count())
        .collect();
    let client = cluster.client(ClientConfig::default())?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut duplicates = 0;
    loop {
        let texts = log_texts(cluster);
        let built: Vec<Option<u64>> = texts
            .iter()
            .zip(&marks)
            .map(|(t, m)| snapshot_after(t, *m))
            .collect();
        if built.iter().all(Option::is_some) {
            return Ok((duplicates, built.into_iter().flatten().collect()));
        }
        if Instant::now() > deadline {
            bail!("no snapshot after the load on every controller within 600 s ({duplicates} duplicate submits sent)");
        }
        let pushed_everywhere = texts
            .iter()
            .zip(&marks)
            .all(|(t, m)| t.matches(SNAPSHOT_PUSHED).count() > *m);
        if pushed_everywhere {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        for _ in 0..50 {
            let op = Submit {
                token: replay.token,
                spec: spec.clone(),
                script: None,
            };
            match client.call(op).await {
                Err(ClientError::Status {
                    status: Status::DupJob,
                    ..
                }) => duplicates += 1,
                // A re-send inside the failover loop may turn the duplicate into its original.
                Ok(id) if id == replay.id => duplicates += 1,
                Ok(id) => bail!(
                    "a re-sent submit created job {id} (the original is {})",
                    replay.id
                ),
                Err(e) => bail!("a re-sent submit failed: {e}"),
            }
        }
    }
}

/// The index of the first snapshot stored after the `mark + 1`-th snapshot build was pushed
/// (builds run one at a time, so that is the build's own snapshot or a newer one).
fn snapshot_after(log: &str, mark: usize) -> Option<u64> {
    let (pushed, _) = log.match_indices(SNAPSHOT_PUSHED).nth(mark)?;
    let rest = &log[pushed..];
    let updated = rest.find(SNAPSHOT_UPDATED)?;
    let line = rest[updated..].lines().next()?;
    // `snapshot_id: "<term>-<node>-<index>"` in the snapshot's Debug form.
    let id = line.split("snapshot_id: \"").nth(1)?.split('"').next()?;
    id.rsplit('-').next()?.parse().ok()
}

/// What a restarted controller found in its store (openraft's `get_initial_state` line).
struct Restored {
    last_applied: Option<u64>,
    committed: Option<u64>,
    last_log: Option<u64>,
    last_purged: Option<u64>,
}

impl Restored {
    fn of(line: &str) -> Restored {
        // `key=T<term>-N<node>-<index>` or `key=None`.
        let field = |key: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
                .and_then(|v| v.rsplit('-').next()?.parse().ok())
        };
        Restored {
            last_applied: field("last_applied"),
            committed: field("committed"),
            last_log: field("last_log_id"),
            last_purged: field("last_purged_log_id"),
        }
    }
}

impl std::fmt::Display for Restored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let replayed = self
            .committed
            .unwrap_or(0)
            .saturating_sub(self.last_applied.unwrap_or(0));
        let kept = self
            .last_log
            .unwrap_or(0)
            .saturating_sub(self.last_purged.unwrap_or(0));
        write!(
            f,
            "snapshot at index {:?}, committed {:?}: {replayed} log entries re-applied; {kept} entries in the stored log (last {:?})",
            self.last_applied, self.committed, self.last_log
        )
    }
}

/// The snapshot and log in one controller's store, read with the controller stopped.
struct StoreSize {
    file_bytes: Option<u64>,
    snapshot_bytes: Option<u64>,
    log_entries: Option<u64>,
    log_bytes: Option<u64>,
    error: Option<String>,
}

impl StoreSize {
    fn read(path: &Path) -> StoreSize {
        let file_bytes = std::fs::metadata(path).ok().map(|m| m.len());
        let read = || -> Result<(Option<u64>, u64, u64), redb::Error> {
            let db = redb::ReadOnlyDatabase::open(path)?;
            let txn = db.begin_read()?;
            let meta = txn.open_table(META)?;
            let snapshot = meta.get("snapshot_data")?.map(|v| v.value().len() as u64);
            let log = txn.open_table(LOG)?;
            let mut bytes = 0u64;
            for item in log.iter()? {
                bytes += item?.1.value().len() as u64;
            }
            Ok((snapshot, log.len()?, bytes))
        };
        match read() {
            Ok((snapshot_bytes, entries, bytes)) => StoreSize {
                file_bytes,
                snapshot_bytes,
                log_entries: Some(entries),
                log_bytes: Some(bytes),
                error: None,
            },
            Err(e) => StoreSize {
                file_bytes,
                snapshot_bytes: None,
                log_entries: None,
                log_bytes: None,
                error: Some(e.to_string()),
            },
        }
    }
}

impl std::fmt::Display for StoreSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: Option<u64>| b.map_or("?".to_string(), |b| format!("{:.1}", b as f64 / MIB));
        write!(
            f,
            "xce.redb {} MiB, snapshot {} MiB, log {} entries {} MiB",
            mib(self.file_bytes),
            mib(self.snapshot_bytes),
            self.log_entries.map_or("?".to_string(), |n| n.to_string()),
            mib(self.log_bytes)
        )?;
        if let Some(e) = &self.error {
            write!(f, " (could not read the store: {e})")?;
        }
        Ok(())
    }
}

/// Samples every controller's RSS twice a second (keeping each one's largest) and prints the
/// load's progress every 10 s, until stopped.
struct Sampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<f64>>,
}

impl Sampler {
    fn start(pids: Vec<u32>, done: Arc<AtomicUsize>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut max = vec![0.0f64; pids.len()];
            let mut next_report = Duration::from_secs(10);
            while !flag.load(Ordering::Relaxed) {
                let now = rss_all(&pids);
                for (m, r) in max.iter_mut().zip(&now) {
                    *m = m.max(*r);
                }
                if started.elapsed() >= next_report {
                    next_report += Duration::from_secs(10);
                    let n = done.load(Ordering::Relaxed);
                    eprintln!(
                        "xce-bench scale: {:>4.0} s: {n} jobs ({:.0}/s), RSS {} MiB",
                        started.elapsed().as_secs_f64(),
                        n as f64 / started.elapsed().as_secs_f64(),
                        fmt_mib(&now)
                    );
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            max
        });
        Sampler { stop, task }
    }

    async fn stop(self) -> anyhow::Result<Vec<f64>> {
        self.stop.store(true, Ordering::Relaxed);
        Ok(self.task.await?)
    }
}

pub(crate) fn controller_pids(cluster: &BenchCluster) -> anyhow::Result<Vec<u32>> {
    cluster
        .local
        .controllers
        .iter()
        .map(|d| {
            d.pid()
                .with_context(|| format!("{} is not running", d.name))
        })
        .collect()
}

fn log_texts(cluster: &BenchCluster) -> Vec<String> {
    cluster
        .local
        .controllers
        .iter()
        .map(|d| std::fs::read_to_string(&d.log).unwrap_or_default())
        .collect()
}

/// A `/proc/<pid>/status` field given in kB (`VmRSS`, `VmHWM`), in MiB.
pub(crate) fn proc_mib(pid: u32, field: &str) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?;
    let kb: f64 = value.split_whitespace().next()?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Each pid's VmRSS in MiB (0 for a process that is gone).
pub(crate) fn rss_all(pids: &[u32]) -> Vec<f64> {
    pids.iter()
        .map(|p| proc_mib(*p, "VmRSS").unwrap_or(0.0))
        .collect()
}

/// Rss, Anonymous and Private_Dirty from `/proc/<pid>/smaps_rollup`, in MiB.
fn smaps_rollup(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let fields: Vec<String> = ["Rss", "Anonymous", "Private_Dirty", "Shared_Clean"]
        .iter()
        .filter_map(|key| {
            let value = text
                .lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?;
            let kb: f64 = value.split_whitespace().next()?.parse().ok()?;
            Some(format!("{key} {:.1} MiB", kb / 1024.0))
        })
        .collect();
    Some(fields.join(", "))
}

pub(crate) fn fmt_mib(values: &[f64]) -> String {
    values
        .iter()
        .map(|v| format!("{v:.0}"))
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_snapshot_built_after_a_mark() {
        let log = "\
a INFO openraft::engine::handler::snapshot_handler: push snapshot building command
b INFO openraft::engine::handler::snapshot_handler: update_snapshot: SnapshotMeta { last_log_id: Some(..), snapshot_id: \"1-1-500\" }
c INFO openraft::engine::handler::snapshot_handler: push snapshot building command
";
        assert_eq!(snapshot_after(log, 0), Some(500));
        assert_eq!(snapshot_after(log, 1), None);
        let done = format!(
            "{log}d INFO x: update_snapshot: SnapshotMeta {{ snapshot_id: \"2-3-1234\" }}\n"
        );
        assert_eq!(snapshot_after(&done, 1), Some(1234));
        assert_eq!(snapshot_after(&done, 2), None);
    }

    #[test]
    fn reads_the_initial_state_line() {
        let line = "2024 INFO openraft::storage::helper: get_initial_state vote=<T2-N1:committed> last_purged_log_id=T1-N1-1000 last_applied=T1-N1-2000 committed=T1-N1-2010 last_log_id=T1-N1-2010";
        let r = Restored::of(line);
        assert_eq!(
            (r.last_purged, r.last_applied, r.committed, r.last_log),
            (Some(1000), Some(2000), Some(2010), Some(2010))
        );
        let r = Restored::of("get_initial_state last_purged_log_id=None last_applied=None");
        assert_eq!((r.last_purged, r.last_applied), (None, None));
    }
}
