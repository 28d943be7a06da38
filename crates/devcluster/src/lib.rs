//! A local xce cluster of real daemon processes on 127.0.0.1, for `xce dev`, the benchmarks
//! and the multi-process tests, so that all of them start, stop, crash and cut off daemons
//! the same way.
//!
//! - [`process`]: one process by the pid this crate started (nothing is ever looked up by
//!   name).
//! - [`controller`], [`worker`]: each daemon kind's command line and readiness probe.
//! - [`ready`]: the one wait-for-ready loop, which also notices a daemon that died.
//! - [`certs`]: a CA and certificates for every daemon (`xce tls init`, `xce dev --tls`).
//! - [`link`]: network faults (a partition, a slow link) as proxies between controllers.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::process::ExitStatus;
use std::time::Duration;
use xce_client::tls::Tls;
use xce_client::ClientConfig;

pub mod apiserver;
pub mod certs;
pub mod controller;
pub mod link;
pub mod packet_filter;
pub mod process;
pub mod ready;
pub mod scheduler;
pub mod worker;

pub use link::Link;
pub use packet_filter::PacketFilter;
pub use process::Process;

/// Why a launch, a stop or a wait failed.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{path} not found: build the workspace first (cargo build --workspace)")]
    MissingBinary { path: PathBuf },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{name} is already running")]
    Running { name: String },
    #[error("{name} is not running")]
    NotRunning { name: String },
    #[error("no daemon named {name:?} in this cluster")]
    UnknownDaemon { name: String },
    #[error("{name} exited ({status}) while waiting for {what}; its log ends:\n{log_tail}")]
    Exited {
        name: String,
        status: ExitStatus,
        what: String,
        log_tail: String,
    },
    #[error("{what} did not happen within {after:?}; see the daemons' logs")]
    NotReady { what: String, after: Duration },
    #[error("peers: {0}")]
    Peers(#[from] xce_client::CandidateError),
    #[error("certificates: {0}")]
    Certs(#[from] certs::CertError),
    #[error("{0}")]
    Tls(#[from] xce_client::tls::TlsError),
    #[error("create a token for {user}: {reason}")]
    Token { user: String, reason: String },
    #[error("network faults: {0}")]
    Net(String),
}

/// A CA and certificates for controllers `names`, workers `w1..`, schedulers `s1..`,
/// apiservers `api1..`,
/// [`ADMIN`] and [`LOGIN`], in `dir`.
fn make_certs(
    dir: &std::path::Path,
    names: &[String],
    spec: &ClusterSpec,
) -> Result<(), LaunchError> {
    use xce_client::types::Role;
    let mut holders: Vec<certs::Holder> = names
        .iter()
        .map(|n| certs::Holder::new(Role::Controller, n))
        .collect();
    let numbered = |role: Role, prefix: &'static str, n: usize| {
        (1..=n).map(move |i| certs::Holder::new(role, &format!("{prefix}{i}")))
    };
    holders.extend(numbered(Role::Worker, "w", spec.workers));
    holders.extend(numbered(Role::Scheduler, "s", spec.schedulers));
    holders.extend(numbered(Role::Apiserver, "api", spec.apiservers));
    holders.push(certs::Holder::new(Role::Admin, ADMIN));
    holders.push(certs::Holder::new(Role::Login, LOGIN));
    // The dev cluster's own files: made anew for the names of this run.
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(io(format!("remove {}", dir.display()))(e))
        }
        _ => {}
    }
    Ok(certs::init(dir, &holders, &[])?)
}

