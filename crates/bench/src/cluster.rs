//! The benchmark's own cluster: controllers from the binaries beside `xce-bench`, in a
//! temporary directory, stopped when the benchmark ends.

use std::time::Duration;

use anyhow::Context;
use xce_client::{parse_candidates, Client, ClientConfig};
use xce_devcluster::{free_ports, sibling_bin_dir, ClusterSpec, DevCluster};

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
        Self::start_spec(n, 0, &[], None, "warn", links, 0, tls).await
    }

    /// Starts `n` controllers and `workers` workers (`w1`, ...) given `worker_args`, and
    /// waits until a primary serves.
    pub async fn start_with_workers(
        n: usize,
        workers: usize,
        worker_args: &[&str],
    ) -> anyhow::Result<BenchCluster> {
        Self::start_spec(n, workers, worker_args, None, "warn", false, 0, false).await
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
        Self::start_spec(
            n,
            workers,
            worker_args,
            config,
            "warn",
            false,
            schedulers,
            false,
        )
        .await
    }

    /// Starts `n` controllers given the controller YAML `config` and the `RUST_LOG` filter
    /// `log_filter`, and waits until a primary serves.
    pub async fn start_configured(
        n: usize,
        config: &str,
        log_filter: &str,
    ) -> anyhow::Result<BenchCluster> {
        Self::start_spec(n, 0, &[], Some(config), log_filter, false, 0, false).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn start_spec(
        n: usize,
        workers: usize,
        worker_args: &[&str],
        config: Option<&str>,
        log_filter: &str,
        links: bool,
        schedulers: usize,
        tls: bool,
    ) -> anyhow::Result<BenchCluster> {
        let dir = tempfile::Builder::new()
            .prefix("xce-bench-")
            .tempdir()
            .context("create a temporary directory")?;
        // XCE_BENCH_LOGS=DIR keeps the controllers' data and info-level logs there.
        let (data_dir, log_filter) = match std::env::var_os("XCE_BENCH_LOGS") {
            Some(d) => (
                std::path::PathBuf::from(d),
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
            scheduler_args: Vec::new(),
            links,
            daemon_links: false,
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
}

impl Drop for BenchCluster {
    fn drop(&mut self) {
        self.local.stop_all(Duration::from_secs(10));
    }
}
