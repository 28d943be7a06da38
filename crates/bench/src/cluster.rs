//! The benchmark's own cluster: controllers from the binaries beside `xce-bench`, in a
//! temporary directory, stopped when the benchmark ends.

use std::time::Duration;

use anyhow::Context;
use xce_client::{parse_candidates, Client, ClientConfig};
use xce_devcluster::{free_ports, sibling_bin_dir, ClusterSpec, DevCluster};

/// What a benchmark's cluster holds.
#[derive(Debug, Clone, Copy)]
pub struct BenchSpec<'a> {
    pub controllers: usize,
    pub workers: usize,
    pub worker_args: &'a [&'a str],
    /// The controllers' YAML.
    pub config: Option<&'a str>,
    /// `RUST_LOG` for the daemons.
    pub log_filter: &'a str,
    /// Fault links between the controllers.
    pub links: bool,
    pub schedulers: usize,
    /// Extra flags for every scheduler.
    pub scheduler_args: &'a [&'a str],
    pub tls: bool,
    pub apiservers: usize,
}

impl Default for BenchSpec<'_> {
    fn default() -> Self {
        BenchSpec {
            controllers: 3,
            workers: 0,
            worker_args: &[],
            config: None,
            log_filter: "warn",
            links: false,
            schedulers: 0,
            scheduler_args: &[],
            tls: false,
            apiservers: 0,
        }
    }
}

/// A running benchmark cluster.
pub struct BenchCluster {
    pub local: DevCluster,
    _dir: tempfile::TempDir,
}

impl BenchCluster {
    /// Starts `n` controllers and waits until a primary serves.
    pub async fn start(n: usize) -> anyhow::Result<BenchCluster> {
        Self::start_with_workers(n, 0, &[]).await
    }

    /// Starts `n` controllers, with mutual TLS when `tls` (and fault links when `links`),
    /// and waits until a primary serves; its clients then use the admin's certificate.
    pub async fn start_tls(n: usize, links: bool, tls: bool) -> anyhow::Result<BenchCluster> {
        Self::start_spec(BenchSpec {
            controllers: n,
            links,
            tls,
            ..BenchSpec::default()
        })
        .await
    }

    /// Starts `n` controllers and `workers` workers (`w1`, ...) given `worker_args`, and
    /// waits until a primary serves.
    pub async fn start_with_workers(
        n: usize,
        workers: usize,
        worker_args: &[&str],
    ) -> anyhow::Result<BenchCluster> {
        Self::start_spec(BenchSpec {
            controllers: n,
            workers,
            worker_args,
            ..BenchSpec::default()
        })
        .await
    }

    /// Starts `n` controllers (given `config`), `workers` workers and `schedulers`
    /// schedulers, and waits until a primary serves, the workers are up and, with
    /// schedulers, one of them is active.
    pub async fn start_with_schedulers(
        n: usize,
        config: Option<&str>,
        workers: usize,
        worker_args: &[&str],
        schedulers: usize,
    ) -> anyhow::Result<BenchCluster> {
        Self::start_spec(BenchSpec {
            controllers: n,
            config,
            workers,
            worker_args,
            schedulers,
            ..BenchSpec::default()
        })
        .await
    }

    /// Starts `n` controllers given the controller YAML `config` and the `RUST_LOG` filter
    /// `log_filter`, and waits until a primary serves.
    pub async fn start_configured(
        n: usize,
        config: &str,
        log_filter: &str,
    ) -> anyhow::Result<BenchCluster> {
        Self::start_spec(BenchSpec {
            controllers: n,
            config: Some(config),
            log_filter,
            ..BenchSpec::default()
        })
        .await
    }

    /// Starts the cluster `spec` describes and waits until every daemon is ready.
    pub async fn start_spec(spec: BenchSpec<'_>) -> anyhow::Result<BenchCluster> {
        let BenchSpec {
            controllers: n,
            workers,
            worker_args,
            config,
            log_filter,
            links,
            schedulers,
            scheduler_args,
            tls,
            apiservers,
        } = spec;
        let dir = tempfile::Builder::new()
            .prefix("xce-bench-")
            .tempdir()
            .context("create a temporary directory")?;
        // XCE_BENCH_LOGS=DIR keeps the daemons' data and info-level logs there, each
        // cluster of a run in a directory of its own (`DIR/1`, `DIR/2`, ...).
        let (data_dir, log_filter) = match std::env::var_os("XCE_BENCH_LOGS") {
            Some(d) => (
                next_free_dir(std::path::Path::new(&d))?,
                "info,openraft=info".to_string(),
            ),
            None => (dir.path().to_path_buf(), log_filter.to_string()),
        };
        let config = match config {
            Some(text) => {
                let path = dir.path().join("controller.yaml");
                std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
                Some(path)
            }
            None => None,
        };
        let local = DevCluster::start(ClusterSpec {
            bin_dir: sibling_bin_dir()?,
            data_dir,
            ports: free_ports(n)?,
            config,
            log_filter,
            workers,
            worker_args: worker_args.iter().map(|a| a.to_string()).collect(),
            schedulers,
            scheduler_args: scheduler_args.iter().map(|a| a.to_string()).collect(),
            apiservers,
            apiserver_args: Vec::new(),
            apiserver_port: None,
            links,
            daemon_links: false,
            kernel_cuts: false,
            tls,
        })?;
        let mut cluster = BenchCluster { local, _dir: dir };
        cluster.local.wait_ready(Duration::from_secs(30)).await?;
        Ok(cluster)
    }

    /// A client over every controller.
    pub fn client(&self, mut config: ClientConfig) -> anyhow::Result<Client> {
        if config.connect.tls.is_none() {
            config.connect.tls = self.local.client_config()?.connect.tls;
        }
        Ok(Client::new(parse_candidates(self.local.peers())?, config))
    }

    /// What makes new clients of this cluster apart from it (in a task of their own).
    pub fn client_factory(&self) -> anyhow::Result<ClientFactory> {
        Ok(ClientFactory {
            candidates: parse_candidates(self.local.peers())?,
            config: self.local.client_config()?,
        })
    }
}

/// Makes new clients, each as a one-shot command would start: no primary known yet.
pub struct ClientFactory {
    candidates: Vec<xce_client::Candidate>,
    config: ClientConfig,
}

impl ClientFactory {
    /// A new client whose candidate list starts with controller `first` (when named).
    pub fn starting_at(&self, first: Option<&str>) -> anyhow::Result<Client> {
        let mut list = self.candidates.clone();
        if let Some(at) = first.and_then(|f| list.iter().position(|c| c.name == f)) {
            list.rotate_left(at);
        }
        Ok(Client::new(list, self.config.clone()))
    }
}

impl Drop for BenchCluster {
    fn drop(&mut self) {
        self.local.stop_all(Duration::from_secs(10));
    }
}

/// The first of `base/1`, `base/2`, ... that does not exist yet, created.
fn next_free_dir(base: &std::path::Path) -> anyhow::Result<std::path::PathBuf> {
    for n in 1.. {
        let dir = base.join(n.to_string());
        match std::fs::create_dir_all(base).and_then(|()| std::fs::create_dir(&dir)) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("create {}", dir.display())),
        }
    }
    unreachable!("some numbered directory is free")
}
