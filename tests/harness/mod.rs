//! A multi-process test harness: starts the real `xce-controller` binaries on 127.0.0.1 with
//! free ports and per-test data directories, waits on conditions with deadlines, stops by pid,
//! and runs the `xce` CLI against them.
//!
//! The binaries are taken from the cargo target directory this test was built into (or from
//! `XCE_BIN_DIR`); the controller and cli crates have integration tests of their own, so
//! `cargo test`/`cargo nextest run` on the workspace always builds them first.

#![allow(clippy::unwrap_used)]

pub mod http;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use xce_client::ops::{GetCluster, GetJob, Join, ListHosts, Op, Reply, Submit};
use xce_client::types::{
    ClusterInfo, HeldJob, Host, HostAttributes, HostState, Job, JobSpec, MemberRole, RequestToken,
    Role,
};
use xce_client::{parse_candidates, Client, ClientConfig, ConnectOptions, Connection};
use xce_devcluster::{ClusterSpec, Daemon, DevCluster};

/// Where the built binaries are.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XCE_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("current test executable");
    // target/<profile>/deps/<test> -> target/<profile>
    exe.parent()
        .and_then(Path::parent)
        .expect("test executable lives in target/<profile>/deps")
        .to_path_buf()
}

/// Path of one built binary; panics with a hint when it is missing.
pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: run the tests with `cargo nextest run --workspace`",
        path.display()
    );
    path
}

/// Polls `check` until it returns `Some`, or panics after `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Free TCP ports on 127.0.0.1, distinct from each other.
pub fn free_ports(n: usize) -> Vec<u16> {
    xce_devcluster::free_ports(n).unwrap()
}

/// A local cluster of real daemons (every process is killed when it is dropped), with the
/// test-side helpers around [`DevCluster`].
pub struct Cluster {
    pub local: DevCluster,
    pub peers: String,
    /// Holds the data dirs and logs; removed after the test.
    pub dir: tempfile::TempDir,
}

/// What a test's cluster holds; [`ClusterBuilder::start`] starts it without waiting for it to
/// be ready (see [`Cluster::wait_primary`]).
#[derive(Default)]
pub struct ClusterBuilder {
    controllers: usize,
    config: Option<String>,
    workers: usize,
    worker_args: Vec<String>,
    schedulers: usize,
    scheduler_args: Vec<String>,
    apiservers: usize,
    apiserver_args: Vec<String>,
    links: bool,
    daemon_links: bool,
    tls: bool,
    bin_dir: Option<PathBuf>,
    log_filter: Option<String>,
}

impl ClusterBuilder {
    /// Every daemon logs what `filter` (`RUST_LOG` syntax) lets through, for a test that
    /// waits on a debug line; `XCE_TEST_LOG`, or info, otherwise.
    pub fn log_filter(mut self, filter: &str) -> Self {
        self.log_filter = Some(filter.to_string());
        self
    }

    /// Starts the daemons from the binaries in `dir` (another build), not this build's.
    pub fn bin_dir(mut self, dir: PathBuf) -> Self {
        self.bin_dir = Some(dir);
        self
    }

    /// Mutual TLS everywhere; the cluster's clients use the admin's certificate unless given
    /// another ([`Cluster::tls_of`]).
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// `n` controllers (`c1`..).
    pub fn controllers(mut self, n: usize) -> Self {
        self.controllers = n;
        self
    }

    /// The YAML text every controller is given with `--config`.
    pub fn config(mut self, yaml: &str) -> Self {
        self.config = Some(yaml.to_string());
        self
    }

    /// `n` workers (`w1`..), each given `args` beside the cluster's own flags.
    pub fn workers(mut self, n: usize, args: &[&str]) -> Self {
        self.workers = n;
        self.worker_args = args.iter().map(|a| a.to_string()).collect();
        self
    }

    /// `n` schedulers (`s1`..), each given `args`: the first to get the lease is active.
    pub fn schedulers(mut self, n: usize, args: &[&str]) -> Self {
        self.schedulers = n;
        self.scheduler_args = args.iter().map(|a| a.to_string()).collect();
        self
    }

