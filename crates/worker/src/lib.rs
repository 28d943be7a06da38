//! xce-worker: joins the cluster as a worker with its host's attributes and an agent
//! capability, heartbeats to the primary, and rejoins after every failover. Running jobs, the
//! durable outbox and resync come next (see the worker issue).

pub mod host;
pub mod jobs;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info, warn};
use xce_client::agent::{AgentHandle, AgentRequest};
use xce_client::ops::{GetCluster, Heartbeat, Join};
use xce_client::types::{HostAttributes, RequestToken, Role};
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
}

/// Why the worker refused to start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("spool dir {path} is not usable: {source}")]
    Spool {
        path: PathBuf,
        source: std::io::Error,
    },
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
    let client = Client::new(config.peers.clone(), ClientConfig::default());
    let (agent, mut agent_requests) = AgentHandle::new();
    client.set_rejoin(rejoin_action(&config, agent));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let runner = Arc::new(jobs::Runner {
        client: client.clone(),
        host: config.name.clone(),
        spool: config.spool_dir.clone(),
        stop: stop_rx,
    });
    tokio::spawn(async move {
        while let Some(request) = agent_requests.recv().await {
            match request {
                AgentRequest::Ping => debug!("pinged by the primary"),
                AgentRequest::StartJob { job, attempt } => {
                    tokio::spawn(jobs::run_attempt(runner.clone(), *job, attempt));
                }
            }
        }
    });
    tokio::pin!(shutdown);
    info!(worker = %config.name, cpus = config.cpus, mem_mb = config.mem_mb, "worker starting");
    let mut joined = false;
    loop {
        if !joined || client.needs_rejoin() {
            // Any reply-bearing call runs the rejoin first; this one is cheap.
            tokio::select! {
                () = &mut shutdown => break,
                r = client.call(GetCluster) => match r {
                    Ok(info) => {
                        info!(worker = %config.name, primary = info.primary.as_deref(), "joined the cluster");
                        joined = true;
                    }
                    Err(e) => warn!(worker = %config.name, error = %e, "cannot join yet; retrying"),
                },
            }
            continue;
        }
        tokio::select! {
            () = &mut shutdown => break,
            () = tokio::time::sleep(config.heartbeat) => {}
        }
        let beat = Heartbeat {
            name: config.name.clone(),
        };
        match client.notify(beat).await {
            Ok(()) => {}
            Err(ClientError::Status {
                status: Status::NoEnt,
                ..
            }) => {
                info!(worker = %config.name, "the primary does not know this host; joining again");
                client.request_rejoin();
            }
            Err(e) => debug!(worker = %config.name, error = %e, "heartbeat not delivered"),
        }
    }
    stop_tx.send_replace(true);
    info!(worker = %config.name, "worker stopped");
    Ok(())
}

/// Joins as a worker with this host's attributes and agent: run on every new connection.
fn rejoin_action(
    config: &Config,
    agent: AgentHandle,
) -> RejoinFn<xce_client::transport::CapnpTransport> {
    let host = HostAttributes {
        name: config.name.clone(),
        cpus: config.cpus,
        mem_mb: config.mem_mb,
    };
    Arc::new(move |client: Client| {
        let join = Join {
            token: RequestToken::random(),
            role: Role::Worker,
            host: host.clone(),
            agent: Some(agent.clone()),
        };
        Box::pin(async move { client.call(join).await })
    })
}
