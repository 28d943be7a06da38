//! xce-worker: joins the cluster as a worker with its host's attributes and an agent
//! capability, runs the attempts the primary sends it, reports them through a durable outbox,
//! heartbeats, and on every rejoin re-syncs the attempts it holds so the primary can fence
//! stale copies and requeue lost ones.

pub mod admission;
pub mod cgroup;
pub mod config;
pub mod ended;
pub mod fence;
pub mod host;
pub mod jobs;
pub mod join_window;
pub mod launcher;
pub mod metrics;
pub mod outbox;
pub mod procs;
pub mod shim;
pub mod usage;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info, warn};
use xce_client::agent::{AgentHandle, AgentRequest};
use xce_client::ops::{GetCluster, Heartbeat, Join};
use xce_client::types::{HostAttributes, JobUsers, RequestToken, Role};

use crate::jobs::{JobSettings, Jobs};
use xce_client::{Candidate, Client, ClientConfig, ClientError, RejoinFn, Status};

/// A validated worker configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub name: String,
    pub peers: Vec<Candidate>,
    pub spool_dir: PathBuf,
    pub cpus: u32,
    pub mem_mb: u64,
    /// How often to heartbeat; well under the controllers' host TTL.
    pub heartbeat: Duration,
    /// How long a killed job has between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// How often to re-sync with the primary even when nothing failed over: repairs a start
    /// or signal push that never arrived on a live connection.
    pub resync: Duration,
    /// The program each attempt's shim runs: this worker's own executable.
    pub shim_exe: PathBuf,
    /// Whether to run jobs in cgroups where the host has them.
    pub cgroups: bool,
    /// TLS to the controllers; with it, the certificate must name this host (`name`).
    pub tls: Option<xce_client::tls::TlsPaths>,
    /// Whose jobs this worker runs, and as whom; reported at join.
    pub job_users: JobUsers,
    /// The home of the account the worker runs as ([`host::own_home`]): where a job run as
    /// that account runs when it names no working directory.
    pub own_home: PathBuf,
    /// Where Prometheus metrics are served.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// The worker's log settings, handed to its job shims (whose lines go to its stderr).
    pub log: Option<xce_daemon::logging::LogSettings>,
}

/// Why the worker refused to start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("spool dir {path} is not usable: {source}")]
    Spool {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("spool dir {path} is in use by another worker (its lock file is held)")]
    InUse { path: PathBuf },
}

/// Holds the spool dir for this worker: two workers on one spool would kill each other's
/// jobs at restart and send each other's reports.
pub struct SpoolLock {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

/// Takes the spool dir's lock, or says who holds it.
pub fn lock_spool(dir: &Path) -> Result<SpoolLock, StartError> {
    let path = dir.join(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| StartError::Spool {
            path: dir.to_path_buf(),
            source,
        })?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(SpoolLock { _lock: lock }),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Err(StartError::InUse {
            path: dir.to_path_buf(),
        }),
        Err((_, errno)) => Err(StartError::Spool {
            path: dir.to_path_buf(),
            source: std::io::Error::from(errno),
        }),
    }
}