/// `--tls-ca`, `--tls-cert`, `--tls-key` for holder `name` of the CA in `dir`.
fn tls_flags(dir: &std::path::Path, name: &str) -> Vec<String> {
    let paths = certs::paths_of(dir, name);
    [
        ("--tls-ca", paths.ca),
        ("--tls-cert", paths.cert),
        ("--tls-key", paths.key),
    ]
    .into_iter()
    .flat_map(|(flag, path)| [flag.to_string(), path.display().to_string()])
    .collect()
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LaunchError {
    let what = what.into();
    move |source| LaunchError::Io { what, source }
}

/// Where [`free_ports`] looks: below Linux's ephemeral range (32768–60999), so that no
/// outgoing connection (a client's, a link's) takes a chosen port before its daemon binds it,
/// as one from port 0 could.
const PORTS: std::ops::Range<u16> = 20_000..32_000;

/// The state of [`free_ports`]' generator, shared by every call in this process, so that a
/// port handed out and not yet bound is not chosen again by the next call.
static PORT_STATE: std::sync::Mutex<u64> = std::sync::Mutex::new(0);

/// The claims on ports this process handed out: while it lives, no other process choosing
/// with [`free_ports`] takes one of them, even before its daemon has bound it (two test
/// processes had picked the same port in that gap: "Address already in use").
static PORT_CLAIMS: std::sync::Mutex<Vec<std::fs::File>> = std::sync::Mutex::new(Vec::new());

/// Where the claims are: one file per port under the temp dir; `None` if it cannot be made
/// (the bind check alone then stands).
fn claims_dir() -> Option<PathBuf> {
    let dir = std::env::temp_dir().join("xce-ports");
    std::fs::create_dir_all(&dir).ok().map(|()| dir)
}

/// Claims `port` for this process: an exclusive lock on its file in `dir`, held until the
/// process exits. False if another process holds it; true where the claim cannot be made.
fn claim(dir: Option<&Path>, port: u16) -> bool {
    let Some(dir) = dir else {
        return true;
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(port.to_string()));
    let Ok(file) = file else {
        return true;
    };
    match file.try_lock() {
        Ok(()) => {
            PORT_CLAIMS
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(file);
            true
        }
        Err(std::fs::TryLockError::WouldBlock) => false,
        Err(std::fs::TryLockError::Error(_)) => true,
    }
}

/// Free TCP ports on 127.0.0.1, distinct from each other (all held until all are chosen):
/// random ones from [`PORTS`], each claimed for this process so that another one choosing at
/// the same time never gets it ([`claim`]), else the kernel's own.
pub fn free_ports(n: usize) -> Result<Vec<u16>, LaunchError> {
    let mut listeners = Vec::new();
    let claims = claims_dir();
    {
        let mut state = PORT_STATE.lock().unwrap_or_else(|p| p.into_inner());
        if *state == 0 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64);
            *state = nanos ^ (u64::from(std::process::id()) << 32) | 1;
        }
        let span = u64::from(PORTS.end - PORTS.start);
        for _ in 0..(n * 64) {
            if listeners.len() == n {
                break;
            }
            *state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let port = PORTS.start + ((*state >> 33) % span) as u16;
            if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
                if claim(claims.as_deref(), port) {
                    listeners.push(l);
                }
            }
        }
    }
    while listeners.len() < n {
        let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(io("find free ports"))?;
        listeners.push(l);
    }
    listeners
        .iter()
        .map(|l| Ok(l.local_addr().map_err(io("find free ports"))?.port()))
        .collect()
}

/// The directory holding the binary that is running now; the daemons are built beside it.
pub fn sibling_bin_dir() -> Result<PathBuf, LaunchError> {
    let exe = std::env::current_exe().map_err(io("locate the running binary"))?;
    match exe.parent() {
        Some(dir) => Ok(dir.to_path_buf()),
        None => Err(LaunchError::MissingBinary { path: exe }),
    }
}

/// How to lay out a local cluster.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// Where `xce-controller`, `xce-worker` and the other daemons are.
    pub bin_dir: PathBuf,
    /// Per-daemon data dirs and logs go here.
    pub data_dir: PathBuf,
    /// Client ports, one per controller (see [`free_ports`]).
    pub ports: Vec<u16>,
    /// Optional controller YAML file given to every controller.
    pub config: Option<PathBuf>,
    /// `RUST_LOG` for the daemons.
    pub log_filter: String,
    /// Workers to start (`w1`, `w2`, ...), each with its spool under `data_dir`.
    pub workers: usize,
    /// Extra flags for every worker (e.g. a short `--heartbeat-ms` in tests).
    pub worker_args: Vec<String>,
    /// Schedulers to start (`s1`, `s2`, ...): one is active, the others stand by.
    pub schedulers: usize,
    /// Extra flags for every scheduler.
    pub scheduler_args: Vec<String>,
    /// Apiservers to start (`api1`, ...), each on a free port of 127.0.0.1.
    pub apiservers: usize,
    /// Extra flags for every apiserver.
    pub apiserver_args: Vec<String>,
    /// The first apiserver's port (the others take the next ones); free ports when `None`.
    pub apiserver_port: Option<u16>,
    /// Route controller-to-controller traffic through [`Link`]s so that a test can partition
    /// or slow it ([`DevCluster::partition`], [`DevCluster::delay`]).
    pub links: bool,
    /// Route each worker's and scheduler's traffic to the controllers through links of its
    /// own too ([`DevCluster::isolate`] then cuts a worker or a scheduler off). Redirects
    /// name the primary, so a daemon follows one through its own link.
    pub daemon_links: bool,
    /// Partitions drop packets in the kernel (`iptables` on each cut link's port) instead of
    /// the proxies holding bytes: see [`packet_filter`]. Needs `links`, and a network
    /// namespace of this process's own ([`packet_filter::enter_own_namespace`]).
    pub kernel_cuts: bool,
    /// Mutual TLS everywhere: a CA and a certificate per daemon, plus [`ADMIN`]'s for the
    /// cluster's own clients, made in `data_dir/tls` ([`DevCluster::tls_dir`]).
    pub tls: bool,
}

