//! The fault suite (`scripts/faults --minutes N --seed S`): a local cluster — three
//! controllers, two workers, two schedulers, an apiserver, every connection through a fault
//! link — under a seeded nemesis ([`nemesis`]) while clients submit through the CLI and the
//! HTTP API ([`clients`]) and the jobs record their own attempts; then the history checker
//! ([`history`]) judges what everyone saw. The same seed picks the same faults, holds and
//! pauses (the cluster's own timing still varies from run to run).

pub mod clients;
pub mod history;
pub mod nemesis;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use xce_client::ops::{all_jobs, GetCluster};
use xce_client::types::JobFilter;
use xce_client::{parse_candidates, Client, ClientConfig};
use xce_devcluster::{free_ports, ClusterSpec, DevCluster};

use history::{FinalJob, History, Verdict, Window};
use nemesis::Fault;

/// How a run is set up.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long the nemesis runs (then it finishes the round of faults it has begun, so
    /// that every run has met every kind).
    pub span: Duration,
    pub seed: u64,
    /// Where the daemons' data and logs and the jobs' records go (kept); a temporary
    /// directory, removed afterwards, when `None`.
    pub dir: Option<PathBuf>,
    /// Where the daemons and `xce` are.
    pub bin_dir: PathBuf,
    /// Partitions drop packets in the kernel (this process must be in a network namespace
    /// of its own: `xce_devcluster::packet_filter`); otherwise the fault links' proxies hold
    /// the bytes. Slow links are the proxies' either way.
    pub kernel_cuts: bool,
}

/// How long the cluster has to be whole again after a fault is healed.
const RECOVERY: Duration = Duration::from_secs(60);
/// How long the jobs have, once the nemesis stops, to reach a final state.
const DRAIN: Duration = Duration::from_secs(240);
/// Hosts are marked unavailable after 1 s without a heartbeat and lost 2 s later, so worker
/// faults do requeue jobs now and then.
const CONTROLLER_CONFIG: &str = "hosts:\n  heartbeat_ttl_ms: 1000\n  lost_grace_ms: 2000\n";
const WORKER_ARGS: &[&str] = &[
    "--heartbeat-ms",
    "200",
    "--cpus",
    "8",
    "--kill-grace-ms",
    "1000",
];
const SCHEDULER_ARGS: &[&str] = &["--lease-ttl-ms", "1500"];

/// What a run found, printed as the last line of `scripts/faults`.
#[derive(Debug, Serialize)]
pub struct Summary {
    pub seed: u64,
    /// How partitions were made: `kernel` (packets dropped) or `proxy` (bytes held).
    pub partitions: &'static str,
    pub minutes: f64,
    pub faults: usize,
    pub faults_by_kind: BTreeMap<Fault, usize>,
    pub majority_down: Vec<Window>,
    pub submits: Submits,
    pub jobs: JobCounts,
    pub checks: Verdict,
    /// The cluster was whole again after every fault, and the jobs drained.
    pub recovered: bool,
    pub ok: bool,
}

/// The clients' side.
#[derive(Debug, Default, Serialize)]
pub struct Submits {
    pub cli: usize,
    /// Of `cli`, those submitted as job scripts on standard input.
    pub cli_scripts: usize,
    /// Of `cli`, those submitted to wait for an earlier job (`--dependency`).
    pub dependents: usize,
    pub http: usize,
    pub acknowledged: usize,
    pub failed_calls: usize,
}

/// The cluster's side at the end.
#[derive(Debug, Default, Serialize)]
pub struct JobCounts {
    pub total: usize,
    pub done: usize,
    pub exited: usize,
    /// Jobs that ran more than one attempt (requeued after a lost host).
    pub retried: usize,
    /// Arrays' own records, and the tasks split off from them (jobs of their own).
    pub arrays: usize,
    pub array_tasks: usize,
}