/// Creates the spool dir if needed and checks that job output can be written there.
pub fn prepare_spool(dir: &Path) -> Result<(), StartError> {
    let spool = |source| StartError::Spool {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(spool)?;
    let probe = dir.join(".xce-write-probe");
    std::fs::write(&probe, b"probe").map_err(spool)?;
    std::fs::remove_file(&probe).map_err(spool)
}

/// Runs the worker until `shutdown` resolves.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    prepare_spool(&config.spool_dir)?;
    let _lock = lock_spool(&config.spool_dir)?;
    let mut client_config = ClientConfig::default();
    if let Some(paths) = &config.tls {
        let tls = xce_client::tls::Tls::load(paths.clone())?;
        let identity = tls.identity();
        if identity.role != Role::Worker || identity.name != config.name {
            anyhow::bail!(
                "{}: the certificate is {identity}'s, not worker {}'s",
                paths.cert.display(),
                config.name
            );
        }
        client_config.connect.tls = Some(tls);
    }
    tokio::spawn(xce_client::tls::reload_on_hangup(
        client_config.connect.tls.clone(),
    ));
    let client = Client::new(config.peers.clone(), client_config);
    let (agent, mut agent_requests) = AgentHandle::new();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let lease = fence::Lease::new(
        config.kill_grace,
        config.heartbeat,
        fence::now(),
        Some(fence::LeaseFile::new(&config.spool_dir)),
    );
    let cgroups = detect_cgroups(&config)?;
    let settings = JobSettings {
        kill_grace: config.kill_grace,
        shim_exe: config.shim_exe.clone(),
        cgroups: cgroups.clone(),
        job_users: config.job_users.clone(),
        own_home: config.own_home.clone(),
        log: config.log.clone(),
        capacity: xce_client::types::Resources::new(config.cpus, config.mem_mb),
    };
    let jobs = Jobs::new(
        client.clone(),
        config.name.clone(),
        config.spool_dir.clone(),
        settings,
        lease.clone(),
        stop_rx,
    )?;
    jobs.recover()?;
    client.set_rejoin(rejoin_action(&config, agent, jobs.clone(), lease.clone()));
    if let Some(addr) = config.metrics_listen {
        let listener = xce_daemon::metrics::bind(addr).await?;
        let registry = metrics::registry(jobs.clone(), client.clone());
        tokio::spawn(xce_daemon::metrics::serve(listener, Arc::new(registry)));
    }
    let served = jobs.clone();
    let (start_lease, start_client) = (lease.clone(), client.clone());
    tokio::spawn(async move {
        while let Some(request) = agent_requests.recv().await {
            match request {
                AgentRequest::Ping => debug!("pinged by the primary"),
                // A start order that waited out this worker's lease (it was frozen, or cut
                // off, while the order sat in its socket) may have been superseded: the
                // cluster may have declared the host lost and placed the job elsewhere. The
                // rejoin's resync places it here again if it is still ours.
                AgentRequest::StartJob {
                    job,
                    attempt,
                    generation,
                    script,
                } => match start_lease.overdue(fence::now()) {
                    Some(late) => {
                        warn!(
                            job = job.id,
                            attempt,
                            ?late,
                            "start order refused: this worker's lease ran out; joining again"
                        );
                        start_client.request_rejoin();
                    }
                    None => served.start_from(*job, attempt, generation, script),
                },
                AgentRequest::SendSignal {
                    id,
                    attempt,
                    signal,
                    leader_only,
                    held,
                } => {
                    let _ = held.send(served.send_signal(id, attempt, signal, leader_only));
                }
                AgentRequest::SetTimeLimit {
                    id,
                    attempt,
                    time_limit_s,
                    held,
                } => {
                    let _ = held.send(served.set_time_limit(id, attempt, time_limit_s));
                }
                AgentRequest::Signal { order, held } => {
                    let _ = held.send(served.signal(order));
                }
                AgentRequest::Flush(done) => {
                    let _ = done.send(());
                }
            }
        }
    });
    tokio::pin!(shutdown);
    info!(worker = %config.name, cpus = config.cpus, mem_mb = config.mem_mb, "worker starting");
    // Heartbeats never wait behind a rejoin: a rejoin stuck on a stale primary must not
    // silence this worker towards the primary that will judge its liveness.
    let beats = tokio::spawn(heartbeats(
        client.clone(),
        config.name.clone(),
        config.heartbeat,
        lease.clone(),
        stop_tx.subscribe(),
    ));
    xce_daemon::systemd::ready(&format!("worker {} running", config.name));
    let beating = beats.abort_handle();
    tokio::spawn(xce_daemon::systemd::keep_alive(move || {
        !beating.is_finished()
    }));
    let confinement = cgroups.as_ref().map_or_else(
        || "none (process groups only)".to_string(),
        cgroup::Cgroups::describe,
    );
    let mut joined = false;
    let mut last_resync = tokio::time::Instant::now();
    loop {
        if last_resync.elapsed() >= config.resync {
            debug!(worker = %config.name, "periodic resync");
            client.request_rejoin();
            last_resync = tokio::time::Instant::now();
        }
        if !joined || client.needs_rejoin() {
            // Any reply-bearing call runs the rejoin first; this one is cheap.
            tokio::select! {
                () = &mut shutdown => break,
                r = client.call(GetCluster) => match r {
                    Ok(info) => {
                        info!(worker = %config.name, primary = info.primary.as_deref(), cgroups = %confinement, "joined the cluster");
                        joined = true;
                    }
                    Err(e) => warn!(worker = %config.name, error = %e, "cannot join yet; retrying"),
                },
            }
        }
        tokio::select! {
            () = &mut shutdown => break,
            () = tokio::time::sleep(config.heartbeat) => {}
        }
    }
    xce_daemon::systemd::stopping();
    stop_tx.send_replace(true);
    let _ = beats.await;
    jobs.stop_all().await;
    if let Some(cgroups) = &cgroups {
        cgroups.remove();
    }
    info!(worker = %config.name, "worker stopped");
    Ok(())
}