/// The admin certificate's name in a TLS cluster: the one its readiness probe, `xce dev`'s
/// printed environment and the tests' clients use.
pub const ADMIN: &str = "admin";

/// The certificate holder of a dev or test cluster's login host: a `login` certificate that
/// lets people connect, who then say who they are with their tokens.
pub const LOGIN: &str = "login";

/// Which daemon a [`Daemon`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Controller,
    Worker,
    Scheduler,
    Apiserver,
}

/// One daemon of the cluster: its name, where its data and log live, and its process.
#[derive(Debug)]
pub struct Daemon {
    pub name: String,
    pub kind: Kind,
    /// The client port (controllers) or HTTP port (apiservers), 0 for daemons that do not
    /// listen.
    pub port: u16,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    pub process: Process,
}

impl Daemon {
    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The pid while running.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Whether the process is still alive (reaps it if it has exited).
    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// The exit status if the process has exited on its own.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.process.exited()
    }
}

/// A running local cluster. Dropping it kills whatever is still running and removes every
/// link.
#[derive(Debug)]
pub struct DevCluster {
    spec: ClusterSpec,
    peers: String,
    pub controllers: Vec<Daemon>,
    pub workers: Vec<Daemon>,
    pub schedulers: Vec<Daemon>,
    pub apiservers: Vec<Daemon>,
    links: Vec<Link>,
    /// With [`ClusterSpec::kernel_cuts`]: the ports cut now.
    filter: Option<PacketFilter>,
}

impl DevCluster {
    /// The controllers' config file, if they were given one: what a later start of a
    /// controller reads again (a benchmark changes it between a load and a restart).
    pub fn config_file(&self) -> Option<&std::path::Path> {
        self.spec.config.as_deref()
    }