/// Runs the suite; `progress` gets one line per fault.
pub async fn run(settings: Settings, progress: impl Fn(&str)) -> anyhow::Result<Summary> {
    let temp = tempfile::Builder::new().prefix("xce-faults-").tempdir()?;
    let root = settings
        .dir
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    let records = root.join("records");
    let home = root.join("home");
    for dir in [&records, &home] {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let config = root.join("controller.yaml");
    std::fs::write(&config, CONTROLLER_CONFIG)?;
    let mut cluster = DevCluster::start(ClusterSpec {
        bin_dir: settings.bin_dir.clone(),
        data_dir: root.join("cluster"),
        ports: free_ports(3)?,
        config: Some(config),
        log_filter: "info,openraft=warn".into(),
        workers: 2,
        worker_args: WORKER_ARGS.iter().map(|a| a.to_string()).collect(),
        schedulers: 2,
        scheduler_args: SCHEDULER_ARGS.iter().map(|a| a.to_string()).collect(),
        apiservers: 1,
        apiserver_args: Vec::new(),
        apiserver_port: None,
        links: true,
        daemon_links: true,
        kernel_cuts: settings.kernel_cuts,
        tls: false,
    })?;
    cluster.wait_ready(RECOVERY).await?;
    let client = Client::new(parse_candidates(cluster.peers())?, ClientConfig::default());

    let t0 = Instant::now();
    let target = clients::Target {
        xce: settings.bin_dir.join("xce"),
        peers: cluster.peers().to_string(),
        api: cluster.apiservers[0].addr(),
        records: records.clone(),
        home,
        t0,
    };
    let log: clients::Log = Arc::new(Mutex::new(Vec::new()));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut submitters = Vec::new();
    for me in 1..=2 {
        let seed = settings.seed.wrapping_add(me as u64);
        submitters.push(tokio::spawn(clients::cli_submitter(
            target.clone(),
            me,
            seed,
            log.clone(),
            stopped.clone(),
        )));
    }
    submitters.push(tokio::spawn(clients::http_submitter(
        target.clone(),
        settings.seed.wrapping_add(100),
        log.clone(),
        stopped,
    )));

    let mut rng = rand::rngs::StdRng::seed_from_u64(settings.seed);
    let mut faults_by_kind = BTreeMap::new();
    let mut majority_down = Vec::new();
    let mut recovered = true;
    // Past the span, the round begun is finished: every run meets every kind of fault.
    let mut deck = Vec::new();
    while t0.elapsed() < settings.span || !deck.is_empty() {
        tokio::time::sleep(Duration::from_millis(rng.random_range(500..=2_000))).await;
        if deck.is_empty() {
            deck = Fault::round(&mut rng);
        }
        let Some(fault) = deck.pop() else { break };
        let primary = primary_of(&client, &cluster).await;
        let at = t0.elapsed();
        let (undo, what) = nemesis::inject(&mut cluster, fault, primary, &mut rng)?;
        progress(&format!("{:>7.1}s {what}", at.as_secs_f64()));
        *faults_by_kind.entry(fault).or_insert(0) += 1;
        tokio::time::sleep(Duration::from_millis(rng.random_range(1_000..=3_000))).await;
        nemesis::heal(&mut cluster, undo)?;
        let whole = cluster.wait_ready(RECOVERY).await;
        if fault.takes_majority() {
            majority_down.push(Window {
                from_ms: at.as_millis() as u64,
                // Rounded up: a call begun in the window's last millisecond is inside it.
                to_ms: t0.elapsed().as_millis() as u64 + 1,
            });
        }
        if let Err(e) = whole {
            progress(&format!("the cluster did not recover from {what}: {e}"));
            recovered = false;
            break;
        }
    }
    let _ = stop.send(true);
    for s in submitters {
        s.await?;
    }
    progress("nemesis over; waiting for every job to end");
    let jobs = drain(&client).await;
    recovered &= jobs.is_ok();
    let jobs = jobs.unwrap_or_else(|(jobs, why)| {
        progress(&why);
        jobs
    });
    let submits = std::mem::take(&mut *log.lock().unwrap_or_else(|p| p.into_inner()));
    let history = History {
        records: read_records(&records, &jobs),
        jobs,
        submits,
        majority_down: majority_down.clone(),
    };
    let checks = history::check(&history);
    let summary = Summary {
        seed: settings.seed,
        partitions: if settings.kernel_cuts {
            "kernel"
        } else {
            "proxy"
        },
        minutes: settings.span.as_secs_f64() / 60.0,
        faults: faults_by_kind.values().sum(),
        faults_by_kind,
        majority_down,
        submits: submits_of(&history),
        jobs: counts_of(&history),
        ok: recovered && checks.ok(),
        checks,
        recovered,
    };
    cluster.stop_all(Duration::from_secs(5));
    Ok(summary)
}

/// The index of the primary, if one answers within a few seconds.
async fn primary_of(client: &Client, cluster: &DevCluster) -> Option<usize> {
    let info = tokio::time::timeout(Duration::from_secs(5), client.call(GetCluster))
        .await
        .ok()?
        .ok()?;
    let primary = info.primary?;
    cluster.controllers.iter().position(|c| c.name == primary)
}

/// Every job once none is still pending or running, or (after [`DRAIN`]) as they are, with
/// why they did not all end.
async fn drain(client: &Client) -> Result<Vec<FinalJob>, (Vec<FinalJob>, String)> {
    let deadline = Instant::now() + DRAIN;
    loop {
        let listed = all_jobs(client, JobFilter::default()).await;
        let jobs: Vec<FinalJob> = listed
            .as_ref()
            .map(|jobs| {
                jobs.iter()
                    .map(|j| FinalJob {
                        id: j.id,
                        name: j.spec.name.clone(),
                        state: j.state.name().to_string(),
                        reason: j.reason.clone(),
                        result: j.result.map(|r| r.name().to_string()),
                        time_limit_s: j.spec.limits.time_limit_s,
                        attempt: j.attempt,
                        task_of: j.array_task.map(|t| (t.array_id, t.index)),
                        tasks: j.spec.array.as_ref().map(|a| a.tasks.len()),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let open = jobs
            .iter()
            .filter(|j| !matches!(j.state.as_str(), "done" | "exited"))
            .count();
        if listed.is_ok() && open == 0 {
            return Ok(jobs);
        }
        if Instant::now() > deadline {
            let why = match listed {
                Err(e) => format!("listing jobs failed: {e}"),
                Ok(_) => format!("{open} jobs had not ended after {DRAIN:?}"),
            };
            return Err((jobs, why));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Each job's record file, parsed.
fn read_records(
    dir: &std::path::Path,
    jobs: &[FinalJob],
) -> BTreeMap<u64, Vec<history::AttemptRecord>> {
    jobs.iter()
        .filter_map(|j| {
            let text = std::fs::read_to_string(dir.join(j.id.to_string())).ok()?;
            Some((j.id, history::parse_records(&text)))
        })
        .collect()
}

fn submits_of(h: &History) -> Submits {
    let mut s = Submits::default();
    let mut names = std::collections::BTreeSet::new();
    for call in &h.submits {
        if names.insert((call.via, call.name.as_str())) {
            if call.after.is_some() {
                s.dependents += 1;
            }
            match call.via {
                "cli" => s.cli += 1,
                crate::history::CLI_SCRIPT => {
                    s.cli += 1;
                    s.cli_scripts += 1;
                }
                _ => s.http += 1,
            }
        }
        match call.outcome {
            Ok(_) => s.acknowledged += 1,
            Err(_) => s.failed_calls += 1,
        }
    }
    s
}

fn counts_of(h: &History) -> JobCounts {
    JobCounts {
        total: h.jobs.len(),
        done: h.jobs.iter().filter(|j| j.state == "done").count(),
        exited: h.jobs.iter().filter(|j| j.state == "exited").count(),
        retried: h.jobs.iter().filter(|j| j.attempt > 1).count(),
        arrays: h.jobs.iter().filter(|j| j.tasks.is_some()).count(),
        array_tasks: h.jobs.iter().filter(|j| j.task_of.is_some()).count(),
    }
}