    /// `n` apiservers (`api1`..), each given `args`, on free ports ([`DevCluster::api_url`]).
    pub fn apiservers(mut self, n: usize, args: &[&str]) -> Self {
        self.apiservers = n;
        self.apiserver_args = args.iter().map(|a| a.to_string()).collect();
        self
    }

    /// Route every worker's and scheduler's traffic to the controllers through fault links
    /// of its own, for [`Cluster::isolate_daemon`].
    pub fn daemon_links(mut self) -> Self {
        self.daemon_links = true;
        self
    }

    /// Route controller-to-controller traffic through fault links, for
    /// [`Cluster::isolate`] and [`Cluster::delay`].
    pub fn links(mut self) -> Self {
        self.links = true;
        self
    }

    /// Starts every daemon.
    pub fn start(self) -> Cluster {
        let mut dir = tempfile::Builder::new()
            .prefix("xce-test-")
            .tempdir()
            .unwrap();
        // XCE_TEST_KEEP=1 keeps every test's data and logs for a look after the run.
        if std::env::var_os("XCE_TEST_KEEP").is_some() {
            dir.disable_cleanup(true);
            eprintln!("keeping {}", dir.path().display());
        }
        let config = self.config.map(|text| {
            let path = dir.path().join("controller.yaml");
            std::fs::write(&path, text).unwrap();
            path
        });
        let kinds = [
            ("xce-controller", self.controllers),
            ("xce-worker", self.workers),
            ("xce-scheduler", self.schedulers),
            ("xce-apiserver", self.apiservers),
        ];
        for (name, _) in kinds.iter().filter(|(_, n)| *n > 0) {
            match &self.bin_dir {
                Some(dir) => assert!(dir.join(name).exists(), "{name} is not in {dir:?}"),
                None => drop(bin(name)),
            }
        }
        let bins = self.bin_dir.unwrap_or_else(bin_dir);
        let local = DevCluster::start(ClusterSpec {
            bin_dir: bins,
            data_dir: dir.path().to_path_buf(),
            ports: free_ports(self.controllers),
            config,
            log_filter: self.log_filter.unwrap_or_else(|| {
                std::env::var("XCE_TEST_LOG").unwrap_or_else(|_| "info,openraft=warn".into())
            }),
            workers: self.workers,
            worker_args: self.worker_args,
            schedulers: self.schedulers,
            scheduler_args: self.scheduler_args,
            apiservers: self.apiservers,
            apiserver_args: self.apiserver_args,
            apiserver_port: None,
            links: self.links,
            daemon_links: self.daemon_links,
            kernel_cuts: false,
            tls: self.tls,
        })
        .unwrap();
        Cluster {
            peers: local.peers().to_string(),
            local,
            dir,
        }
    }
}

impl Cluster {
    /// A cluster to lay out.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    /// Starts `n` controllers.
    pub fn start(n: usize) -> Cluster {
        Self::builder().controllers(n).start()
    }

    /// Starts `n` controllers, all given the YAML `config` text.
    pub fn start_with_config(n: usize, config: Option<&str>) -> Cluster {
        Self::start_full(n, config, 0, &[])
    }

    /// Starts `n` controllers with the YAML `config` and `workers` workers given `worker_args`.
    pub fn start_full(
        n: usize,
        config: Option<&str>,
        workers: usize,
        worker_args: &[&str],
    ) -> Cluster {
        let mut b = Self::builder().controllers(n).workers(workers, worker_args);
        if let Some(yaml) = config {
            b = b.config(yaml);
        }
        b.start()
    }

    /// Cuts controller `i` off from every other controller until [`Cluster::heal`]; returns
    /// its name.
    pub fn isolate(&self, i: usize) -> String {
        let name = self.controllers()[i].name.clone();
        assert!(
            self.local.isolate(&name).unwrap() > 0,
            "no links touch {name}: build the cluster with .links()"
        );
        name
    }

    /// Cuts worker or scheduler `name` off from every controller until [`Cluster::heal`].
    pub fn isolate_daemon(&self, name: &str) {
        assert!(
            self.local.isolate(name).unwrap() > 0,
            "no links touch {name}: build the cluster with .daemon_links()"
        );
    }