    /// Lays out the cluster and starts every daemon (see [`DevCluster::wait_ready`]).
    pub fn start(spec: ClusterSpec) -> Result<DevCluster, LaunchError> {
        std::fs::create_dir_all(&spec.data_dir)
            .map_err(io(format!("create {}", spec.data_dir.display())))?;
        let names: Vec<String> = (1..=spec.ports.len()).map(|i| format!("c{i}")).collect();
        let peers = names
            .iter()
            .zip(&spec.ports)
            .map(|(name, p)| format!("{name}=127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        let links = if spec.links {
            controller_links(&names, &spec.ports)?
        } else {
            Vec::new()
        };
        let filter = spec.kernel_cuts.then(PacketFilter::new).transpose()?;
        let tls_dir = spec.data_dir.join("tls");
        if spec.tls {
            make_certs(&tls_dir, &names, &spec)?;
        }
        let tls_args = |name: &str| -> Vec<String> {
            if !spec.tls {
                return Vec::new();
            }
            tls_flags(&tls_dir, name)
        };
        let controllers = names
            .iter()
            .zip(&spec.ports)
            .map(|(name, port)| {
                let data_dir = spec.data_dir.join(name);
                let raft_addrs = raft_addrs(&links, name);
                let mut args =
                    controller::args(name, &peers, &data_dir, spec.config.as_deref(), raft_addrs);
                args.extend(tls_args(name));
                daemon(&spec, name, Kind::Controller, *port, data_dir, args)
            })
            .collect();
        let mut links = links;
        // The peers a worker or scheduler is given: through links of its own, or direct.
        let mut peers_of = |daemon: &str| -> Result<String, LaunchError> {
            if !spec.daemon_links {
                return Ok(peers.clone());
            }
            let mut via = Vec::new();
            for (to, port) in names.iter().zip(&spec.ports) {
                let target = SocketAddr::from(([127, 0, 0, 1], *port));
                let link = Link::open(daemon, to, target).map_err(io("open a fault link"))?;
                via.push(format!("{to}={}", link.addr()));
                links.push(link);
            }
            Ok(via.join(","))
        };
        let mut workers = Vec::new();
        for i in 1..=spec.workers {
            let name = format!("w{i}");
            let data_dir = spec.data_dir.join(&name);
            let mut args = worker::args(&name, &peers_of(&name)?, &data_dir, &spec.worker_args);
            args.extend(tls_args(&name));
            let mut worker = daemon(&spec, &name, Kind::Worker, 0, data_dir, args);
            // Its account's home, where a job that names no directory runs: the cluster's
            // own, so that such jobs write nothing outside it.
            worker
                .process
                .set_env("HOME", worker::home_of(&spec.data_dir, &name));
            workers.push(worker);
        }
        let mut schedulers = Vec::new();
        for i in 1..=spec.schedulers {
            let name = format!("s{i}");
            let data_dir = spec.data_dir.join(&name);
            let mut args = scheduler::args(&name, &peers_of(&name)?, &spec.scheduler_args);
            args.extend(tls_args(&name));
            schedulers.push(daemon(&spec, &name, Kind::Scheduler, 0, data_dir, args));
        }
        let mut apiservers = Vec::new();
        let api_ports = match spec.apiserver_port {
            Some(first) => (0..spec.apiservers)
                .map(|i| first.saturating_add(i as u16))
                .collect(),
            None => free_ports(spec.apiservers)?,
        };
        for (i, port) in (1..=spec.apiservers).zip(api_ports) {
            let name = format!("api{i}");
            let data_dir = spec.data_dir.join(&name);
            let mut args = apiserver::args(port, &peers_of(&name)?, &spec.apiserver_args);
            args.extend(tls_args(&name));
            apiservers.push(daemon(&spec, &name, Kind::Apiserver, port, data_dir, args));
        }
        let mut cluster = DevCluster {
            spec,
            peers,
            controllers,
            workers,
            schedulers,
            apiservers,
            links,
            filter,
        };
        for i in 0..cluster.controllers.len() {
            cluster.start_controller(i)?;
        }
        for i in 0..cluster.workers.len() {
            cluster.start_worker(i)?;
        }
        for i in 0..cluster.schedulers.len() {
            cluster.start_scheduler(i)?;
        }
        for i in 0..cluster.apiservers.len() {
            cluster.start_apiserver(i)?;
        }
        Ok(cluster)
    }

    /// The `XCE_PEERS` value of this cluster (the controllers' client addresses).
    pub fn peers(&self) -> &str {
        &self.peers
    }

    /// Where a TLS cluster's CA and certificates are (see [`certs`]); `None` without TLS.
    pub fn tls_dir(&self) -> Option<PathBuf> {
        self.spec.tls.then(|| self.spec.data_dir.join("tls"))
    }

    /// The TLS setup of holder `name` of this cluster's CA (a daemon's, or [`ADMIN`]'s);
    /// `None` without TLS.
    pub fn tls_of(&self, name: &str) -> Result<Option<Arc<Tls>>, LaunchError> {
        let Some(dir) = self.tls_dir() else {
            return Ok(None);
        };
        Ok(Some(Tls::load(certs::paths_of(&dir, name))?))
    }

    /// A client configuration for this cluster: the admin's certificate with TLS.
    pub fn client_config(&self) -> Result<ClientConfig, LaunchError> {
        let mut config = ClientConfig::default();
        config.connect.tls = self.tls_of(ADMIN)?;
        Ok(config)
    }

    /// Every daemon, controllers first.
    pub fn daemons_mut(&mut self) -> impl Iterator<Item = &mut Daemon> {
        self.controllers
            .iter_mut()
            .chain(self.workers.iter_mut())
            .chain(self.schedulers.iter_mut())
            .chain(self.apiservers.iter_mut())
    }

    /// The daemon called `name`.
    pub fn daemon_mut(&mut self, name: &str) -> Result<&mut Daemon, LaunchError> {
        self.daemons_mut()
            .find(|d| d.name == name)
            .ok_or_else(|| LaunchError::UnknownDaemon {
                name: name.to_string(),
            })
    }

    /// Starts a new controller `name` on `port` that joins this running cluster
    /// (`xce-controller --join`, with TLS files when the cluster has them; no fault links),
    /// given `--peers` of the current members plus itself. Returns its index among the
    /// controllers; `xce admin members add` then makes it a member.
    pub fn start_joining_controller(
        &mut self,
        name: &str,
        port: u16,
    ) -> Result<usize, LaunchError> {
        let peers = format!("{},{name}=127.0.0.1:{port}", self.peers);
        let data_dir = self.spec.data_dir.join(name);
        let mut args = controller::args(name, &peers, &data_dir, self.spec.config.as_deref(), None);
        args.push("--join".to_string());
        if let Some(dir) = self.tls_dir() {
            args.extend(tls_flags(&dir, name));
        }
        let daemon = daemon(&self.spec, name, Kind::Controller, port, data_dir, args);
        self.controllers.push(daemon);
        let i = self.controllers.len() - 1;
        self.start_controller(i)?;
        Ok(i)
    }

    /// Starts controller `i` (again); its log is appended to.
    pub fn start_controller(&mut self, i: usize) -> Result<(), LaunchError> {
        self.controllers[i].process.start(&self.spec.log_filter)
    }

    /// Starts worker `i` (again); its log is appended to.
    pub fn start_worker(&mut self, i: usize) -> Result<(), LaunchError> {
        let home = worker::home_of(&self.spec.data_dir, &self.workers[i].name);
        std::fs::create_dir_all(&home).map_err(io(format!("create {}", home.display())))?;
        self.workers[i].process.start(&self.spec.log_filter)
    }

    /// Crashes worker `i` (SIGKILL) and reaps it.
    pub fn kill9_worker(&mut self, i: usize) -> Result<(), LaunchError> {
        self.workers[i].process.kill9()
    }

    /// Starts scheduler `i` (again); its log is appended to.
    pub fn start_scheduler(&mut self, i: usize) -> Result<(), LaunchError> {
        self.schedulers[i].process.start(&self.spec.log_filter)
    }

    /// Stops scheduler `i` cleanly (SIGTERM, then SIGKILL after `grace`).
    pub fn stop_scheduler(
        &mut self,
        i: usize,
        grace: Duration,
    ) -> Result<Option<ExitStatus>, LaunchError> {
        self.schedulers[i].process.stop(grace)
    }

    /// Crashes scheduler `i` (SIGKILL) and reaps it.
    pub fn kill9_scheduler(&mut self, i: usize) -> Result<(), LaunchError> {
        self.schedulers[i].process.kill9()
    }

    /// Starts apiserver `i` (again); its log is appended to.
    pub fn start_apiserver(&mut self, i: usize) -> Result<(), LaunchError> {
        self.apiservers[i].process.start(&self.spec.log_filter)
    }

    /// Stops apiserver `i` cleanly (SIGTERM, then SIGKILL after `grace`).
    pub fn stop_apiserver(
        &mut self,
        i: usize,
        grace: Duration,
    ) -> Result<Option<ExitStatus>, LaunchError> {
        self.apiservers[i].process.stop(grace)
    }

    /// Makes a user token (as the cluster's admin: with TLS the admin's certificate, without
    /// it a claimed admin role) and returns it.
    pub async fn create_token(
        &self,
        user: &str,
        role: xce_client::types::Role,
    ) -> Result<String, LaunchError> {
        use xce_client::ops::{claim_role, CreateToken};
        use xce_client::types::RequestToken;
        let client = xce_client::Client::new(
            xce_client::parse_candidates(self.peers())?,
            self.client_config()?,
        );
        if !self.spec.tls {
            claim_role(&client, xce_client::types::Role::Admin);
        }
        let token = xce_client::tokens::Token::generate();
        let op = CreateToken {
            token: RequestToken::random(),
            id: token.id().to_string(),
            user: user.to_string(),
            role,
            secret_hash: token.hash(),
            expires_in: None,
        };
        client.call(op).await.map_err(|source| LaunchError::Token {
            user: user.to_string(),
            reason: source.to_string(),
        })?;
        Ok(token.reveal())
    }

    /// The base URL of apiserver `i` (`http://127.0.0.1:PORT`).
    pub fn api_url(&self, i: usize) -> String {
        format!("http://{}", self.apiservers[i].addr())
    }

    /// Freezes worker `i` (SIGSTOP): cut off from the cluster while its jobs run on.
    pub fn pause_worker(&mut self, i: usize) -> Result<(), LaunchError> {
        self.workers[i].process.pause()
    }

    /// Thaws a paused worker (SIGCONT).
    pub fn resume_worker(&mut self, i: usize) -> Result<(), LaunchError> {
        self.workers[i].process.resume()
    }

    /// Stops worker `i` cleanly (SIGTERM, then SIGKILL after `grace`).
    pub fn stop_worker(
        &mut self,
        i: usize,
        grace: Duration,
    ) -> Result<Option<ExitStatus>, LaunchError> {
        self.workers[i].process.stop(grace)
    }

    /// Crashes controller `i` (SIGKILL) and reaps it.
    pub fn kill9(&mut self, i: usize) -> Result<(), LaunchError> {
        self.controllers[i].process.kill9()
    }

    /// Freezes controller `i` (SIGSTOP): a hung, not dead, node.
    pub fn pause(&mut self, i: usize) -> Result<(), LaunchError> {
        self.controllers[i].process.pause()
    }

    /// Thaws a paused controller (SIGCONT).
    pub fn resume(&mut self, i: usize) -> Result<(), LaunchError> {
        self.controllers[i].process.resume()
    }

    /// Stops controller `i` cleanly: SIGTERM, then SIGKILL after `grace`. Returns the exit
    /// status, or `None` when it had to be killed.
    pub fn stop(&mut self, i: usize, grace: Duration) -> Result<Option<ExitStatus>, LaunchError> {
        self.controllers[i].process.stop(grace)
    }

    /// Stops every running daemon (SIGTERM to all first, then waits); returns the names of
    /// those that had to be killed.
    pub fn stop_all(&mut self, grace: Duration) -> Vec<String> {
        let procs = self
            .apiservers
            .iter_mut()
            .chain(self.schedulers.iter_mut())
            .chain(self.workers.iter_mut())
            .chain(self.controllers.iter_mut())
            .map(|d| &mut d.process);
        process::stop_all(procs, grace)
    }

    /// Cuts every link between the daemons in `a` and those in `b`, both ways: a partition.
    /// Needs [`ClusterSpec::links`]; returns how many links were cut.
    pub fn partition(&self, a: &[&str], b: &[&str]) -> Result<usize, LaunchError> {
        let between = |l: &&Link| {
            (a.contains(&l.from()) && b.contains(&l.to()))
                || (b.contains(&l.from()) && a.contains(&l.to()))
        };
        let cut: Vec<&Link> = self.links.iter().filter(between).collect();
        for l in &cut {
            match &self.filter {
                Some(filter) => filter.cut(l.addr().port())?,
                None => l.set_cut(true),
            }
        }
        tracing::info!(?a, ?b, links = cut.len(), "partition");
        Ok(cut.len())
    }

    /// Cuts daemon `name` off from every controller (but itself), both ways: a controller
    /// from its peers, or a worker or scheduler (with [`ClusterSpec::daemon_links`]) from the
    /// cluster. Returns how many links were cut.
    pub fn isolate(&self, name: &str) -> Result<usize, LaunchError> {
        let others: Vec<String> = self
            .controllers
            .iter()
            .filter(|c| c.name != name)
            .map(|c| c.name.clone())
            .collect();
        let others: Vec<&str> = others.iter().map(String::as_str).collect();
        self.partition(&[name], &others)
    }

    /// Delays every link to and from `name` by `delay` each way (zero to end it); returns how
    /// many links changed.
    pub fn delay(&self, name: &str, delay: Duration) -> usize {
        let touched: Vec<&Link> = self
            .links
            .iter()
            .filter(|l| l.from() == name || l.to() == name)
            .collect();
        for l in &touched {
            l.set_delay(delay);
        }
        touched.len()
    }

    /// Heals every partition and removes every delay.
    pub fn heal(&self) -> Result<(), LaunchError> {
        if let Some(filter) = &self.filter {
            filter.heal()?;
        }
        for l in &self.links {
            l.set_cut(false);
            l.set_delay(Duration::ZERO);
        }
        Ok(())
    }
}

impl Drop for DevCluster {
    fn drop(&mut self) {
        // Workers first, and cleanly while the controllers still run: a worker stops its jobs
        // and removes its cgroups on SIGTERM; one SIGKILLed leaves both to the next run.
        process::stop_all(
            self.workers.iter_mut().map(|w| &mut w.process),
            WORKER_DROP_GRACE,
        );
        for d in self.daemons_mut() {
            d.process.kill_quietly();
        }
    }
}

/// How long a dropped cluster's workers have to stop their jobs.
const WORKER_DROP_GRACE: Duration = Duration::from_secs(5);

/// One link for every ordered pair of controllers.
fn controller_links(names: &[String], ports: &[u16]) -> Result<Vec<Link>, LaunchError> {
    let mut links = Vec::new();
    for from in names {
        for (to, port) in names.iter().zip(ports) {
            if from != to {
                let target = SocketAddr::from(([127, 0, 0, 1], *port));
                links.push(Link::open(from, to, target).map_err(io("open a fault link"))?);
            }
        }
    }
    Ok(links)
}

/// `--raft-addrs` for controller `name`: each peer through the link from `name` to it.
fn raft_addrs(links: &[Link], name: &str) -> Option<String> {
    let addrs: Vec<String> = links
        .iter()
        .filter(|l| l.from() == name)
        .map(|l| format!("{}={}", l.to(), l.addr()))
        .collect();
    (!addrs.is_empty()).then(|| addrs.join(","))
}

fn daemon(
    spec: &ClusterSpec,
    name: &str,
    kind: Kind,
    port: u16,
    data_dir: PathBuf,
    args: Vec<String>,
) -> Daemon {
    let bin = match kind {
        Kind::Controller => "xce-controller",
        Kind::Worker => "xce-worker",
        Kind::Scheduler => "xce-scheduler",
        Kind::Apiserver => "xce-apiserver",
    };
    let log = spec.data_dir.join(format!("{name}.log"));
    Daemon {
        name: name.to_string(),
        kind,
        port,
        data_dir,
        process: Process::new(name.to_string(), spec.bin_dir.join(bin), args, log.clone()),
        log,
    }
}

#[cfg(test)]
mod port_tests {
    use super::*;