/// The cgroups jobs will run in, or why there are none (then jobs are tracked by their
/// process group only, as the log says).
fn detect_cgroups(config: &Config) -> anyhow::Result<Option<cgroup::Cgroups>> {
    if !config.cgroups {
        info!(worker = %config.name, "cgroups are off (--cgroups off): jobs are tracked by process group only, and their cpus and memory are not enforced");
        return Ok(None);
    }
    let spool = std::fs::canonicalize(&config.spool_dir)?;
    Ok(match cgroup::Cgroups::detect(&config.name, &spool) {
        Ok(cgroups) => {
            info!(worker = %config.name, cgroups = %cgroups.describe(), "each job runs in a cgroup of its own");
            Some(cgroups)
        }
        Err(why) => {
            warn!(worker = %config.name, %why, "no cgroups for jobs: they are tracked by process group only, and their cpus and memory are not enforced");
            None
        }
    })
}

/// Heartbeats every `every` until `stop`, renewing the fence's lease on each one a primary
/// acknowledged, and asking for a rejoin when the primary does not know this worker.
async fn heartbeats(
    client: Client,
    name: String,
    every: Duration,
    lease: Arc<fence::Lease>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            () = tokio::time::sleep(every) => {}
        }
        let beat = Heartbeat { name: name.clone() };
        let sent = fence::now();
        let delivered = client.notify(beat).await;
        let counter = match &delivered {
            Ok(()) => &metrics::HEARTBEATS,
            Err(_) => &metrics::HEARTBEATS_FAILED,
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match delivered {
            Ok(()) => lease.renew_from(sent),
            // noEnt: the primary does not know this host (or marked it unavailable); perm: the
            // connection has not joined as this worker (a reconnect made by the heartbeat
            // itself). Either way the rejoin is due.
            Err(ClientError::Status {
                status: Status::NoEnt | Status::Perm,
                message,
            }) => {
                if client.needs_rejoin() {
                    debug!(worker = %name, %message, "heartbeat refused while a rejoin is due");
                } else {
                    info!(worker = %name, %message, "the primary wants this worker to join again");
                    client.request_rejoin();
                }
            }
            Err(e) => debug!(worker = %name, error = %e, "heartbeat not delivered"),
        }
    }
}

/// Joins as a worker with this host's attributes and agent: run on every new connection.
/// The join carries the attempts held here; the primary's orders (fence, re-suspend, ...)
/// are carried out before the rejoin counts as done, and starts that came while it was
/// unanswered wait until then ([`crate::join_window`]).
fn rejoin_action(
    config: &Config,
    agent: AgentHandle,
    jobs: Arc<Jobs>,
    lease: Arc<fence::Lease>,
) -> RejoinFn<xce_client::transport::CapnpTransport> {
    let host = HostAttributes {
        name: config.name.clone(),
        resources: xce_client::types::Resources::new(config.cpus, config.mem_mb),
        // Canonical, so the path users are shown means something on this host.
        spool_dir: jobs.spool().to_string_lossy().into_owned(),
        job_users: config.job_users.clone(),
    };
    Arc::new(move |client: Client| {
        let join = Join {
            token: RequestToken::random(),
            role: Role::Worker,
            host: host.clone(),
            agent: Some(agent.clone()),
            held: jobs.join_begins(),
            queues_starts: true,
        };
        let (jobs, lease, agent) = (jobs.clone(), lease.clone(), agent.clone());
        Box::pin(async move {
            let sent = fence::now();
            let joined = client.call(join).await?;
            lease.renew_from(sent);
            if let Some(lost_after) = joined.lost_after {
                lease.set_lost_after(lost_after);
            }
            for order in joined.orders {
                info!(job = order.id, attempt = order.attempt, signal = ?order.signal, "resync order from the primary");
                jobs.signal(order);
            }
            // Starts that came on the wire before the answer are served (parked) first.
            agent.flush().await;
            // The primary's pushes come through the capability this join passed now.
            jobs.join_answered(joined.agent_generation);
            Ok(())
        })
    })
}