    /// Delays all traffic to and from controller `name` by `delay` each way.
    pub fn delay(&self, name: &str, delay: Duration) {
        assert!(
            self.local.delay(name, delay) > 0,
            "no links touch {name}: build the cluster with .links()"
        );
    }

    /// Ends every partition and delay.
    pub fn heal(&self) {
        self.local.heal().unwrap();
    }

    /// The controllers.
    pub fn controllers(&self) -> &[Daemon] {
        &self.local.controllers
    }

    /// The workers.
    pub fn worker_daemons(&self) -> &[Daemon] {
        &self.local.workers
    }

    /// Starts controller `i` again.
    pub fn restart(&mut self, i: usize) {
        self.local.start_controller(i).unwrap();
    }

    /// Starts controller `name` on a free port with `--join` (see
    /// `DevCluster::start_joining_controller`); returns its index and address.
    pub fn start_joining(&mut self, name: &str) -> (usize, String) {
        let port = free_ports(1)[0];
        let i = self.local.start_joining_controller(name, port).unwrap();
        (i, format!("127.0.0.1:{port}"))
    }

    /// Controller `i`'s next start runs `bin` (a rolling upgrade's new build).
    pub fn replace_binary(&mut self, i: usize, bin: PathBuf) {
        self.local.controllers[i].process.replace_binary(bin);
    }

    /// SIGKILL controller `i` and reap it.
    pub fn kill9(&mut self, i: usize) {
        self.local.kill9(i).unwrap();
    }

    /// The schedulers.
    pub fn schedulers(&self) -> &[Daemon] {
        &self.local.schedulers
    }

    /// SIGKILL scheduler `i` and reap it.
    pub fn kill9_scheduler(&mut self, i: usize) {
        self.local.kill9_scheduler(i).unwrap();
    }

    /// Waits until a scheduler holds the lease, and returns its name.
    pub async fn wait_active_scheduler(&self) -> String {
        let client = self.client();
        wait_for("an active scheduler", Duration::from_secs(30), || {
            let client = client.clone();
            async move {
                let info = client.call(GetCluster).await.ok()?;
                info.schedulers
                    .into_iter()
                    .find(|s| s.active)
                    .map(|s| s.name)
            }
        })
        .await
    }

    /// SIGTERM controller `i`, wait for it to exit, and return its exit status.
    pub async fn stop(&mut self, i: usize) -> std::process::ExitStatus {
        // Blocking is fine here: client connections run on threads of their own.
        self.local
            .stop(i, Duration::from_secs(15))
            .unwrap()
            .unwrap_or_else(|| panic!("c{} did not exit within 15 s of SIGTERM", i + 1))
    }

    /// A failover client over every controller.
    pub fn client(&self) -> Client {
        self.client_for(&self.peers)
    }

    /// A failover client over every controller, with the library's default retry budget.
    pub fn client_with_default_budget(&self) -> Client {
        self.client_with(ClientConfig::default())
    }

    /// A failover client over every controller with the given settings (and, in a TLS
    /// cluster, the admin's certificate unless the settings have one).
    pub fn client_with(&self, config: ClientConfig) -> Client {
        self.client_with_peers(&self.peers, config)
    }

    /// In a TLS cluster, the TLS setup of certificate holder `name` (`admin`, `w1`, ...).
    pub fn tls_of(&self, name: &str) -> Option<std::sync::Arc<xce_client::tls::Tls>> {
        self.local.tls_of(name).unwrap()
    }

    /// A failover client whose every connection joins as worker `host` holding `held` (as the
    /// real worker would), so that it may report for that host. Its join resyncs the host:
    /// what `held` lacks of the jobs placed there is lost.
    pub fn client_as_worker(&self, host: &str, held: Vec<HeldJob>) -> Client {
        let client = self.client();
        let host = HostAttributes {
            name: host.to_string(),
            resources: xce_client::types::Resources::new(1, 1024),
            spool_dir: String::new(),
            job_users: xce_client::types::JobUsers::Any,
        };
        client.set_rejoin(std::sync::Arc::new(move |c: Client| {
            let join = Join {
                token: RequestToken::random(),
                role: Role::Worker,
                host: host.clone(),
                agent: None,
                held: held.clone(),
                queues_starts: false,
            };
            Box::pin(async move { c.call(join).await.map(|_| ()) })
        }));
        client
    }