    #[test]
    fn a_port_another_process_claimed_is_never_handed_out() {
        // Claims on a block of ports, each through a file of its own, as another process
        // holds them (a lock conflicts across open files, in one process too).
        let dir = std::env::temp_dir().join("xce-ports");
        std::fs::create_dir_all(&dir).unwrap();
        let claimed: Vec<(u16, std::fs::File)> = (PORTS.start..PORTS.start + 300)
            .filter_map(|port| {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(dir.join(port.to_string()))
                    .unwrap();
                file.try_lock().ok().map(|()| (port, file))
            })
            .collect();
        assert!(claimed.len() > 200, "{} claimed", claimed.len());
        let ports: std::collections::BTreeSet<u16> = claimed.iter().map(|(p, _)| *p).collect();
        for _ in 0..40 {
            let chosen = free_ports(16).unwrap();
            assert!(
                chosen.iter().all(|p| !ports.contains(p)),
                "handed out a claimed port: {chosen:?}"
            );
        }
    }

    #[test]
    fn free_ports_are_distinct_below_the_ephemeral_range_and_free() {
        let first = free_ports(16).unwrap();
        let second = free_ports(16).unwrap();
        let all: std::collections::BTreeSet<u16> = first.iter().chain(&second).copied().collect();
        assert_eq!(all.len(), 32, "{first:?} {second:?}");
        assert!(all.iter().all(|p| PORTS.contains(p)), "{all:?}");
        // Free: a port held here is never handed out. (Binding the chosen ports again after
        // the fact would race with the other test processes, which may take them meanwhile.)
        let held: Vec<std::net::TcpListener> = all
            .iter()
            .filter_map(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).ok())
            .collect();
        let held_ports: std::collections::BTreeSet<u16> = held
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        for _ in 0..20 {
            let more = free_ports(16).unwrap();
            assert!(
                more.iter().all(|p| !held_ports.contains(p)),
                "handed out a port in use: {more:?} {held_ports:?}"
            );
        }
    }
}