    /// A failover client over the given candidate list, with the given settings.
    pub fn client_with_peers(&self, peers: &str, mut config: ClientConfig) -> Client {
        if config.connect.tls.is_none() {
            config.connect.tls = self.tls_of(xce_devcluster::ADMIN);
        }
        Client::new(parse_candidates(peers).unwrap(), config)
    }

    /// A failover client over the given candidate list.
    pub fn client_for(&self, peers: &str) -> Client {
        let mut config = ClientConfig::default();
        config.retry.max_attempts = 10;
        self.client_with_peers(peers, config)
    }

    /// Sends one op to controller `i` only, without failover: what that node itself answers.
    pub async fn ask<O: Op>(&self, i: usize, op: O) -> Reply<O::Output> {
        let opts = ConnectOptions {
            tls: self.tls_of(xce_devcluster::ADMIN),
            ..ConnectOptions::default()
        };
        let conn = Connection::connect(&self.controllers()[i].addr(), opts)
            .await
            .unwrap();
        conn.call(Duration::from_secs(10), move |client| op.send(client))
            .await
            .unwrap()
    }

    /// Waits until a primary serves, and returns its index and the cluster it reports.
    pub async fn wait_primary(&self) -> (usize, ClusterInfo) {
        let client = self.client();
        wait_for("a primary", Duration::from_secs(30), || {
            let client = client.clone();
            async move {
                let info = client.call(GetCluster).await.ok()?;
                let name = info.primary.clone()?;
                let idx = self.controllers().iter().position(|c| c.name == name)?;
                Some((idx, info))
            }
        })
        .await
    }

    /// Waits until the cluster runs the newest version any member's build does (the primary
    /// raises it by itself once every member runs it), and returns it: what a request using
    /// a newer feature (a time limit) needs.
    pub async fn wait_version(&self) -> u32 {
        let client = self.client();
        wait_for(
            "the cluster's version raised",
            Duration::from_secs(30),
            || {
                let client = client.clone();
                async move {
                    let info = client.call(GetCluster).await.ok()?;
                    let newest = info
                        .members
                        .iter()
                        .map(|m| m.version)
                        .collect::<Option<Vec<u32>>>()?
                        .into_iter()
                        .max()?;
                    (info.active_version == newest).then_some(newest)
                }
            },
        )
        .await
    }

    /// Waits until the primary reports every running controller as a standby.
    pub async fn wait_all_standbys(&self) -> (usize, ClusterInfo) {
        let running = self
            .controllers()
            .iter()
            .filter(|c| c.pid().is_some())
            .count();
        let client = self.client();
        wait_for(
            "all controllers in the cluster",
            Duration::from_secs(30),
            || {
                let client = client.clone();
                async move {
                    let info = client.call(GetCluster).await.ok()?;
                    let up = info
                        .members
                        .iter()
                        .filter(|m| m.role != MemberRole::Unreachable)
                        .count();
                    let idx = self
                        .controllers()
                        .iter()
                        .position(|c| Some(&c.name) == info.primary.as_ref())?;
                    (up == running).then_some((idx, info))
                }
            },
        )
        .await
    }

    /// A directory for the jobs' files in the cluster's own directory, and its path as
    /// `--cwd` takes it.
    pub fn work_dir(&self) -> (PathBuf, String) {
        let work = self.dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let cwd = work.to_string_lossy().into_owned();
        (work, cwd)
    }

    /// Runs the `xce` CLI with `XCE_PEERS` set to this cluster.
    pub fn xce(&self, args: &[&str]) -> Output {
        self.xce_as(xce_devcluster::ADMIN, args)
    }

    /// Runs the `xce` CLI against this cluster, in a TLS cluster with certificate holder
    /// `name`'s files (`XCE_TLS_*`).
    pub fn xce_as(&self, name: &str, args: &[&str]) -> Output {
        self.xce_command_as(name, args).output().unwrap()
    }

    /// The `xce` command against this cluster with holder `name`'s TLS files, not yet run.
    fn xce_command_as(&self, name: &str, args: &[&str]) -> Command {
        let mut cmd = xce_command(&self.peers, args, &self.dir.path().join("cache"));
        if let Some(dir) = self.local.tls_dir() {
            let paths = xce_devcluster::certs::paths_of(&dir, name);
            cmd.env("XCE_TLS_CA", paths.ca)
                .env("XCE_TLS_CERT", paths.cert)
                .env("XCE_TLS_KEY", paths.key);
        }
        cmd
    }

    /// The `xce` command against this cluster, not yet run: for a test that sets its
    /// environment, directory or input.
    pub fn xce_command(&self, args: &[&str]) -> Command {
        self.xce_command_as(xce_devcluster::ADMIN, args)
    }

    /// Runs the `xce` CLI as a person holding `token` (`XCE_TOKEN`), on the login host (whose
    /// certificate, in a TLS cluster, lets it connect).
    pub fn xce_token(&self, token: &str, args: &[&str]) -> Output {
        self.xce_command_as(xce_devcluster::LOGIN, args)
            .env("XCE_TOKEN", token)
            .output()
            .unwrap()
    }

    /// A failover client of a person holding `token`, on the login host.
    pub fn client_with_token(&self, token: &str) -> Client {
        let mut config = ClientConfig::default();
        config.connect.tls = self.local.tls_of(xce_devcluster::LOGIN).unwrap();
        config.token = Some(xce_client::tokens::Token::parse(token).unwrap());
        self.client_with(config)
    }

    /// Runs the `xce` CLI and panics (with its stderr) unless it succeeds.
    pub fn xce_ok(&self, args: &[&str]) -> Output {
        let out = self.xce(args);
        assert!(
            out.status.success(),
            "xce {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Submits `cmd` with `xce submit --cwd cwd` and returns the job id.
    pub fn submit_in(&self, cwd: &Path, cmd: &[&str]) -> u64 {
        let cwd = cwd.to_string_lossy();
        let mut args = vec!["-o", "json", "submit", "--cwd", &cwd, "--"];
        args.extend_from_slice(cmd);
        json_of(&self.xce_ok(&args))["id"].as_u64().unwrap()
    }

    /// An HTTP client of apiserver `i` (no token).
    pub fn api(&self, i: usize) -> http::Http {
        http::Http::new(&self.local.api_url(i))
    }

    /// A new user token for `user` with `role`, made by the cluster's admin.
    pub async fn token(&self, user: &str, role: Role) -> String {
        self.local.create_token(user, role).await.unwrap()
    }

    /// One job as the primary reports it.
    pub async fn job(&self, id: u64) -> Option<Job> {
        self.client().call(GetJob { id }).await.ok()
    }

    /// Waits (30 s at most) until job `id` satisfies `done`, naming `what` if it never does.
    pub async fn wait_job(&self, id: u64, what: &str, done: impl Fn(&Job) -> bool) -> Job {
        wait_for(
            &format!("job {id} {what}"),
            Duration::from_secs(30),
            || async { self.job(id).await.filter(|j| done(j)) },
        )
        .await
    }

    /// One host as the primary reports it.
    pub async fn host(&self, name: &str) -> Option<Host> {
        let hosts = self.client().call(ListHosts).await.ok()?;
        hosts.into_iter().find(|h| h.name == name)
    }

    /// Waits (30 s at most) until host `name` is in `state`.
    pub async fn wait_host(&self, name: &str, state: HostState) -> Host {
        wait_for(
            &format!("{name} {}", state.name()),
            Duration::from_secs(30),
            || async { self.host(name).await.filter(|h| h.state == state) },
        )
        .await
    }

    /// Panics if any daemon's log holds an unexpected ERROR line. openraft logs every Raft
    /// RPC that failed (a peer cut off, killed or slow, or a replication call past its one
    /// heartbeat of patience) as an ERROR and retries it; the tests that cause those check
    /// their effects, so those lines are expected.
    pub fn assert_no_errors(&self) {
        let daemons = self.local.controllers.iter().chain(&self.local.workers);
        let daemons = daemons.chain(&self.local.schedulers);
        for c in daemons.chain(&self.local.apiservers) {
            let log = std::fs::read_to_string(&c.log).unwrap_or_default();
            let errors: Vec<&str> = log
                .lines()
                .filter(|l| l.contains(" ERROR "))
                .filter(|l| !is_openraft_rpc_failure(l))
                .collect();
            assert!(
                errors.is_empty(),
                "{} logged errors:\n{}",
                c.name,
                errors.join("\n")
            );
        }
    }
}

/// A submit of `true` with a fresh token.
pub fn true_job() -> Submit {
    Submit {
        token: RequestToken::random(),
        spec: JobSpec {
            command: vec!["true".into()],
            ..JobSpec::default()
        },
        script: None,
    }
}

/// Submits `true` every 50 ms for `span` (at most `max` times), each of which must succeed;
/// returns how many were acknowledged.
pub async fn steady_submits(client: &Client, span: Duration, max: usize) -> usize {
    let t0 = Instant::now();
    let mut acked = 0;
    while t0.elapsed() < span && acked < max {
        client.call(true_job()).await.unwrap();
        acked += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    acked
}

/// Submits `true` through `client` every 20 ms in the background until `stop` is set (at most
/// `max` calls, for at most `span`), recording every outcome: the ids acknowledged and the
/// errors, for a test that must see none while it does something to the cluster.
pub fn background_submits(
    client: Client,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    max: usize,
    span: Duration,
) -> tokio::task::JoinHandle<(Vec<u64>, Vec<String>)> {
    tokio::spawn(async move {
        let (t0, mut acked, mut failed) = (Instant::now(), Vec::new(), Vec::new());
        while !stop.load(std::sync::atomic::Ordering::Relaxed)
            && acked.len() < max
            && t0.elapsed() < span
        {
            match client.call(true_job()).await {
                Ok(id) => acked.push(id),
                Err(e) => failed.push(e.to_string()),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (acked, failed)
    })
}

/// Whether a log line is openraft reporting a failed Raft RPC (which it retries).
fn is_openraft_rpc_failure(line: &str) -> bool {
    line.contains(" openraft::")
        && (line.contains("RPCError")
            || line.contains("timeout error=timeout after")
            || line.contains("while requesting vote error=")
            || line.contains("timeout while confirming leadership"))
}

/// Runs the `xce` CLI with the given peers. Its primary hints go to a directory under the
/// system's temporary directory, never to the user's own cache.
pub fn xce(peers: &str, args: &[&str]) -> Output {
    xce_with_cache(peers, args, &std::env::temp_dir().join("xce-tests-cache"))
}

/// Runs the `xce` CLI with the given peers and `XDG_CACHE_HOME` (where it keeps its primary
/// hint).
fn xce_with_cache(peers: &str, args: &[&str], cache: &Path) -> Output {
    xce_command(peers, args, cache).output().unwrap()
}

fn xce_command(peers: &str, args: &[&str], cache: &Path) -> Command {
    let mut cmd = Command::new(bin("xce"));
    // Jobs submitted without `--cwd` run, and write their output, where the CLI ran: the
    // test's own directory, never the checkout.
    if let Some(dir) = cache.parent() {
        cmd.current_dir(dir);
    }
    cmd.args(args)
        .env("XCE_PEERS", peers)
        .env("XDG_CACHE_HOME", cache)
        .env_remove("RUST_LOG")
        .env_remove("XCE_TLS_CA")
        .env_remove("XCE_TLS_CERT")
        .env_remove("XCE_TLS_KEY")
        .env_remove("XCE_TOKEN")
        // Never the user's own token file.
        .env("XDG_CONFIG_HOME", cache.join("config"))
        .stdin(Stdio::null());
    cmd
}

/// The id of the job an `xce -o json submit` made, with its output in the panic message when
/// it made none.
pub fn submitted_id(out: &Output) -> u64 {
    assert!(
        out.status.success(),
        "submit failed: stdout {:?} stderr {:?}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    json_of(out)["id"].as_u64().unwrap()
}

/// Parses a command's stdout as JSON, with the output in the panic message when it is not.
pub fn json_of(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): stdout {:?} stderr {:?}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}
